/* Making a proposer from kiln_spec_params, and drawing proposals from a
 * model's logits (spec.h). */
#include "spec/spec.h"

#include "base/base.h"
#include "sample/sample.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

kiln_spec_params kiln_spec_default_params(void) {
    kiln_spec_params p;
    memset(&p, 0, sizeof p);
    p.type = KILN_SPEC_NONE;
    p.n_max = 8;
    p.ngram_min = 2;
    p.ngram_max = 5;
    return p;
}

static const char *const k_names[] = {"none", "ngram", "draft", "mtp"};

const char *kiln_spec_type_str(kiln_spec_type t) {
    return (unsigned)t < sizeof k_names / sizeof k_names[0] ? k_names[t] : "unknown";
}

int kiln_spec_type_from_str(const char *s) {
    for (int i = 0; s && i < (int)(sizeof k_names / sizeof k_names[0]); i++)
        if (!strcmp(s, k_names[i])) return i;
    return -1;
}

struct spec {
    gen_proposer prop;
    kiln_spec_params p;
    spec_ngram *ngram;
    spec_draft *draft;
    spec_mtp *mtp;
};

kiln_status spec_new(const kiln_spec_params *params, kiln_model *m, kiln_context *c, spec **out) {
    *out = NULL;
    kiln_spec_params p = params ? *params : kiln_spec_default_params();
    const kiln_spec_params d = kiln_spec_default_params();
    if (p.n_max <= 0) p.n_max = d.n_max;
    if (p.n_max > GEN_DRAFT_MAX)
        return base_fail(KILN_ERR_INVALID_ARG, "--spec-n %d exceeds %d", p.n_max, GEN_DRAFT_MAX);
    if (p.ngram_min <= 0) p.ngram_min = d.ngram_min;
    if (p.ngram_max <= 0) p.ngram_max = p.ngram_min > d.ngram_max ? p.ngram_min : d.ngram_max;
    if (p.ngram_min > p.ngram_max || p.ngram_max > SPEC_NGRAM_MAX)
        return base_fail(KILN_ERR_INVALID_ARG, "n-gram lengths %d..%d: need 1 <= min <= max <= %d", p.ngram_min,
                         p.ngram_max, SPEC_NGRAM_MAX);
    if (p.p_min < 0 || p.p_min > 1) return base_fail(KILN_ERR_INVALID_ARG, "p_min %g is not in [0, 1]", p.p_min);
    spec *s = calloc(1, sizeof *s);
    if (!s) return base_fail(KILN_ERR_NOMEM, "out of memory");
    s->p = p;
    s->p.draft_model = NULL; /* borrowed only while loading */
    kiln_status st = KILN_OK;
    switch (p.type) {
    case KILN_SPEC_NGRAM:
        s->ngram = spec_ngram_new(&p, kiln_context_n_seq_max(c), kiln_context_n_ctx(c));
        if (!s->ngram) st = base_fail(KILN_ERR_NOMEM, "out of memory for the n-gram index");
        s->prop = (gen_proposer){spec_ngram_propose, s->ngram, 1};
        break;
    case KILN_SPEC_DRAFT:
        if (!p.draft_model || !p.draft_model[0]) {
            st = base_fail(KILN_ERR_INVALID_ARG, "speculative decoding with a draft model needs --draft-model");
            break;
        }
        s->draft = spec_draft_new(&p, m, c);
        if (!s->draft) st = KILN_ERR_INVALID_ARG; /* the message is set */
        s->prop = (gen_proposer){spec_draft_propose, s->draft, 0};
        break;
    case KILN_SPEC_MTP:
        s->mtp = spec_mtp_new(&p, m, c);
        if (!s->mtp) st = KILN_ERR_UNSUPPORTED;
        s->prop = (gen_proposer){spec_mtp_propose, s->mtp, 0};
        break;
    default: st = base_fail(KILN_ERR_INVALID_ARG, "unknown speculative decoding type %d", (int)p.type);
    }
    if (st != KILN_OK) {
        spec_free(s);
        return st;
    }
    *out = s;
    return KILN_OK;
}

void spec_free(spec *s) {
    if (!s) return;
    spec_ngram_free(s->ngram);
    spec_draft_free(s->draft);
    spec_mtp_free(s->mtp);
    free(s);
}

const gen_proposer *spec_proposer(const spec *s) { return &s->prop; }
const kiln_spec_params *spec_params(const spec *s) { return &s->p; }

/* ---------------------------------------------------------------- chains */

int spec_chain_begin(spec_chain *ch, const kiln_sampler_params *sp, int32_t n_vocab) {
    kiln_sampler_params want = *sp;
    /* the cuts and the temperature of the slot, no penalties (they follow
     * the target's history, which the proposal would only imitate) */
    want.repeat_penalty = 1.0f;
    want.presence_penalty = 0;
    want.frequency_penalty = 0;
    want.seed = sp->seed ^ 0x5bec0de5bec0de5ull;
    if (ch->n_vocab == n_vocab && (ch->smp || want.temperature <= 0) && !memcmp(&want, &ch->sp, sizeof want)) return 0;
    kiln_sampler_free(ch->smp);
    ch->smp = NULL;
    ch->sp = want;
    ch->n_vocab = n_vocab;
    if (want.temperature > 0 && kiln_sampler_new(&want, n_vocab, &ch->smp) != KILN_OK) {
        ch->n_vocab = 0;
        return -1;
    }
    return 0;
}

int32_t spec_chain_pick(spec_chain *ch, int32_t i, const float *lg, float p_min) {
    const int32_t nv = ch->n_vocab;
    if (ch->sp.temperature <= 0 || !ch->smp) {
        int32_t best = 0;
        for (int32_t k = 1; k < nv; k++)
            if (lg[k] > lg[best]) best = k;
        if (p_min > 0) { /* its probability at temperature 1 */
            double sum = 0;
            for (int32_t k = 0; k < nv; k++) sum += exp((double)(lg[k] - lg[best]));
            if (1.0 / sum < p_min) return -1;
        }
        return best;
    }
    const int32_t *ids;
    const float *pr;
    int32_t n = sample_dist(ch->smp, lg, &ids, &pr);
    if (n > SPEC_DIST_MAX) n = SPEC_DIST_MAX;
    double tot = 0;
    for (int32_t k = 0; k < n; k++) tot += pr[k];
    for (int32_t k = 0; k < n; k++) {
        ch->id[i][k] = ids[k];
        ch->pr[i][k] = (float)(pr[k] / tot);
    }
    ch->dist[i] = (gen_dist){n, ch->id[i], ch->pr[i]};
    const int32_t at = sample_pick(ch->smp, ch->pr[i], n);
    return ch->id[i][at >= 0 ? at : 0];
}

void spec_chain_free(spec_chain *ch) {
    kiln_sampler_free(ch->smp);
    memset(ch, 0, sizeof *ch);
}
