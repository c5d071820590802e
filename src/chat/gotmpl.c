/* Go text/template subset with Ollama's data model (gotmpl.h).
 *
 * The source is cut into items (text, and the tokens of each action) with
 * the trim markers applied, then parsed into a tree whose nodes are
 * numbered in document order; the tree and its strings live in one arena
 * freed with the template.  Rendering walks the tree with a variable
 * stack; values are jansson references, each evaluation returning one the
 * caller releases. */
#include "chat/gotmpl.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GT_OUT_MAX (16u << 20) /* bytes of a buffer outside a render's budgets */
#define GT_VARS_MAX 256        /* live variables */
#define GT_DEPTH_MAX 64        /* nested controls and parentheses */

/* ---- arena ---- */

typedef struct ablock {
    struct ablock *next;
    size_t used, cap;
    max_align_t data[];
} ablock;

static void *aalloc(ablock **a, size_t n) {
    n = (n + sizeof(max_align_t) - 1) / sizeof(max_align_t) * sizeof(max_align_t);
    if (!*a || (*a)->used + n > (*a)->cap) {
        size_t cap = n > 16384 ? n : 16384;
        ablock *b = malloc(sizeof *b + cap);
        if (!b) return NULL;
        b->next = *a;
        b->used = 0;
        b->cap = cap;
        *a = b;
    }
    void *p = (char *)(*a)->data + (*a)->used;
    (*a)->used += n;
    memset(p, 0, n);
    return p;
}

/* ---- the tree ---- */

enum { O_DOT, O_FIELD, O_VAR, O_STR, O_INT, O_REAL, O_BOOL, O_NIL, O_FUNC, O_PIPE };

struct gpipe;

typedef struct gop {
    int kind;
    int id;             /* document order (fields: the cut point) */
    const char *name;   /* O_VAR ("$" or "$x"), O_FUNC, O_STR (its bytes) */
    size_t len;         /* O_STR */
    long long i;        /* O_INT, O_BOOL */
    double d;           /* O_REAL */
    const char **chain; /* fields after the operand (O_FIELD: all of them) */
    int n_chain;
    struct gpipe *pipe; /* O_PIPE */
} gop;

typedef struct gcmd {
    gop **args;
    int n;
} gcmd;

typedef struct gpipe {
    const char *vars[2]; /* declared or assigned variables */
    int n_vars, assign;  /* assign: '=' rather than ':=' */
    gcmd **cmds;
    int n_cmds;
    int line;
} gpipe;

enum { N_TEXT, N_ACTION, N_IF, N_RANGE, N_WITH, N_BREAK, N_CONTINUE };

struct glist;

typedef struct gnode {
    int kind, id, line;
    const char *text; /* N_TEXT */
    size_t len;
    gpipe *pipe;
    struct glist *body, *alt;
} gnode;

typedef struct glist {
    gnode **v;
    int n;
} glist;

struct kgt {
    ablock *arena;
    glist *root;
    int n_ids;
    int cut_id;        /* id of the first .Response field, or INT_MAX */
    int uses_messages; /* an identifier .Messages (any case) appears */
};

/* ---- lexing ---- */

enum {
    K_EOF,
    K_IDENT,
    K_FIELD,
    K_DOT,
    K_VAR,
    K_STR,
    K_INT,
    K_REAL,
    K_LPAREN,
    K_RPAREN,
    K_PIPE,
    K_DECL,
    K_ASSIGN,
    K_COMMA,
    K_END_ACTION,
};

typedef struct gtok {
    int kind, line, spaced; /* spaced: whitespace came before it */
    const char *s;          /* K_IDENT/K_FIELD/K_VAR names (without '.'), K_STR bytes */
    size_t len;
    long long i;
    double d;
} gtok;

typedef struct gitem {
    int is_text, line;
    const char *text; /* text: a span of the source, already trimmed */
    size_t len;
    int tok0, n_tok; /* action: its tokens */
} gitem;

typedef struct P {
    kgt *t;
    const char *src;
    size_t n;
    gitem *items;
    int n_items, cap_items;
    gtok *toks;
    int n_toks, cap_toks;
    int it; /* next item */
    int tk; /* next token of the current action */
    int tk_end;
    int line;
    int range_depth, depth;
    char *err;
    size_t errlen;
    int failed;
} P;

