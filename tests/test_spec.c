/* Speculative decoding (src/spec through src/gen).
 *
 *  1. Greedy identity: for every proposer (n-gram lookup, a draft model
 *     that is the target itself, a draft model that is another model of the
 *     same vocabulary, and a noisy oracle that is right two times in three),
 *     fixed-length and adaptive, every prompt gives the text plain greedy
 *     decoding gives, byte for byte, alone and with 4 sequences in one
 *     batch, on the stories model, the dense fixtures, spec-llama (head
 *     size 32) and the hybrid (recurrent) fixtures with F16 and Q8_0 KV
 *     caches.
 *  2. Rejected tokens leave no trace: after a speculative run the sequence
 *     holds the prompt and the output, and the next logits are bit-identical
 *     to those after plain decoding of the same prompt (for the hybrid
 *     models: the recurrent state was rolled back exactly).
 *  3. The target as its own draft is accepted (greedy) every time.
 *  4. A draft of another vocabulary is refused at load with the token that
 *     differs.
 *  5. Sampling: a seeded n-gram run gives the plain run's text; with a drawn
 *     draft (the rejection rule), the empirical joint distribution of three
 *     generated tokens matches the exact one computed from the model's
 *     logits (chi-square, fixed seeds, thousands of samples), with a draft
 *     that agrees (q = p) and one that does not; a wrong distribution is
 *     rejected by the same statistic.
 *  6. The adaptive length backs off when proposals fail: an n-gram run on
 *     a random model feeds few proposals.
 *  7. spec-llama against its reference: plain and speculative greedy runs
 *     from the fixture's prompt give the greedy ids of gen_fixtures.py's
 *     float64 PyTorch forward. */
#include "gen/gen.h"
#include "sample/sample.h"
#include "spec/spec.h"
#include "testutil.h"

#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define STORIES "../models/stories260K.gguf"
#define SPEC_LLAMA "data/spec/spec-llama.gguf"
#define MAXTOK 256
#define N_PROMPTS 4

typedef struct out {
    int32_t tok[MAXTOK];
    int n;
    int done;
    gen_reason why;
    int32_t n_drafted, n_accepted;
} out;

static int collect(void *user, const gen_event *ev, const float *logits) {
    out *o = user;
    (void)logits;
    if (ev->kind == GEN_EV_DONE) {
        o->done = 1;
        o->why = ev->reason;
        o->n_drafted = ev->n_drafted;
        o->n_accepted = ev->n_accepted;
        return 0;
    }
    if (o->n < MAXTOK) o->tok[o->n++] = ev->tok.id;
    return 0;
}

static kiln_context *new_ctx(kiln_model *m, int n_ctx, int n_seq, int kv_type) {
    kiln_context_params cp = kiln_context_default_params();
    cp.n_ctx = n_ctx;
    cp.n_seq_max = n_seq;
    cp.n_threads = 1;
    cp.kv_type = kv_type;
    kiln_context *c = NULL;
    CHECK(kiln_context_new(m, &cp, &c) == KILN_OK);
    return c;
}

static int run_all(gen_batch *b) {
    int steps = 0;
    while (gen_batch_n_active(b) > 0 && steps < 20000) {
        CHECK(gen_batch_step(b) == KILN_OK);
        steps++;
    }
    return steps;
}

/* ---- a noisy oracle: the plain run's continuation, every third token wrong ---- */

typedef struct oracle {
    int n_prompt;
    const out *ref;
    int k;
} oracle;

static int32_t oracle_propose(void *user, const int32_t *tok, int32_t n, int32_t *dst, int32_t max) {
    oracle *o = user;
    int32_t at = n - o->n_prompt, k = 0;
    (void)tok;
    for (; k < max && at + k < o->ref->n; k++) {
        dst[k] = o->ref->tok[at + k];
        if (++o->k % 3 == 0) dst[k] = (dst[k] + 7) % 200 + 3;
    }
    return k;
}

/* ---- one model ---- */

typedef struct prompts {
    int32_t ids[N_PROMPTS][64];
    int n[N_PROMPTS];
} prompts;

static const char *const k_texts[N_PROMPTS] = {
    "Once upon a time, there was a little girl. Once upon a time, there was",
    "Tom had a red ball. He liked the ball. Tom had a",
    "The cat sat on the mat. The dog sat on the",
    "One day, a big bird",
};

static void tokenize_prompts(kiln_model *m, prompts *P) {
    for (int i = 0; i < N_PROMPTS; i++) {
        P->n[i] = kiln_tokenize(m, k_texts[i], strlen(k_texts[i]), 1, 0, P->ids[i], 64);
        CHECK(P->n[i] > 1 && P->n[i] <= 64);
    }
}

