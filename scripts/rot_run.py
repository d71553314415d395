#!/usr/bin/env python3
"""Rot run (issue 16, "Fault runs", 4): random bytes flipped in the pack
files (two rounds in three) and in RocksDB's files (the third) of a
populated store, many times. After each flip:

- `lmcfs-fsck --json` of the store (offline) runs to the end, or, where
  RocksDB's own checksums find its files damaged (or the index journal's
  HEAD is), stops with a message that names the index (or the journal) and
  says to run `lmcfs-fsck --repair`;
- the store is mounted, or (a damaged index RocksDB cannot open) the mount
  refuses with a message naming the index;
- every file reads back either byte-identical or fails with EIO, never
  other bytes, and every EIO has a daemon log line naming the chunk;
- where fsck ran to the end: the files whose reads failed are exactly the
  files it listed as affected; then `lmcfs-fsck --repair` and a mount:
  every file it did not list reads back byte-identical, and a second fsck
  finds nothing it can repair.
- where the index (or the journal's HEAD) was damaged: `lmcfs-fsck
  --repair` rebuilds the index from the store's index journal (or writes
  the journal again from the index), and then every file reads back
  byte-identical: nothing is lost.
The third of the rounds that flip the index flip RocksDB's files or the
index journal's (`journal/`: HEAD, segments, snapshot parts).

The store is populated once through a real mount: a series of torch.save
checkpoints of a small model and its AdamW state (fsync'd; the series makes
reverse deltas and dedup), a safetensors file, random bytes and a small
text file. Each round starts from a pristine copy of that store.

  python3 scripts/rot_run.py --flips 300                 # long form
  python3 scripts/rot_run.py --flips 9 --seed 7          # CI form (MountRotRun)

Prints the seed; the same seed replays the same flips. A failure keeps the
work directory (the damaged store, the daemon's log, evidence/ROUND/ with
the bytes read where they differ).
"""
import argparse
import errno
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchutil import daemon_pid, finish, wait_exit  # noqa: E402

WRITER = r'''
import os, sys, torch, numpy as np
from safetensors.torch import save_file
mnt = sys.argv[1]
torch.manual_seed(1)
model = torch.nn.Sequential(torch.nn.Linear(384, 768), torch.nn.GELU(), torch.nn.Linear(768, 384))
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
os.makedirs(os.path.join(mnt, 'ckpt'), exist_ok=True)
def fsync_write(name, fn):
    with open(os.path.join(mnt, name), 'wb') as f:
        fn(f); f.flush(); os.fsync(f.fileno())
for step in range(4):
    for _ in range(5):
        loss = model(torch.randn(32, 384)).pow(2).mean(); opt.zero_grad(); loss.backward(); opt.step()
    fsync_write(f'ckpt/step{step}.pt', lambda f: torch.save({'model': model.state_dict(),
                                                             'optim': opt.state_dict(), 'step': step}, f))
os.makedirs(os.path.join(mnt, 'hf'), exist_ok=True)
save_file({k: v.contiguous() for k, v in model.state_dict().items()}, os.path.join(mnt, 'hf', 'model.safetensors'))
with open(os.path.join(mnt, 'hf', 'model.safetensors'), 'rb+') as f: os.fsync(f.fileno())
fsync_write('random.bin', lambda f: f.write(np.random.default_rng(3).bytes(3 << 20)))
fsync_write('notes.txt', lambda f: f.write(b'learning rate 1e-3, 4 steps\n' * 100))
'''


def log(msg):
    print(msg, file=sys.stderr, flush=True)


# What a tool printed that is not UTF-8 (a tool must escape the bytes of a
# damaged file it quotes): each round checks this and fails with the output.
NOT_UTF8 = []


def run_tool(cmd, timeout):
    """subprocess.run with text output; bytes that are not UTF-8 are kept
    as \\xNN in the text and recorded in NOT_UTF8."""
    r = subprocess.run(cmd, capture_output=True, timeout=timeout)
    texts = []
    for name, b in (('stdout', r.stdout), ('stderr', r.stderr)):
        try:
            texts.append(b.decode('utf-8'))
        except UnicodeDecodeError:
            texts.append(b.decode('utf-8', errors='backslashreplace'))
            NOT_UTF8.append(f'{os.path.basename(cmd[0])} wrote bytes that are not UTF-8 to its {name}: '
                            f'{texts[-1][:300]!r}')
    return subprocess.CompletedProcess(cmd, r.returncode, texts[0], texts[1])


def tree(root):
    """Relative paths of the regular files under root."""
    out = []
    for d, _, files in os.walk(root):
        out += [os.path.relpath(os.path.join(d, f), root) for f in files]
    return sorted(out)


class Mount:
    def __init__(self, build, store, mnt, logf):
        self.bin = os.path.join(build, 'tools', 'mountlmcfs', 'mount.lmcfs')
        self.store, self.mnt, self.logf = store, mnt, logf

    def up(self):
        """Mounts; returns None, or the mount's error message."""
        r = run_tool([self.bin, self.store, self.mnt, '-o', f'log_file={self.logf},log_level=info'], 60)
        return None if r.returncode == 0 else (r.stderr.strip() or f'exit code {r.returncode}')

    def down(self):
        pid = daemon_pid(self.store)
        subprocess.run(['fusermount3', '-u', self.mnt], capture_output=True)
        if not wait_exit(pid):
            raise RuntimeError(f'the daemon (pid {pid}) did not exit 30 s after the unmount')


