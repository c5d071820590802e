#include "kernels/conv.h"

#include "kernels/level.h"
#include "quant/quant.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <stdatomic.h>

/* ---- the image GEMM (conv.h) ---- */

/* The scalar twin of the tile: the same chains with fmaf. */
void kern_gemm_tile_ref(int mr, int nr, int kc, const float *a, size_t lda, const float *bp, float *c, size_t ldc) {
    for (int i = 0; i < mr; i++)
        for (int j = 0; j < nr; j++) {
            const float *b = bp + (size_t)(j / 16) * (size_t)kc * 16 + (size_t)(j % 16);
            float s = c[(size_t)i * ldc + (size_t)j];
            for (int k = 0; k < kc; k++) s = fmaf(a[(size_t)i * lda + (size_t)k], b[(size_t)k * 16], s);
            c[(size_t)i * ldc + (size_t)j] = s;
        }
}

static float elem(int type, const void *row, int k) {
    if (type == QUANT_F16) return quant_f16_to_f32(((const uint16_t *)row)[k]);
    if (type == QUANT_BF16) return quant_bf16_to_f32(((const uint16_t *)row)[k]);
    return ((const float *)row)[k];
}

/* ROWS packer, scalar: panel p, k, column j = W[n0 + 16 p + j][k0 + k]. */
void kern_gemm_pack_rows_ref(const kern_gemm *g, int k0, int kc, int n0, int nc, float *panel) {
    for (int p = 0; p * 16 < nc; p++)
        for (int j = 0; j < 16; j++) {
            const int col = n0 + 16 * p + j;
            float *d = panel + (size_t)p * (size_t)kc * 16 + (size_t)j;
            if (16 * p + j >= nc || col >= g->n) {
                for (int k = 0; k < kc; k++) d[(size_t)k * 16] = 0.0f;
                continue;
            }
            const uint8_t *row = (const uint8_t *)g->b + (size_t)col * g->ldb;
            for (int k = 0; k < kc; k++) d[(size_t)k * 16] = elem(g->b_type, row, k0 + k);
        }
}

static void pack_kn(const kern_gemm *g, int k0, int kc, int n0, int nc, float *panel) {
    const float *b = g->b;
    for (int p = 0; p * 16 < nc; p++) {
        const int c0 = n0 + 16 * p, w = g->n - c0 < 16 ? g->n - c0 : 16;
        float *d = panel + (size_t)p * (size_t)kc * 16;
        for (int k = 0; k < kc; k++, d += 16) {
            memcpy(d, b + (size_t)(k0 + k) * g->ldb + (size_t)c0, (size_t)w * sizeof *d);
            for (int j = w; j < 16; j++) d[j] = 0.0f;
        }
    }
}

typedef struct conv_job {
    const kern_conv *c;
    const float *x;
    int ho, wo;
} conv_job;

/* CONV packer: column = output pixel (oy, ox), k = (ci, ky, kx).  When
 * the chunk's pixels lie in one output row at stride 1 they are nc
 * neighbours of one input row for every k, copied to all its panels at
 * once (the input rows of 2^n-apart channel planes would otherwise fight
 * over the same cache sets, panel after panel). */
#define PREFETCH_CH 2 /* channels ahead */