/* A kind of speculation to check. */
typedef struct way {
    const char *name;
    const gen_proposer *prop; /* NULL: the oracle hook */
    int n_draft, fixed;
} way;

static gen_params greedy_params(const prompts *P, int i, int n_predict, out *o) {
    gen_params p = gen_params_default();
    p.prompt = P->ids[i];
    p.n_prompt = P->n[i];
    p.n_predict = n_predict;
    p.sampler.temperature = 0;
    p.on_event = collect;
    p.user = o;
    return p;
}

/* Runs prompts [0, n) together (or one after the other when !together)
 * with the way w, into o[]. */
static void run_way(kiln_context *c, kiln_model *m, const prompts *P, const way *w, const out *ref, int together,
                    int n_predict, out *o) {
    gen_batch *b = NULL;
    CHECK(gen_batch_new(m, c, 0, &b) == KILN_OK);
    if (!b) return;
    if (w && w->prop) gen_batch_set_proposer(b, w->prop);
    oracle orc[N_PROMPTS];
    for (int i = 0; i < N_PROMPTS; i++) {
        memset(&o[i], 0, sizeof o[i]);
        gen_params p = greedy_params(P, i, n_predict, &o[i]);
        if (w) {
            p.n_draft = w->n_draft;
            p.spec_fixed = w->fixed;
            if (!w->prop) {
                orc[i] = (oracle){P->n[i], &ref[i], 0};
                p.draft = oracle_propose;
                p.draft_user = &orc[i];
            }
        }
        CHECK(gen_batch_add(b, &p, -1, NULL) == KILN_OK);
        if (!together) run_all(b);
    }
    run_all(b);
    gen_batch_free(b);
    for (int s = 0; s < kiln_context_n_seq_max(c); s++) CHECK(kiln_seq_len(c, s) == 0);
}

static int same(const out *a, const out *b) {
    return a->n == b->n && a->why == b->why && !memcmp(a->tok, b->tok, (size_t)a->n * sizeof *a->tok);
}

/* Runs prompt 0 greedily for 60 tokens on c's sequence 0 and keeps it
 * there, speculating through prop (NULL: plain decoding), into o. */
static void kept_run(kiln_model *m, kiln_context *c, const gen_proposer *prop, const prompts *P, out *o) {
    gen_batch *b = NULL;
    CHECK(gen_batch_new(m, c, 0, &b) == KILN_OK);
    if (!b) return;
    if (prop) gen_batch_set_proposer(b, prop);
    memset(o, 0, sizeof *o);
    gen_params p = greedy_params(P, 0, 60, o);
    p.n_draft = prop ? 6 : 0;
    p.spec_fixed = 1;
    p.keep = 1;
    CHECK(gen_batch_add(b, &p, 0, NULL) == KILN_OK);
    run_all(b);
    gen_batch_free(b);
}

/* After a speculative run kept in the sequence: it holds exactly the
 * prompt and the output (less the last token, never fed), and the logits
 * after feeding that last token match, bit for bit, those after the plain
 * run of the same prompt (for a recurrent model: its state was rolled back
 * to what one-token decoding gives). */
static void check_no_trace(const char *label, kiln_model *m, int kv_type, const gen_proposer *prop, const prompts *P) {
    kiln_context *c = new_ctx(m, 256, 1, kv_type), *f = new_ctx(m, 256, 1, kv_type);
    if (!c || !f) return;
    out o, ref;
    kept_run(m, c, prop, P, &o);
    kept_run(m, f, NULL, P, &ref);
    CHECKF(same(&o, &ref), "%s: the text changed", label);
    const int n = P->n[0] + o.n;
    CHECKF(kiln_seq_len(c, 0) == n - 1 && kiln_seq_len(f, 0) == n - 1, "%s: the sequence holds %d tokens, the text %d",
           label, kiln_seq_len(c, 0), n - 1);
    const int32_t last = o.n ? o.tok[o.n - 1] : 0;
    kiln_batch one = {1, &last, NULL, NULL, NULL};
    CHECK(kiln_decode(c, &one) == KILN_OK && kiln_decode(f, &one) == KILN_OK);
    kiln_model_info info;
    kiln_model_get_info(m, &info);
    const float *a = kiln_get_logits(c, 0), *z = kiln_get_logits(f, 0);
    CHECKF(a && z && !memcmp(a, z, (size_t)info.n_vocab * sizeof(float)),
           "%s: the logits after a speculative run differ from the plain run's", label);
    CHECKF(o.n_drafted > 0 && o.n_accepted < o.n_drafted, "%s: %d proposed, %d accepted (want some rejected)", label,
           o.n_drafted, o.n_accepted);
    kiln_context_free(c);
    kiln_context_free(f);
}