def fsck(tools, store, repair=False):
    cmd = [os.path.join(tools, 'lmcfs-fsck'), '--json', '-q'] + (['--repair'] if repair else []) + [store]
    r = run_tool(cmd, 300)
    try:
        doc = json.loads(r.stdout)
    except ValueError:
        doc = None
    return r.returncode, doc, r.stderr.strip()


def read_all(mnt, refs):
    """name -> 'ok' | 'eio' | 'missing' | ('wrong', bytes) for every reference file."""
    out = {}
    for name, data in refs.items():
        p = os.path.join(mnt, name)
        try:
            with open(p, 'rb') as f:
                got = f.read()
        except FileNotFoundError:
            out[name] = 'missing'
            continue
        except OSError as e:
            out[name] = 'eio' if e.errno == errno.EIO else f'errno {e.errno}'
            continue
        out[name] = 'ok' if got == data else ('wrong', got)
    return out


def flip(rng, store, index_turn):
    """Flips 1-4 random bytes of one random pack file, or with index_turn of
    one of RocksDB's files; returns what it did."""
    packs = [os.path.join('packs', f) for f in os.listdir(os.path.join(store, 'packs'))]
    index = [os.path.join('index', f) for f in os.listdir(os.path.join(store, 'index'))
             if f not in ('LOCK', 'LOG') and not f.startswith('LOG.old')]
    if os.path.isdir(os.path.join(store, 'journal')):
        index += [os.path.join('journal', f) for f in os.listdir(os.path.join(store, 'journal'))]
    index = [f for f in index if os.path.getsize(os.path.join(store, f)) > 0]
    rel = rng.choice(index if index_turn and index else packs)
    path = os.path.join(store, rel)
    size = os.path.getsize(path)
    offs = sorted(rng.randrange(size) for _ in range(rng.randint(1, 4)))
    with open(path, 'r+b') as f:
        for o in offs:
            f.seek(o)
            b = f.read(1)[0]
            f.seek(o)
            f.write(bytes([b ^ rng.randint(1, 255)]))
    return rel, offs


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--build', default='build')
    ap.add_argument('--flips', type=int, default=12, help='rounds, each one flip of 1-4 bytes in one file')
    ap.add_argument('--seed', type=int, default=None)
    ap.add_argument('--keep', action='store_true', help='keep the work directory')
    a = ap.parse_args()
    seed = a.seed if a.seed is not None else random.SystemRandom().randrange(1 << 30)
    print(f'rot_run: seed {seed} (replay: --seed {seed})', flush=True)
    rng = random.Random(seed)
    tools = os.path.join(a.build, 'tools', 'lmcfs')
    work = tempfile.mkdtemp(prefix='lmcfs_rot_', dir='/var/tmp')
    pristine, store, mnt = (os.path.join(work, x) for x in ('pristine', 'store', 'mnt'))
    os.makedirs(mnt)
    logf = os.path.join(work, 'log')
    stats = {'seed': seed, 'rounds': 0, 'pack_flips': 0, 'index_flips': 0, 'files_read': 0, 'bytes_verified': 0,
             'eio_reads': 0, 'refused_mounts': 0, 'harmless': 0, 'repaired_rounds': 0, 'files_lost': 0}
    failures = []
    try:
        m = Mount(a.build, pristine, mnt, logf)
        err = m.up()
        if err:
            raise RuntimeError(f'mount of a new store failed: {err}')
        subprocess.run([sys.executable, '-c', WRITER, mnt], check=True)
        refs = {n: open(os.path.join(mnt, n), 'rb').read() for n in tree(mnt)}
        m.down()
        # fsck of a copy: opening the pristine store would move what its
        # index's write-ahead log holds into table files, and the rounds
        # should also flip the log as the daemon left it.
        shutil.copytree(pristine, store)
        rc, doc, _ = fsck(tools, store)
        if rc != 0:
            raise RuntimeError(f'the populated store is not clean before any flip (fsck exit {rc})')
        log(f'rot_run: {len(refs)} files, {sum(map(len, refs.values()))} bytes; '
            f'store {sum(os.path.getsize(os.path.join(pristine, f)) for f in tree(pristine))} bytes')
        for r in range(a.flips):
            shutil.rmtree(store, ignore_errors=True)
            shutil.copytree(pristine, store)
            open(logf, 'w').close()
            rel, offs = flip(rng, store, index_turn=r % 3 == 2)  # a third of the rounds
            stats['pack_flips' if rel.startswith('packs') else 'index_flips'] += 1
            what = f'round {r}: {rel} bytes {offs}'
            rc, doc, ferr = fsck(tools, store)
            if doc is None and (rc != 8 or 'index' not in ferr and 'journal' not in ferr):
                failures.append(f'{what}: lmcfs-fsck exit {rc} without a report, not naming the index: {ferr}')
                break
            if doc is None and 'lmcfs-fsck --repair' not in ferr:
                failures.append(f'{what}: lmcfs-fsck stopped at the damage without saying what repairs it: {ferr}')
                break
            index_damaged = doc is None  # found at the open: fsck cannot list files
            listed = set(doc['affected_files']) if doc else set()
            listed = {p.lstrip('/') for p in listed}
            m = Mount(a.build, store, mnt, logf)
            err = m.up()
            got = None
            if err and index_damaged:
                if 'index' not in err and 'journal' not in err:
                    failures.append(f'{what}: the mount refused without naming the index: {err}')
                    break
                stats['index_refused'] = stats.get('index_refused', 0) + 1
                log(f'  {what}: the index does not open; mount and fsck refuse: {err[:160]}')
            elif err:
                stats['refused_mounts'] += 1
                if rc == 0:
                    failures.append(f'{what}: the mount refused ({err}) a store fsck called clean')
                    break
            else:
                try:
                    got = read_all(mnt, refs)
                finally:
                    m.down()
                bad = {n for n, v in got.items() if v != 'ok'}
                for n, v in got.items():
                    stats['files_read'] += 1
                    if v == 'ok':
                        stats['bytes_verified'] += len(refs[n])
                    elif v == 'eio':
                        stats['eio_reads'] += 1
                    elif isinstance(v, tuple):
                        ev = os.path.join(work, 'evidence', str(r))
                        os.makedirs(ev, exist_ok=True)
                        open(os.path.join(ev, n.replace('/', '__')), 'wb').write(v[1])
                        failures.append(f'{what}: {n} read back DIFFERENT bytes (kept in {ev})')
                    else:
                        failures.append(f'{what}: {n}: {v} (expected its bytes or EIO)')
                if failures:
                    break
                logged = open(logf, errors='backslashreplace').read()
                if bad and 'chunk ' not in logged:
                    failures.append(f'{what}: {len(bad)} reads failed but the daemon log names no chunk')
                    break
                if index_damaged:
                    # fsck stopped at the damage (it names the index and
                    # says what to do); the mount served what it could read.
                    stats['index_damaged'] = stats.get('index_damaged', 0) + 1
                    log(f'  {what}: the index is damaged (fsck: {ferr[:100]}); '
                        f'{len(got) - len(bad)}/{len(got)} read back, the rest EIO')
                elif bad != listed:
                    failures.append(f'{what}: reads failed for {sorted(bad)} but fsck listed {sorted(listed)}')
                    break
                if not bad and rc == 0:
                    stats['harmless'] += 1
            # Repair, then everything fsck did not list must read back.
            if rc != 0 or err:
                rrc, rdoc, rerr = fsck(tools, store, repair=True)
                if rdoc is None:
                    failures.append(f'{what}: lmcfs-fsck --repair exit {rrc} without a report: {rerr}')
                    break
                lost = {p.lstrip('/') for p in rdoc['affected_files']} | listed
                if index_damaged:
                    # The journal holds every index change (or the index
                    # every journal record): nothing may be lost.
                    if rrc != 1 or lost:
                        failures.append(f'{what}: lmcfs-fsck --repair of a damaged index exit {rrc}, '
                                        f'{sorted(lost)} lost: {rdoc["store"]["messages"][:3]}')
                        break
                    stats['index_rebuilt'] = stats.get('index_rebuilt', 0) + 1
                err2 = m.up()
                if err2:
                    failures.append(f'{what}: after --repair the store does not mount: {err2}')
                    break
                try:
                    got2 = read_all(mnt, refs)
                finally:
                    m.down()
                for n, v in got2.items():
                    if n in lost:
                        if isinstance(v, tuple):
                            failures.append(f'{what}: after --repair {n} reads back DIFFERENT bytes')
                    elif v != 'ok':
                        failures.append(f'{what}: after --repair {n} (not listed as affected) reads back '
                                        f'{v if isinstance(v, str) else "different bytes"}')
                if failures:
                    break
                rc3, doc3, _ = fsck(tools, store)
                if doc3 is None or doc3['fixed'] != 0 or (rc3 not in (0, 4)):
                    failures.append(f'{what}: a second fsck after --repair: exit {rc3}')
                    break
                stats['repaired_rounds'] += 1
                stats['files_lost'] += len(lost)
            if NOT_UTF8:
                failures += [f'{what}: {m}' for m in NOT_UTF8]
                NOT_UTF8.clear()
                break
            stats['rounds'] += 1
            outcome = (f'mount refused ({err[:120]})' if err else
                       f'{sum(v == "ok" for v in got.values())}/{len(got)} read back, the rest EIO')
            if index_damaged:
                outcome += '; --repair made it whole, every file read back'
            log(f'  {what}: fsck exit {rc}, {len(listed)} listed; {outcome}')
    finally:
        subprocess.run(['fusermount3', '-u', mnt], capture_output=True)
    failures += NOT_UTF8  # from a round that failed for another reason first
    return finish('rot_run', stats, failures, work, a.keep)


if __name__ == '__main__':
    sys.exit(main())
