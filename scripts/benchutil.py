"""Helpers shared by the mount benchmarks (scripts/dedup_bench.py,
scripts/pair_bench.py): mount and unmount a store, wait for the background
rebases, and measure a directory as du does."""
import os
import subprocess
import time


def mount(build, store, mnt, options):
    """mount.lmcfs STORE MNT -o OPTIONS (the daemon goes to the background)."""
    subprocess.run([os.path.join(build, 'tools', 'mountlmcfs', 'mount.lmcfs'), store, mnt, '-o', options],
                   check=True)


def unmount(mnt, store):
    """Unmounts, then waits (30 s at most) for the daemon to flush and let go of the store's lock."""
    subprocess.run(['fusermount3', '-u', mnt], check=True)
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
