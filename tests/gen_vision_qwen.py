#!/usr/bin/python3
"""Fixtures for the Qwen VL family (qwen2vl / qwen3vl text models with M-RoPE).

Usage (from the repository root):

    /usr/bin/python3 tests/gen_vision_qwen.py --text
        Writes tests/data/vision/qwen2vl-f32.gguf and qwen3vl-f32.gguf (tiny
        random-weight text models in llama.cpp's GGUF conventions, with
        stories260K's tokenizer from models/stories260K.gguf) and
        tests/data/vision/qwen-mrope.json: for each model a token sequence
        whose middle part carries the 2-D M-RoPE positions of an image
        (kiln_batch.mpos rows), the float64 reference logits at its last
        position and the greedy continuation after it.

The reference is an independent float64 PyTorch forward written from the math:
RMSNorm, Q/K/V (+ biases for qwen2vl, per-head RMSNorm of q and k for
qwen3vl), NeoX RoPE whose angle pair i takes the t, h, w or e position of
its section (sector i mod sum(sections); qwen2vl's sections in order,
qwen3vl's interleaved: sector k is h when k % 3 == 1 and k < 3 s1, w when
k % 3 == 2 and k < 3 s2, t when k % 3 == 0 and k < 3 s0, else e), causal
attention in token order, SwiGLU FFN, output norm and head.  An image of
nx x ny tokens starting at text position p0 has positions (p0, p0 + row,
p0 + col, 0) and text after it continues at p0 + max(nx, ny), as
llama-mtmd-cli places Qwen2-VL's image tokens.

Recorded by hand, not by this script: <name>-mtmd.txt, the bytes llama.cpp's
llama-mtmd-cli (3f545bec) generates for a text model, an mmproj and the PNG,
    llama-mtmd-cli -m TEXT.gguf --mmproj MMPROJ.gguf --image qwen25vl-image.png
        -p "Describe this image." --chat-template chatml -n 12 --temp 0 -t 2 -c 256
(its stdout less the newline before and the two after the text): qwen25vl
(qwen2vl-f32 + qwen25vl-mmproj-f32), qwen2vl (qwen2vl-f32 + qwen2vl-mmproj-f32),
qwen3vl (qwen3vl-f32 + qwen3vl-mmproj-f32), qwen25vl-odd (qwen2vl-f32 +
qwen25vl-mmproj-f32 on qwen-image-170x150.png); and qwen-text.json, llama-completion's
greedy bytes for the text models alone.

The GGUF writer and reader are tests/gen_fixtures.py's.  Deterministic
(fixed seeds).  Needs Debian's python3-numpy and python3-torch.
"""
import argparse
import json
import math
import os
import sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import gen_fixtures as gf  # noqa: E402

OUT_DIR = os.path.join(HERE, "data", "vision")
STORIES = os.path.join(HERE, "..", "models", "stories260K.gguf")


class Cfg:
    def __init__(self, **kw):
        self.__dict__.update(kw)


TEXT = [
    Cfg(name="qwen2vl-f32", arch="qwen2vl", n_embd=64, n_layer=2, n_head=4, n_head_kv=2, head_dim=16, n_ff=128,
        sections=[2, 3, 3, 0], imrope=False, bias=True, qk_norm=False, deepstack=0, rope_base=10000.0,
        eps=1e-6, seed=3700),
    Cfg(name="qwen3vl-f32", arch="qwen3vl", n_embd=64, n_layer=3, n_head=4, n_head_kv=2, head_dim=16, n_ff=128,
        sections=[3, 2, 2, 0], imrope=True, bias=False, qk_norm=True, deepstack=2, rope_base=5000.0,
        eps=1e-6, seed=3800),
]


