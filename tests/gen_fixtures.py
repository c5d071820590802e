#!/usr/bin/python3
"""Reference fixture generator for kiln's model tests.

Usage (from the repository root):

    /usr/bin/python3 tests/gen_fixtures.py
        Regenerates every fixture under tests/data/fixtures/.  The output is
        deterministic: running it twice produces byte-identical files.

    /usr/bin/python3 tests/gen_fixtures.py --embed
        Regenerates only the embedding fixtures (bert-embed, qwen3-embedding):
        <name>.gguf and <name>.json with "inputs" (text, ids, truncated,
        reference unit vector), written from tests/data/vocab.

    /usr/bin/python3 tests/gen_fixtures.py --toolcall
        Regenerates only the scripted tool-call fixtures (toolcall.gguf and
        toolcall.json, no vocab files needed): a bigram model that answers
        any chat prompt with fixed reasoning and a fixed tool call, for the
        server's end-to-end test (see "Scripted tool-call fixture" below);
        and toolform-*.gguf/.json, the same in other families' call forms.

    /usr/bin/python3 tests/gen_fixtures.py --bench OUT.gguf
        Writes a random-weight model with Qwen3-0.6B's shapes (F16, GPT-2
        vocab, 986 MB) for benchmarks, streaming one tensor at a time.  No
        reference outputs.

    /usr/bin/python3 tests/gen_fixtures.py --hybrid
        Regenerates only the Qwen 3.5-family fixtures (qwen35, qwen35moe,
        qwen35moe-q8_0, qwen3next), from stories260K's tokenizer.

    /usr/bin/python3 tests/gen_fixtures.py --bench-hybrid DIR
        Writes qwen35-bench-f16.gguf (0.41 B parameters) and
        qwen35moe-bench-f16.gguf (1.40 B, 64 experts, 8 used) into DIR.

Needs Debian's python3-numpy and python3-torch (apt, not pip) and the vocab
GGUFs in ../shared/vocab.  No GGUF library is used: the small GGUF v3 writer
and reader below are written from the format description, and every written
file is re-parsed and compared with what was meant to be written.  The
tool-call fixture also needs Debian's python3-jinja2: it renders its prompt
with the template and environment of tests/gen_templates.py.

Random weights come from fixed seeds.  For each fixture the seeds base, base+1,
... are tried in order and the first one is kept whose float64 greedy
continuation has every top-2 logit margin > 1e-3, at least 8 distinct tokens,
no control/EOS tokens, and (for llama) the same holds for the Q8_0 and Q4_0
variants; so the chosen seed is itself deterministic.

For each fixture the script writes:
  <name>.gguf         tiny random-weight model using llama.cpp's GGUF conventions
                      (metadata keys, tensor names, ggml dimension order) and a
                      real tokenizer copied from a vocab GGUF in ../shared/vocab
  <name>.json         prompt ids, 32 greedy continuation ids, notes
  <name>.logits.f32   raw little-endian float32 logits at the last prompt position

The reference forward pass is an independent PyTorch implementation written
from the math (float64), checked against a float32 run of the same code.

The tool-call fixture is the exception to the above: fixed weights built so
that greedy decoding follows a script, its own small vocabulary, no logits
file; its json holds the rendered prompt, its ids, the scripted ids and the
text they decode to.
"""

import argparse
import hashlib
import json
import math
import os
import re
import struct
import sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
OUT_DIR = os.path.join(HERE, "data", "fixtures")
# the shared tokenizer conformance data, beside the repository (../shared/vocab)
VOCAB_DIR = os.environ.get("KILN_VOCAB_DIR", os.path.join(HERE, "..", "..", "shared", "vocab"))

# ---------------------------------------------------------------------------
# GGUF v3 constants

GGUF_MAGIC = b"GGUF"
GGUF_VERSION = 3
ALIGN = 32  # general.alignment default; we never write the key

# metadata value types
T_U8, T_I8, T_U16, T_I16, T_U32, T_I32, T_F32, T_BOOL, T_STR, T_ARR, T_U64, T_I64, T_F64 = range(13)
SCALAR_FMT = {T_U8: "<B", T_I8: "<b", T_U16: "<H", T_I16: "<h", T_U32: "<I", T_I32: "<i",
              T_F32: "<f", T_BOOL: "<?", T_U64: "<Q", T_I64: "<q", T_F64: "<d"}
SCALAR_NP = {T_U8: "<u1", T_I8: "<i1", T_U16: "<u2", T_I16: "<i2", T_U32: "<u4", T_I32: "<i4",
             T_F32: "<f4", T_BOOL: "<u1", T_U64: "<u8", T_I64: "<i8", T_F64: "<f8"}

# ggml tensor types and their (block elements, block bytes)
GGML_F32, GGML_F16, GGML_Q4_0, GGML_Q8_0 = 0, 1, 2, 8
GGML_BLOCK = {GGML_F32: (1, 4), GGML_F16: (1, 2), GGML_Q4_0: (32, 18), GGML_Q8_0: (32, 34)}

# general.file_type values (llama_ftype)
FTYPE_ALL_F32, FTYPE_MOSTLY_F16, FTYPE_MOSTLY_Q4_0, FTYPE_MOSTLY_Q8_0 = 0, 1, 2, 7


def align_up(n):
    return (n + ALIGN - 1) // ALIGN * ALIGN


def tensor_nbytes(ne, gtype):
    blk, bsz = GGML_BLOCK[gtype]
    assert ne[0] % blk == 0, (ne, gtype)
    n = 1
    for d in ne:
        n *= d
    return n // blk * bsz


# ---------------------------------------------------------------------------
# GGUF writer.  A metadata entry is (key, type, value[, element type]); strings
# are bytes or str, arrays are lists or 1-D numpy arrays.  A tensor is
# (name, ne, ggml type, producer) where producer() returns the raw bytes; the
# writer calls producers one at a time so big models stream to disk.

def _pack_str(s):
    b = s.encode("utf-8") if isinstance(s, str) else bytes(s)
    return struct.pack("<Q", len(b)) + b


def _pack_value(vtype, value, etype=None):
    if vtype == T_STR:
        return _pack_str(value)
    if vtype == T_ARR:
        head = struct.pack("<IQ", etype, len(value))
        if etype == T_STR:
            return head + b"".join(_pack_str(s) for s in value)
        if etype == T_ARR:
            raise ValueError("nested arrays are not used")
        return head + np.asarray(value).astype(SCALAR_NP[etype]).tobytes()
    return struct.pack(SCALAR_FMT[vtype], value)


def write_gguf(path, kvs, tensors):
    offsets = []
    off = 0
    for name, ne, gtype, _ in tensors:
        offsets.append(off)
        off = align_up(off + tensor_nbytes(ne, gtype))
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(GGUF_MAGIC + struct.pack("<IQQ", GGUF_VERSION, len(tensors), len(kvs)))
        for kv in kvs:
            key, vtype, value = kv[0], kv[1], kv[2]
            etype = kv[3] if len(kv) > 3 else None
            f.write(_pack_str(key) + struct.pack("<I", vtype) + _pack_value(vtype, value, etype))
        for (name, ne, gtype, _), o in zip(tensors, offsets):
            f.write(_pack_str(name) + struct.pack("<I", len(ne)))
            f.write(struct.pack("<%dQ" % len(ne), *ne) + struct.pack("<IQ", gtype, o))
        f.write(b"\0" * (align_up(f.tell()) - f.tell()))
        base = f.tell()
        for (name, ne, gtype, produce), o in zip(tensors, offsets):
            assert f.tell() == base + o
            data = produce()
            assert len(data) == tensor_nbytes(ne, gtype), name
            f.write(data)
            f.write(b"\0" * (align_up(len(data)) - len(data)))
    os.replace(tmp, path)


# ---------------------------------------------------------------------------
# GGUF reader (used to load vocab files and to re-check what we wrote).

class GGUFFile:
    def __init__(self, path, load_tensor_data=True):
        with open(path, "rb") as f:
            self.buf = f.read() if load_tensor_data else f.read(64 << 20)
        self.pos = 0
        magic = self._take(4)
        if magic != GGUF_MAGIC:
            raise ValueError("%s: bad magic %r" % (path, magic))
        self.version, n_tensors, n_kv = struct.unpack("<IQQ", self._take(20))
        if self.version != GGUF_VERSION:
            raise ValueError("%s: version %d" % (path, self.version))
        self.kv = {}      # key -> (type, value, element type or None)
        self.kv_order = []
        for _ in range(n_kv):
            key = self._str().decode("utf-8")
            vtype = self._u32()
            if key in self.kv:
                raise ValueError("duplicate key " + key)
            self.kv[key] = self._value(vtype)
            self.kv_order.append(key)
        self.tensors = {}  # name -> (ne, type, offset)
        self.tensor_order = []
        for _ in range(n_tensors):
            name = self._str().decode("utf-8")
            n_dims = self._u32()
            ne = list(struct.unpack("<%dQ" % n_dims, self._take(8 * n_dims)))
            gtype = self._u32()
            (off,) = struct.unpack("<Q", self._take(8))
            if off % ALIGN:
                raise ValueError("tensor %s misaligned" % name)
            self.tensors[name] = (ne, gtype, off)
            self.tensor_order.append(name)
        self.data_start = align_up(self.pos)

    def _take(self, n):
        b = self.buf[self.pos:self.pos + n]
        if len(b) != n:
            raise ValueError("truncated GGUF")
        self.pos += n
        return b

    def _u32(self):
        return struct.unpack("<I", self._take(4))[0]

    def _str(self):
        (n,) = struct.unpack("<Q", self._take(8))
        return self._take(n)

    def _value(self, vtype):
        if vtype == T_STR:
            return (T_STR, self._str(), None)
        if vtype == T_ARR:
            etype = self._u32()
            (n,) = struct.unpack("<Q", self._take(8))
            if etype == T_STR:
                return (T_ARR, [self._str() for _ in range(n)], T_STR)
            dt = np.dtype(SCALAR_NP[etype])
            arr = np.frombuffer(self._take(n * dt.itemsize), dtype=dt).copy()
            return (T_ARR, arr, etype)
        fmt = SCALAR_FMT[vtype]
        return (vtype, struct.unpack(fmt, self._take(struct.calcsize(fmt)))[0], None)

    def get(self, key, default=None):
        return self.kv[key][1] if key in self.kv else default

    def tensor_bytes(self, name):
        ne, gtype, off = self.tensors[name]
        start = self.data_start + off
        n = tensor_nbytes(ne, gtype)
        if start + n > len(self.buf):
            raise ValueError("tensor %s runs past end of file" % name)
        return self.buf[start:start + n]

    def tensor_f32(self, name):
        """Tensor as float32 numpy array of shape reversed(ne), dequantizing."""
        ne, gtype, _ = self.tensors[name]
        raw = self.tensor_bytes(name)
        shape = tuple(reversed(ne))
        if gtype == GGML_F32:
            return np.frombuffer(raw, "<f4").reshape(shape)
        if gtype == GGML_F16:
            return np.frombuffer(raw, "<f2").astype(np.float32).reshape(shape)
        if gtype == GGML_Q8_0:
            blocks = np.frombuffer(raw, np.uint8).reshape(-1, 34)
            d = blocks[:, :2].copy().view("<f2").astype(np.float32)
            q = blocks[:, 2:].copy().view(np.int8).astype(np.float32)
            return (q * d).reshape(shape)
        if gtype == GGML_Q4_0:
            blocks = np.frombuffer(raw, np.uint8).reshape(-1, 18)
            d = blocks[:, :2].copy().view("<f2").astype(np.float32)
            qs = blocks[:, 2:]
            lo = (qs & 0x0F).astype(np.float32) - 8
            hi = (qs >> 4).astype(np.float32) - 8
            return (np.concatenate([lo, hi], axis=1) * d).reshape(shape)
        raise ValueError("type %d" % gtype)


# ---------------------------------------------------------------------------
# ggml reference quantizers (row-major, blocks of 32 along ne[0]).

def quantize_q8_0(x):
    """x float32 [..., K] -> (bytes, dequantized float32)."""
    b = np.ascontiguousarray(x, np.float32).reshape(-1, 32)
    amax = np.abs(b).max(axis=1)
    d = (amax / np.float32(127)).astype(np.float32)
    with np.errstate(divide="ignore"):
        inv = np.where(d != 0, np.float32(1) / d, np.float32(0)).astype(np.float32)
    v = (b * inv[:, None]).astype(np.float32)
    q = (np.sign(v) * np.floor(np.abs(v) + np.float32(0.5))).astype(np.int8)  # roundf: half away from 0
    d16 = d.astype("<f2")
    out = np.empty((b.shape[0], 34), np.uint8)
    out[:, :2] = d16.view(np.uint8).reshape(-1, 2)
    out[:, 2:] = q.view(np.uint8)
    deq = q.astype(np.float32) * d16.astype(np.float32)[:, None]
    return out.tobytes(), deq.reshape(x.shape)


