/*
 * matmul_avx2.c — the AVX2 F16 block kernel for F16 weights (see kern_tile_fn
 * in matmul.h): rows x tokens of products in the lane order of the AVX2
 * F16 vec_dot (dot_f16 in quant/legacy_avx2.c), which is
 *     lane l (of 8) sums w[k] * a[k] for k = l, l + 8, l + 16, ... with one
 *     fma per element, the last partial group of 8 zero-padded; the 8 lanes
 *     are then added as ((l0 + l4) + (l2 + l6)) + ((l1 + l5) + (l3 + l7))
 * (quant_dot_f16_lanes(.., 8) is its scalar twin).  Each output is thus the
 * very float the one-row dot gives, whatever batch its token is in.
 *
 * The body (k-blocks, register tiles, the one-token path, tails) is
 * matmul_f16.h's; this file gives it the vector width.
 */
#include "kernels/matmul.h"

#include "kernels/level.h"
#include "quant/x86.h"

#include <immintrin.h>
#include <string.h>

/* The width layer of matmul_f16.h: 8 lanes, a 3 x 4 register tile (12
 * independent chains, enough to keep both FMA pipes busy; 12 + 3 + 1 of
 * the 16 ymm registers). */
#define LANES 8
#define TR 3
#define TT 4
typedef __m256 vecf;
static inline vecf vzero(void) { return _mm256_setzero_ps(); }
static inline vecf vload(const float *p) { return _mm256_loadu_ps(p); }
static inline vecf vload_h(const uint16_t *p) { return load_h8(p); }
static inline vecf vfma(vecf a, vecf b, vecf c) { return _mm256_fmadd_ps(a, b, c); }
static inline void vstore(float *p, vecf v) { _mm256_storeu_ps(p, v); }
static inline float vsum(vecf v) { return hsum8(v); }
/* the builtin: GCC 12 drops an _mm_prefetch wrapped in an inline function */
static inline void vprefetch(const char *p) { __builtin_prefetch(p, 0, 3); }

#include "kernels/matmul_f16.h"

void kern_tile_f16_avx2(int n, const void *w, size_t wrow, int nr, const void *a, size_t arow, int nt, float *y,
                        int64_t ldy) {
    tile_f16(n, w, wrow, nr, a, arow, nt, y, ldy);
}
