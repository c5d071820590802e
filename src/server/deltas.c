/* From a request's tokens to text deltas, on the HTTP thread:
 *   detokenize (whole UTF-8 characters) -> stop strings (text that might
 *   begin a stop string is held back) -> tags: <think>...</think> becomes
 *   reasoning, <tool_call>{json}</tool_call> a tool call (or its XML form,
 *   <function=NAME><parameter=KEY>..., see xmlcall.c), or with a model of
 *   another form (callfmt.h) that form's sections; a partial tag is held
 *   back too.  A stop string match cancels the request.
 *
 * A tool call reaches the sink whole at its closing tag (on_tool), or, when
 * the sink takes parts (on_tool_part, OpenAI streaming), while it is being
 * written: toolscan.c (JSON) and xmlcall.c (the XML form) read the body as
 * it comes, the header goes out once the name is settled and the
 * arguments' JSON text follows piece by piece. */
#define _GNU_SOURCE
#include "server/deltas.h"

#include "server/buf.h"
#include "server/callfmt.h"
#include "server/metrics.h"
#include "server/toolscan.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char *const k_tags[] = {"<think>", "</think>", "<tool_call>", "</tool_call>"};

/* 1 when text is one token of m's vocabulary (read as special). */
static int one_token(const kiln_model *m, const char *text) {
    int32_t ids[4];
    return kiln_tokenize(m, text, strlen(text), 0, 1, ids, 4) == 1;
}

int server_gen_harmony(const kiln_model *m) {
    return one_token(m, "<|channel|>") && one_token(m, "<|message|>") && one_token(m, "<|end|>");
}

void server_gen_init(server_gen *g, kiln_model *m, int start_in_think) {
    memset(g, 0, sizeof *g);
    g->m = m;
    g->dt = kiln_detok_new(m);
    g->split_think = g->split_tools = 1;
    g->mode = start_in_think ? 1 : 0;
    g->stop_hit = -1;
    g->harmony = server_gen_harmony(m);
    g->fmt = g->harmony ? SERVER_CF_HARMONY : SERVER_CF_TAG;
    g->tool_calls = json_array();
    g->logprobs = json_array();
    if (!g->dt || !g->tool_calls || !g->logprobs) { /* the request fails before its first token */
        snprintf(g->err, sizeof g->err, "out of memory");
        g->finish = SERVER_FIN_ERROR;
    }
}

void server_gen_tools(server_gen *g, json_t *tools) {
    json_decref(g->tools);
    g->tools = json_is_array(tools) ? json_incref(tools) : NULL;
}

void server_gen_free(server_gen *g) {
    kiln_detok_free(g->dt);
    server_buf_free(&g->sbuf);
    server_buf_free(&g->pbuf);
    server_buf_free(&g->tool);
    server_buf_free(&g->h_hdr);
    server_toolscan_free(&g->ts);
    server_xmlscan_free(&g->xs);
    json_decref(g->tools);
    json_decref(g->tool_calls);
    json_decref(g->logprobs);
}

static void emit(server_gen *g, int kind, const char *s, size_t n) {
    if (n && g->on_text) g->on_text(g, kind, s, n, g->user);
}

/* Length of s[0..n) without a UTF-8 character cut at its end. */
static size_t whole_chars(const char *s, size_t n) {
    size_t i = n, k = 0;
    while (i > 0 && k < 3 && ((unsigned char)s[i - 1] & 0xC0) == 0x80) {
        i--;
        k++;
    }
    if (i == 0) return n;
    unsigned char c = (unsigned char)s[i - 1];
    size_t need = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
    return k + 1 < need ? i - 1 : n;
}

/* What the scanner following the current body has read: the JSON one
 * until the text breaks JSON, then the XML one; once a call opened, the
 * one that opened it. */
typedef struct scan_view {
    int named, bad, closed, args_begun;
    const server_buf *name, *args;
} scan_view;

