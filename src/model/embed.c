/* kiln_embedder: input formatting, token limits, batching, pooling,
 * normalization and the model fingerprint.  Encoders run through their
 * family's encode on unpadded batches (inputs end to end, shortest first);
 * decoders through an embeddings context, one input per run. */
#include "base/base.h"
#include "model/encoder.h"
#include "model/model.h"

#include <ctype.h>
#include <math.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct kiln_embedder {
    kiln_model *m;
    int own_model;
    int pooling; /* KILN_POOLING_* */
    int32_t max_tokens, n_batch;
    char *qprefix, *dprefix;
    char fingerprint[65];
    float *pooled; /* [MODEL_ENC_MAX_SEQ][n_embd] pooled, not normalized */
    /* encoder */
    thread_pool *pool;
    void *ws;         /* the encoder family's workspace */
    int32_t *run_tok; /* the token ids of one run, inputs end to end */
    int32_t run_len[MODEL_ENC_MAX_SEQ];
    /* decoder */
    kiln_context *ctx;
    int8_t *flags; /* [n_batch] rows whose hidden state is kept */
    double *acc;   /* [n_embd] pooling accumulator */
    /* the last failed begin's over-limit inputs */
    int32_t n_over, cap_over;
    int32_t *over_idx, *over_ntok;
};

struct kiln_embed_job {
    kiln_embedder *e;
    kiln_embeddings res;
    float *vectors;
    int32_t *n_tokens, *truncated;
    int32_t **tokens; /* [n] token ids per input */
    int32_t *order;   /* kiln_embed_next: the run order (encoders: shortest first) */
    int32_t n_done;   /* inputs of order embedded */
};

kiln_embedder_params kiln_embedder_default_params(void) {
    kiln_embedder_params p = {0, 2048, 0};
    return p;
}

/* ------------------------------------------------------------ formatting */

static char *dup_str(const char *s, size_t n) {
    char *d = malloc(n + 1);
    if (d) {
        memcpy(d, s, n);
        d[n] = 0;
    }
    return d;
}

/* Family defaults by general.name, lowercased with ' ' and '_' read as '-'. */
static void family_prefixes(const char *name, const char **q, const char **d) {
    char n[256];
    size_t i = 0;
    for (; name[i] && i + 1 < sizeof n; i++) {
        char c = (char)tolower((unsigned char)name[i]);
        n[i] = c == ' ' || c == '_' ? '-' : c;
    }
    n[i] = 0;
    *q = *d = "";
    const char *e5 = strstr(n, "e5-");
    if (strstr(n, "qwen3-embedding")) {
        *q = "Instruct: Given a web search query, retrieve relevant passages that answer the query\nQuery:";
    } else if (e5 && (e5 == n || !isalnum((unsigned char)e5[-1]))) {
        *q = "query: ";
        *d = "passage: ";
    } else if (strstr(n, "nomic-embed")) {
        *q = "search_query: ";
        *d = "search_document: ";
    } else if (strstr(n, "bge-") && strstr(n, "-en")) {
        *q = "Represent this sentence for searching relevant passages: ";
    }
}

/* The input formats: the file's kiln.embedding.* keys, else the family's
 * defaults, else the defaults by general.name. */
static int load_prefixes(kiln_embedder *e) {
    const char *fq, *fd;
    family_prefixes(e->m->name, &fq, &fd);
    const model_family *fam = e->m->arch->family;
    if (fam->embed_query) fq = fam->embed_query;
    if (fam->embed_document) fd = fam->embed_document;
    gguf_str s;
    e->qprefix = gguf_get_str(e->m->gf, "kiln.embedding.query_prefix", &s) == 0 ? dup_str(s.ptr, s.len)
                                                                                : dup_str(fq, strlen(fq));
    e->dprefix = gguf_get_str(e->m->gf, "kiln.embedding.document_prefix", &s) == 0 ? dup_str(s.ptr, s.len)
                                                                                   : dup_str(fd, strlen(fd));
    return e->qprefix && e->dprefix ? 0 : -1;
}