/* Every way of speculating gives the plain text on model path (drafts:
 * other models of the same vocabulary). */
static void identity(const char *path, int kv_type, const char *const *drafts, int n_drafts) {
    kiln_model *m = NULL;
    CHECKF(kiln_model_load(path, NULL, &m) == KILN_OK, "%s", path);
    if (!m) return;
    char label[256];
    kiln_context *c = new_ctx(m, 256, N_PROMPTS, kv_type);
    if (!c) return;
    prompts P;
    tokenize_prompts(m, &P);
    enum { N_PRED = 48 };
    out ref[N_PROMPTS], o[N_PROMPTS];
    run_way(c, m, &P, NULL, NULL, 0, N_PRED, ref);
    /* the proposers */
    spec *sp[8] = {0};
    int n_sp = 0;
    kiln_spec_params q = kiln_spec_default_params();
    q.type = KILN_SPEC_NGRAM;
    q.ngram_min = 1;
    q.ngram_max = 3;
    CHECK(spec_new(&q, m, c, &sp[n_sp++]) == KILN_OK);
    q.type = KILN_SPEC_DRAFT;
    q.draft_model = path; /* the target itself */
    CHECK(spec_new(&q, m, c, &sp[n_sp++]) == KILN_OK);
    for (int d = 0; d < n_drafts; d++) {
        q.draft_model = drafts[d];
        CHECKF(spec_new(&q, m, c, &sp[n_sp++]) == KILN_OK, "%s as the draft of %s: %s", drafts[d], path,
               kiln_last_error());
    }
    const char *const names[] = {"ngram", "self-draft", "other draft", "other draft 2"};
    for (int k = 0; k < n_sp; k++) {
        if (!sp[k]) continue;
        for (int fixed = 0; fixed < 2; fixed++) {
            way w = {names[k < 3 ? k : 3], spec_proposer(sp[k]), fixed ? 4 : 8, fixed};
            for (int together = 0; together < 2; together++) {
                run_way(c, m, &P, &w, ref, together, N_PRED, o);
                int32_t drafted = 0, accepted = 0;
                for (int i = 0; i < N_PROMPTS; i++) {
                    snprintf(label, sizeof label, "%s (%s cache): %s, %s, %s, prompt %d", path,
                             kv_type ? "Q8_0" : "F16", w.name, fixed ? "fixed 4" : "adaptive",
                             together ? "4 together" : "alone", i);
                    CHECKF(same(&o[i], &ref[i]), "%s: the text changed (%d tokens, plain %d)", label, o[i].n, ref[i].n);
                    drafted += o[i].n_drafted;
                    accepted += o[i].n_accepted;
                }
                if (fixed) CHECKF(drafted > 0, "%s %s: nothing proposed", path, w.name);
                if (k == 1 && fixed) /* the target as its own draft */
                    CHECKF(accepted == drafted && drafted > 40, "%s: self-draft accepted %d of %d", path, accepted,
                           drafted);
            }
        }
    }
    /* the noisy oracle (the slot's own hook), alone and together */
    way wo = {"oracle", NULL, 4, 1};
    for (int together = 0; together < 2; together++) {
        run_way(c, m, &P, &wo, ref, together, N_PRED, o);
        for (int i = 0; i < N_PROMPTS; i++)
            CHECKF(same(&o[i], &ref[i]), "%s (%s cache): noisy oracle, %s, prompt %d: the text changed", path,
                   kv_type ? "Q8_0" : "F16", together ? "together" : "alone", i);
    }
    /* rejected proposals leave no trace */
    snprintf(label, sizeof label, "%s (%s cache), other draft", path, kv_type ? "Q8_0" : "F16");
    if (n_sp > 2 && sp[2]) check_no_trace(label, m, kv_type, spec_proposer(sp[2]), &P);
    for (int k = 0; k < n_sp; k++) spec_free(sp[k]);
    kiln_context_free(c);
    kiln_model_free(m);
}

/* ---- vocabulary check ---- */

