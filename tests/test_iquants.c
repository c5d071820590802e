/*
 * test_iquants — the lattice types IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S:
 * the grid tables hash to ggml's; random blocks dequantize and dot with
 * Q8_K to ggml's exact bits; hand-built blocks dequantize to known
 * values; random blocks dequantize exactly as a second, bit-by-bit reading
 * of the layout says (ggml's float steps: d * (0.5 + s) * k, times the
 * magnitude, signed); the reference dots equal a double dot of the
 * dequantized rows; and every SIMD dot (AVX2, AVX-512, AVX-512 emulated)
 * gives the scalar reference's float bit for bit, activations of -128
 * included; the IQ3_S quantizer writes llama.cpp's bytes.
 */
#include "quant/iquants_layout.h"
#include "quant/quant.h"
#include "testutil.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__)
extern const quant_simd quant_iquants_avx512_emu;
#define IQ_EMU(t) (quant_cpu_isa() >= QUANT_ISA_AVX2 ? quant_iquants_avx512_emu.dot[t] : NULL)
#else
#define IQ_EMU(t) NULL /* the avx512 emulation is x86-64 only */
#endif

static const int TYPES[] = {QUANT_IQ2_XXS, QUANT_IQ2_XS, QUANT_IQ2_S, QUANT_IQ3_XXS, QUANT_IQ3_S};
#define N_TYPES 5

/* ---- deterministic data ---- */

static uint64_t rng_state = 0x243F6A8885A308D3ull;

static uint64_t rnd(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

static float grand(void) {
    double s = 0;
    for (int k = 0; k < 4; k++) s += (double)(rnd() >> 11) * 0x1p-53;
    return (float)((s - 2.0) * 1.7320508);
}

static uint16_t h(float f) { return quant_f32_to_f16(f); }

static uint64_t fnv(const void *p, size_t n) {
    const uint8_t *b = p;
    uint64_t v = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; ++i) v = (v ^ b[i]) * 0x100000001b3ull;
    return v;
}

/* ---- the tables ---- */

/* FNV-1a of each grid's little-endian bytes, computed from ggml-common.h's
 * tables; the sign codes against their definition (parity in bit 7). */
static void check_tables(void) {
    CHECK(fnv(quant_iq2xxs_grid, sizeof quant_iq2xxs_grid) == 0xbb4ee025b5ac6e8eull);
    CHECK(fnv(quant_iq2xs_grid, sizeof quant_iq2xs_grid) == 0xc9b1ee61e79909bdull);
    CHECK(fnv(quant_iq2s_grid, sizeof quant_iq2s_grid) == 0x123edd38a3b62b90ull);
    CHECK(fnv(quant_iq3xxs_grid, sizeof quant_iq3xxs_grid) == 0xdfa5dc83d6a155d5ull);
    CHECK(fnv(quant_iq3s_grid, sizeof quant_iq3s_grid) == 0xfa37020c25b44829ull);
    for (int c = 0; c < 128; c++) {
        int par = 0;
        for (int b = 0; b < 7; b++) par ^= (c >> b) & 1;
        CHECKF(quant_iq_signs((uint32_t)c) == (c | par << 7), "sign code %d", c);
        for (int j = 0; j < 8; j++) {
            const int neg = j < 7 ? (c >> j) & 1 : par;
            CHECKF((uint8_t)(quant_iq_sign_units[c] >> (8 * j)) == (neg ? 0xff : 0x01), "sign unit %d byte %d", c, j);
        }
    }
    static const struct {
        int t;
        const char *name;
        size_t bsize;
    } N[] = {{QUANT_IQ2_XXS, "iq2_xxs", 66},
             {QUANT_IQ2_XS, "IQ2_XS", 74},
             {QUANT_IQ2_S, "iq2_s", 82},
             {QUANT_IQ3_XXS, "Iq3_xxs", 98},
             {QUANT_IQ3_S, "IQ3_S", 110}};
    for (int i = 0; i < N_TYPES; i++) {
        CHECKF(quant_from_name(N[i].name) == N[i].t, "%s: id %d", N[i].name, quant_from_name(N[i].name));
        CHECK(quant_supported(N[i].t) && quant_row_size(N[i].t, 512) == 2 * N[i].bsize);
    }
    CHECK(QUANT_IQ2_XXS == 16 && QUANT_IQ2_XS == 17 && QUANT_IQ3_XXS == 18 && QUANT_IQ3_S == 21 && QUANT_IQ2_S == 22);
}

