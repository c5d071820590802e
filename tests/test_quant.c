/*
 * test_quant — every type in the quant table: round trips, reference dots
 * against dequantized floats, every SIMD level against the scalar twin, the
 * SIMD activation quantizers against the reference ones, and the f16/bf16
 * conversions over all 65536 bit patterns.
 */
#include "quant/quant.h"
#include "testutil.h"
#include "twins.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* ---- per-type bounds ----
 * grp   : round-trip max |x - deq(q(x))| over each group of max(blck, 32)
 *         elements, as a fraction of the group's max |x|.  0 = not checked
 *         (k-quants pick scales by search; only their RMS error is bounded).
 *           F32 exact; F16 2^-11 and BF16 2^-8 (half an ulp, relative);
 *           Q4_0 d = amax/8, clamped top code costs a full step: 1/8 + f16(d);
 *           Q5_0 d = amax/16 likewise: 1/16 + f16(d);
 *           Q4_1/Q5_1 half a step of range/15 or /31 (range <= 2 amax)
 *           plus f16 rounding of d and m;
 *           Q8_0/Q8_1 half a step of amax/127 plus f16(d).
 * rms   : round trip rms(err) / rms(x) on N(0,1) data (about 1.3x measured).
 *         Ternary types (scale = max |x|: most values round to 0) measure
 *         about 0.85, bounded under 1, the error of returning zeros.
 * step  : one quant step as a fraction of group amax (SIMD quantizers may
 *         differ from the reference by at most this).
 * dot   : |vec_dot_ref - sum deq(x) deq(y)| / sum |deq(x) deq(y)|.  With
 *         Q8_1 activations the kernels use m * s with s = d * sum(q), d not
 *         yet rounded to f16 and s rounded to f16 (as ggml does): twice
 *         2^-11 of sum over blocks |m| |sum y| is allowed on top (m = the
 *         block's smallest dequantized weight). */
typedef struct {
    int type;
    double grp, rms, step, dot;
} bound;

static const bound BOUNDS[] = {
    {QUANT_F32, 0.0, 0.0, 0.0, 1e-6},
    {QUANT_F16, 4.9e-4, 4e-4, 0.0, 1e-6},
    {QUANT_BF16, 3.91e-3, 3e-3, 0.0, 1e-6},
    {QUANT_Q4_0, 0.1260, 0.13, 0.1260, 3e-5},
    {QUANT_Q4_1, 0.0700, 0.11, 0.0700, 3e-5},
    {QUANT_Q5_0, 0.0640, 0.065, 0.0640, 3e-5},
    {QUANT_Q5_1, 0.0350, 0.055, 0.0350, 3e-5},
    {QUANT_Q8_0, 0.0045, 0.007, 1.0 / 127, 3e-5},
    {QUANT_Q8_1, 0.0045, 0.007, 1.0 / 127, 3e-5},
    {QUANT_Q2_K, 0.0, 0.40, 0.0, 1e-4},
    {QUANT_Q3_K, 0.0, 0.22, 0.0, 1e-4},
    {QUANT_Q4_K, 0.0, 0.12, 0.0, 1e-4},
    {QUANT_Q5_K, 0.0, 0.06, 0.0, 1e-4},
    {QUANT_Q6_K, 0.0, 0.03, 0.0, 1e-4},
    {QUANT_Q8_K, 0.0, 0.01, 1.0 / 127, 1e-4},
    {QUANT_IQ4_NL, 0.0, 0.12, 0.0, 1e-4},
    {QUANT_IQ4_XS, 0.0, 0.12, 0.0, 1e-4},
    {QUANT_IQ3_S, 0.0, 0.21, 0.0, 1e-4},
    {QUANT_TQ1_0, 0.0, 0.90, 0.0, 1e-4},
    {QUANT_TQ2_0, 0.0, 0.90, 0.0, 1e-4},
    {QUANT_MXFP4, 0.0, 0.15, 0.0, 1e-4},
};

static const bound *bound_of(int t) {
    for (size_t i = 0; i < sizeof BOUNDS / sizeof BOUNDS[0]; i++)
        if (BOUNDS[i].type == t) return &BOUNDS[i];
    return NULL;
}

/* SIMD dot vs scalar twin, relative to sum |x y|. */
#define SIMD_DOT_TOL 1e-5

/* ---- data ---- */

static uint64_t g_rng = 0x9E3779B97F4A7C15ull;
static uint64_t rnd(void) {
    g_rng ^= g_rng >> 12;
    g_rng ^= g_rng << 25;
    g_rng ^= g_rng >> 27;
    return g_rng * 0x2545F4914F6CDD1Dull;
}
static double urand(void) { return (double)(rnd() >> 11) * 0x1p-53; }
static float gauss(void) {
    const double u = urand() + 0x1p-60, v = urand();
    return (float)(sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v));
}

