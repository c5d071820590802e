/*
 * pack_avx2.c — AVX2 twin of the q4_0x8 kernel (pack.h).
 *
 * Per weight block (8 rows x 32 elements): 4 loads give 8 vectors of
 * unsigned nibbles, vector k holding elements 4k..4k+3 of all 8 rows (one
 * row per 32-bit lane).  Per token: 8 x (broadcast 4 activation bytes,
 * maddubs, 16-bit add) — no lane crossing — then one madd to int32, the
 * zero-point term s8, and one fma with the 8 row scales times the token's
 * scale.  16-bit sums stay exact: 8 maddubs pairs of at most 2 * 15 * 127.
 */
#include "kernels/pack.h"

#include "kernels/level.h"
#include "kernels/pack_x86.h"
#include "quant/kquants_layout.h"
#include "quant/quant.h"

#include <immintrin.h>
#include <string.h>

static inline __m256i bcast4(const int8_t *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return _mm256_set1_epi32(v);
}

/* The 16-bit sums, per row lane, of 8 vectors of unsigned 4-byte groups
 * (q[k]: weights 4k .. 4k + 3 of the 8 rows) times 32 activation bytes y:
 * 8 maddubs in two chains.  Exact while each lane's total fits in 16 bits
 * (nibbles: at most 8 * 2 * 15 * 128). */
static inline __m256i dot8_u16(const __m256i q[8], const int8_t *y) {
    __m256i s0 = _mm256_maddubs_epi16(q[0], bcast4(y));
    __m256i s1 = _mm256_maddubs_epi16(q[1], bcast4(y + 4));
    s0 = _mm256_add_epi16(s0, _mm256_maddubs_epi16(q[2], bcast4(y + 8)));
    s1 = _mm256_add_epi16(s1, _mm256_maddubs_epi16(q[3], bcast4(y + 12)));
    s0 = _mm256_add_epi16(s0, _mm256_maddubs_epi16(q[4], bcast4(y + 16)));
    s1 = _mm256_add_epi16(s1, _mm256_maddubs_epi16(q[5], bcast4(y + 20)));
    s0 = _mm256_add_epi16(s0, _mm256_maddubs_epi16(q[6], bcast4(y + 24)));
    s1 = _mm256_add_epi16(s1, _mm256_maddubs_epi16(q[7], bcast4(y + 28)));
    return _mm256_add_epi16(s0, s1);
}

/* Decode streams the weights from memory once per token: prefetching
 * this many blocks (2.3 KB) ahead took one thread from 8.7 to 10-12 GB/s.
 * Groups of a matrix are contiguous, so the lookahead runs on into the
 * next group. */
#define PF_BLOCKS 16
/* The loops that hint a block's lines (#pragma GCC unroll 32) are unrolled:
 * rolled, each 64-byte line took a compare and a branch besides the
 * prefetch and the add (Q6_K: 108 of 908 instructions per group and block). */
/* One token (decode): the accumulator stays in a register. */
static inline __attribute__((always_inline)) void x8_q4_0_1(int nb, const kern_q4_0x8 *w, const kern_act8 *a,
                                                            size_t lda, float *acc) {
    const __m256i m4 = _mm256_set1_epi8(0x0F), ones = _mm256_set1_epi16(1);
    __m256 sum = _mm256_loadu_ps(acc);
    for (int b = 0; b < nb; b++) {
        const kern_q4_0x8 *wb = &w[b];
        _mm_prefetch((const char *)(wb + PF_BLOCKS), _MM_HINT_T0);
        _mm_prefetch((const char *)(wb + PF_BLOCKS) + 64, _MM_HINT_T0);
        _mm_prefetch((const char *)(wb + PF_BLOCKS) + 128, _MM_HINT_T0);
        const kern_act8 *ab = a + (size_t)b * lda;
        const int8_t *y = ab->qs;
        __m256i s0 = _mm256_setzero_si256(), s1 = _mm256_setzero_si256();
#pragma GCC unroll 4
        for (int k = 0; k < 4; k++) {
            const __m256i p = _mm256_loadu_si256((const __m256i *)(wb->qs + 32 * k));
            s0 = _mm256_add_epi16(s0, _mm256_maddubs_epi16(_mm256_and_si256(p, m4), bcast4(y + 4 * k)));
            s1 = _mm256_add_epi16(
                s1, _mm256_maddubs_epi16(_mm256_and_si256(_mm256_srli_epi16(p, 4), m4), bcast4(y + 16 + 4 * k)));
        }
        __m256i s = _mm256_madd_epi16(_mm256_add_epi16(s0, s1), ones);
        s = _mm256_sub_epi32(s, _mm256_set1_epi32(ab->s8));
        const __m256 d = _mm256_mul_ps(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)wb->d)), _mm256_set1_ps(ab->d));
        sum = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), d, sum);
    }
    _mm256_storeu_ps(acc, sum);
}

