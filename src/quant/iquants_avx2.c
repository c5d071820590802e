/*
 * AVX2 twins of the IQ2 / IQ3 dot kernels (IQ2_XXS, IQ2_XS, IQ2_S,
 * IQ3_XXS, IQ3_S against Q8_K).  Compiled with -mavx2 -mfma -mf16c; only
 * called when the CPU has them.
 *
 * Per 32-weight run: the grid entries are fetched (iquants_x86.h), signed,
 * multiplied by the activations with maddubs (|q8| unsigned, signed grid
 * value with q8's sign folded in) and by the run scales with madd; the
 * block's integer sum is exact, and the float steps per block are those of
 * the scalar reference (no contraction), so results match it bit for bit.
 */
#include <immintrin.h>

/* the reference rounds d * sum and the running sum separately */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#else
#pragma GCC optimize("fp-contract=off")
#endif

#include "iquants_x86.h"
#include "quant/x86.h"

/* The dot of one type: block type T, run loader RUN, final factor F. */
#define IQ_DOT(name, T, RUN, F)                                                                              \
    static void name(int n, float *s, const void *vx, const void *vy) {                                      \
        const T *x = vx;                                                                                     \
        const quant_block_q8_K *y = vy;                                                                      \
        float sum = 0;                                                                                       \
        for (int i = 0; i < n / QUANT_QK_K; ++i) {                                                           \
            const float d = h2f(x[i].d) * y[i].d;                                                            \
            __m256i acc = _mm256_setzero_si256();                                                            \
            for (int ib = 0; ib < 8; ++ib) {                                                                 \
                const quant_iq_run r = RUN(&x[i], ib);                                                       \
                const __m256i p = iqx_products(r, _mm256_loadu_si256((const __m256i *)(y[i].qs + 32 * ib))); \
                const __m256i ls = _mm256_set_m128i(_mm_set1_epi16(r.ls[1]), _mm_set1_epi16(r.ls[0]));       \
                acc = _mm256_add_epi32(acc, _mm256_madd_epi16(p, ls));                                       \
            }                                                                                                \
            sum += d * (float)iqx_hsum_i32(acc);                                                             \
        }                                                                                                    \
        *s = (F)*sum;                                                                                        \
    }

IQ_DOT(iq2_xxs_dot, quant_block_iq2_xxs, iqx_run_iq2_xxs, 0.125f)
IQ_DOT(iq2_xs_dot, quant_block_iq2_xs, iqx_run_iq2_xs, 0.125f)
IQ_DOT(iq2_s_dot, quant_block_iq2_s, iqx_run_iq2_s, 0.125f)
IQ_DOT(iq3_xxs_dot, quant_block_iq3_xxs, iqx_run_iq3_xxs, 0.25f)
IQ_DOT(iq3_s_dot, quant_block_iq3_s, iqx_run_iq3_s, 1.0f)

const quant_simd quant_iquants_avx2 = {.dot = {[QUANT_IQ2_XXS] = iq2_xxs_dot,
                                               [QUANT_IQ2_XS] = iq2_xs_dot,
                                               [QUANT_IQ2_S] = iq2_s_dot,
                                               [QUANT_IQ3_XXS] = iq3_xxs_dot,
                                               [QUANT_IQ3_S] = iq3_s_dot}};
