#!/usr/bin/env python3
"""Writes the vision fixtures under tests/data/vision/ (run with Debian's python3:
PyTorch and numpy):

  gemma3-text.gguf    a tiny random-weight Gemma 3 text model: the tokenizer of
                      data/arch/gemma3-f32.gguf plus Gemma 3's turn and image
                      tokens, and Gemma 3's chat template
  gemma3-mmproj.gguf  its random-weight projector in llama.cpp's mmproj format
                      (general.architecture "clip", projector type gemma3:
                      SigLIP ViT, 2 x 2 average pool, soft-embedding norm,
                      input projection)
  image.png           a 40 x 30 RGB test image (pixels: image_pixels below)
  gemma3-embd.bin     the projector's 16 embedding rows for image.png, F32
                      [16][64], from the PyTorch reference below
  gemma3.json         sizes and the reference's own float64 check
  gemma3-mtmd.txt     (recorded by hand, not written here) llama-mtmd-cli's
                      greedy bytes for gemma3.json's "mtmd_command"

The reference is written from the formulas, independently of kiln:
preprocessing as llama.cpp's fixed-size path (aspect kept, bilinear on 8-bit
pixels rounded down, centred on black, (v/255 - mean)/std), then the ViT with
torch's conv2d, layer_norm, softmax attention and tanh GELU, avg_pool2d, RMS
norm and the projection.

Each later engineer's encoder adds its own section (a gen_* function and a
line in main).

  gen_vision.py --bench DIR   writes the time-to-first-token benchmark's
                              files instead (bench/ttft.sh): DIR/mmproj.gguf,
                              a Gemma-3-4B-shaped projector (SigLIP so400m: 27
                              blocks of 1152, FFN 4304, 16 heads, patch 14,
                              image 896, pooled 4 x 4 to 256 tokens of 2560),
                              F16 random weights (about 0.8 GiB);
                              DIR/text.gguf, a 1-block Gemma 3 text model of
                              Gemma 3 4B's widths (2560, 8 heads of 256, 4 KV
                              heads, FFN 10240), F16; DIR/image.png, 896 x 896.
"""

import argparse
import json
import math
import os
import struct
import sys
import zlib

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import gen_fixtures as gf  # noqa: E402  (the GGUF writer and reader)

OUT = os.path.join(HERE, "data", "vision")

# ---------------------------------------------------------------------------
# the test image


def image_pixels(w, h):
    """RGB8 [h][w][3]: smooth ramps with a few sharp edges (the C test makes
    the same ones)."""
    px = np.zeros((h, w, 3), np.uint8)
    for y in range(h):
        for x in range(w):
            px[y, x, 0] = (x * 255) // (w - 1)
            px[y, x, 1] = (y * 255) // (h - 1)
            px[y, x, 2] = 200 if (x // 8 + y // 8) % 2 else 30
    return px


def write_png(path, px):
    h, w, _ = px.shape
    raw = b"".join(b"\0" + px[y].tobytes() for y in range(h))

    def chunk(tag, data):
        return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data) & 0xFFFFFFFF)

    png = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
    png += chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b"")
    open(path, "wb").write(png)


# ---------------------------------------------------------------------------
# Gemma 3

G3_TEXT = dict(n_embd=64, n_layer=6, n_head=4, n_head_kv=2, head_dim=16, n_ff=128, eps=1e-6, window=24,
               rope_base=1000000.0, rope_base_swa=10000.0, ctx=4096, seed=3700)
G3_VIS = dict(n_embd=32, n_layer=2, n_head=4, n_ff=64, eps=1e-6, image_size=32, patch_size=4, merge=2, seed=3701,
              mean=[0.5, 0.5, 0.5], std=[0.5, 0.5, 0.5])