static void x8_q4_0(int nb, const void *vw, const void *va, size_t lda, int n_tok, float *acc) {
    const kern_q4_0x8 *w = vw;
    const kern_act8 *a = va;
    if (n_tok == 1) {
        x8_q4_0_1(nb, w, a, lda, acc);
        return;
    }
    const __m256i m4 = _mm256_set1_epi8(0x0F), ones = _mm256_set1_epi16(1);
    for (int b = 0; b < nb; b++) {
        const kern_q4_0x8 *wb = &w[b];
        _mm_prefetch((const char *)(wb + PF_BLOCKS), _MM_HINT_T0);
        _mm_prefetch((const char *)(wb + PF_BLOCKS) + 64, _MM_HINT_T0);
        _mm_prefetch((const char *)(wb + PF_BLOCKS) + 128, _MM_HINT_T0);
        __m256i q[8];
#pragma GCC unroll 4
        for (int k = 0; k < 4; k++) {
            const __m256i p = _mm256_loadu_si256((const __m256i *)(wb->qs + 32 * k));
            q[k] = _mm256_and_si256(p, m4);
            q[k + 4] = _mm256_and_si256(_mm256_srli_epi16(p, 4), m4);
        }
        const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)wb->d));
        const kern_act8 *ab = a + (size_t)b * lda;
        for (int t = 0; t < n_tok; t++) {
            __m256i s = _mm256_madd_epi16(dot8_u16(q, ab[t].qs), ones);
            s = _mm256_sub_epi32(s, _mm256_set1_epi32(ab[t].s8));
            const __m256 d = _mm256_mul_ps(dw, _mm256_set1_ps(ab[t].d));
            float *o = acc + 8 * t;
            _mm256_storeu_ps(o, _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), d, _mm256_loadu_ps(o)));
        }
    }
}

/* Tokens per pass over a super-block's sub-blocks in the K-quant kernels:
 * their int32 sums (two 32-byte vectors per token) stay on the stack. */
#define KT 16

/* Q6_K x Q8_K.  Per super-block the scales are widened once to 16-bit
 * pairs per row lane; then, 32 weights of the 8 rows at a time (sub-blocks
 * 2hr, 2hr + 1), the 6-bit values are put together in 8 registers and meet
 * up to KT tokens before the next 32 — a whole super-block unpacked (64
 * vectors) spills, and reloading it per token made this kernel twice as
 * slow per weight as q4_0x8's.  Per token: two maddubs per 16-bit sum (at
 * most 2 * 2 * 63 * 127), madd with the sub-block's scales into int32, and
 * the -32 offset as 32 * sum_s sc_s * bsum_s; int32 throughout (at most
 * 16 * 128 * 16 * 63 * 127, exact in any order), then one fma per block. */
/* One token (decode): per half h and pair of 4-byte groups kk, kk + 1, the
 * three loads (ql of blocks A and B, qh) of each group give all four 6-bit
 * vectors r, which go straight into maddubs — no unpacked copy of the
 * super-block.  Same int32 sums as below. */
