/*
 * test_lowbit — the low-bit types TQ1_0, TQ2_0, MXFP4, IQ1_S and IQ1_M:
 *  - hand-made blocks dequantize to values worked out by hand, and random
 *    blocks to what an independent decoder (written from the layouts,
 *    element by element, in double) gives, bit for bit;
 *  - the IQ1 grid is the format's (its hash), the table's names and sizes;
 *  - the reference dots match the double dot of the dequantized rows, and
 *    every SIMD dot (AVX2, AVX-512, AVX-512 emulated) equals the scalar one
 *    bit for bit (TQ*, IQ1_*) or within rounding (MXFP4, which sums blocks
 *    in vector lanes), including activations with -128 quants;
 *  - the TQ1_0, TQ2_0 and MXFP4 quantizers: exact round trips of values on
 *    their grids, bounded error on random data, and output hashes equal to
 *    llama.cpp's quantizers (ggml-quants.c at 3f545bec) on a fixed input;
 *  - a small llama model with each type's weights gives the logits of
 *    the same network in F32 (only the activations' rounding differs);
 *  - a model whose weights are ternary goes through `kiln quantize` to
 *    TQ2_0 and TQ1_0 (lossless there, llama.cpp's choices for the other
 *    tensors) and its logits stay those of F32; mxfp4_moe makes experts
 *    MXFP4 and the rest Q8_0 (the Qwen 3.5 MoE fixture so quantized runs
 *    its MXFP4 experts with the logits of its twin with F32 experts);
 *    IQ1_S / IQ1_M are refused with the reason; `kiln show` names the types.
 */
#include "kiln.h"
#include "testutil.h"

#include "gguf/gguf.h"
#include "quant/lowbit_layout.h"
#include "quant/quant.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#if defined(__x86_64__)
extern const quant_simd quant_lowbit_avx512_emu;
#endif

static const int TYPES[] = {QUANT_TQ1_0, QUANT_TQ2_0, QUANT_MXFP4, QUANT_IQ1_S, QUANT_IQ1_M};
#define N_TYPES (int)(sizeof TYPES / sizeof TYPES[0])

/* ---- deterministic data ---- */

static uint64_t rng_state = 0x2545F4914F6CDD1Dull;

static uint64_t rnd(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

static double urand(void) { return (double)(rnd() >> 11) * 0x1p-53; }

static float grand(void) {
    double s = urand() + urand() + urand() + urand() - 2.0;
    return (float)(s * 1.7320508);
}

static uint16_t h(float f) { return quant_f32_to_f16(f); }

/* A random finite f16 of magnitude in [2^-6, 2^3). */
static uint16_t rand_half(void) {
    float m = (float)ldexp(1.0 + urand(), (int)(rnd() % 9) - 6);
    return h(rnd() & 1 ? -m : m);
}

static uint64_t fnv(const void *p, size_t n) {
    const uint8_t *b = p;
    uint64_t v = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; ++i) v = (v ^ b[i]) * 0x100000001b3ull;
    return v;
}

/* ---- independent decoders: weight e of a block, from the layout ---- */

static int trit_of(uint8_t b, int k) {
    unsigned q = b;
    for (int i = 0; i < k; ++i) q = (q * 3) & 0xff;
    return (int)((q * 3) >> 8);
}

static double ref_tq1(const quant_block_tq1_0 *x, int e) {
    int t;
    if (e < 160)
        t = trit_of(x->qs[e % 32], e / 32);
    else if (e < 240)
        t = trit_of(x->qs[32 + (e - 160) % 16], (e - 160) / 16);
    else
        t = trit_of(x->qh[(e - 240) % 4], (e - 240) / 4);
    return (double)quant_f16_to_f32(x->d) * (t - 1);
}

static double ref_tq2(const quant_block_tq2_0 *x, int e) {
    int t = (x->qs[(e / 128) * 32 + e % 32] >> (2 * ((e / 32) % 4))) & 3;
    return (double)quant_f16_to_f32(x->d) * (t - 1);
}

/* E2M1 from its bits (sign, 2 exponent bits, 1 mantissa bit) times 2^(E - 127). */
static double ref_mxfp4(const quant_block_mxfp4 *x, int e) {
    int c = e < 16 ? x->qs[e] & 15 : x->qs[e - 16] >> 4;
    int ex = (c >> 1) & 3, m = c & 1;
    double v = ex ? ldexp(1.0 + 0.5 * m, ex - 1) : 0.5 * m;
    return ldexp(c & 8 ? -v : v, x->e - 127);
}

static int grid_val(int index, int j) { return (int8_t)(quant_iq1s_grid[index] >> (8 * j)); }

static double ref_iq1s(const quant_block_iq1_s *x, int e) {
    int b = e / 32, l = (e % 32) / 8, j = e % 8;
    int qh = x->qh[b];
    int index = x->qs[4 * b + l] + 256 * ((qh >> (3 * l)) & 7);
    double delta = qh & 0x8000 ? -0.125 : 0.125;
    return (double)quant_f16_to_f32(x->d) * (2 * ((qh >> 12) & 7) + 1) * (grid_val(index, j) + delta);
}

static double ref_iq1m(const quant_block_iq1_m *x, int e) {
    int b = e / 32, l = (e % 32) / 8, j = e % 8;
    int nib = (x->qh[2 * b + l / 2] >> (4 * (l % 2))) & 15;
    int index = x->qs[4 * b + l] + 256 * (nib & 7);
    double delta = nib & 8 ? -0.125 : 0.125;
    int w[4];
    for (int k = 0; k < 4; ++k) w[k] = x->scales[2 * k] | x->scales[2 * k + 1] << 8;
    int s = (w[b / 2] >> (6 * (b % 2) + 3 * (l / 2))) & 7;
    uint16_t d = (uint16_t)((w[0] >> 12) | (w[1] >> 12) << 4 | (w[2] >> 12) << 8 | (w[3] >> 12) << 12);
    return (double)quant_f16_to_f32(d) * (2 * s + 1) * (grid_val(index, j) + delta);
}

