/* The public entry points of kiln.h that concern models and contexts:
 * context creation and sizing, decode, the sequence and prefix-cache
 * calls, tokenizer wrappers. */
#include "model/decoder.h"
#include "model/mtp.h"
#include "model/state.h"

#include "backend/cuda.h"
#include "base/base.h"
#include "quant/quant.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

void kiln_set_log(kiln_log_fn fn, void *user, int max_level) { base_set_log(fn, user, max_level); }

const char *kiln_cpu_path(void) {
    quant_init();
    const int isa = quant_active_isa();
    /* the AVX-512 level always has VNNI (quant.c); BF16 is extra */
#if defined(__x86_64__)
    if (isa == QUANT_ISA_AVX512) return quant_cpu_bf16() ? "avx512 vnni bf16" : "avx512 vnni";
#endif
    return quant_isa_name(isa);
}

/* ---------------------------------------------------------------- context */

kiln_context_params kiln_context_default_params(void) {
    kiln_context_params p;
    memset(&p, 0, sizeof p);
    p.n_ctx = 0;
    p.n_batch = 512;
    p.n_seq_max = 1;
    p.n_threads = 0;
    p.kv_type = KILN_KV_F16;
    p.mem_limit = 0;
    return p;
}

/* Default KV budget: half of physical memory. */
static uint64_t default_kv_budget(void) {
    long pages = sysconf(_SC_PHYS_PAGES), psize = sysconf(_SC_PAGESIZE);
    if (pages <= 0 || psize <= 0) return 4ull << 30;
    return (uint64_t)pages * (uint64_t)psize / 2;
}