static void test_vocab_mismatch(void) {
    kiln_model *m = NULL;
    CHECK(kiln_model_load("data/fixtures/llama.gguf", NULL, &m) == KILN_OK);
    if (!m) return;
    kiln_context *c = new_ctx(m, 64, 1, KILN_KV_F16);
    kiln_spec_params q = kiln_spec_default_params();
    q.type = KILN_SPEC_DRAFT;
    q.draft_model = STORIES; /* SentencePiece too, the same special ids, other pieces */
    spec *s = NULL;
    CHECK(spec_new(&q, m, c, &s) != KILN_OK && !s);
    CHECKF(strstr(kiln_last_error(), "another vocabulary") && strstr(kiln_last_error(), "token 259 is"), "got '%s'",
           kiln_last_error());
    q.draft_model = "data/fixtures/qwen3.gguf";
    CHECK(spec_new(&q, m, c, &s) != KILN_OK && strstr(kiln_last_error(), "other special tokens"));
    q.draft_model = "data/no-such-model.gguf";
    CHECK(spec_new(&q, m, c, &s) != KILN_OK && strstr(kiln_last_error(), "cannot load the draft model"));
    q.type = KILN_SPEC_MTP;
    CHECK(spec_new(&q, m, c, &s) != KILN_OK && strstr(kiln_last_error(), "MTP"));
    q.type = KILN_SPEC_NGRAM;
    q.ngram_min = 4;
    q.ngram_max = 3;
    CHECK(spec_new(&q, m, c, &s) == KILN_ERR_INVALID_ARG);
    q = kiln_spec_default_params();
    q.type = KILN_SPEC_NGRAM;
    q.n_max = GEN_DRAFT_MAX + 1;
    CHECK(spec_new(&q, m, c, &s) == KILN_ERR_INVALID_ARG);
    kiln_context_free(c);
    kiln_model_free(m);
}

/* ---- the n-gram index ---- */

/* A sequence that comes back shorter (the same prompt again after a longer
 * run: a benchmark's repetitions, a server's cached prefix) still finds
 * the earlier occurrences of its n-grams: entries of the longer run that
 * point past the end must not hide them. */
static void test_ngram_index(void) {
    kiln_spec_params q = kiln_spec_default_params();
    q.type = KILN_SPEC_NGRAM;
    q.ngram_min = 2;
    q.ngram_max = 3;
    spec_ngram *g = spec_ngram_new(&q, 1, 64);
    CHECK(g != NULL);
    if (!g) return;
    /* 1..8 9 9 1..8 9 9 1 2 3: "1 2 3" last ended at 12 */
    int32_t tok[24], draft[4];
    int n = 0;
    for (int r = 0; r < 2; r++) {
        for (int v = 1; v <= 8; v++) tok[n++] = v;
        tok[n++] = 9;
        tok[n++] = 9;
    }
    tok[n++] = 1;
    tok[n++] = 2;
    tok[n++] = 3;
    const int lens[] = {n, 13, n, 3 + 10};
    for (size_t k = 0; k < sizeof lens / sizeof lens[0]; k++) {
        gen_ask a = {0, tok, lens[k], 4, NULL, 0, draft, NULL};
        spec_ngram_propose(g, &a, 1);
        /* the last "1 2 3" ends at lens[k] - 1: the latest earlier one is
         * followed by 4 5 6 7 */
        CHECKF(a.n == 4 && draft[0] == 4 && draft[1] == 5 && draft[2] == 6 && draft[3] == 7,
               "n-gram lookup at length %d: %d proposals, first %d", lens[k], a.n, a.n ? draft[0] : -1);
    }
    /* another sequence on the slot: its own n-grams only */
    int32_t other[8] = {9, 9, 1, 2, 30, 31, 1, 2};
    gen_ask a = {0, other, 8, 4, NULL, 0, draft, NULL};
    spec_ngram_propose(g, &a, 1);
    CHECKF(a.n == 4 && draft[0] == 30 && draft[1] == 31 && draft[2] == 1 && draft[3] == 2,
           "n-gram lookup on a new sequence: %d proposals, first %d", a.n, a.n ? draft[0] : -1);
    spec_ngram_free(g);
}

/* The same greedy n-gram run twice on one batch (the second reuses the
 * cached prompt) feeds the same proposals and gives the same text. */
static void test_ngram_repeat(kiln_model *m) {
    kiln_context *c = new_ctx(m, 256, 1, KILN_KV_F16);
    prompts P;
    tokenize_prompts(m, &P);
    kiln_spec_params q = kiln_spec_default_params();
    q.type = KILN_SPEC_NGRAM;
    q.ngram_min = 1;
    spec *s = NULL;
    CHECK(spec_new(&q, m, c, &s) == KILN_OK);
    if (!s) return;
    gen_batch *b = NULL;
    CHECK(gen_batch_new(m, c, 0, &b) == KILN_OK);
    gen_batch_set_proposer(b, spec_proposer(s));
    out o[2];
    for (int k = 0; k < 2; k++) {
        memset(&o[k], 0, sizeof o[k]);
        gen_params p = greedy_params(&P, 0, 80, &o[k]);
        p.n_draft = 4;
        p.spec_fixed = 1;
        p.reuse = 1;
        CHECK(gen_batch_add(b, &p, 0, NULL) == KILN_OK);
        run_all(b);
    }
    CHECKF(same(&o[0], &o[1]), "n-gram run again: the text changed");
    CHECKF(o[0].n_drafted > 10 && o[1].n_drafted == o[0].n_drafted, "n-gram run again: %d proposals, the first run %d",
           o[1].n_drafted, o[0].n_drafted);
    gen_batch_free(b);
    spec_free(s);
    kiln_context_free(c);
}

