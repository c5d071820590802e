/* The kernels of src/backend/cuda compiled as C++ over tests/emucuda.h
 * (kcu.cuh includes it when __CUDACC__ is not defined), and launched with
 * the shapes they document.  See cuda_emu.h. */
#include "cuda_run.h"

#include "attention.cu"
#include "gdn.cu"
#include "gemm.cu"
#include "matvec.cu"
#include "moe.cu"
#include "ops.cu"

#include <vector>

#define L KCU_EMU_LAUNCH

int cr_init(char *why, size_t cap) { return 0; }

const char *cr_device(void) { return "the CPU emulator (tests/emucuda.h)"; }

static unsigned ceil_div(int64_t a, int b) { return (unsigned)((a + b - 1) / b); }

int cr_matvec(int type, const void *w, int64_t w_stride, const float *x, int64_t x_stride, float *y, int64_t y_stride,
              int n_rows, int n, int n_vec) {
    const uint8_t *wb = (const uint8_t *)w;
    const dim3 grid(ceil_div(n_rows, KCU_MV_WARPS)), block(32 * KCU_MV_WARPS);
#define MV(fn) L(fn, grid, block, wb, w_stride, x, x_stride, y, y_stride, n_rows, n, n_vec)
    switch (type) {
    case KCU_F32: MV(kcu_matvec_f32); break;
    case KCU_F16: MV(kcu_matvec_f16); break;
    case KCU_BF16: MV(kcu_matvec_bf16); break;
    case KCU_Q4_0: MV(kcu_matvec_q4_0); break;
    case KCU_Q8_0: MV(kcu_matvec_q8_0); break;
    case KCU_Q4_1: MV(kcu_matvec_q4_1); break;
    case KCU_Q5_0: MV(kcu_matvec_q5_0); break;
    case KCU_Q5_1: MV(kcu_matvec_q5_1); break;
    case KCU_IQ4_NL: MV(kcu_matvec_iq4_nl); break;
    case KCU_Q2_K: MV(kcu_matvec_q2_k); break;
    case KCU_Q3_K: MV(kcu_matvec_q3_k); break;
    case KCU_IQ4_XS: MV(kcu_matvec_iq4_xs); break;
    case KCU_Q4_K: MV(kcu_matvec_q4_k); break;
    case KCU_Q5_K: MV(kcu_matvec_q5_k); break;
    case KCU_Q6_K: MV(kcu_matvec_q6_k); break;
    default: return -1;
    }
#undef MV
    return 0;
}

int cr_gemm(int type, const float *x, int64_t x_stride, const void *w, int64_t w_stride, float *y, int64_t y_stride,
            int m, int n, int k) {
    const uint8_t *wb = (const uint8_t *)w;
    const dim3 grid(ceil_div(n, KCU_GM_BN), ceil_div(m, KCU_GM_BM)), block(KCU_GM_THREADS);
#define GM(fn) L(fn, grid, block, x, x_stride, wb, w_stride, y, y_stride, m, n, k)
    switch (type) {
    case KCU_F32: GM(kcu_gemm_f32); break;
    case KCU_F16: GM(kcu_gemm_f16); break;
    case KCU_BF16: GM(kcu_gemm_bf16); break;
    case KCU_Q4_0: GM(kcu_gemm_q4_0); break;
    case KCU_Q8_0: GM(kcu_gemm_q8_0); break;
    case KCU_Q4_1: GM(kcu_gemm_q4_1); break;
    case KCU_Q5_0: GM(kcu_gemm_q5_0); break;
    case KCU_Q5_1: GM(kcu_gemm_q5_1); break;
    case KCU_IQ4_NL: GM(kcu_gemm_iq4_nl); break;
    case KCU_Q2_K: GM(kcu_gemm_q2_k); break;
    case KCU_Q3_K: GM(kcu_gemm_q3_k); break;
    case KCU_IQ4_XS: GM(kcu_gemm_iq4_xs); break;
    case KCU_Q4_K: GM(kcu_gemm_q4_k); break;
    case KCU_Q5_K: GM(kcu_gemm_q5_k); break;
    case KCU_Q6_K: GM(kcu_gemm_q6_k); break;
    default: return -1;
    }
#undef GM
    return 0;
}

