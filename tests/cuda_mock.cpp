/*
 * The mock CUDA device: a shared library exporting the driver API entry
 * points kiln loads (src/backend/cuda_driver.h), for machines without a GPU.
 * kiln loads it instead of libcuda.so.1 when KILN_CUDA_DRIVER names it.
 * "Device" memory is host memory, but a device pointer is its host address
 * with bit 62 set: not canonical on x86-64 or AArch64, so host code that
 * reads or writes through a device pointer faults here as it would with a
 * GPU (the copies and the kernels' pointer arguments clear the bit).  The
 * module is the kernels of src/backend/cuda compiled as C++ over
 * tests/emucuda.h, whatever image cuModuleLoadData is given, and
 * cuLaunchKernel finds a kernel by its name and runs it on the emulator,
 * synchronously, unpacking the argument array by the kernel's own
 * parameter types.  One device, compute capability 8.0, of 1 GiB, or of
 * the MiB the environment variable KILN_CUDA_MOCK_MEM_MIB gives; its free
 * memory is that less what is allocated (so a test can make a model too
 * big for the device).
 */
#include "attention.cu"
#include "gdn.cu"
#include "gemm.cu"
#include "matvec.cu"
#include "moe.cu"
#include "ops.cu"

#include <map>
#include <mutex>
#include <string>
#include <type_traits>
#include <utility>

typedef unsigned long long mock_ptr;
typedef std::function<void(dim3, dim3, void **)> mock_kernel;

enum { OK = 0, ERR_INVALID_VALUE = 1, ERR_OUT_OF_MEMORY = 2, ERR_NOT_FOUND = 500 };

#define DEV_BIT (1ull << 62)

static mock_ptr to_dev(void *host) { return host ? (mock_ptr)(uintptr_t)host | DEV_BIT : 0; }
static void *to_host(mock_ptr dev) { return (void *)(uintptr_t)(dev & ~DEV_BIT); }

/* a kernel argument: pointers from device to host addresses */
template <typename T> static T arg(void *p) {
    T v = *(T *)p;
    if constexpr (std::is_pointer<T>::value) {
        return (T)to_host((mock_ptr)(uintptr_t)v);
    } else {
        return v;
    }
}

template <typename... A, size_t... I> static void invoke(void (*f)(A...), void **args, std::index_sequence<I...>) {
    f(arg<typename std::decay<A>::type>(args[I])...);
}

template <typename... A> static mock_kernel wrap(void (*f)(A...)) {
    return [f](dim3 grid, dim3 block, void **args) {
        kcu_emu::launch(grid, block, [&] { invoke(f, args, std::index_sequence_for<A...>{}); });
    };
}

