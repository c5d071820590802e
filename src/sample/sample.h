/*
 * sample — choosing tokens from logits.
 *
 * sampler.c    kiln_sampler (kiln.h): penalties, top-k, top-p, min-p,
 *              temperature, seeded draw
 * constrain.c  sampling under a constraint: a hook that says which token
 *              texts may come next (structured output), the JSON
 *              recognizer as such a hook, and log-softmax with the top
 *              alternatives (logprobs)
 * call.c       a forced tool call as such a hook
 * think.c      a reasoning block before another hook's text (structured
 *              output after thinking), and the tracker of that block; a
 *              fixed lead before another hook's text
 * jschema.c    a JSON Schema compiled to a byte-level recognizer (jschema.h)
 * regex.c      a regex subset compiled to a DFA over UTF-8 bytes, for
 *              jschema's pattern and format (regex.h)
 *
 * Nothing here runs a model: callers hand in logits and get token ids.
 */
#ifndef KILN_SAMPLE_H
#define KILN_SAMPLE_H

#include "kiln.h"
#include "sample/jschema.h"

#include <stdint.h>

/* What may be generated next.  The hook looks at token texts (the bytes
 * kiln_token_to_piece gives, special tokens not rendered), so it knows
 * nothing of vocabularies.  state belongs to whoever set the hook up and
 * must outlive its use. */
typedef struct sample_constraint {
    /* 1 when the n bytes of a token may follow the text so far. */
    int (*allows)(void *state, const char *text, int n);
    /* 1 when the text so far is complete, so generation may end here (an
     * end-of-generation token is allowed only then). */
    int (*complete)(void *state);
    /* The chosen token's bytes: advance past them. */
    void (*accept)(void *state, const char *text, int n);
    /* 1 when nothing more may follow: generation ends after this token. */
    int (*done)(void *state);
    void *state;
} sample_constraint;

/* Bytes a token text may have for the constraint to consider it; longer
 * tokens are never allowed. */
#define SAMPLE_PIECE_MAX 256

/* Samples from logits (n_vocab floats, unchanged) under c: the sampler's
 * own choice when c allows it, else one more draw with that token masked,
 * else the most likely token c allows (an end-of-generation token counts
 * only where c is complete), else -1: no token leads on (the caller ends
 * generation as failed, never as a finished text).  scratch holds n_vocab
 * floats.  The caller then tells c about the token
 * (sample_constraint_accept). */
int32_t sample_constrained(kiln_sampler *s, const kiln_model *m, int32_t n_vocab, const float *logits, float *scratch,
                           const sample_constraint *c);
/* Feeds token id's text to c (nothing for an end-of-generation token). */
void sample_constraint_accept(const sample_constraint *c, const kiln_model *m, int32_t id);

/* The constraint of a JSON recognizer (jschema.h): v must outlive c. */
void sample_json_constraint(sample_constraint *c, struct sample_sv *v);

/* call.c: a forced tool call.  The output is an optional <think> block
 * (when think), then <tool_call>{"name": "NAME", "arguments": ARGS}
 * </tool_call> and nothing more, NAME one of names[0..n) and ARGS a value of
 * the matching schema (NULL: any JSON value).  names and schemas are
 * borrowed and must outlive k; k is plain data (copied to try a token). */
#define SAMPLE_CALL_MAX 64
struct sample_schema;
/* The literals around a call (sample_call_init_form): open, then head,
 * NAME, mid (not empty: its first byte ends the name), ARGS, tail, close.
 * Blanks (up to 2) may stand before open, head, tail and close; an empty
 * literal is left out with the blanks before it. */
