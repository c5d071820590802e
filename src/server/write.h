/* The response writers (write.c, responses.c, messages.c): one table of
 * operations per response shape (OpenAI chat and completions, Ollama chat
 * and generate, OpenAI Responses, Anthropic Messages) that turns the
 * generation's pieces (text, reasoning, tool calls whole or opened and
 * their arguments' text) into that shape's stream (SSE events or NDJSON
 * lines) and, when not streaming, its whole response object.  run.c's one
 * loop drives a writer; writers use no connection, so tests feed them
 * directly. */
#ifndef KILN_SERVER_WRITE_H
#define KILN_SERVER_WRITE_H

#include "server/buf.h"
#include "server/deltas.h"
#include "server/reply.h"

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

typedef struct server_xw server_xw;

/* How a shape reads the generation (server_xw_ops.flags). */
enum {
    SERVER_XW_RAW = 1,          /* text as generated: no reasoning split, harmony unread (completions) */
    SERVER_XW_CALLS = 2,        /* tool calls are split out when the request offers tools */
    SERVER_XW_PARTS = 4,        /* calls arrive as they are written (tool_open, tool_args) */
    SERVER_XW_PARTS_STREAM = 8, /*   only while streaming (else whole, through call) */
    SERVER_XW_LOGPROBS = 16,    /* the request's logprobs are collected for the writer */
};

typedef struct server_xw_ops {
    const char *id_prefix; /* the response id before its serial ("chatcmpl-", "resp_") */
    const char *mime;      /* a stream's content type */
    server_api api;        /* the shape of an error sent before streaming */
    unsigned flags;        /* SERVER_XW_* */
    /* a stream begins (NULL: nothing before the first piece) */
    void (*start)(server_xw *w);
    /* a piece of text: kind SERVER_D_CONTENT or SERVER_D_REASONING */
    void (*text)(server_xw *w, int kind, const char *s, size_t n);
    /* a whole call {name, arguments} (index: the call's number; NULL: the
     * shape takes no calls) */
    void (*call)(server_xw *w, int index, json_t *call);
    /* a tool call opens (its name settled); its arguments' JSON text
     * follows through tool_args (SERVER_XW_PARTS; NULL without) */
    void (*tool_open)(server_xw *w, const char *name);
    void (*tool_args)(server_xw *w, const char *s, size_t n);
    /* the end: closes the open block, writes the last events and, when
     * not streaming, sets w->result (w->finish and the counts are set;
     * result stays NULL when the reply did not fit in memory) */
    void (*finish)(server_xw *w);
    /* a failure: the shape's error event when streaming (else nothing:
     * the loop sends the error in the shape of api) */
    void (*fail)(server_xw *w, const char *msg);
    /* a keep-alive while nothing is produced (NULL: none) */
    void (*ping)(server_xw *w);
} server_xw_ops;

enum {
    SERVER_XB_NONE = -1,
    SERVER_XB_TEXT = SERVER_D_CONTENT,
    SERVER_XB_REASONING = SERVER_D_REASONING,
    SERVER_XB_TOOL = 2
};

struct server_xw {
    const server_xw_ops *ops;
    server_buf *out; /* where events go; NULL: not streaming */
    char id[64];     /* the response's id ("chatcmpl-...", "resp_...", "msg_...") */
    char serial[40]; /* its unique part, in item and call ids */
    char model[256];
    long created; /* Unix seconds */
    json_t *echo; /* owned: request fields the response repeats (Responses), or NULL */
    /* set by the driver before finish */
    int finish;           /* SERVER_FIN_* */
    const char *stop_seq; /* the stop string that ended it, or NULL */
    int32_t n_prompt, n_cached, n_gen;
    /* the run, set by the driver (NULL when a test feeds the writer): the
     * generation (its logprobs, call count, arguments' text) and request
     * (its clocks and counts); t0 the request's start and load_wait its
     * wait for the model (server_now seconds) */
    server_gen *g;
    const server_req *q;
    double t0, load_wait;
    int include_usage; /* OpenAI stream_options.include_usage */
    /* the writer's state */
    int open;           /* SERVER_XB_* of the open block */
    int n_tools;        /* tool calls opened */
    long seq;           /* Responses: the next sequence_number */
    int sent_role;      /* OpenAI chat: the first delta (with the role) went out */
    server_buf acc;     /* the open block's text or arguments */
    server_buf content; /* OpenAI and Ollama, not streaming: the reply's text */
    server_buf reasoning;
    json_t *calls;  /*   and its calls in the shape's form */
    json_t *cur;    /* the open block / item (owned) */
    json_t *items;  /* closed blocks / items, in order */
    json_t *result; /* after finish: the whole response (owned) */
};

extern const server_xw_ops server_oai_chat_ops, server_oai_compl_ops, server_oll_chat_ops, server_oll_gen_ops,
    server_resp_ops, server_msg_ops;

/* serial is the unique part of the id (hex digits), which is
 * "PREFIX_SERIAL"; out NULL when not streaming. */
void server_xw_init(server_xw *w, const server_xw_ops *ops, const char *prefix, const char *serial, const char *model,
                    server_buf *out);
void server_xw_free(server_xw *w);
/* The writer's block state: a block (owned) of kind SERVER_XB_* opens; the
 * open block moves to items, and its text accumulator empties. */
void server_xw_opened(server_xw *w, int kind, json_t *blk);
void server_xw_closed(server_xw *w);
/* SSE with an event name: "event: NAME\ndata: JSON\n\n" (steals j). */
void server_xw_event(server_xw *w, const char *name, json_t *j);
/* The call op of a shape that takes calls in parts: a whole call opens
 * and its arguments follow at once (the text as the model wrote it when
 * the scanner has it, else the parsed value serialized). */
void server_xw_call_parts(server_xw *w, int index, json_t *call);

#endif
