/*
 * matmul_avx512.c — the AVX-512 F16 block kernel for F16 weights (see
 * kk_tile_fn in matmul.h): rows x tokens of products in the lane order of
 * the AVX-512 F16 vec_dot (dot_f16 in quant/legacy_avx512.c), which is
 *     lane l (of 16) sums w[k] * a[k] for k = l, l + 16, l + 32, ... with
 *     one fma per element, the last partial group of 16 zero-padded; lanes
 *     l and l + 8 are added, then the 8 sums as the AVX2 dot adds its lanes
 * (kq_dot_f16_lanes(.., 16) is its scalar twin).  Each output is thus the
 * very float the one-row dot gives, whatever batch its token is in.
 *
 * One accumulator per output: a 4 x 4 register tile (16 chains) holds 4
 * weight rows against 4 tokens; per 16 elements, 4 weight conversions and
 * 4 activation loads for 16 fmas.  The tokens' F16 activations are widened
 * (exactly) once per k-block into an F32 buffer in L1 that 128 rows reuse;
 * partial sums of 128 rows survive from one k-block to the next in memory
 * (a store and a load give back the same bits).
 *
 * The loops over the tile are unrolled by pragma so their arrays of vectors
 * live in registers (-O2 would keep them on the stack).
 */
#include "kernels/matmul.h"

#include "kernels/level.h"
#include "quant/x86.h"

#include <immintrin.h>
#include <string.h>

#define LANES 16
#define KB 512 /* elements per k-block: TT rows of KB floats = 8 KB of L1 */
#define RB 128 /* rows that reuse one buffered k-block; their partial sums (32 KB) live across k-blocks */
#define TR 4   /* register tile: weight rows */
#define TT 4   /* and tokens */

/* part[r * TT + t] += rows wr[r] (F16) . buffered tokens ab + t * KB (F32)
 * over nk groups of 16 elements, for r < R, t < T. */
static inline __attribute__((always_inline)) void micro(const int R, const int T, int nk, const uint16_t *const *wr,
                                                        const float *ab, __m512 *part) {
    __m512 acc[TR][TT];
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int t = 0; t < T; t++) acc[r][t] = part[r * TT + t];
    for (int i = 0; i < nk; i++) {
        __m512 av[TT];
#pragma GCC unroll 4
        for (int t = 0; t < T; t++) av[t] = _mm512_loadu_ps(ab + (size_t)t * KB + 16 * i);
#pragma GCC unroll 4
        for (int r = 0; r < R; r++) {
            const __m512 wv = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(wr[r] + 16 * i)));
#pragma GCC unroll 4
            for (int t = 0; t < T; t++) acc[r][t] = _mm512_fmadd_ps(wv, av[t], acc[r][t]);
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int t = 0; t < T; t++) part[r * TT + t] = acc[r][t];
}

static void micro_any(int R, int T, int nk, const uint16_t *const *wr, const float *ab, __m512 *part) {
    // clang-format off
    switch (R * 8 + T) {
#define M(r, t) case r * 8 + t: micro(r, t, nk, wr, ab, part); break;
    M(1, 1) M(1, 2) M(1, 3) M(1, 4) M(2, 1) M(2, 2) M(2, 3) M(2, 4)
    M(3, 1) M(3, 2) M(3, 3) M(3, 4) M(4, 1) M(4, 2) M(4, 3)
#undef M
    default: micro(4, 4, nk, wr, ab, part); break;
    }
    // clang-format on
}

/* One token (decode): y[r] for R rows at wr[r], 8 independent chains when
 * R = 8, the activation widened once per group for all of them; the same
 * lane order, so the same bits. */
static inline __attribute__((always_inline)) void one_token(const int R, int n, const uint16_t *const *wr,
                                                            const uint16_t *q, const uint16_t *qtail, float *y) {
    __m512 acc[8];
#pragma GCC unroll 8
    for (int r = 0; r < R; r++) acc[r] = _mm512_setzero_ps();
    int i = 0;
    for (; i + LANES <= n; i += LANES) {
        const __m512 av = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(q + i)));
