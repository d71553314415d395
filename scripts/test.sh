#!/usr/bin/env bash
# Installs dependencies, builds with -Werror, runs every test; then builds
# again with ASan+UBSan and runs the unit tests there too.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
BUILD_DIR=build scripts/build.sh -DLMC_WERROR=ON
ctest --test-dir build --output-on-failure -j"$(nproc)"
BUILD_DIR=build-asan BUILD_TYPE=Debug scripts/build.sh -DLMC_WERROR=ON -DLMC_SANITIZE=ON -DLMC_CUDA=OFF
ctest --test-dir build-asan --output-on-failure -j"$(nproc)" -L unit
