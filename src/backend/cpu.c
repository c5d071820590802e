/* The CPU backend (backend.h): memory, the context's state, the row-wise
 * ops and the products.  Attention is cpu_attn.c, the MoE FFN cpu_moe.c,
 * the weights' preparation cpu_prepare.c. */
#include "backend/cpu.h"

#include "quant/quant.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

/* ------------------------------------------------------------------ memory */

static void *cpu_map(size_t bytes) {
    void *p = mmap(NULL, bytes ? bytes : 1, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) return NULL;
    madvise(p, bytes ? bytes : 1, MADV_HUGEPAGE); /* fewer TLB misses over a KV cache */
    return p;
}

static void cpu_unmap(void *p, size_t bytes) {
    if (p) munmap(p, bytes ? bytes : 1);
}

static void cpu_copy(void *dst, const void *src, size_t bytes) { memcpy(dst, src, bytes); }

static void cpu_zero_mem(void *dst, size_t bytes) { memset(dst, 0, bytes); }

static void *cpu_alloc(backend_ctx *X, size_t bytes) {
    (void)X;
    return malloc(bytes ? bytes : 1);
}

static void cpu_free(backend_ctx *X, void *p) {
    (void)X;
    free(p);
}

static int cpu_reserve(backend_ctx *X, int64_t max_cols, int max_rows) {
    backend_cpu *C = backend_cpu_of(X);
    const size_t bytes = kern_matmul_scratch_size(max_cols, max_rows);
    if (C->mm_scratch && C->mm_bytes >= bytes) return 0;
    void *p = malloc(bytes);
    if (!p) return -1;
    free(C->mm_scratch);
    C->mm_scratch = p;
    C->mm_bytes = bytes;
    return 0;
}

static void cpu_upload(backend_ctx *X, void *dst, const void *src, size_t bytes) {
    (void)X;
    if (dst != src) memcpy(dst, src, bytes);
}

static void cpu_step(backend_ctx *X, const backend_step *s) { X->step = *s; }

static int cpu_ctx_init(backend_ctx *X, const backend_ctx_params *p) {
    backend_cpu *C = calloc(1, sizeof *C);
    X->dev = C;
    if (!C) return -1;
    quant_init();
    C->k = kern_ops_best();
    C->s = kern_ssm_ops_best();
    /* positions per sequence stay below n_ctx; one block of slack */
    C->att_per_thread =
        p->kv && p->n_head ? kern_attn_scratch(2, BACKEND_ATTN_TILE, p->kv->hd, p->n_ctx + BACKEND_KV_BLOCK) : 0;
    const size_t n_thr = (size_t)(p->pool ? thread_pool_size(p->pool) : 1);
    C->att_scratch = malloc(C->att_per_thread ? n_thr * C->att_per_thread * sizeof(float) : 1);
    return C->att_scratch ? 0 : -1;
}

static void cpu_ctx_free(backend_ctx *X) {
    backend_cpu *C = X->dev;
    if (C) {
        free(C->mm_scratch);
        free(C->att_scratch);
        free(C->gdn_scratch);
        free(C);
    }
    X->dev = NULL;
}

/* ---------------------------------------------------------------- row ops */

typedef struct rows_job {
    backend_cpu_rows_fn fn;
    void *ud;
    int n;
} rows_job;

static void rows_task(void *ud, int ith, int nth) {
    const rows_job *j = ud;
    long lo, hi;
    thread_pool_range(j->n, ith, nth, &lo, &hi);
    j->fn(j->ud, (int)lo, (int)hi);
}

void backend_cpu_for_rows(backend_ctx *X, int n, backend_cpu_rows_fn fn, void *ud) {
    if (n >= BACKEND_CPU_PAR_MIN) {
        rows_job j = {fn, ud, n};
        thread_pool_run(X->pool, rows_task, &j);
    } else {
        fn(ud, 0, n);
    }
}

/* The operands of one row-wise op. */
typedef struct row_args {
    const kern_ops *k;
    float *y;
    float *x;
    const float *w;
    int dim;
    float eps;
} row_args;