static double ref_weight(int t, const void *blocks, int e) {
    const quant_traits *tr = quant_get(t);
    const uint8_t *b = (const uint8_t *)blocks + (size_t)(e / tr->blck) * tr->bsize;
    e %= tr->blck;
    switch (t) {
    case QUANT_TQ1_0: return ref_tq1((const quant_block_tq1_0 *)b, e);
    case QUANT_TQ2_0: return ref_tq2((const quant_block_tq2_0 *)b, e);
    case QUANT_MXFP4: return ref_mxfp4((const quant_block_mxfp4 *)b, e);
    case QUANT_IQ1_S: return ref_iq1s((const quant_block_iq1_s *)b, e);
    default: return ref_iq1m((const quant_block_iq1_m *)b, e);
    }
}

/* nb random blocks of type t: random bytes, with a finite scale. */
static void random_blocks(int t, void *dst, int nb) {
    const quant_traits *tr = quant_get(t);
    uint8_t *p = dst;
    for (size_t i = 0; i < (size_t)nb * tr->bsize; ++i) p[i] = (uint8_t)rnd();
    for (int i = 0; i < nb; ++i) {
        uint8_t *b = p + (size_t)i * tr->bsize;
        uint16_t d = rand_half();
        if (t == QUANT_TQ1_0) memcpy(b + offsetof(quant_block_tq1_0, d), &d, 2);
        if (t == QUANT_TQ2_0) memcpy(b + offsetof(quant_block_tq2_0, d), &d, 2);
        if (t == QUANT_IQ1_S) memcpy(b, &d, 2);
        if (t == QUANT_MXFP4) b[0] = (uint8_t)(110 + rnd() % 30); /* scales 2^-17 .. 2^12 */
        if (t == QUANT_IQ1_M)
            for (int k = 0; k < 4; ++k) /* top nibble of scale word k = nibble k of d */
                b[offsetof(quant_block_iq1_m, scales) + 2 * k + 1] =
                    (uint8_t)((b[offsetof(quant_block_iq1_m, scales) + 2 * k + 1] & 0x0f) | ((d >> (4 * k)) & 15) << 4);
    }
}

/* ---- known answers ---- */

static void kat_tq2(void) {
    quant_block_tq2_0 b;
    memset(&b, 0, sizeof b);
    b.d = h(0.75f);
    b.qs[5] = 2 | 0 << 2 | 1 << 4 | 2 << 6; /* weights 5, 37, 69, 101: t 2, 0, 1, 2 */
    b.qs[32 + 31] = 2 << 6;                 /* weight 128 + 96 + 31 = 255: t 2 */
    float y[256];
    quant_get(QUANT_TQ2_0)->to_f32(&b, y, 256);
    CHECK(y[5] == 0.75f && y[37] == -0.75f && y[69] == 0.0f && y[101] == 0.75f && y[255] == 0.75f);
    CHECK(y[0] == -0.75f && y[128] == -0.75f); /* t 0 */
}

/* Packs five (or four, then a zero) trits the way the format defines. */
static uint8_t pack5(const int *t, int m) {
    int v = 0;
    for (int k = 0; k < 5; ++k) v = 3 * v + (k < m ? t[k] : 0);
    return (uint8_t)((256 * v + 242) / 243);
}

static void kat_tq1(void) {
    /* every 5-trit number survives the byte packing */
    for (int v = 0; v < 243; ++v) {
        int t[5], r = v;
        for (int k = 4; k >= 0; --k, r /= 3) t[k] = r % 3;
        uint8_t b = pack5(t, 5);
        int ok = 1;
        for (int k = 0; k < 5; ++k) ok &= trit_of(b, k) == t[k];
        CHECKF(ok, "TQ1_0 packing of %d", v);
    }
    /* a block of chosen trits */
    int tr[256];
    for (int e = 0; e < 256; ++e) tr[e] = (int)(rnd() % 3);
    quant_block_tq1_0 b;
    b.d = h(-2.5f);
    int t[5];
    for (int m = 0; m < 32; ++m) {
        for (int k = 0; k < 5; ++k) t[k] = tr[32 * k + m];
        b.qs[m] = pack5(t, 5);
    }
    for (int m = 0; m < 16; ++m) {
        for (int k = 0; k < 5; ++k) t[k] = tr[160 + 16 * k + m];
        b.qs[32 + m] = pack5(t, 5);
    }
    for (int j = 0; j < 4; ++j) {
        for (int k = 0; k < 4; ++k) t[k] = tr[240 + 4 * k + j];
        b.qh[j] = pack5(t, 4);
    }
    float y[256];
    quant_get(QUANT_TQ1_0)->to_f32(&b, y, 256);
    int bad = 0;
    for (int e = 0; e < 256; ++e) bad += y[e] != -2.5f * (float)(tr[e] - 1);
    CHECKF(bad == 0, "TQ1_0: %d weights differ from their trits", bad);
}

static void kat_mxfp4(void) {
    quant_block_mxfp4 b[2];
    memset(b, 0, sizeof b);
    b[0].e = 127;                /* scale 1 */
    b[0].qs[0] = 0x7 | 0x9 << 4; /* weight 0: 6.0, weight 16: -0.5 */
    b[0].qs[3] = 0x5 | 0xC << 4; /* weight 3: 3.0, weight 19: -2.0 */
    b[1].e = 0;                  /* scale 2^-127: 2^-128 per doubled unit */
    b[1].qs[1] = 0x7;            /* weight 33: 6 * 2^-127 = 12 * 2^-128 */
    b[1].qs[2] = 0xF;            /* weight 34: -6 * 2^-127 */
    float y[64];
    quant_get(QUANT_MXFP4)->to_f32(b, y, 64);
    CHECK(y[0] == 6.0f && y[16] == -0.5f && y[3] == 3.0f && y[19] == -2.0f && y[1] == 0.0f);
    CHECK(y[33] == ldexpf(12.0f, -128) && y[34] == -ldexpf(12.0f, -128));
    CHECK(quant_e8m0_half(0) == ldexpf(1.0f, -128) && quant_e8m0_half(1) == ldexpf(1.0f, -127));
    CHECK(quant_e8m0_half(127) == 0.5f && quant_e8m0_half(254) == ldexpf(1.0f, 126));
}

