/*
 * cpu — the CPU backend's private header: today's kernels (kernels/,
 * quant/) and the context's thread pool behind backend.h's ops.
 */
#ifndef KILN_BACKEND_CPU_H
#define KILN_BACKEND_CPU_H

#include "backend/backend.h"
#include "kernels/ssm.h"

/* A context's CPU state (kbe_ctx.dev). */
typedef struct kbe_cpu {
    const kern_ops *k;  /* the kernel level quant_init chose */
    void *mm_scratch; /* the products' converted activations */
    size_t mm_bytes;
    float *att_scratch;    /* per thread: kern_attn_scratch of 2 heads x KBE_ATTN_TILE tokens */
    size_t att_per_thread; /* floats */
    const kern_ssm_ops *s;   /* the Gated DeltaNet kernels of that level */
    float *gdn_scratch;    /* per thread: kern_gdn_scratch floats */
    size_t gdn_per_thread;
} kbe_cpu;

static inline kbe_cpu *kbe_cpu_of(kbe_ctx *X) { return X->dev; }

extern const kbe_backend kbe_cpu_backend;

/* cpu_prepare.c */
void kbe_cpu_prepare(kern_mat **mats, int n_mats, const float ***vecs, const int64_t *vlen, int n_vecs, void **mem,
                     size_t *bytes);
void kbe_cpu_release(void *mem, size_t bytes);
/* cpu_attn.c */
void kbe_cpu_qk_store(kbe_ctx *X, const kbe_qk *a, int n);
void kbe_cpu_kv_store(kbe_ctx *X, int layer, int i0, int n, const float *k, const float *v);
void kbe_cpu_attn(kbe_ctx *X, int layer, const float *q, float *out, int n, const kbe_attn_opts *o);
/* cpu_gdn.c */
int kbe_cpu_gdn_reserve(kbe_ctx *X, int Dk, int Dv);
void kbe_cpu_gdn(kbe_ctx *X, const kbe_gdn *a, int n);
void kbe_cpu_gdn_replay(kbe_ctx *X, const kbe_gdn *a, int seq, int n);
/* cpu_moe.c */
void *kbe_cpu_moe_ws_new(kbe_ctx *X, const kbe_moe_hp *h, int n_embd, int n_batch);
void kbe_cpu_moe_ws_free(kbe_ctx *X, void *ws);
void kbe_cpu_moe_ffn(kbe_ctx *X, const kbe_moe_hp *h, const kbe_moe_layer *L, void *ws, float *xn, float *y, int n_embd,
                     int n);

/* Runs fn over rows [0, n) on the context's pool when n is big enough to
 * pay for the hand-off (KBE_CPU_PAR_MIN rows), on the calling thread
 * otherwise. */
#define KBE_CPU_PAR_MIN 4
typedef void (*kbe_cpu_rows_fn)(void *ud, int i0, int i1);
void kbe_cpu_for_rows(kbe_ctx *X, int n, kbe_cpu_rows_fn fn, void *ud);

#endif
