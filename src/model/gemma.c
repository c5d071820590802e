/*
 * The Gemma decoder family: gemma3 (Gemma 3 text) and gemma4 (Gemma 4
 * text).  Per token row:
 *
 *   x = tok[id] * sqrt(n_embd)
 *   per layer l:
 *     h = rms(x) * attn_norm
 *     q = rope(rms_head(Wq h) * q_norm),  k = rope(rms_head(Wk h) * k_norm),  v = Wv h
 *     x += rms(Wo attn(q * q_scale, k, v)) * post_attention_norm
 *     x += rms(down(gelu_tanh(gate h) * up h)) * post_ffw_norm
 *   logits = output(rms(x) * output_norm), then cap * tanh(logits / cap)
 *           when final_logit_softcapping is set
 *
 * Sliding layers (gemma.h's model_gemma_swa_layers) see the last
 * attention.sliding_window positions and rotate with rope.freq_base_swa,
 * unscaled; global layers see everything and use rope.freq_base with the
 * file's scaling.  NeoX RoPE.  The attention's own scale is 1.
 *
 * gemma3: the converter already added Gemma's 1 to the norm weights (used
 * as stored); q_scale = 1/sqrt(head size) (1/sqrt(n_embd / n_head) for the
 * 62-layer 27B, as llama.cpp sets it).
 *
 * gemma4: q_scale 1; v = rms_head(Wv h) without a weight, and a layer
 * without attn_v uses its raw K projection (before the K norm) as V.  The
 * head size, KV heads and FFN width are per layer: sliding layers use
 * attention.key_length_swa and rope.dimension_count_swa, global ones
 * attention.key_length and rope.dimension_count with the rope_freqs
 * divisors; head_count_kv and feed_forward_length may be arrays.  The last
 * attention.shared_kv_layers layers have no K/V of their own: they read the
 * cache of the last layer with one of their kind (sliding: n_kv - 2, global:
 * n_kv - 1, n_kv the layers with a cache).  Per-layer inputs (width Dp =
 * embedding_length_per_layer_input):
 *   pl = (per_layer_token_embd[id] * sqrt(Dp)
 *         + rms_slice(per_layer_model_proj x / sqrt(n_embd)) * per_layer_proj_norm) / sqrt(2)
 * and after each layer's FFN
 *   x += rms(proj(gelu(inp_gate x) * pl[l])) * post_norm,   x *= layer_output_scale
 *
 * Activations (per token row): x, xn [n_embd]; q, att [n_head * hd];
 * k, v [n_head_kv * hd]; gate, up [n_ff] (the layers' widest); pl [n_layer *
 * Dp], pg [Dp]; cs [n_rot] of the sliding layers' rotation.
 */
#include "model/gemma.h"

#include "model/decoder.h"
#include "quant/quant.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { GEMMA_4 = 1 };

static const model_arch k_archs[] = {
    {"gemma3", &model_family_gemma, 0, 0},       /* Gemma 3 (text) */
    {"gemma4", &model_family_gemma, 0, GEMMA_4}, /* Gemma 4 (text) */
};

typedef struct gm_layer {
    const float *attn_norm, *q_norm, *k_norm, *post_attn_norm, *ffn_norm, *post_ffn_norm;
    kern_mat wq, wk, wv, wo; /* wk, wv data NULL: shared KV / no attn_v */
    kern_mat w_gate, w_up, w_down;
    int local; /* sliding window */
    int hd, n_head_kv, n_ff;
    int ord;                   /* the attention-layer ordinal of the cache it reads */
    int has_kv;                /* computes and stores its K and V */
    kern_mat pl_gate, pl_proj; /* per-layer input: n_embd -> Dp -> n_embd */
    const float *pl_post_norm;
    const float *out_scale; /* [1] or NULL */
} gm_layer;

typedef struct gm_model {
    gm_layer *layers;
    int gemma4;
    int window; /* sliding window, 0: none */
    kern_rope rope_local;
    float q_scale;
    float softcap;           /* 0: none */
    int n_kv;                /* layers with a cache */
    int32_t *kv_hkv, *kv_hd; /* [n_kv] */
    int hd_max, hkv_max, ff_max;
    int dp; /* per-layer input width, 0: none */
    kern_mat pl_tok, pl_model_proj;
    const float *pl_proj_norm;
} gm_model;

