/* The Whisper forward pass: the encoder over one window of mel frames and
 * the decoder, a few tokens at a time, over per-beam caches.
 *
 * Shapes: d = n_state, A = n_audio_ctx (encoder positions), hd = d / heads.
 * Encoder attention goes head by head through the F16 matrix kernels:
 * scores[t][p] = K_h[p] . Q_h[t] (K_h as an F16 matrix of A rows), a
 * softmax per row, then out_h[t][j] = Vt_h[j] . P[t] (V_h transposed, hd
 * rows of A).  Decoder cross-attention reads K and V of every layer made
 * once per window (F16, K as [head][A][hd], V as [head][hd][A]); self-
 * attention reads a float cache [layer][beam][n_text_ctx][d]. */
#include "whisper/whisper.h"

#include "kernels/ops.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define LN_EPS 1e-5f

struct whisper_state {
    const whisper_model *m;
    thread_pool *pool;
    int n_beams;
    int A, d, nh, hd, n_ctx;
    /* encoder */
    float *col;                                 /* im2col rows: [2A][3 * n_mels] and then [A][3 * d] */
    float *h1;                                  /* conv1 output [2A][d] */
    float *x, *xn, *q, *k, *v, *att, *tmp, *ff; /* [A][d] (ff [A][4d]) */
    float *qh;                                  /* [A][hd] one head's queries */
    uint16_t *kh, *vth;                         /* [A][hd] and [hd][A] F16 */
    float *scores;                              /* [A][A] */
    /* cross K/V per decoder layer */
    uint16_t *ck, *cvt; /* [layer][head][A][hd], [layer][head][hd][A] */
    /* decoder */
    float *sk, *sv;                                     /* [layer][beam][n_ctx][d] */
    int *len;                                           /* [beam] tokens held */
    int cap_tok;                                        /* rows a decoder run may carry */
    float *dx, *dxn, *dq, *dk, *dv, *datt, *dtmp, *dff; /* [cap_tok][d] ([4d]) */
    float *dscore;                                      /* per (row, head): A + n_ctx floats */
    uint16_t *d16;                                      /* per (row, head): F16 query and weights, hd + A */
    float *logits;                                      /* [cap_tok][n_vocab] */
    int *row_beam, *row_pos;
    void *mm;
};

static size_t max_sz(size_t a, size_t b) { return a > b ? a : b; }

thread_pool *whisper_state_pool(whisper_state *s) { return s->pool; }
const float *whisper_encoder_out(const whisper_state *s) { return s->x; }
int whisper_beam_len(const whisper_state *s, int b) { return s->len[b]; }
void whisper_beam_truncate(whisper_state *s, int b, int len) {
    if (len < s->len[b]) s->len[b] = len;
}

void whisper_beam_copy(whisper_state *s, int dst, int src) {
    if (dst == src) return;
    size_t row = (size_t)s->d, per_beam = (size_t)s->n_ctx * row;
    size_t n = (size_t)s->len[src] * row * sizeof(float);
    for (int l = 0; l < s->m->hp.n_text_layer; l++) {
        size_t lb = (size_t)l * (size_t)s->n_beams * per_beam;
        memcpy(s->sk + lb + (size_t)dst * per_beam, s->sk + lb + (size_t)src * per_beam, n);
        memcpy(s->sv + lb + (size_t)dst * per_beam, s->sv + lb + (size_t)src * per_beam, n);
    }
    s->len[dst] = s->len[src];
}

void whisper_state_free(whisper_state *s) {
    if (!s) return;
    if (s->pool) thread_pool_free(s->pool);
    free(s->col);
    free(s->h1);
    free(s->x);
    free(s->xn);
    free(s->q);
    free(s->k);
    free(s->v);
    free(s->att);
    free(s->tmp);
    free(s->ff);
    free(s->qh);
    free(s->kh);
    free(s->vth);
    free(s->scores);
    free(s->ck);
    free(s->cvt);
    free(s->sk);
    free(s->sv);
    free(s->len);
    free(s->dx);
    free(s->dxn);
    free(s->dq);
    free(s->dk);
    free(s->dv);
    free(s->datt);
    free(s->dtmp);
    free(s->dff);
    free(s->dscore);
    free(s->d16);
    free(s->logits);
    free(s->row_beam);
    free(s->row_pos);
    free(s->mm);
    free(s);
}

