/*
 * chat template — a Jinja2-subset interpreter for GGUF `tokenizer.chat_template`
 * strings.  Compiles once (lexer with trim_blocks + lstrip_blocks as Hugging
 * Face's apply_chat_template configures Jinja2, parser to an AST) and renders
 * many times against a jansson object of variables.
 *
 * Supported: {{ }}, {% %}, {# #}, whitespace control (- and +), if/elif/else,
 * for (tuple targets, inline `if` filter, else, loop.*), break/continue, set
 * (plain, tuple, block, namespace attribute), macro/call, raw, generation;
 * the filters, tests, operators, methods and globals real chat templates use.
 * Undefined values behave like Jinja2's default Undefined.
 *
 * Globals: range, namespace, dict, raise_exception(msg) (fails the render
 * with msg), strftime_now(fmt).  When `vars` holds an integer "kct_now"
 * (Unix seconds), strftime_now formats that instant in UTC instead of the
 * current local time, so renders are reproducible in tests.
 */
#ifndef KILN_CHAT_TEMPLATE_H
#define KILN_CHAT_TEMPLATE_H

#include "kiln.h"

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

/* The bounds of one render, shared by this engine and gotmpl.h's.  A field
 * left 0 takes its default (CHAT_DEFAULT_*): the largest template of the
 * conformance corpus (tests/data/templates) uses under 1% of each.  A render
 * that hits one fails with a message naming it ("render exceeded its step
 * budget (N steps)"), so a hostile template costs bounded time and memory.
 *   max_steps   evaluation steps: an expression, a statement, an item a loop
 *               or a builtin walks, 64 bytes a string search scans
 *   max_output  bytes of rendered text (and of any one captured block)
 *   max_memory  bytes the render allocates, all of it kept until it ends
 *   cancelled   polled every CHAT_POLL_STEPS steps with cancel_arg; non-zero
 *               ends the render with "render cancelled" (NULL: never) */
typedef struct chat_opts {
    uint64_t max_steps;
    size_t max_output;
    size_t max_memory;
    int (*cancelled)(void *arg);
    void *cancel_arg;
} chat_opts;
#define CHAT_DEFAULT_STEPS ((uint64_t)4000000)
#define CHAT_DEFAULT_OUTPUT ((size_t)8 << 20)
#define CHAT_DEFAULT_MEMORY ((size_t)64 << 20)
#define CHAT_POLL_STEPS 4096

typedef struct chat_tmpl chat_tmpl; /* a compiled template */
/* The entry points of this folder return a kiln_status with the message
 * set by base_fail (the interpreters unwind inside with longjmp or a failed
 * flag): KILN_ERR_FORMAT for a template that does not compile,
 * KILN_ERR_INVALID_ARG for a render the template refuses (the message
 * line:column or "line N: ..."), KILN_ERR_NOMEM, KILN_ERR_CANCELLED. */
kiln_status chat_compile(const char *src, size_t len, chat_tmpl **out);
void chat_free(chat_tmpl *t);
/* Renders with the variables of `vars` (a jansson json_t object: messages, tools, add_generation_prompt,
 * bos_token, eos_token, enable_thinking, ...) into *out, a malloc'd NUL-terminated string. */
kiln_status chat_render(const chat_tmpl *t, const json_t *vars, char **out);
/* chat_render under the bounds of opts (NULL: the defaults, no cancellation). */
kiln_status chat_render_opts(const chat_tmpl *t, const json_t *vars, const chat_opts *opts, char **out);
/* The status of an interpreter's failure message (out of memory, cancelled)
 * or otherwise. */
kiln_status chat_status_of(const char *msg, kiln_status otherwise);

#endif
