#!/usr/bin/env bash
# Space on the backing disk under checkpoint rotation, written by a real
# training program: a Hugging Face Trainer (small GPT-2 built from its
# config, random init, CPU; scripts/space_bench.py train) saving every
# SAVE_STEPS steps with save_total_limit=2, SAVES saves:
#  0. Empty store: a fresh store mounted (idle 3 s) and after unmount.
#  1. Rotation run, twice: output_dir in a plain directory, then inside a
#     fresh lmcfs mount (store on the same disk). Once a second: the bytes
#     allocated (st_blocks * 512) by the plain dir or by the store dir
#     (index/ and packs/ apart), and the apparent and stored bytes of the
#     live files; then DRAIN more seconds of samples to see background
#     work. Each save's duration comes from a TrainerCallback.
#  2. Delete-all: every file of the mount deleted, then the store sampled
#     for DELETE_WAIT s (target: under 1 MiB plus its index within 60 s of
#     idle), and once more after unmount.
# Writes to WORK: space-LABEL.csv (every sample, columns run and phase),
# space-LABEL-saves.csv, space-LABEL.md (the summary, also printed) and
# space-LABEL.png (plot); the data dirs in WORK/LABEL are removed on exit.
# Usage:
#   BUILD_DIR=build scripts/space_bench.sh
#   LABEL=gc-off MOUNT_OPTS=gc=off scripts/space_bench.sh
# Env: LABEL (default "default"), MOUNT_OPTS (extra mount -o options,
# comma-separated, default none), LIMIT (save_total_limit, default 2; 0
# keeps every save: a checkpoint series), SAVES (default 20), SAVE_STEPS (default
# 2), DRAIN (default 30), DELETE_WAIT (default 60), THREADS (torch threads,
# default 2), SAMPLE (seconds between samples, default 1), WORK (default /var/tmp/lmcfs-space-bench), KEEP=1 keeps the
# data dirs. Needs: scripts/install-deps.sh --bench (transformers,
# accelerate, matplotlib).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
WORK=${WORK:-/var/tmp/lmcfs-space-bench}
LABEL=${LABEL:-default}
MOUNT_OPTS=${MOUNT_OPTS:-}
SAVES=${SAVES:-20}
SAVE_STEPS=${SAVE_STEPS:-2}
LIMIT=${LIMIT:-2}
DRAIN=${DRAIN:-30}
DELETE_WAIT=${DELETE_WAIT:-60}
THREADS=${THREADS:-2}
SAMPLE=${SAMPLE:-1}
MOUNT_BIN=$BUILD_DIR/tools/mountlmcfs/mount.lmcfs
STAT_BIN=$BUILD_DIR/tools/lmcfs/lmcfs-stat
PY=${PYTHON:-python3}
for b in "$MOUNT_BIN" "$STAT_BIN"; do
  [ -x "$b" ] || { echo "build it first: ninja -C $BUILD_DIR mount.lmcfs lmcfs-stat ($b missing)" >&2; exit 2; }
done
case "$LABEL" in *[!A-Za-z0-9._-]*|"") echo "LABEL: letters, digits, . _ - only" >&2; exit 2 ;; esac
"$PY" -c 'import transformers, accelerate, matplotlib' 2>/dev/null ||
  { echo "missing Python packages: scripts/install-deps.sh --bench" >&2; exit 2; }

D=$WORK/$LABEL
OUT=$WORK/space-$LABEL
rm -rf "$D"
rm -f "$OUT.csv" "$OUT-saves.csv" "$OUT.md" "$OUT.png" "$OUT-stat.json"
mkdir -p "$D"/{plain,mnt,empty-mnt}

