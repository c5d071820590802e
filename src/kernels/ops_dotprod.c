/* ops_dotprod.c — the dotprod level's NEON twins of the ops.c kernels: the
 * body of ops_neon.h built with FEAT_DotProd, so the Q8_0 cache's block
 * dots take sdot (the same exact integer sums). */
#include "kernels/ops_neon.h"

const kern_ops kern_ops_dotprod = KN_OPS_SET;
