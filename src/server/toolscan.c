/* A <tool_call> body read as it arrives, so a streamed call can go out
 * before its closing tag (gen.c decides what to send).
 *
 * One pass, byte by byte, never backing up: a pushdown JSON lexer checks
 * that the text is still a prefix of one object, and watches that object's
 * own members.  "name" must be a string; its decoded value lands in
 * t->name and counts as settled (t->named) at the ',' or '}' after it.
 * "arguments" may be any value: its JSON text goes to t->args byte for byte
 * as it is read, or, when it is a string, the decoded characters do (a
 * model that writes the arguments as a string of JSON means that text).
 * Other members are checked and skipped.
 *
 * The rules are jansson's (gen.c parses the whole body with it at the
 * closing tag), so the scanner gives up (t->bad) on what jansson would
 * refuse: control characters and lone surrogates in strings, \u0000,
 * invalid UTF-8, leading zeros, more than 2048 levels, text after the
 * object.  It also gives up on a repeated "name" or "arguments", where
 * jansson would quietly keep the last.  Number overflow is not tracked. */
#include "server/toolscan.h"

#include "server/buf.h"

#include <string.h>

enum {
    S_TOP,       /* whitespace, then '{' */
    S_KEY0,      /* after '{': a key or '}' */
    S_KEY,       /* after ',' in an object: a key */
    S_COLON,     /* after a key */
    S_VALUE0,    /* after '[': a value or ']' */
    S_VALUE,     /* a value */
    S_AFTER,     /* after a value: ',' or the closer */
    S_STR,       /* in a string */
    S_ESC,       /* after '\' */
    S_HEX,       /* in \uXXXX */
    S_LIT,       /* in true, false or null */
    S_NUM_MINUS, /* number states: after '-', after a leading 0, in the */
    S_NUM_ZERO,  /* integer digits, after '.', in the fraction, after */
    S_NUM_INT,   /* 'e', after the exponent's sign, in its digits */
    S_NUM_DOT,
    S_NUM_FRAC,
    S_NUM_E,
    S_NUM_ESIGN,
    S_NUM_EXP,
    S_END, /* after the object: whitespace only */
};

enum { M_OTHER = 0, M_NAME, M_ARGS };

#define MAX_DEPTH 2048 /* jansson's JSON_PARSER_MAX_DEPTH */

void server_toolscan_reset(server_toolscan *t) {
    server_buf keep[4] = {t->name, t->args, t->stack, t->key};
    memset(t, 0, sizeof *t);
    for (int i = 0; i < 4; i++) {
        keep[i].len = 0;
        if (keep[i].p) keep[i].p[0] = 0; /* reads as "" until written */
    }
    t->name = keep[0];
    t->args = keep[1];
    t->stack = keep[2];
    t->key = keep[3];
}

void server_toolscan_free(server_toolscan *t) {
    server_buf_free(&t->name);
    server_buf_free(&t->args);
    server_buf_free(&t->stack);
    server_buf_free(&t->key);
}