/* ---------------------------------------------------------------- helpers */

kiln_status model_gemma_swa_layers(const kiln_model *m, uint8_t *local, int def_period) {
    const int n = m->hp.n_layer;
    const gguf_kv *kv = model_meta_kv(m, "attention.sliding_window_pattern");
    if (kv && kv->type == GGUF_ARRAY) {
        if ((int64_t)kv->n != n || kv->arr_type == GGUF_STRING || kv->arr_type == GGUF_ARRAY) {
            return base_fail(KILN_ERR_FORMAT, "%s: sliding_window_pattern has %llu entries for %d layers", m->arch_name,
                             (unsigned long long)kv->n, n);
        }
        for (int l = 0; l < n; l++) local[l] = gguf_arr_int(kv, (uint64_t)l) != 0;
        return 0;
    }
    const int64_t period = model_meta_int(m, "attention.sliding_window_pattern", def_period);
    if (period < 0 || period > 1024) {
        return base_fail(KILN_ERR_FORMAT, "%s: bad sliding_window_pattern %lld", m->arch_name, (long long)period);
    }
    for (int l = 0; l < n; l++) local[l] = period == 0 || l % period < period - 1;
    return 0;
}

kiln_status model_gemma_rope_local(const kiln_model *m, int n_rot, kern_rope *r) {
    *r = m->hp.rope;
    r->n_rot = n_rot;
    r->base = (float)model_meta_float(m, "rope.freq_base_swa", 10000.0);
    r->freq_scale = 1.0f;
    r->ext_factor = 0.0f;
    r->attn_factor = 1.0f;
    r->freq_factors = NULL;
    if (!(r->base > 0.0f) || !isfinite(r->base)) { return base_fail(KILN_ERR_FORMAT, "bad rope.freq_base_swa"); }
    return 0;
}

/* ggml's gelu of an F16 input, rounded to F16: its table's entry. */
static float gelu_entry(uint16_t h) {
    const float f = quant_f16_to_f32(h);
    const float g = 0.5f * f * (1.0f + tanhf(0.79788456080286535587989211986876f * f * (1.0f + 0.044715f * f * f)));
    return quant_f16_to_f32(quant_f32_to_f16(g));
}

/* The table of every F16 input's entry (256 KiB), made once: a lookup per
 * element instead of a tanhf. */
static float g_gelu[1 << 16];
static pthread_once_t g_gelu_once = PTHREAD_ONCE_INIT;
static void gelu_init(void) {
    for (uint32_t h = 0; h < (1u << 16); h++) g_gelu[h] = gelu_entry((uint16_t)h);
}

void model_gemma_geglu(float *g, const float *u, int n) {
    pthread_once(&g_gelu_once, gelu_init);
    for (int i = 0; i < n; i++) {
        const float x = g[i];
        /* ggml: 0 at x <= -10, x itself at x >= 10, the table between */
        const float y = x <= -10.0f ? 0.0f : x >= 10.0f ? x : g_gelu[quant_f32_to_f16(x)];
        g[i] = u ? y * u[i] : y;
    }
}

/* ---------------------------------------------------------------- binding */

static void gm_free(kiln_model *m) {
    gm_model *d = m->fam;
    if (!d) return;
    free(d->layers);
    free(d->kv_hkv);
    free(d->kv_hd);
    free(d);
}

/* {arch}.suffix for layer l: an array's entry or the scalar (def absent). */
static int64_t layer_int(const kiln_model *m, const char *suffix, int l, int64_t def) {
    const gguf_kv *kv = model_meta_kv(m, suffix);
    if (kv && kv->type == GGUF_ARRAY) return (int64_t)kv->n == m->hp.n_layer ? gguf_arr_int(kv, (uint64_t)l) : -1;
    return model_meta_int(m, suffix, def);
}

