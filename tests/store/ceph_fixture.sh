#!/usr/bin/env bash
# CTest fixture of the RADOS tests (label ceph): `start` brings up the
# single-host cluster of scripts/ceph-dev.sh unless one is already running
# (then it is used and left alone); `stop` stops only a cluster `start`
# started. Where no cluster can start, `start` says so and succeeds: the
# RADOS tests then skip, each saying why.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
marker=${LMCFS_CEPH_FIXTURE_MARKER:-${TMPDIR:-/tmp}/lmcfs-ceph-started-by-tests}
case "${1:-}" in
  start)
    if "$root/scripts/ceph-dev.sh" status >/dev/null 2>&1; then
      echo "ceph fixture: using the Ceph cluster already running"
      exit 0
    fi
    if "$root/scripts/ceph-dev.sh" start >/dev/null; then
      touch "$marker"
      echo "ceph fixture: started a single-host Ceph cluster for the RADOS tests"
    else
      echo "ceph fixture: SKIP: no Ceph cluster could start here (see above); the RADOS tests skip"
    fi
    ;;
  stop)
    if [ -e "$marker" ]; then
      rm -f "$marker"
      "$root/scripts/ceph-dev.sh" stop
    fi
    ;;
  *) echo "usage: $0 start|stop" >&2; exit 2 ;;
esac
exit 0
