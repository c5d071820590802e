/* Transcripts as text, SubRip, WebVTT and JSON (OpenAI's json and
 * verbose_json shapes). */
#include "whisper/whisper.h"

#include "base/base.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct buf {
    char *p;
    size_t n, cap;
    int fail;
} buf;

static void put(buf *b, const char *s, size_t n) {
    if (b->fail) return;
    if (b->n + n + 1 > b->cap) {
        size_t cap = (b->n + n + 1) * 2;
        char *p = realloc(b->p, cap);
        if (!p) {
            b->fail = 1;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}

static void puts_(buf *b, const char *s) { put(b, s, strlen(s)); }

/* The text without leading and trailing blanks. */
static void put_trim(buf *b, const char *s) {
    while (*s == ' ' || *s == '\t' || *s == '\n') s++;
    size_t n = strlen(s);
    while (n && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\n')) n--;
    put(b, s, n);
}

static void put_time(buf *b, double t, char sep) {
    if (!(t >= 0)) t = 0;
    long ms = lround(t * 1000.0);
    char s[32];
    snprintf(s, sizeof s, "%02ld:%02ld:%02ld%c%03ld", ms / 3600000, ms / 60000 % 60, ms / 1000 % 60, sep, ms % 1000);
    puts_(b, s);
}

static json_t *verbose(const kiln_transcript *t, const char *task) {
    json_t *segs = json_array();
    for (int i = 0; i < t->n_segments; i++) {
        const kiln_segment *g = &t->segments[i];
        json_t *toks = json_array();
        for (int k = 0; k < g->n_tokens; k++) json_array_append_new(toks, json_integer(g->tokens[k]));
        json_array_append_new(segs,
                              json_pack("{s:i, s:i, s:f, s:f, s:s, s:o, s:f, s:f, s:f, s:f}", "id", i, "seek",
                                        (int)lround(g->start * 100.0), "start", g->start, "end", g->end, "text",
                                        g->text, "tokens", toks, "temperature", (double)g->temperature, "avg_logprob",
                                        (double)g->avg_logprob, "compression_ratio", (double)g->compression_ratio,
                                        "no_speech_prob", (double)g->no_speech_prob));
    }
    const char *lang = t->language ? t->language : "";
    int li = whisper_lang_find(lang);
    return json_pack("{s:s, s:s, s:f, s:s, s:o}", "task", task, "language", li >= 0 ? whisper_lang_name(li) : lang,
                     "duration", t->duration, "text", t->text, "segments", segs);
}

char *kiln_transcript_format(const kiln_transcript *t, const char *format, int translated) {
    if (!t || !format) {
        base_fail(KILN_ERR_INVALID_ARG, "no transcript or format");
        return NULL;
    }
    buf b = {0};
    if (!strcmp(format, "txt") || !strcmp(format, "text")) {
        put_trim(&b, t->text);
        puts_(&b, "\n");
    } else if (!strcmp(format, "srt") || !strcmp(format, "vtt")) {
        int vtt = format[0] == 'v';
        if (vtt) puts_(&b, "WEBVTT\n\n");
        for (int i = 0; i < t->n_segments; i++) {
            char idx[32];
            if (!vtt) {
                snprintf(idx, sizeof idx, "%d\n", i + 1);
                puts_(&b, idx);
            }
            put_time(&b, t->segments[i].start, vtt ? '.' : ',');
            puts_(&b, " --> ");
            put_time(&b, t->segments[i].end, vtt ? '.' : ',');
            puts_(&b, "\n");
            put_trim(&b, t->segments[i].text);
            puts_(&b, "\n\n");
        }
    } else if (!strcmp(format, "json") || !strcmp(format, "verbose_json")) {
        json_t *o = format[0] == 'j' ? json_pack("{s:s}", "text", t->text)
                                     : verbose(t, translated ? "translate" : "transcribe");
        char *s = o ? json_dumps(o, JSON_COMPACT | JSON_ENSURE_ASCII | JSON_REAL_PRECISION(7)) : NULL;
        json_decref(o);
        if (!s) {
            base_fail(KILN_ERR_NOMEM, "out of memory");
            return NULL;
        }
        puts_(&b, s);
        puts_(&b, "\n");
        free(s);
    } else {
        base_fail(KILN_ERR_INVALID_ARG, "unknown transcript format '%s' (txt, srt, vtt, json, verbose_json)", format);
        return NULL;
    }
    if (b.fail || !b.p) {
        free(b.p);
        if (!b.fail) return strdup("");
        base_fail(KILN_ERR_NOMEM, "out of memory");
        return NULL;
    }
    return b.p;
}
