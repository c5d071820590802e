/*
 * The decoder forward pass over one batch: n tokens, each with its sequence
 * and position.  Shapes (per token row):
 *   x, xn  [n_embd]          residual stream and its normalized copy
 *   q, att [n_head * hd]     queries, attention output
 *   k, v   [n_head_kv * hd]  this batch's keys/values before caching
 *   gate, up [n_ff]          feed-forward
 * Every buffer is sized for n_batch tokens when the context is made, so a
 * decode step allocates nothing.
 */
#include "model/model.h"

#include "quant/quant.h"

#include <math.h>
#include <stdatomic.h>
#include <string.h>

typedef struct attn_job {
    kiln_context *c;
    const kk_ops *ops;
    int layer;
    int n_tok;
    atomic_long next; /* next (KV head, tile, head pair) item to claim */
} attn_job;

/* One (tile, head pair) per work item: for each token of the tile
 * (c->b_tile) and each head, a softmax over the sequence's cached positions
 * 0..pos.  The kernel reads K and V once for the whole item: a tile of up to
 * KL_ATTN_TILE float-accumulator tokens converts each F16 row once for all
 * of its queries, which halved the cost of a long prompt's attention
 * position by position.
 *
 * With an F16 cache the query is rounded to F16 before the K dot, as GGUF
 * runtimes do, and the weighted V sum depends on how far the query sees:
 *   - up to KL_ATTN_F16_ACC_MAX positions, the F16 flash-attention scheme of
 *     llama.cpp's one-query path: an online maximum and an F16 accumulator
 *     rounded after every update, so greedy outputs agree with theirs on
 *     near-ties (the bundled model's recorded continuations, bit for bit);
 *   - beyond, a float accumulator (kk_attn_f16.acc_f32).  Rounding every
 *     update to F16 costs two conversions per multiply-add, which made
 *     attention half of a 1024-token prefill, and its error grows with the
 *     span; llama.cpp also leaves that scheme for long prompts (its tiled
 *     path, F32).
 * The choice is per query position, never per batch, so a token gets the
 * same bits whether it is computed alone, in a batch, in a tile, beside
 * other sequences or after a prefix-cache hit.  With an F32 cache everything
 * stays F32. */
/* Whether the query at position pos (F16 cache) accumulates in float. */
static inline int attn_acc_f32(int pos) { return pos + 1 > KL_ATTN_F16_ACC_MAX; }

