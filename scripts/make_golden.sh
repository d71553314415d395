#!/usr/bin/env bash
# Writes the golden files of the current format versions into
# tests/golden/v<N>/ (docs/FORMAT.md, "Golden files"). Run only when a format
# version is bumped, into a NEW folder: golden files already checked in are
# never regenerated (they are what older lmc wrote). Usage:
#   scripts/make_golden.sh v2      # after bumping a format version
set -euo pipefail
cd "$(dirname "$0")/.."
version=${1:?usage: scripts/make_golden.sh v<N>}
BUILD_DIR=${BUILD_DIR:-build}
out=tests/golden/$version
[[ -e $out ]] && { echo "$out exists: golden files are never regenerated" >&2; exit 2; }
cmake --build "$BUILD_DIR" --target lmc_make_golden
"$BUILD_DIR"/tests/lmc_make_golden "$out"
du -ab "$out"