static void *map_zero(size_t bytes) {
    void *p = mmap(NULL, bytes ? bytes : 1, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    return p == MAP_FAILED ? NULL : p;
}

typedef struct ctx_buf {
    void **ptr;
    size_t bytes;
} ctx_buf;

static size_t ctx_logits_bytes(const kiln_context *c) {
    return (size_t)c->p.n_batch * (size_t)c->m->hp.n_vocab * sizeof(float);
}

kiln_status kiln_context_new(kiln_model *m, const kiln_context_params *params, kiln_context **out) {
    *out = NULL;
    if (!m) return base_fail(KILN_ERR_INVALID_ARG, "no model");
    const model_family *fam = m->arch->family;
    if (fam->encoder || !fam->forward)
        return base_fail(KILN_ERR_UNSUPPORTED, "%s is an encoder: use kiln_embedder", m->arch_name);
    kiln_context_params p = params ? *params : kiln_context_default_params();
    const model_hparams *hp = &m->hp;
    if (p.n_batch <= 0) p.n_batch = 512;
    if (p.n_seq_max <= 0) p.n_seq_max = 1;
    if (p.n_seq_max > 64) return base_fail(KILN_ERR_INVALID_ARG, "n_seq_max %d exceeds 64", p.n_seq_max);
    if (p.kv_type != KILN_KV_F16 && p.kv_type != KILN_KV_F32 && p.kv_type != KILN_KV_Q8_0)
        return base_fail(KILN_ERR_INVALID_ARG, "unknown KV cache type %d", p.kv_type);
    model_seq_shape shape;
    fam->seq_shape(m, &shape);
    shape.pos_cells = hp->rope.mrope != 0;
    /* the MTP block's cache: one more attention layer of the same heads */
    const int mtp_ord = p.mtp && model_mtp_blocks(m) > 0 ? shape.n_attn_layer : -1;
    if (mtp_ord >= 0 && shape.layer_hd)
        return base_fail(KILN_ERR_UNSUPPORTED, "MTP blocks with per-layer KV head sizes");
    if (mtp_ord >= 0) shape.n_attn_layer++;
    for (int l = 0; l < shape.n_attn_layer; l++) {
        const int hd = shape.layer_hd ? shape.layer_hd[l] : shape.hd;
        if (p.kv_type == KILN_KV_Q8_0 && (hd % 32 || hd > 256))
            return base_fail(
                KILN_ERR_UNSUPPORTED,
                "a Q8_0 KV cache needs a head size that is a multiple of 32, at most 256 (this model's is %d)", hd);
    }
    if (p.n_ctx < 0) return base_fail(KILN_ERR_INVALID_ARG, "negative context size");
    /* past the trained length a rotary decoder still runs (its quality may
     * fall, as llama.cpp warns); an encoder's learned positions end there */
    if (p.n_ctx > hp->n_ctx_train && m->arch->encoder)
        return base_fail(KILN_ERR_INVALID_ARG, "context %d exceeds the model's %d", p.n_ctx, hp->n_ctx_train);
    if (p.n_ctx > hp->n_ctx_train)
        base_log(BASE_LOG_WARN,
                 "the context of %d tokens exceeds the %d the model was trained on; output past it may "
                 "degrade",
                 p.n_ctx, hp->n_ctx_train);
    /* the usable context is the smaller of the model's and what the
     * budget allows for n_seq_max sequences once the recurrent-state pool
     * (allocated whole, whatever the context) is taken out of it */
    uint64_t budget = p.mem_limit ? p.mem_limit : default_kv_budget();
    if (m->be->kind == BACKEND_CUDA) {
        /* on the GPU: its free memory, less the activations' (and the
         * budget asked for, if smaller) */
        size_t free_b = 0, total_b = 0;
        const uint64_t act = model_cuda_act_bytes(m, p.n_batch, p.n_seq_max);
        if (backend_cuda_mem(&free_b, &total_b, NULL, 0) || free_b <= act)
            return base_fail(KILN_ERR_NOMEM, "no room for a KV cache in the GPU's %llu MiB free",
                             (unsigned long long)(free_b >> 20));
        if (!p.mem_limit || free_b - act < budget) budget = free_b - act;
    }
    const int n_snap = !shape.rs_floats || p.n_state_snapshots < 0 ? 0
                       : p.n_state_snapshots                       ? p.n_state_snapshots
                                                                   : MODEL_RS_SNAP_PER_SEQ * p.n_seq_max;
    const uint64_t rs_bytes =
        shape.rs_floats ? model_rs_bytes(shape.rs_floats, shape.roll_floats, p.n_seq_max, n_snap) : 0;
    if (rs_bytes >= budget)
        return base_fail(
            KILN_ERR_NOMEM,
            "the recurrent state of %d sequence(s) and %d snapshot(s) takes %llu MiB; the budget is %llu MiB",
            p.n_seq_max, n_snap, (unsigned long long)(rs_bytes >> 20), (unsigned long long)(budget >> 20));
    budget -= rs_bytes;
    /* a split model: the host part's layers keep their cache in RAM,
     * within its budget (the recurrent-state pool is on both) */
    const int n_lo = m->be_lo ? model_attn_below(m, m->gpu_l0) : 0;
    if (m->be_lo && mtp_ord >= 0)
        return base_fail(KILN_ERR_UNSUPPORTED, "MTP with a model split between the GPU and the CPU");
    uint64_t per_tok = model_kv_bytes_range(&shape, p.kv_type, n_lo, shape.n_attn_layer);
    uint64_t fit = per_tok ? budget / (per_tok * (uint64_t)p.n_seq_max) : (uint64_t)hp->n_ctx_train;
    const uint64_t per_tok_lo = model_kv_bytes_range(&shape, p.kv_type, 0, n_lo);
    if (per_tok_lo) {
        const uint64_t host = p.mem_limit ? p.mem_limit : default_kv_budget();
        const uint64_t fit_lo = host / (per_tok_lo * (uint64_t)p.n_seq_max);
        if (fit_lo < fit) fit = fit_lo, budget = host, per_tok = per_tok_lo;
    }
    int32_t n_ctx = p.n_ctx ? p.n_ctx : hp->n_ctx_train;
    if ((uint64_t)n_ctx > fit) {
        if (p.n_ctx)
            return base_fail(KILN_ERR_NOMEM,
                             "context %d needs %llu MiB of KV cache for %d sequence(s); the budget is %llu MiB", n_ctx,
                             (unsigned long long)(per_tok * (uint64_t)n_ctx * (uint64_t)p.n_seq_max >> 20), p.n_seq_max,
                             (unsigned long long)(budget >> 20));
        n_ctx = (int32_t)fit;
        base_log(BASE_LOG_INFO, "context capped at %d tokens by the KV memory budget", n_ctx);
    }
    if (n_ctx < 1) return base_fail(KILN_ERR_NOMEM, "no room for a KV cache within the memory budget");
    if (p.n_batch > n_ctx * p.n_seq_max) p.n_batch = n_ctx * p.n_seq_max;
    p.n_ctx = n_ctx;

    kiln_context *c = calloc(1, sizeof *c);
    if (!c) return base_fail(KILN_ERR_NOMEM, "out of memory");
    c->m = m;
    c->p = p;
    c->p.mtp = mtp_ord >= 0;
    c->shape = shape;
    c->mtp_ord = mtp_ord;
    quant_init();
    c->pool = thread_pool_new(p.n_threads);
    kiln_status st = c->pool ? KILN_OK : base_fail(KILN_ERR_NOMEM, "cannot start threads");
    if (!st) st = model_kv_init_split(&c->kv, m->be, m->be_lo, n_lo, &shape, p.kv_type, p.n_seq_max, n_ctx, n_snap);
    if (!st && shape.rs_floats)
        st = model_rs_new(m->be, shape.rs_floats, shape.roll_floats, p.n_seq_max, n_snap, &c->rs);
    if (!st && c->rs && m->be_lo && model_rs_mirror(c->rs, m->be_lo)) st = base_fail(KILN_ERR_NOMEM, "out of memory");
    if (st) {
        kiln_context_free(c);
        return st;
    }
    c->p.n_threads = thread_pool_size(c->pool);
    backend_kv kvv;
    model_kv_view(&c->kv, &kvv);
    const backend_ctx_params bp = {c->pool, shape.n_attn_layer ? hp->n_head : 0, n_ctx, &kvv};
    if (backend_ctx_init(&c->bx, m->be, &bp)) {
        kiln_context_free(c);
        return base_fail(KILN_ERR_NOMEM, "out of memory for the %s backend's state", m->be->name);
    }
    c->attn_base = c->kv.n_lo;
    if (m->be_lo) {
        backend_kv kvl;
        model_kv_view_part(&c->kv, 1, &kvl);
        const backend_ctx_params bpl = {c->pool, shape.n_attn_layer ? hp->n_head : 0, n_ctx, &kvl};
        if (backend_ctx_init(&c->bx_lo, m->be_lo, &bpl)) {
            kiln_context_free(c);
            return base_fail(KILN_ERR_NOMEM, "out of memory for the %s backend's state", m->be_lo->name);
        }
    }
    const size_t B = (size_t)p.n_batch, E = (size_t)hp->n_embd;
    c->logits_cap = p.n_batch;
    ctx_buf bufs[] = {
        {(void **)&c->rope_cs, B * (size_t)hp->rope.n_rot * 4},
        {(void **)&c->b_pos, B * 4},
        {(void **)&c->b_mrope, B * MODEL_MPOS * 4},
        {(void **)&c->b_seq, B * 4},
        {(void **)&c->b_see, B * 4},
        {(void **)&c->b_tile, (B + 1) * 4},
        {(void **)&c->out_idx, B * 4},
        {(void **)&c->out_rows, B * E * 4},
        {(void **)&c->mtp_h_pos, mtp_ord >= 0 ? (size_t)p.n_seq_max * 4 : 0},
        {(void **)&c->mtp_h_n, mtp_ord >= 0 ? (size_t)p.n_seq_max * 4 : 0},
        {(void **)&c->mtp_logits, mtp_ord >= 0 ? (size_t)p.n_seq_max * (size_t)hp->n_vocab * 4 : 0},
    };
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) {
        *bufs[i].ptr = malloc(bufs[i].bytes ? bufs[i].bytes : 1);
        if (!*bufs[i].ptr) {
            kiln_context_free(c);
            return base_fail(KILN_ERR_NOMEM, "out of memory for activations");
        }
    }
    if (mtp_ord >= 0) {
        memset(c->mtp_h_n, 0, (size_t)p.n_seq_max * sizeof *c->mtp_h_n);
        memset(c->mtp_h_pos, 0, (size_t)p.n_seq_max * sizeof *c->mtp_h_pos);
        /* the kept hidden rows are the block's inputs: backend memory */
        c->mtp_h = c->bx.ops->alloc(&c->bx, (size_t)p.n_seq_max * MODEL_MTP_KEEP * E * 4);
        c->mtp_chain = c->bx.ops->alloc(&c->bx, (size_t)p.n_seq_max * E * 4);
        c->mtp_lg_dev =
            m->be->host_mem ? c->mtp_logits : c->bx.ops->alloc(&c->bx, (size_t)p.n_seq_max * (size_t)hp->n_vocab * 4);
        if (!c->mtp_h || !c->mtp_chain || !c->mtp_lg_dev) {
            kiln_context_free(c);
            return base_fail(KILN_ERR_NOMEM, "out of memory for activations");
        }
    }
    /* the output head's product runs on the backend whatever the family
     * reserved for its own */
    if (fam->ctx_init(c) || c->bx.ops->reserve(&c->bx, hp->n_embd, p.n_batch)) {
        kiln_context_free(c);
        return base_fail(KILN_ERR_NOMEM, "out of memory for activations");
    }
    if (m->be_lo) { /* the host part's activations, made while bx is its */
        model_split_swap(c);
        const int rc = fam->ctx_init(c) || c->bx.ops->reserve(&c->bx, hp->n_embd, p.n_batch);
        model_split_swap(c);
        if (rc) {
            kiln_context_free(c);
            return base_fail(KILN_ERR_NOMEM, "out of memory for activations");
        }
    }
    /* logits for every batch row, committed only where written */
    c->logits = map_zero(ctx_logits_bytes(c));
    if (!c->logits) {
        kiln_context_free(c);
        return base_fail(KILN_ERR_NOMEM, "out of memory for logits");
    }
    *out = c;
    return KILN_OK;
}

