/*
 * ops_avx2.c — AVX2 + FMA + F16C twins of the ops.c kernels that the
 * forward pass spends time in (attention over an F16 cache, the norms and
 * the SwiGLU activation).  The scalar versions in ops.c stay the reference;
 * kern_ops_at() hands out one set or the other and test_kernels compares them.
 *
 * Numerics kept from the scalar kernels:
 *   attn_f16  scores by the F16 dot: 4 x 8 float lanes with fma over whole
 *             32-element steps, folded in a fixed order, the rest in double
 *             (the order ggml's AVX2 F16 dot uses, so a head size under 32
 *             is summed in double); F16 accumulator: rescales and updates
 *             are one float multiply / one fused multiply-add per element,
 *             rounded to F16 (nearest-even) after each, as kern_scale_f16 /
 *             kern_mad_f16 do; float accumulator: weights by exp8, which is
 *             kern_exp_attn lane by lane, one fma per element and position in
 *             position order: bit for bit
 *   attn_q8   Q8_0 cache: exact int8 block dots (maddubs on |k| and the
 *             query with k's sign), each block's sum scaled into the score
 *             by the reference's fma chain in block order (8 positions per
 *             vector); weights by exp8; V expanded to v * dv (exact) and one
 *             fma per element and position: bit for bit
 *   rmsnorm   sum of squares in double, then (x * scale) * w in float
 *   swiglu    g / (1 + e^-g) * u with a polynomial e^x (about 1 ulp)
 */
#include "kernels/ops.h"

#include "kernels/level.h"
#include "quant/quant.h"

#include <immintrin.h>
#include <math.h>
#include <string.h>

/* gcc contracts a * b + c into an FMA by default once -mfma is on, also in
 * intrinsics (they are plain vector arithmetic to it); the reference rounds
 * the product and the sum separately, so contraction stays off here. */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#else
#pragma GCC optimize("fp-contract=off")
#endif

/* after the pragma, so x86.h's exp8 is compiled (and inlined) under it too */
#include "quant/x86.h"

/* (h0 + h1) + (h2 + h3) with h_l = x[l] + x[l + 4] */
static inline float fold1(__m256 x) {
    const __m128 h = _mm_add_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));
    const __m128 t = _mm_hadd_ps(h, h);
    return _mm_cvtss_f32(_mm_hadd_ps(t, t));
}

/* The 8 lanes x = (s0 + s2) + (s1 + s3) of dot_f16_in over n = 32k
 * elements, before the final fold. */
static inline __attribute__((always_inline)) __m256 dot_f16_lanes(const uint16_t *a, const float *b, int n) {
    __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
    for (int i = 0; i < n; i += 32) {
        s0 = _mm256_fmadd_ps(load_h8(a + i), _mm256_loadu_ps(b + i), s0);
        s1 = _mm256_fmadd_ps(load_h8(a + i + 8), _mm256_loadu_ps(b + i + 8), s1);
        s2 = _mm256_fmadd_ps(load_h8(a + i + 16), _mm256_loadu_ps(b + i + 16), s2);
        s3 = _mm256_fmadd_ps(load_h8(a + i + 24), _mm256_loadu_ps(b + i + 24), s3);
    }
    return _mm256_add_ps(_mm256_add_ps(s0, s2), _mm256_add_ps(s1, s3));
}

static inline __attribute__((always_inline)) float dot_f16_in(const uint16_t *a, const float *b, int n) {
    const int np = n & ~31;
    double s = 0.0;
    if (np) {
        const float f = fold1(dot_f16_lanes(a, b, np));
        if (np == n) return f; /* the same value as the round trip through double */
        s = (double)f;
    }
    for (int i = np; i < n; i++) s += (double)(h2f(a[i]) * b[i]);
    return (float)s;
}

/* The largest of M and the 8 lanes of m, by the scalar loop's rule
 * M = s > M ? s : M (maxps keeps its second operand when either is NaN, so
 * lanes folded with it follow the same rule). */
static inline float max_lanes(__m256 m, float M) {
    float l[8];
    _mm256_storeu_ps(l, m);
    for (int i = 0; i < 8; i++) M = l[i] > M ? l[i] : M;
    return M;
}

/* dot_f16_in of one F16 row with two float rows of n = 32k, up to the
 * last fold: per float row the 8 lanes x = (s0 + s2) + (s1 + s3), each
 * summed exactly as dot_f16_in sums it; the row is converted once for
 * both.  fold1 (one row) or fold8 (8 rows at once) finishes them. */
static inline __attribute__((always_inline)) void dot2_f16_lanes(const uint16_t *a, const float *b0, const float *b1,
                                                                 int n, __m256 *x0, __m256 *x1) {
    __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
    __m256 t0 = s0, t1 = s0, t2 = s0, t3 = s0;
#pragma GCC unroll 4
    for (int i = 0; i < n; i += 32) {
        const __m256 a0 = load_h8(a + i), a1 = load_h8(a + i + 8), a2 = load_h8(a + i + 16), a3 = load_h8(a + i + 24);
        s0 = _mm256_fmadd_ps(a0, _mm256_loadu_ps(b0 + i), s0);
        s1 = _mm256_fmadd_ps(a1, _mm256_loadu_ps(b0 + i + 8), s1);
        s2 = _mm256_fmadd_ps(a2, _mm256_loadu_ps(b0 + i + 16), s2);
        s3 = _mm256_fmadd_ps(a3, _mm256_loadu_ps(b0 + i + 24), s3);
        t0 = _mm256_fmadd_ps(a0, _mm256_loadu_ps(b1 + i), t0);
        t1 = _mm256_fmadd_ps(a1, _mm256_loadu_ps(b1 + i + 8), t1);
        t2 = _mm256_fmadd_ps(a2, _mm256_loadu_ps(b1 + i + 16), t2);
        t3 = _mm256_fmadd_ps(a3, _mm256_loadu_ps(b1 + i + 24), t3);
    }
    *x0 = _mm256_add_ps(_mm256_add_ps(s0, s2), _mm256_add_ps(s1, s3));
    *x1 = _mm256_add_ps(_mm256_add_ps(t0, t2), _mm256_add_ps(t1, t3));
}

/* [s_0 .. s_7] with s_p = (h0 + h1) + (h2 + h3), h_l = x[p][l] + x[p][l + 4]:
 * kern_dot_f16's final fold of 8 rows.  The 128-bit swaps give h of two rows
 * per register, the two hadds the pair sums and then s, in the lane order
 * 0 2 4 6 1 3 5 7 that the permute puts right. */
static inline __m256 fold8(const __m256 x[8]) {
    __m256 u[4];
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++)
        u[i] = _mm256_add_ps(_mm256_permute2f128_ps(x[2 * i], x[2 * i + 1], 0x20),
                             _mm256_permute2f128_ps(x[2 * i], x[2 * i + 1], 0x31));
    const __m256 r = _mm256_hadd_ps(_mm256_hadd_ps(u[0], u[1]), _mm256_hadd_ps(u[2], u[3]));
    return _mm256_permutevar8x32_ps(r, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

static void f32_to_f16_row(const float *x, uint16_t *y, int n) {
    int i = 0;
    for (; i + 8 <= n; i += 8) store_h8(y + i, _mm256_loadu_ps(x + i));
    for (; i < n; i++) y[i] = f2h(x[i]);
}

static void round_f16_row(const float *x, float *y, int n) {
    int i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, _mm256_cvtph_ps(_mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT)));
    for (; i < n; i++) y[i] = h2f(f2h(x[i]));
}

