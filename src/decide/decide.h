/*
 * decide — the decision engine (kiln.h, "decisions"): a pack is an encoder
 * GGUF (ModernBERT) with typed heads as tensors decision.<head>.* and its
 * configuration as JSON in the metadata key kiln.decision.config
 * (docs/decision.md gives the format).
 *
 * pack.c    the configuration: parsed and checked before anything is
 *           allocated for the model; the heads bound against it
 * frame.c   tokenizing a request, framing its sequences, the truncation
 *           rule and Measure (no forward pass)
 * decide.c  kiln_decider and its jobs: encoder runs, heads, calibration
 *
 * Framing: a question's head part H is its text's tokens, and for an
 * options question each option's: Q [SEP] O (or O alone without text).
 * Every sequence is [CLS] H [SEP] S' [SEP] ([CLS] S' [SEP] when H is empty),
 * where S' is the first budget tokens of the state, and
 *     budget = max_len - 2 - (|H_longest| + 1 when H is not empty)
 * with H_longest the question's longest head part, so all options of a
 * question see the same state tokens.  The state is truncated exactly
 * when it has more tokens than the budget.
 */
#ifndef KILN_DECIDE_H
#define KILN_DECIDE_H

#include "kiln.h"
#include "model/model.h"

#include <stddef.h>
#include <stdint.h>

/* A question type of the configuration. */
typedef struct decide_type {
    char *name;
    int head;     /* index into decide_config.heads */
    int n_labels; /* labels head: > 0; options head: 0 */
    char **labels;
    int slots; /* options head: most options a request may give */
    float temperature;
    /* temperature_by_options buckets [lo, hi] -> t */
    int n_buckets;
    int32_t *b_lo, *b_hi;
    float *b_t;
} decide_type;

/* A head's weights (NULL matrices' data when absent). */
typedef struct decide_head {
    char *name;
    int n_out; /* labels, or 1 for an options head */
    kern_mat dense, out;
    const float *dense_b, *norm_w, *norm_b, *out_b;
} decide_head;

typedef struct decide_config {
    int max_len, head_max_len;
    int pooling;    /* MODEL_POOL_CLS or MODEL_POOL_MEAN */
    float norm_eps; /* the heads' LayerNorm epsilon ("norm_eps", 1e-5) */
    int n_types, n_heads;
    decide_type *types;
    decide_head *heads; /* names from the types; weights bound later */
} decide_config;

/* Parses and checks the JSON configuration text (KILN_ERR_FORMAT when
 * malformed). */
kiln_status decide_config_parse(decide_config *c, const char *json, size_t len);
void decide_config_free(decide_config *c);
/* The configuration of pack f (KILN_ERR_NOT_FOUND without the key,
 * KILN_ERR_FORMAT when malformed), with model_fail's message. */
kiln_status decide_config_load(decide_config *c, const gguf_file *f);
/* Binds every head's tensors from m and checks them and max_len against
 * the model (KILN_ERR_CORRUPT on a disagreement). */
kiln_status decide_heads_bind(decide_config *c, const kiln_model *m);
const decide_type *decide_type_find(const decide_config *c, const char *name);
/* The calibration temperature of a question of type t with n options (the
 * bucket's, else the type's). */
float decide_temperature(const decide_type *t, int n);

/* The framed request (frame.c). */
typedef struct decide_seq {
    int question; /* request index */
    int option;   /* options: which; labels: 0 */
    int head;     /* decide_config.heads index */
    int32_t n;    /* tokens */
    int32_t *tok; /* owned */
} decide_seq;

typedef struct decide_frame {
    int32_t state_tokens;
    int n_q;
    int32_t *budget; /* [n_q] */
    int n_seq;
    decide_seq *seqs; /* every question's sequences (empty when measuring) */
} decide_frame;

/* Tokenizes and frames r against c (every sequence when seqs, otherwise
 * only the budgets).  KILN_ERR_INVALID_ARG for a bad request (unknown type,
 * options on a labels type or missing, more options than the slots, a
 * head part over head_max_len), with model_fail's message. */
kiln_status decide_frame_build(decide_frame *fr, const decide_config *c, const tokenizer *t,
                               const kiln_decide_request *r, int seqs);
void decide_frame_free(decide_frame *fr);

#endif