static scan_view view(const server_gen *g) {
    const server_toolscan *t = &g->ts;
    const server_xmlscan *x = &g->xs;
    if (g->tool_open ? !g->tool_xml : !t->bad)
        return (scan_view){t->named, t->bad, t->closed, t->args_begun, &t->name, &t->args};
    return (scan_view){x->named, x->bad, x->closed, x->named, &x->name, &x->args};
}

/* Sends what the scanner has of the current call: the header once the name
 * is settled (and nothing so far broke the shape), then the arguments' text
 * beyond what went out. */
static void tool_stream(server_gen *g, int final) {
    const scan_view v = view(g);
    if (!g->tool_open) {
        if (!v.named || v.bad) return;
        g->tool_open = 1;
        g->tool_xml = v.args == &g->xs.args;
        g->args_sent = 0;
        g->on_tool_part(g, g->n_tools, v.name->p ? v.name->p : "", NULL, 0, g->user);
    }
    size_t end = final ? v.args->len : whole_chars(v.args->p, v.args->len);
    if (end > g->args_sent) {
        g->on_tool_part(g, g->n_tools, NULL, v.args->p + g->args_sent, end - g->args_sent, g->user);
        g->args_sent = end;
    }
}

/* More of the current <tool_call> body. */
static void tool_text(server_gen *g, const char *s, size_t n) {
    if (server_buf_put(&g->tool, s, n)) return; /* server_gen_text fails the generation */
    /* both also without streaming: server_gen_args_text, the XML form's types */
    if (!g->ts.bad) server_toolscan_feed(&g->ts, s, n);
    if (!g->xs.bad) server_xmlscan_feed(&g->xs, g->tool.p, g->tool.len);
    if (g->on_tool_part) tool_stream(g, 0);
}

const char *server_gen_args_text(const server_gen *g, size_t *n) {
    const server_toolscan *t = &g->ts;
    if (t->bad || !t->closed || !t->args_begun) return NULL;
    *n = t->args.len;
    return t->args.p ? t->args.p : "";
}

/* The end of a call already opened in parts: it stands.  The call kept in
 * g->tool_calls is the body's parse when the scanner followed all of it,
 * else what was streamed (the arguments' text parsed if it can be). */
static json_t *tool_streamed_done(server_gen *g, json_t *call) {
    tool_stream(g, 1);
    const scan_view v = view(g);
    if (!v.args_begun) g->on_tool_part(g, g->n_tools, NULL, "{}", 2, g->user);
    if (call && !v.bad && v.closed) return call;
    json_decref(call);
    call = json_object();
    json_object_set_new(call, "name", server_jstr(v.name->p ? v.name->p : "", v.name->len));
    json_error_t je;
    const char *a = v.args->p ? v.args->p : "";
    json_t *args = v.args_begun ? json_loadb(a, v.args->len, JSON_DECODE_ANY, &je) : json_object();
    if (!args) args = server_jstr(a, v.args->len);
    json_object_set_new(call, "arguments", args);
    return call;
}

/* The end of a <tool_call> body: at its closing tag (closed), or where
 * the text ended inside it. */
static void tool_done(server_gen *g, int closed) {
    json_error_t je;
    json_t *call = json_loadb(g->tool.p ? g->tool.p : "", g->tool.len, 0, &je);
    if (!call && closed) call = server_xmlscan_call(&g->xs);
    int streamed = g->tool_open;
    if (streamed) call = tool_streamed_done(g, call);
    g->tool_open = 0;
    json_t *name = call ? json_object_get(call, "name") : NULL;
    if (!json_is_string(name)) {
        /* not a tool call after all: keep the text as written */
        emit(g, SERVER_D_CONTENT, "<tool_call>", 11);
        emit(g, SERVER_D_CONTENT, g->tool.p ? g->tool.p : "", g->tool.len);
        if (closed) emit(g, SERVER_D_CONTENT, "</tool_call>", 12);
        json_decref(call);
    } else {
        json_t *args = json_object_get(call, "arguments");
        if (!args)
            json_object_set_new(call, "arguments", json_object());
        else if (json_is_string(args)) {
            json_t *parsed = json_loads(json_string_value(args), 0, &je);
            if (parsed) json_object_set_new(call, "arguments", parsed);
        }
        json_array_append(g->tool_calls, call);
        if (g->on_tool && !streamed) g->on_tool(g, g->n_tools, call, g->user);
        g->n_tools++;
        json_decref(call);
    }
    g->tool.len = 0;
}