/* ---- sampling ---- */

/* n-gram proposals are deterministic: a seeded run gives the plain text. */
static void test_seeded_ngram(kiln_model *m) {
    kiln_context *c = new_ctx(m, 256, N_PROMPTS, KILN_KV_F16);
    prompts P;
    tokenize_prompts(m, &P);
    kiln_spec_params q = kiln_spec_default_params();
    q.type = KILN_SPEC_NGRAM;
    q.ngram_min = 1;
    spec *s = NULL;
    CHECK(spec_new(&q, m, c, &s) == KILN_OK);
    if (!s) return;
    for (int fixed = 0; fixed < 2; fixed++) {
        out ref[N_PROMPTS], o[N_PROMPTS];
        for (int pass = 0; pass < 2; pass++) {
            gen_batch *b = NULL;
            CHECK(gen_batch_new(m, c, 0, &b) == KILN_OK);
            if (pass) gen_batch_set_proposer(b, spec_proposer(s));
            for (int i = 0; i < N_PROMPTS; i++) {
                out *x = pass ? &o[i] : &ref[i];
                memset(x, 0, sizeof *x);
                gen_params p = greedy_params(&P, i, 80, x);
                p.sampler.temperature = 0.8f;
                p.sampler.seed = 100 + i;
                p.n_draft = pass ? 6 : 0;
                p.spec_fixed = fixed;
                CHECK(gen_batch_add(b, &p, -1, NULL) == KILN_OK);
            }
            run_all(b);
            gen_batch_free(b);
        }
        int drafted = 0;
        for (int i = 0; i < N_PROMPTS; i++) {
            CHECKF(same(&o[i], &ref[i]), "seeded n-gram (%s), prompt %d: the text changed",
                   fixed ? "fixed" : "adaptive", i);
            drafted += o[i].n_drafted;
        }
        CHECK(drafted > 0);
    }
    spec_free(s);
    kiln_context_free(c);
}

/* The exact distribution of the first three tokens after prompt and the
 * empirical one of n_samples seeded runs with a drawn draft. */
enum { TOPK = 4, N_CELLS = TOPK * TOPK * TOPK };

typedef struct dist3 {
    int32_t id[N_CELLS][3];
    double p[N_CELLS];
    int n;
} dist3;

/* The sampler's distribution after ctx tokens (a fresh sequence). */
static int32_t next_dist(kiln_model *m, kiln_context *c, const kiln_sampler_params *sp, const int32_t *ctx, int n,
                         int32_t *ids, float *pr) {
    kiln_seq_truncate(c, 0, 0);
    kiln_batch b = {n, ctx, NULL, NULL, NULL};
    CHECK(kiln_decode(c, &b) == KILN_OK);
    kiln_model_info info;
    kiln_model_get_info(m, &info);
    kiln_sampler *s = NULL;
    CHECK(kiln_sampler_new(sp, info.n_vocab, &s) == KILN_OK);
    const int32_t *di;
    const float *dp;
    const int32_t k = sample_dist(s, kiln_get_logits(c, n - 1), &di, &dp);
    memcpy(ids, di, (size_t)k * sizeof *ids);
    memcpy(pr, dp, (size_t)k * sizeof *pr);
    kiln_sampler_free(s);
    return k;
}

static void exact3(kiln_model *m, const int32_t *prompt, int n, const kiln_sampler_params *sp, dist3 *d) {
    kiln_context *c = new_ctx(m, 128, 1, KILN_KV_F16);
    int32_t ctx[80], i1[TOPK], i2[TOPK], i3[TOPK];
    float p1[TOPK], p2[TOPK], p3[TOPK];
    memcpy(ctx, prompt, (size_t)n * sizeof *ctx);
    d->n = 0;
    const int32_t k1 = next_dist(m, c, sp, ctx, n, i1, p1);
    for (int a = 0; a < k1; a++) {
        ctx[n] = i1[a];
        const int32_t k2 = next_dist(m, c, sp, ctx, n + 1, i2, p2);
        for (int b = 0; b < k2; b++) {
            ctx[n + 1] = i2[b];
            const int32_t k3 = next_dist(m, c, sp, ctx, n + 2, i3, p3);
            for (int e = 0; e < k3; e++) {
                d->id[d->n][0] = i1[a];
                d->id[d->n][1] = i2[b];
                d->id[d->n][2] = i3[e];
                d->p[d->n++] = (double)p1[a] * p2[b] * p3[e];
            }
        }
    }
    kiln_context_free(c);
}