/* SHA-256 over a version tag, the architecture, the input format (both
 * prefixes, pooling) and every tensor: name, type, shape, bytes. */
static int fingerprint(kiln_embedder *e) {
    EVP_MD_CTX *h = EVP_MD_CTX_new();
    if (!h) return -1;
    int ok = EVP_DigestInit_ex(h, EVP_sha256(), NULL);
    char head[96];
    int n = snprintf(head, sizeof head, "kiln-embedder-v1\narch=%s\npooling=%d\n", e->m->arch_name, e->pooling);
    ok &= EVP_DigestUpdate(h, head, (size_t)n);
    ok &= EVP_DigestUpdate(h, e->qprefix, strlen(e->qprefix) + 1);
    ok &= EVP_DigestUpdate(h, e->dprefix, strlen(e->dprefix) + 1);
    for (int i = 0; ok && i < gguf_n_tensors(e->m->gf); i++) {
        const gguf_tensor *t = gguf_tensor_at(e->m->gf, i);
        uint64_t desc[2 + GGUF_MAX_DIMS] = {t->type, t->n_dims};
        for (int d = 0; d < GGUF_MAX_DIMS; d++) desc[2 + d] = (uint64_t)t->ne[d];
        ok &= EVP_DigestUpdate(h, t->name, strlen(t->name) + 1);
        ok &= EVP_DigestUpdate(h, desc, sizeof desc);
        ok &= EVP_DigestUpdate(h, t->data, t->nbytes);
    }
    unsigned char md[32];
    unsigned int len = 0;
    ok &= EVP_DigestFinal_ex(h, md, &len);
    EVP_MD_CTX_free(h);
    if (!ok || len != 32) return -1;
    for (int i = 0; i < 32; i++) snprintf(e->fingerprint + 2 * i, 3, "%02x", md[i]);
    return 0;
}

/* ---------------------------------------------------------------- create */

static kiln_status setup(kiln_embedder *e, const kiln_embedder_params *params) {
    kiln_embedder_params p = params ? *params : kiln_embedder_default_params();
    kiln_model *m = e->m;
    if (p.n_batch <= 0) p.n_batch = 2048;
    if (p.max_tokens < 0 || p.n_threads < 0) return base_fail(KILN_ERR_INVALID_ARG, "negative max_tokens or n_threads");
    int def = m->arch->encoder ? KILN_POOLING_MEAN : KILN_POOLING_LAST;
    char key[96];
    snprintf(key, sizeof key, "%s.pooling_type", m->arch_name);
    e->pooling = (int)gguf_get_int(m->gf, key, def);
    if (e->pooling < KILN_POOLING_MEAN || e->pooling > KILN_POOLING_LAST)
        return base_fail(KILN_ERR_UNSUPPORTED, "%s = %d: kiln embeds with mean (1), CLS (2) or last-token (3) pooling",
                         key, e->pooling);
    if (load_prefixes(e) || fingerprint(e)) return base_fail(KILN_ERR_NOMEM, "out of memory");
    e->acc = malloc((size_t)m->hp.n_embd * sizeof *e->acc);
    e->pooled = malloc((size_t)MODEL_ENC_MAX_SEQ * (size_t)m->hp.n_embd * sizeof *e->pooled);
    if (!e->acc || !e->pooled) return base_fail(KILN_ERR_NOMEM, "out of memory");
    if (m->arch->encoder) {
        e->max_tokens = p.max_tokens ? p.max_tokens : m->hp.n_ctx_train;
        if (e->max_tokens > m->hp.n_ctx_train)
            return base_fail(KILN_ERR_INVALID_ARG, "max_tokens %d exceeds the model's %d", e->max_tokens,
                             m->hp.n_ctx_train);
        /* n_batch bounds what several inputs share one run with; an input
         * longer than that runs alone, so the workspace holds the longer */
        e->n_batch = p.n_batch;
        const int32_t cap = e->n_batch < e->max_tokens ? e->max_tokens : e->n_batch;
        e->pool = thread_pool_new(p.n_threads);
        if (!e->pool) return base_fail(KILN_ERR_NOMEM, "cannot start threads");
        e->ws = m->arch->family->enc_new(m, cap, e->pool);
        e->run_tok = malloc((size_t)cap * sizeof *e->run_tok);
        if (!e->ws || !e->run_tok) return base_fail(KILN_ERR_NOMEM, "out of memory");
        return KILN_OK;
    }
    kiln_context_params cp = kiln_context_default_params();
    cp.n_ctx = p.max_tokens;
    cp.n_batch = p.n_batch;
    cp.n_threads = p.n_threads;
    /* vectors are compared at 1e-5: F32 keys and values, but on the GPU,
     * which keeps only F16 ones (its attention sums in F32) */
    cp.kv_type = m->be->kind == BACKEND_CUDA ? KILN_KV_F16 : KILN_KV_F32;
    cp.embeddings = 1;
    kiln_status st = kiln_context_new(m, &cp, &e->ctx);
    if (st != KILN_OK) return st;
    e->max_tokens = kiln_context_n_ctx(e->ctx);
    e->n_batch = e->ctx->p.n_batch;
    e->flags = malloc((size_t)e->n_batch);
    if (!e->flags) return base_fail(KILN_ERR_NOMEM, "out of memory");
    return KILN_OK;
}

