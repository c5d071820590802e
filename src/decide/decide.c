/* kiln_decider: a resident decision pack and its jobs.  A job frames every
 * question first (frame.c), runs the sequences shortest first through the
 * encoder family's pooled forward pass, as many per unpadded run as fit,
 * applies each question's head to its pooled rows and, once every
 * sequence ran, turns the logits into calibrated probabilities:
 * softmax(logits / T) with T the question type's temperature (options:
 * its option-count bucket's, when the pack has one). */
#include "decide/decide.h"

#include "base/base.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Most sequences one run carries (bounds the pooled buffer). */
#define DECIDE_MAX_SEQ 64

struct kiln_decider {
    kiln_model *m;  /* NULL when measure_only */
    gguf_file *gf;  /* measure_only: the header */
    tokenizer *tok; /* measure_only: the tokenizer; else m->tok */
    decide_config cfg;
    thread_pool *pool;
    void *ws;
    int32_t n_batch;
    int32_t *run_tok; /* one run's sequences end to end */
    int32_t run_len[DECIDE_MAX_SEQ];
    float *pooled; /* [DECIDE_MAX_SEQ][n_embd] */
    float *h;      /* [n_embd] head activations */
    void *mm_scratch;
    const char **type_names; /* [n_types] for kiln_decider_get_info */
};

struct kiln_decide_job {
    kiln_decider *d;
    decide_frame fr;
    int32_t *order; /* sequences shortest first */
    int32_t n_done;
    float *logits;      /* [n_seq][n_out of its head] */
    int32_t *logit_off; /* [n_seq] */
    kiln_decisions res;
    kiln_decision *dec;
    float *probs;
    char *strings;       /* ids and options, copied */
    const char **labels; /* the options of options questions, into strings */
    int finished;
};

kiln_decider_params kiln_decider_default_params(void) {
    kiln_decider_params p = {0, 2048, 0};
    return p;
}

void kiln_decider_free(kiln_decider *d) {
    if (!d) return;
    if (d->ws) d->m->arch->family->enc_free(d->ws);
    if (d->pool) thread_pool_free(d->pool);
    if (d->m) kiln_model_free(d->m);
    if (d->gf) {
        if (d->tok) tok_free(d->tok);
        gguf_close(d->gf);
    }
    decide_config_free(&d->cfg);
    free(d->run_tok);
    free(d->pooled);
    free(d->h);
    free(d->mm_scratch);
    free(d->type_names);
    free(d);
}