declare -A PIDS  # mountpoint -> daemon pid
# mount_it STORE MNT: starts the daemon in the foreground mode as our
# child (its pid is what /proc/PID/io and cleanup need) and waits until the
# mount is there.
mount_it() {
  local opts="log_file=$D/log-$(basename "$2")${MOUNT_OPTS:+,$MOUNT_OPTS}"
  "$MOUNT_BIN" "$1" "$2" -f -o "$opts" 2>>"$D/stderr-$(basename "$2")" &
  PIDS[$2]=$!
  for _ in $(seq 300); do
    mountpoint -q "$2" && return 0
    kill -0 "${PIDS[$2]}" 2>/dev/null || break
    sleep 0.1
  done
  echo "mount.lmcfs $1 $2 -f -o $opts did not mount; its stderr:" >&2
  cat "$D/stderr-$(basename "$2")" >&2
  return 1
}
# umount_it MNT: lazy unmount, then waits for the daemon (it flushes and
# finishes background work on unmount), killing it after 120 s.
umount_it() {
  local pid=${PIDS[$1]:-}
  fusermount3 -u -z "$1" 2>/dev/null || true
  [ -n "$pid" ] || return 0
  for _ in $(seq 1200); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  if kill -0 "$pid" 2>/dev/null; then
    echo "daemon $pid ($1) still running 120 s after unmount: killing it" >&2
    kill "$pid" 2>/dev/null || true; sleep 2; kill -9 "$pid" 2>/dev/null || true
  fi
  wait "$pid" 2>/dev/null || true
  unset "PIDS[$1]"
}
cleanup() {
  for m in "${!PIDS[@]}"; do umount_it "$m"; done
  [ "${KEEP:-0}" = 1 ] || rm -rf "$D"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

machine="$(nproc) cores, $(lscpu | sed -n 's/^Model name: *//p' | head -1)"
header="space_bench: label $LABEL, MOUNT_OPTS='$MOUNT_OPTS', $SAVES saves every $SAVE_STEPS steps, drain ${DRAIN}s, delete wait ${DELETE_WAIT}s; build $BUILD_DIR, commit $(git rev-parse --short HEAD); $machine; load at start $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# $header"
t_begin=$(date +%s)

echo "== 0. empty store"
mount_it "$D/empty-store" "$D/empty-mnt"
sleep 3
"$PY" scripts/space_bench.py du "$D/empty-store" > "$D/empty-mounted.json"
umount_it "$D/empty-mnt"
"$PY" scripts/space_bench.py du "$D/empty-store" > "$D/empty-unmounted.json"
cat "$D/empty-mounted.json" "$D/empty-unmounted.json"

train_args=(-- --saves "$SAVES" --save-steps "$SAVE_STEPS" --limit "$LIMIT" --threads "$THREADS")
echo "== 1a. rotation run, plain dir $D/plain"
"$PY" scripts/space_bench.py run --run plain --out "$D/plain/out" --backing "$D/plain" \
  --csv "$OUT.csv" --events "$D/events-plain.jsonl" --drain "$DRAIN" --sample "$SAMPLE" "${train_args[@]}"

echo "== 1b. rotation run, lmcfs $D/mnt (store $D/store)"
mount_it "$D/store" "$D/mnt"
"$PY" scripts/space_bench.py run --run lmcfs --out "$D/mnt/out" --backing "$D/store" --mount "$D/mnt" \
  --daemon-pid "${PIDS[$D/mnt]}" --stat-cmd "$STAT_BIN" --stat-json "$OUT-stat.json" \
  --csv "$OUT.csv" --events "$D/events-lmcfs.jsonl" --drain "$DRAIN" --delete-wait "$DELETE_WAIT" --sample "$SAMPLE" \
  "${train_args[@]}"
echo "== 2. after unmount"
umount_it "$D/mnt"
"$PY" scripts/space_bench.py du "$D/store" > "$D/after-unmount.json"
cat "$D/after-unmount.json"

echo
"$PY" scripts/space_bench.py report --work "$WORK" --label "$LABEL" --mount-opts "$MOUNT_OPTS" \
  --empty-mounted "$D/empty-mounted.json" --empty-unmounted "$D/empty-unmounted.json" \
  --after-unmount "$D/after-unmount.json" --header "$header" --limit "$LIMIT"
echo "wall time $(( $(date +%s) - t_begin )) s, load at end $(cut -d' ' -f1-3 /proc/loadavg)"
