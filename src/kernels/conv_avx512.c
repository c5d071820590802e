/* AVX-512 twin of the image GEMM's tile (conv.h): 6 rows x 64 columns, one
 * zmm per row and 16-column panel, so per k 4 panel loads and 6 broadcasts
 * of A feed 24 fmas (the AVX2 tile's 6 x 16 has 12 fmas for 8 loads and
 * broadcasts, and half the lanes).  Each lane is one output's chain,
 * vfmadd on the same operands in the same order as the scalar twin's fmaf:
 * the same bits at every level.  The packer and everything else of the
 * image kernels are the AVX2 ones. */
#include "kernels/conv.h"

#include "kernels/level.h"

#include <immintrin.h>
#include <string.h>

/* Rows i < MR of c (NP panels of 16 columns) += a rows . the panels at bp
 * (each [kc][16], ps floats apart). */
static inline __attribute__((always_inline)) void tile(const int MR, const int NP, int kc, const float *a, size_t lda,
                                                       const float *bp, size_t ps, float *c, size_t ldc) {
    __m512 acc[KERN_GEMM_MR][4];
#pragma GCC unroll 6
    for (int i = 0; i < MR; i++)
#pragma GCC unroll 4
        for (int p = 0; p < NP; p++) acc[i][p] = _mm512_loadu_ps(c + (size_t)i * ldc + 16 * p);
    const float *ar[KERN_GEMM_MR]; /* one base per row, so each broadcast is base + 4 k */
#pragma GCC unroll 6
    for (int i = 0; i < MR; i++) ar[i] = a + (size_t)i * lda;
    for (int k = 0; k < kc; k++, bp += 16) {
        __m512 b[4];
#pragma GCC unroll 4
        for (int p = 0; p < NP; p++) b[p] = _mm512_loadu_ps(bp + (size_t)p * ps);
#pragma GCC unroll 6
        for (int i = 0; i < MR; i++) {
            const __m512 av = _mm512_set1_ps(ar[i][k]);
#pragma GCC unroll 4
            for (int p = 0; p < NP; p++) acc[i][p] = _mm512_fmadd_ps(av, b[p], acc[i][p]);
        }
    }
#pragma GCC unroll 6
    for (int i = 0; i < MR; i++)
#pragma GCC unroll 4
        for (int p = 0; p < NP; p++) _mm512_storeu_ps(c + (size_t)i * ldc + 16 * p, acc[i][p]);
}

/* MR as a constant for each row count; NP 4 (a whole chunk) or 1. */
static void tile_any(int mr, int np, int kc, const float *a, size_t lda, const float *bp, size_t ps, float *c,
                     size_t ldc) {
    // clang-format off
    switch (mr) {
#define R(r) case r: if (np == 4) tile(r, 4, kc, a, lda, bp, ps, c, ldc); else tile(r, 1, kc, a, lda, bp, ps, c, ldc); return;
    R(1) R(2) R(3) R(4) R(5)
#undef R
    default: if (np == 4) tile(6, 4, kc, a, lda, bp, ps, c, ldc); else tile(6, 1, kc, a, lda, bp, ps, c, ldc); return;
    }
    // clang-format on
}

void kern_gemm_tile_avx512(int mr, int nr, int kc, const float *a, size_t lda, const float *bp, float *c, size_t ldc) {
    const size_t ps = (size_t)kc * 16;
    int j = 0;
    if (nr == 64) {
        tile_any(mr, 4, kc, a, lda, bp, ps, c, ldc);
        return;
    }
    for (; j + 16 <= nr; j += 16, bp += ps) tile_any(mr, 1, kc, a, lda, bp, ps, c + j, ldc);
    if (j == nr) return;
    /* the last columns: through a full-width copy (the panel's extra
     * columns are zero) */
    _Alignas(64) float t[KERN_GEMM_MR * 16] = {0};
    for (int i = 0; i < mr; i++) memcpy(t + 16 * i, c + (size_t)i * ldc + j, (size_t)(nr - j) * sizeof *t);
    tile_any(mr, 1, kc, a, lda, bp, ps, t, 16);
    for (int i = 0; i < mr; i++) memcpy(c + (size_t)i * ldc + j, t + 16 * i, (size_t)(nr - j) * sizeof *t);
}
