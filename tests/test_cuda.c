/*
 * The CUDA kernels (src/backend/cuda) against their scalar twins, on
 * random data, odd sizes and boundaries: on the CPU by the emulator
 * (test_cuda: tests/emucuda.h, tests/cuda_emu.cpp) or on a GPU
 * (test_cuda_gpu: tests/cuda_dev.c; skipped where there is none).  Tolerances, per op:
 *   matvec, gemm        |y - ref| <= tol * sum_i |w_i x_i| + 1e-6 with the
 *                       reference in double over the same dequantized (and
 *                       for gemm F16-rounded) values: tol 2e-5 (matvec,
 *                       F32 sums in another order), 1e-4 (gemm, tensor-core
 *                       F32 accumulation);
 *   get_rows            1e-6 of the row's largest magnitude (the same
 *                       dequantization arithmetic, maybe fused otherwise);
 *   rmsnorm             1e-5 of the output's largest magnitude;
 *   swiglu, add         1e-6 relative;
 *   rope                2e-3 of the row's largest magnitude (the angle
 *                       pos * inv_freq in F32 against the CPU's running
 *                       product; positions below 4096);
 *   attention           2e-4 absolute (values in [-1, 1]; the softmax in
 *                       another order than kern_attn_f16's);
 *   argmax, kv_write    exact (the Q8_0 write: the reference quantizer's
 *                       bytes);
 *   Q8_0 attention      2e-4 absolute (per-block products summed in float
 *                       where the CPU sums integers);
 *   Gated DeltaNet      gates, convolution, gated attention's gate: the
 *                       twin's order, bit-equal on the emulator, 2e-6
 *                       relative on a GPU (its expf and logf); L2 and gated
 *                       RMS norms 2e-6 relative (squares summed in double
 *                       per thread); the delta rule 2e-5 of the largest
 *                       magnitude (dots as warp sums);
 *   MoE                 routing ids exact and weights bit-equal on the
 *                       emulator (the twin's serial order; 2e-6 relative on
 *                       a GPU), gather, bias rows exact, the weighted sum
 *                       bit-equal (a GPU may fuse its multiply-adds: 1e-6
 *                       relative), clamped SwiGLU, relu^2, GELU as the
 *                       gates.
 */
#include "backend/cuda_kernels.h"
#include "cuda_run.h"
#include "kernels/ops.h"
#include "kernels/ssm.h"
#include "quant/quant.h"
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static uint32_t rnd(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state >> 16);
}

/* uniform in [-1, 1) */
static float rndf(void) { return (float)(rnd() & 0xffffff) / 8388608.0f - 1.0f; }

static int rndi(int n) { return (int)(rnd() % (uint32_t)n); }

static void fill(float *x, size_t n, float scale) {
    for (size_t i = 0; i < n; i++) x[i] = rndf() * scale;
}

static float f16_round(float x) { return quant_f16_to_f32(quant_f32_to_f16(x)); }

/* rows x n weights of type t quantized by the reference quantizer, and
 * their dequantized values (the twin's view) in deq [rows][n]. */
static uint8_t *make_weights(int t, int rows, int n, size_t *stride, float *deq) {
    const quant_traits *tr = quant_get(t);
    *stride = quant_row_size(t, n);
    uint8_t *w = malloc(*stride * (size_t)rows);
    float *src = malloc(sizeof(float) * (size_t)n);
    for (int r = 0; r < rows; r++) {
        fill(src, (size_t)n, 1.0f);
        if (r % 3 == 1) src[rndi(n)] = 4.0f; /* an outlier, for scales that differ by sub-block */
        tr->from_f32(src, w + (size_t)r * *stride, n);
        tr->to_f32(w + (size_t)r * *stride, deq + (size_t)r * n, n);
    }
    free(src);
    return w;
}

static const int types[] = {QUANT_F32,  QUANT_F16,  QUANT_BF16, QUANT_Q4_0,   QUANT_Q4_1,
                            QUANT_Q5_0, QUANT_Q5_1, QUANT_Q8_0, QUANT_Q2_K,   QUANT_Q3_K,
                            QUANT_Q4_K, QUANT_Q5_K, QUANT_Q6_K, QUANT_IQ4_NL, QUANT_IQ4_XS};
#define N_TYPES (int)(sizeof(types) / sizeof(types[0]))

/* Row lengths to try for type t: the block size, odd multiples of it, and
 * for the float types lengths that are not multiples of 8. */
static int pick_n(int t, int i) {
    const int blck = quant_get(t)->blck;
    if (blck == 1) {
        static const int ns[] = {1, 7, 33, 300, 1029};
        return ns[i % 5];
    }
    static const int mult[] = {1, 3, 9, 17, 2};
    return blck * mult[i % 5];
}

static void test_matvec(void) {
    for (int ti = 0; ti < N_TYPES; ti++) {
        const int t = types[ti];
        int bad = 0;
        /* five chosen row lengths, then three random shapes */
        for (int i = 0; i < 8; i++) {
            const int blck = quant_get(t)->blck;
            const int n = i < 5 ? pick_n(t, i) : (blck == 1 ? 1 + rndi(2000) : blck * (1 + rndi(blck == 32 ? 60 : 8)));
            const int rows = 1 + rndi(i < 5 ? 41 : 90), nv = i < 5 ? 1 + (i * 3) % 8 : 1 + rndi(8);
            size_t ws;
            float *deq = malloc(sizeof(float) * (size_t)rows * n);
            uint8_t *w = make_weights(t, rows, n, &ws, deq);
            /* strides past the row ends: odd ones, or multiples of 4 floats (aligned loads) */
            const int64_t xs = i % 2 ? n + 3 : (n + 3) / 4 * 4 + 4, ys = rows + 1;
            float *x = malloc(sizeof(float) * (size_t)xs * nv), *y = malloc(sizeof(float) * (size_t)ys * nv);
            fill(x, (size_t)xs * nv, 1.0f);
            for (int j = 0; j < ys * nv; j++) y[j] = NAN;
            CHECK(cr_matvec(t, w, (int64_t)ws, x, xs, y, ys, rows, n, nv) == 0);
            for (int v = 0; v < nv; v++) {
                for (int r = 0; r < rows; r++) {
                    double ref = 0, mag = 0;
                    for (int j = 0; j < n; j++) {
                        ref += (double)deq[(size_t)r * n + j] * x[(size_t)v * xs + j];
                        mag += fabs((double)deq[(size_t)r * n + j] * x[(size_t)v * xs + j]);
                    }
                    const float got = y[(size_t)v * ys + r];
                    if (!(fabs(got - ref) <= 2e-5 * mag + 1e-6) && bad++ < 3)
                        CHECKF(0, "matvec %s n=%d rows=%d vec %d row %d: %g vs %g", quant_get(t)->name, n, rows, v, r,
                               got, ref);
                }
                CHECK(isnan(y[(size_t)v * ys + rows])); /* nothing written past the rows */
            }
            free(deq);
            free(w);
            free(x);
            free(y);
        }
        CHECKF(bad == 0, "matvec %s: %d wrong", quant_get(t)->name, bad);
    }
}