static int pfail(P *p, int line, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int pfail(P *p, int line, const char *fmt, ...) {
    if (p->failed) return -1;
    p->failed = 1;
    int o = snprintf(p->err, p->errlen, "line %d: ", line);
    if (o < 0 || (size_t)o >= p->errlen) return -1;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(p->err + o, p->errlen - (size_t)o, fmt, ap);
    va_end(ap);
    return -1;
}

static int push_item(P *p, gitem it) {
    if (p->n_items == p->cap_items) {
        int cap = p->cap_items ? 2 * p->cap_items : 64;
        gitem *v = realloc(p->items, (size_t)cap * sizeof *v);
        if (!v) return pfail(p, p->line, "out of memory");
        p->items = v;
        p->cap_items = cap;
    }
    p->items[p->n_items++] = it;
    return 0;
}

static int push_tok(P *p, gtok tk) {
    if (p->n_toks == p->cap_toks) {
        int cap = p->cap_toks ? 2 * p->cap_toks : 256;
        gtok *v = realloc(p->toks, (size_t)cap * sizeof *v);
        if (!v) return pfail(p, p->line, "out of memory");
        p->toks = v;
        p->cap_toks = cap;
    }
    p->toks[p->n_toks++] = tk;
    return 0;
}

static int is_space(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; }
static int is_alnum_(char c) { return isalnum((unsigned char)c) || c == '_'; }

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* UTF-8 of code point c into o (room for 4); returns the byte count. */
static int utf8_put(unsigned long c, char *o) {
    if (c < 0x80) {
        o[0] = (char)c;
        return 1;
    }
    if (c < 0x800) {
        o[0] = (char)(0xC0 | (c >> 6));
        o[1] = (char)(0x80 | (c & 0x3F));
        return 2;
    }
    if (c < 0x10000) {
        o[0] = (char)(0xE0 | (c >> 12));
        o[1] = (char)(0x80 | ((c >> 6) & 0x3F));
        o[2] = (char)(0x80 | (c & 0x3F));
        return 3;
    }
    o[0] = (char)(0xF0 | (c >> 18));
    o[1] = (char)(0x80 | ((c >> 12) & 0x3F));
    o[2] = (char)(0x80 | ((c >> 6) & 0x3F));
    o[3] = (char)(0x80 | (c & 0x3F));
    return 4;
}

/* A quoted string or character constant at s (its quote q), decoded into
 * the arena.  *end: past the closing quote. */
static int lex_quoted(P *p, const char *s, const char *lim, char q, const char **end, gtok *tk) {
    char *o = aalloc(&p->t->arena, (size_t)(lim - s) + 1);
    if (!o) return pfail(p, p->line, "out of memory");
    size_t n = 0;
    const char *c = s + 1;
    for (;;) {
        if (c >= lim || *c == '\n') return pfail(p, p->line, "unterminated quoted string");
        if (*c == q) break;
        if (*c != '\\') {
            o[n++] = *c++;
            continue;
        }
        c++;
        if (c >= lim) return pfail(p, p->line, "unterminated quoted string");
        char e = *c++;
        unsigned long v = 0;
        int digits = 0, base = 16;
        switch (e) {
        case 'n': o[n++] = '\n'; break;
        case 't': o[n++] = '\t'; break;
        case 'r': o[n++] = '\r'; break;
        case 'a': o[n++] = '\a'; break;
        case 'b': o[n++] = '\b'; break;
        case 'f': o[n++] = '\f'; break;
        case 'v': o[n++] = '\v'; break;
        case '\\':
        case '"':
        case '\'': o[n++] = e; break;
        case 'x': digits = 2; break;
        case 'u': digits = 4; break;
        case 'U': digits = 8; break;
        default:
            if (e >= '0' && e <= '7') {
                c--;
                digits = 3;
                base = 8;
                break;
            }
            return pfail(p, p->line, "unknown escape sequence \\%c", e);
        }
        for (int k = 0; k < digits; k++) {
            int h = c < lim ? hexval(*c) : -1;
            if (h < 0 || h >= base) return pfail(p, p->line, "bad escape sequence in a quoted string");
            v = v * (unsigned long)base + (unsigned long)h;
            c++;
        }
        if (digits && (e == 'x' || base == 8))
            o[n++] = (char)v;
        else if (digits) {
            if (v > 0x10FFFF || (v >= 0xD800 && v < 0xE000))
                return pfail(p, p->line, "escape is not a valid code point");
            n += (size_t)utf8_put(v, o + n);
        }
    }
    *end = c + 1;
    o[n] = 0;
    if (q == '\'') { /* a character constant: its code point */
        const unsigned char *u = (const unsigned char *)o;
        unsigned long cp = u[0];
        if (n == 0) return pfail(p, p->line, "empty character constant");
        if (cp >= 0xF0 && n >= 4)
            cp = ((cp & 7ul) << 18) | ((u[1] & 63ul) << 12) | ((u[2] & 63ul) << 6) | (u[3] & 63ul);
        else if (cp >= 0xE0 && n >= 3)
            cp = ((cp & 15ul) << 12) | ((u[1] & 63ul) << 6) | (u[2] & 63ul);
        else if (cp >= 0xC0 && n >= 2)
            cp = ((cp & 31ul) << 6) | (u[1] & 63ul);
        tk->kind = K_INT;
        tk->i = (long long)cp;
        return 0;
    }
    tk->kind = K_STR;
    tk->s = o;
    tk->len = n;
    return 0;
}

static const char *arena_str(P *p, const char *s, size_t n) {
    char *o = aalloc(&p->t->arena, n + 1);
    if (!o) {
        pfail(p, p->line, "out of memory");
        return NULL;
    }
    memcpy(o, s, n);
    o[n] = 0;
    return o;
}

/* The tokens of one action from s (after "{{" and its trim marker) up to
 * its "}}"; *end: past it, *trim_after: it was " -}}". */
static int lex_action(P *p, const char *s, const char **end, int *trim_after) {
    const char *lim = p->src + p->n;
    const char *c = s;
    *trim_after = 0;
    int spaced = 1;
    for (;;) {
        while (c < lim && is_space(*c)) {
            if (*c == '\n') p->line++;
            c++;
            spaced = 1;
        }
        if (c >= lim) return pfail(p, p->line, "unclosed action");
        if (c + 1 < lim && c[0] == '}' && c[1] == '}') {
            *end = c + 2;
            return 0;
        }
        if (spaced && c + 2 < lim && c[0] == '-' && c[1] == '}' && c[2] == '}' && c > s && is_space(c[-1])) {
            *trim_after = 1;
            *end = c + 3;
            return 0;
        }
        gtok tk = {0};
        tk.line = p->line;
        tk.spaced = spaced;
        spaced = 0;
        char ch = *c;
        if (ch == '(' || ch == ')' || ch == '|' || ch == ',') {
            tk.kind = ch == '(' ? K_LPAREN : ch == ')' ? K_RPAREN : ch == '|' ? K_PIPE : K_COMMA;
            c++;
        } else if (ch == ':' && c + 1 < lim && c[1] == '=') {
            tk.kind = K_DECL;
            c += 2;
        } else if (ch == '=') {
            tk.kind = K_ASSIGN;
            c++;
        } else if (ch == '"' || ch == '\'') {
            if (lex_quoted(p, c, lim, ch, &c, &tk)) return -1;
        } else if (ch == '`') {
            const char *q = memchr(c + 1, '`', (size_t)(lim - c - 1));
            if (!q) return pfail(p, p->line, "unterminated raw quoted string");
            for (const char *k = c; k < q; k++) p->line += *k == '\n';
            tk.kind = K_STR;
            if (!(tk.s = arena_str(p, c + 1, (size_t)(q - c - 1)))) return -1;
            tk.len = (size_t)(q - c - 1);
            c = q + 1;
        } else if (isdigit((unsigned char)ch) ||
                   ((ch == '-' || ch == '+' || ch == '.') && c + 1 < lim && isdigit((unsigned char)c[1]))) {
            /* the number's text copied out and terminated: the source has
             * no terminator at lim, and strtod reads as far as it can */
            char num[128], *e1, *e2;
            size_t k = ch == '-' || ch == '+';
            while (c + k < lim &&
                   (is_alnum_(c[k]) || c[k] == '.' || ((c[k] == '+' || c[k] == '-') && strchr("eEpP", c[k - 1]))))
                k++;
            if (k >= sizeof num) return pfail(p, p->line, "a number of more than %d characters", (int)sizeof num - 1);
            memcpy(num, c, k);
            num[k] = 0;
            errno = 0;
            long long iv = strtoll(num, &e1, 0);
            const int wide = errno == ERANGE; /* past int64: Go reads such a constant as a float */
            double dv = strtod(num, &e2);
            if (e2 > e1 || (wide && e2 == e1)) {
                tk.kind = K_REAL;
                tk.d = dv;
                c += e2 - num;
            } else {
                tk.kind = K_INT;
                tk.i = iv;
                c += e1 - num;
            }
            if (c < lim && is_alnum_(*c)) return pfail(p, p->line, "bad number syntax");
        } else if (ch == '.') {
            const char *b = ++c;
            while (c < lim && is_alnum_(*c)) c++;
            tk.kind = c > b ? K_FIELD : K_DOT;
            if (c > b && !(tk.s = arena_str(p, b, (size_t)(c - b)))) return -1;
            tk.len = (size_t)(c - b);
        } else if (ch == '$') {
            const char *b = c++;
            while (c < lim && is_alnum_(*c)) c++;
            tk.kind = K_VAR;
            if (!(tk.s = arena_str(p, b, (size_t)(c - b)))) return -1;
            tk.len = (size_t)(c - b);
        } else if (isalpha((unsigned char)ch) || ch == '_') {
            const char *b = c;
            while (c < lim && is_alnum_(*c)) c++;
            tk.kind = K_IDENT;
            if (!(tk.s = arena_str(p, b, (size_t)(c - b)))) return -1;
            tk.len = (size_t)(c - b);
        } else {
            return pfail(p, p->line, "unexpected '%c' in an action", ch);
        }
        if (push_tok(p, tk)) return -1;
    }
}

/* Cuts the source into items. */
static int lex(P *p) {
    const char *c = p->src, *lim = p->src + p->n;
    int trim_next = 0;
    p->line = 1;
    while (c < lim) {
        const char *open = NULL;
        for (const char *k = c; k + 1 < lim; k++)
            if (k[0] == '{' && k[1] == '{') {
                open = k;
                break;
            }
        const char *text_end = open ? open : lim;
        const char *a = c;
        int line = p->line;
        if (trim_next)
            while (a < text_end && is_space(*a)) a++;
        for (const char *k = c; k < a; k++) line += *k == '\n';
        const char *inner = open ? open + 2 : lim;
        int trim_before = open && inner + 1 < lim && inner[0] == '-' && is_space(inner[1]);
        const char *b = text_end;
        if (trim_before)
            while (b > a && is_space(b[-1])) b--;
        for (const char *k = c; k < text_end; k++) p->line += *k == '\n';
        if (b > a && push_item(p, (gitem){1, line, a, (size_t)(b - a), 0, 0})) return -1;
        if (!open) break;
        if (trim_before) inner += 2;
        /* a comment: the whole action */
        const char *q = inner;
        while (q < lim && is_space(*q)) q++;
        if (q + 1 < lim && q[0] == '/' && q[1] == '*') {
            const char *e = NULL;
            for (const char *k = q + 2; k + 1 < lim; k++)
                if (k[0] == '*' && k[1] == '/') {
                    e = k + 2;
                    break;
                }
            if (!e) return pfail(p, p->line, "unclosed comment");
            for (const char *k = q; k < e; k++) p->line += *k == '\n';
            trim_next = 0;
            if (lim - e >= 4 && !memcmp(e, " -}}", 4)) {
                trim_next = 1;
                e += 4;
            } else if (e + 1 < lim && e[0] == '}' && e[1] == '}') {
                e += 2;
            } else {
                return pfail(p, p->line, "comment ends before the closing delimiter");
            }
            c = e;
            continue;
        }
        gitem it = {0, p->line, NULL, 0, p->n_toks, 0};
        const char *end = lim;
        if (lex_action(p, inner, &end, &trim_next)) return -1;
        it.n_tok = p->n_toks - it.tok0;
        if (it.n_tok == 0) return pfail(p, it.line, "missing value for command");
        if (push_item(p, it)) return -1;
        c = end;
    }
    return 0;
}

/* ---- parsing ---- */

static const gtok k_eof = {K_EOF, 0, 0, NULL, 0, 0, 0};

static const gtok *peek(P *p) { return p->tk < p->tk_end ? &p->toks[p->tk] : &k_eof; }
static const gtok *next(P *p) { return p->tk < p->tk_end ? &p->toks[p->tk++] : &k_eof; }
static int is_kw(const gtok *t, const char *kw) { return t->kind == K_IDENT && !strcmp(t->s, kw); }

static void *node_alloc(P *p, size_t n) {
    void *v = aalloc(&p->t->arena, n);
    if (!v) pfail(p, p->line, "out of memory");
    return v;
}

static int list_add(P *p, glist *l, gnode *nd) {
    if ((l->n & (l->n - 1)) == 0) { /* grow at powers of two, in the arena */
        int cap = l->n ? 2 * l->n : 4;
        gnode **v = node_alloc(p, (size_t)cap * sizeof *v);
        if (!v) return -1;
        if (l->n) memcpy(v, l->v, (size_t)l->n * sizeof *v);
        l->v = v;
    }
    l->v[l->n++] = nd;
    return 0;
}

static gpipe *parse_pipe(P *p, int line, int allow_decl, int range);

static void note_ident(P *p, const char *s) {
    if (!strcasecmp(s, "messages")) p->t->uses_messages = 1;
}

/* Fields that follow without a space: a chain (first: the next token is
 * a field that begins it, spaced or not). */
static int parse_chain(P *p, gop *o, int first) {
    int n = 0;
    for (int k = p->tk; k < p->tk_end && p->toks[k].kind == K_FIELD && (!p->toks[k].spaced || (first && k == p->tk));
         k++)
        n++;
    if (!n) return 0;
    const char **ch = node_alloc(p, (size_t)(o->n_chain + n) * sizeof *ch);
    if (!ch) return -1;
    if (o->n_chain) memcpy(ch, o->chain, (size_t)o->n_chain * sizeof *ch);
    for (int k = 0; k < n; k++) {
        ch[o->n_chain + k] = next(p)->s;
        note_ident(p, ch[o->n_chain + k]);
    }
    o->chain = ch;
    o->n_chain += n;
    return 0;
}

static gop *parse_operand(P *p) {
    const gtok *t = next(p);
    gop *o = node_alloc(p, sizeof *o);
    if (!o) return NULL;
    o->id = ++p->t->n_ids;
    switch (t->kind) {
    case K_DOT: o->kind = O_DOT; break;
    case K_FIELD:
        o->kind = O_FIELD;
        p->tk--; /* the chain takes it */
        if (parse_chain(p, o, 1)) return NULL;
        for (int k = 0; k < o->n_chain; k++)
            if (!strcmp(o->chain[k], "Response") && p->t->cut_id == INT_MAX) p->t->cut_id = o->id;
        return o;
    case K_VAR:
        o->kind = O_VAR;
        o->name = t->s;
        break;
    case K_STR:
        o->kind = O_STR;
        o->name = t->s;
        o->len = t->len;
        return o;
    case K_INT:
        o->kind = O_INT;
        o->i = t->i;
        return o;
    case K_REAL:
        o->kind = O_REAL;
        o->d = t->d;
        return o;
    case K_IDENT:
        if (!strcmp(t->s, "true") || !strcmp(t->s, "false")) {
            o->kind = O_BOOL;
            o->i = t->s[0] == 't';
            return o;
        }
        if (!strcmp(t->s, "nil")) {
            o->kind = O_NIL;
            return o;
        }
        o->kind = O_FUNC;
        o->name = t->s;
        return o;
    case K_LPAREN: {
        if (++p->depth > GT_DEPTH_MAX) {
            pfail(p, t->line, "parentheses nested too deeply");
            return NULL;
        }
        o->kind = O_PIPE;
        o->pipe = parse_pipe(p, t->line, 0, 0);
        p->depth--;
        if (!o->pipe) return NULL;
        if (next(p)->kind != K_RPAREN) {
            pfail(p, t->line, "unclosed left paren");
            return NULL;
        }
        break;
    }
    default: pfail(p, t->line, "unexpected token in an operand"); return NULL;
    }
    if (parse_chain(p, o, 0)) return NULL;
    return o;
}

/* [$x :=] command | command ...  Stops before ')' or the action's end. */
static gpipe *parse_pipe(P *p, int line, int allow_decl, int range) {
    gpipe *pp = node_alloc(p, sizeof *pp);
    if (!pp) return NULL;
    pp->line = line;
    /* declarations: $x := / $x = / (range) $i, $e := */
    if (peek(p)->kind == K_VAR) {
        int save = p->tk;
        const gtok *v1 = next(p);
        const gtok *v2 = NULL;
        if (range && peek(p)->kind == K_COMMA) {
            next(p);
            v2 = peek(p)->kind == K_VAR ? next(p) : NULL;
            if (!v2) {
                pfail(p, line, "range can only initialize variables");
                return NULL;
            }
        }
        int kind = peek(p)->kind;
        if ((kind == K_DECL || kind == K_ASSIGN) && (allow_decl || range)) {
            next(p);
            pp->vars[0] = v1->s;
            pp->n_vars = 1;
            if (v2) pp->vars[pp->n_vars++] = v2->s;
            pp->assign = kind == K_ASSIGN;
        } else if (v2) {
            pfail(p, line, "missing := after range variables");
            return NULL;
        } else {
            p->tk = save;
        }
    }
    int cap = 0;
    for (;;) {
        gcmd *cmd = node_alloc(p, sizeof *cmd);
        if (!cmd) return NULL;
        int acap = 0;
        while (peek(p)->kind != K_EOF && peek(p)->kind != K_PIPE && peek(p)->kind != K_RPAREN) {
            gop *o = parse_operand(p);
            if (!o) return NULL;
            if (cmd->n == acap) {
                acap = acap ? 2 * acap : 4;
                gop **v = node_alloc(p, (size_t)acap * sizeof *v);
                if (!v) return NULL;
                if (cmd->n) memcpy(v, cmd->args, (size_t)cmd->n * sizeof *v);
                cmd->args = v;
            }
            cmd->args[cmd->n++] = o;
        }
        if (!cmd->n) {
            pfail(p, line, "missing value for command");
            return NULL;
        }
        if (pp->n_cmds == cap) {
            cap = cap ? 2 * cap : 2;
            gcmd **v = node_alloc(p, (size_t)cap * sizeof *v);
            if (!v) return NULL;
            if (pp->n_cmds) memcpy(v, pp->cmds, (size_t)pp->n_cmds * sizeof *v);
            pp->cmds = v;
        }
        pp->cmds[pp->n_cmds++] = cmd;
        if (peek(p)->kind != K_PIPE) break;
        next(p);
    }
    return pp;
}

enum { STOP_EOF, STOP_END, STOP_ELSE };

static glist *parse_list(P *p, int *stop);

/* if / range / with after its keyword; consumes through its {{end}}. */
static gnode *parse_control(P *p, int kind, int line) {
    gnode *nd = node_alloc(p, sizeof *nd);
    if (!nd) return NULL;
    nd->kind = kind;
    nd->id = ++p->t->n_ids;
    nd->line = line;
    if (++p->depth > GT_DEPTH_MAX) {
        pfail(p, line, "controls nested too deeply");
        return NULL;
    }
    if (!(nd->pipe = parse_pipe(p, line, 1, kind == N_RANGE))) return NULL;
    if (peek(p)->kind != K_EOF) {
        pfail(p, line, "unexpected token after the %s pipeline",
              kind == N_IF      ? "if"
              : kind == N_RANGE ? "range"
                                : "with");
        return NULL;
    }
    if (kind == N_RANGE) p->range_depth++;
    int stop;
    if (!(nd->body = parse_list(p, &stop))) return NULL;
    if (kind == N_RANGE) p->range_depth--;
    if (stop == STOP_EOF) {
        pfail(p, line, "unexpected EOF: the %s has no {{end}}",
              kind == N_IF      ? "if"
              : kind == N_RANGE ? "range"
                                : "with");
        return NULL;
    }
    if (stop == STOP_ELSE) {
        const gtok *t = peek(p);
        if ((kind == N_IF && is_kw(t, "if")) || (kind == N_WITH && is_kw(t, "with"))) {
            /* else if / else with: a control in the else branch that ends with this {{end}} */
            next(p);
            if (!(nd->alt = node_alloc(p, sizeof *nd->alt))) return NULL;
            gnode *in = parse_control(p, kind, t->line);
            if (!in || list_add(p, nd->alt, in)) return NULL;
        } else {
            if (t->kind != K_EOF) {
                pfail(p, t->line, "unexpected token after else");
                return NULL;
            }
            if (!(nd->alt = parse_list(p, &stop))) return NULL;
            if (stop != STOP_END) {
                pfail(p, line, stop == STOP_ELSE ? "a second {{else}}" : "unexpected EOF: no {{end}}");
                return NULL;
            }
        }
    }
    p->depth--;
    return nd;
}

/* Items up to {{end}} or {{else}} (whose remaining tokens stay current). */
static glist *parse_list(P *p, int *stop) {
    glist *l = node_alloc(p, sizeof *l);
    if (!l) return NULL;
    *stop = STOP_EOF;
    while (p->it < p->n_items) {
        gitem *it = &p->items[p->it++];
        p->line = it->line;
        if (it->is_text) {
            gnode *nd = node_alloc(p, sizeof *nd);
            if (!nd) return NULL;
            nd->kind = N_TEXT;
            nd->id = ++p->t->n_ids;
            nd->line = it->line;
            nd->text = it->text;
            nd->len = it->len;
            if (list_add(p, l, nd)) return NULL;
            continue;
        }
        p->tk = it->tok0;
        p->tk_end = it->tok0 + it->n_tok;
        const gtok *t = peek(p);
        if (is_kw(t, "end") || is_kw(t, "else")) {
            next(p);
            if (t->s[1] == 'n' && peek(p)->kind != K_EOF) {
                pfail(p, t->line, "unexpected token in {{end}}");
                return NULL;
            }
            *stop = t->s[1] == 'n' ? STOP_END : STOP_ELSE;
            return l;
        }
        gnode *nd = NULL;
        if (is_kw(t, "if") || is_kw(t, "range") || is_kw(t, "with")) {
            next(p);
            nd = parse_control(p, t->s[0] == 'i' ? N_IF : t->s[0] == 'r' ? N_RANGE : N_WITH, t->line);
        } else if (is_kw(t, "break") || is_kw(t, "continue")) {
            next(p);
            if (!p->range_depth) {
                pfail(p, t->line, "{{%s}} outside {{range}}", t->s);
                return NULL;
            }
            if (peek(p)->kind != K_EOF) {
                pfail(p, t->line, "unexpected token in {{%s}}", t->s);
                return NULL;
            }
            if ((nd = node_alloc(p, sizeof *nd))) {
                nd->kind = t->s[0] == 'b' ? N_BREAK : N_CONTINUE;
                nd->id = ++p->t->n_ids;
                nd->line = t->line;
            }
        } else if (is_kw(t, "define") || is_kw(t, "template") || is_kw(t, "block")) {
            pfail(p, t->line, "{{%s}} (named templates) is not supported", t->s);
            return NULL;
        } else {
            if ((nd = node_alloc(p, sizeof *nd))) {
                nd->kind = N_ACTION;
                nd->id = ++p->t->n_ids;
                nd->line = t->line;
                nd->pipe = parse_pipe(p, t->line, 1, 0);
                if (nd->pipe && peek(p)->kind != K_EOF) {
                    pfail(p, t->line, peek(p)->kind == K_RPAREN ? "unexpected right paren" : "unexpected token");
                    return NULL;
                }
                if (!nd->pipe) nd = NULL;
            }
        }
        if (!nd || list_add(p, l, nd)) return NULL;
    }
    return l;
}

static void arena_free(ablock *a) {
    while (a) {
        ablock *n = a->next;
        free(a);
        a = n;
    }
}

void kgt_free(kgt *t) {
    if (!t) return;
    arena_free(t->arena);
    free(t);
}

kgt *kgt_compile(const char *src, size_t len, char *err, size_t errlen) {
    char dummy[8];
    if (!err || !errlen) {
        err = dummy;
        errlen = sizeof dummy;
    }
    err[0] = 0;
    kgt *t = calloc(1, sizeof *t);
    if (!t) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    t->cut_id = INT_MAX;
    /* the tree points into the source: a copy of it (NUL-terminated) lives
     * in the arena, so the caller's text may go */
    char *copy = len < SIZE_MAX - 64 ? aalloc(&t->arena, len + 1) : NULL;
    if (!copy) {
        snprintf(err, errlen, "out of memory");
        kgt_free(t);
        return NULL;
    }
    if (len) memcpy(copy, src, len);
    P p = {0};
    p.t = t;
    p.src = copy;
    p.n = len;
    p.err = err;
    p.errlen = errlen;
    int stop = STOP_EOF;
    if (lex(&p) == 0) t->root = parse_list(&p, &stop);
    if (!p.failed && stop != STOP_EOF) pfail(&p, p.line, "unexpected {{%s}}", stop == STOP_END ? "end" : "else");
    /* a template that names neither .Messages nor .Response gets a
     * {{ .Response }} at its end, as Ollama adds one */
    int names_response = 0;
    for (int i = 0; !p.failed && i < p.n_toks; i++) {
        const gtok *k = &p.toks[i];
        if (k->kind == K_FIELD && !strcasecmp(k->s, "response")) names_response = 1;
    }
    if (!p.failed && !t->uses_messages && !names_response) {
        gnode *nd = node_alloc(&p, sizeof *nd);
        gpipe *pp = node_alloc(&p, sizeof *pp);
        gcmd *cmd = node_alloc(&p, sizeof *cmd);
        gop **args = node_alloc(&p, sizeof *args);
        gop *o = node_alloc(&p, sizeof *o);
        const char **chain = node_alloc(&p, sizeof *chain);
        if (!p.failed) {
            nd->kind = N_ACTION;
            nd->id = ++t->n_ids;
            nd->pipe = pp;
            pp->cmds = node_alloc(&p, sizeof *pp->cmds);
            if (pp->cmds) {
                pp->cmds[0] = cmd;
                pp->n_cmds = 1;
                cmd->args = args;
                cmd->n = 1;
                args[0] = o;
                o->kind = O_FIELD;
                o->id = ++t->n_ids;
                chain[0] = "Response";
                o->chain = chain;
                o->n_chain = 1;
                if (t->cut_id == INT_MAX) t->cut_id = o->id;
                list_add(&p, t->root, nd);
            }
        }
    }
    free(p.items);
    free(p.toks);
    if (p.failed || !t->root) {
        if (!err[0]) snprintf(err, errlen, "out of memory");
        kgt_free(t);
        return NULL;
    }
    return t;
}

/* ---- values ---- */

typedef struct gbuf {
    char *p;
    size_t len, cap;
    size_t limit; /* bytes it may hold; 0: GT_OUT_MAX */
    int full;     /* GB_NOMEM, or GB_OVER its limit */
} gbuf;
enum { GB_NOMEM = 1, GB_OVER = 2 };

static void put(gbuf *b, const char *s, size_t n) {
    if (b->full) return;
    size_t lim = b->limit ? b->limit : GT_OUT_MAX;
    if (n > lim || b->len + n > lim) {
        b->full = GB_OVER;
        return;
    }
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n + 1) cap *= 2;
        char *q = realloc(b->p, cap);
        if (!q) {
            b->full = GB_NOMEM;
            return;
        }
        b->p = q;
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = 0;
}