static void rmsnorm_rows(void *ud, int i0, int i1) {
    const row_args *a = ud;
    for (int i = i0; i < i1; i++)
        a->k->rmsnorm(a->y + (size_t)i * a->dim, a->x + (size_t)i * a->dim, a->w, a->dim, a->eps);
}

static void cpu_rmsnorm(backend_ctx *X, float *out, const float *x, const float *w, int n, int dim, float eps) {
    row_args a = {backend_cpu_of(X)->k, out, (float *)x, w, dim, eps};
    backend_cpu_for_rows(X, n, rmsnorm_rows, &a);
}

static void add_rows(void *ud, int i0, int i1) {
    const row_args *a = ud;
    for (int i = i0; i < i1; i++) a->k->add(a->y + (size_t)i * a->dim, a->x + (size_t)i * a->dim, a->dim);
}

static void cpu_add(backend_ctx *X, float *y, const float *x, int n, int dim) {
    row_args a = {backend_cpu_of(X)->k, y, (float *)x, NULL, dim, 0.0f};
    backend_cpu_for_rows(X, n, add_rows, &a);
}

typedef struct add_norm_args {
    const kern_ops *k;
    float *y, *out;
    const float *x, *w;
    int dim;
    float eps;
} add_norm_args;

static void add_rmsnorm_rows(void *ud, int i0, int i1) {
    const add_norm_args *a = ud;
    for (int i = i0; i < i1; i++) {
        float *y = a->y + (size_t)i * a->dim;
        a->k->add(y, a->x + (size_t)i * a->dim, a->dim);
        a->k->rmsnorm(a->out + (size_t)i * a->dim, y, a->w, a->dim, a->eps);
    }
}

static void cpu_add_rmsnorm(backend_ctx *X, float *y, const float *x, float *out, const float *w, int n, int dim,
                            float eps) {
    add_norm_args a = {backend_cpu_of(X)->k, y, out, x, w, dim, eps};
    backend_cpu_for_rows(X, n, add_rmsnorm_rows, &a);
}

static void swiglu_rows(void *ud, int i0, int i1) {
    const row_args *a = ud;
    for (int i = i0; i < i1; i++) a->k->swiglu(a->y + (size_t)i * a->dim, a->x + (size_t)i * a->dim, a->dim);
}

static void cpu_swiglu(backend_ctx *X, float *g, const float *u, int n, int dim) {
    row_args a = {backend_cpu_of(X)->k, g, (float *)u, NULL, dim, 0.0f};
    backend_cpu_for_rows(X, n, swiglu_rows, &a);
}

static void gelu_rows(void *ud, int i0, int i1) {
    const row_args *a = ud;
    for (int i = i0; i < i1; i++) kern_gelu(a->y + (size_t)i * a->dim, a->dim);
}

static void cpu_gelu(backend_ctx *X, float *x, int n, int dim) {
    row_args a = {backend_cpu_of(X)->k, x, NULL, NULL, dim, 0.0f};
    backend_cpu_for_rows(X, n, gelu_rows, &a);
}

static void cpu_get_rows(backend_ctx *X, const kern_mat *w, const int32_t *ids, int n, float *out) {
    (void)X;
    for (int i = 0; i < n; i++) kern_get_row(w, ids[i], out + (size_t)i * w->ncols);
}

typedef struct gate_args {
    float *att;
    const float *qg;
    int n_head, hd;
} gate_args;

static void gate_rows(void *ud, int i0, int i1) {
    const gate_args *a = ud;
    const int hd = a->hd, nh = a->n_head;
    for (int i = i0; i < i1; i++) {
        const float *qg = a->qg + (size_t)i * nh * 2 * hd;
        float *att = a->att + (size_t)i * nh * hd;
        for (int hh = 0; hh < nh; hh++)
            for (int d = 0; d < hd; d++) att[hh * hd + d] *= kern_sigmoid(qg[(size_t)hh * 2 * hd + hd + d]);
    }
}

static void cpu_attn_gate(backend_ctx *X, float *att, const float *qg, int n, int n_head, int hd) {
    gate_args a = {att, qg, n_head, hd};
    backend_cpu_for_rows(X, n, gate_rows, &a);
}

