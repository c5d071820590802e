/*
 * quant.cuh — GGUF weight blocks read on the device, byte for byte as the
 * file stores them (the layouts are documented in src/quant/quant.h and
 * src/quant/kquants_layout.h).  Type ids are GGUF's (kq_type).
 *
 * The unit of work is a chunk of 8 consecutive elements of a row starting
 * at an element index e that is a multiple of 8: every block size (32, 256)
 * is a multiple of 8, so a chunk never straddles blocks or sub-blocks, and
 * one warp covers 256 elements (32 lanes x 8) per step.
 */
#ifndef KILN_KCU_QUANT_CUH
#define KILN_KCU_QUANT_CUH

#include "kcu.cuh"

#define KCU_F32 0
#define KCU_F16 1
#define KCU_Q4_0 2
#define KCU_Q8_0 8
#define KCU_Q4_K 12
#define KCU_Q5_K 13
#define KCU_Q6_K 14
#define KCU_BF16 30

/* Elements per block and bytes per block of type T. */
template <int T> struct kcu_qt;
template <> struct kcu_qt<KCU_F32> { static const int blck = 1, bsize = 4; };
template <> struct kcu_qt<KCU_F16> { static const int blck = 1, bsize = 2; };
template <> struct kcu_qt<KCU_BF16> { static const int blck = 1, bsize = 2; };
template <> struct kcu_qt<KCU_Q4_0> { static const int blck = 32, bsize = 18; };
template <> struct kcu_qt<KCU_Q8_0> { static const int blck = 32, bsize = 34; };
template <> struct kcu_qt<KCU_Q4_K> { static const int blck = 256, bsize = 144; };
template <> struct kcu_qt<KCU_Q5_K> { static const int blck = 256, bsize = 176; };
template <> struct kcu_qt<KCU_Q6_K> { static const int blck = 256, bsize = 210; };

/* Bytes of a row of n elements (n a multiple of the block size). */
template <int T> KCU_DEV int64_t kcu_row_bytes(int64_t n) { return n / kcu_qt<T>::blck * kcu_qt<T>::bsize; }

/* Scale and min of sub-block j (0..7) of a Q4_K/Q5_K 12-byte scale field. */
KCU_DEV void kcu_scale_min_k4(int j, const uint8_t *q, int *sc, int *m) {
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
        *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
}

/* o[0..7] = elements e..e+7 of row (e a multiple of 8).  n: the row's
 * length; only the F32/F16/BF16 rows, whose length need not be a multiple
 * of 8, read it (elements past n are 0). */
template <int T> KCU_DEV void kcu_deq8(const uint8_t *row, int e, int n, float o[8]);

template <> KCU_DEV void kcu_deq8<KCU_F32>(const uint8_t *row, int e, int n, float o[8]) {
    const float *p = (const float *)row + e;
    for (int i = 0; i < 8; i++) o[i] = e + i < n ? p[i] : 0.0f;
}

template <> KCU_DEV void kcu_deq8<KCU_F16>(const uint8_t *row, int e, int n, float o[8]) {
    const uint16_t *p = (const uint16_t *)row + e;
    for (int i = 0; i < 8; i++) o[i] = e + i < n ? kcu_h2f(p[i]) : 0.0f;
}

template <> KCU_DEV void kcu_deq8<KCU_BF16>(const uint8_t *row, int e, int n, float o[8]) {
    const uint16_t *p = (const uint16_t *)row + e;
    for (int i = 0; i < 8; i++) o[i] = e + i < n ? kcu_bf2f(p[i]) : 0.0f;
}

/* Q4_0: d, then element j in the low nibble of qs[j] (j < 16) or the high
 * nibble of qs[j - 16]; value d * (q - 8). */
template <> KCU_DEV void kcu_deq8<KCU_Q4_0>(const uint8_t *row, int e, int n, float o[8]) {
    const uint8_t *b = row + (e >> 5) * 18;
    const float d = kcu_h2f(kcu_ld_u16(b));
    const int w = e & 31, shift = w >= 16 ? 4 : 0;
    const uint8_t *qs = b + 2 + (w & 15);
    for (int i = 0; i < 8; i++) o[i] = d * (float)(((qs[i] >> shift) & 0xF) - 8);
}