static void puts_(gbuf *b, const char *s) { put(b, s, strlen(s)); }

static int truth(const json_t *v) {
    switch (json_typeof(v)) {
    case JSON_OBJECT: return json_object_size(v) > 0;
    case JSON_ARRAY: return json_array_size(v) > 0;
    case JSON_STRING: return json_string_length(v) > 0;
    case JSON_INTEGER: return json_integer_value(v) != 0;
    case JSON_REAL: return json_real_value(v) != 0;
    case JSON_TRUE: return 1;
    default: return 0;
    }
}

/* A float as Go's %v prints a float64: the shortest digits that read back,
 * in %e form when the exponent is < -4 or >= 6 (1e+06). */
static void put_real(gbuf *b, double d) {
    char s[64];
    if (isnan(d)) {
        puts_(b, "NaN");
        return;
    }
    if (isinf(d)) {
        puts_(b, d > 0 ? "+Inf" : "-Inf");
        return;
    }
    int prec = 1;
    for (; prec < 17; prec++) {
        snprintf(s, sizeof s, "%.*e", prec - 1, d);
        if (strtod(s, NULL) == d) break;
    }
    snprintf(s, sizeof s, "%.*e", prec - 1, d);
    int exp = atoi(strchr(s, 'e') + 1);
    if (exp < -4 || exp >= 6) {
        /* Go writes e+06, not e+006: at least two exponent digits */
        char mant[32];
        const char *e = strchr(s, 'e');
        snprintf(mant, sizeof mant, "%.*s", (int)(e - s), s);
        snprintf(s, sizeof s, "%se%c%02d", mant, exp < 0 ? '-' : '+', (exp < 0 ? -exp : exp) % 1000);
    } else {
        int frac = prec - 1 - exp;
        snprintf(s, sizeof s, "%.*f", frac > 0 ? frac : 0, d);
    }
    puts_(b, s);
}