enum { D_GAUSS, D_UNIFORM, D_ZEROS, D_LARGE, D_OUTLIER, D_SPARSE, D_CONST, D_COUNT };
static const char *DIST_NAME[D_COUNT] = {"gauss", "uniform", "zeros", "large", "outlier", "sparse", "const"};

static void fill(float *x, int n, int dist) {
    for (int i = 0; i < n; i++) {
        switch (dist) {
        case D_GAUSS: x[i] = gauss(); break;
        case D_UNIFORM: x[i] = (float)(2.0 * urand() - 1.0); break;
        case D_ZEROS: x[i] = 0.0f; break;
        case D_LARGE: x[i] = 3000.0f * gauss(); break; /* stays inside the f16 range */
        case D_OUTLIER: x[i] = (i % 37 == 5) ? 60.0f * gauss() : gauss(); break;
        case D_SPARSE: x[i] = (i / 32) % 3 == 1 && rnd() % 4 == 0 ? gauss() : 0.0f; break;
        default: x[i] = 0.75f; break; /* flat: Q4_1 range 0 */
        }
    }
}

static void *xmalloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p) abort();
    return p;
}

/* Element counts to try for a unit (block size): short rows, odd block counts. */
static int lengths(int unit, int *out) {
    static const int mult[] = {1, 2, 3, 4, 5, 7, 129};
    int k = 0;
    for (size_t i = 0; i < sizeof mult / sizeof mult[0]; i++) out[k++] = unit * mult[i];
    if (unit == 1) {
        static const int extra[] = {15, 16, 17, 33, 63, 64, 65, 100, 4127, 4128};
        for (size_t i = 0; i < sizeof extra / sizeof extra[0]; i++) out[k++] = extra[i];
    } else if (unit < 4096) {
        out[k++] = 4096 + unit;
    }
    return k;
}

/* ---- round trip ---- */

static void test_round_trip(int t) {
    const quant_traits *tr = quant_get(t);
    const bound *b = bound_of(t);
    CHECKF(b != NULL, "no bounds for type %s: add it to BOUNDS", tr->name);
    if (!b) return;
    int ns[32];
    const int nn = lengths(tr->blck, ns);
    const int grp = tr->blck > 32 ? tr->blck : 32;
    for (int li = 0; li < nn; li++) {
        const int n = ns[li];
        float *x = xmalloc(sizeof(float) * (size_t)n), *y = xmalloc(sizeof(float) * (size_t)n);
        uint8_t *q = xmalloc(quant_row_size(t, n));
        for (int dist = 0; dist < D_COUNT; dist++) {
            fill(x, n, dist);
            tr->from_f32(x, q, n);
            tr->to_f32(q, y, n);
            double e2 = 0, x2 = 0, worst = 0;
            int finite = 1;
            for (int g = 0; g < n; g += grp) {
                const int m = n - g < grp ? n - g : grp;
                double amax = 0, emax = 0;
                for (int j = g; j < g + m; j++) {
                    if (!isfinite(y[j])) finite = 0;
                    const double e = fabs((double)y[j] - x[j]);
                    if (fabs(x[j]) > amax) amax = fabs(x[j]);
                    if (e > emax) emax = e;
                    e2 += e * e;
                    x2 += (double)x[j] * x[j];
                }
                if (b->grp > 0 || t == QUANT_F32) {
                    const double r = amax > 0 ? emax / amax : emax;
                    if (r > worst) worst = r;
                } else if (amax == 0 && emax > worst) {
                    worst = emax; /* zeros must come back as zeros */
                }
            }
            CHECKF(finite, "%s n=%d %s: non-finite output", tr->name, n, DIST_NAME[dist]);
            CHECKF(worst <= b->grp + 1e-7, "%s n=%d %s: group error %.6g > %.6g", tr->name, n, DIST_NAME[dist], worst,
                   b->grp);
            if (dist == D_GAUSS && n >= 256) {
                const double rel = sqrt(e2 / x2);
                CHECKF(rel <= b->rms, "%s n=%d: rms error %.6g > %.6g", tr->name, n, rel, b->rms);
            }
        }
        free(x);
        free(y);
        free(q);
    }
}

