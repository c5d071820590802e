/*
 * ops — the element-wise and small kernels of the forward pass (norms,
 * activations, RoPE, attention helpers).  Matrix products are in matmul.h.
 * All vectors are F32 unless the name says otherwise; n counts elements.
 */
#ifndef KILN_OPS_H
#define KILN_OPS_H

#include <stddef.h>
#include <stdint.h>

/* out = x / sqrt(mean(x^2) + eps) * w   (w NULL: no scale).  out may be x. */
void kern_rmsnorm(float *out, const float *x, const float *w, int n, float eps);
/* out = (x - mean) / sqrt(var + eps) * w + b   (w, b may be NULL). */
void kern_layernorm(float *out, const float *x, const float *w, const float *b, int n, float eps);
/* In place: x = exp(x - max) / sum. */
void kern_softmax(float *x, int n);
/* In place: g = silu(g) * u, silu(v) = v / (1 + e^-v). */
void kern_swiglu(float *g, const float *u, int n);
/* In place: the clamped SwiGLU of gpt-oss's experts, g = min(g, limit),
 * u = clamp(u, -limit, limit), g = g * sigmoid(alpha * g) * (u + 1). */
void kern_swiglu_oai(float *g, const float *u, int n, float alpha, float limit);
/* In place: x = gelu(x) (tanh approximation, as BERT GGUFs expect). */
void kern_gelu(float *x, int n);
/* In place: x = x * Phi(x), the exact GELU with erf (Hugging Face's "gelu";
 * ModernBERT and its heads were trained with it). */
void kern_gelu_erf(float *x, int n);
/* y += x */
void kern_add(float *y, const float *x, int n);
/* y += b broadcast over n_rows rows of n */
void kern_add_rows(float *y, const float *b, int n_rows, int n);
/* In place: x = x * s. */
void kern_scale_f32(float *x, float s, int n);
/* The query temperature of llama 4 / mistral3 attention at position pos:
 * 1 + scale * ln(floor((pos + offset) / floor_scale) + 1), a multiplier of
 * the roped queries (not the keys).  floor_scale > 0. */
float kern_attn_temp(int pos, float scale, float offset, float floor_scale);

/* RoPE.  A rotation table for one position: cs[2*i] = cos, cs[2*i+1] = sin
 * of angle i (n_rot/2 angles), including YaRN's magnitude scale. */
typedef struct kern_rope {
    int n_rot;         /* dimensions rotated per head (<= head_dim, even) */
    int neox;          /* 1: pairs (i, i + n_rot/2); 0: pairs (2i, 2i+1) */
    float base;        /* rope.freq_base */
    float freq_scale;  /* 1 / linear-or-yarn factor */
    float ext_factor;  /* YaRN extrapolation mix (0 = plain/linear) */
    float attn_factor; /* YaRN magnitude multiplier */
    float beta_fast, beta_slow;
    int n_ctx_orig;            /* training context, for YaRN's correction range */
    const float *freq_factors; /* [n_rot/2] divisors of the angles (LongRoPE); NULL: none */
    /* M-RoPE (Qwen2-VL and later): angle i takes one of four positions
     * (t, h, w, e), chosen by sector i mod (s0 + s1 + s2 + s3) over
     * sections[]: KERN_MROPE in order (t for the first s0 sectors, then h, w,
     * e), KERN_IMROPE interleaved (sector k: h when k % 3 == 1 and k < 3 s1,
     * w when k % 3 == 2 and k < 3 s2, t when k % 3 == 0 and k < 3 s0, else
     * e).  Four equal positions give kern_rope_table's angles bit for bit. */
    int mrope; /* 0: one position */
    int sections[4];
} kern_rope;
enum { KERN_MROPE = 1, KERN_IMROPE = 2 };
void kern_rope_table(const kern_rope *r, int pos, float *cs);
/* The table of the four positions pos[4] = (t, h, w, e) under r->mrope
 * (kern_rope_table(r, pos[0]) when r->mrope is 0). */
