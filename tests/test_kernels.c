/*
 * test_kernels — the SIMD twins in src/kernels against their scalar
 * references: the attention and element-wise ops (kern_ops_at), the F16
 * block kernels (kern_tile_at: bit for bit with quant_dot_f16_lanes and the
 * vec_dot of their level), and kern_matmul / kern_matmul_multi on a thread
 * pool (blocks plus leftover rows and tokens) against plain reference dots,
 * and the 8-row interleaved kernels (kern_x8_at) with their packing; the
 * Gated DeltaNet kernels (kern_ssm_ops_at: the convolution, the recurrent and
 * chunked delta rule) and mixture-of-experts routing.
 * F16 rounding steps (scale, mad, conversions) and RoPE must agree bit for
 * bit; sums may differ only by their order.
 */
#include "kernels/matmul.h"
#include "kernels/pack.h"
#include "kernels/ops.h"
#include "kernels/ssm.h"
#include "quant/quant.h"
#include "thread/pool.h"
#include "testutil.h"
#include "twins.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rng = 0x2545F4914F6CDD1Dull;

static float frand(void) { /* uniform in [-1, 1) */
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (float)((double)(rng >> 11) * 0x1p-52 - 1.0);
}

static void fill(float *x, int n, float scale) {
    for (int i = 0; i < n; i++) x[i] = scale * frand();
}

static int rel_close(double a, double b, double tol) { return fabs(a - b) <= tol * (fabs(a) + fabs(b) + 1e-30); }

#define N 131 /* not a multiple of 8 or 16: exercises the tails */

static void test_ops(const kern_ops *s, const kern_ops *v) {
    float q[N], qr[N], qs[N], x[N], w[N], o1[N], o2[N];
    uint16_t y1[N], y2[N];
    fill(q, N, 3.0f);
    fill(w, N, 1.0f);
    /* conversions: exact, including values near F16 limits and subnormals */
    q[0] = 70000.0f;
    q[1] = -65519.0f;
    q[2] = 3e-6f;
    q[3] = -6.1e-5f;
    s->round_f16_row(q, qs, N);
    v->round_f16_row(q, qr, N);
    CHECK(memcmp(qs, qr, sizeof qs) == 0);
    s->f32_to_f16_row(q, y1, N);
    v->f32_to_f16_row(q, y2, N);
    CHECK(memcmp(y1, y2, sizeof y1) == 0);
    /* the F16 dot, the accumulator steps and the softmax weights are checked
     * through attn_f16 (test_attn), the one kernel that uses them; the
     * weights' e^x is within 2 ulp of expf over the range a softmax gives it
     * (x <= 0), and e^0 is 1 */
    {
        float worst = 0.0f;
        for (int i = 0; i <= 200000; i++) {
            const float xv = -87.0f * (float)i / 200000.0f, e = expf(xv);
            const float ulp = nextafterf(e, INFINITY) - e, d = fabsf(kern_exp_attn(xv) - e) / ulp;
            worst = d > worst ? d : worst;
        }
        CHECKF(worst <= 2.0f, "kern_exp_attn: %.1f ulp from expf", worst);
        CHECK(kern_exp_attn(0.0f) == 1.0f);
    }
    /* norms, activation, residual add */
    fill(x, N, 2.0f);
    s->rmsnorm(o1, x, w, N, 1e-6f);
    v->rmsnorm(o2, x, w, N, 1e-6f);
    int bad = 0;
    for (int i = 0; i < N; i++) bad += !rel_close(o1[i], o2[i], 1e-6);
    CHECKF(bad == 0, "rmsnorm: %d elements differ", bad);
    s->rmsnorm(o1, x, NULL, N, 1e-6f);
    v->rmsnorm(o2, x, NULL, N, 1e-6f);
    bad = 0;
    for (int i = 0; i < N; i++) bad += !rel_close(o1[i], o2[i], 1e-6);
    CHECKF(bad == 0, "rmsnorm without weight: %d elements differ", bad);
    fill(o1, N, 12.0f);
    o1[0] = 100.0f;
    o1[1] = -100.0f;
    o1[2] = 0.0f;
    memcpy(o2, o1, sizeof o1);
    s->swiglu(o1, w, N);
    v->swiglu(o2, w, N);
    bad = 0;
    for (int i = 0; i < N; i++) bad += !(rel_close(o1[i], o2[i], 4e-7) || fabsf(o1[i] - o2[i]) < 1e-30f);
    CHECKF(bad == 0, "swiglu: %d elements differ", bad);
    memcpy(o1, x, sizeof x);
    memcpy(o2, x, sizeof x);
    s->add(o1, w, N);
    v->add(o2, w, N);
    CHECK(memcmp(o1, o2, sizeof o1) == 0);
    /* RoPE (neox pairs), 3 heads of 40 with 32 rotated dims, and 2 heads of
     * 128 fully rotated */
    kern_rope r = {.n_rot = 32, .neox = 1, .base = 10000.0f, .freq_scale = 1.0f, .attn_factor = 1.0f};
    float cs[128], h1[256], h2[256];
    kern_rope_table(&r, 17, cs);
    fill(h1, 120, 1.0f);
    memcpy(h2, h1, sizeof h1);
    s->rope_neox(cs, h1, 3, 40, 32);
    v->rope_neox(cs, h2, 3, 40, 32);
    CHECK(memcmp(h1, h2, 120 * sizeof(float)) == 0);
    r.n_rot = 128;
    kern_rope_table(&r, 1234, cs);
    fill(h1, 256, 1.0f);
    memcpy(h2, h1, sizeof h1);
    s->rope_neox(cs, h1, 2, 128, 128);
    v->rope_neox(cs, h2, 2, 128, 128);
    CHECK(memcmp(h1, h2, sizeof h1) == 0);
    /* phi3's shape: 6 heads of 16 with 12 rotated dims */
    r.n_rot = 12;
    kern_rope_table(&r, 300, cs);
    fill(h1, 96, 1.0f);
    memcpy(h2, h1, sizeof h1);
    s->rope_neox(cs, h1, 6, 16, 12);
    v->rope_neox(cs, h2, 6, 16, 12);
    CHECK(memcmp(h1, h2, 96 * sizeof(float)) == 0);
}

/* LongRoPE's table: angle i is pos * base^(-2i/n_rot) divided by factor i,
 * cos and sin times attn_factor; factors of 1 give the plain table. */
static void test_rope_factors(void) {
    const float ff[6] = {1.0f, 1.5f, 2.0f, 4.0f, 9.5f, 31.0f}, ones[6] = {1, 1, 1, 1, 1, 1};
    kern_rope r = {.n_rot = 12, .neox = 1, .base = 10000.0f, .freq_scale = 1.0f, .attn_factor = 1.19f};
    float plain[12], got[12];
    const int pos = 1000;
    kern_rope_table(&r, pos, plain);
    r.freq_factors = ones;
    kern_rope_table(&r, pos, got);
    CHECK(memcmp(plain, got, sizeof got) == 0);
    r.freq_factors = ff;
    kern_rope_table(&r, pos, got);
    int bad = 0;
    for (int i = 0; i < 6; i++) {
        const double th = pos * pow(10000.0, -2.0 * i / 12.0) / ff[i];
        bad += fabs(got[2 * i] - 1.19 * cos(th)) > 2e-3 || fabs(got[2 * i + 1] - 1.19 * sin(th)) > 2e-3;
    }
    CHECKF(bad == 0, "rope with frequency factors: %d of 6 angles off", bad);
}

/* Weights of type t: nrows x ncols quantized from random floats. */
static void *make_weights(int t, int64_t nrows, int64_t ncols) {
    float *f = malloc((size_t)(nrows * ncols) * sizeof(float));
    size_t rs = quant_row_size(t, ncols);
    uint8_t *w = malloc(rs * (size_t)nrows);
    fill(f, (int)(nrows * ncols), 1.0f);
    for (int64_t r = 0; r < nrows; r++) quant_get(t)->from_f32(f + r * ncols, w + (size_t)r * rs, ncols);
    free(f);
    return w;
}