void kiln_context_free(kiln_context *c) {
    if (!c) return;
    c->m->arch->family->ctx_free(c);
    if (c->bx_lo.be) {
        model_split_swap(c);
        c->m->arch->family->ctx_free(c);
        model_split_swap(c);
        backend_ctx_free(&c->bx_lo);
    }
    if (c->mtp_h) c->bx.ops->free(&c->bx, c->mtp_h);
    if (c->mtp_chain) c->bx.ops->free(&c->bx, c->mtp_chain);
    if (c->mtp_lg_dev && c->mtp_lg_dev != c->mtp_logits) c->bx.ops->free(&c->bx, c->mtp_lg_dev);
    backend_ctx_free(&c->bx);
    model_rs_free(c->rs);
    model_kv_free(&c->kv);
    if (c->pool) thread_pool_free(c->pool);
    void *bufs[] = {c->rope_cs,  c->b_pos,     c->b_seq,   c->b_see,      c->b_tile, c->out_idx,
                    c->out_rows, c->mtp_h_pos, c->mtp_h_n, c->mtp_logits, c->b_mrope};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) free(bufs[i]);
    if (c->logits) munmap(c->logits, ctx_logits_bytes(c));
    free(c);
}

int32_t kiln_context_n_ctx(const kiln_context *c) { return c->p.n_ctx; }
int32_t kiln_context_n_batch(const kiln_context *c) { return c->p.n_batch; }
int32_t kiln_context_n_seq_max(const kiln_context *c) { return c->p.n_seq_max; }
int32_t kiln_context_n_threads(const kiln_context *c) { return c->p.n_threads; }
const char *kiln_context_error(const kiln_context *c) { return c->err; }