int cr_get_rows(int type, const void *w, int64_t w_stride, const int32_t *ids, int n_ids, float *out,
                int64_t out_stride, int n) {
    const uint8_t *wb = (const uint8_t *)w;
    const dim3 grid((unsigned)n_ids), block(64);
#define GR(fn) L(fn, grid, block, wb, w_stride, ids, out, out_stride, n)
    switch (type) {
    case KCU_F32: GR(kcu_get_rows_f32); break;
    case KCU_F16: GR(kcu_get_rows_f16); break;
    case KCU_BF16: GR(kcu_get_rows_bf16); break;
    case KCU_Q4_0: GR(kcu_get_rows_q4_0); break;
    case KCU_Q8_0: GR(kcu_get_rows_q8_0); break;
    case KCU_Q4_1: GR(kcu_get_rows_q4_1); break;
    case KCU_Q5_0: GR(kcu_get_rows_q5_0); break;
    case KCU_Q5_1: GR(kcu_get_rows_q5_1); break;
    case KCU_IQ4_NL: GR(kcu_get_rows_iq4_nl); break;
    case KCU_Q2_K: GR(kcu_get_rows_q2_k); break;
    case KCU_Q3_K: GR(kcu_get_rows_q3_k); break;
    case KCU_IQ4_XS: GR(kcu_get_rows_iq4_xs); break;
    case KCU_Q4_K: GR(kcu_get_rows_q4_k); break;
    case KCU_Q5_K: GR(kcu_get_rows_q5_k); break;
    case KCU_Q6_K: GR(kcu_get_rows_q6_k); break;
    default: return -1;
    }
#undef GR
    return 0;
}

void cr_rmsnorm(const float *x, int64_t x_stride, const float *w, float *out, int64_t out_stride, int rows, int n,
                float eps, int threads) {
    L(kcu_rmsnorm, dim3((unsigned)rows), dim3((unsigned)threads), x, x_stride, w, out, out_stride, n, eps);
}

void cr_rope(float *x, int64_t tok_stride, int n_tok, int n_head, int head_dim, int n_rot, int neox, const int32_t *pos,
             const float *inv_freq, float mscale) {
    L(kcu_rope, dim3((unsigned)n_tok, (unsigned)n_head), dim3(64), x, tok_stride, head_dim, n_rot, neox, pos, inv_freq,
      mscale);
}

void cr_swiglu(float *g, const float *u, int64_t n) { L(kcu_swiglu, dim3(3), dim3(64), g, u, n); }

void cr_add(float *y, const float *x, int64_t n) { L(kcu_add, dim3(2), dim3(96), y, x, n); }

void cr_argmax(const float *x, int64_t x_stride, int rows, int n, int32_t *out, int threads) {
    L(kcu_argmax, dim3((unsigned)rows), dim3((unsigned)threads), x, x_stride, n, out);
}

void cr_kv_write(const float *src, int64_t src_stride, int n_tok, uint16_t *cache, int64_t cell_stride, int64_t offset,
                 const int32_t *cell, int n) {
    L(kcu_kv_write, dim3((unsigned)n_tok), dim3(64), src, src_stride, cache, cell_stride, offset, cell, n);
}

void cr_attn_decode(const float *q, int64_t q_stride, const uint16_t *k, const uint16_t *v, int64_t cell_stride,
                    const int32_t *tables, int table_stride, const int32_t *n_kv, int n_seq, int n_head, int n_kv_head,
                    int hd, float scale, int split_len, int n_split, int window, const float *sinks, float *out,
                    int64_t out_stride) {
    std::vector<float> part((size_t)n_seq * n_head * n_split * (hd + 2));
    float *p = part.data();
    L(kcu_attn_decode, dim3((unsigned)n_head, (unsigned)n_split, (unsigned)n_seq), dim3(32 * KCU_ATT_WARPS), q,
      q_stride, k, v, cell_stride, tables, table_stride, n_kv, n_head, n_kv_head, hd, scale, split_len, window, p);
    L(kcu_attn_combine, dim3((unsigned)n_head, (unsigned)n_seq), dim3(64), (const float *)p, n_split, n_head, hd, sinks,
      out, out_stride);
}

void cr_attn_prefill(const float *q, int64_t tok_stride, const uint16_t *k, const uint16_t *v, int64_t cell_stride,
                     const int32_t *table, int n_past, int n_tok, int n_head, int n_kv_head, int hd, float scale,
                     float *out) {
    L(kcu_attn_prefill, dim3(ceil_div(n_tok, KCU_ATT_WARPS), (unsigned)n_head), dim3(32 * KCU_ATT_WARPS), q, tok_stride,
      k, v, cell_stride, table, n_past, n_tok, n_head, n_kv_head, hd, scale, out);
}

void cr_gdn_gates(const float *ba, const float *dt_bias, const float *ssm_a, float *beta, float *gd, int n, int Hv,
                  int Hk, int grouped) {
    L(kcu_gdn_gates, dim3(2), dim3(64), ba, dt_bias, ssm_a, beta, gd, n, Hv, Hk, grouped);
}

