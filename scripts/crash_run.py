#!/usr/bin/env python3
"""Crash run (issue 16, "Fault runs", 1): real writers save a checkpoint
series into a real mount while the daemon is killed with SIGKILL at random
moments; after each kill the store must pass lmcfs-fsck, every file whose
fsync returned must read back byte-identical, and a file that was being
written must be absent, empty or a prefix of what was written (never other
bytes). At the end the background rebases must drain and, after
`lmcfs-gc --threshold 1`, no dead byte may be left in the packs.

Writers (in one child process, round robin): torch.save of a model and its
AdamW state into an open file, flushed and fsync'd as frameworks do;
safetensors' save_file, then fsync; transformers' save_pretrained with
sharding (small shards), then fsync of every file. Each writer records the
bytes it writes first (the same object serialized into memory), so a
partial file can be checked against them.

  python3 scripts/crash_run.py --kills 200                              # long form
  python3 scripts/crash_run.py --kills 4 --seed 16                      # CI form (MountCrashRun)
  python3 scripts/crash_run.py --kills 20 --store rados:lmcfs/crash1    # in RADOS
  python3 scripts/crash_run.py --kills 20 --store rados:lmcfs/crash2 --follower
With --follower (a store in RADOS), a read-only mount follows the store all
along, as another node would, through every kill and takeover: after each
takeover, every file the new writer read back must read the same on the
follower within 10 s, and at the end its log must hold no error line.
A failure keeps the work directory (store, daemon log, the writer's log,
and evidence/KILL/{got,want}.bin for a file that is not a prefix).
Prints the seed; the same seed replays the same kill delays. Files
verified after one kill are read again every --full-every kills (default
10) and after the last; new and rewritten files after every kill.
"""
import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchutil import daemon_pid, rados_rm_namespace, sha256_file as sha, wait_exit  # noqa: E402

