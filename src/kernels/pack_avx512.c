/*
 * pack_avx512.c — AVX-512 VNNI twins of the four interleaved kernels
 * (pack.h), for CPUs with F, BW, VL, DQ and VNNI.
 *
 * One zmm holds two 4-byte groups of all 8 rows: the 64 bytes at
 * qs + 64m are groups 2m (row i in lane i) and 2m + 1 (row i in lane 8 + i),
 * as packed.  The activation vector for the pair is the token's 32 quant
 * bytes with dword 2m broadcast to lanes 0..7 and 2m + 1 to lanes 8..15
 * (one vpermd of a 32-byte load).  vpdpbusd (unsigned weight bytes x signed
 * activation bytes, four products summed into each int32 lane) replaces the
 * AVX2 maddubs / 16-bit add / madd steps; the halves are added at the end,
 * so every row's block sum is the same integer as the scalar twin's and the
 * float step (one fma with the row scale times the token scale) is the
 * same operation: the results are equal bit for bit.
 *
 *   Q4_0: nibbles are 0..15; the zero point goes as s8 = 8 * sum(a).
 *   Q8_0: weights are signed and AVX-512 has no vpsignb, so w + 128 (an
 *         xor) is the unsigned operand and 128 * sum(a) = 16 * s8 comes off.
 *   Q4_K, Q6_K: the scales multiply 16-bit maddubs sums, so vpdpwssd (int16
 *         pairs times the row scale, into int32) takes the madd + add.
 * The tests also build this file against tests/emu512.h, so its kernels are
 * checked on CPUs without AVX-512.
 */
#include "kernels/pack.h"

#include "kernels/level.h"
#include "kernels/pack_x86.h"
#include "quant/kquants_layout.h"
#include "quant/quant.h"

#include <immintrin.h>
#include <string.h>

/* as in pack_avx2.c: blocks of lookahead for the decode stream */
#define PF_BLOCKS 16
/* and, as there, the loops hinting a block's lines are unrolled */

/* vpermd indices: dword lo of the activation to lanes 0..7, hi to 8..15 */
static inline __m512i pair_idx(int lo, int hi) {
    return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_set1_epi32(lo)), _mm256_set1_epi32(hi), 1);
}

/* int32 lane i + lane 8 + i: the two groups' sums of row i */
static inline __m256i fold(__m512i s) {
    return _mm256_add_epi32(_mm512_castsi512_si256(s), _mm512_extracti64x4_epi64(s, 1));
}

/* The 8 rows' integer sums over one block of 32 quant bytes qs, with the
 * block's weights as u[m] = groups 2m, 2m + 1 and idx[m] their dwords. */
static inline __m256i block_sums(const __m512i u[4], const __m512i idx[4], const int8_t *qs) {
    const __m512i y = _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)qs));
    __m512i s0 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), u[0], _mm512_permutexvar_epi32(idx[0], y));
    __m512i s1 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), u[1], _mm512_permutexvar_epi32(idx[1], y));
    s0 = _mm512_dpbusd_epi32(s0, u[2], _mm512_permutexvar_epi32(idx[2], y));
    s1 = _mm512_dpbusd_epi32(s1, u[3], _mm512_permutexvar_epi32(idx[3], y));
    return fold(_mm512_add_epi32(s0, s1));
}

/* A Q4_0 block's nibbles as the 4 vectors block_sums takes: the low
 * nibbles of qs[0..63] are groups 0, 1 (elements 0..7), of qs[64..127]
 * groups 2, 3; the high nibbles elements 16.. (4..7).  The decode stream
 * is hinted PF_BLOCKS blocks ahead. */
static inline void q4_0_unpack(const kern_q4_0x8 *wb, __m512i u[4]) {
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    _mm_prefetch((const char *)(wb + PF_BLOCKS), _MM_HINT_T0);
    _mm_prefetch((const char *)(wb + PF_BLOCKS) + 64, _MM_HINT_T0);
    _mm_prefetch((const char *)(wb + PF_BLOCKS) + 128, _MM_HINT_T0);
    const __m512i p0 = _mm512_loadu_si512(wb->qs), p1 = _mm512_loadu_si512(wb->qs + 64);
    u[0] = _mm512_and_si512(p0, m4);
    u[1] = _mm512_and_si512(p1, m4);
    u[2] = _mm512_and_si512(_mm512_srli_epi16(p0, 4), m4);
    u[3] = _mm512_and_si512(_mm512_srli_epi16(p1, 4), m4);
}

/* A Q8_0 block's weights + 128 as unsigned bytes (an xor), the stream
 * hinted 8 blocks ahead. */
static inline void q8_0_unpack(const kern_q8_0x8 *wb, __m512i u[4]) {
    const __m512i bias = _mm512_set1_epi8((char)0x80);
#pragma GCC unroll 32
    for (size_t o = 0; o < sizeof *wb; o += 64) _mm_prefetch((const char *)(wb + 8) + o, _MM_HINT_T0);
#pragma GCC unroll 4 /* rolled, gcc kept u on the stack: a store and a load per vector */
    for (int m = 0; m < 4; m++) u[m] = _mm512_xor_si512(_mm512_loadu_si512(wb->qs + 64 * m), bias);
}

/* One token (decode), in this file's kernels: the accumulator stays in a
 * register through the row group's blocks instead of going through acc
 * per block; the same sums and the same fma per block. */
static inline __attribute__((always_inline)) void x8_q4_0_1(int nb, const kern_q4_0x8 *w, const kern_act8 *a,
                                                            size_t lda, float *acc) {
    const __m512i idx[4] = {pair_idx(0, 1), pair_idx(2, 3), pair_idx(4, 5), pair_idx(6, 7)};
    __m256 sum = _mm256_loadu_ps(acc);
    for (int b = 0; b < nb; b++) {
        const kern_q4_0x8 *wb = &w[b];
        __m512i u[4];
        q4_0_unpack(wb, u);
        const kern_act8 *ab = a + (size_t)b * lda;
        const __m256i s = _mm256_sub_epi32(block_sums(u, idx, ab->qs), _mm256_set1_epi32(ab->s8));
        const __m256 d = _mm256_mul_ps(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)wb->d)), _mm256_set1_ps(ab->d));
        sum = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), d, sum);
    }
    _mm256_storeu_ps(acc, sum);
}

/* Many tokens (prompt), Q4_0 and Q8_0: PAIR_TOK tokens at a time, their
 * accumulators in registers through all the blocks (two tokens a zmm: rows
 * of t in lanes 0..7, of t + 1 in 8..15).  Each block's weight vectors u
 * (as block_sums takes them) get their lanes interleaved once per tile
 * (lane 2i: row i of group 2m, lane 2i + 1: row i of group 2m + 1), so a
 * token's 8 activation bytes of groups 2m, 2m + 1 are one vpbroadcastq
 * from memory instead of a vpermd per token; a pair of tokens folds its
 * lane pairs through two vpermt2d.  The same integers, products and fma
 * per row, token and block, in block order, as the scalar twin. */
#define PAIR_TOK 16

static inline __m512i bcast8(const int8_t *p) {
    int64_t v;
    memcpy(&v, p, 8);
    return _mm512_set1_epi64(v);
}

