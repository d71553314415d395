#!/usr/bin/env python3
"""N writers saving ZeRO-style shards into a mount that stays mounted, for
mount.lmcfs binaries side by side in one run (docs/BENCHMARKS.md, "Tensors
share their dirty blocks"). Needs root (drops the page cache) and /dev/fuse.

Each round, for each binary in turn (round r starts with binary r, so
that no binary always runs first): a fresh store and mount; save 1 (a new
daemon: its buffers' first touch), the files deleted; save 2 (the daemon
warm, as a training job's mount is from its second checkpoint on).
A save: N processes, forked before the clock starts, each torch.save of
rank r's shard of --ckpt (1/N of every tensor, scripts/e2e_bench.py's
shard(), copied into the writer's own memory by own_pages()) into an open
file, flush, fsync; timed from a common start to the last fsync. Per
save: MB/s, the daemon's CPU seconds (utime + stime) and minor page
faults (from /proc/PID/stat) per GiB saved; after both, the daemon's peak
resident size (VmHWM).

  python3 scripts/writers_ab.py --ckpt /var/tmp/e2e-data/e2e-1G/ckpt-step3.pt \\
      --writers 8 --rounds 2 OLD/mount.lmcfs NEW/mount.lmcfs
"""
import argparse
import multiprocessing as mp
import os
import shutil
import subprocess
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import e2e_bench  # noqa: E402  (shard, own_pages, gather)
import fs_bench  # noqa: E402  (drop_caches)


def daemon_stat(pid):
    """(CPU seconds, minor faults) of process pid."""
    with open(f'/proc/{pid}/stat') as f:
        fields = f.read().rsplit(')', 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf('SC_CLK_TCK'), int(fields[7])


def _writer(state, path, ready, go, done):
    state = e2e_bench.own_pages(state)  # as a rank holds it, not shared with this process
    ready.put(path)
    go.wait()
    with open(path, 'wb') as f:
        torch.save(state, f)
        f.flush()
        os.fsync(f.fileno())
    done.put(time.perf_counter())


def save(shards, d):
    """The shards saved into directory d at once; (seconds, bytes)."""
    os.makedirs(d)
    ctx = mp.get_context('fork')
    ready, go, done = ctx.Queue(), ctx.Event(), ctx.Queue()
    procs = [ctx.Process(target=_writer, args=(s, os.path.join(d, f'rank{r}.pt'), ready, go, done))
             for r, s in enumerate(shards)]
    for p in procs:
        p.start()
    e2e_bench.gather(ready, procs, 'before the start')
    time.sleep(0.5)
    t0 = time.perf_counter()
    go.set()
    ends = e2e_bench.gather(done, procs, 'saving')
    for p in procs:
        p.join()
    dt = max(ends) - t0  # the last fsync, not the writers' exits
    fd = os.open(d, os.O_RDONLY)
    os.fsync(fd)
    os.close(fd)
    return dt, sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d))


def run(binary, shards, work, label):
    store, mnt = os.path.join(work, 'store'), os.path.join(work, 'mnt')
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(mnt)
    subprocess.run([binary, store, mnt], check=True)
    try:
        pid = int(subprocess.run(['pgrep', '-f', f'{os.path.basename(binary)} {store} '], capture_output=True,
                                 text=True, check=True).stdout.split()[0])
        out = []
        for i in (1, 2):
            fs_bench.drop_caches()
            c0, f0 = daemon_stat(pid)
            dt, n = save(shards, os.path.join(mnt, f'save{i}'))
            c1, f1 = daemon_stat(pid)
            gib = n / (1 << 30)
            out.append(f'save {i}: {n / 1e6 / dt:5.0f} MB/s, daemon {(c1 - c0) / gib:.2f} CPU-s/GiB, '
                       f'{(f1 - f0) / gib / 1000:4.0f}k faults/GiB')
            if i == 1:
                shutil.rmtree(os.path.join(mnt, 'save1'))
                time.sleep(3)  # the deletes and the commits behind them settle
        with open(f'/proc/{pid}/status') as f:
            hwm = next(int(l.split()[1]) for l in f if l.startswith('VmHWM:')) >> 10
        print(f'{label}: ' + '; '.join(out) + f'; daemon peak RSS {hwm} MiB', flush=True)
    finally:
        subprocess.run(['fusermount3', '-u', mnt])
        for _ in range(300):
            if subprocess.run(['fuser', os.path.join(store, 'LOCK')], capture_output=True).returncode != 0:
                break
            time.sleep(0.1)
        shutil.rmtree(work, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('mounts', nargs='+', help='mount.lmcfs binaries, taken in turn each round')
    ap.add_argument('--ckpt', required=True, help='a torch.save checkpoint to shard (scripts/e2e_bench.py makes them)')
    ap.add_argument('--writers', type=int, default=8)
    ap.add_argument('--rounds', type=int, default=2)
    ap.add_argument('--work', default='/var/tmp/lmcfs-writers-ab', help='store and mount point (its disk: the store\'s)')
    a = ap.parse_args()
    state = torch.load(a.ckpt, weights_only=False)
    shards = [e2e_bench.shard(state, r, a.writers) for r in range(a.writers)]
    del state
    print(f'{a.writers} writers of {os.path.basename(a.ckpt)}; load {os.getloadavg()[0]:.2f}', flush=True)
    for rnd in range(a.rounds):
        # Each round starts with the next binary: a place in the order
        # (first after the shards were made, or after the previous round's
        # store was deleted) favours no binary over the rounds.
        k = rnd % len(a.mounts)
        for m in a.mounts[k:] + a.mounts[:k]:
            run(os.path.abspath(m), shards, a.work, f'round {rnd + 1}, {m}')


if __name__ == '__main__':
    main()
