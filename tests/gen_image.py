#!/usr/bin/python3
"""Fixture generator for kiln's text-to-image pipeline (tests/data/image/).

Usage (from the repository root):

    /usr/bin/python3 tests/gen_image.py            everything below
    /usr/bin/python3 tests/gen_image.py --ckpt     only the checkpoint-reader fixtures

Needs Debian's python3-torch, python3-numpy and python3-sentencepiece.  Output
is deterministic (fixed seeds, fixed ZIP dates); every file's sha256 is printed.

ckpt/   checkpoint-reader fixtures: a good PyTorch ZIP state dict (F16, F32
        views into one storage, BF16, I64, a 0-d tensor, an nn.Parameter), the
        same under {"state_dict": ...}, a safetensors file written here from
        the format description, their expected contents (ckpt.json), and
        malicious checkpoints the reader must refuse.  The two that carry
        code (an os.system reducer, a builtins.eval reducer) are proven live
        here: torch.load runs them in a scratch directory and their marker
        file appears; kiln must refuse them without creating it.

The pipeline fixtures (tokenizer, T5 encoder, DiT, VAE, reference outputs)
are described in tests/data/image/README.md.
"""

import argparse
import collections
import hashlib
import io
import json
import os
import struct
import subprocess
import sys
import tempfile
import zipfile

import numpy as np
import torch

ROOT = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(ROOT, "data", "image")
ZIP_DATE = (1980, 1, 1, 0, 0, 0)


def sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def report(path):
    print(f"  {os.path.relpath(path, ROOT)}  {os.path.getsize(path)} bytes  {sha256(path)}")


# ---------------------------------------------------------------- writers

def write_zip(path, records):
    """A torch.save-style archive: records is a list of (name, bytes,
    compressed).  Stored entries get an 'FB' padding extra field so their data
    starts at a multiple of 64 bytes, as PyTorch's writer does."""
    with open(path, "wb") as fp:
        with zipfile.ZipFile(fp, "w") as z:
            for name, data, compressed in records:
                zi = zipfile.ZipInfo(name, date_time=ZIP_DATE)
                zi.compress_type = zipfile.ZIP_DEFLATED if compressed else zipfile.ZIP_STORED
                start = fp.tell() + 30 + len(name.encode())
                pad = (-(start + 4)) % 64
                zi.extra = struct.pack("<HH", 0x4246, pad) + b"\0" * pad
                z.writestr(zi, data)


def torch_records(path):
    """(name, bytes, compressed) of every entry of a torch.save file."""
    with zipfile.ZipFile(path) as z:
        return [(i.filename, z.read(i.filename), i.compress_type != zipfile.ZIP_STORED) for i in z.infolist()]


class Pickle:
    """Emits protocol-2 pickle opcodes, for checkpoints torch.save cannot
    write (the malicious ones)."""

    def __init__(self):
        self.b = bytearray(b"\x80\x02")

    def op(self, code, data=b""):
        self.b += code + data
        return self

    def global_(self, module, name):
        return self.op(b"c", f"{module}\n{name}\n".encode())

    def str_(self, s):
        s = s.encode()
        return self.op(b"X", struct.pack("<I", len(s)) + s)

    def int_(self, v):
        if 0 <= v < 256:
            return self.op(b"K", bytes([v]))
        if -(2 ** 31) <= v < 2 ** 31:
            return self.op(b"J", struct.pack("<i", v))
        return self.op(b"\x8a\x08", struct.pack("<q", v))

    def tuple_(self, items):
        self.op(b"(")
        for it in items:
            it(self)
        return self.op(b"t")

    def tensor(self, storage_type, key, numel, offset, size, stride):
        self.global_("torch._utils", "_rebuild_tensor_v2")
        self.op(b"(")  # args
        self.tuple_([lambda p: p.str_("storage"), lambda p: p.global_("torch", storage_type),
                     lambda p: p.str_(key), lambda p: p.str_("cpu"), lambda p: p.int_(numel)])
        self.op(b"Q")  # BINPERSID
        self.int_(offset)
        self.tuple_([(lambda v: lambda p: p.int_(v))(v) for v in size])
        self.tuple_([(lambda v: lambda p: p.int_(v))(v) for v in stride])
        self.op(b"\x89")  # False
        self.global_("collections", "OrderedDict").op(b")").op(b"R")
        self.op(b"t").op(b"R")
        return self

    def state_dict(self, entries):
        """entries: list of (name, emit) where emit(p) pushes the value."""
        self.global_("collections", "OrderedDict").op(b")").op(b"R").op(b"(")
        for name, emit in entries:
            self.str_(name)
            emit(self)
        return self.op(b"u").op(b".")


class EvilSystem:
    def __reduce__(self):
        return (os.system, ("touch kiln-pwned-system",))


