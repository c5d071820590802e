/* Embeddings for both APIs (embed.c). */
#ifndef KILN_SERVER_EMBED_H
#define KILN_SERVER_EMBED_H

#include "server/srv.h"

#include <jansson.h>

struct MHD_Connection;

/* Embeds inputs (a string or an array of strings) with r's model; fills
 * vectors (json arrays) or sends the error and returns -1. */
int server_embed_inputs(server_model *r, struct MHD_Connection *c, json_t *input, int kind, int dims, int truncate,
                        int ollama, json_t **vectors, int *n_tokens, int *rc);
/* POST /v1/embeddings */
int server_embed_openai(server_srv *s, struct MHD_Connection *c, json_t *body);
/* POST /api/embed; legacy: /api/embeddings (one vector, "embedding") */
int server_embed_ollama(server_srv *s, struct MHD_Connection *c, json_t *body, int legacy);

#endif
