/* A generation request from its admission to its response, shared by
 * every generation endpoint (run.c): one loop hands the token stream to
 * the writer of the request's shape (write.h), which sends OpenAI chat or
 * completion chunks, Ollama chat or generate lines, Responses or Messages
 * events, or the whole object. */
#ifndef KILN_SERVER_RUN_H
#define KILN_SERVER_RUN_H

#include "server/gen.h"
#include "server/opts.h"
#include "server/srv.h"

#include <stdint.h>

struct MHD_Connection;

/* Validates against the context and queues: returns the request, or NULL
 * after sending the error response (*rc receives MHD's return).  Takes
 * over ids and what pm holds (the prompt's image rows; NULL: none), which
 * it empties. */
ks_req *ks_start(ks_model *r, struct MHD_Connection *c, int32_t *ids, int32_t n, ks_prompt_media *pm,
                 const ks_gen_opts *o, int *rc);
/* A request with nothing set (calloc); ks_req_free ends one (cancelling
 * it if it runs). */
ks_req *ks_req_new(void);
void ks_req_free(ks_req *q);
/* The response shapes, each with its writer (write.h) */
enum { KS_F_OAI_CHAT = 0, KS_F_OAI_COMPL, KS_F_OLL_GEN, KS_F_OLL_CHAT, KS_F_RESP, KS_F_MSG, KS_F_COUNT };
typedef struct ks_run_args {
    int format; /* KS_F_* */
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
} ks_run_args;
/* Sends q's result (streamed or whole) in the chosen shape through its
 * writer; takes over the request and the model use. */
int ks_run(ks_srv *s, ks_model *r, struct MHD_Connection *c, ks_req *q, const ks_run_args *a, const ks_gen_opts *o);

#endif
