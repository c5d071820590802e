/*
 * The context internals: what a context holds for its sequences and its
 * batch (the KV cache, the recurrent state, the batch as model_batch_begin
 * resolved it, the outputs), shared by api.c, decoder.c, kv.c, state.c and
 * the families' forward passes; and the context's error (context.c).
 */
#ifndef KILN_MODEL_CONTEXT_H
#define KILN_MODEL_CONTEXT_H

#include "model/family.h"
#include "model/kv.h"

enum { MODEL_MPOS = 6 };

/* GPU memory kept free beyond the estimates below: the driver's own, the
 * step's tables, rounding */
#define MODEL_CUDA_HEADROOM (64ull << 20)
/* An estimate, in bytes, of the GPU memory a context of n_seq sequences
 * and batches of n_batch tokens takes for activations on the CUDA backend
 * (MODEL_CUDA_HEADROOM included): what the load and kiln_context_new keep
 * free besides the weights and the KV cache. */
uint64_t model_cuda_act_bytes(const kiln_model *m, int n_batch, int n_seq);

struct kiln_context {
    kiln_model *m;
    kiln_context_params p;
    thread_pool *pool;
    backend_ctx bx; /* the model's backend for this context: the families' ops */
    /* A split model (kiln_model.be_lo): the host part's backend context and
     * activations.  A forward swaps them with bx and ws while it runs the
     * host part (model_split_*); at rest bx and ws are the GPU's.  attn_base:
     * the attention ordinal of the first layer of the part bx runs. */
    backend_ctx bx_lo;
    void *ws_lo;
    int on_lo, attn_base;
    model_seq_shape shape;
    model_kv kv;
    struct model_rs *rs; /* recurrent state (state.h), NULL without */
    /* the batch as model_batch_begin resolved it */
    int32_t *b_pos, *b_seq; /* [n_batch] positions and sequences */
    int32_t *b_see;         /* [n_batch] the last position each token sees (backend_step.see) */
    int b_bidi;             /* 1: some token of the batch sees past itself */
    const float *b_embd;    /* [n][n_embd_inp] rows of the batch's image tokens (kiln_batch_inputs), NULL */
    const int32_t *b_mpos;  /* [n][4] multimodal RoPE positions (kiln_batch_inputs), NULL */
    int32_t *b_mrope;       /* [n_batch][MODEL_MPOS] M-RoPE positions (t, h, w, e), the next text position,
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
                         sizes it (the backend's ops have their own, backend_ops.reserve) */
    void *ws;         /* the family's activations */
    /* MTP (model/mtp.h), when the context keeps its cache */
    int mtp_ord;        /* attention-layer ordinal of the MTP block's cache, -1: none */
    float *mtp_h;       /* [n_seq][MODEL_MTP_KEEP][n_embd] target hidden rows kept */
    int32_t *mtp_h_pos; /* [n_seq] position of the first kept row */
    int32_t *mtp_h_n;   /* [n_seq] rows kept */
    float *mtp_chain;   /* [n_seq][n_embd] each sequence's latest h' */
    float *mtp_logits;  /* [n_seq][n_vocab] of the latest step (host) */
    float *mtp_lg_dev;  /* the same on the backend (= mtp_logits when its memory is the host's) */
    char err[512];
};

/* Sets the thread's last error (and c->err when c is not NULL). */
kiln_status model_fail(kiln_context *c, kiln_status st, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

#endif