static void pack_conv(const kern_gemm *g, int k0, int kc, int n0, int nc, float *panel) {
    const conv_job *j = g->b;
    const kern_conv *c = j->c;
    const int kk = c->kh * c->kw, np = (nc + 15) / 16;
    const int oy0 = n0 / j->wo, ox0 = n0 % j->wo;
    const int one_row = c->stride == 1 && ox0 + nc <= j->wo;
    int ci = k0 / kk, ky = k0 % kk / c->kw, kx = k0 % c->kw;
    for (int k = 0; k < kc; k++) {
        const float *xc = j->x + (size_t)ci * (size_t)c->h * (size_t)c->w;
        if (one_row) {
            const int iy = oy0 + ky - c->pad, ix = ox0 + kx - c->pad;
            if (ky == 0 && kx == 0 && ci + PREFETCH_CH < c->cin) /* a later channel's rows, a plane away */
                for (int r = 0; r < c->kh; r++) {
                    const int py = iy + r;
                    if (py < 0 || py >= c->h) continue;
                    const float *pr =
                        xc + (size_t)PREFETCH_CH * (size_t)c->h * (size_t)c->w + (size_t)py * (size_t)c->w;
                    const int x0 = ix < 0 ? 0 : ix, x1 = ix + nc + c->kw - 1 < c->w ? ix + nc + c->kw - 1 : c->w;
                    for (int x = x0; x < x1; x += 16) __builtin_prefetch(pr + x);
                    __builtin_prefetch(pr + x1 - 1);
                }
            const float *src = xc + (size_t)(iy < 0 ? 0 : iy) * (size_t)c->w;
            for (int p = 0; p < np; p++) {
                float *d = panel + ((size_t)p * (size_t)kc + (size_t)k) * 16;
                const int x0 = ix + 16 * p, w = nc - 16 * p < 16 ? nc - 16 * p : 16;
                if (iy < 0 || iy >= c->h)
                    memset(d, 0, 16 * sizeof *d);
                else if (w == 16 && x0 >= 0 && x0 + 16 <= c->w)
                    memcpy(d, src + x0, 16 * sizeof *d);
                else { /* the image's edge (padding) or the chunk's end: the valid run, zeros around */
                    const int lo = x0 < 0 ? -x0 : 0, hi = c->w - x0 < w ? c->w - x0 : w;
                    memset(d, 0, 16 * sizeof *d);
                    if (hi > lo) memcpy(d + lo, src + x0 + lo, (size_t)(hi - lo) * sizeof *d);
                }
            }
        } else {
            for (int p = 0; p < np; p++) {
                float *d = panel + ((size_t)p * (size_t)kc + (size_t)k) * 16;
                const int q0 = n0 + 16 * p;
                int oy = q0 / j->wo, ox = q0 % j->wo;
                for (int t = 0; t < 16; t++) {
                    const int iy = oy * c->stride + ky - c->pad, ix = ox * c->stride + kx - c->pad;
                    d[t] = 16 * p + t < nc && iy >= 0 && iy < c->h && ix >= 0 && ix < c->w
                               ? xc[(size_t)iy * (size_t)c->w + (size_t)ix]
                               : 0.0f;
                    if (++ox == j->wo) {
                        ox = 0;
                        oy++;
                    }
                }
            }
        }
        if (++kx == c->kw) {
            kx = 0;
            if (++ky == c->kh) {
                ky = 0;
                ci++;
            }
        }
    }
}

typedef struct gemm_job {
    const kern_gemm *g;
    kern_gemm_tile_fn tile;
    kern_gemm_pack_fn pack;
    int n_chunks, m_split, m_block;
    atomic_long next;
} gemm_job;

/* Rows of a block whose C goes through a local buffer: a convolution's
 * output rows are channel planes 2^n floats apart, which would share a few
 * cache sets; the block's sums stay in the buffer (L2) until its last
 * k-block. */
#define LOCAL_ROWS 264 /* 44 tiles of 6 */

/* Item it = (column chunk, row block): init, then per k-block pack and
 * sweep the rows. */
static void gemm_item(const gemm_job *j, long it, float *panel, float *local) {
    const kern_gemm *g = j->g;
    const int n0 = (int)(it / j->m_split) * KERN_GEMM_NC, nc = g->n - n0 < KERN_GEMM_NC ? g->n - n0 : KERN_GEMM_NC;
    const int m0 = (int)(it % j->m_split) * j->m_block;
    const int m1 = m0 + j->m_block < g->m ? m0 + j->m_block : g->m;
    const int use_local = g->b_kind == KERN_GB_CONV;
    float *c = use_local ? local : g->c + (size_t)m0 * g->ldc + (size_t)n0;
    const size_t ldc = use_local ? KERN_GEMM_NC : g->ldc;
    for (int i = m0; i < m1; i++) {
        float *ci = c + (size_t)(i - m0) * ldc;
        if (g->bias_n)
            memcpy(ci, g->bias_n + n0, (size_t)nc * sizeof *ci);
        else
            for (int t = 0; t < nc; t++) ci[t] = g->bias_m ? g->bias_m[i] : 0.0f;
    }
    for (int k0 = 0; k0 < g->k; k0 += KERN_GEMM_KC) {
        const int kc = g->k - k0 < KERN_GEMM_KC ? g->k - k0 : KERN_GEMM_KC;
        j->pack(g, k0, kc, n0, nc, panel);
        for (int i = m0; i < m1; i += KERN_GEMM_MR) {
            const int mr = m1 - i < KERN_GEMM_MR ? m1 - i : KERN_GEMM_MR;
            const float *a = g->a + (size_t)i * g->lda + (size_t)k0;
            j->tile(mr, nc, kc, a, g->lda, panel, c + (size_t)(i - m0) * ldc, ldc);
        }
    }
    if (use_local)
        for (int i = m0; i < m1; i++)
            memcpy(g->c + (size_t)i * g->ldc + (size_t)n0, local + (size_t)(i - m0) * KERN_GEMM_NC,
                   (size_t)nc * sizeof *local);
}