/* ---- hand-built blocks ---- */

static void put16(uint8_t *p, uint16_t v) { memcpy(p, &v, 2); }

static void kat(void) {
    float y[256];
    /* IQ2_XXS, run 1: groups 8..11 with grid indices 1, 0, 0, 0 (entry 1 =
     * 43 then seven 8s), sign code 3 on its first group (weights 0 and 1
     * negative), scale 5: db = 2 * 5.5 / 4. */
    uint8_t a[66] = {0};
    put16(a, h(2.0f));
    a[2 + 8] = 1;
    const uint32_t b1 = 3u | 5u << 28;
    memcpy(a + 2 + 12, &b1, 4);
    quant_get(QUANT_IQ2_XXS)->to_f32(a, y, 256);
    CHECKF(y[32] == -2.75f * 43 && y[33] == -2.75f * 8 && y[34] == 2.75f * 8 && y[40] == 2.75f * 8,
           "iq2_xxs %g %g %g %g", y[32], y[33], y[34], y[40]);
    CHECKF(y[0] == 2.0f, "iq2_xxs y[0]=%g", y[0]); /* scale 0: 2 * 0.5 / 4 * 8 */

    /* IQ2_XS: group 5 (run 1, first 16) index 1 with sign code 1 (bits 0
     * and 7: weights 40 and 47); scales[1] = 0x73 -> weights 32..47 use 3,
     * 48..63 use 7. */
    uint8_t c[74] = {0};
    put16(c, h(1.0f));
    put16(c + 2 + 2 * 5, (uint16_t)(1 | 1 << 9));
    c[2 + 64 + 1] = 0x73;
    quant_get(QUANT_IQ2_XS)->to_f32(c, y, 256);
    CHECKF(y[40] == -0.875f * 43 && y[41] == 0.875f * 8 && y[47] == -0.875f * 8 && y[48] == 1.875f * 8,
           "iq2_xs %g %g %g %g", y[40], y[41], y[47], y[48]);

    /* IQ2_S: group 6 = run 1 group 2: index 1 + (2 << 8) = 513 through qh
     * bits 4..5; its signs byte 0x80 (weight 55). */
    uint8_t e[82] = {0};
    put16(e, h(4.0f));
    e[2 + 6] = 1;
    e[2 + 64 + 1] = 2 << 4;
    e[2 + 32 + 6] = 0x80;
    e[2 + 72 + 1] = 0x20; /* weights 48..63: scale 2 */
    quant_get(QUANT_IQ2_S)->to_f32(e, y, 256);
    const uint64_t g513 = quant_iq2s_grid[513];
    for (int j = 0; j < 8; j++) {
        const float want = 4.0f * 2.5f * 0.25f * (float)(uint8_t)(g513 >> (8 * j)) * (j == 7 ? -1 : 1);
        CHECKF(y[48 + j] == want, "iq2_s y[%d]=%g want %g", 48 + j, y[48 + j], want);
    }

    /* IQ3_XXS: run 2, group 1 (weights 72..79) from grid indices 1 (bytes 0x14, 4, 4, 4)
     * and 255 (4, 0x1c, 0x34, 0x3e);
     * sign code 2 << 7 (weight 73 negative and, by parity, 79); scale 9. */
    uint8_t f[98] = {0};
    put16(f, h(0.5f));
    f[2 + 16 + 2] = 1;
    f[2 + 16 + 3] = 255;
    const uint32_t w2 = 2u << 7 | 9u << 28;
    memcpy(f + 2 + 64 + 8, &w2, 4);
    quant_get(QUANT_IQ3_XXS)->to_f32(f, y, 256);
    const float db3 = 0.5f * 9.5f * 0.5f;
    CHECKF(y[72] == db3 * 0x14 && y[73] == -db3 * 4 && y[75] == db3 * 4 && y[76] == db3 * 0x04 && y[79] == -db3 * 0x3e,
           "iq3_xxs %g %g %g %g %g", y[72], y[73], y[75], y[76], y[79]);

    /* IQ3_S: weights 100..103 = group 25 of 4: index 1 + 256 (bit 1 of
     * qh[3]); signs[12] bit 4 (weight 100); scales[1] high nibble 6 for
     * weights 96..127: db = d * 13. */
    uint8_t k[110] = {0};
    put16(k, h(0.25f));
    k[2 + 25] = 1;
    k[2 + 64 + 3] = 2;
    k[2 + 72 + 12] = 0x10;
    k[2 + 104 + 1] = 0x60;
    quant_get(QUANT_IQ3_S)->to_f32(k, y, 256);
    const uint32_t g257 = quant_iq3s_grid[257];
    for (int j = 0; j < 4; j++) {
        const float want = 0.25f * 13 * (float)(uint8_t)(g257 >> (8 * j)) * (j == 0 ? -1 : 1);
        CHECKF(y[100 + j] == want, "iq3_s y[%d]=%g want %g", 100 + j, y[100 + j], want);
    }
    CHECKF(y[96] == 0.25f * 13, "iq3_s y[96]=%g", y[96]); /* index 0: all ones */
}

