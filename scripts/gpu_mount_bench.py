#!/usr/bin/env python3
"""torch.save + fsync of a real checkpoint through lmcfs with gpu=on against
gpu=off, and to the plain disk, in one run (docs/BENCHMARKS.md, "GPU codec",
"Through the mount").

The checkpoint: the bf16 weights of a small transformer trained on the GPU
(scripts/gpu_anchors.py --make-data writes them, snapshot after snapshot),
as a state dict of 64 MiB tensors, saved with torch.save. Order: plain,
off, on, auto, on, off, each into a fresh store; page cache dropped before
each save where /proc/sys/vm/drop_caches is writable. Besides the time, the
daemon's CPU seconds during the save (/proc/PID/stat): what the GPU takes
off the node's cores.

Unless --no-read, the first run of each of --read-modes (off, on) then saves a next step of the same
checkpoint (one bf16 element in 97 changed in its last bit) as ckpt-step2.pt,
waits for the background rebases (reverse deltas: ckpt-step1.pt becomes deltas
on ckpt-step2.pt), remounts with the same gpu= mode, drops the page cache, and
reads ckpt-step2.pt and then ckpt-step1.pt back in 1 MiB reads: read speed (cold, as
torch.load of a checkpoint meets it; with gpu=on, read-ahead decodes on
the GPU, the deltas of ckpt-step1.pt after their bases), and every byte
compared with the checkpoint's own bytes.

  python3 scripts/gpu_mount_bench.py --mount build/tools/mountlmcfs/mount.lmcfs \
      --data CKPT.bf16 --work /tmp/gmb --out results.json
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchutil import daemon_pid, wait_exit, wait_rebases  # noqa: E402


def drop_caches():
    try:
        os.sync()
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
        return True
    except OSError:
        return False


def du_bytes(path):
    total = 0
    for root, _, files in os.walk(path):
        for n in files:
            try:
                total += os.lstat(os.path.join(root, n)).st_blocks * 512
            except OSError:
                pass
    return total


def cpu_seconds(pid):
    """User + system CPU seconds of a process and its threads so far."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return None


def save(sd, path):
    import torch

    t0 = time.perf_counter()
    with open(path, "wb") as f:
        torch.save(sd, f)
        f.flush()
        os.fsync(f.fileno())
    return time.perf_counter() - t0


def read_back(path):
    """Reads a file in 1 MiB reads: (seconds, sha256 hex)."""
    import hashlib

    h = hashlib.sha256()
    t0 = time.perf_counter()
    with open(path, "rb", buffering=0) as f:
        for b in iter(lambda: f.read(1 << 20), b""):
            h.update(b)
    return time.perf_counter() - t0, h.hexdigest()


def saved_sha(sd):
    """The sha256 of torch.save(sd) (deterministic for the same tensors)."""
    import hashlib
    import io

    import torch

    buf = io.BytesIO()
    torch.save(sd, buf)
    return hashlib.sha256(buf.getbuffer()).hexdigest()