static void kat_iq1(void) {
    /* the grid: values in {-1, 0, 1}, entries distinct, the format's table */
    int ok = 1;
    for (int i = 0; i < 2048; ++i)
        for (int j = 0; j < 8; ++j) ok &= abs(grid_val(i, j)) <= 1;
    CHECK(ok);
    CHECKF(fnv(quant_iq1s_grid, sizeof quant_iq1s_grid) == 0x6703ed863501ae2eull, "IQ1_S grid hash %016llx",
           (unsigned long long)fnv(quant_iq1s_grid, sizeof quant_iq1s_grid));
    CHECK(quant_iq1s_grid[0] == 0xffffffffffffffffull && quant_iq1s_grid[2047] == 0x0101010101010101ull);

    /* IQ1_S: sub-block 1, s = 3 (x7), delta -1/8; group 2 index 2047 (all +1) */
    quant_block_iq1_s s;
    memset(&s, 0, sizeof s);
    s.d = h(0.5f);
    s.qh[1] = (uint16_t)(0x8000 | 3 << 12 | 7 << 6);
    s.qs[4 + 2] = 0xff;
    float y[256];
    quant_get(QUANT_IQ1_S)->to_f32(&s, y, 256);
    CHECK(y[32 + 16] == 0.5f * 7 * (1 - 0.125f) && y[32 + 23] == y[32 + 16]);
    CHECK(y[32] == 0.5f * 7 * (-1 - 0.125f)); /* group 0: index 0, all -1 */
    CHECK(y[0] == 0.5f * (-1 + 0.125f));      /* sub-block 0: s 0, delta +1/8 */

    /* IQ1_M: d = 0.25 from the nibbles; sub-block 3 scales 2 (groups 0-1)
     * and 5 (groups 2-3); group 1 index 2047 with delta -1/8, group 3
     * index 1 (byte 0 = +1, the rest -1) with delta +1/8 */
    quant_block_iq1_m m;
    memset(&m, 0, sizeof m);
    const uint16_t d = h(0.25f);
    uint16_t w[4] = {0, 0, 0, 0};
    for (int k = 0; k < 4; ++k) w[k] = (uint16_t)(((d >> (4 * k)) & 15) << 12);
    w[1] |= (uint16_t)((2 | 5 << 3) << 6);
    memcpy(m.scales, w, sizeof w);
    m.qs[12 + 1] = 0xff;
    m.qh[6] = 0x70 | 0x80; /* group 1: index bits 0x7 (high nibble), delta sign */
    m.qs[12 + 3] = 1;
    m.qh[7] = 0x00;
    quant_get(QUANT_IQ1_M)->to_f32(&m, y, 256);
    CHECK(y[96 + 8] == 0.25f * 5 * (1 - 0.125f));
    CHECK(y[96 + 24] == 0.25f * 11 * (1 + 0.125f) && y[96 + 25] == 0.25f * 11 * (-1 + 0.125f));
    CHECK(y[0] == 0.25f * (-1 + 0.125f));
}

/* ---- random blocks against the independent decoder ---- */

static void check_dequant(int t) {
    const quant_traits *tr = quant_get(t);
    const int nb = 64, n = nb * tr->blck;
    uint8_t *q = malloc((size_t)nb * tr->bsize);
    float *y = malloc(sizeof(float) * (size_t)n);
    random_blocks(t, q, nb);
    tr->to_f32(q, y, n);
    int bad = 0;
    for (int e = 0; e < n; ++e)
        if (y[e] != (float)ref_weight(t, q, e) && bad++ < 3)
            fprintf(stderr, "%s [%d]: %.9g vs %.9g\n", tr->name, e, y[e], ref_weight(t, q, e));
    CHECKF(bad == 0, "%s: %d of %d weights differ from the layout's formula", tr->name, bad, n);
    free(q);
    free(y);
}

/* ---- dots ---- */

/* The SIMD twins this machine runs: AVX2, AVX-512, emulated AVX-512. */
static quant_vec_dot_fn twin(int t, int k, const char **name) {
    static const char *names[] = {"avx2", "avx512", "avx512 (emulated)"};
    *name = names[k];
    if (k < 2) return quant_vec_dot_at(t, k == 0 ? QUANT_ISA_AVX2 : QUANT_ISA_AVX512);
#if defined(__x86_64__)
    return quant_cpu_isa() >= QUANT_ISA_AVX2 ? quant_lowbit_avx512_emu.dot[t] : NULL;
#else
    return NULL; /* the x86 twins only */
#endif
}

/* Activations: quantized from floats, or (hostile) random int8 quants
 * including -128 with consistent sums. */
static void make_act(int at, void *dst, int n, int hostile) {
    const quant_traits *ta = quant_get(at);
    if (!hostile) {
        float *a = malloc(sizeof(float) * (size_t)n);
        for (int i = 0; i < n; ++i) a[i] = grand();
        ta->from_f32(a, dst, n);
        free(a);
        return;
    }
    if (at == QUANT_Q8_K) {
        quant_block_q8_K *y = dst;
        for (int i = 0; i < n / 256; ++i) {
            y[i].d = (float)urand() * 0.01f + 0.001f;
            for (int e = 0; e < 256; ++e) y[i].qs[e] = rnd() % 5 == 0 ? -128 : (int8_t)rnd();
            for (int j = 0; j < 16; ++j) {
                int sum = 0;
                for (int e = 0; e < 16; ++e) sum += y[i].qs[16 * j + e];
                y[i].bsums[j] = (int16_t)sum;
            }
        }
    } else {
        quant_block_q8_0 *y = dst;
        for (int i = 0; i < n / 32; ++i) {
            y[i].d = rand_half();
            for (int e = 0; e < 32; ++e) y[i].qs[e] = rnd() % 5 == 0 ? -128 : (int8_t)rnd();
        }
    }
}

