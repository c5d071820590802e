/* Whisper: the GGML loader and its validation, audio input, the log-mel
 * spectrogram, encoder and decoder against the float64 PyTorch reference
 * (tests/gen_whisper.py), greedy token sequences, the public transcription
 * API and its option checks, the temperature fallback's choice. */
#include "kiln.h"

#include "audio/audio.h"
#include "whisper/whisper.h"

#include "testutil.h"

#include <jansson.h>
#include <math.h>
#include <samplerate.h>
#include <sndfile.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#define DIR "data/whisper/"

static float *read_f32(const char *path, size_t *n) {
    size_t len = 0;
    char *b = t_read_file(path, &len);
    if (!b) return NULL;
    *n = len / 4;
    return (float *)b;
}

static int json_ints(json_t *a, int32_t *out, int cap) {
    int n = (int)json_array_size(a);
    for (int i = 0; i < n && i < cap; i++) out[i] = (int32_t)json_integer_value(json_array_get(a, i));
    return n;
}

static void tmp_path(char *buf, size_t cap, const char *name) {
    const char *d = getenv("TMPDIR");
    snprintf(buf, cap, "%s/kiln-whisper-%d-%s", d && *d ? d : "/tmp", (int)getpid(), name);
}

static int write_bytes(const char *path, const void *p, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    size_t w = fwrite(p, 1, n, f);
    fclose(f);
    return w == n ? 0 : -1;
}

/* ---------------------------------------------------------------- loader */

static void expect_reject(const char *what, const void *data, size_t n, const char *needle) {
    char path[512];
    tmp_path(path, sizeof path, "bad.bin");
    CHECK(write_bytes(path, data, n) == 0);
    whisper_model *m;
    CHECKF(whisper_load(path, &m) != KILN_OK && m == NULL, "%s was accepted", what);
    const char *err = kiln_last_error();
    CHECKF(strchr(err, '\n') == NULL && err[0], "%s: error '%s' is not one line", what, err);
    if (needle) CHECKF(strstr(err, needle) != NULL, "%s: error '%s' lacks '%s'", what, err, needle);
    whisper_free(m);
    unlink(path);
}

static void test_loader_rejects(void) {
    size_t n = 0;
    uint8_t *f = (uint8_t *)t_read_file(DIR "tiny-en-f16.bin", &n);
    CHECK(f != NULL);
    if (!f) return;
    uint8_t *c = malloc(n);
    /* every truncation point a few bytes into each region, and many more */
    size_t cuts[] = {0, 2, 4, 20, 48, 50, 60, 4000, 110000, n / 2, n - 100, n - 1};
    for (size_t i = 0; i < sizeof cuts / sizeof *cuts; i++) {
        if (cuts[i] >= n) continue;
        char what[64];
        snprintf(what, sizeof what, "truncation at %zu", cuts[i]);
        expect_reject(what, f, cuts[i], NULL);
    }
    memcpy(c, f, n);
    c[0] ^= 1;
    expect_reject("bad magic", c, n, "magic");
    memcpy(c, f, n);
    int32_t v = 7;
    memcpy(c + 4 + 4 * 3, &v, 4); /* n_audio_head 7: the width is not a multiple of it */
    expect_reject("odd width", c, n, "width");
    memcpy(c, f, n);
    v = 99;
    memcpy(c + 4 + 4 * 10, &v, 4); /* ftype */
    expect_reject("ftype", c, n, "ftype");
    memcpy(c, f, n);
    v = 79;
    memcpy(c + 4 + 4 * 11, &v, 4); /* filter rows */
    expect_reject("filters", c, n, "mel filters");
    /* the first tensor: its type, then its first dimension */
    int32_t nm, nf;
    memcpy(&nm, f + 48, 4);
    memcpy(&nf, f + 52, 4);
    size_t off = 56 + (size_t)nm * (size_t)nf * 4;
    int32_t nt;
    memcpy(&nt, f + off, 4);
    off += 4;
    for (int i = 0; i < nt; i++) {
        int32_t len;
        memcpy(&len, f + off, 4);
        off += 4 + (size_t)len;
    }
    memcpy(c, f, n);
    v = 33;
    memcpy(c + off + 8, &v, 4);
    expect_reject("tensor type", c, n, "bad header");
    memcpy(c, f, n);
    int32_t ne0;
    memcpy(&ne0, f + off + 12, 4);
    ne0 += 1;
    memcpy(c + off + 12, &ne0, 4);
    expect_reject("tensor shape", c, n, NULL);
    memcpy(c, f, n);
    c[off + 12 + 4 * 2] ^= 0x20; /* a letter of the first tensor's name */
    expect_reject("renamed tensor", c, n, "tensor");
    /* a second vocabulary count larger than the file */
    memcpy(c, f, n);
    v = 1 << 28;
    memcpy(c + 56 + (size_t)nm * (size_t)nf * 4, &v, 4);
    expect_reject("vocab count", c, n, "vocabulary");
    /* a file that is not GGML at all */
    expect_reject("text", "hello world, not a model", 24, "magic");
    whisper_model *none;
    CHECK(whisper_load("no/such/file.bin", &none) == KILN_ERR_IO && none == NULL && kiln_last_error()[0]);
    kiln_stt *s = NULL;
    CHECK(kiln_stt_load(DIR "clip16k.wav", &s) == KILN_ERR_FORMAT && s == NULL);
    free(c);
    free(f);
}