/* lanes 2i, 2i + 1: row i's sums over groups 2m and 2m + 1 */
static inline __m512i pair_sums(const __m512i u[4], const int8_t *qs) {
    __m512i s0 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), u[0], bcast8(qs));
    __m512i s1 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), u[1], bcast8(qs + 8));
    s0 = _mm512_dpbusd_epi32(s0, u[2], bcast8(qs + 16));
    s1 = _mm512_dpbusd_epi32(s1, u[3], bcast8(qs + 24));
    return _mm512_add_epi32(s0, s1);
}

/* vpermd / vpermt2d indices: ilv interleaves a vector's halves (lane 2i
 * from lane i, 2i + 1 from 8 + i); ev, od pick the even and the odd lanes
 * of two vectors (the first's in lanes 0..7). */
static const int32_t ilv_idx[16] = {0, 8, 1, 9, 2, 10, 3, 11, 4, 12, 5, 13, 6, 14, 7, 15};
static const int32_t ev_idx[16] = {0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30};
static const int32_t od_idx[16] = {1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31};

/* lanes 0..7: row i's two lanes 2i, 2i + 1 of st added; 8..15: of su */
static inline __m512i fold_pairs(__m512i st, __m512i su) {
    const __m512i ev = _mm512_loadu_si512(ev_idx), od = _mm512_loadu_si512(od_idx);
    return _mm512_add_epi32(_mm512_permutex2var_epi32(st, ev, su), _mm512_permutex2var_epi32(st, od, su));
}

/* q8: Q8_0 weights (the zero point 16 * s8), else Q4_0 (s8) */
static inline __attribute__((always_inline)) void pair_batch(int nb, const void *vw, const kern_act8 *a, size_t lda,
                                                             int n_tok, float *acc, int q8) {
    const __m512i ilv = _mm512_loadu_si512(ilv_idx);
    const int off_mul = q8 ? 16 : 1;
    for (int t0 = 0; t0 < n_tok; t0 += PAIR_TOK) {
        const int nt = n_tok - t0 < PAIR_TOK ? n_tok - t0 : PAIR_TOK, np = nt / 2;
        float *o = acc + 8 * t0;
        __m512 av[PAIR_TOK / 2];
#pragma GCC unroll 8
        for (int p = 0; p < PAIR_TOK / 2; p++) av[p] = p < np ? _mm512_loadu_ps(o + 16 * p) : _mm512_setzero_ps();
        __m256 at = nt & 1 ? _mm256_loadu_ps(o + 16 * np) : _mm256_setzero_ps();
        for (int b = 0; b < nb; b++) {
            __m512i u[4];
            const uint16_t *dh;
            if (q8) {
                const kern_q8_0x8 *wb = (const kern_q8_0x8 *)vw + b;
                q8_0_unpack(wb, u);
                dh = wb->d;
            } else {
                const kern_q4_0x8 *wb = (const kern_q4_0x8 *)vw + b;
                q4_0_unpack(wb, u);
                dh = wb->d;
            }
#pragma GCC unroll 4
            for (int m = 0; m < 4; m++) u[m] = _mm512_permutexvar_epi32(ilv, u[m]);
            const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)dh));
            const __m512 dw2 = _mm512_insertf32x8(_mm512_castps256_ps512(dw), dw, 1);
            const kern_act8 *ab = a + (size_t)b * lda + t0;
#pragma GCC unroll 8
            for (int p = 0; p < PAIR_TOK / 2; p++) {
                if (p >= np) break;
                const kern_act8 *y0 = &ab[2 * p], *y1 = &ab[2 * p + 1];
                const __m512i st = pair_sums(u, y0->qs), su = pair_sums(u, y1->qs);
                const __m512i s =
                    _mm512_sub_epi32(fold_pairs(st, su), _mm512_inserti64x4(_mm512_set1_epi32(off_mul * y0->s8),
                                                                            _mm256_set1_epi32(off_mul * y1->s8), 1));
                const __m512 d = _mm512_insertf32x8(_mm512_set1_ps(y0->d), _mm256_set1_ps(y1->d), 1);
                av[p] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(dw2, d), av[p]);
            }
            if (nt & 1) {
                const kern_act8 *y0 = &ab[2 * np];
                const __m512i st = pair_sums(u, y0->qs);
                const __m256i s =
                    _mm256_sub_epi32(_mm512_castsi512_si256(fold_pairs(st, st)), _mm256_set1_epi32(off_mul * y0->s8));
                at = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_mul_ps(dw, _mm256_set1_ps(y0->d)), at);
            }
        }
#pragma GCC unroll 8
        for (int p = 0; p < PAIR_TOK / 2; p++)
            if (p < np) _mm512_storeu_ps(o + 16 * p, av[p]);
        if (nt & 1) _mm256_storeu_ps(o + 16 * np, at);
    }
}

static void x8_q4_0(int nb, const void *vw, const void *va, size_t lda, int n_tok, float *acc) {
    if (n_tok == 1) {
        x8_q4_0_1(nb, vw, va, lda, acc);
        return;
    }
    pair_batch(nb, vw, va, lda, n_tok, acc, 0);
}

/* One token (decode): the accumulator in a register, as x8_q4_0_1. */
static inline __attribute__((always_inline)) void x8_q8_0_1(int nb, const kern_q8_0x8 *w, const kern_act8 *a,
                                                            size_t lda, float *acc) {
    const __m512i idx[4] = {pair_idx(0, 1), pair_idx(2, 3), pair_idx(4, 5), pair_idx(6, 7)};
    __m256 sum = _mm256_loadu_ps(acc);
    for (int b = 0; b < nb; b++) {
        const kern_q8_0x8 *wb = &w[b];
        __m512i u[4];
        q8_0_unpack(wb, u);
        const kern_act8 *ab = a + (size_t)b * lda;
        const __m256i s = _mm256_sub_epi32(block_sums(u, idx, ab->qs), _mm256_set1_epi32(16 * ab->s8));
        const __m256 d = _mm256_mul_ps(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)wb->d)), _mm256_set1_ps(ab->d));
        sum = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), d, sum);
    }
    _mm256_storeu_ps(acc, sum);
}

static void x8_q8_0(int nb, const void *vw, const void *va, size_t lda, int n_tok, float *acc) {
    if (n_tok == 1) {
        x8_q8_0_1(nb, vw, va, lda, acc);
        return;
    }
    pair_batch(nb, vw, va, lda, n_tok, acc, 1);
}

/* The 8 rows' scales (one int32 per row lane) as int16 pairs (sc, sc) per
 * row lane, in both halves: dpwssd then multiplies both 16-bit sums of a
 * lane by the row's scale. */
static inline __m512i scale_pairs(__m256i v) {
    const __m256i d = _mm256_or_si256(_mm256_and_si256(v, _mm256_set1_epi32(0xFFFF)), _mm256_slli_epi32(v, 16));
    return _mm512_inserti64x4(_mm512_castsi256_si512(d), d, 1);
}

/* Q4_K x Q8_K.  Per super-block the 8 rows' nibbles become 32 zmm (w[16g +
 * 2m + h]: sub-block 2g + h, groups 2m and 2m + 1).  Per token and
 * sub-block: 4 maddubs summed in 16 bits (each lane half at most 4 * 2 * 15
 * * 127), one dpwssd with the row scales; the mins go through the
 * activation's 16-element sums as in the AVX2 twin.  Two fmas per block. */
