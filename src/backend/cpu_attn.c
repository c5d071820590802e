/* The CPU backend's attention (backend.h): the q/k post-processing, the
 * store into the paged KV cache and attention over it. */
#include "backend/cpu.h"

#include "kiln.h"
#include "quant/quant.h"

#include <math.h>
#include <stdatomic.h>
#include <string.h>

/* ---------------------------------------------------- the cache's geometry */

static inline int64_t kv_cell(const backend_kv *kv, int seq, int32_t pos) {
    return (int64_t)kv->blocks[seq][pos >> BACKEND_KV_BLOCK_SHIFT] * BACKEND_KV_BLOCK + (pos & (BACKEND_KV_BLOCK - 1));
}

static inline uint8_t *kblock(const backend_kv *kv, int layer, int64_t b) {
    return (uint8_t *)kv->mem + (size_t)b * kv->block_bytes + kv->l_off[layer];
}

/* a layer's V run follows its K run in a block (V in K: is it) */
static inline uint8_t *vblock(const backend_kv *kv, int layer, int64_t b) {
    return kblock(kv, layer, b) + (kv->v_in_k ? 0 : (size_t)kv->l_hkv[layer] * BACKEND_KV_BLOCK * kv->l_hrow[layer]);
}

/* the hd elements of KV head h in a cell: head-major blocks */
static inline size_t head_off(const backend_kv *kv, int layer, int64_t cell, int h) {
    return ((size_t)h * BACKEND_KV_BLOCK + (size_t)(cell % BACKEND_KV_BLOCK)) * kv->l_hrow[layer];
}

static inline void *khead(const backend_kv *kv, int layer, int64_t cell, int h) {
    return kblock(kv, layer, cell / BACKEND_KV_BLOCK) + head_off(kv, layer, cell, h);
}

static inline void *vhead(const backend_kv *kv, int layer, int64_t cell, int h) {
    return vblock(kv, layer, cell / BACKEND_KV_BLOCK) + head_off(kv, layer, cell, h);
}

/* ------------------------------------------------------------------- store */

/* Token i's keys and values (n_head_kv rows of hd floats each) into the
 * cache of attention layer `layer`, in the cache's type. */
static void store_one(const backend_ctx *X, const kern_ops *ops, int layer, int i, const float *k, const float *v) {
    const backend_kv *kv = &X->kv;
    const int hd = kv->l_hd[layer];
    const int64_t cell = kv_cell(kv, X->step.seq[i], X->step.pos[i]);
    for (int h = 0; h < kv->l_hkv[layer]; h++) {
        /* V in K: the K row is all there is to store */
        for (int kvi = 0; kvi < (kv->v_in_k ? 1 : 2); kvi++) {
            const float *src = (kvi ? v : k) + (size_t)h * hd;
            void *dst = kvi ? vhead(kv, layer, cell, h) : khead(kv, layer, cell, h);
            if (kv->type == KILN_KV_F32)
                memcpy(dst, src, (size_t)hd * sizeof(float));
            else if (kv->type == KILN_KV_Q8_0) /* the reference quantizer: the same bits on every CPU */
                quant_get(QUANT_Q8_0)->from_f32(src, dst, hd);
            else
                ops->f32_to_f16_row(src, dst, hd);
        }
    }
}

void backend_cpu_kv_store(backend_ctx *X, int layer, int i0, int n, const float *k, const float *v) {
    const kern_ops *ops = backend_cpu_of(X)->k;
    const size_t nkv = (size_t)X->kv.l_hkv[layer] * X->kv.l_hd[layer];
    for (int i = 0; i < n; i++) store_one(X, ops, layer, i0 + i, k + (size_t)i * nkv, v + (size_t)i * nkv);
}

typedef struct qk_job {
    backend_ctx *X;
    const backend_qk *a;
} qk_job;