whisper_state *whisper_state_new(const whisper_model *m, int n_beams, int n_threads) {
    whisper_state *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    const whisper_hparams *hp = &m->hp;
    s->m = m;
    s->n_beams = n_beams < 1 ? 1 : n_beams;
    s->A = hp->n_audio_ctx;
    s->d = hp->n_audio_state;
    s->nh = hp->n_audio_head;
    s->hd = s->d / s->nh;
    s->n_ctx = hp->n_text_ctx;
    /* a decoder run carries a whole prompt (at most n_ctx tokens) or one
     * token per beam */
    s->cap_tok = s->n_ctx > s->n_beams ? s->n_ctx : s->n_beams;
    s->pool = thread_pool_new(n_threads);
    const size_t A = (size_t)s->A, d = (size_t)s->d, hd = (size_t)s->hd, L = (size_t)hp->n_text_layer;
    const size_t T = (size_t)s->cap_tok, nb = (size_t)s->n_beams, nctx = (size_t)s->n_ctx;
    const size_t dh = (size_t)hp->n_text_head, dhd = d / dh;
    size_t colw = max_sz(2 * A * 3 * (size_t)hp->n_mels, A * 3 * d);
    s->col = malloc(colw * sizeof(float));
    s->h1 = malloc(2 * A * d * sizeof(float));
    s->x = malloc(A * d * sizeof(float));
    s->xn = malloc(A * d * sizeof(float));
    s->q = malloc(A * d * sizeof(float));
    s->k = malloc(A * d * sizeof(float));
    s->v = malloc(A * d * sizeof(float));
    s->att = malloc(A * d * sizeof(float));
    s->tmp = malloc(A * d * sizeof(float));
    s->ff = malloc(A * 4 * d * sizeof(float));
    s->qh = malloc(A * hd * sizeof(float));
    s->kh = malloc(A * hd * sizeof(uint16_t));
    s->vth = malloc(A * hd * sizeof(uint16_t));
    s->scores = malloc(A * A * sizeof(float));
    s->ck = malloc(L * A * d * sizeof(uint16_t));
    s->cvt = malloc(L * A * d * sizeof(uint16_t));
    s->sk = malloc(L * nb * nctx * d * sizeof(float));
    s->sv = malloc(L * nb * nctx * d * sizeof(float));
    s->len = calloc(nb, sizeof(int));
    s->dx = malloc(T * d * sizeof(float));
    s->dxn = malloc(T * d * sizeof(float));
    s->dq = malloc(T * d * sizeof(float));
    s->dk = malloc(T * d * sizeof(float));
    s->dv = malloc(T * d * sizeof(float));
    s->datt = malloc(T * d * sizeof(float));
    s->dtmp = malloc(T * d * sizeof(float));
    s->dff = malloc(T * 4 * d * sizeof(float));
    s->dscore = malloc(T * dh * (A + nctx) * sizeof(float));
    s->d16 = malloc(T * dh * (dhd + A) * sizeof(uint16_t));
    s->logits = malloc(T * (size_t)hp->n_vocab * sizeof(float));
    s->row_beam = malloc(T * sizeof(int));
    s->row_pos = malloc(T * sizeof(int));
    size_t mmw = max_sz(max_sz(3 * (size_t)hp->n_mels, 3 * d), max_sz(4 * d, A));
    s->mm = malloc(kern_matmul_scratch_size((int64_t)mmw, (int)(2 * A > T ? 2 * A : T)));
    if (!s->pool || !s->col || !s->h1 || !s->x || !s->xn || !s->q || !s->k || !s->v || !s->att || !s->tmp || !s->ff ||
        !s->qh || !s->kh || !s->vth || !s->scores || !s->ck || !s->cvt || !s->sk || !s->sv || !s->len || !s->dx ||
        !s->dxn || !s->dq || !s->dk || !s->dv || !s->datt || !s->dtmp || !s->dff || !s->dscore || !s->d16 ||
        !s->logits || !s->row_beam || !s->row_pos || !s->mm) {
        whisper_state_free(s);
        return NULL;
    }
    return s;
}

/* ---------------------------------------------------------- row jobs */

typedef struct rows_job {
    void (*fn)(struct rows_job *j, long lo, long hi);
    long n;
    float *y;
    const float *x, *w, *b;
    int width;
    float *xn;
} rows_job;

static void rows_task(void *ud, int ith, int nth) {
    rows_job *j = ud;
    long lo, hi;
    thread_pool_range(j->n, ith, nth, &lo, &hi);
    if (lo < hi) j->fn(j, lo, hi);
}