static void test_gemm(void) {
    static const int ms[] = {1, 17, 64, 70}, ns[] = {8, 65, 130, 3};
    for (int ti = 0; ti < N_TYPES; ti++) {
        const int t = types[ti];
        int bad = 0;
        /* four chosen shapes, then two random ones */
        for (int i = 0; i < 6; i++) {
            const int m = i < 4 ? ms[i] : 1 + rndi(150), n = i < 4 ? ns[(i + ti) % 4] : 1 + rndi(150);
            const int blck = quant_get(t)->blck;
            const int k = i >= 4 ? (blck == 1 ? 1 + rndi(300) : blck * (1 + rndi(3)))
                                 : (blck == 1 ? (i == 3 ? 200 : 96 + 32 * i) : blck * (1 + (i % 2) * 2));
            size_t ws;
            float *deq = malloc(sizeof(float) * (size_t)n * k);
            uint8_t *w = make_weights(t, n, k, &ws, deq);
            const int64_t xs = k + 1, ys = n + 2;
            float *x = malloc(sizeof(float) * (size_t)xs * m), *y = malloc(sizeof(float) * (size_t)ys * m);
            fill(x, (size_t)xs * m, 1.0f);
            for (int j = 0; j < ys * m; j++) y[j] = NAN;
            CHECK(cr_gemm(t, x, xs, w, (int64_t)ws, y, ys, m, n, k) == 0);
            for (int a = 0; a < m; a++) {
                for (int b = 0; b < n; b++) {
                    double ref = 0, mag = 0;
                    for (int j = 0; j < k; j++) {
                        const double p = (double)f16_round(x[(size_t)a * xs + j]) * f16_round(deq[(size_t)b * k + j]);
                        ref += p;
                        mag += fabs(p);
                    }
                    const float got = y[(size_t)a * ys + b];
                    if (!(fabs(got - ref) <= 1e-4 * mag + 1e-6) && bad++ < 3)
                        CHECKF(0, "gemm %s m=%d n=%d k=%d at %d,%d: %g vs %g", quant_get(t)->name, m, n, k, a, b, got,
                               ref);
                }
                CHECK(isnan(y[(size_t)a * ys + n]) && isnan(y[(size_t)a * ys + n + 1]));
            }
            free(deq);
            free(w);
            free(x);
            free(y);
        }
        CHECKF(bad == 0, "gemm %s: %d wrong", quant_get(t)->name, bad);
    }
}

static void test_get_rows(void) {
    for (int ti = 0; ti < N_TYPES; ti++) {
        const int t = types[ti];
        const int n = pick_n(t, ti + 1), rows = 13, n_ids = 6;
        size_t ws;
        float *deq = malloc(sizeof(float) * (size_t)rows * n);
        uint8_t *w = make_weights(t, rows, n, &ws, deq);
        int32_t ids[6] = {0, 12, 5, 5, 7, 1};
        const int64_t os = n + 5;
        float *out = malloc(sizeof(float) * (size_t)os * n_ids);
        for (int j = 0; j < os * n_ids; j++) out[j] = NAN;
        CHECK(cr_get_rows(t, w, (int64_t)ws, ids, n_ids, out, os, n) == 0);
        int bad = 0;
        for (int i = 0; i < n_ids; i++) {
            float mx = 0;
            for (int j = 0; j < n; j++) mx = fmaxf(mx, fabsf(deq[(size_t)ids[i] * n + j]));
            for (int j = 0; j < n; j++)
                if (!(fabsf(out[(size_t)i * os + j] - deq[(size_t)ids[i] * n + j]) <= 1e-6f * mx)) bad++;
            CHECK(isnan(out[(size_t)i * os + n]));
        }
        CHECKF(bad == 0, "get_rows %s n=%d: %d wrong", quant_get(t)->name, n, bad);
        /* the blocks 2 bytes off 16-byte alignment, as a file's tensor may
         * leave them (the dequantizers' byte-wise paths) */
        if (quant_get(t)->blck > 1) {
            uint8_t *shifted = malloc(ws * rows + 2);
            memcpy(shifted + 2, w, ws * rows);
            float *out2 = malloc(sizeof(float) * (size_t)os * n_ids);
            memcpy(out2, out, sizeof(float) * (size_t)os * n_ids);
            CHECK(cr_get_rows(t, shifted + 2, (int64_t)ws, ids, n_ids, out2, os, n) == 0);
            CHECKF(memcmp(out2, out, sizeof(float) * (size_t)os * n_ids) == 0, "get_rows %s off alignment",
                   quant_get(t)->name);
            free(shifted);
            free(out2);
        }
        free(deq);
        free(w);
        free(out);
    }
}

static void test_rmsnorm(void) {
    static const int ns[] = {1, 31, 257, 4096};
    for (int i = 0; i < 8; i++) {
        const int n = ns[i % 4], rows = 3, threads = i < 4 ? 32 : 256;
        const int64_t st = n + 7;
        float *x = malloc(sizeof(float) * (size_t)st * rows), *out = malloc(sizeof(float) * (size_t)st * rows);
        float *w = malloc(sizeof(float) * (size_t)n), *ref = malloc(sizeof(float) * (size_t)n);
        fill(x, (size_t)st * rows, 3.0f);
        fill(w, (size_t)n, 2.0f);
        const float *wp = i % 2 ? w : NULL;
        cr_rmsnorm(x, st, wp, out, st, rows, n, 1e-6f, threads);
        int bad = 0;
        for (int r = 0; r < rows; r++) {
            kern_rmsnorm(ref, x + r * st, wp, n, 1e-6f);
            float mx = 0;
            for (int j = 0; j < n; j++) mx = fmaxf(mx, fabsf(ref[j]));
            for (int j = 0; j < n; j++)
                if (!(fabsf(out[r * st + j] - ref[j]) <= 1e-5f * mx)) bad++;
        }
        CHECKF(bad == 0, "rmsnorm n=%d threads=%d: %d wrong", n, threads, bad);
        /* in place */
        float *y = malloc(sizeof(float) * (size_t)st * rows);
        memcpy(y, x, sizeof(float) * (size_t)st * rows);
        cr_rmsnorm(y, st, wp, y, st, rows, n, 1e-6f, threads);
        CHECK(memcmp(y, out, sizeof(float) * (size_t)n) == 0);
        free(x);
        free(out);
        free(w);
        free(ref);
        free(y);
    }
}