/* ------------------------------------------------------------- parity */

typedef struct fx {
    json_t *j;
    whisper_model *m;
    float *pcm;
    int64_t n;
} fx;

static int fx_open(fx *x, const char *name) {
    char p[256];
    memset(x, 0, sizeof *x);
    snprintf(p, sizeof p, DIR "%s.json", name);
    json_error_t je;
    x->j = json_load_file(p, 0, &je);
    CHECKF(x->j != NULL, "%s: %s", p, je.text);
    if (!x->j) return -1;
    snprintf(p, sizeof p, DIR "%s", json_string_value(json_object_get(x->j, "model")));
    CHECKF(whisper_load(p, &x->m) == KILN_OK, "%s", kiln_last_error());
    snprintf(p, sizeof p, DIR "%s", json_string_value(json_object_get(x->j, "clip")));
    audio_info info;
    CHECKF(audio_read_file(p, 0, &x->pcm, &x->n, &info) == KILN_OK, "%s", kiln_last_error());
    return x->m && x->pcm ? 0 : -1;
}

static void fx_close(fx *x) {
    json_decref(x->j);
    whisper_free(x->m);
    free(x->pcm);
}

static double jnum(json_t *o, const char *k) { return json_number_value(json_object_get(o, k)); }

static void test_parity(const char *name) {
    fx x;
    if (fx_open(&x, name)) {
        fx_close(&x);
        return;
    }
    json_t *dims = json_object_get(x.j, "dims"), *tol = json_object_get(x.j, "tolerance");
    const whisper_model *m = x.m;
    CHECK(m->hp.n_vocab == (int)jnum(dims, "n_vocab"));
    CHECK(m->hp.n_audio_ctx == (int)jnum(dims, "n_audio_ctx"));
    CHECK(m->vocab.n_text == (int)jnum(x.j, "n_text"));
    CHECK(m->vocab.eot == (int)jnum(x.j, "eot") && m->vocab.sot == (int)jnum(x.j, "sot"));
    CHECK(m->vocab.ts_begin == (int)jnum(x.j, "ts_begin"));
    CHECK(m->vocab.multilingual == json_is_true(json_object_get(x.j, "multilingual")));
    CHECK(m->wtype == (int)jnum(x.j, "wtype"));
    /* log-mel */
    const int A = m->hp.n_audio_ctx;
    float *mel = NULL;
    int64_t nf = 0;
    thread_pool *pool = thread_pool_new(2);
    CHECK(audio_log_mel(x.pcm, x.n, 2 * A * AUDIO_HOP, m->filters, m->hp.n_mels, pool, &mel, &nf) == KILN_OK);
    thread_pool_free(pool);
    CHECK(nf == (int64_t)jnum(x.j, "n_frames"));
    char p[256];
    snprintf(p, sizeof p, DIR "%s.mel.f32", name);
    size_t nr = 0;
    float *rmel = read_f32(p, &nr);
    const int nref = (int)jnum(x.j, "n_ref_frames");
    const double floor = jnum(x.j, "mel_floor");
    double mel_err = 0;
    if (mel && rmel && nr == (size_t)m->hp.n_mels * (size_t)nref) {
        for (int c = 0; c < m->hp.n_mels; c++)
            for (int64_t t = 0; t < nf; t++) {
                double want = t < nref ? rmel[(size_t)c * nref + (size_t)t] : floor;
                double e = fabs(mel[(size_t)c * (size_t)nf + (size_t)t] - want);
                if (e > mel_err) mel_err = e;
            }
    } else
        CHECK(0);
    CHECKF(mel_err <= jnum(tol, "mel"), "%s: mel error %.3g", name, mel_err);
    /* encoder */
    whisper_state *s = whisper_state_new(m, 2, 2);
    CHECK(s != NULL);
    whisper_encode(s, mel, (size_t)nf);
    snprintf(p, sizeof p, DIR "%s.enc.f32", name);
    float *renc = read_f32(p, &nr);
    json_t *rows = json_object_get(x.j, "enc_rows");
    const int d = m->hp.n_audio_state;
    double enc_err = 0;
    CHECK(renc && nr == json_array_size(rows) * (size_t)d);
    for (size_t i = 0; renc && i < json_array_size(rows); i++) {
        int r = (int)json_integer_value(json_array_get(rows, i));
        for (int k = 0; k < d; k++) {
            double e = fabs(whisper_encoder_out(s)[(size_t)r * d + k] - renc[i * d + k]);
            if (e > enc_err) enc_err = e;
        }
    }
    enc_err /= jnum(x.j, "enc_abs_max");
    CHECKF(enc_err <= jnum(tol, "enc_rel"), "%s: encoder relative error %.3g", name, enc_err);
    /* first-step logits */
    int32_t prompt[8];
    int np = json_ints(json_object_get(x.j, "prompt"), prompt, 8);
    const float *lg = whisper_decode(s, 0, prompt, np);
    snprintf(p, sizeof p, DIR "%s.logits.f32", name);
    float *rlg = read_f32(p, &nr);
    double lg_err = 0;
    CHECK(lg && rlg && nr == (size_t)m->hp.n_vocab);
    for (int i = 0; lg && rlg && i < m->hp.n_vocab; i++) {
        double e = fabs(lg[i] - rlg[i]);
        if (e > lg_err) lg_err = e;
    }
    lg_err /= jnum(x.j, "logits_abs_max");
    CHECKF(lg_err <= jnum(tol, "logits_rel"), "%s: logits relative error %.3g", name, lg_err);
    printf("%s: mel %.2g, encoder %.2g, logits %.2g (relative to the largest value)\n", name, mel_err, enc_err, lg_err);
    whisper_state_free(s);
    /* greedy token sequences, with and without timestamps, and after a
     * previous-text prompt */
    for (int mode = 0; mode < 3; mode++) {
        kiln_transcribe_params tp = kiln_transcribe_default_params();
        tp.beam_size = 1;
        tp.temperature_inc = 0.0f;
        tp.language = "en";
        tp.n_threads = 2;
        tp.timestamps = mode != 1;
        if (mode == 2) tp.initial_prompt = json_string_value(json_object_get(x.j, "prev_text"));
        const char *key = mode == 0 ? "greedy_timestamps" : mode == 1 ? "greedy_notimestamps" : "greedy_prev";
        int32_t want[256], got[256];
        int nw = json_ints(json_object_get(x.j, key), want, 256);
        int ng = whisper_decode_first(m, x.pcm, x.n, &tp, got, 256, NULL);
        int same = ng == nw;
        for (int i = 0; same && i < ng; i++) same = got[i] == want[i];
        CHECKF(same, "%s %s: %d tokens, reference %d", name, key, ng, nw);
        if (!same)
            for (int i = 0; i < (ng > nw ? ng : nw); i++)
                fprintf(stderr, "  %d: %d %d\n", i, i < ng ? got[i] : -1, i < nw ? want[i] : -1);
    }
    free(mel);
    free(rmel);
    free(renc);
    free(rlg);
    fx_close(&x);
}

