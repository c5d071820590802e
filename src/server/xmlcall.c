/* The XML form of a tool call (toolscan.h), read as it arrives.
 *
 * A VALUE is the text between the newline after <parameter=KEY> and the
 * newline before </parameter>; a chat template writes strings as they are
 * and other values as JSON, so the text alone cannot tell "42" the string
 * from 42 the number.  The offered tool's schema for KEY decides:
 *   - "string" only: the text is the string, streamed as it comes;
 *   - other types: the text is read as JSON and kept when it has one of
 *     them (an integral real for "integer" becomes the integer; a boolean
 *     also in any letter case, as some models write Python's True);
 *     "null" is null wherever the schema allows null or not a string;
 *     otherwise a schema that allows a string gets the text;
 *   - no schema for KEY (an unknown tool or parameter), or text that fits
 *     none of its types: a number, true, false, null, array or object the
 *     text spells, else the string.
 * Values other than schema strings go out whole at their closing tag. */
#define _GNU_SOURCE
#include "server/toolscan.h"

#include "server/buf.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

enum {
    X_OPEN,   /* whitespace, then <function= */
    X_NAME,   /* the name, up to '>' */
    X_PARAMS, /* whitespace, then <parameter= or </function> */
    X_KEY,    /* a parameter's name, up to '>' */
    X_NL,     /* the newline that may follow <parameter=KEY> */
    X_SVAL,   /* a string value, streamed */
    X_VAL,    /* another value, up to </parameter> */
    X_END,    /* after </function>: whitespace only */
};

/* A value's types: bits of the schema's "type" names. */
enum { T_STR = 1, T_INT = 2, T_NUM = 4, T_BOOL = 8, T_NULL = 16, T_OBJ = 32, T_ARR = 64 };

#define NAME_MAX_LEN 256 /* bytes of a function or parameter name */

static const char k_param[] = "<parameter=", k_end_param[] = "</parameter>", k_end_fn[] = "</function>";

void server_xmlscan_reset(server_xmlscan *x, const json_t *tools) {
    server_buf keep[2] = {x->name, x->args};
    memset(x, 0, sizeof *x);
    for (int i = 0; i < 2; i++) {
        keep[i].len = 0;
        if (keep[i].p) keep[i].p[0] = 0;
    }
    x->name = keep[0];
    x->args = keep[1];
    x->tools = tools;
}

void server_xmlscan_free(server_xmlscan *x) {
    server_buf_free(&x->name);
    server_buf_free(&x->args);
}

static unsigned type_bit(const char *t) {
    if (!t) return 0;
    if (!strcmp(t, "string")) return T_STR;
    if (!strcmp(t, "integer")) return T_INT;
    if (!strcmp(t, "number")) return T_NUM;
    if (!strcmp(t, "boolean")) return T_BOOL;
    if (!strcmp(t, "null")) return T_NULL;
    if (!strcmp(t, "object")) return T_OBJ;
    if (!strcmp(t, "array")) return T_ARR;
    return 0;
}

/* The types a JSON schema allows (0: it does not say). */
static unsigned schema_types(const json_t *s, int depth) {
    if (!json_is_object(s) || depth > 8) return 0;
    const json_t *t = json_object_get(s, "type");
    unsigned k = 0;
    if (json_is_string(t)) k = type_bit(json_string_value(t));
    size_t i;
    const json_t *v;
    if (json_is_array(t)) json_array_foreach(t, i, v) k |= type_bit(json_string_value(v));
    const char *alts[] = {"anyOf", "oneOf"};
    for (int a = 0; a < 2; a++) {
        const json_t *l = json_object_get(s, alts[a]);
        if (json_is_array(l)) json_array_foreach(l, i, v) k |= schema_types(v, depth + 1);
    }
    const json_t *en = json_object_get(s, "enum");
    if (!k && json_is_array(en) && json_array_size(en)) {
        json_array_foreach(en, i, v) {
            k |= json_is_string(v)    ? T_STR
                 : json_is_integer(v) ? T_INT
                 : json_is_real(v)    ? T_NUM
                 : json_is_boolean(v) ? T_BOOL
                 : json_is_null(v)    ? T_NULL
                 : json_is_object(v)  ? T_OBJ
                                      : T_ARR;
        }
    }
    if (!k && json_is_object(json_object_get(s, "properties"))) k = T_OBJ;
    if (!k && json_object_get(s, "items")) k = T_ARR;
    return k;
}