#pragma GCC unroll 8
        for (int r = 0; r < R; r++)
            acc[r] = _mm512_fmadd_ps(_mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(wr[r] + i))), av, acc[r]);
    }
    if (i < n) { /* the rows end inside this group: zero-padded copies */
        const __m512 av = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(qtail)));
        for (int r = 0; r < R; r++) {
            _Alignas(64) uint16_t wt[LANES] = {0};
            memcpy(wt, wr[r] + i, (size_t)(n - i) * sizeof(uint16_t));
            acc[r] = _mm512_fmadd_ps(_mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(wt))), av, acc[r]);
        }
    }
#pragma GCC unroll 8
    for (int r = 0; r < R; r++) y[r] = hsum16(acc[r]);
}

static void tile_one_token(int n, const void *w, size_t wrow, int nr, const uint16_t *q, float *y) {
    _Alignas(64) uint16_t qtail[LANES] = {0};
    if (n % LANES) memcpy(qtail, q + n / LANES * LANES, (size_t)(n % LANES) * sizeof(uint16_t));
    const uint16_t *wr[8];
    int r = 0;
    for (; r + 8 <= nr; r += 8) {
        for (int i = 0; i < 8; i++) wr[i] = (const uint16_t *)((const uint8_t *)w + (size_t)(r + i) * wrow);
        one_token(8, n, wr, q, qtail, y + r);
    }
    for (; r < nr; r++) {
        wr[0] = (const uint16_t *)((const uint8_t *)w + (size_t)r * wrow);
        one_token(1, n, wr, q, qtail, y + r);
    }
}

static void tile_f16(int n, const void *w, size_t wrow, int nr, const void *a, size_t arow, int nt, float *y,
                     int64_t ldy) {
    if (nt == 1) {
        tile_one_token(n, w, wrow, nr, a, y);
        return;
    }
    _Alignas(32) float ab[TT * KB];
    _Alignas(32) uint16_t wtail[TR][LANES];
    __m512 part[RB * TT];
    for (int r0 = 0; r0 < nr; r0 += RB) {
        const int rn = nr - r0 < RB ? nr - r0 : RB;
        for (int t0 = 0; t0 < nt; t0 += TT) {
            const int tn = nt - t0 < TT ? nt - t0 : TT;
            for (int i = 0; i < rn * TT; i++) part[i] = _mm512_setzero_ps();
            for (int k0 = 0; k0 < n; k0 += KB) {
                const int kn = n - k0 < KB ? n - k0 : KB;
                const int full = kn / LANES, rest = kn % LANES;
                for (int t = 0; t < tn; t++) { /* widen the k-block of token t0 + t, zero-padded */
                    const uint16_t *q = (const uint16_t *)((const uint8_t *)a + (size_t)(t0 + t) * arow) + k0;
                    float *d = ab + (size_t)t * KB;
                    int i = 0;
                    for (; i + 16 <= kn; i += 16)
                        _mm512_storeu_ps(d + i, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(q + i))));
                    if (rest) {
                        uint16_t tmp[LANES] = {0};
                        memcpy(tmp, q + i, (size_t)rest * sizeof(uint16_t));
                        _mm512_storeu_ps(d + i, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)tmp)));
                    }
                }
                for (int r = 0; r < rn; r += TR) {
                    const int rr = rn - r < TR ? rn - r : TR;
                    const uint16_t *wr[TR];
                    for (int i = 0; i < rr; i++)
                        wr[i] = (const uint16_t *)((const uint8_t *)w + (size_t)(r0 + r + i) * wrow) + k0;
                    micro_any(rr, tn, full, wr, ab, part + r * TT);
                    if (rest) { /* the row ends inside this group: a zero-padded copy */
                        const uint16_t *wt[TR];
                        for (int i = 0; i < rr; i++) {
                            memset(wtail[i], 0, sizeof wtail[i]);
                            memcpy(wtail[i], wr[i] + 16 * full, (size_t)rest * sizeof(uint16_t));
                            wt[i] = wtail[i];
                        }
                        micro_any(rr, tn, 1, wt, ab + 16 * full, part + r * TT);
                    }
                }
            }
            for (int r = 0; r < rn; r++)
                for (int t = 0; t < tn; t++) y[(int64_t)(t0 + t) * ldy + r0 + r] = hsum16(part[r * TT + t]);
        }
    }
}

void kk_tile_f16_avx512(int n, const void *w, size_t wrow, int nr, const void *a, size_t arow, int nt, float *y,
                        int64_t ldy) {
    tile_f16(n, w, wrow, nr, a, arow, nt, y, ldy);
}