def text_weights(cfg, n_vocab, seed):
    rng = np.random.default_rng(seed)
    E, D, H, HK, F = cfg.n_embd, cfg.head_dim, cfg.n_head, cfg.n_head_kv, cfg.n_ff
    f32 = np.float32

    def lin(n_out, n_in, gain=1.0):
        return (rng.standard_normal((n_out, n_in)) * (gain / math.sqrt(n_in))).astype(f32)

    def norm(n):
        return (1.0 + 0.2 * rng.standard_normal(n)).astype(f32)

    W = {"token_embd.weight": (rng.standard_normal((n_vocab, E)) * (3.0 / math.sqrt(E))).astype(f32)}
    for i in range(cfg.n_layer):
        p = "blk.%d." % i
        W[p + "attn_norm.weight"] = norm(E)
        W[p + "attn_q.weight"] = lin(H * D, E, 2.0)
        W[p + "attn_k.weight"] = lin(HK * D, E, 2.0)
        W[p + "attn_v.weight"] = lin(HK * D, E)
        if cfg.bias:
            W[p + "attn_q.bias"] = (0.3 * rng.standard_normal(H * D)).astype(f32)
            W[p + "attn_k.bias"] = (0.3 * rng.standard_normal(HK * D)).astype(f32)
            W[p + "attn_v.bias"] = (0.3 * rng.standard_normal(HK * D)).astype(f32)
        if cfg.qk_norm:
            W[p + "attn_q_norm.weight"] = norm(D)
            W[p + "attn_k_norm.weight"] = norm(D)
        W[p + "attn_output.weight"] = lin(E, H * D, 3.0)
        W[p + "ffn_norm.weight"] = norm(E)
        W[p + "ffn_gate.weight"] = lin(F, E)
        W[p + "ffn_up.weight"] = lin(F, E)
        W[p + "ffn_down.weight"] = lin(E, F, 2.0)
    W["output_norm.weight"] = norm(E)
    W["output.weight"] = lin(n_vocab, E, 4.0)
    return W


def text_order(cfg):
    names = ["token_embd.weight"]
    for i in range(cfg.n_layer):
        p = "blk.%d." % i
        names += [p + "attn_norm.weight", p + "attn_q.weight", p + "attn_k.weight", p + "attn_v.weight"]
        if cfg.bias:
            names += [p + "attn_q.bias", p + "attn_k.bias", p + "attn_v.bias"]
        if cfg.qk_norm:
            names += [p + "attn_q_norm.weight", p + "attn_k_norm.weight"]
        names += [p + "attn_output.weight", p + "ffn_norm.weight", p + "ffn_gate.weight", p + "ffn_up.weight",
                  p + "ffn_down.weight"]
    return names + ["output_norm.weight", "output.weight"]


def text_kvs(cfg, tok_kvs):
    a = cfg.arch
    kvs = [("general.architecture", gf.T_STR, a),
           ("general.name", gf.T_STR, "kiln-fixture-" + cfg.name),
           ("general.file_type", gf.T_U32, gf.FTYPE_ALL_F32),
           (a + ".context_length", gf.T_U32, 4096),
           (a + ".embedding_length", gf.T_U32, cfg.n_embd),
           (a + ".block_count", gf.T_U32, cfg.n_layer),
           (a + ".feed_forward_length", gf.T_U32, cfg.n_ff),
           (a + ".attention.head_count", gf.T_U32, cfg.n_head),
           (a + ".attention.head_count_kv", gf.T_U32, cfg.n_head_kv),
           (a + ".attention.key_length", gf.T_U32, cfg.head_dim),
           (a + ".attention.value_length", gf.T_U32, cfg.head_dim),
           (a + ".attention.layer_norm_rms_epsilon", gf.T_F32, cfg.eps),
           (a + ".rope.dimension_count", gf.T_U32, cfg.head_dim),
           (a + ".rope.freq_base", gf.T_F32, cfg.rope_base),
           (a + ".rope.dimension_sections", gf.T_ARR, cfg.sections, gf.T_I32)]
    if cfg.deepstack:
        kvs.append((a + ".n_deepstack_layers", gf.T_U32, cfg.deepstack))
    return kvs + tok_kvs


def section_of(cfg, i):
    s = cfg.sections
    k = i % sum(s)
    if cfg.imrope:
        if k % 3 == 1 and k < 3 * s[1]:
            return 1
        if k % 3 == 2 and k < 3 * s[2]:
            return 2
        if k % 3 == 0 and k < 3 * s[0]:
            return 0
        return 3
    if k < s[0]:
        return 0
    if k < s[0] + s[1]:
        return 1
    return 2 if k < s[0] + s[1] + s[2] else 3


def rms(x, w, eps):
    return x / torch.sqrt((x * x).mean(-1, keepdim=True) + eps) * w


