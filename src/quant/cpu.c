/*
 * cpu.c — what the processor offers and what the OS lets a program use.
 *
 * CPUID says what the silicon has; XCR0 (xgetbv) says which register
 * states the OS saves on a context switch, and only those may be used.  A
 * virtual machine may advertise AVX-512 or AMX in CPUID and leave their
 * state out of XCR0: the instructions then trap.  AMX also needs the Linux
 * kernel's permission (arch_prctl ARCH_REQ_XCOMP_PERM); ARCH_GET_XCOMP_SUPP
 * tells, without side effects, whether the kernel would grant it.
 */
#include "quant/quant.h"

#include <cpuid.h>
#include <pthread.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#define ARCH_GET_XCOMP_SUPP 0x1021 /* <asm/prctl.h>: features the kernel can enable */
#define XFEATURE_XTILEDATA 18

static kq_cpu g_cpu;
static pthread_once_t g_cpu_once = PTHREAD_ONCE_INIT;

static uint64_t read_xcr0(void) {
    uint32_t lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((uint64_t)hi << 32) | lo;
}

static void detect(void) {
    kq_cpu *p = &g_cpu;
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

const kq_cpu *kq_cpu_get(void) {
    pthread_once(&g_cpu_once, detect);
    return &g_cpu;
}
