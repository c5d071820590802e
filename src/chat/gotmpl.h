/*
 * gotmpl — the subset of Go's text/template that Ollama's chat templates
 * use, with Ollama's data model, so a model pulled from an Ollama registry
 * chats with its own template (the pack's template layer).
 *
 * Syntax: {{ }} actions with trim markers ({{- and -}}), comments (a
 * C-style comment alone in an action), if / else if / else, range (one or two variables,
 * over arrays, objects in sorted key order, and integers; else; break,
 * continue), with / else with, variables ($x := ..., $x = ..., $ the
 * root), fields (.A.B, $x.A, (pipeline).A), pipelines (a | f), string,
 * raw string, number, true/false/nil literals, and the functions and, or
 * (short-circuit), not, eq (against any of the rest), ne, lt, le, gt, ge,
 * len, index, slice, print, printf (%s %d %v %q %t %f %%), println and
 * Ollama's json.  define / template / block are refused when compiled.
 *
 * Values are jansson values.  A field .ToolCalls reads the key "ToolCalls",
 * else its snake_case form "tool_calls", so the OpenAI-shaped messages and
 * tools kiln carries read as Ollama's Go structs do; a missing field is
 * nil (an empty string when printed, false, length 0), as a struct's zero
 * value is.  Objects and arrays print as compact JSON (Ollama's tool types
 * print themselves so), with '<', '>' and '&' escaped as Go's encoder does.
 */
#ifndef KILN_CHAT_GOTMPL_H
#define KILN_CHAT_GOTMPL_H

#include "chat/template.h"

#include <jansson.h>
#include <stddef.h>

typedef struct kgt kgt; /* a compiled template (immutable: renders may share it) */

/* The compiled template holds a copy of src: the caller's text may be
 * freed once this returns. */
/* Fails with template.h's statuses (KILN_ERR_FORMAT, _NOMEM), the message
 * "line N: ..." set by base_fail. */
kiln_status chat_gotmpl_compile(const char *src, size_t len, kgt **out);
void chat_gotmpl_free(kgt *t);

/* Renders with data as the root value (dot) into *out, a malloc'd string;
 * a failure is template.h's KILN_ERR_INVALID_ARG, _NOMEM or _CANCELLED with
 * "line N: message" set by base_fail.  The _opts forms render under the
 * bounds of opts (template.h's chat_opts: steps, output, memory, cancel;
 * NULL: the defaults); a step is an action, a node, an operand or a range
 * iteration, memory the bytes of the strings and slices the render makes. */
kiln_status chat_gotmpl_render(const kgt *t, const json_t *data, char **out);
kiln_status chat_gotmpl_render_opts(const kgt *t, const json_t *data, const chat_opts *opts, char **out);

/* A chat as Ollama renders it.  messages: OpenAI-shaped (role, content as a
 * string, reasoning_content or thinking, tool_calls with object arguments,
 * tool_call_id, name); tools: OpenAI function tools or NULL; think: -1 not
 * set, else the request's value.  A template that names .Messages gets
 * {System (every system message, joined by blank lines), Messages
 * (consecutive messages of one role but tool merged, their contents joined
 * by blank lines), Tools, Response "", Think, IsThinkSet}; an older one
 * that does not is run once per turn with {System, Prompt, Response}, and
 * the last turn only up to its .Response, as Ollama does. */
kiln_status chat_gotmpl_render_chat(const kgt *t, const json_t *messages, const json_t *tools, int think, char **out);
kiln_status chat_gotmpl_render_chat_opts(const kgt *t, const json_t *messages, const json_t *tools, int think,
                                         const chat_opts *opts, char **out);

#endif
