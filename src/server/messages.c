/* Anthropic's Messages API: POST /v1/messages and /v1/messages/count_tokens.
 *
 * Request -> chat form: "system" (a string or text blocks) becomes a system
 * message; a user turn's text and document blocks its content (a
 * document's title, context and text, apart by blank lines; PDFs, URLs and
 * files are refused), its image blocks parts of it in place (media.c reads
 * them) and each tool_result block a "tool"
 * message (in the order written); an assistant turn's text,
 * thinking (reasoning_content, as templates read it) and tool_use blocks
 * (tool_calls with the input as arguments).  "tools" ({name, description,
 * input_schema}) become function tools; "stop_sequences" stop strings;
 * "thinking" {type: enabled|disabled} the template's enable_thinking, its
 * budget_tokens the thinking budget (reasoning_budget).
 *
 * Output: content blocks in the order generated (thinking, text, tool_use),
 * stop_reason end_turn / max_tokens / stop_sequence / tool_use (or the
 * incomplete reasons thinking_budget / repetition), and usage
 * with the prompt tokens served from the cache as cache_read_input_tokens
 * (input_tokens is the rest, as Anthropic counts them).  A stream is
 * message_start, ping, content_block_start / _delta (text_delta,
 * thinking_delta, input_json_delta) / _stop per block, message_delta and
 * message_stop. */
#include "server/buf.h"
#include "server/deltas.h"
#include "server/reply.h"
#include "server/xapi.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- request ---- */

/* the part types whose text Messages takes */
static const char *const msg_parts[] = {"text", NULL};

static int fail(char *err, size_t cap, const char **param, const char *p, const char *msg) {
    snprintf(err, cap, "%s", msg);
    *param = p;
    return -1;
}

static void put_msg(json_t *msgs, const char *role, server_buf *text) {
    json_t *m = json_object();
    json_object_set_new(m, "role", json_string(role));
    json_object_set_new(m, "content", server_jstr(text->p ? text->p : "", text->len));
    json_array_append_new(msgs, m);
    text->len = 0;
}

/* A document block's text into b (its title and context first, each
 * followed by a blank line): a plain-text source or a content source of
 * text blocks.  A PDF, a URL or a file reference is refused: kiln reads no
 * PDFs and fetches nothing. */
static int document_text(json_t *blk, size_t i, server_buf *b, char *err, size_t cap) {
    json_t *src = json_object_get(blk, "source");
    const char *st = json_string_value(json_object_get(src, "type"));
    const char *mt = json_string_value(json_object_get(src, "media_type"));
    if (st && !strcmp(st, "base64") && mt && !strcmp(mt, "application/pdf")) {
        snprintf(err, cap,
                 "messages: document block %zu is a PDF; kiln reads text documents only (a source of type "
                 "'text', or 'content' with text blocks): extract the PDF's text first",
                 i);
        return -1;
    }
    if (!st || (strcmp(st, "text") && strcmp(st, "content"))) {
        snprintf(err, cap,
                 "messages: document block %zu has a source of type '%s'; kiln takes 'text' and 'content' "
                 "(it fetches no URLs and keeps no files)",
                 i, st ? st : "(none)");
        return -1;
    }
    const char *parts[] = {"title", "context"};
    for (int k = 0; k < 2; k++) {
        json_t *v = json_object_get(blk, parts[k]);
        if (json_is_string(v) && json_string_length(v)) {
            server_buf_put(b, json_string_value(v), json_string_length(v));
            server_buf_puts(b, "\n\n");
        }
    }
    if (!strcmp(st, "content"))
        return server_xapi_text(json_object_get(src, "content"), b, msg_parts, "messages: a document's content", err,
                                cap);
    json_t *data = json_object_get(src, "data");
    if (!json_is_string(data)) {
        snprintf(err, cap, "messages: document block %zu: a text source needs its 'data' as a string", i);
        return -1;
    }
    server_buf_put(b, json_string_value(data), json_string_length(data));
    return 0;
}

/* A user message of text, or of parts when the turn holds images: the
 * text so far as a text part, then the images in place. */