kiln_status kiln_embedder_new_from_model(kiln_model *m, const kiln_embedder_params *p, kiln_embedder **out) {
    *out = NULL;
    if (!m) return base_fail(KILN_ERR_INVALID_ARG, "no model");
    kiln_embedder *e = calloc(1, sizeof *e);
    if (!e) return base_fail(KILN_ERR_NOMEM, "out of memory");
    e->m = m;
    kiln_status st = setup(e, p);
    if (st != KILN_OK) {
        kiln_embedder_free(e);
        return st;
    }
    *out = e;
    return KILN_OK;
}

kiln_status kiln_embedder_new(const char *path, const kiln_embedder_params *p, kiln_embedder **out) {
    *out = NULL;
    kiln_model *m;
    kiln_model_params mp = kiln_model_default_params();
    mp.backend = KILN_ENGINE_BACKEND_CPU; /* the encoders have no GPU kernels */
    kiln_status st = kiln_model_load(path, &mp, &m);
    if (st != KILN_OK) return st;
    st = kiln_embedder_new_from_model(m, p, out);
    if (st != KILN_OK) {
        kiln_model_free(m);
        return st;
    }
    (*out)->own_model = 1;
    return KILN_OK;
}

void kiln_embedder_free(kiln_embedder *e) {
    if (!e) return;
    if (e->ws) e->m->arch->family->enc_free(e->ws);
    if (e->pool) thread_pool_free(e->pool);
    kiln_context_free(e->ctx);
    free(e->run_tok);
    free(e->pooled);
    free(e->flags);
    free(e->acc);
    free(e->qprefix);
    free(e->dprefix);
    free(e->over_idx);
    free(e->over_ntok);
    if (e->own_model) kiln_model_free(e->m);
    free(e);
}

void kiln_embedder_get_info(const kiln_embedder *e, kiln_embedder_info *info) {
    memset(info, 0, sizeof *info);
    info->arch = e->m->arch_name;
    info->n_embd = e->m->hp.n_embd;
    info->max_tokens = e->max_tokens;
    info->pooling = e->pooling;
    info->query_prefix = e->qprefix;
    info->document_prefix = e->dprefix;
    info->fingerprint = e->fingerprint;
}

/* ------------------------------------------------------------ tokenizing */

