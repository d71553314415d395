#!/usr/bin/env bash
# The one prepared GPU check: build the CUDA path, run the GPU
# tests, compute-sanitizer on them, and the GPU benchmark against the
# anchors (nvCOMP, DFloat11, cuzipnn, ZipNN) on the same bf16 checkpoint
# data, in a few minutes on a GPU machine.
#
#   scripts/gpu_check.sh                  # builds build-gpu/ (needs the project's
#                                         # dependencies: scripts/install-deps.sh)
#   LMC_GPU_BIN=build/tests scripts/gpu_check.sh
#                                         # uses lmc_gpu_tests and lmc_gpu_bench built
#                                         # elsewhere (they link only libc and libstdc++)
#   LMC_GPU_BIN=.gpubin LMC_MOUNT_BIN=.gpubin/mount.lmcfs LMC_MOUNT_LIBS=.gpulibs \
#     scripts/gpu_check.sh                # what scripts/gpu_carry.sh prepared elsewhere
#
# Environment: OUT (results folder, default /tmp/lmc-gpu-check), DATA_MIB
# (checkpoint data made on the GPU, default 1024), BENCH_MIB (what the codec
# benchmarks take of it, default 1024), SKIP_ANCHORS=1, SKIP_SANITIZER=1,
# LMC_MOUNT_BIN (a mount.lmcfs: also torch.save through the mount with
# gpu=on against gpu=off; LMC_MOUNT_LIBS: a folder of its shared libraries),
# LMC_BASELINE_BENCH (an lmc_gpu_bench built from an earlier commit: run on
# the same data right after this one's, for an A-B on the same card),
# NCU=1 (Nsight Compute's counters for the main encode and decode kernels,
# on 256 MiB of the data, into ncu-*.txt).
# hash-units: lmc_profile_bench --hash on the data (the XXH3 units on this
# machine's CPU; scripts/gpu_carry.sh carries it).
# The sanitizer steps: memcheck (every array its own allocation,
# LMC_GPU_EXACT_ALLOC=1) of the device entry points, lanes, fused decoding,
# rANS and paired masters, then of the block sizes and corrupt frames;
# racecheck; synccheck of the warp-synchronous kernels.
# The anchors need their wheels installed first (docs/BENCHMARKS.md, "GPU codec").
# The step logs end up in $OUT/logs.tgz (the device tool returns 8 files).
# Each step has its own time limit; the script goes on after a failed step
# and exits non-zero if any failed. TOTAL_S (default 560, under the device
# tool's 600 s a command) bounds the whole script: a step gets at most what
# is left of it (less 15 s to pack the logs), and one with under 20 s left
# is skipped (listed, not failed), so the logs always come back packed.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/lmc-gpu-check}
DATA_MIB=${DATA_MIB:-1024}
BENCH_MIB=${BENCH_MIB:-1024}
mkdir -p "$OUT"
TOTAL_S=${TOTAL_S:-560}
failed=()
skipped=()
step() {  # step NAME LIMIT_S COMMAND...
  local name=$1 limit=$2
  shift 2
  local left=$((TOTAL_S - SECONDS - 15))
  if [ "$left" -lt 20 ]; then
    echo "=== $name: skipped, ${left}s left of TOTAL_S=${TOTAL_S}"
    skipped+=("$name")
    return
  fi
  [ "$limit" -le "$left" ] || limit=$left
  echo "=== $name (limit ${limit}s): $*"
  local t0=$SECONDS
  timeout "$limit" "$@" 2>&1 | tee "$OUT/$name.log"
  local rc=${PIPESTATUS[0]}
  echo "=== $name: rc $rc in $((SECONDS - t0))s"
  [ "$rc" = 0 ] || failed+=("$name(rc $rc)")
}

if ! command -v nvidia-smi >/dev/null || ! nvidia-smi -L >/dev/null 2>&1; then
  echo "gpu_check: no NVIDIA GPU visible (nvidia-smi -L failed); the GPU tests would only skip" >&2
  exit 2
fi
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm,clocks.max.mem --format=csv | tee "$OUT/gpu.txt"

BIN=${LMC_GPU_BIN:-}
if [ -z "$BIN" ]; then
  step build 420 bash -c 'cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DLMC_CUDA=ON \
    -DCMAKE_CUDA_ARCHITECTURES=native >/dev/null && cmake --build build-gpu -j"$(nproc)" --target lmc_gpu_tests lmc_gpu_bench lmc_profile_bench'
  BIN=build-gpu/tests
fi

step tests 120 "$BIN/lmc_gpu_tests"
DATA=$OUT/ckpt.bf16
if python3 -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null; then
  step data 120 python3 scripts/gpu_anchors.py --make-data "$DATA" --size-mib "$DATA_MIB" --snapshot-every 10
fi
if [ -s "$DATA" ]; then
  step bench 150 "$BIN/lmc_gpu_bench" --data "$DATA" --mib "$BENCH_MIB" --reps 5 --json "$OUT/lmc_gpu_bench.json"