static void put_user(json_t *msgs, server_buf *text, json_t **parts) {
    if (!*parts) {
        put_msg(msgs, "user", text);
        return;
    }
    if (text->len)
        json_array_append_new(*parts, json_pack("{s:s,s:o}", "type", "text", "text", server_jstr(text->p, text->len)));
    json_array_append_new(msgs, json_pack("{s:s,s:o}", "role", "user", "content", *parts));
    *parts = NULL;
    text->len = 0;
}

/* One user turn: text runs, documents, images and tool results, in order. */
static int user_turn(json_t *content, json_t *msgs, char *err, size_t cap) {
    server_buf text = {0};
    json_t *parts = NULL; /* the message's parts once it holds an image */
    int rc = 0, any = 0, after_doc = 0;
    if (json_is_string(content)) {
        server_buf_put(&text, json_string_value(content), json_string_length(content));
        put_msg(msgs, "user", &text);
        server_buf_free(&text);
        return 0;
    }
    size_t i;
    json_t *blk;
    json_array_foreach(content, i, blk) {
        const char *t = json_string_value(json_object_get(blk, "type"));
        if (t && !strcmp(t, "text") && json_is_string(json_object_get(blk, "text"))) {
            json_t *tx = json_object_get(blk, "text");
            if (after_doc && text.len) server_buf_puts(&text, "\n\n");
            server_buf_put(&text, json_string_value(tx), json_string_length(tx));
            any = 1;
            after_doc = 0;
        } else if (t && !strcmp(t, "document")) { /* its text, a blank line from what is around it */
            if (text.len) server_buf_puts(&text, "\n\n");
            if (document_text(blk, i, &text, err, cap)) {
                rc = -1;
                break;
            }
            any = after_doc = 1;
        } else if (t && !strcmp(t, "image")) {
            if (!parts) parts = json_array();
            if (text.len) {
                json_array_append_new(parts,
                                      json_pack("{s:s,s:o}", "type", "text", "text", server_jstr(text.p, text.len)));
                text.len = 0;
            }
            json_array_append(parts, blk);
            any = 1;
            after_doc = 0;
        } else if (t && !strcmp(t, "tool_result")) {
            const char *id = json_string_value(json_object_get(blk, "tool_use_id"));
            if (!id) {
                snprintf(err, cap, "messages: a tool_result block needs 'tool_use_id'");
                rc = -1;
                break;
            }
            if (any) { /* text before a result stays before it */
                put_user(msgs, &text, &parts);
                any = 0;
            }
            server_buf out = {0};
            json_t *c = json_object_get(blk, "content");
            if (c && !json_is_null(c) &&
                server_xapi_text(c, &out, msg_parts, "messages: a tool_result's content", err, cap)) {
                server_buf_free(&out);
                rc = -1;
                break;
            }
            json_t *m = json_object();
            json_object_set_new(m, "role", json_string("tool"));
            json_object_set_new(m, "tool_call_id", json_string(id));
            if (json_is_true(json_object_get(blk, "is_error"))) {
                /* the error mark reaches the model as words: templates have no field for it */
                server_buf e = {0};
                server_buf_puts(&e, "Error: ");
                server_buf_put(&e, out.p ? out.p : "", out.len);
                json_object_set_new(m, "content", server_jstr(e.p, e.len));
                server_buf_free(&e);
            } else {
                json_object_set_new(m, "content", server_jstr(out.p ? out.p : "", out.len));
            }
            server_buf_free(&out);
            json_array_append_new(msgs, m);
        } else {
            snprintf(err, cap,
                     "messages: a user turn's block %zu is of type '%s'; kiln takes text, document, image and "
                     "tool_result",
                     i, t ? t : "(none)");
            rc = -1;
            break;
        }
    }
    if (!rc && (any || !json_array_size(content))) put_user(msgs, &text, &parts);
    json_decref(parts);
    server_buf_free(&text);
    return rc;
}

