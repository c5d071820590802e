/*
 * quant.c — the ISA level the CPU supports, the levels' names and the
 * scalar f16/bf16 conversions (the dispatch over the levels is dispatch.c).
 */
#include "quant/quant.h"

#include <string.h>

/* ---- CPU features ---- */

#if defined(__x86_64__)
static int detect_isa(void) {
    const quant_cpu *p = quant_cpu_get();
    /* The *_avx2.c files are built with -mavx2 -mfma -mf16c -mbmi2. */
    if (!(p->os_ymm && p->avx && p->avx2 && p->fma && p->f16c && p->bmi2)) return QUANT_ISA_SCALAR;
    if (p->os_zmm && p->avx512f && p->avx512dq && p->avx512bw && p->avx512vl && p->avx512vnni) return QUANT_ISA_AVX512;
    return QUANT_ISA_AVX2;
}
#elif defined(__aarch64__)
static int detect_isa(void) {
    const quant_cpu *p = quant_cpu_get();
    if (!p->asimd) return QUANT_ISA_SCALAR;
    return p->dotprod ? QUANT_ISA_DOTPROD : QUANT_ISA_NEON;
}
#else
static int detect_isa(void) { return QUANT_ISA_SCALAR; }
#endif

/* detect()'s answer, asked once; threads may race to store the same value */
static int cached(int *slot, int (*detect)(void)) {
    int v = __atomic_load_n(slot, __ATOMIC_RELAXED);
    if (v < 0) {
        v = detect();
        __atomic_store_n(slot, v, __ATOMIC_RELAXED);
    }
    return v;
}

int quant_cpu_isa(void) {
    static int slot = -1;
    return cached(&slot, detect_isa);
}

/* AVX512_BF16 (CPUID.(EAX=7, ECX=1):EAX bit 5): vdpbf16ps, two BF16
 * products per float lane.  Only asked for once the AVX-512 level holds. */
static int detect_bf16(void) {
#if defined(__x86_64__)
    return quant_cpu_isa() >= QUANT_ISA_AVX512 && quant_cpu_get()->avx512bf16;
#else
    return 0;
#endif
}

int quant_cpu_bf16(void) {
    static int slot = -1;
    return cached(&slot, detect_bf16);
}

const char *quant_isa_name(int isa) {
    if (isa == QUANT_ISA_SCALAR) return "scalar";
#if defined(__x86_64__)
    if (isa == QUANT_ISA_AVX2) return "avx2";
    if (isa == QUANT_ISA_AVX512) return "avx512";
#elif defined(__aarch64__)
    if (isa == QUANT_ISA_NEON) return "neon";
    if (isa == QUANT_ISA_DOTPROD) return "dotprod";
#endif
    return "unknown";
}

/* ---- f16 / bf16 ---- */

static inline uint32_t f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}
static inline float bits_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

float quant_f16_to_f32(uint16_t h) {
    const uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    const uint32_t exp = (h >> 10) & 0x1f, man = h & 0x3ff;
    if (exp == 0) {
        /* zero or subnormal: man * 2^-24, exact in float */
        float v = (float)man * 0x1p-24f;
        return bits_f32(f32_bits(v) | sign);
    }
    if (exp == 31) return bits_f32(sign | 0x7f800000u | (man << 13));
    return bits_f32(sign | ((exp + 112) << 23) | (man << 13));
}

uint16_t quant_f32_to_f16(float f) {
    const uint32_t u = f32_bits(f);
    const uint16_t sign = (uint16_t)((u >> 16) & 0x8000);
    const uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) /* NaN: keep top payload, force quiet */
        return (uint16_t)(sign | 0x7e00 | ((a >> 13) & 0x3ff));
    if (a >= 0x477ff000u) return sign | 0x7c00; /* >= 65520 rounds to inf */
    const uint32_t e = a >> 23;
    if (e < 113) {
        /* result is a half subnormal (or rounds up to the smallest normal):
         * q = round(|f| / 2^-24) with mantissa m scaled by 2^(e-150) */
        const uint32_t m = e ? ((a & 0x7fffff) | 0x800000) : (a & 0x7fffff);
        const uint32_t shift = 126 - (e ? e : 1);
        if (shift > 24) return sign;
        uint32_t q = m >> shift;
        const uint32_t rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
        if (rem > half || (rem == half && (q & 1))) q++;
        return (uint16_t)(sign | q);
    }
    uint32_t h = ((e - 112) << 10) | ((a >> 13) & 0x3ff);
    const uint32_t rem = a & 0x1fff;
    if (rem > 0x1000 || (rem == 0x1000 && (h & 1))) h++; /* carry may bump the exponent */
    return (uint16_t)(sign | h);
}

float quant_bf16_to_f32(uint16_t h) { return bits_f32((uint32_t)h << 16); }

uint16_t quant_f32_to_bf16(float f) {
    const uint32_t u = f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40); /* quiet NaN */
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1)) >> 16);
}