/* Layer shapes, kinds and cache ordinals. */
static kiln_status gm_shapes(kiln_model *m, gm_model *d) {
    model_hparams *hp = &m->hp;
    const int L = hp->n_layer;
    uint8_t *local = calloc((size_t)L, 1);
    if (!local) { return base_fail(KILN_ERR_NOMEM, "out of memory"); }
    const int64_t n_swa = model_meta_int(m, "attention.sliding_window", 0);
    if (n_swa < 0 || n_swa > (1 << 24)) {
        free(local);
        return base_fail(KILN_ERR_FORMAT, "%s: bad attention.sliding_window %lld", m->arch_name, (long long)n_swa);
    }
    /* gemma3 slides only with a window; gemma4 always has the pattern */
    kiln_status st = d->gemma4 || n_swa > 0 ? model_gemma_swa_layers(m, local, 6) : KILN_OK;
    if (st) {
        free(local);
        return st;
    }
    d->window = (int)n_swa;
    const int hd_full = hp->hd_k;
    const int hd_swa = d->gemma4 ? (int)model_meta_int(m, "attention.key_length_swa", hd_full) : hd_full;
    const int hdv_swa = d->gemma4 ? (int)model_meta_int(m, "attention.value_length_swa", hd_swa) : hd_swa;
    const int rot_swa = d->gemma4 ? (int)model_meta_int(m, "rope.dimension_count_swa", hp->rope.n_rot) : hp->rope.n_rot;
    const int64_t shared = d->gemma4 ? model_meta_int(m, "attention.shared_kv_layers", 0) : 0;
    kiln_status rc = KILN_OK;
    if (hd_swa <= 0 || hd_swa > 1024 || hdv_swa != hd_swa || rot_swa <= 0 || rot_swa > hd_swa || rot_swa % 2) {
        rc = base_fail(KILN_ERR_FORMAT, "%s: bad sliding head size %d / %d, rotary %d", m->arch_name, hd_swa, hdv_swa,
                       rot_swa);
    }
    if (!rc && (shared < 0 || (shared > 0 && shared > L - 2))) {
        rc = base_fail(KILN_ERR_FORMAT, "%s: bad attention.shared_kv_layers %lld", m->arch_name, (long long)shared);
    }
    d->n_kv = L - (int)shared;
    for (int l = 0; l < L && !rc; l++) {
        gm_layer *y = &d->layers[l];
        y->local = local[l];
        y->hd = y->local ? hd_swa : hd_full;
        const int64_t hkv = layer_int(m, "attention.head_count_kv", l, hp->n_head);
        const int64_t ff = layer_int(m, "feed_forward_length", l, 0);
        if (hkv <= 0 || hkv > hp->n_head || hp->n_head % hkv || ff <= 0 || ff > (1 << 20)) {
            rc = base_fail(KILN_ERR_FORMAT, "%s: layer %d: bad head_count_kv %lld or feed_forward_length %lld",
                           m->arch_name, l, (long long)hkv, (long long)ff);
            break;
        }
        y->n_head_kv = (int)hkv;
        y->n_ff = (int)ff;
        y->has_kv = l < d->n_kv;
        y->ord = y->has_kv ? l : d->n_kv - (y->local ? 2 : 1);
        if (!y->has_kv) {
            const gm_layer *src = y->ord >= 0 ? &d->layers[y->ord] : NULL;
            if (!src || src->local != y->local || src->hd != y->hd || src->n_head_kv != y->n_head_kv) {
                rc = base_fail(KILN_ERR_FORMAT, "%s: layer %d shares the cache of layer %d, which differs from it",
                               m->arch_name, l, y->ord);
                break;
            }
        }
        if (y->hd > d->hd_max) d->hd_max = y->hd;
        if (y->n_head_kv > d->hkv_max) d->hkv_max = y->n_head_kv;
        if (y->n_ff > d->ff_max) d->ff_max = y->n_ff;
    }
    free(local);
    if (rc) return rc;
    hp->n_ff = d->ff_max; /* what kiln show reports: the widest */
    hp->n_head_kv = d->hkv_max;
    st = model_gemma_rope_local(m, rot_swa, &d->rope_local);
    if (st) return st;
    d->kv_hkv = malloc((size_t)d->n_kv * sizeof *d->kv_hkv);
    d->kv_hd = malloc((size_t)d->n_kv * sizeof *d->kv_hd);
    if (!d->kv_hkv || !d->kv_hd) { return base_fail(KILN_ERR_NOMEM, "out of memory"); }
    for (int l = 0; l < d->n_kv; l++) {
        d->kv_hkv[l] = d->layers[l].n_head_kv;
        d->kv_hd[l] = d->layers[l].hd;
    }
    return 0;
}