def text_forward(cfg, Wt, ids, pos):
    """Logits [n][n_vocab] (float64) of ids at M-RoPE positions pos [n][4]."""
    E, D, H, HK = cfg.n_embd, cfg.head_dim, cfg.n_head, cfg.n_head_kv
    n = len(ids)
    half = D // 2
    P = torch.tensor(pos, dtype=torch.float64)                       # [n][4]
    sel = torch.tensor([section_of(cfg, i) for i in range(half)])    # [half]
    inv = torch.tensor([cfg.rope_base ** (-2.0 * i / D) for i in range(half)], dtype=torch.float64)
    ang = P[:, sel] * inv                                            # [n][half]
    cos, sin = torch.cos(ang)[:, None, :], torch.sin(ang)[:, None, :]

    def rope(x):  # [n][heads][D], NeoX pairs (i, i + half)
        a, b = x[..., :half], x[..., half:]
        return torch.cat([a * cos - b * sin, a * sin + b * cos], -1)

    x = Wt["token_embd.weight"][torch.tensor(ids)]
    mask = torch.full((n, n), float("-inf"), dtype=torch.float64).triu(1)
    for l in range(cfg.n_layer):
        p = "blk.%d." % l
        xn = rms(x, Wt[p + "attn_norm.weight"], cfg.eps)
        q, k, v = (xn @ Wt[p + "attn_%s.weight" % t].T for t in "qkv")
        if cfg.bias:
            q, k, v = q + Wt[p + "attn_q.bias"], k + Wt[p + "attn_k.bias"], v + Wt[p + "attn_v.bias"]
        q, k, v = q.view(n, H, D), k.view(n, HK, D), v.view(n, HK, D)
        if cfg.qk_norm:
            q, k = rms(q, Wt[p + "attn_q_norm.weight"], cfg.eps), rms(k, Wt[p + "attn_k_norm.weight"], cfg.eps)
        q, k = rope(q), rope(k)
        g = H // HK
        k, v = k.repeat_interleave(g, 1), v.repeat_interleave(g, 1)
        s = torch.einsum("ihd,jhd->hij", q, k) / math.sqrt(D) + mask
        o = torch.einsum("hij,jhd->ihd", torch.softmax(s, -1), v).reshape(n, H * D)
        x = x + o @ Wt[p + "attn_output.weight"].T
        xn = rms(x, Wt[p + "ffn_norm.weight"], cfg.eps)
        gt = xn @ Wt[p + "ffn_gate.weight"].T
        x = x + (torch.nn.functional.silu(gt) * (xn @ Wt[p + "ffn_up.weight"].T)) @ Wt[p + "ffn_down.weight"].T
    return rms(x, Wt["output_norm.weight"], cfg.eps) @ Wt["output.weight"].T


def layout(n_before, nx, ny, n_after):
    """Positions of BOS + n_before - 1 text tokens, an nx x ny image, n_after
    text tokens: rows [4] and the kiln_batch.mpos rows (relative; text -1)."""
    pos, rel = [], []
    for i in range(n_before):
        pos.append([i] * 4)
        rel.append([-1] * 4)
    p0 = n_before
    for r in range(ny):
        for c in range(nx):
            pos.append([p0, p0 + r, p0 + c, 0])
            rel.append([0, r, c, 0])
    p = p0 + max(nx, ny)
    for i in range(n_after):
        pos.append([p + i] * 4)
        rel.append([-1] * 4)
    return pos, rel