static inline __attribute__((always_inline)) void x8_q6_K_1(int nb, const kern_q6_Kx8 *w, const quant_block_q8_K *a,
                                                            size_t lda, float *acc) {
    const __m256i m4 = _mm256_set1_epi8(0x0F), m30 = _mm256_set1_epi8(0x30);
    __m256 sum = _mm256_loadu_ps(acc);
    __m256i dsc[16], osc[8];
    for (int b = 0; b < nb; b++) {
        const kern_q6_Kx8 *wb = &w[b];
#pragma GCC unroll 32
        for (size_t o = 0; o < sizeof *wb; o += 64) _mm_prefetch((const char *)(wb + 2) + o, _MM_HINT_T0);
        const quant_block_q8_K *y = a + (size_t)b * lda;
        q6_K_scale_pairs(wb->sc, dsc, osc);
        __m256i isum = _mm256_setzero_si256();
/* unrolled whole: rolled, the scale pair of each step was indexed
         * at run time and isum went through the stack, 15 % slower */
#pragma GCC unroll 2
        for (int h = 0; h < 2; h++)
#pragma GCC unroll 4
            for (int kk = 0; kk < 8; kk += 2) {
                __m256i q[2][4];
#pragma GCC unroll 2
                for (int e = 0; e < 2; e++) {
                    const __m256i A = _mm256_loadu_si256((const __m256i *)(wb->ql + 32 * (16 * h + kk + e)));
                    const __m256i B = _mm256_loadu_si256((const __m256i *)(wb->ql + 32 * (16 * h + 8 + kk + e)));
                    const __m256i H = _mm256_loadu_si256((const __m256i *)(wb->qh + 32 * (8 * h + kk + e)));
                    q[e][0] = _mm256_or_si256(_mm256_and_si256(A, m4), _mm256_and_si256(_mm256_slli_epi16(H, 4), m30));
                    q[e][1] = _mm256_or_si256(_mm256_and_si256(B, m4), _mm256_and_si256(_mm256_slli_epi16(H, 2), m30));
                    q[e][2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(A, 4), m4), _mm256_and_si256(H, m30));
                    q[e][3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(B, 4), m4),
                                              _mm256_and_si256(_mm256_srli_epi16(H, 2), m30));
                }
#pragma GCC unroll 4
                for (int r = 0; r < 4; r++) {
                    const int hr = 4 * h + r, sb = 2 * hr + (kk >> 2);
                    const int8_t *yb = y->qs + 32 * hr + 4 * kk;
                    const __m256i p = _mm256_add_epi16(_mm256_maddubs_epi16(q[0][r], bcast4(yb)),
                                                       _mm256_maddubs_epi16(q[1][r], bcast4(yb + 4)));
                    isum = _mm256_add_epi32(isum, _mm256_madd_epi16(p, dsc[sb]));
                }
            }
        isum = _mm256_sub_epi32(isum, q6_K_offset(osc, y->bsums));
        sum = _mm256_fmadd_ps(
            _mm256_cvtepi32_ps(isum),
            _mm256_mul_ps(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)wb->d)), _mm256_set1_ps(y->d)), sum);
    }
    _mm256_storeu_ps(acc, sum);
}

static void x8_q6_K(int nb, const void *vw, const void *va, size_t lda, int n_tok, float *acc) {
    const kern_q6_Kx8 *w = vw;
    const quant_block_q8_K *a = va;
    if (n_tok == 1) {
        x8_q6_K_1(nb, w, a, lda, acc);
        return;
    }
    const __m256i m4 = _mm256_set1_epi8(0x0F), m30 = _mm256_set1_epi8(0x30);
    __m256i dsc[16], osc[8], isum[KT];
    for (int b = 0; b < nb; b++) {
        const kern_q6_Kx8 *wb = &w[b];
#pragma GCC unroll 32
        for (size_t o = 0; o < sizeof *wb; o += 64) _mm_prefetch((const char *)(wb + 2) + o, _MM_HINT_T0);
        q6_K_scale_pairs(wb->sc, dsc, osc);
        const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)wb->d));
        const quant_block_q8_K *ab = a + (size_t)b * lda;
        for (int t0 = 0; t0 < n_tok; t0 += KT) {
            const int nt = n_tok - t0 < KT ? n_tok - t0 : KT;
/* isum[t] is first written at hr 0: clearing nt entries was a
             * rep stos, 4 % of this kernel at 8 tokens */
/* unrolled, so h, r and the shifts below are constants: 5 to
             * 12 % fewer cycles than the rolled loop */
#pragma GCC unroll 8
            for (int hr = 0; hr < 8; hr++) {
                /* weights 32hr .. 32hr + 31: low 4 bits from ql (block A or
                 * B of half h, low or high nibbles), high 2 bits from qh */
                const int h = hr >> 2, r = hr & 3;
                const uint8_t *ql = wb->ql + 32 * (16 * h + 8 * (r & 1)), *qh = wb->qh + 32 * 8 * h;
                __m256i qq[8];
#pragma GCC unroll 8
                for (int kk = 0; kk < 8; kk++) {
                    const __m256i L = _mm256_loadu_si256((const __m256i *)(ql + 32 * kk));
                    const __m256i H = _mm256_loadu_si256((const __m256i *)(qh + 32 * kk));
                    const __m256i lo = _mm256_and_si256(r & 2 ? _mm256_srli_epi16(L, 4) : L, m4);
                    const __m256i hi = r == 0   ? _mm256_slli_epi16(H, 4)
                                       : r == 1 ? _mm256_slli_epi16(H, 2)
                                       : r == 2 ? H
                                                : _mm256_srli_epi16(H, 2);
                    qq[kk] = _mm256_or_si256(lo, _mm256_and_si256(hi, m30));
                }
                const __m256i d0 = dsc[2 * hr], d1 = dsc[2 * hr + 1];
                for (int t = 0; t < nt; t++) {
                    const int8_t *yb = ab[t0 + t].qs + 32 * hr;
                    const __m256i p0 = _mm256_add_epi16(_mm256_maddubs_epi16(qq[0], bcast4(yb)),
                                                        _mm256_maddubs_epi16(qq[1], bcast4(yb + 4)));
                    const __m256i p1 = _mm256_add_epi16(_mm256_maddubs_epi16(qq[2], bcast4(yb + 8)),
                                                        _mm256_maddubs_epi16(qq[3], bcast4(yb + 12)));
                    const __m256i p2 = _mm256_add_epi16(_mm256_maddubs_epi16(qq[4], bcast4(yb + 16)),
                                                        _mm256_maddubs_epi16(qq[5], bcast4(yb + 20)));
                    const __m256i p3 = _mm256_add_epi16(_mm256_maddubs_epi16(qq[6], bcast4(yb + 24)),
                                                        _mm256_maddubs_epi16(qq[7], bcast4(yb + 28)));
                    const __m256i s01 = _mm256_add_epi32(_mm256_madd_epi16(p0, d0), _mm256_madd_epi16(p1, d0));
                    const __m256i s23 = _mm256_add_epi32(_mm256_madd_epi16(p2, d1), _mm256_madd_epi16(p3, d1));
                    const __m256i v = _mm256_add_epi32(s01, s23);
                    isum[t] = hr ? _mm256_add_epi32(isum[t], v) : v;
                }
            }
            for (int t = 0; t < nt; t++) {
                const quant_block_q8_K *y = &ab[t0 + t];
                const __m256i is = _mm256_sub_epi32(isum[t], q6_K_offset(osc, y->bsums));
                const __m256 d = _mm256_mul_ps(dw, _mm256_set1_ps(y->d));
                float *o = acc + 8 * (t0 + t);
                _mm256_storeu_ps(o, _mm256_fmadd_ps(_mm256_cvtepi32_ps(is), d, _mm256_loadu_ps(o)));
            }
        }
    }
}