static void check_dots(int t) {
    const quant_traits *tr = quant_get(t), *ta = quant_get(tr->vec_dot_type);
    CHECK(tr->vec_dot_type == (t == QUANT_MXFP4 ? QUANT_Q8_0 : QUANT_Q8_K));
    const int nmax = 256 * 9;
    uint8_t *q = malloc(quant_row_size(t, nmax)), *a = malloc(quant_row_size(tr->vec_dot_type, nmax));
    float *xf = malloc(sizeof(float) * nmax), *af = malloc(sizeof(float) * nmax);
    const int sizes[] = {256, 512, 768, nmax, 32, 96};
    for (int src = 0; src < 2; ++src) { /* random blocks, quantizer output */
        for (int hostile = 0; hostile < 2; ++hostile) {
            if (src == 1 && !tr->from_f32) continue;
            if (src == 0) {
                random_blocks(t, q, nmax / tr->blck);
            } else {
                for (int i = 0; i < nmax; ++i) xf[i] = grand();
                tr->from_f32(xf, q, nmax);
            }
            make_act(tr->vec_dot_type, a, nmax, hostile);
            tr->to_f32(q, xf, nmax);
            ta->to_f32(a, af, nmax);
            for (unsigned k = 0; k < sizeof sizes / sizeof *sizes; ++k) {
                const int m = sizes[k];
                if (m % tr->blck) continue;
                double exact = 0, mag = 0;
                for (int i = 0; i < m; ++i) {
                    exact += (double)xf[i] * af[i];
                    mag += fabs((double)xf[i] * af[i]);
                }
                float s = 0;
                tr->vec_dot_ref(m, &s, q, a);
                CHECKF(fabs(s - exact) <= 1e-5 * mag + 1e-30, "%s n=%d: ref dot %g vs %g", tr->name, m, s, exact);
                for (int tw = 0; tw < 3; ++tw) {
                    const char *name;
                    quant_vec_dot_fn f = twin(t, tw, &name);
                    if (!f) continue;
                    float v = -1;
                    f(m, &v, q, a);
                    if (t == QUANT_MXFP4)
                        CHECKF(fabs((double)v - s) <= 2e-6 * mag + 1e-30, "%s n=%d %s: %.9g vs ref %.9g", tr->name, m,
                               name, v, s);
                    else
                        CHECKF(memcmp(&v, &s, sizeof v) == 0, "%s n=%d %s%s: %.9g vs ref %.9g", tr->name, m, name,
                               hostile ? " (-128 quants)" : "", v, s);
                }
            }
        }
    }
    for (int tw = 0; tw < 3; ++tw) {
        const char *name;
        printf("%-6s %-18s %s\n", tr->name, twin(t, tw, &name) ? name : "", twin(t, tw, &name) ? "checked" : "");
    }
    free(q);
    free(a);
    free(xf);
    free(af);
}

/* ---- quantizers ---- */

static double rms_rel(const float *a, const float *b, int n) {
    double e = 0, s = 0;
    for (int i = 0; i < n; ++i) {
        e += (double)(a[i] - b[i]) * (a[i] - b[i]);
        s += (double)a[i] * a[i];
    }
    return sqrt(e / s);
}

static void check_quantizer(int t, double max_rms) {
    const quant_traits *tr = quant_get(t);
    const int n = 256 * 8;
    float *x = malloc(sizeof(float) * n), *y = malloc(sizeof(float) * n);
    uint8_t *q = malloc(quant_row_size(t, n)), *q2 = malloc(quant_row_size(t, n));

    /* values on the type's grid come back exactly, bytes too */
    if (t == QUANT_MXFP4) {
        random_blocks(t, q, n / 32);
        for (int i = 0; i < n / 32; ++i) {
            quant_block_mxfp4 *b = (quant_block_mxfp4 *)q + i;
            for (int l = 0; l < 16; ++l) /* code 8 (-0) is written as 0 */
                for (int sh = 0; sh < 8; sh += 4)
                    if (((b->qs[l] >> sh) & 15) == 8) b->qs[l] = (uint8_t)(b->qs[l] & ~(15 << sh));
            b->qs[i % 16] = (uint8_t)((b->qs[i % 16] & 0xf0) | (i % 2 ? 0x7 : 0xE)); /* a top-binade code */
        }
    } else {
        for (int i = 0; i < n; ++i) x[i] = (float)((int)(rnd() % 3) - 1) * 0.375f;
        for (int i = 0; i < n; i += 256) x[i + 7] = (i / 256) % 2 ? 0.375f : -0.375f;
        tr->from_f32(x, q, n);
    }
    tr->to_f32(q, x, n);
    tr->from_f32(x, q2, n);
    CHECKF(memcmp(q, q2, quant_row_size(t, n)) == 0, "%s: grid values do not round-trip to the same bytes", tr->name);
    tr->to_f32(q2, y, n);
    CHECKF(memcmp(x, y, sizeof(float) * n) == 0, "%s: grid values do not round-trip exactly", tr->name);

    /* Gaussian data, one block 1000x smaller, one zero block */
    for (int i = 0; i < n; ++i) x[i] = grand();
    for (int i = 256; i < 512; ++i) x[i] *= 1e-3f;
    memset(x + 512, 0, 256 * sizeof(float));
    tr->from_f32(x, q, n);
    tr->to_f32(q, y, n);
    int zeros = 1;
    for (int i = 512; i < 768; ++i) zeros &= y[i] == 0.0f;
    CHECKF(zeros, "%s: the zero block does not come back as zeros", tr->name);
    double worst = 0;
    for (int b = 0; b < n / 256; ++b)
        if (b != 2) worst = fmax(worst, rms_rel(x + 256 * b, y + 256 * b, 256));
    CHECKF(worst <= max_rms, "%s: round-trip rms %.4f > %.4f", tr->name, worst, max_rms);
    printf("%-6s round-trip rms %.4f (bound %.4f)\n", tr->name, worst, max_rms);
    free(x);
    free(y);
    free(q);
    free(q2);
}

/* The same fixed input as test_kquants; hashes of what llama.cpp's
 * quantize_row_tq1_0_ref / tq2_0_ref / mxfp4_ref write for it. */
