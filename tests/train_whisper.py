#!/usr/bin/python3
"""Trains the bundled demo speech model, models/whisper-espeak.bin.

Usage (from the repository root; PyTorch on the CPU, about half an hour):

    nice -n 10 /usr/bin/python3 tests/train_whisper.py [--steps 900] [--threads 2]
        [--out models/whisper-espeak.bin] [--eval-dir DIR]

A Whisper-architecture model (tests/whisper_ref.py) small enough to train
here: 80 mel bins, 4-second windows (200 encoder positions), width 128,
4 heads, 2 encoder and 2 decoder layers, an English-only vocabulary of the
256 single bytes plus the words below, each with its leading space.  The
speech is Debian's espeak-ng reading random digit strings and short
sentences in several English voices, variants, speeds and pitches; every
training window places one or two utterances at random offsets, with
random gain and a little noise, and its target carries segment timestamps
(0.02-s tokens), or none (<|notimestamps|>), sometimes after a previous-text
prompt, as the decoder will see them.

Held-out evaluation: clips of texts drawn with another seed are written as
WAV files (--eval-dir, default tests/data/whisper/espeak) with their texts
in transcripts.tsv; tests/whisper_wer.sh runs `kiln transcribe` on them.

The model file is F16 GGML (whisper.cpp's layout); its license is kiln's.
"""

import argparse
import io
import math
import os
import random
import subprocess
import sys
import time
import wave

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import whisper_ref as W  # noqa: E402

DIGITS = "zero one two three four five six seven eight nine".split()
WORDS = ("the a cat dog is red blue green big small open close door window turn on off light please call "
         "me at go stop left right up down yes no hello world time number and it my phone code what").split()
VOICES = ["en-us", "en-gb", "en-gb-scotland", "en-gb-x-rp", "en-029", "en-gb-x-gbclan", "en-gb-x-gbcwmd"]
VARIANTS = ["", "+m1", "+m2", "+m3", "+m4", "+m5", "+m6", "+m7", "+f1", "+f2", "+f3", "+f4", "+f5"]

DIMS = dict(n_mels=80, n_audio_ctx=200, n_audio_state=64, n_audio_head=4, n_audio_layer=2,
            n_text_ctx=96, n_text_state=64, n_text_head=4, n_text_layer=2)
WIN = DIMS["n_audio_ctx"] * 2 * W.HOP  # samples per window


def make_vocab():
    texts = [bytes([b]) for b in range(256)] + [(" " + w).encode() for w in DIGITS + WORDS]
    return W.Vocab(texts, 1)


def random_text(rng):
    r = rng.random()
    dig = lambda n: " ".join(rng.choice(DIGITS) for _ in range(n))  # noqa: E731
    if r < 0.45:
        return dig(rng.randint(1, 5))
    if r < 0.6:
        return rng.choice(["call me at", "my number is", "the code is", "the time is", "my phone is"]) + " " + \
            dig(rng.randint(2, 4))
    tmpl = [
        lambda: f"the {rng.choice(['cat', 'dog', 'door', 'window', 'light', 'phone'])} is "
                f"{rng.choice(['red', 'blue', 'green', 'big', 'small', 'open', 'on', 'off'])}",
        lambda: f"{rng.choice(['open', 'close'])} the {rng.choice(['door', 'window'])}"
                + rng.choice(["", " please"]),
        lambda: f"turn {rng.choice(['left', 'right', 'the light on', 'the light off', 'it up', 'it down'])}",
        lambda: rng.choice(["hello world", "yes please", "no", "yes", "stop", "go", "what time is it",
                            "hello", "please stop", "go left", "go right", "go up", "go down"]),
        lambda: f"{rng.choice(['a', 'my'])} {rng.choice(['big', 'small', 'red', 'blue', 'green'])} "
                f"{rng.choice(['cat', 'dog', 'phone', 'door'])}",
        lambda: f"{dig(1)} and {dig(1)}",
    ]
    return rng.choice(tmpl)()


