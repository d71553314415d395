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
# At one test a core the cores sat idle a quarter of the time (the tests
# used 139-147% of two cores at -j2), so half as many again as cores.
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
# The sanitizer builds build only what the tests run (no benchmarks). Every
# build here is a unity build (LMC_UNITY, the default, as users build).
sanitized_targets=(mount.lmcfs lmcfs-gc lmcfs-stat lmcfs-fsck lmc_store_tests lmc_fs_tests lmc_tools_tests)
gen=()
command -v ninja >/dev/null && gen=(-G Ninja)
stage "ASan+UBSan build"
cmake -S . -B build-asan "${gen[@]}" -DCMAKE_BUILD_TYPE=Debug -DLMC_WERROR=ON -DLMC_SANITIZE=ON -DLMC_CUDA=OFF \
  -DLMC_LINE_TABLES=ON >/dev/null
cmake --build build-asan -j"$(nproc)" --target "${sanitized_targets[@]}" lmc lmc_codec_tests lmc_golden_tests
stage "ASan+UBSan tests"
ASAN_OPTIONS="log_path=$san_logs/asan" UBSAN_OPTIONS="log_path=$san_logs/ubsan:print_stacktrace=1" \
  ctest --test-dir build-asan --output-on-failure -j"$jobs" -L 'unit|integration'
no_reports "ASan+UBSan"

# ThreadSanitizer: the filesystem's and the store's threads, on the unit
# tests of both and on the integration suite, bounded: the fault runs and
# the store's crash-point sweeps (they kill or corrupt rather than race; 370
# s of TSan's test time), the two longest series, the keep-last-K rotation
# (one save, delete and gc at a time; 137 s under TSan), the pairing mount
# that pairs as it writes (116 s; the filesystem's unit tests pair as they
# write under TSan, and the other pairing mount, which re-encodes in the
# background, stays in), the limits walk (one process, one file or name
# at a time; 2 minutes under TSan) and CPython's suites (POSIX semantics,
# one test at a time in each of two processes; 10 minutes under TSan, 110 s
# under ASan) stay out.
tsan_skip='^(Index/CrashTest\.|MountCrashRun|MountRotRun|MountDeltaTest\.Mount(Forward)?SeriesIsIdentical|MountDeltaTest\.MountKeepLastK|MountPair\.MastersCostLess|MountCoreutils\.Limits|MountCPython\.)'
stage "TSan build"
cmake -S . -B build-tsan "${gen[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DLMC_WERROR=ON -DLMC_TSAN=ON \
  -DLMC_CUDA=OFF -DLMC_LINE_TABLES=ON >/dev/null
cmake --build build-tsan -j"$(nproc)" --target "${sanitized_targets[@]}"
stage "TSan tests"
# history_size=7: 4M accesses remembered per thread (the default keeps 256K),
# so that TSan can restore the stack of the earlier access of a reported race
# and tests/tsan.supp can match RocksDB on it (store/src/rocks_view.h).
TSAN_OPTIONS="log_path=$san_logs/tsan suppressions=$PWD/tests/tsan.supp history_size=7" \
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
  # The two fuzzers side by side, one a core, 60 s each: frame_fuzz's GPU
  # checks (the emulated pipeline) cut its inputs per second to a quarter,
  # and 30 s more of CI buys half of that back.
  fuzz_one() {  # fuzz_one TARGET SEED_DIR...
    local corpus rc=0 target=$1
    shift
    corpus=$(mktemp -d)
    build-fuzz/tests/fuzz/$target -max_total_time=${LMC_FUZZ_SECONDS:-60} -max_len=70000 -rss_limit_mb=2048 \
      -print_final_stats=1 "$corpus" "$@" >"$corpus.log" 2>&1 || rc=$?
    grep -E "^stat::number_of_executed_units|^Done" "$corpus.log" | sed "s/^/$target: /" || true
    [ $rc -eq 0 ] || { echo "fuzz: $target failed (exit $rc)"; tail -40 "$corpus.log"; }
    rm -rf "$corpus" "$corpus.log"
    return $rc
  }
  # frame_fuzz also starts from bf16/f16/f32 weights (tests/fuzz/seeds: the
  # first byte picks the dtype, the second a base and the GPU checks; the
  # *_sampled ones are large enough for the sampled paths, see frame_fuzz.cc).
  fuzz_one frame_fuzz tests/data tests/fuzz/seeds & frame_pid=$!
  fuzz_one layout_fuzz tests/data & layout_pid=$!
  fuzz_rc=0
  wait $frame_pid || fuzz_rc=1
  wait $layout_pid || fuzz_rc=1
  [ $fuzz_rc -eq 0 ] || exit 1
  echo "fuzz: frame_fuzz and layout_fuzz ran clean"
fi
stage "done"
