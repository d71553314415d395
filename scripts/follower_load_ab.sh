#!/usr/bin/env bash
# A-B of two mount.lmcfs binaries as a follower, by what following costs
# the writer and the cluster: node W (this build's mount.lmcfs) mounts the
# union of stores W and F writing W, and makes, renames and removes 500
# small files (3 KB each, each step its own commit: a journal record and a
# notify to the followers); node F mounts the same union writing F, with
# each binary in turn, or is not mounted at all (the baseline), in rounds
# (none A B none A B ...). Prints per run the workload's seconds and the
# CPU seconds the OSD and F's daemon spent meanwhile, in the single-host
# Ceph cluster of scripts/ceph-dev.sh (started, or reused if running).
#   scripts/follower_load_ab.sh BIN_A BIN_B [ROUNDS]
# ROUNDS default 3. WORK (default /var/tmp/lmcfs-follower-load-ab) holds
# the mount points and local indexes.
set -euo pipefail
cd "$(dirname "$0")/.."
A=$1
B=$2
ROUNDS=${3:-3}
WORK=${WORK:-/var/tmp/lmcfs-follower-load-ab}
WRITER=build/tools/mountlmcfs/mount.lmcfs
# shellcheck source=scripts/union_ab_lib.sh
. scripts/union_ab_lib.sh
union_ab_setup flab w f
mkdir -p "$WORK/local_w"
"$WRITER" "$SPEC" "$WORK/mnt_w" -o "rw=$NS-w,local_dir=$WORK/local_w,log_file=$WORK/log_w"
# CPU seconds (user + system) of process $1 so far.
cpu() { awk '{ printf "%.2f", ($14 + $15) / 100 }' "/proc/$1/stat"; }
osd=$(pgrep -o ceph-osd)
for ((r = 1; r <= ROUNDS; r++)); do
  for which in none A B; do
    fpid=""
    if [ "$which" != none ]; then
      bin=$A
      [ "$which" = B ] && bin=$B
      rm -rf "$WORK/local_f"
      mkdir -p "$WORK/local_f"
      "$bin" "$SPEC" "$WORK/mnt_f" -o "rw=$NS-f,local_dir=$WORK/local_f,log_file=$WORK/log_f"
      fpid=$(pgrep -n -f "$SPEC $WORK/mnt_f")
      sleep 2
    fi
    o0=$(cpu "$osd")
    f0=0
    [ -n "$fpid" ] && f0=$(cpu "$fpid")
    secs=$(python3 -c "
import os, sys, time
d = sys.argv[1]
os.makedirs(d, exist_ok=True)
t = time.perf_counter()
for i in range(500):
    p = f'{d}/f{i}'
    with open(p, 'wb') as f:
        f.write(os.urandom(3000))
    os.rename(p, p + '.x')
    os.unlink(p + '.x')
print('%.2f' % (time.perf_counter() - t))" "$WORK/mnt_w/small-$r-$which")
    o1=$(cpu "$osd")
    f1=0
    [ -n "$fpid" ] && f1=$(cpu "$fpid")
    echo "round $r follower $which: ${secs} s; OSD CPU $(echo "$o1 - $o0" | bc) s; follower CPU $(echo "$f1 - $f0" | bc) s"
    if [ -n "$fpid" ]; then
      fusermount3 -u "$WORK/mnt_f"
      while kill -0 "$fpid" 2>/dev/null; do sleep 0.1; done
    fi
  done
done