kiln_status kiln_decode_inputs(kiln_context *c, const kiln_batch *b, const kiln_batch_inputs *in) {
    if (!c || !b || !b->token) return model_fail(c, KILN_ERR_INVALID_ARG, "no batch");
    c->err[0] = 0;
    for (int i = 0; i < c->p.n_batch; i++) c->out_idx[i] = -1;
    int n_out = 0;
    c->b_embd = in ? in->embd : NULL;
    c->b_mpos = in ? in->mpos : NULL;
    kiln_status st = model_batch_begin(c, b, &n_out);
    if (st == KILN_OK) st = c->m->arch->family->forward(c, b, n_out);
    c->b_embd = NULL;
    c->b_mpos = NULL;
    c->b_bidi = 0;
    return st;
}

kiln_status kiln_decode(kiln_context *c, const kiln_batch *b) { return kiln_decode_inputs(c, b, NULL); }

const float *kiln_get_logits(kiln_context *c, int32_t i) {
    if (!c || c->p.embeddings || i < 0 || i >= c->p.n_batch || c->out_idx[i] < 0) return NULL;
    return c->logits + (size_t)c->out_idx[i] * (size_t)c->m->hp.n_vocab;
}

const float *kiln_get_embeddings(kiln_context *c, int32_t i) {
    if (!c || !c->p.embeddings || i < 0 || i >= c->p.n_batch || c->out_idx[i] < 0) return NULL;
    return c->out_rows + (size_t)c->out_idx[i] * (size_t)c->m->hp.n_embd;
}