/* ---- a second reading of the layouts ---- */

/* Bits [at, at + n) of the little-endian bit string p. */
static uint32_t bits(const uint8_t *p, int at, int n) {
    uint32_t v = 0;
    for (int i = 0; i < n; i++) v |= (uint32_t)((p[(at + i) / 8] >> ((at + i) % 8)) & 1) << i;
    return v;
}

static int parity7(uint32_t c) { return __builtin_popcount(c & 127) & 1; }

/* The magnitude of weight w (0..255) of block p, its sign (1 = negative),
 * the scale nibble of its run and the type's base (0.25, 0.5 or IQ3_S). */
static void weight(int t, const uint8_t *p, int w, int *mag, int *neg, int *sc) {
    const uint8_t *q = p + 2; /* after d */
    const int grp = w / 8, j = w % 8;
    switch (t) {
    case QUANT_IQ2_XXS: {
        const uint8_t *run = q + 8 * (w / 32);
        const int idx = run[grp % 4];
        const uint32_t code = bits(run + 4, 7 * (grp % 4), 7);
        *mag = (int)((quant_iq2xxs_grid[idx] >> (8 * j)) & 255);
        *neg = j < 7 ? (int)((code >> j) & 1) : parity7(code);
        *sc = (int)bits(run + 4, 28, 4);
        break;
    }
    case QUANT_IQ2_XS: {
        const uint32_t v = bits(q, 16 * grp, 16);
        const uint32_t code = v >> 9;
        *mag = (int)((quant_iq2xs_grid[v & 511] >> (8 * j)) & 255);
        *neg = j < 7 ? (int)((code >> j) & 1) : parity7(code);
        *sc = (int)bits(q + 64, 4 * (w / 16), 4);
        break;
    }
    case QUANT_IQ2_S: {
        const uint32_t idx = q[grp] | bits(q + 64, 2 * grp, 2) << 8;
        *mag = (int)((quant_iq2s_grid[idx] >> (8 * j)) & 255);
        *neg = (int)bits(q + 32, w, 1);
        *sc = (int)bits(q + 72, 4 * (w / 16), 4);
        break;
    }
    case QUANT_IQ3_XXS: {
        const int idx = q[w / 4];
        const uint32_t code = bits(q + 64, 32 * (w / 32) + 7 * (grp % 4), 7);
        *mag = (int)((quant_iq3xxs_grid[idx] >> (8 * (w % 4))) & 255);
        *neg = j < 7 ? (int)((code >> j) & 1) : parity7(code);
        *sc = (int)bits(q + 64, 32 * (w / 32) + 28, 4);
        break;
    }
    default: { /* IQ3_S */
        const uint32_t idx = q[w / 4] | bits(q + 64, w / 4, 1) << 8;
        *mag = (int)((quant_iq3s_grid[idx] >> (8 * (w % 4))) & 255);
        *neg = (int)bits(q + 72, w, 1);
        *sc = (int)bits(q + 104, 4 * (w / 32), 4);
        break;
    }
    }
}