/* ---- dots ---- */

/* The aarch64 dots that keep the reference's float order (neon_dots.h):
 * their results are its floats, bit for bit. */
static int neon_exact(int t) {
#if defined(__aarch64__)
    return t == QUANT_Q8_0 || t == QUANT_Q4_0 || t == QUANT_Q4_K || t == QUANT_Q5_K || t == QUANT_Q6_K ||
           t == QUANT_IQ4_NL || t == QUANT_IQ4_XS;
#else
    (void)t;
    return 0;
#endif
}

static void test_dots(int t) {
    const quant_traits *tr = quant_get(t);
    const quant_traits *ta = quant_get(tr->vec_dot_type);
    const bound *b = bound_of(t);
    CHECKF(ta && ta->from_f32 && ta->to_f32, "%s: activation type %d unusable", tr->name, tr->vec_dot_type);
    if (!ta || !b) return;
    const int unit = tr->blck > ta->blck ? tr->blck : ta->blck;
    int ns[32];
    const int nn = lengths(unit, ns);
    for (int li = 0; li < nn; li++) {
        const int n = ns[li];
        /* one float of offset keeps float rows off 16-byte alignment */
        float *xb = xmalloc(sizeof(float) * (size_t)(n + 1)), *yb = xmalloc(sizeof(float) * (size_t)(n + 1));
        float *x = xb + 1, *y = yb + 1;
        float *xd = xmalloc(sizeof(float) * (size_t)n), *yd = xmalloc(sizeof(float) * (size_t)n);
        uint8_t *wqb = xmalloc(quant_row_size(t, n) + 4), *aqb = xmalloc(quant_row_size(tr->vec_dot_type, n) + 4);
        uint8_t *wq = wqb + 4, *aq = aqb + 4;
        for (int dist = 0; dist < D_COUNT; dist++) {
            fill(x, n, dist);
            fill(y, n, dist == D_ZEROS ? D_GAUSS : dist);
            tr->from_f32(x, wq, n);
            ta->from_f32(y, aq, n);
            tr->to_f32(wq, xd, n);
            ta->to_f32(aq, yd, n);
            double exact = 0, mag = 0;
            for (int i = 0; i < n; i++) {
                exact += (double)xd[i] * yd[i];
                mag += fabs((double)xd[i] * yd[i]);
            }
            double ms = 0;
            if (tr->vec_dot_type == QUANT_Q8_1) {
                for (int g = 0; g < n; g += 32) {
                    double m = xd[g], sy = 0;
                    for (int j = g; j < g + 32; j++) {
                        if (xd[j] < m) m = xd[j];
                        sy += yd[j];
                    }
                    ms += fabs(m * sy);
                }
            }
            float ref = NAN;
            tr->vec_dot_ref(n, &ref, wq, aq);
            CHECKF(fabs(ref - exact) <= b->dot * mag + 0x1p-10 * 1.01 * ms + 1e-30,
                   "%s n=%d %s: ref dot %.9g vs %.9g (mag %.3g)", tr->name, n, DIST_NAME[dist], ref, exact, mag);
            for (int k = 0; k < N_TWINS; k++) {
                quant_vec_dot_fn f = dot_twin(t, k);
                if (!f) continue;
                float got = NAN;
                f(n, &got, wq, aq);
                CHECKF(fabs((double)got - ref) <= SIMD_DOT_TOL * mag + 1e-30,
                       "%s %s n=%d %s: simd dot %.9g vs ref %.9g (mag %.3g)", tr->name, twin_name(k), n,
                       DIST_NAME[dist], got, ref, mag);
                CHECKF(!neon_exact(t) || memcmp(&got, &ref, sizeof got) == 0,
                       "%s %s n=%d %s: NEON dot %.9g is not the reference's %.9g bit for bit", tr->name, twin_name(k),
                       n, DIST_NAME[dist], got, ref);
            }
        }
        free(xb);
        free(yb);
        free(xd);
        free(yd);
        free(wqb);
        free(aqb);
    }
}

