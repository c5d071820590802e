/*
 * The image kernels (kernels/conv.h): the im2col + matmul convolution
 * against the direct scalar twin for F32, F16 and BF16 weights, kernel
 * sizes 1, 2 (stride 2) and 3, bands smaller than the image; every group
 * norm twin against the scalar one, with and without SiLU; the 2x
 * upsample.  Results must not depend on the thread count.
 */
#include "testutil.h"

#include "kernels/conv.h"
#include "quant/quant.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rs = 88172645463325252ull;
static float frand(void) {
    rs ^= rs << 13;
    rs ^= rs >> 7;
    rs ^= rs << 17;
    return (float)((double)(rs >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

static void test_conv(int type, int cin, int cout, int h, int w, int k, int stride, int pad, kpool *p1, kpool *p2) {
    const size_t K = (size_t)cin * (size_t)k * (size_t)k;
    float *wf = malloc((size_t)cout * K * sizeof *wf);
    for (size_t i = 0; i < (size_t)cout * K; i++) wf[i] = frand() * 0.3f;
    void *wq = malloc(kq_row_size(type, (int64_t)K) * (size_t)cout);
    kq_get(type)->from_f32(wf, wq, (int64_t)K * cout);
    float *bias = malloc((size_t)cout * sizeof *bias);
    for (int i = 0; i < cout; i++) bias[i] = frand();
    kk_mat m = {wq, type, (int64_t)K, cout, NULL};
    kk_conv c = {&m, bias, cin, h, w, k, k, stride, pad};
    const int ho = kk_conv_out(h, k, stride, pad), wo = kk_conv_out(w, k, stride, pad);
    const size_t nx = (size_t)cin * h * w, ny = (size_t)cout * ho * wo;
    float *x = malloc(nx * sizeof *x), *y = malloc(ny * sizeof *y), *y2 = malloc(ny * sizeof *y2),
          *yr = malloc(ny * sizeof *yr);
    for (size_t i = 0; i < nx; i++) x[i] = frand();
    void *s = malloc(kk_conv2d_scratch(&c));
    kk_conv2d(p2, &c, x, y, s);
    kk_conv2d(p1, &c, x, y2, s);
    kk_conv2d_ref(&c, x, yr);
    double e = 0, r = 0;
    for (size_t i = 0; i < ny; i++) {
        e = fmax(e, fabs((double)y[i] - yr[i]));
        r = fmax(r, fabs((double)yr[i]));
    }
    /* F16/BF16 weights: the fast path rounds the activations to the weight's type */
    const double tol = type == KQ_F32 ? 1e-5 : type == KQ_F16 ? 4e-3 : 3e-2;
    CHECKF(e <= tol * (1 + r), "%s conv %dx%d k%d s%d: max error %g (values up to %g)", kq_get(type)->name, h, w, k,
           stride, e, r);
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

static void test_gn(int c, int hw, int groups, int silu, kpool *p1, kpool *p2) {
    const size_t n = (size_t)c * hw;
    float *x = malloc(n * sizeof *x), *ya = malloc(n * sizeof *ya), *yb = malloc(n * sizeof *yb),
          *w = malloc((size_t)c * sizeof *w), *b = malloc((size_t)c * sizeof *b);
    for (size_t i = 0; i < n; i++) x[i] = frand() * 3 + 1;
    for (int i = 0; i < c; i++) {
        w[i] = 1 + frand() * 0.5f;
        b[i] = frand();
    }
    kk_gn g = {c, hw, groups, 1e-6f, silu, w, b};
    kk_gn_fn ref = kk_groupnorm_at(KQ_ISA_SCALAR);
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
    for (int isa = KQ_ISA_AVX2; isa <= KQ_ISA_AVX512; isa++) {
        kk_gn_fn fn = kk_groupnorm_at(isa);
        if (!fn) continue;
        for (int gi = 0; gi < groups; gi++) fn(&g, x, yb, gi);
        double e = 0;
        for (size_t i = 0; i < n; i++) e = fmax(e, fabs((double)ya[i] - yb[i]) / (1 + fabs(ya[i])));
        CHECKF(e < 2e-6, "group norm twin %d (c %d hw %d silu %d): %g", isa, c, hw, silu, e);
    }
    kk_groupnorm(p2, &g, x, yb);
    kk_groupnorm(p1, &g, x, ya);
    CHECK(!memcmp(ya, yb, n * sizeof *ya));
    /* in place */
    memcpy(yb, x, n * sizeof *x);
    kk_groupnorm(p2, &g, yb, yb);
    CHECK(!memcmp(ya, yb, n * sizeof *ya));
    free(x);
    free(ya);
    free(yb);
    free(w);
    free(b);
}

int main(void) {
    kq_init();
    kpool *p1 = kpool_new(1), *p2 = kpool_new(3);
    for (int t = 0; t < 3; t++) {
        const int type = t == 0 ? KQ_F32 : t == 1 ? KQ_F16 : KQ_BF16;
        test_conv(type, 5, 7, 9, 11, 3, 1, 1, p1, p2);
        test_conv(type, 4, 16, 32, 32, 2, 2, 0, p1, p2);
        test_conv(type, 6, 3, 13, 8, 1, 1, 0, p1, p2);
        test_conv(type, 3, 9, 10, 7, 3, 2, 1, p1, p2);
    }
    /* wide enough that a band holds only some rows of the image */
    test_conv(KQ_F16, 64, 8, 160, 160, 3, 1, 1, p1, p2);
    test_gn(32, 64, 8, 0, p1, p2);
    test_gn(32, 67, 32, 1, p1, p2);
    test_gn(12, 5, 3, 1, p1, p2);
    test_gn(64, 1024, 32, 1, p1, p2);
    float x[2 * 2 * 3], y[2 * 4 * 6];
    for (int i = 0; i < 12; i++) x[i] = (float)i;
    kk_upsample2x(x, y, 2, 2, 3);
    CHECK(y[0] == 0 && y[1] == 0 && y[2] == 1 && y[6] == 0 && y[7] == 0 && y[12] == 3 && y[24 + 23 - 24] == 5 &&
          y[47 - 24 + 24] == 11);
    kpool_free(p1);
    kpool_free(p2);
    return t_done();
}
