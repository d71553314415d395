#!/usr/bin/env bash
# Installs dependencies, checks the format (.clang-format), builds with
# -Werror, runs every test; then builds
# again with ASan+UBSan and runs the unit tests there too.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/check-format.sh
BUILD_DIR=build scripts/build.sh -DLMC_WERROR=ON
ctest --test-dir build --output-on-failure -j"$(nproc)"
BUILD_DIR=build-asan BUILD_TYPE=Debug scripts/build.sh -DLMC_WERROR=ON -DLMC_SANITIZE=ON -DLMC_CUDA=OFF
ctest --test-dir build-asan --output-on-failure -j"$(nproc)" -L unit
# A short fuzz run of the decoders and layout parsers (libFuzzer needs clang).
if command -v clang++ >/dev/null; then
  # Only the fuzz targets: the instrumented codec library does not link into
  # the other (uninstrumented) programs.
  CC=clang CXX=clang++ cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DLMC_FUZZ=ON -DLMC_CUDA=OFF -DBUILD_TESTING=OFF >/dev/null
  cmake --build build-fuzz -j"$(nproc)" --target frame_fuzz layout_fuzz
  for t in frame_fuzz layout_fuzz; do
    corpus=$(mktemp -d)
    build-fuzz/tests/fuzz/$t -max_total_time=${LMC_FUZZ_SECONDS:-30} -max_len=70000 -rss_limit_mb=2048 \
      -print_final_stats=1 "$corpus" tests/data 2>&1 | grep -E "^stat::number_of_executed_units|^Done" || { echo "fuzz: $t failed"; exit 1; }
    rm -rf "$corpus"
  done
  echo "fuzz: frame_fuzz and layout_fuzz ran clean"
fi