#define PF_POS 16
_Static_assert(PF_POS % 8 == 0, "scores_pair fetches 8 consecutive rows PF_POS ahead");
/* Always inlined: GCC deems prefetches free of side effects, so a call to
 * an out-of-line copy of this function counts as dead code and is dropped
 * with every prefetch in it (values_one and tile_values had lost theirs,
 * and scores_pair did too when its head size became a parameter: 20 to 30 %
 * slower decode at depth 1024 and 4096). */
static inline __attribute__((always_inline)) void prefetch_row(const void *p, size_t bytes) {
    for (size_t o = 0; o < bytes; o += 64) _mm_prefetch((const char *)p + o, _MM_HINT_T0);
}

/* round to F16 and back: what storing to and reloading an F16 row does */
static inline __m256 rnd16(__m256 v) { return _mm256_cvtph_ps(_mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT)); }

/* The F16 attention loop of ops.c split into three passes with the same
 * arithmetic: (1) every score, (2) the online maximum's sequence of
 * rescale factors ms and weights vs, (3) the accumulator, 64 elements at a
 * time held in 8 registers across all positions, rounded to F16 after each
 * rescale and each update exactly as kern_scale_f16 / kern_mad_f16 store it.  Pass 1
 * and 3 stream K and V once each without the scalar steps in between. */
/* Pass 2: the online maximum's rescale factors ms and weights vs for
 * every position; returns the softmax sum, in the scalar loop's order. */
static float softmax_factors(const float *sc, float *msv, float *vsv, int n) {
    float M = -INFINITY, S = 0.0f;
    for (int t = 0; t < n; t++) {
        float ms = 1.0f, vs = 1.0f;
        if (sc[t] > M) {
            const float old = M;
            M = sc[t];
            ms = expf(old - M);
        } else {
            vs = expf(sc[t] - M);
        }
        msv[t] = ms; /* a rescale by exactly 1 leaves the accumulator as it is */
        vsv[t] = vs;
        S = S * ms + vs;
    }
    return S;
}

/* Pass 1 of one query: the query rounded to F16 into qr, every score into
 * sc; returns their maximum. */
static float scores_one(const kern_attn_f16 *a, float *qr, float *sc) {
    const int hd = a->hd, n = a->n_pos;
    round_f16_row(a->q, qr, hd);
    /* a block's rows are contiguous but blocks are not, and the cache comes
     * from DRAM: fetch the row PF_POS positions ahead by hand */
    const size_t row_bytes = (size_t)hd * sizeof(uint16_t);
    float M = -INFINITY;
    int t = 0;
    if (hd % 32 == 0) { /* 8 positions at a time, folded together */
        const __m256 scale = _mm256_set1_ps(a->scale);
        __m256 m = _mm256_set1_ps(-INFINITY);
        for (; t + 8 <= n; t += 8) {
            __m256 x[8];
#pragma GCC unroll 8
            for (int p = 0; p < 8; p++) {
                if (t + p + PF_POS < n) prefetch_row(a->k + kern_attn_row(a, t + p + PF_POS), row_bytes);
                x[p] = dot_f16_lanes(a->k + kern_attn_row(a, t + p), qr, hd);
            }
            const __m256 s8 = _mm256_mul_ps(fold8(x), scale);
            _mm256_storeu_ps(sc + t, s8);
            m = _mm256_max_ps(s8, m);
        }
        M = max_lanes(m, M);
    }
    for (; t < n; t++) {
        if (t + PF_POS < n) prefetch_row(a->k + kern_attn_row(a, t + PF_POS), row_bytes);
        sc[t] = dot_f16_in(a->k + kern_attn_row(a, t), qr, hd) * a->scale;
        M = sc[t] > M ? sc[t] : M;
    }
    return M;
}

/* The head-pair kernels below take the head size HD as a constant, 64 or
 * 128 (PAIR_HD): each is compiled once per size. */
#define PAIR_HD(hd) ((hd) == 64 || (hd) == 128)

/* Pass 1 of a head pair (attn_pair): both queries' scores from one pass
 * over K; their maxima in m[2].  K and V rows come from DRAM (the weights
 * stream evicts them between layers): the first rows are fetched before the
 * queries are rounded, and the score loop fetches the V rows too, so pass 3
 * finds them cached. */
static inline __attribute__((always_inline)) void scores_pair_hd(const kern_attn_f16 *a, float *qr0, float *qr1,
                                                                 float *sc0, float *sc1, float m[2], const int HD) {
    const int n = a->n_pos;
    for (int t = 0; t < PF_POS && t < n; t++) {
        prefetch_row(a->k + kern_attn_row(a, t), HD * sizeof(uint16_t));
        prefetch_row(a->v + kern_attn_row(a, t), HD * sizeof(uint16_t));
    }
    round_f16_row(a->q, qr0, HD);
    round_f16_row(a->q + HD, qr1, HD);
    /* 8 positions at a time, their lanes folded together (fold8); the
     * maxima as max_score finds them */
    const __m256 scale = _mm256_set1_ps(a->scale);
    __m256 m0 = _mm256_set1_ps(-INFINITY), m1 = m0;
    int t = 0;
    /* blocks of 8 rows or more: rows t .. t + 7 (t a multiple of 8) are
     * consecutive, and so are the 8 fetched PF_POS ahead (a multiple of 8),
     * so each group takes two block lookups, not sixteen (positions from
     * first on: first a multiple of 8 too) */
    const int contig = a->block_shift >= 3 && (a->first & 7) == 0;
    const size_t rs = a->row_stride;
    for (; t + 8 <= n; t += 8) {
        __m256 x0[8], x1[8];
        const int pf = t + PF_POS < n;
        const size_t r0 = kern_attn_row(a, t), rp = pf ? kern_attn_row(a, t + PF_POS) : 0;
#pragma GCC unroll 8
        for (int p = 0; p < 8; p++) {
            if (pf && t + p + PF_POS < n) {
                const size_t r = contig ? rp + (size_t)p * rs : kern_attn_row(a, t + p + PF_POS);
                prefetch_row(a->k + r, HD * sizeof(uint16_t));
                prefetch_row(a->v + r, HD * sizeof(uint16_t));
            }
            const size_t r = contig ? r0 + (size_t)p * rs : kern_attn_row(a, t + p);
            dot2_f16_lanes(a->k + r, qr0, qr1, HD, &x0[p], &x1[p]);
        }
        const __m256 s0 = _mm256_mul_ps(fold8(x0), scale), s1 = _mm256_mul_ps(fold8(x1), scale);
        _mm256_storeu_ps(sc0 + t, s0);
        _mm256_storeu_ps(sc1 + t, s1);
        m0 = _mm256_max_ps(s0, m0);
        m1 = _mm256_max_ps(s1, m1);
    }
    float M0 = max_lanes(m0, -INFINITY), M1 = max_lanes(m1, -INFINITY);
    for (; t < n; t++) {
        __m256 x0, x1;
        dot2_f16_lanes(a->k + kern_attn_row(a, t), qr0, qr1, HD, &x0, &x1);
        sc0[t] = fold1(x0) * a->scale;
        sc1[t] = fold1(x1) * a->scale;
        M0 = sc0[t] > M0 ? sc0[t] : M0;
        M1 = sc1[t] > M1 ? sc1[t] : M1;
    }
    m[0] = M0;
    m[1] = M1;
}
static void scores_pair128(const kern_attn_f16 *a, float *qr0, float *qr1, float *sc0, float *sc1, float m[2]) {
    scores_pair_hd(a, qr0, qr1, sc0, sc1, m, 128);
}
static void scores_pair64(const kern_attn_f16 *a, float *qr0, float *qr1, float *sc0, float *sc1, float m[2]) {
    scores_pair_hd(a, qr0, qr1, sc0, sc1, m, 64);
}
static inline void scores_pair(const kern_attn_f16 *a, float *qr0, float *qr1, float *sc0, float *sc1, float m[2]) {
    if (a->hd == 128)
        scores_pair128(a, qr0, qr1, sc0, sc1, m);
    else
        scores_pair64(a, qr0, qr1, sc0, sc1, m);
}

