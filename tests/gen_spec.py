#!/usr/bin/python3
"""Fixtures and benchmark models for speculative decoding (tests/test_spec.c).

    /usr/bin/python3 tests/gen_spec.py                 # tests/data/spec/
    /usr/bin/python3 tests/gen_spec.py --bench-copy DIR

The fixtures are tiny random-weight models with stories260K's SentencePiece
vocabulary (512 tokens), so each can be the draft of the others and of the
bundled stories model, with head size 32 so the Q8_0 KV cache runs on them:

  spec-llama.gguf   llama, n_embd 128, 2 layers, 4 heads / 2 KV heads of 32,
                    n_ff 256, F32, untied head
  spec-llama.json   prompt_ids, greedy_ids (32, from gen_fixtures.py's float64
                    PyTorch forward), greedy_top2_margins, notes

  mtp-*.gguf        hybrid (qwen35 family) models with one MTP (NextN) block,
  mtp-*.json        and from an independent float64 PyTorch implementation of
                    the block: the MTP logits (mtp_logits_file, float32) at
                    the first proposal position (the prompt followed by the
                    first greedy token) and chained from there, with the
                    chain's argmax ids; greedy_ids from gen_fixtures.py's
                    hybrid reference.  mtp-qwen35 falls back to the model's
                    head, output norm and embedding; mtp-qwen35moe (MoE
                    block) carries its own; mtp-agree is built so that the
                    block predicts what the target does (see gen_mtp_agree).

--bench-mtp DIR writes the MTP speed test's models (not stored; see
docs/performance.md), Qwen3.5-shaped hybrids at the hybrid bench model's
shapes (tests/gen_fixtures.py --bench-hybrid: n_embd 1024, 24 layers, GPT-2
vocabulary, F16) with one MTP block, whose greedy output walks a random cycle
of the vocabulary (as mtp-agree: zero output projections, the head's row
sigma(t) along token t's embedding):

  mtp-agree-bench-f16.gguf  the block's eh_proj passes the embedding through
                            (its own output projections zero): it predicts
                            the cycle, so greedy proposals are accepted
  mtp-rand-bench-f16.gguf   a random block (proposals are rejected: the
                            overhead of trying)

--bench-copy DIR [--arch llama] writes the speed test's models (not stored;
see docs/performance.md), whose greedy output copies text by construction:

  copy-0.6b.gguf    Qwen3-0.6B's shapes (the --bench model's, GPT-2
                    vocabulary), F16, an untied head: every layer runs at full
                    cost, but attn_output and ffn_down are zero, so the output
                    depends on the current token only.  A chain of 1200
                    distinct word tokens c_0, c_1, ... has output rows
                    row(c_i+1) = 30 / sqrt(E) * e(c_i) / |e(c_i)|, so after
                    c_i the logit of c_i+1 is 30 and every other is 30 times
                    a cosine of two random directions (|.| < 5): greedy
                    decoding walks the chain.
  copy-draft.gguf   the same chain in a 2-layer n_embd 128 model (a draft
                    of the same vocabulary that agrees with the target)
  rand-draft.gguf   a 2-layer n_embd 128 random model of the same vocabulary
                    (a draft that never agrees)
  copy.txt          a prompt whose answer repeats 200 chain words verbatim
  copy-edits.txt    the same passage with every 16th word of the prompt's
                    copy replaced by another word: the answer differs from the
                    quoted text there
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
import gen_fixtures as gf  # noqa: E402  (its writer, reader, weights and reference forward)

OUT_DIR = os.path.join(HERE, "data", "spec")
STORIES = os.path.join(HERE, "..", "models", "stories260K.gguf")


def stories_vocab():
    g = gf.GGUFFile(STORIES)
    tok_kvs = [(k,) + (g.kv[k][0], g.kv[k][1]) + ((g.kv[k][2],) if g.kv[k][0] == gf.T_ARR else ())
               for k in g.kv_order if k.startswith("tokenizer.")]
    n_vocab = len(g.get("tokenizer.ggml.tokens"))
    types = g.get("tokenizer.ggml.token_type")
    special = {i for i, t in enumerate(types) if t in (2, 3, 5)} | {0, 1, 2}
    return tok_kvs, n_vocab, special


def write_json(path, meta):
    with open(path, "w", encoding="utf-8") as f:
        f.write("{\n" + ",\n".join("  %s: %s" % (json.dumps(k), json.dumps(v, ensure_ascii=False))
                                      for k, v in meta.items()) + "\n}\n")


SPEC_LLAMA = gf.Cfg(name="spec-llama", arch="llama", n_embd=128, n_layer=2, n_head=4, n_head_kv=2, head_dim=32,
                    n_ff=256, eps=1e-5, rope_base=10000.0, ctx=2048, seed=21000)


def gen_spec_llama():
    cfg = SPEC_LLAMA
    tok_kvs, n_vocab, special = stories_vocab()
    for seed in range(cfg.seed, cfg.seed + 100):
        rng = np.random.default_rng(seed)
        prompt = [1] + [int(t) for t in rng.integers(3, n_vocab, 23)]
        W = gf.make_weights(cfg, n_vocab, seed)
        ref = gf.reference(cfg, W, prompt, special)
        if ref is not None:
            break
    else:
        raise SystemExit("spec-llama: no seed gives a usable greedy continuation")
    names = gf.tensor_order(cfg)
    packed = gf.f32_packed(W)
    kvs = gf.model_kvs(cfg, cfg.name, tok_kvs, gf.FTYPE_ALL_F32)
    path = os.path.join(OUT_DIR, cfg.name + ".gguf")
    gf.write_gguf(path, kvs, [(n, list(reversed(W[n].shape)), packed[n][0], (lambda b=packed[n][1]: b))
                              for n in names])
    gf.check_written(path, kvs, names, packed, W)
    notes = ("%s. stories260K's tokenizer. Random weights, seed %d. Prompt: BOS and 23 random ids. Greedy ids "
             "from gen_fixtures.py's float64 PyTorch forward, recomputing the sequence each step. Smallest top-2 "
             "margin %.4g." % (gf.describe(cfg, n_vocab), seed, ref["min_margin"]))
    write_json(os.path.join(OUT_DIR, cfg.name + ".json"),
               {"model": cfg.name + ".gguf", "prompt_ids": prompt, "n_vocab": n_vocab, "greedy_ids": ref["greedy"],
                "greedy_top2_margins": [round(m, 6) for m in ref["margins"]], "notes": notes})
    print("%-12s greedy %s... min margin %.4f (%.0f KB)" % (cfg.name, ref["greedy"][:8], ref["min_margin"],
                                                          os.path.getsize(path) / 1e3))


# ---------------------------------------------------------------------------
# MTP (NextN) fixtures.
#
# The block (as Qwen 3.5 checkpoints carry it; llama.cpp's qwen35 MTP graph):
#   cell p pairs the target's final hidden state after the output norm at
#   p - 1 (zero at p = 0) with token p:
#   x = eh_proj [rms(emb(tok_p)) * enorm | rms(h_{p-1}) * hnorm]
#   x += Wo(attn(rms(x) * attn_norm) * sigmoid(gate))     causal over cells 0..p, RoPE at p
#   x += ffn(rms(x) * post_attention_norm)                dense SwiGLU or MoE as in the target
#   h' = rms(x) * head_norm;  logits = head h'            (predicting token p + 1)
# and chains with h' standing for the next cell's hidden state.

MTP_CHAIN = 4
MTP_GEN = 24


def mtp_block(cfg, Wt, X):
    """The block over cells with inputs X [N, 2E]: (h' [N, E], logits [N, V])."""
    N = X.shape[0]
    E, D, H, HK = cfg.n_embd, cfg.head_dim, cfg.n_head, cfg.n_head_kv
    eps = float(np.float32(cfg.eps))
    p = "blk.%d." % cfg.n_layer
    rms = gf.rms_norm
    sig, silu = torch.sigmoid, torch.nn.functional.silu
    half = cfg.n_rot // 2
    inv = cfg.rope_base ** (-2.0 * torch.arange(half, dtype=torch.float64) / cfg.n_rot)
    ang = torch.arange(N, dtype=torch.float64)[:, None] * inv
    cos, sin = torch.cos(ang)[:, None, :], torch.sin(ang)[:, None, :]

    def rope(v):
        a, b = v[..., :half], v[..., half:cfg.n_rot]
        return torch.cat([a * cos - b * sin, a * sin + b * cos, v[..., cfg.n_rot:]], dim=-1)

    x = X @ Wt[p + "nextn.eh_proj.weight"].T
    h = rms(x, Wt[p + "attn_norm.weight"], eps)
    qg = (h @ Wt[p + "attn_q.weight"].T).view(N, H, 2 * D)
    q = rope(rms(qg[:, :, :D], Wt[p + "attn_q_norm.weight"], eps))
    k = rope(rms((h @ Wt[p + "attn_k.weight"].T).view(N, HK, D), Wt[p + "attn_k_norm.weight"], eps))
    v = (h @ Wt[p + "attn_v.weight"].T).view(N, HK, D)
    mask = torch.triu(torch.ones(N, N, dtype=torch.bool), diagonal=1)
    heads = []
    for hh in range(H):
        g = hh // (H // HK)
        sc = (q[:, hh] @ k[:, g].T) / math.sqrt(D)
        heads.append(torch.softmax(sc.masked_fill(mask, float("-inf")), dim=-1) @ v[:, g])
    att = torch.stack(heads, dim=1) * sig(qg[:, :, D:])
    x = x + att.reshape(N, H * D) @ Wt[p + "attn_output.weight"].T
    h = rms(x, Wt[p + "post_attention_norm.weight"], eps)
    if cfg.n_expert == 0:
        y = (silu(h @ Wt[p + "ffn_gate.weight"].T) * (h @ Wt[p + "ffn_up.weight"].T)) @ Wt[p + "ffn_down.weight"].T
    else:
        probs = torch.softmax(h @ Wt[p + "ffn_gate_inp.weight"].T, dim=-1)
        top = torch.topk(probs, cfg.n_used, dim=-1)
        wts = top.values / top.values.sum(dim=-1, keepdim=True)
        y = torch.zeros_like(x)
        for t in range(N):
            for s_ in range(cfg.n_used):
                e = int(top.indices[t, s_])
                a = silu(Wt[p + "ffn_gate_exps.weight"][e] @ h[t]) * (Wt[p + "ffn_up_exps.weight"][e] @ h[t])
                y[t] = y[t] + wts[t, s_] * (Wt[p + "ffn_down_exps.weight"][e] @ a)
        sh = (silu(h @ Wt[p + "ffn_gate_shexp.weight"].T) * (h @ Wt[p + "ffn_up_shexp.weight"].T)) \
            @ Wt[p + "ffn_down_shexp.weight"].T
        y = y + sh * sig(h @ Wt[p + "ffn_gate_inp_shexp.weight"])[:, None]
    x = x + y
    hp = rms(x, Wt.get(p + "nextn.shared_head_norm.weight", Wt["output_norm.weight"]), eps)
    head = Wt.get(p + "nextn.shared_head_head.weight", Wt.get("output.weight", Wt["token_embd.weight"]))
    return hp, hp @ head.T


def mtp_pairs(cfg, Wt, toks, hid):
    """Inputs of cells with tokens toks and hidden states hid (row p: the one
    paired with toks[p]; None: zero)."""
    p = "blk.%d." % cfg.n_layer
    eps = float(np.float32(cfg.eps))
    emb = Wt.get(p + "nextn.embed_tokens.weight", Wt["token_embd.weight"])
    e = gf.rms_norm(emb[torch.tensor(toks)], Wt[p + "nextn.enorm.weight"], eps)
    hs = torch.stack([torch.zeros(cfg.n_embd, dtype=torch.float64) if r is None else r for r in hid])
    return torch.cat([e, gf.rms_norm(hs, Wt[p + "nextn.hnorm.weight"], eps)], dim=1)


def mtp_chain(cfg, Wt, ids, n):
    """The target holds ids[:-1]; the chain from cell len(ids) - 1 (token
    ids[-1]) for n steps: (logits [n, V], argmax ids)."""
    _, Hs = gf.hyb_forward(cfg, Wt, ids[:-1], hidden=True)
    toks, hid = list(ids), [None] + [Hs[t] for t in range(len(ids) - 1)]
    out, chain = [], []
    for _ in range(n):
        hp, lg = mtp_block(cfg, Wt, mtp_pairs(cfg, Wt, toks, hid))
        out.append(lg[-1])
        d = int(torch.argmax(lg[-1]))
        chain.append(d)
        toks.append(d)
        hid.append(hp[-1])
    return torch.stack(out), chain


def mtp_first_agree(cfg, Wt, prompt, greedy):
    """How many of the greedy continuation's tokens (after the first) the
    block's first proposal gets right, with the target's hidden states in
    its cache: what greedy MTP speculation accepts at best."""
    ids = list(prompt) + list(greedy)
    _, Hs = gf.hyb_forward(cfg, Wt, ids, hidden=True)
    hid = [None] + [Hs[t] for t in range(len(ids) - 1)]
    _, lg = mtp_block(cfg, Wt, mtp_pairs(cfg, Wt, ids, hid))
    T = len(prompt)
    return sum(int(torch.argmax(lg[T + i])) == greedy[i + 1] for i in range(len(greedy) - 1))


def mtp_emit(cfg, W, prompt, ref, seed, n_vocab, tok_kvs, how):
    W64 = {k: torch.from_numpy(np.asarray(v, np.float64)) for k, v in W.items()}
    lg, chain = mtp_chain(cfg, W64, list(prompt) + [ref["greedy"][0]], MTP_CHAIN)
    agree = mtp_first_agree(cfg, W64, prompt, ref["greedy"])
    names = gf.hyb_tensor_order(W)
    packed = gf.f32_packed(W)
    kvs = gf.hyb_kvs(cfg, tok_kvs, cfg.name, gf.FTYPE_ALL_F32)
    path = os.path.join(OUT_DIR, cfg.name + ".gguf")
    gf.write_gguf(path, kvs, [(n, list(reversed(W[n].shape)), packed[n][0], (lambda b=packed[n][1]: b))
                              for n in names])
    gf.check_written(path, kvs, names, packed, W)
    with open(os.path.join(OUT_DIR, cfg.name + ".mtp.f32"), "wb") as f:
        f.write(lg.numpy().astype("<f4").tobytes())
    notes = ("%s: %d main layers (%s), 1 MTP block (%s FFN), n_embd %d, stories260K's tokenizer; %s. Random "
             "weights, seed %d. Prompt: BOS and %d random ids. greedy_ids from gen_fixtures.py's float64 hybrid "
             "reference; mtp_logits_file: %d rows of float32 MTP logits from tests/gen_spec.py's float64 block, "
             "the first at the cell of greedy_ids[0] (after the prompt), each next one chained on the argmax "
             "before (mtp_chain). mtp_first_agree: of the %d greedy tokens after the first, how many the block's "
             "first proposal predicts with the target's hidden states in its cache." %
             (cfg.arch, cfg.n_layer, "".join("R" if r else "A" for r in gf.hyb_recurrent(cfg)),
              "MoE" if cfg.n_expert else "dense", cfg.n_embd, how, seed, len(prompt) - 1, MTP_CHAIN,
              len(ref["greedy"]) - 1))
    write_json(os.path.join(OUT_DIR, cfg.name + ".json"),
               {"model": cfg.name + ".gguf", "prompt_ids": prompt, "n_vocab": n_vocab, "greedy_ids": ref["greedy"],
                "greedy_top2_margins": [round(m, 6) for m in ref["margins"]],
                "mtp_logits_file": cfg.name + ".mtp.f32", "mtp_chain": chain, "mtp_first_agree": agree,
                "notes": notes})
    print("%-14s greedy %s... chain %s, first-proposal agreement %d/%d (%.0f KB)" %
          (cfg.name, ref["greedy"][:6], chain, agree, len(ref["greedy"]) - 1, os.path.getsize(path) / 1e3))


MTP_CFGS = [
    gf.Cfg(name="mtp-qwen35", arch="qwen35", n_embd=32, n_layer=3, interval=3, n_head=4, n_head_kv=2, head_dim=16,
           n_rot=8, n_ff=48, Hk=2, Hv=4, Dk=16, K=4, eps=1e-6, rope_base=10000000.0, ctx=4096, n_expert=0,
           grouped=False, ba=False, layer_array=False, mtp=1, seed=22000),
    gf.Cfg(name="mtp-qwen35moe", arch="qwen35moe", n_embd=32, n_layer=2, interval=2, n_head=4, n_head_kv=2,
           head_dim=16, n_rot=8, n_ff=64, Hk=2, Hv=4, Dk=16, K=4, eps=1e-6, rope_base=10000.0, ctx=4096,
           n_expert=4, n_used=2, F_exp=32, F_sh=32, grouped=False, ba=False, layer_array=False, mtp=1, seed=22100),
]


def mtp_search(cfg, make, n_prompt):
    tok_kvs, n_vocab, special = stories_vocab()
    saved = gf.N_GEN
    gf.N_GEN = MTP_GEN
    try:
        for seed in range(cfg.seed, cfg.seed + 100):
            rng = np.random.default_rng(seed)
            prompt = [1] + [int(t) for t in rng.integers(3, n_vocab, n_prompt - 1)]
            W = make(cfg, n_vocab, seed)
            ref = gf.hyb_reference(cfg, W, prompt, special)
            if ref is not None:
                return W, prompt, ref, seed, n_vocab, tok_kvs
    finally:
        gf.N_GEN = saved
    raise SystemExit("%s: no seed gives a usable greedy continuation" % cfg.name)


def mtp_weights(cfg, n_vocab, seed):
    W = gf.hyb_weights(cfg, n_vocab, seed)
    if cfg.n_expert:  # its own head norm, head and embedding (optional tensors)
        rng = np.random.default_rng(seed + 1)
        p = "blk.%d.nextn." % cfg.n_layer
        E = cfg.n_embd
        W[p + "shared_head_norm.weight"] = (1.0 + 0.2 * rng.standard_normal(E)).astype(np.float32)
        W[p + "shared_head_head.weight"] = (rng.standard_normal((n_vocab, E)) / math.sqrt(E)).astype(np.float32)
        W[p + "embed_tokens.weight"] = (rng.standard_normal((n_vocab, E)) * (3.0 / math.sqrt(E))).astype(np.float32)
    return W


def agree_weights(cfg, n_vocab, seed):
    """A target whose greedy walk follows a random cycle of the non-special
    tokens (an untied head with row sigma(t) along token t's embedding, the
    layers' outputs scaled down so the embedding dominates the residual),
    and an MTP block whose eh_proj passes the embedding half through and
    drops the hidden half (with the layers' outputs scaled down too), so its
    head, the target's, predicts the cycle's next token from the token it
    is given: what the target then does."""
    W = gf.hyb_weights(cfg, n_vocab, seed)
    rng = np.random.default_rng(seed + 1)
    E = cfg.n_embd
    for n in list(W):
        if n.endswith(("attn_output.weight", "ssm_out.weight", "ffn_down.weight")):
            W[n] = (W[n] * 0.05).astype(np.float32)
    emb = W["token_embd.weight"]
    u = emb / np.linalg.norm(emb, axis=1, keepdims=True)
    order = 3 + rng.permutation(n_vocab - 3)
    sigma = np.empty(n_vocab, dtype=np.int64)
    sigma[order] = np.roll(order, -1)
    sigma[:3] = order[:3]
    out = np.zeros((n_vocab, E), dtype=np.float32)
    for t in range(3, n_vocab):
        out[sigma[t]] = 30.0 / math.sqrt(E) * u[t]
    W["output.weight"] = out
    W["output_norm.weight"] = np.ones(E, dtype=np.float32)
    p = "blk.%d.nextn." % cfg.n_layer
    W[p + "eh_proj.weight"] = np.concatenate([np.eye(E), np.zeros((E, E))], axis=1).astype(np.float32)
    W[p + "enorm.weight"] = np.ones(E, dtype=np.float32)
    return W


MTP_AGREE = gf.Cfg(name="mtp-agree", arch="qwen35", n_embd=32, n_layer=3, interval=3, n_head=4, n_head_kv=2,
                   head_dim=16, n_rot=8, n_ff=48, Hk=2, Hv=4, Dk=16, K=4, eps=1e-6, rope_base=10000000.0, ctx=4096,
                   n_expert=0, grouped=False, ba=False, layer_array=False, mtp=1, seed=22200)


def gen_mtp():
    for cfg in MTP_CFGS:
        W, prompt, ref, seed, n_vocab, tok_kvs = mtp_search(cfg, mtp_weights, 24)
        how = ("its own embedding, head norm and head" if cfg.n_expert else
               "the model's embedding, output norm and head (tied) stand in for its own")
        mtp_emit(cfg, W, prompt, ref, seed, n_vocab, tok_kvs, how)
    W, prompt, ref, seed, n_vocab, tok_kvs = mtp_search(MTP_AGREE, agree_weights, 24)
    mtp_emit(MTP_AGREE, W, prompt, ref, seed, n_vocab, tok_kvs,
             "built to agree: " + " ".join(agree_weights.__doc__.split()))


# ---------------------------------------------------------------------------
# The copy models of the speed test.

COPY_CHAIN = 1200


def gpt2_vocab():
    g = gf.GGUFFile(os.path.join(gf.VOCAB_DIR, "ggml-vocab-gpt-2.gguf"))
    tok_kvs = [(k,) + (g.kv[k][0], g.kv[k][1]) + ((g.kv[k][2],) if g.kv[k][0] == gf.T_ARR else ())
               for k in g.kv_order if k.startswith("tokenizer.")]
    tokens = [t.decode("utf-8", "replace") if isinstance(t, bytes) else t for t in g.get("tokenizer.ggml.tokens")]
    return tok_kvs, tokens


def word_tokens(tokens, rng, n):
    """n distinct tokens of one space and 3..8 lowercase letters (GPT-2 writes the space as U+0120): text
    made of them tokenizes back to them, one per word."""
    cand = [i for i, t in enumerate(tokens)
            if len(t) >= 4 and len(t) <= 9 and t[0] == "\u0120" and t[1:].isascii() and t[1:].isalpha()
            and t[1:].islower()]
    pick = rng.choice(len(cand), n, replace=False)
    return [cand[i] for i in pick]


def copy_model(path, tok_kvs, n_vocab, chain, E, n_layer, H, HK, D, F, seed, chain_head=True, arch="qwen3"):
    cfg = gf.Cfg(name=os.path.basename(path)[:-5], arch=arch, n_embd=E, n_layer=n_layer, n_head=H,
                 n_head_kv=HK, head_dim=D, n_ff=F, eps=1e-6, rope_base=1000000.0, ctx=40960, tied=False,
                 qk_norm=arch == "qwen3", write_key_length=True)
    rng = np.random.default_rng(seed)
    emb = rng.standard_normal((n_vocab, E), np.float32) / np.float32(math.sqrt(E))
    out = np.zeros((n_vocab, E), np.float32)
    if chain_head:
        for a, b in zip(chain[:-1], chain[1:]):
            out[b] = emb[a] / np.linalg.norm(emb[a]) * np.float32(30.0 / math.sqrt(E))
    else:
        out = rng.standard_normal((n_vocab, E), np.float32) * np.float32(3.0 / math.sqrt(E))

    def mat(shape, zero=False):
        if zero:
            return np.zeros(shape, np.float32)
        return rng.standard_normal(shape, np.float32) * np.float32(1.0 / math.sqrt(shape[1]))

    W = {"token_embd.weight": emb, "output_norm.weight": np.ones(E, np.float32), "output.weight": out}
    for i in range(n_layer):
        p = "blk.%d." % i
        W.update({p + "attn_norm.weight": np.ones(E, np.float32), p + "attn_q.weight": mat((H * D, E)),
                  p + "attn_k.weight": mat((HK * D, E)), p + "attn_v.weight": mat((HK * D, E)),
                  p + "attn_output.weight": mat((E, H * D), chain_head), p + "ffn_norm.weight": np.ones(E, np.float32),
                  p + "ffn_gate.weight": mat((F, E)), p + "ffn_up.weight": mat((F, E)),
                  p + "ffn_down.weight": mat((E, F), chain_head)})
        if cfg.qk_norm:
            W.update({p + "attn_q_norm.weight": np.ones(D, np.float32),
                      p + "attn_k_norm.weight": np.ones(D, np.float32)})
    names = gf.tensor_order(cfg)
    assert sorted(names) == sorted(W)
    tensors = [(n, list(reversed(W[n].shape)), gf.GGML_F32 if W[n].ndim == 1 else gf.GGML_F16,
                (lambda a=W[n]: a.astype("<f4" if a.ndim == 1 else "<f2").tobytes())) for n in names]
    gf.write_gguf(path, gf.model_kvs(cfg, cfg.name, tok_kvs, gf.FTYPE_MOSTLY_F16), tensors)
    if chain_head:  # the float32 forward of this very model walks the chain
        Wt = {k: torch.from_numpy(v.astype(np.float16).astype(np.float32) if v.ndim == 2 else v) for k, v in W.items()}
        ids = list(chain[:3])
        for _ in range(4):
            ids.append(int(torch.argmax(gf.forward(cfg, Wt, ids)[-1])))
        assert ids == list(chain[:7]), (ids, chain[:7])
    print("wrote %s (%.1f MB)" % (path, os.path.getsize(path) / 1e6))


def gen_bench_copy(out_dir, arch):
    os.makedirs(out_dir, exist_ok=True)
    sfx = "" if arch == "qwen3" else "-" + arch
    tok_kvs, tokens = gpt2_vocab()
    n_vocab = len(tokens)
    rng = np.random.default_rng(77)
    chain = word_tokens(tokens, rng, COPY_CHAIN + 40)
    others, chain = chain[COPY_CHAIN:], chain[:COPY_CHAIN]
    copy_model(os.path.join(out_dir, "copy-draft%s.gguf" % sfx), tok_kvs, n_vocab, chain, 128, 2, 2, 1, 64, 256, 78,
               arch=arch)
    copy_model(os.path.join(out_dir, "rand-draft%s.gguf" % sfx), tok_kvs, n_vocab, chain, 128, 2, 2, 1, 64, 256, 79,
               chain_head=False, arch=arch)
    copy_model(os.path.join(out_dir, "copy-0.6b%s.gguf" % sfx), tok_kvs, n_vocab, chain, 1024, 28, 16, 8, 128, 3072,
               80, arch=arch)
    word = lambda i: tokens[i][1:]  # noqa: E731
    passage = chain[:200]
    edited = [others[(k // 16) % len(others)] if k % 16 == 15 else t for k, t in enumerate(passage)]
    for name, quoted in (("copy.txt", passage), ("copy-edits.txt", edited)):
        text = ("Here is a list of words:" + "".join(" " + word(t) for t in quoted) +
                "\n\nWrite the list again:" + " " + word(chain[0]))
        with open(os.path.join(out_dir, name), "w", encoding="utf-8") as f:
            f.write(text)
    print("wrote the prompts to %s (chain starts %s)" % (out_dir, " ".join(word(t) for t in chain[:6])))


def gen_bench_mtp(out_dir):
    os.makedirs(out_dir, exist_ok=True)
    g = gf.GGUFFile(os.path.join(HERE, "data", "vocab", "ggml-vocab-gpt-2.gguf"))
    tok_kvs = [(k,) + (g.kv[k][0], g.kv[k][1]) + ((g.kv[k][2],) if g.kv[k][0] == gf.T_ARR else ())
               for k in g.kv_order if k.startswith("tokenizer.")]
    V = len(g.get("tokenizer.ggml.tokens"))
    eos = int(g.get("tokenizer.ggml.eos_token_id"))
    cfg = gf.Cfg(name="mtp-bench", arch="qwen35", n_embd=1024, n_layer=24, interval=4, n_head=8, n_head_kv=2,
                 head_dim=128, n_rot=32, n_ff=3584, Hk=4, Hv=8, Dk=128, K=4, eps=1e-6, rope_base=10000000.0,
                 ctx=32768, n_expert=0, grouped=False, ba=False, layer_array=False, mtp=1)
    E, D, H, HK, Dk, Hk, Hv, F = cfg.n_embd, cfg.head_dim, cfg.n_head, cfg.n_head_kv, cfg.Dk, cfg.Hk, cfg.Hv, cfg.n_ff
    conv_dim, vd = 2 * Hk * Dk + Hv * Dk, Hv * Dk
    rng = np.random.default_rng(31)
    emb = rng.standard_normal((V, E), np.float32) / np.float32(math.sqrt(E))
    order = np.array([t for t in range(V) if t != eos])
    order = order[rng.permutation(len(order))]
    out = np.zeros((V, E), np.float32)
    u = emb / np.linalg.norm(emb, axis=1, keepdims=True)
    out[np.roll(order, -1)] = u[order] * np.float32(30.0 / math.sqrt(E))
    zero = ("attn_output.weight", "ssm_out.weight", "ffn_down.weight")
    for kind in ("agree", "rand"):
        shapes = {"token_embd.weight": (V, E), "output_norm.weight": (E,), "output.weight": (V, E)}
        f32 = {"output_norm.weight"}
        blocks = [(i, rec) for i, rec in enumerate(gf.hyb_recurrent(cfg))] + [(cfg.n_layer, False)]
        for i, rec in blocks:
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
            shapes.update({p + "ffn_gate.weight": (F, E), p + "ffn_up.weight": (F, E), p + "ffn_down.weight": (E, F)})
        p = "blk.%d.nextn." % cfg.n_layer
        shapes.update({p + "eh_proj.weight": (E, 2 * E), p + "enorm.weight": (E,), p + "hnorm.weight": (E,)})

        def producer(name, shape, kind=kind):
            def make():
                if name == "token_embd.weight":
                    return emb.astype("<f2").tobytes()
                if name == "output.weight":
                    return out.astype("<f2").tobytes()
                if name.endswith("ssm_a"):
                    return (-np.exp(rng.uniform(-2.0, 0.0, shape))).astype("<f4").tobytes()
                if name.endswith("ssm_dt.bias"):
                    return (-0.5 + 0.5 * rng.standard_normal(shape)).astype("<f4").tobytes()
                if len(shape) == 1:
                    return np.ones(shape, np.float32).astype("<f4").tobytes()
                if name.endswith(zero) and (kind == "agree" or not name.startswith("blk.%d." % cfg.n_layer)):
                    return np.zeros(shape, "<f2").tobytes()
                if name.endswith("eh_proj.weight") and kind == "agree":
                    return np.concatenate([np.eye(E), np.zeros((E, E))], axis=1).astype("<f2").tobytes()
                a = rng.standard_normal(shape, np.float32)
                a *= np.float32(1.0 / math.sqrt(shape[-1]))
                return a.astype("<f4" if name in f32 else "<f2").tobytes()
            return make

        names = gf.hyb_tensor_order(shapes)
        tensors = [(n, list(reversed(shapes[n])), gf.GGML_F32 if len(shapes[n]) == 1 or n in f32 else gf.GGML_F16,
                    producer(n, shapes[n])) for n in names]
        path = os.path.join(out_dir, "mtp-%s-bench-f16.gguf" % kind)
        gf.write_gguf(path, gf.hyb_kvs(cfg, tok_kvs, "mtp-%s-bench" % kind, gf.FTYPE_MOSTLY_F16), tensors)
        print("wrote %s (%.1f MB)" % (path, os.path.getsize(path) / 1e6))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bench-copy", metavar="DIR", help="write the speed test's copy models and prompts")
    ap.add_argument("--bench-mtp", metavar="DIR", help="write the MTP speed test's models")
    ap.add_argument("--arch", default="qwen3", choices=["qwen3", "llama"],
                    help="--bench-copy: the models' architecture (llama: the same weights without Q/K norms, "
                         "for builds of other programs that do not load qwen3; files get a -llama suffix)")
    args = ap.parse_args()
    torch.set_num_threads(1)
    if args.bench_mtp:
        gen_bench_mtp(args.bench_mtp)
        return
    if args.bench_copy:
        gen_bench_copy(args.bench_copy, args.arch)
        return
    os.makedirs(OUT_DIR, exist_ok=True)
    gen_spec_llama()
    gen_mtp()
    for fn in sorted(os.listdir(OUT_DIR)):
        print("%s  %s" % (gf.sha256(os.path.join(OUT_DIR, fn)), fn))


if __name__ == "__main__":
    sys.exit(main())
