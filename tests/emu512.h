/*
 * emu512.h — the AVX-512 intrinsics that kiln's *_avx512.c files use,
 * written as plain C over a 64-byte union, so those files' logic (layout,
 * lane order, offsets, masks, the float steps) runs and is checked against
 * the scalar twins on machines without AVX-512.  tests/CMakeLists.txt
 * compiles each *_avx512.c a second time with AVX2 flags and
 * `-include emu512.h`; the real build is untouched.  Each function follows
 * the instruction's definition in Intel's manual, lane by lane (vpdpbusd:
 * unsigned bytes of the first source times signed bytes of the second,
 * four products per int32 lane added without saturation; vpmaddubsw
 * saturates its pair sums to int16; vpmovdb truncates; a masked load reads
 * only the lanes its mask selects; vdpbf16ps flushes denormals).  __m512 and __m512i are the same union
 * here, so the casts between them are free.  An intrinsic missing from the
 * list fails the emulated build, since AVX-512 is not enabled for it.
 *
 * What this cannot check is the mapping of each intrinsic to its
 * instruction, which the compiler owns, nor speed.
 */
#ifndef KILN_EMU512_H
#define KILN_EMU512_H

#include <immintrin.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

typedef union kiln_emu512 {
    uint8_t u8[64];
    int8_t i8[64];
    uint16_t u16[32];
    int32_t i32[16];
    uint32_t u32[16];
    int16_t i16[32];
    float f32[16];
    __m256i h[2];
    __m256 hf[2];
} kiln_emu512;

static inline kiln_emu512 emu_zero(void) {
    kiln_emu512 r;
    memset(&r, 0, sizeof r);
    return r;
}
static inline kiln_emu512 emu_setzero_si512(void) { return emu_zero(); }
static inline kiln_emu512 emu_set1_epi8(char c) {
    kiln_emu512 r;
    memset(r.u8, (unsigned char)c, 64);
    return r;
}
static inline kiln_emu512 emu_loadu_si512(const void *p) {
    kiln_emu512 r;
    memcpy(r.u8, p, 64);
    return r;
}
/* the upper half is undefined for the instruction; zero here */
static inline kiln_emu512 emu_castsi256_si512(__m256i a) {
    kiln_emu512 r = emu_zero();
    r.h[0] = a;
    return r;
}
static inline __m256i emu_castsi512_si256(kiln_emu512 a) { return a.h[0]; }
static inline kiln_emu512 emu_inserti64x4(kiln_emu512 a, __m256i b, int imm) {
    a.h[imm & 1] = b;
    return a;
}
static inline __m256i emu_extracti64x4_epi64(kiln_emu512 a, int imm) { return a.h[imm & 1]; }
static inline kiln_emu512 emu_and_si512(kiln_emu512 a, kiln_emu512 b) {
    for (int i = 0; i < 64; i++) a.u8[i] &= b.u8[i];
    return a;
}
static inline kiln_emu512 emu_xor_si512(kiln_emu512 a, kiln_emu512 b) {
    for (int i = 0; i < 64; i++) a.u8[i] ^= b.u8[i];
    return a;
}
static inline kiln_emu512 emu_add_epi32(kiln_emu512 a, kiln_emu512 b) {
    for (int i = 0; i < 16; i++) a.u32[i] += b.u32[i];
    return a;
}
static inline kiln_emu512 emu_srli_epi16(kiln_emu512 a, unsigned imm) {
    for (int i = 0; i < 32; i++) a.u16[i] = imm > 15 ? 0 : (uint16_t)(a.u16[i] >> imm);
    return a;
}
/* dst lane i = a lane (idx lane i mod 16) */
static inline kiln_emu512 emu_permutexvar_epi32(kiln_emu512 idx, kiln_emu512 a) {
    kiln_emu512 r;
    for (int i = 0; i < 16; i++) r.u32[i] = a.u32[idx.u32[i] & 15];
    return r;
}
static inline kiln_emu512 emu_dpbusd_epi32(kiln_emu512 src, kiln_emu512 a, kiln_emu512 b) {
    for (int i = 0; i < 16; i++) {
        int32_t s = 0;
        for (int k = 0; k < 4; k++) s += (int32_t)a.u8[4 * i + k] * (int32_t)b.i8[4 * i + k];
        src.u32[i] += (uint32_t)s;
    }
    return src;
}

