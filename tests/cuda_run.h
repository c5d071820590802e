/*
 * The CUDA kernels of src/backend/cuda launched with the shapes they
 * document, behind a C interface for tests/test_cuda.c, in two builds:
 * cuda_emu.cpp runs them on the CPU by tests/emucuda.h (test_cuda),
 * cuda_dev.c on a GPU through the driver API and the embedded fatbin
 * (test_cuda_gpu).  Pointers are host memory, each spanning whole strides
 * (rows x stride); type is a GGUF type id (kq_type); strides count
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
 * n_split splits of split_len positions. */
void cr_attn_decode(const float *q, int64_t q_stride, const uint16_t *k, const uint16_t *v, int64_t cell_stride,
                    const int32_t *tables, int table_stride, const int32_t *n_kv, int n_seq, int n_head, int n_kv_head,
                    int hd, float scale, int split_len, int n_split, float *out, int64_t out_stride);
void cr_attn_prefill(const float *q, int64_t tok_stride, const uint16_t *k, const uint16_t *v, int64_t cell_stride,
                     const int32_t *table, int n_past, int n_tok, int n_head, int n_kv_head, int hd, float scale,
                     float *out);

#ifdef __cplusplus
}
#endif

#endif
