/* A <tool_call> body read as it arrives (toolscan.c). */
#ifndef KILN_SERVER_TOOLSCAN_H
#define KILN_SERVER_TOOLSCAN_H

#include "server/buf.h"

#include <jansson.h>

#include <stddef.h>

typedef struct server_toolscan {
    server_buf name; /* the "name" value, decoded (NUL-terminated) */
    server_buf args; /* "arguments": its JSON text, or a string's decoded characters */
    int named;       /* name complete and followed by ',' or '}' */
    int args_begun, args_done;
    int closed; /* the object ended */
    int bad;    /* the text broke the JSON or the call's shape; the rest is ignored */
    /* lexer state */
    int st, member, str_key, in_args, name_done, seen_name, seen_args;
    server_buf stack; /* '{' and '[' of the open containers */
    server_buf key;   /* a key of the call's object, decoded */
    server_buf *sink; /* where the current string's characters go, or NULL */
    const char *lit;
    int litpos, hexn, u8need;
    unsigned cp, hi, u8cp, u8min;
} server_toolscan;
void server_toolscan_reset(server_toolscan *t); /* for a new body; keeps the buffers */
void server_toolscan_free(server_toolscan *t);
void server_toolscan_feed(server_toolscan *t, const char *s, size_t n);

/* The XML form of a call (Qwen3.5, Qwen3-Coder) read as it arrives, and
 * written out as the JSON text of its arguments (xmlcall.c):
 *     <function=NAME>
 *     <parameter=KEY>
 *     VALUE
 *     </parameter>
 *     ...
 *     </function>
 * The type of a VALUE comes from the offered tool's schema for KEY. */
typedef struct server_xmlscan {
    server_buf name;     /* the function's name (NUL-terminated) */
    server_buf args;     /* the arguments' JSON text so far */
    int named;           /* name complete */
    int closed;          /* </function> read */
    int bad;             /* the text broke the form; the rest is ignored */
    int st;              /* what is read next (xmlcall.c) */
    size_t pos;          /* bytes of the body read */
    int n_param;         /* parameters written */
    unsigned kind;       /* the current value's types, from the schema (0: not known) */
    size_t scanned;      /* bytes of the current value searched for its end */
    const json_t *tools; /* the request's tools (borrowed), or NULL */
    const json_t *props; /* the named tool's "properties", or NULL */
} server_xmlscan;
/* For a new body, with the request's tools (borrowed, outliving x: any of
 * the OpenAI, Responses or Anthropic shapes); keeps the buffers. */
void server_xmlscan_reset(server_xmlscan *x, const json_t *tools);
void server_xmlscan_free(server_xmlscan *x);
/* body[0..n) is the whole body so far: the text of earlier calls plus what
 * came since (the scanner goes on from where it stopped). */
void server_xmlscan_feed(server_xmlscan *x, const char *body, size_t n);
/* The call {name, arguments} of a closed body, or NULL (new reference). */
json_t *server_xmlscan_call(const server_xmlscan *x);

#endif
