/*
 * legacy_avx512.c — AVX-512 (F, BW, VL, DQ, VNNI) twins of the legacy kernels.
 *
 * Block dots put two 32-element blocks in one zmm (block i in the low 256
 * bits, block i+1 in the high 256) and multiply with vpdpbusd (unsigned
 * bytes x signed bytes, summed in groups of four into int32 lanes).  Lanes
 * 0..7 then belong to block i and 8..15 to block i+1, so one fma with a
 * vector holding the two blocks' scale products accumulates both.  Four
 * blocks per iteration over two accumulators; an odd last block runs as a
 * pair whose second half has zero activations and a zero scale.
 *
 * Weight quants stay unsigned (vpdpbusd's first operand); a zero point of
 * 8 or 16 is subtracted as offset * sum(y), itself one vpdpbusd.
 *
 * BF16 rows (weights and activations) go through vdpbf16ps where the CPU
 * has AVX512_BF16: 32 products per instruction into 16 float lanes, each
 * product exact (8-bit significands), added in float with denormals flushed,
 * which stays within the float-dot tolerance of the scalar twin; without it
 * they are widened to float and summed with fma.
 */
#include "quant/x86.h"

#include <immintrin.h>
#include <string.h>

#define QK 32

/* Two blocks' 16 nibble bytes -> 64 bytes 0..15 in element order. */
static inline __m512i q4_pair(const uint8_t *qs0, const uint8_t *qs1) {
    const __m256i a = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)qs0));
    const __m256i b = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)qs1));
    const __m512i v = _mm512_inserti64x4(_mm512_castsi256_si512(a), b, 1); /* [a a b b] */
    /* 128-bit lanes 1 and 3 (qwords 2,3,6,7) take the high nibbles */
    const __m512i hv = _mm512_mask_blend_epi64(0xCC, v, _mm512_srli_epi16(v, 4));
    return _mm512_and_si512(hv, _mm512_set1_epi8(0x0F));
}

/* Adds 16 to byte j where bit j of (qh1:qh0) is set: the fifth quant bit. */
static inline __m512i q5_pair(const uint8_t *qs0, const uint8_t *qh0, const uint8_t *qs1, const uint8_t *qh1) {
    uint32_t h0, h1;
    memcpy(&h0, qh0, 4);
    memcpy(&h1, qh1, 4);
    const __m512i q = q4_pair(qs0, qs1);
    return _mm512_mask_add_epi8(q, (__mmask64)h0 | ((__mmask64)h1 << 32), q, _mm512_set1_epi8(16));
}

/* Activations of two blocks; y1 == NULL gives zeros in the high half. */
static inline __m512i y_pair(const int8_t *y0, const int8_t *y1) {
    const __m256i lo = _mm256_loadu_si256((const __m256i *)y0);
    const __m256i hi = y1 ? _mm256_loadu_si256((const __m256i *)y1) : _mm256_setzero_si256();
    return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
}

static inline __m512 scale_pair(float s0, float s1) {
    return _mm512_insertf32x8(_mm512_set1_ps(s0), _mm256_set1_ps(s1), 1);
}

/* sum (q - off) * y per 4-byte group; q unsigned, off 0 skips the correction */
static inline __m512 dot_uq_off(__m512i q, __m512i y, int off) {
    __m512i p = _mm512_dpbusd_epi32(_mm512_setzero_si512(), q, y);
    if (off) p = _mm512_sub_epi32(p, _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_set1_epi8((char)off), y));
    return _mm512_cvtepi32_ps(p);
}

/* The pair steps.  i1 == i0 with last == 1 means "block i0 alone". */
static inline __m512 step_q4_0(const quant_block_q4_0 *x, const quant_block_q8_0 *y, int i0, int last, __m512 acc) {
    const int i1 = last ? i0 : i0 + 1;
    const __m512 p = dot_uq_off(q4_pair(x[i0].qs, x[i1].qs), y_pair(y[i0].qs, last ? NULL : y[i1].qs), 8);
    const __m512 sc = scale_pair(h2f(x[i0].d) * h2f(y[i0].d), last ? 0.0f : h2f(x[i1].d) * h2f(y[i1].d));
    return _mm512_fmadd_ps(p, sc, acc);
}

