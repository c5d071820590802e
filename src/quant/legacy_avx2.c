/*
 * legacy_avx2.c — AVX2 + FMA + F16C twins of the legacy kernels in legacy.c.
 *
 * Block dots expand one 32-element block into 32 bytes, multiply with the
 * int8 activations by maddubs (unsigned x signed -> int16 pairs) and madd
 * (-> int32 x 8), convert to float and fma with the block's scale product
 * into a float accumulator.  Two blocks per iteration go to two
 * accumulators; one horizontal sum at the end.
 *
 * Weight quants are kept unsigned (0..15 or 0..31) so maddubs needs no sign
 * trick; the zero-point offset (8 or 16) is taken off as offset * sum(y).
 */
#include "quant/x86.h"

#include <immintrin.h>
#include <string.h>

#define QK 32

/* 16 bytes of nibbles -> 32 bytes 0..15 in element order
 * (low nibbles = elements 0..15, high nibbles = 16..31). */
static inline __m256i q4_bytes(const uint8_t *qs) {
    const __m128i v = _mm_loadu_si128((const __m128i *)qs);
    const __m256i b = _mm256_set_m128i(_mm_srli_epi16(v, 4), v);
    return _mm256_and_si256(b, _mm256_set1_epi8(0x0F));
}

/* qh bit j -> 0x10 in byte j. */
static inline __m256i q5_high(const uint8_t *qh4) {
    uint32_t qh;
    memcpy(&qh, qh4, 4);
    const __m256i byte_of = _mm256_set_epi64x(0x0303030303030303LL, 0x0202020202020202LL, 0x0101010101010101LL, 0);
    const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ULL);
    __m256i v = _mm256_shuffle_epi8(_mm256_set1_epi32((int)qh), byte_of);
    v = _mm256_cmpeq_epi8(_mm256_and_si256(v, bit), bit);
    return _mm256_and_si256(v, _mm256_set1_epi8(0x10));
}

/* int16 pair sums -> 8 float lanes */
static inline __m256 i16_to_ps(__m256i p16) { return _mm256_cvtepi32_ps(_mm256_madd_epi16(p16, _mm256_set1_epi16(1))); }

/* sum (q - off) * y over one block as 8 float lanes; q unsigned < 32 */
static inline __m256 dot_uq_off(__m256i q, __m256i y, int off) {
    const __m256i p = _mm256_maddubs_epi16(q, y);
    const __m256i c = _mm256_maddubs_epi16(_mm256_set1_epi8((char)off), y);
    return i16_to_ps(_mm256_sub_epi16(p, c));
}

static inline __m256i load_y(const int8_t *qs) { return _mm256_loadu_si256((const __m256i *)qs); }

static void dot_q4_0(int n, float *s, const void *vx, const void *vy) {
    const quant_block_q4_0 *x = vx;
    const quant_block_q8_0 *y = vy;
    const int nb = n / QK;
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    int i = 0;
    for (; i + 1 < nb; i += 2) {
        const __m256 p0 = dot_uq_off(q4_bytes(x[i].qs), load_y(y[i].qs), 8);
        const __m256 p1 = dot_uq_off(q4_bytes(x[i + 1].qs), load_y(y[i + 1].qs), 8);
        acc0 = _mm256_fmadd_ps(p0, _mm256_set1_ps(h2f(x[i].d) * h2f(y[i].d)), acc0);
        acc1 = _mm256_fmadd_ps(p1, _mm256_set1_ps(h2f(x[i + 1].d) * h2f(y[i + 1].d)), acc1);
    }
    if (i < nb) {
        const __m256 p0 = dot_uq_off(q4_bytes(x[i].qs), load_y(y[i].qs), 8);
        acc0 = _mm256_fmadd_ps(p0, _mm256_set1_ps(h2f(x[i].d) * h2f(y[i].d)), acc0);
    }
    *s = hsum8(_mm256_add_ps(acc0, acc1));
}

