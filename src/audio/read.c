/* Audio files through libsndfile, conversion to 16 kHz mono through
 * libsamplerate, one chunk of the source at a time: what is held is the
 * 16 kHz output and a chunk, whatever the source's rate and channels. */
#include "audio/audio.h"

#include "base/base.h"

#include <math.h>
#include <samplerate.h>
#include <sndfile.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { CHUNK_FRAMES = 65536 }; /* source frames decoded, checked and downmixed at once */

/* Downmix and resampling state over a stream of interleaved chunks. */
typedef struct conv {
    int32_t rate, channels;
    SRC_STATE *src; /* NULL at 16 kHz */
    double ratio;
    float *mono; /* [CHUNK_FRAMES] one chunk averaged over channels */
    float *out;  /* [cap] 16 kHz samples, n of them written */
    int64_t n, cap;
    int64_t frames;     /* source frames taken so far */
    int64_t max_frames; /* source frames allowed */
    double max_seconds;
} conv;

static void conv_free(conv *c) {
    if (c->src) src_delete(c->src);
    free(c->mono);
    free(c->out);
    memset(c, 0, sizeof *c);
}

static kiln_status check_format(int32_t rate, int32_t channels) {
    if (rate < 8000 || rate > 192000) {
        return base_fail(KILN_ERR_INVALID_ARG, "sample rate %d Hz is outside 8000 to 192000 Hz", rate);
    }
    if (channels < 1 || channels > 8) {
        return base_fail(KILN_ERR_INVALID_ARG, "%d channels (1 to 8 are accepted)", channels);
    }
    return KILN_OK;
}

/* Room for at least need more output samples, doubling. */
static kiln_status conv_reserve(conv *c, int64_t need) {
    if (c->cap - c->n >= need) return KILN_OK;
    int64_t cap = c->cap * 2 > c->n + need ? c->cap * 2 : c->n + need;
    float *p = base_realloc(c->out, (size_t)cap * sizeof *p);
    if (!p) { return base_fail(KILN_ERR_NOMEM, "out of memory for %lld samples at 16 kHz", (long long)cap); }
    c->out = p;
    c->cap = cap;
    return KILN_OK;
}

/* expect: the source frames the file declares (0: unknown), for one
 * allocation of the output when it is within the limit. */
static kiln_status conv_init(conv *c, int32_t rate, int32_t channels, double max_seconds, int64_t expect) {
    memset(c, 0, sizeof *c);
    kiln_status st = check_format(rate, channels);
    if (st) return st;
    c->rate = rate;
    c->channels = channels;
    c->ratio = (double)AUDIO_RATE / rate;
    c->max_seconds = max_seconds;
    c->max_frames = (int64_t)floor(max_seconds * rate);
    c->mono = base_malloc(CHUNK_FRAMES * sizeof *c->mono);
    if (!c->mono) { return base_fail(KILN_ERR_NOMEM, "out of memory"); }
    if (rate != AUDIO_RATE) {
        int e = 0;
        c->src = src_new(SRC_SINC_MEDIUM_QUALITY, 1, &e);
        if (!c->src) {
            conv_free(c);
            return base_fail(KILN_ERR_INVALID_ARG, "resampling from %d Hz failed: %s", rate, src_strerror(e));
        }
    }
    if (expect > 0 && expect <= c->max_frames &&
        (st = conv_reserve(c, (int64_t)ceil((double)expect * c->ratio) + 16))) {
        conv_free(c);
        return st;
    }
    return KILN_OK;
}

/* Resamples mono[0..k) (end: the last input) into the output. */
static kiln_status conv_resample(conv *c, int64_t k, int end) {
    kiln_status st;
    if (!c->src) {
        if ((st = conv_reserve(c, k))) return st;
        memcpy(c->out + c->n, c->mono, (size_t)k * sizeof *c->out);
        c->n += k;
        return KILN_OK;
    }
    const float *in = c->mono;
    for (;;) {
        if ((st = conv_reserve(c, (int64_t)ceil((double)k * c->ratio) + 64))) return st;
        SRC_DATA d = {0};
        d.data_in = in;
        d.input_frames = (long)k;
        d.data_out = c->out + c->n;
        d.output_frames = (long)(c->cap - c->n);
        d.src_ratio = c->ratio;
        d.end_of_input = end;
        int rc = src_process(c->src, &d);
        if (rc) {
            return base_fail(KILN_ERR_INVALID_ARG, "resampling from %d Hz failed: %s", c->rate, src_strerror(rc));
        }
        in += d.input_frames_used;
        k -= d.input_frames_used;
        c->n += d.output_frames_gen;
        /* at the end the converter drains what it holds over several calls */
        if (k == 0 && (!end || d.output_frames_gen == 0)) return KILN_OK;
    }
}

