/*
 * The sampler (src/sample/): a seed gives the same draws and another seed
 * others; top-k 1 and temperature 0 are greedy, taking the first maximum
 * wherever it sits (inside a 16-wide block, in the tail, tied, after a NaN);
 * a repeat penalty pushes an accepted winner down; every draw stays within
 * top-k.  A reasoning block before a JSON answer (think.c): any text inside
 * the block, the schema only after it, a token crossing from one into the
 * other.
 */
#include "kiln.h"
#include "sample/sample.h"
#include "testutil.h"

#include <jansson.h>
#include <math.h>
#include <string.h>

static int argmax(const float *x, int n) {
    int b = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[b]) b = i;
    return b;
}

static void test_sampler(void) {
    float logits[512];
    for (int i = 0; i < 512; i++) logits[i] = sinf((float)i * 0.37f) * 3.0f;
    kiln_sampler_params p = kiln_sampler_default_params();
    p.temperature = 1.0f;
    int32_t a[64], b[64], d[64];
    kiln_sampler *s;
    for (int run = 0; run < 3; run++) {
        p.seed = run == 2 ? 7 : 42;
        CHECK(kiln_sampler_new(&p, 512, &s) == KILN_OK);
        for (int i = 0; i < 64; i++) {
            int32_t t = kiln_sampler_sample(s, logits);
            (run == 0 ? a : run == 1 ? b : d)[i] = t;
            kiln_sampler_accept(s, t);
        }
        kiln_sampler_free(s);
    }
    CHECK(memcmp(a, b, sizeof a) == 0); /* same seed, same tokens */
    CHECK(memcmp(a, d, sizeof a) != 0); /* another seed, another draw */
    /* top-k 1 is greedy whatever the temperature */
    p.top_k = 1;
    CHECK(kiln_sampler_new(&p, 512, &s) == KILN_OK);
    CHECK(kiln_sampler_sample(s, logits) == argmax(logits, 512));
    kiln_sampler_free(s);
    /* greedy is the first maximum, wherever it sits: in a 16-wide block, in
     * the tail after the last whole block, tied, or after a leading NaN */
    {
        enum { NV = 517 };
        static float g[NV];
        kiln_sampler_params gp = kiln_sampler_default_params();
        gp.temperature = 0;
        CHECK(kiln_sampler_new(&gp, NV, &s) == KILN_OK);
        const int where[] = {0, 1, 15, 16, 255, 511, 512, 516};
        int ok_g = 1;
        for (size_t w = 0; w < sizeof where / sizeof where[0]; w++) {
            for (int i = 0; i < NV; i++) g[i] = sinf((float)i * 0.37f);
            g[where[w]] = 9.0f;
            ok_g &= kiln_sampler_sample(s, g) == where[w];
            if (where[w] < 500) g[where[w] + 7] = 9.0f; /* a later tie loses */
            ok_g &= kiln_sampler_sample(s, g) == where[w];
            ok_g &= kiln_sampler_sample(s, g) == argmax(g, NV);
        }
        g[0] = NAN;
        ok_g &= kiln_sampler_sample(s, g) == argmax(g, NV);
        for (int i = 0; i < NV; i++) g[i] = -INFINITY;
        ok_g &= kiln_sampler_sample(s, g) == 0;
        CHECK(ok_g);
        kiln_sampler_free(s);
    }
    /* a repeat penalty pushes an accepted greedy winner down */
    p = kiln_sampler_default_params();
    p.temperature = 0;
    p.repeat_penalty = 100.0f;
    CHECK(kiln_sampler_new(&p, 512, &s) == KILN_OK);
    int32_t first = kiln_sampler_sample(s, logits);
    kiln_sampler_accept(s, first);
    CHECK(kiln_sampler_sample(s, logits) != first);
    kiln_sampler_free(s);
    /* every draw stays within top-k */
    p = kiln_sampler_default_params();
    p.temperature = 5.0f;
    p.top_k = 3;
    p.top_p = 1.0f;
    p.min_p = 0.0f;
    CHECK(kiln_sampler_new(&p, 512, &s) == KILN_OK);
    float sorted[512];
    memcpy(sorted, logits, sizeof sorted);
    int ok = 1;
    for (int i = 0; i < 200; i++) {
        int32_t t = kiln_sampler_sample(s, logits);
        int above = 0;
        for (int k = 0; k < 512; k++) above += sorted[k] > logits[t];
        ok &= above < 3;
    }
    CHECK(ok);
    kiln_sampler_free(s);
}

/* Feeds text byte by byte to a reasoning wrapper of {"a": boolean} opened
 * as think says; returns the bytes taken, *whole when all were and the
 * answer is complete. */