static void attn_task(void *ud, int ith, int nth) {
    attn_job *j = ud;
    kiln_context *c = j->c;
    const kl_hparams *hp = &c->m->hp;
    const kl_kv *kv = &c->kv;
    const int hd = hp->hd_k, group = hp->n_head / hp->n_head_kv;
    const float scale = 1.0f / sqrtf((float)hd);
    /* per-thread scratch (api.c): room for two heads of a tile */
    float *scratch = c->att_scratch + (size_t)ith * c->att_scratch_per_thread;
    const kk_ops *ops = j->ops;
    const int pairs = (group + 1) / 2;
    const long n_items = (long)c->n_tile * hp->n_head_kv * pairs;
    for (long w; (w = atomic_fetch_add_explicit(&j->next, 1, memory_order_relaxed)) < n_items;) {
        /* items go KV head by KV head, then tile, then pairs of the heads
         * sharing it (one kernel call reads K and V once for both): items
         * in a row read the same K/V rows, from this core's cache */
        const long per_kvh = (long)c->n_tile * pairs;
        const int kvh = (int)(w / per_kvh), tile = (int)(w % per_kvh / pairs), h = kvh * group + 2 * (int)(w % pairs);
        const int nq = h + 1 < (kvh + 1) * group ? 2 : 1;
        const int i = c->b_tile[tile], nt = c->b_tile[tile + 1] - i;
        int s = c->b_seq[i], pos = c->b_pos[i];
        const float *q = c->q + ((size_t)i * hp->n_head + h) * hd;
        float *o = c->att + ((size_t)i * hp->n_head + h) * hd;
        if (kv->type == KILN_KV_Q8_0) {
            const kk_attn_q8 a = {
                .q = q, .nq = nq, .nt = nt, .tok_stride = (size_t)hp->n_head * hd, .hd = hd, .n_pos = pos + 1,
                .blocks = kv->seqs[s].blocks, .block_shift = KL_KV_BLOCK_SHIFT,
                .k = (const uint8_t *)kl_kv_kblock(kv, j->layer, 0) + (size_t)kvh * KL_KV_BLOCK * kv->hrow,
                .v = (const uint8_t *)kl_kv_vblock(kv, j->layer, 0) + (size_t)kvh * KL_KV_BLOCK * kv->hrow,
                .block_stride = kl_kv_block_bytes(kv), .row_stride = kv->hrow,
                .scale = scale, .out = o, .scratch = scratch,
            };
            ops->attn_q8(&a);
            continue;
        }
        if (kv->type == KILN_KV_F16) {
            const kk_attn_f16 a = {
                .q = q, .nq = nq, .nt = nt, .tok_stride = (size_t)hp->n_head * hd, .hd = hd, .n_pos = pos + 1,
                .blocks = kv->seqs[s].blocks, .block_shift = KL_KV_BLOCK_SHIFT,
                .k = (const uint16_t *)kl_kv_kblock(kv, j->layer, 0) + (size_t)kvh * KL_KV_BLOCK * hd,
                .v = (const uint16_t *)kl_kv_vblock(kv, j->layer, 0) + (size_t)kvh * KL_KV_BLOCK * hd,
                .block_stride = kl_kv_block_bytes(kv) / sizeof(uint16_t), .row_stride = (size_t)hd,
                .scale = scale, .acc_f32 = attn_acc_f32(pos), .out = o, .scratch = scratch,
            };
            ops->attn_f16(&a);
            continue;
        }
        /* F32 cache (tiles of one token): the same online softmax in F32
         * throughout, head by head */
        for (int hh = 0; hh < nq; hh++) {
            const float *qh = q + (size_t)hh * hd;
            float *oh = o + (size_t)hh * hd;
            float M = -INFINITY, S = 0.0f;
            memset(oh, 0, (size_t)hd * sizeof(float));
            for (int t = 0; t <= pos; t++) {
                int64_t cell = kl_kv_cell(kv, s, t);
                const float *kr = kl_kv_khead(kv, j->layer, cell, kvh);
                const float *vr = kl_kv_vhead(kv, j->layer, cell, kvh);
                float sc = kk_dot_f32(kr, qh, hd) * scale;
                float ms = 1.0f, vs = 1.0f;
                if (sc > M) {
                    float old = M;
                    M = sc;
                    ms = expf(old - M);
                    kk_scale_axpy_f32(oh, ms, 0.0f, oh, hd);
                } else {
                    vs = expf(sc - M);
                }
                kk_scale_axpy_f32(oh, 1.0f, vs, vr, hd);
                S = S * ms + vs;
            }
            float inv = 1.0f / S;
            for (int d = 0; d < hd; d++) oh[d] *= inv;
        }
    }
}

/* The per-token element-wise steps between the matrix products.  One pass
 * over a token range; run on the pool when the batch is big enough to pay
 * for the hand-off, inline otherwise. */
enum tok_step { STEP_ATTN_NORM, STEP_QK_ROPE_STORE, STEP_RESID_FFN_NORM, STEP_SWIGLU, STEP_RESID };

typedef struct tok_job {
    kiln_context *c;
    const kk_ops *ops;
    const kl_layer *L;
    int layer;
    int n_tok;
    enum tok_step step;
} tok_job;

