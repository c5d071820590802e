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
#define KERN_SCALAR_LEVEL(tile)                                                                            \
    {                                                                                                      \
        &kern_ops_scalar, &kern_ssm_scalar, kern_groupnorm_ref, &kern_x8_scalar, tile, kern_gemm_tile_ref, \
            kern_gemm_pack_rows_ref, kern_gelu_tanh_ref                                                    \
    }

#if defined(__aarch64__)
/* Both aarch64 levels: the F16 block kernel sums as their F16 vec_dot (8
 * lanes); the dotprod level's ops differ only by sdot in the Q8_0 attention. */
#define KERN_NEON_LEVEL(ops)                                                                                \
    {                                                                                                       \
        ops, &kern_ssm_neon, kern_groupnorm_neon, &kern_x8_scalar, kern_tile_f16_neon, kern_gemm_tile_neon, \
            kern_gemm_pack_rows_neon, kern_gelu_tanh_neon                                                   \
    }
#endif

static const kern_level g_levels[] = {
    [QUANT_ISA_SCALAR] = KERN_SCALAR_LEVEL(kern_tile_f16_ref),
#if defined(__x86_64__)
    [QUANT_ISA_AVX2] = {&kern_ops_avx2, &kern_ssm_avx2, kern_groupnorm_avx2, &kern_x8_avx2, kern_tile_f16_avx2,
                        kern_gemm_tile_avx2, kern_gemm_pack_rows_avx2, kern_gelu_tanh_avx2},
    [QUANT_ISA_AVX512] = {&kern_ops_avx2, &kern_ssm_avx2, kern_groupnorm_avx2, &kern_x8_avx512, kern_tile_f16_avx512,
                          kern_gemm_tile_avx512, kern_gemm_pack_rows_avx2, kern_gelu_tanh_avx2},
#elif defined(__aarch64__)
    [QUANT_ISA_NEON] = KERN_NEON_LEVEL(&kern_ops_neon),
    [QUANT_ISA_DOTPROD] = KERN_NEON_LEVEL(&kern_ops_dotprod),
#endif
};

const kern_level *kern_level_at(int isa) {
    if (isa < QUANT_ISA_SCALAR || isa > quant_cpu_isa()) return NULL;
    return &g_levels[isa];
}

const kern_level *kern_level_best(void) { return &g_levels[quant_active_isa()]; }

const kern_ops *kern_ops_at(int isa) {
    const kern_level *l = kern_level_at(isa);
    return l ? l->ops : NULL;
}

const kern_ops *kern_ops_best(void) { return kern_level_best()->ops; }

kern_x8_fn kern_x8_at(int t, int isa) {
    const kern_level *l = kern_level_at(isa);
    return l && t >= 0 && t < QUANT_TYPE_COUNT ? l->x8->fn[t] : NULL;
}

kern_x8_fn kern_x8_best(int t) { return t >= 0 && t < QUANT_TYPE_COUNT ? kern_level_best()->x8->fn[t] : NULL; }

kern_x8_dec_fn kern_x8_dec_at(int t, int isa) {
    const kern_level *l = kern_level_at(isa);
    return l && t >= 0 && t < QUANT_TYPE_COUNT ? l->x8->dec[t] : NULL;
}

kern_x8_dec_fn kern_x8_dec_best(int t) { return t >= 0 && t < QUANT_TYPE_COUNT ? kern_level_best()->x8->dec[t] : NULL; }

kern_tile_fn kern_tile_at(int t, int isa) {
    const kern_level *l = kern_level_at(isa);
    if (!l) return NULL;
    return t == QUANT_F16 ? l->tile_f16 : quant_tile_at(t, isa);
}
