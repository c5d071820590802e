/* The CPU backend's mixture-of-experts FFN (backend.h; model/moe.h says
 * what it computes). */
#include "backend/cpu.h"

#include "kernels/ssm.h"
#include "quant/quant.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* The FFN's activations for n_batch tokens (per token row; the routed
 * rows grouped by expert). */
typedef struct moe_ws {
    float *router, *sgl;      /* [n][n_expert] logits, [n] shared gate logit */
    int32_t *sel;             /* [n][k] experts per token */
    float *selw;              /* [n][k] their weights */
    float *rsel;              /* [n_expert] routing scratch */
    int32_t *row_of;          /* [n][k] the (token, slot)'s row in the grouped arrays */
    float *mx, *mg, *mu, *md; /* [n * k][n_embd] / [n * k][F_exp] x2 / [n * k][n_embd] */
    float *sg, *su;           /* [n][F_sh] */
    int32_t *e_count, *e_off; /* [n_expert] */
    kern_mm_out *outs;        /* [2 * n_expert] products over row ranges, */
    int32_t *out_t0, *out_nt; /* and those ranges */
} moe_ws;

void *backend_cpu_moe_ws_new(backend_ctx *X, const backend_moe_hp *h, int n_embd, int n_batch) {
    moe_ws *w = calloc(1, sizeof *w);
    if (!w) return NULL;
    const size_t B = (size_t)n_batch, E = (size_t)n_embd, NE = (size_t)h->n_expert, KU = (size_t)h->n_used;
    const size_t Fe = (size_t)h->F_exp, Fs = (size_t)h->F_sh;
    struct {
        void **p;
        size_t bytes;
    } bufs[] = {
        {(void **)&w->router, B * NE * 4},  {(void **)&w->sgl, B * 4},
        {(void **)&w->sel, B * KU * 4},     {(void **)&w->selw, B * KU * 4},
        {(void **)&w->row_of, B * KU * 4},  {(void **)&w->mx, B * KU * E * 4},
        {(void **)&w->mg, B * KU * Fe * 4}, {(void **)&w->mu, B * KU * Fe * 4},
        {(void **)&w->md, B * KU * E * 4},  {(void **)&w->sg, B * Fs * 4},
        {(void **)&w->su, B * Fs * 4},      {(void **)&w->e_count, NE * 4},
        {(void **)&w->e_off, NE * 4},       {(void **)&w->outs, 2 * NE * sizeof(kern_mm_out)},
        {(void **)&w->rsel, NE * 4},        {(void **)&w->out_t0, 2 * NE * 4},
        {(void **)&w->out_nt, 2 * NE * 4},
    };
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        if (!(*bufs[i].p = malloc(bufs[i].bytes ? bufs[i].bytes : 1))) {
            backend_cpu_moe_ws_free(X, w);
            return NULL;
        }
    return w;
}

void backend_cpu_moe_ws_free(backend_ctx *X, void *ws) {
    (void)X;
    moe_ws *w = ws;
    if (!w) return;
    void *bufs[] = {w->router, w->sgl, w->sel,     w->selw,  w->row_of, w->mx,     w->mg,     w->mu,  w->md,
                    w->sg,     w->su,  w->e_count, w->e_off, w->outs,   w->out_t0, w->out_nt, w->rsel};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) free(bufs[i]);
    free(w);
}

/* Routing by the k largest logits (ties to the lower id, in descending
 * order) and a softmax over just those k, times scale (0 or 1: none). */
static void route_topk_softmax(const float *logits, int n_expert, int k, float scale, int32_t *ids, float *wt) {
    for (int i = 0; i < k; i++) {
        int best = -1;
        for (int e = 0; e < n_expert; e++) {
            int taken = 0;
            for (int j = 0; j < i && !taken; j++) taken = ids[j] == e;
            if (!taken && (best < 0 || logits[e] > logits[best])) best = e;
        }
        ids[i] = best;
    }
    const float mx = logits[ids[0]];
    double sum = 0.0;
    for (int i = 0; i < k; i++) sum += (wt[i] = expf(logits[ids[i]] - mx));
    const float inv = (float)(1.0 / sum);
    for (int i = 0; i < k; i++) wt[i] *= inv;
    if (scale != 1.0f && scale != 0.0f)
        for (int i = 0; i < k; i++) wt[i] *= scale;
}