/* Cases: plain, NeoX, partial rotation, attn_factor, linear scaling,
 * frequency factors, YaRN (normal and NeoX); the table from
 * backend_cuda_rope_freqs, the reference kern_rope_table + kern_rope_apply. */
static void test_rope(void) {
    for (int i = 0; i < 8; i++) {
        const int hd = i < 3 ? 64 : 128, n_rot = i == 2 ? 32 : (i == 5 ? 96 : hd), n_head = 3, n_tok = 5;
        const int neox = i % 2;
        const int64_t ts = (int64_t)n_head * hd + 4;
        kern_rope rp = {.n_rot = n_rot,
                        .neox = neox,
                        .base = i >= 6 ? 1e6f : 10000.0f,
                        .freq_scale = i == 4 ? 0.25f : 1.0f,
                        .attn_factor = i == 3 ? 1.5f : 1.0f};
        float ff[64];
        for (int j = 0; j < n_rot / 2; j++) ff[j] = 1.0f + (float)j / 8.0f;
        if (i == 5) rp.freq_factors = ff;
        if (i >= 6) { /* YaRN, a factor of 4 over 4096 positions */
            rp.freq_scale = 0.25f;
            rp.ext_factor = 1.0f;
            rp.beta_fast = 32.0f;
            rp.beta_slow = 1.0f;
            rp.n_ctx_orig = 4096;
        }
        float inv_freq[128], mscale;
        backend_cuda_rope_freqs(&rp, inv_freq, &mscale);
        int32_t pos[5];
        for (int u = 0; u < n_tok; u++) pos[u] = u == 0 ? 0 : rndi(4096);
        float *x = malloc(sizeof(float) * (size_t)ts * n_tok), *ref = malloc(sizeof(float) * (size_t)ts * n_tok);
        fill(x, (size_t)ts * n_tok, 1.0f);
        memcpy(ref, x, sizeof(float) * (size_t)ts * n_tok);
        cr_rope(x, ts, n_tok, n_head, hd, n_rot, neox, pos, inv_freq, mscale);
        float cs[256];
        int bad = 0;
        for (int u = 0; u < n_tok; u++) {
            kern_rope_table(&rp, pos[u], cs);
            kern_rope_apply(&rp, cs, ref + u * ts, n_head, hd);
            for (int j = 0; j < ts; j++)
                if (!(fabsf(x[u * ts + j] - ref[u * ts + j]) <= 2e-3f * mscale * 1.5f)) bad++;
        }
        CHECKF(bad == 0, "rope case %d (neox %d, n_rot %d): %d wrong", i, neox, n_rot, bad);
        free(x);
        free(ref);
    }
}

static void test_elementwise(void) {
    static const int ns[] = {1, 1000, 4097};
    for (int i = 0; i < 3; i++) {
        const int n = ns[i];
        float *g = malloc(sizeof(float) * n), *u = malloc(sizeof(float) * n), *ref = malloc(sizeof(float) * n);
        fill(g, (size_t)n, 8.0f);
        fill(u, (size_t)n, 2.0f);
        memcpy(ref, g, sizeof(float) * n);
        kern_swiglu(ref, u, n);
        cr_swiglu(g, u, n);
        int bad = 0;
        for (int j = 0; j < n; j++)
            if (!(fabsf(g[j] - ref[j]) <= 1e-6f * fmaxf(1.0f, fabsf(ref[j])))) bad++;
        CHECKF(bad == 0, "swiglu n=%d: %d wrong", n, bad);
        memcpy(ref, g, sizeof(float) * n);
        kern_add(ref, u, n);
        cr_add(g, u, n);
        CHECKF(memcmp(g, ref, sizeof(float) * n) == 0, "add n=%d", n);
        free(g);
        free(u);
        free(ref);
    }
}

static void test_argmax(void) {
    static const int ns[] = {1, 5, 33, 1000, 50000};
    static const int threads[] = {32, 256, 1024};
    for (int i = 0; i < 15; i++) {
        const int n = ns[i % 5], rows = 3, th = threads[i / 5];
        const int64_t st = n + 1;
        float *x = malloc(sizeof(float) * (size_t)st * rows);
        fill(x, (size_t)st * rows, 10.0f);
        if (n > 3) { /* a tie: the first wins */
            x[n / 2] = 20.0f;
            x[n - 1] = 20.0f;
        }
        for (int j = 0; j < n; j++) x[st + j] = -5.0f; /* all equal */
        x[2 * st + n] = 1e9f;                          /* past the row: not read */
        int32_t out[3];
        cr_argmax(x, st, rows, n, out, th);
        for (int r = 0; r < rows; r++) {
            int best = 0;
            for (int j = 1; j < n; j++)
                if (x[r * st + j] > x[r * st + best]) best = j;
            CHECKF(out[r] == best, "argmax n=%d threads=%d row %d: %d vs %d", n, th, r, out[r], best);
        }
        free(x);
    }
}

static void test_kv_write(void) {
    const int n = 200, n_tok = 4, n_cells = 10;
    const int64_t cs = 2 * n + 8;
    float src[4 * 203];
    fill(src, 4 * 203, 70000.0f / 256.0f);
    src[3] = 65520.0f; /* rounds to infinity */
    src[4] = 1e-7f;    /* a subnormal half */
    src[5] = 2049.0f;  /* a tie, to even */
    src[6] = -0.0f;
    uint16_t *cache = calloc((size_t)cs * n_cells, 2);
    int32_t cell[4] = {7, 2, 9, 0};
    cr_kv_write(src, 203, n_tok, cache, cs, n, cell, n);
    int bad = 0;
    for (int u = 0; u < n_tok; u++)
        for (int j = 0; j < n; j++)
            if (cache[cell[u] * cs + n + j] != quant_f32_to_f16(src[u * 203 + j])) bad++;
    CHECKF(bad == 0, "kv_write: %d wrong", bad);
    CHECK(cache[7 * cs + n - 1] == 0 && cache[7 * cs + 2 * n] == 0);
    free(cache);
}

