/* pack.c — packing to the interleaved formats of pack.h, their activation
 * blocks, and the scalar kernels the SIMD twins (pack_avx2.c) are tested
 * against. */
#include "kernels/pack.h"

#include "kernels/level.h"
#include "quant/kquants_layout.h"
#include "quant/quant.h"

#include <math.h>
#include <string.h>

#define QK 32

/* ---- Q4_0 ---- */

void kern_pack_q4_0x8(const void *w, size_t wrow, int b0, int nb, kern_q4_0x8 *out) {
    for (int i = 0; i < 8; i++) {
        const quant_block_q4_0 *src = (const quant_block_q4_0 *)((const uint8_t *)w + (size_t)i * wrow) + b0;
        for (int b = 0; b < nb; b++) {
            out[b].d[i] = src[b].d;
            for (int k = 0; k < 4; k++) memcpy(out[b].qs + 32 * k + 4 * i, src[b].qs + 4 * k, 4);
        }
    }
}

static void pack_q4_0(const void *w, size_t wrow, int b0, int nb, void *out) { kern_pack_q4_0x8(w, wrow, b0, nb, out); }

/* Blocks quantized per from_f32_fast call (one call a block paid the call
 * and its setup per 32 elements). */
#define ACT8_ROW_BLOCKS 64

void kern_act8_from_f32(const float *x, int64_t n, kern_act8 *a, size_t lda) {
    const quant_traits *q8 = quant_get(QUANT_Q8_0);
    quant_block_q8_0 blk[ACT8_ROW_BLOCKS];
    for (int64_t b0 = 0; b0 < n / QK; b0 += ACT8_ROW_BLOCKS) {
        const int64_t nbk = n / QK - b0 < ACT8_ROW_BLOCKS ? n / QK - b0 : ACT8_ROW_BLOCKS;
        q8->from_f32_fast(x + b0 * QK, blk, nbk * QK);
        for (int64_t b = 0; b < nbk; b++) {
            kern_act8 *o = a + (size_t)(b0 + b) * lda;
            int32_t s = 0;
            for (int j = 0; j < QK; j++) s += blk[b].qs[j];
            memcpy(o->qs, blk[b].qs, QK);
            o->d = quant_f16_to_f32(blk[b].d);
            o->s8 = 8 * s;
        }
    }
}

static void act_q4_0(const float *x, int64_t n, void *a, size_t lda) { kern_act8_from_f32(x, n, a, lda); }

static void row_q4_0(const void *g, int i, int nb, float *out) {
    const kern_q4_0x8 *w = g;
    for (int b = 0; b < nb; b++) {
        const float d = quant_f16_to_f32(w[b].d[i]);
        for (int k = 0; k < 4; k++)
            for (int j = 0; j < 4; j++) {
                const uint8_t q = w[b].qs[32 * k + 4 * i + j];
                out[32 * b + 4 * k + j] = d * (float)((q & 0x0F) - 8);
                out[32 * b + 16 + 4 * k + j] = d * (float)((q >> 4) - 8);
            }
    }
}

static void x8_q4_0_ref(int nb, const void *vw, const void *va, size_t lda, int n_tok, float *acc) {
    const kern_q4_0x8 *w = vw;
    const kern_act8 *a = va;
    for (int b = 0; b < nb; b++) {
        const kern_q4_0x8 *wb = &w[b];
        for (int t = 0; t < n_tok; t++) {
            const kern_act8 *y = &a[(size_t)b * lda + (size_t)t];
            for (int i = 0; i < 8; i++) {
                int32_t s = 0;
                for (int k = 0; k < 4; k++)
                    for (int j = 0; j < 4; j++) {
                        const uint8_t q = wb->qs[32 * k + 4 * i + j];
                        s += (q & 0x0F) * y->qs[4 * k + j] + (q >> 4) * y->qs[16 + 4 * k + j];
                    }
                s -= y->s8;
                acc[8 * t + i] = fmaf((float)s, quant_f16_to_f32(wb->d[i]) * y->d, acc[8 * t + i]);
            }
        }
    }
}

/* ---- Q8_0 ---- */

