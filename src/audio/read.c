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

static int check_format(int32_t rate, int32_t channels, char *err, size_t errlen) {
    if (rate < 8000 || rate > 192000) {
        kb_errf(err, errlen, "sample rate %d Hz is outside 8000 to 192000 Hz", rate);
        return -1;
    }
    if (channels < 1 || channels > 8) {
        kb_errf(err, errlen, "%d channels (1 to 8 are accepted)", channels);
        return -1;
    }
    return 0;
}

/* Room for at least need more output samples, doubling. */
static int conv_reserve(conv *c, int64_t need, char *err, size_t errlen) {
    if (c->cap - c->n >= need) return 0;
    int64_t cap = c->cap * 2 > c->n + need ? c->cap * 2 : c->n + need;
    float *p = kb_realloc(c->out, (size_t)cap * sizeof *p);
    if (!p) {
        kb_errf(err, errlen, "out of memory for %lld samples at 16 kHz", (long long)cap);
        return -1;
    }
    c->out = p;
    c->cap = cap;
    return 0;
}

/* expect: the source frames the file declares (0: unknown), for one
 * allocation of the output when it is within the limit. */
static int conv_init(conv *c, int32_t rate, int32_t channels, double max_seconds, int64_t expect, char *err,
                     size_t errlen) {
    memset(c, 0, sizeof *c);
    if (check_format(rate, channels, err, errlen)) return -1;
    c->rate = rate;
    c->channels = channels;
    c->ratio = (double)KA_RATE / rate;
    c->max_seconds = max_seconds;
    c->max_frames = (int64_t)floor(max_seconds * rate);
    c->mono = kb_malloc(CHUNK_FRAMES * sizeof *c->mono);
    if (!c->mono) {
        kb_errf(err, errlen, "out of memory");
        return -1;
    }
    if (rate != KA_RATE) {
        int e = 0;
        c->src = src_new(SRC_SINC_MEDIUM_QUALITY, 1, &e);
        if (!c->src) {
            conv_free(c);
            kb_errf(err, errlen, "resampling from %d Hz failed: %s", rate, src_strerror(e));
            return -1;
        }
    }
    if (expect > 0 && expect <= c->max_frames &&
        conv_reserve(c, (int64_t)ceil((double)expect * c->ratio) + 16, err, errlen)) {
        conv_free(c);
        return -1;
    }
    return 0;
}

/* Resamples mono[0..k) (end: the last input) into the output. */
static int conv_resample(conv *c, int64_t k, int end, char *err, size_t errlen) {
    if (!c->src) {
        if (conv_reserve(c, k, err, errlen)) return -1;
        memcpy(c->out + c->n, c->mono, (size_t)k * sizeof *c->out);
        c->n += k;
        return 0;
    }
    const float *in = c->mono;
    for (;;) {
        if (conv_reserve(c, (int64_t)ceil((double)k * c->ratio) + 64, err, errlen)) return -1;
        SRC_DATA d = {0};
        d.data_in = in;
        d.input_frames = (long)k;
        d.data_out = c->out + c->n;
        d.output_frames = (long)(c->cap - c->n);
        d.src_ratio = c->ratio;
        d.end_of_input = end;
        int rc = src_process(c->src, &d);
        if (rc) {
            kb_errf(err, errlen, "resampling from %d Hz failed: %s", c->rate, src_strerror(rc));
            return -1;
        }
        in += d.input_frames_used;
        k -= d.input_frames_used;
        c->n += d.output_frames_gen;
        /* at the end the converter drains what it holds over several calls */
        if (k == 0 && (!end || d.output_frames_gen == 0)) return 0;
    }
}

/* Takes frames of interleaved pcm: checks, downmixes, resamples.  Returns
 * -2 past the limit. */
static int conv_push(conv *c, const float *pcm, int64_t frames, char *err, size_t errlen) {
    const int ch = c->channels;
    while (frames > 0) {
        int64_t k = frames < CHUNK_FRAMES ? frames : CHUNK_FRAMES;
        if (c->frames + k > c->max_frames) {
            kb_errf(err, errlen, "audio is longer than the limit of %.0f s (stopped after decoding %.1f s)",
                    c->max_seconds, (double)c->max_frames / c->rate);
            return -2;
        }
        for (int64_t f = 0; f < k; f++) {
            double s = 0;
            for (int i = 0; i < ch; i++) {
                float v = pcm[f * ch + i];
                if (!isfinite(v)) {
                    int64_t at = (c->frames + f) * ch + i;
                    kb_errf(err, errlen, "sample %lld (frame %lld, channel %d) is not finite", (long long)at,
                            (long long)(c->frames + f), i);
                    return -1;
                }
                s += v;
            }
            c->mono[f] = (float)(s / ch);
        }
        if (conv_resample(c, k, 0, err, errlen)) return -1;
        c->frames += k;
        pcm += k * ch;
        frames -= k;
    }
    return 0;
}

/* Drains the converter and hands the output over (NULL when empty). */
static int conv_finish(conv *c, float **out, int64_t *n, char *err, size_t errlen) {
    if (c->src && c->frames > 0 && conv_resample(c, 0, 1, err, errlen)) return -1;
    if (c->n == 0) {
        free(c->out);
    } else if (c->n < c->cap) {
        float *p = kb_realloc(c->out, (size_t)c->n * sizeof *p);
        c->out = p ? p : c->out; /* a failed shrink keeps the larger block */
    }
    *out = c->n ? c->out : NULL;
    *n = c->n;
    c->out = NULL;
    c->n = c->cap = 0;
    return 0;
}