static void tok_range(const tok_job *j, int i0, int i1) {
    kiln_context *c = j->c;
    const kl_hparams *hp = &c->m->hp;
    const kk_ops *ops = j->ops;
    const kl_layer *L = j->L;
    const int E = hp->n_embd, hd = hp->hd_k;
    const int64_t nq = (int64_t)hp->n_head * hd, nkv = (int64_t)hp->n_head_kv * hd;
    kl_kv *kv = &c->kv;
    for (int i = i0; i < i1; i++) {
        float *x = c->x + (size_t)i * E, *xn = c->xn + (size_t)i * E;
        switch (j->step) {
        case STEP_ATTN_NORM:
            ops->rmsnorm(xn, x, L->attn_norm, E, hp->eps);
            break;
        case STEP_QK_ROPE_STORE: {
            float *qi = c->q + (size_t)i * nq, *ki = c->k + (size_t)i * nkv;
            if (L->bq) kk_add(qi, L->bq, (int)nq);
            if (L->bk) kk_add(ki, L->bk, (int)nkv);
            if (L->bv) kk_add(c->v + (size_t)i * nkv, L->bv, (int)nkv);
            if (L->q_norm) {
                for (int h = 0; h < hp->n_head; h++) ops->rmsnorm(qi + h * hd, qi + h * hd, L->q_norm, hd, hp->eps);
                for (int h = 0; h < hp->n_head_kv; h++) ops->rmsnorm(ki + h * hd, ki + h * hd, L->k_norm, hd, hp->eps);
            }
            const float *cs = c->rope_cs + (size_t)i * hp->rope.n_rot;
            if (hp->rope.neox) {
                ops->rope_neox(cs, qi, hp->n_head, hd, hp->rope.n_rot);
                ops->rope_neox(cs, ki, hp->n_head_kv, hd, hp->rope.n_rot);
            } else {
                kk_rope_apply(&hp->rope, cs, qi, hp->n_head, hd);
                kk_rope_apply(&hp->rope, cs, ki, hp->n_head_kv, hd);
            }
            /* store this token's K and V in its cache cell */
            int64_t cell = kl_kv_cell(kv, c->b_seq[i], c->b_pos[i]);
            const float *vi = c->v + (size_t)i * nkv;
            for (int h = 0; h < hp->n_head_kv; h++) { /* head-major blocks (model.h) */
                const float *kh = ki + (size_t)h * hd, *vh = vi + (size_t)h * hd;
                if (kv->type == KILN_KV_F32) {
                    memcpy(kl_kv_khead(kv, j->layer, cell, h), kh, (size_t)hd * sizeof(float));
                    memcpy(kl_kv_vhead(kv, j->layer, cell, h), vh, (size_t)hd * sizeof(float));
                } else if (kv->type == KILN_KV_Q8_0) { /* the reference quantizer: the same bits on every CPU */
                    const kq_traits *q8 = kq_get(KQ_Q8_0);
                    q8->from_f32(kh, kl_kv_khead(kv, j->layer, cell, h), hd);
                    q8->from_f32(vh, kl_kv_vhead(kv, j->layer, cell, h), hd);
                } else {
                    ops->f32_to_f16_row(kh, kl_kv_khead(kv, j->layer, cell, h), hd);
                    ops->f32_to_f16_row(vh, kl_kv_vhead(kv, j->layer, cell, h), hd);
                }
            }
            break;
        }
        case STEP_RESID_FFN_NORM: /* x += attention output (in xn), then normalize */
            ops->add(x, xn, E);
            ops->rmsnorm(xn, x, L->ffn_norm, E, hp->eps);
            break;
        case STEP_SWIGLU:
            ops->swiglu(c->gate + (size_t)i * hp->n_ff, c->up + (size_t)i * hp->n_ff, hp->n_ff);
            break;
        case STEP_RESID:
            ops->add(x, xn, E);
            break;
        }
    }
}

static void tok_task(void *ud, int ith, int nth) {
    const tok_job *j = ud;
    long lo, hi;
    kpool_range(j->n_tok, ith, nth, &lo, &hi);
    tok_range(j, (int)lo, (int)hi);
}

/* Batches below this many tokens do the element-wise steps on the calling
 * thread: a pool hand-off costs about as much as a few tokens' work. */
#define TOK_PAR_MIN 4

static void tok_step(tok_job *j, enum tok_step step) {
    j->step = step;
    if (j->n_tok >= TOK_PAR_MIN) kpool_run(j->c->pool, tok_task, j);
    else tok_range(j, 0, j->n_tok);
}

/* Resolves sequence and position of every token and checks the batch
 * against the context before any compute. */
static kiln_status check_batch(kiln_context *c, const kiln_batch *b, int *n_out) {
    const kl_hparams *hp = &c->m->hp;
    if (b->n <= 0) return kl_fail(c, KILN_ERR_INVALID_ARG, "empty batch");
    if (b->n > c->p.n_batch)
        return kl_fail(c, KILN_ERR_INVALID_ARG, "batch of %d tokens exceeds n_batch %d", b->n, c->p.n_batch);
    int32_t grow[64] = {0}; /* tokens this batch adds per sequence */
    int32_t *add = c->kv.n_seq <= 64 ? grow : NULL;
    if (!add) return kl_fail(c, KILN_ERR_INTERNAL, "too many sequences");
    *n_out = 0;
    for (int i = 0; i < b->n; i++) {
        int s = b->seq ? b->seq[i] : 0;
        if (s < 0 || s >= c->kv.n_seq)
            return kl_fail(c, KILN_ERR_INVALID_ARG, "token %d: sequence %d out of range (0..%d)", i, s, c->kv.n_seq - 1);
        if (b->token[i] < 0 || b->token[i] >= hp->n_vocab)
            return kl_fail(c, KILN_ERR_INVALID_ARG, "token %d: id %d out of range (vocab %d)", i, b->token[i], hp->n_vocab);
        int32_t p = c->kv.seqs[s].len + add[s];
        if (b->pos && b->pos[i] != p)
            return kl_fail(c, KILN_ERR_INVALID_ARG, "token %d: position %d, but sequence %d continues at %d", i,
                           b->pos[i], s, p);
        if (p >= c->p.n_ctx)
            return kl_fail(c, KILN_ERR_CONTEXT_FULL, "sequence %d would hold %d tokens; the context is %d", s, p + 1,
                           c->p.n_ctx);
        c->b_seq[i] = s;
        c->b_pos[i] = p;
        add[s]++;
        int want = b->logits ? b->logits[i] != 0 : i == b->n - 1;
        c->out_idx[i] = want ? (*n_out)++ : -1;
    }
    for (int s = 0; s < c->kv.n_seq; s++)
        if (add[s] && kl_kv_reserve(&c->kv, s, c->kv.seqs[s].len + add[s]))
            return kl_fail(c, KILN_ERR_CONTEXT_FULL, "the KV cache has no free blocks for sequence %d", s);
    return KILN_OK;
}