def gen_text():
    g = gf.GGUFFile(STORIES)
    tok_kvs = [(k,) + (g.kv[k][0], g.kv[k][1]) + ((g.kv[k][2],) if g.kv[k][0] == gf.T_ARR else ())
               for k in g.kv_order if k.startswith("tokenizer.")]
    n_vocab = len(g.get("tokenizer.ggml.tokens"))
    os.makedirs(OUT_DIR, exist_ok=True)
    cases = []
    for cfg in TEXT:
        nb, nx, ny, na, n_pred = 7, 5, 3, 6, 8
        for seed in range(cfg.seed, cfg.seed + 100):
            rng = np.random.default_rng(seed)
            W = text_weights(cfg, n_vocab, seed)
            Wt = {k: torch.tensor(v, dtype=torch.float64) for k, v in W.items()}
            ids = [1] + [int(t) for t in rng.integers(3, n_vocab, nb + nx * ny + na - 1)]
            pos, rel = layout(nb, nx, ny, na)
            greedy, margins = [], []
            for _ in range(n_pred):
                more = [[pos[-1][0] + 1 + j] * 4 for j in range(len(greedy))]
                lg = text_forward(cfg, Wt, ids + greedy, pos + more)[-1]
                top = torch.topk(lg, 2).values
                margins.append(float(top[0] - top[1]))
                greedy.append(int(torch.argmax(lg)))
            if min(margins) > 1e-2 and len(set(greedy)) >= 4 and not any(t in (0, 1, 2) for t in greedy):
                break
        else:
            raise SystemExit("%s: no usable seed" % cfg.name)
        # the same with plain positions (what the text-only path computes) must differ: the image rows matter
        plain = text_forward(cfg, Wt, ids, [[i] * 4 for i in range(len(ids))])[-1]
        last = text_forward(cfg, Wt, ids, pos)[-1]
        assert float((plain - last).abs().max()) > 1e-2, cfg.name
        names = text_order(cfg)
        kvs = text_kvs(cfg, tok_kvs)
        packed = {n: (gf.GGML_F32, W[n].astype("<f4").tobytes()) for n in names}
        tensors = [(n, list(reversed(W[n].shape)), gf.GGML_F32, (lambda b=packed[n][1]: b)) for n in names]
        path = os.path.join(OUT_DIR, cfg.name + ".gguf")
        gf.write_gguf(path, kvs, tensors)
        gf.check_written(path, kvs, names, packed, W)
        cases.append({"model": cfg.name + ".gguf", "arch": cfg.arch, "seed": seed, "ids": ids, "mpos": rel,
                      "positions": pos, "image": {"first": nb, "nx": nx, "ny": ny},
                      "last_logits": [round(float(v), 6) for v in last],
                      "greedy": greedy, "greedy_margins": [round(m, 5) for m in margins]})
        print("%-12s seed %d greedy %s min margin %.4f" % (cfg.name, seed, greedy, min(margins)))
    notes = ("Tiny random-weight qwen2vl (sections [2,3,3,0] in order, Q/K/V biases) and qwen3vl (sections "
             "[3,2,2,0] interleaved, wrapping past 7 pairs of 8; q/k norms; n_deepstack_layers 2) text models, "
             "E 64, H 4 / Hkv 2 / Dh 16, F 128, stories260K's tokenizer. Each case: BOS and 6 random text ids, "
             "a 5 x 3 'image' of 15 random ids at M-RoPE positions (p0, p0+row, p0+col, 0), 6 more text ids at "
             "p0 + 5 on; mpos the kiln_batch rows (relative, text -1), positions the absolute ones. "
             "last_logits: float64 PyTorch reference logits at the last position; greedy: 8 greedy ids after it "
             "(each at the next text position). Written by tests/gen_vision_qwen.py --text.")
    with open(os.path.join(OUT_DIR, "qwen-mrope.json"), "w", encoding="utf-8") as f:
        json.dump({"notes": notes, "cases": cases}, f, indent=1)
        f.write("\n")


# ---------------------------------------------------------------------------
# Qwen2.5-VL vision encoder + merger (mmproj, projector type qwen2.5vl_merger)

VIS = Cfg(name="qwen25vl-mmproj-f32", kind="qwen2.5vl_merger", n_embd=32, n_head=2, n_ff=48, n_layer=4,
          wa_pattern=2, patch=14, proj_dim=64, eps=1e-6, seed=3900, img_w=168, img_h=140, ds_layers=[])
VIS2 = Cfg(name="qwen2vl-mmproj-f32", kind="qwen2vl_merger", n_embd=32, n_head=2, n_ff=48, n_layer=3,
           wa_pattern=0, patch=14, proj_dim=64, eps=1e-6, seed=3910, img_w=168, img_h=140, ds_layers=[])
VIS3 = Cfg(name="qwen3vl-mmproj-f32", kind="qwen3vl_merger", n_embd=32, n_head=2, n_ff=48, n_layer=3,
           wa_pattern=0, patch=14, proj_dim=64, eps=1e-6, seed=3920, img_w=168, img_h=140, ds_layers=[0, 1],
           n_side=4)
