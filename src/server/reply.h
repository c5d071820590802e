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
int server_send_json(struct MHD_Connection *c, int status, json_t *j); /* steals j */
int server_send_error(struct MHD_Connection *c, int status, const char *type, const char *msg, const char *param);
/* An error in the request's API's shape: Ollama's {"error": msg} when
 * ollama, else OpenAI's {"error": {"message", "type", "param", "code"}}. */
int server_error(struct MHD_Connection *c, int ollama, int status, const char *type, const char *msg,
                 const char *param);
int server_send_text(struct MHD_Connection *c, int status, const char *ctype, const char *body, size_t len, int copy);
/* 1 when the client has gone away. */
int server_conn_gone(struct MHD_Connection *c);
/* server_conn_gone for a callback (a chat template render's cancel check); arg:
 * the connection. */
int server_conn_gone_fn(void *c);
/* A thread that fires a cancel token when the client goes away, for a
 * request that runs long before it writes (a transcription, a rerank).
 * Start returns NULL when it cannot watch (then the request runs
 * unwatched); cancel gives the token (NULL for NULL); stop joins the
 * thread and frees the token. */
typedef struct server_watch server_watch;
server_watch *server_watch_start(struct MHD_Connection *c);
kiln_engine_cancel *server_watch_cancel(server_watch *w);
void server_watch_stop(server_watch *w);

/* A streamed response: fill() appends bytes to out and returns 1 at the
 * end; it runs on the connection's thread and may block briefly. */
typedef struct server_stream {
    server_buf out;
    size_t pos;
    int ended;
    struct MHD_Connection *conn;
    int (*fill)(struct server_stream *st);
    void (*cleanup)(struct server_stream *st);
    void *user;
} server_stream;
int server_send_stream(struct MHD_Connection *c, const char *ctype, server_stream *st);

/* Ollama error shape {"error": msg}. */
int server_oll_error(struct MHD_Connection *c, int status, const char *msg);

/* The shape of the API a request belongs to: its error body (and which
 * headers an error carries). */
typedef enum { SERVER_API_OPENAI = 0, SERVER_API_OLLAMA, SERVER_API_ANTHROPIC } server_api;
/* An error object in api's shape (a new reference): OpenAI's {"error":
 * {message, type, param, code}}, Ollama's {"error": msg}, Anthropic's
 * {"type": "error", "error": {type, message}} (OpenAI's types in its
 * words). */
json_t *server_error_body(server_api api, const char *type, const char *msg, const char *param);
/* The API whose shape server_send_error takes on this thread (http.c sets it
 * per request; OpenAI's by default). */
void server_reply_api(server_api api);
/* A response made here (status, headers) goes out: CORS for an Origin,
 * the metrics and the request log count it.  Takes r. */
int server_reply(struct MHD_Connection *c, int status, struct MHD_Response *r);
/* The same without CORS headers (a refusal the page may not read). */
int server_reply_bare(struct MHD_Connection *c, int status, struct MHD_Response *r);
/* An error body (stolen) as a response not yet sent: JSON, with the
 * headers its status calls for (and Allow when allow is set); NULL when
 * out of memory. */
struct MHD_Response *server_error_response(int status, json_t *root, const char *allow);
/* An error body (stolen) sent, with the headers its status calls for
 * (Retry-After on 429/503, WWW-Authenticate on 401). */
int server_send_error_body(struct MHD_Connection *c, int status, json_t *root);
/* The same with an Allow header (a 405; allow NULL: none). */
int server_send_error_allow(struct MHD_Connection *c, int status, json_t *root, const char *allow);

#endif
