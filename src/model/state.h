/*
 * state — the recurrent-state pool of a context (families with recurrent
 * layers).  Allocated once for n_seq_max sequences: a live slot per
 * sequence holding every recurrent layer's state (the family decides the
 * layout within a slot), and snapshot slots, each a copy of some
 * sequence's live slot after its first pos tokens.
 *
 * A recurrent state cannot be cut back to an earlier position, so a
 * sequence is truncated, reused from the prefix cache or forked only where
 * a snapshot of it exists:
 *   - model_rs_plan lists, before a forward pass, the positions of a run of
 *     tokens where the pass must copy the state into a snapshot (the end
 *     of a prompt chunk, the last block boundary before it, a position
 *     kiln_seq_reuse found shared with other prompts);
 *   - kiln_seq_cache keys the snapshots of the published prefix by its
 *     tokens (and takes one at the current length), so kiln_seq_reuse can
 *     attach a prefix of another sequence only where one fits;
 *   - kiln_seq_truncate restores the snapshot at the position cut to.
 * Snapshot slots are recycled least recently used first.  A snapshot at a
 * position inside a KV block pins that block (model_kv_pin) so its cells stay
 * intact for a later reuse.
 *
 * Rollback (speculative decoding): a run of 2 to MODEL_RS_ROLL_MAX tokens of
 * one sequence that asks for every token's logits (a decode token and the
 * drafts to verify) is computed in the recurrent form, token by token, and
 * recorded: the state before it and each recurrent layer's inputs per
 * token.  Until the sequence changes again, kiln_seq_truncate to any
 * position inside the run restores that state and replays the inputs up to
 * there (model_family.replay), which gives the state one-token decoding would
 * have reached, bit for bit, at the cost of the convolution and the delta
 * rule alone.
 */
#define MODEL_RS_ROLL_MAX 17
#ifndef KILN_STATE_H
#define KILN_STATE_H

#include "model/context.h"

/* Snapshots kept per sequence when kiln_context_params.n_state_snapshots
 * is 0. */
#define MODEL_RS_SNAP_PER_SEQ 4

typedef struct model_snap {
    int32_t pos;                  /* tokens the state covers; -1: slot free */
    int32_t owner;                /* sequence it was taken from and still matches, -1: none */
    int keyed;                    /* 1: key and tail identify its tokens */
    uint64_t key;                 /* model_kv_chain_key of its whole blocks */
    int32_t tail[MODEL_KV_BLOCK]; /* the pos % MODEL_KV_BLOCK tokens after them */
    int32_t pin;                  /* KV block holding those tail cells (pinned), -1: none */
    uint64_t used;                /* LRU clock */
} model_snap;

struct model_rs {
    const backend_backend *be; /* owns mem */
    size_t slot_floats;
    int n_seq, n_snap;
    float *mem; /* [n_seq + n_snap][slot_floats], then roll_state, roll_in: backend memory */
    size_t mem_bytes;
    model_snap *snap; /* [n_snap] */
    uint64_t clock;
    /* per sequence: a position kiln_seq_reuse asked to capture (-1: none) */
    int32_t *want;
    /* per sequence: the recorded run (rollback) */
    int32_t *roll_a, *roll_n; /* its first position and length; roll_n 0: none */
    float *roll_state;        /* [n_seq][slot_floats] the state before it */
    float *roll_in;           /* [n_seq][roll_floats] the family's per-token inputs */
    size_t roll_floats;
    uint64_t n_restored, n_taken, n_replayed; /* counters for tests and stats */
    /* A split model: a mirror of mem on the host part's backend, the same
     * layout, where its layers keep their states (every copy and zero of
     * the pool goes to both); NULL: none. */
    const backend_backend *be_lo;
    float *mem_lo;
};
typedef struct model_rs model_rs;

/* Bytes the pool takes for n_seq sequences and n_snap snapshots, with
 * roll_floats floats of recorded inputs per sequence. */
uint64_t model_rs_bytes(size_t slot_floats, size_t roll_floats, int n_seq, int n_snap);
/* The pool in *out (NULL on a failure: KILN_ERR_NOMEM). */
kiln_status model_rs_new(const backend_backend *be, size_t slot_floats, size_t roll_floats, int n_seq, int n_snap,
                         model_rs **out);
void model_rs_free(model_rs *rs);
/* Maps the pool's mirror on be_lo (-1 when out of memory). */
int model_rs_mirror(model_rs *rs, const backend_backend *be_lo);
/* Where p (in the pool's memory) is in its mirror. */
static inline float *model_rs_lo(const model_rs *rs, const float *p) { return rs->mem_lo + (p - rs->mem); }
static inline float *model_rs_live(model_rs *rs, int seq) { return rs->mem + (size_t)seq * rs->slot_floats; }
static inline float *model_rs_slot(model_rs *rs, int i) { return rs->mem + (size_t)(rs->n_seq + i) * rs->slot_floats; }
static inline float *model_rs_roll_in(model_rs *rs, int seq) { return rs->roll_in + (size_t)seq * rs->roll_floats; }
/* The forward pass records seq's run a .. a + n (rollback): saves the live
 * state now; the family writes its inputs to model_rs_roll_in.  n = 0 drops
 * the record (any other run of seq). */
void model_rs_record(model_rs *rs, int seq, int32_t a, int32_t n);

/* Up to max positions p with a < p <= b where the forward pass over tokens
 * a .. b - 1 of seq must copy the state after token p - 1 into dst[i]
 * (snapshot slots it claims now, owned by seq, unkeyed until
 * kiln_seq_cache).  n_tok: tokens of the run (a prefill chunk takes a
 * snapshot at its end; a single decoded token none).  Returns the count. */
int model_rs_plan(kiln_context *c, int seq, int32_t a, int32_t b, int32_t *pos, float **dst, int max);

/* Called by api.c (kiln_seq_*), see kiln.h. */
kiln_status model_rs_truncate(kiln_context *c, int seq, int32_t p);
int32_t model_rs_reuse(kiln_context *c, int seq, const int32_t *tokens, int32_t n);
void model_rs_cache(kiln_context *c, int seq, const int32_t *tokens, int32_t n);
int32_t model_rs_restorable(const kiln_context *c, int seq, int32_t p);
kiln_status model_rs_copy(kiln_context *c, int src, int dst);

#endif
