/* The mixture-of-experts FFN the decoder families share (moe.h). */
#include "model/moe.h"

#include "quant/quant.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

kiln_status model_moe_read_hparams(const kiln_model *m, model_moe_hp *h) {
    const model_hparams *hp = &m->hp;
    memset(h, 0, sizeof *h);
    h->n_expert = (int)model_meta_int(m, "expert_count", 0);
    h->n_used = (int)model_meta_int(m, "expert_used_count", 0);
    if (h->n_expert < 0 || h->n_expert > 4096 || (h->n_expert && (h->n_used < 1 || h->n_used > h->n_expert))) {
        return base_fail(KILN_ERR_FORMAT, "bad expert_count %d / expert_used_count %d", h->n_expert, h->n_used);
    }
    if (!h->n_expert) return 0;
    h->F_exp = (int)model_meta_int(m, "expert_feed_forward_length", h->n_used ? hp->n_ff / h->n_used : 0);
    h->F_sh = (int)model_meta_int(m, "expert_shared_feed_forward_length", hp->n_ff);
    h->w_scale = (float)model_meta_float(m, "expert_weights_scale", 0.0);
    h->w_norm = 1;
    const int64_t gating = model_meta_int(m, "expert_gating_func", 1);
    h->sigmoid = gating == 2;
    h->n_group = (int)model_meta_int(m, "expert_group_count", 0);
    h->n_group_used = (int)model_meta_int(m, "expert_group_used_count", 0);
    if (h->F_exp <= 0 || h->F_exp > (1 << 20) || h->F_sh < 0 || h->F_sh > (1 << 20) || (gating != 1 && gating != 2)) {
        return base_fail(KILN_ERR_FORMAT,
                         "bad expert metadata (expert_feed_forward_length %d, expert_shared_feed_forward_length %d, "
                         "expert_gating_func %lld: kiln routes by softmax, 1, or sigmoid, 2)",
                         h->F_exp, h->F_sh, (long long)gating);
    }
    if (h->n_group > 1 && (h->n_group > 256 || h->n_expert % h->n_group || h->n_group_used < 1 ||
                           h->n_group_used > h->n_group || h->n_used > h->n_group_used * (h->n_expert / h->n_group))) {
        return base_fail(KILN_ERR_FORMAT, "bad expert groups (expert_group_count %d, expert_group_used_count %d)",
                         h->n_group, h->n_group_used);
    }
    return 0;
}

/* An optional F32 [n, ne] tensor of per-expert biases. */
static const float *bias_rows(model_binder *B, const char *name, int64_t n, int ne) {
    const kern_mat b = model_bind_mat(B, name, n, ne, 1);
    if (b.data && b.type != QUANT_F32) {
        model_bind_fail(B, "tensor %s must be F32 (it is %s)", name, quant_get(b.type)->name);
        return NULL;
    }
    return b.data;
}

void model_moe_bind(model_binder *B, const kiln_model *m, const model_moe_hp *h, int il, model_moe_layer *l,
                    kern_mat *views) {
    const int64_t E = m->hp.n_embd;
    char n[96];
#define NAME(s) (snprintf(n, sizeof n, "blk.%d.%s", il, s), n)
    if (h->n_expert <= 0) {
        model_bind_fail(B, "layer %d routes to experts but expert_count is %d", il, h->n_expert);
        return;
    }
    const int ne = h->n_expert;
    l->router = model_bind_mat(B, NAME("ffn_gate_inp.weight"), E, ne, 0);
    if (l->router.data && l->router.type != QUANT_F32) {
        model_bind_fail(B, "tensor %s must be F32 (it is %s)", n, quant_get(l->router.type)->name);
        return;
    }
    l->e_gate = views;
    l->e_up = views + ne;
    l->e_down = views + 2 * ne;
    const int64_t Fe = h->F_exp;
    const int relu2 = h->act == MODEL_MOE_RELU2; /* no gate products */
    if (relu2) {
        l->e_gate = NULL;
        model_bind_mats3(B, NAME("ffn_up_exps.weight"), E, Fe, ne, l->e_up, 0);
    } else if (gguf_find_tensor(m->gf, NAME("ffn_gate_up_exps.weight"))) {
        /* one [E, 2 Fe, n_expert] tensor: per expert the gate rows, then the up rows */
        if (model_bind_mats3(B, n, E, 2 * Fe, ne, l->e_gate, 0))
            for (int e = 0; e < ne; e++) {
                l->e_gate[e].nrows = Fe;
                l->e_up[e] = l->e_gate[e];
                l->e_up[e].data =
                    (const uint8_t *)l->e_gate[e].data + quant_row_size(l->e_gate[e].type, E) * (size_t)Fe;
            }
    } else {
        model_bind_mats3(B, NAME("ffn_gate_exps.weight"), E, Fe, ne, l->e_gate, 0);
        model_bind_mats3(B, NAME("ffn_up_exps.weight"), E, Fe, ne, l->e_up, 0);
    }
    model_bind_mats3(B, NAME("ffn_down_exps.weight"), Fe, E, ne, l->e_down, 0);
    l->router_b = model_bind_vec(B, NAME("ffn_gate_inp.bias"), ne, 1);
    if (!gguf_find_tensor(m->gf, NAME("ffn_gate_up_exps.weight"))) {
        if (!relu2) l->b_gate = bias_rows(B, NAME("ffn_gate_exps.bias"), Fe, ne);
        l->b_up = bias_rows(B, NAME("ffn_up_exps.bias"), Fe, ne);
    }
    l->b_down = bias_rows(B, NAME("ffn_down_exps.bias"), E, ne);
    if (gguf_find_tensor(m->gf, NAME("ffn_up_shexp.weight"))) {
        const int64_t Fs = h->F_sh;
        if (!relu2) l->s_gate = model_bind_mat(B, NAME("ffn_gate_shexp.weight"), E, Fs, 0);
        l->s_up = model_bind_mat(B, NAME("ffn_up_shexp.weight"), E, Fs, 0);
        l->s_down = model_bind_mat(B, NAME("ffn_down_shexp.weight"), Fs, E, 0);
        if (!h->sh_ungated) l->s_gate_inp = model_bind_vec(B, NAME("ffn_gate_inp_shexp.weight"), E, 0);
    }
    if (h->probs_b) l->sel_bias = model_bind_vec(B, NAME("exp_probs_b.bias"), ne, 1);
#undef NAME
}

