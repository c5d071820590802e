/*
 * probe.c — kiln_backend_probe: what this machine can run, found without
 * loading a model.
 *
 * CPU rows come from CPUID and the OS-enabled register states (quant/cpu.c;
 * on aarch64 from what the OS reports):
 * a path is available only when both allow it, so an AMX or AVX-512 unit a
 * virtual machine advertises but does not enable is reported unavailable,
 * never used.  GPU rows load the vendor's driver library with dlopen and
 * initialize it (CUDA: cuInit and the device count; Vulkan: an instance and
 * its physical devices); a missing library is "unavailable", a library that
 * fails to initialize says so with its error code.  kiln has no GPU kernels
 * yet, so those rows are never "used".
 */
#define _GNU_SOURCE
#include "backend/probe.h"
#include "backend/cuda_kernels.h"

#include <dlfcn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define VK_NO_PROTOTYPES
#include <vulkan/vulkan.h>

typedef struct rows {
    kiln_backend_status *out;
    int cap, n;
} rows;

static void row(rows *r, const char *name, const char *kind, kiln_availability a, int supported, int used,
                const char *fmt, ...) __attribute__((format(printf, 7, 8)));
static void row(rows *r, const char *name, const char *kind, kiln_availability a, int supported, int used,
                const char *fmt, ...) {
    if (r->n < r->cap) {
        kiln_backend_status *s = &r->out[r->n];
        memset(s, 0, sizeof *s);
        s->name = name;
        s->kind = kind;
        s->availability = a;
        s->supported = supported;
        s->used = used;
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(s->detail, sizeof s->detail, fmt, ap);
        va_end(ap);
    }
    r->n++;
}

static kiln_availability avail(int ok) { return ok ? KILN_AVAILABILITY_AVAILABLE : KILN_AVAILABILITY_UNAVAILABLE; }

static void cpu_rows(rows *r, const quant_cpu *p, int active, int top) {
    const char *cap = active < top ? " (capped by KILN_ISA)" : "";
    row(r, "cpu", "cpu", KILN_AVAILABILITY_AVAILABLE, 1, active == QUANT_ISA_SCALAR, "scalar kernels, any x86-64%s",
        active == QUANT_ISA_SCALAR ? cap : "");

    int avx2_hw = p->avx && p->avx2 && p->fma && p->f16c && p->bmi2;
    row(r, "cpu-avx2", "cpu", avail(avx2_hw && p->os_ymm), 1, active == QUANT_ISA_AVX2, "%s%s",
        !avx2_hw     ? "needs AVX2, FMA, F16C and BMI2"
        : !p->os_ymm ? "the OS does not enable the YMM state"
                     : "AVX2 + FMA",
        active == QUANT_ISA_AVX2 ? cap : "");

    int f_hw = p->avx512f && p->avx512dq && p->avx512bw && p->avx512vl;
    int zmm = avx2_hw && f_hw && p->os_zmm;
    const char *why = !f_hw        ? "no AVX-512 F/DQ/BW/VL"
                      : !p->os_zmm ? "advertised, but the OS does not enable the ZMM state"
                                   : "AVX-512 F/DQ/BW/VL";
    row(r, "cpu-avx512", "cpu", avail(zmm), 1, active == QUANT_ISA_AVX512, "%s", why);
    row(r, "cpu-avx512-vnni", "cpu", avail(zmm && p->avx512vnni), 1, active == QUANT_ISA_AVX512, "%s%s",
        !zmm             ? "needs the AVX-512 row"
        : !p->avx512vnni ? "no AVX512_VNNI (kiln's AVX-512 kernels need it)"
                         : "vpdpbusd",
        active == QUANT_ISA_AVX512 ? "" : cap);
    int bf16 = zmm && p->avx512vnni && p->avx512bf16;
    row(r, "cpu-avx512-bf16", "cpu", avail(bf16), 1, active == QUANT_ISA_AVX512 && bf16, "%s",
        !(zmm && p->avx512vnni) ? "needs the AVX-512 VNNI row"
        : !p->avx512bf16        ? "no AVX512_BF16"
                                : "vdpbf16ps for BF16 weights");

    int amx_hw = p->amx_tile && (p->amx_int8 || p->amx_bf16);
    const char *amx = !amx_hw          ? "no AMX tiles"
                      : !p->os_amx     ? "advertised, but the OS does not enable the tile state (it would trap)"
                      : !p->kernel_amx ? "the kernel does not grant the tile data state"
                                       : "AMX tiles (kiln has no AMX kernels)";
    row(r, "cpu-amx", "cpu", avail(amx_hw && p->os_amx && p->kernel_amx), 0, 0, "%s", amx);
}

