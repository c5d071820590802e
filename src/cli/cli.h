/* The kiln command-line tool: one file per group of subcommands. */
#ifndef KILN_CLI_H
#define KILN_CLI_H

#include "kiln.h"

#include <stdint.h>
#include <stdio.h>

int cmd_run(int argc, char **argv);
int cmd_chat(int argc, char **argv);
int cmd_show(int argc, char **argv);
int cmd_backends(int argc, char **argv);
int cmd_engines(int argc, char **argv);
int cmd_ps(int argc, char **argv);
int cmd_stop(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_quantize(int argc, char **argv);
int cmd_serve(int argc, char **argv);
int cmd_pull(int argc, char **argv);
int cmd_import(int argc, char **argv);
int cmd_ls(int argc, char **argv);
int cmd_rm(int argc, char **argv);
int cmd_verify(int argc, char **argv);
int cmd_gc(int argc, char **argv);
int cmd_cp(int argc, char **argv);
int cmd_embed(int argc, char **argv);
int cmd_rerank(int argc, char **argv);
int cmd_decide(int argc, char **argv);
int cmd_image(int argc, char **argv);

/* image.c: a PyTorch ZIP or safetensors file (by its first bytes), and
 * kiln show's listing of one through the restricted readers (no weights
 * are read). */
int cli_is_checkpoint(const char *path);
int cli_show_checkpoint(const char *path, int tensors);
int cmd_transcribe(int argc, char **argv);
/* kiln show on a whisper.cpp GGML file (transcribe.c); returns the exit code. */
int cli_show_whisper(const char *path, int tensors);

/* Options shared by the model-running commands. */
typedef struct cli_opts {
    const char *model;
    const char *prompt;
    int n_predict;
    int n_threads;
    int n_ctx;
    int n_batch;
    int kv_type; /* KILN_KV_* */
    int kv_flag; /* the -ctk/-ctv/--cache-type seen so far (1 + type), 0 none */
    int json;
    int verbose;
    int ignore_eos; /* end-of-generation tokens are never sampled */
    int escape;     /* -e: the prompt's \n, \t, \\ ... are processed */
    const char *json_schema; /* --json-schema: the output follows this JSON schema */
    kiln_sampler_params sp;  /* sp.seed: --seed's, else drawn from the OS */
    /* stop strings (--stop, else a store pack's "stop"): the text ends
     * before the first one written, which is not printed */
    char stop[8][128];
    int n_stop;
    kiln_spec_params spec;  /* speculative decoding (--spec ...) */
} cli_opts;

void cli_opts_init(cli_opts *o);
/* After parsing: -e's escapes applied to the prompt, the seed on stderr
 * with -v.  Returns -1 after printing an error. */
int cli_opts_finish(cli_opts *o, const char *cmd);
/* Parses the option at argv[*i] (advancing *i past its value).  Returns 1
 * when consumed, 0 when it is not a shared option, -1 on a bad value. */
int cli_parse_common(cli_opts *o, int argc, char **argv, int *i);
/* The speculative decoding options (--spec, --spec-n, --draft-model ...)
 * into sp, as cli_parse_common returns. */
int cli_parse_spec(kiln_spec_params *sp, int argc, char **argv, int *i);
/* With no -p or -f: the prompt is what is piped in on stdin, less one
 * trailing newline (-f - keeps it).  Returns 0 when o->prompt is set, -1
 * when there is none (stdin a terminal, or nothing piped in). */
int cli_prompt_from_stdin(cli_opts *o);
/* The KILN_KV_* type named s ("f16", "f32", "q8_0"); -1 if none. */
int cli_kv_type(const char *s);
/* The name of KILN_KV_* type t. */
const char *cli_kv_name(int t);
/* Prints "usage: kiln <synopsis of cmd>" (and, for run and chat, their
 * options) on f. */
void cli_usage(const char *cmd, FILE *f);
/* When arg is -h or --help: prints cmd's usage on stdout and returns 1.
 * Option loops ask it where an argument is not one of theirs, so the value
 * of an option (-p --help) is never taken for it. */
int cli_help(const char *cmd, const char *arg);
/* Prints "kiln: <msg>" for the last library error and returns 1. */
int cli_fail(const char *what);
/* Loads the model and a context for o; prints the error and returns 1 on
 * failure. */
int cli_load(const cli_opts *o, kiln_model **m, kiln_context **c, int n_seq);
/* Maps a model argument to a GGUF path: an existing file as is, otherwise a
 * store name, whose lease is then held until the process exits.  Prints the
 * store manifest first when print_manifest is set.  Returns 1 after printing
 * the error. */
int cli_model_path(const char *arg, int print_manifest, const char **path_out);
/* store.c: what a store pack brings for run and chat (an Ollama model's
 * params, system prompt and template; kiln_store_info's "defaults"). */
typedef struct cli_pack {
    char *system;       /* the default system prompt, or NULL */
    char *template_go;  /* the chat template override (Go template syntax), or NULL */
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
/* store.c: kiln show REF --remote (kiln_store_inspect), as text or JSON.
 * Returns the exit code. */
int cli_show_remote(const char *ref, const char *token, int json);

#endif
