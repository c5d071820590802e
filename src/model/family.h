/*
 * The family contract: what a family file (dense.c, gemma.c, ...) needs to
 * declare itself and bind its weights.  The model_family table row, the
 * hyperparameters model.c reads for every family, the model struct, and
 * the binding helpers (family.c).  A family's forward pass also includes
 * context.h (through decoder.h or encoder.h) for the context it runs on.
 */
#ifndef KILN_MODEL_FAMILY_H
#define KILN_MODEL_FAMILY_H

#include "kiln.h"

#include "backend/backend.h"
#include "base/base.h"
#include "gguf/gguf.h"
#include "kernels/matmul.h"
#include "kernels/ops.h"
#include "thread/pool.h"
#include "tokenizer/tokenizer.h"

#include <stddef.h>
#include <stdint.h>

typedef struct model_family model_family;

/* One supported general.architecture: its family and that family's
 * switches for it (meaning private to the family). */
typedef struct model_arch {
    const char *name;
    const model_family *family;
    int encoder; /* = family->encoder: embeds, cannot generate */
    unsigned flags;
} model_arch;

/* The arch row for a name, NULL when no family serves it. */
const model_arch *model_arch_find(const char *name);
/* Comma-separated list of supported names, for error messages. */
const char *model_arch_list(void);

/* Hyperparameters every family reads the same way (model.c fills them
 * from {arch}.* keys before the family's bind; a family may refine them). */
typedef struct model_hparams {
    int n_vocab, n_ctx_train, n_embd, n_layer, n_head, n_head_kv, n_ff;
    int hd_k, hd_v; /* per-head key/value width */
    float eps;      /* RMSNorm epsilon */
    kern_rope rope;
    /* LongRoPE: the divisors used instead of rope.freq_factors when a
     * sequence's context exceeds rope.n_ctx_orig; NULL: rope's always */
    const float *rope_factors_long;
    int n_cls_out; /* outputs of a classification head (rank pooling), 0: none */
    /* floats of an input embedding row (kiln_batch_inputs.embd): n_embd, or
     * n_embd * (1 + deepstack layers) for qwen3vl */
    int n_embd_inp;
} model_hparams;

/* What a sequence of this model holds besides its length: the KV cache of
 * its attention layers (indexed by attention-layer ordinal) and a
 * recurrent-state slot of rs_floats floats (0: none). */
typedef struct model_seq_shape {
    int n_attn_layer;  /* layers with a KV cache */
    int n_head_kv, hd; /* their KV heads and head size (the largest, with layer_*) */
    /* [n_attn_layer] each layer's KV heads and head size when they differ
     * (the family's memory); NULL: n_head_kv and hd everywhere */
    const int32_t *layer_n_head_kv, *layer_hd;
    int v_in_k;         /* 1: V is each K row itself (a latent, MLA), not stored apart */
    int pos_cells;      /* 1: each cell keeps the M-RoPE position of the token after it (model_kv.rnext) */
    size_t rs_floats;   /* recurrent state per sequence */
    size_t roll_floats; /* recorded inputs of a rollback run (state.h) */
} model_seq_shape;

/* The weights the backend may prepare (model.c's prepare): matrices and the
 * small F32 vectors that sit between them in the file. */
typedef struct model_weights {
    kern_mat **mats;
    int n_mats, cap_mats;
    const float ***vecs;
    int64_t *vlen;
    int n_vecs, cap_vecs;
    int failed; /* an append ran out of memory */
    /* A split model (kiln_model.gpu_l0): 0 lists every weight; 1 only the
     * host part's (the embeddings, the head, layers below l0), 2 only the
     * GPU's (layers l0 and up).  The family says which layer it lists with
     * model_weights_layer (layer1: that layer + 1; 0: none, the head's). */
    int part, l0, layer1;
} model_weights;
void model_weights_mat(model_weights *w, kern_mat *m);
void model_weights_vec(model_weights *w, const float **v, int64_t len);
/* What the family lists next belongs to layer l (-1: to no layer). */
void model_weights_layer(model_weights *w, int l);