/* rows [r][width] += bias[e] for every row r routed to expert e. */
static void add_expert_bias(const moe_ws *w, const float *bias, float *rows, int width, int n_expert) {
    for (int e = 0; e < n_expert; e++)
        for (int r = w->e_off[e]; r < w->e_off[e] + w->e_count[e]; r++)
            kern_add(rows + (size_t)r * width, bias + (size_t)e * width, width);
}

/* The routed rows: xn of every (token, slot) copied into mx grouped by
 * expert, the experts' gate/up and down products over their groups, then
 * per token the weighted sum in slot order plus the gated shared expert. */
/* x = relu(x)^2 over n. */
static void relu_sq(float *x, size_t n) {
    for (size_t i = 0; i < n; i++) {
        const float r = x[i] > 0.0f ? x[i] : 0.0f;
        x[i] = r * r;
    }
}

void backend_cpu_moe_ffn(backend_ctx *X, const backend_moe_hp *h, const backend_moe_layer *L, void *work, float *xn,
                         float *y, int n_embd, int n) {
    moe_ws *w = work;
    const kern_ops *ops = backend_cpu_of(X)->k;
    void *scratch = backend_cpu_of(X)->mm_scratch;
    const int E = n_embd, NE = h->n_expert, KU = h->n_used, Fe = h->F_exp, Fs = h->F_sh;
    const int shared = L->s_up.data != NULL, gated = shared && L->s_gate_inp;
    const int relu2 = h->act == BACKEND_MOE_RELU2; /* up alone, into mg and sg */
    /* the router, and the shared expert's products on the same input (its
     * gate vector as a one-row matrix) */
    const kern_mat sgi = {L->s_gate_inp, QUANT_F32, E, 1, NULL};
    kern_mm_out o0[4] = {{&L->router, w->router, NE}};
    int n0 = 1;
    if (shared) {
        if (!relu2) o0[n0++] = (kern_mm_out){&L->s_gate, w->sg, Fs};
        o0[n0++] = (kern_mm_out){&L->s_up, relu2 ? w->sg : w->su, Fs};
        if (gated) o0[n0++] = (kern_mm_out){&sgi, w->sgl, 1};
    }
    kern_matmul_multi(X->pool, o0, n0, xn, n, scratch);
    if (L->router_b)
        for (int t = 0; t < n; t++) kern_add(w->router + (size_t)t * NE, L->router_b, NE);
    /* route, then group the rows by expert */
    memset(w->e_count, 0, (size_t)NE * sizeof *w->e_count);
    const int general = h->sigmoid || L->sel_bias || h->n_group > 1;
    const kern_moe_gate g = {h->sigmoid, L->sel_bias, h->n_group, h->n_group_used, h->w_norm, h->w_scale};
    for (int t = 0; t < n; t++) {
        if (h->gating == BACKEND_MOE_TOPK_SOFTMAX)
            route_topk_softmax(w->router + (size_t)t * NE, NE, KU, h->w_scale, w->sel + (size_t)t * KU,
                               w->selw + (size_t)t * KU);
        else if (general)
            kern_moe_route_sel(w->router + (size_t)t * NE, &g, NE, KU, w->rsel, w->sel + (size_t)t * KU,
                               w->selw + (size_t)t * KU);
        else
            kern_moe_route(w->router + (size_t)t * NE, NE, KU, h->w_norm, h->w_scale, w->sel + (size_t)t * KU,
                           w->selw + (size_t)t * KU);
        for (int s = 0; s < KU; s++) w->e_count[w->sel[(size_t)t * KU + s]]++;
    }
    int off = 0, n_out = 0;
    for (int e = 0; e < NE; e++) {
        w->e_off[e] = off;
        off += w->e_count[e];
    }
    /* one token (decode; its k experts are distinct): every expert reads
     * xn itself, converted once for all of them; else xn is copied to each
     * of its rows */
    const int one = n == 1;
    for (int e = 0; e < NE; e++) w->e_count[e] = 0; /* refilled as rows are placed */
    for (int t = 0; t < n; t++)
        for (int s = 0; s < KU; s++) {
            const int e = w->sel[(size_t)t * KU + s], r = w->e_off[e] + w->e_count[e]++;
            w->row_of[(size_t)t * KU + s] = r;
            if (!one) memcpy(w->mx + (size_t)r * E, xn + (size_t)t * E, (size_t)E * sizeof(float));
        }
    for (int e = 0; e < NE; e++) {
        if (!w->e_count[e]) continue;
        const int32_t r0 = w->e_off[e], cnt = w->e_count[e];
        for (int k = relu2; k < 2; k++) {
            w->outs[n_out] =
                (kern_mm_out){k ? &L->e_up[e] : &L->e_gate[e], (k && !relu2 ? w->mu : w->mg) + (size_t)r0 * Fe, Fe};
            w->out_t0[n_out] = one ? 0 : r0;
            w->out_nt[n_out++] = cnt;
        }
    }
    const int rows = n * KU;
    for (int a = 0; a < n_out; a += KERN_MM_MAX_OUTS)
        kern_matmul_ranges(X->pool, w->outs + a, w->out_t0 + a, w->out_nt + a,
                           n_out - a < KERN_MM_MAX_OUTS ? n_out - a : KERN_MM_MAX_OUTS, one ? xn : w->mx,
                           one ? 1 : rows, scratch);
    if (L->b_gate) add_expert_bias(w, L->b_gate, w->mg, Fe, NE);
    if (L->b_up) add_expert_bias(w, L->b_up, relu2 ? w->mg : w->mu, Fe, NE);
    if (relu2) relu_sq(w->mg, (size_t)rows * Fe);
    for (int r = 0; r < rows && !relu2; r++)
        if (h->act == BACKEND_MOE_SWIGLU_OAI)
            kern_swiglu_oai(w->mg + (size_t)r * Fe, w->mu + (size_t)r * Fe, Fe, 1.702f, 7.0f);
        else
            ops->swiglu(w->mg + (size_t)r * Fe, w->mu + (size_t)r * Fe, Fe);
    n_out = 0;
    for (int e = 0; e < NE; e++) {
        if (!w->e_count[e]) continue;
        const int32_t r0 = w->e_off[e], cnt = w->e_count[e];
        w->outs[n_out] = (kern_mm_out){&L->e_down[e], w->md + (size_t)r0 * E, E};
        w->out_t0[n_out] = r0;
        w->out_nt[n_out++] = cnt;
    }
    for (int a = 0; a < n_out; a += KERN_MM_MAX_OUTS)
        kern_matmul_ranges(X->pool, w->outs + a, w->out_t0 + a, w->out_nt + a,
                           n_out - a < KERN_MM_MAX_OUTS ? n_out - a : KERN_MM_MAX_OUTS, w->mg, rows, scratch);
    if (L->b_down) add_expert_bias(w, L->b_down, w->md, E, NE);
    if (shared) {
        if (relu2)
            relu_sq(w->sg, (size_t)n * Fs);
        else
            for (int t = 0; t < n; t++) ops->swiglu(w->sg + (size_t)t * Fs, w->su + (size_t)t * Fs, Fs);
        kern_matmul(X->pool, &L->s_down, w->sg, n, y, E, scratch);
    }
    for (int t = 0; t < n; t++) {
        float *yt = y + (size_t)t * E;
        const float sgate = gated ? kern_sigmoid(w->sgl[t]) : 1.0f;
        float *acc = xn + (size_t)t * E; /* every product that reads xn has run */
        for (int s = 0; s < KU; s++) {
            const float ws = w->selw[(size_t)t * KU + s];
            const float *d = w->md + (size_t)w->row_of[(size_t)t * KU + s] * E;
            if (s == 0)
                for (int i = 0; i < E; i++) acc[i] = d[i] * ws;
            else
                for (int i = 0; i < E; i++) acc[i] += d[i] * ws;
        }
        if (shared)
            for (int i = 0; i < E; i++) yt[i] = acc[i] + yt[i] * sgate;
        else
            memcpy(yt, acc, (size_t)E * sizeof(float));
    }
}
