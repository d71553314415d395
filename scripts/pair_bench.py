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

Each case runs in a fresh store: the first save alone, the whole series
in order, and each split save. Files are copied in as a training job's
save would arrive (8 MiB writes and fsync, timed). Reported per case: the
store's live record bytes once the background rebases are done (what it
holds after compaction: lmcfs-stat's live_bytes; gc=off, so the pack bytes,
also shown, still hold the records the rebases replaced), how many chunks
were paired, save MB/s, and for the single-file cases the cold read-back
MB/s of the last file through the mount (remounted, page cache dropped).
The first save's order-0 entropy bound, without and with pairing (`lmc
bound --pair`), is printed with the stored bytes against it.

Needs root (mount, drop caches). Usage:
  scripts/pair_bench.py [--build build] [--work /var/tmp/lmcfs-pair-bench]
                        [--layers 4] [--dim 384] [--saves 10] [--every 5]
"""
import argparse
import glob
import json
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


def stat_json(args, mnt):
    return json.loads(subprocess.run([os.path.join(args.build, 'tools', 'lmcfs', 'lmcfs-stat'), '--json', mnt],
                                     capture_output=True, text=True, check=True).stdout)


def run_once(args, mode, stage, files, read_last=False):
    """Copies `files` (paths under stage) into a fresh store mounted with
    pair=MODE, in order; waits for the background rebases. Returns the
    store's live record bytes (what it holds once compacted: lmcfs-stat's
    live_bytes), its pack bytes, the save MB/s and, with read_last, the cold
    read MB/s of the last file."""
    work = os.path.join(args.work, 'run')
    shutil.rmtree(work, ignore_errors=True)
    store, mnt = os.path.join(work, 'store'), os.path.join(work, 'mnt')
    os.makedirs(mnt)
    mount(args.build, store, mnt, f'pair={mode},gc=off,log_file={os.path.join(args.work, "mount-" + mode + ".log")}')
    r = {}
    try:
        secs = nbytes = 0
        for f in files:
            os.makedirs(os.path.dirname(os.path.join(mnt, f)), exist_ok=True)
            secs += copy(os.path.join(stage, f), os.path.join(mnt, f))
            nbytes += os.path.getsize(os.path.join(stage, f))
        wait_rebases(mnt)
        r['save_mbps'] = nbytes / secs / 1e6
        # The daemon's counters, before a remount resets them.
        delta = stat_json(args, mnt).get('daemon', {}).get('delta', {})
        # As written (the twin first), and afterwards (the master first).
        r['paired'] = delta.get('paired', 0) + delta.get('paired_later', 0)
        if read_last:
            # Cold: a fresh daemon (no decoded chunks kept from the writes)
            # and no page cache.
            unmount(mnt, store)
            drop_caches()
            mount(args.build, store, mnt, f'pair={mode},gc=off')
            last = os.path.join(mnt, files[-1])
            t = time.perf_counter()
            with open(last, 'rb') as f:
                while f.read(8 << 20):
                    pass
            r['read_mbps'] = os.path.getsize(last) / (time.perf_counter() - t) / 1e6
        r['live'] = stat_json(args, mnt)['totals']['live_bytes']
    finally:
        unmount(mnt, store)
    r['packs'] = du(os.path.join(store, 'packs'))
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
    # The order-0 bounds of the first save, without and with pairing.
    out = subprocess.run([os.path.join(args.build, 'tools', 'lmc'), 'bound', '--pair',
                          os.path.join(stage, series[0])], capture_output=True, text=True, check=True).stdout
    row = dict(zip(*[line.split('\t') for line in out.strip().split('\n')[-2:]]))
    bound, bound_paired = float(row['min_bound']), float(row['min_bound_paired'])
    log(f'lmc bound --pair of the first save: {bound / 1e6:.2f} MB, paired {bound_paired / 1e6:.2f} MB '
        f'({row["paired"]} fp32 chunks with a twin)')
    cases = [('one save (the first)', series[:1], True), (f'series of {len(series)} saves', series, True)]
    cases += [(f'split, {d.replace("_", " ")}', [os.path.join(d, n) for n in names], False) for d, names in splits]
    runs = {'on': {}, 'off': {}}
    for mode in ('on', 'off', 'off', 'on'):
        for name, files, read in cases:
            r = run_once(args, mode, stage, files, read)
            runs[mode].setdefault(name, []).append(r)
            log(f'pair={mode} {name}: live {r["live"] / 1e6:.2f} MB, packs {r["packs"] / 1e6:.2f} MB, '
                f'{r["paired"]} chunks paired, saves {r["save_mbps"]:.0f} MB/s' +
                (f', cold read of the last file {r["read_mbps"]:.0f} MB/s' if read else ''))
    mean = lambda rs, k: sum(x[k] for x in rs) / len(rs)  # noqa: E731
    log('summary (pair=on / pair=off; sizes are exact and the same in both runs of a mode):')
    for name, files, read in cases:
        on, off = runs['on'][name], runs['off'][name]
        line = (f'  {name}: live {on[0]["live"] / 1e6:.2f} / {off[0]["live"] / 1e6:.2f} MB = '
                f'{on[0]["live"] / off[0]["live"]:.3f}; saves {mean(on, "save_mbps"):.0f} / '
                f'{mean(off, "save_mbps"):.0f} MB/s = {mean(on, "save_mbps") / mean(off, "save_mbps"):.3f}')
        if read:
            line += (f'; cold read {mean(on, "read_mbps"):.0f} / {mean(off, "read_mbps"):.0f} MB/s = '
                     f'{mean(on, "read_mbps") / mean(off, "read_mbps"):.3f}')
        log(line)
    one = 'one save (the first)'
    log(f'  one save against its order-0 bounds: pair=on {runs["on"][one][0]["live"] / bound_paired:.4f} of the '
        f'paired bound, pair=off {runs["off"][one][0]["live"] / bound:.4f} of the bound without pairing')
    shutil.rmtree(stage)


if __name__ == '__main__':
    main()
