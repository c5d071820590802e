/* The speech-to-text family: a resident Whisper model (kiln_stt).  A
 * transcription yields before each window after the first, so waiting
 * urgent requests go between windows; a window stream never yields: it
 * holds the gate from its first window to its last.  Both poll the cancel
 * token while decoding. */
#include "engine/engine.h"

#include "base/base.h"
#include "whisper/whisper.h"

#include <stdlib.h>
#include <string.h>

static kiln_status stt_check(void *user, const char *path) {
    if (!whisper_is_ggml_file(path)) return base_fail(KILN_ERR_UNSUPPORTED, "%s: not a whisper.cpp GGML file", path);
    return KILN_OK;
}

static kiln_status stt_load(void *user, const char *path, kiln_engine_backend backend, engine_run *r, void **model) {
    kiln_stt *m = NULL;
    kiln_status st = kiln_stt_load(path, &m);
    *model = m;
    return st;
}

static kiln_status stt_unload(void *user, void *model) {
    kiln_stt_free(model);
    return KILN_OK;
}

/* A transcribe call or a stream as the engine carries it. */
typedef struct stt_call {
    const kiln_transcribe_params *p;
    const kiln_audio_window *one; /* a single transcription, or */
    kiln_window_next_fn next;     /* a stream */
    kiln_window_result_fn on_result;
    void *user;
    kiln_transcript *out;
    int32_t n_windows;
    engine_run *r;
    kiln_status yield_st;
} stt_call;

static int poll_abort(void *u) { return engine_cancelled(((stt_call *)u)->r); }

static int yield_progress(double done, double total, void *u) {
    stt_call *c = u;
    if (c->p->progress && c->p->progress(done, total, c->p->user)) return 1;
    if (done >= total) return 0;
    c->yield_st = engine_yield(c->r);
    return c->yield_st != KILN_OK;
}

static int plain_progress(double done, double total, void *u) {
    stt_call *c = u;
    return c->p->progress ? c->p->progress(done, total, c->p->user) : 0;
}

static kiln_status one_window(kiln_stt *m, stt_call *c, const kiln_audio_window *w, kiln_transcribe_params *p,
                              kiln_transcript **out) {
    float *pcm = NULL;
    int64_t n = 0;
    kiln_status st = kiln_audio_to_mono16k(w->pcm, w->n_samples, w->sample_rate, w->channels, &pcm, &n);
    if (st != KILN_OK) return st;
    st = kiln_transcribe(m, pcm, n, p, out);
    kiln_audio_free(pcm);
    return st;
}

static kiln_status stt_run(void *user, void *model, int task, void *req, engine_run *r) {
    if (task != ENGINE_TASK_TRANSCRIBE)
        return base_fail(KILN_ERR_UNSUPPORTED, "the speech-to-text family only transcribes");
    stt_call *c = req;
    c->r = r;
    kiln_transcribe_params p = *c->p;
    p.abort = poll_abort;
    p.abort_user = c;
    p.user = c;
    kiln_status st = kiln_transcribe_check(model, &p);
    if (st != KILN_OK) return st;
    if (c->one) {
        p.progress = yield_progress;
        st = one_window(model, c, c->one, &p, &c->out);
        if (st == KILN_ERR_CANCELLED && c->yield_st != KILN_OK) st = c->yield_st;
        return st;
    }
    p.progress = plain_progress;
    for (;;) {
        if (engine_cancelled(r)) return base_fail(KILN_ERR_CANCELLED, "transcription stream cancelled");
        kiln_audio_window w;
        memset(&w, 0, sizeof w);
        int more = c->next(c->user, &w);
        if (more < 0) return base_fail(KILN_ERR_INVALID_ARG, "the window source failed");
        if (more == 0) return KILN_OK;
        kiln_transcript *t = NULL;
        st = one_window(model, c, &w, &p, &t);
        if (st != KILN_OK) return st;
        c->n_windows++;
        int stop = c->on_result ? c->on_result(c->user, w.id ? w.id : "", t) : 0;
        kiln_transcript_free(t);
        if (stop) return KILN_OK;
    }
}

/* one place (no capacity op): a stream holds the whole gate */
const engine_ops engine_stt_ops = {.check = stt_check, .load = stt_load, .unload = stt_unload, .run = stt_run};

kiln_status kiln_engine_transcribe(kiln_engine *e, const kiln_audio_window *audio, const kiln_transcribe_params *p,
                                   kiln_engine_cancel *cancel, kiln_transcript **out) {
    if (!out) return base_fail(KILN_ERR_INVALID_ARG, "no output transcript");
    *out = NULL;
    if (!e || !audio) return base_fail(KILN_ERR_INVALID_ARG, "no engine or audio");
    kiln_transcribe_params def = kiln_transcribe_default_params();
    stt_call c = {p ? p : &def, audio, NULL, NULL, NULL, NULL, 0, NULL, KILN_OK};
    kiln_status st = engine_request(e, ENGINE_TASK_TRANSCRIBE, &c, 0, cancel);
    if (st != KILN_OK) {
        kiln_transcript_free(c.out);
        return st;
    }
    *out = c.out;
    return KILN_OK;
}

kiln_status kiln_engine_transcribe_stream(kiln_engine *e, kiln_window_next_fn next, kiln_window_result_fn on_result,
                                          void *user, const kiln_transcribe_params *p, kiln_engine_cancel *cancel,
                                          int32_t *n_windows) {
    if (n_windows) *n_windows = 0;
    if (!e || !next) return base_fail(KILN_ERR_INVALID_ARG, "no engine or window source");
    kiln_transcribe_params def = kiln_transcribe_default_params();
    stt_call c = {p ? p : &def, NULL, next, on_result, user, NULL, 0, NULL, KILN_OK};
    kiln_status st = engine_request(e, ENGINE_TASK_TRANSCRIBE, &c, 0, cancel);
    if (n_windows) *n_windows = c.n_windows;
    return st;
}