#if defined(__x86_64__)
void kern_tile_f16_avx512_emu(int n, const void *w, size_t wrow, int nr, const void *a, size_t arow, int nt, float *y,
                              int64_t ldy);
#endif

/* The F16 block kernels at each SIMD level (AVX2, AVX-512 native and on
 * emulated intrinsics) against their scalar twin quant_dot_f16_lanes and the
 * same level's vec_dot, bit for bit, for every output of blocks of up to 261
 * rows and 11 tokens (not multiples of the 3 x 4 / 3 x 8 register tiles or
 * of the 128 rows the kernels keep partial sums for) over lengths that split
 * into k-blocks, whole lane groups and a tail in every way: a token's
 * outputs do not depend on the batch it is in (one token: 8 rows, and 261
 * rows, whose 8 chains take 32 rows each and leave 5).  And against the
 * reference (double) dot within float tolerance. */
static void test_tiles(void) {
    const int t = QUANT_F16;
    const int ns[] = {1, 7, 8, 16, 31, 40, 100, 512, 1000, 1024 + 24 + 5};
    const int blocks[][2] = {{1, 1}, {3, 3}, {4, 4}, {37, 11}, {17, 2}, {5, 7}, {261, 5}, {37, 1}, {8, 1}, {261, 1}};
    kern_tile_fn ref = kern_tile_at(t, QUANT_ISA_SCALAR);
    CHECK(ref != NULL);
    for (int lv = 0; lv < 3; lv++) {
        kern_tile_fn f;
        quant_vec_dot_fn dot;
        int lanes;
        if (lv == 2) {
#if defined(__x86_64__)
            if (quant_cpu_isa() < QUANT_ISA_AVX2) continue;
            f = kern_tile_f16_avx512_emu;
            dot = quant_legacy_avx512_emu.dot[t];
            lanes = 16;
#else
            continue;
#endif
        } else {
            const int isa = lv == 0 ? QUANT_ISA_AVX2 : QUANT_ISA_AVX512;
            f = kern_tile_at(t, isa);
            dot = quant_vec_dot_at(t, isa);
#if defined(__x86_64__)
            lanes = lv == 0 ? 8 : 16;
#else
            lanes = 8; /* both aarch64 levels: the 8 lanes of their F16 vec_dot */
#endif
            if (isa > quant_cpu_isa()) continue;
        }
        const char *name = lv == 2 ? "avx512 (emulated)" : quant_isa_name(QUANT_ISA_AVX2 + lv);
        CHECKF(f != NULL && dot != NULL, "F16 block kernel and vec_dot at %s", name);
        if (!f || !dot) continue;
        for (size_t k = 0; k < sizeof ns / sizeof ns[0]; k++)
            for (size_t b = 0; b < sizeof blocks / sizeof blocks[0]; b++) {
                const int n = ns[k], nr = blocks[b][0], nt = blocks[b][1];
                const size_t row = quant_row_size(t, n);
                uint8_t *w = make_weights(t, nr, n), *a = make_weights(t, nt, n);
                const int64_t ldy = nr + 3;
                float *y = malloc(sizeof(float) * (size_t)(nt * ldy)), *yr = malloc(sizeof(float) * (size_t)(nt * ldy));
                f(n, w, row, nr, a, row, nt, y, ldy);
                ref(n, w, row, nr, a, row, nt, yr, ldy);
                int bad_bits = 0, bad_dot = 0, bad_ref = 0;
                for (int tt = 0; tt < nt; tt++)
                    for (int r = 0; r < nr; r++) {
                        const uint16_t *wr = (const uint16_t *)(w + (size_t)r * row),
                                       *ar = (const uint16_t *)(a + (size_t)tt * row);
                        const float v = y[tt * ldy + r], twin = quant_dot_f16_lanes(n, wr, ar, lanes);
                        float d;
                        dot(n, &d, wr, ar);
                        bad_bits += memcmp(&v, &twin, sizeof v) != 0;
                        bad_dot += memcmp(&v, &d, sizeof v) != 0;
                        bad_ref += !(fabsf(v - yr[tt * ldy + r]) <= 1e-4f * (1.0f + fabsf(yr[tt * ldy + r])));
                    }
                CHECKF(
                    bad_bits == 0 && bad_dot == 0 && bad_ref == 0,
                    "F16 block at %s, n %d, %d rows x %d tokens: %d differ from the scalar twin in their bits, %d from "
                    "the vec_dot, %d from the reference dot",
                    name, n, nr, nt, bad_bits, bad_dot, bad_ref);
                free(w);
                free(a);
                free(y);
                free(yr);
            }
    }
}

/* Outputs of a two-matrix kern_matmul_multi (y0, y1: [tok][rows]) against
 * reference dots of each row with the token quantized to the weights'
 * activation type (xa: room for one such row).  Returns how many differ. */
static int count_bad_outputs(const kern_mat *w0, const kern_mat *w1, const float *y0, const float *y1, const float *x,
                             int nt, uint8_t *xa) {
    const quant_traits *tr = quant_get(w0->type);
    const int64_t ncols = w0->ncols;
    const size_t wrow = quant_row_size(w0->type, ncols);
    int bad = 0;
    for (int tok = 0; tok < nt; tok++) {
        quant_get(tr->vec_dot_type)->from_f32(x + tok * ncols, xa, ncols);
        for (int o = 0; o < 2; o++) {
            const kern_mat *w = o ? w1 : w0;
            const float *y = o ? y1 : y0;
            for (int64_t r = 0; r < w->nrows; r++) {
                float ref;
                tr->vec_dot_ref((int)ncols, &ref, (const uint8_t *)w->data + (size_t)r * wrow, xa);
                bad += !(fabsf(ref - y[tok * w->nrows + r]) <= 1e-4f * (1.0f + fabsf(ref)));
            }
        }
    }
    return bad;
}

/* Outputs given token ranges (kern_matmul_ranges, as a mixture of experts
 * routes rows): w0 over tokens [a0, a0 + n0) and w1 over [a1, a1 + n1) of
 * x, each output row t the product with token a + t.  Returns how many of
 * the outputs differ from the reference dots. */
static int check_ranged(thread_pool *pool, const kern_mat *w0, const kern_mat *w1, const float *x, int n_tok, int a0,
                        int n0, int a1, int n1, void *scratch, uint8_t *xa) {
    const quant_traits *tr = quant_get(w0->type);
    const int64_t ncols = w0->ncols;
    const size_t wrow = quant_row_size(w0->type, ncols);
    float *y0 = malloc(sizeof(float) * (size_t)(n0 * w0->nrows)),
          *y1 = malloc(sizeof(float) * (size_t)(n1 * w1->nrows));
    kern_mm_out outs[2] = {{w0, y0, w0->nrows}, {w1, y1, w1->nrows}};
    const int32_t t0[2] = {a0, a1}, nt[2] = {n0, n1};
    kern_matmul_ranges(pool, outs, t0, nt, 2, x, n_tok, scratch);
    int bad = 0;
    for (int o = 0; o < 2; o++) {
        const kern_mat *w = o ? w1 : w0;
        const int a = o ? a1 : a0, n = o ? n1 : n0;
        const float *y = o ? y1 : y0;
        for (int t = 0; t < n; t++) {
            quant_get(tr->vec_dot_type)->from_f32(x + (a + t) * ncols, xa, ncols);
            for (int64_t r = 0; r < w->nrows; r++) {
                float ref;
                tr->vec_dot_ref((int)ncols, &ref, (const uint8_t *)w->data + (size_t)r * wrow, xa);
                bad += !(fabsf(ref - y[t * w->nrows + r]) <= 1e-4f * (1.0f + fabsf(ref)));
            }
        }
    }
    free(y0);
    free(y1);
    return bad;
}

/* kern_matmul_multi on a pool against reference dots: two outputs of
 * different row counts (37 and 20: not multiples of the tiles) over a
 * batch of 7 tokens (one tile of 4, three single tokens) and of 1 token. */
