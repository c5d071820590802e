/* Two more APIs over the same generation: OpenAI's Responses
 * (responses.c, POST /v1/responses) and Anthropic's Messages (messages.c,
 * POST /v1/messages and /v1/messages/count_tokens).
 *
 * Each API has two halves:
 *   - a translation of its request into the chat form the server renders
 *     (OpenAI chat messages and tools, plus sampling fields ks_parse_opts
 *     reads): ks_resp_translate, ks_msg_translate;
 *   - a writer (ks_xw) that turns the generation's pieces (text, reasoning,
 *     tool calls opened and their arguments' text) into that API's stream
 *     events and, either way, its whole response object.
 * xrun.c drives a writer from a running request, streamed or not.  The
 * halves use no connection, so tests feed them directly. */
#ifndef KILN_SERVER_XAPI_H
#define KILN_SERVER_XAPI_H

#include "server/buf.h"
#include "server/gen.h"
#include "server/opts.h"
#include "server/srv.h"

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

/* ---- requests ---- */

/* A request in chat form.  chat is an object with "messages", "tools"
 * (when any) and the OpenAI sampling fields (temperature, top_p, top_k,
 * max_tokens, stop, seed, response_format); the caller gives it to
 * ks_parse_opts and ks_render_chat.  think: -1 default, 0 off, 1 on. */
typedef struct ks_xreq {
    json_t *chat; /* owned */
    int think;
    int stream;
    int has_max; /* the request set a token limit */
} ks_xreq;

/* Each returns 0, or -1 with a message and the offending parameter (a
 * static string, or NULL) for a 400.  count: the count_tokens form of
 * Messages (no max_tokens needed). */
int ks_resp_translate(json_t *body, ks_xreq *out, char *err, size_t cap, const char **param);
int ks_msg_translate(json_t *body, int count, ks_xreq *out, char *err, size_t cap, const char **param);
void ks_xreq_free(ks_xreq *x);
/* The text of v, a string or an array of parts, into b (appended): each
 * part's "type" one of types (NULL-terminated), its text under "text" (a
 * "refusal" part's under "refusal").  -1 with err naming what ("system",
 * "input[2].content") and the part that is not text. */
int ks_xapi_text(json_t *v, ks_buf *b, const char *const *types, const char *what, char *err, size_t cap);

/* ---- writers ---- */

typedef struct ks_xw ks_xw;
typedef struct ks_xw_ops {
    void (*start)(ks_xw *w);
    /* a piece of text: kind KS_D_CONTENT or KS_D_REASONING */
    void (*text)(ks_xw *w, int kind, const char *s, size_t n);
    /* a tool call opens (its name settled); its arguments' JSON text
     * follows through tool_args */
    void (*tool_open)(ks_xw *w, const char *name);
    void (*tool_args)(ks_xw *w, const char *s, size_t n);
    /* the end: closes the open block, writes the last events and sets
     * w->result (w->finish and the counts are set) */
    void (*finish)(ks_xw *w);
    /* a failure after the stream began: the API's error event */
    void (*fail)(ks_xw *w, const char *msg);
    /* a keep-alive while nothing is produced */
    void (*ping)(ks_xw *w);
    /* the API's error body for a failure before anything was sent */
    json_t *(*error_body)(const char *type, const char *msg);
} ks_xw_ops;

enum { KS_XB_NONE = -1, KS_XB_TEXT = KS_D_CONTENT, KS_XB_REASONING = KS_D_REASONING, KS_XB_TOOL = 2 };

struct ks_xw {
    const ks_xw_ops *ops;
    ks_buf *out;     /* where events go; NULL: not streaming */
    char id[64];     /* the response's id ("resp_..." / "msg_...") */
    char serial[40]; /* its unique part, in item and call ids */
    char model[256];
    long created; /* Unix seconds */
    json_t *echo; /* owned: request fields the response repeats (Responses), or NULL */
    /* set by the driver before finish */
    int finish;           /* KS_FIN_* */
    const char *stop_seq; /* the stop string that ended it, or NULL */
    int32_t n_prompt, n_cached, n_gen;
    /* the writer's state */
    int open;       /* KS_XB_* of the open block */
    int n_tools;    /* tool calls opened */
    long seq;       /* Responses: the next sequence_number */
    ks_buf acc;     /* the open block's text or arguments */
    json_t *cur;    /* the open block / item (owned) */
    json_t *items;  /* closed blocks / items, in order */
    json_t *result; /* after finish: the whole response (owned) */
};

extern const ks_xw_ops ks_resp_ops, ks_msg_ops;

/* serial is the unique part of the id (hex digits); prefix "resp" or
 * "msg"; out NULL when not streaming. */
void ks_xw_init(ks_xw *w, const ks_xw_ops *ops, const char *prefix, const char *serial, const char *model, ks_buf *out);
void ks_xw_free(ks_xw *w);
/* The writer's block state: a block (owned) of kind KS_XB_* opens; the
 * open block moves to items, and its text accumulator empties. */
void ks_xw_opened(ks_xw *w, int kind, json_t *blk);
void ks_xw_closed(ks_xw *w);
/* SSE with an event name: "event: NAME\ndata: JSON\n\n" (steals j). */
void ks_xw_event(ks_xw *w, const char *name, json_t *j);

/* ---- the driver (xrun.c) ---- */

/* Runs q with w (heap-allocated, out NULL; taken over with q and the
 * model use): stream gives SSE events, else the whole object as JSON.
 * tools: what the request offered (borrowed; the run keeps a reference),
 * NULL or empty for none; with tools, <tool_call> blocks are calls. */
int ks_xrun(ks_srv *s, ks_model *r, struct MHD_Connection *c, ks_req *q, ks_xw *w, const ks_gen_opts *o, int stream,
            int start_think, json_t *tools, double keep_alive);

#endif
