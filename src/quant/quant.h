/*
 * quant — tensor element types, block layouts and the dot-product kernels.
 *
 * Type ids are the ones GGUF stores in its tensor infos (the ggml numbering),
 * so a tensor's type field indexes quant_traits directly.  Quantized types are
 * stored as blocks of `blck` elements taking `bsize` bytes each.
 *
 * Every kernel has a scalar reference (the *_ref functions and vec_dot_ref).
 * SIMD versions are picked once by quant_init() from the CPU's features; the
 * tests compare each SIMD path with its scalar twin.
 *
 * A matrix-vector product W·x with W of type T is computed as
 *     quantize x to traits[T].vec_dot_type  (activation row, done once per row)
 *     for each weight row r: vec_dot(n, &y[r], W[r], xq)
 * which is how quantized weights are used without expanding them to F32.
 */
#ifndef KILN_QUANT_H
#define KILN_QUANT_H

#include <stddef.h>
#include <stdint.h>

enum quant_type {
    QUANT_F32 = 0,
    QUANT_F16 = 1,
    QUANT_Q4_0 = 2,
    QUANT_Q4_1 = 3,
    QUANT_Q5_0 = 6,
    QUANT_Q5_1 = 7,
    QUANT_Q8_0 = 8,
    QUANT_Q8_1 = 9,
    QUANT_Q2_K = 10,
    QUANT_Q3_K = 11,
    QUANT_Q4_K = 12,
    QUANT_Q5_K = 13,
    QUANT_Q6_K = 14,
    QUANT_Q8_K = 15,
    QUANT_IQ2_XXS = 16,
    QUANT_IQ2_XS = 17,
    QUANT_IQ3_XXS = 18,
    QUANT_IQ4_NL = 20,
    QUANT_IQ3_S = 21,
    QUANT_IQ2_S = 22,
    QUANT_IQ4_XS = 23,
    QUANT_IQ1_S = 19,
    QUANT_IQ1_M = 29,
    QUANT_TQ1_0 = 34,
    QUANT_TQ2_0 = 35,
    QUANT_MXFP4 = 39,
    QUANT_BF16 = 30,
    QUANT_TYPE_COUNT = 40 /* ids below this may appear in files */
};

/* Instruction-set levels, in increasing order, numbered per architecture:
 * on x86-64 scalar, avx2, avx512; on aarch64 scalar, neon (Advanced SIMD,
 * every aarch64 CPU), dotprod (neon + sdot/udot, Armv8.2 FEAT_DotProd).
 * A build has the levels of its own architecture only (quant_isa_name names
 * them); elsewhere scalar is the only level. */
enum quant_isa {
    QUANT_ISA_SCALAR = 0,
    QUANT_ISA_AVX2 = 1,
    QUANT_ISA_AVX512 = 2,
    QUANT_ISA_NEON = 1,
    QUANT_ISA_DOTPROD = 2,
    QUANT_ISA_TOP = 2 /* the highest level number of any architecture */
};

/* Expand n elements (n a multiple of blck) from blocks x into floats y. */
typedef void (*quant_to_f32_fn)(const void *x, float *y, int64_t n);
/* Quantize n floats (n a multiple of blck) into blocks y. */
typedef void (*quant_from_f32_fn)(const float *x, void *y, int64_t n);
/* *s = dot of n elements of weight row x (this type) and activation row y
 * (of this type's vec_dot_type).  n is a multiple of both block sizes. */
typedef void (*quant_vec_dot_fn)(int n, float *s, const void *x, const void *y);

typedef struct quant_traits {
    const char *name;                /* "Q4_0", as GGUF tools print it; NULL = unknown id */
    int blck;                        /* elements per block */
    size_t bsize;                    /* bytes per block */
    int vec_dot_type;                /* activation type vec_dot expects */
    quant_to_f32_fn to_f32;          /* scalar dequantizer */
    quant_from_f32_fn from_f32;      /* scalar reference quantizer */
    quant_from_f32_fn from_f32_fast; /* SIMD quantizer for activations (or = from_f32) */
    quant_vec_dot_fn vec_dot;        /* best for this CPU, set by quant_init() */
    quant_vec_dot_fn vec_dot_ref;    /* scalar twin */
} quant_traits;

/* The processor's features and, on x86-64, the register states the OS
 * enables (CPUID, XCR0); on aarch64 what the OS reports (Linux: getauxval
 * HWCAP/HWCAP2; macOS: sysctl hw.optional.*); read once.  Only a feature
 * whose state the OS enables may run.  The fields of the other
 * architecture stay 0. */
