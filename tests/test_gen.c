/* The generation core (src/gen) on the stories260K model: one slot gives
 * the CLI's greedy text; slots batched together give what each gives
 * alone; verified drafts (right, wrong and mixed) change nothing but the
 * number of steps, greedy or seeded; a suspended slot resumes to the same
 * text; every terminal reason; the JSON constraint; prefix reuse; and the
 * threaded scheduler with several readers, a slow one and cancellation. */
#include "gen/gen.h"
#include "sample/jschema.h"
#include "testutil.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MODEL "../models/stories260K.gguf"
#define MAXTOK 512

static kiln_model *g_m;

typedef struct out {
    int32_t tok[MAXTOK];
    int n;
    int done;
    gen_reason why;
    int32_t n_cached;
    int stop_after;    /* the callback asks to stop after this many (0: never) */
    char err[256];     /* the DONE event's message */
    float gap[MAXTOK]; /* per token: its logit minus the best other token's */
} out;

/* A constraint that takes no token. */
static int refuse_all(void *st, const char *text, int n) {
    (void)st, (void)text, (void)n;
    return 0;
}
static int never_complete(void *st) {
    (void)st;
    return 0;
}
static void accept_none(void *st, const char *text, int n) { (void)st, (void)text, (void)n; }

static int collect(void *user, const gen_event *ev, const float *logits) {
    out *o = user;
    if (ev->kind == GEN_EV_DONE) {
        o->done = 1;
        o->why = ev->reason;
        o->n_cached = ev->n_cached;
        snprintf(o->err, sizeof o->err, "%s", ev->error ? ev->error : "");
        return 0;
    }
    CHECK(logits != NULL && !kiln_token_is_eog(g_m, ev->tok.id));
    if (o->n < MAXTOK && logits) {
        kiln_model_info info;
        kiln_model_get_info(g_m, &info);
        float other = -INFINITY;
        for (int32_t i = 0; i < info.n_vocab; i++)
            if (i != ev->tok.id && logits[i] > other) other = logits[i];
        o->gap[o->n] = logits[ev->tok.id] - other;
    }
    if (o->n < MAXTOK) o->tok[o->n++] = ev->tok.id;
    return o->stop_after && o->n >= o->stop_after;
}

static int32_t *tokenize(const char *text, int *n) {
    static int32_t buf[8][256];
    static int next;
    int32_t *ids = buf[next++ % 8];
    *n = kiln_tokenize(g_m, text, strlen(text), 1, 0, ids, 256);
    return ids;
}

static kiln_context *new_ctx(int n_ctx, int n_seq) {
    kiln_context_params cp = kiln_context_default_params();
    cp.n_ctx = n_ctx;
    cp.n_seq_max = n_seq;
    cp.n_threads = 1;
    kiln_context *c = NULL;
    CHECK(kiln_context_new(g_m, &cp, &c) == KILN_OK);
    return c;
}

static gen_params greedy(const char *text, int n_predict, out *o) {
    gen_params p = gen_params_default();
    int n;
    p.prompt = tokenize(text, &n);
    p.n_prompt = n;
    p.n_predict = n_predict;
    p.sampler.temperature = 0;
    p.on_event = collect;
    p.user = o;
    return p;
}

/* Steps b until every slot ended; returns the steps taken. */
static int run_all(gen_batch *b) {
    int steps = 0;
    while (gen_batch_n_active(b) > 0 && steps < 10000) {
        CHECK(gen_batch_step(b) == KILN_OK);
        steps++;
    }
    return steps;
}

static char *text_of(const out *o) {
    static char buf[4096];
    size_t len = 0;
    kiln_detok *d = kiln_detok_new(g_m);
    for (int i = 0; i < o->n; i++) {
        size_t k;
        const char *p = kiln_detok_push(d, o->tok[i], &k);
        if (len + k < sizeof buf) memcpy(buf + len, p, k), len += k;
    }
    buf[len] = 0;
    kiln_detok_free(d);
    return buf;
}

/* Whether o's greedy text is want.  Off x86-64 (where want was taken)
 * other kernels round differently, so the text may also part from want at
 * a near-tie: agree up to a token whose two best logits were within
 * TIE_GAP of each other and differ from there (the continuation past it
 * is another text). */