static void par(thread_pool *p, rows_job *j) {
    if (j->n * j->width < 8192)
        j->fn(j, 0, j->n);
    else
        thread_pool_run(p, rows_task, j);
}

static inline float gelu(float x) { return 0.5f * x * (1.0f + erff(x * (float)M_SQRT1_2)); }

/* y[r] = gelu(y[r] + b) */
static void f_bias_gelu(rows_job *j, long lo, long hi) {
    for (long r = lo; r < hi; r++) {
        float *y = j->y + r * j->width;
        for (int i = 0; i < j->width; i++) y[i] = gelu(y[i] + (j->b ? j->b[i] : 0.0f));
    }
}

/* y[r] += x[r] + b */
static void f_add_bias(rows_job *j, long lo, long hi) {
    for (long r = lo; r < hi; r++) {
        float *y = j->y + r * j->width;
        const float *x = j->x + r * j->width;
        for (int i = 0; i < j->width; i++) y[i] += x[i] + (j->b ? j->b[i] : 0.0f);
    }
}

/* y[r] = layernorm(x[r]) * w + b */
static void f_ln(rows_job *j, long lo, long hi) {
    for (long r = lo; r < hi; r++)
        kern_layernorm(j->y + r * j->width, j->x + r * j->width, j->w, j->b, j->width, LN_EPS);
}

/* y[r] += b */
static void f_bias(rows_job *j, long lo, long hi) {
    for (long r = lo; r < hi; r++) {
        float *y = j->y + r * j->width;
        for (int i = 0; i < j->width; i++) y[i] += j->b[i];
    }
}

static void bias_gelu(thread_pool *p, float *y, const float *b, long n, int width) {
    rows_job j = {f_bias_gelu, n, y, NULL, NULL, b, width, NULL};
    par(p, &j);
}
static void add_bias(thread_pool *p, float *y, const float *x, const float *b, long n, int width) {
    rows_job j = {f_add_bias, n, y, x, NULL, b, width, NULL};
    par(p, &j);
}
static void layernorm(thread_pool *p, float *y, const float *x, const float *w, const float *b, long n, int width) {
    rows_job j = {f_ln, n, y, x, w, b, width, NULL};
    par(p, &j);
}
static void bias_rows(thread_pool *p, float *y, const float *b, long n, int width) {
    if (!b) return;
    rows_job j = {f_bias, n, y, NULL, NULL, b, width, NULL};
    par(p, &j);
}

/* Softmax of n rows of width floats in place (scores already scaled). */
static void f_softmax(rows_job *j, long lo, long hi) {
    for (long r = lo; r < hi; r++) kern_softmax(j->y + r * j->width, j->width);
}

/* ------------------------------------------------------------ encoder */

/* One head's Q (scaled), K and V^T gathered from [A][d] rows. */
typedef struct gather_job {
    whisper_state *s;
    const float *q, *k, *v;
    int h;
    float scale;
    uint16_t *kh, *vth;
    float *qh;
} gather_job;

static void gather_task(void *ud, int ith, int nth) {
    gather_job *g = ud;
    whisper_state *s = g->s;
    long lo, hi;
    thread_pool_range(s->A, ith, nth, &lo, &hi);
    const int hd = s->hd, d = s->d, A = s->A;
    for (long t = lo; t < hi; t++) {
        const float *qr = g->q + t * d + g->h * hd, *kr = g->k + t * d + g->h * hd, *vr = g->v + t * d + g->h * hd;
        if (g->qh)
            for (int i = 0; i < hd; i++) g->qh[t * hd + i] = qr[i] * g->scale;
        for (int i = 0; i < hd; i++) {
            g->kh[t * hd + i] = quant_f32_to_f16(kr[i]);
            g->vth[(size_t)i * A + t] = quant_f32_to_f16(vr[i]);
        }
    }
}

static void encoder_attention(whisper_state *s) {
    const int A = s->A, hd = s->hd;
    const float scale = 1.0f / sqrtf((float)hd);
    for (int h = 0; h < s->nh; h++) {
        gather_job g = {s, s->q, s->k, s->v, h, scale, s->kh, s->vth, s->qh};
        thread_pool_run(s->pool, gather_task, &g);
        kern_mat km = {s->kh, QUANT_F16, hd, A, NULL};
        kern_matmul(s->pool, &km, s->qh, A, s->scores, A, s->mm);
        rows_job sj = {f_softmax, A, s->scores, NULL, NULL, NULL, A, NULL};
        par(s->pool, &sj);
        kern_mat vm = {s->vth, QUANT_F16, A, hd, NULL};
        kern_matmul(s->pool, &vm, s->scores, A, s->att + h * hd, s->d, s->mm);
    }
}