static void dot_q4_1(int n, float *s, const void *vx, const void *vy) {
    const quant_block_q4_1 *x = vx;
    const quant_block_q8_1 *y = vy;
    const int nb = n / QK;
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    float ms = 0.0f; /* sum of m * s: the min times the activation block sum */
    int i = 0;
    for (; i + 1 < nb; i += 2) {
        const __m256 p0 = i16_to_ps(_mm256_maddubs_epi16(q4_bytes(x[i].qs), load_y(y[i].qs)));
        const __m256 p1 = i16_to_ps(_mm256_maddubs_epi16(q4_bytes(x[i + 1].qs), load_y(y[i + 1].qs)));
        acc0 = _mm256_fmadd_ps(p0, _mm256_set1_ps(h2f(x[i].d) * h2f(y[i].d)), acc0);
        acc1 = _mm256_fmadd_ps(p1, _mm256_set1_ps(h2f(x[i + 1].d) * h2f(y[i + 1].d)), acc1);
        ms += h2f(x[i].m) * h2f(y[i].s) + h2f(x[i + 1].m) * h2f(y[i + 1].s);
    }
    if (i < nb) {
        const __m256 p0 = i16_to_ps(_mm256_maddubs_epi16(q4_bytes(x[i].qs), load_y(y[i].qs)));
        acc0 = _mm256_fmadd_ps(p0, _mm256_set1_ps(h2f(x[i].d) * h2f(y[i].d)), acc0);
        ms += h2f(x[i].m) * h2f(y[i].s);
    }
    *s = hsum8(_mm256_add_ps(acc0, acc1)) + ms;
}

static void dot_q5_0(int n, float *s, const void *vx, const void *vy) {
    const quant_block_q5_0 *x = vx;
    const quant_block_q8_0 *y = vy;
    const int nb = n / QK;
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    int i = 0;
    for (; i + 1 < nb; i += 2) {
        const __m256i q0 = _mm256_or_si256(q4_bytes(x[i].qs), q5_high(x[i].qh));
        const __m256i q1 = _mm256_or_si256(q4_bytes(x[i + 1].qs), q5_high(x[i + 1].qh));
        const __m256 p0 = dot_uq_off(q0, load_y(y[i].qs), 16);
        const __m256 p1 = dot_uq_off(q1, load_y(y[i + 1].qs), 16);
        acc0 = _mm256_fmadd_ps(p0, _mm256_set1_ps(h2f(x[i].d) * h2f(y[i].d)), acc0);
        acc1 = _mm256_fmadd_ps(p1, _mm256_set1_ps(h2f(x[i + 1].d) * h2f(y[i + 1].d)), acc1);
    }
    if (i < nb) {
        const __m256i q0 = _mm256_or_si256(q4_bytes(x[i].qs), q5_high(x[i].qh));
        const __m256 p0 = dot_uq_off(q0, load_y(y[i].qs), 16);
        acc0 = _mm256_fmadd_ps(p0, _mm256_set1_ps(h2f(x[i].d) * h2f(y[i].d)), acc0);
    }
    *s = hsum8(_mm256_add_ps(acc0, acc1));
}

static void dot_q5_1(int n, float *s, const void *vx, const void *vy) {
    const quant_block_q5_1 *x = vx;
    const quant_block_q8_1 *y = vy;
    const int nb = n / QK;
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    float ms = 0.0f;
    int i = 0;
    for (; i + 1 < nb; i += 2) {
        const __m256i q0 = _mm256_or_si256(q4_bytes(x[i].qs), q5_high(x[i].qh));
        const __m256i q1 = _mm256_or_si256(q4_bytes(x[i + 1].qs), q5_high(x[i + 1].qh));
        const __m256 p0 = i16_to_ps(_mm256_maddubs_epi16(q0, load_y(y[i].qs)));
        const __m256 p1 = i16_to_ps(_mm256_maddubs_epi16(q1, load_y(y[i + 1].qs)));
        acc0 = _mm256_fmadd_ps(p0, _mm256_set1_ps(h2f(x[i].d) * h2f(y[i].d)), acc0);
        acc1 = _mm256_fmadd_ps(p1, _mm256_set1_ps(h2f(x[i + 1].d) * h2f(y[i + 1].d)), acc1);
        ms += h2f(x[i].m) * h2f(y[i].s) + h2f(x[i + 1].m) * h2f(y[i + 1].s);
    }
    if (i < nb) {
        const __m256i q0 = _mm256_or_si256(q4_bytes(x[i].qs), q5_high(x[i].qh));
        const __m256 p0 = i16_to_ps(_mm256_maddubs_epi16(q0, load_y(y[i].qs)));
        acc0 = _mm256_fmadd_ps(p0, _mm256_set1_ps(h2f(x[i].d) * h2f(y[i].d)), acc0);
        ms += h2f(x[i].m) * h2f(y[i].s);
    }
    *s = hsum8(_mm256_add_ps(acc0, acc1)) + ms;
}

