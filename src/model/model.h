/*
 * model — model families, weights, the sequence state and the forward pass.
 *
 * A family is one file that declares itself once, through a kl_family
 * table: the architecture names it serves, how it binds its tensors, how
 * much state a sequence needs, and its forward pass.  Nothing outside the
 * family's file knows its architectures' names.
 *
 * family.c  the registry of families (kl_arch_find looks a name up)
 * model.c   kiln_model_load: common hyperparameters, the tensor binder
 *           (shapes checked, 1-, 2- and 3-D), the backend's weight
 *           preparation (backend/backend.h; on the CPU, repacking)
 * dense.c   llama, qwen2, qwen3: every layer attention + SwiGLU
 * gemma.c   gemma3, gemma4: sliding/global attention layers, GeGLU
 * hybrid.c  qwen35, qwen35moe, qwen3next: Gated DeltaNet and gated full
 *           attention layers, dense or mixture-of-experts FFN
 * deepseek2.c  deepseek2: multi-head latent attention (one cached latent
 *           row per token), routed and shared experts
 * gptoss.c  gpt-oss: attention with sinks, alternating sliding window,
 *           biased mixture-of-experts FFN
 * nemotron.c nemotron_h, nemotron_h_moe: Mamba-2, attention and MLP or
 *           mixture-of-experts blocks
 * bert.c    the bert encoder (embeddings only)
 * decoder.c what the decoder families share: the batch's positions,
 *           attention over the KV cache, the output head (decoder.h)
 * kv.c      the paged KV cache of the attention layers
 * state.c   the recurrent-state pool: a slot per sequence, snapshots
 * api.c     contexts and the public decode/sequence calls
 * embed.c   kiln_embedder: formatting, limits, pooling, fingerprints
 */
#ifndef KILN_MODEL_H
#define KILN_MODEL_H

#include "kiln.h"

#include "backend/backend.h"
#include "gguf/gguf.h"
#include "kernels/matmul.h"
#include "kernels/ops.h"
#include "thread/pool.h"
#include "tokenizer/tokenizer.h"

#include <stddef.h>
#include <stdint.h>

typedef struct kl_family kl_family;

/* One supported general.architecture: its family and that family's
 * switches for it (meaning private to the family). */
typedef struct kl_arch {
    const char *name;
    const kl_family *family;
    int encoder; /* = family->encoder: embeds, cannot generate */
    unsigned flags;
} kl_arch;

/* 1 when m's projector makes an image's tokens attend to each other both
 * ways (kl_batch_begin's see). */
int kl_vision_bidirectional(const kiln_model *m);

/* The arch row for a name, NULL when no family serves it. */
const kl_arch *kl_arch_find(const char *name);
/* Comma-separated list of supported names, for error messages. */
const char *kl_arch_list(void);
/* 1 when the header describes a reranker (what kiln_reranker takes): a
 * classification head cls.output.weight on an encoder (a cross-encoder),
 * or on a decoder with rank pooling ({arch}.pooling_type 4).  Reads the
 * header only. */
int kl_gguf_is_reranker(const gguf_file *f);

/* Hyperparameters every family reads the same way (model.c fills them
 * from {arch}.* keys before the family's bind; a family may refine them). */
typedef struct kl_hparams {
    int n_vocab, n_ctx_train, n_embd, n_layer, n_head, n_head_kv, n_ff;
    int hd_k, hd_v; /* per-head key/value width */
    float eps;      /* RMSNorm epsilon */
    kk_rope rope;
    /* LongRoPE: the divisors used instead of rope.freq_factors when a
     * sequence's context exceeds rope.n_ctx_orig; NULL: rope's always */
    const float *rope_factors_long;
    int n_cls_out; /* outputs of a classification head (rank pooling), 0: none */
    /* floats of an input embedding row (kiln_batch_inputs.embd): n_embd, or
     * n_embd * (1 + deepstack layers) for qwen3vl */
    int n_embd_inp;
} kl_hparams;

