/*
 * jinja.h — private to src/chat/: the types and calls the files of the
 * template interpreter share (template.h is the public contract).
 *
 * Everything a compile or a render allocates comes from the arena in ctx;
 * a failure (chat_fail, chat_fail_at) longjmps to ctx.jb with the message in
 * ctx.err, so no call below returns an error code.
 */
#ifndef KILN_CHAT_JINJA_H
#define KILN_CHAT_JINJA_H

#include <jansson.h>
#include <setjmp.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "chat/template.h"

typedef struct ablk {
    struct ablk *next;
    size_t cap, used;
    _Alignas(16) char data[];
} ablk;

/* Shared by compile and render: the arena, the error buffer and the jump
 * target for failures. */
typedef struct ctx {
    ablk *blocks;
    jmp_buf jb;
    char *err;
    size_t errlen;
    size_t mem_used;  /* bytes the arena has taken from malloc */
    size_t mem_limit; /* 0: none (compile); a render's memory budget */
} ctx;

/* A growable byte buffer living in the arena. */
typedef struct sbuf {
    char *p;
    size_t n, cap;
} sbuf;

typedef struct str {
    const char *p;
    size_t n;
} str;

enum vt { V_UNDEF, V_NONE, V_BOOL, V_INT, V_FLOAT, V_STR, V_LIST, V_DICT, V_FUNC, V_LOOP };
/* Why a value is undefined, for Jinja2's error messages. */
enum { U_NAME, U_ATTR, U_ITEM };

typedef struct klist klist;
typedef struct kdict kdict;
typedef struct kfn kfn;
typedef struct kloop kloop;

typedef struct kv {
    uint8_t t;
    uint8_t aux;  /* V_LIST: 1 = tuple; V_UNDEF: U_* kind; V_DICT: 1 = namespace */
    uint8_t aux2; /* V_UNDEF: the type (enum vt) of the object that lacked the name */
    union {
        int64_t i;
        double f;
        str s; /* V_STR, and the missing name of V_UNDEF */
        klist *l;
        kdict *d;
        kfn *fn;
        kloop *loop;
    };
} kv;

struct klist {
    kv *v;
    size_t n, cap;
};
struct kdict {
    kv *keys;
    kv *vals;
    size_t n, cap;
};

static const kv UNDEF = {.t = V_UNDEF};
static const kv NONE = {.t = V_NONE};

enum tk { T_DATA, T_VAR_BEGIN, T_VAR_END, T_BLOCK_BEGIN, T_BLOCK_END, T_NAME, T_STRING, T_INT, T_FLOAT, T_OP, T_EOF };

typedef struct tok {
    uint8_t type;
    char op[3]; /* T_OP: the operator, NUL-terminated */
    int line, col;
    str s; /* T_DATA, T_NAME, T_STRING (decoded) */
    int64_t i;
    double f;
} tok;

typedef struct lexer {
    ctx *c;
    const char *src;
    size_t len, pos;
    int line;
    size_t line_start; /* offset of the current line, for columns */
    tok *toks;
    size_t n, cap;
} lexer;

enum nk {
    /* statements */
    N_DATA,
    N_OUTPUT,
    N_IF,
    N_FOR,
    N_SET,
    N_SETATTR,
    N_SETBLOCK,
    N_MACRO,
    N_CALLBLOCK,
    N_BREAK,
    N_CONTINUE,
    N_SCOPE,
    /* expressions */
    E_LIT,
    E_NAME,
    E_LIST,
    E_TUPLE,
    E_DICT,
    E_ATTR,
    E_ITEM,
    E_SLICE,
    E_CALL,
    E_FILTER,
    E_TEST,
    E_NOT,
    E_NEG,
    E_POS,
    E_BIN,
    E_AND,
    E_OR,
    E_COND,
    E_CMP
};

enum binop { B_ADD, B_SUB, B_MUL, B_DIV, B_FDIV, B_MOD, B_POW, B_CAT };
enum cmpop { C_EQ, C_NE, C_LT, C_LE, C_GT, C_GE, C_IN, C_NOTIN };

typedef struct node node;
typedef struct nlist {
    node **v;
    int n, cap;
} nlist;