/* The CUDA driver API, declared by hand: seven calls of a stable C ABI. */
typedef int (*cu_init_fn)(unsigned);
typedef int (*cu_count_fn)(int *);
typedef int (*cu_get_fn)(int *, int);
typedef int (*cu_name_fn)(char *, int, int);
typedef int (*cu_version_fn)(int *);
typedef int (*cu_attr_fn)(int *, int, int);
typedef int (*cu_mem_fn)(size_t *, int);

static void cuda_row(rows *r) {
    const char *lib = getenv("KILN_CUDA_DRIVER"); /* the tests' mock device (backend/cuda_driver.h) */
    void *h = dlopen(lib && *lib ? lib : "libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        row(r, "cuda", "gpu", KILN_AVAILABILITY_UNAVAILABLE, 0, 0, "no NVIDIA driver (libcuda.so.1 not found)");
        return;
    }
    cu_init_fn init = (cu_init_fn)dlsym(h, "cuInit");
    cu_count_fn count = (cu_count_fn)dlsym(h, "cuDeviceGetCount");
    cu_get_fn get = (cu_get_fn)dlsym(h, "cuDeviceGet");
    cu_name_fn name = (cu_name_fn)dlsym(h, "cuDeviceGetName");
    cu_version_fn ver = (cu_version_fn)dlsym(h, "cuDriverGetVersion");
    if (!init || !count || !get || !name) {
        row(r, "cuda", "gpu", KILN_AVAILABILITY_UNKNOWN, 0, 0, "libcuda.so.1 lacks the driver API");
        return; /* the driver stays loaded: CUDA does not support unloading */
    }
    int e = init(0), n = 0, v = 0;
    if (e) {
        row(r, "cuda", "gpu", KILN_AVAILABILITY_UNAVAILABLE, 0, 0, "driver found, cuInit failed (error %d)", e);
        return;
    }
    if (ver) ver(&v);
    if ((e = count(&n)) || n <= 0) {
        row(r, "cuda", "gpu", KILN_AVAILABILITY_UNAVAILABLE, 0, 0, "driver %d.%d, no device (error %d)", v / 1000,
            v % 1000 / 10, e);
        return;
    }
    /* each GPU: name, compute capability, memory (attribute 75/76: the
     * compute capability's major/minor) */
    cu_attr_fn attr = (cu_attr_fn)dlsym(h, "cuDeviceGetAttribute");
    cu_mem_fn mem = (cu_mem_fn)dlsym(h, "cuDeviceTotalMem_v2");
    char list[200] = "";
    size_t o = 0;
    for (int i = 0; i < n && o < sizeof list; i++) {
        char nm[96] = "?";
        int d = 0, major = 0, minor = 0;
        size_t bytes = 0;
        if (get(&d, i) != 0) continue;
        name(nm, (int)sizeof nm, d);
        if (attr) {
            attr(&major, 75, d);
            attr(&minor, 76, d);
        }
        if (mem) mem(&bytes, d);
        o += (size_t)snprintf(list + o, sizeof list - o, "%s%s (sm_%d%d, %.0f GiB)", i ? ", " : "", nm, major, minor,
                              (double)bytes / (1 << 30));
    }
    size_t fb;
    const int kernels = backend_cuda_fatbin(&fb) != NULL;
    row(r, "cuda", "gpu", KILN_AVAILABILITY_AVAILABLE, kernels, 0, "driver %d.%d, %d device%s: %s", v / 1000,
        v % 1000 / 10, n, n == 1 ? "" : "s", list);
}

