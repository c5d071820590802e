/* AVX2 twins of the image kernels (conv.h): the image GEMM's 6 x 16 tile
 * (vfmadd per output and k, in order: the scalar twin's fmaf chains bit
 * for bit) and its packer of weight rows (8 x 8 transposes, exact
 * widening); the group norm with the same double sums in 4-lane
 * accumulators, the affine map by FMA and x86.h's polynomial exp8 for the
 * SiLU. */
#include "kernels/conv.h"

#include "kernels/level.h"
#include "quant/x86.h"

#include <immintrin.h>
#include <math.h>
#include <string.h>

/* Rows i < MR of c (16 columns) += a rows . the panel bp [kc][16]. */
static inline __attribute__((always_inline)) void tile(const int MR, int kc, const float *a, size_t lda,
                                                       const float *bp, float *c, size_t ldc) {
    __m256 acc[KERN_GEMM_MR][2];
#pragma GCC unroll 6
    for (int i = 0; i < MR; i++) {
        acc[i][0] = _mm256_loadu_ps(c + (size_t)i * ldc);
        acc[i][1] = _mm256_loadu_ps(c + (size_t)i * ldc + 8);
    }
    const float *ar[KERN_GEMM_MR]; /* one base per row, so each broadcast is base + 4 k */
#pragma GCC unroll 6
    for (int i = 0; i < MR; i++) ar[i] = a + (size_t)i * lda;
    for (int k = 0; k < kc; k++, bp += 16) {
        const __m256 b0 = _mm256_load_ps(bp), b1 = _mm256_load_ps(bp + 8);
#pragma GCC unroll 6
        for (int i = 0; i < MR; i++) {
            const __m256 av = _mm256_broadcast_ss(ar[i] + k);
            acc[i][0] = _mm256_fmadd_ps(av, b0, acc[i][0]);
            acc[i][1] = _mm256_fmadd_ps(av, b1, acc[i][1]);
        }
    }
#pragma GCC unroll 6
    for (int i = 0; i < MR; i++) {
        _mm256_storeu_ps(c + (size_t)i * ldc, acc[i][0]);
        _mm256_storeu_ps(c + (size_t)i * ldc + 8, acc[i][1]);
    }
}

static void tile_any(int mr, int kc, const float *a, size_t lda, const float *bp, float *c, size_t ldc) {
    switch (mr) {
    case 1: tile(1, kc, a, lda, bp, c, ldc); break;
    case 2: tile(2, kc, a, lda, bp, c, ldc); break;
    case 3: tile(3, kc, a, lda, bp, c, ldc); break;
    case 4: tile(4, kc, a, lda, bp, c, ldc); break;
    case 5: tile(5, kc, a, lda, bp, c, ldc); break;
    default: tile(6, kc, a, lda, bp, c, ldc); break;
    }
}

void kern_gemm_tile_avx2(int mr, int nr, int kc, const float *a, size_t lda, const float *bp, float *c, size_t ldc) {
    int j = 0;
    for (; j + 16 <= nr; j += 16, bp += (size_t)kc * 16) tile_any(mr, kc, a, lda, bp, c + j, ldc);
    if (j == nr) return;
    /* the last columns: through a full-width copy (the panel's extra
     * columns are zero) */
    _Alignas(32) float t[KERN_GEMM_MR * 16] = {0};
    for (int i = 0; i < mr; i++) memcpy(t + 16 * i, c + (size_t)i * ldc + j, (size_t)(nr - j) * sizeof *t);
    tile_any(mr, kc, a, lda, bp, t, 16);
    for (int i = 0; i < mr; i++) memcpy(c + (size_t)i * ldc + j, t + 16 * i, (size_t)(nr - j) * sizeof *t);
}

/* 8 floats of a row at element k, widened exactly. */
static inline __m256 load8(int type, const uint8_t *row, int k) {
    if (type == QUANT_F16) return load_h8((const uint16_t *)row + k);
    if (type == QUANT_BF16)
        return _mm256_castsi256_ps(_mm256_slli_epi32(
            _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)((const uint16_t *)row + k))), 16));
    return _mm256_loadu_ps((const float *)row + k);
}

static float elem1(int type, const uint8_t *row, int k) {
    if (type == QUANT_F16) return h2f(((const uint16_t *)row)[k]);
    if (type == QUANT_BF16) return quant_bf16_to_f32(((const uint16_t *)row)[k]);
    return ((const float *)row)[k];
}

