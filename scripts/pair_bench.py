#!/usr/bin/env python3
"""What pairing fp32 masters with their bf16 twins saves (mount option
pair=on|off; docs/ARCHITECTURE.md, "Pairing fp32 masters with their bf16
twins"), measured on real mixed-precision checkpoints, pair=on against
pair=off in the same run, in on-off-off-on order, a fresh store per run.

The data: a small decoder-only transformer language model (token embedding,
--layers torch.nn.TransformerEncoderLayer blocks with a causal mask, tied
output) trained with AdamW on the source text of Python's standard library
(byte-level tokens), in the mixed-precision layout: fp32 master weights and
AdamW state, and the bf16 weights the forward pass would use. Every
--every steps it saves, as Megatron-LM does, one torch.save of
{'model': bf16 state_dict, 'optimizer': {'fp32_from_fp16_params': masters,
'state': AdamW state_dict}} (ckpt_step_N.pt), --saves times. After the
last step it also saves the same tensors split over model.safetensors (bf16)
and optimizer.pt (fp32 masters + AdamW), once with the model written first
and once with the optimizer first.

Each run copies, as a training job's save would arrive (8 MiB writes and
fsync, timed): the series in order, then the split saves. It reports the
store's pack bytes after each part (`du` of packs/, after the background
rebases), save MB/s, and the read-back MB/s of the last single-file save
with the page cache dropped (cold) through the mount.

Needs root (mount, drop caches). Usage:
  scripts/pair_bench.py [--build build] [--work /var/tmp/lmcfs-pair-bench]
                        [--layers 4] [--dim 384] [--saves 10] [--every 5]
"""
import argparse
import glob
import os
import shutil
import subprocess
import time

from benchutil import du, mount, unmount, wait_rebases


def log(msg):
    print(msg, flush=True)