/* One token (decode): per group of 64 g, each 64-byte load (groups 2m,
 * 2m + 1 of the 8 rows) gives its low nibbles to sub-block 2g and its high
 * ones to 2g + 1 straight into maddubs, summed in 16 bits over the 4 loads
 * (at most 4 * 2 * 15 * 128) and then into int32 with the scales: no
 * unpacked copy of the super-block, the accumulator in a register.  The
 * mins as in the AVX2 twin (pack_x86.h); integer sums are exact in any
 * order, so the same two fmas per block give the same bits. */
static inline __attribute__((always_inline)) void x8_q4_K_1(int nb, const kern_q4_Kx8 *w, const quant_block_q8_K *a,
                                                            size_t lda, float *acc) {
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    const __m512i idx[4] = {pair_idx(0, 1), pair_idx(2, 3), pair_idx(4, 5), pair_idx(6, 7)};
    __m256 sum = _mm256_loadu_ps(acc);
    for (int b = 0; b < nb; b++) {
        const kern_q4_Kx8 *wb = &w[b];
#pragma GCC unroll 32
        for (size_t o = 0; o < sizeof *wb; o += 64) _mm_prefetch((const char *)(wb + 2) + o, _MM_HINT_T0);
        const quant_block_q8_K *y = a + (size_t)b * lda;
        __m512i is = _mm512_setzero_si512();
#pragma GCC unroll 4
        for (int g = 0; g < 4; g++) {
            const __m512i y0 = _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(y->qs + 64 * g)));
            const __m512i y1 = _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(y->qs + 64 * g + 32)));
            __m512i l = _mm512_setzero_si512(), h = l;
#pragma GCC unroll 4
            for (int m = 0; m < 4; m++) {
                const __m512i p = _mm512_loadu_si512(wb->qs + 32 * (8 * g + 2 * m));
                l = _mm512_add_epi16(
                    l, _mm512_maddubs_epi16(_mm512_and_si512(p, m4), _mm512_permutexvar_epi32(idx[m], y0)));
                h = _mm512_add_epi16(h, _mm512_maddubs_epi16(_mm512_and_si512(_mm512_srli_epi16(p, 4), m4),
                                                             _mm512_permutexvar_epi32(idx[m], y1)));
            }
            is = _mm512_dpwssd_epi32(
                is, l, scale_pairs(_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(wb->sc + 16 * g)))));
            is = _mm512_dpwssd_epi32(
                is, h, scale_pairs(_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(wb->sc + 16 * g + 8)))));
        }
        const __m256i ms = q4_K_mins(wb->mn, y->bsums);
        const __m256 yd = _mm256_set1_ps(y->d);
        const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)wb->d));
        const __m256 dm = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)wb->dmin));
        sum = _mm256_fmadd_ps(_mm256_cvtepi32_ps(fold(is)), _mm256_mul_ps(dw, yd), sum);
        sum = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(ms), _mm256_mul_ps(dm, yd), sum);
    }
    _mm256_storeu_ps(acc, sum);
}

/* Many tokens (prompt), Q4_K: per block, the 32 nibble vectors are split
 * once with their lanes interleaved as in pair_batch (row i's groups 2m,
 * 2m + 1 in lanes 2i, 2i + 1) and kept on the stack (2 KB, L1), with the
 * sub-blocks' scales as int16 pairs in the same lanes and the mins as
 * pairs per row lane, doubled for two tokens.  Per pair of tokens: each
 * weight vector is loaded once for both, each token's 8 activation bytes
 * are a vpbroadcastq; 4 maddubs a sub-block summed in 16 bits, dpwssd with
 * the scales; the lane pairs fold into [rows of t | rows of t + 1]; the
 * mins through the 32-element sums, one vpermd and dpwssd per sub-block
 * pair for both tokens; both fmas of the scalar twin, in its order. */
static const int8_t q4_K_sc_ilv[128] = {
#define Z (-128)
#define SC2(r) (r), Z, (r), Z, (r), Z, (r), Z
    SC2(0), SC2(1), SC2(2),  SC2(3),  SC2(4),  SC2(5),  SC2(6),  SC2(7),
    SC2(8), SC2(9), SC2(10), SC2(11), SC2(12), SC2(13), SC2(14), SC2(15),
#undef SC2
#undef Z
};

/* the 32-element sums of sub-blocks (2p, 2p + 1) of tokens t (lanes 0..7)
 * and u (8..15), from the tokens' 16-element sums */
static inline void q4_K_bsum_pairs2(const int16_t *bt, const int16_t *bu, __m512i bp[4]) {
    const __m512i x = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)bt)),
                                         _mm256_loadu_si256((const __m256i *)bu), 1);
    const __m512i s32 = _mm512_madd_epi16(x, _mm512_set1_epi16(1));
    /* per 128-bit lane L: dwords 0, 1 = pairs (4 (L & 1) + 0, 1), (2, 3) of token L / 2 */
    const __m512i pk = _mm512_packs_epi32(s32, s32);
    static const int lo[4] = {0, 1, 4, 5};
    for (int p = 0; p < 4; p++) bp[p] = _mm512_permutexvar_epi32(pair_idx(lo[p], 8 + lo[p]), pk);
}

