#include "image/nn.h"

#include "base/base.h"
#include "kernels/conv.h"
#include "kernels/ops.h"
#include "quant/quant.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const ckpt_tensor *image_find(const ckpt_file *f, const char *fmt, ...) {
    char name[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name, sizeof name, fmt, ap);
    va_end(ap);
    return ckpt_find(f, name);
}

static void shape_text(char *buf, size_t cap, int n, const int64_t *s) {
    int o = snprintf(buf, cap, "[");
    for (int d = 0; d < n && o < (int)cap; d++)
        o += snprintf(buf + o, cap - (size_t)o, d ? ", %lld" : "%lld", (long long)s[d]);
    if (o < (int)cap) snprintf(buf + o, cap - (size_t)o, "]");
}

/* The tensor name must exist as a float tensor of n elements (and, when
 * shape is given, exactly that shape). */
static const ckpt_tensor *need(image_binder *b, const char *name, int n_dims, const int64_t *shape, int64_t numel) {
    if (b->failed) return NULL;
    const ckpt_tensor *t = ckpt_find(b->f, name);
    char want[128], got[128];
    if (!t) {
        base_errf(b->err, b->errlen, "%s: tensor %s is missing", b->what, name);
        b->failed = 1;
        return NULL;
    }
    if (ckpt_dtype_kq(t->dtype) < 0) {
        base_errf(b->err, b->errlen, "%s: tensor %s is %s (F32, F16 or BF16 expected)", b->what, name,
                  ckpt_dtype_name(t->dtype));
        b->failed = 1;
        return NULL;
    }
    int ok = t->numel == numel;
    if (shape) {
        ok = ok && t->n_dims == n_dims;
        for (int d = 0; ok && d < n_dims; d++) ok = t->shape[d] == shape[d];
    }
    if (!ok) {
        if (shape)
            shape_text(want, sizeof want, n_dims, shape);
        else
            snprintf(want, sizeof want, "%lld elements", (long long)numel);
        shape_text(got, sizeof got, t->n_dims, t->shape);
        base_errf(b->err, b->errlen, "%s: tensor %s has shape %s, expected %s", b->what, name, got, want);
        b->failed = 1;
        return NULL;
    }
    return t;
}

int image_mat(image_binder *b, kern_mat *out, int n_dims, const int64_t *shape, const char *fmt, ...) {
    char name[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name, sizeof name, fmt, ap);
    va_end(ap);
    int64_t numel = 1;
    for (int d = 0; d < n_dims; d++) numel *= shape[d];
    const ckpt_tensor *t = need(b, name, n_dims, shape, numel);
    if (!t) return -1;
    memset(out, 0, sizeof *out);
    out->data = t->data;
    out->type = ckpt_dtype_kq(t->dtype);
    out->nrows = shape[0];
    out->ncols = numel / shape[0];
    return 0;
}

float *image_vec(image_binder *b, int64_t n, const char *fmt, ...) {
    char name[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name, sizeof name, fmt, ap);
    va_end(ap);
    const ckpt_tensor *t = need(b, name, 0, NULL, n);
    if (!t || b->check) return NULL;
    float *v = malloc((size_t)n * sizeof *v);
    if (!v) {
        base_errf(b->err, b->errlen, "out of memory");
        b->failed = 1;
        return NULL;
    }
    quant_get(ckpt_dtype_kq(t->dtype))->to_f32(t->data, v, n);
    return v;
}

int image_lin_bind(image_binder *b, image_lin *l, int64_t out, int64_t in, int bias, const char *fmt, ...) {
    char prefix[224];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    int rc = image_mat(b, &l->w, 2, (int64_t[]){out, in}, "%s.weight", prefix);
    l->b = bias ? image_vec(b, out, "%s.bias", prefix) : NULL;
    return rc || b->failed ? -1 : 0;
}

/* From this many rows on, a linear layer of F32, F16 or BF16 weights goes
 * through the image GEMM (every output one fma chain over F32 activations)
 * rather than kern_matmul's one-row kernels. */
#define GEMM_MIN_ROWS 16

void image_linear(thread_pool *pool, const image_lin *l, const float *x, int n, float *y, void *scratch) {
    const int t = l->w.type;
    if (n >= GEMM_MIN_ROWS && !l->w.packed && (t == QUANT_F32 || t == QUANT_F16 || t == QUANT_BF16)) {
        const kern_gemm g = {n,
                             (int)l->w.nrows,
                             (int)l->w.ncols,
                             x,
                             (size_t)l->w.ncols,
                             KERN_GB_ROWS,
                             l->w.data,
                             t,
                             quant_row_size(t, l->w.ncols),
                             y,
                             (size_t)l->w.nrows,
                             l->b,
                             NULL};
        kern_gemm_run(pool, &g);
        return;
    }
    kern_matmul(pool, &l->w, x, n, y, l->w.nrows, scratch);
    if (l->b) kern_add_rows(y, l->b, n, (int)l->w.nrows);
}

