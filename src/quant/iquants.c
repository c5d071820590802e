/*
 * The lattice types IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS and IQ3_S: scalar
 * dequantizers and reference dot kernels against Q8_K activations.
 *
 * Dequantization is bit-equal to ggml's: the run scale d * (0.5 + s) * k
 * is formed in float in that order, then multiplied by the magnitude, then
 * by the sign (exact).  The dots sum grid * q8 * sign exactly in integers
 * per block, then accumulate d_x * d_y * sum in float block by block and
 * apply the type's final factor, as ggml's reference does; the SIMD twins
 * form the same integers and do the same float steps, so they match bit
 * for bit.  (Compiled without FMA flags: no contraction.)
 *
 * Layouts are described in iquants_layout.h.
 */
#include "iquants_layout.h"

#include <float.h>
#include <math.h>
#include <pthread.h>
#include <string.h>

static inline float f16(uint16_t h) { return quant_f16_to_f32(h); }

/* y[0..7] = db * magnitudes of grid entry g, negated where signs has a bit. */
static inline void put8(float *y, float db, uint64_t g, uint8_t signs) {
    for (int j = 0; j < 8; ++j) {
        const float v = db * (float)(uint8_t)(g >> (8 * j));
        y[j] = (signs >> j) & 1 ? -v : v;
    }
}

/* Dot of the 8 magnitudes of g (signed by signs) with q[0..7]. */
static inline int dot8(uint64_t g, uint8_t signs, const int8_t *q) {
    int s = 0;
    for (int j = 0; j < 8; ++j) {
        const int v = (uint8_t)(g >> (8 * j)) * q[j];
        s += (signs >> j) & 1 ? -v : v;
    }
    return s;
}

/* The two uint32 of IQ2_XXS run ib: grid bytes (a) and signs + scale (b). */
static inline void xxs_words(const uint16_t *qs, int ib, uint32_t *a, uint32_t *b) {
    *a = (uint32_t)qs[4 * ib] | (uint32_t)qs[4 * ib + 1] << 16;
    *b = (uint32_t)qs[4 * ib + 2] | (uint32_t)qs[4 * ib + 3] << 16;
}

/* The two 4-magnitude IQ3 grid entries of a group, as one 8-byte entry. */
static inline uint64_t pair(uint32_t lo, uint32_t hi) { return (uint64_t)lo | (uint64_t)hi << 32; }

