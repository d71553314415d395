#!/usr/bin/env bash
# A-B of two mount.lmcfs binaries by what statfs (df) and the mount root's
# attributes cost on a store in RADOS: each binary in turn mounts the same
# store (written once, FILES files of 8 MiB, so that it has packs and
# journal records), then STATS statvfs calls on the mount and STATS reads of
# the root's user.lmcfs.disk_bytes run, timed; the OSD's CPU
# seconds meanwhile are printed with them. Rounds alternate A and B. The
# single-host Ceph cluster of scripts/ceph-dev.sh is started, or reused.
#   scripts/statfs_ab.sh BIN_A BIN_B [ROUNDS]
# ROUNDS default 3; FILES default 48; STATS default 300. WORK (default
# /var/tmp/lmcfs-statfs-ab) holds the mount point and local index.
set -euo pipefail
cd "$(dirname "$0")/.."
A=$1
B=$2
ROUNDS=${3:-3}
FILES=${FILES:-48}
STATS=${STATS:-300}
WORK=${WORK:-/var/tmp/lmcfs-statfs-ab}
eval "$(scripts/ceph-dev.sh start)"
NS=statfs-ab-$$-$RANDOM
STORE=rados:lmcfs/$NS
cleanup() {
  fusermount3 -u -z "$WORK/mnt" 2>/dev/null || true
  rados -p lmcfs -N "$NS" ls 2>/dev/null | while read -r o; do rados -p lmcfs -N "$NS" rm "$o"; done
  rm -rf "$WORK"
}
trap cleanup EXIT
rm -rf "$WORK"
mkdir -p "$WORK/mnt" "$WORK/local"
mount_with() {
  "$1" "$STORE" "$WORK/mnt" -o "local_dir=$WORK/local,log_file=$WORK/log,lease=4"
}
unmount() {
  local pid
  pid=$(pgrep -n -f "$STORE $WORK/mnt" || true)
  fusermount3 -u "$WORK/mnt"
  while [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; do sleep 0.1; done
}
mount_with "$A"
python3 -c "
import os, sys, random
d = sys.argv[1]
r = random.Random(1)
for i in range(int(sys.argv[2])):
    with open(f'{d}/f{i}.bin', 'wb') as f:
        f.write(r.randbytes(8 << 20)); f.flush(); os.fsync(f.fileno())
" "$WORK/mnt" "$FILES"
unmount
echo "store: $(rados -p lmcfs -N "$NS" ls | wc -l) objects"
cpu() { awk '{ printf "%.2f", ($14 + $15) / 100 }' "/proc/$1/stat"; }
osd=$(pgrep -o ceph-osd)
for ((r = 1; r <= ROUNDS; r++)); do
  for which in A B; do
    bin=$A
    [ "$which" = B ] && bin=$B
    mount_with "$bin"
    sleep 1
    o0=$(cpu "$osd")
    t_statfs=$(python3 -c "
import os, sys, time
t = time.perf_counter()
for _ in range(int(sys.argv[2])): os.statvfs(sys.argv[1])
print('%.2f' % (time.perf_counter() - t))" "$WORK/mnt" "$STATS")
    o1=$(cpu "$osd")
    t_xattr=$(python3 -c "
import os, sys, time
t = time.perf_counter()
for _ in range(int(sys.argv[2])): os.getxattr(sys.argv[1], 'user.lmcfs.disk_bytes')
print('%.2f' % (time.perf_counter() - t))" "$WORK/mnt" "$STATS")
    o2=$(cpu "$osd")
    used=$(df -B1 --output=used "$WORK/mnt" | tail -1)
    echo "round $r $which: $STATS statfs $t_statfs s, OSD CPU $(echo "$o1 - $o0" | bc) s;" \
      "$STATS disk_bytes reads $t_xattr s, OSD CPU $(echo "$o2 - $o1" | bc) s; df used $used"
    unmount
  done
done
