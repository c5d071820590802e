/* Audio files through libsndfile, conversion to 16 kHz mono through
 * libsamplerate. */
#include "audio/audio.h"

#include "base/base.h"

#include <math.h>
#include <samplerate.h>
#include <sndfile.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { CHUNK_FRAMES = 16384 };
#define MAX_SECONDS (24.0 * 3600.0) /* a day of audio at most */

int ka_to_mono16k(const float *pcm, int64_t n_samples, int32_t rate, int32_t channels, float **out, int64_t *n,
                  char *err, size_t errlen) {
    *out = NULL;
    *n = 0;
    if (rate < 8000 || rate > 192000) {
        kb_errf(err, errlen, "sample rate %d Hz is outside 8000 to 192000 Hz", rate);
        return -1;
    }
    if (channels < 1 || channels > 8) {
        kb_errf(err, errlen, "%d channels (1 to 8 are accepted)", channels);
        return -1;
    }
    if (n_samples < 0 || (n_samples > 0 && !pcm)) {
        kb_errf(err, errlen, "no samples given");
        return -1;
    }
    if (n_samples % channels) {
        kb_errf(err, errlen, "%lld samples are not whole frames of %d channels", (long long)n_samples, channels);
        return -1;
    }
    int64_t frames = n_samples / channels;
    if ((double)frames / rate > MAX_SECONDS) {
        kb_errf(err, errlen, "%.0f s of audio is more than %.0f s", (double)frames / rate, MAX_SECONDS);
        return -1;
    }
    for (int64_t i = 0; i < n_samples; i++)
        if (!isfinite(pcm[i])) {
            kb_errf(err, errlen, "sample %lld (frame %lld, channel %lld) is not finite", (long long)i,
                    (long long)(i / channels), (long long)(i % channels));
            return -1;
        }
    if (frames == 0) return 0;
    float *mono = malloc((size_t)frames * sizeof *mono);
    if (!mono) {
        kb_errf(err, errlen, "out of memory for %lld frames", (long long)frames);
        return -1;
    }
    for (int64_t f = 0; f < frames; f++) {
        double s = 0;
        for (int c = 0; c < channels; c++) s += pcm[f * channels + c];
        mono[f] = (float)(s / channels);
    }
    if (rate == KA_RATE) {
        *out = mono;
        *n = frames;
        return 0;
    }
    double ratio = (double)KA_RATE / rate;
    int64_t cap = (int64_t)ceil((double)frames * ratio) + 16;
    float *res = malloc((size_t)cap * sizeof *res);
    if (!res) {
        free(mono);
        kb_errf(err, errlen, "out of memory for %lld resampled frames", (long long)cap);
        return -1;
    }
    SRC_DATA d = {0};
    d.data_in = mono;
    d.input_frames = (long)frames;
    d.data_out = res;
    d.output_frames = (long)cap;
    d.src_ratio = ratio;
    int rc = src_simple(&d, SRC_SINC_MEDIUM_QUALITY, 1);
    free(mono);
    if (rc) {
        free(res);
        kb_errf(err, errlen, "resampling from %d Hz failed: %s", rate, src_strerror(rc));
        return -1;
    }
    *out = res;
    *n = d.output_frames_gen;
    return 0;
}

/* Reads every frame of an open file and converts it. */
static int read_all(SNDFILE *sf, const SF_INFO *si, float **out, int64_t *n, ka_info *info, char *err, size_t errlen) {
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
    if (si->samplerate < 8000 || si->samplerate > 192000) {
        kb_errf(err, errlen, "sample rate %d Hz is outside 8000 to 192000 Hz", si->samplerate);
        return -1;
    }
    if (si->channels < 1 || si->channels > 8) {
        kb_errf(err, errlen, "%d channels (1 to 8 are accepted)", si->channels);
        return -1;
    }
    size_t cap = CHUNK_FRAMES, got = 0;
    float *buf = malloc(cap * (size_t)si->channels * sizeof *buf);
    if (!buf) {
        kb_errf(err, errlen, "out of memory");
        return -1;
    }
    for (;;) {
        if (cap - got < CHUNK_FRAMES) {
            if ((double)cap / si->samplerate > MAX_SECONDS) {
                free(buf);
                kb_errf(err, errlen, "more than %.0f s of audio", MAX_SECONDS);
                return -1;
            }
            float *nb = realloc(buf, cap * 2 * (size_t)si->channels * sizeof *buf);
            if (!nb) {
                free(buf);
                kb_errf(err, errlen, "out of memory");
                return -1;
            }
            buf = nb;
            cap *= 2;
        }
        sf_count_t k = sf_readf_float(sf, buf + got * (size_t)si->channels, CHUNK_FRAMES);
        if (k < 0) k = 0;
        if (k == 0) break;
        got += (size_t)k;
    }
    if (sf_error(sf) != SF_ERR_NO_ERROR) {
        free(buf);
        kb_errf(err, errlen, "decoding failed: %s", sf_strerror(sf));
        return -1;
    }
    if (info) info->frames = (int64_t)got;
    int rc = ka_to_mono16k(buf, (int64_t)got * si->channels, si->samplerate, si->channels, out, n, err, errlen);
    free(buf);
    return rc;
}

int ka_read_file(const char *path, float **out, int64_t *n, ka_info *info, char *err, size_t errlen) {
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
    int rc = read_all(sf, &si, out, n, info, e2, sizeof e2);
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

int ka_read_memory(const void *data, size_t len, float **out, int64_t *n, ka_info *info, char *err, size_t errlen) {
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
    int rc = read_all(sf, &si, out, n, info, err, errlen);
    sf_close(sf);
    return rc;
}
