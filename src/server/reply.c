/* Responses: JSON, text, errors in each API's shape (one table), streams,
 * and a watch on the client. */
#define _GNU_SOURCE /* POLLRDHUP */
#include "server/reply.h"

#include "server/buf.h"
#include "server/log.h"
#include "server/metrics.h"

#include <microhttpd.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- responses ---- */

/* Every response to a request that carries an Origin names it back: the
 * handler refused disallowed origins before any response was made. */
int server_reply(struct MHD_Connection *c, int status, struct MHD_Response *r) {
    if (!r) return MHD_NO;
    const char *origin = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Origin");
    if (origin) {
        MHD_add_response_header(r, "Access-Control-Allow-Origin", origin);
        MHD_add_response_header(r, "Vary", "Origin");
    }
    return server_reply_bare(c, status, r);
}

int server_reply_bare(struct MHD_Connection *c, int status, struct MHD_Response *r) {
    if (!r) return MHD_NO;
    server_metrics_request(status);
    server_reqlog_status(server_reqlog_current(), status);
    int rc = MHD_queue_response(c, (unsigned)status, r);
    MHD_destroy_response(r);
    return rc;
}

int server_send_text(struct MHD_Connection *c, int status, const char *ctype, const char *body, size_t len, int copy) {
    struct MHD_Response *r =
        MHD_create_response_from_buffer(len, (void *)body, copy ? MHD_RESPMEM_MUST_COPY : MHD_RESPMEM_MUST_FREE);
    if (!r) return MHD_NO;
    MHD_add_response_header(r, "Content-Type", ctype);
    return server_reply(c, status, r);
}

int server_send_json(struct MHD_Connection *c, int status, json_t *j) {
    char *s = json_dumps(j, JSON_COMPACT | JSON_ENSURE_ASCII);
    json_decref(j);
    if (!s) return server_send_text(c, 500, "text/plain", "out of memory", 13, 1);
    return server_send_text(c, status, "application/json", s, strlen(s), 0);
}

/* ---- errors, in each API's shape ---- */

static json_t *openai_error(const char *type, const char *msg, const char *param) {
    json_t *e = json_object();
    json_object_set_new(e, "message", json_string(msg));
    json_object_set_new(e, "type", json_string(type ? type : "server_error"));
    json_object_set_new(e, "param", param ? json_string(param) : json_null());
    json_object_set_new(e, "code", json_null());
    json_t *root = json_object();
    json_object_set_new(root, "error", e);
    return root;
}

static json_t *ollama_error(const char *type, const char *msg, const char *param) {
    json_t *root = json_object();
    json_object_set_new(root, "error", json_string(msg));
    return root;
}

static json_t *anthropic_error(const char *type, const char *msg, const char *param) {
    /* OpenAI-style types the server uses, in Anthropic's words */
    const char *t = !type                                ? "api_error"
                    : !strcmp(type, "server_error")      ? "api_error"
                    : !strcmp(type, "unavailable_error") ? "overloaded_error"
                                                         : type;
    json_t *e = json_object();
    json_object_set_new(e, "type", json_string(t));
    json_object_set_new(e, "message", json_string(msg));
    json_t *j = json_object();
    json_object_set_new(j, "type", json_string("error"));
    json_object_set_new(j, "error", e);
    return j;
}

/* indexed by server_api */
static json_t *(*const error_shapes[])(const char *type, const char *msg,
                                       const char *param) = {openai_error, ollama_error, anthropic_error};
_Static_assert(sizeof error_shapes / sizeof *error_shapes == SERVER_API_ANTHROPIC + 1, "an error shape per API");

json_t *server_error_body(server_api api, const char *type, const char *msg, const char *param) {
    return error_shapes[api](type, msg, param);
}

/* the API of the request this connection thread answers */
static _Thread_local server_api thread_api;

void server_reply_api(server_api api) { thread_api = api; }

int server_send_error_body(struct MHD_Connection *c, int status, json_t *root) {
    return server_send_error_allow(c, status, root, NULL);
}

struct MHD_Response *server_error_response(int status, json_t *root, const char *allow) {
    char *s = json_dumps(root, JSON_COMPACT | JSON_ENSURE_ASCII);
    json_decref(root);
    if (!s) return NULL;
    struct MHD_Response *r = MHD_create_response_from_buffer(strlen(s), s, MHD_RESPMEM_MUST_FREE);
    if (!r) {
        free(s);
        return NULL;
    }
    MHD_add_response_header(r, "Content-Type", "application/json");
    if (status == 429 || status == 503) MHD_add_response_header(r, "Retry-After", "1");
    if (status == 401) MHD_add_response_header(r, "WWW-Authenticate", "Bearer");
    if (allow) MHD_add_response_header(r, "Allow", allow);
    return r;
}