/* ggml's float steps for weight w. */
static float expect(int t, const uint8_t *p, int w) {
    uint16_t d16;
    memcpy(&d16, p, 2);
    const float d = quant_f16_to_f32(d16);
    int mag, neg, sc;
    weight(t, p, w, &mag, &neg, &sc);
    float db;
    if (t == QUANT_IQ3_S)
        db = d * (float)(1 + 2 * sc);
    else
        db = d * (0.5f + (float)sc) * (t == QUANT_IQ3_XXS ? 0.5f : 0.25f);
    const float v = db * (float)mag;
    return neg ? -v : v;
}

/* Random bytes with a finite, modest d in every block. */
static void random_blocks(int t, uint8_t *q, int nb) {
    const size_t bs = quant_get(t)->bsize;
    for (size_t i = 0; i < bs * (size_t)nb; i++) q[i] = (uint8_t)rnd();
    for (int b = 0; b < nb; b++) put16(q + bs * (size_t)b, h(0.001f + 0.01f * (float)(rnd() % 1000) / 1000.0f));
}

#define NB 9

static void check_dequant(int t) {
    const quant_traits *tr = quant_get(t);
    static uint8_t q[NB * 110];
    static float y[NB * 256];
    for (int rep = 0; rep < 20; rep++) {
        random_blocks(t, q, NB);
        tr->to_f32(q, y, NB * 256);
        int bad = 0;
        for (int b = 0; b < NB && !bad; b++)
            for (int w = 0; w < 256 && !bad; w++) {
                const float want = expect(t, q + tr->bsize * (size_t)b, w);
                if (memcmp(&want, &y[256 * b + w], 4) != 0) {
                    bad = 1;
                    CHECKF(0, "%s block %d weight %d: %g, want %g", tr->name, b, w, y[256 * b + w], want);
                }
            }
    }
}

/* The reference dot against a double dot of the dequantized rows, and every
 * SIMD twin against the reference, bit for bit. */
static void check_dots(int t) {
    const quant_traits *tr = quant_get(t), *q8 = quant_get(QUANT_Q8_K);
    static uint8_t qx[NB * 110], qa[NB * 292];
    static float x[NB * 256], a[NB * 256], ar[NB * 256];
    const quant_vec_dot_fn twins[3] = {quant_vec_dot_at(t, QUANT_ISA_AVX2), quant_vec_dot_at(t, QUANT_ISA_AVX512),
                                       IQ_EMU(t)};
    static const char *names[3] = {"avx2", "avx512", "avx512 (emulated)"};
#if defined(__x86_64__)
    CHECKF(quant_cpu_isa() < QUANT_ISA_AVX2 || twins[0], "%s: no AVX2 kernel", tr->name);
#endif
    for (int rep = 0; rep < 12; rep++) {
        random_blocks(t, qx, NB);
        tr->to_f32(qx, x, NB * 256);
        for (int i = 0; i < NB * 256; i++) a[i] = grand() * (rep % 3 == 0 ? 100.0f : 1.0f);
        q8->from_f32(a, qa, NB * 256);
        if (rep % 2) /* raw activation bytes, -128 in every position sometime */
            for (int b = 0; b < NB; b++)
                for (int i = 0; i < 256; i++) qa[292 * b + 4 + i] = (uint8_t)(rnd() % 5 == 0 ? 0x80 : rnd());
        q8->to_f32(qa, ar, NB * 256);
        const int sizes[] = {NB * 256, 256, 512};
        for (int k = 0; k < 3; k++) {
            const int m = sizes[k];
            double ref = 0, mag = 0;
            for (int i = 0; i < m; i++) {
                ref += (double)x[i] * ar[i];
                mag += fabs((double)x[i] * ar[i]);
            }
            float s = 0;
            tr->vec_dot_ref(m, &s, qx, qa);
            CHECKF(fabs(s - ref) <= 1e-5 * mag + 1e-30, "%s n=%d: ref dot %g vs double %g", tr->name, m, s, ref);
            for (int tw = 0; tw < 3; tw++) {
                if (!twins[tw]) continue;
                float v = 0;
                twins[tw](m, &v, qx, qa);
                CHECKF(memcmp(&v, &s, 4) == 0, "%s n=%d %s: %.9g vs ref %.9g", tr->name, m, names[tw], v, s);
            }
        }
    }
    float s1 = 0, s2 = 0;
    tr->vec_dot(NB * 256, &s1, qx, qa);
    tr->vec_dot_ref(NB * 256, &s2, qx, qa);
    CHECKF(memcmp(&s1, &s2, 4) == 0, "%s: vec_dot %g vs ref %g", tr->name, s1, s2);
    printf("%-8s dequant and dots ok (%s%s%s)\n", tr->name, twins[0] ? "avx2 " : "", twins[1] ? "avx512 " : "",
           twins[2] ? "avx512-emu" : "");
}

