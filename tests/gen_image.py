#!/usr/bin/python3
"""Fixture generator for kiln's text-to-image pipeline (tests/data/image/).

Usage (from the repository root):

    /usr/bin/python3 tests/gen_image.py            everything below
    /usr/bin/python3 tests/gen_image.py --ckpt     only the checkpoint-reader fixtures
    /usr/bin/python3 tests/gen_image.py --demo MIN train models/shapes-256 for about MIN minutes
    /usr/bin/python3 tests/gen_image.py --bench DIR  random F16 weights with Flan-T5-Base, PixArt-256 and SD
                                                    VAE shapes (about 1.6 GB) for speed measurements

Needs Debian's python3-torch, python3-numpy and python3-sentencepiece.  Output
is deterministic (fixed seeds, fixed ZIP dates); every file's sha256 is printed.
Debian's torch does its matrix products in the system BLAS: with the reference
libblas3 alone a --demo step is about seven times slower than with
libopenblas0-pthread installed.

models/shapes-256 as bundled was trained in three runs of one core each (the
recipe is what repeats, not the weights: a run stops on the clock):

    1. PACK1, the pack of commit 788485c (about two hours of one core: the
       captions' colours in their roles, the shapes still blobs);
    2. --demo 112 --out DIR --state FILE --init-from-pack PACK1 --mid-noise 0.5
       stopped after 36 minutes at step 6665 (its state is what 3 resumes);
    3. --demo 73 --out DIR --state FILE --resume --mid-noise 0.6 --mid-range 600:1000
       to step 32690 (73 minutes, the last eleven at 0.3 of the learning rate).

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
import math
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


# ---------------------------------------------------------------- the seeded Gaussian (src/image/rng.h)

M64 = (1 << 64) - 1
LN2 = 0.6931471805599453


def rng_log(x):
    """ln x for 0 < x < 1 as kiln computes it: frexp, then 2 atanh(t) by a
    fixed series (the same IEEE double operations in the same order)."""
    m, e = __import__("math").frexp(x)      # x = m 2^e, m in [0.5, 1)
    if m < 0.7071067811865476:
        m *= 2.0
        e -= 1
    t = (m - 1.0) / (m + 1.0)
    t2 = t * t
    p = 1.0 / 23.0
    for k in range(21, 0, -2):
        p = p * t2 + 1.0 / k
    return 2.0 * t * p + e * LN2


class Rng:
    def __init__(self, seed):
        self.s = seed & M64

    def u64(self):
        self.s = (self.s + 0x9E3779B97F4A7C15) & M64
        z = self.s
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
        return z ^ (z >> 31)

    def uniform(self):  # in (-1, 1)
        return (((self.u64() >> 11) + 0.5) * (1.0 / 9007199254740992.0)) * 2.0 - 1.0

    def gauss(self, n):
        out = []
        while len(out) < n:
            u, v = self.uniform(), self.uniform()
            s = u * u + v * v
            if s >= 1.0 or s == 0.0:
                continue
            f = __import__("math").sqrt(-2.0 * rng_log(s) / s)
            out += [u * f, v * f]
        return np.array(out[:n], dtype=np.float32)


# ---------------------------------------------------------------- tokenizer

COLORS = "red green blue yellow white black purple orange".split()
SHAPES = "circle square triangle".split()


def caption(c, s, b):
    return f"a {c} {s} on a {b} background"


PROSE = """the quick brown fox jumps over the lazy dog while a small bird sings in the tree
a picture of a house by the river at sunset with mountains far away
painting of a cat sitting on a chair next to an open window in the morning light
photo of a bowl of fruit apples bananas and grapes on a wooden table
a large ship sailing across the ocean under a cloudy sky
simple flat shapes drawn with bright colors for children to learn names
café naïve façade über straße 中文 字 日本語 numbers 0123456789""".split("\n")


def varint(n):
    out = b""
    while True:
        b, n = n & 0x7F, n >> 7
        out += bytes([b | (0x80 if n else 0)])
        if not n:
            return out


def gen_tokenizer(path, whole_words=False):
    """A unigram SentencePiece model trained on the captions and some prose.
    whole_words (the demo): the caption words are added as pieces of their
    own, since a corpus this small leaves them split into letters ("▁", "re",
    "d"), which a tiny encoder trained from scratch must first put together."""
    import sentencepiece as spm
    lines = [caption(c, s, b) for c in COLORS for s in SHAPES for b in COLORS if b != c] + PROSE * 8
    m = io.BytesIO()
    spm.SentencePieceTrainer.train(sentence_iterator=iter(lines), model_writer=m, vocab_size=160,
                                   model_type="unigram", pad_id=0, eos_id=1, unk_id=2, bos_id=-1,
                                   character_coverage=1.0, hard_vocab_limit=False, num_threads=1,
                                   minloglevel=2)
    raw = m.getvalue()
    if whole_words:
        # ModelProto: field 1 (pieces, repeated) comes first; a piece is
        # {1: text, 2: score (float), 3: type (1 = normal)}.  New pieces go
        # after the last one, so every trained id keeps its number.
        trained = spm.SentencePieceProcessor(model_proto=raw)
        have = set(trained.id_to_piece(list(range(trained.get_piece_size()))))
        extra = b""
        for w in COLORS + SHAPES + ["on", "background"]:
            text = ("\u2581" + w).encode()
            if text.decode() in have:
                continue
            sub = b"\x0a" + varint(len(text)) + text + b"\x15" + struct.pack("<f", -2.0) + b"\x18\x01"
            extra += b"\x0a" + varint(len(sub)) + sub
        i = last = 0
        while i < len(raw):  # every top-level field of a ModelProto is length-delimited
            tag, n, shift = raw[i], 0, 0
            i += 1
            while True:
                b = raw[i]
                i += 1
                n |= (b & 0x7F) << shift
                shift += 7
                if not b & 0x80:
                    break
            i += n
            if tag >> 3 == 1:
                last = i
        raw = raw[:last] + extra + raw[last:]
    with open(path, "wb") as f:
        f.write(raw)
    return spm.SentencePieceProcessor(model_file=path)


TOK_CASES = ["a red circle on a blue background", "A Red Circle", "  leading   and  trailing  spaces  ",
             "ＡＢＣ full width ｄｉｇｉｔｓ １２３", "the ﬁne ligature", "café naïve", "中文字 and 日本",
             "①② circled", "😀😀 emoji", "tab\there\nnewline", "", " ", "orange triangle purple square",
             "zzqq unknown xyzzy", "e\u0301 combining", "Ⅻ roman", "a" * 40]
TOK_BYTES = [b"ab\xff\xfecd", b"\xc3(", b"ok\xe2\x82"]


def tok_ref(sp):
    cases = [{"text": t, "ids": sp.encode(t)} for t in TOK_CASES]
    cases += [{"hex": b.hex(), "ids": sp.encode(b)} for b in TOK_BYTES]
    return cases


# ---------------------------------------------------------------- references (float64, written from the math)

def rmsnorm_t5(x, w, eps):
    return w * (x / torch.sqrt((x * x).mean(-1, keepdim=True) + eps))


def gelu_tanh(x):
    return 0.5 * x * (1.0 + torch.tanh((2.0 / np.pi) ** 0.5 * (x + 0.044715 * x ** 3)))


def t5_buckets(n, num_buckets, max_distance):
    """Bidirectional relative position buckets [q, k], computed as
    transformers' T5 does (float32 logs, truncation)."""
    ctx = torch.arange(n)[:, None]
    mem = torch.arange(n)[None, :]
    rel = mem - ctx
    nb = num_buckets // 2
    ret = (rel > 0).long() * nb
    a = rel.abs()
    max_exact = nb // 2
    small = a < max_exact
    large = max_exact + (torch.log(a.float() / max_exact) / np.log(max_distance / max_exact)
                         * (nb - max_exact)).long()
    large = torch.min(large, torch.full_like(large, nb - 1))
    return ret + torch.where(small, a, large)


