#!/usr/bin/python3
"""Trains the bundled demo speech model, models/whisper-espeak.bin.

Usage (from the repository root; PyTorch on the CPU, one thread):

    OPENBLAS_NUM_THREADS=1 LD_LIBRARY_PATH=/usr/lib/x86_64-linux-gnu/openblas-pthread \
        /usr/bin/python3 tests/train_whisper.py --threads 1 [--steps 4000] [--minutes 30]
        [--out models/whisper-espeak.bin] [--eval-dir DIR] [--cache POOL.pkl] [--ckpt STATE]
    /usr/bin/python3 tests/train_whisper.py --threads 1 --export-only --ckpt STATE --out FILE.bin

(Debian's torch runs on the reference BLAS; OpenBLAS, libopenblas0-pthread,
makes a step several times faster.)

A Whisper-architecture model (tests/whisper_ref.py) small enough to train
here: 80 mel bins, 4-second windows (200 encoder positions), width 64,
4 heads, 2 encoder and 2 decoder layers, an English-only vocabulary of the
256 single bytes plus the words below, each with its leading space.  The
speech is Debian's espeak-ng reading random digit strings and short
sentences in several English voices, variants, speeds and pitches; every
training window places one or two utterances at random offsets, with
random gain and a little noise, and its target carries segment timestamps
(0.02-s tokens), or none (<|notimestamps|>), sometimes after a previous-text
prompt, as the decoder will see them.  Most utterances are read word by
word and put back together (speak_aligned), so each encoder frame's word
is known and a training-only head teaches the encoder to name it.

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


def voice_args(rng):
    """espeak-ng's voice, speed and pitch options, drawn from rng."""
    return ["-v", rng.choice(VOICES) + rng.choice(VARIANTS), "-s", str(rng.randint(125, 210)),
            "-p", str(rng.randint(25, 75))]


