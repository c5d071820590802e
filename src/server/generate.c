/* The generation endpoints both APIs share: chat (a rendered template) and
 * generate/completion (text or token ids), each through server_run. */
#include "server/generate.h"
#include "server/buf.h"
#include "server/defaults.h"
#include "server/deltas.h"
#include "server/log.h"
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

/* Finds and loads the request's model; sends the error itself. */
static server_model *open_model(server_srv *s, struct MHD_Connection *c, json_t *body, int ollama, double *load_wait,
                                int *rc) {
    json_t *mv = json_object_get(body, "model");
    if (mv && !json_is_string(mv)) {
        *rc = ollama ? server_oll_error(c, 400, "'model' must be a string")
                     : server_send_error(c, 400, "invalid_request_error", "'model' must be a string", "model");
        return NULL;
    }
    int32_t num_ctx = 0; /* Ollama's: the context the model is (re)loaded with */
    if (ollama && server_num_ctx(json_object_get(body, "options"), &num_ctx)) {
        *rc = server_oll_error(c, 400, "'num_ctx' must be an integer of 1 to 16777216 tokens");
        return NULL;
    }
    int status = 404;
    char msg[600];
    server_model *r = server_model_use_ctx(s, json_string_value(mv), SERVER_TASK_GENERATE, num_ctx, load_wait, &status,
                                           msg, sizeof msg);
    server_reqlog_model(server_reqlog_current(), r ? r->name : json_string_value(mv));
    if (!r) {
        const char *type = status == 404   ? "not_found_error"
                           : status == 400 ? "invalid_request_error"
                           : status == 503 ? "unavailable_error"
                                           : "server_error";
        *rc = ollama ? server_oll_error(c, status, msg) : server_send_error(c, status, type, msg, "model");
        return NULL;
    }
    return r;
}

/* What a message carries besides text and images ("audio"), or NULL:
 * an OpenAI content part that is neither.  Images are media.c's. */
static const char *media_of(json_t *m) {
    json_t *parts = json_object_get(m, "content");
    size_t i;
    json_t *part;
    json_array_foreach(parts, i, part) {
        const char *t = json_string_value(json_object_get(part, "type"));
        if (t && strstr(t, "audio")) return "audio";
    }
    return NULL;
}

/* A request the model cannot serve as asked is a 400, never a silent
 * drop: audio (every model kiln generates with takes none; images are
 * refused by media.c for a model without a projector), Ollama's think:
 * true to a model without thinking (Ollama's rule: its template has no
 * <think>).  messages: the chat's, or NULL for a generate body.  Returns 1
 * after sending the error. */
static int cannot_serve(server_model *r, struct MHD_Connection *c, json_t *body, json_t *messages, int ollama,
                        int *rc) {
    const char *media = NULL;
    size_t i;
    json_t *m;
    json_array_foreach(messages, i, m) if (!media) media = media_of(m);
    char msg[400];
    if (media) {
        snprintf(msg, sizeof msg, "\"%s\" does not accept %s: kiln runs it as a text-only model", r->name, media);
        *rc = server_error(c, ollama, 400, "invalid_request_error", msg, "messages");
        return 1;
    }
    const char *tmpl = server_template_text(r);
    json_t *think = json_object_get(body, "think");
    if (ollama && (json_is_true(think) || json_is_string(think)) && !(tmpl && strstr(tmpl, "<think>"))) {
        snprintf(msg, sizeof msg, "\"%s\" does not support thinking", r->name);
        *rc = server_oll_error(c, 400, msg);
        return 1;
    }
    return 0;
}

/* A refusal of server_media_chat / server_media_list in the API's shape. */
static int media_error(struct MHD_Connection *c, int ollama, int status, const char *msg, const char *param) {
    return server_error(c, ollama, status,
                        status == 500   ? "server_error"
                        : status == 413 ? "request_too_large"
                                        : "invalid_request_error",
                        msg, status == 500 ? NULL : param);
}

static int chat_run(server_srv *s, struct MHD_Connection *c, json_t *body, int format, json_t *force, int tools_off);

