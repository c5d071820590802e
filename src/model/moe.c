/* The mixture-of-experts FFN the decoder families share (moe.h). */
#include "model/moe.h"

#include "kernels/ssm.h"
#include "quant/quant.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int kl_moe_read_hparams(const kiln_model *m, kl_moe_hp *h, char *err, size_t errlen) {
    const kl_hparams *hp = &m->hp;
    memset(h, 0, sizeof *h);
    h->n_expert = (int)kl_meta_int(m, "expert_count", 0);
    h->n_used = (int)kl_meta_int(m, "expert_used_count", 0);
    if (h->n_expert < 0 || h->n_expert > 4096 || (h->n_expert && (h->n_used < 1 || h->n_used > h->n_expert))) {
        snprintf(err, errlen, "bad expert_count %d / expert_used_count %d", h->n_expert, h->n_used);
        return -1;
    }
    if (!h->n_expert) return 0;
    h->F_exp = (int)kl_meta_int(m, "expert_feed_forward_length", h->n_used ? hp->n_ff / h->n_used : 0);
    h->F_sh = (int)kl_meta_int(m, "expert_shared_feed_forward_length", hp->n_ff);
    h->w_scale = (float)kl_meta_float(m, "expert_weights_scale", 0.0);
    h->w_norm = 1;
    const int64_t gating = kl_meta_int(m, "expert_gating_func", 1);
    h->sigmoid = gating == 2;
    h->n_group = (int)kl_meta_int(m, "expert_group_count", 0);
    h->n_group_used = (int)kl_meta_int(m, "expert_group_used_count", 0);
    if (h->F_exp <= 0 || h->F_exp > (1 << 20) || h->F_sh < 0 || h->F_sh > (1 << 20) || (gating != 1 && gating != 2)) {
        snprintf(err, errlen,
                 "bad expert metadata (expert_feed_forward_length %d, expert_shared_feed_forward_length %d, "
                 "expert_gating_func %lld: kiln routes by softmax, 1, or sigmoid, 2)",
                 h->F_exp, h->F_sh, (long long)gating);
        return -1;
    }
    if (h->n_group > 1 && (h->n_group > 256 || h->n_expert % h->n_group || h->n_group_used < 1 ||
                           h->n_group_used > h->n_group || h->n_used > h->n_group_used * (h->n_expert / h->n_group))) {
        snprintf(err, errlen, "bad expert groups (expert_group_count %d, expert_group_used_count %d)", h->n_group,
                 h->n_group_used);
        return -1;
    }
    return 0;
}

/* An optional F32 [n, ne] tensor of per-expert biases. */
static const float *bias_rows(kl_binder *B, const char *name, int64_t n, int ne) {
    const kk_mat b = kl_bind_mat(B, name, n, ne, 1);
    if (b.data && b.type != KQ_F32) {
        kl_bind_fail(B, "tensor %s must be F32 (it is %s)", name, kq_get(b.type)->name);
        return NULL;
    }
    return b.data;
}

void kl_moe_bind(kl_binder *B, const kiln_model *m, const kl_moe_hp *h, int il, kl_moe_layer *l, kk_mat *views) {
    const int64_t E = m->hp.n_embd;
    char n[96];
#define NAME(s) (snprintf(n, sizeof n, "blk.%d.%s", il, s), n)
    if (h->n_expert <= 0) {
        kl_bind_fail(B, "layer %d routes to experts but expert_count is %d", il, h->n_expert);
        return;
    }
    const int ne = h->n_expert;
    l->router = kl_bind_mat(B, NAME("ffn_gate_inp.weight"), E, ne, 0);
    if (l->router.data && l->router.type != KQ_F32) {
        kl_bind_fail(B, "tensor %s must be F32 (it is %s)", n, kq_get(l->router.type)->name);
        return;
    }
    l->e_gate = views;
    l->e_up = views + ne;
    l->e_down = views + 2 * ne;
    const int64_t Fe = h->F_exp;
    if (gguf_find_tensor(m->gf, NAME("ffn_gate_up_exps.weight"))) {
        /* one [E, 2 Fe, n_expert] tensor: per expert the gate rows, then the up rows */
        if (kl_bind_mats3(B, n, E, 2 * Fe, ne, l->e_gate, 0))
            for (int e = 0; e < ne; e++) {
                l->e_gate[e].nrows = Fe;
                l->e_up[e] = l->e_gate[e];
                l->e_up[e].data = (const uint8_t *)l->e_gate[e].data + kq_row_size(l->e_gate[e].type, E) * (size_t)Fe;
            }
    } else {
        kl_bind_mats3(B, NAME("ffn_gate_exps.weight"), E, Fe, ne, l->e_gate, 0);
        kl_bind_mats3(B, NAME("ffn_up_exps.weight"), E, Fe, ne, l->e_up, 0);
    }
    kl_bind_mats3(B, NAME("ffn_down_exps.weight"), Fe, E, ne, l->e_down, 0);
    l->router_b = kl_bind_vec(B, NAME("ffn_gate_inp.bias"), ne, 1);
    if (!gguf_find_tensor(m->gf, NAME("ffn_gate_up_exps.weight"))) {
        l->b_gate = bias_rows(B, NAME("ffn_gate_exps.bias"), Fe, ne);
        l->b_up = bias_rows(B, NAME("ffn_up_exps.bias"), Fe, ne);
    }
    l->b_down = bias_rows(B, NAME("ffn_down_exps.bias"), E, ne);
    if (gguf_find_tensor(m->gf, NAME("ffn_up_shexp.weight"))) {
        const int64_t Fs = h->F_sh;
        l->s_gate = kl_bind_mat(B, NAME("ffn_gate_shexp.weight"), E, Fs, 0);
        l->s_up = kl_bind_mat(B, NAME("ffn_up_shexp.weight"), E, Fs, 0);
        l->s_down = kl_bind_mat(B, NAME("ffn_down_shexp.weight"), Fs, E, 0);
        if (!h->sh_ungated) l->s_gate_inp = kl_bind_vec(B, NAME("ffn_gate_inp_shexp.weight"), E, 0);
    }
    if (h->probs_b) l->sel_bias = kl_bind_vec(B, NAME("exp_probs_b.bias"), ne, 1);
#undef NAME
}