/* ---- more integer ops ---- */
static inline kiln_emu512 emu_set1_epi16(short v) {
    kiln_emu512 r;
    for (int i = 0; i < 32; i++) r.i16[i] = v;
    return r;
}
static inline kiln_emu512 emu_set1_epi32(int v) {
    kiln_emu512 r;
    for (int i = 0; i < 16; i++) r.i32[i] = v;
    return r;
}
static inline kiln_emu512 emu_set1_epi64(long long v) {
    kiln_emu512 r;
    for (int i = 0; i < 8; i++) memcpy(r.u8 + 8 * i, &v, 8);
    return r;
}
static inline kiln_emu512 emu_setr_epi32(int e0, int e1, int e2, int e3, int e4, int e5, int e6, int e7, int e8, int e9,
                                         int e10, int e11, int e12, int e13, int e14, int e15) {
    const int v[16] = {e0, e1, e2, e3, e4, e5, e6, e7, e8, e9, e10, e11, e12, e13, e14, e15};
    kiln_emu512 r;
    for (int i = 0; i < 16; i++) r.i32[i] = v[i];
    return r;
}
/* vpermt2d: dst lane i = (idx bit 4 ? b : a) lane (idx mod 16) */
static inline kiln_emu512 emu_permutex2var_epi32(kiln_emu512 a, kiln_emu512 idx, kiln_emu512 b) {
    kiln_emu512 r;
    for (int i = 0; i < 16; i++) r.u32[i] = (idx.u32[i] & 16 ? b : a).u32[idx.u32[i] & 15];
    return r;
}
static inline kiln_emu512 emu_castps256_ps512(__m256 a) {
    kiln_emu512 r = emu_zero();
    r.hf[0] = a;
    return r;
}
static inline kiln_emu512 emu_or_si512(kiln_emu512 a, kiln_emu512 b) {
    for (int i = 0; i < 64; i++) a.u8[i] |= b.u8[i];
    return a;
}
static inline kiln_emu512 emu_add_epi16(kiln_emu512 a, kiln_emu512 b) {
    for (int i = 0; i < 32; i++) a.u16[i] = (uint16_t)(a.u16[i] + b.u16[i]);
    return a;
}
static inline kiln_emu512 emu_sub_epi32(kiln_emu512 a, kiln_emu512 b) {
    for (int i = 0; i < 16; i++) a.u32[i] -= b.u32[i];
    return a;
}
static inline kiln_emu512 emu_min_epi32(kiln_emu512 a, kiln_emu512 b) {
    for (int i = 0; i < 16; i++) a.i32[i] = a.i32[i] < b.i32[i] ? a.i32[i] : b.i32[i];
    return a;
}
static inline kiln_emu512 emu_slli_epi16(kiln_emu512 a, unsigned imm) {
    for (int i = 0; i < 32; i++) a.u16[i] = imm > 15 ? 0 : (uint16_t)(a.u16[i] << imm);
    return a;
}
static inline kiln_emu512 emu_srai_epi16(kiln_emu512 a, unsigned imm) {
    for (int i = 0; i < 32; i++) a.i16[i] = (int16_t)(a.i16[i] >> (imm > 15 ? 15 : imm));
    return a;
}
static inline kiln_emu512 emu_sub_epi16(kiln_emu512 a, kiln_emu512 b) {
    for (int i = 0; i < 32; i++) a.u16[i] = (uint16_t)(a.u16[i] - b.u16[i]);
    return a;
}
static inline kiln_emu512 emu_srai_epi32(kiln_emu512 a, unsigned imm) {
    for (int i = 0; i < 16; i++) a.i32[i] = a.i32[i] >> (imm > 31 ? 31 : imm);
    return a;
}
static inline kiln_emu512 emu_slli_epi32(kiln_emu512 a, unsigned imm) {
    for (int i = 0; i < 16; i++) a.u32[i] = imm > 31 ? 0 : a.u32[i] << imm;
    return a;
}
static inline kiln_emu512 emu_abs_epi8(kiln_emu512 a) {
    for (int i = 0; i < 64; i++) a.u8[i] = (uint8_t)(a.i8[i] < 0 ? -a.i8[i] : a.i8[i]); /* -128 stays 0x80 */
    return a;
}
static inline kiln_emu512 emu_maddubs_epi16(kiln_emu512 a, kiln_emu512 b) {
    kiln_emu512 r;
    for (int i = 0; i < 32; i++) {
        int32_t s = (int32_t)a.u8[2 * i] * b.i8[2 * i] + (int32_t)a.u8[2 * i + 1] * b.i8[2 * i + 1];
        r.i16[i] = (int16_t)(s > 32767 ? 32767 : s < -32768 ? -32768 : s);
    }
    return r;
}
static inline kiln_emu512 emu_dpwssd_epi32(kiln_emu512 src, kiln_emu512 a, kiln_emu512 b) {
    for (int i = 0; i < 16; i++)
        src.u32[i] +=
            (uint32_t)((int32_t)a.i16[2 * i] * b.i16[2 * i]) + (uint32_t)((int32_t)a.i16[2 * i + 1] * b.i16[2 * i + 1]);
    return src;
}
static inline kiln_emu512 emu_madd_epi16(kiln_emu512 a, kiln_emu512 b) {
    kiln_emu512 r;
    for (int i = 0; i < 16; i++)
        r.u32[i] =
            (uint32_t)((int32_t)a.i16[2 * i] * b.i16[2 * i]) + (uint32_t)((int32_t)a.i16[2 * i + 1] * b.i16[2 * i + 1]);
    return r;
}
/* vpackssdw: per 128-bit lane, a's 4 int32 then b's, saturated to int16 */
static inline kiln_emu512 emu_packs_epi32(kiln_emu512 a, kiln_emu512 b) {
    kiln_emu512 r;
    for (int l = 0; l < 4; l++)
        for (int k = 0; k < 8; k++) {
            const int32_t v = (k < 4 ? a : b).i32[4 * l + (k & 3)];
            r.i16[8 * l + k] = (int16_t)(v > 32767 ? 32767 : v < -32768 ? -32768 : v);
        }
    return r;
}
static inline kiln_emu512 emu_permutexvar_epi16(kiln_emu512 idx, kiln_emu512 a) {
    kiln_emu512 r;
    for (int i = 0; i < 32; i++) r.u16[i] = a.u16[idx.u16[i] & 31];
    return r;
}
/* pshufb within each 128-bit lane */
static inline kiln_emu512 emu_shuffle_epi8(kiln_emu512 a, kiln_emu512 b) {
    kiln_emu512 r;
    for (int i = 0; i < 64; i++) r.u8[i] = (b.u8[i] & 0x80) ? 0 : a.u8[(i & ~15) + (b.u8[i] & 15)];
    return r;
}
static inline kiln_emu512 emu_broadcast_i32x4(__m128i a) {
    kiln_emu512 r;
    for (int i = 0; i < 4; i++) memcpy(r.u8 + 16 * i, &a, 16);
    return r;
}
static inline kiln_emu512 emu_castsi128_si512(__m128i a) {
    kiln_emu512 r = emu_zero();
    memcpy(r.u8, &a, 16);
    return r;
}
static inline kiln_emu512 emu_zextsi256_si512(__m256i a) { return emu_castsi256_si512(a); }
static inline kiln_emu512 emu_cvtepu16_epi32(__m256i a) {
    uint16_t v[16];
    memcpy(v, &a, 32);
    kiln_emu512 r;
    for (int i = 0; i < 16; i++) r.i32[i] = v[i];
    return r;
}
/* vpmovdb: the low byte of each int32 */
static inline __m128i emu_cvtepi32_epi8(kiln_emu512 a) {
    uint8_t v[16];
    for (int i = 0; i < 16; i++) v[i] = (uint8_t)a.u32[i];
    __m128i r;
    memcpy(&r, v, 16);
    return r;
}
static inline int emu_reduce_add_epi32(kiln_emu512 a) {
    uint32_t s = 0;
    for (int i = 0; i < 16; i++) s += a.u32[i];
    return (int)s;
}
/* ---- masks ---- */
static inline kiln_emu512 emu_mask_blend_epi64(__mmask8 k, kiln_emu512 a, kiln_emu512 b) {
    kiln_emu512 r;
    for (int i = 0; i < 8; i++) memcpy(r.u8 + 8 * i, ((k >> i) & 1 ? b.u8 : a.u8) + 8 * i, 8);
    return r;
}
static inline kiln_emu512 emu_mask_add_epi8(kiln_emu512 src, __mmask64 k, kiln_emu512 a, kiln_emu512 b) {
    for (int i = 0; i < 64; i++)
        if ((k >> i) & 1) src.u8[i] = (uint8_t)(a.u8[i] + b.u8[i]);
    return src;
}
static inline kiln_emu512 emu_mask_sub_epi8(kiln_emu512 src, __mmask64 k, kiln_emu512 a, kiln_emu512 b) {
    for (int i = 0; i < 64; i++)
        if ((k >> i) & 1) src.u8[i] = (uint8_t)(a.u8[i] - b.u8[i]);
    return src;
}
static inline __mmask64 emu_movepi8_mask(kiln_emu512 a) {
    __mmask64 k = 0;
    for (int i = 0; i < 64; i++) k |= (__mmask64)(a.u8[i] >> 7) << i;
    return k;
}
static inline kiln_emu512 emu_maskz_loadu_ps(__mmask16 k, const void *p) {
    kiln_emu512 r = emu_zero();
    for (int i = 0; i < 16; i++)
        if ((k >> i) & 1) memcpy(&r.f32[i], (const float *)p + i, 4);
    return r;
}
static inline __m256i emu256_maskz_loadu_epi16(__mmask16 k, const void *p) {
    uint16_t v[16] = {0};
    for (int i = 0; i < 16; i++)
        if ((k >> i) & 1) memcpy(&v[i], (const uint16_t *)p + i, 2);
    __m256i r;
    memcpy(&r, v, 32);
    return r;
}
static inline __m256i emu256_dpbusd_epi32(__m256i src, __m256i a, __m256i b) {
    kiln_emu512 s = emu_castsi256_si512(src), x = emu_castsi256_si512(a), y = emu_castsi256_si512(b);
    return emu_dpbusd_epi32(s, x, y).h[0];
}
static inline __m256i emu256_dpwssd_epi32(__m256i src, __m256i a, __m256i b) {
    kiln_emu512 s = emu_castsi256_si512(src), x = emu_castsi256_si512(a), y = emu_castsi256_si512(b);
    return emu_dpwssd_epi32(s, x, y).h[0];
}
/* ---- float ---- */
static inline kiln_emu512 emu_set1_ps(float v) {
    kiln_emu512 r;
    for (int i = 0; i < 16; i++) r.f32[i] = v;
    return r;
}
static inline kiln_emu512 emu_setzero_ps(void) { return emu_zero(); }
static inline kiln_emu512 emu_loadu_ps(const void *p) { return emu_loadu_si512(p); }
static inline void emu_storeu_ps(void *p, kiln_emu512 a) { memcpy(p, a.u8, 64); }
static inline kiln_emu512 emu_castsi512_ps(kiln_emu512 a) { return a; }
static inline __m256 emu_castps512_ps256(kiln_emu512 a) { return a.hf[0]; }
static inline __m256 emu_extractf32x8_ps(kiln_emu512 a, int imm) { return a.hf[imm & 1]; }
static inline kiln_emu512 emu_insertf32x8(kiln_emu512 a, __m256 b, int imm) {
    a.hf[imm & 1] = b;
    return a;
}
#define EMU_F2(name, expr)                                         \
    static inline kiln_emu512 name(kiln_emu512 a, kiln_emu512 b) { \
        kiln_emu512 r;                                             \
        for (int i = 0; i < 16; i++) {                             \
            const float x = a.f32[i], y = b.f32[i];                \
            r.f32[i] = (expr);                                     \
        }                                                          \
        return r;                                                  \
    }