static void check_hashes(void) {
    static const struct {
        int type;
        uint64_t hash;
    } H[] = {
        {QUANT_TQ1_0, 0x4d286e5f108fd29cull},
        {QUANT_TQ2_0, 0x232102cea969bf6dull},
        {QUANT_MXFP4, 0xe3cbbe1b5d781c9dull},
    };
    static float x[4096];
    static uint8_t q[4096];
    uint32_t s = 12345;
    for (int i = 0; i < 4096; ++i) {
        s = s * 1664525u + 1013904223u;
        float u = (float)(s >> 8) * 0x1p-24f - 0.5f;
        x[i] = u * (1.0f + (float)(i % 37) * 0.1f) + ((i % 97) == 0 ? 3.0f : 0.0f);
    }
    for (unsigned i = 0; i < sizeof H / sizeof *H; ++i) {
        const quant_traits *tr = quant_get(H[i].type);
        tr->from_f32(x, q, 4096);
        uint64_t v = fnv(q, quant_row_size(H[i].type, 4096));
        printf("%-6s quantizer hash %016llx\n", tr->name, (unsigned long long)v);
        CHECKF(v == H[i].hash, "%s: quantizer output hash %016llx", tr->name, (unsigned long long)v);
    }
}

/* Pseudo-random blocks (4096 weights of each type) from a 64-bit LCG, with
 * finite scales; the expected values are what llama.cpp's
 * dequantize_row_* and its reference dot kernels (ggml-cpu quants.c,
 * *_generic, built without FMA) give on the same bytes, and on the Q8_K /
 * Q8_0 activations its reference quantizers write for a fixed input. */
static uint64_t lcg;
static uint8_t lcg8(void) {
    lcg = lcg * 6364136223846793005ull + 1442695040888963407ull;
    return (uint8_t)(lcg >> 56);
}

static void lcg_blocks(int t, uint8_t *q) {
    const quant_traits *tr = quant_get(t);
    const int nblk = 4096 / tr->blck;
    for (size_t i = 0; i < (size_t)nblk * tr->bsize; ++i) q[i] = lcg8();
    for (int b = 0; b < nblk; ++b) {
        uint8_t *p = q + (size_t)b * tr->bsize;
        const uint16_t lo = lcg8(), hi = lcg8();
        const uint16_t d = (uint16_t)((hi & 0x80) << 8 | 0x3000 | (hi & 3) << 8 | lo);
        if (t == QUANT_TQ1_0) memcpy(p + 52, &d, 2);
        if (t == QUANT_TQ2_0) memcpy(p + 64, &d, 2);
        if (t == QUANT_MXFP4) p[0] = (uint8_t)(110 + lcg8() % 30);
        if (t == QUANT_IQ1_S) memcpy(p, &d, 2);
        if (t == QUANT_IQ1_M)
            for (int k = 0; k < 4; ++k)
                p[48 + 2 * k + 1] = (uint8_t)((p[48 + 2 * k + 1] & 0x0f) | ((d >> (4 * k)) & 15) << 4);
    }
}

static void check_llama_pins(void) {
    static const struct {
        int type;
        uint64_t deq;
        uint32_t dot;
    } P[] = {
        {QUANT_TQ1_0, 0x4ea266641a36c067ull, 0xc0e5558f}, {QUANT_TQ2_0, 0x8b2e9bc5678c19b2ull, 0xbfa509bc},
        {QUANT_MXFP4, 0xa165a6941e80f73dull, 0x428bd3a0}, {QUANT_IQ1_S, 0x2a8e3fffeb13c8c8ull, 0xc1b6aa3c},
        {QUANT_IQ1_M, 0x87da457da5f91c29ull, 0xc1eefa66},
    };
    static float a[4096], y[4096];
    static uint8_t q[8192], yk[16 * 292], y0[128 * 34];
    uint32_t s = 777;
    for (int i = 0; i < 4096; ++i) {
        s = s * 1664525u + 1013904223u;
        a[i] = (float)(s >> 8) * 0x1p-24f - 0.5f + ((i % 61) == 0 ? -2.0f : 0.0f);
    }
    quant_get(QUANT_Q8_K)->from_f32(a, yk, 4096);
    quant_get(QUANT_Q8_0)->from_f32(a, y0, 4096);
    for (unsigned i = 0; i < sizeof P / sizeof *P; ++i) {
        const quant_traits *tr = quant_get(P[i].type);
        lcg = 7 + i;
        lcg_blocks(P[i].type, q);
        tr->to_f32(q, y, 4096);
        const uint64_t hv = fnv(y, sizeof y);
        CHECKF(hv == P[i].deq, "%s: dequantized hash %016llx, llama.cpp's %016llx", tr->name, (unsigned long long)hv,
               (unsigned long long)P[i].deq);
        float r;
        uint32_t bits;
        tr->vec_dot_ref(4096, &r, q, P[i].type == QUANT_MXFP4 ? (void *)y0 : (void *)yk);
        memcpy(&bits, &r, 4);
        CHECKF(bits == P[i].dot, "%s: dot %.9g (0x%08x), llama.cpp's 0x%08x", tr->name, r, bits, P[i].dot);
    }
}

/* ---- through a model ---- */

static char tmpdir[] = "/tmp/kiln-test-lowbit-XXXXXX";

/* nb blocks of type t with small scales, for a model's weights (|w| <
 * about 0.1): random quants, or for the ternary types weights of +-0.05
 * and 0 (TQ2_0 holds them exactly, so kiln quantize must too). */
static void model_blocks(int t, uint8_t *q, int nb) {
    const quant_traits *tr = quant_get(t);
    random_blocks(t, q, nb);
    for (int i = 0; i < nb; ++i) {
        uint8_t *b = q + (size_t)i * tr->bsize;
        const uint16_t d = h((float)(0.004 + 0.004 * urand()));
        if (t == QUANT_TQ1_0 || t == QUANT_TQ2_0) {
            float x[256];
            for (int e = 0; e < 256; ++e) x[e] = (float)((int)(rnd() % 3) - 1) * 0.05f;
            x[rnd() % 256] = 0.05f;
            tr->from_f32(x, b, 256);
        }
        if (t == QUANT_MXFP4) b[0] = 121; /* half scale 2^-7: |w| <= 12 * 2^-7 */
        if (t == QUANT_IQ1_S) memcpy(b, &d, 2);
        if (t == QUANT_IQ1_M)
            for (int k = 0; k < 4; ++k)
                b[offsetof(quant_block_iq1_m, scales) + 2 * k + 1] =
                    (uint8_t)((b[offsetof(quant_block_iq1_m, scales) + 2 * k + 1] & 0x0f) | ((d >> (4 * k)) & 15) << 4);
    }
}

