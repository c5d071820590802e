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

typedef int kcd_result;
typedef unsigned long long kcd_ptr;

typedef struct kcd_api {
    kcd_result (*init)(unsigned flags);
    kcd_result (*driver_version)(int *v);
    kcd_result (*device_count)(int *n);
    kcd_result (*device_get)(int *dev, int ordinal);
    kcd_result (*device_name)(char *name, int cap, int dev);
    kcd_result (*device_attr)(int *v, int attr, int dev);
    kcd_result (*device_mem)(size_t *bytes, int dev);
    kcd_result (*mem_info)(size_t *free_bytes, size_t *total_bytes); /* the current context's device */
    kcd_result (*primary_retain)(void **ctx, int dev);
    kcd_result (*primary_release)(int dev);
    kcd_result (*ctx_set)(void *ctx);
    kcd_result (*module_load)(void **mod, const void *image);
    kcd_result (*module_unload)(void *mod);
    kcd_result (*get_function)(void **fn, void *mod, const char *name);
    kcd_result (*mem_alloc)(kcd_ptr *p, size_t bytes);
    kcd_result (*mem_free)(kcd_ptr p);
    kcd_result (*htod)(kcd_ptr dst, const void *src, size_t bytes);
    kcd_result (*dtoh)(void *dst, kcd_ptr src, size_t bytes);
    kcd_result (*dtod)(kcd_ptr dst, kcd_ptr src, size_t bytes);
    kcd_result (*memset8)(kcd_ptr dst, unsigned char v, size_t n);
    kcd_result (*launch)(void *fn, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                         unsigned shared, void *stream, void **args, void **extra);
    kcd_result (*sync)(void);
    kcd_result (*error_string)(kcd_result r, const char **s);
    int overridden; /* 1: the library came from KILN_CUDA_DRIVER */
} kcd_api;

/* CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR / _MINOR */
#define KCD_ATTR_CC_MAJOR 75
#define KCD_ATTR_CC_MINOR 76

/* The driver, loaded and initialized once (cuInit); NULL when there is
 * none or it lacks an entry point, with the reason in why. */
const kcd_api *kcd_load(char *why, size_t cap);

/* A driver error as text ("error 2 (out of memory)") in buf. */
const char *kcd_error(kcd_result r, char *buf, size_t cap);

#endif
