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

static inline float f16(uint16_t h) { return kq_f16_to_f32(h); }

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

static inline uint32_t iq3xxs_word(const kq_block_iq3_xxs *b, int ib) {
    const uint8_t *p = b->qs + KQ_QK_K / 4 + 4 * ib;
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* ---------------------------------------------------------------------- */
/* IQ2_XXS                                                                */
/* ---------------------------------------------------------------------- */

static void iq2_xxs_to_f32(const void *vx, float *y, int64_t n) {
    const kq_block_iq2_xxs *x = vx;
    for (int64_t i = 0; i < n / KQ_QK_K; ++i) {
        const float d = f16(x[i].d);
        for (int ib = 0; ib < 8; ++ib) {
            uint32_t a, b;
            xxs_words(x[i].qs, ib, &a, &b);
            const float db = d * (0.5f + (float)(b >> 28)) * 0.25f;
            for (int l = 0; l < 4; ++l, y += 8)
                put8(y, db, kq_iq2xxs_grid[(a >> (8 * l)) & 255], kq_iq_signs(b >> (7 * l)));
        }
    }
}

static void iq2_xxs_dot(int n, float *s, const void *vx, const void *vy) {
    const kq_block_iq2_xxs *x = vx;
    const kq_block_q8_K *y = vy;
    float sum = 0;
    for (int i = 0; i < n / KQ_QK_K; ++i) {
        const float d = f16(x[i].d) * y[i].d;
        int bsum = 0;
        for (int ib = 0; ib < 8; ++ib) {
            uint32_t a, b;
            xxs_words(x[i].qs, ib, &a, &b);
            int dot = 0;
            for (int l = 0; l < 4; ++l)
                dot += dot8(kq_iq2xxs_grid[(a >> (8 * l)) & 255], kq_iq_signs(b >> (7 * l)), y[i].qs + 32 * ib + 8 * l);
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
    const kq_block_iq2_xs *x = vx;
    for (int64_t i = 0; i < n / KQ_QK_K; ++i) {
        const float d = f16(x[i].d);
        for (int g = 0; g < 32; ++g, y += 8) {
            const int sc = (x[i].scales[g / 4] >> (4 * ((g / 2) & 1))) & 15;
            const float db = d * (0.5f + (float)sc) * 0.25f;
            const uint16_t q = x[i].qs[g];
            put8(y, db, kq_iq2xs_grid[q & 511], kq_iq_signs(q >> 9));
        }
    }
}

static void iq2_xs_dot(int n, float *s, const void *vx, const void *vy) {
    const kq_block_iq2_xs *x = vx;
    const kq_block_q8_K *y = vy;
    float sum = 0;
    for (int i = 0; i < n / KQ_QK_K; ++i) {
        const float d = f16(x[i].d) * y[i].d;
        int bsum = 0;
        for (int h = 0; h < 16; ++h) { /* runs of 16 weights, one scale each */
            const int sc = (x[i].scales[h / 2] >> (4 * (h & 1))) & 15;
            int dot = 0;
            for (int g = 2 * h; g < 2 * h + 2; ++g)
                dot += dot8(kq_iq2xs_grid[x[i].qs[g] & 511], kq_iq_signs(x[i].qs[g] >> 9), y[i].qs + 8 * g);
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
    const kq_block_iq2_s *x = vx;
    for (int64_t i = 0; i < n / KQ_QK_K; ++i) {
        const float d = f16(x[i].d);
        for (int g = 0; g < 32; ++g, y += 8) {
            const int sc = (x[i].scales[g / 4] >> (4 * ((g / 2) & 1))) & 15;
            const float db = d * (0.5f + (float)sc) * 0.25f;
            put8(y, db, kq_iq2s_grid[kq_iq2s_index(&x[i], g)], x[i].qs[KQ_QK_K / 8 + g]);
        }
    }
}

static void iq2_s_dot(int n, float *s, const void *vx, const void *vy) {
    const kq_block_iq2_s *x = vx;
    const kq_block_q8_K *y = vy;
    float sum = 0;
    for (int i = 0; i < n / KQ_QK_K; ++i) {
        const float d = f16(x[i].d) * y[i].d;
        int bsum = 0;
        for (int h = 0; h < 16; ++h) {
            const int sc = (x[i].scales[h / 2] >> (4 * (h & 1))) & 15;
            int dot = 0;
            for (int g = 2 * h; g < 2 * h + 2; ++g)
                dot += dot8(kq_iq2s_grid[kq_iq2s_index(&x[i], g)], x[i].qs[KQ_QK_K / 8 + g], y[i].qs + 8 * g);
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
    const kq_block_iq3_xxs *x = vx;
    for (int64_t i = 0; i < n / KQ_QK_K; ++i) {
        const float d = f16(x[i].d);
        for (int ib = 0; ib < 8; ++ib) {
            const uint32_t b = iq3xxs_word(&x[i], ib);
            const float db = d * (0.5f + (float)(b >> 28)) * 0.5f;
            for (int l = 0; l < 4; ++l, y += 8) {
                const uint8_t *q = x[i].qs + 8 * ib + 2 * l;
                put8(y, db, pair(kq_iq3xxs_grid[q[0]], kq_iq3xxs_grid[q[1]]), kq_iq_signs(b >> (7 * l)));
            }
        }
    }
}

static void iq3_xxs_dot(int n, float *s, const void *vx, const void *vy) {
    const kq_block_iq3_xxs *x = vx;
    const kq_block_q8_K *y = vy;
    float sum = 0;
    for (int i = 0; i < n / KQ_QK_K; ++i) {
        const float d = f16(x[i].d) * y[i].d;
        int bsum = 0;
        for (int ib = 0; ib < 8; ++ib) {
            const uint32_t b = iq3xxs_word(&x[i], ib);
            int dot = 0;
            for (int l = 0; l < 4; ++l) {
                const uint8_t *q = x[i].qs + 8 * ib + 2 * l;
                dot += dot8(pair(kq_iq3xxs_grid[q[0]], kq_iq3xxs_grid[q[1]]), kq_iq_signs(b >> (7 * l)),
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
    const kq_block_iq3_s *x = vx;
    for (int64_t i = 0; i < n / KQ_QK_K; ++i) {
        const float d = f16(x[i].d);
        for (int g = 0; g < 32; ++g, y += 8) {
            const int sc = (x[i].scales[g / 8] >> (4 * ((g / 4) & 1))) & 15;
            const float db = d * (float)(1 + 2 * sc);
            put8(y, db, pair(kq_iq3s_grid[kq_iq3s_index(&x[i], 2 * g)], kq_iq3s_grid[kq_iq3s_index(&x[i], 2 * g + 1)]),
                 x[i].signs[g]);
        }
    }
}

static void iq3_s_dot(int n, float *s, const void *vx, const void *vy) {
    const kq_block_iq3_s *x = vx;
    const kq_block_q8_K *y = vy;
    float sum = 0;
    for (int i = 0; i < n / KQ_QK_K; ++i) {
        const float d = f16(x[i].d) * y[i].d;
        int bsum = 0;
        for (int ib = 0; ib < 8; ++ib) {
            const int sc = (x[i].scales[ib / 2] >> (4 * (ib & 1))) & 15;
            int dot = 0;
            for (int g = 4 * ib; g < 4 * ib + 4; ++g)
                dot +=
                    dot8(pair(kq_iq3s_grid[kq_iq3s_index(&x[i], 2 * g)], kq_iq3s_grid[kq_iq3s_index(&x[i], 2 * g + 1)]),
                         x[i].signs[g], y[i].qs + 8 * g);
            bsum += dot * (2 * sc + 1);
        }
        sum += d * (float)bsum;
    }
    *s = sum;
}

/* ---------------------------------------------------------------------- */
/* Table                                                                  */
/* ---------------------------------------------------------------------- */

static void set(kq_traits *tab, int t, const char *name, size_t bsize, kq_to_f32_fn to, kq_vec_dot_fn dot) {
    tab[t] = (kq_traits){
        .name = name,
        .blck = KQ_QK_K,
        .bsize = bsize,
        .vec_dot_type = KQ_Q8_K,
        .to_f32 = to,
        .vec_dot = dot,
        .vec_dot_ref = dot,
    };
}

void kq_fill_iquants(kq_traits *tab) {
    set(tab, KQ_IQ2_XXS, "IQ2_XXS", sizeof(kq_block_iq2_xxs), iq2_xxs_to_f32, iq2_xxs_dot);
    set(tab, KQ_IQ2_XS, "IQ2_XS", sizeof(kq_block_iq2_xs), iq2_xs_to_f32, iq2_xs_dot);
    set(tab, KQ_IQ2_S, "IQ2_S", sizeof(kq_block_iq2_s), iq2_s_to_f32, iq2_s_dot);
    set(tab, KQ_IQ3_XXS, "IQ3_XXS", sizeof(kq_block_iq3_xxs), iq3_xxs_to_f32, iq3_xxs_dot);
    set(tab, KQ_IQ3_S, "IQ3_S", sizeof(kq_block_iq3_s), iq3_s_to_f32, iq3_s_dot);
}