/* Compact JSON with '<', '>', '&' escaped, as Go's encoding/json writes. */
static void put_json(gbuf *b, const json_t *v) {
    char *s = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY | JSON_PRESERVE_ORDER);
    if (!s) {
        b->full = GB_NOMEM;
        return;
    }
    for (const char *c = s; *c; c++) {
        if (*c == '<')
            puts_(b, "\\u003c");
        else if (*c == '>')
            puts_(b, "\\u003e");
        else if (*c == '&')
            puts_(b, "\\u0026");
        else
            put(b, c, 1);
    }
    free(s);
}

static void put_value(gbuf *b, const json_t *v) {
    char s[32];
    switch (json_typeof(v)) {
    case JSON_STRING: put(b, json_string_value(v), json_string_length(v)); break;
    case JSON_INTEGER:
        snprintf(s, sizeof s, "%lld", (long long)json_integer_value(v));
        puts_(b, s);
        break;
    case JSON_REAL: put_real(b, json_real_value(v)); break;
    case JSON_TRUE: puts_(b, "true"); break;
    case JSON_FALSE: puts_(b, "false"); break;
    case JSON_NULL: break; /* a struct field's zero value */
    default: put_json(b, v); break;
    }
}

/* The key a field names: itself, else its snake_case ("ToolCallID" ->
 * "tool_call_id"). */