int32_t kiln_seq_len(const kiln_context *c, int32_t seq) {
    if (!c || seq < 0 || seq >= c->kv.n_seq) return -1;
    return c->kv.seqs[seq].len;
}

kiln_status kiln_seq_truncate(kiln_context *c, int32_t seq, int32_t p) {
    if (!c || seq < 0 || seq >= c->kv.n_seq || p < 0)
        return model_fail(c, KILN_ERR_INVALID_ARG, "bad sequence %d or position %d", seq, p);
    const kiln_status st = c->rs ? model_rs_truncate(c, seq, p) : (model_kv_truncate(&c->kv, seq, p), KILN_OK);
    if (st == KILN_OK && c->mtp_ord >= 0) { /* kept hidden rows of the tokens cut go with them */
        const int32_t keep = c->kv.seqs[seq].len - c->mtp_h_pos[seq];
        if (c->mtp_h_n[seq] > keep) c->mtp_h_n[seq] = keep > 0 ? keep : 0;
    }
    return st;
}

int32_t kiln_seq_truncate_point(const kiln_context *c, int32_t seq, int32_t p) {
    if (!c || seq < 0 || seq >= c->kv.n_seq || p < 0)
        return base_fail(KILN_ERR_INVALID_ARG, "bad sequence %d or position %d", seq, p);
    if (c->rs) return model_rs_restorable(c, seq, p);
    return p < c->kv.seqs[seq].len ? p : c->kv.seqs[seq].len;
}

kiln_status kiln_seq_copy(kiln_context *c, int32_t src, int32_t dst) {
    if (!c || src < 0 || src >= c->kv.n_seq || dst < 0 || dst >= c->kv.n_seq || src == dst)
        return model_fail(c, KILN_ERR_INVALID_ARG, "bad sequences %d -> %d", src, dst);
    return model_rs_copy(c, src, dst);
}

