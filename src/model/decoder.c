/* The decoder pieces the families share (decoder.h): batch resolution,
 * attention over the paged KV cache, the output head. */
#include "model/decoder.h"

#include "quant/quant.h"

#include <string.h>

/* Token i's M-RoPE positions into c->b_mrope (kiln.h's kiln_batch_inputs.mpos):
 * [0..3] (t, h, w, e); [4] the next text position after it (a running
 * maximum); [5] its image's base (the text position of the image's first
 * token), -1 for text.  An image's rows may span batches: its base is
 * then the previous cell's.  p is the token's KV position, k the tokens
 * of sequence s before it in this batch. */
static kiln_status batch_mpos(kiln_context *c, int i, int s, int32_t p, int k) {
    int prev = -1; /* the sequence's previous token in this batch */
    for (int j = i - 1; j >= 0 && k > 0; j--)
        if (c->b_seq[j] == s) {
            prev = j;
            break;
        }
    const int32_t *pm = prev >= 0 ? c->b_mrope + (size_t)MODEL_MPOS * prev : NULL;
    const int32_t next = pm ? pm[4] : model_kv_rope_next(&c->kv, s, p);
    const int32_t pbase = pm ? pm[5] : model_kv_rope_base(&c->kv, s, p); /* the previous token's image, -1: text */
    const int32_t *r = c->b_mpos ? c->b_mpos + (size_t)4 * i : NULL;
    int32_t *mp = c->b_mrope + (size_t)MODEL_MPOS * i;
    const int32_t lim = 1 << 20;
    if (!r || r[0] < 0) {
        mp[0] = mp[1] = mp[2] = mp[3] = next;
        mp[5] = -1;
    } else {
        if (r[0] > lim || r[1] < 0 || r[1] > lim || r[2] < 0 || r[2] > lim || r[3] < 0 || r[3] > lim)
            return model_fail(c, KILN_ERR_INVALID_ARG, "token %d: M-RoPE position (%d, %d, %d, %d) out of range", i,
                              r[0], r[1], r[2], r[3]);
        const int first = !r[0] && !r[1] && !r[2] && !r[3];
        if (!first && pbase < 0)
            return model_fail(c, KILN_ERR_INVALID_ARG,
                              "token %d: an image's M-RoPE row without the image's first token (0, 0, 0, 0) before it",
                              i);
        const int32_t base = first ? next : pbase;
        if (base > (1 << 30)) return model_fail(c, KILN_ERR_INVALID_ARG, "token %d: M-RoPE position overflow", i);
        mp[0] = base + r[0];
        mp[1] = base + r[1];
        mp[2] = base + r[2];
        mp[3] = r[3];
        mp[5] = base;
    }
    int32_t mx = mp[0] > mp[1] ? mp[0] : mp[1];
    if (mp[2] > mx) mx = mp[2];
    mp[4] = mx + 1 > next ? mx + 1 : next;
    return KILN_OK;
}

