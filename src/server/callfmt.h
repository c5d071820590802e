/* The forms in which model families write tool calls (callfmt.c).  A
 * model's form is decided once, from its chat template and vocabulary;
 * gen.c splits a reply at the form's markers and hands each marked section
 * to server_callfmt_parse. */
#ifndef KILN_SERVER_CALLFMT_H
#define KILN_SERVER_CALLFMT_H

#include "kiln.h"
#include "sample/sample.h"

#include <jansson.h>

#include <stddef.h>

enum {
    SERVER_CF_TAG = 0, /* <tool_call>{json}</tool_call> or its XML body (Qwen, Hermes, Nemotron 3): toolscan.c */
    SERVER_CF_HARMONY, /* gpt-oss: a message to functions.NAME (gen.c's harmony reader) */
    SERVER_CF_LLAMA3,  /* {"name": N, "parameters": {...}} opening the reply, or <|python_tag|>... */
    SERVER_CF_MISTRAL, /* [TOOL_CALLS][{"name": N, "arguments": {...}}, ...] or [TOOL_CALLS]N[ARGS]{...} */
    SERVER_CF_GEMMA4,  /* <|tool_call>call:N{key:<|"|>text<|"|>,n:1}<tool_call|> */
    SERVER_CF_DEEPSEEK, /* <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>N\n```json\n{...}\n```
                       <｜tool▁call▁end｜>...<｜tool▁calls▁end｜> (V3, R1), or N<｜tool▁sep｜>{...} (V3.1) */
    SERVER_CF_PHI4, /* <|tool_call|>[{"name": N, "arguments": {...}}]<|/tool_call|>, or functools[...] (Phi-4-mini) */
    SERVER_CF_NEMOTRON, /* <TOOLCALL>[{"name": N, "arguments": {...}}]</TOOLCALL> (Nemotron Nano 2) */
    SERVER_CF_COUNT
};

/* The form of a model whose chat template is tmpl (NULL: none). */
int server_callfmt_detect(const char *tmpl, const kiln_model *m);
const char *server_callfmt_name(int fmt);

/* Where a form's call sections are: one of open[] starts one (open[i]
 * NULL: unused), close ends it (NULL: the reply's end, or with reopen the
 * next opener, which ends one section and starts the next).  at_start: a
 * section also starts where the reply's first non-blank byte is '{' (the
 * '{' and the blanks before it belong to the section).  think: the form's
 * own reasoning block, beside <think>...</think> (NULL: none).  NULL for
 * SERVER_CF_TAG and SERVER_CF_HARMONY, which gen.c reads itself. */
typedef struct server_callfmt_tags {
    const char *open[2];
    const char *close;
    int reopen;
    int at_start;
    const char *think[2]; /* opener, closer */
} server_callfmt_tags;
const server_callfmt_tags *server_callfmt_marks(int fmt);

/* The marker texts of a form that its vocabularies may hold as control
 * tokens (which decode to nothing): gen.c shows them in a chat that offers
 * tools, as llama.cpp's preserved tokens.  NULL-terminated. */
const char *const *server_callfmt_markers(int fmt);

/* The calls in one section: opener is the index in open[] that began it
 * (-1: at_start), body[0..n) the text after it up to the closer or the
 * reply's end.  Returns an array of {name, arguments} (new reference,
 * arguments a JSON value, an object unless the model wrote something
 * else), or NULL when the body is not calls in this form: the section is
 * then content, as written.  tools: the offered tools (borrowed; NULL:
 * none), whose names an at_start section must use. */
json_t *server_callfmt_parse(int fmt, int opener, const char *body, size_t n, const json_t *tools);

/* A forced call in this form (sample.h's recognizer): the literals around
 * the name and the arguments into *out (static text).  -1 when the form
 * has no JSON arguments to constrain (Gemma 4). */
int server_callfmt_call_form(int fmt, const char *tmpl, sample_call_form *out);

#endif