static json_t *field_get(const json_t *obj, const char *name) {
    json_t *v = json_object_get(obj, name);
    if (v) return v;
    char snake[128];
    size_t o = 0, n = strlen(name);
    for (size_t i = 0; i < n && o + 2 < sizeof snake; i++) {
        char c = name[i];
        if (isupper((unsigned char)c) && i > 0 &&
            (islower((unsigned char)name[i - 1]) || isdigit((unsigned char)name[i - 1]) ||
             (i + 1 < n && islower((unsigned char)name[i + 1]))))
            snake[o++] = '_';
        snake[o++] = (char)tolower((unsigned char)c);
    }
    snake[o] = 0;
    return json_object_get(obj, snake);
}

/* ---- execution ---- */

typedef struct gvar {
    const char *name;
    json_t *val; /* owned */
} gvar;

/* The budgets of one render (kct_opts), shared by its runs. */
typedef struct gbudget {
    uint64_t steps, max_steps, next_poll;
    size_t mem, max_mem; /* bytes of the values the render has made, all counted */
    size_t max_out;
    int (*cancelled)(void *arg);
    void *cancel_arg;
} gbudget;

typedef struct X {
    const kgt *t;
    gbudget *bg;
    gbuf out;
    gvar vars[GT_VARS_MAX];
    int nv;
    int cut;  /* nodes after this id are not run */
    int flow; /* 1 break, 2 continue */
    char *err;
    size_t errlen;
    int failed;
} X;

static json_t *xfail(X *x, int line, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static json_t *xfail(X *x, int line, const char *fmt, ...) {
    if (x->failed) return NULL;
    x->failed = 1;
    int o = snprintf(x->err, x->errlen, "line %d: ", line);
    if (o < 0 || (size_t)o >= x->errlen) return NULL;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(x->err + o, x->errlen - (size_t)o, fmt, ap);
    va_end(ap);
    return NULL;
}

/* n steps of the budget (and, each KCT_POLL_STEPS, the cancel check);
 * -1 after failing the render. */
static int charge(X *x, int line, uint64_t n) {
    gbudget *b = x->bg;
    b->steps += n;
    if (b->steps < b->next_poll) return 0;
    if (b->steps > b->max_steps) {
        xfail(x, line, "render exceeded its step budget (%llu steps)", (unsigned long long)b->max_steps);
        return -1;
    }
    if (b->cancelled && b->cancelled(b->cancel_arg)) {
        xfail(x, line, "render cancelled");
        return -1;
    }
    b->next_poll = b->steps + KCT_POLL_STEPS;
    if (b->next_poll > b->max_steps + 1) b->next_poll = b->max_steps + 1;
    return 0;
}

/* n more bytes of values made (a step each 8 bytes: making them is the
 * work); -1 after failing the render. */
static int charge_mem(X *x, int line, size_t n) {
    gbudget *b = x->bg;
    if (n > b->max_mem || b->mem > b->max_mem - n) {
        xfail(x, line, "render exceeded its memory budget (%zu bytes)", b->max_mem);
        return -1;
    }
    b->mem += n;
    return charge(x, line, n / 8);
}

/* Steps for printing the values a[0..n): an object or array is dumped as
 * JSON, which costs more than its bytes. */
static int charge_print(X *x, int line, json_t *const *a, int n) {
    uint64_t k = 0;
    for (int i = 0; i < n; i++) k += json_is_object(a[i]) || json_is_array(a[i]) ? 64 : 1;
    return charge(x, line, k);
}

/* The failure of a scratch buffer as a message; NULL. */
static json_t *buf_fail(X *x, int line, const gbuf *b, const char *what) {
    if (b->full == GB_OVER) return xfail(x, line, "%s: render exceeded its output budget (%zu bytes)", what, b->limit);
    return xfail(x, line, "%s: out of memory", what);
}

/* A string value made from a scratch buffer, counted against the budget. */
static json_t *buf_value(X *x, int line, const gbuf *b, const char *what) {
    if (b->full) return buf_fail(x, line, b, what);
    if (charge_mem(x, line, b->len + 64)) return NULL;
    return json_stringn_nocheck(b->p ? b->p : "", b->len);
}

static const char *type_name(const json_t *v) {
    switch (json_typeof(v)) {
    case JSON_OBJECT: return "map";
    case JSON_ARRAY: return "slice";
    case JSON_STRING: return "string";
    case JSON_INTEGER: return "int";
    case JSON_REAL: return "float64";
    case JSON_TRUE:
    case JSON_FALSE: return "bool";
    default: return "nil";
    }
}

static json_t *var_get(X *x, const char *name, int line) {
    for (int i = x->nv - 1; i >= 0; i--)
        if (!strcmp(x->vars[i].name, name)) return json_incref(x->vars[i].val);
    return xfail(x, line, "undefined variable: %s", name);
}

static int var_push(X *x, const char *name, json_t *v, int line) {
    if (x->nv == GT_VARS_MAX) {
        json_decref(v);
        xfail(x, line, "too many variables");
        return -1;
    }
    x->vars[x->nv].name = name;
    x->vars[x->nv++].val = v;
    return 0;
}

static void var_pop(X *x, int mark) {
    while (x->nv > mark) json_decref(x->vars[--x->nv].val);
}

static json_t *chain(X *x, json_t *v, const char *const *ch, int n, int line) {
    for (int i = 0; v && i < n; i++) {
        json_t *next;
        if (json_is_object(v))
            next = field_get(v, ch[i]);
        else if (json_is_null(v))
            next = NULL;
        else {
            json_t *r = xfail(x, line, "can't evaluate field %s in type %s", ch[i], type_name(v));
            json_decref(v);
            return r;
        }
        json_t *nv = json_incref(next ? next : json_null());
        json_decref(v);
        v = nv;
    }
    return v;
}

static json_t *eval_pipe(X *x, const gpipe *pp, json_t *dot);
static json_t *call(X *x, const gcmd *cmd, json_t *dot, json_t *final, int line);

static json_t *eval_op(X *x, const gop *o, json_t *dot, int line) {
    json_t *v = NULL;
    if (charge(x, line, 1 + (uint64_t)o->n_chain)) return NULL;
    switch (o->kind) {
    case O_DOT: return json_incref(dot);
    case O_FIELD: return chain(x, json_incref(dot), o->chain, o->n_chain, line);
    case O_VAR: v = var_get(x, o->name, line); break;
    case O_STR: return json_stringn_nocheck(o->name, o->len);
    case O_INT: return json_integer(o->i);
    case O_REAL: return json_real(o->d);
    case O_BOOL: return json_boolean(o->i);
    case O_NIL: return json_null();
    case O_FUNC: { /* a function alone: called without arguments */
        gop *self = (gop *)o;
        gcmd one = {&self, 1};
        v = call(x, &one, dot, NULL, line);
        break;
    }
    case O_PIPE: v = eval_pipe(x, o->pipe, dot); break;
    }
    return v ? chain(x, v, o->chain, o->n_chain, line) : NULL;
}

static int num_of(const json_t *v, double *d) {
    if (json_is_integer(v))
        *d = (double)json_integer_value(v);
    else if (json_is_real(v))
        *d = json_real_value(v);
    else
        return 0;
    return 1;
}

/* -1, 0, 1, or 2 when a and b cannot be ordered (kinds differ). */
static int compare(const json_t *a, const json_t *b) {
    double da, db;
    if (num_of(a, &da) && num_of(b, &db)) {
        if (json_is_integer(a) && json_is_integer(b)) {
            json_int_t ia = json_integer_value(a), ib = json_integer_value(b);
            return ia < ib ? -1 : ia > ib;
        }
        return da < db ? -1 : da > db;
    }
    if (json_is_string(a) && json_is_string(b)) {
        size_t la = json_string_length(a), lb = json_string_length(b);
        int c = memcmp(json_string_value(a), json_string_value(b), la < lb ? la : lb);
        return c ? (c < 0 ? -1 : 1) : la < lb ? -1 : la > lb;
    }
    return 2;
}

static int equal(const json_t *a, const json_t *b) {
    if (json_is_boolean(a) && json_is_boolean(b)) return json_is_true(a) == json_is_true(b);
    if (json_is_null(a) || json_is_null(b)) return json_is_null(a) && json_is_null(b);
    int c = compare(a, b);
    return c == 2 ? json_equal(a, b) : c == 0;
}

static json_t *to_index(X *x, const json_t *v, long long *out, int line) {
    if (!json_is_integer(v)) return xfail(x, line, "cannot index with type %s", type_name(v));
    *out = json_integer_value(v);
    return json_null();
}

/* A string as Go's %q (strconv.Quote) writes it: quotes, backslash
 * escapes for '"', '\\' and control bytes, other UTF-8 as it is. */
static void put_quoted(gbuf *b, const char *s, size_t n) {
    put(b, "\"", 1);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        const char *e = c == '"'    ? "\\\""
                        : c == '\\' ? "\\\\"
                        : c == '\n' ? "\\n"
                        : c == '\t' ? "\\t"
                        : c == '\r' ? "\\r"
                        : c == '\a' ? "\\a"
                        : c == '\b' ? "\\b"
                        : c == '\f' ? "\\f"
                        : c == '\v' ? "\\v"
                                    : NULL;
        char hex[8];
        if (!e && (c < 0x20 || c == 0x7f)) {
            snprintf(hex, sizeof hex, "\\x%02x", c);
            e = hex;
        }
        if (e)
            puts_(b, e);
        else
            put(b, s + i, 1);
    }
    put(b, "\"", 1);
}