/* ---------------------------------------------------------------- audio */

static double rms(const float *x, int64_t n) {
    double s = 0;
    for (int64_t i = 0; i < n; i++) s += (double)x[i] * x[i];
    return n ? sqrt(s / n) : 0;
}

static void test_audio(void) {
    float *a = NULL, *b = NULL;
    int64_t na = 0, nb = 0;
    char fmt[64];
    CHECK(kiln_audio_load(DIR "clip16k.wav", &a, &na, fmt) == KILN_OK && na == 48000);
    CHECK(strstr(fmt, "WAV") != NULL);
    /* 44.1 kHz stereo int16 of the same signal: (x + x / 2) / 2 after resampling */
    CHECK(kiln_audio_load(DIR "clip44k.wav", &b, &nb, NULL) == KILN_OK);
    CHECKF(nb >= 47990 && nb <= 48010, "resampled to %lld samples", (long long)nb);
    if (a && b && nb > 47000) {
        double e = 0;
        for (int64_t i = 200; i < 47000; i++) e += fabs(b[i] - 0.75 * a[i]);
        e /= 46800;
        CHECKF(e < 0.01 * rms(a, na) * 4, "resampled signal differs by %.4f on average", e);
    }
    /* read in chunks, the same samples as libsamplerate's one-call
     * conversion of the whole downmixed file */
    SF_INFO ri = {0};
    SNDFILE *rf = sf_open(DIR "clip44k.wav", SFM_READ, &ri);
    CHECK(rf != NULL && ri.channels == 2 && ri.frames > 65536);
    if (rf && b) {
        float *st = malloc((size_t)ri.frames * 2 * sizeof *st), *mono = malloc((size_t)ri.frames * sizeof *mono);
        long cap = (long)ceil((double)ri.frames * 16000 / ri.samplerate) + 16;
        float *ref = malloc((size_t)cap * sizeof *ref);
        if (st && mono && ref && sf_readf_float(rf, st, ri.frames) == ri.frames) {
            for (sf_count_t f = 0; f < ri.frames; f++) mono[f] = (float)(((double)st[2 * f] + st[2 * f + 1]) / 2);
            SRC_DATA d = {0};
            d.data_in = mono;
            d.input_frames = (long)ri.frames;
            d.data_out = ref;
            d.output_frames = cap;
            d.src_ratio = 16000.0 / ri.samplerate;
            CHECK(src_simple(&d, SRC_SINC_MEDIUM_QUALITY, 1) == 0);
            CHECKF(d.output_frames_gen == nb, "%ld samples in one call, %lld in chunks", d.output_frames_gen,
                   (long long)nb);
            double worst = 0;
            for (long i = 0; i < d.output_frames_gen && i < nb; i++) worst = fmax(worst, fabs(ref[i] - b[i]));
            CHECKF(worst <= 1e-6, "chunked resampling differs by %g", worst);
        }
        free(st);
        free(mono);
        free(ref);
    }
    if (rf) sf_close(rf);
    /* FLAC, Ogg/Vorbis and MP3 written by libsndfile, read back */
    const struct {
        const char *ext;
        int fmt;
        double tol;
    } w[] = {
        {"flac", SF_FORMAT_FLAC | SF_FORMAT_PCM_16, 0.01},
        {"ogg", SF_FORMAT_OGG | SF_FORMAT_VORBIS, 0.25},
        {"mp3", SF_FORMAT_MPEG | SF_FORMAT_MPEG_LAYER_III, 0.25},
    };
    for (size_t i = 0; a && i < sizeof w / sizeof *w; i++) {
        char path[512], name[32];
        snprintf(name, sizeof name, "clip.%s", w[i].ext);
        tmp_path(path, sizeof path, name);
        SF_INFO si = {0};
        si.samplerate = 16000;
        si.channels = 1;
        si.format = w[i].fmt;
        SNDFILE *sf = sf_open(path, SFM_WRITE, &si);
        CHECKF(sf != NULL, "libsndfile cannot write %s: %s", w[i].ext, sf_strerror(NULL));
        if (!sf) continue;
        sf_writef_float(sf, a, na);
        sf_close(sf);
        float *c = NULL;
        int64_t nc = 0;
        CHECKF(kiln_audio_load(path, &c, &nc, fmt) == KILN_OK, "%s: %s", w[i].ext, kiln_last_error());
        CHECKF(nc > 46000 && nc < 52000, "%s: %lld samples", w[i].ext, (long long)nc);
        double ra = rms(a, na), rc = rms(c, nc);
        CHECKF(fabs(rc - ra) <= w[i].tol * ra, "%s: rms %.4f vs %.4f", w[i].ext, rc, ra);
        kiln_audio_free(c);
        unlink(path);
    }
    /* errors */
    char path[512];
    tmp_path(path, sizeof path, "empty.wav");
    CHECK(write_bytes(path, "", 0) == 0);
    float *c = NULL;
    int64_t nc = 0;
    CHECK(kiln_audio_load(path, &c, &nc, NULL) == KILN_ERR_FORMAT && strstr(kiln_last_error(), "empty"));
    CHECK(write_bytes(path, "this is text, not sound", 23) == 0);
    CHECK(kiln_audio_load(path, &c, &nc, NULL) == KILN_ERR_FORMAT && strstr(kiln_last_error(), "not an audio"));
    CHECK(kiln_audio_load("no/such.wav", &c, &nc, NULL) == KILN_ERR_IO);
    /* a WAV with no frames is an empty clip, not an error */
    SF_INFO si = {0};
    si.samplerate = 16000;
    si.channels = 1;
    si.format = SF_FORMAT_WAV | SF_FORMAT_PCM_16;
    SNDFILE *sf = sf_open(path, SFM_WRITE, &si);
    CHECK(sf != NULL);
    if (sf) sf_close(sf);
    CHECK(kiln_audio_load(path, &c, &nc, NULL) == KILN_OK && nc == 0 && c == NULL);
    unlink(path);
    float pcm[6] = {0.1f, 0.2f, 0.3f, NAN, 0.5f, 0.6f}, copy[6];
    memcpy(copy, pcm, sizeof pcm);
    CHECK(kiln_audio_to_mono16k(pcm, 6, 16000, 2, &c, &nc) == KILN_ERR_INVALID_ARG &&
          strstr(kiln_last_error(), "not finite"));
    CHECK(kiln_audio_to_mono16k(pcm, 5, 16000, 2, &c, &nc) == KILN_ERR_INVALID_ARG &&
          strstr(kiln_last_error(), "whole frames"));
    CHECK(kiln_audio_to_mono16k(pcm, 2, 4000, 1, &c, &nc) == KILN_ERR_INVALID_ARG);
    CHECK(kiln_audio_to_mono16k(pcm, 2, 16000, 9, &c, &nc) == KILN_ERR_INVALID_ARG);
    CHECK(kiln_audio_to_mono16k(pcm, 3, 48000, 3, &c, &nc) == KILN_OK && nc <= 1);
    kiln_audio_free(c);
    CHECK(memcmp(pcm, copy, sizeof pcm) == 0); /* inputs are never written */
    kiln_audio_free(a);
    kiln_audio_free(b);
}