static void x8_q4_K(int nb, const void *vw, const void *va, size_t lda, int n_tok, float *acc) {
    const kern_q4_Kx8 *w = vw;
    const quant_block_q8_K *a = va;
    if (n_tok == 1) {
        x8_q4_K_1(nb, w, a, lda, acc);
        return;
    }
    const __m512i m4 = _mm512_set1_epi8(0x0F), ilv = _mm512_loadu_si512(ilv_idx);
    const __m512i sl = _mm512_loadu_si512(q4_K_sc_ilv), sh = _mm512_loadu_si512(q4_K_sc_ilv + 64);
    __m512i q[32], dsc[8], mnp[4];
    for (int b = 0; b < nb; b++) {
        const kern_q4_Kx8 *wb = &w[b];
#pragma GCC unroll 32
        for (size_t o = 0; o < sizeof *wb; o += 64) _mm_prefetch((const char *)(wb + 2) + o, _MM_HINT_T0);
        for (int g = 0; g < 4; g++) {
            for (int m = 0; m < 4; m++) {
                const __m512i p = _mm512_loadu_si512(wb->qs + 32 * (8 * g + 2 * m));
                q[8 * g + m] = _mm512_permutexvar_epi32(ilv, _mm512_and_si512(p, m4));
                q[8 * g + 4 + m] = _mm512_permutexvar_epi32(ilv, _mm512_and_si512(_mm512_srli_epi16(p, 4), m4));
            }
            const __m512i sc = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)(wb->sc + 16 * g)));
            dsc[2 * g] = _mm512_shuffle_epi8(sc, sl);
            dsc[2 * g + 1] = _mm512_shuffle_epi8(sc, sh);
        }
        __m256i mn4[4];
        q4_K_min_pairs(wb->mn, mn4);
        for (int p = 0; p < 4; p++) mnp[p] = _mm512_inserti64x4(_mm512_castsi256_si512(mn4[p]), mn4[p], 1);
        const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)wb->d));
        const __m256 dm = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)wb->dmin));
        const __m512 dw2 = _mm512_insertf32x8(_mm512_castps256_ps512(dw), dw, 1);
        const __m512 dm2 = _mm512_insertf32x8(_mm512_castps256_ps512(dm), dm, 1);
        const quant_block_q8_K *ab = a + (size_t)b * lda;
        for (int t = 0; t < n_tok; t += 2) {
            const int two = t + 1 < n_tok;
            const quant_block_q8_K *yt = &ab[t], *yu = &ab[t + two];
            __m512i it = _mm512_setzero_si512(), iu = it;
#pragma GCC unroll 8
            for (int sb = 0; sb < 8; sb++) {
                const int8_t *ct = yt->qs + 32 * sb, *cu = yu->qs + 32 * sb;
                const __m512i *qq = q + 8 * (sb / 2) + 4 * (sb % 2);
                __m512i lt = _mm512_maddubs_epi16(qq[0], bcast8(ct)), lu = _mm512_maddubs_epi16(qq[0], bcast8(cu));
#pragma GCC unroll 3
                for (int m = 1; m < 4; m++) {
                    lt = _mm512_add_epi16(lt, _mm512_maddubs_epi16(qq[m], bcast8(ct + 8 * m)));
                    lu = _mm512_add_epi16(lu, _mm512_maddubs_epi16(qq[m], bcast8(cu + 8 * m)));
                }
                it = _mm512_dpwssd_epi32(it, lt, dsc[sb]);
                iu = _mm512_dpwssd_epi32(iu, lu, dsc[sb]);
            }
            __m512i bp[4];
            q4_K_bsum_pairs2(yt->bsums, yu->bsums, bp);
            __m512i ms = _mm512_setzero_si512();
            for (int p = 0; p < 4; p++) ms = _mm512_dpwssd_epi32(ms, mnp[p], bp[p]);
            const __m512 yd = _mm512_insertf32x8(_mm512_set1_ps(yt->d), _mm256_set1_ps(yu->d), 1);
            float *o = acc + 8 * t;
            const __m512 prev = two ? _mm512_loadu_ps(o) : _mm512_castps256_ps512(_mm256_loadu_ps(o));
            __m512 r = _mm512_fmadd_ps(_mm512_cvtepi32_ps(fold_pairs(it, iu)), _mm512_mul_ps(dw2, yd), prev);
            r = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(ms), _mm512_mul_ps(dm2, yd), r);
            if (two)
                _mm512_storeu_ps(o, r);
            else
                _mm256_storeu_ps(o, _mm512_castps512_ps256(r));
        }
    }
}

/* The four 6-bit vectors of half h, groups 2m and 2m + 1 of a packed
 * Q6_K block: q[r] is 32-weight chunk 4h + r, from the low or high nibbles
 * of ql (blocks A, B) and two bits of qh. */
static inline __attribute__((always_inline)) void q6_K_split(const kern_q6_Kx8 *wb, int h, int m, __m512i q[4]) {
    const __m512i m4 = _mm512_set1_epi8(0x0F), m30 = _mm512_set1_epi8(0x30);
    const __m512i A = _mm512_loadu_si512(wb->ql + 32 * (16 * h + 2 * m));
    const __m512i B = _mm512_loadu_si512(wb->ql + 32 * (16 * h + 8 + 2 * m));
    const __m512i H = _mm512_loadu_si512(wb->qh + 32 * (8 * h + 2 * m));
    q[0] = _mm512_or_si512(_mm512_and_si512(A, m4), _mm512_and_si512(_mm512_slli_epi16(H, 4), m30));
    q[1] = _mm512_or_si512(_mm512_and_si512(B, m4), _mm512_and_si512(_mm512_slli_epi16(H, 2), m30));
    q[2] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(A, 4), m4), _mm512_and_si512(H, m30));
    q[3] =
        _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(B, 4), m4), _mm512_and_si512(_mm512_srli_epi16(H, 2), m30));
}

/* Q6_K x Q8_K.  Per super-block the 8 rows' 6-bit values (0..63) become 32
 * zmm (q[4 hr + m]: 32-weight chunk hr, groups 2m and 2m + 1); per token and
 * chunk two 16-bit sums (sub-blocks 2hr and 2hr + 1, each lane half at most
 * 2 * 2 * 63 * 127) go through dpwssd with their scales; the -32 offset is
 * 32 * sum_s sc_s * bsum_s, as in the AVX2 twin; one fma per block. */
/* One token (decode): per half h and sub-block pair s, the loads of ql
 * (blocks A and B) and qh for groups 2m, 2m + 1 (m = 2s, 2s + 1) give the
 * four 32-weight chunks r of half h; their maddubs with the chunk's
 * activations sum in 16 bits over the two m (sub-block 2(4h + r) + s, at
 * most 2 * 2 * 63 * 128) and go into int32 with that sub-block's scales.
 * No unpacked copy of the super-block, the accumulator in a register; the
 * -32 offset as in the AVX2 twin (pack_x86.h), the same fma per block. */
static inline __attribute__((always_inline)) void x8_q6_K_1(int nb, const kern_q6_Kx8 *w, const quant_block_q8_K *a,
                                                            size_t lda, float *acc) {
    const __m512i idx[4] = {pair_idx(0, 1), pair_idx(2, 3), pair_idx(4, 5), pair_idx(6, 7)};
    __m256 sum = _mm256_loadu_ps(acc);
    for (int b = 0; b < nb; b++) {
        const kern_q6_Kx8 *wb = &w[b];
#pragma GCC unroll 32
        for (size_t o = 0; o < sizeof *wb; o += 64) _mm_prefetch((const char *)(wb + 2) + o, _MM_HINT_T0);
        const quant_block_q8_K *y = a + (size_t)b * lda;
        __m512i is = _mm512_setzero_si512();
#pragma GCC unroll 2
        for (int h = 0; h < 2; h++) {
            __m512i yv[4];
            for (int r = 0; r < 4; r++)
                yv[r] = _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(y->qs + 32 * (4 * h + r))));
#pragma GCC unroll 2
            for (int s = 0; s < 2; s++) {
                __m512i p[4] = {_mm512_setzero_si512(), _mm512_setzero_si512(), _mm512_setzero_si512(),
                                _mm512_setzero_si512()};
#pragma GCC unroll 2
                for (int m = 2 * s; m < 2 * s + 2; m++) {
                    __m512i q[4];
                    q6_K_split(wb, h, m, q);
#pragma GCC unroll 4
                    for (int r = 0; r < 4; r++)
                        p[r] =
                            _mm512_add_epi16(p[r], _mm512_maddubs_epi16(q[r], _mm512_permutexvar_epi32(idx[m], yv[r])));
                }
#pragma GCC unroll 4
                for (int r = 0; r < 4; r++) {
                    const int sb = 2 * (4 * h + r) + s;
                    is = _mm512_dpwssd_epi32(
                        is, p[r],
                        scale_pairs(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(wb->sc + 8 * sb)))));
                }
            }
        }
        __m256i dsc[16], osc[8];
        q6_K_scale_pairs(wb->sc, dsc, osc);
        const __m256i isum = _mm256_sub_epi32(fold(is), q6_K_offset(osc, y->bsums));
        const __m256 d = _mm256_mul_ps(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)wb->d)), _mm256_set1_ps(y->d));
        sum = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), d, sum);
    }
    _mm256_storeu_ps(acc, sum);
}