/* im2col for a kernel of 3 taps, padding 1: col[t][c * 3 + k] = in(c, t * stride + k - 1).
 * in(c, u) is src[c * ld + u] (channel-major, mel) or src[u * ld + c]
 * (time-major, conv1's output). */
typedef struct col_job {
    float *col;
    const float *src;
    size_t ld;
    int n_in, n_out_t, n_in_t, stride, time_major;
} col_job;

static void col_task(void *ud, int ith, int nth) {
    col_job *c = ud;
    long lo, hi;
    thread_pool_range(c->n_out_t, ith, nth, &lo, &hi);
    for (long t = lo; t < hi; t++) {
        float *row = c->col + (size_t)t * (size_t)c->n_in * 3;
        for (int ch = 0; ch < c->n_in; ch++)
            for (int k = 0; k < 3; k++) {
                long u = t * c->stride + k - 1;
                float v = 0.0f;
                if (u >= 0 && u < c->n_in_t)
                    v = c->time_major ? c->src[(size_t)u * c->ld + ch] : c->src[(size_t)ch * c->ld + (size_t)u];
                row[ch * 3 + k] = v;
            }
    }
}

/* Self-attention K/V of the current x for the cross-attention of every
 * decoder layer, to F16. */
typedef struct cross_job {
    whisper_state *s;
    const float *k, *v;
    uint16_t *ck, *cvt;
} cross_job;

static void cross_task(void *ud, int ith, int nth) {
    cross_job *c = ud;
    whisper_state *s = c->s;
    const int A = s->A, d = s->d, nh = s->m->hp.n_text_head, hd = d / nh;
    long lo, hi;
    thread_pool_range(A, ith, nth, &lo, &hi);
    for (long t = lo; t < hi; t++)
        for (int h = 0; h < nh; h++)
            for (int i = 0; i < hd; i++) {
                c->ck[((size_t)h * A + t) * hd + i] = quant_f32_to_f16(c->k[t * d + h * hd + i]);
                c->cvt[((size_t)h * hd + i) * A + t] = quant_f32_to_f16(c->v[t * d + h * hd + i]);
            }
}

void whisper_encode(whisper_state *s, const float *mel, size_t ld) {
    const whisper_model *m = s->m;
    const int A = s->A, d = s->d, nm = m->hp.n_mels;
    thread_pool *p = s->pool;
    col_job c1 = {s->col, mel, ld, nm, 2 * A, 2 * A, 1, 0};
    thread_pool_run(p, col_task, &c1);
    kern_matmul(p, &m->conv1, s->col, 2 * A, s->h1, d, s->mm);
    bias_gelu(p, s->h1, m->conv1_b, 2 * A, d);
    col_job c2 = {s->col, s->h1, (size_t)d, d, A, 2 * A, 2, 1};
    thread_pool_run(p, col_task, &c2);
    kern_matmul(p, &m->conv2, s->col, A, s->x, d, s->mm);
    bias_gelu(p, s->x, m->conv2_b, A, d);
    add_bias(p, s->x, m->enc_pos, NULL, A, d);
    for (int l = 0; l < m->hp.n_audio_layer; l++) {
        const whisper_block *b = &m->enc[l];
        layernorm(p, s->xn, s->x, b->attn_ln_w, b->attn_ln_b, A, d);
        kern_mm_out qkv[3] = {{&b->q, s->q, d}, {&b->k, s->k, d}, {&b->v, s->v, d}};
        kern_matmul_multi(p, qkv, 3, s->xn, A, s->mm);
        bias_rows(p, s->q, b->q_b, A, d);
        bias_rows(p, s->v, b->v_b, A, d);
        encoder_attention(s);
        kern_matmul(p, &b->o, s->att, A, s->tmp, d, s->mm);
        add_bias(p, s->x, s->tmp, b->o_b, A, d);
        layernorm(p, s->xn, s->x, b->mlp_ln_w, b->mlp_ln_b, A, d);
        kern_matmul(p, &b->mlp0, s->xn, A, s->ff, 4 * d, s->mm);
        bias_gelu(p, s->ff, b->mlp0_b, A, 4 * d);
        kern_matmul(p, &b->mlp2, s->ff, A, s->tmp, d, s->mm);
        add_bias(p, s->x, s->tmp, b->mlp2_b, A, d);
    }
    layernorm(p, s->x, s->x, m->ln_post_w, m->ln_post_b, A, d);
    /* cross-attention K and V of every decoder layer, once per window */
    for (int l = 0; l < m->hp.n_text_layer; l++) {
        const whisper_block *b = &m->dec[l];
        kern_mm_out kv[2] = {{&b->ck, s->k, d}, {&b->cv, s->v, d}};
        kern_matmul_multi(p, kv, 2, s->x, A, s->mm);
        bias_rows(p, s->v, b->cv_b, A, d);
        cross_job cj = {s, s->k, s->v, s->ck + (size_t)l * A * d, s->cvt + (size_t)l * A * d};
        thread_pool_run(p, cross_task, &cj);
    }
    for (int b = 0; b < s->n_beams; b++) s->len[b] = 0;
}

