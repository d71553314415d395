#!/usr/bin/env python3
"""Full-store run: a checkpoint writer runs its store out of space again and
again, as a training job with `save_total_limit` does on a disk or a Ceph
pool that is nearly full. The store lives on a small filesystem of its own
(a tmpfs of --mib MiB) or, with --store rados, in a Ceph pool of its own
with a quota of --mib MiB (the single-host cluster of scripts/ceph-dev.sh,
whose manager reports the pool's figures that the quota is enforced by).

Each round the writer saves checkpoints as trainers do (a temporary file
written, fsync'd and renamed over its final name; each save the last one
with a few changes, so that background rebases turn older saves into
deltas, and a file of random bytes beside it) until a write, fsync or close
fails. That error must be ENOSPC or EDQUOT, never EIO and never a save held
for long (at most 30 s, not the cluster's 120 s timeout); the temporary
file that hit the wall must be absent, empty or a prefix of its bytes.
Then every save that completed must read back byte-identical; the writer
deletes its oldest saves (down to --keep-last) and saves again, deleting
one more each time a save still fails, until one succeeds: the space must
come back without lmcfs-gc (POSIX: at once; RADOS: within 90 s, once the
manager reports the freed pool). Between rounds, now and then: lmcfs-gc on
the mountpoint, dropped page caches, a remount (POSIX: lmcfs-fsck of the
unmounted store in between). At the end: the rebases drain, every file
reads back after a remount, and the store is clean under lmcfs-fsck --deep
(POSIX).

  python3 scripts/full_run.py --rounds 20                 # long form, on a tmpfs
  python3 scripts/full_run.py --rounds 10 --store rados   # in a Ceph pool with a quota
  python3 scripts/full_run.py --rounds 3 --seed 21        # CI form (MountFullRun)

Prints the seed. A failure keeps the work directory (store or local
index, daemon log, ops.log) and, in RADOS, the pool.
"""
import argparse
import errno
import hashlib
import json
import os
import random
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchutil import finish, mount, sha256_file as sha, unmount, wait_rebases  # noqa: E402

FULL = (errno.ENOSPC, errno.EDQUOT)


class Failure(Exception):
    pass