static kiln_status gm_bind(kiln_model *m) {
    model_hparams *hp = &m->hp;
    gm_model *d = calloc(1, sizeof *d);
    if (d) d->layers = calloc((size_t)hp->n_layer, sizeof *d->layers);
    m->fam = d;
    if (!d || !d->layers) { return base_fail(KILN_ERR_NOMEM, "out of memory"); }
    d->gemma4 = (m->arch->flags & GEMMA_4) != 0;
    hp->rope.neox = 1;
    kiln_status st = gm_shapes(m, d);
    if (st) return st;
    d->softcap = (float)model_meta_float(m, "final_logit_softcapping", 0.0);
    if (!isfinite(d->softcap) || d->softcap < 0.0f) {
        return base_fail(KILN_ERR_FORMAT, "bad final_logit_softcapping");
    }
    if (d->gemma4)
        d->q_scale = 1.0f;
    else
        d->q_scale = hp->n_layer == 62 ? 1.0f / sqrtf((float)(hp->n_embd / hp->n_head)) : 1.0f / sqrtf((float)hp->hd_k);

    model_binder B = {m, KILN_OK};
    const int64_t E = hp->n_embd, L = hp->n_layer;
    m->tok_embd = model_bind_mat(&B, "token_embd.weight", E, -1, 0);
    hp->n_vocab = (int)m->tok_embd.nrows;
    m->out_norm = model_bind_vec(&B, "output_norm.weight", E, 0);
    m->output = model_bind_mat(&B, "output.weight", E, hp->n_vocab, 1);
    if (!m->output.data) m->output = m->tok_embd; /* tied embeddings */
    if (d->gemma4) {
        hp->rope.freq_factors = model_bind_vec(&B, "rope_freqs.weight", hp->rope.n_rot / 2, 1);
        const int64_t dp = model_meta_int(m, "embedding_length_per_layer_input", 0);
        if (dp < 0 || dp > 65536) model_bind_fail(&B, "bad embedding_length_per_layer_input %lld", (long long)dp);
        d->dp = (int)dp;
        if (d->dp > 0) {
            d->pl_tok = model_bind_mat(&B, "per_layer_token_embd.weight", dp * L, hp->n_vocab, 0);
            d->pl_model_proj = model_bind_mat(&B, "per_layer_model_proj.weight", E, dp * L, 0);
            d->pl_proj_norm = model_bind_vec(&B, "per_layer_proj_norm.weight", dp, 0);
        }
    }
    for (int i = 0; i < hp->n_layer && !B.st; i++) {
        gm_layer *l = &d->layers[i];
        char moe[64];
        snprintf(moe, sizeof moe, "blk.%d.ffn_gate_inp.weight", i);
        if (gguf_find_tensor(m->gf, moe)) {
            model_bind_fail(&B, "%s: layer %d: mixture-of-experts layers are not supported", m->arch_name, i);
            break;
        }
        const int64_t hd = l->hd, nq = (int64_t)hp->n_head * hd, nkv = (int64_t)l->n_head_kv * hd;
        char n[96];
#define NAME(s) (snprintf(n, sizeof n, "blk.%d.%s", i, s), n)
        l->attn_norm = model_bind_vec(&B, NAME("attn_norm.weight"), E, 0);
        l->wq = model_bind_mat(&B, NAME("attn_q.weight"), E, nq, 0);
        l->q_norm = model_bind_vec(&B, NAME("attn_q_norm.weight"), hd, 0);
        if (l->has_kv) {
            l->wk = model_bind_mat(&B, NAME("attn_k.weight"), E, nkv, 0);
            l->wv = model_bind_mat(&B, NAME("attn_v.weight"), E, nkv, d->gemma4);
            l->k_norm = model_bind_vec(&B, NAME("attn_k_norm.weight"), hd, 0);
        }
        l->wo = model_bind_mat(&B, NAME("attn_output.weight"), nq, E, 0);
        l->post_attn_norm = model_bind_vec(&B, NAME("post_attention_norm.weight"), E, 0);
        l->ffn_norm = model_bind_vec(&B, NAME("ffn_norm.weight"), E, 0);
        l->w_gate = model_bind_mat(&B, NAME("ffn_gate.weight"), E, l->n_ff, 0);
        l->w_up = model_bind_mat(&B, NAME("ffn_up.weight"), E, l->n_ff, 0);
        l->w_down = model_bind_mat(&B, NAME("ffn_down.weight"), l->n_ff, E, 0);
        l->post_ffn_norm = model_bind_vec(&B, NAME("post_ffw_norm.weight"), E, 0);
        if (d->gemma4) {
            l->out_scale = model_bind_vec(&B, NAME("layer_output_scale.weight"), 1, 1);
            if (d->dp > 0) {
                l->pl_gate = model_bind_mat(&B, NAME("inp_gate.weight"), E, d->dp, 0);
                l->pl_proj = model_bind_mat(&B, NAME("proj.weight"), d->dp, E, 0);
                l->pl_post_norm = model_bind_vec(&B, NAME("post_norm.weight"), E, 0);
            }
        }
#undef NAME
    }
    return B.st;
}

