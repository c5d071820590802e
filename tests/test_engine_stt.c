/* The speech-to-text engine family: registry entry, load checks, a
 * transcription of interleaved 44.1 kHz stereo, window streams (one result
 * per window, an empty window included), the gate a stream holds, stream
 * cancellation, and an unload that waits for a stream. */
#include "kiln.h"

#include "testutil.h"

#include <pthread.h>
#include <sndfile.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MODEL "data/whisper/tiny-en-f16.bin"
#define LIMIT_MS 60000

typedef struct pcm {
    float *x;
    int64_t n; /* samples (frames * channels) */
    int rate, ch;
} pcm;

static pcm read_pcm(const char *path) {
    pcm p = {0};
    SF_INFO si = {0};
    SNDFILE *sf = sf_open(path, SFM_READ, &si);
    if (!sf) return p;
    p.x = malloc((size_t)si.frames * (size_t)si.channels * sizeof *p.x);
    p.n = p.x ? sf_readf_float(sf, p.x, si.frames) * si.channels : 0;
    p.rate = si.samplerate;
    p.ch = si.channels;
    sf_close(sf);
    return p;
}

static void sleep_ms(int ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static kiln_transcribe_params quick_params(void) {
    kiln_transcribe_params p = kiln_transcribe_default_params();
    p.beam_size = 1;
    p.best_of = 1;
    p.temperature_inc = 0; /* one try per window keeps the test short */
    p.n_threads = 2;
    return p;
}

/* ---------------------------------------------------------------- stream */

typedef struct stream {
    kiln_engine *e;
    kiln_audio_window w[3];
    int next_i, n_results;
    int32_t segs[3];
    char ids[3][16];
    kiln_engine_cancel *cancel_at_2;   /* fired when the third window is asked for */
    atomic_int in_stream, done_inside; /* a request waiting on the gate sees these */
    int spawn_waiter;
    pthread_t waiter;
    atomic_int waiter_saw_end, waiter_rc;
    atomic_int first_result;
    int check_state;
    int bad_state;
} stream;

static int next_window(void *u, kiln_audio_window *w) {
    stream *s = u;
    if (s->next_i == 2 && s->cancel_at_2) kiln_engine_cancel_fire(s->cancel_at_2);
    if (s->next_i == 3) {
        atomic_store(&s->done_inside, 1);
        return 0;
    }
    *w = s->w[s->next_i++];
    return 1;
}

static void *waiter_fn(void *u) {
    stream *s = u;
    kiln_transcribe_params p = quick_params();
    kiln_transcript *t = NULL;
    int rc = kiln_engine_transcribe(s->e, &s->w[0], &p, NULL, &t);
    atomic_store(&s->waiter_saw_end, atomic_load(&s->done_inside));
    atomic_store(&s->waiter_rc, rc);
    kiln_transcript_free(t);
    return NULL;
}

static int on_result(void *u, const char *id, const kiln_transcript *t) {
    stream *s = u;
    if (s->n_results < 3) {
        snprintf(s->ids[s->n_results], sizeof s->ids[0], "%s", id);
        s->segs[s->n_results] = t->n_segments;
    }
    s->n_results++;
    atomic_store(&s->first_result, 1);
    if (s->check_state) {
        kiln_engine_observation o;
        kiln_engine_observe(s->e, &o);
        if (o.state == KILN_ENGINE_UNLOADED) s->bad_state = 1;
        sleep_ms(100); /* give an accepted unload every chance to run early */
    }
    if (s->spawn_waiter && s->n_results == 1) {
        pthread_create(&s->waiter, NULL, waiter_fn, s);
        /* the other request waits for the gate while the stream goes on */
        kiln_engine_observation o;
        for (int i = 0; i < 500; i++) {
            kiln_engine_observe(s->e, &o);
            if (o.n_waiting >= 1) break;
            sleep_ms(10);
        }
        CHECK(o.n_waiting >= 1);
    }
    return 0;
}

static void stream_init(stream *s, kiln_engine *e, const pcm *a, const pcm *b) {
    memset(s, 0, sizeof *s);
    s->e = e;
    s->w[0] = (kiln_audio_window){"first", a->x, a->n, a->rate, a->ch};
    s->w[1] = (kiln_audio_window){"empty", NULL, 0, 16000, 1};
    s->w[2] = (kiln_audio_window){"third", b->x, b->n, b->rate, b->ch};
}

typedef struct bg_stream {
    stream *s;
    int rc;
    int32_t n;
} bg_stream;

static void *stream_thread(void *u) {
    bg_stream *b = u;
    kiln_transcribe_params p = quick_params();
    b->rc = kiln_engine_transcribe_stream(b->s->e, next_window, on_result, b->s, &p, NULL, &b->n);
    return NULL;
}

int main(void) {
    const kiln_engine_family *f = kiln_engine_family_find("stt");
    CHECK(f && f->id == KILN_ENGINE_STT && f->available && !strcmp(f->tasks[0], "transcribe"));
    kiln_engine *e = NULL;
    CHECK(kiln_engine_create(KILN_ENGINE_STT, KILN_ENGINE_BACKEND_AUTO, &e) == KILN_OK);
    CHECK(kiln_engine_start(e) == KILN_OK);
    CHECK(kiln_engine_load(e, "../models/stories260K.gguf", NULL) == KILN_ERR_UNSUPPORTED);
    CHECK(kiln_engine_load(e, MODEL, NULL) == KILN_OK);
    CHECK(kiln_engine_wait_idle(e, LIMIT_MS) == KILN_OK);

    pcm st = read_pcm("data/whisper/clip44k.wav"), mono = read_pcm("data/whisper/clip16k.wav");
    CHECK(st.x && st.ch == 2 && st.rate == 44100 && mono.x);
    float *copy = malloc((size_t)st.n * sizeof *copy);
    memcpy(copy, st.x, (size_t)st.n * sizeof *copy);
    kiln_transcribe_params p = quick_params();
    kiln_audio_window w = {"stereo", st.x, st.n, st.rate, st.ch};
    kiln_transcript *t = NULL;
    CHECK(kiln_engine_transcribe(e, &w, &p, NULL, &t) == KILN_OK && t);
    if (t) CHECKF(t->duration > 2.99 && t->duration < 3.01, "duration %.3f", t->duration);
    kiln_transcript_free(t);
    CHECK(memcmp(copy, st.x, (size_t)st.n * sizeof *copy) == 0);
    /* a bad window is refused with its reason */
    kiln_audio_window bad = {"odd", st.x, 3, 44100, 2};
    CHECK(kiln_engine_transcribe(e, &bad, &p, NULL, &t) == KILN_ERR_INVALID_ARG && t == NULL);
    p.language = "fr";
    CHECK(kiln_engine_transcribe(e, &w, &p, NULL, &t) == KILN_ERR_INVALID_ARG);
    p = quick_params();

    /* a stream: one result per window, the empty one included; a request
     * made during the stream runs only after it */
    stream s;
    stream_init(&s, e, &mono, &st);
    s.spawn_waiter = 1;
    int32_t n = 0;
    CHECK(kiln_engine_transcribe_stream(e, next_window, on_result, &s, &p, NULL, &n) == KILN_OK);
    CHECK(n == 3 && s.n_results == 3);
    CHECK(!strcmp(s.ids[0], "first") && !strcmp(s.ids[1], "empty") && !strcmp(s.ids[2], "third"));
    CHECK(s.segs[1] == 0);
    pthread_join(s.waiter, NULL);
    CHECK(atomic_load(&s.waiter_rc) == KILN_OK);
    CHECK(atomic_load(&s.waiter_saw_end) == 1);

    /* a cancelled stream ends and frees the gate */
    stream c;
    stream_init(&c, e, &mono, &st);
    c.cancel_at_2 = kiln_engine_cancel_new();
    CHECK(kiln_engine_transcribe_stream(e, next_window, on_result, &c, &p, c.cancel_at_2, &n) == KILN_ERR_CANCELLED);
    CHECK(n == 2);
    kiln_engine_cancel_free(c.cancel_at_2);
    CHECK(kiln_engine_transcribe(e, &w, &p, NULL, &t) == KILN_OK);
    kiln_transcript_free(t);

    /* an unload accepted during a stream waits for its end */
    stream u;
    stream_init(&u, e, &mono, &st);
    u.check_state = 1;
    bg_stream bg = {&u, -1, 0};
    pthread_t th;
    pthread_create(&th, NULL, stream_thread, &bg);
    for (int i = 0; i < 3000 && !atomic_load(&u.first_result); i++) sleep_ms(10);
    CHECK(kiln_engine_unload(e, NULL) == KILN_OK);
    pthread_join(th, NULL);
    CHECK(bg.rc == KILN_OK && bg.n == 3 && !u.bad_state);
    CHECK(kiln_engine_wait_idle(e, LIMIT_MS) == KILN_OK);
    kiln_engine_observation o;
    kiln_engine_observe(e, &o);
    CHECK(o.state == KILN_ENGINE_UNLOADED);
    CHECK(kiln_engine_transcribe(e, &w, &p, NULL, &t) == KILN_ERR_STATE);
    kiln_engine_free(e);
    free(copy);
    free(st.x);
    free(mono.x);
    return t_done();
}
