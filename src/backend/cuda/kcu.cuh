/*
 * kcu.cuh — the one place kiln's device code touches CUDA-specific
 * intrinsics.  Kernels use only these wrappers (and blockIdx, threadIdx,
 * blockDim, gridDim, __shared__ arrays of fixed size), so the same .cu
 * sources compile with nvcc for the GPU and with a C++ compiler for the
 * CPU, where tests/emucuda.h supplies the wrappers (threads as fibers,
 * __syncthreads as a barrier, shuffles and mma.sync through per-warp
 * scratch).
 *
 * Conventions of every kernel: a warp is 32 threads; blockDim.x is a
 * multiple of 32 unless a kernel says otherwise; F16 and BF16 values are
 * their 16-bit patterns (uint16_t); tensors are row-major with the stated
 * shapes; every kernel is extern "C" so the host finds it by name in the
 * fatbin.
 */
#ifndef KILN_KCU_CUH
#define KILN_KCU_CUH

#include <stdint.h>

#define KCU_WARP 32

#ifdef __CUDACC__

#define KCU_DEV __device__ __forceinline__
#define KCU_KERNEL extern "C" __global__
/* a small read-only table at file scope (constant memory) */
#define KCU_CONST static __constant__ const

/* Barrier among the threads of a block. */
KCU_DEV void kcu_sync(void) { __syncthreads(); }

/* Lane index within the warp. */
KCU_DEV int kcu_lane(void) { return (int)(threadIdx.x & 31); }

/* The value v of lane (this lane ^ mask), all 32 lanes taking part. */
KCU_DEV float kcu_shfl_xor(float v, int mask) { return __shfl_xor_sync(0xffffffffu, v, mask); }
KCU_DEV int kcu_shfl_xor_i(int v, int mask) { return __shfl_xor_sync(0xffffffffu, v, mask); }
/* The value v of lane src, all 32 lanes taking part. */
KCU_DEV float kcu_shfl(float v, int src) { return __shfl_sync(0xffffffffu, v, src); }

KCU_DEV float kcu_h2f(uint16_t h) {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
    return f;
}
/* Round to nearest even. */
KCU_DEV uint16_t kcu_f2h(float f) {
    uint16_t h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
    return h;
}
KCU_DEV float kcu_bf2f(uint16_t h) { return __uint_as_float((uint32_t)h << 16); }
KCU_DEV float kcu_expf(float x) { return expf(x); }
KCU_DEV float kcu_rsqrtf(float x) { return rsqrtf(x); }

/* o[0..7] = p[0..7] in two 16-byte loads; p 16-byte aligned. */
KCU_DEV void kcu_ld8f(const float *p, float o[8]) {
    const float4 a = ((const float4 *)p)[0], b = ((const float4 *)p)[1];
    o[0] = a.x, o[1] = a.y, o[2] = a.z, o[3] = a.w;
    o[4] = b.x, o[5] = b.y, o[6] = b.z, o[7] = b.w;
}
/* 8 bytes from p in two 4-byte loads, p[0] in the low byte of lo; p
 * 4-byte aligned. */
KCU_DEV void kcu_ld8b(const uint8_t *p, uint32_t *lo, uint32_t *hi) {
    *lo = ((const uint32_t *)p)[0];
    *hi = ((const uint32_t *)p)[1];
}

/* D = A * B + C for one warp: mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32.
 * Fragments in the PTX ISA's layout for this shape (g = lane / 4, t = lane % 4;
 * a register holds two halves, the lower-numbered element in the low 16 bits):
 *   a[0] = A[g][2t..2t+1]     a[1] = A[g+8][2t..2t+1]
 *   a[2] = A[g][2t+8..2t+9]   a[3] = A[g+8][2t+8..2t+9]
 *   b[0] = B[2t..2t+1][g]     b[1] = B[2t+8..2t+9][g]
 *   c[0..1] = C[g][2t..2t+1]  c[2..3] = C[g+8][2t..2t+1]   (d as c) */
KCU_DEV void kcu_mma_16816(float d[4], const uint32_t a[4], const uint32_t b[2], const float c[4]) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
                 "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%10,%11,%12,%13};"
                 : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(c[0]), "f"(c[1]), "f"(c[2]),
                   "f"(c[3]));
}

#else /* the CPU emulator (tests/) */

#include "emucuda.h"

#endif

/* ---- helpers over the wrappers, shared by every build ---- */

/* Sum over the 32 lanes of a warp; every lane gets the total. */
KCU_DEV float kcu_warp_sum(float v) {
    for (int m = 16; m > 0; m >>= 1) v += kcu_shfl_xor(v, m);
    return v;
}

KCU_DEV float kcu_warp_max(float v) {
    for (int m = 16; m > 0; m >>= 1) v = fmaxf(v, kcu_shfl_xor(v, m));
    return v;
}

/* Sum over a block of at most 32 warps; every thread gets the total.
 * red: __shared__ float[32] of the caller. */
KCU_DEV float kcu_block_sum(float v, float *red) {
    const int lane = kcu_lane(), warp = (int)(threadIdx.x >> 5), nw = (int)((blockDim.x + 31) >> 5);
    v = kcu_warp_sum(v);
    kcu_sync();
    if (lane == 0) red[warp] = v;
    kcu_sync();
    v = lane < nw ? red[lane] : 0.0f;
    return kcu_warp_sum(v);
}

/* Two F16 patterns in one register, lo in the low 16 bits. */
KCU_DEV uint32_t kcu_pack2(uint16_t lo, uint16_t hi) { return (uint32_t)lo | ((uint32_t)hi << 16); }

KCU_DEV uint16_t kcu_ld_u16(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }

#endif