def speak(text, rng):
    """espeak-ng audio of text as float64 at 16 kHz, leading and trailing
    silence removed."""
    voice = rng.choice(VOICES) + rng.choice(VARIANTS)
    cmd = ["espeak-ng", "-v", voice, "-s", str(rng.randint(125, 210)), "-p", str(rng.randint(25, 75)),
           "-a", "150", "--stdout", text]
    raw = subprocess.run(cmd, check=True, capture_output=True).stdout
    with wave.open(io.BytesIO(raw)) as w:
        sr = w.getframerate()
        x = np.frombuffer(w.readframes(w.getnframes()), dtype="<i2").astype(np.float64) / 32768.0
    from scipy.signal import resample_poly
    g = math.gcd(16000, sr)
    x = resample_poly(x, 16000 // g, sr // g)
    e = np.convolve(x * x, np.ones(160) / 160, mode="same")
    on = np.nonzero(e > 1e-5)[0]
    if len(on) == 0:
        return x[:0]
    return x[max(0, on[0] - 80): on[-1] + 80]


def pool(n, seed):
    rng = random.Random(seed)
    out = []
    for i in range(n):
        t = random_text(rng)
        a = speak(t, rng)
        if 0 < len(a) < WIN - 8000:
            out.append((t, a.astype(np.float32)))
    return out


def window(rng, utts, vocab):
    """One training window: (audio [WIN], tokens, n_prompt, text tokens).
    n_prompt tokens at the start are inputs only (no loss); the text tokens
    (no timestamps) are the CTC target."""
    audio = np.zeros(WIN, dtype=np.float32)
    k = 2 if rng.random() < 0.25 else 1
    picks = [rng.choice(utts) for _ in range(k)]
    total = sum(len(a) for _, a in picks)
    if total > WIN - 8000:
        picks = picks[:1]
        total = len(picks[0][1])
    slack = WIN - total - 1600
    pos = int(rng.random() * min(slack, 16000))
    segs = []
    for i, (t, a) in enumerate(picks):
        g = 10 ** rng.uniform(-0.6, 0.3)
        audio[pos:pos + len(a)] += a * g
        segs.append((pos, pos + len(a), t))
        rest = sum(len(b) for _, b in picks[i + 1:])
        room = WIN - (pos + len(a)) - rest - 800
        pos = pos + len(a) + max(0, min(int(rng.uniform(0.2, 1.0) * 16000), room))
    audio += np.float32(10 ** rng.uniform(-4.5, -2.5)) * np.random.default_rng(rng.randrange(1 << 30)).standard_normal(
        WIN).astype(np.float32)
    prompt = []
    if rng.random() < 0.15:
        prompt = [vocab.prev] + vocab.encode(" " + random_text(rng))
    prompt.append(vocab.sot)
    body = []
    if rng.random() < 0.2:
        prompt.append(vocab.notimestamps)
        for _, _, t in segs:
            body += vocab.encode(" " + t)
    else:
        for s, e, t in segs:
            body.append(vocab.ts_begin + min(200, int(round(s / 320))))
            body += vocab.encode(" " + t)
            body.append(vocab.ts_begin + min(200, int(round(e / 320))))
    text = [x for s_, e_, t in segs for x in vocab.encode(" " + t)]
    return audio, prompt + body + [vocab.eot], len(prompt), text


class Mel:
    def __init__(self):
        self.filters = torch.from_numpy(W.mel_filters(80)).float()
        self.win = torch.hann_window(W.N_FFT, periodic=True)

    def __call__(self, audio):
        """audio [B][WIN] float32 -> [B][80][WIN / 160] as log_mel() computes."""
        s = torch.stft(audio, W.N_FFT, W.HOP, window=self.win, center=True, pad_mode="reflect",
                       return_complex=True)[..., :-1]
        mel = self.filters @ (s.real ** 2 + s.imag ** 2)
        lg = torch.log10(torch.clamp(mel, min=1e-10))
        lg = torch.maximum(lg, lg.amax(dim=(1, 2), keepdim=True) - 8.0)
        return (lg + 4.0) / 4.0


def batch(rng, utts, vocab, mel, n):
    items = [window(rng, utts, vocab) for _ in range(n)]
    L = max(len(t) for _, t, _, _ in items)
    toks = torch.full((n, L), vocab.eot, dtype=torch.long)
    tgt = torch.full((n, L - 1), -100, dtype=torch.long)
    for i, (_, t, np_, _) in enumerate(items):
        toks[i, :len(t)] = torch.tensor(t)
        tt = torch.tensor(t[1:])
        tt[: np_ - 1] = -100
        tgt[i, :len(t) - 1] = tt
    audio = torch.from_numpy(np.stack([a for a, _, _, _ in items]))
    ctc = (torch.tensor([x for *_, c in items for x in c], dtype=torch.long),
           torch.tensor([len(c) for *_, c in items], dtype=torch.long))
    return mel(audio), toks[:, :-1], tgt, ctc


def greedy(model, vocab, mel_one, n_max=40):
    with torch.no_grad():
        xa = model.encode(mel_one[None])
        seq = [vocab.sot]
        for _ in range(n_max):
            lg = model.decode(torch.tensor([seq]), xa)[0, -1].double().numpy()
            lg = W.apply_rules(vocab, lg, seq, 1, True, max_initial_ts=50, n_audio_ctx=DIMS["n_audio_ctx"])
            t = int(np.argmax(lg))
            if t == vocab.eot:
                break
            seq.append(t)
    return vocab.decode(seq[1:]).strip()


def wer(ref, hyp):
    r, h = ref.split(), hyp.split()
    d = list(range(len(h) + 1))
    for i in range(1, len(r) + 1):
        prev, d[0] = d[0], i
        for j in range(1, len(h) + 1):
            cur = min(d[j] + 1, d[j - 1] + 1, prev + (r[i - 1] != h[j - 1]))
            prev, d[j] = d[j], cur
    return d[len(h)], len(r)


def write_wav(path, a):
    with wave.open(path, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(16000)
        w.writeframes((np.clip(a, -1, 1) * 32767).astype("<i2").tobytes())


def slow_blas():
    """1 when the BLAS PyTorch was linked with (Debian's reference libblas,
    say) multiplies slower than oneDNN's convolutions: the model then runs
    its products as 1x1 convolutions (whisper_ref.FAST_CPU).  Installing
    OpenBLAS (libopenblas0-pthread) makes training several times faster."""
    a, w = torch.randn(1024, 64), torch.randn(256, 64)

    def best(f):
        out = []
        for _ in range(3):
            t = time.process_time()
            for _ in range(10):
                f()
            out.append(time.process_time() - t)
        return min(out)
    mm = best(lambda: a @ w.T)
    conv = best(lambda: F.conv1d(a.T[None], w[:, :, None]))
    return mm > 1.2 * conv


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=900)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", default="models/whisper-espeak.bin")
    ap.add_argument("--eval-dir", default="tests/data/whisper/espeak")
    ap.add_argument("--pool", type=int, default=5000)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--ctc", type=float, default=0.5,
                    help="weight of a CTC loss on the encoder output (a training-only head, not in the model file)")
    ap.add_argument("--cache", help="keep the synthesized utterances in this file (pickle) for later runs")
    ap.add_argument("--ckpt", help="save the training state here every 50 steps and go on from it when it exists "
                                   "(a run stopped by a time limit resumes where it was)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    W.FAST_CPU = slow_blas()
    print(f"products as {'1x1 convolutions (slow BLAS)' if W.FAST_CPU else 'BLAS matrix products'}", flush=True)
    torch.manual_seed(1)
    rng = random.Random(2)
    vocab = make_vocab()
    dims = dict(DIMS, n_vocab=vocab.n_vocab)
    t0 = time.time()
    if args.cache and os.path.exists(args.cache):
        import pickle
        with open(args.cache, "rb") as f:
            utts = pickle.load(f)
    else:
        utts = pool(args.pool, 10)
        if args.cache:
            import pickle
            with open(args.cache, "wb") as f:
                pickle.dump(utts, f)
    print(f"pool: {len(utts)} utterances in {time.time() - t0:.0f} s", flush=True)

    # held-out clips: texts, voices and speeds drawn with another seed
    os.makedirs(args.eval_dir, exist_ok=True)
    ev = pool(40, 999)
    with open(os.path.join(args.eval_dir, "transcripts.tsv"), "w") as f:
        for i, (t, a) in enumerate(ev):
            name = f"clip{i:02d}.wav"
            write_wav(os.path.join(args.eval_dir, name), np.concatenate([np.zeros(1600), a, np.zeros(1600)]))
            f.write(f"{name}\t{t}\n")

    model = W.Whisper(dims)
    with torch.no_grad():  # small tied embeddings: initial logits near zero
        model.tok.weight.normal_(0, 0.02)
    mel = Mel()
    # hybrid CTC/attention training (Watanabe et al. 2017): a linear head on
    # the encoder output, trained with CTC over the text tokens (blank =
    # n_text), makes the encoder learn what was said long before the
    # decoder's cross-attention finds it; the head is dropped at export
    n_text = vocab.n_text
    ctc_head = torch.nn.Linear(dims["n_audio_state"], n_text + 1)
    params = list(model.parameters()) + (list(ctc_head.parameters()) if args.ctc > 0 else [])
    opt = torch.optim.AdamW(params, lr=2e-3, weight_decay=0.01)
    t1 = time.time()
    step = 0
    warm = 100
    ema = None
    if args.ckpt and os.path.exists(args.ckpt):
        st = torch.load(args.ckpt, weights_only=False)
        model.load_state_dict(st["model"])
        if "ctc" in st:
            ctc_head.load_state_dict(st["ctc"])
        if ("ctc" in st) == (args.ctc > 0):
            opt.load_state_dict(st["opt"])
        step, ema = st["step"], st["ema"]
        rng.setstate(st["rng"])
        torch.set_rng_state(st["torch_rng"])
        print(f"resumed at step {step}", flush=True)
    while step < args.steps:
        frac = step / args.steps
        lr = 2e-3 * min(1.0, (step + 1) / warm) * (0.5 * (1 + math.cos(math.pi * frac)) * 0.95 + 0.05)
        for g in opt.param_groups:
            g["lr"] = lr
        m, toks, tgt, (ctc_tgt, ctc_len) = batch(rng, utts, vocab, mel, args.batch)
        xa = model.encode(m)
        logits = model.decode(toks, xa)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), tgt.reshape(-1), ignore_index=-100)
        if args.ctc > 0:
            lp = F.log_softmax(ctc_head(xa), dim=-1).transpose(0, 1)  # [T][B][n_text + 1]
            T = torch.full((lp.shape[1],), lp.shape[0], dtype=torch.long)
            loss = loss + args.ctc * F.ctc_loss(lp, ctc_tgt, T, ctc_len, blank=n_text, zero_infinity=True)
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        ema = loss.item() if ema is None else 0.98 * ema + 0.02 * loss.item()
        step += 1
        if step % 50 == 0:
            print(f"step {step} loss {ema:.3f} lr {lr:.2e} {time.time() - t1:.0f} s", flush=True)
            if args.ckpt:
                torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": step, "ema": ema,
                            **({"ctc": ctc_head.state_dict()} if args.ctc > 0 else {}),
                            "rng": rng.getstate(), "torch_rng": torch.get_rng_state()}, args.ckpt + ".tmp")
                os.replace(args.ckpt + ".tmp", args.ckpt)

    model.eval()
    errs = words = 0
    for t, a in ev:
        audio = np.zeros(WIN, dtype=np.float32)
        a2 = np.concatenate([np.zeros(1600), a, np.zeros(1600)])[:WIN]
        audio[:len(a2)] = a2
        hyp = greedy(model, vocab, mel(torch.from_numpy(audio)[None])[0])
        e, n = wer(t, hyp)
        errs += e
        words += n
    print(f"trained {step} steps in {time.time() - t1:.0f} s")
    print(f"steps {step}, held-out WER (PyTorch greedy) {100.0 * errs / max(words, 1):.1f} % "
          f"({errs}/{words} words)", flush=True)
    filters = W.mel_filters(80)
    W.FAST_CPU = False
    W.write_ggml(args.out, dims, filters, vocab, model.ggml_tensors(), W.T_F16)
    print(f"wrote {args.out} ({os.path.getsize(args.out)} bytes)")


if __name__ == "__main__":
    main()
