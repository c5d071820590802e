/* parser.c — tokens to an AST by recursive descent, following Jinja2's
 * operator precedence.  Builtin filter and test names are resolved to
 * indices here, so an unknown one fails compilation with its position. */
#include "chat/jinja.h"

#include <stdio.h>
#include <stdlib.h>

/* --------------------------------------------------------------- parser */

static void nl_push(ctx *c, nlist *l, node *x) {
    if (l->n == l->cap) {
        int cap = l->cap ? l->cap * 2 : 4;
        node **nv = chat_ar_alloc(c, (size_t)cap * sizeof(node *));
        if (l->n) memcpy(nv, l->v, (size_t)l->n * sizeof(node *));
        l->v = nv;
        l->cap = cap;
    }
    l->v[l->n++] = x;
}

static node *mk_node(parser *P, int kind, const tok *at) {
    node *x = ar_zalloc(P->c, sizeof(node));
    x->kind = (uint8_t)kind;
    x->line = at->line;
    x->col = at->col;
    return x;
}

static tok *cur(parser *P) { return &P->t[P->i]; }
static tok *nexttok(parser *P) {
    tok *t = &P->t[P->i];
    if (P->i + 1 < P->n) P->i++;
    return t;
}
static int is_op(const tok *t, const char *op) { return t->type == T_OP && strcmp(t->op, op) == 0; }
static int is_name(const tok *t, const char *nm) { return t->type == T_NAME && str_is(t->s, nm); }

static const char *tok_desc(const tok *t, char *buf, size_t n) {
    switch (t->type) {
    case T_NAME: snprintf(buf, n, "'%.*s'", (int)(t->s.n > 40 ? 40 : t->s.n), t->s.p); break;
    case T_OP: snprintf(buf, n, "'%s'", t->op); break;
    case T_STRING: snprintf(buf, n, "string literal"); break;
    case T_INT:
    case T_FLOAT: snprintf(buf, n, "number"); break;
    case T_VAR_END: snprintf(buf, n, "end of print statement"); break;
    case T_BLOCK_END: snprintf(buf, n, "end of statement block"); break;
    case T_EOF: snprintf(buf, n, "end of template"); break;
    default: snprintf(buf, n, "template data"); break;
    }
    return buf;
}

static _Noreturn void unexpected(parser *P, const char *want) {
    char b[64];
    tok *t = cur(P);
    chat_fail(P->c, t->line, t->col, "expected %s, got %s", want, tok_desc(t, b, sizeof b));
}

static void expect_op(parser *P, const char *op) {
    if (!is_op(cur(P), op)) {
        char w[16];
        snprintf(w, sizeof w, "'%s'", op);
        unexpected(P, w);
    }
    nexttok(P);
}

static str expect_name(parser *P) {
    if (cur(P)->type != T_NAME) unexpected(P, "a name");
    return nexttok(P)->s;
}

/* One more link of a chain (a.b, x|f, a + b, ...): each makes the tree one
 * level deeper, so chains count against the nesting limit; the caller
 * restores P->depth when its chain ends. */
static void chain_link(parser *P, const tok *t) {
    if (++P->depth > MAX_PARSE_DEPTH) chat_fail(P->c, t->line, t->col, "expression chained too deeply");
}

/* One level of nesting: the depth count and the stack both bounded. */
static void nest(parser *P, const tok *t, const char *what) {
    if (++P->depth > MAX_PARSE_DEPTH || stack_deep(P->stack_floor))
        chat_fail(P->c, t->line, t->col, "%s nested too deeply", what);
}

static node *parse_expr(parser *P);
static node *parse_or(parser *P);
static node *parse_unary(parser *P, int with_filter);

/* (args, kw=args) after the opening parenthesis has been consumed. */
static void parse_call_args(parser *P, node *x) {
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
                str *nn = chat_ar_alloc(P->c, (size_t)capk * sizeof(str));
                if (nk) memcpy(nn, x->names, (size_t)nk * sizeof(str));
                x->names = nn;
            }
            x->names[nk++] = t->s;
            nl_push(P->c, &x->args2, parse_expr(P));
        } else {
            if (x->args2.n) chat_fail(P->c, t->line, t->col, "positional argument follows keyword argument");
            nl_push(P->c, &x->args, parse_expr(P));
        }
    }
    x->nnames = nk;
    nexttok(P);
}