def quantize_q4_0(x):
    """x float32 [..., K] -> (bytes, dequantized float32)."""
    b = np.ascontiguousarray(x, np.float32).reshape(-1, 32)
    idx = np.argmax(np.abs(b), axis=1)  # first element of largest magnitude
    vmax = b[np.arange(b.shape[0]), idx]
    d = (vmax / np.float32(-8)).astype(np.float32)
    with np.errstate(divide="ignore"):
        inv = np.where(d != 0, np.float32(1) / d, np.float32(0)).astype(np.float32)
    v = (b * inv[:, None] + np.float32(8.5)).astype(np.float32)
    q = np.minimum(15, np.trunc(v).astype(np.int32)).astype(np.uint8)
    d16 = d.astype("<f2")
    out = np.empty((b.shape[0], 18), np.uint8)
    out[:, :2] = d16.view(np.uint8).reshape(-1, 2)
    out[:, 2:] = q[:, :16] | (q[:, 16:] << 4)
    deq = (q.astype(np.float32) - 8) * d16.astype(np.float32)[:, None]
    return out.tobytes(), deq.reshape(x.shape)


# ---------------------------------------------------------------------------
# Fixture model configurations.

class Cfg:
    def __init__(self, **kw):
        self.rope_scaling = None       # None, "linear" or "yarn"
        self.rope_factor = 1.0
        self.yarn_orig_ctx = 0
        self.tied = False
        self.out_gain = 1.0            # scale of attn_output and ffn_down (residual writes)
        self.qkv_bias = False
        self.qk_norm = False
        self.write_key_length = False
        self.quant = None              # None, "q8_0" or "q4_0": 2-D weights quantized
        self.__dict__.update(kw)


FIXTURES = [
    Cfg(name="llama", arch="llama", vocab="ggml-vocab-llama-spm.gguf", prompt_entry=19,
        n_embd=32, n_layer=2, n_head=4, n_head_kv=2, head_dim=8, n_ff=96, eps=1e-5,
        rope_base=10000.0, ctx=4096, rope_scaling="linear", rope_factor=2.0, seed=1000),
    Cfg(name="llama-yarn", arch="llama", vocab="ggml-vocab-llama-spm.gguf", prompt_entry=19,
        n_embd=16, n_layer=2, n_head=2, n_head_kv=1, head_dim=8, n_ff=48, eps=1e-5,
        rope_base=10000.0, ctx=1024, rope_scaling="yarn", rope_factor=4.0, yarn_orig_ctx=256,
        tied=True, out_gain=6.0, seed=2000),
    Cfg(name="qwen2", arch="qwen2", vocab="ggml-vocab-deepseek-coder.gguf", prompt_entry=43,
        n_embd=16, n_layer=2, n_head=2, n_head_kv=1, head_dim=8, n_ff=48, eps=1e-6,
        rope_base=1000000.0, ctx=2048, tied=True, qkv_bias=True, out_gain=6.0, seed=3000),
    Cfg(name="qwen3", arch="qwen3", vocab="ggml-vocab-gpt-2.gguf", prompt_entry=19,
        n_embd=16, n_layer=2, n_head=4, n_head_kv=2, head_dim=8, n_ff=48, eps=1e-6,
        rope_base=1000000.0, ctx=2048, tied=True, qk_norm=True, write_key_length=True, out_gain=6.0,
        seed=4000),
]
QUANT_OF = {"llama": ["q8_0", "q4_0"]}
N_GEN = 32
MIN_MARGIN = 1e-3
MIN_DISTINCT = 8


def load_vocab(cfg):
    g = GGUFFile(os.path.join(VOCAB_DIR, cfg.vocab))
    tok_kvs = [(k,) + (g.kv[k][0], g.kv[k][1]) + ((g.kv[k][2],) if g.kv[k][0] == T_ARR else ())
               for k in g.kv_order if k.startswith("tokenizer.")]
    tokens = g.get("tokenizer.ggml.tokens")
    types = g.get("tokenizer.ggml.token_type")
    n_vocab = len(tokens)
    # token ids kiln would treat specially: control/unknown/unused tokens plus
    # bos/eos/eot/eom ids; the greedy continuation avoids them so a runtime
    # that stops at end-of-generation still sees all 32 tokens.
    special = set()
    if types is not None:
        special |= {i for i, t in enumerate(types) if t in (2, 3, 5)}
    for k in ("bos", "eos", "eot", "eom", "unknown", "padding"):
        v = g.get("tokenizer.ggml.%s_token_id" % k)
        if v is not None:
            special.add(int(v))
    inp = open(os.path.join(VOCAB_DIR, cfg.vocab + ".inp"), encoding="utf-8").read()
    texts = inp.split("\n__ggml_vocab_test__\n")
    outs = open(os.path.join(VOCAB_DIR, cfg.vocab + ".out"), encoding="utf-8").read().split("\n")
    text = texts[cfg.prompt_entry]
    ids = [int(t) for t in outs[cfg.prompt_entry].split()]
    add_bos = g.get("tokenizer.ggml.add_bos_token")
    if add_bos is None:
        add_bos = g.get("tokenizer.ggml.model") == b"llama"
    if add_bos:
        ids = [int(g.get("tokenizer.ggml.bos_token_id"))] + ids
    ids = ids[:12]
    assert all(0 <= i < n_vocab for i in ids)
    return tok_kvs, n_vocab, special, ids, text, bool(add_bos)


# ---------------------------------------------------------------------------
# Weights.  Each array has numpy shape reversed(ne), i.e. a torch Linear
# weight [out, in] is ggml ne = [in, out]; token_embd is [n_vocab, n_embd].

def make_weights(cfg, n_vocab, seed):
    rng = np.random.default_rng(seed)
    E, F, H, HK, D = cfg.n_embd, cfg.n_ff, cfg.n_head, cfg.n_head_kv, cfg.head_dim
    f32 = np.float32

    def lin(n_out, n_in, gain=1.0):
        return (rng.standard_normal((n_out, n_in)) * (gain / math.sqrt(n_in))).astype(f32)

    def norm(n):
        return (1.0 + 0.2 * rng.standard_normal(n)).astype(f32)

    W = {}
    # logits std ~ 3 keeps top-2 gaps well above float32 noise
    W["token_embd.weight"] = (rng.standard_normal((n_vocab, E)) *
                              (3.0 / math.sqrt(E) if cfg.tied else 1.0)).astype(f32)
    for i in range(cfg.n_layer):
        p = "blk.%d." % i
        W[p + "attn_norm.weight"] = norm(E)
        W[p + "attn_q.weight"] = lin(H * D, E)
        W[p + "attn_k.weight"] = lin(HK * D, E)
        W[p + "attn_v.weight"] = lin(HK * D, E)
        if cfg.qkv_bias:
            W[p + "attn_q.bias"] = (0.5 * rng.standard_normal(H * D)).astype(f32)
            W[p + "attn_k.bias"] = (0.5 * rng.standard_normal(HK * D)).astype(f32)
            W[p + "attn_v.bias"] = (0.5 * rng.standard_normal(HK * D)).astype(f32)
        if cfg.qk_norm:
            W[p + "attn_q_norm.weight"] = norm(D)
            W[p + "attn_k_norm.weight"] = norm(D)
        W[p + "attn_output.weight"] = lin(E, H * D, cfg.out_gain)
        W[p + "ffn_norm.weight"] = norm(E)
        W[p + "ffn_gate.weight"] = lin(F, E)
        W[p + "ffn_up.weight"] = lin(F, E)
        W[p + "ffn_down.weight"] = lin(E, F, cfg.out_gain)
    W["output_norm.weight"] = norm(E)
    if not cfg.tied:
        W["output.weight"] = lin(n_vocab, E, 3.0)
    return W


def tensor_order(cfg):
    names = ["token_embd.weight", "output_norm.weight"]
    if not cfg.tied:
        names.append("output.weight")
    for i in range(cfg.n_layer):
        p = "blk.%d." % i
        names += [p + "attn_norm.weight", p + "attn_q.weight", p + "attn_k.weight", p + "attn_v.weight"]
        if cfg.qkv_bias:
            names += [p + "attn_q.bias", p + "attn_k.bias", p + "attn_v.bias"]
        if cfg.qk_norm:
            names += [p + "attn_q_norm.weight", p + "attn_k_norm.weight"]
        names += [p + "attn_output.weight", p + "ffn_norm.weight", p + "ffn_gate.weight",
                  p + "ffn_up.weight", p + "ffn_down.weight"]
    return names


def quantize_weights(W, quant):
    """-> (dict name -> (ggml type, bytes)), dict of dequantized weights."""
    qfun = {"q8_0": quantize_q8_0, "q4_0": quantize_q4_0}[quant]
    qtype = {"q8_0": GGML_Q8_0, "q4_0": GGML_Q4_0}[quant]
    packed, deq = {}, {}
    for name, a in W.items():
        if a.ndim == 2:
            raw, d = qfun(a)
            packed[name] = (qtype, raw)
            deq[name] = d
        else:
            packed[name] = (GGML_F32, a.astype("<f4").tobytes())
            deq[name] = a
    return packed, deq


# ---------------------------------------------------------------------------
# Reference forward pass (PyTorch, written from the math).