static void test_matmul(thread_pool *pool, int t) {
    const int64_t ncols = 256, r0 = 37, r1 = 20;
    const int n_tok = 7;
    const quant_traits *tr = quant_get(t);
    kern_mat w0 = {make_weights(t, r0, ncols), t, ncols, r0, NULL},
             w1 = {make_weights(t, r1, ncols), t, ncols, r1, NULL};
    float *x = malloc((size_t)(n_tok * ncols) * sizeof(float));
    fill(x, (int)(n_tok * ncols), 1.0f);
    float *y0 = calloc((size_t)(n_tok * r0), sizeof(float)), *y1 = calloc((size_t)(n_tok * r1), sizeof(float));
    void *scratch = malloc(kern_matmul_scratch_size(ncols, n_tok));
    uint8_t *xa = malloc(quant_row_size(tr->vec_dot_type, ncols));
    for (int nt = 1; nt <= n_tok; nt += n_tok - 1) {
        kern_mm_out outs[2] = {{&w0, y0, r0}, {&w1, y1, r1}};
        kern_matmul_multi(pool, outs, 2, x, nt, scratch);
        const int bad = count_bad_outputs(&w0, &w1, y0, y1, x, nt, xa);
        CHECKF(bad == 0, "%s matmul, %d tokens: %d outputs differ", tr->name, nt, bad);
    }
    /* token ranges: a tile of 4 and a tail, a single token, overlapping */
    int bad = check_ranged(pool, &w0, &w1, x, n_tok, 1, 5, 6, 1, scratch, xa);
    bad += check_ranged(pool, &w0, &w1, x, n_tok, 0, 7, 2, 4, scratch, xa);
    CHECKF(bad == 0, "%s matmul over token ranges: %d outputs differ", tr->name, bad);
    free((void *)w0.data);
    free((void *)w1.data);
    free(x);
    free(y0);
    free(y1);
    free(scratch);
    free(xa);
}

/* The sink logits (kern_attn_inv) the attention tests give case i: none,
 * below the scores' maximum, or above it (the accumulator is rescaled). */
static const float *attn_sink(size_t i) {
    static const float z[2][2] = {{-1.5f, 0.25f}, {9.0f, 12.0f}};
    return i % 3 ? z[i % 3 - 1] : NULL;
}

/* attn_f16: every SIMD twin against the scalar loop, bit for bit, with
 * either accumulator, over a paged cache (shuffled blocks of 16 cells) with
 * head sizes that take each path (64-wide chunks, 8-wide rest, scalar rest),
 * one query head or two sharing the KV head (the paired path at head size
 * 128), one token or a tile of consecutive tokens (the float accumulator
 * at head size 128 takes up to 8 queries at once, so 5 tokens of 2 heads
 * are split), and position counts inside and across blocks, with and
 * without sinks. */
static void test_attn(const kern_ops *s, const kern_ops *v) {
    enum { NBLK = 8, CELLS = NBLK * 16, HMAX = 136, STRIDE = 2 * HMAX, NTMAX = 5, TOK = 2 * HMAX + 5 };
    static uint16_t kc[CELLS * STRIDE], vc[CELLS * STRIDE];
    for (int i = 0; i < CELLS * STRIDE; i++) {
        kc[i] = quant_f32_to_f16(2.0f * frand());
        vc[i] = quant_f32_to_f16(frand());
    }
    const int32_t blocks[NBLK] = {5, 2, 7, 0, 3, 6, 1, 4};
    /* the same cells paged in blocks of 4: no 8 consecutive rows, so the
     * twins' per-row block lookups run too */
    int32_t blocks4[CELLS / 4];
    for (int i = 0; i < CELLS / 4; i++) blocks4[i] = (i * 11 + 5) % (CELLS / 4);
    static float q[NTMAX * TOK], o1[NTMAX * TOK], o2[NTMAX * TOK], o3[NTMAX * TOK], o4[NTMAX * TOK];
    static float scratch[2 * NTMAX * (2 * HMAX + 3 * CELLS)];
    const int hds[] = {8, 64, 72, 128, 131};
    const int counts[] = {1, 2, 15, 17, 77, CELLS};
    const int nts[] = {1, 3, 4, 5};
    /* sliding windows: none, one inside a block, one whose start is a
     * multiple of 8 at 77 + 3 positions, one longer than most spans */
    const int windows[] = {0, 7, 24, 100};
    for (int acc_f32 = 0; acc_f32 <= 1; acc_f32++)
        for (int nq = 1; nq <= 2; nq++)
            for (size_t h = 0; h < sizeof hds / sizeof hds[0]; h++)
                for (size_t u = 0; u < sizeof nts / sizeof nts[0]; u++)
                    for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++)
                        for (size_t wi = 0; wi < sizeof windows / sizeof windows[0]; wi++) {
                            const int hd = hds[h], nt = nts[u], window = windows[wi];
                            const int n_pos = counts[c] - nt + 1 < 1 ? 1 : counts[c] - nt + 1;
                            const float *sink = attn_sink(c + wi);
                            if (nt > 1 && hd != 8 && hd != 64 && hd != 128)
                                continue; /* tiles: the tiled sizes and one other */
                            if (window && (hd == 72 || hd == 131))
                                continue; /* windows: the kernels' split is size-blind */
                            fill(q, NTMAX * TOK, 3.0f);
                            memset(o1, 0, sizeof o1);
                            memset(o2, 0, sizeof o2);
                            kern_attn_f16 a = {.q = q,
                                               .nq = nq,
                                               .nt = nt,
                                               .tok_stride = TOK,
                                               .hd = hd,
                                               .n_pos = n_pos,
                                               .blocks = blocks,
                                               .block_shift = 4,
                                               .k = kc + HMAX,
                                               .v = vc + 3,
                                               .block_stride = 16 * STRIDE,
                                               .row_stride = STRIDE,
                                               .scale = 1.0f / sqrtf((float)hd),
                                               .acc_f32 = acc_f32,
                                               .window = window,
                                               .sink = sink,
                                               .out = o1,
                                               .scratch = scratch};
                            CHECK(kern_attn_scratch(nq, nt, hd, n_pos) <= sizeof scratch / sizeof scratch[0]);
                            s->attn_f16(&a);
                            a.out = o2;
                            v->attn_f16(&a);
                            CHECKF(
                                memcmp(o1, o2, sizeof o1) == 0,
                                "attn_f16 (%s accumulator) %d heads x %d tokens, hd %d, %d positions, window %d, sink "
                                "%d: twins differ",
                                acc_f32 ? "float" : "F16", nq, nt, hd, n_pos, window, (int)((c + wi) % 3));
                            if (nt == 1) {
                                kern_attn_f16 b4 = a;
                                b4.blocks = blocks4;
                                b4.block_shift = 2;
                                b4.block_stride = 4 * STRIDE;
                                memset(o3, 0, sizeof o3);
                                memset(o4, 0, sizeof o4);
                                b4.out = o3;
                                s->attn_f16(&b4);
                                b4.out = o4;
                                v->attn_f16(&b4);
                                CHECKF(
                                    memcmp(o3, o4, sizeof o3) == 0,
                                    "attn_f16 (%s accumulator) %d heads, hd %d, %d positions, window %d, blocks of 4: "
                                    "twins differ",
                                    acc_f32 ? "float" : "F16", nq, hd, n_pos, window);
                            }
                            if (nt > 1) { /* a tile is its tokens one by one */
                                for (int t = 0; t < nt; t++) {
                                    kern_attn_f16 one = a;
                                    one.nt = 1;
                                    one.n_pos = n_pos + t;
                                    one.q = q + (size_t)t * TOK;
                                    one.out = o2 + (size_t)t * TOK;
                                    v->attn_f16(&one);
                                }
                                CHECKF(
                                    memcmp(o1, o2, sizeof o1) == 0,
                                    "attn_f16 (%s accumulator) %d heads x %d tokens, hd %d, window %d: tile != tokens",
                                    acc_f32 ? "float" : "F16", nq, nt, hd, window);
                                continue;
                            }
                            if (nq == 2) continue; /* the reference below checks one head */
                            /* and the scalar loop is attention: a plain double softmax
             * agrees within 4e-3 with the F16 accumulator (2.2e-3 measured)
             * and within 1e-3 with the float one (4.7e-4: the query's F16
             * rounding) */
                            /* (a window: positions lo .. counts[c] - 1) */
                            const int lo = window && counts[c] > window ? counts[c] - window : 0;
                            double w[CELLS], mx = -1e300, sum = 0.0, err = 0.0;
                            for (int t = lo; t < counts[c]; t++) {
                                const size_t cell = (size_t)blocks[t >> 4] * 16 + (size_t)(t & 15);
                                double d = 0.0;
                                for (int i = 0; i < hd; i++)
                                    d += (double)quant_f16_to_f32(kc[HMAX + cell * STRIDE + (size_t)i]) * q[i];
                                w[t] = d / sqrt((double)hd);
                                if (w[t] > mx) mx = w[t];
                            }
                            if (sink && *sink > mx) mx = *sink;
                            for (int t = lo; t < counts[c]; t++) sum += (w[t] = exp(w[t] - mx));
                            if (sink) sum += exp(*sink - mx);
                            for (int i = 0; i < hd; i++) {
                                double r = 0.0;
                                for (int t = lo; t < counts[c]; t++)
                                    r += w[t] / sum *
                                         quant_f16_to_f32(
                                             vc[3 + ((size_t)blocks[t >> 4] * 16 + (size_t)(t & 15)) * STRIDE +
                                                (size_t)i]);
                                if (fabs(r - o1[i]) > err) err = fabs(r - o1[i]);
                            }
                            CHECKF(
                                err < (acc_f32 ? 1e-3 : 4e-3),
                                "attn_f16 (%s accumulator) hd %d, %d positions, window %d: %.3g from a double softmax",
                                acc_f32 ? "float" : "F16", hd, counts[c], window, err);
                        }
}