/* Q8_0 x Q8_0.  |w| once per block; per token and 4-byte group: the
 * activation broadcast takes w's sign (sign_epi8), maddubs, and madd to
 * int32 at once (a pair of 127 * 127 products nearly fills 16 bits).  One
 * fma per block, as in the scalar twin. */
/* One token (decode): the accumulator stays in a register and |w| goes
 * straight into maddubs; the same sums in the same order as below. */
static inline __attribute__((always_inline)) void x8_q8_0_1(int nb, const kern_q8_0x8 *w, const kern_act8 *a,
                                                            size_t lda, float *acc) {
    const __m256i ones = _mm256_set1_epi16(1);
    __m256 sum = _mm256_loadu_ps(acc);
    for (int b = 0; b < nb; b++) {
        const kern_q8_0x8 *wb = &w[b];
#pragma GCC unroll 32
        for (size_t o = 0; o < sizeof *wb; o += 64) _mm_prefetch((const char *)(wb + 8) + o, _MM_HINT_T0);
        const kern_act8 *ab = a + (size_t)b * lda;
        const int8_t *y = ab->qs;
        __m256i s0 = _mm256_setzero_si256(), s1 = s0;
#pragma GCC unroll 8
        for (int k = 0; k < 8; k += 2) {
            const __m256i q0 = _mm256_loadu_si256((const __m256i *)(wb->qs + 32 * k));
            const __m256i q1 = _mm256_loadu_si256((const __m256i *)(wb->qs + 32 * k + 32));
            s0 = _mm256_add_epi32(
                s0, _mm256_madd_epi16(
                        _mm256_maddubs_epi16(_mm256_abs_epi8(q0), _mm256_sign_epi8(bcast4(y + 4 * k), q0)), ones));
            s1 = _mm256_add_epi32(
                s1, _mm256_madd_epi16(
                        _mm256_maddubs_epi16(_mm256_abs_epi8(q1), _mm256_sign_epi8(bcast4(y + 4 * k + 4), q1)), ones));
        }
        const __m256 d = _mm256_mul_ps(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)wb->d)), _mm256_set1_ps(ab->d));
        sum = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_add_epi32(s0, s1)), d, sum);
    }
    _mm256_storeu_ps(acc, sum);
}

