#!/usr/bin/env bash
# A-B of two mount.lmcfs binaries as the follower of a store another node
# writes (docs/ARCHITECTURE.md, "Followers and the union"), in the
# single-host Ceph cluster of scripts/ceph-dev.sh (started, or reused if
# running). Node B (this build's mount.lmcfs, rw=B) writes a 64 MiB file of
# random bytes; node A mounts the union of A and B's stores (rw=A) with
# each binary in turn (A B A B ...), a fresh local index each, and reads
# B's file: warm sequential reads at 4 KiB and 64 KiB (one dd at 1 MiB to
# warm, then each timed once), and 2,000 stats of it; then the same on the
# backing disk (WORK) for a baseline. Usage:
#   scripts/follower_ab.sh BIN_A BIN_B [ROUNDS]
# ROUNDS default 2. WORK (default /var/tmp/lmcfs-follower-ab) holds the
# mount points and local indexes.
set -euo pipefail
cd "$(dirname "$0")/.."
A=$1
B=$2
ROUNDS=${3:-2}
WORK=${WORK:-/var/tmp/lmcfs-follower-ab}
WRITER=build/tools/mountlmcfs/mount.lmcfs
# shellcheck source=scripts/union_ab_lib.sh
. scripts/union_ab_lib.sh
union_ab_setup fab a b
mkdir -p "$WORK/local_b"
"$WRITER" "$SPEC" "$WORK/mnt_b" -o "rw=$NS-b,local_dir=$WORK/local_b,log_file=$WORK/log_b"
python3 -c "import os, sys; open(sys.argv[1], 'wb').write(os.urandom(64 << 20))" "$WORK/mnt_b/f.bin"
sync "$WORK/mnt_b/f.bin"
cp "$WORK/mnt_b/f.bin" "$WORK/disk.bin"

# dd's rate of a read of $1 in blocks of $2.
rate() { dd if="$1" of=/dev/null bs="$2" 2>&1 | grep -o '[0-9.,]* [GM]B/s'; }
# Microseconds per os.stat of $1, over 2,000.
stat_us() {
  python3 -c "
import os, sys, time
t = time.perf_counter()
for i in range(2000): os.stat(sys.argv[1])
print('%.1f' % ((time.perf_counter() - t) / 2000e-6))" "$1"
}
measure() {
  dd if="$1" of=/dev/null bs=1M 2>/dev/null
  echo "dd 4k $(rate "$1" 4k), 64k $(rate "$1" 64k), stat $(stat_us "$1") us"
}

for ((r = 1; r <= ROUNDS; r++)); do
  for bin in "$A" "$B"; do
    rm -rf "$WORK/local_a"
    mkdir -p "$WORK/local_a"
    "$bin" "$SPEC" "$WORK/mnt_a" -o "rw=$NS-a,local_dir=$WORK/local_a,log_file=$WORK/log_a"
    for _ in $(seq 100); do [ -e "$WORK/mnt_a/f.bin" ] && break; sleep 0.1; done
    cmp "$WORK/disk.bin" "$WORK/mnt_a/f.bin"
    echo "round $r, $bin (node A, B's file): $(measure "$WORK/mnt_a/f.bin")"
    fusermount3 -u "$WORK/mnt_a"
    sleep 1
  done
done
echo "backing disk ($WORK): $(measure "$WORK/disk.bin")"