IMAGE_MEAN = [0.48145466, 0.4578275, 0.40821073]
IMAGE_STD = [0.26862954, 0.26130258, 0.27577711]


def vis_weights(cfg, seed):
    """Qwen2.5-VL: RMSNorm, separate q/k/v, gated SiLU MLP.  Qwen2-VL:
    LayerNorm, separate q/k/v, plain quick-GELU MLP.  Qwen3-VL: LayerNorm,
    fused attn_qkv, plain GELU MLP, patch bias, learned positions, deepstack
    mergers after cfg.ds_layers."""
    rng = np.random.default_rng(seed)
    E, F, P = cfg.n_embd, cfg.n_ff, cfg.patch
    f32 = np.float32
    ln = cfg.kind != "qwen2.5vl_merger"

    def lin(n_out, n_in, gain=1.0):
        return (rng.standard_normal((n_out, n_in)) * (gain / math.sqrt(n_in))).astype(f32)

    def vec(n, s=0.2):
        return (s * rng.standard_normal(n)).astype(f32)

    W = {"v.patch_embd.weight": (rng.standard_normal((E, 3, P, P)) / math.sqrt(3 * P * P)).astype(f32),
         "v.patch_embd.weight.1": (rng.standard_normal((E, 3, P, P)) / math.sqrt(3 * P * P)).astype(f32)}
    if cfg.kind == "qwen3vl_merger":
        W["v.patch_embd.bias"] = vec(E)
        W["v.position_embd.weight"] = (0.5 * rng.standard_normal((cfg.n_side * cfg.n_side, E))).astype(f32)
    for i in range(cfg.n_layer):
        p = "v.blk.%d." % i
        W[p + "ln1.weight"] = (1.0 + vec(E)).astype(f32)
        if ln:
            W[p + "ln1.bias"] = vec(E)
        if cfg.kind == "qwen3vl_merger":
            W[p + "attn_qkv.weight"] = lin(3 * E, E, 1.5)
            W[p + "attn_qkv.bias"] = vec(3 * E)
        else:
            for t in "qkv":
                W[p + "attn_%s.weight" % t] = lin(E, E, 1.5)
                W[p + "attn_%s.bias" % t] = vec(E)
        W[p + "attn_out.weight"] = lin(E, E)
        W[p + "attn_out.bias"] = vec(E)
        W[p + "ln2.weight"] = (1.0 + vec(E)).astype(f32)
        if ln:
            W[p + "ln2.bias"] = vec(E)
        if cfg.kind == "qwen2.5vl_merger":
            W[p + "ffn_gate.weight"] = lin(F, E)
            W[p + "ffn_gate.bias"] = vec(F)
        W[p + "ffn_up.weight"] = lin(F, E)
        W[p + "ffn_up.bias"] = vec(F)
        W[p + "ffn_down.weight"] = lin(E, F)
        W[p + "ffn_down.bias"] = vec(E)
    for i in cfg.ds_layers:
        p = "v.deepstack.%d." % i
        W[p + "norm.weight"] = (1.0 + vec(4 * E)).astype(f32)
        W[p + "norm.bias"] = vec(4 * E)
        W[p + "fc1.weight"] = lin(4 * E, 4 * E)
        W[p + "fc1.bias"] = vec(4 * E)
        W[p + "fc2.weight"] = lin(cfg.proj_dim, 4 * E, 2.0)
        W[p + "fc2.bias"] = vec(cfg.proj_dim)
    W["v.post_ln.weight"] = (1.0 + vec(E)).astype(f32)
    if ln:
        W["v.post_ln.bias"] = vec(E)
    W["mm.0.weight"] = lin(4 * E, 4 * E)
    W["mm.0.bias"] = vec(4 * E)
    W["mm.2.weight"] = lin(cfg.proj_dim, 4 * E, 2.0)
    W["mm.2.bias"] = vec(cfg.proj_dim)
    return W