/* Pass 3 of one query, the whole head: acc += w_t * v_t in position order,
 * then out = acc * inv_s.  f16 (a constant): the F16 scheme's accumulator,
 * rescaled by ms_t where that is not 1 and rounded to F16 after every
 * rescale and update, as kern_scale_f16 / kern_mad_f16 store it; otherwise a
 * float accumulator, one fma per element and position (ms unused).  64
 * elements at a time are held in 8 registers across all positions. */
static inline __attribute__((always_inline)) void values_one(const kern_attn_f16 *a, const float *ms, const float *w,
                                                             float inv_s, const int f16) {
    const int hd = a->hd, n = a->n_pos;
    const __m256 inv = _mm256_set1_ps(inv_s);
    int d0 = 0;
    for (; d0 + 64 <= hd; d0 += 64) {
        __m256 acc[8];
#pragma GCC unroll 8
        for (int r = 0; r < 8; r++) acc[r] = _mm256_setzero_ps();
        for (int t = 0; t < n; t++) {
            const uint16_t *vr = a->v + kern_attn_row(a, t) + d0;
            if (t + PF_POS < n) prefetch_row(a->v + kern_attn_row(a, t + PF_POS) + d0, 64 * sizeof(uint16_t));
            if (f16 && ms[t] != 1.0f) {
                const __m256 m = _mm256_set1_ps(ms[t]);
#pragma GCC unroll 8
                for (int r = 0; r < 8; r++) acc[r] = rnd16(_mm256_mul_ps(acc[r], m));
            }
            const __m256 wt = _mm256_set1_ps(w[t]);
#pragma GCC unroll 8
            for (int r = 0; r < 8; r++) {
                const __m256 x = _mm256_fmadd_ps(load_h8(vr + 8 * r), wt, acc[r]);
                acc[r] = f16 ? rnd16(x) : x;
            }
        }
#pragma GCC unroll 8
        for (int r = 0; r < 8; r++) _mm256_storeu_ps(a->out + d0 + 8 * r, _mm256_mul_ps(acc[r], inv));
    }
    for (; d0 + 8 <= hd; d0 += 8) {
        __m256 acc = _mm256_setzero_ps();
        for (int t = 0; t < n; t++) {
            if (f16 && ms[t] != 1.0f) acc = rnd16(_mm256_mul_ps(acc, _mm256_set1_ps(ms[t])));
            const __m256 x = _mm256_fmadd_ps(load_h8(a->v + kern_attn_row(a, t) + d0), _mm256_set1_ps(w[t]), acc);
            acc = f16 ? rnd16(x) : x;
        }
        _mm256_storeu_ps(a->out + d0, _mm256_mul_ps(acc, inv));
    }
    for (; d0 < hd; d0++) {
        float acc = 0.0f;
        for (int t = 0; t < n; t++) {
            if (f16 && ms[t] != 1.0f) acc = h2f(f2h(acc * ms[t]));
            const float x = fmaf(h2f(a->v[kern_attn_row(a, t) + (size_t)d0]), w[t], acc);
            acc = f16 ? h2f(f2h(x)) : x;
        }
        a->out[d0] = acc * inv_s;
    }
}

static void attn_one(const kern_attn_f16 *a) {
    const int hd = a->hd, n = a->n_pos;
    float *qr = a->scratch, *sc = qr + 2 * hd, *msv = sc + n, *vsv = msv + n;
    const float M = scores_one(a, qr, sc);
    values_one(a, msv, vsv, kern_attn_inv(softmax_factors(sc, msv, vsv, n), M, a->sink), 1);
}

/* Pass 3 of a head pair in the F16 scheme: values_one for both heads, 16
 * registers of chains over each V row, converted once for both. */
static inline __attribute__((always_inline)) void values_pair_hd(const kern_attn_f16 *a, const float *const ms[2],
                                                                 const float *const w[2], const float inv_s[2],
                                                                 const int HD) {
    const int n = a->n_pos;
    const __m256 inv0 = _mm256_set1_ps(inv_s[0]), inv1 = _mm256_set1_ps(inv_s[1]);
    for (int d0 = 0; d0 < HD; d0 += 64) {
        __m256 x0[8], x1[8];
#pragma GCC unroll 8
        for (int r = 0; r < 8; r++) x0[r] = x1[r] = _mm256_setzero_ps();
        for (int t = 0; t < n; t++) {
            const uint16_t *vr = a->v + kern_attn_row(a, t) + d0;
            if (t + PF_POS < n) prefetch_row(a->v + kern_attn_row(a, t + PF_POS) + d0, 64 * sizeof(uint16_t));
            if (ms[0][t] != 1.0f) {
#pragma GCC unroll 8
                for (int r = 0; r < 8; r++) x0[r] = rnd16(_mm256_mul_ps(x0[r], _mm256_set1_ps(ms[0][t])));
            }
            if (ms[1][t] != 1.0f) {
#pragma GCC unroll 8
                for (int r = 0; r < 8; r++) x1[r] = rnd16(_mm256_mul_ps(x1[r], _mm256_set1_ps(ms[1][t])));
            }
            const __m256 wa = _mm256_set1_ps(w[0][t]), wb = _mm256_set1_ps(w[1][t]);
#pragma GCC unroll 8
            for (int r = 0; r < 8; r++) {
                const __m256 v = load_h8(vr + 8 * r);
                x0[r] = rnd16(_mm256_fmadd_ps(v, wa, x0[r]));
                x1[r] = rnd16(_mm256_fmadd_ps(v, wb, x1[r]));
            }
        }
#pragma GCC unroll 8
        for (int r = 0; r < 8; r++) {
            _mm256_storeu_ps(a->out + d0 + 8 * r, _mm256_mul_ps(x0[r], inv0));
            _mm256_storeu_ps(a->out + HD + d0 + 8 * r, _mm256_mul_ps(x1[r], inv1));
        }
    }
}

