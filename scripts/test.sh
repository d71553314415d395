#!/usr/bin/env bash
# Installs dependencies, checks the format (.clang-format), builds with
# -Werror, runs every test; then builds again with ASan+UBSan and runs the
# unit and integration tests there, then with ThreadSanitizer (the
# filesystem's and the store's tests, bounded); a short fuzz run last.
set -euo pipefail
cd "$(dirname "$0")/.."
# Each stage's start, in seconds since this script began (CI's time limit).
t0=$SECONDS
stage() { echo "== test.sh: $* ($((SECONDS - t0)) s)"; }
stage "dependencies"
scripts/install-deps.sh
scripts/check-format.sh
# The CI builds keep line tables only (-g1): file:line in every stack trace
# and sanitizer report, a quarter less build time than full debug info.
stage "build"
BUILD_DIR=build scripts/build.sh -DLMC_WERROR=ON -DLMC_LINE_TABLES=ON
# Tests wait on fsync, daemons and Python's start for about a quarter of
# their time (139-147% of two cores at -j2), so half as many again as cores.
jobs=$(($(nproc) * 3 / 2))
stage "tests"
ctest --test-dir build --output-on-failure -j"$jobs"

# Sanitizer reports go to files (log_path), so that a daemon's report is
# caught too: a mount.lmcfs that a script ran in the background has no
# terminal. Any report fails the run.
san_logs=$(mktemp -d)
show_reports() {
  compgen -G "$san_logs/*" >/dev/null || return 0
  for f in "$san_logs"/*; do echo "== $f"; head -80 "$f"; done
  echo "sanitizer reports above (the first 80 lines of each)"
  return 1
}
trap 'show_reports; rm -rf "$san_logs"' EXIT
no_reports() {  # the EXIT trap prints them
  if compgen -G "$san_logs/*" >/dev/null; then echo "$1: sanitizer reports"; exit 1; fi
  echo "$1: no reports"
}

# AddressSanitizer + UndefinedBehaviorSanitizer: the unit tests and the
# integration suite (real mounts of the sanitized daemon).
# The sanitizer builds are unity builds (CMAKE_UNITY_BUILD: each target's
# files compiled a few at a time as one file), which parse the headers and
# generate the JSON, CLI11 and gtest templates once per batch rather than once
# per file; the build above stays file by file, as users build it. Only what
# the tests run is built (no benchmarks).
sanitized_targets=(mount.lmcfs lmcfs-gc lmcfs-stat lmcfs-fsck lmc_store_tests lmc_fs_tests lmc_tools_tests)
gen=()
command -v ninja >/dev/null && gen=(-G Ninja)
stage "ASan+UBSan build"
cmake -S . -B build-asan "${gen[@]}" -DCMAKE_BUILD_TYPE=Debug -DLMC_WERROR=ON -DLMC_SANITIZE=ON -DLMC_CUDA=OFF \
  -DLMC_LINE_TABLES=ON -DCMAKE_UNITY_BUILD=ON >/dev/null
cmake --build build-asan -j"$(nproc)" --target "${sanitized_targets[@]}" lmc lmc_codec_tests lmc_golden_tests
stage "ASan+UBSan tests"
ASAN_OPTIONS="log_path=$san_logs/asan" UBSAN_OPTIONS="log_path=$san_logs/ubsan:print_stacktrace=1" \
  ctest --test-dir build-asan --output-on-failure -j"$jobs" -L 'unit|integration'
no_reports "ASan+UBSan"

# ThreadSanitizer: the filesystem's and the store's threads, on the unit
# tests of both and on the integration suite, bounded: the fault runs that
# kill or corrupt rather than race, the two longest series, the keep-last-K
# rotation (one save, delete and gc at a time; 137 s under TSan) and the
# limits walk (one process, one file or name at a time; 2 minutes under
# TSan) stay out.
tsan_skip='^(MountCrashRun|MountRotRun|MountDeltaTest\.Mount(Forward)?SeriesIsIdentical|MountDeltaTest\.MountKeepLastK|MountCoreutils\.Limits)'
stage "TSan build"
cmake -S . -B build-tsan "${gen[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DLMC_WERROR=ON -DLMC_TSAN=ON \
  -DLMC_CUDA=OFF -DLMC_LINE_TABLES=ON -DCMAKE_UNITY_BUILD=ON >/dev/null
cmake --build build-tsan -j"$(nproc)" --target "${sanitized_targets[@]}"
stage "TSan tests"
TSAN_OPTIONS="log_path=$san_logs/tsan suppressions=$PWD/tests/tsan.supp" \
  ctest --test-dir build-tsan --output-on-failure -j"$jobs" -L 'unit|integration' -E "$tsan_skip"
no_reports "TSan"
# A short fuzz run of the decoders and layout parsers (libFuzzer needs clang).
if command -v clang++ >/dev/null; then
  stage "fuzz"
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
stage "done"