static inline uint32_t iq3xxs_word(const quant_block_iq3_xxs *b, int ib) {
    const uint8_t *p = b->qs + QUANT_QK_K / 4 + 4 * ib;
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* ---------------------------------------------------------------------- */
/* IQ2_XXS                                                                */
/* ---------------------------------------------------------------------- */

static void iq2_xxs_to_f32(const void *vx, float *y, int64_t n) {
    const quant_block_iq2_xxs *x = vx;
    for (int64_t i = 0; i < n / QUANT_QK_K; ++i) {
        const float d = f16(x[i].d);
        for (int ib = 0; ib < 8; ++ib) {
            uint32_t a, b;
            xxs_words(x[i].qs, ib, &a, &b);
            const float db = d * (0.5f + (float)(b >> 28)) * 0.25f;
            for (int l = 0; l < 4; ++l, y += 8)
                put8(y, db, quant_iq2xxs_grid[(a >> (8 * l)) & 255], quant_iq_signs(b >> (7 * l)));
        }
    }
}

static void iq2_xxs_dot(int n, float *s, const void *vx, const void *vy) {
    const quant_block_iq2_xxs *x = vx;
    const quant_block_q8_K *y = vy;
    float sum = 0;
    for (int i = 0; i < n / QUANT_QK_K; ++i) {
        const float d = f16(x[i].d) * y[i].d;
        int bsum = 0;
        for (int ib = 0; ib < 8; ++ib) {
            uint32_t a, b;
            xxs_words(x[i].qs, ib, &a, &b);
            int dot = 0;
            for (int l = 0; l < 4; ++l)
                dot += dot8(quant_iq2xxs_grid[(a >> (8 * l)) & 255], quant_iq_signs(b >> (7 * l)),
                            y[i].qs + 32 * ib + 8 * l);
            bsum += dot * (int)(2 * (b >> 28) + 1);
        }
        sum += d * (float)bsum;
    }
    *s = 0.125f * sum;
}

/* ---------------------------------------------------------------------- */
/* IQ2_XS                                                                 */
/* ---------------------------------------------------------------------- */

static void iq2_xs_to_f32(const void *vx, float *y, int64_t n) {
    const quant_block_iq2_xs *x = vx;
    for (int64_t i = 0; i < n / QUANT_QK_K; ++i) {
        const float d = f16(x[i].d);
        for (int g = 0; g < 32; ++g, y += 8) {
            const int sc = (x[i].scales[g / 4] >> (4 * ((g / 2) & 1))) & 15;
            const float db = d * (0.5f + (float)sc) * 0.25f;
            const uint16_t q = x[i].qs[g];
            put8(y, db, quant_iq2xs_grid[q & 511], quant_iq_signs(q >> 9));
        }
    }
}

static void iq2_xs_dot(int n, float *s, const void *vx, const void *vy) {
    const quant_block_iq2_xs *x = vx;
    const quant_block_q8_K *y = vy;
    float sum = 0;
    for (int i = 0; i < n / QUANT_QK_K; ++i) {
        const float d = f16(x[i].d) * y[i].d;
        int bsum = 0;
        for (int h = 0; h < 16; ++h) { /* runs of 16 weights, one scale each */
            const int sc = (x[i].scales[h / 2] >> (4 * (h & 1))) & 15;
            int dot = 0;
            for (int g = 2 * h; g < 2 * h + 2; ++g)
                dot += dot8(quant_iq2xs_grid[x[i].qs[g] & 511], quant_iq_signs(x[i].qs[g] >> 9), y[i].qs + 8 * g);
            bsum += dot * (2 * sc + 1);
        }
        sum += d * (float)bsum;
    }
    *s = 0.125f * sum;
}

/* ---------------------------------------------------------------------- */
/* IQ2_S                                                                  */
/* ---------------------------------------------------------------------- */

static void iq2_s_to_f32(const void *vx, float *y, int64_t n) {
    const quant_block_iq2_s *x = vx;
    for (int64_t i = 0; i < n / QUANT_QK_K; ++i) {
        const float d = f16(x[i].d);
        for (int g = 0; g < 32; ++g, y += 8) {
            const int sc = (x[i].scales[g / 4] >> (4 * ((g / 2) & 1))) & 15;
            const float db = d * (0.5f + (float)sc) * 0.25f;
            put8(y, db, quant_iq2s_grid[quant_iq2s_index(&x[i], g)], x[i].qs[QUANT_QK_K / 8 + g]);
        }
    }
}

static void iq2_s_dot(int n, float *s, const void *vx, const void *vy) {
    const quant_block_iq2_s *x = vx;
    const quant_block_q8_K *y = vy;
    float sum = 0;
    for (int i = 0; i < n / QUANT_QK_K; ++i) {
        const float d = f16(x[i].d) * y[i].d;
        int bsum = 0;
        for (int h = 0; h < 16; ++h) {
            const int sc = (x[i].scales[h / 2] >> (4 * (h & 1))) & 15;
            int dot = 0;
            for (int g = 2 * h; g < 2 * h + 2; ++g)
                dot += dot8(quant_iq2s_grid[quant_iq2s_index(&x[i], g)], x[i].qs[QUANT_QK_K / 8 + g], y[i].qs + 8 * g);
            bsum += dot * (2 * sc + 1);
        }
        sum += d * (float)bsum;
    }
    *s = 0.125f * sum;
}

/* ---------------------------------------------------------------------- */
/* IQ3_XXS                                                                */
/* ---------------------------------------------------------------------- */

static void iq3_xxs_to_f32(const void *vx, float *y, int64_t n) {
    const quant_block_iq3_xxs *x = vx;
    for (int64_t i = 0; i < n / QUANT_QK_K; ++i) {
        const float d = f16(x[i].d);
        for (int ib = 0; ib < 8; ++ib) {
            const uint32_t b = iq3xxs_word(&x[i], ib);
            const float db = d * (0.5f + (float)(b >> 28)) * 0.5f;
            for (int l = 0; l < 4; ++l, y += 8) {
                const uint8_t *q = x[i].qs + 8 * ib + 2 * l;
                put8(y, db, pair(quant_iq3xxs_grid[q[0]], quant_iq3xxs_grid[q[1]]), quant_iq_signs(b >> (7 * l)));
            }
        }
    }
}

static void iq3_xxs_dot(int n, float *s, const void *vx, const void *vy) {
    const quant_block_iq3_xxs *x = vx;
    const quant_block_q8_K *y = vy;
    float sum = 0;
    for (int i = 0; i < n / QUANT_QK_K; ++i) {
        const float d = f16(x[i].d) * y[i].d;
        int bsum = 0;
        for (int ib = 0; ib < 8; ++ib) {
            const uint32_t b = iq3xxs_word(&x[i], ib);
            int dot = 0;
            for (int l = 0; l < 4; ++l) {
                const uint8_t *q = x[i].qs + 8 * ib + 2 * l;
                dot += dot8(pair(quant_iq3xxs_grid[q[0]], quant_iq3xxs_grid[q[1]]), quant_iq_signs(b >> (7 * l)),
                            y[i].qs + 32 * ib + 8 * l);
            }
            bsum += dot * (int)(2 * (b >> 28) + 1);
        }
        sum += d * (float)bsum;
    }
    *s = 0.25f * sum;
}

/* ---------------------------------------------------------------------- */
/* IQ3_S                                                                  */
/* ---------------------------------------------------------------------- */

static void iq3_s_to_f32(const void *vx, float *y, int64_t n) {
    const quant_block_iq3_s *x = vx;
    for (int64_t i = 0; i < n / QUANT_QK_K; ++i) {
        const float d = f16(x[i].d);
        for (int g = 0; g < 32; ++g, y += 8) {
            const int sc = (x[i].scales[g / 8] >> (4 * ((g / 4) & 1))) & 15;
            const float db = d * (float)(1 + 2 * sc);
            put8(y, db,
                 pair(quant_iq3s_grid[quant_iq3s_index(&x[i], 2 * g)],
                      quant_iq3s_grid[quant_iq3s_index(&x[i], 2 * g + 1)]),
                 x[i].signs[g]);
        }
    }
}

static void iq3_s_dot(int n, float *s, const void *vx, const void *vy) {
    const quant_block_iq3_s *x = vx;
    const quant_block_q8_K *y = vy;
    float sum = 0;
    for (int i = 0; i < n / QUANT_QK_K; ++i) {
        const float d = f16(x[i].d) * y[i].d;
        int bsum = 0;
        for (int ib = 0; ib < 8; ++ib) {
            const int sc = (x[i].scales[ib / 2] >> (4 * (ib & 1))) & 15;
            int dot = 0;
            for (int g = 4 * ib; g < 4 * ib + 4; ++g)
                dot += dot8(pair(quant_iq3s_grid[quant_iq3s_index(&x[i], 2 * g)],
                                 quant_iq3s_grid[quant_iq3s_index(&x[i], 2 * g + 1)]),
                            x[i].signs[g], y[i].qs + 8 * g);
            bsum += dot * (2 * sc + 1);
        }
        sum += d * (float)bsum;
    }
    *s = sum;
}

/* ---------------------------------------------------------------------- */
/* IQ3_S quantizer (what llama.cpp writes without an importance matrix)   */
/* ---------------------------------------------------------------------- */

/* A point of the 8^4 cube of 3-bit levels l (magnitude 2l + 1), packed as
 * u = l0 | l1 << 3 | l2 << 6 | l3 << 9.  A point off the grid keeps the
 * grid entries at its three smallest squared distances, nearest first and
 * by index within a distance: 24733 in all for the 3584 such points. */
#define IQ3S_NEIGHBOURS 24733
static struct {
    int16_t index[4096];  /* grid index of point u, -1 off the grid */
    uint16_t first[4096]; /* off the grid: its neighbours are nb[first .. first + count) */
    uint8_t count[4096];
    uint16_t nb[IQ3S_NEIGHBOURS];
} g_iq3s;
static pthread_once_t g_iq3s_once = PTHREAD_ONCE_INIT;

static inline int iq3s_level(uint32_t g, int i) { return (int)(((g >> (8 * i)) & 255) - 1) / 2; }

static void iq3s_build(void) {
    for (int u = 0; u < 4096; ++u) g_iq3s.index[u] = -1;
    for (int j = 0; j < 512; ++j) {
        int u = 0;
        for (int i = 0; i < 4; ++i) u |= iq3s_level(quant_iq3s_grid[j], i) << (3 * i);
        g_iq3s.index[u] = (int16_t)j;
    }
    int used = 0;
    for (int u = 0; u < 4096; ++u) {
        if (g_iq3s.index[u] >= 0) continue;
        int d2[512];
        for (int j = 0; j < 512; ++j) {
            d2[j] = 0;
            for (int i = 0; i < 4; ++i) {
                const int diff = 2 * iq3s_level(quant_iq3s_grid[j], i) - 2 * ((u >> (3 * i)) & 7);
                d2[j] += diff * diff;
            }
        }
        g_iq3s.first[u] = (uint16_t)used;
        int last = -1; /* the distance level taken last */
        for (int lv = 0; lv < 3; ++lv) {
            int next = INT32_MAX;
            for (int j = 0; j < 512; ++j)
                if (d2[j] > last && d2[j] < next) next = d2[j];
            for (int j = 0; j < 512 && used < IQ3S_NEIGHBOURS; ++j)
                if (d2[j] == next) g_iq3s.nb[used++] = (uint16_t)j;
            last = next;
        }
        g_iq3s.count[u] = (uint8_t)(used - g_iq3s.first[u]);
    }
}

/* Round to nearest, ties to even, for |v| < 2^22 (as ggml's nearest_int). */
static inline int round_int(float v) {
    float t = v + 12582912.f;
    int32_t i;
    memcpy(&i, &t, sizeof i);
    return (i & 0x007fffff) - 0x00400000;
}

/* The level (0..7) nearest to magnitude v at inverse scale id. */
static inline int iq3s_quant(float id, float v) {
    const int l = round_int(0.5f * (id * v - 1));
    return l < 0 ? 0 : l > 7 ? 7 : l;
}

/* Of the neighbours of off-grid point u, the one nearest (weighted by w) to
 * the 4 magnitudes x at scale; its levels into L. */
static int iq3s_best_neighbour(int u, const float *x, const float *w, float scale, int8_t *L) {
    float best = FLT_MAX;
    int gi = -1;
    for (int k = 0; k < g_iq3s.count[u]; ++k) {
        const int j = g_iq3s.nb[g_iq3s.first[u] + k];
        float d2 = 0;
        for (int i = 0; i < 4; ++i) {
            const float diff = scale * (float)(2 * iq3s_level(quant_iq3s_grid[j], i) + 1) - x[i];
            d2 += w[i] * diff * diff;
        }
        if (d2 < best) best = d2, gi = j;
    }
    for (int i = 0; i < 4; ++i) L[i] = (int8_t)iq3s_level(quant_iq3s_grid[gi], i);
    return gi;
}

/* Levels of the 8 groups of 4 in xv at inverse scale id, snapped to the
 * grid (an off-grid group takes its best neighbour at scale); on[k] says
 * whether group k was on the grid already. */
static void iq3s_snap(const float *xv, const float *w, float id, float scale, int8_t *L, int *on) {
    for (int k = 0; k < 8; ++k) {
        int u = 0;
        for (int i = 0; i < 4; ++i) {
            L[4 * k + i] = (int8_t)iq3s_quant(id, xv[4 * k + i]);
            u |= L[4 * k + i] << (3 * i);
        }
        on[k] = g_iq3s.index[u] >= 0;
        if (!on[k]) iq3s_best_neighbour(u, xv + 4 * k, w + 4 * k, scale, L + 4 * k);
    }
}

/* Weighted sums over a run: sum w x q and sum w q^2, q = 2l + 1. */
static void iq3s_sums(const float *w, const float *xv, const int8_t *L, float *sqx, float *sq2) {
    float a = 0, b = 0;
    for (int i = 0; i < 32; ++i) {
        const float q = (float)(2 * L[i] + 1);
        a += w[i] * xv[i] * q;
        b += w[i] * q * q;
    }
    *sqx = a, *sq2 = b;
}

/* One 32-weight run: the levels L, signs and the run's float scale; -1 for
 * a run of zeros. */
static float iq3s_run(const float *xb, int8_t *L, uint8_t signs[4]) {
    float w[32], sw[32], xv[32];
    for (int i = 0; i < 32; ++i) {
        w[i] = xb[i] * xb[i];
        sw[i] = sqrtf(w[i]);
    }
    for (int k = 0; k < 4; ++k) {
        signs[k] = 0;
        for (int i = 0; i < 8; ++i) {
            const float v = xb[8 * k + i];
            xv[8 * k + i] = v >= 0 ? v : -v;
            if (!(v >= 0)) signs[k] |= (uint8_t)(1 << i);
        }
    }
    float max = xv[0];
    for (int i = 1; i < 32; ++i) max = xv[i] > max ? xv[i] : max;
    memset(L, 0, 32);
    if (max == 0) return -1;
    /* 19 trial scales around max / 15; keep the one of best weighted fit */
    float best = 0, scale = max / 15;
    int on[8] = {0}, on_try[8];
    int8_t Lt[32];
    for (int is = -9; is <= 9; ++is) {
        const float id = (15 + (float)is * 0.2f) / max;
        iq3s_snap(xv, sw, id, 1 / id, Lt, on_try);
        float sqx, sq2;
        iq3s_sums(w, xv, Lt, &sqx, &sq2);
        if (sq2 > 0 && sqx * sqx > best * sq2) {
            scale = sqx / sq2;
            best = scale * sqx;
            memcpy(L, Lt, 32);
            memcpy(on, on_try, sizeof on);
        }
    }
    int off = 0;
    for (int k = 0; k < 8; ++k) off += !on[k];
    if (off > 0 && scale > 0) {
        /* requantize every group at the chosen scale, then refit it */
        iq3s_snap(xv, sw, 1 / scale, scale, L, on_try);
        float sqx, sq2;
        iq3s_sums(w, xv, L, &sqx, &sq2);
        if (sq2 > 0) scale = sqx / sq2;
    }
    if (scale < 0) { /* a negative fit: flip it and the signs */
        scale = -scale;
        for (int k = 0; k < 4; ++k) signs[k] = (uint8_t)~signs[k];
    }
    return scale;
}

static void iq3_s_from_f32(const float *x, void *vy, int64_t n) {
    pthread_once(&g_iq3s_once, iq3s_build);
    quant_block_iq3_s *y = vy;
    for (int64_t i = 0; i < n / QUANT_QK_K; ++i, x += QUANT_QK_K) {
        memset(&y[i], 0, sizeof y[i]);
        float scales[8], max_scale = 0;
        /* A run of zeros writes nothing and, as in llama.cpp's quantizer,
         * does not advance the qs / signs write position either (the next
         * run's bytes land in its place; qh is indexed by run): kiln writes
         * the bytes llama-quantize writes. */
        int at = 0;
        for (int ib = 0; ib < 8; ++ib) {
            int8_t L[32];
            uint8_t signs[4];
            const float sc = iq3s_run(x + 32 * ib, L, signs);
            scales[ib] = sc < 0 ? 0 : sc;
            if (sc < 0) continue;
            for (int k = 0; k < 8; ++k) {
                int u = 0;
                for (int j = 0; j < 4; ++j) u |= L[4 * k + j] << (3 * j);
                const int gi = g_iq3s.index[u]; /* on the grid by construction */
                y[i].qs[8 * at + k] = (uint8_t)(gi & 255);
                y[i].qh[ib] |= (uint8_t)((gi >> 8) << k);
            }
            memcpy(y[i].signs + 4 * at, signs, 4);
            at++;
            if (scales[ib] > max_scale) max_scale = scales[ib];
        }
        if (max_scale == 0) continue;
        const float d = max_scale / 31;
        y[i].d = quant_f32_to_f16(d * 1.033f);
        const float id = 1 / d;
        for (int ib = 0; ib < 8; ++ib) {
            int l = round_int(0.5f * (id * scales[ib] - 1));
            l = l < 0 ? 0 : l > 15 ? 15 : l;
            y[i].scales[ib / 2] |= (uint8_t)(l << (4 * (ib & 1)));
        }
    }
}

/* ---------------------------------------------------------------------- */
/* Table                                                                  */
/* ---------------------------------------------------------------------- */

void quant_fill_iquants(quant_traits *tab) {
    tab[QUANT_IQ2_XXS] = quant_traits_ref("IQ2_XXS", QUANT_QK_K, sizeof(quant_block_iq2_xxs), QUANT_Q8_K,
                                          iq2_xxs_to_f32, NULL, iq2_xxs_dot);
    tab[QUANT_IQ2_XS] =
        quant_traits_ref("IQ2_XS", QUANT_QK_K, sizeof(quant_block_iq2_xs), QUANT_Q8_K, iq2_xs_to_f32, NULL, iq2_xs_dot);
    tab[QUANT_IQ2_S] =
        quant_traits_ref("IQ2_S", QUANT_QK_K, sizeof(quant_block_iq2_s), QUANT_Q8_K, iq2_s_to_f32, NULL, iq2_s_dot);
    tab[QUANT_IQ3_XXS] = quant_traits_ref("IQ3_XXS", QUANT_QK_K, sizeof(quant_block_iq3_xxs), QUANT_Q8_K,
                                          iq3_xxs_to_f32, NULL, iq3_xxs_dot);
    tab[QUANT_IQ3_S] = quant_traits_ref("IQ3_S", QUANT_QK_K, sizeof(quant_block_iq3_s), QUANT_Q8_K, iq3_s_to_f32,
                                        iq3_s_from_f32, iq3_s_dot);
}
