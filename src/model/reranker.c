/* kiln_reranker: (query, document) pairs framed as the model was trained
 * and scored by a cross-encoder's classification head (the encoder
 * family's rank pooling, several pairs per unpadded run, shortest first)
 * or by a causal LM's "yes"/"no" rows at the last token of its rerank
 * prompt (one pair per run; the prompt's prefix, the same for every pair
 * of a request, is computed once and reused from the prefix cache). */
#include "base/base.h"
#include "model/encoder.h"
#include "model/model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Most pairs one cross-encoder run carries (bounds the score buffer). */

struct kiln_reranker {
    kiln_model *m;
    int own_model;
    int causal;
    int32_t max_tokens, n_batch;
    int n_labels;
    /* cross-encoder framing: the ids of its pieces, -1 when absent */
    int pair; /* MODEL_PAIR_* as the family frames */
    int32_t f_first, f_mid1, f_mid2, f_last;
    /* cross-encoder */
    thread_pool *pool;
    void *ws;
    int32_t *run_tok; /* one run's pairs end to end */
    uint8_t *run_type;
    int32_t run_len[MODEL_ENC_MAX_SEQ];
    float *run_scores; /* [MODEL_ENC_MAX_SEQ][n_labels] */
    /* causal */
    kiln_context *ctx;
    int8_t *flags;
    kern_mat head;       /* cls.output: n_embd -> n_labels */
    float *row, *logits; /* [n_embd], [n_labels] */
    char *tmpl;          /* the rerank prompt */
    /* the last failed begin's over-limit documents (for the message) */
};

struct kiln_rerank_job {
    kiln_reranker *r;
    kiln_rerank_scores res;
    float *scores;
    int32_t *n_tokens, *truncated;
    int32_t **tokens;
    uint8_t **types; /* MODEL_PAIR_BERT: token types per pair */
    int32_t *order;  /* run order */
    int32_t n_done;
};

kiln_reranker_params kiln_reranker_default_params(void) {
    kiln_reranker_params p = {0, 2048, 0};
    return p;
}

/* ---------------------------------------------------------------- create */

int model_gguf_is_reranker(const gguf_file *f) {
    char name[64], key[96];
    const char *a = gguf_get_cstr(f, "general.architecture", name, sizeof name, NULL);
    const model_arch *arch = a ? model_arch_find(a) : NULL;
    if (!arch || !gguf_find_tensor(f, "cls.output.weight")) return 0;
    if (arch->encoder) return 1;
    snprintf(key, sizeof key, "%s.pooling_type", a);
    return gguf_get_int(f, key, 0) == 4;
}

static kiln_status setup_encoder(kiln_reranker *r, const kiln_reranker_params *p) {
    kiln_model *m = r->m;
    const tokenizer *t = m->tok;
    r->n_labels = m->hp.n_cls_out;
    r->pair = m->arch->family->pair;
    if (r->pair == MODEL_PAIR_BERT && tok_kind(t) != TOK_WPM) r->pair = MODEL_PAIR_SPECIALS;
    const int32_t bos = tok_bos(t), eos = tok_eos(t) >= 0 ? tok_eos(t) : tok_sep(t),
                  sep = tok_sep(t) >= 0 ? tok_sep(t) : tok_eos(t);
    r->f_first = r->f_mid1 = r->f_mid2 = r->f_last = -1;
    if (r->pair == MODEL_PAIR_BERT || r->pair == MODEL_PAIR_CLS_SEP) {
        if (bos < 0 || sep < 0 || eos < 0)
            return base_fail(KILN_ERR_FORMAT, "the vocabulary lacks the [CLS]/[SEP] tokens a pair needs");
        r->f_first = bos;
        r->f_mid1 = sep;
        r->f_last = r->pair == MODEL_PAIR_BERT ? sep : eos;
    } else {
        const int add_sep = gguf_get_bool(m->gf, "tokenizer.ggml.add_sep_token", 0);
        if (tok_add_bos(t)) r->f_first = bos;
        if (tok_add_eos(t)) r->f_mid1 = r->f_last = eos;
        if (add_sep) r->f_mid2 = sep;
    }
    r->max_tokens = p->max_tokens ? p->max_tokens : m->hp.n_ctx_train;
    if (r->max_tokens > m->hp.n_ctx_train)
        return base_fail(KILN_ERR_INVALID_ARG, "max_tokens %d exceeds the model's %d", r->max_tokens,
                         m->hp.n_ctx_train);
    r->n_batch = p->n_batch; /* a longer pair runs alone: the workspace holds max_tokens */
    const int32_t cap = r->n_batch < r->max_tokens ? r->max_tokens : r->n_batch;
    r->pool = thread_pool_new(p->n_threads);
    if (!r->pool) return base_fail(KILN_ERR_NOMEM, "cannot start threads");
    r->ws = m->arch->family->enc_new(m, cap, r->pool);
    r->run_tok = malloc((size_t)cap * sizeof *r->run_tok);
    r->run_type = malloc((size_t)cap);
    r->run_scores = malloc((size_t)MODEL_ENC_MAX_SEQ * (size_t)r->n_labels * sizeof *r->run_scores);
    if (!r->ws || !r->run_tok || !r->run_type || !r->run_scores) return base_fail(KILN_ERR_NOMEM, "out of memory");
    return KILN_OK;
}

