#!/usr/bin/env python3
"""Writes the small checkpoint fixtures of the layout parser tests.

Usage: python3 scripts/make_fixtures.py [out_dir]   (default: tests/data)

Each file is written by the real library (torch.save, safetensors, numpy),
except tiny.gguf, which is assembled byte by byte. The ground truth of every
tensor (its byte extent in the file and its dtype) is computed here, from the
libraries' own readers (zipfile, pickle, the safetensors header), and written
to layout_manifest.tsv, one tensor per line:

    file  format  name  dtype  offset  length

The C++ test (tests/codec/layout_test.cc) checks that ParseLayout finds
exactly these tensor regions. Outputs are deterministic for a given library
version; the files are committed, so rerun only to add cases.
"""

import io
import json
import os
import pickle
import struct
import sys
import zipfile

import numpy as np
import safetensors.torch
import torch

STORAGE_DTYPES = {
    "FloatStorage": "f32", "BFloat16Storage": "bf16", "HalfStorage": "f16",
    "DoubleStorage": "f64", "LongStorage": "i64", "IntStorage": "i32",
    "ShortStorage": "i16", "CharStorage": "i8", "ByteStorage": "u8",
    "BoolStorage": "bool",
}
NPY_DTYPES = {"<f4": "f32", "<f2": "f16", "<f8": "f64", "<i8": "i64", "<i4": "i32",
              "<i2": "i16", "|i1": "i8", "|u1": "u8", "|b1": "bool"}
ST_DTYPES = {"F32": "f32", "BF16": "bf16", "F16": "f16", "F64": "f64", "I64": "i64",
             "I32": "i32", "I16": "i16", "I8": "i8", "U8": "u8", "BOOL": "bool"}


def member_data_offset(raw, info):
    """Offset of a zip member's data: after its local header, name and extra."""
    off = info.header_offset
    name_len, extra_len = struct.unpack_from("<HH", raw, off + 26)
    return off + 30 + name_len + extra_len


def torch_zip_truth(path):
    raw = open(path, "rb").read()
    zf = zipfile.ZipFile(path)
    pkl_name = next(n for n in zf.namelist() if n.endswith("data.pkl"))
    keys = {}

    class Anything(dict):
        def __init__(self, *args, **kwargs):
            pass

        def __setstate__(self, state):
            pass

    class Recorder(pickle.Unpickler):
        def find_class(self, module, name):
            if module == "torch" and name.endswith("Storage"):
                return name
            return Anything

        def persistent_load(self, pid):
            if pid[0] == "storage":
                keys[pid[2]] = STORAGE_DTYPES[pid[1]]
            return None

    Recorder(io.BytesIO(zf.read(pkl_name))).load()
    rows = []
    for info in zf.infolist():
        parts = info.filename.split("/")
        if len(parts) >= 2 and parts[-2] == "data" and parts[-1] in keys:
            assert info.compress_type == zipfile.ZIP_STORED
            key = parts[-1]
            rows.append(("data/" + key, keys[key], member_data_offset(raw, info), info.file_size))
    return rows


def npy_header_len(buf):
    major = buf[6]
    if major == 1:
        return 10 + struct.unpack_from("<H", buf, 8)[0]
    return 12 + struct.unpack_from("<I", buf, 8)[0]


def npz_truth(path):
    raw = open(path, "rb").read()
    zf = zipfile.ZipFile(path)
    rows = []
    for info in zf.infolist():
        if info.compress_type != zipfile.ZIP_STORED or not info.filename.endswith(".npy"):
            continue
        data = zf.read(info.filename)
        hl = npy_header_len(data)
        arr = np.load(io.BytesIO(data))
        rows.append((info.filename[:-4], NPY_DTYPES[arr.dtype.str],
                     member_data_offset(raw, info) + hl, arr.nbytes))
    return rows


def safetensors_truth(path):
    raw = open(path, "rb").read()
    n = struct.unpack_from("<Q", raw, 0)[0]
    header = json.loads(raw[8:8 + n])
    rows = []
    for name, info in header.items():
        if name == "__metadata__":
            continue
        b, e = info["data_offsets"]
        rows.append((name, ST_DTYPES[info["dtype"]], 8 + n + b, e - b))
    return sorted(rows, key=lambda r: r[2])


def gguf_string(s):
    b = s.encode()
    return struct.pack("<Q", len(b)) + b


