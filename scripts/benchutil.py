"""Helpers shared by the mount benchmarks and runs (scripts/dedup_bench.py,
scripts/pair_bench.py, scripts/rados_bench.py, scripts/crash_run.py): mount
and unmount a store, find its daemon, wait for the background rebases,
measure a directory as du does, hash a file."""
import hashlib
import json
import os
import shutil
import subprocess
import time


def mount(build, store, mnt, options):
    """mount.lmcfs STORE MNT -o OPTIONS (the daemon goes to the background)."""
    subprocess.run([os.path.join(build, 'tools', 'mountlmcfs', 'mount.lmcfs'), store, mnt, '-o', options],
                   check=True)


def unmount(mnt, store):
    """Unmounts, then waits (30 s at most) for the daemon to flush and exit
    (a store in a directory: to let go of its lock)."""
    pid = daemon_pid(store, mnt)
    subprocess.run(['fusermount3', '-u', mnt], check=True)
    if pid:
        wait_exit(pid)
        return
    for _ in range(300):
        if subprocess.run(['fuser', os.path.join(store, 'LOCK')], capture_output=True).returncode != 0:
            return
        time.sleep(0.1)


def wait_rebases(mnt, timeout=600):
    """Waits until the mount's background rebase queue is empty (user.lmcfs.pending_rebases)."""
    end = time.time() + timeout
    while time.time() < end:
        try:
            if int(os.getxattr(mnt, 'user.lmcfs.pending_rebases')) == 0:
                return
        except OSError:
            return
        time.sleep(0.2)


def du(root):
    """Allocated bytes under root (st_blocks * 512, each inode once): what du -s -B1 prints."""
    seen, n = set(), os.lstat(root).st_blocks * 512
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            st = os.lstat(os.path.join(dirpath, name))
            if st.st_ino not in seen:
                seen.add(st.st_ino)
                n += st.st_blocks * 512
    return n


def daemon_pid(store, mnt=None):
    """The pid of the mount.lmcfs daemon serving STORE (at MNT, where several
    mounts of one store run: a writer and its followers), or None."""
    pattern = f'mount.lmcfs {store} ' + (f'{mnt} ' if mnt else '')
    out = subprocess.run(['pgrep', '-f', pattern], capture_output=True, text=True).stdout.split()
    return int(out[0]) if out else None


def wait_exit(pid, seconds=30):
    """Waits until process pid (None: none) has exited; False if it has not
    after `seconds`."""
    end = time.time() + seconds
    while pid and os.path.exists(f'/proc/{pid}'):
        if time.time() > end:
            return False
        time.sleep(0.05)
    return True


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, 'rb') as f:
        for b in iter(lambda: f.read(1 << 20), b''):
            h.update(b)
    return h.hexdigest()


def finish(prog, stats, failures, work, keep=False):
    """Ends a fault run: prints its figures as one JSON line and each failure,
    keeps the work directory when it failed (or with keep), and returns the
    exit code."""
    print(f'{prog}: ' + json.dumps(stats), flush=True)
    if failures or keep:
        print(f'{prog}: work directory kept: {work}', flush=True)
    else:
        shutil.rmtree(work, ignore_errors=True)
    for f in failures:
        print('FAILED: ' + f, flush=True)
    return 1 if failures else 0


def rados_rm_namespace(ns, pool='lmcfs'):
    """Removes every object of a RADOS namespace (a store rados:POOL/NS) and
    the local index the tools kept of it in this user's default place
    (lmc::store::DefaultLocalDir)."""
    objs = subprocess.run(['rados', '-p', pool, '-N', ns, 'ls'], capture_output=True, text=True).stdout.split()
    for o in objs:
        subprocess.run(['rados', '-p', pool, '-N', ns, 'rm', o], check=False)
    if os.geteuid() == 0:
        base = '/var/cache/lmcfs'
    elif os.environ.get('XDG_CACHE_HOME'):
        base = os.path.join(os.environ['XDG_CACHE_HOME'], 'lmcfs')
    elif os.environ.get('HOME'):
        base = os.path.join(os.environ['HOME'], '.cache', 'lmcfs')
    else:
        base = f'/tmp/lmcfs-{os.geteuid()}'
    shutil.rmtree(os.path.join(base, 'rados', pool, ns), ignore_errors=True)


def train_gpt_series(steps, width, vocab=8192, layers=4):
    """A small GPT-style model trained with AdamW on this machine (seeded):
    yields (step, model, optimizer) after each of `steps` steps of two
    batches, for the caller to save as it likes."""
    import torch
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(d_model=width, nhead=8, dim_feedforward=4 * width, batch_first=True)
    model = torch.nn.Sequential(torch.nn.Embedding(vocab, width), torch.nn.TransformerEncoder(layer, num_layers=layers),
                                torch.nn.Linear(width, vocab))
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
    for step in range(1, steps + 1):
        for _ in range(2):
            x = torch.randint(0, vocab, (4, 64))
            loss = torch.nn.functional.cross_entropy(model(x).reshape(-1, vocab), x.reshape(-1))
            opt.zero_grad()
            loss.backward()
            opt.step()
        yield step, model, opt
