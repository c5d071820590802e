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

#include <stddef.h>
#include <jansson.h>

typedef struct kct kct; /* a compiled template */
kct *kct_compile(const char *src, size_t len, char *err, size_t errlen);
void kct_free(kct *t);
/* Renders with the variables of `vars` (a jansson json_t object: messages, tools, add_generation_prompt,
 * bos_token, eos_token, enable_thinking, ...).  Returns a malloc'd NUL-terminated string, or NULL with a
 * message (line:column) in err. */
char *kct_render(const kct *t, const json_t *vars, char *err, size_t errlen);

#endif
