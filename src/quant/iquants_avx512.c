/*
 * AVX-512 (VNNI) twins of the IQ2 / IQ3 dot kernels (IQ2_XXS, IQ2_XS,
 * IQ2_S, IQ3_XXS, IQ3_S against Q8_K).
 *
 * Two 32-weight runs per step: the grid entries are fetched as in the AVX2
 * twin (iquants_x86.h), the weight signs and the activations' signs are
 * combined in one mask that negates the grid bytes, so maddubs multiplies
 * |q8| (unsigned) by a signed grid value exactly (q8 = -128 included), and
 * vpdpwssd applies the run scales.  The block's integer sum is exact and
 * the float steps per block are the scalar reference's (no contraction), so
 * results match it bit for bit.
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

/* int16 lane j of a step's scale vector reads scale j / 8 (runs of 16
 * weights = 8 lanes of adjacent-pair sums). */
static const int16_t g_lane_run[32] = {0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1,
                                       2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3};

/* sum over 64 weights of g * sign * q * scale, added to acc (16 int32) */
static inline __m512i step64(__m512i acc, quant_iq_run r0, quant_iq_run r1, const int8_t *q8, __m512i lane_run) {
    const __m512i g = _mm512_inserti64x4(_mm512_castsi256_si512(r0.g), r1.g, 1);
    const __m512i q = _mm512_loadu_si512(q8);
    const __m512i sw = _mm512_inserti64x4(_mm512_castsi256_si512(r0.s), r1.s, 1);
    const __mmask64 neg = (__mmask64)(_mm512_movepi8_mask(sw) ^ _mm512_movepi8_mask(q));
    const __m512i b = _mm512_mask_sub_epi8(g, neg, _mm512_setzero_si512(), g);
    const __m512i p = _mm512_maddubs_epi16(_mm512_abs_epi8(q), b);
    const uint64_t ls = (uint64_t)(uint16_t)r0.ls[0] | (uint64_t)(uint16_t)r0.ls[1] << 16 |
                        (uint64_t)(uint16_t)r1.ls[0] << 32 | (uint64_t)(uint16_t)r1.ls[1] << 48;
    const __m512i sc = _mm512_permutexvar_epi16(lane_run, _mm512_set1_epi64((long long)ls));
    return _mm512_dpwssd_epi32(acc, p, sc);
}

/* The dot of one type: block type T, run loader RUN, final factor F. */
#define IQ_DOT(name, T, RUN, F)                                                                     \
    static void name(int n, float *s, const void *vx, const void *vy) {                             \
        const T *x = vx;                                                                            \
        const quant_block_q8_K *y = vy;                                                             \
        const __m512i lane_run = _mm512_loadu_si512(g_lane_run);                                    \
        float sum = 0;                                                                              \
        for (int i = 0; i < n / QUANT_QK_K; ++i) {                                                  \
            const float d = h2f(x[i].d) * y[i].d;                                                   \
            __m512i acc = _mm512_setzero_si512();                                                   \
            for (int ib = 0; ib < 8; ib += 2)                                                       \
                acc = step64(acc, RUN(&x[i], ib), RUN(&x[i], ib + 1), y[i].qs + 32 * ib, lane_run); \
            sum += d * (float)_mm512_reduce_add_epi32(acc);                                         \
        }                                                                                           \
        *s = (F)*sum;                                                                               \
    }

IQ_DOT(iq2_xxs_dot, quant_block_iq2_xxs, iqx_run_iq2_xxs, 0.125f)
IQ_DOT(iq2_xs_dot, quant_block_iq2_xs, iqx_run_iq2_xs, 0.125f)
IQ_DOT(iq2_s_dot, quant_block_iq2_s, iqx_run_iq2_s, 0.125f)
IQ_DOT(iq3_xxs_dot, quant_block_iq3_xxs, iqx_run_iq3_xxs, 0.25f)
IQ_DOT(iq3_s_dot, quant_block_iq3_s, iqx_run_iq3_s, 1.0f)

const quant_simd quant_iquants_avx512 = {.dot = {[QUANT_IQ2_XXS] = iq2_xxs_dot,
                                                 [QUANT_IQ2_XS] = iq2_xs_dot,
                                                 [QUANT_IQ2_S] = iq2_s_dot,
                                                 [QUANT_IQ3_XXS] = iq3_xxs_dot,
                                                 [QUANT_IQ3_S] = iq3_s_dot}};
