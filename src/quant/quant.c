/*
 * quant.c — the type tables, the ISA level, run-time dispatch and the
 * scalar f16/bf16 conversions.
 *
 * Each level has one traits table: the scalar fields of every type, with
 * vec_dot / from_f32_fast the best kernels of that level's files (g_levels
 * says which, in order).  All tables are filled once (pthread_once), the
 * active one chosen then too, and none is written again, so threads read
 * them without locks.
 */
#include "quant/quant.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* ---- CPU features ---- */

static int detect_isa(void) {
    const kq_cpu *p = kq_cpu_get();
    /* The *_avx2.c files are built with -mavx2 -mfma -mf16c -mbmi2. */
    if (!(p->os_ymm && p->avx && p->avx2 && p->fma && p->f16c && p->bmi2)) return KQ_ISA_SCALAR;
    if (p->os_zmm && p->avx512f && p->avx512dq && p->avx512bw && p->avx512vl && p->avx512vnni) return KQ_ISA_AVX512;
    return KQ_ISA_AVX2;
}

/* detect()'s answer, asked once; threads may race to store the same value */
static int cached(int *slot, int (*detect)(void)) {
    int v = __atomic_load_n(slot, __ATOMIC_RELAXED);
    if (v < 0) {
        v = detect();
        __atomic_store_n(slot, v, __ATOMIC_RELAXED);
    }
    return v;
}

int kq_cpu_isa(void) {
    static int slot = -1;
    return cached(&slot, detect_isa);
}

/* AVX512_BF16 (CPUID.(EAX=7, ECX=1):EAX bit 5): vdpbf16ps, two BF16
 * products per float lane.  Only asked for once the AVX-512 level holds. */
static int detect_bf16(void) { return kq_cpu_isa() >= KQ_ISA_AVX512 && kq_cpu_get()->avx512bf16; }

int kq_cpu_bf16(void) {
    static int slot = -1;
    return cached(&slot, detect_bf16);
}

const char *kq_isa_name(int isa) {
    switch (isa) {
    case KQ_ISA_SCALAR: return "scalar";
    case KQ_ISA_AVX2: return "avx2";
    case KQ_ISA_AVX512: return "avx512";
    default: return "unknown";
    }
}

/* KILN_ISA=scalar|avx2|avx512 caps the level; unset or unknown = no cap. */
static int env_isa_cap(void) {
    const char *s = getenv("KILN_ISA");
    if (!s) return KQ_ISA_AVX512;
    for (int i = KQ_ISA_SCALAR; i <= KQ_ISA_AVX512; i++)
        if (strcasecmp(s, kq_isa_name(i)) == 0) return i;
    return KQ_ISA_AVX512;
}

/* ---- tables and dispatch ---- */

enum { LV_SCALAR, LV_AVX2, LV_AVX512, LV_AVX512_BF16, LV_COUNT };

/* Per level: the files' tables asked in order, the first with a kernel for
 * a type giving it; the first `own` are the level's own kernels, the rest
 * the level below's, which run on it too. */
static const struct kq_level {
    int isa;
    int own;
    const kq_simd *part[4];
} g_levels[LV_COUNT] = {
    [LV_SCALAR] = {KQ_ISA_SCALAR, 0, {NULL}},
    [LV_AVX2] = {KQ_ISA_AVX2, 2, {&kq_legacy_avx2, &kq_kquants_avx2}},
    [LV_AVX512] = {KQ_ISA_AVX512, 2, {&kq_legacy_avx512, &kq_kquants_avx512, &kq_legacy_avx2, &kq_kquants_avx2}},
    [LV_AVX512_BF16] = {KQ_ISA_AVX512,
                        2,
                        {&kq_legacy_avx512_bf16, &kq_kquants_avx512, &kq_legacy_avx2, &kq_kquants_avx2}},
};

static kq_traits g_tab[LV_COUNT][KQ_TYPE_COUNT];
static const kq_traits *g_active;
static int g_active_isa;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

/* The table index of level isa on this CPU, -1 when the CPU lacks it. */
static int level_of(int isa) {
    if (isa < KQ_ISA_SCALAR || isa > kq_cpu_isa()) return -1;
    if (isa == KQ_ISA_AVX512) return kq_cpu_bf16() ? LV_AVX512_BF16 : LV_AVX512;
    return isa == KQ_ISA_AVX2 ? LV_AVX2 : LV_SCALAR;
}

static void fill_level(const struct kq_level *lv, kq_traits *tab) {
    kq_fill_legacy(tab);
    kq_fill_kquants(tab);
    for (int t = 0; t < KQ_TYPE_COUNT; t++) {
        int dot = 0, quant = 0;
        for (int p = 0; p < 4 && lv->part[p]; p++) {
            if (!dot && lv->part[p]->dot[t]) tab[t].vec_dot = lv->part[p]->dot[t], dot = 1;
            if (!quant && lv->part[p]->quant[t]) tab[t].from_f32_fast = lv->part[p]->quant[t], quant = 1;
        }
    }
}

