/*
 * dots_neon.c — the neon level's dot kernels (Advanced SIMD, every
 * aarch64 CPU): neon_dots.h without sdot.
 */
#define KQ_NEON_TABLE kq_quant_neon
#define KQ_NEON_DOTPROD 0
#include "neon_dots.h"
