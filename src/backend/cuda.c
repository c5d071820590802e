/* The CUDA backend (cuda.h): memory, the step's metadata and each op as
 * launches of the fatbin's kernels on the default stream. */
#include "backend/cuda.h"
#include "backend/cuda/shapes.h"
#include "backend/cuda_driver.h"
#include "backend/cuda_kernels.h"

#include "kiln.h"
#include "quant/quant.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* the driver, its primary context and the module of kernels */
static struct {
    const backend_cuda_api *cu;
    void *ctx, *mod;
    char why[256];
} g;

static pthread_once_t g_once = PTHREAD_ONCE_INIT;

/* A driver failure inside an op has no way back to the caller (ops return
 * nothing): it ends the process with the call and the driver's message
 * rather than compute on with wrong data. */
static void check(backend_cuda_result r, const char *what) {
    if (r == 0) return;
    char buf[128];
    fprintf(stderr, "kiln: CUDA %s failed: %s\n", what, backend_cuda_error(r, buf, sizeof buf));
    abort();
}

static void unsupported(const char *what) {
    fprintf(stderr, "kiln: the CUDA backend has no kernel for %s\n", what);
    abort();
}

static void load(void) {
    size_t fb_size = 0;
    const void *fb = backend_cuda_fatbin(&fb_size);
    const backend_cuda_api *cu = backend_cuda_load(g.why, sizeof g.why);
    if (!cu) return;
    /* the mock device (a driver from KILN_CUDA_DRIVER) runs its own copy
     * of the kernels, whatever the image */
    static const uint64_t no_image = 0;
    if (!fb && !cu->overridden) {
        snprintf(g.why, sizeof g.why, "this build has no CUDA kernels (no nvcc, or KILN_CUDA=OFF)");
        return;
    }
    char buf[128];
    int dev = 0;
    backend_cuda_result r = cu->device_get(&dev, 0);
    if (r == 0) r = cu->primary_retain(&g.ctx, dev);
    if (r == 0) r = cu->ctx_set(g.ctx);
    if (r != 0) {
        snprintf(g.why, sizeof g.why, "cannot open the GPU: %s", backend_cuda_error(r, buf, sizeof buf));
        return;
    }
    r = cu->module_load(&g.mod, fb ? fb : (const void *)&no_image);
    if (r != 0) {
        snprintf(g.why, sizeof g.why, "the GPU cannot load kiln's kernels: %s", backend_cuda_error(r, buf, sizeof buf));
        return;
    }
    g.cu = cu;
}

static void current(void) { check(g.cu->ctx_set(g.ctx), "cuCtxSetCurrent"); }

static backend_cuda_ptr dp(const void *p) { return (backend_cuda_ptr)(uintptr_t)p; }

static void *fn(const char *name) {
    void *f;
    check(g.cu->get_function(&f, g.mod, name), name);
    return f;
}

static void launch(const char *name, unsigned gx, unsigned gy, unsigned gz, unsigned bx, void **args) {
    check(g.cu->launch(fn(name), gx, gy, gz, bx, 1, 1, 0, NULL, args, NULL), name);
}

static unsigned ceil_div(int64_t a, int64_t b) { return (unsigned)((a + b - 1) / b); }

/* ------------------------------------------------------------------ memory */

static void *dev_alloc(size_t bytes) {
    backend_cuda_ptr p;
    if (g.cu->mem_alloc(&p, bytes ? bytes : 1) != 0) return NULL;
    return (void *)(uintptr_t)p;
}

static void dev_free(void *p) {
    if (p) check(g.cu->mem_free(dp(p)), "cuMemFree");
}

static void *cuda_map(size_t bytes) {
    current();
    void *p = dev_alloc(bytes);
    if (p) check(g.cu->memset8(dp(p), 0, bytes ? bytes : 1), "cuMemsetD8");
    return p;
}

static void cuda_unmap(void *p, size_t bytes) {
    (void)bytes;
    dev_free(p);
}

static void cuda_copy(void *dst, const void *src, size_t bytes) {
    if (bytes) check(g.cu->dtod(dp(dst), dp(src), bytes), "cuMemcpyDtoD");
}

static void cuda_zero_mem(void *dst, size_t bytes) {
    if (bytes) check(g.cu->memset8(dp(dst), 0, bytes), "cuMemsetD8");
}

/* Weights: every matrix's rows and every vector, 16-byte aligned (what the
 * aligned loads of matvec.cu want), in one allocation; a matrix seen twice
 * (tied embeddings) is uploaded once. */
static size_t align16(size_t n) { return (n + 15) & ~(size_t)15; }

static size_t mat_bytes(const kern_mat *m) { return (size_t)m->nrows * quant_row_size(m->type, m->ncols); }

static void cuda_prepare(kern_mat **mats, int n_mats, const float ***vecs, const int64_t *vlen, int n_vecs, void **mem,
                         size_t *bytes) {
    *mem = NULL;
    *bytes = 0;
    current();
    size_t total = 0;
    for (int i = 0; i < n_mats; i++)
        if (mats[i] && mats[i]->data) total += align16(mat_bytes(mats[i]));
    for (int i = 0; i < n_vecs; i++)
        if (vecs[i] && *vecs[i]) total += align16((size_t)vlen[i] * sizeof(float));
    if (!total) return;
    uint8_t *base = dev_alloc(total);
    if (!base) {
        fprintf(stderr, "kiln: cannot allocate %zu bytes of GPU memory for the weights\n", total);
        abort();
    }
    const void **host = calloc((size_t)n_mats + 1, sizeof *host);
    if (!host) {
        fprintf(stderr, "kiln: out of memory\n");
        abort();
    }
    size_t off = 0;
    for (int i = 0; i < n_mats; i++) {
        kern_mat *m = mats[i];
        if (!m || !m->data) continue;
        host[i] = m->data;
        int seen = -1;
        for (int j = 0; j < i && seen < 0; j++)
            if (host[j] == host[i] && mats[j]->type == m->type && mats[j]->nrows == m->nrows) seen = j;
        m->packed = NULL;
        if (seen >= 0) {
            m->data = mats[seen]->data;
            continue;
        }
        check(g.cu->htod(dp(base + off), host[i], mat_bytes(m)), "cuMemcpyHtoD (weights)");
        m->data = base + off;
        off += align16(mat_bytes(m));
    }
    free(host);
    for (int i = 0; i < n_vecs; i++) {
        if (!vecs[i] || !*vecs[i]) continue;
        check(g.cu->htod(dp(base + off), *vecs[i], (size_t)vlen[i] * sizeof(float)), "cuMemcpyHtoD (weights)");
        *vecs[i] = (const float *)(base + off);
        off += align16((size_t)vlen[i] * sizeof(float));
    }
    *mem = base;
    *bytes = total;
}

