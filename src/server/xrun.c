/* The Responses and Messages endpoints: their request in chat form through
 * the model's template and gate, and the generation through a writer
 * (xapi.h) as a stream of SSE events or one JSON object. */
#include "server/api.h"
#include "server/buf.h"
#include "server/defaults.h"
#include "server/gen.h"
#include "server/log.h"
#include "server/metrics.h"
#include "server/models.h"
#include "server/opts.h"
#include "server/prompt.h"
#include "server/reply.h"
#include "server/run.h"
#include "server/srv.h"
#include "server/xapi.h"

#include <math.h>
#include <microhttpd.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the driver ---- */

typedef struct xrun {
    ks_model *r;
    ks_req *q;
    ks_xw *w;
    ks_gen g;
    double keep_alive;
    ks_reqlog *log;
} xrun;

static void on_text(ks_gen *g, int kind, const char *s, size_t n, void *user) {
    xrun *u = user;
    u->w->ops->text(u->w, kind, s, n);
}

/* A call that did not open in parts (its body only parsed at the closing
 * tag): all of it at once. */
static void on_tool(ks_gen *g, int index, json_t *call, void *user) {
    xrun *u = user;
    const char *name = json_string_value(json_object_get(call, "name"));
    u->w->ops->tool_open(u->w, name ? name : "");
    size_t n;
    const char *text = ks_gen_args_text(g, &n);
    if (text) {
        u->w->ops->tool_args(u->w, text, n);
    } else {
        char *args = json_dumps(json_object_get(call, "arguments"), JSON_COMPACT | JSON_ENCODE_ANY);
        u->w->ops->tool_args(u->w, args ? args : "{}", args ? strlen(args) : 2);
        free(args);
    }
}

static void on_tool_part(ks_gen *g, int index, const char *name, const char *args, size_t n, void *user) {
    xrun *u = user;
    if (name)
        u->w->ops->tool_open(u->w, name);
    else
        u->w->ops->tool_args(u->w, args, n);
}

/* The writer learns how it ended, then closes. */
static void finish(xrun *u) {
    ks_xw *w = u->w;
    w->finish = u->g.finish;
    w->stop_seq = u->g.stop_hit >= 0 ? json_string_value(json_array_get(u->g.stops, (size_t)u->g.stop_hit)) : NULL;
    w->n_prompt = u->q->n_prompt;
    w->n_cached = u->q->n_cached;
    w->n_gen = u->g.n_gen;
    if (u->g.finish == KS_FIN_ERROR)
        w->ops->fail(w, u->g.err[0] ? u->g.err : "generation failed");
    else
        w->ops->finish(w);
}

static void xrun_free(xrun *u) {
    ks_metrics_tokens(u->q->n_prompt, u->q->n_cached, u->g.n_gen);
    ks_reqlog_tokens(u->log, u->q->n_prompt, u->g.n_gen);
    ks_reqlog_emit(u->log);
    ks_reqlog_put(u->log);
    json_decref(u->g.stops);
    ks_gen_free(&u->g);
    ks_req_free(u->q);
    ks_model_done(u->r, u->keep_alive);
    ks_xw_free(u->w);
    free(u->w);
    free(u);
}

static int xrun_fill(ks_stream *st) {
    xrun *u = st->user;
    for (int i = 0; i < 50 && st->out.len == 0; i++) {
        if (ks_gen_pump(&u->g, u->q, 100)) {
            finish(u);
            return 1;
        }
        if (st->out.len == 0 && ks_conn_gone(st->conn)) return 1;
    }
    if (st->out.len == 0) u->w->ops->ping(u->w);
    return 0;
}

static void xrun_cleanup(ks_stream *st) { xrun_free(st->user); }

int ks_xrun(ks_srv *s, ks_model *r, struct MHD_Connection *c, ks_req *q, ks_xw *w, const ks_gen_opts *o, int stream,
            int start_think, json_t *tools, double keep_alive) {
    (void)s;
    xrun *u = calloc(1, sizeof *u);
    ks_stream *st = stream ? calloc(1, sizeof *st) : NULL;
    if (!u || (stream && !st)) {
        free(u);
        free(st);
        ks_req_free(q);
        ks_model_done(r, keep_alive);
        ks_xw_free(w);
        free(w);
        return ks_send_error(c, 500, "server_error", "out of memory", NULL);
    }
    u->r = r;
    u->q = q;
    u->w = w;
    u->keep_alive = keep_alive;
    u->log = ks_reqlog_hold(ks_reqlog_current());
    ks_gen_init(&u->g, r->model, start_think);
    if (json_is_string(o->stop)) {
        u->g.stops = json_array();
        json_array_append(u->g.stops, o->stop);
    } else if (o->stop) {
        u->g.stops = json_incref(o->stop);
    }
    u->g.split_think = 1;
    u->g.split_tools = json_array_size(tools) > 0;
    ks_gen_tools(&u->g, tools);
    ks_gen_format(&u->g, ks_model_callfmt(r));
    u->g.on_text = on_text;
    u->g.on_tool = on_tool;
    u->g.on_tool_part = on_tool_part;
    u->g.user = u;
    w->n_prompt = q->n_prompt;
    if (st) {
        w->out = &st->out;
        w->ops->start(w);
        st->fill = xrun_fill;
        st->cleanup = xrun_cleanup;
        st->user = u;
        return ks_send_stream(c, "text/event-stream", st);
    }
    while (!ks_gen_pump(&u->g, u->q, 100)) {
        if (ks_conn_gone(c)) {
            xrun_free(u);
            return MHD_NO;
        }
    }
    finish(u);
    int rc;
    if (u->g.finish == KS_FIN_ERROR)
        rc = ks_send_json(c, 500, w->ops->error_body("server_error", u->g.err[0] ? u->g.err : "generation failed"));
    else
        rc = ks_send_json(c, 200, json_incref(w->result));
    xrun_free(u);
    return rc;
}