kiln_status model_batch_begin(kiln_context *c, const kiln_batch *b, int *n_out) {
    const model_hparams *hp = &c->m->hp;
    if (b->n <= 0) return model_fail(c, KILN_ERR_INVALID_ARG, "empty batch");
    if (b->n > c->p.n_batch)
        return model_fail(c, KILN_ERR_INVALID_ARG, "batch of %d tokens exceeds n_batch %d", b->n, c->p.n_batch);
    int32_t add[64] = {0}; /* tokens this batch adds per sequence (n_seq_max <= 64, api.c) */
    if (c->kv.n_seq > 64) return model_fail(c, KILN_ERR_INTERNAL, "too many sequences");
    *n_out = 0;
    for (int i = 0; i < b->n; i++) {
        int s = b->seq ? b->seq[i] : 0;
        if (s < 0 || s >= c->kv.n_seq)
            return model_fail(c, KILN_ERR_INVALID_ARG, "token %d: sequence %d out of range (0..%d)", i, s,
                              c->kv.n_seq - 1);
        if (b->token[i] < 0 && !c->b_embd)
            return model_fail(c, KILN_ERR_INVALID_ARG, "token %d: image token (id %d) without its embedding row", i,
                              b->token[i]);
        if (b->token[i] < 0 && !c->m->arch->family->image_input)
            return model_fail(c, KILN_ERR_UNSUPPORTED, "token %d: %s takes no image embeddings", i, c->m->arch_name);
        if (b->token[i] >= hp->n_vocab)
            return model_fail(c, KILN_ERR_INVALID_ARG, "token %d: id %d out of range (vocab %d)", i, b->token[i],
                              hp->n_vocab);
        int32_t p = c->kv.seqs[s].len + add[s];
        if (b->pos && b->pos[i] != p)
            return model_fail(c, KILN_ERR_INVALID_ARG, "token %d: position %d, but sequence %d continues at %d", i,
                              b->pos[i], s, p);
        if (p >= c->p.n_ctx)
            return model_fail(c, KILN_ERR_CONTEXT_FULL, "sequence %d would hold %d tokens; the context is %d", s, p + 1,
                              c->p.n_ctx);
        c->b_seq[i] = s;
        c->b_pos[i] = p;
        c->b_see[i] = p;
        if (c->kv.rnext) {
            kiln_status st = batch_mpos(c, i, s, p, add[s]);
            if (st != KILN_OK) return st;
        }
        add[s]++;
        int want = b->logits ? b->logits[i] != 0 : i == b->n - 1;
        c->out_idx[i] = want ? (*n_out)++ : -1;
    }
    for (int s = 0; s < c->kv.n_seq; s++)
        if (add[s] && model_kv_reserve(&c->kv, s, c->kv.seqs[s].len + add[s]))
            return model_fail(c, KILN_ERR_CONTEXT_FULL, "the KV cache has no free blocks for sequence %d", s);
    if (*n_out > c->logits_cap) return model_fail(c, KILN_ERR_INTERNAL, "logits buffer too small");
    /* an image that attends both ways: each of its tokens sees up to its last */
    c->b_bidi = 0;
    if (c->b_embd && c->m->image_bidi)
        for (int i = b->n - 1; i >= 0; i--)
            if (b->token[i] < 0 && i + 1 < b->n && b->token[i + 1] < 0 && c->b_seq[i + 1] == c->b_seq[i] &&
                c->b_pos[i + 1] == c->b_pos[i] + 1)
                c->b_bidi = 1, c->b_see[i] = c->b_see[i + 1];
    return KILN_OK;
}

void model_batch_commit(kiln_context *c, int n) {
    for (int i = 0; i < n; i++) {
        model_seq *s = &c->kv.seqs[c->b_seq[i]];
        if (c->kv.rnext) {
            const int32_t p = c->b_pos[i];
            const size_t cell = (size_t)s->blocks[p / MODEL_KV_BLOCK] * MODEL_KV_BLOCK + p % MODEL_KV_BLOCK;
            c->kv.rnext[cell] = c->b_mrope[(size_t)MODEL_MPOS * i + 4];
            c->kv.rbase[cell] = c->b_mrope[(size_t)MODEL_MPOS * i + 5];
        }
        if (c->b_pos[i] + 1 > s->len) s->len = c->b_pos[i] + 1;
    }
}

void model_batch_output(kiln_context *c, const float *x, int n, int n_out) {
    const kiln_model *m = c->m;
    const backend_out o = {
        .x = x,
        .n = n,
        .n_out = n_out,
        .n_embd = m->hp.n_embd,
        .n_vocab = m->hp.n_vocab,
        .out_idx = c->out_idx,
        .norm = m->out_norm,
        .eps = m->hp.eps,
        .w = c->p.embeddings ? NULL : &m->output,
        .rows = c->out_rows,
        .logits = c->logits,
    };
    c->bx.ops->output(&c->bx, &o);
}

/* ------------------------------------------------------------- attention */

