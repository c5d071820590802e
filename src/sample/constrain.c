/* Sampling under a constraint, the JSON recognizer as a constraint, and
 * logprobs (sample.h). */
#include "sample/sample.h"

#include "sample/jschema.h"

#include <math.h>
#include <string.h>

/* 1 when c lets token id come next. */
static int fits(const sample_constraint *c, const kiln_model *m, int32_t id) {
    if (kiln_token_is_eog(m, id)) return c->complete(c->state);
    char piece[SAMPLE_PIECE_MAX];
    int n = kiln_token_to_piece(m, id, piece, sizeof piece, 0);
    return n > 0 && n <= (int)sizeof piece && c->allows(c->state, piece, n);
}

int32_t sample_constrained(kiln_sampler *s, const kiln_model *m, int32_t nv, const float *logits, float *scratch,
                           const sample_constraint *c) {
    /* the sampler's choice, then once more with it masked: cheap, and
     * keeps the sampler's distribution wherever the constraint agrees */
    int32_t id = kiln_sampler_sample(s, logits);
    for (int tries = 0; tries < 2; tries++) {
        if (fits(c, m, id)) return id;
        if (tries == 0) memcpy(scratch, logits, (size_t)nv * sizeof(float));
        scratch[id] = -INFINITY;
        if (tries == 0) id = kiln_sampler_sample(s, scratch);
    }
    /* a scan by logit: the most likely token that fits */
    int32_t best = -1;
    for (int32_t i = 0; i < nv; i++) {
        if (scratch[i] == -INFINITY || (best >= 0 && scratch[i] <= scratch[best])) continue;
        if (fits(c, m, i)) best = i;
    }
    return best; /* -1: a dead end, which is not an end the constraint accepts */
}

void sample_constraint_accept(const sample_constraint *c, const kiln_model *m, int32_t id) {
    if (kiln_token_is_eog(m, id)) return;
    char piece[SAMPLE_PIECE_MAX];
    int n = kiln_token_to_piece(m, id, piece, sizeof piece, 0);
    if (n > 0 && n <= (int)sizeof piece) c->accept(c->state, piece, n);
}

/* ---- the JSON recognizer as a constraint ---- */

static int json_allows(void *st, const char *text, int n) { return sample_sv_accepts(st, text, n); }
static int json_complete(void *st) { return sample_sv_complete(st); }
static int json_done(void *st) { return ((const sample_sv *)st)->done; }

static void json_accept(void *st, const char *text, int n) {
    for (int i = 0; i < n; i++) sample_sv_byte(st, (unsigned char)text[i]);
}

void sample_json_constraint(sample_constraint *c, struct sample_sv *v) {
    c->allows = json_allows;
    c->complete = json_complete;
    c->accept = json_accept;
    c->done = json_done;
    c->state = v;
}

/* ---- logprobs ---- */

int32_t sample_logprobs(const float *lg, int32_t nv, int32_t id, int32_t n_top, float *logprob, int32_t *top_id,
                        float *top_lp) {
    float mx = lg[0];
    for (int32_t i = 1; i < nv; i++) mx = lg[i] > mx ? lg[i] : mx;
    double sum = 0;
    for (int32_t i = 0; i < nv; i++) sum += exp((double)(lg[i] - mx));
    const float lse = mx + (float)log(sum);
    *logprob = lg[id] - lse;
    if (n_top > SAMPLE_TOP_MAX) n_top = SAMPLE_TOP_MAX;
    int32_t k = 0;
    for (; k < n_top; k++) {
        int32_t best = -1;
        for (int32_t i = 0; i < nv; i++) {
            if (best >= 0 && lg[i] <= lg[best]) continue;
            int seen = 0;
            for (int32_t j = 0; j < k; j++) seen |= top_id[j] == i;
            if (!seen) best = i;
        }
        if (best < 0) break;
        top_id[k] = best;
        top_lp[k] = lg[best] - lse;
    }
    return k;
}