/* A llama-shaped model (rows of 256 and 512, the stories tokenizer) whose
 * 2-D weights are blocks of type t; as_f32 writes their dequantized values
 * as F32 instead, the same network in floats. */
static int write_model(const char *path, int t, int as_f32) {
    char err[256];
    gguf_file *src;
    if (gguf_open("../models/stories260K.gguf", &src)) snprintf(err, sizeof err, "%s", kiln_last_error());
    if (!src) return -1;
    const int E = 256, F = 512, V = 512, H = 4, L = 2;
    gguf_writer *w = gguf_writer_new();
    for (int i = 0; i < gguf_n_kv(src); i++) {
        const gguf_kv *kv = gguf_kv_at(src, i);
        if (!strncmp(kv->key, "tokenizer.", 10) || !strcmp(kv->key, "general.architecture")) gguf_w_copy_kv(w, kv);
    }
    gguf_w_u32(w, "llama.context_length", 256);
    gguf_w_u32(w, "llama.embedding_length", E);
    gguf_w_u32(w, "llama.feed_forward_length", F);
    gguf_w_u32(w, "llama.block_count", L);
    gguf_w_u32(w, "llama.attention.head_count", H);
    gguf_w_u32(w, "llama.attention.head_count_kv", H);
    gguf_w_f32(w, "llama.attention.layer_norm_rms_epsilon", 1e-5f);
    const quant_traits *tr = quant_get(t);
    void *bufs[64];
    int nbuf = 0;
    static const float ones[512] = {[0 ... 511] = 1.0f};
    char n[64];
#define T2(nm, a, b)                                              \
    do {                                                          \
        int64_t ne[2] = {a, b};                                   \
        const int nb = (int)((int64_t)(a) * (b) / tr->blck);      \
        uint8_t *q = malloc((size_t)nb * tr->bsize);              \
        model_blocks(t, q, nb);                                   \
        if (as_f32) {                                             \
            float *f = malloc(sizeof(float) * (size_t)(a) * (b)); \
            tr->to_f32(q, f, (int64_t)(a) * (b));                 \
            free(q);                                              \
            gguf_w_tensor(w, nm, QUANT_F32, 2, ne, f);            \
            bufs[nbuf++] = f;                                     \
        } else {                                                  \
            gguf_w_tensor(w, nm, (uint32_t)t, 2, ne, q);          \
            bufs[nbuf++] = q;                                     \
        }                                                         \
    } while (0)
#define T1(nm, a)                                     \
    do {                                              \
        int64_t ne[1] = {a};                          \
        gguf_w_tensor(w, nm, QUANT_F32, 1, ne, ones); \
    } while (0)
    T2("token_embd.weight", E, V);
    T2("output.weight", E, V);
    T1("output_norm.weight", E);
    for (int l = 0; l < L; l++) {
#define NM(x) (snprintf(n, sizeof n, "blk.%d.%s", l, x), n)
        T1(NM("attn_norm.weight"), E);
        T2(NM("attn_q.weight"), E, E);
        T2(NM("attn_k.weight"), E, E);
        T2(NM("attn_v.weight"), E, E);
        T2(NM("attn_output.weight"), E, E);
        T1(NM("ffn_norm.weight"), E);
        T2(NM("ffn_gate.weight"), E, F);
        T2(NM("ffn_up.weight"), E, F);
        T2(NM("ffn_down.weight"), F, E);
#undef NM
    }
#undef T1
#undef T2
    int rc = gguf_writer_save(w, path, NULL, NULL);
    gguf_writer_free(w);
    for (int i = 0; i < nbuf; i++) free(bufs[i]);
    gguf_close(src);
    return rc;
}

static int last_logits(const char *path, float *out) {
    kiln_model *m;
    kiln_context *c;
    memset(out, 0, 512 * sizeof(float));
    if (kiln_model_load(path, NULL, &m) != KILN_OK) {
        CHECKF(0, "%s", kiln_last_error());
        return -1;
    }
    kiln_context_params cp = kiln_context_default_params();
    cp.n_ctx = 64;
    CHECK(kiln_context_new(m, &cp, &c) == KILN_OK);
    int32_t toks[6] = {1, 274, 287, 381, 261, 352};
    kiln_batch b = {6, toks, NULL, NULL, NULL};
    CHECK(kiln_decode(c, &b) == KILN_OK);
    memcpy(out, kiln_get_logits(c, 5), 512 * sizeof(float));
    kiln_context_free(c);
    kiln_model_free(m);
    return 0;
}

static double cosine(const float *a, const float *b, int n) {
    double ab = 0, aa = 0, bb = 0;
    for (int i = 0; i < n; i++) {
        ab += (double)a[i] * b[i];
        aa += (double)a[i] * a[i];
        bb += (double)b[i] * b[i];
    }
    return ab / sqrt(aa * bb + 1e-30);
}

/* Each type's weights through the model's matrix products (and row lookup
 * for token_embd) against the same network in F32: only the activations'
 * rounding to Q8_K / Q8_0 differs. */
static void check_model_types(void) {
    char qp[512], fp[512];
    float lq[512], lf[512];
    for (int i = 0; i < N_TYPES; ++i) {
        const int t = TYPES[i];
        snprintf(qp, sizeof qp, "%s/m-%s.gguf", tmpdir, quant_get(t)->name);
        snprintf(fp, sizeof fp, "%s/m-%s-f32.gguf", tmpdir, quant_get(t)->name);
        const uint64_t seed = rng_state;
        CHECK(write_model(qp, t, 0) == 0);
        rng_state = seed; /* the same blocks again */
        CHECK(write_model(fp, t, 1) == 0);
        if (last_logits(qp, lq) || last_logits(fp, lf)) continue;
        const double cs = cosine(lq, lf, 512);
        CHECKF(cs >= 0.999, "%s model: logits cosine to its F32 twin %.6f", quant_get(t)->name, cs);
        printf("%-6s model logits cosine to its F32 twin %.6f\n", quant_get(t)->name, cs);
    }
}