static void x8_q8_0(int nb, const void *vw, const void *va, size_t lda, int n_tok, float *acc) {
    const kern_q8_0x8 *w = vw;
    const kern_act8 *a = va;
    if (n_tok == 1) {
        x8_q8_0_1(nb, w, a, lda, acc);
        return;
    }
    const __m256i ones = _mm256_set1_epi16(1);
    for (int b = 0; b < nb; b++) {
        const kern_q8_0x8 *wb = &w[b];
#pragma GCC unroll 32
        for (size_t o = 0; o < sizeof *wb; o += 64) _mm_prefetch((const char *)(wb + 8) + o, _MM_HINT_T0);
        __m256i q[8], aq[8];
#pragma GCC unroll 8
        for (int k = 0; k < 8; k++) {
            q[k] = _mm256_loadu_si256((const __m256i *)(wb->qs + 32 * k));
            aq[k] = _mm256_abs_epi8(q[k]);
        }
        const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)wb->d));
        const kern_act8 *ab = a + (size_t)b * lda;
        for (int t = 0; t < n_tok; t++) {
            const int8_t *y = ab[t].qs;
            __m256i s0 = _mm256_setzero_si256(), s1 = s0;
#pragma GCC unroll 8
            for (int k = 0; k < 8; k += 2) {
                s0 = _mm256_add_epi32(
                    s0,
                    _mm256_madd_epi16(_mm256_maddubs_epi16(aq[k], _mm256_sign_epi8(bcast4(y + 4 * k), q[k])), ones));
                s1 = _mm256_add_epi32(
                    s1, _mm256_madd_epi16(
                            _mm256_maddubs_epi16(aq[k + 1], _mm256_sign_epi8(bcast4(y + 4 * k + 4), q[k + 1])), ones));
            }
            const __m256 d = _mm256_mul_ps(dw, _mm256_set1_ps(ab[t].d));
            float *o = acc + 8 * t;
            _mm256_storeu_ps(o, _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_add_epi32(s0, s1)), d, _mm256_loadu_ps(o)));
        }
    }
}

/* Q4_K x Q8_K.  A sub-block's nibbles (8 vectors: weights 32s + 4kk ..
 * + 3 of the 8 rows) are split once and meet up to KT tokens, as in
 * x8_q6_K.  Per token and sub-block: 8 maddubs summed in 16 bits (at most
 * 8 * 2 * 15 * 128), one madd with the scales (widened to 16-bit pairs per
 * row lane) into int32; the mins go through the activation's sums, paired
 * by sub-block (q4_K_mins).  Two fmas per block, as in the scalar twin. */
/* One token (decode): the nibbles go straight from the load into maddubs
 * and the accumulator stays in a register; same arithmetic as below. */
static inline __attribute__((always_inline)) void x8_q4_K_1(int nb, const kern_q4_Kx8 *w, const quant_block_q8_K *a,
                                                            size_t lda, float *acc) {
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    __m256 sum = _mm256_loadu_ps(acc);
    for (int b = 0; b < nb; b++) {
        const kern_q4_Kx8 *wb = &w[b];
#pragma GCC unroll 32
        for (size_t o = 0; o < sizeof *wb; o += 64) _mm_prefetch((const char *)(wb + 2) + o, _MM_HINT_T0);
        const quant_block_q8_K *y = a + (size_t)b * lda;
        __m256i is = _mm256_setzero_si256();
        for (int g = 0; g < 4; g++) {
            const int8_t *y0 = y->qs + 64 * g, *y1 = y0 + 32;
            __m256i l0 = _mm256_setzero_si256(), l1 = l0, h0 = l0, h1 = l0;
#pragma GCC unroll 8
            for (int kk = 0; kk < 8; kk += 2) {
                const __m256i p0 = _mm256_loadu_si256((const __m256i *)(wb->qs + 32 * (8 * g + kk)));
                const __m256i p1 = _mm256_loadu_si256((const __m256i *)(wb->qs + 32 * (8 * g + kk + 1)));
                l0 = _mm256_add_epi16(l0, _mm256_maddubs_epi16(_mm256_and_si256(p0, m4), bcast4(y0 + 4 * kk)));
                l1 = _mm256_add_epi16(l1, _mm256_maddubs_epi16(_mm256_and_si256(p1, m4), bcast4(y0 + 4 * kk + 4)));
                h0 = _mm256_add_epi16(
                    h0, _mm256_maddubs_epi16(_mm256_and_si256(_mm256_srli_epi16(p0, 4), m4), bcast4(y1 + 4 * kk)));
                h1 = _mm256_add_epi16(
                    h1, _mm256_maddubs_epi16(_mm256_and_si256(_mm256_srli_epi16(p1, 4), m4), bcast4(y1 + 4 * kk + 4)));
            }
            __m256i sl, sh;
            scale_pairs_u8(wb->sc + 16 * g, &sl, &sh);
            is = _mm256_add_epi32(is, _mm256_madd_epi16(_mm256_add_epi16(l0, l1), sl));
            is = _mm256_add_epi32(is, _mm256_madd_epi16(_mm256_add_epi16(h0, h1), sh));
        }
        const __m256i ms = q4_K_mins(wb->mn, y->bsums);
        const __m256 yd = _mm256_set1_ps(y->d);
        const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)wb->d));
        const __m256 dm = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)wb->dmin));
        sum = _mm256_fmadd_ps(_mm256_cvtepi32_ps(is), _mm256_mul_ps(dw, yd), sum);
        sum = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(ms), _mm256_mul_ps(dm, yd), sum);
    }
    _mm256_storeu_ps(acc, sum);
}

