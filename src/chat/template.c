/*
 * Jinja2-subset interpreter for chat templates.  Layout of this file:
 *   arena + error context, values, lexer (whitespace control happens here),
 *   parser (recursive descent following Jinja2's precedence), value helpers
 *   (Python str/repr/json formatting, comparison), filters/tests/methods,
 *   evaluator, statement executor, public API.
 * Compile-time and render-time memory both come from arenas, so errors
 * unwind with longjmp and free everything at once.
 */
#include "chat/template.h"

#include <ctype.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <utf8proc.h>

/* ---------------------------------------------------------------- arena */

typedef struct ablk { struct ablk *next; size_t cap, used; _Alignas(16) char data[]; } ablk;

/* Shared by compile and render: the arena, the error buffer and the jump
 * target for failures. */
typedef struct ctx {
    ablk *blocks;
    jmp_buf jb;
    char *err;
    size_t errlen;
} ctx;

static _Noreturn void fail(ctx *c, int line, int col, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static _Noreturn void fail(ctx *c, int line, int col, const char *fmt, ...)
{
    if (c->err && c->errlen) {
        int k = line > 0 ? snprintf(c->err, c->errlen, "%d:%d: ", line, col) : 0;
        if (k < 0) k = 0;
        if ((size_t)k < c->errlen) {
            va_list ap;
            va_start(ap, fmt);
            vsnprintf(c->err + k, c->errlen - (size_t)k, fmt, ap);
            va_end(ap);
        }
    }
    longjmp(c->jb, 1);
}

static void *ar_alloc(ctx *c, size_t n)
{
    n = (n + 15) & ~(size_t)15;
    ablk *b = c->blocks;
    if (!b || b->cap - b->used < n) {
        size_t cap = n > 32768 ? n : 32768;
        b = malloc(sizeof(ablk) + cap);
        if (!b) fail(c, 0, 0, "out of memory");
        b->cap = cap;
        b->used = 0;
        b->next = c->blocks;
        c->blocks = b;
    }
    void *p = b->data + b->used;
    b->used += n;
    return p;
}

static void *ar_zalloc(ctx *c, size_t n)
{
    void *p = ar_alloc(c, n);
    memset(p, 0, n);
    return p;
}

static void ar_free(ctx *c)
{
    for (ablk *b = c->blocks, *nx; b; b = nx) {
        nx = b->next;
        free(b);
    }
    c->blocks = NULL;
}

static char *ar_strdup(ctx *c, const char *s, size_t n)
{
    char *p = ar_alloc(c, n + 1);
    memcpy(p, s, n);
    p[n] = 0;
    return p;
}

/* A growable byte buffer living in the arena. */
typedef struct sbuf { char *p; size_t n, cap; } sbuf;

static void sb_put(ctx *c, sbuf *b, const char *s, size_t n)
{
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 256;
        while (cap < b->n + n + 1) cap *= 2;
        char *p = ar_alloc(c, cap);
        if (b->n) memcpy(p, b->p, b->n);
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}
static void sb_puts(ctx *c, sbuf *b, const char *s) { sb_put(c, b, s, strlen(s)); }
static void sb_putc(ctx *c, sbuf *b, char ch) { sb_put(c, b, &ch, 1); }
static void sb_printf(ctx *c, sbuf *b, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void sb_printf(ctx *c, sbuf *b, const char *fmt, ...)
{
    char tmp[128];
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (k > 0) sb_put(c, b, tmp, (size_t)k < sizeof tmp ? (size_t)k : sizeof tmp - 1);
}

/* --------------------------------------------------------------- values */

typedef struct str { const char *p; size_t n; } str;

enum vt { V_UNDEF, V_NONE, V_BOOL, V_INT, V_FLOAT, V_STR, V_LIST, V_DICT, V_FUNC, V_LOOP };
/* Why a value is undefined, for Jinja2's error messages. */
enum { U_NAME, U_ATTR, U_ITEM };

typedef struct klist klist;
typedef struct kdict kdict;
typedef struct kfn kfn;
typedef struct kloop kloop;

typedef struct kv {
    uint8_t t;
    uint8_t aux;    /* V_LIST: 1 = tuple; V_UNDEF: U_* kind; V_DICT: 1 = namespace */
    uint8_t aux2;   /* V_UNDEF: the type (enum vt) of the object that lacked the name */
    union {
        int64_t i;
        double f;
        str s;      /* V_STR, and the missing name of V_UNDEF */
        klist *l;
        kdict *d;
        kfn *fn;
        kloop *loop;
    };
} kv;

struct klist { kv *v; size_t n, cap; };
struct kdict { kv *keys; kv *vals; size_t n, cap; };

static const kv UNDEF = { .t = V_UNDEF };
static const kv NONE = { .t = V_NONE };

static kv mk_bool(int b) { kv v = { .t = V_BOOL }; v.i = b != 0; return v; }
static kv mk_int(int64_t i) { kv v = { .t = V_INT }; v.i = i; return v; }
static kv mk_float(double f) { kv v = { .t = V_FLOAT }; v.f = f; return v; }
static kv mk_str(const char *p, size_t n) { kv v = { .t = V_STR }; v.s.p = p; v.s.n = n; return v; }
static kv mk_undef(int kind, int objtype, const char *name, size_t n)
{
    kv v = { .t = V_UNDEF, .aux = (uint8_t)kind, .aux2 = (uint8_t)objtype };
    v.s.p = name;
    v.s.n = n;
    return v;
}

static kv mk_list(ctx *c, size_t cap)
{
    kv v = { .t = V_LIST };
    v.l = ar_zalloc(c, sizeof(klist));
    v.l->cap = cap ? cap : 4;
    v.l->v = ar_alloc(c, v.l->cap * sizeof(kv));
    return v;
}

static void list_push(ctx *c, klist *l, kv x)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 4;
        kv *nv = ar_alloc(c, cap * sizeof(kv));
        if (l->n) memcpy(nv, l->v, l->n * sizeof(kv));
        l->v = nv;
        l->cap = cap;
    }
    l->v[l->n++] = x;
}

static kv mk_dict(ctx *c, size_t cap)
{
    kv v = { .t = V_DICT };
    v.d = ar_zalloc(c, sizeof(kdict));
    v.d->cap = cap ? cap : 4;
    v.d->keys = ar_alloc(c, v.d->cap * sizeof(kv));
    v.d->vals = ar_alloc(c, v.d->cap * sizeof(kv));
    return v;
}

static int str_eq(str a, const char *b, size_t bn) { return a.n == bn && memcmp(a.p, b, bn) == 0; }
static int str_is(str a, const char *lit) { return str_eq(a, lit, strlen(lit)); }
static int kv_eq(const kv *a, const kv *b);

static kv *dict_find_str(const kdict *d, const char *k, size_t kn)
{
    for (size_t i = 0; i < d->n; i++)
        if (d->keys[i].t == V_STR && str_eq(d->keys[i].s, k, kn)) return &d->vals[i];
    return NULL;
}

static kv *dict_find(const kdict *d, const kv *k)
{
    if (k->t == V_STR) return dict_find_str(d, k->s.p, k->s.n);
    for (size_t i = 0; i < d->n; i++)
        if (kv_eq(&d->keys[i], k)) return &d->vals[i];
    return NULL;
}

static void dict_set(ctx *c, kdict *d, kv k, kv v)
{
    kv *slot = dict_find(d, &k);
    if (slot) { *slot = v; return; }
    if (d->n == d->cap) {
        size_t cap = d->cap ? d->cap * 2 : 4;
        kv *nk = ar_alloc(c, cap * sizeof(kv)), *nv = ar_alloc(c, cap * sizeof(kv));
        if (d->n) {
            memcpy(nk, d->keys, d->n * sizeof(kv));
            memcpy(nv, d->vals, d->n * sizeof(kv));
        }
        d->keys = nk;
        d->vals = nv;
        d->cap = cap;
    }
    d->keys[d->n] = k;
    d->vals[d->n++] = v;
}

/* ---------------------------------------------------------------- lexer */

enum tk { T_DATA, T_VAR_BEGIN, T_VAR_END, T_BLOCK_BEGIN, T_BLOCK_END, T_NAME, T_STRING, T_INT, T_FLOAT, T_OP, T_EOF };

typedef struct tok {
    uint8_t type;
    char op[3];      /* T_OP: the operator, NUL-terminated */
    int line, col;
    str s;           /* T_DATA, T_NAME, T_STRING (decoded) */
    int64_t i;
    double f;
} tok;

typedef struct lexer {
    ctx *c;
    const char *src;
    size_t len, pos;
    int line;
    size_t line_start;   /* offset of the current line, for columns */
    tok *toks;
    size_t n, cap;
} lexer;

static void lx_advance(lexer *L, size_t to)
{
    for (size_t i = L->pos; i < to; i++)
        if (L->src[i] == '\n') { L->line++; L->line_start = i + 1; }
    L->pos = to;
}

static tok *lx_push(lexer *L, int type, size_t at)
{
    if (L->n == L->cap) {
        size_t cap = L->cap ? L->cap * 2 : 256;
        tok *nt = ar_alloc(L->c, cap * sizeof(tok));
        if (L->n) memcpy(nt, L->toks, L->n * sizeof(tok));
        L->toks = nt;
        L->cap = cap;
    }
    tok *t = &L->toks[L->n++];
    memset(t, 0, sizeof *t);
    t->type = (uint8_t)type;
    t->line = L->line;
    t->col = (int)(at - L->line_start) + 1;
    return t;
}