EMU_F2(emu_add_ps, x + y)
EMU_F2(emu_sub_ps, x - y)
EMU_F2(emu_mul_ps, x *y)
EMU_F2(emu_max_ps, x > y ? x : y) /* maxps: the second operand when unordered or both zero */
static inline kiln_emu512 emu_and_ps(kiln_emu512 a, kiln_emu512 b) { return emu_and_si512(a, b); }
static inline kiln_emu512 emu_or_ps(kiln_emu512 a, kiln_emu512 b) { return emu_or_si512(a, b); }
static inline kiln_emu512 emu_abs_ps(kiln_emu512 a) {
    for (int i = 0; i < 16; i++) a.u32[i] &= 0x7fffffffu;
    return a;
}
static inline kiln_emu512 emu_fmadd_ps(kiln_emu512 a, kiln_emu512 b, kiln_emu512 c) {
    for (int i = 0; i < 16; i++) c.f32[i] = __builtin_fmaf(a.f32[i], b.f32[i], c.f32[i]);
    return c;
}
static inline kiln_emu512 emu_fnmadd_ps(kiln_emu512 a, kiln_emu512 b, kiln_emu512 c) {
    for (int i = 0; i < 16; i++) c.f32[i] = __builtin_fmaf(-a.f32[i], b.f32[i], c.f32[i]);
    return c;
}
static inline kiln_emu512 emu_mask_add_ps(kiln_emu512 src, __mmask16 k, kiln_emu512 a, kiln_emu512 b) {
    for (int i = 0; i < 16; i++)
        if ((k >> i) & 1) src.f32[i] = a.f32[i] + b.f32[i];
    return src;
}
static inline kiln_emu512 emu_cvtepi32_ps(kiln_emu512 a) {
    for (int i = 0; i < 16; i++) a.f32[i] = (float)a.i32[i];
    return a;
}
/* out-of-range conversions give the "integer indefinite" 0x80000000 */
static inline int32_t emu_f2i(float f) { return f >= -2147483648.0f && f < 2147483648.0f ? (int32_t)f : INT32_MIN; }
static inline kiln_emu512 emu_cvttps_epi32(kiln_emu512 a) {
    for (int i = 0; i < 16; i++) a.i32[i] = emu_f2i(a.f32[i]);
    return a;
}
/* nearest-even, the MXCSR default the kernels rely on */
static inline kiln_emu512 emu_cvtps_epi32(kiln_emu512 a) {
    for (int i = 0; i < 16; i++) a.i32[i] = emu_f2i(__builtin_nearbyintf(a.f32[i]));
    return a;
}
static inline kiln_emu512 emu_roundscale_ps(kiln_emu512 a, int imm) {
    for (int i = 0; i < 16; i++) {
        const float x = a.f32[i];
        switch (imm & 3) {
        case 0: a.f32[i] = __builtin_nearbyintf(x); break;
        case 1: a.f32[i] = __builtin_floorf(x); break;
        case 2: a.f32[i] = __builtin_ceilf(x); break;
        default: a.f32[i] = __builtin_truncf(x); break;
        }
    }
    return a;
}
static inline __mmask16 emu_cmp_ps_mask(kiln_emu512 a, kiln_emu512 b, int pred) {
    __mmask16 k = 0;
    for (int i = 0; i < 16; i++) {
        const float x = a.f32[i], y = b.f32[i];
        int t;
        switch (pred) {
        case _CMP_EQ_OQ: t = x == y; break;
        case _CMP_GE_OQ: t = x >= y; break;
        default: __builtin_trap(); /* a predicate the kernels don't use yet */
        }
        k |= (__mmask16)(t << i);
    }
    return k;
}
static inline kiln_emu512 emu_cvtph_ps(__m256i h) {
    kiln_emu512 r;
    r.hf[0] = _mm256_cvtph_ps(_mm256_castsi256_si128(h));
    r.hf[1] = _mm256_cvtph_ps(_mm256_extracti128_si256(h, 1));
    return r;
}
/* GCC's order: high 256 + low 256, then high 128 + low 128, then lanes
 * (0 + 2) and (1 + 3), then those two */