/* ---- harmony ---- */

static const char *const k_htags[] = {"<|end|>", "<|return|>", "<|call|>", "<|start|>", "<|channel|>"};
enum { H_CHANNEL = 4 };   /* the one tag that opens a new header in place */
enum { H_HDR_MAX = 512 }; /* a header longer than this is text, not a header */
enum { HM_CALL = 2 };     /* g->mode of a call's body (content and reasoning: SERVER_D_*) */

/* The word after key in header h (up to a space, '<' or the end). */
static size_t hdr_word(const server_buf *h, const char *key, const char **w) {
    const char *p = h->len ? memmem(h->p, h->len, key, strlen(key)) : NULL;
    if (!p) return 0;
    p += strlen(key);
    const char *e = p, *end = h->p + h->len;
    while (e < end && *e != ' ' && *e != '<' && *e != '\n') e++;
    *w = p;
    return (size_t)(e - p);
}

/* A header is complete: the body's mode from its channel and recipient. */
static void harmony_open(server_gen *g) {
    const char *ch = "", *to = "";
    const size_t nch = hdr_word(&g->h_hdr, "<|channel|>", &ch), nto = hdr_word(&g->h_hdr, "to=", &to);
    g->h_body = 1;
    if (nto > 10 && !strncmp(to, "functions.", 10) && g->split_tools) {
        snprintf(g->h_name, sizeof g->h_name, "%.*s", (int)(nto - 10), to + 10);
        g->mode = HM_CALL;
        g->tool.len = 0;
        g->tool_open = 0;
        g->args_sent = 0;
        if (g->on_tool_part) {
            g->tool_open = 1;
            g->on_tool_part(g, g->n_tools, g->h_name, NULL, 0, g->user);
        }
        return;
    }
    /* analysis, and messages to a built-in tool, are reasoning */
    const int reasoning = (nch == 8 && !strncmp(ch, "analysis", 8)) || nto > 0;
    g->mode = reasoning && g->split_think ? SERVER_D_REASONING : SERVER_D_CONTENT;
}

/* A call's body ended (final: where the text ended): the call, its
 * arguments parsed when they are JSON, else kept as a string. */
static void harmony_call_done(server_gen *g) {
    const char *a = g->tool.p ? g->tool.p : "";
    if (g->tool_open) {
        const size_t end = g->tool.len;
        if (end > g->args_sent) g->on_tool_part(g, g->n_tools, NULL, a + g->args_sent, end - g->args_sent, g->user);
        if (!g->tool.len) g->on_tool_part(g, g->n_tools, NULL, "{}", 2, g->user);
    }
    json_error_t je;
    json_t *args = g->tool.len ? json_loadb(a, g->tool.len, JSON_DECODE_ANY, &je) : json_object();
    if (!args) args = server_jstr(a, g->tool.len);
    json_t *call = json_object();
    json_object_set_new(call, "name", json_string(g->h_name));
    json_object_set_new(call, "arguments", args);
    json_array_append(g->tool_calls, call);
    if (g->on_tool && !g->tool_open) g->on_tool(g, g->n_tools, call, g->user);
    json_decref(call);
    g->n_tools++;
    g->tool_open = 0;
    g->tool.len = 0;
}

/* Body text of the current message into its sink. */
static void harmony_body(server_gen *g, const char *s, size_t n) {
    if (g->mode != HM_CALL) {
        emit(g, g->mode, s, n);
        return;
    }
    if (server_buf_put(&g->tool, s, n)) return;
    if (g->tool_open) {
        const size_t end = whole_chars(g->tool.p, g->tool.len);
        if (end > g->args_sent) {
            g->on_tool_part(g, g->n_tools, NULL, g->tool.p + g->args_sent, end - g->args_sent, g->user);
            g->args_sent = end;
        }
    }
}

