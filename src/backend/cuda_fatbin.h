/*
 * The CUDA kernels (the .cu files of src/backend/cuda/) as one fatbin embedded in the
 * library when the build had nvcc (KILN_CUDA, docs/gpu.md): SASS for sm_80,
 * sm_86, sm_89, sm_90 and compute_90 PTX.  The host side hands it to the
 * driver (cuModuleLoadData) and looks kernels up by their extern "C" names.
 */
#ifndef KILN_BACKEND_CUDA_FATBIN_H
#define KILN_BACKEND_CUDA_FATBIN_H

#include <stddef.h>

/* The fatbin's bytes (static storage, 8-byte aligned) and their count in
 * *size; NULL and 0 when this build has no GPU kernels. */
const void *kbe_cuda_fatbin(size_t *size);

#endif
