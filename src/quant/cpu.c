/*
 * cpu.c — what the processor offers and what the OS lets a program use.
 *
 * CPUID says what the silicon has; XCR0 (xgetbv) says which register
 * states the OS saves on a context switch, and only those may be used.  A
 * virtual machine may advertise AVX-512 or AMX in CPUID and leave their
 * state out of XCR0: the instructions then trap.  AMX also needs the Linux
 * kernel's permission (arch_prctl ARCH_REQ_XCOMP_PERM); ARCH_GET_XCOMP_SUPP
 * tells, without side effects, whether the kernel would grant it.
 *
 * On aarch64 user code cannot read the ID registers portably; the OS says
 * what it enables: Linux through getauxval(AT_HWCAP / AT_HWCAP2), macOS
 * through sysctl hw.optional.*.  Elsewhere arm_known stays 0 and only the
 * scalar and neon levels (Advanced SIMD is part of every aarch64 CPU) run.
 */
#include "quant/quant.h"

#include <pthread.h>
#include <string.h>

static quant_cpu g_cpu;
static pthread_once_t g_cpu_once = PTHREAD_ONCE_INIT;

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>

#define ARCH_GET_XCOMP_SUPP 0x1021 /* <asm/prctl.h>: features the kernel can enable */
#define XFEATURE_XTILEDATA 18

static uint64_t read_xcr0(void) {
    uint32_t lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((uint64_t)hi << 32) | lo;
}

static void detect(void) {
    quant_cpu *p = &g_cpu;
    unsigned a, b, c, d;
    unsigned max = __get_cpuid_max(0, NULL);
    __cpuid(0, a, b, c, d);
    memcpy(p->vendor, &b, 4);
    memcpy(p->vendor + 4, &d, 4);
    memcpy(p->vendor + 8, &c, 4);
    if ((unsigned)__get_cpuid_max(0x80000000u, NULL) >= 0x80000004u) {
        unsigned w[12];
        for (unsigned i = 0; i < 3; i++) __cpuid(0x80000002u + i, w[4 * i], w[4 * i + 1], w[4 * i + 2], w[4 * i + 3]);
        memcpy(p->brand, w, 48);
        p->brand[48] = 0;
    }
    if (max < 1) return;
    __cpuid(1, a, b, c, d);
    p->fma = (c >> 12) & 1;
    p->f16c = (c >> 29) & 1;
    p->avx = (c >> 28) & 1;
    int osxsave = (c >> 27) & 1;
    uint64_t xcr0 = osxsave ? read_xcr0() : 0;
    p->os_ymm = (xcr0 & 0x6) == 0x6;                /* XMM + YMM */
    p->os_zmm = p->os_ymm && (xcr0 & 0xE0) == 0xE0; /* opmask, ZMM_Hi256, Hi16_ZMM */
    p->os_amx = (xcr0 & (3u << 17)) == (3u << 17);  /* XTILECFG + XTILEDATA */
    if (max >= 7) {
        __cpuid_count(7, 0, a, b, c, d);
        unsigned sub = a;
        p->avx2 = (b >> 5) & 1;
        p->bmi2 = (b >> 8) & 1;
        p->avx512f = (b >> 16) & 1;
        p->avx512dq = (b >> 17) & 1;
        p->avx512bw = (b >> 30) & 1;
        p->avx512vl = (b >> 31) & 1;
        p->avx512vnni = (c >> 11) & 1;
        p->amx_bf16 = (d >> 22) & 1;
        p->amx_tile = (d >> 24) & 1;
        p->amx_int8 = (d >> 25) & 1;
        if (sub >= 1) {
            __cpuid_count(7, 1, a, b, c, d);
            p->avx512bf16 = (a >> 5) & 1;
        }
    }
    unsigned long supp = 0;
    if (p->amx_tile && syscall(SYS_arch_prctl, ARCH_GET_XCOMP_SUPP, &supp) == 0)
        p->kernel_amx = (supp >> XFEATURE_XTILEDATA) & 1;
}

#elif defined(__aarch64__) && defined(__linux__)
#include <sys/auxv.h>

/* <asm/hwcap.h> bits, spelled out so older headers do */
#define QUANT_HWCAP_ASIMD (1ul << 1)
#define QUANT_HWCAP_ASIMDHP (1ul << 10) /* FP16 arithmetic on vectors */
#define QUANT_HWCAP_ASIMDDP (1ul << 20) /* sdot / udot */
#define QUANT_HWCAP_SVE (1ul << 22)
#define QUANT_HWCAP2_I8MM (1ul << 13) /* smmla / ummla / usmmla */
#define QUANT_HWCAP2_BF16 (1ul << 14) /* bfdot / bfmmla / bfcvt */

static void detect(void) {
    quant_cpu *p = &g_cpu;
    const unsigned long h = getauxval(AT_HWCAP), h2 = getauxval(AT_HWCAP2);
    memcpy(p->vendor, "arm", 4);
    p->asimd = (h & QUANT_HWCAP_ASIMD) != 0;
    p->fp16 = (h & QUANT_HWCAP_ASIMDHP) != 0;
    p->dotprod = (h & QUANT_HWCAP_ASIMDDP) != 0;
    p->sve = (h & QUANT_HWCAP_SVE) != 0;
    p->i8mm = (h2 & QUANT_HWCAP2_I8MM) != 0;
    p->bf16 = (h2 & QUANT_HWCAP2_BF16) != 0;
    p->arm_known = 1;
}

#elif defined(__aarch64__) && defined(__APPLE__)
#include <sys/sysctl.h>

static int sysctl_flag(const char *name) {
    int v = 0;
    size_t n = sizeof v;
    return sysctlbyname(name, &v, &n, NULL, 0) == 0 && v != 0;
}

static void detect(void) {
    quant_cpu *p = &g_cpu;
    memcpy(p->vendor, "arm", 4);
    size_t n = sizeof p->brand - 1;
    if (sysctlbyname("machdep.cpu.brand_string", p->brand, &n, NULL, 0) != 0) p->brand[0] = 0;
    p->asimd = 1; /* every Apple Silicon core */
    p->fp16 = sysctl_flag("hw.optional.arm.FEAT_FP16");
    p->dotprod = sysctl_flag("hw.optional.arm.FEAT_DotProd");
    p->i8mm = sysctl_flag("hw.optional.arm.FEAT_I8MM");
    p->bf16 = sysctl_flag("hw.optional.arm.FEAT_BF16");
    p->sve = 0; /* no Apple core has SVE */
    p->arm_known = 1;
}

#else
/* Another OS or architecture: nothing known, the scalar level runs
 * (aarch64: the neon level too, Advanced SIMD being mandatory there). */
static void detect(void) {
#if defined(__aarch64__)
    memcpy(g_cpu.vendor, "arm", 4);
    g_cpu.asimd = 1;
#endif
}
#endif

const quant_cpu *quant_cpu_get(void) {
    pthread_once(&g_cpu_once, detect);
    return &g_cpu;
}
