/* The response writers (write.h): their common part (a response id, its
 * blocks, SSE events with a name, a whole call given in parts) and the
 * OpenAI chat and completions shapes (SSE "data:" chunks ending with
 * [DONE]) and Ollama's chat and generate shapes (NDJSON).  Responses' and
 * Messages' writers live beside their request translation (responses.c,
 * messages.c). */
#include "server/write.h"

#include "server/buf.h"
#include "server/deltas.h"
#include "server/reply.h"
#include "kiln.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- the common part ---- */

void server_xw_init(server_xw *w, const server_xw_ops *ops, const char *prefix, const char *serial, const char *model,
                    server_buf *out) {
    memset(w, 0, sizeof *w);
    w->ops = ops;
    w->out = out;
    snprintf(w->serial, sizeof w->serial, "%s", serial);
    snprintf(w->id, sizeof w->id, "%s_%s", prefix, serial);
    snprintf(w->model, sizeof w->model, "%s", model ? model : "");
    w->created = (long)server_wall();
    w->open = SERVER_XB_NONE;
    w->items = json_array();
    w->calls = json_array();
}

void server_xw_free(server_xw *w) {
    json_decref(w->echo);
    json_decref(w->cur);
    json_decref(w->items);
    json_decref(w->calls);
    json_decref(w->result);
    server_buf_free(&w->acc);
    server_buf_free(&w->content);
    server_buf_free(&w->reasoning);
    memset(w, 0, sizeof *w);
}

void server_xw_event(server_xw *w, const char *name, json_t *j) {
    if (w->out) {
        server_buf_printf(w->out, "event: %s\ndata: ", name);
        server_buf_json(w->out, j);
        server_buf_puts(w->out, "\n\n");
    }
    json_decref(j);
}

void server_xw_opened(server_xw *w, int kind, json_t *blk) {
    w->open = kind;
    w->cur = blk;
}

void server_xw_closed(server_xw *w) {
    json_array_append_new(w->items, w->cur);
    w->cur = NULL;
    w->open = SERVER_XB_NONE;
    w->acc.len = 0;
}

void server_xw_call_parts(server_xw *w, int index, json_t *call) {
    const char *name = json_string_value(json_object_get(call, "name"));
    w->ops->tool_open(w, name ? name : "");
    size_t n;
    const char *text = server_gen_args_text(w->g, &n);
    if (text) {
        w->ops->tool_args(w, text, n);
    } else {
        char *args = json_dumps(json_object_get(call, "arguments"), JSON_COMPACT | JSON_ENCODE_ANY);
        w->ops->tool_args(w, args ? args : "{}", args ? strlen(args) : 2);
        free(args);
    }
}

/* Not streaming, OpenAI and Ollama keep the reply's text for the end. */
static void keep_text(server_xw *w, int kind, const char *s, size_t n) {
    server_buf_put(kind == SERVER_D_REASONING ? &w->reasoning : &w->content, s, n);
}

/* ---- OpenAI chat and completions ---- */

static const char *finish_str(const server_xw *w, int chat) {
    if (w->g->finish == SERVER_FIN_LENGTH) return "length";
    if (server_fin_incomplete(w->g->finish)) return server_fin_incomplete(w->g->finish);
    if (w->g->n_tools && chat) return "tool_calls";
    return "stop";
}

/* A call's id: unique per response (the response id's serial, then the
 * call's index), so tool results of different turns can't be mixed up. */
static void call_id(const server_xw *w, int index, char *buf, size_t cap) {
    snprintf(buf, cap, "call_%s_%d", w->serial, index);
}

/* A whole call, OpenAI-shaped.  The arguments are the text as the model
 * wrote it when the scanner has it (as a stream joins it), else the parsed
 * value serialized. */