kiln_status kiln_decider_new(const char *path, const kiln_decider_params *params, kiln_decider **out) {
    *out = NULL;
    if (!path) return base_fail(KILN_ERR_INVALID_ARG, "no pack path given");
    kiln_decider_params p = params ? *params : kiln_decider_default_params();
    if (p.n_batch <= 0) p.n_batch = 2048;
    if (p.n_threads < 0) return base_fail(KILN_ERR_INVALID_ARG, "negative n_threads");
    kiln_decider *d = calloc(1, sizeof *d);
    if (!d) return base_fail(KILN_ERR_NOMEM, "out of memory");
    /* the configuration first, from the header: a malformed one fails
     * before any model memory exists */
    kiln_status st = KILN_OK;
    if ((st = gguf_open(path, &d->gf))) goto fail;
    if ((st = decide_config_load(&d->cfg, d->gf)) != KILN_OK) {
        st = base_fail(st == KILN_ERR_NOT_FOUND ? KILN_ERR_FORMAT : st, "%s: %s", path, kiln_last_error());
        goto fail;
    }
    if (!(d->type_names = malloc((size_t)d->cfg.n_types * sizeof *d->type_names))) goto oom;
    for (int i = 0; i < d->cfg.n_types; i++) d->type_names[i] = d->cfg.types[i].name;
    if (p.measure_only) {
        if ((st = tok_load(d->gf, &d->tok))) {
            st = base_fail(KILN_ERR_FORMAT, "%s: tokenizer: %s", path, kiln_last_error());
            goto fail;
        }
        *out = d;
        return KILN_OK;
    }
    gguf_close(d->gf);
    d->gf = NULL;
    kiln_model_params mp = kiln_model_default_params();
    mp.backend = KILN_ENGINE_BACKEND_CPU; /* decision packs run on the CPU */
    if ((st = kiln_model_load(path, &mp, &d->m)) != KILN_OK) goto fail;
    d->tok = d->m->tok;
    if (!d->m->arch->encoder) {
        st = base_fail(KILN_ERR_UNSUPPORTED, "%s: a decision pack needs an encoder, and '%s' is a decoder", path,
                       d->m->arch_name);
        goto fail;
    }
    if ((st = decide_heads_bind(&d->cfg, d->m)) != KILN_OK) {
        char msg[600];
        snprintf(msg, sizeof msg, "%s: %s", path, kiln_last_error());
        base_fail(st, "%s", msg);
        goto fail;
    }
    const int E = d->m->hp.n_embd;
    d->n_batch = p.n_batch; /* a longer sequence runs alone: the workspace holds max_len */
    const int32_t cap = d->n_batch < d->cfg.max_len ? d->cfg.max_len : d->n_batch;
    d->pool = thread_pool_new(p.n_threads);
    if (!d->pool) {
        st = base_fail(KILN_ERR_NOMEM, "cannot start threads");
        goto fail;
    }
    d->ws = d->m->arch->family->enc_new(d->m, cap, d->pool);
    d->run_tok = malloc((size_t)cap * sizeof *d->run_tok);
    d->pooled = malloc((size_t)DECIDE_MAX_SEQ * (size_t)E * sizeof *d->pooled);
    d->h = malloc((size_t)E * sizeof *d->h);
    d->mm_scratch = malloc(kern_matmul_scratch_size(E, 1));
    if (!d->ws || !d->run_tok || !d->pooled || !d->h || !d->mm_scratch) goto oom;
    *out = d;
    return KILN_OK;
oom:
    st = base_fail(KILN_ERR_NOMEM, "out of memory");
fail:
    kiln_decider_free(d);
    return st;
}

void kiln_decider_get_info(const kiln_decider *d, kiln_decider_info *info) {
    memset(info, 0, sizeof *info);
    info->arch = d->m ? d->m->arch_name : "";
    info->max_len = d->cfg.max_len;
    info->head_max_len = d->cfg.head_max_len;
    info->n_types = d->cfg.n_types;
    info->types = d->type_names;
}

kiln_status kiln_decide_measure(kiln_decider *d, const kiln_decide_request *r, int32_t *state_tokens,
                                int32_t *budgets) {
    if (!d || !state_tokens || !r || (r->n_questions && !budgets))
        return base_fail(KILN_ERR_INVALID_ARG, "bad measure arguments");
    decide_frame fr;
    kiln_status st = decide_frame_build(&fr, &d->cfg, d->tok, r, 0);
    if (st != KILN_OK) return st;
    *state_tokens = fr.state_tokens;
    memcpy(budgets, fr.budget, (size_t)fr.n_q * sizeof *budgets);
    decide_frame_free(&fr);
    return KILN_OK;
}

/* ------------------------------------------------------------------- jobs */

void kiln_decide_job_free(kiln_decide_job *j) {
    if (!j) return;
    decide_frame_free(&j->fr);
    free(j->order);
    free(j->logits);
    free(j->logit_off);
    free(j->dec);
    free(j->probs);
    free(j->strings);
    free(j->labels);
    free(j);
}

typedef struct by_len {
    int32_t n, index;
} by_len;

static int by_length(const void *a, const void *b) {
    const by_len *x = a, *y = b;
    if (x->n != y->n) return x->n < y->n ? -1 : 1;
    return x->index < y->index ? -1 : x->index > y->index;
}