static kiln_status setup_causal(kiln_reranker *r, const kiln_reranker_params *p) {
    kiln_model *m = r->m;
    model_binder B = {m, KILN_OK};
    r->head = model_bind_mat(&B, "cls.output.weight", m->hp.n_embd, -1, 0);
    if (B.st) return B.st;
    r->n_labels = (int)r->head.nrows;
    const gguf_kv *labels = model_meta_kv(m, "classifier.output_labels");
    if (labels && (labels->type != GGUF_ARRAY || (int64_t)labels->n != r->n_labels))
        return base_fail(KILN_ERR_FORMAT, "%s.classifier.output_labels disagrees with cls.output.weight's %d rows",
                         m->arch_name, r->n_labels);
    const int64_t pooling = model_meta_int(m, "pooling_type", 4);
    if (pooling != 4)
        return base_fail(KILN_ERR_UNSUPPORTED, "%s.pooling_type is %lld: a decoder reranks with rank pooling (4)",
                         m->arch_name, (long long)pooling);
    gguf_str s;
    if (gguf_get_str(m->gf, "tokenizer.chat_template.rerank", &s) != 0)
        return base_fail(KILN_ERR_UNSUPPORTED, "a causal reranker needs tokenizer.chat_template.rerank");
    r->tmpl = malloc(s.len + 1);
    if (!r->tmpl) return base_fail(KILN_ERR_NOMEM, "out of memory");
    memcpy(r->tmpl, s.ptr, s.len);
    r->tmpl[s.len] = 0;
    if (!strstr(r->tmpl, "{query}") || !strstr(r->tmpl, "{document}"))
        return base_fail(KILN_ERR_FORMAT, "tokenizer.chat_template.rerank lacks {query} or {document}");
    kiln_context_params cp = kiln_context_default_params();
    cp.n_ctx = p->max_tokens ? p->max_tokens : (m->hp.n_ctx_train < 8192 ? m->hp.n_ctx_train : 8192);
    cp.n_batch = p->n_batch > 0 && p->n_batch < 512 ? p->n_batch : 512;
    cp.n_threads = p->n_threads;
    cp.kv_type = KILN_KV_F32;
    cp.embeddings = 1;
    kiln_status st = kiln_context_new(m, &cp, &r->ctx);
    if (st != KILN_OK) return st;
    r->max_tokens = kiln_context_n_ctx(r->ctx);
    r->n_batch = kiln_context_n_batch(r->ctx);
    r->flags = calloc((size_t)r->n_batch, 1);
    r->row = malloc((size_t)m->hp.n_embd * sizeof *r->row);
    r->logits = malloc((size_t)r->n_labels * sizeof *r->logits);
    if (!r->flags || !r->row || !r->logits) return base_fail(KILN_ERR_NOMEM, "out of memory");
    return KILN_OK;
}