/* A paged F16 cache of n_blocks 16-cell blocks with random contents, and
 * per sequence a block table of distinct blocks in random order. */
typedef struct {
    uint16_t *k, *v;
    int64_t cell_stride;
    int n_blocks;
} cache;

static cache make_cache(int n_blocks, int n_kv_head, int hd) {
    cache c = {.cell_stride = (int64_t)n_kv_head * hd + 2, .n_blocks = n_blocks};
    const size_t n = (size_t)n_blocks * 16 * c.cell_stride;
    c.k = malloc(n * 2);
    c.v = malloc(n * 2);
    for (size_t i = 0; i < n; i++) {
        c.k[i] = quant_f32_to_f16(rndf());
        c.v[i] = quant_f32_to_f16(rndf());
    }
    return c;
}

static void ref_attn_opts(const cache *c, const float *q, const int32_t *table, int n_pos, int kvh, int hd, float scale,
                          int window, const float *sink, float *out) {
    float *scratch = malloc(sizeof(float) * kern_attn_scratch(1, 1, hd, n_pos));
    kern_attn_f16 a = {.q = q,
                       .nq = 1,
                       .nt = 1,
                       .tok_stride = (size_t)hd,
                       .hd = hd,
                       .n_pos = n_pos,
                       .blocks = table,
                       .block_shift = 4,
                       .k = c->k + (size_t)kvh * hd,
                       .v = c->v + (size_t)kvh * hd,
                       .block_stride = 16 * (size_t)c->cell_stride,
                       .row_stride = (size_t)c->cell_stride,
                       .scale = scale,
                       .acc_f32 = 1,
                       .window = window,
                       .sink = sink,
                       .out = out,
                       .scratch = scratch};
    kern_ops_at(QUANT_ISA_SCALAR)->attn_f16(&a);
    free(scratch);
}

static void ref_attn(const cache *c, const float *q, const int32_t *table, int n_pos, int kvh, int hd, float scale,
                     float *out) {
    ref_attn_opts(c, q, table, n_pos, kvh, hd, scale, 0, NULL, out);
}

/* block tables [n_seq][table_stride]: a permutation of the cache's blocks dealt out */
static int32_t *make_tables(int n_blocks, int n_seq, int table_stride) {
    int32_t *perm = malloc(sizeof(int32_t) * n_blocks);
    for (int i = 0; i < n_blocks; i++) perm[i] = i;
    for (int i = n_blocks - 1; i > 0; i--) {
        const int j = rndi(i + 1);
        const int32_t s = perm[i];
        perm[i] = perm[j];
        perm[j] = s;
    }
    int32_t *tables = malloc(sizeof(int32_t) * (size_t)n_seq * table_stride);
    for (int i = 0; i < n_seq * table_stride; i++) tables[i] = perm[i % n_blocks];
    free(perm);
    return tables;
}

static void test_attn_decode(void) {
    static const int hds[] = {64, 80, 128, 256, 64, 128};
    for (int i = 0; i < 6; i++) {
        /* cases 4 and 5: a sliding window (past the first split) and sinks */
        const int window = i == 4 ? 40 : i == 5 ? 7 : 0;
        float sinks[8];
        for (int h = 0; h < 8; h++) sinks[h] = rndf() * 3.0f;
        const float *sk = i >= 4 ? sinks : NULL;
        const int hd = hds[i], n_seq = 3, n_head = i == 1 ? 2 : 8, n_kv_head = i == 1 ? 2 : 2, table_stride = 8;
        const cache c = make_cache(n_seq * table_stride, n_kv_head, hd);
        int32_t *tables = make_tables(c.n_blocks, n_seq, table_stride);
        int32_t n_kv[3] = {1, 16 + rndi(40), 97 + i};
        const int split_len = i % 2 ? 32 : 64, n_split = (97 + i + split_len - 1) / split_len + 1;
        const int64_t qs = (int64_t)n_head * hd + 3;
        float *q = malloc(sizeof(float) * (size_t)qs * n_seq), *out = malloc(sizeof(float) * (size_t)qs * n_seq);
        float *ref = malloc(sizeof(float) * hd);
        fill(q, (size_t)qs * n_seq, 2.0f);
        const float scale = 1.0f / sqrtf((float)hd);
        cr_attn_decode(q, qs, c.k, c.v, c.cell_stride, tables, table_stride, n_kv, n_seq, n_head, n_kv_head, hd, scale,
                       split_len, n_split, window, sk, out, qs);
        int bad = 0;
        for (int s = 0; s < n_seq; s++)
            for (int h = 0; h < n_head; h++) {
                ref_attn_opts(&c, q + s * qs + h * hd, tables + s * table_stride, n_kv[s], h / (n_head / n_kv_head), hd,
                              scale, window, sk ? sk + h : NULL, ref);
                for (int d = 0; d < hd; d++)
                    if (!(fabsf(out[s * qs + h * hd + d] - ref[d]) <= 2e-4f)) bad++;
            }
        CHECKF(bad == 0, "attention decode hd=%d split %d x %d window %d sinks %d: %d wrong", hd, n_split, split_len,
               window, sk != NULL, bad);
        free(c.k);
        free(c.v);
        free(tables);
        free(q);
        free(out);
        free(ref);
    }
}