static void gm_weights(kiln_model *m, model_weights *w) {
    const model_hparams *hp = &m->hp;
    gm_model *d = m->fam;
    const int64_t E = hp->n_embd;
    model_weights_mat(w, &m->output);
    model_weights_vec(w, &m->out_norm, E);
    model_weights_vec(w, &m->hp.rope.freq_factors, hp->rope.n_rot / 2);
    model_weights_mat(w, &d->pl_model_proj);
    model_weights_vec(w, &d->pl_proj_norm, d->dp);
    for (int i = 0; i < hp->n_layer; i++) {
        gm_layer *l = &d->layers[i];
        kern_mat *ms[] = {&l->wq, &l->wk, &l->wv, &l->wo, &l->w_gate, &l->w_up, &l->w_down, &l->pl_gate, &l->pl_proj};
        for (size_t k = 0; k < sizeof ms / sizeof ms[0]; k++) model_weights_mat(w, ms[k]);
        const float **v[] = {&l->attn_norm, &l->q_norm,        &l->k_norm,       &l->post_attn_norm,
                             &l->ffn_norm,  &l->post_ffn_norm, &l->pl_post_norm, &l->out_scale};
        const int64_t vl[] = {E, l->hd, l->hd, E, E, E, E, 1};
        for (size_t k = 0; k < sizeof v / sizeof v[0]; k++) model_weights_vec(w, v[k], vl[k]);
    }
}

static void gm_seq_shape(const kiln_model *m, model_seq_shape *s) {
    const gm_model *d = m->fam;
    memset(s, 0, sizeof *s);
    s->n_attn_layer = d->n_kv;
    s->n_head_kv = d->hkv_max;
    s->hd = d->hd_max;
    s->layer_n_head_kv = d->kv_hkv;
    s->layer_hd = d->kv_hd;
}

/* ------------------------------------------------------------ activations */

typedef struct gm_ws {
    float *x, *xn, *q, *k, *v, *att, *gate, *up, *pl, *pt, *pg, *cs;
} gm_ws;

static void gm_ctx_free(kiln_context *c) {
    gm_ws *w = c->ws;
    if (w) {
        float *bufs[] = {w->x, w->xn, w->q, w->k, w->v, w->att, w->gate, w->up, w->pl, w->pt, w->pg, w->cs};
        for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) free(bufs[i]);
        free(w);
    }
    free(c->mm_scratch);
    c->ws = c->mm_scratch = NULL;
}