/* Ollama's "think": a boolean, or a level ("low", "medium", "high"), which
 * turns thinking on with that effort's budget (server_effort_budget).  -1
 * after a 400 for a word it does not know. */
static int think_level(json_t *think, server_gen_opts *o, struct MHD_Connection *c, int *rc) {
    if (!json_is_string(think)) return 0;
    const char *level = json_string_value(think);
    const int32_t b = server_effort_budget(level);
    if (strcmp(level, "low") && strcmp(level, "medium") && strcmp(level, "high")) {
        *rc = server_oll_error(c, 400, "'think' must be true, false, \"low\", \"medium\" or \"high\"");
        return -1;
    }
    o->think_budget = b;
    return 0;
}

/* Shared by /v1/chat/completions and /api/chat. */
int server_chat_common(server_srv *s, struct MHD_Connection *c, json_t *body, int format) {
    int tools_off = 0, rc = MHD_NO;
    json_t *force = NULL;
    char msg[300];
    if (format != SERVER_F_OLL_CHAT &&
        server_tool_choice(json_object_get(body, "tool_choice"), json_object_get(body, "tools"), &tools_off, &force,
                           msg, sizeof msg))
        return server_error(c, 0, 400, "invalid_request_error", msg, "tool_choice");
    rc = chat_run(s, c, body, format, force, tools_off);
    json_decref(force); /* a started request keeps its own copies */
    return rc;
}