static int assistant_turn(json_t *content, json_t *msgs, char *err, size_t cap) {
    server_buf text = {0}, thought = {0};
    json_t *calls = json_array();
    int rc = 0;
    if (json_is_string(content)) {
        server_buf_put(&text, json_string_value(content), json_string_length(content));
    } else {
        size_t i;
        json_t *blk;
        json_array_foreach(content, i, blk) {
            const char *t = json_string_value(json_object_get(blk, "type"));
            if (t && !strcmp(t, "text") && json_is_string(json_object_get(blk, "text"))) {
                json_t *tx = json_object_get(blk, "text");
                server_buf_put(&text, json_string_value(tx), json_string_length(tx));
            } else if (t && !strcmp(t, "thinking")) {
                json_t *tx = json_object_get(blk, "thinking");
                if (json_is_string(tx)) server_buf_put(&thought, json_string_value(tx), json_string_length(tx));
            } else if (t && !strcmp(t, "redacted_thinking")) {
                /* opaque to any model but the one that wrote it */
            } else if (t && !strcmp(t, "tool_use")) {
                const char *id = json_string_value(json_object_get(blk, "id"));
                const char *name = json_string_value(json_object_get(blk, "name"));
                json_t *input = json_object_get(blk, "input");
                if (!id || !name) {
                    snprintf(err, cap, "messages: a tool_use block needs 'id' and 'name'");
                    rc = -1;
                    break;
                }
                json_t *fn = json_object();
                json_object_set_new(fn, "name", json_string(name));
                json_object_set_new(fn, "arguments", input ? json_incref(input) : json_object());
                json_array_append_new(calls, json_pack("{s:s,s:s,s:o}", "id", id, "type", "function", "function", fn));
            } else {
                snprintf(err, cap,
                         "messages: an assistant turn's block %zu is of type '%s'; kiln takes text, "
                         "thinking and tool_use",
                         i, t ? t : "(none)");
                rc = -1;
                break;
            }
        }
    }
    if (!rc) {
        json_t *m = json_object();
        json_object_set_new(m, "role", json_string("assistant"));
        json_object_set_new(m, "content", server_jstr(text.p ? text.p : "", text.len));
        if (thought.len) json_object_set_new(m, "reasoning_content", server_jstr(thought.p, thought.len));
        if (json_array_size(calls)) json_object_set(m, "tool_calls", calls);
        json_array_append_new(msgs, m);
    }
    json_decref(calls);
    server_buf_free(&text);
    server_buf_free(&thought);
    return rc;
}