/* Appends n bytes of s to the growing buffer b (of *len bytes, *cap). */
static int put(char **b, size_t *len, size_t *cap, const char *s, size_t n) {
    if (*len + n + 1 > *cap) {
        size_t c = (*len + n + 1) * 2;
        char *nb = realloc(*b, c);
        if (!nb) return -1;
        *b = nb;
        *cap = c;
    }
    memcpy(*b + *len, s, n);
    *len += n;
    (*b)[*len] = 0;
    return 0;
}

/* The input as the model reads it: fmt with "{text}" replaced by the text
 * and "{title}" by the title ("none" when there is none); a format without
 * "{text}" is a prefix.  Returns the malloc'd string (length in *out_len)
 * or NULL when out of memory. */
static char *format_input(const char *fmt, const char *text, size_t len, const char *title, size_t *out_len) {
    char *b = NULL;
    size_t n = 0, cap = 0;
    int ok = put(&b, &n, &cap, "", 0) == 0, has_text = strstr(fmt, "{text}") != NULL;
    for (const char *p = fmt; ok && *p;) {
        if (!strncmp(p, "{text}", 6)) {
            ok = put(&b, &n, &cap, text, len) == 0;
            p += 6;
        } else if (!strncmp(p, "{title}", 7)) {
            const char *t = title && *title ? title : "none";
            ok = put(&b, &n, &cap, t, strlen(t)) == 0;
            p += 7;
        } else {
            ok = put(&b, &n, &cap, p++, 1) == 0;
        }
    }
    if (ok && !has_text) ok = put(&b, &n, &cap, text, len) == 0;
    if (!ok) {
        free(b);
        return NULL;
    }
    *out_len = n;
    return b;
}

/* The formatted input with the vocabulary's special tokens added, and
 * every special token written in the text recognized (as Hugging Face's
 * tokenizers and llama.cpp read embedding inputs); *out is malloc'd.
 * Returns the count, or a negative kiln_status. */
static int32_t tokenize(const kiln_embedder *e, const char *fmt, const char *text, size_t len, const char *title,
                        int32_t **out) {
    size_t bl = 0;
    char *buf = format_input(fmt, text, len, title, &bl);
    if (!buf) return KILN_ERR_NOMEM;
    int32_t cap = (int32_t)(bl + 8 < (size_t)INT32_MAX ? bl + 8 : INT32_MAX);
    int32_t *ids = NULL, n = 0;
    for (int attempt = 0; attempt < 2; attempt++) {
        free(ids);
        ids = malloc((size_t)cap * sizeof *ids);
        if (!ids) break;
        n = tok_encode(e->m->tok, buf, bl, 1, 1, ids, cap);
        if (n >= 0 || n == TOK_ERR_NOMEM) break;
        cap = -n;
    }
    free(buf);
    if (!ids || n < 0) {
        free(ids);
        return KILN_ERR_NOMEM;
    }
    *out = ids;
    return n;
}

/* Whether the last token is the closing special token the tokenizer adds
 * ([SEP] for WordPiece, EOS when add_eos), which truncation keeps. */
static int has_closing(const tokenizer *t, const int32_t *ids, int32_t n) {
    if (n < 2) return 0;
    int32_t last = ids[n - 1];
    return (tok_kind(t) == TOK_WPM && last == tok_sep(t)) || (tok_add_eos(t) && last == tok_eos(t));
}

static int note_over(kiln_embedder *e, int32_t i, int32_t n) {
    if (e->n_over == e->cap_over) {
        int32_t cap = e->cap_over ? 2 * e->cap_over : 16;
        int32_t *a = realloc(e->over_idx, (size_t)cap * sizeof *a);
        if (a) e->over_idx = a;
        int32_t *b = realloc(e->over_ntok, (size_t)cap * sizeof *b);
        if (b) e->over_ntok = b;
        if (!a || !b) return -1;
        e->cap_over = cap;
    }
    e->over_idx[e->n_over] = i;
    e->over_ntok[e->n_over++] = n;
    return 0;
}

