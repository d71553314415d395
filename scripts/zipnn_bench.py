#!/usr/bin/env python3
"""Measures ZipNN (pip install zipnn), the peer lmc is compared with.

For each FILE, in-process: compress, decompress, verify the round trip
byte for byte, and report ratio (original / compressed) and MB/s (MB = 1e6
bytes of ORIGINAL data per second, both directions), best of --repeat runs
timed with time.perf_counter, for single-thread and multi-thread settings.

Methods (settings taken from ZipNN 0.5.4's source and README):
  zipnn-file  The whole file as one byte buffer: ZipNN(input_format='byte',
              bytearray_dtype=D, threads=T), method AUTO (its default),
              256 KiB chunks. D is 'bfloat16' when most of a safetensors
              file's bytes are BF16, 'float16' for F16, else 'float32'
              (so 'float32' for .pt checkpoints: fp32 weights + AdamW
              moments). This is what its zipnn_compress_file.py does, minus
              streaming (same ratio; streaming only adds a Python loop).
  zipnn-st    safetensors only, the mode its README recommends for them
              (zipnn_compress_safetensors.py / zipnn_safetensors() plugin):
              each float tensor on its own, ZipNN(input_format='torch',
              method='HUFFMAN', threads=T); other tensors and the header are
              stored raw. Compressed size = 8 + header + sum of per-tensor
              outputs (the plugin's own header metadata, a few bytes per
              tensor, is not counted).

Note: ZipNN 0.5.4 reorders bits IN PLACE in the buffer it is given (even an
immutable bytes object), so each run compresses a fresh copy made outside
the timed region, and verification compares against a pristine copy.

Output: a table on stdout, or with --json a JSON list of rows
  {"file", "bytes", "method", "threads", "compressed_bytes", "ratio",
   "comp_mbps", "decomp_mbps", "settings"}.

Example:
  scripts/zipnn_bench.py bench-data/minilm-bf16.safetensors bench-data/ckpt-step200.pt
"""

import argparse
import json
import os
import struct
import sys
import time
import warnings

warnings.filterwarnings("ignore")  # torch.jit deprecation noise from zipnn

import numpy as np  # noqa: E402
import torch  # noqa: E402

try:
    import zipnn  # noqa: E402
except ImportError:
    sys.exit("zipnn_bench: zipnn is not installed (python3 -m pip install zipnn)")

try:
    from importlib.metadata import version as _pkg_version
    ZIPNN_VERSION = _pkg_version("zipnn")
except Exception:  # noqa: BLE001 - metadata is optional
    ZIPNN_VERSION = "unknown"

ST_DTYPES = {  # safetensors dtype -> (torch dtype, zipnn byte dtype)
    "BF16": (torch.bfloat16, "bfloat16"),
    "F16": (torch.float16, "float16"),
    "F32": (torch.float32, "float32"),
}
ST_DTYPE_SIZE = {"BF16": 2, "F16": 2, "F32": 4, "F64": 8, "I64": 8, "I32": 4,
                 "I16": 2, "I8": 1, "U8": 1, "BOOL": 1, "F8_E4M3": 1,
                 "F8_E5M2": 1}


def parse_safetensors(data):
    """Returns (data_start, [(name, dtype, begin, end)]) with absolute
    offsets; raises ValueError if data is not a safetensors file."""
    if len(data) < 8:
        raise ValueError("too short")
    (n,) = struct.unpack_from("<Q", data, 0)
    if n > len(data) - 8:
        raise ValueError("bad header length")
    header = json.loads(bytes(data[8:8 + n]))
    start = 8 + n
    tensors = [(k, v["dtype"], start + v["data_offsets"][0],
                start + v["data_offsets"][1])
               for k, v in header.items() if k != "__metadata__"]
    return start, sorted(tensors, key=lambda t: t[2])


def file_dtype(path, data):
    """zipnn bytearray_dtype for the whole-file mode."""
    if path.endswith(".safetensors"):
        try:
            _, tensors = parse_safetensors(data)
        except (ValueError, KeyError):
            return "float32"
        by_dtype = {}
        for _, dt, b, e in tensors:
            by_dtype[dt] = by_dtype.get(dt, 0) + (e - b)
        top = max(by_dtype, key=by_dtype.get) if by_dtype else "F32"
        return ST_DTYPES.get(top, (None, "float32"))[1]
    return "float32"  # .pt / .bin checkpoints: fp32 weights and moments


def best_of(repeat, prepare, run):
    """Best wall time of `run(prepare())` over `repeat` runs; prepare() is
    untimed. Returns (seconds, last result)."""
    best, out = float("inf"), None
    for _ in range(repeat):
        arg = prepare()
        t = time.perf_counter()
        out = run(arg)
        best = min(best, time.perf_counter() - t)
    return best, out


