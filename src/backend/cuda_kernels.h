/*
 * What host code needs to know about the CUDA kernels of src/backend/cuda
 * (docs/gpu.md): the embedded fatbin, and the per-model tables the kernels
 * take.  Launch shapes are in src/backend/cuda/shapes.h, shared with the
 * device code.
 */
#ifndef KILN_BACKEND_CUDA_KERNELS_H
#define KILN_BACKEND_CUDA_KERNELS_H

#include <stddef.h>

#include "kernels/ops.h"

/* The kernels as one fatbin embedded in the library when the build had
 * nvcc (KILN_CUDA): SASS for sm_80, sm_86, sm_89, sm_90 and compute_90 PTX.
 * The host hands it to the driver (cuModuleLoadData) and finds kernels by
 * their extern "C" names.  Returns the bytes (static storage, 8-byte
 * aligned) and their count in *size; NULL and 0 when this build has no GPU
 * kernels. */
const void *backend_cuda_fatbin(size_t *size);

/* kcu_rope's table for r: the angle of pair i at position p is
 * p * inv_freq[i] (n_rot / 2 entries), with the frequency scale, the
 * frequency factors and YaRN's per-dimension mix folded in (each is linear
 * in the position), and *mscale the factor of cos and sin (attn_factor,
 * times YaRN's magnitude correction).  The same angles as kern_rope_table's,
 * up to rounding. */
void backend_cuda_rope_freqs(const kern_rope *r, float *inv_freq, float *mscale);

#endif
