/* The CUDA driver API loaded with dlopen (cuda_driver.h). */
#include "backend/cuda_driver.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static backend_cuda_api api;
static const backend_cuda_api *loaded;
static char load_why[256];
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void load(void) {
    const char *path = getenv("KILN_CUDA_DRIVER");
    api.overridden = path && *path;
    if (!api.overridden) path = "libcuda.so.1";
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        snprintf(load_why, sizeof load_why, "no CUDA driver (%s)", path);
        return;
    }
    const struct {
        void **fn;
        const char *name;
    } syms[] = {{(void **)&api.init, "cuInit"},
                {(void **)&api.driver_version, "cuDriverGetVersion"},
                {(void **)&api.device_count, "cuDeviceGetCount"},
                {(void **)&api.device_get, "cuDeviceGet"},
                {(void **)&api.device_name, "cuDeviceGetName"},
                {(void **)&api.device_attr, "cuDeviceGetAttribute"},
                {(void **)&api.device_mem, "cuDeviceTotalMem_v2"},
                {(void **)&api.mem_info, "cuMemGetInfo_v2"},
                {(void **)&api.primary_retain, "cuDevicePrimaryCtxRetain"},
                {(void **)&api.primary_release, "cuDevicePrimaryCtxRelease_v2"},
                {(void **)&api.ctx_set, "cuCtxSetCurrent"},
                {(void **)&api.module_load, "cuModuleLoadData"},
                {(void **)&api.module_unload, "cuModuleUnload"},
                {(void **)&api.get_function, "cuModuleGetFunction"},
                {(void **)&api.mem_alloc, "cuMemAlloc_v2"},
                {(void **)&api.mem_free, "cuMemFree_v2"},
                {(void **)&api.htod, "cuMemcpyHtoD_v2"},
                {(void **)&api.dtoh, "cuMemcpyDtoH_v2"},
                {(void **)&api.dtod, "cuMemcpyDtoD_v2"},
                {(void **)&api.memset8, "cuMemsetD8_v2"},
                {(void **)&api.launch, "cuLaunchKernel"},
                {(void **)&api.sync, "cuCtxSynchronize"},
                {(void **)&api.error_string, "cuGetErrorString"}};
    for (size_t i = 0; i < sizeof syms / sizeof syms[0]; i++) {
        *syms[i].fn = dlsym(h, syms[i].name);
        if (!*syms[i].fn) {
            snprintf(load_why, sizeof load_why, "the CUDA driver %s lacks %s", path, syms[i].name);
            dlclose(h);
            return;
        }
    }
    int n = 0;
    backend_cuda_result r = api.init(0);
    if (r == 0) r = api.device_count(&n);
    if (r != 0 || n < 1) {
        snprintf(load_why, sizeof load_why, "the CUDA driver finds no GPU (cuInit: error %d)", r);
        dlclose(h);
        return;
    }
    loaded = &api;
}

const backend_cuda_api *backend_cuda_load(char *why, size_t cap) {
    pthread_once(&once, load);
    if (!loaded && why) snprintf(why, cap, "%s", load_why);
    return loaded;
}

const char *backend_cuda_error(backend_cuda_result r, char *buf, size_t cap) {
    const char *s = NULL;
    if (loaded && loaded->error_string) loaded->error_string(r, &s);
    snprintf(buf, cap, "error %d (%s)", r, s ? s : "unknown");
    return buf;
}
