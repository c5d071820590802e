/* A generation request from its admission to its response, shared by
 * every generation endpoint (run.c): one loop hands the token stream to
 * the writer of the request's shape (write.h), which sends OpenAI chat or
 * completion chunks, Ollama chat or generate lines, Responses or Messages
 * events, or the whole object. */
#ifndef KILN_SERVER_RUN_H
#define KILN_SERVER_RUN_H

#include "server/deltas.h"
#include "server/opts.h"
#include "server/srv.h"

#include <stdint.h>

struct MHD_Connection;

/* Validates against the context and queues: returns the request, or NULL
 * after sending the error response (*rc receives MHD's return).  Takes
 * over ids and what pm holds (the prompt's image rows; NULL: none), which
 * it empties. */
server_req *server_start(server_model *r, struct MHD_Connection *c, int32_t *ids, int32_t n, server_prompt_media *pm,
                         const server_gen_opts *o, int *rc);
/* A request with nothing set (calloc); server_req_free ends one (cancelling
 * it if it runs). */
server_req *server_req_new(void);
void server_req_free(server_req *q);
/* The response shapes, each with its writer (write.h) */
enum {
    SERVER_F_OAI_CHAT = 0,
    SERVER_F_OAI_COMPL,
    SERVER_F_OLL_GEN,
    SERVER_F_OLL_CHAT,
    SERVER_F_RESP,
    SERVER_F_MSG,
    SERVER_F_COUNT
};
typedef struct server_run_args {
    int format; /* SERVER_F_* */
    int stream;
    int include_usage; /* OpenAI stream_options.include_usage */
    int start_think;   /* the prompt opened a <think> block */
    double keep_alive; /* seconds for the model after this; NAN = keep */
    const char *model; /* name echoed back; NULL or empty: the model's */
    int think_off;     /* the request said think: false (Ollama) */
    int has_tools;     /* the request offered tools */
    double load_wait;  /* seconds this request waited for the model to load */
    json_t *tools;     /* the request's tools (borrowed; the run keeps a reference), or NULL */
    json_t *echo;      /* the request, which the response repeats (Responses; borrowed), or NULL */
} server_run_args;
/* Sends q's result (streamed or whole) in the chosen shape through its
 * writer; takes over the request and the model use. */
int server_run(server_srv *s, server_model *r, struct MHD_Connection *c, server_req *q, const server_run_args *a,
               const server_gen_opts *o);

#endif