/* printf's verbs over args. */
static json_t *go_printf(X *x, json_t **a, int n, int line) {
    if (n < 1 || !json_is_string(a[0])) return xfail(x, line, "printf needs a format string");
    if (charge_print(x, line, a, n)) return NULL;
    const char *f = json_string_value(a[0]);
    gbuf b = {.limit = x->bg->max_out};
    int k = 1;
    for (const char *c = f; *c; c++) {
        if (*c != '%') {
            put(&b, c, 1);
            continue;
        }
        c++;
        if (*c == '%') {
            put(&b, "%", 1);
            continue;
        }
        if (!*c) break;
        if (k >= n) {
            puts_(&b, "%!");
            put(&b, c, 1);
            puts_(&b, "(MISSING)");
            continue;
        }
        json_t *v = a[k++];
        char s[64];
        switch (*c) {
        case 'd':
            if (json_is_integer(v)) {
                snprintf(s, sizeof s, "%lld", (long long)json_integer_value(v));
                puts_(&b, s);
            } else {
                puts_(&b, "%!d(");
                put_value(&b, v);
                puts_(&b, ")");
            }
            break;
        case 'f':
            if (json_is_number(v)) {
                snprintf(s, sizeof s, "%f", json_number_value(v));
                puts_(&b, s);
            } else {
                put_value(&b, v);
            }
            break;
        case 'q':
            if (json_is_string(v))
                put_quoted(&b, json_string_value(v), json_string_length(v));
            else
                put_value(&b, v);
            break;
        default: /* s, v, t and the rest: the value as printed */ put_value(&b, v); break;
        }
    }
    json_t *r = buf_value(x, line, &b, "printf");
    free(b.p);
    return r;
}

/* fmt.Sprint: a space between operands when neither is a string. */
static json_t *go_print(X *x, json_t **a, int n, int ln, int line) {
    if (charge_print(x, line, a, n)) return NULL;
    gbuf b = {.limit = x->bg->max_out};
    for (int i = 0; i < n; i++) {
        if (i && (ln || (!json_is_string(a[i]) && !json_is_string(a[i - 1])))) put(&b, " ", 1);
        put_value(&b, a[i]);
    }
    if (ln) put(&b, "\n", 1);
    json_t *r = buf_value(x, line, &b, "print");
    free(b.p);
    return r;
}

static json_t *builtin(X *x, const char *f, json_t **a, int n, int line) {
    if (!strcmp(f, "not")) {
        if (n != 1) return xfail(x, line, "not takes one argument");
        return json_boolean(!truth(a[0]));
    }
    if (!strcmp(f, "eq")) {
        if (n < 2) return xfail(x, line, "eq needs at least two arguments");
        for (int i = 1; i < n; i++)
            if (equal(a[0], a[i])) return json_true();
        return json_false();
    }
    if (!strcmp(f, "ne") || !strcmp(f, "lt") || !strcmp(f, "le") || !strcmp(f, "gt") || !strcmp(f, "ge")) {
        if (n != 2) return xfail(x, line, "%s takes two arguments", f);
        if (f[0] == 'n') return json_boolean(!equal(a[0], a[1]));
        int c = compare(a[0], a[1]);
        if (c == 2)
            return xfail(x, line, "%s: incompatible types for comparison (%s, %s)", f, type_name(a[0]),
                         type_name(a[1]));
        int r = f[0] == 'l' ? (f[1] == 't' ? c < 0 : c <= 0) : (f[1] == 't' ? c > 0 : c >= 0);
        return json_boolean(r);
    }
    if (!strcmp(f, "len")) {
        if (n != 1) return xfail(x, line, "len takes one argument");
        json_t *v = a[0];
        if (json_is_string(v)) return json_integer((json_int_t)json_string_length(v));
        if (json_is_array(v)) return json_integer((json_int_t)json_array_size(v));
        if (json_is_object(v)) return json_integer((json_int_t)json_object_size(v));
        if (json_is_null(v)) return json_integer(0);
        return xfail(x, line, "len of type %s", type_name(v));
    }
    if (!strcmp(f, "index")) {
        if (n < 1) return xfail(x, line, "index needs an argument");
        json_t *v = json_incref(a[0]);
        for (int i = 1; v && i < n; i++) {
            json_t *nx = NULL;
            if (json_is_object(v)) {
                if (!json_is_string(a[i])) {
                    json_decref(v);
                    return xfail(x, line, "index of a map with type %s", type_name(a[i]));
                }
                nx = json_object_get(v, json_string_value(a[i]));
                nx = json_incref(nx ? nx : json_null());
            } else if (json_is_array(v) || json_is_string(v)) {
                long long k;
                json_t *ok = to_index(x, a[i], &k, line);
                if (!ok) {
                    json_decref(v);
                    return NULL;
                }
                json_decref(ok);
                size_t len = json_is_array(v) ? json_array_size(v) : json_string_length(v);
                if (k < 0 || (size_t)k >= len) {
                    json_decref(v);
                    return xfail(x, line, "index out of range: %lld", k);
                }
                nx = json_is_array(v) ? json_incref(json_array_get(v, (size_t)k))
                                      : json_integer((unsigned char)json_string_value(v)[k]);
            } else if (json_is_null(v)) {
                nx = json_null();
            } else {
                json_decref(v);
                return xfail(x, line, "can't index item of type %s", type_name(v));
            }
            json_decref(v);
            v = nx;
        }
        return v;
    }
    if (!strcmp(f, "slice")) {
        if (n < 1 || n > 3) return xfail(x, line, "slice takes an item and up to two indices");
        json_t *v = a[0];
        size_t len = json_is_array(v) ? json_array_size(v) : json_is_string(v) ? json_string_length(v) : 0;
        if (!json_is_array(v) && !json_is_string(v)) return xfail(x, line, "can't slice item of type %s", type_name(v));
        long long lo = 0, hi = (long long)len;
        for (int i = 1; i < n; i++) {
            json_t *ok = to_index(x, a[i], i == 1 ? &lo : &hi, line);
            if (!ok) return NULL;
            json_decref(ok);
        }
        if (lo < 0 || hi < lo || (size_t)hi > len)
            return xfail(x, line, "slice index out of range: [%lld:%lld]", lo, hi);
        if (charge_mem(x, line, (size_t)(hi - lo) * (json_is_string(v) ? 1 : sizeof(void *)) + 64)) return NULL;
        if (json_is_string(v)) return json_stringn_nocheck(json_string_value(v) + lo, (size_t)(hi - lo));
        json_t *r = json_array();
        for (long long i = lo; i < hi; i++) json_array_append(r, json_array_get(v, (size_t)i));
        return r;
    }
    if (!strcmp(f, "print")) return go_print(x, a, n, 0, line);
    if (!strcmp(f, "println")) return go_print(x, a, n, 1, line);
    if (!strcmp(f, "printf")) return go_printf(x, a, n, line);
    if (!strcmp(f, "json")) {
        if (n != 1) return xfail(x, line, "json takes one argument");
        if (charge_print(x, line, a, n)) return NULL;
        gbuf b = {.limit = x->bg->max_out};
        put_json(&b, a[0]);
        json_t *r = buf_value(x, line, &b, "json");
        free(b.p);
        return r;
    }
    return xfail(x, line, "function \"%s\" not defined", f);
}