void kl_moe_weights(const kiln_model *m, const kl_moe_hp *h, kl_moe_layer *l, kl_weights *w) {
    kk_mat *ms[] = {&l->s_gate, &l->s_up, &l->s_down};
    for (size_t k = 0; k < sizeof ms / sizeof ms[0]; k++) kl_weights_mat(w, ms[k]);
    if (l->e_gate)
        for (int e = 0; e < h->n_expert; e++) {
            kl_weights_mat(w, &l->e_gate[e]);
            kl_weights_mat(w, &l->e_up[e]);
            kl_weights_mat(w, &l->e_down[e]);
        }
    kl_weights_vec(w, &l->s_gate_inp, m->hp.n_embd);
    kl_weights_vec(w, &l->sel_bias, h->n_expert);
    const int64_t ne = h->n_expert, Fe = h->F_exp;
    kl_weights_vec(w, &l->router_b, ne);
    kl_weights_vec(w, &l->b_gate, ne * Fe);
    kl_weights_vec(w, &l->b_up, ne * Fe);
    kl_weights_vec(w, &l->b_down, ne * m->hp.n_embd);
}

uint64_t kl_moe_active_bytes(const kiln_model *m, const kl_moe_hp *h, int n_layer) {
    uint64_t sum = 0;
    for (int i = 0; i < gguf_n_tensors(m->gf); i++) {
        const gguf_tensor *t = gguf_tensor_at(m->gf, i);
        int layer = -1;
        if (sscanf(t->name, "blk.%d.", &layer) == 1 && layer >= n_layer) continue;
        sum += t->n_dims == 3 && h->n_expert ? t->nbytes / (uint64_t)h->n_expert * (uint64_t)h->n_used : t->nbytes;
    }
    return sum;
}

int kl_moe_ws_init(kl_moe_ws *w, const kl_moe_hp *h, int n_embd, int n_batch) {
    memset(w, 0, sizeof *w);
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
        {(void **)&w->e_off, NE * 4},       {(void **)&w->outs, 2 * NE * sizeof(kk_mm_out)},
        {(void **)&w->rsel, NE * 4},        {(void **)&w->out_t0, 2 * NE * 4},
        {(void **)&w->out_nt, 2 * NE * 4},
    };
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        if (!(*bufs[i].p = malloc(bufs[i].bytes ? bufs[i].bytes : 1))) return -1;
    return 0;
}

void kl_moe_ws_free(kl_moe_ws *w) {
    void *bufs[] = {w->router, w->sgl, w->sel,     w->selw,  w->row_of, w->mx,     w->mg,     w->mu,  w->md,
                    w->sg,     w->su,  w->e_count, w->e_off, w->outs,   w->out_t0, w->out_nt, w->rsel};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) free(bufs[i]);
    memset(w, 0, sizeof *w);
}

int kl_moe_mm_rows(const kl_moe_hp *h, int n_batch) { return h->n_used > 1 ? n_batch * h->n_used : n_batch; }

int64_t kl_moe_mm_cols(const kl_moe_hp *h) { return h->F_exp > h->F_sh ? h->F_exp : h->F_sh; }

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
static void add_expert_bias(const kl_moe_ws *w, const float *bias, float *rows, int width, int n_expert) {
    for (int e = 0; e < n_expert; e++)
        for (int r = w->e_off[e]; r < w->e_off[e] + w->e_count[e]; r++)
            kk_add(rows + (size_t)r * width, bias + (size_t)e * width, width);
}

/* The routed rows: xn of every (token, slot) copied into mx grouped by
 * expert, the experts' gate/up and down products over their groups, then
 * per token the weighted sum in slot order plus the gated shared expert. */