static void x8_q4_K(int nb, const void *vw, const void *va, size_t lda, int n_tok, float *acc) {
    const kern_q4_Kx8 *w = vw;
    const quant_block_q8_K *a = va;
    if (n_tok == 1) {
        x8_q4_K_1(nb, w, a, lda, acc);
        return;
    }
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    __m256i isum[KT];
    for (int b = 0; b < nb; b++) {
        const kern_q4_Kx8 *wb = &w[b];
#pragma GCC unroll 32
        for (size_t o = 0; o < sizeof *wb; o += 64) _mm_prefetch((const char *)(wb + 2) + o, _MM_HINT_T0);
        const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)wb->d));
        const __m256 dm = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)wb->dmin));
        __m256i mnp[4]; /* widened once per super-block */
        q4_K_min_pairs(wb->mn, mnp);
        const quant_block_q8_K *ab = a + (size_t)b * lda;
        for (int t0 = 0; t0 < n_tok; t0 += KT) {
            const int nt = n_tok - t0 < KT ? n_tok - t0 : KT;
            /* isum[t] is first written at sb 0 (see x8_q6_K) */
            for (int sb = 0; sb < 8; sb++) {
                /* sub-block sb: the low (even sb) or high nibbles of
                 * group-of-64 g = sb / 2 */
                const uint8_t *qs = wb->qs + 32 * 8 * (sb >> 1);
                __m256i qq[8];
#pragma GCC unroll 8
                for (int kk = 0; kk < 8; kk++) {
                    const __m256i p = _mm256_loadu_si256((const __m256i *)(qs + 32 * kk));
                    qq[kk] = _mm256_and_si256(sb & 1 ? _mm256_srli_epi16(p, 4) : p, m4);
                }
                const __m256i sc = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(wb->sc + 8 * sb)));
                const __m256i dsc = _mm256_or_si256(sc, _mm256_slli_epi32(sc, 16));
                for (int t = 0; t < nt; t++) {
                    const __m256i v = _mm256_madd_epi16(dot8_u16(qq, ab[t0 + t].qs + 32 * sb), dsc);
                    isum[t] = sb ? _mm256_add_epi32(isum[t], v) : v;
                }
            }
            for (int t = 0; t < nt; t++) {
                const quant_block_q8_K *y = &ab[t0 + t];
                const __m256i ms = q4_K_mins_p(mnp, y->bsums);
                const __m256 yd = _mm256_set1_ps(y->d);
                float *o = acc + 8 * (t0 + t);
                const __m256 r =
                    _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[t]), _mm256_mul_ps(dw, yd), _mm256_loadu_ps(o));
                _mm256_storeu_ps(o, _mm256_fnmadd_ps(_mm256_cvtepi32_ps(ms), _mm256_mul_ps(dm, yd), r));
            }
        }
    }
}

/* The one-token kernels over groups (decode) take NG consecutive groups a
 * pass (group g of the pass at w + g * nb): each activation broadcast,
 * the token's zero-point term, scale and 16-element sum pairs are loaded
 * or worked out once for the NG groups instead of once per group.  Every
 * group's integer sums (exact: no 16-bit sum can saturate) and its fmas
 * per block, in block order, are those of x8_*_1, so the same bits.  NG
 * is a constant at each call site: 2 (callgrind, per group and block:
 * Q4_0 54 -> 51 instructions, Q8_0 61 -> 58, Q4_K 561 -> 463); with 4,
 * Q4_0's sums no longer fit the 16 ymm registers and spill.  Q6_K keeps
 * one group a pass: its 24 scale vectors per block already spill. */
#define DEC_NG_MAX 2