static void values_pair128(const kern_attn_f16 *a, const float *const ms[2], const float *const w[2],
                           const float inv_s[2]) {
    values_pair_hd(a, ms, w, inv_s, 128);
}
static void values_pair64(const kern_attn_f16 *a, const float *const ms[2], const float *const w[2],
                          const float inv_s[2]) {
    values_pair_hd(a, ms, w, inv_s, 64);
}

/* Two query heads of one KV head (head size PAIR_HD): each K row is read
 * for both scores while in L1, and pass 3 runs both accumulators (16
 * registers of chains) over each V row, which hides the fma + rounding
 * latency that bounds one head.  Per head the arithmetic is attn_one's. */
static void attn_pair(const kern_attn_f16 *a) {
    const int HD = a->hd;
    const int n = a->n_pos;
    const size_t per = kern_attn_scratch(1, 1, HD, n);
    float *qr0 = a->scratch, *sc0 = qr0 + 2 * HD, *ms0 = sc0 + n, *vs0 = ms0 + n;
    float *qr1 = qr0 + per, *sc1 = qr1 + 2 * HD, *ms1 = sc1 + n, *vs1 = ms1 + n;
    float m[2];
    scores_pair(a, qr0, qr1, sc0, sc1, m);
    const float *z1 = a->sink ? a->sink + 1 : NULL;
    const float inv_s[2] = {kern_attn_inv(softmax_factors(sc0, ms0, vs0, n), m[0], a->sink),
                            kern_attn_inv(softmax_factors(sc1, ms1, vs1, n), m[1], z1)};
    const float *const ms[2] = {ms0, ms1}, *const w[2] = {vs0, vs1};
    if (HD == 128)
        values_pair128(a, ms, w, inv_s);
    else
        values_pair64(a, ms, w, inv_s);
}

/* acc_f32 = 1 (ops.h): the same three passes with a float accumulator:
 * (1) every score and their maximum, (2) the weights e^(s - M), eight at a
 * time through exp8 (kern_exp_attn lane by lane), and their sum in position
 * order, (3) one fma per accumulator element and position, no rounding. */
static void exp_weights(const float *sc, float *w, int n, float M) {
    const __m256 m = _mm256_set1_ps(M);
    int t = 0;
    for (; t + 8 <= n; t += 8) _mm256_storeu_ps(w + t, exp8(_mm256_sub_ps(_mm256_loadu_ps(sc + t), m)));
    for (; t < n; t++) w[t] = kern_exp_attn(sc[t] - M);
}

static float softmax_weights(const float *sc, float *w, int n, float M) {
    exp_weights(sc, w, n, M);
    float S = 0.0f;
    for (int t = 0; t < n; t++) S += w[t];
    return S;
}

static void attn_one_f32acc(const kern_attn_f16 *a) {
    const int hd = a->hd, n = a->n_pos;
    float *qr = a->scratch, *sc = qr + 2 * hd, *w = sc + n;
    const float M = scores_one(a, qr, sc);
    values_one(a, NULL, w, kern_attn_inv(softmax_weights(sc, w, n, M), M, a->sink), 0);
}

/* Pass 3 of a head pair, float accumulator: the span in blocks of VB_POS
 * positions (one cache block), each block over the 64-element halves of its
 * V rows (one at head size 64), the accumulators (2 x HD floats; at 128
 * twice the registers there are) kept in L1 between blocks.  Each element
 * still takes one fma per position in position order, so the bits are
 * values_one's.  The span used to be swept once per half, every V row read
 * twice, two of its four lines each time; a whole one-stream decode step at
 * 1024 to 4096 positions is 4 to 7 % faster this way. */
enum { VB_POS = 16 };
static inline __attribute__((always_inline)) void values_pair_f32_hd(const kern_attn_f16 *a, const float *w0,
                                                                     const float *w1, const float inv_s[2],
                                                                     const int HD) {
    const int n = a->n_pos;
    _Alignas(32) float acc[2][128] = {{0.0f}}; /* HD of each used */
    for (int t0 = 0; t0 < n; t0 += VB_POS) {
        const int t1 = t0 + VB_POS < n ? t0 + VB_POS : n;
        for (int d0 = 0; d0 < HD; d0 += 64) {
            __m256 x0[8], x1[8];
#pragma GCC unroll 8
            for (int r = 0; r < 8; r++) {
                x0[r] = _mm256_load_ps(&acc[0][d0 + 8 * r]);
                x1[r] = _mm256_load_ps(&acc[1][d0 + 8 * r]);
            }
            for (int t = t0; t < t1; t++) {
                const uint16_t *vr = a->v + kern_attn_row(a, t) + d0;
                if (d0 == 0 && t + PF_POS < n) prefetch_row(a->v + kern_attn_row(a, t + PF_POS), HD * sizeof(uint16_t));
                const __m256 wa = _mm256_set1_ps(w0[t]), wb = _mm256_set1_ps(w1[t]);
#pragma GCC unroll 8
                for (int r = 0; r < 8; r++) {
                    const __m256 v = load_h8(vr + 8 * r);
                    x0[r] = _mm256_fmadd_ps(v, wa, x0[r]);
                    x1[r] = _mm256_fmadd_ps(v, wb, x1[r]);
                }
            }
#pragma GCC unroll 8
            for (int r = 0; r < 8; r++) {
                _mm256_store_ps(&acc[0][d0 + 8 * r], x0[r]);
                _mm256_store_ps(&acc[1][d0 + 8 * r], x1[r]);
            }
        }
    }
    const __m256 inv0 = _mm256_set1_ps(inv_s[0]), inv1 = _mm256_set1_ps(inv_s[1]);
    for (int d = 0; d < HD; d += 8) {
        _mm256_storeu_ps(a->out + d, _mm256_mul_ps(_mm256_load_ps(&acc[0][d]), inv0));
        _mm256_storeu_ps(a->out + HD + d, _mm256_mul_ps(_mm256_load_ps(&acc[1][d]), inv1));
    }
}
static void values_pair_f32_128(const kern_attn_f16 *a, const float *w0, const float *w1, const float inv_s[2]) {
    values_pair_f32_hd(a, w0, w1, inv_s, 128);
}
static void values_pair_f32_64(const kern_attn_f16 *a, const float *w0, const float *w1, const float inv_s[2]) {
    values_pair_f32_hd(a, w0, w1, inv_s, 64);
}

/* attn_pair with the float accumulator. */
static void attn_pair_f32acc(const kern_attn_f16 *a) {
    const int HD = a->hd;
    const int n = a->n_pos;
    const size_t per = kern_attn_scratch(1, 1, HD, n);
    float *qr0 = a->scratch, *sc0 = qr0 + 2 * HD, *w0 = sc0 + n;
    float *qr1 = qr0 + per, *sc1 = qr1 + 2 * HD, *w1 = sc1 + n;
    float m[2];
    scores_pair(a, qr0, qr1, sc0, sc1, m);
    const float *z1 = a->sink ? a->sink + 1 : NULL;
    const float inv_s[2] = {kern_attn_inv(softmax_weights(sc0, w0, n, m[0]), m[0], a->sink),
                            kern_attn_inv(softmax_weights(sc1, w1, n, m[1]), m[1], z1)};
    if (HD == 128)
        values_pair_f32_128(a, w0, w1, inv_s);
    else
        values_pair_f32_64(a, w0, w1, inv_s);
}