/* ---- SIMD quantizers vs reference ---- */

static int is_legacy(int t) {
    return t == QUANT_Q4_0 || t == QUANT_Q4_1 || t == QUANT_Q5_0 || t == QUANT_Q5_1 || t == QUANT_Q8_0 ||
           t == QUANT_Q8_1;
}

static void test_fast_quant(int t) {
    const quant_traits *tr = quant_get(t);
    const bound *b = bound_of(t);
    if (!b) return;
    const int grp = tr->blck > 32 ? tr->blck : 32;
    for (int k = 0; k < N_TWINS; k++) {
        quant_from_f32_fn f = quant_twin(t, k);
        if (!f) continue;
        CHECKF(b->step > 0 || t == QUANT_F16, "%s: SIMD quantizer but no step bound", tr->name);
        int ns[32];
        const int nn = lengths(tr->blck, ns);
        for (int li = 0; li < nn; li++) {
            const int n = ns[li];
            const size_t rs = quant_row_size(t, n);
            float *x = xmalloc(sizeof(float) * (size_t)n);
            float *a = xmalloc(sizeof(float) * (size_t)n), *c = xmalloc(sizeof(float) * (size_t)n);
            uint8_t *qr = xmalloc(rs), *qf = xmalloc(rs);
            for (int dist = 0; dist < D_COUNT; dist++) {
                fill(x, n, dist);
                tr->from_f32(x, qr, n);
                f(x, qf, n);
                /* the legacy and F16 SIMD quantizers are bit-identical to the reference */
                if (is_legacy(t) || t == QUANT_F16)
                    CHECKF(memcmp(qr, qf, rs) == 0, "%s %s n=%d %s: bytes differ from reference", tr->name,
                           twin_name(k), n, DIST_NAME[dist]);
                tr->to_f32(qr, a, n);
                tr->to_f32(qf, c, n);
                double worst = 0;
                for (int g = 0; g < n; g += grp) {
                    double amax = 0, dmax = 0;
                    for (int j = g; j < g + grp && j < n; j++) {
                        if (fabs(x[j]) > amax) amax = fabs(x[j]);
                        if (fabs((double)a[j] - c[j]) > dmax) dmax = fabs((double)a[j] - c[j]);
                    }
                    const double r = amax > 0 ? dmax / amax : dmax;
                    if (r > worst) worst = r;
                }
                CHECKF(worst <= b->step * 1.01, "%s %s n=%d %s: fast quantizer off by %.6g of amax", tr->name,
                       twin_name(k), n, DIST_NAME[dist], worst);
            }
            free(x);
            free(a);
            free(c);
            free(qr);
            free(qf);
        }
    }
}

/* ---- f16 / bf16 ---- */