/* attn_q8: the SIMD twin against the scalar loop, bit for bit, over a
 * paged Q8_0 cache (shuffled blocks of 16 cells, and of 4) at head sizes of
 * 1 to 8 blocks, 1, 2, 3 or 10 heads (more than one tile holds), one token
 * or a tile, spans ending inside and at the end of 8-row steps, with and
 * without sinks (at 1 and 2 heads); the scalar loop
 * against a double softmax over the dequantized cache (the error left is
 * the query's quantization). */
static void test_attn_q8(const kern_ops *s, const kern_ops *v) {
    enum {
        NBLK = 8,
        CELLS = NBLK * 16,
        HMAX = 256,
        RB = HMAX / 32 * 34,
        STRIDE = RB + 6,
        NTMAX = 4,
        TOK = 10 * HMAX + 5
    };
    static uint8_t kc[CELLS * STRIDE], vc[CELLS * STRIDE];
    static float row[HMAX];
    const quant_traits *q8 = quant_get(QUANT_Q8_0);
    for (int c = 0; c < CELLS; c++) {
        fill(row, HMAX, 2.0f);
        q8->from_f32(row, kc + (size_t)c * STRIDE, HMAX);
        fill(row, HMAX, 1.0f);
        q8->from_f32(row, vc + (size_t)c * STRIDE, HMAX);
    }
    const int32_t blocks[NBLK] = {5, 2, 7, 0, 3, 6, 1, 4};
    int32_t blocks4[CELLS / 4];
    for (int i = 0; i < CELLS / 4; i++) blocks4[i] = (i * 11 + 5) % (CELLS / 4);
    static float q[NTMAX * TOK], o1[NTMAX * TOK], o2[NTMAX * TOK];
    static float scratch[10 * NTMAX * (2 * HMAX + 3 * CELLS)];
    const int hds[] = {32, 64, 96, 128, 256};
    const int counts[] = {1, 2, 15, 17, 77, CELLS};
    const int nts[] = {1, 4};
    const int windows[] = {0, 7, 24}; /* sliding windows, as test_attn's */
    for (int b4 = 0; b4 <= 1; b4++)
        for (int nq = 1; nq <= 10; nq += nq < 3 ? 1 : 7)
            for (size_t h = 0; h < sizeof hds / sizeof hds[0]; h++)
                for (size_t u = 0; u < sizeof nts / sizeof nts[0]; u++)
                    for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++)
                        for (size_t wi = 0; wi < sizeof windows / sizeof windows[0]; wi++) {
                            const int hd = hds[h], nt = nts[u], window = windows[wi];
                            if (window && (hd == 96 || hd == 256)) continue; /* the split is size-blind */
                            const int n_pos = counts[c] - nt + 1 < 1 ? 1 : counts[c] - nt + 1;
                            const float *sink = nq <= 2 ? attn_sink(c + wi) : NULL; /* two heads' sinks */
                            fill(q, NTMAX * TOK, 3.0f);
                            memset(o1, 0, sizeof o1);
                            memset(o2, 0, sizeof o2);
                            kern_attn_q8 a = {.q = q,
                                              .nq = nq,
                                              .nt = nt,
                                              .tok_stride = TOK,
                                              .hd = hd,
                                              .n_pos = n_pos,
                                              .blocks = b4 ? blocks4 : blocks,
                                              .block_shift = b4 ? 2 : 4,
                                              .k = kc,
                                              .v = vc,
                                              .block_stride = (b4 ? 4 : 16) * (size_t)STRIDE,
                                              .row_stride = STRIDE,
                                              .scale = 1.0f / sqrtf((float)hd),
                                              .window = window,
                                              .sink = sink,
                                              .out = o1,
                                              .scratch = scratch};
                            CHECK(kern_attn_scratch(nq, nt, hd, n_pos) <= sizeof scratch / sizeof scratch[0]);
                            s->attn_q8(&a);
                            a.out = o2;
                            v->attn_q8(&a);
                            CHECKF(memcmp(o1, o2, sizeof o1) == 0,
                                   "attn_q8 %d heads x %d tokens, hd %d, %d positions, window %d%s: twins differ", nq,
                                   nt, hd, n_pos, window, b4 ? ", blocks of 4" : "");
                            if (nt > 1 || nq > 1 || b4) continue;
                            /* the scalar loop is attention over the dequantized cache */
                            const int lo = window && counts[c] > window ? counts[c] - window : 0;
                            double w[CELLS], mx = -1e300, sum = 0.0, err = 0.0;
                            float kf[HMAX];
                            for (int t = lo; t < counts[c]; t++) {
                                const size_t cell = (size_t)blocks[t >> 4] * 16 + (size_t)(t & 15);
                                q8->to_f32(kc + cell * STRIDE, kf, hd);
                                double d = 0.0;
                                for (int i = 0; i < hd; i++) d += (double)kf[i] * q[i];
                                w[t] = d / sqrt((double)hd);
                                if (w[t] > mx) mx = w[t];
                            }
                            if (sink && *sink > mx) mx = *sink;
                            for (int t = lo; t < counts[c]; t++) sum += (w[t] = exp(w[t] - mx));
                            if (sink) sum += exp(*sink - mx);
                            static float vf[CELLS][HMAX];
                            for (int t = lo; t < counts[c]; t++)
                                q8->to_f32(vc + ((size_t)blocks[t >> 4] * 16 + (size_t)(t & 15)) * STRIDE, vf[t], hd);
                            for (int i = 0; i < hd; i++) {
                                double r = 0.0;
                                for (int t = lo; t < counts[c]; t++) r += w[t] / sum * vf[t][i];
                                if (fabs(r - o1[i]) > err) err = fabs(r - o1[i]);
                            }
                            CHECKF(err < 2e-2, "attn_q8 hd %d, %d positions, window %d: %.3g from a double softmax", hd,
                                   counts[c], window, err);
                        }
}

/* The interleaved kernels of type t: every SIMD twin equals the scalar one
 * bit for bit (same int32 block sums, same fma order), over several tokens
 * with a token stride (lda) larger than the count; the scalar one agrees
 * with the plain row dot of t; packed rows expand to the plain rows. */
/* pack_avx512.c built against tests/emu512.h (tests/CMakeLists.txt) */
#include "kernels/level.h"
#if defined(__x86_64__)
extern const kern_x8_set kern_x8_avx512_emu;
#define X8_EMU(f) (quant_cpu_isa() >= QUANT_ISA_AVX2 ? (f) : NULL)
#else
#define X8_EMU(f) NULL /* the avx512 emulation is x86-64 only */
#endif