/* signed x signed: |x| * (y with x's sign) keeps maddubs' first operand unsigned */
static inline __m256 dot_s8(const int8_t *xq, const int8_t *yq) {
    const __m256i x = load_y(xq), y = load_y(yq);
    return i16_to_ps(_mm256_maddubs_epi16(_mm256_abs_epi8(x), _mm256_sign_epi8(y, x)));
}

static void dot_q8_0(int n, float *s, const void *vx, const void *vy) {
    const quant_block_q8_0 *x = vx, *y = vy;
    const int nb = n / QK;
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    int i = 0;
    for (; i + 1 < nb; i += 2) {
        /* two blocks = 68 bytes: one line 2 KB ahead (see kquants_avx2.c) */
        _mm_prefetch((const char *)&x[i] + 2048, _MM_HINT_T0);
        acc0 = _mm256_fmadd_ps(dot_s8(x[i].qs, y[i].qs), _mm256_set1_ps(h2f(x[i].d) * h2f(y[i].d)), acc0);
        acc1 =
            _mm256_fmadd_ps(dot_s8(x[i + 1].qs, y[i + 1].qs), _mm256_set1_ps(h2f(x[i + 1].d) * h2f(y[i + 1].d)), acc1);
    }
    if (i < nb) acc0 = _mm256_fmadd_ps(dot_s8(x[i].qs, y[i].qs), _mm256_set1_ps(h2f(x[i].d) * h2f(y[i].d)), acc0);
    *s = hsum8(_mm256_add_ps(acc0, acc1));
}

/* ---- float rows: four 8-lane accumulators, scalar tail ---- */

static void dot_f32(int n, float *s, const void *vx, const void *vy) {
    const float *x = vx, *y = vy;
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    int i = 0;
    for (; i + 32 <= n; i += 32) {
        a0 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i), a0);
        a1 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i + 8), _mm256_loadu_ps(y + i + 8), a1);
        a2 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i + 16), _mm256_loadu_ps(y + i + 16), a2);
        a3 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i + 24), _mm256_loadu_ps(y + i + 24), a3);
    }
    for (; i + 8 <= n; i += 8) a0 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i), a0);
    float sum = hsum8(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
    for (; i < n; i++) sum += x[i] * y[i];
    *s = sum;
}

static inline __m256 load_f16(const uint16_t *p) { return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p)); }

/* One accumulator: lane l sums x[k] * y[k] for k = l mod 8, one fma per
 * element, the last partial group zero-padded; then hsum8.  This lane order
 * is what the F16 block kernel (kernels/matmul_avx2.c) reproduces for many
 * rows and tokens at once, so a token's outputs never depend on its batch;
 * quant_dot_f16_lanes(.., 8) is the scalar twin, bit for bit.  A single chain
 * is latency-bound for one row; matmuls go through the block kernel. */
static void dot_f16(int n, float *s, const void *vx, const void *vy) {
    const uint16_t *x = vx, *y = vy;
    __m256 acc = _mm256_setzero_ps();
    int i = 0;
    for (; i + 8 <= n; i += 8) acc = _mm256_fmadd_ps(load_f16(x + i), load_f16(y + i), acc);
    if (i < n) {
        uint16_t tx[8] = {0}, ty[8] = {0};
        memcpy(tx, x + i, (size_t)(n - i) * sizeof(uint16_t));
        memcpy(ty, y + i, (size_t)(n - i) * sizeof(uint16_t));
        acc = _mm256_fmadd_ps(load_f16(tx), load_f16(ty), acc);
    }
    *s = hsum8(acc);
}

/* bf16 is the top half of an f32: widen and shift left by 16 (exact) */
static inline __m256 load_bf16(const uint16_t *p) {
    const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
}