static int is_ws(char ch) { return ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r' || ch == '\v' || ch == '\f'; }

static void put_utf8(ctx *c, sbuf *b, uint32_t cp)
{
    uint8_t tmp[4];
    utf8proc_ssize_t k = utf8proc_encode_char((utf8proc_int32_t)cp, tmp);
    sb_put(c, b, (const char *)tmp, (size_t)k);
}

/* Reads a quoted string literal at L->pos, decoding Python escapes. */
static void lx_string(lexer *L, tok *t)
{
    const char *s = L->src;
    char q = s[L->pos];
    size_t i = L->pos + 1;
    sbuf b = {0};
    sb_put(L->c, &b, "", 0);
    for (;;) {
        if (i >= L->len) fail(L->c, t->line, t->col, "unterminated string literal");
        char ch = s[i];
        if (ch == q) { i++; break; }
        if (ch == '\\' && i + 1 < L->len) {
            char e = s[i + 1];
            i += 2;
            switch (e) {
            case 'n': sb_putc(L->c, &b, '\n'); break;
            case 't': sb_putc(L->c, &b, '\t'); break;
            case 'r': sb_putc(L->c, &b, '\r'); break;
            case '0': sb_putc(L->c, &b, '\0'); break;
            case 'b': sb_putc(L->c, &b, '\b'); break;
            case 'f': sb_putc(L->c, &b, '\f'); break;
            case 'v': sb_putc(L->c, &b, '\v'); break;
            case '\\': case '\'': case '"': sb_putc(L->c, &b, e); break;
            case '\n': break;
            case 'x': case 'u': case 'U': {
                int nd = e == 'x' ? 2 : e == 'u' ? 4 : 8;
                uint32_t cp = 0;
                for (int k = 0; k < nd; k++, i++) {
                    if (i >= L->len || !isxdigit((unsigned char)s[i]))
                        fail(L->c, t->line, t->col, "bad \\%c escape in string literal", e);
                    char h = s[i];
                    cp = cp * 16 + (uint32_t)(h <= '9' ? h - '0' : (h | 32) - 'a' + 10);
                }
                put_utf8(L->c, &b, cp);
                break;
            }
            default: sb_putc(L->c, &b, '\\'); sb_putc(L->c, &b, e); break;
            }
            continue;
        }
        sb_putc(L->c, &b, ch);
        i++;
    }
    t->s.p = b.p;
    t->s.n = b.n;
    lx_advance(L, i);
}

/* Tokenizes the inside of a {{ }} or {% %} tag up to its end marker.
 * Returns 1 when the end marker carried '-' (strip whitespace after). */
static int lx_tag(lexer *L, int block, int open_line, int open_col)
{
    const char *s = L->src;
    int depth = 0;
    const char endc = block ? '%' : '}';
    for (;;) {
        while (L->pos < L->len && is_ws(s[L->pos])) lx_advance(L, L->pos + 1);
        if (L->pos >= L->len)
            fail(L->c, open_line, open_col, "unexpected end of template inside a %s tag", block ? "{% %}" : "{{ }}");
        size_t p = L->pos;
        if (depth == 0) {
            if (s[p] == '-' && p + 2 < L->len + 0 && s[p + 1] == endc && s[p + 2] == '}') {
                lx_push(L, block ? T_BLOCK_END : T_VAR_END, p);
                lx_advance(L, p + 3);
                return 1;
            }
            if (s[p] == endc && p + 1 < L->len && s[p + 1] == '}') {
                lx_push(L, block ? T_BLOCK_END : T_VAR_END, p);
                lx_advance(L, p + 2);
                return 0;
            }
        }
        char ch = s[p];
        if (isalpha((unsigned char)ch) || ch == '_') {
            size_t e = p;
            while (e < L->len && (isalnum((unsigned char)s[e]) || s[e] == '_')) e++;
            tok *t = lx_push(L, T_NAME, p);
            t->s.p = s + p;
            t->s.n = e - p;
            lx_advance(L, e);
        } else if (isdigit((unsigned char)ch)) {
            size_t e = p;
            int isf = 0;
            char num[64];
            size_t k = 0;
            while (e < L->len && (isdigit((unsigned char)s[e]) || s[e] == '_')) { if (s[e] != '_' && k < 63) num[k++] = s[e]; e++; }
            if (e + 1 < L->len && s[e] == '.' && isdigit((unsigned char)s[e + 1])) {
                isf = 1;
                if (k < 63) num[k++] = '.';
                e++;
                while (e < L->len && (isdigit((unsigned char)s[e]) || s[e] == '_')) { if (s[e] != '_' && k < 63) num[k++] = s[e]; e++; }
            }
            if (e < L->len && (s[e] == 'e' || s[e] == 'E')) {
                size_t q = e + 1;
                if (q < L->len && (s[q] == '+' || s[q] == '-')) q++;
                if (q < L->len && isdigit((unsigned char)s[q])) {
                    isf = 1;
                    if (k < 63) num[k++] = 'e';
                    for (size_t r = e + 1; r < q; r++) if (k < 63) num[k++] = s[r];
                    e = q;
                    while (e < L->len && isdigit((unsigned char)s[e])) { if (k < 63) num[k++] = s[e]; e++; }
                }
            }
            num[k] = 0;
            tok *t = lx_push(L, isf ? T_FLOAT : T_INT, p);
            if (isf) t->f = strtod(num, NULL);
            else t->i = strtoll(num, NULL, 10);
            lx_advance(L, e);
        } else if (ch == '\'' || ch == '"') {
            tok *t = lx_push(L, T_STRING, p);
            lx_string(L, t);
        } else {
            static const char *ops2[] = { "//", "**", "==", "!=", "<=", ">=" };
            tok *t = lx_push(L, T_OP, p);
            size_t w = 1;
            for (size_t k = 0; k < sizeof ops2 / sizeof *ops2; k++)
                if (p + 1 < L->len && s[p] == ops2[k][0] && s[p + 1] == ops2[k][1]) { w = 2; break; }
            if (w == 1 && !strchr("+-*/%~<>=.,:|()[]{}", ch))
                fail(L->c, t->line, t->col, "unexpected character '%c'", ch);
            memcpy(t->op, s + p, w);
            if (ch == '(' || ch == '[' || ch == '{') depth++;
            if ((ch == ')' || ch == ']' || ch == '}') && depth > 0) depth--;
            lx_advance(L, p + w);
        }
    }
}

/* Finds the next "{{", "{%" or "{#" at or after `from`; len when none. */
static size_t lx_find_open(const lexer *L, size_t from)
{
    const char *s = L->src;
    for (size_t i = from; i + 1 < L->len; i++) {
        const char *q = memchr(s + i, '{', L->len - 1 - i);
        if (!q) break;
        i = (size_t)(q - s);
        char nx = s[i + 1];
        if (nx == '{' || nx == '%' || nx == '#') return i;
    }
    return L->len;
}

/* Matches "{%[-+]? raw|endraw [-]?%}" at p; returns its end offset or 0. */
static size_t lx_match_tag_word(const lexer *L, size_t p, const char *word, int *lstrip_minus, int *rstrip_minus)
{
    const char *s = L->src;
    size_t n = L->len, wl = strlen(word);
    if (p + 2 > n || s[p] != '{' || s[p + 1] != '%') return 0;
    size_t i = p + 2;
    *lstrip_minus = 0;
    if (i < n && (s[i] == '-' || s[i] == '+')) { *lstrip_minus = s[i] == '-'; i++; }
    while (i < n && is_ws(s[i])) i++;
    if (i + wl > n || memcmp(s + i, word, wl) != 0) return 0;
    i += wl;
    while (i < n && is_ws(s[i])) i++;
    *rstrip_minus = 0;
    if (i < n && s[i] == '-') { *rstrip_minus = 1; i++; }
    if (i + 2 > n || s[i] != '%' || s[i + 1] != '}') return 0;
    return i + 2;
}

static void lx_data(lexer *L, const char *p, size_t n, size_t at)
{
    if (!n) return;
    tok *t = lx_push(L, T_DATA, at);
    t->s.p = p;
    t->s.n = n;
}

/* Splits the template into data and tag tokens, applying whitespace
 * control the way Jinja2's lexer does with trim_blocks and lstrip_blocks:
 * "-" strips all whitespace on that side; a block or comment tag alone on
 * its line loses the indentation before it (unless opened with "+"), and
 * the first newline after a block or comment tag is dropped. */
static void lex(lexer *L)
{
    const char *s = L->src;
    int line_starting = 1;
    size_t pos = 0;
    while (pos < L->len) {
        size_t at = lx_find_open(L, pos);
        const char *text = s + pos;
        size_t tn = at - pos;
        if (at >= L->len) { lx_data(L, text, tn, pos); lx_advance(L, L->len); break; }
        char kind = s[at + 1];
        char mod = at + 2 < L->len ? s[at + 2] : 0;
        if (mod == '-') {
            while (tn && is_ws(text[tn - 1])) tn--;
        } else if (mod != '+' && kind != '{') {
            size_t lp = tn;
            while (lp && text[lp - 1] != '\n') lp--;
            if ((lp > 0 || line_starting) && lp < tn) {
                int allws = 1;
                for (size_t i = lp; i < tn; i++) if (!is_ws(text[i])) { allws = 0; break; }
                if (allws) tn = lp;
            }
        }
        lx_data(L, text, tn, pos);
        lx_advance(L, at);
        int open_line = L->line, open_col = (int)(at - L->line_start) + 1;
        size_t inner = at + 2 + (mod == '-' || mod == '+');
        int strip_after = 0;
        if (kind == '#') {
            const char *e = NULL;
            for (size_t i = inner; i + 1 < L->len; i++)
                if (s[i] == '#' && s[i + 1] == '}') { e = s + i; break; }
            if (!e) fail(L->c, open_line, open_col, "unclosed comment");
            size_t end = (size_t)(e - s) + 2;
            strip_after = e > s + inner && e[-1] == '-';
            lx_advance(L, end);
            if (!strip_after && L->pos < L->len && s[L->pos] == '\n') lx_advance(L, L->pos + 1);
        } else {
            int lm, rm;
            size_t rend = kind == '%' ? lx_match_tag_word(L, at, "raw", &lm, &rm) : 0;
            if (rend) {
                /* raw: everything up to {% endraw %} is data */
                size_t q = rend, eend = 0;
                int elm = 0, erm = 0;
                if (rm) while (q < L->len && is_ws(s[q])) q++;
                else if (q < L->len && s[q] == '\n') q++;
                size_t body = q;
                for (; q < L->len; q++)
                    if (s[q] == '{' && (eend = lx_match_tag_word(L, q, "endraw", &elm, &erm)) != 0) break;
                if (!eend) fail(L->c, open_line, open_col, "unclosed raw block (expected 'endraw')");
                size_t bn = q - body;
                if (elm) while (bn && is_ws(s[body + bn - 1])) bn--;
                lx_data(L, s + body, bn, body);
                lx_advance(L, eend);
                strip_after = erm;
                if (!strip_after && L->pos < L->len && s[L->pos] == '\n') lx_advance(L, L->pos + 1);
            } else {
                int block = kind == '%';
                lx_push(L, block ? T_BLOCK_BEGIN : T_VAR_BEGIN, at);
                lx_advance(L, inner);
                strip_after = lx_tag(L, block, open_line, open_col);
                if (!strip_after && block && L->pos < L->len && s[L->pos] == '\n') lx_advance(L, L->pos + 1);
            }
        }
        if (strip_after) while (L->pos < L->len && is_ws(s[L->pos])) lx_advance(L, L->pos + 1);
        line_starting = L->pos > 0 && s[L->pos - 1] == '\n';
        pos = L->pos;
    }
    lx_push(L, T_EOF, L->len);
}

/* --------------------------------------------------------------- parser */

enum nk {
    /* statements */
    N_DATA, N_OUTPUT, N_IF, N_FOR, N_SET, N_SETATTR, N_SETBLOCK, N_MACRO, N_CALLBLOCK, N_BREAK, N_CONTINUE,
    N_SCOPE,
    /* expressions */
    E_LIT, E_NAME, E_LIST, E_TUPLE, E_DICT, E_ATTR, E_ITEM, E_SLICE, E_CALL, E_FILTER, E_TEST,
    E_NOT, E_NEG, E_POS, E_BIN, E_AND, E_OR, E_COND, E_CMP
};

enum binop { B_ADD, B_SUB, B_MUL, B_DIV, B_FDIV, B_MOD, B_POW, B_CAT };
enum cmpop { C_EQ, C_NE, C_LT, C_LE, C_GT, C_GE, C_IN, C_NOTIN };

typedef struct node node;
typedef struct nlist { node **v; int n, cap; } nlist;

struct node {
    uint8_t kind, op;
    uint8_t neg;     /* E_TEST: "is not" */
    int line, col;
    int id;          /* E_FILTER / E_TEST: builtin index */
    str name;        /* E_NAME, E_ATTR, N_SET*, N_MACRO, filter/test name */
    str name2;       /* N_SETATTR: attribute */
    kv lit;          /* E_LIT, N_DATA */
    node *a, *b, *c; /* operands; N_FOR: a = iterable, b = filter condition */
    nlist args;      /* call/filter/test args, list items, dict keys, bodies */
    nlist args2;     /* keyword values, dict values, else bodies, macro defaults */
    str *names;      /* keyword names (args2), loop/set targets, macro params */
    int nnames;
};

/* Nesting limits keep hostile templates from exhausting the C stack. */
enum { MAX_PARSE_DEPTH = 200, MAX_CALL_DEPTH = 100 };

typedef struct parser {
    ctx *c;
    tok *t;
    size_t i, n;
    int depth;   /* expression and block nesting */
} parser;

static void nl_push(ctx *c, nlist *l, node *x)
{
    if (l->n == l->cap) {
        int cap = l->cap ? l->cap * 2 : 4;
        node **nv = ar_alloc(c, (size_t)cap * sizeof(node *));
        if (l->n) memcpy(nv, l->v, (size_t)l->n * sizeof(node *));
        l->v = nv;
        l->cap = cap;
    }
    l->v[l->n++] = x;
}

static node *mk_node(parser *P, int kind, const tok *at)
{
    node *x = ar_zalloc(P->c, sizeof(node));
    x->kind = (uint8_t)kind;
    x->line = at->line;
    x->col = at->col;
    return x;
}

static tok *cur(parser *P) { return &P->t[P->i]; }
static tok *nexttok(parser *P) { tok *t = &P->t[P->i]; if (P->i + 1 < P->n) P->i++; return t; }
static int is_op(const tok *t, const char *op) { return t->type == T_OP && strcmp(t->op, op) == 0; }
static int is_name(const tok *t, const char *nm) { return t->type == T_NAME && str_is(t->s, nm); }

static const char *tok_desc(const tok *t, char *buf, size_t n)
{
    switch (t->type) {
    case T_NAME: snprintf(buf, n, "'%.*s'", (int)(t->s.n > 40 ? 40 : t->s.n), t->s.p); break;
    case T_OP: snprintf(buf, n, "'%s'", t->op); break;
    case T_STRING: snprintf(buf, n, "string literal"); break;
    case T_INT: case T_FLOAT: snprintf(buf, n, "number"); break;
    case T_VAR_END: snprintf(buf, n, "end of print statement"); break;
    case T_BLOCK_END: snprintf(buf, n, "end of statement block"); break;
    case T_EOF: snprintf(buf, n, "end of template"); break;
    default: snprintf(buf, n, "template data"); break;
    }
    return buf;
}

static _Noreturn void unexpected(parser *P, const char *want)
{
    char b[64];
    tok *t = cur(P);
    fail(P->c, t->line, t->col, "expected %s, got %s", want, tok_desc(t, b, sizeof b));
}

static void expect_op(parser *P, const char *op)
{
    if (!is_op(cur(P), op)) {
        char w[16];
        snprintf(w, sizeof w, "'%s'", op);
        unexpected(P, w);
    }
    nexttok(P);
}

static str expect_name(parser *P)
{
    if (cur(P)->type != T_NAME) unexpected(P, "a name");
    return nexttok(P)->s;
}

/* Builtin filters and tests, resolved to indices at compile time so an
 * unknown name fails compilation with its position. */
static const char *const FILTERS[] = {
    "abs", "attr", "capitalize", "count", "d", "default", "dictsort", "e", "escape", "first", "float",
    "indent", "int", "items", "join", "last", "length", "list", "lower", "map", "max", "min", "reject",
    "rejectattr", "replace", "reverse", "round", "safe", "select", "selectattr", "sort", "string", "sum",
    "title", "tojson", "trim", "unique", "upper", "wordcount",
};
enum {
    F_ABS, F_ATTR, F_CAPITALIZE, F_COUNT, F_D, F_DEFAULT, F_DICTSORT, F_E, F_ESCAPE, F_FIRST, F_FLOAT,
    F_INDENT, F_INT, F_ITEMS, F_JOIN, F_LAST, F_LENGTH, F_LIST, F_LOWER, F_MAP, F_MAX, F_MIN, F_REJECT,
    F_REJECTATTR, F_REPLACE, F_REVERSE, F_ROUND, F_SAFE, F_SELECT, F_SELECTATTR, F_SORT, F_STRING, F_SUM,
    F_TITLE, F_TOJSON, F_TRIM, F_UNIQUE, F_UPPER, F_WORDCOUNT,
};
static const char *const TESTS[] = {
    "boolean", "callable", "defined", "divisibleby", "eq", "equalto", "escaped", "even", "false", "filter",
    "float", "ge", "greaterthan", "gt", "in", "integer", "iterable", "le", "lessthan", "lower", "lt",
    "mapping", "ne", "none", "number", "odd", "sameas", "sequence", "string", "test", "true", "undefined",
    "upper", "==", "!=", "<", "<=", ">", ">=",
};
enum {
    X_BOOLEAN, X_CALLABLE, X_DEFINED, X_DIVISIBLEBY, X_EQ, X_EQUALTO, X_ESCAPED, X_EVEN, X_FALSE, X_FILTER,
    X_FLOAT, X_GE, X_GREATERTHAN, X_GT, X_IN, X_INTEGER, X_ITERABLE, X_LE, X_LESSTHAN, X_LOWER, X_LT,
    X_MAPPING, X_NE, X_NONE, X_NUMBER, X_ODD, X_SAMEAS, X_SEQUENCE, X_STRING, X_TEST, X_TRUE, X_UNDEFINED,
    X_UPPER, X_SYM_EQ, X_SYM_NE, X_SYM_LT, X_SYM_LE, X_SYM_GT, X_SYM_GE,
};

static int lookup_name(const char *const *tab, size_t n, str s)
{
    for (size_t i = 0; i < n; i++)
        if (str_is(s, tab[i])) return (int)i;
    return -1;
}

static node *parse_expr(parser *P);
static node *parse_or(parser *P);
static node *parse_unary(parser *P, int with_filter);

/* (args, kw=args) after the opening parenthesis has been consumed. */
static void parse_call_args(parser *P, node *x)
{
    int nk = 0, capk = 0;
    while (!is_op(cur(P), ")")) {
        if (x->args.n || x->args2.n) expect_op(P, ",");
        if (is_op(cur(P), ")")) break;
        tok *t = cur(P);
        if (t->type == T_NAME && P->i + 1 < P->n && is_op(&P->t[P->i + 1], "=")) {
            nexttok(P);
            nexttok(P);
            if (nk == capk) {
                capk = capk ? capk * 2 : 4;
                str *nn = ar_alloc(P->c, (size_t)capk * sizeof(str));
                if (nk) memcpy(nn, x->names, (size_t)nk * sizeof(str));
                x->names = nn;
            }
            x->names[nk++] = t->s;
            nl_push(P->c, &x->args2, parse_expr(P));
        } else {
            if (x->args2.n) fail(P->c, t->line, t->col, "positional argument follows keyword argument");
            nl_push(P->c, &x->args, parse_expr(P));
        }
    }
    x->nnames = nk;
    nexttok(P);
}

static node *parse_primary(parser *P)
{
    tok *t = cur(P);
    node *x;
    if (t->type == T_NAME) {
        nexttok(P);
        if (str_is(t->s, "true") || str_is(t->s, "True") || str_is(t->s, "false") || str_is(t->s, "False")) {
            x = mk_node(P, E_LIT, t);
            x->lit = mk_bool(t->s.p[0] == 't' || t->s.p[0] == 'T');
        } else if (str_is(t->s, "none") || str_is(t->s, "None")) {
            x = mk_node(P, E_LIT, t);
            x->lit = NONE;
        } else {
            x = mk_node(P, E_NAME, t);
            x->name = t->s;
        }
        return x;
    }
    if (t->type == T_STRING) {
        x = mk_node(P, E_LIT, t);
        nexttok(P);
        if (cur(P)->type != T_STRING) { x->lit = mk_str(t->s.p, t->s.n); return x; }
        sbuf b = {0};
        sb_put(P->c, &b, t->s.p, t->s.n);
        while (cur(P)->type == T_STRING) { tok *u = nexttok(P); sb_put(P->c, &b, u->s.p, u->s.n); }
        x->lit = mk_str(b.p, b.n);
        return x;
    }
    if (t->type == T_INT || t->type == T_FLOAT) {
        x = mk_node(P, E_LIT, t);
        x->lit = t->type == T_INT ? mk_int(t->i) : mk_float(t->f);
        nexttok(P);
        return x;
    }
    if (is_op(t, "(")) {
        nexttok(P);
        if (is_op(cur(P), ")")) { nexttok(P); return mk_node(P, E_TUPLE, t); }
        node *e = parse_expr(P);
        if (is_op(cur(P), ")")) { nexttok(P); return e; }
        x = mk_node(P, E_TUPLE, t);
        nl_push(P->c, &x->args, e);
        while (is_op(cur(P), ",")) {
            nexttok(P);
            if (is_op(cur(P), ")")) break;
            nl_push(P->c, &x->args, parse_expr(P));
        }
        expect_op(P, ")");
        return x;
    }
    if (is_op(t, "[")) {
        nexttok(P);
        x = mk_node(P, E_LIST, t);
        while (!is_op(cur(P), "]")) {
            if (x->args.n) expect_op(P, ",");
            if (is_op(cur(P), "]")) break;
            nl_push(P->c, &x->args, parse_expr(P));
        }
        nexttok(P);
        return x;
    }
    if (is_op(t, "{")) {
        nexttok(P);
        x = mk_node(P, E_DICT, t);
        while (!is_op(cur(P), "}")) {
            if (x->args.n) expect_op(P, ",");
            if (is_op(cur(P), "}")) break;
            nl_push(P->c, &x->args, parse_expr(P));
            expect_op(P, ":");
            nl_push(P->c, &x->args2, parse_expr(P));
        }
        nexttok(P);
        return x;
    }
    unexpected(P, "an expression");
}

static node *parse_postfix(parser *P, node *x)
{
    for (;;) {
        tok *t = cur(P);
        if (is_op(t, ".")) {
            nexttok(P);
            tok *u = cur(P);
            if (u->type == T_INT) {
                node *y = mk_node(P, E_ITEM, t);
                y->a = x;
                y->b = mk_node(P, E_LIT, u);
                y->b->lit = mk_int(u->i);
                nexttok(P);
                x = y;
            } else {
                node *y = mk_node(P, E_ATTR, t);
                y->a = x;
                y->name = expect_name(P);
                x = y;
            }
        } else if (is_op(t, "[")) {
            nexttok(P);
            node *parts[3] = { NULL, NULL, NULL };
            int k = 0, slice = 0;
            for (;;) {
                if (is_op(cur(P), ":")) {
                    slice = 1;
                    nexttok(P);
                    if (++k > 2) unexpected(P, "']'");
                    continue;
                }
                if (is_op(cur(P), "]")) break;
                if (parts[k]) unexpected(P, "']'");
                parts[k] = parse_expr(P);
            }
            nexttok(P);
            node *y = mk_node(P, slice ? E_SLICE : E_ITEM, t);
            y->a = x;
            if (slice) { y->b = parts[0]; y->c = parts[1]; nl_push(P->c, &y->args, parts[2]); }
            else {
                if (!parts[0]) fail(P->c, t->line, t->col, "expected an index expression");
                y->b = parts[0];
            }
            x = y;
        } else if (is_op(t, "(")) {
            nexttok(P);
            node *y = mk_node(P, E_CALL, t);
            y->a = x;
            parse_call_args(P, y);
            x = y;
        } else {
            return x;
        }
    }
}

static node *parse_filter_expr(parser *P, node *x)
{
    for (;;) {
        tok *t = cur(P);
        if (is_op(t, "|")) {
            nexttok(P);
            tok *nt = cur(P);
            node *y = mk_node(P, E_FILTER, nt);
            y->a = x;
            y->name = expect_name(P);
            y->id = lookup_name(FILTERS, sizeof FILTERS / sizeof *FILTERS, y->name);
            if (y->id < 0) fail(P->c, nt->line, nt->col, "unknown filter '%.*s'", (int)y->name.n, y->name.p);
            if (is_op(cur(P), "(")) { nexttok(P); parse_call_args(P, y); }
            x = y;
        } else if (is_name(t, "is")) {
            nexttok(P);
            node *y = mk_node(P, E_TEST, t);
            y->a = x;
            if (is_name(cur(P), "not")) { y->neg = 1; nexttok(P); }
            tok *nt = cur(P);
            if (nt->type == T_NAME) y->name = nt->s;
            else if (nt->type == T_OP && (is_op(nt, "==") || is_op(nt, "!=") || is_op(nt, "<") || is_op(nt, "<=") ||
                                          is_op(nt, ">") || is_op(nt, ">=")))
                y->name = (str){ nt->op, strlen(nt->op) };
            else unexpected(P, "a test name");
            nexttok(P);
            y->id = lookup_name(TESTS, sizeof TESTS / sizeof *TESTS, y->name);
            if (y->id < 0) fail(P->c, nt->line, nt->col, "unknown test '%.*s'", (int)y->name.n, y->name.p);
            tok *a = cur(P);
            if (is_op(a, "(")) {
                nexttok(P);
                parse_call_args(P, y);
            } else if ((a->type == T_NAME || a->type == T_STRING || a->type == T_INT || a->type == T_FLOAT ||
                        is_op(a, "[") || is_op(a, "{")) &&
                       !is_name(a, "else") && !is_name(a, "or") && !is_name(a, "and") && !is_name(a, "if") &&
                       !is_name(a, "is") && !is_name(a, "in") && !is_name(a, "not")) {
                nl_push(P->c, &y->args, parse_postfix(P, parse_primary(P)));
            }
            x = y;
        } else if (is_op(t, "(")) {
            nexttok(P);
            node *y = mk_node(P, E_CALL, t);
            y->a = x;
            parse_call_args(P, y);
            x = y;
        } else {
            return x;
        }
    }
}

static node *parse_unary(parser *P, int with_filter)
{
    tok *t = cur(P);
    node *x;
    if (++P->depth > MAX_PARSE_DEPTH) fail(P->c, t->line, t->col, "expression nested too deeply");
    if (is_op(t, "-") || is_op(t, "+")) {
        nexttok(P);
        x = mk_node(P, t->op[0] == '-' ? E_NEG : E_POS, t);
        x->a = parse_unary(P, 0);
    } else {
        x = parse_primary(P);
    }
    x = parse_postfix(P, x);
    if (with_filter) x = parse_filter_expr(P, x);
    P->depth--;
    return x;
}

static node *mk_bin(parser *P, int kind, int op, const tok *t, node *a, node *b)
{
    node *x = mk_node(P, kind, t);
    x->op = (uint8_t)op;
    x->a = a;
    x->b = b;
    return x;
}

static node *parse_pow(parser *P)
{
    node *x = parse_unary(P, 1);
    while (is_op(cur(P), "**")) { tok *t = nexttok(P); x = mk_bin(P, E_BIN, B_POW, t, x, parse_unary(P, 1)); }
    return x;
}

static node *parse_math2(parser *P)
{
    node *x = parse_pow(P);
    for (;;) {
        tok *t = cur(P);
        int op = is_op(t, "*") ? B_MUL : is_op(t, "/") ? B_DIV : is_op(t, "//") ? B_FDIV : is_op(t, "%") ? B_MOD : -1;
        if (op < 0) return x;
        nexttok(P);
        x = mk_bin(P, E_BIN, op, t, x, parse_pow(P));
    }
}

static node *parse_concat(parser *P)
{
    node *x = parse_math2(P);
    while (is_op(cur(P), "~")) { tok *t = nexttok(P); x = mk_bin(P, E_BIN, B_CAT, t, x, parse_math2(P)); }
    return x;
}

static node *parse_math1(parser *P)
{
    node *x = parse_concat(P);
    for (;;) {
        tok *t = cur(P);
        int op = is_op(t, "+") ? B_ADD : is_op(t, "-") ? B_SUB : -1;
        if (op < 0) return x;
        nexttok(P);
        x = mk_bin(P, E_BIN, op, t, x, parse_concat(P));
    }
}

/* a < b < c becomes (a < b) and (b < c), as in Python (b is evaluated twice). */
static node *parse_compare(parser *P)
{
    node *x = parse_math1(P), *chain = NULL, *prev = x;
    for (;;) {
        tok *t = cur(P);
        int op = is_op(t, "==") ? C_EQ : is_op(t, "!=") ? C_NE : is_op(t, "<") ? C_LT : is_op(t, "<=") ? C_LE
               : is_op(t, ">") ? C_GT : is_op(t, ">=") ? C_GE : is_name(t, "in") ? C_IN : -1;
        if (op < 0 && is_name(t, "not") && P->i + 1 < P->n && is_name(&P->t[P->i + 1], "in")) {
            nexttok(P);
            op = C_NOTIN;
        }
        if (op < 0) break;
        nexttok(P);
        node *rhs = parse_math1(P);
        node *cmp = mk_bin(P, E_CMP, op, t, prev, rhs);
        chain = chain ? mk_bin(P, E_AND, 0, t, chain, cmp) : cmp;
        prev = rhs;
    }
    return chain ? chain : x;
}

static node *parse_not(parser *P)
{
    if (is_name(cur(P), "not")) {
        tok *t = nexttok(P);
        if (++P->depth > MAX_PARSE_DEPTH) fail(P->c, t->line, t->col, "expression nested too deeply");
        node *x = mk_node(P, E_NOT, t);
        x->a = parse_not(P);
        P->depth--;
        return x;
    }
    return parse_compare(P);
}

static node *parse_and(parser *P)
{
    node *x = parse_not(P);
    while (is_name(cur(P), "and")) { tok *t = nexttok(P); x = mk_bin(P, E_AND, 0, t, x, parse_not(P)); }
    return x;
}

static node *parse_or(parser *P)
{
    node *x = parse_and(P);
    while (is_name(cur(P), "or")) { tok *t = nexttok(P); x = mk_bin(P, E_OR, 0, t, x, parse_and(P)); }
    return x;
}

static node *parse_expr(parser *P)
{
    if (++P->depth > MAX_PARSE_DEPTH) fail(P->c, cur(P)->line, cur(P)->col, "expression nested too deeply");
    node *x = parse_or(P);
    while (is_name(cur(P), "if")) {
        tok *t = nexttok(P);
        node *y = mk_node(P, E_COND, t);
        y->a = parse_or(P);   /* condition */
        y->b = x;             /* value when true */
        if (is_name(cur(P), "else")) { nexttok(P); y->c = parse_expr(P); }
        x = y;
    }
    P->depth--;
    return x;
}

/* expr[, expr...] as a tuple when a comma follows (set values, for iterables). */
static node *parse_tuple(parser *P, int with_cond)
{
    tok *t = cur(P);
    node *x = with_cond ? parse_expr(P) : parse_or(P);
    if (!is_op(cur(P), ",")) return x;
    node *tu = mk_node(P, E_TUPLE, t);
    nl_push(P->c, &tu->args, x);
    while (is_op(cur(P), ",")) {
        nexttok(P);
        if (cur(P)->type == T_BLOCK_END || is_name(cur(P), "if")) break;
        nl_push(P->c, &tu->args, with_cond ? parse_expr(P) : parse_or(P));
    }
    return tu;
}

/* name[, name...] targets of for and set. */
static void parse_targets(parser *P, node *x)
{
    str tmp[16];
    int n = 0;
    int paren = is_op(cur(P), "(");
    if (paren) nexttok(P);
    for (;;) {
        if (n == 16) unexpected(P, "at most 16 targets");
        tmp[n++] = expect_name(P);
        if (!is_op(cur(P), ",")) break;
        nexttok(P);
    }
    if (paren) expect_op(P, ")");
    x->names = ar_alloc(P->c, (size_t)n * sizeof(str));
    memcpy(x->names, tmp, (size_t)n * sizeof(str));
    x->nnames = n;
}

static void expect_block_end(parser *P)
{
    if (cur(P)->type != T_BLOCK_END) unexpected(P, "end of statement block");
    nexttok(P);
}

/* Parses statements until a block tag whose name is in `ends` (space
 * separated); leaves the parser on that name.  `opener` names the block
 * for the error when the template ends first. */
static void parse_body(parser *P, nlist *out, const char *ends, const tok *opener, const char *opname);

static int tag_is_end(const tok *t, const char *ends)
{
    if (t->type != T_NAME || !ends) return 0;
    const char *p = ends;
    while (*p) {
        const char *q = strchr(p, ' ');
        size_t n = q ? (size_t)(q - p) : strlen(p);
        if (str_eq(t->s, p, n)) return 1;
        p += n;
        while (*p == ' ') p++;
    }
    return 0;
}

static node *parse_statement_kw(parser *P, tok *t, str kw);

static node *parse_statement(parser *P)
{
    tok *t = cur(P);
    if (t->type != T_NAME) unexpected(P, "a statement name");
    str kw = t->s;
    nexttok(P);
    if (++P->depth > MAX_PARSE_DEPTH) fail(P->c, t->line, t->col, "blocks nested too deeply");
    node *res = parse_statement_kw(P, t, kw);
    P->depth--;
    return res;
}

static node *parse_statement_kw(parser *P, tok *t, str kw)
{
    node *x;
    if (str_is(kw, "if")) {
        x = mk_node(P, N_IF, t);
        x->a = parse_expr(P);
        expect_block_end(P);
        parse_body(P, &x->args, "elif else endif", t, "if");
        node *tail = x;
        for (;;) {
            tok *e = nexttok(P);
            if (str_is(e->s, "elif")) {
                node *y = mk_node(P, N_IF, e);
                y->a = parse_expr(P);
                expect_block_end(P);
                parse_body(P, &y->args, "elif else endif", t, "if");
                nl_push(P->c, &tail->args2, y);
                tail = y;
            } else if (str_is(e->s, "else")) {
                expect_block_end(P);
                parse_body(P, &tail->args2, "endif", t, "if");
            } else {
                expect_block_end(P);
                return x;
            }
        }
    }
    if (str_is(kw, "for")) {
        x = mk_node(P, N_FOR, t);
        parse_targets(P, x);
        if (!is_name(cur(P), "in")) unexpected(P, "'in'");
        nexttok(P);
        x->a = parse_tuple(P, 0);
        if (is_name(cur(P), "if")) { nexttok(P); x->b = parse_expr(P); }
        if (is_name(cur(P), "recursive")) fail(P->c, cur(P)->line, cur(P)->col, "recursive loops are not supported");
        expect_block_end(P);
        parse_body(P, &x->args, "else endfor", t, "for");
        if (str_is(nexttok(P)->s, "else")) {
            expect_block_end(P);
            parse_body(P, &x->args2, "endfor", t, "for");
            nexttok(P);
        }
        expect_block_end(P);
        return x;
    }
    if (str_is(kw, "set")) {
        tok *nt = cur(P);
        if (nt->type == T_NAME && P->i + 1 < P->n && is_op(&P->t[P->i + 1], ".")) {
            x = mk_node(P, N_SETATTR, t);
            x->name = expect_name(P);
            nexttok(P);
            x->name2 = expect_name(P);
            expect_op(P, "=");
            x->a = parse_tuple(P, 1);
            expect_block_end(P);
            return x;
        }
        x = mk_node(P, N_SET, t);
        parse_targets(P, x);
        if (is_op(cur(P), "=")) {
            nexttok(P);
            x->a = parse_tuple(P, 1);
            expect_block_end(P);
            return x;
        }
        if (x->nnames != 1) unexpected(P, "'='");
        x->kind = N_SETBLOCK;
        x->name = x->names[0];
        node *filt = NULL;
        if (is_op(cur(P), "|")) {
            /* {% set x | filter %}: the filters apply to the captured body */
            filt = mk_node(P, E_LIT, cur(P));
            filt->lit = mk_str("", 0);
            filt = parse_filter_expr(P, filt);
        }
        x->b = filt;
        expect_block_end(P);
        parse_body(P, &x->args, "endset", t, "set");
        nexttok(P);
        expect_block_end(P);
        return x;
    }
    if (str_is(kw, "macro") || str_is(kw, "call")) {
        int is_call = kw.p[0] == 'c';
        x = mk_node(P, is_call ? N_CALLBLOCK : N_MACRO, t);
        if (!is_call) x->name = expect_name(P);
        /* parameter list: (a, b=default) — for call blocks, optional */
        str tmp[32];
        int n = 0;
        if (!is_call || is_op(cur(P), "(")) {
            expect_op(P, "(");
            while (!is_op(cur(P), ")")) {
                if (n) expect_op(P, ",");
                if (is_op(cur(P), ")")) break;
                if (n == 32) unexpected(P, "at most 32 parameters");
                tmp[n++] = expect_name(P);
                node *def = NULL;
                if (is_op(cur(P), "=")) { nexttok(P); def = parse_expr(P); }
                while (x->args2.n < n - 1) nl_push(P->c, &x->args2, NULL);
                nl_push(P->c, &x->args2, def);
            }
            nexttok(P);
        }
        x->names = ar_alloc(P->c, (size_t)(n ? n : 1) * sizeof(str));
        memcpy(x->names, tmp, (size_t)n * sizeof(str));
        x->nnames = n;
        if (is_call) {
            tok *ct = cur(P);
            x->a = parse_expr(P);
            if (x->a->kind != E_CALL) fail(P->c, ct->line, ct->col, "expected a macro call after 'call'");
        }
        expect_block_end(P);
        parse_body(P, &x->args, is_call ? "endcall" : "endmacro", t, is_call ? "call" : "macro");
        nexttok(P);
        if (!is_call && cur(P)->type == T_NAME) nexttok(P);   /* {% endmacro name %} */
        expect_block_end(P);
        return x;
    }
    if (str_is(kw, "generation") || str_is(kw, "filter")) {
        /* generation (Hugging Face's assistant mask marker) renders its
         * body; a filter block applies filters to its body. */
        int is_filter = kw.p[0] == 'f';
        x = mk_node(P, N_SCOPE, t);
        if (is_filter) {
            node *f = mk_node(P, E_LIT, cur(P));
            f->lit = mk_str("", 0);
            /* parse "name(args) | name2" as a filter chain on a placeholder */
            tok *ft = cur(P);
            node *y = mk_node(P, E_FILTER, ft);
            y->a = f;
            y->name = expect_name(P);
            y->id = lookup_name(FILTERS, sizeof FILTERS / sizeof *FILTERS, y->name);
            if (y->id < 0) fail(P->c, ft->line, ft->col, "unknown filter '%.*s'", (int)y->name.n, y->name.p);
            if (is_op(cur(P), "(")) { nexttok(P); parse_call_args(P, y); }
            x->b = parse_filter_expr(P, y);
        }
        expect_block_end(P);
        parse_body(P, &x->args, is_filter ? "endfilter" : "endgeneration", t, is_filter ? "filter" : "generation");
        nexttok(P);
        expect_block_end(P);
        return x;
    }
    if (str_is(kw, "break") || str_is(kw, "continue")) {
        x = mk_node(P, kw.p[0] == 'b' ? N_BREAK : N_CONTINUE, t);
        expect_block_end(P);
        return x;
    }
    fail(P->c, t->line, t->col, "unknown tag '%.*s'", (int)kw.n, kw.p);
}

static void parse_body(parser *P, nlist *out, const char *ends, const tok *opener, const char *opname)
{
    for (;;) {
        tok *t = cur(P);
        switch (t->type) {
        case T_EOF:
            if (ends)
                fail(P->c, opener->line, opener->col, "unexpected end of template: '%s' block is not closed (expected '%s')",
                     opname, strrchr(ends, ' ') ? strrchr(ends, ' ') + 1 : ends);
            return;
        case T_DATA: {
            node *x = mk_node(P, N_DATA, t);
            x->lit = mk_str(t->s.p, t->s.n);
            nl_push(P->c, out, x);
            nexttok(P);
            break;
        }
        case T_VAR_BEGIN: {
            nexttok(P);
            node *x = mk_node(P, N_OUTPUT, t);
            x->a = parse_tuple(P, 1);
            if (cur(P)->type != T_VAR_END) unexpected(P, "end of print statement");
            nexttok(P);
            nl_push(P->c, out, x);
            break;
        }
        case T_BLOCK_BEGIN: {
            nexttok(P);
            tok *nt = cur(P);
            if (tag_is_end(nt, ends)) return;
            if (nt->type == T_NAME && (str_is(nt->s, "endif") || str_is(nt->s, "endfor") || str_is(nt->s, "else") ||
                                       str_is(nt->s, "elif") || str_is(nt->s, "endmacro") || str_is(nt->s, "endset") ||
                                       str_is(nt->s, "endcall") || str_is(nt->s, "endfilter") ||
                                       str_is(nt->s, "endgeneration"))) {
                if (ends)
                    fail(P->c, nt->line, nt->col, "unexpected '%.*s' inside '%s' block opened at %d:%d (expected '%s')",
                         (int)nt->s.n, nt->s.p, opname, opener->line, opener->col,
                         strrchr(ends, ' ') ? strrchr(ends, ' ') + 1 : ends);
                fail(P->c, nt->line, nt->col, "unexpected '%.*s' with no open block", (int)nt->s.n, nt->s.p);
            }
            nl_push(P->c, out, parse_statement(P));
            break;
        }
        default:
            unexpected(P, "template data or a tag");
        }
    }
}

/* --------------------------------------------------------- value helpers */

typedef struct frame {
    struct frame *parent;
    int n, cap;
    str *keys;
    kv *vals;
} frame;

enum { FN_GLOBAL, FN_METHOD, FN_MACRO, FN_CALLER };
enum { G_RANGE, G_NAMESPACE, G_DICT, G_RAISE, G_STRFTIME };
static const char *const GLOBALS[] = { "range", "namespace", "dict", "raise_exception", "strftime_now" };

struct kfn {
    int kind, id;
    str name;             /* method name; macro name */
    kv self;              /* bound receiver of a method */
    const node *def;      /* macro definition or call block */
    frame *closure;       /* scope the macro or caller body sees */
};

struct kloop { kv *items; int64_t n, i; };

typedef struct rctx {
    ctx c;
    int has_now;
    int64_t now;
    int call_depth;   /* macro calls in progress */
} rctx;

static const char *type_name(const kv *v)
{
    switch (v->t) {
    case V_UNDEF: return "Undefined";
    case V_NONE: return "NoneType";
    case V_BOOL: return "bool";
    case V_INT: return "int";
    case V_FLOAT: return "float";
    case V_STR: return "str";
    case V_LIST: return v->aux ? "tuple" : "list";
    case V_DICT: return v->aux ? "Namespace" : "dict";
    case V_FUNC: return "function";
    default: return "LoopContext";
    }
}

static _Noreturn void fail_at(rctx *r, const node *x, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static _Noreturn void fail_at(rctx *r, const node *x, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fail(&r->c, x ? x->line : 0, x ? x->col : 0, "%s", msg);
}

/* Raises Jinja2's UndefinedError for an undefined value being used. */
static _Noreturn void undef_fail(rctx *r, const node *x, const kv *u)
{
    static const char *const objn[] = { "Undefined", "None", "bool", "int", "float", "str", "list", "dict",
                                         "function", "LoopContext" };
    const char *on = u->aux2 < sizeof objn / sizeof *objn ? objn[u->aux2] : "object";
    if (u->aux == U_NAME) fail_at(r, x, "'%.*s' is undefined", (int)u->s.n, u->s.p);
    if (u->aux2 == V_NONE) fail_at(r, x, "'None' has no attribute '%.*s'", (int)u->s.n, u->s.p);
    if (u->aux == U_ITEM) fail_at(r, x, "'%s object' has no element %.*s", on, (int)u->s.n, u->s.p);
    fail_at(r, x, "'%s object' has no attribute '%.*s'", on, (int)u->s.n, u->s.p);
}

static int truthy(const kv *v)
{
    switch (v->t) {
    case V_UNDEF: case V_NONE: return 0;
    case V_BOOL: case V_INT: return v->i != 0;
    case V_FLOAT: return v->f != 0.0;
    case V_STR: return v->s.n != 0;
    case V_LIST: return v->l->n != 0;
    case V_DICT: return v->d->n != 0;
    default: return 1;
    }
}

static int is_num(const kv *v) { return v->t == V_INT || v->t == V_FLOAT || v->t == V_BOOL; }
static double num_f(const kv *v) { return v->t == V_FLOAT ? v->f : (double)v->i; }

/* ---- UTF-8: Python indexes strings by code point */

static int is_ascii(str s)
{
    for (size_t i = 0; i < s.n; i++) if ((unsigned char)s.p[i] >= 0x80) return 0;
    return 1;
}

static size_t cp_count(str s)
{
    size_t n = 0;
    for (size_t i = 0; i < s.n; i++) n += ((unsigned char)s.p[i] & 0xC0) != 0x80;
    return n;
}

/* Byte offsets of each code point, plus one for the end (n + 1 entries). */
static size_t *cp_offsets(ctx *c, str s, size_t *n)
{
    size_t cnt = cp_count(s), k = 0;
    size_t *off = ar_alloc(c, (cnt + 1) * sizeof(size_t));
    for (size_t i = 0; i < s.n; i++)
        if (((unsigned char)s.p[i] & 0xC0) != 0x80) off[k++] = i;
    off[cnt] = s.n;
    *n = cnt;
    return off;
}

static uint32_t cp_decode(const char *p, size_t n, size_t *adv)
{
    utf8proc_int32_t cp;
    utf8proc_ssize_t k = utf8proc_iterate((const utf8proc_uint8_t *)p, (utf8proc_ssize_t)n, &cp);
    if (k <= 0) { *adv = 1; return (unsigned char)p[0]; }
    *adv = (size_t)k;
    return (uint32_t)cp;
}

static int py_isspace(uint32_t cp)
{
    if (cp < 128) return cp == ' ' || (cp >= 9 && cp <= 13) || (cp >= 0x1c && cp <= 0x1f);
    return cp == 0x85 || cp == 0xa0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200a) || cp == 0x2028 ||
           cp == 0x2029 || cp == 0x202f || cp == 0x205f || cp == 0x3000;
}

/* ---- Python float formatting (repr: shortest round-trip digits) */

static void fmt_pyfloat(double x, char *out, size_t on)
{
    if (isnan(x)) { snprintf(out, on, "nan"); return; }
    if (isinf(x)) { snprintf(out, on, x < 0 ? "-inf" : "inf"); return; }
    if (x == 0) { snprintf(out, on, signbit(x) ? "-0.0" : "0.0"); return; }
    char buf[48];
    for (int p = 1; p <= 17; p++) {
        snprintf(buf, sizeof buf, "%.*e", p - 1, x);
        if (strtod(buf, NULL) == x) break;
    }
    /* buf = [-]d[.ddd]e[+-]XX */
    char digits[24];
    int nd = 0, neg = buf[0] == '-';
    const char *q = buf + neg;
    for (; *q && *q != 'e'; q++) if (*q != '.') digits[nd++] = *q;
    digits[nd] = 0;
    int e = atoi(q + 1);
    char *o = out;
    size_t left = on;
#define EMIT(...) do { int k_ = snprintf(o, left, __VA_ARGS__); if (k_ < 0 || (size_t)k_ >= left) return; o += k_; left -= (size_t)k_; } while (0)
    if (neg) EMIT("-");
    if (e >= -5 + 1 && e < 16) {
        if (e >= nd - 1) {
            EMIT("%s", digits);
            for (int i = 0; i < e - (nd - 1); i++) EMIT("0");
            EMIT(".0");
        } else if (e >= 0) {
            EMIT("%.*s.%s", e + 1, digits, digits + e + 1);
        } else {
            EMIT("0.");
            for (int i = 0; i < -e - 1; i++) EMIT("0");
            EMIT("%s", digits);
        }
    } else {
        if (nd > 1) EMIT("%c.%s", digits[0], digits + 1);
        else EMIT("%c", digits[0]);
        EMIT("e%c%02d", e < 0 ? '-' : '+', e < 0 ? -e : e);
    }
#undef EMIT
}

static void repr(rctx *r, sbuf *b, const kv *v);

/* Python str(v). */
static void to_str(rctx *r, sbuf *b, const kv *v)
{
    ctx *c = &r->c;
    char tmp[48];
    switch (v->t) {
    case V_UNDEF: return;
    case V_NONE: sb_puts(c, b, "None"); return;
    case V_BOOL: sb_puts(c, b, v->i ? "True" : "False"); return;
    case V_INT: sb_printf(c, b, "%lld", (long long)v->i); return;
    case V_FLOAT: fmt_pyfloat(v->f, tmp, sizeof tmp); sb_puts(c, b, tmp); return;
    case V_STR: sb_put(c, b, v->s.p, v->s.n); return;
    default: repr(r, b, v); return;
    }
}

static void repr_str(rctx *r, sbuf *b, str s)
{
    ctx *c = &r->c;
    char q = memchr(s.p, '\'', s.n) && !memchr(s.p, '"', s.n) ? '"' : '\'';
    sb_putc(c, b, q);
    for (size_t i = 0; i < s.n; i++) {
        unsigned char ch = (unsigned char)s.p[i];
        if (ch == (unsigned char)q || ch == '\\') { sb_putc(c, b, '\\'); sb_putc(c, b, (char)ch); }
        else if (ch == '\n') sb_puts(c, b, "\\n");
        else if (ch == '\r') sb_puts(c, b, "\\r");
        else if (ch == '\t') sb_puts(c, b, "\\t");
        else if (ch < 0x20 || ch == 0x7f) sb_printf(c, b, "\\x%02x", ch);
        else sb_putc(c, b, (char)ch);
    }
    sb_putc(c, b, q);
}

/* Python repr(v). */
static void repr(rctx *r, sbuf *b, const kv *v)
{
    ctx *c = &r->c;
    switch (v->t) {
    case V_STR: repr_str(r, b, v->s); return;
    case V_LIST:
        sb_putc(c, b, v->aux ? '(' : '[');
        for (size_t i = 0; i < v->l->n; i++) {
            if (i) sb_puts(c, b, ", ");
            repr(r, b, &v->l->v[i]);
        }
        if (v->aux && v->l->n == 1) sb_putc(c, b, ',');
        sb_putc(c, b, v->aux ? ')' : ']');
        return;
    case V_DICT:
        if (v->aux) sb_puts(c, b, "<Namespace ");
        sb_putc(c, b, '{');
        for (size_t i = 0; i < v->d->n; i++) {
            if (i) sb_puts(c, b, ", ");
            repr(r, b, &v->d->keys[i]);
            sb_puts(c, b, ": ");
            repr(r, b, &v->d->vals[i]);
        }
        sb_putc(c, b, '}');
        if (v->aux) sb_putc(c, b, '>');
        return;
    case V_FUNC: sb_puts(c, b, "<function>"); return;
    case V_LOOP: sb_puts(c, b, "<LoopContext>"); return;
    default: to_str(r, b, v); return;
    }
}

static str kv_tostr(rctx *r, const kv *v)
{
    if (v->t == V_STR) return v->s;
    sbuf b = {0};
    sb_put(&r->c, &b, "", 0);
    to_str(r, &b, v);
    return (str){ b.p, b.n };
}

/* json.dumps(v, ensure_ascii=False, indent=..., separators=..., sort_keys=...) */
typedef struct jopts { str indent; int has_indent; str item_sep, key_sep; int sort_keys; } jopts;

static int kv_cmp(rctx *r, const node *x, const kv *a, const kv *b);

static void json_str(rctx *r, sbuf *b, str s)
{
    ctx *c = &r->c;
    sb_putc(c, b, '"');
    size_t run = 0;
    for (size_t i = 0; i < s.n; i++) {
        unsigned char ch = (unsigned char)s.p[i];
        const char *esc = NULL;
        char tmp[8];
        if (ch == '"') esc = "\\\"";
        else if (ch == '\\') esc = "\\\\";
        else if (ch == '\n') esc = "\\n";
        else if (ch == '\r') esc = "\\r";
        else if (ch == '\t') esc = "\\t";
        else if (ch == '\b') esc = "\\b";
        else if (ch == '\f') esc = "\\f";
        else if (ch < 0x20) { snprintf(tmp, sizeof tmp, "\\u%04x", ch); esc = tmp; }
        if (esc) {
            sb_put(c, b, s.p + run, i - run);
            sb_puts(c, b, esc);
            run = i + 1;
        }
    }
    sb_put(c, b, s.p + run, s.n - run);
    sb_putc(c, b, '"');
}

static void json_newline(rctx *r, sbuf *b, const jopts *o, int level)
{
    sb_putc(&r->c, b, '\n');
    for (int i = 0; i < level; i++) sb_put(&r->c, b, o->indent.p, o->indent.n);
}

static void json_dump(rctx *r, const node *x, sbuf *b, const kv *v, const jopts *o, int level)
{
    ctx *c = &r->c;
    char tmp[48];
    switch (v->t) {
    case V_NONE: sb_puts(c, b, "null"); return;
    case V_BOOL: sb_puts(c, b, v->i ? "true" : "false"); return;
    case V_INT: sb_printf(c, b, "%lld", (long long)v->i); return;
    case V_FLOAT:
        if (isnan(v->f)) sb_puts(c, b, "NaN");
        else if (isinf(v->f)) sb_puts(c, b, v->f < 0 ? "-Infinity" : "Infinity");
        else { fmt_pyfloat(v->f, tmp, sizeof tmp); sb_puts(c, b, tmp); }
        return;
    case V_STR: json_str(r, b, v->s); return;
    case V_LIST:
        if (!v->l->n) { sb_puts(c, b, "[]"); return; }
        sb_putc(c, b, '[');
        for (size_t i = 0; i < v->l->n; i++) {
            if (i) sb_put(c, b, o->item_sep.p, o->item_sep.n);
            if (o->has_indent) json_newline(r, b, o, level + 1);
            json_dump(r, x, b, &v->l->v[i], o, level + 1);
        }
        if (o->has_indent) json_newline(r, b, o, level);
        sb_putc(c, b, ']');
        return;
    case V_DICT: {
        if (!v->d->n) { sb_puts(c, b, "{}"); return; }
        size_t n = v->d->n;
        size_t *ord = ar_alloc(c, n * sizeof(size_t));
        for (size_t i = 0; i < n; i++) ord[i] = i;
        if (o->sort_keys)   /* insertion sort: dicts in templates are small */
            for (size_t i = 1; i < n; i++)
                for (size_t j = i; j > 0 && kv_cmp(r, x, &v->d->keys[ord[j - 1]], &v->d->keys[ord[j]]) > 0; j--) {
                    size_t t = ord[j]; ord[j] = ord[j - 1]; ord[j - 1] = t;
                }
        sb_putc(c, b, '{');
        for (size_t k = 0; k < n; k++) {
            const kv *key = &v->d->keys[ord[k]];
            if (k) sb_put(c, b, o->item_sep.p, o->item_sep.n);
            if (o->has_indent) json_newline(r, b, o, level + 1);
            if (key->t == V_STR) json_str(r, b, key->s);
            else if (key->t == V_NONE || key->t == V_BOOL || key->t == V_INT || key->t == V_FLOAT) {
                sbuf kb = {0};
                json_dump(r, x, &kb, key, o, 0);
                json_str(r, b, (str){ kb.p, kb.n });
            } else fail_at(r, x, "keys must be str, int, float, bool or None, not %s", type_name(key));
            sb_put(c, b, o->key_sep.p, o->key_sep.n);
            json_dump(r, x, b, &v->d->vals[ord[k]], o, level + 1);
        }
        if (o->has_indent) json_newline(r, b, o, level);
        sb_putc(c, b, '}');
        return;
    }
    default:
        fail_at(r, x, "Object of type %s is not JSON serializable", type_name(v));
    }
}

static int kv_eq(const kv *a, const kv *b)
{
    if (is_num(a) && is_num(b)) {
        if (a->t != V_FLOAT && b->t != V_FLOAT) return a->i == b->i;
        return num_f(a) == num_f(b);
    }
    if (a->t != b->t) return 0;
    switch (a->t) {
    case V_UNDEF: case V_NONE: return 1;
    case V_STR: return a->s.n == b->s.n && memcmp(a->s.p, b->s.p, a->s.n) == 0;
    case V_LIST:
        if (a->l->n != b->l->n || a->aux != b->aux) return 0;
        for (size_t i = 0; i < a->l->n; i++) if (!kv_eq(&a->l->v[i], &b->l->v[i])) return 0;
        return 1;
    case V_DICT:
        if (a->d->n != b->d->n) return 0;
        for (size_t i = 0; i < a->d->n; i++) {
            kv *o = dict_find(b->d, &a->d->keys[i]);
            if (!o || !kv_eq(&a->d->vals[i], o)) return 0;
        }
        return 1;
    default: return a->fn == b->fn;
    }
}

/* Python ordering; TypeError for unordered pairs. */
static int kv_cmp(rctx *r, const node *x, const kv *a, const kv *b)
{
    if (a->t == V_UNDEF) undef_fail(r, x, a);
    if (b->t == V_UNDEF) undef_fail(r, x, b);
    if (is_num(a) && is_num(b)) {
        if (a->t != V_FLOAT && b->t != V_FLOAT) return (a->i > b->i) - (a->i < b->i);
        double p = num_f(a), q = num_f(b);
        return (p > q) - (p < q);
    }
    if (a->t == V_STR && b->t == V_STR) {
        size_t n = a->s.n < b->s.n ? a->s.n : b->s.n;
        int k = memcmp(a->s.p, b->s.p, n);
        if (k) return k < 0 ? -1 : 1;
        return (a->s.n > b->s.n) - (a->s.n < b->s.n);
    }
    if (a->t == V_LIST && b->t == V_LIST) {
        for (size_t i = 0; i < a->l->n && i < b->l->n; i++) {
            if (kv_eq(&a->l->v[i], &b->l->v[i])) continue;
            return kv_cmp(r, x, &a->l->v[i], &b->l->v[i]);
        }
        return (a->l->n > b->l->n) - (a->l->n < b->l->n);
    }
    fail_at(r, x, "'<' not supported between instances of '%s' and '%s'", type_name(a), type_name(b));
}

/* The items a for loop or a filter iterates: list items, dict keys, string
 * characters; nothing for undefined. */
static kv *iter_items(rctx *r, const node *x, const kv *v, size_t *n)
{
    switch (v->t) {
    case V_UNDEF: *n = 0; return NULL;
    case V_LIST: *n = v->l->n; return v->l->v;
    case V_DICT: *n = v->d->n; return v->d->keys;
    case V_STR: {
        size_t cnt;
        size_t *off = cp_offsets(&r->c, v->s, &cnt);
        kv *out = ar_alloc(&r->c, (cnt ? cnt : 1) * sizeof(kv));
        for (size_t i = 0; i < cnt; i++) out[i] = mk_str(v->s.p + off[i], off[i + 1] - off[i]);
        *n = cnt;
        return out;
    }
    default:
        fail_at(r, x, "'%s' object is not iterable", type_name(v));
    }
}

static kv list_of(rctx *r, const node *x, const kv *v)
{
    size_t n;
    kv *it = iter_items(r, x, v, &n);
    kv out = mk_list(&r->c, n);
    if (n) memcpy(out.l->v, it, n * sizeof(kv));
    out.l->n = n;
    return out;
}

static kv json_to_kv(ctx *c, const json_t *j)
{
    switch (json_typeof(j)) {
    case JSON_OBJECT: {
        kv d = mk_dict(c, json_object_size(j));
        const char *k;
        json_t *val;
        json_object_foreach((json_t *)j, k, val) {
            size_t i = d.d->n++;
            d.d->keys[i] = mk_str(k, strlen(k));
            d.d->vals[i] = json_to_kv(c, val);
        }
        return d;
    }
    case JSON_ARRAY: {
        size_t n = json_array_size(j);
        kv l = mk_list(c, n);
        for (size_t i = 0; i < n; i++) l.l->v[i] = json_to_kv(c, json_array_get(j, i));
        l.l->n = n;
        return l;
    }
    case JSON_STRING: return mk_str(json_string_value(j), json_string_length(j));
    case JSON_INTEGER: return mk_int((int64_t)json_integer_value(j));
    case JSON_REAL: return mk_float(json_real_value(j));
    case JSON_TRUE: return mk_bool(1);
    case JSON_FALSE: return mk_bool(0);
    default: return NONE;
    }
}

/* ---- frames */

static frame *new_frame(ctx *c, frame *parent)
{
    frame *f = ar_alloc(c, sizeof(frame));
    f->parent = parent;
    f->n = f->cap = 0;
    f->keys = NULL;
    f->vals = NULL;
    return f;
}

static void frame_set(ctx *c, frame *f, str k, kv v)
{
    for (int i = 0; i < f->n; i++)
        if (f->keys[i].n == k.n && memcmp(f->keys[i].p, k.p, k.n) == 0) { f->vals[i] = v; return; }
    if (f->n == f->cap) {
        int cap = f->cap ? f->cap * 2 : 4;
        str *nk = ar_alloc(c, (size_t)cap * sizeof(str));
        kv *nv = ar_alloc(c, (size_t)cap * sizeof(kv));
        if (f->n) {
            memcpy(nk, f->keys, (size_t)f->n * sizeof(str));
            memcpy(nv, f->vals, (size_t)f->n * sizeof(kv));
        }
        f->keys = nk;
        f->vals = nv;
        f->cap = cap;
    }
    f->keys[f->n] = k;
    f->vals[f->n++] = v;
}

static kv lookup(rctx *r, frame *f, str k)
{
    for (; f; f = f->parent)
        for (int i = f->n - 1; i >= 0; i--)
            if (f->keys[i].n == k.n && memcmp(f->keys[i].p, k.p, k.n) == 0) return f->vals[i];
    int g = lookup_name(GLOBALS, sizeof GLOBALS / sizeof *GLOBALS, k);
    if (g >= 0) {
        kv v = { .t = V_FUNC };
        v.fn = ar_zalloc(&r->c, sizeof(kfn));
        v.fn->kind = FN_GLOBAL;
        v.fn->id = g;
        v.fn->name = k;
        return v;
    }
    return mk_undef(U_NAME, 0, k.p, k.n);
}

/* ------------------------------------------------------------ evaluator */

typedef struct args { kv *pos; int npos; kv *kw; str *kwn; int nkw; } args;

static kv eval(rctx *r, const node *x, frame *f);
static int exec_body(rctx *r, const nlist *body, frame *f, sbuf *out);

static void eval_args(rctx *r, const node *x, frame *f, args *a)
{
    a->npos = x->args.n;
    a->nkw = x->args2.n;
    a->pos = ar_alloc(&r->c, (size_t)(a->npos + 1) * sizeof(kv));
    a->kw = ar_alloc(&r->c, (size_t)(a->nkw + 1) * sizeof(kv));
    a->kwn = x->names;
    for (int i = 0; i < a->npos; i++) a->pos[i] = eval(r, x->args.v[i], f);
    for (int i = 0; i < a->nkw; i++) a->kw[i] = eval(r, x->args2.v[i], f);
}

/* Argument number idx (positional) or named `name`; 0 when absent. */
static int arg_get(const args *a, int idx, const char *name, kv *out)
{
    if (idx >= 0 && idx < a->npos) { *out = a->pos[idx]; return 1; }
    if (name)
        for (int i = 0; i < a->nkw; i++)
            if (str_is(a->kwn[i], name)) { *out = a->kw[i]; return 1; }
    return 0;
}

static kv arg_or(const args *a, int idx, const char *name, kv def)
{
    kv v;
    return arg_get(a, idx, name, &v) ? v : def;
}

static kv need_str(rctx *r, const node *x, const kv *v, const char *what)
{
    if (v->t == V_UNDEF) undef_fail(r, x, v);
    if (v->t != V_STR) fail_at(r, x, "%s expects a string, got %s", what, type_name(v));
    return *v;
}

static const char *const STR_METHODS[] = { "strip", "lstrip", "rstrip", "split", "startswith", "endswith", "upper",
                                           "lower", "replace", "title", "capitalize", "find", "count", "join",
                                           "isdigit", "isspace", "splitlines" };
static const char *const DICT_METHODS[] = { "get", "items", "keys", "values" };
static const char *const LIST_METHODS[] = { "append", "index", "count" };

static kv bind_method(rctx *r, const kv *self, str name)
{
    kv v = { .t = V_FUNC };
    v.fn = ar_zalloc(&r->c, sizeof(kfn));
    v.fn->kind = FN_METHOD;
    v.fn->self = *self;
    v.fn->name = name;
    return v;
}

static kv loop_attr(rctx *r, const kv *lv, str name)
{
    const kloop *L = lv->loop;
    if (str_is(name, "index")) return mk_int(L->i + 1);
    if (str_is(name, "index0")) return mk_int(L->i);
    if (str_is(name, "revindex")) return mk_int(L->n - L->i);
    if (str_is(name, "revindex0")) return mk_int(L->n - L->i - 1);
    if (str_is(name, "first")) return mk_bool(L->i == 0);
    if (str_is(name, "last")) return mk_bool(L->i == L->n - 1);
    if (str_is(name, "length")) return mk_int(L->n);
    if (str_is(name, "depth")) return mk_int(1);
    if (str_is(name, "depth0")) return mk_int(0);
    if (str_is(name, "previtem")) return L->i > 0 ? L->items[L->i - 1] : mk_undef(U_ATTR, V_LOOP, name.p, name.n);
    if (str_is(name, "nextitem")) return L->i + 1 < L->n ? L->items[L->i + 1] : mk_undef(U_ATTR, V_LOOP, name.p, name.n);
    if (str_is(name, "cycle")) return bind_method(r, lv, name);
    return mk_undef(U_ATTR, V_LOOP, name.p, name.n);
}

/* obj.name: Jinja2 tries the Python attribute first (methods), then the item. */
static kv get_attr(rctx *r, const node *x, const kv *obj, str name)
{
    switch (obj->t) {
    case V_UNDEF: undef_fail(r, x, obj);
    case V_DICT: {
        if (!obj->aux && lookup_name(DICT_METHODS, sizeof DICT_METHODS / sizeof *DICT_METHODS, name) >= 0)
            return bind_method(r, obj, name);
        kv *v = dict_find_str(obj->d, name.p, name.n);
        return v ? *v : mk_undef(U_ATTR, V_DICT, name.p, name.n);
    }
    case V_STR:
        if (lookup_name(STR_METHODS, sizeof STR_METHODS / sizeof *STR_METHODS, name) >= 0) return bind_method(r, obj, name);
        break;
    case V_LIST:
        if (!obj->aux && lookup_name(LIST_METHODS, sizeof LIST_METHODS / sizeof *LIST_METHODS, name) >= 0)
            return bind_method(r, obj, name);
        break;
    case V_LOOP: return loop_attr(r, obj, name);
    default: break;
    }
    return mk_undef(U_ATTR, obj->t, name.p, name.n);
}

static int64_t norm_index(int64_t i, int64_t n) { return i < 0 ? i + n : i; }

/* obj[key]: the item first, then (for string keys) the attribute. */
static kv get_item(rctx *r, const node *x, const kv *obj, const kv *key)
{
    if (obj->t == V_UNDEF) undef_fail(r, x, obj);
    if (key->t == V_UNDEF) undef_fail(r, x, key);
    if (obj->t == V_DICT) {
        kv *v = dict_find(obj->d, key);
        if (v) return *v;
    } else if ((obj->t == V_LIST || obj->t == V_STR) && (key->t == V_INT || key->t == V_BOOL)) {
        if (obj->t == V_LIST) {
            int64_t i = norm_index(key->i, (int64_t)obj->l->n);
            if (i >= 0 && i < (int64_t)obj->l->n) return obj->l->v[i];
        } else {
            size_t n;
            size_t *off = cp_offsets(&r->c, obj->s, &n);
            int64_t i = norm_index(key->i, (int64_t)n);
            if (i >= 0 && i < (int64_t)n) return mk_str(obj->s.p + off[i], off[i + 1] - off[i]);
        }
    }
    if (key->t == V_STR) {
        kv a = get_attr(r, x, obj, key->s);
        return a;
    }
    str ks = kv_tostr(r, key);
    return mk_undef(U_ITEM, obj->t, ks.p, ks.n);
}

/* Python slice index normalisation (as slice.indices). */
static void slice_bounds(int64_t n, const kv *a, const kv *b, int64_t step, int64_t *start, int64_t *stop)
{
    int64_t lo = step < 0 ? -1 : 0, hi = step < 0 ? n - 1 : n;
    if (a->t == V_NONE || a->t == V_UNDEF) *start = step < 0 ? hi : lo;
    else {
        int64_t s = a->i < 0 ? a->i + n : a->i;
        *start = s < lo ? lo : s > hi ? hi : s;
    }
    if (b->t == V_NONE || b->t == V_UNDEF) *stop = step < 0 ? lo : hi;
    else {
        int64_t s = b->i < 0 ? b->i + n : b->i;
        *stop = s < lo ? lo : s > hi ? hi : s;
    }
}

static kv do_slice(rctx *r, const node *x, const kv *obj, const kv *a, const kv *b, const kv *st)
{
    const kv *ends[3] = { a, b, st };
    for (int i = 0; i < 3; i++)
        if (ends[i]->t != V_NONE && ends[i]->t != V_UNDEF && ends[i]->t != V_INT && ends[i]->t != V_BOOL)
            fail_at(r, x, "slice indices must be integers or None");
    int64_t step = (st->t == V_INT || st->t == V_BOOL) ? st->i : 1;
    if (step == 0) fail_at(r, x, "slice step cannot be zero");
    if (obj->t == V_UNDEF) undef_fail(r, x, obj);
    if (obj->t == V_LIST) {
        int64_t s, e, n = (int64_t)obj->l->n;
        slice_bounds(n, a, b, step, &s, &e);
        kv out = mk_list(&r->c, 0);
        out.aux = obj->aux;
        for (int64_t i = s; step > 0 ? i < e : i > e; i += step) list_push(&r->c, out.l, obj->l->v[i]);
        return out;
    }
    if (obj->t == V_STR) {
        size_t n;
        size_t *off = cp_offsets(&r->c, obj->s, &n);
        int64_t s, e;
        slice_bounds((int64_t)n, a, b, step, &s, &e);
        if (step == 1) return mk_str(obj->s.p + off[s], s < e ? off[e] - off[s] : 0);
        sbuf sb = {0};
        sb_put(&r->c, &sb, "", 0);
        for (int64_t i = s; step > 0 ? i < e : i > e; i += step) sb_put(&r->c, &sb, obj->s.p + off[i], off[i + 1] - off[i]);
        return mk_str(sb.p, sb.n);
    }
    fail_at(r, x, "'%s' object is not subscriptable", type_name(obj));
}

/* ---- string helpers */

typedef uint32_t (*cpmap)(uint32_t);
static uint32_t cp_upper(uint32_t c) { return c < 128 ? (uint32_t)toupper((int)c) : (uint32_t)utf8proc_toupper((utf8proc_int32_t)c); }
static uint32_t cp_lower(uint32_t c) { return c < 128 ? (uint32_t)tolower((int)c) : (uint32_t)utf8proc_tolower((utf8proc_int32_t)c); }
static int cp_cased(uint32_t c) { return cp_upper(c) != c || cp_lower(c) != c; }

/* mode 0: map every code point; 1: capitalize; 2: Python str.title; 3: Jinja2's title filter */
static kv str_case(rctx *r, str s, cpmap fn, int mode)
{
    if (is_ascii(s) && mode == 0) {
        char *p = ar_alloc(&r->c, s.n + 1);
        for (size_t i = 0; i < s.n; i++) p[i] = (char)fn((unsigned char)s.p[i]);
        p[s.n] = 0;
        return mk_str(p, s.n);
    }
    sbuf b = {0};
    sb_put(&r->c, &b, "", 0);
    int prev_cased = 0, word_start = 1;
    for (size_t i = 0; i < s.n;) {
        size_t adv;
        uint32_t cp = cp_decode(s.p + i, s.n - i, &adv);
        uint32_t o;
        if (mode == 0) o = fn(cp);
        else if (mode == 1) o = i == 0 ? cp_upper(cp) : cp_lower(cp);
        else if (mode == 2) { o = prev_cased ? cp_lower(cp) : cp_upper(cp); prev_cased = cp_cased(cp); }
        else {
            int sep = py_isspace(cp) || cp == '-' || cp == '(' || cp == '{' || cp == '[' || cp == '<';
            o = sep ? cp : word_start ? cp_upper(cp) : cp_lower(cp);
            word_start = sep;
        }
        put_utf8(&r->c, &b, o);
        i += adv;
    }
    return mk_str(b.p, b.n);
}

/* strip family: which = 1 left, 2 right, 3 both; chars NULL = whitespace */
static kv str_strip(rctx *r, str s, const kv *chars, int which)
{
    (void)r;
    size_t b = 0, e = s.n;
    int ws = !chars || chars->t == V_NONE || chars->t == V_UNDEF;
    str cs = ws ? (str){ "", 0 } : chars->s;
    if (which & 1)
        while (b < e) {
            size_t adv;
            uint32_t cp = cp_decode(s.p + b, e - b, &adv);
            int in = 0;
            if (ws) in = py_isspace(cp);
            else for (size_t k = 0; k < cs.n;) { size_t a2; if (cp_decode(cs.p + k, cs.n - k, &a2) == cp) { in = 1; break; } k += a2; }
            if (!in) break;
            b += adv;
        }
    if (which & 2)
        while (e > b) {
            size_t st = e - 1;
            while (st > b && ((unsigned char)s.p[st] & 0xC0) == 0x80) st--;
            size_t adv;
            uint32_t cp = cp_decode(s.p + st, e - st, &adv);
            int in = 0;
            if (ws) in = py_isspace(cp);
            else for (size_t k = 0; k < cs.n;) { size_t a2; if (cp_decode(cs.p + k, cs.n - k, &a2) == cp) { in = 1; break; } k += a2; }
            if (!in) break;
            e = st;
        }
    return mk_str(s.p + b, e - b);
}

static const char *memmem_s(str h, size_t from, str nd)
{
    if (nd.n == 0) return h.p + from;
    if (h.n < nd.n) return NULL;
    for (size_t i = from; i + nd.n <= h.n; i++)
        if (h.p[i] == nd.p[0] && memcmp(h.p + i, nd.p, nd.n) == 0) return h.p + i;
    return NULL;
}

static kv str_replace(rctx *r, str s, str old, str new_, int64_t count)
{
    sbuf b = {0};
    sb_put(&r->c, &b, "", 0);
    if (old.n == 0) {
        /* Python inserts `new` between code points (and at both ends) */
        int64_t done = 0;
        for (size_t i = 0; i <= s.n;) {
            if (count < 0 || done < count) { sb_put(&r->c, &b, new_.p, new_.n); done++; }
            if (i == s.n) break;
            size_t adv;
            cp_decode(s.p + i, s.n - i, &adv);
            sb_put(&r->c, &b, s.p + i, adv);
            i += adv;
        }
        return mk_str(b.p, b.n);
    }
    size_t pos = 0;
    int64_t done = 0;
    const char *hit;
    while ((count < 0 || done < count) && (hit = memmem_s(s, pos, old)) != NULL) {
        size_t at = (size_t)(hit - s.p);
        sb_put(&r->c, &b, s.p + pos, at - pos);
        sb_put(&r->c, &b, new_.p, new_.n);
        pos = at + old.n;
        done++;
    }
    sb_put(&r->c, &b, s.p + pos, s.n - pos);
    return mk_str(b.p, b.n);
}

static kv str_split(rctx *r, const node *x, str s, const kv *sep, int64_t maxsplit)
{
    kv out = mk_list(&r->c, 4);
    if (!sep || sep->t == V_NONE || sep->t == V_UNDEF) {
        size_t i = 0;
        int64_t done = 0;
        for (;;) {
            while (i < s.n) { size_t adv; if (!py_isspace(cp_decode(s.p + i, s.n - i, &adv))) break; i += adv; }
            if (i >= s.n) break;
            if (maxsplit >= 0 && done >= maxsplit) {
                size_t e = s.n;
                while (e > i) {
                    size_t st = e - 1, adv;
                    while (st > i && ((unsigned char)s.p[st] & 0xC0) == 0x80) st--;
                    if (!py_isspace(cp_decode(s.p + st, e - st, &adv))) break;
                    e = st;
                }
                list_push(&r->c, out.l, mk_str(s.p + i, e - i));
                break;
            }
            size_t st = i;
            while (i < s.n) { size_t adv; if (py_isspace(cp_decode(s.p + i, s.n - i, &adv))) break; i += adv; }
            list_push(&r->c, out.l, mk_str(s.p + st, i - st));
            done++;
        }
        return out;
    }
    str sp = need_str(r, x, sep, "split").s;
    if (!sp.n) fail_at(r, x, "empty separator");
    size_t pos = 0;
    int64_t done = 0;
    const char *hit;
    while ((maxsplit < 0 || done < maxsplit) && (hit = memmem_s(s, pos, sp)) != NULL) {
        size_t at = (size_t)(hit - s.p);
        list_push(&r->c, out.l, mk_str(s.p + pos, at - pos));
        pos = at + sp.n;
        done++;
    }
    list_push(&r->c, out.l, mk_str(s.p + pos, s.n - pos));
    return out;
}

static int str_affix(rctx *r, const node *x, str s, const kv *arg, int end)
{
    if (arg->t == V_LIST && arg->aux) {
        for (size_t i = 0; i < arg->l->n; i++)
            if (str_affix(r, x, s, &arg->l->v[i], end)) return 1;
        return 0;
    }
    str a = need_str(r, x, arg, end ? "endswith" : "startswith").s;
    if (a.n > s.n) return 0;
    return memcmp(end ? s.p + s.n - a.n : s.p, a.p, a.n) == 0;
}

static kv join_items(rctx *r, const node *x, const kv *seq, str sep, const kv *attr);

static kv call_method(rctx *r, const node *x, const kfn *fn, const args *a)
{
    const kv *self = &fn->self;
    str m = fn->name;
    kv v0 = arg_or(a, 0, NULL, UNDEF), v1 = arg_or(a, 1, NULL, UNDEF);
    if (self->t == V_STR) {
        str s = self->s;
        if (str_is(m, "strip") || str_is(m, "lstrip") || str_is(m, "rstrip")) {
            if (v0.t != V_UNDEF && v0.t != V_NONE) need_str(r, x, &v0, m.p);
            return str_strip(r, s, &v0, m.p[0] == 'l' ? 1 : m.p[0] == 'r' ? 2 : 3);
        }
        if (str_is(m, "split")) {
            kv sep = arg_or(a, 0, "sep", NONE), mx = arg_or(a, 1, "maxsplit", mk_int(-1));
            return str_split(r, x, s, &sep, mx.i);
        }
        if (str_is(m, "splitlines")) {
            kv out = mk_list(&r->c, 4);
            size_t st = 0;
            for (size_t i = 0; i < s.n; i++)
                if (s.p[i] == '\n' || s.p[i] == '\r') {
                    list_push(&r->c, out.l, mk_str(s.p + st, i - st));
                    if (s.p[i] == '\r' && i + 1 < s.n && s.p[i + 1] == '\n') i++;
                    st = i + 1;
                }
            if (st < s.n) list_push(&r->c, out.l, mk_str(s.p + st, s.n - st));
            return out;
        }
        if (str_is(m, "startswith") || str_is(m, "endswith")) return mk_bool(str_affix(r, x, s, &v0, m.p[0] == 'e'));
        if (str_is(m, "upper")) return str_case(r, s, cp_upper, 0);
        if (str_is(m, "lower")) return str_case(r, s, cp_lower, 0);
        if (str_is(m, "title")) return str_case(r, s, cp_upper, 2);
        if (str_is(m, "capitalize")) return str_case(r, s, cp_upper, 1);
        if (str_is(m, "replace")) {
            kv cnt = arg_or(a, 2, "count", mk_int(-1));
            return str_replace(r, s, need_str(r, x, &v0, "replace").s, need_str(r, x, &v1, "replace").s, cnt.i);
        }
        if (str_is(m, "find") || str_is(m, "count")) {
            str nd = need_str(r, x, &v0, m.p).s;
            if (m.p[0] == 'f') {
                const char *h = memmem_s(s, 0, nd);
                return mk_int(h ? (int64_t)cp_count((str){ s.p, (size_t)(h - s.p) }) : -1);
            }
            if (!nd.n) return mk_int((int64_t)cp_count(s) + 1);
            int64_t k = 0;
            size_t pos = 0;
            const char *h;
            while ((h = memmem_s(s, pos, nd)) != NULL) { k++; pos = (size_t)(h - s.p) + nd.n; }
            return mk_int(k);
        }
        if (str_is(m, "join")) return join_items(r, x, &v0, s, NULL);
        if (str_is(m, "isdigit") || str_is(m, "isspace")) {
            if (!s.n) return mk_bool(0);
            for (size_t i = 0; i < s.n;) {
                size_t adv;
                uint32_t cp = cp_decode(s.p + i, s.n - i, &adv);
                if (m.p[2] == 'd' ? !(cp >= '0' && cp <= '9') : !py_isspace(cp)) return mk_bool(0);
                i += adv;
            }
            return mk_bool(1);
        }
    } else if (self->t == V_DICT) {
        kdict *d = self->d;
        if (str_is(m, "get")) {
            kv *v = dict_find(d, &v0);
            return v ? *v : (a->npos > 1 ? v1 : NONE);
        }
        kv out = mk_list(&r->c, d->n);
        for (size_t i = 0; i < d->n; i++) {
            if (str_is(m, "keys")) out.l->v[i] = d->keys[i];
            else if (str_is(m, "values")) out.l->v[i] = d->vals[i];
            else {
                kv t = mk_list(&r->c, 2);
                t.aux = 1;
                t.l->v[0] = d->keys[i];
                t.l->v[1] = d->vals[i];
                t.l->n = 2;
                out.l->v[i] = t;
            }
        }
        out.l->n = d->n;
        return out;
    } else if (self->t == V_LIST) {
        klist *l = self->l;
        if (str_is(m, "append")) { list_push(&r->c, l, v0); return NONE; }
        if (str_is(m, "count")) {
            int64_t k = 0;
            for (size_t i = 0; i < l->n; i++) k += kv_eq(&l->v[i], &v0);
            return mk_int(k);
        }
        for (size_t i = 0; i < l->n; i++) if (kv_eq(&l->v[i], &v0)) return mk_int((int64_t)i);
        fail_at(r, x, "value is not in list");
    } else if (self->t == V_LOOP) {
        if (!a->npos) fail_at(r, x, "no items for cycling given");
        return a->pos[self->loop->i % a->npos];
    }
    fail_at(r, x, "'%s' object has no method '%.*s'", type_name(self), (int)m.n, m.p);
}

/* ---- containment, tests */

static int kv_contains(rctx *r, const node *x, const kv *hay, const kv *item)
{
    switch (hay->t) {
    case V_UNDEF: return 0;
    case V_STR:
        if (item->t == V_UNDEF) undef_fail(r, x, item);
        if (item->t != V_STR) fail_at(r, x, "'in <string>' requires string as left operand, not %s", type_name(item));
        return memmem_s(hay->s, 0, item->s) != NULL;
    case V_LIST:
        for (size_t i = 0; i < hay->l->n; i++) if (kv_eq(&hay->l->v[i], item)) return 1;
        return 0;
    case V_DICT: return dict_find(hay->d, item) != NULL;
    default: fail_at(r, x, "argument of type '%s' is not iterable", type_name(hay));
    }
}

static int all_cased(str s, int upper)
{
    int any = 0;
    for (size_t i = 0; i < s.n;) {
        size_t adv;
        uint32_t cp = cp_decode(s.p + i, s.n - i, &adv);
        if (cp_cased(cp)) {
            any = 1;
            if ((upper ? cp_upper(cp) : cp_lower(cp)) != cp) return 0;
        }
        i += adv;
    }
    return any;
}

static int test_apply(rctx *r, const node *x, int id, const kv *v, const args *a)
{
    kv a0 = arg_or(a, 0, NULL, UNDEF);
    switch (id) {
    case X_DEFINED: return v->t != V_UNDEF;
    case X_UNDEFINED: return v->t == V_UNDEF;
    case X_NONE: return v->t == V_NONE;
    case X_BOOLEAN: return v->t == V_BOOL;
    case X_TRUE: return v->t == V_BOOL && v->i;
    case X_FALSE: return v->t == V_BOOL && !v->i;
    case X_INTEGER: return v->t == V_INT;
    case X_FLOAT: return v->t == V_FLOAT;
    case X_NUMBER: return is_num(v);
    case X_STRING: return v->t == V_STR;
    case X_MAPPING: return v->t == V_DICT;
    case X_ITERABLE: return v->t == V_STR || v->t == V_LIST || v->t == V_DICT || v->t == V_UNDEF;
    case X_SEQUENCE: return v->t == V_STR || v->t == V_LIST || v->t == V_DICT;
    case X_CALLABLE: return v->t == V_FUNC;
    case X_ESCAPED: return 0;
    case X_EQ: case X_EQUALTO: case X_SYM_EQ: return kv_eq(v, &a0);
    case X_NE: case X_SYM_NE: return !kv_eq(v, &a0);
    case X_LT: case X_LESSTHAN: case X_SYM_LT: return kv_cmp(r, x, v, &a0) < 0;
    case X_LE: case X_SYM_LE: return kv_cmp(r, x, v, &a0) <= 0;
    case X_GT: case X_GREATERTHAN: case X_SYM_GT: return kv_cmp(r, x, v, &a0) > 0;
    case X_GE: case X_SYM_GE: return kv_cmp(r, x, v, &a0) >= 0;
    case X_IN: return kv_contains(r, x, &a0, v);
    case X_SAMEAS:
        if (v->t != a0.t) return 0;
        if (v->t == V_NONE || v->t == V_UNDEF) return 1;
        if (v->t == V_BOOL || v->t == V_INT) return v->i == a0.i;
        if (v->t == V_LIST) return v->l == a0.l;
        if (v->t == V_DICT) return v->d == a0.d;
        return kv_eq(v, &a0);
    case X_ODD: case X_EVEN: case X_DIVISIBLEBY: {
        if (v->t == V_UNDEF) undef_fail(r, x, v);
        if (v->t != V_INT && v->t != V_BOOL) fail_at(r, x, "test expects an integer, got %s", type_name(v));
        if (id == X_ODD) return (v->i & 1) != 0;
        if (id == X_EVEN) return (v->i & 1) == 0;
        if ((a0.t != V_INT && a0.t != V_BOOL) || a0.i == 0) fail_at(r, x, "divisibleby expects a non-zero integer");
        return v->i % a0.i == 0;
    }
    case X_LOWER: case X_UPPER:
        return v->t == V_STR && all_cased(v->s, id == X_UPPER);
    case X_FILTER: case X_TEST:
        if (v->t != V_STR) return 0;
        return id == X_FILTER ? lookup_name(FILTERS, sizeof FILTERS / sizeof *FILTERS, v->s) >= 0
                              : lookup_name(TESTS, sizeof TESTS / sizeof *TESTS, v->s) >= 0;
    default: fail_at(r, x, "test not implemented");
    }
}

/* ---- filters */

static kv filter_apply(rctx *r, const node *x, int id, const kv *v, const args *a);

/* attribute path "a.b.0" as Jinja2's make_attrgetter resolves it */
static kv attr_path(rctx *r, const node *x, const kv *item, const kv *attr)
{
    if (attr->t == V_INT) return get_item(r, x, item, attr);
    str p = need_str(r, x, attr, "attribute").s;
    kv cur = *item;
    size_t st = 0;
    for (size_t i = 0; i <= p.n; i++) {
        if (i < p.n && p.p[i] != '.') continue;
        str part = { p.p + st, i - st };
        int num = part.n > 0;
        for (size_t k = 0; k < part.n; k++) if (!isdigit((unsigned char)part.p[k])) num = 0;
        kv key = num ? mk_int(strtoll(part.p, NULL, 10)) : mk_str(part.p, part.n);
        cur = get_item(r, x, &cur, &key);
        st = i + 1;
    }
    return cur;
}

static kv sort_key(rctx *r, const node *x, const kv *v, const kv *attr, int case_sensitive)
{
    kv k = attr && attr->t != V_NONE && attr->t != V_UNDEF ? attr_path(r, x, v, attr) : *v;
    if (!case_sensitive && k.t == V_STR) return str_case(r, k.s, cp_lower, 0);
    return k;
}

/* Stable insertion sort of items by keys (templates sort small lists). */
static void sort_items(rctx *r, const node *x, kv *items, kv *keys, size_t n, int reverse)
{
    for (size_t i = 1; i < n; i++)
        for (size_t j = i; j > 0; j--) {
            int c = kv_cmp(r, x, &keys[j - 1], &keys[j]);
            if (reverse ? c >= 0 : c <= 0) break;
            kv t = items[j]; items[j] = items[j - 1]; items[j - 1] = t;
            t = keys[j]; keys[j] = keys[j - 1]; keys[j - 1] = t;
        }
}

static kv join_items(rctx *r, const node *x, const kv *seq, str sep, const kv *attr)
{
    size_t n;
    kv *it = iter_items(r, x, seq, &n);
    sbuf b = {0};
    sb_put(&r->c, &b, "", 0);
    for (size_t i = 0; i < n; i++) {
        if (i) sb_put(&r->c, &b, sep.p, sep.n);
        kv e = attr && attr->t != V_NONE && attr->t != V_UNDEF ? attr_path(r, x, &it[i], attr) : it[i];
        to_str(r, &b, &e);
    }
    return mk_str(b.p, b.n);
}

static double py_round(double v, int64_t nd)
{
    char buf[400];
    if (nd > 300 || nd < -300 || !isfinite(v)) return v;
    if (nd >= 0) {
        snprintf(buf, sizeof buf, "%.*f", (int)nd, v);   /* correctly rounded, ties to even */
        return strtod(buf, NULL);
    }
    double p = pow(10.0, (double)-nd);
    return nearbyint(v / p) * p;
}

static int parse_int_str(str s, int64_t base, int64_t *out)
{
    char buf[80];
    size_t b = 0, e = s.n;
    while (b < e && is_ws(s.p[b])) b++;
    while (e > b && is_ws(s.p[e - 1])) e--;
    if (e - b == 0 || e - b >= sizeof buf) return 0;
    size_t k = 0;
    for (size_t i = b; i < e; i++) if (s.p[i] != '_') buf[k++] = s.p[i];
    buf[k] = 0;
    char *end;
    long long v = strtoll(buf, &end, (int)base);
    if (*end) return 0;
    *out = v;
    return 1;
}

static int parse_float_str(str s, double *out)
{
    char buf[80];
    size_t b = 0, e = s.n;
    while (b < e && is_ws(s.p[b])) b++;
    while (e > b && is_ws(s.p[e - 1])) e--;
    if (e - b == 0 || e - b >= sizeof buf) return 0;
    memcpy(buf, s.p + b, e - b);
    buf[e - b] = 0;
    char *end;
    double v = strtod(buf, &end);
    if (*end) return 0;
    *out = v;
    return 1;
}

static kv html_escape(rctx *r, str s)
{
    sbuf b = {0};
    sb_put(&r->c, &b, "", 0);
    for (size_t i = 0; i < s.n; i++) {
        switch (s.p[i]) {
        case '&': sb_puts(&r->c, &b, "&amp;"); break;
        case '<': sb_puts(&r->c, &b, "&lt;"); break;
        case '>': sb_puts(&r->c, &b, "&gt;"); break;
        case '"': sb_puts(&r->c, &b, "&#34;"); break;
        case '\'': sb_puts(&r->c, &b, "&#39;"); break;
        default: sb_putc(&r->c, &b, s.p[i]);
        }
    }
    return mk_str(b.p, b.n);
}

static args shift_args(const args *a, int by)
{
    args s = *a;
    s.pos += by;
    s.npos -= by;
    return s;
}

/* select/reject/selectattr/rejectattr */
static kv select_items(rctx *r, const node *x, const kv *v, const args *a, int want, int by_attr)
{
    size_t n;
    kv *it = iter_items(r, x, v, &n);
    kv out = mk_list(&r->c, n);
    int first = by_attr ? 1 : 0;
    kv attr = by_attr ? arg_or(a, 0, NULL, UNDEF) : UNDEF;
    int tid = -1;
    args targs = shift_args(a, a->npos > first ? first + 1 : a->npos);
    if (a->npos > first) {
        kv tn = a->pos[first];
        tid = lookup_name(TESTS, sizeof TESTS / sizeof *TESTS, need_str(r, x, &tn, "test name").s);
        if (tid < 0) fail_at(r, x, "unknown test '%.*s'", (int)tn.s.n, tn.s.p);
    }
    for (size_t i = 0; i < n; i++) {
        kv e = by_attr ? attr_path(r, x, &it[i], &attr) : it[i];
        int ok = tid < 0 ? truthy(&e) : test_apply(r, x, tid, &e, &targs);
        if (ok == want) list_push(&r->c, out.l, it[i]);
    }
    return out;
}

static kv filter_apply(rctx *r, const node *x, int id, const kv *v, const args *a)
{
    ctx *c = &r->c;
    kv a0 = arg_or(a, 0, NULL, UNDEF);
    switch (id) {
    case F_D: case F_DEFAULT: {
        kv def = arg_or(a, 0, "default_value", mk_str("", 0));
        kv boolean = arg_or(a, 1, "boolean", mk_bool(0));
        if (v->t == V_UNDEF || (truthy(&boolean) && !truthy(v))) return def;
        return *v;
    }
    case F_LENGTH: case F_COUNT:
        switch (v->t) {
        case V_UNDEF: return mk_int(0);
        case V_STR: return mk_int((int64_t)cp_count(v->s));
        case V_LIST: return mk_int((int64_t)v->l->n);
        case V_DICT: return mk_int((int64_t)v->d->n);
        default: fail_at(r, x, "object of type '%s' has no len()", type_name(v));
        }
    case F_SAFE: return *v;
    case F_STRING: { str s = kv_tostr(r, v); return mk_str(s.p, s.n); }
    case F_E: case F_ESCAPE: return html_escape(r, kv_tostr(r, v));
    case F_TRIM: {
        if (a0.t != V_UNDEF && a0.t != V_NONE) need_str(r, x, &a0, "trim");
        return str_strip(r, kv_tostr(r, v), &a0, 3);
    }
    case F_UPPER: return str_case(r, kv_tostr(r, v), cp_upper, 0);
    case F_LOWER: return str_case(r, kv_tostr(r, v), cp_lower, 0);
    case F_CAPITALIZE: return str_case(r, kv_tostr(r, v), cp_upper, 1);
    case F_TITLE: return str_case(r, kv_tostr(r, v), cp_upper, 3);
    case F_REPLACE: {
        kv o = arg_or(a, 0, "old", UNDEF), nw = arg_or(a, 1, "new", UNDEF), cnt = arg_or(a, 2, "count", NONE);
        return str_replace(r, kv_tostr(r, v), kv_tostr(r, &o), kv_tostr(r, &nw), cnt.t == V_INT ? cnt.i : -1);
    }
    case F_WORDCOUNT: {
        int64_t k = 0;
        str s = kv_tostr(r, v);
        int in = 0;
        for (size_t i = 0; i < s.n; i++) {
            int w = isalnum((unsigned char)s.p[i]) || s.p[i] == '_' || (unsigned char)s.p[i] >= 0x80;
            if (w && !in) k++;
            in = w;
        }
        return mk_int(k);
    }
    case F_INDENT: {
        kv wd = arg_or(a, 0, "width", mk_int(4)), first = arg_or(a, 1, "first", mk_bool(0)), blank = arg_or(a, 2, "blank", mk_bool(0));
        str pad;
        if (wd.t == V_STR) pad = wd.s;
        else {
            int64_t w = wd.t == V_INT ? wd.i : 4;
            char *p = ar_alloc(c, (size_t)(w > 0 ? w : 0) + 1);
            memset(p, ' ', (size_t)(w > 0 ? w : 0));
            pad = (str){ p, (size_t)(w > 0 ? w : 0) };
        }
        str s = kv_tostr(r, v);
        sbuf b = {0};
        sb_put(c, &b, "", 0);
        size_t st = 0;
        int line = 0;
        for (size_t i = 0; i <= s.n; i++) {
            if (i < s.n && s.p[i] != '\n') continue;
            str ln = { s.p + st, i - st };
            int has_nl = i < s.n;
            int blank_line = 1;
            for (size_t k = 0; k < ln.n; k++) if (!is_ws(ln.p[k])) { blank_line = 0; break; }
            if ((line > 0 || truthy(&first)) && (truthy(&blank) || !blank_line)) sb_put(c, &b, pad.p, pad.n);
            sb_put(c, &b, ln.p, ln.n);
            if (has_nl) sb_putc(c, &b, '\n');
            line++;
            st = i + 1;
        }
        return mk_str(b.p, b.n);
    }
    case F_ABS:
        if (v->t == V_FLOAT) return mk_float(fabs(v->f));
        if (v->t == V_INT || v->t == V_BOOL) return mk_int(v->i < 0 ? -v->i : v->i);
        if (v->t == V_UNDEF) undef_fail(r, x, v);
        fail_at(r, x, "bad operand type for abs(): '%s'", type_name(v));
    case F_INT: {
        kv def = arg_or(a, 0, "default", mk_int(0)), base = arg_or(a, 1, "base", mk_int(10));
        if (v->t == V_INT || v->t == V_BOOL) return mk_int(v->i);
        if (v->t == V_FLOAT) return isfinite(v->f) ? mk_int((int64_t)v->f) : def;
        if (v->t == V_STR) {
            int64_t i;
            double d;
            if (parse_int_str(v->s, base.t == V_INT ? base.i : 10, &i)) return mk_int(i);
            if (parse_float_str(v->s, &d) && isfinite(d)) return mk_int((int64_t)d);
        }
        return def;
    }
    case F_FLOAT: {
        kv def = arg_or(a, 0, "default", mk_float(0.0));
        if (is_num(v)) return mk_float(num_f(v));
        double d;
        if (v->t == V_STR && parse_float_str(v->s, &d)) return mk_float(d);
        return def;
    }
    case F_ROUND: {
        kv prec = arg_or(a, 0, "precision", mk_int(0)), meth = arg_or(a, 1, "method", mk_str("common", 6));
        if (v->t == V_UNDEF) undef_fail(r, x, v);
        if (!is_num(v)) fail_at(r, x, "round expects a number, got %s", type_name(v));
        int64_t nd = prec.t == V_INT ? prec.i : 0;
        str m = meth.t == V_STR ? meth.s : (str){ "common", 6 };
        if (str_is(m, "common")) return v->t == V_FLOAT ? mk_float(py_round(v->f, nd)) : mk_int(v->i);
        if (!str_is(m, "floor") && !str_is(m, "ceil")) fail_at(r, x, "method must be common, ceil or floor");
        double p = pow(10.0, (double)nd), f = num_f(v) * p;
        return mk_float((m.p[0] == 'f' ? floor(f) : ceil(f)) / p);
    }
    case F_FIRST: case F_LAST: {
        size_t n;
        kv *it = iter_items(r, x, v, &n);
        if (!n) return mk_undef(U_ATTR, v->t, "first", 5);
        return id == F_FIRST ? it[0] : it[n - 1];
    }
    case F_LIST: return list_of(r, x, v);
    case F_ITEMS: {
        if (v->t == V_UNDEF) return mk_list(c, 0);
        if (v->t != V_DICT) fail_at(r, x, "can only get item pairs from a mapping");
        kfn fn = { .kind = FN_METHOD, .self = *v, .name = { "items", 5 } };
        args none = {0};
        return call_method(r, x, &fn, &none);
    }
    case F_DICTSORT: {
        if (v->t != V_DICT) fail_at(r, x, "dictsort expects a mapping, got %s", type_name(v));
        kv cs = arg_or(a, 0, "case_sensitive", mk_bool(0)), by = arg_or(a, 1, "by", mk_str("key", 3));
        kv rev = arg_or(a, 2, "reverse", mk_bool(0));
        size_t n = v->d->n;
        kv *items = ar_alloc(c, (n + 1) * sizeof(kv)), *keys = ar_alloc(c, (n + 1) * sizeof(kv));
        int by_value = by.t == V_STR && str_is(by.s, "value");
        for (size_t i = 0; i < n; i++) {
            kv t = mk_list(c, 2);
            t.aux = 1;
            t.l->v[0] = v->d->keys[i];
            t.l->v[1] = v->d->vals[i];
            t.l->n = 2;
            items[i] = t;
            keys[i] = sort_key(r, x, by_value ? &v->d->vals[i] : &v->d->keys[i], NULL, truthy(&cs));
        }
        sort_items(r, x, items, keys, n, truthy(&rev));
        kv out = mk_list(c, n);
        memcpy(out.l->v, items, n * sizeof(kv));
        out.l->n = n;
        return out;
    }
    case F_SORT: case F_UNIQUE: case F_MIN: case F_MAX: {
        int sort = id == F_SORT;
        kv rev = sort ? arg_or(a, 0, "reverse", mk_bool(0)) : mk_bool(0);
        kv cs = arg_or(a, sort ? 1 : 0, "case_sensitive", mk_bool(0));
        kv attr = arg_or(a, sort ? 2 : 1, "attribute", NONE);
        size_t n;
        kv *it = iter_items(r, x, v, &n);
        kv *items = ar_alloc(c, (n + 1) * sizeof(kv)), *keys = ar_alloc(c, (n + 1) * sizeof(kv));
        size_t m = 0;
        for (size_t i = 0; i < n; i++) {
            kv k = sort_key(r, x, &it[i], &attr, truthy(&cs));
            if (id == F_UNIQUE) {
                int seen = 0;
                for (size_t j = 0; j < m && !seen; j++) seen = kv_eq(&keys[j], &k);
                if (seen) continue;
            }
            items[m] = it[i];
            keys[m++] = k;
        }
        if (id == F_MIN || id == F_MAX) {
            if (!m) return mk_undef(U_ATTR, v->t, id == F_MIN ? "min" : "max", 3);
            size_t best = 0;
            for (size_t i = 1; i < m; i++) {
                int k = kv_cmp(r, x, &keys[i], &keys[best]);
                if (id == F_MIN ? k < 0 : k > 0) best = i;
            }
            return items[best];
        }
        if (sort) sort_items(r, x, items, keys, m, truthy(&rev));
        kv out = mk_list(c, m);
        if (m) memcpy(out.l->v, items, m * sizeof(kv));
        out.l->n = m;
        return out;
    }
    case F_REVERSE: {
        if (v->t == V_STR) {
            size_t n;
            size_t *off = cp_offsets(c, v->s, &n);
            char *p = ar_alloc(c, v->s.n + 1);
            size_t k = 0;
            for (size_t i = n; i-- > 0;) { memcpy(p + k, v->s.p + off[i], off[i + 1] - off[i]); k += off[i + 1] - off[i]; }
            p[k] = 0;
            return mk_str(p, k);
        }
        size_t n;
        kv *it = iter_items(r, x, v, &n);
        kv out = mk_list(c, n);
        for (size_t i = 0; i < n; i++) out.l->v[i] = it[n - 1 - i];
        out.l->n = n;
        return out;
    }
    case F_JOIN: {
        kv sep = arg_or(a, 0, "d", mk_str("", 0)), attr = arg_or(a, 1, "attribute", NONE);
        return join_items(r, x, v, kv_tostr(r, &sep), &attr);
    }
    case F_SUM: {
        kv attr = arg_or(a, 0, "attribute", NONE), acc = arg_or(a, 1, "start", mk_int(0));
        size_t n;
        kv *it = iter_items(r, x, v, &n);
        for (size_t i = 0; i < n; i++) {
            kv e = attr.t != V_NONE ? attr_path(r, x, &it[i], &attr) : it[i];
            if (!is_num(&e) || !is_num(&acc)) fail_at(r, x, "sum expects numbers");
            acc = acc.t == V_FLOAT || e.t == V_FLOAT ? mk_float(num_f(&acc) + num_f(&e)) : mk_int(acc.i + e.i);
        }
        return acc;
    }
    case F_ATTR: return get_attr(r, x, v, kv_tostr(r, &a0));
    case F_MAP: {
        size_t n;
        kv *it = iter_items(r, x, v, &n);
        kv out = mk_list(c, n);
        kv attr;
        if (arg_get(a, -1, "attribute", &attr)) {
            kv def;
            int has_def = arg_get(a, -1, "default", &def);
            for (size_t i = 0; i < n; i++) {
                kv e = attr_path(r, x, &it[i], &attr);
                out.l->v[i] = e.t == V_UNDEF && has_def ? def : e;
            }
        } else {
            str fname = need_str(r, x, &a0, "map").s;
            int fid = lookup_name(FILTERS, sizeof FILTERS / sizeof *FILTERS, fname);
            if (fid < 0) fail_at(r, x, "unknown filter '%.*s'", (int)fname.n, fname.p);
            args rest = shift_args(a, 1);
            for (size_t i = 0; i < n; i++) out.l->v[i] = filter_apply(r, x, fid, &it[i], &rest);
        }
        out.l->n = n;
        return out;
    }
    case F_SELECT: return select_items(r, x, v, a, 1, 0);
    case F_REJECT: return select_items(r, x, v, a, 0, 0);
    case F_SELECTATTR: return select_items(r, x, v, a, 1, 1);
    case F_REJECTATTR: return select_items(r, x, v, a, 0, 1);
    case F_TOJSON: {
        /* Hugging Face's tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False) */
        kv ind = arg_or(a, 1, "indent", NONE), seps = arg_or(a, 2, "separators", NONE), sk = arg_or(a, 3, "sort_keys", mk_bool(0));
        kv ea = arg_or(a, 0, "ensure_ascii", mk_bool(0));
        if (truthy(&ea)) fail_at(r, x, "tojson: ensure_ascii=True is not supported");
        jopts o = { .item_sep = { ", ", 2 }, .key_sep = { ": ", 2 }, .sort_keys = truthy(&sk) };
        if (ind.t == V_INT) {
            char *p = ar_alloc(c, (size_t)(ind.i > 0 ? ind.i : 0) + 1);
            memset(p, ' ', (size_t)(ind.i > 0 ? ind.i : 0));
            o.indent = (str){ p, (size_t)(ind.i > 0 ? ind.i : 0) };
            o.has_indent = 1;
            o.item_sep = (str){ ",", 1 };
        } else if (ind.t == V_STR) {
            o.indent = ind.s;
            o.has_indent = 1;
            o.item_sep = (str){ ",", 1 };
        }
        if (seps.t == V_LIST && seps.l->n == 2) {
            o.item_sep = need_str(r, x, &seps.l->v[0], "separators").s;
            o.key_sep = need_str(r, x, &seps.l->v[1], "separators").s;
        }
        sbuf b = {0};
        sb_put(c, &b, "", 0);
        json_dump(r, x, &b, v, &o, 0);
        return mk_str(b.p, b.n);
    }
    default: fail_at(r, x, "filter not implemented");
    }
}

/* ---- globals, macros */

static kv call_global(rctx *r, const node *x, const kfn *fn, const args *a)
{
    ctx *c = &r->c;
    switch (fn->id) {
    case G_RANGE: {
        int64_t v[3] = { 0, 0, 1 };
        if (a->npos < 1 || a->npos > 3) fail_at(r, x, "range expected 1 to 3 arguments, got %d", a->npos);
        for (int i = 0; i < a->npos; i++) {
            if (a->pos[i].t != V_INT && a->pos[i].t != V_BOOL)
                fail_at(r, x, "'%s' object cannot be interpreted as an integer", type_name(&a->pos[i]));
        }
        if (a->npos == 1) v[1] = a->pos[0].i;
        else { v[0] = a->pos[0].i; v[1] = a->pos[1].i; if (a->npos == 3) v[2] = a->pos[2].i; }
        if (v[2] == 0) fail_at(r, x, "range() arg 3 must not be zero");
        int64_t n = v[2] > 0 ? (v[1] > v[0] ? (v[1] - v[0] + v[2] - 1) / v[2] : 0)
                             : (v[0] > v[1] ? (v[0] - v[1] - v[2] - 1) / -v[2] : 0);
        if (n > 100000) fail_at(r, x, "range too big (%lld items)", (long long)n);
        kv out = mk_list(c, (size_t)n);
        for (int64_t i = 0; i < n; i++) out.l->v[i] = mk_int(v[0] + i * v[2]);
        out.l->n = (size_t)n;
        return out;
    }
    case G_NAMESPACE: case G_DICT: {
        kv d = mk_dict(c, (size_t)a->nkw);
        d.aux = fn->id == G_NAMESPACE;
        for (int i = 0; i < a->npos; i++) {
            if (a->pos[i].t != V_DICT) fail_at(r, x, "%s() positional arguments must be mappings", fn->id == G_DICT ? "dict" : "namespace");
            for (size_t k = 0; k < a->pos[i].d->n; k++) dict_set(c, d.d, a->pos[i].d->keys[k], a->pos[i].d->vals[k]);
        }
        for (int i = 0; i < a->nkw; i++) dict_set(c, d.d, mk_str(a->kwn[i].p, a->kwn[i].n), a->kw[i]);
        return d;
    }
    case G_RAISE: {
        kv m = arg_or(a, 0, NULL, mk_str("", 0));
        str s = kv_tostr(r, &m);
        fail_at(r, x, "raise_exception: %.*s", (int)s.n, s.p);
    }
    case G_STRFTIME: {
        kv f = arg_or(a, 0, NULL, UNDEF);
        str fs = need_str(r, x, &f, "strftime_now").s;
        char *fmt = ar_strdup(c, fs.p, fs.n);
        time_t t = r->has_now ? (time_t)r->now : time(NULL);
        struct tm tm;
        if (r->has_now) gmtime_r(&t, &tm);
        else localtime_r(&t, &tm);
        char buf[256];
        size_t n = strftime(buf, sizeof buf, fmt, &tm);
        return mk_str(ar_strdup(c, buf, n), n);
    }
    default: fail_at(r, x, "unknown function");
    }
}

/* Calls a macro (or a call block's caller) and returns its output. */
static kv call_macro(rctx *r, const node *x, const kfn *fn, const args *a, const kv *caller)
{
    const node *def = fn->def;
    if (++r->call_depth > MAX_CALL_DEPTH) fail_at(r, x, "macro calls nested too deeply");
    frame *f = new_frame(&r->c, fn->closure);
    if (a->npos > def->nnames)
        fail_at(r, x, "macro '%.*s' takes not more than %d argument(s)", (int)fn->name.n, fn->name.p, def->nnames);
    for (int i = 0; i < a->nkw; i++) {
        int known = 0;
        for (int k = 0; k < def->nnames; k++) known |= str_eq(def->names[k], a->kwn[i].p, a->kwn[i].n);
        if (!known) fail_at(r, x, "macro '%.*s' takes no keyword argument '%.*s'", (int)fn->name.n, fn->name.p,
                            (int)a->kwn[i].n, a->kwn[i].p);
    }
    for (int k = 0; k < def->nnames; k++) {
        kv v;
        int found = k < a->npos;
        if (found) v = a->pos[k];
        for (int i = 0; i < a->nkw && !found; i++)
            if (str_eq(def->names[k], a->kwn[i].p, a->kwn[i].n)) { v = a->kw[i]; found = 1; }
        if (!found) {
            const node *dn = k < def->args2.n ? def->args2.v[k] : NULL;
            v = dn ? eval(r, dn, f) : mk_undef(U_NAME, 0, def->names[k].p, def->names[k].n);
        }
        frame_set(&r->c, f, def->names[k], v);
    }
    if (caller) frame_set(&r->c, f, (str){ "caller", 6 }, *caller);
    sbuf out = {0};
    sb_put(&r->c, &out, "", 0);
    exec_body(r, &def->args, f, &out);
    r->call_depth--;
    return mk_str(out.p, out.n);
}

static kv call_value(rctx *r, const node *x, const kv *callee, const args *a, const kv *caller)
{
    if (callee->t == V_UNDEF) undef_fail(r, x, callee);
    if (callee->t != V_FUNC) fail_at(r, x, "'%s' object is not callable", type_name(callee));
    const kfn *fn = callee->fn;
    switch (fn->kind) {
    case FN_GLOBAL: return call_global(r, x, fn, a);
    case FN_METHOD: return call_method(r, x, fn, a);
    default: return call_macro(r, x, fn, a, caller);
    }
}

/* ---- expressions */

static kv arith(rctx *r, const node *x, int op, const kv *a, const kv *b)
{
    ctx *c = &r->c;
    static const char *const opn[] = { "+", "-", "*", "/", "//", "%", "**", "~" };
    if (a->t == V_UNDEF) undef_fail(r, x, a);
    if (b->t == V_UNDEF) undef_fail(r, x, b);
    if (is_num(a) && is_num(b)) {
        int ints = a->t != V_FLOAT && b->t != V_FLOAT;
        int64_t p = a->i, q = b->i, res;
        double f = num_f(a), g = num_f(b);
        switch (op) {
        case B_ADD:
            if (ints) { if (__builtin_add_overflow(p, q, &res)) fail_at(r, x, "integer overflow"); return mk_int(res); }
            return mk_float(f + g);
        case B_SUB:
            if (ints) { if (__builtin_sub_overflow(p, q, &res)) fail_at(r, x, "integer overflow"); return mk_int(res); }
            return mk_float(f - g);
        case B_MUL:
            if (ints) { if (__builtin_mul_overflow(p, q, &res)) fail_at(r, x, "integer overflow"); return mk_int(res); }
            return mk_float(f * g);
        case B_DIV:
            if (g == 0) fail_at(r, x, "division by zero");
            return mk_float(f / g);
        case B_FDIV: case B_MOD:
            if (ints) {
                if (q == 0) fail_at(r, x, "integer division or modulo by zero");
                int64_t d = p / q, m = p % q;
                if (m != 0 && ((m < 0) != (q < 0))) { d--; m += q; }
                return mk_int(op == B_FDIV ? d : m);
            }
            if (g == 0) fail_at(r, x, "float division by zero");
            if (op == B_FDIV) return mk_float(floor(f / g));
            {
                double m = fmod(f, g);
                if (m != 0 && ((m < 0) != (g < 0))) m += g;
                return mk_float(m);
            }
        case B_POW:
            if (ints && q >= 0) {
                int64_t acc = 1, base = p;
                for (int64_t e = q; e > 0; e >>= 1) {
                    if ((e & 1) && __builtin_mul_overflow(acc, base, &acc)) fail_at(r, x, "integer overflow");
                    if (e > 1 && __builtin_mul_overflow(base, base, &base)) fail_at(r, x, "integer overflow");
                }
                return mk_int(acc);
            }
            return mk_float(pow(f, g));
        default: break;
        }
    }
    if (op == B_ADD && a->t == V_STR && b->t == V_STR) {
        char *p = ar_alloc(c, a->s.n + b->s.n + 1);
        memcpy(p, a->s.p, a->s.n);
        memcpy(p + a->s.n, b->s.p, b->s.n);
        p[a->s.n + b->s.n] = 0;
        return mk_str(p, a->s.n + b->s.n);
    }
    if (op == B_ADD && a->t == V_LIST && b->t == V_LIST && a->aux == b->aux) {
        kv out = mk_list(c, a->l->n + b->l->n);
        out.aux = a->aux;
        for (size_t i = 0; i < a->l->n; i++) out.l->v[out.l->n++] = a->l->v[i];
        for (size_t i = 0; i < b->l->n; i++) out.l->v[out.l->n++] = b->l->v[i];
        return out;
    }
    if (op == B_MUL && (a->t == V_STR || a->t == V_LIST || b->t == V_STR || b->t == V_LIST)) {
        const kv *seq = (a->t == V_STR || a->t == V_LIST) ? a : b, *cnt = seq == a ? b : a;
        if (cnt->t == V_INT || cnt->t == V_BOOL) {
            int64_t k = cnt->i > 0 ? cnt->i : 0;
            if (seq->t == V_STR) {
                if (k && seq->s.n > (1u << 26) / (uint64_t)k) fail_at(r, x, "string repetition too large");
                sbuf sb = {0};
                sb_put(c, &sb, "", 0);
                for (int64_t i = 0; i < k; i++) sb_put(c, &sb, seq->s.p, seq->s.n);
                return mk_str(sb.p, sb.n);
            }
            if (k && seq->l->n > (1u << 20) / (uint64_t)k) fail_at(r, x, "list repetition too large");
            kv out = mk_list(c, seq->l->n * (size_t)k);
            out.aux = seq->aux;
            for (int64_t i = 0; i < k; i++)
                for (size_t j = 0; j < seq->l->n; j++) out.l->v[out.l->n++] = seq->l->v[j];
            return out;
        }
    }
    fail_at(r, x, "unsupported operand type(s) for %s: '%s' and '%s'", opn[op], type_name(a), type_name(b));
}

/* Applies a filter chain parsed on a placeholder (set/filter blocks) to `in`. */
static kv apply_chain(rctx *r, const node *x, frame *f, kv in)
{
    if (!x || x->kind != E_FILTER) return in;
    kv v = apply_chain(r, x->a, f, in);
    args a;
    eval_args(r, x, f, &a);
    return filter_apply(r, x, x->id, &v, &a);
}

static kv eval(rctx *r, const node *x, frame *f)
{
    ctx *c = &r->c;
    switch (x->kind) {
    case E_LIT: return x->lit;
    case E_NAME: return lookup(r, f, x->name);
    case E_LIST: case E_TUPLE: {
        kv out = mk_list(c, (size_t)x->args.n);
        out.aux = x->kind == E_TUPLE;
        for (int i = 0; i < x->args.n; i++) out.l->v[i] = eval(r, x->args.v[i], f);
        out.l->n = (size_t)x->args.n;
        return out;
    }
    case E_DICT: {
        kv d = mk_dict(c, (size_t)x->args.n);
        for (int i = 0; i < x->args.n; i++) dict_set(c, d.d, eval(r, x->args.v[i], f), eval(r, x->args2.v[i], f));
        return d;
    }
    case E_ATTR: { kv o = eval(r, x->a, f); return get_attr(r, x, &o, x->name); }
    case E_ITEM: { kv o = eval(r, x->a, f), k = eval(r, x->b, f); return get_item(r, x, &o, &k); }
    case E_SLICE: {
        kv o = eval(r, x->a, f);
        kv s = x->b ? eval(r, x->b, f) : NONE, e = x->c ? eval(r, x->c, f) : NONE;
        kv st = x->args.v[0] ? eval(r, x->args.v[0], f) : NONE;
        return do_slice(r, x, &o, &s, &e, &st);
    }
    case E_CALL: {
        kv callee = eval(r, x->a, f);
        args a;
        eval_args(r, x, f, &a);
        return call_value(r, x, &callee, &a, NULL);
    }
    case E_FILTER: {
        kv v = eval(r, x->a, f);
        args a;
        eval_args(r, x, f, &a);
        return filter_apply(r, x, x->id, &v, &a);
    }
    case E_TEST: {
        kv v = eval(r, x->a, f);
        args a;
        eval_args(r, x, f, &a);
        return mk_bool(test_apply(r, x, x->id, &v, &a) != x->neg);
    }
    case E_NOT: { kv v = eval(r, x->a, f); return mk_bool(!truthy(&v)); }
    case E_NEG: case E_POS: {
        kv v = eval(r, x->a, f);
        if (v.t == V_UNDEF) undef_fail(r, x, &v);
        if (v.t == V_FLOAT) return mk_float(x->kind == E_NEG ? -v.f : v.f);
        if (v.t == V_INT || v.t == V_BOOL) return mk_int(x->kind == E_NEG ? -v.i : v.i);
        fail_at(r, x, "bad operand type for unary %c: '%s'", x->kind == E_NEG ? '-' : '+', type_name(&v));
    }
    case E_BIN: {
        kv a = eval(r, x->a, f), b = eval(r, x->b, f);
        if (x->op == B_CAT) {
            sbuf sb = {0};
            sb_put(c, &sb, "", 0);
            to_str(r, &sb, &a);
            to_str(r, &sb, &b);
            return mk_str(sb.p, sb.n);
        }
        return arith(r, x, x->op, &a, &b);
    }
    case E_AND: { kv a = eval(r, x->a, f); return truthy(&a) ? eval(r, x->b, f) : a; }
    case E_OR: { kv a = eval(r, x->a, f); return truthy(&a) ? a : eval(r, x->b, f); }
    case E_COND: {
        kv cnd = eval(r, x->a, f);
        if (truthy(&cnd)) return eval(r, x->b, f);
        return x->c ? eval(r, x->c, f) : mk_undef(U_NAME, 0, "<conditional without else>", 26);
    }
    case E_CMP: {
        kv a = eval(r, x->a, f), b = eval(r, x->b, f);
        switch (x->op) {
        case C_EQ: return mk_bool(kv_eq(&a, &b));
        case C_NE: return mk_bool(!kv_eq(&a, &b));
        case C_LT: return mk_bool(kv_cmp(r, x, &a, &b) < 0);
        case C_LE: return mk_bool(kv_cmp(r, x, &a, &b) <= 0);
        case C_GT: return mk_bool(kv_cmp(r, x, &a, &b) > 0);
        case C_GE: return mk_bool(kv_cmp(r, x, &a, &b) >= 0);
        case C_IN: return mk_bool(kv_contains(r, x, &b, &a));
        default: return mk_bool(!kv_contains(r, x, &b, &a));
        }
    }
    default: fail_at(r, x, "not an expression");
    }
}

/* ---- statements */

static void assign_targets(rctx *r, const node *x, frame *f, const kv *v)
{
    if (x->nnames == 1) { frame_set(&r->c, f, x->names[0], *v); return; }
    size_t n;
    kv *it = iter_items(r, x, v, &n);
    if (n != (size_t)x->nnames)
        fail_at(r, x, "%s values to unpack (expected %d, got %zu)", n > (size_t)x->nnames ? "too many" : "not enough",
                x->nnames, n);
    for (int i = 0; i < x->nnames; i++) frame_set(&r->c, f, x->names[i], it[i]);
}

static int exec_for(rctx *r, const node *x, frame *f, sbuf *out)
{
    ctx *c = &r->c;
    kv seq = eval(r, x->a, f);
    size_t n;
    kv *it = iter_items(r, x->a, &seq, &n);
    if (x->b) {   /* {% for a in b if cond %}: filter before counting */
        kv *keep = ar_alloc(c, (n + 1) * sizeof(kv));
        size_t m = 0;
        for (size_t i = 0; i < n; i++) {
            frame *tf = new_frame(c, f);
            assign_targets(r, x, tf, &it[i]);
            kv cnd = eval(r, x->b, tf);
            if (truthy(&cnd)) keep[m++] = it[i];
        }
        it = keep;
        n = m;
    }
    if (n == 0) return exec_body(r, &x->args2, f, out);
    kloop *L = ar_alloc(c, sizeof(kloop));
    L->items = it;
    L->n = (int64_t)n;
    kv lv = { .t = V_LOOP };
    lv.loop = L;
    for (size_t i = 0; i < n; i++) {
        L->i = (int64_t)i;
        frame *bf = new_frame(c, f);   /* a fresh scope per iteration, as in Jinja2 */
        assign_targets(r, x, bf, &it[i]);
        frame_set(c, bf, (str){ "loop", 4 }, lv);
        int rc = exec_body(r, &x->args, bf, out);
        if (rc == 1) break;
    }
    return 0;
}

static int exec_body(rctx *r, const nlist *body, frame *f, sbuf *out)
{
    ctx *c = &r->c;
    for (int i = 0; i < body->n; i++) {
        const node *x = body->v[i];
        switch (x->kind) {
        case N_DATA: sb_put(c, out, x->lit.s.p, x->lit.s.n); break;
        case N_OUTPUT: { kv v = eval(r, x->a, f); to_str(r, out, &v); break; }
        case N_IF: {
            kv cnd = eval(r, x->a, f);
            int rc = exec_body(r, truthy(&cnd) ? &x->args : &x->args2, f, out);
            if (rc) return rc;
            break;
        }
        case N_FOR: exec_for(r, x, f, out); break;
        case N_SET: { kv v = eval(r, x->a, f); assign_targets(r, x, f, &v); break; }
        case N_SETATTR: {
            kv ns = lookup(r, f, x->name);
            if (ns.t == V_UNDEF) undef_fail(r, x, &ns);
            if (ns.t != V_DICT || !ns.aux) fail_at(r, x, "cannot assign attribute on non-namespace object");
            kv v = eval(r, x->a, f);
            dict_set(c, ns.d, mk_str(x->name2.p, x->name2.n), v);
            break;
        }
        case N_SETBLOCK: {
            sbuf b = {0};
            sb_put(c, &b, "", 0);
            exec_body(r, &x->args, new_frame(c, f), &b);
            frame_set(c, f, x->name, apply_chain(r, x->b, f, mk_str(b.p, b.n)));
            break;
        }
        case N_MACRO: {
            kv v = { .t = V_FUNC };
            v.fn = ar_zalloc(c, sizeof(kfn));
            v.fn->kind = FN_MACRO;
            v.fn->def = x;
            v.fn->closure = f;
            v.fn->name = x->name;
            frame_set(c, f, x->name, v);
            break;
        }
        case N_CALLBLOCK: {
            kv cal = { .t = V_FUNC };
            cal.fn = ar_zalloc(c, sizeof(kfn));
            cal.fn->kind = FN_CALLER;
            cal.fn->def = x;
            cal.fn->closure = f;
            cal.fn->name = (str){ "caller", 6 };
            kv callee = eval(r, x->a->a, f);
            args a;
            eval_args(r, x->a, f, &a);
            if (callee.t != V_FUNC || callee.fn->kind != FN_MACRO) fail_at(r, x, "call block needs a macro");
            kv v = call_value(r, x->a, &callee, &a, &cal);
            to_str(r, out, &v);
            break;
        }
        case N_SCOPE:
            if (x->b) {
                sbuf b = {0};
                sb_put(c, &b, "", 0);
                exec_body(r, &x->args, f, &b);
                kv v = apply_chain(r, x->b, f, mk_str(b.p, b.n));
                to_str(r, out, &v);
            } else {
                int rc = exec_body(r, &x->args, f, out);
                if (rc) return rc;
            }
            break;
        case N_BREAK: return 1;
        case N_CONTINUE: return 2;
        default: fail_at(r, x, "not a statement");
        }
    }
    return 0;
}

/* ------------------------------------------------------------------ API */

struct kct {
    ctx c;          /* owns the AST and the copy of the source */
    nlist body;
};

/* Runs under kct_compile's setjmp; failures longjmp back there. */
static void compile_into(kct *t, const char *src, size_t len)
{
    /* Jinja2 drops a single trailing newline (keep_trailing_newline=False). */
    if (len && src[len - 1] == '\n') len -= len > 1 && src[len - 2] == '\r' ? 2 : 1;
    char *copy = ar_strdup(&t->c, src, len);
    lexer L = { .c = &t->c, .src = copy, .len = len, .line = 1 };
    lex(&L);
    parser P = { .c = &t->c, .t = L.toks, .n = L.n };
    parse_body(&P, &t->body, NULL, NULL, NULL);
}

kct *kct_compile(const char *src, size_t len, char *err, size_t errlen)
{
    kct *volatile t = calloc(1, sizeof *t);
    if (!t) {
        if (err && errlen) snprintf(err, errlen, "out of memory");
        return NULL;
    }
    t->c.err = err;
    t->c.errlen = errlen;
    if (setjmp(t->c.jb)) {
        ar_free(&t->c);
        free(t);
        return NULL;
    }
    compile_into(t, src, len);
    t->c.err = NULL;
    t->c.errlen = 0;
    return t;
}

void kct_free(kct *t)
{
    if (!t) return;
    ar_free(&t->c);
    free(t);
}

/* The request's variables into the root frame.  A function of its own so
 * that no local of the setjmp caller lives across a longjmp. */
static void bind_vars(rctx *r, frame *root, const json_t *vars)
{
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)vars, k, v) frame_set(&r->c, root, (str){ k, strlen(k) }, json_to_kv(&r->c, v));
    json_t *now = json_object_get(vars, "kct_now");
    if (json_is_integer(now)) {
        r->has_now = 1;
        r->now = (int64_t)json_integer_value(now);
    }
}

char *kct_render(const kct *t, const json_t *vars, char *err, size_t errlen)
{
    rctx r;
    memset(&r, 0, sizeof r);
    r.c.err = err;
    r.c.errlen = errlen;
    if (setjmp(r.c.jb)) {
        ar_free(&r.c);
        return NULL;
    }
    if (vars && !json_is_object(vars)) fail(&r.c, 0, 0, "template variables must be a JSON object");
    frame *root = new_frame(&r.c, NULL);
    if (vars) bind_vars(&r, root, vars);
    sbuf out = {0};
    sb_put(&r.c, &out, "", 0);
    exec_body(&r, &t->body, root, &out);
    char *res = malloc(out.n + 1);
    if (!res) fail(&r.c, 0, 0, "out of memory");
    memcpy(res, out.p, out.n + 1);
    ar_free(&r.c);
    return res;
}
