/*
 * quant.cuh — GGUF weight blocks read on the device, byte for byte as the
 * file stores them (the layouts are documented in src/quant/quant.h and
 * src/quant/kquants_layout.h).  Type ids are GGUF's (quant_type).
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
#define KCU_Q4_1 3
#define KCU_Q5_0 6
#define KCU_Q5_1 7
#define KCU_Q8_0 8
#define KCU_Q2_K 10
#define KCU_Q3_K 11
#define KCU_Q4_K 12
#define KCU_Q5_K 13
#define KCU_Q6_K 14
#define KCU_IQ4_NL 20
#define KCU_IQ4_XS 23
#define KCU_BF16 30

/* Elements per block and bytes per block of type T. */
template <int T> struct kcu_qt;
template <> struct kcu_qt<KCU_F32> { static const int blck = 1, bsize = 4; };
template <> struct kcu_qt<KCU_F16> { static const int blck = 1, bsize = 2; };
template <> struct kcu_qt<KCU_BF16> { static const int blck = 1, bsize = 2; };
template <> struct kcu_qt<KCU_Q4_0> { static const int blck = 32, bsize = 18; };
template <> struct kcu_qt<KCU_Q4_1> { static const int blck = 32, bsize = 20; };
template <> struct kcu_qt<KCU_Q5_0> { static const int blck = 32, bsize = 22; };
template <> struct kcu_qt<KCU_Q5_1> { static const int blck = 32, bsize = 24; };
template <> struct kcu_qt<KCU_IQ4_NL> { static const int blck = 32, bsize = 18; };
template <> struct kcu_qt<KCU_Q2_K> { static const int blck = 256, bsize = 84; };
template <> struct kcu_qt<KCU_Q3_K> { static const int blck = 256, bsize = 110; };
template <> struct kcu_qt<KCU_IQ4_XS> { static const int blck = 256, bsize = 136; };
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

/* Q4_1: d, m, then the nibbles as Q4_0; value d * q + m. */
template <> KCU_DEV void kcu_deq8<KCU_Q4_1>(const uint8_t *row, int e, int n, float o[8]) {
    const uint8_t *b = row + (e >> 5) * 20;
    const float d = kcu_h2f(kcu_ld_u16(b)), m = kcu_h2f(kcu_ld_u16(b + 2));
    const int w = e & 31, shift = w >= 16 ? 4 : 0;
    const uint8_t *qs = b + 4 + (w & 15);
    for (int i = 0; i < 8; i++) o[i] = d * (float)((qs[i] >> shift) & 0xF) + m;
}

/* Bit j of a Q5 block's little-endian 32-bit qh: element j's fifth bit. */
KCU_DEV int kcu_q5_hbit(const uint8_t *qh, int j) { return (qh[j >> 3] >> (j & 7)) & 1; }

/* Q5_0: d, qh[4], qs[16] (nibbles as Q4_0); value d * (q - 16). */
template <> KCU_DEV void kcu_deq8<KCU_Q5_0>(const uint8_t *row, int e, int n, float o[8]) {
    const uint8_t *b = row + (e >> 5) * 22;
    const float d = kcu_h2f(kcu_ld_u16(b));
    const int w = e & 31, shift = w >= 16 ? 4 : 0;
    const uint8_t *qs = b + 6 + (w & 15);
    for (int i = 0; i < 8; i++) o[i] = d * (float)((((qs[i] >> shift) & 0xF) | (kcu_q5_hbit(b + 2, w + i) << 4)) - 16);
}

/* Q5_1: d, m, qh[4], qs[16]; value d * q + m. */
template <> KCU_DEV void kcu_deq8<KCU_Q5_1>(const uint8_t *row, int e, int n, float o[8]) {
    const uint8_t *b = row + (e >> 5) * 24;
    const float d = kcu_h2f(kcu_ld_u16(b)), m = kcu_h2f(kcu_ld_u16(b + 2));
    const int w = e & 31, shift = w >= 16 ? 4 : 0;
    const uint8_t *qs = b + 8 + (w & 15);
    for (int i = 0; i < 8; i++) o[i] = d * (float)(((qs[i] >> shift) & 0xF) | (kcu_q5_hbit(b + 4, w + i) << 4)) + m;
}

