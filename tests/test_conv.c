/*
 * The image kernels (kernels/conv.h): the image GEMM at every level against
 * a plain fmaf chain per output (bit for bit: B as weight rows of F32, F16
 * and BF16, as [k][n] rows, with either bias or none, across chunk, k-block
 * and tile edges); the convolution through it against the direct scalar
 * twin for F32, F16 and BF16 weights, kernel sizes 1, 2 (stride 2) and 3
 * (bit for bit too); every group norm and GELU twin against the scalar
 * one; the 2x upsample.  Results must not depend on the thread count.
 */
#include "testutil.h"

#include "kernels/conv.h"
#include "kernels/ops.h"
#include "quant/quant.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* conv_avx512.c built on emulated intrinsics (tests/CMakeLists.txt, x86-64) */
#if defined(__x86_64__)
void kern_gemm_tile_avx512_emu(int mr, int nr, int kc, const float *a, size_t lda, const float *bp, float *c,
                               size_t ldc);
#endif

static uint64_t rs = 88172645463325252ull;
static float frand(void) {
    rs ^= rs << 13;
    rs ^= rs >> 7;
    rs ^= rs << 17;
    return (float)((double)(rs >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

static void test_conv(int type, int cin, int cout, int h, int w, int k, int stride, int pad, thread_pool *p1,
                      thread_pool *p2) {
    const size_t K = (size_t)cin * (size_t)k * (size_t)k;
    float *wf = malloc((size_t)cout * K * sizeof *wf);
    for (size_t i = 0; i < (size_t)cout * K; i++) wf[i] = frand() * 0.3f;
    void *wq = malloc(quant_row_size(type, (int64_t)K) * (size_t)cout);
    quant_get(type)->from_f32(wf, wq, (int64_t)K * cout);
    float *bias = malloc((size_t)cout * sizeof *bias);
    for (int i = 0; i < cout; i++) bias[i] = frand();
    kern_mat m = {wq, type, (int64_t)K, cout, NULL};
    kern_conv c = {&m, bias, cin, h, w, k, k, stride, pad};
    const int ho = kern_conv_out(h, k, stride, pad), wo = kern_conv_out(w, k, stride, pad);
    const size_t nx = (size_t)cin * h * w, ny = (size_t)cout * ho * wo;
    float *x = malloc(nx * sizeof *x), *y = malloc(ny * sizeof *y), *y2 = malloc(ny * sizeof *y2),
          *yr = malloc(ny * sizeof *yr);
    for (size_t i = 0; i < nx; i++) x[i] = frand();
    void *s = malloc(kern_conv2d_scratch(&c));
    kern_conv2d(p2, &c, x, y, s);
    kern_conv2d(p1, &c, x, y2, s);
    kern_conv2d_ref(&c, x, yr);
    double e = 0, r = 0;
    for (size_t i = 0; i < ny; i++) {
        e = fmax(e, fabs((double)y[i] - yr[i]));
        r = fmax(r, fabs((double)yr[i]));
    }
    /* the same chains in the same order: the same bits */
    CHECKF(!memcmp(y, yr, ny * sizeof *y), "%s conv %dx%d k%d s%d: differs from the direct twin", quant_get(type)->name,
           h, w, k, stride);
    CHECK(!memcmp(y, y2, ny * sizeof *y));
    free(wf);
    free(wq);
    free(bias);
    free(x);
    free(y);
    free(y2);
    free(yr);
    free(s);
}

/* C = init + A B for B of the given kind, every level against one fmaf
 * chain per output, and 1 against 3 threads. */
static void test_gemm(int kind, int btype, int m, int n, int k, int bias, thread_pool *p1, thread_pool *p2) {
    float *a = malloc((size_t)m * k * sizeof *a), *bf = malloc((size_t)n * k * sizeof *bf);
    float *bn = malloc((size_t)n * sizeof *bn), *bm = malloc((size_t)m * sizeof *bm);
    float *ref = malloc((size_t)m * n * sizeof *ref), *c = malloc((size_t)m * (n + 3) * sizeof *c),
          *c2 = malloc((size_t)m * (n + 3) * sizeof *c2);
    for (size_t i = 0; i < (size_t)m * k; i++) a[i] = frand();
    for (size_t i = 0; i < (size_t)n * k; i++) bf[i] = frand();
    for (int i = 0; i < n; i++) bn[i] = frand();
    for (int i = 0; i < m; i++) bm[i] = frand();
    /* B as weight rows [n][k] of btype (rounded there, then widened: the values the kernels see) */
    const size_t rowb = quant_row_size(btype, k);
    uint8_t *wq = malloc(rowb * (size_t)n);
    float *bk = malloc((size_t)k * n * sizeof *bk); /* [k][n] of the same values */
    for (int j = 0; j < n; j++) {
        quant_get(btype)->from_f32(bf + (size_t)j * k, wq + (size_t)j * rowb, k);
        quant_get(btype)->to_f32(wq + (size_t)j * rowb, bf + (size_t)j * k, k);
        for (int t = 0; t < k; t++) bk[(size_t)t * n + j] = bf[(size_t)j * k + t];
    }
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            float s = bias == 1 ? bn[j] : bias == 2 ? bm[i] : 0.0f;
            for (int t = 0; t < k; t++) s = fmaf(a[(size_t)i * k + t], bf[(size_t)j * k + t], s);
            ref[(size_t)i * n + j] = s;
        }
    kern_gemm g = {m,
                   n,
                   k,
                   a,
                   (size_t)k,
                   kind,
                   kind == KERN_GB_ROWS ? (const void *)wq : (const void *)bk,
                   btype,
                   kind == KERN_GB_ROWS ? rowb : (size_t)n,
                   c,
                   (size_t)n + 3,
                   bias == 1 ? bn : NULL,
                   bias == 2 ? bm : NULL};
    for (int isa = QUANT_ISA_SCALAR; isa <= QUANT_ISA_AVX512; isa++) {
        for (size_t i = 0; i < (size_t)m * (n + 3); i++) c[i] = 7.0f;
        if (kern_gemm_run_at(isa == QUANT_ISA_SCALAR ? p1 : p2, &g, isa)) continue;
        int bad = 0;
        for (int i = 0; i < m; i++) {
            bad += memcmp(c + (size_t)i * (n + 3), ref + (size_t)i * n, (size_t)n * sizeof *c) != 0;
            bad += c[(size_t)i * (n + 3) + n] != 7.0f; /* nothing written past n */
        }
        CHECKF(!bad, "gemm level %d kind %d %s %dx%dx%d bias %d: %d rows differ", isa, kind, quant_get(btype)->name, m,
               n, k, bias, bad);
    }
#if defined(__x86_64__)
    if (quant_cpu_isa() >= QUANT_ISA_AVX2) { /* conv_avx512.c's tile on emulated intrinsics */
        for (size_t i = 0; i < (size_t)m * (n + 3); i++) c[i] = 7.0f;
        kern_gemm_run_tile(p2, &g, kern_gemm_tile_avx512_emu);
        int bad = 0;
        for (int i = 0; i < m; i++) {
            bad += memcmp(c + (size_t)i * (n + 3), ref + (size_t)i * n, (size_t)n * sizeof *c) != 0;
            bad += c[(size_t)i * (n + 3) + n] != 7.0f;
        }
        CHECKF(!bad, "gemm avx512 (emulated) kind %d %s %dx%dx%d bias %d: %d rows differ", kind, quant_get(btype)->name,
               m, n, k, bias, bad);
    }
#endif
    g.c = c2;
    kern_gemm_run(p1, &g);
    memcpy(c, c2, (size_t)m * (n + 3) * sizeof *c);
    kern_gemm_run(p2, &g);
    CHECK(!memcmp(c, c2, (size_t)m * (n + 3) * sizeof *c));
    free(a);
    free(bf);
    free(bn);
    free(bm);
    free(ref);
    free(c);
    free(c2);
    free(wq);
    free(bk);
}

static void test_gelu(thread_pool *p) {
    enum { N = 4099 };
    float *x = malloc(N * sizeof *x), *ya = malloc(N * sizeof *ya), *yb = malloc(N * sizeof *yb),
          *yt = malloc(N * sizeof *yt);
    for (int i = 0; i < N; i++) x[i] = -12.0f + 24.0f * (float)i / (N - 1);
    memcpy(ya, x, N * sizeof *x);
    memcpy(yt, x, N * sizeof *x);
    kern_gelu_tanh_at(QUANT_ISA_SCALAR)(ya, N);
    kern_gelu(yt, N); /* the tanh form */
    double e = 0;
    for (int i = 0; i < N; i++) e = fmax(e, fabs((double)ya[i] - yt[i]) / (1 + fabs(yt[i])));
    CHECKF(e < 1e-6, "GELU through exp against the tanh form: %g", e);
    CHECK(ya[0] > -1e-6f && ya[0] <= 0 && ya[N - 1] == x[N - 1]);
    for (int isa = QUANT_ISA_AVX2; isa <= QUANT_ISA_AVX512; isa++) {
        kern_gelu_fn fn = kern_gelu_tanh_at(isa);
        if (!fn) continue;
        memcpy(yb, x, N * sizeof *x);
        fn(yb, N);
        e = 0;
        for (int i = 0; i < N; i++) e = fmax(e, fabs((double)ya[i] - yb[i]) / (1 + fabs(ya[i])));
        CHECKF(e < 1e-6, "GELU twin %d: %g", isa, e);
    }
    float *big = malloc(70000 * sizeof *big), *big2 = malloc(70000 * sizeof *big2);
    for (int i = 0; i < 70000; i++) big[i] = frand() * 6;
    memcpy(big2, big, 70000 * sizeof *big);
    kern_gelu_tanh(p, big, 70000);
    kern_gelu_tanh(NULL, big2, 70000);
    CHECK(!memcmp(big, big2, 70000 * sizeof *big));
    free(x);
    free(ya);
    free(yb);
    free(yt);
    free(big);
    free(big2);
}

static void test_gn(int c, int hw, int groups, int silu, thread_pool *p1, thread_pool *p2) {
    const size_t n = (size_t)c * hw;
    float *x = malloc(n * sizeof *x), *ya = malloc(n * sizeof *ya), *yb = malloc(n * sizeof *yb),
          *w = malloc((size_t)c * sizeof *w), *b = malloc((size_t)c * sizeof *b);
    for (size_t i = 0; i < n; i++) x[i] = frand() * 3 + 1;
    for (int i = 0; i < c; i++) {
        w[i] = 1 + frand() * 0.5f;
        b[i] = frand();
    }
    kern_gn g = {c, hw, groups, 1e-6f, silu, w, b};
    kern_gn_fn ref = kern_groupnorm_at(QUANT_ISA_SCALAR);
    for (int gi = 0; gi < groups; gi++) ref(&g, x, ya, gi);
    /* a hand check of one group: mean 0 and unit variance before the affine map */
    if (!silu) {
        const int cpg = c / groups;
        double s = 0, s2 = 0;
        for (int cc = 0; cc < cpg; cc++)
            for (int i = 0; i < hw; i++) {
                double v = (ya[(size_t)cc * hw + i] - b[cc]) / w[cc];
                s += v;
                s2 += v * v;
            }
        const double m = s / (cpg * hw);
        CHECKF(fabs(m) < 1e-4 && fabs(s2 / (cpg * hw) - m * m - 1) < 1e-3, "group norm statistics %g %g", m, s2);
    }
    for (int isa = QUANT_ISA_AVX2; isa <= QUANT_ISA_AVX512; isa++) {
        kern_gn_fn fn = kern_groupnorm_at(isa);
        if (!fn) continue;
        for (int gi = 0; gi < groups; gi++) fn(&g, x, yb, gi);
        double e = 0;
        for (size_t i = 0; i < n; i++) e = fmax(e, fabs((double)ya[i] - yb[i]) / (1 + fabs(ya[i])));
        CHECKF(e < 2e-6, "group norm twin %d (c %d hw %d silu %d): %g", isa, c, hw, silu, e);
    }
    kern_groupnorm(p2, &g, x, yb);
    kern_groupnorm(p1, &g, x, ya);
    CHECK(!memcmp(ya, yb, n * sizeof *ya));
    /* in place */
    memcpy(yb, x, n * sizeof *x);
    kern_groupnorm(p2, &g, yb, yb);
    CHECK(!memcmp(ya, yb, n * sizeof *ya));
    free(x);
    free(ya);
    free(yb);
    free(w);
    free(b);
}

int main(void) {
    quant_init();
    thread_pool *p1 = thread_pool_new(1), *p2 = thread_pool_new(3);
    for (int t = 0; t < 3; t++) {
        const int type = t == 0 ? QUANT_F32 : t == 1 ? QUANT_F16 : QUANT_BF16;
        test_conv(type, 5, 7, 9, 11, 3, 1, 1, p1, p2);
        test_conv(type, 4, 16, 32, 32, 2, 2, 0, p1, p2);
        test_conv(type, 6, 3, 13, 8, 1, 1, 0, p1, p2);
        test_conv(type, 3, 9, 10, 7, 3, 2, 1, p1, p2);
    }
    /* more channels than a k-block, more output channels than a row block
     * of the local sums, rows wider than a chunk */
    test_conv(QUANT_F16, 40, 270, 9, 80, 3, 1, 1, p1, p2);
    test_conv(QUANT_BF16, 3, 5, 70, 70, 3, 1, 1, p1, p2);
    for (int t = 0; t < 3; t++) {
        const int type = t == 0 ? QUANT_F32 : t == 1 ? QUANT_F16 : QUANT_BF16;
        test_gemm(KERN_GB_ROWS, type, 13, 70, 300, 1, p1, p2);
        test_gemm(KERN_GB_ROWS, type, 6, 16, 8, 0, p1, p2);
    }
    test_gemm(KERN_GB_ROWS, QUANT_F16, 1, 5, 3, 2, p1, p2);
    test_gemm(KERN_GB_ROWS, QUANT_F16, 40, 129, 513, 0, p1, p2);
    test_gemm(KERN_GB_KN, QUANT_F32, 17, 72, 256, 0, p1, p2);
    test_gemm(KERN_GB_KN, QUANT_F32, 7, 3, 600, 2, p1, p2);
    test_gelu(p2);
    test_gn(32, 64, 8, 0, p1, p2);
    test_gn(32, 67, 32, 1, p1, p2);
    test_gn(12, 5, 3, 1, p1, p2);
    test_gn(64, 1024, 32, 1, p1, p2);
    float x[2 * 2 * 3], y[2 * 4 * 6];
    for (int i = 0; i < 12; i++) x[i] = (float)i;
    kern_upsample2x(x, y, 2, 2, 3);
    CHECK(y[0] == 0 && y[1] == 0 && y[2] == 1 && y[6] == 0 && y[7] == 0 && y[12] == 3 && y[24 + 23 - 24] == 5 &&
          y[47 - 24 + 24] == 11);
    thread_pool_free(p1);
    thread_pool_free(p2);
    return t_done();
}
