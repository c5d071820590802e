/*
 * nn — the pieces the image models share: binding checkpoint tensors as
 * kernel weights (with the same code checking a schema before anything is
 * allocated), linear layers, multi-head attention over F32 rows, the
 * seeded Gaussian.  Internal to src/image.
 */
#ifndef KILN_IMAGE_NN_H
#define KILN_IMAGE_NN_H

#include "ckpt/ckpt.h"
#include "kernels/matmul.h"
#include "thread/pool.h"

#include <stddef.h>
#include <stdint.h>

/* Binds tensors of one checkpoint.  With check set nothing is allocated:
 * names, shapes and dtypes (F32, F16, BF16) are only verified, so a
 * resolver can refuse a file before any model memory exists.  The first
 * failure is kept in err ("FILE: tensor NAME: ..."); later calls do nothing. */
typedef struct image_binder {
    const ckpt_file *f;
    const char *what; /* file name for messages */
    int check;
    int failed;
    char *err;
    size_t errlen;
} image_binder;

/* The tensor called fmt..., or NULL (no failure recorded). */
const ckpt_tensor *image_find(const ckpt_file *f, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* A weight matrix: the tensor must have exactly n_dims dimensions of
 * shape; it binds as shape[0] rows of the product of the rest. */
int image_mat(image_binder *b, kern_mat *out, int n_dims, const int64_t *shape, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
/* A vector of n floats (any float dtype, any shape with n elements),
 * copied to F32; NULL in check mode or on failure. */
float *image_vec(image_binder *b, int64_t n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

typedef struct image_lin {
    kern_mat w; /* out rows of in */
    float *b;   /* [out] or NULL */
} image_lin;

/* PREFIX.weight [out][in] and, when bias is set, PREFIX.bias [out]. */
int image_lin_bind(image_binder *b, image_lin *l, int64_t out, int64_t in, int bias, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));
/* y [n][out] = x [n][in] W^T + b.  scratch: kern_matmul_scratch_size(in, n).
 * Batches of 16 rows or more take the image GEMM (kernels/conv.h): each
 * output one fma chain from the bias, whatever the thread count. */
void image_linear(thread_pool *pool, const image_lin *l, const float *x, int n, float *y, void *scratch);

/* softmax(q k^T * scale + bias) v per head, both products on the image
 * GEMM.  Rows are ld floats apart; head h reads and writes columns
 * [h * hd, (h + 1) * hd). */
typedef struct image_attn {
    const float *q, *k, *v;
    int ldq, ldk, ldv;
    int n_q, n_kv, heads, hd;
    float scale;
    const float *bias; /* [heads][n_q][n_kv] added to the scores, or NULL */
    float *out;
    int ldo;
} image_attn;

/* Bytes of scratch image_attention needs. */
size_t image_attention_scratch(int n_q, int n_kv, int hd);
void image_attention(thread_pool *pool, const image_attn *a, void *scratch);

/* out = layernorm(x) * (1 + scale) + shift over n rows of d (no affine
 * weights, eps 1e-6); scale and shift are [d] vectors shared by the rows. */
void image_modulate(float *out, const float *x, int n, int d, const float *shift, const float *scale);
/* In place: x = x * sigmoid(x). */
void image_silu(float *x, int n);

/*
 * The seeded Gaussian.  Every latent starts from this stream, so a seed
 * gives the same noise on every machine (only IEEE double +, -, *, /,
 * sqrt and frexp are used, in a fixed order; the file is built without
 * floating-point contraction):
 *   SplitMix64: s += 0x9E3779B97F4A7C15; z = s;
 *               z = (z ^ z >> 30) * 0xBF58476D1CE4E5B9;
 *               z = (z ^ z >> 27) * 0x94D049BB133111EB; out z ^ z >> 31
 *   uniform u in (-1, 1): ((out >> 11) + 0.5) / 2^53 * 2 - 1
 *   Marsaglia's polar method: u, v uniform; s = u^2 + v^2, redrawn while
 *   s >= 1 or s == 0; f = sqrt(-2 ln s / s); the normals u f, then v f,
 *   rounded to float.  ln s = 2 atanh((m - 1) / (m + 1)) + e ln 2 with
 *   s = m 2^e, m in [1/sqrt 2, sqrt 2), the atanh series summed by Horner
 *   from the t^22 term down.
 * tests/gen_image.py holds the same algorithm in Python.
 */
typedef struct image_rng {
    uint64_t s;
} image_rng;

static inline void image_rng_seed(image_rng *r, uint64_t seed) { r->s = seed; }
/* n normals in order into out. */
void image_rng_gauss(image_rng *r, float *out, size_t n);
double image_rng_log(double x); /* ln x for 0 < x < 1, as above */

#endif
