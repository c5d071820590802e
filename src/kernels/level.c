/*
 * level.c — the kernels folder's dispatch tables, one per ISA level, and
 * the accessors the folder's headers declare over them (those of ssm.h and
 * conv.h live in ssm.c and conv.c, since the two headers cannot meet).  The AVX-512 level
 * has its own interleaved and F16 block kernels and image GEMM tile; for the
 * element-wise ops, attention, the SSM kernels, the group norm, the image
 * GEMM's packer and GELU it names the AVX2 ones, which run on it unchanged
 * (no AVX-512 twins of those exist).  The aarch64 levels (neon, dotprod)
 * share one set of NEON twins, but for the dotprod level's sdot in ops.
 */
#include "kernels/level.h"

/* tile: the F16 block kernel, which must sum as the level's F16 vec_dot */
#define KK_SCALAR_LEVEL(tile)                                                                    \
    {                                                                                            \
        &kk_ops_scalar, &kk_ssm_scalar, kk_groupnorm_ref, &kk_x8_scalar, tile, kk_gemm_tile_ref, \
            kk_gemm_pack_rows_ref, kk_gelu_tanh_ref                                              \
    }

#if defined(__aarch64__)
/* Both aarch64 levels: the F16 block kernel sums as their F16 vec_dot (8
 * lanes); the dotprod level's ops differ only by sdot in the Q8_0 attention. */
#define KK_NEON_LEVEL(ops)                                                                        \
    {                                                                                             \
        ops, &kk_ssm_neon, kk_groupnorm_neon, &kk_x8_scalar, kk_tile_f16_neon, kk_gemm_tile_neon, \
            kk_gemm_pack_rows_neon, kk_gelu_tanh_neon                                             \
    }
#endif

static const kk_level g_levels[] = {
    [QUANT_ISA_SCALAR] = KK_SCALAR_LEVEL(kk_tile_f16_ref),
#if defined(__x86_64__)
    [QUANT_ISA_AVX2] = {&kk_ops_avx2, &kk_ssm_avx2, kk_groupnorm_avx2, &kk_x8_avx2, kk_tile_f16_avx2, kk_gemm_tile_avx2,
                     kk_gemm_pack_rows_avx2, kk_gelu_tanh_avx2},
    [QUANT_ISA_AVX512] = {&kk_ops_avx2, &kk_ssm_avx2, kk_groupnorm_avx2, &kk_x8_avx512, kk_tile_f16_avx512,
                       kk_gemm_tile_avx512, kk_gemm_pack_rows_avx2, kk_gelu_tanh_avx2},
#elif defined(__aarch64__)
    [QUANT_ISA_NEON] = KK_NEON_LEVEL(&kk_ops_neon),
    [QUANT_ISA_DOTPROD] = KK_NEON_LEVEL(&kk_ops_dotprod),
#endif
};

const kk_level *kk_level_at(int isa) {
    if (isa < QUANT_ISA_SCALAR || isa > quant_cpu_isa()) return NULL;
    return &g_levels[isa];
}

const kk_level *kk_level_best(void) { return &g_levels[quant_active_isa()]; }

const kk_ops *kk_ops_at(int isa) {
    const kk_level *l = kk_level_at(isa);
    return l ? l->ops : NULL;
}

const kk_ops *kk_ops_best(void) { return kk_level_best()->ops; }

kk_x8_fn kk_x8_at(int t, int isa) {
    const kk_level *l = kk_level_at(isa);
    return l && t >= 0 && t < QUANT_TYPE_COUNT ? l->x8->fn[t] : NULL;
}

kk_x8_fn kk_x8_best(int t) { return t >= 0 && t < QUANT_TYPE_COUNT ? kk_level_best()->x8->fn[t] : NULL; }

kk_x8_dec_fn kk_x8_dec_at(int t, int isa) {
    const kk_level *l = kk_level_at(isa);
    return l && t >= 0 && t < QUANT_TYPE_COUNT ? l->x8->dec[t] : NULL;
}

kk_x8_dec_fn kk_x8_dec_best(int t) { return t >= 0 && t < QUANT_TYPE_COUNT ? kk_level_best()->x8->dec[t] : NULL; }

kk_tile_fn kk_tile_at(int t, int isa) {
    const kk_level *l = kk_level_at(isa);
    return l && t == QUANT_F16 ? l->tile_f16 : NULL;
}
