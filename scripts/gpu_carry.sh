#!/usr/bin/env bash
# Prepares, on a machine without a GPU, what scripts/gpu_check.sh needs on a
# GPU machine that has none of the project's dependencies installed (the
# device tool's machines): the GPU test and benchmark binaries and
# mount.lmcfs, stripped, in .gpubin/, and the shared libraries mount.lmcfs
# loads beyond glibc in .gpulibs/. Both are git-ignored: pass them to the
# device tool as `carry` paths (64 MiB in all), then run there:
#
#   OUT=$OUT LMC_GPU_BIN=.gpubin LMC_MOUNT_BIN=.gpubin/mount.lmcfs \
#     LMC_MOUNT_LIBS=.gpulibs scripts/gpu_check.sh
#
#   scripts/gpu_carry.sh [--build DIR] [--baseline REV]
#
# --build DIR     the CUDA build to take the binaries from (default build/;
#                 it must have been configured with nvcc found)
# --baseline REV  also build lmc_gpu_bench at git revision REV (a worktree
#                 under /tmp) into .gpubin/baseline/, for gpu_check.sh's
#                 LMC_BASELINE_BENCH: an A-B on the same card in one call
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=build
BASELINE=
while [ $# -gt 0 ]; do
  case $1 in
    --build) BUILD=$2; shift 2 ;;
    --baseline) BASELINE=$2; shift 2 ;;
    *) echo "usage: scripts/gpu_carry.sh [--build DIR] [--baseline REV]" >&2; exit 2 ;;
  esac
done
if ! grep -q 'LMC_HAVE_CUDA=1' "$BUILD/compile_commands.json" 2>/dev/null; then
  echo "gpu_carry: $BUILD is not a CUDA build (configure it where nvcc is installed)" >&2
  exit 1
fi
cmake --build "$BUILD" -j"$(nproc)" --target lmc_gpu_tests lmc_gpu_bench lmc_profile_bench mount.lmcfs >/dev/null
rm -rf .gpubin .gpulibs
mkdir -p .gpubin .gpulibs
cp "$BUILD/tests/lmc_gpu_tests" "$BUILD/tests/lmc_gpu_bench" "$BUILD/tests/lmc_profile_bench" .gpubin/
cp "$(find "$BUILD" -name mount.lmcfs -type f -perm -u+x | head -1)" .gpubin/mount.lmcfs
if [ -n "$BASELINE" ]; then
  wt=/tmp/lmc-gpu-baseline
  git worktree remove --force "$wt" 2>/dev/null || true
  git worktree add --detach "$wt" "$BASELINE" >/dev/null
  cmake -S "$wt" -B "$wt/build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DLMC_CUDA=ON >/dev/null
  cmake --build "$wt/build" -j"$(nproc)" --target lmc_gpu_bench >/dev/null
  mkdir -p .gpubin/baseline
  cp "$wt/build/tests/lmc_gpu_bench" .gpubin/baseline/
  git worktree remove --force "$wt"
fi
strip --strip-debug .gpubin/* .gpubin/baseline/* 2>/dev/null || true
# Every library mount.lmcfs loads but glibc's own (the GPU machine has those).
ldd .gpubin/mount.lmcfs | awk '/=> \// {print $3}' | while read -r lib; do
  case $(basename "$lib") in
    libc.so.*|libm.so.*|libpthread.so.*|libdl.so.*|librt.so.*|ld-linux*) continue ;;
  esac
  cp -L "$lib" .gpulibs/
done
strip --strip-debug .gpulibs/* 2>/dev/null || true
total=$(du -sm .gpubin .gpulibs | awk '{s += $1} END {print s}')
du -sh .gpubin .gpulibs
echo "gpu_carry: ${total} MiB to carry (the device tool takes 64 MiB in all)"
if [ "$total" -gt 64 ]; then
  echo "gpu_carry: too large to carry" >&2
  exit 1
fi