typedef struct quant_cpu {
    char vendor[13]; /* "GenuineIntel", "AuthenticAMD"; "arm" on aarch64 */
    char brand[49];  /* the model string, "" when not reported */
    unsigned avx : 1, avx2 : 1, fma : 1, f16c : 1, bmi2 : 1;
    unsigned avx512f : 1, avx512dq : 1, avx512bw : 1, avx512vl : 1, avx512vnni : 1, avx512bf16 : 1;
    unsigned amx_tile : 1, amx_int8 : 1, amx_bf16 : 1;
    unsigned os_ymm : 1;     /* XCR0 saves XMM and YMM */
    unsigned os_zmm : 1;     /* ... and the AVX-512 opmask and ZMM states */
    unsigned os_amx : 1;     /* ... and the AMX tile states */
    unsigned kernel_amx : 1; /* Linux would grant a process the AMX tile data */
    /* aarch64: Advanced SIMD, FEAT_DotProd (sdot/udot), FEAT_I8MM (smmla),
     * FEAT_FP16 (half-precision arithmetic), FEAT_BF16 (bfdot), SVE */
    unsigned asimd : 1, dotprod : 1, i8mm : 1, fp16 : 1, bf16 : 1, sve : 1;
    unsigned arm_known : 1; /* the OS answered the aarch64 questions */
} quant_cpu;
const quant_cpu *quant_cpu_get(void);

/* Chooses the ISA level once: the best the CPU supports (cpuid + OS xsave
 * state; the OS's report on aarch64), capped by KILN_ISA=<a level's name>
 * (scalar|avx2|avx512 on x86-64, scalar|neon|dotprod on aarch64).  Later calls do nothing;
 * quant_get() calls it if nobody has. */
void quant_init(void);
/* The level the CPU supports (cpuid + OS xsave state). */
int quant_cpu_isa(void);
/* 1 when the CPU has AVX512_BF16 as well as the AVX-512 level (the BF16
 * dot then uses vdpbf16ps). */
int quant_cpu_bf16(void);
/* The level quant_init() chose. */
int quant_active_isa(void);
const char *quant_isa_name(int isa);

/* Traits of type id t, or NULL when t is not a known id: the table of the
 * active level, whose vec_dot / from_f32_fast are its best kernels. */
const quant_traits *quant_get(int t);
/* The same from the table of level isa (each level's table is complete: a
 * type without a kernel at that level takes the one below); NULL when t is
 * unknown or the CPU lacks the level. */
const quant_traits *quant_get_at(int t, int isa);
/* 1 when t has a dequantizer and a dot kernel. */
int quant_supported(int t);
/* Bytes taken by n elements of type t (n a multiple of blck). */
size_t quant_row_size(int t, int64_t n);
/* Type id from a name such as "q4_0" or "Q4_K" (case-insensitive), -1 if none. */
int quant_from_name(const char *name);

/* The dot kernel of type t at exactly this ISA level, NULL if that level has
 * none or the CPU lacks the level (tests use it to compare every SIMD path
 * with the scalar twin). */
quant_vec_dot_fn quant_vec_dot_at(int t, int isa);
quant_from_f32_fn quant_from_f32_at(int t, int isa);

/* A block of a product (the shape of kernels/matmul.h's kern_tile_fn): for
 * r < nr, t < nt
 *     y[t * ldy + r] = dot of n elements of weight row r (at w + r * wrow)
 *                      and activation row t (at a + t * arow)
 * with the activations in the type's vec_dot_type, each output the very
 * float the level's vec_dot (and the scalar vec_dot_ref) gives. */
typedef void (*quant_tile_fn)(int n, const void *w, size_t wrow, int nr, const void *a, size_t arow, int nt, float *y,
                              int64_t ldy);
/* The block kernel of weight type t at level isa, NULL when that level has
 * none on this CPU (today: Q8_0, Q4_0 and Q4_K at aarch64's dotprod level on a
 * CPU with FEAT_I8MM, two rows by two tokens per smmla). */
quant_tile_fn quant_tile_at(int t, int isa);

/* The F16 dot in the lane order of the AVX2 (lanes 8) and AVX-512 (lanes
 * 16) F16 vec_dot and F16 block kernels: lane l sums x[k] * y[k] (one fused
 * multiply-add each) for k = l mod lanes, the last partial group
 * zero-padded; with 16 lanes, lanes l and l + 8 are added; then with
 * s_l = a_l + a_(l+4): (s0 + s2) + (s1 + s3).  The scalar twin of those
 * kernels, bit for bit (tests). */
float quant_dot_f16_lanes(int n, const uint16_t *x, const uint16_t *y, int lanes);

/* IEEE half and bfloat16 conversions (scalar, exact, round-to-nearest-even). */
float quant_f16_to_f32(uint16_t h);
uint16_t quant_f32_to_f16(float f);
float quant_bf16_to_f32(uint16_t h);
uint16_t quant_f32_to_bf16(float f);

