/* The HTTP side: libmicrohttpd with a thread per connection (so a handler
 * may block while its request runs), the limits on connections (per client
 * address, in all) and the deadline of a request's head, the Host/Origin
 * guard, the API key, the body limit, JSON parsing with positioned errors,
 * the route tables' lookup (api.h), /health and /metrics, and the server's
 * start and drain. */
#define _GNU_SOURCE
#include "server/api.h"
#include "server/buf.h"
#include "server/guard.h"
#include "server/log.h"
#include "server/metrics.h"
#include "server/models.h"
#include "server/reply.h"
#include "server/server.h"
#include "server/srv.h"
#include "server/webui.h"

#include "base/base.h"

#include <arpa/inet.h>
#include <sys/socket.h>
#include <math.h>
#include <microhttpd.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* ---- the deadline of a request's head ----
 *
 * MHD's connection timeout counts idle time, and every byte resets it: a
 * client that trickles its request line a byte at a time holds a thread
 * forever.  So each connection is followed from its opening: until the
 * handler's first call (the head has arrived) it has header_timeout
 * seconds, and again from the end of each response on a kept-alive
 * connection; a watchdog shuts down the socket of one past its deadline,
 * which ends its thread.  A request whose head is in has no deadline here:
 * a body upload and a streamed response run as long as they need. */

/* fd is read once, before the connection's thread starts: MHD answers
 * every connection-info query in one buffer per connection, which other
 * threads (server_conn_gone) fill too. */
struct server_conn {
    const struct MHD_Connection *c; /* the key, never read through */
    MHD_socket fd;
    double deadline; /* server_now() seconds; 0 while a request runs */
    struct server_conn *prev, *next;
};

static void conn_notify(void *cls, struct MHD_Connection *c, void **ctx, enum MHD_ConnectionNotificationCode toe) {
    server_srv *s = cls;
    server_conn *k = *ctx;
    pthread_mutex_lock(&s->conn_mu);
    if (toe == MHD_CONNECTION_NOTIFY_STARTED) {
        /* without memory for it the connection is served but not followed */
        const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
        if (ci && (k = calloc(1, sizeof *k))) {
            k->c = c;
            k->fd = ci->connect_fd;
            k->deadline = server_now() + s->cfg.header_timeout;
            k->next = s->conns;
            if (s->conns) s->conns->prev = k;
            s->conns = k;
            *ctx = k;
        }
    } else if (k) {
        /* MHD closes the socket after this returns: the watchdog, which
         * holds conn_mu while it shuts one down, never sees a stale one */
        if (k->prev)
            k->prev->next = k->next;
        else
            s->conns = k->next;
        if (k->next) k->next->prev = k->prev;
        free(k);
        *ctx = NULL;
    }
    pthread_mutex_unlock(&s->conn_mu);
}

/* deadline: 0 (the head is in) or seconds from now for the next head.  The
 * list is searched (at most --max-connections entries, twice a request)
 * rather than MHD's socket context read, for the reason of server_conn.fd. */
static void conn_deadline(server_srv *s, struct MHD_Connection *c, double in) {
    pthread_mutex_lock(&s->conn_mu);
    for (server_conn *k = s->conns; k; k = k->next)
        if (k->c == c) {
            k->deadline = in > 0 ? server_now() + in : 0;
            break;
        }
    pthread_mutex_unlock(&s->conn_mu);
}

static void *watchdog_main(void *arg) {
    server_srv *s = arg;
    pthread_mutex_lock(&s->conn_mu);
    while (!s->watchdog_quit) {
        const double now = server_now();
        for (server_conn *k = s->conns; k; k = k->next) {
            if (k->deadline <= 0 || now < k->deadline) continue;
            k->deadline = 0;
            shutdown(k->fd, SHUT_RDWR); /* its thread reads the end and closes it */
            atomic_fetch_add(&s->n_cut, 1);
        }
        /* a quarter of a second: the deadline's resolution */
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 250000000L;
        if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
        pthread_cond_timedwait(&s->conn_cv, &s->conn_mu, &ts);
    }
    pthread_mutex_unlock(&s->conn_mu);
    return NULL;
}

/* ---- the HTTP library's messages ---- */

