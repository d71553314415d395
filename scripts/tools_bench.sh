#!/usr/bin/env bash
# Benchmarks of the operating tools, on real checkpoints:
#  1. lmcfs-fsck verification rate: bench-data/ckpt-step*.pt written through
#     a mount, then `lmcfs-fsck STORE` offline (every record checksum) and
#     `lmcfs-fsck --deep STORE` (also every
#     chunk decoded and its SHA-256 checked); rate = stored bytes / time.
#  2. Online gc with 50% dead data: half of those checkpoints deleted, then
#     a new checkpoint (NEW, default bench-data/minilm-f32.safetensors, not
#     yet in the store) copied in with fsync, once alone and once while
#     `lmcfs-gc MOUNT` compacts (the write starts 1 s into the gc and must end
#     before it); the drop in write throughput is the gc's impact.
# Usage: scripts/tools_bench.sh            Env: BUILD_DIR (default build),
#   WORK (default /var/tmp/lmcfs-tools-bench), RATE (gc --rate, default none),
#   KEEP=1 keeps the store.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
WORK=${WORK:-/var/tmp/lmcfs-tools-bench}
MOUNT_BIN=$BUILD_DIR/tools/mountlmcfs/mount.lmcfs
TOOLS=$BUILD_DIR/tools/lmcfs
for b in "$MOUNT_BIN" "$TOOLS/lmcfs-fsck" "$TOOLS/lmcfs-gc" "$TOOLS/lmcfs-stat"; do
  [ -x "$b" ] || { echo "build it first: ninja -C $BUILD_DIR mount.lmcfs lmcfs-gc lmcfs-stat lmcfs-fsck ($b missing)" >&2; exit 2; }
done
CKPTS=(bench-data/ckpt-step*.pt)
NEW=${NEW:-bench-data/minilm-f32.safetensors}
[ -f "${CKPTS[0]}" ] && [ -f "$NEW" ] || { echo "bench-data missing: python3 scripts/gen_bench_data.py" >&2; exit 2; }

rm -rf "$WORK"
mkdir -p "$WORK/store" "$WORK/mnt"
mount_it() { "$MOUNT_BIN" "$WORK/store" "$WORK/mnt" -o log_file="$WORK/log"; }
umount_it() {
  fusermount3 -u -z "$WORK/mnt" 2>/dev/null || true
  for _ in $(seq 300); do fuser "$WORK/store/LOCK" >/dev/null 2>&1 || return 0; sleep 0.2; done
  echo "daemon did not exit" >&2
  return 1
}
cleanup() {
  umount_it || true
  [ "${KEEP:-0}" = 1 ] || rm -rf "$WORK"
}
trap cleanup EXIT

# Copies $1 to $2 and fsyncs it; prints MB/s (decimal) of the copy.
copy_rate() {
  python3 - "$1" "$2" <<'PY'
import os, sys, time
src, dst = sys.argv[1], sys.argv[2]
t = time.perf_counter()
with open(src, 'rb') as f, open(dst, 'wb') as g:
    while True:
        b = f.read(4 << 20)
        if not b:
            break
        g.write(b)
    g.flush()
    os.fsync(g.fileno())
dt = time.perf_counter() - t
print(f"{os.path.getsize(src) / dt / 1e6:.1f}")
PY
}

echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), load $(cut -d' ' -f1-3 /proc/loadavg)"
mount_it
for f in "${CKPTS[@]}"; do cp "$f" "$WORK/mnt/"; done
sync -f "$WORK/mnt" 2>/dev/null || true
umount_it

for mode in "" --deep; do
# Cold: the pack bytes come from the disk, not from the page cache the copy filled.
if [ "$(id -u)" = 0 ]; then sync; echo 3 > /proc/sys/vm/drop_caches; fi
echo "== 1. lmcfs-fsck ${mode:+$mode }$WORK/store (offline, ${#CKPTS[@]} checkpoints)"
"$TOOLS/lmcfs-fsck" -q --json $mode "$WORK/store" > "$WORK/fsck.json"
python3 - "$WORK/fsck.json" "${mode:-record checksums}" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
b, s = j['verified_bytes'], j['verify_seconds']
print(f"fsck ({sys.argv[2]}): exit {j['exit_code']}, {j['store']['chunks_checked']} chunks, {b / 2**30:.2f} GiB stored, "
      f"store checks {s:.2f} s = {b / s / 2**30:.2f} GiB/s; whole run {j['seconds']:.2f} s = {b / j['seconds'] / 2**30:.2f} GiB/s")
PY
done

echo "== 2. online gc with 50% dead data vs a concurrent checkpoint write"
mount_it
i=0
for f in "${CKPTS[@]}"; do
  [ $((i % 2)) = 0 ] && rm "$WORK/mnt/$(basename "$f")"
  i=$((i + 1))
done
"$TOOLS/lmcfs-gc" --dry-run "$WORK/mnt"
cat "$NEW" > /dev/null  # source in the page cache for both runs
base=$(copy_rate "$NEW" "$WORK/mnt/alone.pt")
echo "write alone: $base MB/s"
rm "$WORK/mnt/alone.pt"
gc_args=(--json --threshold 0.6)
[ -n "${RATE:-}" ] && gc_args+=(--rate "$RATE")
"$TOOLS/lmcfs-gc" "${gc_args[@]}" "$WORK/mnt" > "$WORK/gc.json" &
gc_pid=$!
sleep 1
with=$(copy_rate "$NEW" "$WORK/mnt/with-gc.pt")
gc_running=$(kill -0 $gc_pid 2>/dev/null && echo yes || echo no)
wait $gc_pid
echo "write during gc: $with MB/s (gc still running when the write ended: $gc_running)"
python3 - "$WORK/gc.json" "$base" "$with" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
base, with_gc = float(sys.argv[2]), float(sys.argv[3])
print(f"gc: reclaimed {j['bytes_reclaimed'] / 2**20:.1f} MiB, {j['packs_rewritten']} packs rewritten, "
      f"{j['bytes_copied'] / 2**20:.1f} MiB copied, {j['seconds']:.2f} s")
print(f"write throughput drop during gc: {100 * (1 - with_gc / base):.1f}%")
PY
cmp "$NEW" "$WORK/mnt/with-gc.pt" && echo "with-gc.pt byte-identical"
for f in "${CKPTS[@]}"; do
  [ -f "$WORK/mnt/$(basename "$f")" ] && { cmp "$f" "$WORK/mnt/$(basename "$f")" || exit 1; }
done
echo "surviving checkpoints byte-identical"
umount_it
"$TOOLS/lmcfs-fsck" -q "$WORK/store" | tail -1