/* ------------------------------------------------------------ decoder */

typedef struct dattn_job {
    whisper_state *s;
    int layer, n, cross;
    const quant_traits *f16;
} dattn_job;

/* Row r, head h of the decoder's attention: self (over the beam's cache up
 * to the row's position) or cross (over the window's K/V). */
static void dattn_one(dattn_job *j, int r, int h) {
    whisper_state *s = j->s;
    const int d = s->d, nh = s->m->hp.n_text_head, hd = d / nh, A = s->A;
    const float *q = s->dq + (size_t)r * d + h * hd;
    float *out = s->datt + (size_t)r * d + h * hd;
    float *sc = s->dscore + ((size_t)r * nh + h) * (size_t)(A + s->n_ctx);
    const float scale = 1.0f / sqrtf((float)hd);
    if (!j->cross) {
        const int beam = s->row_beam[r], n = s->row_pos[r] + 1;
        const size_t per_beam = (size_t)s->n_ctx * d;
        const size_t base = ((size_t)j->layer * s->n_beams + beam) * per_beam + (size_t)h * hd;
        const float *kc = s->sk + base, *vc = s->sv + base;
        float mx = -INFINITY;
        for (int t = 0; t < n; t++) {
            sc[t] = kern_dot_f32(q, kc + (size_t)t * d, hd) * scale;
            if (sc[t] > mx) mx = sc[t];
        }
        double sum = 0;
        for (int t = 0; t < n; t++) sum += sc[t] = expf(sc[t] - mx);
        const float inv = (float)(1.0 / sum);
        for (int i = 0; i < hd; i++) out[i] = 0.0f;
        for (int t = 0; t < n; t++) {
            const float w = sc[t] * inv;
            const float *vr = vc + (size_t)t * d;
            for (int i = 0; i < hd; i++) out[i] += w * vr[i];
        }
        return;
    }
    uint16_t *q16 = s->d16 + ((size_t)r * nh + h) * (size_t)(hd + A), *w16 = q16 + hd;
    for (int i = 0; i < hd; i++) q16[i] = quant_f32_to_f16(q[i] * scale);
    const uint16_t *ck = s->ck + ((size_t)j->layer * nh + h) * (size_t)A * hd;
    const uint16_t *cvt = s->cvt + ((size_t)j->layer * nh + h) * (size_t)hd * A;
    float mx = -INFINITY;
    for (int t = 0; t < A; t++) {
        j->f16->vec_dot(hd, &sc[t], ck + (size_t)t * hd, q16);
        if (sc[t] > mx) mx = sc[t];
    }
    double sum = 0;
    for (int t = 0; t < A; t++) sum += sc[t] = expf(sc[t] - mx);
    const float inv = (float)(1.0 / sum);
    for (int t = 0; t < A; t++) w16[t] = quant_f32_to_f16(sc[t] * inv);
    for (int i = 0; i < hd; i++) j->f16->vec_dot(A, &out[i], cvt + (size_t)i * A, w16);
}

static void dattn_task(void *ud, int ith, int nth) {
    dattn_job *j = ud;
    const int nh = j->s->m->hp.n_text_head;
    long lo, hi;
    thread_pool_range((long)j->n * nh, ith, nth, &lo, &hi);
    for (long i = lo; i < hi; i++) dattn_one(j, (int)(i / nh), (int)(i % nh));
}