static inline __m512 step_q5_0(const quant_block_q5_0 *x, const quant_block_q8_0 *y, int i0, int last, __m512 acc) {
    const int i1 = last ? i0 : i0 + 1;
    const __m512i q = q5_pair(x[i0].qs, x[i0].qh, x[i1].qs, x[i1].qh);
    const __m512 p = dot_uq_off(q, y_pair(y[i0].qs, last ? NULL : y[i1].qs), 16);
    const __m512 sc = scale_pair(h2f(x[i0].d) * h2f(y[i0].d), last ? 0.0f : h2f(x[i1].d) * h2f(y[i1].d));
    return _mm512_fmadd_ps(p, sc, acc);
}

/* Q4_1 / Q5_1 also add m * s per block into *ms. */
static inline __m512 step_q4_1(const quant_block_q4_1 *x, const quant_block_q8_1 *y, int i0, int last, __m512 acc,
                               float *ms) {
    const int i1 = last ? i0 : i0 + 1;
    const __m512 p = dot_uq_off(q4_pair(x[i0].qs, x[i1].qs), y_pair(y[i0].qs, last ? NULL : y[i1].qs), 0);
    const __m512 sc = scale_pair(h2f(x[i0].d) * h2f(y[i0].d), last ? 0.0f : h2f(x[i1].d) * h2f(y[i1].d));
    *ms += h2f(x[i0].m) * h2f(y[i0].s) + (last ? 0.0f : h2f(x[i1].m) * h2f(y[i1].s));
    return _mm512_fmadd_ps(p, sc, acc);
}

static inline __m512 step_q5_1(const quant_block_q5_1 *x, const quant_block_q8_1 *y, int i0, int last, __m512 acc,
                               float *ms) {
    const int i1 = last ? i0 : i0 + 1;
    const __m512i q = q5_pair(x[i0].qs, x[i0].qh, x[i1].qs, x[i1].qh);
    const __m512 p = dot_uq_off(q, y_pair(y[i0].qs, last ? NULL : y[i1].qs), 0);
    const __m512 sc = scale_pair(h2f(x[i0].d) * h2f(y[i0].d), last ? 0.0f : h2f(x[i1].d) * h2f(y[i1].d));
    *ms += h2f(x[i0].m) * h2f(y[i0].s) + (last ? 0.0f : h2f(x[i1].m) * h2f(y[i1].s));
    return _mm512_fmadd_ps(p, sc, acc);
}

/* signed x signed: |x| times y with x's sign applied */
static inline __m512 step_q8_0(const quant_block_q8_0 *x, const quant_block_q8_0 *y, int i0, int last, __m512 acc) {
    const int i1 = last ? i0 : i0 + 1;
    const __m512i xv = y_pair(x[i0].qs, x[i1].qs);
    const __m512i yv = y_pair(y[i0].qs, last ? NULL : y[i1].qs);
    const __m512i ys = _mm512_mask_sub_epi8(yv, _mm512_movepi8_mask(xv), _mm512_setzero_si512(), yv);
    const __m512 p = _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_abs_epi8(xv), ys));
    const __m512 sc = scale_pair(h2f(x[i0].d) * h2f(y[i0].d), last ? 0.0f : h2f(x[i1].d) * h2f(y[i1].d));
    return _mm512_fmadd_ps(p, sc, acc);
}

#define BLOCK_DOT(name, xt, yt, step)                                   \
    static void name(int n, float *s, const void *vx, const void *vy) { \
        const xt *x = vx;                                               \
        const yt *y = vy;                                               \
        const int nb = n / QK;                                          \
        __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();  \
        int i = 0;                                                      \
        for (; i + 3 < nb; i += 4) {                                    \
            acc0 = step(x, y, i, 0, acc0);                              \
            acc1 = step(x, y, i + 2, 0, acc1);                          \
        }                                                               \
        if (i + 1 < nb) {                                               \
            acc0 = step(x, y, i, 0, acc0);                              \
            i += 2;                                                     \
        }                                                               \
        if (i < nb) acc1 = step(x, y, i, 1, acc1);                      \
        *s = _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1));           \
    }

#define BLOCK_DOT_MIN(name, xt, yt, step)                               \
    static void name(int n, float *s, const void *vx, const void *vy) { \
        const xt *x = vx;                                               \
        const yt *y = vy;                                               \
        const int nb = n / QK;                                          \
        __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();  \
        float ms = 0.0f;                                                \
        int i = 0;                                                      \
        for (; i + 3 < nb; i += 4) {                                    \
            acc0 = step(x, y, i, 0, acc0, &ms);                         \
            acc1 = step(x, y, i + 2, 0, acc1, &ms);                     \
        }                                                               \
        if (i + 1 < nb) {                                               \
            acc0 = step(x, y, i, 0, acc0, &ms);                         \
            i += 2;                                                     \
        }                                                               \
        if (i < nb) acc1 = step(x, y, i, 1, acc1, &ms);                 \
        *s = _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1)) + ms;      \
    }

