/* A generation request's options: OpenAI's sampling fields, Ollama's
 * options and format, durations (opts.c). */
#ifndef KILN_SERVER_OPTS_H
#define KILN_SERVER_OPTS_H

#include "kiln.h"

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

struct MHD_Connection;

/* A request's token limit above this (2^30 tokens, past every context)
 * asks for the rest of the context, as -1 does. */
#define SERVER_MAX_TOKENS_CAP (1 << 30)

typedef struct server_gen_opts {
    int32_t max_tokens; /* -1 = rest of the context; else at most SERVER_MAX_TOKENS_CAP */
    kiln_sampler_params sp;
    json_t *stop; /* borrowed */
    int32_t n_top;
    int logprobs;
    int json_mode;
    const json_t *schema;      /* borrowed: the JSON Schema json_mode output must follow, or NULL */
    int urgent;                /* "urgent": true (kiln's own field): ahead of queued requests */
    int ignore_eos;            /* "ignore_eos": true (llama-server's): never end at an end-of-generation token */
    int ollama;                /* errors in Ollama's shape ({"error": "..."}) */
    const json_t *force_tools; /* borrowed: a forced tool_choice's tools, one of which the output must call */
    int force_think;           /* 1 a <think> block may come first, 2 the prompt opened one (a forced call, JSON mode
                                    and the thinking budget follow it) */
    int32_t think_budget;      /* tokens of reasoning before its end is fed; -1 no limit; SERVER_BUDGET_SERVER: the
                                    server's --reasoning-budget */
} server_gen_opts;

#define SERVER_BUDGET_SERVER (-2)
/* The thinking budget of a reasoning effort ("none", "minimal", "low",
 * "medium", "high", "xhigh"): 0, 256, 1024, 4096, then no limit (-1);
 * SERVER_BUDGET_SERVER for NULL; -3 for a word it does not know. */
int32_t server_effort_budget(const char *effort);
/* 0 when schema (NULL: none) compiles; else a message for a 400. */
int server_check_schema(const json_t *schema, char *msg, size_t n);
/* OpenAI's tool_choice over tools (OpenAI function tools): "auto" or
 * absent leaves both NULL/0; "none" sets *off; "required" or
 * {"type": "function", "function": {"name": N}} sets *force to the tools the
 * one call may name (a new array).  -1 with a message for a 400. */
int server_tool_choice(const json_t *choice, const json_t *tools, int *off, json_t **force, char *msg, size_t cap);
/* Ollama's "format": "json" or a JSON Schema into o; a schema that cannot
 * be enforced answers 400 (*rc) and returns -1. */
int server_oll_format(const json_t *fmt, server_gen_opts *o, struct MHD_Connection *c, int *rc);
/* Parses OpenAI-style sampling fields (or Ollama's options when ollama);
 * on a bad value sends a 400 and returns -1. */
int server_parse_opts(struct MHD_Connection *c, json_t *src, int ollama, server_gen_opts *o, int *rc);
/* Ollama's options.num_ctx into *out (0 when absent or null); -1 when it
 * is not an integer of 1..2^24. */
int server_num_ctx(const json_t *options, int32_t *out);
/* "1.5m", "300", 300, -1 ... -> seconds; NAN when absent or bad. */
double server_parse_duration(json_t *v);

#endif