else
  step bench 150 "$BIN/lmc_gpu_bench" --mib "$BENCH_MIB" --reps 5 --json "$OUT/lmc_gpu_bench.json"
fi
# The XXH3 units (lmc/hash.h chooses AVX2 over AVX-512 from the development
# machine's figures) on this machine's CPU, on the same data: a few seconds.
if [ -x "$BIN/lmc_profile_bench" ] && [ -s "$DATA" ]; then
  step hash-units 40 bash -c 'lscpu | grep -E "^(Model name|L2|L3)"; "$0" --hash "$1"' "$BIN/lmc_profile_bench" "$DATA"
fi
if [ -n "${LMC_BASELINE_BENCH:-}" ] && [ -s "$DATA" ]; then
  step baseline 150 "$LMC_BASELINE_BENCH" --data "$DATA" --mib "$BENCH_MIB" --reps 5 --json "$OUT/baseline_gpu_bench.json"
fi
if [ "${NCU:-0}" = 1 ] && [ -s "$DATA" ] && command -v ncu >/dev/null; then
  for k in decode:'HuffDecodeKernel|MergeBody' encode:'SplitBody|BlockBitsBody|HuffEncodeBody'; do
    step "ncu-${k%%:*}" 150 ncu --clock-control none --kernel-name-base demangled -k "regex:${k#*:}" -c 3 \
      --section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy --section WarpStateStats \
      --section LaunchStats "$BIN/lmc_gpu_bench" --data "$DATA" --mib 256 --reps 1 --skip-host
  done
fi
if [ "${SKIP_ANCHORS:-0}" != 1 ] && [ -s "$DATA" ]; then
  step anchors 200 python3 scripts/gpu_anchors.py --data "$DATA" --limit-mib "$BENCH_MIB" \
    --out "$OUT/gpu_anchors.json"
fi
if [ -n "${LMC_MOUNT_BIN:-}" ] && [ -s "$DATA" ]; then
  step mount 240 python3 scripts/gpu_mount_bench.py --mount "$LMC_MOUNT_BIN" --libs "${LMC_MOUNT_LIBS:-}" \
    --data "$DATA" --work /tmp/lmc-gpu-mount --out "$OUT/gpu_mount_bench.json"
fi
if [ "${SKIP_SANITIZER:-0}" != 1 ]; then
  # LMC_GPU_EXACT_ALLOC=1: one cudaMalloc an array instead of 256 MiB slabs,
  # so that memcheck sees each array's bounds.
  step memcheck 150 env LMC_GPU_EXACT_ALLOC=1 compute-sanitizer --tool memcheck --error-exitcode 9 \
    "$BIN/lmc_gpu_tests" \
    --gtest_filter='GpuCodec.DeviceEntryPointsTakeTheSamePaths:GpuCodec.LanesRun*:GpuCodec.FusedDecoder*:GpuCodec.*codesRans*:GpuCodec.*PairedFp32*'
  # Block sizes 2^9-2^11 and corrupt frames on the device (frames marked bad
  # while other blocks decode them): never run under memcheck before.
  step memcheck-sizes-corrupt 150 env LMC_GPU_EXACT_ALLOC=1 compute-sanitizer --tool memcheck --error-exitcode 9 \
    "$BIN/lmc_gpu_tests" \
    --gtest_filter='GpuCodec.HuffmanBlockSizes*:GpuCodec.DecodesEveryCpuFrame*'
  step racecheck 90 compute-sanitizer --tool racecheck --error-exitcode 9 "$BIN/lmc_gpu_tests" \
    --gtest_filter='GpuCodec.DeviceEntryPointsTakeTheSamePaths:GpuCodec.FusedDecoder*:GpuCodec.*codesRans*:GpuCodec.*PairedFp32*'
  # The warp-synchronous kernels (rANS, paired masters' ballots, the fused
  # decoder's shuffles): masks and barriers used as the hardware requires.
  step synccheck 90 compute-sanitizer --tool synccheck --error-exitcode 9 "$BIN/lmc_gpu_tests" \
    --gtest_filter='GpuCodec.FusedDecoder*:GpuCodec.*codesRans*:GpuCodec.*PairedFp32*'
fi
rm -f "$DATA"
# The step logs in one archive: the device tool brings back at most 8 files.
logs=()
for f in "$OUT"/*.log; do [ -e "$f" ] && [ "$(basename "$f")" != gpu_check.log ] && logs+=("$(basename "$f")"); done
if [ ${#logs[@]} -gt 0 ] && tar czf "$OUT/logs.tgz" -C "$OUT" "${logs[@]}"; then
  (cd "$OUT" && rm -f "${logs[@]}")
fi
[ ${#skipped[@]} -eq 0 ] || echo "gpu_check: skipped for want of time (TOTAL_S=${TOTAL_S}): ${skipped[*]}"
if [ ${#failed[@]} -gt 0 ]; then
  echo "gpu_check: FAILED: ${failed[*]}"
  exit 1
fi
echo "gpu_check: all steps passed; results in $OUT"