/* A few tokens (2 to 5): the 6-bit values split once per block without
 * the interleave, the activations permuted per token; below 6 tokens the
 * interleave and scale set-up of the kernel after it cost more than they
 * save (0.85-0.93x at 2-5 tokens, hot in L2). */
static void x8_q6_K_few(int nb, const kern_q6_Kx8 *w, const quant_block_q8_K *a, size_t lda, int n_tok, float *acc) {
    const __m512i m4 = _mm512_set1_epi8(0x0F), m30 = _mm512_set1_epi8(0x30);
    const __m256i lo16 = _mm256_set1_epi32(0xFFFF);
    const __m512i idx[4] = {pair_idx(0, 1), pair_idx(2, 3), pair_idx(4, 5), pair_idx(6, 7)};
    __m512i q[32], dsc[16];
    __m256i osc[8];
    for (int b = 0; b < nb; b++) {
        const kern_q6_Kx8 *wb = &w[b];
#pragma GCC unroll 32
        for (size_t o = 0; o < sizeof *wb; o += 64) _mm_prefetch((const char *)(wb + 2) + o, _MM_HINT_T0);
        for (int h = 0; h < 2; h++)
            for (int m = 0; m < 4; m++) { /* groups kk = 2m, 2m + 1 */
                const __m512i A = _mm512_loadu_si512(wb->ql + 32 * (16 * h + 2 * m));
                const __m512i B = _mm512_loadu_si512(wb->ql + 32 * (16 * h + 8 + 2 * m));
                const __m512i H = _mm512_loadu_si512(wb->qh + 32 * (8 * h + 2 * m));
                __m512i *qq = q + 16 * h + m; /* chunk hr = 4h + r at qq[4r] */
                qq[0] = _mm512_or_si512(_mm512_and_si512(A, m4), _mm512_and_si512(_mm512_slli_epi16(H, 4), m30));
                qq[4] = _mm512_or_si512(_mm512_and_si512(B, m4), _mm512_and_si512(_mm512_slli_epi16(H, 2), m30));
                qq[8] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(A, 4), m4), _mm512_and_si512(H, m30));
                qq[12] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(B, 4), m4),
                                         _mm512_and_si512(_mm512_srli_epi16(H, 2), m30));
            }
        __m256i sv[16];
        for (int sb = 0; sb < 16; sb++) {
            sv[sb] = _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(wb->sc + 8 * sb)));
            dsc[sb] = scale_pairs(sv[sb]);
        }
        for (int p = 0; p < 8; p++)
            osc[p] = _mm256_or_si256(_mm256_and_si256(sv[2 * p], lo16), _mm256_slli_epi32(sv[2 * p + 1], 16));
        const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)wb->d));
        const quant_block_q8_K *ab = a + (size_t)b * lda;
        for (int t = 0; t < n_tok; t++) {
            const quant_block_q8_K *y = &ab[t];
            __m512i is = _mm512_setzero_si512();
            for (int hr = 0; hr < 8; hr++) {
                const __m512i yv = _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(y->qs + 32 * hr)));
                const __m512i *qq = q + 4 * hr;
                const __m512i p0 = _mm512_add_epi16(_mm512_maddubs_epi16(qq[0], _mm512_permutexvar_epi32(idx[0], yv)),
                                                    _mm512_maddubs_epi16(qq[1], _mm512_permutexvar_epi32(idx[1], yv)));
                const __m512i p1 = _mm512_add_epi16(_mm512_maddubs_epi16(qq[2], _mm512_permutexvar_epi32(idx[2], yv)),
                                                    _mm512_maddubs_epi16(qq[3], _mm512_permutexvar_epi32(idx[3], yv)));
                is = _mm512_dpwssd_epi32(is, p0, dsc[2 * hr]);
                is = _mm512_dpwssd_epi32(is, p1, dsc[2 * hr + 1]);
            }
            __m256i off = _mm256_setzero_si256();
            for (int p = 0; p < 8; p++) {
                int32_t bs;
                memcpy(&bs, y->bsums + 2 * p, 4);
                off = _mm256_add_epi32(off, _mm256_madd_epi16(osc[p], _mm256_set1_epi32(bs)));
            }
            const __m256i isum = _mm256_sub_epi32(fold(is), _mm256_slli_epi32(off, 5));
            const __m256 d = _mm256_mul_ps(dw, _mm256_set1_ps(y->d));
            float *o = acc + 8 * t;
            _mm256_storeu_ps(o, _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), d, _mm256_loadu_ps(o)));
        }
    }
}

/* Many tokens (prompt), Q6_K, as x8_q4_K: the 32 6-bit vectors split and
 * interleaved once per block (on the stack) with the signed scales as
 * int16 pairs in the same lanes; two tokens a pass, each weight vector
 * loaded once for both, each token's 8 bytes a vpbroadcastq; the -32
 * offset 32 * sum_s sc_s * bsum_s of both tokens from the scale pairs
 * (sc_2p, sc_2p+1) per row lane and one vpermd of their 16-element sums
 * per pair.  Same integers, same fma: same bits as the scalar twin. */
static const int8_t q6_K_sc_ilv[128] = {
#define Z (-128)
#define SC2(r) Z, (r), Z, (r), Z, (r), Z, (r)
    SC2(0), SC2(1), SC2(2),  SC2(3),  SC2(4),  SC2(5),  SC2(6),  SC2(7),
    SC2(8), SC2(9), SC2(10), SC2(11), SC2(12), SC2(13), SC2(14), SC2(15),
#undef SC2
#undef Z
};