static int run_kiln(const char *args, char **out, char **err) {
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "'%s' %s", getenv("KILN_BIN"), args);
    return t_run_capture(cmd, tmpdir, out, err);
}

/* kiln quantize: a ternary F32 model to TQ2_0 and TQ1_0 loses nothing in
 * its ternary weights (the same logits from both files, bit for bit, close
 * to F32's), with llama.cpp's choices for the other tensors; IQ1_* are
 * refused with the reason; kiln show names the types. */
static void check_kiln_quantize(void) {
    char src[512], dst[512], args[1600];
    float lf[512], l2[512], l1[512];
    snprintf(src, sizeof src, "%s/tern-f32.gguf", tmpdir);
    CHECK(write_model(src, QUANT_TQ2_0, 1) == 0);
    if (last_logits(src, lf)) return;
    static const char *mixes[] = {"tq2_0", "tq1_0"};
    for (int k = 0; k < 2; ++k) {
        const int t = k ? QUANT_TQ1_0 : QUANT_TQ2_0;
        snprintf(dst, sizeof dst, "%s/tern-%s.gguf", tmpdir, mixes[k]);
        CHECKF(kiln_quantize(src, dst, mixes[k], 2) == KILN_OK, "%s", kiln_last_error());
        char err[256];
        gguf_file *f;
        if (gguf_open(dst, &f)) snprintf(err, sizeof err, "%s", kiln_last_error());
        CHECK(f != NULL);
        if (!f) return;
        int ok = 1;
        for (int i = 0; i < gguf_n_tensors(f); i++) {
            const gguf_tensor *g = gguf_tensor_at(f, i);
            const int want = g->n_dims == 1                          ? QUANT_F32
                             : !strcmp(g->name, "output.weight")     ? QUANT_Q6_K
                             : !strcmp(g->name, "token_embd.weight") ? QUANT_Q4_K
                                                                     : t;
            if ((int)g->type != want) {
                ok = 0;
                fprintf(stderr, "%s: %s, want %s\n", g->name, quant_get((int)g->type)->name, quant_get(want)->name);
            }
        }
        CHECK(ok);
        CHECK(gguf_get_int(f, "general.file_type", 0) == (k ? 36 : 37));
        gguf_close(f);
        last_logits(dst, k ? l1 : l2);
    }
    const double cs = cosine(l2, lf, 512);
    CHECKF(cs >= 0.995, "tq2_0: logits cosine to F32 %.6f", cs);
    printf("tq2_0 via kiln quantize: logits cosine to F32 %.6f\n", cs);
    CHECKF(memcmp(l1, l2, sizeof l1) == 0, "TQ1_0 and TQ2_0 files give different logits");

    for (int k = 0; k < 2; ++k) {
        const char *ty = k ? "IQ1_M" : "iq1_s";
        CHECK(kiln_quantize(src, dst, ty, 1) == KILN_ERR_UNSUPPORTED);
        CHECKF(strstr(kiln_last_error(), ty) && strstr(kiln_last_error(), "importance matrix"), "%s",
               kiln_last_error());
    }
    char *o = NULL, *e = NULL;
    snprintf(args, sizeof args, "show '%s/tern-tq1_0.gguf'", tmpdir);
    CHECK(run_kiln(args, &o, &e) == 0);
    CHECKF(o && strstr(o, "× TQ1_0") && strstr(o, "× Q6_K"), "kiln show: %s", o ? o : "");
    free(o);
    free(e);
    snprintf(args, sizeof args, "quantize '%s' '%s/x.gguf' iq1_m", src, tmpdir);
    CHECK(run_kiln(args, &o, &e) != 0);
    CHECKF(e && strstr(e, "importance matrix") && !strchr(strchr(e, '\n') ? strchr(e, '\n') + 1 : "", '\n'),
           "kiln quantize iq1_m: %s", e ? e : "");
    free(o);
    free(e);
}

/* mxfp4_moe: experts' 3-D tensors MXFP4 (round trip of the rows exact as
 * the quantizer's), every other weight Q8_0, norms F32. */
static void check_mxfp4_moe(void) {
    char src[512], dst[512], err[256];
    snprintf(src, sizeof src, "%s/moe-f32.gguf", tmpdir);
    snprintf(dst, sizeof dst, "%s/moe-mxfp4.gguf", tmpdir);
    gguf_writer *w = gguf_writer_new();
    gguf_w_str(w, "general.architecture", "qwen3moe", 8);
    gguf_w_u32(w, "qwen3moe.block_count", 1);
    gguf_w_u32(w, "qwen3moe.expert_count", 4);
    static float exps[64 * 32 * 4], dense[64 * 64], norm[64];
    for (size_t i = 0; i < sizeof exps / sizeof *exps; ++i) exps[i] = grand();
    for (size_t i = 0; i < sizeof dense / sizeof *dense; ++i) dense[i] = grand();
    for (int i = 0; i < 64; ++i) norm[i] = 1.0f;
    const int64_t ne3[3] = {64, 32, 4}, ne2[2] = {64, 64}, ne1[1] = {64};
    gguf_w_tensor(w, "blk.0.ffn_up_exps.weight", QUANT_F32, 3, ne3, exps);
    gguf_w_tensor(w, "blk.0.attn_q.weight", QUANT_F32, 2, ne2, dense);
    gguf_w_tensor(w, "output.weight", QUANT_F32, 2, ne2, dense);
    gguf_w_tensor(w, "blk.0.attn_norm.weight", QUANT_F32, 1, ne1, norm);
    CHECK(gguf_writer_save(w, src, NULL, NULL) == 0);
    gguf_writer_free(w);
    CHECKF(kiln_quantize(src, dst, "mxfp4_moe", 1) == KILN_OK, "%s", kiln_last_error());
    gguf_file *f;
    if (gguf_open(dst, &f)) snprintf(err, sizeof err, "%s", kiln_last_error());
    CHECK(f != NULL);
    if (!f) return;
    const gguf_tensor *ex = gguf_find_tensor(f, "blk.0.ffn_up_exps.weight");
    CHECK(ex && (int)ex->type == QUANT_MXFP4 && ex->ne[2] == 4);
    CHECK(gguf_find_tensor(f, "blk.0.attn_q.weight")->type == QUANT_Q8_0);
    CHECK(gguf_find_tensor(f, "output.weight")->type == QUANT_Q8_0);
    CHECK(gguf_find_tensor(f, "blk.0.attn_norm.weight")->type == QUANT_F32);
    CHECK(gguf_get_int(f, "general.file_type", 0) == 38);
    if (ex && (int)ex->type == QUANT_MXFP4) {
        static uint8_t q[sizeof exps / sizeof *exps / 32 * 17];
        quant_get(QUANT_MXFP4)->from_f32(exps, q, (int64_t)(sizeof exps / sizeof *exps));
        CHECK(ex->nbytes == sizeof q && memcmp(ex->data, q, sizeof q) == 0);
    }
    gguf_close(f);
}