static void cpu_scatter_rows(backend_ctx *X, float *dst, const float *src, const int32_t *idx, int n, int dim) {
    (void)X;
    for (int i = 0; i < n; i++) memcpy(dst + (size_t)idx[i] * dim, src + (size_t)i * dim, (size_t)dim * sizeof(float));
}

static void cpu_zero(backend_ctx *X, void *dst, size_t bytes) {
    (void)X;
    memset(dst, 0, bytes);
}

static void cpu_copy_ctx(backend_ctx *X, void *dst, const void *src, size_t bytes) {
    (void)X;
    memcpy(dst, src, bytes);
}

/* --------------------------------------------------------------- products */

static void cpu_matmul(backend_ctx *X, const kern_mat *w, const float *x, int n, float *y, int64_t ldy) {
    kern_matmul(X->pool, w, x, n, y, ldy, backend_cpu_of(X)->mm_scratch);
}

static void cpu_matmul_multi(backend_ctx *X, const kern_mm_out *outs, int n_out, const float *x, int n) {
    kern_matmul_multi(X->pool, outs, n_out, x, n, backend_cpu_of(X)->mm_scratch);
}

static void cpu_matmul_ranges(backend_ctx *X, const kern_mm_out *outs, const int32_t *t0, const int32_t *nt, int n_out,
                              const float *x, int n) {
    kern_matmul_ranges(X->pool, outs, t0, nt, n_out, x, n, backend_cpu_of(X)->mm_scratch);
}

/* ------------------------------------------------------------------ output */

static void cpu_output(backend_ctx *X, const backend_out *o) {
    const kern_ops *k = backend_cpu_of(X)->k;
    const int E = o->n_embd;
    for (int i = 0; i < o->n; i++)
        if (o->out_idx[i] >= 0)
            k->rmsnorm(o->rows + (size_t)o->out_idx[i] * E, o->x + (size_t)i * E, o->norm, E, o->eps);
    if (o->n_out && o->w) cpu_matmul(X, o->w, o->rows, o->n_out, o->logits, o->n_vocab);
}

static void cpu_argmax(backend_ctx *X, const float *x, int n, int dim, int32_t *out) {
    (void)X;
    for (int i = 0; i < n; i++) {
        const float *r = x + (size_t)i * dim;
        int best = 0;
        for (int k = 1; k < dim; k++)
            if (r[k] > r[best]) best = k;
        out[i] = best;
    }
}

static const backend_ops k_cpu_ops = {
    .alloc = cpu_alloc,
    .free = cpu_free,
    .reserve = cpu_reserve,
    .upload = cpu_upload,
    .download = cpu_upload,
    .step = cpu_step,
    .get_rows = cpu_get_rows,
    .rmsnorm = cpu_rmsnorm,
    .add = cpu_add,
    .add_rmsnorm = cpu_add_rmsnorm,
    .swiglu = cpu_swiglu,
    .gelu = cpu_gelu,
    .matmul = cpu_matmul,
    .matmul_multi = cpu_matmul_multi,
    .matmul_ranges = cpu_matmul_ranges,
    .qk_store = backend_cpu_qk_store,
    .kv_store = backend_cpu_kv_store,
    .attn = backend_cpu_attn,
    .moe_ws_new = backend_cpu_moe_ws_new,
    .moe_ws_free = backend_cpu_moe_ws_free,
    .moe_ffn = backend_cpu_moe_ffn,
    .attn_gate = cpu_attn_gate,
    .scatter_rows = cpu_scatter_rows,
    .zero = cpu_zero,
    .copy = cpu_copy_ctx,
    .gdn_reserve = backend_cpu_gdn_reserve,
    .gdn = backend_cpu_gdn,
    .gdn_replay = backend_cpu_gdn_replay,
    .output = cpu_output,
    .argmax = cpu_argmax,
};

const backend_backend backend_cpu_backend = {
    .name = "cpu",
    .kind = BACKEND_CPU,
    .host_mem = 1,
    .ops = &k_cpu_ops,
    .prepare = backend_cpu_prepare,
    .release = backend_cpu_release,
    .map = cpu_map,
    .unmap = cpu_unmap,
    .copy = cpu_copy,
    .zero = cpu_zero_mem,
    .ctx_init = cpu_ctx_init,
    .ctx_free = cpu_ctx_free,
};
