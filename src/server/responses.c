/* OpenAI's Responses API: POST /v1/responses, stateless.
 *
 * Request -> chat form: "instructions" becomes the first system message;
 * "input" is a string (one user message) or a list of items: messages
 * (roles user, assistant, system, developer; content a string or
 * input_text / output_text parts, a user's input_image parts too, which
 * media.c reads), function_call items (joined into the
 * assistant turn they follow), function_call_output items ("tool"
 * messages) and reasoning items (the next assistant turn's
 * reasoning_content).  Function tools become chat tools; "text.format"
 * json_object / json_schema becomes constrained output;
 * "max_output_tokens" the token limit; reasoning.effort "none" turns the
 * template's thinking off, and every effort is a thinking budget
 * (reasoning_effort).  Nothing is stored: previous_response_id and
 * item references are refused, and every response says store: false.
 *
 * Output items in the order generated: reasoning (reasoning_text content),
 * message (output_text), function_call.  Stream events carry
 * sequence_number: response.created, response.in_progress, per item
 * output_item.added, content_part.added, output_text.delta /
 * reasoning_text.delta / function_call_arguments.delta, their .done,
 * content_part.done, output_item.done, and response.completed (or
 * response.incomplete when max_output_tokens cut it). */
#include "server/buf.h"
#include "server/deltas.h"
#include "server/reply.h"
#include "server/xapi.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- request ---- */

/* the part types whose text Responses takes (a refusal's too) */
static const char *const resp_parts[] = {"input_text", "output_text", "text", "refusal", NULL};

/* The text of input item's content into b. */
static int item_text(json_t *c, server_buf *b, size_t item, char *err, size_t cap) {
    char what[48];
    snprintf(what, sizeof what, "input[%zu].content", item);
    return server_xapi_text(c, b, resp_parts, what, err, cap);
}

/* 1 when content is an array holding an input_image part. */
static int has_image(json_t *c) {
    size_t i;
    json_t *p;
    json_array_foreach(c, i, p) {
        const char *t = json_string_value(json_object_get(p, "type"));
        if (t && !strcmp(t, "input_image")) return 1;
    }
    return 0;
}

/* A user item's content with images as chat parts: each run of text parts
 * one text part, the images as they are. */
static json_t *item_parts(json_t *c, size_t item, char *err, size_t cap) {
    json_t *parts = json_array();
    server_buf b = {0};
    size_t i;
    json_t *p;
    json_array_foreach(c, i, p) {
        const char *t = json_string_value(json_object_get(p, "type"));
        if (t && !strcmp(t, "input_image")) {
            if (b.len)
                json_array_append_new(parts, json_pack("{s:s,s:o}", "type", "text", "text", server_jstr(b.p, b.len)));
            b.len = 0;
            json_array_append(parts, p);
            continue;
        }
        json_t *one = json_array();
        json_array_append(one, p);
        char what[48];
        snprintf(what, sizeof what, "input[%zu].content", item);
        int rc = server_xapi_text(one, &b, resp_parts, what, err, cap);
        json_decref(one);
        if (rc) {
            snprintf(err, cap, "input[%zu].content[%zu] is of type '%s'; a message takes input_text and input_image",
                     item, i, t ? t : "(none)");
            server_buf_free(&b);
            json_decref(parts);
            return NULL;
        }
    }
    if (b.len) json_array_append_new(parts, json_pack("{s:s,s:o}", "type", "text", "text", server_jstr(b.p, b.len)));
    server_buf_free(&b);
    return parts;
}

static int fail(char *err, size_t cap, const char **param, const char *p, const char *msg) {
    snprintf(err, cap, "%s", msg);
    *param = p;
    return -1;
}

/* The assistant message a function_call or reasoning item joins: the last
 * message when it is an assistant's turn still open to calls, else a new
 * empty one. */
static json_t *assistant_tail(json_t *msgs, int *open) {
    json_t *last = json_array_get(msgs, json_array_size(msgs) - 1);
    if (*open && last) return last;
    json_t *m = json_object();
    json_object_set_new(m, "role", json_string("assistant"));
    json_object_set_new(m, "content", json_string(""));
    json_array_append_new(msgs, m);
    *open = 1;
    return m;
}