static void test_attn_prefill(void) {
    static const int pasts[] = {0, 5, 37, 16}, toks[] = {1, 6, 19, 16}, hds[] = {64, 96, 128, 256};
    for (int i = 0; i < 4; i++) {
        const int hd = hds[i], n_head = 4, n_kv_head = i == 2 ? 4 : 1, n_past = pasts[i], n_tok = toks[i];
        const int table_stride = (n_past + n_tok + 15) / 16 + 1;
        const cache c = make_cache(table_stride + 2, n_kv_head, hd);
        int32_t *table = make_tables(c.n_blocks, 1, table_stride);
        const int64_t ts = (int64_t)n_head * hd + 1;
        float *q = malloc(sizeof(float) * (size_t)ts * n_tok), *out = malloc(sizeof(float) * (size_t)ts * n_tok);
        float *ref = malloc(sizeof(float) * hd);
        fill(q, (size_t)ts * n_tok, 2.0f);
        const float scale = 1.0f / sqrtf((float)hd);
        cr_attn_prefill(q, ts, c.k, c.v, c.cell_stride, table, n_past, n_tok, n_head, n_kv_head, hd, scale, out);
        int bad = 0;
        for (int u = 0; u < n_tok; u++)
            for (int h = 0; h < n_head; h++) {
                ref_attn(&c, q + u * ts + h * hd, table, n_past + u + 1, h / (n_head / n_kv_head), hd, scale, ref);
                for (int d = 0; d < hd; d++)
                    if (!(fabsf(out[u * ts + h * hd + d] - ref[d]) <= 2e-4f)) bad++;
            }
        CHECKF(bad == 0, "attention prefill hd=%d past %d tokens %d: %d wrong", hd, n_past, n_tok, bad);
        free(c.k);
        free(c.v);
        free(table);
        free(q);
        free(out);
        free(ref);
    }
}

static int contains(const uint8_t *p, size_t n, const char *s) {
    const size_t m = strlen(s);
    for (size_t i = 0; i + m <= n; i++)
        if (p[i] == (uint8_t)s[0] && memcmp(p + i, s, m) == 0) return 1;
    return 0;
}

/* A build with nvcc embeds the fatbin: its header's magic, and every
 * kernel the emulator checks is in it by name. */
static void test_fatbin(void) {
    size_t n;
    const uint8_t *fb = backend_cuda_fatbin(&n);
    if (!fb) {
        CHECK(n == 0);
        printf("no fatbin in this build (KILN_CUDA found no nvcc or was OFF)\n");
        return;
    }
    CHECK(n > 16 && ((uintptr_t)fb & 7) == 0);
    CHECK(fb[0] == 0x50 && fb[1] == 0xed && fb[2] == 0x55 && fb[3] == 0xba);
    static const char *names[] = {
        "kcu_matvec_f32",   "kcu_matvec_f16",    "kcu_matvec_bf16", "kcu_matvec_q4_0", "kcu_matvec_q8_0",
        "kcu_matvec_q4_k",  "kcu_matvec_q5_k",   "kcu_matvec_q6_k", "kcu_gemm_f16",    "kcu_gemm_q4_k",
        "kcu_gemm_q6_k",    "kcu_get_rows_q8_0", "kcu_rmsnorm",     "kcu_rope",        "kcu_swiglu",
        "kcu_add",          "kcu_argmax",        "kcu_kv_write",    "kcu_attn_decode", "kcu_attn_combine",
        "kcu_attn_prefill", "kcu_gdn_rec",       "kcu_conv_silu",   "kcu_moe_route",   "kcu_moe_combine"};
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
        CHECKF(contains(fb, n, names[i]), "%s not in the fatbin", names[i]);
}

/* The Q8_0 cache: rows written by the kernel are the reference
 * quantizer's bytes; decode attention over random Q8_0 rows against
 * kern_attn_q8's twin within 2e-4 (the query's blocks rounded as the CPU
 * rounds them; products summed in float rather than per-block integers). */
static void test_kv_q8(void) {
    const int n = 128, n_tok = 3, n_cells = 9;
    const int64_t cs = 2 * (n / 32) * 34 + 6; /* K then V rows, bytes */
    float src[3 * 130];
    fill(src, sizeof src / sizeof src[0], 3.0f);
    src[5] = 0.0f;
    for (int i = 0; i < 32; i++) src[130 + 32 + i] = 0.0f; /* an all-zero block */
    uint8_t *c = calloc((size_t)n_cells * cs, 1), *ref = calloc((size_t)n_cells * cs, 1);
    const int32_t cell[3] = {4, 0, 7};
    const int64_t off = (n / 32) * 34;
    cr_kv_write_q8(src, 130, n_tok, c, cs, off, cell, n);
    for (int t = 0; t < n_tok; t++) quant_get(QUANT_Q8_0)->from_f32(src + t * 130, ref + cell[t] * cs + off, n);
    CHECKF(memcmp(c, ref, (size_t)n_cells * cs) == 0, "kv_write_q8");
    free(c);
    free(ref);
    for (int i = 0; i < 3; i++) {
        const int hd = i == 1 ? 64 : 128, n_seq = 3, n_head = 4, n_kv_head = 2, table_stride = 8;
        const int window = i == 2 ? 21 : 0;
        const int64_t row = (hd / 32) * 34, cstride = n_kv_head * row + 4;
        const int n_blocks = n_seq * table_stride;
        uint8_t *k = malloc((size_t)n_blocks * 16 * cstride), *v = malloc((size_t)n_blocks * 16 * cstride);
        float x[128];
        for (int cc = 0; cc < n_blocks * 16; cc++)
            for (int h = 0; h < n_kv_head; h++) {
                fill(x, (size_t)hd, 1.0f);
                quant_get(QUANT_Q8_0)->from_f32(x, k + cc * cstride + h * row, hd);
                fill(x, (size_t)hd, 1.0f);
                quant_get(QUANT_Q8_0)->from_f32(x, v + cc * cstride + h * row, hd);
            }
        int32_t *tables = make_tables(n_blocks, n_seq, table_stride);
        int32_t n_kv[3] = {1, 20 + rndi(30), 99};
        const int split_len = 32, n_split = 4;
        const int64_t qs = (int64_t)n_head * hd;
        float *q = malloc(sizeof(float) * qs * n_seq), *out = malloc(sizeof(float) * qs * n_seq);
        float sinks[4] = {0.5f, -1.0f, 2.0f, 0.0f}, refo[128];
        fill(q, (size_t)qs * n_seq, 2.0f);
        const float scale = 1.0f / sqrtf((float)hd);
        const float *sk = i == 2 ? sinks : NULL;
        cr_attn_decode_q8(q, qs, k, v, cstride, tables, table_stride, n_kv, n_seq, n_head, n_kv_head, hd, scale,
                          split_len, n_split, window, sk, out, qs);
        int bad = 0;
        for (int s = 0; s < n_seq; s++)
            for (int h = 0; h < n_head; h++) {
                const int kvh = h / (n_head / n_kv_head);
                float *scratch = malloc(sizeof(float) * kern_attn_scratch(1, 1, hd, n_kv[s]));
                kern_attn_q8 a = {.q = q + s * qs + h * hd,
                                  .nq = 1,
                                  .nt = 1,
                                  .tok_stride = (size_t)hd,
                                  .hd = hd,
                                  .n_pos = n_kv[s],
                                  .blocks = tables + s * table_stride,
                                  .block_shift = 4,
                                  .k = k + kvh * row,
                                  .v = v + kvh * row,
                                  .block_stride = 16 * (size_t)cstride,
                                  .row_stride = (size_t)cstride,
                                  .scale = scale,
                                  .window = window,
                                  .sink = sk ? sk + h : NULL,
                                  .out = refo,
                                  .scratch = scratch};
                kern_ops_at(QUANT_ISA_SCALAR)->attn_q8(&a);
                free(scratch);
                for (int d = 0; d < hd; d++)
                    if (!(fabsf(out[s * qs + h * hd + d] - refo[d]) <= 2e-4f)) bad++;
            }
        CHECKF(bad == 0, "attention decode q8 hd=%d window %d: %d wrong", hd, window, bad);
        free(k);
        free(v);
        free(tables);
        free(q);
        free(out);
    }
}