static void cuda_release(void *mem, size_t bytes) {
    (void)bytes;
    dev_free(mem);
}

/* --------------------------------------------------------- context state */

/* A device buffer that grows to what a call needs. */
typedef struct dbuf {
    void *p;
    size_t bytes;
} dbuf;

static void *grow(dbuf *b, size_t bytes) {
    if (b->bytes >= bytes && b->p) return b->p;
    dev_free(b->p);
    b->bytes = bytes < 256 ? 256 : bytes * 2;
    b->p = dev_alloc(b->bytes);
    if (!b->p) {
        fprintf(stderr, "kiln: cannot allocate %zu bytes of GPU memory\n", b->bytes);
        abort();
    }
    return b->p;
}

/* a host array into a growing device buffer */
static void *put(dbuf *b, const void *src, size_t bytes) {
    void *p = grow(b, bytes);
    if (bytes) check(g.cu->htod(dp(p), src, bytes), "cuMemcpyHtoD");
    return p;
}

typedef struct backend_cuda {
    dbuf pos, cell;                  /* the step's [n] positions and KV cells */
    dbuf tables, n_kv;               /* [n][max blocks] each token's block table, [n] positions it sees */
    dbuf part;                       /* split-K attention partials */
    dbuf ids, rows, lg;              /* get_rows' ids, output's rows and logits */
    dbuf amax;                       /* argmax results */
    dbuf freqs;                      /* the RoPE table of `rope` */
    int32_t *h_cell, *h_tab, *h_nkv; /* host staging */
    size_t h_cap, h_tab_cap;
    int tab_stride, max_nkv, tables_ok;
    const kern_rope *rope;
    float mscale;
    int n_ctx;
} backend_cuda;

static backend_cuda *cu_of(backend_ctx *X) { return X->dev; }

static int cuda_ctx_init(backend_ctx *X, const backend_ctx_params *p) {
    backend_cuda *C = calloc(1, sizeof *C);
    X->dev = C;
    if (!C) return -1;
    current();
    C->n_ctx = p->n_ctx;
    return 0;
}

static void cuda_ctx_free(backend_ctx *X) {
    backend_cuda *C = X->dev;
    if (C) {
        dbuf *bufs[] = {&C->pos, &C->cell, &C->tables, &C->n_kv, &C->part,
                        &C->ids, &C->rows, &C->lg,     &C->amax, &C->freqs};
        for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) dev_free(bufs[i]->p);
        free(C->h_cell);
        free(C->h_tab);
        free(C->h_nkv);
        free(C);
    }
    X->dev = NULL;
}

static void *cuda_alloc(backend_ctx *X, size_t bytes) {
    (void)X;
    return dev_alloc(bytes);
}

static void cuda_free(backend_ctx *X, void *p) {
    (void)X;
    dev_free(p);
}

static int cuda_reserve(backend_ctx *X, int64_t max_cols, int max_rows) {
    (void)X;
    (void)max_cols;
    (void)max_rows;
    return 0; /* the products need no scratch */
}

static void cuda_upload(backend_ctx *X, void *dst, const void *src, size_t bytes) {
    (void)X;
    if (bytes) check(g.cu->htod(dp(dst), src, bytes), "cuMemcpyHtoD");
}

static void cuda_download(backend_ctx *X, void *dst, const void *src, size_t bytes) {
    (void)X;
    if (bytes) check(g.cu->dtoh(dst, dp(src), bytes), "cuMemcpyDtoH");
}

static void host_room(backend_cuda *C, size_t n) {
    if (n <= C->h_cap) return;
    C->h_cap = n * 2;
    C->h_cell = realloc(C->h_cell, C->h_cap * sizeof(int32_t));
    C->h_nkv = realloc(C->h_nkv, C->h_cap * sizeof(int32_t));
    if (!C->h_cell || !C->h_nkv) {
        fprintf(stderr, "kiln: out of memory\n");
        abort();
    }
}

/* The step: its positions and (with a KV cache) each token's cell go up
 * now; the block tables when the first attention of the step needs them. */
static void cuda_step(backend_ctx *X, const backend_step *s) {
    backend_cuda *C = cu_of(X);
    current();
    X->step = *s;
    C->tables_ok = 0;
    if (s->n <= 0) return;
    put(&C->pos, s->pos, (size_t)s->n * sizeof(int32_t));
    if (!X->kv.blocks) return;
    host_room(C, (size_t)s->n);
    for (int i = 0; i < s->n; i++) {
        const int32_t p = s->pos[i];
        C->h_cell[i] =
            X->kv.blocks[s->seq[i]][p >> BACKEND_KV_BLOCK_SHIFT] * BACKEND_KV_BLOCK + (p & (BACKEND_KV_BLOCK - 1));
    }
    put(&C->cell, C->h_cell, (size_t)s->n * sizeof(int32_t));
}

/* --------------------------------------------------------------- row ops */

/* the kernel name for a GGUF type, "prefix_q4_k"; NULL when none */
static const char *typed(const char *prefix, int type, char *buf, size_t cap) {
    const char *s;
    switch (type) {
    case QUANT_F32: s = "f32"; break;
    case QUANT_F16: s = "f16"; break;
    case QUANT_BF16: s = "bf16"; break;
    case QUANT_Q4_0: s = "q4_0"; break;
    case QUANT_Q4_1: s = "q4_1"; break;
    case QUANT_Q5_0: s = "q5_0"; break;
    case QUANT_Q5_1: s = "q5_1"; break;
    case QUANT_Q8_0: s = "q8_0"; break;
    case QUANT_Q2_K: s = "q2_k"; break;
    case QUANT_Q3_K: s = "q3_k"; break;
    case QUANT_Q4_K: s = "q4_k"; break;
    case QUANT_Q5_K: s = "q5_k"; break;
    case QUANT_Q6_K: s = "q6_k"; break;
    case QUANT_IQ4_NL: s = "iq4_nl"; break;
    case QUANT_IQ4_XS: s = "iq4_xs"; break;
    default: return NULL;
    }
    snprintf(buf, cap, "%s_%s", prefix, s);
    return buf;
}