enum { MHD_LOG_PER_SECOND = 5 };

static void mhd_log(void *cls, const char *fmt, va_list ap) {
    server_srv *s = cls;
    char msg[512];
    vsnprintf(msg, sizeof msg, fmt, ap);
    size_t n = strlen(msg);
    while (n && (msg[n - 1] == '\n' || msg[n - 1] == ' ')) msg[--n] = 0;
    int dropped = 0, show;
    pthread_mutex_lock(&s->log_mu);
    const double now = server_now();
    if (now - s->log_second >= 1) {
        dropped = s->log_dropped;
        s->log_second = now;
        s->log_lines = s->log_dropped = 0;
    }
    show = s->log_lines < MHD_LOG_PER_SECOND;
    if (show)
        s->log_lines++;
    else
        s->log_dropped++;
    pthread_mutex_unlock(&s->log_mu);
    if (dropped) {
        char note[96];
        snprintf(note, sizeof note, "http: %d more messages left out", dropped);
        server_log_line(s->cfg.log_json, note);
    }
    if (show) {
        char line[540];
        snprintf(line, sizeof line, "http: %s", msg);
        server_log_line(s->cfg.log_json, line);
    }
}

/* ---- the request handler ---- */

typedef struct conn_state {
    server_buf body;
    size_t seen; /* body bytes received, kept or not */
    int too_big;
    int counted;
    server_reqlog *log;
} conn_state;

/* The key as "Authorization: Bearer KEY" or, as Anthropic's clients send
 * it, "x-api-key: KEY". */
static int authorized(server_srv *s, struct MHD_Connection *c) {
    if (!s->cfg.api_key || !*s->cfg.api_key) return 1;
    const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
    const char *k = h && !strncasecmp(h, "Bearer ", 7) ? h + 7 : NULL, *want = s->cfg.api_key;
    if (!k) k = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "x-api-key");
    if (!k) return 0;
    size_t kl = strlen(k), wl = strlen(want);
    unsigned diff = (unsigned)(kl ^ wl);
    for (size_t i = 0; i < wl; i++) diff |= (unsigned)(want[i] ^ (i < kl ? k[i] : 0));
    return diff == 0;
}

static int health(server_srv *s, struct MHD_Connection *c) {
    int ready = 0, loading = 0, none = 1;
    pthread_mutex_lock(&s->mu);
    for (server_model *r = s->models; r; r = r->next) {
        if (!r->pinned) continue;
        none = 0;
        ready |= r->state == SERVER_M_READY || r->loaded_at > 0;
        loading |= r->state == SERVER_M_LOADING;
    }
    pthread_mutex_unlock(&s->mu);
    if (atomic_load(&s->draining))
        return server_send_error(c, 503, "unavailable_error", "the server is shutting down", NULL);
    if (!ready && !none)
        return server_send_error(c, 503, "unavailable_error", loading ? "Loading model" : "no model is ready", NULL);
    json_t *j = json_object();
    json_object_set_new(j, "status", json_string("ok"));
    return server_send_json(c, 200, j);
}

static json_t *parse_body(conn_state *cs, struct MHD_Connection *c, int *rc) {
    json_error_t je;
    json_t *j = json_loadb(cs->body.p ? cs->body.p : "", cs->body.len, 0, &je);
    if (!j && json_error_code(&je) == json_error_out_of_memory) {
        *rc = server_send_error(c, 500, "server_error", "out of memory reading the request's JSON", NULL);
        return NULL;
    }
    if (!j) {
        char msg[400];
        snprintf(msg, sizeof msg, "invalid JSON at line %d, column %d (byte %d): %s", je.line, je.column, je.position,
                 je.text);
        *rc = server_send_error(c, 400, "invalid_request_error", msg, NULL);
        return NULL;
    }
    if (!json_is_object(j)) {
        json_decref(j);
        *rc = server_send_error(c, 400, "invalid_request_error", "the request body must be a JSON object", NULL);
        return NULL;
    }
    return j;
}

/* 403 for a request the guard turns away, in the shape of the API the path
 * belongs to, without CORS headers (the page may not read it). */
