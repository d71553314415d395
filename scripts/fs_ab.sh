#!/usr/bin/env bash
# A-B of two mount.lmcfs binaries on the same checkpoint, alternating
# (A B A B ...): for each, a fresh store and mount, torch.save + fsync of the
# checkpoint, then the page cache dropped and the file read back cold by a
# new process (1 MiB reads). Prints save and cold-read time and the
# daemon's CPU-seconds (utime+stime from /proc) and minor page faults per
# GiB saved for each. Usage:
#   scripts/fs_ab.sh BIN_A BIN_B [CKPT] [ROUNDS]
# CKPT: SIZE_MIB of bf16 tensors of 64 MiB (default 1024), or "minilm" (the
# 318 MB training checkpoint of scripts/run.sh: bf16 model + fp32 master +
# AdamW moments of the MiniLM weights that gen_bench_data.py makes). ROUNDS
# default 2. WORK (default /var/tmp/lmcfs-ab) is where the stores live; run
# as root so that caches can be dropped. AGAIN=1: after the cold read, save
# the same checkpoint once more under another name (every chunk a dedup
# hit) and print that save's time and daemon CPU too. READS=N (default 1):
# read the file back cold N times after the save (caches dropped before
# each), printing each read's rate, daemon CPU and the share of the
# machine's CPU time left idle during it.
set -euo pipefail
cd "$(dirname "$0")/.."
A=$1
B=$2
CKPT=${3:-1024}
ROUNDS=${4:-2}
WORK=${WORK:-/var/tmp/lmcfs-ab}
STATE=/dev/shm/lmcfs-ab-$CKPT.pt
cleanup() {
  fusermount3 -u -z "$WORK/mnt" 2>/dev/null || true
  rm -rf "$WORK" "$STATE"
}
trap cleanup EXIT
python3 - "$CKPT" "$STATE" <<'PY'
import sys, torch
ckpt, out = sys.argv[1], sys.argv[2]
if ckpt == 'minilm':
    import os
    from safetensors.torch import load_file
    # scripts/run.sh makes the first, scripts/gen_bench_data.py the second.
    found = [p for p in ('bench-data/demo/minilm-f32.safetensors', 'bench-data/minilm-f32.safetensors')
             if os.path.exists(p)]
    if not found:
        sys.exit('fs_ab.sh: no minilm-f32.safetensors in bench-data/demo or bench-data; '
                 'make it with: python3 scripts/gen_bench_data.py --out bench-data')
    w = load_file(found[0])
    st = {"model": {k: v.to(torch.bfloat16) for k, v in w.items()}, "master": w,
          "optimizer": {k: {"exp_avg": v * 1e-3, "exp_avg_sq": (v * 1e-3) ** 2} for k, v in w.items()}}
else:
    torch.manual_seed(0)
    n, piece = int(ckpt) * (1 << 20) // 2, 32 << 20
    st = {f't{i}': (torch.randn(min(piece, n - i)) * 0.02).to(torch.bfloat16) for i in range(0, n, piece)}
torch.save(st, out)
PY
cpu() { awk '{print $14 + $15}' "/proc/$1/stat"; }
# The daemon's minor page faults so far (fresh pages it touched).
faults() { awk '{print $10}' "/proc/$1/stat"; }
# torch.save + fsync of the checkpoint to $1; prints the seconds it took.
save_to() {
  python3 - "$STATE" "$1" <<'PY'
import os, sys, time, torch
st = torch.load(sys.argv[1])
t = time.perf_counter()
with open(sys.argv[2], 'wb') as f:
    torch.save(st, f); f.flush(); os.fsync(f.fileno())
print(f'{time.perf_counter() - t:.2f}')
PY
}
echo "load average at start: $(cut -d' ' -f1 /proc/loadavg); checkpoint $CKPT"
for _ in $(seq "$ROUNDS"); do
  for bin in "$A" "$B"; do
    fusermount3 -u -z "$WORK/mnt" 2>/dev/null || true
    rm -rf "$WORK"
    mkdir -p "$WORK/store" "$WORK/mnt"
    "$bin" "$WORK/store" "$WORK/mnt" -f -o "log_file=$WORK/log" &
    pid=$!
    for _ in $(seq 100); do mountpoint -q "$WORK/mnt" && break; sleep 0.1; done
    c0=$(cpu $pid)
    f0=$(faults $pid)
    save=$(save_to "$WORK/mnt/ckpt.pt")
    c1=$(cpu $pid)
    f1=$(faults $pid)
    more=""
    for r in $(seq "${READS:-1}"); do
      if [ "$(id -u)" = 0 ]; then sync; echo 3 > /proc/sys/vm/drop_caches; fi
      c2=$(cpu $pid)
      read -r read_s idle < <(python3 - "$WORK/mnt/ckpt.pt" <<'PY'
import sys, time
def ticks():  # (idle + iowait, all) of the whole machine, from /proc/stat
    v = [int(x) for x in open('/proc/stat').readline().split()[1:9]]
    return v[3] + v[4], sum(v)
i0, a0 = ticks()
t = time.perf_counter()
with open(sys.argv[1], 'rb', buffering=0) as f:
    while f.read(1 << 20):
        pass
el = time.perf_counter() - t
i1, a1 = ticks()
print(f'{el:.2f} {100 * (i1 - i0) / max(1, a1 - a0):.0f}')
PY
)
      c3=$(cpu $pid)
      if [ "$r" -gt 1 ]; then
        more="$more; read $r $(python3 -c "print(f'{$(stat -c %s "$WORK/mnt/ckpt.pt") / 1e6 / $read_s:.0f}')") MB/s, daemon $(python3 -c "print(f'{($c3 - $c2) / 100:.2f}')") CPU-s, idle $idle%"
      else
        first_s=$read_s first_idle=$idle first_c=$((c3 - c2))
      fi
    done
    read_s=$first_s
    again=""
    if [ "${AGAIN:-0}" = 1 ]; then
      again_s=$(save_to "$WORK/mnt/again.pt")
      c4=$(cpu $pid)
      again="; again $again_s s, daemon $(python3 -c "print(f'{($c4 - $c3) / 100:.2f}')") CPU-s"
    fi
    size=$(stat -c %s "$WORK/mnt/ckpt.pt")
    python3 -c "
s, r, n = $save, $read_s, $size
print(f'$bin: save {s:.2f} s = {n / 1e6 / s:.0f} MB/s, daemon {($c1 - $c0) / 100:.2f} CPU-s '
      f'= {($c1 - $c0) / 100 / (n / 2**30):.2f} s/GiB, {($f1 - $f0) / (n / 2**30):.0f} faults/GiB; cold read {r:.2f} s = {n / 1e6 / r:.0f} MB/s, '
      f'daemon {$first_c / 100:.2f} CPU-s, idle $first_idle%$more$again')"
    fusermount3 -u "$WORK/mnt"
    wait $pid
  done
done
echo "load average at end: $(cut -d' ' -f1 /proc/loadavg)"