static int cuda_has_type(int type) {
    char buf[32];
    return typed("k", type, buf, sizeof buf) != NULL;
}

static void need_type(int type, char *buf, size_t cap, const char *prefix) {
    if (!typed(prefix, type, buf, cap)) unsupported(quant_get(type)->name);
}

static void cuda_get_rows(backend_ctx *X, const kern_mat *w, const int32_t *ids, int n, float *out) {
    if (n <= 0) return;
    char name[48];
    need_type(w->type, name, sizeof name, "kcu_get_rows");
    const int32_t *d_ids = put(&cu_of(X)->ids, ids, (size_t)n * sizeof(int32_t));
    const uint8_t *dw = w->data;
    int64_t w_stride = (int64_t)quant_row_size(w->type, w->ncols), out_stride = w->ncols;
    int cols = (int)w->ncols;
    void *args[] = {&dw, &w_stride, &d_ids, &out, &out_stride, &cols};
    launch(name, (unsigned)n, 1, 1, 64, args);
}

static void rmsnorm_rows(const float *x, int64_t x_stride, const float *w, float *out, int64_t out_stride, int rows,
                         int dim, float eps) {
    if (rows <= 0) return;
    void *args[] = {&x, &x_stride, &w, &out, &out_stride, &dim, &eps};
    launch("kcu_rmsnorm", (unsigned)rows, 1, 1, 256, args);
}

static void cuda_rmsnorm(backend_ctx *X, float *out, const float *x, const float *w, int n, int dim, float eps) {
    (void)X;
    rmsnorm_rows(x, dim, w, out, dim, n, dim, eps);
}

static unsigned flat_grid(int64_t n) {
    const int64_t b = (n + 255) / 256;
    return (unsigned)(b < 1 ? 1 : b > 4096 ? 4096 : b);
}

static void add_n(float *y, const float *x, int64_t n) {
    if (n <= 0) return;
    void *args[] = {&y, &x, &n};
    launch("kcu_add", flat_grid(n), 1, 1, 256, args);
}

static void cuda_add(backend_ctx *X, float *y, const float *x, int n, int dim) {
    (void)X;
    add_n(y, x, (int64_t)n * dim);
}

static void cuda_add_rmsnorm(backend_ctx *X, float *y, const float *x, float *out, const float *w, int n, int dim,
                             float eps) {
    cuda_add(X, y, x, n, dim);
    cuda_rmsnorm(X, out, y, w, n, dim, eps);
}

static void cuda_swiglu(backend_ctx *X, float *gate, const float *u, int n, int dim) {
    (void)X;
    int64_t len = (int64_t)n * dim;
    if (len <= 0) return;
    void *args[] = {&gate, &u, &len};
    launch("kcu_swiglu", flat_grid(len), 1, 1, 256, args);
}

static void cuda_gelu(backend_ctx *X, float *x, int n, int dim) {
    (void)X;
    int64_t len = (int64_t)n * dim;
    if (len <= 0) return;
    void *args[] = {&x, &len};
    launch("kcu_gelu", flat_grid(len), 1, 1, 256, args);
}

/* --------------------------------------------------------------- products */

/* y [n][ldy] = x [n][ncols] times w's rows: matvec for up to
 * KCU_MV_MAXV tokens a launch, the tensor-core GEMM beyond */
static void cuda_matmul(backend_ctx *X, const kern_mat *w, const float *x, int n, float *y, int64_t ldy) {
    (void)X;
    if (n <= 0 || w->nrows <= 0) return;
    char name[48];
    const uint8_t *dw = w->data;
    int64_t w_stride = (int64_t)quant_row_size(w->type, w->ncols), x_stride = w->ncols, y_stride = ldy;
    int rows = (int)w->nrows, cols = (int)w->ncols;
    if (n <= KCU_MV_MAXV) {
        need_type(w->type, name, sizeof name, "kcu_matvec");
        void *args[] = {&dw, &w_stride, &x, &x_stride, &y, &y_stride, &rows, &cols, &n};
        launch(name, ceil_div(rows, KCU_MV_WARPS), 1, 1, 32 * KCU_MV_WARPS, args);
        return;
    }
    need_type(w->type, name, sizeof name, "kcu_gemm");
    void *args[] = {&x, &x_stride, &dw, &w_stride, &y, &y_stride, &n, &rows, &cols};
    launch(name, ceil_div(rows, KCU_GM_BN), ceil_div(n, KCU_GM_BM), 1, KCU_GM_THREADS, args);
}

static void cuda_matmul_multi(backend_ctx *X, const kern_mm_out *outs, int n_out, const float *x, int n) {
    for (int i = 0; i < n_out; i++) cuda_matmul(X, outs[i].w, x, n, outs[i].y, outs[i].ldy);
}

static void cuda_matmul_ranges(backend_ctx *X, const kern_mm_out *outs, const int32_t *t0, const int32_t *nt, int n_out,
                               const float *x, int n) {
    (void)n;
    for (int i = 0; i < n_out; i++)
        cuda_matmul(X, outs[i].w, x + (size_t)t0[i] * outs[i].w->ncols, nt[i], outs[i].y, outs[i].ldy);
}

/* ----------------------------------------------------------- attention */

/* Layer `layer`'s K rows: cell c at k + c * stride, V rows v_off after
 * each (cuda.h's layout), in elements of the cache's type: F16 values, or
 * bytes of Q8_0 blocks (*q8 set). */
static void *kv_base(const backend_ctx *X, int layer, int64_t *stride, int64_t *v_off, int *q8) {
    const backend_kv *kv = &X->kv;
    if (kv->type != KILN_KV_F16 && kv->type != KILN_KV_Q8_0) unsupported("an F32 KV cache");
    if (kv->v_in_k) unsupported("V stored in K");
    *q8 = kv->type == KILN_KV_Q8_0;
    const size_t esz = *q8 ? 1 : sizeof(uint16_t);
    *stride = (int64_t)(kv->block_bytes / BACKEND_KV_BLOCK / esz);
    *v_off = (int64_t)((size_t)kv->l_hkv[layer] * kv->l_hrow[layer] / esz);
    return (uint8_t *)kv->mem + kv->l_off[layer] / BACKEND_KV_BLOCK;
}

