#!/usr/bin/env bash
# Runs a throw-away single-host Ceph cluster (one monitor, one BlueStore OSD,
# one manager) on 127.0.0.1 for lmcfs tests and benchmarks.
#
# Usage:
#   eval "$(scripts/ceph-dev.sh start)"   # start (or reuse) the cluster, export CEPH_CONF
#   scripts/ceph-dev.sh status            # exit 0 and print the exports if writable
#   scripts/ceph-dev.sh stop              # kill the daemons and delete all cluster state
#
# `start` and `status` print only `export ...` lines on stdout (meant for eval):
#   export CEPH_CONF=<dir>/ceph.conf
#   export LMCFS_CEPH_POOL=lmcfs
# Everything else goes to stderr. The ceph.conf names the client.admin keyring,
# so librados clients and the `rados`/`ceph` commands need only CEPH_CONF.
#
# The cluster is ephemeral: state lives in ${LMCFS_CEPH_DIR:-/var/tmp/lmcfs-ceph}
# (the OSD's block device is a sparse file there, outside the OSD data
# directory) and `stop` removes it. Ports are fixed (mon v2 127.0.0.1:3300,
# v1 127.0.0.1:6789), so one cluster per host. Needs the Ceph (Pacific)
# packages ceph-mon, ceph-osd, ceph-mgr and ceph-common. The manager reports
# the pools' figures (`ceph df`, what `df` on a mount shows, and what pool
# quotas are enforced by) every 5 s; until its first report they read 0.
# Without a manager some `ceph` commands (pg, ...) hang: wrap them in
# `timeout`.
#
# Environment: LMCFS_CEPH_DIR (state directory), LMCFS_CEPH_BLOCK_SIZE (sparse
# OSD block file, default 16G: the most data the pool can hold),
# LMCFS_CEPH_START_TIMEOUT (seconds until the pool must be writable, default 90).
set -euo pipefail

DIR=${LMCFS_CEPH_DIR:-/var/tmp/lmcfs-ceph}
DIR=${DIR%/}
CONF=$DIR/ceph.conf
POOL=lmcfs
MON_V2=127.0.0.1:3300
MON_V1=127.0.0.1:6789
START_TIMEOUT=${LMCFS_CEPH_START_TIMEOUT:-90}   # seconds until the pool must be writable
BLOCK_SIZE=${LMCFS_CEPH_BLOCK_SIZE:-16G}        # sparse BlueStore block file
MARKER=.lmcfs-ceph-dev                          # only a directory holding this is ever deleted
DAEMONS=(mon.a osd.0 mgr.x)

