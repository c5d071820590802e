/*
 * The sampler (src/sample/): a seed gives the same draws and another seed
 * others; top-k 1 and temperature 0 are greedy, taking the first maximum
 * wherever it sits (inside a 16-wide block, in the tail, tied, after a NaN);
 * a repeat penalty pushes an accepted winner down; every draw stays within
 * top-k.
 */
#include "kiln.h"
#include "testutil.h"

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

int main(void) {
    test_sampler();
    return t_done();
}
