/* The Responses and Messages endpoints: their request in chat form through
 * the model's template and gate, and the generation through their writer
 * (run.c's loop) as a stream of SSE events or one JSON object. */
#include "server/api.h"
#include "server/buf.h"
#include "server/defaults.h"
#include "server/gen.h"
#include "server/log.h"
#include "server/media.h"
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
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *status_type(int status) {
    return status == 404   ? "not_found_error"
           : status == 400 ? "invalid_request_error"
           : status == 503 ? "unavailable_error"
           : status == 413 ? "request_too_large"
                           : "server_error";
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
    ks_media media;
    json_t *marked = NULL; /* the messages with a marker per image, when any has one */
    int mstatus = 400;
    if (ks_media_chat(r, json_object_get(x.chat, "messages"), &marked, &media, &mstatus, err, sizeof err) < 0) {
        ks_model_done(r, NAN);
        return ks_send_error(c, mstatus, status_type(mstatus), err,
                             mstatus == 500 ? NULL
                             : resp         ? "input"
                                            : "messages");
    }
    json_t *msgs = ks_defaults_messages(r, marked ? marked : json_object_get(x.chat, "messages"));
    json_decref(marked);
    const kct_opts ro = {.cancelled = ks_conn_gone_fn, .cancel_arg = c}; /* stops when the client goes */
    char *prompt = ks_render_chat(r, msgs, tools, x.think, &ro, err, sizeof err);
    json_decref(msgs);
    if (!prompt) {
        ks_media_free(&media);
        ks_model_done(r, NAN);
        const int code = ks_render_status(err);
        return ks_send_error(c, code, code == 500 ? "server_error" : "invalid_request_error", err,
                             code == 500 ? NULL : "messages");
    }
    int32_t n = 0;
    int32_t *ids = NULL;
    ks_prompt_media pm = {0}; /* the image tokens' rows */
    if (media.n && ks_media_prompt(r, prompt, &media, &ids, &n, &pm, &mstatus, err, sizeof err)) {
        ks_media_free(&media);
        free(prompt);
        ks_model_done(r, NAN);
        return ks_send_error(c, mstatus, status_type(mstatus), err,
                             mstatus == 500 ? NULL
                             : resp         ? "input"
                                            : "messages");
    }
    if (!media.n) ids = ks_tokenize(r->model, prompt, 1, &n);
    ks_media_free(&media);
    int start_think = ks_prompt_opens_think(prompt);
    o.force_think = ks_force_think(r, prompt, 0);
    free(prompt);
    if (!ids) {
        ks_model_done(r, NAN);
        return ks_send_error(c, 500, "server_error", "tokenization failed", NULL);
    }
    if (count) {
        free(ids);
        free(pm.embd);
        free(pm.mpos);
        ks_model_done(r, NAN);
        return ks_send_json(c, 200, json_pack("{s:i}", "input_tokens", (int)n));
    }
    ks_req *q = ks_start(r, c, ids, n, &pm, &o, &rc);
    if (!q) {
        ks_model_done(r, NAN);
        return rc;
    }
    ks_run_args a = {.format = resp ? KS_F_RESP : KS_F_MSG,
                     .stream = x.stream,
                     .include_usage = 0,
                     .start_think = start_think,
                     .keep_alive = NAN,
                     .model = name,
                     .think_off = 0,
                     .has_tools = json_array_size(tools) > 0,
                     .load_wait = load_wait,
                     .tools = tools,
                     .echo = resp ? body : NULL};
    /* the options stay valid: o.stop and tools point into x.chat, which
     * the run references (ks_run takes its own) before x goes */
    return ks_run(s, r, c, q, &a, &o);
}

int ks_resp_handle(ks_srv *s, struct MHD_Connection *c, json_t *body) { return handle(s, c, body, 1, 0); }

int ks_msg_handle(ks_srv *s, struct MHD_Connection *c, json_t *body, int count) { return handle(s, c, body, 0, count); }