static void test_x8_kernels(int t) {
    const kern_x8_traits *xt = kern_x8_get(t);
    CHECK(xt != NULL);
    if (!xt) return;
    /* K-quant kernels take 16 tokens a pass; the one-token kernels over
     * groups take their activation terms 8 (K-quants) or 32 blocks (Q4_0) at
     * a time, and the activations are quantized 64 blocks a call, so the
     * 32-weight types get more than 64 blocks */
    const int nb = xt->blk == 32 ? 70 : 9, n_tok = 19, lda = 21, n = xt->blk * nb;
    const quant_traits *tr = quant_get(t);
    const size_t wrow = quant_row_size(t, n);
    uint8_t *w = make_weights(t, 8, n);
    uint8_t *pk = malloc(xt->pblock * nb);
    xt->pack(w, wrow, 0, nb, pk);
    uint8_t *a = malloc(xt->ablock * (size_t)(nb * lda));
    float *x = malloc(sizeof(float) * (size_t)n * lda);
    fill(x, n * lda, 2.0f);
    for (int tok = 0; tok < lda; tok++) xt->act(x + (size_t)tok * n, n, a + (size_t)tok * xt->ablock, (size_t)lda);
    kern_x8_fn ref = kern_x8_at(t, QUANT_ISA_SCALAR);
    CHECK(ref != NULL);
    float ys[8 * n_tok], yv[8 * n_tok];
    /* the twins this CPU runs, and pack_avx512.c's kernels on emulated
     * intrinsics (any x86-64 with AVX2) */
    const struct {
        const char *name;
        kern_x8_fn f;
    } twins[] = {
        {"avx2", kern_x8_at(t, QUANT_ISA_AVX2)},
        {"avx512", kern_x8_at(t, QUANT_ISA_AVX512)},
        {"avx512 (emulated)", X8_EMU(kern_x8_avx512_emu.fn[t])},
    };
    for (size_t k = 0; k < sizeof twins / sizeof twins[0] && ref; k++) {
        if (!twins[k].f) continue;
        const int counts[] = {1, 5, 16, n_tok};
        for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++) {
            const int nt = counts[c];
            for (int i = 0; i < 8 * nt; i++) ys[i] = yv[i] = 0.25f * (float)i;
            ref(nb, pk, a, (size_t)lda, nt, ys);
            twins[k].f(nb, pk, a, (size_t)lda, nt, yv);
            CHECKF(memcmp(ys, yv, sizeof(float) * 8 * (size_t)nt) == 0, "%s x8 kernel at %s, %d tokens differs",
                   tr->name, twins[k].name, nt);
        }
    }
    /* the one-token kernels over groups: 7 copies of the packed group (the
     * third's scales changed, so a kernel reading the wrong group shows;
     * 7 takes the kernels that work several groups a pass through a full
     * pass and a remainder), each output the block kernel's from a zero
     * accumulator */
    {
        const int ng = 7;
        uint8_t *pg = malloc(xt->pblock * nb * ng);
        for (int g = 0; g < ng; g++) memcpy(pg + xt->pblock * nb * g, pk, xt->pblock * nb);
        memset(pg + xt->pblock * nb * 2, 0x11, 16); /* the first scales (F16 d) of group 2 */
        float want[8 * ng], got[8 * ng];
        for (int g = 0; g < ng; g++) {
            for (int i = 0; i < 8; i++) want[8 * g + i] = 0.0f;
            if (ref) ref(nb, pg + xt->pblock * nb * g, a, (size_t)lda, 1, want + 8 * g);
        }
        const struct {
            const char *name;
            kern_x8_dec_fn f;
        } decs[] = {
            {"scalar", kern_x8_dec_at(t, QUANT_ISA_SCALAR)},
            {"avx2", kern_x8_dec_at(t, QUANT_ISA_AVX2)},
            {"avx512", kern_x8_dec_at(t, QUANT_ISA_AVX512)},
            {"avx512 (emulated)", X8_EMU(kern_x8_avx512_emu.dec[t])},
        };
        CHECK(decs[0].f != NULL);
        for (size_t k = 0; k < sizeof decs / sizeof decs[0]; k++) {
            if (!decs[k].f) continue;
            for (int i = 0; i < 8 * ng; i++) got[i] = 99.0f;
            decs[k].f(ng, nb, pg, a, (size_t)lda, got);
            CHECKF(memcmp(want, got, sizeof want) == 0, "%s one-token kernel over %d groups at %s differs", tr->name,
                   ng, decs[k].name);
        }
        free(pg);
    }
    if (ref) { /* the scalar kernel against the plain dot, same activations */
        for (int i = 0; i < 8 * n_tok; i++) ys[i] = 0.0f;
        ref(nb, pk, a, (size_t)lda, n_tok, ys);
        const quant_traits *at = quant_get(tr->vec_dot_type);
        uint8_t *q = malloc(quant_row_size(tr->vec_dot_type, n));
        int bad = 0;
        for (int tok = 0; tok < n_tok; tok++) {
            at->from_f32(x + (size_t)tok * n, q, n);
            for (int r = 0; r < 8; r++) {
                float want;
                tr->vec_dot_ref(n, &want, w + (size_t)r * wrow, q);
                bad += !(fabsf(want - ys[8 * tok + r]) <= 1e-5f * (1.0f + fabsf(want)));
            }
        }
        CHECKF(bad == 0, "%s x8 scalar kernel: %d of %d differ from the plain dot", tr->name, bad, 8 * n_tok);
        free(q);
    }
    float *rp = malloc(sizeof(float) * (size_t)n), *rq = malloc(sizeof(float) * (size_t)n);
    int bad = 0;
    for (int r = 0; r < 8; r++) {
        tr->to_f32(w + (size_t)r * wrow, rp, n);
        xt->get_row(pk, r, nb, rq);
        bad += memcmp(rp, rq, sizeof(float) * (size_t)n) != 0;
    }
    CHECKF(bad == 0, "%s: %d of 8 packed rows expand differently", tr->name, bad);
    free(rp);
    free(rq);
    free(w);
    free(pk);
    free(a);
    free(x);
}

/* kern_matmul on matrices of an interleaved type with rows in groups of 8,
 * plain and repacked: batches of 1, 7 and 300 tokens (past one 256-token
 * kernel call) and rows longer than one packing chunk, against reference
 * dots; and kern_get_row of a repacked matrix equals the plain row. */