void kiln_embed_job_free(kiln_embed_job *j) {
    if (!j) return;
    if (j->tokens)
        for (int32_t i = 0; i < j->res.n; i++) free(j->tokens[i]);
    free(j->tokens);
    free(j->order);
    free(j->vectors);
    free(j->n_tokens);
    free(j->truncated);
    free(j);
}

static kiln_status over_limit_error(const kiln_embedder *e, int32_t n_inputs) {
    char msg[512];
    int o = snprintf(msg, sizeof msg, "%d of %d input(s) exceed the limit of %d tokens:", e->n_over, n_inputs,
                     e->max_tokens);
    for (int32_t k = 0; k < e->n_over && o < (int)sizeof msg; k++)
        o += snprintf(msg + o, sizeof msg - (size_t)o, "%s input %d: %d tokens > limit %d", k ? ";" : "",
                      e->over_idx[k], e->over_ntok[k], e->max_tokens);
    return base_fail(KILN_ERR_CONTEXT_FULL, "%s", msg);
}

kiln_status kiln_embed_begin(kiln_embedder *e, const kiln_embed_request *r, kiln_embed_job **out) {
    *out = NULL;
    if (!e || !r || r->n < 0 || (r->n && !r->texts)) return base_fail(KILN_ERR_INVALID_ARG, "bad embed request");
    e->n_over = 0;
    const int E = e->m->hp.n_embd;
    if (r->kind != KILN_EMBED_QUERY && r->kind != KILN_EMBED_DOCUMENT)
        return base_fail(KILN_ERR_INVALID_ARG, "unknown input kind %d", r->kind);
    if (r->dim < 0 || r->dim > E) return base_fail(KILN_ERR_INVALID_ARG, "dimension %d is outside 1..%d", r->dim, E);
    const int dim = r->dim ? r->dim : E;
    kiln_embed_job *j = calloc(1, sizeof *j);
    if (!j) return base_fail(KILN_ERR_NOMEM, "out of memory");
    j->e = e;
    j->res.n = r->n;
    j->res.dim = dim;
    j->res.fingerprint = e->fingerprint;
    const size_t n = (size_t)r->n;
    j->tokens = calloc(n ? n : 1, sizeof *j->tokens);
    j->vectors = calloc(n * (size_t)dim + 1, sizeof *j->vectors);
    j->n_tokens = calloc(n + 1, sizeof *j->n_tokens);
    j->truncated = calloc(n + 1, sizeof *j->truncated);
    if (!j->tokens || !j->vectors || !j->n_tokens || !j->truncated) {
        kiln_embed_job_free(j);
        return base_fail(KILN_ERR_NOMEM, "out of memory");
    }
    const char *prefix = r->kind == KILN_EMBED_QUERY ? e->qprefix : e->dprefix;
    /* count every input before any runs */
    for (int32_t i = 0; i < r->n; i++) {
        const char *t = r->texts[i];
        if (!t) {
            kiln_embed_job_free(j);
            return base_fail(KILN_ERR_INVALID_ARG, "input %d is NULL", i);
        }
        const char *title = r->kind == KILN_EMBED_DOCUMENT && r->titles ? r->titles[i] : NULL;
        int32_t c = tokenize(e, prefix, t, r->lens ? r->lens[i] : strlen(t), title, &j->tokens[i]);
        if (c < 0) {
            kiln_embed_job_free(j);
            return base_fail((kiln_status)c, "input %d: out of memory while tokenizing", i);
        }
        if (c == 0) {
            kiln_embed_job_free(j);
            return base_fail(KILN_ERR_INVALID_ARG, "input %d has no tokens", i);
        }
        if (c > e->max_tokens) {
            if (r->allow_truncate) {
                int32_t *ids = j->tokens[i];
                if (has_closing(e->m->tok, ids, c)) ids[e->max_tokens - 1] = ids[c - 1];
                j->truncated[j->res.n_truncated++] = i;
                c = e->max_tokens;
            } else if (note_over(e, i, c)) {
                kiln_embed_job_free(j);
                return base_fail(KILN_ERR_NOMEM, "out of memory");
            }
        }
        j->n_tokens[i] = c;
    }
    if (e->n_over) {
        kiln_embed_job_free(j);
        return over_limit_error(e, r->n);
    }
    j->res.vectors = j->vectors;
    j->res.n_tokens = j->n_tokens;
    j->res.truncated = j->truncated;
    *out = j;
    return KILN_OK;
}