struct kiln_model {
    gguf_file *gf;
    const model_arch *arch;
    model_hparams hp;
    kern_mat tok_embd; /* [n_vocab rows of n_embd] */
    const float *out_norm;
    kern_mat output; /* = tok_embd when tied */
    void *fam;       /* the family's weights and hyperparameters */
    tokenizer *tok;
    char arch_name[64];
    char name[256];
    char ftype[16];
    char *chat_template;
    uint64_t n_params, n_bytes;
    uint64_t active_bytes;     /* tensor bytes one token's decode reads (the family
                               may lower it from n_bytes: only used experts) */
    const backend_backend *be; /* the device it runs on */
    void *packed_mem;          /* the weights the backend prepared (backend_backend.prepare) */
    size_t packed_bytes;
    /* A model split between the GPU and the CPU (kiln_model_params.gpu_layers
     * below all): layers gpu_l0 and up run on be, the layers below it, the
     * token embeddings and the output head on be_lo (the CPU), which
     * prepared its share into lo_mem.  be_lo NULL: no split, all on be. */
    const backend_backend *be_lo;
    int gpu_l0;
    void *lo_mem;
    size_t lo_bytes;
    struct vision_model *vision; /* the projector (kiln_model_params.mmproj), or NULL */
    int image_bidi;              /* 1: the projector makes an image's tokens attend to each other both
                                    ways (model_batch_begin's see) */
};

/* ---- the family table ---- */
struct model_family {
    const char *name;
    const model_arch *archs;
    int n_archs;
    int encoder; /* 1: bidirectional encoder (kiln_embedder only) */
    /* 1: forward reads the rows of image tokens (negative ids) from
     * c->b_embd and honours backend_step.see; a projector loads with it */
    int image_input;
    /* 1: the family reads attention.value_length apart from key_length
     * (model.c otherwise requires them equal) */
    int split_head_sizes;
    /* Binds the family's tensors with their shapes checked and reads its
     * own hyperparameters (m->hp holds the common ones); fills m->fam,
     * m->tok_embd, m->out_norm, m->output and m->hp.n_vocab.  A failure is
     * a status with the last error set, m->fam possibly partly filled (free
     * is called). */
    kiln_status (*bind)(kiln_model *m);
    void (*free)(kiln_model *m);
    /* Appends the matrices and vectors repacking may cover (NULL: none). */
    void (*weights)(kiln_model *m, model_weights *w);
    /* Decoders: a sequence's state, activations for a context, forward. */
    void (*seq_shape)(const kiln_model *m, model_seq_shape *s);
    /* Attention layers below layer l (NULL: l, every layer attends). */
    int (*attn_below)(const kiln_model *m, int l);
    /* Allocates c->ws (activations for c->p.n_batch tokens) and
     * the products' room (the backend's reserve op, or c->mm_scratch for
     * a family calling the kernels itself); -1 when out of memory. */
    int (*ctx_init)(kiln_context *c);
    void (*ctx_free)(kiln_context *c);
    /* Runs a batch checked by model_batch_begin (decoder.h). */
    kiln_status (*forward)(kiln_context *c, const kiln_batch *b, int n_out);
    /* Recurrent families: recomputes seq's live state (already set back to
     * the state before its last recorded run, state.h) over the first n
     * tokens of that run. */
    void (*replay)(kiln_context *c, int seq, int32_t n);
    /* Decoders with MTP blocks (model/mtp.h; NULL: none): how many the
     * model can run, and model_mtp_step over rows api.c checked. */
    int (*mtp_blocks)(const kiln_model *m);
    kiln_status (*mtp_step)(kiln_context *c, int n, const int32_t *seq, const int32_t *pos, const int32_t *tok,
                            const uint8_t *chain);
    /* Encoders: a workspace for up to cap_tok token rows and the pooled
     * forward pass (kiln_embedder, kiln_reranker and the decision engine
     * call these).  The batch is unpadded (model/encoder.h): n_seq token
     * sequences of len[s] laid end to end in tokens (and types: NULL for
     * all 0; a family without token types ignores them), sum(len) <=
     * cap_tok.  out gets n_seq rows: n_embd floats each for MODEL_POOL_MEAN /
     * MODEL_POOL_CLS (not normalized), n_cls_out scores each for MODEL_POOL_RANK
     * (the family's classification head). */
    void *(*enc_new)(const kiln_model *m, int cap_tok, thread_pool *pool);
    void (*enc_free)(void *ws);
    void (*encode)(void *ws, const kiln_model *m, const int32_t *tokens, const uint8_t *types, const int32_t *len,
                   int n_seq, int pooling, float *out);
    /* Encoders: the default input formats of kiln_embedder ("{text}" and
     * "{title}" are replaced; NULL: the text as given). */
    const char *embed_query, *embed_document;
    /* Encoders: how kiln_reranker frames a (query, document) pair. */
    int pair; /* MODEL_PAIR_* */
};

