/* Loading a command's model: a store pack's defaults, the model and its
 * context (model.c). */
#ifndef KILN_CLI_MODEL_H
#define KILN_CLI_MODEL_H

#include "cli/common.h"

/* Loads the model and a context for o; prints the error and returns 1 on
 * failure. */
int cli_load(const cli_opts *o, kiln_model **m, kiln_context **c, int n_seq);
/* What a store pack brings for run and chat (an Ollama model's
 * params, system prompt and template; kiln_store_info's "defaults"). */
typedef struct cli_pack {
    char *system;      /* the default system prompt, or NULL */
    char *template_go; /* the chat template override (Go template syntax), or NULL */
} cli_pack;
/* Before the options are parsed: marks the options a pack may set. */
void cli_pack_mark(cli_opts *o);
/* After: each option the command line left alone takes the pack's value
 * (temperature, top_k, top_p, min_p, repeat_penalty, repeat_last_n,
 * presence_penalty, frequency_penalty, seed, num_predict, num_ctx,
 * num_thread, num_batch, by Ollama's names) when o->model names a store
 * pack that has it, else base's.  pk receives the rest (free it). */
void cli_pack_apply(cli_opts *o, const cli_opts *base, cli_pack *pk);
void cli_pack_free(cli_pack *pk);

#endif