static int chat_run(server_srv *s, struct MHD_Connection *c, json_t *body, int format, json_t *force, int tools_off) {
    int ollama = format == SERVER_F_OLL_CHAT, rc = MHD_NO;
    server_gen_opts o;
    json_t *optsrc = ollama ? json_object_get(body, "options") : body;
    if (server_parse_opts(c, optsrc, ollama, &o, &rc)) return rc;
    o.force_tools = force;
    if (ollama) {
        json_t *fmt = json_object_get(body, "format");
        if (server_oll_format(fmt, &o, c, &rc)) return rc;
    }
    json_t *messages = json_object_get(body, "messages");
    if (!json_is_array(messages) || !json_array_size(messages))
        return ollama ? server_oll_error(c, 400, "'messages' must be a non-empty array")
                      : server_send_error(c, 400, "invalid_request_error", "'messages' must be a non-empty array",
                                          "messages");
    o.urgent = json_is_true(json_object_get(body, "urgent"));
    o.ignore_eos |= json_is_true(json_object_get(body, "ignore_eos"));
    double load_wait = 0;
    server_model *r = open_model(s, c, body, ollama, &load_wait, &rc);
    if (!r) return rc;
    if (server_defaults_opts(r, c, optsrc, ollama, &o, &rc)) { /* a store pack's options under the request's */
        server_model_done(r, NAN);
        return rc;
    }
    if (cannot_serve(r, c, body, messages, ollama, &rc)) {
        server_model_done(r, ollama ? server_parse_duration(json_object_get(body, "keep_alive")) : NAN);
        return rc;
    }
    server_media media;
    json_t *marked = NULL; /* messages with a marker per image, when any has one */
    int mstatus = 400;
    char merr[400];
    if (server_media_chat(r, messages, &marked, &media, &mstatus, merr, sizeof merr) < 0) {
        server_model_done(r, ollama ? server_parse_duration(json_object_get(body, "keep_alive")) : NAN);
        return media_error(c, ollama, mstatus, merr, "messages");
    }
    if (marked) messages = marked;
    json_t *think = json_object_get(body, "think");
    int th = json_is_boolean(think) ? json_is_true(think) : json_is_string(think) ? 1 : -1;
    if (ollama && think_level(think, &o, c, &rc)) {
        json_decref(marked);
        server_media_free(&media);
        server_model_done(r, server_parse_duration(json_object_get(body, "keep_alive")));
        return rc;
    }
    json_t *kw = json_object_get(body, "chat_template_kwargs");
    if (json_is_boolean(json_object_get(kw, "enable_thinking")))
        th = json_is_true(json_object_get(kw, "enable_thinking"));
    char err[300];
    json_t *tools = json_object_get(body, "tools");
    if (tools_off) tools = NULL;
    json_t *msgs = server_defaults_messages(r, messages);                     /* and its system prompt */
    const chat_opts ro = {.cancelled = server_conn_gone_fn, .cancel_arg = c}; /* stops when the client goes */
    char *prompt = server_render_chat(r, msgs, tools, th, &ro, err, sizeof err);
    json_decref(msgs);
    json_decref(marked);
    double ka = ollama ? server_parse_duration(json_object_get(body, "keep_alive")) : NAN;
    if (!prompt) {
        server_media_free(&media);
        server_model_done(r, ka);
        const int code = server_render_status(err);
        return server_error(c, ollama, code, code == 500 ? "server_error" : "invalid_request_error", err,
                            code == 500 ? NULL : "messages");
    }
    int32_t n = 0;
    server_prompt_media pm = {0}; /* the image tokens' rows */
    int32_t *ids = NULL;
    if (media.n) {
        if (server_media_prompt(r, prompt, &media, &ids, &n, &pm, &mstatus, merr, sizeof merr)) {
            server_media_free(&media);
            free(prompt);
            server_model_done(r, ka);
            return media_error(c, ollama, mstatus, merr, "messages");
        }
    } else {
        ids = server_tokenize(r->model, prompt, 1, &n);
    }
    server_media_free(&media);
    o.force_think = server_force_think(r, prompt, ollama && th == 0);
    server_run_args a = {.format = format,
                         .stream = 1,
                         .include_usage = 0,
                         .start_think = server_prompt_opens_think(prompt),
                         .keep_alive = ka,
                         .model = json_string_value(json_object_get(body, "model")),
                         .think_off = ollama && th == 0,
                         .has_tools = json_is_array(tools) && json_array_size(tools) > 0,
                         .load_wait = 0,
                         .tools = tools,
                         .echo = NULL};
    free(prompt);
    json_t *stream = json_object_get(body, "stream");
    a.stream = ollama ? !json_is_false(stream) : json_is_true(stream);
    a.include_usage = json_is_true(json_object_get(json_object_get(body, "stream_options"), "include_usage"));
    a.load_wait = load_wait;
    server_req *q = ids ? server_start(r, c, ids, n, &pm, &o, &rc) : NULL;
    if (!ids) rc = server_error(c, ollama, 500, "server_error", "tokenization failed", NULL);
    if (!q) {
        server_model_done(r, ka);
        return rc;
    }
    return server_run(s, r, c, q, &a, &o);
}

