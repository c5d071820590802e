/*
 * matmul_f16.h — the body of the F16 block kernel (kern_tile_fn in matmul.h),
 * written once against a small width layer and included by matmul_avx2.c
 * (8 lanes) and matmul_avx512.c (16 lanes), which define before including:
 *     LANES              floats per vector
 *     TR, TT             register tile rows (3 or 4) and tokens (4 or 8)
 *     vecf               the float vector type
 *     vzero()            all lanes 0
 *     vload(p)           LANES floats at p (unaligned)
 *     vload_h(p)         LANES halves at p widened to floats (exact)
 *     vfma(a, b, c)      a * b + c, one rounding per lane
 *     vstore(p, v)       LANES floats to p (unaligned)
 *     vsum(v)            the lanes added in the one-row dot's order
 *     vprefetch(p)       a hint to fetch the cache line at p (never faults)
 * Every output is the float the same level's one-row F16 vec_dot gives:
 * lane l sums w[k] * a[k] for k = l mod LANES with one fma each, the last
 * partial group zero-padded, then vsum (quant_dot_f16_lanes is the scalar
 * twin), so a token's result never depends on the batch it is in.
 *
 * Shape: the tokens' F16 activations are widened once per k-block of KB
 * elements into an F32 buffer in L1 (TT x KB floats) that RB rows reuse;
 * a TR x TT register tile of accumulators (one per output) holds TR weight
 * rows against TT tokens, per LANES elements TR weight conversions and TT
 * activation loads (each used by the TR rows as it arrives) for TR * TT
 * fmas.  The RB x TT partial sums survive from
 * one k-block to the next in memory (a store and a load keep their bits).
 * One token (decode) takes 8 rows at a time, 8 independent chains, the
 * activation widened once per group for all of them, the 8 rows an eighth
 * of the block apart (tile_one_token).
 *
 * The loops over the tile are unrolled by pragma so their arrays of vectors
 * live in registers (-O2 would keep them on the stack).
 */
#ifndef KILN_KERNELS_MATMUL_F16_H
#define KILN_KERNELS_MATMUL_F16_H

#include <stdint.h>
#include <string.h>

#if !defined(LANES) || !defined(TR) || (TR != 3 && TR != 4) || !defined(TT) || (TT != 4 && TT != 8)
#error "define LANES, TR (3 or 4), TT (4 or 8) and the width layer before including matmul_f16.h"
#endif

#define KB 512 /* elements per k-block: TT rows of KB floats = 8 or 16 KB of L1 */
#define RB 128 /* rows that reuse one buffered k-block; their RB * TT partial sums live across k-blocks */
/* One token: each row's stream is hinted this many bytes ahead, a line per
 * 32 elements (the hardware prefetch stops at a 4 KB page, the hint does
 * not; past a stream's end it lands in the next stream's rows or past the
 * block, harmless).  One thread, weights from memory in 4 KB pages: 256 and
 * 384 bytes gave 7-10 % over none; 128 less, 1024 lost. */
#define PF_AHEAD 256

/* part[r * TT + t] += rows wr[r] (F16) . buffered tokens ab + t * KB (F32)
 * over nk groups of LANES elements, for r < R, t < T. */
