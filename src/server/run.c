/* A generation request from its admission to its response: server_start
 * admits it, and one loop hands the token stream to the writer of the
 * request's shape (write.h).  Here too the Responses and Messages
 * endpoints: their request in chat form (xapi.h) through the model's
 * template and gate. */
#include "server/run.h"

#include "server/api.h"
#include "server/buf.h"
#include "server/defaults.h"
#include "server/deltas.h"
#include "server/log.h"
#include "server/media.h"
#include "server/metrics.h"
#include "server/models.h"
#include "server/opts.h"
#include "server/prompt.h"
#include "server/reply.h"
#include "server/srv.h"
#include "server/write.h"
#include "server/xapi.h"

#include <math.h>
#include <microhttpd.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

server_req *server_req_new(void) { return calloc(1, sizeof(server_req)); }

void server_req_free(server_req *q) {
    if (!q) return;
    engine_llm_end(q->er);
    free(q->prompt);
    free(q->media.embd);
    free(q->media.mpos);
    sample_schema_free(q->schema);
    for (int i = 0; i < q->n_call; i++) {
        free(q->call_names[i]);
        sample_schema_free(q->call_schemas[i]);
    }
    free(q->call_names);
    free(q->call_schemas);
    free(q);
}

static int conn_gone(void *c) { return server_conn_gone(c); }