/* ------------------------------------------------ Gated DeltaNet and MoE */

static int on_emu; /* the emulator: the twins' order gives the same bits */

/* a and b agree within rel of the larger magnitude of the pair (exactly
 * on the emulator when exact_on_emu) */
static int close_rel(const float *a, const float *b, size_t n, float rel, int exact_on_emu) {
    int bad = 0;
    for (size_t i = 0; i < n; i++) {
        const float tol = exact_on_emu && on_emu ? 0.0f : rel * fmaxf(1e-3f, fmaxf(fabsf(a[i]), fabsf(b[i])));
        if (!(fabsf(a[i] - b[i]) <= tol)) bad++;
    }
    return bad;
}

static float max_abs(const float *x, size_t n) {
    float m = 0.0f;
    for (size_t i = 0; i < n; i++) m = fmaxf(m, fabsf(x[i]));
    return m;
}

static void test_gdn_gates(void) {
    for (int grouped = 0; grouped < 2; grouped++) {
        const int n = 5, Hk = 2, Hv = 6, r = Hv / Hk;
        float ba[5 * 12], dt[6], sa[6], beta[30], gd[30], rb[30], rg[30];
        fill(ba, sizeof ba / sizeof ba[0], 4.0f);
        fill(dt, 6, 2.0f);
        fill(sa, 6, 1.0f);
        ba[3] = 30.0f; /* softplus' cut-off */
        for (int t = 0; t < n; t++)
            for (int v = 0; v < Hv; v++) {
                const float *row = ba + t * 2 * Hv;
                const float b = grouped ? row[(v / r) * 2 * r + v % r] : row[v];
                const float al = grouped ? row[(v / r) * 2 * r + r + v % r] : row[Hv + v];
                rb[t * Hv + v] = kern_sigmoid(b);
                rg[t * Hv + v] = kern_softplus(al + dt[v]) * sa[v];
            }
        cr_gdn_gates(ba, dt, sa, beta, gd, n, Hv, Hk, grouped);
        CHECKF(close_rel(beta, rb, 30, 2e-6f, 1) == 0, "gdn gates beta (grouped %d)", grouped);
        CHECKF(close_rel(gd, rg, 30, 2e-6f, 1) == 0, "gdn gates gd (grouped %d)", grouped);
    }
}

static void test_conv(void) {
    static const int ns[] = {1, 2, 9}, Ks[] = {4, 4, 3};
    const kern_ssm_ops *ref = kern_ssm_ops_at(QUANT_ISA_SCALAR);
    for (int i = 0; i < 3; i++) {
        const int n = ns[i], K = Ks[i], C = 100;
        const int64_t ldx = C + 3;
        float *x = malloc(sizeof(float) * n * ldx), *w = malloc(sizeof(float) * K * C);
        float *st = malloc(sizeof(float) * (K - 1) * C), *rst = malloc(sizeof(float) * (K - 1) * C);
        float *y = malloc(sizeof(float) * n * C), *ry = malloc(sizeof(float) * n * C);
        fill(x, (size_t)n * ldx, 2.0f);
        fill(w, (size_t)K * C, 1.0f);
        fill(st, (size_t)(K - 1) * C, 2.0f);
        memcpy(rst, st, sizeof(float) * (K - 1) * C);
        kern_conv cv = {n, C, K, x, (size_t)ldx, w, rst, (size_t)C, ry, (size_t)C, NULL};
        ref->conv_silu(&cv);
        cr_conv_silu(x, ldx, w, st, y, n, C, K);
        CHECKF(close_rel(y, ry, (size_t)n * C, 2e-6f, 1) == 0, "conv n=%d K=%d: outputs", n, K);
        CHECKF(memcmp(st, rst, sizeof(float) * (K - 1) * C) == 0, "conv n=%d K=%d: carried state", n, K);
        free(x);
        free(w);
        free(st);
        free(rst);
        free(y);
        free(ry);
    }
}

static void test_gdn_norms(void) {
    static const int ns[] = {33, 128};
    for (int i = 0; i < 2; i++) {
        const int n = ns[i], n_tok = 3, rows = 4;
        const int64_t ts = (int64_t)rows * n + 5;
        float *x = malloc(sizeof(float) * n_tok * ts), *ref = malloc(sizeof(float) * n_tok * ts);
        fill(x, (size_t)n_tok * ts, 3.0f);
        for (int j = 0; j < n; j++) x[ts + n + j] = 0.0f; /* a zero row: eps keeps it zero */
        memcpy(ref, x, sizeof(float) * n_tok * ts);
        for (int t = 0; t < n_tok; t++)
            for (int r = 0; r < rows; r++) kern_l2norm(ref + t * ts + r * n, n, 1e-6f);
        cr_l2norm(x, ts, n_tok, rows, n, 1e-6f);
        CHECKF(close_rel(x, ref, (size_t)n_tok * ts, 2e-6f, 0) == 0, "l2norm n=%d", n);
        const int nr = 7;
        float *o = malloc(sizeof(float) * nr * n), *z = malloc(sizeof(float) * nr * n), *w = malloc(sizeof(float) * n);
        float *ro = malloc(sizeof(float) * nr * n);
        fill(o, (size_t)nr * n, 2.0f);
        fill(z, (size_t)nr * n, 4.0f);
        fill(w, (size_t)n, 1.0f);
        for (int r = 0; r < nr; r++) kern_rmsnorm_gated(ro + r * n, o + r * n, w, z + r * n, n, 1e-6f);
        cr_rmsnorm_gated(o, z, w, nr, n, 1e-6f);
        CHECKF(close_rel(o, ro, (size_t)nr * n, 2e-6f, 0) == 0, "rmsnorm_gated n=%d", n);
        free(x);
        free(ref);
        free(o);
        free(z);
        free(w);
        free(ro);
    }
}

