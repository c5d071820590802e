#!/usr/bin/python3
"""Reference fixture generator for kiln's encoder families: ModernBERT (with a
reranker head, and as a decision pack with typed heads), a BERT cross-encoder
reranker, a Qwen3-style causal reranker and EmbeddingGemma.

Usage (from the repository root):

    /usr/bin/python3 tests/gen_encoders.py
        Regenerates everything under tests/data/encoders/ (deterministic).

    /usr/bin/python3 tests/gen_encoders.py --bench-modernbert OUT.gguf
    /usr/bin/python3 tests/gen_encoders.py --bench-gemma OUT.gguf
        Random F16 weights in ModernBERT-base's shapes (with a reranker head)
        and EmbeddingGemma-300m's, with the fixtures' small vocabularies, for
        benchmarks such as bench/embed_latency.c (no references).

Needs Debian's python3-numpy, python3-torch, python3-regex and
python3-sentencepiece (apt, not pip).  The GGUF writer and reader come from
tests/gen_fixtures.py (imported, not changed); the tokenizers and forward
passes here are written from the models' published descriptions, in
float64, and each is checked against a float32 run of the same code.

Files written (each model's .json holds its inputs, token ids and references):

  modernbert.gguf    architecture modern-bert: 4 layers (global, local, local,
                     global with sliding_window_pattern 3), sliding_window 8
                     (a local token sees |t - u| <= 4), RoPE bases 160000
                     (global) and 10000 (local), GeGLU with exact GELU,
                     LayerNorms without bias, and a reranker head (cls, cls.norm,
                     cls.output: mean-pooled as llama.cpp reads it).  The
                     tokenizer is byte-level BPE (tokenizer.ggml.pre
                     "modern-bert"): the first 6000 tokens of GPT-2's vocabulary
                     and their merges, then added tokens as ModernBERT has them
                     ([UNK] [CLS] [SEP] [PAD] [MASK] control, whitespace runs and
                     |||IP_ADDRESS|||-style placeholders user-defined), then
                     [PAD0].. unused rows.
  modernbert.json    24 tokenizer golden cases (Hugging Face semantics: every
                     added token matched first, ByteLevel without a prefix
                     space, [CLS] text [SEP]); embedding inputs with unit
                     mean-pooled vectors; rerank pairs ([CLS] q [SEP] d [SEP]) with
                     raw scores.
  modernbert-decide.gguf / .json
                     the same encoder as a kiln decision pack: heads
                     decision.<head>.* and the configuration in the metadata key
                     kiln.decision.config (JSON; docs/decision.md describes the
                     format), with reference probabilities per question.
  bert-rerank.gguf / .json
                     a BERT cross-encoder (WordPiece vocab of
                     tests/data/vocab/ggml-vocab-bert-bge.gguf): cls (tanh) and
                     cls.output, no pooling_type key (as llama.cpp's converter
                     writes rerankers); pairs framed [CLS] q [SEP] d [SEP] with token
                     type 1 for the document (Hugging Face's pair encoding); ids
                     from llama.cpp's tokenization in the vocab's .out file.
  qwen3-rerank.gguf / .json
                     architecture qwen3 with pooling_type 4 (rank), cls.output
                     rows for "yes" and "no", classifier.output_labels and a
                     "rerank" chat template with {query} and {document}, as
                     llama.cpp converts Qwen3-Reranker; score = softmax over
                     (yes, no) at the last token, the "yes" share.
  gemma-embed.gguf / .json
                     architecture gemma-embedding: 6 layers (5 local, 1 global),
                     head size 32 with 3 query heads and 1 KV head (n_embd 64),
                     sliding window 8, mean pooling, dense_2 (64 -> 128) and
                     dense_3 (128 -> 64); a SentencePiece BPE vocabulary trained
                     here (byte fallback, no dummy prefix, ids 0-3 <pad> <eos>
                     <bos> <unk> like Gemma's), add_bos and add_eos.  Queries are
                     "task: search result | query: {text}", documents
                     "title: {title|none} | text: {text}".
"""

import argparse
import json
import math
import os
import sys
import tempfile

import numpy as np
import regex
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import gen_fixtures as gf  # noqa: E402  (GGUF writer/reader and ggml quantizers)

OUT_DIR = os.path.join(HERE, "data", "encoders")
VOCAB = os.path.join(HERE, "data", "vocab")
T_U8, T_I8, T_U16, T_I16, T_U32, T_I32, T_F32, T_BOOL, T_STR, T_ARR = range(10)
TOK_NORMAL, TOK_UNKNOWN, TOK_CONTROL, TOK_USER, TOK_UNUSED, TOK_BYTE = 1, 2, 3, 4, 5, 6
f64 = torch.float64


# ---------------------------------------------------------------------------
# Tokenizers (Hugging Face semantics)

RE_GPT2 = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""


def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


class ByteBPE:
    """GPT-2 byte-level BPE: added tokens are split out first (leftmost,
    longest), each remaining segment is split by the GPT-2 regex, mapped to
    byte characters and merged by rank.  lstrip tokens swallow the
    whitespace before them (ModernBERT's [MASK])."""

    def __init__(self, tokens, merges, added, lstrip=()):
        self.ids = {t: i for i, t in enumerate(tokens)}
        self.ranks = {tuple(m.split(" ", 1)): r for r, m in enumerate(merges)}
        self.added = added            # text -> id
        self.lstrip = set(lstrip)
        self.enc = bytes_to_unicode()
        self.pat = regex.compile(RE_GPT2)

    def bpe(self, word):
        parts = list(word)
        while len(parts) > 1:
            best = None
            for i in range(len(parts) - 1):
                r = self.ranks.get((parts[i], parts[i + 1]))
                if r is not None and (best is None or r < best[0]):
                    best = (r, i)
            if best is None:
                break
            i = best[1]
            parts[i:i + 2] = [parts[i] + parts[i + 1]]
        return [self.ids[p] for p in parts]

    def plain(self, text):
        out = []
        for piece in self.pat.findall(text):
            out += self.bpe("".join(self.enc[b] for b in piece.encode("utf-8")))
        return out

    def encode(self, text):
        out, seg, i = [], "", 0
        keys = sorted(self.added, key=len, reverse=True)
        while i < len(text):
            hit = next((k for k in keys if text.startswith(k, i)), None)
            if hit is None:
                seg += text[i]
                i += 1
                continue
            if hit in self.lstrip:
                seg = seg.rstrip()
            out += self.plain(seg)
            seg = ""
            out.append(self.added[hit])
            i += len(hit)
        return out + self.plain(seg)


def check_bpe_against_llamacpp():
    """The BPE above on the whole GPT-2 vocabulary against llama.cpp's
    tokenization of the conformance texts (tests/data/vocab)."""
    g = gf.GGUFFile(os.path.join(VOCAB, "ggml-vocab-gpt-2.gguf"))
    toks = [t.decode("utf-8") for t in g.get("tokenizer.ggml.tokens")]
    merges = [m.decode("utf-8") for m in g.get("tokenizer.ggml.merges")]
    bpe = ByteBPE(toks, merges, {})
    texts = open(os.path.join(VOCAB, "ggml-vocab-gpt-2.gguf.inp"), encoding="utf-8").read().split(
        "\n__ggml_vocab_test__\n")
    outs = open(os.path.join(VOCAB, "ggml-vocab-gpt-2.gguf.out"), encoding="utf-8").read().split("\n")
    for t, o in zip(texts, outs):
        assert bpe.plain(t) == [int(x) for x in o.split()], t
    return len(texts)


# ---------------------------------------------------------------------------
# Shared model pieces

def rng_lin(rng, n_out, n_in, gain=1.0):
    return (rng.standard_normal((n_out, n_in)) * (gain / math.sqrt(n_in))).astype(np.float32)


def rng_norm(rng, n, sd=0.2):
    return (1.0 + sd * rng.standard_normal(n)).astype(np.float32)


def layer_norm(x, w, b, eps):
    mu = x.mean(dim=-1, keepdim=True)
    var = ((x - mu) ** 2).mean(dim=-1, keepdim=True)
    y = (x - mu) / torch.sqrt(var + eps)
    y = y * w if w is not None else y
    return y + b if b is not None else y