template <> KCU_DEV void kcu_deq8<KCU_Q8_0>(const uint8_t *row, int e, int n, float o[8]) {
    const uint8_t *b = row + (e >> 5) * 34;
    const float d = kcu_h2f(kcu_ld_u16(b));
    const int8_t *qs = (const int8_t *)(b + 2) + (e & 31);
    for (int i = 0; i < 8; i++) o[i] = d * (float)qs[i];
}

/* Q4_K: d, dmin, 12 scale bytes, 128 quant bytes; weight w of the block is
 * in group g = w / 64, byte 32g + w % 32, high nibble when w % 64 >= 32;
 * its sub-block is w / 32.  Value d * sc * q - dmin * m. */
template <> KCU_DEV void kcu_deq8<KCU_Q4_K>(const uint8_t *row, int e, int n, float o[8]) {
    const uint8_t *b = row + (e >> 8) * 144;
    const int w = e & 255;
    int sc, m;
    kcu_scale_min_k4(w >> 5, b + 4, &sc, &m);
    const float d = kcu_h2f(kcu_ld_u16(b)) * (float)sc, mn = kcu_h2f(kcu_ld_u16(b + 2)) * (float)m;
    const uint8_t *qs = b + 16 + 32 * (w >> 6) + (w & 31);
    const int shift = (w & 32) ? 4 : 0;
    for (int i = 0; i < 8; i++) o[i] = d * (float)((qs[i] >> shift) & 0xF) - mn;
}

/* Q5_K: as Q4_K with 32 qh bytes before qs; bit 2g (low nibble) or 2g + 1
 * (high nibble) of qh[w % 32] is the fifth bit. */
template <> KCU_DEV void kcu_deq8<KCU_Q5_K>(const uint8_t *row, int e, int n, float o[8]) {
    const uint8_t *b = row + (e >> 8) * 176;
    const int w = e & 255, g = w >> 6, hi = (w & 32) ? 1 : 0;
    int sc, m;
    kcu_scale_min_k4(w >> 5, b + 4, &sc, &m);
    const float d = kcu_h2f(kcu_ld_u16(b)) * (float)sc, mn = kcu_h2f(kcu_ld_u16(b + 2)) * (float)m;
    const uint8_t *qh = b + 16 + (w & 31);
    const uint8_t *qs = b + 48 + 32 * g + (w & 31);
    const int shift = hi ? 4 : 0, hbit = 2 * g + hi;
    for (int i = 0; i < 8; i++) {
        const int q = ((qs[i] >> shift) & 0xF) | (((qh[i] >> hbit) & 1) << 4);
        o[i] = d * (float)q - mn;
    }
}

/* Q6_K: ql[128], qh[64], int8 scales[16], d.  Weight w: half h = w / 128,
 * quarter k = (w % 128) / 32, l = w % 32; low 4 bits from ql[64h + 32(k&1)
 * + l] (high nibble when k >= 2), top 2 from bits 2k of qh[32h + l]; value
 * d * scales[w / 16] * (q - 32). */
template <> KCU_DEV void kcu_deq8<KCU_Q6_K>(const uint8_t *row, int e, int n, float o[8]) {
    const uint8_t *b = row + (e >> 8) * 210;
    const int w = e & 255, h = w >> 7, k = (w >> 5) & 3, l = w & 31;
    const float d = kcu_h2f(kcu_ld_u16(b + 208)) * (float)((const int8_t *)(b + 192))[w >> 4];
    const uint8_t *ql = b + 64 * h + 32 * (k & 1) + l;
    const uint8_t *qh = b + 128 + 32 * h + l;
    const int shift = k >= 2 ? 4 : 0;
    for (int i = 0; i < 8; i++) {
        const int q = ((ql[i] >> shift) & 0xF) | (((qh[i] >> (2 * k)) & 3) << 4);
        o[i] = d * (float)(q - 32);
    }
}

#endif