WRITER = r'''
import hashlib, io, json, os, sys, torch
mnt, ref, log_path, first_step = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
log = open(log_path, 'a')
def note(kind, name, data=None):
    rec = {'kind': kind, 'name': name}
    if data is not None:
        rec['sha'] = hashlib.sha256(data).hexdigest(); rec['size'] = len(data)
    log.write(json.dumps(rec) + '\n'); log.flush(); os.fsync(log.fileno())
def keep(name, data):
    p = os.path.join(ref, name.replace('/', '__'))
    with open(p, 'wb') as f: f.write(data)
torch.manual_seed(first_step)
model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.GELU(), torch.nn.Linear(512, 256))
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
try:
    import transformers
    cfg = transformers.GPT2Config(n_layer=2, n_head=2, n_embd=64, vocab_size=512, n_positions=64)
    gpt = transformers.GPT2LMHeadModel(cfg)
except Exception:
    gpt = None
from safetensors.torch import save as st_bytes, save_file
with open(log_path + '.ready', 'w') as f: f.write('1')
step = first_step
while True:
    step += 1
    loss = model(torch.randn(16, 256)).pow(2).mean(); opt.zero_grad(); loss.backward(); opt.step()
    kind = step % 3
    if kind == 0:
        name = f'step{step}.pt'
        obj = {'model': model.state_dict(), 'optim': opt.state_dict(), 'step': step}
        buf = io.BytesIO(); torch.save(obj, buf); data = buf.getvalue()
        keep(name, data); note('start', name, data)
        with open(os.path.join(mnt, name), 'wb') as f:
            torch.save(obj, f); f.flush(); os.fsync(f.fileno())
        note('done', name, data)
    elif kind == 1:
        name = f'step{step}.safetensors'
        tensors = {k: v.contiguous() for k, v in model.state_dict().items()}
        data = st_bytes(tensors)
        keep(name, data); note('start', name, data)
        save_file(tensors, os.path.join(mnt, name))
        with open(os.path.join(mnt, name), 'rb+') as f: os.fsync(f.fileno())
        note('done', name, data)
    elif gpt is not None:
        d = f'hf-step{step}'
        with torch.no_grad():
            for p in gpt.parameters(): p.add_(0.001 * torch.randn_like(p))
        tmp = os.path.join(ref, d + '.tmp')
        gpt.save_pretrained(tmp, max_shard_size='200KB')
        files = sorted(os.listdir(tmp))
        for fn in files:
            data = open(os.path.join(tmp, fn), 'rb').read()
            keep(f'{d}/{fn}', data); note('start', f'{d}/{fn}', data)
        gpt.save_pretrained(os.path.join(mnt, d), max_shard_size='200KB')
        for fn in files:
            with open(os.path.join(mnt, d, fn), 'rb+') as f: os.fsync(f.fileno())
        dfd = os.open(os.path.join(mnt, d), os.O_RDONLY); os.fsync(dfd); os.close(dfd)
        for fn in files:
            data = open(os.path.join(tmp, fn), 'rb').read()
            note('done', f'{d}/{fn}', data)
        import shutil; shutil.rmtree(tmp)
'''


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--build', default='build')
    ap.add_argument('--kills', type=int, default=5)
    ap.add_argument('--seed', type=int, default=None)
    ap.add_argument('--min-delay', type=float, default=0.3)
    ap.add_argument('--max-delay', type=float, default=4.0)
    ap.add_argument('--keep', action='store_true', help='keep the work directory')
    ap.add_argument('--store', default='',
                    help='a store in RADOS (rados:POOL/NS, a namespace of its own: emptied at the end): each '
                         'mount after a kill takes it over (-o takeover, the killed node\'s 3 s lease waited '
                         'out, its address fenced) with the local index the killed daemon left')
    ap.add_argument('--full-every', type=int, default=10,
                    help='read every fsync\'d file again after every Nth kill (and the last); '
                         'new and rewritten files after every kill')
    ap.add_argument('--follower', action='store_true',
                    help='a read-only mount follows the store (RADOS only) through the kills and takeovers')
    ap.add_argument('--partial', choices=['fail', 'report'], default='fail',
                    help='a file being written that is not a prefix of its bytes: fail the run (default), or '
                         'report it, keep it as evidence and go on (the CI form)')
    a = ap.parse_args()
    if a.store and not a.store.startswith('rados:'):
        ap.error('--store takes rados:POOL/NS')
    if a.follower and not a.store:
        ap.error('--follower needs --store rados:POOL/NS (only a store in RADOS has followers)')
    seed = a.seed if a.seed is not None else random.SystemRandom().randrange(1 << 30)
    print(f'crash_run: seed {seed} (replay: --seed {seed})', flush=True)
    rng = random.Random(seed)
    mount_bin = os.path.join(a.build, 'tools', 'mountlmcfs', 'mount.lmcfs')
    tools = os.path.join(a.build, 'tools', 'lmcfs')
    work = tempfile.mkdtemp(prefix='lmcfs_crash_', dir='/var/tmp')
    store, mnt, ref, fmnt = (os.path.join(work, x) for x in ('store', 'mnt', 'ref', 'follower'))
    opts = f'log_file={work}/log,log_level=info'
    if a.store:
        store = a.store
        opts += f',local_dir={work}/local,lease=3'
    for d in (mnt, ref, fmnt):
        os.makedirs(d)
    progress = os.path.join(work, 'progress.jsonl')
    stats = {'seed': seed, 'kills': 0, 'files_verified': 0, 'bytes_verified': 0, 'partial_files': 0}
    if a.follower:
        stats['follower_files_verified'] = 0
    failures = []
    checked = {}  # name -> sha verified after some kill

    def fsck(target, k):
        r = subprocess.run([os.path.join(tools, 'lmcfs-fsck'), target], capture_output=True, text=True)
        if r.returncode != 0:
            failures.append(f'kill {k}: lmcfs-fsck exit {r.returncode}: {r.stdout[-2000:]}{r.stderr[-2000:]}')
        return r.returncode == 0
    writer = None
    try:
        step = 0
        for k in range(a.kills + 1):
            subprocess.run([mount_bin, store, mnt, '-o', opts + (',takeover' if a.store and k > 0 else '')],
                           check=True)
            if a.store and k > 0:
                if not fsck(mnt, k - 1):
                    break
                log(f'kill {k}/{a.kills}: taken over, fsck clean')
            if a.follower and k == 0:
                subprocess.run([mount_bin, store, fmnt, '-o',
                                f'ro,log_file={work}/follower.log,log_level=info,local_dir={work}/follower_local'],
                               check=True)
            # Everything the writer saw fsync'd so far must be there, exactly.
            done, started = {}, {}
            if os.path.exists(progress):
                for line in open(progress):
                    try:
                        r = json.loads(line)
                    except ValueError:
                        continue  # a torn last line of the writer's own log
                    (done if r['kind'] == 'done' else started)[r['name']] = r
            # Files verified after an earlier kill are read again every
            # --full-every kills and after the last (the run would otherwise
            # grow quadratic); new and rewritten ones after every kill.
            full = k % a.full_every == 0 or k == a.kills
            for name, r in done.items():
                if not full and checked.get(name) == r['sha']:
                    continue
                p = os.path.join(mnt, name)
                if not os.path.exists(p) or sha(p) != r['sha']:
                    failures.append(f'kill {k}: {name} was fsync\'d but reads back '
                                    f'{"missing" if not os.path.exists(p) else "different"}')
                else:
                    checked[name] = r['sha']
                    stats['files_verified'] += 1
                    stats['bytes_verified'] += r['size']
            for name, r in started.items():
                if name in done:
                    continue
                p = os.path.join(mnt, name)
                if not os.path.exists(p):
                    continue
                got = open(p, 'rb').read()
                want = open(os.path.join(ref, name.replace('/', '__')), 'rb').read()
                if got and want[:len(got)] != got:
                    n = min(len(got), len(want))
                    first = next((i for i in range(n) if got[i] != want[i]), n)
                    what = (f'kill {k}: {name} (being written) holds {len(got)} bytes that are not a prefix of '
                            f'what was written ({len(want)} bytes; first difference at byte {first})')
                    stats['partial_not_prefix'] = stats.get('partial_not_prefix', 0) + 1
                    ev = os.path.join(work, 'evidence', str(k))
                    os.makedirs(ev, exist_ok=True)
                    shutil.copy(p, os.path.join(ev, 'got.bin'))
                    shutil.copy(os.path.join(ref, name.replace('/', '__')), os.path.join(ev, 'want.bin'))
                    if a.partial == 'fail':
                        failures.append(what + f'; kept in {ev}')
                        break
                    log('REPORTED (--partial report): ' + what)
                    a.keep = True
                stats['partial_files'] += 1
                # The series goes on: an unfinished file is removed, as a
                # framework would overwrite it.
                os.remove(p) if os.path.isfile(p) else None
            if failures:
                break
            if a.follower and k > 0:
                # The follower reads what the new writer read, within 10 s.
                want = {name: r['sha'] for name, r in done.items() if checked.get(name) == r['sha']}
                end = time.time() + 10
                while True:
                    bad = []
                    for name, h in want.items():
                        p = os.path.join(fmnt, name)
                        try:
                            if sha(p) != h:
                                bad.append(f'{name}: other bytes')
                        except OSError as e:
                            bad.append(f'{name}: {e}')
                        if bad:
                            break
                    if not bad or time.time() > end:
                        break
                    time.sleep(0.2)
                if bad:
                    failures.append(f'kill {k}: the follower, 10 s after the takeover: {bad[0]}')
                    break
                stats['follower_files_verified'] += len(want)
            if k > 0:
                log(f'  after kill {k}: {len(done)} fsync\'d files byte-identical so far '
                    f'({"all" if full else "new ones"} read), '
                    f'{sum(1 for n in started if n not in done)} being written')
            if k == a.kills:
                break
            step = max([int(''.join(c for c in n.split('/')[0] if c.isdigit()) or 0) for n in started] + [step])
            ready = progress + '.ready'
            if os.path.exists(ready):
                os.remove(ready)
            writer = subprocess.Popen([sys.executable, '-c', WRITER, mnt, ref, progress, str(step + 1)],
                                      stdout=subprocess.DEVNULL, stderr=open(os.path.join(work, 'writer.err'), 'a'))
            # The kill comes a random time after the writer has started saving
            # (not while it imports torch).
            for _ in range(1200):
                if os.path.exists(ready) or writer.poll() is not None:
                    break
                time.sleep(0.05)
            if writer.poll() is not None:
                failures.append(f'kill {k}: the writer exited before the kill (see {work}/writer.err)')
                break
            time.sleep(rng.uniform(a.min_delay, a.max_delay))
            pid = daemon_pid(store, mnt)
            if pid is None:
                failures.append(f'kill {k}: the daemon is gone before the kill (see {work}/log)')
                break
            os.kill(pid, signal.SIGKILL)
            stats['kills'] += 1
            writer.wait(timeout=60)
            writer = None
            subprocess.run(['fusermount3', '-u', '-z', mnt], check=False)
            for _ in range(100):
                if not os.path.exists(f'/proc/{pid}'):
                    break
                time.sleep(0.05)
            if a.store:
                continue  # checked on the next mount, which takes the store over (the lease lives on)
            if not fsck(store, k):
                break
            log(f'kill {k + 1}/{a.kills}: fsck clean')
        if not failures:
            # The end: rebases drain, gc leaves no dead byte.
            for _ in range(600):
                if int(os.getxattr(mnt, 'user.lmcfs.pending_rebases')) == 0:
                    break
                time.sleep(0.1)
            else:
                failures.append('the rebase queue did not drain in 60 s')
            gc = subprocess.run([os.path.join(tools, 'lmcfs-gc'), '-q', '--threshold', '1', mnt],
                                capture_output=True, text=True)
            if gc.returncode != 0:
                failures.append(f'lmcfs-gc exit {gc.returncode}: {gc.stderr[-1000:]}')
            # What is left besides live records: the 32-byte header of each
            # pack (lmcfs-stat counts it as dead).
            st = json.loads(subprocess.run([os.path.join(tools, 'lmcfs-stat'), '--json', mnt], capture_output=True,
                                           text=True, check=True).stdout)['totals']
            dead = st['pack_bytes'] - st['live_bytes'] - 32 * st['packs']
            stats['dead_bytes_after_gc'] = dead
            if dead != 0:
                failures.append(f'{dead} dead bytes (besides pack headers) left in the packs after '
                                f'lmcfs-gc --threshold 1')
    finally:
        if writer:
            writer.kill()
        subprocess.run(['fusermount3', '-u', mnt], check=False)
        wait_exit(daemon_pid(store, mnt))
        if a.follower and os.path.ismount(fmnt):
            subprocess.run(['fusermount3', '-u', fmnt], check=False)
            wait_exit(daemon_pid(store, fmnt))
            log_path = f'{work}/follower.log'
            errors = [line.strip() for line in open(log_path) if '[error]' in line] if os.path.exists(log_path) else []
            if errors:
                failures.append(f'the follower logged {len(errors)} errors, the first: {errors[0][:300]}')
        if failures or a.keep:
            log(f'work directory kept: {work}')
        else:
            shutil.rmtree(work, ignore_errors=True)
            if a.store:
                pool, ns = a.store[len('rados:'):].split('/', 1)
                rados_rm_namespace(ns, pool)
    print(json.dumps(stats))
    for f in failures:
        print('FAIL: ' + f)
    sys.exit(1 if failures else 0)


if __name__ == '__main__':
    main()
