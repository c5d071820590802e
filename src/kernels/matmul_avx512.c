/*
 * matmul_avx512.c — the AVX-512 F16 block kernel for F16 weights (see
 * kern_tile_fn in matmul.h): rows x tokens of products in the lane order of
 * the AVX-512 F16 vec_dot (dot_f16 in quant/legacy_avx512.c), which is
 *     lane l (of 16) sums w[k] * a[k] for k = l, l + 16, l + 32, ... with
 *     one fma per element, the last partial group of 16 zero-padded; lanes
 *     l and l + 8 are added, then the 8 sums as the AVX2 dot adds its lanes
 * (quant_dot_f16_lanes(.., 16) is its scalar twin).  Each output is thus the
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

/* The width layer of matmul_f16.h: 16 lanes, a 3 x 8 register tile (24
 * chains; 24 + 3 + 1 of the 32 zmm registers): a weight conversion per 8
 * fmas and half the weight reads per fma of a 4 x 4 tile. */
#define LANES 16
#define TR 3
#define TT 8
typedef __m512 vecf;
static inline vecf vzero(void) { return _mm512_setzero_ps(); }
static inline vecf vload(const float *p) { return _mm512_loadu_ps(p); }
static inline vecf vload_h(const uint16_t *p) { return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p)); }
static inline vecf vfma(vecf a, vecf b, vecf c) { return _mm512_fmadd_ps(a, b, c); }
static inline void vstore(float *p, vecf v) { _mm512_storeu_ps(p, v); }
static inline float vsum(vecf v) { return hsum16(v); }
/* the builtin: GCC 12 drops an _mm_prefetch wrapped in an inline function */
static inline void vprefetch(const char *p) { __builtin_prefetch(p, 0, 3); }

#include "kernels/matmul_f16.h"

void kern_tile_f16_avx512(int n, const void *w, size_t wrow, int nr, const void *a, size_t arow, int nt, float *y,
                          int64_t ldy) {
    tile_f16(n, w, wrow, nr, a, arow, nt, y, ldy);
}