int server_generate_common(server_srv *s, struct MHD_Connection *c, json_t *body, int format, const char *prompt_text,
                           json_t *prompt_ids, server_gen_opts *o, double ka) {
    int ollama = format == SERVER_F_OLL_GEN, rc = MHD_NO;
    o->urgent = json_is_true(json_object_get(body, "urgent"));
    o->ignore_eos |= json_is_true(json_object_get(body, "ignore_eos"));
    double load_wait = 0;
    server_model *r = open_model(s, c, body, ollama, &load_wait, &rc);
    if (!r) return rc;
    if (server_defaults_opts(r, c, ollama ? json_object_get(body, "options") : body, ollama, o, &rc)) {
        server_model_done(r, ka);
        return rc;
    }
    if (cannot_serve(r, c, body, NULL, ollama, &rc)) {
        server_model_done(r, ka);
        return rc;
    }
    server_media media;
    int mstatus = 400;
    char merr[400];
    if (server_media_list(r, json_object_get(body, "images"), &media, &mstatus, merr, sizeof merr) < 0) {
        server_model_done(r, ka);
        return media_error(c, ollama, mstatus, merr, "images");
    }
    if (media.n && prompt_ids) {
        server_media_free(&media);
        server_model_done(r, ka);
        return server_error(c, ollama, 400, "invalid_request_error", "images go with a text prompt, not token ids",
                            "prompt");
    }
    int32_t n = 0, *ids = NULL;
    server_prompt_media pm = {0}; /* the image tokens' rows */
    char *rendered = NULL;
    int start_think = 0;
    if (prompt_ids) {
        n = (int32_t)json_array_size(prompt_ids);
        ids = malloc(((size_t)n + 1) * sizeof *ids);
        for (int32_t i = 0; ids && i < n; i++) {
            json_int_t v = json_integer_value(json_array_get(prompt_ids, (size_t)i));
            if (v < 0 || v >= r->n_vocab) {
                free(ids);
                server_model_done(r, ka);
                return server_error(c, ollama, 400, "invalid_request_error", "a prompt token id is out of range",
                                    "prompt");
            }
            ids[i] = (int32_t)v;
        }
    } else {
        const char *text = prompt_text;
        /* Ollama applies the chat template to a plain prompt unless raw */
        if (ollama && server_has_chat(r) && !json_is_true(json_object_get(body, "raw"))) {
            json_t *msgs = json_array();
            const char *sys = json_string_value(json_object_get(body, "system"));
            if (!sys) sys = server_defaults_system(r);
            if (sys) json_array_append_new(msgs, json_pack("{s:s,s:s}", "role", "system", "content", sys));
            /* each image a marker before the text, as a chat message's images */
            server_buf user = {0};
            for (int32_t k = 0; k < media.n; k++) server_buf_puts(&user, SERVER_MEDIA_MARKER);
            server_buf_puts(&user, prompt_text);
            json_array_append_new(msgs,
                                  json_pack("{s:s,s:s%}", "role", "user", "content", user.p ? user.p : "", user.len));
            server_buf_free(&user);
            json_t *think = json_object_get(body, "think");
            char err[300];
            if (think_level(think, o, c, &rc)) {
                json_decref(msgs);
                server_media_free(&media);
                server_model_done(r, ka);
                return rc;
            }
            const chat_opts ro = {.cancelled = server_conn_gone_fn, .cancel_arg = c};
            rendered = server_render_chat(r, msgs, NULL,
                                          json_is_boolean(think)  ? json_is_true(think)
                                          : json_is_string(think) ? 1
                                                                  : -1,
                                          &ro, err, sizeof err);
            json_decref(msgs);
            if (!rendered) {
                server_media_free(&media);
                server_model_done(r, ka);
                return server_oll_error(c, server_render_status(err), err);
            }
            text = rendered;
            start_think = server_prompt_opens_think(rendered);
            o->force_think = server_force_think(r, rendered, json_is_false(think));
        }
        /* special-token text in a raw prompt is the token, as llama.cpp reads it; a raw
         * prompt's images go before its text */
        if (media.n && server_media_prompt(r, text, &media, &ids, &n, &pm, &mstatus, merr, sizeof merr)) {
            server_media_free(&media);
            free(rendered);
            server_model_done(r, ka);
            return media_error(c, ollama, mstatus, merr, "images");
        }
        if (!media.n) ids = server_tokenize(r->model, text, 1, &n);
    }
    server_media_free(&media);
    free(rendered);
    if (!ids) {
        server_model_done(r, ka);
        return server_error(c, ollama, 500, "server_error", "tokenization failed", NULL);
    }
    server_req *q = server_start(r, c, ids, n, &pm, o, &rc);
    if (!q) {
        server_model_done(r, ka);
        return rc;
    }
    json_t *stream = json_object_get(body, "stream");
    server_run_args a = {.format = format,
                         .stream = ollama ? !json_is_false(stream) : json_is_true(stream),
                         .include_usage =
                             json_is_true(json_object_get(json_object_get(body, "stream_options"), "include_usage")),
                         .start_think = start_think,
                         .keep_alive = ka,
                         .model = json_string_value(json_object_get(body, "model")),
                         .think_off = ollama && json_is_false(json_object_get(body, "think")),
                         .has_tools = 0,
                         .load_wait = load_wait,
                         .tools = NULL,
                         .echo = NULL};
    return server_run(s, r, c, q, &a, o);
}