int server_send_error_allow(struct MHD_Connection *c, int status, json_t *root, const char *allow) {
    return server_reply(c, status, server_error_response(status, root, allow));
}

int server_send_error(struct MHD_Connection *c, int status, const char *type, const char *msg, const char *param) {
    return server_send_error_body(c, status, server_error_body(thread_api, type, msg, param));
}

int server_error(struct MHD_Connection *c, int ollama, int status, const char *type, const char *msg,
                 const char *param) {
    if (!ollama) return server_send_error(c, status, type, msg, param);
    return server_send_error_body(c, status, server_error_body(SERVER_API_OLLAMA, type, msg, param));
}

int server_oll_error(struct MHD_Connection *c, int status, const char *msg) {
    return server_send_error_body(c, status, server_error_body(SERVER_API_OLLAMA, NULL, msg, NULL));
}

int server_conn_gone(struct MHD_Connection *c) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (!ci) return 1;
    struct pollfd p = {ci->connect_fd, POLLRDHUP, 0};
    if (poll(&p, 1, 0) < 0) return 0;
    return (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0;
}

int server_conn_gone_fn(void *c) { return server_conn_gone(c); }

struct server_watch {
    struct MHD_Connection *c;
    kiln_engine_cancel *cancel;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_t th;
    int done;
};

/* Polls the connection every 50 ms until stopped or the client is gone. */
static void *watch_fn(void *u) {
    server_watch *w = u;
    pthread_mutex_lock(&w->mu);
    while (!w->done) {
        if (server_conn_gone(w->c)) {
            kiln_engine_cancel_fire(w->cancel);
            break;
        }
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 50 * 1000000L;
        if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
        pthread_cond_timedwait(&w->cv, &w->mu, &ts);
    }
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

server_watch *server_watch_start(struct MHD_Connection *c) {
    server_watch *w = calloc(1, sizeof *w);
    if (!w) return NULL;
    w->c = c;
    w->cancel = kiln_engine_cancel_new();
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv, NULL);
    if (!w->cancel || pthread_create(&w->th, NULL, watch_fn, w) != 0) {
        kiln_engine_cancel_free(w->cancel);
        pthread_mutex_destroy(&w->mu);
        pthread_cond_destroy(&w->cv);
        free(w);
        return NULL;
    }
    return w;
}

kiln_engine_cancel *server_watch_cancel(server_watch *w) { return w ? w->cancel : NULL; }

void server_watch_stop(server_watch *w) {
    if (!w) return;
    pthread_mutex_lock(&w->mu);
    w->done = 1;
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
    pthread_join(w->th, NULL);
    kiln_engine_cancel_free(w->cancel);
    pthread_mutex_destroy(&w->mu);
    pthread_cond_destroy(&w->cv);
    free(w);
}

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max) {
    server_stream *st = cls;
    while (st->pos == st->out.len) {
        if (st->ended) return MHD_CONTENT_READER_END_OF_STREAM;
        st->out.len = st->pos = 0;
        if (server_conn_gone(st->conn)) return MHD_CONTENT_READER_END_WITH_ERROR;
        st->ended = st->fill(st);
        /* what did not fit in memory is not sent cut: the stream breaks */
        if (st->out.failed) return MHD_CONTENT_READER_END_WITH_ERROR;
    }
    size_t n = st->out.len - st->pos;
    if (n > max) n = max;
    memcpy(buf, st->out.p + st->pos, n);
    st->pos += n;
    return (ssize_t)n;
}

static void stream_free(void *cls) {
    server_stream *st = cls;
    if (st->cleanup) st->cleanup(st);
    server_buf_free(&st->out);
    free(st);
}

int server_send_stream(struct MHD_Connection *c, const char *ctype, server_stream *st) {
    st->conn = c;
    struct MHD_Response *r =
        MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16 * 1024, stream_read, st, stream_free);
    if (!r) {
        stream_free(st);
        return MHD_NO;
    }
    MHD_add_response_header(r, "Content-Type", ctype);
    MHD_add_response_header(r, "Cache-Control", "no-cache");
    MHD_add_response_header(r, "X-Accel-Buffering", "no"); /* nginx: pass chunks through */
    return server_reply(c, 200, r);
}