/* Pair framings (kiln.h, reranker).  MODEL_PAIR_SPECIALS (0): [BOS] q [EOS]
 * [SEP] d [EOS], each piece as the vocabulary adds it; MODEL_PAIR_BERT:
 * [CLS] q [SEP] d [SEP] with token type 1 from d on (WordPiece vocabularies;
 * others fall back to MODEL_PAIR_SPECIALS); MODEL_PAIR_CLS_SEP: [BOS] q [SEP] d [EOS]. */
enum { MODEL_PAIR_SPECIALS = 0, MODEL_PAIR_BERT = 1, MODEL_PAIR_CLS_SEP = 2 };

/* Pooling modes of encode (the first three are KILN_POOLING_*). */
enum { MODEL_POOL_MEAN = 1, MODEL_POOL_CLS = 2, MODEL_POOL_LAST = 3, MODEL_POOL_RANK = 4 };

extern const model_family model_family_dense;
extern const model_family model_family_hybrid;
extern const model_family model_family_gptoss;
extern const model_family model_family_nemotron;
extern const model_family model_family_bert;
extern const model_family model_family_modernbert;
extern const model_family model_family_gemma_embed;
extern const model_family model_family_gemma;
extern const model_family model_family_deepseek2;
/* Attention layers below layer l (model_family.attn_below). */
int model_attn_below(const kiln_model *m, int l);

/* ---- binding (family.c) ----
 * A binder finds tensors by name with exact shapes (ne[0] first) and a
 * type kiln computes (gguf/check.h); the first failure is kept (st, with
 * the last error set) and later calls return nothing, so a family binds
 * everything and checks once at the end. */
typedef struct model_binder {
    const kiln_model *m;
    kiln_status st;
} model_binder;
/* The tensor, or NULL (an error unless optional).  dims 1..3; ne[i] < 0
 * accepts any extent there. */
const gguf_tensor *model_bind_tensor(model_binder *B, const char *name, int dims, const int64_t *ne, int optional);
/* An F32 vector of n. */
const float *model_bind_vec(model_binder *B, const char *name, int64_t n, int optional);
/* A matrix of nrows rows of ncols (nrows < 0: any). */
kern_mat model_bind_mat(model_binder *B, const char *name, int64_t ncols, int64_t nrows, int optional);
/* A 3-D [ncols, nrows, n_mat] tensor as n_mat matrices (out[n_mat]);
 * returns 1 when bound, 0 when absent (optional) or failed. */
int model_bind_mats3(model_binder *B, const char *name, int64_t ncols, int64_t nrows, int n_mat, kern_mat *out,
                     int optional);
/* Fails the binder with KILN_ERR_FORMAT and the message (unless it failed
 * before). */
void model_bind_fail(model_binder *B, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* {arch}.suffix metadata. */
int64_t model_meta_int(const kiln_model *m, const char *suffix, int64_t def);
double model_meta_float(const kiln_model *m, const char *suffix, double def);
const gguf_kv *model_meta_kv(const kiln_model *m, const char *suffix);
/* Reads rope.dimension_sections (up to 4 counts of angle pairs, summing
 * to at most n_rot / 2) into hp.rope.sections with hp.rope.mrope = kind
 * (KERN_MROPE or KERN_IMROPE); KILN_ERR_FORMAT on a missing or bad key. */
kiln_status model_rope_sections(kiln_model *m, int kind);

#endif