def vis_kvs(cfg):
    kvs = [("general.architecture", gf.T_STR, "clip"),
           ("general.name", gf.T_STR, "kiln-fixture-" + cfg.name),
           ("general.file_type", gf.T_U32, gf.FTYPE_ALL_F32),
           ("clip.has_vision_encoder", gf.T_BOOL, True),
           ("clip.projector_type", gf.T_STR, cfg.kind)]
    if cfg.kind == "qwen2.5vl_merger":
        kvs.append(("clip.use_silu", gf.T_BOOL, True))
    if cfg.kind == "qwen3vl_merger":
        kvs.append(("clip.use_gelu", gf.T_BOOL, True))
    kvs += [("clip.vision.image_size", gf.T_U32, cfg.patch * cfg.n_side if cfg.kind == "qwen3vl_merger" else 560),
            ("clip.vision.patch_size", gf.T_U32, cfg.patch),
            ("clip.vision.embedding_length", gf.T_U32, cfg.n_embd),
            ("clip.vision.feed_forward_length", gf.T_U32, cfg.n_ff),
            ("clip.vision.block_count", gf.T_U32, cfg.n_layer),
            ("clip.vision.projection_dim", gf.T_U32, cfg.proj_dim),
            ("clip.vision.attention.head_count", gf.T_U32, cfg.n_head),
            ("clip.vision.attention.layer_norm_epsilon", gf.T_F32, cfg.eps)]
    if cfg.wa_pattern:
        kvs.append(("clip.vision.n_wa_pattern", gf.T_U32, cfg.wa_pattern))
    if cfg.ds_layers:
        kvs.append(("clip.vision.is_deepstack_layers", gf.T_ARR,
                    [i in cfg.ds_layers for i in range(cfg.n_layer)], gf.T_BOOL))
    kvs += [("clip.vision.image_mean", gf.T_ARR, [float(np.float32(v)) for v in IMAGE_MEAN], gf.T_F32),
            ("clip.vision.image_std", gf.T_ARR, [float(np.float32(v)) for v in IMAGE_STD], gf.T_F32)]
    return kvs


def vis_image(cfg):
    """A deterministic smooth RGB8 test image [h][w][3]."""
    y, x = np.mgrid[0:cfg.img_h, 0:cfg.img_w].astype(np.float64)
    r = 128 + 100 * np.sin(x / 17.0) * np.cos(y / 23.0)
    g = 128 + 90 * np.sin((x + y) / 29.0)
    b = 128 + 110 * np.cos(x / 11.0 - y / 13.0)
    rng = np.random.default_rng(cfg.seed)
    im = np.stack([r, g, b], -1) + rng.integers(-12, 13, (cfg.img_h, cfg.img_w, 3))
    return np.clip(np.round(im), 0, 255).astype(np.uint8)


def write_png(path, im):
    import struct
    import zlib
    h, w, _ = im.shape
    raw = b"".join(b"\0" + im[i].tobytes() for i in range(h))

    def chunk(t, d):
        return struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d) & 0xffffffff)
    with open(path, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)) +
                chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b""))


