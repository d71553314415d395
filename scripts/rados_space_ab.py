#!/usr/bin/env python3
"""Space a RADOS store takes on its OSD under checkpoint rotation: hole
punching on (the default) against off, in the same run
(docs/BENCHMARKS.md, "Dead records given back at once in RADOS").

A small GPT-style model trained with AdamW saves --saves checkpoints
(torch.save: fp32 weights and both moments) into /dev/shm first. Each
config then mounts a fresh store rados:lmcfs/NAME (gc=auto, the default,
in both) and writes the checkpoints in turn with fsync, keeping the last
two (the older one removed after each save, as Trainer's
save_total_limit=2 does). After each save, and each second of a drain
after the last, it samples the OSD's allocated bytes (`bluestore_allocated`
from the admin socket's perf dump) less what was allocated before the
mount. Configs alternate --rounds times.

  eval "$(scripts/ceph-dev.sh start)"
  python3 scripts/rados_space_ab.py [--build build] [--saves 8] [--rounds 2]
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchutil import daemon_pid, rados_rm_namespace, train_gpt_series, wait_exit  # noqa: E402

MIB = 1 << 20
CONFIGS = [('punch=off', 'punch=off'), ('punch=on', '')]


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def make_checkpoints(out, saves, width):
    import torch
    names = []
    for step, model, opt in train_gpt_series(saves, width):
        name = f'checkpoint-{step}.pt'
        torch.save({'model': model.state_dict(), 'optimizer': opt.state_dict(), 'step': step},
                   os.path.join(out, name))
        names.append(name)
    return names


def allocated(asok):
    out = subprocess.run(['ceph', '--admin-daemon', asok, 'perf', 'dump'], capture_output=True, text=True,
                         check=True).stdout
    return json.loads(out)['bluestore']['bluestore_allocated']


def run_config(args, label, extra, src, names, asok, tmp, tag):
    name = f'space-{tag}-{label.replace("=", "-")}-{os.getpid()}'
    store = f'rados:lmcfs/{name}'
    mnt = os.path.join(tmp, 'mnt')
    local = os.path.join(tmp, name)
    os.makedirs(mnt, exist_ok=True)
    base = allocated(asok)
    opts = f'local_dir={local},log_file={local}.log,log_level=info'
    if extra:
        opts += ',' + extra
    subprocess.run([os.path.join(args.build, 'tools', 'mountlmcfs', 'mount.lmcfs'), store, mnt, '-o', opts],
                   check=True)
    per_save, secs, logical = [], 0.0, 0
    try:
        for i, n in enumerate(names):
            data = open(os.path.join(src, n), 'rb').read()
            t0 = time.time()
            with open(os.path.join(mnt, n), 'wb') as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            secs += time.time() - t0
            logical += len(data)
            if i >= 2:
                os.unlink(os.path.join(mnt, names[i - 2]))
            per_save.append(allocated(asok) - base)
        drain = []
        for _ in range(args.drain):
            time.sleep(1)
            drain.append(allocated(asok) - base)
        live = sum(os.path.getsize(os.path.join(mnt, n)) for n in names[-2:])
    finally:
        pid = daemon_pid(store)
        subprocess.run(['fusermount3', '-u', mnt], check=True)
        wait_exit(pid)
        rados_rm_namespace(name)
        shutil.rmtree(local, ignore_errors=True)
    return {'config': label, 'after_each_save': per_save, 'peak': max(per_save + drain), 'end': drain[-1],
            'live_apparent': live, 'save_mib_s': logical / MIB / secs}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--build', default='build')
    ap.add_argument('--saves', type=int, default=8)
    ap.add_argument('--rounds', type=int, default=2)
    ap.add_argument('--width', type=int, default=512)
    ap.add_argument('--drain', type=int, default=20, help='seconds sampled after the last save')
    ap.add_argument('--json', default='')
    args = ap.parse_args()
    conf = os.environ.get('CEPH_CONF', '')
    if not conf:
        raise SystemExit('CEPH_CONF is unset: eval "$(scripts/ceph-dev.sh start)" first')
    asok = os.path.join(os.path.dirname(conf), 'run', 'osd.0.asok')
    src = tempfile.mkdtemp(prefix='lmcfs-space-src-', dir='/dev/shm')
    tmp = tempfile.mkdtemp(prefix='lmcfs-space-', dir='/var/tmp')
    results = []
    try:
        names = make_checkpoints(src, args.saves, args.width)
        size = os.path.getsize(os.path.join(src, names[0]))
        log(f'{len(names)} checkpoints of {size / MIB:.0f} MiB')
        for r in range(args.rounds):
            order = CONFIGS if r % 2 == 0 else CONFIGS[::-1]
            for label, extra in order:
                res = run_config(args, label, extra, src, names, asok, tmp, f'r{r}')
                res['round'] = r + 1
                results.append(res)
                log(f"round {r + 1} {label}: peak {res['peak'] / MIB:.0f} MiB, end {res['end'] / MIB:.0f} MiB, "
                    f"live files {res['live_apparent'] / MIB:.0f} MiB, saves {res['save_mib_s']:.0f} MiB/s; "
                    f"after each save (MiB): {[round(x / MIB) for x in res['after_each_save']]}")
    finally:
        shutil.rmtree(src, ignore_errors=True)
        shutil.rmtree(tmp, ignore_errors=True)
    print('| round | config | OSD allocated after each save (MiB) | peak | end of drain | live files | '
          'end / live | save MiB/s |')
    print('|---|---|---|---|---|---|---|---|')
    for res in results:
        print(f"| {res['round']} | {res['config']} | {', '.join(str(round(x / MIB)) for x in res['after_each_save'])} "
              f"| {res['peak'] / MIB:.0f} | {res['end'] / MIB:.0f} | {res['live_apparent'] / MIB:.0f} | "
              f"{res['end'] / res['live_apparent']:.2f} | {res['save_mib_s']:.0f} |")
    if args.json:
        with open(args.json, 'w') as f:
            json.dump(results, f, indent=1)


if __name__ == '__main__':
    main()