static void store(backend_ctx *X, int layer, int i0, int n, const float *k, const float *v) {
    if (n <= 0) return;
    int64_t stride, v_off;
    int q8;
    void *cache = kv_base(X, layer, &stride, &v_off, &q8);
    const int32_t *cell = (const int32_t *)cu_of(X)->cell.p + i0;
    const char *name = q8 ? "kcu_kv_write_q8" : "kcu_kv_write";
    int len = X->kv.l_hkv[layer] * X->kv.l_hd[layer]; /* a row: every KV head's values */
    int64_t src_stride = len, off = 0;
    void *ka[] = {&k, &src_stride, &cache, &stride, &off, &cell, &len};
    launch(name, (unsigned)n, 1, 1, 64, ka);
    off = v_off;
    void *va[] = {&v, &src_stride, &cache, &stride, &off, &cell, &len};
    launch(name, (unsigned)n, 1, 1, 64, va);
}

static void cuda_kv_store(backend_ctx *X, int layer, int i0, int n, const float *k, const float *v) {
    store(X, layer, i0, n, k, v);
}

/* RMSNorm of each head row of a [n][heads][hd] tensor, in place */
static void head_norm(float *x, const float *w, int n, int heads, int hd, float eps) {
    rmsnorm_rows(x, hd, w, x, hd, n * heads, hd, eps);
}

static void rope(backend_ctx *X, float *x, int n, int heads, int hd, const kern_rope *r) {
    backend_cuda *C = cu_of(X);
    if (C->rope != r) {
        float freqs[KCU_ATT_MAXD];
        if (r->n_rot / 2 > KCU_ATT_MAXD) unsupported("RoPE over more than 512 dimensions");
        backend_cuda_rope_freqs(r, freqs, &C->mscale);
        put(&C->freqs, freqs, (size_t)(r->n_rot / 2) * sizeof(float));
        C->rope = r;
    }
    int64_t tok_stride = (int64_t)heads * hd;
    int n_rot = r->n_rot, neox = r->neox;
    const int32_t *pos = C->pos.p;
    const float *freqs = C->freqs.p;
    float mscale = C->mscale;
    void *args[] = {&x, &tok_stride, &hd, &n_rot, &neox, &pos, &freqs, &mscale};
    launch("kcu_rope", (unsigned)n, (unsigned)heads, 1, 64, args);
}

static void cuda_qk_store(backend_ctx *X, const backend_qk *a, int n) {
    if (n <= 0) return;
    if (a->q && a->temp != 0.0f) unsupported("query temperature");
    const int hd = a->hd;
    const int64_t nq = (int64_t)a->n_head * hd, nkv = (int64_t)a->n_head_kv * hd;
    for (int i = 0; i < n; i++) { /* biases: one launch per token row */
        if (a->q && a->bq) add_n(a->q + i * nq, a->bq, nq);
        if (a->bk) add_n(a->k + i * nkv, a->bk, nkv);
        if (a->bv) add_n(a->v + i * nkv, a->bv, nkv);
    }
    if (a->q && a->qg) /* q = rms(each head's query half of qg) * q_norm */
        rmsnorm_rows(a->qg, 2 * hd, a->q_norm, a->q, hd, n * a->n_head, hd, a->eps);
    else if (a->q && a->q_norm)
        head_norm(a->q, a->q_norm, n, a->n_head, hd, a->eps);
    if (a->k_norm) head_norm(a->k, a->k_norm, n, a->n_head_kv, hd, a->eps);
    if (a->q) rope(X, a->q, n, a->n_head, hd, a->rope);
    rope(X, a->k, n, a->n_head_kv, hd, a->rope);
    store(X, a->layer, 0, n, a->k, a->v);
}

/* Each token of the step as its own query of the split-K decode kernel:
 * its sequence's block table and the positions it sees. */
static void upload_tables(backend_ctx *X) {
    backend_cuda *C = cu_of(X);
    const backend_step *s = &X->step;
    int max_nkv = 1;
    for (int i = 0; i < s->n; i++)
        if (s->pos[i] + 1 > max_nkv) max_nkv = s->pos[i] + 1;
    const int stride = (max_nkv + BACKEND_KV_BLOCK - 1) / BACKEND_KV_BLOCK;
    const size_t cells = (size_t)s->n * stride;
    if (cells > C->h_tab_cap) {
        C->h_tab_cap = cells * 2;
        C->h_tab = realloc(C->h_tab, C->h_tab_cap * sizeof(int32_t));
        if (!C->h_tab) {
            fprintf(stderr, "kiln: out of memory\n");
            abort();
        }
    }
    host_room(C, (size_t)s->n);
    for (int i = 0; i < s->n; i++) {
        const int nb = (s->pos[i] + BACKEND_KV_BLOCK) / BACKEND_KV_BLOCK; /* blocks holding 0..pos */
        memcpy(C->h_tab + (size_t)i * stride, X->kv.blocks[s->seq[i]], (size_t)nb * sizeof(int32_t));
        for (int b = nb; b < stride; b++) C->h_tab[(size_t)i * stride + b] = 0;
        C->h_nkv[i] = s->pos[i] + 1;
    }
    put(&C->tables, C->h_tab, cells * sizeof(int32_t));
    put(&C->n_kv, C->h_nkv, (size_t)s->n * sizeof(int32_t));
    C->tab_stride = stride;
    C->max_nkv = max_nkv;
    C->tables_ok = 1;
}

/* positions per split of the decode kernel */
#define CUDA_SPLIT_LEN 256