typedef struct tally {
    int count[N_CELLS];
    int outside; /* samples the exact distribution gives no weight */
    int n;
    const dist3 *d;
} tally;

/* One slot's run. */
typedef struct tracker {
    tally *t;
    int32_t tok[3];
    int got;
} tracker;

static int tally_event(void *user, const gen_event *ev, const float *logits) {
    tracker *r = user;
    tally *t = r->t;
    (void)logits;
    if (ev->kind == GEN_EV_DONE) {
        if (r->got == 3) {
            int cell = -1;
            for (int i = 0; i < t->d->n && cell < 0; i++)
                if (!memcmp(t->d->id[i], r->tok, sizeof r->tok)) cell = i;
            if (cell < 0)
                t->outside++;
            else
                t->count[cell]++;
            t->n++;
        }
        r->got = 0;
        return 0;
    }
    if (r->got < 3) r->tok[r->got] = ev->tok.id;
    r->got++;
    return 0;
}

/* Pearson's statistic of t against d; cells expecting under 1 sample are
 * pooled. */
static double chi2(const tally *t, const dist3 *d, int *dof) {
    double x = 0, pool_e = 0, pool_o = 0;
    *dof = -1;
    for (int i = 0; i < d->n; i++) {
        const double e = d->p[i] * t->n;
        if (e < 1) {
            pool_e += e;
            pool_o += t->count[i];
            continue;
        }
        x += (t->count[i] - e) * (t->count[i] - e) / e;
        (*dof)++;
    }
    if (pool_e > 0) {
        x += (pool_o - pool_e) * (pool_o - pool_e) / pool_e;
        (*dof)++;
    }
    return x;
}

/* Runs n_samples generations of 3 tokens after the prompt, a slot per
 * sequence at a time, each with its own seed, speculating through prop
 * (2 proposals every step). */
static void sample_runs(kiln_model *m, const gen_proposer *prop, kiln_context *c, const int32_t *prompt, int n,
                        const kiln_sampler_params *sp, int n_samples, tally *t) {
    gen_batch *b = NULL;
    CHECK(gen_batch_new(m, c, 0, &b) == KILN_OK);
    if (!b) return;
    gen_batch_set_proposer(b, prop);
    const int n_seq = kiln_context_n_seq_max(c);
    tracker tr[64];
    for (int done = 0; done < n_samples;) {
        for (int s = 0; s < n_seq && done < n_samples; s++, done++) {
            tr[s] = (tracker){t, {0, 0, 0}, 0};
            gen_params p = gen_params_default();
            p.prompt = prompt;
            p.n_prompt = n;
            p.n_predict = 3;
            p.sampler = *sp;
            p.sampler.seed = 1000003ull * (uint64_t)done + 17;
            p.n_draft = 2;
            p.spec_fixed = 1;
            p.keep = 1;
            p.n_past = kiln_seq_len(c, s) > 0 ? n - 1 : 0; /* the prompt stays in the cache */
            p.on_event = tally_event;
            p.user = &tr[s];
            CHECK(gen_batch_add(b, &p, s, NULL) == KILN_OK);
        }
        run_all(b);
    }
    gen_batch_free(b);
}