class EvilEval:
    def __reduce__(self):
        return (eval, ("__import__('os').system('touch kiln-pwned-eval')",))


def write_safetensors(path, tensors, metadata=None):
    """tensors: list of (name, numpy array, dtype name); data in list order."""
    header, blobs, off = {}, [], 0
    # widest elements first, as the safetensors library orders them, so every
    # tensor stays aligned to its element size
    tensors = sorted(tensors, key=lambda t: -{"F32": 4, "F16": 2, "BF16": 2, "I64": 8}[t[2]])
    if metadata:
        header["__metadata__"] = metadata
    for name, arr, dt in tensors:
        if dt == "BF16":
            raw = (torch.from_numpy(np.ascontiguousarray(arr, dtype=np.float32)).to(torch.bfloat16)
                   .view(torch.int16).numpy().tobytes())
        else:
            raw = np.ascontiguousarray(arr, dtype={"F32": "<f4", "F16": "<f2", "I64": "<i8"}[dt]).tobytes()
        header[name] = {"dtype": dt, "shape": list(arr.shape), "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((-(8 + len(h))) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


# ---------------------------------------------------------------- ckpt fixtures

def tensor_json(name, t):
    return {"name": name, "dtype": {torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16",
                                    torch.int64: "I64"}[t.dtype],
            "shape": list(t.shape), "values": t.detach().double().flatten().tolist()}


def gen_ckpt():
    d = os.path.join(OUT, "ckpt")
    os.makedirs(d, exist_ok=True)
    g = torch.Generator().manual_seed(24)
    base = torch.randn(6, 5, generator=g)
    sd = collections.OrderedDict()
    sd["blocks.0.attn.to_q.weight"] = torch.randn(3, 4, generator=g).half()
    sd["blocks.0.attn.to_q.bias"] = base[1]            # a view: storage offset 5 of 30 floats
    sd["blocks.0.norm.weight"] = base[2:4]             # another view of the same storage
    sd["emb.bf16"] = torch.randn(2, 3, generator=g).bfloat16()
    sd["step"] = torch.tensor(7, dtype=torch.int64)    # 0-d
    sd["scale"] = torch.tensor(0.5)
    sd["param"] = torch.nn.Parameter(torch.randn(2, 2, generator=g))
    good = os.path.join(d, "good.pt")
    torch.save(sd, good)
    wrapped = os.path.join(d, "trainckpt.pt")
    torch.save({"state_dict": sd, "epoch": 3, "lr": 1e-4}, wrapped)
    st = os.path.join(d, "good.safetensors")
    write_safetensors(st, [("shared.weight", np.asarray(torch.randn(4, 3, generator=g)), "F32"),
                           ("h.f16", np.asarray(torch.randn(5, generator=g)), "F16"),
                           ("h.bf16", np.asarray(torch.randn(2, 2, generator=g)), "BF16"),
                           ("ids", np.arange(3, dtype=np.int64), "I64")],
                      metadata={"format": "pt", "note": "kiln fixture"})
    expect = {"pt": [tensor_json(k, v) for k, v in sd.items()]}
    loaded = {}
    hdr = json.loads(open(st, "rb").read()[8:8 + struct.unpack("<Q", open(st, "rb").read(8))[0]])
    raw = open(st, "rb").read()
    hl = struct.unpack("<Q", raw[:8])[0]
    for name, info in hdr.items():
        if name == "__metadata__":
            continue
        b, e = info["data_offsets"]
        buf = raw[8 + hl + b:8 + hl + e]
        if info["dtype"] == "BF16":
            v = torch.frombuffer(bytearray(buf), dtype=torch.bfloat16).double()
        else:
            v = torch.from_numpy(np.frombuffer(buf, dtype={"F32": "<f4", "F16": "<f2", "I64": "<i8"}[info["dtype"]])
                                 .astype(np.float64))
        loaded[name] = {"name": name, "dtype": info["dtype"], "shape": info["shape"], "values": v.tolist()}
    expect["safetensors"] = [loaded[k] for k in ["ids", "shared.weight", "h.f16", "h.bf16"]]
    expect["safetensors_metadata"] = {"format": "pt", "note": "kiln fixture"}

    # ---- malicious checkpoints: every one must be refused, nothing executed
    evil = {}
    small = collections.OrderedDict(w=torch.ones(2, 2))
    p = os.path.join(d, "evil_system.pt")
    torch.save(collections.OrderedDict(w=torch.ones(2, 2), x=EvilSystem()), p)
    evil["evil_system.pt"] = "posix.system"
    p = os.path.join(d, "evil_eval.pt")
    torch.save(collections.OrderedDict(w=torch.ones(2, 2), x=EvilEval()), p)
    evil["evil_eval.pt"] = "eval' is not allowed"
    # prove both are live exploits for a plain unpickler
    for name, marker in [("evil_system.pt", "kiln-pwned-system"), ("evil_eval.pt", "kiln-pwned-eval")]:
        with tempfile.TemporaryDirectory() as tmp:
            subprocess.run([sys.executable, "-c", f"import torch; torch.load({os.path.join(d, name)!r})"],
                           cwd=tmp, check=True, capture_output=True)
            assert os.path.exists(os.path.join(tmp, marker)), f"{name} did not run its payload under torch.load"

    # crafted pickles in an archive laid out like torch.save's
    recs = torch_records(os.path.join(d, "good.pt"))
    prefix = recs[0][0].split("/")[0] + "/"
    data0 = np.ones(4, dtype="<f4").tobytes()

    def crafted(name, pkl, entries=None, why=""):
        records = [(prefix + "data.pkl", bytes(pkl.b), False)]
        for key, raw, comp in (entries if entries is not None else [("0", data0, False)]):
            records.append((prefix + "data/" + key, raw, comp))
        records.append((prefix + "version", b"3\n", False))
        write_zip(os.path.join(d, name), records)
        evil[name] = why

    ok = lambda p: p.tensor("FloatStorage", "0", 4, 0, (2, 2), (2, 1))
    crafted("evil_huge.pt", Pickle().state_dict([("w", lambda p: p.tensor("FloatStorage", "0", 2 ** 40, 0, (2, 2),
                                                                            (2, 1)))]), why="declares")
    crafted("evil_offset.pt", Pickle().state_dict([("w", lambda p: p.tensor("FloatStorage", "0", 4, 3, (2, 2),
                                                                              (2, 1)))]), why="past the storage")
    crafted("evil_size.pt", Pickle().state_dict([("w", lambda p: p.tensor("FloatStorage", "0", 4, 0,
                                                                            (2 ** 31, 2 ** 31), (2 ** 31, 1)))]),
            why="bad size")
    crafted("evil_stack_global.pt", Pickle().op(b"\x8c\x02os").op(b"\x8c\x06system").op(b"\x93")
            .op(b"\x8c\x04true").op(b"\x85").op(b"R").op(b"."), why="os.system")
    crafted("evil_reduce_str.pt", Pickle().str_("x").op(b")").op(b"R").op(b"."), why="REDUCE of a str")
    crafted("evil_newobj.pt", Pickle().global_("collections", "OrderedDict").op(b")").op(b"\x81").op(b"."),
            why="NEWOBJ")
    crafted("evil_inst.pt", Pickle().op(b"(").op(b"i", b"os\nsystem\n").op(b"."), why="INST")
    crafted("evil_build.pt", Pickle().state_dict([("w", lambda p: (ok(p), p.op(b"}").op(b"b")))]),
            why="BUILD on a tensor")
    crafted("evil_storage_call.pt", Pickle().global_("torch", "FloatStorage").op(b")").op(b"R").op(b"."),
            why="storage type is not callable")
    crafted("evil_missing.pt", Pickle().state_dict([("w", ok)]), entries=[], why="missing")
    crafted("evil_compressed.pt", Pickle().state_dict([("w", ok)]), entries=[("0", data0, True)],
            why="compressed")
    crafted("evil_strided.pt", Pickle().state_dict([("w", lambda p: p.tensor("FloatStorage", "0", 4, 0, (2, 2),
                                                                               (1, 2)))]), why="not contiguous")
    crafted("evil_hooks.pt", Pickle().state_dict([("w", lambda p: (
        p.global_("torch._utils", "_rebuild_tensor_v2"), p.op(b"("),
        p.tuple_([lambda q: q.str_("storage"), lambda q: q.global_("torch", "FloatStorage"), lambda q: q.str_("0"),
                  lambda q: q.str_("cpu"), lambda q: q.int_(4)]), p.op(b"Q"), p.int_(0),
        p.tuple_([lambda q: q.int_(4)]), p.tuple_([lambda q: q.int_(1)]), p.op(b"\x89"),
        p.op(b"}"), p.str_("hook"), p.global_("builtins", "print"), p.op(b"s"),
        p.op(b"t"), p.op(b"R")))]), why="builtins.print")
    crafted("evil_memo.pt", Pickle().op(b"j", struct.pack("<I", 99999)).op(b"."), why="memo")
    with open(os.path.join(d, "ckpt.json"), "w") as f:
        json.dump({"expect": expect, "evil": evil}, f, indent=1)
        f.write("\n")
    for n in sorted(os.listdir(d)):
        report(os.path.join(d, n))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ckpt", action="store_true")
    a = ap.parse_args()
    torch.manual_seed(0)
    gen_ckpt()
    if a.ckpt:
        return


if __name__ == "__main__":
    main()