static int gm_ctx_init(kiln_context *c) {
    const model_hparams *hp = &c->m->hp;
    const gm_model *d = c->m->fam;
    gm_ws *w = calloc(1, sizeof *w);
    c->ws = w;
    if (!w) return -1;
    const size_t B = (size_t)c->p.n_batch, E = (size_t)hp->n_embd, F = (size_t)d->ff_max;
    const size_t nq = (size_t)hp->n_head * d->hd_max, nkv = (size_t)d->hkv_max * d->hd_max;
    const size_t P = (size_t)d->dp * (size_t)hp->n_layer;
    struct {
        float **p;
        size_t n;
    } bufs[] = {
        {&w->x, B * E},   {&w->xn, B * E},   {&w->q, B * nq},     {&w->k, B * nkv},
        {&w->v, B * nkv}, {&w->att, B * nq}, {&w->gate, B * F},   {&w->up, B * F},
        {&w->pl, B * P},  {&w->pt, B * P},   {&w->pg, B * d->dp}, {&w->cs, B * (size_t)d->rope_local.n_rot},
    };
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        if (!(*bufs[i].p = malloc(bufs[i].n ? bufs[i].n * sizeof(float) : 1))) return -1;
    size_t maxk = E > nq ? E : nq;
    if (F > maxk) maxk = F;
    if ((size_t)d->dp > maxk) maxk = (size_t)d->dp;
    c->mm_scratch = malloc(kern_matmul_scratch_size((int64_t)maxk, c->p.n_batch));
    return c->mm_scratch ? 0 : -1;
}

/* ---------------------------------------------------------------- forward */

/* The per-token element-wise steps between the matrix products, over a
 * token range; on the pool when the batch is big enough to pay for it. */
enum gm_step {
    STEP_EMBED,     /* x = tok * sqrt(E); per-layer inputs (their product in pl's place, see gm_forward) */
    STEP_ATTN_NORM, /* xn = rms(x) * attn_norm */
    STEP_QKV,       /* norms, RoPE, q scale, store K/V */
    STEP_POST_ATTN, /* x += rms(xn) * post_attention_norm; xn = rms(x) * ffn_norm */
    STEP_GEGLU,     /* gate = gelu(gate) * up */
    STEP_POST_FFN,  /* x += rms(xn) * post_ffw_norm */
    STEP_PL_GATE,   /* pg = gelu(pg) * pl[l] */
    STEP_PL_OUT,    /* x += rms(xn) * post_norm; x *= layer_output_scale */
};

typedef struct gm_job {
    kiln_context *c;
    const kern_ops *ops;
    const gm_layer *L;
    int layer;
    int n_tok;
    const int32_t *tokens;
    enum gm_step step;
} gm_job;

