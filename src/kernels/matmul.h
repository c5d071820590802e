/*
 * matmul — products of a weight matrix (any kq type) with a batch of F32
 * activation rows, split across a thread pool.
 *
 * A weight W has nrows rows (output features) of ncols elements (input
 * features); GGUF stores it with ne[0] = ncols, ne[1] = nrows.  For tokens
 * t < n_tok:   y[t * ldy + r] = sum_k W[r][k] * x[t * ncols + k].
 * The activations are first converted once to the format the weight's
 * kernel reads, in a caller-provided scratch buffer (on the calling thread
 * for small batches), then the threads take chunks of 16-row tiles from a
 * shared counter.
 *
 * Q4_0, Q8_0, Q4_K and Q6_K go through the 8-row interleaved kernels of
 * pack.h: for every batch when the weight was repacked at load, and for
 * batches of X8_MIN_TOK or more tokens otherwise (each 8-row group is then
 * packed on the fly into a small stack buffer, once per batch).  F16
 * (and, on aarch64 with FEAT_I8MM, Q8_0, Q4_0 and Q4_K) takes its block
 * kernel (kern_tile_fn) at the active level, for every batch size: its outputs are that level's vec_dot bits, so a token's result
 * never depends on the batch it is in.  Other types, and leftover rows, go
 * row by row with the kq vec_dot: one weight stream at a time, which the
 * hardware prefetch serves best.
 */
#ifndef KILN_MATMUL_H
#define KILN_MATMUL_H

#include <stddef.h>
#include <stdint.h>

#include "thread/pool.h"

typedef struct kern_mat {
    const void *data;
    int type;
    int64_t ncols;
    int64_t nrows;
    /* Q4_0, Q8_0, Q4_K, Q6_K: the matrix's whole groups of 8 rows interleaved
     * (kernels/pack.h), made at load when repacking is on; NULL otherwise.
     * Rows past the last whole group stay in data only. */
    const void *packed;
} kern_mat;

/* One product of a job: a weight, where its outputs go, and their stride. */
typedef struct kern_mm_out {
    const kern_mat *w;
    float *y;
    int64_t ldy;
} kern_mm_out;

/* Most products one kern_matmul_multi call takes. */
#define KERN_MM_MAX_OUTS 512

/* 1 when w's type has an interleaved form (pack.h) and w has at least one
 * whole group of 8 rows of whole blocks: what repacking and the
 * interleaved kernels both need; 0 too on a SIMD level that has no
 * interleaved kernels (aarch64's neon and dotprod). */
int kern_mat_interleavable(const kern_mat *w);

/* Scratch bytes a product with n_tok rows of ncols needs, for weights of any
 * type (the largest activation format). */
size_t kern_matmul_scratch_size(int64_t ncols, int n_tok);

/* Computes n_out (<= KERN_MM_MAX_OUTS) products that share the input x (all
 * weights must have the same ncols), e.g. Q, K and V from one normalized
 * activation: x is converted once per activation type and the rows of every
 * product are spread over the threads together. */
void kern_matmul_multi(thread_pool *pool, const kern_mm_out *outs, int n_out, const float *x, int n_tok, void *scratch);
/* The same with product i over activation rows t0[i] .. t0[i] + nt[i] - 1
 * only, its y[t * ldy + r] the output of row t0[i] + t (a mixture of experts
 * gives each expert the rows routed to it; ranges may overlap).  x is
 * converted once for all n_tok rows. */
void kern_matmul_ranges(thread_pool *pool, const kern_mm_out *outs, const int32_t *t0, const int32_t *nt, int n_out,
                        const float *x, int n_tok, void *scratch);
void kern_matmul(thread_pool *pool, const kern_mat *w, const float *x, int n_tok, float *y, int64_t ldy, void *scratch);

/* A block of a product: for r < nr, t < nt
 *     y[t * ldy + r] = dot of n elements of weight row r (at w + r * wrow)
 *                      and activation row t (at a + t * arow)
 * with the activations in the weight type's vec_dot_type, each output the
 * very float the same level's vec_dot gives (so a token's result never
 * depends on the batch it is in).  Prompt batches and decode both use it:
 * a weight vector is converted once for several tokens, an activation
 * vector once for several rows. */
typedef void (*kern_tile_fn)(int n, const void *w, size_t wrow, int nr, const void *a, size_t arow, int nt, float *y,
                             int64_t ldy);
/* The block kernel of weight type t at level isa (a QUANT_ISA_* value), NULL
 * if t has none or the CPU lacks the level (kernels/level.c).  F16 has one at
 * every level: the scalar level's is the reference vec_dot per output (within
 * tolerance), and quant_dot_f16_lanes the bit-exact twin of the AVX2 and
 * AVX-512 ones (matmul_avx2.c, matmul_avx512.c).  The other types take the
 * quant folder's (quant_tile_at: Q8_0, Q4_0 and Q4_K by smmla on aarch64 with
 * FEAT_I8MM), whose outputs are that level's vec_dot bits. */
kern_tile_fn kern_tile_at(int t, int isa);

/* Expands row r of w to F32 (used for embedding lookups). */
void kern_get_row(const kern_mat *w, int64_t r, float *out);

#endif
