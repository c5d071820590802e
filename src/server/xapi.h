/* Two more APIs over the same generation: OpenAI's Responses
 * (responses.c, POST /v1/responses) and Anthropic's Messages (messages.c,
 * POST /v1/messages and /v1/messages/count_tokens).
 *
 * Each API has two halves:
 *   - a translation of its request into the chat form the server renders
 *     (OpenAI chat messages and tools, plus sampling fields server_parse_opts
 *     reads): server_resp_translate, server_msg_translate;
 *   - a writer (write.h's server_xw) that turns the generation's pieces
 *     (text, reasoning, tool calls opened and their arguments' text) into
 *     that API's stream events and, either way, its whole response object.
 * run.c drives the writer from a running request, streamed or not.  The
 * halves use no connection, so tests feed them directly. */
#ifndef KILN_SERVER_XAPI_H
#define KILN_SERVER_XAPI_H

#include "server/buf.h"
#include "server/deltas.h"
#include "server/opts.h"
#include "server/srv.h"
#include "server/write.h"

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

/* ---- requests ---- */

/* A request in chat form.  chat is an object with "messages", "tools"
 * (when any) and the OpenAI sampling fields (temperature, top_p, top_k,
 * max_tokens, stop, seed, response_format); the caller gives it to
 * server_parse_opts and server_render_chat.  think: -1 default, 0 off, 1 on. */
typedef struct server_xreq {
    json_t *chat; /* owned */
    int think;
    int stream;
    int has_max; /* the request set a token limit */
} server_xreq;

/* Each returns 0, or -1 with a message and the offending parameter (a
 * static string, or NULL) for a 400.  count: the count_tokens form of
 * Messages (no max_tokens needed). */
int server_resp_translate(json_t *body, server_xreq *out, char *err, size_t cap, const char **param);
int server_msg_translate(json_t *body, int count, server_xreq *out, char *err, size_t cap, const char **param);
void server_xreq_free(server_xreq *x);
/* The text of v, a string or an array of parts, into b (appended): each
 * part's "type" one of types (NULL-terminated), its text under "text" (a
 * "refusal" part's under "refusal").  -1 with err naming what ("system",
 * "input[2].content") and the part that is not text. */
int server_xapi_text(json_t *v, server_buf *b, const char *const *types, const char *what, char *err, size_t cap);

/* ---- writers ---- */

/* Each API's writer (server_resp_ops, server_msg_ops) is a row of write.h's
 * table; run.c's loop drives it. */

#endif