size_t image_attention_scratch(int n_q, int n_kv, int hd) {
    (void)hd;
    return (size_t)n_q * (size_t)n_kv * sizeof(float) + 64;
}

typedef struct sm_job {
    const image_attn *a;
    float *s;
    int h;
} sm_job;

/* Rows of head h's scores: scaled, biased, softmaxed (each row alone). */
static void softmax_task(void *ud, int ith, int nth) {
    const sm_job *j = ud;
    const image_attn *a = j->a;
    long lo, hi;
    thread_pool_range(a->n_q, ith, nth, &lo, &hi);
    for (long i = lo; i < hi; i++) {
        float *row = j->s + (size_t)i * (size_t)a->n_kv;
        const float *bias = a->bias ? a->bias + ((size_t)j->h * (size_t)a->n_q + (size_t)i) * (size_t)a->n_kv : NULL;
        for (int c = 0; c < a->n_kv; c++) row[c] = row[c] * a->scale + (bias ? bias[c] : 0.0f);
        kern_softmax(row, a->n_kv);
    }
}

void image_attention(thread_pool *pool, const image_attn *a, void *scratch) {
    float *s = (float *)(((uintptr_t)scratch + 63) & ~(uintptr_t)63);
    for (int h = 0; h < a->heads; h++) {
        const size_t c0 = (size_t)h * (size_t)a->hd;
        /* scores [n_q][n_kv] = q_h k_h^T, k_h as rows */
        const kern_gemm qk = {a->n_q,    a->n_kv,         a->hd,
                              a->q + c0, (size_t)a->ldq,  KERN_GB_ROWS,
                              a->k + c0, QUANT_F32,       (size_t)a->ldk * sizeof(float),
                              s,         (size_t)a->n_kv, NULL,
                              NULL};
        kern_gemm_run(pool, &qk);
        sm_job sj = {a, s, h};
        if ((size_t)a->n_q * (size_t)a->n_kv >= 16384)
            thread_pool_run(pool, softmax_task, &sj);
        else
            softmax_task(&sj, 0, 1);
        /* out_h [n_q][hd] = p v_h, v_h [n_kv][hd] */
        const kern_gemm pv = {a->n_q,    a->hd,     a->n_kv,        s,           (size_t)a->n_kv, KERN_GB_KN,
                              a->v + c0, QUANT_F32, (size_t)a->ldv, a->out + c0, (size_t)a->ldo,  NULL,
                              NULL};
        kern_gemm_run(pool, &pv);
    }
}

void image_modulate(float *out, const float *x, int n, int d, const float *shift, const float *scale) {
    for (int i = 0; i < n; i++) {
        float *o = out + (size_t)i * (size_t)d;
        kern_layernorm(o, x + (size_t)i * (size_t)d, NULL, NULL, d, 1e-6f);
        for (int j = 0; j < d; j++) o[j] = o[j] * (1.0f + scale[j]) + shift[j];
    }
}

void image_silu(float *x, int n) {
    for (int i = 0; i < n; i++) x[i] = x[i] / (1.0f + expf(-x[i]));
}

/* ---- the seeded Gaussian (nn.h) ---- */

static uint64_t splitmix(image_rng *r) {
    uint64_t z = (r->s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static double uniform(image_rng *r) {
    return (((double)(splitmix(r) >> 11) + 0.5) * (1.0 / 9007199254740992.0)) * 2.0 - 1.0;
}

double image_rng_log(double x) {
    int e;
    double m = frexp(x, &e); /* x = m 2^e, m in [0.5, 1) */
    if (m < 0.7071067811865476) {
        m *= 2.0;
        e -= 1;
    }
    const double t = (m - 1.0) / (m + 1.0), t2 = t * t;
    double p = 1.0 / 23.0;
    for (int k = 21; k >= 1; k -= 2) p = p * t2 + 1.0 / (double)k;
    return 2.0 * t * p + (double)e * 0.6931471805599453;
}

void image_rng_gauss(image_rng *r, float *out, size_t n) {
    for (size_t i = 0; i < n;) {
        const double u = uniform(r), v = uniform(r), s = u * u + v * v;
        if (s >= 1.0 || s == 0.0) continue;
        const double f = sqrt(-2.0 * image_rng_log(s) / s);
        out[i++] = (float)(u * f);
        if (i < n) out[i++] = (float)(v * f);
    }
}
