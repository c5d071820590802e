/*
 * The CUDA backend (backend.h): the driver API (cuda_driver.h) and the
 * kernels of src/backend/cuda (the embedded fatbin, cuda_kernels.h).
 * Device memory holds the activations, the KV cache and the weights (as
 * stored, uploaded once by prepare); the host uploads a step's positions,
 * cells and block tables and downloads logits and argmax results.
 *
 * Its KV cache layout differs from the CPU's inside a block: a block is
 * BACKEND_KV_BLOCK cells of block_bytes / BACKEND_KV_BLOCK bytes, and layer l's K
 * row (n_head_kv x hd F16) of a cell sits at l_off[l] / BACKEND_KV_BLOCK in
 * it, its V row right after, so that cell c of a layer is at c times a
 * fixed stride (what attention.cu reads).  Only F16 caches.
 *
 * What has no kernel yet (MoE, the Gated DeltaNet, sliding windows,
 * attention sinks, gated attention, query temperature, GELU, V in K, F32
 * and Q8_0 caches) aborts with a message if called: the model load refuses
 * such models on CUDA first (model.c, kv.c).
 */
#ifndef KILN_BACKEND_CUDA_H
#define KILN_BACKEND_CUDA_H

#include "backend/backend.h"

#include <stddef.h>

/* The backend when this build has the kernels and a driver with a device
 * loads (or the driver KILN_CUDA_DRIVER names); NULL otherwise, with the
 * reason in why (why may be NULL). */
const backend_backend *backend_cuda_get(char *why, size_t cap);

/* The device's free and total memory in bytes (cuMemGetInfo) and its
 * name into name (cap bytes; name may be NULL); -1 without the backend. */
int backend_cuda_mem(size_t *free_bytes, size_t *total_bytes, char *name, size_t cap);

/* 1 when the kernels take weights of GGUF type `type`. */
int backend_cuda_weight_type(int type);

#endif
