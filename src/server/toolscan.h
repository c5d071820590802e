/* A <tool_call> body read as it arrives (toolscan.c). */
#ifndef KILN_SERVER_TOOLSCAN_H
#define KILN_SERVER_TOOLSCAN_H

#include "server/buf.h"

#include <stddef.h>

typedef struct ks_toolscan {
    ks_buf name; /* the "name" value, decoded (NUL-terminated) */
    ks_buf args; /* "arguments": its JSON text, or a string's decoded characters */
    int named;   /* name complete and followed by ',' or '}' */
    int args_begun, args_done;
    int closed; /* the object ended */
    int bad;    /* the text broke the JSON or the call's shape; the rest is ignored */
    /* lexer state */
    int st, member, str_key, in_args, name_done, seen_name, seen_args;
    ks_buf stack; /* '{' and '[' of the open containers */
    ks_buf key;   /* a key of the call's object, decoded */
    ks_buf *sink; /* where the current string's characters go, or NULL */
    const char *lit;
    int litpos, hexn, u8need;
    unsigned cp, hi, u8cp, u8min;
} ks_toolscan;
void ks_toolscan_reset(ks_toolscan *t); /* for a new body; keeps the buffers */
void ks_toolscan_free(ks_toolscan *t);
void ks_toolscan_feed(ks_toolscan *t, const char *s, size_t n);

#endif