int server_resp_translate(json_t *body, server_xreq *x, char *err, size_t cap, const char **param) {
    memset(x, 0, sizeof *x);
    x->think = -1;
    *param = NULL;
    json_t *chat = json_object(), *msgs = json_array();
    x->chat = chat;
    json_object_set_new(chat, "messages", msgs);
    json_t *model = json_object_get(body, "model");
    if (model && !json_is_string(model)) return fail(err, cap, param, "model", "'model' must be a string");
    json_t *prev = json_object_get(body, "previous_response_id");
    if (prev && !json_is_null(prev))
        return fail(err, cap, param, "previous_response_id",
                    "kiln stores no responses: send the whole conversation in 'input' (previous_response_id is "
                    "not supported)");
    json_t *conv = json_object_get(body, "conversation");
    if (conv && !json_is_null(conv))
        return fail(err, cap, param, "conversation", "kiln stores no conversations: send them in 'input'");
    json_t *mt = json_object_get(body, "max_output_tokens");
    if (mt && !json_is_null(mt)) {
        if (!json_is_integer(mt) || json_integer_value(mt) < 1)
            return fail(err, cap, param, "max_output_tokens", "'max_output_tokens' must be an integer of at least 1");
        json_object_set(chat, "max_tokens", mt);
        x->has_max = 1;
    }
    const char *keys[] = {"temperature", "top_p", "top_k", "seed", "min_p", "presence_penalty", "frequency_penalty"};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        json_t *v = json_object_get(body, keys[i]);
        if (v && !json_is_null(v)) json_object_set(chat, keys[i], v);
    }
    json_t *tl = json_object_get(body, "top_logprobs");
    if (tl && !json_is_null(tl)) return fail(err, cap, param, "top_logprobs", "'top_logprobs' is not supported here");
    x->stream = json_is_true(json_object_get(body, "stream"));
    /* reasoning */
    const char *effort = json_string_value(json_object_get(json_object_get(body, "reasoning"), "effort"));
    if (effort) {
        x->think = strcmp(effort, "none") ? 1 : 0;
        json_object_set_new(chat, "reasoning_effort", json_string(effort)); /* the thinking budget */
    }
    /* text.format */
    json_t *fmt = json_object_get(json_object_get(body, "text"), "format");
    const char *ft = json_string_value(json_object_get(fmt, "type"));
    if (fmt && !json_is_null(fmt) && !ft) return fail(err, cap, param, "text.format", "text.format needs a 'type'");
    if (ft && !strcmp(ft, "json_object")) {
        json_object_set_new(chat, "response_format", json_pack("{s:s}", "type", "json_object"));
    } else if (ft && !strcmp(ft, "json_schema")) {
        json_t *schema = json_object_get(fmt, "schema");
        if (!json_is_object(schema))
            return fail(err, cap, param, "text.format", "text.format.schema must be an object");
        json_object_set_new(chat, "response_format",
                            json_pack("{s:s,s:{s:O}}", "type", "json_schema", "json_schema", "schema", schema));
    } else if (ft && strcmp(ft, "text")) {
        return fail(err, cap, param, "text.format", "text.format.type must be 'text', 'json_object' or 'json_schema'");
    }
    /* instructions, then input */
    json_t *ins = json_object_get(body, "instructions");
    if (json_is_string(ins) && json_string_length(ins))
        json_array_append_new(msgs, json_pack("{s:s,s:O}", "role", "system", "content", ins));
    else if (ins && !json_is_null(ins) && !json_is_string(ins))
        return fail(err, cap, param, "instructions", "'instructions' must be a string");
    json_t *input = json_object_get(body, "input");
    if (json_is_string(input)) {
        json_array_append_new(msgs, json_pack("{s:s,s:O}", "role", "user", "content", input));
    } else if (json_is_array(input) && json_array_size(input)) {
        size_t i;
        json_t *it;
        int open = 0;             /* the last message is an assistant turn calls may join */
        server_buf pending = {0}; /* reasoning for the next assistant turn */
        int have_pending = 0;
        json_array_foreach(input, i, it) {
            const char *type = json_string_value(json_object_get(it, "type"));
            const char *role = json_string_value(json_object_get(it, "role"));
            if (!type && role) type = "message";
            if (!type) {
                server_buf_free(&pending);
                snprintf(err, cap, "input[%zu] has no 'type'", i);
                *param = "input";
                return -1;
            }
            if (!strcmp(type, "message")) {
                if (!role || (strcmp(role, "user") && strcmp(role, "assistant") && strcmp(role, "system") &&
                              strcmp(role, "developer"))) {
                    server_buf_free(&pending);
                    snprintf(err, cap, "input[%zu].role must be user, assistant, system or developer", i);
                    *param = "input";
                    return -1;
                }
                server_buf b = {0};
                json_t *content = json_object_get(it, "content"), *parts = NULL;
                if (has_image(content) && strcmp(role, "user")) {
                    server_buf_free(&pending);
                    snprintf(err, cap, "input[%zu]: only a user message may hold input_image parts", i);
                    *param = "input";
                    return -1;
                }
                if (has_image(content) ? !(parts = item_parts(content, i, err, cap))
                                       : item_text(content, &b, i, err, cap) != 0) {
                    server_buf_free(&b);
                    server_buf_free(&pending);
                    *param = "input";
                    return -1;
                }
                int asst = !strcmp(role, "assistant");
                json_t *m = json_object();
                json_object_set_new(m, "role", json_string(!strcmp(role, "developer") ? "system" : role));
                json_object_set_new(m, "content", parts ? parts : server_jstr(b.p ? b.p : "", b.len));
                server_buf_free(&b);
                if (asst && have_pending) {
                    json_object_set_new(m, "reasoning_content", server_jstr(pending.p ? pending.p : "", pending.len));
                    have_pending = 0;
                    pending.len = 0;
                }
                json_array_append_new(msgs, m);
                open = asst;
            } else if (!strcmp(type, "function_call")) {
                const char *name = json_string_value(json_object_get(it, "name"));
                const char *id = json_string_value(json_object_get(it, "call_id"));
                json_t *args = json_object_get(it, "arguments");
                if (!name || !id || !json_is_string(args)) {
                    server_buf_free(&pending);
                    snprintf(err, cap, "input[%zu]: a function_call needs 'call_id', 'name' and 'arguments' (a string)",
                             i);
                    *param = "input";
                    return -1;
                }
                json_t *m = assistant_tail(msgs, &open);
                if (have_pending) {
                    json_object_set_new(m, "reasoning_content", server_jstr(pending.p ? pending.p : "", pending.len));
                    have_pending = 0;
                    pending.len = 0;
                }
                json_t *calls = json_object_get(m, "tool_calls");
                if (!calls) {
                    calls = json_array();
                    json_object_set_new(m, "tool_calls", calls);
                }
                json_array_append_new(calls, json_pack("{s:s,s:s,s:{s:s,s:O}}", "id", id, "type", "function",
                                                       "function", "name", name, "arguments", args));
            } else if (!strcmp(type, "function_call_output")) {
                const char *id = json_string_value(json_object_get(it, "call_id"));
                json_t *out = json_object_get(it, "output");
                server_buf b = {0};
                if (!id || (!json_is_string(out) && item_text(out, &b, i, err, cap))) {
                    server_buf_free(&b);
                    server_buf_free(&pending);
                    if (!id) snprintf(err, cap, "input[%zu]: a function_call_output needs 'call_id'", i);
                    *param = "input";
                    return -1;
                }
                if (json_is_string(out)) server_buf_put(&b, json_string_value(out), json_string_length(out));
                json_t *m = json_object();
                json_object_set_new(m, "role", json_string("tool"));
                json_object_set_new(m, "tool_call_id", json_string(id));
                json_object_set_new(m, "content", server_jstr(b.p ? b.p : "", b.len));
                server_buf_free(&b);
                json_array_append_new(msgs, m);
                open = 0;
            } else if (!strcmp(type, "reasoning")) {
                /* its reasoning_text parts (or, without them, its summary) */
                json_t *parts = json_object_get(it, "content");
                if (!json_array_size(parts)) parts = json_object_get(it, "summary");
                size_t k;
                json_t *p;
                json_array_foreach(parts, k, p) {
                    json_t *tx = json_object_get(p, "text");
                    if (json_is_string(tx)) server_buf_put(&pending, json_string_value(tx), json_string_length(tx));
                }
                have_pending = 1;
                open = 0;
            } else {
                server_buf_free(&pending);
                snprintf(err, cap,
                         "input[%zu] is of type '%s'; kiln takes message, function_call, "
                         "function_call_output and reasoning items (it stores nothing to refer to)",
                         i, type);
                *param = "input";
                return -1;
            }
        }
        server_buf_free(&pending);
    } else {
        return fail(err, cap, param, "input", "'input' must be a string or a non-empty array of items");
    }
    /* tools */
    json_t *tools = json_object_get(body, "tools");
    json_t *choice = json_object_get(body, "tool_choice");
    const char *cs = json_string_value(choice);
    const char *ct = json_string_value(json_object_get(choice, "type"));
    const char *want = json_string_value(json_object_get(choice, "name"));
    if (json_is_object(choice) && ct && !strcmp(ct, "function") && want) { /* a named function */
        json_object_set_new(chat, "tool_choice",
                            json_pack("{s:s,s:{s:s}}", "type", "function", "function", "name", want));
    } else if (cs && !strcmp(cs, "required")) {
        json_object_set_new(chat, "tool_choice", json_string("required"));
    } else if (choice && !json_is_null(choice) && (!cs || (strcmp(cs, "auto") && strcmp(cs, "none")))) {
        return fail(err, cap, param, "tool_choice",
                    "tool_choice: kiln takes 'auto', 'none', 'required' or {\"type\": \"function\", \"name\": ...}");
    }
    if (json_is_array(tools) && json_array_size(tools)) {
        json_t *out = json_array();
        size_t i;
        json_t *t;
        json_array_foreach(tools, i, t) {
            const char *type = json_string_value(json_object_get(t, "type"));
            const char *name = json_string_value(json_object_get(t, "name"));
            if (!type || strcmp(type, "function") || !name) {
                json_decref(out);
                snprintf(err, cap, "tools[%zu]: kiln runs function tools with a 'name' ('%s' is not one)", i,
                         type ? type : "(no type)");
                *param = "tools";
                return -1;
            }
            json_t *fn = json_object();
            json_object_set_new(fn, "name", json_string(name));
            json_t *d = json_object_get(t, "description");
            if (json_is_string(d)) json_object_set(fn, "description", d);
            json_t *params = json_object_get(t, "parameters");
            if (json_is_object(params))
                json_object_set(fn, "parameters", params);
            else
                json_object_set_new(fn, "parameters", json_pack("{s:s,s:{}}", "type", "object", "properties"));
            json_array_append_new(out, json_pack("{s:s,s:o}", "type", "function", "function", fn));
        }
        if (!(cs && !strcmp(cs, "none")))
            json_object_set_new(chat, "tools", out);
        else
            json_decref(out);
    } else if (tools && !json_is_null(tools) && !json_is_array(tools)) {
        return fail(err, cap, param, "tools", "'tools' must be an array");
    }
    return 0;
}