static node *parse_primary(parser *P) {
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
        if (cur(P)->type != T_STRING) {
            x->lit = mk_str(t->s.p, t->s.n);
            return x;
        }
        sbuf b = {0};
        chat_sb_put(P->c, &b, t->s.p, t->s.n);
        while (cur(P)->type == T_STRING) {
            tok *u = nexttok(P);
            chat_sb_put(P->c, &b, u->s.p, u->s.n);
        }
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
        if (is_op(cur(P), ")")) {
            nexttok(P);
            return mk_node(P, E_TUPLE, t);
        }
        node *e = parse_expr(P);
        if (is_op(cur(P), ")")) {
            nexttok(P);
            return e;
        }
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

static node *parse_postfix(parser *P, node *x) {
    const int d0 = P->depth;
    for (;;) {
        tok *t = cur(P);
        if (is_op(t, ".") || is_op(t, "[") || is_op(t, "(")) chain_link(P, t);
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
            node *parts[3] = {NULL, NULL, NULL};
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
            if (slice) {
                y->b = parts[0];
                y->c = parts[1];
                nl_push(P->c, &y->args, parts[2]);
            } else {
                if (!parts[0]) chat_fail(P->c, t->line, t->col, "expected an index expression");
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
            P->depth = d0;
            return x;
        }
    }
}

static node *parse_filter_expr(parser *P, node *x) {
    const int d0 = P->depth;
    for (;;) {
        tok *t = cur(P);
        if (is_op(t, "|") || is_name(t, "is") || is_op(t, "(")) chain_link(P, t);
        if (is_op(t, "|")) {
            nexttok(P);
            tok *nt = cur(P);
            node *y = mk_node(P, E_FILTER, nt);
            y->a = x;
            y->name = expect_name(P);
            y->id = lookup_name(chat_filters, sizeof chat_filters / sizeof *chat_filters, y->name);
            if (y->id < 0) chat_fail(P->c, nt->line, nt->col, "unknown filter '%.*s'", (int)y->name.n, y->name.p);
            if (is_op(cur(P), "(")) {
                nexttok(P);
                parse_call_args(P, y);
            }
            x = y;
        } else if (is_name(t, "is")) {
            nexttok(P);
            node *y = mk_node(P, E_TEST, t);
            y->a = x;
            if (is_name(cur(P), "not")) {
                y->neg = 1;
                nexttok(P);
            }
            tok *nt = cur(P);
            if (nt->type == T_NAME)
                y->name = nt->s;
            else if (nt->type == T_OP && (is_op(nt, "==") || is_op(nt, "!=") || is_op(nt, "<") || is_op(nt, "<=") ||
                                          is_op(nt, ">") || is_op(nt, ">=")))
                y->name = (str){nt->op, strlen(nt->op)};
            else
                unexpected(P, "a test name");
            nexttok(P);
            y->id = lookup_name(chat_tests, sizeof chat_tests / sizeof *chat_tests, y->name);
            if (y->id < 0) chat_fail(P->c, nt->line, nt->col, "unknown test '%.*s'", (int)y->name.n, y->name.p);
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
            P->depth = d0;
            return x;
        }
    }
}

static node *parse_unary(parser *P, int with_filter) {
    tok *t = cur(P);
    node *x;
    nest(P, t, "expression");
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

static node *mk_bin(parser *P, int kind, int op, const tok *t, node *a, node *b) {
    node *x = mk_node(P, kind, t);
    x->op = (uint8_t)op;
    x->a = a;
    x->b = b;
    return x;
}

static node *parse_pow(parser *P) {
    const int d0 = P->depth;
    node *x = parse_unary(P, 1);
    while (is_op(cur(P), "**")) {
        tok *t = nexttok(P);
        chain_link(P, t);
        x = mk_bin(P, E_BIN, B_POW, t, x, parse_unary(P, 1));
    }
    P->depth = d0;
    return x;
}

static node *parse_math2(parser *P) {
    const int d0 = P->depth;
    node *x = parse_pow(P);
    for (;;) {
        tok *t = cur(P);
        int op = is_op(t, "*") ? B_MUL : is_op(t, "/") ? B_DIV : is_op(t, "//") ? B_FDIV : is_op(t, "%") ? B_MOD : -1;
        if (op < 0) break;
        nexttok(P);
        chain_link(P, t);
        x = mk_bin(P, E_BIN, op, t, x, parse_pow(P));
    }
    P->depth = d0;
    return x;
}

static node *parse_concat(parser *P) {
    const int d0 = P->depth;
    node *x = parse_math2(P);
    while (is_op(cur(P), "~")) {
        tok *t = nexttok(P);
        chain_link(P, t);
        x = mk_bin(P, E_BIN, B_CAT, t, x, parse_math2(P));
    }
    P->depth = d0;
    return x;
}

static node *parse_math1(parser *P) {
    const int d0 = P->depth;
    node *x = parse_concat(P);
    for (;;) {
        tok *t = cur(P);
        int op = is_op(t, "+") ? B_ADD : is_op(t, "-") ? B_SUB : -1;
        if (op < 0) break;
        nexttok(P);
        chain_link(P, t);
        x = mk_bin(P, E_BIN, op, t, x, parse_concat(P));
    }
    P->depth = d0;
    return x;
}

/* a < b < c becomes (a < b) and (b < c), as in Python (b is evaluated twice). */
static node *parse_compare(parser *P) {
    const int d0 = P->depth;
    node *x = parse_math1(P), *chain = NULL, *prev = x;
    for (;;) {
        tok *t = cur(P);
        int op = is_op(t, "==")     ? C_EQ
                 : is_op(t, "!=")   ? C_NE
                 : is_op(t, "<")    ? C_LT
                 : is_op(t, "<=")   ? C_LE
                 : is_op(t, ">")    ? C_GT
                 : is_op(t, ">=")   ? C_GE
                 : is_name(t, "in") ? C_IN
                                    : -1;
        if (op < 0 && is_name(t, "not") && P->i + 1 < P->n && is_name(&P->t[P->i + 1], "in")) {
            nexttok(P);
            op = C_NOTIN;
        }
        if (op < 0) break;
        nexttok(P);
        chain_link(P, t);
        node *rhs = parse_math1(P);
        node *cmp = mk_bin(P, E_CMP, op, t, prev, rhs);
        chain = chain ? mk_bin(P, E_AND, 0, t, chain, cmp) : cmp;
        prev = rhs;
    }
    P->depth = d0;
    return chain ? chain : x;
}

static node *parse_not(parser *P) {
    if (is_name(cur(P), "not")) {
        tok *t = nexttok(P);
        nest(P, t, "expression");
        node *x = mk_node(P, E_NOT, t);
        x->a = parse_not(P);
        P->depth--;
        return x;
    }
    return parse_compare(P);
}

static node *parse_and(parser *P) {
    const int d0 = P->depth;
    node *x = parse_not(P);
    while (is_name(cur(P), "and")) {
        tok *t = nexttok(P);
        chain_link(P, t);
        x = mk_bin(P, E_AND, 0, t, x, parse_not(P));
    }
    P->depth = d0;
    return x;
}

static node *parse_or(parser *P) {
    const int d0 = P->depth;
    node *x = parse_and(P);
    while (is_name(cur(P), "or")) {
        tok *t = nexttok(P);
        chain_link(P, t);
        x = mk_bin(P, E_OR, 0, t, x, parse_and(P));
    }
    P->depth = d0;
    return x;
}

static node *parse_expr(parser *P) {
    nest(P, cur(P), "expression");
    const int d0 = P->depth;
    node *x = parse_or(P);
    while (is_name(cur(P), "if")) {
        tok *t = nexttok(P);
        chain_link(P, t);
        node *y = mk_node(P, E_COND, t);
        y->a = parse_or(P); /* condition */
        y->b = x;           /* value when true */
        if (is_name(cur(P), "else")) {
            nexttok(P);
            y->c = parse_expr(P);
        }
        x = y;
    }
    P->depth = d0 - 1;
    return x;
}

/* expr[, expr...] as a tuple when a comma follows (set values, for iterables). */
static node *parse_tuple(parser *P, int with_cond) {
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
static void parse_targets(parser *P, node *x) {
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
    x->names = chat_ar_alloc(P->c, (size_t)n * sizeof(str));
    memcpy(x->names, tmp, (size_t)n * sizeof(str));
    x->nnames = n;
}

static void expect_block_end(parser *P) {
    if (cur(P)->type != T_BLOCK_END) unexpected(P, "end of statement block");
    nexttok(P);
}

static int tag_is_end(const tok *t, const char *ends) {
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

static node *parse_statement(parser *P) {
    tok *t = cur(P);
    if (t->type != T_NAME) unexpected(P, "a statement name");
    str kw = t->s;
    nexttok(P);
    nest(P, t, "blocks");
    node *res = parse_statement_kw(P, t, kw);
    P->depth--;
    return res;
}

static node *parse_statement_kw(parser *P, tok *t, str kw) {
    node *x;
    if (str_is(kw, "if")) {
        x = mk_node(P, N_IF, t);
        x->a = parse_expr(P);
        expect_block_end(P);
        chat_parse_body(P, &x->args, "elif else endif", t, "if");
        node *tail = x;
        const int d0 = P->depth; /* each elif nests one level deeper */
        for (;;) {
            tok *e = nexttok(P);
            if (str_is(e->s, "elif")) {
                if (++P->depth > MAX_PARSE_DEPTH) chat_fail(P->c, e->line, e->col, "too many elif branches");
                node *y = mk_node(P, N_IF, e);
                y->a = parse_expr(P);
                expect_block_end(P);
                chat_parse_body(P, &y->args, "elif else endif", t, "if");
                nl_push(P->c, &tail->args2, y);
                tail = y;
            } else if (str_is(e->s, "else")) {
                expect_block_end(P);
                chat_parse_body(P, &tail->args2, "endif", t, "if");
            } else {
                expect_block_end(P);
                P->depth = d0;
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
        if (is_name(cur(P), "if")) {
            nexttok(P);
            x->b = parse_expr(P);
        }
        if (is_name(cur(P), "recursive"))
            chat_fail(P->c, cur(P)->line, cur(P)->col, "recursive loops are not supported");
        expect_block_end(P);
        chat_parse_body(P, &x->args, "else endfor", t, "for");
        if (str_is(nexttok(P)->s, "else")) {
            expect_block_end(P);
            chat_parse_body(P, &x->args2, "endfor", t, "for");
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
        chat_parse_body(P, &x->args, "endset", t, "set");
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
                if (is_op(cur(P), "=")) {
                    nexttok(P);
                    def = parse_expr(P);
                }
                while (x->args2.n < n - 1) nl_push(P->c, &x->args2, NULL);
                nl_push(P->c, &x->args2, def);
            }
            nexttok(P);
        }
        x->names = chat_ar_alloc(P->c, (size_t)(n ? n : 1) * sizeof(str));
        memcpy(x->names, tmp, (size_t)n * sizeof(str));
        x->nnames = n;
        if (is_call) {
            tok *ct = cur(P);
            x->a = parse_expr(P);
            if (x->a->kind != E_CALL) chat_fail(P->c, ct->line, ct->col, "expected a macro call after 'call'");
        }
        expect_block_end(P);
        chat_parse_body(P, &x->args, is_call ? "endcall" : "endmacro", t, is_call ? "call" : "macro");
        nexttok(P);
        if (!is_call && cur(P)->type == T_NAME) nexttok(P); /* {% endmacro name %} */
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
            y->id = lookup_name(chat_filters, sizeof chat_filters / sizeof *chat_filters, y->name);
            if (y->id < 0) chat_fail(P->c, ft->line, ft->col, "unknown filter '%.*s'", (int)y->name.n, y->name.p);
            if (is_op(cur(P), "(")) {
                nexttok(P);
                parse_call_args(P, y);
            }
            x->b = parse_filter_expr(P, y);
        }
        expect_block_end(P);
        chat_parse_body(P, &x->args, is_filter ? "endfilter" : "endgeneration", t, is_filter ? "filter" : "generation");
        nexttok(P);
        expect_block_end(P);
        return x;
    }
    if (str_is(kw, "break") || str_is(kw, "continue")) {
        x = mk_node(P, kw.p[0] == 'b' ? N_BREAK : N_CONTINUE, t);
        expect_block_end(P);
        return x;
    }
    chat_fail(P->c, t->line, t->col, "unknown tag '%.*s'", (int)kw.n, kw.p);
}

void chat_parse_body(parser *P, nlist *out, const char *ends, const tok *opener, const char *opname) {
    for (;;) {
        tok *t = cur(P);
        switch (t->type) {
        case T_EOF:
            if (ends)
                chat_fail(P->c, opener->line, opener->col,
                          "unexpected end of template: '%s' block is not closed (expected '%s')", opname,
                          strrchr(ends, ' ') ? strrchr(ends, ' ') + 1 : ends);
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
            if (nt->type == T_NAME &&
                (str_is(nt->s, "endif") || str_is(nt->s, "endfor") || str_is(nt->s, "else") || str_is(nt->s, "elif") ||
                 str_is(nt->s, "endmacro") || str_is(nt->s, "endset") || str_is(nt->s, "endcall") ||
                 str_is(nt->s, "endfilter") || str_is(nt->s, "endgeneration"))) {
                if (ends)
                    chat_fail(P->c, nt->line, nt->col,
                              "unexpected '%.*s' inside '%s' block opened at %d:%d (expected '%s')", (int)nt->s.n,
                              nt->s.p, opname, opener->line, opener->col,
                              strrchr(ends, ' ') ? strrchr(ends, ' ') + 1 : ends);
                chat_fail(P->c, nt->line, nt->col, "unexpected '%.*s' with no open block", (int)nt->s.n, nt->s.p);
            }
            nl_push(P->c, out, parse_statement(P));
            break;
        }
        default: unexpected(P, "template data or a tag");
        }
    }
}
