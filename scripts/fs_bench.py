#!/usr/bin/env python3
"""Saves one checkpoint with torch.save + fsync to the plain disk, to btrfs
with compress-force=zstd:1 (a loop device on the same disk: the kernel's own
transparent compression) and through an lmcfs mount (a fresh store per
save), in A-B-C-C-B-A order; reads each back cold (caches dropped) and the
mount's file once more warm (kept pages). Prints one line per run and the
summary: MB/s, the daemon's CPU-seconds per GiB written, stored/logical,
and the disk-bound limit (plain time x stored/logical).

Called by scripts/fs_bench.sh (which documents the options); needs root for
the btrfs loop mount and for dropping caches (without root those parts are
skipped and said so)."""
import argparse
import os
import shutil
import subprocess
import sys
import time

import torch


def log(msg):
    print(msg, flush=True)


def make_state(size_mib, dtype):
    torch.manual_seed(0)
    piece = 64 << 20
    state = {}
    if dtype == 'adam':  # fp32 weights + two fp32 moments: a training checkpoint
        n = size_mib * (1 << 20) // 12
        for i in range(0, n, piece // 4):
            m = min(piece // 4, n - i)
            state[f'w{i}'] = torch.randn(m) * 0.02
            state[f'm{i}'] = torch.randn(m) * 1e-3
            state[f'v{i}'] = (torch.randn(m) * 1e-4) ** 2
    else:
        dt = {'bf16': torch.bfloat16, 'fp32': torch.float32}[dtype]
        esz = torch.tensor([], dtype=dt).element_size()
        n = size_mib * (1 << 20) // esz
        for i in range(0, n, piece // esz):
            state[f't{i}'] = (torch.randn(min(piece // esz, n - i)) * 0.02).to(dt)
    return state


def drop_caches():
    if os.geteuid() != 0:
        return False
    os.sync()
    with open('/proc/sys/vm/drop_caches', 'w') as f:
        f.write('3\n')
    return True


def save(state, path):
    t = time.perf_counter()
    with open(path, 'wb') as f:
        torch.save(state, f)
        f.flush()
        os.fsync(f.fileno())
    return time.perf_counter() - t


def read(path):
    t = time.perf_counter()
    with open(path, 'rb', buffering=0) as f:
        while f.read(1 << 20):
            pass
    return time.perf_counter() - t


def used_bytes(path):
    st = os.statvfs(path)
    return (st.f_blocks - st.f_bfree) * st.f_frsize


def cpu_seconds(pid):
    with open(f'/proc/{pid}/stat') as f:
        fields = f.read().rsplit(')', 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf('SC_CLK_TCK')


class Lmcfs:
    def __init__(self, binary, work, opts):
        self.binary, self.work, self.opts = binary, work, opts

    def __enter__(self):
        self.store = os.path.join(self.work, 'store')
        self.mnt = os.path.join(self.work, 'mnt')
        shutil.rmtree(self.store, ignore_errors=True)
        os.makedirs(self.store)
        os.makedirs(self.mnt, exist_ok=True)
        opts = 'log_file=' + os.path.join(self.work, 'log') + (',' + self.opts if self.opts else '')
        self.proc = subprocess.Popen([self.binary, self.store, self.mnt, '-f', '-o', opts])
        for _ in range(200):
            if os.path.ismount(self.mnt):
                break
            time.sleep(0.05)
        else:
            raise SystemExit('lmcfs did not mount: ' + open(os.path.join(self.work, 'log')).read()[-500:])
        return self

    def __exit__(self, *exc):
        subprocess.run(['fusermount3', '-u', self.mnt], check=False)
        self.proc.wait(timeout=120)
        shutil.rmtree(self.store, ignore_errors=True)


class Btrfs:
    """A fresh btrfs on a loop file in work, mounted with `options`; the
    image is sparse, sized size_mib * 3 + 1 GiB."""

    def __init__(self, work, size_mib, options='compress-force=zstd:1'):
        self.work, self.size_mib, self.options = work, size_mib, options

    def __enter__(self):
        self.img = os.path.join(self.work, 'btrfs.img')
        self.mnt = os.path.join(self.work, 'btrfs')
        os.makedirs(self.mnt, exist_ok=True)
        with open(self.img, 'wb') as f:
            f.truncate((self.size_mib * 3 + 1024) << 20)
        subprocess.run(['mkfs.btrfs', '-q', '-f', self.img], check=True, stdout=subprocess.DEVNULL)
        subprocess.run(['mount', '-o', 'loop,' + self.options, self.img, self.mnt], check=True)
        return self

    def __exit__(self, *exc):
        subprocess.run(['umount', self.mnt], check=False)
        os.remove(self.img)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('size_mib', type=int)
    ap.add_argument('dtype', choices=['bf16', 'fp32', 'adam'])
    ap.add_argument('--work', required=True)
    ap.add_argument('--bin', required=True)
    ap.add_argument('--bin-before', default='',
                    help='a second mount.lmcfs (e.g. an earlier commit) run as case "before" in the same order')
    ap.add_argument('--mount-opts', default='')
    ap.add_argument('--no-btrfs', action='store_true')
    args = ap.parse_args()
    work = args.work
    os.makedirs(work, exist_ok=True)
    btrfs = not args.no_btrfs and os.geteuid() == 0 and shutil.which('mkfs.btrfs')
    if not btrfs and not args.no_btrfs:
        log('btrfs: skipped (needs root and btrfs-progs: scripts/install-deps.sh --bench)')
    with open('/proc/loadavg') as f:
        log(f'load average at start: {f.read().split()[0]}; {os.cpu_count()} CPUs; work dir {work}')
    state = make_state(args.size_mib, args.dtype)
    logical = None
    results = {'plain': [], 'btrfs': [], 'before': [], 'lmcfs': []}
    order = ['plain', 'btrfs', 'before', 'lmcfs', 'lmcfs', 'before', 'btrfs', 'plain']
    cold_ok = True
    for case in order:
        if (case == 'btrfs' and not btrfs) or (case == 'before' and not args.bin_before):
            continue
        if case == 'plain':
            d = os.path.join(work, 'plain')
            os.makedirs(d, exist_ok=True)
            p = os.path.join(d, 'ckpt.pt')
            drop_caches()
            dt = save(state, p)
            logical = os.path.getsize(p)
            cold_ok = drop_caches()
            rt = read(p)
            results[case].append(dict(save=dt, read=rt, stored=logical))
            os.remove(p)
        elif case == 'btrfs':
            with Btrfs(work, args.size_mib) as b:
                p = os.path.join(b.mnt, 'ckpt.pt')
                os.sync()
                before = used_bytes(b.mnt)
                drop_caches()
                dt = save(state, p)
                os.sync()
                stored = used_bytes(b.mnt) - before
                drop_caches()
                rt = read(p)
                results[case].append(dict(save=dt, read=rt, stored=stored))
        else:
            with Lmcfs(args.bin_before if case == 'before' else args.bin, work, args.mount_opts) as m:
                p = os.path.join(m.mnt, 'ckpt.pt')
                drop_caches()
                c0 = cpu_seconds(m.proc.pid)
                dt = save(state, p)
                c1 = cpu_seconds(m.proc.pid)
                stored = os.stat(p).st_blocks * 512
                drop_caches()
                c2 = cpu_seconds(m.proc.pid)
                rt = read(p)
                c3 = cpu_seconds(m.proc.pid)
                wt = read(p)  # kept pages (FOPEN_KEEP_CACHE)
                results[case].append(dict(save=dt, read=rt, warm=wt, stored=stored, cpu_w=c1 - c0,
                                          cpu_r=c3 - c2))
        r = results[case][-1]
        line = (f'{case:6s} save {logical / 1e6 / r["save"]:7.1f} MB/s ({r["save"]:6.2f} s)  '
                f'cold read {logical / 1e6 / r["read"]:7.1f} MB/s  stored/logical {r["stored"] / logical:.3f}')
        if case in ('lmcfs', 'before'):
            gib = logical / (1 << 30)
            line += (f'  warm read {logical / 1e6 / r["warm"]:7.1f} MB/s  daemon CPU {r["cpu_w"] / gib:.2f} s/GiB '
                     f'written, {r["cpu_r"] / gib:.2f} s/GiB read')
        log(line)
    if not cold_ok:
        log('note: caches were not dropped (not root): the reads are not cold')
    with open('/proc/loadavg') as f:
        log(f'load average at end: {f.read().split()[0]}')

    def best(case, key):
        xs = [r[key] for r in results[case]]
        return min(xs) if xs else None

    log(f'\nsummary ({args.dtype}, {logical / 1e6:.1f} MB, best of each):')
    plain_t = best('plain', 'save')
    lm_t = best('lmcfs', 'save')
    ratio = results['lmcfs'][0]['stored'] / logical
    log(f'  save: plain {logical / 1e6 / plain_t:.0f} MB/s, lmcfs {logical / 1e6 / lm_t:.0f} MB/s '
        f'= {plain_t / lm_t:.2f}x plain' + (
            f', btrfs zstd:1 {logical / 1e6 / best("btrfs", "save"):.0f} MB/s (lmcfs {best("btrfs", "save") / lm_t:.2f}x '
            f'btrfs; btrfs stored/logical {results["btrfs"][0]["stored"] / logical:.3f})' if results['btrfs'] else ''))
    limit = plain_t * ratio
    log(f'  disk-bound limit (plain time x {ratio:.3f}): {logical / 1e6 / limit:.0f} MB/s; lmcfs reaches '
        f'{100 * limit / lm_t:.0f}% of it')
    log(f'  cold read: plain {logical / 1e6 / best("plain", "read"):.0f} MB/s, lmcfs '
        f'{logical / 1e6 / best("lmcfs", "read"):.0f} MB/s; warm re-read lmcfs '
        f'{logical / 1e6 / best("lmcfs", "warm"):.0f} MB/s')
    log(f'  daemon CPU per GiB written: {min(r["cpu_w"] for r in results["lmcfs"]) / (logical / (1 << 30)):.2f} s')
    if results['before']:
        b_t = best('before', 'save')
        log(f'  before ({args.bin_before}): save {logical / 1e6 / b_t:.0f} MB/s (now {b_t / lm_t:.2f}x that), '
            f'cold read {logical / 1e6 / best("before", "read"):.0f} MB/s, warm re-read '
            f'{logical / 1e6 / best("before", "warm"):.0f} MB/s, daemon CPU '
            f'{min(r["cpu_w"] for r in results["before"]) / (logical / (1 << 30)):.2f} s/GiB written')


if __name__ == '__main__':
    main()