static void cuda_attn(backend_ctx *X, int layer, const float *q, float *out, int n, const backend_attn_opts *o) {
    if (n <= 0) return;
    backend_cuda *C = cu_of(X);
    if (!C->tables_ok) upload_tables(X);
    int64_t cell_stride, v_off;
    int q8;
    const uint8_t *k = kv_base(X, layer, &cell_stride, &v_off, &q8);
    const uint8_t *v = k + v_off * (q8 ? 1 : 2);
    int hd = X->kv.l_hd[layer], n_head = X->n_head, n_kv_head = X->kv.l_hkv[layer];
    if (hd > KCU_ATT_MAXD || hd % 2 || (q8 && hd % 32)) unsupported("this attention head size");
    float scale = o && o->scale != 0.0f ? o->scale : 1.0f / sqrtf((float)hd);
    int split_len = CUDA_SPLIT_LEN, n_split = (int)ceil_div(C->max_nkv, CUDA_SPLIT_LEN);
    int window = o && o->window > 0 ? o->window : 0;
    const float *sinks = o ? o->sinks : NULL;
    /* tokens in chunks: a grid's z (the decode kernel's queries) and y (the
     * combine's) stop at 65535 */
    const int chunk = n < 32768 ? n : 32768;
    float *part = grow(&C->part, (size_t)chunk * n_head * n_split * (hd + 2) * sizeof(float));
    int64_t q_stride = (int64_t)n_head * hd, out_stride = q_stride;
    int table_stride = C->tab_stride;
    for (int i0 = 0; i0 < n; i0 += chunk) {
        const int nc = n - i0 < chunk ? n - i0 : chunk;
        const float *qc = q + (size_t)i0 * q_stride;
        float *oc = out + (size_t)i0 * out_stride;
        const int32_t *tables = (const int32_t *)C->tables.p + (size_t)i0 * table_stride;
        const int32_t *n_kv = (const int32_t *)C->n_kv.p + i0;
        void *da[] = {&qc,     &q_stride,  &k,  &v,     &cell_stride, &tables, &table_stride, &n_kv,
                      &n_head, &n_kv_head, &hd, &scale, &split_len,   &window, &part};
        launch(q8 ? "kcu_attn_decode_q8" : "kcu_attn_decode", (unsigned)n_head, (unsigned)n_split, (unsigned)nc,
               32 * KCU_ATT_WARPS, da);
        const float *cpart = part;
        void *ca[] = {&cpart, &n_split, &n_head, &hd, &sinks, &oc, &out_stride};
        launch("kcu_attn_combine", (unsigned)n_head, (unsigned)nc, 1, 64, ca);
    }
}

/* ---------------------------------------------------- mixture of experts */

/* The FFN's activations for n_batch tokens on the device (per token row;
 * the routed rows grouped by expert), and the host's copy of the routing
 * that places them. */
typedef struct cuda_moe_ws {
    float *router, *sel, *selw, *sgl; /* [n][n_expert] x2, [n][k], [n] */
    float *mx, *mg, *mu, *md;         /* [n * k][n_embd], [n * k][F_exp] x2, [n * k][n_embd] */
    float *sg, *su;                   /* [n][F_sh] */
    int32_t *d_ids, *d_row_of, *d_row_tok;
    int32_t *ids, *row_of, *row_tok; /* host: [n][k] experts, each (token, slot)'s row, each row's token */
    int32_t *e_count, *e_off;        /* host: [n_expert] */
} cuda_moe_ws;

static void cuda_moe_ws_free(backend_ctx *X, void *ws) {
    (void)X;
    cuda_moe_ws *w = ws;
    if (!w) return;
    void *dev[] = {w->router, w->sel, w->selw, w->sgl,   w->mx,       w->mg,       w->mu,
                   w->md,     w->sg,  w->su,   w->d_ids, w->d_row_of, w->d_row_tok};
    for (size_t i = 0; i < sizeof dev / sizeof dev[0]; i++) dev_free(dev[i]);
    void *host[] = {w->ids, w->row_of, w->row_tok, w->e_count, w->e_off};
    for (size_t i = 0; i < sizeof host / sizeof host[0]; i++) free(host[i]);
    free(w);
}

static void *cuda_moe_ws_new(backend_ctx *X, const backend_moe_hp *h, int n_embd, int n_batch) {
    cuda_moe_ws *w = calloc(1, sizeof *w);
    if (!w) return NULL;
    current();
    const size_t B = (size_t)n_batch, E = (size_t)n_embd, NE = (size_t)h->n_expert, KU = (size_t)h->n_used;
    const size_t Fe = (size_t)h->F_exp, Fs = (size_t)h->F_sh;
    struct {
        void **p;
        size_t bytes;
        int host;
    } bufs[] = {
        {(void **)&w->router, B * NE * 4, 0},    {(void **)&w->sel, B * NE * 4, 0},
        {(void **)&w->selw, B * KU * 4, 0},      {(void **)&w->sgl, B * 4, 0},
        {(void **)&w->mx, B * KU * E * 4, 0},    {(void **)&w->mg, B * KU * Fe * 4, 0},
        {(void **)&w->mu, B * KU * Fe * 4, 0},   {(void **)&w->md, B * KU * E * 4, 0},
        {(void **)&w->sg, B * Fs * 4, 0},        {(void **)&w->su, B * Fs * 4, 0},
        {(void **)&w->d_ids, B * KU * 4, 0},     {(void **)&w->d_row_of, B * KU * 4, 0},
        {(void **)&w->d_row_tok, B * KU * 4, 0}, {(void **)&w->ids, B * KU * 4, 1},
        {(void **)&w->row_of, B * KU * 4, 1},    {(void **)&w->row_tok, B * KU * 4, 1},
        {(void **)&w->e_count, NE * 4, 1},       {(void **)&w->e_off, NE * 4, 1},
    };
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) {
        const size_t bytes = bufs[i].bytes ? bufs[i].bytes : 1;
        if (!(*bufs[i].p = bufs[i].host ? malloc(bytes) : dev_alloc(bytes))) {
            cuda_moe_ws_free(X, w);
            return NULL;
        }
    }
    return w;
}

/* rows [rows][n] += b [n] */
static void add_rows(float *y, const float *b, int rows, int n) {
    int64_t len = (int64_t)rows * n;
    if (len <= 0) return;
    void *args[] = {&y, &b, &rows, &n};
    launch("kcu_add_rows", flat_grid(len), 1, 1, 256, args);
}

static void swiglu_oai(float *gate, const float *u, int64_t len) {
    if (len <= 0) return;
    float alpha = 1.702f, limit = 7.0f;
    void *args[] = {&gate, &u, &len, &alpha, &limit};
    launch("kcu_swiglu_oai", flat_grid(len), 1, 1, 256, args);
}

static void relu_sq(float *x, int64_t len) {
    if (len <= 0) return;
    void *args[] = {&x, &len};
    launch("kcu_relu_sq", flat_grid(len), 1, 1, 256, args);
}

