/* Ollama endpoints (/api/...) and the embedding endpoints of both APIs. */
#include "server/srv.h"

#include <math.h>
#include <microhttpd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

int ks_oll_error(struct MHD_Connection *c, int status, const char *msg) {
    return ks_error(c, 1, status, NULL, msg, NULL);
}

static void iso(double t, char *buf, size_t cap) {
    time_t s = (time_t)t;
    struct tm tm;
    gmtime_r(&s, &tm);
    strftime(buf, cap, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

/* When a model was last modified, seconds since the epoch: a file's mtime,
 * or the time its store name was bound (0: unknown). */
static double modified_time(ks_srv *s, const char *ref) {
    struct stat st;
    if (stat(ref, &st) == 0 && S_ISREG(st.st_mode)) return (double)st.st_mtime;
    char *txt = NULL;
    double t = 0;
    if (s->store && kiln_store_info(s->store, ref, &txt) == KILN_OK) {
        json_t *j = json_loads(txt, 0, NULL);
        t = (double)json_integer_value(json_object_get(j, "modified"));
        json_decref(j);
    }
    kiln_store_free_string(txt);
    return t;
}

static json_t *tag_entry(const char *name, uint64_t size, const char *digest, double modified, json_t *det) {
    json_t *e = json_object();
    char t[40];
    iso(modified, t, sizeof t);
    json_object_set_new(e, "name", json_string(name));
    json_object_set_new(e, "model", json_string(name));
    json_object_set_new(e, "modified_at", json_string(t));
    json_object_set_new(e, "size", json_integer((json_int_t)size));
    json_object_set_new(e, "digest", json_string(digest ? digest : ""));
    json_object_set_new(e, "details", det);
    return e;
}

static int tags(ks_srv *s, struct MHD_Connection *c) {
    json_t *models = json_array();
    pthread_mutex_lock(&s->mu);
    for (ks_model *r = s->models; r; r = r->next) {
        if (!r->pinned || strcmp(r->name, r->ref) == 0) continue; /* a store name: its store entry below lists it */
        struct stat st;
        const double t = stat(r->ref, &st) == 0 ? (double)st.st_mtime : 0;
        json_array_append_new(models, tag_entry(r->name, r->file_bytes, "", t, ks_model_details(r)));
    }
    pthread_mutex_unlock(&s->mu);
    json_t *arr = ks_store_models(s);
    size_t i;
    json_t *e;
    json_array_foreach(arr, i, e) {
        const char *name = json_string_value(json_object_get(e, "name"));
        if (!name || !*name) continue; /* a pack no name points at is gc's, not a model */
        int dup = 0; /* a -m model of the same name is the one requests reach */
        size_t k;
        json_t *have;
        json_array_foreach(models, k, have) {
            const char *hn = json_string_value(json_object_get(have, "name"));
            size_t hl = strlen(hn);
            dup |= !strcmp(hn, name) || (!strncmp(hn, name, hl) && !strcmp(name + hl, ":latest"));
        }
        if (dup) continue;
        json_t *det = json_object();
        json_object_set_new(det, "format", json_string("gguf"));
        json_object_set(det, "family", json_object_get(e, "arch"));
        json_object_set(det, "quantization_level", json_object_get(e, "quantization"));
        json_array_append_new(models, tag_entry(name, (uint64_t)json_integer_value(json_object_get(e, "size")),
                                                json_string_value(json_object_get(e, "id")),
                                                (double)json_integer_value(json_object_get(e, "modified")), det));
    }
    json_decref(arr);
    json_t *j = json_object();
    json_object_set_new(j, "models", models);
    return ks_send_json(c, 200, j);
}

static int ps(ks_srv *s, struct MHD_Connection *c) {
    json_t *models = json_array();
    pthread_mutex_lock(&s->mu);
    for (ks_model *r = s->models; r; r = r->next) {
        if (r->state == KS_M_READY || r->state == KS_M_UNLOADING) { /* resident until its memory is released */
            json_t *e = tag_entry(r->name, r->weight_bytes, "", 0, ks_model_details(r));
            json_object_del(e, "modified_at"); /* not part of Ollama's /api/ps */
            char t[40];
            double exp = r->keep_alive < 0 ? 4102444800.0 /* 2100: "forever" */
                                           : ks_wall() + r->keep_alive - (r->users ? 0 : ks_now() - r->last_used);
            iso(exp, t, sizeof t);
            json_object_set_new(e, "expires_at", json_string(t));
            json_object_set_new(e, "size_vram", json_integer(0));
            json_object_set_new(e, "context_length", json_integer(r->n_ctx));
            json_array_append_new(models, e);
        }
    }
    pthread_mutex_unlock(&s->mu);
    json_t *j = json_object();
    json_object_set_new(j, "models", models);
    return ks_send_json(c, 200, j);
}

static const char *model_field(json_t *body) {
    const char *m = json_string_value(json_object_get(body, "model"));
    return m ? m : json_string_value(json_object_get(body, "name"));
}

static int show(ks_srv *s, struct MHD_Connection *c, json_t *body) {
    int status;
    char msg[512];
    ks_model *r = ks_model_use(s, model_field(body), KS_TASK_INFO, NULL, &status, msg, sizeof msg);
    if (!r) return ks_oll_error(c, status, msg);
    kiln_model_info info;
    kiln_model_get_info(r->model, &info);
    json_t *j = json_object();
    const char *tmpl = ks_template_text(r); /* the pack's Go template, as Ollama shows it, else the GGUF's */
    json_object_set_new(j, "modelfile", json_string(""));
    json_object_set_new(j, "parameters", json_string(""));
    json_object_set_new(j, "template", json_string(tmpl ? tmpl : ""));
    json_object_set_new(j, "details", ks_model_details(r));
    char when[40];
    iso(modified_time(s, r->ref), when, sizeof when);
    json_object_set_new(j, "modified_at", json_string(when));
    json_t *mi = json_object();
    char key[96];
    json_object_set_new(mi, "general.architecture", json_string(info.arch));
    json_object_set_new(mi, "general.name", json_string(info.name));
    json_object_set_new(mi, "general.parameter_count", json_integer((json_int_t)info.n_params));
    snprintf(key, sizeof key, "%s.context_length", info.arch);
    json_object_set_new(mi, key, json_integer(info.n_ctx_train));
    snprintf(key, sizeof key, "%s.embedding_length", info.arch);
    json_object_set_new(mi, key, json_integer(info.n_embd));
    snprintf(key, sizeof key, "%s.block_count", info.arch);
    json_object_set_new(mi, key, json_integer(info.n_layer));
    json_object_set_new(j, "model_info", mi);
    json_t *caps = json_array();
    if (r->family == KILN_ENGINE_LLM) json_array_append_new(caps, json_string("completion"));
    if (r->family == KILN_ENGINE_LLM || r->family == KILN_ENGINE_EMBEDDING)
        json_array_append_new(caps, json_string("embedding"));
    if (r->family == KILN_ENGINE_RERANK) json_array_append_new(caps, json_string("rerank"));
    if (tmpl && strstr(tmpl, "tools")) json_array_append_new(caps, json_string("tools"));
    if (tmpl && strstr(tmpl, "<think>")) json_array_append_new(caps, json_string("thinking"));
    json_object_set_new(j, "capabilities", caps);
    ks_model_done(r, NAN);
    return ks_send_json(c, 200, j);
}

int ks_oll_format(const json_t *fmt, ks_gen_opts *o, struct MHD_Connection *c, int *rc) {
    if (!fmt || json_is_null(fmt) || (json_is_string(fmt) && !json_string_length(fmt))) return 0;
    if (json_is_string(fmt) && !strcmp(json_string_value(fmt), "json")) {
        o->json_mode = 1;
        return 0;
    }
    char msg[300];
    if (!json_is_object(fmt)) snprintf(msg, sizeof msg, "'format' must be \"json\" or a JSON schema");
    else if (!ks_check_schema(fmt, msg, sizeof msg)) {
        o->json_mode = 1;
        o->schema = fmt;
        return 0;
    }
    *rc = ks_oll_error(c, 400, msg);
    return -1;
}

static int generate(ks_srv *s, struct MHD_Connection *c, json_t *body) {
    ks_gen_opts o;
    int rc = MHD_NO;
    if (ks_parse_opts(c, json_object_get(body, "options"), 1, &o, &rc)) return rc;
    if (ks_oll_format(json_object_get(body, "format"), &o, c, &rc)) return rc;
    double ka = ks_parse_duration(json_object_get(body, "keep_alive"));
    json_t *p = json_object_get(body, "prompt");
    if (p && !json_is_string(p)) return ks_oll_error(c, 400, "'prompt' must be a string");
    if (!p || !json_string_length(p)) {
        /* no prompt: only load (or with keep_alive 0, unload) the model */
        int status;
        char msg[600];
        const char *name = model_field(body);
        double t0 = ks_now(), load_wait = 0;
        json_t *j = json_object();
        if (!isnan(ka) && ka == 0) {
            if (ks_model_unload(s, name, &status, msg, sizeof msg)) {
                json_decref(j);
                return ks_oll_error(c, status, msg);
            }
            json_object_set_new(j, "done_reason", json_string("unload"));
        } else {
            ks_model *r = ks_model_use(s, name, KS_TASK_GENERATE, &load_wait, &status, msg, sizeof msg);
            if (!r) {
                json_decref(j);
                return ks_oll_error(c, status, msg);
            }
            ks_model_done(r, ka);
            json_object_set_new(j, "done_reason", json_string("load"));
            json_object_set_new(j, "load_duration", json_integer((json_int_t)(load_wait * 1e9)));
            json_object_set_new(j, "total_duration", json_integer((json_int_t)((ks_now() - t0) * 1e9)));
        }
        json_object_set_new(j, "model", json_string(name ? name : ""));
        json_object_set_new(j, "response", json_string(""));
        json_object_set_new(j, "done", json_true());
        return ks_send_json(c, 200, j);
    }
    return ks_generate_common(s, c, body, KS_F_OLL_GEN, json_string_value(p), NULL, &o, ka);
}

/* ---- embeddings ---- */

int ks_embed_inputs(ks_model *r, struct MHD_Connection *c, json_t *input, int kind, int dims, int truncate,
                    int ollama, json_t **vectors, int *n_tokens, int *rc) {
    const char *one[1];
    const char **texts = one;
    size_t n = 0;
    if (json_is_string(input)) {
        one[0] = json_string_value(input);
        n = 1;
    } else if (json_is_array(input) && json_array_size(input)) {
        n = json_array_size(input);
        texts = malloc(n * sizeof *texts);
        for (size_t i = 0; texts && i < n; i++) {
            texts[i] = json_string_value(json_array_get(input, i));
            if (!texts[i]) {
                free(texts);
                *rc = ollama ? ks_oll_error(c, 400, "'input' must hold strings")
                             : ks_send_error(c, 400, "invalid_request_error", "'input' must hold strings", "input");
                return -1;
            }
        }
    }
    if (!n || !texts) {
        *rc = ollama ? ks_oll_error(c, 400, "'input' must be a string or a non-empty array of strings")
                     : ks_send_error(c, 400, "invalid_request_error",
                                     "'input' must be a string or a non-empty array of strings", "input");
        return -1;
    }
    char msg[600] = "";
    int status = 0;
    kiln_embed_job *job = NULL;
    /* through the model's engine: a query goes ahead of queued documents */
    kiln_embed_request req = {(int32_t)n, texts, NULL, kind, dims, truncate, NULL};
    kiln_status st = kiln_engine_embed(r->eng, &req, NULL, &job);
    if (st != KILN_OK) {
        const int bad = st == KILN_ERR_CONTEXT_FULL || st == KILN_ERR_INVALID_ARG || st == KILN_ERR_UNSUPPORTED;
        snprintf(msg, sizeof msg, "%s%s", st == KILN_ERR_UNSUPPORTED ? "this model cannot embed: " : "",
                 kiln_last_error());
        status = bad ? 400 : st == KILN_ERR_STATE ? 503 : 500;
    }
    if (status) {
        if (texts != one) free(texts);
        *rc = ollama ? ks_oll_error(c, status, msg)
                     : ks_send_error(c, status, status == 400 ? "invalid_request_error" : "server_error", msg, "input");
        return -1;
    }
    const kiln_embeddings *e = kiln_embed_result(job);
    json_t *vs = json_array();
    *n_tokens = 0;
    for (int32_t i = 0; i < e->n; i++) {
        json_t *v = json_array();
        for (int32_t k = 0; k < e->dim; k++) json_array_append_new(v, json_real(e->vectors[(size_t)i * e->dim + k]));
        json_array_append_new(vs, v);
        *n_tokens += e->n_tokens[i];
    }
    ks_reqlog_tokens(ks_reqlog_current(), *n_tokens, 0);
    kiln_embed_job_free(job);
    if (texts != one) free(texts);
    *vectors = vs;
    return 0;
}

static int dims_of(json_t *body, struct MHD_Connection *c, int ollama, int *dims, int *rc) {
    json_t *d = json_object_get(body, "dimensions");
    *dims = 0;
    if (!d || json_is_null(d)) return 0;
    if (!json_is_integer(d) || json_integer_value(d) < 1) {
        *rc = ollama ? ks_oll_error(c, 400, "'dimensions' must be a positive integer")
                     : ks_send_error(c, 400, "invalid_request_error", "'dimensions' must be a positive integer",
                                     "dimensions");
        return -1;
    }
    *dims = (int)json_integer_value(d);
    return 0;
}

static const char k_b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/* Little-endian float32 bytes, base64 (OpenAI's encoding_format). */
static json_t *b64_floats(json_t *v) {
    size_t n = json_array_size(v), nb = n * 4;
    unsigned char *raw = malloc(nb ? nb : 1);
    char *out = malloc((nb + 2) / 3 * 4 + 1);
    if (!raw || !out) {
        free(raw);
        free(out);
        return json_string("");
    }
    for (size_t i = 0; i < n; i++) {
        float f = (float)json_real_value(json_array_get(v, i));
        memcpy(raw + i * 4, &f, 4);
    }
    size_t o = 0;
    for (size_t i = 0; i < nb; i += 3) {
        uint32_t x = (uint32_t)raw[i] << 16 | (i + 1 < nb ? (uint32_t)raw[i + 1] << 8 : 0) | (i + 2 < nb ? raw[i + 2] : 0);
        out[o++] = k_b64[x >> 18 & 63];
        out[o++] = k_b64[x >> 12 & 63];
        out[o++] = i + 1 < nb ? k_b64[x >> 6 & 63] : '=';
        out[o++] = i + 2 < nb ? k_b64[x & 63] : '=';
    }
    out[o] = 0;
    json_t *s = json_string(out);
    free(raw);
    free(out);
    return s;
}

static ks_model *embed_model(ks_srv *s, struct MHD_Connection *c, json_t *body, int ollama, double *load_wait,
                             int *rc) {
    int status;
    char msg[600];
    ks_model *r = ks_model_use(s, json_string_value(json_object_get(body, "model")), KS_TASK_EMBED, load_wait,
                               &status, msg, sizeof msg);
    ks_reqlog_model(ks_reqlog_current(), r ? r->name : json_string_value(json_object_get(body, "model")));
    if (!r) {
        const char *type = status == 404 ? "not_found_error" : status == 400 ? "invalid_request_error"
                           : status == 503 ? "unavailable_error" : "server_error";
        *rc = ollama ? ks_oll_error(c, status, msg) : ks_send_error(c, status, type, msg, "model");
        return NULL;
    }
    return r;
}

/* Whether inputs are queries or documents: "input_type" (as the embedding
 * APIs of Cohere and Voyage name it; "search_query" too), documents when
 * absent.  A query gets the model's query prefix and goes ahead of queued
 * documents. */
static int input_kind(json_t *body, struct MHD_Connection *c, int ollama, int *kind, int *rc) {
    json_t *t = json_object_get(body, "input_type");
    *kind = KILN_EMBED_DOCUMENT;
    if (!t || json_is_null(t)) return 0;
    const char *v = json_string_value(t);
    if (v && (!strcmp(v, "query") || !strcmp(v, "search_query"))) *kind = KILN_EMBED_QUERY;
    else if (!v || (strcmp(v, "document") && strcmp(v, "search_document"))) {
        const char *msg = "'input_type' must be \"query\" or \"document\"";
        *rc = ollama ? ks_oll_error(c, 400, msg) : ks_send_error(c, 400, "invalid_request_error", msg, "input_type");
        return -1;
    }
    return 0;
}

int ks_oai_embeddings(ks_srv *s, struct MHD_Connection *c, json_t *body) {
    int rc = MHD_NO, dims, ntok, kind;
    if (dims_of(body, c, 0, &dims, &rc) || input_kind(body, c, 0, &kind, &rc)) return rc;
    const char *enc = json_string_value(json_object_get(body, "encoding_format"));
    if (enc && strcmp(enc, "float") && strcmp(enc, "base64"))
        return ks_send_error(c, 400, "invalid_request_error", "'encoding_format' must be float or base64",
                             "encoding_format");
    ks_model *r = embed_model(s, c, body, 0, NULL, &rc);
    if (!r) return rc;
    json_t *vs;
    if (ks_embed_inputs(r, c, json_object_get(body, "input"), kind, dims, 0, 0, &vs, &ntok, &rc)) {
        ks_model_done(r, NAN);
        return rc;
    }
    json_t *data = json_array();
    size_t i;
    json_t *v;
    json_array_foreach(vs, i, v) {
        json_t *e = json_object();
        json_object_set_new(e, "object", json_string("embedding"));
        json_object_set_new(e, "index", json_integer((json_int_t)i));
        json_object_set_new(e, "embedding", enc && !strcmp(enc, "base64") ? b64_floats(v) : json_incref(v));
        json_array_append_new(data, e);
    }
    json_decref(vs);
    json_t *j = json_object();
    json_object_set_new(j, "object", json_string("list"));
    json_object_set_new(j, "data", data);
    json_object_set_new(j, "model", json_string(r->name));
    json_object_set_new(j, "usage", json_pack("{s:i,s:i}", "prompt_tokens", ntok, "total_tokens", ntok));
    ks_model_done(r, NAN);
    return ks_send_json(c, 200, j);
}

/* legacy: 1 for /api/embeddings ({"prompt"} in, {"embedding": [...]} out) */
static int embed(ks_srv *s, struct MHD_Connection *c, json_t *body, int legacy) {
    int rc = MHD_NO, dims, ntok, kind;
    if (dims_of(body, c, 1, &dims, &rc) || input_kind(body, c, 1, &kind, &rc)) return rc;
    double t0 = ks_now(), load_wait = 0;
    ks_model *r = embed_model(s, c, body, 1, &load_wait, &rc);
    if (!r) return rc;
    json_t *vs;
    json_t *tr = json_object_get(body, "truncate");
    const double ka = ks_parse_duration(json_object_get(body, "keep_alive"));
    if (ks_embed_inputs(r, c, json_object_get(body, "input"), kind, dims, !json_is_false(tr), 1, &vs, &ntok, &rc)) {
        ks_model_done(r, ka);
        return rc;
    }
    json_t *j = json_object();
    if (legacy) {
        json_object_set(j, "embedding", json_array_get(vs, 0));
        json_decref(vs);
        ks_model_done(r, ka);
        return ks_send_json(c, 200, j);
    }
    json_object_set_new(j, "model", json_string(r->name));
    json_object_set_new(j, "embeddings", vs);
    json_object_set_new(j, "total_duration", json_integer((json_int_t)((ks_now() - t0) * 1e9)));
    json_object_set_new(j, "load_duration", json_integer((json_int_t)(load_wait * 1e9)));
    json_object_set_new(j, "prompt_eval_count", json_integer(ntok));
    ks_model_done(r, ka);
    return ks_send_json(c, 200, j);
}

/* ---- store ---- */

typedef struct pull_job {
    ks_srv *s;
    char url[2048], name[256];
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    ks_buf events;            /* NDJSON lines not yet sent */
    int done;
    volatile int cancel;
    kiln_store_source_result source; /* how it ended at its source */
} pull_job;

static void pull_progress(const kiln_store_progress *p, void *user) {
    pull_job *j = user;
    char line[1024];
    int n = kiln_store_progress_json(p, line, sizeof line);
    if (n <= 0 || n >= (int)sizeof line) return;
    pthread_mutex_lock(&j->mu);
    ks_buf_put(&j->events, line, (size_t)n);
    ks_buf_puts(&j->events, "\n");
    pthread_cond_signal(&j->cv);
    pthread_mutex_unlock(&j->mu);
}

static void *pull_main(void *arg) {
    pull_job *j = arg;
    kiln_store_pull_params pp = {0};
    pp.progress = pull_progress;
    pp.user = j;
    pp.cancel = &j->cancel;
    kiln_status st = kiln_store_pull(j->s->store, j->url, j->name[0] ? j->name : NULL, NULL, &pp, NULL);
    j->source = kiln_store_last_source_result(); /* this thread's */
    json_t *e = json_object();
    if (st == KILN_OK) json_object_set_new(e, "status", json_string("success"));
    else json_object_set_new(e, "error", json_string(kiln_last_error()));
    pthread_mutex_lock(&j->mu);
    ks_buf_json(&j->events, e);
    ks_buf_puts(&j->events, "\n");
    j->done = 1;
    pthread_cond_signal(&j->cv);
    pthread_mutex_unlock(&j->mu);
    json_decref(e);
    return NULL;
}

static int pull_fill(ks_stream *st) {
    pull_job *j = st->user;
    pthread_mutex_lock(&j->mu);
    if (!j->events.len && !j->done) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_sec += 1;
        pthread_cond_timedwait(&j->cv, &j->mu, &ts);
    }
    ks_buf_put(&st->out, j->events.p ? j->events.p : "", j->events.len);
    j->events.len = 0;
    int over = j->done;
    pthread_mutex_unlock(&j->mu);
    return over;
}

static void pull_cleanup(ks_stream *st) {
    pull_job *j = st->user;
    j->cancel = 1;
    pthread_join(j->thread, NULL);
    ks_buf_free(&j->events);
    pthread_mutex_destroy(&j->mu);
    pthread_cond_destroy(&j->cv);
    free(j);
}

/* {"model": REF} as Ollama takes it: REF is a registry name (qwen3:0.6b,
 * HOST/NS/MODEL:TAG), a Hugging Face reference (hf.co/ORG/REPO[:QUANT]) or
 * a URL; the name is the reference (a URL's: its file name), or "model"
 * with kiln's "url" (a GGUF URL or a pack manifest). */
static int pull(ks_srv *s, struct MHD_Connection *c, json_t *body) {
    if (!s->store) return ks_oll_error(c, 503, "the model store is not available");
    const char *model = model_field(body);
    const char *url = json_string_value(json_object_get(body, "url"));
    if (!url && model && *model) url = model;
    if (!url) return ks_oll_error(c, 400, "give 'model': a registry name (qwen3:0.6b), hf.co/ORG/REPO[:QUANT] or a URL");
    pull_job *j = calloc(1, sizeof *j);
    if (!j) return ks_oll_error(c, 500, "out of memory");
    j->s = s;
    snprintf(j->url, sizeof j->url, "%s", url);
    if (model && model != url) snprintf(j->name, sizeof j->name, "%s", model);
    else if (!strstr(url, "://")) j->name[0] = 0; /* a reference names itself */
    else {
        const char *b = strrchr(url, '/');
        snprintf(j->name, sizeof j->name, "%s", b ? b + 1 : url);
        char *dot = strstr(j->name, ".gguf");
        if (dot) *dot = 0;
    }
    pthread_mutex_init(&j->mu, NULL);
    pthread_cond_init(&j->cv, NULL);
    if (pthread_create(&j->thread, NULL, pull_main, j)) {
        free(j);
        return ks_oll_error(c, 500, "cannot start the download");
    }
    if (json_is_false(json_object_get(body, "stream"))) {
        pthread_join(j->thread, NULL);
        json_t *last = NULL;
        char *lines = j->events.p, *nl;
        while (lines && (nl = strrchr(lines, '\n')) && nl[1] == 0) {
            *nl = 0;
            char *prev = strrchr(lines, '\n');
            last = json_loads(prev ? prev + 1 : lines, 0, NULL);
            break;
        }
        kiln_store_source_result src = j->source;
        ks_buf_free(&j->events);
        pthread_mutex_destroy(&j->mu);
        pthread_cond_destroy(&j->cv);
        free(j);
        if (!last) return ks_oll_error(c, 500, "pull failed");
        /* a source's answer in HTTP's words */
        int code = json_object_get(last, "error") == NULL    ? 200
                   : src == KILN_SOURCE_AUTH_REQUIRED        ? 401
                   : src == KILN_SOURCE_GATED || src == KILN_SOURCE_DENIED ? 403
                   : src == KILN_SOURCE_NOT_FOUND            ? 404
                   : src == KILN_SOURCE_TRANSIENT || src == KILN_SOURCE_UNVERIFIED ? 502
                                                             : 500;
        return ks_send_json(c, code, last);
    }
    ks_stream *st = calloc(1, sizeof *st);
    if (!st) {
        j->cancel = 1;
        pthread_join(j->thread, NULL);
        free(j);
        return ks_oll_error(c, 500, "out of memory");
    }
    st->fill = pull_fill;
    st->cleanup = pull_cleanup;
    st->user = j;
    return ks_send_stream(c, "application/x-ndjson", st);
}

static int store_status(struct MHD_Connection *c, kiln_status st) {
    if (st == KILN_OK) return ks_send_text(c, 200, "application/json", "{}", 2, 1);
    int code = st == KILN_ERR_NOT_FOUND ? 404 : st == KILN_ERR_STATE ? 409 : st == KILN_ERR_INVALID_ARG ? 400 : 500;
    return ks_oll_error(c, code, kiln_last_error());
}

int ks_oll_route(ks_srv *s, struct MHD_Connection *c, const char *method, const char *url, json_t *body) {
    int get = !strcmp(method, "GET") || !strcmp(method, "HEAD"), post = !strcmp(method, "POST");
    if (get && !strcmp(url, "/api/version")) {
        json_t *j = json_object();
        json_object_set_new(j, "version", json_string(KILN_VERSION));
        return ks_send_json(c, 200, j);
    }
    if (get && !strcmp(url, "/api/tags")) return tags(s, c);
    if (get && !strcmp(url, "/api/ps")) return ps(s, c);
    if (!strcmp(url, "/api/version") || !strcmp(url, "/api/tags") || !strcmp(url, "/api/ps"))
        return ks_oll_error(c, 405, "method not allowed; use GET");
    if (!post && strcmp(method, "DELETE")) return ks_oll_error(c, 405, "method not allowed");
    if (!body) return ks_oll_error(c, 400, "the request has no JSON body");
    if (post && !strcmp(url, "/api/show")) return show(s, c, body);
    if (post && !strcmp(url, "/api/generate")) return generate(s, c, body);
    if (post && !strcmp(url, "/api/chat")) return ks_chat_common(s, c, body, KS_F_OLL_CHAT);
    if (post && !strcmp(url, "/api/embed")) return embed(s, c, body, 0);
    if (post && !strcmp(url, "/api/embeddings")) {
        json_object_set(body, "input", json_object_get(body, "prompt"));
        return embed(s, c, body, 1);
    }
    if (post && !strcmp(url, "/api/pull")) return pull(s, c, body);
    if (!s->store) return ks_oll_error(c, 503, "the model store is not available");
    if (!strcmp(method, "DELETE") && !strcmp(url, "/api/delete")) {
        const char *m = model_field(body);
        if (!m) return ks_oll_error(c, 400, "'model' is required");
        return store_status(c, kiln_store_remove(s->store, m));
    }
    if (post && !strcmp(url, "/api/copy")) {
        const char *src = json_string_value(json_object_get(body, "source"));
        const char *dst = json_string_value(json_object_get(body, "destination"));
        if (!src || !dst) return ks_oll_error(c, 400, "'source' and 'destination' are required");
        return store_status(c, kiln_store_alias(s->store, src, dst));
    }
    return ks_oll_error(c, 404, "no such endpoint");
}