static void test_rejection_rule(kiln_model *m) {
    int32_t prompt[64];
    const char *text = "Once upon a time, there was a little";
    const int n = kiln_tokenize(m, text, strlen(text), 1, 0, prompt, 64);
    kiln_sampler_params sp = kiln_sampler_default_params();
    sp.temperature = 1.0f;
    sp.top_k = TOPK;
    sp.top_p = 1.0f;
    sp.min_p = 0;
    dist3 d;
    exact3(m, prompt, n, &sp, &d);
    CHECK(d.n > TOPK * 4);
    const char *const drafts[2] = {STORIES, SPEC_LLAMA}; /* q = p, and a q far from p */
    enum { N_SAMPLES = 4000 };
    for (int k = 0; k < 2; k++) {
        kiln_context *c = new_ctx(m, 128, 8, KILN_KV_F16);
        kiln_spec_params q = kiln_spec_default_params();
        q.type = KILN_SPEC_DRAFT;
        q.draft_model = drafts[k];
        spec *s = NULL;
        CHECK(spec_new(&q, m, c, &s) == KILN_OK);
        if (!s) continue;
        tally t;
        memset(&t, 0, sizeof t);
        t.d = &d;
        sample_runs(m, spec_proposer(s), c, prompt, n, &sp, N_SAMPLES, &t);
        int dof;
        const double x = chi2(&t, &d, &dof);
        /* the 0.999 quantile of chi-square with dof degrees of freedom
         * (Wilson-Hilferty) */
        const double z = 3.09, h = 2.0 / (9.0 * dof);
        const double crit = dof * pow(1 - h + z * sqrt(h), 3);
        fprintf(stderr, "rejection rule, draft %s: %d samples, chi2 %.1f on %d dof (0.999 quantile %.1f)\n", drafts[k],
                t.n, x, dof, crit);
        CHECKF(t.n == N_SAMPLES && t.outside == 0, "%d samples, %d outside the target's support", t.n, t.outside);
        CHECKF(x < crit, "draft %s: chi2 %.1f >= %.1f: the emitted tokens do not follow the target", drafts[k], x,
               crit);
        if (k == 1) { /* the statistic has the power to see a skewed distribution */
            kiln_sampler_params hot = sp;
            hot.temperature = 1.25f;
            dist3 wrong;
            exact3(m, prompt, n, &hot, &wrong);
            tally t2 = t;
            const double xw = chi2(&t2, &wrong, &dof);
            fprintf(stderr, "  the same samples against temperature 1.25's distribution: chi2 %.1f\n", xw);
            CHECKF(xw > 3 * crit, "chi2 %.1f against a wrong distribution", xw);
        }
        spec_free(s);
        kiln_context_free(c);
    }
}

/* A random model rarely repeats itself: the adaptive length stops feeding
 * n-gram proposals that keep failing. */
static void test_adaptive(void) {
    kiln_model *m = NULL;
    CHECK(kiln_model_load(SPEC_LLAMA, NULL, &m) == KILN_OK);
    if (!m) return;
    kiln_context *c = new_ctx(m, 512, 1, KILN_KV_F16);
    prompts P;
    tokenize_prompts(m, &P);
    kiln_spec_params q = kiln_spec_default_params();
    q.type = KILN_SPEC_NGRAM;
    q.ngram_min = 1;
    spec *s = NULL;
    CHECK(spec_new(&q, m, c, &s) == KILN_OK);
    int32_t fed[2] = {0, 0}, acc[2] = {0, 0}, ng[2] = {0, 0};
    for (int fixed = 0; fixed < 2 && s; fixed++) {
        gen_batch *b = NULL;
        CHECK(gen_batch_new(m, c, 0, &b) == KILN_OK);
        gen_batch_set_proposer(b, spec_proposer(s));
        out o = {0};
        gen_params p = greedy_params(&P, 0, 200, &o);
        p.n_draft = 8;
        p.spec_fixed = fixed;
        CHECK(gen_batch_add(b, &p, 0, NULL) == KILN_OK);
        run_all(b);
        gen_batch_free(b);
        fed[fixed] = o.n_drafted;
        acc[fixed] = o.n_accepted;
        ng[fixed] = o.n;
    }
    fprintf(stderr, "n-gram on a random model: adaptive fed %d proposals (%d accepted), fixed %d (%d) for %d tokens\n",
            fed[0], acc[0], fed[1], acc[1], ng[1]);
    CHECK(ng[0] == ng[1]);
    CHECKF(2 * (fed[0] - acc[0]) < fed[1] - acc[1], "adaptive fed %d wrong proposals, fixed %d", fed[0] - acc[0],
           fed[1] - acc[1]);
    spec_free(s);
    kiln_context_free(c);
    kiln_model_free(m);
}

/* ---- the fixture against its PyTorch reference ---- */

