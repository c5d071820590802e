#!/usr/bin/python3
"""Whisper fixtures for tests/test_whisper.c.

Usage (from the repository root):

    /usr/bin/python3 tests/gen_whisper.py
        Regenerates tests/data/whisper/ (deterministic: the same bytes each run).

    /usr/bin/python3 tests/gen_whisper.py --bench DIR [--size base|tiny]
        Writes random-weight models with whisper-base's shapes (or tiny's:
        width 384, 4 layers, 6 heads; F16 and Q8_0, the multilingual
        51865-token layout) to DIR for speed measurements, and a 60-s test
        signal.  No reference outputs.

Each fixture is a tiny random-weight model in whisper.cpp's GGML format
(tests/whisper_ref.py writes it) and a synthetic clip, with reference outputs
of the independent float64 PyTorch model in whisper_ref.py, run on the
weights exactly as stored (F16 and Q8_0 rounded):

  <name>.bin             the model
  <name>.json            dims, token layout, the clip's name, prompts, greedy
                         tokens with and without timestamps, tolerances, and
                         the smallest top-2 margin along each greedy path
  <name>.mel.f32         log-mel frames [0, n_ref_frames) of the clip (the rest
                         is padding, whose value is in the json)
  <name>.enc.f32         encoder output rows listed in the json
  <name>.logits.f32      first-step logits after the sot sequence

Clips: clip16k.wav (3 s, 16 kHz mono, 32-bit float, so kiln reads the
exact samples), clip44k.wav (the same signal sampled at 44.1 kHz in stereo
16-bit PCM, for the resampling test) and clip5s.wav (5 s, for windows).

Random weights come from fixed seeds; seeds base, base + 1, ... are tried
until every greedy path's smallest top-2 margin exceeds 0.02 (above
the F16 rounding of activations), so the choice is deterministic too.
"""

import argparse
import json
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import whisper_ref as W  # noqa: E402

OUT = "tests/data/whisper"
TOL = {W.T_F32: 1e-3, W.T_F16: 4e-3, W.T_Q8_0: 2e-2}


def signal(t, seed):
    """A speech-like test signal: gliding harmonics with syllable-rate
    amplitude and a little noise, at times t (seconds)."""
    rng = np.random.default_rng(seed)
    f0 = 140 + 40 * np.sin(2 * np.pi * 0.7 * t)
    ph = 2 * np.pi * np.cumsum(f0) / len(t) * (t[-1] - t[0] + (t[1] - t[0]))
    env = 0.5 + 0.5 * np.sin(2 * np.pi * 3.0 * t) ** 2
    x = sum(np.sin(k * ph) / k for k in range(1, 6)) * env * 0.2
    return x + 0.003 * rng.standard_normal(len(t))


def write_wav_f32(path, x, sr):
    import scipy.io.wavfile as wf
    wf.write(path, sr, np.asarray(x, dtype=np.float32))


def make_vocab(rng, n_words, n_langs):
    texts = [bytes([b]) for b in range(256)]
    letters = b"abcdefghijklmnopqrstuvwxyz"
    seen = set(texts)
    while len(texts) < 256 + n_words:
        w = b" " + bytes(rng.choice(list(letters), size=rng.integers(2, 7)).tolist())
        if w not in seen:
            seen.add(w)
            texts.append(w)
    return W.Vocab(texts, n_langs)


def init_model(dims, seed, scale):
    torch.manual_seed(seed)
    m = W.Whisper(dims)
    with torch.no_grad():
        for name, p in m.named_parameters():
            if name.endswith("bias"):
                p.normal_(0, 0.05)
            elif "ln" in name.split(".")[-2] if "." in name else False:
                p.normal_(1.0, 0.1)
            elif p.dim() >= 2:
                fan_in = p.shape[1] * (p.shape[2] if p.dim() == 3 else 1)
                p.normal_(0, scale / np.sqrt(fan_in))
        m.dec_pos.normal_(0, 0.3)
        m.tok.weight.normal_(0, 0.3)
    return m