/* The "properties" of the tool called name in tools, or NULL.  A tool is
 * {type, function: {name, parameters}} (Chat Completions), {type, name,
 * parameters} (Responses) or {name, input_schema} (Messages). */
static const json_t *tool_props(const json_t *tools, const char *name) {
    size_t i;
    const json_t *t;
    json_array_foreach(tools, i, t) {
        const json_t *f = json_object_get(t, "function");
        if (!json_is_object(f)) f = t;
        const char *n = json_string_value(json_object_get(f, "name"));
        if (!n || strcmp(n, name)) continue;
        const json_t *p = json_object_get(f, "parameters");
        if (!p) p = json_object_get(f, "input_schema");
        const json_t *props = json_object_get(p, "properties");
        return json_is_object(props) ? props : NULL;
    }
    return NULL;
}

/* Appends s[0..n) as the inside of a JSON string (UTF-8 bytes as they are;
 * gen.c sends whole characters). */
static void put_escaped(server_buf *b, const char *s, size_t n) {
    size_t run = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c >= 0x20 && c != '"' && c != '\\') continue;
        server_buf_put(b, s + run, i - run);
        run = i + 1;
        char e[8];
        switch (c) {
        case '"': server_buf_puts(b, "\\\""); break;
        case '\\': server_buf_puts(b, "\\\\"); break;
        case '\n': server_buf_puts(b, "\\n"); break;
        case '\r': server_buf_puts(b, "\\r"); break;
        case '\t': server_buf_puts(b, "\\t"); break;
        case '\b': server_buf_puts(b, "\\b"); break;
        case '\f': server_buf_puts(b, "\\f"); break;
        default: snprintf(e, sizeof e, "\\u%04x", c); server_buf_puts(b, e);
        }
    }
    server_buf_put(b, s + run, n - run);
}

/* A number, true, false, null, array or object that v spells, else the
 * string v. */
static json_t *spelled(const char *v, size_t n) {
    json_error_t je;
    json_t *j = json_loadb(v, n, JSON_DECODE_ANY, &je);
    if (j && !json_is_string(j)) return j;
    json_decref(j);
    return server_jstr(v, n);
}

/* The value text v[0..n) as the types kind allow (the rules at the top). */
static json_t *typed(unsigned kind, const char *v, size_t n) {
    if (!kind) return spelled(v, n);
    if (n == 4 && !memcmp(v, "null", 4) && (kind & T_NULL || !(kind & T_STR))) return json_null();
    if (kind & ~(T_STR | T_NULL)) {
        json_error_t je;
        json_t *j = json_loadb(v, n, JSON_DECODE_ANY, &je);
        if (!j && kind & T_BOOL && (n == 4 || n == 5)) {
            if (!strncasecmp(v, "true", n) && n == 4) return json_true();
            if (!strncasecmp(v, "false", n) && n == 5) return json_false();
        }
        if (j) {
            int fits = (json_is_integer(j) && kind & (T_INT | T_NUM)) || (json_is_real(j) && kind & T_NUM) ||
                       (json_is_boolean(j) && kind & T_BOOL) || (json_is_object(j) && kind & T_OBJ) ||
                       (json_is_array(j) && kind & T_ARR);
            if (fits) return j;
            double d = json_is_real(j) ? json_real_value(j) : NAN;
            if (kind & T_INT && isfinite(d) && d == floor(d) && fabs(d) < 9007199254740992.0) {
                json_decref(j);
                return json_integer((json_int_t)d);
            }
            json_decref(j);
        }
    }
    if (kind & T_STR) return server_jstr(v, n);
    return spelled(v, n);
}

/* p[0..n) against the literal t: 1 starts with it, 0 is a proper prefix
 * of it (wait for more), -1 neither. */
static int against(const char *p, size_t n, const char *t) {
    size_t tl = strlen(t);
    if (n >= tl) return memcmp(p, t, tl) ? -1 : 1;
    return memcmp(p, t, n) ? -1 : 0;
}