static uint32_t fbits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}
static float bitsf(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* The hardware as an independent oracle for f32 <-> f16 (round to nearest
 * even): F16C on x86-64 (where the CPU has it), fcvt on aarch64. */
#if defined(__x86_64__)
__attribute__((target("f16c"))) static uint16_t f16c_from(float f) { return _cvtss_sh(f, 0); }
__attribute__((target("f16c"))) static float f16c_to(uint16_t h) { return _cvtsh_ss(h); }
static int hw_f16(void) { return quant_cpu_isa() >= QUANT_ISA_AVX2; }
#elif defined(__aarch64__)
static uint16_t f16c_from(float f) {
    __fp16 v = (__fp16)f;
    uint16_t h;
    memcpy(&h, &v, 2);
    return h;
}
static float f16c_to(uint16_t h) {
    __fp16 v;
    memcpy(&v, &h, 2);
    return (float)v;
}
static int hw_f16(void) { return 1; }
#else
static uint16_t f16c_from(float f) { return quant_f32_to_f16(f); }
static float f16c_to(uint16_t h) { return quant_f16_to_f32(h); }
static int hw_f16(void) { return 0; }
#endif

static void test_f16(void) {
    int bad_rt = 0, bad_nan = 0, bad_mid = 0, bad_hw = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        const float f = quant_f16_to_f32((uint16_t)h);
        const int is_nan = (h & 0x7c00) == 0x7c00 && (h & 0x3ff);
        if (is_nan) {
            const uint16_t back = quant_f32_to_f16(f);
            if (!isnan(f) || (back & 0x7c00) != 0x7c00 || !(back & 0x3ff) || (back ^ h) & 0x8000) bad_nan++;
            continue;
        }
        if (quant_f32_to_f16(f) != h) bad_rt++;
        if (hw_f16() && fbits(f16c_to((uint16_t)h)) != fbits(f)) bad_hw++;
        /* ties between neighbours go to the even code; one f32 ulp either side does not tie */
        const uint32_t mag = h & 0x7fff;
        if (mag >= 0x7c00) continue;
        const double lo = fabs((double)f);
        const double hi = mag == 0x7bff ? 65536.0 : fabs((double)quant_f16_to_f32((uint16_t)(mag + 1)));
        const float mid = (float)((lo + hi) / 2); /* exact: halves have 11 significant bits */
        const float sgn = (h & 0x8000) ? -1.0f : 1.0f;
        const uint16_t even = (uint16_t)((mag & 1) ? mag + 1 : mag) | (uint16_t)(h & 0x8000);
        if (quant_f32_to_f16(sgn * mid) != even) bad_mid++;
        if (quant_f32_to_f16(sgn * nextafterf(mid, 0.0f)) != h) bad_mid++;
        if (quant_f32_to_f16(sgn * nextafterf(mid, INFINITY)) != (uint16_t)((mag + 1) | (h & 0x8000))) bad_mid++;
    }
    CHECKF(bad_rt == 0, "f16 round trip: %d patterns differ", bad_rt);
    CHECKF(bad_nan == 0, "f16 NaN: %d patterns wrong", bad_nan);
    CHECKF(bad_mid == 0, "f16 rounding at midpoints: %d wrong", bad_mid);
    CHECKF(bad_hw == 0, "f16 -> f32 vs F16C: %d differ", bad_hw);
    CHECK(quant_f32_to_f16(INFINITY) == 0x7c00 && quant_f32_to_f16(-INFINITY) == 0xfc00);
    CHECK(quant_f32_to_f16(1e10f) == 0x7c00 && quant_f32_to_f16(65519.99f) == 0x7bff);
    CHECK(quant_f32_to_f16(-0.0f) == 0x8000 && quant_f32_to_f16(1e-10f) == 0 && quant_f32_to_f16(0x1p-25f) == 0);
    CHECK(quant_f32_to_f16(0x1.8p-25f) == 1 && quant_f32_to_f16(0x1p-24f) == 1 && quant_f32_to_f16(1.0f) == 0x3c00);
    CHECK(quant_f32_to_f16(bitsf(1)) == 0); /* f32 subnormal */

    /* random f32 bit patterns (finite) against the hardware conversion */
    if (hw_f16()) {
        int bad = 0;
        for (int i = 0; i < 2000000; i++) {
            uint32_t u = (uint32_t)rnd();
            if ((u & 0x7f800000) == 0x7f800000) continue;
            if (i & 1) u = (u & 0x87ffffffu) | 0x30000000u; /* concentrate near the f16 range */
            if (quant_f32_to_f16(bitsf(u)) != f16c_from(bitsf(u))) bad++;
        }
        CHECKF(bad == 0, "f32 -> f16 vs F16C: %d of 2M differ", bad);
    }
}