/* acc_f32 = 1 at head size 64 or 128 (PAIR_HD, HD below) for a tile: Q =
 * nq * nt query heads (up to 8) read each K and V row once, converted once
 * for all of them.
 *   pass 1: K rows are converted 8 at a time into a float block (L1).  The
 *     queries, two at a time (chains8), score the 8 rows together: for each
 *     8-lane accumulator j of kern_dot_f16's order (elements 32 s + 8 j + lane)
 *     the fma chain over s,
 *     the four folded (a0 + a2) + (a1 + a3), then the lanes of the 8 rows
 *     folded by one transpose (fold8): the same additions in the same order.
 *   pass 2: per query, the maximum over its own span, then its weights.
 *   pass 3: per block of 64 positions and per chunk of the head, every
 *     query's accumulator chunk stays in registers across the block; the
 *     positions past the first token's span update only the tokens that see
 *     them, in position order. */
enum { ATT_HD = 128 /* the largest HD */, ATT_KB = 8, ATT_VB = 64, ATT_QMAX = 8 };

/* The lanes of chain j of kern_dot_f16 (elements 32 s + 8 j + lane, fma over
 * s from zero) for NQ (1 or 2) F16-rounded queries qr[i][HD] and the 8
 * converted rows kb[8][HD], into part[i][j][p]: the queries' HD / 32
 * registers stay while two rows at a time meet both queries, so each row
 * load feeds NQ fmas. */
static inline __attribute__((always_inline)) void chains8(float *const *qr, const int NQ, const float *kb,
                                                          float part[2][4][8][8], const int HD) {
#pragma GCC unroll 1
    for (int j = 0; j < 4; j++) {
        __m256 q[2][4];
#pragma GCC unroll 2
        for (int i = 0; i < NQ; i++)
#pragma GCC unroll 4
            for (int s = 0; s < HD / 32; s++) q[i][s] = _mm256_loadu_ps(qr[i] + 32 * s + 8 * j);
#pragma GCC unroll 1
        for (int p = 0; p < 8; p += 2) {
            const float *k0 = kb + p * HD + 8 * j, *k1 = k0 + HD;
            __m256 c[2][2];
#pragma GCC unroll 4
            for (int s = 0; s < HD / 32; s++) {
                const __m256 r0 = _mm256_load_ps(k0 + 32 * s), r1 = _mm256_load_ps(k1 + 32 * s);
#pragma GCC unroll 2
                for (int i = 0; i < NQ; i++) {
                    c[i][0] = _mm256_fmadd_ps(r0, q[i][s], s ? c[i][0] : _mm256_setzero_ps());
                    c[i][1] = _mm256_fmadd_ps(r1, q[i][s], s ? c[i][1] : _mm256_setzero_ps());
                }
            }
#pragma GCC unroll 2
            for (int i = 0; i < NQ; i++) {
                _mm256_store_ps(part[i][j][p], c[i][0]);
                _mm256_store_ps(part[i][j][p + 1], c[i][1]);
            }
        }
    }
}

/* The 8 scores of one query from its chain ends: (a0 + a2) + (a1 + a3)
 * lane by lane, then fold8. */
static inline __m256 score8(float part[4][8][8]) {
    __m256 x[8];
#pragma GCC unroll 8
    for (int p = 0; p < 8; p++)
        x[p] = _mm256_add_ps(_mm256_add_ps(_mm256_load_ps(part[0][p]), _mm256_load_ps(part[2][p])),
                             _mm256_add_ps(_mm256_load_ps(part[1][p]), _mm256_load_ps(part[3][p])));
    return fold8(x);
}

/* Pass 1: sc[i][t] for every query i and t < n (the last token's span). */
static inline __attribute__((always_inline)) void tile_scores_hd(const kern_attn_f16 *a, int Q, float *const *qr,
                                                                 float *const *sc, int n, const int HD) {
    float kb[ATT_KB * ATT_HD] __attribute__((aligned(32))); /* 8 rows of HD */
    const __m256 scale = _mm256_set1_ps(a->scale);
    for (int t0 = 0; t0 < n; t0 += ATT_KB) {
        const int nb = n - t0 < ATT_KB ? n - t0 : ATT_KB;
        for (int p = 0; p < ATT_KB; p++) {
            float *d = kb + p * HD;
            const int t = t0 + p;
            if (p >= nb) { /* past the span: scored, never used */
                for (int c = 0; c < HD; c += 8) _mm256_store_ps(d + c, _mm256_setzero_ps());
                continue;
            }
            if (t + PF_POS < n) { /* V too: after a layer's weights it comes from DRAM */
                prefetch_row(a->k + kern_attn_row(a, t + PF_POS), HD * sizeof(uint16_t));
                prefetch_row(a->v + kern_attn_row(a, t + PF_POS), HD * sizeof(uint16_t));
            }
            const uint16_t *r = a->k + kern_attn_row(a, t);
#pragma GCC unroll 16
            for (int c = 0; c < HD; c += 8) _mm256_store_ps(d + c, load_h8(r + c));
        }
        for (int i = 0; i < Q; i += 2) {
            float part[2][4][8][8] __attribute__((aligned(32)));
            const int nq = Q - i < 2 ? 1 : 2;
            if (nq == 2)
                chains8(qr + i, 2, kb, part, HD);
            else
                chains8(qr + i, 1, kb, part, HD);
            for (int e = 0; e < nq; e++) {
                const __m256 s = _mm256_mul_ps(score8(part[e]), scale);
                if (nb == ATT_KB) {
                    _mm256_storeu_ps(sc[i + e] + t0, s);
                } else {
                    float tmp[8];
                    _mm256_storeu_ps(tmp, s);
                    for (int p = 0; p < nb; p++) sc[i + e][t0 + p] = tmp[p];
                }
            }
        }
    }
}

static void tile_scores(const kern_attn_f16 *a, int Q, float *const *qr, float *const *sc, int n) {
    if (a->hd == 128)
        tile_scores_hd(a, Q, qr, sc, n, 128);
    else
        tile_scores_hd(a, Q, qr, sc, n, 64);
}

/* The largest score, as the scalar loop's M = s > M ? s : M finds it:
 * maxps returns its second operand when either is NaN. */
static float max_score(const float *sc, int n) {
    __m256 m = _mm256_set1_ps(-INFINITY);
    int t = 0;
    for (; t + 8 <= n; t += 8) m = _mm256_max_ps(_mm256_loadu_ps(sc + t), m);
    float M = max_lanes(m, -INFINITY);
    for (; t < n; t++) M = sc[t] > M ? sc[t] : M;
    return M;
}

/* Pass 3 for Q queries that all see positions t0 .. t1 - 1: acc[i] +=
 * w[i][t] * v_t, one fma per element and position, in position order.  A
 * chunk of CW registers per query (as many as 8 accumulators allow) stays
 * in registers over a block of 64 positions, whose row addresses are found
 * once.  No prefetch here: tile_scores already fetched the V rows (one
 * here, dead code until prefetch_row was always inlined, made a prompt of
 * 512 after 2048 tokens 4 to 7 % slower once it ran). */
