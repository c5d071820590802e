/* The server's lines on stderr: one per request (method, path, status,
 * model, tokens, milliseconds) and the models' transitions, as text or as
 * one JSON object per line (--log-format json).
 *
 * A request's record is made when its headers arrive, on the connection's
 * thread, which MHD keeps for the whole request: handlers reach it through
 * server_reqlog_current().  The line goes out once, when the generation the
 * request ran is over (before its engine admission is dismissed, so it
 * precedes any UNLOADED or STOPPED that follows from it) or when the
 * connection is done with the request, whichever comes first. */
#include "server/log.h"

#include "server/buf.h"
#include "server/server.h"
#include "server/srv.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct server_reqlog {
    atomic_int refs;
    atomic_int emitted;
    atomic_int held; /* a generation writes the line when it is over */
    int json;
    char method[16];
    char path[256];
    int status;
    char model[256];
    int64_t prompt, gen;
    int has_tokens;
    uint64_t seed;
    int has_seed;
    double t0;
};

static _Thread_local server_reqlog *t_current;

server_reqlog *server_reqlog_begin(const server_srv *s, const char *method, const char *url) {
    server_reqlog *l = calloc(1, sizeof *l);
    if (!l) return NULL;
    atomic_init(&l->refs, 1);
    atomic_init(&l->emitted, 0);
    atomic_init(&l->held, 0);
    l->json = s->cfg.log_json;
    snprintf(l->method, sizeof l->method, "%s", method);
    snprintf(l->path, sizeof l->path, "%s", url);
    l->t0 = server_now();
    return l;
}

void server_reqlog_set_current(server_reqlog *l) { t_current = l; }
server_reqlog *server_reqlog_current(void) { return t_current; }

server_reqlog *server_reqlog_ref(server_reqlog *l) {
    if (l) atomic_fetch_add(&l->refs, 1);
    return l;
}

server_reqlog *server_reqlog_hold(server_reqlog *l) {
    if (l) atomic_store(&l->held, 1);
    return server_reqlog_ref(l);
}

void server_reqlog_done(server_reqlog *l) {
    if (l && !atomic_load(&l->held)) server_reqlog_emit(l);
}

void server_reqlog_put(server_reqlog *l) {
    if (l && atomic_fetch_sub(&l->refs, 1) == 1) free(l);
}

void server_reqlog_status(server_reqlog *l, int status) {
    if (l && !l->status) l->status = status;
}

void server_reqlog_model(server_reqlog *l, const char *model) {
    if (l && model) snprintf(l->model, sizeof l->model, "%s", model);
}

void server_reqlog_tokens(server_reqlog *l, int64_t prompt, int64_t gen) {
    if (!l) return;
    l->prompt = prompt;
    l->gen = gen;
    l->has_tokens = 1;
}

void server_reqlog_seed(server_reqlog *l, uint64_t seed) {
    if (!l) return;
    l->seed = seed;
    l->has_seed = 1;
}

static void iso_now(char *buf, size_t cap) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    gmtime_r(&ts.tv_sec, &tm);
    size_t n = strftime(buf, cap, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(buf + n, cap - n, ".%03ldZ", ts.tv_nsec / 1000000L);
}

void server_reqlog_emit(server_reqlog *l) {
    if (!l || atomic_exchange(&l->emitted, 1)) return;
    const double ms = (server_now() - l->t0) * 1e3;
    if (l->json) {
        json_t *j = json_object();
        char t[40];
        iso_now(t, sizeof t);
        json_object_set_new(j, "time", json_string(t));
        json_object_set_new(j, "method", json_string(l->method));
        json_object_set_new(j, "path", server_jstr(l->path, strlen(l->path)));
        json_object_set_new(j, "status", json_integer(l->status));
        json_object_set_new(j, "model", l->model[0] ? server_jstr(l->model, strlen(l->model)) : json_null());
        json_object_set_new(j, "prompt_tokens", l->has_tokens ? json_integer(l->prompt) : json_null());
        json_object_set_new(j, "completion_tokens", l->has_tokens ? json_integer(l->gen) : json_null());
        if (l->has_seed) json_object_set_new(j, "seed", json_integer((json_int_t)l->seed));
        json_object_set_new(j, "ms", json_real((double)(int64_t)(ms * 10) / 10));
        char *s = json_dumps(j, JSON_COMPACT | JSON_ENSURE_ASCII);
        json_decref(j);
        if (s) fprintf(stderr, "%s\n", s);
        free(s);
    } else {
        char tok[64] = "";
        if (l->has_tokens) snprintf(tok, sizeof tok, " tokens=%lld+%lld", (long long)l->prompt, (long long)l->gen);
        char seed[40] = "";
        if (l->has_seed) snprintf(seed, sizeof seed, " seed=%llu", (unsigned long long)l->seed);
        fprintf(stderr, "kiln serve: %s %s %d%s%s%s%s %.1f ms\n", l->method, l->path, l->status,
                l->model[0] ? " model=" : "", l->model, tok, seed, ms);
    }
}

void server_log_line(int json, const char *msg) {
    if (!json) {
        fprintf(stderr, "kiln serve: %s\n", msg);
        return;
    }
    json_t *j = json_object();
    char t[40];
    iso_now(t, sizeof t);
    json_object_set_new(j, "time", json_string(t));
    json_object_set_new(j, "msg", server_jstr(msg, strlen(msg)));
    char *line = json_dumps(j, JSON_COMPACT | JSON_ENSURE_ASCII);
    json_decref(j);
    if (line) fprintf(stderr, "%s\n", line);
    free(line);
}

void server_logf(const server_srv *s, const char *fmt, ...) {
    if (s->quiet) return;
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    server_log_line(s->cfg.log_json, msg);
}