G3_SPECIAL = ["<start_of_turn>", "<end_of_turn>", "<start_of_image>", "<end_of_image>"]
# a chat template in Gemma 3's format (system turn folded
# into the first user turn; images as <start_of_image>)
G3_TEMPLATE = (
    "{{ bos_token }}\n"
    "{%- if messages[0]['role'] == 'system' -%}\n"
    "    {%- if messages[0]['content'] is string -%}\n"
    "        {%- set first_user_prefix = messages[0]['content'] + '\n\n' -%}\n"
    "    {%- else -%}\n"
    "        {%- set first_user_prefix = messages[0]['content'][0]['text'] + '\n\n' -%}\n"
    "    {%- endif -%}\n"
    "    {%- set loop_messages = messages[1:] -%}\n"
    "{%- else -%}\n"
    "    {%- set first_user_prefix = \"\" -%}\n"
    "    {%- set loop_messages = messages -%}\n"
    "{%- endif -%}\n"
    "{%- for message in loop_messages -%}\n"
    "    {%- if (message['role'] == 'assistant') -%}\n"
    "        {%- set role = \"model\" -%}\n"
    "    {%- else -%}\n"
    "        {%- set role = message['role'] -%}\n"
    "    {%- endif -%}\n"
    "    {{ '<start_of_turn>' + role + '\n' + (first_user_prefix if loop.first else \"\") }}\n"
    "    {%- if message['content'] is string -%}\n"
    "        {{ message['content'] | trim }}\n"
    "    {%- elif message['content'] is iterable -%}\n"
    "        {%- for item in message['content'] -%}\n"
    "            {%- if item['type'] == 'image' -%}\n"
    "                {{ '<start_of_image>' }}\n"
    "            {%- elif item['type'] == 'text' -%}\n"
    "                {{ item['text'] | trim }}\n"
    "            {%- endif -%}\n"
    "        {%- endfor -%}\n"
    "    {%- endif -%}\n"
    "    {{ '<end_of_turn>\n' }}\n"
    "{%- endfor -%}\n"
    "{%- if add_generation_prompt -%}\n"
    "    {{'<start_of_turn>model\n'}}\n"
    "{%- endif -%}\n")


def f32_bytes(a):
    return np.ascontiguousarray(a, dtype="<f4").tobytes()


# the benchmark pair (--bench): Gemma 3 4B's vision tower and text widths
G3B_TEXT = dict(n_embd=2560, n_layer=1, n_head=8, n_head_kv=4, head_dim=256, n_ff=10240, eps=1e-6, window=1024,
                rope_base=1000000.0, rope_base_swa=10000.0, ctx=4096, seed=3710)
G3B_VIS = dict(n_embd=1152, n_layer=27, n_head=16, n_ff=4304, eps=1e-6, image_size=896, patch_size=14, merge=4,
               seed=3711, mean=[0.5, 0.5, 0.5], std=[0.5, 0.5, 0.5])


def f16_bytes(a):
    return np.ascontiguousarray(a, dtype="<f2").tobytes()


