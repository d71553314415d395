#!/usr/bin/env python3
"""Stores in Ceph RADOS, measured on the single-host cluster of
scripts/ceph-dev.sh (docs/BENCHMARKS.md, "Stores in RADOS").

1. Checkpoint shards: a small GPT-style model trained with AdamW on this
   machine, saved (torch.save) at --steps steps; each save is split into 4
   rank shards (model and optimizer tensors by index, as ranks hold their
   partitions), kept in /dev/shm.
2. N nodes (N in --nodes; one mount.lmcfs process per simulated node, each
   its own store rados:lmcfs/NAME and local index): each node writes its
   rank's shard of every step into its mount with fsync, all nodes at once.
   Aggregate throughput against N, and against the same shards put
   uncompressed into the same pool with `rados put` (N processes at once,
   in the same run), and against the same n mounts over POSIX stores on the
   local disk. Stored bytes: du of the mounts.
3. Reading every node's shards on one node, cold: through a union of the
   stores the largest N wrote, against the same shards in one store
   (--before-build DIR: the union also read by DIR's mount.lmcfs, in turn).
4. Takeover: node A writes the series with fsync, its daemon is killed
   (kill -9), node B mounts with -o takeover: the time until B serves,
   every shard compared byte for byte, lmcfs-fsck of the store.
5. Index rebuild: many small files, then lmcfs-stat on a node without the
   local index (it replays the journal): seconds per journal MB.

  eval "$(scripts/ceph-dev.sh start)"
  python3 scripts/rados_bench.py [--build build] [--nodes 1,2,4] [--steps 3]
"""
import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchutil import daemon_pid, rados_rm_namespace, train_gpt_series, wait_exit  # noqa: E402

RANKS = 4


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def make_shards(out, steps, width):
    """Trains a small GPT-style model and writes out/step{S}_rank{R}.pt."""
    import torch
    for step, model, opt in train_gpt_series(steps, width):
        sd = model.state_dict()
        names = list(sd)
        osd = opt.state_dict()
        for r in range(RANKS):
            mine = {n: sd[n] for i, n in enumerate(names) if i % RANKS == r}
            ostate = {k: v for k, v in osd['state'].items() if k % RANKS == r}
            torch.save({'model': mine, 'optim': ostate, 'step': step, 'rank': r},
                       os.path.join(out, f'step{step}_rank{r}.pt'))
    return sorted(os.listdir(out))


def run_parallel(cmds):
    """Starts every command at once; the wall time until all have exited 0."""
    t0 = time.time()
    procs = [subprocess.Popen(c) for c in cmds]
    for p in procs:
        if p.wait() != 0:
            raise SystemExit(f'failed: {p.args}')
    return time.time() - t0


WRITER = r'''
import os, sys
src, dst, files = sys.argv[1], sys.argv[2], sys.argv[3:]
for f in files:
    data = open(os.path.join(src, f), 'rb').read()
    with open(os.path.join(dst, f), 'wb') as o:
        o.write(data)
        o.flush()
        os.fsync(o.fileno())
'''


def mount(build, store, mnt, local, extra=''):
    opts = f'local_dir={local},lease=5,log_file={local}.log,log_level=info'
    if extra:
        opts += ',' + extra
    subprocess.run([os.path.join(build, 'tools', 'mountlmcfs', 'mount.lmcfs'), store, mnt, '-o', opts], check=True)


def unmount(mnt, store):
    pid = daemon_pid(store)
    subprocess.run(['fusermount3', '-u', mnt], check=True)
    wait_exit(pid)


def drop_caches():
    subprocess.run(['sync'], check=True)
    with open('/proc/sys/vm/drop_caches', 'w') as f:
        f.write('3\n')