/* Copies the request's ids and options (the results point into the copy). */
static int copy_strings(kiln_decide_job *j, const kiln_decide_request *r) {
    size_t bytes = 0, n_opt = 0;
    for (int i = 0; i < r->n_questions; i++) {
        const kiln_decide_question *q = &r->questions[i];
        bytes += (q->id ? strlen(q->id) : 0) + 1;
        for (int k = 0; k < q->n_options; k++) bytes += strlen(q->options[k]) + 1;
        n_opt += (size_t)q->n_options;
    }
    j->strings = malloc(bytes + 1);
    j->labels = malloc((n_opt + 1) * sizeof *j->labels);
    if (!j->strings || !j->labels) return -1;
    char *p = j->strings;
    size_t lo = 0;
    for (int i = 0; i < r->n_questions; i++) {
        const kiln_decide_question *q = &r->questions[i];
        const decide_type *ty = decide_type_find(&j->d->cfg, q->type);
        const size_t il = q->id ? strlen(q->id) : 0;
        memcpy(p, q->id ? q->id : "", il + 1);
        j->dec[i].id = p;
        p += il + 1;
        j->dec[i].type = ty->name;
        if (ty->n_labels) {
            j->dec[i].n = ty->n_labels;
            j->dec[i].labels = (const char *const *)ty->labels;
            continue;
        }
        j->dec[i].n = q->n_options;
        j->dec[i].labels = j->labels + lo;
        for (int k = 0; k < q->n_options; k++) {
            const size_t ol = strlen(q->options[k]);
            memcpy(p, q->options[k], ol + 1);
            j->labels[lo++] = p;
            p += ol + 1;
        }
    }
    return 0;
}

kiln_status kiln_decide_begin(kiln_decider *d, const kiln_decide_request *r, kiln_decide_job **out) {
    *out = NULL;
    if (!d) return base_fail(KILN_ERR_INVALID_ARG, "no decider");
    if (!d->m) return base_fail(KILN_ERR_STATE, "this decider was opened to measure only");
    kiln_decide_job *j = calloc(1, sizeof *j);
    if (!j) return base_fail(KILN_ERR_NOMEM, "out of memory");
    j->d = d;
    kiln_status st = decide_frame_build(&j->fr, &d->cfg, d->tok, r, 1);
    if (st != KILN_OK) {
        free(j);
        return st;
    }
    const int ns = j->fr.n_seq, nq = j->fr.n_q;
    j->order = malloc((size_t)(ns + 1) * sizeof *j->order);
    j->logit_off = malloc((size_t)(ns + 1) * sizeof *j->logit_off);
    j->dec = calloc((size_t)nq + 1, sizeof *j->dec);
    by_len *ord = malloc((size_t)(ns + 1) * sizeof *ord);
    size_t n_logits = 0, n_probs = 0;
    if (!j->order || !j->logit_off || !j->dec || !ord) goto oom;
    for (int s = 0; s < ns; s++) {
        j->logit_off[s] = (int32_t)n_logits;
        n_logits += (size_t)d->cfg.heads[j->fr.seqs[s].head].n_out;
        ord[s] = (by_len){j->fr.seqs[s].n, s};
    }
    qsort(ord, (size_t)ns, sizeof *ord, by_length);
    for (int s = 0; s < ns; s++) j->order[s] = ord[s].index;
    free(ord);
    ord = NULL;
    j->logits = calloc(n_logits + 1, sizeof *j->logits);
    if (!j->logits || copy_strings(j, r)) goto oom;
    for (int i = 0; i < nq; i++) n_probs += (size_t)j->dec[i].n;
    j->probs = calloc(n_probs + 1, sizeof *j->probs);
    if (!j->probs) goto oom;
    n_probs = 0;
    for (int i = 0; i < nq; i++) {
        j->dec[i].probs = j->probs + n_probs;
        n_probs += (size_t)j->dec[i].n;
        const int32_t b = j->fr.budget[i];
        j->dec[i].state_tokens_kept = j->fr.state_tokens < b ? j->fr.state_tokens : b;
        j->dec[i].truncated = j->fr.state_tokens > b;
    }
    j->res.n = nq;
    j->res.d = j->dec;
    j->res.state_tokens = j->fr.state_tokens;
    if (ns == 0) j->finished = 1;
    *out = j;
    return KILN_OK;
oom:
    free(ord);
    kiln_decide_job_free(j);
    return base_fail(KILN_ERR_NOMEM, "out of memory");
}

/* logits = out(LN(gelu(dense x + b)) * w + b) + b, the optional parts
 * skipped. */