static void gemm_task(void *ud, int ith, int nth) {
    (void)ith;
    (void)nth;
    gemm_job *j = ud;
    _Alignas(64) float panel[KERN_GEMM_KC * KERN_GEMM_NC];
    _Alignas(64) float local[LOCAL_ROWS * KERN_GEMM_NC];
    const long n_items = (long)j->n_chunks * j->m_split;
    for (long it; (it = atomic_fetch_add_explicit(&j->next, 1, memory_order_relaxed)) < n_items;)
        gemm_item(j, it, panel, local);
}

static void gemm_go(thread_pool *pool, const kern_gemm *g, kern_gemm_tile_fn tile, kern_gemm_pack_fn rows) {
    if (g->m <= 0 || g->n <= 0) return;
    gemm_job j;
    memset(&j, 0, sizeof j);
    j.g = g;
    j.tile = tile;
    j.pack = g->b_kind == KERN_GB_ROWS ? rows : g->b_kind == KERN_GB_KN ? pack_kn : pack_conv;
    j.m_split = 1;
    j.m_block = g->m;
    atomic_init(&j.next, 0);
    j.n_chunks = (g->n + KERN_GEMM_NC - 1) / KERN_GEMM_NC;
    const int nth = pool ? thread_pool_size(pool) : 1;
    /* too few chunks to share: the rows split too (in whole tiles), each
     * block packing its own panels */
    const int tiles = (g->m + KERN_GEMM_MR - 1) / KERN_GEMM_MR;
    int want = nth > 1 && j.n_chunks < 4 * nth ? (4 * nth + j.n_chunks - 1) / j.n_chunks : 1;
    if (g->b_kind == KERN_GB_CONV && want < (g->m + LOCAL_ROWS - 1) / LOCAL_ROWS)
        want = (g->m + LOCAL_ROWS - 1) / LOCAL_ROWS;
    if (want > tiles) want = tiles;
    j.m_block = (tiles + want - 1) / want * KERN_GEMM_MR;
    if (g->b_kind == KERN_GB_CONV && j.m_block > LOCAL_ROWS) j.m_block = LOCAL_ROWS / KERN_GEMM_MR * KERN_GEMM_MR;
    j.m_split = (g->m + j.m_block - 1) / j.m_block;
    if (pool && nth > 1 && (long)j.n_chunks * j.m_split > 1)
        thread_pool_run_shared(pool, gemm_task, &j);
    else
        gemm_task(&j, 0, 1);
}

int kern_gemm_run_at(thread_pool *pool, const kern_gemm *g, int isa) {
    const kern_level *l = kern_level_at(isa);
    if (!l) return -1;
    gemm_go(pool, g, l->gemm_tile, l->gemm_pack_rows);
    return 0;
}

void kern_gemm_run_tile(thread_pool *pool, const kern_gemm *g, kern_gemm_tile_fn tile) {
    gemm_go(pool, g, tile, kern_gemm_pack_rows_ref);
}

void kern_gemm_run(thread_pool *pool, const kern_gemm *g) {
    const kern_level *l = kern_level_best();
    gemm_go(pool, g, l->gemm_tile, l->gemm_pack_rows);
}

/* ---- convolution ---- */

static void *align64(void *p) { return (void *)(((uintptr_t)p + 63) & ~(uintptr_t)63); }

size_t kern_conv2d_scratch(const kern_conv *c) {
    const size_t k = (size_t)c->cin * (size_t)c->kh * (size_t)c->kw;
    return c->wt->type == QUANT_F32 ? 64 : (size_t)c->wt->nrows * k * sizeof(float) + 64;
}

typedef struct widen_job {
    const kern_mat *w;
    float *out;
} widen_job;

static void widen_task(void *ud, int ith, int nth) {
    const widen_job *j = ud;
    long lo, hi;
    thread_pool_range((long)j->w->nrows, ith, nth, &lo, &hi);
    for (long r = lo; r < hi; r++) kern_get_row(j->w, r, j->out + (size_t)r * (size_t)j->w->ncols);
}

void kern_conv2d(thread_pool *pool, const kern_conv *c, const float *x, float *y, void *scratch) {
    const int ho = kern_conv_out(c->h, c->kh, c->stride, c->pad), wo = kern_conv_out(c->w, c->kw, c->stride, c->pad);
    const float *a = c->wt->data;
    if (c->wt->type != QUANT_F32) {
        widen_job w = {c->wt, align64(scratch)};
        thread_pool_run(pool, widen_task, &w);
        a = w.out;
    }
    const conv_job j = {c, x, ho, wo};
    const kern_gemm g = {(int)c->wt->nrows,
                         ho * wo,
                         (int)c->wt->ncols,
                         a,
                         (size_t)c->wt->ncols,
                         KERN_GB_CONV,
                         &j,
                         QUANT_F32,
                         0,
                         y,
                         (size_t)ho * (size_t)wo,
                         NULL,
                         c->bias};
    kern_gemm_run(pool, &g);
}

