#include "kernels/conv.h"

#include "kernels/level.h"
#include "quant/quant.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Patch floats gathered per band: about 8 MiB, so a band's patches stay
 * within the last-level cache's reach while the weight rows pass. */
#define BAND_FLOATS ((size_t)1 << 21)

static int band_rows(const kk_conv *c, int ho, int wo) {
    const size_t k = (size_t)c->cin * (size_t)c->kh * (size_t)c->kw;
    size_t rows = BAND_FLOATS / (k * (size_t)wo);
    if (rows < 1) rows = 1;
    return rows > (size_t)ho ? ho : (int)rows;
}

size_t kk_conv2d_scratch(const kk_conv *c) {
    const int ho = kk_conv_out(c->h, c->kh, c->stride, c->pad), wo = kk_conv_out(c->w, c->kw, c->stride, c->pad);
    const size_t k = (size_t)c->cin * (size_t)c->kh * (size_t)c->kw;
    const size_t px = (size_t)band_rows(c, ho, wo) * (size_t)wo;
    return px * k * 4 + px * (size_t)c->wt->nrows * 4 + kk_matmul_scratch_size((int64_t)k, (int)px) + 3 * 64;
}

typedef struct conv_job {
    const kk_conv *c;
    const float *x;
    float *patch, *prod, *y;
    int oy0, n_px, wo, ho;
    size_t k;
} conv_job;

/* Patch rows of pixels [lo, hi) of the band: element (ci, ky, kx). */
static void im2col_task(void *ud, int ith, int nth) {
    const conv_job *j = ud;
    const kk_conv *c = j->c;
    long lo, hi;
    kpool_range(j->n_px, ith, nth, &lo, &hi);
    for (long p = lo; p < hi; p++) {
        const int oy = j->oy0 + (int)(p / j->wo), ox = (int)(p % j->wo);
        float *row = j->patch + (size_t)p * j->k;
        for (int ci = 0; ci < c->cin; ci++) {
            const float *xc = j->x + (size_t)ci * (size_t)c->h * (size_t)c->w;
            for (int ky = 0; ky < c->kh; ky++) {
                const int iy = oy * c->stride + ky - c->pad;
                for (int kx = 0; kx < c->kw; kx++) {
                    const int ix = ox * c->stride + kx - c->pad;
                    *row++ = iy >= 0 && iy < c->h && ix >= 0 && ix < c->w ? xc[(size_t)iy * (size_t)c->w + (size_t)ix]
                                                                          : 0.0f;
                }
            }
        }
    }
}

/* The band's products [pixel][cout] back to y [cout][ho * wo], plus bias. */
static void scatter_task(void *ud, int ith, int nth) {
    const conv_job *j = ud;
    const long cout = (long)j->c->wt->nrows;
    long lo, hi;
    kpool_range(cout, ith, nth, &lo, &hi);
    const size_t plane = (size_t)j->ho * (size_t)j->wo, base = (size_t)j->oy0 * (size_t)j->wo;
    for (long co = lo; co < hi; co++) {
        const float b = j->c->bias ? j->c->bias[co] : 0.0f;
        float *dst = j->y + (size_t)co * plane + base;
        for (int p = 0; p < j->n_px; p++) dst[p] = j->prod[(size_t)p * (size_t)cout + (size_t)co] + b;
    }
}

static void *align64(void *p) { return (void *)(((uintptr_t)p + 63) & ~(uintptr_t)63); }

void kk_conv2d(kpool *pool, const kk_conv *c, const float *x, float *y, void *scratch) {
    const int ho = kk_conv_out(c->h, c->kh, c->stride, c->pad), wo = kk_conv_out(c->w, c->kw, c->stride, c->pad);
    const int rows = band_rows(c, ho, wo);
    conv_job j = {c, x, NULL, NULL, y, 0, 0, wo, ho, (size_t)c->cin * (size_t)c->kh * (size_t)c->kw};
    const size_t max_px = (size_t)rows * (size_t)wo;
    j.patch = align64(scratch);
    j.prod = align64(j.patch + max_px * j.k);
    void *mm = align64(j.prod + max_px * (size_t)c->wt->nrows);
    for (int oy = 0; oy < ho; oy += rows) {
        j.oy0 = oy;
        j.n_px = (oy + rows <= ho ? rows : ho - oy) * wo;
        kpool_run(pool, im2col_task, &j);
        kk_matmul(pool, c->wt, j.patch, j.n_px, j.prod, c->wt->nrows, mm);
        kpool_run(pool, scatter_task, &j);
    }
}

