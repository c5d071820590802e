/*
 * cpu — the CPU backend's private header: today's kernels (kernels/,
 * quant/) and the context's thread pool behind backend.h's ops.
 */
#ifndef KILN_BACKEND_CPU_H
#define KILN_BACKEND_CPU_H

#include "backend/backend.h"
#include "kernels/ssm.h"

/* A context's CPU state (backend_ctx.dev). */
typedef struct backend_cpu {
    const kern_ops *k; /* the kernel level quant_init chose */
    void *mm_scratch;  /* the products' converted activations */
    size_t mm_bytes;
    float *att_scratch;    /* per thread: kern_attn_scratch of 2 heads x BACKEND_ATTN_TILE tokens */
    size_t att_per_thread; /* floats */
    const kern_ssm_ops *s; /* the Gated DeltaNet kernels of that level */
    float *gdn_scratch;    /* per thread: kern_gdn_scratch floats */
    size_t gdn_per_thread;
} backend_cpu;

static inline backend_cpu *backend_cpu_of(backend_ctx *X) { return X->dev; }

extern const backend_backend backend_cpu_backend;

/* cpu_prepare.c */
void backend_cpu_prepare(kern_mat **mats, int n_mats, const float ***vecs, const int64_t *vlen, int n_vecs, void **mem,
                         size_t *bytes);
void backend_cpu_release(void *mem, size_t bytes);
/* cpu_attn.c */
void backend_cpu_qk_store(backend_ctx *X, const backend_qk *a, int n);
void backend_cpu_kv_store(backend_ctx *X, int layer, int i0, int n, const float *k, const float *v);
void backend_cpu_attn(backend_ctx *X, int layer, const float *q, float *out, int n, const backend_attn_opts *o);
/* cpu_gdn.c */
int backend_cpu_gdn_reserve(backend_ctx *X, int Dk, int Dv);
void backend_cpu_gdn(backend_ctx *X, const backend_gdn *a, int n);
void backend_cpu_gdn_replay(backend_ctx *X, const backend_gdn *a, int seq, int n);
/* cpu_moe.c */
void *backend_cpu_moe_ws_new(backend_ctx *X, const backend_moe_hp *h, int n_embd, int n_batch);
void backend_cpu_moe_ws_free(backend_ctx *X, void *ws);
void backend_cpu_moe_ffn(backend_ctx *X, const backend_moe_hp *h, const backend_moe_layer *L, void *ws, float *xn,
                         float *y, int n_embd, int n);

/* Runs fn over rows [0, n) on the context's pool when n is big enough to
 * pay for the hand-off (BACKEND_CPU_PAR_MIN rows), on the calling thread
 * otherwise. */
#define BACKEND_CPU_PAR_MIN 4
typedef void (*backend_cpu_rows_fn)(void *ud, int i0, int i1);
void backend_cpu_for_rows(backend_ctx *X, int n, backend_cpu_rows_fn fn, void *ud);

#endif