static json_t *oai_tool(const server_xw *w, int index, json_t *call, int with_index) {
    json_t *fn = json_object();
    json_object_set(fn, "name", json_object_get(call, "name"));
    size_t n;
    const char *text = server_gen_args_text(w->g, &n);
    if (text) {
        json_object_set_new(fn, "arguments", server_jstr(text, n));
    } else {
        char *args = json_dumps(json_object_get(call, "arguments"), JSON_COMPACT | JSON_ENCODE_ANY);
        json_object_set_new(fn, "arguments", json_string(args ? args : "{}"));
        free(args);
    }
    json_t *t = json_object();
    if (with_index) json_object_set_new(t, "index", json_integer(index));
    char id[80];
    call_id(w, index, id, sizeof id);
    json_object_set_new(t, "id", json_string(id));
    json_object_set_new(t, "type", json_string("function"));
    json_object_set_new(t, "function", fn);
    return t;
}

static json_t *usage(const server_xw *w) {
    json_t *j = json_object();
    json_object_set_new(j, "prompt_tokens", json_integer(w->q->n_prompt));
    json_object_set_new(j, "completion_tokens", json_integer(w->g->n_gen));
    json_object_set_new(j, "total_tokens", json_integer(w->q->n_prompt + w->g->n_gen));
    json_t *d = json_object();
    json_object_set_new(d, "cached_tokens", json_integer(w->q->n_cached));
    json_object_set_new(j, "prompt_tokens_details", d);
    return j;
}

/* llama.cpp's per-request "timings" (milliseconds), with the draft counts
 * (draft_n proposed, draft_n_accepted) when the model speculates. */
static json_t *timings(const server_xw *w) {
    const server_req *q = w->q;
    const double now = server_now();
    const double t_first = q->t_first > 0 ? q->t_first : now;
    const double t_start = q->t_start > 0 ? q->t_start : w->t0;
    const double p_ms = (t_first - t_start) * 1e3, g_ms = (now - t_first) * 1e3;
    const int32_t p_n = q->n_prompt - q->n_cached, g_n = w->g->n_gen;
    json_t *j = json_object();
    json_object_set_new(j, "cache_n", json_integer(q->n_cached));
    json_object_set_new(j, "prompt_n", json_integer(p_n));
    json_object_set_new(j, "prompt_ms", json_real(p_ms));
    json_object_set_new(j, "prompt_per_token_ms", json_real(p_n > 0 ? p_ms / p_n : 0));
    json_object_set_new(j, "prompt_per_second", json_real(p_ms > 0 ? 1e3 * p_n / p_ms : 0));
    json_object_set_new(j, "predicted_n", json_integer(g_n));
    json_object_set_new(j, "predicted_ms", json_real(g_ms));
    json_object_set_new(j, "predicted_per_token_ms", json_real(g_n > 0 ? g_ms / g_n : 0));
    json_object_set_new(j, "predicted_per_second", json_real(g_ms > 0 ? 1e3 * g_n / g_ms : 0));
    if (q->spec) {
        json_object_set_new(j, "draft_n", json_integer(q->n_drafted));
        json_object_set_new(j, "draft_n_accepted", json_integer(q->n_accepted));
    }
    return j;
}

static json_t *oai_base(const server_xw *w, const char *object) {
    json_t *j = json_object();
    json_object_set_new(j, "id", json_string(w->id));
    json_object_set_new(j, "object", json_string(object));
    json_object_set_new(j, "created", json_integer(w->created));
    json_object_set_new(j, "model", json_string(w->model));
    json_object_set_new(j, "system_fingerprint", json_string("kiln-" KILN_VERSION));
    return j;
}