static void x8_q6_K(int nb, const void *vw, const void *va, size_t lda, int n_tok, float *acc) {
    const kern_q6_Kx8 *w = vw;
    const quant_block_q8_K *a = va;
    if (n_tok == 1) {
        x8_q6_K_1(nb, w, a, lda, acc);
        return;
    }
    if (n_tok < 6) {
        x8_q6_K_few(nb, w, a, lda, n_tok, acc);
        return;
    }
    const __m512i ilv = _mm512_loadu_si512(ilv_idx);
    const __m512i sl = _mm512_loadu_si512(q6_K_sc_ilv), sh = _mm512_loadu_si512(q6_K_sc_ilv + 64);
    __m512i q[32], dsc[16], osc[8];
    for (int b = 0; b < nb; b++) {
        const kern_q6_Kx8 *wb = &w[b];
#pragma GCC unroll 32
        for (size_t o = 0; o < sizeof *wb; o += 64) _mm_prefetch((const char *)(wb + 2) + o, _MM_HINT_T0);
        for (int h = 0; h < 2; h++)
            for (int m = 0; m < 4; m++) {     /* groups 2m, 2m + 1 of chunks 4h .. 4h + 3 */
                __m512i *qq = q + 16 * h + m; /* chunk hr = 4h + r at qq[4r] */
                __m512i v[4];
                q6_K_split(wb, h, m, v);
                for (int r = 0; r < 4; r++) qq[4 * r] = _mm512_permutexvar_epi32(ilv, v[r]);
            }
        for (int k = 0; k < 8; k++) {
            const __m512i sc = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)(wb->sc + 16 * k)));
            dsc[2 * k] = _mm512_srai_epi16(_mm512_shuffle_epi8(sc, sl), 8);
            dsc[2 * k + 1] = _mm512_srai_epi16(_mm512_shuffle_epi8(sc, sh), 8);
        }
        {
            __m256i o8[8];
            q6_K_offset_pairs(wb->sc, o8);
            for (int p = 0; p < 8; p++) osc[p] = _mm512_inserti64x4(_mm512_castsi256_si512(o8[p]), o8[p], 1);
        }
        const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)wb->d));
        const __m512 dw2 = _mm512_insertf32x8(_mm512_castps256_ps512(dw), dw, 1);
        const quant_block_q8_K *ab = a + (size_t)b * lda;
        for (int t = 0; t < n_tok; t += 2) {
            const int two = t + 1 < n_tok;
            const quant_block_q8_K *yt = &ab[t], *yu = &ab[t + two];
            __m512i it = _mm512_setzero_si512(), iu = it;
#pragma GCC unroll 8
            for (int hr = 0; hr < 8; hr++) {
                const int8_t *ct = yt->qs + 32 * hr, *cu = yu->qs + 32 * hr;
                const __m512i *qq = q + 4 * hr;
                const __m512i t0 = _mm512_add_epi16(_mm512_maddubs_epi16(qq[0], bcast8(ct)),
                                                    _mm512_maddubs_epi16(qq[1], bcast8(ct + 8)));
                const __m512i u0 = _mm512_add_epi16(_mm512_maddubs_epi16(qq[0], bcast8(cu)),
                                                    _mm512_maddubs_epi16(qq[1], bcast8(cu + 8)));
                const __m512i t1 = _mm512_add_epi16(_mm512_maddubs_epi16(qq[2], bcast8(ct + 16)),
                                                    _mm512_maddubs_epi16(qq[3], bcast8(ct + 24)));
                const __m512i u1 = _mm512_add_epi16(_mm512_maddubs_epi16(qq[2], bcast8(cu + 16)),
                                                    _mm512_maddubs_epi16(qq[3], bcast8(cu + 24)));
                it = _mm512_dpwssd_epi32(_mm512_dpwssd_epi32(it, t0, dsc[2 * hr]), t1, dsc[2 * hr + 1]);
                iu = _mm512_dpwssd_epi32(_mm512_dpwssd_epi32(iu, u0, dsc[2 * hr]), u1, dsc[2 * hr + 1]);
            }
            /* both tokens' 16-element sums: t's pair p in dword p, u's in 8 + p */
            const __m512i bs =
                _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)yt->bsums)),
                                   _mm256_loadu_si256((const __m256i *)yu->bsums), 1);
            __m512i off = _mm512_setzero_si512();
#pragma GCC unroll 8
            for (int p = 0; p < 8; p++)
                off = _mm512_dpwssd_epi32(off, osc[p], _mm512_permutexvar_epi32(pair_idx(p, 8 + p), bs));
            const __m512i isum = _mm512_sub_epi32(fold_pairs(it, iu), _mm512_slli_epi32(off, 5));
            const __m512 yd = _mm512_insertf32x8(_mm512_set1_ps(yt->d), _mm256_set1_ps(yu->d), 1);
            float *o = acc + 8 * t;
            const __m512 prev = two ? _mm512_loadu_ps(o) : _mm512_castps256_ps512(_mm256_loadu_ps(o));
            const __m512 r = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_mul_ps(dw2, yd), prev);
            if (two)
                _mm512_storeu_ps(o, r);
            else
                _mm256_storeu_ps(o, _mm512_castps512_ps256(r));
        }
    }
}

/* A kern_x8_dec_fn NAME whose per-block token terms (TOK, set by TOK_SET from
 * the activation block) are worked out CHUNK blocks at a time for all ng
 * groups, BLOCK(wb, tok, sum) adding one packed block of weight type WT
 * into a group's 8 sums; the groups' partial sums wait in y between
 * chunks, so each group's blocks still go in order. */
#define KERN_DEC_CHUNKED(NAME, WT, AT, TOK, CHUNK, TOK_SET, BLOCK)                           \
    static void NAME(int ng, int nb, const void *vw, const void *va, size_t lda, float *y) { \
        const WT *w = vw;                                                                    \
        const AT *a = va;                                                                    \
        TOK tok[CHUNK];                                                                      \
        for (int b0 = 0; b0 < nb; b0 += CHUNK) {                                             \
            const int n = nb - b0 < CHUNK ? nb - b0 : CHUNK;                                 \
            for (int b = 0; b < n; b++) TOK_SET(a + (size_t)(b0 + b) * lda, &tok[b]);        \
            for (int g = 0; g < ng; g++) {                                                   \
                __m256 sum = b0 ? _mm256_loadu_ps(y + 8 * g) : _mm256_setzero_ps();          \
                const WT *wg = w + (size_t)g * (size_t)nb + b0;                              \
                for (int b = 0; b < n; b++) sum = BLOCK(&wg[b], &tok[b], sum);               \
                _mm256_storeu_ps(y + 8 * g, sum);                                            \
            }                                                                                \
        }                                                                                    \
    }

/* One token over ng groups, Q8_0 two groups a pass: each block's
 * 16-lane sums of the two groups (row i in lanes i and 8 + i) fold into one
 * zmm (group g's rows in lanes 8g .. 8g + 7), so the zero-point term, the
 * scales, the conversion and the fma run once for 16 rows; the two groups'
 * F16 scales convert in one step.  An odd last group goes alone.  The
 * integer sums are exact and each row's float steps are those of
 * x8_*_1 (one fma per block, in block order), so the same bits. */
static const int32_t fold_lo_idx[16] = {0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23};
static const int32_t fold_hi_idx[16] = {8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31};

/* lanes 0..7: s0's lane i + lane 8 + i; lanes 8..15: the same of s1 */
static inline __m512i fold2(__m512i s0, __m512i s1, __m512i lo, __m512i hi) {
    return _mm512_add_epi32(_mm512_permutex2var_epi32(s0, lo, s1), _mm512_permutex2var_epi32(s0, hi, s1));
}

/* the 8 F16 row scales of two groups, as floats in lanes 0..7 and 8..15 */
static inline __m512 scales2(const uint16_t *d0, const uint16_t *d1) {
    const __m256i h = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)d0)),
                                              _mm_loadu_si128((const __m128i *)d1), 1);
    return _mm512_cvtph_ps(h);
}

/* Q4_0, one group a pass: the block's four vpermd of the
 * activation, its zero-point term and scale once per block for all the
 * groups (ACT8_CHUNK blocks at a time, 320 bytes each), the groups' sums
 * carried in y between chunks; the same integers and fmas in the same
 * order as x8_q4_0_1, so the same bits. */
#define ACT8_CHUNK 32
typedef struct act8_tok {
    __m512i yv[4];
    __m256i off;
    __m256 d;
} act8_tok;

static inline void act8_tok_set(const kern_act8 *ab, act8_tok *t) {
    const __m512i idx[4] = {pair_idx(0, 1), pair_idx(2, 3), pair_idx(4, 5), pair_idx(6, 7)};
    const __m512i y = _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)ab->qs));
    for (int m = 0; m < 4; m++) t->yv[m] = _mm512_permutexvar_epi32(idx[m], y);
    t->off = _mm256_set1_epi32(ab->s8);
    t->d = _mm256_set1_ps(ab->d);
}