/* Splits harmony messages (gen.h) into the sinks; a header's text is
 * never shown, unless it grows past H_HDR_MAX without a <|message|> (a
 * model writing plain text: it is content then). */
static void parse_harmony(server_gen *g, int final) {
    size_t pos = 0;
    while (pos < g->pbuf.len) {
        const char *base = g->pbuf.p + pos;
        const size_t len = g->pbuf.len - pos;
        if (!g->h_body) {
            const char *m = memmem(base, len, "<|message|>", 11);
            /* a tag cut at the end waits for the rest */
            const size_t upto = m       ? (size_t)(m - base)
                                : final ? len
                                        : len - server_partial_suffix(base, len, "<|message|>");
            if (server_buf_put(&g->h_hdr, base, upto)) return;
            pos += upto;
            if (!m && !upto) break;
            if (m) {
                pos += 11;
                harmony_open(g);
                g->h_hdr.len = 0;
            } else if (g->h_hdr.len > H_HDR_MAX) {
                g->h_body = 1;
                g->mode = SERVER_D_CONTENT;
                emit(g, SERVER_D_CONTENT, g->h_hdr.p, g->h_hdr.len);
                g->h_hdr.len = 0;
            }
            continue;
        }
        const char *hit = NULL;
        int which = -1;
        for (int i = 0; i < (int)(sizeof k_htags / sizeof k_htags[0]); i++) {
            const char *h = memmem(base, len, k_htags[i], strlen(k_htags[i]));
            if (h && (!hit || h < hit)) {
                hit = h;
                which = i;
            }
        }
        size_t upto = hit ? (size_t)(hit - base) : len;
        if (!hit && !final) {
            size_t hold = 0;
            for (int i = 0; i < (int)(sizeof k_htags / sizeof k_htags[0]); i++) {
                const size_t k = server_partial_suffix(base, len, k_htags[i]);
                if (k > hold) hold = k;
            }
            upto = len - hold;
        }
        harmony_body(g, base, upto);
        pos += upto;
        if (!hit) break;
        if (which != H_CHANNEL) pos += strlen(k_htags[which]); /* <|channel|> stays: the header's start */
        if (g->mode == HM_CALL) harmony_call_done(g);
        g->h_body = 0;
        g->mode = SERVER_D_CONTENT;
    }
    if (final) {
        if (g->h_body && g->mode == HM_CALL)
            harmony_call_done(g);
        else if (!g->h_body && g->h_hdr.len && !memmem(g->h_hdr.p, g->h_hdr.len, "<|", 2))
            emit(g, SERVER_D_CONTENT, g->h_hdr.p, g->h_hdr.len); /* plain text, never a header */
        g->h_hdr.len = 0;
        g->h_body = 0;
        g->mode = SERVER_D_CONTENT;
    }
    memmove(g->pbuf.p, g->pbuf.p + pos, g->pbuf.len - pos);
    g->pbuf.len -= pos;
}

/* The end of a section of g->fmt's form (closed: at its closer, else at
 * the next opener or the reply's end): its calls, or its text as written
 * when it holds none. */
static void section_done(server_gen *g, int closed) {
    const server_callfmt_tags *tg = server_callfmt_marks(g->fmt);
    json_t *calls = server_callfmt_parse(g->fmt, g->sec_opener, g->tool.p, g->tool.len, g->tools);
    if (!calls) {
        if (g->sec_opener >= 0) emit(g, SERVER_D_CONTENT, tg->open[g->sec_opener], strlen(tg->open[g->sec_opener]));
        emit(g, SERVER_D_CONTENT, g->tool.p ? g->tool.p : "", g->tool.len);
        if (closed) emit(g, SERVER_D_CONTENT, tg->close, strlen(tg->close));
    } else {
        size_t i;
        json_t *call;
        json_array_foreach(calls, i, call) {
            json_array_append(g->tool_calls, call);
            if (g->on_tool) g->on_tool(g, g->n_tools, call, g->user);
            g->n_tools++;
        }
        json_decref(calls);
    }
    g->tool.len = 0;
}