kiln_status kiln_reranker_new_from_model(kiln_model *m, const kiln_reranker_params *params, kiln_reranker **out) {
    *out = NULL;
    if (!m) return base_fail(KILN_ERR_INVALID_ARG, "no model");
    kiln_reranker_params p = params ? *params : kiln_reranker_default_params();
    if (p.n_batch <= 0) p.n_batch = 2048;
    if (p.max_tokens < 0 || p.n_threads < 0) return base_fail(KILN_ERR_INVALID_ARG, "negative max_tokens or n_threads");
    const int head = m->arch->encoder ? m->hp.n_cls_out > 0 : gguf_find_tensor(m->gf, "cls.output.weight") != NULL;
    if (!head)
        return base_fail(KILN_ERR_UNSUPPORTED, "%s: not a reranker (no classification head cls.output.weight)",
                         m->name[0] ? m->name : m->arch_name);
    kiln_reranker *r = calloc(1, sizeof *r);
    if (!r) return base_fail(KILN_ERR_NOMEM, "out of memory");
    r->m = m;
    r->causal = !m->arch->encoder;
    kiln_status st = r->causal ? setup_causal(r, &p) : setup_encoder(r, &p);
    if (st != KILN_OK) {
        kiln_reranker_free(r);
        return st;
    }
    *out = r;
    return KILN_OK;
}

kiln_status kiln_reranker_new(const char *path, const kiln_reranker_params *p, kiln_reranker **out) {
    *out = NULL;
    kiln_model *m;
    kiln_model_params mp = kiln_model_default_params();
    mp.backend = KILN_ENGINE_BACKEND_CPU; /* the encoders have no GPU kernels */
    kiln_status st = kiln_model_load(path, &mp, &m);
    if (st != KILN_OK) return st;
    st = kiln_reranker_new_from_model(m, p, out);
    if (st != KILN_OK) {
        kiln_model_free(m);
        return st;
    }
    (*out)->own_model = 1;
    return KILN_OK;
}

void kiln_reranker_free(kiln_reranker *r) {
    if (!r) return;
    if (r->ws) r->m->arch->family->enc_free(r->ws);
    if (r->pool) thread_pool_free(r->pool);
    kiln_context_free(r->ctx);
    free(r->run_tok);
    free(r->run_type);
    free(r->run_scores);
    free(r->flags);
    free(r->row);
    free(r->logits);
    free(r->tmpl);
    if (r->own_model) kiln_model_free(r->m);
    free(r);
}

void kiln_reranker_get_info(const kiln_reranker *r, kiln_reranker_info *info) {
    memset(info, 0, sizeof *info);
    info->arch = r->m->arch_name;
    info->causal = r->causal;
    info->max_tokens = r->max_tokens;
    info->n_labels = r->n_labels;
}

/* ---------------------------------------------------------------- framing */

void kiln_rerank_job_free(kiln_rerank_job *j) {
    if (!j) return;
    for (int32_t i = 0; j->tokens && i < j->res.n; i++) free(j->tokens[i]);
    for (int32_t i = 0; j->types && i < j->res.n; i++) free(j->types[i]);
    free(j->tokens);
    free(j->types);
    free(j->scores);
    free(j->n_tokens);
    free(j->truncated);
    free(j->order);
    free(j);
}

/* A cross-encoder pair from the query's and the document's tokens; the
 * document keeps its first nd tokens. */
static int frame_pair(const kiln_reranker *r, const int32_t *q, int32_t nq, const int32_t *d, int32_t nd,
                      int32_t **out_tok, uint8_t **out_type) {
    int32_t n = nq + nd + (r->f_first >= 0) + (r->f_mid1 >= 0) + (r->f_mid2 >= 0) + (r->f_last >= 0);
    int32_t *t = malloc((size_t)(n ? n : 1) * sizeof *t);
    uint8_t *ty = r->pair == MODEL_PAIR_BERT ? malloc((size_t)(n ? n : 1)) : NULL;
    if (!t || (r->pair == MODEL_PAIR_BERT && !ty)) {
        free(t);
        free(ty);
        return -1;
    }
    int32_t k = 0;
    if (r->f_first >= 0) t[k++] = r->f_first;
    if (nq) memcpy(t + k, q, (size_t)nq * sizeof *t);
    k += nq;
    if (r->f_mid1 >= 0) t[k++] = r->f_mid1;
    if (r->f_mid2 >= 0) t[k++] = r->f_mid2;
    const int32_t doc0 = k;
    if (nd) memcpy(t + k, d, (size_t)nd * sizeof *t);
    k += nd;
    if (r->f_last >= 0) t[k++] = r->f_last;
    if (ty)
        for (int32_t i = 0; i < k; i++) ty[i] = i >= doc0;
    *out_tok = t;
    *out_type = ty;
    return k;
}

/* The rerank prompt with {query} and {document} replaced (one pass, so a
 * query containing "{document}" stays as written). */
