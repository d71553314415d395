#!/usr/bin/env bash
# Writes a checkpoint with torch.save + fsync through an lmcfs mount and to
# the backing directory directly (same disk), then reads both back (cp to
# /dev/null after dropping caches when root), and reports MB/s and the
# stored size, and the size `lmc compress` makes of the same file. Usage:
#   scripts/fs_bench.sh [SIZE_MIB] [DTYPE]     (defaults: 2048 bf16; dtype bf16|fp32|adam)
#   scripts/fs_bench.sh rss [SIZE_MIB]         (default 10240): the daemon's peak
#       memory (VmHWM) while one file of SIZE_MIB bf16-like data is written in
#       64 MiB pieces and fsynced, against the configured write buffer + cache.
# Env: BUILD_DIR (default build), WORK (default /var/tmp/lmcfs-bench; put it
# on tmpfs for the CPU-bound figure), KEEP=1 keeps the files, MOUNT_OPTS
# (extra -o options, e.g. write_buffer=128M,cache_size=64M).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-}" = rss ]; then
  SIZE_MIB=${2:-10240}
  BUILD_DIR=${BUILD_DIR:-build}
  WORK=${WORK:-/var/tmp/lmcfs-rss}
  BIN=$BUILD_DIR/tools/mountlmcfs/mount.lmcfs
  OPTS=${MOUNT_OPTS:-write_buffer=256M,cache_size=64M}
  [ -x "$BIN" ] || { echo "build mount.lmcfs first (ninja -C $BUILD_DIR mount.lmcfs)" >&2; exit 2; }
  rm -rf "$WORK"
  mkdir -p "$WORK/store" "$WORK/mnt"
  # -f: this process is the daemon, so its pid is known.
  "$BIN" "$WORK/store" "$WORK/mnt" -f -o "log_file=$WORK/log,$OPTS" &
  DAEMON=$!
  cleanup() {
    fusermount3 -u -z "$WORK/mnt" 2>/dev/null || true
    wait "$DAEMON" 2>/dev/null || true
    [ "${KEEP:-0}" = 1 ] || rm -rf "$WORK"
  }
  trap cleanup EXIT
  for _ in $(seq 100); do mountpoint -q "$WORK/mnt" && break; sleep 0.1; done
  mountpoint -q "$WORK/mnt" || { echo "mount failed: $(tail -3 "$WORK/log")" >&2; exit 1; }
  python3 - "$SIZE_MIB" "$WORK/mnt/big.bin" <<'PY'
import os, sys, time, numpy as np
size_mib, path = int(sys.argv[1]), sys.argv[2]
piece = 64 << 20
rng = np.random.default_rng(0)
# bf16-like: the top halves of normal(0, 0.02) float32s; each piece differs
# (a counter in the low mantissa bits) so nothing deduplicates.
base = (rng.standard_normal(piece // 2, dtype=np.float32) * 0.02).view(np.uint32) >> 16
base = base.astype(np.uint16)
t = time.time()
with open(path, 'wb') as f:
    for i in range(size_mib * (1 << 20) // piece):
        f.write((base ^ np.uint16(i & 7)).tobytes())
    f.flush()
    os.fsync(f.fileno())
dt = time.time() - t
print(f'wrote {size_mib} MiB in {dt:.1f} s = {size_mib * 1.048576 / dt:.1f} MB/s')
PY
  hwm=$(awk '/VmHWM/ {print $2}' /proc/$DAEMON/status)
  st=$(stat -c '%s %b' "$WORK/mnt/big.bin")
  echo "options: $OPTS"
  echo "daemon peak RSS (VmHWM): $((hwm / 1024)) MiB"
  python3 -c "s, b = map(int, '$st'.split()); print(f'stored {b*512/1e6:.1f} MB of {s/1e6:.1f} MB = ratio {b*512/s:.3f}')"
  exit 0
fi
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
LMC=$BUILD_DIR/tools/lmc
if [ -x "$LMC" ]; then
  "$LMC" compress -q "$WORK/plain/ckpt.pt" "$WORK/ckpt.lmc" >/dev/null
  python3 - "$WORK" <<'PY'
import os, sys
w = sys.argv[1]
st = os.stat(os.path.join(w, 'mnt', 'ckpt.pt'))
lmc = os.path.getsize(os.path.join(w, 'ckpt.lmc'))
print(f'lmc compress: {lmc / 1e6:.1f} MB; mount stores {st.st_blocks * 512 / lmc * 100 - 100:+.2f}% vs lmc compress')
PY
  rm -f "$WORK/ckpt.lmc"
fi
for name in plain mnt; do
  [ "$(id -u)" = 0 ] && { sync; echo 3 > /proc/sys/vm/drop_caches; } || true
  start=$(date +%s.%N)
  cp "$WORK/$name/ckpt.pt" /dev/null
  end=$(date +%s.%N)
  size=$(stat -c %s "$WORK/$name/ckpt.pt")
  python3 -c "print(f'read  {\"$name\":5s}: {$size/1e6:9.1f} MB in {$end-$start:6.2f} s = {$size/1e6/($end-$start):7.1f} MB/s')"
done
echo "store directory: $(du -sm "$WORK/store" | cut -f1) MiB on disk"