/* -------------------------------------------------------------- tokenizer */

/* ---- public prefix-cache calls (kiln.h) ---- */

int32_t kiln_seq_reuse(kiln_context *c, int32_t seq, const int32_t *tokens, int32_t n) {
    if (!c || seq < 0 || seq >= c->kv.n_seq || (!tokens && n) || n < 0)
        return model_fail(c, KILN_ERR_INVALID_ARG, "bad sequence %d or tokens", seq);
    if (c->kv.seqs[seq].len != 0) return model_fail(c, KILN_ERR_STATE, "sequence %d is not empty", seq);
    if (n <= 1) return 0;
    if (c->rs) return model_rs_reuse(c, seq, tokens, n);
    return model_kv_reuse(&c->kv, seq, tokens, n, n - 1);
}

kiln_status kiln_seq_cache(kiln_context *c, int32_t seq, const int32_t *tokens, int32_t n) {
    if (!c || seq < 0 || seq >= c->kv.n_seq || (!tokens && n) || n < 0)
        return model_fail(c, KILN_ERR_INVALID_ARG, "bad sequence %d or tokens", seq);
    model_kv_register(&c->kv, seq, tokens, n);
    if (c->rs) model_rs_cache(c, seq, tokens, n);
    return KILN_OK;
}

void kiln_kv_get_stats(const kiln_context *c, kiln_kv_stats *out) {
    memset(out, 0, sizeof *out);
    if (!c) return;
    const model_kv *kv = &c->kv;
    out->block_tokens = MODEL_KV_BLOCK;
    out->n_blocks = kv->n_blocks;
    out->n_cached = kv->n_cached;
    out->n_used = kv->n_blocks - kv->n_free - kv->n_cached;
    out->lookup_blocks = kv->n_lookup_blocks;
    out->hit_blocks = kv->n_hit_blocks;
    if (c->rs) {
        out->state_slots = c->rs->n_snap;
        for (int i = 0; i < c->rs->n_snap; i++) out->state_snapshots += c->rs->snap[i].pos >= 0;
        out->state_restores = c->rs->n_restored;
    }
}

int kiln_tokenize(const kiln_model *m, const char *text, size_t len, int add_special, int parse_special, int32_t *out,
                  int cap) {
    if (!m || (!text && len)) return base_fail(KILN_ERR_INVALID_ARG, "bad tokenize arguments");
    int32_t n = tok_encode(m->tok, text ? text : "", len, add_special, parse_special, out, cap);
    if (n == TOK_ERR_NOMEM) return base_fail(KILN_ERR_NOMEM, "out of memory while tokenizing");
    return n < 0 ? -n : n;
}

int kiln_token_to_piece(const kiln_model *m, int32_t id, char *buf, int cap, int special) {
    int32_t n = tok_token_to_piece(m->tok, id, buf, cap, special);
    return n < 0 ? -n : n;
}

int32_t kiln_token_bos(const kiln_model *m) { return tok_bos(m->tok); }
int32_t kiln_token_eos(const kiln_model *m) { return tok_eos(m->tok); }
int kiln_token_is_eog(const kiln_model *m, int32_t id) { return tok_is_eog(m->tok, id); }

struct kiln_detok {
    tok_stream s;
    char *buf;
    int32_t cap;
};

kiln_detok *kiln_detok_new(const kiln_model *m) {
    kiln_detok *d = calloc(1, sizeof *d);
    if (!d) return NULL;
    d->cap = tok_max_piece(m->tok) + 8;
    d->buf = malloc((size_t)d->cap);
    if (!d->buf) {
        free(d);
        return NULL;
    }
    tok_stream_init(&d->s, m->tok, 0, 0);
    return d;
}

void kiln_detok_free(kiln_detok *d) {
    if (!d) return;
    free(d->buf);
    free(d);
}