static void gm_range(const gm_job *j, int i0, int i1) {
    kiln_context *c = j->c;
    gm_ws *w = c->ws;
    const kiln_model *m = c->m;
    const model_hparams *hp = &m->hp;
    const gm_model *d = m->fam;
    const kern_ops *ops = j->ops;
    const gm_layer *L = j->L;
    const int E = hp->n_embd, Dp = d->dp, P = d->dp * hp->n_layer;
    for (int i = i0; i < i1; i++) {
        float *x = w->x + (size_t)i * E, *xn = w->xn + (size_t)i * E;
        switch (j->step) {
        case STEP_EMBED: {
            /* pl holds per_layer_model_proj x (x the scaled embedding) */
            float *pl = w->pl + (size_t)i * P;
            if (Dp > 0) {
                const float ps = 1.0f / sqrtf((float)E), ts = sqrtf((float)Dp), is = 1.0f / sqrtf(2.0f);
                float *te = w->pt + (size_t)i * P;
                kern_get_row(&d->pl_tok, j->tokens[i], te);
                for (int s = 0; s < hp->n_layer; s++) {
                    float *ps_l = pl + (size_t)s * Dp;
                    for (int e = 0; e < Dp; e++) ps_l[e] *= ps;
                    ops->rmsnorm(ps_l, ps_l, d->pl_proj_norm, Dp, hp->eps);
                    for (int e = 0; e < Dp; e++) ps_l[e] = (ps_l[e] + te[s * Dp + e] * ts) * is;
                }
            }
            break;
        }
        case STEP_ATTN_NORM: ops->rmsnorm(xn, x, L->attn_norm, E, hp->eps); break;
        case STEP_QKV: {
            const int hd = L->hd, nq = hp->n_head * hd, nkv = L->n_head_kv * hd;
            float *qi = w->q + (size_t)i * nq, *ki = w->k + (size_t)i * nkv, *vi = w->v + (size_t)i * nkv;
            const float *cs =
                L->local ? w->cs + (size_t)i * d->rope_local.n_rot : c->rope_cs + (size_t)i * hp->rope.n_rot;
            const int n_rot = L->local ? d->rope_local.n_rot : hp->rope.n_rot;
            for (int h = 0; h < hp->n_head; h++) ops->rmsnorm(qi + h * hd, qi + h * hd, L->q_norm, hd, hp->eps);
            ops->rope_neox(cs, qi, hp->n_head, hd, n_rot);
            if (d->q_scale != 1.0f) kern_scale_f32(qi, d->q_scale, nq);
            if (!L->has_kv) break;
            if (!L->wv.data) memcpy(vi, ki, (size_t)nkv * sizeof *vi); /* V is the raw K projection */
            for (int h = 0; h < L->n_head_kv; h++) ops->rmsnorm(ki + h * hd, ki + h * hd, L->k_norm, hd, hp->eps);
            ops->rope_neox(cs, ki, L->n_head_kv, hd, n_rot);
            if (d->gemma4)
                for (int h = 0; h < L->n_head_kv; h++) ops->rmsnorm(vi + h * hd, vi + h * hd, NULL, hd, hp->eps);
            model_attn_store(c, L->ord, i, ki, vi);
            break;
        }
        case STEP_POST_ATTN:
            ops->rmsnorm(xn, xn, L->post_attn_norm, E, hp->eps);
            ops->add(x, xn, E);
            ops->rmsnorm(xn, x, L->ffn_norm, E, hp->eps);
            break;
        case STEP_GEGLU: model_gemma_geglu(w->gate + (size_t)i * L->n_ff, w->up + (size_t)i * L->n_ff, L->n_ff); break;
        case STEP_POST_FFN:
            ops->rmsnorm(xn, xn, L->post_ffn_norm, E, hp->eps);
            ops->add(x, xn, E);
            break;
        case STEP_PL_GATE: {
            float *pg = w->pg + (size_t)i * Dp;
            model_gemma_geglu(pg, NULL, Dp);
            const float *sl = w->pl + (size_t)i * P + (size_t)j->layer * Dp;
            for (int e = 0; e < Dp; e++) pg[e] *= sl[e];
            break;
        }
        case STEP_PL_OUT:
            ops->rmsnorm(xn, xn, L->pl_post_norm, E, hp->eps);
            ops->add(x, xn, E);
            if (L->out_scale) kern_scale_f32(x, L->out_scale[0], E);
            break;
        }
    }
}

static void gm_task(void *ud, int ith, int nth) {
    const gm_job *j = ud;
    long lo, hi;
    thread_pool_range(j->n_tok, ith, nth, &lo, &hi);
    gm_range(j, (int)lo, (int)hi);
}

static void gm_step(gm_job *j, enum gm_step step) {
    j->step = step;
    if (j->n_tok >= 4) /* below that a pool hand-off costs about as much as the work */
        thread_pool_run(j->c->pool, gm_task, j);
    else
        gm_range(j, 0, j->n_tok);
}

