/*
 * emu512.h — the AVX-512 intrinsics that src/kernels/pack_avx512.c uses,
 * written as plain C over a 64-byte union, so that file's logic (layout,
 * lane order, offsets, the float step) runs and is checked against its
 * scalar twin on machines without AVX-512.  tests/CMakeLists.txt compiles
 * pack_avx512.c a second time with AVX2 flags and `-include emu512.h`; the
 * real build is untouched.  Each function follows the instruction's
 * definition in Intel's manual, lane by lane (vpdpbusd: unsigned bytes of
 * the first source times signed bytes of the second, four products per
 * int32 lane added to the accumulator without saturation).
 *
 * What this cannot check is the mapping of each intrinsic to its
 * instruction, which the compiler owns, nor speed.
 */
#ifndef KILN_EMU512_H
#define KILN_EMU512_H

#include <immintrin.h>
#include <stdint.h>
#include <string.h>

typedef union kiln_emu512 {
    uint8_t u8[64];
    int8_t i8[64];
    uint16_t u16[32];
    int32_t i32[16];
    uint32_t u32[16];
    __m256i h[2];
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

#define __m512i kiln_emu512
#define _mm512_setzero_si512 emu_setzero_si512
#define _mm512_set1_epi8 emu_set1_epi8
#define _mm512_loadu_si512 emu_loadu_si512
#define _mm512_castsi256_si512 emu_castsi256_si512
#define _mm512_castsi512_si256 emu_castsi512_si256
#define _mm512_inserti64x4 emu_inserti64x4
#define _mm512_extracti64x4_epi64 emu_extracti64x4_epi64
#define _mm512_and_si512 emu_and_si512
#define _mm512_xor_si512 emu_xor_si512
#define _mm512_add_epi32 emu_add_epi32
#define _mm512_srli_epi16 emu_srli_epi16
#define _mm512_permutexvar_epi32 emu_permutexvar_epi32
#define _mm512_dpbusd_epi32 emu_dpbusd_epi32

#endif
