#!/usr/bin/env python3
"""torch.save + fsync into a long-lived lmcfs mount against the plain disk,
alternating, in one run (docs/BENCHMARKS.md, "Saves into a mount that stays
mounted").

scripts/e2e_bench.py and scripts/fs_ab.sh mount a fresh store for every
save, so every save there also pays a new daemon's first touch of its
buffers (page faults: about a third of the daemon's CPU on a 1 GiB save).
A training job's mount stays up for the whole run; this measures that: one
mount, one warm-up save, then ROUNDS rounds of one save to the plain disk
(PLAIN, a directory on the disk the store is on) and one through the mount,
each of a checkpoint whose every 1 MiB differs from the last round's (no
chunk is a dedup hit), each file deleted after its save.

The checkpoint: MIB MiB of bf16 values N(0, 0.02) (seeded) as tensors of
32 MiB (--tensor-kib), or --data FILE (raw bf16, as scripts/gpu_anchors.py --make-data
writes). Save: torch.save into an open file, flush, fsync of the file and of
its directory. --warm-up-tensor-kib 32768 --tensor-kib 3072: a mount that
saved large tensors first, then small ones. After the last round, the daemon's memory by part,
its resident size and peak among them (lmcfs-stat's "memory:" lines).

  python3 scripts/warm_save_bench.py --mount build/tools/mountlmcfs/mount.lmcfs \\
      --mib 1024 --rounds 4 --work /var/tmp/lmcfs-warm
"""
import argparse
import os
import shutil
import subprocess
import sys
import time

import numpy as np
import torch

import benchutil


def durable_save(state, path):
    t0 = time.perf_counter()
    with open(path, "wb") as f:
        torch.save(state, f)
        f.flush()
        os.fsync(f.fileno())
    d = os.open(os.path.dirname(path), os.O_RDONLY)
    os.fsync(d)
    os.close(d)
    return time.perf_counter() - t0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mount", required=True, help="mount.lmcfs binary")
    ap.add_argument("--mib", type=int, default=1024)
    ap.add_argument("--data", help="raw bf16 file (default: N(0, 0.02) values)")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--work", default="/var/tmp/lmcfs-warm",
                    help="holds the store, the mountpoint and the plain directory")
    ap.add_argument("--options", default="gpu=off", help="mount options (-o)")
    ap.add_argument("--tensor-kib", type=int, default=32 << 10,
                    help="size of each tensor (a torch.save starts a dirty block per tensor)")
    ap.add_argument("--warm-up-tensor-kib", type=int,
                    help="tensor size of the warm-up save (default: --tensor-kib)")
    ap.add_argument("--stat", help="lmcfs-stat binary (default: beside the mount's, ../lmcfs/lmcfs-stat)")
    args = ap.parse_args()

    n = args.mib << 19  # bf16 elements
    if args.data:
        raw = np.fromfile(args.data, dtype=np.int16, count=n)
    else:
        rng = np.random.default_rng(1)
        x = rng.standard_normal(n, dtype=np.float32) * 0.02
        raw = (x.view(np.uint32) >> 16).astype(np.int16)
    t = torch.from_numpy(raw).view(torch.bfloat16)
    per = args.tensor_kib << 9  # elements
    def split(per):
        return {f"t{i}": t[i * per:(i + 1) * per].clone() for i in range((len(raw) + per - 1) // per)}

    state = split(per)
    warm = split(args.warm_up_tensor_kib << 9) if args.warm_up_tensor_kib else state

    store, mnt, plain = (os.path.join(args.work, d) for d in ("store", "mnt", "plain"))
    shutil.rmtree(args.work, ignore_errors=True)
    for d in (store, mnt, plain):
        os.makedirs(d)
    subprocess.check_call([args.mount, store, mnt, "-o", args.options])
    daemon = benchutil.daemon_pid(store)
    try:
        durable_save(warm, os.path.join(mnt, "warm-up.pt"))
        os.unlink(os.path.join(mnt, "warm-up.pt"))
        ratios = []
        for k in range(args.rounds):
            for v in state.values():  # every 1 MiB differs from the last round's
                v.view(torch.int16)[::1 << 19] ^= k + 1
            p = durable_save(state, os.path.join(plain, f"ckpt-{k}.pt"))
            time.sleep(1)
            m = durable_save(state, os.path.join(mnt, f"ckpt-{k}.pt"))
            ratios.append(p / m)
            print(f"round {k}: {args.mib} MiB, plain {p:.3f} s ({args.mib / p:.0f} MiB/s), "
                  f"lmcfs {m:.3f} s ({args.mib / m:.0f} MiB/s), lmcfs speed / plain {p / m:.2f}", flush=True)
            os.unlink(os.path.join(plain, f"ckpt-{k}.pt"))
            os.unlink(os.path.join(mnt, f"ckpt-{k}.pt"))
            time.sleep(1)
        ratios.sort()
        print(f"lmcfs speed / plain: median {ratios[len(ratios) // 2]:.2f}, "
              f"range {ratios[0]:.2f}-{ratios[-1]:.2f} over {len(ratios)} rounds")
        stat = args.stat or os.path.join(os.path.dirname(os.path.abspath(args.mount)), "..", "lmcfs", "lmcfs-stat")
        if os.path.exists(stat):
            r = subprocess.run([stat, mnt], capture_output=True, text=True)
            for line in r.stdout.splitlines():
                if "memory" in line:
                    print(line.strip())
    finally:
        # The daemon flushes and exits after the unmount: the store goes once it has.
        benchutil.unmount(mnt, store)
        benchutil.wait_exit(daemon)
        shutil.rmtree(args.work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