/* the rows of each expert's group: bias[e] (width floats) added */
static void add_expert_bias(const cuda_moe_ws *w, const float *bias, float *rows, int width, int n_expert) {
    for (int e = 0; e < n_expert; e++)
        if (w->e_count[e]) add_rows(rows + (size_t)w->e_off[e] * width, bias + (size_t)e * width, w->e_count[e], width);
}

/* backend_cpu_moe_ffn's steps on the device: the router and the shared
 * expert's products, the routing (kcu_moe_route), whose ids come back to
 * the host to group the rows by expert, each used expert's products over
 * its group (matvec or GEMM), and the weighted sum per token. */
static void cuda_moe_ffn(backend_ctx *X, const backend_moe_hp *h, const backend_moe_layer *L, void *ws, float *xn,
                         float *y, int n_embd, int n) {
    cuda_moe_ws *w = ws;
    if (n <= 0) return;
    const int E = n_embd, NE = h->n_expert, KU = h->n_used, Fe = h->F_exp, Fs = h->F_sh;
    const int shared = L->s_up.data != NULL, gated = shared && L->s_gate_inp;
    const int relu2 = h->act == BACKEND_MOE_RELU2;
    cuda_matmul(X, &L->router, xn, n, w->router, NE);
    if (L->router_b) add_rows(w->router, L->router_b, n, NE);
    if (shared) {
        if (!relu2) cuda_matmul(X, &L->s_gate, xn, n, w->sg, Fs);
        cuda_matmul(X, &L->s_up, xn, n, relu2 ? w->sg : w->su, Fs);
        if (gated) {
            const kern_mat sgi = {L->s_gate_inp, QUANT_F32, E, 1, NULL};
            cuda_matmul(X, &sgi, xn, n, w->sgl, 1);
        }
    }
    /* route */
    int mode = h->gating == BACKEND_MOE_TOPK_SOFTMAX ? 1 : h->sigmoid || L->sel_bias || h->n_group > 1 ? 2 : 0;
    int norm = h->w_norm, sig = h->sigmoid, n_group = h->n_group, n_group_used = h->n_group_used, nn = n, ne = NE,
        ku = KU;
    float scale = h->w_scale;
    if (n_group > 256) unsupported("more than 256 expert groups");
    const float *bias = L->sel_bias;
    void *ra[] = {&w->router, &w->sel, &w->d_ids, &w->selw, &nn,   &ne,      &ku,
                  &mode,      &norm,   &scale,    &sig,     &bias, &n_group, &n_group_used};
    launch("kcu_moe_route", ceil_div(n, 64), 1, 1, 64, ra);
    cuda_download(X, w->ids, w->d_ids, (size_t)n * KU * sizeof(int32_t));
    /* group the rows by expert */
    memset(w->e_count, 0, (size_t)NE * sizeof *w->e_count);
    for (int i = 0; i < n * KU; i++) {
        if (w->ids[i] < 0 || w->ids[i] >= NE) unsupported("this routing (an expert id out of range)");
        w->e_count[w->ids[i]]++;
    }
    for (int e = 0, off = 0; e < NE; e++) {
        w->e_off[e] = off;
        off += w->e_count[e];
        w->e_count[e] = 0; /* refilled as rows are placed */
    }
    for (int t = 0; t < n; t++)
        for (int s = 0; s < KU; s++) {
            const int e = w->ids[t * KU + s], r = w->e_off[e] + w->e_count[e]++;
            w->row_of[t * KU + s] = r;
            w->row_tok[r] = t;
        }
    const int rows = n * KU, one = n == 1; /* one token: every expert reads xn itself */
    cuda_upload(X, w->d_row_of, w->row_of, (size_t)rows * sizeof(int32_t));
    if (!one) {
        cuda_upload(X, w->d_row_tok, w->row_tok, (size_t)rows * sizeof(int32_t));
        const float *src = xn;
        float *dst = w->mx;
        int64_t src_stride = E;
        const int32_t *idx = w->d_row_tok;
        int width = E;
        void *ga[] = {&dst, &src, &src_stride, &idx, &width};
        launch("kcu_gather_rows", (unsigned)rows, 1, 1, 128, ga);
    }
    for (int e = 0; e < NE; e++) {
        if (!w->e_count[e]) continue;
        const int r0 = w->e_off[e], cnt = w->e_count[e];
        const float *x = one ? xn : w->mx + (size_t)r0 * E;
        if (!relu2) cuda_matmul(X, &L->e_gate[e], x, cnt, w->mg + (size_t)r0 * Fe, Fe);
        cuda_matmul(X, &L->e_up[e], x, cnt, (relu2 ? w->mg : w->mu) + (size_t)r0 * Fe, Fe);
    }
    if (L->b_gate) add_expert_bias(w, L->b_gate, w->mg, Fe, NE);
    if (L->b_up) add_expert_bias(w, L->b_up, relu2 ? w->mg : w->mu, Fe, NE);
    if (relu2)
        relu_sq(w->mg, (int64_t)rows * Fe);
    else if (h->act == BACKEND_MOE_SWIGLU_OAI)
        swiglu_oai(w->mg, w->mu, (int64_t)rows * Fe);
    else
        cuda_swiglu(X, w->mg, w->mu, rows, Fe);
    for (int e = 0; e < NE; e++) {
        if (!w->e_count[e]) continue;
        const int r0 = w->e_off[e], cnt = w->e_count[e];
        cuda_matmul(X, &L->e_down[e], w->mg + (size_t)r0 * Fe, cnt, w->md + (size_t)r0 * E, E);
    }
    if (L->b_down) add_expert_bias(w, L->b_down, w->md, E, NE);
    if (shared) {
        if (relu2)
            relu_sq(w->sg, (int64_t)n * Fs);
        else
            cuda_swiglu(X, w->sg, w->su, n, Fs);
        cuda_matmul(X, &L->s_down, w->sg, n, y, E);
    }
    const float *md = w->md, *selw = w->selw, *sgl = gated ? w->sgl : NULL;
    const int32_t *row_of = w->d_row_of;
    int width = E, sh = shared;
    void *ca[] = {&md, &row_of, &selw, &ku, &sgl, &sh, &y, &width};
    launch("kcu_moe_combine", ceil_div(E, 256), (unsigned)n, 1, 256, ca);
}