BLOCK_DOT(dot_q4_0, quant_block_q4_0, quant_block_q8_0, step_q4_0)
BLOCK_DOT(dot_q5_0, quant_block_q5_0, quant_block_q8_0, step_q5_0)
BLOCK_DOT(dot_q8_0, quant_block_q8_0, quant_block_q8_0, step_q8_0)
BLOCK_DOT_MIN(dot_q4_1, quant_block_q4_1, quant_block_q8_1, step_q4_1)
BLOCK_DOT_MIN(dot_q5_1, quant_block_q5_1, quant_block_q8_1, step_q5_1)

/* ---- float rows: four 16-lane accumulators, masked tail ---- */

static inline __m512 load_f32(const void *p, int i, __mmask16 m) {
    return _mm512_maskz_loadu_ps(m, (const float *)p + i);
}
static inline __m512 load_f16(const void *p, int i, __mmask16 m) {
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, (const uint16_t *)p + i));
}
/* bf16 is the top half of an f32: widen and shift left by 16 (exact) */
static inline __m512 load_bf16(const void *p, int i, __mmask16 m) {
    const __m512i w = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, (const uint16_t *)p + i));
    return _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
}

#define FLOAT_DOT(name, load)                                                                    \
    static void name(int n, float *s, const void *x, const void *y) {                            \
        __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;                              \
        const __mmask16 all = 0xFFFF;                                                            \
        int i = 0;                                                                               \
        for (; i + 64 <= n; i += 64) {                                                           \
            a0 = _mm512_fmadd_ps(load(x, i, all), load(y, i, all), a0);                          \
            a1 = _mm512_fmadd_ps(load(x, i + 16, all), load(y, i + 16, all), a1);                \
            a2 = _mm512_fmadd_ps(load(x, i + 32, all), load(y, i + 32, all), a2);                \
            a3 = _mm512_fmadd_ps(load(x, i + 48, all), load(y, i + 48, all), a3);                \
        }                                                                                        \
        for (; i + 16 <= n; i += 16) a0 = _mm512_fmadd_ps(load(x, i, all), load(y, i, all), a0); \
        if (i < n) {                                                                             \
            const __mmask16 m = (__mmask16)((1u << (n - i)) - 1);                                \
            a1 = _mm512_fmadd_ps(load(x, i, m), load(y, i, m), a1);                              \
        }                                                                                        \
        *s = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));  \
    }

FLOAT_DOT(dot_f32, load_f32)

/* One accumulator: lane l sums x[k] * y[k] for k = l mod 16, one fma per
 * element, the masked last group zero-padded; lanes l and l + 8 added, then
 * the 8 sums as the AVX2 hsum does.  This lane order is what the F16 block
 * kernel (kernels/matmul_avx512.c) reproduces for many rows and tokens at
 * once, so a token's outputs never depend on its batch;
 * quant_dot_f16_lanes(.., 16) is the scalar twin, bit for bit. */
static void dot_f16(int n, float *s, const void *x, const void *y) {
    __m512 acc = _mm512_setzero_ps();
    int i = 0;
    for (; i + 16 <= n; i += 16) acc = _mm512_fmadd_ps(load_f16(x, i, 0xFFFF), load_f16(y, i, 0xFFFF), acc);
    if (i < n) {
        const __mmask16 m = (__mmask16)((1u << (n - i)) - 1);
        acc = _mm512_fmadd_ps(load_f16(x, i, m), load_f16(y, i, m), acc);
    }
    const __m256 v = _mm256_add_ps(_mm512_castps512_ps256(acc), _mm512_extractf32x8_ps(acc, 1));
    __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s4 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
    s4 = _mm_add_ss(s4, _mm_movehdup_ps(s4));
    *s = _mm_cvtss_f32(s4);
}
FLOAT_DOT(dot_bf16, load_bf16)

/* tests/emu512.h has no __m512bh: there the operands stay its union */
#ifndef KILN_BH
#define KILN_BH(v) ((__m512bh)(v))
#endif

/* vdpbf16ps: four accumulators of 32 products per step; the last n % 32
 * elements through a zero-padded copy (0 x 0 adds nothing). */