static void test_bf16(void) {
    int bad_rt = 0, bad_nan = 0, bad_mid = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        const float f = quant_bf16_to_f32((uint16_t)h);
        if (fbits(f) != h << 16) bad_rt++;
        const int is_nan = (h & 0x7f80) == 0x7f80 && (h & 0x7f);
        if (is_nan) {
            const uint16_t back = quant_f32_to_bf16(f);
            if ((back & 0x7f80) != 0x7f80 || !(back & 0x7f) || (back ^ h) & 0x8000) bad_nan++;
            continue;
        }
        if (quant_f32_to_bf16(f) != h) bad_rt++;
        const uint32_t mag = h & 0x7fff;
        if (mag >= 0x7f80) continue;
        const uint32_t sign = (h & 0x8000) << 16, mid = (mag << 16) | 0x8000;
        const uint16_t even = (uint16_t)(((mag & 1) ? mag + 1 : mag) | (h & 0x8000));
        if (quant_f32_to_bf16(bitsf(sign | mid)) != even) bad_mid++;
        if (quant_f32_to_bf16(bitsf(sign | (mid - 1))) != h) bad_mid++;
        if (quant_f32_to_bf16(bitsf(sign | (mid + 1))) != (uint16_t)((mag + 1) | (h & 0x8000))) bad_mid++;
    }
    CHECKF(bad_rt == 0, "bf16 round trip: %d patterns differ", bad_rt);
    CHECKF(bad_nan == 0, "bf16 NaN: %d patterns wrong", bad_nan);
    CHECKF(bad_mid == 0, "bf16 rounding at midpoints: %d wrong", bad_mid);
    CHECK(quant_f32_to_bf16(bitsf(0x7f800001u)) == 0x7fc0); /* signalling NaN comes back quiet */
    CHECK(quant_f32_to_bf16(INFINITY) == 0x7f80 && quant_f32_to_bf16(-1.0f) == 0xbf80);
}

/* ---- table, names, dispatch ---- */

static void test_table(void) {
    static const struct {
        const char *name;
        int type;
        int blck;
        size_t bsize;
        int vdt;
    } known[] = {
        {"F32", QUANT_F32, 1, 4, QUANT_F32},      {"F16", QUANT_F16, 1, 2, QUANT_F16},
        {"BF16", QUANT_BF16, 1, 2, QUANT_BF16},   {"Q4_0", QUANT_Q4_0, 32, 18, QUANT_Q8_0},
        {"Q4_1", QUANT_Q4_1, 32, 20, QUANT_Q8_1}, {"Q5_0", QUANT_Q5_0, 32, 22, QUANT_Q8_0},
        {"Q5_1", QUANT_Q5_1, 32, 24, QUANT_Q8_1}, {"Q8_0", QUANT_Q8_0, 32, 34, QUANT_Q8_0},
    };
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++) {
        const quant_traits *tr = quant_get(known[i].type);
        CHECKF(tr && strcmp(tr->name, known[i].name) == 0, "type %d name", known[i].type);
        if (!tr) continue;
        CHECK(tr->blck == known[i].blck && tr->bsize == known[i].bsize && tr->vec_dot_type == known[i].vdt);
        CHECK(quant_supported(known[i].type));
        CHECK(quant_from_name(known[i].name) == known[i].type);
        CHECK(quant_row_size(known[i].type, 4096) == (size_t)(4096 / known[i].blck) * known[i].bsize);
    }
    const quant_traits *q81 = quant_get(QUANT_Q8_1);
    CHECK(q81 && q81->blck == 32 && q81->bsize == 36 && q81->to_f32 && q81->from_f32);
    CHECK(quant_from_name("q4_0") == QUANT_Q4_0 && quant_from_name("bf16") == QUANT_BF16);
    CHECK(quant_from_name("Q9_9") == -1 && quant_from_name("") == -1 && quant_from_name(NULL) == -1);
    CHECK(quant_get(-1) == NULL && quant_get(QUANT_TYPE_COUNT) == NULL && quant_get(4) == NULL && !quant_supported(5));