#define TIE_GAP 1e-3f
static int greedy_is(const out *o, const char *want) {
    if (!strcmp(text_of(o), want)) return 1;
#if defined(__x86_64__)
    return 0;
#else
    out pre = *o;
    for (pre.n = 1; pre.n <= o->n; pre.n++) {
        const char *t = text_of(&pre);
        if (strncmp(t, want, strlen(t))) {
            printf("greedy text parts from the x86-64 one at token %d, a near-tie (gap %g)\n", pre.n - 1,
                   (double)o->gap[pre.n - 1]);
            return o->gap[pre.n - 1] < TIE_GAP;
        }
    }
    return 0;
#endif
}

/* ---- drafts: proposals from a reference continuation, some broken ---- */

typedef struct oracle {
    const int32_t *prompt;
    int n_prompt;
    const out *ref;
    int wrong_every; /* every k-th proposal is wrong (0: never) */
    int calls, proposed;
} oracle;

static int32_t propose(void *user, const int32_t *tok, int32_t n, int32_t *dst, int32_t max) {
    oracle *o = user;
    o->calls++;
    int32_t at = n - o->n_prompt; /* tokens generated so far */
    int32_t k = 0;
    for (; k < max && at + k < o->ref->n; k++) {
        dst[k] = o->ref->tok[at + k];
        if (o->wrong_every && (o->proposed + k) % o->wrong_every == o->wrong_every - 1) dst[k] = (dst[k] + 1) % 500 + 3;
    }
    o->proposed += k;
    return k;
}

static void test_drafts(kiln_context *c, gen_batch *b, const char *prompt, int n_predict, float temp) {
    out ref = {0};
    gen_params p = greedy(prompt, n_predict, &ref);
    p.sampler.temperature = temp;
    p.sampler.seed = 11;
    CHECK(gen_batch_add(b, &p, -1, NULL) == KILN_OK);
    int plain_steps = run_all(b);
    const int wrongs[] = {0, 3, 1};
    for (int w = 0; w < 3; w++) {
        for (int nd = 1; nd <= 8; nd *= 2) {
            out o = {0};
            oracle orc = {p.prompt, p.n_prompt, &ref, wrongs[w], 0, 0};
            gen_params q = greedy(prompt, n_predict, &o);
            q.sampler.temperature = temp;
            q.sampler.seed = 11;
            q.draft = propose;
            q.draft_user = &orc;
            q.n_draft = nd;
            CHECK(gen_batch_add(b, &q, -1, NULL) == KILN_OK);
            int steps = run_all(b);
            CHECKF(o.n == ref.n && !memcmp(o.tok, ref.tok, (size_t)o.n * sizeof *o.tok) && o.why == ref.why,
                   "drafts (%d, wrong every %d, temp %.1f) changed the text: '%s'", nd, wrongs[w], temp, text_of(&o));
            if (wrongs[w] == 0) CHECKF(steps < plain_steps, "right drafts took %d steps, plain %d", steps, plain_steps);
            if (wrongs[w] == 1) CHECK(steps == plain_steps); /* nothing accepted */
        }
    }
    CHECK(kiln_seq_len(c, 0) == 0); /* rejected proposals never stay behind */
}

/* ---- the threaded scheduler ---- */

/* How long a reader waits for its next event before it counts as lost.
 * The aarch64 build runs under emulation, where a queued request waits
 * out the others several times slower. */
#if defined(__x86_64__)
#define WAIT_MS 5000
#else
#define WAIT_MS 60000
#endif

typedef struct reader {
    gen_sched *s;
    const char *prompt;
    int n_predict;
    int slow; /* sleeps between reads, so its queue fills */
    out o;
    kiln_status submit;
} reader;