static void dot_bf16(int n, float *s, const void *vx, const void *vy) {
    const uint16_t *x = vx, *y = vy;
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    int i = 0;
    for (; i + 32 <= n; i += 32) {
        a0 = _mm256_fmadd_ps(load_bf16(x + i), load_bf16(y + i), a0);
        a1 = _mm256_fmadd_ps(load_bf16(x + i + 8), load_bf16(y + i + 8), a1);
        a2 = _mm256_fmadd_ps(load_bf16(x + i + 16), load_bf16(y + i + 16), a2);
        a3 = _mm256_fmadd_ps(load_bf16(x + i + 24), load_bf16(y + i + 24), a3);
    }
    for (; i + 8 <= n; i += 8) a0 = _mm256_fmadd_ps(load_bf16(x + i), load_bf16(y + i), a0);
    float sum = hsum8(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
    for (; i < n; i++) sum += quant_bf16_to_f32(x[i]) * quant_bf16_to_f32(y[i]);
    *s = sum;
}

/* ---- activation quantizers (Q8_0, Q8_1), bit-identical to the reference ---- */

/* roundf(): nearest, halves away from zero.  v - trunc(v) is exact. */
static inline __m256i round_away(__m256 v) {
    const __m256 t = _mm256_round_ps(v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
    const __m256 sign = _mm256_and_ps(v, _mm256_set1_ps(-0.0f));
    const __m256 frac = _mm256_andnot_ps(_mm256_set1_ps(-0.0f), _mm256_sub_ps(v, t));
    const __m256 up = _mm256_cmp_ps(frac, _mm256_set1_ps(0.5f), _CMP_GE_OQ);
    const __m256 step = _mm256_and_ps(up, _mm256_or_ps(sign, _mm256_set1_ps(1.0f)));
    return _mm256_cvttps_epi32(_mm256_add_ps(t, step));
}

/* Quantizes 32 floats to qs; returns d and the sum of the quants. */
static inline float q8_block(const float *x, int8_t *qs, int *qsum) {
    const __m256 absmask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    __m256 v[4], m = _mm256_setzero_ps();
    for (int k = 0; k < 4; k++) {
        v[k] = _mm256_loadu_ps(x + 8 * k);
        m = _mm256_max_ps(m, _mm256_and_ps(v[k], absmask));
    }
    const float d = hmax8(m) / 127;
    const float id = d ? 1.0f / d : 0.0f;
    const __m256 mul = _mm256_set1_ps(id);
    __m256i r[4];
    for (int k = 0; k < 4; k++) r[k] = round_away(_mm256_mul_ps(v[k], mul));
    /* packs interleave 128-bit lanes; the permute restores element order */
    const __m256i p01 = _mm256_packs_epi32(r[0], r[1]), p23 = _mm256_packs_epi32(r[2], r[3]);
    const __m256i b =
        _mm256_permutevar8x32_epi32(_mm256_packs_epi16(p01, p23), _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    _mm256_storeu_si256((__m256i *)qs, b);
    if (qsum) {
        const __m256i t = _mm256_add_epi32(_mm256_add_epi32(r[0], r[1]), _mm256_add_epi32(r[2], r[3]));
        __m128i u = _mm_add_epi32(_mm256_castsi256_si128(t), _mm256_extracti128_si256(t, 1));
        u = _mm_add_epi32(u, _mm_shuffle_epi32(u, 0x4E));
        u = _mm_add_epi32(u, _mm_shuffle_epi32(u, 0xB1));
        *qsum = _mm_cvtsi128_si32(u);
    }
    return d;
}

static void q8_0_from_f32(const float *x, void *y, int64_t n) { kx_q8_0_row(x, y, n, q8_block); }
static void q8_1_from_f32(const float *x, void *y, int64_t n) { kx_q8_1_row(x, y, n, q8_block); }

/* F16C rounds to nearest even, NaNs quieted with their top payload bits:
 * the bits of the scalar quant_f32_to_f16. */
static void f16_from_f32(const float *x, void *vy, int64_t n) {
    uint16_t *y = vy;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(y + i), _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT));
    for (; i < n; i++) y[i] = f2h(x[i]);
}

const quant_simd quant_legacy_avx2 = {
    .dot = {[QUANT_F32] = dot_f32,
            [QUANT_F16] = dot_f16,
            [QUANT_BF16] = dot_bf16,
            [QUANT_Q4_0] = dot_q4_0,
            [QUANT_Q4_1] = dot_q4_1,
            [QUANT_Q5_0] = dot_q5_0,
            [QUANT_Q5_1] = dot_q5_1,
            [QUANT_Q8_0] = dot_q8_0},
    .quant = {[QUANT_F16] = f16_from_f32, [QUANT_Q8_0] = q8_0_from_f32, [QUANT_Q8_1] = q8_1_from_f32},
};
