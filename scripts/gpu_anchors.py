#!/usr/bin/env python3
"""GPU anchors: peer GPU compressors measured on the same bf16 checkpoint data.

Runs on a machine with one NVIDIA GPU (torch with CUDA); importable, and
--make-data runnable, without one (--device cpu).

Two modes:

  --make-data FILE --size-mib N [--device cuda|cpu]
      Trains a small Llama-like transformer (RMSNorm, causal attention, SwiGLU,
      untied embeddings, no biases; ~110M parameters by default) with AdamW
      (fp32 master weights, bf16 autocast) on Zipf-distributed random tokens,
      and writes the raw little-endian bf16 bytes of all its parameters
      (named_parameters order) at step --steps, then again every
      --snapshot-every steps, until FILE holds exactly N MiB (the last
      snapshot is truncated). About 350 steps for 1 GiB, ~10 s on an H100.

  --data FILE --out JSON
      Loads FILE (raw bf16, little-endian) onto the GPU and, for each peer,
      measures compress and decompress device memory to device memory:
      GB/s = 1e9 bytes of UNCOMPRESSED data per second, median of --reps timed
      runs after --warmup untimed ones; ratio = compressed / uncompressed bytes
      (lower is better); and checks that decompression is byte-exact.
      Each peer runs in its own try/except; a failing peer is reported as such.

Peers (--peers selects by prefix, comma-separated; default all):
  copy            torch device-to-device copy_ (the memory-bandwidth yardstick;
                  'rw_gbps' counts bytes read + written, the others bytes of data).
  nvcomp-b-*      nvCOMP's low-level batched C API (libnvcomp.so.5 through
                  ctypes; the same entry points cuzipnn binds): 64 KiB chunks
                  (--nvcomp-chunk-kib), all buffers preallocated, so the timed
                  region is the CompressAsync / DecompressAsync call alone.
                  ratio counts the compressed chunks plus 4 bytes per chunk (a
                  size table); compressed chunks stay in their max-size slots.
                  Variants: ans (data_type CHAR), ans-f16 (NVCOMP_TYPE_FLOAT16,
                  "applicable to all half-precision formats", i.e. bf16 too),
                  zstd, bitcomp (USHORT), gdeflate0 (entropy only), gdeflate1.
  nvcomp-py-*     nvCOMP's Python API (nvidia.nvcomp.Codec, NVCOMP_NATIVE
                  bitstream: 64 KiB chunks, its own header), encode()/decode()
                  on the whole buffer, including its allocations and header
                  handling: ANS |u1, ANS <f2, Zstd. ratio from the encoded
                  Array's buffer_size.
  cuzipnn         cuzipnn.compress_tensor / decompress_tensor (ZipNN on the
                  GPU: Triton byte grouping + nvCOMP ANS, 128 KiB chunks).
                  compress_tensor always returns its blob in (pinned) host
                  memory, so its time includes that D2H copy; comp_gbps_excl_d2h
                  subtracts the separately timed copy of the same size.
                  decompress_tensor reads the blob from device memory.
  dfloat11        DFloat11 0.5.0: per piece of --df11-block-mib (a DFloat11
                  'block'), its codec (dfloat11_utils.get_codec /
                  get_32bit_codec / get_luts, unchanged) and its CUDA decode
                  kernel (decode.ptx through cupy, launched as its decode_hook
                  does). Its encoder (dfloat11_utils.encode) is a per-element
                  Python loop (~1e6 elements/s), so the bitstream is built by
                  a torch port of it on the GPU (df11_encode_torch), checked
                  to give identical bytes to the original on a
                  --df11-ref-elems slice of the data; comp_gbps is that
                  port's speed (codec construction included) and
                  ref_encoder_elems_per_s the original's.
  zipnn-cpu       ZipNN 0.5.4 on the CPU (host memory to host memory), the
                  first --zipnn-mib of the data, --zipnn-threads threads,
                  ZipNN(input_format='byte', bytearray_dtype='bfloat16').

  --self-test     CPU-only checks (tiny --make-data, the DFloat11 encoder port
                  against the original, ZipNN round trip); no GPU needed.

Example (GPU machine):
  python3 scripts/gpu_anchors.py --make-data /tmp/ckpt.bf16 --size-mib 1024
  python3 scripts/gpu_anchors.py --data /tmp/ckpt.bf16 --out $OUT/anchors.json
"""

import argparse
import contextlib
import ctypes
import importlib
import importlib.util
import io
import json
import math
import os
import statistics
import struct
import sys
import time
import traceback

try:
    import numpy as np
except ImportError:  # pragma: no cover - numpy is everywhere this runs
    np = None

try:
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
except ImportError:  # importable without torch (argument parsing, docs)
    torch = None
    nn = None
    F = None

MiB = 1 << 20


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def fix_nvidia_namespace():
    """PYTHONPATH=/tmp/site adds /tmp/site/nvidia (nvcomp, libnvcomp); if the
    venv's 'nvidia' were a regular package it would hide it: extend __path__."""
    try:
        import nvidia  # noqa: F401
    except ImportError:
        return
    import nvidia as _nv
    paths = list(getattr(_nv, "__path__", []))
    for p in sys.path:
        d = os.path.join(p or ".", "nvidia")
        if os.path.isdir(d) and d not in paths:
            try:
                _nv.__path__.append(d)
            except AttributeError:
                pass


# ---------------------------------------------------------------------------
# Data: a small Llama-like model trained a few hundred steps.
# ---------------------------------------------------------------------------