static void test_gdn_rec(void) {
    const kern_ssm_ops *ref = kern_ssm_ops_at(QUANT_ISA_SCALAR);
    for (int c = 0; c < 3; c++) {
        const int Hk = 2, Hv = c == 2 ? 2 : 4, dk = c == 2 ? 128 : c == 1 ? 24 : 64, dv = c == 2 ? 128 : 50;
        const int n = c == 1 ? 1 : 6;
        const int grouped = c == 0;
        const int64_t ld = 2 * Hk * dk + Hv * dv + 5, ld_gb = Hv + 1;
        const size_t S = (size_t)Hv * dv * dk;
        float *qkv = malloc(sizeof(float) * n * ld), *g = malloc(sizeof(float) * n * ld_gb);
        float *beta = malloc(sizeof(float) * n * ld_gb), *st = malloc(sizeof(float) * S),
              *rst = malloc(sizeof(float) * S);
        float *o = malloc(sizeof(float) * n * Hv * dv), *ro = malloc(sizeof(float) * n * Hv * dv);
        fill(qkv, (size_t)n * ld, 1.0f);
        for (int t = 0; t < n; t++)
            for (int h = 0; h < 2 * Hk; h++) kern_l2norm(qkv + t * ld + h * dk, dk, 1e-6f);
        for (int i = 0; i < n * ld_gb; i++) {
            g[i] = -fabsf(rndf()) * 2.0f;
            beta[i] = 0.5f + 0.5f * rndf();
        }
        fill(st, S, 0.3f);
        memcpy(rst, st, sizeof(float) * S);
        const float scale = 1.0f / sqrtf((float)dk);
        for (int h = 0; h < Hv; h++) {
            const int kh = grouped ? h / (Hv / Hk) : h % Hk;
            kern_gdn a = {n,
                          0,
                          dk,
                          dv,
                          qkv + kh * dk,
                          qkv + (Hk + kh) * dk,
                          (size_t)ld,
                          qkv + 2 * Hk * dk + h * dv,
                          (size_t)ld,
                          g + h,
                          beta + h,
                          (size_t)ld_gb,
                          scale,
                          rst + (size_t)h * dv * dk,
                          ro + h * dv,
                          (size_t)Hv * dv,
                          NULL};
            ref->gdn_step(&a);
        }
        cr_gdn_rec(qkv, ld, g, beta, ld_gb, st, c == 1 ? NULL : o, n, Hk, Hv, dk, dv, grouped, scale);
        const float ms = max_abs(rst, S), mo = max_abs(ro, (size_t)n * Hv * dv);
        int bad = 0;
        for (size_t i = 0; i < S; i++) bad += !(fabsf(st[i] - rst[i]) <= 2e-5f * ms);
        for (int i = 0; c != 1 && i < n * Hv * dv; i++) bad += !(fabsf(o[i] - ro[i]) <= 2e-5f * mo);
        CHECKF(bad == 0, "gdn delta rule case %d (Hv %d dk %d dv %d n %d): %d wrong", c, Hv, dk, dv, n, bad);
        free(qkv);
        free(g);
        free(beta);
        free(st);
        free(rst);
        free(o);
        free(ro);
    }
}

static void test_attn_gate(void) {
    const int n = 3, nh = 4, hd = 24;
    float att[3 * 4 * 24], ref[3 * 4 * 24], qg[3 * 4 * 48];
    fill(att, sizeof att / sizeof att[0], 2.0f);
    fill(qg, sizeof qg / sizeof qg[0], 6.0f);
    memcpy(ref, att, sizeof att);
    for (int t = 0; t < n; t++)
        for (int h = 0; h < nh; h++)
            for (int d = 0; d < hd; d++)
                ref[(t * nh + h) * hd + d] *= kern_sigmoid(qg[t * 2 * nh * hd + h * 2 * hd + hd + d]);
    cr_attn_gate(att, qg, n, nh, hd);
    CHECKF(close_rel(att, ref, sizeof att / sizeof att[0], 2e-6f, 1) == 0, "attn_gate");
}

/* cpu_moe.c's top-k softmax routing (static there) */
static void ref_topk_softmax(const float *lg, int ne, int k, float scale, int32_t *ids, float *w) {
    for (int i = 0; i < k; i++) {
        int best = -1;
        for (int e = 0; e < ne; e++) {
            int taken = 0;
            for (int j = 0; j < i && !taken; j++) taken = ids[j] == e;
            if (!taken && (best < 0 || lg[e] > lg[best])) best = e;
        }
        ids[i] = best;
    }
    const float mx = lg[ids[0]];
    double sum = 0.0;
    for (int i = 0; i < k; i++) sum += (w[i] = expf(lg[ids[i]] - mx));
    const float inv = (float)(1.0 / sum);
    for (int i = 0; i < k; i++) w[i] *= inv;
    if (scale != 1.0f && scale != 0.0f)
        for (int i = 0; i < k; i++) w[i] *= scale;
}