/* ---- against ggml's own functions ---- */

/* Blocks of random bytes with a positive normal half d, and Q8_K blocks of
 * random quants (-128 one time in 7) with d = k / 128: the generator the
 * expected hashes below were computed with. */
static uint64_t gen_state;
static uint64_t gen(void) {
    gen_state ^= gen_state << 13;
    gen_state ^= gen_state >> 7;
    gen_state ^= gen_state << 17;
    return gen_state;
}

static void gen_blocks(uint8_t *q, size_t bs, int nb) {
    for (size_t i = 0; i < bs * (size_t)nb; i++) q[i] = (uint8_t)gen();
    for (int b = 0; b < nb; b++) put16(q + bs * (size_t)b, (uint16_t)(0x1000 + gen() % 0x2000));
}

static void gen_q8(uint8_t *q, int nb) {
    for (int b = 0; b < nb; b++) {
        uint8_t *p = q + 292 * b;
        const float d = (float)(1 + gen() % 100) / 128.0f;
        memcpy(p, &d, 4);
        for (int i = 0; i < 256; i++) p[4 + i] = (uint8_t)(gen() % 7 == 0 ? 0x80 : gen());
        for (int j = 0; j < 16; j++) {
            int16_t sum = 0;
            for (int i = 0; i < 16; i++) sum = (int16_t)(sum + (int8_t)p[4 + 16 * j + i]);
            memcpy(p + 260 + 2 * j, &sum, 2);
        }
    }
}

/* FNV-1a of 16 blocks dequantized and of the dots of their first 512,
 * 1024, ..., 4096 weights with 16 Q8_K blocks, as ggml computes them
 * (dequantize_row_* of ggml-quants.c and ggml_vec_dot_*_q8_K_generic of
 * ggml-cpu/quants.c at 3f545bec, built without FMA contraction); the
 * reference kernels must give the same bits, and so every SIMD twin. */