/* Vulkan drivers keep allocations for the life of the process, some in
 * modules the loader unloads again; under LeakSanitizer those would be
 * reported as kiln's.  The hooks exist only in sanitized builds. */
extern void __lsan_disable(void) __attribute__((weak));
extern void __lsan_enable(void) __attribute__((weak));

static void vulkan_row_inner(rows *r);

static void vulkan_row(rows *r) {
    if (__lsan_disable) __lsan_disable();
    vulkan_row_inner(r);
    if (__lsan_enable) __lsan_enable();
}

static void vulkan_row_inner(rows *r) {
    void *h = dlopen("libvulkan.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        row(r, "vulkan", "gpu", KILN_AVAILABILITY_UNAVAILABLE, 0, 0, "no Vulkan loader (libvulkan.so.1 not found)");
        return;
    }
    PFN_vkGetInstanceProcAddr gipa = (PFN_vkGetInstanceProcAddr)dlsym(h, "vkGetInstanceProcAddr");
    PFN_vkCreateInstance create = gipa ? (PFN_vkCreateInstance)gipa(NULL, "vkCreateInstance") : NULL;
    if (!create) {
        row(r, "vulkan", "gpu", KILN_AVAILABILITY_UNKNOWN, 0, 0, "libvulkan.so.1 lacks vkCreateInstance");
        dlclose(h);
        return;
    }
    VkApplicationInfo app = {VK_STRUCTURE_TYPE_APPLICATION_INFO, NULL, "kiln", 1, "kiln", 1, VK_API_VERSION_1_0};
    VkInstanceCreateInfo ci = {VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO, NULL, 0, &app, 0, NULL, 0, NULL};
    VkInstance inst = NULL;
    VkResult e = create(&ci, NULL, &inst);
    if (e != VK_SUCCESS) {
        row(r, "vulkan", "gpu", KILN_AVAILABILITY_UNAVAILABLE, 0, 0, "loader found, vkCreateInstance failed (%d)",
            (int)e);
        dlclose(h);
        return;
    }
    PFN_vkEnumeratePhysicalDevices enumerate = (PFN_vkEnumeratePhysicalDevices)gipa(inst, "vkEnumeratePhysicalDevices");
    PFN_vkGetPhysicalDeviceProperties props =
        (PFN_vkGetPhysicalDeviceProperties)gipa(inst, "vkGetPhysicalDeviceProperties");
    PFN_vkDestroyInstance destroy = (PFN_vkDestroyInstance)gipa(inst, "vkDestroyInstance");
    uint32_t n = 0;
    VkPhysicalDevice devs[8];
    if (enumerate) {
        n = 8;
        if (enumerate(inst, &n, devs) < 0) n = 0;
    }
    char list[224] = "";
    int gpus = 0;
    for (uint32_t i = 0; i < n && props; i++) {
        VkPhysicalDeviceProperties p;
        props(devs[i], &p);
        int cpu = p.deviceType == VK_PHYSICAL_DEVICE_TYPE_CPU;
        gpus += !cpu;
        size_t l = strlen(list);
        snprintf(list + l, sizeof list - l, "%s%.64s%s", l ? ", " : "", p.deviceName, cpu ? " (software)" : "");
    }
    if (destroy) destroy(inst, NULL);
    /* the loader stays mapped: drivers keep state (and allocations) that an
     * unload would leave dangling */
    if (!n)
        row(r, "vulkan", "gpu", KILN_AVAILABILITY_UNAVAILABLE, 0, 0, "loader found, no device");
    else
        row(r, "vulkan", "gpu", gpus ? KILN_AVAILABILITY_AVAILABLE : KILN_AVAILABILITY_UNAVAILABLE, 0, 0, "%s%s", list,
            gpus ? "" : ": no GPU, only software rendering");
}