static kiln_status gm_forward(kiln_context *c, const kiln_batch *b, int n_out) {
    const kiln_model *m = c->m;
    const model_hparams *hp = &m->hp;
    const gm_model *d = m->fam;
    gm_ws *w = c->ws;
    const int n = b->n, E = hp->n_embd;
    const kern_ops *ops = kern_ops_best();

    if (d->dp > 0 && c->b_embd)
        return model_fail(c, KILN_ERR_UNSUPPORTED, "%s takes no image embeddings", m->arch_name);
    model_attn_prepare(c, n);
    for (int i = 0; i < n; i++) kern_rope_table(&d->rope_local, c->b_pos[i], w->cs + (size_t)i * d->rope_local.n_rot);
    const float es = sqrtf((float)E);
    for (int i = 0; i < n; i++) {
        float *x = w->x + (size_t)i * E;
        if (b->token[i] < 0) { /* an image token: its row as given, unscaled (as llama.cpp) */
            memcpy(x, c->b_embd + (size_t)i * E, (size_t)E * sizeof *x);
            continue;
        }
        kern_get_row(&m->tok_embd, b->token[i], x);
        kern_scale_f32(x, es, E);
    }
    gm_job j = {c, ops, NULL, 0, n, b->token, STEP_EMBED};
    if (d->dp > 0) {
        kern_matmul(c->pool, &d->pl_model_proj, w->x, n, w->pl, (int64_t)d->dp * hp->n_layer, c->mm_scratch);
        gm_step(&j, STEP_EMBED);
    }

    for (int l = 0; l < hp->n_layer; l++) {
        const gm_layer *L = &d->layers[l];
        const int64_t nq = (int64_t)hp->n_head * L->hd, nkv = (int64_t)L->n_head_kv * L->hd;
        j.L = L;
        j.layer = l;
        gm_step(&j, STEP_ATTN_NORM);
        kern_mm_out qkv[3] = {{&L->wq, w->q, nq}, {&L->wk, w->k, nkv}, {&L->wv, w->v, nkv}};
        kern_matmul_multi(c->pool, qkv, !L->has_kv ? 1 : L->wv.data ? 3 : 2, w->xn, n, c->mm_scratch);
        gm_step(&j, STEP_QKV);
        const model_attn_opts ao = {.window = L->local ? d->window : 0, .scale = 1.0f};
        model_attn_run_opts(c, L->ord, w->q, w->att, n, &ao);
        kern_matmul(c->pool, &L->wo, w->att, n, w->xn, E, c->mm_scratch);
        gm_step(&j, STEP_POST_ATTN);
        /* rows of the layer's own width: they are w_down's input */
        kern_mm_out gu[2] = {{&L->w_gate, w->gate, L->n_ff}, {&L->w_up, w->up, L->n_ff}};
        kern_matmul_multi(c->pool, gu, 2, w->xn, n, c->mm_scratch);
        gm_step(&j, STEP_GEGLU);
        kern_matmul(c->pool, &L->w_down, w->gate, n, w->xn, E, c->mm_scratch);
        gm_step(&j, STEP_POST_FFN);
        if (d->dp > 0) {
            kern_matmul(c->pool, &L->pl_gate, w->x, n, w->pg, d->dp, c->mm_scratch);
            gm_step(&j, STEP_PL_GATE);
            kern_matmul(c->pool, &L->pl_proj, w->pg, n, w->xn, E, c->mm_scratch);
            gm_step(&j, STEP_PL_OUT);
        } else if (L->out_scale) {
            for (int i = 0; i < n; i++) kern_scale_f32(w->x + (size_t)i * E, L->out_scale[0], E);
        }
    }

    model_batch_commit(c, n);
    model_batch_output(c, w->x, n, n_out);
    if (d->softcap > 0.0f && !c->p.embeddings) {
        const float inv = 1.0f / d->softcap;
        float *lg = c->logits;
        for (size_t i = 0; i < (size_t)n_out * (size_t)hp->n_vocab; i++) lg[i] = tanhf(lg[i] * inv) * d->softcap;
    }
    return KILN_OK;
}

const model_family model_family_gemma = {
    .name = "gemma",
    .archs = k_archs,
    .n_archs = sizeof k_archs / sizeof k_archs[0],
    .image_input = 1,
    .bind = gm_bind,
    .free = gm_free,
    .weights = gm_weights,
    .seq_shape = gm_seq_shape,
    .ctx_init = gm_ctx_init,
    .ctx_free = gm_ctx_free,
    .forward = gm_forward,
};