def bench_file_mode(data, dtype, threads, repeat):
    def compress(buf):
        return zipnn.ZipNN(bytearray_dtype=dtype, threads=threads).compress(buf)

    def decompress(comp):
        return zipnn.ZipNN(bytearray_dtype=dtype, threads=threads).decompress(comp)

    tc, comp = best_of(repeat, lambda: bytearray(data), compress)
    comp = bytes(comp)
    td, out = best_of(repeat, lambda: comp, decompress)
    if bytes(out) != data:
        raise RuntimeError("zipnn-file round trip mismatch")
    return len(comp), tc, td, {"input_format": "byte", "bytearray_dtype": dtype,
                              "method": "AUTO", "compression_chunk": 256 * 1024}


def bench_st_mode(data, threads, repeat):
    start, tensors = parse_safetensors(data)
    floats = [(k, ST_DTYPES[dt][0], b, e) for k, dt, b, e in tensors
              if dt in ST_DTYPES and e > b]
    raw_bytes = len(data) - sum(e - b for _, _, b, e in floats)

    def prepare():
        return [torch.frombuffer(bytearray(data[b:e]), dtype=dt)
                for _, dt, b, e in floats]

    def compress(ts):
        return [bytes(zipnn.ZipNN(input_format="torch", method="HUFFMAN",
                                  threads=threads).compress(t)) for t in ts]

    def decompress(bufs):
        return [zipnn.ZipNN(input_format="torch", method="HUFFMAN",
                            threads=threads).decompress(c) for c in bufs]

    tc, comps = best_of(repeat, prepare, compress)
    td, outs = best_of(repeat, lambda: comps, decompress)
    for (name, _, b, e), t in zip(floats, outs):
        got = t.contiguous().view(torch.uint8).numpy().tobytes()
        if got != data[b:e]:
            raise RuntimeError(f"zipnn-st round trip mismatch in tensor {name}")
    # A tensor that does not shrink is stored raw by the zipnn script.
    stored = raw_bytes + sum(min(len(c), e - b)
                             for c, (_, _, b, e) in zip(comps, floats))
    return stored, tc, td, {"input_format": "torch", "method": "HUFFMAN",
                            "per_tensor": True, "tensors": len(floats)}


def main(argv=None):
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("files", nargs="+", metavar="FILE")
    ap.add_argument("--json", action="store_true",
                    help="print a JSON list of rows instead of a table")
    ap.add_argument("--threads", default=None,
                    help="comma-separated thread counts (default 1,<nproc>)")
    ap.add_argument("--repeat", type=int, default=3,
                    help="timing runs per measurement, best kept (default 3)")
    ap.add_argument("--methods", default="file,st",
                    help="comma-separated: file, st (default file,st; st "
                         "applies to .safetensors only)")
    args = ap.parse_args(argv)

    ncpu = os.cpu_count() or 1
    if args.threads:
        thread_list = [int(x) for x in args.threads.split(",")]
    else:
        thread_list = sorted({1, ncpu})
    methods = set(args.methods.split(","))
    torch.set_num_threads(1)

    rows = []
    for path in args.files:
        with open(path, "rb") as f:
            data = f.read()
        todo = []
        if "file" in methods:
            dt = file_dtype(path, data)
            todo += [("zipnn-file", t,
                      lambda t=t, d=dt: bench_file_mode(data, d, t, args.repeat))
                     for t in thread_list]
        if "st" in methods and path.endswith(".safetensors"):
            todo += [("zipnn-st", t,
                      lambda t=t: bench_st_mode(data, t, args.repeat))
                     for t in thread_list]
        for name, threads, fn in todo:
            size, tc, td, settings = fn()
            settings["zipnn_version"] = ZIPNN_VERSION
            row = {"file": path, "bytes": len(data), "method": name,
                   "threads": threads, "compressed_bytes": size,
                   "ratio": round(len(data) / size, 4),
                   "comp_mbps": round(len(data) / tc / 1e6, 1),
                   "decomp_mbps": round(len(data) / td / 1e6, 1),
                   "settings": settings}
            rows.append(row)
            if not args.json:
                print(f"{os.path.basename(path):<32} {len(data)/1e6:9.1f} MB "
                      f"{name:<10} T={threads:<2} ratio {row['ratio']:6.3f}  "
                      f"comp {row['comp_mbps']:7.1f} MB/s  "
                      f"decomp {row['decomp_mbps']:7.1f} MB/s  (round trip ok)",
                      flush=True)
    if args.json:
        json.dump(rows, sys.stdout, indent=1)
        print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
