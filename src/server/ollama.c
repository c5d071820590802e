/* Ollama's endpoints (/api/...): its route table and the model and store
 * endpoints; generation and embeddings are generate.c's and embed.c's. */
#include "server/api.h"
#include "server/buf.h"
#include "server/embed.h"
#include "server/generate.h"
#include "server/media.h"
#include "server/models.h"
#include "server/opts.h"
#include "server/prompt.h"
#include "server/reply.h"
#include "server/run.h"
#include "server/srv.h"

#include <math.h>
#include <microhttpd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

static void iso(double t, char *buf, size_t cap) {
    time_t s = (time_t)t;
    struct tm tm;
    gmtime_r(&s, &tm);
    strftime(buf, cap, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

/* When a model was last modified, seconds since the epoch: a file's mtime,
 * or the time its store name was bound (0: unknown). */
static double modified_time(server_srv *s, const char *ref) {
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

static int tags(server_srv *s, struct MHD_Connection *c, json_t *body) {
    json_t *models = json_array();
    pthread_mutex_lock(&s->mu);
    for (server_model *r = s->models; r; r = r->next) {
        if (!r->pinned || strcmp(r->name, r->ref) == 0) continue; /* a store name: its store entry below lists it */
        struct stat st;
        const double t = stat(r->ref, &st) == 0 ? (double)st.st_mtime : 0;
        json_array_append_new(models, tag_entry(r->name, r->file_bytes, "", t, server_model_details(r)));
    }
    pthread_mutex_unlock(&s->mu);
    json_t *arr = server_store_models(s);
    size_t i;
    json_t *e;
    json_array_foreach(arr, i, e) {
        const char *name = json_string_value(json_object_get(e, "name"));
        if (!name || !*name) continue; /* a pack no name points at is gc's, not a model */
        int dup = 0;                   /* a -m model of the same name is the one requests reach */
        size_t k;
        json_t *have;
        json_array_foreach(models, k, have) dup |=
            server_same_model_name(json_string_value(json_object_get(have, "name")), name);
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
    return server_send_json(c, 200, j);
}

static int ps(server_srv *s, struct MHD_Connection *c, json_t *body) {
    json_t *models = json_array();
    pthread_mutex_lock(&s->mu);
    for (server_model *r = s->models; r; r = r->next) {
        if (r->state == SERVER_M_READY || r->state == SERVER_M_UNLOADING) { /* resident until its memory is released */
            json_t *e = tag_entry(r->name, r->weight_bytes, r->digest, 0, server_model_details(r));
            json_object_del(e, "modified_at"); /* not part of Ollama's /api/ps */
            char t[40];
            double exp = r->keep_alive < 0
                             ? 4102444800.0 /* 2100: "forever" */
                             : server_wall() + r->keep_alive - (r->users ? 0 : server_now() - r->last_used);
            iso(exp, t, sizeof t);
            json_object_set_new(e, "expires_at", json_string(t));
            json_object_set_new(e, "size_vram", json_integer((json_int_t)r->vram_bytes));
            json_object_set_new(e, "backend", json_string(r->backend ? r->backend : "cpu")); /* kiln's */
            json_object_set_new(e, "context_length", json_integer(r->n_ctx));
            json_array_append_new(models, e);
        }
    }
    pthread_mutex_unlock(&s->mu);
    json_t *j = json_object();
    json_object_set_new(j, "models", models);
    return server_send_json(c, 200, j);
}

static const char *model_field(json_t *body) {
    const char *m = json_string_value(json_object_get(body, "model"));
    return m ? m : json_string_value(json_object_get(body, "name"));
}

static int show(server_srv *s, struct MHD_Connection *c, json_t *body) {
    int status;
    char msg[512];
    server_model *r = server_model_use(s, model_field(body), SERVER_TASK_INFO, NULL, &status, msg, sizeof msg);
    if (!r) return server_oll_error(c, status, msg);
    kiln_model_info info;
    kiln_model_get_info(r->model, &info);
    json_t *j = json_object();
    const char *tmpl = server_template_text(r); /* the pack's Go template, as Ollama shows it, else the GGUF's */
    json_object_set_new(j, "modelfile", json_string(""));
    json_object_set_new(j, "parameters", json_string(""));
    json_object_set_new(j, "template", json_string(tmpl ? tmpl : ""));
    json_object_set_new(j, "details", server_model_details(r));
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
    if (server_media_model_ok(r)) json_array_append_new(caps, json_string("vision"));
    json_object_set_new(j, "capabilities", caps);
    server_model_done(r, NAN);
    return server_send_json(c, 200, j);
}

static int generate(server_srv *s, struct MHD_Connection *c, json_t *body) {
    server_gen_opts o;
    int rc = MHD_NO;
    if (server_parse_opts(c, json_object_get(body, "options"), 1, &o, &rc)) return rc;
    if (server_oll_format(json_object_get(body, "format"), &o, c, &rc)) return rc;
    double ka = server_parse_duration(json_object_get(body, "keep_alive"));
    json_t *p = json_object_get(body, "prompt");
    if (p && !json_is_string(p)) return server_oll_error(c, 400, "'prompt' must be a string");
    if (!p || !json_string_length(p)) {
        /* no prompt: only load (or with keep_alive 0, unload) the model */
        int status;
        char msg[600];
        const char *name = model_field(body);
        double t0 = server_now(), load_wait = 0;
        json_t *j = json_object();
        if (!isnan(ka) && ka == 0) {
            if (server_model_unload(s, name, &status, msg, sizeof msg)) {
                json_decref(j);
                return server_oll_error(c, status, msg);
            }
            json_object_set_new(j, "done_reason", json_string("unload"));
        } else {
            int32_t num_ctx = 0;
            if (server_num_ctx(json_object_get(body, "options"), &num_ctx)) {
                json_decref(j);
                return server_oll_error(c, 400, "'num_ctx' must be an integer of 1 to 16777216 tokens");
            }
            server_model *r =
                server_model_use_ctx(s, name, SERVER_TASK_GENERATE, num_ctx, &load_wait, &status, msg, sizeof msg);
            if (!r) {
                json_decref(j);
                return server_oll_error(c, status, msg);
            }
            server_model_done(r, ka);
            json_object_set_new(j, "done_reason", json_string("load"));
            json_object_set_new(j, "load_duration", json_integer((json_int_t)(load_wait * 1e9)));
            json_object_set_new(j, "total_duration", json_integer((json_int_t)((server_now() - t0) * 1e9)));
        }
        json_object_set_new(j, "model", json_string(name ? name : ""));
        json_object_set_new(j, "response", json_string(""));
        json_object_set_new(j, "done", json_true());
        return server_send_json(c, 200, j);
    }
    return server_generate_common(s, c, body, SERVER_F_OLL_GEN, json_string_value(p), NULL, &o, ka);
}

/* ---- store ---- */

typedef struct pull_job {
    server_srv *s;
    char url[2048], name[256];
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    server_buf events; /* NDJSON lines not yet sent */
    int done;
    volatile int cancel;
    kiln_store_source_result source; /* how it ended at its source */
    kiln_status st;                  /* the pull's, once done */
} pull_job;

static void pull_progress(const kiln_store_progress *p, void *user) {
    pull_job *j = user;
    char line[1024];
    int n = kiln_store_progress_json(p, line, sizeof line);
    if (n <= 0 || n >= (int)sizeof line) return;
    pthread_mutex_lock(&j->mu);
    server_buf_put(&j->events, line, (size_t)n);
    server_buf_puts(&j->events, "\n");
    pthread_cond_signal(&j->cv);
    pthread_mutex_unlock(&j->mu);
}

static void *pull_main(void *arg) {
    pull_job *j = arg;
    kiln_store_pull_params pp = {0};
    pp.progress = pull_progress;
    pp.user = j;
    pp.cancel = &j->cancel;
    /* a built-in name (whisper:base.en) comes from its default source */
    kiln_status st = kiln_builtin_find(j->url) && !j->name[0]
                         ? kiln_builtin_pull(j->s->store, j->url, NULL, &pp, NULL)
                         : kiln_store_pull(j->s->store, j->url, j->name[0] ? j->name : NULL, NULL, &pp, NULL);
    j->source = kiln_store_last_source_result(); /* this thread's */
    j->st = st;
    json_t *e = json_object();
    if (st == KILN_OK)
        json_object_set_new(e, "status", json_string("success"));
    else
        json_object_set_new(e, "error", json_string(kiln_last_error()));
    pthread_mutex_lock(&j->mu);
    server_buf_json(&j->events, e);
    server_buf_puts(&j->events, "\n");
    j->done = 1;
    pthread_cond_signal(&j->cv);
    pthread_mutex_unlock(&j->mu);
    json_decref(e);
    return NULL;
}

static int pull_fill(server_stream *st) {
    pull_job *j = st->user;
    pthread_mutex_lock(&j->mu);
    if (!j->events.len && !j->done) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_sec += 1;
        pthread_cond_timedwait(&j->cv, &j->mu, &ts);
    }
    server_buf_put(&st->out, j->events.p ? j->events.p : "", j->events.len);
    j->events.len = 0;
    int over = j->done;
    pthread_mutex_unlock(&j->mu);
    return over;
}

static void pull_cleanup(server_stream *st) {
    pull_job *j = st->user;
    j->cancel = 1;
    pthread_join(j->thread, NULL);
    server_buf_free(&j->events);
    pthread_mutex_destroy(&j->mu);
    pthread_cond_destroy(&j->cv);
    free(j);
}

/* {"model": REF} as Ollama takes it: REF is a registry name (qwen3:0.6b,
 * HOST/NS/MODEL:TAG), a Hugging Face reference (hf.co/ORG/REPO[:QUANT]) or
 * a URL; the name is the reference (a URL's: its file name), or "model"
 * with kiln's "url" (a GGUF URL or a pack manifest). */
static int pull(server_srv *s, struct MHD_Connection *c, json_t *body) {
    if (!s->store) return server_oll_error(c, 503, "the model store is not available");
    const char *model = model_field(body);
    const char *url = json_string_value(json_object_get(body, "url"));
    if (!url && model && *model) url = model;
    if (!url)
        return server_oll_error(c, 400, "give 'model': a registry name (qwen3:0.6b), hf.co/ORG/REPO[:QUANT] or a URL");
    pull_job *j = calloc(1, sizeof *j);
    if (!j) return server_oll_error(c, 500, "out of memory");
    j->s = s;
    snprintf(j->url, sizeof j->url, "%s", url);
    if (model && model != url)
        snprintf(j->name, sizeof j->name, "%s", model);
    else if (!strstr(url, "://"))
        j->name[0] = 0; /* a reference names itself */
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
        return server_oll_error(c, 500, "cannot start the download");
    }
    /* a reference the store refuses as written fails at once (before any
     * event): a 400, as Ollama answers an invalid name, not a stream */
    int refused = 0;
    if (!json_is_false(json_object_get(body, "stream"))) {
        const double until = server_now() + 1;
        pthread_mutex_lock(&j->mu);
        while (!j->done && !j->events.len && server_now() < until) {
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_nsec += 50000000L;
            if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
            pthread_cond_timedwait(&j->cv, &j->mu, &ts);
        }
        refused = j->done && j->st == KILN_ERR_INVALID_ARG;
        pthread_mutex_unlock(&j->mu);
    }
    if (refused || json_is_false(json_object_get(body, "stream"))) {
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
        const kiln_status pst = j->st;
        server_buf_free(&j->events);
        pthread_mutex_destroy(&j->mu);
        pthread_cond_destroy(&j->cv);
        free(j);
        if (!last) return server_oll_error(c, 500, "pull failed");
        /* a source's answer in HTTP's words */
        int code = json_object_get(last, "error") == NULL                          ? 200
                   : pst == KILN_ERR_INVALID_ARG                                   ? 400 /* the reference */
                   : src == KILN_SOURCE_AUTH_REQUIRED                              ? 401
                   : src == KILN_SOURCE_GATED || src == KILN_SOURCE_DENIED         ? 403
                   : src == KILN_SOURCE_NOT_FOUND                                  ? 404
                   : src == KILN_SOURCE_TRANSIENT || src == KILN_SOURCE_UNVERIFIED ? 502
                                                                                   : 500;
        return server_send_json(c, code, last);
    }
    server_stream *st = calloc(1, sizeof *st);
    if (!st) {
        j->cancel = 1;
        pthread_join(j->thread, NULL);
        free(j);
        return server_oll_error(c, 500, "out of memory");
    }
    st->fill = pull_fill;
    st->cleanup = pull_cleanup;
    st->user = j;
    return server_send_stream(c, "application/x-ndjson", st);
}

static int store_status(struct MHD_Connection *c, kiln_status st) {
    if (st == KILN_OK) return server_send_text(c, 200, "application/json", "{}", 2, 1);
    int code = st == KILN_ERR_NOT_FOUND ? 404 : st == KILN_ERR_STATE ? 409 : st == KILN_ERR_INVALID_ARG ? 400 : 500;
    return server_oll_error(c, code, kiln_last_error());
}

/* The Ollama version kiln answers as: clients that check the server's
 * version (for features such as tools, thinking or structured output)
 * accept this one; kiln's own version is beside it. */
#define SERVER_OLLAMA_VERSION "0.12.0"

static int version(server_srv *s, struct MHD_Connection *c, json_t *body) {
    json_t *j = json_object();
    json_object_set_new(j, "version", json_string(SERVER_OLLAMA_VERSION));
    json_object_set_new(j, "kiln_version", json_string(KILN_VERSION));
    return server_send_json(c, 200, j);
}

static int chat(server_srv *s, struct MHD_Connection *c, json_t *body) {
    return server_chat_common(s, c, body, SERVER_F_OLL_CHAT);
}

static int embed(server_srv *s, struct MHD_Connection *c, json_t *body) { return server_embed_ollama(s, c, body, 0); }

/* the older form: "prompt" for "input", one vector as "embedding" */
static int embeddings(server_srv *s, struct MHD_Connection *c, json_t *body) {
    json_object_set(body, "input", json_object_get(body, "prompt"));
    return server_embed_ollama(s, c, body, 1);
}

static int delete_model(server_srv *s, struct MHD_Connection *c, json_t *body) {
    if (!s->store) return server_oll_error(c, 503, "the model store is not available");
    const char *m = model_field(body);
    if (!m) return server_oll_error(c, 400, "'model' is required");
    return store_status(c, kiln_store_remove(s->store, m));
}

static int copy(server_srv *s, struct MHD_Connection *c, json_t *body) {
    if (!s->store) return server_oll_error(c, 503, "the model store is not available");
    const char *src = json_string_value(json_object_get(body, "source"));
    const char *dst = json_string_value(json_object_get(body, "destination"));
    if (!src || !dst) return server_oll_error(c, 400, "'source' and 'destination' are required");
    return store_status(c, kiln_store_alias(s->store, src, dst));
}

static const server_route routes[] = {
    {"GET", "/api/version", version, NULL},
    {"GET", "/api/tags", tags, NULL},
    {"GET", "/api/ps", ps, NULL},
    {"POST", "/api/show", show, NULL},
    {"POST", "/api/generate", generate, NULL},
    {"POST", "/api/chat", chat, NULL},
    {"POST", "/api/embed", embed, NULL},
    {"POST", "/api/embeddings", embeddings, NULL},
    {"POST", "/api/pull", pull, NULL},
    {"DELETE", "/api/delete", delete_model, NULL},
    {"POST", "/api/copy", copy, NULL},
};

/* Every answer here is in Ollama's shape: a known path asked with another
 * method is a 405 with Allow, a POST or DELETE needs a JSON body. */
int server_oll_route(server_srv *s, struct MHD_Connection *c, const char *method, const char *url, json_t *body) {
    const int get = !strcmp(method, "GET") || !strcmp(method, "HEAD");
    const server_route *allowed = NULL;
    for (size_t i = 0; i < sizeof routes / sizeof *routes; i++) {
        const server_route *rt = &routes[i];
        if (strcmp(url, rt->path)) continue;
        const int want_get = !strcmp(rt->method, "GET");
        if (!(want_get ? get : !strcmp(method, rt->method))) {
            allowed = rt;
            continue;
        }
        if (!want_get && !body) return server_oll_error(c, 400, "the request has no JSON body");
        return rt->json(s, c, body);
    }
    if (allowed) {
        const char *allow = !strcmp(allowed->method, "GET") ? "GET, HEAD" : allowed->method;
        char msg[64];
        snprintf(msg, sizeof msg, "method not allowed; use %s", allow);
        return server_send_error_allow(c, 405, server_error_body(SERVER_API_OLLAMA, NULL, msg, NULL), allow);
    }
    return server_oll_error(c, 404, "no such endpoint");
}