def g3_text_model(path, c=G3_TEXT, f16=False):
    ref = gf.GGUFFile(os.path.join(HERE, "data", "arch", "gemma3-f32.gguf"))
    tokens = list(ref.get("tokenizer.ggml.tokens")) + [s.encode() for s in G3_SPECIAL]
    scores = np.concatenate([ref.get("tokenizer.ggml.scores"), np.zeros(len(G3_SPECIAL), np.float32)])
    types = np.concatenate([ref.get("tokenizer.ggml.token_type"), np.full(len(G3_SPECIAL), 3, np.int32)])
    n_vocab = len(tokens)
    rng = np.random.default_rng(c["seed"])
    E, F, H, HK, D = c["n_embd"], c["n_ff"], c["n_head"], c["n_head_kv"], c["head_dim"]

    def lin(n_out, n_in, gain=1.0):
        return (rng.standard_normal((n_out, n_in)) * (gain / math.sqrt(n_in))).astype(np.float32)

    def norm(n):
        return (1.0 + 0.2 * rng.standard_normal(n)).astype(np.float32)

    W = [("token_embd.weight", (rng.standard_normal((n_vocab, E)) * (3.0 / math.sqrt(E))).astype(np.float32))]
    for i in range(c["n_layer"]):
        p = "blk.%d." % i
        W += [(p + "attn_norm.weight", norm(E)), (p + "attn_q.weight", lin(H * D, E)),
              (p + "attn_k.weight", lin(HK * D, E)), (p + "attn_v.weight", lin(HK * D, E)),
              (p + "attn_output.weight", lin(E, H * D)), (p + "attn_q_norm.weight", norm(D)),
              (p + "attn_k_norm.weight", norm(D)), (p + "post_attention_norm.weight", norm(E)),
              (p + "ffn_norm.weight", norm(E)), (p + "ffn_gate.weight", lin(F, E)), (p + "ffn_up.weight", lin(F, E)),
              (p + "ffn_down.weight", lin(E, F)), (p + "post_ffw_norm.weight", norm(E))]
    W.append(("output_norm.weight", norm(E)))
    # an output head of its own, logits std about 4: greedy text that follows the image
    W.append(("output.weight", lin(n_vocab, E, 4.0)))
    kvs = [
        ("general.architecture", gf.T_STR, "gemma3"),
        ("general.name", gf.T_STR, "kiln-vision-gemma3"),
        ("general.file_type", gf.T_U32, 0),
        ("gemma3.context_length", gf.T_U32, c["ctx"]),
        ("gemma3.embedding_length", gf.T_U32, E),
        ("gemma3.block_count", gf.T_U32, c["n_layer"]),
        ("gemma3.feed_forward_length", gf.T_U32, F),
        ("gemma3.attention.head_count", gf.T_U32, H),
        ("gemma3.attention.head_count_kv", gf.T_U32, HK),
        ("gemma3.attention.key_length", gf.T_U32, D),
        ("gemma3.attention.value_length", gf.T_U32, D),
        ("gemma3.rope.freq_base", gf.T_F32, c["rope_base"]),
        ("gemma3.attention.layer_norm_rms_epsilon", gf.T_F32, c["eps"]),
        ("gemma3.attention.sliding_window", gf.T_U32, c["window"]),
        ("tokenizer.ggml.model", gf.T_STR, "llama"),
        ("tokenizer.ggml.tokens", gf.T_ARR, tokens, gf.T_STR),
        ("tokenizer.ggml.scores", gf.T_ARR, scores, gf.T_F32),
        ("tokenizer.ggml.token_type", gf.T_ARR, types, gf.T_I32),
        ("tokenizer.ggml.bos_token_id", gf.T_U32, 1),
        ("tokenizer.ggml.eos_token_id", gf.T_U32, 2),
        ("tokenizer.ggml.unknown_token_id", gf.T_U32, 0),
        ("tokenizer.ggml.add_bos_token", gf.T_BOOL, True),
        ("tokenizer.chat_template", gf.T_STR, G3_TEMPLATE),
    ]
    if f16:  # matrices F16, norms F32
        kvs[2] = ("general.file_type", gf.T_U32, 1)
        tensors = [(n, list(reversed(a.shape)), gf.GGML_F16 if a.ndim == 2 else gf.GGML_F32,
                    (lambda a=a: f16_bytes(a) if a.ndim == 2 else f32_bytes(a))) for n, a in W]
    else:
        tensors = [(n, list(reversed(a.shape)), gf.GGML_F32, (lambda a=a: f32_bytes(a))) for n, a in W]
    gf.write_gguf(path, kvs, tensors)
    return n_vocab