static void check_against_ggml(void) {
    static const struct {
        int t;
        uint64_t deq, dots;
    } H[] = {
        {QUANT_IQ2_XXS, 0x8ae69e94f50ce666ull, 0x66cd42a41eb8287full},
        {QUANT_IQ2_XS, 0x19daad4220e4ea50ull, 0xdeb900f2de777addull},
        {QUANT_IQ2_S, 0x99f32fe479609a34ull, 0x17d0bc0d9d58b6d1ull},
        {QUANT_IQ3_XXS, 0xe5e26f38d604bcffull, 0x50dbfdfcf0d06914ull},
        {QUANT_IQ3_S, 0x27ec809f9caaae38ull, 0xb50c72e2273b19deull},
    };
    enum { NBG = 16 };
    static uint8_t q[NBG * 110], a[NBG * 292];
    static float y[NBG * 256];
    for (int i = 0; i < N_TYPES; i++) {
        const quant_traits *tr = quant_get(H[i].t);
        gen_state = 0x5DEECE66Dull + (uint64_t)i;
        gen_blocks(q, tr->bsize, NBG);
        gen_q8(a, NBG);
        tr->to_f32(q, y, NBG * 256);
        const uint64_t dh = fnv(y, sizeof y);
        CHECKF(dh == H[i].deq, "%s: dequantized hash %016llx, ggml's %016llx", tr->name, (unsigned long long)dh,
               (unsigned long long)H[i].deq);
        float dots[8], simd[8];
        for (int k = 0; k < 8; k++) tr->vec_dot_ref(512 * (k + 1), &dots[k], q, a);
        const uint64_t th = fnv(dots, sizeof dots);
        CHECKF(th == H[i].dots, "%s: dot hash %016llx, ggml's %016llx", tr->name, (unsigned long long)th,
               (unsigned long long)H[i].dots);
        for (int k = 0; k < 8; k++) tr->vec_dot(512 * (k + 1), &simd[k], q, a);
        CHECKF(memcmp(dots, simd, sizeof dots) == 0, "%s: active dot differs from the reference", tr->name);
    }
}

/* ---- the IQ3_S quantizer ---- */

static void fixed_input(float *x, int n) {
    uint32_t s = 12345;
    for (int i = 0; i < n; ++i) {
        s = s * 1664525u + 1013904223u;
        float u = (float)(s >> 8) * 0x1p-24f - 0.5f;
        x[i] = u * (1.0f + (float)(i % 37) * 0.1f) + ((i % 97) == 0 ? 3.0f : 0.0f);
    }
}

/* FNV-1a of the output for test_kquants' fixed input, as llama.cpp's
 * quantize_iq3_s (3f545bec, no importance matrix) writes it: plain, and
 * with zero runs (weights 32..63 and 864..895) and a zero block (1280..1535),
 * whose qs / signs bytes it does not skip; then the round-trip error. */
static void check_iq3s_quantizer(void) {
    const quant_traits *tr = quant_get(QUANT_IQ3_S);
    static float x[4096], xr[4096];
    static uint8_t q[4096];
    fixed_input(x, 4096);
    tr->from_f32(x, q, 4096);
    uint64_t v = fnv(q, quant_row_size(QUANT_IQ3_S, 4096));
    CHECKF(v == 0x255d8ec6ba52005full, "IQ3_S quantizer hash %016llx", (unsigned long long)v);
    for (int i = 32; i < 64; i++) x[i] = 0;
    for (int i = 256 * 3 + 96; i < 256 * 3 + 128; i++) x[i] = 0;
    for (int i = 256 * 5; i < 256 * 6; i++) x[i] = 0;
    tr->from_f32(x, q, 4096);
    v = fnv(q, quant_row_size(QUANT_IQ3_S, 4096));
    CHECKF(v == 0xfb1576afe1261af5ull, "IQ3_S quantizer hash with zero runs %016llx", (unsigned long long)v);
    for (int i = 0; i < 4096; i++) x[i] = grand();
    tr->from_f32(x, q, 4096);
    tr->to_f32(q, xr, 4096);
    double e = 0, m = 0;
    for (int i = 0; i < 4096; i++) {
        e += (double)(x[i] - xr[i]) * (x[i] - xr[i]);
        m += (double)x[i] * x[i];
    }
    const double rms = sqrt(e / m);
    CHECKF(rms < 0.20, "IQ3_S round-trip rms %.4f", rms);
    printf("IQ3_S    quantizer as llama.cpp's, round-trip rms %.4f\n", rms);
}

int main(void) {
    quant_init();
    check_tables();
    kat();
    for (int i = 0; i < N_TYPES; i++) {
        check_dequant(TYPES[i]);
        check_dots(TYPES[i]);
    }
    check_against_ggml();
    check_iq3s_quantizer();
    return t_done();
}