/* Legacy completions logprobs from the chat-shaped entries. */
static json_t *legacy_logprobs(json_t *entries) {
    json_t *tokens = json_array(), *lps = json_array(), *tops = json_array(), *offs = json_array();
    size_t i, off = 0;
    json_t *e;
    json_array_foreach(entries, i, e) {
        const char *tok = json_string_value(json_object_get(e, "token"));
        json_array_append(tokens, json_object_get(e, "token"));
        json_array_append(lps, json_object_get(e, "logprob"));
        json_t *m = json_object();
        size_t k;
        json_t *t;
        json_array_foreach(json_object_get(e, "top_logprobs"), k, t)
            json_object_set(m, json_string_value(json_object_get(t, "token")), json_object_get(t, "logprob"));
        json_array_append_new(tops, m);
        json_array_append_new(offs, json_integer((json_int_t)off));
        off += tok ? strlen(tok) : 0;
    }
    json_t *j = json_object();
    json_object_set_new(j, "tokens", tokens);
    json_object_set_new(j, "token_logprobs", lps);
    json_object_set_new(j, "top_logprobs", tops);
    json_object_set_new(j, "text_offset", offs);
    return j;
}

/* The logprobs gathered since the last chunk, in chat's or the legacy
 * completions' shape. */
static json_t *take_logprobs(server_xw *w, int chat) {
    if (!w->g->want_logprobs) return json_null();
    json_t *entries = w->g->logprobs;
    w->g->logprobs = json_array();
    if (!chat) {
        json_t *l = legacy_logprobs(entries);
        json_decref(entries);
        return l;
    }
    json_t *j = json_object();
    json_object_set_new(j, "content", entries);
    return j;
}

static void sse(server_xw *w, json_t *j) {
    server_buf_puts(w->out, "data: ");
    server_buf_json(w->out, j);
    server_buf_puts(w->out, "\n\n");
    json_decref(j);
}

/* One streamed chunk: a piece of text or reasoning, or a call (tool,
 * stolen; chat only). */
static void oai_delta(server_xw *w, int chat, int kind, const char *s, size_t n, json_t *tool) {
    json_t *j = oai_base(w, chat ? "chat.completion.chunk" : "text_completion");
    json_t *ch = json_object();
    json_object_set_new(ch, "index", json_integer(0));
    if (chat) {
        json_t *d = json_object();
        if (!w->sent_role) {
            json_object_set_new(d, "role", json_string("assistant"));
            w->sent_role = 1;
        }
        if (tool) {
            json_t *arr = json_array();
            json_array_append_new(arr, tool);
            json_object_set_new(d, "tool_calls", arr);
        } else {
            json_object_set_new(d, kind == SERVER_D_REASONING ? "reasoning_content" : "content", server_jstr(s, n));
        }
        json_object_set_new(ch, "delta", d);
    } else {
        json_object_set_new(ch, "text", server_jstr(s, n));
    }
    json_object_set_new(ch, "logprobs", take_logprobs(w, chat));
    json_object_set_new(ch, "finish_reason", json_null());
    json_t *arr = json_array();
    json_array_append_new(arr, ch);
    json_object_set_new(j, "choices", arr);
    sse(w, j);
}

static void oai_chat_text(server_xw *w, int kind, const char *s, size_t n) {
    if (w->out)
        oai_delta(w, 1, kind, s, n, NULL);
    else
        keep_text(w, kind, s, n);
}

static void oai_compl_text(server_xw *w, int kind, const char *s, size_t n) {
    if (w->out)
        oai_delta(w, 0, kind, s, n, NULL);
    else
        keep_text(w, kind, s, n);
}

static void oai_call(server_xw *w, int index, json_t *call) {
    if (w->out)
        oai_delta(w, 1, SERVER_D_CONTENT, "", 0, oai_tool(w, index, call, 1));
    else
        json_array_append_new(w->calls, oai_tool(w, index, call, 0));
}

/* OpenAI streams a call as it is written: {index, id, type, function:
 * {name, arguments: ""}} first, then {index, function: {arguments: piece}}
 * chunks whose pieces join into the arguments' JSON text. */