static inline __attribute__((always_inline)) void tile_values(const kern_attn_f16 *a, const int Q, float *const *w,
                                                              float *const *acc, int t0, int t1, const int HD) {
    const int CW = Q <= 2 ? 4 : Q <= 4 ? 2 : 1;
    const uint16_t *rows[ATT_VB];
    for (int tb = t0; tb < t1; tb += ATT_VB) {
        const int te = t1 - tb < ATT_VB ? t1 : tb + ATT_VB;
        for (int t = tb; t < te; t++) rows[t - tb] = a->v + kern_attn_row(a, t);
        for (int d = 0; d < HD; d += 8 * CW) {
            __m256 x[ATT_QMAX][4];
#pragma GCC unroll 8
            for (int i = 0; i < Q; i++)
#pragma GCC unroll 4
                for (int c = 0; c < CW; c++) x[i][c] = _mm256_loadu_ps(acc[i] + d + 8 * c);
            for (int t = tb; t < te; t++) {
                const uint16_t *r = rows[t - tb] + d;
                __m256 v[4];
#pragma GCC unroll 4
                for (int c = 0; c < CW; c++) v[c] = load_h8(r + 8 * c);
#pragma GCC unroll 8
                for (int i = 0; i < Q; i++) {
                    const __m256 wt = _mm256_broadcast_ss(w[i] + t);
#pragma GCC unroll 4
                    for (int c = 0; c < CW; c++) x[i][c] = _mm256_fmadd_ps(v[c], wt, x[i][c]);
                }
            }
#pragma GCC unroll 8
            for (int i = 0; i < Q; i++)
#pragma GCC unroll 4
                for (int c = 0; c < CW; c++) _mm256_storeu_ps(acc[i] + d + 8 * c, x[i][c]);
        }
    }
}

static inline __attribute__((always_inline)) void tile_values_qhd(const kern_attn_f16 *a, int Q, float *const *w,
                                                                  float *const *acc, int t0, int t1, const int HD) {
    switch (Q) {
    case 1: tile_values(a, 1, w, acc, t0, t1, HD); break;
    case 2: tile_values(a, 2, w, acc, t0, t1, HD); break;
    case 3: tile_values(a, 3, w, acc, t0, t1, HD); break;
    case 4: tile_values(a, 4, w, acc, t0, t1, HD); break;
    case 5: tile_values(a, 5, w, acc, t0, t1, HD); break;
    case 6: tile_values(a, 6, w, acc, t0, t1, HD); break;
    case 7: tile_values(a, 7, w, acc, t0, t1, HD); break;
    default: tile_values(a, 8, w, acc, t0, t1, HD); break;
    }
}
static void tile_values_q128(const kern_attn_f16 *a, int Q, float *const *w, float *const *acc, int t0, int t1) {
    tile_values_qhd(a, Q, w, acc, t0, t1, 128);
}
static void tile_values_q64(const kern_attn_f16 *a, int Q, float *const *w, float *const *acc, int t0, int t1) {
    tile_values_qhd(a, Q, w, acc, t0, t1, 64);
}
static void tile_values_q(const kern_attn_f16 *a, int Q, float *const *w, float *const *acc, int t0, int t1) {
    if (a->hd == 128)
        tile_values_q128(a, Q, w, acc, t0, t1);
    else
        tile_values_q64(a, Q, w, acc, t0, t1);
}

/* Query i is head i % nq of token i / nq (kern_attn_f16_query); its scratch
 * holds the rounded query, the accumulator, scores and weights. */
static void attn_tile_f32acc(const kern_attn_f16 *a) {
    const int HD = a->hd;
    const int Q = a->nq * a->nt, n_last = a->n_pos + a->nt - 1;
    kern_attn_f16 one[ATT_QMAX]; /* each query's own pointers and span */
    float *qr[ATT_QMAX] = {0}, *acc[ATT_QMAX] = {0}, *sc[ATT_QMAX] = {0}, *w[ATT_QMAX] = {0}, inv[ATT_QMAX];
    for (int t = 0; t < PF_POS && t < n_last; t++) {
        prefetch_row(a->k + kern_attn_row(a, t), HD * sizeof(uint16_t));
        prefetch_row(a->v + kern_attn_row(a, t), HD * sizeof(uint16_t));
    }
    for (int i = 0; i < Q; i++) {
        one[i] = kern_attn_f16_query(a, i / a->nq, i % a->nq);
        qr[i] = one[i].scratch;
        acc[i] = qr[i] + HD;
        sc[i] = qr[i] + 2 * HD;
        w[i] = sc[i] + n_last;
        round_f16_row(one[i].q, qr[i], HD);
        for (int d = 0; d < HD; d += 8) _mm256_storeu_ps(acc[i] + d, _mm256_setzero_ps());
    }
    tile_scores(a, Q, qr, sc, n_last);
    /* weights, and their sums in position order: one add chain per query,
     * the queries' chains side by side (one chain alone waits on the add
     * latency) */
    float S[ATT_QMAX] = {0}, M[ATT_QMAX];
    for (int i = 0; i < Q; i++) {
        M[i] = max_score(sc[i], one[i].n_pos);
        exp_weights(sc[i], w[i], one[i].n_pos, M[i]);
    }
    for (int t = 0; t < a->n_pos; t++) {
#pragma GCC unroll 8
        for (int i = 0; i < ATT_QMAX; i++)
            if (i < Q) S[i] += w[i][t];
    }
    for (int i = a->nq; i < Q; i++)
        for (int t = a->n_pos; t < one[i].n_pos; t++) S[i] += w[i][t];
    for (int i = 0; i < Q; i++) inv[i] = kern_attn_inv(S[i], M[i], one[i].sink);
    tile_values_q(a, Q, w, acc, 0, a->n_pos);
    for (int t = a->n_pos; t < n_last; t++) { /* seen by tokens t - n_pos + 1 .. nt - 1 */
        const int i0 = (t - a->n_pos + 1) * a->nq;
        tile_values_q(a, Q - i0, w + i0, acc + i0, t, t + 1);
    }
    for (int i = 0; i < Q; i++) {
        const __m256 s = _mm256_set1_ps(inv[i]);
        for (int d = 0; d < HD; d += 8) _mm256_storeu_ps(one[i].out + d, _mm256_mul_ps(_mm256_loadu_ps(acc[i] + d), s));
    }
}

static void attn_f16(const kern_attn_f16 *a) {
    if (kern_attn_window_cuts(a->window, a->n_pos, a->nt)) { /* spans of different starts: token by token */
        for (int u = 0; u < a->nt; u++) {
            const kern_attn_f16 tok = kern_attn_f16_token(a, u);
            attn_f16(&tok);
        }
        return;
    }
    if (a->acc_f32 && PAIR_HD(a->hd) && a->nt > 1) { /* tiles of up to ATT_QMAX queries */
        const int step = ATT_QMAX / a->nq;
        for (int u = 0; u < a->nt; u += step) {
            kern_attn_f16 sub = kern_attn_f16_token(a, u);
            sub.nt = a->nt - u < step ? a->nt - u : step;
            attn_tile_f32acc(&sub);
        }
        return;
    }
    for (int u = 0; u < a->nt; u++) {
        if (a->nq == 2 && PAIR_HD(a->hd)) {
            const kern_attn_f16 tok = kern_attn_f16_token(a, u);
            if (a->acc_f32)
                attn_pair_f32acc(&tok);
            else
                attn_pair(&tok);
            continue;
        }
        for (int j = 0; j < a->nq; j++) {
            const kern_attn_f16 one = kern_attn_f16_query(a, u, j);
            if (one.acc_f32)
                attn_one_f32acc(&one);
            else
                attn_one(&one);
        }
    }
}

