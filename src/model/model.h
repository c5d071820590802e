/*
 * model — architectures, weights and the batched forward pass.
 *
 * arch.c    the table of supported architectures (the only place that
 *           knows architecture names) and what each one's blocks contain
 * model.c   reads hyperparameters from GGUF metadata and binds tensors,
 *           checking every shape; weights stay in the mapping
 * kv.c      the paged KV cache: fixed-size blocks, a block table per
 *           sequence, a free list
 * forward.c the transformer over a batch of tokens from several sequences
 * bert.c    encoder weights and the bidirectional forward (bert.h)
 * embed.c   kiln_embedder: formatting, limits, pooling, fingerprints
 */
#ifndef KILN_MODEL_H
#define KILN_MODEL_H

#include "kiln.h"

#include "gguf/gguf.h"
#include "kernels/matmul.h"
#include "kernels/ops.h"
#include "thread/pool.h"
#include "tokenizer/tokenizer.h"

#include <stdint.h>

/* What distinguishes one decoder-only architecture from another.  The
 * forward pass reads these flags; it never looks at names. */
typedef struct kl_arch {
    const char *name;     /* general.architecture */
    int rope_neox;        /* RoPE pairs (i, i + n_rot/2) instead of (2i, 2i+1) */
    int qkv_bias;         /* 1: Q/K/V biases required; 0: used when present */
    int qk_norm;          /* per-head RMSNorm of Q and K before RoPE */
    int encoder;          /* 1: bidirectional encoder with its own weights and
                             forward (bert.c); no KV cache, no LM head */
} kl_arch;

const kl_arch *kl_arch_find(const char *name);
/* Comma-separated list of supported names, for error messages. */
const char *kl_arch_list(void);

typedef struct kl_layer {
    const float *attn_norm;       /* [n_embd] */
    kk_mat wq, wk, wv, wo;        /* q: n_embd -> n_head*hd_k ... */
    const float *bq, *bk, *bv;    /* optional biases */
    const float *q_norm, *k_norm; /* [hd_k] (qk_norm archs) */
    const float *ffn_norm;        /* [n_embd] */
    kk_mat w_gate, w_up, w_down;  /* n_embd -> n_ff -> n_embd */
} kl_layer;

typedef struct kl_hparams {
    int n_vocab, n_ctx_train, n_embd, n_layer, n_head, n_head_kv, n_ff;
    int hd_k, hd_v;         /* per-head key/value width */
    float eps;              /* RMSNorm epsilon */
    kk_rope rope;
} kl_hparams;

struct kiln_model {
    gguf_file *gf;
    const kl_arch *arch;
    kl_hparams hp;
    kk_mat tok_embd;        /* [n_vocab rows of n_embd] */
    const float *out_norm;
    kk_mat output;          /* = tok_embd when tied */
    kl_layer *layers;       /* decoders only */
    struct kl_bert *bert;   /* encoders only (bert.c) */
    ktok *tok;
    char arch_name[64];
    char name[256];
    char ftype[16];
    char *chat_template;
    uint64_t n_params, n_bytes;
    void *packed_mem;       /* interleaved copies of Q4_0 matrices (repack) */
    size_t packed_bytes;
};

/* ---- KV cache (kv.c) ----
 * Memory is blocks of KL_KV_BLOCK token cells, in F16, F32 or Q8_0 (a head
 * row of hd / 32 blocks of 34 bytes, made by the reference quantizer when
 * the token is stored; attention reads it through kk_attn_q8).  A block
 * holds, for each layer, K as [n_head_kv][KL_KV_BLOCK][hd] and then V the
 * same way: head by head, so attention, which walks one head's positions,
 * reads 16 rows in a row (4 KB at hd 128 in F16) that the hardware prefetch
 * follows, instead of 256 bytes every 2 KB; and block by block, so the
 * cache in use is whole blocks (about one huge page each at Qwen3-0.6B's
 * size) rather than a little of every layer's array.
 * A sequence owns an ordered list of blocks; token position p of sequence s
 * lives in cell blocks[p / KL_KV_BLOCK] * KL_KV_BLOCK + p % KL_KV_BLOCK.
 *
 * Prefix reuse: a full block whose tokens are known can be registered under
 * hash(parent block's hash, its tokens).  Blocks are reference-counted (one
 * reference per sequence holding them); a registered block nobody holds
 * stays in an LRU list with its contents and is evicted (oldest first) only
 * when the free list is empty.  A shared block is never written: only cells
 * at positions >= len are, and truncating into a shared block copies it. */