static void apply_head(kiln_decider *d, const decide_head *hd, const float *x, float *logits) {
    const int E = d->m->hp.n_embd;
    const float *in = x;
    if (hd->dense.data) {
        kern_matmul(d->pool, &hd->dense, x, 1, d->h, E, d->mm_scratch);
        if (hd->dense_b) kern_add(d->h, hd->dense_b, E);
        kern_gelu_erf(d->h, E);
        if (hd->norm_w) kern_layernorm(d->h, d->h, hd->norm_w, hd->norm_b, E, d->cfg.norm_eps);
        in = d->h;
    }
    kern_matmul(d->pool, &hd->out, in, 1, logits, hd->n_out, d->mm_scratch);
    if (hd->out_b) kern_add(logits, hd->out_b, hd->n_out);
}

/* Calibrated probabilities of every question from its sequences' logits. */
static void finish(kiln_decide_job *j) {
    const decide_config *c = &j->d->cfg;
    int s = 0; /* the sequences are in question order */
    for (int i = 0; i < j->res.n; i++) {
        kiln_decision *dc = &j->dec[i];
        const decide_type *ty = decide_type_find(c, dc->type);
        const int n = dc->n;
        const float T = ty->n_labels ? ty->temperature : decide_temperature(ty, n);
        double mx = -INFINITY, sum = 0.0;
        float *p = (float *)dc->probs;
        for (int k = 0; k < n; k++) {
            const float l = ty->n_labels ? j->logits[j->logit_off[s] + k] : j->logits[j->logit_off[s + k]];
            p[k] = (float)((double)l / T);
            if (p[k] > mx) mx = p[k];
        }
        dc->best = 0;
        for (int k = 0; k < n; k++) sum += exp((double)p[k] - mx);
        for (int k = 0; k < n; k++) {
            p[k] = (float)(exp((double)p[k] - mx) / sum);
            if (p[k] > p[dc->best]) dc->best = k;
        }
        dc->temperature = T;
        s += ty->n_labels ? 1 : n;
    }
    j->finished = 1;
}

kiln_status kiln_decide_next(kiln_decide_job *j, int32_t *n_left) {
    if (!j) return base_fail(KILN_ERR_INVALID_ARG, "no job");
    kiln_decider *d = j->d;
    const int ns = j->fr.n_seq, E = d->m->hp.n_embd;
    if (j->n_done < ns) {
        int c = 0;
        int64_t sum = 0;
        size_t o = 0;
        while (j->n_done + c < ns && c < DECIDE_MAX_SEQ) {
            const decide_seq *q = &j->fr.seqs[j->order[j->n_done + c]];
            if (c && sum + q->n > d->n_batch) break;
            memcpy(d->run_tok + o, q->tok, (size_t)q->n * sizeof *d->run_tok);
            o += (size_t)q->n;
            sum += q->n;
            d->run_len[c++] = q->n;
        }
        d->m->arch->family->encode(d->ws, d->m, d->run_tok, NULL, d->run_len, c, d->cfg.pooling, d->pooled);
        for (int k = 0; k < c; k++) {
            const int s = j->order[j->n_done + k];
            apply_head(d, &d->cfg.heads[j->fr.seqs[s].head], d->pooled + (size_t)k * E, j->logits + j->logit_off[s]);
        }
        j->n_done += c;
        if (j->n_done == ns) finish(j);
    }
    if (n_left) *n_left = ns - j->n_done;
    return KILN_OK;
}

const kiln_decisions *kiln_decide_result(const kiln_decide_job *j) { return &j->res; }

kiln_status kiln_decide(kiln_decider *d, const kiln_decide_request *r, kiln_decide_job **out) {
    kiln_decide_job *j;
    kiln_status st = kiln_decide_begin(d, r, &j);
    if (st != KILN_OK) {
        *out = NULL;
        return st;
    }
    for (int32_t left = j->fr.n_seq; st == KILN_OK && left > 0;) st = kiln_decide_next(j, &left);
    if (st != KILN_OK) {
        kiln_decide_job_free(j);
        j = NULL;
    }
    *out = j;
    return st;
}
