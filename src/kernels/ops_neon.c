/* ops_neon.c — the neon level's NEON twins of the ops.c kernels (the body
 * is ops_neon.h's). */
#include "kernels/ops_neon.h"

const kern_ops kern_ops_neon = KN_OPS_SET;
