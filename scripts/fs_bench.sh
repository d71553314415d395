#!/usr/bin/env bash
# Filesystem benchmark: torch.save + fsync of one checkpoint to the plain
# disk, to btrfs compress-force=zstd:1 (loop device on the same disk) and
# through an lmcfs mount, A-B-C-C-B-A; cold reads (caches dropped) and the
# mount's warm re-read; daemon CPU-seconds per GiB; the disk-bound limit
# (scripts/fs_bench.py). Usage:
#   scripts/fs_bench.sh [SIZE_MIB] [DTYPE]     (defaults: 2048 bf16; dtype bf16|fp32|adam)
#   scripts/fs_bench.sh all [SIZE_MIB]         every case: bf16 and adam on the disk,
#       bf16 with everything on tmpfs (the CPU-bound ceiling), and 4 writers
#   scripts/fs_bench.sh writers [SIZE_MIB]     (default 512): 4 processes each write
#       their own SIZE_MIB shard with fsync, at once, to the disk and through the mount
#   scripts/fs_bench.sh rss [SIZE_MIB]         (default 10240): the daemon's peak
#       memory (VmHWM) while one file of SIZE_MIB bf16-like data is written in
#       64 MiB pieces and fsynced, against the configured write buffer + cache.
# Env: BUILD_DIR (default build), WORK (default /var/tmp/lmcfs-bench; put it
# on tmpfs for the CPU-bound figure), MOUNT_OPTS (extra -o options),
# BEFORE_BIN (another mount.lmcfs, e.g. an earlier commit's, run in the same
# order as case "before").
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
BUILD_DIR=${BUILD_DIR:-build}
BIN=$BUILD_DIR/tools/mountlmcfs/mount.lmcfs
[ -x "$BIN" ] || { echo "build mount.lmcfs first (ninja -C $BUILD_DIR mount.lmcfs)" >&2; exit 2; }
if [ "${1:-}" = writers ]; then
  SIZE_MIB=${2:-512}
  WORK=${WORK:-/var/tmp/lmcfs-bench}
  rm -rf "$WORK"
  mkdir -p "$WORK/store" "$WORK/mnt" "$WORK/plain"
  "$BIN" "$WORK/store" "$WORK/mnt" -o "log_file=$WORK/log${MOUNT_OPTS:+,$MOUNT_OPTS}"
  cleanup() {
    fusermount3 -u -z "$WORK/mnt" 2>/dev/null || true
    for _ in $(seq 50); do fuser "$WORK/store/LOCK" >/dev/null 2>&1 || break; sleep 0.2; done
    rm -rf "$WORK"
  }
  trap cleanup EXIT
  python3 - "$SIZE_MIB" "$WORK" <<'PY'
import os, sys, time, torch
from multiprocessing import Process
size_mib, work = int(sys.argv[1]), sys.argv[2]
def shard(rank):
    g = torch.Generator().manual_seed(rank)
    return {f't{i}': (torch.randn(32 << 20, generator=g) * 0.02).to(torch.bfloat16)
            for i in range(size_mib // 64)}
def write(path, rank):
    st = shard(rank)
    t = time.time()
    with open(path, 'wb') as f:
        torch.save(st, f); f.flush(); os.fsync(f.fileno())
def run(d):
    ps = [Process(target=write, args=(os.path.join(d, f'rank{r}.pt'), r)) for r in range(4)]
    t = time.time()
    for p in ps: p.start()
    for p in ps: p.join()
    return time.time() - t
res = {}
for d in ('plain', 'mnt', 'mnt', 'plain'):
    for r in range(4):
        p = os.path.join(work, d, f'rank{r}.pt')
        if os.path.exists(p): os.remove(p)
    os.sync()
    dt = run(os.path.join(work, d))
    total = sum(os.path.getsize(os.path.join(work, d, f'rank{r}.pt')) for r in range(4))
    res.setdefault(d, []).append(dt)
    print(f'4 writers {d:5s}: {total / 1e6:.0f} MB in {dt:.2f} s = {total / 1e6 / dt:.0f} MB/s (includes making the tensors)', flush=True)
print(f'4 writers: mount {min(res["plain"]) / min(res["mnt"]):.2f}x the plain disk (best of two each)')
PY
  exit 0
fi
if [ "${1:-}" = all ]; then
  SIZE_MIB=${2:-2048}
  echo "== bf16 weights, ${SIZE_MIB} MiB, store on the disk ($(df --output=source "${WORK:-/var/tmp}" | tail -1))"
  "$0" "$SIZE_MIB" bf16
  echo; echo "== fp32 weights + AdamW moments, ${SIZE_MIB} MiB, store on the disk"
  "$0" "$SIZE_MIB" adam
  echo; echo "== bf16 weights, ${SIZE_MIB} MiB, everything on tmpfs (CPU-bound ceiling)"
  WORK=/dev/shm/lmcfs-bench "$0" "$SIZE_MIB" bf16
  echo; echo "== 4 writers, 512 MiB each"
  "$0" writers 512
  exit 0
fi
SIZE_MIB=${1:-2048}
DTYPE=${2:-bf16}
WORK=${WORK:-/var/tmp/lmcfs-bench}
rm -rf "$WORK"
mkdir -p "$WORK"
trap 'fusermount3 -u -z "$WORK/mnt" 2>/dev/null || true; umount "$WORK/btrfs" 2>/dev/null || true; rm -rf "$WORK"' EXIT
python3 scripts/fs_bench.py "$SIZE_MIB" "$DTYPE" --work "$WORK" --bin "$BIN" --mount-opts "${MOUNT_OPTS:-}" \
  ${BEFORE_BIN:+--bin-before "$BEFORE_BIN"}