#if defined(__aarch64__)
    CHECK(strcmp(quant_isa_name(QUANT_ISA_SCALAR), "scalar") == 0 &&
          strcmp(quant_isa_name(QUANT_ISA_NEON), "neon") == 0 &&
          strcmp(quant_isa_name(QUANT_ISA_DOTPROD), "dotprod") == 0);
#else
    CHECK(strcmp(quant_isa_name(QUANT_ISA_SCALAR), "scalar") == 0 &&
          strcmp(quant_isa_name(QUANT_ISA_AVX512), "avx512") == 0);
#endif

    /* every level's table: the scalar one holds the reference kernels, the
     * active one is what quant_get hands out, a level the CPU lacks has none */
    CHECK(quant_get_at(QUANT_Q4_0, QUANT_ISA_SCALAR)->vec_dot == quant_get(QUANT_Q4_0)->vec_dot_ref);
    CHECK(quant_get_at(QUANT_Q8_0, QUANT_ISA_SCALAR)->from_f32_fast == quant_get(QUANT_Q8_0)->from_f32);
    const int act = quant_active_isa();
    CHECK(act <= quant_cpu_isa());
    CHECK(quant_get(QUANT_Q4_0) == quant_get_at(QUANT_Q4_0, act));
    for (int isa = QUANT_ISA_AVX2; isa <= quant_cpu_isa(); isa++) {
        /* a level's own kernel is its table's; else the level below's */
        quant_vec_dot_fn own = quant_vec_dot_at(QUANT_Q4_0, isa), below = quant_get_at(QUANT_Q4_0, isa - 1)->vec_dot;
        CHECK(quant_get_at(QUANT_Q4_0, isa)->vec_dot == (own ? own : below));
        quant_from_f32_fn q = quant_from_f32_at(QUANT_F16, isa);
        CHECK(quant_get_at(QUANT_F16, isa)->from_f32_fast == (q ? q : quant_get_at(QUANT_F16, isa - 1)->from_f32_fast));
    }
    CHECK(quant_get_at(QUANT_Q4_0, quant_cpu_isa() + 1) == NULL && quant_get_at(QUANT_Q4_0, -1) == NULL);
    /* KILN_ISA caps the active level (ctest runs this test with it set too) */
    const char *cap = getenv("KILN_ISA");
    if (cap && strcmp(cap, "scalar") == 0) {
        CHECK(act == QUANT_ISA_SCALAR);
        CHECK(quant_get(QUANT_Q4_0)->vec_dot == quant_get(QUANT_Q4_0)->vec_dot_ref);
    } else if (!cap) {
        CHECK(act == quant_cpu_isa());
    }
    CHECK(quant_vec_dot_at(QUANT_Q4_0, QUANT_ISA_SCALAR) == quant_get(QUANT_Q4_0)->vec_dot_ref);
    CHECK(quant_vec_dot_at(QUANT_Q4_0, 7) == NULL && quant_vec_dot_at(4, QUANT_ISA_SCALAR) == NULL);
    printf("cpu isa %s, active %s\n", quant_isa_name(quant_cpu_isa()), quant_isa_name(act));
#if defined(__aarch64__)
    const quant_cpu *c = quant_cpu_get();
    printf("aarch64 features: dotprod %d, i8mm %d, bf16 %d\n", c->dotprod, c->i8mm, c->bf16);
#endif
}

/* ---- block kernels (quant_tile_at) ----
 * Every output of a level's block kernel is that level's vec_dot float and
 * the reference's, bit for bit, over blocks of rows and tokens that are odd
 * and even (the smmla kernels pair rows and tokens) and lengths of 1 to
 * 129 blocks (K-quants: 1 to 7 super-blocks).  On aarch64 the dotprod level has them exactly when the CPU
 * has FEAT_I8MM (qemu -cpu max: yes; cortex-a57: no, and the matmul then
 * takes the vec_dot row by row). */