/* ------------------------------------------------------ audio bombs */

/* Writes seconds of silence at rate Hz in channels channels as FLAC: a few
 * hundred KB that decode to rate * channels * 4 bytes a second. */
static int write_silence(const char *path, int rate, int channels, double seconds) {
    SF_INFO si = {0};
    si.samplerate = rate;
    si.channels = channels;
    si.format = SF_FORMAT_FLAC | SF_FORMAT_PCM_16;
    SNDFILE *sf = sf_open(path, SFM_WRITE, &si);
    if (!sf) return -1;
    enum { BLOCK = 65536 };
    float *z = calloc((size_t)BLOCK * (size_t)channels, sizeof *z);
    int64_t left = (int64_t)(seconds * rate);
    while (z && left > 0) {
        sf_count_t k = left < BLOCK ? left : BLOCK;
        if (sf_writef_float(sf, z, k) != k) break;
        left -= k;
    }
    free(z);
    sf_close(sf);
    return left == 0 ? 0 : -1;
}

/* Peak resident memory (KB) a child adds while it loads path with no limit
 * beyond the default; -1 when the load fails. */
static long load_peak_kb(const char *path, int64_t *n_out) {
    int fd[2];
    if (pipe(fd)) return -1;
    pid_t pid = fork();
    if (pid == 0) {
        close(fd[0]);
        struct rusage ru;
        getrusage(RUSAGE_SELF, &ru);
        long before = ru.ru_maxrss;
        float *pcm = NULL;
        int64_t n = 0;
        long msg[2] = {-1, 0};
        if (kiln_audio_load(path, &pcm, &n, NULL) == KILN_OK) {
            getrusage(RUSAGE_SELF, &ru);
            msg[0] = ru.ru_maxrss - before;
            msg[1] = (long)n;
        }
        kiln_audio_free(pcm);
        ssize_t w = write(fd[1], msg, sizeof msg);
        _exit(w == (ssize_t)sizeof msg ? 0 : 1);
    }
    close(fd[1]);
    long msg[2] = {-1, 0};
    ssize_t r = pid > 0 ? read(fd[0], msg, sizeof msg) : -1;
    close(fd[0]);
    int status = 0;
    if (pid > 0) waitpid(pid, &status, 0);
    if (r != (ssize_t)sizeof msg || !WIFEXITED(status) || WEXITSTATUS(status) != 0) return -1;
    *n_out = msg[1];
    return msg[0];
}