struct node {
    uint8_t kind, op;
    uint8_t neg; /* E_TEST: "is not" */
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

/* Nesting limits keep hostile templates from exhausting the C stack:
 * MAX_PARSE_DEPTH bounds nested expressions and blocks and each chain of
 * postfix, filter and operator links; MAX_EVAL_DEPTH the evaluator's own
 * recursion (expressions, bodies, macro calls together); MAX_VALUE_DEPTH
 * the nesting of a value that is printed, dumped or compared. */
enum { MAX_PARSE_DEPTH = 200, MAX_CALL_DEPTH = 100, MAX_EVAL_DEPTH = 1000, MAX_VALUE_DEPTH = 512 };
/* The C stack the parser or the evaluator may use below its entry, whatever
 * the depth counts say (frames differ by function and by build: sanitizers
 * make them several times larger): CHAT_MAX_STACK, or half of what the
 * thread has left when that is less (template.c's chat_stack_floor). */
#define CHAT_MAX_STACK ((uintptr_t)2 << 20)

static inline uintptr_t stack_here(void) { return (uintptr_t)__builtin_frame_address(0); }
/* The lowest stack address a parse or render begun here may reach. */
uintptr_t chat_stack_floor(void);
/* 1 when the stack has grown below floor */
static inline int stack_deep(uintptr_t floor) { return stack_here() < floor; }
/* the nesting of the variables a render is given (jansson reads JSON up to
 * 2048 deep) */
enum { CHAT_MAX_INPUT_DEPTH = 4096 };

typedef struct parser {
    ctx *c;
    tok *t;
    size_t i, n;
    int depth;             /* expression and block nesting */
    uintptr_t stack_floor; /* chat_stack_floor at the parse's entry */
} parser;

enum {
    F_ABS,
    F_ATTR,
    F_CAPITALIZE,
    F_COUNT,
    F_D,
    F_DEFAULT,
    F_DICTSORT,
    F_E,
    F_ESCAPE,
    F_FIRST,
    F_FLOAT,
    F_INDENT,
    F_INT,
    F_ITEMS,
    F_JOIN,
    F_LAST,
    F_LENGTH,
    F_LIST,
    F_LOWER,
    F_MAP,
    F_MAX,
    F_MIN,
    F_REJECT,
    F_REJECTATTR,
    F_REPLACE,
    F_REVERSE,
    F_ROUND,
    F_SAFE,
    F_SELECT,
    F_SELECTATTR,
    F_SORT,
    F_STRING,
    F_SUM,
    F_TITLE,
    F_TOJSON,
    F_TRIM,
    F_UNIQUE,
    F_UPPER,
    F_WORDCOUNT,
    F_N /* how many */
};

enum {
    X_BOOLEAN,
    X_CALLABLE,
    X_DEFINED,
    X_DIVISIBLEBY,
    X_EQ,
    X_EQUALTO,
    X_ESCAPED,
    X_EVEN,
    X_FALSE,
    X_FILTER,
    X_FLOAT,
    X_GE,
    X_GREATERTHAN,
    X_GT,
    X_IN,
    X_INTEGER,
    X_ITERABLE,
    X_LE,
    X_LESSTHAN,
    X_LOWER,
    X_LT,
    X_MAPPING,
    X_NE,
    X_NONE,
    X_NUMBER,
    X_ODD,
    X_SAMEAS,
    X_SEQUENCE,
    X_STRING,
    X_TEST,
    X_TRUE,
    X_UNDEFINED,
    X_UPPER,
    X_SYM_EQ,
    X_SYM_NE,
    X_SYM_LT,
    X_SYM_LE,
    X_SYM_GT,
    X_SYM_GE,
    X_N /* how many */
};

typedef struct frame {
    struct frame *parent;
    int n, cap;
    str *keys;
    kv *vals;
} frame;

enum { FN_GLOBAL, FN_METHOD, FN_MACRO, FN_CALLER };
enum { G_RANGE, G_NAMESPACE, G_DICT, G_RAISE, G_STRFTIME };

struct kfn {
    int kind, id;
    str name;        /* method name; macro name */
    kv self;         /* bound receiver of a method */
    const node *def; /* macro definition or call block */
    frame *closure;  /* scope the macro or caller body sees */
};

struct kloop {
    kv *items;
    int64_t n, i;
};

typedef struct rctx {
    ctx c;
    int has_now;
    int64_t now;
    int call_depth;        /* macro calls in progress */
    int depth;             /* evaluator frames in progress (eval, bodies) */
    uintptr_t stack_floor; /* chat_stack_floor at the render's entry */
    /* the lists and dicts being printed or dumped, outermost first: a
     * value that contains itself is found here */
    const void *vstack[MAX_VALUE_DEPTH];
    int vdepth;
    /* budgets (template.h chat_opts) */
    uint64_t steps, max_steps, next_poll;
    size_t max_output;
    int (*cancelled)(void *arg);
    void *cancel_arg;
} rctx;

/* json.dumps(v, ensure_ascii=False, indent=..., separators=..., sort_keys=...) */
typedef struct jopts {
    str indent;
    int has_indent;
    str item_sep, key_sep;
    int sort_keys;
} jopts;

typedef struct args {
    kv *pos;
    int npos;
    kv *kw;
    str *kwn;
    int nkw;
} args;

/* value.c: the arena, buffers, lists and dicts; failing with a message */
_Noreturn void chat_fail(ctx *c, int line, int col, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
void *chat_ar_alloc(ctx *c, size_t n);
void chat_sb_put(ctx *c, sbuf *b, const char *s, size_t n);
void chat_list_push(ctx *c, klist *l, kv x);
void chat_dict_set(ctx *c, kdict *d, kv k, kv v);
_Noreturn void chat_fail_at(rctx *r, const node *x, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* The step budget and the cancel check (rctx); chat_charge adds n steps. */
void chat_poll(rctx *r, const node *x);
/* One more level of the evaluator's recursion (r->depth-- leaves it). */
static inline void chat_enter(rctx *r, const node *x) {
    if (++r->depth > MAX_EVAL_DEPTH || stack_deep(r->stack_floor))
        chat_fail_at(r, x, "template nested too deeply (over %d levels)", MAX_EVAL_DEPTH);
}
static inline void chat_charge(rctx *r, const node *x, uint64_t n) {
    r->steps += n;
    if (r->steps >= r->next_poll) chat_poll(r, x);
}

/* value.c: Python semantics of values, jansson input, frames */
const char *chat_type_name(const kv *v);
int chat_truthy(const kv *v);
void chat_to_str(rctx *r, sbuf *b, const kv *v);
void chat_json_dump(rctx *r, const node *x, sbuf *b, const kv *v, const jopts *o, int level);
int chat_kv_eq(const kv *a, const kv *b);
int chat_kv_eq_r(rctx *r, const node *x, const kv *a, const kv *b); /* chat_kv_eq, its work charged to the budget */
int chat_kv_cmp(rctx *r, const node *x, const kv *a, const kv *b);
kv *chat_iter_items(rctx *r, const node *x, const kv *v, size_t *n);
kv chat_json_to_kv(ctx *c, const json_t *j);
void chat_frame_set(ctx *c, frame *f, str k, kv v);
kv chat_lookup(rctx *r, frame *f, str k);

/* lexer.c: the tokens of L->src into L->toks */
void chat_lex(lexer *L);

/* parser.c: statements up to one of the end tags in ends (a space-separated list) */
void chat_parse_body(parser *P, nlist *out, const char *ends, const tok *opener, const char *opname);

/* eval.c */
kv chat_get_attr(rctx *r, const node *x, const kv *obj, str name);
kv chat_get_item(rctx *r, const node *x, const kv *obj, const kv *key);
int chat_exec_body(rctx *r, const nlist *body, frame *f, sbuf *out);

/* filters.c: builtins by index (F_*, X_*, G_*), methods by name */
extern const char *const chat_filters[F_N];
extern const char *const chat_tests[X_N];
kv chat_call_method(rctx *r, const node *x, const kfn *fn, const args *a);
int chat_kv_contains(rctx *r, const node *x, const kv *hay, const kv *item);
int chat_test_apply(rctx *r, const node *x, int id, const kv *v, const args *a);
kv chat_filter_apply(rctx *r, const node *x, int id, const kv *v, const args *a);
kv chat_call_global(rctx *r, const node *x, const kfn *fn, const args *a);

/* small helpers every file uses (Python indexes strings by code point:
 * the cp_* calls) */
static inline void *ar_zalloc(ctx *c, size_t n) {
    void *p = chat_ar_alloc(c, n);
    memset(p, 0, n);
    return p;
}

static inline void ar_free(ctx *c) {
    for (ablk *b = c->blocks, *nx; b; b = nx) {
        nx = b->next;
        free(b);
    }
    c->blocks = NULL;
}

static inline char *ar_strdup(ctx *c, const char *s, size_t n) {
    char *p = chat_ar_alloc(c, n + 1);
    memcpy(p, s, n);
    p[n] = 0;
    return p;
}

static inline void sb_puts(ctx *c, sbuf *b, const char *s) { chat_sb_put(c, b, s, strlen(s)); }
static inline void sb_putc(ctx *c, sbuf *b, char ch) { chat_sb_put(c, b, &ch, 1); }

static inline kv mk_bool(int b) {
    kv v = {.t = V_BOOL};
    v.i = b != 0;
    return v;
}
static inline kv mk_int(int64_t i) {
    kv v = {.t = V_INT};
    v.i = i;
    return v;
}
static inline kv mk_float(double f) {
    kv v = {.t = V_FLOAT};
    v.f = f;
    return v;
}
static inline kv mk_str(const char *p, size_t n) {
    kv v = {.t = V_STR};
    v.s.p = p;
    v.s.n = n;
    return v;
}
static inline kv mk_undef(int kind, int objtype, const char *name, size_t n) {
    kv v = {.t = V_UNDEF, .aux = (uint8_t)kind, .aux2 = (uint8_t)objtype};
    v.s.p = name;
    v.s.n = n;
    return v;
}

static inline kv mk_list(ctx *c, size_t cap) {
    kv v = {.t = V_LIST};
    v.l = ar_zalloc(c, sizeof(klist));
    v.l->cap = cap ? cap : 4;
    v.l->v = chat_ar_alloc(c, v.l->cap * sizeof(kv));
    return v;
}

static inline kv mk_dict(ctx *c, size_t cap) {
    kv v = {.t = V_DICT};
    v.d = ar_zalloc(c, sizeof(kdict));
    v.d->cap = cap ? cap : 4;
    v.d->keys = chat_ar_alloc(c, v.d->cap * sizeof(kv));
    v.d->vals = chat_ar_alloc(c, v.d->cap * sizeof(kv));
    return v;
}

static inline int str_eq(str a, const char *b, size_t bn) { return a.n == bn && memcmp(a.p, b, bn) == 0; }
static inline int str_is(str a, const char *lit) { return str_eq(a, lit, strlen(lit)); }

static inline kv *dict_find_str(const kdict *d, const char *k, size_t kn) {
    for (size_t i = 0; i < d->n; i++)
        if (d->keys[i].t == V_STR && str_eq(d->keys[i].s, k, kn)) return &d->vals[i];
    return NULL;
}

static inline kv *dict_find(const kdict *d, const kv *k) {
    if (k->t == V_STR) return dict_find_str(d, k->s.p, k->s.n);
    for (size_t i = 0; i < d->n; i++)
        if (chat_kv_eq(&d->keys[i], k)) return &d->vals[i];
    return NULL;
}

static inline int is_ws(char ch) {
    return ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r' || ch == '\v' || ch == '\f';
}

static inline void put_utf8(ctx *c, sbuf *b, uint32_t cp) {
    uint8_t tmp[4];
    utf8proc_ssize_t k = utf8proc_encode_char((utf8proc_int32_t)cp, tmp);
    chat_sb_put(c, b, (const char *)tmp, (size_t)k);
}

static inline int lookup_name(const char *const *tab, size_t n, str s) {
    for (size_t i = 0; i < n; i++)
        if (str_is(s, tab[i])) return (int)i;
    return -1;
}

/* Raises Jinja2's UndefinedError for an undefined value being used. */
static inline _Noreturn void undef_fail(rctx *r, const node *x, const kv *u) {
    static const char *const objn[] = {"Undefined", "None", "bool", "int",      "float",
                                       "str",       "list", "dict", "function", "LoopContext"};
    const char *on = u->aux2 < sizeof objn / sizeof *objn ? objn[u->aux2] : "object";
    if (u->aux == U_NAME) chat_fail_at(r, x, "'%.*s' is undefined", (int)u->s.n, u->s.p);
    if (u->aux2 == V_NONE) chat_fail_at(r, x, "'None' has no attribute '%.*s'", (int)u->s.n, u->s.p);
    if (u->aux == U_ITEM) chat_fail_at(r, x, "'%s object' has no element %.*s", on, (int)u->s.n, u->s.p);
    chat_fail_at(r, x, "'%s object' has no attribute '%.*s'", on, (int)u->s.n, u->s.p);
}

static inline int is_num(const kv *v) { return v->t == V_INT || v->t == V_FLOAT || v->t == V_BOOL; }
static inline double num_f(const kv *v) { return v->t == V_FLOAT ? v->f : (double)v->i; }

static inline int is_ascii(str s) {
    for (size_t i = 0; i < s.n; i++)
        if ((unsigned char)s.p[i] >= 0x80) return 0;
    return 1;
}

static inline size_t cp_count(str s) {
    size_t n = 0;
    for (size_t i = 0; i < s.n; i++) n += ((unsigned char)s.p[i] & 0xC0) != 0x80;
    return n;
}

/* Byte offsets of each code point, plus one for the end (n + 1 entries). */
static inline size_t *cp_offsets(ctx *c, str s, size_t *n) {
    size_t cnt = cp_count(s), k = 0;
    size_t *off = chat_ar_alloc(c, (cnt + 1) * sizeof(size_t));
    for (size_t i = 0; i < s.n; i++)
        if (((unsigned char)s.p[i] & 0xC0) != 0x80) off[k++] = i;
    off[cnt] = s.n;
    *n = cnt;
    return off;
}

static inline uint32_t cp_decode(const char *p, size_t n, size_t *adv) {
    utf8proc_int32_t cp;
    utf8proc_ssize_t k = utf8proc_iterate((const utf8proc_uint8_t *)p, (utf8proc_ssize_t)n, &cp);
    if (k <= 0) {
        *adv = 1;
        return (unsigned char)p[0];
    }
    *adv = (size_t)k;
    return (uint32_t)cp;
}

static inline int py_isspace(uint32_t cp) {
    if (cp < 128) return cp == ' ' || (cp >= 9 && cp <= 13) || (cp >= 0x1c && cp <= 0x1f);
    return cp == 0x85 || cp == 0xa0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200a) || cp == 0x2028 || cp == 0x2029 ||
           cp == 0x202f || cp == 0x205f || cp == 0x3000;
}

static inline str kv_tostr(rctx *r, const kv *v) {
    if (v->t == V_STR) return v->s;
    sbuf b = {0};
    chat_sb_put(&r->c, &b, "", 0);
    chat_to_str(r, &b, v);
    return (str){b.p, b.n};
}

static inline kv list_of(rctx *r, const node *x, const kv *v) {
    size_t n;
    kv *it = chat_iter_items(r, x, v, &n);
    kv out = mk_list(&r->c, n);
    if (n) memcpy(out.l->v, it, n * sizeof(kv));
    out.l->n = n;
    return out;
}

static inline frame *new_frame(ctx *c, frame *parent) {
    frame *f = chat_ar_alloc(c, sizeof(frame));
    f->parent = parent;
    f->n = f->cap = 0;
    f->keys = NULL;
    f->vals = NULL;
    return f;
}

/* Argument number idx (positional) or named `name`; 0 when absent. */
static inline int arg_get(const args *a, int idx, const char *name, kv *out) {
    if (idx >= 0 && idx < a->npos) {
        *out = a->pos[idx];
        return 1;
    }
    if (name)
        for (int i = 0; i < a->nkw; i++)
            if (str_is(a->kwn[i], name)) {
                *out = a->kw[i];
                return 1;
            }
    return 0;
}

static inline kv arg_or(const args *a, int idx, const char *name, kv def) {
    kv v;
    return arg_get(a, idx, name, &v) ? v : def;
}

static inline kv need_str(rctx *r, const node *x, const kv *v, const char *what) {
    if (v->t == V_UNDEF) undef_fail(r, x, v);
    if (v->t != V_STR) chat_fail_at(r, x, "%s expects a string, got %s", what, chat_type_name(v));
    return *v;
}

#endif
