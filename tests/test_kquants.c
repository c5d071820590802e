/*
 * test_kquants — the K-quant and IQ4 types (Q2_K..Q6_K, Q8_K, IQ4_NL,
 * IQ4_XS): hand-built blocks with known values pin the byte layouts;
 * quantize/dequantize round trips stay within per-type error bounds; the
 * reference dots match a float dot of the dequantized rows; every SIMD dot
 * level matches the reference; the SIMD Q8_K quantizer writes the same bytes
 * as the reference one; and quantizer output hashes pin bit-exactness with
 * llama.cpp's quantizers (no importance matrix).
 */
#include "quant/quant.h"
#include "testutil.h"
#include "twins.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* ---- deterministic data ---- */

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;

static double urand(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (double)(rng_state >> 11) * 0x1p-53;
}

/* Approximately N(0,1): sum of 4 uniforms, rescaled. */
static float grand(void) {
    double s = urand() + urand() + urand() + urand() - 2.0;
    return (float)(s * 1.7320508);
}

static void fill(float *x, int n, float scale) {
    for (int i = 0; i < n; ++i) x[i] = scale * grand();
}

static uint16_t h(float f) { return quant_f32_to_f16(f); }

/* ---- known-answer blocks: exact values at chosen positions ---- */

static void kat_q2_K(void) {
    uint8_t b[84] = {0};
    /* scales[0..15], qs[16..79], d at 80, dmin at 82.  Weight e sits in
     * qs byte 32*(e/128) + e%32 at bits 2*((e/32)%4). */
    b[3] = 0x1;                   /* sub-block 3: sc 1, m 0 */
    b[5] = 0x3 | 0x2 << 4;        /* sub-block 5: sc 3, m 2 */
    b[16 + 20] = 3 << 2 | 1 << 4; /* weight 52 (sub-block 3): q 3; weight 84 (5): q 1 */
    b[16 + 32 + 7] = 2 << 4;      /* weight 199 (sub-block 12, sc 0, m 0): q 2 */
    uint16_t d = h(0.5f), dm = h(0.25f);
    memcpy(b + 80, &d, 2);
    memcpy(b + 82, &dm, 2);
    float y[256];
    quant_get(QUANT_Q2_K)->to_f32(b, y, 256);
    CHECKF(y[52] == 1.5f, "q2_K y[52]=%g", y[52]);  /* 0.5*1*3 */
    CHECKF(y[84] == 1.0f, "q2_K y[84]=%g", y[84]);  /* 0.5*3*1 - 0.25*2 */
    CHECKF(y[85] == -0.5f, "q2_K y[85]=%g", y[85]); /* q 0: -0.25*2 */
    CHECKF(y[199] == 0.0f, "q2_K y[199]=%g", y[199]);
}

static void kat_q3_K(void) {
    uint8_t b[110] = {0};
    /* hmask[0..31], qs[32..95], scales[96..107], d at 108 */
    /* sub-block 9 scale = 45 (biased; 13 signed): low nibble 13 in the high
     * nibble of byte 1, top bits (45 >> 4 = 2) at bits 2*(9/4)=4 of byte 8+1. */
    b[96 + 1] = 13 << 4;
    b[96 + 8 + 1] = 2 << 4;
    /* weight 150 = 128 + 22, run k=0 of second half: qs byte 32 + 22,
     * bits 0..1; hmask bit 4 of byte 22. */
    b[32 + 32 + 22] = 2;
    b[22] = 1 << 4;      /* high bit set: quant 2 */
    b[32 + 32 + 23] = 1; /* weight 151: no high bit -> 1 - 4 = -3 */
    uint16_t d = h(0.25f);
    memcpy(b + 108, &d, 2);
    float y[256];
    quant_get(QUANT_Q3_K)->to_f32(b, y, 256);
    CHECKF(y[150] == 0.25f * 13 * 2, "q3_K y[150]=%g", y[150]);
    CHECKF(y[151] == 0.25f * 13 * -3, "q3_K y[151]=%g", y[151]);
    CHECKF(y[152] == 0.25f * 13 * -4, "q3_K y[152]=%g", y[152]);
    CHECKF(y[0] == 0.25f * -32 * -4, "q3_K y[0]=%g", y[0]); /* scale 0 -> -32 */
}

/* 6-bit scale 37 and min 50 for sub-block 5 of a Q4_K/Q5_K scale field. */
static void k4_scales(uint8_t *s12) {
    s12[9] = 5 | 2 << 4; /* low nibbles of scale (37 & 15) and min (50 & 15) */
    s12[1] |= 2 << 6;    /* scale 37 >> 4 */
    s12[5] |= 3 << 6;    /* min 50 >> 4 */
    s12[2] = 11;         /* sub-block 2: scale 11, min 0 */
}