static void test_moe_route(void) {
    /* mode, norm, scale, sigmoid, bias, groups, groups used */
    static const struct {
        int mode, norm;
        float scale;
        int sig, bias, ng, ngu;
    } cs[] = {{0, 1, 1.0f, 0, 0, 0, 0}, {0, 0, 2.5f, 0, 0, 0, 0}, {1, 0, 1.0f, 0, 0, 0, 0}, {1, 0, 2.0f, 0, 0, 0, 0},
              {2, 1, 1.0f, 1, 1, 0, 0}, {2, 1, 2.5f, 1, 1, 4, 2}, {2, 0, 1.0f, 0, 0, 8, 3}};
    for (size_t c = 0; c < sizeof cs / sizeof cs[0]; c++) {
        const int n = 5, ne = c % 2 ? 64 : 16, k = 4;
        float lg[5 * 64], rl[5 * 64], bias[64], w[20], rw[20], sel[64];
        int32_t ids[20], rids[20];
        fill(lg, (size_t)n * ne, 3.0f);
        fill(bias, (size_t)ne, 0.5f);
        lg[2] = lg[5] = 2.9f; /* a tie: the lower id first */
        lg[ne + 1] = lg[ne + 7] = 3.5f;
        memcpy(rl, lg, sizeof lg);
        const kern_moe_gate gate = {cs[c].sig, cs[c].bias ? bias : NULL, cs[c].ng, cs[c].ngu, cs[c].norm, cs[c].scale};
        for (int t = 0; t < n; t++) {
            if (cs[c].mode == 0)
                kern_moe_route(rl + t * ne, ne, k, cs[c].norm, cs[c].scale, rids + t * k, rw + t * k);
            else if (cs[c].mode == 1)
                ref_topk_softmax(rl + t * ne, ne, k, cs[c].scale, rids + t * k, rw + t * k);
            else
                kern_moe_route_sel(rl + t * ne, &gate, ne, k, sel, rids + t * k, rw + t * k);
        }
        cr_moe_route(lg, ids, w, n, ne, k, cs[c].mode, cs[c].norm, cs[c].scale, cs[c].sig, cs[c].bias ? bias : NULL,
                     cs[c].ng, cs[c].ngu);
        CHECKF(memcmp(ids, rids, sizeof ids) == 0, "moe route case %zu: experts", c);
        CHECKF(close_rel(w, rw, 20, 2e-6f, 1) == 0, "moe route case %zu: weights", c);
    }
}

static void test_moe_rows(void) {
    const int E = 70, src_rows = 4, rows = 9, k = 3, T = 3;
    float src[4 * 75], dst[9 * 70];
    int32_t idx[9];
    fill(src, sizeof src / sizeof src[0], 1.0f);
    for (int r = 0; r < rows; r++) idx[r] = rndi(src_rows);
    cr_gather_rows(dst, src, src_rows, 75, idx, rows, E);
    int bad = 0;
    for (int r = 0; r < rows; r++) bad += memcmp(dst + r * E, src + idx[r] * 75, sizeof(float) * E) != 0;
    CHECKF(bad == 0, "gather_rows: %d rows wrong", bad);
    /* a bias on every row */
    float b[70], ref[9 * 70];
    fill(b, (size_t)E, 1.0f);
    memcpy(ref, dst, sizeof dst);
    for (int r = 0; r < rows; r++) kern_add(ref + r * E, b, E);
    cr_add_rows(dst, b, rows, E);
    CHECKF(memcmp(dst, ref, sizeof dst) == 0, "add_rows");
    /* the weighted sum, with and without a gated shared expert */
    for (int shared = 0; shared < 3; shared++) {
        int32_t row_of[9];
        float w[9], sgl[3], y[3 * 70], ry[3 * 70];
        for (int i = 0; i < T * k; i++) row_of[i] = (i * 4) % rows; /* a permutation of the rows */
        fill(w, 9, 1.0f);
        fill(sgl, 3, 4.0f);
        fill(y, (size_t)T * E, 1.0f);
        memcpy(ry, y, sizeof y);
        for (int t = 0; t < T; t++) {
            const float g = shared == 2 ? kern_sigmoid(sgl[t]) : 1.0f;
            for (int i = 0; i < E; i++) {
                float acc = 0.0f;
                for (int s = 0; s < k; s++) {
                    const float d = dst[row_of[t * k + s] * E + i] * w[t * k + s];
                    acc = s == 0 ? d : acc + d;
                }
                ry[t * E + i] = shared ? acc + ry[t * E + i] * g : acc;
            }
        }
        cr_moe_combine(dst, rows, row_of, w, k, shared == 2 ? sgl : NULL, shared != 0, y, T, E);
        CHECKF(close_rel(y, ry, (size_t)T * E, 1e-6f, 1) == 0, "moe_combine (shared %d)", shared);
    }
}

static void test_activations(void) {
    const int n = 1001;
    float *g = malloc(sizeof(float) * n), *u = malloc(sizeof(float) * n), *ref = malloc(sizeof(float) * n);
    fill(g, (size_t)n, 10.0f);
    fill(u, (size_t)n, 10.0f);
    memcpy(ref, g, sizeof(float) * n);
    kern_swiglu_oai(ref, u, n, 1.702f, 7.0f);
    cr_swiglu_oai(g, u, n, 1.702f, 7.0f);
    CHECKF(close_rel(g, ref, (size_t)n, 2e-6f, 1) == 0, "swiglu_oai");
    fill(g, (size_t)n, 5.0f);
    memcpy(ref, g, sizeof(float) * n);
    for (int i = 0; i < n; i++) ref[i] = ref[i] > 0.0f ? ref[i] * ref[i] : 0.0f;
    cr_relu_sq(g, n);
    CHECKF(memcmp(g, ref, sizeof(float) * n) == 0, "relu_sq");
    fill(g, (size_t)n, 6.0f);
    memcpy(ref, g, sizeof(float) * n);
    kern_gelu(ref, n);
    cr_gelu(g, n);
    CHECKF(close_rel(g, ref, (size_t)n, 2e-6f, 1) == 0, "gelu");
    free(g);
    free(u);
    free(ref);
}

int main(void) {
    quant_init();
    /* KILN_TEST_SEED=N draws other random data and shapes */
    const char *seed = getenv("KILN_TEST_SEED");
    if (seed && *seed) rng_state ^= strtoull(seed, NULL, 10) * 0x2545f4914f6cdd1dull;
    printf("seed %s\n", seed && *seed ? seed : "default");
    char why[256];
    if (cr_init(why, sizeof why) != 0) {
        printf("skipped: %s\n", why);
        return 77; /* ctest's SKIP_RETURN_CODE */
    }
    printf("kernels run on %s\n", cr_device());
    test_fatbin();
    test_elementwise();
    test_kv_write();
    test_argmax();
    test_rmsnorm();
    test_rope();
    test_get_rows();
    test_matvec();
    test_attn_decode();
    test_attn_prefill();
    test_kv_q8();
    test_gemm();
    on_emu = strstr(cr_device(), "emulator") != NULL;
    test_gdn_gates();
    test_conv();
    test_gdn_norms();
    test_gdn_rec();
    test_attn_gate();
    test_moe_route();
    test_moe_rows();
    test_activations();
    return t_done();
}