static std::map<std::string, mock_kernel> &kernels() {
    static std::map<std::string, mock_kernel> k;
    if (!k.empty()) return k;
#define K(fn) k[#fn] = wrap(fn)
#define TYPED(p)                                                                                                      \
    K(p##_f32);                                                                                                       \
    K(p##_f16);                                                                                                       \
    K(p##_bf16);                                                                                                      \
    K(p##_q4_0);                                                                                                      \
    K(p##_q8_0);                                                                                                      \
    K(p##_q4_1);                                                                                                      \
    K(p##_q5_0);                                                                                                      \
    K(p##_q5_1);                                                                                                      \
    K(p##_iq4_nl);                                                                                                    \
    K(p##_q2_k);                                                                                                      \
    K(p##_q3_k);                                                                                                      \
    K(p##_iq4_xs);                                                                                                    \
    K(p##_q4_k);                                                                                                      \
    K(p##_q5_k);                                                                                                      \
    K(p##_q6_k)
    TYPED(kcu_matvec);
    TYPED(kcu_gemm);
    TYPED(kcu_get_rows);
    K(kcu_rmsnorm);
    K(kcu_rope);
    K(kcu_swiglu);
    K(kcu_add);
    K(kcu_argmax);
    K(kcu_kv_write);
    K(kcu_attn_decode);
    K(kcu_attn_combine);
    K(kcu_attn_prefill);
    K(kcu_attn_decode_q8);
    K(kcu_kv_write_q8);
    K(kcu_gdn_gates);
    K(kcu_conv_silu);
    K(kcu_l2norm);
    K(kcu_rmsnorm_gated);
    K(kcu_gdn_rec);
    K(kcu_attn_gate);
    K(kcu_moe_route);
    K(kcu_gather_rows);
    K(kcu_add_rows);
    K(kcu_moe_combine);
    K(kcu_swiglu_oai);
    K(kcu_relu_sq);
    K(kcu_gelu);
#undef TYPED
#undef K
    return k;
}

#define API extern "C" __attribute__((visibility("default")))

API int cuInit(unsigned) { return OK; }
API int cuDriverGetVersion(int *v) {
    *v = 13000;
    return OK;
}
API int cuDeviceGetCount(int *n) {
    *n = 1;
    return OK;
}
API int cuDeviceGet(int *dev, int ordinal) {
    if (ordinal != 0) return ERR_INVALID_VALUE;
    *dev = 0;
    return OK;
}
API int cuDeviceGetName(char *name, int cap, int) {
    snprintf(name, (size_t)cap, "kiln mock device (CPU emulator)");
    return OK;
}
API int cuDeviceGetAttribute(int *v, int attr, int) {
    *v = attr == 75 ? 8 : 0; /* compute capability 8.0 */
    return OK;
}
/* the device's size, and the bytes of every live allocation */
static size_t mock_total(void) {
    const char *e = getenv("KILN_CUDA_MOCK_MEM_MIB");
    const long long mib = e ? atoll(e) : 0;
    return mib > 0 ? (size_t)mib << 20 : (size_t)1 << 30;
}
static std::mutex mock_mu;
static std::map<mock_ptr, size_t> mock_live;
static size_t mock_used;

API int cuDeviceTotalMem_v2(size_t *bytes, int) {
    *bytes = mock_total();
    return OK;
}
API int cuMemGetInfo_v2(size_t *free_bytes, size_t *total_bytes) {
    std::lock_guard<std::mutex> lk(mock_mu);
    const size_t total = mock_total();
    *free_bytes = mock_used < total ? total - mock_used : 0;
    *total_bytes = total;
    return OK;
}
API int cuDevicePrimaryCtxRetain(void **ctx, int) {
    static int the_ctx;
    *ctx = &the_ctx;
    return OK;
}
API int cuDevicePrimaryCtxRelease_v2(int) { return OK; }
API int cuCtxSetCurrent(void *) { return OK; }
API int cuModuleLoadData(void **mod, const void *) {
    *mod = &kernels();
    return OK;
}
API int cuModuleUnload(void *) { return OK; }
API int cuModuleGetFunction(void **fn, void *, const char *name) {
    auto it = kernels().find(name);
    if (it == kernels().end()) return ERR_NOT_FOUND;
    *fn = &it->second;
    return OK;
}
API int cuMemAlloc_v2(mock_ptr *p, size_t bytes) {
    std::lock_guard<std::mutex> lk(mock_mu);
    if (bytes > mock_total() - mock_used) return ERR_OUT_OF_MEMORY;
    void *m = malloc(bytes ? bytes : 1);
    if (!m) return ERR_OUT_OF_MEMORY;
    *p = to_dev(m);
    mock_live[*p] = bytes;
    mock_used += bytes;
    return OK;
}
API int cuMemFree_v2(mock_ptr p) {
    std::lock_guard<std::mutex> lk(mock_mu);
    auto it = mock_live.find(p);
    if (it == mock_live.end()) return ERR_INVALID_VALUE;
    mock_used -= it->second;
    mock_live.erase(it);
    free(to_host(p));
    return OK;
}
API int cuMemcpyHtoD_v2(mock_ptr dst, const void *src, size_t n) {
    memmove(to_host(dst), src, n);
    return OK;
}
API int cuMemcpyDtoH_v2(void *dst, mock_ptr src, size_t n) {
    memmove(dst, to_host(src), n);
    return OK;
}
API int cuMemcpyDtoD_v2(mock_ptr dst, mock_ptr src, size_t n) {
    memmove(to_host(dst), to_host(src), n);
    return OK;
}
API int cuMemsetD8_v2(mock_ptr dst, unsigned char v, size_t n) {
    memset(to_host(dst), v, n);
    return OK;
}
API int cuLaunchKernel(void *fn, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                       unsigned shared, void *stream, void **args, void **extra) {
    (void)shared;
    (void)stream;
    (void)extra;
    /* a GPU's limits: grid y and z up to 65535, block z up to 64, 1024 threads */
    if (!fn || !args || !gx || !gy || !gz || !bx || !by || !bz || gx > 0x7fffffffu || gy > 65535 || gz > 65535 ||
        bz > 64 || bx * by * bz > 1024)
        return ERR_INVALID_VALUE;
    (*(mock_kernel *)fn)(dim3(gx, gy, gz), dim3(bx, by, bz), args);
    return OK;
}
API int cuCtxSynchronize(void) { return OK; }
API int cuGetErrorString(int r, const char **s) {
    *s = r == OK ? "no error" : r == ERR_OUT_OF_MEMORY ? "out of memory" : r == ERR_NOT_FOUND ? "named symbol not found" : "invalid value";
    return OK;
}
