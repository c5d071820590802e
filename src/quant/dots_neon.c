/*
 * dots_neon.c — the neon level's dot kernels (Advanced SIMD, every
 * aarch64 CPU): neon_dots.h without sdot.
 */
#define QUANT_NEON_TABLE quant_quant_neon
#define QUANT_NEON_DOTPROD 0
#include "neon_dots.h"
