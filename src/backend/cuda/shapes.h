/*
 * Launch shapes of the CUDA kernels, shared by the device code and the
 * host code that launches it (plain C macros; each kernel's comment says
 * how they enter its grid and block).
 */
#ifndef KILN_KCU_SHAPES_H
#define KILN_KCU_SHAPES_H

/* matvec.cu: warps (= weight rows) per block; activation vectors per launch */
#define KCU_MV_WARPS 4
#define KCU_MV_MAXV 8

/* gemm.cu: the output tile (tokens x weight rows), the K step, threads */
#define KCU_GM_BM 64
#define KCU_GM_BN 64
#define KCU_GM_BK 32
#define KCU_GM_THREADS 128

/* attention.cu: positions per KV cache block; the largest head size;
 * warps per block of the decode and prefill kernels */
#define KCU_KV_BLOCK 16
#define KCU_ATT_MAXD 256
#define KCU_ATT_WARPS 4

/* gdn.cu: the most taps of the causal convolution; the largest key head
 * size of the delta rule (a multiple of 32); its warps (= state rows) per
 * block */
#define KCU_CONV_MAXK 16
#define KCU_GDN_MAXD 256
#define KCU_GDN_WARPS 4

#endif