static inline __attribute__((always_inline)) void q4_0_dec_n(int nb, const kern_q4_0x8 *w, const int NG,
                                                             const kern_act8 *a, size_t lda, float *y) {
    const __m256i m4 = _mm256_set1_epi8(0x0F), ones = _mm256_set1_epi16(1);
    __m256 sum[DEC_NG_MAX];
#pragma GCC unroll 4
    for (int g = 0; g < NG; g++) sum[g] = _mm256_setzero_ps();
    for (int b = 0; b < nb; b++) {
        const kern_act8 *ab = a + (size_t)b * lda;
        __m256i s[DEC_NG_MAX];
#pragma GCC unroll 4
        for (int g = 0; g < NG; g++) {
            const char *pf = (const char *)(w + (size_t)g * (size_t)nb + b + PF_BLOCKS);
            _mm_prefetch(pf, _MM_HINT_T0);
            _mm_prefetch(pf + 64, _MM_HINT_T0);
            _mm_prefetch(pf + 128, _MM_HINT_T0);
        }
#pragma GCC unroll 4
        for (int k = 0; k < 4; k++) {
            const __m256i lo = bcast4(ab->qs + 4 * k), hi = bcast4(ab->qs + 16 + 4 * k);
#pragma GCC unroll 4
            for (int g = 0; g < NG; g++) {
                const __m256i p = _mm256_loadu_si256((const __m256i *)(w[(size_t)g * (size_t)nb + b].qs + 32 * k));
                const __m256i v =
                    _mm256_add_epi16(_mm256_maddubs_epi16(_mm256_and_si256(p, m4), lo),
                                     _mm256_maddubs_epi16(_mm256_and_si256(_mm256_srli_epi16(p, 4), m4), hi));
                s[g] = k ? _mm256_add_epi16(s[g], v) : v;
            }
        }
        const __m256i off = _mm256_set1_epi32(ab->s8);
        const __m256 yd = _mm256_set1_ps(ab->d);
#pragma GCC unroll 4
        for (int g = 0; g < NG; g++) {
            const kern_q4_0x8 *wb = &w[(size_t)g * (size_t)nb + b];
            const __m256i is = _mm256_sub_epi32(_mm256_madd_epi16(s[g], ones), off);
            const __m256 d = _mm256_mul_ps(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)wb->d)), yd);
            sum[g] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(is), d, sum[g]);
        }
    }
#pragma GCC unroll 4
    for (int g = 0; g < NG; g++) _mm256_storeu_ps(y + 8 * g, sum[g]);
}

static inline __attribute__((always_inline)) void q8_0_dec_n(int nb, const kern_q8_0x8 *w, const int NG,
                                                             const kern_act8 *a, size_t lda, float *y) {
    const __m256i ones = _mm256_set1_epi16(1);
    __m256 sum[DEC_NG_MAX];
#pragma GCC unroll 4
    for (int g = 0; g < NG; g++) sum[g] = _mm256_setzero_ps();
    for (int b = 0; b < nb; b++) {
        const kern_act8 *ab = a + (size_t)b * lda;
        __m256i s[DEC_NG_MAX];
#pragma GCC unroll 4
        for (int g = 0; g < NG; g++) {
            const kern_q8_0x8 *wb = &w[(size_t)g * (size_t)nb + b];
#pragma GCC unroll 32
            for (size_t o = 0; o < sizeof *wb; o += 64) _mm_prefetch((const char *)(wb + 8) + o, _MM_HINT_T0);
        }
#pragma GCC unroll 8
        for (int k = 0; k < 8; k++) {
            const __m256i yk = bcast4(ab->qs + 4 * k);
#pragma GCC unroll 4
            for (int g = 0; g < NG; g++) {
                const __m256i q = _mm256_loadu_si256((const __m256i *)(w[(size_t)g * (size_t)nb + b].qs + 32 * k));
                const __m256i v =
                    _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_abs_epi8(q), _mm256_sign_epi8(yk, q)), ones);
                s[g] = k ? _mm256_add_epi32(s[g], v) : v;
            }
        }
        const __m256 yd = _mm256_set1_ps(ab->d);
#pragma GCC unroll 4
        for (int g = 0; g < NG; g++) {
            const kern_q8_0x8 *wb = &w[(size_t)g * (size_t)nb + b];
            const __m256 d = _mm256_mul_ps(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)wb->d)), yd);
            sum[g] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s[g]), d, sum[g]);
        }
    }
#pragma GCC unroll 4
    for (int g = 0; g < NG; g++) _mm256_storeu_ps(y + 8 * g, sum[g]);
}

