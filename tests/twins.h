/* The SIMD twins a test compares with the scalar references: on x86-64 the
 * AVX2 and AVX-512 ones this CPU runs, and the *_avx512.c kernels built against
 * emulated intrinsics (emu512.h, see tests/CMakeLists.txt), which run on
 * any x86-64 with AVX2: the AVX512_BF16 table, and of the plain AVX-512
 * table the kernels that differ from it.  k runs from 0 to N_TWINS - 1;
 * NULL = none. */
#ifndef KILN_TEST_TWINS_H
#define KILN_TEST_TWINS_H

#include "quant/quant.h"

#if defined(__x86_64__)
extern const quant_simd quant_legacy_avx512_emu, quant_legacy_avx512_bf16_emu, quant_kquants_avx512_emu;

#define N_TWINS 4

static inline const char *twin_name(int k) {
    if (k == 2) return "avx512 bf16 (emulated)";
    if (k == 3) return "avx512 (emulated)";
    return quant_isa_name(QUANT_ISA_AVX2 + k);
}

static inline quant_vec_dot_fn emu_dot(const quant_simd *legacy, int t) {
    return legacy->dot[t] ? legacy->dot[t] : quant_kquants_avx512_emu.dot[t];
}

static inline quant_vec_dot_fn dot_twin(int t, int k) {
    if (k < 2) return quant_vec_dot_at(t, QUANT_ISA_AVX2 + k);
    if (quant_cpu_isa() < QUANT_ISA_AVX2 || t < 0 || t >= QUANT_TYPE_COUNT) return NULL;
    quant_vec_dot_fn bf16 = emu_dot(&quant_legacy_avx512_bf16_emu, t);
    if (k == 2) return bf16;
    quant_vec_dot_fn plain = emu_dot(&quant_legacy_avx512_emu, t);
    return plain != bf16 ? plain : NULL;
}

static inline quant_from_f32_fn quant_twin(int t, int k) {
    if (k < 2) return quant_from_f32_at(t, QUANT_ISA_AVX2 + k);
    if (k == 3 || quant_cpu_isa() < QUANT_ISA_AVX2 || t < 0 || t >= QUANT_TYPE_COUNT) return NULL;
    quant_from_f32_fn f = quant_legacy_avx512_bf16_emu.quant[t];
    return f ? f : quant_kquants_avx512_emu.quant[t];
}

#else
/* Elsewhere the levels above scalar of this build (aarch64: neon, dotprod)
 * that the CPU runs; nothing is emulated. */
#define N_TWINS 2

static inline const char *twin_name(int k) { return quant_isa_name(QUANT_ISA_SCALAR + 1 + k); }
static inline quant_vec_dot_fn dot_twin(int t, int k) { return quant_vec_dot_at(t, QUANT_ISA_SCALAR + 1 + k); }
static inline quant_from_f32_fn quant_twin(int t, int k) { return quant_from_f32_at(t, QUANT_ISA_SCALAR + 1 + k); }
#endif

#endif
