"""An independent reference of the Whisper model for kiln's tests.

Written from the published description of the model (OpenAI's Whisper paper
and the whisper.cpp GGML file layout), not from either project's code:

  - log_mel():     the log-mel spectrogram (400-point periodic Hann STFT, hop
                   160, |X|^2 without the last frame, Slaney mel filters,
                   log10 floored at 1e-10, clamped to max - 8, (x + 4) / 4)
  - mel_filters(): Slaney-scale triangular filters with Slaney area
                   normalization (what the GGML files carry)
  - Whisper:       the encoder (two convolutions with GELU, sinusoidal
                   positions, pre-norm blocks) and decoder (learned
                   positions, causal self-attention, cross-attention, tied
                   output projection), in any torch dtype
  - Vocab:         the token layout of a Whisper vocabulary (text tokens,
                   then end/start of transcript, languages, task tokens,
                   no-timestamps, 1501 timestamps)
  - decode_greedy(): greedy decoding with the timestamp rules and token
                   suppression kiln applies (see src/whisper/decode.c)
  - write_ggml():  the whisper.cpp GGML file (magic, 11 int32 hyper-
                   parameters, mel filters, vocabulary, tensors), with F32,
                   F16 and Q8_0 tensors

Used by tests/gen_whisper.py (fixtures) and tests/train_whisper.py (the
bundled demo model).  Needs Debian's python3-numpy and python3-torch.
"""

import math
import struct

import numpy as np
import torch
import torch.nn.functional as F

SAMPLE_RATE = 16000
N_FFT = 400
HOP = 160
GGML_MAGIC = 0x67676D6C

# ggml type ids
T_F32, T_F16, T_Q8_0 = 0, 1, 8
# file ftype values (whisper.cpp's ggml_ftype): 0 all F32, 1 mostly F16, 7 mostly Q8_0
FTYPE = {T_F32: 0, T_F16: 1, T_Q8_0: 7}
QNT_VERSION = 2  # quantized files store ftype + 1000 * QNT_VERSION

# The 100 language codes in Whisper's order (v3 added "yue" last).
LANGS = ("en zh de es ru ko fr ja pt tr pl ca nl ar sv it id hi fi vi he uk el ms cs ro da hu ta no th ur hr "
         "bg lt la mi ml cy sk te fa lv bn sr az sl kn et mk br eu is hy ne mn bs kk sq sw gl mr pa si km "
         "sn yo so af oc ka be tg sd gu am yi lo uz fo ht ps tk nn mt sa lb my bo tl mg as tt haw ln ha "
         "ba jw su yue").split()


# ---------------------------------------------------------------- features

def _hz_to_mel(f):
    f = np.asarray(f, dtype=np.float64)
    f_sp = 200.0 / 3.0
    min_log_hz, min_log_mel, logstep = 1000.0, 1000.0 / f_sp, math.log(6.4) / 27.0
    return np.where(f < min_log_hz, f / f_sp, min_log_mel + np.log(np.maximum(f, 1e-12) / min_log_hz) / logstep)


def _mel_to_hz(m):
    m = np.asarray(m, dtype=np.float64)
    f_sp = 200.0 / 3.0
    min_log_hz, min_log_mel, logstep = 1000.0, 1000.0 / f_sp, math.log(6.4) / 27.0
    return np.where(m < min_log_mel, m * f_sp, min_log_hz * np.exp(logstep * (m - min_log_mel)))