static void *read_thread(void *arg) {
    reader *r = arg;
    gen_params p = gen_params_default(); /* not greedy(): its buffers are the main thread's */
    p.n_predict = r->n_predict;
    p.sampler.temperature = 0;
    int32_t ids[256];
    p.prompt = ids;
    p.n_prompt = kiln_tokenize(g_m, r->prompt, strlen(r->prompt), 1, 0, ids, 256);
    gen_req *q = NULL;
    r->submit = gen_sched_submit(r->s, &p, 0, NULL, &q); /* checked by the main thread (CHECK counts unlocked) */
    if (!q) return NULL;
    gen_event ev;
    for (int i = 0; i < 100000; i++) {
        if (!gen_req_next(q, &ev, WAIT_MS)) break;
        if (ev.kind == GEN_EV_DONE) {
            r->o.done = 1;
            r->o.why = ev.reason;
            break;
        }
        if (r->o.n < MAXTOK) r->o.tok[r->o.n++] = ev.tok.id;
        if (r->slow) usleep(2000);
    }
    gen_req_free(q);
    return NULL;
}

static void test_sched(kiln_context *c) {
    gen_sched *s = NULL;
    CHECK(gen_sched_new(g_m, c, 8, NULL, &s) == KILN_OK);
    const char *prompts[] = {"Once upon a time", "Tom had a red", "The little girl", "One day, a cat", "Lily liked to"};
    enum { N = 5 };
    reader rd[N];
    out alone[N];
    gen_batch *b;
    kiln_context *c1 = new_ctx(256, 1);
    CHECK(gen_batch_new(g_m, c1, 8, &b) == KILN_OK);
    for (int i = 0; i < N; i++) {
        memset(&alone[i], 0, sizeof alone[i]);
        gen_params p = greedy(prompts[i], 60, &alone[i]);
        CHECK(gen_batch_add(b, &p, 0, NULL) == KILN_OK);
        run_all(b);
    }
    gen_batch_free(b);
    kiln_context_free(c1);
    /* more readers than sequences (the context has 3): they queue; one
     * reads slowly, so its slot pauses on a full queue */
    pthread_t th[N];
    for (int i = 0; i < N; i++) {
        memset(&rd[i], 0, sizeof rd[i]);
        rd[i].s = s;
        rd[i].prompt = prompts[i];
        rd[i].n_predict = 60;
        rd[i].slow = i == 1;
        pthread_create(&th[i], NULL, read_thread, &rd[i]);
    }
    for (int i = 0; i < N; i++) pthread_join(th[i], NULL);
    for (int i = 0; i < N; i++)
        CHECKF(rd[i].submit == KILN_OK && rd[i].o.done && rd[i].o.n == alone[i].n &&
                   !memcmp(rd[i].o.tok, alone[i].tok, (size_t)alone[i].n * sizeof(int32_t)),
               "reader %d: '%s'", i, text_of(&rd[i].o));
    /* cancellation of a long request ends it, whatever it was doing */
    gen_params p = greedy("Once upon a time", -1, NULL); /* the readers are done: greedy is ours again */
    gen_req *q = NULL;
    CHECK(gen_sched_submit(s, &p, 0, NULL, &q) == KILN_OK);
    gen_event ev;
    CHECK(gen_req_next(q, &ev, WAIT_MS) == 1 && ev.kind == GEN_EV_TOKEN);
    gen_req_cancel(q);
    int n = 0;
    while (gen_req_next(q, &ev, WAIT_MS) == 1 && ev.kind != GEN_EV_DONE && n < 100000) n++;
    CHECK(ev.kind == GEN_EV_DONE && ev.reason == GEN_CANCELLED);
    gen_req_free(q);
    gen_sched_stats st;
    gen_sched_get_stats(s, &st);
    for (int i = 0; i < 1000 && st.kv.n_used; i++) { /* the stats are of the latest step */
        usleep(1000);
        gen_sched_get_stats(s, &st);
    }
    CHECKF(st.n_running == 0 && st.n_waiting == 0 && st.kv.n_used == 0, "running %d waiting %d used %d", st.n_running,
           st.n_waiting, st.kv.n_used);
    gen_sched_free(s);
}

/* ---- reasoning budget and repetition guard ---- */

/* The tokens of the end of a reasoning block the core forces. */
static int think_end(int32_t *ids, int cap) {
    static const char end[] = "\n</think>\n\n";
    return kiln_tokenize(g_m, end, sizeof end - 1, 0, 1, ids, cap);
}

