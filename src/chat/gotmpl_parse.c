/* Go text/template subset (gotmpl.h): compiling.
 *
 * The source is cut into items (text, and the tokens of each action) with
 * the trim markers applied, then parsed into the tree of gotmpl_tree.h. */
#include "base/base.h"
#include "chat/gotmpl_tree.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- arena ---- */

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

void chat_gotmpl_free(kgt *t) {
    if (!t) return;
    arena_free(t->arena);
    free(t);
}

static kgt *compile_buf(const char *src, size_t len, char *err, size_t errlen) {
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
        chat_gotmpl_free(t);
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
        chat_gotmpl_free(t);
        return NULL;
    }
    return t;
}

kiln_status chat_gotmpl_compile(const char *src, size_t len, kgt **out) {
    char msg[512] = "";
    *out = compile_buf(src, len, msg, sizeof msg);
    return *out ? KILN_OK : base_fail(chat_status_of(msg, KILN_ERR_FORMAT), "%s", msg[0] ? msg : "out of memory");
}