int ka_to_mono16k(const float *pcm, int64_t n_samples, int32_t rate, int32_t channels, float **out, int64_t *n,
                  char *err, size_t errlen) {
    *out = NULL;
    *n = 0;
    if (check_format(rate, channels, err, errlen)) return -1;
    if (n_samples < 0 || (n_samples > 0 && !pcm)) {
        kb_errf(err, errlen, "no samples given");
        return -1;
    }
    if (n_samples % channels) {
        kb_errf(err, errlen, "%lld samples are not whole frames of %d channels", (long long)n_samples, channels);
        return -1;
    }
    int64_t frames = n_samples / channels;
    if ((double)frames / rate > KA_MAX_SECONDS) {
        kb_errf(err, errlen, "%.0f s of audio is more than %.0f s", (double)frames / rate, KA_MAX_SECONDS);
        return -1;
    }
    /* every sample is checked before anything is allocated */
    for (int64_t i = 0; i < n_samples; i++)
        if (!isfinite(pcm[i])) {
            kb_errf(err, errlen, "sample %lld (frame %lld, channel %lld) is not finite", (long long)i,
                    (long long)(i / channels), (long long)(i % channels));
            return -1;
        }
    if (frames == 0) return 0;
    conv c;
    if (conv_init(&c, rate, channels, KA_MAX_SECONDS, frames, err, errlen)) return -1;
    int rc = conv_push(&c, pcm, frames, err, errlen);
    if (rc == 0) rc = conv_finish(&c, out, n, err, errlen);
    conv_free(&c);
    return rc ? -1 : 0;
}

/* Decodes every frame of an open file chunk by chunk. */
static int read_all(SNDFILE *sf, const SF_INFO *si, double max_seconds, float **out, int64_t *n, ka_info *info,
                    char *err, size_t errlen) {
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
    if (check_format(si->samplerate, si->channels, err, errlen)) return -1;
    if (!(max_seconds > 0) || max_seconds > KA_MAX_SECONDS) max_seconds = KA_MAX_SECONDS;
    /* a length the header declares is refused before any of it is decoded;
     * the decoding counts too, for files whose header says less */
    int64_t declared = si->frames > 0 && si->frames < SF_COUNT_MAX ? (int64_t)si->frames : 0;
    if ((double)declared / si->samplerate > max_seconds) {
        kb_errf(err, errlen, "audio of %.1f s is longer than the limit of %.0f s", (double)declared / si->samplerate,
                max_seconds);
        return -2;
    }
    conv c;
    if (conv_init(&c, si->samplerate, si->channels, max_seconds, declared, err, errlen)) return -1;
    float *buf = kb_malloc((size_t)CHUNK_FRAMES * (size_t)si->channels * sizeof *buf);
    if (!buf) {
        conv_free(&c);
        kb_errf(err, errlen, "out of memory");
        return -1;
    }
    int rc = 0;
    for (;;) {
        sf_count_t k = sf_readf_float(sf, buf, CHUNK_FRAMES);
        if (k <= 0) break;
        if ((rc = conv_push(&c, buf, (int64_t)k, err, errlen)) != 0) break;
    }
    free(buf);
    if (rc == 0 && sf_error(sf) != SF_ERR_NO_ERROR) {
        kb_errf(err, errlen, "decoding failed: %s", sf_strerror(sf));
        rc = -1;
    }
    if (info) info->frames = c.frames;
    if (rc == 0) rc = conv_finish(&c, out, n, err, errlen);
    conv_free(&c);
    return rc;
}

int ka_read_file(const char *path, double max_seconds, float **out, int64_t *n, ka_info *info, char *err,
                 size_t errlen) {
    *out = NULL;
    *n = 0;
    SF_INFO si = {0};
    SNDFILE *sf = sf_open(path, SFM_READ, &si);
    if (!sf) {
        FILE *f = fopen(path, "rb");
        if (!f)
            kb_errf(err, errlen, "%s: cannot open", path);
        else {
            int empty = fgetc(f) == EOF;
            fclose(f);
            if (empty)
                kb_errf(err, errlen, "%s: empty file", path);
            else
                kb_errf(err, errlen, "%s: not an audio file kiln can read (%s)", path, sf_strerror(NULL));
        }
        return -1;
    }
    char e2[256] = "";
    int rc = read_all(sf, &si, max_seconds, out, n, info, e2, sizeof e2);
    sf_close(sf);
    if (rc) kb_errf(err, errlen, "%s: %s", path, e2);
    return rc;
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

int ka_read_memory(const void *data, size_t len, double max_seconds, float **out, int64_t *n, ka_info *info, char *err,
                   size_t errlen) {
    *out = NULL;
    *n = 0;
    if (!data || len == 0) {
        kb_errf(err, errlen, "empty audio file");
        return -1;
    }
    vmem v = {data, (sf_count_t)len, 0};
    SF_VIRTUAL_IO io = {v_len, v_seek, v_read, v_write, v_tell};
    SF_INFO si = {0};
    SNDFILE *sf = sf_open_virtual(&io, SFM_READ, &si, &v);
    if (!sf) {
        kb_errf(err, errlen, "not an audio file kiln can read (%s)", sf_strerror(NULL));
        return -1;
    }
    int rc = read_all(sf, &si, max_seconds, out, n, info, err, errlen);
    sf_close(sf);
    return rc;
}