static void test_think_and_repeat(void) {
    kiln_context *c = new_ctx(512, 1);
    gen_batch *b = NULL;
    CHECK(gen_batch_new(g_m, c, 0, &b) == KILN_OK);
    int32_t end[GEN_THINK_END_MAX];
    const int n_end = think_end(end, GEN_THINK_END_MAX);
    CHECK(n_end > 0 && n_end <= GEN_THINK_END_MAX);

    /* the plain greedy text, for reference */
    out ref = {0};
    gen_params p = greedy("Once upon a time", 60, &ref);
    CHECK(gen_batch_add(b, &p, -1, NULL) == KILN_OK);
    run_all(b);
    CHECK(ref.n == 60);

    /* a prompt that opened a block (think 2) with a budget of 5: five tokens
     * of the model's, then the block's end, then the model goes on */
    out o = {0};
    p = greedy("Once upon a time", 60, &o);
    p.think = 2;
    p.think_budget = 5;
    CHECK(gen_batch_add(b, &p, -1, NULL) == KILN_OK);
    run_all(b);
    CHECK(o.why == GEN_LENGTH && o.n == 60);
    CHECK(!memcmp(o.tok, ref.tok, 5 * sizeof *o.tok));
    CHECK(!memcmp(o.tok + 5, end, (size_t)n_end * sizeof *end));
    CHECKF(strstr(text_of(&o), "\n</think>\n\n") != NULL, "got '%s'", text_of(&o));

    /* no room for the end and one token of answer within n_predict: the
     * budget's own reason, after the budget's tokens */
    out nr = {0};
    p = greedy("Once upon a time", 5 + n_end, &nr);
    p.think = 2;
    p.think_budget = 5;
    CHECK(gen_batch_add(b, &p, -1, NULL) == KILN_OK);
    run_all(b);
    CHECKF(nr.why == GEN_BUDGET && nr.n == 5, "why %d n %d", nr.why, nr.n);

    /* think 1 (the model may open a block): this model never does, so a
     * budget of 0 changes nothing */
    out t1 = {0};
    p = greedy("Once upon a time", 60, &t1);
    p.think = 1;
    p.think_budget = 0;
    CHECK(gen_batch_add(b, &p, -1, NULL) == KILN_OK);
    run_all(b);
    CHECK(t1.n == 60 && !memcmp(t1.tok, ref.tok, sizeof ref.tok[0] * 60));

    /* a JSON answer after the block: the reasoning is the model's own
     * text (no constraint), the schema holds only after "</think>" */
    {
        char err[256];
        json_t *schema = json_loads("{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"boolean\"}},"
                                    "\"required\":[\"a\"]}",
                                    0, NULL);
        sample_schema *sc = sample_schema_compile(schema, err, sizeof err);
        CHECK(sc != NULL);
        sample_sv v;
        sample_sv_init(&v, sc);
        sample_constraint json, cons;
        sample_json_constraint(&json, &v);
        sample_think th;
        sample_think_init(&th, &json, 2);
        sample_think_constraint(&cons, &th);
        out j = {0};
        p = greedy("Once upon a time", 120, &j);
        p.think = 2;
        p.think_budget = 8;
        p.constraint = &cons;
        CHECK(gen_batch_add(b, &p, -1, NULL) == KILN_OK);
        run_all(b);
        CHECK(!memcmp(j.tok, ref.tok, 8 * sizeof *j.tok));
        const char *t = text_of(&j), *close = strstr(t, "</think>");
        CHECKF(j.why == GEN_STOP && close, "got '%s'", t);
        json_t *val = close ? json_loads(close + 8, JSON_DECODE_ANY, NULL) : NULL;
        CHECKF(json_is_boolean(json_object_get(val, "a")), "answer '%s'", close ? close + 8 : "");
        json_decref(val);
        json_decref(schema);
        sample_schema_free(sc);
    }

    /* the repetition guard: "Tom" ends, greedy, in "It is not angry."
     * again and again; with a guard of 48 tokens the slot ends there, its
     * tokens those of the unguarded run, the last 48 a repeated period */
    {
        out u = {0}, g = {0};
        p = greedy("Tom", 400, &u);
        p.ignore_eos = 1;
        CHECK(gen_batch_add(b, &p, -1, NULL) == KILN_OK);
        run_all(b);
        CHECK(u.why == GEN_LENGTH && u.n == 400);
        p = greedy("Tom", 400, &g);
        p.ignore_eos = 1;
        p.repeat_guard = 48;
        CHECK(gen_batch_add(b, &p, -1, NULL) == KILN_OK);
        run_all(b);
        CHECKF(g.why == GEN_REPEAT && g.n < 400 && g.n >= 48, "why %d n %d", g.why, g.n);
        CHECK(!memcmp(g.tok, u.tok, (size_t)g.n * sizeof *g.tok));
        int period = 0;
        for (int q = 1; q <= GEN_REPEAT_PERIOD && !period; q++) {
            int ok = 1;
            for (int i = g.n - 48 + q; i < g.n && ok; i++) ok = g.tok[i] == g.tok[i - q];
            if (ok) period = q;
        }
        CHECKF(period > 0, "no period in the last 48 tokens");
        CHECKF(strstr(text_of(&g), "It is not angry. It is not angry.") != NULL, "got '%s'", text_of(&g));
    }
    gen_batch_free(b);
    kiln_context_free(c);
}

