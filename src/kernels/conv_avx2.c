/* AVX2 twin of the group norm (conv.h): the same double sums in 4-lane
 * accumulators, the affine map by FMA and x86.h's polynomial exp8 for the
 * SiLU. */
#include "kernels/conv.h"

#include "kernels/level.h"
#include "quant/x86.h"

#include <immintrin.h>
#include <math.h>

void kk_groupnorm_avx2(const kk_gn *g, const float *x, float *y, int grp) {
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