static char *render(const char *tmpl, const char *q, size_t nq, const char *d, size_t nd, size_t *len) {
    size_t cap = strlen(tmpl) + 1, n = 0;
    for (const char *p = tmpl; (p = strstr(p, "{query}")); p += 7) cap += nq;
    for (const char *p = tmpl; (p = strstr(p, "{document}")); p += 10) cap += nd;
    char *b = malloc(cap);
    if (!b) return NULL;
    for (const char *p = tmpl; *p;) {
        if (!strncmp(p, "{query}", 7)) {
            memcpy(b + n, q, nq);
            n += nq;
            p += 7;
        } else if (!strncmp(p, "{document}", 10)) {
            memcpy(b + n, d, nd);
            n += nd;
            p += 10;
        } else {
            b[n++] = *p++;
        }
    }
    b[n] = 0;
    *len = n;
    return b;
}

/* A causal pair's tokens; with truncation, the document cut (in tokens)
 * until the prompt fits.  Returns the count, 0 when it cannot fit, or a
 * negative kiln_status; *cut is set when the document was shortened. */
static int32_t frame_causal(const kiln_reranker *r, const char *q, size_t nq, const char *d, size_t nd,
                            int allow_truncate, int32_t **out, int *cut) {
    const tokenizer *t = r->m->tok;
    *cut = 0;
    size_t len;
    char *prompt = render(r->tmpl, q, nq, d, nd, &len);
    if (!prompt) return KILN_ERR_NOMEM;
    int32_t n = tok_encode_alloc(t, prompt, len, 0, 1, out);
    free(prompt);
    if (n == TOK_ERR_NOMEM) return KILN_ERR_NOMEM;
    if (n <= r->max_tokens || !allow_truncate) return n;
    /* cut the document's tokens by the excess, then by one more until the
     * re-tokenized prompt fits */
    int32_t *dt = NULL;
    int32_t ndt = tok_encode_alloc(t, d, nd, 0, 1, &dt);
    if (ndt == TOK_ERR_NOMEM) return KILN_ERR_NOMEM;
    /* a prefix of the tokens decodes to about its bytes; room for more */
    const int32_t cap = nd < (size_t)INT32_MAX / 4 - 64 ? (int32_t)(4 * nd + 64) : INT32_MAX;
    char *text = malloc((size_t)cap);
    if (!text) {
        free(dt);
        return KILN_ERR_NOMEM;
    }
    for (int32_t keep = ndt - (n - r->max_tokens); keep >= 0; keep--) {
        const int32_t tl = tok_decode(t, dt, keep, text, cap, 1, 0);
        if (tl < 0) {
            n = TOK_ERR_NOMEM;
            break;
        }
        free(*out);
        *out = NULL;
        prompt = render(r->tmpl, q, nq, text, (size_t)tl, &len);
        n = prompt ? tok_encode_alloc(t, prompt, len, 0, 1, out) : TOK_ERR_NOMEM;
        free(prompt);
        if (n == TOK_ERR_NOMEM) break;
        if (n <= r->max_tokens) {
            *cut = 1;
            break;
        }
    }
    free(dt);
    free(text);
    if (n == TOK_ERR_NOMEM) return KILN_ERR_NOMEM;
    return n <= r->max_tokens ? n : 0;
}