/* ---- writer ---- */

static json_t *usage(const server_xw *w) {
    json_t *u = json_object();
    json_object_set_new(u, "input_tokens", json_integer(w->n_prompt));
    json_object_set_new(u, "input_tokens_details", json_pack("{s:i}", "cached_tokens", (int)w->n_cached));
    json_object_set_new(u, "output_tokens", json_integer(w->n_gen));
    json_object_set_new(u, "output_tokens_details", json_pack("{s:i}", "reasoning_tokens", 0));
    json_object_set_new(u, "total_tokens", json_integer(w->n_prompt + w->n_gen));
    return u;
}

/* The response object: status "in_progress" while streaming, then
 * "completed" or "incomplete". */
static json_t *response(const server_xw *w, const char *status, json_t *output) {
    json_t *r = json_object();
    json_object_set_new(r, "id", json_string(w->id));
    json_object_set_new(r, "object", json_string("response"));
    json_object_set_new(r, "created_at", json_integer(w->created));
    json_object_set_new(r, "status", json_string(status));
    json_object_set_new(r, "error", json_null());
    json_object_set_new(
        r, "incomplete_details",
        !strcmp(status, "incomplete")
            ? json_pack("{s:s}", "reason",
                        server_fin_incomplete(w->finish) ? server_fin_incomplete(w->finish) : "max_output_tokens")
            : json_null());
    json_object_set_new(r, "model", json_string(w->model));
    json_object_set_new(r, "output", output);
    json_object_set_new(r, "parallel_tool_calls", json_true());
    json_object_set_new(r, "previous_response_id", json_null());
    json_object_set_new(r, "store", json_false());
    json_object_set_new(r, "usage", !strcmp(status, "in_progress") ? json_null() : usage(w));
    /* what the request set, as the API repeats it */
    const char *echo[] = {"instructions", "max_output_tokens", "temperature", "top_p", "tools",     "tool_choice",
                          "text",         "reasoning",         "metadata",    "user",  "truncation"};
    for (size_t i = 0; i < sizeof echo / sizeof echo[0]; i++) {
        json_t *v = json_object_get(w->echo, echo[i]);
        json_object_set(r, echo[i], v ? v : json_null());
    }
    if (!json_object_get(w->echo, "tools")) json_object_set_new(r, "tools", json_array());
    if (!json_object_get(w->echo, "tool_choice")) json_object_set_new(r, "tool_choice", json_string("auto"));
    if (!json_object_get(w->echo, "text"))
        json_object_set_new(r, "text", json_pack("{s:{s:s}}", "format", "type", "text"));
    if (!json_object_get(w->echo, "metadata")) json_object_set_new(r, "metadata", json_object());
    if (!json_object_get(w->echo, "truncation")) json_object_set_new(r, "truncation", json_string("disabled"));
    return r;
}