/* ------------------------------------------------------ the rest of a step */

static void cuda_attn_gate(backend_ctx *X, float *att, const float *qg, int n, int n_head, int hd) {
    (void)X;
    const int64_t len = (int64_t)n * n_head * hd;
    if (len <= 0) return;
    void *args[] = {&att, &qg, &n, &n_head, &hd};
    launch("kcu_attn_gate", flat_grid(len), 1, 1, 256, args);
}

static void cuda_scatter_rows(backend_ctx *X, float *dst, const float *src, const int32_t *idx, int n, int dim) {
    (void)X;
    for (int i = 0; i < n; i++)
        cuda_copy(dst + (size_t)idx[i] * dim, src + (size_t)i * dim, (size_t)dim * sizeof(float));
}

static void cuda_zero(backend_ctx *X, void *dst, size_t bytes) {
    (void)X;
    cuda_zero_mem(dst, bytes);
}

static void cuda_copy_ctx(backend_ctx *X, void *dst, const void *src, size_t bytes) {
    (void)X;
    cuda_copy(dst, src, bytes);
}

/* ------------------------------------------------------ the Gated DeltaNet */

/* The delta rule needs no scratch (kcu_gdn_rec keeps the state rows in
 * registers); its key heads must fit a warp's registers. */
static int cuda_gdn_reserve(backend_ctx *X, int Dk, int Dv) {
    (void)X;
    (void)Dv;
    if (Dk > KCU_GDN_MAXD) unsupported("a Gated DeltaNet key head over 256");
    return 0;
}

static float *gdn_live(const backend_gdn *a, int seq) { return a->state + (size_t)seq * a->slot_floats; }

/* where capture k of run r ends, as a row of the step (cpu_gdn.c's) */
static int gdn_cap_end(const backend_gdn *a, int r, int k) {
    const int r0 = a->run[r];
    return k < a->cap_n[r] ? r0 + (a->cap_pos[(size_t)r * BACKEND_GDN_MAX_CAP + k] - a->pos[r0]) : a->run[r + 1];
}

static void gdn_conv(const backend_gdn *a, const float *x, int64_t ldx, float *state, float *y, int n) {
    if (n <= 0) return;
    int C = a->conv_dim, K = a->K;
    const float *w = a->conv_w;
    void *args[] = {&x, &ldx, &w, &state, &y, &n, &C, &K};
    launch("kcu_conv_silu", ceil_div(C, 128), 1, 1, 128, args);
}

static void gdn_l2norm(const backend_gdn *a, float *cv, int n) {
    if (n <= 0) return;
    int64_t stride = a->conv_dim;
    int dk = a->Dk;
    float eps = a->eps;
    void *args[] = {&cv, &stride, &dk, &eps};
    launch("kcu_l2norm", (unsigned)n, (unsigned)(2 * a->Hk), 1, 64, args);
}

/* the delta rule over n tokens whose q/k/v rows start at cv (rows conv_dim
 * apart), gates at decay (log decays) / beta (rows ld_gb apart), into o (NULL: dropped) */
static void gdn_delta(const backend_gdn *a, const float *cv, const float *decay, const float *beta, int64_t ld_gb,
                      float *state, float *o, int n) {
    if (n <= 0) return;
    const float *v = cv + (size_t)2 * a->Hk * a->Dk;
    int64_t ld = a->conv_dim, ld_o = (int64_t)a->Hv * a->Dv;
    int Hk = a->Hk, Hv = a->Hv, dk = a->Dk, dv = a->Dv, grouped = a->kh_grouped;
    float scale = 1.0f / sqrtf((float)a->Dk);
    void *args[] = {&cv,   &ld, &v,  &ld, &decay, &beta, &ld_gb,   &state, &o,
                    &ld_o, &n,  &Hk, &Hv, &dk,    &dv,   &grouped, &scale};
    launch("kcu_gdn_rec", ceil_div(dv, KCU_GDN_WARPS), (unsigned)Hv, 1, 32 * KCU_GDN_WARPS, args);
}

/* backend_cpu_gdn's steps, each over the whole step or per run and capture
 * segment; the state captures and rollback rows are copies on the device. */
static void cuda_gdn(backend_ctx *X, const backend_gdn *a, int n) {
    (void)X;
    if (n <= 0) return;
    if (a->K > KCU_CONV_MAXK) unsupported("a convolution of more than 16 taps");
    const int Hv = a->Hv, CD = a->conv_dim;
    {
        int nn = n, hv = Hv, hk = a->Hk, grouped = a->ba_grouped;
        const float *ba = a->ba, *dt_bias = a->dt_bias, *ssm_a = a->ssm_a;
        float *beta = a->beta, *gd = a->gd;
        void *args[] = {&ba, &dt_bias, &ssm_a, &beta, &gd, &nn, &hv, &hk, &grouped};
        launch("kcu_gdn_gates", flat_grid((int64_t)n * Hv), 1, 1, 256, args);
    }
    const size_t row = (size_t)CD + 2 * (size_t)Hv;
    for (int r = 0; r < a->n_run; r++) { /* a recorded run keeps this layer's inputs */
        if (!a->verify[r]) continue;
        const int r0 = a->run[r], len = a->run[r + 1] - r0;
        float *dst = a->roll + (size_t)a->seq[r0] * a->roll_stride + a->roll_off;
        for (int t = 0; t < len; t++, dst += row) {
            cuda_copy(dst, a->qkv + (size_t)(r0 + t) * CD, (size_t)CD * sizeof(float));
            cuda_copy(dst + CD, a->beta + (size_t)(r0 + t) * Hv, (size_t)Hv * sizeof(float));
            cuda_copy(dst + CD + Hv, a->gd + (size_t)(r0 + t) * Hv, (size_t)Hv * sizeof(float));
        }
    }
    const size_t conv_bytes = (size_t)(a->K - 1) * CD * sizeof(float);
    for (int r = 0; r < a->n_run; r++) { /* the convolution, segments ending at each capture */
        float *state = gdn_live(a, a->seq[a->run[r]]) + a->conv_off;
        for (int k = 0, t = a->run[r]; k <= a->cap_n[r]; k++) {
            const int end = gdn_cap_end(a, r, k);
            if (end > t) {
                gdn_conv(a, a->qkv + (size_t)t * CD, CD, state, a->cv + (size_t)t * CD, end - t);
                t = end;
            }
            if (k < a->cap_n[r])
                cuda_copy(a->cap_dst[(size_t)r * BACKEND_GDN_MAX_CAP + k] + a->conv_off, state, conv_bytes);
        }
    }
    gdn_l2norm(a, a->cv, n);
    const size_t delta_off = a->conv_off + a->conv_floats;
    const size_t delta_bytes = (size_t)Hv * a->Dv * a->Dk * sizeof(float);
    for (int r = 0; r < a->n_run; r++) {
        float *S = gdn_live(a, a->seq[a->run[r]]) + delta_off;
        for (int k = 0, t = a->run[r]; k <= a->cap_n[r]; k++) {
            const int end = gdn_cap_end(a, r, k);
            if (end > t) {
                gdn_delta(a, a->cv + (size_t)t * CD, a->gd + (size_t)t * Hv, a->beta + (size_t)t * Hv, Hv, S,
                          a->o + (size_t)t * Hv * a->Dv, end - t);
                t = end;
            }
            if (k < a->cap_n[r]) cuda_copy(a->cap_dst[(size_t)r * BACKEND_GDN_MAX_CAP + k] + delta_off, S, delta_bytes);
        }
    }
    float *o = a->o;
    const float *z = a->z, *w = a->ssm_norm;
    int dv = a->Dv;
    float eps = a->eps;
    void *args[] = {&o, &z, &w, &dv, &eps};
    launch("kcu_rmsnorm_gated", (unsigned)(n * Hv), 1, 1, 64, args);
}