int32_t kiln_embed_over_limit(const kiln_embedder *e, const int32_t **index, const int32_t **n_tokens) {
    if (index) *index = e->over_idx;
    if (n_tokens) *n_tokens = e->over_ntok;
    return e->n_over;
}

const kiln_embeddings *kiln_embed_result(const kiln_embed_job *j) { return &j->res; }

/* ----------------------------------------------------------------- running */

/* Writes the leading dim values of v, scaled to unit length, to out. */
static void finish(const float *v, int dim, float *out) {
    double ss = 0.0;
    for (int d = 0; d < dim; d++) ss += (double)v[d] * v[d];
    const float inv = ss > 0.0 ? (float)(1.0 / sqrt(ss)) : 0.0f;
    for (int d = 0; d < dim; d++) out[d] = v[d] * inv;
}

int32_t kiln_embed_batch_end(const kiln_embed_job *j, int32_t begin) {
    const kiln_embedder *e = j->e;
    if (begin < 0 || begin >= j->res.n) return begin;
    if (!e->m->arch->encoder) return begin + 1;
    return begin + model_enc_run_count(j->n_tokens + begin, NULL, j->res.n - begin, e->n_batch);
}

/* One encoder run over the inputs idx[0..count), laid end to end. */
static void encode_group(kiln_embed_job *j, const int32_t *idx, int32_t count) {
    kiln_embedder *e = j->e;
    const int E = e->m->hp.n_embd;
    size_t o = 0;
    for (int32_t s = 0; s < count; s++) {
        const int32_t n = j->n_tokens[idx[s]];
        memcpy(e->run_tok + o, j->tokens[idx[s]], (size_t)n * sizeof *e->run_tok);
        o += (size_t)n;
        e->run_len[s] = n;
    }
    e->m->arch->family->encode(e->ws, e->m, e->run_tok, NULL, e->run_len, count, e->pooling, e->pooled);
    for (int32_t s = 0; s < count; s++)
        finish(e->pooled + (size_t)s * E, j->res.dim, j->vectors + (size_t)idx[s] * j->res.dim);
}

/* A decoder input, chunked by n_batch; pooled from the final normalized
 * hidden states. */
static kiln_status decode_one(kiln_embed_job *j, int32_t i) {
    kiln_embedder *e = j->e;
    const int E = e->m->hp.n_embd;
    const int32_t n = j->n_tokens[i];
    const int32_t *ids = j->tokens[i];
    kiln_status st = kiln_seq_truncate(e->ctx, 0, 0);
    for (int d = 0; d < E; d++) e->acc[d] = 0.0;
    for (int32_t off = 0; st == KILN_OK && off < n; off += e->n_batch) {
        int32_t cnt = n - off < e->n_batch ? n - off : e->n_batch;
        for (int32_t k = 0; k < cnt; k++) {
            int32_t t = off + k;
            e->flags[k] =
                (int8_t)(e->pooling == KILN_POOLING_MEAN || t == (e->pooling == KILN_POOLING_CLS ? 0 : n - 1));
        }
        kiln_batch b = {cnt, ids + off, NULL, NULL, e->flags};
        st = kiln_decode(e->ctx, &b);
        for (int32_t k = 0; st == KILN_OK && k < cnt; k++) {
            if (!e->flags[k]) continue;
            const float *h = kiln_get_embeddings(e->ctx, k);
            if (!h) return base_fail(KILN_ERR_INTERNAL, "input %d: no hidden state for token %d", i, off + k);
            for (int d = 0; d < E; d++) e->acc[d] += h[d];
        }
    }
    kiln_seq_truncate(e->ctx, 0, 0);
    if (st != KILN_OK) return st;
    /* acc holds one row (CLS, last) or the sum of n rows (mean) */
    const double scale = e->pooling == KILN_POOLING_MEAN ? 1.0 / n : 1.0;
    for (int d = 0; d < E; d++) e->pooled[d] = (float)(e->acc[d] * scale);
    finish(e->pooled, j->res.dim, j->vectors + (size_t)i * j->res.dim);
    return KILN_OK;
}

