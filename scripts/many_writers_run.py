#!/usr/bin/env python3
"""Many-writers run (issue 16, "Fault runs", 6): data-parallel ranks save a
checkpoint series into one mount while readers read it back, an online
`lmcfs-gc` with retention deletes old checkpoints and reclaims their space,
and the mount's background rebases turn old versions into deltas, all for a
bounded time.

- Writers: --ranks processes (default 8), each rank's shard of step N is
  ckpt/step-N/rankR.pt (torch.save of that rank's slice of a model that
  trains between steps, fsync'd, as DDP/FSDP ranks save); the ranks meet at
  a barrier after each step, as a training job's ranks do.
- Readers: --readers processes read finished shards back (any of them, old
  or new) and compare their SHA-256; a shard deleted by retention
  meanwhile may be gone (ENOENT), never different.
- Online gc: `lmcfs-gc MNT --keep-last 3 --pattern 'step-*' --dir MNT/ckpt
  --yes` every few seconds (retention, then compaction while the mount
  serves).
- Watchdog: no saved shard and no read for --stall seconds (default 60):
  every thread's stack of the daemon is dumped (gdb) and the run fails.
- Memory: the daemon's peak RSS must stay within its configured budget
  (write_buffer + cache_size + base_cache) plus --slack-mib, and each part
  lmcfs-stat reports with a bound (writes in flight, the block pool, the
  caches, the frame pool, the index's block caches, the frames at the
  committer) within it, sampled once a minute.
- At the end: the rebase queue drains; every shard still in the namespace
  reads back byte-identical; lmcfs-fsck is clean online and after unmount.

  python3 scripts/many_writers_run.py --seconds 3600     # long form
  python3 scripts/many_writers_run.py --seconds 40       # CI form (MountManyWriters)
  python3 scripts/many_writers_run.py --seconds 300 --store rados:lmcfs/many1   # in RADOS

A failure keeps the work directory (store, daemon log, stacks.txt, rss.json,
and memory.json: the daemon's memory by part once a minute, from
lmcfs-stat; a budget failure names the parts too).
"""
import argparse
import hashlib
import json
import multiprocessing as mp
import os
import random
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchutil import daemon_pid, finish, rados_rm_namespace, wait_exit, wait_rebases  # noqa: E402

# Budget the daemon is mounted with (the mount's own defaults are larger).
WRITE_BUFFER_MIB, CACHE_MIB, BASE_CACHE_MIB = 128, 64, 128


def writer(rank, mnt, steps_done, barrier, stop, seed, shard_kib):
    import io
    import torch
    torch.manual_seed(seed + rank)
    n = shard_kib * 1024 // 2  # bf16 elements of this rank's shard
    w = (torch.randn(n) * 0.02).to(torch.bfloat16)
    m = torch.zeros(n, dtype=torch.float32)
    step = 0
    while not stop.is_set():
        step += 1
        # A training step: small updates, so that consecutive shards are close.
        g = torch.randn(n) * 0.01
        m.mul_(0.9).add_(g, alpha=0.1)
        w = (w.float() - 1e-3 * m).to(torch.bfloat16)
        d = os.path.join(mnt, 'ckpt', f'step-{step:06d}')
        os.makedirs(d, exist_ok=True)
        obj = {'weight': w, 'exp_avg': m, 'step': step, 'rank': rank}
        buf = io.BytesIO()
        torch.save(obj, buf)
        data = buf.getvalue()
        with open(os.path.join(d, f'rank{rank}.pt'), 'wb') as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        steps_done.put((f'ckpt/step-{step:06d}/rank{rank}.pt', hashlib.sha256(data).hexdigest(), len(data)))
        try:
            barrier.wait(timeout=300)
        except threading.BrokenBarrierError:
            return


