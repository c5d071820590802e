/*
 * The paged KV cache of the attention layers (kv.c).
 *
 * Memory is blocks of MODEL_KV_BLOCK token cells, in F16, F32 or Q8_0 (a head
 * row of hd / 32 blocks of 34 bytes, made by the reference quantizer when
 * the token is stored; attention reads it through kern_attn_q8).  A block
 * holds, for each attention layer (by ordinal: a hybrid model's recurrent
 * layers have none), K as [n_head_kv][MODEL_KV_BLOCK][hd] and then V the
 * same way: head by head, so attention, which walks one head's positions,
 * reads 16 rows in a row (4 KB at hd 128 in F16) that the hardware prefetch
 * follows, instead of 256 bytes every 2 KB; and block by block, so the
 * cache in use is whole blocks (about one huge page each at Qwen3-0.6B's
 * size) rather than a little of every layer's array.  A cache whose V is
 * in K (model_seq_shape.v_in_k: MLA's one latent row per token) has no V runs.
 * A sequence owns an ordered list of blocks; token position p of sequence s
 * lives in cell blocks[p / MODEL_KV_BLOCK] * MODEL_KV_BLOCK + p % MODEL_KV_BLOCK.
 *
 * Prefix reuse: a full block whose tokens are known can be registered under
 * hash(parent block's hash, its tokens).  Blocks are reference-counted (one
 * reference per sequence holding them); a registered block nobody holds
 * stays in an LRU list with its contents and is evicted (oldest first) only
 * when the free list is empty.  A shared block is never written: only cells
 * at positions >= len are, and truncating into a shared block copies it. */
#ifndef KILN_MODEL_KV_H
#define KILN_MODEL_KV_H

#include "model/family.h"

#define MODEL_KV_BLOCK BACKEND_KV_BLOCK
#define MODEL_KV_BLOCK_SHIFT BACKEND_KV_BLOCK_SHIFT
/* F16 cache: a query that sees up to this many positions keeps llama.cpp's
 * F16-rounded accumulator; one that sees more accumulates in float
 * (backend/cpu_attn.c). */
#define MODEL_ATTN_F16_ACC_MAX BACKEND_ATTN_F16_ACC_MAX
/* Tokens of one sequence at consecutive positions that one attention call
 * takes together (kern_attn_f16.nt) when they accumulate in float: they share
 * the conversion of every K and V row. */
#define MODEL_ATTN_TILE BACKEND_ATTN_TILE

typedef struct model_seq {
    int32_t len; /* tokens held */
    int32_t n_blocks;
    int32_t *blocks;  /* [max_blocks_per_seq] block ids */
    int32_t n_hashed; /* leading blocks that are registered */
} model_seq;

