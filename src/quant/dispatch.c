/*
 * dispatch.c — the type tables of every ISA level and the run-time choice
 * among them.
 *
 * Each level has one traits table: the scalar fields of every type (from
 * legacy.c, kquants.c and iquants.c), with vec_dot / from_f32_fast the best
 * kernels of that level's files (g_levels says which, in order).  All tables are
 * filled once (pthread_once), the active one chosen then too, and none is
 * written again, so threads read them without locks.
 */
#include "quant/quant.h"

#include <pthread.h>
#include <stdlib.h>
#include <strings.h>

/* KILN_ISA=<level name> (scalar|avx2|avx512, scalar|neon|dotprod) caps
 * the level; unset or unknown = no cap. */
static int env_isa_cap(void) {
    const char *s = getenv("KILN_ISA");
    if (!s) return QUANT_ISA_TOP;
    for (int i = QUANT_ISA_SCALAR; i <= QUANT_ISA_TOP; i++)
        if (strcasecmp(s, quant_isa_name(i)) == 0) return i;
    return QUANT_ISA_TOP;
}

/* ---- tables and dispatch ---- */

/* Per level: the files' tables asked in order, the first with a kernel for
 * a type giving it; the first `own` are the level's own kernels, the rest
 * the level below's, which run on it too.  A type without a kernel in any
 * (the low-bit types on aarch64) keeps its scalar one. */
struct quant_level {
    int isa;
    int own;
    const quant_simd *part[8];
};

#if defined(__x86_64__)
enum { LV_SCALAR, LV_AVX2, LV_AVX512, LV_AVX512_BF16, LV_COUNT };
static const struct quant_level g_levels[LV_COUNT] = {
    [LV_SCALAR] = {QUANT_ISA_SCALAR, 0, {NULL}},
    [LV_AVX2] = {QUANT_ISA_AVX2, 4, {&quant_legacy_avx2, &quant_kquants_avx2, &quant_iquants_avx2, &quant_lowbit_avx2}},
    [LV_AVX512] = {QUANT_ISA_AVX512,
                   4,
                   {&quant_legacy_avx512, &quant_kquants_avx512, &quant_iquants_avx512, &quant_lowbit_avx512,
                    &quant_legacy_avx2, &quant_kquants_avx2, &quant_iquants_avx2, &quant_lowbit_avx2}},
    [LV_AVX512_BF16] = {QUANT_ISA_AVX512,
                        4,
                        {&quant_legacy_avx512_bf16, &quant_kquants_avx512, &quant_iquants_avx512, &quant_lowbit_avx512,
                         &quant_legacy_avx2, &quant_kquants_avx2, &quant_iquants_avx2, &quant_lowbit_avx2}},
};

/* The table index of level isa on this CPU, -1 when the CPU lacks it. */
static int level_of(int isa) {
    if (isa < QUANT_ISA_SCALAR || isa > quant_cpu_isa()) return -1;
    if (isa == QUANT_ISA_AVX512) return quant_cpu_bf16() ? LV_AVX512_BF16 : LV_AVX512;
    return isa == QUANT_ISA_AVX2 ? LV_AVX2 : LV_SCALAR;
}
#elif defined(__aarch64__)
/* The dotprod level in four tables: with the bfdot BF16 dot where the CPU
 * has FEAT_BF16, with the smmla block kernels where it has FEAT_I8MM. */
enum { LV_SCALAR, LV_NEON, LV_DOTPROD, LV_DOTPROD_BF16, LV_DOTPROD_I8MM, LV_DOTPROD_BF16_I8MM, LV_COUNT };
static const struct quant_level g_levels[LV_COUNT] = {
    [LV_SCALAR] = {QUANT_ISA_SCALAR, 0, {NULL}},
    [LV_NEON] = {QUANT_ISA_NEON, 1, {&quant_quant_neon}},
    [LV_DOTPROD] = {QUANT_ISA_DOTPROD, 1, {&quant_quant_dotprod, &quant_quant_neon}},
    [LV_DOTPROD_BF16] = {QUANT_ISA_DOTPROD, 2, {&quant_quant_bf16, &quant_quant_dotprod, &quant_quant_neon}},
    [LV_DOTPROD_I8MM] = {QUANT_ISA_DOTPROD, 2, {&quant_quant_i8mm, &quant_quant_dotprod, &quant_quant_neon}},
    [LV_DOTPROD_BF16_I8MM] = {QUANT_ISA_DOTPROD,
                              3,
                              {&quant_quant_bf16, &quant_quant_i8mm, &quant_quant_dotprod, &quant_quant_neon}},
};

