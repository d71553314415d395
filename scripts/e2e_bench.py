#!/usr/bin/env python3
"""End-to-end benchmark (issue 16): real training checkpoints saved side by
side through lmcfs and the ways teams store them today, in one run, written
into docs/BENCHMARKS.md with PNG plots. Needs root (loop mount, dropping
caches), /dev/fuse and scripts/install-deps.sh --bench.

1. Checkpoints. For each --sizes entry a GPT-style decoder sized to it
   (scripts/gen_bench_data.py's model, random init) is trained a few AdamW
   steps on CPU on the stdlib's .py sources; the checkpoint is
   torch.save({'model', 'optimizer', 'step'}): fp32 weights and both AdamW
   moments. The smallest size is trained longer and saved --series times,
   every --series-every steps: the training series.
2. Sizes. Every checkpoint is saved with each method into a fresh target,
   the methods in order and then in reverse (A-B-C..C-B-A, --repeat
   passes), each save timed up to a durable file (fsync of the file and its
   directory); then the caches are dropped and it is read back cold, read
   again warm, and its SHA-256 compared with that of the checkpoint's bytes.
   Methods:
     plain   torch.save to the plain disk.
     zstd    the same, then `zstd -T0 -LEVEL --rm` and an fsync of the .zst
             (time: save + compress + fsync; stored: the .zst; read:
             `zstd -d -c` into this process).
     zipnn   ZipNN in process, file mode (scripts/zipnn_bench.py's zipnn-file
             settings: byte input, bytearray_dtype float32, method AUTO,
             threads = nproc) on each 64 MiB piece of the torch.save stream,
             written as length-prefixed frames; read: read + decompress.
     btrfs   torch.save to a fresh btrfs (`-o BTRFS_OPTS`, default
             compress=zstd) on a loop file on the same disk; stored: compsize's
             disk usage (btrfs-compsize), else the df delta (the report says
             which). Its heuristic leaves float data it judges incompressible
             raw, hence also:
     btrfs-force  the same with `-o BTRFS_FORCE_OPTS` (default
             compress-force=zstd): every extent compressed.
     lmcfs   torch.save into a fresh lmcfs mount (store on the same disk);
             stored: du of the store directory once the save is durable and
             the background rebases are done; the cold read remounts (a
             new daemon, empty caches). Daemon CPU (utime+stime from /proc)
             per GiB saved and its peak RSS (VmHWM) over the save.
   Ratios against plain are taken within each pass.
3. Series. Each method stores the whole training series in one target;
   the stored bytes after each checkpoint are the series plot.
4. Writers. The --writers-size checkpoint split ZeRO-style (each of N
   writers holds 1/N of every tensor; the total is fixed), N processes,
   each with its shard in its own memory (own_pages), saving their shards
   at once (torch.save + fsync), plain disk and a fresh
   lmcfs mount, alternating; aggregate MB/s from the common start to the
   last durable shard; the lmcfs shards compared with the plain ones.
5. Trainer. A Hugging Face Trainer (scripts/space_bench.py train: small
   GPT-2 from its config, CPU, fixed seeds) with save_total_limit =
   --trainer-limit, once into a plain directory and once into an lmcfs mount
   (gc=auto, plus `lmcfs-gc` after every save via a TrainerCallback); the
   disk bytes after each save; at the end every kept file is compared byte
   for byte. Both runs use the same output_dir path (a symbolic link
   switched between them), since training_args.bin pickles it.

Examples:
  scripts/e2e_bench.py --quick --build /var/tmp/e2ebuild        # ~5 min
  scripts/e2e_bench.py --out-doc docs/BENCHMARKS.md             # full form
  scripts/e2e_bench.py --sizes 512M --skip series,writers,trainer

--out-doc replaces what lies between `<!-- e2e:begin -->` and
`<!-- e2e:end -->` in that file (adding the section "## End to end
(scripts/e2e_bench.py)" at its end when the markers are missing) and writes
the plots as IMG_DIR/e2e-{series,throughput,trainer}.png. Generated
checkpoints live in --data (default WORK/data, removed at the end; give a
directory outside WORK to keep them for the next run). --json keeps every
figure; --from-json remakes the report and plots from it without measuring.
Mounts, the loop device and WORK are cleaned up on any exit.
"""
import argparse
import datetime
import hashlib
import json
import multiprocessing as mp
import os
import platform
import queue
import re
import shlex
import shutil
import signal
import struct
import subprocess
import sys
import time
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchutil  # noqa: E402
import fs_bench  # noqa: E402  (imports torch)
import torch  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MiB, GiB = 1 << 20, 1 << 30
METHODS = ['plain', 'zstd', 'zipnn', 'btrfs', 'btrfs-force', 'lmcfs']
ZIPNN_PIECE = 64 * MiB
BEGIN, END = '<!-- e2e:begin -->', '<!-- e2e:end -->'
SECTION = '## End to end (scripts/e2e_bench.py)'
INTRO = ('Real training checkpoints saved through lmcfs and the ways teams store them today, side by side in one run; '
         'the script\'s docstring documents the method and every option, and `--out-doc docs/BENCHMARKS.md` '
         'rewrites what lies between the markers below (the plots: docs/img/e2e-*.png).')


def log(msg):
    print(f'[e2e] {msg}', flush=True)


def parse_size(s):
    m = re.fullmatch(r'([0-9.]+)\s*([KMGT]?)i?B?', s.strip(), re.I)
    if not m:
        raise argparse.ArgumentTypeError(f'bad size {s!r} (e.g. 256M, 4.5G)')
    return int(float(m.group(1)) * {'': 1, 'K': 1 << 10, 'M': MiB, 'G': GiB, 'T': 1 << 40}[m.group(2).upper()])


def human(n):
    return f'{n / GiB:.2f} GiB' if n >= GiB else f'{n / MiB:.1f} MiB'


def fsync_dir(path):
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def save_durable(state, path):
    """torch.save + fsync of the file (fs_bench.save) and of its directory."""
    t = time.perf_counter()
    fs_bench.save(state, path)
    fsync_dir(os.path.dirname(path))
    return time.perf_counter() - t


def vm_hwm_mib(pid):
    """Peak RSS (VmHWM) of a live process in MiB; None once it has exited."""
    try:
        with open(f'/proc/{pid}/status') as f:
            for line in f:
                if line.startswith('VmHWM:'):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None


class HashWriter:
    """A write-only file object for torch.save that hashes what it is given."""

    def __init__(self):
        self.h, self.n = hashlib.sha256(), 0

    def write(self, b):
        self.h.update(b)
        self.n += len(b)
        return len(b)

    def flush(self):
        pass


def reference(state):
    """(SHA-256, bytes) of torch.save(state) to a file object: what every
    method must read back."""
    w = HashWriter()
    torch.save(state, w)
    return w.h.hexdigest(), w.n


# ---------------------------------------------------------------- checkpoints