def gelu_tanh(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def layer_norm(x, w, b, eps):
    m = x.mean(-1, keepdim=True)
    v = ((x - m) ** 2).mean(-1, keepdim=True)
    return (x - m) / torch.sqrt(v + eps) * w + b


def vis_forward(cfg, Wt, im):
    """The encoder + merger on an RGB8 image whose sides are multiples of
    2 * patch (no resize): [n_merged][proj_dim * (1 + deepstack)] float64,
    merged tokens in row-major order of the 2x2 patch groups, each row the
    merger's output then each deepstack merger's."""
    E, H, P = cfg.n_embd, cfg.n_head, cfg.patch
    D = E // H
    h, w = im.shape[0], im.shape[1]
    ph, pw = h // P, w // P
    q25, q3 = cfg.kind == "qwen2.5vl_merger", cfg.kind == "qwen3vl_merger"

    def norm(x, name):
        if q25:
            return rms(x, Wt[name + ".weight"], cfg.eps)
        return layer_norm(x, Wt[name + ".weight"], Wt[name + ".bias"], cfg.eps)

    def act(x):
        if q25:
            return torch.nn.functional.silu(x)
        if q3:
            return gelu_tanh(x)
        return x * torch.sigmoid(1.702 * x)

    x = torch.tensor(im, dtype=torch.float64).permute(2, 0, 1) / 255.0
    x = (x - torch.tensor(IMAGE_MEAN, dtype=torch.float64)[:, None, None]) / \
        torch.tensor(IMAGE_STD, dtype=torch.float64)[:, None, None]
    conv = torch.nn.functional.conv2d
    pe = conv(x[None], Wt["v.patch_embd.weight"], stride=P) + conv(x[None], Wt["v.patch_embd.weight.1"], stride=P)
    pe = pe[0]                                                    # [E][ph][pw]
    if q3:
        pe = pe + Wt["v.patch_embd.bias"][:, None, None]
        ns = cfg.n_side
        grid = Wt["v.position_embd.weight"].reshape(ns, ns, E).permute(2, 0, 1)[None]
        pos = torch.nn.functional.interpolate(grid, size=(ph, pw), mode="bilinear", align_corners=True)[0]
        pe = pe + pos
    # patch order: 2x2 groups row-major, inside a group row-major
    order = [(2 * gy + dy, 2 * gx + dx) for gy in range(ph // 2) for gx in range(pw // 2)
             for dy in range(2) for dx in range(2)]
    t = torch.stack([pe[:, py, px] for py, px in order])          # [n][E]
    n = t.shape[0]
    # 2-D rotary: first D/4 angle pairs from the row, next D/4 from the column
    q4 = D // 4
    inv = torch.tensor([10000.0 ** (-2.0 * i / (D // 2)) for i in range(q4)], dtype=torch.float64)
    rows = torch.tensor([py for py, _ in order], dtype=torch.float64)
    cols = torch.tensor([px for _, px in order], dtype=torch.float64)
    ang = torch.cat([rows[:, None] * inv, cols[:, None] * inv], -1)  # [n][D/2]
    cos, sin = torch.cos(ang)[:, None, :], torch.sin(ang)[:, None, :]

    def rope(v):
        a, b = v[..., :D // 2], v[..., D // 2:]
        return torch.cat([a * cos - b * sin, a * sin + b * cos], -1)
    # windows of 4 x 4 merged units (112 px at patch 14, merge 2)
    gw = 112 // P // 2
    win = torch.tensor([(py // 2 // gw) * 1000 + (px // 2 // gw) for py, px in order])
    wmask = torch.where(win[:, None] == win[None, :], 0.0, float("-inf")).to(torch.float64)
    ds = []
    for l in range(cfg.n_layer):
        p = "v.blk.%d." % l
        full = not cfg.wa_pattern or (l + 1) % cfg.wa_pattern == 0
        xn = norm(t, p + "ln1")
        if q3:
            qkv = xn @ Wt[p + "attn_qkv.weight"].T + Wt[p + "attn_qkv.bias"]
            q, k, v = (qkv[:, i * E:(i + 1) * E].reshape(n, H, D) for i in range(3))
        else:
            q, k, v = ((xn @ Wt[p + "attn_%s.weight" % c].T + Wt[p + "attn_%s.bias" % c]).view(n, H, D)
                       for c in "qkv")
        q, k = rope(q), rope(k)
        s = torch.einsum("ihd,jhd->hij", q, k) / math.sqrt(D)
        if not full:
            s = s + wmask
        o = torch.einsum("hij,jhd->ihd", torch.softmax(s, -1), v).reshape(n, E)
        t = t + o @ Wt[p + "attn_out.weight"].T + Wt[p + "attn_out.bias"]
        xn = norm(t, p + "ln2")
        u = xn @ Wt[p + "ffn_up.weight"].T + Wt[p + "ffn_up.bias"]
        if q25:
            g = xn @ Wt[p + "ffn_gate.weight"].T + Wt[p + "ffn_gate.bias"]
            mid = act(g) * u
        else:
            mid = act(u)
        t = t + mid @ Wt[p + "ffn_down.weight"].T + Wt[p + "ffn_down.bias"]
        if l in cfg.ds_layers:
            d = "v.deepstack.%d." % l
            f4 = layer_norm(t.reshape(n // 4, 4 * E), Wt[d + "norm.weight"], Wt[d + "norm.bias"], cfg.eps)
            f4 = gelu_tanh(f4 @ Wt[d + "fc1.weight"].T + Wt[d + "fc1.bias"])
            ds.append(f4 @ Wt[d + "fc2.weight"].T + Wt[d + "fc2.bias"])
    t = norm(t, "v.post_ln").reshape(n // 4, 4 * E)
    hdn = gelu_tanh(t @ Wt["mm.0.weight"].T + Wt["mm.0.bias"])
    return torch.cat([hdn @ Wt["mm.2.weight"].T + Wt["mm.2.bias"]] + ds, -1)


def gen_vision():
    os.makedirs(OUT_DIR, exist_ok=True)
    im = vis_image(VIS)
    write_png(os.path.join(OUT_DIR, "qwen25vl-image.png"), im)
    # a 170 x 150 image that preprocessing resizes (to 168 x 140), for the end-to-end check
    write_png(os.path.join(OUT_DIR, "qwen-image-170x150.png"), vis_image(Cfg(img_w=170, img_h=150, seed=3901)))
    for cfg in (VIS, VIS2, VIS3):
        W = vis_weights(cfg, cfg.seed)
        Wt = {k: torch.tensor(v, dtype=torch.float64) for k, v in W.items()}
        emb = vis_forward(cfg, Wt, im)
        names = list(W.keys())
        kvs = vis_kvs(cfg)
        packed = {n: (gf.GGML_F32, W[n].astype("<f4").tobytes()) for n in names}
        tensors = [(n, list(reversed(W[n].shape)), gf.GGML_F32, (lambda b=packed[n][1]: b)) for n in names]
        path = os.path.join(OUT_DIR, cfg.name + ".gguf")
        gf.write_gguf(path, kvs, tensors)
        gf.check_written(path, kvs, names, packed, W)
        nx, ny = cfg.img_w // cfg.patch // 2, cfg.img_h // cfg.patch // 2
        what = {"qwen2.5vl_merger": "Qwen2.5-VL (RMSNorm, 4 layers: 1 and 3 full attention, 0 and 2 in windows of "
                                    "4 x 4 merged tokens, n_wa_pattern 2; gated SiLU MLP)",
                "qwen2vl_merger": "Qwen2-VL (LayerNorm, 3 full-attention layers, quick-GELU MLP)",
                "qwen3vl_merger": "Qwen3-VL (LayerNorm, fused attn_qkv, GELU MLP, patch bias, 4 x 4 learned "
                                  "positions resized bilinearly with aligned corners, deepstack mergers after "
                                  "layers 0 and 1: rows of 3 x 64)"}[cfg.kind]
        meta = {"mmproj": cfg.name + ".gguf", "projector": cfg.kind, "image_png": "qwen25vl-image.png",
                "width": cfg.img_w, "height": cfg.img_h, "nx": nx, "ny": ny, "n_embd": int(emb.shape[1]),
                "embeddings": [[round(float(v), 6) for v in row] for row in emb],
                "notes": ("Tiny random-weight %s vision encoder + merger (clip.projector_type %s): E 32, 2 heads "
                          "of 16, FFN 48 with biases, patch 14 with two conv kernels (temporal patch 2 of a still "
                          "image), 2-D rotary (first quarter of the angle pairs from the row, second from the "
                          "column, base 10000), merger norm, 4 x 32 -> 128 -> GELU (tanh) -> 64. Image: %d x %d "
                          "RGB8 PNG (no resize: multiples of 28), %d x %d merged tokens. embeddings: float64 "
                          "PyTorch reference rows, merged tokens row-major. Written by tests/gen_vision_qwen.py "
                          "--vision." % (what, cfg.kind, cfg.img_w, cfg.img_h, nx, ny))}
        with open(os.path.join(OUT_DIR, cfg.name.replace("-mmproj-f32", "") + "-embd.json"), "w",
                  encoding="utf-8") as f:
            json.dump(meta, f, indent=1)
            f.write("\n")
        print("%s: %d x %d tokens, |emb| max %.3f" % (cfg.name, nx, ny, float(emb.abs().max())))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--text", action="store_true")
    ap.add_argument("--vision", action="store_true")
    a = ap.parse_args()
    torch.set_grad_enabled(False)
    if a.text:
        gen_text()
    if a.vision:
        gen_vision()
    if not a.text and not a.vision:
        ap.print_help()


if __name__ == "__main__":
    main()
