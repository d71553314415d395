#!/usr/bin/env python3
"""Soak run: random file operations on a real mount, checked against the
same operations on the plain disk (a shadow directory).

Checkpoint series (safetensors and torch.save files, each save the last one
plus small changes, so that background rebases turn older saves into
deltas) are mixed with what users and tools also do to such files: writes
at random offsets, truncates, renames over other files, hard links,
copy_file_range, a shared mapping written back, deletes, `lmcfs-gc` on the
mountpoint, fallocate (holes punched, ranges zeroed, space allocated),
appends, dropped page caches, and remounts with `lmcfs-fsck` of the
unmounted store in between. With --writers N, N threads do their
operations at once, each in its own directory, while lmcfs-gc and dropped
caches come beside them. Every few operations every file is compared
with its shadow (bytes, size, links), and, once the rebases are done,
each file's st_blocks with its stored bytes. At the end the store must be
clean under `lmcfs-fsck --deep` with no stale stored size.

  python3 scripts/soak_run.py --ops 400 --seed 1
  python3 scripts/soak_run.py --ops 3000 --options gc_dead=1     # long form
  python3 scripts/soak_run.py --ops 3000 --writers 4             # at once
  python3 scripts/soak_run.py --ops 400 --store rados:lmcfs/soak1  # in RADOS
  python3 scripts/soak_run.py --ops 400 --store rados:lmcfs/soak2 --follower

With --follower (a store in RADOS), a second mount follows the store
read-only all along, as another node would, across the writer's remounts:
at every check it must show the same names and bytes within 10 s, and
once the rebases are done, the writer's stored sizes (st_blocks) within
10 s and its pack bytes on disk (the holes the writer punched) within
15 s; its log must hold no error.
Prints the seed; with one writer the same seed replays the same
operations. A failure keeps the work directory (store, shadow, daemon
log, ops.log: every operation in order).
"""
import argparse
import ctypes
import io
import json
import mmap
import os
import random
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchutil import finish, mount, rados_rm_namespace, sha256_file as sha, unmount, wait_rebases  # noqa: E402

import torch  # noqa: E402
from safetensors.torch import save as st_bytes  # noqa: E402

M = 1 << 20
FALLOC_FL_KEEP_SIZE, FALLOC_FL_PUNCH_HOLE, FALLOC_FL_ZERO_RANGE = 0x01, 0x02, 0x10
LIBC = ctypes.CDLL(None, use_errno=True)
LIBC.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_long, ctypes.c_long]


class Failure(Exception):
    pass


class Tree:
    """A directory on the mount and its shadow on the plain disk."""

    def both(self, rel):
        return os.path.join(self.mnt, rel), os.path.join(self.shadow, rel)

    def files(self):
        out = []
        for dirpath, _, names in os.walk(self.shadow):
            for n in names:
                out.append(os.path.relpath(os.path.join(dirpath, n), self.shadow))
        return sorted(out)