def preset_for(target, saves, every):
    """A gen_bench_data preset whose torch.save (fp32 weights + two AdamW
    moments, 12 bytes a parameter) is about `target` bytes: about 80% of the
    parameters in blocks, the vocabulary makes up the rest."""
    params = target / 12
    d, heads = next((d, h) for limit, d, h in ((12 * MiB, 128, 4), (48 * MiB, 256, 4), (384 * MiB, 512, 8),
                                               (2 * GiB, 1024, 16), (float('inf'), 1536, 16)) if target < limit)
    seq = 64
    per_layer = 12 * d * d + 13 * d
    layers = max(1, int(0.8 * params / per_layer))
    vocab = max(512, int((params - layers * per_layer - seq * d - 2 * d) / (2 * d)))
    return dict(n_layer=layers, d_model=d, n_head=heads, vocab=vocab, seq_len=seq, batch=2 if d > 512 else 8,
                saves=saves, save_every=every, lr=1e-3 if d <= 512 else 3e-4, warmup=2, corpus_bytes=8 << 20)


def _train(outdir, cfg, threads):
    import gen_bench_data
    torch.set_num_threads(threads)
    gen_bench_data.train_series(outdir, cfg, threads)


def ensure_series(data, name, target, saves, every, threads):
    """Trains (unless already there) and returns the series' .pt paths in
    step order; the training runs in a fresh process so its memory goes."""
    import gen_bench_data
    from pathlib import Path
    outdir = Path(data) / name
    outdir.mkdir(parents=True, exist_ok=True)
    cfg = preset_for(target, saves, every)
    cfg.update(size=name, steps=saves * every, seed=gen_bench_data.SEED,
               generator_version=gen_bench_data.GENERATOR_VERSION)
    if not gen_bench_data.series_is_complete(outdir, cfg):
        log(f'training the {name} checkpoint(s): {cfg["n_layer"]} layers, d {cfg["d_model"]}, vocab {cfg["vocab"]}, '
            f'{saves} save(s) every {every} steps')
        p = mp.get_context('spawn').Process(target=_train, args=(outdir, cfg, threads))
        p.start()
        p.join()
        if p.exitcode != 0:
            raise SystemExit(f'training {name} failed (exit {p.exitcode})')
    man = json.loads((outdir / 'train-manifest.json').read_text())
    return [str(outdir / f'ckpt-step{s["step"]}.pt') for s in man['saves']], man


def load(path):
    return torch.load(path, weights_only=True, map_location='cpu')


# ---------------------------------------------------------------- methods

class Method:
    """A fresh target per open(); save() returns its figures; read() is
    timed with feed=None and verifies with a hash's update as feed."""
    suffix = ''  # of the stored file: what a save of NAME leaves is NAME + suffix

    def __init__(self, ctx):
        self.ctx = ctx

    def path(self, name):
        return os.path.join(self.dir, name + self.suffix)

    def before_cold(self):
        fs_bench.drop_caches()

    def read(self, name, feed=None):
        t = time.perf_counter()
        if feed is None:
            fs_bench.read(self.path(name))
        else:
            with open(self.path(name), 'rb', buffering=0) as f:
                for b in iter(lambda: f.read(MiB), b''):
                    feed(b)
        return time.perf_counter() - t

    def stored(self):
        return benchutil.du(self.dir)

    def close(self):
        shutil.rmtree(self.dir, ignore_errors=True)


class Plain(Method):
    name = 'plain'

    def open(self, case, capacity):
        self.dir = os.path.join(case, 'plain')
        os.makedirs(self.dir)

    def save(self, state, name):
        return dict(save_s=save_durable(state, self.path(name)))


class Zstd(Plain):
    name, suffix = 'zstd', '.zst'

    def save(self, state, name):
        src = os.path.join(self.dir, name)
        t = time.perf_counter()
        fs_bench.save(state, src)
        p = subprocess.Popen(['zstd', '-q', '-T0', f'-{self.ctx.zstd_level}', '--rm', '-f', src, '-o', src + '.zst'])
        # Its VmHWM, polled: ru_maxrss would count the Python process it
        # was forked from.
        hwm = 0
        while True:
            pid, status, ru = os.wait4(p.pid, os.WNOHANG)
            if pid:
                break
            hwm = max(hwm, vm_hwm_mib(p.pid) or 0)
            time.sleep(0.02)
        p.returncode = os.waitstatus_to_exitcode(status)
        if p.returncode != 0:
            raise RuntimeError(f'zstd exited {p.returncode}')
        with open(src + '.zst', 'rb') as f:
            os.fsync(f.fileno())
        fsync_dir(self.dir)
        return dict(save_s=time.perf_counter() - t, cpu_s=ru.ru_utime + ru.ru_stime, rss_mib=hwm or None)

    def read(self, name, feed=None):
        t = time.perf_counter()
        p = subprocess.Popen(['zstd', '-q', '-d', '-c', self.path(name)], stdout=subprocess.PIPE, bufsize=0)
        for b in iter(lambda: p.stdout.read(MiB), b''):
            if feed:
                feed(b)
        if p.wait() != 0:
            raise RuntimeError(f'zstd -d exited {p.returncode}')
        return time.perf_counter() - t


class ZipnnWriter:
    """torch.save's file object: each ZIPNN_PIECE bytes of the stream are
    compressed by ZipNN and written as an 8-byte length and the frame."""

    def __init__(self, f, threads):
        self.f, self.threads, self.buf = f, threads, bytearray()

    def write(self, b):
        mv = memoryview(b).cast('B')
        n = len(mv)
        if self.buf:  # complete the partial piece first
            k = min(ZIPNN_PIECE - len(self.buf), n)
            self.buf += mv[:k]
            mv = mv[k:]
            if len(self.buf) == ZIPNN_PIECE:
                self._frame(self.buf)
                self.buf = bytearray()
        while len(mv) >= ZIPNN_PIECE:  # a large tensor: whole pieces straight from it
            self._frame(bytearray(mv[:ZIPNN_PIECE]))
            mv = mv[ZIPNN_PIECE:]
        self.buf += mv
        return n

    def _frame(self, piece):
        """piece: a bytearray of ours (ZipNN reorders its input in place)."""
        import zipnn
        comp = zipnn.ZipNN(bytearray_dtype='float32', threads=self.threads).compress(piece)
        self.f.write(struct.pack('<Q', len(comp)))
        self.f.write(comp)

    def flush(self):
        pass

    def close(self):
        if self.buf:
            self._frame(self.buf)
            self.buf = bytearray()


class Zipnn(Plain):
    name, suffix = 'zipnn', '.znn'

    def save(self, state, name):
        t, c = time.perf_counter(), time.process_time()
        with open(self.path(name), 'wb') as f:
            w = ZipnnWriter(f, os.cpu_count())
            torch.save(state, w)
            w.close()
            f.flush()
            os.fsync(f.fileno())
        fsync_dir(self.dir)
        return dict(save_s=time.perf_counter() - t, cpu_s=time.process_time() - c)

    def read(self, name, feed=None):
        import zipnn
        t = time.perf_counter()
        with open(self.path(name), 'rb') as f:
            while True:
                head = f.read(8)
                if not head:
                    break
                (n,) = struct.unpack('<Q', head)
                out = zipnn.ZipNN(bytearray_dtype='float32', threads=os.cpu_count()).decompress(f.read(n))
                if feed:
                    feed(bytes(out))
        return time.perf_counter() - t


