#!/usr/bin/env bash
# Incremental snapshots (issue 5): writes a series of checkpoints through an
# lmcfs mount with delta=on and with delta=off (two fresh stores), in step
# order, each copied in with fsync; reports per checkpoint the logical size,
# stored bytes (off, on), the delta / standalone / dedup split (xattrs
# user.lmcfs.*), the per-chunk entropy bound min(standalone, XOR vs the
# predecessor) from `lmc bound`, and the write times; then reads the newest
# checkpoint back from each store (fresh mount each time, best of 3).
# Usage:
#   BUILD_DIR=build scripts/delta_bench.sh [SERIES_DIR] [GLOB]
# (defaults: bench-data/deep 'ckpt-step*.pt'; make the series with
# scripts/gen_bench_data.py --size deep --no-minilm). Env: WORK (default
# /var/tmp/lmcfs-delta-bench), CHAIN (delta_chain, default 4), KEEP=1.
set -euo pipefail
cd "$(dirname "$0")/.."
SERIES=${1:-bench-data/deep}
GLOB=${2:-ckpt-step*.pt}
BUILD_DIR=${BUILD_DIR:-build}
WORK=${WORK:-/var/tmp/lmcfs-delta-bench}
CHAIN=${CHAIN:-4}
BIN=$BUILD_DIR/tools/mountlmcfs/mount.lmcfs
LMC=$BUILD_DIR/tools/lmc
for b in "$BIN" "$LMC"; do
  [ -x "$b" ] || { echo "build $(basename "$b") first (ninja -C $BUILD_DIR mount.lmcfs lmc)" >&2; exit 2; }
done
mapfile -t FILES < <(ls "$SERIES"/$GLOB 2>/dev/null | sort -V)
[ "${#FILES[@]}" -ge 2 ] || { echo "need at least 2 files matching $SERIES/$GLOB" >&2; exit 2; }

rm -rf "$WORK"
mkdir -p "$WORK/mnt-off" "$WORK/mnt-on"
unmount() {  # [MODE...] (default both)
  for m in "${@:-off on}"; do
    for mm in $m; do
      fusermount3 -u -z "$WORK/mnt-$mm" 2>/dev/null || true
      for _ in $(seq 100); do fuser "$WORK/store-$mm/LOCK" >/dev/null 2>&1 || break; sleep 0.2; done
    done
  done
}
cleanup() {
  unmount
  [ "${KEEP:-0}" = 1 ] || rm -rf "$WORK"
}
trap cleanup EXIT
mount_store() {  # MODE: store-MODE at mnt-MODE with delta=MODE
  "$BIN" "$WORK/store-$1" "$WORK/mnt-$1" -o "log_file=$WORK/log-$1,delta=$1,delta_chain=$CHAIN"
}
now() { date +%s.%N; }
xattr() { python3 -c 'import os, sys; print(os.getxattr(sys.argv[2], "user.lmcfs." + sys.argv[1]).decode())' "$1" "$2"; }
calc() { python3 -c "print($1)"; }

echo "# delta_bench: ${#FILES[@]} files from $SERIES ($GLOB), delta_chain=$CHAIN, build $BUILD_DIR, commit $(git rev-parse --short HEAD)"
[ -f "$SERIES/train-manifest.json" ] && python3 - "$SERIES/train-manifest.json" <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))
c = m["config"]
print(f"# series: {m['architecture']['params']} params, saves every {c['save_every']} steps, "
      f"peak lr {c['lr']} ({m['optimizer'].get('schedule', '')}), AdamW")
PY

# Both stores mounted at once; each file goes to delta=off then delta=on,
# so that both see the same machine load.
declare -A T STORED DELTA ALONE DEDUP
mount_store off
mount_store on
for f in "${FILES[@]}"; do
  n=$(basename "$f")
  for mode in off on; do
    t0=$(now)
    dd if="$f" of="$WORK/mnt-$mode/$n" bs=4M conv=fsync status=none
    t1=$(now)
    T[$mode,$n]=$(calc "$t1 - $t0")
  done