/* Takes frames of interleaved pcm: checks, downmixes, resamples
 * (KILN_ERR_UNSUPPORTED past the limit). */
static kiln_status conv_push(conv *c, const float *pcm, int64_t frames) {
    const int ch = c->channels;
    while (frames > 0) {
        int64_t k = frames < CHUNK_FRAMES ? frames : CHUNK_FRAMES;
        if (c->frames + k > c->max_frames) {
            return base_fail(KILN_ERR_UNSUPPORTED,
                             "audio is longer than the limit of %.0f s (stopped after decoding %.1f s)", c->max_seconds,
                             (double)c->max_frames / c->rate);
        }
        for (int64_t f = 0; f < k; f++) {
            double s = 0;
            for (int i = 0; i < ch; i++) {
                float v = pcm[f * ch + i];
                if (!isfinite(v)) {
                    int64_t at = (c->frames + f) * ch + i;
                    return base_fail(KILN_ERR_INVALID_ARG, "sample %lld (frame %lld, channel %d) is not finite",
                                     (long long)at, (long long)(c->frames + f), i);
                }
                s += v;
            }
            c->mono[f] = (float)(s / ch);
        }
        kiln_status st = conv_resample(c, k, 0);
        if (st) return st;
        c->frames += k;
        pcm += k * ch;
        frames -= k;
    }
    return KILN_OK;
}

/* Drains the converter and hands the output over (NULL when empty). */
static kiln_status conv_finish(conv *c, float **out, int64_t *n) {
    kiln_status st = c->src && c->frames > 0 ? conv_resample(c, 0, 1) : KILN_OK;
    if (st) return st;
    if (c->n == 0) {
        free(c->out);
    } else if (c->n < c->cap) {
        float *p = base_realloc(c->out, (size_t)c->n * sizeof *p);
        c->out = p ? p : c->out; /* a failed shrink keeps the larger block */
    }
    *out = c->n ? c->out : NULL;
    *n = c->n;
    c->out = NULL;
    c->n = c->cap = 0;
    return KILN_OK;
}

kiln_status audio_to_mono16k(const float *pcm, int64_t n_samples, int32_t rate, int32_t channels, float **out,
                             int64_t *n) {
    *out = NULL;
    *n = 0;
    kiln_status st = check_format(rate, channels);
    if (st) return st;
    if (n_samples < 0 || (n_samples > 0 && !pcm)) { return base_fail(KILN_ERR_INVALID_ARG, "no samples given"); }
    if (n_samples % channels) {
        return base_fail(KILN_ERR_INVALID_ARG, "%lld samples are not whole frames of %d channels", (long long)n_samples,
                         channels);
    }
    int64_t frames = n_samples / channels;
    if ((double)frames / rate > AUDIO_MAX_SECONDS) {
        return base_fail(KILN_ERR_INVALID_ARG, "%.0f s of audio is more than %.0f s", (double)frames / rate,
                         AUDIO_MAX_SECONDS);
    }
    /* every sample is checked before anything is allocated */
    for (int64_t i = 0; i < n_samples; i++)
        if (!isfinite(pcm[i])) {
            return base_fail(KILN_ERR_INVALID_ARG, "sample %lld (frame %lld, channel %lld) is not finite", (long long)i,
                             (long long)(i / channels), (long long)(i % channels));
        }
    if (frames == 0) return KILN_OK;
    conv c;
    if ((st = conv_init(&c, rate, channels, AUDIO_MAX_SECONDS, frames))) return st;
    st = conv_push(&c, pcm, frames);
    if (!st) st = conv_finish(&c, out, n);
    conv_free(&c);
    return st;
}

