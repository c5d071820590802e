/*
 * level.h — the kernels folder's dispatch (internal to src/kernels): one
 * const table per ISA level naming that level's kernels, chosen by the
 * level quant's quant_init() picked.  The accessors of ops.h, ssm.h, conv.h,
 * pack.h and matmul.h (kern_ops_at, kern_ops_best, kern_x8_at, ...) read these
 * tables.  Each SIMD file exports its kernels as the const objects below.
 */
#ifndef KILN_KERNELS_LEVEL_H
#define KILN_KERNELS_LEVEL_H

#include "kernels/matmul.h"
#include "kernels/ops.h"
#include "kernels/pack.h"
#include "quant/quant.h"

/* conv.h and ssm.h each name a different struct kern_conv, so this header
 * includes neither and names their types by tag. */
struct kern_gn;
struct kern_gemm;
struct kern_ssm_ops;
typedef void (*kern_level_gn_fn)(const struct kern_gn *g, const float *x, float *y, int group);
/* conv.h's kern_gemm_tile_fn and kern_gemm_pack_fn */
typedef void (*kern_level_gemm_tile_fn)(int mr, int nr, int kc, const float *a, size_t lda, const float *bp, float *c,
                                        size_t ldc);
typedef void (*kern_level_gemm_pack_fn)(const struct kern_gemm *g, int k0, int kc, int n0, int nc, float *panel);

/* A level's interleaved (pack.h) kernels by weight type; NULL = none. */
typedef struct kern_x8_set {
    kern_x8_fn fn[QUANT_TYPE_COUNT];
    kern_x8_dec_fn dec[QUANT_TYPE_COUNT];
} kern_x8_set;

typedef struct kern_level {
    const kern_ops *ops;
    const struct kern_ssm_ops *ssm;
    kern_level_gn_fn groupnorm; /* conv.h's kern_gn_fn */
    const kern_x8_set *x8;
    kern_tile_fn tile_f16;                  /* the F16 block kernel (matmul.h) */
    kern_level_gemm_tile_fn gemm_tile;      /* conv.h's image GEMM: the 6 x 16 tile */
    kern_level_gemm_pack_fn gemm_pack_rows; /* and its packer of weight rows */
    void (*gelu_tanh)(float *x, size_t n);  /* conv.h's kern_gelu_fn */
} kern_level;

/* The table of level isa (QUANT_ISA_*), NULL when the CPU lacks it. */
const kern_level *kern_level_at(int isa);
/* The table of the level quant_init() chose. */
const kern_level *kern_level_best(void);

/* The scalar references (ops.c, ssm.c, conv.c, pack.c, matmul.c). */
extern const kern_ops kern_ops_scalar;
extern const struct kern_ssm_ops kern_ssm_scalar;
extern const kern_x8_set kern_x8_scalar;
void kern_groupnorm_ref(const struct kern_gn *g, const float *x, float *y, int group);
void kern_gemm_tile_ref(int mr, int nr, int kc, const float *a, size_t lda, const float *bp, float *c, size_t ldc);
void kern_gemm_pack_rows_ref(const struct kern_gemm *g, int k0, int kc, int n0, int nc, float *panel);
void kern_gelu_tanh_ref(float *x, size_t n);
void kern_tile_f16_ref(int n, const void *w, size_t wrow, int nr, const void *a, size_t arow, int nt, float *y,
                       int64_t ldy);
/* AVX2 (+ FMA, F16C): ops_avx2.c, ssm_avx2.c, conv_avx2.c, pack_avx2.c,
 * matmul_avx2.c. */
extern const kern_ops kern_ops_avx2;
extern const struct kern_ssm_ops kern_ssm_avx2;
extern const kern_x8_set kern_x8_avx2;
void kern_groupnorm_avx2(const struct kern_gn *g, const float *x, float *y, int group);
void kern_gemm_tile_avx2(int mr, int nr, int kc, const float *a, size_t lda, const float *bp, float *c, size_t ldc);
void kern_gemm_pack_rows_avx2(const struct kern_gemm *g, int k0, int kc, int n0, int nc, float *panel);
void kern_gelu_tanh_avx2(float *x, size_t n);
void kern_tile_f16_avx2(int n, const void *w, size_t wrow, int nr, const void *a, size_t arow, int nt, float *y,
                        int64_t ldy);
/* AVX-512 VNNI: pack_avx512.c, matmul_avx512.c, conv_avx512.c. */
extern const kern_x8_set kern_x8_avx512;
void kern_gemm_tile_avx512(int mr, int nr, int kc, const float *a, size_t lda, const float *bp, float *c, size_t ldc);
void kern_tile_f16_avx512(int n, const void *w, size_t wrow, int nr, const void *a, size_t arow, int nt, float *y,
                          int64_t ldy);

/* aarch64 NEON, the twins of both aarch64 levels (the dotprod level adds
 * nothing to this folder's): ops_neon.c, ssm_neon.c, conv_neon.c, matmul_neon.c. */
extern const kern_ops kern_ops_neon;
extern const kern_ops kern_ops_dotprod; /* ops_dotprod.c: the same with sdot */
extern const struct kern_ssm_ops kern_ssm_neon;
void kern_groupnorm_neon(const struct kern_gn *g, const float *x, float *y, int group);
void kern_gemm_tile_neon(int mr, int nr, int kc, const float *a, size_t lda, const float *bp, float *c, size_t ldc);
void kern_gemm_pack_rows_neon(const struct kern_gemm *g, int k0, int kc, int n0, int nc, float *panel);
void kern_gelu_tanh_neon(float *x, size_t n);
void kern_tile_f16_neon(int n, const void *w, size_t wrow, int nr, const void *a, size_t arow, int nt, float *y,
                        int64_t ldy);

#endif