/* A command: a function call with its arguments (and the piped value
 * last), or a single operand. */
static json_t *call(X *x, const gcmd *cmd, json_t *dot, json_t *final, int line) {
    const gop *head = cmd->args[0];
    if (head->kind != O_FUNC) {
        if (cmd->n > 1 || final) return xfail(x, line, "can't give argument to non-function");
        return eval_op(x, head, dot, line);
    }
    const char *f = head->name;
    const int n = cmd->n - 1 + (final != NULL);
    if (!strcmp(f, "and") || !strcmp(f, "or")) { /* short-circuit: the deciding value */
        if (n < 1) return xfail(x, line, "%s needs at least one argument", f);
        const int want = f[0] == 'o';
        json_t *v = NULL;
        for (int i = 1; i <= n; i++) {
            json_decref(v);
            v = i < cmd->n ? eval_op(x, cmd->args[i], dot, line) : json_incref(final);
            if (!v) return NULL;
            if (truth(v) == want) break;
        }
        return v;
    }
    json_t *argv[16];
    if (n > 16) return xfail(x, line, "too many arguments to %s", f);
    int k = 0;
    for (int i = 1; i < cmd->n; i++) {
        if (!(argv[k] = eval_op(x, cmd->args[i], dot, line))) {
            while (k) json_decref(argv[--k]);
            return NULL;
        }
        k++;
    }
    if (final) argv[k++] = json_incref(final);
    json_t *r = builtin(x, f, argv, k, line);
    while (k) json_decref(argv[--k]);
    return r;
}

/* The pipeline's value (declaring or assigning its variables). */
static json_t *eval_pipe(X *x, const gpipe *pp, json_t *dot) {
    json_t *v = NULL;
    for (int i = 0; i < pp->n_cmds; i++) {
        json_t *nv = call(x, pp->cmds[i], dot, v, pp->line);
        json_decref(v);
        if (!(v = nv)) return NULL;
    }
    return v;
}

static int set_vars(X *x, const gpipe *pp, json_t *v) {
    if (!pp->n_vars) return 0;
    if (pp->assign) {
        for (int i = x->nv - 1; i >= 0; i--)
            if (!strcmp(x->vars[i].name, pp->vars[0])) {
                json_decref(x->vars[i].val);
                x->vars[i].val = json_incref(v);
                return 0;
            }
        xfail(x, pp->line, "undefined variable: %s", pp->vars[0]);
        return -1;
    }
    return var_push(x, pp->vars[0], json_incref(v), pp->line);
}

static void run_list(X *x, const glist *l, json_t *dot);

static void run_range(X *x, const gnode *nd, json_t *dot) {
    const gpipe *pp = nd->pipe;
    gpipe bare = *pp;
    bare.n_vars = 0; /* range's variables are per element, not the pipeline's */
    json_t *v = eval_pipe(x, &bare, dot);
    if (!v) return;
    size_t n = 0;
    const char **keys = NULL;
    if (json_is_array(v))
        n = json_array_size(v);
    else if (json_is_object(v)) {
        n = json_object_size(v);
        keys = malloc((n ? n : 1) * sizeof *keys);
        if (!keys) {
            xfail(x, nd->line, "out of memory");
            json_decref(v);
            return;
        }
        size_t i = 0;
        const char *k;
        json_t *val;
        json_object_foreach(v, k, val) keys[i++] = k;
        /* Go ranges over a map in key order */
        for (size_t a = 1; a < n; a++)
            for (size_t b = a; b > 0 && strcmp(keys[b - 1], keys[b]) > 0; b--) {
                const char *t = keys[b];
                keys[b] = keys[b - 1];
                keys[b - 1] = t;
            }
    } else if (json_is_integer(v)) {
        n = json_integer_value(v) > 0 ? (size_t)json_integer_value(v) : 0;
        if (n > 1000000) {
            xfail(x, nd->line, "range over %zu integers", n);
            json_decref(v);
            return;
        }
    } else if (!json_is_null(v)) {
        xfail(x, nd->line, "range can't iterate over %s", type_name(v));
        json_decref(v);
        return;
    }
    if (keys && charge(x, nd->line, (uint64_t)n * (n < 64 ? n : 64))) n = 0; /* the key sort */
    for (size_t i = 0; i < n && !x->failed; i++) {
        if (charge(x, nd->line, 1)) break;
        json_t *key = keys ? json_string(keys[i]) : json_integer((json_int_t)i);
        json_t *el = keys               ? json_incref(json_object_get(v, keys[i]))
                     : json_is_array(v) ? json_incref(json_array_get(v, i))
                                        : json_integer((json_int_t)i);
        const int mark = x->nv;
        int ok = 0;
        if (pp->n_vars == 1) {
            ok = pp->assign ? set_vars(x, pp, el) : var_push(x, pp->vars[0], json_incref(el), pp->line);
        } else if (pp->n_vars == 2) {
            if (pp->assign) {
                gpipe one = *pp;
                one.n_vars = 1;
                ok = set_vars(x, &one, key);
                one.vars[0] = pp->vars[1];
                ok = ok ? ok : set_vars(x, &one, el);
            } else {
                ok = var_push(x, pp->vars[0], json_incref(key), pp->line);
                ok = ok ? ok : var_push(x, pp->vars[1], json_incref(el), pp->line);
            }
        }
        if (!ok) run_list(x, nd->body, el);
        var_pop(x, mark);
        json_decref(key);
        json_decref(el);
        if (x->flow == 1) {
            x->flow = 0;
            break;
        }
        x->flow = 0;
    }
    if (!n && nd->alt && !x->failed) run_list(x, nd->alt, dot);
    free(keys);
    json_decref(v);
}