int server_msg_translate(json_t *body, int count, server_xreq *x, char *err, size_t cap, const char **param) {
    memset(x, 0, sizeof *x);
    x->think = -1;
    *param = NULL;
    json_t *chat = json_object(), *msgs = json_array();
    x->chat = chat;
    json_object_set_new(chat, "messages", msgs);
    json_t *model = json_object_get(body, "model");
    if (model && !json_is_string(model)) return fail(err, cap, param, "model", "model: must be a string");
    json_t *mt = json_object_get(body, "max_tokens");
    if (!count) {
        if (!mt) return fail(err, cap, param, "max_tokens", "max_tokens: Field required");
        if (!json_is_integer(mt) || json_integer_value(mt) < 1)
            return fail(err, cap, param, "max_tokens", "max_tokens: must be an integer of at least 1");
        json_object_set(chat, "max_tokens", mt);
        x->has_max = 1;
    }
    const char *keys[] = {"temperature", "top_p", "top_k"};
    for (int i = 0; i < 3; i++) {
        json_t *v = json_object_get(body, keys[i]);
        if (v && !json_is_null(v)) json_object_set(chat, keys[i], v);
    }
    json_t *stop = json_object_get(body, "stop_sequences");
    if (stop && !json_is_null(stop)) {
        size_t i;
        json_t *sv;
        if (!json_is_array(stop)) return fail(err, cap, param, "stop_sequences", "stop_sequences: must be an array");
        json_array_foreach(stop, i, sv) if (!json_is_string(sv) || !json_string_length(sv)) return fail(
            err, cap, param, "stop_sequences", "stop_sequences: each must be a non-empty string");
        json_object_set(chat, "stop", stop);
    }
    x->stream = json_is_true(json_object_get(body, "stream"));
    json_t *th = json_object_get(body, "thinking");
    if (th && !json_is_null(th)) {
        const char *t = json_string_value(json_object_get(th, "type"));
        json_t *bt = json_object_get(th, "budget_tokens");
        if (t && !strcmp(t, "enabled")) {
            x->think = 1;
            if (bt && !json_is_null(bt)) { /* the thinking budget */
                if (!json_is_integer(bt) || json_integer_value(bt) < 0 || json_integer_value(bt) > 1 << 30)
                    return fail(err, cap, param, "thinking",
                                "thinking.budget_tokens: must be an integer of at least 0");
                json_object_set(chat, "reasoning_budget", bt);
            }
        } else if (t && !strcmp(t, "disabled"))
            x->think = 0;
        else if (!t || strcmp(t, "adaptive"))
            return fail(err, cap, param, "thinking", "thinking.type: must be 'enabled', 'disabled' or 'adaptive'");
    }
    /* system */
    json_t *sys = json_object_get(body, "system");
    if (sys && !json_is_null(sys)) {
        server_buf b = {0};
        if (server_xapi_text(sys, &b, msg_parts, "system", err, cap)) {
            server_buf_free(&b);
            *param = "system";
            return -1;
        }
        put_msg(msgs, "system", &b);
        server_buf_free(&b);
    }
    json_t *in = json_object_get(body, "messages");
    if (!json_is_array(in) || !json_array_size(in))
        return fail(err, cap, param, "messages", "messages: must be a non-empty array");
    size_t i;
    json_t *m;
    json_array_foreach(in, i, m) {
        const char *role = json_string_value(json_object_get(m, "role"));
        json_t *content = json_object_get(m, "content");
        if (!json_is_string(content) && !json_is_array(content)) {
            snprintf(err, cap, "messages.%zu.content: must be a string or an array of blocks", i);
            *param = "messages";
            return -1;
        }
        int rc;
        if (role && !strcmp(role, "user"))
            rc = user_turn(content, msgs, err, cap);
        else if (role && !strcmp(role, "assistant"))
            rc = assistant_turn(content, msgs, err, cap);
        else {
            snprintf(err, cap, "messages.%zu.role: must be 'user' or 'assistant'", i);
            rc = -1;
        }
        if (rc) {
            *param = "messages";
            return -1;
        }
    }
    /* tools */
    json_t *tools = json_object_get(body, "tools");
    json_t *choice = json_object_get(body, "tool_choice");
    const char *ct = json_string_value(json_object_get(choice, "type"));
    if (choice && !json_is_null(choice) &&
        (!ct || (strcmp(ct, "auto") && strcmp(ct, "none") && strcmp(ct, "any") && strcmp(ct, "tool"))))
        return fail(err, cap, param, "tool_choice", "tool_choice: the type must be 'auto', 'any', 'tool' or 'none'");
    if (ct && !strcmp(ct, "any")) { /* a call of some tool: OpenAI's "required" */
        json_object_set_new(chat, "tool_choice", json_string("required"));
    } else if (ct && !strcmp(ct, "tool")) {
        const char *want = json_string_value(json_object_get(choice, "name"));
        if (!want) return fail(err, cap, param, "tool_choice", "tool_choice: type 'tool' needs the tool's 'name'");
        json_object_set_new(chat, "tool_choice",
                            json_pack("{s:s,s:{s:s}}", "type", "function", "function", "name", want));
    }
    if (tools && !json_is_null(tools)) {
        if (!json_is_array(tools)) return fail(err, cap, param, "tools", "tools: must be an array");
        json_t *out = json_array();
        json_t *t;
        json_array_foreach(tools, i, t) {
            const char *name = json_string_value(json_object_get(t, "name"));
            const char *type = json_string_value(json_object_get(t, "type"));
            json_t *schema = json_object_get(t, "input_schema");
            if (type && strcmp(type, "custom")) {
                json_decref(out);
                snprintf(err, cap, "tools.%zu: '%s' is a server tool; kiln runs only client tools", i, type);
                *param = "tools";
                return -1;
            }
            if (!name || !json_is_object(schema)) {
                json_decref(out);
                snprintf(err, cap, "tools.%zu: a tool needs 'name' and an 'input_schema' object", i);
                *param = "tools";
                return -1;
            }
            json_t *fn = json_object();
            json_object_set_new(fn, "name", json_string(name));
            json_t *d = json_object_get(t, "description");
            if (json_is_string(d)) json_object_set(fn, "description", d);
            json_object_set(fn, "parameters", schema);
            json_array_append_new(out, json_pack("{s:s,s:o}", "type", "function", "function", fn));
        }
        if (json_array_size(out) && !(ct && !strcmp(ct, "none")))
            json_object_set_new(chat, "tools", out);
        else
            json_decref(out);
    }
    return 0;
}