/* What a sequence of this model holds besides its length: the KV cache of
 * its attention layers (indexed by attention-layer ordinal) and a
 * recurrent-state slot of rs_floats floats (0: none). */
typedef struct kl_seq_shape {
    int n_attn_layer;  /* layers with a KV cache */
    int n_head_kv, hd; /* their KV heads and head size (the largest, with layer_*) */
    /* [n_attn_layer] each layer's KV heads and head size when they differ
     * (the family's memory); NULL: n_head_kv and hd everywhere */
    const int32_t *layer_n_head_kv, *layer_hd;
    int v_in_k;         /* 1: V is each K row itself (a latent, MLA), not stored apart */
    int pos_cells;      /* 1: each cell keeps the M-RoPE position of the token after it (kl_kv.rnext) */
    size_t rs_floats;   /* recurrent state per sequence */
    size_t roll_floats; /* recorded inputs of a rollback run (state.h) */
} kl_seq_shape;

/* The weights the backend may prepare (model.c's prepare): matrices and the
 * small F32 vectors that sit between them in the file. */
typedef struct kl_weights {
    kk_mat **mats;
    int n_mats, cap_mats;
    const float ***vecs;
    int64_t *vlen;
    int n_vecs, cap_vecs;
    int failed; /* an append ran out of memory */
    /* A split model (kiln_model.gpu_l0): 0 lists every weight; 1 only the
     * host part's (the embeddings, the head, layers below l0), 2 only the
     * GPU's (layers l0 and up).  The family says which layer it lists with
     * kl_weights_layer (layer1: that layer + 1; 0: none, the head's). */
    int part, l0, layer1;
} kl_weights;
void kl_weights_mat(kl_weights *w, kk_mat *m);
void kl_weights_vec(kl_weights *w, const float **v, int64_t len);
/* What the family lists next belongs to layer l (-1: to no layer). */
void kl_weights_layer(kl_weights *w, int l);

struct kiln_model {
    gguf_file *gf;
    const kl_arch *arch;
    kl_hparams hp;
    kk_mat tok_embd; /* [n_vocab rows of n_embd] */
    const float *out_norm;
    kk_mat output; /* = tok_embd when tied */
    void *fam;     /* the family's weights and hyperparameters */
    ktok *tok;
    char arch_name[64];
    char name[256];
    char ftype[16];
    char *chat_template;
    uint64_t n_params, n_bytes;
    uint64_t active_bytes; /* tensor bytes one token's decode reads (the family
                               may lower it from n_bytes: only used experts) */
    const kbe_backend *be; /* the device it runs on */
    void *packed_mem;      /* the weights the backend prepared (kbe_backend.prepare) */
    size_t packed_bytes;
    /* A model split between the GPU and the CPU (kiln_model_params.gpu_layers
     * below all): layers gpu_l0 and up run on be, the layers below it, the
     * token embeddings and the output head on be_lo (the CPU), which
     * prepared its share into lo_mem.  be_lo NULL: no split, all on be. */
    const kbe_backend *be_lo;
    int gpu_l0;
    void *lo_mem;
    size_t lo_bytes;
    struct vision_model *vision; /* the projector (kiln_model_params.mmproj), or NULL */
};