def du(path, apparent=False):
    args = ['du', '-sb'] if apparent else ['du', '-sB1']
    return int(subprocess.run(args + [path], capture_output=True, text=True, check=True).stdout.split()[0])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--build', default='build')
    ap.add_argument('--nodes', default='1,2,4')
    ap.add_argument('--steps', type=int, default=3)
    ap.add_argument('--width', type=int, default=512)
    ap.add_argument('--json', default='')
    ap.add_argument('--read-rounds', type=int, default=3,
                    help='cold reads of every shard through the union and from one store, alternating')
    ap.add_argument('--before-build', default='',
                    help='another build directory whose mount.lmcfs also reads the union, in turn with this '
                         "build's (an A-B of two builds in one run)")
    ap.add_argument('--rebuild-files', type=int, default=3000,
                    help='files of 64 KiB for the index rebuild part')
    a = ap.parse_args()
    if not os.environ.get('CEPH_CONF'):
        raise SystemExit('CEPH_CONF is unset: eval "$(scripts/ceph-dev.sh start)" first')
    work = tempfile.mkdtemp(prefix='lmcfs_rados_bench_', dir='/var/tmp')
    shm = tempfile.mkdtemp(prefix='lmcfs_rados_shards_', dir='/dev/shm')
    tag = str(os.getpid())
    results = {'nodes': [], 'machine': os.uname().nodename, 'load': os.getloadavg()}
    union_stores = []
    try:
        files = [f for f in make_shards(shm, a.steps, a.width) if f.endswith('.pt')]
        per_rank = {r: [f for f in files if f.endswith(f'_rank{r}.pt')] for r in range(RANKS)}
        rank_bytes = {r: sum(os.path.getsize(os.path.join(shm, f)) for f in per_rank[r]) for r in range(RANKS)}
        log(f'shards: {len(files)} files, {sum(rank_bytes.values()) / 2**20:.1f} MiB in all ({a.steps} steps)')
        os.makedirs(os.path.join(shm, 'pieces'))
        for f in files:
            with open(os.path.join(shm, f), 'rb') as src:
                k = 0
                while True:
                    piece = src.read(32 << 20)
                    if not piece:
                        break
                    with open(os.path.join(shm, 'pieces', f'{f}.{k}'), 'wb') as out:
                        out.write(piece)
                    k += 1

        for n in [int(x) for x in a.nodes.split(',')]:
            total = sum(rank_bytes[r % RANKS] for r in range(n))
            # Baseline: rados put of the same shards, n processes at once.
            # A RADOS object holds at most 128 MiB (osd_max_object_size):
            # each shard is put as 32 MiB objects, as lmcfs's packs are.
            put = []
            for i in range(n):
                ns = f'base-{tag}-{n}-{i}'
                cmds = []
                for f in per_rank[i % RANKS]:
                    size = os.path.getsize(os.path.join(shm, f))
                    for k, off in enumerate(range(0, size, 32 << 20)):
                        cmds.append(f'rados -p lmcfs -N {ns} put {f}.{k} {os.path.join(shm, "pieces", f)}.{k}')
                put.append(['sh', '-c', ' && '.join(cmds)])
            t_put = run_parallel(put)
            for i in range(n):
                rados_rm_namespace(f'base-{tag}-{n}-{i}')
            # lmcfs: n mounts, n writers with fsync at once.
            mnts, stores = [], []
            for i in range(n):
                store = f'rados:lmcfs/bench-{tag}-{n}-{i}'
                mnt = os.path.join(work, f'mnt{n}_{i}')
                os.makedirs(mnt)
                mount(a.build, store, mnt, os.path.join(work, f'local{n}_{i}'))
                mnts.append(mnt)
                stores.append(store)
            t_fs = run_parallel([[sys.executable, '-c', WRITER, shm, mnts[i]] + per_rank[i % RANKS]
                                 for i in range(n)])
            stored = sum(du(m) for m in mnts)
            logical = sum(du(m, apparent=True) for m in mnts)
            for i in range(n):
                for f in per_rank[i % RANKS]:
                    if subprocess.run(['cmp', os.path.join(shm, f), os.path.join(mnts[i], f)]).returncode:
                        raise SystemExit(f'{f} differs on node {i}')
            for m, s in zip(mnts, stores):
                unmount(m, s)
            if n == max(int(x) for x in a.nodes.split(',')):
                union_stores = stores  # read back through a union below
            else:
                for s in stores:
                    rados_rm_namespace(s.split('/', 1)[1])
                    shutil.rmtree(os.path.join('/var/cache/lmcfs/rados/lmcfs', s.split('/', 1)[1]), ignore_errors=True)
            # The same n mounts over POSIX stores on the local disk: what the
            # codec and FUSE cost here without RADOS (same run).
            local_mnts, local_stores = [], []
            for i in range(n):
                store = os.path.join(work, f'posix{n}_{i}')
                mnt = os.path.join(work, f'pmnt{n}_{i}')
                os.makedirs(mnt)
                subprocess.run([os.path.join(a.build, 'tools', 'mountlmcfs', 'mount.lmcfs'), store, mnt], check=True)
                local_mnts.append(mnt)
                local_stores.append(store)
            t_local = run_parallel([[sys.executable, '-c', WRITER, shm, local_mnts[i]] + per_rank[i % RANKS]
                                    for i in range(n)])
            for m, st in zip(local_mnts, local_stores):
                unmount(m, st)
                shutil.rmtree(st, ignore_errors=True)
            row = {'nodes': n, 'bytes': total, 'rados_put_s': t_put, 'lmcfs_s': t_fs, 'local_lmcfs_s': t_local,
                   'local_lmcfs_MBps': total / t_local / 1e6,
                   'rados_put_MBps': total / t_put / 1e6, 'lmcfs_MBps': total / t_fs / 1e6,
                   'stored_bytes': stored, 'logical_bytes': logical, 'ratio': logical / max(stored, 1)}
            row['speedup'] = row['lmcfs_MBps'] / row['rados_put_MBps']
            results['nodes'].append(row)
            log(f'N={n}: {total / 2**20:.0f} MiB; rados put {row["rados_put_MBps"]:.0f} MB/s, lmcfs '
                f'{row["lmcfs_MBps"]:.0f} MB/s (x{row["speedup"]:.2f}); stored ratio x{row["ratio"]:.2f}; '
                f'lmcfs on local POSIX stores {row["local_lmcfs_MBps"]:.0f} MB/s')

        # Reading every node's shards on one node: through a union of the
        # stores the largest N wrote, cold, against the same shards written
        # into one store and read from it alone (cold), same run.
        names = [s.split('/', 1)[1] for s in union_stores]
        n = len(names)
        files_read = [(i, f) for i in range(n) for f in per_rank[i % RANKS]]
        read_bytes = sum(os.path.getsize(os.path.join(shm, f)) for _, f in files_read)
        mu = os.path.join(work, 'union')
        os.makedirs(mu)
        union = 'rados:lmcfs/' + ','.join(names)
        # The same shards in one store, written through one mount.
        single = f'rados:lmcfs/single-{tag}'
        ms = os.path.join(work, 'single')
        os.makedirs(ms)
        mount(a.build, single, ms, os.path.join(work, 'local_single'))
        for i in range(n):
            os.makedirs(os.path.join(ms, f'rank{i}'))
            subprocess.run([sys.executable, '-c', WRITER, shm, os.path.join(ms, f'rank{i}')] + per_rank[i % RANKS],
                           check=True)
        unmount(ms, single)

        def read_all(store, mnt, local, path_of, build=None):
            """A fresh mount, caches dropped, every shard read by cat: seconds."""
            mount(build or a.build, store, mnt, local)
            drop_caches()
            t0 = time.time()
            for i, f in files_read:
                subprocess.run(['cat', path_of(mnt, i, f)], stdout=subprocess.DEVNULL, check=True)
            t = time.time() - t0
            unmount(mnt, store)
            return t

        # Alternating, a.read_rounds times each: single reads vary by 10-15%
        # on this machine, more than the difference being measured.
        t_unions, t_singles, t_befores = [], [], []
        for _ in range(a.read_rounds):
            if a.before_build:
                t_befores.append(read_all(union, mu, os.path.join(work, 'local_union_before'),
                                          lambda m, i, f: os.path.join(m, f), a.before_build))
            t_unions.append(read_all(union, mu, os.path.join(work, 'local_union'),
                                     lambda m, i, f: os.path.join(m, f)))
            t_singles.append(read_all(single, ms, os.path.join(work, 'local_single'),
                                      lambda m, i, f: os.path.join(m, f'rank{i}', f)))
        t_union = sorted(t_unions)[len(t_unions) // 2]
        t_single = sorted(t_singles)[len(t_singles) // 2]
        results['union_read'] = {'stores': n, 'bytes': read_bytes, 'union_s': t_union, 'single_store_s': t_single,
                                 'union_runs_s': t_unions, 'single_store_runs_s': t_singles,
                                 'union_MBps': read_bytes / t_union / 1e6,
                                 'single_store_MBps': read_bytes / t_single / 1e6}
        log(f'reading {n} nodes\' shards ({read_bytes / 2**20:.0f} MiB, cold, median of {a.read_rounds} alternating): '
            f'union of {n} stores {read_bytes / t_union / 1e6:.0f} MB/s, one store {read_bytes / t_single / 1e6:.0f} MB/s '
            f'(runs: union {", ".join(f"{read_bytes / t / 1e6:.0f}" for t in t_unions)}; '
            f'one store {", ".join(f"{read_bytes / t / 1e6:.0f}" for t in t_singles)})')
        if t_befores:
            t_before = sorted(t_befores)[len(t_befores) // 2]
            results['union_read']['before_build_union_runs_s'] = t_befores
            results['union_read']['before_build_union_MBps'] = read_bytes / t_before / 1e6
            log(f'the same union read with {a.before_build}: {read_bytes / t_before / 1e6:.0f} MB/s '
                f'(runs: {", ".join(f"{read_bytes / t / 1e6:.0f}" for t in t_befores)})')
        for s in union_stores + [single]:
            rados_rm_namespace(s.split('/', 1)[1])
            shutil.rmtree(os.path.join('/var/cache/lmcfs/rados/lmcfs', s.split('/', 1)[1]), ignore_errors=True)

        # Takeover after kill -9.
        store = f'rados:lmcfs/takeover-{tag}'
        ma, mb = os.path.join(work, 'node_a'), os.path.join(work, 'node_b')
        os.makedirs(ma)
        os.makedirs(mb)
        mount(a.build, store, ma, os.path.join(work, 'local_a'))
        subprocess.run([sys.executable, '-c', WRITER, shm, ma] + per_rank[0], check=True)
        pid = daemon_pid(store)
        os.kill(pid, signal.SIGKILL)
        subprocess.run(['fusermount3', '-u', '-z', ma], check=False)
        t0 = time.time()
        mount(a.build, store, mb, os.path.join(work, 'local_b'), 'takeover')
        t_take = time.time() - t0
        same = all(subprocess.run(['cmp', os.path.join(shm, f), os.path.join(mb, f)]).returncode == 0
                   for f in per_rank[0])
        unmount(mb, store)
        fsck = subprocess.run([os.path.join(a.build, 'tools', 'lmcfs', 'lmcfs-fsck'), store],
                              capture_output=True, text=True)
        results['takeover'] = {'seconds': t_take, 'lease_seconds': 5, 'byte_identical': same,
                               'fsck_rc': fsck.returncode, 'fsck': fsck.stdout.strip().splitlines()[-1:]}
        log(f'takeover after kill -9: {t_take:.2f} s (lease 5 s); byte-identical: {same}; fsck rc {fsck.returncode}')
        rados_rm_namespace(store.split('/', 1)[1])
        shutil.rmtree(os.path.join('/var/cache/lmcfs/rados/lmcfs', store.split('/', 1)[1]), ignore_errors=True)
        # A node without the local index: it rebuilds it from the journal
        # (records only: fewer than 16 MiB of them, so no snapshot).
        store = f'rados:lmcfs/rebuild-{tag}'
        mr = os.path.join(work, 'rebuild')
        os.makedirs(mr)
        mount(a.build, store, mr, os.path.join(work, 'local_rebuild'))
        payload = os.urandom(64 << 10)
        for k in range(a.rebuild_files):
            with open(os.path.join(mr, f'f{k:05d}'), 'wb') as f:
                f.write(payload[k % 256:] + payload[:k % 256])
        unmount(mr, store)
        ns = store.split('/', 1)[1]
        objs = subprocess.run(['rados', '-p', 'lmcfs', '-N', ns, 'ls'], capture_output=True, text=True).stdout.split()
        journal_bytes = 0
        for o in objs:
            if o.startswith('journal/'):
                st = subprocess.run(['rados', '-p', 'lmcfs', '-N', ns, 'stat', o], capture_output=True, text=True)
                journal_bytes += int(st.stdout.split('size ')[-1].split()[0]) if 'size ' in st.stdout else 0
        shutil.rmtree(os.path.join('/var/cache/lmcfs/rados/lmcfs', ns), ignore_errors=True)
        t0 = time.time()
        stat = subprocess.run([os.path.join(a.build, 'tools', 'lmcfs', 'lmcfs-stat'), store, '--files'],
                              capture_output=True, text=True)
        t_rebuild = time.time() - t0
        results['rebuild'] = {'files': a.rebuild_files, 'objects': len(objs), 'journal_bytes': journal_bytes,
                              'seconds': t_rebuild, 'MBps': journal_bytes / t_rebuild / 1e6, 'stat_rc': stat.returncode}
        log(f'index rebuild on a new node: {a.rebuild_files} files, {len(objs)} objects, journal '
            f'{journal_bytes / 2**20:.1f} MiB, lmcfs-stat (open + rebuild + stat) {t_rebuild:.2f} s '
            f'({journal_bytes / t_rebuild / 1e6:.1f} MB/s of journal)')
        rados_rm_namespace(ns)
        shutil.rmtree(os.path.join('/var/cache/lmcfs/rados/lmcfs', ns), ignore_errors=True)
    finally:
        shutil.rmtree(shm, ignore_errors=True)
        subprocess.run(['sh', '-c', f'for m in {work}/*/; do fusermount3 -u -z "$m" 2>/dev/null; done'])
        shutil.rmtree(work, ignore_errors=True)
    print(json.dumps(results, indent=1))
    if a.json:
        with open(a.json, 'w') as f:
            json.dump(results, f, indent=1)


if __name__ == '__main__':
    main()