/* One event: its type both as the SSE event name and in the data, with
 * the next sequence number. */
static void ev(server_xw *w, const char *type, json_t *j) {
    json_object_set_new(j, "type", json_string(type));
    json_object_set_new(j, "sequence_number", json_integer(w->seq++));
    server_xw_event(w, type, j);
}

static int out_index(const server_xw *w) { return (int)json_array_size(w->items); }

static json_t *item_ev(server_xw *w, int with_content) {
    json_t *j = json_object();
    json_object_set(j, "item_id", json_object_get(w->cur, "id"));
    json_object_set_new(j, "output_index", json_integer(out_index(w)));
    if (with_content) json_object_set_new(j, "content_index", json_integer(0));
    return j;
}

static void resp_start(server_xw *w) {
    if (!w->out) return;
    json_t *j = json_object();
    json_object_set_new(j, "response", response(w, "in_progress", json_array()));
    ev(w, "response.created", j);
    j = json_object();
    json_object_set_new(j, "response", response(w, "in_progress", json_array()));
    ev(w, "response.in_progress", j);
}

static json_t *part_of(int kind, const char *s, size_t n) {
    json_t *p = json_object();
    json_object_set_new(p, "type", json_string(kind == SERVER_XB_TEXT ? "output_text" : "reasoning_text"));
    json_object_set_new(p, "text", server_jstr(s, n));
    if (kind == SERVER_XB_TEXT) json_object_set_new(p, "annotations", json_array());
    return p;
}