void kern_rope_table_m(const kern_rope *r, const int32_t pos[4], float *cs);
/* Rotates n_heads heads of head_dim (stride head_dim) in place. */
void kern_rope_apply(const kern_rope *r, const float *cs, float *x, int n_heads, int head_dim);

/* Attention helpers over cached keys/values (F16 or F32 rows). */
float kern_dot_f32(const float *a, const float *b, int n);
/* F16 row . F16-rounded query: float lanes over whole 32-element steps in
 * a fixed order, the remaining elements in double (see ops.c). */
float kern_dot_f16(const uint16_t *a, const float *b, int n);
/* y = y * scale + w * x  */
void kern_scale_axpy_f32(float *y, float scale, float w, const float *x, int n);
void kern_scale_axpy_f16(float *y, float scale, float w, const uint16_t *x, int n);
void kern_f32_to_f16_row(const float *x, uint16_t *y, int n);
/* F16 accumulator updates, rounded to F16 after each element:
 * y = y * s;  y = y + x * w (one fused multiply-add, then rounding). */
void kern_scale_f16(uint16_t *y, float s, int n);
void kern_mad_f16(uint16_t *y, const uint16_t *x, float w, int n);
/* y = x rounded to F16 and back (the query of F16 attention). */
void kern_round_f16_row(const float *x, float *y, int n);
/* e^x by the polynomial the SIMD attention uses (within 2 ulp of expf for
 * x <= 0; x is clamped to [-87.3, 88.7]), so scalar and SIMD softmax
 * weights are the same bits. */
float kern_exp_attn(float x);

/* The factor that turns a query's accumulator into its output: 1 / S, S
 * the sum of its weights e^(s_t - M) (M the largest score).  With a sink
 * logit z (sink not NULL: an attention sink) the softmax has one
 * more term e^(z - M) that adds no value; when z > M the maximum becomes
 * z, so accumulator and sum scale by e^(M - z) first, and the factor holds
 * that scale too.  Every twin calls it, so they agree bit for bit. */
float kern_attn_inv(float S, float M, const float *sink);

/* Query heads against an F16 KV cache: softmax(q . k_t * scale) over the
 * positions t < n a query sees, times v_t.  Cache rows are paged: position
 * t is in cell (blocks[t >> block_shift] << block_shift) + (t & (block - 1)),
 * and the head's row of cell c starts at k + c * stride (v alike).
 *
 * One call takes nq heads sharing the KV head for each of nt consecutive
 * tokens of one sequence: token u (0 <= u < nt) sees n = n_pos + u
 * positions, and its queries and outputs start tok_stride floats after
 * token u - 1's.  Each (token, head) is its own softmax; the tokens share
 * only the reading of K and V.
 *
 * Two arithmetics (model/forward.c says which a query gets); both round the
 * query to F16 and score with kern_dot_f16:
 *   acc_f32 = 0: the F16 flash-attention scheme: an online maximum and an
 *     F16 accumulator rounded after every rescale (kern_scale_f16) and every
 *     value update (kern_mad_f16), with expf;
 *   acc_f32 = 1: every score first, their maximum M, weights
 *     w_t = kern_exp_attn(s_t - M) summed in position order, and a float
 *     accumulator acc = fma(v_t, w_t, acc) over positions in order.
 * Then out = accumulator * kern_attn_inv(sum, M, sink).  The scalar twin is those loops verbatim,
 * query by query; SIMD twins may reorder the work but not the arithmetic,
 * so every twin gives the same bits.
 *
 * Sliding window (window > 0): token u, at position p = n_pos + u - 1,
 * sees only positions max(0, p - window + 1) .. p, the same arithmetic over
 * that span.  kern_attn_f16_query applies it: the one-query call reads its
 * span from position `first` on, n_pos positions. */