static void dot_bf16_dp(int n, float *s, const void *vx, const void *vy) {
    const uint16_t *x = vx, *y = vy;
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    int i = 0;
    for (; i + 128 <= n; i += 128) {
        a0 = _mm512_dpbf16_ps(a0, KILN_BH(_mm512_loadu_si512(x + i)), KILN_BH(_mm512_loadu_si512(y + i)));
        a1 = _mm512_dpbf16_ps(a1, KILN_BH(_mm512_loadu_si512(x + i + 32)), KILN_BH(_mm512_loadu_si512(y + i + 32)));
        a2 = _mm512_dpbf16_ps(a2, KILN_BH(_mm512_loadu_si512(x + i + 64)), KILN_BH(_mm512_loadu_si512(y + i + 64)));
        a3 = _mm512_dpbf16_ps(a3, KILN_BH(_mm512_loadu_si512(x + i + 96)), KILN_BH(_mm512_loadu_si512(y + i + 96)));
    }
    for (; i + 32 <= n; i += 32)
        a0 = _mm512_dpbf16_ps(a0, KILN_BH(_mm512_loadu_si512(x + i)), KILN_BH(_mm512_loadu_si512(y + i)));
    if (i < n) {
        uint16_t tx[32] = {0}, ty[32] = {0};
        memcpy(tx, x + i, (size_t)(n - i) * sizeof *tx);
        memcpy(ty, y + i, (size_t)(n - i) * sizeof *ty);
        a1 = _mm512_dpbf16_ps(a1, KILN_BH(_mm512_loadu_si512(tx)), KILN_BH(_mm512_loadu_si512(ty)));
    }
    *s = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
}

/* ---- activation quantizers (Q8_0, Q8_1), bit-identical to the reference ---- */

/* roundf(): nearest, halves away from zero.  v - trunc(v) is exact. */
static inline __m512i round_away(__m512 v) {
    const __m512 t = _mm512_roundscale_ps(v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
    const __mmask16 up = _mm512_cmp_ps_mask(_mm512_abs_ps(_mm512_sub_ps(v, t)), _mm512_set1_ps(0.5f), _CMP_GE_OQ);
    const __m512 step = _mm512_or_ps(_mm512_and_ps(v, _mm512_set1_ps(-0.0f)), _mm512_set1_ps(1.0f));
    return _mm512_cvttps_epi32(_mm512_mask_add_ps(t, up, t, step));
}

/* Quantizes 32 floats to qs; returns d and the sum of the quants. */
static inline float q8_block(const float *x, int8_t *qs, int *qsum) {
    const __m512 v0 = _mm512_loadu_ps(x), v1 = _mm512_loadu_ps(x + 16);
    const float d = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(v0), _mm512_abs_ps(v1))) / 127;
    const float id = d ? 1.0f / d : 0.0f;
    const __m512 mul = _mm512_set1_ps(id);
    const __m512i r0 = round_away(_mm512_mul_ps(v0, mul)), r1 = round_away(_mm512_mul_ps(v1, mul));
    _mm_storeu_si128((__m128i *)qs, _mm512_cvtepi32_epi8(r0));
    _mm_storeu_si128((__m128i *)(qs + 16), _mm512_cvtepi32_epi8(r1));
    if (qsum) *qsum = _mm512_reduce_add_epi32(_mm512_add_epi32(r0, r1));
    return d;
}

static void q8_0_from_f32(const float *x, void *y, int64_t n) { kx_q8_0_row(x, y, n, q8_block); }
static void q8_1_from_f32(const float *x, void *y, int64_t n) { kx_q8_1_row(x, y, n, q8_block); }

/* The AVX-512 level; quant_legacy_avx512_bf16 is the same with the vdpbf16ps
 * BF16 dot, for CPUs with AVX512_BF16. */
#define LEGACY_AVX512(bf16)                                                                                          \
    {                                                                                                                \
        .dot = {[QUANT_F32] = dot_f32,   [QUANT_F16] = dot_f16,   [QUANT_BF16] = bf16,     [QUANT_Q4_0] = dot_q4_0,  \
                [QUANT_Q4_1] = dot_q4_1, [QUANT_Q5_0] = dot_q5_0, [QUANT_Q5_1] = dot_q5_1, [QUANT_Q8_0] = dot_q8_0}, \
        .quant = {[QUANT_Q8_0] = q8_0_from_f32, [QUANT_Q8_1] = q8_1_from_f32},                                       \
    }
const quant_simd quant_legacy_avx512 = LEGACY_AVX512(dot_bf16);
const quant_simd quant_legacy_avx512_bf16 = LEGACY_AVX512(dot_bf16_dp);