static void close_item(server_xw *w) {
    if (w->open == SERVER_XB_NONE) return;
    const char *s = w->acc.p ? w->acc.p : "";
    size_t n = w->acc.len;
    if (w->open == SERVER_XB_TOOL) {
        json_object_set_new(w->cur, "arguments", server_jstr(s, n));
        json_object_set_new(w->cur, "status", json_string("completed"));
        if (w->out) {
            json_t *j = item_ev(w, 0);
            json_object_set(j, "name", json_object_get(w->cur, "name"));
            json_object_set_new(j, "arguments", server_jstr(s, n));
            ev(w, "response.function_call_arguments.done", j);
        }
    } else {
        int text = w->open == SERVER_XB_TEXT;
        if (w->out) {
            json_t *j = item_ev(w, 1);
            json_object_set_new(j, "text", server_jstr(s, n));
            if (text) json_object_set_new(j, "logprobs", json_array());
            ev(w, text ? "response.output_text.done" : "response.reasoning_text.done", j);
            j = item_ev(w, 1);
            json_object_set_new(j, "part", part_of(w->open, s, n));
            ev(w, "response.content_part.done", j);
        }
        json_t *content = json_array();
        json_array_append_new(content, part_of(w->open, s, n));
        json_object_set_new(w->cur, "content", content);
        if (text) json_object_set_new(w->cur, "status", json_string("completed"));
    }
    if (w->out) {
        json_t *j = json_object();
        json_object_set_new(j, "output_index", json_integer(out_index(w)));
        json_object_set(j, "item", w->cur);
        ev(w, "response.output_item.done", j);
    }
    server_xw_closed(w);
}

static void open_item(server_xw *w, int kind, json_t *item) {
    close_item(w);
    server_xw_opened(w, kind, item);
    if (!w->out) return;
    json_t *j = json_object();
    json_object_set_new(j, "output_index", json_integer(out_index(w)));
    json_object_set_new(j, "item", json_deep_copy(item));
    ev(w, "response.output_item.added", j);
    if (kind != SERVER_XB_TOOL) {
        j = item_ev(w, 1);
        json_object_set_new(j, "part", part_of(kind, "", 0));
        ev(w, "response.content_part.added", j);
    }
}

