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
typedef struct ks_route {
    const char *method; /* "GET" (HEAD too) or "POST" */
    const char *path;
    int (*json)(ks_srv *s, struct MHD_Connection *c, json_t *body);
    int (*raw)(ks_srv *s, struct MHD_Connection *c, const char *url, const char *body, size_t len);
} ks_route;
/* openai.c: the route of an OpenAI-style path (/v1/..., /models, the rerank
 * aliases), or NULL; *known is set when the path is routed under another
 * method (a 405, with that method in allow). */
const ks_route *ks_oai_find(const char *method, const char *url, int *known, const char **allow);
/* ollama.c: every /api/ path (404 and 405 included). */
int ks_oll_route(ks_srv *s, struct MHD_Connection *c, const char *method, const char *url, json_t *body);
/* llama.c: llama-server's /tokenize, /detokenize, /apply-template, /props */
int ks_llama_path(const char *url);
int ks_llama_route(ks_srv *s, struct MHD_Connection *c, const char *method, const char *url, json_t *body);

/* The endpoints the route tables name. */
/* audio.c: POST /v1/audio/transcriptions and /translations over the buffered
 * multipart body. */
int ks_audio_route(ks_srv *s, struct MHD_Connection *c, const char *url, const char *body, size_t len);
int ks_oai_images(ks_srv *s, struct MHD_Connection *c, json_t *body);
ks_images *ks_images_start(const char *pack, char *err, size_t cap);
void ks_images_free(ks_images *im);
/* rerank.c: /v1/rerank and its aliases */
int ks_rerank(ks_srv *s, struct MHD_Connection *c, json_t *body);
/* run.c: OpenAI's Responses and Anthropic's Messages */
int ks_resp_handle(ks_srv *s, struct MHD_Connection *c, json_t *body);
int ks_msg_handle(ks_srv *s, struct MHD_Connection *c, json_t *body, int count);

#endif
