/* The SIMD twins a test compares with the scalar references: the AVX2 and
 * AVX-512 ones this CPU runs, and the *_avx512.c kernels built against
 * emulated intrinsics (emu512.h, see tests/CMakeLists.txt), which run on
 * any x86-64 with AVX2.  k runs from 0 to N_TWINS - 1; NULL = none. */
#ifndef KILN_TEST_TWINS_H
#define KILN_TEST_TWINS_H

#include "quant/quant.h"

kq_vec_dot_fn kq_legacy_dot_avx512_emu(int t);
kq_from_f32_fn kq_legacy_quant_avx512_emu(int t);
kq_vec_dot_fn kq_kquants_dot_avx512_emu(int t);
kq_from_f32_fn kq_kquants_quant_avx512_emu(int t);

#define N_TWINS 3

static inline const char *twin_name(int k) { return k == 2 ? "avx512 (emulated)" : kq_isa_name(KQ_ISA_AVX2 + k); }

static inline kq_vec_dot_fn dot_twin(int t, int k) {
    if (k < 2) return KQ_ISA_AVX2 + k <= kq_cpu_isa() ? kq_vec_dot_at(t, KQ_ISA_AVX2 + k) : NULL;
    if (kq_cpu_isa() < KQ_ISA_AVX2) return NULL;
    kq_vec_dot_fn f = kq_legacy_dot_avx512_emu(t);
    return f ? f : kq_kquants_dot_avx512_emu(t);
}

static inline kq_from_f32_fn quant_twin(int t, int k) {
    if (k < 2) return KQ_ISA_AVX2 + k <= kq_cpu_isa() ? kq_from_f32_at(t, KQ_ISA_AVX2 + k) : NULL;
    if (kq_cpu_isa() < KQ_ISA_AVX2) return NULL;
    kq_from_f32_fn f = kq_legacy_quant_avx512_emu(t);
    return f ? f : kq_kquants_quant_avx512_emu(t);
}

#endif