class Btrfs(Plain):
    name = 'btrfs'

    def options(self):
        return self.ctx.btrfs_opts

    def open(self, case, capacity):
        self.fs = fs_bench.Btrfs(os.path.join(case, 'btrfs-fs'), capacity // 3 // MiB + 1, self.options())
        os.makedirs(self.fs.work)
        self.ctx.cleanups.append(self.fs)
        self.fs.__enter__()
        self.dir = self.fs.mnt
        os.sync()
        self.used0 = fs_bench.used_bytes(self.dir)

    def stored(self):
        """compsize's disk usage of the files (data extents, compressed or
        not); without compsize the df delta (data and metadata)."""
        os.sync()
        if shutil.which('compsize'):
            out = subprocess.run(['compsize', '-b', self.dir], capture_output=True, text=True).stdout
            for line in out.splitlines():
                if line.startswith('TOTAL'):
                    return int(line.split()[2])
            if 'Processed 0 files' in out or not out.strip():
                return 0
        self.ctx.btrfs_by = 'df delta'
        return fs_bench.used_bytes(self.dir) - self.used0

    def close(self):
        self.fs.__exit__(None, None, None)
        self.ctx.cleanups.remove(self.fs)
        shutil.rmtree(self.fs.work, ignore_errors=True)


class BtrfsForce(Btrfs):
    """compress=zstd lets btrfs's heuristic store data it judges
    incompressible (float tensors, as it turns out) raw; compress-force
    compresses every extent."""
    name = 'btrfs-force'

    def options(self):
        return self.ctx.btrfs_force_opts


class Lmcfs(Method):
    name = 'lmcfs'

    def open(self, case, capacity):
        self.base = os.path.join(case, 'lmcfs')
        self.store, self.dir = os.path.join(self.base, 'store'), os.path.join(self.base, 'mnt')
        os.makedirs(self.store)
        os.makedirs(self.dir)
        self.mounts = 0
        self._mount()

    def _mount(self):
        self.mounts += 1
        opts = f'log_file={self.base}/log-{self.mounts}' + (',' + self.ctx.mount_opts if self.ctx.mount_opts else '')
        benchutil.mount(self.ctx.build, self.store, self.dir, opts)
        self.ctx.cleanups.append(self)
        self.pid = benchutil.daemon_pid(self.store)

    def _unmount(self):
        benchutil.unmount(self.dir, self.store)
        benchutil.wait_exit(self.pid, 120)
        self.ctx.cleanups.remove(self)

    def emergency(self):
        subprocess.run(['fusermount3', '-u', '-z', self.dir], capture_output=True)
        benchutil.wait_exit(self.pid, 60)

    def save(self, state, name):
        c0 = fs_bench.cpu_seconds(self.pid)
        dt = save_durable(state, self.path(name))
        return dict(save_s=dt, cpu_s=fs_bench.cpu_seconds(self.pid) - c0, rss_mib=vm_hwm_mib(self.pid))

    def stored(self):
        """The store directory once the background rebases are done and its
        size has held still for a second (holes punched, gc at rest)."""
        benchutil.wait_rebases(self.dir)
        last, end = benchutil.du(self.store), time.time() + 20
        while time.time() < end:
            time.sleep(0.5)
            now = benchutil.du(self.store)
            if now == last:
                time.sleep(0.5)
                if benchutil.du(self.store) == now:
                    break
            last = now
        return benchutil.du(self.store)

    def before_cold(self):
        self._unmount()
        self.stored_unmounted = benchutil.du(self.store)
        fs_bench.drop_caches()
        self._mount()
        self.read_cpu0 = fs_bench.cpu_seconds(self.pid)

    def close(self):
        if self in self.ctx.cleanups:
            self._unmount()
        shutil.rmtree(self.base, ignore_errors=True)


CLASSES = {c.name: c for c in (Plain, Zstd, Zipnn, Btrfs, BtrfsForce, Lmcfs)}


# ---------------------------------------------------------------- measurements

def measure_size(ctx, label, path):
    """Every method, --repeat passes in alternating order, on one checkpoint."""
    state = load(path)
    ref, logical = reference(state)
    log(f'size {label}: {human(logical)} ({os.path.basename(path)}), SHA-256 {ref[:16]}')
    runs = []
    for rep in range(ctx.repeat):
        order = ctx.methods if rep % 2 == 0 else ctx.methods[::-1]
        for name in order:
            case = os.path.join(ctx.work, f'case-{label}-{name}-{rep}')
            os.makedirs(case)
            m = CLASSES[name](ctx)
            m.open(case, logical * 2)
            try:
                fs_bench.drop_caches()
                r = m.save(state, 'ckpt.pt')
                r.update(method=name, rep=rep, stored=m.stored(), logical=logical)
                m.before_cold()
                r['cold_s'] = m.read('ckpt.pt')
                if name == 'lmcfs':
                    r['read_cpu_s'] = fs_bench.cpu_seconds(m.pid) - m.read_cpu0
                    r['stored_unmounted'] = m.stored_unmounted
                r['warm_s'] = m.read('ckpt.pt')
                h = hashlib.sha256()
                m.read('ckpt.pt', h.update)
                r['identical'] = h.hexdigest() == ref
                if not r['identical']:
                    ctx.failures.append(f'{name} {label} pass {rep}: read-back SHA-256 differs')
            finally:
                m.close()
                shutil.rmtree(case, ignore_errors=True)
            runs.append(r)
            log(f'  {name:6s} pass {rep}: save {r["save_s"]:6.2f} s ({logical / 1e6 / r["save_s"]:6.0f} MB/s), '
                f'stored/logical {r["stored"] / logical:.3f}, cold {r["cold_s"]:.2f} s, warm {r["warm_s"]:.2f} s'
                + (f', CPU {r["cpu_s"]:.1f} s' if r.get('cpu_s') is not None else '')
                + ('' if r['identical'] else '  READ-BACK DIFFERS'))
    del state
    return dict(label=label, logical=logical, file=os.path.basename(path), runs=runs)


def measure_series(ctx, paths):
    """Each method stores the whole series in one target: stored bytes after
    each checkpoint."""
    refs, sizes = [], []
    for p in paths:
        st = load(p)
        h, n = reference(st)
        refs.append(h)
        sizes.append(n)
    out = {'steps': [int(re.search(r'step(\d+)', p).group(1)) for p in paths], 'logical': sizes, 'methods': {}}
    for name in ctx.methods:
        case = os.path.join(ctx.work, f'series-{name}')
        os.makedirs(case)
        m = CLASSES[name](ctx)
        m.open(case, sum(sizes) * 2)
        stored, saves = [], []
        try:
            for p, h in zip(paths, refs):
                st = load(p)
                fs_bench.drop_caches()
                saves.append(m.save(st, os.path.basename(p))['save_s'])
                del st
                stored.append(m.stored())
            m.before_cold()
            for p, h in zip(paths, refs):
                d = hashlib.sha256()
                m.read(os.path.basename(p), d.update)
                if d.hexdigest() != h:
                    ctx.failures.append(f'series {name}: {os.path.basename(p)} reads back different')
        finally:
            m.close()
            shutil.rmtree(case, ignore_errors=True)
        out['methods'][name] = dict(stored=stored, save_s=saves)
        log(f'  series {name:6s}: stored after each save (MiB) {", ".join(f"{s / MiB:.0f}" for s in stored)}')
    return out


def shard(obj, r, n):
    """Rank r's part of a state for n ZeRO-style writers: 1/n of every
    tensor of n or more elements (flat, contiguous); the rest as it is."""
    if isinstance(obj, torch.Tensor):
        if obj.numel() < n:
            return obj.clone()
        flat = obj.reshape(-1)
        k = flat.numel()
        return flat[k * r // n:k * (r + 1) // n].clone()
    if isinstance(obj, dict):
        return {k: shard(v, r, n) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(shard(v, r, n) for v in obj)
    return obj


def own_pages(state):
    """For a writer forked from the process that sharded the checkpoint:
    state with every tensor copied into this process's own memory, as a
    training job's ranks, processes of their own, hold theirs. Shared
    copy-on-write, a page pinned for a direct write (FUSE's direct I/O)
    is first copied by the kernel: a cost no real rank pays. Sets this
    process to one torch thread first: OpenMP's pool does not survive
    fork()."""
    torch.set_num_threads(1)

    def copy(obj):
        if isinstance(obj, torch.Tensor):
            return obj.clone()
        if isinstance(obj, dict):
            return {k: copy(v) for k, v in obj.items()}
        if isinstance(obj, (list, tuple)):
            return type(obj)(copy(v) for v in obj)
        return obj
    return copy(state)


def gather(q, procs, what):
    """One item from queue q for each of the writer processes procs, in
    the order they come; raises, naming `what`, if a writer failed first."""
    items = []
    while len(items) < len(procs):
        try:
            items.append(q.get(timeout=1))
        except queue.Empty:
            if any(p.exitcode for p in procs):
                raise RuntimeError(f'a writer failed ({what})')
    return items


def _write_shard(state, path, ready, go, done):
    state = own_pages(state)
    ready.put(path)
    go.wait()
    fs_bench.save(state, path)
    fsync_dir(os.path.dirname(path))
    done.put(time.perf_counter())


def measure_writers(ctx, path):
    state = load(path)
    out = {'file': os.path.basename(path), 'rows': []}
    fork = mp.get_context('fork')
    for n in ctx.writers:
        shards = [shard(state, r, n) for r in range(n)]
        for rep, name in enumerate(['plain', 'lmcfs', 'lmcfs', 'plain'][:2 * ctx.writer_repeat]):
            case = os.path.join(ctx.work, f'writers-{n}-{rep}')
            os.makedirs(case)
            m = CLASSES[name](ctx)
            m.open(case, 0)
            try:
                fs_bench.drop_caches()
                ready, go, done = fork.Queue(), fork.Event(), fork.Queue()
                procs = [fork.Process(target=_write_shard, args=(shards[r], m.path(f'rank{r}.pt'), ready, go, done))
                         for r in range(n)]
                for p in procs:
                    p.start()
                gather(ready, procs, f'{name}, {n} writers, before the start')
                time.sleep(0.5)
                c0 = fs_bench.cpu_seconds(m.pid) if name == 'lmcfs' else None
                t0 = time.perf_counter()
                go.set()
                ends = gather(done, procs, f'{name}, {n} writers')
                for p in procs:
                    p.join()
                # The daemon's CPU and memory of the saves alone: taken
                # before stored() (which waits for background work) and the
                # read-back below (which decodes every shard).
                daemon = (dict(cpu_s=fs_bench.cpu_seconds(m.pid) - c0, rss_mib=vm_hwm_mib(m.pid))
                          if name == 'lmcfs' else {})
                logical = sum(os.path.getsize(m.path(f'rank{r}.pt')) for r in range(n))
                row = dict(writers=n, method=name, rep=rep, seconds=max(ends) - t0, logical=logical,
                           stored=m.stored(), sha=[benchutil.sha256_file(m.path(f'rank{r}.pt')) for r in range(n)],
                           **daemon)
            finally:
                m.close()
                shutil.rmtree(case, ignore_errors=True)
            out['rows'].append(row)
            log(f'  {n} writer(s) {name:5s}: {logical / 1e6:.0f} MB in {row["seconds"]:.2f} s = '
                f'{logical / 1e6 / row["seconds"]:.0f} MB/s')
        shas = {tuple(r['sha']) for r in out['rows'] if r['writers'] == n}
        if len(shas) != 1:
            ctx.failures.append(f'{n} writers: the shards differ between plain and lmcfs')
        del shards
    del state
    return out


def measure_trainer(ctx):
    """The Trainer twice (plain dir, lmcfs mount) through the same
    output_dir path; disk bytes after each save; kept files compared."""
    base = os.path.join(ctx.work, 'trainer')
    out_link = os.path.join(base, 'out')
    plain = os.path.join(base, 'plain')
    os.makedirs(plain)
    res = {}
    for run in ('plain', 'lmcfs'):
        ev = os.path.join(base, f'events-{run}.jsonl')
        cmd = [sys.executable, os.path.join(REPO, 'scripts', 'space_bench.py'), 'train', out_link, '--events', ev,
               '--saves', str(ctx.trainer_saves), '--save-steps', str(ctx.trainer_save_steps),
               '--limit', str(ctx.trainer_limit), '--threads', str(ctx.threads)]
        m = None
        if run == 'plain':
            target, backing = plain, plain
        else:
            m = Lmcfs(ctx)
            m.open(base, 0)
            target, backing = os.path.join(m.dir, 'out'), m.store
            os.makedirs(target)
            cmd += ['--gc-bin', os.path.join(ctx.build, 'tools', 'lmcfs', 'lmcfs-gc'), '--gc-mount', m.dir]
            c0 = fs_bench.cpu_seconds(m.pid)
        if os.path.lexists(out_link):
            os.remove(out_link)
        os.symlink(target, out_link)
        t = time.time()
        subprocess.run(cmd, check=True, env=dict(os.environ, SPACE_BENCH_BACKING=backing))
        r = dict(seconds=time.time() - t, events=[json.loads(x) for x in open(ev)])
        if m:
            r.update(cpu_s=fs_bench.cpu_seconds(m.pid) - c0, rss_mib=vm_hwm_mib(m.pid), final=m.stored())
        else:
            r['final'] = benchutil.du(plain)
        r['files'] = {}
        for dp, _, fns in os.walk(target):
            for fn in fns:
                p = os.path.join(dp, fn)
                r['files'][os.path.relpath(p, target)] = benchutil.sha256_file(p)
        res[run] = r
        if m:
            m.close()
        saves = [e for e in r['events'] if e['event'] == 'save']
        log(f'  trainer {run}: {len(saves)} saves in {r["seconds"]:.0f} s, disk bytes after each save (MiB) '
            + ', '.join(f'{e["backing_after"] / MiB:.1f}' for e in saves))
    a, b = res['plain']['files'], res['lmcfs']['files']
    res['differ'] = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))
    res['compared'] = len(set(a) | set(b))
    if res['differ']:
        ctx.failures.append(f'trainer: {len(res["differ"])} kept files differ: {", ".join(res["differ"][:5])}')
    shutil.rmtree(base, ignore_errors=True)
    return res


# ---------------------------------------------------------------- report

def machine():
    def sh(cmd):
        return subprocess.run(cmd, shell=True, capture_output=True, text=True).stdout.strip()
    cpu = sh("lscpu | sed -n 's/^Model name: *//p' | head -1")
    mem = os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES') / GiB
    return dict(nproc=os.cpu_count(), cpu=cpu, mem_gib=round(mem, 1), kernel=platform.release(),
                os=sh(". /etc/os-release && echo $PRETTY_NAME"),
                commit=sh(f'git -C {REPO} rev-parse --short HEAD'),
                dirty=bool(sh(f'git -C {REPO} status --porcelain --untracked-files=no')))


def disk_of(path):
    src = subprocess.run(['findmnt', '-n', '-o', 'SOURCE,FSTYPE', '-T', path], capture_output=True,
                         text=True).stdout.split()
    dev = os.path.basename(src[0]) if src else '?'
    try:
        with open(f'/sys/block/{dev}/queue/rotational') as f:
            rot = f'queue/rotational={f.read().strip()}'
        with open(f'/sys/block/{dev}/size') as f:
            rot += f', {int(f.read()) * 512 / GiB:.0f} GiB'
    except OSError:
        rot = '?'
    return f'{src[1] if len(src) > 1 else "?"} on {src[0] if src else "?"} ({rot})'


def loadavg():
    with open('/proc/loadavg') as f:
        return ' '.join(f.read().split()[:3])


def fmt_ratio(runs, key, name):
    """plain's time / this method's time within each pass ('-' for plain)."""
    if name == 'plain':
        return '1'
    out = []
    for r in runs:
        if r['method'] == name:
            p = next((x for x in runs if x['method'] == 'plain' and x['rep'] == r['rep']), None)
            if p:
                out.append(f'{p[key] / r[key]:.2f}')
    return ', '.join(out) or '-'


def size_table(sizes, methods):
    L = ['| checkpoint | method | save s (each pass) | MB/s (best) | speed vs plain (each pass) | stored | '
         'stored / logical | cold read s | warm read s | codec CPU s/GiB saved | peak RSS MiB | read-back |',
         '|---|---|---|---|---|---|---|---|---|---|---|---|']
    for s in sizes:
        lg = s['logical']
        for name in methods:
            rs = [r for r in s['runs'] if r['method'] == name]
            if not rs:
                continue
            best = min(r['save_s'] for r in rs)
            cpu = [r['cpu_s'] for r in rs if r.get('cpu_s') is not None]
            rss = [r['rss_mib'] for r in rs if r.get('rss_mib') is not None]
            stored = min(r['stored'] for r in rs)
            saves = ', '.join(f'{r["save_s"]:.2f}' for r in rs)
            cpu_t = f'{min(cpu) / (lg / GiB):.2f}' if cpu else '-'
            rss_t = f'{max(rss):.0f}' if rss else '-'
            same = 'identical' if all(r['identical'] for r in rs) else '**differs**'
            L.append(f'| {s["label"]} ({human(lg)}) | {name} | {saves} | {lg / 1e6 / best:.0f} | '
                     f'{fmt_ratio(s["runs"], "save_s", name)} | {human(stored)} | {stored / lg:.3f} | '
                     f'{min(r["cold_s"] for r in rs):.2f} | {min(r["warm_s"] for r in rs):.2f} | {cpu_t} | '
                     f'{rss_t} | {same} |')
    return L


def size_summary(sizes):
    """One line a size: lmcfs's stored bytes and save time against each
    other method (best pass of each)."""
    L = []
    for s in sizes:
        best = {}
        for r in s['runs']:
            b = best.setdefault(r['method'], dict(save_s=r['save_s'], stored=r['stored']))
            b['save_s'] = min(b['save_s'], r['save_s'])
        if 'lmcfs' not in best:
            continue
        lm = best['lmcfs']
        others = [m for m in best if m != 'lmcfs']
        L.append(f'- {s["label"]}: lmcfs\'s stored bytes / each method\'s: '
                 + ', '.join(f'{m} {lm["stored"] / best[m]["stored"]:.2f}' for m in others)
                 + '; its save speed / each method\'s (best passes): '
                 + ', '.join(f'{m} {best[m]["save_s"] / lm["save_s"]:.2f}' for m in others) + '.')
    raw = [s['label'] for s in sizes for r in s['runs'] if r['method'] == 'btrfs' and r['stored'] > 0.99 * s['logical']]
    if raw:
        L.append('- btrfs `compress=zstd` stored the ' + ', '.join(sorted(set(raw), key=raw.index)) + ' checkpoints '
                 'uncompressed: its heuristic judges the float data incompressible and leaves such files raw '
                 '(compsize: type `none`); `compress-force` (btrfs-force) compresses every extent.')
    return L


def report(ctx, res, cmdline, t_start, t_end, facts, load0, load1):
    L = []
    p = L.append

    def section(title, text):
        L.extend([f'### {title}', '', text, ''])
    start = datetime.datetime.fromtimestamp(t_start, datetime.timezone.utc)
    p(f'**{ctx.form.capitalize()}**, {start:%Y-%m-%d %H:%M} UTC, wall time {(t_end - t_start) / 60:.1f} min: '
      f'`{cmdline}`')
    p('')
    if ctx.form == 'quick form':
        p('The quick form checks that the pipeline works, at small sizes; the full form (checkpoints of 256M, 1G '
          'and 4.5G, writers 1 to 8, 16 Trainer saves) is `scripts/e2e_bench.py --out-doc docs/BENCHMARKS.md`.')
        p('')
    p(f'Machine: {facts["os"]}, kernel {facts["kernel"]}, `nproc` {facts["nproc"]}, {facts["cpu"]}, '
      f'{facts["mem_gib"]} GiB RAM; work directory {ctx.work} on {facts["disk"]}; load average '
      f'{load0} at the start, {load1} at the end (a shared machine: compare within a pass). Commit '
      f'{facts["commit"]}{" (the work tree had uncommitted changes)" if facts["dirty"] else ""}; binaries from '
      f'`{ctx.build}` (mount.lmcfs of {facts["binary"]}); '
      f'mount options `{ctx.mount_opts or "(defaults)"}`; zstd `-{ctx.zstd_level} -T0`; btrfs `-o {ctx.btrfs_opts}`, '
      f'btrfs-force `-o {ctx.btrfs_force_opts}`; ZipNN {ctx.zipnn_version}; torch {torch.__version__}. '
      f'Parts: ' + ', '.join(f'{k} {v / 60:.1f} min' for k, v in res.get('timing', {}).items()) + '.')
    p('')
    if res.get('sizes'):
        section('Checkpoint sizes',
            f'Each checkpoint: fp32 weights + both AdamW moments of a GPT-style model trained a few steps '
            f'(torch.save); {ctx.repeat} passes, methods in the order {", ".join(ctx.methods)} and then reversed, a '
            f'fresh target per save. Save: torch.save to a durable file (fsync of file and directory). Speed vs '
            f'plain: plain\'s save time / the method\'s, in the same pass (above 1: faster). Stored: allocated '
            f'bytes (plain, zstd, zipnn: the file; btrfs: {ctx.btrfs_by}; lmcfs: `du` of the store directory). '
            f'Reads: best of the passes, cold after `sync; echo 3 > drop_caches` (lmcfs also remounted: a new '
            f'daemon), warm right after; read-back = SHA-256 of what was read against the checkpoint\'s bytes. '
            f'Codec CPU: zstd: the zstd process; zipnn: this process during the save (torch.save + ZipNN + write); '
            f'lmcfs: the daemon during the save; btrfs compresses in kernel threads (not counted). Peak RSS: the '
            f'zstd process, the lmcfs daemon.')
        L += size_table(res['sizes'], ctx.methods)
        p('')
        L += size_summary(res['sizes'])
        p('')
    if res.get('series'):
        s = res['series']
        section('Stored bytes over a training series',
            f'{len(s["steps"])} checkpoints of the {res["series_label"]} model (steps '
            f'{", ".join(map(str, s["steps"]))}, {human(s["logical"][0])} each), all kept, one target per '
            f'method; stored bytes after each save (lmcfs: once its background rebases are done).')
        p('| method | ' + ' | '.join(f'after step {x}' for x in s['steps']) + ' | stored / logical, all |')
        p('|---|' + '---|' * (len(s['steps']) + 1))
        cum = [sum(s['logical'][:i + 1]) for i in range(len(s['steps']))]
        p('| logical | ' + ' | '.join(human(c) for c in cum) + ' | 1 |')
        for name, d in s['methods'].items():
            p(f'| {name} | ' + ' | '.join(human(x) for x in d['stored']) + f' | {d["stored"][-1] / cum[-1]:.3f} |')
        p('')
        p('![stored bytes over the series](img/e2e-series.png)')
        p('')
    if res.get('writers'):
        w = res['writers']
        section('Writers',
            f'The {res["writers_label"]} checkpoint ({w["file"]}) split among N writers ZeRO-style (each holds 1/N of '
            f'every tensor; the total is fixed), N processes, each with its shard in its own memory as a rank '
            f'has it, saving at once (torch.save + fsync of file and directory), plain disk and a fresh lmcfs '
            f'mount in the order plain, lmcfs, lmcfs, plain; aggregate MB/s from the common start to the last '
            f'durable shard.')
        p('| writers | total | plain MB/s | lmcfs MB/s | lmcfs / plain (best) | lmcfs stored / logical | '
          'daemon CPU s/GiB | daemon peak RSS MiB | shards |')
        p('|---|---|---|---|---|---|---|---|---|')
        for n in ctx.writers:
            rows = [r for r in w['rows'] if r['writers'] == n]
            pl = [r for r in rows if r['method'] == 'plain']
            lm = [r for r in rows if r['method'] == 'lmcfs']
            if not rows:
                continue
            lg = rows[0]['logical']
            mbs = lambda rr: ', '.join(f'{r["logical"] / 1e6 / r["seconds"]:.0f}' for r in rr)  # noqa: E731
            same = len({tuple(r['sha']) for r in rows}) == 1
            p(f'| {n} | {human(lg)} | {mbs(pl)} | {mbs(lm)} | '
              f'{min(r["seconds"] for r in pl) / min(r["seconds"] for r in lm):.2f} | '
              f'{min(r["stored"] for r in lm) / lg:.3f} | {min(r["cpu_s"] for r in lm) / (lg / GiB):.2f} | '
              f'{max(r["rss_mib"] for r in lm):.0f} | {"identical" if same else "**differ**"} |')
        p('')
    if ctx.plots_done:
        p('![save throughput against checkpoint size and writers](img/e2e-throughput.png)')
        p('')
    if res.get('trainer'):
        t = res['trainer']
        sv = {run: [e for e in t[run]['events'] if e['event'] == 'save'] for run in ('plain', 'lmcfs')}
        ckpt = sv['lmcfs'][-1]['bytes'] if sv['lmcfs'] else 0
        section('Hugging Face Trainer with rotation',
            f'`scripts/space_bench.py train` (GPT-2 from its config, n_layer 2, n_embd 128, vocab 8192, CPU, seed '
            f'1234): {ctx.trainer_saves} saves every {ctx.trainer_save_steps} steps, save_total_limit='
            f'{ctx.trainer_limit}, checkpoints of {human(ckpt)}; once into a plain directory, once into an lmcfs '
            f'mount (gc=auto, and `lmcfs-gc` after every save once the rebases are done, from a TrainerCallback). '
            f'Disk bytes: the plain directory, or the store directory, after each save and its rotation. Save: '
            f'the Trainer\'s `on_step_end` to `on_save`.')
        p('| save | step | plain dir | lmcfs store | store / plain | save s plain | save s lmcfs |')
        p('|---|---|---|---|---|---|---|')
        for i, (a, b) in enumerate(zip(sv['plain'], sv['lmcfs'])):
            p(f'| {i + 1} | {b["step"]} | {human(a["backing_after"])} | {human(b["backing_after"])} | '
              f'{b["backing_after"] / a["backing_after"]:.3f} | {a["t1"] - a["t0"]:.2f} | {b["t1"] - b["t0"]:.2f} |')
        p('')
        tail = [e['backing_after'] for e in sv['lmcfs'][ctx.trainer_limit:]]
        if tail:
            p(f'Steady state: from save {ctx.trainer_limit + 1} on (the limit reached) the store holds '
              f'{human(min(tail))} to {human(max(tail))} (spread {100 * (max(tail) - min(tail)) / max(tail):.0f}%), '
              f'the plain directory {human(min(e["backing_after"] for e in sv["plain"][ctx.trainer_limit:]))} to '
              f'{human(max(e["backing_after"] for e in sv["plain"][ctx.trainer_limit:]))}. Training wall time: '
              f'plain {t["plain"]["seconds"]:.0f} s, lmcfs {t["lmcfs"]["seconds"]:.0f} s (process start to '
              f'exit; the first run also loads Python\'s libraries after the cache drops, lmcfs\'s includes the '
              f'gc after each save); daemon CPU {t["lmcfs"]["cpu_s"]:.1f} s, peak RSS {t["lmcfs"]["rss_mib"]:.0f} '
              f'MiB.')
            p('')
        p(f'Kept files compared: {t["compared"]} (every file of the last {ctx.trainer_limit} checkpoint-N '
          f'directories): ' + ('all byte-identical to the plain run.' if not t['differ'] else
                               f'**{len(t["differ"])} differ**: {", ".join(t["differ"])}.'))
        p('')
        p('![disk bytes after each Trainer save](img/e2e-trainer.png)')
        p('')
    if ctx.failures:
        p('**Failures:** ' + '; '.join(ctx.failures))
        p('')
    return '\n'.join(L)


def plots(ctx, res, img_dir):
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    os.makedirs(img_dir, exist_ok=True)
    colors = {'plain': 'C1', 'zstd': 'C2', 'zipnn': 'C4', 'btrfs': 'C3', 'btrfs-force': 'C5', 'lmcfs': 'C0',
              'logical': '0.5'}
    marks = {'plain': 's', 'zstd': '^', 'zipnn': 'v', 'btrfs': 'x', 'btrfs-force': 'D', 'lmcfs': 'o'}
    if res.get('series'):
        s = res['series']
        fig, ax = plt.subplots(figsize=(7.5, 4.5), dpi=100)
        cum = [sum(s['logical'][:i + 1]) / MiB for i in range(len(s['steps']))]
        ax.plot(s['steps'], cum, ls='--', color=colors['logical'], label='logical (every file)')
        for name, d in s['methods'].items():
            ax.plot(s['steps'], [x / MiB for x in d['stored']], marker=marks[name], color=colors[name], label=name,
                    lw=2 if name == 'lmcfs' else 1.2)
        ax.set_xticks(s['steps'])
        ax.set_xlabel('training step of the checkpoint just added')
        ax.set_ylabel('stored MiB (cumulative)')
        ax.set_title(f'Stored bytes over a training series ({res["series_label"]} checkpoints, all kept)', fontsize=9)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(os.path.join(img_dir, 'e2e-series.png'))
        plt.close(fig)
    if res.get('sizes') or res.get('writers'):
        fig, axes = plt.subplots(1, 3, figsize=(15, 4.5), dpi=100)
        sizes = res.get('sizes', [])
        for ax, what in zip(axes[:2], ('speed', 'ratio')):
            for name in ctx.methods:
                xs, ys = [], []
                for s in sizes:
                    rs = [r for r in s['runs'] if r['method'] == name]
                    if rs:
                        xs.append(s['logical'] / GiB)
                        ys.append(s['logical'] / 1e6 / min(r['save_s'] for r in rs) if what == 'speed' else
                                  min(r['stored'] for r in rs) / s['logical'])
                if xs:
                    ax.plot(xs, ys, marker=marks[name], color=colors[name], label=name,
                            lw=2 if name == 'lmcfs' else 1.2)
            ax.set_xscale('log')
            ax.minorticks_off()
            ax.set_xticks([s['logical'] / GiB for s in sizes], [f'{s["label"]}\n{human(s["logical"])}' for s in sizes])
            ax.set_xlabel('checkpoint size (log)')
            ax.grid(alpha=0.3)
            ax.legend(fontsize=8)
        axes[0].set_ylabel('save MB/s to a durable file (best pass)')
        axes[0].set_ylim(bottom=0)
        axes[0].set_title('Save throughput against checkpoint size', fontsize=9)
        axes[1].set_ylabel('stored / logical bytes')
        axes[1].set_title('Stored bytes against checkpoint size', fontsize=9)
        axes[1].set_ylim(0, 1.05)
        ax = axes[2]
        for name in ('plain', 'lmcfs'):
            rows = [r for r in res.get('writers', {}).get('rows', []) if r['method'] == name]
            xs = sorted({r['writers'] for r in rows})
            if xs:
                ys = [max(r['logical'] / 1e6 / r['seconds'] for r in rows if r['writers'] == n) for n in xs]
                ax.plot(xs, ys, marker=marks[name], color=colors[name], label=name, lw=2 if name == 'lmcfs' else 1.2)
        ax.set_xscale('log', base=2)
        ax.minorticks_off()
        ax.set_xticks(ctx.writers, [str(x) for x in ctx.writers])
        ax.set_ylim(bottom=0)
        ax.set_xlabel('concurrent writers (total size fixed)')
        ax.set_ylabel('aggregate MB/s (best of 2)')
        ax.set_title('Save throughput against writer count', fontsize=9)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(os.path.join(img_dir, 'e2e-throughput.png'))
        plt.close(fig)
        ctx.plots_done = True
    if res.get('trainer'):
        t = res['trainer']
        fig, ax = plt.subplots(figsize=(7.5, 4.5), dpi=100)
        for run, label in (('plain', 'plain directory'), ('lmcfs', 'lmcfs store directory')):
            sv = [e for e in t[run]['events'] if e['event'] == 'save']
            ax.plot([e['step'] for e in sv], [e['backing_after'] / MiB for e in sv], marker='o',
                    color=colors[run], label=label, lw=2 if run == 'lmcfs' else 1.2)
        ax.set_xlabel('training step (a save each)')
        ax.set_ylabel('MiB on the disk after the save and rotation')
        ax.set_ylim(bottom=0)
        ax.set_title(f'Hugging Face Trainer, save_total_limit={ctx.trainer_limit}', fontsize=9)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(os.path.join(img_dir, 'e2e-trainer.png'))
        plt.close(fig)


def write_doc(path, body):
    with open(path) as f:
        text = f.read()
    block = f'{BEGIN}\n{body.rstrip()}\n{END}'
    if BEGIN in text and END in text:
        text = text[:text.index(BEGIN)] + block + text[text.index(END) + len(END):]
    else:
        text = text.rstrip('\n') + f'\n\n{SECTION}\n\n{INTRO}\n\n' + block + '\n'
    with open(path, 'w') as f:
        f.write(text)


# ---------------------------------------------------------------- main

class Context:
    pass


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--quick', action='store_true',
                    help='a short check: sizes 64M,256M,512M, a 4-save series, writers 1,2,4 on the 256M '
                         'checkpoint, an 8-save Trainer run (any option given still wins)')
    ap.add_argument('--sizes', help='checkpoint sizes, comma-separated (default 256M,1G,4.5G)')
    ap.add_argument('--methods', default=','.join(METHODS), help=f'default {",".join(METHODS)}')
    ap.add_argument('--repeat', type=int, default=2, help='passes per size, alternating the order (default 2)')
    ap.add_argument('--series', type=int, help='checkpoints in the training series of the smallest size '
                                               '(default 6; quick 4)')
    ap.add_argument('--series-every', type=int, help='training steps between them (default 5; quick 3)')
    ap.add_argument('--writers', help='writer counts (default 1,2,4,8; quick 1,2,4)')
    ap.add_argument('--writers-size', help='which --sizes entry the writers split (default the middle one)')
    ap.add_argument('--trainer-saves', type=int, help='Trainer saves (default 16; quick 8)')
    ap.add_argument('--trainer-save-steps', type=int, default=2, help='steps between Trainer saves (default 2)')
    ap.add_argument('--trainer-limit', type=int, default=2, help='save_total_limit (default 2)')
    ap.add_argument('--skip', default='', help='parts to skip, comma-separated: sizes, series, writers, trainer')
    ap.add_argument('--build', default=os.path.join(REPO, 'build'),
                    help='build dir with tools/mountlmcfs/mount.lmcfs and tools/lmcfs/lmcfs-gc (default build/)')
    ap.add_argument('--work', default='/var/tmp/lmcfs-e2e', help='work dir on the disk to measure '
                                                                  '(default /var/tmp/lmcfs-e2e; removed at the end)')
    ap.add_argument('--data', help='where the generated checkpoints go (default WORK/data); reused when complete')
    ap.add_argument('--mount-opts', default='', help='extra mount.lmcfs -o options')
    ap.add_argument('--btrfs-opts', default='compress=zstd',
                    help='method btrfs\'s mount options (default compress=zstd)')
    ap.add_argument('--btrfs-force-opts', default='compress-force=zstd',
                    help='method btrfs-force\'s mount options (default compress-force=zstd)')
    ap.add_argument('--zstd-level', type=int, default=3, help='zstd level of the zstd method (default 3)')
    ap.add_argument('--threads', type=int, default=2, help='torch threads for the training (default 2)')
    ap.add_argument('--out-doc', help='Markdown file whose e2e markers get the report (e.g. docs/BENCHMARKS.md)')
    ap.add_argument('--img-dir', help='where the PNGs go (default: img/ next to --out-doc, else WORK/..)')
    ap.add_argument('--json', help='also write every figure measured to this JSON file')
    ap.add_argument('--keep', action='store_true', help='keep the work directory')
    ap.add_argument('--from-json', help='measure nothing: remake the report and plots of a run saved with --json')
    a = ap.parse_args(argv)
    img_dir = a.img_dir or (os.path.join(os.path.dirname(os.path.abspath(a.out_doc)), 'img') if a.out_doc
                            else os.path.dirname(os.path.abspath(a.work)))
    if a.from_json:
        with open(a.from_json) as f:
            publish(json.load(f), a.out_doc, img_dir)
        return 0

    q = a.quick
    sizes = [s.strip() for s in (a.sizes or ('64M,256M,512M' if q else '256M,1G,4.5G')).split(',')]
    ctx = Context()
    ctx.quick = q
    ctx.methods = [m for m in a.methods.split(',') if m]
    bad = [m for m in ctx.methods if m not in CLASSES]
    if bad:
        ap.error(f'unknown method(s) {bad}')
    ctx.repeat, ctx.mount_opts, ctx.zstd_level = a.repeat, a.mount_opts, a.zstd_level
    ctx.btrfs_opts, ctx.btrfs_force_opts = a.btrfs_opts, a.btrfs_force_opts
    ctx.build, ctx.threads = os.path.abspath(a.build), a.threads
    ctx.writers = [int(x) for x in (a.writers or ('1,2,4' if q else '1,2,4,8')).split(',')]
    ctx.writer_repeat = 2
    ctx.trainer_saves = a.trainer_saves or (8 if q else 16)
    ctx.trainer_save_steps, ctx.trainer_limit = a.trainer_save_steps, a.trainer_limit
    series_n = a.series or (4 if q else 6)
    series_every = a.series_every or (3 if q else 5)
    skip = set(x for x in a.skip.split(',') if x)
    ctx.work = os.path.abspath(a.work)
    ctx.failures, ctx.cleanups, ctx.btrfs_by, ctx.plots_done = [], [], 'compsize disk usage', False
    try:
        from importlib.metadata import version
        ctx.zipnn_version = version('zipnn')
    except Exception:  # noqa: BLE001 - only for the report
        ctx.zipnn_version = '?'
    warnings.filterwarnings('ignore')
    need = [os.path.join(ctx.build, 'tools', 'mountlmcfs', 'mount.lmcfs'),
            os.path.join(ctx.build, 'tools', 'lmcfs', 'lmcfs-gc')]
    for b in need:
        if not os.access(b, os.X_OK):
            ap.error(f'{b} missing: build it (scripts/build.sh) or pass --build')
    if os.geteuid() != 0:
        ap.error('needs root: the btrfs loop mount and dropping the page cache')
    if any(m.startswith('btrfs') for m in ctx.methods) and not shutil.which('mkfs.btrfs'):
        ap.error('mkfs.btrfs missing: scripts/install-deps.sh --bench')
    if a.out_doc and not os.path.exists(a.out_doc):
        ap.error(f'{a.out_doc} does not exist')
    if os.path.exists(ctx.work):
        shutil.rmtree(ctx.work)
    os.makedirs(ctx.work)
    data = os.path.abspath(a.data or os.path.join(ctx.work, 'data'))
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    cmdline = ' '.join(shlex.quote(x) for x in ['scripts/e2e_bench.py'] + (argv or sys.argv[1:]))
    facts, load0, t_start = machine(), loadavg(), time.time()
    facts['disk'] = disk_of(ctx.work)
    facts['binary'] = datetime.datetime.fromtimestamp(os.path.getmtime(need[0]), datetime.timezone.utc).strftime(
        '%Y-%m-%d %H:%M UTC')
    defaults = not any([a.sizes, a.series, a.series_every, a.writers, a.writers_size, a.trainer_saves, skip,
                        a.repeat != 2, a.methods != ','.join(METHODS)])
    ctx.form = 'quick form' if q else 'full form' if defaults else 'custom form'
    log(f'{cmdline}; work {ctx.work}; load {load0}')
    torch.set_num_threads(a.threads)
    res = {'timing': {}}
    t_part = [time.time()]

    def part_done(name):
        now = time.time()
        res['timing'][name] = now - t_part[0]
        t_part[0] = now
    try:
        targets = [(s, parse_size(s)) for s in sizes]
        largest = max(t for _, t in targets)
        free = shutil.disk_usage(ctx.work).free
        if free < 4 * largest + 4 * GiB:
            log(f'warning: {human(free)} free on {ctx.work}; the largest size wants about {human(4 * largest)}')
        ckpts = {}
        for i, (label, target) in enumerate(sorted(targets, key=lambda x: x[1])):
            first = i == 0 and 'series' not in skip
            paths, _ = ensure_series(data, f'e2e-{label}', target, series_n if first else 1,
                                     series_every if first else 3, a.threads)
            ckpts[label] = paths
        part_done('checkpoints')
        order = [label for label, _ in sorted(targets, key=lambda x: x[1])]
        if 'sizes' not in skip:
            res['sizes'] = [measure_size(ctx, label, ckpts[label][-1]) for label in order]
            part_done('sizes')
        if 'series' not in skip:
            res['series_label'] = order[0]
            log(f'series: {len(ckpts[order[0]])} checkpoints of {order[0]}')
            res['series'] = measure_series(ctx, ckpts[order[0]])
            part_done('series')
        if 'writers' not in skip:
            wl = a.writers_size or order[len(order) // 2]
            res['writers_label'] = wl
            log(f'writers: {ctx.writers} on the {wl} checkpoint')
            res['writers'] = measure_writers(ctx, ckpts[wl][-1])
            part_done('writers')
        if 'trainer' not in skip:
            log('trainer: plain dir, then lmcfs')
            res['trainer'] = measure_trainer(ctx)
            part_done('trainer')
    finally:
        for c in list(ctx.cleanups):  # what a failure left mounted
            try:
                c.emergency() if isinstance(c, Lmcfs) else c.__exit__(None, None, None)
            except Exception as e:  # noqa: BLE001 - keep cleaning
                log(f'cleanup: {e}')
        for line in subprocess.run(['losetup', '-a'], capture_output=True, text=True).stdout.splitlines():
            if ctx.work in line:  # a loop device of ours that umount did not free
                subprocess.run(['losetup', '-d', line.split(':')[0]])
        if not a.keep:
            shutil.rmtree(ctx.work, ignore_errors=True)
    settings = {k: v for k, v in vars(ctx).items() if k not in ('cleanups', 'plots_done')}
    run = dict(facts=facts, command=cmdline, start=t_start, end=time.time(), load=[load0, loadavg()],
               settings=settings, results=res)
    if a.json:
        with open(a.json, 'w') as f:
            json.dump(run, f, indent=1, default=str)
    publish(run, a.out_doc, img_dir)
    log(f'done in {(run["end"] - t_start) / 60:.1f} min' + (f'; FAILED: {ctx.failures}' if ctx.failures else ''))
    return 1 if ctx.failures else 0


def publish(run, out_doc, img_dir):
    """The plots and the report of a run (as --json writes it)."""
    ctx = Context()
    vars(ctx).update(run['settings'], plots_done=False)
    plots(ctx, run['results'], img_dir)
    body = report(ctx, run['results'], run['command'], run['start'], run['end'], run['facts'], *run['load'])
    print(body)
    if out_doc:
        write_doc(out_doc, body)
        log(f'wrote {out_doc} and {img_dir}/e2e-*.png')


if __name__ == '__main__':
    sys.exit(main())