static void pack_q8_0(const void *w, size_t wrow, int b0, int nb, void *vout) {
    kern_q8_0x8 *out = vout;
    for (int i = 0; i < 8; i++) {
        const quant_block_q8_0 *src = (const quant_block_q8_0 *)((const uint8_t *)w + (size_t)i * wrow) + b0;
        for (int b = 0; b < nb; b++) {
            out[b].d[i] = src[b].d;
            for (int k = 0; k < 8; k++) memcpy(out[b].qs + 32 * k + 4 * i, src[b].qs + 4 * k, 4);
        }
    }
}

static void row_q8_0(const void *g, int i, int nb, float *out) {
    const kern_q8_0x8 *w = g;
    for (int b = 0; b < nb; b++) {
        const float d = quant_f16_to_f32(w[b].d[i]);
        for (int e = 0; e < QK; e++) out[QK * b + e] = d * (float)w[b].qs[32 * (e / 4) + 4 * i + e % 4];
    }
}

static void x8_q8_0_ref(int nb, const void *vw, const void *va, size_t lda, int n_tok, float *acc) {
    const kern_q8_0x8 *w = vw;
    const kern_act8 *a = va;
    for (int b = 0; b < nb; b++)
        for (int t = 0; t < n_tok; t++) {
            const kern_act8 *y = &a[(size_t)b * lda + (size_t)t];
            for (int i = 0; i < 8; i++) {
                int32_t s = 0;
                for (int e = 0; e < QK; e++) s += w[b].qs[32 * (e / 4) + 4 * i + e % 4] * y->qs[e];
                acc[8 * t + i] = fmaf((float)s, quant_f16_to_f32(w[b].d[i]) * y->d, acc[8 * t + i]);
            }
        }
}

/* ---- Q6_K ---- */

static void pack_q6_K(const void *w, size_t wrow, int b0, int nb, void *vout) {
    kern_q6_Kx8 *out = vout;
    for (int i = 0; i < 8; i++) {
        const quant_block_q6_K *src = (const quant_block_q6_K *)((const uint8_t *)w + (size_t)i * wrow) + b0;
        for (int b = 0; b < nb; b++) {
            out[b].d[i] = src[b].d;
            for (int s = 0; s < 16; s++) out[b].sc[8 * s + i] = src[b].scales[s];
            for (int k = 0; k < 32; k++) memcpy(out[b].ql + 32 * k + 4 * i, src[b].ql + 4 * k, 4);
            for (int k = 0; k < 16; k++) memcpy(out[b].qh + 32 * k + 4 * i, src[b].qh + 4 * k, 4);
        }
    }
}

static void act_q8_K(const float *x, int64_t n, void *va, size_t lda) {
    const quant_traits *q8 = quant_get(QUANT_Q8_K);
    quant_block_q8_K *a = va;
    for (int64_t b = 0; b < n / QUANT_QK_K; b++) q8->from_f32_fast(x + b * QUANT_QK_K, a + (size_t)b * lda, QUANT_QK_K);
}

/* The 6-bit quant (0..63) of weight e of row i in a packed block. */
static inline int q6_at(const kern_q6_Kx8 *w, int i, int e) {
    const int h = e / 128, r = e % 128 / 32, l = e % 32;
    const int lb = 64 * h + 32 * (r & 1) + l; /* ql byte of the row */
    const int hb = 32 * h + l;                /* qh byte of the row */
    const uint8_t ql = w->ql[32 * (lb / 4) + 4 * i + lb % 4];
    const uint8_t qh = w->qh[32 * (hb / 4) + 4 * i + hb % 4];
    return (r < 2 ? ql & 0x0F : ql >> 4) | ((qh >> (2 * r)) & 3) << 4;
}

static void row_q6_K(const void *g, int i, int nb, float *out) {
    const kern_q6_Kx8 *w = g;
    for (int b = 0; b < nb; b++) {
        const float d = quant_f16_to_f32(w[b].d[i]);
        for (int e = 0; e < QUANT_QK_K; e++)
            out[QUANT_QK_K * b + e] = d * (float)w[b].sc[8 * (e / 16) + i] * (float)(q6_at(&w[b], i, e) - 32);
    }
}