static void test_matmul_x8(thread_pool *pool, int t) {
    const kern_x8_traits *xt = kern_x8_get(t);
    /* r0 = 43: five whole groups and 3 rows that stay plain, after which
     * the second output starts off a group boundary (plain as well) */
    const int64_t ncols = (int64_t)xt->blk * (int64_t)(16384 / xt->pblock + 2), r0 = 43, r1 = 24;
    const int max_tok = 300;
    const quant_traits *tr = quant_get(t);
    kern_mat w0 = {make_weights(t, r0, ncols), t, ncols, r0, NULL};
    kern_mat w1 = {make_weights(t, r1, ncols), t, ncols, r1, NULL};
    void *p0 = malloc(kern_x8_matrix_size(t, ncols, r0)), *p1 = malloc(kern_x8_matrix_size(t, ncols, r1));
    kern_x8_pack_matrix(t, w0.data, ncols, r0, p0);
    kern_x8_pack_matrix(t, w1.data, ncols, r1, p1);
    float *x = malloc(sizeof(float) * (size_t)(max_tok * ncols));
    fill(x, (int)(max_tok * ncols), 1.0f);
    float *y0 = malloc(sizeof(float) * (size_t)(max_tok * r0)), *y1 = malloc(sizeof(float) * (size_t)(max_tok * r1));
    void *scratch = malloc(kern_matmul_scratch_size(ncols, max_tok));
    uint8_t *xa = malloc(quant_row_size(tr->vec_dot_type, ncols));
    const int counts[] = {1, 7, max_tok};
    for (int packed = 0; packed < 2; packed++) {
        w0.packed = packed ? p0 : NULL;
        w1.packed = packed ? p1 : NULL;
        for (int c = 0; c < 3; c++) {
            const int nt = counts[c];
            kern_mm_out outs[2] = {{&w0, y0, r0}, {&w1, y1, r1}};
            kern_matmul_multi(pool, outs, 2, x, nt, scratch);
            const int bad = count_bad_outputs(&w0, &w1, y0, y1, x, nt, xa);
            CHECKF(bad == 0, "%s matmul (%s), %d tokens: %d outputs differ", tr->name, packed ? "repacked" : "plain",
                   nt, bad);
        }
        /* token ranges: more than one kernel call of tokens, a short run, one token */
        int bad = check_ranged(pool, &w0, &w1, x, max_tok, 3, 290, 100, 7, scratch, xa);
        bad += check_ranged(pool, &w0, &w1, x, max_tok, 299, 1, 0, 1, scratch, xa);
        CHECKF(bad == 0, "%s matmul (%s) over token ranges: %d outputs differ", tr->name, packed ? "repacked" : "plain",
               bad);
    }
    float *rp = malloc(sizeof(float) * (size_t)ncols), *rq = malloc(sizeof(float) * (size_t)ncols);
    int bad = 0;
    for (int64_t r = 0; r < r0; r++) {
        w0.packed = NULL;
        kern_get_row(&w0, r, rp);
        w0.packed = p0;
        kern_get_row(&w0, r, rq);
        bad += memcmp(rp, rq, sizeof(float) * (size_t)ncols) != 0;
    }
    CHECKF(bad == 0, "%s kern_get_row of a repacked matrix: %d of %d rows differ", tr->name, bad, (int)r0);
    free(rp);
    free(rq);
    free((void *)w0.data);
    free((void *)w1.data);
    free(p0);
    free(p1);
    free(x);
    free(y0);
    free(y1);
    free(scratch);
    free(xa);
}

/* Largest |a - b| over n relative to the largest |b| (0 when equal). */
static double max_rel(const float *a, const float *b, size_t n) {
    double md = 0, mb = 0;
    for (size_t i = 0; i < n; i++) {
        const double d = fabs((double)a[i] - b[i]);
        if (d > md) md = d;
        if (fabs(b[i]) > mb) mb = fabs(b[i]);
    }
    return mb > 0 ? md / mb : md;
}

/* The causal depthwise convolution: a twin against the reference on
 * channels that leave a tail of 3, a run of tokens against the same tokens
 * in pieces (the carried state), and the reference against the sum written
 * out; the state after n tokens is the last K - 1 inputs. */
static void test_conv(const kern_ssm_ops *s, const kern_ssm_ops *v) {
    enum { C = 131, K = 4, NT = 21 };
    static float x[NT * C], w[K * C], st0[(K - 1) * C], sa[(K - 1) * C], sb[(K - 1) * C], ya[NT * C], yb[NT * C];
    fill(x, NT * C, 2.0f);
    fill(w, K * C, 0.6f);
    fill(st0, (K - 1) * C, 2.0f);
    memcpy(sa, st0, sizeof sa);
    memcpy(sb, st0, sizeof sb);
    kern_conv a = {NT, C, K, x, C, w, sa, C, ya, C, NULL};
    s->conv_silu(&a);
    /* token 1, channel 5, by hand: taps 0, 1 on the state rows 1, 2, taps 2, 3 on x_0, x_1 */
    float acc = 0.0f;
    acc += st0[1 * C + 5] * w[0 * C + 5];
    acc += st0[2 * C + 5] * w[1 * C + 5];
    acc += x[0 * C + 5] * w[2 * C + 5];
    acc += x[1 * C + 5] * w[3 * C + 5];
    CHECKF(fabsf(ya[C + 5] - acc / (1.0f + expf(-acc))) <= 1e-6f * (1.0f + fabsf(ya[C + 5])), "conv by hand: %g vs %g",
           ya[C + 5], acc / (1.0f + expf(-acc)));
    CHECK(memcmp(sa, x + (NT - K + 1) * C, sizeof sa) == 0);
    /* in pieces of 1, 2 and the rest: the same bits */
    const int cuts[] = {0, 1, 3, NT};
    for (int p = 0; p < 3; p++) {
        kern_conv b = {cuts[p + 1] - cuts[p], C, K, x + cuts[p] * C, C, w, sb, C, yb + cuts[p] * C, C, NULL};
        s->conv_silu(&b);
    }
    CHECK(memcmp(ya, yb, sizeof ya) == 0 && memcmp(sa, sb, sizeof sa) == 0);
    /* a slice of the channels (what a thread takes): the same columns */
    {
        enum { C0 = 40, CN = 37 };
        memcpy(sb, st0, sizeof sb);
        memset(yb, 0, sizeof yb);
        kern_conv b = {NT, CN, K, x + C0, C, w + C0, sb + C0, C, yb + C0, C, NULL};
        s->conv_silu(&b);
        int same = 1;
        for (int t = 0; t < NT; t++) same &= !memcmp(yb + t * C + C0, ya + t * C + C0, CN * sizeof(float));
        for (int r = 0; r < K - 1; r++) same &= !memcmp(sb + r * C + C0, sa + r * C + C0, CN * sizeof(float));
        CHECK(same);
    }
    if (v != s) {
        memcpy(sb, st0, sizeof sb);
        kern_conv b = {NT, C, K, x, C, w, sb, C, yb, C, NULL};
        v->conv_silu(&b);
        const double e = max_rel(yb, ya, NT * C);
        CHECKF(e < 1e-6, "conv_silu twin: rel err %g", e);
        CHECK(memcmp(sa, sb, sizeof sa) == 0);
        /* one token with a state of K - 1 rows: the decode step */
        memcpy(sa, st0, sizeof sa);
        memcpy(sb, st0, sizeof sb);
        kern_conv c1 = {1, C, K, x, C, w, sa, C, ya, C, NULL}, c2 = {1, C, K, x, C, w, sb, C, yb, C, NULL};
        s->conv_silu(&c1);
        v->conv_silu(&c2);
        CHECK(max_rel(yb, ya, C) < 1e-6 && memcmp(sa, sb, sizeof sa) == 0);
    }
}

/* The convolution's bias: added after the taps' sum, before SiLU (checked
 * by hand), on the reference and the twin. */
static void test_conv_bias(const kern_ssm_ops *s, const kern_ssm_ops *v) {
    enum { C = 19, K = 4, NT = 3 };
    float x[NT * C], w[K * C], b[C], sa[(K - 1) * C], sb[(K - 1) * C], ya[NT * C], yb[NT * C];
    fill(x, NT * C, 2.0f);
    fill(w, K * C, 0.6f);
    fill(b, C, 1.0f);
    memset(sa, 0, sizeof sa);
    memset(sb, 0, sizeof sb);
    kern_conv a = {NT, C, K, x, C, w, sa, C, ya, C, b};
    s->conv_silu(&a);
    /* token 2, channel 17: taps 1..3 on x_0..x_2, tap 0 on a zero state row */
    float acc = 0.0f;
    for (int k = 1; k < K; k++) acc += x[(k - 1) * C + 17] * w[k * C + 17];
    acc += b[17];
    CHECKF(fabsf(ya[2 * C + 17] - acc / (1.0f + expf(-acc))) <= 1e-6f * (1.0f + fabsf(acc)), "conv bias: %g vs %g",
           ya[2 * C + 17], acc / (1.0f + expf(-acc)));
    kern_conv c = {NT, C, K, x, C, w, sb, C, yb, C, b};
    v->conv_silu(&c);
    CHECKF(max_rel(yb, ya, NT * C) < 1e-6, "conv bias twin: rel err %g", max_rel(yb, ya, NT * C));
}

/* The Mamba-2 scan: the reference against the recurrence written out in
 * double, a run against the same tokens in pieces (the carried state), and
 * the twin against the reference, for state sizes with and without 8-lane
 * tails. */