#define KL_KV_BLOCK 16
#define KL_KV_BLOCK_SHIFT 4 /* log2(KL_KV_BLOCK) */
/* F16 cache: a query that sees up to this many positions keeps llama.cpp's
 * F16-rounded accumulator; one that sees more accumulates in float
 * (forward.c, attn_task). */
#define KL_ATTN_F16_ACC_MAX 256
/* Tokens of one sequence at consecutive positions that one attention call
 * takes together (kk_attn_f16.nt) when they accumulate in float: they share
 * the conversion of every K and V row. */
#define KL_ATTN_TILE 4

typedef struct kl_seq {
    int32_t len;       /* tokens held */
    int32_t n_blocks;
    int32_t *blocks;   /* [max_blocks_per_seq] block ids */
    int32_t n_hashed;  /* leading blocks that are registered */
} kl_seq;

typedef struct kl_kv {
    int type;          /* KILN_KV_F16 / KILN_KV_F32 / KILN_KV_Q8_0 */
    int n_layer;
    int n_head_kv, hd;    /* model.c requires hd_v == hd_k (hd) */
    int32_t n_blocks;
    int32_t n_free;
    int32_t *free_list;   /* unreferenced, unregistered blocks */
    void *mem;         /* one anonymous mapping of n_blocks blocks (huge pages asked) */
    size_t mem_bytes;
    size_t hrow;       /* bytes of one head's row (hd elements) */
    int32_t n_seq;
    int32_t max_blocks_per_seq;
    kl_seq *seqs;
    /* per block */
    int32_t *ref;         /* sequences holding it */
    uint8_t *hashed;      /* 1 when registered in the table */
    uint64_t *bhash;      /* its key when registered */
    int32_t *btok;        /* [n_blocks][KL_KV_BLOCK] its tokens when registered */
    int32_t *chain;       /* next block in the same bucket, -1 ends */
    int32_t *lru_prev, *lru_next;
    int32_t lru_head, lru_tail; /* unreferenced registered blocks, head oldest */
    int32_t n_cached;     /* blocks in the LRU list */
    int32_t *bucket;      /* [n_bucket] first block of each chain, -1 empty */
    int32_t n_bucket;     /* power of two */
    uint64_t n_lookup_blocks, n_hit_blocks; /* prefix queries and hits, in blocks */
} kl_kv;

int kl_kv_init(kl_kv *kv, const kl_hparams *hp, int type, int n_seq, int n_ctx, char *err, size_t errlen);
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
static inline int64_t kl_kv_cell(const kl_kv *kv, int seq, int32_t pos) {
    return (int64_t)kv->seqs[seq].blocks[pos / KL_KV_BLOCK] * KL_KV_BLOCK + pos % KL_KV_BLOCK;
}
/* Block b of a layer: n_head_kv runs of KL_KV_BLOCK head rows (hrow bytes). */
void *kl_kv_kblock(const kl_kv *kv, int layer, int32_t b);
void *kl_kv_vblock(const kl_kv *kv, int layer, int32_t b);
/* Bytes from a layer's K (or V) in block b to the same in block b + 1. */
size_t kl_kv_block_bytes(const kl_kv *kv);
/* The hd elements of KV head h in a cell. */
void *kl_kv_khead(const kl_kv *kv, int layer, int64_t cell, int h);
void *kl_kv_vhead(const kl_kv *kv, int layer, int64_t cell, int h);
/* Bytes one token takes in the cache (all layers, K and V). */
uint64_t kl_kv_bytes_per_token(const kl_hparams *hp, int type);

struct kiln_context {
    kiln_model *m;
    kiln_context_params p;
    kpool *pool;
    kl_kv kv;
    /* activations for up to n_batch tokens, sized once */
    float *x, *xn, *q, *k, *v, *att, *gate, *up;
    float *rope_cs;           /* [n_batch][n_rot] rotation tables */
    int32_t *b_pos, *b_seq;   /* resolved positions and sequences */
    int32_t *b_tile;          /* [n_tile + 1] batch index where each attention tile starts */
    int32_t n_tile;
    int32_t *out_idx;         /* batch index -> logits row, -1 if none */
    float *logits;            /* [logits_cap][n_vocab] */
    int32_t logits_cap;
    float *out_rows;          /* [logits_cap][n_embd] normalized rows */
    float *att_scratch;       /* per thread: kk_attn_scratch of 2 heads x KL_ATTN_TILE tokens */
    size_t att_scratch_per_thread; /* floats */
    void *mm_scratch;
    char err[512];
};

kiln_status kl_forward(kiln_context *c, const kiln_batch *b);

/* Sets the thread's last error (and c->err when c is not NULL). */
kiln_status kl_fail(kiln_context *c, kiln_status st, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

#endif