static const char *status_type(int status) {
    return status == 404   ? "not_found_error"
           : status == 400 ? "invalid_request_error"
           : status == 503 ? "unavailable_error"
                           : "server_error";
}

/* A new unique serial for ids: the time, then a counter. */
static void new_serial(char *buf, size_t cap) {
    static atomic_uint_fast64_t counter;
    snprintf(buf, cap, "%lx%llx", (long)ks_wall(), (unsigned long long)atomic_fetch_add(&counter, 1));
}

static int run_model(ks_srv *s, struct MHD_Connection *c, json_t *body, int resp, int count, ks_xreq *xp,
                     ks_gen_opts *op);

/* Shared by both APIs: count only (Messages' count_tokens) or run. */
static int handle(ks_srv *s, struct MHD_Connection *c, json_t *body, int resp, int count) {
    ks_xreq x;
    char err[600];
    const char *param = NULL;
    int rc = resp ? ks_resp_translate(body, &x, err, sizeof err, &param)
                  : ks_msg_translate(body, count, &x, err, sizeof err, &param);
    if (rc) {
        ks_xreq_free(&x);
        return ks_send_error(c, 400, "invalid_request_error", err, param);
    }
    ks_gen_opts o;
    if (ks_parse_opts(c, x.chat, 0, &o, &rc)) {
        ks_xreq_free(&x);
        return rc;
    }
    int off = 0;
    json_t *force = NULL;
    if (ks_tool_choice(json_object_get(x.chat, "tool_choice"), json_object_get(x.chat, "tools"), &off, &force, err,
                       sizeof err)) {
        ks_xreq_free(&x);
        return ks_send_error(c, 400, "invalid_request_error", err, "tool_choice");
    }
    o.force_tools = force;
    rc = run_model(s, c, body, resp, count, &x, &o);
    json_decref(force); /* a started request keeps its own copies */
    ks_xreq_free(&x);
    return rc;
}

static int run_model(ks_srv *s, struct MHD_Connection *c, json_t *body, int resp, int count, ks_xreq *xp,
                     ks_gen_opts *op) {
    ks_xreq x = *xp; /* freed by the caller */
    ks_gen_opts o = *op;
    char err[600];
    int rc = MHD_NO;
    const char *name = json_string_value(json_object_get(body, "model"));
    double load_wait = 0;
    int status = 404;
    ks_model *r = ks_model_use(s, name, KS_TASK_GENERATE, &load_wait, &status, err, sizeof err);
    ks_reqlog_model(ks_reqlog_current(), r ? r->name : name);
    if (!r) return ks_send_error(c, status, status_type(status), err, "model");
    if (ks_defaults_opts(r, c, x.chat, 0, &o, &rc)) { /* a store pack's options under the request's */
        ks_model_done(r, NAN);
        return rc;
    }
    json_t *tools = json_object_get(x.chat, "tools");
    json_t *msgs = ks_defaults_messages(r, json_object_get(x.chat, "messages"));
    const kct_opts ro = {.cancelled = ks_conn_gone_fn, .cancel_arg = c}; /* stops when the client goes */
    char *prompt = ks_render_chat(r, msgs, tools, x.think, &ro, err, sizeof err);
    json_decref(msgs);
    if (!prompt) {
        ks_model_done(r, NAN);
        const int code = ks_render_status(err);
        return ks_send_error(c, code, code == 500 ? "server_error" : "invalid_request_error", err,
                             code == 500 ? NULL : "messages");
    }
    int32_t n = 0;
    int32_t *ids = ks_tokenize(r->model, prompt, 1, &n);
    int start_think = ks_prompt_opens_think(prompt);
    o.force_think = ks_force_think(r, prompt, 0);
    free(prompt);
    if (!ids) {
        ks_model_done(r, NAN);
        return ks_send_error(c, 500, "server_error", "tokenization failed", NULL);
    }
    if (count) {
        free(ids);
        ks_model_done(r, NAN);
        return ks_send_json(c, 200, json_pack("{s:i}", "input_tokens", (int)n));
    }
    ks_req *q = ks_start(r, c, ids, n, &o, &rc);
    if (!q) {
        ks_model_done(r, NAN);
        return rc;
    }
    ks_xw *w = calloc(1, sizeof *w);
    if (!w) {
        ks_req_free(q);
        ks_model_done(r, NAN);
        return ks_send_error(c, 500, "server_error", "out of memory", NULL);
    }
    char serial[40];
    new_serial(serial, sizeof serial);
    ks_xw_init(w, resp ? &ks_resp_ops : &ks_msg_ops, resp ? "resp" : "msg", serial, name && *name ? name : r->name,
               NULL);
    if (resp) w->echo = json_deep_copy(body);
    /* the options stay valid: o.stop and tools point into x.chat, which
     * the run references (ks_xrun takes its own) before x goes */
    return ks_xrun(s, r, c, q, w, &o, x.stream, start_think, tools, NAN);
}

int ks_resp_handle(ks_srv *s, struct MHD_Connection *c, json_t *body) { return handle(s, c, body, 1, 0); }

int ks_msg_handle(ks_srv *s, struct MHD_Connection *c, json_t *body, int count) { return handle(s, c, body, 0, count); }