def synth(args, text):
    """espeak-ng audio of text as float64 at 16 kHz."""
    raw = subprocess.run(["espeak-ng", *args, "-a", "150", "--stdout", text], check=True,
                         capture_output=True).stdout
    with wave.open(io.BytesIO(raw)) as w:
        sr = w.getframerate()
        x = np.frombuffer(w.readframes(w.getnframes()), dtype="<i2").astype(np.float64) / 32768.0
    from scipy.signal import resample_poly
    g = math.gcd(16000, sr)
    return resample_poly(x, 16000 // g, sr // g)


def speak(text, rng):
    """espeak-ng audio of text as float64 at 16 kHz, leading and trailing
    silence removed."""
    x = synth(voice_args(rng), text)
    e = np.convolve(x * x, np.ones(160) / 160, mode="same")
    on = np.nonzero(e > 1e-5)[0]
    if len(on) == 0:
        return x[:0]
    return x[max(0, on[0] - 80): on[-1] + 80]


def speak_aligned(text, args, rng):
    """espeak-ng audio of text with each word's place: (audio, [(start,
    end)] in samples), or None.  espeak-ng reads it with 300-ms pauses
    between words (-g 30), so the words are the runs of 10-ms frames with
    sound, joined across gaps under 120 ms (the closure of a stop
    consonant); when that gives one run per word, the runs are put back
    together 0 to 60 ms apart, about as close as in the plain reading."""
    x = synth(args + ["-g", "30"], text)
    on = np.convolve(x * x, np.ones(160) / 160, mode="same")[::160] > 1e-5  # [10-ms frames]
    idx = np.nonzero(on)[0]
    if len(idx) == 0:
        return None
    cut = np.nonzero(np.diff(idx) > 12)[0]
    starts = np.concatenate([idx[:1], idx[cut + 1]]) * 160
    ends = (np.concatenate([idx[cut], idx[-1:]]) + 1) * 160
    if len(starts) != len(text.split()):
        return None
    out, bounds, n = [], [], 0
    for i, (a, b) in enumerate(zip(starts, ends)):
        if i:
            gap = rng.randint(0, 960)
            out.append(np.zeros(gap))
            n += gap
        piece = x[max(0, a - 80): b + 80]
        out.append(piece)
        bounds.append((n, n + len(piece)))
        n += len(piece)
    return np.concatenate(out), bounds


def pool(n, seed):
    """n plain readings (text, audio, None): the held-out clips are these."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        t = random_text(rng)
        a = speak(t, rng)
        if 0 < len(a) < WIN - 8000:
            out.append((t, a.astype(np.float32), None))
    return out


def _aligned_job(job):
    t, args, seed = job
    r = speak_aligned(t, args, random.Random(seed))
    if r is None or not 0 < len(r[0]) < WIN - 8000:
        return None
    return t, r[0].astype(np.float32), r[1]


def training_pool(n, seed, aligned):
    """n utterances (text, audio, word bounds or None); a fraction `aligned`
    of them read word by word (speak_aligned, so the encoder can be taught
    which word each 20-ms frame belongs to), the rest plain readings."""
    rng = random.Random(seed)
    jobs, out = [], []
    for i in range(n):
        t = random_text(rng)
        if rng.random() < aligned:
            jobs.append((t, voice_args(rng), rng.randrange(1 << 30)))
        else:
            a = speak(t, rng)
            if 0 < len(a) < WIN - 8000:
                out.append((t, a.astype(np.float32), None))
    from concurrent.futures import ThreadPoolExecutor
    with ThreadPoolExecutor(2) as ex:  # espeak-ng runs as a child process
        out += [r for r in ex.map(_aligned_job, jobs) if r is not None]
    random.Random(seed + 1).shuffle(out)
    return out


def window(rng, utts, vocab):
    """One training window: (audio [WIN], tokens, n_prompt, text tokens,
    frame labels).  n_prompt tokens at the start are inputs only (no loss);
    the text tokens (no timestamps) are the CTC target; frame labels
    [n_audio_ctx] give each 20-ms encoder frame its word's token, n_text
    where nobody speaks, or -100 inside a plain reading (words unplaced)."""
    audio = np.zeros(WIN, dtype=np.float32)
    n_ctx = DIMS["n_audio_ctx"]
    frames = np.full(n_ctx, vocab.n_text, dtype=np.int64)
    centre = np.arange(n_ctx) * (WIN // n_ctx) + WIN // n_ctx // 2  # [n_ctx] sample at each frame's middle
    k = 2 if rng.random() < 0.25 else 1
    picks = [rng.choice(utts) for _ in range(k)]
    total = sum(len(a) for _, a, _ in picks)
    if total > WIN - 8000:
        picks = picks[:1]
        total = len(picks[0][1])
    slack = WIN - total - 1600
    pos = int(rng.random() * min(slack, 16000))
    segs = []
    for i, (t, a, bounds) in enumerate(picks):
        g = 10 ** rng.uniform(-0.6, 0.3)
        audio[pos:pos + len(a)] += a * g
        segs.append((pos, pos + len(a), t))
        inside = (centre >= pos) & (centre < pos + len(a))
        frames[inside] = -100
        if bounds is not None:
            frames[inside] = vocab.n_text
            for (b0, b1), w in zip(bounds, t.split()):
                ids = vocab.encode(" " + w)
                frames[(centre >= pos + b0) & (centre < pos + b1)] = ids[0] if len(ids) == 1 else -100
        rest = sum(len(b) for _, b, _ in picks[i + 1:])
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
    return audio, prompt + body + [vocab.eot], len(prompt), text, frames


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
    """n windows: (mel [n][80][2 * n_audio_ctx], decoder input [n][L],
    targets [n][L] (-100: no loss), (CTC targets, their lengths), frame
    labels [n][n_audio_ctx])."""
    items = [window(rng, utts, vocab) for _ in range(n)]
    L = max(len(it[1]) for it in items)
    toks = torch.full((n, L), vocab.eot, dtype=torch.long)
    tgt = torch.full((n, L - 1), -100, dtype=torch.long)
    for i, (_, t, np_, _, _) in enumerate(items):
        toks[i, :len(t)] = torch.tensor(t)
        tt = torch.tensor(t[1:])
        tt[: np_ - 1] = -100
        tgt[i, :len(t) - 1] = tt
    audio = torch.from_numpy(np.stack([it[0] for it in items]))
    ctc = (torch.tensor([x for it in items for x in it[3]], dtype=torch.long),
           torch.tensor([len(it[3]) for it in items], dtype=torch.long))
    frames = torch.from_numpy(np.stack([it[4] for it in items]))
    return mel(audio), toks[:, :-1], tgt, ctc, frames


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


def export(ckpt, out):
    """Writes the model of a training state (ckpt) as the F16 GGML file out."""
    vocab = make_vocab()
    dims = dict(DIMS, n_vocab=vocab.n_vocab)
    model = W.Whisper(dims)
    st = torch.load(ckpt, weights_only=False)
    model.load_state_dict(st["model"])
    W.FAST_CPU = False
    W.write_ggml(out, dims, W.mel_filters(80), vocab, model.ggml_tensors(), W.T_F16)
    print(f"step {st['step']}: wrote {out} ({os.path.getsize(out)} bytes)")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=4000)
    ap.add_argument("--minutes", type=float, help="stop after this much wall time (the learning rate follows "
                                                   "whichever of steps and time runs out first)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", default="models/whisper-espeak.bin")
    ap.add_argument("--eval-dir", default="tests/data/whisper/espeak")
    ap.add_argument("--pool", type=int, default=3000)
    ap.add_argument("--aligned", type=float, default=0.6,
                    help="fraction of the training utterances read word by word, with each word's place known")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--frame", type=float, default=1.0,
                    help="weight of a per-frame word loss on the encoder output (a training-only head)")
    ap.add_argument("--ctc", type=float, default=0.0,
                    help="weight of a CTC loss on the encoder output (a training-only head, not in the model file)")
    ap.add_argument("--cache", help="keep the synthesized utterances in this file (pickle) for later runs")
    ap.add_argument("--ckpt", help="save the training state here every 50 steps and go on from it when it exists "
                                   "(a run stopped by a time limit resumes where it was)")
    ap.add_argument("--export-only", action="store_true",
                    help="write --out from the model in --ckpt and stop: no synthesis, training or evaluation "
                         "(a running training's latest state can be measured meanwhile)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    if args.export_only:
        if not args.ckpt or not os.path.exists(args.ckpt):
            sys.exit("--export-only needs an existing --ckpt")
        export(args.ckpt, args.out)
        return
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
        utts = training_pool(args.pool, 10, args.aligned)
        if args.cache:
            import pickle
            with open(args.cache, "wb") as f:
                pickle.dump(utts, f)
    n_al = sum(u[2] is not None for u in utts)
    print(f"pool: {len(utts)} utterances ({n_al} with word places) in {time.time() - t0:.0f} s", flush=True)

    # held-out clips: plain readings, texts, voices and speeds drawn with
    # another seed
    os.makedirs(args.eval_dir, exist_ok=True)
    ev = pool(40, 999)
    with open(os.path.join(args.eval_dir, "transcripts.tsv"), "w") as f:
        for i, (t, a, _) in enumerate(ev):
            name = f"clip{i:02d}.wav"
            write_wav(os.path.join(args.eval_dir, name), np.concatenate([np.zeros(1600), a, np.zeros(1600)]))
            f.write(f"{name}\t{t}\n")

    model = W.Whisper(dims)
    with torch.no_grad():  # small tied embeddings: initial logits near zero
        model.tok.weight.normal_(0, 0.02)
    mel = Mel()
    # Training-only heads on the encoder output, dropped at export.  Trained
    # on the decoder's loss alone, the encoder learns almost nothing about the
    # audio in thousands of steps (the decoder becomes a language model of
    # the texts), and a CTC loss stays at its all-blank plateau as long.  The
    # frame head is told which word each 20-ms frame belongs to (known for
    # the word-by-word readings), a plain classification the encoder learns
    # in a few hundred steps; the decoder's cross-attention then has words to
    # find.  The optional CTC head (hybrid CTC/attention, Watanabe et al.
    # 2017) is blank = n_text.
    n_text = vocab.n_text
    frame_head = torch.nn.Linear(dims["n_audio_state"], n_text + 1)
    ctc_head = torch.nn.Linear(dims["n_audio_state"], n_text + 1)
    params = list(model.parameters()) + (list(frame_head.parameters()) if args.frame > 0 else []) + \
        (list(ctc_head.parameters()) if args.ctc > 0 else [])
    opt = torch.optim.AdamW(params, lr=2e-3, weight_decay=0.01)
    t1 = time.time()
    step = 0
    warm = 200
    ema = None
    spent = 0.0  # wall seconds of training before this run (resumed)
    if args.ckpt and os.path.exists(args.ckpt):
        st = torch.load(args.ckpt, weights_only=False)
        model.load_state_dict(st["model"])
        for k, h in (("ctc", ctc_head), ("frame", frame_head)):
            if k in st:
                h.load_state_dict(st[k])
        if ("ctc" in st) == (args.ctc > 0) and ("frame" in st) == (args.frame > 0):
            opt.load_state_dict(st["opt"])
        step, ema, spent = st["step"], st["ema"], st.get("spent", 0.0)
        rng.setstate(st["rng"])
        torch.set_rng_state(st["torch_rng"])
        print(f"resumed at step {step}", flush=True)
    budget = args.minutes * 60.0 if args.minutes else float("inf")
    fl_ema = None
    while step < args.steps and spent + time.time() - t1 < budget:
        frac = max(step / args.steps, (spent + time.time() - t1) / budget)
        lr = 2e-3 * min(1.0, (step + 1) / warm) * (0.5 * (1 + math.cos(math.pi * min(frac, 1.0))) * 0.95 + 0.05)
        for g in opt.param_groups:
            g["lr"] = lr
        m, toks, tgt, (ctc_tgt, ctc_len), frames = batch(rng, utts, vocab, mel, args.batch)
        xa = model.encode(m)
        logits = model.decode(toks, xa)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), tgt.reshape(-1), ignore_index=-100)
        if args.frame > 0 and (frames >= 0).any():
            fl = F.cross_entropy(frame_head(xa).reshape(-1, n_text + 1), frames.reshape(-1), ignore_index=-100)
            loss = loss + args.frame * fl
            fl_ema = fl.item() if fl_ema is None else 0.98 * fl_ema + 0.02 * fl.item()
        if args.ctc > 0:
            lp = F.log_softmax(ctc_head(xa), dim=-1).transpose(0, 1)  # [T][B][n_text + 1]
            T = torch.full((lp.shape[1],), lp.shape[0], dtype=torch.long)
            loss = loss + args.ctc * F.ctc_loss(lp, ctc_tgt, T, ctc_len, blank=n_text, zero_infinity=True)
        opt.zero_grad()
        loss.backward()
        gn = torch.nn.utils.clip_grad_norm_(params, 1.0)
        if not (torch.isfinite(loss) and torch.isfinite(gn)):  # a step that would poison the weights
            print(f"step {step}: non-finite loss or gradient, skipped", flush=True)
            continue
        opt.step()
        ema = loss.item() if ema is None else 0.98 * ema + 0.02 * loss.item()
        step += 1
        if step % 50 == 0:
            print(f"step {step} loss {ema:.3f} frame {fl_ema or 0:.3f} lr {lr:.2e} {time.time() - t1:.0f} s",
                  flush=True)
            if args.ckpt:
                torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": step, "ema": ema,
                            "spent": spent + time.time() - t1,
                            **({"ctc": ctc_head.state_dict()} if args.ctc > 0 else {}),
                            **({"frame": frame_head.state_dict()} if args.frame > 0 else {}),
                            "rng": rng.getstate(), "torch_rng": torch.get_rng_state()}, args.ckpt + ".tmp")
                os.replace(args.ckpt + ".tmp", args.ckpt)

    model.eval()
    errs = words = 0
    for t, a, _ in ev:
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
    W.FAST_CPU = False
    W.write_ggml(args.out, dims, W.mel_filters(80), vocab, model.ggml_tensors(), W.T_F16)
    print(f"wrote {args.out} ({os.path.getsize(args.out)} bytes)")


if __name__ == "__main__":
    main()