def fixture(name, dims_base, n_langs, wtype, clip, seed0, ref_rows, n_ref_frames):
    rng = np.random.default_rng(seed0)
    vocab = make_vocab(rng, 100, n_langs)
    dims = dict(dims_base, n_vocab=vocab.n_vocab)
    filters = W.mel_filters(dims["n_mels"]).astype(np.float32)
    import scipy.io.wavfile as wf
    sr, audio = wf.read(os.path.join(OUT, clip))
    assert sr == 16000 and audio.dtype == np.float32
    A = dims["n_audio_ctx"]
    mel = W.log_mel(audio.astype(np.float64), filters.astype(np.float64), 2 * A * W.HOP)
    floor = float(mel.min())
    for seed in range(seed0, seed0 + 200):
        model = init_model(dims, seed, 1.0)
        path = os.path.join(OUT, name + ".bin")
        seen = W.write_ggml(path, dims, filters, vocab, model.ggml_tensors(), wtype)
        ref = W.Whisper(dims).double()
        W.load_weights(ref, seen)
        ref.eval()
        with torch.no_grad():
            xa = ref.encode(torch.from_numpy(mel[:, : 2 * A])[None])
            if vocab.multilingual:
                prompt = [vocab.sot, vocab.lang0, vocab.transcribe]
            else:
                prompt = [vocab.sot]
            logits = ref.decode(torch.tensor([prompt]), xa)[0, -1].numpy()
            n_max = dims["n_text_ctx"] // 2
            g_ts, m_ts = W.decode_greedy(ref, vocab, xa, prompt, n_max, True)
            g_nt, m_nt = W.decode_greedy(ref, vocab, xa, prompt + [vocab.notimestamps], n_max, False)
            pp = [vocab.prev] + vocab.encode(" hello world") + prompt
            g_pp, m_pp = W.decode_greedy(ref, vocab, xa, pp, n_max, True)
        margin = min(m_ts, m_nt, m_pp)
        distinct = len(set(g_nt))
        if margin > 0.02 and distinct >= 2 and len(g_ts) >= 4:
            break
    else:
        raise SystemExit(f"{name}: no seed with clear margins")
    rows = [r for r in ref_rows if r < A]
    enc = xa[0].numpy()[rows]
    mel[:, :n_ref_frames].astype("<f4").tofile(os.path.join(OUT, name + ".mel.f32"))
    enc.astype("<f4").tofile(os.path.join(OUT, name + ".enc.f32"))
    logits.astype("<f4").tofile(os.path.join(OUT, name + ".logits.f32"))
    meta = {
        "model": name + ".bin", "clip": clip, "seed": seed, "dims": dims, "wtype": wtype,
        "n_text": vocab.n_text, "n_langs": n_langs, "multilingual": vocab.multilingual,
        "eot": vocab.eot, "sot": vocab.sot, "ts_begin": vocab.ts_begin,
        "n_frames": int(mel.shape[1]), "n_ref_frames": n_ref_frames, "mel_floor": floor,
        "enc_rows": rows, "enc_abs_max": float(np.abs(xa[0].numpy()).max()),
        "logits_abs_max": float(np.abs(logits).max()),
        "prompt": prompt, "greedy_timestamps": g_ts, "greedy_notimestamps": g_nt,
        "prev_text": " hello world", "greedy_prev": g_pp, "min_margin": margin,
        # F16 rounding of attention operands (and of F16 weights' activations);
        # Q8_0 products quantize their activations to 8 bits as well
        "tolerance": {"mel": 1e-5, "enc_rel": TOL[wtype], "logits_rel": TOL[wtype]},
    }
    with open(os.path.join(OUT, name + ".json"), "w") as f:
        json.dump(meta, f, indent=1)
        f.write("\n")
    print(f"{name}: seed {seed}, margin {margin:.3f}, greedy ts {len(g_ts)} / nt {len(g_nt)} tokens, "
          f"{os.path.getsize(path)} bytes")


def clips():
    t = np.arange(48000) / 16000.0
    x = signal(t, 1)
    write_wav_f32(os.path.join(OUT, "clip16k.wav"), x, 16000)
    t44 = np.arange(int(3.0 * 44100)) / 44100.0
    x44 = signal(t44, 1)
    st = np.stack([x44, 0.5 * x44], axis=1)
    import scipy.io.wavfile as wf
    wf.write(os.path.join(OUT, "clip44k.wav"), 44100, (np.clip(st, -1, 1) * 32767).astype("<i2"))
    t5 = np.arange(80000) / 16000.0
    write_wav_f32(os.path.join(OUT, "clip5s.wav"), signal(t5, 2), 16000)


BENCH_SIZES = {"base": (512, 8, 6), "tiny": (384, 6, 4)}  # width, heads, layers


def bench(out, size):
    os.makedirs(out, exist_ok=True)
    rng = np.random.default_rng(7)
    texts = [bytes([b]) for b in range(256)]
    letters = b"abcdefghijklmnopqrstuvwxyz"
    seen = set(texts)
    while len(texts) < 50257:
        w = b" " + bytes(rng.choice(list(letters), size=rng.integers(2, 9)).tolist())
        if w not in seen:
            seen.add(w)
            texts.append(w)
    vocab = W.Vocab(texts, 99)
    assert vocab.n_vocab == 51865
    w, h, L = BENCH_SIZES[size]
    dims = dict(n_mels=80, n_audio_ctx=1500, n_audio_state=w, n_audio_head=h, n_audio_layer=L, n_text_ctx=448,
                n_text_state=w, n_text_head=h, n_text_layer=L, n_vocab=vocab.n_vocab)
    model = init_model(dims, 1, 1.0)
    filters = W.mel_filters(80).astype(np.float32)
    for wt, nm in ((W.T_F16, "f16"), (W.T_Q8_0, "q8_0")):
        W.write_ggml(os.path.join(out, f"whisper-{size}-random-{nm}.bin"), dims, filters, vocab,
                     model.ggml_tensors(), wt)
    t = np.arange(60 * 16000) / 16000.0
    write_wav_f32(os.path.join(out, "signal60s.wav"), signal(t, 3), 16000)
    print(f"wrote {out}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bench")
    ap.add_argument("--size", choices=sorted(BENCH_SIZES), default="base")
    a = ap.parse_args()
    torch.set_num_threads(2)
    if a.bench:
        return bench(a.bench, a.size)
    os.makedirs(OUT, exist_ok=True)
    clips()
    base_ml = dict(n_mels=80, n_audio_ctx=1500, n_audio_state=64, n_audio_head=2, n_audio_layer=2, n_text_ctx=64,
                   n_text_state=64, n_text_head=2, n_text_layer=2)
    fixture("tiny-ml-f32", base_ml, 99, W.T_F32, "clip16k.wav", 100, list(range(0, 150)) + list(range(1400, 1500)),
            400)
    base_en = dict(n_mels=128, n_audio_ctx=100, n_audio_state=64, n_audio_head=4, n_audio_layer=2, n_text_ctx=32,
                   n_text_state=64, n_text_head=4, n_text_layer=2)
    fixture("tiny-en-f16", base_en, 1, W.T_F16, "clip16k.wav", 200, list(range(100)), 400)
    fixture("tiny-en-q8_0", base_en, 1, W.T_Q8_0, "clip16k.wav", 300, list(range(100)), 400)


if __name__ == "__main__":
    main()