void model_moe_weights(const kiln_model *m, const model_moe_hp *h, model_moe_layer *l, model_weights *w) {
    kern_mat *ms[] = {&l->router, &l->s_gate, &l->s_up, &l->s_down};
    for (size_t k = 0; k < sizeof ms / sizeof ms[0]; k++) model_weights_mat(w, ms[k]);
    if (l->e_up)
        for (int e = 0; e < h->n_expert; e++) {
            if (l->e_gate) model_weights_mat(w, &l->e_gate[e]);
            model_weights_mat(w, &l->e_up[e]);
            model_weights_mat(w, &l->e_down[e]);
        }
    model_weights_vec(w, &l->s_gate_inp, m->hp.n_embd);
    model_weights_vec(w, &l->sel_bias, h->n_expert);
    const int64_t ne = h->n_expert, Fe = h->F_exp;
    model_weights_vec(w, &l->router_b, ne);
    model_weights_vec(w, &l->b_gate, ne * Fe);
    model_weights_vec(w, &l->b_up, ne * Fe);
    model_weights_vec(w, &l->b_down, ne * m->hp.n_embd);
}

uint64_t model_moe_active_bytes(const kiln_model *m, const model_moe_hp *h, int n_layer) {
    uint64_t sum = 0;
    for (int i = 0; i < gguf_n_tensors(m->gf); i++) {
        const gguf_tensor *t = gguf_tensor_at(m->gf, i);
        int layer = -1;
        if (sscanf(t->name, "blk.%d.", &layer) == 1 && layer >= n_layer) continue;
        sum += t->n_dims == 3 && h->n_expert ? t->nbytes / (uint64_t)h->n_expert * (uint64_t)h->n_used : t->nbytes;
    }
    return sum;
}

int model_moe_ws_init(kiln_context *c, model_moe_ws *w, const model_moe_hp *h, int n_embd, int n_batch) {
    /* the workspace, and room on the backend for the products over the
     * routed rows (model_moe_mm_rows / _cols) */
    const int64_t cols = model_moe_mm_cols(h) > n_embd ? model_moe_mm_cols(h) : n_embd;
    w->p = c->bx.ops->moe_ws_new(&c->bx, h, n_embd, n_batch);
    return w->p && !c->bx.ops->reserve(&c->bx, cols, model_moe_mm_rows(h, n_batch)) ? 0 : -1;
}

void model_moe_ws_free(kiln_context *c, model_moe_ws *w) {
    if (w->p) c->bx.ops->moe_ws_free(&c->bx, w->p);
    w->p = NULL;
}

int model_moe_mm_rows(const model_moe_hp *h, int n_batch) { return h->n_used > 1 ? n_batch * h->n_used : n_batch; }

int64_t model_moe_mm_cols(const model_moe_hp *h) { return h->F_exp > h->F_sh ? h->F_exp : h->F_sh; }

void model_moe_ffn(kiln_context *c, const model_moe_hp *h, const model_moe_layer *L, model_moe_ws *w, float *xn,
                   float *y, int n) {
    c->bx.ops->moe_ffn(&c->bx, h, L, w->p, xn, y, c->m->hp.n_embd, n);
}
