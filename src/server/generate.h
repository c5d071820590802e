/* The generation endpoints both APIs share (generate.c): the model, the
 * prompt (a chat rendered, or text or ids), the options, then server_run. */
#ifndef KILN_SERVER_GENERATE_H
#define KILN_SERVER_GENERATE_H

#include "server/opts.h"
#include "server/srv.h"

#include <jansson.h>

struct MHD_Connection;

/* Generation endpoints shared by both APIs. */
int server_chat_common(server_srv *s, struct MHD_Connection *c, json_t *body, int format);
int server_generate_common(server_srv *s, struct MHD_Connection *c, json_t *body, int format, const char *prompt_text,
                           json_t *prompt_ids, server_gen_opts *o, double keep_alive);

#endif