int main(void) {
    /* a hang guard (the aarch64 build runs under emulation) */
#if defined(__x86_64__)
    alarm(120);
#else
    alarm(600);
#endif
    CHECK(kiln_model_load(MODEL, NULL, &g_m) == KILN_OK);
    if (!g_m) return t_done();
    kiln_context *c = new_ctx(256, 3);
    gen_batch *b = NULL;
    CHECK(gen_batch_new(g_m, c, 0, &b) == KILN_OK);

    /* one slot: the CLI's greedy text */
    out a = {0};
    gen_params p = greedy("Tom had a red", 40, &a);
    CHECK(gen_batch_add(b, &p, -1, NULL) == KILN_OK);
    run_all(b);
    CHECKF(greedy_is(&a, " ball. He liked to play with his toys. He liked to play with his toys and run around "
                         "the room. He saw a big"),
           "got '%s'", text_of(&a));
    CHECK(a.done && a.why == GEN_LENGTH && a.n == 40);

    /* three slots batched give what each gives alone, also with a small
     * prefill chunk that interleaves prompts with decoding */
    const char *prompts[] = {"Once upon a time", "Tom had a red", "The little girl went to the park with her mom"};
    out alone[3], both[3];
    for (int i = 0; i < 3; i++) {
        memset(&alone[i], 0, sizeof alone[i]);
        gen_params q = greedy(prompts[i], 50, &alone[i]);
        CHECK(gen_batch_add(b, &q, -1, NULL) == KILN_OK);
        run_all(b);
    }
    for (int chunk = 0; chunk < 2; chunk++) {
        gen_batch *b2 = NULL;
        CHECK(gen_batch_new(g_m, c, chunk ? 3 : 0, &b2) == KILN_OK);
        for (int i = 0; i < 3; i++) {
            memset(&both[i], 0, sizeof both[i]);
            gen_params q = greedy(prompts[i], 50, &both[i]);
            CHECK(gen_batch_add(b2, &q, -1, NULL) == KILN_OK);
        }
        CHECK(gen_batch_add(b2, &p, -1, NULL) == KILN_ERR_STATE); /* every sequence is taken */
        run_all(b2);
        for (int i = 0; i < 3; i++)
            CHECKF(both[i].n == alone[i].n && !memcmp(both[i].tok, alone[i].tok, (size_t)both[i].n * sizeof(int32_t)),
                   "batched slot %d (chunk %d): '%s'", i, chunk, text_of(&both[i]));
        gen_batch_free(b2);
    }

    /* verification: the text stays, right drafts save steps */
    test_drafts(c, b, "Once upon a time", 60, 0.0f);
    test_drafts(c, b, "The little girl", 60, 0.9f);

    /* a slot suspended halfway resumes to the same text */
    {
        out o = {0};
        gen_params q = greedy(prompts[2], 50, &o);
        gen_slot *sl = NULL;
        CHECK(gen_batch_add(b, &q, -1, &sl) == KILN_OK);
        for (int i = 0; i < 20; i++) CHECK(gen_batch_step(b) == KILN_OK);
        gen_slot_suspend(b, sl);
        CHECK(gen_slot_suspended(sl) && gen_batch_n_ready(b) == 0);
        out other = {0};
        gen_params r = greedy("Tom had a red", 10, &other); /* the sequence serves another slot meanwhile */
        CHECK(gen_batch_add(b, &r, -1, NULL) == KILN_OK);
        for (int i = 0; i < 5; i++) CHECK(gen_batch_step(b) == KILN_OK);
        CHECK(gen_slot_resume(b, sl) == KILN_OK);
        run_all(b);
        CHECKF(o.n == alone[2].n && !memcmp(o.tok, alone[2].tok, (size_t)o.n * sizeof(int32_t)), "resumed: '%s'",
               text_of(&o));
        CHECK(other.n == 10 && !memcmp(other.tok, a.tok, 10 * sizeof(int32_t)));
    }

    /* terminal reasons */
    {
        out o = {0};
        gen_params q = greedy("Once upon a time", -1, &o); /* until the context is full */
        CHECK(gen_batch_add(b, &q, -1, NULL) == KILN_OK);
        run_all(b);
        CHECKF(o.why == GEN_LENGTH || o.why == GEN_STOP, "why %s", gen_reason_str(o.why));
        if (o.why == GEN_LENGTH) CHECK(o.n == 256 - q.n_prompt + 1);
        out e = {0};
        q = greedy("Once upon a time", 250, &e);
        q.ignore_eos = 1; /* never an end-of-generation token: runs to the end */
        CHECK(gen_batch_add(b, &q, -1, NULL) == KILN_OK);
        run_all(b);
        CHECK(e.why == GEN_LENGTH && e.n == 250);
        out s = {0};
        q = greedy("Once upon a time", 50, &s);
        s.stop_after = 5;
        CHECK(gen_batch_add(b, &q, -1, NULL) == KILN_OK);
        run_all(b);
        CHECK(s.why == GEN_STOP && s.n == 5);
        out x = {0};
        gen_slot *sl;
        q = greedy("Once upon a time", 50, &x);
        CHECK(gen_batch_add(b, &q, -1, &sl) == KILN_OK);
        CHECK(gen_batch_step(b) == KILN_OK && gen_batch_step(b) == KILN_OK);
        gen_slot_cancel(sl);
        run_all(b);
        CHECK(x.why == GEN_CANCELLED && x.n == 2); /* the prompt's token and one decode */
        out z = {0};
        q = greedy("Once upon a time", 0, &z); /* the prompt only */
        CHECK(gen_batch_add(b, &q, -1, NULL) == KILN_OK);
        run_all(b);
        CHECK(z.why == GEN_LENGTH && z.n == 0);
        int n;
        int32_t *big = tokenize("x", &n);
        int32_t longp[300];
        for (int i = 0; i < 300; i++) longp[i] = big[n - 1];
        q.prompt = longp;
        q.n_prompt = 300;
        CHECK(gen_batch_add(b, &q, -1, NULL) == KILN_ERR_CONTEXT_FULL);
    }

    /* the JSON constraint: a value of the schema, then the end */
    {
        char err[256];
        json_t *schema = json_loads("{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"boolean\"}},"
                                    "\"required\":[\"a\"]}",
                                    0, NULL);
        sample_schema *sc = sample_schema_compile(schema, err, sizeof err);
        CHECK(sc != NULL);
        sample_sv v;
        sample_sv_init(&v, sc);
        sample_constraint cons;
        sample_json_constraint(&cons, &v);
        out o = {0};
        gen_params q = greedy("Once upon a time", 100, &o);
        q.constraint = &cons;
        CHECK(gen_batch_add(b, &q, -1, NULL) == KILN_OK);
        run_all(b);
        char *t = text_of(&o);
        json_t *j = json_loads(t, JSON_DECODE_ANY, NULL);
        CHECKF(o.why == GEN_STOP && json_is_boolean(json_object_get(j, "a")), "constrained: '%s'", t);
        json_decref(j);
        json_decref(schema);
        sample_schema_free(sc);
    }

    /* a constrained value cut by n_predict ends as "length", not "stop" */
    {
        json_t *schema = json_loads("{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\","
                                    "\"minLength\":40}},\"required\":[\"a\"]}",
                                    0, NULL);
        sample_schema *sc = sample_schema_compile(schema, NULL, 0);
        CHECK(sc != NULL);
        sample_sv v;
        sample_sv_init(&v, sc);
        sample_constraint cons;
        sample_json_constraint(&cons, &v);
        out o = {0};
        gen_params q = greedy("Once upon a time", 4, &o);
        q.constraint = &cons;
        CHECK(gen_batch_add(b, &q, -1, NULL) == KILN_OK);
        run_all(b);
        CHECKF(o.done && o.why == GEN_LENGTH && o.n == 4 && !sample_sv_complete(&v), "cut: %s after %d",
               gen_reason_str(o.why), o.n);
        json_decref(schema);
        sample_schema_free(sc);
    }

    /* a constraint that allows no token at all: a failure, never "stop"
     * (an end-of-generation token is no whole value of it) */
    {
        sample_constraint none = {refuse_all, never_complete, accept_none, never_complete, NULL};
        out o = {0};
        gen_params q = greedy("Once upon a time", 20, &o);
        q.constraint = &none;
        CHECK(gen_batch_add(b, &q, -1, NULL) == KILN_OK);
        run_all(b);
        CHECKF(o.done && o.why == GEN_FAILED && o.n == 0 && strstr(o.err, "constrained generation failed"),
               "dead end: %s '%s'", gen_reason_str(o.why), o.err);
    }

    /* reasoning, its budget and the repetition guard, on a context of their own */
    test_think_and_repeat();

    /* prefix reuse: a second slot with the same long prompt takes the
     * cached blocks and gives the same text */
    {
        const char *lp = "Sam and Ben had a box of blocks. They built a tall tower and a small house, and then "
                         "they built a bridge for the toy cars.";
        out o1 = {0}, o2 = {0};
        gen_params q = greedy(lp, 20, &o1);
        q.reuse = 1;
        CHECK(gen_batch_add(b, &q, -1, NULL) == KILN_OK);
        run_all(b);
        q = greedy(lp, 20, &o2);
        q.reuse = 1;
        CHECK(gen_batch_add(b, &q, -1, NULL) == KILN_OK);
        run_all(b);
        CHECK(o1.n_cached == 0 && o2.n_cached >= 16 && o2.n_cached % 16 == 0);
        CHECK(o1.n == o2.n && !memcmp(o1.tok, o2.tok, (size_t)o1.n * sizeof(int32_t)));
    }

    /* keep: the sequence holds the tokens after the slot, and a slot
     * starting with n_past picks up after them */
    {
        out o1 = {0}, o2 = {0};
        gen_params q = greedy("Tom had a red", 10, &o1);
        q.keep = 1;
        CHECK(gen_batch_add(b, &q, 1, NULL) == KILN_OK);
        run_all(b);
        CHECK(kiln_seq_len(c, 1) == q.n_prompt + 9); /* the last token is sampled, not fed */
        int32_t whole[64];
        memcpy(whole, q.prompt, (size_t)q.n_prompt * sizeof *whole);
        memcpy(whole + q.n_prompt, o1.tok, 10 * sizeof *whole);
        gen_params r = greedy("x", 10, &o2);
        r.prompt = whole;
        r.n_prompt = q.n_prompt + 10;
        r.n_past = q.n_prompt + 9;
        CHECK(gen_batch_add(b, &r, 1, NULL) == KILN_OK);
        run_all(b);
        CHECK(o2.n == 10 && !memcmp(o2.tok, a.tok + 10, 10 * sizeof(int32_t)));
        kiln_seq_truncate(c, 1, 0);
    }

    gen_batch_free(b);
    kiln_kv_stats kv;
    kiln_kv_get_stats(c, &kv);
    CHECKF(kv.n_used == 0, "%d blocks still held", kv.n_used);
    test_sched(c);
    kiln_context_free(c);
    kiln_model_free(g_m);
    return t_done();
}