/* Per block and (row, token): sum over sub-blocks s of sc_s * sum(q * y)
 * minus 32 * sum_s sc_s * bsum_s, exact in int32, then one fma. */
static void x8_q6_K_ref(int nb, const void *vw, const void *va, size_t lda, int n_tok, float *acc) {
    const kern_q6_Kx8 *w = vw;
    const quant_block_q8_K *a = va;
    for (int b = 0; b < nb; b++)
        for (int t = 0; t < n_tok; t++) {
            const quant_block_q8_K *y = &a[(size_t)b * lda + (size_t)t];
            for (int i = 0; i < 8; i++) {
                int32_t s = 0, o = 0;
                for (int sb = 0; sb < 16; sb++) {
                    int32_t p = 0;
                    for (int e = 16 * sb; e < 16 * sb + 16; e++) p += q6_at(&w[b], i, e) * y->qs[e];
                    s += w[b].sc[8 * sb + i] * p;
                    o += w[b].sc[8 * sb + i] * y->bsums[sb];
                }
                s -= 32 * o;
                acc[8 * t + i] = fmaf((float)s, quant_f16_to_f32(w[b].d[i]) * y->d, acc[8 * t + i]);
            }
        }
}

/* ---- Q4_K ---- */

static void pack_q4_K(const void *w, size_t wrow, int b0, int nb, void *vout) {
    kern_q4_Kx8 *out = vout;
    for (int i = 0; i < 8; i++) {
        const quant_block_q4_K *src = (const quant_block_q4_K *)((const uint8_t *)w + (size_t)i * wrow) + b0;
        for (int b = 0; b < nb; b++) {
            uint32_t sm[4];
            uint8_t bytes[16]; /* scales 0..7, mins 0..7 */
            quant_unpack_scales_k4(src[b].scales, sm);
            memcpy(bytes, sm, 16);
            out[b].d[i] = src[b].d;
            out[b].dmin[i] = src[b].dmin;
            for (int s = 0; s < 8; s++) {
                out[b].sc[8 * s + i] = bytes[s];
                out[b].mn[8 * s + i] = bytes[8 + s];
            }
            for (int k = 0; k < 32; k++) memcpy(out[b].qs + 32 * k + 4 * i, src[b].qs + 4 * k, 4);
        }
    }
}

/* The 4-bit quant of weight e of row i: qs byte 32g + l of the row holds
 * weights 64g + l (low nibble) and 64g + 32 + l (high). */
static inline int q4k_at(const kern_q4_Kx8 *w, int i, int e) {
    const int g = e / 64, hi = e % 64 >= 32, l = e % 32;
    const int byte = 32 * g + l;
    const uint8_t q = w->qs[32 * (byte / 4) + 4 * i + byte % 4];
    return hi ? q >> 4 : q & 0x0F;
}

static void row_q4_K(const void *g, int i, int nb, float *out) {
    const kern_q4_Kx8 *w = g;
    for (int b = 0; b < nb; b++) {
        const float d = quant_f16_to_f32(w[b].d[i]), dmin = quant_f16_to_f32(w[b].dmin[i]);
        for (int s = 0; s < 8; s++) {
            const float dl = d * w[b].sc[8 * s + i], ml = dmin * w[b].mn[8 * s + i];
            for (int e = 32 * s; e < 32 * s + 32; e++) out[QUANT_QK_K * b + e] = dl * (float)q4k_at(&w[b], i, e) - ml;
        }
    }
}

/* Per block and (row, token): isum = sum_s sc_s * sum(q * y) and msum =
 * sum_s mn_s * (the two 16-element sums of sub-block s), exact in int32;
 * then acc += isum * (d * dy), acc -= msum * (dmin * dy), two fmas. */