/* ---- Legacy block layouts (32 elements, byte-exact with GGUF) ----
 * d, m, s are IEEE halves.  Q4: element j in the low nibble of qs[j] for
 * j < 16, in the high nibble of qs[j-16] otherwise; Q5 adds bit 4 of element
 * j from bit j of the little-endian qh.  Q8_1's s = d * (sum of qs). */
typedef struct {
    uint16_t d;
    uint8_t qs[16];
} quant_block_q4_0;
typedef struct {
    uint16_t d, m;
    uint8_t qs[16];
} quant_block_q4_1;
typedef struct {
    uint16_t d;
    uint8_t qh[4];
    uint8_t qs[16];
} quant_block_q5_0;
typedef struct {
    uint16_t d, m;
    uint8_t qh[4];
    uint8_t qs[16];
} quant_block_q5_1;
typedef struct {
    uint16_t d;
    int8_t qs[32];
} quant_block_q8_0;
typedef struct {
    uint16_t d, s;
    int8_t qs[32];
} quant_block_q8_1;
_Static_assert(sizeof(quant_block_q4_0) == 18 && sizeof(quant_block_q4_1) == 20 && sizeof(quant_block_q5_0) == 22 &&
                   sizeof(quant_block_q5_1) == 24 && sizeof(quant_block_q8_0) == 34 && sizeof(quant_block_q8_1) == 36,
               "legacy block sizes");

/* ---- Implementation split (internal to the quant folder) ----
 * dispatch.c    the levels' tables, quant_init, quant_get and the lookups
 * quant.c       the CPU's level, f16/bf16 helpers
 * legacy.c      F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q8_1 (scalar)
 * kquants.c     Q2_K..Q6_K, Q8_K, IQ4_NL, IQ4_XS (scalar)
 * iquants.c     IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S (scalar; grids in
 *               iquants_grid.c)
 * lowbit.c      TQ1_0, TQ2_0, MXFP4, IQ1_S, IQ1_M (scalar)
 * *_avx2.c / *_avx512.c   SIMD twins, compiled with per-file ISA flags, each
 *               exporting the const table of its kernels below; x86.h holds
 *               the inline helpers they share.  Built on x86-64 only.
 * *_neon.c      the aarch64 twins (neon level; *_dotprod.c built with
 *               +dotprod for the dotprod level).  Built on aarch64 only. */
/* A type's scalar row: its reference functions fill every slot, the SIMD
 * levels replace the ones they have. */
static inline quant_traits quant_traits_ref(const char *name, int blck, size_t bsize, int vec_dot_type,
                                            quant_to_f32_fn to, quant_from_f32_fn from, quant_vec_dot_fn dot) {
    return (quant_traits){.name = name,
                          .blck = blck,
                          .bsize = bsize,
                          .vec_dot_type = vec_dot_type,
                          .to_f32 = to,
                          .from_f32 = from,
                          .from_f32_fast = from,
                          .vec_dot = dot,
                          .vec_dot_ref = dot};
}
void quant_fill_legacy(quant_traits *tab); /* tab has QUANT_TYPE_COUNT entries */
void quant_fill_kquants(quant_traits *tab);
void quant_fill_iquants(quant_traits *tab);
void quant_fill_lowbit(quant_traits *tab);

/* One file's kernels at one ISA level, by type id; NULL = none there. */
typedef struct quant_simd {
    quant_vec_dot_fn dot[QUANT_TYPE_COUNT];
    quant_from_f32_fn quant[QUANT_TYPE_COUNT]; /* activation quantizers (from_f32_fast) */
    quant_tile_fn tile[QUANT_TYPE_COUNT];      /* block kernels (quant_tile_at) */
} quant_simd;
extern const quant_simd quant_legacy_avx2, quant_kquants_avx2;
extern const quant_simd quant_lowbit_avx2, quant_lowbit_avx512;
/* AVX-512 with VNNI; the _bf16 table differs in the BF16 dot (vdpbf16ps),
 * for CPUs with AVX512_BF16 too. */
extern const quant_simd quant_legacy_avx512, quant_legacy_avx512_bf16, quant_kquants_avx512;
extern const quant_simd quant_iquants_avx2, quant_iquants_avx512;
/* aarch64: plain Advanced SIMD, and with sdot (FEAT_DotProd); beside the
 * dotprod level's, for CPUs that have them too: the BF16 dot with bfdot
 * (FEAT_BF16) and the Q8_0 / Q4_0 / Q4_K block kernels with smmla (FEAT_I8MM). */
extern const quant_simd quant_quant_neon, quant_quant_dotprod, quant_quant_bf16, quant_quant_i8mm;

#endif