/* A mixture of experts with MXFP4 experts: the Qwen 3.5 MoE fixture
 * through mxfp4_moe loads, routes through its MXFP4 experts and stays near
 * the F16 original's logits (a random network: the bound is loose, a broken
 * kernel gives a cosine near 0). */
static void check_moe_model(void) {
    const char *src = "data/hybrid/qwen35moe-spm-f16.gguf";
    char dst[512], err[256];
    snprintf(dst, sizeof dst, "%s/moe-mxfp4.gguf", tmpdir);
    CHECKF(kiln_quantize(src, dst, "mxfp4_moe", 2) == KILN_OK, "%s", kiln_last_error());
    gguf_file *f;
    if (gguf_open(dst, &f)) snprintf(err, sizeof err, "%s", kiln_last_error());
    CHECK(f != NULL);
    if (!f) return;
    int n_mx = 0;
    for (int i = 0; i < gguf_n_tensors(f); i++) n_mx += gguf_tensor_at(f, i)->type == QUANT_MXFP4;
    CHECKF(n_mx >= 9, "%d MXFP4 tensors", n_mx);
    gguf_close(f);
    /* its twin: the same file with the MXFP4 experts written as F32 */
    char twin[512];
    snprintf(twin, sizeof twin, "%s/moe-mxfp4-f32.gguf", tmpdir);
    if (gguf_open(dst, &f)) snprintf(err, sizeof err, "%s", kiln_last_error());
    gguf_writer *w = gguf_writer_new();
    void *bufs[256];
    int nbuf = 0;
    for (int i = 0; i < gguf_n_kv(f); i++) gguf_w_copy_kv(w, gguf_kv_at(f, i));
    for (int i = 0; i < gguf_n_tensors(f) && nbuf < 256; i++) {
        const gguf_tensor *t = gguf_tensor_at(f, i);
        if (t->type != QUANT_MXFP4) {
            gguf_w_tensor(w, t->name, t->type, (int)t->n_dims, t->ne, t->data);
            continue;
        }
        const int64_t nel = t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3];
        float *x = malloc(sizeof(float) * (size_t)nel);
        quant_get(QUANT_MXFP4)->to_f32(t->data, x, nel);
        gguf_w_tensor(w, t->name, QUANT_F32, (int)t->n_dims, t->ne, x);
        bufs[nbuf++] = x;
    }
    CHECK(gguf_writer_save(w, twin, NULL, NULL) == 0);
    gguf_writer_free(w);
    for (int i = 0; i < nbuf; i++) free(bufs[i]);
    gguf_close(f);
    float lf[512], lq[512], lt[512];
    if (last_logits(src, lf) || last_logits(dst, lq) || last_logits(twin, lt)) return;
    const double cs = cosine(lf, lq, 512), ct = cosine(lt, lq, 512);
    CHECKF(cs >= 0.9, "qwen35moe mxfp4_moe: logits cosine to F16 %.5f", cs);
    CHECKF(ct >= 0.998, "qwen35moe mxfp4_moe: logits cosine to its F32-expert twin %.6f", ct);
    printf("qwen35moe mxfp4_moe: logits cosine to F16 %.5f, to its F32-expert twin %.6f\n", cs, ct);
}

static void check_table(void) {
    static const struct {
        int type, blck;
        size_t bsize;
        const char *name;
    } K[] = {{QUANT_TQ1_0, 256, 54, "TQ1_0"},
             {QUANT_TQ2_0, 256, 66, "TQ2_0"},
             {QUANT_MXFP4, 32, 17, "MXFP4"},
             {QUANT_IQ1_S, 256, 50, "IQ1_S"},
             {QUANT_IQ1_M, 256, 56, "IQ1_M"}};
    CHECK(QUANT_TQ1_0 == 34 && QUANT_TQ2_0 == 35 && QUANT_MXFP4 == 39 && QUANT_IQ1_S == 19 && QUANT_IQ1_M == 29);
    for (unsigned i = 0; i < sizeof K / sizeof *K; ++i) {
        const quant_traits *tr = quant_get(K[i].type);
        CHECKF(tr && !strcmp(tr->name, K[i].name) && tr->blck == K[i].blck && tr->bsize == K[i].bsize, "%s", K[i].name);
        CHECK(quant_supported(K[i].type) && quant_from_name(K[i].name) == K[i].type);
        CHECK((tr->from_f32 != NULL) == (K[i].type != QUANT_IQ1_S && K[i].type != QUANT_IQ1_M));
    }
    CHECK(quant_from_name("tq2_0") == QUANT_TQ2_0 && quant_from_name("mxfp4") == QUANT_MXFP4);
}

int main(void) {
    quant_init();
    check_table();
    kat_tq1();
    kat_tq2();
    kat_mxfp4();
    kat_iq1();
    for (int i = 0; i < N_TYPES; ++i) {
        check_dequant(TYPES[i]);
        check_dots(TYPES[i]);
    }
    check_quantizer(QUANT_TQ1_0, 0.9);
    check_quantizer(QUANT_TQ2_0, 0.9);
    check_quantizer(QUANT_MXFP4, 0.14);
    check_hashes();
    check_llama_pins();
    if (!mkdtemp(tmpdir)) {
        CHECK(0);
        return t_done();
    }
    check_model_types();
    check_kiln_quantize();
    check_mxfp4_moe();
    check_moe_model();
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    CHECK(system(cmd) == 0);
    return t_done();
}
