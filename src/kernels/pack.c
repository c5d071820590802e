/* pack.c — q4_0x8 packing, kk_act8 quantization and the scalar kernel that
 * the SIMD twins (pack_avx2.c) are tested against. */
#include "kernels/pack.h"

#include "quant/quant.h"

#include <math.h>
#include <string.h>

#define QK 32

void kk_pack_q4_0x8(const void *w, size_t wrow, int b0, int nb, kk_q4_0x8 *out) {
    for (int i = 0; i < 8; i++) {
        const kq_block_q4_0 *src = (const kq_block_q4_0 *)((const uint8_t *)w + (size_t)i * wrow) + b0;
        for (int b = 0; b < nb; b++) {
            out[b].d[i] = src[b].d;
            for (int k = 0; k < 4; k++) memcpy(out[b].qs + 32 * k + 4 * i, src[b].qs + 4 * k, 4);
        }
    }
}

size_t kk_q4_0x8_size(int64_t ncols, int64_t nrows) {
    return (size_t)(nrows / 8) * (size_t)(ncols / QK) * sizeof(kk_q4_0x8);
}

void kk_pack_q4_0x8_matrix(const void *w, int64_t ncols, int64_t nrows, kk_q4_0x8 *out) {
    const int nb = (int)(ncols / QK);
    const size_t wrow = kq_row_size(KQ_Q4_0, ncols);
    for (int64_t g = 0; g < nrows / 8; g++)
        kk_pack_q4_0x8((const uint8_t *)w + (size_t)(8 * g) * wrow, wrow, 0, nb, out + (size_t)g * (size_t)nb);
}

void kk_act8_from_f32(const float *x, int64_t n, kk_act8 *a, size_t lda) {
    const kq_traits *q8 = kq_get(KQ_Q8_0);
    for (int64_t b = 0; b < n / QK; b++) {
        kq_block_q8_0 blk;
        q8->from_f32_fast(x + b * QK, &blk, QK);
        kk_act8 *o = a + (size_t)b * lda;
        int32_t s = 0;
        for (int j = 0; j < QK; j++) s += blk.qs[j];
        memcpy(o->qs, blk.qs, QK);
        o->d = kq_f16_to_f32(blk.d);
        o->s8 = 8 * s;
    }
}

static void x8_q4_0_ref(int nb, const kk_q4_0x8 *w, const kk_act8 *a, size_t lda, int n_tok, float *acc) {
    for (int b = 0; b < nb; b++) {
        const kk_q4_0x8 *wb = &w[b];
        for (int t = 0; t < n_tok; t++) {
            const kk_act8 *y = &a[(size_t)b * lda + (size_t)t];
            for (int i = 0; i < 8; i++) {
                int32_t s = 0;
                for (int k = 0; k < 4; k++)
                    for (int j = 0; j < 4; j++) {
                        const uint8_t q = wb->qs[32 * k + 4 * i + j];
                        s += (q & 0x0F) * y->qs[4 * k + j] + (q >> 4) * y->qs[16 + 4 * k + j];
                    }
                s -= y->s8;
                acc[8 * t + i] = fmaf((float)s, kq_f16_to_f32(wb->d[i]) * y->d, acc[8 * t + i]);
            }
        }
    }
}

kk_x8_fn kk_x8_q4_0_at(int isa) {
    if (isa == KQ_ISA_SCALAR) return x8_q4_0_ref;
    if (isa == KQ_ISA_AVX2 && kq_cpu_isa() >= KQ_ISA_AVX2) return kk_x8_q4_0_avx2();
    return NULL;
}

kk_x8_fn kk_x8_q4_0_best(void) {
    if (kq_active_isa() >= KQ_ISA_AVX2) return kk_x8_q4_0_avx2();
    return x8_q4_0_ref;
}