typedef struct sample_call_form {
    const char *open, *head, *mid, *tail, *close;
} sample_call_form;
typedef struct sample_call {
    const sample_call_form *form;
    const char *const *names;
    const struct sample_schema *const *schemas;
    int n_names;
    int phase, pos, ws, pick;
    uint64_t cand;       /* which opening literals are still possible */
    uint64_t names_left; /* which names are still possible */
    struct sample_sv sv; /* the arguments' recognizer (last: call.c copies the frames in use only) */
} sample_call;
/* -1 when n is not 1..SAMPLE_CALL_MAX or a name is empty, repeated or
 * holds a '"', '\\' or a control character. */
int sample_call_init(sample_call *k, const char *const *names, const struct sample_schema *const *schemas, int n,
                     int think);
/* The same in another family's form (borrowed, outliving k); a name may
 * not hold the first byte of form->mid either. */
int sample_call_init_form(sample_call *k, const sample_call_form *form, const char *const *names,
                          const struct sample_schema *const *schemas, int n, int think);
void sample_call_constraint(sample_constraint *c, sample_call *k);
/* The name the call has settled on, or NULL before its closing quote. */
const char *sample_call_name(const sample_call *k);

/* think.c: reasoning, then a constrained answer.  The text is an optional
 * "<think>...</think>" block (think 1: the model may open one; 2: the prompt
 * opened it, so the text starts inside; 0: no block), then what inner
 * allows (NULL: any text).  The answer must not begin with '<' (JSON does
 * not).  inner is borrowed and must outlive t; t is plain data. */
typedef struct sample_think {
    const sample_constraint *inner;
    int phase, pos, ws;
} sample_think;
void sample_think_init(sample_think *t, const sample_constraint *inner, int think);
void sample_think_constraint(sample_constraint *c, sample_think *t);
/* Advances t past n bytes of generated text (feeding the answer's to
 * inner): a tracker of where the text is, with or without a constraint. */
void sample_think_accept(sample_think *t, const char *text, int n);
/* 1 inside the block: after "<think>", before its "</think>" ended. */
int sample_think_in_block(const sample_think *t);

/* think.c: an exact lead, then a constrained answer: the text is lead
 * (NUL-terminated, borrowed), then what inner allows (NULL: any text).  A
 * harmony model's (gpt-oss) JSON answer: "<|channel|>final<|message|>",
 * then the value.  l is plain data. */
typedef struct sample_lead {
    const char *lead;
    const sample_constraint *inner;
    int pos; /* bytes of lead matched */
} sample_lead;
void sample_lead_init(sample_lead *l, const char *lead, const sample_constraint *inner);
void sample_lead_constraint(sample_constraint *c, sample_lead *l);
/* The distribution kiln_sampler_sample draws from after logits (penalties
 * over s's history, top-k, top-p, min-p, temperature): n tokens, most
 * likely first, probabilities summing to 1; greedy is the argmax alone
 * with 1.  Draws nothing.  *ids and *probs point into s, valid until its
 * next call.  Speculative verification needs the distribution itself. */
int32_t sample_dist(kiln_sampler *s, const float *logits, const int32_t **ids, const float **probs);
/* Uniform in [0, 1) from s's generator (one draw). */
double sample_uniform(kiln_sampler *s);
/* An index i < n drawn with probability w[i] / sum(w) (weights <= 0 never
 * come out) from s's generator; -1 when every weight is <= 0. */
int32_t sample_pick(kiln_sampler *s, const float *w, int32_t n);
/* The parameters s was made with (top_p and repeat_penalty as normalized). */
const kiln_sampler_params *sample_params(const kiln_sampler *s);

/* Most alternatives sample_logprobs reports. */
#define SAMPLE_TOP_MAX 20

/* The log-softmax of logits[id] (n_vocab floats) in *logprob, and the
 * n_top (<= SAMPLE_TOP_MAX) most likely tokens with theirs, best first,
 * ties by id.  Returns how many alternatives were written. */
int32_t sample_logprobs(const float *logits, int32_t n_vocab, int32_t id, int32_t n_top, float *logprob,
                        int32_t *top_id, float *top_lp);

#endif