kiln_status kl_forward(kiln_context *c, const kiln_batch *b) {
    const kiln_model *m = c->m;
    const kl_hparams *hp = &m->hp;
    int n_out = 0;
    kiln_status st = check_batch(c, b, &n_out);
    if (st != KILN_OK) return st;
    const int n = b->n, E = hp->n_embd, hd = hp->hd_k;
    const int64_t nq = (int64_t)hp->n_head * hd, nkv = (int64_t)hp->n_head_kv * hd;
    kl_kv *kv = &c->kv;
    const kk_ops *ops = kk_ops_best();

    /* attention tiles: runs of up to KL_ATTN_TILE tokens of one sequence
     * at consecutive positions, with an F16 cache all past
     * KL_ATTN_F16_ACC_MAX (float accumulator), with Q8_0 any; every other
     * token is a tile of its own */
    c->n_tile = 0;
    for (int i = 0; i < n; i++) {
        const int t = c->n_tile;
        const int join = i > 0 && c->b_seq[i] == c->b_seq[i - 1] && c->b_pos[i] == c->b_pos[i - 1] + 1 &&
                         i - c->b_tile[t - 1] < KL_ATTN_TILE &&
                         (kv->type == KILN_KV_Q8_0 || (kv->type == KILN_KV_F16 && attn_acc_f32(c->b_pos[i - 1])));
        if (!join) c->b_tile[c->n_tile++] = i;
    }
    c->b_tile[c->n_tile] = n;

    for (int i = 0; i < n; i++) {
        kk_get_row(&m->tok_embd, b->token[i], c->x + (size_t)i * E);
        kk_rope_table(&hp->rope, c->b_pos[i], c->rope_cs + (size_t)i * hp->rope.n_rot);
    }

    for (int l = 0; l < hp->n_layer; l++) {
        const kl_layer *L = &m->layers[l];
        tok_job tj = {c, ops, L, l, n, STEP_ATTN_NORM};
        tok_step(&tj, STEP_ATTN_NORM);
        kk_mm_out qkv[3] = {{&L->wq, c->q, nq}, {&L->wk, c->k, nkv}, {&L->wv, c->v, nkv}};
        kk_matmul_multi(c->pool, qkv, 3, c->xn, n, c->mm_scratch);
        tok_step(&tj, STEP_QK_ROPE_STORE);
        attn_job aj = {c, ops, l, n, 0};
        kpool_run(c->pool, attn_task, &aj);
        kk_matmul(c->pool, &L->wo, c->att, n, c->xn, E, c->mm_scratch);
        tok_step(&tj, STEP_RESID_FFN_NORM);
        kk_mm_out gu[2] = {{&L->w_gate, c->gate, hp->n_ff}, {&L->w_up, c->up, hp->n_ff}};
        kk_matmul_multi(c->pool, gu, 2, c->xn, n, c->mm_scratch);
        tok_step(&tj, STEP_SWIGLU);
        kk_matmul(c->pool, &L->w_down, c->gate, n, c->xn, E, c->mm_scratch);
        tok_step(&tj, STEP_RESID);
    }

    /* commit the new tokens to their sequences */
    for (int i = 0; i < n; i++) {
        kl_seq *s = &kv->seqs[c->b_seq[i]];
        if (c->b_pos[i] + 1 > s->len) s->len = c->b_pos[i] + 1;
    }

    if (n_out > c->logits_cap) return kl_fail(c, KILN_ERR_INTERNAL, "logits buffer too small");
    for (int i = 0; i < n; i++)
        if (c->out_idx[i] >= 0)
            ops->rmsnorm(c->out_rows + (size_t)c->out_idx[i] * E, c->x + (size_t)i * E, m->out_norm, E, hp->eps);
    if (n_out && !c->p.embeddings)
        kk_matmul(c->pool, &m->output, c->out_rows, n_out, c->logits, hp->n_vocab, c->mm_scratch);
    return KILN_OK;
}
