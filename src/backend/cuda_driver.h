/*
 * cuda_driver — the CUDA driver API entry points kiln's CUDA backend uses,
 * loaded with dlopen at run time (nothing links CUDA).  The library is
 * libcuda.so.1, or the one the environment variable KILN_CUDA_DRIVER names
 * (the tests' mock device, tests/cuda_mock.cpp).  Device pointers are
 * 64-bit integers (CUdeviceptr); results are CUresult codes, 0 success.
 */
#ifndef KILN_BACKEND_CUDA_DRIVER_H
#define KILN_BACKEND_CUDA_DRIVER_H

#include <stddef.h>
#include <stdint.h>

typedef int backend_cuda_result;
typedef unsigned long long backend_cuda_ptr;

typedef struct backend_cuda_api {
    backend_cuda_result (*init)(unsigned flags);
    backend_cuda_result (*driver_version)(int *v);
    backend_cuda_result (*device_count)(int *n);
    backend_cuda_result (*device_get)(int *dev, int ordinal);
    backend_cuda_result (*device_name)(char *name, int cap, int dev);
    backend_cuda_result (*device_attr)(int *v, int attr, int dev);
    backend_cuda_result (*device_mem)(size_t *bytes, int dev);
    backend_cuda_result (*mem_info)(size_t *free_bytes, size_t *total_bytes); /* the current context's device */
    backend_cuda_result (*primary_retain)(void **ctx, int dev);
    backend_cuda_result (*primary_release)(int dev);
    backend_cuda_result (*ctx_set)(void *ctx);
    backend_cuda_result (*module_load)(void **mod, const void *image);
    backend_cuda_result (*module_unload)(void *mod);
    backend_cuda_result (*get_function)(void **fn, void *mod, const char *name);
    backend_cuda_result (*mem_alloc)(backend_cuda_ptr *p, size_t bytes);
    backend_cuda_result (*mem_free)(backend_cuda_ptr p);
    backend_cuda_result (*htod)(backend_cuda_ptr dst, const void *src, size_t bytes);
    backend_cuda_result (*dtoh)(void *dst, backend_cuda_ptr src, size_t bytes);
    backend_cuda_result (*dtod)(backend_cuda_ptr dst, backend_cuda_ptr src, size_t bytes);
    backend_cuda_result (*memset8)(backend_cuda_ptr dst, unsigned char v, size_t n);
    backend_cuda_result (*launch)(void *fn, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                                  unsigned bz, unsigned shared, void *stream, void **args, void **extra);
    backend_cuda_result (*sync)(void);
    backend_cuda_result (*error_string)(backend_cuda_result r, const char **s);
    int overridden; /* 1: the library came from KILN_CUDA_DRIVER */
} backend_cuda_api;

/* CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR / _MINOR */
#define BACKEND_CUDA_ATTR_CC_MAJOR 75
#define BACKEND_CUDA_ATTR_CC_MINOR 76

/* The driver, loaded and initialized once (cuInit); NULL when there is
 * none or it lacks an entry point, with the reason in why. */
const backend_cuda_api *backend_cuda_load(char *why, size_t cap);

/* A driver error as text ("error 2 (out of memory)") in buf. */
const char *backend_cuda_error(backend_cuda_result r, char *buf, size_t cap);

#endif