def train(out, layers, dim, saves, every):
    import torch
    from safetensors.torch import save_file
    torch.manual_seed(0)
    torch.set_num_threads(2)
    text = b''.join(open(f, 'rb').read() for f in sorted(glob.glob(os.path.join(
        os.path.dirname(os.__file__), '*.py')))[:200])
    data = torch.frombuffer(bytearray(text), dtype=torch.uint8).long()
    vocab, ctx = 256, 64

    class LM(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = torch.nn.Embedding(vocab, dim)
            self.pos = torch.nn.Parameter(torch.randn(ctx, dim) * 0.02)
            layer = torch.nn.TransformerEncoderLayer(dim, 6, 4 * dim, dropout=0.0, batch_first=True)
            self.blocks = torch.nn.TransformerEncoder(layer, layers)
            self.norm = torch.nn.LayerNorm(dim)

        def forward(self, x):
            mask = torch.nn.Transformer.generate_square_subsequent_mask(x.shape[1])
            h = self.blocks(self.emb(x) + self.pos[:x.shape[1]], mask=mask, is_causal=True)
            return self.norm(h) @ self.emb.weight.T

    m = LM()
    opt = torch.optim.AdamW(m.parameters(), lr=3e-4)
    g = torch.Generator().manual_seed(1)
    os.makedirs(out, exist_ok=True)
    params = sum(p.numel() for p in m.parameters())
    step = 0
    for s in range(saves):
        for _ in range(every):
            i = torch.randint(0, len(data) - ctx - 1, (16,), generator=g)
            x = torch.stack([data[j:j + ctx] for j in i])
            y = torch.stack([data[j + 1:j + ctx + 1] for j in i])
            loss = torch.nn.functional.cross_entropy(m(x).reshape(-1, vocab), y.reshape(-1))
            opt.zero_grad()
            loss.backward()
            opt.step()
            step += 1
        bf16 = {k: v.detach().to(torch.bfloat16).contiguous() for k, v in m.state_dict().items()}
        masters = [p.detach().clone() for p in m.parameters()]
        torch.save({'model': bf16, 'optimizer': {'fp32_from_fp16_params': masters, 'state': opt.state_dict()}},
                   os.path.join(out, f'ckpt_step_{step}.pt'))
        log(f'  step {step}: loss {loss.item():.3f}')
    for order in ('model_first', 'optimizer_first'):
        d = os.path.join(out, order)
        os.makedirs(d)
        files = [('model.safetensors', lambda p: save_file(bf16, p)),
                 ('optimizer.pt', lambda p: torch.save({'fp32_from_fp16_params': masters,
                                                        'state': opt.state_dict()}, p))]
        if order == 'optimizer_first':
            files.reverse()
        for name, save in files:
            save(os.path.join(d, name))
            time.sleep(0.01)  # distinct mtimes: copied in this order
    return params


def copy(src, dst):
    t = time.perf_counter()
    with open(src, 'rb') as f, open(dst, 'wb') as g:
        shutil.copyfileobj(f, g, 8 << 20)
        g.flush()
        os.fsync(g.fileno())
    return time.perf_counter() - t


def drop_caches():
    os.sync()
    with open('/proc/sys/vm/drop_caches', 'w') as f:
        f.write('3\n')


def run_once(args, mode, stage, series, splits):
    work = os.path.join(args.work, 'run')
    shutil.rmtree(work, ignore_errors=True)
    store, mnt = os.path.join(work, 'store'), os.path.join(work, 'mnt')
    os.makedirs(mnt)
    mount(args.build, store, mnt, f'pair={mode},gc=off,log_file={os.path.join(args.work, "mount-" + mode + ".log")}')
    r = {}
    try:
        secs = nbytes = 0
        for i, f in enumerate(series):
            secs += copy(os.path.join(stage, f), os.path.join(mnt, f))
            nbytes += os.path.getsize(os.path.join(stage, f))
            if i == 0:
                r['first'] = du(os.path.join(store, 'packs'))
        wait_rebases(mnt)
        r['series'] = du(os.path.join(store, 'packs'))
        r['save_mbps'] = nbytes / secs / 1e6
        last = os.path.join(mnt, series[-1])
        drop_caches()
        t = time.perf_counter()
        with open(last, 'rb') as f:
            while f.read(8 << 20):
                pass
        r['read_mbps'] = os.path.getsize(last) / (time.perf_counter() - t) / 1e6
        for d, names in splits:
            os.makedirs(os.path.join(mnt, d))
            before = du(os.path.join(store, 'packs'))
            for n in names:
                copy(os.path.join(stage, d, n), os.path.join(mnt, d, n))
            wait_rebases(mnt)
            r[d] = du(os.path.join(store, 'packs')) - before
            r[d + '_stored'] = sum(int(os.getxattr(os.path.join(mnt, d, n), 'user.lmcfs.stored_bytes'))
                                   for n in names)
        r['stat'] = subprocess.run([os.path.join(args.build, 'tools', 'lmcfs', 'lmcfs-stat'), '--json', mnt],
                                   capture_output=True, text=True).stdout
    finally:
        unmount(mnt, store)
    shutil.rmtree(work)
    return r


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--build', default='build')
    ap.add_argument('--work', default='/var/tmp/lmcfs-pair-bench')
    ap.add_argument('--layers', type=int, default=4)
    ap.add_argument('--dim', type=int, default=384)
    ap.add_argument('--saves', type=int, default=10)
    ap.add_argument('--every', type=int, default=5)
    args = ap.parse_args()
    if os.geteuid() != 0:
        raise SystemExit('pair_bench.py needs root (mount, drop caches)')
    stage = os.path.join(args.work, 'stage')
    shutil.rmtree(stage, ignore_errors=True)
    log(f'training: {args.layers} layers, width {args.dim}, {args.saves} saves {args.every} steps apart')
    params = train(stage, args.layers, args.dim, args.saves, args.every)
    series = sorted((f for f in os.listdir(stage) if f.startswith('ckpt_step_')),
                    key=lambda f: int(f[len('ckpt_step_'):-3]))
    splits = [(d, sorted(os.listdir(os.path.join(stage, d)), key=lambda n: os.path.getmtime(
        os.path.join(stage, d, n)))) for d in ('model_first', 'optimizer_first')]
    one = os.path.getsize(os.path.join(stage, series[-1]))
    log(f'{params / 1e6:.2f}M parameters; one save {one / 1e6:.1f} MB; series {len(series)} saves '
        f'{sum(os.path.getsize(os.path.join(stage, f)) for f in series) / 1e6:.1f} MB')
    runs = {'on': [], 'off': []}
    for mode in ('on', 'off', 'off', 'on'):
        r = run_once(args, mode, stage, series, splits)
        runs[mode].append(r)
        log(f'pair={mode}: first save packs {r["first"] / 1e6:.2f} MB; series packs {r["series"] / 1e6:.2f} MB, saves {r["save_mbps"]:.0f} MB/s, cold read of '
            f'the last save {r["read_mbps"]:.0f} MB/s; split saves (model first) {r["model_first"] / 1e6:.2f} MB '
            f'(stored {r["model_first_stored"] / 1e6:.2f} MB), (optimizer first) '
            f'{r["optimizer_first"] / 1e6:.2f} MB (stored {r["optimizer_first_stored"] / 1e6:.2f} MB)')
    on, off = runs['on'][0], runs['off'][0]
    mean = lambda k, rs: sum(x[k] for x in rs) / len(rs)  # noqa: E731
    log('summary (pair=on / pair=off):')
    log(f'  one save (the first): {on["first"] / 1e6:.2f} / {off["first"] / 1e6:.2f} MB = '
        f'{on["first"] / off["first"]:.3f}')
    log(f'  series of {len(series)} saves: {on["series"] / 1e6:.2f} / {off["series"] / 1e6:.2f} MB = '
        f'{on["series"] / off["series"]:.3f}')
    for d in ('model_first', 'optimizer_first'):
        log(f'  split, {d.replace("_", " ")} (stored bytes of the two files): {on[d + "_stored"] / 1e6:.2f} / '
            f'{off[d + "_stored"] / 1e6:.2f} MB = {on[d + "_stored"] / off[d + "_stored"]:.3f}')
    log(f'  save speed: {mean("save_mbps", runs["on"]):.0f} / {mean("save_mbps", runs["off"]):.0f} MB/s = '
        f'{mean("save_mbps", runs["on"]) / mean("save_mbps", runs["off"]):.3f}')
    log(f'  cold read of the last save: {mean("read_mbps", runs["on"]):.0f} / {mean("read_mbps", runs["off"]):.0f} '
        f'MB/s = {mean("read_mbps", runs["on"]) / mean("read_mbps", runs["off"]):.3f}')
    shutil.rmtree(stage)


if __name__ == '__main__':
    main()