/* ---- attention over a Q8_0 cache (kern_attn_q8) ---- */

/* r[p] = the sum of the 8 int32 lanes of v[p], p < 8 (integer sums: any
 * order is exact). */
static inline __m256i hsum8_epi32(const __m256i v[8]) {
    const __m256i q0 = _mm256_hadd_epi32(_mm256_hadd_epi32(v[0], v[1]), _mm256_hadd_epi32(v[2], v[3]));
    const __m256i q1 = _mm256_hadd_epi32(_mm256_hadd_epi32(v[4], v[5]), _mm256_hadd_epi32(v[6], v[7]));
    return _mm256_add_epi32(_mm256_permute2x128_si256(q0, q1, 0x20), _mm256_permute2x128_si256(q0, q1, 0x31));
}

/* Queries taken together by one pass over K and V (a tile of tokens times
 * the heads sharing the KV head). */
enum { Q8_QMAX = 8 };

/* The queries of tokens u0 .. u0 + nu - 1 and heads j0 .. j0 + nj - 1 of
 * a, nu * nj <= Q8_QMAX.  Pass 1 goes 8 positions at a time: per query and
 * block, the 8 rows' int8 dots (maddubs on |k| and q with k's sign, exact)
 * reduce to one vector with a lane per position, and the reference's chain
 * over blocks runs lane-wise (fma with dq_b * dk_b in block order).  Pass 2: weights by
 * exp8, zero past a query's span.  Pass 3 goes one cache block (16
 * positions) at a time: the V rows are expanded once to floats (v * dv,
 * exact) in an L1 buffer, and every query's accumulator takes one fma per
 * element and position from it, in position order. */
static void attn_q8_tile(const kern_attn_q8 *a, int u0, int nu, int j0, int nj) {
    const int hd = a->hd, nb = hd / 32, Q = nu * nj;
    const int n_end = a->n_pos + u0 + nu - 1; /* positions the last query sees */
    const size_t rb = (size_t)nb * sizeof(quant_block_q8_0);
    const quant_block_q8_0 *qq[Q8_QMAX];
    float *acc[Q8_QMAX], *sc[Q8_QMAX], *w[Q8_QMAX], inv[Q8_QMAX];
    int nsee[Q8_QMAX];
    __m256 dq[Q8_QMAX][8];
    kern_attn_q8 one[Q8_QMAX];
    for (int qi = 0; qi < Q; qi++) {
        one[qi] = kern_attn_q8_query(a, u0 + qi / nj, j0 + qi % nj);
        quant_block_q8_0 *qb = (quant_block_q8_0 *)one[qi].scratch;
        quant_get(QUANT_Q8_0)->from_f32(one[qi].q, qb, hd);
        for (int b = 0; b < nb; b++) dq[qi][b] = _mm256_set1_ps(h2f(qb[b].d));
        qq[qi] = qb;
        nsee[qi] = one[qi].n_pos;
        acc[qi] = one[qi].scratch + hd;
        sc[qi] = one[qi].scratch + 2 * hd;
        w[qi] = sc[qi] + one[qi].n_pos;
        memset(acc[qi], 0, (size_t)hd * sizeof(float));
    }
    const __m256i ones = _mm256_set1_epi16(1);
    const __m256 scale = _mm256_set1_ps(a->scale);
    __m256 mx[Q8_QMAX];
    for (int qi = 0; qi < Q; qi++) mx[qi] = _mm256_set1_ps(-INFINITY);
    /* pass 1 */
    for (int t0 = 0; t0 < n_end; t0 += 8) {
        const int np = n_end - t0 < 8 ? n_end - t0 : 8;
        const quant_block_q8_0 *kr[8];
        for (int p = 0; p < 8; p++) {
            kr[p] = (const quant_block_q8_0 *)(a->k + kern_attn_q8_row(a, t0 + (p < np ? p : 0)));
            if (t0 + p + PF_POS < n_end) {
                prefetch_row(a->k + kern_attn_q8_row(a, t0 + p + PF_POS), rb);
                prefetch_row(a->v + kern_attn_q8_row(a, t0 + p + PF_POS), rb);
            }
        }
        __m256 dk[8];
        for (int b = 0; b < nb; b++) {
            dk[b] = _mm256_cvtph_ps(_mm_setr_epi16((short)kr[0][b].d, (short)kr[1][b].d, (short)kr[2][b].d,
                                                   (short)kr[3][b].d, (short)kr[4][b].d, (short)kr[5][b].d,
                                                   (short)kr[6][b].d, (short)kr[7][b].d));
        }
        for (int qi = 0; qi < Q; qi++) {
            __m256 s = _mm256_setzero_ps();
            for (int b = 0; b < nb; b++) {
                const __m256i qv = _mm256_loadu_si256((const __m256i *)qq[qi][b].qs);
                __m256i v[8];
#pragma GCC unroll 8
                for (int p = 0; p < 8; p++) {
                    const __m256i kv = _mm256_loadu_si256((const __m256i *)kr[p][b].qs);
                    v[p] = _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_abs_epi8(kv), _mm256_sign_epi8(qv, kv)), ones);
                }
                s = _mm256_fmadd_ps(_mm256_cvtepi32_ps(hsum8_epi32(v)), _mm256_mul_ps(dq[qi][b], dk[b]), s);
            }
            s = _mm256_mul_ps(s, scale);
            if (t0 + 8 <= nsee[qi]) {
                _mm256_storeu_ps(sc[qi] + t0, s);
                mx[qi] = _mm256_max_ps(mx[qi], s);
            } else { /* the query's span ends in these 8 rows (or before) */
                float tmp[8];
                _mm256_storeu_ps(tmp, s);
                for (int p = 0; t0 + p < nsee[qi]; p++) {
                    sc[qi][t0 + p] = tmp[p];
                    mx[qi] = _mm256_max_ps(mx[qi], _mm256_set1_ps(tmp[p]));
                }
            }
        }
    }
    /* pass 2: the span's weights, zero beyond it up to n_end */
    for (int qi = 0; qi < Q; qi++) {
        const float M = max_lanes(mx[qi], -INFINITY);
        inv[qi] = kern_attn_inv(softmax_weights(sc[qi], w[qi], nsee[qi], M), M, one[qi].sink);
        for (int t = nsee[qi]; t < n_end; t++) w[qi][t] = 0.0f;
    }
    /* pass 3 */
    float vf[VB_POS * 256];
    for (int c0 = 0; c0 < n_end; c0 += VB_POS) {
        const int c1 = c0 + VB_POS < n_end ? c0 + VB_POS : n_end;
        for (int t = c0; t < c1; t++) {
            const quant_block_q8_0 *vb = (const quant_block_q8_0 *)(a->v + kern_attn_q8_row(a, t));
            float *o = vf + (size_t)(t - c0) * hd;
            for (int b = 0; b < nb; b++) {
                const __m256 dv = _mm256_set1_ps(h2f(vb[b].d));
#pragma GCC unroll 4
                for (int r = 0; r < 4; r++)
                    _mm256_storeu_ps(o + 32 * b + 8 * r,
                                     _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(
                                                       _mm_loadl_epi64((const __m128i *)(vb[b].qs + 8 * r)))),
                                                   dv));
            }
        }
        for (int qi = 0; qi < Q; qi++) {
            for (int d0 = 0; d0 < hd; d0 += 32) {
                __m256 x0 = _mm256_loadu_ps(acc[qi] + d0), x1 = _mm256_loadu_ps(acc[qi] + d0 + 8);
                __m256 x2 = _mm256_loadu_ps(acc[qi] + d0 + 16), x3 = _mm256_loadu_ps(acc[qi] + d0 + 24);
                for (int t = c0; t < c1; t++) {
                    const __m256 wt = _mm256_set1_ps(w[qi][t]);
                    const float *v = vf + (size_t)(t - c0) * hd + d0;
                    x0 = _mm256_fmadd_ps(_mm256_loadu_ps(v), wt, x0);
                    x1 = _mm256_fmadd_ps(_mm256_loadu_ps(v + 8), wt, x1);
                    x2 = _mm256_fmadd_ps(_mm256_loadu_ps(v + 16), wt, x2);
                    x3 = _mm256_fmadd_ps(_mm256_loadu_ps(v + 24), wt, x3);
                }
                _mm256_storeu_ps(acc[qi] + d0, x0);
                _mm256_storeu_ps(acc[qi] + d0 + 8, x1);
                _mm256_storeu_ps(acc[qi] + d0 + 16, x2);
                _mm256_storeu_ps(acc[qi] + d0 + 24, x3);
            }
        }
    }
    for (int qi = 0; qi < Q; qi++) {
        const __m256 iv = _mm256_set1_ps(inv[qi]);
        for (int d = 0; d < hd; d += 8)
            _mm256_storeu_ps(one[qi].out + d, _mm256_mul_ps(_mm256_loadu_ps(acc[qi] + d), iv));
    }
}

