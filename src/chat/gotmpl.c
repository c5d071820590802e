/* Go text/template subset with Ollama's data model (gotmpl.h): rendering.
 *
 * Rendering walks the tree gotmpl_parse.c built with a variable stack;
 * values are jansson references, each evaluation returning one the caller
 * releases. */
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

/* The budgets of one render (chat_opts), shared by its runs. */
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

/* n steps of the budget (and, each CHAT_POLL_STEPS, the cancel check);
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
    b->next_poll = b->steps + CHAT_POLL_STEPS;
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

static gbudget budget_of(const chat_opts *o) {
    gbudget b = {0};
    b.max_steps = o && o->max_steps ? o->max_steps : CHAT_DEFAULT_STEPS;
    b.max_out = o && o->max_output ? o->max_output : CHAT_DEFAULT_OUTPUT;
    b.max_mem = o && o->max_memory ? o->max_memory : CHAT_DEFAULT_MEMORY;
    b.cancelled = o ? o->cancelled : NULL;
    b.cancel_arg = o ? o->cancel_arg : NULL;
    b.next_poll = CHAT_POLL_STEPS < b.max_steps ? CHAT_POLL_STEPS : b.max_steps + 1;
    return b;
}

static char *render_buf(const kgt *t, const json_t *data, const chat_opts *opts, char *err, size_t errlen) {
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

static char *render_chat_buf(const kgt *t, const json_t *messages, const json_t *tools, int think,
                             const chat_opts *opts, char *err, size_t errlen) {
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

static kiln_status rendered(char *res, const char *msg, char **out) {
    *out = res;
    return res ? KILN_OK : base_fail(chat_status_of(msg, KILN_ERR_INVALID_ARG), "%s", msg[0] ? msg : "out of memory");
}

kiln_status chat_gotmpl_render(const kgt *t, const json_t *data, char **out) {
    return chat_gotmpl_render_opts(t, data, NULL, out);
}

kiln_status chat_gotmpl_render_opts(const kgt *t, const json_t *data, const chat_opts *opts, char **out) {
    char msg[512] = "";
    return rendered(render_buf(t, data, opts, msg, sizeof msg), msg, out);
}

kiln_status chat_gotmpl_render_chat(const kgt *t, const json_t *messages, const json_t *tools, int think, char **out) {
    return chat_gotmpl_render_chat_opts(t, messages, tools, think, NULL, out);
}

kiln_status chat_gotmpl_render_chat_opts(const kgt *t, const json_t *messages, const json_t *tools, int think,
                                         const chat_opts *opts, char **out) {
    char msg[512] = "";
    return rendered(render_chat_buf(t, messages, tools, think, opts, msg, sizeof msg), msg, out);
}