static int is_ws(unsigned c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

static void put_utf8(server_buf *b, unsigned cp) {
    char u[4];
    size_t n;
    if (cp < 0x80) {
        u[0] = (char)cp;
        n = 1;
    } else if (cp < 0x800) {
        u[0] = (char)(0xC0 | cp >> 6);
        u[1] = (char)(0x80 | (cp & 0x3F));
        n = 2;
    } else if (cp < 0x10000) {
        u[0] = (char)(0xE0 | cp >> 12);
        u[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        u[2] = (char)(0x80 | (cp & 0x3F));
        n = 3;
    } else {
        u[0] = (char)(0xF0 | cp >> 18);
        u[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
        u[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
        u[3] = (char)(0x80 | (cp & 0x3F));
        n = 4;
    }
    server_buf_put(b, u, n);
}

/* The string's decoded text goes to t->sink (NULL: nowhere). */
static void str_put(server_toolscan *t, const char *s, size_t n) {
    if (t->sink) server_buf_put(t->sink, s, n);
}

/* A value ended (the string, literal or number, or a container closed). */
static void value_end(server_toolscan *t) {
    if (t->stack.len == 0) {
        t->st = S_END;
        t->closed = 1;
        return;
    }
    t->st = S_AFTER;
    if (t->stack.len != 1) return;
    /* back in the call's object: one of its members is complete */
    if (t->member == M_NAME)
        t->name_done = 1;
    else if (t->member == M_ARGS) {
        t->args_done = 1;
        t->in_args = 0;
    }
    t->member = M_OTHER;
    t->sink = NULL;
}

/* A member's key ended: which member follows. */
static int key_end(server_toolscan *t) {
    t->st = S_COLON;
    t->sink = NULL;
    if (t->stack.len != 1) return 0;
    t->member = M_OTHER;
    if (t->key.len == 4 && !memcmp(t->key.p, "name", 4)) {
        if (t->seen_name) return -1;
        t->seen_name = 1;
        t->member = M_NAME;
    } else if (t->key.len == 9 && !memcmp(t->key.p, "arguments", 9)) {
        if (t->seen_args) return -1;
        t->seen_args = 1;
        t->member = M_ARGS;
    }
    return 0;
}

static int push(server_toolscan *t, unsigned char c) {
    if (t->stack.len >= MAX_DEPTH) return -1;
    char ch = (char)c;
    if (server_buf_put(&t->stack, &ch, 1)) return -1; /* no memory: the body is bad, and server_gen_text fails it */
    t->st = c == '{' ? S_KEY0 : S_VALUE0;
    return 0;
}

static int pop(server_toolscan *t, unsigned char c) {
    if (!t->stack.len || t->stack.p[t->stack.len - 1] != (c == '}' ? '{' : '[')) return -1;
    t->stack.len--;
    value_end(t);
    return 0;
}

/* The first byte of a value. */
static int value_start(server_toolscan *t, unsigned char c) {
    if (t->stack.len == 1) { /* a member of the call */
        if (t->member == M_NAME) {
            if (c != '"') return -1;
            t->sink = &t->name;
        } else if (t->member == M_ARGS) {
            t->args_begun = 1;
            if (c == '"')
                t->sink = &t->args;
            else
                t->in_args = 1;
        }
    }
    switch (c) {
    case '{':
    case '[': return push(t, c);
    case '"':
        t->st = S_STR;
        t->str_key = 0;
        return 0;
    case '-': t->st = S_NUM_MINUS; return 0;
    case '0': t->st = S_NUM_ZERO; return 0;
    case 't': t->lit = "true"; break;
    case 'f': t->lit = "false"; break;
    case 'n': t->lit = "null"; break;
    default:
        if (c >= '1' && c <= '9') {
            t->st = S_NUM_INT;
            return 0;
        }
        return -1;
    }
    t->litpos = 1;
    t->st = S_LIT;
    return 0;
}

/* \uXXXX complete: a character, or half of a surrogate pair. */
static int escape_end(server_toolscan *t) {
    unsigned cp = t->cp;
    t->st = S_STR;
    if (t->hi) {
        if (cp < 0xDC00 || cp > 0xDFFF) return -1;
        cp = 0x10000 + ((t->hi - 0xD800) << 10) + (cp - 0xDC00);
        t->hi = 0;
    } else if (cp >= 0xD800 && cp <= 0xDBFF) {
        t->hi = cp;
        return 0;
    } else if ((cp >= 0xDC00 && cp <= 0xDFFF) || cp == 0) {
        return -1;
    }
    if (t->sink) put_utf8(t->sink, cp);
    return 0;
}

/* A raw byte inside a string: UTF-8 is checked as jansson does (no
 * overlong forms, no surrogates, nothing above U+10FFFF). */
static int str_byte(server_toolscan *t, unsigned char c) {
    if (t->u8need) {
        if ((c & 0xC0) != 0x80) return -1;
        t->u8cp = t->u8cp << 6 | (c & 0x3F);
        if (--t->u8need == 0 && (t->u8cp < t->u8min || (t->u8cp >= 0xD800 && t->u8cp <= 0xDFFF) || t->u8cp > 0x10FFFF))
            return -1;
    } else if (c >= 0x80) {
        if (c >= 0xC2 && c <= 0xDF) {
            t->u8need = 1;
            t->u8cp = c & 0x1F;
            t->u8min = 0x80;
        } else if (c >= 0xE0 && c <= 0xEF) {
            t->u8need = 2;
            t->u8cp = c & 0x0F;
            t->u8min = 0x800;
        } else if (c >= 0xF0 && c <= 0xF4) {
            t->u8need = 3;
            t->u8cp = c & 0x07;
            t->u8min = 0x10000;
        } else
            return -1;
    }
    char ch = (char)c;
    str_put(t, &ch, 1);
    return 0;
}

static int hexval(unsigned char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* One byte; -1 when it breaks the JSON or the call's shape. */
static int step(server_toolscan *t, unsigned char c) {
    int was_in_args;
again:
    was_in_args = t->in_args;
    switch (t->st) {
    case S_TOP:
        if (is_ws(c)) break;
        if (c != '{' || push(t, c)) return -1;
        break;
    case S_KEY0:
        if (c == '}') {
            if (pop(t, c)) return -1;
            break;
        }
        /* fall through */
    case S_KEY:
        if (is_ws(c)) break;
        if (c != '"') return -1;
        t->st = S_STR;
        t->str_key = 1;
        if (t->stack.len == 1) {
            t->key.len = 0;
            t->sink = &t->key;
        }
        break;
    case S_COLON:
        if (is_ws(c)) break;
        if (c != ':') return -1;
        t->st = S_VALUE;
        break;
    case S_VALUE0:
        if (c == ']') {
            if (pop(t, c)) return -1;
            break;
        }
        /* fall through */
    case S_VALUE:
        if (is_ws(c)) break;
        if (value_start(t, c)) return -1;
        break;
    case S_AFTER:
        if (is_ws(c)) break;
        if (t->stack.len == 1 && t->name_done && (c == ',' || c == '}')) t->named = 1;
        if (c == ',')
            t->st = t->stack.p[t->stack.len - 1] == '{' ? S_KEY : S_VALUE;
        else if ((c != '}' && c != ']') || pop(t, c))
            return -1;
        break;
    case S_STR:
        if (t->u8need) {
            if (str_byte(t, c)) return -1;
            break;
        }
        if (t->hi && c != '\\') return -1; /* a high surrogate wants its pair */
        if (c == '"') {
            if (t->str_key) {
                if (key_end(t)) return -1;
            } else {
                value_end(t);
            }
        } else if (c == '\\') {
            t->st = S_ESC;
        } else if (c < 0x20 || str_byte(t, c)) {
            return -1;
        }
        break;
    case S_ESC: {
        static const char from[] = "\"\\/bfnrt", to[] = "\"\\/\b\f\n\r\t";
        const char *p = c ? strchr(from, c) : NULL;
        if (c == 'u') {
            t->st = S_HEX;
            t->hexn = 0;
            t->cp = 0;
            break;
        }
        if (!p || t->hi) return -1;
        str_put(t, &to[p - from], 1);
        t->st = S_STR;
        break;
    }
    case S_HEX: {
        int v = hexval(c);
        if (v < 0) return -1;
        t->cp = t->cp << 4 | (unsigned)v;
        if (++t->hexn == 4 && escape_end(t)) return -1;
        break;
    }
    case S_LIT:
        if (c != (unsigned char)t->lit[t->litpos]) return -1;
        if (!t->lit[++t->litpos]) value_end(t);
        break;
    case S_NUM_MINUS:
        if (c == '0')
            t->st = S_NUM_ZERO;
        else if (c >= '1' && c <= '9')
            t->st = S_NUM_INT;
        else
            return -1;
        break;
    case S_NUM_ZERO:
    case S_NUM_INT:
    case S_NUM_FRAC:
        if (c >= '0' && c <= '9') {
            if (t->st == S_NUM_ZERO) return -1; /* no leading zeros */
            break;
        }
        if (c == '.' && t->st != S_NUM_FRAC) {
            t->st = S_NUM_DOT;
            break;
        }
        if (c == 'e' || c == 'E') {
            t->st = S_NUM_E;
            break;
        }
        goto number_end;
    case S_NUM_DOT:
        if (c < '0' || c > '9') return -1;
        t->st = S_NUM_FRAC;
        break;
    case S_NUM_E:
        if (c == '+' || c == '-') {
            t->st = S_NUM_ESIGN;
            break;
        }
        /* fall through */
    case S_NUM_ESIGN:
        if (c < '0' || c > '9') return -1;
        t->st = S_NUM_EXP;
        break;
    case S_NUM_EXP:
        if (c >= '0' && c <= '9') break;
        goto number_end;
    case S_END:
        if (!is_ws(c)) return -1;
        break;
    }
    /* the bytes of a non-string "arguments" value are its text: from its
     * first byte (which set in_args) to its last (which cleared it) */
    if (was_in_args || t->in_args) {
        char ch = (char)c;
        server_buf_put(&t->args, &ch, 1);
    }
    return 0;
number_end:
    /* a number ends at the byte after it, which belongs to what follows */
    value_end(t);
    goto again;
}

void server_toolscan_feed(server_toolscan *t, const char *s, size_t n) {
    for (size_t i = 0; i < n && !t->bad; i++)
        if (step(t, (unsigned char)s[i])) t->bad = 1;
}
