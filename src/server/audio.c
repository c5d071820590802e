/* POST /v1/audio/transcriptions and /v1/audio/translations (OpenAI's audio
 * API): a multipart form (file, model, language, prompt, response_format,
 * temperature, timestamp_granularities[]) parsed by libmicrohttpd's post
 * processor over the buffered body, transcribed by a speech-to-text engine
 * (kiln_engine, family stt) kept resident per model.  The engine's gate
 * orders concurrent requests; a client that disconnects fires the
 * request's cancel token, which frees the gate at the next decoding step.
 *
 * Models: the request's "model" names a -m model or an installed store
 * name; "whisper-1" (the OpenAI client's usual value) or no model picks
 * the first Whisper model given with -m. */
#include "server/api.h"
#include "server/buf.h"
#include "server/log.h"
#include "server/models.h"
#include "server/reply.h"
#include "server/srv.h"

#include <math.h>
#include <microhttpd.h>
#include <stdlib.h>
#include <string.h>

#define MAX_FIELD 4096

typedef struct form {
    server_buf file;
    char filename[256];
    int have_file;
    char model[256], language[64], format[32], temperature[32];
    server_buf prompt;
    int word_granularity;
    int bad_field;
} form;

static void put_field(char *dst, size_t cap, const char *data, uint64_t off, size_t size) {
    size_t at = (size_t)off;
    if (at >= cap - 1) return;
    size_t n = size < cap - 1 - at ? size : cap - 1 - at;
    memcpy(dst + at, data, n);
    dst[at + n] = 0;
}

static enum MHD_Result field(void *cls, enum MHD_ValueKind kind, const char *key, const char *filename,
                             const char *ctype, const char *enc, const char *data, uint64_t off, size_t size) {
    form *f = cls;
    if (!key) return MHD_YES;
    if (!strcmp(key, "file")) {
        if (off == 0 && filename) snprintf(f->filename, sizeof f->filename, "%s", filename);
        server_buf_put(&f->file, data, size);
        f->have_file = 1;
    } else if (!strcmp(key, "model"))
        put_field(f->model, sizeof f->model, data, off, size);
    else if (!strcmp(key, "language"))
        put_field(f->language, sizeof f->language, data, off, size);
    else if (!strcmp(key, "response_format"))
        put_field(f->format, sizeof f->format, data, off, size);
    else if (!strcmp(key, "temperature"))
        put_field(f->temperature, sizeof f->temperature, data, off, size);
    else if (!strcmp(key, "prompt")) {
        if (f->prompt.len + size > MAX_FIELD)
            f->bad_field = 1;
        else
            server_buf_put(&f->prompt, data, size);
    } else if (!strcmp(key, "timestamp_granularities[]") || !strcmp(key, "timestamp_granularities")) {
        if (size >= 4 && !strncmp(data, "word", 4)) f->word_granularity = 1;
    }
    return MHD_YES;
}

/* The length of body up to the end of its closing boundary line; len when
 * the content type names no boundary (the post processor then judges the
 * body).  *closed is 0 when a boundary is named and the body lacks its
 * closing delimiter: a truncated form, whose last field the post processor
 * would cut short without a word. */
static size_t form_end(struct MHD_Connection *c, const char *body, size_t len, int *closed) {
    *closed = 1;
    const char *ct = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Type");
    const char *b = ct ? strstr(ct, "boundary=") : NULL;
    if (!b) return len;
    b += 9;
    char mark[256];
    size_t bl = strcspn(b, "; ");
    if (*b == '"') bl = strcspn(++b, "\"");
    if (bl == 0 || bl + 4 >= sizeof mark) return len;
    int n = snprintf(mark, sizeof mark, "--%.*s--", (int)bl, b);
    for (size_t i = len >= (size_t)n ? len - (size_t)n + 1 : 0; i-- > 0;)
        if (!memcmp(body + i, mark, (size_t)n)) {
            size_t end = i + (size_t)n;
            if (end + 2 <= len && !memcmp(body + end, "\r\n", 2)) end += 2;
            return end;
        }
    *closed = 0;
    return len;
}

/* -------------------------------------------------------------- route */