static void kat_q4_K(void) {
    uint8_t b[144] = {0};
    uint16_t d = h(1.0f), dm = h(0.5f);
    memcpy(b, &d, 2);
    memcpy(b + 2, &dm, 2);
    k4_scales(b + 4);
    /* weight 163 (sub-block 5) = group 2, high nibble of byte 64 + 3. */
    b[16 + 64 + 3] = 7 << 4 | 9; /* low nibble = weight 131 (sub-block 4) */
    b[16 + 32 + 5] = 4;          /* weight 64 + 5 = 69 (sub-block 2): q 4 */
    float y[256];
    quant_get(QUANT_Q4_K)->to_f32(b, y, 256);
    CHECKF(y[163] == 37 * 7 - 0.5f * 50, "q4_K y[163]=%g", y[163]);
    CHECKF(y[164] == -0.5f * 50, "q4_K y[164]=%g", y[164]);
    /* sub-block 4 has scale 0 | (b[0] >> 6) << 4 = 0 and min from b[8]. */
    CHECKF(y[131] == 0.0f, "q4_K y[131]=%g", y[131]);
    CHECKF(y[69] == 44.0f, "q4_K y[69]=%g", y[69]);
}

static void kat_q5_K(void) {
    uint8_t b[176] = {0};
    uint16_t d = h(1.0f), dm = h(0.5f);
    memcpy(b, &d, 2);
    memcpy(b + 2, &dm, 2);
    k4_scales(b + 4);
    /* weight 163: group 2, high half -> qh bit 5 of byte 3; qs byte 64 + 3. */
    b[48 + 64 + 3] = 7 << 4;
    b[16 + 3] = 1 << 5;
    b[48 + 32 + 5] = 4; /* weight 69: q 4, no fifth bit */
    b[16 + 6] = 1 << 2; /* weight 64 + 6 = 70: fifth bit only */
    float y[256];
    quant_get(QUANT_Q5_K)->to_f32(b, y, 256);
    CHECKF(y[163] == 37 * 23 - 0.5f * 50, "q5_K y[163]=%g", y[163]);
    CHECKF(y[69] == 44.0f, "q5_K y[69]=%g", y[69]);
    CHECKF(y[70] == 11 * 16.0f, "q5_K y[70]=%g", y[70]);
}

static void kat_q6_K(void) {
    uint8_t b[210] = {0};
    /* ql[0..127], qh[128..191], scales[192..207], d at 208 */
    /* weight 128 + 96 + 9 = 233 (sub-block 14): high nibble of ql 64 + 32 + 9,
     * top bits at bits 6..7 of qh 32 + 9. */
    b[64 + 32 + 9] = 0xA << 4;
    b[128 + 32 + 9] = 3 << 6; /* q = 0xA | 3 << 4 = 58 -> 26 */
    b[192 + 14] = (uint8_t)(int8_t)-3;
    b[192 + 2] = 5; /* weight 32 + 1 (sub-block 2): q 0 -> -32 */
    uint16_t d = h(0.5f);
    memcpy(b + 208, &d, 2);
    float y[256];
    quant_get(QUANT_Q6_K)->to_f32(b, y, 256);
    CHECKF(y[233] == 0.5f * -3 * 26, "q6_K y[233]=%g", y[233]);
    CHECKF(y[33] == 0.5f * 5 * -32, "q6_K y[33]=%g", y[33]);
}

static void kat_q8_K(void) {
    uint8_t b[292] = {0};
    float d = 0.125f;
    memcpy(b, &d, 4);
    b[4 + 77] = (uint8_t)(int8_t)-100;
    float y[256];
    quant_get(QUANT_Q8_K)->to_f32(b, y, 256);
    CHECKF(y[77] == -12.5f, "q8_K y[77]=%g", y[77]);
    CHECK(y[78] == 0.0f);
}