static void test_reference(void) {
    json_error_t je;
    json_t *j = json_load_file("data/spec/spec-llama.json", 0, &je);
    CHECKF(j != NULL, "spec-llama.json: %s", je.text);
    if (!j) return;
    json_t *pj = json_object_get(j, "prompt_ids"), *gj = json_object_get(j, "greedy_ids");
    prompts P;
    memset(&P, 0, sizeof P);
    P.n[0] = (int)json_array_size(pj);
    const int ng = (int)json_array_size(gj);
    CHECK(P.n[0] > 1 && P.n[0] <= 64 && ng > 8 && ng <= MAXTOK);
    for (int i = 0; i < P.n[0] && i < 64; i++) P.ids[0][i] = (int32_t)json_integer_value(json_array_get(pj, (size_t)i));
    kiln_model *m = NULL;
    CHECK(kiln_model_load(SPEC_LLAMA, NULL, &m) == KILN_OK);
    kiln_context *c = m ? new_ctx(m, 256, 1, KILN_KV_F16) : NULL;
    spec *s[2] = {NULL, NULL};
    kiln_spec_params q = kiln_spec_default_params();
    q.type = KILN_SPEC_NGRAM;
    q.ngram_min = 1;
    if (c) CHECK(spec_new(&q, m, c, &s[0]) == KILN_OK);
    q.type = KILN_SPEC_DRAFT;
    q.draft_model = STORIES;
    if (c) CHECK(spec_new(&q, m, c, &s[1]) == KILN_OK);
    for (int k = -1; c && k < 2; k++) {
        way w = {k < 0 ? "plain" : k ? "draft" : "ngram", k >= 0 && s[k] ? spec_proposer(s[k]) : NULL, 4, 1};
        out o[N_PROMPTS];
        gen_batch *b = NULL;
        CHECK(gen_batch_new(m, c, 0, &b) == KILN_OK);
        if (!b) break;
        if (w.prop) gen_batch_set_proposer(b, w.prop);
        memset(&o[0], 0, sizeof o[0]);
        gen_params p = greedy_params(&P, 0, ng, &o[0]);
        p.n_draft = w.prop ? w.n_draft : 0;
        p.spec_fixed = 1;
        CHECK(gen_batch_add(b, &p, 0, NULL) == KILN_OK);
        run_all(b);
        gen_batch_free(b);
        int agree = o[0].n == ng;
        for (int i = 0; agree && i < ng; i++)
            agree = o[0].tok[i] == (int32_t)json_integer_value(json_array_get(gj, (size_t)i));
        CHECKF(agree, "spec-llama, %s: the greedy ids differ from the PyTorch reference", w.name);
        if (w.prop) CHECKF(o[0].n_drafted > 0, "spec-llama, %s: nothing proposed", w.name);
    }
    spec_free(s[0]);
    spec_free(s[1]);
    kiln_context_free(c);
    kiln_model_free(m);
    json_decref(j);
}

int main(void) {
    alarm(1500);
    /* under the sanitizers (KILN_SANITIZED, several times slower) one model
     * of each kind: dense F32 and Q8_0 caches, hybrid dense and MoE */
    const int full = getenv("KILN_SANITIZED") == NULL;
    const char *const stories_drafts[] = {SPEC_LLAMA};
    identity(STORIES, KILN_KV_F16, stories_drafts, 1);
    const char *const spec_drafts[] = {STORIES};
    if (full) identity(SPEC_LLAMA, KILN_KV_F16, spec_drafts, 1);
    identity(SPEC_LLAMA, KILN_KV_Q8_0, spec_drafts, 1);
    const char *const llama_drafts[] = {"data/fixtures/llama-q4_0.gguf"};
    if (full) identity("data/fixtures/llama.gguf", KILN_KV_F16, llama_drafts, 1);
    const char *const q8_drafts[] = {"data/fixtures/llama.gguf"};
    if (full) identity("data/fixtures/llama-q8_0.gguf", KILN_KV_F16, q8_drafts, 1);
    if (full) identity("data/fixtures/qwen2.gguf", KILN_KV_F16, NULL, 0);
    if (full) identity("data/fixtures/qwen3.gguf", KILN_KV_F16, NULL, 0);
    /* the hybrid family (stories260K's vocabulary): rejected proposals
     * roll the recurrent state back */
    const char *const hybrid_drafts[] = {STORIES};
    identity("data/fixtures/qwen35.gguf", KILN_KV_F16, hybrid_drafts, 1);
    if (full) identity("data/fixtures/qwen3next.gguf", KILN_KV_F16, hybrid_drafts, 1);
    if (full) identity("data/hybrid/qwen35-spm-f32.gguf", KILN_KV_Q8_0, hybrid_drafts, 1);
    identity("data/hybrid/qwen35moe-spm-f16.gguf", KILN_KV_Q8_0, hybrid_drafts, 1);
    test_ngram_index();
    test_reference();
    test_vocab_mismatch();
    test_adaptive();
    kiln_model *m = NULL;
    CHECK(kiln_model_load(STORIES, NULL, &m) == KILN_OK);
    if (m) {
        test_seeded_ngram(m);
        test_ngram_repeat(m);
        test_rejection_rule(m);
        kiln_model_free(m);
    }
    return t_done();
}