static void qk_rows(void *ud, int i0, int i1) {
    const qk_job *j = ud;
    const backend_qk *a = j->a;
    backend_ctx *X = j->X;
    const kern_ops *ops = backend_cpu_of(X)->k;
    const int hd = a->hd;
    const int64_t nq = (int64_t)a->n_head * hd, nkv = (int64_t)a->n_head_kv * hd;
    for (int i = i0; i < i1; i++) {
        float *qi = a->q ? a->q + (size_t)i * nq : NULL, *ki = a->k + (size_t)i * nkv, *vi = a->v + (size_t)i * nkv;
        if (qi && a->bq) kern_add(qi, a->bq, (int)nq);
        if (a->bk) kern_add(ki, a->bk, (int)nkv);
        if (a->bv) kern_add(vi, a->bv, (int)nkv);
        if (qi && a->qg) {
            const float *qg = a->qg + (size_t)i * 2 * nq;
            for (int h = 0; h < a->n_head; h++)
                ops->rmsnorm(qi + h * hd, qg + (size_t)h * 2 * hd, a->q_norm, hd, a->eps);
        } else if (qi && a->q_norm) {
            for (int h = 0; h < a->n_head; h++) ops->rmsnorm(qi + h * hd, qi + h * hd, a->q_norm, hd, a->eps);
        }
        if (a->k_norm)
            for (int h = 0; h < a->n_head_kv; h++) ops->rmsnorm(ki + h * hd, ki + h * hd, a->k_norm, hd, a->eps);
        const float *cs = X->step.rope_cs + (size_t)i * X->step.n_rot;
        if (a->rope->neox) {
            if (qi) ops->rope_neox(cs, qi, a->n_head, hd, a->rope->n_rot);
            ops->rope_neox(cs, ki, a->n_head_kv, hd, a->rope->n_rot);
        } else {
            if (qi) kern_rope_apply(a->rope, cs, qi, a->n_head, hd);
            kern_rope_apply(a->rope, cs, ki, a->n_head_kv, hd);
        }
        if (qi && a->temp != 0.0f)
            kern_scale_f32(qi, kern_attn_temp(X->step.pos[i], a->temp, 0.0f, a->temp_floor), (int)nq);
        store_one(X, ops, a->layer, i, ki, vi);
    }
}

void backend_cpu_qk_store(backend_ctx *X, const backend_qk *a, int n) {
    qk_job j = {X, a};
    backend_cpu_for_rows(X, n, qk_rows, &j);
}

/* --------------------------------------------------------------- attention */

typedef struct attn_job {
    backend_ctx *X;
    int layer;
    int window;  /* backend_attn_opts.window */
    float scale; /* score scale */
    const float *q;
    float *out;
    const float *sinks; /* [n_head] the layer's sink logits, NULL: none */
    atomic_long next;   /* next (KV head, tile, head pair) item to claim */
} attn_job;