/* The forced call's names and schemas into q, its recognizer set up. */
static int force_setup(server_req *q, server_model *r, const server_gen_opts *o, char *msg, size_t cap) {
    const char *tmpl = server_template_text(r);
    const int fmt = server_model_callfmt(r);
    const int harmony = fmt == SERVER_CF_HARMONY; /* a message to functions.NAME */
    if (fmt == SERVER_CF_TAG && (!tmpl || !strstr(tmpl, "<tool_call>"))) {
        snprintf(msg, cap,
                 "'tool_choice' forces a call, which needs a chat template that writes calls as "
                 "<tool_call>...</tool_call>; the template of \"%.100s\" does not",
                 r->name);
        return -1;
    }
    if (o->json_mode) {
        snprintf(msg, cap, "a forced 'tool_choice' and a JSON response_format cannot both shape one reply");
        return -1;
    }
    size_t n = json_array_size(o->force_tools);
    q->call_names = calloc(n ? n : 1, sizeof *q->call_names);
    q->call_schemas = calloc(n ? n : 1, sizeof *q->call_schemas);
    if (!q->call_names || !q->call_schemas) {
        snprintf(msg, cap, "out of memory");
        return -1;
    }
    json_t *any_object = json_pack("{s:s}", "type", "object");
    for (size_t i = 0; i < n; i++) {
        json_t *fn = json_object_get(json_array_get(o->force_tools, i), "function");
        json_t *params = json_object_get(fn, "parameters");
        char err[240];
        q->call_names[i] = strdup(json_string_value(json_object_get(fn, "name")));
        q->call_schemas[i] = sample_schema_compile(json_is_object(params) ? params : any_object, err, sizeof err);
        q->n_call = (int)i + 1;
        if (!q->call_names[i] || !q->call_schemas[i]) {
            snprintf(msg, cap, "the parameters of tool '%.60s' cannot be enforced for a forced call: %.150s",
                     q->call_names[i] ? q->call_names[i] : "?", q->call_schemas[i] ? "out of memory" : err);
            json_decref(any_object);
            return -1;
        }
    }
    json_decref(any_object);
    if (harmony) {
        /* the call's header, then its arguments (a value of the schema);
         * <|call|> ends the generation */
        const char *nm = q->call_names[0];
        int plain = q->n_call == 1 && *nm;
        for (const char *c = nm; *c && plain; c++)
            plain = (*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') || *c == '_' ||
                    *c == '-' || *c == '.';
        if (!plain || strlen(nm) > 64) {
            snprintf(msg, cap,
                     "a forced call on a harmony model takes one tool whose name is letters, digits, '_', '-' or '.' "
                     "(at most 64)");
            return -1;
        }
        snprintf(q->lead_text, sizeof q->lead_text,
                 "<|channel|>commentary to=functions.%s <|constrain|>json<|message|>", nm);
        sample_sv_init(&q->sv, q->call_schemas[0]);
        sample_json_constraint(&q->args_cons, &q->sv);
        sample_lead_init(&q->lead, q->lead_text, &q->args_cons);
        sample_lead_constraint(&q->cons, &q->lead);
        return 0;
    }
    /* another family's form: its literals around the name and arguments */
    if (fmt != SERVER_CF_TAG && server_callfmt_call_form(fmt, tmpl, &q->call_form)) {
        snprintf(msg, cap, "a forced call is not available for the %s call form", server_callfmt_name(fmt));
        return -1;
    }
    const int bad =
        fmt != SERVER_CF_TAG
            ? sample_call_init_form(&q->call, &q->call_form, (const char *const *)q->call_names,
                                    (const sample_schema *const *)q->call_schemas, q->n_call, o->force_think)
            : sample_call_init(&q->call, (const char *const *)q->call_names,
                               (const sample_schema *const *)q->call_schemas, q->n_call, o->force_think);
    if (bad) {
        snprintf(msg, cap,
                 "a forced call takes 1..%d tools with distinct names free of quotes, backslashes and "
                 "control characters%s%s",
                 SAMPLE_CALL_MAX, fmt != SERVER_CF_TAG ? " and of " : "",
                 fmt != SERVER_CF_TAG ? (q->call_form.mid[0] == '[' ? "'['" : "line breaks") : "");
        return -1;
    }
    sample_call_constraint(&q->cons, &q->call);
    return 0;
}

server_req *server_start(server_model *r, struct MHD_Connection *c, int32_t *ids, int32_t n, server_prompt_media *pm,
                         const server_gen_opts *o, int *rc) {
    server_prompt_media media = {0};
    if (pm) {
        media = *pm;
        memset(pm, 0, sizeof *pm);
    }
    char msg[300];
    if (n <= 0) {
        free(ids);
        free(media.embd);
        free(media.mpos);
        *rc = server_error(c, o->ollama, 400, "invalid_request_error", "the prompt is empty", "prompt");
        return NULL;
    }
    /* The client's token limit is a cap, as llama-server's and Ollama's: the
     * engine gets the smaller of it and the room the prompt leaves, so a reply
     * that fills the context ends with the length reason.  A prompt that
     * leaves no room is refused here, before any compute, never truncated. */
    const int32_t room = r->n_ctx - n;
    if (room < 1) {
        free(ids);
        free(media.embd);
        free(media.mpos);
        snprintf(msg, sizeof msg, "the prompt has %d tokens; the context holds %d, leaving no room to generate", n,
                 r->n_ctx);
        *rc = server_error(c, o->ollama, 400, "invalid_request_error", msg, "prompt");
        return NULL;
    }
    const int32_t max = o->max_tokens < 0 || o->max_tokens > room ? room : o->max_tokens;
    server_req *q = server_req_new();
    if (!q) {
        free(ids);
        free(media.embd);
        free(media.mpos);
        *rc = server_error(c, o->ollama, 500, "server_error", "out of memory", NULL);
        return NULL;
    }
    q->prompt = ids;
    q->n_prompt = n;
    q->media = media;
    q->max_tokens = max;
    q->sp = o->sp;
    q->n_top = o->n_top;
    q->want_logprobs = o->logprobs;
    q->json_mode = o->json_mode;
    q->ignore_eos = o->ignore_eos;
    if (o->json_mode && o->schema && !(q->schema = sample_schema_compile(o->schema, msg, sizeof msg))) {
        server_req_free(q);
        *rc = server_error(c, o->ollama, 400, "invalid_request_error", msg, "response_format");
        return NULL;
    }
    kiln_engine_observation ob;
    kiln_engine_observe(r->eng, &ob);
    if (ob.n_waiting >= r->srv->cfg.max_queue) {
        server_req_free(q);
        *rc = server_error(c, o->ollama, 429, "rate_limit_error", "the request queue is full; retry shortly", NULL);
        return NULL;
    }
    gen_params p = gen_params_default();
    p.prompt = q->prompt;
    p.n_prompt = q->n_prompt;
    p.embd = q->media.embd;
    p.n_embd_rows = q->media.n_rows;
    p.mpos = q->media.mpos;
    p.n_predict = q->max_tokens;
    p.sampler = q->sp;
    p.n_top = q->want_logprobs ? q->n_top : -1;
    p.ignore_eos = q->ignore_eos;
    p.reuse = 1;
    /* reasoning first: the budget counts the block's tokens, and a JSON
     * answer's constraint starts after it (a forced call's recognizer
     * takes the block itself) */
    p.think = o->force_think;
    p.think_budget = o->think_budget == SERVER_BUDGET_SERVER ? r->srv->cfg.reasoning_budget : o->think_budget;
    p.repeat_guard = r->srv->cfg.repeat_guard;
    if (q->json_mode) {
        sample_sv_init(&q->sv, q->schema ? q->schema : sample_schema_any_object()); /* JSON mode: an object */
        sample_json_constraint(&q->cons, &q->sv);
        p.constraint = &q->cons;
        if (o->force_think) {
            sample_think_init(&q->think, &q->cons, o->force_think);
            sample_think_constraint(&q->think_cons, &q->think);
            p.constraint = &q->think_cons;
        } else if (server_gen_harmony(r->model)) { /* the answer on the final channel */
            sample_lead_init(&q->lead, "<|channel|>final<|message|>", &q->cons);
            sample_lead_constraint(&q->lead_cons, &q->lead);
            p.constraint = &q->lead_cons;
        }
    }
    if (o->force_tools) {
        if (force_setup(q, r, o, msg, sizeof msg)) {
            server_req_free(q);
            *rc = server_error(c, o->ollama, 400, "invalid_request_error", msg, "tool_choice");
            return NULL;
        }
        p.constraint = &q->cons;
    }
    q->t_submit = server_now();
    q->spec = r->srv->cfg.spec.type != KILN_SPEC_NONE;
    /* the gate: urgent requests first; a client that leaves while it waits
     * gives its turn up */
    kiln_status st = engine_llm_begin(r->eng, &p, o->urgent, NULL, conn_gone, c, &q->er);
    if (st != KILN_OK) {
        snprintf(msg, sizeof msg, "%s", kiln_last_error());
        server_req_free(q);
        *rc = st == KILN_ERR_CANCELLED     ? MHD_NO
              : st == KILN_ERR_STATE       ? server_error(c, o->ollama, 503, "unavailable_error", msg, NULL)
              : st == KILN_ERR_INVALID_ARG ? server_error(c, o->ollama, 400, "invalid_request_error", msg, NULL)
                                           : server_error(c, o->ollama, 500, "server_error", msg, NULL);
        return NULL;
    }
    q->gr = engine_llm_events(q->er);
    return q;
}

/* ---- the loop: a generation through its shape's writer ---- */

/* indexed by SERVER_F_* */
static const server_xw_ops *const shapes[] = {&server_oai_chat_ops, &server_oai_compl_ops, &server_oll_gen_ops,
                                              &server_oll_chat_ops, &server_resp_ops,      &server_msg_ops};
_Static_assert(sizeof shapes / sizeof *shapes == SERVER_F_COUNT, "a writer per shape");

typedef struct run {
    server_model *r;
    server_req *q;
    server_gen g;
    server_xw w;
    double keep_alive;
    server_reqlog *log; /* the request's log line */
} run;

static void on_text(server_gen *g, int kind, const char *s, size_t n, void *user) {
    run *u = user;
    u->w.ops->text(&u->w, kind, s, n);
}

static void on_tool(server_gen *g, int index, json_t *call, void *user) {
    run *u = user;
    u->w.ops->call(&u->w, index, call);
}

static void on_tool_part(server_gen *g, int index, const char *name, const char *args, size_t n, void *user) {
    run *u = user;
    if (name)
        u->w.ops->tool_open(&u->w, name);
    else
        u->w.ops->tool_args(&u->w, args, n);
}

/* The writer learns how it ended, then closes. */
static void finish(run *u) {
    server_xw *w = &u->w;
    w->finish = u->g.finish;
    w->stop_seq = u->g.stop_hit >= 0 ? json_string_value(json_array_get(u->g.stops, (size_t)u->g.stop_hit)) : NULL;
    w->n_prompt = u->q->n_prompt;
    w->n_cached = u->q->n_cached;
    w->n_gen = u->g.n_gen;
    if (u->g.finish == SERVER_FIN_ERROR)
        w->ops->fail(w, u->g.err[0] ? u->g.err : "generation failed");
    else
        w->ops->finish(w);
}

static void run_free(run *u) {
    server_metrics_tokens(u->q->n_prompt, u->q->n_cached, u->g.n_gen);
    /* the line goes out before the admission ends: it precedes any unload
     * or stop this request's end lets happen */
    server_reqlog_tokens(u->log, u->q->n_prompt, u->g.n_gen);
    server_reqlog_emit(u->log);
    server_reqlog_put(u->log);
    json_decref(u->g.stops); /* the run holds a reference (see server_run) */
    server_gen_free(&u->g);
    server_req_free(u->q); /* cancels it when it is still running */
    server_model_done(u->r, u->keep_alive);
    server_xw_free(&u->w);
    free(u);
}

static int run_fill(server_stream *st) {
    run *u = st->user;
    /* wait for output in short slices so a gone client is noticed */
    for (int i = 0; i < 50 && st->out.len == 0; i++) {
        if (server_gen_pump(&u->g, u->q, 100)) {
            finish(u);
            return 1;
        }
        if (st->out.len == 0 && server_conn_gone(st->conn)) return 1;
    }
    if (st->out.len == 0 && u->w.ops->ping) u->w.ops->ping(&u->w);
    return 0;
}

static void run_cleanup(server_stream *st) { run_free(st->user); }

int server_run(server_srv *s, server_model *r, struct MHD_Connection *c, server_req *q, const server_run_args *a,
               const server_gen_opts *o) {
    const server_xw_ops *ops = shapes[a->format];
    run *u = calloc(1, sizeof *u);
    server_stream *st = a->stream ? calloc(1, sizeof *st) : NULL;
    if (!u || (a->stream && !st)) {
        free(u);
        free(st);
        server_req_free(q);
        server_model_done(r, a->keep_alive);
        return server_send_error_body(c, 500, server_error_body(ops->api, "server_error", "out of memory", NULL));
    }
    u->r = r;
    u->q = q;
    u->keep_alive = a->keep_alive;
    u->log = server_reqlog_hold(server_reqlog_current());
    /* the response's id: its shape's prefix, the time, then a counter */
    static atomic_uint_fast64_t counter;
    const long created = (long)server_wall();
    char serial[40];
    snprintf(serial, sizeof serial, "%lx%llx", created, (unsigned long long)atomic_fetch_add(&counter, 1));
    server_xw *w = &u->w;
    server_xw_init(w, ops, "", serial, a->model && *a->model ? a->model : r->name, st ? &st->out : NULL);
    snprintf(w->id, sizeof w->id, "%s%s", ops->id_prefix, serial);
    w->created = created;
    w->echo = a->echo ? json_deep_copy(a->echo) : NULL;
    w->g = &u->g;
    w->q = q;
    /* the request's clock starts where server_start handed it to the engine:
     * the scheduler may begin its prefill (q->t_start) before this line */
    w->t0 = q->t_submit > 0 ? q->t_submit : server_now();
    w->load_wait = a->load_wait;
    w->include_usage = a->include_usage;
    w->n_prompt = q->n_prompt;
    server_gen_init(&u->g, r->model, a->start_think);
    if (json_is_string(o->stop)) { /* one string: wrap it */
        u->g.stops = json_array();
        json_array_append(u->g.stops, o->stop);
    } else if (o->stop) {
        u->g.stops = json_incref(o->stop);
    }
    if (ops->flags & SERVER_XW_LOGPROBS) u->g.want_logprobs = o->logprobs;
    server_gen_tools(&u->g, a->tools);
    server_gen_format(&u->g, server_model_callfmt(r));
    /* What the output is split into, as the references do: completions are
     * raw text (harmony's headers too); reasoning is split unless Ollama's
     * think is false; a call is a call only when the request offered tools
     * and the shape takes calls. */
    u->g.split_think = !(ops->flags & SERVER_XW_RAW) && !a->think_off;
    u->g.split_tools = (ops->flags & SERVER_XW_CALLS) && a->has_tools;
    if (ops->flags & SERVER_XW_RAW) u->g.harmony = 0;
    u->g.on_text = on_text;
    u->g.on_tool = ops->call ? on_tool : NULL;
    if ((ops->flags & SERVER_XW_PARTS) && (st || !(ops->flags & SERVER_XW_PARTS_STREAM)))
        u->g.on_tool_part = on_tool_part;
    u->g.user = u;
    if (st) {
        if (ops->start) ops->start(w);
        st->fill = run_fill;
        st->cleanup = run_cleanup;
        st->user = u;
        return server_send_stream(c, ops->mime, st);
    }
    while (!server_gen_pump(&u->g, u->q, 100)) {
        if (server_conn_gone(c)) {
            run_free(u);
            return MHD_NO;
        }
    }
    finish(u);
    /* a result the writer could not make: the reply did not fit in memory */
    const char *err = u->g.finish == SERVER_FIN_ERROR ? (u->g.err[0] ? u->g.err : "generation failed")
                      : !w->result                    ? "out of memory"
                                                      : NULL;
    const int rc = err ? server_send_error_body(c, 500, server_error_body(ops->api, "server_error", err, NULL))
                       : server_send_json(c, 200, json_incref(w->result));
    run_free(u);
    return rc;
}

/* ---- the Responses and Messages endpoints ---- */

static const char *status_type(int status) {
    return status == 404   ? "not_found_error"
           : status == 400 ? "invalid_request_error"
           : status == 503 ? "unavailable_error"
           : status == 413 ? "request_too_large"
                           : "server_error";
}

static int run_model(server_srv *s, struct MHD_Connection *c, json_t *body, int resp, int count, server_xreq *xp,
                     server_gen_opts *op);

/* Shared by both APIs: count only (Messages' count_tokens) or run. */
static int handle(server_srv *s, struct MHD_Connection *c, json_t *body, int resp, int count) {
    server_xreq x;
    char err[600];
    const char *param = NULL;
    int rc = resp ? server_resp_translate(body, &x, err, sizeof err, &param)
                  : server_msg_translate(body, count, &x, err, sizeof err, &param);
    if (rc) {
        server_xreq_free(&x);
        return server_send_error(c, 400, "invalid_request_error", err, param);
    }
    server_gen_opts o;
    if (server_parse_opts(c, x.chat, 0, &o, &rc)) {
        server_xreq_free(&x);
        return rc;
    }
    int off = 0;
    json_t *force = NULL;
    if (server_tool_choice(json_object_get(x.chat, "tool_choice"), json_object_get(x.chat, "tools"), &off, &force, err,
                           sizeof err)) {
        server_xreq_free(&x);
        return server_send_error(c, 400, "invalid_request_error", err, "tool_choice");
    }
    o.force_tools = force;
    rc = run_model(s, c, body, resp, count, &x, &o);
    json_decref(force); /* a started request keeps its own copies */
    server_xreq_free(&x);
    return rc;
}

static int run_model(server_srv *s, struct MHD_Connection *c, json_t *body, int resp, int count, server_xreq *xp,
                     server_gen_opts *op) {
    server_xreq x = *xp; /* freed by the caller */
    server_gen_opts o = *op;
    char err[600];
    int rc = MHD_NO;
    const char *name = json_string_value(json_object_get(body, "model"));
    double load_wait = 0;
    int status = 404;
    server_model *r = server_model_use(s, name, SERVER_TASK_GENERATE, &load_wait, &status, err, sizeof err);
    server_reqlog_model(server_reqlog_current(), r ? r->name : name);
    if (!r) return server_send_error(c, status, status_type(status), err, "model");
    if (server_defaults_opts(r, c, x.chat, 0, &o, &rc)) { /* a store pack's options under the request's */
        server_model_done(r, NAN);
        return rc;
    }
    json_t *tools = json_object_get(x.chat, "tools");
    server_media media;
    json_t *marked = NULL; /* the messages with a marker per image, when any has one */
    int mstatus = 400;
    if (server_media_chat(r, json_object_get(x.chat, "messages"), &marked, &media, &mstatus, err, sizeof err) < 0) {
        server_model_done(r, NAN);
        return server_send_error(c, mstatus, status_type(mstatus), err,
                                 mstatus == 500 ? NULL
                                 : resp         ? "input"
                                                : "messages");
    }
    json_t *msgs = server_defaults_messages(r, marked ? marked : json_object_get(x.chat, "messages"));
    json_decref(marked);
    const chat_opts ro = {.cancelled = server_conn_gone_fn, .cancel_arg = c}; /* stops when the client goes */
    char *prompt = server_render_chat(r, msgs, tools, x.think, &ro, err, sizeof err);
    json_decref(msgs);
    if (!prompt) {
        server_media_free(&media);
        server_model_done(r, NAN);
        const int code = server_render_status(err);
        return server_send_error(c, code, code == 500 ? "server_error" : "invalid_request_error", err,
                                 code == 500 ? NULL : "messages");
    }
    int32_t n = 0;
    int32_t *ids = NULL;
    server_prompt_media pm = {0}; /* the image tokens' rows */
    if (media.n && server_media_prompt(r, prompt, &media, &ids, &n, &pm, &mstatus, err, sizeof err)) {
        server_media_free(&media);
        free(prompt);
        server_model_done(r, NAN);
        return server_send_error(c, mstatus, status_type(mstatus), err,
                                 mstatus == 500 ? NULL
                                 : resp         ? "input"
                                                : "messages");
    }
    if (!media.n) ids = server_tokenize(r->model, prompt, 1, &n);
    server_media_free(&media);
    int start_think = server_prompt_opens_think(prompt);
    o.force_think = server_force_think(r, prompt, 0);
    free(prompt);
    if (!ids) {
        server_model_done(r, NAN);
        return server_send_error(c, 500, "server_error", "tokenization failed", NULL);
    }
    if (count) {
        free(ids);
        free(pm.embd);
        free(pm.mpos);
        server_model_done(r, NAN);
        return server_send_json(c, 200, json_pack("{s:i}", "input_tokens", (int)n));
    }
    server_req *q = server_start(r, c, ids, n, &pm, &o, &rc);
    if (!q) {
        server_model_done(r, NAN);
        return rc;
    }
    server_run_args a = {.format = resp ? SERVER_F_RESP : SERVER_F_MSG,
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
     * the run references (server_run takes its own) before x goes */
    return server_run(s, r, c, q, &a, &o);
}

int server_resp_handle(server_srv *s, struct MHD_Connection *c, json_t *body) { return handle(s, c, body, 1, 0); }

int server_msg_handle(server_srv *s, struct MHD_Connection *c, json_t *body, int count) {
    return handle(s, c, body, 0, count);
}
