/* The decoder pieces the families share (decoder.h): batch resolution,
 * attention over the paged KV cache, the output head. */
#include "model/decoder.h"

#include "quant/quant.h"

#include <math.h>
#include <stdatomic.h>
#include <string.h>

kiln_status kl_batch_begin(kiln_context *c, const kiln_batch *b, int *n_out) {
    const kl_hparams *hp = &c->m->hp;
    if (b->n <= 0) return kl_fail(c, KILN_ERR_INVALID_ARG, "empty batch");
    if (b->n > c->p.n_batch)
        return kl_fail(c, KILN_ERR_INVALID_ARG, "batch of %d tokens exceeds n_batch %d", b->n, c->p.n_batch);
    int32_t add[64] = {0}; /* tokens this batch adds per sequence (n_seq_max <= 64, api.c) */
    if (c->kv.n_seq > 64) return kl_fail(c, KILN_ERR_INTERNAL, "too many sequences");
    *n_out = 0;
    for (int i = 0; i < b->n; i++) {
        int s = b->seq ? b->seq[i] : 0;
        if (s < 0 || s >= c->kv.n_seq)
            return kl_fail(c, KILN_ERR_INVALID_ARG, "token %d: sequence %d out of range (0..%d)", i, s,
                           c->kv.n_seq - 1);
        if (b->token[i] < 0 || b->token[i] >= hp->n_vocab)
            return kl_fail(c, KILN_ERR_INVALID_ARG, "token %d: id %d out of range (vocab %d)", i, b->token[i],
                           hp->n_vocab);
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
    if (*n_out > c->logits_cap) return kl_fail(c, KILN_ERR_INTERNAL, "logits buffer too small");
    return KILN_OK;
}

void kl_batch_commit(kiln_context *c, int n) {
    for (int i = 0; i < n; i++) {
        kl_seq *s = &c->kv.seqs[c->b_seq[i]];
        if (c->b_pos[i] + 1 > s->len) s->len = c->b_pos[i] + 1;
    }
}

void kl_batch_output(kiln_context *c, const kk_ops *ops, const float *x, int n, int n_out) {
    const kiln_model *m = c->m;
    const int E = m->hp.n_embd;
    for (int i = 0; i < n; i++)
        if (c->out_idx[i] >= 0)
            ops->rmsnorm(c->out_rows + (size_t)c->out_idx[i] * E, x + (size_t)i * E, m->out_norm, E, m->hp.eps);
    if (n_out && !c->p.embeddings)
        kk_matmul(c->pool, &m->output, c->out_rows, n_out, c->logits, m->hp.n_vocab, c->mm_scratch);
}

/* ------------------------------------------------------------- attention */

/* Whether the query at position pos (F16 cache) accumulates in float. */
static inline int attn_acc_f32(int pos) { return pos + 1 > KL_ATTN_F16_ACC_MAX; }

void kl_attn_prepare(kiln_context *c, int n) {
    const kl_hparams *hp = &c->m->hp;
    const kl_kv *kv = &c->kv;
    kk_rope rope = hp->rope;
    if (hp->rope_factors_long && c->p.n_ctx > rope.n_ctx_orig) rope.freq_factors = hp->rope_factors_long;
    for (int i = 0; i < n; i++) kk_rope_table(&rope, c->b_pos[i], c->rope_cs + (size_t)i * rope.n_rot);
    /* tiles: runs of up to KL_ATTN_TILE tokens of one sequence at
     * consecutive positions, with an F16 cache all past KL_ATTN_F16_ACC_MAX
     * (float accumulator), with Q8_0 any; every other token is a tile of
     * its own */
    c->n_tile = 0;
    for (int i = 0; i < n; i++) {
        const int t = c->n_tile;
        const int join = i > 0 && c->b_seq[i] == c->b_seq[i - 1] && c->b_pos[i] == c->b_pos[i - 1] + 1 &&
                         i - c->b_tile[t - 1] < KL_ATTN_TILE &&
                         (kv->type == KILN_KV_Q8_0 || (kv->type == KILN_KV_F16 && attn_acc_f32(c->b_pos[i - 1])));
        if (!join) c->b_tile[c->n_tile++] = i;
    }
    c->b_tile[c->n_tile] = n;
}

void kl_attn_store(kiln_context *c, const kk_ops *ops, int ord, int i, const float *k, const float *v) {
    const kl_kv *kv = &c->kv;
    const int hd = kl_kv_hd(kv, ord);
    const int64_t cell = kl_kv_cell(kv, c->b_seq[i], c->b_pos[i]);
    for (int h = 0; h < kl_kv_hkv(kv, ord); h++) { /* head-major blocks (model.h) */
        /* V in K (kv->v_in_k): the K row is all there is to store */
        for (int kvi = 0; kvi < (kv->v_in_k ? 1 : 2); kvi++) {
            const float *src = (kvi ? v : k) + (size_t)h * hd;
            void *dst = kvi ? kl_kv_vhead(kv, ord, cell, h) : kl_kv_khead(kv, ord, cell, h);
            if (kv->type == KILN_KV_F32)
                memcpy(dst, src, (size_t)hd * sizeof(float));
            else if (kv->type == KILN_KV_Q8_0) /* the reference quantizer: the same bits on every CPU */
                kq_get(KQ_Q8_0)->from_f32(src, dst, hd);
            else
                ops->f32_to_f16_row(src, dst, hd);
        }
    }
}

typedef struct attn_job {
    kiln_context *c;
    const kk_ops *ops;
    int layer;
    int window;  /* kl_attn_opts.window */
    float scale; /* score scale */
    const float *q;
    float *out;
    const float *sinks; /* [n_head] the layer's sink logits, NULL: none */
    atomic_long next;   /* next (KV head, tile, head pair) item to claim */
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
static void attn_task(void *ud, int ith, int nth) {
    attn_job *j = ud;
    kiln_context *c = j->c;
    const kl_hparams *hp = &c->m->hp;
    const kl_kv *kv = &c->kv;
    const int hd = kl_kv_hd(kv, j->layer), n_head_kv = kl_kv_hkv(kv, j->layer), group = hp->n_head / n_head_kv;
    const size_t hrow = kl_kv_hrow(kv, j->layer);
    const float scale = j->scale;
    /* per-thread scratch (api.c): room for two heads of a tile */
    float *scratch = c->att_scratch + (size_t)ith * c->att_scratch_per_thread;
    const kk_ops *ops = j->ops;
    const int pairs = (group + 1) / 2;
    const long n_items = (long)c->n_tile * n_head_kv * pairs;
    for (long w; (w = atomic_fetch_add_explicit(&j->next, 1, memory_order_relaxed)) < n_items;) {
        /* items go KV head by KV head, then tile, then pairs of the heads
         * sharing it (one kernel call reads K and V once for both): items
         * in a row read the same K/V rows, from this core's cache */
        const long per_kvh = (long)c->n_tile * pairs;
        const int kvh = (int)(w / per_kvh), tile = (int)(w % per_kvh / pairs), h = kvh * group + 2 * (int)(w % pairs);
        const int nq = h + 1 < (kvh + 1) * group ? 2 : 1;
        const int i = c->b_tile[tile], nt = c->b_tile[tile + 1] - i;
        int s = c->b_seq[i], pos = c->b_pos[i];
        const float *q = j->q + ((size_t)i * hp->n_head + h) * hd;
        float *o = j->out + ((size_t)i * hp->n_head + h) * hd;
        const float *sink = j->sinks ? j->sinks + h : NULL;
        if (kv->type == KILN_KV_Q8_0) {
            const kk_attn_q8 a = {
                .q = q,
                .nq = nq,
                .nt = nt,
                .tok_stride = (size_t)hp->n_head * hd,
                .hd = hd,
                .n_pos = pos + 1,
                .blocks = kv->seqs[s].blocks,
                .block_shift = KL_KV_BLOCK_SHIFT,
                .k = (const uint8_t *)kl_kv_kblock(kv, j->layer, 0) + (size_t)kvh * KL_KV_BLOCK * hrow,
                .v = (const uint8_t *)kl_kv_vblock(kv, j->layer, 0) + (size_t)kvh * KL_KV_BLOCK * hrow,
                .block_stride = kl_kv_block_bytes(kv),
                .row_stride = hrow,
                .scale = scale,
                .window = j->window,
                .sink = sink,
                .out = o,
                .scratch = scratch,
            };
            ops->attn_q8(&a);
            continue;
        }
        if (kv->type == KILN_KV_F16) {
            const kk_attn_f16 a = {
                .q = q,
                .nq = nq,
                .nt = nt,
                .tok_stride = (size_t)hp->n_head * hd,
                .hd = hd,
                .n_pos = pos + 1,
                .blocks = kv->seqs[s].blocks,
                .block_shift = KL_KV_BLOCK_SHIFT,
                .k = (const uint16_t *)kl_kv_kblock(kv, j->layer, 0) + (size_t)kvh * KL_KV_BLOCK * hd,
                .v = (const uint16_t *)kl_kv_vblock(kv, j->layer, 0) + (size_t)kvh * KL_KV_BLOCK * hd,
                .block_stride = kl_kv_block_bytes(kv) / sizeof(uint16_t),
                .row_stride = (size_t)hd,
                .scale = scale,
                .acc_f32 = attn_acc_f32(pos),
                .window = j->window,
                .sink = sink,
                .out = o,
                .scratch = scratch,
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
            for (int t = j->window > 0 && pos >= j->window ? pos - j->window + 1 : 0; t <= pos; t++) {
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
            float inv = kk_attn_inv(S, M, sink ? sink + hh : NULL);
            for (int d = 0; d < hd; d++) oh[d] *= inv;
        }
    }
}

void kl_attn_run_opts(kiln_context *c, const kk_ops *ops, int ord, const float *q, float *out, int n,
                      const kl_attn_opts *o) {
    (void)n; /* the tiles cover the batch */
    const int window = o && o->window > 0 ? o->window : 0;
    const float scale = o && o->scale != 0.0f ? o->scale : 1.0f / sqrtf((float)kl_kv_hd(&c->kv, ord));
    attn_job aj = {c, ops, ord, window, scale, q, out, o ? o->sinks : NULL, 0};
    kpool_run_shared(c->pool, attn_task, &aj);
}

void kl_attn_run(kiln_context *c, const kk_ops *ops, int ord, const float *q, float *out, int n) {
    kl_attn_run_opts(c, ops, ord, q, out, n, NULL);
}