static inline __attribute__((always_inline)) void micro(const int R, const int T, int nk, const uint16_t *const *wr,
                                                        const float *ab, vecf *part) {
    vecf acc[TR][TT];
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
#pragma GCC unroll 8
        for (int t = 0; t < T; t++) acc[r][t] = part[r * TT + t];
    for (int i = 0; i < nk; i++) {
        vecf wv[TR];
#pragma GCC unroll 4
        for (int r = 0; r < R; r++) wv[r] = vload_h(wr[r] + LANES * i);
#pragma GCC unroll 8
        for (int t = 0; t < T; t++) {
            const vecf av = vload(ab + (size_t)t * KB + LANES * i);
#pragma GCC unroll 4
            for (int r = 0; r < R; r++) acc[r][t] = vfma(wv[r], av, acc[r][t]);
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
#pragma GCC unroll 8
        for (int t = 0; t < T; t++) part[r * TT + t] = acc[r][t];
}

static void micro_any(int R, int T, int nk, const uint16_t *const *wr, const float *ab, vecf *part) {
    // clang-format off
    switch (R * 16 + T) {
#define M(r, t) case r * 16 + t: micro(r, t, nk, wr, ab, part); break;
#define M4(r) M(r, 1) M(r, 2) M(r, 3) M(r, 4)
#define M8(r) M4(r) M(r, 5) M(r, 6) M(r, 7) M(r, 8)
#if TT == 4
    M4(1) M4(2) M(3, 1) M(3, 2) M(3, 3)
#if TR == 4
    M(3, 4) M(4, 1) M(4, 2) M(4, 3)
#endif
#else
    M8(1) M8(2) M(3, 1) M(3, 2) M(3, 3) M(3, 4) M(3, 5) M(3, 6) M(3, 7)
#if TR == 4
    M(3, 8) M(4, 1) M(4, 2) M(4, 3) M(4, 4) M(4, 5) M(4, 6) M(4, 7)
#endif
#endif
#undef M8
#undef M4
#undef M
    default: micro(TR, TT, nk, wr, ab, part); break;
    }
    // clang-format on
}

/* One token (decode): y[r] for R rows at wr[r], 8 independent chains when
 * R = 8, the activation widened once per group for all of them; the same
 * lane order, so the same bits. */
static inline __attribute__((always_inline)) void one_token(const int R, int n, const uint16_t *const *wr,
                                                            const uint16_t *q, const uint16_t *qtail, float *y) {
    vecf acc[8];
#pragma GCC unroll 8
    for (int r = 0; r < R; r++) acc[r] = vzero();
    int i = 0;
    for (; i + LANES <= n; i += LANES) {
        if (R == 8 && i % 32 == 0) {
#pragma GCC unroll 8
            for (int r = 0; r < R; r++) vprefetch((const char *)(wr[r] + i) + PF_AHEAD);
        }
        const vecf av = vload_h(q + i);
#pragma GCC unroll 8
        for (int r = 0; r < R; r++) acc[r] = vfma(vload_h(wr[r] + i), av, acc[r]);
    }
    if (i < n) { /* the rows end inside this group: zero-padded copies */
        const vecf av = vload_h(qtail);
        for (int r = 0; r < R; r++) {
            _Alignas(64) uint16_t wt[LANES] = {0};
            memcpy(wt, wr[r] + i, (size_t)(n - i) * sizeof(uint16_t));
            acc[r] = vfma(vload_h(wt), av, acc[r]);
        }
    }
#pragma GCC unroll 8
    for (int r = 0; r < R; r++) y[r] = vsum(acc[r]);
}

/* The 8 chains take rows j, m + j, ..., 7m + j (m = nr / 8) for j = 0, 1,
 * .. so each reads one run of m contiguous rows from start to end: eight
 * long linear streams, which the hardware prefetch keeps ahead of.  Eight
 * adjacent rows instead are eight streams of one row each (2 KB at 1024
 * columns) that end before the prefetch has ramped up: half the bandwidth
 * of one thread at 1024 columns. */
static void tile_one_token(int n, const void *w, size_t wrow, int nr, const uint16_t *q, float *y) {
    _Alignas(64) uint16_t qtail[LANES] = {0};
    if (n % LANES) memcpy(qtail, q + n / LANES * LANES, (size_t)(n % LANES) * sizeof(uint16_t));
    const uint16_t *wr[8];
    const int m = nr / 8;
    for (int j = 0; j < m; j++) {
        float yr[8];
        for (int i = 0; i < 8; i++) wr[i] = (const uint16_t *)((const uint8_t *)w + (size_t)(i * m + j) * wrow);
        one_token(8, n, wr, q, qtail, yr);
        for (int i = 0; i < 8; i++) y[i * m + j] = yr[i];
    }
    for (int r = 8 * m; r < nr; r++) {
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
    vecf part[RB * TT];
    for (int r0 = 0; r0 < nr; r0 += RB) {
        const int rn = nr - r0 < RB ? nr - r0 : RB;
        for (int t0 = 0; t0 < nt; t0 += TT) {
            const int tn = nt - t0 < TT ? nt - t0 : TT;
            for (int i = 0; i < rn * TT; i++) part[i] = vzero();
            for (int k0 = 0; k0 < n; k0 += KB) {
                const int kn = n - k0 < KB ? n - k0 : KB;
                const int full = kn / LANES, rest = kn % LANES;
                for (int t = 0; t < tn; t++) { /* widen the k-block of token t0 + t, zero-padded */
                    const uint16_t *q = (const uint16_t *)((const uint8_t *)a + (size_t)(t0 + t) * arow) + k0;
                    float *d = ab + (size_t)t * KB;
                    int i = 0;
                    for (; i + LANES <= kn; i += LANES) vstore(d + i, vload_h(q + i));
                    if (rest) {
                        uint16_t tmp[LANES] = {0};
                        memcpy(tmp, q + i, (size_t)rest * sizeof(uint16_t));
                        vstore(d + i, vload_h(tmp));
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
                            memcpy(wtail[i], wr[i] + LANES * full, (size_t)rest * sizeof(uint16_t));
                            wt[i] = wtail[i];
                        }
                        micro_any(rr, tn, 1, wt, ab + LANES * full, part + r * TT);
                    }
                }
            }
            for (int r = 0; r < rn; r++)
                for (int t = 0; t < tn; t++) y[(int64_t)(t0 + t) * ldy + r0 + r] = vsum(part[r * TT + t]);
        }
    }
}

#endif
