/* The endpoints and the route tables that name them: openai.c's and
 * ollama.c's (and llama.c's paths); http.c asks them. */
#ifndef KILN_SERVER_API_H
#define KILN_SERVER_API_H

#include "server/srv.h"

#include <jansson.h>
#include <stddef.h>

struct MHD_Connection;

/* One route: a method and a path, and the handler that answers it, given
 * the parsed JSON body (NULL when it has none) or, for a raw route, the
 * body's bytes (multipart forms). */
typedef struct server_route {
    const char *method; /* "GET" (HEAD too) or "POST" */
    const char *path;
    int (*json)(server_srv *s, struct MHD_Connection *c, json_t *body);
    int (*raw)(server_srv *s, struct MHD_Connection *c, const char *url, const char *body, size_t len);
} server_route;
/* openai.c: the route of an OpenAI-style path (/v1/..., /models, the rerank
 * aliases), or NULL; *known is set when the path is routed under another
 * method (a 405, with that method in allow). */
const server_route *server_oai_find(const char *method, const char *url, int *known, const char **allow);
/* ollama.c: every /api/ path (404 and 405 included). */
int server_oll_route(server_srv *s, struct MHD_Connection *c, const char *method, const char *url, json_t *body);
/* llama.c: llama-server's /tokenize, /detokenize, /apply-template, /props */
int server_llama_path(const char *url);
int server_llama_route(server_srv *s, struct MHD_Connection *c, const char *method, const char *url, json_t *body);

/* The endpoints the route tables name. */
/* audio.c: POST /v1/audio/transcriptions and /translations over the buffered
 * multipart body. */
int server_audio_route(server_srv *s, struct MHD_Connection *c, const char *url, const char *body, size_t len);
int server_oai_images(server_srv *s, struct MHD_Connection *c, json_t *body);
server_images *server_images_start(const char *pack, char *err, size_t cap);
void server_images_free(server_images *im);
/* rerank.c: /v1/rerank and its aliases */
int server_rerank(server_srv *s, struct MHD_Connection *c, json_t *body);
/* run.c: OpenAI's Responses and Anthropic's Messages */
int server_resp_handle(server_srv *s, struct MHD_Connection *c, json_t *body);
int server_msg_handle(server_srv *s, struct MHD_Connection *c, json_t *body, int count);

#endif