void server_xreq_free(server_xreq *x) {
    json_decref(x->chat);
    x->chat = NULL;
}

/* ---- writer ---- */

static json_t *usage(const server_xw *w, int start) {
    json_t *u = json_object();
    int32_t cached = w->n_cached < w->n_prompt ? w->n_cached : w->n_prompt;
    json_object_set_new(u, "input_tokens", json_integer(w->n_prompt - cached));
    json_object_set_new(u, "cache_creation_input_tokens", json_integer(0));
    json_object_set_new(u, "cache_read_input_tokens", json_integer(cached));
    json_object_set_new(u, "output_tokens", json_integer(start ? 0 : w->n_gen));
    return u;
}

static json_t *message(const server_xw *w, json_t *content, int start) {
    json_t *m = json_object();
    json_object_set_new(m, "id", json_string(w->id));
    json_object_set_new(m, "type", json_string("message"));
    json_object_set_new(m, "role", json_string("assistant"));
    json_object_set_new(m, "model", json_string(w->model));
    json_object_set_new(m, "content", content);
    json_object_set_new(m, "stop_reason", json_null());
    json_object_set_new(m, "stop_sequence", json_null());
    json_object_set_new(m, "usage", usage(w, start));
    return m;
}

static void msg_start(server_xw *w) {
    if (!w->out) return;
    json_t *j = json_object();
    json_object_set_new(j, "type", json_string("message_start"));
    json_object_set_new(j, "message", message(w, json_array(), 1));
    server_xw_event(w, "message_start", j);
    server_xw_event(w, "ping", json_pack("{s:s}", "type", "ping"));
}

static void block_event(server_xw *w, const char *type, json_t *extra_key, const char *key) {
    json_t *j = json_object();
    json_object_set_new(j, "type", json_string(type));
    json_object_set_new(j, "index", json_integer((json_int_t)json_array_size(w->items)));
    if (key) json_object_set_new(j, key, extra_key);
    server_xw_event(w, type, j);
}

/* The open block is complete: its text goes into it, it joins the list. */
static void close_block(server_xw *w) {
    if (w->open == SERVER_XB_NONE) return;
    const char *s = w->acc.p ? w->acc.p : "";
    if (w->open == SERVER_XB_TEXT) {
        json_object_set_new(w->cur, "text", server_jstr(s, w->acc.len));
    } else if (w->open == SERVER_XB_REASONING) {
        json_object_set_new(w->cur, "thinking", server_jstr(s, w->acc.len));
    } else {
        json_error_t je;
        json_t *input = w->acc.len ? json_loadb(s, w->acc.len, JSON_DECODE_ANY, &je) : json_object();
        /* input is an object in this API; anything else the model wrote is
         * kept under one key rather than dropped */
        if (!json_is_object(input)) {
            json_t *o = json_object();
            json_object_set_new(o, "arguments", input ? input : server_jstr(s, w->acc.len));
            input = o;
        }
        json_object_set_new(w->cur, "input", input);
    }
    if (w->out) block_event(w, "content_block_stop", NULL, NULL);
    server_xw_closed(w);
}

static void open_block(server_xw *w, int kind, json_t *blk) {
    close_block(w);
    server_xw_opened(w, kind, blk);
    if (w->out) block_event(w, "content_block_start", json_deep_copy(blk), "content_block");
}