def rms_norm(x, w, eps):
    return x / torch.sqrt((x * x).mean(dim=-1, keepdim=True) + eps) * w


def gelu_erf(x):
    return 0.5 * x * (1.0 + torch.erf(x / math.sqrt(2.0)))


def gelu_tanh(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def rope_neox(x, base, dtype):
    """x [T, H, D]: rotate pairs (i, i + D/2) by pos * base^(-2i/D)."""
    T, _, D = x.shape
    i = torch.arange(D // 2, dtype=f64)
    ang = torch.arange(T, dtype=f64)[:, None] * base ** (-2.0 * i / D)
    c, s = torch.cos(ang).to(dtype)[:, None, :], torch.sin(ang).to(dtype)[:, None, :]
    a, b = x[..., :D // 2], x[..., D // 2:]
    return torch.cat([a * c - b * s, a * s + b * c], dim=-1)


def attention(q, k, v, window=None, causal=False):
    """q [T, H, D], k/v [T, HK, D]; window: |t - u| <= window; scores are
    already scaled."""
    T, H, _ = q.shape
    group = H // k.shape[1]
    idx = torch.arange(T)
    mask = torch.zeros(T, T, dtype=torch.bool)
    if window is not None:
        mask |= (idx[:, None] - idx[None, :]).abs() > window
    if causal:
        mask |= idx[None, :] > idx[:, None]
    outs = []
    for h in range(H):
        sc = q[:, h] @ k[:, h // group].T
        sc = sc.masked_fill(mask, float("-inf"))
        outs.append(torch.softmax(sc, dim=-1) @ v[:, h // group])
    return torch.cat(outs, dim=-1)


def to_torch(W, dtype):
    return {k: torch.from_numpy(np.asarray(v, np.float64 if dtype == f64 else np.float32)) for k, v in W.items()}


def unit(v):
    v = np.asarray(v, np.float64)
    return v / np.linalg.norm(v)


def r9(xs):
    return [float("%.9g" % x) for x in xs]


def packed_f32(W):
    return {n: (gf.GGML_F32, np.ascontiguousarray(a, "<f4").tobytes()) for n, a in W.items()}


def quantize_embd(W, packed, name="token_embd.weight"):
    raw, deq = gf.quantize_q4_0(W[name])
    packed[name] = (gf.GGML_Q4_0, raw)
    W[name] = deq


def write_model(name, kvs, names, W, packed):
    path = os.path.join(OUT_DIR, name + ".gguf")
    tensors = [(n, list(reversed(W[n].shape)), packed[n][0], (lambda b=packed[n][1]: b)) for n in names]
    gf.write_gguf(path, kvs, tensors)
    gf.check_written(path, kvs, names, packed, W)
    return path


def write_json(name, meta):
    with open(os.path.join(OUT_DIR, name + ".json"), "w", encoding="utf-8") as f:
        json.dump(meta, f, ensure_ascii=False, indent=1)
        f.write("\n")


def both(fn, W, *args):
    """fn in float64 and float32; returns the float64 result and the largest
    difference (for the sanity bound)."""
    a = fn(to_torch(W, f64), *args)
    b = fn(to_torch(W, torch.float32), *args)
    return a, float((a - b.double()).abs().max())


# ---------------------------------------------------------------------------
# ModernBERT

MB = dict(E=64, L=4, H=4, F=96, ctx=256, n_swa=8, pattern=3, base=160000.0, base_swa=10000.0, eps=1e-5,
          seed=7100)
MB_KEEP = 6000      # GPT-2 tokens kept (bytes + the first 5744 merges)
MB_ADDED = [("[UNK]", TOK_CONTROL), ("[CLS]", TOK_CONTROL), ("[SEP]", TOK_CONTROL), ("[PAD]", TOK_CONTROL),
            ("[MASK]", TOK_CONTROL), ("|||IP_ADDRESS|||", TOK_USER), ("|||EMAIL_ADDRESS|||", TOK_USER),
            ("|||PHONE_NUMBER|||", TOK_USER), ("<|endoftext|>", TOK_CONTROL), ("   ", TOK_USER),
            ("  ", TOK_USER), ("\t\t", TOK_USER)]
MB_UNUSED = 4


def mb_vocab():
    g = gf.GGUFFile(os.path.join(VOCAB, "ggml-vocab-gpt-2.gguf"))
    toks = [t.decode("utf-8") for t in g.get("tokenizer.ggml.tokens")][:MB_KEEP]
    merges = [m.decode("utf-8") for m in g.get("tokenizer.ggml.merges")][:MB_KEEP - 256]
    types = [TOK_NORMAL] * len(toks)
    added = {}
    for t, ty in MB_ADDED:
        added[t] = len(toks)
        toks.append(t)
        types.append(ty)
    for i in range(MB_UNUSED):
        toks.append("[PAD%d]" % i)
        types.append(TOK_UNUSED)
    ids = {t: added[t] for t in added}
    kvs = [("tokenizer.ggml.model", T_STR, "gpt2"), ("tokenizer.ggml.pre", T_STR, "modern-bert"),
           ("tokenizer.ggml.tokens", T_ARR, toks, T_STR), ("tokenizer.ggml.token_type", T_ARR, types, T_I32),
           ("tokenizer.ggml.merges", T_ARR, merges, T_STR),
           ("tokenizer.ggml.bos_token_id", T_U32, ids["[CLS]"]), ("tokenizer.ggml.eos_token_id", T_U32, ids["[SEP]"]),
           ("tokenizer.ggml.unknown_token_id", T_U32, ids["[UNK]"]),
           ("tokenizer.ggml.seperator_token_id", T_U32, ids["[SEP]"]),
           ("tokenizer.ggml.padding_token_id", T_U32, ids["[PAD]"]),
           ("tokenizer.ggml.cls_token_id", T_U32, ids["[CLS]"]),
           ("tokenizer.ggml.mask_token_id", T_U32, ids["[MASK]"]),
           ("tokenizer.ggml.add_bos_token", T_BOOL, True), ("tokenizer.ggml.add_eos_token", T_BOOL, True),
           ("tokenizer.ggml.add_sep_token", T_BOOL, True)]
    bpe = ByteBPE(toks[:MB_KEEP], merges, added, lstrip=["[MASK]"])
    return kvs, len(toks), bpe, ids


MB_TOKENIZER_CASES = [
    "Hello world", "hello world", " leading space", "trailing space ", "two  spaces", "three   spaces here",
    "four    spaces", "tabs\t\tand\ttabs", "new\nline\n\nparagraph", "It's what they'll do, isn't it?",
    "numbers 12345 and 3.14159", "contact |||EMAIL_ADDRESS||| or |||PHONE_NUMBER|||",
    "server at |||IP_ADDRESS|||:8080", "the [MASK] sat on the mat", "a [MASK]", "[CLS] inside [SEP] text",
    "<|endoftext|>after", "caf\u00e9 na\u00efve r\u00e9sum\u00e9", "\u65e5\u672c\u8a9e\u306e\u6587",
    "emoji \U0001F600 and \u2764\ufe0f", "UPPER lower MiXeD", "punctuation!!! ??? ...", "",
    "a much longer sentence that keeps going so that it uses more than a few of the tokens in the vocabulary",
]
MB_EMBED_TEXTS = ["Hello world", "the quick brown fox jumps over the lazy dog",
                  "ModernBERT alternates global and local attention layers over long inputs",
                  "short", "contact |||EMAIL_ADDRESS||| today",
                  "a much longer sentence that keeps going so that it uses more than a few of the tokens in the "
                  "vocabulary and so crosses several local attention windows of this small model, which only see "
                  "four tokens on either side"]
RERANK_QUERY = "what does a kiln do"
RERANK_DOCS = ["A kiln is an oven that fires clay into pottery.", "The weather is sunny today.",
               "Kilns reach high temperatures to harden ceramics and glass.", "banana",
               "A long document about many things: history, chemistry, clay, furnaces, temperature, wood, gas "
               "and electric designs, glazes, cones and the people who tend them through the night."]


def mb_weights(E, L, H, F, n_vocab, seed, head=True):
    rng = np.random.default_rng(seed)
    W = {"token_embd.weight": rng.standard_normal((n_vocab, E)).astype(np.float32),
         "token_embd_norm.weight": rng_norm(rng, E)}
    for i in range(L):
        p = "blk.%d." % i
        if i:
            W[p + "attn_norm.weight"] = rng_norm(rng, E)
        W[p + "attn_qkv.weight"] = rng_lin(rng, 3 * E, E, 1.5)
        W[p + "attn_output.weight"] = rng_lin(rng, E, E)
        W[p + "ffn_norm.weight"] = rng_norm(rng, E)
        W[p + "ffn_up.weight"] = rng_lin(rng, 2 * F, E)
        W[p + "ffn_down.weight"] = rng_lin(rng, E, F)
    W["output_norm.weight"] = rng_norm(rng, E)
    if head:
        W["cls.weight"] = rng_lin(rng, E, E)
        W["cls.norm.weight"] = rng_norm(rng, E)
        W["cls.output.weight"] = rng_lin(rng, 1, E, 2.0)
        W["cls.output.bias"] = (0.1 * rng.standard_normal(1)).astype(np.float32)
    return W


def mb_names(L, head=True):
    names = ["token_embd.weight", "token_embd_norm.weight"]
    for i in range(L):
        p = "blk.%d." % i
        names += ([p + "attn_norm.weight"] if i else []) + [p + "attn_qkv.weight", p + "attn_output.weight",
                                                            p + "ffn_norm.weight", p + "ffn_up.weight",
                                                            p + "ffn_down.weight"]
    names.append("output_norm.weight")
    if head:
        names += ["cls.weight", "cls.norm.weight", "cls.output.weight", "cls.output.bias"]
    return names


def mb_forward(Wt, ids, c=MB):
    """Final hidden states [T, E] of one sequence."""
    E, H = c["E"], c["H"]
    D, T, eps = E // H, len(ids), float(np.float32(c["eps"]))
    dt = Wt["token_embd.weight"].dtype
    x = layer_norm(Wt["token_embd.weight"][torch.tensor(ids)], Wt["token_embd_norm.weight"], None, eps)
    for l in range(c["L"]):
        p = "blk.%d." % l
        local = l % c["pattern"] != 0
        h = layer_norm(x, Wt[p + "attn_norm.weight"], None, eps) if l else x
        qkv = h @ Wt[p + "attn_qkv.weight"].T
        q, k, v = (qkv[:, i * E:(i + 1) * E].reshape(T, H, D) for i in range(3))
        base = c["base_swa"] if local else c["base"]
        q, k = rope_neox(q, base, dt), rope_neox(k, base, dt)
        att = attention(q / math.sqrt(D), k, v, window=c["n_swa"] // 2 if local else None)
        x = x + att @ Wt[p + "attn_output.weight"].T
        u = layer_norm(x, Wt[p + "ffn_norm.weight"], None, eps) @ Wt[p + "ffn_up.weight"].T
        F = u.shape[1] // 2
        x = x + (gelu_erf(u[:, :F]) * u[:, F:]) @ Wt[p + "ffn_down.weight"].T
    return layer_norm(x, Wt["output_norm.weight"], None, eps)


def mb_rank(Wt, ids, c=MB):
    pooled = mb_forward(Wt, ids, c).mean(dim=0)
    h = gelu_erf(pooled @ Wt["cls.weight"].T)
    h = layer_norm(h, Wt["cls.norm.weight"], None, float(np.float32(c["eps"])))
    return h @ Wt["cls.output.weight"].T + Wt["cls.output.bias"]


def mb_kvs(c, name, tok_kvs, extra=()):
    a = "modern-bert"
    return [("general.architecture", T_STR, a), ("general.name", T_STR, name),
            ("general.file_type", T_U32, 2),
            (a + ".context_length", T_U32, c["ctx"]), (a + ".embedding_length", T_U32, c["E"]),
            (a + ".block_count", T_U32, c["L"]), (a + ".feed_forward_length", T_U32, c["F"]),
            (a + ".attention.head_count", T_U32, c["H"]),
            (a + ".attention.layer_norm_epsilon", T_F32, c["eps"]),
            (a + ".attention.causal", T_BOOL, False),
            (a + ".attention.sliding_window", T_U32, c["n_swa"]),
            (a + ".attention.sliding_window_pattern", T_U32, c["pattern"]),
            (a + ".rope.freq_base", T_F32, c["base"]), (a + ".rope.freq_base_swa", T_F32, c["base_swa"]),
            (a + ".pooling_type", T_U32, 1), (a + ".hidden_activation", T_STR, "gelu")] + list(extra) + tok_kvs


def gen_modernbert():
    c = MB
    tok_kvs, n_vocab, bpe, ids = mb_vocab()
    cls_id, sep_id = ids["[CLS]"], ids["[SEP]"]
    cases = [{"text": t, "ids": [cls_id] + bpe.encode(t) + [sep_id]} for t in MB_TOKENIZER_CASES]
    W = mb_weights(c["E"], c["L"], c["H"], c["F"], n_vocab, c["seed"])
    packed = packed_f32(W)
    quantize_embd(W, packed)
    inputs, worst = [], 0.0
    for t in MB_EMBED_TEXTS:
        seq = [cls_id] + bpe.encode(t) + [sep_id]
        v, d = both(lambda Wt, s: mb_forward(Wt, s).mean(dim=0), W, seq)
        worst = max(worst, d)
        inputs.append({"text": t, "ids": seq, "vector": r9(unit(v.numpy()))})
    q = bpe.encode(RERANK_QUERY)
    pairs = []
    for dtext in RERANK_DOCS:
        seq = [cls_id] + q + [sep_id] + bpe.encode(dtext) + [sep_id]
        s, d = both(mb_rank, W, seq)
        worst = max(worst, d)
        pairs.append({"document": dtext, "ids": seq, "score": float("%.9g" % float(s[0]))})
    assert worst < 1e-3, worst
    write_model("modernbert", mb_kvs(c, "kiln-fixture-modernbert", tok_kvs), mb_names(c["L"]), W, packed)
    write_json("modernbert", {
        "model": "modernbert.gguf", "n_embd": c["E"], "n_ctx": c["ctx"], "f32_max_diff": worst,
        "notes": "ModernBERT (see tests/gen_encoders.py): vectors = unit(mean over all tokens of the final "
                 "LayerNorm rows); rerank score = cls.output(LN(gelu(cls mean)) * cls.norm) + b, raw. "
                 "float64 PyTorch references.",
        "tokenizer_cases": cases, "inputs": inputs, "query": RERANK_QUERY, "pairs": pairs})
    print("modernbert        %d tokenizer cases, %d vectors, %d rerank pairs (f32 diff %.2g)"
          % (len(cases), len(inputs), len(pairs), worst))
    return W, packed, tok_kvs, bpe, ids


# ---------------------------------------------------------------------------
# The decision pack (kiln's format, docs/decision.md)

DECIDE_CONFIG = {
    "format": "kiln.decision/1",
    "max_len": 48,
    "head_max_len": 16,
    "pooling": "cls",
    "question_types": {
        "route": {"head": "route", "labels": ["search", "answer", "clarify"]},
        "pick": {"head": "pick", "option_slots": 4},
        "yesno": {"head": "yesno", "labels": ["no", "yes"]},
    },
    "temperature": {"route": 1.25, "pick": 0.8, "yesno": 2.0},
    "temperature_by_options": {"pick": {"2": 0.5, "3-4": 0.65}},
}
DECIDE_STATES = [
    "user asked about the weather in Paris tomorrow",
    "short",
    "the user has been talking for a while about pottery, kilns, glazes and cones, and now wants to know "
    "which firing schedule to pick for a stoneware piece with a thick base and a thin rim",
]
DECIDE_QUESTIONS = [
    {"id": "q-route", "type": "route", "text": "what should happen next"},
    {"id": "q-pick", "type": "pick", "text": "which tool", "options": ["weather", "search", "calculator"]},
    {"id": "q-pick2", "type": "pick", "text": "", "options": ["first option", "second"]},
    {"id": "q-yes", "type": "yesno", "text": "is the user done"},
]


def decide_heads(rng, E):
    W = {}
    W["decision.route.dense.weight"] = rng_lin(rng, E, E)
    W["decision.route.dense.bias"] = (0.1 * rng.standard_normal(E)).astype(np.float32)
    W["decision.route.norm.weight"] = rng_norm(rng, E)
    W["decision.route.norm.bias"] = (0.1 * rng.standard_normal(E)).astype(np.float32)
    W["decision.route.out.weight"] = rng_lin(rng, 3, E, 2.0)
    W["decision.route.out.bias"] = (0.1 * rng.standard_normal(3)).astype(np.float32)
    W["decision.pick.out.weight"] = rng_lin(rng, 1, E, 2.0)
    W["decision.pick.out.bias"] = (0.1 * rng.standard_normal(1)).astype(np.float32)
    W["decision.yesno.dense.weight"] = rng_lin(rng, E, E)
    W["decision.yesno.out.weight"] = rng_lin(rng, 2, E, 2.0)
    return W


def head_logits(Wt, head, pooled, eps):
    p = "decision.%s." % head
    h = pooled
    if p + "dense.weight" in Wt:
        h = h @ Wt[p + "dense.weight"].T
        if p + "dense.bias" in Wt:
            h = h + Wt[p + "dense.bias"]
        h = gelu_erf(h)
        if p + "norm.weight" in Wt:
            h = layer_norm(h, Wt[p + "norm.weight"], Wt.get(p + "norm.bias"), eps)
    out = h @ Wt[p + "out.weight"].T
    return out + Wt[p + "out.bias"] if p + "out.bias" in Wt else out


def bucket_temperature(cfg, qtype, n):
    for key, t in cfg.get("temperature_by_options", {}).get(qtype, {}).items():
        lo, _, hi = key.partition("-")
        if int(lo) <= n <= int(hi or lo):
            return t
    return cfg["temperature"][qtype]


def decide_reference(Wt, cfg, bpe, ids, state, q):
    """Probabilities for one question: [CLS] H [SEP] S [SEP], H the question
    (and, for options, [SEP] and the option), S the state's first budget
    tokens."""
    cls_id, sep_id = ids["[CLS]"], ids["[SEP]"]
    eps = float(np.float32(MB["eps"]))
    S = bpe.encode(state)
    qt = cfg["question_types"][q["type"]]
    Q = bpe.encode(q["text"]) if q["text"] else []
    heads = [Q + [sep_id] + bpe.encode(o) if Q else bpe.encode(o) for o in q["options"]] if "options" in q else [Q]
    longest = max(len(h) for h in heads)
    assert longest <= cfg["head_max_len"]
    budget = cfg["max_len"] - 2 - (longest + 1 if longest else 0)
    kept = S[:budget]
    logits = []
    for h in heads:
        seq = [cls_id] + (h + [sep_id] if h else []) + kept + [sep_id]
        assert len(seq) <= cfg["max_len"]
        x = mb_forward(Wt, seq)
        pooled = x[0] if cfg["pooling"] == "cls" else x.mean(dim=0)
        logits.append(head_logits(Wt, qt["head"], pooled, eps))
    logits = torch.cat(logits) if "options" in q else logits[0]
    n = len(q["options"]) if "options" in q else len(qt["labels"])
    temp = bucket_temperature(cfg, q["type"], n) if "options" in q else cfg["temperature"][q["type"]]
    return torch.softmax(logits / temp, dim=-1), temp, len(S), budget


def gen_decide(W_enc, packed_enc, tok_kvs, bpe, ids):
    c, cfg = MB, DECIDE_CONFIG
    rng = np.random.default_rng(c["seed"] + 50)
    W = {k: v for k, v in W_enc.items() if not k.startswith("cls.")}
    heads = decide_heads(rng, c["E"])
    W.update(heads)
    packed = {k: packed_enc[k] for k in W_enc if not k.startswith("cls.")}
    packed.update(packed_f32(heads))
    names = mb_names(c["L"], head=False) + list(heads)
    cfg_json = json.dumps(cfg, separators=(",", ":"))
    write_model("modernbert-decide", mb_kvs(c, "kiln-fixture-modernbert-decide", tok_kvs,
                                            [("kiln.decision.config", T_STR, cfg_json)]), names, W, packed)
    cases, worst = [], 0.0
    for state in DECIDE_STATES:
        results = []
        for q in DECIDE_QUESTIONS:
            p64, temp, n_state, budget = decide_reference(to_torch(W, f64), cfg, bpe, ids, state, q)
            p32, _, _, _ = decide_reference(to_torch(W, torch.float32), cfg, bpe, ids, state, q)
            worst = max(worst, float((p64 - p32.double()).abs().max()))
            results.append({"id": q["id"], "probabilities": r9(p64.numpy()), "temperature": temp,
                            "budget": budget, "truncated": n_state > budget})
        cases.append({"state": state, "state_tokens": len(bpe.encode(state)), "results": results})
    assert worst < 1e-4, worst
    write_json("modernbert-decide", {
        "model": "modernbert-decide.gguf", "config": cfg, "questions": DECIDE_QUESTIONS, "cases": cases,
        "f32_max_diff": worst,
        "notes": "Decision pack over the modernbert.gguf encoder (no cls head). Head: optional dense (+bias), "
                 "exact GELU, optional LayerNorm (weight, bias), then out (+bias); pooled [CLS] row. "
                 "probabilities = softmax(logits / temperature). float64 PyTorch references."})
    n_trunc = sum(r["truncated"] for cse in cases for r in cse["results"])
    print("modernbert-decide %d states x %d questions (%d truncated; f32 diff %.2g)"
          % (len(cases), len(DECIDE_QUESTIONS), n_trunc, worst))


# ---------------------------------------------------------------------------
# BERT cross-encoder

BR = dict(E=32, L=2, H=4, F=64, ctx=128, eps=1e-12, n_types=2, seed=7300)
BR_QUERY_ENTRY = 11          # entries of ggml-vocab-bert-bge.gguf.inp
BR_DOC_ENTRIES = [0, 19, 20, 32, 22, 45, 30]


def bert_forward(Wt, ids, types, c=BR):
    E, H = c["E"], c["H"]
    D, T, eps = E // H, len(ids), float(np.float32(c["eps"]))
    x = (Wt["token_embd.weight"][torch.tensor(ids)] + Wt["token_types.weight"][torch.tensor(types)] +
         Wt["position_embd.weight"][:T])
    x = layer_norm(x, Wt["token_embd_norm.weight"], Wt["token_embd_norm.bias"], eps)
    for l in range(c["L"]):
        p = "blk.%d." % l
        q, k, v = ((x @ Wt[p + t + ".weight"].T + Wt[p + t + ".bias"]).reshape(T, H, D)
                   for t in ("attn_q", "attn_k", "attn_v"))
        o = attention(q / math.sqrt(D), k, v)
        x = layer_norm(x + o @ Wt[p + "attn_output.weight"].T + Wt[p + "attn_output.bias"],
                       Wt[p + "attn_output_norm.weight"], Wt[p + "attn_output_norm.bias"], eps)
        h = gelu_tanh(x @ Wt[p + "ffn_up.weight"].T + Wt[p + "ffn_up.bias"])
        x = layer_norm(x + h @ Wt[p + "ffn_down.weight"].T + Wt[p + "ffn_down.bias"],
                       Wt[p + "layer_output_norm.weight"], Wt[p + "layer_output_norm.bias"], eps)
    return x


def bert_rank(Wt, ids, types):
    h = torch.tanh(bert_forward(Wt, ids, types)[0] @ Wt["cls.weight"].T + Wt["cls.bias"])
    return h @ Wt["cls.output.weight"].T + Wt["cls.output.bias"]


def gen_bert_rerank():
    c = BR
    g = gf.GGUFFile(os.path.join(VOCAB, "ggml-vocab-bert-bge.gguf"))
    tok_kvs = [(k,) + (g.kv[k][0], g.kv[k][1]) + ((g.kv[k][2],) if g.kv[k][0] == T_ARR else ())
               for k in g.kv_order if k.startswith("tokenizer.")]
    n_vocab = len(g.get("tokenizer.ggml.tokens"))
    cls_id, sep_id = int(g.get("tokenizer.ggml.cls_token_id")), int(g.get("tokenizer.ggml.seperator_token_id"))
    texts = open(os.path.join(VOCAB, "ggml-vocab-bert-bge.gguf.inp"), encoding="utf-8").read().split(
        "\n__ggml_vocab_test__\n")
    outs = open(os.path.join(VOCAB, "ggml-vocab-bert-bge.gguf.out"), encoding="utf-8").read().split("\n")
    rng = np.random.default_rng(c["seed"])
    E, F = c["E"], c["F"]
    W = {"token_embd.weight": rng.standard_normal((n_vocab, E)).astype(np.float32),
         "token_types.weight": rng.standard_normal((c["n_types"], E)).astype(np.float32),
         "position_embd.weight": rng.standard_normal((c["ctx"], E)).astype(np.float32),
         "token_embd_norm.weight": rng_norm(rng, E), "token_embd_norm.bias": (0.1 * rng.standard_normal(E)).astype(np.float32)}
    names = list(W)
    for i in range(c["L"]):
        p = "blk.%d." % i
        for t in ("attn_q", "attn_k", "attn_v", "attn_output"):
            W[p + t + ".weight"] = rng_lin(rng, E, E)
            W[p + t + ".bias"] = (0.1 * rng.standard_normal(E)).astype(np.float32)
            names += [p + t + ".weight", p + t + ".bias"]
        for n, a in (("attn_output_norm.weight", rng_norm(rng, E)),
                     ("attn_output_norm.bias", (0.1 * rng.standard_normal(E)).astype(np.float32)),
                     ("ffn_up.weight", rng_lin(rng, F, E)), ("ffn_up.bias", (0.1 * rng.standard_normal(F)).astype(np.float32)),
                     ("ffn_down.weight", rng_lin(rng, E, F)), ("ffn_down.bias", (0.1 * rng.standard_normal(E)).astype(np.float32)),
                     ("layer_output_norm.weight", rng_norm(rng, E)),
                     ("layer_output_norm.bias", (0.1 * rng.standard_normal(E)).astype(np.float32))):
            W[p + n] = a
            names.append(p + n)
    W["cls.weight"] = rng_lin(rng, E, E, 2.0)
    W["cls.bias"] = (0.1 * rng.standard_normal(E)).astype(np.float32)
    W["cls.output.weight"] = rng_lin(rng, 1, E, 2.0)
    W["cls.output.bias"] = (0.1 * rng.standard_normal(1)).astype(np.float32)
    names += ["cls.weight", "cls.bias", "cls.output.weight", "cls.output.bias"]
    packed = packed_f32(W)
    quantize_embd(W, packed)
    q = [int(t) for t in outs[BR_QUERY_ENTRY].split()]
    pairs, worst = [], 0.0
    for e in BR_DOC_ENTRIES:
        d = [int(t) for t in outs[e].split()]
        seq = [cls_id] + q + [sep_id] + d + [sep_id]
        types = [0] * (len(q) + 2) + [1] * (len(d) + 1)
        full = len(seq)
        if full > c["ctx"]:     # truncated: the document's first tokens, the closing [SEP] kept
            seq = seq[:c["ctx"] - 1] + [sep_id]
            types = types[:c["ctx"]]
        s, diff = both(bert_rank, W, seq, types)
        worst = max(worst, diff)
        pairs.append({"entry": e, "document": texts[e], "ids": seq, "types": types, "n_tokens_full": full,
                      "truncated": full > c["ctx"], "score": float("%.9g" % float(s[0]))})
    assert worst < 1e-3, worst
    a = "bert"
    kvs = [("general.architecture", T_STR, a), ("general.name", T_STR, "kiln-fixture-bert-rerank"),
           ("general.file_type", T_U32, 2), (a + ".context_length", T_U32, c["ctx"]),
           (a + ".embedding_length", T_U32, E), (a + ".block_count", T_U32, c["L"]),
           (a + ".feed_forward_length", T_U32, F), (a + ".attention.head_count", T_U32, c["H"]),
           (a + ".attention.layer_norm_epsilon", T_F32, c["eps"]), (a + ".attention.causal", T_BOOL, False)] + tok_kvs
    write_model("bert-rerank", kvs, names, W, packed)
    write_json("bert-rerank", {
        "model": "bert-rerank.gguf", "n_ctx": c["ctx"], "query_entry": BR_QUERY_ENTRY, "query": texts[BR_QUERY_ENTRY],
        "f32_max_diff": worst, "pairs": pairs,
        "notes": "BERT cross-encoder: pairs [CLS] q [SEP] d [SEP], token type 0 through the first [SEP] and 1 "
                 "after; score = cls.output(tanh(cls x_CLS + b)) + b, raw. Ids from llama.cpp's WordPiece "
                 "tokenization (the vocab's .out file). float64 PyTorch references."})
    print("bert-rerank       %d pairs (%d truncated; f32 diff %.2g)"
          % (len(pairs), sum(p["truncated"] for p in pairs), worst))


# ---------------------------------------------------------------------------
# Qwen3 reranker (a causal LM scoring "yes" / "no")

QR = dict(E=32, L=2, H=4, HK=2, D=8, F=64, ctx=512, eps=1e-6, base=1000000.0, seed=7400)
QR_KEEP = 9000      # GPT-2 tokens kept: "yes" is 8505
QR_ADDED = [("<|endoftext|>", TOK_CONTROL), ("<|im_start|>", TOK_CONTROL), ("<|im_end|>", TOK_CONTROL),
            ("<think>", TOK_USER), ("</think>", TOK_USER)]
QR_TEMPLATE = ("<|im_start|>system\nJudge whether the Document meets the requirements based on the Query and the "
               "Instruct provided. Note that the answer can only be \"yes\" or \"no\".<|im_end|>\n"
               "<|im_start|>user\n<Instruct>: Given a web search query, retrieve relevant passages that answer "
               "the query\n<Query>: {query}\n<Document>: {document}<|im_end|>\n"
               "<|im_start|>assistant\n<think>\n\n</think>\n\n")


def qwen3_hidden(Wt, ids, c=QR):
    H, HK, D, T = c["H"], c["HK"], c["D"], len(ids)
    eps = float(np.float32(c["eps"]))
    dt = Wt["token_embd.weight"].dtype
    x = Wt["token_embd.weight"][torch.tensor(ids)]
    for l in range(c["L"]):
        p = "blk.%d." % l
        h = rms_norm(x, Wt[p + "attn_norm.weight"], eps)
        q = rms_norm((h @ Wt[p + "attn_q.weight"].T).reshape(T, H, D), Wt[p + "attn_q_norm.weight"], eps)
        k = rms_norm((h @ Wt[p + "attn_k.weight"].T).reshape(T, HK, D), Wt[p + "attn_k_norm.weight"], eps)
        v = (h @ Wt[p + "attn_v.weight"].T).reshape(T, HK, D)
        q, k = rope_neox(q, c["base"], dt), rope_neox(k, c["base"], dt)
        x = x + attention(q / math.sqrt(D), k, v, causal=True) @ Wt[p + "attn_output.weight"].T
        h = rms_norm(x, Wt[p + "ffn_norm.weight"], eps)
        x = x + (torch.nn.functional.silu(h @ Wt[p + "ffn_gate.weight"].T) * (h @ Wt[p + "ffn_up.weight"].T)) @ \
            Wt[p + "ffn_down.weight"].T
    return rms_norm(x, Wt["output_norm.weight"], eps)


def qwen3_score(Wt, ids):
    logits = qwen3_hidden(Wt, ids)[-1] @ Wt["cls.output.weight"].T
    return torch.softmax(logits, dim=-1)


def gen_qwen3_rerank():
    c = QR
    g = gf.GGUFFile(os.path.join(VOCAB, "ggml-vocab-gpt-2.gguf"))
    toks = [t.decode("utf-8") for t in g.get("tokenizer.ggml.tokens")][:QR_KEEP]
    merges = [m.decode("utf-8") for m in g.get("tokenizer.ggml.merges")][:QR_KEEP - 256]
    types = [TOK_NORMAL] * len(toks)
    added = {}
    for t, ty in QR_ADDED:
        added[t] = len(toks)
        toks.append(t)
        types.append(ty)
    bpe = ByteBPE(toks[:QR_KEEP], merges, added)
    n_vocab = len(toks)
    assert bpe.ids["yes"] and bpe.ids["no"]
    rng = np.random.default_rng(c["seed"])
    E, F, H, HK, D = c["E"], c["F"], c["H"], c["HK"], c["D"]
    W = {"token_embd.weight": rng.standard_normal((n_vocab, E)).astype(np.float32),
         "output_norm.weight": rng_norm(rng, E)}
    names = ["token_embd.weight", "output_norm.weight"]
    for i in range(c["L"]):
        p = "blk.%d." % i
        for n, a in (("attn_norm.weight", rng_norm(rng, E)), ("attn_q.weight", rng_lin(rng, H * D, E)),
                     ("attn_k.weight", rng_lin(rng, HK * D, E)), ("attn_v.weight", rng_lin(rng, HK * D, E)),
                     ("attn_q_norm.weight", rng_norm(rng, D)), ("attn_k_norm.weight", rng_norm(rng, D)),
                     ("attn_output.weight", rng_lin(rng, E, H * D)), ("ffn_norm.weight", rng_norm(rng, E)),
                     ("ffn_gate.weight", rng_lin(rng, F, E)), ("ffn_up.weight", rng_lin(rng, F, E)),
                     ("ffn_down.weight", rng_lin(rng, E, F))):
            W[p + n] = a
            names.append(p + n)
    # what the converter keeps of the LM head: the rows of "yes" and "no"
    head = rng_lin(rng, n_vocab, E, 3.0)
    W["cls.output.weight"] = np.stack([head[bpe.ids["yes"]], head[bpe.ids["no"]]])
    names.append("cls.output.weight")
    packed = packed_f32(W)
    quantize_embd(W, packed)
    pairs, worst = [], 0.0
    for dtext in RERANK_DOCS:
        prompt = QR_TEMPLATE.replace("{query}", RERANK_QUERY).replace("{document}", dtext)
        seq = bpe.encode(prompt)
        p, diff = both(qwen3_score, W, seq)
        worst = max(worst, diff)
        pairs.append({"document": dtext, "ids": seq, "score": float("%.9g" % float(p[0]))})
    assert worst < 1e-4, worst
    a = "qwen3"
    kvs = [("general.architecture", T_STR, a), ("general.name", T_STR, "kiln-fixture-qwen3-reranker"),
           ("general.file_type", T_U32, 2), (a + ".context_length", T_U32, c["ctx"]),
           (a + ".embedding_length", T_U32, E), (a + ".block_count", T_U32, c["L"]),
           (a + ".feed_forward_length", T_U32, F), (a + ".attention.head_count", T_U32, H),
           (a + ".attention.head_count_kv", T_U32, HK), (a + ".attention.key_length", T_U32, D),
           (a + ".attention.value_length", T_U32, D), (a + ".rope.freq_base", T_F32, c["base"]),
           (a + ".attention.layer_norm_rms_epsilon", T_F32, c["eps"]), (a + ".pooling_type", T_U32, 4),
           (a + ".classifier.output_labels", T_ARR, ["yes", "no"], T_STR),
           ("tokenizer.ggml.model", T_STR, "gpt2"), ("tokenizer.ggml.pre", T_STR, "gpt-2"),
           ("tokenizer.ggml.tokens", T_ARR, toks, T_STR), ("tokenizer.ggml.token_type", T_ARR, types, T_I32),
           ("tokenizer.ggml.merges", T_ARR, merges, T_STR),
           ("tokenizer.ggml.eos_token_id", T_U32, added["<|im_end|>"]),
           ("tokenizer.ggml.padding_token_id", T_U32, added["<|endoftext|>"]),
           ("tokenizer.ggml.add_bos_token", T_BOOL, False),
           ("tokenizer.chat_template.rerank", T_STR, QR_TEMPLATE)]
    write_model("qwen3-rerank", kvs, names, W, packed)
    write_json("qwen3-rerank", {
        "model": "qwen3-rerank.gguf", "query": RERANK_QUERY, "pairs": pairs, "f32_max_diff": worst,
        "notes": "Qwen3-Reranker layout: the rerank template with {query}/{document} replaced, tokenized with "
                 "special tokens parsed and none added; score = softmax(cls.output h_last)[0], the 'yes' share. "
                 "No output.weight (the converter keeps only the yes/no rows). float64 PyTorch references."})
    print("qwen3-rerank      %d pairs (f32 diff %.2g)" % (len(pairs), worst))


# ---------------------------------------------------------------------------
# EmbeddingGemma

GE = dict(E=64, L=6, H=3, HK=1, D=32, F=128, D2=128, ctx=128, n_swa=8, pattern=6, base=1000000.0,
          base_swa=10000.0, eps=1e-6, seed=7500, vocab=700)
GE_QUERIES = ["what does a kiln do", "gemma"]
GE_DOCS = [("A kiln is an oven that fires clay into pottery.", "Kilns"), ("The weather is sunny today.", None),
           ("Kilns reach high temperatures to harden ceramics and glass, and a long firing can take a whole day "
            "and night before the pieces cool enough to touch.", ""), ("x", "single"),
           ("Numbers 1234 and symbols #@! mixed in.", None)]
GE_TOKENIZER_CASES = ["Hello world", " leading", "two  spaces", "tab\tand\nnewline", "caf\u00e9 \u65e5\u672c",
                      "emoji \U0001F600", "1234567890", "<start_of_turn>user", ""]


def train_spm(tmp):
    import sentencepiece as spm
    corpus = []
    for name in ("ggml-vocab-gpt-2.gguf.inp", "ggml-vocab-llama-spm.gguf.inp", "ggml-vocab-bert-bge.gguf.inp"):
        corpus += open(os.path.join(VOCAB, name), encoding="utf-8").read().split("\n__ggml_vocab_test__\n")
    corpus += [d for d, _ in GE_DOCS] + GE_QUERIES + RERANK_DOCS + MB_EMBED_TEXTS
    corpus += ["task: search result | query: %s" % q for q in GE_QUERIES]
    corpus += ["title: none | text: %s" % d for d, _ in GE_DOCS]
    path = os.path.join(tmp, "corpus.txt")
    with open(path, "w", encoding="utf-8") as f:
        for line in corpus:
            line = line.replace("\n", " ").strip()
            if line:
                f.write(line + "\n")
    prefix = os.path.join(tmp, "gemma-tiny")
    spm.SentencePieceTrainer.train(
        input=path, model_prefix=prefix, model_type="bpe", vocab_size=GE["vocab"], character_coverage=1.0,
        byte_fallback=True, add_dummy_prefix=False, remove_extra_whitespaces=False, split_digits=True,
        normalization_rule_name="identity", allow_whitespace_only_pieces=True, pad_id=0, eos_id=1, bos_id=2,
        unk_id=3, user_defined_symbols=["<start_of_turn>", "<end_of_turn>"], num_threads=1,
        minloglevel=2, max_sentencepiece_length=16)
    return spm.SentencePieceProcessor(model_file=prefix + ".model")


def ge_forward(Wt, ids, c=GE):
    E, H, HK, D, T = c["E"], c["H"], c["HK"], c["D"], len(ids)
    eps = float(np.float32(c["eps"]))
    dt = Wt["token_embd.weight"].dtype
    x = Wt["token_embd.weight"][torch.tensor(ids)] * math.sqrt(E)
    for l in range(c["L"]):
        p = "blk.%d." % l
        local = l % c["pattern"] < c["pattern"] - 1
        h = rms_norm(x, Wt[p + "attn_norm.weight"], eps)
        q = rms_norm((h @ Wt[p + "attn_q.weight"].T).reshape(T, H, D), Wt[p + "attn_q_norm.weight"], eps)
        k = rms_norm((h @ Wt[p + "attn_k.weight"].T).reshape(T, HK, D), Wt[p + "attn_k_norm.weight"], eps)
        v = (h @ Wt[p + "attn_v.weight"].T).reshape(T, HK, D)
        base = c["base_swa"] if local else c["base"]
        q, k = rope_neox(q, base, dt), rope_neox(k, base, dt)
        a = attention(q / math.sqrt(D), k, v, window=c["n_swa"] // 2 if local else None)
        x = x + rms_norm(a @ Wt[p + "attn_output.weight"].T, Wt[p + "post_attention_norm.weight"], eps)
        h = rms_norm(x, Wt[p + "ffn_norm.weight"], eps)
        f = (gelu_tanh(h @ Wt[p + "ffn_gate.weight"].T) * (h @ Wt[p + "ffn_up.weight"].T)) @ Wt[p + "ffn_down.weight"].T
        x = x + rms_norm(f, Wt[p + "post_ffw_norm.weight"], eps)
    x = rms_norm(x, Wt["output_norm.weight"], eps)
    return (x.mean(dim=0) @ Wt["dense_2.weight"].T) @ Wt["dense_3.weight"].T


def gen_gemma():
    c = GE
    with tempfile.TemporaryDirectory() as tmp:
        sp = train_spm(tmp)
    n_vocab = sp.get_piece_size()
    toks, scores, types = [], [], []
    for i in range(n_vocab):
        toks.append(sp.id_to_piece(i))
        scores.append(sp.get_score(i))
        types.append(TOK_UNKNOWN if sp.is_unknown(i) else TOK_CONTROL if sp.is_control(i) else
                     TOK_BYTE if sp.is_byte(i) else TOK_UNUSED if sp.is_unused(i) else
                     TOK_USER if toks[-1] in ("<start_of_turn>", "<end_of_turn>") else TOK_NORMAL)
    bos, eos = sp.bos_id(), sp.eos_id()

    def enc(text):
        return [bos] + sp.encode(text) + [eos]

    cases = [{"text": t, "ids": enc(t)} for t in GE_TOKENIZER_CASES]
    rng = np.random.default_rng(c["seed"])
    E, F, H, HK, D = c["E"], c["F"], c["H"], c["HK"], c["D"]
    W = {"token_embd.weight": (rng.standard_normal((n_vocab, E)) * 0.3).astype(np.float32)}
    names = ["token_embd.weight"]
    for i in range(c["L"]):
        p = "blk.%d." % i
        for n, a in (("attn_norm.weight", rng_norm(rng, E)), ("attn_q.weight", rng_lin(rng, H * D, E)),
                     ("attn_k.weight", rng_lin(rng, HK * D, E)), ("attn_v.weight", rng_lin(rng, HK * D, E)),
                     ("attn_q_norm.weight", rng_norm(rng, D)), ("attn_k_norm.weight", rng_norm(rng, D)),
                     ("attn_output.weight", rng_lin(rng, E, H * D)),
                     ("post_attention_norm.weight", rng_norm(rng, E)), ("ffn_norm.weight", rng_norm(rng, E)),
                     ("ffn_gate.weight", rng_lin(rng, F, E)), ("ffn_up.weight", rng_lin(rng, F, E)),
                     ("ffn_down.weight", rng_lin(rng, E, F)), ("post_ffw_norm.weight", rng_norm(rng, E))):
            W[p + n] = a
            names.append(p + n)
    W["output_norm.weight"] = rng_norm(rng, E)
    W["dense_2.weight"] = rng_lin(rng, c["D2"], E)
    W["dense_3.weight"] = rng_lin(rng, E, c["D2"])
    names += ["output_norm.weight", "dense_2.weight", "dense_3.weight"]
    packed = packed_f32(W)
    inputs, worst = [], 0.0
    for q in GE_QUERIES:
        seq = enc("task: search result | query: %s" % q)
        v, d = both(ge_forward, W, seq)
        worst = max(worst, d)
        inputs.append({"kind": "query", "text": q, "ids": seq, "vector": r9(unit(v.numpy()))})
    for doc, title in GE_DOCS:
        seq = enc("title: %s | text: %s" % (title if title else "none", doc))
        v, d = both(ge_forward, W, seq)
        worst = max(worst, d)
        inputs.append({"kind": "document", "text": doc, "title": title, "ids": seq, "vector": r9(unit(v.numpy()))})
    assert worst < 1e-3, worst
    a = "gemma-embedding"
    kvs = [("general.architecture", T_STR, a), ("general.name", T_STR, "kiln-fixture-embeddinggemma"),
           ("general.file_type", T_U32, 0), (a + ".context_length", T_U32, c["ctx"]),
           (a + ".embedding_length", T_U32, E), (a + ".block_count", T_U32, c["L"]),
           (a + ".feed_forward_length", T_U32, F), (a + ".attention.head_count", T_U32, H),
           (a + ".attention.head_count_kv", T_U32, HK), (a + ".attention.key_length", T_U32, D),
           (a + ".attention.value_length", T_U32, D),
           (a + ".attention.layer_norm_rms_epsilon", T_F32, c["eps"]),
           (a + ".attention.sliding_window", T_U32, c["n_swa"]),
           (a + ".attention.sliding_window_pattern", T_U32, c["pattern"]),
           (a + ".rope.freq_base", T_F32, c["base"]), (a + ".rope.freq_base_swa", T_F32, c["base_swa"]),
           (a + ".attention.causal", T_BOOL, False), (a + ".pooling_type", T_U32, 1),
           (a + ".dense_2_feat_in", T_U32, E), (a + ".dense_2_feat_out", T_U32, c["D2"]),
           (a + ".dense_3_feat_in", T_U32, c["D2"]), (a + ".dense_3_feat_out", T_U32, E),
           ("tokenizer.ggml.model", T_STR, "llama"), ("tokenizer.ggml.pre", T_STR, "default"),
           ("tokenizer.ggml.tokens", T_ARR, toks, T_STR), ("tokenizer.ggml.scores", T_ARR, scores, T_F32),
           ("tokenizer.ggml.token_type", T_ARR, types, T_I32),
           ("tokenizer.ggml.bos_token_id", T_U32, bos), ("tokenizer.ggml.eos_token_id", T_U32, eos),
           ("tokenizer.ggml.unknown_token_id", T_U32, sp.unk_id()),
           ("tokenizer.ggml.padding_token_id", T_U32, sp.pad_id()),
           ("tokenizer.ggml.add_bos_token", T_BOOL, True), ("tokenizer.ggml.add_eos_token", T_BOOL, True),
           ("tokenizer.ggml.add_space_prefix", T_BOOL, False)]
    write_model("gemma-embed", kvs, names, W, packed)
    write_json("gemma-embed", {
        "model": "gemma-embed.gguf", "n_embd": E, "n_ctx": c["ctx"], "f32_max_diff": worst,
        "tokenizer_cases": cases, "inputs": inputs,
        "notes": "EmbeddingGemma (see tests/gen_encoders.py); ids = [<bos>] + SentencePiece(formatted text) + "
                 "[<eos>]; vector = unit(dense_3(dense_2(mean over all tokens))). float64 PyTorch references."})
    print("gemma-embed       %d tokenizer cases, %d vectors (vocab %d; f32 diff %.2g)"
          % (len(cases), len(inputs), n_vocab, worst))


# ---------------------------------------------------------------------------
# Benchmark models: the published shapes with random F16 weights (no references)

def f16_tensor(rng, shape, scale):
    return lambda: (rng.standard_normal(shape, dtype=np.float32) * np.float32(scale)).astype("<f2").tobytes()


def f32_ones(n):
    return lambda: np.ones(n, "<f4").tobytes()


def gen_bench_modernbert(path):
    """ModernBERT-base: 22 layers of 768, 12 heads, n_ff 1152, window 128,
    pattern 3, context 8192, with the fixture's vocabulary."""
    c = dict(MB, E=768, L=22, H=12, F=1152, ctx=8192, n_swa=128)
    tok_kvs, n_vocab, _, _ = mb_vocab()
    rng = np.random.default_rng(1)
    E, F = c["E"], c["F"]
    t = [("token_embd.weight", [E, n_vocab], gf.GGML_F16, f16_tensor(rng, (n_vocab, E), 1.0)),
         ("token_embd_norm.weight", [E], gf.GGML_F32, f32_ones(E))]
    for i in range(c["L"]):
        p = "blk.%d." % i
        if i:
            t.append((p + "attn_norm.weight", [E], gf.GGML_F32, f32_ones(E)))
        t += [(p + "attn_qkv.weight", [E, 3 * E], gf.GGML_F16, f16_tensor(rng, (3 * E, E), 1 / math.sqrt(E))),
              (p + "attn_output.weight", [E, E], gf.GGML_F16, f16_tensor(rng, (E, E), 1 / math.sqrt(E))),
              (p + "ffn_norm.weight", [E], gf.GGML_F32, f32_ones(E)),
              (p + "ffn_up.weight", [E, 2 * F], gf.GGML_F16, f16_tensor(rng, (2 * F, E), 1 / math.sqrt(E))),
              (p + "ffn_down.weight", [F, E], gf.GGML_F16, f16_tensor(rng, (E, F), 1 / math.sqrt(F)))]
    t += [("output_norm.weight", [E], gf.GGML_F32, f32_ones(E)),
          ("cls.weight", [E, E], gf.GGML_F16, f16_tensor(rng, (E, E), 1 / math.sqrt(E))),
          ("cls.norm.weight", [E], gf.GGML_F32, f32_ones(E)),
          ("cls.output.weight", [E, 1], gf.GGML_F16, f16_tensor(rng, (1, E), 1 / math.sqrt(E)))]
    kvs = [kv if kv[0] != "general.file_type" else ("general.file_type", T_U32, 1)
           for kv in mb_kvs(c, "modernbert-base-shaped-random", tok_kvs)]
    gf.write_gguf(path, kvs, t)
    print("wrote %s (ModernBERT-base shapes, F16, random)" % path)


def gen_bench_gemma(path):
    """EmbeddingGemma-300m: 24 layers of 768, 3 query heads and 1 KV head of
    256, n_ff 1152, window 512, dense 768 -> 3072 -> 768, context 2048, with
    the fixture's vocabulary."""
    c = dict(GE, E=768, L=24, H=3, HK=1, D=256, F=1152, D2=3072, ctx=2048, n_swa=512)
    with tempfile.TemporaryDirectory() as tmp:
        sp = train_spm(tmp)
    n_vocab = sp.get_piece_size()
    toks = [sp.id_to_piece(i) for i in range(n_vocab)]
    types = [TOK_UNKNOWN if sp.is_unknown(i) else TOK_CONTROL if sp.is_control(i) else TOK_BYTE if sp.is_byte(i)
             else TOK_NORMAL for i in range(n_vocab)]
    rng = np.random.default_rng(2)
    E, F, H, HK, D = c["E"], c["F"], c["H"], c["HK"], c["D"]
    t = [("token_embd.weight", [E, n_vocab], gf.GGML_F16, f16_tensor(rng, (n_vocab, E), 0.05))]
    for i in range(c["L"]):
        p = "blk.%d." % i
        t += [(p + "attn_norm.weight", [E], gf.GGML_F32, f32_ones(E)),
              (p + "attn_q.weight", [E, H * D], gf.GGML_F16, f16_tensor(rng, (H * D, E), 1 / math.sqrt(E))),
              (p + "attn_k.weight", [E, HK * D], gf.GGML_F16, f16_tensor(rng, (HK * D, E), 1 / math.sqrt(E))),
              (p + "attn_v.weight", [E, HK * D], gf.GGML_F16, f16_tensor(rng, (HK * D, E), 1 / math.sqrt(E))),
              (p + "attn_q_norm.weight", [D], gf.GGML_F32, f32_ones(D)),
              (p + "attn_k_norm.weight", [D], gf.GGML_F32, f32_ones(D)),
              (p + "attn_output.weight", [H * D, E], gf.GGML_F16, f16_tensor(rng, (E, H * D), 1 / math.sqrt(H * D))),
              (p + "post_attention_norm.weight", [E], gf.GGML_F32, f32_ones(E)),
              (p + "ffn_norm.weight", [E], gf.GGML_F32, f32_ones(E)),
              (p + "ffn_gate.weight", [E, F], gf.GGML_F16, f16_tensor(rng, (F, E), 1 / math.sqrt(E))),
              (p + "ffn_up.weight", [E, F], gf.GGML_F16, f16_tensor(rng, (F, E), 1 / math.sqrt(E))),
              (p + "ffn_down.weight", [F, E], gf.GGML_F16, f16_tensor(rng, (E, F), 1 / math.sqrt(F))),
              (p + "post_ffw_norm.weight", [E], gf.GGML_F32, f32_ones(E))]
    t += [("output_norm.weight", [E], gf.GGML_F32, f32_ones(E)),
          ("dense_2.weight", [E, c["D2"]], gf.GGML_F16, f16_tensor(rng, (c["D2"], E), 1 / math.sqrt(E))),
          ("dense_3.weight", [c["D2"], E], gf.GGML_F16, f16_tensor(rng, (E, c["D2"]), 1 / math.sqrt(c["D2"])))]
    a = "gemma-embedding"
    kvs = [("general.architecture", T_STR, a), ("general.name", T_STR, "embeddinggemma-300m-shaped-random"),
           ("general.file_type", T_U32, 1), (a + ".context_length", T_U32, c["ctx"]),
           (a + ".embedding_length", T_U32, E), (a + ".block_count", T_U32, c["L"]),
           (a + ".feed_forward_length", T_U32, F), (a + ".attention.head_count", T_U32, H),
           (a + ".attention.head_count_kv", T_U32, HK), (a + ".attention.key_length", T_U32, D),
           (a + ".attention.value_length", T_U32, D), (a + ".attention.layer_norm_rms_epsilon", T_F32, c["eps"]),
           (a + ".attention.sliding_window", T_U32, c["n_swa"]), (a + ".rope.freq_base", T_F32, c["base"]),
           (a + ".rope.freq_base_swa", T_F32, c["base_swa"]), (a + ".pooling_type", T_U32, 1),
           ("tokenizer.ggml.model", T_STR, "llama"), ("tokenizer.ggml.pre", T_STR, "default"),
           ("tokenizer.ggml.tokens", T_ARR, toks, T_STR),
           ("tokenizer.ggml.scores", T_ARR, [sp.get_score(i) for i in range(n_vocab)], T_F32),
           ("tokenizer.ggml.token_type", T_ARR, types, T_I32),
           ("tokenizer.ggml.bos_token_id", T_U32, sp.bos_id()), ("tokenizer.ggml.eos_token_id", T_U32, sp.eos_id()),
           ("tokenizer.ggml.unknown_token_id", T_U32, sp.unk_id()),
           ("tokenizer.ggml.padding_token_id", T_U32, sp.pad_id()),
           ("tokenizer.ggml.add_bos_token", T_BOOL, True), ("tokenizer.ggml.add_eos_token", T_BOOL, True),
           ("tokenizer.ggml.add_space_prefix", T_BOOL, False)]
    gf.write_gguf(path, kvs, t)
    print("wrote %s (EmbeddingGemma-300m shapes, F16, random)" % path)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bench-modernbert", metavar="OUT.gguf", help="write a ModernBERT-base-shaped reranker")
    ap.add_argument("--bench-gemma", metavar="OUT.gguf", help="write an EmbeddingGemma-300m-shaped model")
    args = ap.parse_args()
    if args.bench_modernbert or args.bench_gemma:
        if args.bench_modernbert:
            gen_bench_modernbert(args.bench_modernbert)
        if args.bench_gemma:
            gen_bench_gemma(args.bench_gemma)
        return
    os.makedirs(OUT_DIR, exist_ok=True)
    torch.set_num_threads(1)
    n = check_bpe_against_llamacpp()
    print("byte-level BPE    matches llama.cpp on %d GPT-2 conformance texts" % n)
    W, packed, tok_kvs, bpe, ids = gen_modernbert()
    gen_decide(W, packed, tok_kvs, bpe, ids)
    gen_bert_rerank()
    gen_qwen3_rerank()
    gen_gemma()


if __name__ == "__main__":
    main()