static inline __attribute__((always_inline)) __m256 q4_0_dec_block(const kern_q4_0x8 *wb, const act8_tok *t,
                                                                   __m256 sum) {
    __m512i u[4];
    q4_0_unpack(wb, u);
    __m512i s0 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), u[0], t->yv[0]);
    __m512i s1 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), u[1], t->yv[1]);
    s0 = _mm512_dpbusd_epi32(s0, u[2], t->yv[2]);
    s1 = _mm512_dpbusd_epi32(s1, u[3], t->yv[3]);
    const __m256i is = _mm256_sub_epi32(fold(_mm512_add_epi32(s0, s1)), t->off);
    const __m256 d = _mm256_mul_ps(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)wb->d)), t->d);
    return _mm256_fmadd_ps(_mm256_cvtepi32_ps(is), d, sum);
}

KERN_DEC_CHUNKED(dec_q4_0, kern_q4_0x8, kern_act8, act8_tok, ACT8_CHUNK, act8_tok_set, q4_0_dec_block)

/* Q8_0 takes Q8_DEC_NP pairs of groups a pass: the activation's four
 * vpermd stay in registers, once per block for the pass (hoisted to the
 * stack for all groups, as Q4_0's, they were slower: 0.86x hot in L2 on a
 * Xeon).  A group's four vpdpbusd are one chain that starts from the
 * zero-point term (-16 s8 in lanes 0..7, zero in 8..15, so fold2 takes it
 * off each row once). */
#define Q8_DEC_NP 2
static inline __attribute__((always_inline)) __m512i q8_0_sums(const kern_q8_0x8 *wb, const __m512i yv[4],
                                                               __m512i init) {
    __m512i u[4];
    q8_0_unpack(wb, u);
    __m512i s = _mm512_dpbusd_epi32(init, u[0], yv[0]);
    s = _mm512_dpbusd_epi32(s, u[1], yv[1]);
    s = _mm512_dpbusd_epi32(s, u[2], yv[2]);
    return _mm512_dpbusd_epi32(s, u[3], yv[3]);
}

/* NP pairs of groups (group g at w + g * nb), one sum vector a pair */
static inline __attribute__((always_inline)) void q8_0_dec_n(int nb, const kern_q8_0x8 *w, const int NP,
                                                             const kern_act8 *a, size_t lda, float *y) {
    const __m512i idx[4] = {pair_idx(0, 1), pair_idx(2, 3), pair_idx(4, 5), pair_idx(6, 7)};
    const __m512i flo = _mm512_loadu_si512(fold_lo_idx), fhi = _mm512_loadu_si512(fold_hi_idx);
    __m512 sum[Q8_DEC_NP];
#pragma GCC unroll 2
    for (int p = 0; p < NP; p++) sum[p] = _mm512_setzero_ps();
    for (int b = 0; b < nb; b++) {
        const kern_act8 *ab = a + (size_t)b * lda;
        const __m512i yq = _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)ab->qs));
        __m512i yv[4];
#pragma GCC unroll 4
        for (int m = 0; m < 4; m++) yv[m] = _mm512_permutexvar_epi32(idx[m], yq);
        const __m512i init = _mm512_zextsi256_si512(_mm256_set1_epi32(-16 * ab->s8));
        const __m512 yd = _mm512_set1_ps(ab->d);
#pragma GCC unroll 2
        for (int p = 0; p < NP; p++) {
            const kern_q8_0x8 *w0 = w + (size_t)(2 * p) * (size_t)nb + b, *w1 = w0 + nb;
            const __m512i is = fold2(q8_0_sums(w0, yv, init), q8_0_sums(w1, yv, init), flo, fhi);
            const __m512 d = _mm512_mul_ps(scales2(w0->d, w1->d), yd);
            sum[p] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(is), d, sum[p]);
        }
    }
#pragma GCC unroll 2
    for (int p = 0; p < NP; p++) _mm512_storeu_ps(y + 16 * p, sum[p]);
}

static void dec_q8_0(int ng, int nb, const void *vw, const void *va, size_t lda, float *y) {
    const kern_q8_0x8 *w = vw;
    int g = 0;
    for (; g + 2 * Q8_DEC_NP <= ng; g += 2 * Q8_DEC_NP)
        q8_0_dec_n(nb, w + (size_t)g * (size_t)nb, Q8_DEC_NP, va, lda, y + 8 * g);
    for (; g + 2 <= ng; g += 2) q8_0_dec_n(nb, w + (size_t)g * (size_t)nb, 1, va, lda, y + 8 * g);
    if (g < ng) {
        _mm256_storeu_ps(y + 8 * g, _mm256_setzero_ps());
        x8_q8_0_1(nb, w + (size_t)g * (size_t)nb, va, lda, y + 8 * g);
    }
}

/* One token over ng groups, Q4_K: the token's share of x8_q4_K_1 (the 32
 * dword-broadcast activation vectors of a block, the 16-element sums' pair
 * broadcasts for the mins, the scale) is worked out once per block for all
 * the groups instead of once per group and block: the per-group loop is
 * then loads, nibble masks, maddubs and the scale steps, with no vpermd
 * (port 5 on Intel).  DEC_CHUNK blocks at a time (2.2 KB each, on the
 * stack), the groups' partial sums carried in y between chunks: the same
 * fmas in the same block order, so the same bits as x8_q4_K_1. */
#define DEC_CHUNK 8
typedef struct q4_K_tok {
    __m512i yv[32]; /* [8g + m] low nibbles of group g, [8g + 4 + m] high */
    __m256i bsp[4]; /* the sub-block pairs' 32-element sums, per row lane */
    __m256 yd;
} q4_K_tok;

static inline void q4_K_tok_set(const quant_block_q8_K *y, q4_K_tok *t) {
    const __m512i idx[4] = {pair_idx(0, 1), pair_idx(2, 3), pair_idx(4, 5), pair_idx(6, 7)};
    for (int g = 0; g < 4; g++) {
        const __m512i y0 = _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(y->qs + 64 * g)));
        const __m512i y1 = _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(y->qs + 64 * g + 32)));
        for (int m = 0; m < 4; m++) {
            t->yv[8 * g + m] = _mm512_permutexvar_epi32(idx[m], y0);
            t->yv[8 * g + 4 + m] = _mm512_permutexvar_epi32(idx[m], y1);
        }
    }
    q4_K_bsum_pairs(y->bsums, t->bsp);
    t->yd = _mm256_set1_ps(y->d);
}

/* vpshufb controls over a 16-byte broadcast of a packed block's bytes
 * (-128: a zero byte).  q4_K_sc_sh: the scales of the sub-block at bytes
 * 0..7 (rows 0..7) as int16 pairs (sc, sc) in row lanes i and 8 + i, then
 * the same for bytes 8..15. */
#define Z (-128)
#define SC4(r) (r), Z, (r), Z
#define SC16(r) SC4(r), SC4(r + 1), SC4(r + 2), SC4(r + 3)
static const int8_t q4_K_sc_sh[128] = {SC16(0), SC16(4), SC16(0), SC16(4), SC16(8), SC16(12), SC16(8), SC16(12)};
#undef SC16
#undef SC4
#undef Z