/* aarch64: the levels' rows (neon is in every aarch64 CPU; dotprod needs
 * FEAT_DotProd), the features whose kernels the dotprod level adds (i8mm,
 * bf16), then the features kiln has no kernels for yet.  A feature
 * the OS was not asked about (arm_known = 0: neither Linux nor macOS) is
 * "unknown". */
static void arm_rows(rows *r, const quant_cpu *p, int active, int top) {
    const char *cap = active < top ? " (capped by KILN_ISA)" : "";
    const kiln_availability unk = KILN_AVAILABILITY_UNKNOWN;
    row(r, "cpu", "cpu", KILN_AVAILABILITY_AVAILABLE, 1, active == 0, "scalar kernels, any aarch64%s",
        active == 0 ? cap : "");
    row(r, "cpu-neon", "cpu", avail(p->asimd), 1, active == 1, "%s%s",
        p->asimd ? "Advanced SIMD (NEON)" : "the OS does not report Advanced SIMD", active == 1 ? cap : "");
    row(r, "cpu-dotprod", "cpu", !p->arm_known ? unk : avail(p->asimd && p->dotprod), 1, active == 2, "%s",
        !p->arm_known ? "the OS was not asked (not Linux or macOS)"
        : !p->dotprod ? "no FEAT_DotProd (sdot/udot)"
                      : "sdot/udot");
    /* i8mm and bf16 add kernels to the dotprod level (on a CPU with dotprod) */
    int dp = p->asimd && p->dotprod;
    row(r, "cpu-i8mm", "cpu", !p->arm_known ? unk : avail(p->i8mm), 1, active == 2 && dp && p->i8mm, "%s",
        p->i8mm ? "smmla for Q8_0, Q4_0 and Q4_K prompt matmuls" : "no FEAT_I8MM");
    row(r, "cpu-bf16", "cpu", !p->arm_known ? unk : avail(p->bf16), 1, active == 2 && dp && p->bf16, "%s",
        p->bf16 ? "bfdot for BF16 weights" : "no FEAT_BF16");
    row(r, "cpu-fp16", "cpu", !p->arm_known ? unk : avail(p->fp16), 0, 0, "%s",
        p->fp16 ? "half-precision arithmetic" : "no FEAT_FP16");
    row(r, "cpu-sve", "cpu", !p->arm_known ? unk : avail(p->sve), 0, 0, "%s", p->sve ? "SVE" : "no SVE");
}

int backend_cpu_rows_aarch64(const quant_cpu *p, int active, int top, kiln_backend_status *out, int cap) {
    rows r = {out, out ? cap : 0, 0};
    arm_rows(&r, p, active, top);
    return r.n;
}

/* this build's architecture's rows */
static void this_cpu_rows(rows *r, const quant_cpu *p, int active, int top) {
#if defined(__aarch64__)
    (void)cpu_rows; /* the x86-64 rows, unused here */
    arm_rows(r, p, active, top);
#else
    cpu_rows(r, p, active, top);
#endif
}

int backend_cpu_rows(const quant_cpu *p, int active, int top, kiln_backend_status *out, int cap) {
    rows r = {out, out ? cap : 0, 0};
    this_cpu_rows(&r, p, active, top);
    return r.n;
}

int kiln_backend_probe(kiln_backend_status *out, int cap) {
    rows r = {out, out ? cap : 0, 0};
    this_cpu_rows(&r, quant_cpu_get(), quant_active_isa(), quant_cpu_isa());
    cuda_row(&r);
    vulkan_row(&r);
    return r.n;
}

const char *kiln_availability_str(kiln_availability a) {
    switch (a) {
    case KILN_AVAILABILITY_AVAILABLE: return "available";
    case KILN_AVAILABILITY_UNAVAILABLE: return "unavailable";
    default: return "unknown";
    }
}