def t5_encode_batch(W, cfg, id_lists):
    """Several inputs at once, padded on the right; padded keys are masked,
    so each row equals t5_encode of its own ids (for training)."""
    B, n = len(id_lists), max(len(x) for x in id_lists)
    ids = torch.zeros(B, n, dtype=torch.long)
    mask = torch.zeros(B, n, dtype=torch.bool)
    for i, x in enumerate(id_lists):
        ids[i, :len(x)] = torch.tensor(x)
        mask[i, :len(x)] = True
    H, dk = cfg["heads"], cfg["d_kv"]
    h = W["shared.weight"][ids]
    bias = W["encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight"][
        t5_buckets(n, cfg["buckets"], cfg["max_distance"])].permute(2, 0, 1)[None]
    bias = bias.masked_fill(~mask[:, None, None, :], float("-inf"))
    for i in range(cfg["layers"]):
        p = f"encoder.block.{i}.layer."
        x = rmsnorm_t5(h, W[p + "0.layer_norm.weight"], 1e-6)
        q = (x @ W[p + "0.SelfAttention.q.weight"].T).view(B, n, H, dk).transpose(1, 2)
        k = (x @ W[p + "0.SelfAttention.k.weight"].T).view(B, n, H, dk).transpose(1, 2)
        v = (x @ W[p + "0.SelfAttention.v.weight"].T).view(B, n, H, dk).transpose(1, 2)
        a = torch.softmax(q @ k.transpose(2, 3) + bias, -1) @ v
        h = h + a.transpose(1, 2).reshape(B, n, H * dk) @ W[p + "0.SelfAttention.o.weight"].T
        x = rmsnorm_t5(h, W[p + "1.layer_norm.weight"], 1e-6)
        f = gelu_tanh(x @ W[p + "1.DenseReluDense.wi_0.weight"].T) * (x @ W[p + "1.DenseReluDense.wi_1.weight"].T)
        h = h + f @ W[p + "1.DenseReluDense.wo.weight"].T
    return rmsnorm_t5(h, W["encoder.final_layer_norm.weight"], 1e-6), mask


def t5_encode(W, cfg, ids):
    h = W["shared.weight"][torch.tensor(ids)]
    n, H, dk = len(ids), cfg["heads"], cfg["d_kv"]
    bias = W["encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight"][
        t5_buckets(n, cfg["buckets"], cfg["max_distance"])].permute(2, 0, 1)
    for i in range(cfg["layers"]):
        p = f"encoder.block.{i}.layer."
        x = rmsnorm_t5(h, W[p + "0.layer_norm.weight"], 1e-6)
        q = (x @ W[p + "0.SelfAttention.q.weight"].T).view(n, H, dk).transpose(0, 1)
        k = (x @ W[p + "0.SelfAttention.k.weight"].T).view(n, H, dk).transpose(0, 1)
        v = (x @ W[p + "0.SelfAttention.v.weight"].T).view(n, H, dk).transpose(0, 1)
        a = torch.softmax(q @ k.transpose(1, 2) + bias, -1) @ v
        h = h + a.transpose(0, 1).reshape(n, H * dk) @ W[p + "0.SelfAttention.o.weight"].T
        x = rmsnorm_t5(h, W[p + "1.layer_norm.weight"], 1e-6)
        f = gelu_tanh(x @ W[p + "1.DenseReluDense.wi_0.weight"].T) * (x @ W[p + "1.DenseReluDense.wi_1.weight"].T)
        h = h + f @ W[p + "1.DenseReluDense.wo.weight"].T
    return rmsnorm_t5(h, W["encoder.final_layer_norm.weight"], 1e-6)


def lin(W, name, x):
    return x @ W[name + ".weight"].T + W[name + ".bias"]