static inline float emu_reduce_add_ps(kiln_emu512 a) {
    float t3[8], t6[4];
    for (int i = 0; i < 8; i++) t3[i] = a.f32[8 + i] + a.f32[i];
    for (int i = 0; i < 4; i++) t6[i] = t3[4 + i] + t3[i];
    return (t6[0] + t6[2]) + (t6[1] + t6[3]);
}
/* vdpbf16ps: per float lane j, acc += a[2j+1] * b[2j+1], then
 * acc += a[2j] * b[2j] (BF16 widened exactly; the product of two 8-bit
 * significands is exact in float), round to nearest, denormal inputs and
 * results taken as zero (DAZ, FTZ). */
static inline float emu_daz(float x) { return fpclassify(x) == FP_SUBNORMAL ? copysignf(0.0f, x) : x; }
static inline float emu_bf16(uint16_t h) {
    const uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return emu_daz(f);
}
static inline kiln_emu512 emu_dpbf16_ps(kiln_emu512 acc, kiln_emu512 a, kiln_emu512 b) {
    kiln_emu512 r;
    for (int j = 0; j < 16; j++) {
        float t = emu_daz(acc.f32[j]);
        t = emu_daz(t + emu_bf16(a.u16[2 * j + 1]) * emu_bf16(b.u16[2 * j + 1]));
        r.f32[j] = emu_daz(t + emu_bf16(a.u16[2 * j]) * emu_bf16(b.u16[2 * j]));
    }
    return r;
}
#define KILN_BH(v) (v)