done
for f in "${FILES[@]}"; do
  n=$(basename "$f")
  for mode in off on; do
    STORED[$mode,$n]=$(xattr stored_bytes "$WORK/mnt-$mode/$n")
    DELTA[$mode,$n]=$(xattr delta_bytes "$WORK/mnt-$mode/$n")
    ALONE[$mode,$n]=$(xattr standalone_bytes "$WORK/mnt-$mode/$n")
    DEDUP[$mode,$n]=$(xattr dedup_bytes "$WORK/mnt-$mode/$n")
  done
done
unmount

echo
echo "| checkpoint | logical | stored, delta=off | stored, delta=on | of which delta frames | standalone frames | dedup (logical) | bound min(standalone, XOR) | on / bound | write off (s) | write on (s) |"
echo "|---|---|---|---|---|---|---|---|---|---|---|"
prev=""
tot_on=0; tot_bound=0; tot_off=0; tw_off=0; tw_on=0
declare -a BARS
for f in "${FILES[@]}"; do
  n=$(basename "$f")
  if [ -n "$prev" ]; then bound=$("$LMC" bound "$f" "$prev" | tail -1 | cut -f7)
  else bound=$("$LMC" bound "$f" | tail -1 | cut -f7); fi
  logical=$(stat -c %s "$f")
  on=${STORED[on,$n]}; off=${STORED[off,$n]}
  ratio=$(calc "round($on / $bound, 4)")
  printf "| %s | %d | %d | %d | %d | %d | %d | %d | %s | %.2f | %.2f |\n" "$n" "$logical" "$off" "$on" \
    "${DELTA[on,$n]}" "${ALONE[on,$n]}" "${DEDUP[on,$n]}" "$bound" "$ratio" "${T[off,$n]}" "${T[on,$n]}"
  if [ -n "$prev" ]; then  # the targets concern the checkpoints after the first
    tot_on=$((tot_on + on)); tot_bound=$((tot_bound + bound)); tot_off=$((tot_off + off))
  fi
  tw_off=$(calc "$tw_off + ${T[off,$n]}"); tw_on=$(calc "$tw_on + ${T[on,$n]}")
  BARS+=("$n $off $on")
  prev=$f
done
echo
echo "After the first: stored on / bound = $(calc "round($tot_on / $tot_bound, 4)") (target <= 1.02); on / off = $(calc "round($tot_on / $tot_off, 4)")"
echo "Write time, all files: off ${tw_off}s, on ${tw_on}s: on / off = $(calc "round($tw_on / $tw_off, 3)") (target <= 1.15)"

echo
python3 - "${BARS[@]}" <<'PY'
import sys
rows = [r.split() for r in sys.argv[1:]]
top = max(int(r[1]) for r in rows) or 1
print("Stored bytes per checkpoint (bar: 60 columns = the largest; o = delta=off, n = delta=on):")
print("```")
for name, off, on in rows:
    for tag, v in (("o", int(off)), ("n", int(on))):
        print(f"{name if tag == 'o' else '':<26} {tag} {'#' * round(60 * v / top):<60} {v / 1e6:7.1f} MB")
print("```")
PY

# Reads of the newest checkpoint: fresh mount (cold daemon and FUSE page
# cache; pack files may sit in the host page cache for both), best of 3.
newest=$(basename "${FILES[-1]}")
echo
for mode in off on; do
  best=""
  for _ in 1 2 3; do
    mount_store "$mode"
    t0=$(now); cat "$WORK/mnt-$mode/$newest" > /dev/null; t1=$(now)
    cmp -s "$WORK/mnt-$mode/$newest" "${FILES[-1]}" || { echo "MISMATCH reading $newest (delta=$mode)" >&2; exit 1; }
    unmount "$mode"
    t=$(calc "$t1 - $t0")
    if [ -z "$best" ] || [ "$(calc "$t < $best")" = True ]; then best=$t; fi
  done
  eval "READ_$mode=$best"
done
echo "Read of the newest ($newest, chain of up to $CHAIN deltas): delta=off ${READ_off}s, delta=on ${READ_on}s: on / off = $(calc "round($READ_on / $READ_off, 3)") (target <= 1.2)"