log() { printf 'ceph-dev: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

usage() {
    cat >&2 <<EOF
usage: $0 start|stop|status
  start   start a one-mon/one-OSD/one-mgr cluster in $DIR (or reuse a healthy one)
          and print 'export CEPH_CONF=...' lines; use: eval "\$($0 start)"
  status  exit 0 and print the exports if the cluster is running and writable
  stop    stop the daemons and delete $DIR
EOF
    exit 2
}

print_exports() {
    printf 'export CEPH_CONF=%q\n' "$CONF"
    printf 'export LMCFS_CEPH_POOL=%q\n' "$POOL"
}

# `ceph` CLI with a bound: without a manager some commands never return.
ceph_cmd() { timeout 20 ceph --conf "$CONF" --connect-timeout 15 "$@"; }

pid_file() { echo "$DIR/run/$1.pid"; }

# Prints the pid of daemon $1 (mon.a, osd.0, mgr.x) if it runs with our ceph.conf.
daemon_pid() {
    local f pid
    f=$(pid_file "$1")
    [[ -r $f ]] || return 1
    pid=$(<"$f")
    [[ $pid =~ ^[0-9]+$ ]] || return 1
    # Guard against a recycled pid: the process must be a ceph daemon using our conf.
    tr '\0' ' ' 2>/dev/null <"/proc/$pid/cmdline" | grep -qF -- "$CONF" || return 1
    echo "$pid"
}

any_daemon_running() {
    local d
    for d in "${DAEMONS[@]}"; do
        daemon_pid "$d" >/dev/null && return 0
    done
    return 1
}

# True if a small object can be written, read back and removed within a few seconds.
pool_writable() {
    local obj probe got
    obj=ceph-dev-probe.$$
    probe="lmcfs ceph-dev probe $$ $RANDOM"
    printf '%s' "$probe" | timeout 10 rados --conf "$CONF" -p "$POOL" put "$obj" - 2>/dev/null || return 1
    got=$(timeout 10 rados --conf "$CONF" -p "$POOL" get "$obj" - 2>/dev/null) || return 1
    timeout 10 rados --conf "$CONF" -p "$POOL" rm "$obj" 2>/dev/null || return 1
    [[ $got == "$probe" ]]
}

healthy() {
    [[ -f $CONF ]] || return 1
    daemon_pid mon.a >/dev/null && daemon_pid osd.0 >/dev/null && daemon_pid mgr.x >/dev/null && pool_writable
}

show_logs() {
    local f
    for f in "$DIR"/log/*.log; do
        [[ -f $f ]] || continue
        log "---- last lines of $f ----"
        tail -n 25 "$f" >&2
    done
}

# True once none of the given pids is alive, polling for up to $1 tenths of a second.
wait_gone() {
    local tenths=$1 pid i
    shift
    for ((i = 0; i <= tenths; i++)); do
        for pid in "$@"; do
            if kill -0 "$pid" 2>/dev/null; then
                sleep 0.1
                continue 2
            fi
        done
        return 0
    done
    return 1
}

# Stops daemon $1: SIGTERM, up to 5 s grace (a clean exit takes ~2 s), then SIGKILL.
stop_daemon() {
    local pid
    pid=$(daemon_pid "$1") || return 0
    log "stopping $1 (pid $pid)"
    kill -TERM "$pid" 2>/dev/null || true
    wait_gone 50 "$pid" && return 0
    log "$1 (pid $pid) did not exit within 5 s of SIGTERM; sending SIGKILL"
    kill -KILL "$pid" 2>/dev/null || true
    wait_gone 50 "$pid" || die "$1 (pid $pid) survived SIGKILL"
}

# OSD first: a stopping OSD waits (osd_mon_shutdown_timeout) for the monitor to ack.
kill_daemons() {
    stop_daemon mgr.x
    stop_daemon osd.0
    stop_daemon mon.a
}

remove_state() {
    [[ -e $DIR ]] || return 0
    [[ -n $DIR && $DIR != / ]] || die "refusing to remove '$DIR'"
    if [[ ! -e $DIR/$MARKER ]] && [[ -n $(ls -A "$DIR") ]]; then
        die "$DIR exists but was not created by $0 (no $MARKER); remove it by hand or set LMCFS_CEPH_DIR"
    fi
    rm -rf -- "$DIR"
}

port_in_use() { [[ -n $(ss -Hltn "sport = :$1" 2>/dev/null) ]]; }

write_conf() {
    local fsid=$1
    cat >"$CONF" <<EOF
# Generated by scripts/ceph-dev.sh: throw-away single-host dev cluster.
[global]
fsid = $fsid
mon host = [v2:$MON_V2,v1:$MON_V1]
mon initial members = a
public network = 127.0.0.0/8
ms bind ipv4 = true
ms bind ipv6 = false
auth cluster required = cephx
auth service required = cephx
auth client required = cephx
keyring = $DIR/keyring
osd pool default size = 1
osd pool default min size = 1
osd pool default pg num = 8
osd pool default pgp num = 8
osd pool default pg autoscale mode = off
osd crush chooseleaf type = 0
mon allow pool size one = true
mon allow pool delete = true
mon warn on pool no redundancy = false
mon warn on insecure global id reclaim allowed = false
auth allow insecure global id reclaim = false
crash dir = $DIR/crash

[mon]
mon data = $DIR/mon.\$id
keyring = $DIR/mon.\$id/keyring
run dir = $DIR/run
pid file = $DIR/run/\$name.pid
admin socket = $DIR/run/\$name.asok
log file = $DIR/log/\$name.log
mon cluster log file = $DIR/log/cluster.log
mon data avail warn = 2
mon data avail crit = 1
# Commit map changes after 0.1 s instead of batching for 1 s: faster pool setup.
paxos propose interval = 0.1

[osd]
osd data = $DIR/osd.\$id
keyring = $DIR/osd.\$id/keyring
run dir = $DIR/run
pid file = $DIR/run/\$name.pid
admin socket = $DIR/run/\$name.asok
log file = $DIR/log/\$name.log
osd objectstore = bluestore
bluestore block path = $DIR/osd\$id.block
bluestore block create = false
bluestore block db create = false
bluestore block wal create = false
bluestore fsck on mkfs = false
bluestore cache autotune = true
osd memory target = 1073741824
osd op num shards = 2
osd op num threads per shard = 2
osd crush update on start = true
debug rocksdb = 1/5

[mgr]
mgr data = $DIR/mgr.\$id
keyring = $DIR/mgr.\$id/keyring
run dir = $DIR/run
pid file = $DIR/run/\$name.pid
admin socket = $DIR/run/\$name.asok
log file = $DIR/log/\$name.log
# Only the modules Ceph always runs (no dashboard, no REST API).
mgr initial modules =
EOF
}

# Creates a fresh cluster in $DIR and starts it; on any failure kills what it started.
create_cluster() {
    local t0 deadline fsid osd_uuid osd_key p
    t0=$SECONDS
    deadline=$((SECONDS + START_TIMEOUT))

    for p in "${MON_V2##*:}" "${MON_V1##*:}"; do
        port_in_use "$p" &&
            die "127.0.0.1:$p is already in use: another Ceph monitor runs on this host (a ceph-dev.sh cluster with another LMCFS_CEPH_DIR?); stop it first"
    done

    remove_state
    mkdir -p "$DIR"/{run,log,mon.a,osd.0,mgr.x}
    touch "$DIR/$MARKER"
    fsid=$(uuidgen)
    osd_uuid=$(uuidgen)
    write_conf "$fsid"

    trap 'on_start_failure' EXIT

    log "creating keyrings and monitor in $DIR"
    ceph-authtool --conf /dev/null --create-keyring "$DIR/mon.keyring" --gen-key -n mon. --cap mon 'allow *' >/dev/null
    ceph-authtool --conf /dev/null --create-keyring "$DIR/keyring" --gen-key -n client.admin \
        --cap mon 'allow *' --cap osd 'allow *' --cap mgr 'allow *' --cap mds 'allow *' >/dev/null
    ceph-authtool --conf /dev/null "$DIR/mon.keyring" --import-keyring "$DIR/keyring" >/dev/null
    monmaptool --conf /dev/null --create --fsid "$fsid" --addv a "[v2:$MON_V2,v1:$MON_V1]" "$DIR/monmap" >/dev/null
    ceph-mon --conf "$CONF" -i a --mkfs --monmap "$DIR/monmap" --keyring "$DIR/mon.keyring" 2>&1 | tail -n 5 >&2
    [[ -f $DIR/mon.a/keyring ]] || die "ceph-mon --mkfs failed"

    # 9>&-: the daemons must not inherit the lock file descriptor. They
    # daemonize once initialised; startup errors land in log/*.stderr.log.
    log "starting mon.a on $MON_V2 / $MON_V1"
    ceph-mon --conf "$CONF" -i a 9>&- 2>>"$DIR/log/mon.a.stderr.log" || die "ceph-mon failed to start"

    log "creating osd.0 (BlueStore on sparse $BLOCK_SIZE file $DIR/osd0.block)"
    truncate -s "$BLOCK_SIZE" "$DIR/osd0.block"
    osd_key=$(ceph-authtool --conf /dev/null --gen-print-key)
    printf '{"cephx_secret": "%s"}\n' "$osd_key" >"$DIR/osd.0.secret.json"
    ceph_cmd osd new "$osd_uuid" 0 -i "$DIR/osd.0.secret.json" >/dev/null || die "'ceph osd new' failed"
    rm -f "$DIR/osd.0.secret.json"
    ceph-osd --conf "$CONF" -i 0 --mkfs --key "$osd_key" --osd-uuid "$osd_uuid" >>"$DIR/log/osd.0.mkfs.log" 2>&1 ||
        die "ceph-osd --mkfs failed (see $DIR/log/osd.0.mkfs.log)"
    # mkfs does not write the keyring; the daemon reads it from the data directory.
    ceph-authtool --conf /dev/null --create-keyring "$DIR/osd.0/keyring" -n osd.0 --add-key "$osd_key" >/dev/null

    log "starting osd.0"
    ceph-osd --conf "$CONF" -i 0 9>&- 2>>"$DIR/log/osd.0.stderr.log" || die "ceph-osd failed to start"

    # The manager: pool figures (ceph df, statfs of a mount) and quotas.
    ceph_cmd auth get-or-create mgr.x mon 'allow profile mgr' osd 'allow *' mds 'allow *' \
        >"$DIR/mgr.x/keyring" || die "'ceph auth get-or-create mgr.x' failed"
    log "starting mgr.x"
    ceph-mgr --conf "$CONF" -i x 9>&- 2>>"$DIR/log/mgr.x.stderr.log" || die "ceph-mgr failed to start"

    log "creating pool $POOL (size 1)"
    # min_size follows from size 1 (and osd pool default min size = 1).
    ceph_cmd osd pool create "$POOL" 8 8 replicated --size 1 >/dev/null 2>&1 ||
        die "'ceph osd pool create $POOL' failed"
    ceph_cmd osd pool application enable "$POOL" rados >/dev/null 2>&1 || true

    log "waiting for pool $POOL to become writable"
    until pool_writable; do
        ((SECONDS < deadline)) || die "pool $POOL not writable within ${START_TIMEOUT} s"
        daemon_pid mon.a >/dev/null || die "mon.a died"
        daemon_pid osd.0 >/dev/null || die "osd.0 died"
        daemon_pid mgr.x >/dev/null || die "mgr.x died"
        sleep 0.5
    done
    trap - EXIT
    log "cluster ready in $((SECONDS - t0)) s (state in $DIR; stop with: $0 stop)"
}

on_start_failure() {
    local rc=$?
    trap - EXIT
    log "start failed; daemon logs follow (kept in $DIR/log until the next start)"
    show_logs
    kill_daemons || true
    log "killed the daemons that were started; check the messages above, then retry '$0 start'"
    exit "$((rc ? rc : 1))"
}

lock_state() {
    # The lock file sits next to the state directory, which stop deletes.
    mkdir -p "$(dirname "$DIR")"
    exec 9>"$DIR.lock"
    flock -w 120 9 || die "another ceph-dev.sh is still running (lock $DIR.lock held for 120 s)"
}

cmd_start() {
    local tool
    for tool in ceph-mon ceph-osd ceph-mgr ceph ceph-authtool monmaptool rados uuidgen ss flock timeout; do
        command -v "$tool" >/dev/null ||
            die "'$tool' not found; needs the Debian packages ceph-mon ceph-osd ceph-mgr ceph-common (and util-linux, iproute2, coreutils); scripts/install-deps.sh installs them"
    done
    lock_state
    if healthy; then
        log "cluster in $DIR is already running and writable"
        print_exports
        return 0
    fi
    if daemon_pid mon.a >/dev/null && daemon_pid osd.0 >/dev/null && daemon_pid mgr.x >/dev/null; then
        log "cluster in $DIR runs but pool $POOL is not writable yet; waiting up to 15 s"
        local deadline=$((SECONDS + 15))
        while ((SECONDS < deadline)); do
            if healthy; then
                print_exports
                return 0
            fi
            sleep 1
        done
    fi
    if any_daemon_running; then
        log "cluster in $DIR is broken (a daemon died or the pool is not writable); recreating it from scratch"
        kill_daemons
    fi
    create_cluster
    print_exports
}

cmd_stop() {
    lock_state
    kill_daemons
    if [[ -e $DIR ]]; then
        remove_state
        log "stopped; removed $DIR"
    else
        log "nothing to stop ($DIR does not exist)"
    fi
}

cmd_status() {
    if healthy; then
        log "cluster in $DIR is running and pool $POOL is writable"
        print_exports
        return 0
    fi
    if any_daemon_running; then
        local d down=()
        for d in "${DAEMONS[@]}"; do
            daemon_pid "$d" >/dev/null || down+=("$d")
        done
        if ((${#down[@]})); then
            log "cluster in $DIR is broken: ${down[*]} not running; see $DIR/log, or recreate it: $0 stop && $0 start"
        else
            log "cluster in $DIR runs but pool $POOL is not writable; see $DIR/log, or recreate it: $0 stop && $0 start"
        fi
    else
        log "no cluster running in $DIR; start one with: eval \"\$($0 start)\""
    fi
    return 1
}

(($# == 1)) || usage
case $1 in
    start) cmd_start ;;
    stop) cmd_stop ;;
    status) cmd_status ;;
    *) usage ;;
esac
