/* The generation endpoints both APIs share (generate.c): the model, the
 * prompt (a chat rendered, or text or ids), the options, then ks_run. */
#ifndef KILN_SERVER_GENERATE_H
#define KILN_SERVER_GENERATE_H

#include "server/opts.h"
#include "server/srv.h"

#include <jansson.h>

struct MHD_Connection;

/* Generation endpoints shared by both APIs. */
int ks_chat_common(ks_srv *s, struct MHD_Connection *c, json_t *body, int format);
int ks_generate_common(ks_srv *s, struct MHD_Connection *c, json_t *body, int format, const char *prompt_text,
                       json_t *prompt_ids, ks_gen_opts *o, double keep_alive);

#endif