void kl_moe_ffn(kiln_context *c, const kk_ops *ops, const kl_moe_hp *h, const kl_moe_layer *L, kl_moe_ws *w, float *xn,
                float *y, int n) {
    const int E = c->m->hp.n_embd, NE = h->n_expert, KU = h->n_used, Fe = h->F_exp, Fs = h->F_sh;
    const int shared = L->s_up.data != NULL, gated = shared && L->s_gate_inp;
    /* the router, and the shared expert's products on the same input (its
     * gate vector as a one-row matrix) */
    const kk_mat sgi = {L->s_gate_inp, KQ_F32, E, 1, NULL};
    kk_mm_out o0[4] = {{&L->router, w->router, NE}};
    int n0 = 1;
    if (shared) {
        o0[n0++] = (kk_mm_out){&L->s_gate, w->sg, Fs};
        o0[n0++] = (kk_mm_out){&L->s_up, w->su, Fs};
        if (gated) o0[n0++] = (kk_mm_out){&sgi, w->sgl, 1};
    }
    kk_matmul_multi(c->pool, o0, n0, xn, n, c->mm_scratch);
    if (L->router_b)
        for (int t = 0; t < n; t++) kk_add(w->router + (size_t)t * NE, L->router_b, NE);
    /* route, then group the rows by expert */
    memset(w->e_count, 0, (size_t)NE * sizeof *w->e_count);
    const int general = h->sigmoid || L->sel_bias || h->n_group > 1;
    const kk_moe_gate g = {h->sigmoid, L->sel_bias, h->n_group, h->n_group_used, h->w_norm, h->w_scale};
    for (int t = 0; t < n; t++) {
        if (h->gating == KL_MOE_TOPK_SOFTMAX)
            route_topk_softmax(w->router + (size_t)t * NE, NE, KU, h->w_scale, w->sel + (size_t)t * KU,
                               w->selw + (size_t)t * KU);
        else if (general)
            kk_moe_route_sel(w->router + (size_t)t * NE, &g, NE, KU, w->rsel, w->sel + (size_t)t * KU,
                             w->selw + (size_t)t * KU);
        else
            kk_moe_route(w->router + (size_t)t * NE, NE, KU, h->w_norm, h->w_scale, w->sel + (size_t)t * KU,
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
        for (int k = 0; k < 2; k++) {
            w->outs[n_out] = (kk_mm_out){k ? &L->e_up[e] : &L->e_gate[e], (k ? w->mu : w->mg) + (size_t)r0 * Fe, Fe};
            w->out_t0[n_out] = one ? 0 : r0;
            w->out_nt[n_out++] = cnt;
        }
    }
    const int rows = n * KU;
    for (int a = 0; a < n_out; a += KK_MM_MAX_OUTS)
        kk_matmul_ranges(c->pool, w->outs + a, w->out_t0 + a, w->out_nt + a,
                         n_out - a < KK_MM_MAX_OUTS ? n_out - a : KK_MM_MAX_OUTS, one ? xn : w->mx, one ? 1 : rows,
                         c->mm_scratch);
    if (L->b_gate) add_expert_bias(w, L->b_gate, w->mg, Fe, NE);
    if (L->b_up) add_expert_bias(w, L->b_up, w->mu, Fe, NE);
    for (int r = 0; r < rows; r++)
        if (h->act == KL_MOE_SWIGLU_OAI)
            kk_swiglu_oai(w->mg + (size_t)r * Fe, w->mu + (size_t)r * Fe, Fe, 1.702f, 7.0f);
        else
            ops->swiglu(w->mg + (size_t)r * Fe, w->mu + (size_t)r * Fe, Fe);
    n_out = 0;
    for (int e = 0; e < NE; e++) {
        if (!w->e_count[e]) continue;
        const int32_t r0 = w->e_off[e], cnt = w->e_count[e];
        w->outs[n_out] = (kk_mm_out){&L->e_down[e], w->md + (size_t)r0 * E, E};
        w->out_t0[n_out] = r0;
        w->out_nt[n_out++] = cnt;
    }
    for (int a = 0; a < n_out; a += KK_MM_MAX_OUTS)
        kk_matmul_ranges(c->pool, w->outs + a, w->out_t0 + a, w->out_nt + a,
                         n_out - a < KK_MM_MAX_OUTS ? n_out - a : KK_MM_MAX_OUTS, w->mg, rows, c->mm_scratch);
    if (L->b_down) add_expert_bias(w, L->b_down, w->md, E, NE);
    if (shared) {
        for (int t = 0; t < n; t++) ops->swiglu(w->sg + (size_t)t * Fs, w->su + (size_t)t * Fs, Fs);
        kk_matmul(c->pool, &L->s_down, w->sg, n, y, E, c->mm_scratch);
    }
    for (int t = 0; t < n; t++) {
        float *yt = y + (size_t)t * E;
        const float sgate = gated ? kk_sigmoid(w->sgl[t]) : 1.0f;
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