static void fill_tables(void) {
    for (int l = 0; l < LV_COUNT; l++) fill_level(&g_levels[l], g_tab[l]);
    int isa = kq_cpu_isa();
    const int cap = env_isa_cap();
    if (cap < isa) isa = cap;
    g_active_isa = isa;
    g_active = g_tab[level_of(isa)];
}

void kq_init(void) { pthread_once(&g_once, fill_tables); }

int kq_active_isa(void) {
    kq_init();
    return g_active_isa;
}

const kq_traits *kq_get(int t) {
    if (t < 0 || t >= KQ_TYPE_COUNT) return NULL;
    kq_init();
    return g_active[t].name ? &g_active[t] : NULL;
}

const kq_traits *kq_get_at(int t, int isa) {
    const int l = level_of(isa);
    if (t < 0 || t >= KQ_TYPE_COUNT || l < 0) return NULL;
    kq_init();
    return g_tab[l][t].name ? &g_tab[l][t] : NULL;
}

int kq_supported(int t) {
    const kq_traits *tr = kq_get(t);
    return tr && tr->to_f32 && tr->vec_dot_ref;
}

size_t kq_row_size(int t, int64_t n) {
    const kq_traits *tr = kq_get(t);
    if (!tr || tr->blck <= 0 || n < 0) return 0;
    return (size_t)(n / tr->blck) * tr->bsize;
}

int kq_from_name(const char *name) {
    if (!name) return -1;
    for (int t = 0; t < KQ_TYPE_COUNT; t++) {
        const kq_traits *tr = kq_get(t);
        if (tr && strcasecmp(tr->name, name) == 0) return t;
    }
    return -1;
}

kq_vec_dot_fn kq_vec_dot_at(int t, int isa) {
    const kq_traits *tr = kq_get_at(t, isa);
    if (!tr) return NULL;
    const struct kq_level *lv = &g_levels[level_of(isa)];
    if (isa == KQ_ISA_SCALAR) return tr->vec_dot_ref;
    for (int p = 0; p < lv->own; p++)
        if (lv->part[p]->dot[t]) return lv->part[p]->dot[t];
    return NULL;
}

kq_from_f32_fn kq_from_f32_at(int t, int isa) {
    const kq_traits *tr = kq_get_at(t, isa);
    if (!tr) return NULL;
    const struct kq_level *lv = &g_levels[level_of(isa)];
    if (isa == KQ_ISA_SCALAR) return tr->from_f32;
    for (int p = 0; p < lv->own; p++)
        if (lv->part[p]->quant[t]) return lv->part[p]->quant[t];
    return NULL;
}

/* ---- f16 / bf16 ---- */

static inline uint32_t f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}
static inline float bits_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

float kq_f16_to_f32(uint16_t h) {
    const uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    const uint32_t exp = (h >> 10) & 0x1f, man = h & 0x3ff;
    if (exp == 0) {
        /* zero or subnormal: man * 2^-24, exact in float */
        float v = (float)man * 0x1p-24f;
        return bits_f32(f32_bits(v) | sign);
    }
    if (exp == 31) return bits_f32(sign | 0x7f800000u | (man << 13));
    return bits_f32(sign | ((exp + 112) << 23) | (man << 13));
}

uint16_t kq_f32_to_f16(float f) {
    const uint32_t u = f32_bits(f);
    const uint16_t sign = (uint16_t)((u >> 16) & 0x8000);
    const uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) /* NaN: keep top payload, force quiet */
        return (uint16_t)(sign | 0x7e00 | ((a >> 13) & 0x3ff));
    if (a >= 0x477ff000u) return sign | 0x7c00; /* >= 65520 rounds to inf */
    const uint32_t e = a >> 23;
    if (e < 113) {
        /* result is a half subnormal (or rounds up to the smallest normal):
         * q = round(|f| / 2^-24) with mantissa m scaled by 2^(e-150) */
        const uint32_t m = e ? ((a & 0x7fffff) | 0x800000) : (a & 0x7fffff);
        const uint32_t shift = 126 - (e ? e : 1);
        if (shift > 24) return sign;
        uint32_t q = m >> shift;
        const uint32_t rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
        if (rem > half || (rem == half && (q & 1))) q++;
        return (uint16_t)(sign | q);
    }
    uint32_t h = ((e - 112) << 10) | ((a >> 13) & 0x3ff);
    const uint32_t rem = a & 0x1fff;
    if (rem > 0x1000 || (rem == 0x1000 && (h & 1))) h++; /* carry may bump the exponent */
    return (uint16_t)(sign | h);
}

float kq_bf16_to_f32(uint16_t h) { return bits_f32((uint32_t)h << 16); }

uint16_t kq_f32_to_bf16(float f) {
    const uint32_t u = f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40); /* quiet NaN */
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1)) >> 16);
}