/* ROWS packer: 8 rows x 8 k at a time, transposed in registers. */
void kern_gemm_pack_rows_avx2(const kern_gemm *g, int k0, int kc, int n0, int nc, float *panel) {
    const int type = g->b_type;
    for (int p = 0; p * 16 < nc; p++)
        for (int h = 0; h < 2; h++) {
            const int j0 = 16 * p + 8 * h, col = n0 + j0;
            float *d = panel + (size_t)p * (size_t)kc * 16 + 8 * (size_t)h;
            int rows = nc - j0 < 8 ? nc - j0 : 8;
            if (g->n - col < rows) rows = g->n - col;
            if (rows < 0) rows = 0;
            const uint8_t *r[8];
            for (int i = 0; i < rows; i++) r[i] = (const uint8_t *)g->b + (size_t)(col + i) * g->ldb;
            int k = 0;
            if (rows == 8)
                for (; k + 8 <= kc; k += 8) {
                    __m256 v[8], t[8];
                    for (int i = 0; i < 8; i++) v[i] = load8(type, r[i], k0 + k);
                    for (int i = 0; i < 8; i += 2) {
                        t[i] = _mm256_unpacklo_ps(v[i], v[i + 1]);
                        t[i + 1] = _mm256_unpackhi_ps(v[i], v[i + 1]);
                    }
                    v[0] = _mm256_shuffle_ps(t[0], t[2], 0x44);
                    v[1] = _mm256_shuffle_ps(t[0], t[2], 0xEE);
                    v[2] = _mm256_shuffle_ps(t[1], t[3], 0x44);
                    v[3] = _mm256_shuffle_ps(t[1], t[3], 0xEE);
                    v[4] = _mm256_shuffle_ps(t[4], t[6], 0x44);
                    v[5] = _mm256_shuffle_ps(t[4], t[6], 0xEE);
                    v[6] = _mm256_shuffle_ps(t[5], t[7], 0x44);
                    v[7] = _mm256_shuffle_ps(t[5], t[7], 0xEE);
                    for (int i = 0; i < 4; i++) {
                        _mm256_store_ps(d + (size_t)(k + i) * 16, _mm256_permute2f128_ps(v[i], v[i + 4], 0x20));
                        _mm256_store_ps(d + (size_t)(k + i + 4) * 16, _mm256_permute2f128_ps(v[i], v[i + 4], 0x31));
                    }
                }
            for (; k < kc; k++)
                for (int i = 0; i < 8; i++) d[(size_t)k * 16 + (size_t)i] = i < rows ? elem1(type, r[i], k0 + k) : 0.0f;
        }
}

void kern_groupnorm_avx2(const kern_gn *g, const float *x, float *y, int grp) {
    const int cpg = g->c / g->groups;
    const size_t n = (size_t)cpg * (size_t)g->hw, off = (size_t)grp * n;
    const float *xs = x + off;
    __m256d a0 = _mm256_setzero_pd(), a1 = _mm256_setzero_pd();
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 v = _mm256_loadu_ps(xs + i);
        a0 = _mm256_add_pd(a0, _mm256_cvtps_pd(_mm256_castps256_ps128(v)));
        a1 = _mm256_add_pd(a1, _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1)));
    }
    double s = hsum4d(_mm256_add_pd(a0, a1));
    for (; i < n; i++) s += xs[i];
    const double mean = s / (double)n;
    const __m256d mv = _mm256_set1_pd(mean);
    a0 = a1 = _mm256_setzero_pd();
    for (i = 0; i + 8 <= n; i += 8) {
        const __m256 v = _mm256_loadu_ps(xs + i);
        const __m256d d0 = _mm256_sub_pd(_mm256_cvtps_pd(_mm256_castps256_ps128(v)), mv);
        const __m256d d1 = _mm256_sub_pd(_mm256_cvtps_pd(_mm256_extractf128_ps(v, 1)), mv);
        a0 = _mm256_fmadd_pd(d0, d0, a0);
        a1 = _mm256_fmadd_pd(d1, d1, a1);
    }
    double var = hsum4d(_mm256_add_pd(a0, a1));
    for (; i < n; i++) {
        const double d = xs[i] - mean;
        var += d * d;
    }
    const float inv = (float)(1.0 / sqrt(var / (double)n + g->eps)), m = (float)mean;
    for (int cc = 0; cc < cpg; cc++) {
        const int ch = grp * cpg + cc;
        const float a = g->w ? g->w[ch] * inv : inv;
        const float b = (g->b ? g->b[ch] : 0.0f) - m * a;
        const float *xc = xs + (size_t)cc * (size_t)g->hw;
        float *yc = y + off + (size_t)cc * (size_t)g->hw;
        const __m256 va = _mm256_set1_ps(a), vb = _mm256_set1_ps(b), one = _mm256_set1_ps(1.0f);
        int k = 0;
        for (; k + 8 <= g->hw; k += 8) {
            __m256 t = _mm256_fmadd_ps(_mm256_loadu_ps(xc + k), va, vb);
            if (g->silu) t = _mm256_div_ps(t, _mm256_add_ps(one, exp8(_mm256_sub_ps(_mm256_setzero_ps(), t))));
            _mm256_storeu_ps(yc + k, t);
        }
        for (; k < g->hw; k++) {
            const float t = fmaf(xc[k], a, b);
            yc[k] = g->silu ? t / (1.0f + expf(-t)) : t;
        }
    }
}

void kern_gelu_tanh_avx2(float *x, size_t n) {
    const __m256 c = _mm256_set1_ps(-2.0f * 0.7978845608028654f), c3 = _mm256_set1_ps(0.044715f),
                 one = _mm256_set1_ps(1.0f);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 v = _mm256_loadu_ps(x + i);
        const __m256 u = _mm256_mul_ps(c, _mm256_fmadd_ps(_mm256_mul_ps(c3, v), _mm256_mul_ps(v, v), v));
        _mm256_storeu_ps(x + i, _mm256_div_ps(v, _mm256_add_ps(one, exp8(u))));
    }
    const float cs = -2.0f * 0.7978845608028654f;
    for (; i < n; i++) {
        const float v = x[i];
        x[i] = v / (1.0f + expf(cs * (v + 0.044715f * v * v * v)));
    }
}
