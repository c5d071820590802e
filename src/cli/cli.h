/* The kiln commands: one file per group of subcommands, each run by main.c
 * with its arguments (argv[0] the command's name); what they share is
 * common.h (options, usage, errors, model arguments) and model.h (a store
 * pack's defaults, loading a model). */
#ifndef KILN_CLI_H
#define KILN_CLI_H

int cli_run(int argc, char **argv);
int cli_chat(int argc, char **argv);
int cli_show(int argc, char **argv);
int cli_backends(int argc, char **argv);
int cli_engines(int argc, char **argv);
int cli_ps(int argc, char **argv);
int cli_stop(int argc, char **argv);
int cli_tokenize(int argc, char **argv);
int cli_bench(int argc, char **argv);
int cli_quantize(int argc, char **argv);
int cli_serve(int argc, char **argv);
int cli_pull(int argc, char **argv);
int cli_import(int argc, char **argv);
int cli_ls(int argc, char **argv);
int cli_rm(int argc, char **argv);
int cli_verify(int argc, char **argv);
int cli_gc(int argc, char **argv);
int cli_cp(int argc, char **argv);
int cli_embed(int argc, char **argv);
int cli_rerank(int argc, char **argv);
int cli_decide(int argc, char **argv);
int cli_image(int argc, char **argv);

/* image.c: a PyTorch ZIP or safetensors file (by its first bytes), and
 * kiln show's listing of one through the restricted readers (no weights
 * are read). */
int cli_is_checkpoint(const char *path);
int cli_show_checkpoint(const char *path, int tensors);
int cli_transcribe(int argc, char **argv);
/* kiln show on a whisper.cpp GGML file (transcribe.c); returns the exit code. */
int cli_show_whisper(const char *path, int tensors);

/* store.c: kiln show REF --remote (kiln_store_inspect), as text or JSON.
 * Returns the exit code. */
int cli_show_remote(const char *ref, const char *token, int json);

#endif