typedef struct model_kv {
    const backend_backend *be; /* owns mem */
    int type;                  /* KILN_KV_F16 / KILN_KV_F32 / KILN_KV_Q8_0 */
    int n_layer;               /* attention layers */
    int n_head_kv, hd;         /* the largest of the layers' */
    /* [n_layer] per attention layer: KV heads, head size, bytes of a head
     * row, offset of its K run in a block (its V run follows) */
    int32_t *l_hkv, *l_hd;
    size_t *l_hrow, *l_off;
    size_t block_bytes;
    /* A split model: attention layers below n_lo live in mem_lo (be_lo's,
     * blocks of block_lo bytes, their l_off within those), the rest in mem
     * (blocks of block_bytes); n_lo 0: every layer in mem. */
    const backend_backend *be_lo;
    int n_lo;
    size_t block_lo, mem_lo_bytes;
    void *mem_lo;
    int v_in_k; /* 1: no V runs; a layer's V block is its K block (model_seq_shape) */
    int32_t n_blocks;
    int32_t n_free;
    int32_t *free_list; /* unreferenced, unregistered blocks */
    void *mem;          /* the backend's memory for n_blocks blocks (backend_backend.map) */
    size_t mem_bytes;
    size_t hrow; /* bytes of one head's row (hd elements) */
    int32_t n_seq;
    int32_t max_blocks_per_seq;
    model_seq *seqs;
    int32_t **seq_blocks; /* [n_seq] seqs[s].blocks, for the backend (backend_kv.blocks) */
    /* per block */
    int32_t *ref;    /* sequences (and state snapshots) holding it */
    uint8_t *hashed; /* 1 when registered in the table */
    uint64_t *bhash; /* its key when registered */
    int32_t *btok;   /* [n_blocks][MODEL_KV_BLOCK] its tokens when registered */
    /* [n_blocks][MODEL_KV_BLOCK] M-RoPE: the position the token after each
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
} model_kv;

/* shape: the attention layers' heads (n_attn_layer may be 0: the cache
 * then only tracks lengths and prefix keys).  n_extra blocks beyond what
 * n_seq sequences of n_ctx tokens take: room for the blocks state
 * snapshots pin. */
kiln_status model_kv_init(model_kv *kv, const backend_backend *be, const model_seq_shape *shape, int type, int n_seq,
                          int n_ctx, int n_extra);
/* The same for a split model: attention layers below n_lo on be_lo. */
kiln_status model_kv_init_split(model_kv *kv, const backend_backend *be, const backend_backend *be_lo, int n_lo,
                                const model_seq_shape *shape, int type, int n_seq, int n_ctx, int n_extra);
/* KV bytes per token of attention layers l0 .. l1 - 1. */
uint64_t model_kv_bytes_range(const model_seq_shape *shape, int type, int l0, int l1);
/* The cache as the backend's attention ops see it (lo: a split model's
 * host part, layers below n_lo; else the rest, renumbered from 0). */
void model_kv_view(const model_kv *kv, backend_kv *out);
void model_kv_view_part(const model_kv *kv, int lo, backend_kv *out);
void model_kv_free(model_kv *kv);
/* Makes sure seq can hold `len` tokens (evicting cached blocks if the free
 * list is empty); returns -1 when out of blocks. */
int model_kv_reserve(model_kv *kv, int seq, int32_t len);
/* Drops tokens from len on.  Cutting into a shared block copies it first;
 * a block is always available for that because every sequence can hold
 * max_blocks_per_seq blocks and a shared block counts once. */
void model_kv_truncate(model_kv *kv, int seq, int32_t len);
/* seq must be empty: attaches the longest run of registered blocks that
 * begins tokens[0..n), at most max_tokens tokens.  Returns tokens attached. */
int32_t model_kv_reuse(model_kv *kv, int seq, const int32_t *tokens, int32_t n, int32_t max_tokens);
/* Registers the full blocks among the first n tokens of seq (tokens are
 * its contents from position 0). */
void model_kv_register(model_kv *kv, int seq, const int32_t *tokens, int32_t n);
/* Key of the chain of nb full blocks tokens[0 .. nb * MODEL_KV_BLOCK), as
 * registering them computes it. */
uint64_t model_kv_chain_key(const int32_t *tokens, int32_t nb);
/* An extra reference to block b (a state snapshot pins the block its last
 * tokens are in) and its release. */
void model_kv_pin(model_kv *kv, int32_t b);
void model_kv_unpin(model_kv *kv, int32_t b);
/* A block of its own holding the first n cells of block src; -1 when none
 * is free. */
int32_t model_kv_copy_block(model_kv *kv, int32_t src, int32_t n);
/* Appends block b (held by the caller's reference) to seq, which then
 * holds len tokens. */
void model_kv_append_block(model_kv *kv, int seq, int32_t b, int32_t len);
/* dst (empty) takes src's tokens: whole blocks shared, the partly filled
 * last one copied.  -1 when dst is not empty or no block is free. */
int model_kv_fork(model_kv *kv, int src, int dst);
static inline int64_t model_kv_cell(const model_kv *kv, int seq, int32_t pos) {
    return (int64_t)kv->seqs[seq].blocks[pos / MODEL_KV_BLOCK] * MODEL_KV_BLOCK + pos % MODEL_KV_BLOCK;
}
/* Block b of an attention layer: n_head_kv runs of MODEL_KV_BLOCK head rows. */
void *model_kv_kblock(const model_kv *kv, int layer, int32_t b);
void *model_kv_vblock(const model_kv *kv, int layer, int32_t b);
/* Bytes from a layer's K (or V) in block b to the same in block b + 1. */
size_t model_kv_block_bytes(const model_kv *kv);
/* Attention layer l's KV heads, head size and bytes of one head row. */
static inline int model_kv_hkv(const model_kv *kv, int l) { return kv->l_hkv[l]; }
static inline int model_kv_hd(const model_kv *kv, int l) { return kv->l_hd[l]; }
static inline size_t model_kv_hrow(const model_kv *kv, int l) { return kv->l_hrow[l]; }
/* The hd elements of KV head h in a cell. */
void *model_kv_khead(const model_kv *kv, int layer, int64_t cell, int h);
void *model_kv_vhead(const model_kv *kv, int layer, int64_t cell, int h);
/* Bytes one token takes in the cache (attention layers, K and V). */
uint64_t model_kv_bytes_per_token(const model_seq_shape *shape, int type);
/* The M-RoPE position a token at position len of seq takes when it is
 * text (the cells before it say it, and text after them counts on by 1;
 * len without kv->rnext). */
int32_t model_kv_rope_next(const model_kv *kv, int seq, int32_t len);
/* The image base of the cell before position len of seq (model_kv.rbase; -1:
 * text, or none). */
int32_t model_kv_rope_base(const model_kv *kv, int seq, int32_t len);

#endif