static void oai_tool_part(server_xw *w, const char *name, const char *args, size_t n) {
    const int index = w->g->n_tools; /* the call being written */
    json_t *fn = json_object();
    json_t *t = json_object();
    json_object_set_new(t, "index", json_integer(index));
    if (name) {
        char id[80];
        call_id(w, index, id, sizeof id);
        json_object_set_new(t, "id", json_string(id));
        json_object_set_new(t, "type", json_string("function"));
        json_object_set_new(fn, "name", server_jstr(name, strlen(name)));
    }
    json_object_set_new(fn, "arguments", server_jstr(args ? args : "", n));
    json_object_set_new(t, "function", fn);
    oai_delta(w, 1, SERVER_D_CONTENT, "", 0, t);
}

static void oai_tool_open(server_xw *w, const char *name) { oai_tool_part(w, name, NULL, 0); }

static void oai_tool_args(server_xw *w, const char *s, size_t n) { oai_tool_part(w, NULL, s, n); }

/* The stream's closing chunk(s), or the whole object. */
static void oai_finish(server_xw *w, int chat) {
    if (w->out) {
        json_t *j = oai_base(w, chat ? "chat.completion.chunk" : "text_completion");
        json_t *ch = json_object();
        json_object_set_new(ch, "index", json_integer(0));
        if (chat)
            json_object_set_new(ch, "delta", json_object());
        else
            json_object_set_new(ch, "text", json_string(""));
        json_object_set_new(ch, "logprobs", take_logprobs(w, chat));
        json_object_set_new(ch, "finish_reason", json_string(finish_str(w, chat)));
        json_t *arr = json_array();
        json_array_append_new(arr, ch);
        json_object_set_new(j, "choices", arr);
        json_object_set_new(j, "timings", timings(w));
        sse(w, j);
        if (w->include_usage) {
            j = oai_base(w, chat ? "chat.completion.chunk" : "text_completion");
            json_object_set_new(j, "choices", json_array());
            json_object_set_new(j, "usage", usage(w));
            sse(w, j);
        }
        server_buf_puts(w->out, "data: [DONE]\n\n");
        return;
    }
    if (w->content.failed || w->reasoning.failed) return; /* the text did not fit in memory: no cut answer */
    const char *content = w->content.p ? w->content.p : "";
    json_t *j = oai_base(w, chat ? "chat.completion" : "text_completion");
    json_t *ch = json_object();
    json_object_set_new(ch, "index", json_integer(0));
    if (chat) {
        json_t *m = json_object();
        json_object_set_new(m, "role", json_string("assistant"));
        /* a reply that is only tool calls has content null, as OpenAI's */
        size_t k = 0;
        while (k < w->content.len && strchr(" \t\r\n", content[k])) k++;
        const int calls_only = json_array_size(w->calls) && k == w->content.len;
        json_object_set_new(m, "content", calls_only ? json_null() : server_jstr(content, w->content.len));
        if (w->reasoning.len)
            json_object_set_new(m, "reasoning_content", server_jstr(w->reasoning.p, w->reasoning.len));
        if (json_array_size(w->calls)) json_object_set(m, "tool_calls", w->calls);
        json_object_set_new(ch, "message", m);
    } else {
        json_object_set_new(ch, "text", server_jstr(content, w->content.len));
    }
    json_object_set_new(ch, "logprobs", take_logprobs(w, chat));
    json_object_set_new(ch, "finish_reason", json_string(finish_str(w, chat)));
    json_t *arr = json_array();
    json_array_append_new(arr, ch);
    json_object_set_new(j, "choices", arr);
    json_object_set_new(j, "usage", usage(w));
    json_object_set_new(j, "timings", timings(w));
    w->result = j;
}

static void oai_chat_finish(server_xw *w) { oai_finish(w, 1); }

static void oai_compl_finish(server_xw *w) { oai_finish(w, 0); }

static void oai_fail(server_xw *w, const char *msg) {
    if (!w->out) return;
    json_t *e = json_object();
    json_object_set_new(e, "message", json_string(msg));
    json_object_set_new(e, "type", json_string("server_error"));
    json_t *j = json_object();
    json_object_set_new(j, "error", e);
    sse(w, j);
    server_buf_puts(w->out, "data: [DONE]\n\n");
}