static void kat_iq4(void) {
    uint8_t b[18] = {0};
    uint16_t d = h(2.0f);
    memcpy(b, &d, 2);
    b[2 + 3] = 0x0F | 0x02 << 4; /* weight 3: code 15 (113), weight 19: code 2 (-83) */
    float y[32];
    quant_get(QUANT_IQ4_NL)->to_f32(b, y, 32);
    CHECKF(y[3] == 226.0f && y[19] == -166.0f, "iq4_nl %g %g", y[3], y[19]);
    CHECKF(y[0] == -254.0f, "iq4_nl y[0]=%g", y[0]);

    uint8_t c[136] = {0};
    d = h(0.5f);
    memcpy(c, &d, 2);
    /* sub-block 5 scale 40 (biased; 8 signed): low nibble 8 in the high
     * nibble of scales_l[2], top bits 2 at scales_h bits 10..11. */
    c[4 + 2] = 8 << 4;
    uint16_t sh = 2 << 10;
    memcpy(c + 2, &sh, 2);
    c[8 + 16 * 5 + 1] = 0x9 << 4; /* weight 160 + 17: code 9 (13) */
    float z[256];
    quant_get(QUANT_IQ4_XS)->to_f32(c, z, 256);
    CHECKF(z[177] == 0.5f * 8 * 13, "iq4_xs z[177]=%g", z[177]);
    CHECKF(z[160] == 0.5f * 8 * -127, "iq4_xs z[160]=%g", z[160]);
    CHECKF(z[0] == 0.5f * -32 * -127, "iq4_xs z[0]=%g", z[0]);
}

/* ---- per-type properties ---- */

/* rms: round trip rms(err)/rms(x) on approximately-normal data, about 1.25x
 * the measured value.  The K-quants pick scales by search and clamp, so
 * only RMS error is bounded, not the per-element error. */
typedef struct {
    int type;
    double rms;
} kbound;
static const kbound TYPES[] = {
    {QUANT_Q2_K, 0.39},  {QUANT_Q3_K, 0.19},   {QUANT_Q4_K, 0.095},  {QUANT_Q5_K, 0.048},
    {QUANT_Q6_K, 0.024}, {QUANT_Q8_K, 0.0085}, {QUANT_IQ4_NL, 0.10}, {QUANT_IQ4_XS, 0.10},
};

#define NMAX (256 * 9)

static double rms_rel(const float *a, const float *b, int n) {
    double e = 0, s = 0;
    for (int i = 0; i < n; ++i) {
        e += (double)(a[i] - b[i]) * (a[i] - b[i]);
        s += (double)a[i] * a[i];
    }
    return sqrt(e / s);
}

static void check_type(const kbound *kb) {
    const quant_traits *tr = quant_get(kb->type);
    CHECKF(tr != NULL, "type %d missing", kb->type);
    if (!tr) return;
    const quant_traits *ty = quant_get(tr->vec_dot_type);
    CHECKF(ty && ty->from_f32 && ty->to_f32, "%s: activation type %d missing", tr->name, tr->vec_dot_type);
    if (!ty || !ty->from_f32) return;

    static float x[NMAX], xr[NMAX], a[NMAX], ar[NMAX];
    static uint8_t qx[NMAX * 2], qa[NMAX * 2];
    const int n = NMAX;

    /* round trip, with one block of very different magnitude and a zero block */
    fill(x, n, 1.0f);
    for (int i = 256; i < 512; ++i) x[i] *= 1e-3f;
    memset(x + 512, 0, 256 * sizeof(float));
    tr->from_f32(x, qx, n);
    tr->to_f32(qx, xr, n);
    for (int i = 512; i < 768; ++i) CHECKF(xr[i] == 0.0f, "%s: zero block [%d]=%g", tr->name, i, xr[i]);
    double worst = 0;
    for (int blk = 0; blk < n / 256; ++blk) {
        if (blk == 2) continue;
        double r = rms_rel(x + 256 * blk, xr + 256 * blk, 256);
        if (r > worst) worst = r;
    }
    CHECKF(worst <= kb->rms, "%s: round-trip rms %.4f > %.4f", tr->name, worst, kb->rms);
    printf("%-7s round-trip rms %.4f (bound %.4f)\n", tr->name, worst, kb->rms);

    /* reference dot against the float dot of the dequantized rows */
    fill(a, n, 1.0f);
    ty->from_f32(a, qa, n);
    ty->to_f32(qa, ar, n);
    int sizes[] = {n, 256, 512};
    for (unsigned k = 0; k < sizeof sizes / sizeof *sizes; ++k) {
        int m = sizes[k];
        double ref = 0, mag = 0;
        for (int i = 0; i < m; ++i) {
            ref += (double)xr[i] * ar[i];
            mag += fabs((double)xr[i] * ar[i]);
        }
        float s = 0;
        tr->vec_dot_ref(m, &s, qx, qa);
        CHECKF(fabs(s - ref) <= 1e-5 * mag, "%s n=%d: ref dot %g vs float %g", tr->name, m, s, ref);
        for (int tw = 0; tw < N_TWINS; ++tw) {
            quant_vec_dot_fn f = dot_twin(kb->type, tw);
            if (!f) continue;
            float v = 0;
            f(m, &v, qx, qa);
            CHECKF(fabs(v - s) <= 2e-6 * mag, "%s n=%d %s: %g vs ref %g", tr->name, m, twin_name(tw), v, s);
        }
    }
    /* the kernels chosen by quant_init agree too */
    float s1 = 0, s2 = 0;
    tr->vec_dot(n, &s1, qx, qa);
    tr->vec_dot_ref(n, &s2, qx, qa);
    CHECKF(fabsf(s1 - s2) <= 1e-4f * (fabsf(s2) + 1), "%s: vec_dot %g vs ref %g", tr->name, s1, s2);
}