static void test_ssd(const kern_ssm_ops *s, const kern_ssm_ops *v) {
    enum { NT = 13, P = 6, NMAX = 21 };
    static const int Ns[] = {8, 16, 21};
    for (int ni = 0; ni < 3; ni++) {
        const int NS = Ns[ni];
        float x[NT * P], B[NT * NMAX], C[NT * NMAX], dt[NT], s0[P * NMAX], sa[P * NMAX], sb[P * NMAX];
        float ya[NT * P], yb[NT * P];
        double sd[P * NMAX];
        fill(x, NT * P, 2.0f);
        fill(B, NT * NS, 1.0f);
        fill(C, NT * NS, 1.0f);
        fill(s0, P * NS, 1.0f);
        for (int t = 0; t < NT; t++) dt[t] = 0.05f + 0.5f * (1.0f + frand());
        const float A = -0.7f, D = 0.3f;
        memcpy(sa, s0, sizeof sa);
        kern_ssd a = {NT, P, NS, x, P, B, C, (size_t)NS, dt, 1, A, D, sa, ya, P};
        s->ssd_scan(&a);
        double err = 0.0, mag = 0.0;
        for (int i = 0; i < P * NS; i++) sd[i] = s0[i];
        for (int t = 0; t < NT; t++) {
            const double dA = exp((double)dt[t] * A);
            for (int p = 0; p < P; p++) {
                double y = 0.0;
                for (int i = 0; i < NS; i++) {
                    sd[p * NS + i] = sd[p * NS + i] * dA + (double)B[t * NS + i] * x[t * P + p] * dt[t];
                    y += sd[p * NS + i] * C[t * NS + i];
                }
                y += (double)D * x[t * P + p];
                err = fmax(err, fabs(y - ya[t * P + p]));
                mag = fmax(mag, fabs(y));
            }
        }
        CHECKF(err <= 1e-5 * (1.0 + mag), "ssd_scan vs double (NS %d): err %g of %g", NS, err, mag);
        memcpy(sb, s0, sizeof sb);
        const int cuts[] = {0, 1, 4, NT};
        for (int c = 0; c < 3; c++) {
            kern_ssd b = {cuts[c + 1] - cuts[c],
                          P,
                          NS,
                          x + cuts[c] * P,
                          P,
                          B + cuts[c] * NS,
                          C + cuts[c] * NS,
                          (size_t)NS,
                          dt + cuts[c],
                          1,
                          A,
                          D,
                          sb,
                          yb + cuts[c] * P,
                          P};
            s->ssd_scan(&b);
        }
        CHECK(memcmp(ya, yb, sizeof ya) == 0 && memcmp(sa, sb, (size_t)P * NS * sizeof(float)) == 0);
        memcpy(sb, s0, sizeof sb);
        kern_ssd b = {NT, P, NS, x, P, B, C, (size_t)NS, dt, 1, A, D, sb, yb, P};
        v->ssd_scan(&b);
        CHECKF(max_rel(yb, ya, NT * P) < 1e-5, "ssd_scan twin (NS %d): rel err %g", NS, max_rel(yb, ya, NT * P));
        CHECKF(max_rel(sb, sa, (size_t)P * NS) < 1e-5, "ssd_scan twin state (NS %d): rel err %g", NS,
               max_rel(sb, sa, (size_t)P * NS));
    }
}

/* Random delta-rule inputs for n tokens of one head: unit q and k, v of
 * order 1, log decays in [-1.5, 0] and betas in [0, 1]. */
static void gdn_inputs(int n, int dk, int dv, float *q, float *k, float *v, float *g, float *beta) {
    fill(q, n * dk, 1.0f);
    fill(k, n * dk, 1.0f);
    fill(v, n * dv, 1.0f);
    for (int t = 0; t < n; t++) {
        kern_l2norm(q + t * dk, dk, 1e-6f);
        kern_l2norm(k + t * dk, dk, 1e-6f);
        g[t] = -0.75f * (1.0f + frand());
        beta[t] = 0.5f * (1.0f + frand());
    }
}

/* The gated delta rule: a recurrent twin against the reference; the
 * chunked form (reference and twin) against the recurrent one over runs
 * that start off a chunk boundary and end inside one, for head sizes with
 * and without 8-lane tails; and the recurrent reference against the rule
 * written out in double. */
static void test_gdn(const kern_ssm_ops *s, const kern_ssm_ops *v) {
    const int shapes[][2] = {{16, 16}, {128, 128}, {20, 12}};
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        const int dk = shapes[si][0], dv = shapes[si][1], n = 45, pos0 = 7;
        float *q = malloc(sizeof(float) * (size_t)(n * dk)), *k = malloc(sizeof(float) * (size_t)(n * dk));
        float *vv = malloc(sizeof(float) * (size_t)(n * dv)), g[64], beta[64];
        float *s0 = malloc(sizeof(float) * (size_t)(dk * dv)), *sa = malloc(sizeof(float) * (size_t)(dk * dv));
        float *sb = malloc(sizeof(float) * (size_t)(dk * dv));
        float *oa = malloc(sizeof(float) * (size_t)(n * dv)), *ob = malloc(sizeof(float) * (size_t)(n * dv));
        float *scratch = malloc(sizeof(float) * kern_gdn_scratch(dk, dv));
        gdn_inputs(n, dk, dv, q, k, vv, g, beta);
        fill(s0, dk * dv, 0.5f);
        const float scale = 1.0f / sqrtf((float)dk);
        kern_gdn a = {n, pos0, dk, dv,    q,  k,  (size_t)dk, vv,     (size_t)dv,
                      g, beta, 1,  scale, sa, oa, (size_t)dv, scratch};
        kern_gdn b = a;
        b.s = sb;
        b.o = ob;
        memcpy(sa, s0, sizeof(float) * (size_t)(dk * dv));
        s->gdn_step(&a);
        /* the first two tokens in double, straight from the formula */
        {
            double *S = malloc(sizeof(double) * (size_t)(dk * dv)), worst = 0, big = 0;
            for (int i = 0; i < dk * dv; i++) S[i] = s0[i];
            for (int t = 0; t < 2; t++) {
                const double dc = exp((double)g[t]);
                for (int j = 0; j < dv; j++) {
                    double sk = 0, sq = 0;
                    for (int i = 0; i < dk; i++) sk += (S[j * dk + i] *= dc) * k[t * dk + i];
                    const double d = beta[t] * (vv[t * dv + j] - sk);
                    for (int i = 0; i < dk; i++) sq += (S[j * dk + i] += d * k[t * dk + i]) * q[t * dk + i];
                    const double o = sq * scale, e = fabs(o - oa[t * dv + j]);
                    worst = e > worst ? e : worst;
                    big = fabs(o) > big ? fabs(o) : big;
                }
            }
            CHECKF(worst <= 1e-5 * big, "gdn_step %dx%d against double: %g of %g", dk, dv, worst, big);
            free(S);
        }
        if (v != s) {
            memcpy(sb, s0, sizeof(float) * (size_t)(dk * dv));
            v->gdn_step(&b);
            const double eo = max_rel(ob, oa, (size_t)(n * dv)), es = max_rel(sb, sa, (size_t)(dk * dv));
            CHECKF(eo < 1e-5 && es < 1e-5, "gdn_step twin %dx%d: out %g, state %g", dk, dv, eo, es);
        }
        /* chunked vs recurrent: 1e-5 relative in float (measured: under 5e-7) */
        for (int impl = 0; impl < (v != s ? 2 : 1); impl++) {
            memcpy(sb, s0, sizeof(float) * (size_t)(dk * dv));
            (impl ? v : s)->gdn_chunk(&b);
            const double eo = max_rel(ob, oa, (size_t)(n * dv)), es = max_rel(sb, sa, (size_t)(dk * dv));
            CHECKF(eo < 1e-5 && es < 1e-5, "gdn_chunk (%s) %dx%d against the recurrent form: out %g, state %g",
                   impl ? "simd" : "scalar", dk, dv, eo, es);
        }
        /* the chunked form cut at a chunk boundary gives the same bits as in one call */
        {
            memcpy(sb, s0, sizeof(float) * (size_t)(dk * dv));
            s->gdn_chunk(&b);
            float *oc = malloc(sizeof(float) * (size_t)(n * dv)), *sc = malloc(sizeof(float) * (size_t)(dk * dv));
            memcpy(sc, s0, sizeof(float) * (size_t)(dk * dv));
            const int cut = KERN_GDN_CHUNK - pos0 + KERN_GDN_CHUNK; /* absolute position 32 */
            kern_gdn c1 = b, c2 = b;
            c1.n = cut;
            c1.s = sc;
            c1.o = oc;
            c2.n = n - cut;
            c2.pos0 = pos0 + cut;
            c2.q = q + cut * dk;
            c2.k = k + cut * dk;
            c2.v = vv + cut * dv;
            c2.g = g + cut;
            c2.beta = beta + cut;
            c2.s = sc;
            c2.o = oc + cut * dv;
            s->gdn_chunk(&c1);
            s->gdn_chunk(&c2);
            CHECK(memcmp(oc, ob, sizeof(float) * (size_t)(n * dv)) == 0 &&
                  memcmp(sc, sb, sizeof(float) * (size_t)(dk * dv)) == 0);
            free(oc);
            free(sc);
        }
        free(q);
        free(k);
        free(vv);
        free(s0);
        free(sa);
        free(sb);
        free(oa);
        free(ob);
        free(scratch);
    }
}