kiln_status kiln_rerank_begin(kiln_reranker *r, const kiln_rerank_request *q, kiln_rerank_job **out) {
    *out = NULL;
    if (!r || !q || !q->query || q->n < 0 || (q->n && !q->documents))
        return base_fail(KILN_ERR_INVALID_ARG, "bad rerank request");
    const tokenizer *t = r->m->tok;
    const size_t nq_bytes = q->query_len ? q->query_len : strlen(q->query);
    kiln_rerank_job *j = calloc(1, sizeof *j);
    if (!j) return base_fail(KILN_ERR_NOMEM, "out of memory");
    const size_t n = (size_t)q->n;
    j->r = r;
    j->res.n = q->n;
    j->scores = calloc(n + 1, sizeof *j->scores);
    j->n_tokens = calloc(n + 1, sizeof *j->n_tokens);
    j->truncated = calloc(n + 1, sizeof *j->truncated);
    j->tokens = calloc(n + 1, sizeof *j->tokens);
    j->types = r->pair == MODEL_PAIR_BERT && !r->causal ? calloc(n + 1, sizeof *j->types) : NULL;
    j->order = malloc((n + 1) * sizeof *j->order);
    kiln_status st = KILN_OK;
    int32_t *qt = NULL;
    char msg[480] = "";
    int mo = 0, n_over = 0;
    if (!j->scores || !j->n_tokens || !j->truncated || !j->tokens || !j->order ||
        (r->pair == MODEL_PAIR_BERT && !r->causal && !j->types)) {
        st = base_fail(KILN_ERR_NOMEM, "out of memory");
        goto done;
    }
    int32_t nqt = 0, frame = 0;
    if (!r->causal) {
        nqt = tok_encode_alloc(t, q->query, nq_bytes, 0, 1, &qt);
        if (nqt == TOK_ERR_NOMEM) {
            st = base_fail(KILN_ERR_NOMEM, "out of memory while tokenizing");
            goto done;
        }
        frame = (r->f_first >= 0) + (r->f_mid1 >= 0) + (r->f_mid2 >= 0) + (r->f_last >= 0);
        if (nqt + frame >= r->max_tokens) {
            st = base_fail(KILN_ERR_CONTEXT_FULL,
                           "the query takes %d tokens with the pair's framing, leaving no room for a document under "
                           "the limit of %d",
                           nqt + frame, r->max_tokens);
            goto done;
        }
    }
    for (int32_t i = 0; i < q->n; i++) {
        const char *doc = q->documents[i];
        if (!doc) {
            st = base_fail(KILN_ERR_INVALID_ARG, "document %d is NULL", i);
            goto done;
        }
        const size_t nd = q->lens ? q->lens[i] : strlen(doc);
        int32_t c;
        int cut = 0;
        if (r->causal) {
            c = frame_causal(r, q->query, nq_bytes, doc, nd, q->allow_truncate, &j->tokens[i], &cut);
            if (c < 0) {
                st = base_fail((kiln_status)c, "document %d: out of memory while tokenizing", i);
                goto done;
            }
            if (c == 0 && q->allow_truncate) {
                st = base_fail(KILN_ERR_CONTEXT_FULL,
                               "the rerank prompt leaves no room for a document under "
                               "the limit of %d",
                               r->max_tokens);
                goto done;
            }
        } else {
            int32_t *dt = NULL;
            int32_t ndt = tok_encode_alloc(t, doc, nd, 0, 1, &dt);
            if (ndt == TOK_ERR_NOMEM) {
                st = base_fail(KILN_ERR_NOMEM, "document %d: out of memory while tokenizing", i);
                goto done;
            }
            int32_t keep = ndt;
            if (nqt + frame + ndt > r->max_tokens && q->allow_truncate) {
                keep = r->max_tokens - nqt - frame;
                cut = 1;
            }
            uint8_t *ty = NULL;
            c = frame_pair(r, qt, nqt, dt, keep, &j->tokens[i], &ty);
            free(dt);
            if (j->types) j->types[i] = ty;
            if (c < 0) {
                st = base_fail(KILN_ERR_NOMEM, "out of memory");
                goto done;
            }
        }
        if (c == 0 || c > r->max_tokens) { /* over the limit (0: not even cut to fit) */
            n_over++;
            if (mo < (int)sizeof msg)
                mo += snprintf(msg + mo, sizeof msg - (size_t)mo, "%s document %d: %d tokens > limit %d",
                               n_over > 1 ? ";" : "", i, c, r->max_tokens);
            continue;
        }
        if (cut) j->truncated[j->res.n_truncated++] = i;
        j->n_tokens[i] = c;
    }
    if (n_over) {
        st = base_fail(KILN_ERR_CONTEXT_FULL, "%d of %d pair(s) exceed the limit of %d tokens:%s", n_over, q->n,
                       r->max_tokens, msg);
        goto done;
    }
    /* encoders: shortest first, so runs pack tightly; a causal model in
     * request order, so the prompt prefix stays cached */
    if (r->causal) {
        for (int32_t i = 0; i < q->n; i++) j->order[i] = i;
    } else if (model_enc_order_by_length(j->n_tokens, 0, q->n, j->order)) {
        st = base_fail(KILN_ERR_NOMEM, "out of memory");
        goto done;
    }
    j->res.scores = j->scores;
    j->res.n_tokens = j->n_tokens;
    j->res.truncated = j->truncated;
done:
    free(qt);
    if (st != KILN_OK) {
        kiln_rerank_job_free(j);
        return st;
    }
    *out = j;
    return KILN_OK;
}