static void oai_ping(server_xw *w) {
    if (w->out) server_buf_puts(w->out, ": keep-alive\n\n");
}

const server_xw_ops server_oai_chat_ops = {
    .id_prefix = "chatcmpl-",
    .mime = "text/event-stream",
    .api = SERVER_API_OPENAI,
    .flags = SERVER_XW_CALLS | SERVER_XW_PARTS | SERVER_XW_PARTS_STREAM | SERVER_XW_LOGPROBS,
    .start = NULL,
    .text = oai_chat_text,
    .call = oai_call,
    .tool_open = oai_tool_open,
    .tool_args = oai_tool_args,
    .finish = oai_chat_finish,
    .fail = oai_fail,
    .ping = oai_ping,
};

const server_xw_ops server_oai_compl_ops = {
    .id_prefix = "cmpl-",
    .mime = "text/event-stream",
    .api = SERVER_API_OPENAI,
    .flags = SERVER_XW_RAW | SERVER_XW_LOGPROBS,
    .start = NULL,
    .text = oai_compl_text,
    .call = NULL,
    .tool_open = NULL,
    .tool_args = NULL,
    .finish = oai_compl_finish,
    .fail = oai_fail,
    .ping = NULL,
};

/* ---- Ollama chat and generate ---- */

static char *iso_time(char *buf, size_t cap) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    gmtime_r(&ts.tv_sec, &tm);
    size_t n = strftime(buf, cap, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(buf + n, cap - n, ".%09ldZ", ts.tv_nsec);
    return buf;
}

static json_t *oll_base(const server_xw *w) {
    char t[64];
    json_t *j = json_object();
    json_object_set_new(j, "model", json_string(w->model));
    json_object_set_new(j, "created_at", json_string(iso_time(t, sizeof t)));
    return j;
}

static void ndjson(server_xw *w, json_t *j) {
    server_buf_json(w->out, j);
    server_buf_puts(w->out, "\n");
    json_decref(j);
}

static json_t *oll_tool(json_t *call) {
    json_t *fn = json_object();
    json_object_set(fn, "name", json_object_get(call, "name"));
    json_object_set(fn, "arguments", json_object_get(call, "arguments"));
    json_t *t = json_object();
    json_object_set_new(t, "function", fn);
    return t;
}

/* The reply's message: role, content, thinking and calls (tools, stolen;
 * NULL: none). */
static json_t *oll_message(const char *s, size_t n, const char *think, size_t n_think, json_t *tools) {
    json_t *m = json_object();
    json_object_set_new(m, "role", json_string("assistant"));
    json_object_set_new(m, "content", server_jstr(s, n));
    if (think) json_object_set_new(m, "thinking", server_jstr(think, n_think));
    if (tools) json_object_set_new(m, "tool_calls", tools);
    return m;
}

/* One streamed line: a piece of text or reasoning, or a call (tool,
 * stolen; chat only). */
static void oll_delta(server_xw *w, int chat, int kind, const char *s, size_t n, json_t *tool) {
    json_t *j = oll_base(w);
    const int text = kind == SERVER_D_CONTENT && !tool;
    const int think = kind == SERVER_D_REASONING;
    if (!chat) {
        json_object_set_new(j, "response", server_jstr(text ? s : "", text ? n : 0));
        if (think) json_object_set_new(j, "thinking", server_jstr(s, n));
    } else {
        json_t *arr = NULL;
        if (tool) {
            arr = json_array();
            json_array_append_new(arr, tool);
        }
        json_object_set_new(j, "message", oll_message(text ? s : "", text ? n : 0, think ? s : NULL, n, arr));
    }
    json_object_set_new(j, "done", json_false());
    ndjson(w, j);
}

static void oll_chat_text(server_xw *w, int kind, const char *s, size_t n) {
    if (w->out)
        oll_delta(w, 1, kind, s, n, NULL);
    else
        keep_text(w, kind, s, n);
}

