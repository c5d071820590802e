/* The decoder pieces the families share (decoder.h): batch resolution,
 * attention over the paged KV cache, the output head. */
#include "model/decoder.h"

#include "quant/quant.h"

#include <string.h>

kiln_status kl_batch_begin(kiln_context *c, const kiln_batch *b, int *n_out) {
    const kl_hparams *hp = &c->m->hp;
    if (b->n <= 0) return kl_fail(c, KILN_ERR_INVALID_ARG, "empty batch");
    if (b->n > c->p.n_batch)
        return kl_fail(c, KILN_ERR_INVALID_ARG, "batch of %d tokens exceeds n_batch %d", b->n, c->p.n_batch);
    int32_t add[64] = {0}; /* tokens this batch adds per sequence (n_seq_max <= 64, api.c) */
    if (c->kv.n_seq > 64) return kl_fail(c, KILN_ERR_INTERNAL, "too many sequences");
    *n_out = 0;
    for (int i = 0; i < b->n; i++) {
        int s = b->seq ? b->seq[i] : 0;
        if (s < 0 || s >= c->kv.n_seq)
            return kl_fail(c, KILN_ERR_INVALID_ARG, "token %d: sequence %d out of range (0..%d)", i, s,
                           c->kv.n_seq - 1);
        if (b->token[i] < 0 && !c->b_embd)
            return kl_fail(c, KILN_ERR_INVALID_ARG, "token %d: image token (id %d) without its embedding row", i,
                           b->token[i]);
        if (b->token[i] < 0 && !c->m->arch->family->image_input)
            return kl_fail(c, KILN_ERR_UNSUPPORTED, "token %d: %s takes no image embeddings", i, c->m->arch_name);
        if (b->token[i] >= hp->n_vocab)
            return kl_fail(c, KILN_ERR_INVALID_ARG, "token %d: id %d out of range (vocab %d)", i, b->token[i],
                           hp->n_vocab);
        int32_t p = c->kv.seqs[s].len + add[s];
        if (b->pos && b->pos[i] != p)
            return kl_fail(c, KILN_ERR_INVALID_ARG, "token %d: position %d, but sequence %d continues at %d", i,
                           b->pos[i], s, p);
        if (p >= c->p.n_ctx)
            return kl_fail(c, KILN_ERR_CONTEXT_FULL, "sequence %d would hold %d tokens; the context is %d", s, p + 1,
                           c->p.n_ctx);
        c->b_seq[i] = s;
        c->b_pos[i] = p;
        c->b_see[i] = p;
        add[s]++;
        int want = b->logits ? b->logits[i] != 0 : i == b->n - 1;
        c->out_idx[i] = want ? (*n_out)++ : -1;
    }
    for (int s = 0; s < c->kv.n_seq; s++)
        if (add[s] && kl_kv_reserve(&c->kv, s, c->kv.seqs[s].len + add[s]))
            return kl_fail(c, KILN_ERR_CONTEXT_FULL, "the KV cache has no free blocks for sequence %d", s);
    if (*n_out > c->logits_cap) return kl_fail(c, KILN_ERR_INTERNAL, "logits buffer too small");
    /* an image that attends both ways: each of its tokens sees up to its last */
    c->b_bidi = 0;
    if (c->b_embd && kl_vision_bidirectional(c->m))
        for (int i = b->n - 1; i >= 0; i--)
            if (b->token[i] < 0 && i + 1 < b->n && b->token[i + 1] < 0 && c->b_seq[i + 1] == c->b_seq[i] &&
                c->b_pos[i + 1] == c->b_pos[i] + 1)
                c->b_bidi = 1, c->b_see[i] = c->b_see[i + 1];
    return KILN_OK;
}

void kl_batch_commit(kiln_context *c, int n) {
    for (int i = 0; i < n; i++) {
        kl_seq *s = &c->kv.seqs[c->b_seq[i]];
        if (c->b_pos[i] + 1 > s->len) s->len = c->b_pos[i] + 1;
    }
}

void kl_batch_output(kiln_context *c, const float *x, int n, int n_out) {
    const kiln_model *m = c->m;
    const kbe_out o = {
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

void kl_attn_prepare(kiln_context *c, int n) {
    const kl_hparams *hp = &c->m->hp;
    const kl_kv *kv = &c->kv;
    kk_rope rope = hp->rope;
    if (hp->rope_factors_long && c->p.n_ctx > rope.n_ctx_orig) rope.freq_factors = hp->rope_factors_long;
    for (int i = 0; i < n; i++) kk_rope_table(&rope, c->b_pos[i], c->rope_cs + (size_t)i * rope.n_rot);
    /* tiles: runs of up to KL_ATTN_TILE tokens of one sequence at
     * consecutive positions, with an F16 cache all past KL_ATTN_F16_ACC_MAX
     * (float accumulator), with Q8_0 any; every other token is a tile of
     * its own */
    c->n_tile = 0;
    for (int i = 0; i < n; i++) {
        const int t = c->n_tile;
        const int join = i > 0 && c->b_seq[i] == c->b_seq[i - 1] && c->b_pos[i] == c->b_pos[i - 1] + 1 &&
                         c->b_see[i] == c->b_pos[i] && c->b_see[i - 1] == c->b_pos[i - 1] &&
                         i - c->b_tile[t - 1] < KL_ATTN_TILE &&
                         (kv->type == KILN_KV_Q8_0 || (kv->type == KILN_KV_F16 && kbe_attn_acc_f32(c->b_pos[i - 1])));
        if (!join) c->b_tile[c->n_tile++] = i;
    }
    c->b_tile[c->n_tile] = n;
    const kbe_step st = {n,          c->b_seq,  c->b_pos,  c->rope_cs,
                         rope.n_rot, c->b_tile, c->n_tile, c->b_bidi ? c->b_see : NULL};
    c->bx.ops->step(&c->bx, &st);
}

void kl_attn_store(kiln_context *c, int ord, int i, const float *k, const float *v) {
    c->bx.ops->kv_store(&c->bx, ord, i, 1, k, v);
}

void kl_attn_run_opts(kiln_context *c, int ord, const float *q, float *out, int n, const kl_attn_opts *o) {
    c->bx.ops->attn(&c->bx, ord, q, out, n, o);
}

void kl_attn_run(kiln_context *c, int ord, const float *q, float *out, int n) {
    kl_attn_run_opts(c, ord, q, out, n, NULL);
}