static void test_audio_bombs(void) {
    char path[512];
    tmp_path(path, sizeof path, "bomb.flac");
    /* 60 s at 192 kHz in 8 channels: 368 MB of float samples, 3.8 MB at
     * 16 kHz mono */
    CHECK(write_silence(path, 192000, 8, 60.0) == 0);
    size_t len = 0;
    char *file = t_read_file(path, &len);
    CHECKF(file && len < (2u << 20), "the bomb is %zu bytes", len);
    /* a limit below the declared length: refused before decoding */
    float *pcm = NULL;
    int64_t n = 0;
    CHECK(audio_read_file(path, 30, &pcm, &n, NULL) == KILN_ERR_UNSUPPORTED && pcm == NULL);
    const char *err = kiln_last_error();
    CHECKF(strstr(err, "60.0 s") && strstr(err, "30 s"), "'%s' names neither the length nor the limit", err);
    CHECK(kiln_audio_decode_max(file, len, 30, &pcm, &n, NULL) == KILN_ERR_UNSUPPORTED && pcm == NULL);
    CHECKF(strstr(kiln_last_error(), "limit of 30 s"), "%s", kiln_last_error());
    CHECK(kiln_audio_load_max(path, 30, &pcm, &n, NULL) == KILN_ERR_UNSUPPORTED);
    /* a FLAC whose header does not say its length (STREAMINFO's 36-bit
     * total samples zeroed): the limit holds while decoding */
    if (file && len > 26 && !memcmp(file, "fLaC", 4)) {
        char *blind = malloc(len);
        if (blind) {
            memcpy(blind, file, len);
            blind[21] = (char)(blind[21] & 0xf0);
            memset(blind + 22, 0, 4);
            kiln_status st = kiln_audio_decode_max(blind, len, 30, &pcm, &n, NULL);
            CHECKF(st == KILN_ERR_UNSUPPORTED && strstr(kiln_last_error(), "limit of 30 s (stopped after"), "%s: %s",
                   kiln_status_str(st), kiln_last_error());
            kiln_audio_free(pcm);
            pcm = NULL;
            free(blind);
        }
    }
    /* within the limit: the whole clip, in memory of the order of its 16
     * kHz output plus a chunk, not of the decoded source */
    int64_t got = 0;
    long kb = load_peak_kb(path, &got);
    CHECKF(kb >= 0 && got >= 60 * 16000 - 16 && got <= 60 * 16000 + 16, "loaded %lld samples (peak +%ld KB)",
           (long long)got, kb);
    CHECKF(kb >= 0 && kb < 96 * 1024, "loading the bomb took %ld KB more (368 MB decoded at once)", kb);
    printf("audio bomb: %zu bytes of FLAC, 60 s at 192 kHz x 8: read within a peak of +%ld KB\n", len, kb);
    free(file);
    unlink(path);
}