static int is_ws(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

/* A name up to '>' from x->pos: its end, or NULL (wait, or x->bad set). */
static const char *name_end(server_xmlscan *x, const char *body, size_t n) {
    const char *p = body + x->pos, *q = memchr(p, '>', n - x->pos);
    size_t len = q ? (size_t)(q - p) : n - x->pos;
    if (memchr(p, '\n', len) || (q && len == 0) || len > NAME_MAX_LEN) x->bad = 1;
    return x->bad ? NULL : q;
}

void server_xmlscan_feed(server_xmlscan *x, const char *body, size_t n) {
    while (!x->bad && x->pos < n) {
        const char *p = body + x->pos;
        size_t rest = n - x->pos;
        switch (x->st) {
        case X_OPEN:
        case X_PARAMS:
        case X_END: {
            if (is_ws(*p)) {
                x->pos++;
                continue;
            }
            if (x->st == X_END) {
                x->bad = 1;
                return;
            }
            int a = against(p, rest, x->st == X_OPEN ? "<function=" : k_param);
            int b = x->st == X_PARAMS ? against(p, rest, k_end_fn) : -1;
            if (a < 0 && b < 0) {
                x->bad = 1;
                return;
            }
            if (a == 1) {
                x->pos += x->st == X_OPEN ? 10 : sizeof k_param - 1;
                x->st = x->st == X_OPEN ? X_NAME : X_KEY;
            } else if (b == 1) {
                x->pos += sizeof k_end_fn - 1;
                server_buf_puts(&x->args, "}");
                x->closed = 1;
                x->st = X_END;
            } else {
                return; /* a prefix of a tag: wait */
            }
            break;
        }
        case X_NAME: {
            const char *q = name_end(x, body, n);
            if (!q) return;
            server_buf_put(&x->name, p, (size_t)(q - p));
            x->named = 1;
            x->props = tool_props(x->tools, x->name.p);
            server_buf_puts(&x->args, "{");
            x->pos = (size_t)(q + 1 - body);
            x->st = X_PARAMS;
            break;
        }
        case X_KEY: {
            const char *q = name_end(x, body, n);
            if (!q) return;
            char key[NAME_MAX_LEN + 1];
            memcpy(key, p, (size_t)(q - p));
            key[q - p] = 0;
            server_buf_puts(&x->args, x->n_param ? ", \"" : "\"");
            put_escaped(&x->args, key, (size_t)(q - p));
            server_buf_puts(&x->args, "\": ");
            x->kind = x->props ? schema_types(json_object_get(x->props, key), 0) : 0;
            x->pos = (size_t)(q + 1 - body);
            x->st = X_NL;
            break;
        }
        case X_NL:
            if (*p == '\n') x->pos++;
            if (x->kind == T_STR) {
                server_buf_puts(&x->args, "\"");
                x->st = X_SVAL;
            } else {
                x->st = X_VAL;
                x->scanned = 0;
            }
            break;
        case X_SVAL:
        case X_VAL: {
            const size_t from = x->st == X_VAL ? x->scanned : 0;
            const char *ve = memmem(p + from, rest - from, k_end_param, sizeof k_end_param - 1);
            if (!ve && x->st == X_VAL) { /* searched again from where the tag could begin */
                x->scanned = rest >= sizeof k_end_param - 1 ? rest - (sizeof k_end_param - 2) : 0;
                return;
            }
            size_t upto;
            if (ve) {
                upto = (size_t)(ve - p);
                if (upto && p[upto - 1] == '\n') upto--;
            } else { /* hold back what may be "\n</parameter>" */
                size_t hold = server_partial_suffix(p, rest, k_end_param);
                if (rest > hold && p[rest - hold - 1] == '\n') hold++;
                upto = rest - hold;
            }
            if (x->st == X_SVAL) {
                put_escaped(&x->args, p, upto);
                x->pos += upto;
            } else {
                json_t *v = typed(x->kind, p, upto);
                char *t = v ? json_dumps(v, JSON_ENCODE_ANY) : NULL; /* ", " and ": " as the strings' keys */
                if (t)
                    server_buf_puts(&x->args, t);
                else
                    x->bad = 1;
                free(t);
                json_decref(v);
            }
            if (!ve) return;
            if (x->st == X_SVAL) server_buf_puts(&x->args, "\"");
            x->pos = (size_t)(ve + sizeof k_end_param - 1 - body);
            x->n_param++;
            x->st = X_PARAMS;
            break;
        }
        }
    }
}

json_t *server_xmlscan_call(const server_xmlscan *x) {
    if (x->bad || !x->closed || x->name.failed || x->args.failed) return NULL;
    json_error_t je;
    json_t *args = json_loadb(x->args.p, x->args.len, 0, &je);
    if (!args) return NULL;
    json_t *call = json_object();
    json_object_set_new(call, "name", server_jstr(x->name.p, x->name.len));
    json_object_set_new(call, "arguments", args);
    return call;
}