void server_gen_format(server_gen *g, int fmt) {
    g->fmt = fmt > 0 && fmt < SERVER_CF_COUNT ? fmt : SERVER_CF_TAG;
    g->n_marks = 0;
    g->mark_think = 0;
    for (const char *const *mk = g->m ? server_callfmt_markers(g->fmt) : NULL; mk && *mk && g->n_marks < 8; mk++) {
        int32_t ids[4];
        char piece[8];
        if (kiln_tokenize(g->m, *mk, strlen(*mk), 0, 1, ids, 4) != 1) continue;
        if (kiln_token_to_piece(g->m, ids[0], piece, sizeof piece, 0) != 0) continue; /* it shows already */
        const server_callfmt_tags *tg = server_callfmt_marks(g->fmt);
        const size_t k = strlen(*mk);
        const int think = tg && tg->think[0] && (!strncmp(tg->think[0], *mk, k) || !strcmp(tg->think[1], *mk));
        g->mark_think |= (unsigned)think << g->n_marks;
        g->mark_id[g->n_marks] = ids[0];
        g->mark_text[g->n_marks++] = *mk;
    }
}

static int is_blank(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; }

/* What a tag found in the text does. */
enum { A_THINK, A_UNTHINK, A_CALL, A_UNCALL, A_SEC_END, A_SEC /* + the opener's index */ };

/* Splits text by tags into the current mode's sink. */
static void parse_text(server_gen *g, const char *s, size_t n, int final) {
    if (!g->split_think && !g->split_tools && g->mode == 0 && !g->harmony) {
        emit(g, SERVER_D_CONTENT, s, n);
        return;
    }
    if (server_buf_put(&g->pbuf, s, n)) return; /* server_gen_text fails the generation */
    if (g->harmony) {
        parse_harmony(g, final);
        return;
    }
    const server_callfmt_tags *tg = g->fmt != SERVER_CF_TAG ? server_callfmt_marks(g->fmt) : NULL;
    size_t pos = 0;
    for (;;) {
        const char *base = g->pbuf.p + pos;
        size_t len = g->pbuf.len - pos;
        /* a form whose call may open the reply: blanks wait for the first
         * other byte, and a '{' there begins a section */
        if (g->mode == 0 && tg && tg->at_start && g->split_tools && !g->reply_begun) {
            size_t k = 0;
            while (k < len && is_blank(base[k])) k++;
            if (k == len && !final) break;
            g->reply_begun = 1;
            if (k < len && base[k] == '{') {
                g->mode = 3;
                g->sec_opener = -1;
                g->tool.len = 0;
            }
        }
        /* the tags that matter in this mode */
        const char *cand[6];
        int act[6], nc = 0;
        if (g->mode == 0) {
            if (g->split_think) cand[nc] = k_tags[0], act[nc++] = A_THINK;
            if (g->split_think && tg && tg->think[0]) cand[nc] = tg->think[0], act[nc++] = A_THINK;
            if (g->split_tools && !tg) cand[nc] = k_tags[2], act[nc++] = A_CALL;
        } else if (g->mode == 1) {
            cand[nc] = k_tags[1], act[nc++] = A_UNTHINK;
            if (tg && tg->think[1]) cand[nc] = tg->think[1], act[nc++] = A_UNTHINK;
        } else if (g->mode == 2) {
            cand[nc] = k_tags[3], act[nc++] = A_UNCALL;
        } else if (tg->close) {
            cand[nc] = tg->close, act[nc++] = A_SEC_END;
        }
        if (tg && g->split_tools && (g->mode == 0 || (g->mode == 3 && tg->reopen)))
            for (int i = 0; i < 2; i++)
                if (tg->open[i]) cand[nc] = tg->open[i], act[nc++] = A_SEC + i;
        const char *hit = NULL;
        int which = -1;
        for (int i = 0; i < nc; i++) {
            const char *h = len ? memmem(base, len, cand[i], strlen(cand[i])) : NULL;
            if (h && (!hit || h < hit)) {
                hit = h;
                which = i;
            }
        }
        size_t upto = hit ? (size_t)(hit - base) : len;
        if (!hit && !final) {
            size_t hold = 0;
            for (int i = 0; i < nc; i++) {
                size_t k = server_partial_suffix(base, len, cand[i]);
                if (k > hold) hold = k;
            }
            upto = len - hold;
        }
        if (g->mode == 2) {
            tool_text(g, base, upto);
        } else if (g->mode == 3) {
            server_buf_put(&g->tool, base, upto); /* a failure fails the generation (server_gen_text) */
        } else if (g->mode == 1) {
            emit(g, SERVER_D_REASONING, base, upto);
        } else {
            /* the blank lines a model (or the thinking budget) writes after
             * </think> separate the blocks, as Ollama and llama.cpp read
             * them: the answer begins at its first other byte */
            size_t k = 0;
            if (g->after_think)
                while (k < upto && is_blank(base[k])) k++;
            if (k < upto) g->after_think = 0;
            emit(g, SERVER_D_CONTENT, base + k, upto - k);
        }
        pos += upto;
        if (!hit) break;
        pos += strlen(cand[which]);
        const int a = act[which];
        g->after_think = a == A_UNTHINK;
        if (a == A_THINK) {
            g->mode = 1;
        } else if (a == A_UNTHINK) {
            g->mode = 0;
            g->reply_begun = 0; /* the answer begins */
        } else if (a == A_CALL) {
            g->mode = 2;
            g->tool.len = 0;
            server_toolscan_reset(&g->ts);
            server_xmlscan_reset(&g->xs, g->tools);
        } else if (a == A_UNCALL) {
            tool_done(g, 1);
            g->mode = 0;
        } else if (a == A_SEC_END) {
            section_done(g, 1);
            g->mode = 0;
        } else { /* an opener: ends the section before it, if one is open */
            if (g->mode == 3) section_done(g, 0);
            g->mode = 3;
            g->sec_opener = a - A_SEC;
            g->tool.len = 0;
            g->reply_begun = 1;
        }
    }
    if (final && g->mode == 2) { /* unterminated: try it anyway */
        tool_done(g, 0);
        g->mode = 0;
    } else if (final && g->mode == 3) {
        section_done(g, 0);
        g->mode = 0;
    }
    memmove(g->pbuf.p, g->pbuf.p + pos, g->pbuf.len - pos);
    g->pbuf.len -= pos;
}