def rope_cos_sin(cfg, n_pos, dtype):
    """cos/sin tables [n_pos, head_dim/2] for pair index i, including scaling."""
    D = cfg.head_dim
    i = torch.arange(D // 2, dtype=torch.float64)
    pos = torch.arange(n_pos, dtype=torch.float64)[:, None]
    theta_extrap = pos * cfg.rope_base ** (-2.0 * i / D)
    mscale = 1.0
    if cfg.rope_scaling == "linear":
        theta = theta_extrap / cfg.rope_factor
    elif cfg.rope_scaling == "yarn":
        # YaRN as ggml implements it with ext_factor = 1, attn_factor = 1,
        # beta_fast = 32, beta_slow = 1: pair i blends extrapolated and
        # interpolated angles by a linear ramp between two correction dims;
        # cos and sin are both scaled by 1 + 0.1 ln(factor).
        def corr_dim(n_rot):
            return D * math.log(cfg.yarn_orig_ctx / (n_rot * 2 * math.pi)) / (2 * math.log(cfg.rope_base))
        low = max(0.0, math.floor(corr_dim(32.0)))
        high = min(D - 1.0, math.ceil(corr_dim(1.0)))
        y = (i - low) / max(0.001, high - low)
        ramp_mix = 1.0 - y.clamp(0.0, 1.0)          # 1 = pure extrapolation
        theta_interp = theta_extrap / cfg.rope_factor
        theta = theta_interp * (1 - ramp_mix) + theta_extrap * ramp_mix
        mscale = 1.0 + 0.1 * math.log(cfg.rope_factor)
    else:
        theta = theta_extrap
    return (torch.cos(theta) * mscale).to(dtype), (torch.sin(theta) * mscale).to(dtype)


def apply_rope(x, cos, sin, neox):
    """x [T, n_heads, D]; normal layout rotates (2i, 2i+1), NEOX (i, i+D/2)."""
    D = x.shape[-1]
    c, s = cos[:, None, :], sin[:, None, :]
    if neox:
        a, b = x[..., :D // 2], x[..., D // 2:]
        return torch.cat([a * c - b * s, a * s + b * c], dim=-1)
    a, b = x[..., 0::2], x[..., 1::2]
    return torch.stack([a * c - b * s, a * s + b * c], dim=-1).reshape(x.shape)


def rms_norm(x, w, eps):
    return x / torch.sqrt((x * x).mean(dim=-1, keepdim=True) + eps) * w


def forward(cfg, Wt, ids, hidden=False):
    """All-position logits [T, n_vocab] for token ids; Wt holds torch tensors.
    hidden: the final-norm hidden states [T, n_embd] instead."""
    T = len(ids)
    H, HK, D = cfg.n_head, cfg.n_head_kv, cfg.head_dim
    eps = float(np.float32(cfg.eps))  # the value the GGUF file stores
    dtype = Wt["token_embd.weight"].dtype
    cos, sin = rope_cos_sin(cfg, T, dtype)
    neox = cfg.arch in ("qwen2", "qwen3")
    mask = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)
    x = Wt["token_embd.weight"][torch.tensor(ids)]
    for l in range(cfg.n_layer):
        p = "blk.%d." % l
        h = rms_norm(x, Wt[p + "attn_norm.weight"], eps)
        q = h @ Wt[p + "attn_q.weight"].T
        k = h @ Wt[p + "attn_k.weight"].T
        v = h @ Wt[p + "attn_v.weight"].T
        if cfg.qkv_bias:
            q = q + Wt[p + "attn_q.bias"]
            k = k + Wt[p + "attn_k.bias"]
            v = v + Wt[p + "attn_v.bias"]
        q, k, v = q.view(T, H, D), k.view(T, HK, D), v.view(T, HK, D)
        if cfg.qk_norm:
            q = rms_norm(q, Wt[p + "attn_q_norm.weight"], eps)
            k = rms_norm(k, Wt[p + "attn_k_norm.weight"], eps)
        q, k = apply_rope(q, cos, sin, neox), apply_rope(k, cos, sin, neox)
        group = H // HK
        outs = []
        for hh in range(H):
            kh, vh = k[:, hh // group], v[:, hh // group]
            sc = (q[:, hh] @ kh.T) / math.sqrt(D)
            sc = sc.masked_fill(mask, float("-inf"))
            outs.append(torch.softmax(sc, dim=-1) @ vh)
        x = x + torch.cat(outs, dim=-1) @ Wt[p + "attn_output.weight"].T
        h = rms_norm(x, Wt[p + "ffn_norm.weight"], eps)
        g = torch.nn.functional.silu(h @ Wt[p + "ffn_gate.weight"].T)
        x = x + (g * (h @ Wt[p + "ffn_up.weight"].T)) @ Wt[p + "ffn_down.weight"].T
    x = rms_norm(x, Wt["output_norm.weight"], eps)
    if hidden:
        return x
    head = Wt["output.weight"] if "output.weight" in Wt else Wt["token_embd.weight"]
    return x @ head.T


def reference(cfg, W, prompt, special):
    """Greedy continuation in float64; returns dict or None if unsuitable."""
    W64 = {k: torch.from_numpy(np.asarray(v, np.float64)) for k, v in W.items()}
    ids = list(prompt)
    margins = []
    last_logits = None
    for step in range(N_GEN):
        logits = forward(cfg, W64, ids)[-1]
        if step == 0:
            last_logits = logits.clone()
        top = torch.topk(logits, 2).values
        margins.append(float(top[0] - top[1]))
        ids.append(int(torch.argmax(logits)))
    gen = ids[len(prompt):]
    if min(margins) <= MIN_MARGIN or len(set(gen)) < MIN_DISTINCT or special & set(gen):
        return None
    # float32 run of the same code on the same sequence must agree on every argmax
    W32 = {k: torch.from_numpy(np.asarray(v, np.float32)) for k, v in W.items()}
    l32 = forward(cfg, W32, ids[:-1])
    am32 = torch.argmax(l32[len(prompt) - 1:], dim=-1).tolist()
    assert am32 == gen, (cfg.name, am32, gen)
    err32 = float((l32[len(prompt) - 1].double() - last_logits).abs().max())
    assert err32 < 1e-3, (cfg.name, err32)
    return {"greedy": gen, "logits": last_logits.numpy().astype("<f4"),
            "margins": margins, "min_margin": min(margins), "f32_err": err32}


# ---------------------------------------------------------------------------
# Writing and checking one fixture.

def model_kvs(cfg, name, tok_kvs, ftype):
    a = cfg.arch
    kvs = [("general.architecture", T_STR, a),
           ("general.name", T_STR, "kiln-fixture-" + name),
           ("general.file_type", T_U32, ftype),
           (a + ".context_length", T_U32, cfg.ctx),
           (a + ".embedding_length", T_U32, cfg.n_embd),
           (a + ".block_count", T_U32, cfg.n_layer),
           (a + ".feed_forward_length", T_U32, cfg.n_ff),
           (a + ".attention.head_count", T_U32, cfg.n_head),
           (a + ".attention.head_count_kv", T_U32, cfg.n_head_kv),
           (a + ".attention.layer_norm_rms_epsilon", T_F32, cfg.eps),
           (a + ".rope.freq_base", T_F32, cfg.rope_base)]
    if cfg.write_key_length:
        kvs += [(a + ".attention.key_length", T_U32, cfg.head_dim),
                (a + ".attention.value_length", T_U32, cfg.head_dim)]
    else:
        assert cfg.head_dim * cfg.n_head == cfg.n_embd
    if cfg.arch == "llama":
        kvs.append((a + ".rope.dimension_count", T_U32, cfg.head_dim))
    if cfg.rope_scaling:
        kvs += [(a + ".rope.scaling.type", T_STR, cfg.rope_scaling),
                (a + ".rope.scaling.factor", T_F32, cfg.rope_factor)]
        if cfg.rope_scaling == "yarn":
            kvs.append((a + ".rope.scaling.original_context_length", T_U32, cfg.yarn_orig_ctx))
    return kvs + tok_kvs


def check_written(path, kvs, names, packed, W_expect):
    """Independent re-parse: keys, types, values, tensor layout and contents."""
    g = GGUFFile(path)
    assert g.kv_order == [kv[0] for kv in kvs], path
    for kv in kvs:
        t, v, e = g.kv[kv[0]]
        assert t == kv[1], kv[0]
        if t == T_ARR:
            assert e == kv[3], kv[0]
            if e == T_STR:
                assert [bytes(s) if not isinstance(s, str) else s.encode() for s in kv[2]] == v, kv[0]
            else:
                assert np.array_equal(np.asarray(kv[2]), v), kv[0]
        elif t == T_STR:
            want = kv[2].encode() if isinstance(kv[2], str) else kv[2]
            assert v == want, kv[0]
        elif t == T_F32:
            assert v == np.float32(kv[2]), kv[0]
        else:
            assert v == kv[2], kv[0]
    assert g.tensor_order == names, path
    assert g.data_start % ALIGN == 0
    end = 0
    for n in names:
        ne, gtype, off = g.tensors[n]
        assert list(ne) == list(reversed(W_expect[n].shape)), n
        assert gtype == packed[n][0], n
        assert g.tensor_bytes(n) == packed[n][1], n
        assert np.array_equal(g.tensor_f32(n), W_expect[n].astype(np.float32)), n
        end = max(end, off + tensor_nbytes(ne, gtype))
    assert g.data_start + align_up(end) == len(g.buf), path


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def describe(cfg, n_vocab):
    parts = ["%s: n_vocab %d, n_embd %d, n_layer %d, n_head %d, n_head_kv %d, head_dim %d, n_ff %d, "
             "rms eps %g, rope base %g (%s layout)" %
             (cfg.arch, n_vocab, cfg.n_embd, cfg.n_layer, cfg.n_head, cfg.n_head_kv, cfg.head_dim,
              cfg.n_ff, cfg.eps, cfg.rope_base, "NEOX" if cfg.arch != "llama" else "normal")]
    if cfg.rope_scaling == "linear":
        parts.append("linear rope scaling factor %g" % cfg.rope_factor)
    if cfg.rope_scaling == "yarn":
        parts.append("YaRN factor %g, original ctx %d, ext_factor 1, attn_factor 1, beta_fast 32, "
                     "beta_slow 1, mscale 1+0.1*ln(factor) on cos and sin" %
                     (cfg.rope_factor, cfg.yarn_orig_ctx))
    parts.append("tied output (no output.weight)" if cfg.tied else "untied output.weight")
    if cfg.qkv_bias:
        parts.append("q/k/v biases")
    if cfg.qk_norm:
        parts.append("per-head q/k RMSNorm before RoPE; key_length %d != n_embd/n_head" % cfg.head_dim)
    return "; ".join(parts)


def emit(cfg, name, n_vocab, tok_kvs, prompt, text, add_bos, W, packed, ref, ftype, seed, extra):
    names = tensor_order(cfg)
    kvs = model_kvs(cfg, name, tok_kvs, ftype)
    tensors = [(n, list(reversed(W[n].shape)), packed[n][0], (lambda b=packed[n][1]: b)) for n in names]
    gguf = os.path.join(OUT_DIR, name + ".gguf")
    write_gguf(gguf, kvs, tensors)
    check_written(gguf, kvs, names, packed, W)
    with open(os.path.join(OUT_DIR, name + ".logits.f32"), "wb") as f:
        f.write(ref["logits"].tobytes())
    notes = ("%s. Random weights, seed %d. Prompt = %s%s tokenized by llama.cpp (%s.out entry %d). "
             "Greedy ids come from a float64 PyTorch forward that recomputes the whole sequence each "
             "step, never stopping at EOS; logits_file holds float32 logits of the last prompt position. "
             "Smallest top-2 logit margin over the 32 steps: %.4g. Max |float32 - float64| logit at "
             "the last prompt position: %.2g.%s" %
             (describe(cfg, n_vocab), seed, "BOS + " if add_bos else "", json.dumps(text), cfg.vocab,
              cfg.prompt_entry, ref["min_margin"], ref["f32_err"], extra))
    meta = {"model": name + ".gguf", "prompt_ids": prompt, "n_vocab": n_vocab,
            "greedy_ids": ref["greedy"], "logits_file": name + ".logits.f32",
            "greedy_top2_margins": [round(m, 6) for m in ref["margins"]], "notes": notes}
    with open(os.path.join(OUT_DIR, name + ".json"), "w", encoding="utf-8") as f:
        # one key per line, lists kept on one line
        f.write("{\n" + ",\n".join("  %s: %s" % (json.dumps(k), json.dumps(v, ensure_ascii=False))
                                      for k, v in meta.items()) + "\n}\n")
    print("%-16s greedy %s... min margin %.4f" % (name, ref["greedy"][:8], ref["min_margin"]))


def f32_packed(W):
    return {n: (GGML_F32, a.astype("<f4").tobytes()) for n, a in W.items()}


def gen_fixture(cfg):
    tok_kvs, n_vocab, special, prompt, text, add_bos = load_vocab(cfg)
    quants = QUANT_OF.get(cfg.name, [])
    for seed in range(cfg.seed, cfg.seed + 100):
        W = make_weights(cfg, n_vocab, seed)
        ref = reference(cfg, W, prompt, special)
        if ref is None:
            continue
        qres = []
        for qn in quants:
            packed, deq = quantize_weights(W, qn)
            qref = reference(cfg, deq, prompt, special)
            if qref is None:
                break
            qres.append((qn, packed, deq, qref))
        if len(qres) == len(quants):
            break
    else:
        raise SystemExit("%s: no seed gives a usable greedy continuation" % cfg.name)
    emit(cfg, cfg.name, n_vocab, tok_kvs, prompt, text, add_bos, W, f32_packed(W), ref,
         FTYPE_ALL_F32, seed, "")
    for qn, packed, deq, qref in qres:
        ftype = {"q8_0": FTYPE_MOSTLY_Q8_0, "q4_0": FTYPE_MOSTLY_Q4_0}[qn]
        diff = float(np.abs(qref["logits"] - ref["logits"]).max())
        extra = (" Same weights as %s.gguf with every 2-D tensor quantized to %s by ggml's reference "
                 "quantizer; reference outputs computed from the dequantized weights. Max |logit - %s "
                 "logit| at the last prompt position: %.3g (how strongly this random network amplifies "
                 "weight rounding; activation rounding in a runtime is amplified alike)."
                 % (cfg.name, qn.upper(), cfg.name, diff))
        emit(cfg, "%s-%s" % (cfg.name, qn), n_vocab, tok_kvs, prompt, text, add_bos, deq, packed, qref,
             ftype, seed, extra)


# ---------------------------------------------------------------------------
# Embedding fixtures: a random-weight bert encoder and a qwen3 decoder used as
# an embedder, each with reference vectors for real tokenizations.
#
# Both use the WordPiece vocab ggml-vocab-bert-bge.gguf (30522 tokens, 0.6 MB
# of metadata; the GPT-2 vocab alone would take 1.8 MB).  Inputs are entries
# of its .inp file; their ids are llama.cpp's .out tokenization wrapped in
# [CLS] ... [SEP], exactly what kiln's tokenizer gives with add_special.
# Context length 64, so entry 45 (162 ids) is over the limit; its reference is
# the truncated form: the first 63 ids and the closing [SEP].

EMBED_VOCAB = os.path.join(HERE, "data", "vocab", "ggml-vocab-bert-bge.gguf")
EMBED_ENTRIES = [11, 0, 19, 20, 32, 22, 45]   # 4 .. 28 tokens, then 162
EMBED_CTX = 64

BERT_CFG = Cfg(name="bert-embed", arch="bert", n_embd=32, n_layer=2, n_head=4, head_dim=8, n_ff=64,
               eps=1e-12, ctx=EMBED_CTX, n_types=2, pooling=1, seed=5000)
QWEN3_EMBED_CFG = Cfg(name="qwen3-embedding", arch="qwen3", n_embd=16, n_layer=2, n_head=4, n_head_kv=2,
                      head_dim=8, n_ff=48, eps=1e-6, rope_base=1000000.0, ctx=EMBED_CTX, tied=True,
                      qk_norm=True, write_key_length=True, seed=6000)


def embed_inputs():
    g = GGUFFile(EMBED_VOCAB)
    tok_kvs = [(k,) + (g.kv[k][0], g.kv[k][1]) + ((g.kv[k][2],) if g.kv[k][0] == T_ARR else ())
               for k in g.kv_order if k.startswith("tokenizer.")]
    n_vocab = len(g.get("tokenizer.ggml.tokens"))
    cls, sep = int(g.get("tokenizer.ggml.cls_token_id")), int(g.get("tokenizer.ggml.seperator_token_id"))
    texts = open(EMBED_VOCAB + ".inp", encoding="utf-8").read().split("\n__ggml_vocab_test__\n")
    outs = open(EMBED_VOCAB + ".out", encoding="utf-8").read().split("\n")
    inputs = []
    for e in EMBED_ENTRIES:
        ids = [cls] + [int(t) for t in outs[e].split()] + [sep]
        n_full = len(ids)
        if n_full > EMBED_CTX:
            ids = ids[:EMBED_CTX - 1] + [sep]
        inputs.append({"entry": e, "text": texts[e], "n_tokens_full": n_full, "ids": ids,
                       "truncated": n_full > EMBED_CTX})
    return tok_kvs, n_vocab, inputs


def make_bert_weights(cfg, n_vocab, seed):
    rng = np.random.default_rng(seed)
    E, F = cfg.n_embd, cfg.n_ff
    f32 = np.float32

    def lin(n_out, n_in):
        return (rng.standard_normal((n_out, n_in)) / math.sqrt(n_in)).astype(f32)

    def vec(n, mean, sd):
        return (mean + sd * rng.standard_normal(n)).astype(f32)

    W = {"token_embd.weight": rng.standard_normal((n_vocab, E)).astype(f32),
         "token_types.weight": rng.standard_normal((cfg.n_types, E)).astype(f32),
         "position_embd.weight": rng.standard_normal((cfg.ctx, E)).astype(f32),
         "token_embd_norm.weight": vec(E, 1.0, 0.2), "token_embd_norm.bias": vec(E, 0.0, 0.1)}
    for i in range(cfg.n_layer):
        p = "blk.%d." % i
        for t in ("attn_q", "attn_k", "attn_v", "attn_output"):
            W[p + t + ".weight"] = lin(E, E)
            W[p + t + ".bias"] = vec(E, 0.0, 0.1)
        W[p + "attn_output_norm.weight"] = vec(E, 1.0, 0.2)
        W[p + "attn_output_norm.bias"] = vec(E, 0.0, 0.1)
        W[p + "ffn_up.weight"] = lin(F, E)
        W[p + "ffn_up.bias"] = vec(F, 0.0, 0.1)
        W[p + "ffn_down.weight"] = lin(E, F)
        W[p + "ffn_down.bias"] = vec(E, 0.0, 0.1)
        W[p + "layer_output_norm.weight"] = vec(E, 1.0, 0.2)
        W[p + "layer_output_norm.bias"] = vec(E, 0.0, 0.1)
    return W


def bert_tensor_order(cfg):
    names = ["token_embd.weight", "token_types.weight", "position_embd.weight",
             "token_embd_norm.weight", "token_embd_norm.bias"]
    for i in range(cfg.n_layer):
        p = "blk.%d." % i
        for t in ("attn_q", "attn_k", "attn_v", "attn_output"):
            names += [p + t + ".weight", p + t + ".bias"]
        names += [p + "attn_output_norm.weight", p + "attn_output_norm.bias", p + "ffn_up.weight",
                  p + "ffn_up.bias", p + "ffn_down.weight", p + "ffn_down.bias",
                  p + "layer_output_norm.weight", p + "layer_output_norm.bias"]
    return names


def layer_norm(x, w, b, eps):
    mu = x.mean(dim=-1, keepdim=True)
    var = ((x - mu) ** 2).mean(dim=-1, keepdim=True)
    return (x - mu) / torch.sqrt(var + eps) * w + b


def gelu_tanh(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def bert_forward(cfg, Wt, ids):
    """Pooled (mean) final hidden state of one unpadded sequence."""
    T, H, D = len(ids), cfg.n_head, cfg.head_dim
    eps = float(np.float32(cfg.eps))
    x = (Wt["token_embd.weight"][torch.tensor(ids)] + Wt["token_types.weight"][0] +
         Wt["position_embd.weight"][:T])
    x = layer_norm(x, Wt["token_embd_norm.weight"], Wt["token_embd_norm.bias"], eps)
    for l in range(cfg.n_layer):
        p = "blk.%d." % l
        q, k, v = ((x @ Wt[p + t + ".weight"].T + Wt[p + t + ".bias"]).view(T, H, D)
                   for t in ("attn_q", "attn_k", "attn_v"))
        att = torch.softmax(torch.einsum("thd,uhd->htu", q, k) / math.sqrt(D), dim=-1)  # no mask: all real
        o = torch.einsum("htu,uhd->thd", att, v).reshape(T, H * D)
        x = x + o @ Wt[p + "attn_output.weight"].T + Wt[p + "attn_output.bias"]
        x = layer_norm(x, Wt[p + "attn_output_norm.weight"], Wt[p + "attn_output_norm.bias"], eps)
        h = gelu_tanh(x @ Wt[p + "ffn_up.weight"].T + Wt[p + "ffn_up.bias"])
        x = x + h @ Wt[p + "ffn_down.weight"].T + Wt[p + "ffn_down.bias"]
        x = layer_norm(x, Wt[p + "layer_output_norm.weight"], Wt[p + "layer_output_norm.bias"], eps)
    return x.mean(dim=0)


def unit(v):
    v = np.asarray(v, np.float64)
    return v / np.linalg.norm(v)


def embed_refs(fn, W, inputs):
    """Unit reference vectors in float64, checked against a float32 run."""
    W64 = {k: torch.from_numpy(np.asarray(v, np.float64)) for k, v in W.items()}
    W32 = {k: torch.from_numpy(np.asarray(v, np.float32)) for k, v in W.items()}
    vecs, worst = [], 1.0
    for inp in inputs:
        v64 = unit(fn(W64, inp["ids"]).numpy())
        v32 = unit(fn(W32, inp["ids"]).numpy())
        worst = min(worst, float(v64 @ v32))
        vecs.append(v64)
    assert worst > 0.999999, worst
    return vecs, worst


def emit_embed(cfg, kvs, names, W, packed, inputs, vecs, f32_cos, notes):
    gguf = os.path.join(OUT_DIR, cfg.name + ".gguf")
    tensors = [(n, list(reversed(W[n].shape)), packed[n][0], (lambda b=packed[n][1]: b)) for n in names]
    write_gguf(gguf, kvs, tensors)
    check_written(gguf, kvs, names, packed, W)
    meta = {"model": cfg.name + ".gguf", "n_ctx": cfg.ctx, "n_embd": cfg.n_embd,
            "f32_min_cosine": round(f32_cos, 12), "notes": notes,
            "inputs": [dict(inp, vector=[float("%.9g" % x) for x in v]) for inp, v in zip(inputs, vecs)]}
    with open(os.path.join(OUT_DIR, cfg.name + ".json"), "w", encoding="utf-8") as f:
        f.write("{\n" + ",\n".join("  %s: %s" % (json.dumps(k), json.dumps(v, ensure_ascii=False))
                                      for k, v in meta.items() if k != "inputs"))
        f.write(',\n  "inputs": [\n' + ",\n".join("    " + json.dumps(i, ensure_ascii=False)
                                                  for i in meta["inputs"]) + "\n  ]\n}\n")
    print("%-16s %d reference vectors, float32 min cosine %.9f" % (cfg.name, len(vecs), f32_cos))


def gen_bert_embed():
    cfg = BERT_CFG
    tok_kvs, n_vocab, inputs = embed_inputs()
    W = make_bert_weights(cfg, n_vocab, cfg.seed)
    packed = f32_packed(W)
    # token_embd as Q4_0 keeps the file small; the reference uses its dequantized values
    packed["token_embd.weight"], W["token_embd.weight"] = (lambda r: ((GGML_Q4_0, r[0]), r[1]))(
        quantize_q4_0(W["token_embd.weight"]))
    vecs, f32_cos = embed_refs(lambda Wt, ids: bert_forward(cfg, Wt, ids), W, inputs)
    a = "bert"
    kvs = [("general.architecture", T_STR, a),
           ("general.name", T_STR, "kiln-fixture-" + cfg.name),
           ("general.file_type", T_U32, FTYPE_MOSTLY_Q4_0),
           (a + ".context_length", T_U32, cfg.ctx),
           (a + ".embedding_length", T_U32, cfg.n_embd),
           (a + ".block_count", T_U32, cfg.n_layer),
           (a + ".feed_forward_length", T_U32, cfg.n_ff),
           (a + ".attention.head_count", T_U32, cfg.n_head),
           (a + ".attention.layer_norm_epsilon", T_F32, cfg.eps),
           (a + ".attention.causal", T_BOOL, False),
           (a + ".pooling_type", T_U32, cfg.pooling),
           ("kiln.embedding.query_prefix", T_STR, "query: "),
           ("kiln.embedding.document_prefix", T_STR, "")] + tok_kvs
    notes = ("bert: n_vocab %d, n_embd %d, n_layer %d, n_head %d (head_dim %d), n_ff %d, LayerNorm eps %g, "
             "context %d, mean pooling, random weights seed %d; token_embd Q4_0, everything else F32. "
             "x = LN(tok + type[0] + pos); per layer x = LN(x + O(softmax(QK^T/sqrt(hd))V) + bo), "
             "x = LN(x + down(gelu_tanh(up x + b_up)) + b_down); vector = unit(mean over tokens). "
             "Query prefix 'query: ' and empty document prefix come from kiln.embedding.* keys. "
             "Vectors: float64 PyTorch, unit length."
             % (n_vocab, cfg.n_embd, cfg.n_layer, cfg.n_head, cfg.head_dim, cfg.n_ff, cfg.eps, cfg.ctx,
                cfg.seed))
    emit_embed(cfg, kvs, bert_tensor_order(cfg), W, packed, inputs, vecs, f32_cos, notes)


def gen_qwen3_embed():
    cfg = QWEN3_EMBED_CFG
    tok_kvs, n_vocab, inputs = embed_inputs()
    W = make_weights(cfg, n_vocab, cfg.seed)
    packed = f32_packed(W)
    # token_embd as F16 keeps the file small; the reference uses the rounded values
    W["token_embd.weight"] = W["token_embd.weight"].astype("<f2").astype(np.float32)
    packed["token_embd.weight"] = (GGML_F16, W["token_embd.weight"].astype("<f2").tobytes())
    vecs, f32_cos = embed_refs(lambda Wt, ids: forward(cfg, Wt, ids, hidden=True)[-1], W, inputs)
    notes = ("%s. Used as an embedder: no pooling_type key (kiln defaults to the last token for decoders); "
             "vector = unit(final-RMSNorm hidden state of the last token, the [SEP]). general.name ends in "
             "qwen3-embedding, so kiln applies the Qwen3-Embedding query instruction. token_embd F16, "
             "the rest F32; random weights seed %d; context %d. Vectors: float64 PyTorch, unit length."
             % (describe(cfg, n_vocab), cfg.seed, cfg.ctx))
    emit_embed(cfg, model_kvs(cfg, cfg.name, tok_kvs, FTYPE_MOSTLY_F16), tensor_order(cfg), W, packed,
               inputs, vecs, f32_cos, notes)


# ---------------------------------------------------------------------------
# Scripted tool-call fixture: a model that always answers with the same
# reasoning and tool call, for end-to-end tests of the server's output
# parsing (tests/e2e/tools.test.mjs).
#
# It is a bigram model: attn_output and ffn_down are zero, so the residual
# stream at every position is the current token's embedding and the logits
# depend on that token alone.  The tokens that start a scripted step (the
# prompt's final "\n" and every chain token but the last) get orthonormal
# random embedding directions (RMS 1); the LM-head row of each step's
# successor is TOOLCALL_LOGIT / n_embd times its predecessor's embedding, and
# every other row is zero.  With output_norm = 1 the successor's logit is
# TOOLCALL_LOGIT and every other logit 0 (up to rounding), whatever the
# position or the earlier context.  Every chain token is distinct and none is
# "\n", so greedy decoding walks the chain once and stops at <|im_end|>.
#
# The vocabulary is byte-level BPE (tokenizer model "gpt2", pre-tokenizer
# "qwen2"): the 256 byte tokens (id = byte value), the chain's multi-character
# pieces as ordinary tokens, and Qwen-style special tokens at the end
# (<|im_start|>, <|im_end|>, <|endoftext|> control; <think>, <tool_call> and
# their closers, <tool_response> user-defined, so they appear in decoded
# text).  There are no merges: text outside special tokens encodes one token
# per byte, and the multi-character tokens are only ever written by the model.
# The chat template is the Qwen3 template of tests/gen_templates.py (tools,
# tool calls and results, enable_thinking); its generation prompt ends with
# "<|im_start|>assistant\n" (or "</think>\n\n" with thinking off), i.e. the
# "\n" byte token either way.

TOOLCALL_CFG = Cfg(name="toolcall", arch="qwen3", n_embd=32, n_layer=1, n_head=2, n_head_kv=1, head_dim=16,
                   n_ff=32, eps=1e-6, rope_base=1000000.0, ctx=4096, qk_norm=True, write_key_length=True,
                   seed=9000)
TOOLCALL_LOGIT = 30.0
TOOLCALL_THOUGHT = "I should look up the weather."
TOOLCALL_CALL = {"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}
# The scripted output, one token per entry.  The arguments' JSON is spread
# over five tokens so a streaming client sees several fragments.
TOOLCALL_PIECES = ["<think>", "I should", " look up", " the weather.", "</think>",
                   "<tool_call>", '{"name": "', "get_weather", '", "arguments": ', '{"city": ', '"Paris"',
                   ', "unit": ', '"celsius"', "}}", "</tool_call>", "<|im_end|>"]
TOK_NORMAL, TOK_CONTROL, TOK_USER_DEFINED = 1, 3, 4
TOOLCALL_SPECIALS = [("<|endoftext|>", TOK_CONTROL), ("<|im_start|>", TOK_CONTROL), ("<|im_end|>", TOK_CONTROL),
                     ("<think>", TOK_USER_DEFINED), ("</think>", TOK_USER_DEFINED),
                     ("<tool_call>", TOK_USER_DEFINED), ("</tool_call>", TOK_USER_DEFINED),
                     ("<tool_response>", TOK_USER_DEFINED), ("</tool_response>", TOK_USER_DEFINED)]
TOOLCALL_USER = "What's the weather in Paris?"


def gpt2_byte_chars():
    """GPT-2's byte -> printable character map: '!'..'~', 0xA1..0xAC and
    0xAE..0xFF stand for themselves, the other 68 bytes take U+0100,
    U+0101, ... in byte order."""
    out, nxt = [], 256
    for b in range(256):
        if 0x21 <= b <= 0x7E or 0xA1 <= b <= 0xAC or b >= 0xAE:
            out.append(chr(b))
        else:
            out.append(chr(nxt))
            nxt += 1
    return out


class ToolcallVocab:
    def __init__(self, pieces=TOOLCALL_PIECES, special_list=TOOLCALL_SPECIALS):
        chars = gpt2_byte_chars()
        specials = dict(special_list)
        self.texts = list(chars)                      # id = byte value
        self.types = [TOK_NORMAL] * 256
        self.normal = [p for p in pieces if p not in specials]
        for p in self.normal:
            self.texts.append("".join(chars[b] for b in p.encode("utf-8")))
            self.types.append(TOK_NORMAL)
        for s, ty in special_list:
            self.texts.append(s)
            self.types.append(ty)
        assert len(set(self.texts)) == len(self.texts)
        self.ids = {t: i for i, t in enumerate(self.texts)}
        self.specials = specials
        self.n = len(self.texts)

    def piece_id(self, piece):
        if piece in self.specials:
            return self.ids[piece]
        return 256 + self.normal.index(piece)

    def encode(self, text):
        """Special tokens (longest first), then one token per byte: what a
        byte-level BPE with no merges gives, whatever the pre-tokenizer."""
        alts = sorted(self.specials, key=len, reverse=True)
        out = []
        for part in re.split("(" + "|".join(re.escape(s) for s in alts) + ")", text):
            if part in self.specials:
                out.append(self.ids[part])
            else:
                out.extend(part.encode("utf-8"))
        return out

    def decode(self, ids):
        """Text as a runtime shows it: control tokens produce nothing."""
        byte_of = {c: b for b, c in enumerate(gpt2_byte_chars())}
        out = b""
        for i in ids:
            t = self.texts[i]
            if self.types[i] == TOK_CONTROL:
                continue
            if self.types[i] == TOK_USER_DEFINED:
                out += t.encode("utf-8")
            else:
                out += bytes(byte_of[c] for c in t)
        return out.decode("utf-8")


def toolcall_weights(cfg, vocab, sources, chain):
    rng = np.random.default_rng(cfg.seed)
    E, F, H, HK, D = cfg.n_embd, cfg.n_ff, cfg.n_head, cfg.n_head_kv, cfg.head_dim
    f32 = np.float32
    emb = rng.standard_normal((vocab.n, E))
    q, _ = np.linalg.qr(rng.standard_normal((E, len(sources))))
    emb[sources] = q.T * math.sqrt(E)                     # orthogonal rows, RMS 1
    emb = emb.astype(f32)
    out = np.zeros((vocab.n, E), f32)
    for s, t in zip(sources, chain):
        out[t] = emb[s] * f32(TOOLCALL_LOGIT / E)

    def lin(n_out, n_in):
        return (rng.standard_normal((n_out, n_in)) / math.sqrt(n_in)).astype(f32)

    def norm(n):
        return (1.0 + 0.2 * rng.standard_normal(n)).astype(f32)

    W = {"token_embd.weight": emb, "output_norm.weight": np.ones(E, f32), "output.weight": out}
    p = "blk.0."
    W[p + "attn_norm.weight"] = norm(E)
    W[p + "attn_q.weight"] = lin(H * D, E)
    W[p + "attn_k.weight"] = lin(HK * D, E)
    W[p + "attn_v.weight"] = lin(HK * D, E)
    W[p + "attn_q_norm.weight"] = norm(D)
    W[p + "attn_k_norm.weight"] = norm(D)
    W[p + "attn_output.weight"] = np.zeros((E, H * D), f32)
    W[p + "ffn_norm.weight"] = norm(E)
    W[p + "ffn_gate.weight"] = lin(F, E)
    W[p + "ffn_up.weight"] = lin(F, E)
    W[p + "ffn_down.weight"] = np.zeros((E, F), f32)
    return W


def gen_toolcall():
    import gen_templates  # jinja2 (Debian python3-jinja2), only for this fixture
    cfg = TOOLCALL_CFG
    vocab = ToolcallVocab()
    text = "".join(p for p in TOOLCALL_PIECES if p != "<|im_end|>")
    assert text == ("<think>" + TOOLCALL_THOUGHT + "</think><tool_call>" + json.dumps(TOOLCALL_CALL) +
                    "</tool_call>")
    chain = [vocab.piece_id(p) for p in TOOLCALL_PIECES]
    newline = ord("\n")
    sources = [newline] + chain[:-1]
    assert len(set(sources)) == len(sources) and newline not in chain and len(sources) <= cfg.n_embd

    template = gen_templates.TEMPLATES["qwen3"]
    env = gen_templates.make_env(True)
    tools = [gen_templates.TOOLS[0]]
    messages = [{"role": "user", "content": TOOLCALL_USER}]
    prompt_text = env.from_string(template).render(messages=messages, tools=tools, add_generation_prompt=True,
                                                   bos_token="<|endoftext|>", eos_token="<|im_end|>")
    prompt = vocab.encode(prompt_text)
    assert prompt_text.endswith("<|im_start|>assistant\n") and prompt[-1] == newline
    # the other prompts the e2e test sends end in the same token
    call = {"id": "call_0", "type": "function", "function": TOOLCALL_CALL}
    for extra in ({"enable_thinking": False},
                  {"messages": messages + [{"role": "assistant", "content": "", "tool_calls": [call]},
                                           {"role": "tool", "content": '{"temperature": 21}',
                                            "tool_call_id": "call_0"}]}):
        v = dict(messages=messages, tools=tools, add_generation_prompt=True, bos_token="<|endoftext|>",
                 eos_token="<|im_end|>")
        v.update(extra)
        assert vocab.encode(env.from_string(template).render(**v))[-1] == newline

    W = toolcall_weights(cfg, vocab, sources, chain)
    W64 = {k: torch.from_numpy(np.asarray(v, np.float64)) for k, v in W.items()}
    ids, margins = list(prompt), []
    eot = vocab.ids["<|im_end|>"]
    for _ in range(len(chain) + 4):
        logits = forward(cfg, W64, ids)[-1]
        top = torch.topk(logits, 2)
        margins.append(float(top.values[0] - top.values[1]))
        ids.append(int(top.indices[0]))
        if ids[-1] == eot:
            break
    gen = ids[len(prompt):]
    assert gen == chain, (gen, chain)
    assert min(margins) > TOOLCALL_LOGIT - 1e-3, margins
    W32 = {k: torch.from_numpy(np.asarray(v, np.float32)) for k, v in W.items()}
    am32 = torch.argmax(forward(cfg, W32, ids[:-1])[len(prompt) - 1:], dim=-1).tolist()
    assert am32 == gen, am32
    expected = vocab.decode(gen)
    assert expected == text

    tok_kvs = [("tokenizer.ggml.model", T_STR, "gpt2"),
               ("tokenizer.ggml.pre", T_STR, "qwen2"),
               ("tokenizer.ggml.tokens", T_ARR, vocab.texts, T_STR),
               ("tokenizer.ggml.token_type", T_ARR, np.array(vocab.types, np.int32), T_I32),
               ("tokenizer.ggml.merges", T_ARR, [], T_STR),
               ("tokenizer.ggml.eos_token_id", T_U32, eot),
               ("tokenizer.ggml.padding_token_id", T_U32, vocab.ids["<|endoftext|>"]),
               ("tokenizer.ggml.bos_token_id", T_U32, vocab.ids["<|endoftext|>"]),
               ("tokenizer.ggml.add_bos_token", T_BOOL, False),
               ("tokenizer.chat_template", T_STR, template)]
    names = tensor_order(cfg)
    kvs = model_kvs(cfg, cfg.name, tok_kvs, FTYPE_ALL_F32)
    packed = f32_packed(W)
    gguf = os.path.join(OUT_DIR, cfg.name + ".gguf")
    write_gguf(gguf, kvs, [(n, list(reversed(W[n].shape)), GGML_F32, (lambda b=packed[n][1]: b)) for n in names])
    check_written(gguf, kvs, names, packed, W)

    notes = ("Scripted bigram model for the server's reasoning and tool-call parsing. %s. attn_output and "
             "ffn_down are zero, so the hidden state is the current token's embedding; the %d tokens that "
             "start a scripted step ('\\n' and the chain but its last token) have orthonormal random "
             "embedding directions (seed %d), output.weight row of each step's successor = %g/n_embd times "
             "the predecessor's embedding, all other rows zero, output_norm 1: the successor's logit is %g "
             "and every other 0. Vocabulary: 256 byte tokens (id = byte), %d chain pieces, %d special "
             "tokens; gpt2 model, qwen2 pre-tokenizer, no merges (prompt text encodes byte by byte). "
             "Template: Qwen3's (tests/gen_templates.py). prompt_text renders messages and tools with "
             "add_generation_prompt; greedy_ids come from a float64 PyTorch forward of the whole sequence "
             "each step (float32 agrees) and end with <|im_end|>; expected_text is their decoded text "
             "(control tokens produce none)."
             % (describe(cfg, vocab.n), len(sources), cfg.seed, TOOLCALL_LOGIT, TOOLCALL_LOGIT,
                len(vocab.normal), len(TOOLCALL_SPECIALS)))
    meta = {"model": cfg.name + ".gguf", "n_vocab": vocab.n, "messages": messages, "tools": tools,
            "prompt_text": prompt_text, "prompt_ids": prompt, "greedy_ids": gen, "pieces": TOOLCALL_PIECES,
            "expected_text": expected, "reasoning": TOOLCALL_THOUGHT, "tool_call": TOOLCALL_CALL,
            "greedy_top2_margins": [round(m, 6) for m in margins], "notes": notes}
    with open(os.path.join(OUT_DIR, cfg.name + ".json"), "w", encoding="utf-8") as f:
        f.write("{\n" + ",\n".join("  %s: %s" % (json.dumps(k), json.dumps(v, ensure_ascii=False))
                                      for k, v in meta.items()) + "\n}\n")
    print("%-16s %d prompt tokens -> %d scripted tokens, %d bytes" %
          (cfg.name, len(prompt), len(gen), os.path.getsize(gguf)))



# ---------------------------------------------------------------------------
# Hybrid fixtures: the Qwen 3.5 family (qwen35, qwen35moe, qwen3next), Gated
# DeltaNet layers between gated full-attention layers, dense or mixture-of-
# experts FFN.  Layouts as llama.cpp reads them (see the file description in
# the repository's tests/data/hybrid/README.md):
#   - recurrent layer: attn_qkv rows [q heads | k heads | v heads], attn_gate
#     (z), ssm_conv1d [K taps per channel], ssm_dt.bias, ssm_a (= -exp(A_log)),
#     ssm_beta + ssm_alpha (qwen35*) or ssm_ba grouped per key head as
#     [beta x r, alpha x r] (qwen3next), ssm_norm, ssm_out;
#   - value head j reads key head j mod Hk (qwen35*) or j // (Hv / Hk)
#     (qwen3next);
#   - attention layer: attn_q rows per head [query | gate], q/k norms, NeoX
#     RoPE on the first n_rot dims, output times sigmoid(gate);
#   - MoE: softmax router (F32), top k renormalized, experts as 3-D tensors,
#     a shared expert gated by sigmoid(ffn_gate_inp_shexp . h).
# The reference runs the delta rule in its recurrent form, token by token,
# in float64, recomputing the whole sequence each greedy step.

STORIES = os.path.join(HERE, "..", "models", "stories260K.gguf")
HYB_PROMPT = 40     # tokens: more than a KV block (16) and a delta-rule chunk (16)

HYBRID = [
    Cfg(name="qwen35", arch="qwen35", n_embd=32, n_layer=6, interval=3, n_head=4, n_head_kv=2, head_dim=16,
        n_rot=8, n_ff=48, Hk=2, Hv=4, Dk=16, K=4, eps=1e-6, rope_base=10000000.0, ctx=4096, n_expert=0,
        grouped=False, ba=False, layer_array=False, mtp=1, seed=9000),
    Cfg(name="qwen35moe", arch="qwen35moe", n_embd=32, n_layer=4, interval=2, n_head=4, n_head_kv=2,
        head_dim=16, n_rot=8, n_ff=64, Hk=2, Hv=4, Dk=16, K=4, eps=1e-6, rope_base=10000.0, ctx=4096,
        n_expert=4, n_used=2, F_exp=32, F_sh=32, grouped=False, ba=False, layer_array=False, mtp=0, seed=9100,
        quant="q8_0"),
    Cfg(name="qwen3next", arch="qwen3next", n_embd=32, n_layer=4, interval=2, n_head=4, n_head_kv=2,
        head_dim=16, n_rot=8, n_ff=64, Hk=2, Hv=4, Dk=16, K=4, eps=1e-6, rope_base=10000.0, ctx=4096,
        n_expert=4, n_used=2, F_exp=32, F_sh=32, grouped=True, ba=True, layer_array=True, mtp=0, seed=9200),
]


def hyb_recurrent(cfg):
    return [(i + 1) % cfg.interval != 0 for i in range(cfg.n_layer)]


def hyb_weights(cfg, n_vocab, seed):
    rng = np.random.default_rng(seed)
    E, D, H, HK = cfg.n_embd, cfg.head_dim, cfg.n_head, cfg.n_head_kv
    Dk, Hk, Hv = cfg.Dk, cfg.Hk, cfg.Hv
    conv_dim, vd = 2 * Hk * Dk + Hv * Dk, Hv * Dk
    f32 = np.float32

    def lin(n_out, n_in, gain=1.0):
        return (rng.standard_normal((n_out, n_in)) * (gain / math.sqrt(n_in))).astype(f32)

    def norm(n):
        return (1.0 + 0.2 * rng.standard_normal(n)).astype(f32)

    def ffn(p, moe):
        if not moe:
            W[p + "ffn_gate.weight"] = lin(cfg.n_ff, E)
            W[p + "ffn_up.weight"] = lin(cfg.n_ff, E)
            W[p + "ffn_down.weight"] = lin(E, cfg.n_ff, 2.0)
            return
        NE, Fe, Fs = cfg.n_expert, cfg.F_exp, cfg.F_sh
        W[p + "ffn_gate_inp.weight"] = lin(NE, E, 2.0)
        W[p + "ffn_gate_exps.weight"] = np.stack([lin(Fe, E) for _ in range(NE)])
        W[p + "ffn_up_exps.weight"] = np.stack([lin(Fe, E) for _ in range(NE)])
        W[p + "ffn_down_exps.weight"] = np.stack([lin(E, Fe, 2.0) for _ in range(NE)])
        W[p + "ffn_gate_inp_shexp.weight"] = (rng.standard_normal(E) / math.sqrt(E)).astype(f32)
        W[p + "ffn_gate_shexp.weight"] = lin(Fs, E)
        W[p + "ffn_up_shexp.weight"] = lin(Fs, E)
        W[p + "ffn_down_shexp.weight"] = lin(E, Fs, 2.0)

    def attention(p):
        W[p + "attn_q.weight"] = lin(2 * H * D, E)
        W[p + "attn_k.weight"] = lin(HK * D, E)
        W[p + "attn_v.weight"] = lin(HK * D, E)
        W[p + "attn_output.weight"] = lin(E, H * D, 3.0)
        W[p + "attn_q_norm.weight"] = norm(D)
        W[p + "attn_k_norm.weight"] = norm(D)

    W = {"token_embd.weight": (rng.standard_normal((n_vocab, E)) * (3.0 / math.sqrt(E))).astype(f32)}
    moe = cfg.n_expert > 0
    for i, rec in enumerate(hyb_recurrent(cfg)):
        p = "blk.%d." % i
        W[p + "attn_norm.weight"] = norm(E)
        if rec:
            W[p + "attn_qkv.weight"] = lin(conv_dim, E, 2.0)
            W[p + "attn_gate.weight"] = lin(vd, E)
            W[p + "ssm_conv1d.weight"] = (0.5 * rng.standard_normal((conv_dim, cfg.K))).astype(f32)
            W[p + "ssm_dt.bias"] = (-0.5 + 0.5 * rng.standard_normal(Hv)).astype(f32)
            W[p + "ssm_a"] = (-np.exp(rng.uniform(-2.0, 0.0, Hv))).astype(f32)
            if cfg.ba:
                W[p + "ssm_ba.weight"] = lin(2 * Hv, E, 2.0)
            else:
                W[p + "ssm_beta.weight"] = lin(Hv, E, 2.0)
                W[p + "ssm_alpha.weight"] = lin(Hv, E, 2.0)
            W[p + "ssm_norm.weight"] = norm(Dk)
            W[p + "ssm_out.weight"] = lin(E, vd, 3.0)
        else:
            attention(p)
        W[p + "post_attention_norm.weight"] = norm(E)
        ffn(p, moe)
    for i in range(cfg.n_layer, cfg.n_layer + cfg.mtp):  # an MTP block (speculative decoding, tests/gen_spec.py)
        p = "blk.%d." % i
        W[p + "attn_norm.weight"] = norm(E)
        attention(p)
        W[p + "post_attention_norm.weight"] = norm(E)
        ffn(p, moe)
        W[p + "nextn.eh_proj.weight"] = lin(E, 2 * E)
        W[p + "nextn.enorm.weight"] = norm(E)
        W[p + "nextn.hnorm.weight"] = norm(E)
    W["output_norm.weight"] = norm(E)
    return W


def hyb_tensor_order(W):
    def key(n):
        if n.startswith("blk."):
            return (1, int(n.split(".")[1]))
        return (0 if n == "token_embd.weight" else 2, 0)
    return sorted(W, key=key)


def l2norm(x, eps):
    n = torch.sqrt((x * x).sum(dim=-1, keepdim=True))
    return x / torch.clamp(n, min=eps)


def act_q8(x):
    """x rounded as a runtime feeding it to a Q8_0 matrix does: float32,
    then Q8_0 blocks of 32 (scale amax / 127 stored as F16)."""
    a = x.detach().numpy().astype(np.float32)
    return torch.from_numpy(quantize_q8_0(a)[1]).to(x.dtype)


def hyb_forward(cfg, Wt, ids, q8=False, hidden=False):
    """All-position logits [T, n_vocab].  q8: the weights are Q8_0 (all
    matrices but the router's), so their inputs are rounded to Q8_0 first
    (as llama.cpp and kiln compute a Q8_0 product).  hidden: also the final
    hidden states after the output norm [T, n_embd] (what an MTP block
    reads).  The head is output.weight, or the token embedding (tied)."""
    qa = act_q8 if q8 else (lambda v: v)
    T = len(ids)
    E, D, H, HK = cfg.n_embd, cfg.head_dim, cfg.n_head, cfg.n_head_kv
    Dk, Hk, Hv, K = cfg.Dk, cfg.Hk, cfg.Hv, cfg.K
    r = Hv // Hk
    eps = float(np.float32(cfg.eps))
    dtype = Wt["token_embd.weight"].dtype
    silu, sig, softplus = torch.nn.functional.silu, torch.sigmoid, torch.nn.functional.softplus
    # NeoX RoPE on the first n_rot dims
    half = cfg.n_rot // 2
    inv = cfg.rope_base ** (-2.0 * torch.arange(half, dtype=torch.float64) / cfg.n_rot)
    ang = torch.arange(T, dtype=torch.float64)[:, None] * inv
    cos, sin = torch.cos(ang).to(dtype)[:, None, :], torch.sin(ang).to(dtype)[:, None, :]

    def rope(x):
        a, b, rest = x[..., :half], x[..., half:cfg.n_rot], x[..., cfg.n_rot:]
        return torch.cat([a * cos - b * sin, a * sin + b * cos, rest], dim=-1)

    mask = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)
    x = Wt["token_embd.weight"][torch.tensor(ids)]
    for l, rec in enumerate(hyb_recurrent(cfg)):
        p = "blk.%d." % l
        h = rms_norm(x, Wt[p + "attn_norm.weight"], eps)
        if rec:
            hq = qa(h)
            qkv = hq @ Wt[p + "attn_qkv.weight"].T                     # [T, conv_dim]
            z = (hq @ Wt[p + "attn_gate.weight"].T).view(T, Hv, Dk)
            if cfg.ba:
                ba = (hq @ Wt[p + "ssm_ba.weight"].T).view(T, Hk, 2 * r)
                b, a = ba[:, :, :r].reshape(T, Hv), ba[:, :, r:].reshape(T, Hv)
            else:
                b, a = hq @ Wt[p + "ssm_beta.weight"].T, hq @ Wt[p + "ssm_alpha.weight"].T
            beta = sig(b)
            g = softplus(a + Wt[p + "ssm_dt.bias"]) * Wt[p + "ssm_a"]     # log decay, <= 0
            w = Wt[p + "ssm_conv1d.weight"]                              # [conv_dim, K]
            padded = torch.cat([torch.zeros(K - 1, qkv.shape[1], dtype=dtype), qkv])
            conv = torch.stack([(padded[t:t + K].T * w).sum(dim=1) for t in range(T)])
            conv = silu(conv)
            q = l2norm(conv[:, :Hk * Dk].view(T, Hk, Dk), eps)
            k = l2norm(conv[:, Hk * Dk:2 * Hk * Dk].view(T, Hk, Dk), eps)
            v = conv[:, 2 * Hk * Dk:].view(T, Hv, Dk)
            S = torch.zeros(Hv, Dk, Dk, dtype=dtype)                     # [head][value][key]
            o = torch.zeros(T, Hv, Dk, dtype=dtype)
            for t in range(T):
                for j in range(Hv):
                    kh = j // r if cfg.grouped else j % Hk
                    S[j] = S[j] * torch.exp(g[t, j])
                    d = beta[t, j] * (v[t, j] - S[j] @ k[t, kh])
                    S[j] = S[j] + torch.outer(d, k[t, kh])
                    o[t, j] = (S[j] @ q[t, kh]) / math.sqrt(Dk)
            o = rms_norm(o, Wt[p + "ssm_norm.weight"], eps) * silu(z)
            out = qa(o.reshape(T, Hv * Dk)) @ Wt[p + "ssm_out.weight"].T
        else:
            hq = qa(h)
            qg = (hq @ Wt[p + "attn_q.weight"].T).view(T, H, 2 * D)
            q, gate = qg[:, :, :D], qg[:, :, D:]
            q = rope(rms_norm(q, Wt[p + "attn_q_norm.weight"], eps))
            k = rope(rms_norm((hq @ Wt[p + "attn_k.weight"].T).view(T, HK, D), Wt[p + "attn_k_norm.weight"], eps))
            v = (hq @ Wt[p + "attn_v.weight"].T).view(T, HK, D)
            outs = []
            for hh in range(H):
                sc = (q[:, hh] @ k[:, hh // (H // HK)].T) / math.sqrt(D)
                outs.append(torch.softmax(sc.masked_fill(mask, float("-inf")), dim=-1) @ v[:, hh // (H // HK)])
            att = torch.stack(outs, dim=1) * sig(gate)
            out = qa(att.reshape(T, H * D)) @ Wt[p + "attn_output.weight"].T
        x = x + out
        h = rms_norm(x, Wt[p + "post_attention_norm.weight"], eps)
        hq = qa(h)
        if cfg.n_expert == 0:
            y = qa(silu(hq @ Wt[p + "ffn_gate.weight"].T) * (hq @ Wt[p + "ffn_up.weight"].T)) @ Wt[p + "ffn_down.weight"].T
        else:
            probs = torch.softmax(h @ Wt[p + "ffn_gate_inp.weight"].T, dim=-1)
            top = torch.topk(probs, cfg.n_used, dim=-1)
            wts = top.values / top.values.sum(dim=-1, keepdim=True)
            y = torch.zeros_like(x)
            for t in range(T):
                for s in range(cfg.n_used):
                    e = int(top.indices[t, s])
                    a = silu(Wt[p + "ffn_gate_exps.weight"][e] @ hq[t]) * (Wt[p + "ffn_up_exps.weight"][e] @ hq[t])
                    y[t] = y[t] + wts[t, s] * (Wt[p + "ffn_down_exps.weight"][e] @ qa(a))
            sh = qa(silu(hq @ Wt[p + "ffn_gate_shexp.weight"].T) * (hq @ Wt[p + "ffn_up_shexp.weight"].T)) \
                @ Wt[p + "ffn_down_shexp.weight"].T
            y = y + sh * sig(h @ Wt[p + "ffn_gate_inp_shexp.weight"])[:, None]
        x = x + y
    x = rms_norm(x, Wt["output_norm.weight"], eps)
    logits = qa(x) @ Wt.get("output.weight", Wt["token_embd.weight"]).T
    return (logits, x) if hidden else logits


def hyb_reference(cfg, W, prompt, special, q8=False):
    W64 = {k: torch.from_numpy(np.asarray(v, np.float64)) for k, v in W.items()}
    ids, margins, last = list(prompt), [], None
    for step in range(N_GEN):
        logits = hyb_forward(cfg, W64, ids, q8)[-1]
        if step == 0:
            last = logits.clone()
        top = torch.topk(logits, 2).values
        margins.append(float(top[0] - top[1]))
        ids.append(int(torch.argmax(logits)))
    gen = ids[len(prompt):]
    if min(margins) <= MIN_MARGIN or len(set(gen)) < MIN_DISTINCT or special & set(gen):
        return None
    W32 = {k: torch.from_numpy(np.asarray(v, np.float32)) for k, v in W.items()}
    l32 = hyb_forward(cfg, W32, ids[:-1], q8)
    am32 = torch.argmax(l32[len(prompt) - 1:], dim=-1).tolist()
    assert am32 == gen, (cfg.name, am32, gen)
    err32 = float((l32[len(prompt) - 1].double() - last).abs().max())
    assert err32 < 1e-3, (cfg.name, err32)
    return {"greedy": gen, "logits": last.numpy().astype("<f4"), "margins": margins,
            "min_margin": min(margins), "f32_err": err32}


def hyb_kvs(cfg, tok_kvs, name, ftype):
    a = cfg.arch
    kvs = [("general.architecture", T_STR, a),
           ("general.name", T_STR, "kiln-fixture-" + name),
           ("general.file_type", T_U32, ftype),
           (a + ".context_length", T_U32, cfg.ctx),
           (a + ".embedding_length", T_U32, cfg.n_embd),
           (a + ".block_count", T_U32, cfg.n_layer + cfg.mtp),
           (a + ".feed_forward_length", T_U32, cfg.n_ff),
           (a + ".attention.head_count", T_U32, cfg.n_head),
           (a + ".attention.head_count_kv", T_U32, cfg.n_head_kv),
           (a + ".attention.key_length", T_U32, cfg.head_dim),
           (a + ".attention.value_length", T_U32, cfg.head_dim),
           (a + ".attention.layer_norm_rms_epsilon", T_F32, cfg.eps),
           (a + ".rope.dimension_count", T_U32, cfg.n_rot),
           (a + ".rope.freq_base", T_F32, cfg.rope_base)]
    if cfg.arch != "qwen3next":
        kvs.append((a + ".rope.dimension_sections", T_ARR, [2, 1, 1, 0], T_I32))
    if cfg.n_expert:
        kvs += [(a + ".expert_count", T_U32, cfg.n_expert), (a + ".expert_used_count", T_U32, cfg.n_used),
                (a + ".expert_feed_forward_length", T_U32, cfg.F_exp),
                (a + ".expert_shared_feed_forward_length", T_U32, cfg.F_sh)]
    kvs += [(a + ".ssm.conv_kernel", T_U32, cfg.K), (a + ".ssm.state_size", T_U32, cfg.Dk),
            (a + ".ssm.group_count", T_U32, cfg.Hk), (a + ".ssm.time_step_rank", T_U32, cfg.Hv),
            (a + ".ssm.inner_size", T_U32, cfg.Hv * cfg.Dk)]
    if cfg.layer_array:
        kvs.append((a + ".attention.recurrent_layers", T_ARR, [int(x) for x in hyb_recurrent(cfg)], T_U8))
    else:
        kvs.append((a + ".full_attention_interval", T_U32, cfg.interval))
    if cfg.mtp:
        kvs.append((a + ".nextn_predict_layers", T_U32, cfg.mtp))
    return kvs + tok_kvs


def gen_hybrid(cfg):
    g = GGUFFile(STORIES)
    tok_kvs = [(k,) + (g.kv[k][0], g.kv[k][1]) + ((g.kv[k][2],) if g.kv[k][0] == T_ARR else ())
               for k in g.kv_order if k.startswith("tokenizer.")]
    n_vocab = len(g.get("tokenizer.ggml.tokens"))
    types = g.get("tokenizer.ggml.token_type")
    special = {i for i, t in enumerate(types) if t in (2, 3, 5)} | {1, 2}
    quant = getattr(cfg, "quant", None)
    for seed in range(cfg.seed, cfg.seed + 100):
        rng = np.random.default_rng(seed)
        prompt = [1] + [int(t) for t in rng.integers(3, n_vocab, HYB_PROMPT - 1)]
        W = hyb_weights(cfg, n_vocab, seed)
        ref = hyb_reference(cfg, W, prompt, special)
        if ref is None:
            continue
        if quant:
            qpacked, qdeq = hyb_quantize(W)
            qref = hyb_reference(cfg, qdeq, prompt, special, q8=True)
            if qref is None:
                continue
        break
    else:
        raise SystemExit("%s: no seed gives a usable greedy continuation" % cfg.name)
    hyb_emit(cfg, cfg.name, tok_kvs, n_vocab, prompt, W, f32_packed(W), ref, seed, FTYPE_ALL_F32, "")
    if quant:
        diff = float(np.abs(qref["logits"] - ref["logits"]).max() / np.abs(ref["logits"]).max())
        hyb_emit(cfg, cfg.name + "-" + quant, tok_kvs, n_vocab, prompt, qdeq, qpacked, qref, seed,
                 FTYPE_MOSTLY_Q8_0,
                 " Same weights as %s.gguf with the 2-D and 3-D weights (experts too) in Q8_0 by ggml's "
                 "reference quantizer, the router, ssm_conv1d and 1-D tensors F32, as llama-quantize does; the "
                 "reference runs on the dequantized weights with each Q8_0 product's input rounded to Q8_0 "
                 "blocks, as a runtime computes it (this random network's routing flips on smaller changes). "
                 "Max relative logit change from the F32 model: %.3g." %
                 (cfg.name, diff))


def hyb_quantize(W):
    """Q8_0 for the matrices and expert tensors llama-quantize quantizes."""
    packed, deq = {}, {}
    for name, a in W.items():
        if a.ndim >= 2 and "ffn_gate_inp.weight" not in name and "ssm_conv1d" not in name:
            raw, d = quantize_q8_0(a)
            packed[name], deq[name] = (GGML_Q8_0, raw), d
        else:
            packed[name], deq[name] = (GGML_F32, a.astype("<f4").tobytes()), a
    return packed, deq


def hyb_emit(cfg, name, tok_kvs, n_vocab, prompt, W, packed, ref, seed, ftype, extra):
    names = hyb_tensor_order(W)
    kvs = hyb_kvs(cfg, tok_kvs, name, ftype)
    tensors = [(n, list(reversed(W[n].shape)), packed[n][0], (lambda b=packed[n][1]: b)) for n in names]
    path = os.path.join(OUT_DIR, name + ".gguf")
    write_gguf(path, kvs, tensors)
    check_written(path, kvs, names, packed, W)
    with open(os.path.join(OUT_DIR, name + ".logits.f32"), "wb") as f:
        f.write(ref["logits"].tobytes())
    kinds = "".join("R" if r else "A" for r in hyb_recurrent(cfg))
    notes = ("%s: n_vocab %d (stories260K's tokenizer), n_embd %d, layers %s (R Gated DeltaNet, A full "
             "attention%s)%s; attention %d/%d heads of %d, NeoX RoPE on %d dims, base %g; DeltaNet %d key heads, "
             "%d value heads (%s), head %d, conv %d taps; FFN %s; tied output. Random weights, seed %d. "
             "Prompt: BOS and %d random ids. Greedy ids from a float64 PyTorch forward with the recurrent delta "
             "rule, recomputing the sequence each step; logits_file holds float32 logits at the last prompt "
             "position. Smallest top-2 margin: %.4g; max |float32 - float64| logit: %.2g.%s" %
             (cfg.arch, n_vocab, cfg.n_embd, kinds, ", from attention.recurrent_layers" if cfg.layer_array else
              ", full_attention_interval %d" % cfg.interval,
              " plus %d MTP block(s) (run for speculative decoding only)" % cfg.mtp if cfg.mtp else "",
              cfg.n_head, cfg.n_head_kv, cfg.head_dim, cfg.n_rot, cfg.rope_base, cfg.Hk, cfg.Hv,
              "grouped" if cfg.grouped else "tiled", cfg.Dk, cfg.K,
              "%d experts, %d used, width %d, shared expert %d%s" % (cfg.n_expert, cfg.n_used, cfg.F_exp, cfg.F_sh,
                                                                    ", fused ssm_ba" if cfg.ba else "")
              if cfg.n_expert else "dense SwiGLU %d" % cfg.n_ff,
              seed, HYB_PROMPT - 1, ref["min_margin"], ref["f32_err"], extra))
    meta = {"model": name + ".gguf", "prompt_ids": prompt, "n_vocab": n_vocab, "greedy_ids": ref["greedy"],
            "logits_file": name + ".logits.f32",
            "greedy_top2_margins": [round(m, 6) for m in ref["margins"]], "notes": notes}
    with open(os.path.join(OUT_DIR, name + ".json"), "w", encoding="utf-8") as f:
        f.write("{\n" + ",\n".join("  %s: %s" % (json.dumps(k), json.dumps(v, ensure_ascii=False))
                                      for k, v in meta.items()) + "\n}\n")
    print("%-16s greedy %s... min margin %.4f (%.0f KB)" % (name, ref["greedy"][:8], ref["min_margin"],
                                                             os.path.getsize(path) / 1e3))

# ---------------------------------------------------------------------------
# Benchmark model: Qwen3-0.6B shapes, random F16 weights, streamed.

def gen_bench(path):
    cfg = Cfg(name="qwen3-0.6b-random", arch="qwen3", vocab="ggml-vocab-gpt-2.gguf",
              n_embd=1024, n_layer=28, n_head=16, n_head_kv=8, head_dim=128, n_ff=3072, eps=1e-6,
              rope_base=1000000.0, ctx=40960, tied=True, qk_norm=True, write_key_length=True)
    g = GGUFFile(os.path.join(VOCAB_DIR, cfg.vocab))
    tok_kvs = [(k,) + (g.kv[k][0], g.kv[k][1]) + ((g.kv[k][2],) if g.kv[k][0] == T_ARR else ())
               for k in g.kv_order if k.startswith("tokenizer.")]
    n_vocab = len(g.get("tokenizer.ggml.tokens"))
    E, F, H, HK, D = cfg.n_embd, cfg.n_ff, cfg.n_head, cfg.n_head_kv, cfg.head_dim
    shapes = {"token_embd.weight": (n_vocab, E), "output_norm.weight": (E,)}
    for i in range(cfg.n_layer):
        p = "blk.%d." % i
        shapes.update({p + "attn_norm.weight": (E,), p + "attn_q.weight": (H * D, E),
                       p + "attn_k.weight": (HK * D, E), p + "attn_v.weight": (HK * D, E),
                       p + "attn_q_norm.weight": (D,), p + "attn_k_norm.weight": (D,),
                       p + "attn_output.weight": (E, H * D), p + "ffn_norm.weight": (E,),
                       p + "ffn_gate.weight": (F, E), p + "ffn_up.weight": (F, E),
                       p + "ffn_down.weight": (E, F)})
    names = tensor_order(cfg)
    assert sorted(names) == sorted(shapes)
    rng = np.random.default_rng(7)

    def producer(name):
        shape = shapes[name]
        def make():
            if len(shape) == 1:
                return (1.0 + 0.1 * rng.standard_normal(shape, np.float32)).astype("<f4").tobytes()
            a = rng.standard_normal(shape, np.float32)
            a *= np.float32(1.0 / math.sqrt(shape[1]))
            return a.astype("<f2").tobytes()
        return make

    tensors = [(n, list(reversed(shapes[n])), GGML_F32 if len(shapes[n]) == 1 else GGML_F16, producer(n))
               for n in names]
    write_gguf(path, model_kvs(cfg, cfg.name, tok_kvs, FTYPE_MOSTLY_F16), tensors)
    h = GGUFFile(path, load_tensor_data=False)
    assert h.tensor_order == names and h.get("general.architecture") == b"qwen3"
    print("wrote %s (%.1f MB)" % (path, os.path.getsize(path) / 1e6))


def gen_bench_bert(path):
    """bge-small-en-v1.5 shapes (384 wide, 12 layers, 12 heads, n_ff 1536,
    context 512) with random weights: 2-D tensors F16, the rest F32.  For
    the embedding latency benchmark only; no reference vectors."""
    cfg = Cfg(name="bge-small-shaped-random", arch="bert", n_embd=384, n_layer=12, n_head=12, head_dim=32,
              n_ff=1536, eps=1e-12, ctx=512, n_types=2, pooling=2, seed=8000)
    tok_kvs, n_vocab, _ = embed_inputs()
    W = make_bert_weights(cfg, n_vocab, cfg.seed)
    names = bert_tensor_order(cfg)
    tensors = []
    for n in names:
        a = W[n]
        f16 = a.ndim == 2 and not n.startswith(("token_types", "position_embd"))
        data = a.astype("<f2" if f16 else "<f4").tobytes()
        tensors.append((n, list(reversed(a.shape)), GGML_F16 if f16 else GGML_F32, (lambda d=data: d)))
    a = "bert"
    kvs = [("general.architecture", T_STR, a), ("general.name", T_STR, cfg.name),
           ("general.file_type", T_U32, FTYPE_MOSTLY_F16), (a + ".context_length", T_U32, cfg.ctx),
           (a + ".embedding_length", T_U32, cfg.n_embd), (a + ".block_count", T_U32, cfg.n_layer),
           (a + ".feed_forward_length", T_U32, cfg.n_ff), (a + ".attention.head_count", T_U32, cfg.n_head),
           (a + ".attention.layer_norm_epsilon", T_F32, cfg.eps), (a + ".attention.causal", T_BOOL, False),
           (a + ".pooling_type", T_U32, cfg.pooling)] + tok_kvs
    write_gguf(path, kvs, tensors)
    print("wrote %s (%.1f MB)" % (path, os.path.getsize(path) / 1e6))


# ---------------------------------------------------------------------------
# Hybrid benchmark models: a qwen35 with real proportions (n_embd 1024, 24
# layers, full attention every fourth, FFN 3584, GPT-2 vocabulary: 0.41 B
# parameters) and a qwen35moe on the same trunk with 64 experts of width 256,
# 8 used, and a shared expert of 512 (1.40 B in all, about 0.35 B read per
# token).  Random F16 weights (F32 norms, router, conv), streamed.

def gen_bench_hybrid(out_dir):
    g = GGUFFile(os.path.join(HERE, "data", "vocab", "ggml-vocab-gpt-2.gguf"))
    tok_kvs = [(k,) + (g.kv[k][0], g.kv[k][1]) + ((g.kv[k][2],) if g.kv[k][0] == T_ARR else ())
               for k in g.kv_order if k.startswith("tokenizer.")]
    n_vocab = len(g.get("tokenizer.ggml.tokens"))
    base = dict(n_embd=1024, n_layer=24, interval=4, n_head=8, n_head_kv=2, head_dim=128, n_rot=32, n_ff=3584,
                Hk=4, Hv=8, Dk=128, K=4, eps=1e-6, rope_base=10000000.0, ctx=32768, grouped=False, ba=False,
                layer_array=False, mtp=0)
    models = [Cfg(name="qwen35-bench", arch="qwen35", n_expert=0, **base),
              Cfg(name="qwen35moe-bench", arch="qwen35moe", n_expert=64, n_used=8, F_exp=256, F_sh=512, **base)]
    rng = np.random.default_rng(11)
    for cfg in models:
        E, D, H, HK, Dk, Hk, Hv = cfg.n_embd, cfg.head_dim, cfg.n_head, cfg.n_head_kv, cfg.Dk, cfg.Hk, cfg.Hv
        conv_dim, vd = 2 * Hk * Dk + Hv * Dk, Hv * Dk
        shapes = {"token_embd.weight": (n_vocab, E), "output_norm.weight": (E,)}
        f32 = {"output_norm.weight"}
        for i, rec in enumerate(hyb_recurrent(cfg)):
            p = "blk.%d." % i
            shapes[p + "attn_norm.weight"] = (E,)
            shapes[p + "post_attention_norm.weight"] = (E,)
            if rec:
                shapes.update({p + "attn_qkv.weight": (conv_dim, E), p + "attn_gate.weight": (vd, E),
                               p + "ssm_conv1d.weight": (conv_dim, cfg.K), p + "ssm_dt.bias": (Hv,),
                               p + "ssm_a": (Hv,), p + "ssm_beta.weight": (Hv, E), p + "ssm_alpha.weight": (Hv, E),
                               p + "ssm_norm.weight": (Dk,), p + "ssm_out.weight": (E, vd)})
                f32.add(p + "ssm_conv1d.weight")
            else:
                shapes.update({p + "attn_q.weight": (2 * H * D, E), p + "attn_k.weight": (HK * D, E),
                               p + "attn_v.weight": (HK * D, E), p + "attn_output.weight": (E, H * D),
                               p + "attn_q_norm.weight": (D,), p + "attn_k_norm.weight": (D,)})
            if cfg.n_expert:
                NE, Fe, Fs = cfg.n_expert, cfg.F_exp, cfg.F_sh
                shapes.update({p + "ffn_gate_inp.weight": (NE, E), p + "ffn_gate_exps.weight": (NE, Fe, E),
                               p + "ffn_up_exps.weight": (NE, Fe, E), p + "ffn_down_exps.weight": (NE, E, Fe),
                               p + "ffn_gate_inp_shexp.weight": (E,), p + "ffn_gate_shexp.weight": (Fs, E),
                               p + "ffn_up_shexp.weight": (Fs, E), p + "ffn_down_shexp.weight": (E, Fs)})
                f32.add(p + "ffn_gate_inp.weight")
            else:
                shapes.update({p + "ffn_gate.weight": (cfg.n_ff, E), p + "ffn_up.weight": (cfg.n_ff, E),
                               p + "ffn_down.weight": (E, cfg.n_ff)})

        def producer(name, shape):
            def make():
                if name.endswith("ssm_a"):
                    return (-np.exp(rng.uniform(-2.0, 0.0, shape))).astype("<f4").tobytes()
                if name.endswith("ssm_dt.bias"):
                    return (-0.5 + 0.5 * rng.standard_normal(shape)).astype("<f4").tobytes()
                if len(shape) == 1:
                    return (1.0 + 0.1 * rng.standard_normal(shape, np.float32)).astype("<f4").tobytes()
                a = rng.standard_normal(shape, np.float32)
                a *= np.float32(1.0 / math.sqrt(shape[-1]))
                return a.astype("<f4" if name in f32 else "<f2").tobytes()
            return make

        names = hyb_tensor_order(shapes)
        tensors = [(n, list(reversed(shapes[n])), GGML_F32 if len(shapes[n]) == 1 or n in f32 else GGML_F16,
                    producer(n, shapes[n])) for n in names]
        path = os.path.join(out_dir, cfg.name + "-f16.gguf")
        write_gguf(path, hyb_kvs(cfg, tok_kvs, cfg.name, FTYPE_MOSTLY_F16), tensors)
        n_params = sum(int(np.prod(v)) for v in shapes.values())
        print("wrote %s (%.2f B parameters, %.1f MB)" % (path, n_params / 1e9, os.path.getsize(path) / 1e6))


# ---------------------------------------------------------------------------
# Scripted tool-call fixtures in the other families' forms (toolform-*.gguf)
#
# The same bigram construction as toolcall.gguf, with each family's real
# chat template (tests/gen_templates.py) and its special tokens, scripted to
# answer with one call in the form that family writes (src/server/callfmt.c):
# the server's test (tests/test_server_forms.c) checks the call that every
# chat API returns.  The chain starts at the generation prompt's last token.

def _forms():
    call = '{"city": ', '"Paris"', ', "unit": ', '"celsius"'
    U, C = TOK_USER_DEFINED, TOK_CONTROL
    return [
        dict(name="toolform-llama3", template="llama3.2", bos="<|begin_of_text|>", eos="<|eot_id|>",
             specials=[("<|begin_of_text|>", C), ("<|eot_id|>", C), ("<|start_header_id|>", C),
                       ("<|end_header_id|>", C), ("<|eom_id|>", C), ("<|python_tag|>", U)],
             pieces=['{"name": "', "get_weather", '", "parameters": ', *call, "}}", "<|eot_id|>"],
             reasoning=""),
        # Llama 3.1's built-in call: <|python_tag|> is a control token, as in Meta's GGUFs
        dict(name="toolform-pytag", template="llama3.2", bos="<|begin_of_text|>", eos="<|eot_id|>",
             specials=[("<|begin_of_text|>", C), ("<|eot_id|>", C), ("<|start_header_id|>", C),
                       ("<|end_header_id|>", C), ("<|eom_id|>", C), ("<|python_tag|>", C)],
             pieces=["<|python_tag|>", "get_weather", ".call(", 'city="Paris"', ", ", 'unit="celsius")', "<|eot_id|>"],
             reasoning=""),
        dict(name="toolform-mistral", template="mistral-v3", bos="<s>", eos="</s>",
             specials=[("<s>", C), ("</s>", C), ("[INST]", C), ("[/INST]", C), ("[AVAILABLE_TOOLS]", C),
                       ("[/AVAILABLE_TOOLS]", C), ("[TOOL_RESULTS]", C), ("[/TOOL_RESULTS]", C),
                       ("[TOOL_CALLS]", U)],
             pieces=["[TOOL_CALLS]", '[{"name": "', "get_weather", '", "arguments": ', *call, '}, "id": "',
                     "a1b2c3d4e", '"}]', "</s>"],
             reasoning=""),
        dict(name="toolform-deepseek", template="deepseek-r1-distill", bos="<｜begin▁of▁sentence｜>",
             eos="<｜end▁of▁sentence｜>",
             specials=[("<｜begin▁of▁sentence｜>", C), ("<｜end▁of▁sentence｜>", C), ("<｜User｜>", C),
                       ("<｜Assistant｜>", C), ("<think>", U), ("</think>", U),
                       ("<｜tool▁calls▁begin｜>", U), ("<｜tool▁calls▁end｜>", U), ("<｜tool▁call▁begin｜>", U),
                       ("<｜tool▁call▁end｜>", U), ("<｜tool▁sep｜>", U), ("<｜tool▁outputs▁begin｜>", U),
                       ("<｜tool▁outputs▁end｜>", U), ("<｜tool▁output▁begin｜>", U), ("<｜tool▁output▁end｜>", U)],
             pieces=["I should", " look up", " the weather.", "</think>", "\n\n", "<｜tool▁calls▁begin｜>",
                     "<｜tool▁call▁begin｜>", "function", "<｜tool▁sep｜>", "get_weather", "\n```json\n", *call,
                     "}\n```", "<｜tool▁call▁end｜>", "<｜tool▁calls▁end｜>", "<｜end▁of▁sentence｜>"],
             reasoning=TOOLCALL_THOUGHT),
    ]


def gen_toolform(form):
    import gen_templates  # jinja2 (Debian python3-jinja2), only for these fixtures
    cfg = Cfg(**dict(TOOLCALL_CFG.__dict__, name=form["name"]))
    pieces, specials = form["pieces"], form["specials"]
    vocab = ToolcallVocab(pieces, specials)
    template = gen_templates.TEMPLATES[form["template"]]
    env = gen_templates.make_env(True)
    tools = [gen_templates.TOOLS[0]]
    messages = [{"role": "user", "content": TOOLCALL_USER}]
    prompt_text = env.from_string(template).render(messages=messages, tools=tools, add_generation_prompt=True,
                                                   bos_token=form["bos"], eos_token=form["eos"])
    prompt = vocab.encode(prompt_text)
    chain = [vocab.piece_id(p) for p in pieces]
    sources = [prompt[-1]] + chain[:-1]
    assert len(set(sources)) == len(sources) and prompt[-1] not in chain and len(sources) <= cfg.n_embd
    W = toolcall_weights(cfg, vocab, sources, chain)
    W64 = {k: torch.from_numpy(np.asarray(v, np.float64)) for k, v in W.items()}
    ids, margins = list(prompt), []
    eot = vocab.ids[form["eos"]]
    for _ in range(len(chain) + 4):
        logits = forward(cfg, W64, ids)[-1]
        top = torch.topk(logits, 2)
        margins.append(float(top.values[0] - top.values[1]))
        ids.append(int(top.indices[0]))
        if ids[-1] == eot:
            break
    gen = ids[len(prompt):]
    assert gen == chain, (gen, chain)
    assert min(margins) > TOOLCALL_LOGIT - 1e-3, margins
    expected = vocab.decode(gen)
    tok_kvs = [("tokenizer.ggml.model", T_STR, "gpt2"),
               ("tokenizer.ggml.pre", T_STR, "qwen2"),
               ("tokenizer.ggml.tokens", T_ARR, vocab.texts, T_STR),
               ("tokenizer.ggml.token_type", T_ARR, np.array(vocab.types, np.int32), T_I32),
               ("tokenizer.ggml.merges", T_ARR, [], T_STR),
               ("tokenizer.ggml.eos_token_id", T_U32, eot),
               ("tokenizer.ggml.bos_token_id", T_U32, vocab.ids[form["bos"]]),
               ("tokenizer.ggml.add_bos_token", T_BOOL, False),
               ("tokenizer.chat_template", T_STR, template)]
    names = tensor_order(cfg)
    kvs = model_kvs(cfg, cfg.name, tok_kvs, FTYPE_ALL_F32)
    packed = f32_packed(W)
    gguf = os.path.join(OUT_DIR, cfg.name + ".gguf")
    write_gguf(gguf, kvs, [(n, list(reversed(W[n].shape)), GGML_F32, (lambda b=packed[n][1]: b)) for n in names])
    check_written(gguf, kvs, names, packed, W)
    notes = ("Scripted bigram model (as toolcall.gguf) with the %s template of tests/gen_templates.py and its "
             "special tokens: any chat prompt that ends as prompt_text does is answered with greedy_ids, one call "
             "in the form that family writes. %s." % (form["template"], describe(cfg, vocab.n)))
    meta = {"model": cfg.name + ".gguf", "template": form["template"], "prompt_text": prompt_text,
            "prompt_ids": prompt, "greedy_ids": gen, "pieces": pieces, "expected_text": expected,
            "reasoning": form["reasoning"], "tool_call": TOOLCALL_CALL,
            "greedy_top2_margins": [round(m, 6) for m in margins], "notes": notes}
    with open(os.path.join(OUT_DIR, cfg.name + ".json"), "w", encoding="utf-8") as f:
        f.write("{\n" + ",\n".join("  %s: %s" % (json.dumps(k), json.dumps(v, ensure_ascii=False))
                                      for k, v in meta.items()) + "\n}\n")
    print("%-18s %d prompt tokens -> %d scripted tokens, %d bytes" %
          (cfg.name, len(prompt), len(gen), os.path.getsize(gguf)))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bench", metavar="OUT.gguf", help="write the Qwen3-0.6B-shaped benchmark model")
    ap.add_argument("--bench-bert", metavar="OUT.gguf", help="write a bge-small-shaped BERT for benchmarks")
    ap.add_argument("--embed", action="store_true", help="write only the embedding fixtures")
    ap.add_argument("--toolcall", action="store_true", help="write only the scripted tool-call fixture")
    ap.add_argument("--hybrid", action="store_true", help="write only the qwen35 / qwen35moe / qwen3next fixtures")
    ap.add_argument("--bench-hybrid", metavar="DIR", help="write the qwen35 and qwen35moe benchmark models into DIR")
    args = ap.parse_args()
    torch.set_num_threads(1)
    if args.bench:
        gen_bench(args.bench)
        return
    if args.bench_bert:
        gen_bench_bert(args.bench_bert)
        return
    if args.bench_hybrid:
        gen_bench_hybrid(args.bench_hybrid)
        return
    os.makedirs(OUT_DIR, exist_ok=True)
    only = args.embed or args.toolcall or args.hybrid
    if not only:
        for cfg in FIXTURES:
            gen_fixture(cfg)
    if not only or args.hybrid:
        for cfg in HYBRID:
            gen_hybrid(cfg)
    if not only or args.embed:
        gen_bert_embed()
        gen_qwen3_embed()
    if not only or args.toolcall:
        gen_toolcall()
        for form in _forms():
            gen_toolform(form)
    total = 0
    for fn in sorted(os.listdir(OUT_DIR)):
        path = os.path.join(OUT_DIR, fn)
        total += os.path.getsize(path)
        print("%s  %s" % (sha256(path), fn))
    print("fixtures total %.2f MB in %s" % (total / 1e6, OUT_DIR))


if __name__ == "__main__":
    sys.exit(main())