def reader(mnt, known, stop, seed, counts, failures):
    rng = random.Random(seed)
    while not stop.is_set():
        items = list(known.items())
        if not items:
            time.sleep(0.1)
            continue
        name, digest = rng.choice(items)
        try:
            with open(os.path.join(mnt, name), 'rb') as f:
                data = f.read()
        except FileNotFoundError:
            continue  # retention deleted it
        except OSError as e:
            failures.append(f'reader: {name}: {e}')
            return
        if hashlib.sha256(data).hexdigest() != digest:
            failures.append(f'reader: {name} read back DIFFERENT bytes ({len(data)} bytes)')
            return
        counts['reads'] = counts.get('reads', 0) + 1
        counts['read_bytes'] = counts.get('read_bytes', 0) + len(data)


def rss_kib(pid):
    try:
        for line in open(f'/proc/{pid}/status'):
            if line.startswith('VmRSS:'):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--build', default='build')
    ap.add_argument('--seconds', type=float, default=40)
    ap.add_argument('--ranks', type=int, default=8)
    ap.add_argument('--readers', type=int, default=2)
    ap.add_argument('--shard-kib', type=int, default=2048, help='bf16 weights per rank and step (plus fp32 state)')
    ap.add_argument('--gc-every', type=float, default=5)
    ap.add_argument('--stall', type=float, default=60)
    # Beyond the three caches: RocksDB's 64 MiB block cache of the chunk
    # index, a 64 MiB commit group, the encoder threads' workspaces, FUSE
    # buffers and malloc's per-thread arenas. Measured: the daemon's RSS
    # levels off at 800-845 MiB within 3 minutes and stays there (20 minutes,
    # seed 516930176); 512 was too little (842 MiB failed a first run).
    ap.add_argument('--slack-mib', type=int, default=768, help='daemon memory allowed beyond its caches')
    ap.add_argument('--seed', type=int, default=None)
    ap.add_argument('--store', default='',
                    help='a store in RADOS (rados:POOL/NS, a namespace of its own: emptied when the run passes) '
                         'instead of a directory in the work directory')
    ap.add_argument('--keep', action='store_true')
    a = ap.parse_args()
    if a.store and not a.store.startswith('rados:'):
        ap.error('--store takes rados:POOL/NS')
    seed = a.seed if a.seed is not None else random.SystemRandom().randrange(1 << 30)
    print(f'many_writers_run: seed {seed} (replay: --seed {seed})', flush=True)
    mount_bin = os.path.join(a.build, 'tools', 'mountlmcfs', 'mount.lmcfs')
    tools = os.path.join(a.build, 'tools', 'lmcfs')
    work = tempfile.mkdtemp(prefix='lmcfs_many_', dir='/var/tmp')
    store, mnt = a.store or os.path.join(work, 'store'), os.path.join(work, 'mnt')
    os.makedirs(mnt)
    logf = os.path.join(work, 'log')
    opts = (f'log_file={logf},log_level=info,write_buffer={WRITE_BUFFER_MIB}M,cache_size={CACHE_MIB}M,'
            f'base_cache={BASE_CACHE_MIB}M' + (f',local_dir={work}/local' if a.store else ''))
    subprocess.run([mount_bin, store, mnt, '-o', opts], check=True)
    pid = daemon_pid(store)
    budget_kib = (WRITE_BUFFER_MIB + CACHE_MIB + BASE_CACHE_MIB + a.slack_mib) * 1024
    os.makedirs(os.path.join(mnt, 'ckpt'))
    ctx = mp.get_context('spawn')
    stop, steps_done = ctx.Event(), ctx.Queue()
    barrier = ctx.Barrier(a.ranks)
    manager = ctx.Manager()
    known, counts, rfail = manager.dict(), manager.dict(), manager.list()
    procs = [ctx.Process(target=writer, args=(r, mnt, steps_done, barrier, stop, seed, a.shard_kib))
             for r in range(a.ranks)]
    procs += [ctx.Process(target=reader, args=(mnt, known, stop, seed + 1000 + i, counts, rfail))
              for i in range(a.readers)]
    for p in procs:
        p.start()
    stats = {'seed': seed, 'ranks': a.ranks, 'readers': a.readers, 'shards_saved': 0, 'bytes_saved': 0,
             'gc_runs': 0, 'retention_deleted_dirs': 0, 'peak_rss_mib': 0, 'budget_mib': budget_kib // 1024}
    failures = []
    rss_samples = []  # (seconds, MiB) every 10 s: the daemon's memory over the run
    # Every 60 s, the daemon's memory by part (lmcfs-stat's daemon.memory,
    # MiB): what a budget failure names, kept in memory.json.
    mem_samples = []

    def memory_parts():  # None when lmcfs-stat cannot say (a diagnostic: never fails the run)
        try:
            r = subprocess.run([os.path.join(tools, 'lmcfs-stat'), mnt, '--json', '/'], capture_output=True,
                               text=True, timeout=60)
            if r.returncode != 0:
                return None
            m = json.loads(r.stdout).get('daemon', {}).get('memory', {})
        except (subprocess.TimeoutExpired, ValueError, AttributeError):
            return None
        return {k: round(v / 2**20, 1) for k, v in m.items()
                if k.endswith('bytes') or k.endswith('capacity') or k.endswith('limit')}
    def parts_over_bounds(parts):
        # Each bounded part against its bound (MiB), with slack of 4 MiB a
        # rank: a writer waits for the write budget after its write, whose
        # 1 MiB may complete two chunks charged 2 MiB each.
        tol = a.ranks * 4
        bounds = [('write_inflight_bytes', parts.get('write_budget_bytes')),
                  ('write_block_pool_bytes', parts.get('write_block_pool_capacity')),
                  ('chunk_cache_bytes', parts.get('chunk_cache_capacity')),
                  ('delta_cache_bytes', parts.get('delta_cache_capacity')),
                  ('base_cache_bytes', parts.get('base_cache_capacity')),
                  ('frame_pool_bytes', parts.get('frame_pool_capacity')),
                  ('index_block_cache_bytes', parts.get('index_block_cache_capacity')),
                  # the committer's frames: its limit plus a batch a writer
                  # (FsOptions::batch_limit, 16 MiB; not a mount option)
                  ('commit_queue_bytes', parts['commit_queue_limit'] + 16 * a.ranks
                   if 'commit_queue_limit' in parts else None)]
        return [f'daemon memory part {k} {parts[k]} MiB over its bound {b} MiB; by part (MiB): {json.dumps(parts)}'
                for k, b in bounds if b is not None and k in parts and parts[k] > b + tol]

    t0 = last_progress = time.time()
    last_reads, next_gc = 0, t0 + a.gc_every
    try:
        while time.time() - t0 < a.seconds and not failures and not rfail:
            while not steps_done.empty():
                name, digest, size = steps_done.get()
                known[name] = digest
                stats['shards_saved'] += 1
                stats['bytes_saved'] += size
                last_progress = time.time()
            if counts.get('reads', 0) != last_reads:
                last_reads, last_progress = counts.get('reads', 0), time.time()
            rss = rss_kib(pid)
            stats['peak_rss_mib'] = max(stats['peak_rss_mib'], rss // 1024)
            if not rss_samples or time.time() - rss_samples[-1][0] - t0 >= 10:
                rss_samples.append((round(time.time() - t0, 1), rss // 1024))
            if not mem_samples or time.time() - mem_samples[-1][0] - t0 >= 60:
                parts = memory_parts()
                if parts is not None:
                    mem_samples.append((round(time.time() - t0, 1), parts))
                    failures += parts_over_bounds(parts)
            if rss > budget_kib:
                parts = memory_parts()
                failures.append(f'daemon RSS {rss // 1024} MiB over its budget {budget_kib // 1024} MiB; '
                                f'by part (MiB): {json.dumps(parts)}')
            if time.time() - last_progress > a.stall:
                with open(os.path.join(work, 'stacks.txt'), 'w') as f:
                    subprocess.run(['gdb', '-p', str(pid), '-batch', '-ex', 'thread apply all bt'], stdout=f,
                                   stderr=subprocess.STDOUT, timeout=120)
                failures.append(f'no progress for {a.stall:.0f} s: the daemon\'s stacks are in {work}/stacks.txt')
            if time.time() >= next_gc and not failures:
                r = subprocess.run([os.path.join(tools, 'lmcfs-gc'), mnt, '-q', '--json', '--keep-last', '3',
                                    '--pattern', 'step-*', '--dir', os.path.join(mnt, 'ckpt'), '--yes'],
                                   capture_output=True, text=True, timeout=300)
                if r.returncode != 0:
                    failures.append(f'online lmcfs-gc exit {r.returncode}: {r.stderr.strip()[:300]}')
                else:
                    stats['gc_runs'] += 1
                    for name in list(known.keys()):
                        if not os.path.exists(os.path.join(mnt, os.path.dirname(name))):
                            del known[name]
                next_gc = time.time() + a.gc_every
            time.sleep(0.2)
    finally:
        stop.set()
        barrier.abort()
        for p in procs:
            p.join(timeout=120)
        for p in procs:
            if p.is_alive():
                p.kill()
                failures.append(f'a {"writer" if procs.index(p) < a.ranks else "reader"} did not stop')
    while not steps_done.empty():
        name, digest, size = steps_done.get()
        known[name] = digest
        stats['shards_saved'] += 1
        stats['bytes_saved'] += size
    failures += list(rfail)
    parts = memory_parts()  # as the writers stopped
    if parts is not None:
        mem_samples.append((round(time.time() - t0, 1), parts))
        failures += parts_over_bounds(parts)
    stats['reads'], stats['read_bytes'] = counts.get('reads', 0), counts.get('read_bytes', 0)
    stats['retention_deleted_dirs'] = stats['shards_saved'] // a.ranks - len(os.listdir(os.path.join(mnt, 'ckpt')))
    try:
        if not failures:
            wait_rebases(mnt, timeout=300)
            final = dict(known)
            for name, digest in final.items():
                p = os.path.join(mnt, name)
                if not os.path.exists(p):
                    if os.path.exists(os.path.dirname(p)):
                        failures.append(f'{name} was saved (fsync returned) but is missing')
                    continue
                with open(p, 'rb') as f:
                    if hashlib.sha256(f.read()).hexdigest() != digest:
                        failures.append(f'{name} reads back DIFFERENT bytes at the end')
            stats['final_files_verified'] = sum(1 for n in final if os.path.exists(os.path.join(mnt, n)))
            r = subprocess.run([os.path.join(tools, 'lmcfs-fsck'), '-q', mnt], capture_output=True, text=True)
            if r.returncode != 0:
                failures.append(f'lmcfs-fsck (online) exit {r.returncode}: {r.stdout.strip()[-300:]}')
    finally:
        subprocess.run(['fusermount3', '-u', mnt], capture_output=True)
        wait_exit(pid)
    if not failures:
        r = subprocess.run([os.path.join(tools, 'lmcfs-fsck'), '-q', store], capture_output=True, text=True)
        if r.returncode != 0:
            failures.append(f'lmcfs-fsck (offline) exit {r.returncode}: {r.stdout.strip()[-300:]}')
    stats['seconds'] = round(time.time() - t0, 1)
    # The daemon's memory early and late in the run (a leak shows as growth).
    if rss_samples:
        tenth = max(1, len(rss_samples) // 10)
        stats['rss_mib_first_tenth_max'] = max(m for _, m in rss_samples[:tenth])
        stats['rss_mib_last_tenth_max'] = max(m for _, m in rss_samples[-tenth:])
    with open(os.path.join(work, 'rss.json'), 'w') as f:
        json.dump(rss_samples, f)
    with open(os.path.join(work, 'memory.json'), 'w') as f:
        json.dump(mem_samples, f)
    if mem_samples:
        last = mem_samples[-1][1]
        stats['memory_mib_last'] = {k: last[k] for k in ('resident_bytes', 'write_block_bytes', 'chunk_cache_bytes',
                                                         'delta_cache_bytes', 'base_cache_bytes',
                                                         'frame_pool_bytes', 'index_block_cache_bytes', 'commit_queue_bytes') if k in last}
    if a.store and not failures and not a.keep:
        pool, ns = a.store[len('rados:'):].split('/', 1)
        rados_rm_namespace(ns, pool)
    return finish('many_writers_run', stats, failures, work, a.keep)


if __name__ == '__main__':
    sys.exit(main())
