/* The KV prefix cache behind kiln serve: blocks published by one sequence
 * are reused by another with the same prefix (same logits as computing them
 * again), truncating into a shared block copies it, unheld blocks stay
 * cached and are evicted least recently used first. */
#include "kiln.h"
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static kiln_model *g_m;

static int feed(kiln_context *c, int seq, const int32_t *ids, int n) {
    int32_t *s = malloc((size_t)n * sizeof *s);
    for (int i = 0; i < n; i++) s[i] = seq;
    kiln_batch b = {n, ids, NULL, s, NULL};
    int rc = kiln_decode(c, &b);
    free(s);
    return rc;
}

static float max_diff(const float *a, const float *b, int n) {
    float d = 0;
    for (int i = 0; i < n; i++) d = fmaxf(d, fabsf(a[i] - b[i]));
    return d;
}

int main(void) {
    CHECK(kiln_model_load("../models/stories260K.gguf", NULL, &g_m) == KILN_OK);
    if (!g_m) return t_done();
    kiln_model_info info;
    kiln_model_get_info(g_m, &info);
    kiln_context_params cp = kiln_context_default_params();
    cp.n_ctx = 128;
    cp.n_seq_max = 2;
    cp.n_threads = 1;
    kiln_context *c;
    CHECK(kiln_context_new(g_m, &cp, &c) == KILN_OK);
    kiln_kv_stats st;
    kiln_kv_get_stats(c, &st);
    CHECK(st.block_tokens == 16 && st.n_blocks == 16); /* 128 / 16 x 2 */

    int32_t p[50];
    for (int i = 0; i < 50; i++) p[i] = 1 + (i * 37) % (info.n_vocab - 1);
    float *ref = malloc((size_t)info.n_vocab * sizeof *ref);
    CHECK(feed(c, 0, p, 50) == KILN_OK);
    memcpy(ref, kiln_get_logits(c, 49), (size_t)info.n_vocab * sizeof *ref);
    CHECK(kiln_seq_cache(c, 0, p, 50) == KILN_OK);

    /* seq 1 shares the three full blocks and computes only the last two */
    CHECK(kiln_seq_reuse(c, 1, p, 50) == 48);
    kiln_kv_get_stats(c, &st);
    CHECK(st.n_used == 4 && st.hit_blocks == 3);
    CHECK(feed(c, 1, p + 48, 2) == KILN_OK);
    CHECKF(max_diff(ref, kiln_get_logits(c, 1), info.n_vocab) < 1e-4f, "reused prefix gives the same logits");
    CHECK(kiln_seq_len(c, 1) == 50);

    /* a whole-block prompt keeps its last token to compute */
    CHECK(kiln_seq_truncate(c, 1, 0) == KILN_OK);
    CHECK(kiln_seq_reuse(c, 1, p, 48) == 32);
    CHECK(kiln_seq_truncate(c, 1, 0) == KILN_OK);

    /* cutting seq 1 inside a shared block copies it: seq 0 is unchanged */
    CHECK(kiln_seq_reuse(c, 1, p, 50) == 48);
    CHECK(kiln_seq_truncate(c, 1, 40) == KILN_OK);
    int32_t other[8] = {5, 6, 7, 8, 9, 10, 11, 12};
    CHECK(feed(c, 1, other, 8) == KILN_OK);
    CHECK(kiln_seq_truncate(c, 0, 49) == KILN_OK);
    CHECK(feed(c, 0, p + 49, 1) == KILN_OK);
    CHECKF(max_diff(ref, kiln_get_logits(c, 0), info.n_vocab) < 1e-4f, "the shared block was not overwritten");

    /* freed blocks stay cached; a later sequence finds them */
    CHECK(kiln_seq_truncate(c, 0, 0) == KILN_OK);
    CHECK(kiln_seq_truncate(c, 1, 0) == KILN_OK);
    kiln_kv_get_stats(c, &st);
    CHECK(st.n_used == 0 && st.n_cached >= 2);
    CHECK(kiln_seq_reuse(c, 0, p, 50) >= 32);
    CHECK(kiln_seq_truncate(c, 0, 0) == KILN_OK);

    /* filling every block with other prompts evicts the old ones */
    int32_t q[128];
    for (int round = 0; round < 3; round++) {
        for (int i = 0; i < 128; i++) q[i] = 1 + (i * 13 + round * 101) % (info.n_vocab - 1);
        CHECK(feed(c, 0, q, 127) == KILN_OK);
        CHECK(kiln_seq_cache(c, 0, q, 127) == KILN_OK);
        CHECK(feed(c, 1, q + 1, 127) == KILN_OK);
        CHECK(kiln_seq_truncate(c, 0, 0) == KILN_OK);
        CHECK(kiln_seq_truncate(c, 1, 0) == KILN_OK);
    }
    CHECK(kiln_seq_reuse(c, 0, p, 50) == 0);
    CHECK(kiln_seq_reuse(c, 0, q, 127) == 112);
    CHECK(kiln_seq_reuse(c, 1, p, 50) == 0);

    free(ref);
    kiln_context_free(c);
    kiln_model_free(g_m);
    return t_done();
}