void cr_conv_silu(const float *x, int64_t ldx, const float *w, float *state, float *y, int n, int C, int K) {
    L(kcu_conv_silu, dim3(ceil_div(C, 64)), dim3(64), x, ldx, w, state, y, n, C, K);
}

void cr_l2norm(float *x, int64_t tok_stride, int n_tok, int rows, int n, float eps) {
    L(kcu_l2norm, dim3((unsigned)n_tok, (unsigned)rows), dim3(64), x, tok_stride, n, eps);
}

void cr_rmsnorm_gated(float *o, const float *z, const float *w, int rows, int n, float eps) {
    L(kcu_rmsnorm_gated, dim3((unsigned)rows), dim3(64), o, z, w, n, eps);
}

void cr_gdn_rec(const float *qkv, int64_t ld, const float *g, const float *beta, int64_t ld_gb, float *state, float *o,
                int n, int Hk, int Hv, int dk, int dv, int grouped, float scale) {
    const float *v = qkv + (size_t)2 * Hk * dk;
    L(kcu_gdn_rec, dim3(ceil_div(dv, KCU_GDN_WARPS), (unsigned)Hv), dim3(32 * KCU_GDN_WARPS), qkv, ld, v, ld, g, beta,
      ld_gb, state, o, (int64_t)Hv * dv, n, Hk, Hv, dk, dv, grouped, scale);
}

void cr_attn_gate(float *att, const float *qg, int n, int n_head, int hd) {
    L(kcu_attn_gate, dim3(3), dim3(64), att, qg, n, n_head, hd);
}

void cr_moe_route(float *logits, int32_t *ids, float *w, int n, int n_expert, int k, int mode, int norm, float scale,
                  int sig, const float *bias, int n_group, int n_group_used) {
    std::vector<float> sel((size_t)n * n_expert);
    float *s = sel.data();
    L(kcu_moe_route, dim3(ceil_div(n, 32)), dim3(32), logits, s, ids, w, n, n_expert, k, mode, norm, scale, sig, bias,
      n_group, n_group_used);
}

void cr_gather_rows(float *dst, const float *src, int src_rows, int64_t src_stride, const int32_t *idx, int rows,
                    int n) {
    (void)src_rows;
    L(kcu_gather_rows, dim3((unsigned)rows), dim3(64), dst, src, src_stride, idx, n);
}

void cr_add_rows(float *y, const float *b, int rows, int n) { L(kcu_add_rows, dim3(2), dim3(96), y, b, rows, n); }

void cr_moe_combine(const float *md, int md_rows, const int32_t *row_of, const float *w, int k, const float *sgl,
                    int shared, float *y, int T, int n) {
    (void)md_rows;
    L(kcu_moe_combine, dim3(ceil_div(n, 64), (unsigned)T), dim3(64), md, row_of, w, k, sgl, shared, y, n);
}

void cr_swiglu_oai(float *g, const float *u, int64_t n, float alpha, float limit) {
    L(kcu_swiglu_oai, dim3(3), dim3(64), g, u, n, alpha, limit);
}

void cr_relu_sq(float *x, int64_t n) { L(kcu_relu_sq, dim3(3), dim3(64), x, n); }

void cr_gelu(float *x, int64_t n) { L(kcu_gelu, dim3(3), dim3(64), x, n); }

void cr_kv_write_q8(const float *src, int64_t src_stride, int n_tok, uint8_t *cache, int64_t cell_stride,
                    int64_t offset, const int32_t *cell, int n) {
    L(kcu_kv_write_q8, dim3((unsigned)n_tok), dim3(64), src, src_stride, cache, cell_stride, offset, cell, n);
}

void cr_attn_decode_q8(const float *q, int64_t q_stride, const uint8_t *k, const uint8_t *v, int64_t cell_stride,
                       const int32_t *tables, int table_stride, const int32_t *n_kv, int n_seq, int n_head,
                       int n_kv_head, int hd, float scale, int split_len, int n_split, int window, const float *sinks,
                       float *out, int64_t out_stride) {
    std::vector<float> part((size_t)n_seq * n_head * n_split * (hd + 2));
    float *p = part.data();
    L(kcu_attn_decode_q8, dim3((unsigned)n_head, (unsigned)n_split, (unsigned)n_seq), dim3(32 * KCU_ATT_WARPS), q,
      q_stride, k, v, cell_stride, tables, table_stride, n_kv, n_head, n_kv_head, hd, scale, split_len, window, p);
    L(kcu_attn_combine, dim3((unsigned)n_head, (unsigned)n_seq), dim3(64), (const float *)p, n_split, n_head, hd, sinks,
      out, out_stride);
}
