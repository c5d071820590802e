/* Chat messages to prompt text and tokens (prompt.c). */
#ifndef KILN_SERVER_PROMPT_H
#define KILN_SERVER_PROMPT_H

#include "server/srv.h"

#include "chat/template.h"

#include <jansson.h>
#include <stdint.h>

/* A copy of messages as chat templates expect them (the caller owns it):
 * null or missing content becomes "", an array of parts its text, and
 * tool-call arguments given as JSON text become objects. */
json_t *server_chat_normalize(json_t *messages);
/* Renders messages (+ tools) into a prompt with the pack's Go template
 * (an Ollama model's) when it has one, else the GGUF's; returns malloc'd
 * text or NULL with err.  think: -1 default, 0 off, 1 on.  opts: the
 * render's budgets and cancel check (template.h; NULL: the defaults; a
 * max_steps of 0 takes the server's --template-steps). */
char *server_render_chat(server_model *r, json_t *messages, json_t *tools, int think, const chat_opts *opts, char *err,
                         size_t cap);
/* The HTTP status for a render's err: 500 when the template engine ran out
 * of memory (the engines' message says "out of memory") or the template
 * went over a budget of its render (template.h: the model's template is
 * at fault); 413 when server_render_chat named the conversation as too large
 * for the budgets (SERVER_TOO_LARGE: one of SERVER_LARGE_CHAT bytes or more, as
 * JSON, went over one); else 400 (the messages cannot be rendered as the
 * template asks, or the client went and the render was cancelled). */
int server_render_status(const char *err);
#define SERVER_TOO_LARGE "the conversation is too large for the chat template's budgets"
#define SERVER_LARGE_CHAT ((size_t)1 << 20)
/* 1 when the model has a chat template kiln can apply. */
int server_has_chat(server_model *r);
/* The template text server_render_chat uses (the pack's Go template, else the
 * GGUF's), or NULL: what /api/show shows and capabilities are read from. */
const char *server_template_text(server_model *r);
void server_template_free(void *t);
/* How the model writes tool calls (SERVER_CF_*, callfmt.h): decided when its
 * template is compiled, from the template's text and the vocabulary. */
int server_model_callfmt(server_model *r);
/* 1 when a rendered prompt ends in an open <think> block (blank space
 * after it aside): the generation starts in reasoning. */
int server_prompt_opens_think(const char *p);
/* force_think for a prompt: 2 when it opens a <think> block, 1 when the
 * model's template has one, else 0.  think_off: the request keeps what the
 * model writes as content (Ollama's think: false), so a JSON format holds
 * from the first token, as Ollama applies it: 0 unless the prompt opened a
 * block. */
int server_force_think(server_model *r, const char *prompt, int think_off);
/* Whether tokenizing text adds a BOS: 0 when a rendered prompt (parse_special)
 * begins with the BOS token's text already. */
int server_add_bos(kiln_model *m, const char *text, int parse_special);
/* Tokenizes text; parse_special for rendered chat; *n receives the count. */
int32_t *server_tokenize(kiln_model *m, const char *text, int parse_special, int32_t *n);

#endif