/* The 16 IQ4_NL code values (part of the format). */
KCU_CONST int8_t kcu_iq4nl_values[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
KCU_DEV float kcu_iq4nl(int c) { return (float)kcu_iq4nl_values[c]; }

/* IQ4_NL: d, qs[16]: element j in the low nibble of qs[j] (j < 16) or the
 * high nibble of qs[j - 16], an index into the code values; value d * code. */
template <> KCU_DEV void kcu_deq8<KCU_IQ4_NL>(const uint8_t *row, int e, int n, float o[8]) {
    const uint8_t *b = row + (e >> 5) * 18;
    const float d = kcu_h2f(kcu_ld_u16(b));
    const int w = e & 31, shift = w >= 16 ? 4 : 0;
    const uint8_t *qs = b + 2 + (w & 15);
    for (int i = 0; i < 8; i++) o[i] = d * kcu_iq4nl((qs[i] >> shift) & 0xF);
}

/* Q2_K: scales[16] (sub-block of 16 j: scale low nibble, min high nibble),
 * qs[64], d, dmin.  Weight w: bits 2k of qs[32g + l], g = w / 128, k =
 * (w % 128) / 32, l = w % 32.  Value d * sc * q - dmin * m. */
template <> KCU_DEV void kcu_deq8<KCU_Q2_K>(const uint8_t *row, int e, int n, float o[8]) {
    const uint8_t *b = row + (e >> 8) * 84;
    const int w = e & 255, sc = b[w >> 4];
    const float d = kcu_h2f(kcu_ld_u16(b + 80)) * (float)(sc & 0xF);
    const float mn = kcu_h2f(kcu_ld_u16(b + 82)) * (float)(sc >> 4);
    const uint8_t *qs = b + 16 + 32 * (w >> 7) + (w & 31);
    const int shift = 2 * ((w >> 5) & 3);
    for (int i = 0; i < 8; i++) o[i] = d * (float)((qs[i] >> shift) & 3) - mn;
}

/* Q3_K: hmask[32], qs[64] (low 2 bits as Q2_K), scales[12], d.  The high
 * bit of weight w is bit w / 32 of hmask[w % 32]; q = low | high << 2, and
 * the value d * (sc - 32) * (q - 4) with sc sub-block j = w / 16's 6-bit
 * scale: low 4 bits from byte j (j < 8) or the high nibble of byte j - 8,
 * top 2 bits from bits 2 (j / 4) of byte 8 + j % 4. */
template <> KCU_DEV void kcu_deq8<KCU_Q3_K>(const uint8_t *row, int e, int n, float o[8]) {
    const uint8_t *b = row + (e >> 8) * 110;
    const int w = e & 255, j = w >> 4;
    const uint8_t *s = b + 96;
    const int lo = j < 8 ? (s[j] & 0xF) : (s[j - 8] >> 4), hi = (s[8 + (j & 3)] >> (2 * (j >> 2))) & 3;
    const float d = kcu_h2f(kcu_ld_u16(b + 108)) * (float)((lo | (hi << 4)) - 32);
    const uint8_t *hm = b + (w & 31);
    const uint8_t *qs = b + 32 + 32 * (w >> 7) + (w & 31);
    const int shift = 2 * ((w >> 5) & 3), hbit = w >> 5;
    for (int i = 0; i < 8; i++) {
        const int q = ((qs[i] >> shift) & 3) | (((hm[i] >> hbit) & 1) << 2);
        o[i] = d * (float)(q - 4);
    }
}

/* IQ4_XS: d, scales_h (16 bits), scales_l[4], qs[128]: 8 sub-blocks of 32
 * with IQ4_NL's nibble layout at qs + 16 j and a 6-bit scale biased by 32
 * (low 4 bits in nibble j % 2 of scales_l[j / 2], top 2 in bits 2j of
 * scales_h).  Value d * (ls - 32) * code. */
template <> KCU_DEV void kcu_deq8<KCU_IQ4_XS>(const uint8_t *row, int e, int n, float o[8]) {
    const uint8_t *b = row + (e >> 8) * 136;
    const int w = e & 255, j = w >> 5, r = w & 31;
    const int ls = ((b[4 + (j >> 1)] >> (4 * (j & 1))) & 0xF) | (((kcu_ld_u16(b + 2) >> (2 * j)) & 3) << 4);
    const float d = kcu_h2f(kcu_ld_u16(b)) * (float)(ls - 32);
    const uint8_t *qs = b + 8 + 16 * j + (r & 15);
    const int shift = r >= 16 ? 4 : 0;
    for (int i = 0; i < 8; i++) o[i] = d * kcu_iq4nl((qs[i] >> shift) & 0xF);
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
    if (((uintptr_t)qs & 3) == 0) { /* rows 16-byte aligned: 144-byte blocks keep qs chunks 4-aligned */
        uint32_t lo, hi;
        kcu_ld8b(qs, &lo, &hi);
        lo >>= shift;
        hi >>= shift;
        for (int i = 0; i < 4; i++) {
            o[i] = d * (float)((lo >> (8 * i)) & 0xF) - mn;
            o[i + 4] = d * (float)((hi >> (8 * i)) & 0xF) - mn;
        }
        return;
    }
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
    if ((((uintptr_t)qs | (uintptr_t)qh) & 3) == 0) { /* 176-byte blocks: aligned rows keep both 4-aligned */
        uint32_t q[2], h[2];
        kcu_ld8b(qs, &q[0], &q[1]);
        kcu_ld8b(qh, &h[0], &h[1]);
        for (int i = 0; i < 8; i++) {
            const int v =
                ((q[i >> 2] >> (8 * (i & 3) + shift)) & 0xF) | (((h[i >> 2] >> (8 * (i & 3) + hbit)) & 1) << 4);
            o[i] = d * (float)v - mn;
        }
        return;
    }
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