static void cuda_gdn_replay(backend_ctx *X, const backend_gdn *a, int seq, int n) {
    (void)X;
    if (n <= 0) return;
    const int64_t row = (int64_t)a->conv_dim + 2 * (int64_t)a->Hv;
    const float *in = a->roll + (size_t)seq * a->roll_stride + a->roll_off;
    float *st = gdn_live(a, seq) + a->conv_off;
    gdn_conv(a, in, row, st, a->cv, n);
    gdn_l2norm(a, a->cv, n);
    gdn_delta(a, a->cv, in + a->conv_dim + a->Hv, in + a->conv_dim, row, st + a->conv_floats, NULL, n);
}

/* ------------------------------------------------------------------ output */

static void cuda_output(backend_ctx *X, const backend_out *o) {
    backend_cuda *C = cu_of(X);
    const int E = o->n_embd;
    if (o->n_out <= 0) return;
    float *rows = grow(&C->rows, (size_t)o->n_out * E * sizeof(float));
    for (int i = 0; i < o->n; i++)
        if (o->out_idx[i] >= 0)
            rmsnorm_rows(o->x + (size_t)i * E, E, o->norm, rows + (size_t)o->out_idx[i] * E, E, 1, E, o->eps);
    if (o->rows) cuda_download(X, o->rows, rows, (size_t)o->n_out * E * sizeof(float));
    if (!o->w) return;
    float *lg = grow(&C->lg, (size_t)o->n_out * o->n_vocab * sizeof(float));
    cuda_matmul(X, o->w, rows, o->n_out, lg, o->n_vocab);
    cuda_download(X, o->logits, lg, (size_t)o->n_out * o->n_vocab * sizeof(float));
}

static void cuda_argmax(backend_ctx *X, const float *x, int n, int dim, int32_t *out) {
    if (n <= 0) return;
    int32_t *d = grow(&cu_of(X)->amax, (size_t)n * sizeof(int32_t));
    int64_t stride = dim;
    void *args[] = {&x, &stride, &dim, &d};
    launch("kcu_argmax", (unsigned)n, 1, 1, 256, args);
    cuda_download(X, out, d, (size_t)n * sizeof(int32_t));
}

static const backend_ops k_cuda_ops = {
    .alloc = cuda_alloc,
    .free = cuda_free,
    .reserve = cuda_reserve,
    .upload = cuda_upload,
    .download = cuda_download,
    .step = cuda_step,
    .get_rows = cuda_get_rows,
    .rmsnorm = cuda_rmsnorm,
    .add = cuda_add,
    .add_rmsnorm = cuda_add_rmsnorm,
    .swiglu = cuda_swiglu,
    .gelu = cuda_gelu,
    .matmul = cuda_matmul,
    .matmul_multi = cuda_matmul_multi,
    .matmul_ranges = cuda_matmul_ranges,
    .qk_store = cuda_qk_store,
    .kv_store = cuda_kv_store,
    .attn = cuda_attn,
    .moe_ws_new = cuda_moe_ws_new,
    .moe_ws_free = cuda_moe_ws_free,
    .moe_ffn = cuda_moe_ffn,
    .attn_gate = cuda_attn_gate,
    .scatter_rows = cuda_scatter_rows,
    .zero = cuda_zero,
    .copy = cuda_copy_ctx,
    .gdn_reserve = cuda_gdn_reserve,
    .gdn = cuda_gdn,
    .gdn_replay = cuda_gdn_replay,
    .output = cuda_output,
    .argmax = cuda_argmax,
};

static const backend_backend k_cuda_backend = {
    .name = "cuda",
    .kind = BACKEND_CUDA,
    .ops = &k_cuda_ops,
    .prepare = cuda_prepare,
    .release = cuda_release,
    .map = cuda_map,
    .unmap = cuda_unmap,
    .copy = cuda_copy,
    .zero = cuda_zero_mem,
    .ctx_init = cuda_ctx_init,
    .ctx_free = cuda_ctx_free,
};

const backend_backend *backend_cuda_get(char *why, size_t cap) {
    pthread_once(&g_once, load);
    if (!g.cu && why) snprintf(why, cap, "%s", g.why);
    return g.cu ? &k_cuda_backend : NULL;
}

int backend_cuda_weight_type(int type) { return cuda_has_type(type); }

int backend_cuda_mem(size_t *free_bytes, size_t *total_bytes, char *name, size_t cap) {
    if (!backend_cuda_get(NULL, 0)) return -1;
    current();
    if (g.cu->mem_info(free_bytes, total_bytes) != 0) return -1;
    int dev = 0;
    if (name && cap && (g.cu->device_get(&dev, 0) != 0 || g.cu->device_name(name, (int)cap, dev) != 0))
        snprintf(name, cap, "GPU 0");
    return 0;
}