static void oll_gen_text(server_xw *w, int kind, const char *s, size_t n) {
    if (w->out)
        oll_delta(w, 0, kind, s, n, NULL);
    else
        keep_text(w, kind, s, n);
}

/* Ollama sends whole calls, as Ollama does. */
static void oll_call(server_xw *w, int index, json_t *call) {
    if (w->out)
        oll_delta(w, 1, SERVER_D_CONTENT, "", 0, oll_tool(call));
    else
        json_array_append_new(w->calls, oll_tool(call));
}

static void oll_final_fields(const server_xw *w, json_t *j) {
    double now = server_now();
    const server_req *q = w->q;
    double t_first = q->t_first > 0 ? q->t_first : now;
    double t_start = q->t_start > 0 ? q->t_start : w->t0;
    json_object_set_new(j, "done", json_true());
    const char *done = w->g->finish == SERVER_FIN_LENGTH ? "length" : server_fin_incomplete(w->g->finish);
    json_object_set_new(j, "done_reason", json_string(done ? done : "stop"));
    json_object_set_new(j, "total_duration", json_integer((json_int_t)((now - w->t0 + w->load_wait) * 1e9)));
    json_object_set_new(j, "load_duration", json_integer((json_int_t)(w->load_wait * 1e9)));
    json_object_set_new(j, "prompt_eval_count", json_integer(q->n_prompt));
    json_object_set_new(j, "prompt_eval_duration", json_integer((json_int_t)((t_first - t_start) * 1e9)));
    json_object_set_new(j, "eval_count", json_integer(w->g->n_gen));
    json_object_set_new(j, "eval_duration", json_integer((json_int_t)((now - t_first) * 1e9)));
}

/* The stream's last line (empty text, the counts), or the whole object. */
static void oll_finish(server_xw *w, int chat) {
    const int whole = !w->out;
    if (whole && (w->content.failed || w->reasoning.failed)) return; /* no cut answer */
    const char *content = whole && w->content.p ? w->content.p : "";
    const size_t n = whole ? w->content.len : 0;
    const char *think = whole && w->reasoning.len ? w->reasoning.p : NULL;
    json_t *j = oll_base(w);
    if (!chat) {
        json_object_set_new(j, "response", server_jstr(content, n));
        if (think) json_object_set_new(j, "thinking", server_jstr(think, w->reasoning.len));
    } else {
        json_t *m = oll_message(content, n, think, w->reasoning.len, NULL);
        if (whole && json_array_size(w->calls)) json_object_set(m, "tool_calls", w->calls);
        json_object_set_new(j, "message", m);
    }
    oll_final_fields(w, j);
    if (whole)
        w->result = j;
    else
        ndjson(w, j);
}

static void oll_chat_finish(server_xw *w) { oll_finish(w, 1); }

static void oll_gen_finish(server_xw *w) { oll_finish(w, 0); }

static void oll_fail(server_xw *w, const char *msg) {
    if (!w->out) return;
    json_t *j = json_object();
    json_object_set_new(j, "error", json_string(msg));
    ndjson(w, j);
}

const server_xw_ops server_oll_chat_ops = {
    .id_prefix = "cmpl-",
    .mime = "application/x-ndjson",
    .api = SERVER_API_OLLAMA,
    .flags = SERVER_XW_CALLS | SERVER_XW_LOGPROBS,
    .start = NULL,
    .text = oll_chat_text,
    .call = oll_call,
    .tool_open = NULL,
    .tool_args = NULL,
    .finish = oll_chat_finish,
    .fail = oll_fail,
    .ping = NULL,
};

const server_xw_ops server_oll_gen_ops = {
    .id_prefix = "cmpl-",
    .mime = "application/x-ndjson",
    .api = SERVER_API_OLLAMA,
    .flags = SERVER_XW_LOGPROBS,
    .start = NULL,
    .text = oll_gen_text,
    .call = NULL,
    .tool_open = NULL,
    .tool_args = NULL,
    .finish = oll_gen_finish,
    .fail = oll_fail,
    .ping = NULL,
};