int server_audio_route(server_srv *s, struct MHD_Connection *c, const char *url, const char *body, size_t len) {
    int translate = !strcmp(url, "/v1/audio/translations");
    if (!translate && strcmp(url, "/v1/audio/transcriptions")) {
        char m[300];
        snprintf(m, sizeof m, "no route for POST %.200s", url);
        return server_send_error(c, 404, "not_found_error", m, NULL);
    }
    form f;
    memset(&f, 0, sizeof f);
    struct MHD_PostProcessor *pp = MHD_create_post_processor(c, 65536, field, &f);
    if (!pp)
        return server_send_error(c, 400, "invalid_request_error",
                                 "the request must be multipart/form-data (fields file, model, ...)", NULL);
    /* the post processor refuses bytes after the closing boundary (some
     * clients add a blank line there) and needs the line break after it */
    int closed;
    len = form_end(c, body, len, &closed);
    int ok = closed && MHD_post_process(pp, body, len) == MHD_YES;
    if (ok && (len < 2 || memcmp(body + len - 2, "\r\n", 2) != 0)) ok = MHD_post_process(pp, "\r\n", 2) == MHD_YES;
    MHD_destroy_post_processor(pp);
    int rc;
    char msg[600], model[4096];
    const char *fmt = f.format[0] ? f.format : "json";
    if (f.file.failed || f.prompt.failed) {
        rc = server_send_error(c, 500, "server_error", "out of memory reading the form", NULL);
        goto out;
    }
    if (!closed) {
        rc = server_send_error(c, 400, "invalid_request_error",
                               "the multipart form has no closing boundary (the body ends inside a field)", NULL);
        goto out;
    }
    if (!ok || f.bad_field) {
        rc = server_send_error(c, 400, "invalid_request_error", "the multipart form could not be read", NULL);
        goto out;
    }
    if (!f.have_file || f.file.len == 0) {
        rc = server_send_error(c, 400, "invalid_request_error", "the form has no (or an empty) 'file' field", "file");
        goto out;
    }
    if (strcmp(fmt, "json") && strcmp(fmt, "text") && strcmp(fmt, "srt") && strcmp(fmt, "vtt") &&
        strcmp(fmt, "verbose_json")) {
        snprintf(msg, sizeof msg, "response_format '%.40s' is not one of json, text, srt, vtt, verbose_json", fmt);
        rc = server_send_error(c, 400, "invalid_request_error", msg, "response_format");
        goto out;
    }
    if (f.word_granularity) {
        rc = server_send_error(c, 400, "invalid_request_error",
                               "timestamp_granularities 'word' is not supported (segment is)",
                               "timestamp_granularities");
        goto out;
    }
    kiln_transcribe_params p = kiln_transcribe_default_params();
    p.n_threads = s->cfg.n_threads;
    p.translate = translate;
    if (f.language[0] && !translate) p.language = f.language;
    if (f.prompt.len) {
        server_buf_put(&f.prompt, "", 1);
        p.initial_prompt = f.prompt.p;
    }
    if (f.temperature[0]) {
        char *end;
        double t = strtod(f.temperature, &end);
        if (*end || !(t >= 0.0 && t <= 1.0)) {
            rc = server_send_error(c, 400, "invalid_request_error", "temperature must be a number from 0 to 1",
                                   "temperature");
            goto out;
        }
        p.temperature = (float)t;
    }
    /* "whisper-1" (the OpenAI client's usual name) or none: the first -m
     * speech model */
    snprintf(model, sizeof model, "%s", f.model);
    if ((!model[0] || !strcmp(model, "whisper-1")) && server_model_first(s, KILN_ENGINE_STT, model, sizeof model)) {
        snprintf(msg, sizeof msg, "no speech-to-text model '%.200s' (serve one with -m ggml-*.bin)",
                 f.model[0] ? f.model : "whisper-1");
        rc = server_send_error(c, 404, "not_found_error", msg, "model");
        goto out;
    }
    int status;
    server_model *m = server_model_use(s, model, SERVER_TASK_TRANSCRIBE, NULL, &status, msg, sizeof msg);
    server_reqlog_model(server_reqlog_current(), m ? m->name : model);
    if (!m) {
        rc = server_send_error(c, status,
                               status == 404   ? "not_found_error"
                               : status == 400 ? "invalid_request_error"
                               : status == 503 ? "unavailable_error"
                                               : "server_error",
                               msg, "model");
        goto out;
    }
    kiln_engine *e = m->eng;
    float *pcm = NULL;
    int64_t n = 0;
    kiln_status dst = kiln_audio_decode_max(f.file.p, f.file.len, s->cfg.max_audio_seconds, &pcm, &n, NULL);
    if (dst != KILN_OK) {
        /* longer than --max-audio-seconds: 413, as the body limit */
        int code = dst == KILN_ERR_UNSUPPORTED ? 413 : dst == KILN_ERR_NOMEM ? 500 : 400;
        snprintf(msg, sizeof msg, "%s: %s%s", f.filename[0] ? f.filename : "file", kiln_last_error(),
                 code == 413 ? " (kiln serve --max-audio-seconds)" : "");
        server_model_done(m, NAN);
        rc = server_send_error(c, code, code == 500 ? "server_error" : "invalid_request_error", msg, "file");
        goto out;
    }
    kiln_audio_window w = {f.filename, pcm, n, 16000, 1};
    server_watch *wt = server_watch_start(c);
    kiln_transcript *t = NULL;
    kiln_status st = kiln_engine_transcribe(e, &w, &p, server_watch_cancel(wt), &t);
    server_watch_stop(wt);
    kiln_audio_free(pcm);
    server_model_done(m, NAN);
    if (st != KILN_OK) {
        int code = st == KILN_ERR_INVALID_ARG ? 400 : st == KILN_ERR_CANCELLED ? 499 : 500;
        rc = server_send_error(c, code == 499 ? 400 : code, code == 500 ? "server_error" : "invalid_request_error",
                               kiln_last_error(), NULL);
        goto out;
    }
    char *text = kiln_transcript_format(t, !strcmp(fmt, "text") ? "txt" : fmt, translate);
    kiln_transcript_free(t);
    if (!text) {
        rc = server_send_error(c, 500, "server_error", kiln_last_error(), NULL);
        goto out;
    }
    const char *ctype = !strcmp(fmt, "json") || !strcmp(fmt, "verbose_json") ? "application/json"
                        : !strcmp(fmt, "vtt")                                ? "text/vtt; charset=utf-8"
                                                                             : "text/plain; charset=utf-8";
    rc = server_send_text(c, 200, ctype, text, strlen(text), 0);
out:
    server_buf_free(&f.file);
    server_buf_free(&f.prompt);
    return rc;
}