void kk_conv2d_ref(const kk_conv *c, const float *x, float *y) {
    const int ho = kk_conv_out(c->h, c->kh, c->stride, c->pad), wo = kk_conv_out(c->w, c->kw, c->stride, c->pad);
    const size_t k = (size_t)c->cin * (size_t)c->kh * (size_t)c->kw;
    float *wr = malloc(k * sizeof *wr);
    if (!wr) return;
    for (int64_t co = 0; co < c->wt->nrows; co++) {
        kk_get_row(c->wt, co, wr);
        for (int oy = 0; oy < ho; oy++)
            for (int ox = 0; ox < wo; ox++) {
                float s = 0.0f;
                for (int ci = 0; ci < c->cin; ci++)
                    for (int ky = 0; ky < c->kh; ky++)
                        for (int kx = 0; kx < c->kw; kx++) {
                            const int iy = oy * c->stride + ky - c->pad, ix = ox * c->stride + kx - c->pad;
                            if (iy < 0 || iy >= c->h || ix < 0 || ix >= c->w) continue;
                            s += wr[((size_t)ci * (size_t)c->kh + (size_t)ky) * (size_t)c->kw + (size_t)kx] *
                                 x[((size_t)ci * (size_t)c->h + (size_t)iy) * (size_t)c->w + (size_t)ix];
                        }
                y[((size_t)co * (size_t)ho + (size_t)oy) * (size_t)wo + (size_t)ox] =
                    s + (c->bias ? c->bias[co] : 0.0f);
            }
    }
    free(wr);
}

void kk_groupnorm_ref(const kk_gn *g, const float *x, float *y, int grp) {
    const int cpg = g->c / g->groups;
    const size_t n = (size_t)cpg * (size_t)g->hw, off = (size_t)grp * n;
    const float *xs = x + off;
    double s = 0.0;
    for (size_t i = 0; i < n; i++) s += xs[i];
    const double mean = s / (double)n;
    double v = 0.0;
    for (size_t i = 0; i < n; i++) {
        const double d = xs[i] - mean;
        v += d * d;
    }
    const float inv = (float)(1.0 / sqrt(v / (double)n + g->eps)), m = (float)mean;
    for (int cc = 0; cc < cpg; cc++) {
        const int ch = grp * cpg + cc;
        const float a = g->w ? g->w[ch] * inv : inv;
        const float b = (g->b ? g->b[ch] : 0.0f) - m * a;
        const float *xc = xs + (size_t)cc * (size_t)g->hw;
        float *yc = y + off + (size_t)cc * (size_t)g->hw;
        for (int i = 0; i < g->hw; i++) {
            float t = xc[i] * a + b;
            yc[i] = g->silu ? t / (1.0f + expf(-t)) : t;
        }
    }
}

kk_gn_fn kk_groupnorm_at(int isa) {
    const kk_level *l = kk_level_at(isa);
    return l ? l->groupnorm : NULL;
}

typedef struct gn_job {
    const kk_gn *g;
    const float *x;
    float *y;
    kk_gn_fn fn;
} gn_job;

static void gn_task(void *ud, int ith, int nth) {
    const gn_job *j = ud;
    long lo, hi;
    kpool_range(j->g->groups, ith, nth, &lo, &hi);
    for (long grp = lo; grp < hi; grp++) j->fn(j->g, j->x, j->y, (int)grp);
}

void kk_groupnorm(kpool *pool, const kk_gn *g, const float *x, float *y) {
    gn_job j = {g, x, y, kk_level_best()->groupnorm};
    kpool_run(pool, gn_task, &j);
}

void kk_upsample2x(const float *x, float *y, int c, int h, int w) {
    for (int ch = 0; ch < c; ch++)
        for (int iy = 0; iy < h; iy++) {
            const float *src = x + ((size_t)ch * (size_t)h + (size_t)iy) * (size_t)w;
            float *d0 = y + ((size_t)ch * 2 * (size_t)h + 2 * (size_t)iy) * 2 * (size_t)w;
            for (int ix = 0; ix < w; ix++) d0[2 * ix] = d0[2 * ix + 1] = src[ix];
            memcpy(d0 + 2 * (size_t)w, d0, 2 * (size_t)w * sizeof *d0);
        }
}