/* Stop strings, then tags.  Returns 1 when a stop string matched. */
static int text_step(server_gen *g, const char *s, size_t n, int final) {
    size_t ns = json_array_size(g->stops);
    if (!ns) {
        parse_text(g, s, n, final);
        return 0;
    }
    if (server_buf_put(&g->sbuf, s, n)) return 1; /* server_gen_text fails the generation */
    size_t cut = g->sbuf.len, hold = 0;
    int matched = 0;
    for (size_t i = 0; i < ns; i++) {
        const char *st = json_string_value(json_array_get(g->stops, i));
        if (!st || !*st) continue;
        const char *h = g->sbuf.len ? memmem(g->sbuf.p, g->sbuf.len, st, strlen(st)) : NULL;
        if (h && (size_t)(h - g->sbuf.p) < cut) {
            cut = (size_t)(h - g->sbuf.p);
            matched = 1;
            g->stop_hit = (int)i;
        }
        size_t k = server_partial_suffix(g->sbuf.p ? g->sbuf.p : "", g->sbuf.len, st);
        if (k > hold) hold = k;
    }
    size_t out = matched ? cut : final ? g->sbuf.len : g->sbuf.len - hold;
    parse_text(g, g->sbuf.p ? g->sbuf.p : "", out, final || matched);
    if (matched) {
        g->sbuf.len = 0;
        return 1;
    }
    memmove(g->sbuf.p, g->sbuf.p + out, g->sbuf.len - out);
    g->sbuf.len -= out;
    return 0;
}