static inline __attribute__((always_inline)) __m256 q4_K_dec_block(const kern_q4_Kx8 *wb, const q4_K_tok *t,
                                                                   __m256 sum) {
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    const __m512i sc_lo = _mm512_loadu_si512(q4_K_sc_sh), sc_hi = _mm512_loadu_si512(q4_K_sc_sh + 64);
#pragma GCC unroll 32
    for (size_t o = 0; o < sizeof *wb; o += 64) _mm_prefetch((const char *)(wb + 2) + o, _MM_HINT_T0);
    __m512i is = _mm512_setzero_si512();
#pragma GCC unroll 4
    for (int gg = 0; gg < 4; gg++) {
        __m512i l = _mm512_setzero_si512(), h = l;
#pragma GCC unroll 4
        for (int m = 0; m < 4; m++) {
            const __m512i p = _mm512_loadu_si512(wb->qs + 32 * (8 * gg + 2 * m));
            l = _mm512_add_epi16(l, _mm512_maddubs_epi16(_mm512_and_si512(p, m4), t->yv[8 * gg + m]));
            h = _mm512_add_epi16(
                h, _mm512_maddubs_epi16(_mm512_and_si512(_mm512_srli_epi16(p, 4), m4), t->yv[8 * gg + 4 + m]));
        }
        const __m512i sc = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)(wb->sc + 16 * gg)));
        is = _mm512_dpwssd_epi32(is, l, _mm512_shuffle_epi8(sc, sc_lo));
        is = _mm512_dpwssd_epi32(is, h, _mm512_shuffle_epi8(sc, sc_hi));
    }
    __m256i mnp[4];
    q4_K_min_pairs(wb->mn, mnp);
    const __m256i ms = q4_K_mins_bp(mnp, t->bsp);
    const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)wb->d));
    const __m256 dm = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)wb->dmin));
    sum = _mm256_fmadd_ps(_mm256_cvtepi32_ps(fold(is)), _mm256_mul_ps(dw, t->yd), sum);
    sum = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(ms), _mm256_mul_ps(dm, t->yd), sum);
    return sum;
}

KERN_DEC_CHUNKED(dec_q4_K, kern_q4_Kx8, quant_block_q8_K, q4_K_tok, DEC_CHUNK, q4_K_tok_set, q4_K_dec_block)

/* One token over ng groups, Q6_K, as dec_q4_K: per block once for all
 * the groups, the 32 dword-broadcast activation vectors (yv[16h + 4m + r]:
 * chunk 4h + r for groups 2m, 2m + 1) and the -32 offset as 16-bit sums
 * c[8h + 4s + r] = 32 * (the maddubs sums of yv over m = 2s, 2s + 1), taken
 * off the weights' sums before the scales (each |.| <= 4 * 32 * 128, so
 * exact in int16).  The signed scales come from one 16-byte broadcast per
 * pair of sub-blocks, moved to the high byte of each int16 and shifted
 * down.  The block's integer sum is the scalar twin's, so the same bits. */
typedef struct q6_K_tok {
    __m512i yv[32];
    __m512i c[16];
    __m256 yd;
} q6_K_tok;

static inline void q6_K_tok_set(const quant_block_q8_K *y, q6_K_tok *t) {
    const __m512i idx[4] = {pair_idx(0, 1), pair_idx(2, 3), pair_idx(4, 5), pair_idx(6, 7)};
    const __m512i k32 = _mm512_set1_epi8(32);
    for (int h = 0; h < 2; h++)
        for (int r = 0; r < 4; r++) {
            const __m512i v = _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(y->qs + 32 * (4 * h + r))));
            for (int m = 0; m < 4; m++) t->yv[16 * h + 4 * m + r] = _mm512_permutexvar_epi32(idx[m], v);
            for (int s = 0; s < 2; s++)
                t->c[8 * h + 4 * s + r] = _mm512_add_epi16(_mm512_maddubs_epi16(k32, t->yv[16 * h + 8 * s + r]),
                                                           _mm512_maddubs_epi16(k32, t->yv[16 * h + 8 * s + 4 + r]));
        }
    t->yd = _mm256_set1_ps(y->d);
}

/* vpshufb controls: the signed scales of the sub-block at bytes 0..7 of a
 * 16-byte broadcast into the high byte of both int16 halves of row lanes i
 * and 8 + i (then >> 8 with sign), and of the one at bytes 8..15. */
#define Z (-128)
#define SC4(r) Z, (r), Z, (r)
#define SC16(r) SC4(r), SC4(r + 1), SC4(r + 2), SC4(r + 3)
static const int8_t q6_K_sc_sh[128] = {SC16(0), SC16(4), SC16(0), SC16(4), SC16(8), SC16(12), SC16(8), SC16(12)};
#undef SC16
#undef SC4
#undef Z

static inline __attribute__((always_inline)) __m256 q6_K_dec_block(const kern_q6_Kx8 *wb, const q6_K_tok *t,
                                                                   __m256 sum) {
    const __m512i sc_lo = _mm512_loadu_si512(q6_K_sc_sh), sc_hi = _mm512_loadu_si512(q6_K_sc_sh + 64);
#pragma GCC unroll 32
    for (size_t o = 0; o < sizeof *wb; o += 64) _mm_prefetch((const char *)(wb + 2) + o, _MM_HINT_T0);
    __m512i is = _mm512_setzero_si512();
#pragma GCC unroll 2
    for (int h = 0; h < 2; h++) {
        __m512i p[2][4];
#pragma GCC unroll 2
        for (int s = 0; s < 2; s++) {
#pragma GCC unroll 4 /* rolled, gcc kept p on the stack */
            for (int r = 0; r < 4; r++) p[s][r] = _mm512_sub_epi16(_mm512_setzero_si512(), t->c[8 * h + 4 * s + r]);
#pragma GCC unroll 2
            for (int m = 2 * s; m < 2 * s + 2; m++) {
                __m512i q[4];
                q6_K_split(wb, h, m, q);
#pragma GCC unroll 4
                for (int r = 0; r < 4; r++)
                    p[s][r] = _mm512_add_epi16(p[s][r], _mm512_maddubs_epi16(q[r], t->yv[16 * h + 4 * m + r]));
            }
        }
#pragma GCC unroll 4
        for (int r = 0; r < 4; r++) { /* sub-blocks 2(4h + r) and 2(4h + r) + 1 */
            const __m512i sc = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)(wb->sc + 16 * (4 * h + r))));
            is = _mm512_dpwssd_epi32(is, p[0][r], _mm512_srai_epi16(_mm512_shuffle_epi8(sc, sc_lo), 8));
            is = _mm512_dpwssd_epi32(is, p[1][r], _mm512_srai_epi16(_mm512_shuffle_epi8(sc, sc_hi), 8));
        }
    }
    const __m256 d = _mm256_mul_ps(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)wb->d)), t->yd);
    sum = _mm256_fmadd_ps(_mm256_cvtepi32_ps(fold(is)), d, sum);
    return sum;
}

KERN_DEC_CHUNKED(dec_q6_K, kern_q6_Kx8, quant_block_q8_K, q6_K_tok, DEC_CHUNK, q6_K_tok_set, q6_K_dec_block)

const kern_x8_set kern_x8_avx512 = {
    .fn = {[QUANT_Q4_0] = x8_q4_0, [QUANT_Q8_0] = x8_q8_0, [QUANT_Q4_K] = x8_q4_K, [QUANT_Q6_K] = x8_q6_K},
    .dec = {[QUANT_Q4_0] = dec_q4_0, [QUANT_Q8_0] = dec_q8_0, [QUANT_Q4_K] = dec_q4_K, [QUANT_Q6_K] = dec_q6_K},
};