/* SIMD Q8_K quantizers write exactly the reference bytes, including a zero
 * block and a block whose extremes tie (+a first, then -a). */
static void check_q8_K_simd(void) {
    static float x[NMAX];
    static uint8_t r[NMAX * 2], s[NMAX * 2];
    fill(x, NMAX, 3.0f);
    memset(x + 256, 0, 256 * sizeof(float));
    for (int i = 512; i < 768; ++i) x[i] = (float)((i % 7) - 3);
    x[600] = 9.0f;
    x[700] = -9.0f;
    const quant_traits *tr = quant_get(QUANT_Q8_K);
    memset(r, 0xAB, sizeof r);
    memset(s, 0xCD, sizeof s);
    tr->from_f32(x, r, NMAX);
    size_t bytes = quant_row_size(QUANT_Q8_K, NMAX);
    for (int k = 0; k < N_TWINS; ++k) {
        quant_from_f32_fn f = quant_twin(QUANT_Q8_K, k);
        if (!f) continue;
        f(x, s, NMAX);
        CHECKF(memcmp(r, s, bytes) == 0, "Q8_K quantizer %s differs from reference", twin_name(k));
    }
}

/* FNV-1a over the quantizer output for a fixed input.  The expected values
 * were produced by llama.cpp's own quantizers (ggml-quants.c, 2025-02, no
 * importance matrix, IQ4_NL through quantize_iq4_nl) on the same input. */
static uint64_t fnv(const uint8_t *p, size_t n) {
    uint64_t v = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; ++i) v = (v ^ p[i]) * 0x100000001b3ull;
    return v;
}

static void fixed_input(float *x, int n) {
    uint32_t s = 12345;
    for (int i = 0; i < n; ++i) {
        s = s * 1664525u + 1013904223u;
        float u = (float)(s >> 8) * 0x1p-24f - 0.5f;
        x[i] = u * (1.0f + (float)(i % 37) * 0.1f) + ((i % 97) == 0 ? 3.0f : 0.0f);
    }
}

static void check_hashes(void) {
    static const struct {
        int type;
        uint64_t hash;
    } H[] = {
        {QUANT_Q2_K, 0x083d8666eaab11b0ull},   {QUANT_Q3_K, 0xc755752400ecf030ull},
        {QUANT_Q4_K, 0x96553c2e5107f4c9ull},   {QUANT_Q5_K, 0x88650f1d14ab89f5ull},
        {QUANT_Q6_K, 0x7101d865d06c8cdbull},   {QUANT_Q8_K, 0x76ab3fa1a2ec56cfull},
        {QUANT_IQ4_NL, 0xce19c2159b37f0d1ull}, {QUANT_IQ4_XS, 0x48367de664945fa5ull},
    };
    static float x[4096];
    static uint8_t q[4096 * 2];
    fixed_input(x, 4096);
    for (unsigned i = 0; i < sizeof H / sizeof *H; ++i) {
        const quant_traits *tr = quant_get(H[i].type);
        tr->from_f32(x, q, 4096);
        uint64_t v = fnv(q, quant_row_size(H[i].type, 4096));
        printf("%-7s hash %016llx\n", tr->name, (unsigned long long)v);
        CHECKF(v == H[i].hash, "%s: quantizer output hash %016llx", tr->name, (unsigned long long)v);
    }
}

int main(void) {
    quant_init();
    kat_q2_K();
    kat_q3_K();
    kat_q4_K();
    kat_q5_K();
    kat_q6_K();
    kat_q8_K();
    kat_iq4();
    for (unsigned i = 0; i < sizeof TYPES / sizeof *TYPES; ++i) check_type(&TYPES[i]);
    check_q8_K_simd();
    check_hashes();
    return t_done();
}