static void resp_text(server_xw *w, int kind, const char *s, size_t n) {
    if (!n) return;
    if (w->open != kind) {
        char id[96];
        int idx = out_index(w) + (w->open == SERVER_XB_NONE ? 0 : 1);
        json_t *item = json_object();
        if (kind == SERVER_XB_TEXT) {
            snprintf(id, sizeof id, "msg_%s_%d", w->serial, idx);
            json_object_set_new(item, "type", json_string("message"));
            json_object_set_new(item, "id", json_string(id));
            json_object_set_new(item, "status", json_string("in_progress"));
            json_object_set_new(item, "role", json_string("assistant"));
            json_object_set_new(item, "content", json_array());
        } else {
            snprintf(id, sizeof id, "rs_%s_%d", w->serial, idx);
            json_object_set_new(item, "type", json_string("reasoning"));
            json_object_set_new(item, "id", json_string(id));
            json_object_set_new(item, "summary", json_array());
            json_object_set_new(item, "content", json_array());
        }
        open_item(w, kind, item);
    }
    server_buf_put(&w->acc, s, n);
    if (!w->out) return;
    json_t *j = item_ev(w, 1);
    json_object_set_new(j, "delta", server_jstr(s, n));
    if (kind == SERVER_XB_TEXT) json_object_set_new(j, "logprobs", json_array());
    ev(w, kind == SERVER_XB_TEXT ? "response.output_text.delta" : "response.reasoning_text.delta", j);
}

static void resp_tool_open(server_xw *w, const char *name) {
    char id[96], call[96];
    int idx = out_index(w) + (w->open == SERVER_XB_NONE ? 0 : 1);
    snprintf(id, sizeof id, "fc_%s_%d", w->serial, idx);
    snprintf(call, sizeof call, "call_%s_%d", w->serial, w->n_tools++);
    json_t *item = json_object();
    json_object_set_new(item, "type", json_string("function_call"));
    json_object_set_new(item, "id", json_string(id));
    json_object_set_new(item, "call_id", json_string(call));
    json_object_set_new(item, "name", server_jstr(name, strlen(name)));
    json_object_set_new(item, "arguments", json_string(""));
    json_object_set_new(item, "status", json_string("in_progress"));
    open_item(w, SERVER_XB_TOOL, item);
}

static void resp_tool_args(server_xw *w, const char *s, size_t n) {
    if (w->open != SERVER_XB_TOOL || !n) return;
    server_buf_put(&w->acc, s, n);
    if (!w->out) return;
    json_t *j = item_ev(w, 0);
    json_object_set_new(j, "delta", server_jstr(s, n));
    ev(w, "response.function_call_arguments.delta", j);
}

static void resp_finish(server_xw *w) {
    close_item(w);
    const int cut = w->finish == SERVER_FIN_LENGTH || server_fin_incomplete(w->finish);
    const char *status = cut ? "incomplete" : "completed";
    json_decref(w->result);
    w->result = response(w, status, json_incref(w->items));
    if (!w->out) return;
    json_t *j = json_object();
    json_object_set(j, "response", w->result);
    ev(w, cut ? "response.incomplete" : "response.completed", j);
}

/* A failure after the stream began: an error event, then
 * response.failed with what was produced so far. */
static void resp_fail(server_xw *w, const char *msg) {
    if (!w->out) return;
    close_item(w);
    json_t *j = json_object();
    json_object_set_new(j, "code", json_string("server_error"));
    json_object_set_new(j, "message", json_string(msg));
    json_object_set_new(j, "param", json_null());
    ev(w, "error", j);
    json_t *r = response(w, "failed", json_incref(w->items));
    json_object_set_new(r, "error", json_pack("{s:s,s:s}", "code", "server_error", "message", msg));
    j = json_object();
    json_object_set_new(j, "response", r);
    ev(w, "response.failed", j);
}

static void resp_ping(server_xw *w) {
    if (w->out) server_buf_puts(w->out, ": keep-alive\n\n");
}

const server_xw_ops server_resp_ops = {
    .id_prefix = "resp_",
    .mime = "text/event-stream",
    .api = SERVER_API_OPENAI,
    .flags = SERVER_XW_CALLS | SERVER_XW_PARTS,
    .start = resp_start,
    .text = resp_text,
    .call = server_xw_call_parts,
    .tool_open = resp_tool_open,
    .tool_args = resp_tool_args,
    .finish = resp_finish,
    .fail = resp_fail,
    .ping = resp_ping,
};