typedef struct kern_attn_f16 {
    const float *q;    /* [nt][nq][hd] F32 queries, tokens tok_stride apart */
    int nq;            /* heads sharing this KV head: 1 or 2 */
    int nt;            /* consecutive tokens, >= 1 */
    size_t tok_stride; /* floats from one token's queries (and outputs) to the next's */
    int hd;
    int n_pos; /* positions the first token sees */
    const int32_t *blocks;
    int block_shift;
    const uint16_t *k, *v;
    size_t block_stride; /* elements from one cache block to the next */
    size_t row_stride;   /* elements from a row to the next within a block */
    float scale;
    int acc_f32;       /* 1: float accumulator (see above) */
    int window;        /* > 0: positions a token sees at most (sliding window); 0: all */
    int first;         /* position of the first row read (set by kern_attn_f16_query; callers pass 0) */
    const float *sink; /* [nq] the heads' sink logits (kern_attn_inv); NULL: none */
    float *out;        /* [nt][nq][hd], tokens tok_stride apart */
    float *scratch;    /* kern_attn_scratch(nq, nt, hd, n_pos) floats */
} kern_attn_f16;

/* Floats of scratch one call needs: per query, 2 * hd + 3 * (positions the
 * last token sees); query j of token u has the (u * nq + j)-th share. */
static inline size_t kern_attn_scratch(int nq, int nt, int hd, int n_pos) {
    return (size_t)nq * (size_t)nt * (2 * (size_t)hd + 3 * (size_t)(n_pos + nt - 1));
}

/* Offset of position t's row in a paged cache: block blocks[t >> shift],
 * row t mod 2^shift within it (strides in the caller's unit). */
static inline size_t kern_page_off(const int32_t *blocks, int shift, size_t block_stride, size_t row_stride, int t) {
    return (size_t)blocks[t >> shift] * block_stride + (size_t)(t & ((1 << shift) - 1)) * row_stride;
}

/* Offset (in elements from a->k or a->v) of the row a reads t-th: position
 * a->first + t. */
static inline size_t kern_attn_row(const kern_attn_f16 *a, int t) {
    return kern_page_off(a->blocks, a->block_shift, a->block_stride, a->row_stride, a->first + t);
}

/* Whether a's window cuts the span of one of its tokens (the last one's
 * first): such a call runs token by token. */
static inline int kern_attn_window_cuts(int window, int n_pos, int nt) { return window > 0 && n_pos + nt - 1 > window; }

/* Head j of token u of a as a one-query call (its query, span, output and
 * scratch): with a window, the span is the token's last window positions
 * (first moved up, n_pos cut) and the call has no window left. */
static inline kern_attn_f16 kern_attn_f16_query(const kern_attn_f16 *a, int u, int j) {
    kern_attn_f16 one = *a;
    const size_t off = (size_t)u * a->tok_stride + (size_t)j * (size_t)a->hd;
    one.nq = 1;
    one.nt = 1;
    one.n_pos = a->n_pos + u;
    if (a->window > 0 && one.n_pos > a->window) {
        one.first += one.n_pos - a->window;
        one.n_pos = a->window;
    }
    one.window = 0;
    one.q = a->q + off;
    one.out = a->out + off;
    one.scratch = a->scratch + (size_t)(u * a->nq + j) * kern_attn_scratch(1, 1, a->hd, a->n_pos + a->nt - 1);
    one.sink = a->sink ? a->sink + j : NULL;
    return one;
}

/* Token u of a, all its heads, as a one-token call. */
static inline kern_attn_f16 kern_attn_f16_token(const kern_attn_f16 *a, int u) {
    kern_attn_f16 one = kern_attn_f16_query(a, u, 0);
    one.nq = a->nq;
    return one;
}

/* Query heads against a Q8_0 KV cache (KILN_KV_Q8_0): rows of hd / 32
 * blocks of 34 bytes (an F16 scale d, 32 int8 q), the same paging, tiling,
 * sliding window and scratch as kern_attn_f16 but with byte strides.  One arithmetic:
 *   - the query is quantized to Q8_0 blocks by the reference quantizer
 *     (quant_get(QUANT_Q8_0)->from_f32), so q . k is exact per block:
 *     s_t = sum over blocks b in order of fmaf((float)isum_b, dq_b * dk_b, s),
 *     from s = 0, then s_t * scale;
 *   - M = max s_t, w_t = kern_exp_attn(s_t - M), S = sum of w_t in order;
 *   - acc = fmaf((float)v_q * dv_b, w_t, acc) over positions in order, per
 *     element (dv_b the scale of the element's block; the product is exact);
 *   - out = acc * kern_attn_inv(S, M, sink).
 * The scalar twin is those loops; SIMD twins give the same bits. */
