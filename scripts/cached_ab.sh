#!/usr/bin/env bash
# A-B of two mount.lmcfs binaries on what the kernel can answer from its
# caches: warm sequential reads of a 256 MiB file (half random bytes, half
# runs) at 4 KiB, 64 KiB and 1 MiB (one dd to warm, the second timed), the
# stat of a file 21 directories deep (2,000 times), open + close of it
# (2,000 times), and an `ls -l` of 1,000 files (os.listdir + os.stat of
# each, three times, after one of each). Alternating (A B A B ...), a fresh
# store and mount each, then the same on the backing disk (WORK) for a
# baseline. Usage:
#   scripts/cached_ab.sh BIN_A BIN_B [ROUNDS]
# ROUNDS default 2. WORK (default /var/tmp/lmcfs-cached-ab) is where the
# stores live.
set -euo pipefail
cd "$(dirname "$0")/.."
A=$1
B=$2
ROUNDS=${3:-2}
WORK=${WORK:-/var/tmp/lmcfs-cached-ab}
cleanup() {
  fusermount3 -u -z "$WORK/mnt" 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT
cleanup
mkdir -p "$WORK"
python3 - "$WORK/src.bin" <<'PY'
import random, sys
r = random.Random(1); p = r.randbytes(32768)
with open(sys.argv[1], 'wb') as f:
    for i in range(4096): f.write(p + bytes([i % 251]) * 32768)  # 256 MiB
PY

# Prints MiB/s of the second of two `dd bs=$2` reads of $1.
read_rate() {
  dd if="$1" of=/dev/null bs="$2" 2>/dev/null
  local t0 t1
  t0=$(date +%s.%N)
  dd if="$1" of=/dev/null bs="$2" 2>/dev/null
  t1=$(date +%s.%N)
  python3 -c "print(f'{256 / ($t1 - $t0):,.0f}')"
}

measure() { # DIR: prints one line
  local dir=$1 line="reads MiB/s:"
  cp "$WORK/src.bin" "$dir/f.bin"
  for bs in 4k 64k 1M; do line="$line $bs $(read_rate "$dir/f.bin" $bs)"; done
  cmp "$dir/f.bin" "$WORK/src.bin"
  line="$line; $(python3 - "$dir" <<'PY'
import os, sys, time
d = sys.argv[1]
p = d + '/w' + ''.join('/d%d' % i for i in range(20)); os.makedirs(p)
open(p + '/f', 'w').close()
t0 = time.time()
for i in range(2000): os.stat(p + '/f')
t1 = time.time()
for i in range(2000): os.close(os.open(p + '/f', os.O_RDONLY))
t2 = time.time()
q = d + '/many'; os.makedirs(q)
for i in range(1000): open(f'{q}/{i}', 'w').close()
for n in os.listdir(q): os.stat(f'{q}/{n}')
t3 = time.time()
for r in range(3):
    for n in os.listdir(q): os.stat(f'{q}/{n}')
t4 = time.time()
print('stat %.0f us, open+close %.0f us, ls -l of 1000 files %.1f ms'
      % ((t1 - t0) / 2000e-6, (t2 - t1) / 2000e-6, (t4 - t3) / 3e-3))
PY
)"
  echo "$line"
}

for round in $(seq "$ROUNDS"); do
  for which in A B; do
    bin=$A
    [ $which = B ] && bin=$B
    rm -rf "$WORK/store" "$WORK/mnt" && mkdir -p "$WORK/mnt"
    if ! "$bin" "$WORK/store" "$WORK/mnt" -o gc=off 2>"$WORK/mount.err"; then
      echo "cached_ab: $bin did not mount (its message below)" >&2
      cat "$WORK/mount.err" >&2
      exit 1
    fi
    echo "$which, round $round: $(measure "$WORK/mnt")"
    fusermount3 -u "$WORK/mnt"
  done
  rm -rf "$WORK/disk" && mkdir -p "$WORK/disk"
  echo "disk, round $round: $(measure "$WORK/disk")"
done