/* One (tile, head pair) per work item: for each token of the tile
 * (st->tile) and each head, a softmax over the sequence's cached positions
 * 0..pos.  The kernel reads K and V once for the whole item: a tile of up to
 * BACKEND_ATTN_TILE float-accumulator tokens converts each F16 row once for all
 * of its queries, which halved the cost of a long prompt's attention
 * position by position.
 *
 * With an F16 cache the query is rounded to F16 before the K dot, as GGUF
 * runtimes do, and the weighted V sum depends on how far the query sees:
 *   - up to BACKEND_ATTN_F16_ACC_MAX positions, the F16 flash-attention scheme of
 *     llama.cpp's one-query path: an online maximum and an F16 accumulator
 *     rounded after every update, so greedy outputs agree with theirs on
 *     near-ties (the bundled model's recorded continuations, bit for bit);
 *   - beyond, a float accumulator (kern_attn_f16.acc_f32).  Rounding every
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
    backend_ctx *X = j->X;
    const backend_cpu *C = backend_cpu_of(X);
    const backend_step *st = &X->step;
    const backend_kv *kv = &X->kv;
    const int n_head = X->n_head;
    const int hd = kv->l_hd[j->layer], n_head_kv = kv->l_hkv[j->layer], group = n_head / n_head_kv;
    const size_t hrow = kv->l_hrow[j->layer];
    const float scale = j->scale;
    /* per-thread scratch: room for two heads of a tile */
    float *scratch = C->att_scratch + (size_t)ith * C->att_per_thread;
    const kern_ops *ops = C->k;
    const int pairs = (group + 1) / 2;
    const long n_items = (long)st->n_tile * n_head_kv * pairs;
    for (long w; (w = atomic_fetch_add_explicit(&j->next, 1, memory_order_relaxed)) < n_items;) {
        /* items go KV head by KV head, then tile, then pairs of the heads
         * sharing it (one kernel call reads K and V once for both): items
         * in a row read the same K/V rows, from this core's cache */
        const long per_kvh = (long)st->n_tile * pairs;
        const int kvh = (int)(w / per_kvh), tile = (int)(w % per_kvh / pairs), h = kvh * group + 2 * (int)(w % pairs);
        const int nq = h + 1 < (kvh + 1) * group ? 2 : 1;
        const int i = st->tile[tile], nt = st->tile[tile + 1] - i;
        int s = st->seq[i], pos = st->pos[i];
        /* a token of an image attending both ways (a tile of its own) sees
         * up to the image's last position, its window still ending where
         * its own would start */
        const int see = st->see ? st->see[i] : pos;
        const int window = j->window > 0 ? j->window + (see - pos) : 0;
        pos = see;
        const float *q = j->q + ((size_t)i * n_head + h) * hd;
        float *o = j->out + ((size_t)i * n_head + h) * hd;
        const float *sink = j->sinks ? j->sinks + h : NULL;
        if (kv->type == KILN_KV_Q8_0) {
            const kern_attn_q8 a = {
                .q = q,
                .nq = nq,
                .nt = nt,
                .tok_stride = (size_t)n_head * hd,
                .hd = hd,
                .n_pos = pos + 1,
                .blocks = kv->blocks[s],
                .block_shift = BACKEND_KV_BLOCK_SHIFT,
                .k = kblock(kv, j->layer, 0) + (size_t)kvh * BACKEND_KV_BLOCK * hrow,
                .v = vblock(kv, j->layer, 0) + (size_t)kvh * BACKEND_KV_BLOCK * hrow,
                .block_stride = kv->block_bytes,
                .row_stride = hrow,
                .scale = scale,
                .window = window,
                .sink = sink,
                .out = o,
                .scratch = scratch,
            };
            ops->attn_q8(&a);
            continue;
        }
        if (kv->type == KILN_KV_F16) {
            const kern_attn_f16 a = {
                .q = q,
                .nq = nq,
                .nt = nt,
                .tok_stride = (size_t)n_head * hd,
                .hd = hd,
                .n_pos = pos + 1,
                .blocks = kv->blocks[s],
                .block_shift = BACKEND_KV_BLOCK_SHIFT,
                .k = (const uint16_t *)kblock(kv, j->layer, 0) + (size_t)kvh * BACKEND_KV_BLOCK * hd,
                .v = (const uint16_t *)vblock(kv, j->layer, 0) + (size_t)kvh * BACKEND_KV_BLOCK * hd,
                .block_stride = kv->block_bytes / sizeof(uint16_t),
                .row_stride = (size_t)hd,
                .scale = scale,
                .acc_f32 = backend_attn_acc_f32(pos),
                .window = window,
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
            for (int t = window > 0 && pos >= window ? pos - window + 1 : 0; t <= pos; t++) {
                const int64_t cell = kv_cell(kv, s, t);
                const float *kr = (const float *)khead(kv, j->layer, cell, kvh);
                const float *vr = (const float *)vhead(kv, j->layer, cell, kvh);
                float sc = kern_dot_f32(kr, qh, hd) * scale;
                float ms = 1.0f, vs = 1.0f;
                if (sc > M) {
                    float old = M;
                    M = sc;
                    ms = expf(old - M);
                    kern_scale_axpy_f32(oh, ms, 0.0f, oh, hd);
                } else {
                    vs = expf(sc - M);
                }
                kern_scale_axpy_f32(oh, 1.0f, vs, vr, hd);
                S = S * ms + vs;
            }
            float inv = kern_attn_inv(S, M, sink ? sink + hh : NULL);
            for (int d = 0; d < hd; d++) oh[d] *= inv;
        }
    }
}

void backend_cpu_attn(backend_ctx *X, int layer, const float *q, float *out, int n, const backend_attn_opts *o) {
    (void)n; /* the step's tiles cover it */
    const int window = o && o->window > 0 ? o->window : 0;
    const float scale = o && o->scale != 0.0f ? o->scale : 1.0f / sqrtf((float)X->kv.l_hd[layer]);
    attn_job aj = {X, layer, window, scale, q, out, o ? o->sinks : NULL, 0};
    thread_pool_run_shared(X->pool, attn_task, &aj);
}