/* Decodes every frame of an open file chunk by chunk. */
static kiln_status read_all(SNDFILE *sf, const SF_INFO *si, double max_seconds, float **out, int64_t *n,
                            audio_info *info) {
    if (info) {
        memset(info, 0, sizeof *info);
        info->rate = si->samplerate;
        info->channels = si->channels;
        SF_FORMAT_INFO fi = {0}, sub = {0};
        fi.format = si->format & SF_FORMAT_TYPEMASK;
        sub.format = si->format & SF_FORMAT_SUBMASK;
        const char *a = sf_command(sf, SFC_GET_FORMAT_INFO, &fi, sizeof fi) == 0 && fi.name ? fi.name : "audio";
        const char *b = sf_command(NULL, SFC_GET_FORMAT_INFO, &sub, sizeof sub) == 0 && sub.name ? sub.name : "";
        snprintf(info->format, sizeof info->format, "%s%s%s", a, *b ? " / " : "", b);
    }
    kiln_status st = check_format(si->samplerate, si->channels);
    if (st) return st;
    if (!(max_seconds > 0) || max_seconds > AUDIO_MAX_SECONDS) max_seconds = AUDIO_MAX_SECONDS;
    /* a length the header declares is refused before any of it is decoded;
     * the decoding counts too, for files whose header says less */
    int64_t declared = si->frames > 0 && si->frames < SF_COUNT_MAX ? (int64_t)si->frames : 0;
    if ((double)declared / si->samplerate > max_seconds) {
        return base_fail(KILN_ERR_UNSUPPORTED, "audio of %.1f s is longer than the limit of %.0f s",
                         (double)declared / si->samplerate, max_seconds);
    }
    conv c;
    if ((st = conv_init(&c, si->samplerate, si->channels, max_seconds, declared))) return st;
    float *buf = base_malloc((size_t)CHUNK_FRAMES * (size_t)si->channels * sizeof *buf);
    if (!buf) {
        conv_free(&c);
        return base_fail(KILN_ERR_NOMEM, "out of memory");
    }
    for (;;) {
        sf_count_t k = sf_readf_float(sf, buf, CHUNK_FRAMES);
        if (k <= 0) break;
        if ((st = conv_push(&c, buf, (int64_t)k))) break;
    }
    free(buf);
    if (!st && sf_error(sf) != SF_ERR_NO_ERROR) st = base_fail(KILN_ERR_FORMAT, "decoding failed: %s", sf_strerror(sf));
    if (info) info->frames = c.frames;
    if (!st) st = conv_finish(&c, out, n);
    conv_free(&c);
    return st;
}

kiln_status audio_read_file(const char *path, double max_seconds, float **out, int64_t *n, audio_info *info) {
    *out = NULL;
    *n = 0;
    SF_INFO si = {0};
    SNDFILE *sf = sf_open(path, SFM_READ, &si);
    if (!sf) {
        FILE *f = fopen(path, "rb");
        if (!f) return base_fail(KILN_ERR_IO, "%s: cannot open", path);
        int empty = fgetc(f) == EOF;
        fclose(f);
        if (empty) return base_fail(KILN_ERR_FORMAT, "%s: empty file", path);
        return base_fail(KILN_ERR_FORMAT, "%s: not an audio file kiln can read (%s)", path, sf_strerror(NULL));
    }
    kiln_status st = read_all(sf, &si, max_seconds, out, n, info);
    sf_close(sf);
    if (st) return base_fail(st, "%s: %s", path, kiln_last_error());
    return KILN_OK;
}

/* A read-only memory file for libsndfile's virtual I/O. */
typedef struct vmem {
    const unsigned char *p;
    sf_count_t len, pos;
} vmem;

static sf_count_t v_len(void *u) { return ((vmem *)u)->len; }
static sf_count_t v_seek(sf_count_t off, int whence, void *u) {
    vmem *v = u;
    sf_count_t to = whence == SEEK_SET ? off : whence == SEEK_CUR ? v->pos + off : v->len + off;
    if (to < 0 || to > v->len) return -1;
    return v->pos = to;
}
static sf_count_t v_read(void *dst, sf_count_t n, void *u) {
    vmem *v = u;
    if (n > v->len - v->pos) n = v->len - v->pos;
    memcpy(dst, v->p + v->pos, (size_t)n);
    v->pos += n;
    return n;
}
static sf_count_t v_write(const void *src, sf_count_t n, void *u) { return 0; }
static sf_count_t v_tell(void *u) { return ((vmem *)u)->pos; }

kiln_status audio_read_memory(const void *data, size_t len, double max_seconds, float **out, int64_t *n,
                              audio_info *info) {
    *out = NULL;
    *n = 0;
    if (!data || len == 0) { return base_fail(KILN_ERR_INVALID_ARG, "empty audio file"); }
    vmem v = {data, (sf_count_t)len, 0};
    SF_VIRTUAL_IO io = {v_len, v_seek, v_read, v_write, v_tell};
    SF_INFO si = {0};
    SNDFILE *sf = sf_open_virtual(&io, SFM_READ, &si, &v);
    if (!sf) { return base_fail(KILN_ERR_FORMAT, "not an audio file kiln can read (%s)", sf_strerror(NULL)); }
    kiln_status st = read_all(sf, &si, max_seconds, out, n, info);
    sf_close(sf);
    return st;
}
