/*
 * gemm.cu — Y = X W^T for prompts on the tensor cores: X [M][K] F32
 * activations (rows x_stride floats apart), W [N][K] weights in a GGUF type
 * as stored (rows w_stride bytes apart), Y [M][N] F32 (rows y_stride floats
 * apart).  Each block computes a KCU_GM_BM x KCU_GM_BN tile of Y; every
 * KCU_GM_BK-wide step it converts its slice of X to F16 and dequantizes its
 * slice of W to F16 in shared memory, then its 4 warps (2 x 2, each 32 x
 * 32 of the tile) run mma.sync m16n8k16 with F32 accumulators.  M and N
 * may be anything; K a multiple of the type's block size (any K for
 * F16/BF16/F32).  grid = (ceil(N / 64), ceil(M / 64)), blockDim.x = KCU_GM_THREADS.
 *
 * The scalar twin: the weights dequantized by the type's to_f32
 * (src/quant) and X rounded to F16, products summed in double; the
 * tolerance covers the F16 rounding of the weights.
 */
#include "quant.cuh"
#include "shapes.h"

#define KCU_GM_PAD 8 /* halves of padding per shared row, against bank conflicts */

template <int T>
KCU_DEV void kcu_gemm(const float *x, int64_t x_stride, const uint8_t *w, int64_t w_stride, float *y, int64_t y_stride,
                      int M, int N, int K) {
    __shared__ uint16_t sa[KCU_GM_BM][KCU_GM_BK + KCU_GM_PAD];
    __shared__ uint16_t sw[KCU_GM_BN][KCU_GM_BK + KCU_GM_PAD];
    const int tid = (int)threadIdx.x, lane = kcu_lane(), warp = tid >> 5;
    const int g = lane >> 2, t = lane & 3;
    const int m0 = (int)blockIdx.y * KCU_GM_BM, n0 = (int)blockIdx.x * KCU_GM_BN;
    const int wm = (warp >> 1) * 32, wn = (warp & 1) * 32; /* the warp's corner in the tile */
    float acc[2][4][4];
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 4; j++)
            for (int r = 0; r < 4; r++) acc[i][j][r] = 0.0f;

    for (int k0 = 0; k0 < K; k0 += KCU_GM_BK) {
        /* X slice: 64 rows x 32 floats, 16 per thread */
        for (int i = tid; i < KCU_GM_BM * KCU_GM_BK; i += KCU_GM_THREADS) {
            const int r = i / KCU_GM_BK, c = i % KCU_GM_BK;
            const int m = m0 + r, kk = k0 + c;
            sa[r][c] = kcu_f2h(m < M && kk < K ? x[(int64_t)m * x_stride + kk] : 0.0f);
        }
        /* W slice: 64 rows x 4 chunks of 8, 2 chunks per thread */
        for (int i = tid; i < KCU_GM_BN * (KCU_GM_BK / 8); i += KCU_GM_THREADS) {
            const int r = i / (KCU_GM_BK / 8), c = (i % (KCU_GM_BK / 8)) * 8;
            const int n = n0 + r, e = k0 + c;
            float q[8];
            if (n < N && e < K) {
                kcu_deq8<T>(w + (int64_t)n * w_stride, e, K, q);
            } else {
                for (int j = 0; j < 8; j++) q[j] = 0.0f;
            }
            for (int j = 0; j < 8; j++) sw[r][c + j] = kcu_f2h(q[j]);
        }
        kcu_sync();
        for (int kk = 0; kk < KCU_GM_BK; kk += 16) {
            uint32_t a[2][4], b[4][2];
            for (int i = 0; i < 2; i++) {
                const int r = wm + 16 * i + g;
                a[i][0] = kcu_pack2(sa[r][kk + 2 * t], sa[r][kk + 2 * t + 1]);
                a[i][1] = kcu_pack2(sa[r + 8][kk + 2 * t], sa[r + 8][kk + 2 * t + 1]);
                a[i][2] = kcu_pack2(sa[r][kk + 2 * t + 8], sa[r][kk + 2 * t + 9]);
                a[i][3] = kcu_pack2(sa[r + 8][kk + 2 * t + 8], sa[r + 8][kk + 2 * t + 9]);
            }
            for (int j = 0; j < 4; j++) {
                const int c = wn + 8 * j + g;
                b[j][0] = kcu_pack2(sw[c][kk + 2 * t], sw[c][kk + 2 * t + 1]);
                b[j][1] = kcu_pack2(sw[c][kk + 2 * t + 8], sw[c][kk + 2 * t + 9]);
            }
            for (int i = 0; i < 2; i++)
                for (int j = 0; j < 4; j++) kcu_mma_16816(acc[i][j], a[i], b[j], acc[i][j]);
        }
        kcu_sync();
    }
    for (int i = 0; i < 2; i++) {
        for (int j = 0; j < 4; j++) {
            for (int r = 0; r < 4; r++) {
                const int m = m0 + wm + 16 * i + g + (r >= 2 ? 8 : 0);
                const int n = n0 + wn + 8 * j + 2 * t + (r & 1);
                if (m < M && n < N) y[(int64_t)m * y_stride + n] = acc[i][j][r];
            }
        }
    }
}

#define KCU_GEMM(name, T)                                                                                \
    KCU_KERNEL void name(const float *x, int64_t x_stride, const uint8_t *w, int64_t w_stride, float *y, \
                         int64_t y_stride, int M, int N, int K) {                                        \
        kcu_gemm<T>(x, x_stride, w, w_stride, y, y_stride, M, N, K);                                     \
    }

KCU_GEMM(kcu_gemm_f32, KCU_F32)
KCU_GEMM(kcu_gemm_f16, KCU_F16)
KCU_GEMM(kcu_gemm_bf16, KCU_BF16)
KCU_GEMM(kcu_gemm_q4_0, KCU_Q4_0)
KCU_GEMM(kcu_gemm_q8_0, KCU_Q8_0)
KCU_GEMM(kcu_gemm_q4_1, KCU_Q4_1)
KCU_GEMM(kcu_gemm_q5_0, KCU_Q5_0)
KCU_GEMM(kcu_gemm_q5_1, KCU_Q5_1)
KCU_GEMM(kcu_gemm_iq4_nl, KCU_IQ4_NL)
KCU_GEMM(kcu_gemm_q2_k, KCU_Q2_K)
KCU_GEMM(kcu_gemm_q3_k, KCU_Q3_K)
KCU_GEMM(kcu_gemm_iq4_xs, KCU_IQ4_XS)
KCU_GEMM(kcu_gemm_q4_k, KCU_Q4_K)
KCU_GEMM(kcu_gemm_q5_k, KCU_Q5_K)
KCU_GEMM(kcu_gemm_q6_k, KCU_Q6_K)
