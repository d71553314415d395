#!/usr/bin/env bash
# A-B of two mount.lmcfs binaries as read-only followers of one store in the
# single-host Ceph cluster of scripts/ceph-dev.sh (started, or reused if
# running): what each says the store occupies once the writer punched the
# dead records of a series (docs/ARCHITECTURE.md, "Hole punching",
# followers). Node W (this build's mount.lmcfs) writes SAVES torch.save
# checkpoints of 64 MiB of bf16 weights, each the last plus noise of 1e-3
# (reverse deltas rebase each one's predecessor, whose standalone records
# die and are punched); followers A (BIN_A) and B (BIN_B) mount the store
# `ro` at once, before the first save. After the saves and a wait of
# WAIT seconds, the script prints `user.lmcfs.disk_bytes` and
# `pack_disk_bytes` of all three mounts, and the error lines of each
# follower's log. Usage:
#   scripts/follower_space_ab.sh BIN_A BIN_B [SAVES] [WAIT]
# SAVES default 6, WAIT default 8. WORK (default
# /var/tmp/lmcfs-follower-space-ab) holds the mount points and local indexes.
set -euo pipefail
cd "$(dirname "$0")/.."
A=$1
B=$2
SAVES=${3:-6}
WAIT=${4:-8}
WORK=${WORK:-/var/tmp/lmcfs-follower-space-ab}
WRITER=build/tools/mountlmcfs/mount.lmcfs
eval "$(scripts/ceph-dev.sh start)"
NS=fsab-$$-$RANDOM
SPEC=rados:lmcfs/$NS
cleanup() {
  for m in a b w; do fusermount3 -u -z "$WORK/mnt_$m" 2>/dev/null || true; done
  rados -p lmcfs -N "$NS" ls 2>/dev/null | while read -r o; do rados -p lmcfs -N "$NS" rm "$o"; done
  rm -rf "$WORK"
}
trap cleanup EXIT
rm -rf "$WORK"
mkdir -p "$WORK"/{mnt_w,mnt_a,mnt_b,w,a,b}
mnt() { "$1" "$SPEC" "$WORK/mnt_$2" -o "local_dir=$WORK/$2,log_file=$WORK/log_$2${3:+,$3}"; }
mnt "$WRITER" w
mnt "$A" a ro
mnt "$B" b ro
python3 - "$WORK" "$SAVES" "$WAIT" <<'PY'
import os, sys, time, torch
work, saves, wait = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
torch.manual_seed(1)
t = torch.randn(32 << 20)
t0 = time.monotonic()
for i in range(saves):
    t = t + 1e-3 * torch.randn_like(t)
    with open(f'{work}/mnt_w/ckpt_{i}.pt', 'wb') as f:
        torch.save({'w': t.to(torch.bfloat16)}, f)
        f.flush()
        os.fsync(f.fileno())
print(f'{saves} saves of 64 MiB of bf16 in {time.monotonic() - t0:.1f} s; waiting {wait:g} s')
time.sleep(wait)
def fig(m, n): return int(os.getxattr(f'{work}/mnt_{m}', f'user.lmcfs.{n}'))
for m, who in (('w', 'writer'), ('a', 'follower A'), ('b', 'follower B')):
    print(f'{who:11} disk_bytes {fig(m, "disk_bytes"):>12,}  pack_disk_bytes {fig(m, "pack_disk_bytes"):>12,}  '
          f'pack_bytes {fig(m, "pack_bytes"):>12,}  files {len(os.listdir(f"{work}/mnt_{m}"))}')
PY
for m in a b; do
  echo "follower ${m^^}: $(grep -cF '[error]' "$WORK/log_$m" || true) error lines in its log"
  grep -F '[error]' "$WORK/log_$m" | head -2 | cut -c1-200 || true
done