/* ------------------------------------------------------------ transcribe */

static int count_progress(double done, double total, void *u) {
    int *n = u;
    (*n)++;
    return done > total + 1e-9; /* never cancels; times stay within the clip */
}

static void test_transcribe(void) {
    kiln_stt *s = NULL;
    CHECK(kiln_stt_load(DIR "tiny-en-f16.bin", &s) == KILN_OK);
    kiln_stt *ml = NULL;
    CHECK(kiln_stt_load(DIR "tiny-ml-f32.bin", &ml) == KILN_OK);
    if (!s || !ml) return;
    kiln_stt_info info;
    kiln_stt_get_info(s, &info);
    CHECK(!info.multilingual && !info.can_translate && info.n_mels == 128 && !strcmp(info.ftype, "F16"));
    CHECK(fabs(info.window_seconds - 2.0) < 1e-9);
    kiln_stt_get_info(ml, &info);
    CHECK(info.multilingual && info.can_translate && info.n_langs == 99 && !strcmp(info.size, "custom"));
    /* option checks happen before any work */
    kiln_transcribe_params p = kiln_transcribe_default_params();
    p.language = "xx";
    CHECK(kiln_transcribe_check(ml, &p) == KILN_ERR_INVALID_ARG && strstr(kiln_last_error(), "unknown language"));
    p.language = "German";
    CHECK(kiln_transcribe_check(ml, &p) == KILN_OK);
    CHECK(kiln_transcribe_check(s, &p) == KILN_ERR_INVALID_ARG && strstr(kiln_last_error(), "English-only"));
    p.language = NULL;
    p.translate = 1;
    CHECK(kiln_transcribe_check(s, &p) == KILN_ERR_INVALID_ARG);
    CHECK(kiln_transcribe_check(ml, &p) == KILN_OK);
    p.translate = 0;
    p.beam_size = 99;
    CHECK(kiln_transcribe_check(s, &p) == KILN_ERR_INVALID_ARG);
    kiln_transcript *t = NULL;
    CHECK(kiln_transcribe(s, NULL, 0, &p, &t) == KILN_ERR_INVALID_ARG && t == NULL);
    /* an empty clip: an empty transcript */
    p = kiln_transcribe_default_params();
    CHECK(kiln_transcribe(s, NULL, 0, &p, &t) == KILN_OK && t && t->n_segments == 0 && !strcmp(t->text, ""));
    kiln_transcript_free(t);
    /* 5 s through 2-s windows, beam search with fallback, timestamps */
    float *pcm = NULL;
    int64_t n = 0;
    CHECK(kiln_audio_load(DIR "clip5s.wav", &pcm, &n, NULL) == KILN_OK);
    int calls = 0;
    p.progress = count_progress;
    p.user = &calls;
    p.n_threads = 2;
    t = NULL;
    CHECK(kiln_transcribe(s, pcm, n, &p, &t) == KILN_OK && t);
    if (t) {
        CHECKF(t->n_windows >= 3, "%d windows", t->n_windows);
        CHECK(calls == t->n_windows);
        CHECK(!strcmp(t->language, "en") && fabs(t->duration - 5.0) < 1e-9);
        double last = 0;
        size_t joined = 0;
        for (int i = 0; i < t->n_segments; i++) {
            const kiln_segment *g = &t->segments[i];
            CHECKF(g->start >= last - 1e-9 && g->end >= g->start && g->end <= 5.0 + 1e-9,
                   "segment %d: %.2f .. %.2f after %.2f", i, g->start, g->end, last);
            last = g->start;
            joined += strlen(g->text);
        }
        CHECK(joined == strlen(t->text));
    }
    kiln_transcript_free(t);
    /* multilingual: the language is detected (one of the model's) */
    p = kiln_transcribe_default_params();
    p.beam_size = 2;
    p.best_of = 2;
    p.n_threads = 2;
    t = NULL;
    CHECK(kiln_transcribe(ml, pcm, 16000, &p, &t) == KILN_OK && t && t->language[0]);
    if (t) CHECK(t->language_prob > 0.0f && t->language_prob <= 1.0f);
    kiln_transcript_free(t);
    kiln_audio_free(pcm);
    kiln_stt_free(s);
    kiln_stt_free(ml);
}

