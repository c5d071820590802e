/* A store pack's defaults under what a request sets (defaults.c). */
#ifndef KILN_SERVER_DEFAULTS_H
#define KILN_SERVER_DEFAULTS_H

#include "server/opts.h"
#include "server/srv.h"

#include <jansson.h>

struct MHD_Connection;

/* A store pack's defaults (an Ollama model's params and
 * system layers) under what a request sets.  Re-reads o with the pack's
 * options under the request's (ollama: src is the request's "options",
 * else its body), keeping o's other fields; -1 after sending a 400. */
int server_defaults_opts(server_model *r, struct MHD_Connection *c, json_t *src, int ollama, server_gen_opts *o,
                         int *rc);
/* messages with the pack's system prompt first when they have none: a new
 * reference (messages itself when nothing changes). */
json_t *server_defaults_messages(server_model *r, json_t *messages);
/* The pack's system prompt, or NULL. */
const char *server_defaults_system(server_model *r);

#endif