/* Routing: softmax, the top k (ties to the lower id), renormalized; and
 * the small helpers against their formulas. */
static void test_route(void) {
    const float lg[6] = {0.5f, 2.0f, -1.0f, 2.0f, 1.0f, -3.0f};
    int32_t ids[3];
    float w[3];
    kern_moe_route(lg, 6, 3, 1, 1.0f, ids, w);
    CHECKF(ids[0] == 1 && ids[1] == 3 && ids[2] == 4, "route ids %d %d %d", ids[0], ids[1], ids[2]);
    const double e1 = exp(2.0), e4 = exp(1.0), sum = 2 * e1 + e4;
    CHECK(fabs(w[0] - e1 / sum) < 1e-6 && fabs(w[1] - e1 / sum) < 1e-6 && fabs(w[2] - e4 / sum) < 1e-6);
    kern_moe_route(lg, 6, 2, 0, 2.0f, ids, w);
    double all = 0;
    for (int e = 0; e < 6; e++) all += exp(lg[e]);
    CHECK(ids[0] == 1 && ids[1] == 3 && fabs(w[0] - 2 * e1 / all) < 1e-6);
    /* DeepSeek-V3's routing: sigmoid probabilities, chosen by probability
     * + bias within the best groups, weighted by the unbiased ones */
    float p[6], sel[6];
    const double s1 = 1 / (1 + exp(-2.0)), s4 = 1 / (1 + exp(-1.0)), s0 = 1 / (1 + exp(-0.5));
    kern_moe_gate g = {1, NULL, 0, 0, 1, 2.5f};
    memcpy(p, lg, sizeof p);
    kern_moe_route_sel(p, &g, 6, 2, sel, ids, w);
    CHECK(ids[0] == 1 && ids[1] == 3 && fabs(w[0] - 1.25) < 1e-6 && fabs(w[1] - 1.25) < 1e-6);
    const float bias[6] = {0, 0, 0, 0, 5, 0};
    g = (kern_moe_gate){1, bias, 0, 0, 0, 1.0f};
    memcpy(p, lg, sizeof p);
    kern_moe_route_sel(p, &g, 6, 2, sel, ids, w);
    CHECKF(ids[0] == 4 && ids[1] == 1 && fabs(w[0] - s4) < 1e-6 && fabs(w[1] - s1) < 1e-6, "biased route %d %d", ids[0],
           ids[1]);
    g = (kern_moe_gate){1, NULL, 3, 1, 0, 1.0f}; /* groups {0,1} {2,3} {4,5}: the first scores highest */
    memcpy(p, lg, sizeof p);
    kern_moe_route_sel(p, &g, 6, 2, sel, ids, w);
    CHECKF(ids[0] == 1 && ids[1] == 0 && fabs(w[1] - s0) < 1e-6, "grouped route %d %d", ids[0], ids[1]);
    g = (kern_moe_gate){0, NULL, 0, 0, 0, 2.0f}; /* the softmax: kern_moe_route's bits */
    memcpy(p, lg, sizeof p);
    kern_moe_route_sel(p, &g, 6, 2, sel, ids, w);
    float w2[2];
    int32_t ids2[2];
    kern_moe_route(lg, 6, 2, 0, 2.0f, ids2, w2);
    CHECK(ids[0] == ids2[0] && ids[1] == ids2[1] && w[0] == w2[0] && w[1] == w2[1]);
    CHECK(fabsf(kern_softplus(0.0f) - logf(2.0f)) < 1e-7f && kern_softplus(30.0f) == 30.0f);
    CHECK(fabsf(kern_sigmoid(0.0f) - 0.5f) < 1e-7f);
    float x[3] = {3.0f, 0.0f, 4.0f};
    kern_l2norm(x, 3, 1e-6f);
    CHECK(fabsf(x[0] - 0.6f) < 1e-7f && fabsf(x[2] - 0.8f) < 1e-7f);
    float z[2] = {0.0f, 0.0f}, out[2], wn[2] = {1.0f, 1.0f};
    kern_l2norm(z, 2, 1e-6f); /* the norm floor: zeros stay zero */
    CHECK(z[0] == 0.0f && z[1] == 0.0f);
    const float xr[2] = {1.0f, -1.0f}, zr[2] = {0.0f, 10.0f};
    kern_rmsnorm_gated(out, xr, wn, zr, 2, 0.0f);
    CHECK(out[0] == 0.0f && fabsf(out[1] + 10.0f / (1.0f + expf(-10.0f))) < 1e-5f);
}

static void count_task(void *ud, int ith, int nth) {
    long lo, hi;
    thread_pool_range(1000, ith, nth, &lo, &hi);
    __atomic_add_fetch((long *)ud, hi - lo, __ATOMIC_RELAXED);
}

int main(void) {
    quant_init();
    const kern_ops *s = kern_ops_at(QUANT_ISA_SCALAR);
    CHECK(s != NULL);
    CHECK(kern_ops_best() != NULL);
    /* every level's set that differs from the level below's (x86-64: the
     * AVX2 set, which the AVX-512 level shares; aarch64: neon and dotprod) */
    for (int isa = QUANT_ISA_SCALAR + 1; isa <= quant_cpu_isa(); isa++) {
        const kern_ops *v = kern_ops_at(isa);
        CHECK(v != NULL);
        if (!v || v == kern_ops_at(isa - 1)) continue;
        test_ops(s, v);
        test_attn(s, v);
        test_attn_q8(s, v);
    }
    /* the scalar set against itself: the test harness agrees with itself */
    test_ops(s, s);
    test_rope_factors();
    {
        const kern_ssm_ops *ss = kern_ssm_ops_at(QUANT_ISA_SCALAR), *sv = kern_ssm_ops_at(QUANT_ISA_AVX2);
        CHECK(ss != NULL && kern_ssm_ops_best() != NULL);
        if (ss) test_conv(ss, sv ? sv : ss);
        if (ss) test_gdn(ss, sv ? sv : ss);
        if (ss) test_conv_bias(ss, sv ? sv : ss);
        if (ss) test_ssd(ss, sv ? sv : ss);
        test_route();
    }
    test_tiles();
    test_x8_kernels(QUANT_Q4_0);
    test_x8_kernels(QUANT_Q8_0);
    test_x8_kernels(QUANT_Q4_K);
    test_x8_kernels(QUANT_Q6_K);

    thread_pool *pool = thread_pool_new(2);
    CHECK(pool != NULL);
    if (pool) {
        long total = 0;
        for (int i = 0; i < 200; i++) thread_pool_run(pool, count_task, &total);
        CHECK(total == 200 * 1000);
        const int types[] = {QUANT_Q8_0, QUANT_Q4_0, QUANT_Q4_K, QUANT_Q6_K, QUANT_F16};
        for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) test_matmul(pool, types[i]);
        test_matmul_x8(pool, QUANT_Q4_0);
        test_matmul_x8(pool, QUANT_Q8_0);
        test_matmul_x8(pool, QUANT_Q4_K);
        test_matmul_x8(pool, QUANT_Q6_K);
        thread_pool_free(pool);
    }
    return t_done();
}