typedef struct kern_attn_q8 {
    const float *q;    /* [nt][nq][hd] F32 queries, tokens tok_stride apart */
    int nq;            /* heads sharing this KV head */
    int nt;            /* consecutive tokens, >= 1 */
    size_t tok_stride; /* floats between tokens' queries (and outputs) */
    int hd;            /* a multiple of 32, at most 256 */
    int n_pos;         /* positions the first token sees */
    const int32_t *blocks;
    int block_shift;
    const uint8_t *k, *v;
    size_t block_stride; /* bytes from one cache block to the next */
    size_t row_stride;   /* bytes from a row to the next within a block */
    float scale;
    int window;        /* as kern_attn_f16's */
    int first;         /* as kern_attn_f16's (set by kern_attn_q8_query) */
    const float *sink; /* [nq] the heads' sink logits (kern_attn_inv); NULL: none */
    float *out;        /* [nt][nq][hd], tokens tok_stride apart */
    float *scratch;    /* kern_attn_scratch(nq, nt, hd, n_pos) floats */
} kern_attn_q8;

/* Offset in bytes from a->k or a->v of the row a reads t-th (position
 * a->first + t). */
static inline size_t kern_attn_q8_row(const kern_attn_q8 *a, int t) {
    return kern_page_off(a->blocks, a->block_shift, a->block_stride, a->row_stride, a->first + t);
}

/* Head j of token u of a as a one-query call; its scratch share holds the
 * quantized query (hd / 32 blocks, within 2 * hd floats) and the scores. */
static inline kern_attn_q8 kern_attn_q8_query(const kern_attn_q8 *a, int u, int j) {
    kern_attn_q8 one = *a;
    const size_t off = (size_t)u * a->tok_stride + (size_t)j * (size_t)a->hd;
    one.nq = 1;
    one.nt = 1;
    one.n_pos = a->n_pos + u;
    if (a->window > 0 && one.n_pos > a->window) {
        one.first += one.n_pos - a->window;
        one.n_pos = a->window;
    }
    one.window = 0;
    one.q = a->q + off;
    one.out = a->out + off;
    one.scratch = a->scratch + (size_t)(u * a->nq + j) * kern_attn_scratch(1, 1, a->hd, a->n_pos + a->nt - 1);
    one.sink = a->sink ? a->sink + j : NULL;
    return one;
}

/* Token u of a, all its heads, as a one-token call (its window applied). */
static inline kern_attn_q8 kern_attn_q8_token(const kern_attn_q8 *a, int u) {
    kern_attn_q8 one = kern_attn_q8_query(a, u, 0);
    one.nq = a->nq;
    return one;
}

/* The kernels with SIMD twins, as one set per ISA level.  The
 * scalar set (the functions above) is the reference; the forward pass takes
 * kern_ops_best() once per call.  rope_neox is kern_rope_apply for neox pairs
 * with the table of n_rot rotated dimensions. */
typedef struct kern_ops {
    void (*attn_f16)(const kern_attn_f16 *a);
    void (*attn_q8)(const kern_attn_q8 *a);
    void (*f32_to_f16_row)(const float *x, uint16_t *y, int n);
    void (*round_f16_row)(const float *x, float *y, int n);
    void (*rmsnorm)(float *out, const float *x, const float *w, int n, float eps);
    void (*swiglu)(float *g, const float *u, int n);
    void (*add)(float *y, const float *x, int n);
    void (*rope_neox)(const float *cs, float *x, int n_heads, int head_dim, int n_rot);
} kern_ops;
/* The set of level isa (a QUANT_ISA_* value; the AVX-512 level's is the AVX2
 * set), NULL if the CPU lacks the level (kernels/level.c). */
const kern_ops *kern_ops_at(int isa);
/* The set of the level quant_init() chose. */
const kern_ops *kern_ops_best(void);

#endif