def mel_filters(n_mels, sr=SAMPLE_RATE, n_fft=N_FFT):
    """[n_mels][n_fft // 2 + 1] float64 triangular filters, Slaney-normalized."""
    freqs = np.linspace(0.0, sr / 2.0, n_fft // 2 + 1)
    mels = np.linspace(_hz_to_mel(0.0), _hz_to_mel(sr / 2.0), n_mels + 2)
    pts = _mel_to_hz(mels)
    w = np.zeros((n_mels, len(freqs)))
    for i in range(n_mels):
        lo, c, hi = pts[i], pts[i + 1], pts[i + 2]
        up = (freqs - lo) / (c - lo)
        down = (hi - freqs) / (hi - c)
        w[i] = np.maximum(0.0, np.minimum(up, down)) * (2.0 / (hi - lo))
    return w


def log_mel(audio, filters, pad):
    """Log-mel of mono 16 kHz audio (float64) followed by pad zero samples:
    [n_mels][(len + pad) // 160] float64."""
    x = np.concatenate([np.asarray(audio, dtype=np.float64), np.zeros(pad)])
    half = N_FFT // 2
    xp = np.pad(x, (half, half), mode="reflect")
    n_frames = len(x) // HOP  # the STFT has one more; the last is dropped
    win = 0.5 - 0.5 * np.cos(2.0 * np.pi * np.arange(N_FFT) / N_FFT)
    idx = np.arange(N_FFT)[None, :] + HOP * np.arange(n_frames)[:, None]
    spec = np.fft.rfft(xp[idx] * win[None, :], axis=1)
    power = spec.real ** 2 + spec.imag ** 2  # [frames][201]
    mel = filters @ power.T
    lg = np.log10(np.maximum(mel, 1e-10))
    lg = np.maximum(lg, lg.max() - 8.0)
    return (lg + 4.0) / 4.0


# ------------------------------------------------------------------- model

# Training on a CPU whose BLAS is slow: linear layers and attention products
# as 1x1 (grouped) convolutions, which take the oneDNN path.  Same math.
FAST_CPU = False


class Linear(torch.nn.Linear):
    def forward(self, x):
        if not FAST_CPU or x.dtype != torch.float32:
            return super().forward(x)
        sh = x.shape
        y = F.conv1d(x.reshape(-1, sh[-1]).T[None], self.weight[:, :, None], self.bias)
        return y[0].T.reshape(*sh[:-1], self.out_features)


def _bmm_nt(a, b):
    """a [G][T][D], b [G][S][D] -> a @ b^T [G][T][S]"""
    if not FAST_CPU or a.dtype != torch.float32:
        return a @ b.transpose(-1, -2)
    G, T, D = a.shape
    S = b.shape[1]
    y = F.conv1d(a.transpose(1, 2).reshape(1, G * D, T), b.reshape(G * S, D, 1), groups=G)
    return y.reshape(G, S, T).transpose(1, 2)


def _conv_k3(conv, x):
    """conv (Conv1d, kernel 3, padding 1, stride 1 or 2) on x [B][C][T] as
    three matrix products, the same sum.  For training: the CPU convolution
    backward of the torch build used here returns garbage weight gradients
    now and then (conv1's gradient norm 1e10 or inf on one input, 12 on the
    next try of the same), and gradient clipping then scales every other
    gradient to nothing, so the model hardly learns."""
    s = conv.stride[0]
    xp = F.pad(x, (1, 1))
    n = (x.shape[-1] - 1) // s + 1
    y = conv.bias[None, :, None]
    for k in range(3):
        y = y + torch.einsum("oc,bct->bot", conv.weight[:, :, k], xp[:, :, k: k + s * (n - 1) + 1: s])
    return y


def sinusoids(length, channels):
    inc = math.log(10000.0) / (channels // 2 - 1)
    inv = torch.exp(-inc * torch.arange(channels // 2, dtype=torch.float64))
    t = torch.arange(length, dtype=torch.float64)[:, None] * inv[None, :]
    return torch.cat([torch.sin(t), torch.cos(t)], dim=1)


class Attn(torch.nn.Module):
    def __init__(self, d, h):
        super().__init__()
        self.h = h
        self.query = Linear(d, d)
        self.key = Linear(d, d, bias=False)
        self.value = Linear(d, d)
        self.out = Linear(d, d)

    def forward(self, x, kv=None, causal=False):
        src = x if kv is None else kv
        q = self.query(x)
        if kv is not None and not self.training and getattr(self, "_kv_of", None) is kv:
            k, v = self._kv  # cross-attention K/V of the same audio, computed once
        else:
            k, v = self.key(src), self.value(src)
            if kv is not None and not self.training:
                self._kv_of, self._kv = kv, (k, v)
        B, T, D = q.shape
        S = k.shape[1]
        hd = D // self.h
        q = q.view(B, T, self.h, hd).transpose(1, 2)
        k = k.view(B, S, self.h, hd).transpose(1, 2)
        v = v.view(B, S, self.h, hd).transpose(1, 2)
        s = _bmm_nt(q.reshape(B * self.h, T, hd), k.reshape(B * self.h, S, hd)).view(B, self.h, T, S)
        s = s / math.sqrt(hd)
        if causal and T > 1:
            mask = torch.full((T, S), float("-inf"), dtype=s.dtype).triu(S - T + 1)
            s = s + mask
        w = torch.softmax(s, dim=-1)
        o = _bmm_nt(w.reshape(B * self.h, T, S), v.transpose(-1, -2).reshape(B * self.h, hd, S))
        return self.out(o.view(B, self.h, T, hd).transpose(1, 2).reshape(B, T, D))


class Block(torch.nn.Module):
    def __init__(self, d, h, cross):
        super().__init__()
        self.attn = Attn(d, h)
        self.attn_ln = torch.nn.LayerNorm(d)
        self.cross_attn = Attn(d, h) if cross else None
        self.cross_attn_ln = torch.nn.LayerNorm(d) if cross else None
        self.mlp = torch.nn.Sequential(Linear(d, 4 * d), torch.nn.GELU(), Linear(4 * d, d))
        self.mlp_ln = torch.nn.LayerNorm(d)

    def forward(self, x, xa=None, causal=False):
        x = x + self.attn(self.attn_ln(x), causal=causal)
        if self.cross_attn is not None:
            x = x + self.cross_attn(self.cross_attn_ln(x), kv=xa)
        return x + self.mlp(self.mlp_ln(x))


class Whisper(torch.nn.Module):
    """dims: n_mels, n_audio_ctx, n_audio_state, n_audio_head, n_audio_layer,
    n_vocab, n_text_ctx, n_text_state, n_text_head, n_text_layer."""

    def __init__(self, dims):
        super().__init__()
        self.dims = dict(dims)
        d, da = dims["n_text_state"], dims["n_audio_state"]
        assert d == da
        self.conv1 = torch.nn.Conv1d(dims["n_mels"], da, 3, padding=1)
        self.conv2 = torch.nn.Conv1d(da, da, 3, stride=2, padding=1)
        self.register_buffer("enc_pos", sinusoids(dims["n_audio_ctx"], da).float())
        self.enc_blocks = torch.nn.ModuleList([Block(da, dims["n_audio_head"], False)
                                               for _ in range(dims["n_audio_layer"])])
        self.ln_post = torch.nn.LayerNorm(da)
        self.tok = torch.nn.Embedding(dims["n_vocab"], d)
        self.dec_pos = torch.nn.Parameter(torch.zeros(dims["n_text_ctx"], d))
        self.dec_blocks = torch.nn.ModuleList([Block(d, dims["n_text_head"], True)
                                               for _ in range(dims["n_text_layer"])])
        self.ln = torch.nn.LayerNorm(d)

    def encode(self, mel):
        """mel [B][n_mels][2 * n_audio_ctx] -> [B][n_audio_ctx][d]"""
        if self.training:
            x = F.gelu(_conv_k3(self.conv1, mel))
            x = F.gelu(_conv_k3(self.conv2, x)).transpose(1, 2)
        else:
            x = F.gelu(self.conv1(mel))
            x = F.gelu(self.conv2(x)).transpose(1, 2)
        x = x + self.enc_pos[: x.shape[1]].to(x.dtype)
        for b in self.enc_blocks:
            x = b(x)
        return self.ln_post(x)

    def decode(self, tokens, xa):
        """tokens [B][T] (from position 0) -> logits [B][T][n_vocab]"""
        x = self.tok(tokens) + self.dec_pos[: tokens.shape[1]]
        for b in self.dec_blocks:
            x = b(x, xa=xa, causal=True)
        x = self.ln(x)
        return x @ self.tok.weight.T

    def ggml_tensors(self):
        """(name, float64 numpy array in PyTorch layout) in whisper.cpp's names."""
        sd = {k: v.detach().to(torch.float64).numpy() for k, v in self.state_dict().items()}
        out = [("encoder.positional_embedding", sd["enc_pos"]),
               ("encoder.conv1.weight", sd["conv1.weight"]),
               ("encoder.conv1.bias", sd["conv1.bias"].reshape(-1, 1)),
               ("encoder.conv2.weight", sd["conv2.weight"]),
               ("encoder.conv2.bias", sd["conv2.bias"].reshape(-1, 1))]

        def block(prefix, src, cross):
            parts = [("attn_ln", "attn_ln"), ("attn.query", "attn.query"), ("attn.key", "attn.key"),
                     ("attn.value", "attn.value"), ("attn.out", "attn.out")]
            if cross:
                parts += [("cross_attn_ln", "cross_attn_ln"), ("cross_attn.query", "cross_attn.query"),
                          ("cross_attn.key", "cross_attn.key"), ("cross_attn.value", "cross_attn.value"),
                          ("cross_attn.out", "cross_attn.out")]
            parts += [("mlp_ln", "mlp_ln"), ("mlp.0", "mlp.0"), ("mlp.2", "mlp.2")]
            for dst, s in parts:
                for suf in ("weight", "bias"):
                    key = f"{src}.{s}.{suf}"
                    if key in sd:
                        out.append((f"{prefix}.{dst}.{suf}", sd[key]))

        for i in range(self.dims["n_audio_layer"]):
            block(f"encoder.blocks.{i}", f"enc_blocks.{i}", False)
        out += [("encoder.ln_post.weight", sd["ln_post.weight"]), ("encoder.ln_post.bias", sd["ln_post.bias"])]
        out += [("decoder.positional_embedding", sd["dec_pos"]), ("decoder.token_embedding.weight", sd["tok.weight"])]
        for i in range(self.dims["n_text_layer"]):
            block(f"decoder.blocks.{i}", f"dec_blocks.{i}", True)
        out += [("decoder.ln.weight", sd["ln.weight"]), ("decoder.ln.bias", sd["ln.bias"])]
        return out


# ------------------------------------------------------------------- vocab

class Vocab:
    """Token layout: text tokens 0..n_text-1, then eot, sot, n_langs language
    tokens, translate, transcribe, solm, prev, nosp, notimestamps, and 1501
    timestamps (0.00 s .. 30.00 s by 0.02 s) from ts_begin on."""

    def __init__(self, texts, n_langs):
        self.texts = list(texts)  # bytes
        self.n_text = len(self.texts)
        self.n_langs = n_langs
        self.eot = self.n_text
        self.sot = self.eot + 1
        self.lang0 = self.sot + 1
        self.translate = self.lang0 + n_langs
        self.transcribe = self.translate + 1
        self.solm = self.translate + 2
        self.prev = self.translate + 3
        self.nosp = self.translate + 4
        self.notimestamps = self.translate + 5
        self.ts_begin = self.translate + 6
        self.n_vocab = self.ts_begin + 1501
        self.multilingual = n_langs > 1 and self.n_vocab != 51864
        self.index = {}
        for i, t in enumerate(self.texts):
            if t:
                self.index.setdefault(t, i)

    def encode(self, text):
        """Greedy longest match over the text tokens, word by word (a word is
        its leading spaces and the run of characters up to the next space)."""
        data = text.encode("utf-8")
        out, i = [], 0
        maxlen = max(len(t) for t in self.texts)
        while i < len(data):
            for n in range(min(maxlen, len(data) - i), 0, -1):
                tid = self.index.get(data[i:i + n])
                if tid is not None:
                    out.append(tid)
                    i += n
                    break
            else:
                raise ValueError(f"no token for byte {data[i]}")
        return out

    def decode(self, ids):
        return b"".join(self.texts[i] for i in ids if i < self.n_text).decode("utf-8", "replace")


# ---------------------------------------------------------------- decoding

NON_SPEECH = list('"#()*+/:;<=>@[\\]^_`{|}~\u300c\u300d\u300e\u300f') + \
    "<< >> <<< >>> -- --- -( -[ (' (\" (( )) ((( ))) [[ ]] {{ }} \u266a\u266a \u266a\u266a\u266a".split()
MISC = list("\u2669\u266a\u266b\u266c\u266d\u266e\u266f")


def non_speech(vocab):
    """Text tokens of symbols that are not speech: a symbol (or space +
    symbol) that is one token, the first token of a musical sign, and the
    word-initial " -" and " '"."""
    out = set()

    def first(s):
        try:
            return vocab.encode(s)
        except ValueError:
            return []
    for s in (" -", " '"):
        t = first(s)
        if t:
            out.add(t[0])
    for sym in NON_SPEECH + MISC:
        for s in (sym, " " + sym):
            t = first(s)
            if t and (len(t) == 1 or sym in MISC):
                out.add(t[0])
    return sorted(out)


def suppressed(vocab, timestamps):
    """Ids never sampled while transcribing: the control tokens, the
    non-speech symbols (and notimestamps when timestamps are on)."""
    s = [vocab.sot, vocab.solm, vocab.prev, vocab.nosp, vocab.translate, vocab.transcribe]
    s += list(range(vocab.lang0, vocab.lang0 + vocab.n_langs))
    s += non_speech(vocab)
    if timestamps:
        s.append(vocab.notimestamps)
    return s


def apply_rules(vocab, logits, seq, n_prompt, timestamps, max_initial_ts=50, n_audio_ctx=1500):
    """logits (float64 numpy, n_vocab) for the next token after seq (whose
    first n_prompt tokens are the prompt).  Returns the masked logits.
    Timestamps past the window (n_audio_ctx positions of 0.02 s) are barred."""
    lg = logits.copy()
    lg[suppressed(vocab, timestamps)] = -np.inf
    lg[vocab.ts_begin + n_audio_ctx + 1:] = -np.inf
    gen = seq[n_prompt:]
    if not gen:  # a transcript does not begin with a blank or end at once
        lg[vocab.eot] = -np.inf
        sp = vocab.index.get(b" ")
        if sp is not None:
            lg[sp] = -np.inf
    if not timestamps:
        lg[vocab.ts_begin:] = -np.inf
        return lg
    tb = vocab.ts_begin
    last_ts = len(gen) >= 1 and gen[-1] >= tb
    pen_ts = len(gen) < 2 or gen[-2] >= tb
    if last_ts:
        if pen_ts:
            lg[tb:] = -np.inf
        else:
            lg[:vocab.eot] = -np.inf
    ts = [t for t in gen if t >= tb]
    if ts:
        floor = ts[-1] if (last_ts and not pen_ts) else ts[-1] + 1
        lg[tb:floor] = -np.inf
    if not gen:
        lg[:tb] = -np.inf
        lg[tb + max_initial_ts + 1:] = -np.inf
    m = lg.max()
    lp = lg - (m + np.log(np.sum(np.exp(lg - m))))
    tsl = lp[tb:]
    tm = tsl.max()
    ts_lp = tm + np.log(np.sum(np.exp(tsl - tm))) if np.isfinite(tm) else -np.inf
    if ts_lp > lp[:tb].max():
        lg[:tb] = -np.inf
    return lg


def decode_greedy(model, vocab, xa, prompt, n_max, timestamps):
    """Greedy tokens after prompt (at most n_max, eot not included) and the
    smallest margin between the best and second-best masked logit."""
    seq = list(prompt)
    margin = np.inf
    out = []
    with torch.no_grad():
        for _ in range(n_max):
            lg = model.decode(torch.tensor([seq]), xa)[0, -1].double().numpy()
            lg = apply_rules(vocab, lg, seq, len(prompt), timestamps, n_audio_ctx=model.dims["n_audio_ctx"])
            top = np.sort(lg[np.isfinite(lg)])[::-1]
            if len(top) > 1:
                margin = min(margin, top[0] - top[1])
            t = int(np.argmax(lg))
            if t == vocab.eot:
                break
            seq.append(t)
            out.append(t)
    return out, margin


# ---------------------------------------------------------------- ggml file

def _f16(a):
    return np.asarray(a, dtype=np.float64).astype(np.float16)


def q8_0(a):
    """ggml's reference Q8_0 of rows of a (float64): per 32 values an F16
    scale d = amax / 127 and int8 q = round(x / d)."""
    x = np.asarray(a, dtype=np.float32).reshape(-1, 32)
    amax = np.abs(x).max(axis=1)
    d = amax / 127.0
    inv = np.where(d > 0, 1.0 / np.where(d > 0, d, 1), 0.0).astype(np.float32)
    q = np.round(x * inv[:, None]).astype(np.int8)  # numpy rounds half to even, ggml away from zero
    ties = np.abs(x * inv[:, None] - np.trunc(x * inv[:, None])) == 0.5
    q = np.where(ties, (np.trunc(x * inv[:, None]) + np.sign(x)).astype(np.int8), q)
    dh = d.astype("<f2")
    out = np.empty((x.shape[0], 34), dtype=np.uint8)
    out[:, :2] = dh.view(np.uint8).reshape(-1, 2)
    out[:, 2:] = q.view(np.uint8)
    return out.tobytes(), dequant_q8_0(dh, q)


def dequant_q8_0(dh, q):
    return (dh.astype(np.float32)[:, None] * q.astype(np.float32)).reshape(-1)


def tensor_type(name, shape, wtype):
    """The type whisper.cpp's converter and quantizer give a tensor: F32 for
    1-D tensors, conv biases and positional embeddings; convolution kernels
    F16 unless the file is F32; other matrices the file's weight type."""
    if wtype == T_F32 or len(shape) < 2 or name.endswith("conv1.bias") or name.endswith("conv2.bias") \
            or name.endswith("positional_embedding"):
        return T_F32
    if len(shape) == 3:
        return T_F16
    if wtype == T_Q8_0 and shape[-1] % 32 != 0:
        return T_F16
    return wtype


def write_ggml(path, dims, filters, vocab, tensors, wtype):
    """Writes a whisper.cpp GGML file.  Returns {name: float64 array as kiln
    will see it (after rounding to the stored type)}."""
    seen = {}
    ftype = FTYPE[wtype] + (1000 * QNT_VERSION if wtype == T_Q8_0 else 0)
    with open(path, "wb") as f:
        f.write(struct.pack("<I", GGML_MAGIC))
        for k in ("n_vocab", "n_audio_ctx", "n_audio_state", "n_audio_head", "n_audio_layer", "n_text_ctx",
                  "n_text_state", "n_text_head", "n_text_layer", "n_mels"):
            f.write(struct.pack("<i", dims[k]))
        f.write(struct.pack("<i", ftype))
        f.write(struct.pack("<ii", filters.shape[0], filters.shape[1]))
        f.write(np.asarray(filters, dtype="<f4").tobytes())
        f.write(struct.pack("<i", vocab.n_text))
        for t in vocab.texts:
            f.write(struct.pack("<i", len(t)) + t)
        for name, a in tensors:
            a = np.asarray(a, dtype=np.float64)
            tt = tensor_type(name, a.shape, wtype)
            nb = name.encode()
            f.write(struct.pack("<iii", a.ndim, len(nb), tt))
            for s in reversed(a.shape):
                f.write(struct.pack("<i", s))
            f.write(nb)
            if tt == T_F32:
                f.write(a.astype("<f4").tobytes())
                seen[name] = a.astype(np.float32).astype(np.float64)
            elif tt == T_F16:
                h = _f16(a)
                f.write(h.astype("<f2").tobytes())
                seen[name] = h.astype(np.float64)
            else:
                data, deq = q8_0(a)
                f.write(data)
                seen[name] = deq.astype(np.float64).reshape(a.shape)
    return seen


def load_weights(model, seen):
    """Copies the rounded weights write_ggml reported back into model."""
    names = dict(zip([n for n, _ in model.ggml_tensors()], model.state_dict().keys()))
    sd = model.state_dict()
    own = {}
    for gname, skey in _ggml_to_state(model).items():
        own[skey] = torch.from_numpy(seen[gname].reshape(sd[skey].shape)).to(sd[skey].dtype)
    del names
    model.load_state_dict(own, strict=True)


def _ggml_to_state(model):
    """{ggml name: state_dict key}, the inverse of ggml_tensors()."""
    m = {"encoder.positional_embedding": "enc_pos", "encoder.conv1.weight": "conv1.weight",
         "encoder.conv1.bias": "conv1.bias", "encoder.conv2.weight": "conv2.weight",
         "encoder.conv2.bias": "conv2.bias", "encoder.ln_post.weight": "ln_post.weight",
         "encoder.ln_post.bias": "ln_post.bias", "decoder.positional_embedding": "dec_pos",
         "decoder.token_embedding.weight": "tok.weight", "decoder.ln.weight": "ln.weight",
         "decoder.ln.bias": "ln.bias"}
    for k in model.state_dict().keys():
        if k.startswith("enc_blocks."):
            m["encoder.blocks." + k[len("enc_blocks."):]] = k
        elif k.startswith("dec_blocks."):
            m["decoder.blocks." + k[len("dec_blocks."):]] = k
    return m