void kern_conv2d_ref(const kern_conv *c, const float *x, float *y) {
    const int ho = kern_conv_out(c->h, c->kh, c->stride, c->pad), wo = kern_conv_out(c->w, c->kw, c->stride, c->pad);
    const size_t k = (size_t)c->cin * (size_t)c->kh * (size_t)c->kw;
    float *wr = malloc(k * sizeof *wr);
    if (!wr) return;
    for (int64_t co = 0; co < c->wt->nrows; co++) {
        kern_get_row(c->wt, co, wr);
        for (int oy = 0; oy < ho; oy++)
            for (int ox = 0; ox < wo; ox++) {
                float s = c->bias ? c->bias[co] : 0.0f;
                for (int ci = 0; ci < c->cin; ci++)
                    for (int ky = 0; ky < c->kh; ky++)
                        for (int kx = 0; kx < c->kw; kx++) {
                            const int iy = oy * c->stride + ky - c->pad, ix = ox * c->stride + kx - c->pad;
                            const float v =
                                iy < 0 || iy >= c->h || ix < 0 || ix >= c->w
                                    ? 0.0f
                                    : x[((size_t)ci * (size_t)c->h + (size_t)iy) * (size_t)c->w + (size_t)ix];
                            s = fmaf(wr[((size_t)ci * (size_t)c->kh + (size_t)ky) * (size_t)c->kw + (size_t)kx], v, s);
                        }
                y[((size_t)co * (size_t)ho + (size_t)oy) * (size_t)wo + (size_t)ox] = s;
            }
    }
    free(wr);
}

void kern_groupnorm_ref(const kern_gn *g, const float *x, float *y, int grp) {
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

kern_gn_fn kern_groupnorm_at(int isa) {
    const kern_level *l = kern_level_at(isa);
    return l ? l->groupnorm : NULL;
}

typedef struct gn_job {
    const kern_gn *g;
    const float *x;
    float *y;
    kern_gn_fn fn;
} gn_job;

static void gn_task(void *ud, int ith, int nth) {
    const gn_job *j = ud;
    long lo, hi;
    thread_pool_range(j->g->groups, ith, nth, &lo, &hi);
    for (long grp = lo; grp < hi; grp++) j->fn(j->g, j->x, j->y, (int)grp);
}

void kern_groupnorm(thread_pool *pool, const kern_gn *g, const float *x, float *y) {
    gn_job j = {g, x, y, kern_level_best()->groupnorm};
    thread_pool_run(pool, gn_task, &j);
}

void kern_gelu_tanh_ref(float *x, size_t n) {
    const float c = -2.0f * 0.7978845608028654f; /* -2 sqrt(2/pi) */
    for (size_t i = 0; i < n; i++) {
        const float v = x[i];
        x[i] = v / (1.0f + expf(c * (v + 0.044715f * v * v * v)));
    }
}

kern_gelu_fn kern_gelu_tanh_at(int isa) {
    const kern_level *l = kern_level_at(isa);
    return l ? l->gelu_tanh : NULL;
}

typedef struct gelu_job {
    float *x;
    size_t n;
    kern_gelu_fn fn;
} gelu_job;

static void gelu_task(void *ud, int ith, int nth) {
    const gelu_job *j = ud;
    long lo, hi;
    const long blocks = (long)((j->n + 1023) / 1024);
    thread_pool_range(blocks, ith, nth, &lo, &hi);
    const size_t a = (size_t)lo * 1024, b = (size_t)hi * 1024 < j->n ? (size_t)hi * 1024 : j->n;
    if (a < b) j->fn(j->x + a, b - a);
}

void kern_gelu_tanh(thread_pool *pool, float *x, size_t n) {
    gelu_job j = {x, n, kern_level_best()->gelu_tanh};
    if (pool && n >= 16384)
        thread_pool_run(pool, gelu_task, &j);
    else
        j.fn(x, n);
}

void kern_upsample2x(const float *x, float *y, int c, int h, int w) {
    for (int ch = 0; ch < c; ch++)
        for (int iy = 0; iy < h; iy++) {
            const float *src = x + ((size_t)ch * (size_t)h + (size_t)iy) * (size_t)w;
            float *d0 = y + ((size_t)ch * 2 * (size_t)h + 2 * (size_t)iy) * 2 * (size_t)w;
            for (int ix = 0; ix < w; ix++) d0[2 * ix] = d0[2 * ix + 1] = src[ix];
            memcpy(d0 + 2 * (size_t)w, d0, 2 * (size_t)w * sizeof *d0);
        }
}