if nn is not None:

    class RMSNorm(nn.Module):
        def __init__(self, d, eps=1e-6):
            super().__init__()
            self.weight = nn.Parameter(torch.ones(d))
            self.eps = eps

        def forward(self, x):
            xf = x.float()
            y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
            return (y * self.weight).to(x.dtype)

    class Block(nn.Module):
        def __init__(self, d, heads, ffn):
            super().__init__()
            self.heads = heads
            self.attn_norm = RMSNorm(d)
            self.q_proj = nn.Linear(d, d, bias=False)
            self.k_proj = nn.Linear(d, d, bias=False)
            self.v_proj = nn.Linear(d, d, bias=False)
            self.o_proj = nn.Linear(d, d, bias=False)
            self.mlp_norm = RMSNorm(d)
            self.gate_proj = nn.Linear(d, ffn, bias=False)
            self.up_proj = nn.Linear(d, ffn, bias=False)
            self.down_proj = nn.Linear(ffn, d, bias=False)

        def forward(self, x):
            b, t, d = x.shape
            h = self.attn_norm(x)
            q, k, v = (p(h).view(b, t, self.heads, d // self.heads).transpose(1, 2)
                       for p in (self.q_proj, self.k_proj, self.v_proj))
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.o_proj(a.transpose(1, 2).reshape(b, t, d))
            h = self.mlp_norm(x)
            return x + self.down_proj(F.silu(self.gate_proj(h)) * self.up_proj(h))

    class TinyLlama(nn.Module):
        def __init__(self, vocab, d, layers, heads, ffn):
            super().__init__()
            self.embed_tokens = nn.Embedding(vocab, d)
            self.layers = nn.ModuleList(Block(d, heads, ffn) for _ in range(layers))
            self.norm = RMSNorm(d)
            self.lm_head = nn.Linear(d, vocab, bias=False)
            for name, p in self.named_parameters():
                if p.dim() == 2:
                    std = 0.02
                    if name.endswith(("o_proj.weight", "down_proj.weight")):
                        std /= math.sqrt(2 * layers)
                    nn.init.normal_(p, 0.0, std)

        def forward(self, idx):
            x = self.embed_tokens(idx)
            for blk in self.layers:
                x = blk(x)
            return self.lm_head(self.norm(x))


def make_data(a):
    if torch is None:
        sys.exit("gpu_anchors: --make-data needs torch")
    dev = torch.device(a.device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        sys.exit("gpu_anchors: no CUDA device (use --device cpu for a CPU run)")
    torch.manual_seed(a.seed)
    t0 = time.perf_counter()
    model = TinyLlama(a.vocab, a.d_model, a.layers, a.heads, a.ffn).to(dev)
    nparams = sum(p.numel() for p in model.parameters())
    opt_kw = dict(lr=a.lr, betas=(0.9, 0.95), weight_decay=0.1)
    if dev.type == "cuda":
        opt_kw["fused"] = True
    opt = torch.optim.AdamW(model.parameters(), **opt_kw)
    # Zipf-like token distribution: frequent tokens' embeddings move more.
    probs = 1.0 / torch.arange(1, a.vocab + 1, dtype=torch.float32, device=dev) ** 1.1
    probs /= probs.sum()
    target = a.size_mib * MiB
    log(f"make-data: {nparams / 1e6:.1f}M params ({2 * nparams / MiB:.0f} MiB bf16 per snapshot), "
        f"target {a.size_mib} MiB, device {dev}")
    written, step, snaps = 0, 0, []
    next_snap = a.steps
    use_amp = dev.type == "cuda"
    tmp = a.make_data + ".part"
    with open(tmp, "wb") as f:
        while written < target:
            while step < next_snap:
                lr = a.lr * min(1.0, (step + 1) / a.warmup_lr)
                for g in opt.param_groups:
                    g["lr"] = lr
                tok = torch.multinomial(probs, a.batch * (a.seq + 1), replacement=True)
                tok = tok.view(a.batch, a.seq + 1)
                with torch.autocast(device_type=dev.type, dtype=torch.bfloat16, enabled=use_amp):
                    logits = model(tok[:, :-1])
                loss = F.cross_entropy(logits.float().reshape(-1, a.vocab), tok[:, 1:].reshape(-1))
                loss.backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                opt.step()
                opt.zero_grad(set_to_none=True)
                step += 1
                if step % 50 == 0 or step == 1:
                    log(f"  step {step} loss {loss.item():.3f} ({time.perf_counter() - t0:.1f}s)")
            with torch.no_grad():
                flat = torch.cat([p.detach().reshape(-1).to(torch.bfloat16)
                                  for p in model.parameters()])
                buf = flat.view(torch.uint8).cpu().numpy()
            take = min(len(buf), target - written)
            f.write(buf[:take].tobytes())
            written += take
            snaps.append({"step": step, "bytes": int(take)})
            next_snap = step + a.snapshot_every
    os.replace(tmp, a.make_data)
    meta = {"file": a.make_data, "bytes": written, "params": nparams, "snapshots": snaps,
            "model": {"vocab": a.vocab, "d_model": a.d_model, "layers": a.layers,
                      "heads": a.heads, "ffn": a.ffn, "seq": a.seq, "batch": a.batch,
                      "lr": a.lr, "seed": a.seed},
            "seconds": round(time.perf_counter() - t0, 2)}
    log(f"make-data: wrote {written} bytes in {meta['seconds']} s, snapshots at steps "
        f"{[s['step'] for s in snaps]}")
    print(json.dumps(meta))
    return meta


# ---------------------------------------------------------------------------
# Timing
# ---------------------------------------------------------------------------

def sync():
    torch.cuda.synchronize()


def timed(fn, warmup, reps, events=True):
    """Runs fn warmup + reps times; returns (wall seconds list, event seconds
    list or None, last result). Device-wide sync around every run, so work on
    other streams is counted in the wall time; CUDA events time the current
    stream only."""
    res = None
    for _ in range(warmup):
        res = fn()
        sync()
    walls, evs = [], []
    for _ in range(reps):
        sync()
        e0 = torch.cuda.Event(enable_timing=True)
        e1 = torch.cuda.Event(enable_timing=True)
        e0.record()
        t0 = time.perf_counter()
        res = fn()
        e1.record()
        sync()
        walls.append(time.perf_counter() - t0)
        evs.append(e0.elapsed_time(e1) / 1e3)
    return walls, (evs if events else None), res


def med(xs):
    return statistics.median(xs) if xs else None


def gbps(nbytes, secs):
    return nbytes / secs / 1e9 if secs else None


# ---------------------------------------------------------------------------
# nvCOMP batched C API through ctypes
# ---------------------------------------------------------------------------

class _Opts(ctypes.Structure):
    # All of nvCOMP 5's batched option structs are 64 bytes (ints, then reserved).
    _fields_ = [("w", ctypes.c_uint32 * 16)]


def _opts(fmt, *vals):
    raw = struct.pack(fmt, *vals)
    raw = raw + b"\0" * (64 - len(raw))
    assert len(raw) == 64
    return _Opts.from_buffer_copy(raw)


NVCOMP_TYPE_CHAR, NVCOMP_TYPE_USHORT, NVCOMP_TYPE_FLOAT16 = 0, 3, 9

# name -> (C prefix, compress opts, decompress opts)
BATCHED = {
    "ans": ("ANS", ("<iiB", 0, NVCOMP_TYPE_CHAR, 0), ("<iiB", 0, 0, 0)),
    "ans-f16": ("ANS", ("<iiB", 0, NVCOMP_TYPE_FLOAT16, 0), ("<iiB", 0, 0, 0)),
    "zstd": ("Zstd", ("<",), ("<i", 0)),
    "bitcomp": ("Bitcomp", ("<ii", 0, NVCOMP_TYPE_USHORT), ("<i", 0)),
    "gdeflate0": ("Gdeflate", ("<i", 0), ("<i", 0)),
    "gdeflate1": ("Gdeflate", ("<i", 1), ("<i", 0)),
}


def load_libnvcomp():
    fix_nvidia_namespace()
    lib = importlib.import_module("nvidia.libnvcomp").load_library()
    if lib is None:
        raise ImportError("nvidia.libnvcomp.load_library() found no libnvcomp.so.5")
    return lib


class Batched:
    def __init__(self, lib, prefix):
        sz, p = ctypes.c_size_t, ctypes.c_void_p
        szp = ctypes.POINTER(ctypes.c_size_t)

        def bind(name, *args):
            fn = getattr(lib, f"nvcompBatched{prefix}{name}")
            fn.argtypes = list(args)
            fn.restype = ctypes.c_int
            return fn

        self.max_out = bind("CompressGetMaxOutputChunkSize", sz, _Opts, szp)
        self.ctemp = bind("CompressGetTempSizeAsync", sz, sz, _Opts, szp, sz)
        self.comp = bind("CompressAsync", p, p, sz, sz, p, sz, p, p, _Opts, p, p)
        self.dtemp = bind("DecompressGetTempSizeAsync", sz, sz, _Opts, szp, sz)
        self.decomp = bind("DecompressAsync", p, p, p, p, sz, p, sz, p, _Opts, p, p)


def _chk(status, what):
    if status != 0:
        raise RuntimeError(f"nvCOMP {what} returned status {status}")


def bench_nvcomp_batched(src_u8, variant, chunk, a):
    lib = load_libnvcomp()
    prefix, copts_spec, dopts_spec = BATCHED[variant]
    api = Batched(lib, prefix)
    copts, dopts = _opts(*copts_spec), _opts(*dopts_spec)
    dev = src_u8.device
    n = src_u8.numel()
    nch = (n + chunk - 1) // chunk
    stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)
    i64 = dict(dtype=torch.int64, device=dev)
    in_ptrs = src_u8.data_ptr() + torch.arange(nch, **i64) * chunk
    in_bytes = torch.full((nch,), chunk, **i64)
    in_bytes[-1] = n - (nch - 1) * chunk
    mo = ctypes.c_size_t()
    _chk(api.max_out(chunk, copts, ctypes.byref(mo)), "GetMaxOutputChunkSize")
    slot = (mo.value + 7) // 8 * 8
    comp = torch.empty(nch * slot, dtype=torch.uint8, device=dev)
    out_ptrs = comp.data_ptr() + torch.arange(nch, **i64) * slot
    comp_bytes = torch.zeros(nch, **i64)
    st = torch.zeros(nch, dtype=torch.int32, device=dev)
    tb = ctypes.c_size_t()
    _chk(api.ctemp(nch, chunk, copts, ctypes.byref(tb), n), "CompressGetTempSize")
    ctemp = torch.empty(max(tb.value, 1), dtype=torch.uint8, device=dev)
    ctemp_bytes = tb.value

    def do_comp():
        _chk(api.comp(in_ptrs.data_ptr(), in_bytes.data_ptr(), chunk, nch, ctemp.data_ptr(),
                      ctemp_bytes, out_ptrs.data_ptr(), comp_bytes.data_ptr(), copts,
                      st.data_ptr(), stream), "CompressAsync")

    cw, ce, _ = timed(do_comp, a.warmup, a.reps)
    bad = int((st != 0).sum())
    if bad:
        raise RuntimeError(f"{bad} chunks failed to compress (first status {int(st[st != 0][0])})")
    total_comp = int(comp_bytes.sum())
    dec = torch.empty(n, dtype=torch.uint8, device=dev)
    dec_ptrs = dec.data_ptr() + torch.arange(nch, **i64) * chunk
    actual = torch.zeros(nch, **i64)
    _chk(api.dtemp(nch, chunk, dopts, ctypes.byref(tb), n), "DecompressGetTempSize")
    dtemp = torch.empty(max(tb.value, 1), dtype=torch.uint8, device=dev)
    dtemp_bytes = tb.value

    def do_decomp():
        _chk(api.decomp(out_ptrs.data_ptr(), comp_bytes.data_ptr(), in_bytes.data_ptr(),
                        actual.data_ptr(), nch, dtemp.data_ptr(), dtemp_bytes, dec_ptrs.data_ptr(),
                        dopts, st.data_ptr(), stream), "DecompressAsync")

    dw, de, _ = timed(do_decomp, a.warmup, a.reps)
    bad = int((st != 0).sum())
    if bad:
        raise RuntimeError(f"{bad} chunks failed to decompress (first status {int(st[st != 0][0])})")
    dec.zero_()  # verify the output of one more, untimed, run
    do_decomp()
    sync()
    exact = (int((st != 0).sum()) == 0 and bool(torch.equal(dec, src_u8))
             and bool(torch.equal(actual, in_bytes)))
    return dict(comp_bytes=total_comp + 4 * nch, payload_bytes=total_comp, chunks=nch,
                chunk_bytes=chunk, comp_s=med(ce), decomp_s=med(de), comp_wall_s=med(cw),
                decomp_wall_s=med(dw), comp_runs=ce, decomp_runs=de, exact=exact,
                timer="cuda events (current stream)",
                settings=f"{prefix} {copts_spec} chunk {chunk}")


# ---------------------------------------------------------------------------
# nvCOMP Python API
# ---------------------------------------------------------------------------

def nvc_array(nvc, t):
    """torch CUDA tensor -> nvcomp.Array (zero copy)."""
    errs = []
    for f in (lambda: nvc.as_array(t), lambda: nvc.from_dlpack(t),
              lambda: nvc.as_array(t.__dlpack__())):
        try:
            return f()
        except Exception as e:  # noqa: BLE001
            errs.append(repr(e))
    raise RuntimeError("cannot wrap a torch tensor as nvcomp.Array: " + "; ".join(errs))


def nvc_to_torch(arr):
    """nvcomp.Array on the GPU -> torch tensor (zero copy)."""
    errs = []
    for f in (lambda: torch.from_dlpack(arr), lambda: torch.from_dlpack(arr.to_dlpack()),
              lambda: torch.as_tensor(arr, device="cuda")):
        try:
            return f()
        except Exception as e:  # noqa: BLE001
            errs.append(repr(e))
    import cupy as cp
    try:
        return torch.as_tensor(cp.asarray(arr), device="cuda")
    except Exception as e:  # noqa: BLE001
        errs.append(repr(e))
    raise RuntimeError("cannot view an nvcomp.Array as a torch tensor: " + "; ".join(errs))


PY_VARIANTS = {
    "ans-u1": dict(algorithm="ANS", data_type="|u1"),
    "ans-f2": dict(algorithm="ANS", data_type="<f2"),
    "zstd": dict(algorithm="Zstd"),
}


def bench_nvcomp_py(src_u8, variant, chunk, a):
    fix_nvidia_namespace()
    nvc = importlib.import_module("nvidia.nvcomp")
    n = src_u8.numel()
    kw = dict(PY_VARIANTS[variant])
    kw.update(uncomp_chunk_size=chunk, device_id=src_u8.device.index or 0,
              cuda_stream=torch.cuda.current_stream().cuda_stream)
    codec = nvc.Codec(**kw)
    arr = nvc_array(nvc, src_u8)
    cfg = dcfg = None
    try:
        cfg = codec.compression_config(n)
    except Exception as e:  # noqa: BLE001 - older API: no configs
        log(f"  nvcomp-py-{variant}: compression_config unavailable ({e}); plain encode")
    state = {}

    def do_comp():
        state["enc"] = codec.encode(arr, compression_config=cfg) if cfg is not None else codec.encode(arr)
        return state["enc"]

    try:
        do_comp()
        sync()
    except Exception as e:  # noqa: BLE001
        if "f2" not in variant:
            raise
        # The ANS float16 mode may want a 2-byte array: give it the bf16 bytes as float16.
        log(f"  nvcomp-py-{variant}: encode of a uint8 array failed ({e}); retrying with a float16 view")
        arr = nvc_array(nvc, src_u8.view(torch.float16))
    cw, _, enc = timed(do_comp, a.warmup, a.reps, events=False)
    comp_bytes = int(enc.buffer_size)
    if cfg is not None:
        try:
            dcfg = codec.decompression_config(cfg)
        except Exception as e:  # noqa: BLE001
            log(f"  nvcomp-py-{variant}: decompression_config unavailable ({e})")

    def do_decomp():
        if dcfg is not None:
            return codec.decode(enc, decompression_config=dcfg)
        return codec.decode(enc)

    dw, _, dec = timed(do_decomp, a.warmup, a.reps, events=False)
    out = nvc_to_torch(dec).reshape(-1)
    if out.dtype != torch.uint8:
        out = out.view(torch.uint8)
    exact = out.numel() == n and bool(torch.equal(out, src_u8))
    extra = {}
    try:
        extra["capacity"] = int(enc.capacity)
        extra["max_comp_bytes"] = int(codec.get_max_comp_buffer_size(arr))
        if comp_bytes >= extra["max_comp_bytes"]:
            extra["warning"] = "buffer_size equals the max bound: the ratio may be the bound"
    except Exception as e:  # noqa: BLE001 - informative only
        extra["capacity_error"] = repr(e)
    return dict(comp_bytes=comp_bytes, chunk_bytes=chunk, comp_s=med(cw), decomp_s=med(dw),
                comp_runs=cw, decomp_runs=dw, exact=exact, nvcomp_version=str(nvc.__version__),
                **extra,
                timer="wall clock, device synchronized",
                settings=f"Codec({PY_VARIANTS[variant]}, uncomp_chunk_size={chunk}), NVCOMP_NATIVE")


# ---------------------------------------------------------------------------
# cuzipnn
# ---------------------------------------------------------------------------

def bench_cuzipnn(src_u8, a):
    fix_nvidia_namespace()
    import cuzipnn
    x = src_u8.view(torch.bfloat16)
    n = src_u8.numel()
    cw, _, blob = timed(lambda: cuzipnn.compress_tensor(x, pin_memory=True), a.warmup, a.reps,
                        events=False)
    comp_bytes = blob.numel()
    blob_gpu = blob.to(src_u8.device)
    # The D2H copy compress_tensor ends with, timed alone (pinned destination).
    host = torch.empty(comp_bytes, dtype=torch.uint8, pin_memory=True)
    d2h_w, _, _ = timed(lambda: host.copy_(blob_gpu, non_blocking=True), a.warmup, a.reps,
                        events=False)
    dw, _, out = timed(lambda: cuzipnn.decompress_tensor(blob_gpu), a.warmup, a.reps, events=False)
    exact = bool(torch.equal(out.reshape(-1).view(torch.uint8), src_u8))
    c, d2h = med(cw), med(d2h_w)
    try:
        from importlib.metadata import version
        ver = version("cuzipnn")
    except Exception:  # noqa: BLE001
        ver = "?"
    return dict(comp_bytes=comp_bytes, comp_s=c, decomp_s=med(dw), comp_runs=cw, decomp_runs=dw,
                d2h_s=d2h, comp_gbps_excl_d2h=gbps(n, c - d2h) if c > d2h else None, exact=exact,
                timer="wall clock, device synchronized", version=ver,
                settings="compress_tensor(bf16, pin_memory=True) defaults: 128 KiB chunks, "
                         "8 KiB sub-chunks; decompress_tensor(blob on GPU)")


# ---------------------------------------------------------------------------
# DFloat11
# ---------------------------------------------------------------------------

DF11_BYTES_PER_THREAD = 8
DF11_THREADS_PER_BLOCK = 512


def load_df11():
    """dfloat11_utils and the decode kernel, without importing the package
    (its __init__ pulls in accelerate, transformers, pkg_resources)."""
    spec = importlib.util.find_spec("dfloat11")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("dfloat11 is not installed")
    pkg = list(spec.submodule_search_locations)[0]
    us = importlib.util.spec_from_file_location("dfloat11_utils_standalone",
                                                os.path.join(pkg, "dfloat11_utils.py"))
    utils = importlib.util.module_from_spec(us)
    us.loader.exec_module(utils)
    return utils, os.path.join(pkg, "decode.ptx")


def df11_codec(utils, w_int16):
    with contextlib.redirect_stdout(io.StringIO()):
        _, counter = utils.get_codec(w_int16.view(torch.bfloat16))
        codec, _, table = utils.get_32bit_codec(counter)
        luts = utils.get_luts(table)
    return codec, luts


def _packbits_msb(bits):
    """bits: 1-D uint8/int tensor of 0/1 -> uint8 tensor, MSB first, zero-padded (np.packbits)."""
    pad = (-bits.numel()) % 8
    if pad:
        bits = torch.cat([bits, bits.new_zeros(pad)])
    w = torch.tensor([128, 64, 32, 16, 8, 4, 2, 1], dtype=torch.int32, device=bits.device)
    return (bits.view(-1, 8).to(torch.int32) * w).sum(1).to(torch.uint8)


def df11_encode_torch(w_int16, codec, bytes_per_thread=DF11_BYTES_PER_THREAD,
                      threads_per_block=DF11_THREADS_PER_BLOCK):
    """Vectorized port of dfloat11_utils.encode_weights for one 1-D int16 tensor:
    returns (encoded uint8, sign_mantissa uint8, output_positions int32 (read
    as uint32 by the kernel), gaps uint8), the same bytes as the original."""
    dev = w_int16.device
    W = w_int16.reshape(-1)
    n = W.numel()
    exps = ((W >> 7) & 0xFF).to(torch.long)
    other = (((W >> 8) & 0x80) | (W & 0x7F)).to(torch.uint8)
    L = torch.zeros(256, dtype=torch.long)
    V = torch.zeros(256, dtype=torch.long)
    for s, (b, v) in codec._table.items():
        if isinstance(s, int):
            L[s], V[s] = b, v
    eof_b, eof_v = codec._table[codec._eof]
    L, V = L.to(dev), V.to(dev)
    lens = L[exps]
    vals = V[exps]
    del exps
    ends = torch.cumsum(lens, 0)
    T = int(ends[-1])
    starts = ends - lens
    del ends
    if T % 8:  # the original appends the EOF code, then keeps one more byte
        lens = torch.cat([lens, lens.new_tensor([eof_b])])
        vals = torch.cat([vals, vals.new_tensor([eof_v])])
        starts = torch.cat([starts, starts.new_tensor([T])])
        nbytes = T // 8 + 1
        total_bits = T + eof_b
    else:
        nbytes = T // 8
        total_bits = T
    # Scatter every code into big-endian 32-bit words; codes are <= 32 bits,
    # so each touches one or two words, and bits never overlap: add == or.
    nwords = (total_bits + 31) // 32 + 1
    word = starts >> 5
    end = (starts & 31) + lens
    first = torch.where(end <= 32, vals << (32 - end).clamp(min=0), vals >> (end - 32).clamp(min=0))
    second = torch.where(end > 32, (vals << torch.where(end > 32, 64 - end, 0)) & 0xFFFFFFFF,
                         torch.zeros_like(vals))
    del vals, end
    acc = torch.zeros(nwords, dtype=torch.long, device=dev)
    acc.index_add_(0, word, first)
    acc.index_add_(0, word + 1, second)
    del word, first, second, lens
    shifts = torch.tensor([24, 16, 8, 0], dtype=torch.long, device=dev)
    encoded = ((acc.unsqueeze(1) >> shifts) & 0xFF).to(torch.uint8).reshape(-1)[:nbytes].contiguous()
    del acc
    # gaps: per 64-bit thread window, offset of the first code starting in it.
    tbits = 8 * bytes_per_thread
    last = int(starts[-1])
    nwin = last // tbits + 1
    wpos = torch.arange(nwin, dtype=torch.long, device=dev) * tbits
    gaps = starts[torch.searchsorted(starts, wpos)] - wpos
    blocks = (nbytes + threads_per_block * bytes_per_thread - 1) // (threads_per_block * bytes_per_thread)
    gaps = torch.cat([gaps, gaps.new_zeros(threads_per_block * blocks - nwin)])
    gbits = ((gaps.unsqueeze(1) >> torch.arange(4, -1, -1, device=dev)) & 1).reshape(-1)
    gaps_packed = _packbits_msb(gbits)
    # output_positions: per block window, index of the first code starting in it; then n.
    bbits = tbits * threads_per_block
    nblk = last // bbits + 1
    bpos = torch.arange(nblk, dtype=torch.long, device=dev) * bbits
    op = torch.searchsorted(starts, bpos)
    op = torch.cat([op, op.new_tensor([n])]).to(torch.int32)
    return encoded, other, op, gaps_packed


def df11_ref_check(utils, w_int16_cpu, codec):
    """Original encoder on a slice; returns (identical?, elements/s)."""
    t0 = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        enc, other, op, gaps, _ = utils.encode_weights(
            [w_int16_cpu.view(torch.bfloat16)], codec, DF11_BYTES_PER_THREAD,
            DF11_THREADS_PER_BLOCK)
    dt = time.perf_counter() - t0
    mine = df11_encode_torch(w_int16_cpu, codec)
    same = (torch.equal(enc, mine[0]) and torch.equal(other, mine[1])
            and torch.equal(op.to(torch.int64), mine[2].to(torch.int64))
            and torch.equal(gaps, mine[3]))
    return same, w_int16_cpu.numel() / dt


def bench_dfloat11(src_u8, a):
    import cupy as cp
    utils, ptx = load_df11()
    kern = cp.RawModule(path=ptx).get_function("decode")
    dev = src_u8.device
    w = src_u8.view(torch.int16)
    n = w.numel()
    piece = max(1, a.df11_block_mib * MiB // 2)
    bounds = [(s, min(n, s + piece)) for s in range(0, n, piece)]
    res = {}
    # Reference check: the original Python encoder on a slice, with that slice's codec.
    if a.df11_ref_elems > 0:
        sl = w[: min(n, a.df11_ref_elems)].cpu()
        c_sl, _ = df11_codec(utils, sl)
        same, eps = df11_ref_check(utils, sl, c_sl)
        res["ref_encoder_elems_per_s"] = eps
        res["port_matches_ref"] = bool(same)
        if not same:
            raise RuntimeError("df11_encode_torch differs from dfloat11_utils.encode on the slice")

    pieces = []

    def do_comp():
        pieces.clear()
        for s, e in bounds:
            codec, luts = df11_codec(utils, w[s:e])
            enc, other, op, gaps = df11_encode_torch(w[s:e], codec)
            pieces.append((luts.to(dev), enc, other, op, gaps))
        return pieces

    cw, _, _ = timed(do_comp, a.warmup, a.reps, events=False)
    comp_bytes = 0
    launches = []
    out = torch.empty(n, dtype=torch.int16, device=dev)
    max_smem = 0
    for (s, e), (luts, enc, other, op, gaps) in zip(bounds, pieces):
        comp_bytes += enc.numel() + other.numel() + 4 * op.numel() + gaps.numel() + luts.numel()
        opd = op.to(torch.int64)
        smem = DF11_THREADS_PER_BLOCK * 4 + 4 + int((opd[1:] - opd[:-1]).max()) * 2
        max_smem = max(max_smem, smem)
        grid = ((enc.numel() + DF11_THREADS_PER_BLOCK * DF11_BYTES_PER_THREAD - 1)
                // (DF11_THREADS_PER_BLOCK * DF11_BYTES_PER_THREAD),)
        launches.append((grid, smem, [luts.data_ptr(), enc.data_ptr(), other.data_ptr(),
                                      op.data_ptr(), gaps.data_ptr(), out[s:e].data_ptr(),
                                      luts.shape[0], enc.numel(), e - s]))
    if max_smem > 48 * 1024:
        kern.max_dynamic_shared_size_bytes = max_smem

    def do_decomp():
        with cp.cuda.Device(dev.index or 0):
            for grid, smem, args in launches:
                kern(grid, (DF11_THREADS_PER_BLOCK,), args, shared_mem=smem)

    dw, de, _ = timed(do_decomp, a.warmup, a.reps)
    out.zero_()  # verify the output of one more, untimed, run
    do_decomp()
    sync()
    exact = bool(torch.equal(out, w))
    res.update(comp_bytes=comp_bytes, comp_s=med(cw), decomp_s=med(de), decomp_wall_s=med(dw),
               comp_runs=cw, decomp_runs=de, exact=exact, pieces=len(bounds),
               max_shared_mem=max_smem, timer="decode: cuda events (null stream); "
               "compress: wall clock of the torch port",
               settings=f"pieces of {a.df11_block_mib} MiB, threads_per_block 512, "
                        "bytes_per_thread 8 (dfloat11 0.5.0)")
    return res


# ---------------------------------------------------------------------------
# ZipNN (CPU)
# ---------------------------------------------------------------------------

def bench_zipnn_cpu(src_u8, a):
    import zipnn
    n = min(src_u8.numel(), a.zipnn_mib * MiB)
    n -= n % 2
    pristine = src_u8[:n].cpu().numpy().tobytes()
    threads = a.zipnn_threads or min(os.cpu_count() or 1, 16)

    def mk():
        return zipnn.ZipNN(input_format="byte", bytearray_dtype="bfloat16", threads=threads)

    ct = []
    comp = None
    for i in range(a.warmup + a.reps):
        buf = bytearray(pristine)  # ZipNN reorders its input in place
        t0 = time.perf_counter()
        comp = mk().compress(buf)
        if i >= a.warmup:
            ct.append(time.perf_counter() - t0)
    dt = []
    dec = None
    for i in range(a.warmup + a.reps):
        t0 = time.perf_counter()
        dec = mk().decompress(comp)
        if i >= a.warmup:
            dt.append(time.perf_counter() - t0)
    return dict(bytes=n, comp_bytes=len(comp), comp_s=med(ct), decomp_s=med(dt), comp_runs=ct,
                decomp_runs=dt, exact=bytes(dec) == pristine, timer="wall clock (CPU)",
                settings=f"ZipNN(input_format='byte', bytearray_dtype='bfloat16', threads={threads}), "
                         f"method AUTO, first {n} bytes")


# ---------------------------------------------------------------------------
# Driver
# ---------------------------------------------------------------------------

def peer_list(a):
    chunk = a.nvcomp_chunk_kib * 1024
    peers = [("copy", None)]
    peers += [(f"nvcomp-b-{v}", (bench_nvcomp_batched, v, chunk)) for v in BATCHED]
    peers += [(f"nvcomp-py-{v}", (bench_nvcomp_py, v, chunk)) for v in PY_VARIANTS]
    peers += [("cuzipnn", (bench_cuzipnn,)), ("dfloat11", (bench_dfloat11,)),
              ("zipnn-cpu", (bench_zipnn_cpu,))]
    if a.peers:
        want = [p.strip() for p in a.peers.split(",") if p.strip()]
        peers = [p for p in peers if p[0] == "copy" or any(p[0].startswith(w) for w in want)]
    if a.skip:
        skip = [p.strip() for p in a.skip.split(",") if p.strip()]
        peers = [p for p in peers if not any(p[0].startswith(s) for s in skip)]
    return peers


def run_bench(a):
    if torch is None:
        sys.exit("gpu_anchors: the benchmark needs torch")
    cpu_only = a.device == "cpu"
    if not cpu_only and not torch.cuda.is_available():
        sys.exit("gpu_anchors: no CUDA device (--device cpu runs the CPU peers only, as a test)")
    dev = torch.device("cpu") if cpu_only else torch.device("cuda", 0)
    if not cpu_only:
        torch.cuda.set_device(dev)
    size = os.path.getsize(a.data)
    if a.limit_mib:
        size = min(size, a.limit_mib * MiB)
    size -= size % 2
    raw = np.fromfile(a.data, dtype=np.uint8, count=size)
    src = torch.from_numpy(raw).to(dev)
    del raw
    n = src.numel()
    if cpu_only:
        info = dict(device="cpu", sms=0, mem_gib=0)
    else:
        props = torch.cuda.get_device_properties(dev)
        info = dict(device=props.name, sms=props.multi_processor_count,
                    mem_gib=round(props.total_memory / 2**30, 1))
    info.update(torch=torch.__version__,
                cuda=torch.version.cuda, python=sys.version.split()[0],
                data=os.path.abspath(a.data), bytes=n, warmup=a.warmup, reps=a.reps)
    log(f"gpu_anchors: {n} bytes of bf16 on {info['device']}")
    results = []
    copy_gbps = None
    for name, spec in peer_list(a):
        log(f"-- {name}")
        row = dict(peer=name, ok=False)
        t0 = time.perf_counter()
        try:
            if cpu_only and name != "zipnn-cpu":
                raise RuntimeError("skipped: needs CUDA (--device cpu)")
            if name == "copy":
                dst = torch.empty_like(src)
                cw, ce, _ = timed(lambda: dst.copy_(src), a.warmup, max(a.reps, 10))
                s = med(ce)
                r = dict(comp_bytes=n, comp_s=s, decomp_s=s, exact=bool(torch.equal(dst, src)),
                         rw_gbps=2 * n / s / 1e9, timer="cuda events", comp_runs=ce)
                del dst
            else:
                fn, *args = spec
                r = fn(src, *args, a) if args else fn(src, a)
            nb = r.pop("bytes", n)
            row.update(r)
            row["bytes"] = nb
            row["ratio"] = r["comp_bytes"] / nb
            row["comp_gbps"] = gbps(nb, r.get("comp_s"))
            row["decomp_gbps"] = gbps(nb, r.get("decomp_s"))
            row["ok"] = bool(r.get("exact"))
            if name == "copy":
                copy_gbps = row["decomp_gbps"]
            if not row["ok"]:
                row["error"] = "round trip NOT byte-exact"
        except Exception as e:  # noqa: BLE001 - one peer must not stop the others
            row["error"] = f"{type(e).__name__}: {e}"
            if not (cpu_only and name != "zipnn-cpu"):
                row["traceback"] = traceback.format_exc(limit=6)
                log(row["traceback"])
        row["seconds"] = round(time.perf_counter() - t0, 2)
        if copy_gbps and row.get("decomp_gbps") and name != "zipnn-cpu":
            row["decomp_frac_of_copy"] = row["decomp_gbps"] / copy_gbps
            row["comp_frac_of_copy"] = (row["comp_gbps"] or 0) / copy_gbps
        results.append(row)
        log(f"   {summary_line(row)}")
        if not cpu_only:
            torch.cuda.empty_cache()
    out = dict(info=info, results=results)
    print_table(out)
    if a.out:
        d = os.path.dirname(os.path.abspath(a.out))
        os.makedirs(d, exist_ok=True)
        with open(a.out, "w") as f:
            json.dump(out, f, indent=1)
        log(f"wrote {a.out}")
    return out


def _f(x, fmt):
    if isinstance(x, (int, float)) and not isinstance(x, bool):
        return format(x, fmt)
    width = fmt.split(".")[0]
    return "-".rjust(int(width)) if width.isdigit() else "-"


def summary_line(r):
    if "error" in r and not r.get("comp_bytes"):
        return f"{r['peer']}: FAILED {r['error']}"
    return (f"{r['peer']}: ratio {_f(r.get('ratio'), '.4f')} comp {_f(r.get('comp_gbps'), '.1f')} GB/s "
            f"decomp {_f(r.get('decomp_gbps'), '.1f')} GB/s exact {r.get('exact')}"
            + (f" ERROR {r['error']}" if "error" in r else ""))


def print_table(out):
    i = out["info"]
    print(f"\n{i['device']} ({i['sms']} SMs), torch {i['torch']}, CUDA {i['cuda']}; "
          f"{i['bytes']} bytes of bf16, median of {i['reps']} runs after {i['warmup']} warm-up")
    print("GB/s = 1e9 bytes of uncompressed data per second; ratio = compressed/uncompressed "
          "(lower is better); frac = decompress GB/s / copy GB/s")
    hdr = f"{'peer':<20} {'ratio':>7} {'comp GB/s':>10} {'decomp GB/s':>12} {'frac':>6} {'exact':>6}  note"
    print(hdr)
    print("-" * len(hdr))
    for r in out["results"]:
        note = ""
        if r["peer"] == "copy" and r.get("rw_gbps"):
            note = f"read+write {r['rw_gbps']:.0f} GB/s"
        if r.get("comp_gbps_excl_d2h"):
            note = f"comp excl. D2H {r['comp_gbps_excl_d2h']:.1f} GB/s"
        if r["peer"] == "dfloat11" and r.get("ref_encoder_elems_per_s"):
            note = (f"comp = torch port; original encoder {r['ref_encoder_elems_per_s'] / 1e6:.2f} "
                    f"M elem/s ({2 * r['ref_encoder_elems_per_s'] / 1e9:.4f} GB/s)")
        if r["peer"] == "zipnn-cpu" and r.get("bytes"):
            note = f"CPU, first {r['bytes'] // MiB} MiB"
        if r.get("warning"):
            note = (note + " " if note else "") + r["warning"]
        if "error" in r:
            note = (note + " " if note else "") + "ERROR " + r["error"][:100]
        print(f"{r['peer']:<20} {_f(r.get('ratio'), '7.4f')} {_f(r.get('comp_gbps'), '10.1f')} "
              f"{_f(r.get('decomp_gbps'), '12.1f')} {_f(r.get('decomp_frac_of_copy'), '6.3f')} "
              f"{str(r.get('exact', '-')):>6}  {note}")
    sys.stdout.flush()


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    g = p.add_argument_group("benchmark")
    g.add_argument("--data", help="raw little-endian bf16 file to benchmark on")
    g.add_argument("--out", help="write the results as JSON here")
    g.add_argument("--peers", default="", help="comma-separated name prefixes to run "
                   "(copy always runs), e.g. nvcomp-b,cuzipnn")
    g.add_argument("--skip", default="", help="comma-separated name prefixes to skip")
    g.add_argument("--reps", type=int, default=5, help="timed runs (median reported)")
    g.add_argument("--warmup", type=int, default=1, help="untimed runs first")
    g.add_argument("--limit-mib", type=int, default=0, help="use only the first N MiB of --data")
    g.add_argument("--nvcomp-chunk-kib", type=int, default=64)
    g.add_argument("--df11-block-mib", type=int, default=256,
                   help="DFloat11 piece (its per-block codec) size")
    g.add_argument("--df11-ref-elems", type=int, default=1 << 20,
                   help="elements to encode with DFloat11's original Python encoder (0: skip)")
    g.add_argument("--zipnn-mib", type=int, default=256)
    g.add_argument("--zipnn-threads", type=int, default=0, help="0: min(cores, 16)")
    m = p.add_argument_group("data generation")
    m.add_argument("--make-data", metavar="FILE", help="write N MiB of trained-model bf16 weights")
    m.add_argument("--size-mib", type=int, default=1024)
    m.add_argument("--device", default="cuda", help="cuda, or cpu: --make-data on the CPU, "
                   "and with --data only the CPU peers run (a test without a GPU)")
    m.add_argument("--steps", type=int, default=150, help="steps before the first snapshot")
    m.add_argument("--snapshot-every", type=int, default=50)
    m.add_argument("--vocab", type=int, default=16384)
    m.add_argument("--d-model", type=int, default=768)
    m.add_argument("--layers", type=int, default=12)
    m.add_argument("--heads", type=int, default=12)
    m.add_argument("--ffn", type=int, default=2048)
    m.add_argument("--seq", type=int, default=512)
    m.add_argument("--batch", type=int, default=16)
    m.add_argument("--lr", type=float, default=1e-3)
    m.add_argument("--warmup-steps", dest="warmup_lr", type=int, default=20)
    m.add_argument("--seed", type=int, default=0)
    a = p.parse_args(argv)
    a.warmup_lr = max(1, a.warmup_lr)
    if not a.make_data and not a.data:
        p.error("give --make-data FILE or --data FILE")
    if a.d_model % a.heads:
        p.error("--d-model must be a multiple of --heads")
    return a


def self_test():
    """CPU-only checks: tiny --make-data, the DFloat11 encoder port against the
    original (if dfloat11 and dahuffman import), ZipNN CPU round trip (if zipnn
    imports). Exit status 0 when every check that could run passed."""
    import tempfile
    ok = True
    with tempfile.TemporaryDirectory() as d:
        f = os.path.join(d, "tiny.bf16")
        a = parse_args(["--make-data", f, "--size-mib", "1", "--device", "cpu", "--vocab", "256",
                        "--d-model", "64", "--layers", "2", "--heads", "4", "--ffn", "128",
                        "--seq", "32", "--batch", "2", "--steps", "4", "--snapshot-every", "2"])
        with contextlib.redirect_stdout(io.StringIO()):
            make_data(a)
        size_ok = os.path.getsize(f) == MiB
        log(f"self-test: make-data {'ok' if size_ok else 'WRONG SIZE'}")
        ok &= size_ok
        w = torch.from_numpy(np.fromfile(f, dtype=np.int16))
        try:
            utils, _ = load_df11()
        except Exception as e:  # noqa: BLE001
            log(f"self-test: dfloat11 not importable, skipped ({e})")
        else:
            for n, off in ((1000, 0), (12345, 3), (200001, 1), (w.numel() - 5, 5)):
                sl = w[off:off + n].clone()
                codec, _ = df11_codec(utils, sl)
                same, _ = df11_ref_check(utils, sl, codec)
                log(f"self-test: dfloat11 encoder port, {n} elements: {'same' if same else 'DIFFERENT'}")
                ok &= same
        try:
            import zipnn
        except Exception as e:  # noqa: BLE001
            log(f"self-test: zipnn not importable, skipped ({e})")
        else:
            raw = w.numpy().tobytes()
            z = zipnn.ZipNN(input_format="byte", bytearray_dtype="bfloat16", threads=2)
            c = z.compress(bytearray(raw))
            rt = bytes(zipnn.ZipNN(input_format="byte", bytearray_dtype="bfloat16",
                                   threads=2).decompress(c)) == raw
            log(f"self-test: zipnn round trip {'ok' if rt else 'DIFFERENT'} (ratio {len(c) / len(raw):.3f})")
            ok &= rt
    log("self-test: " + ("PASS" if ok else "FAIL"))
    return ok


def main(argv=None):
    if argv is None and sys.argv[1:] == ["--self-test"]:
        sys.exit(0 if self_test() else 1)
    a = parse_args(argv)
    if a.make_data:
        make_data(a)
    if a.data:
        run_bench(a)


if __name__ == "__main__":
    main()