static void attn_q8(const kern_attn_q8 *a) {
    if (kern_attn_window_cuts(a->window, a->n_pos, a->nt)) { /* spans of different starts: token by token */
        for (int u = 0; u < a->nt; u++) {
            const kern_attn_q8 tok = kern_attn_q8_token(a, u);
            attn_q8(&tok);
        }
        return;
    }
    const int nj = a->nq < Q8_QMAX ? a->nq : Q8_QMAX, per = Q8_QMAX / nj; /* heads, tokens per tile */
    for (int j = 0; j < a->nq; j += nj)
        for (int u = 0; u < a->nt; u += per)
            attn_q8_tile(a, u, a->nt - u < per ? a->nt - u : per, j, a->nq - j < nj ? a->nq - j : nj);
}

static void rmsnorm(float *out, const float *x, const float *w, int n, float eps) {
    __m256d s0 = _mm256_setzero_pd(), s1 = s0;
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 v = _mm256_loadu_ps(x + i);
        const __m256d lo = _mm256_cvtps_pd(_mm256_castps256_ps128(v)),
                      hi = _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1));
        s0 = _mm256_fmadd_pd(lo, lo, s0); /* exact: a float squared fits in a double */
        s1 = _mm256_fmadd_pd(hi, hi, s1);
    }
    double ss = hsum4d(_mm256_add_pd(s0, s1));
    for (; i < n; i++) ss += (double)x[i] * x[i];
    const float scale = (float)(1.0 / sqrt(ss / n + eps));
    const __m256 vs = _mm256_set1_ps(scale);
    i = 0;
    if (w) {
        for (; i + 8 <= n; i += 8)
            _mm256_storeu_ps(out + i, _mm256_mul_ps(_mm256_mul_ps(_mm256_loadu_ps(x + i), vs), _mm256_loadu_ps(w + i)));
        for (; i < n; i++) out[i] = x[i] * scale * w[i];
    } else {
        for (; i + 8 <= n; i += 8) _mm256_storeu_ps(out + i, _mm256_mul_ps(_mm256_loadu_ps(x + i), vs));
        for (; i < n; i++) out[i] = x[i] * scale;
    }
}

static void swiglu(float *g, const float *u, int n) {
    const __m256 one = _mm256_set1_ps(1.0f), neg = _mm256_set1_ps(-0.0f);
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 v = _mm256_loadu_ps(g + i);
        const __m256 e = exp8(_mm256_xor_ps(v, neg));
        _mm256_storeu_ps(g + i, _mm256_mul_ps(_mm256_div_ps(v, _mm256_add_ps(one, e)), _mm256_loadu_ps(u + i)));
    }
    for (; i < n; i++) g[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
}

static void add(float *y, const float *x, int n) {
    int i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_add_ps(_mm256_loadu_ps(y + i), _mm256_loadu_ps(x + i)));
    for (; i < n; i++) y[i] += x[i];
}

static void rope_neox(const float *cs, float *x, int n_heads, int head_dim, int n_rot) {
    const int half = n_rot / 2;
    for (int h = 0; h < n_heads; h++) {
        float *v = x + (long)h * head_dim;
        int i = 0;
        for (; i + 8 <= half; i += 8) {
            /* cs holds (cos, sin) pairs: split 16 floats into 8 cos and 8 sin */
            const __m256 a = _mm256_loadu_ps(cs + 2 * i), b = _mm256_loadu_ps(cs + 2 * i + 8);
            const __m256 c =
                _mm256_permutevar8x32_ps(_mm256_shuffle_ps(a, b, 0x88), _mm256_setr_epi32(0, 1, 4, 5, 2, 3, 6, 7));
            const __m256 s =
                _mm256_permutevar8x32_ps(_mm256_shuffle_ps(a, b, 0xDD), _mm256_setr_epi32(0, 1, 4, 5, 2, 3, 6, 7));
            const __m256 x0 = _mm256_loadu_ps(v + i), x1 = _mm256_loadu_ps(v + i + half);
            /* two roundings each, as the reference: x0*c - x1*s, x0*s + x1*c */
            _mm256_storeu_ps(v + i, _mm256_sub_ps(_mm256_mul_ps(x0, c), _mm256_mul_ps(x1, s)));
            _mm256_storeu_ps(v + i + half, _mm256_add_ps(_mm256_mul_ps(x0, s), _mm256_mul_ps(x1, c)));
        }
        for (; i < half; i++) {
            const float c = cs[2 * i], s = cs[2 * i + 1], x0 = v[i], x1 = v[i + half];
            const float m0 = x0 * c, m1 = x1 * s, m2 = x0 * s, m3 = x1 * c;
            v[i] = m0 - m1;
            v[i + half] = m2 + m3;
        }
    }
}

const kern_ops kern_ops_avx2 = {
    .attn_f16 = attn_f16,
    .attn_q8 = attn_q8,
    .f32_to_f16_row = f32_to_f16_row,
    .round_f16_row = round_f16_row,
    .rmsnorm = rmsnorm,
    .swiglu = swiglu,
    .add = add,
    .rope_neox = rope_neox,
};