static void test_tiles(void) {
    static const int types[] = {QUANT_Q8_0, QUANT_Q4_0, QUANT_Q4_K};
    static const int blocks[][2] = {{1, 1}, {2, 2}, {3, 5}, {8, 4}, {17, 2}, {4, 9}, {7, 1}, {1, 6}};
    static const int nblk[] = {1, 2, 3, 7, 129};
    int ran = 0;
    for (int isa = QUANT_ISA_SCALAR; isa <= quant_cpu_isa(); isa++)
        for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
            const int t = types[ti];
            const quant_tile_fn f = quant_tile_at(t, isa);
#if defined(__aarch64__)
            CHECKF((f != NULL) == (isa == QUANT_ISA_DOTPROD && quant_cpu_get()->i8mm), "%s block kernel at %s: %p",
                   quant_get(t)->name, quant_isa_name(isa), (void *)f);
#else
            CHECKF(f == NULL, "%s block kernel at %s", quant_get(t)->name, quant_isa_name(isa));
#endif
            if (!f) continue;
            ran++;
            const quant_traits *tr = quant_get(t), *ta = quant_get(tr->vec_dot_type);
            const quant_vec_dot_fn dot = quant_get_at(t, isa)->vec_dot;
            int bad = 0, total = 0;
            for (size_t k = 0; k < sizeof nblk / sizeof nblk[0]; k++)
                for (size_t b = 0; b < sizeof blocks / sizeof blocks[0]; b++) {
                    if (tr->blck > 32 && nblk[k] > 7) continue;
                    const int n = tr->blck * nblk[k], nr = blocks[b][0], nt = blocks[b][1];
                    const size_t wrow = quant_row_size(t, n) + 2, arow = quant_row_size(tr->vec_dot_type, n) + 6;
                    const int64_t ldy = nr + 3;
                    uint8_t *w = xmalloc(wrow * (size_t)nr), *a = xmalloc(arow * (size_t)nt);
                    float *x = xmalloc(sizeof(float) * (size_t)n);
                    float *y = xmalloc(sizeof(float) * (size_t)(nt * ldy));
                    for (int r = 0; r < nr; r++) {
                        fill(x, n, r % 3 == 2 ? D_OUTLIER : D_GAUSS);
                        tr->from_f32(x, w + (size_t)r * wrow, n);
                    }
                    for (int j = 0; j < nt; j++) {
                        fill(x, n, j % 2 ? D_UNIFORM : D_GAUSS);
                        ta->from_f32(x, a + (size_t)j * arow, n);
                    }
                    for (int i = 0; i < nt * ldy; i++) y[i] = -1.0f;
                    f(n, w, wrow, nr, a, arow, nt, y, ldy);
                    for (int j = 0; j < nt; j++) {
                        for (int r = 0; r < nr; r++) {
                            float d = NAN, ref = NAN;
                            dot(n, &d, w + (size_t)r * wrow, a + (size_t)j * arow);
                            tr->vec_dot_ref(n, &ref, w + (size_t)r * wrow, a + (size_t)j * arow);
                            const float v = y[j * ldy + r];
                            bad += memcmp(&v, &d, sizeof v) != 0 || memcmp(&v, &ref, sizeof v) != 0;
                            total++;
                        }
                        for (int r = nr; r < ldy; r++) bad += y[j * ldy + r] != -1.0f; /* the gaps stay */
                    }
                    free(w);
                    free(a);
                    free(x);
                    free(y);
                }
            CHECKF(bad == 0, "%s block kernel at %s: %d of %d outputs differ from vec_dot", tr->name,
                   quant_isa_name(isa), bad, total);
        }
    printf("block kernels: %d checked\n", ran);
}

int main(void) {
    test_f16();
    test_bf16();
    test_table();
    test_tiles();
    int ntypes = 0;
    for (int t = 0; t < QUANT_TYPE_COUNT; t++) {
        const quant_traits *tr = quant_get(t);
        if (!tr || !tr->to_f32 || !tr->from_f32) continue;
        ntypes++;
        const int before = t_failures;
        test_round_trip(t);
        test_fast_quant(t);
        if (quant_supported(t)) test_dots(t);
        printf("%-7s %s\n", tr->name, t_failures == before ? "ok" : "FAILED");
    }
    CHECK(ntypes >= 9);
    return t_done();
}