/* ---- the family table ---- */
struct kl_family {
    const char *name;
    const kl_arch *archs;
    int n_archs;
    int encoder; /* 1: bidirectional encoder (kiln_embedder only) */
    /* 1: forward reads the rows of image tokens (negative ids) from
     * c->b_embd and honours kbe_step.see; a projector loads with it */
    int image_input;
    /* 1: the family reads attention.value_length apart from key_length
     * (model.c otherwise requires them equal) */
    int split_head_sizes;
    /* Binds the family's tensors with their shapes checked and reads its
     * own hyperparameters (m->hp holds the common ones); fills m->fam,
     * m->tok_embd, m->out_norm, m->output and m->hp.n_vocab.  -1 with one
     * line in err, m->fam possibly partly filled (free is called). */
    int (*bind)(kiln_model *m, char *err, size_t errlen);
    void (*free)(kiln_model *m);
    /* Appends the matrices and vectors repacking may cover (NULL: none). */
    void (*weights)(kiln_model *m, kl_weights *w);
    /* Decoders: a sequence's state, activations for a context, forward. */
    void (*seq_shape)(const kiln_model *m, kl_seq_shape *s);
    /* Attention layers below layer l (NULL: l, every layer attends). */
    int (*attn_below)(const kiln_model *m, int l);
    /* Allocates c->ws (activations for c->p.n_batch tokens) and
     * the products' room (the backend's reserve op, or c->mm_scratch for
     * a family calling the kernels itself); -1 when out of memory. */
    int (*ctx_init)(kiln_context *c);
    void (*ctx_free)(kiln_context *c);
    /* Runs a batch checked by kl_batch_begin (decoder.h). */
    kiln_status (*forward)(kiln_context *c, const kiln_batch *b, int n_out);
    /* Recurrent families: recomputes seq's live state (already set back to
     * the state before its last recorded run, state.h) over the first n
     * tokens of that run. */
    void (*replay)(kiln_context *c, int seq, int32_t n);
    /* Decoders with MTP blocks (model/mtp.h; NULL: none): how many the
     * model can run, and kl_mtp_step over rows api.c checked. */
    int (*mtp_blocks)(const kiln_model *m);
    kiln_status (*mtp_step)(kiln_context *c, int n, const int32_t *seq, const int32_t *pos, const int32_t *tok,
                            const uint8_t *chain);
    /* Encoders: a workspace for up to cap_tok token rows and the pooled
     * forward pass (kiln_embedder, kiln_reranker and the decision engine
     * call these).  The batch is unpadded (model/encoder.h): n_seq token
     * sequences of len[s] laid end to end in tokens (and types: NULL for
     * all 0; a family without token types ignores them), sum(len) <=
     * cap_tok.  out gets n_seq rows: n_embd floats each for KL_POOL_MEAN /
     * KL_POOL_CLS (not normalized), n_cls_out scores each for KL_POOL_RANK
     * (the family's classification head). */
    void *(*enc_new)(const kiln_model *m, int cap_tok, kpool *pool);
    void (*enc_free)(void *ws);
    void (*encode)(void *ws, const kiln_model *m, const int32_t *tokens, const uint8_t *types, const int32_t *len,
                   int n_seq, int pooling, float *out);
    /* Encoders: the default input formats of kiln_embedder ("{text}" and
     * "{title}" are replaced; NULL: the text as given). */
    const char *embed_query, *embed_document;
    /* Encoders: how kiln_reranker frames a (query, document) pair. */
    int pair; /* KL_PAIR_* */
};

/* Pair framings (kiln.h, reranker).  KL_PAIR_SPECIALS (0): [BOS] q [EOS]
 * [SEP] d [EOS], each piece as the vocabulary adds it; KL_PAIR_BERT:
 * [CLS] q [SEP] d [SEP] with token type 1 from d on (WordPiece vocabularies;
 * others fall back to KL_PAIR_SPECIALS); KL_PAIR_CLS_SEP: [BOS] q [SEP] d [EOS]. */
enum { KL_PAIR_SPECIALS = 0, KL_PAIR_BERT = 1, KL_PAIR_CLS_SEP = 2 };

/* Pooling modes of encode (the first three are KILN_POOLING_*). */
enum { KL_POOL_MEAN = 1, KL_POOL_CLS = 2, KL_POOL_LAST = 3, KL_POOL_RANK = 4 };

extern const kl_family kl_family_dense;
extern const kl_family kl_family_hybrid;
extern const kl_family kl_family_gptoss;
extern const kl_family kl_family_nemotron;
extern const kl_family kl_family_bert;
extern const kl_family kl_family_modernbert;
extern const kl_family kl_family_gemma_embed;
extern const kl_family kl_family_gemma;
extern const kl_family kl_family_deepseek2;

