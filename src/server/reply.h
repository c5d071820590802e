/* Responses (reply.c): JSON, text, errors in each API's shape, streams,
 * and a watch on the client.  Below every endpoint; knows no route. */
#ifndef KILN_SERVER_REPLY_H
#define KILN_SERVER_REPLY_H

#include "server/buf.h"
#include "engine/engine.h"

#include <jansson.h>
#include <stddef.h>

struct MHD_Connection;
struct MHD_Response;
int ks_send_json(struct MHD_Connection *c, int status, json_t *j); /* steals j */
int ks_send_error(struct MHD_Connection *c, int status, const char *type, const char *msg, const char *param);
/* An error in the request's API's shape: Ollama's {"error": msg} when
 * ollama, else OpenAI's {"error": {"message", "type", "param", "code"}}. */
int ks_error(struct MHD_Connection *c, int ollama, int status, const char *type, const char *msg, const char *param);
int ks_send_text(struct MHD_Connection *c, int status, const char *ctype, const char *body, size_t len, int copy);
/* 1 when the client has gone away. */
int ks_conn_gone(struct MHD_Connection *c);
/* ks_conn_gone for a callback (a chat template render's cancel check); arg:
 * the connection. */
int ks_conn_gone_fn(void *c);
/* A thread that fires a cancel token when the client goes away, for a
 * request that runs long before it writes (a transcription, a rerank).
 * Start returns NULL when it cannot watch (then the request runs
 * unwatched); cancel gives the token (NULL for NULL); stop joins the
 * thread and frees the token. */
typedef struct ks_watch ks_watch;
ks_watch *ks_watch_start(struct MHD_Connection *c);
kiln_engine_cancel *ks_watch_cancel(ks_watch *w);
void ks_watch_stop(ks_watch *w);

/* A streamed response: fill() appends bytes to out and returns 1 at the
 * end; it runs on the connection's thread and may block briefly. */
typedef struct ks_stream {
    ks_buf out;
    size_t pos;
    int ended;
    struct MHD_Connection *conn;
    int (*fill)(struct ks_stream *st);
    void (*cleanup)(struct ks_stream *st);
    void *user;
} ks_stream;
int ks_send_stream(struct MHD_Connection *c, const char *ctype, ks_stream *st);

/* Ollama error shape {"error": msg}. */
int ks_oll_error(struct MHD_Connection *c, int status, const char *msg);

/* The shape of the API a request belongs to: its error body (and which
 * headers an error carries). */
typedef enum { KS_API_OPENAI = 0, KS_API_OLLAMA, KS_API_ANTHROPIC } ks_api;
/* An error object in api's shape (a new reference): OpenAI's {"error":
 * {message, type, param, code}}, Ollama's {"error": msg}, Anthropic's
 * {"type": "error", "error": {type, message}} (OpenAI's types in its
 * words). */
json_t *ks_error_body(ks_api api, const char *type, const char *msg, const char *param);
/* The API whose shape ks_send_error takes on this thread (http.c sets it
 * per request; OpenAI's by default). */
void ks_reply_api(ks_api api);
/* A response made here (status, headers) goes out: CORS for an Origin,
 * the metrics and the request log count it.  Takes r. */
int ks_reply(struct MHD_Connection *c, int status, struct MHD_Response *r);
/* The same without CORS headers (a refusal the page may not read). */
int ks_reply_bare(struct MHD_Connection *c, int status, struct MHD_Response *r);
/* An error body (stolen) as a response not yet sent: JSON, with the
 * headers its status calls for (and Allow when allow is set); NULL when
 * out of memory. */
struct MHD_Response *ks_error_response(int status, json_t *root, const char *allow);
/* An error body (stolen) sent, with the headers its status calls for
 * (Retry-After on 429/503, WWW-Authenticate on 401). */
int ks_send_error_body(struct MHD_Connection *c, int status, json_t *root);
/* The same with an Allow header (a 405; allow NULL: none). */
int ks_send_error_allow(struct MHD_Connection *c, int status, json_t *root, const char *allow);

#endif