def read_run(a, mode, env, store, mnt, log_prefix, sd2, want):
    """The next step saved, its rebases waited for, then a remount with the
    page cache dropped and both files read back (see the docstring)."""
    reads = {}

    def mount(suffix):
        r = subprocess.run([a.mount, store, mnt, "-o", f"gpu={mode},log_file={log_prefix}{suffix},log_level=info"],
                           capture_output=True, text=True, env=env, timeout=120)
        if r.returncode != 0:
            reads["error"] = r.stderr.strip()
            return None
        return daemon_pid(store)

    def unmount(pid):
        subprocess.run(["umount", mnt])
        wait_exit(pid, 10)

    pid = mount("-step2.log")
    if not pid:
        return reads
    try:
        save(sd2, os.path.join(mnt, "ckpt-step2.pt"))
        wait_rebases(mnt, 120)
    finally:
        unmount(pid)
    pid = mount("-read.log")
    if not pid:
        return reads
    try:
        try:  # what of the older save is stored as deltas (the reads' delta chains)
            reads["step1_delta_bytes"] = int(os.getxattr(os.path.join(mnt, "ckpt-step1.pt"), "user.lmcfs.delta_bytes"))
        except (OSError, ValueError):
            pass
        reads["caches_dropped"] = drop_caches()
        for name in ("ckpt-step2.pt", "ckpt-step1.pt"):
            t, sha = read_back(os.path.join(mnt, name))
            reads[name] = {"seconds": t, "exact": sha == want[name]}
    finally:
        unmount(pid)
    with open(f"{log_prefix}-read.log") as f:  # the summaries at unmount: decodes by path, time by stage
        reads["log"] = [l.strip() for l in f if "codec paths" in l or "time in the write and codec" in l][-2:]
    return reads


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mount", required=True, help="mount.lmcfs binary")
    ap.add_argument("--data", required=True, help="raw bf16 file (gpu_anchors.py --make-data)")
    ap.add_argument("--work", required=True, help="scratch folder on the disk under test")
    ap.add_argument("--out", help="JSON results")
    ap.add_argument("--order", default="plain,off,on,auto,on,off")
    ap.add_argument("--libs", default="", help="folder of mount.lmcfs's shared libraries (LD_LIBRARY_PATH for it alone)")
    ap.add_argument("--no-read", dest="read", action="store_false", help="saves only, no read-back")
    ap.add_argument("--read-modes", default="off,on",
                    help="gpu= modes whose first run also reads back (time: the device is lent for minutes)")
    a = ap.parse_args()

    import torch

    raw = bytearray(open(a.data, "rb").read())
    flat = torch.frombuffer(raw, dtype=torch.bfloat16)
    per = (64 << 20) // 2
    sd = {f"model.w{i:03d}": flat[i * per:(i + 1) * per].clone() for i in range((flat.numel() + per - 1) // per)}
    logical = sum(t.numel() * 2 for t in sd.values())
    print(f"checkpoint: {len(sd)} bf16 tensors, {logical / 2**30:.2f} GiB", flush=True)
    if a.read:
        sd2 = {}
        for name, t in sd.items():
            t2 = t.clone()
            t2.view(torch.int16)[::97] ^= 1
            sd2[name] = t2
        want = {"ckpt-step1.pt": saved_sha(sd), "ckpt-step2.pt": saved_sha(sd2)}

    results = []
    read_modes = set(a.read_modes.split(","))
    shutil.rmtree(a.work, ignore_errors=True)
    os.makedirs(a.work)
    for k, mode in enumerate(a.order.split(",")):
        dropped = drop_caches()
        if mode == "plain":
            d = os.path.join(a.work, f"plain{k}")
            os.makedirs(d)
            secs = save(sd, os.path.join(d, "ckpt-step1.pt"))
            stored = du_bytes(d)
            results.append({"mode": "plain", "seconds": secs, "stored": stored, "caches_dropped": dropped})
            shutil.rmtree(d)
        else:
            store = os.path.join(a.work, f"store{k}")
            mnt = os.path.join(a.work, f"mnt{k}")
            os.makedirs(store)
            os.makedirs(mnt)
            log = os.path.join(a.work, f"mount{k}.log")
            env = dict(os.environ)
            if a.libs:
                env["LD_LIBRARY_PATH"] = os.path.abspath(a.libs)
            r = subprocess.run([a.mount, store, mnt, "-o", f"gpu={mode},log_file={log},log_level=info"],
                               capture_output=True, text=True, env=env, timeout=120)
            if r.returncode != 0:
                results.append({"mode": mode, "error": r.stderr.strip()})
                print(f"{mode}: mount failed: {r.stderr.strip()}", flush=True)
                continue
            pid = daemon_pid(store)
            cpu0 = cpu_seconds(pid) if pid else None
            try:
                secs = save(sd, os.path.join(mnt, "ckpt-step1.pt"))
                cpu1 = cpu_seconds(pid) if pid else None
                gpu = None
                try:
                    gpu = os.getxattr(mnt, "user.lmcfs.gpu").decode()
                except OSError:
                    pass
            finally:
                subprocess.run(["umount", mnt])
                # The daemon logs its codec-path summary as it exits: wait
                # for it before the log is read.
                wait_exit(pid, 10)
            stored = du_bytes(store)
            with open(log) as f:
                found = [l.strip() for l in f if "codec" in l or "GPU" in l or "gpu" in l]
                lines = found[:2] + found[2:][-3:]  # the mount's codec path, and the summary at unmount
            daemon_cpu = cpu1 - cpu0 if cpu0 is not None and cpu1 is not None else None
            reads = {}
            if a.read and mode in read_modes:
                read_modes.discard(mode)
                reads = read_run(a, mode, env, store, mnt, os.path.join(a.work, f"mount{k}"), sd2, want)
            results.append({"mode": f"gpu={mode}", "seconds": secs, "stored": stored, "gpu": gpu,
                            "daemon_cpu_s": daemon_cpu, "log": lines, "caches_dropped": dropped,
                            "reads": reads})
            shutil.rmtree(store, ignore_errors=True)
        r = results[-1]
        if "seconds" in r:
            print(f"{r['mode']:>8}: {r['seconds']:.2f} s, {logical / r['seconds'] / 1e6:.0f} MB/s, "
                  f"stored {r['stored'] / 2**30:.2f} GiB ({100 * r['stored'] / logical:.1f}%)"
                  + (f", daemon CPU {r['daemon_cpu_s']:.1f} s ({r['daemon_cpu_s'] / (logical / 2**30):.2f} s/GiB)"
                     if r.get("daemon_cpu_s") is not None else ""), flush=True)
            if r.get("gpu"):
                print(f"          gpu: {r['gpu']}", flush=True)
            for l in r.get("log", []):
                print(f"          log: {l}", flush=True)
            for name, x in r.get("reads", {}).items():
                if name == "step1_delta_bytes":
                    print(f"          ckpt-step1.pt stored as deltas: {x / 2**20:.1f} MiB", flush=True)
                elif name == "log":
                    for l in x:
                        print(f"          read log: {l}", flush=True)
                elif isinstance(x, dict):
                    print(f"          read {name}: {x['seconds']:.2f} s, {logical / x['seconds'] / 1e6:.0f} MB/s, "
                          f"{'exact' if x['exact'] else 'MISMATCH'}", flush=True)
                elif name == "error":
                    print(f"          read: remount failed: {x}", flush=True)
    if a.out:
        with open(a.out, "w") as f:
            json.dump({"logical": logical, "runs": results}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