static int think_feed(const sample_schema *sc, int think, const char *text, int *whole) {
    sample_sv v;
    sample_sv_init(&v, sc);
    sample_constraint json, c;
    sample_json_constraint(&json, &v);
    sample_think t;
    sample_think_init(&t, &json, think);
    sample_think_constraint(&c, &t);
    const int len = (int)strlen(text);
    int i = 0;
    for (; i < len; i++) {
        if (!c.allows(c.state, text + i, 1)) break;
        c.accept(c.state, text + i, 1);
    }
    *whole = i == len && c.complete(c.state) && c.done(c.state);
    return i;
}

static void test_think(void) {
    json_t *j = json_loads("{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"boolean\"}},\"required\":[\"a\"],"
                           "\"additionalProperties\":false}",
                           0, NULL);
    char err[200];
    sample_schema *sc = sample_schema_compile(j, err, sizeof err);
    json_decref(j);
    CHECK(sc != NULL);
    static const struct {
        int think;
        const char *text;
        int stop; /* -1: all taken and complete; 1000: all taken, not complete; else the byte refused */
    } cases[] = {
        {2, "Let me see: {\"a\": 1} is not it.</think>\n\n{\"a\": true}", -1}, /* anything in the block */
        {2, "x < y </thin> </think>{\"a\":false}", -1},                        /* near misses of the end */
        {1, "\n<think>hmm</think>\n{\"a\": true}", -1},                        /* the model opens the block */
        {1, "{\"a\": true}", -1},                                              /* or answers at once */
        {1, "<thinx", 5},                                                      /* not the tag: refused */
        {2, "no end {\"a\": true}", 1000},                                     /* still inside: not complete */
        {2, "done</think>\n\nplain text", 14},                                 /* after it, the schema holds */
        {0, "<think>", 0},                                                     /* no block at all */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int whole;
        const int got = think_feed(sc, cases[i].think, cases[i].text, &whole);
        if (cases[i].stop == -1)
            CHECKF(got == (int)strlen(cases[i].text) && whole, "case %zu: stopped at %d (whole %d)", i, got, whole);
        else if (cases[i].stop >= 1000)
            CHECKF(got == (int)strlen(cases[i].text) && !whole, "case %zu: stopped at %d (whole %d)", i, got, whole);
        else
            CHECKF(got == cases[i].stop, "case %zu: stopped at %d, not %d", i, got, cases[i].stop);
    }
    /* a token may cross from the block into the answer; complete only once
     * the answer is */
    sample_sv v;
    sample_sv_init(&v, sc);
    sample_constraint json, c;
    sample_json_constraint(&json, &v);
    sample_think t;
    sample_think_init(&t, &json, 2);
    sample_think_constraint(&c, &t);
    CHECK(sample_think_in_block(&t) && !c.complete(c.state));
    CHECK(c.allows(c.state, "ok.</th", 7));
    c.accept(c.state, "ok.</th", 7);
    const char *bad = "ink>\n\nnope", *good = "ink>\n\n{\"a\"";
    CHECK(!c.allows(c.state, bad, (int)strlen(bad)));
    CHECK(c.allows(c.state, good, (int)strlen(good)));
    c.accept(c.state, good, (int)strlen(good));
    CHECK(!sample_think_in_block(&t) && !c.complete(c.state));
    c.accept(c.state, ": true}", 7);
    CHECK(c.complete(c.state) && c.done(c.state));
    sample_schema_free(sc);
}

/* An exact lead, then {"a": boolean}: byte by byte and in pieces that
 * cross from the lead into the answer. */
static void test_lead(void) {
    json_t *j =
        json_loads("{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"boolean\"}},\"required\":[\"a\"]}", 0, NULL);
    char err[200];
    sample_schema *sc = sample_schema_compile(j, err, sizeof err);
    json_decref(j);
    CHECK(sc != NULL);
    const char *lead = "<|channel|>final<|message|>";
    for (int step = 1; step <= 5; step += 4) {
        sample_sv v;
        sample_sv_init(&v, sc);
        sample_constraint json, c;
        sample_json_constraint(&json, &v);
        sample_lead l;
        sample_lead_init(&l, lead, &json);
        sample_lead_constraint(&c, &l);
        CHECK(!c.complete(c.state) && !c.allows(c.state, "{", 1) && !c.allows(c.state, "<|channel|>analysis", 19));
        const char *text = "<|channel|>final<|message|>{\"a\": true}";
        const int len = (int)strlen(text);
        int ok = 1;
        for (int i = 0; i < len && ok; i += step) {
            const int n = len - i < step ? len - i : step;
            ok = c.allows(c.state, text + i, n);
            if (ok) c.accept(c.state, text + i, n);
        }
        CHECKF(ok && c.complete(c.state) && c.done(c.state), "lead in pieces of %d", step);
    }
    sample_schema_free(sc);
}

int main(void) {
    test_sampler();
    test_think();
    test_lead();
    return t_done();
}