/* Runs rows [0, n) (row_beam, row_pos and the tokens set) through the
 * decoder; logits for rows with want[r] (NULL: all) into logits rows. */
static void dec_run(whisper_state *s, const int32_t *tokens, int n, int only_last) {
    const whisper_model *m = s->m;
    const int d = s->d;
    thread_pool *p = s->pool;
    for (int r = 0; r < n; r++) {
        kern_get_row(&m->tok, tokens[r], s->dx + (size_t)r * d);
        const float *pe = m->dec_pos + (size_t)s->row_pos[r] * d;
        for (int i = 0; i < d; i++) s->dx[(size_t)r * d + i] += pe[i];
    }
    const quant_traits *f16 = quant_get(QUANT_F16);
    const size_t per_beam = (size_t)s->n_ctx * d;
    for (int l = 0; l < m->hp.n_text_layer; l++) {
        const whisper_block *b = &m->dec[l];
        layernorm(p, s->dxn, s->dx, b->attn_ln_w, b->attn_ln_b, n, d);
        kern_mm_out qkv[3] = {{&b->q, s->dq, d}, {&b->k, s->dk, d}, {&b->v, s->dv, d}};
        kern_matmul_multi(p, qkv, 3, s->dxn, n, s->mm);
        bias_rows(p, s->dq, b->q_b, n, d);
        bias_rows(p, s->dv, b->v_b, n, d);
        for (int r = 0; r < n; r++) {
            size_t at = ((size_t)l * s->n_beams + s->row_beam[r]) * per_beam + (size_t)s->row_pos[r] * d;
            memcpy(s->sk + at, s->dk + (size_t)r * d, (size_t)d * sizeof(float));
            memcpy(s->sv + at, s->dv + (size_t)r * d, (size_t)d * sizeof(float));
        }
        dattn_job sj = {s, l, n, 0, f16};
        thread_pool_run(p, dattn_task, &sj);
        kern_matmul(p, &b->o, s->datt, n, s->dtmp, d, s->mm);
        add_bias(p, s->dx, s->dtmp, b->o_b, n, d);
        layernorm(p, s->dxn, s->dx, b->cross_ln_w, b->cross_ln_b, n, d);
        kern_matmul(p, &b->cq, s->dxn, n, s->dq, d, s->mm);
        bias_rows(p, s->dq, b->cq_b, n, d);
        dattn_job cj = {s, l, n, 1, f16};
        thread_pool_run(p, dattn_task, &cj);
        kern_matmul(p, &b->co, s->datt, n, s->dtmp, d, s->mm);
        add_bias(p, s->dx, s->dtmp, b->co_b, n, d);
        layernorm(p, s->dxn, s->dx, b->mlp_ln_w, b->mlp_ln_b, n, d);
        kern_matmul(p, &b->mlp0, s->dxn, n, s->dff, 4 * d, s->mm);
        bias_gelu(p, s->dff, b->mlp0_b, n, 4 * d);
        kern_matmul(p, &b->mlp2, s->dff, n, s->dtmp, d, s->mm);
        add_bias(p, s->dx, s->dtmp, b->mlp2_b, n, d);
    }
    const int first = only_last ? n - 1 : 0;
    layernorm(p, s->dxn, s->dx + (size_t)first * d, m->ln_w, m->ln_b, n - first, d);
    kern_matmul(p, &m->tok, s->dxn, n - first, s->logits, m->hp.n_vocab, s->mm);
}

const float *whisper_decode(whisper_state *s, int b, const int32_t *tokens, int n) {
    if (n < 1 || s->len[b] + n > s->n_ctx) return NULL;
    for (int r = 0; r < n; r++) {
        s->row_beam[r] = b;
        s->row_pos[r] = s->len[b] + r;
    }
    dec_run(s, tokens, n, 1);
    s->len[b] += n;
    return s->logits;
}

const float *whisper_decode_beams(whisper_state *s, const int *beams, const int32_t *tokens, int n) {
    for (int r = 0; r < n; r++)
        if (s->len[beams[r]] + 1 > s->n_ctx) return NULL;
    for (int r = 0; r < n; r++) {
        s->row_beam[r] = beams[r];
        s->row_pos[r] = s->len[beams[r]];
    }
    dec_run(s, tokens, n, 0);
    for (int r = 0; r < n; r++) s->len[beams[r]]++;
    return s->logits;
}