def write_gguf(path, rng):
    """A GGUF v3 file: a few metadata kinds, then F32, F16, BF16 and Q8_0 tensors."""
    align = 64
    kv = [
        gguf_string("general.architecture") + struct.pack("<I", 8) + gguf_string("llama"),
        gguf_string("general.alignment") + struct.pack("<II", 4, align),
        gguf_string("llama.rope.freq_base") + struct.pack("<If", 6, 10000.0),
        gguf_string("tokenizer.ggml.tokens") + struct.pack("<IIQ", 9, 8, 3)
        + gguf_string("<s>") + gguf_string("</s>") + gguf_string("hello"),
        gguf_string("tokenizer.ggml.scores") + struct.pack("<IIQ", 9, 6, 3)
        + struct.pack("<fff", 0.0, -1.0, -2.5),
        gguf_string("general.file_type") + struct.pack("<IQ", 10, 7),
    ]
    tensors = [  # name, dims, ggml type, payload
        ("token_embd.weight", (64, 16), 0, rng.standard_normal(64 * 16).astype("<f4").tobytes()),
        ("blk.0.attn_q.weight", (64, 8), 1, rng.standard_normal(64 * 8).astype("<f2").tobytes()),
        ("blk.0.ffn_up.weight", (32, 8), 30,
         (rng.standard_normal(32 * 8).astype("<f4").view("<u4") >> 16).astype("<u2").tobytes()),
        ("blk.0.ffn_down.weight", (64, 4), 8, rng.integers(0, 256, 64 * 4 // 32 * 34,
                                                           dtype=np.uint8).tobytes()),
    ]
    infos, data, rows = b"", b"", []
    for name, dims, gtype, payload in tensors:
        data += b"\0" * (-len(data) % align)
        infos += gguf_string(name) + struct.pack("<I", len(dims))
        infos += b"".join(struct.pack("<Q", d) for d in dims)
        infos += struct.pack("<IQ", gtype, len(data))
        rows.append((name, {0: "f32", 1: "f16", 30: "bf16", 8: "bytes"}[gtype], len(data),
                     len(payload)))
        data += payload
    head = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(kv)) + b"".join(kv) + infos
    head += b"\0" * (-len(head) % align)
    with open(path, "wb") as f:
        f.write(head + data)
    return [(n, d, len(head) + o, ln) for n, d, o, ln in rows]


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        os.path.dirname(__file__), "..", "tests", "data")
    os.makedirs(out, exist_ok=True)
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    manifest = []

    def add(fname, fmt, rows):
        for name, dtype, off, length in rows:
            manifest.append(f"{fname}\t{fmt}\t{name}\t{dtype}\t{off}\t{length}")

    # torch.save of a model (bf16 and fp32 parameters) with its AdamW state.
    model = torch.nn.Sequential(torch.nn.Linear(32, 48), torch.nn.LayerNorm(48),
                                torch.nn.Linear(48, 16))
    model[0].to(torch.bfloat16)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x = torch.randn(4, 32)
    for _ in range(2):
        loss = model[2](model[1](model[0](x.bfloat16()).float())).square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
    path = os.path.join(out, "torch_adamw.pt")
    torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(), "step": 2}, path)
    add("torch_adamw.pt", "torch-zip", torch_zip_truth(path))

    # safetensors of the same model (plus an integer buffer).
    tensors = {k: v.contiguous() for k, v in model.state_dict().items()}
    tensors["position_ids"] = torch.arange(64, dtype=torch.int64)
    path = os.path.join(out, "model.safetensors")
    safetensors.torch.save_file(tensors, path, metadata={"format": "pt"})
    add("model.safetensors", "safetensors", safetensors_truth(path))

    # numpy: one .npy, one stored .npz, one compressed .npz (deflate: no tensors).
    arr = rng.standard_normal((40, 50)).astype(np.float32)
    path = os.path.join(out, "array.npy")
    np.save(path, arr)
    hl = npy_header_len(open(path, "rb").read(16))
    add("array.npy", "npy", [("", "f32", hl, arr.nbytes)])

    path = os.path.join(out, "arrays.npz")
    np.savez(path, weights=rng.standard_normal((30, 20)).astype(np.float16),
             ids=np.arange(100, dtype=np.int64), mask=rng.integers(0, 2, 64).astype(bool))
    add("arrays.npz", "zip", npz_truth(path))

    path = os.path.join(out, "arrays_deflate.npz")
    np.savez_compressed(path, weights=rng.standard_normal((30, 20)).astype(np.float32))
    add("arrays_deflate.npz", "zip", [])

    add("tiny.gguf", "gguf", write_gguf(os.path.join(out, "tiny.gguf"), rng))

    with open(os.path.join(out, "layout_manifest.tsv"), "w") as f:
        f.write("# file\tformat\tname\tdtype\toffset\tlength (scripts/make_fixtures.py)\n")
        f.write("\n".join(manifest) + "\n")
    for fname in sorted(os.listdir(out)):
        print(f"{os.path.getsize(os.path.join(out, fname)):8d}  {fname}")


if __name__ == "__main__":
    main()