def g3_vision_weights():
    v, t = G3_VIS, G3_TEXT
    rng = np.random.default_rng(v["seed"])
    E, F, P = v["n_embd"], v["n_ff"], v["patch_size"]
    n_patch = (v["image_size"] // P) ** 2

    def lin(n_out, n_in):
        return (rng.standard_normal((n_out, n_in)) / math.sqrt(n_in)).astype(np.float32)

    def vec(n, mu=0.0, s=0.2):
        return (mu + s * rng.standard_normal(n)).astype(np.float32)

    W = {"v.patch_embd.weight": (rng.standard_normal((E, 3, P, P)) / math.sqrt(3 * P * P)).astype(np.float32),
         "v.patch_embd.bias": vec(E),
         "v.position_embd.weight": vec(n_patch * E, 0.0, 0.5).reshape(n_patch, E)}
    for i in range(v["n_layer"]):
        p = "v.blk.%d." % i
        for nm in ("attn_q", "attn_k", "attn_v", "attn_out"):
            W[p + nm + ".weight"] = lin(E, E)
            W[p + nm + ".bias"] = vec(E)
        W[p + "ln1.weight"], W[p + "ln1.bias"] = vec(E, 1.0), vec(E)
        W[p + "ln2.weight"], W[p + "ln2.bias"] = vec(E, 1.0), vec(E)
        W[p + "ffn_up.weight"], W[p + "ffn_up.bias"] = lin(F, E), vec(F)
        W[p + "ffn_down.weight"], W[p + "ffn_down.bias"] = lin(E, F), vec(E)
    W["v.post_ln.weight"], W["v.post_ln.bias"] = vec(E, 1.0), vec(E)
    W["mm.soft_emb_norm.weight"] = vec(E, 1.0)
    # used transposed: ggml ne [n_embd_text, n_embd], numpy [n_embd][n_embd_text]
    W["mm.input_projection.weight"] = (rng.standard_normal((E, t["n_embd"])) / math.sqrt(E)).astype(np.float32)
    return W


def g3_mmproj_kvs(v, t, file_type):
    return [
        ("general.architecture", gf.T_STR, "clip"),
        ("general.name", gf.T_STR, "kiln-vision-gemma3-mmproj"),
        ("general.file_type", gf.T_U32, file_type),
        ("clip.has_vision_encoder", gf.T_BOOL, True),
        ("clip.projector_type", gf.T_STR, "gemma3"),
        ("clip.use_gelu", gf.T_BOOL, True),
        ("clip.vision.image_size", gf.T_U32, v["image_size"]),
        ("clip.vision.patch_size", gf.T_U32, v["patch_size"]),
        ("clip.vision.embedding_length", gf.T_U32, v["n_embd"]),
        ("clip.vision.feed_forward_length", gf.T_U32, v["n_ff"]),
        ("clip.vision.projection_dim", gf.T_U32, t["n_embd"]),
        ("clip.vision.block_count", gf.T_U32, v["n_layer"]),
        ("clip.vision.attention.head_count", gf.T_U32, v["n_head"]),
        ("clip.vision.attention.layer_norm_epsilon", gf.T_F32, v["eps"]),
        ("clip.vision.image_mean", gf.T_ARR, np.array(v["mean"], np.float32), gf.T_F32),
        ("clip.vision.image_std", gf.T_ARR, np.array(v["std"], np.float32), gf.T_F32),
        ("clip.vision.projector.scale_factor", gf.T_U32, v["merge"]),
    ]


def g3_mmproj(path, W):
    kvs = g3_mmproj_kvs(G3_VIS, G3_TEXT, 0)
    tensors = [(n, list(reversed(a.shape)), gf.GGML_F32, (lambda a=a: f32_bytes(a))) for n, a in W.items()]
    gf.write_gguf(path, kvs, tensors)


def preprocess_square(px, size, mean, std):
    """llama.cpp's fixed-size preprocessing, float64 [3][size][size]."""
    h, w, _ = px.shape
    s = min(size / w, size / h)
    nw, nh = min(math.ceil(w * s), size), min(math.ceil(h * s), size)
    xr = (w - 1) / (nw - 1) if nw > 1 else 0.0
    yr = (h - 1) / (nh - 1) if nh > 1 else 0.0
    out = np.zeros((size, size, 3), np.uint8)
    ox, oy = (size - nw) // 2, (size - nh) // 2
    for y in range(nh):
        for x in range(nw):
            fx, fy = np.float32(x * np.float32(xr)), np.float32(y * np.float32(yr))
            x0, y0 = min(int(fx), w - 1), min(int(fy), h - 1)
            x1, y1 = min(x0 + 1, w - 1), min(y0 + 1, h - 1)
            ax, ay = np.float32(fx - x0), np.float32(fy - y0)
            for ch in range(3):
                p00, p10 = np.float32(px[y0, x0, ch]), np.float32(px[y0, x1, ch])
                p01, p11 = np.float32(px[y1, x0, ch]), np.float32(px[y1, x1, ch])
                top = p00 + (p10 - p00) * ax
                bot = p01 + (p11 - p01) * ax
                out[y + oy, x + ox, ch] = int(np.float32(top + (bot - top) * ay))
    f = out.astype(np.float64) / 255.0
    f = (f - np.array(mean)) / np.array(std)
    return f.transpose(2, 0, 1)


def g3_reference(W, pix, dtype):
    v = G3_VIS
    T = {k: torch.tensor(a, dtype=dtype) for k, a in W.items()}
    E, P, NH = v["n_embd"], v["patch_size"], v["n_head"]
    D = E // NH
    x = torch.nn.functional.conv2d(torch.tensor(pix, dtype=dtype)[None], T["v.patch_embd.weight"],
                                   T["v.patch_embd.bias"], stride=P)  # [1][E][side][side]
    side = x.shape[-1]
    x = x[0].reshape(E, side * side).T + T["v.position_embd.weight"]
    n = x.shape[0]
    for i in range(v["n_layer"]):
        p = "v.blk.%d." % i
        h = torch.nn.functional.layer_norm(x, (E,), T[p + "ln1.weight"], T[p + "ln1.bias"], v["eps"])
        q = (h @ T[p + "attn_q.weight"].T + T[p + "attn_q.bias"]).reshape(n, NH, D).transpose(0, 1)
        k = (h @ T[p + "attn_k.weight"].T + T[p + "attn_k.bias"]).reshape(n, NH, D).transpose(0, 1)
        vv = (h @ T[p + "attn_v.weight"].T + T[p + "attn_v.bias"]).reshape(n, NH, D).transpose(0, 1)
        a = torch.softmax(q @ k.transpose(1, 2) / math.sqrt(D), dim=-1) @ vv
        x = x + a.transpose(0, 1).reshape(n, E) @ T[p + "attn_out.weight"].T + T[p + "attn_out.bias"]
        h = torch.nn.functional.layer_norm(x, (E,), T[p + "ln2.weight"], T[p + "ln2.bias"], v["eps"])
        f = torch.nn.functional.gelu(h @ T[p + "ffn_up.weight"].T + T[p + "ffn_up.bias"], approximate="tanh")
        x = x + f @ T[p + "ffn_down.weight"].T + T[p + "ffn_down.bias"]
    x = torch.nn.functional.layer_norm(x, (E,), T["v.post_ln.weight"], T["v.post_ln.bias"], v["eps"])
    g = x.T.reshape(1, E, side, side)
    g = torch.nn.functional.avg_pool2d(g, v["merge"])
    g = g[0].reshape(E, -1).T  # [tokens][E], row by row
    g = g * torch.rsqrt((g * g).mean(-1, keepdim=True) + v["eps"]) * T["mm.soft_emb_norm.weight"]
    return (g @ T["mm.input_projection.weight"]).numpy()


def gen_gemma3():
    os.makedirs(OUT, exist_ok=True)
    px = image_pixels(40, 30)
    write_png(os.path.join(OUT, "image.png"), px)
    n_vocab = g3_text_model(os.path.join(OUT, "gemma3-text.gguf"))
    W = g3_vision_weights()
    g3_mmproj(os.path.join(OUT, "gemma3-mmproj.gguf"), W)
    pix = preprocess_square(px, G3_VIS["image_size"], G3_VIS["mean"], G3_VIS["std"])
    e32 = g3_reference(W, pix.astype(np.float32), torch.float32)
    e64 = g3_reference(W, pix, torch.float64)
    open(os.path.join(OUT, "gemma3-embd.bin"), "wb").write(f32_bytes(e32))
    meta_path = os.path.join(OUT, "gemma3.json")
    meta = json.load(open(meta_path)) if os.path.exists(meta_path) else {}
    meta.update({
        "text": "gemma3-text.gguf", "mmproj": "gemma3-mmproj.gguf", "image": "image.png",
        "image_w": 40, "image_h": 30, "n_vocab": n_vocab, "n_tokens": int(e32.shape[0]),
        "n_embd": int(e32.shape[1]), "embd": "gemma3-embd.bin",
        "f32_vs_f64_max_abs": float(np.abs(e32 - e64).max()), "embd_max_abs": float(np.abs(e64).max()),
    })
    json.dump(meta, open(meta_path, "w"), indent=1)
    open(meta_path, "a").write("\n")
    print("gemma3: %d tokens x %d, f32 vs f64 %.2e" % (e32.shape[0], e32.shape[1], meta["f32_vs_f64_max_abs"]))


def g3_bench_mmproj(path, v, t):
    """The benchmark's projector, F16 matrices (the patch convolution too, as
    llama.cpp's converter writes an F16 mmproj), F32 vectors and position
    embeddings; each tensor drawn when written (the whole never in memory)."""
    E, F, P = v["n_embd"], v["n_ff"], v["patch_size"]
    n_patch = (v["image_size"] // P) ** 2
    rng = np.random.default_rng(v["seed"])

    def lin(n_out, n_in):
        return lambda: f16_bytes(rng.standard_normal((n_out, n_in), np.float32) / np.float32(math.sqrt(n_in)))

    def vec(n, mu=0.0, s=0.2):
        return lambda: f32_bytes(mu + s * rng.standard_normal(n, np.float32))

    T = [("v.patch_embd.weight", [P, P, 3, E], gf.GGML_F16,
          lambda: f16_bytes(rng.standard_normal((E, 3, P, P), np.float32) / np.float32(math.sqrt(3 * P * P)))),
         ("v.patch_embd.bias", [E], gf.GGML_F32, vec(E)),
         ("v.position_embd.weight", [E, n_patch], gf.GGML_F32, vec(n_patch * E, 0.0, 0.5))]
    for i in range(v["n_layer"]):
        p = "v.blk.%d." % i
        for nm in ("attn_q", "attn_k", "attn_v", "attn_out"):
            T += [(p + nm + ".weight", [E, E], gf.GGML_F16, lin(E, E)), (p + nm + ".bias", [E], gf.GGML_F32, vec(E))]
        T += [(p + "ln1.weight", [E], gf.GGML_F32, vec(E, 1.0)), (p + "ln1.bias", [E], gf.GGML_F32, vec(E)),
              (p + "ln2.weight", [E], gf.GGML_F32, vec(E, 1.0)), (p + "ln2.bias", [E], gf.GGML_F32, vec(E)),
              (p + "ffn_up.weight", [E, F], gf.GGML_F16, lin(F, E)), (p + "ffn_up.bias", [F], gf.GGML_F32, vec(F)),
              (p + "ffn_down.weight", [F, E], gf.GGML_F16, lin(E, F)),
              (p + "ffn_down.bias", [E], gf.GGML_F32, vec(E))]
    T += [("v.post_ln.weight", [E], gf.GGML_F32, vec(E, 1.0)), ("v.post_ln.bias", [E], gf.GGML_F32, vec(E)),
          ("mm.soft_emb_norm.weight", [E], gf.GGML_F32, vec(E, 1.0)),
          ("mm.input_projection.weight", [t["n_embd"], E], gf.GGML_F16, lin(E, t["n_embd"]))]
    gf.write_gguf(path, g3_mmproj_kvs(v, t, 1), T)


def bench_image(w, h):
    """image_pixels' pattern, vectorised (896 x 896)."""
    x = np.arange(w)[None, :].repeat(h, 0)
    y = np.arange(h)[:, None].repeat(w, 1)
    px = np.zeros((h, w, 3), np.uint8)
    px[..., 0] = (x * 255) // (w - 1)
    px[..., 1] = (y * 255) // (h - 1)
    px[..., 2] = np.where((x // 8 + y // 8) % 2 == 1, 200, 30)
    return px


def gen_bench(out, text=G3B_TEXT, vis=G3B_VIS):
    os.makedirs(out, exist_ok=True)
    g3_text_model(os.path.join(out, "text.gguf"), text, f16=True)
    g3_bench_mmproj(os.path.join(out, "mmproj.gguf"), vis, text)
    write_png(os.path.join(out, "image.png"), bench_image(vis["image_size"], vis["image_size"]))
    print("bench: %s/{text.gguf,mmproj.gguf,image.png}" % out)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bench", metavar="DIR", help="write the TTFT benchmark's files to DIR instead")
    a = ap.parse_args()
    if a.bench:
        gen_bench(a.bench)
        return
    torch.manual_seed(0)
    gen_gemma3()


if __name__ == "__main__":
    main()