def sincos_1d(dim, pos):
    omega = np.arange(dim // 2, dtype=np.float64) / (dim / 2.0)
    omega = 1.0 / 10000 ** omega
    out = np.einsum("m,d->md", pos.reshape(-1), omega)
    return np.concatenate([np.sin(out), np.cos(out)], axis=1)


def pos_embed_2d(dim, grid, base, interp):
    """diffusers' get_2d_sincos_pos_embed: the first half of each vector
    encodes the column, the second the row."""
    gh = np.arange(grid, dtype=np.float32) / (grid / base) / interp
    gw = np.arange(grid, dtype=np.float32) / (grid / base) / interp
    g = np.stack(np.meshgrid(gw, gh), axis=0).reshape(2, 1, grid, grid)
    return np.concatenate([sincos_1d(dim // 2, g[0]), sincos_1d(dim // 2, g[1])], axis=1)


def timestep_embedding(t, dim=256):
    half = dim // 2
    ex = -np.log(10000.0) * torch.arange(half, dtype=t.dtype) / half
    e = t[:, None] * torch.exp(ex)[None]
    return torch.cat([torch.cos(e), torch.sin(e)], -1)  # flip_sin_to_cos


def layernorm(x, eps=1e-6):
    m = x.mean(-1, keepdim=True)
    v = ((x - m) ** 2).mean(-1, keepdim=True)
    return (x - m) / torch.sqrt(v + eps)


def mha(q, k, v, heads, key_mask=None):
    B, n, D = q.shape
    m = k.shape[1]
    hd = D // heads
    q = q.view(B, n, heads, hd).transpose(1, 2)
    k = k.view(B, m, heads, hd).transpose(1, 2)
    v = v.view(B, m, heads, hd).transpose(1, 2)
    s = q @ k.transpose(2, 3) / hd ** 0.5
    if key_mask is not None:  # [B, m], False = padding
        s = s.masked_fill(~key_mask[:, None, None, :], float("-inf"))
    a = torch.softmax(s, -1) @ v
    return a.transpose(1, 2).reshape(B, n, D)


def dit_forward(W, cfg, x, t, ctx, ctx_mask=None):
    """PixArt-alpha transformer (diffusers PixArtTransformer2DModel, no
    micro-conditions): x [B, C, H, W], t [B], ctx [B, L, caption] -> [B, out, H, W]."""
    B, C, Hh, Ww = x.shape
    p, D, heads = cfg["patch"], cfg["hidden"], cfg["heads"]
    h = torch.nn.functional.conv2d(x, W["pos_embed.proj.weight"], W["pos_embed.proj.bias"], stride=p)
    gh, gw = Hh // p, Ww // p
    h = h.flatten(2).transpose(1, 2)
    h = h + torch.from_numpy(pos_embed_2d(D, gh, cfg["sample"] // p, cfg["interp"])).to(h.dtype)[None]
    te = lin(W, "adaln_single.emb.timestep_embedder.linear_2",
             torch.nn.functional.silu(lin(W, "adaln_single.emb.timestep_embedder.linear_1", timestep_embedding(t))))
    t6 = lin(W, "adaln_single.linear", torch.nn.functional.silu(te))
    c = lin(W, "caption_projection.linear_2",
            gelu_tanh(lin(W, "caption_projection.linear_1", ctx)))
    for i in range(cfg["depth"]):
        b = f"transformer_blocks.{i}."
        sh_msa, sc_msa, g_msa, sh_mlp, sc_mlp, g_mlp = (W[b + "scale_shift_table"][None] + t6.view(B, 6, D)).chunk(6, 1)
        n = layernorm(h) * (1 + sc_msa) + sh_msa
        a = mha(lin(W, b + "attn1.to_q", n), lin(W, b + "attn1.to_k", n), lin(W, b + "attn1.to_v", n), heads)
        h = h + g_msa * lin(W, b + "attn1.to_out.0", a)
        a = mha(lin(W, b + "attn2.to_q", h), lin(W, b + "attn2.to_k", c), lin(W, b + "attn2.to_v", c), heads,
                ctx_mask)
        h = h + lin(W, b + "attn2.to_out.0", a)
        n = layernorm(h) * (1 + sc_mlp) + sh_mlp
        f = lin(W, b + "ff.net.2", gelu_tanh(lin(W, b + "ff.net.0.proj", n)))
        h = h + g_mlp * f
    shift, scale = (W["scale_shift_table"][None] + te[:, None]).chunk(2, 1)
    h = layernorm(h) * (1 + scale) + shift
    h = lin(W, "proj_out", h)
    oc = cfg["out_ch"]
    h = h.view(B, gh, gw, p, p, oc)
    return torch.einsum("nhwpqc->nchpwq", h).reshape(B, oc, gh * p, gw * p)


def group_norm(x, W, name, groups):
    return torch.nn.functional.group_norm(x, groups, W[name + ".weight"], W[name + ".bias"], eps=1e-6)


def conv(W, name, x, pad=1):
    return torch.nn.functional.conv2d(x, W[name + ".weight"], W[name + ".bias"], padding=pad)


def resnet(W, name, x, groups):
    h = conv(W, name + ".conv1", torch.nn.functional.silu(group_norm(x, W, name + ".norm1", groups)))
    h = conv(W, name + ".conv2", torch.nn.functional.silu(group_norm(h, W, name + ".norm2", groups)))
    if name + ".conv_shortcut.weight" in W:
        x = conv(W, name + ".conv_shortcut", x, pad=0)
    return x + h


def vae_attention(W, name, x, groups):
    B, C, H, Wd = x.shape
    h = group_norm(x, W, name + ".group_norm", groups).view(B, C, H * Wd).transpose(1, 2)
    a = mha(lin(W, name + ".to_q", h), lin(W, name + ".to_k", h), lin(W, name + ".to_v", h), 1)
    a = lin(W, name + ".to_out.0", a).transpose(1, 2).reshape(B, C, H, Wd)
    return a + x


def vae_decode(W, cfg, z):
    """diffusers AutoencoderKL.decode (post_quant_conv, then the Decoder)."""
    g = cfg["groups"]
    z = conv(W, "post_quant_conv", z / cfg["scaling"], pad=0)
    h = conv(W, "decoder.conv_in", z)
    h = resnet(W, "decoder.mid_block.resnets.0", h, g)
    h = vae_attention(W, "decoder.mid_block.attentions.0", h, g)
    h = resnet(W, "decoder.mid_block.resnets.1", h, g)
    for i in range(len(cfg["channels"])):
        for j in range(cfg["layers_per_block"] + 1):
            h = resnet(W, f"decoder.up_blocks.{i}.resnets.{j}", h, g)
        if f"decoder.up_blocks.{i}.upsamplers.0.conv.weight" in W:
            h = torch.nn.functional.interpolate(h, scale_factor=2.0, mode="nearest")
            h = conv(W, f"decoder.up_blocks.{i}.upsamplers.0.conv", h)
    h = torch.nn.functional.silu(group_norm(h, W, "decoder.conv_norm_out", g))
    return conv(W, "decoder.conv_out", h)


def to_pixels(img):
    """[3, H, W] in [-1, 1] -> uint8 [H, W, 3] as diffusers' image processor does."""
    x = (img / 2 + 0.5).clamp(0, 1).permute(1, 2, 0).numpy()
    return np.round(x * 255).astype(np.uint8)


def train_betas(sc):
    """diffusers' betas for the scheduler config, float32."""
    N = sc["num_train_timesteps"]
    if sc["beta_schedule"] == "linear":
        return torch.linspace(sc["beta_start"], sc["beta_end"], N, dtype=torch.float32)
    if sc["beta_schedule"] == "scaled_linear":
        return torch.linspace(sc["beta_start"] ** 0.5, sc["beta_end"] ** 0.5, N, dtype=torch.float32) ** 2
    if sc["beta_schedule"] == "squaredcos_cap_v2":
        def abar(t):
            return math.cos((t + 0.008) / 1.008 * math.pi / 2) ** 2
        return torch.tensor([min(1 - abar((i + 1) / N) / abar(i / N), 0.999) for i in range(N)], dtype=torch.float32)
    raise ValueError(sc["beta_schedule"])


def schedule(sc, steps):
    """diffusers EulerDiscreteScheduler.set_timesteps (linear interpolation of
    sigmas): (timesteps, sigmas with a final 0, init_noise_sigma)."""
    N = sc["num_train_timesteps"]
    ac = torch.cumprod(1.0 - train_betas(sc), dim=0)
    sp = sc["timestep_spacing"]
    if sp == "linspace":
        ts = np.linspace(0, N - 1, steps, dtype=np.float32)[::-1].copy()
    elif sp == "leading":
        ratio = N // steps
        ts = (np.arange(0, steps) * ratio).round()[::-1].copy().astype(np.float32) + sc["steps_offset"]
    else:
        ts = np.round(np.arange(N, 0, -N / steps)).astype(np.float32) - 1
    sig = np.array(((1 - ac) / ac) ** 0.5)
    sig = np.interp(ts, np.arange(0, len(sig)), sig)
    sig = np.concatenate([sig, [0.0]]).astype(np.float32)
    init = float(sig.max()) if sp in ("linspace", "trailing") else float((sig.max() ** 2 + 1) ** 0.5)
    return ts.astype(np.float32), sig, init


def generate(Wt, tcfg, Wd, dcfg, Wv, vcfg, sc, ids_c, ids_u, steps, cfg_scale, seed):
    """The whole pipeline: encoder states of the prompt and of "", Euler with
    classifier-free guidance (both passes in one batch), VAE, pixels."""
    ec = t5_encode(Wt, tcfg, ids_c)
    eu = t5_encode(Wt, tcfg, ids_u)
    ts, sig, init = schedule(sc, steps)
    lc = dcfg["in_ch"]
    z = torch.from_numpy(Rng(seed).gauss(lc * dcfg["sample"] ** 2).astype(np.float64)).view(1, lc, dcfg["sample"],
                                                                                            dcfg["sample"]) * init
    for i in range(steps):
        s = float(sig[i])
        x = z / (s * s + 1) ** 0.5
        # the passes differ in context length; each runs on its own tokens
        out_u = dit_forward(Wd, dcfg, x, torch.tensor([float(ts[i])], dtype=torch.float64), eu[None])
        out_c = dit_forward(Wd, dcfg, x, torch.tensor([float(ts[i])], dtype=torch.float64), ec[None])
        eps = out_u[:, :lc] + cfg_scale * (out_c[:, :lc] - out_u[:, :lc])
        if sc["prediction_type"] == "epsilon":
            x0 = z - s * eps
        else:
            x0 = eps * (-s / (s * s + 1) ** 0.5) + z / (s * s + 1)
        z = z + (z - x0) / s * (float(sig[i + 1]) - s)
    img = vae_decode(Wv, vcfg, z)[0]
    return ec, eu, z, img


# ---------------------------------------------------------------- the tiny pipeline

T5_CFG = {"d_model": 64, "heads": 4, "d_kv": 16, "d_ff": 96, "layers": 2, "buckets": 32, "max_distance": 128}
DIT_CFG = {"hidden": 144, "heads": 2, "depth": 2, "patch": 2, "in_ch": 4, "out_ch": 8, "sample": 32, "interp": 1.0,
           "mlp": 4}
VAE_CFG = {"channels": [32, 32, 64, 64], "layers_per_block": 1, "groups": 32, "latent": 4, "scaling": 0.18215}
SCHED = {"num_train_timesteps": 1000, "beta_start": 0.0001, "beta_end": 0.02, "beta_schedule": "linear",
         "prediction_type": "epsilon", "timestep_spacing": "linspace", "steps_offset": 0}


def rnd(g, *shape, std=None):
    fan = shape[1] if len(shape) > 1 else shape[0]
    for s in shape[2:]:
        fan *= s
    return torch.randn(*shape, generator=g, dtype=torch.float64) * (std if std is not None else fan ** -0.5)


def t5_weights(g, n_vocab, c):
    W = collections.OrderedDict()
    D, H, dk, F = c["d_model"], c["heads"], c["d_kv"], c["d_ff"]
    W["shared.weight"] = rnd(g, n_vocab, D, std=1.0)
    for i in range(c["layers"]):
        p = f"encoder.block.{i}.layer."
        W[p + "0.layer_norm.weight"] = 1 + 0.1 * rnd(g, D, std=1.0)
        for n in "qkv":
            W[p + f"0.SelfAttention.{n}.weight"] = rnd(g, H * dk, D)
        W[p + "0.SelfAttention.o.weight"] = rnd(g, D, H * dk)
        if i == 0:
            W[p + "0.SelfAttention.relative_attention_bias.weight"] = rnd(g, c["buckets"], H, std=0.5)
        W[p + "1.layer_norm.weight"] = 1 + 0.1 * rnd(g, D, std=1.0)
        W[p + "1.DenseReluDense.wi_0.weight"] = rnd(g, F, D)
        W[p + "1.DenseReluDense.wi_1.weight"] = rnd(g, F, D)
        W[p + "1.DenseReluDense.wo.weight"] = rnd(g, D, F)
    W["encoder.final_layer_norm.weight"] = 1 + 0.1 * rnd(g, D, std=1.0)
    return W


def dit_weights(g, c, caption):
    W = collections.OrderedDict()
    D, p = c["hidden"], c["patch"]
    W["pos_embed.proj.weight"] = rnd(g, D, c["in_ch"], p, p)
    W["pos_embed.proj.bias"] = rnd(g, D, std=0.02)
    W["adaln_single.emb.timestep_embedder.linear_1.weight"] = rnd(g, D, 256)
    W["adaln_single.emb.timestep_embedder.linear_1.bias"] = rnd(g, D, std=0.02)
    W["adaln_single.emb.timestep_embedder.linear_2.weight"] = rnd(g, D, D)
    W["adaln_single.emb.timestep_embedder.linear_2.bias"] = rnd(g, D, std=0.02)
    W["adaln_single.linear.weight"] = rnd(g, 6 * D, D, std=0.3 * D ** -0.5)
    W["adaln_single.linear.bias"] = rnd(g, 6 * D, std=0.02)
    W["caption_projection.linear_1.weight"] = rnd(g, D, caption)
    W["caption_projection.linear_1.bias"] = rnd(g, D, std=0.02)
    W["caption_projection.linear_2.weight"] = rnd(g, D, D)
    W["caption_projection.linear_2.bias"] = rnd(g, D, std=0.02)
    for i in range(c["depth"]):
        b = f"transformer_blocks.{i}."
        W[b + "scale_shift_table"] = rnd(g, 6, D, std=D ** -0.5)
        for a in ("attn1", "attn2"):
            for n in ("to_q", "to_k", "to_v", "to_out.0"):
                W[b + f"{a}.{n}.weight"] = rnd(g, D, D)
                W[b + f"{a}.{n}.bias"] = rnd(g, D, std=0.02)
        W[b + "ff.net.0.proj.weight"] = rnd(g, c["mlp"] * D, D)
        W[b + "ff.net.0.proj.bias"] = rnd(g, c["mlp"] * D, std=0.02)
        W[b + "ff.net.2.weight"] = rnd(g, D, c["mlp"] * D)
        W[b + "ff.net.2.bias"] = rnd(g, D, std=0.02)
    W["scale_shift_table"] = rnd(g, 2, D, std=D ** -0.5)
    W["proj_out.weight"] = rnd(g, p * p * c["out_ch"], D)
    W["proj_out.bias"] = rnd(g, p * p * c["out_ch"], std=0.02)
    return W


def vae_weights(g, c):
    W = collections.OrderedDict()
    ch = c["channels"]
    # a few encoder tensors, as a full AutoencoderKL file has: the reader must skip them
    W["encoder.conv_in.weight"] = rnd(g, ch[0], 3, 3, 3)
    W["encoder.conv_in.bias"] = rnd(g, ch[0], std=0.02)
    W["quant_conv.weight"] = rnd(g, 2 * c["latent"], 2 * c["latent"], 1, 1)
    W["quant_conv.bias"] = rnd(g, 2 * c["latent"], std=0.02)
    W["post_quant_conv.weight"] = rnd(g, c["latent"], c["latent"], 1, 1)
    W["post_quant_conv.bias"] = rnd(g, c["latent"], std=0.02)

    def norm(name, n):
        W[name + ".weight"] = 1 + 0.1 * rnd(g, n, std=1.0)
        W[name + ".bias"] = rnd(g, n, std=0.05)

    def convw(name, o, i, k=3):
        W[name + ".weight"] = rnd(g, o, i, k, k)
        W[name + ".bias"] = rnd(g, o, std=0.02)

    def res(name, i, o):
        norm(name + ".norm1", i)
        convw(name + ".conv1", o, i)
        norm(name + ".norm2", o)
        convw(name + ".conv2", o, o)
        if i != o:
            convw(name + ".conv_shortcut", o, i, 1)

    top = ch[-1]
    convw("decoder.conv_in", top, c["latent"])
    res("decoder.mid_block.resnets.0", top, top)
    norm("decoder.mid_block.attentions.0.group_norm", top)
    for n in ("to_q", "to_k", "to_v", "to_out.0"):
        W[f"decoder.mid_block.attentions.0.{n}.weight"] = rnd(g, top, top)
        W[f"decoder.mid_block.attentions.0.{n}.bias"] = rnd(g, top, std=0.02)
    res("decoder.mid_block.resnets.1", top, top)
    rev = list(reversed(ch))
    prev = top
    for i, o in enumerate(rev):
        for j in range(c["layers_per_block"] + 1):
            res(f"decoder.up_blocks.{i}.resnets.{j}", prev if j == 0 else o, o)
        prev = o
        if i < len(rev) - 1:
            convw(f"decoder.up_blocks.{i}.upsamplers.0.conv", o, o)
    norm("decoder.conv_norm_out", ch[0])
    convw("decoder.conv_out", 3, ch[0])
    return W


def stored(W, dtypes):
    """The weights as the file holds them (rounded to their dtypes), back in
    float64 for the reference, and the torch tensors to save."""
    ref, save = collections.OrderedDict(), collections.OrderedDict()
    for k, v in W.items():
        dt = dtypes(k)
        t = v.to(dt).contiguous()
        save[k] = t
        ref[k] = t.double()
    return ref, save


def write_st_torch(path, save):
    items = []
    for k, t in save.items():
        dt = {torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16"}[t.dtype]
        items.append((k, t.float().numpy(), dt))
    write_safetensors(path, items)


def f32file(path, arr):
    np.ascontiguousarray(np.asarray(arr), dtype="<f4").tofile(path)


def gen_tiny():
    d = os.path.join(OUT, "tiny")
    os.makedirs(d, exist_ok=True)
    sp = gen_tokenizer(os.path.join(d, "spiece.model"))
    with open(os.path.join(d, "tokenizer.json"), "w") as f:
        json.dump({"eos": 1, "cases": tok_ref(sp)}, f, indent=1, ensure_ascii=False)
        f.write("\n")
    g = torch.Generator().manual_seed(2401)
    n_vocab = sp.get_piece_size() + 4
    Wt, save = stored(t5_weights(g, n_vocab, T5_CFG),
                      lambda k: torch.bfloat16 if k == "shared.weight" else torch.float32)
    write_st_torch(os.path.join(d, "t5.safetensors"), save)
    Wd, save = stored(dit_weights(g, DIT_CFG, T5_CFG["d_model"]),
                      lambda k: torch.float16 if ".ff.net." in k and k.endswith("weight") else torch.float32)
    torch.save(save, os.path.join(d, "dit.pt"))
    Wv, save = stored(vae_weights(g, VAE_CFG), lambda k: torch.float32)
    write_st_torch(os.path.join(d, "vae.safetensors"), save)

    prompt = "a red circle on a blue background"
    ids_c = sp.encode(prompt) + [1]
    ids_u = [1]
    # stage references
    ec, eu = t5_encode(Wt, T5_CFG, ids_c), t5_encode(Wt, T5_CFG, ids_u)
    f32file(os.path.join(d, "ref_t5.f32"), ec.numpy())
    x = torch.from_numpy(Rng(7).gauss(4 * 32 * 32).astype(np.float64)).view(1, 4, 32, 32)
    dit1 = dit_forward(Wd, DIT_CFG, x, torch.tensor([500.0], dtype=torch.float64), ec[None])
    f32file(os.path.join(d, "ref_dit_step.f32"), dit1.numpy())
    zv = torch.from_numpy(Rng(9).gauss(4 * 32 * 32).astype(np.float64)).view(1, 4, 32, 32) * 0.18215
    img = vae_decode(Wv, VAE_CFG, zv)[0]
    f32file(os.path.join(d, "ref_vae.f32"), img.numpy())
    steps, cfg_scale, seed = 4, 4.5, 42
    _, _, zf, full = generate(Wt, T5_CFG, Wd, DIT_CFG, Wv, VAE_CFG, SCHED, ids_c, ids_u, steps, cfg_scale, seed)
    f32file(os.path.join(d, "ref_latent.f32"), zf.numpy())
    to_pixels(full).tofile(os.path.join(d, "ref_image.rgb"))
    ts, sig, init = schedule(SCHED, steps)
    ref = {"prompt": prompt, "ids": ids_c, "uncond_ids": ids_u,
           "t5": {"file": "ref_t5.f32", "shape": list(ec.shape)},
           "dit_step": {"file": "ref_dit_step.f32", "noise_seed": 7, "timestep": 500.0, "shape": list(dit1.shape)},
           "vae": {"file": "ref_vae.f32", "noise_seed": 9, "latent_scale": 0.18215, "shape": list(img.shape)},
           "pipeline": {"steps": steps, "cfg": cfg_scale, "seed": seed, "latent": "ref_latent.f32",
                        "image": "ref_image.rgb", "timesteps": ts.tolist(), "sigmas": sig.tolist(),
                        "init_noise_sigma": init},
           "noise": {"seed": 42, "first": Rng(42).gauss(8).tolist()}}
    with open(os.path.join(d, "ref.json"), "w") as f:
        json.dump(ref, f, indent=1)
        f.write("\n")
    write_pack(d, "tiny-random", {"dit": "dit.pt", "text-encoder": "t5.safetensors", "tokenizer": "spiece.model",
                                  "vae": "vae.safetensors"},
               {"dit": {"attention_head_dim": DIT_CFG["hidden"] // DIT_CFG["heads"], "interpolation_scale": 1.0},
                "text_encoder": {"relative_attention_max_distance": 128, "max_tokens": 120},
                "vae": {"scaling_factor": 0.18215, "norm_num_groups": 32},
                "scheduler": SCHED, "defaults": {"steps": 4, "cfg": 4.5}},
               "random weights for tests (kiln's own, under the project's terms)")
    for n in sorted(os.listdir(d)):
        report(os.path.join(d, n))


def write_pack(d, name, files, config, license_):
    arts = []
    for role, f in files.items():
        arts.append({"role": role, "path": f, "length": os.path.getsize(os.path.join(d, f)),
                     "sha256": sha256(os.path.join(d, f))})
    pack = {"kind": "kiln-image-pack", "schema": 1, "name": name, "license": license_, "artifacts": arts}
    pack.update(config)
    with open(os.path.join(d, "pack.json"), "w") as f:
        json.dump(pack, f, indent=1)
        f.write("\n")




# ---------------------------------------------------------------- the demo: a tiny pipeline trained here

DEMO_T5 = {"d_model": 128, "heads": 4, "d_kv": 32, "d_ff": 256, "layers": 2, "buckets": 32, "max_distance": 128}
DEMO_DIT = {"hidden": 128, "heads": 4, "depth": 4, "patch": 4, "in_ch": 4, "out_ch": 4, "sample": 32, "interp": 1.0,
            "mlp": 4}
DEMO_VAE = {"channels": [8, 8, 16, 32], "layers_per_block": 1, "groups": 4, "latent": 4, "scaling": 1.5}
# The cosine schedule ends at a signal-to-noise ratio of about 1e-9 where the
# linear one ends at 4e-5: with a plain background filling most of a picture,
# 4e-5 is enough signal for the transformer to read a colour out of the
# noise's mean, and then at sampling time it paints whatever colour the seed's
# noise leans to, whatever the caption says.
DEMO_SCHED = dict(SCHED, prediction_type="v_prediction", beta_schedule="squaredcos_cap_v2")
RGB = {"red": (220, 30, 30), "green": (30, 170, 50), "blue": (30, 60, 220), "yellow": (240, 220, 40),
       "white": (245, 245, 245), "black": (15, 15, 15), "purple": (140, 40, 170), "orange": (245, 140, 20)}


def draw(color, shape, bg, rng, size=256):
    """A size x size picture of one shape, jittered in place and size."""
    k = size / 256.0
    yy, xx = np.mgrid[0:size, 0:size].astype(np.float32) + 0.5
    r = rng.uniform(50, 80) * k
    cx, cy = rng.uniform(100, 156) * k, rng.uniform(100, 156) * k
    if shape == "circle":
        m = (xx - cx) ** 2 + (yy - cy) ** 2 <= r * r
    elif shape == "square":
        m = (np.abs(xx - cx) <= r * 0.85) & (np.abs(yy - cy) <= r * 0.85)
    else:
        h = r * 1.6
        top, base = cy - h / 2, cy + h / 2
        half = (yy - top) / h * r
        m = (yy >= top) & (yy <= base) & (np.abs(xx - cx) <= half)
    img = np.empty((size, size, 3), np.float32)
    img[:] = RGB[bg]
    img[m] = RGB[color]
    return img / 127.5 - 1.0   # [-1, 1]


def raw_latent(img):
    """The demo's latent: the picture averaged over 8 x 8 cells (RGB) and its
    luma, [4, H / 8, W / 8] in [-1, 1]; the decoder learns to paint it back."""
    x = torch.from_numpy(img).permute(2, 0, 1)[None]
    small = torch.nn.functional.avg_pool2d(x, 8)[0]
    luma = (0.299 * small[0] + 0.587 * small[1] + 0.114 * small[2])[None]
    return torch.cat([small, luma], 0)


def as_params(W):
    return {k: torch.nn.Parameter(v.float().clone()) for k, v in W.items()}


def load_safetensors(path):
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    W = collections.OrderedDict()
    for k, v in json.loads(raw[8:8 + n]).items():
        if k == "__metadata__":
            continue
        b, e = v["data_offsets"]
        a = np.frombuffer(raw[8 + n + b:8 + n + e], dtype={"F32": "<f4", "F16": "<f2"}[v["dtype"]])
        W[k] = torch.from_numpy(a.astype(np.float32).reshape(v["shape"]))
    return W


def gen_demo(minutes, out, state=None, resume=False, keep_vae=False, fresh_layers=False, init=None, mid=0.0,
             mid_range=(450, 950), peak_lr=1e-3):
    """Trains the demo pipeline on pictures of coloured shapes for about
    MINUTES of one core, writing the pack to OUT every few minutes (with the
    transformer's and encoder's moving average, which samples far cleaner
    than the raw weights).  STATE keeps the raw weights, the averages and the
    optimizer, so a run can go on where an earlier one stopped.  INIT, a
    pack's directory, starts all three models from that pack's weights (the
    moving averages it holds) with a new optimizer.  MID is the fraction of
    each batch whose noise levels are drawn from MID_RANGE (t in [lo, hi),
    where a shape's outline is decided: the colours are settled at the
    noisiest steps, and below t = 600 the outline is already in the noisy
    latent) instead of all of the schedule; PEAK_LR the learning rate after
    the warm-up."""
    import time
    torch.set_num_threads(1)  # a shared machine: OpenMP threads spinning on busy cores only lose
    d = out
    os.makedirs(d, exist_ok=True)
    sp = gen_tokenizer(os.path.join(d, "spiece.model"), whole_words=True)
    caps = [(c, s, b) for c in COLORS for s in SHAPES for b in COLORS if b != c]
    rng = np.random.default_rng(6 if init else 5)  # a warm start sees new drawings
    g = torch.Generator().manual_seed(77)
    budget = minutes * 60.0
    t_start = time.time()
    st = torch.load(state) if resume and state and os.path.exists(state) else None
    if init and st is not None:
        raise SystemExit("--init-from-pack and --resume with a state file: choose one")

    if init:
        Wv = as_params(load_safetensors(os.path.join(init, "vae.safetensors")))
    elif st is not None:
        Wv = as_params(st["vae"])
    elif resume or keep_vae:  # the decoder in OUT stays
        Wv = as_params(load_safetensors(os.path.join(d, "vae.safetensors")))
    # 1. the decoder: latents of random pictures back to the pictures, on
    #    128-pixel pictures (a latent cell is 8 x 8 pixels at any size, and
    #    every layer but the group norms and the 16-cell attention is local)
    trained = st is not None or resume or keep_vae or bool(init)
    Wv = Wv if trained else as_params(vae_weights(g, DEMO_VAE))
    for k in list(Wv):
        if k.startswith("encoder.") or k.startswith("quant_conv"):
            del Wv[k]
    opt = torch.optim.Adam(Wv.values(), lr=2e-3)
    t0, step = time.time(), 0
    while not trained and time.time() - t0 < budget * 0.2:
        batch = [draw(*caps[rng.integers(len(caps))], rng, 128) for _ in range(4)]
        x = torch.from_numpy(np.stack(batch)).permute(0, 3, 1, 2)
        z = torch.stack([raw_latent(b) for b in batch]) * DEMO_VAE["scaling"]
        loss = (vae_decode(Wv, DEMO_VAE, z) - x).abs().mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        step += 1
        if step % 20 == 0:
            print(f"vae step {step}: L1 {loss.item():.4f}", flush=True)
    if step:
        print(f"vae: {step} steps in {time.time() - t0:.0f} s, L1 {loss.item():.4f}", flush=True)

    # 2. the encoder and the transformer together, v-prediction with 10 %
    #    of captions dropped to "" for guidance
    # T5 does not scale its attention logits by 1 / sqrt(d_kv): its queries
    # start that much smaller, or the softmax starts saturated on the words'
    # content, the small position biases never count and the encoder stays a
    # bag of words (as transformers' T5 initialisation does)
    qscale = DEMO_T5["d_kv"] ** -0.5
    if st is not None:
        if fresh_layers:  # the encoder's layers anew; its embedding, final norm and the rest stay
            new = t5_weights(g, st["t5"]["shared.weight"].shape[0], DEMO_T5)
            for k, v in new.items():
                if k in ("shared.weight", "encoder.final_layer_norm.weight"):
                    continue
                v = v.float() * (qscale if k.endswith("SelfAttention.q.weight") else 1.0)
                if k.endswith(("SelfAttention.o.weight", "DenseReluDense.wo.weight")):
                    v = v * 0.3  # start near the old encoder's output, which the transformer reads
                st["t5"][k] = v
                st["ema"]["t5." + k] = v.clone()
            st.pop("opt")
        Wt, Wd = as_params(st["t5"]), as_params(st["dit"])
        ema = {k: v.clone() for k, v in st["ema"].items()}
        step0 = st["step"]
    elif init:
        Wt = as_params(load_safetensors(os.path.join(init, "t5.safetensors")))
        Wd = as_params(torch.load(os.path.join(init, "dit.pt")))
        ema = {("t5." + k): v.detach().clone() for k, v in Wt.items()}
        ema.update({("dit." + k): v.detach().clone() for k, v in Wd.items()})
        step0 = 0
    else:
        Wt = as_params(t5_weights(g, sp.get_piece_size() + 4, DEMO_T5))
        for k in Wt:
            if k.endswith("SelfAttention.q.weight"):
                Wt[k].data.mul_(qscale)
        Wd = as_params(dit_weights(g, DEMO_DIT, DEMO_T5["d_model"]))
        for k in Wd:  # adaLN-zero style: every block starts close to the identity
            if k.startswith("proj_out") or k.endswith("attn2.to_out.0.weight"):
                Wd[k].data.mul_(0.1)
        ema = {("t5." + k): v.detach().clone() for k, v in Wt.items()}
        ema.update({("dit." + k): v.detach().clone() for k, v in Wd.items()})
        step0 = 0
    params = list(Wt.values()) + list(Wd.values())
    named = [("t5." + k, v) for k, v in Wt.items()] + [("dit." + k, v) for k, v in Wd.items()]
    opt = torch.optim.AdamW(params, lr=1e-3, weight_decay=0.0)
    if st is not None and "opt" in st:
        opt.load_state_dict(st["opt"])
    # A probe that must tell, from the encoder's state at each colour word
    # alone, the colour and whether it is the shape's or the background's
    # (training only; not in the pack).  The transformer's cross-attention
    # sees the caption as a set of states: until the encoder writes each
    # word's role into its state, "a black circle on a white background" and
    # "a white circle on a black background" are the same set to it, and it
    # paints the two colours in whichever roles the seed's noise leans to.
    D_t = DEMO_T5["d_model"]
    probe = st.get("probe_roles") if st is not None else None
    if probe is None:
        probe = {"w": rnd(g, 2 * len(COLORS), D_t).float(), "b": torch.zeros(2 * len(COLORS))}
    probe = as_params(probe)
    opt_p = torch.optim.AdamW(probe.values(), lr=1e-3, weight_decay=0.0)
    if st is not None and "opt_probe_roles" in st:
        opt_p.load_state_dict(st["opt_probe_roles"])
    role = {cap: (COLORS.index(cap[0]), COLORS.index(cap[2])) for cap in caps}
    ac = torch.cumprod(1 - train_betas(DEMO_SCHED), 0)
    ids_all = {cap: sp.encode(caption(*cap)) + [1] for cap in caps}
    # the colour words' places: "a C S on a B background" is one piece a word
    at = [i for i, t in enumerate(ids_all[caps[0]]) if sp.id_to_piece(t) in ("\u2581" + caps[0][0], "\u2581" + caps[0][2])]
    assert at == [1, 5], at
    want_all = torch.tensor([[role[cap][0], role[cap][1] + len(COLORS)] for cap in caps])
    if init:  # a new probe learns to read the given encoder first, or its first gradients would shake it
        with torch.no_grad():
            states_all = t5_encode_batch(Wt, DEMO_T5, [ids_all[cap] for cap in caps])[0][:, [1, 5]]
        for _ in range(500):
            out_p = states_all @ probe["w"].T + probe["b"]
            aux_p = torch.nn.functional.cross_entropy(out_p.reshape(-1, 2 * len(COLORS)), want_all.reshape(-1))
            opt_p.zero_grad()
            aux_p.backward()
            opt_p.step()
        print(f"probe on the given encoder: {aux_p.item():.3f}", flush=True)
    print(f"dit: {sum(v.numel() for v in Wd.values())} transformer weights", flush=True)
    t0, step = time.time(), step0
    t_saved = t0
    B = 16
    t_end = (budget if trained else budget * 0.8) - (time.time() - t_start)

    def save():
        avg_t = collections.OrderedDict((k, ema["t5." + k]) for k in Wt)
        avg_d = collections.OrderedDict((k, ema["dit." + k]) for k in Wd)
        save_pack(d, avg_t, avg_d, Wv)
        if state:
            torch.save({"t5": {k: v.detach() for k, v in Wt.items()}, "dit": {k: v.detach() for k, v in Wd.items()},
                        "vae": {k: v.detach() for k, v in Wv.items()}, "ema": ema, "opt": opt.state_dict(),
                        "step": step, "probe_roles": {k: v.detach() for k, v in probe.items()},
                        "opt_probe_roles": opt_p.state_dict()}, state + ".tmp")
            os.replace(state + ".tmp", state)

    while time.time() - t0 < t_end:
        lr = peak_lr * min(1.0, (step - step0 + 1) / 300)
        if time.time() - t0 > 0.85 * t_end:
            lr = 0.3 * peak_lr
        for grp in opt.param_groups:
            grp["lr"] = lr
        # new drawings every step (the transformer learnt to recall a fixed set)
        pick = [(cap, raw_latent(draw(*cap, rng)) * DEMO_VAE["scaling"])
                for cap in (caps[rng.integers(len(caps))] for _ in range(B))]
        lat = torch.stack([p[1] for p in pick])
        t = torch.randint(0, 1000, (B,))
        n_mid = int(round(mid * B))
        if n_mid:
            t[:n_mid] = torch.randint(mid_range[0], mid_range[1], (n_mid,))
        noise = torch.randn(lat.shape)
        a = ac[t].view(B, 1, 1, 1)
        xt = a.sqrt() * lat + (1 - a).sqrt() * noise
        keep = [rng.random() > 0.1 for _ in pick]
        ctx, mask = t5_encode_batch(Wt, DEMO_T5, [ids_all[p[0]] if k else [1] for p, k in zip(pick, keep)])
        pred = dit_forward(Wd, DEMO_DIT, xt, t.float(), ctx, mask)
        # v-prediction: at high noise the target is nearly -x0 (the picture
        # the caption asks for), where an epsilon target is nearly the input
        # itself and carries almost no signal about the caption.  The plain
        # v loss weighs an x0 error by SNR + 1 >= 1, so the noisiest steps,
        # where only the caption tells the picture, count fully (min-SNR
        # weighting would mute them and the captions are never learnt)
        v = a.sqrt() * noise - (1 - a).sqrt() * lat
        loss = ((pred - v) ** 2).mean()
        kept = [i for i, k in enumerate(keep) if k]
        aux = torch.zeros(())
        if kept:
            states = ctx[kept][:, [1, 5]]  # [n, 2, D]: the shape's colour word, the background's
            out = states @ probe["w"].T + probe["b"]  # [n, 2, 2 colours]: shape colours, then background colours
            want = torch.tensor([role[pick[i][0]] for i in kept])
            want = torch.stack([want[:, 0], want[:, 1] + len(COLORS)], 1)
            aux = torch.nn.functional.cross_entropy(out.reshape(-1, 2 * len(COLORS)), want.reshape(-1))
        opt.zero_grad()
        opt_p.zero_grad()
        (loss + 0.3 * aux).backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        opt_p.step()
        step += 1
        decay = min(0.999, (1 + step) / (10 + step))
        with torch.no_grad():
            for k, v in named:
                ema[k].mul_(decay).add_(v.detach(), alpha=1 - decay)
        if step % 20 == 0:
            print(f"dit step {step}: loss {loss.item():.4f} roles {aux.item():.3f} {time.time() - t0:.0f} s", flush=True)
        if time.time() - t_saved > 300:  # a run cut short keeps what it learnt
            save()
            t_saved = time.time()
    print(f"dit: {step} steps in {time.time() - t0:.0f} s, mse {loss.item():.4f}", flush=True)
    save()
    for n in sorted(os.listdir(d)):
        report(os.path.join(d, n))


def save_pack(d, Wt, Wd, Wv):
    """The files, in the real formats."""
    save = collections.OrderedDict((k, v.detach().float()) for k, v in Wt.items())
    write_st_torch(os.path.join(d, "t5.safetensors"), save)
    save = collections.OrderedDict((k, v.detach().half() if v.dim() == 2 else v.detach().float()) for k, v in Wd.items())
    torch.save(save, os.path.join(d, "dit.pt"))
    save = collections.OrderedDict((k, v.detach().float()) for k, v in Wv.items())
    write_st_torch(os.path.join(d, "vae.safetensors"), save)
    write_pack(d, "shapes-256", {"dit": "dit.pt", "text-encoder": "t5.safetensors", "tokenizer": "spiece.model",
                                 "vae": "vae.safetensors"},
               {"dit": {"attention_head_dim": DEMO_DIT["hidden"] // DEMO_DIT["heads"], "interpolation_scale": 1.0},
                "text_encoder": {"relative_attention_max_distance": 128, "max_tokens": 120},
                "vae": {"scaling_factor": DEMO_VAE["scaling"], "norm_num_groups": DEMO_VAE["groups"]},
                "scheduler": DEMO_SCHED, "defaults": {"steps": 20, "cfg": 4.0}},
               "kiln's own (under the project's terms), trained by tests/gen_image.py --demo on generated pictures of coloured shapes")


def gen_bench(d):
    """Random F16 weights with the shapes of Flan-T5-Base, PixArt-alpha 256
    (caption width 768) and the SD VAE, for speed measurements only."""
    os.makedirs(d, exist_ok=True)
    g = torch.Generator().manual_seed(1)
    sp = gen_tokenizer(os.path.join(d, "spiece.model"))
    del sp
    t5 = {"d_model": 768, "heads": 12, "d_kv": 64, "d_ff": 2048, "layers": 12, "buckets": 32, "max_distance": 128}
    dit = {"hidden": 1152, "heads": 16, "depth": 28, "patch": 2, "in_ch": 4, "out_ch": 8, "sample": 32, "interp": 1.0,
           "mlp": 4}
    vae = {"channels": [128, 256, 512, 512], "layers_per_block": 2, "groups": 32, "latent": 4, "scaling": 0.18215}

    def f16(W):
        return collections.OrderedDict((k, v.half()) for k, v in W.items())
    write_st_torch(os.path.join(d, "t5.safetensors"), f16(t5_weights(g, 32128, t5)))
    torch.save(f16(dit_weights(g, dit, 768)), os.path.join(d, "dit.pt"))
    write_st_torch(os.path.join(d, "vae.safetensors"), f16(vae_weights(g, vae)))
    write_pack(d, "bench-pixart-256", {"dit": "dit.pt", "text-encoder": "t5.safetensors", "tokenizer": "spiece.model",
                                       "vae": "vae.safetensors"}, {}, "random weights for benchmarks")
    for n in sorted(os.listdir(d)):
        report(os.path.join(d, n))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ckpt", action="store_true")
    ap.add_argument("--demo", type=float, metavar="MINUTES",
                    help="train the bundled demo pipeline (models/shapes-256) for about MINUTES of wall time")
    ap.add_argument("--resume", action="store_true", help="with --demo: train the bundled weights further")
    ap.add_argument("--keep-vae", action="store_true",
                    help="with --demo: keep the bundled decoder, train the encoder and the transformer anew")
    ap.add_argument("--out", metavar="DIR", help="with --demo: where the pack goes (models/shapes-256)")
    ap.add_argument("--state", metavar="FILE", help="with --demo: the training state, kept for --resume")
    ap.add_argument("--fresh-encoder-layers", action="store_true",
                    help="with --demo --resume: start the encoder's layers anew (its embedding stays)")
    ap.add_argument("--init-from-pack", metavar="DIR",
                    help="with --demo: start the encoder, transformer and decoder from a pack's weights")
    ap.add_argument("--mid-noise", type=float, default=0.0, metavar="FRAC",
                    help="with --demo: draw this fraction of each batch's noise levels from --mid-range")
    ap.add_argument("--mid-range", default="450:950", metavar="LO:HI",
                    help="with --demo --mid-noise: the noise levels' range, t in [LO, HI)")
    ap.add_argument("--lr", type=float, default=1e-3, help="with --demo: the learning rate after the warm-up")
    ap.add_argument("--bench", metavar="DIR", help="write a random F16 pipeline with PixArt-256 shapes to DIR")
    a = ap.parse_args()
    torch.manual_seed(0)
    if a.bench:
        gen_bench(a.bench)
        return
    if a.demo:
        out = a.out or os.path.join(os.path.dirname(ROOT), "models", "shapes-256")
        gen_demo(a.demo, out, a.state, a.resume, a.keep_vae, a.fresh_encoder_layers, a.init_from_pack,
                 a.mid_noise, tuple(int(v) for v in a.mid_range.split(":")), a.lr)
        return
    gen_ckpt()
    if a.ckpt:
        return
    gen_tiny()


if __name__ == "__main__":
    main()