static int level_of(int isa) {
    if (isa < QUANT_ISA_SCALAR || isa > quant_cpu_isa()) return -1;
    if (isa == QUANT_ISA_DOTPROD) {
        const quant_cpu *p = quant_cpu_get();
        return LV_DOTPROD + (p->bf16 ? 1 : 0) + (p->i8mm ? 2 : 0);
    }
    return isa; /* scalar and neon: the levels are the table indices */
}
#else
enum { LV_SCALAR, LV_COUNT };
static const struct quant_level g_levels[LV_COUNT] = {[LV_SCALAR] = {QUANT_ISA_SCALAR, 0, {NULL}}};

static int level_of(int isa) { return isa == QUANT_ISA_SCALAR ? LV_SCALAR : -1; }
#endif

static quant_traits g_tab[LV_COUNT][QUANT_TYPE_COUNT];
static const quant_traits *g_active;
static int g_active_isa;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static void fill_level(const struct quant_level *lv, quant_traits *tab) {
    quant_fill_legacy(tab);
    quant_fill_kquants(tab);
    quant_fill_iquants(tab);
    quant_fill_lowbit(tab);
    for (int t = 0; t < QUANT_TYPE_COUNT; t++) {
        int dot = 0, quant = 0;
        for (int p = 0; p < 8 && lv->part[p]; p++) {
            if (!dot && lv->part[p]->dot[t]) tab[t].vec_dot = lv->part[p]->dot[t], dot = 1;
            if (!quant && lv->part[p]->quant[t]) tab[t].from_f32_fast = lv->part[p]->quant[t], quant = 1;
        }
    }
}

static void fill_tables(void) {
    for (int l = 0; l < LV_COUNT; l++) fill_level(&g_levels[l], g_tab[l]);
    int isa = quant_cpu_isa();
    const int cap = env_isa_cap();
    if (cap < isa) isa = cap;
    g_active_isa = isa;
    g_active = g_tab[level_of(isa)];
}

void quant_init(void) { pthread_once(&g_once, fill_tables); }

int quant_active_isa(void) {
    quant_init();
    return g_active_isa;
}

const quant_traits *quant_get(int t) {
    if (t < 0 || t >= QUANT_TYPE_COUNT) return NULL;
    quant_init();
    return g_active[t].name ? &g_active[t] : NULL;
}

const quant_traits *quant_get_at(int t, int isa) {
    const int l = level_of(isa);
    if (t < 0 || t >= QUANT_TYPE_COUNT || l < 0) return NULL;
    quant_init();
    return g_tab[l][t].name ? &g_tab[l][t] : NULL;
}

int quant_supported(int t) {
    const quant_traits *tr = quant_get(t);
    return tr && tr->to_f32 && tr->vec_dot_ref;
}

size_t quant_row_size(int t, int64_t n) {
    const quant_traits *tr = quant_get(t);
    if (!tr || tr->blck <= 0 || n < 0) return 0;
    return (size_t)(n / tr->blck) * tr->bsize;
}

int quant_from_name(const char *name) {
    if (!name) return -1;
    for (int t = 0; t < QUANT_TYPE_COUNT; t++) {
        const quant_traits *tr = quant_get(t);
        if (tr && strcasecmp(tr->name, name) == 0) return t;
    }
    return -1;
}

quant_vec_dot_fn quant_vec_dot_at(int t, int isa) {
    const quant_traits *tr = quant_get_at(t, isa);
    if (!tr) return NULL;
    const struct quant_level *lv = &g_levels[level_of(isa)];
    if (isa == QUANT_ISA_SCALAR) return tr->vec_dot_ref;
    for (int p = 0; p < lv->own; p++)
        if (lv->part[p]->dot[t]) return lv->part[p]->dot[t];
    return NULL;
}

quant_tile_fn quant_tile_at(int t, int isa) {
    const quant_traits *tr = quant_get_at(t, isa);
    if (!tr || isa == QUANT_ISA_SCALAR) return NULL;
    const struct quant_level *lv = &g_levels[level_of(isa)];
    for (int p = 0; p < lv->own; p++)
        if (lv->part[p]->tile[t]) return lv->part[p]->tile[t];
    return NULL;
}

quant_from_f32_fn quant_from_f32_at(int t, int isa) {
    const quant_traits *tr = quant_get_at(t, isa);
    if (!tr) return NULL;
    const struct quant_level *lv = &g_levels[level_of(isa)];
    if (isa == QUANT_ISA_SCALAR) return tr->from_f32;
    for (int p = 0; p < lv->own; p++)
        if (lv->part[p]->quant[t]) return lv->part[p]->quant[t];
    return NULL;
}
