/* What the kiln commands share: the options of the model-running commands,
 * usage texts and error lines (common.c). */
#ifndef KILN_CLI_COMMON_H
#define KILN_CLI_COMMON_H

#include "kiln.h"

#include <stdint.h>
#include <stdio.h>

/* Options shared by the model-running commands. */
/* Most --image files one run takes. */
#define CLI_MAX_IMAGES 16

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
    int ignore_eos;          /* end-of-generation tokens are never sampled */
    int escape;              /* -e: the prompt's \n, \t, \\ ... are processed */
    const char *json_schema; /* --json-schema: the output follows this JSON schema */
    kiln_sampler_params sp;  /* sp.seed: --seed's, else drawn from the OS */
    /* stop strings (--stop, else a store pack's "stop"): the text ends
     * before the first one written, which is not printed */
    char stop[8][128];
    int n_stop;
    kiln_spec_params spec;             /* speculative decoding (--spec ...) */
    const char *mmproj;                /* --mmproj: the projector (else a store pack's own) */
    const char *image[CLI_MAX_IMAGES]; /* --image files, in order */
    int n_image;
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
/* kiln --help: every command and the run options. */
void cli_usage_all(FILE *f);
/* 1 when a is -h or --help. */
int cli_is_help(const char *a);
/* When arg is -h or --help: prints cmd's usage on stdout and returns 1.
 * Option loops ask it where an argument is not one of theirs, so the value
 * of an option (-p --help) is never taken for it. */
int cli_help(const char *cmd, const char *arg);
/* Prints "kiln: <msg>" for the last library error and returns 1. */
int cli_fail(const char *what);
/* Maps a model argument to a GGUF path: an existing file as is, otherwise a
 * store name, whose lease is then held until the process exits.  Prints the
 * store manifest first when print_manifest is set.  Returns 1 after printing
 * the error. */
int cli_model_path(const char *arg, int print_manifest, const char **path_out);

#endif