static inline float emu_reduce_max_ps(kiln_emu512 a) {
    float m = a.f32[0];
    for (int i = 1; i < 16; i++) m = a.f32[i] > m ? a.f32[i] : m;
    return m;
}

#define __m512i kiln_emu512
#define __m512 kiln_emu512
#undef _mm512_setzero_si512
#define _mm512_setzero_si512 emu_setzero_si512
#undef _mm512_set1_epi8
#define _mm512_set1_epi8 emu_set1_epi8
#undef _mm512_loadu_si512
#define _mm512_loadu_si512 emu_loadu_si512
#undef _mm512_castsi256_si512
#define _mm512_castsi256_si512 emu_castsi256_si512
#undef _mm512_castsi512_si256
#define _mm512_castsi512_si256 emu_castsi512_si256
#undef _mm512_inserti64x4
#define _mm512_inserti64x4 emu_inserti64x4
#undef _mm512_extracti64x4_epi64
#define _mm512_extracti64x4_epi64 emu_extracti64x4_epi64
#undef _mm512_and_si512
#define _mm512_and_si512 emu_and_si512
#undef _mm512_xor_si512
#define _mm512_xor_si512 emu_xor_si512
#undef _mm512_add_epi32
#define _mm512_add_epi32 emu_add_epi32
#undef _mm512_srai_epi16
#define _mm512_srai_epi16 emu_srai_epi16
#undef _mm512_sub_epi16
#define _mm512_sub_epi16 emu_sub_epi16
#undef _mm512_srli_epi16
#define _mm512_srli_epi16 emu_srli_epi16
#undef _mm512_permutexvar_epi32
#define _mm512_permutexvar_epi32 emu_permutexvar_epi32
#undef _mm512_dpbusd_epi32
#define _mm512_dpbusd_epi32 emu_dpbusd_epi32

