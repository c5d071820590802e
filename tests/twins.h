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
extern const kq_simd kq_legacy_avx512_emu, kq_legacy_avx512_bf16_emu, kq_kquants_avx512_emu;

#define N_TWINS 4

static inline const char *twin_name(int k) {
    if (k == 2) return "avx512 bf16 (emulated)";
    if (k == 3) return "avx512 (emulated)";
    return kq_isa_name(KQ_ISA_AVX2 + k);
}

static inline kq_vec_dot_fn emu_dot(const kq_simd *legacy, int t) {
    return legacy->dot[t] ? legacy->dot[t] : kq_kquants_avx512_emu.dot[t];
}

static inline kq_vec_dot_fn dot_twin(int t, int k) {
    if (k < 2) return kq_vec_dot_at(t, KQ_ISA_AVX2 + k);
    if (kq_cpu_isa() < KQ_ISA_AVX2 || t < 0 || t >= KQ_TYPE_COUNT) return NULL;
    kq_vec_dot_fn bf16 = emu_dot(&kq_legacy_avx512_bf16_emu, t);
    if (k == 2) return bf16;
    kq_vec_dot_fn plain = emu_dot(&kq_legacy_avx512_emu, t);
    return plain != bf16 ? plain : NULL;
}

static inline kq_from_f32_fn quant_twin(int t, int k) {
    if (k < 2) return kq_from_f32_at(t, KQ_ISA_AVX2 + k);
    if (k == 3 || kq_cpu_isa() < KQ_ISA_AVX2 || t < 0 || t >= KQ_TYPE_COUNT) return NULL;
    kq_from_f32_fn f = kq_legacy_avx512_bf16_emu.quant[t];
    return f ? f : kq_kquants_avx512_emu.quant[t];
}

#else
/* Elsewhere the levels above scalar of this build (aarch64: neon, dotprod)
 * that the CPU runs; nothing is emulated. */
#define N_TWINS 2

static inline const char *twin_name(int k) { return kq_isa_name(KQ_ISA_SCALAR + 1 + k); }
static inline kq_vec_dot_fn dot_twin(int t, int k) { return kq_vec_dot_at(t, KQ_ISA_SCALAR + 1 + k); }
static inline kq_from_f32_fn quant_twin(int t, int k) { return kq_from_f32_at(t, KQ_ISA_SCALAR + 1 + k); }
#endif

#endif
