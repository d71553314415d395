#!/usr/bin/env bash
# Incremental snapshots: writes a series of checkpoints through an
# lmcfs mount with delta=off, delta=forward and delta=on (reverse deltas,
# the default), three fresh stores, in step order, each copied in with
# fsync; after each file, waits for the reverse mount's background rebases
# (user.lmcfs.pending_rebases = 0) and times that wait apart. Reports per
# checkpoint the logical size, stored bytes per mode, the delta /
# standalone / dedup split (xattrs user.lmcfs.*) of delta=on, the per-chunk
# entropy bounds min(standalone, XOR) from `lmc bound` against the
# predecessor (what forward deltas can reach) and against the successor
# (reverse deltas: the newest has none, so its bound is standalone), and the
# write times; then reads the newest and the oldest checkpoint back from
# each store (fresh mount each time, best of READS=5, modes interleaved).
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

MODES="off forward on"
rm -rf "$WORK"
for m in $MODES; do mkdir -p "$WORK/mnt-$m"; done
unmount() {  # [MODE...] (default all)
  for m in "${@:-$MODES}"; do
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

# The stores mounted at once; each file goes to every mode in turn, so
# that all see the same machine load. Background rebases of delta=on run
# while the next mode's copy runs; the wait after that is timed apart.
declare -A T STORED DELTA ALONE DEDUP BG
for m in $MODES; do mount_store "$m"; done
for f in "${FILES[@]}"; do
  n=$(basename "$f")
  for mode in $MODES; do
    t0=$(now)
    dd if="$f" of="$WORK/mnt-$mode/$n" bs=4M conv=fsync status=none
    t1=$(now)
    T[$mode,$n]=$(calc "$t1 - $t0")
  done
  t0=$(now)
  while [ "$(xattr pending_rebases "$WORK/mnt-on")" != 0 ]; do sleep 0.05; done
  BG[$n]=$(calc "$(now) - $t0")
done
for f in "${FILES[@]}"; do
  n=$(basename "$f")
  for mode in $MODES; do
    STORED[$mode,$n]=$(xattr stored_bytes "$WORK/mnt-$mode/$n")
    DELTA[$mode,$n]=$(xattr delta_bytes "$WORK/mnt-$mode/$n")
    ALONE[$mode,$n]=$(xattr standalone_bytes "$WORK/mnt-$mode/$n")
    DEDUP[$mode,$n]=$(xattr dedup_bytes "$WORK/mnt-$mode/$n")
  done
done
unmount

echo
echo "| checkpoint | logical | stored, off | stored, forward | bound vs predecessor | forward / bound | stored, on (reverse) | of which delta frames | standalone frames | dedup (logical) | bound vs successor | on / bound | write off / fwd / on (s) | rebase wait (s) |"
echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
tot_on=0; tot_on_b=0; tot_fw=0; tot_fw_b=0; tot_off=0; tot_off_all=0; tot_on_all=0; tot_fw_all=0
tw_off=0; tw_on=0; tw_fw=0; tbg=0
declare -a BARS
cnt=${#FILES[@]}
for ((i = 0; i < cnt; i++)); do
  f=${FILES[i]}; n=$(basename "$f")
  if ((i > 0)); then bfw=$("$LMC" bound "$f" "${FILES[i-1]}" | tail -1 | cut -f7)
  else bfw=$("$LMC" bound "$f" | tail -1 | cut -f7); fi
  if ((i + 1 < cnt)); then brv=$("$LMC" bound "$f" "${FILES[i+1]}" | tail -1 | cut -f7)
  else brv=$("$LMC" bound "$f" | tail -1 | cut -f7); fi
  logical=$(stat -c %s "$f")
  on=${STORED[on,$n]}; off=${STORED[off,$n]}; fw=${STORED[forward,$n]}
  printf "| %s | %d | %d | %d | %d | %s | %d | %d | %d | %d | %d | %s | %.2f / %.2f / %.2f | %.2f |\n" "$n" "$logical" \
    "$off" "$fw" "$bfw" "$(calc "round($fw / $bfw, 4)")" "$on" "${DELTA[on,$n]}" "${ALONE[on,$n]}" "${DEDUP[on,$n]}" \
    "$brv" "$(calc "round($on / $brv, 4)")" "${T[off,$n]}" "${T[forward,$n]}" "${T[on,$n]}" "${BG[$n]}"
  # The bound targets concern the saves that have a neighbour to delta
  # against: after the first (forward), before the newest (reverse).
  if ((i > 0)); then tot_fw=$((tot_fw + fw)); tot_fw_b=$((tot_fw_b + bfw)); fi
  if ((i + 1 < cnt)); then tot_on=$((tot_on + on)); tot_on_b=$((tot_on_b + brv)); fi
  tot_off_all=$((tot_off_all + off)); tot_on_all=$((tot_on_all + on)); tot_fw_all=$((tot_fw_all + fw))
  tw_off=$(calc "$tw_off + ${T[off,$n]}"); tw_on=$(calc "$tw_on + ${T[on,$n]}"); tw_fw=$(calc "$tw_fw + ${T[forward,$n]}")
  tbg=$(calc "$tbg + ${BG[$n]}")
  BARS+=("$n $off $fw $on")
done
echo
echo "forward, after the first: stored / bound vs predecessor = $(calc "round($tot_fw / $tot_fw_b, 4)") (target <= 1.02)"
echo "on (reverse), before the newest: stored / bound vs successor = $(calc "round($tot_on / $tot_on_b, 4)") (target <= 1.02)"
echo "whole series stored: off $tot_off_all, forward $tot_fw_all ($(calc "round($tot_fw_all / $tot_off_all, 4)") of off), on $tot_on_all ($(calc "round($tot_on_all / $tot_off_all, 4)") of off)"
echo "Write time, all files: off ${tw_off}s, forward ${tw_fw}s, on ${tw_on}s: forward / off = $(calc "round($tw_fw / $tw_off, 3)"), on / off = $(calc "round($tw_on / $tw_off, 3)") (target <= 1.15); rebase waits after the copies: ${tbg}s in all"

echo
python3 - "${BARS[@]}" <<'PY'
import sys
rows = [r.split() for r in sys.argv[1:]]
top = max(int(x) for r in rows for x in r[1:]) or 1
print("Stored bytes per checkpoint (bar: 60 columns = the largest; o = delta=off, f = delta=forward, n = delta=on):")
print("```")
for name, off, fw, on in rows:
    for tag, v in (("o", int(off)), ("f", int(fw)), ("n", int(on))):
        print(f"{name if tag == 'o' else '':<26} {tag} {'#' * round(60 * v / top):<60} {v / 1e6:7.1f} MB")
print("```")
PY

# Reads of the newest and of the oldest checkpoint: fresh mount (cold
# daemon and FUSE page cache; pack files may sit in the host page cache for
# all), best of READS (default 5), the modes interleaved so that each sees
# the same load.
READS=${READS:-5}
declare -A BEST
# best_reads REPS SRC...: for each mode, the best of REPS reads of the files
# SRC... (in order, one fresh mount per read, modes interleaved) into
# BEST[mode]; every read is then compared with its source.
best_reads() {
  local reps=$1 mode t t0 src
  shift
  BEST=()
  for _ in $(seq "$reps"); do
    for mode in $MODES; do
      mount_store "$mode"
      t0=$(now)
      for src in "$@"; do cat "$WORK/mnt-$mode/$(basename "$src")" > /dev/null; done
      t=$(calc "$(now) - $t0")
      for src in "$@"; do
        cmp -s "$WORK/mnt-$mode/$(basename "$src")" "$src" ||
          { echo "MISMATCH reading $(basename "$src") (delta=$mode)" >&2; exit 1; }
      done
      unmount "$mode"
      if [ -z "${BEST[$mode]:-}" ] || [ "$(calc "$t < ${BEST[$mode]}")" = True ]; then BEST[$mode]=$t; fi
    done
  done
}
ratios() { echo "off ${BEST[off]}s, forward ${BEST[forward]}s, on ${BEST[on]}s: forward / off = $(calc "round(${BEST[forward]} / ${BEST[off]}, 3)"), on / off = $(calc "round(${BEST[on]} / ${BEST[off]}, 3)")"; }
echo
best_reads "$READS" "${FILES[-1]}"
echo "Read of the newest ($(basename "${FILES[-1]}"), delta_chain=$CHAIN), best of $READS: $(ratios) (target for the newest <= 1.2)"
best_reads "$READS" "${FILES[0]}"
echo "Read of the oldest ($(basename "${FILES[0]}"), delta_chain=$CHAIN), best of $READS: $(ratios)"
# The whole series in step order on one fresh mount (bases read for one
# file may serve the next from the caches), best of 3.
best_reads 3 "${FILES[@]}"
echo "Read of the whole series in step order, best of 3: $(ratios)"
