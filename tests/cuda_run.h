/*
 * The CUDA kernels of src/backend/cuda launched with the shapes they
 * document, behind a C interface for tests/test_cuda.c, in two builds:
 * cuda_emu.cpp runs them on the CPU by tests/emucuda.h (test_cuda),
 * cuda_dev.c on a GPU through the driver API and the embedded fatbin
 * (test_cuda_gpu).  Pointers are host memory, each spanning whole strides
 * (rows x stride); type is a GGUF type id (quant_type); strides count
 * elements of the pointer's type (bytes for weights).  Each cr_ call
 * returns 0, or -1 for a type without a kernel.
 */
#ifndef KILN_TESTS_CUDA_RUN_H
#define KILN_TESTS_CUDA_RUN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* 0 when kernels can run, else -1 with the reason in why (the GPU build
 * without a driver, a GPU or a fatbin). */
int cr_init(char *why, size_t cap);
/* What runs them: "the CPU emulator", or the GPU's name. */
const char *cr_device(void);

int cr_matvec(int type, const void *w, int64_t w_stride, const float *x, int64_t x_stride, float *y, int64_t y_stride,
              int n_rows, int n, int n_vec);
int cr_gemm(int type, const float *x, int64_t x_stride, const void *w, int64_t w_stride, float *y, int64_t y_stride,
            int m, int n, int k);
int cr_get_rows(int type, const void *w, int64_t w_stride, const int32_t *ids, int n_ids, float *out,
                int64_t out_stride, int n);
void cr_rmsnorm(const float *x, int64_t x_stride, const float *w, float *out, int64_t out_stride, int rows, int n,
                float eps, int threads);
void cr_rope(float *x, int64_t tok_stride, int n_tok, int n_head, int head_dim, int n_rot, int neox, const int32_t *pos,
             const float *inv_freq, float mscale);
void cr_swiglu(float *g, const float *u, int64_t n);
void cr_add(float *y, const float *x, int64_t n);
void cr_argmax(const float *x, int64_t x_stride, int rows, int n, int32_t *out, int threads);
void cr_kv_write(const float *src, int64_t src_stride, int n_tok, uint16_t *cache, int64_t cell_stride, int64_t offset,
                 const int32_t *cell, int n);
/* Split-K decode attention (kcu_attn_decode + kcu_attn_combine) with
 * n_split splits of split_len positions; window (0: none) and sinks
 * [n_head] (NULL: none) as backend_attn_opts'. */
void cr_attn_decode(const float *q, int64_t q_stride, const uint16_t *k, const uint16_t *v, int64_t cell_stride,
                    const int32_t *tables, int table_stride, const int32_t *n_kv, int n_seq, int n_head, int n_kv_head,
                    int hd, float scale, int split_len, int n_split, int window, const float *sinks, float *out,
                    int64_t out_stride);
/* The Q8_0 cache's (cache and cell_stride in bytes): the write of rows by
 * the reference quantizer, and decode attention as cr_attn_decode's. */
void cr_kv_write_q8(const float *src, int64_t src_stride, int n_tok, uint8_t *cache, int64_t cell_stride,
                    int64_t offset, const int32_t *cell, int n);
void cr_attn_decode_q8(const float *q, int64_t q_stride, const uint8_t *k, const uint8_t *v, int64_t cell_stride,
                       const int32_t *tables, int table_stride, const int32_t *n_kv, int n_seq, int n_head,
                       int n_kv_head, int hd, float scale, int split_len, int n_split, int window, const float *sinks,
                       float *out, int64_t out_stride);
void cr_attn_prefill(const float *q, int64_t tok_stride, const uint16_t *k, const uint16_t *v, int64_t cell_stride,
                     const int32_t *table, int n_past, int n_tok, int n_head, int n_kv_head, int hd, float scale,
                     float *out);

/* The Gated DeltaNet (gdn.cu): ba [n][2 Hv] -> beta, gd [n][Hv]; the
 * convolution (x [n] rows ldx apart, w [K][C], state [K - 1][C], y
 * [n][C]); L2 norms of rows of n (row (t, j) at x + t * tok_stride + j *
 * n); the gated output norm (o, z [rows][n]); the delta rule over n tokens
 * of qkv [n][ld] (the q and k heads first, v at 2 Hk dk), g and beta [n]
 * rows ld_gb apart, state [Hv][dv][dk], o [n][Hv dv] (NULL: dropped). */
void cr_gdn_gates(const float *ba, const float *dt_bias, const float *ssm_a, float *beta, float *gd, int n, int Hv,
                  int Hk, int grouped);
void cr_conv_silu(const float *x, int64_t ldx, const float *w, float *state, float *y, int n, int C, int K);
void cr_l2norm(float *x, int64_t tok_stride, int n_tok, int rows, int n, float eps);
void cr_rmsnorm_gated(float *o, const float *z, const float *w, int rows, int n, float eps);
void cr_gdn_rec(const float *qkv, int64_t ld, const float *g, const float *beta, int64_t ld_gb, float *state, float *o,
                int n, int Hk, int Hv, int dk, int dv, int grouped, float scale);
void cr_attn_gate(float *att, const float *qg, int n, int n_head, int hd);
/* MoE (moe.cu): routing of n tokens' logits [n][n_expert] (mode 2 turns
 * them into probabilities) into ids, w [n][k]; rows gathered from src
 * [src_rows][src_stride]; a bias on every row; the weighted sum of md
 * [md_rows][n] per token into y [T][n]; the activations. */
void cr_moe_route(float *logits, int32_t *ids, float *w, int n, int n_expert, int k, int mode, int norm, float scale,
                  int sig, const float *bias, int n_group, int n_group_used);
void cr_gather_rows(float *dst, const float *src, int src_rows, int64_t src_stride, const int32_t *idx, int rows,
                    int n);
void cr_add_rows(float *y, const float *b, int rows, int n);
void cr_moe_combine(const float *md, int md_rows, const int32_t *row_of, const float *w, int k, const float *sgl,
                    int shared, float *y, int T, int n);
void cr_swiglu_oai(float *g, const float *u, int64_t n, float alpha, float limit);
void cr_relu_sq(float *x, int64_t n);
void cr_gelu(float *x, int64_t n);

#ifdef __cplusplus
}
#endif

#endif