static inline __attribute__((always_inline)) void q4_K_dec_n(int nb, const kern_q4_Kx8 *w, const int NG,
                                                             const quant_block_q8_K *a, size_t lda, float *y) {
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    __m256 sum[DEC_NG_MAX];
#pragma GCC unroll 4
    for (int g = 0; g < NG; g++) sum[g] = _mm256_setzero_ps();
    for (int b = 0; b < nb; b++) {
        const quant_block_q8_K *ya = a + (size_t)b * lda;
        __m256i is[DEC_NG_MAX];
#pragma GCC unroll 4
        for (int g = 0; g < NG; g++) {
            const kern_q4_Kx8 *wb = &w[(size_t)g * (size_t)nb + b];
#pragma GCC unroll 32
            for (size_t o = 0; o < sizeof *wb; o += 64) _mm_prefetch((const char *)(wb + 2) + o, _MM_HINT_T0);
        }
#pragma GCC unroll 4
        for (int g = 0; g < NG; g++) is[g] = _mm256_setzero_si256();
        for (int q = 0; q < 4; q++) { /* the 64 weights 64q .. 64q + 63 */
            const int8_t *y0 = ya->qs + 64 * q, *y1 = y0 + 32;
            __m256i l[DEC_NG_MAX], h[DEC_NG_MAX];
#pragma GCC unroll 4
            for (int g = 0; g < NG; g++) l[g] = h[g] = _mm256_setzero_si256();
#pragma GCC unroll 8
            for (int kk = 0; kk < 8; kk++) {
                const __m256i lo = bcast4(y0 + 4 * kk), hi = bcast4(y1 + 4 * kk);
#pragma GCC unroll 4
                for (int g = 0; g < NG; g++) {
                    const __m256i p =
                        _mm256_loadu_si256((const __m256i *)(w[(size_t)g * (size_t)nb + b].qs + 32 * (8 * q + kk)));
                    const __m256i vl = _mm256_maddubs_epi16(_mm256_and_si256(p, m4), lo);
                    const __m256i vh = _mm256_maddubs_epi16(_mm256_and_si256(_mm256_srli_epi16(p, 4), m4), hi);
                    l[g] = _mm256_add_epi16(l[g], vl);
                    h[g] = _mm256_add_epi16(h[g], vh);
                }
            }
#pragma GCC unroll 4
            for (int g = 0; g < NG; g++) {
                __m256i sl, sh;
                scale_pairs_u8(w[(size_t)g * (size_t)nb + b].sc + 16 * q, &sl, &sh);
                const __m256i v = _mm256_add_epi32(_mm256_madd_epi16(l[g], sl), _mm256_madd_epi16(h[g], sh));
                is[g] = _mm256_add_epi32(is[g], v);
            }
        }
        __m256i bp[4];
        q4_K_bsum_pairs(ya->bsums, bp);
        const __m256 yd = _mm256_set1_ps(ya->d);
#pragma GCC unroll 4
        for (int g = 0; g < NG; g++) {
            const kern_q4_Kx8 *wb = &w[(size_t)g * (size_t)nb + b];
            __m256i mnp[4];
            q4_K_min_pairs(wb->mn, mnp);
            const __m256i ms = q4_K_mins_bp(mnp, bp);
            const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)wb->d));
            const __m256 dm = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)wb->dmin));
            sum[g] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(is[g]), _mm256_mul_ps(dw, yd), sum[g]);
            sum[g] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(ms), _mm256_mul_ps(dm, yd), sum[g]);
        }
    }
#pragma GCC unroll 4
    for (int g = 0; g < NG; g++) _mm256_storeu_ps(y + 8 * g, sum[g]);
}

/* A kern_x8_dec_fn NAME: NG groups a pass through ONE_N, then the rest one
 * at a time. */
#define DEC_GROUPS(NAME, ONE_N, NG, WT, AT)                                                              \
    static void NAME(int ng, int nb, const void *vw, const void *va, size_t lda, float *y) {             \
        const WT *w = vw;                                                                                \
        int g = 0;                                                                                       \
        for (; g + (NG) <= ng; g += (NG)) ONE_N(nb, w + (size_t)g * (size_t)nb, NG, va, lda, y + 8 * g); \
        for (; g < ng; g++) ONE_N(nb, w + (size_t)g * (size_t)nb, 1, va, lda, y + 8 * g);                \
    }
DEC_GROUPS(dec_q4_0, q4_0_dec_n, 2, kern_q4_0x8, kern_act8)
DEC_GROUPS(dec_q8_0, q8_0_dec_n, 2, kern_q8_0x8, kern_act8)
DEC_GROUPS(dec_q4_K, q4_K_dec_n, 2, kern_q4_Kx8, quant_block_q8_K)
KERN_X8_DEC(dec_q6_K, x8_q6_K_1, kern_q6_Kx8, quant_block_q8_K)

const kern_x8_set kern_x8_avx2 = {
    .fn = {[QUANT_Q4_0] = x8_q4_0, [QUANT_Q8_0] = x8_q8_0, [QUANT_Q4_K] = x8_q4_K, [QUANT_Q6_K] = x8_q6_K},
    .dec = {[QUANT_Q4_0] = dec_q4_0, [QUANT_Q8_0] = dec_q8_0, [QUANT_Q4_K] = dec_q4_K, [QUANT_Q6_K] = dec_q6_K},
};