/* ---- binding (model.c) ----
 * A binder finds tensors by name with exact shapes (ne[0] first) and a
 * type kiln computes; the first failure is kept and later calls return
 * nothing, so a family binds everything and checks once at the end. */
typedef struct kl_binder {
    const kiln_model *m;
    char *err;
    size_t errlen;
    int failed;
} kl_binder;
/* The tensor, or NULL (an error unless optional).  dims 1..3; ne[i] < 0
 * accepts any extent there. */
const gguf_tensor *kl_bind_tensor(kl_binder *B, const char *name, int dims, const int64_t *ne, int optional);
/* An F32 vector of n. */
const float *kl_bind_vec(kl_binder *B, const char *name, int64_t n, int optional);
/* A matrix of nrows rows of ncols (nrows < 0: any). */
kk_mat kl_bind_mat(kl_binder *B, const char *name, int64_t ncols, int64_t nrows, int optional);
/* A 3-D [ncols, nrows, n_mat] tensor as n_mat matrices (out[n_mat]);
 * returns 1 when bound, 0 when absent (optional) or failed. */
int kl_bind_mats3(kl_binder *B, const char *name, int64_t ncols, int64_t nrows, int n_mat, kk_mat *out, int optional);
void kl_bind_fail(kl_binder *B, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* {arch}.suffix metadata. */
int64_t kl_meta_int(const kiln_model *m, const char *suffix, int64_t def);
double kl_meta_float(const kiln_model *m, const char *suffix, double def);
const gguf_kv *kl_meta_kv(const kiln_model *m, const char *suffix);
/* Reads rope.dimension_sections (up to 4 counts of angle pairs, summing
 * to at most n_rot / 2) into hp.rope.sections with hp.rope.mrope = kind
 * (KK_MROPE or KK_IMROPE); -1 with err on a missing or bad key. */
int kl_rope_sections(kiln_model *m, int kind, char *err, size_t errlen);

/* ---- KV cache (kv.c) ----
 * Memory is blocks of KL_KV_BLOCK token cells, in F16, F32 or Q8_0 (a head
 * row of hd / 32 blocks of 34 bytes, made by the reference quantizer when
 * the token is stored; attention reads it through kk_attn_q8).  A block
 * holds, for each attention layer (by ordinal: a hybrid model's recurrent
 * layers have none), K as [n_head_kv][KL_KV_BLOCK][hd] and then V the
 * same way: head by head, so attention, which walks one head's positions,
 * reads 16 rows in a row (4 KB at hd 128 in F16) that the hardware prefetch
 * follows, instead of 256 bytes every 2 KB; and block by block, so the
 * cache in use is whole blocks (about one huge page each at Qwen3-0.6B's
 * size) rather than a little of every layer's array.  A cache whose V is
 * in K (kl_seq_shape.v_in_k: MLA's one latent row per token) has no V runs.
 * A sequence owns an ordered list of blocks; token position p of sequence s
 * lives in cell blocks[p / KL_KV_BLOCK] * KL_KV_BLOCK + p % KL_KV_BLOCK.
 *
 * Prefix reuse: a full block whose tokens are known can be registered under
 * hash(parent block's hash, its tokens).  Blocks are reference-counted (one
 * reference per sequence holding them); a registered block nobody holds
 * stays in an LRU list with its contents and is evicted (oldest first) only
 * when the free list is empty.  A shared block is never written: only cells
 * at positions >= len are, and truncating into a shared block copies it. */
#define KL_KV_BLOCK KBE_KV_BLOCK
#define KL_KV_BLOCK_SHIFT KBE_KV_BLOCK_SHIFT
/* F16 cache: a query that sees up to this many positions keeps llama.cpp's
 * F16-rounded accumulator; one that sees more accumulates in float
 * (backend/cpu_attn.c). */
#define KL_ATTN_F16_ACC_MAX KBE_ATTN_F16_ACC_MAX
/* Tokens of one sequence at consecutive positions that one attention call
 * takes together (kk_attn_f16.nt) when they accumulate in float: they share
 * the conversion of every K and V row. */
#define KL_ATTN_TILE KBE_ATTN_TILE

typedef struct kl_seq {
    int32_t len; /* tokens held */
    int32_t n_blocks;
    int32_t *blocks;  /* [max_blocks_per_seq] block ids */
    int32_t n_hashed; /* leading blocks that are registered */
} kl_seq;

typedef struct kl_kv {
    const kbe_backend *be; /* owns mem */
    int type;              /* KILN_KV_F16 / KILN_KV_F32 / KILN_KV_Q8_0 */
    int n_layer;           /* attention layers */
    int n_head_kv, hd;     /* the largest of the layers' */
    /* [n_layer] per attention layer: KV heads, head size, bytes of a head
     * row, offset of its K run in a block (its V run follows) */
    int32_t *l_hkv, *l_hd;
    size_t *l_hrow, *l_off;
    size_t block_bytes;
    /* A split model: attention layers below n_lo live in mem_lo (be_lo's,
     * blocks of block_lo bytes, their l_off within those), the rest in mem
     * (blocks of block_bytes); n_lo 0: every layer in mem. */
    const kbe_backend *be_lo;
    int n_lo;
    size_t block_lo, mem_lo_bytes;
    void *mem_lo;
    int v_in_k; /* 1: no V runs; a layer's V block is its K block (kl_seq_shape) */
    int32_t n_blocks;
    int32_t n_free;
    int32_t *free_list; /* unreferenced, unregistered blocks */
    void *mem;          /* the backend's memory for n_blocks blocks (kbe_backend.map) */
    size_t mem_bytes;
    size_t hrow; /* bytes of one head's row (hd elements) */
    int32_t n_seq;
    int32_t max_blocks_per_seq;
    kl_seq *seqs;
    int32_t **seq_blocks; /* [n_seq] seqs[s].blocks, for the backend (kbe_kv.blocks) */
    /* per block */
    int32_t *ref;    /* sequences (and state snapshots) holding it */
    uint8_t *hashed; /* 1 when registered in the table */
    uint64_t *bhash; /* its key when registered */
    int32_t *btok;   /* [n_blocks][KL_KV_BLOCK] its tokens when registered */
    /* [n_blocks][KL_KV_BLOCK] M-RoPE: the position the token after each
     * cell takes (1 + the largest t, h or w so far), and the text position
     * of the first token of the image the cell belongs to (-1: text); NULL
     * without sections */
    int32_t *rnext, *rbase;
    int32_t *chain; /* next block in the same bucket, -1 ends */
    int32_t *lru_prev, *lru_next;
    int32_t lru_head, lru_tail;             /* unreferenced registered blocks, head oldest */
    int32_t n_cached;                       /* blocks in the LRU list */
    int32_t *bucket;                        /* [n_bucket] first block of each chain, -1 empty */
    int32_t n_bucket;                       /* power of two */
    uint64_t n_lookup_blocks, n_hit_blocks; /* prefix queries and hits, in blocks */
} kl_kv;

/* shape: the attention layers' heads (n_attn_layer may be 0: the cache
 * then only tracks lengths and prefix keys).  n_extra blocks beyond what
 * n_seq sequences of n_ctx tokens take: room for the blocks state
 * snapshots pin. */
int kl_kv_init(kl_kv *kv, const kbe_backend *be, const kl_seq_shape *shape, int type, int n_seq, int n_ctx, int n_extra,
               char *err, size_t errlen);
/* The same for a split model: attention layers below n_lo on be_lo. */
int kl_kv_init_split(kl_kv *kv, const kbe_backend *be, const kbe_backend *be_lo, int n_lo, const kl_seq_shape *shape,
                     int type, int n_seq, int n_ctx, int n_extra, char *err, size_t errlen);
/* KV bytes per token of attention layers l0 .. l1 - 1. */
uint64_t kl_kv_bytes_range(const kl_seq_shape *shape, int type, int l0, int l1);
/* The cache as the backend's attention ops see it (lo: a split model's
 * host part, layers below n_lo; else the rest, renumbered from 0). */
void kl_kv_view(const kl_kv *kv, kbe_kv *out);
void kl_kv_view_part(const kl_kv *kv, int lo, kbe_kv *out);
void kl_kv_free(kl_kv *kv);
/* Makes sure seq can hold `len` tokens (evicting cached blocks if the free
 * list is empty); returns -1 when out of blocks. */
int kl_kv_reserve(kl_kv *kv, int seq, int32_t len);
/* Drops tokens from len on.  Cutting into a shared block copies it first;
 * a block is always available for that because every sequence can hold
 * max_blocks_per_seq blocks and a shared block counts once. */
void kl_kv_truncate(kl_kv *kv, int seq, int32_t len);
/* seq must be empty: attaches the longest run of registered blocks that
 * begins tokens[0..n), at most max_tokens tokens.  Returns tokens attached. */
int32_t kl_kv_reuse(kl_kv *kv, int seq, const int32_t *tokens, int32_t n, int32_t max_tokens);
/* Registers the full blocks among the first n tokens of seq (tokens are
 * its contents from position 0). */
void kl_kv_register(kl_kv *kv, int seq, const int32_t *tokens, int32_t n);
/* Key of the chain of nb full blocks tokens[0 .. nb * KL_KV_BLOCK), as
 * registering them computes it. */
uint64_t kl_kv_chain_key(const int32_t *tokens, int32_t nb);
/* An extra reference to block b (a state snapshot pins the block its last
 * tokens are in) and its release. */
void kl_kv_pin(kl_kv *kv, int32_t b);
void kl_kv_unpin(kl_kv *kv, int32_t b);
/* A block of its own holding the first n cells of block src; -1 when none
 * is free. */
int32_t kl_kv_copy_block(kl_kv *kv, int32_t src, int32_t n);
/* Appends block b (held by the caller's reference) to seq, which then
 * holds len tokens. */
void kl_kv_append_block(kl_kv *kv, int seq, int32_t b, int32_t len);
/* dst (empty) takes src's tokens: whole blocks shared, the partly filled
 * last one copied.  -1 when dst is not empty or no block is free. */
int kl_kv_fork(kl_kv *kv, int src, int dst);
static inline int64_t kl_kv_cell(const kl_kv *kv, int seq, int32_t pos) {
    return (int64_t)kv->seqs[seq].blocks[pos / KL_KV_BLOCK] * KL_KV_BLOCK + pos % KL_KV_BLOCK;
}
/* Block b of an attention layer: n_head_kv runs of KL_KV_BLOCK head rows. */
void *kl_kv_kblock(const kl_kv *kv, int layer, int32_t b);
void *kl_kv_vblock(const kl_kv *kv, int layer, int32_t b);
/* Bytes from a layer's K (or V) in block b to the same in block b + 1. */
size_t kl_kv_block_bytes(const kl_kv *kv);
/* Attention layer l's KV heads, head size and bytes of one head row. */
static inline int kl_kv_hkv(const kl_kv *kv, int l) { return kv->l_hkv[l]; }
static inline int kl_kv_hd(const kl_kv *kv, int l) { return kv->l_hd[l]; }
static inline size_t kl_kv_hrow(const kl_kv *kv, int l) { return kv->l_hrow[l]; }
/* The hd elements of KV head h in a cell. */
void *kl_kv_khead(const kl_kv *kv, int layer, int64_t cell, int h);
void *kl_kv_vhead(const kl_kv *kv, int layer, int64_t cell, int h);
/* Bytes one token takes in the cache (attention layers, K and V). */
uint64_t kl_kv_bytes_per_token(const kl_seq_shape *shape, int type);
/* GPU memory kept free beyond the estimates below: the driver's own, the
 * step's tables, rounding */
#define KL_CUDA_HEADROOM (64ull << 20)
/* An estimate, in bytes, of the GPU memory a context of n_seq sequences
 * and batches of n_batch tokens takes for activations on the CUDA backend
 * (KL_CUDA_HEADROOM included): what the load and kiln_context_new keep
 * free besides the weights and the KV cache. */
uint64_t kl_cuda_act_bytes(const kiln_model *m, int n_batch, int n_seq);
/* Attention layers below layer l (kl_family.attn_below). */
int kl_attn_below(const kiln_model *m, int l);
/* The M-RoPE position a token at position len of seq takes when it is
 * text (the cells before it say it, and text after them counts on by 1;
 * len without kv->rnext). */
int32_t kl_kv_rope_next(const kl_kv *kv, int seq, int32_t len);
/* The image base of the cell before position len of seq (kl_kv.rbase; -1:
 * text, or none). */
int32_t kl_kv_rope_base(const kl_kv *kv, int seq, int32_t len);

enum { KL_MPOS = 6 };

struct kiln_context {
    kiln_model *m;
    kiln_context_params p;
    kpool *pool;
    kbe_ctx bx; /* the model's backend for this context: the families' ops */
    /* A split model (kiln_model.be_lo): the host part's backend context and
     * activations.  A forward swaps them with bx and ws while it runs the
     * host part (kl_split_*); at rest bx and ws are the GPU's.  attn_base:
     * the attention ordinal of the first layer of the part bx runs. */
    kbe_ctx bx_lo;
    void *ws_lo;
    int on_lo, attn_base;
    kl_seq_shape shape;
    kl_kv kv;
    struct kl_rs *rs; /* recurrent state (state.h), NULL without */
    /* the batch as kl_batch_begin resolved it */
    int32_t *b_pos, *b_seq; /* [n_batch] positions and sequences */
    int32_t *b_see;         /* [n_batch] the last position each token sees (kbe_step.see) */
    int b_bidi;             /* 1: some token of the batch sees past itself */
    const float *b_embd;    /* [n][n_embd_inp] rows of the batch's image tokens (kiln_batch_inputs), NULL */
    const int32_t *b_mpos;  /* [n][4] multimodal RoPE positions (kiln_batch_inputs), NULL */
    int32_t *b_mrope;       /* [n_batch][KL_MPOS] M-RoPE positions (t, h, w, e), the next text position,
                               the image's base (decoder.c) when kv.rnext */
    int32_t *out_idx;       /* batch index -> logits row, -1 if none */
    /* attention (decoder.c) */
    float *rope_cs;  /* [n_batch][n_rot] rotation tables */
    int32_t *b_tile; /* [n_batch + 1] batch index where each attention tile starts */
    int32_t n_tile;
    /* output */
    float *logits; /* [logits_cap][n_vocab] */
    int32_t logits_cap;
    float *out_rows;  /* [logits_cap][n_embd] normalized rows */
    void *mm_scratch; /* families that call the kernels themselves: their ctx_init
                         sizes it (the backend's ops have their own, kbe_ops.reserve) */
    void *ws;         /* the family's activations */
    /* MTP (model/mtp.h), when the context keeps its cache */
    int mtp_ord;        /* attention-layer ordinal of the MTP block's cache, -1: none */
    float *mtp_h;       /* [n_seq][KL_MTP_KEEP][n_embd] target hidden rows kept */
    int32_t *mtp_h_pos; /* [n_seq] position of the first kept row */
    int32_t *mtp_h_n;   /* [n_seq] rows kept */
    float *mtp_chain;   /* [n_seq][n_embd] each sequence's latest h' */
    float *mtp_logits;  /* [n_seq][n_vocab] of the latest step (host) */
    float *mtp_lg_dev;  /* the same on the backend (= mtp_logits when its memory is the host's) */
    char err[512];
};

/* Sets the thread's last error (and c->err when c is not NULL). */
kiln_status kl_fail(kiln_context *c, kiln_status st, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

#endif