static void delta(server_xw *w, const char *type, const char *key, const char *s, size_t n) {
    if (!w->out) return;
    json_t *d = json_object();
    json_object_set_new(d, "type", json_string(type));
    json_object_set_new(d, key, server_jstr(s, n));
    block_event(w, "content_block_delta", d, "delta");
}

static void msg_text(server_xw *w, int kind, const char *s, size_t n) {
    if (!n) return;
    if (w->open != kind) {
        if (kind == SERVER_XB_TEXT)
            open_block(w, kind, json_pack("{s:s,s:s}", "type", "text", "text", ""));
        else
            open_block(w, kind, json_pack("{s:s,s:s,s:s}", "type", "thinking", "thinking", "", "signature", ""));
    }
    server_buf_put(&w->acc, s, n);
    if (kind == SERVER_XB_TEXT)
        delta(w, "text_delta", "text", s, n);
    else
        delta(w, "thinking_delta", "thinking", s, n);
}

static void msg_tool_open(server_xw *w, const char *name) {
    char id[96];
    snprintf(id, sizeof id, "toolu_%s_%d", w->serial, w->n_tools++);
    json_t *blk = json_object();
    json_object_set_new(blk, "type", json_string("tool_use"));
    json_object_set_new(blk, "id", json_string(id));
    json_object_set_new(blk, "name", server_jstr(name, strlen(name)));
    json_object_set_new(blk, "input", json_object());
    open_block(w, SERVER_XB_TOOL, blk);
}

static void msg_tool_args(server_xw *w, const char *s, size_t n) {
    if (w->open != SERVER_XB_TOOL || !n) return;
    server_buf_put(&w->acc, s, n);
    delta(w, "input_json_delta", "partial_json", s, n);
}

static const char *stop_reason(const server_xw *w) {
    if (w->finish == SERVER_FIN_LENGTH) return "max_tokens";
    if (server_fin_incomplete(w->finish)) return server_fin_incomplete(w->finish);
    if (w->stop_seq) return "stop_sequence";
    if (w->n_tools) return "tool_use";
    return "end_turn";
}

static void msg_finish(server_xw *w) {
    close_block(w);
    json_t *m = message(w, json_incref(w->items), 0);
    json_object_set_new(m, "stop_reason", json_string(stop_reason(w)));
    if (w->stop_seq) json_object_set_new(m, "stop_sequence", json_string(w->stop_seq));
    json_decref(w->result);
    w->result = m;
    if (!w->out) return;
    json_t *d = json_object();
    json_object_set_new(d, "stop_reason", json_string(stop_reason(w)));
    json_object_set_new(d, "stop_sequence", w->stop_seq ? json_string(w->stop_seq) : json_null());
    json_t *j = json_object();
    json_object_set_new(j, "type", json_string("message_delta"));
    json_object_set_new(j, "delta", d);
    json_object_set_new(j, "usage", json_pack("{s:I}", "output_tokens", (json_int_t)w->n_gen));
    server_xw_event(w, "message_delta", j);
    server_xw_event(w, "message_stop", json_pack("{s:s}", "type", "message_stop"));
}

static void msg_fail(server_xw *w, const char *msg) {
    if (w->out) server_xw_event(w, "error", server_error_body(SERVER_API_ANTHROPIC, "api_error", msg, NULL));
}

static void msg_ping(server_xw *w) {
    if (w->out) server_xw_event(w, "ping", json_pack("{s:s}", "type", "ping"));
}

const server_xw_ops server_msg_ops = {
    .id_prefix = "msg_",
    .mime = "text/event-stream",
    .api = SERVER_API_ANTHROPIC,
    .flags = SERVER_XW_CALLS | SERVER_XW_PARTS,
    .start = msg_start,
    .text = msg_text,
    .call = server_xw_call_parts,
    .tool_open = msg_tool_open,
    .tool_args = msg_tool_args,
    .finish = msg_finish,
    .fail = msg_fail,
    .ping = msg_ping,
};