/* Runs the inputs idx[0..n) in that order, as many per run as fit. */
static void encode_in_order(kiln_embed_job *j, const int32_t *idx, int32_t n) {
    for (int32_t k = 0; k < n;) {
        const int32_t c = model_enc_run_count(j->n_tokens, idx + k, n - k, j->e->n_batch);
        encode_group(j, idx + k, c);
        k += c;
    }
}

kiln_status kiln_embed_run(kiln_embed_job *j, int32_t begin, int32_t end) {
    if (!j || begin < 0 || end > j->res.n || begin > end)
        return base_fail(KILN_ERR_INVALID_ARG, "bad input range [%d, %d)", begin, end);
    kiln_embedder *e = j->e;
    if (!e->m->arch->encoder) {
        for (int32_t i = begin; i < end; i++) {
            kiln_status st = decode_one(j, i);
            if (st != KILN_OK) return st;
        }
        return KILN_OK;
    }
    int32_t *idx = malloc((size_t)(end - begin + 1) * sizeof *idx);
    if (!idx || model_enc_order_by_length(j->n_tokens, begin, end, idx)) {
        free(idx);
        return base_fail(KILN_ERR_NOMEM, "out of memory");
    }
    encode_in_order(j, idx, end - begin);
    free(idx);
    return KILN_OK;
}

kiln_status kiln_embed_next(kiln_embed_job *j, int32_t *n_left) {
    if (!j) return base_fail(KILN_ERR_INVALID_ARG, "no job");
    if (!j->order) {
        j->order = malloc((size_t)(j->res.n + 1) * sizeof *j->order);
        if (!j->order) return base_fail(KILN_ERR_NOMEM, "out of memory");
        if (j->e->m->arch->encoder) {
            if (model_enc_order_by_length(j->n_tokens, 0, j->res.n, j->order)) {
                free(j->order);
                j->order = NULL;
                return base_fail(KILN_ERR_NOMEM, "out of memory");
            }
        } else {
            for (int32_t i = 0; i < j->res.n; i++) j->order[i] = i;
        }
    }
    if (j->n_done < j->res.n) {
        if (!j->e->m->arch->encoder) {
            kiln_status st = decode_one(j, j->order[j->n_done]);
            if (st != KILN_OK) return st;
            j->n_done++;
        } else {
            const int32_t k = j->n_done;
            const int32_t c = model_enc_run_count(j->n_tokens, j->order + k, j->res.n - k, j->e->n_batch);
            encode_group(j, j->order + k, c);
            j->n_done += c;
        }
    }
    if (n_left) *n_left = j->res.n - j->n_done;
    return KILN_OK;
}

kiln_status kiln_embed(kiln_embedder *e, const kiln_embed_request *r, kiln_embed_job **out) {
    kiln_embed_job *j;
    kiln_status st = kiln_embed_begin(e, r, &j);
    if (st != KILN_OK) {
        *out = NULL;
        return st;
    }
    st = kiln_embed_run(j, 0, j->res.n);
    if (st != KILN_OK) {
        kiln_embed_job_free(j);
        j = NULL;
    }
    *out = j;
    return st;
}