const kiln_rerank_scores *kiln_rerank_result(const kiln_rerank_job *j) { return &j->res; }

/* ----------------------------------------------------------------- running */

static void run_encoder(kiln_rerank_job *j, const int32_t *idx, int32_t count) {
    kiln_reranker *r = j->r;
    size_t o = 0;
    for (int32_t s = 0; s < count; s++) {
        const int32_t n = j->n_tokens[idx[s]];
        memcpy(r->run_tok + o, j->tokens[idx[s]], (size_t)n * sizeof *r->run_tok);
        if (j->types) memcpy(r->run_type + o, j->types[idx[s]], (size_t)n);
        o += (size_t)n;
        r->run_len[s] = n;
    }
    r->m->arch->family->encode(r->ws, r->m, r->run_tok, j->types ? r->run_type : NULL, r->run_len, count,
                               MODEL_POOL_RANK, r->run_scores);
    for (int32_t s = 0; s < count; s++) j->scores[idx[s]] = r->run_scores[(size_t)s * r->n_labels];
}

/* One causal pair: decode what the prefix cache does not hold, the head on
 * the last token's final hidden state, softmax over the labels. */
static kiln_status run_causal(kiln_rerank_job *j, int32_t i) {
    kiln_reranker *r = j->r;
    const int32_t n = j->n_tokens[i], *tok = j->tokens[i];
    kiln_status st = kiln_seq_truncate(r->ctx, 0, 0);
    int32_t pos = st == KILN_OK ? kiln_seq_reuse(r->ctx, 0, tok, n) : 0;
    const float *h = NULL;
    while (st == KILN_OK && pos < n) {
        const int32_t cnt = n - pos < r->n_batch ? n - pos : r->n_batch;
        for (int32_t k = 0; k < cnt; k++) r->flags[k] = pos + k == n - 1;
        kiln_batch b = {cnt, tok + pos, NULL, NULL, r->flags};
        st = kiln_decode(r->ctx, &b);
        if (st == KILN_OK && pos + cnt == n) h = kiln_get_embeddings(r->ctx, cnt - 1);
        pos += cnt;
    }
    if (st == KILN_OK) kiln_seq_cache(r->ctx, 0, tok, n);
    kiln_seq_truncate(r->ctx, 0, 0);
    if (st != KILN_OK) return st;
    if (!h) return base_fail(KILN_ERR_INTERNAL, "document %d: no hidden state for the last token", i);
    const int E = r->m->hp.n_embd;
    double mx = -INFINITY, sum = 0.0;
    for (int l = 0; l < r->n_labels; l++) {
        kern_get_row(&r->head, l, r->row);
        double acc = 0.0;
        for (int d = 0; d < E; d++) acc += (double)r->row[d] * h[d];
        r->logits[l] = (float)acc;
        if (acc > mx) mx = acc;
    }
    for (int l = 0; l < r->n_labels; l++) sum += exp(r->logits[l] - mx);
    j->scores[i] = (float)(exp(r->logits[0] - mx) / sum);
    return KILN_OK;
}

kiln_status kiln_rerank_next(kiln_rerank_job *j, int32_t *n_left) {
    if (!j) return base_fail(KILN_ERR_INVALID_ARG, "no job");
    kiln_reranker *r = j->r;
    if (j->n_done < j->res.n) {
        if (r->causal) {
            kiln_status st = run_causal(j, j->order[j->n_done]);
            if (st != KILN_OK) return st;
            j->n_done++;
        } else {
            const int32_t k = j->n_done;
            const int32_t c = model_enc_run_count(j->n_tokens, j->order + k, j->res.n - k, r->n_batch);
            run_encoder(j, j->order + k, c);
            j->n_done += c;
        }
    }
    if (n_left) *n_left = j->res.n - j->n_done;
    return KILN_OK;
}

kiln_status kiln_rerank(kiln_reranker *r, const kiln_rerank_request *q, kiln_rerank_job **out) {
    kiln_rerank_job *j;
    kiln_status st = kiln_rerank_begin(r, q, &j);
    if (st != KILN_OK) {
        *out = NULL;
        return st;
    }
    for (int32_t left = j->res.n; st == KILN_OK && left > 0;) st = kiln_rerank_next(j, &left);
    if (st != KILN_OK) {
        kiln_rerank_job_free(j);
        j = NULL;
    }
    *out = j;
    return st;
}