#undef _mm512_set1_epi16
#define _mm512_set1_epi16 emu_set1_epi16
#undef _mm512_set1_epi32
#define _mm512_set1_epi32 emu_set1_epi32
#undef _mm512_set1_epi64
#define _mm512_set1_epi64 emu_set1_epi64
#undef _mm512_setr_epi32
#define _mm512_setr_epi32 emu_setr_epi32
#undef _mm512_permutex2var_epi32
#define _mm512_permutex2var_epi32 emu_permutex2var_epi32
#undef _mm512_castps256_ps512
#define _mm512_castps256_ps512 emu_castps256_ps512
#undef _mm512_or_si512
#define _mm512_or_si512 emu_or_si512
#undef _mm512_add_epi16
#define _mm512_add_epi16 emu_add_epi16
#undef _mm512_sub_epi32
#define _mm512_sub_epi32 emu_sub_epi32
#undef _mm512_min_epi32
#define _mm512_min_epi32 emu_min_epi32
#undef _mm512_slli_epi16
#define _mm512_slli_epi16 emu_slli_epi16
#undef _mm512_slli_epi32
#define _mm512_slli_epi32 emu_slli_epi32
#undef _mm512_srai_epi32
#define _mm512_srai_epi32 emu_srai_epi32
#undef _mm512_abs_epi8
#define _mm512_abs_epi8 emu_abs_epi8
#undef _mm512_maddubs_epi16
#define _mm512_maddubs_epi16 emu_maddubs_epi16
#undef _mm512_dpwssd_epi32
#define _mm512_dpwssd_epi32 emu_dpwssd_epi32
#undef _mm512_madd_epi16
#define _mm512_madd_epi16 emu_madd_epi16
#undef _mm512_packs_epi32
#define _mm512_packs_epi32 emu_packs_epi32
#undef _mm512_permutexvar_epi16
#define _mm512_permutexvar_epi16 emu_permutexvar_epi16
#undef _mm512_shuffle_epi8
#define _mm512_shuffle_epi8 emu_shuffle_epi8
#undef _mm512_broadcast_i32x4
#define _mm512_broadcast_i32x4 emu_broadcast_i32x4
#undef _mm512_castsi128_si512
#define _mm512_castsi128_si512 emu_castsi128_si512
#undef _mm512_zextsi256_si512
#define _mm512_zextsi256_si512 emu_zextsi256_si512
#undef _mm512_cvtepu16_epi32
#define _mm512_cvtepu16_epi32 emu_cvtepu16_epi32
#undef _mm512_cvtepi32_epi8
#define _mm512_cvtepi32_epi8 emu_cvtepi32_epi8
#undef _mm512_reduce_add_epi32
#define _mm512_reduce_add_epi32 emu_reduce_add_epi32
#undef _mm512_mask_blend_epi64
#define _mm512_mask_blend_epi64 emu_mask_blend_epi64
#undef _mm512_mask_add_epi8
#define _mm512_mask_add_epi8 emu_mask_add_epi8
#undef _mm512_mask_sub_epi8
#define _mm512_mask_sub_epi8 emu_mask_sub_epi8
#undef _mm512_movepi8_mask
#define _mm512_movepi8_mask emu_movepi8_mask
#undef _mm512_maskz_loadu_ps
#define _mm512_maskz_loadu_ps emu_maskz_loadu_ps
#undef _mm256_maskz_loadu_epi16
#define _mm256_maskz_loadu_epi16 emu256_maskz_loadu_epi16
#undef _mm256_dpbusd_epi32
#define _mm256_dpbusd_epi32 emu256_dpbusd_epi32
#undef _mm256_dpwssd_epi32
#define _mm256_dpwssd_epi32 emu256_dpwssd_epi32
#undef _mm512_set1_ps
#define _mm512_set1_ps emu_set1_ps
#undef _mm512_setzero_ps
#define _mm512_setzero_ps emu_setzero_ps
#undef _mm512_loadu_ps
#define _mm512_loadu_ps emu_loadu_ps
#undef _mm512_storeu_ps
#define _mm512_storeu_ps emu_storeu_ps
#undef _mm512_castsi512_ps
#define _mm512_castsi512_ps emu_castsi512_ps
#undef _mm512_castps512_ps256
#define _mm512_castps512_ps256 emu_castps512_ps256
#undef _mm512_extractf32x8_ps
#define _mm512_extractf32x8_ps emu_extractf32x8_ps
#undef _mm512_insertf32x8
#define _mm512_insertf32x8 emu_insertf32x8
#undef _mm512_add_ps
#define _mm512_add_ps emu_add_ps
#undef _mm512_sub_ps
#define _mm512_sub_ps emu_sub_ps
#undef _mm512_mul_ps
#define _mm512_mul_ps emu_mul_ps
#undef _mm512_max_ps
#define _mm512_max_ps emu_max_ps
#undef _mm512_and_ps
#define _mm512_and_ps emu_and_ps
#undef _mm512_or_ps
#define _mm512_or_ps emu_or_ps
#undef _mm512_abs_ps
#define _mm512_abs_ps emu_abs_ps
#undef _mm512_fmadd_ps
#define _mm512_fmadd_ps emu_fmadd_ps
#undef _mm512_fnmadd_ps
#define _mm512_fnmadd_ps emu_fnmadd_ps
#undef _mm512_mask_add_ps
#define _mm512_mask_add_ps emu_mask_add_ps
#undef _mm512_cvtepi32_ps
#define _mm512_cvtepi32_ps emu_cvtepi32_ps
#undef _mm512_cvttps_epi32
#define _mm512_cvttps_epi32 emu_cvttps_epi32
#undef _mm512_cvtps_epi32
#define _mm512_cvtps_epi32 emu_cvtps_epi32
#undef _mm512_roundscale_ps
#define _mm512_roundscale_ps emu_roundscale_ps
#undef _mm512_cmp_ps_mask
#define _mm512_cmp_ps_mask emu_cmp_ps_mask
#undef _mm512_cvtph_ps
#define _mm512_cvtph_ps emu_cvtph_ps
#undef _mm512_reduce_add_ps
#define _mm512_reduce_add_ps emu_reduce_add_ps
#undef _mm512_reduce_max_ps
#define _mm512_reduce_max_ps emu_reduce_max_ps
#undef _mm512_dpbf16_ps
#define _mm512_dpbf16_ps emu_dpbf16_ps

#endif
