#!/usr/bin/env bash
# The per-thread stack frames of the CUDA kernels stay under LIMIT bytes.
# The driver reserves the largest frame of any kernel a process launches for
# every thread the card can hold (2048 an SM: 132 SMs on an H100 or H200),
# for as long as the process keeps its CUDA context, in the memory a
# training job wants: 16 KiB a thread (the size of HuffBuildLengths'
# arrays, which is why they are in device memory) would be 4.4 GB; 512
# bytes is 138 MB.
#
#   tests/gpu/stack_check.sh NVCC SOURCE_DIR LIMIT
set -euo pipefail
nvcc=$1
src=$2
limit=$3
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
worst=0
worst_fn=
kernels=0
for arch in 80 90; do
  for cu in codec/cuda/gpu_codec.cu codec/cuda/transform.cu; do
    log=$out/ptxas-$arch-$(basename "$cu").txt
    "$nvcc" -DLMC_HAVE_CUDA=1 -I"$src/codec/include" -I"$src/codec/src" -I"$src/codec/base/include" -O2 -DNDEBUG \
      --generate-code=arch=compute_$arch,code=sm_$arch --expt-relaxed-constexpr -diag-suppress=2810 -std=c++17 \
      -Xptxas -v -x cu -c "$src/$cu" -o "$out/k.o" 2>"$log"
    # "Function properties for NAME" is followed by "N bytes stack frame, ...".
    while read -r bytes fn; do
      kernels=$((kernels + 1))
      if [ "$bytes" -gt "$worst" ]; then worst=$bytes worst_fn="$fn (sm_$arch)"; fi
      if [ "$bytes" -gt "$limit" ]; then echo "stack_check: $fn (sm_$arch): $bytes bytes of stack, over $limit"; fi
    done < <(awk '/Function properties for/ {fn = $NF} /bytes stack frame/ && fn != "" {print $1, fn; fn = ""}' "$log" |
      { command -v c++filt >/dev/null && c++filt || cat; })
  done
done
if [ "$kernels" -eq 0 ]; then
  echo "stack_check: ptxas reported no function (its output format changed?)"
  exit 1
fi
echo "stack_check: $kernels functions; the largest frame is $worst bytes: $worst_fn"
[ "$worst" -le "$limit" ]