static void x8_q4_K_ref(int nb, const void *vw, const void *va, size_t lda, int n_tok, float *acc) {
    const kern_q4_Kx8 *w = vw;
    const quant_block_q8_K *a = va;
    for (int b = 0; b < nb; b++)
        for (int t = 0; t < n_tok; t++) {
            const quant_block_q8_K *y = &a[(size_t)b * lda + (size_t)t];
            for (int i = 0; i < 8; i++) {
                int32_t is = 0, ms = 0;
                for (int sb = 0; sb < 8; sb++) {
                    int32_t p = 0;
                    for (int e = 32 * sb; e < 32 * sb + 32; e++) p += q4k_at(&w[b], i, e) * y->qs[e];
                    is += w[b].sc[8 * sb + i] * p;
                    ms += w[b].mn[8 * sb + i] * (y->bsums[2 * sb] + y->bsums[2 * sb + 1]);
                }
                float r = fmaf((float)is, quant_f16_to_f32(w[b].d[i]) * y->d, acc[8 * t + i]);
                acc[8 * t + i] = fmaf(-(float)ms, quant_f16_to_f32(w[b].dmin[i]) * y->d, r);
            }
        }
}

/* ---- tables ---- */

static const kern_x8_traits k_x8[] = {
    {QUANT_Q4_0, QUANT_Q8_0, QK, sizeof(kern_q4_0x8), sizeof(kern_act8), pack_q4_0, act_q4_0, row_q4_0},
    {QUANT_Q8_0, QUANT_Q8_0, QK, sizeof(kern_q8_0x8), sizeof(kern_act8), pack_q8_0, act_q4_0, row_q8_0},
    {QUANT_Q4_K, QUANT_Q8_K, QUANT_QK_K, sizeof(kern_q4_Kx8), sizeof(quant_block_q8_K), pack_q4_K, act_q8_K, row_q4_K},
    {QUANT_Q6_K, QUANT_Q8_K, QUANT_QK_K, sizeof(kern_q6_Kx8), sizeof(quant_block_q8_K), pack_q6_K, act_q8_K, row_q6_K},
};

const kern_x8_traits *kern_x8_get(int t) {
    for (size_t i = 0; i < sizeof k_x8 / sizeof k_x8[0]; i++)
        if (k_x8[i].type == t) return &k_x8[i];
    return NULL;
}

/* The one-token kernels over groups: the block kernel per group. */
#define DEC_REF(NAME, FN, WT)                                                              \
    static void NAME(int ng, int nb, const void *w, const void *a, size_t lda, float *y) { \
        for (int g = 0; g < ng; g++, y += 8) {                                             \
            memset(y, 0, 8 * sizeof *y);                                                   \
            FN(nb, (const WT *)w + (size_t)g * (size_t)nb, a, lda, 1, y);                  \
        }                                                                                  \
    }
DEC_REF(dec_q4_0_ref, x8_q4_0_ref, kern_q4_0x8)
DEC_REF(dec_q8_0_ref, x8_q8_0_ref, kern_q8_0x8)
DEC_REF(dec_q4_K_ref, x8_q4_K_ref, kern_q4_Kx8)
DEC_REF(dec_q6_K_ref, x8_q6_K_ref, kern_q6_Kx8)

const kern_x8_set kern_x8_scalar = {
    .fn = {[QUANT_Q4_0] = x8_q4_0_ref,
           [QUANT_Q8_0] = x8_q8_0_ref,
           [QUANT_Q4_K] = x8_q4_K_ref,
           [QUANT_Q6_K] = x8_q6_K_ref},
    .dec = {[QUANT_Q4_0] = dec_q4_0_ref,
            [QUANT_Q8_0] = dec_q8_0_ref,
            [QUANT_Q4_K] = dec_q4_K_ref,
            [QUANT_Q6_K] = dec_q6_K_ref},
};

size_t kern_x8_matrix_size(int t, int64_t ncols, int64_t nrows) {
    const kern_x8_traits *x = kern_x8_get(t);
    return x ? (size_t)(nrows / 8) * (size_t)(ncols / x->blk) * x->pblock : 0;
}

void kern_x8_pack_matrix(int t, const void *w, int64_t ncols, int64_t nrows, void *out) {
    const kern_x8_traits *x = kern_x8_get(t);
    const int nb = (int)(ncols / x->blk);
    const size_t wrow = quant_row_size(t, ncols);
    for (int64_t g = 0; g < nrows / 8; g++)
        x->pack((const uint8_t *)w + (size_t)(8 * g) * wrow, wrow, 0, nb,
                (uint8_t *)out + (size_t)g * (size_t)nb * x->pblock);
}
