/*
 * spec — the proposers of speculative decoding (kiln_spec_params), as
 * gen_proposer tables for the generation core (gen.h), which verifies.
 *
 *   spec.c   making one from kiln_spec_params; drawing a proposal from a
 *            model's logits (spec_chain), shared by the model proposers
 *   ngram.c  prompt lookup: the continuation of the latest earlier
 *            occurrence of a sequence's last n tokens (n from ngram_max down
 *            to ngram_min) in its prompt and output so far
 *   draft.c  a draft model of the target's vocabulary, with a context of
 *            its own holding one sequence per target sequence
 *   mtp.c    the target's own MTP (NextN) block, run on the target's
 *            context (model_mtp_step, model/mtp.h), chained
 *
 * A proposer answers every speculating slot of a step in one call, so a
 * model proposer runs one batch per proposal position for all of them.
 * Greedy slots get the proposer's argmax (deterministic proposals);
 * sampling slots get a token drawn from the proposer's distribution under
 * the slot's top-k, top-p, min-p and temperature (no penalties), cut to its
 * SPEC_DIST_MAX most likely tokens and renormalized, together with that
 * distribution, for the rejection rule (gen.h).
 *
 * Ownership: a spec borrows the target model and context (they outlive
 * it) and owns whatever it loads (the draft model and its context).
 */
#ifndef KILN_SPEC_H
#define KILN_SPEC_H

#include "gen/gen.h"

typedef struct spec spec;

/* The proposer p asks for, over target model m and its context c.  A
 * draft model is loaded and its vocabulary checked against m's; MTP needs
 * a model with MTP blocks and c made with kiln_context_params.mtp.  On
 * failure the status with kiln_last_error() set, *out NULL. */
kiln_status spec_new(const kiln_spec_params *p, kiln_model *m, kiln_context *c, spec **out);
void spec_free(spec *s);
const gen_proposer *spec_proposer(const spec *s);
/* The params in effect (defaults filled in). */
const kiln_spec_params *spec_params(const spec *s);

/* ---- for the proposers (spec.c) ---- */

/* The most tokens of a draft distribution handed to the verifier. */
#define SPEC_DIST_MAX 64

/* One sequence's way from logits to proposals. */
typedef struct spec_chain {
    kiln_sampler *smp;      /* temperature > 0: the slot's cuts, no penalties */
    kiln_sampler_params sp; /* what smp was made with */
    int32_t n_vocab;
    gen_dist dist[GEN_DRAFT_MAX];
    int32_t id[GEN_DRAFT_MAX][SPEC_DIST_MAX];
    float pr[GEN_DRAFT_MAX][SPEC_DIST_MAX];
} spec_chain;

/* Readies ch for a slot with sampling params sp (a new sampler when they
 * changed); 0, or -1 when out of memory. */
int spec_chain_begin(spec_chain *ch, const kiln_sampler_params *sp, int32_t n_vocab);
/* Proposal i (< GEN_DRAFT_MAX) from logits (ch->n_vocab floats): the
 * argmax when greedy, -1 if its probability is below p_min; else a token
 * drawn from the cut distribution, which ch->dist[i] then holds. */
int32_t spec_chain_pick(spec_chain *ch, int32_t i, const float *logits, float p_min);
/* 1 when ch's proposals come with distributions (sampling). */
static inline int spec_chain_drawn(const spec_chain *ch) { return ch->sp.temperature > 0; }
void spec_chain_free(spec_chain *ch);

/* The longest n-gram the lookup takes. */
#define SPEC_NGRAM_MAX 16

/* The kinds (ownership as spec's). */
typedef struct spec_ngram spec_ngram;
spec_ngram *spec_ngram_new(const kiln_spec_params *p, int32_t n_seq, int32_t n_ctx);
void spec_ngram_propose(void *self, gen_ask *asks, int32_t n);
void spec_ngram_free(spec_ngram *g);

typedef struct spec_draft spec_draft;
spec_draft *spec_draft_new(const kiln_spec_params *p, kiln_model *m, kiln_context *c);
void spec_draft_propose(void *self, gen_ask *asks, int32_t n);
void spec_draft_free(spec_draft *d);

typedef struct spec_mtp spec_mtp;
spec_mtp *spec_mtp_new(const kiln_spec_params *p, kiln_model *m, kiln_context *c);
void spec_mtp_propose(void *self, gen_ask *asks, int32_t n);
void spec_mtp_free(spec_mtp *t);

#endif
