#!/usr/bin/env bash
# Writes a checkpoint with torch.save + fsync through an lmcfs mount and to
# the backing directory directly (same disk), then reads both back (cp to
# /dev/null after dropping caches when root), and reports MB/s and the
# stored size. Usage:
#   scripts/fs_bench.sh [SIZE_MIB] [DTYPE]     (defaults: 2048 bf16; dtype bf16|fp32|adam)
# Env: BUILD_DIR (default build), WORK (default /var/tmp/lmcfs-bench; put it
# on tmpfs for the CPU-bound figure), KEEP=1 keeps the files.
set -euo pipefail
cd "$(dirname "$0")/.."
SIZE_MIB=${1:-2048}
DTYPE=${2:-bf16}
BUILD_DIR=${BUILD_DIR:-build}
WORK=${WORK:-/var/tmp/lmcfs-bench}
BIN=$BUILD_DIR/tools/mountlmcfs/mount.lmcfs
[ -x "$BIN" ] || { echo "build mount.lmcfs first (ninja -C $BUILD_DIR mount.lmcfs)" >&2; exit 2; }
rm -rf "$WORK"
mkdir -p "$WORK/store" "$WORK/mnt" "$WORK/plain"
"$BIN" "$WORK/store" "$WORK/mnt" -o log_file="$WORK/log"
cleanup() {
  fusermount3 -u -z "$WORK/mnt" 2>/dev/null || true
  for _ in $(seq 50); do fuser "$WORK/store/LOCK" >/dev/null 2>&1 || break; sleep 0.2; done
  [ "${KEEP:-0}" = 1 ] || rm -rf "$WORK"
}
trap cleanup EXIT

python3 - "$SIZE_MIB" "$DTYPE" "$WORK" <<'PY'
import os, sys, time, torch
size_mib, dtype, work = int(sys.argv[1]), sys.argv[2], sys.argv[3]
torch.manual_seed(0)
piece = 64 << 20
state = {}
if dtype == 'adam':  # fp32 weights + two fp32 moments: a training checkpoint
    n = size_mib * (1 << 20) // 12  # elements per tensor: 3 fp32 tensors
    for i in range(0, n, piece // 4):
        m = min(piece // 4, n - i)
        w = torch.randn(m) * 0.02
        state[f'w{i}'] = w
        state[f'm{i}'] = torch.randn(m) * 1e-3
        state[f'v{i}'] = (torch.randn(m) * 1e-4) ** 2
else:
    dt = {'bf16': torch.bfloat16, 'fp32': torch.float32}[dtype]
    esz = torch.tensor([], dtype=dt).element_size()
    n = size_mib * (1 << 20) // esz
    for i in range(0, n, piece // esz):
        state[f't{i}'] = (torch.randn(min(piece // esz, n - i)) * 0.02).to(dt)
def save(path):
    t = time.time()
    with open(path, 'wb') as f:
        torch.save(state, f)
        f.flush()
        os.fsync(f.fileno())
    return time.time() - t
res = {}
for name in ('plain', 'mnt'):
    p = os.path.join(work, name, 'ckpt.pt')
    dt = save(p)
    sz = os.path.getsize(p)
    res[name] = (sz, dt)
    print(f'write {name:5s}: {sz / 1e6:9.1f} MB in {dt:6.2f} s = {sz / 1e6 / dt:7.1f} MB/s')
st = os.stat(os.path.join(work, 'mnt', 'ckpt.pt'))
stored = st.st_blocks * 512
print(f'stored size: {stored / 1e6:.1f} MB of {st.st_size / 1e6:.1f} MB = ratio {stored / st.st_size:.3f}')
print(f'write speedup (mnt vs plain): {res["plain"][1] / res["mnt"][1]:.2f}x; '
      f'disk-bound limit 1/ratio = {st.st_size / stored:.2f}x')
PY
for name in plain mnt; do
  [ "$(id -u)" = 0 ] && { sync; echo 3 > /proc/sys/vm/drop_caches; } || true
  start=$(date +%s.%N)
  cp "$WORK/$name/ckpt.pt" /dev/null
  end=$(date +%s.%N)
  size=$(stat -c %s "$WORK/$name/ckpt.pt")
  python3 -c "print(f'read  {\"$name\":5s}: {$size/1e6:9.1f} MB in {$end-$start:6.2f} s = {$size/1e6/($end-$start):7.1f} MB/s')"
done
echo "store directory: $(du -sm "$WORK/store" | cut -f1) MiB on disk"