static int refuse(struct MHD_Connection *c, const char *url, const char *msg) {
    const server_api api = !strncmp(url, "/api/", 5) ? SERVER_API_OLLAMA : SERVER_API_OPENAI;
    return server_reply_bare(c, 403,
                             server_error_response(403, server_error_body(api, "permission_error", msg, NULL), NULL));
}

/* A known path asked with another method: a 405 with Allow, not a 404. */
static int method_not_allowed(struct MHD_Connection *c, const char *allow) {
    char msg[64];
    snprintf(msg, sizeof msg, "method not allowed; use %s", allow);
    return server_send_error_allow(c, 405, server_error_body(SERVER_API_OPENAI, "invalid_request_error", msg, NULL),
                                   allow);
}

/* A CORS preflight from an allowed origin: the methods the APIs use and
 * whatever request headers the page asks for (token characters only). */
static int preflight(struct MHD_Connection *c) {
    struct MHD_Response *r = MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
    if (!r) return MHD_NO;
    MHD_add_response_header(r, "Allow", "GET, HEAD, POST, DELETE, OPTIONS");
    if (MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Origin")) {
        MHD_add_response_header(r, "Access-Control-Allow-Methods", "GET, HEAD, POST, DELETE, OPTIONS");
        const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Access-Control-Request-Headers");
        int ok = h && *h && strlen(h) < 1024;
        for (const char *p = h; ok && *p; p++)
            ok = (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') || strchr("-_, ", *p);
        MHD_add_response_header(r, "Access-Control-Allow-Headers", ok ? h : "Authorization, Content-Type");
        MHD_add_response_header(r, "Access-Control-Max-Age", "600");
    }
    return server_reply(c, 204, r);
}

static enum MHD_Result count_host(void *cls, enum MHD_ValueKind kind, const char *key, const char *value) {
    (void)kind, (void)value;
    if (!strcasecmp(key, "Host")) ++*(int *)cls;
    return MHD_YES;
}

/* What a request's head alone decides, before its body is read: one
 * non-empty Host (RFC 9112 3.2 answers 400 to none or several; kiln asks it
 * of HTTP/1.0 requests too, which every client and proxy sends), the guard,
 * and a declared Content-Length over the limit (413 at once: the client need
 * not send what would be dropped).  -1 to go on, or the handler's result
 * with a response queued. */
static int head_check(server_srv *s, struct MHD_Connection *c, const char *url) {
    const int is_api = !strncmp(url, "/api/", 5);
    int n_host = 0;
    MHD_get_connection_values(c, MHD_HEADER_KIND, count_host, &n_host);
    const char *host = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Host");
    if (n_host > 1)
        return server_error(c, is_api, 400, "invalid_request_error", "the request has more than one Host", NULL);
    if (!host || !*host)
        return server_error(c, is_api, 400, "invalid_request_error", "the request has no Host (or an empty one)", NULL);
    if (!server_guard_host_ok(&s->guard, host))
        return refuse(c, url, "this server answers only to a loopback Host (DNS rebinding?)");
    if (!server_guard_origin_ok(&s->guard, MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Origin"), host))
        return refuse(c, url, "requests from this origin are not allowed (see --cors-origins)");
    const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
    if (cl) {
        /* MHD has checked its syntax; one past 2^64 reads as ULLONG_MAX */
        unsigned long long n = strtoull(cl, NULL, 10);
        if (n > s->cfg.max_body) {
            char msg[160];
            snprintf(msg, sizeof msg, "the request body (%llu bytes) exceeds the limit of %zu bytes", n,
                     s->cfg.max_body);
            return server_error(c, is_api, 413, "invalid_request_error", msg, NULL);
        }
    }
    return -1;
}

static enum MHD_Result handler(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                               const char *version, const char *upload, size_t *upload_size, void **con_cls) {
    server_srv *s = cls;
    conn_state *cs = *con_cls;
    if (!cs) {
        conn_deadline(s, c, 0); /* the head is in */
        cs = calloc(1, sizeof *cs);
        if (!cs) return MHD_NO;
        *con_cls = cs;
        cs->counted = 1;
        cs->log = server_reqlog_begin(s, method, url);
        atomic_fetch_add(&s->n_active_http, 1);
        server_reqlog_set_current(cs->log);
        server_reply_api(!strncmp(url, "/v1/messages", 12) ? SERVER_API_ANTHROPIC : SERVER_API_OPENAI);
        const int rc = head_check(s, c, url);
        return rc < 0 ? MHD_YES : (enum MHD_Result)rc;
    }
    server_reqlog_set_current(cs->log);
    server_reply_api(!strncmp(url, "/v1/messages", 12) ? SERVER_API_ANTHROPIC : SERVER_API_OPENAI);
    if (*upload_size) {
        /* a body without a Content-Length (chunked) found too big: the rest
         * is read and dropped for the 413 (MHD answers only once the body
         * is in), up to as much again, then the connection is closed */
        cs->seen += *upload_size;
        if (cs->seen > s->cfg.max_body) {
            cs->too_big = 1;
            server_buf_free(&cs->body);
            if (cs->seen - s->cfg.max_body > s->cfg.max_body) return MHD_NO;
        } else {
            server_buf_put(&cs->body, upload, *upload_size);
        }
        *upload_size = 0;
        return MHD_YES;
    }
    if (!strcmp(method, "OPTIONS")) return (enum MHD_Result)preflight(c);
    int get = !strcmp(method, "GET") || !strcmp(method, "HEAD");
    if (get && !strcmp(url, "/health")) return (enum MHD_Result)health(s, c);
    const int is_api = !strncmp(url, "/api/", 5); /* Ollama's API: its error shape */
    if (!(get && server_guard_public_path(url)) && !authorized(s, c))
        return (enum MHD_Result)server_error(c, is_api, 401, "authentication_error",
                                             "a valid API key is required (Authorization: Bearer KEY)", NULL);
    if (cs->body.failed)
        return (enum MHD_Result)server_error(c, is_api, 500, "server_error", "out of memory reading the request body",
                                             NULL);
    if (cs->too_big) {
        char msg[128];
        snprintf(msg, sizeof msg, "the request body exceeds the limit of %zu bytes", s->cfg.max_body);
        return (enum MHD_Result)server_error(c, is_api, 413, "invalid_request_error", msg, NULL);
    }
    if (get && server_webui_path(url)) return (enum MHD_Result)server_webui_serve(c, url);
    if (get && !strcmp(url, "/metrics")) {
        server_buf b = {0};
        server_metrics_render(s, &b);
        if (b.failed) {
            server_buf_free(&b);
            return (enum MHD_Result)server_send_error(c, 500, "server_error", "out of memory", NULL);
        }
        return (enum MHD_Result)server_send_text(c, 200, "text/plain; version=0.0.4", b.p, b.len, 0);
    }
    int post = !strcmp(method, "POST"), known = 0;
    const char *allow = NULL;
    const server_route *rt = server_oai_find(method, url, &known, &allow);
    if (rt && rt->raw) return (enum MHD_Result)rt->raw(s, c, url, cs->body.p, cs->body.len);
    json_t *body = NULL;
    int rc = MHD_NO;
    const int is_oai = !strncmp(url, "/v1/", 4) || rt || known;
    const int is_llama = server_llama_path(url);
    if ((post || !strcmp(method, "DELETE")) && (is_oai || is_api || is_llama) && cs->body.len) {
        body = parse_body(cs, c, &rc);
        if (!body) return (enum MHD_Result)rc;
    } else if (post && is_oai) {
        return (enum MHD_Result)server_send_error(c, 400, "invalid_request_error", "the request has no JSON body",
                                                  NULL);
    }
    if (!get && (!strcmp(url, "/health") || !strcmp(url, "/metrics"))) known = 1, allow = "GET, HEAD";
    if (rt)
        rc = rt->json(s, c, body);
    else if (is_api)
        rc = server_oll_route(s, c, method, url, body);
    else if (is_llama)
        rc = server_llama_route(s, c, method, url, body);
    else if (known)
        rc = method_not_allowed(c, allow);
    else {
        char msg[300];
        snprintf(msg, sizeof msg, "no route for %s %.200s", method, url);
        rc = server_send_error(c, 404, "not_found_error", msg, NULL);
    }
    json_decref(body);
    return (enum MHD_Result)rc;
}

static void completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe) {
    server_srv *s = cls;
    conn_state *cs = *con_cls;
    conn_deadline(s, c, s->cfg.header_timeout); /* a kept-alive connection's next head */
    if (!cs) return;
    if (cs->counted) atomic_fetch_sub(&s->n_active_http, 1);
    server_reqlog_done(cs->log);
    server_reqlog_put(cs->log);
    server_reqlog_set_current(NULL);
    server_buf_free(&cs->body);
    free(cs);
    *con_cls = NULL;
}

/* ---- lifecycle ---- */

server_config server_config_default(void) {
    server_config c;
    memset(&c, 0, sizeof c);
    c.host = "127.0.0.1";
    c.port = SERVER_DEFAULT_PORT;
    c.parallel = 4;
    c.n_batch = 512;
    c.keep_alive = 300;
    c.max_body = 8u << 20;
    c.max_image_bytes = (size_t)20 << 20;
    c.max_audio_seconds = 7200;
    c.max_queue = 64;
    c.max_connections = 512;
    c.max_conn_per_ip = 32;
    c.header_timeout = 10;
    c.spec = kiln_spec_default_params();
    c.reasoning_budget = -1;
    c.repeat_guard = 256;
    return c;
}

kiln_status server_server_start(const server_config *cfg, server_server **out) {
    *out = NULL;
    server_srv *s = calloc(1, sizeof *s);
    if (!s) return KILN_ERR_NOMEM;
    s->cfg = *cfg;
    if (!s->cfg.host) s->cfg.host = "127.0.0.1";
    if (s->cfg.parallel <= 0) s->cfg.parallel = 4;
    if (!s->cfg.max_body) s->cfg.max_body = 8u << 20;
    if (!(s->cfg.max_audio_seconds > 0)) s->cfg.max_audio_seconds = 7200;
    if (s->cfg.max_queue <= 0) s->cfg.max_queue = 64;
    if (s->cfg.max_connections <= 0) s->cfg.max_connections = 512;
    /* one address may hold a share of the connections, never all of them:
     * a flood from it leaves room for every other client */
    if (s->cfg.max_conn_per_ip <= 0 || s->cfg.max_conn_per_ip > s->cfg.max_connections / 2)
        s->cfg.max_conn_per_ip = s->cfg.max_connections / 2 < 32 ? s->cfg.max_connections / 2 : 32;
    if (s->cfg.max_conn_per_ip < 1) s->cfg.max_conn_per_ip = 1;
    if (!(s->cfg.header_timeout > 0)) s->cfg.header_timeout = 10;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    pthread_mutex_init(&s->conn_mu, NULL);
    pthread_cond_init(&s->conn_cv, NULL);
    pthread_mutex_init(&s->log_mu, NULL);
    if (kiln_store_open(cfg->store_root, &s->store) != KILN_OK) {
        fprintf(stderr, "kiln serve: no model store (%s); only -m models are served\n", kiln_last_error());
        s->store = NULL;
    }
    kiln_status mst = server_models_start(s); /* -m models: each checked, then loading */
    if (mst != KILN_OK) {
        s->quiet = 1; /* a server that never listened has nothing to drain or cancel */
        server_server_free((server_server *)s);
        return mst;
    }
    /* the bind address: IPv4, or IPv6 with or without brackets */
    char addr[64];
    const char *h = s->cfg.host;
    size_t hl = strlen(h);
    if (h[0] == '[' && hl > 2 && h[hl - 1] == ']') {
        h++;
        hl -= 2;
    }
    if (!strcmp(s->cfg.host, "localhost")) h = "127.0.0.1", hl = 9;
    snprintf(addr, sizeof addr, "%.*s", (int)(hl < sizeof addr ? hl : sizeof addr - 1), h);
    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof ss);
    struct sockaddr_in *s4 = (struct sockaddr_in *)&ss;
    struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&ss;
    unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ITC | MHD_USE_ERROR_LOG;
    if (inet_pton(AF_INET, addr, &s4->sin_addr) == 1) {
        s4->sin_family = AF_INET;
        s4->sin_port = htons((uint16_t)cfg->port);
    } else if (inet_pton(AF_INET6, addr, &s6->sin6_addr) == 1) {
        s6->sin6_family = AF_INET6;
        s6->sin6_port = htons((uint16_t)cfg->port);
        flags |= MHD_USE_IPv6;
    } else {
        fprintf(stderr, "kiln serve: --host '%s' is not an IPv4 or IPv6 address\n", s->cfg.host);
        s->quiet = 1;
        server_server_free((server_server *)s);
        return KILN_ERR_INVALID_ARG;
    }
    if (cfg->image_pack) {
        char ierr[1024];
        if (!(s->images = server_images_start(cfg->image_pack, ierr, sizeof ierr))) {
            fprintf(stderr, "kiln serve: --image %s: %s\n", cfg->image_pack, ierr);
            s->quiet = 1;
            server_server_free((server_server *)s);
            return KILN_ERR_FORMAT;
        }
    }
    const char *origins = cfg->cors_origins ? cfg->cors_origins : getenv("KILN_ORIGINS");
    if (server_guard_init(&s->guard, addr, origins)) {
        s->quiet = 1;
        server_server_free((server_server *)s);
        return KILN_ERR_NOMEM;
    }
    const int te = pthread_create(&s->watchdog, NULL, watchdog_main, s);
    if (te) {
        server_server_free((server_server *)s);
        return base_fail(KILN_ERR_NOMEM, "kiln serve: cannot start a thread: %s", strerror(te));
    }
    s->watchdog_started = 1;
    /* the connection timeout counts idle seconds once a request runs (a
     * body that stalls, a client that stops reading a stream) */
    s->mhd = MHD_start_daemon(flags, (uint16_t)cfg->port, NULL, NULL, handler, s, MHD_OPTION_EXTERNAL_LOGGER, mhd_log,
                              s, MHD_OPTION_SOCK_ADDR, &ss, MHD_OPTION_NOTIFY_COMPLETED, completed, s,
                              MHD_OPTION_NOTIFY_CONNECTION, conn_notify, s, MHD_OPTION_CONNECTION_LIMIT,
                              (unsigned)s->cfg.max_connections, MHD_OPTION_PER_IP_CONNECTION_LIMIT,
                              (unsigned)s->cfg.max_conn_per_ip, MHD_OPTION_CONNECTION_TIMEOUT, 600u, MHD_OPTION_END);
    if (!s->mhd) {
        fprintf(stderr, "kiln serve: cannot listen on %s port %d\n", s->cfg.host, cfg->port);
        s->quiet = 1;
        server_server_free((server_server *)s);
        return KILN_ERR_IO;
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(s->mhd, MHD_DAEMON_INFO_BIND_PORT);
    s->port = di ? di->port : cfg->port;
    *out = (server_server *)s;
    return KILN_OK;
}

int server_server_port(const server_server *srv) { return ((const server_srv *)srv)->port; }

kiln_status server_server_wait_loaded(server_server *srv, char *msg, size_t cap) {
    return server_models_wait_loaded((server_srv *)srv, msg, cap);
}

void server_server_drain(server_server *srv, double grace) {
    server_srv *s = (server_srv *)srv;
    if (atomic_exchange(&s->draining, 1)) return;
    /* connections are still taken (/health answers 503, new work 503);
     * every engine stops gracefully, cancelled after grace seconds */
    server_logf(s, "draining (up to %g s)", grace);
    server_models_drain(s, grace);
    /* the handlers see their requests end and finish their responses */
    double end = server_now() + 5;
    while (atomic_load(&s->n_active_http) > 0 && server_now() < end) usleep(20000);
}

void server_server_free(server_server *srv) {
    server_srv *s = (server_srv *)srv;
    if (!s) return;
    server_server_drain(srv, 0);
    if (s->mhd) MHD_stop_daemon(s->mhd);
    if (s->watchdog_started) {
        pthread_mutex_lock(&s->conn_mu);
        s->watchdog_quit = 1;
        pthread_cond_signal(&s->conn_cv);
        pthread_mutex_unlock(&s->conn_mu);
        pthread_join(s->watchdog, NULL);
    }
    server_models_free(s);
    server_images_free(s->images);
    if (s->store) kiln_store_close(s->store);
    server_guard_free(&s->guard);
    pthread_cond_destroy(&s->cv);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->conn_cv);
    pthread_mutex_destroy(&s->conn_mu);
    pthread_mutex_destroy(&s->log_mu);
    free(s);
}