int server_gen_text(server_gen *g, const char *s, size_t n, int final) {
    const int r = text_step(g, s, n, final);
    /* text held back that found no memory: the generation fails rather
     * than send a cut text */
    const server_toolscan *ts = &g->ts;
    if (g->sbuf.failed || g->pbuf.failed || g->tool.failed || g->h_hdr.failed || ts->name.failed || ts->args.failed ||
        ts->stack.failed || ts->key.failed || g->xs.name.failed || g->xs.args.failed) {
        snprintf(g->err, sizeof g->err, "out of memory");
        g->finish = SERVER_FIN_ERROR;
        return 1;
    }
    return r;
}

static json_t *lp_entry(kiln_model *m, int32_t id, float lp) {
    char piece[256];
    int n = kiln_token_to_piece(m, id, piece, sizeof piece, 1);
    if (n < 0 || n > (int)sizeof piece) n = 0;
    json_t *bytes = json_array();
    for (int i = 0; i < n; i++) json_array_append_new(bytes, json_integer((unsigned char)piece[i]));
    json_t *e = json_object();
    json_object_set_new(e, "token", server_jstr(piece, (size_t)n));
    json_object_set_new(e, "logprob", json_real(lp));
    json_object_set_new(e, "bytes", bytes);
    return e;
}

void server_gen_end(server_gen *g, int fin) {
    if (g->finish) return;
    size_t n;
    const char *tail = kiln_detok_flush(g->dt, &n);
    if (server_gen_text(g, tail, n, 1))
        fin = SERVER_FIN_STOP;
    else
        server_gen_text(g, "", 0, 1);
    g->finish = fin;
}

int server_gen_token(server_gen *g, const gen_token *t) {
    if (g->finish) return 1;
    g->n_gen++;
    size_t n;
    const char *piece = kiln_detok_push(g->dt, t->id, &n);
    for (int i = 0; i < g->n_marks && !n; i++)
        if (t->id == g->mark_id[i] && (g->split_tools || (g->split_think && (g->mark_think >> i & 1)))) {
            piece = g->mark_text[i];
            n = strlen(piece);
        }
    if (g->want_logprobs) {
        json_t *e = lp_entry(g->m, t->id, t->logprob);
        json_t *top = json_array();
        for (int k = 0; k < t->n_top; k++) json_array_append_new(top, lp_entry(g->m, t->top_id[k], t->top_lp[k]));
        json_object_set_new(e, "top_logprobs", top);
        json_array_append_new(g->logprobs, e);
    }
    if (server_gen_text(g, piece, n, 0)) {
        server_gen_end(g, SERVER_FIN_STOP);
        return 1;
    }
    return 0;
}

static int fin_of(gen_reason why) {
    switch (why) {
    case GEN_LENGTH: return SERVER_FIN_LENGTH;
    case GEN_CANCELLED: return SERVER_FIN_CANCEL;
    case GEN_FAILED: return SERVER_FIN_ERROR;
    case GEN_BUDGET: return SERVER_FIN_BUDGET;
    case GEN_REPEAT: return SERVER_FIN_REPEAT;
    default: return SERVER_FIN_STOP;
    }
}

const char *server_fin_incomplete(int fin) {
    return fin == SERVER_FIN_BUDGET ? "thinking_budget" : fin == SERVER_FIN_REPEAT ? "repetition" : NULL;
}

int server_gen_pump(server_gen *g, server_req *q, int wait_ms) {
    if (g->finish) return 1;
    gen_event ev;
    for (int wait = wait_ms; gen_req_next(q->gr, &ev, wait); wait = 0) {
        q->n_cached = ev.n_cached;
        q->t_start = ev.t_start;
        q->n_drafted = ev.n_drafted;
        q->n_accepted = ev.n_accepted;
        if (ev.kind == GEN_EV_DONE) {
            if (ev.reason == GEN_FAILED) snprintf(g->err, sizeof g->err, "%s", ev.error);
            server_gen_end(g, fin_of(ev.reason));
            return 1;
        }
        if (q->t_first == 0) {
            q->t_first = ev.t;
            server_metrics_ttft(ev.t - q->t_submit);
        } else {
            server_metrics_itl(ev.t - q->t_last);
        }
        q->t_last = ev.t;
        if (server_gen_token(g, &ev.tok)) {
            gen_req_stop(q->gr);
            return 1;
        }
    }
    return 0;
}