/* ------------------------------------------------------------ fallback */

/* A log-probability threshold of 0 fails every try, so the ladder tries
 * 0, 0.2 ... 1.0 and must keep the best try: a text under the compression
 * threshold before one over it, then the higher score (log-probability per
 * token).  Each temperature asked for alone replays its try (the draws
 * depend on the seed, the window and the temperature only). */
static void test_fallback(void) {
    whisper_model *m;
    CHECKF(whisper_load(DIR "tiny-en-f16.bin", &m) == KILN_OK, "%s", kiln_last_error());
    float *pcm = NULL;
    int64_t n = 0;
    CHECK(kiln_audio_load(DIR "clip5s.wav", &pcm, &n, NULL) == KILN_OK);
    if (!m || !pcm) {
        whisper_free(m);
        kiln_audio_free(pcm);
        return;
    }
    if (n > 24000) n = 24000; /* 1.5 s: one 2-s window */
    kiln_transcribe_params p = kiln_transcribe_default_params();
    p.language = "en";
    p.n_threads = 2;
    p.seed = 7;
    p.beam_size = 2; /* 2 of each keep the test short under the sanitizers */
    p.best_of = 2;
    p.logprob_threshold = 0.0f;
    p.no_speech_threshold = -1e10f; /* off */
    enum { NT = 6, CAP = 64 };
    int32_t tok[NT][CAP], kept[CAP];
    int nt[NT], best = -1, best_ok = 0;
    whisper_try one[NT], got;
    for (int i = 0; i < NT; i++) {
        kiln_transcribe_params q = p;
        q.temperature = 0.2f * (float)i;
        q.temperature_inc = 0.0f;
        nt[i] = whisper_decode_first(m, pcm, n, &q, tok[i], CAP, &one[i]);
        CHECKF(nt[i] >= 0 && nt[i] < CAP && one[i].n_fallbacks == 0 && one[i].temperature == q.temperature &&
                   one[i].avg_logprob < 0.0f,
               "try %d: %d tokens, %d fallbacks, temperature %g", i, nt[i], one[i].n_fallbacks,
               (double)one[i].temperature);
        int ok = one[i].compression_ratio <= p.compression_ratio_threshold;
        if (best < 0 || ok > best_ok || (ok == best_ok && one[i].score > one[best].score)) {
            best = i;
            best_ok = ok;
        }
    }
    int nk = whisper_decode_first(m, pcm, n, &p, kept, CAP, &got);
    CHECKF(got.n_fallbacks == NT - 1, "%d fallbacks", got.n_fallbacks);
    CHECKF(got.temperature == one[best].temperature && got.score == one[best].score && nk == nt[best] &&
               !memcmp(kept, tok[best], (size_t)nk * sizeof *kept),
           "kept the try at %g (score %g), the best is at %g (score %g)", (double)got.temperature, (double)got.score,
           (double)one[best].temperature, (double)one[best].score);
    /* here the best try is not the last, whose text differs */
    CHECKF(best < NT - 1 && (nt[NT - 1] != nt[best] || memcmp(tok[NT - 1], tok[best], (size_t)nk * sizeof *kept)),
           "the best try is at %g", (double)one[best].temperature);
    printf("fallback: every try fails; kept the one at temperature %.1f (score %.3f; at 1.0: %.3f)\n",
           (double)got.temperature, (double)got.score, (double)one[NT - 1].score);
    /* a try that passes ends the ladder */
    p.logprob_threshold = -1e10f;
    nk = whisper_decode_first(m, pcm, n, &p, kept, CAP, &got);
    CHECK(nk == nt[0] && got.n_fallbacks == 0 && got.temperature == 0.0f);
    /* a silent window (every no-speech probability is above 0) ends it too,
     * and its text is dropped */
    p.logprob_threshold = 0.0f;
    p.no_speech_threshold = 0.0f;
    nk = whisper_decode_first(m, pcm, n, &p, kept, CAP, &got);
    CHECK(nk >= 0 && got.n_fallbacks == 0 && got.temperature == 0.0f && got.no_speech > 0.0f);
    kiln_transcript *t = NULL;
    CHECK(whisper_transcribe(m, pcm, n, &p, &t) == KILN_OK && t && t->n_segments == 0 && !strcmp(t->text, "") &&
          t->n_fallbacks == 0);
    kiln_transcript_free(t);
    whisper_free(m);
    kiln_audio_free(pcm);
}

int main(void) {
    test_loader_rejects();
    test_parity("tiny-ml-f32");
    test_parity("tiny-en-f16");
    test_parity("tiny-en-q8_0");
    test_audio();
    test_audio_bombs();
    test_transcribe();
    test_fallback();
    return t_done();
}