class Worker(Tree):
    """One writer: its own random stream, checkpoint slots and directory
    (the whole tree when it is the only one), so that writers running at
    once never touch each other's files."""

    def __init__(self, soak, k, seed):
        self.soak = soak
        self.rnd = random.Random(seed)
        self.gen = torch.Generator().manual_seed(seed)
        self.top = f'w{k}' if soak.a.writers > 1 else ''
        self.mnt = os.path.join(soak.mnt, self.top) if self.top else soak.mnt
        self.shadow = os.path.join(soak.shadow, self.top) if self.top else soak.shadow
        os.makedirs(self.shadow, exist_ok=True)  # and its directory on the mount, once mounted
        # Checkpoint slots: directory, name, format, and the tensors they evolve.
        self.slots = []
        for i in range(soak.a.slots):
            fmt = ('st', 'st_atomic', 'pt')[i % 3]
            d = f'run{i % 2}'
            sd = {f'layer{j}.weight': (torch.randn(256, 512 * (1 + j % 3), generator=self.gen) * 0.02).to(
                torch.bfloat16) for j in range(4)}
            sd['head.fp32'] = torch.randn(512, 1024, generator=self.gen) * 0.02
            self.slots.append({'dir': d, 'fmt': fmt, 'sd': sd, 'step': 0})
        self.piece = 1 << 20

    def note(self, msg):
        self.soak.note((f'[{self.top}] ' if self.top else '') + msg)

    def count(self, what):
        with self.soak.lock:
            self.soak.stats[what] += 1

    def run(self, n, failures):
        ops = [(self.op_save, 30), (self.op_pwrite, 12), (self.op_truncate, 5), (self.op_unlink, 4),
               (self.op_rename, 6), (self.op_link, 3), (self.op_copy, 5), (self.op_mmap, 3),
               (self.op_fallocate, 3), (self.op_append, 3)]
        fns, weights = zip(*ops)
        try:
            for _ in range(n):
                self.count('ops')
                self.rnd.choices(fns, weights)[0]()
        except (Failure, OSError) as e:
            self.note(f'FAILED: {e}')
            failures.append(f'{self.top or "writer"}: {e}')

    # -- writing the same bytes to both sides ----------------------------------
    def write_pieces(self, path, data, offset=0, fsync=True, create=True):
        flags = os.O_WRONLY | (os.O_CREAT | os.O_TRUNC if create else 0)
        fd = os.open(path, flags, 0o644)
        try:
            pos = 0
            while pos < len(data):
                n = min(len(data) - pos, self.piece)
                os.pwrite(fd, data[pos:pos + n], offset + pos)
                pos += n
            if fsync:
                os.fsync(fd)
        finally:
            os.close(fd)

    # -- operations ------------------------------------------------------------
    def op_save(self):
        s = self.rnd.choice(self.slots)
        s['step'] += 1
        for k, t in s['sd'].items():  # a training step: small changes
            noise = torch.randn(t.shape, generator=self.gen) * (0.0005 if self.rnd.random() < 0.8 else 0.01)
            s['sd'][k] = (t.float() + noise).to(t.dtype)
        if s['fmt'] == 'pt':
            buf = io.BytesIO()
            torch.save({'step': s['step'], 'model': s['sd']}, buf)
            data = buf.getvalue()
            name = f'{s["dir"]}/model-{self.slots.index(s)}.pt'
        else:
            data = st_bytes(s['sd'], metadata={'step': str(s['step'])})
            name = f'{s["dir"]}/model-{self.slots.index(s)}.safetensors'
        for root in (self.mnt, self.shadow):
            os.makedirs(os.path.join(root, s['dir']), exist_ok=True)
        self.piece = self.rnd.choice([4096, 65536, 1 << 20, 3 * M + 17, len(data)])
        if s['fmt'] == 'st_atomic':
            tmp = name + '.tmp'
            for root in (self.mnt, self.shadow):
                self.write_pieces(os.path.join(root, tmp), data)
                os.rename(os.path.join(root, tmp), os.path.join(root, name))
        else:
            for p in self.both(name):
                self.write_pieces(p, data)
        self.count('saves')
        self.note(f'save {name} step {s["step"]} {len(data)} bytes piece {self.piece}')

    def pick(self):
        fs = self.files()
        return self.rnd.choice(fs) if fs else None

    def op_pwrite(self):
        rel = self.pick()
        if not rel:
            return
        size = os.path.getsize(self.both(rel)[1])
        off = self.rnd.randrange(0, size + 2 * M)
        n = self.rnd.choice([1, 100, 4096, 65536, M, self.rnd.randrange(1, 3 * M)])
        src = self.pick()
        if self.rnd.random() < 0.5 and src and os.path.getsize(self.both(src)[1]) > 0:
            # Bytes of another file (or this one): chunks the store may hold.
            with open(self.both(src)[1], 'rb') as f:
                ss = os.path.getsize(self.both(src)[1])
                f.seek(self.rnd.randrange(0, ss))
                data = f.read(n)
        else:
            data = self.rnd.randbytes(n)
        self.piece = self.rnd.choice([4096, 65536, M])
        fsync = self.rnd.random() < 0.5
        for p in self.both(rel):
            self.write_pieces(p, data, off, fsync=fsync, create=False)
        self.note(f'pwrite {rel} at {off} {len(data)} bytes fsync {fsync}')

    def op_truncate(self):
        rel = self.pick()
        if not rel:
            return
        size = os.path.getsize(self.both(rel)[1])
        n = self.rnd.choice([0, self.rnd.randrange(0, size + 1), size + self.rnd.randrange(1, 2 * M)])
        for p in self.both(rel):
            os.truncate(p, n)
        self.note(f'truncate {rel} to {n}')

    def op_unlink(self):
        rel = self.pick()
        if not rel:
            return
        for p in self.both(rel):
            os.unlink(p)
        self.note(f'unlink {rel}')

    def other_name(self, rel):
        d = self.rnd.choice(['run0', 'run1', 'misc'])
        for root in (self.mnt, self.shadow):
            os.makedirs(os.path.join(root, d), exist_ok=True)
        if self.rnd.random() < 0.5:
            t = self.pick()  # over an existing file
            if t and t != rel:
                return t
        return f'{d}/f{self.rnd.randrange(1000)}.bin'

    def op_rename(self):
        rel = self.pick()
        if not rel:
            return
        to = self.other_name(rel)
        for p, q in zip(self.both(rel), self.both(to)):
            os.rename(p, q)
        self.note(f'rename {rel} -> {to}')

    def op_link(self):
        rel = self.pick()
        if not rel:
            return
        to = self.other_name(rel)
        if os.path.exists(self.both(to)[1]):
            return
        for p, q in zip(self.both(rel), self.both(to)):
            os.link(p, q)
        self.note(f'link {rel} -> {to}')

    def op_copy(self):
        rel = self.pick()
        if not rel:
            return
        to = self.other_name(rel)
        if to == rel:
            return
        for p, q in zip(self.both(rel), self.both(to)):
            fi = os.open(p, os.O_RDONLY)
            fo = os.open(q, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                left = os.fstat(fi).st_size
                while left > 0:
                    n = os.copy_file_range(fi, fo, left)
                    if n == 0:
                        break
                    left -= n
            finally:
                os.close(fi)
                os.close(fo)
        self.note(f'copy {rel} -> {to}')

    def op_fallocate(self):
        rel = self.pick()
        if not rel:
            return
        size = os.path.getsize(self.both(rel)[1])
        mode = self.rnd.choice([FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, FALLOC_FL_ZERO_RANGE,
                                FALLOC_FL_ZERO_RANGE | FALLOC_FL_KEEP_SIZE, 0])
        off = self.rnd.randrange(0, size + M)
        n = self.rnd.choice([1, 4096, M, self.rnd.randrange(1, 3 * M)])
        for p in self.both(rel):
            fd = os.open(p, os.O_WRONLY)
            try:
                if LIBC.fallocate(fd, mode, ctypes.c_long(off), ctypes.c_long(n)) != 0:
                    e = ctypes.get_errno()
                    raise OSError(e, f'fallocate mode {mode:#x} at {off} len {n}: {os.strerror(e)}', p)
            finally:
                os.close(fd)
        self.note(f'fallocate {rel} mode {mode:#x} at {off} len {n}')

    def op_append(self):
        rel = self.pick()
        if not rel:
            return
        data = self.rnd.randbytes(self.rnd.choice([1, 4096, 100000, M + 3]))
        for p in self.both(rel):
            fd = os.open(p, os.O_WRONLY | os.O_APPEND)
            try:
                os.write(fd, data)
            finally:
                os.close(fd)
        self.note(f'append {rel} {len(data)} bytes')

    def op_mmap(self):
        rel = self.pick()
        if not rel:
            return
        size = os.path.getsize(self.both(rel)[1])
        if size < 4096:
            return
        off = self.rnd.randrange(0, size - 100)
        data = self.rnd.randbytes(min(100, size - off))
        for p in self.both(rel):
            with open(p, 'r+b') as f:
                m = mmap.mmap(f.fileno(), 0)
                m[off:off + len(data)] = data
                m.flush()
                m.close()
        self.note(f'mmap {rel} at {off}')


def settled(differs, seconds):
    """Calls differs() every 0.2 s until it returns None or `seconds` pass;
    returns its last answer (None: settled)."""
    end = time.time() + seconds
    while (why := differs()) and time.time() < end:
        time.sleep(0.2)
    return why


class Soak(Tree):
    def __init__(self, args, work):
        self.a = args
        self.rnd = random.Random(args.seed)
        self.work = work
        # A store in RADOS (--store rados:POOL/NS) keeps its local index
        # under the work directory; otherwise the store is a directory there.
        self.store = args.store or os.path.join(work, 'store')
        self.mnt = os.path.join(work, 'mnt')
        self.shadow = os.path.join(work, 'shadow')
        for d in (self.mnt, self.shadow):
            os.makedirs(d)
        self.log = os.path.join(work, 'daemon.log')
        self.options = f'log_file={self.log},log_level=info' + (',' + args.options if args.options else '')
        if args.store:
            self.options += f',local_dir={os.path.join(work, "local")},lease=5'
        self.stats = {'ops': 0, 'checks': 0, 'remounts': 0, 'gcs': 0, 'saves': 0}
        if args.follower:
            self.fmnt = os.path.join(work, 'follower')
            os.makedirs(self.fmnt)
            self.flog = os.path.join(work, 'follower.log')
            self.foptions = (f'ro,log_file={self.flog},log_level=info,'
                             f'local_dir={os.path.join(work, "follower_local")}')
            self.stats['follower_checks'] = 0
        self.ops_log = open(os.path.join(work, 'ops.log'), 'w')
        self.t0 = time.time()
        self.lock = threading.Lock()
        self.workers = [Worker(self, k, args.seed * 1000 + k) for k in range(args.writers)]

    def note(self, msg):
        with self.lock:
            self.ops_log.write(f'{self.stats["ops"]} ({time.time() - self.t0:.1f} s): {msg}\n')
            self.ops_log.flush()

    def op_gc(self):
        thr = self.rnd.choice(['0.5', '0.9', '1'])
        r = subprocess.run([self.tool('lmcfs-gc'), '-q', '--threshold', thr, self.mnt],
                           capture_output=True, text=True)
        if r.returncode != 0:
            raise Failure(f'lmcfs-gc {self.mnt} exited {r.returncode}: {r.stderr.strip()}')
        self.stats['gcs'] += 1
        self.note(f'gc threshold {thr}')

    def op_drop(self):
        if not os.access('/proc/sys/vm/drop_caches', os.W_OK):
            return  # not root: the page cache stays
        with open('/proc/sys/vm/drop_caches', 'w') as f:
            f.write('3')
        self.note('drop caches')

    def op_remount(self):
        unmount(self.mnt, self.store)
        self.fsck(deep=False)
        mount(self.a.build, self.store, self.mnt, self.options)
        self.stats['remounts'] += 1
        self.note('remount')
        self.check(blocks=False)

    # -- checks ----------------------------------------------------------------
    def tool(self, name):
        return os.path.join(self.a.build, 'tools', 'lmcfs', name)

    def fsck(self, deep):
        r = subprocess.run([self.tool('lmcfs-fsck'), '--json', '-q'] + (['--deep'] if deep else []) + [self.store],
                           capture_output=True, text=True)
        if r.returncode != 0:
            raise Failure(f'lmcfs-fsck exited {r.returncode}: {r.stdout[-2000:]} {r.stderr[-2000:]}')
        doc = json.loads(r.stdout)
        stale = doc.get('tree', {}).get('stale_stored', [])
        if stale:
            raise Failure(f'lmcfs-fsck lists stale stored sizes: {stale[:5]}')

    def check(self, blocks):
        mine = sorted(os.path.relpath(os.path.join(dp, n), self.mnt)
                      for dp, _, ns in os.walk(self.mnt) for n in ns)
        want = self.files()
        if mine != want:
            raise Failure(f'names differ: mount has {sorted(set(mine) - set(want))[:5]} extra, '
                          f'lacks {sorted(set(want) - set(mine))[:5]}')
        if blocks:
            wait_rebases(self.mnt)
        for rel in want:
            p, q = self.both(rel)
            sp, sq = os.stat(p), os.stat(q)
            if sp.st_size != sq.st_size or sp.st_nlink != sq.st_nlink:
                raise Failure(f'{rel}: size {sp.st_size} links {sp.st_nlink} on the mount, '
                              f'{sq.st_size} and {sq.st_nlink} on the disk')
            if sha(p) != sha(q):
                raise Failure(f'{rel}: bytes differ from the shadow')
            if blocks:
                stored = int(os.getxattr(p, 'user.lmcfs.stored_bytes'))
                st = os.stat(p)
                if st.st_blocks != (stored + 511) // 512:
                    raise Failure(f'{rel}: st_blocks {st.st_blocks}, stored bytes {stored}')
        self.stats['checks'] += 1
        if self.a.follower:
            self.follower_check(want, blocks)

    def follower_check(self, want, blocks):
        """The follower shows what the writer has (names, sizes, bytes: the
        shadow's) within 10 s; once the rebases are done (blocks), the
        writer's st_blocks within 10 s and its pack bytes on disk within
        15 s."""
        def differs():
            mine = sorted(os.path.relpath(os.path.join(dp, n), self.fmnt)
                          for dp, _, ns in os.walk(self.fmnt) for n in ns)
            if mine != want:
                return (f'names differ: follower has {sorted(set(mine) - set(want))[:5]} extra, '
                        f'lacks {sorted(set(want) - set(mine))[:5]}')
            for rel in want:
                q = os.path.join(self.shadow, rel)
                try:
                    if os.stat(os.path.join(self.fmnt, rel)).st_size != os.stat(q).st_size:
                        return f'{rel}: another size on the follower'
                    if sha(os.path.join(self.fmnt, rel)) != sha(q):
                        return f'{rel}: other bytes on the follower'
                except OSError as e:  # ESTALE, ENOENT: a refresh between the listing and the read
                    return f'{rel}: {e}'
            return None
        if why := settled(differs, 10):
            raise Failure(f'the follower, 10 s after the check: {why}')
        if blocks:
            # Stored sizes (st_blocks) as the writer has them: rebases and
            # gc's re-encodes change them after the save.
            def blocks_differ():
                for rel in want:
                    try:
                        a = os.stat(os.path.join(self.mnt, rel)).st_blocks
                        b = os.stat(os.path.join(self.fmnt, rel)).st_blocks
                    except OSError as e:
                        return f'{rel}: {e}'
                    if a != b:
                        return f'{rel}: st_blocks {a} on the writer, {b} on the follower'
                return None
            if why := settled(blocks_differ, 10):
                raise Failure(f'the follower, 10 s after the rebases were done: {why}')

            def figures_differ():
                w, f = (int(os.getxattr(m, 'user.lmcfs.pack_disk_bytes')) for m in (self.mnt, self.fmnt))
                return None if w == f else f'pack bytes on disk: the writer says {w}, the follower {f}'
            if why := settled(figures_differ, 15):
                raise Failure(f'{why}, 15 s on')
        self.stats['follower_checks'] += 1

    def run(self):
        mount(self.a.build, self.store, self.mnt, self.options)
        if self.a.follower:
            mount(self.a.build, self.store, self.fmnt, self.foptions)
        for w in self.workers:
            os.makedirs(w.mnt, exist_ok=True)
        # Rounds: each writer does --check-every file operations (at once,
        # when there are several) while this thread may run lmcfs-gc or
        # drop the page cache beside them; then every file is checked, and
        # now and then the store is remounted (fsck'd in between).
        rounds = max(1, self.a.ops // (self.a.check_every * self.a.writers))
        try:
            for r in range(rounds):
                failures = []
                threads = [threading.Thread(target=w.run, args=(self.a.check_every, failures))
                           for w in self.workers]
                for t in threads:
                    t.start()
                beside = self.rnd.choices([None, self.op_gc, self.op_drop], [4, 3, 3])[0]
                if beside:
                    time.sleep(self.rnd.random() * 0.5)
                    beside()
                for t in threads:
                    t.join()
                if failures:
                    raise Failure('; '.join(failures))
                self.check(blocks=r % 4 == 3)
                if self.rnd.random() < 0.15:
                    self.op_remount()
            self.check(blocks=True)
            if self.a.follower:
                unmount(self.fmnt, self.store)
                with open(self.flog) as f:
                    errors = [line.strip() for line in f if '[error]' in line]
                if errors:
                    raise Failure(f'the follower logged {len(errors)} errors, the first: {errors[0][:300]}')
            unmount(self.mnt, self.store)
            self.fsck(deep=True)
            return []
        except (Failure, OSError, subprocess.CalledProcessError) as e:
            self.note(f'FAILED: {e}')
            return [f'op {self.stats["ops"]} (see ops.log): {e}']
        finally:
            for m in (self.mnt, getattr(self, 'fmnt', None)):
                if m and os.path.ismount(m):
                    subprocess.run(['fusermount3', '-u', m])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--build', default='build')
    ap.add_argument('--ops', type=int, default=400)
    ap.add_argument('--seed', type=int, default=None)
    ap.add_argument('--slots', type=int, default=4, help='checkpoint files evolved in turn')
    ap.add_argument('--check-every', type=int, default=10, help='file operations a writer does between checks')
    ap.add_argument('--writers', type=int, default=1,
                    help='writers at once, each in its own directory (more than one: the operations '
                         'interleave as the threads run, so a seed no longer replays them exactly)')
    ap.add_argument('--options', default='', help='more mount options (e.g. gc_dead=1,delta_chain=2)')
    ap.add_argument('--store', default='',
                    help='a store in RADOS (rados:POOL/NS, a namespace of its own: emptied at the end) '
                         'instead of a directory in the work directory')
    ap.add_argument('--follower', action='store_true',
                    help='a read-only mount follows the store (RADOS only) and is checked with the writer')
    ap.add_argument('--keep', action='store_true', help='keep the work directory')
    a = ap.parse_args()
    if a.store and not a.store.startswith('rados:'):
        ap.error('--store takes rados:POOL/NS')
    if a.follower and not a.store:
        ap.error('--follower needs --store rados:POOL/NS (only a store in RADOS has followers)')
    if a.seed is None:
        a.seed = random.randrange(1 << 30)
    a.build = os.path.abspath(a.build)
    work = tempfile.mkdtemp(prefix='lmcfs_soak_')
    print(f'soak_run: seed {a.seed}, {a.ops} operations, work {work}', flush=True)
    t0 = time.time()
    s = Soak(a, work)
    failures = s.run()
    s.stats['seconds'] = round(time.time() - t0, 1)
    s.stats['seed'] = a.seed
    if a.store and not failures and not a.keep:
        pool, ns = a.store[len('rados:'):].split('/', 1)
        rados_rm_namespace(ns, pool)
    return finish('soak_run', s.stats, failures, work, a.keep)


if __name__ == '__main__':
    sys.exit(main())