static void run_node(X *x, const gnode *nd, json_t *dot) {
    if (nd->id > x->cut) return;
    if (charge(x, nd->line, 1)) return;
    switch (nd->kind) {
    case N_TEXT:
        put(&x->out, nd->text, nd->len);
        charge(x, nd->line, nd->len / 8);
        break;
    case N_ACTION: {
        json_t *v = eval_pipe(x, nd->pipe, dot);
        if (!v) return;
        if (nd->pipe->n_vars) {
            set_vars(x, nd->pipe, v); /* a declaration prints nothing */
        } else if (charge_print(x, nd->line, &v, 1) == 0) {
            size_t at = x->out.len;
            put_value(&x->out, v);
            charge(x, nd->line, (x->out.len - at) / 8);
        }
        json_decref(v);
        break;
    }
    case N_IF:
    case N_WITH: {
        const int mark = x->nv;
        json_t *v = eval_pipe(x, nd->pipe, dot);
        if (!v) return;
        if (set_vars(x, nd->pipe, v) == 0) {
            if (truth(v))
                run_list(x, nd->body, nd->kind == N_WITH ? v : dot);
            else if (nd->alt)
                run_list(x, nd->alt, dot);
        }
        json_decref(v);
        var_pop(x, mark);
        break;
    }
    case N_RANGE: run_range(x, nd, dot); break;
    case N_BREAK: x->flow = 1; break;
    case N_CONTINUE: x->flow = 2; break;
    }
    if (x->out.full && !x->failed) buf_fail(x, nd->line, &x->out, "the output");
}

static void run_list(X *x, const glist *l, json_t *dot) {
    const int mark = x->nv;
    for (int i = 0; l && i < l->n && !x->failed && !x->flow; i++) run_node(x, l->v[i], dot);
    var_pop(x, mark);
}

/* One execution into out; cut: run nothing after that node id. */
static int run(const kgt *t, const json_t *data, int cut, gbudget *bg, gbuf *out, char *err, size_t errlen) {
    X *x = calloc(1, sizeof *x);
    if (!x) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    x->t = t;
    x->bg = bg;
    x->out = *out;
    x->out.limit = bg->max_out;
    x->cut = cut;
    x->err = err;
    x->errlen = errlen;
    json_t *root = json_incref((json_t *)data);
    if (var_push(x, "$", json_incref(root), 0) == 0) run_list(x, t->root, root);
    var_pop(x, 0);
    json_decref(root);
    *out = x->out;
    const int failed = x->failed;
    free(x);
    return failed ? -1 : 0;
}

static gbudget budget_of(const kct_opts *o) {
    gbudget b = {0};
    b.max_steps = o && o->max_steps ? o->max_steps : KCT_DEFAULT_STEPS;
    b.max_out = o && o->max_output ? o->max_output : KCT_DEFAULT_OUTPUT;
    b.max_mem = o && o->max_memory ? o->max_memory : KCT_DEFAULT_MEMORY;
    b.cancelled = o ? o->cancelled : NULL;
    b.cancel_arg = o ? o->cancel_arg : NULL;
    b.next_poll = KCT_POLL_STEPS < b.max_steps ? KCT_POLL_STEPS : b.max_steps + 1;
    return b;
}

char *kgt_render(const kgt *t, const json_t *data, char *err, size_t errlen) {
    return kgt_render_opts(t, data, NULL, err, errlen);
}

char *kgt_render_opts(const kgt *t, const json_t *data, const kct_opts *opts, char *err, size_t errlen) {
    char dummy[8];
    if (!err || !errlen) {
        err = dummy;
        errlen = sizeof dummy;
    }
    err[0] = 0;
    gbuf out = {0};
    gbudget bg = budget_of(opts);
    if (run(t, data, INT_MAX, &bg, &out, err, errlen)) {
        free(out.p);
        return NULL;
    }
    put(&out, "", 0);
    return out.p ? out.p : strdup("");
}

/* ---- Ollama's data model ---- */

static const char *role_of(const json_t *m) {
    const char *r = json_string_value(json_object_get(m, "role"));
    return r ? r : "user";
}

static const char *content_of(const json_t *m) {
    const char *c = json_string_value(json_object_get(m, "content"));
    return c ? c : "";
}

/* The message as Ollama's api.Message reads: thinking from
 * reasoning_content, tool_name from name. */
static json_t *as_message(const json_t *m) {
    json_t *c = json_is_object(m) ? json_deep_copy(m) : json_object();
    if (!c) return NULL;
    if (!json_is_string(json_object_get(c, "content"))) json_object_set_new(c, "content", json_string(""));
    json_t *rc = json_object_get(c, "reasoning_content");
    if (!json_object_get(c, "thinking") && json_is_string(rc)) json_object_set(c, "thinking", rc);
    json_t *nm = json_object_get(c, "name");
    if (!json_object_get(c, "tool_name") && json_is_string(nm)) json_object_set(c, "tool_name", nm);
    return c;
}

static json_t *think_vars(json_t *o, int think) {
    json_object_set_new(o, "Think", json_boolean(think > 0));
    json_object_set_new(o, "IsThinkSet", json_boolean(think >= 0));
    return o;
}

char *kgt_render_chat(const kgt *t, const json_t *messages, const json_t *tools, int think, char *err, size_t errlen) {
    return kgt_render_chat_opts(t, messages, tools, think, NULL, err, errlen);
}

char *kgt_render_chat_opts(const kgt *t, const json_t *messages, const json_t *tools, int think, const kct_opts *opts,
                           char *err, size_t errlen) {
    gbudget bg = budget_of(opts);
    char dummy[8];
    if (!err || !errlen) {
        err = dummy;
        errlen = sizeof dummy;
    }
    err[0] = 0;
    /* collated: system texts joined, consecutive same-role turns merged */
    gbuf sys = {0};
    json_t *coll = json_array();
    size_t i;
    json_t *m;
    json_array_foreach(messages, i, m) {
        const char *role = role_of(m);
        if (!strcmp(role, "system")) {
            if (sys.len || sys.p) put(&sys, "\n\n", 2);
            puts_(&sys, content_of(m));
        }
        json_t *last = json_array_get(coll, json_array_size(coll) - 1);
        if (last && !strcmp(role_of(last), role) && strcmp(role, "tool")) {
            gbuf b = {0};
            puts_(&b, content_of(last));
            put(&b, "\n\n", 2);
            puts_(&b, content_of(m));
            json_object_set_new(last, "content", json_stringn_nocheck(b.p ? b.p : "", b.len));
            free(b.p);
        } else {
            json_array_append_new(coll, as_message(m));
        }
    }
    gbuf out = {0};
    int rc = 0;
    if (t->uses_messages) {
        json_t *d = think_vars(json_object(), think);
        json_object_set_new(d, "System", json_stringn_nocheck(sys.p ? sys.p : "", sys.len));
        json_object_set(d, "Messages", coll);
        json_object_set_new(
            d, "Tools", json_is_array(tools) && json_array_size(tools) ? json_incref((json_t *)tools) : json_array());
        json_object_set_new(d, "Response", json_string(""));
        rc = run(t, d, INT_MAX, &bg, &out, err, errlen);
        json_decref(d);
    } else {
        /* one run per turn ({System, Prompt, Response}), the last one only
         * up to its .Response */
        const char *system = "", *prompt = "", *response = "";
        json_array_foreach(coll, i, m) {
            const char *role = role_of(m);
            int flush = (!strcmp(role, "system") && (*prompt || *response)) || (!strcmp(role, "user") && *response);
            if (flush) {
                json_t *d = think_vars(
                    json_pack("{s:s,s:s,s:s}", "System", system, "Prompt", prompt, "Response", response), think);
                rc = run(t, d, INT_MAX, &bg, &out, err, errlen);
                json_decref(d);
                system = prompt = response = "";
                if (rc) break;
            }
            if (!strcmp(role, "system"))
                system = content_of(m);
            else if (!strcmp(role, "user"))
                prompt = content_of(m);
            else if (!strcmp(role, "assistant"))
                response = content_of(m);
        }
        if (!rc) {
            json_t *d =
                think_vars(json_pack("{s:s,s:s,s:s}", "System", system, "Prompt", prompt, "Response", response), think);
            rc = run(t, d, t->cut_id, &bg, &out, err, errlen);
            json_decref(d);
        }
    }
    json_decref(coll);
    free(sys.p);
    if (rc || out.full) {
        if (!err[0]) snprintf(err, errlen, "out of memory");
        free(out.p);
        return NULL;
    }
    return out.p ? out.p : strdup("");
}