void model_attn_prepare(kiln_context *c, int n) {
    const model_hparams *hp = &c->m->hp;
    const model_kv *kv = &c->kv;
    kern_rope rope = hp->rope;
    if (hp->rope_factors_long && c->p.n_ctx > rope.n_ctx_orig) rope.freq_factors = hp->rope_factors_long;
    for (int i = 0; i < n; i++) {
        float *cs = c->rope_cs + (size_t)i * rope.n_rot;
        if (rope.mrope && c->kv.rnext)
            kern_rope_table_m(&rope, c->b_mrope + (size_t)MODEL_MPOS * i, cs);
        else
            kern_rope_table(&rope, c->b_pos[i], cs);
    }
    /* tiles: runs of up to MODEL_ATTN_TILE tokens of one sequence at
     * consecutive positions, with an F16 cache all past MODEL_ATTN_F16_ACC_MAX
     * (float accumulator), with Q8_0 any; every other token is a tile of
     * its own */
    c->n_tile = 0;
    for (int i = 0; i < n; i++) {
        const int t = c->n_tile;
        const int join =
            i > 0 && c->b_seq[i] == c->b_seq[i - 1] && c->b_pos[i] == c->b_pos[i - 1] + 1 &&
            c->b_see[i] == c->b_pos[i] && c->b_see[i - 1] == c->b_pos[i - 1] &&
            i - c->b_tile[t - 1] < MODEL_ATTN_TILE &&
            (kv->type == KILN_KV_Q8_0 || (kv->type == KILN_KV_F16 && backend_attn_acc_f32(c->b_pos[i - 1])));
        if (!join) c->b_tile[c->n_tile++] = i;
    }
    c->b_tile[c->n_tile] = n;
    const backend_step st = {n,          c->b_seq,  c->b_pos,  c->rope_cs,
                             rope.n_rot, c->b_tile, c->n_tile, c->b_bidi ? c->b_see : NULL};
    c->bx.ops->step(&c->bx, &st);
    if (c->bx_lo.be) c->bx_lo.ops->step(&c->bx_lo, &st);
}

void model_split_swap(kiln_context *c) {
    const backend_ctx t = c->bx;
    c->bx = c->bx_lo;
    c->bx_lo = t;
    void *w = c->ws;
    c->ws = c->ws_lo;
    c->ws_lo = w;
    c->on_lo = !c->on_lo;
    c->attn_base = c->on_lo ? 0 : c->kv.n_lo;
}

int model_split_enter(kiln_context *c) {
    if (!c->bx_lo.be) return -1;
    model_split_swap(c);
    return c->m->gpu_l0;
}

void model_attn_store(kiln_context *c, int ord, int i, const float *k, const float *v) {
    c->bx.ops->kv_store(&c->bx, ord - c->attn_base, i, 1, k, v);
}

void model_attn_run_opts(kiln_context *c, int ord, const float *q, float *out, int n, const model_attn_opts *o) {
    c->bx.ops->attn(&c->bx, ord - c->attn_base, q, out, n, o);
}

void model_attn_run(kiln_context *c, int ord, const float *q, float *out, int n) {
    model_attn_run_opts(c, ord, q, out, n, NULL);
}

int model_batch_seq_runs(kiln_context *c, int n, int32_t *ord, int32_t *tmp, int32_t *run, int *n_run) {
    uint64_t seen = 0; /* sequences whose run ended (n_seq_max <= 64) */
    int sorted = 1;
    for (int i = 1; i < n && sorted; i++)
        if (c->b_seq[i] != c->b_seq[i - 1]) {
            seen |= 1ull << c->b_seq[i - 1];
            sorted = !(seen >> c->b_seq[i] & 1); /* a sequence back after another: not grouped */
        }
    for (int i = 0; i < n; i++) ord[i] = i;
    if (!sorted) {
        int k = 0;
        for (int s = 0; s < c->kv.n_seq; s++)
            for (int i = 0; i < n; i++)
                if (c->b_seq[i] == s) ord[k++] = i;
        for (int i = 0; i < n; i++) tmp[i] = c->b_seq[ord[i]];
        memcpy(c->b_seq, tmp, (size_t)n * sizeof(int32_t));
        for (int i = 0; i < n; i++) tmp[i] = c->b_pos[ord[i]];
        memcpy(c->b_pos, tmp, (size_t)n * sizeof(int32_t));
    }
    *n_run = 0;
    for (int i = 0; i < n; i++)
        if (i == 0 || c->b_seq[i] != c->b_seq[i - 1]) run[(*n_run)++] = i;
    run[*n_run] = n;
    return !sorted;
}

void model_batch_seq_restore(kiln_context *c, int n, const int32_t *ord, int32_t *tmp) {
    for (int i = 0; i < n; i++) tmp[ord[i]] = c->b_seq[i];
    memcpy(c->b_seq, tmp, (size_t)n * sizeof(int32_t));
    for (int i = 0; i < n; i++) tmp[ord[i]] = c->b_pos[i];
    memcpy(c->b_pos, tmp, (size_t)n * sizeof(int32_t));
}