const char *kiln_detok_push(kiln_detok *d, int32_t id, size_t *len) {
    int32_t n = tok_stream_put(&d->s, id, d->buf, d->cap);
    *len = n > 0 ? (size_t)n : 0;
    return d->buf;
}

const char *kiln_detok_flush(kiln_detok *d, size_t *len) {
    int32_t n = tok_stream_flush(&d->s, d->buf, d->cap);
    *len = n > 0 ? (size_t)n : 0;
    return d->buf;
}

/* -------------------------------------------------------------------- MTP */

int model_mtp_blocks(const kiln_model *m) {
    const model_family *f = m->arch->family;
    return f->mtp_blocks && f->mtp_step ? f->mtp_blocks(m) : 0;
}

int model_mtp_on(const kiln_context *c) { return c->mtp_ord >= 0; }

const float *model_mtp_hidden(const kiln_context *c, int32_t seq, int32_t pos) {
    const int32_t at = pos - c->mtp_h_pos[seq];
    if (at < 0 || at >= c->mtp_h_n[seq]) return NULL;
    return c->mtp_h + ((size_t)seq * MODEL_MTP_KEEP + (size_t)at) * (size_t)c->m->hp.n_embd;
}

void model_mtp_keep(kiln_context *c, int32_t seq, int32_t pos0, const float *rows, int32_t n) {
    const size_t E = (size_t)c->m->hp.n_embd;
    if (n > MODEL_MTP_KEEP) {
        rows += (size_t)(n - MODEL_MTP_KEEP) * E;
        pos0 += n - MODEL_MTP_KEEP;
        n = MODEL_MTP_KEEP;
    }
    c->bx.ops->copy(&c->bx, c->mtp_h + (size_t)seq * MODEL_MTP_KEEP * E, rows, (size_t)n * E * sizeof(float));
    c->mtp_h_pos[seq] = pos0;
    c->mtp_h_n[seq] = n;
}

int model_mtp_ready(const kiln_context *c, int32_t seq, int32_t pos) {
    if (c->mtp_ord < 0 || seq < 0 || seq >= c->kv.n_seq) return 0;
    return pos == 0 || model_mtp_hidden(c, seq, pos - 1) != NULL;
}

kiln_status model_mtp_step(kiln_context *c, int n, const int32_t *seq, const int32_t *pos, const int32_t *tok,
                           const uint8_t *chain) {
    if (c->mtp_ord < 0) return model_fail(c, KILN_ERR_STATE, "the context keeps no MTP cache");
    if (n <= 0) return KILN_OK;
    if (n > c->p.n_seq_max || n > c->p.n_batch)
        return model_fail(c, KILN_ERR_INVALID_ARG, "MTP step of %d rows exceeds the context's sequences", n);
    for (int r = 0; r < n; r++) {
        const int32_t s = seq[r];
        if (s < 0 || s >= c->kv.n_seq || pos[r] < c->kv.seqs[s].len || pos[r] >= c->p.n_ctx || tok[r] < 0 ||
            tok[r] >= c->m->hp.n_vocab || (!chain[r] && !model_mtp_ready(c, s, pos[r])))
            return model_fail(c, KILN_ERR_INVALID_ARG, "MTP step row %d: sequence %d, cell %d, token %d", r, s, pos[r],
                              tok[r]);
        for (int q = 0; q < r; q++)
            if (seq[q] == s) return model_fail(c, KILN_ERR_INVALID_ARG, "MTP step: sequence %d twice", s);
        if (model_kv_reserve(&c->kv, s, pos[r] + 1))
            return model_fail(c, KILN_ERR_CONTEXT_FULL, "the KV cache has no free blocks for sequence %d", s);
    }
    return c->m->arch->family->mtp_step(c, n, seq, pos, tok, chain);
}

const float *model_mtp_logits(const kiln_context *c, int r) {
    return c->mtp_logits + (size_t)r * (size_t)c->m->hp.n_vocab;
}
