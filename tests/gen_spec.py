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


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bench-copy", metavar="DIR", help="write the speed test's copy models and prompts")
    ap.add_argument("--arch", default="qwen3", choices=["qwen3", "llama"],
                    help="--bench-copy: the models' architecture (llama: the same weights without Q/K norms, "
                         "for builds of other programs that do not load qwen3; files get a -llama suffix)")
    args = ap.parse_args()
    torch.set_num_threads(1)
    if args.bench_copy:
        gen_bench_copy(args.bench_copy, args.arch)
        return
    os.makedirs(OUT_DIR, exist_ok=True)
    gen_spec_llama()
    for fn in sorted(os.listdir(OUT_DIR)):
        print("%s  %s" % (gf.sha256(os.path.join(OUT_DIR, fn)), fn))


if __name__ == "__main__":
    sys.exit(main())
