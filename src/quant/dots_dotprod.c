/*
 * dots_dotprod.c — the dotprod level's dot kernels: neon_dots.h with sdot
 * (built with -march=armv8.2-a+dotprod; only called when the CPU reports
 * FEAT_DotProd).
 */
#define QUANT_NEON_TABLE quant_quant_dotprod
#define QUANT_NEON_DOTPROD 1
#include "neon_dots.h"