class Run:
    def __init__(self, a, work):
        self.a, self.work = a, work
        self.rnd = random.Random(a.seed)
        self.mnt = os.path.join(work, 'mnt')
        os.makedirs(self.mnt)
        self.log = os.path.join(work, 'daemon.log')
        self.options = f'log_file={self.log},log_level=info'
        self.pool = None
        self.small = None
        if a.store == 'rados':
            self.pool = f'lmcfs-fullrun-{os.getpid()}-{self.rnd.randrange(100000)}'
            self.store = f'rados:{self.pool}/s'
            self.options += f',local_dir={os.path.join(work, "local")},lease=5'
        else:
            self.small = os.path.join(work, 'small')
            os.makedirs(self.small)
            self.store = os.path.join(self.small, 'store')
        self.files = {}  # name on the mount -> sha256 of what its completed save wrote
        self.order = []  # saved names, oldest first
        self.step = 0
        self.base = bytearray(self.rnd.randbytes(a.save_kib << 10))
        self.stats = {'rounds': 0, 'walls': 0, 'saves': 0, 'deleted': 0, 'remounts': 0, 'gcs': 0,
                      'slowest_wall_s': 0.0, 'slowest_return_s': 0.0, 'verified': 0}
        self.ops = open(os.path.join(work, 'ops.log'), 'w')
        self.t0 = time.time()

    def note(self, msg):
        self.ops.write(f'{time.time() - self.t0:.1f} s: {msg}\n')
        self.ops.flush()

    def tool(self, name):
        return os.path.join(self.a.build, 'tools', 'lmcfs', name)

    def ceph(self, *args):
        r = subprocess.run(['timeout', '30', 'ceph'] + list(args), capture_output=True, text=True)
        if r.returncode != 0:
            raise Failure(f'ceph {" ".join(args)} exited {r.returncode}: {r.stderr.strip()}')
        return r.stdout

    # -- setup and teardown ---------------------------------------------------
    def start(self):
        if self.pool:
            self.ceph('osd', 'pool', 'create', self.pool, '1', '1', 'replicated', '--size', '1')
            self.ceph('osd', 'pool', 'application', 'enable', self.pool, 'rados')
            self.ceph('osd', 'pool', 'set-quota', self.pool, 'max_bytes', str(self.a.mib << 20))
            end = time.time() + 60
            while not any(p.get('name') == self.pool for p in json.loads(self.ceph('df', '-f', 'json'))['pools']):
                if time.time() > end:
                    raise Failure(f'the cluster reports no figures for pool {self.pool} after 60 s '
                                  '(no manager? ceph -s; scripts/ceph-dev.sh starts one)')
                time.sleep(0.5)
        else:
            subprocess.run(['mount', '-t', 'tmpfs', '-o', f'size={self.a.mib}m,mode=0700', 'tmpfs', self.small],
                           check=True)
        mount(self.a.build, self.store, self.mnt, self.options)

    def stop(self, passed):
        if os.path.ismount(self.mnt):
            subprocess.run(['fusermount3', '-u', '-z', self.mnt], check=False)
            time.sleep(1)
        if self.small and os.path.ismount(self.small) and passed:
            subprocess.run(['umount', '-l', self.small], check=False)
        if self.pool and passed:
            self.ceph('osd', 'pool', 'rm', self.pool, self.pool, '--yes-i-really-really-mean-it')

    # -- the writer -------------------------------------------------------------
    def next_save(self):
        """The next checkpoint's bytes: the last one with a few changed runs."""
        for _ in range(self.rnd.randrange(1, 8)):
            at = self.rnd.randrange(len(self.base))
            n = min(len(self.base) - at, self.rnd.randrange(1, 4096))
            self.base[at:at + n] = self.rnd.randbytes(n)
        return bytes(self.base)

    def save(self, name, data):
        """Writes data to name.tmp, fsyncs, renames it to name: 0, or the
        errno of the call that failed (the temporary file checked, then
        removed). Fails the run on any error but a full store, and on a save
        held longer than 30 s."""
        tmp = os.path.join(self.mnt, name + '.tmp')
        t = time.time()
        err = 0
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                for off in range(0, len(data), 1 << 20):
                    os.write(fd, data[off:off + (1 << 20)])
                os.fsync(fd)
            finally:
                os.close(fd)
            os.rename(tmp, os.path.join(self.mnt, name))
        except OSError as e:
            err = e.errno
        took = time.time() - t
        if took > 30:
            raise Failure(f'saving {name} took {took:.1f} s (held, not refused?)')
        if err == 0:
            self.files[name] = hashlib.sha256(data).hexdigest()
            if name in self.order:
                self.order.remove(name)
            self.order.append(name)
            self.stats['saves'] += 1
            return 0
        if err not in FULL:
            raise Failure(f'saving {name}: {os.strerror(err)} (errno {err}), want ENOSPC or EDQUOT')
        self.stats['slowest_wall_s'] = max(self.stats['slowest_wall_s'], round(took, 2))
        if os.path.exists(tmp):
            with open(tmp, 'rb') as f:
                got = f.read()
            if got != data[:len(got)]:
                raise Failure(f'{name}.tmp, which hit the wall, holds other bytes than a prefix of its own '
                              f'({len(got)} bytes)')
            os.unlink(tmp)
        return err

    def delete_oldest(self):
        name = self.order.pop(0)
        os.unlink(os.path.join(self.mnt, name))
        del self.files[name]
        self.stats['deleted'] += 1
        self.note(f'deleted {name}')

    def round(self):
        self.stats['rounds'] += 1
        # Saves until the store is full (the pool's quota is enforced a few
        # seconds late: saves are paced so that the writer does not run far
        # past it meanwhile).
        for _ in range(10 * (self.a.mib << 10) // self.a.save_kib + 50):
            self.step += 1
            name = f'ckpt-{self.step}.bin' if self.step % 3 else f'rand-{self.step}.bin'
            data = self.next_save() if self.step % 3 else self.rnd.randbytes(self.a.save_kib << 10)
            err = self.save(name, data)
            if err:
                self.stats['walls'] += 1
                self.note(f'{name}: {os.strerror(err)} ({len(self.files)} files kept)')
                break
            self.note(f'saved {name}')
            if self.pool:
                time.sleep(0.25)
        else:
            raise Failure(f'the store never filled (quota or filesystem of {self.a.mib} MiB)')
        self.verify()
        # The trainer's rotation, then saves again: one more deleted each
        # time a save still fails, until the space comes back.
        while len(self.order) > self.a.keep_last:
            self.delete_oldest()
        t = time.time()
        deadline = t + (90 if self.pool else 5)
        while True:
            self.step += 1
            name = f'ckpt-{self.step}.bin'
            if self.save(name, self.next_save()) == 0:
                break
            if time.time() > deadline:
                raise Failure(f'no space came back {time.time() - t:.0f} s after the rotation '
                              f'({len(self.order)} files left)')
            if self.order:
                self.delete_oldest()
            time.sleep(1 if self.pool else 0.1)
        back = time.time() - t
        self.stats['slowest_return_s'] = max(self.stats['slowest_return_s'], round(back, 2))
        self.note(f'space back after {back:.1f} s: saved {name}')
        # Now and then: gc, dropped caches, a remount.
        if self.rnd.random() < 0.4:
            r = subprocess.run([self.tool('lmcfs-gc'), '-q', self.mnt], capture_output=True, text=True)
            # On a store still full, gc's compaction may find no room: it
            # must say so, not fail otherwise.
            if r.returncode != 0 and 'space' not in (r.stderr + r.stdout).lower():
                raise Failure(f'lmcfs-gc {self.mnt} exited {r.returncode}: {r.stderr.strip()}')
            self.stats['gcs'] += 1
            self.note(f'gc (exit {r.returncode})')
        if os.access('/proc/sys/vm/drop_caches', os.W_OK) and self.rnd.random() < 0.5:
            with open('/proc/sys/vm/drop_caches', 'w') as f:
                f.write('3')
        if self.rnd.random() < 0.3:
            self.remount()

    def remount(self):
        unmount(self.mnt, self.store)
        if not self.pool:
            self.fsck(deep=False)
        mount(self.a.build, self.store, self.mnt, self.options)
        self.stats['remounts'] += 1
        self.note('remount')
        self.verify()

    def fsck(self, deep):
        r = subprocess.run([self.tool('lmcfs-fsck'), '-q'] + (['--deep'] if deep else []) + [self.store],
                           capture_output=True, text=True)
        if r.returncode != 0:
            raise Failure(f'lmcfs-fsck exited {r.returncode}: {r.stdout[-2000:]} {r.stderr[-2000:]}')

    def verify(self):
        names = sorted(n for n in os.listdir(self.mnt))
        if names != sorted(self.files):
            raise Failure(f'the mount lists {sorted(set(names) - set(self.files))[:5]} more and '
                          f'{sorted(set(self.files) - set(names))[:5]} less than the saves kept')
        for name, want in self.files.items():
            if sha(os.path.join(self.mnt, name)) != want:
                raise Failure(f'{name} reads back other bytes than its save wrote')
            self.stats['verified'] += 1

    def finish(self):
        wait_rebases(self.mnt)
        self.verify()
        unmount(self.mnt, self.store)
        if not self.pool:
            self.fsck(deep=True)
        mount(self.a.build, self.store, self.mnt, self.options)
        self.verify()
        unmount(self.mnt, self.store)
        with open(self.log) as f:
            bad = [line for line in f if '[error]' in line or '[critical]' in line]
        if bad:
            raise Failure(f'the daemon logged {len(bad)} error lines, the first: {bad[0].strip()}')


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--build', default='build')
    ap.add_argument('--rounds', type=int, default=8)
    ap.add_argument('--seed', type=int, default=None)
    ap.add_argument('--store', choices=['tmpfs', 'rados'], default='tmpfs',
                    help='where the store lives: a tmpfs of --mib MiB, or a Ceph pool with a quota of --mib MiB')
    ap.add_argument('--mib', type=int, default=64)
    ap.add_argument('--save-kib', type=int, default=3072, help='size of each save')
    ap.add_argument('--keep-last', type=int, default=3)
    ap.add_argument('--keep', action='store_true', help='keep the work directory')
    a = ap.parse_args()
    if a.seed is None:
        a.seed = random.randrange(1 << 30)
    if os.geteuid() != 0:
        sys.exit('full_run.py: run as root (it mounts a tmpfs or makes a Ceph pool, and drops caches)')
    work = tempfile.mkdtemp(prefix='lmcfs_full_', dir='/tmp')
    print(f'full_run: seed {a.seed}, {a.rounds} rounds, {a.store} of {a.mib} MiB, work {work}', flush=True)
    run = Run(a, work)
    failures = []
    try:
        run.start()
        for _ in range(a.rounds):
            run.round()
        run.finish()
    except Failure as e:
        failures.append(str(e))
    except OSError as e:  # a remove, listing or read that failed: never expected
        failures.append(f'{e.filename or ""}: {e.strerror} (errno {e.errno})')
    run.stats['seconds'] = round(time.time() - run.t0, 1)
    run.stats['seed'] = a.seed
    run.stop(passed=not failures)
    return finish('full_run', run.stats, failures, work, a.keep)


if __name__ == '__main__':
    sys.exit(main())
