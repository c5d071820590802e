/* value.c — the interpreter's memory and values: the arena both compile and
 * render allocate from (a failure longjmps out and frees it at once),
 * growable buffers, lists, dicts, and the Python semantics of values:
 * truthiness, str/repr/JSON formatting, equality, ordering, iteration, the
 * conversion of jansson input, and variable frames. */
#include "chat/jinja.h"

#include <ctype.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

/* ---------------------------------------------------------------- arena */

_Noreturn void chat_fail(ctx *c, int line, int col, const char *fmt, ...) {
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

void *chat_ar_alloc(ctx *c, size_t n) {
    if (n > SIZE_MAX / 2)
        chat_fail(c, 0, 0, c->mem_limit ? "render exceeded its memory budget (%zu bytes)" : "out of memory",
                  c->mem_limit);
    n = (n + 15) & ~(size_t)15;
    ablk *b = c->blocks;
    if (!b || b->cap - b->used < n) {
        size_t cap = n > 32768 ? n : 32768;
        if (c->mem_limit && (cap > c->mem_limit || c->mem_used > c->mem_limit - cap))
            chat_fail(c, 0, 0, "render exceeded its memory budget (%zu bytes)", c->mem_limit);
        b = malloc(sizeof(ablk) + cap);
        if (!b) chat_fail(c, 0, 0, "out of memory");
        c->mem_used += cap;
        b->cap = cap;
        b->used = 0;
        b->next = c->blocks;
        c->blocks = b;
    }
    void *p = b->data + b->used;
    b->used += n;
    return p;
}

void chat_sb_put(ctx *c, sbuf *b, const char *s, size_t n) {
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 256;
        while (cap < b->n + n + 1) cap *= 2;
        char *p = chat_ar_alloc(c, cap);
        if (b->n) memcpy(p, b->p, b->n);
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}

static void sb_printf(ctx *c, sbuf *b, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void sb_printf(ctx *c, sbuf *b, const char *fmt, ...) {
    char tmp[128];
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (k > 0) chat_sb_put(c, b, tmp, (size_t)k < sizeof tmp ? (size_t)k : sizeof tmp - 1);
}

/* --------------------------------------------------------------- values */

void chat_list_push(ctx *c, klist *l, kv x) {
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 4;
        kv *nv = chat_ar_alloc(c, cap * sizeof(kv));
        if (l->n) memcpy(nv, l->v, l->n * sizeof(kv));
        l->v = nv;
        l->cap = cap;
    }
    l->v[l->n++] = x;
}

void chat_dict_set(ctx *c, kdict *d, kv k, kv v) {
    kv *slot = dict_find(d, &k);
    if (slot) {
        *slot = v;
        return;
    }
    if (d->n == d->cap) {
        size_t cap = d->cap ? d->cap * 2 : 4;
        kv *nk = chat_ar_alloc(c, cap * sizeof(kv)), *nv = chat_ar_alloc(c, cap * sizeof(kv));
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

/* --------------------------------------------------------- value helpers */

static const char *const GLOBALS[] = {"range", "namespace", "dict", "raise_exception", "strftime_now"};

const char *chat_type_name(const kv *v) {
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

_Noreturn void chat_fail_at(rctx *r, const node *x, const char *fmt, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    chat_fail(&r->c, x ? x->line : 0, x ? x->col : 0, "%s", msg);
}

void chat_poll(rctx *r, const node *x) {
    if (r->max_steps && r->steps > r->max_steps)
        chat_fail_at(r, x, "render exceeded its step budget (%llu steps)", (unsigned long long)r->max_steps);
    if (r->cancelled && r->cancelled(r->cancel_arg)) chat_fail_at(r, x, "render cancelled");
    r->next_poll = r->steps + CHAT_POLL_STEPS;
    if (r->max_steps && r->next_poll > r->max_steps + 1) r->next_poll = r->max_steps + 1;
}

/* Enters the list or dict v for printing or dumping: 1 when v is already
 * being printed (it contains itself), else pushed (vpop leaves it). */
static int vpush(rctx *r, const node *x, const kv *v) {
    const void *p = v->t == V_LIST ? (const void *)v->l : (const void *)v->d;
    for (int i = 0; i < r->vdepth; i++)
        if (r->vstack[i] == p) return 1;
    if (r->vdepth == MAX_VALUE_DEPTH) chat_fail_at(r, x, "value nested too deeply (over %d levels)", MAX_VALUE_DEPTH);
    r->vstack[r->vdepth++] = p;
    chat_charge(r, x, 1);
    return 0;
}
static void vpop(rctx *r) { r->vdepth--; }

int chat_truthy(const kv *v) {
    switch (v->t) {
    case V_UNDEF:
    case V_NONE: return 0;
    case V_BOOL:
    case V_INT: return v->i != 0;
    case V_FLOAT: return v->f != 0.0;
    case V_STR: return v->s.n != 0;
    case V_LIST: return v->l->n != 0;
    case V_DICT: return v->d->n != 0;
    default: return 1;
    }
}

/* ---- Python float formatting (repr: shortest round-trip digits) */

static void fmt_pyfloat(double x, char *out, size_t on) {
    if (isnan(x)) {
        snprintf(out, on, "nan");
        return;
    }
    if (isinf(x)) {
        snprintf(out, on, x < 0 ? "-inf" : "inf");
        return;
    }
    if (x == 0) {
        snprintf(out, on, signbit(x) ? "-0.0" : "0.0");
        return;
    }
    char buf[48];
    for (int p = 1; p <= 17; p++) {
        snprintf(buf, sizeof buf, "%.*e", p - 1, x);
        if (strtod(buf, NULL) == x) break;
    }
    /* buf = [-]d[.ddd]e[+-]XX */
    char digits[24];
    int nd = 0, neg = buf[0] == '-';
    const char *q = buf + neg;
    for (; *q && *q != 'e'; q++)
        if (*q != '.') digits[nd++] = *q;
    digits[nd] = 0;
    int e = atoi(q + 1);
    char *o = out;
    size_t left = on;
#define EMIT(...)                                 \
    do {                                          \
        int k_ = snprintf(o, left, __VA_ARGS__);  \
        if (k_ < 0 || (size_t)k_ >= left) return; \
        o += k_;                                  \
        left -= (size_t)k_;                       \
    } while (0)
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
        if (nd > 1)
            EMIT("%c.%s", digits[0], digits + 1);
        else
            EMIT("%c", digits[0]);
        EMIT("e%c%02d", e < 0 ? '-' : '+', e < 0 ? -e : e);
    }
#undef EMIT
}

static void repr(rctx *r, sbuf *b, const kv *v);

/* Python str(v). */
void chat_to_str(rctx *r, sbuf *b, const kv *v) {
    ctx *c = &r->c;
    char tmp[48];
    switch (v->t) {
    case V_UNDEF: return;
    case V_NONE: sb_puts(c, b, "None"); return;
    case V_BOOL: sb_puts(c, b, v->i ? "True" : "False"); return;
    case V_INT: sb_printf(c, b, "%lld", (long long)v->i); return;
    case V_FLOAT:
        fmt_pyfloat(v->f, tmp, sizeof tmp);
        sb_puts(c, b, tmp);
        return;
    case V_STR: chat_sb_put(c, b, v->s.p, v->s.n); return;
    default: repr(r, b, v); return;
    }
}

static void repr_str(rctx *r, sbuf *b, str s) {
    ctx *c = &r->c;
    char q = memchr(s.p, '\'', s.n) && !memchr(s.p, '"', s.n) ? '"' : '\'';
    sb_putc(c, b, q);
    for (size_t i = 0; i < s.n; i++) {
        unsigned char ch = (unsigned char)s.p[i];
        if (ch == (unsigned char)q || ch == '\\') {
            sb_putc(c, b, '\\');
            sb_putc(c, b, (char)ch);
        } else if (ch == '\n')
            sb_puts(c, b, "\\n");
        else if (ch == '\r')
            sb_puts(c, b, "\\r");
        else if (ch == '\t')
            sb_puts(c, b, "\\t");
        else if (ch < 0x20 || ch == 0x7f)
            sb_printf(c, b, "\\x%02x", ch);
        else
            sb_putc(c, b, (char)ch);
    }
    sb_putc(c, b, q);
}

/* Python repr(v). */
static void repr(rctx *r, sbuf *b, const kv *v) {
    ctx *c = &r->c;
    switch (v->t) {
    case V_STR: repr_str(r, b, v->s); return;
    case V_LIST:
        if (vpush(r, NULL, v)) { /* Python prints a list inside itself as [...] */
            sb_puts(c, b, v->aux ? "(...)" : "[...]");
            return;
        }
        sb_putc(c, b, v->aux ? '(' : '[');
        for (size_t i = 0; i < v->l->n; i++) {
            if (i) sb_puts(c, b, ", ");
            repr(r, b, &v->l->v[i]);
        }
        if (v->aux && v->l->n == 1) sb_putc(c, b, ',');
        sb_putc(c, b, v->aux ? ')' : ']');
        vpop(r);
        return;
    case V_DICT:
        if (vpush(r, NULL, v)) {
            sb_puts(c, b, "{...}");
            return;
        }
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
        vpop(r);
        return;
    case V_FUNC: sb_puts(c, b, "<function>"); return;
    case V_LOOP: sb_puts(c, b, "<LoopContext>"); return;
    default: chat_to_str(r, b, v); return;
    }
}

static void json_str(rctx *r, sbuf *b, str s) {
    ctx *c = &r->c;
    sb_putc(c, b, '"');
    size_t run = 0;
    for (size_t i = 0; i < s.n; i++) {
        unsigned char ch = (unsigned char)s.p[i];
        const char *esc = NULL;
        char tmp[8];
        if (ch == '"')
            esc = "\\\"";
        else if (ch == '\\')
            esc = "\\\\";
        else if (ch == '\n')
            esc = "\\n";
        else if (ch == '\r')
            esc = "\\r";
        else if (ch == '\t')
            esc = "\\t";
        else if (ch == '\b')
            esc = "\\b";
        else if (ch == '\f')
            esc = "\\f";
        else if (ch < 0x20) {
            snprintf(tmp, sizeof tmp, "\\u%04x", ch);
            esc = tmp;
        }
        if (esc) {
            chat_sb_put(c, b, s.p + run, i - run);
            sb_puts(c, b, esc);
            run = i + 1;
        }
    }
    chat_sb_put(c, b, s.p + run, s.n - run);
    sb_putc(c, b, '"');
}

static void json_newline(rctx *r, sbuf *b, const jopts *o, int level) {
    sb_putc(&r->c, b, '\n');
    for (int i = 0; i < level; i++) chat_sb_put(&r->c, b, o->indent.p, o->indent.n);
}

void chat_json_dump(rctx *r, const node *x, sbuf *b, const kv *v, const jopts *o, int level) {
    ctx *c = &r->c;
    char tmp[48];
    switch (v->t) {
    case V_NONE: sb_puts(c, b, "null"); return;
    case V_BOOL: sb_puts(c, b, v->i ? "true" : "false"); return;
    case V_INT: sb_printf(c, b, "%lld", (long long)v->i); return;
    case V_FLOAT:
        if (isnan(v->f))
            sb_puts(c, b, "NaN");
        else if (isinf(v->f))
            sb_puts(c, b, v->f < 0 ? "-Infinity" : "Infinity");
        else {
            fmt_pyfloat(v->f, tmp, sizeof tmp);
            sb_puts(c, b, tmp);
        }
        return;
    case V_STR: json_str(r, b, v->s); return;
    case V_LIST:
        if (!v->l->n) {
            sb_puts(c, b, "[]");
            return;
        }
        if (vpush(r, x, v)) chat_fail_at(r, x, "tojson: circular reference detected");
        sb_putc(c, b, '[');
        for (size_t i = 0; i < v->l->n; i++) {
            if (i) chat_sb_put(c, b, o->item_sep.p, o->item_sep.n);
            if (o->has_indent) json_newline(r, b, o, level + 1);
            chat_json_dump(r, x, b, &v->l->v[i], o, level + 1);
        }
        if (o->has_indent) json_newline(r, b, o, level);
        sb_putc(c, b, ']');
        vpop(r);
        return;
    case V_DICT: {
        if (!v->d->n) {
            sb_puts(c, b, "{}");
            return;
        }
        if (vpush(r, x, v)) chat_fail_at(r, x, "tojson: circular reference detected");
        size_t n = v->d->n;
        size_t *ord = chat_ar_alloc(c, n * sizeof(size_t));
        for (size_t i = 0; i < n; i++) ord[i] = i;
        if (o->sort_keys) /* insertion sort: dicts in templates are small */
            for (size_t i = 1; i < n; i++)
                for (size_t j = i; j > 0 && chat_kv_cmp(r, x, &v->d->keys[ord[j - 1]], &v->d->keys[ord[j]]) > 0; j--) {
                    size_t t = ord[j];
                    ord[j] = ord[j - 1];
                    ord[j - 1] = t;
                }
        sb_putc(c, b, '{');
        for (size_t k = 0; k < n; k++) {
            const kv *key = &v->d->keys[ord[k]];
            if (k) chat_sb_put(c, b, o->item_sep.p, o->item_sep.n);
            if (o->has_indent) json_newline(r, b, o, level + 1);
            if (key->t == V_STR)
                json_str(r, b, key->s);
            else if (key->t == V_NONE || key->t == V_BOOL || key->t == V_INT || key->t == V_FLOAT) {
                sbuf kb = {0};
                chat_json_dump(r, x, &kb, key, o, 0);
                json_str(r, b, (str){kb.p, kb.n});
            } else
                chat_fail_at(r, x, "keys must be str, int, float, bool or None, not %s", chat_type_name(key));
            chat_sb_put(c, b, o->key_sep.p, o->key_sep.n);
            chat_json_dump(r, x, b, &v->d->vals[ord[k]], o, level + 1);
        }
        if (o->has_indent) json_newline(r, b, o, level);
        sb_putc(c, b, '}');
        vpop(r);
        return;
    }
    default: chat_fail_at(r, x, "Object of type %s is not JSON serializable", chat_type_name(v));
    }
}

/* Equality as Python's ==.  A list or dict is equal to itself without a
 * look inside (as Python's containers compare items by identity first), so
 * a value that contains itself compares; past MAX_VALUE_DEPTH levels two
 * distinct values are unequal.  *work counts the items and 64-byte blocks
 * of strings compared. */
static int kv_eq_d(const kv *a, const kv *b, int depth, uint64_t *work) {
    if (is_num(a) && is_num(b)) {
        if (a->t != V_FLOAT && b->t != V_FLOAT) return a->i == b->i;
        return num_f(a) == num_f(b);
    }
    if (a->t != b->t) return 0;
    switch (a->t) {
    case V_UNDEF:
    case V_NONE: return 1;
    case V_STR: *work += a->s.n / 64; return a->s.n == b->s.n && memcmp(a->s.p, b->s.p, a->s.n) == 0;
    case V_LIST:
        if (a->l == b->l && a->aux == b->aux) return 1;
        if (a->l->n != b->l->n || a->aux != b->aux || depth >= MAX_VALUE_DEPTH) return 0;
        for (size_t i = 0; i < a->l->n; i++) {
            ++*work;
            if (!kv_eq_d(&a->l->v[i], &b->l->v[i], depth + 1, work)) return 0;
        }
        return 1;
    case V_DICT:
        if (a->d == b->d) return 1;
        if (a->d->n != b->d->n || depth >= MAX_VALUE_DEPTH) return 0;
        for (size_t i = 0; i < a->d->n; i++) {
            *work += 1 + a->d->n / 8; /* the key's look-up is linear */
            kv *o = dict_find(b->d, &a->d->keys[i]);
            if (!o || !kv_eq_d(&a->d->vals[i], o, depth + 1, work)) return 0;
        }
        return 1;
    default: return a->fn == b->fn;
    }
}

int chat_kv_eq(const kv *a, const kv *b) {
    uint64_t work = 0;
    return kv_eq_d(a, b, 0, &work);
}

int chat_kv_eq_r(rctx *r, const node *x, const kv *a, const kv *b) {
    uint64_t work = 1;
    int eq = kv_eq_d(a, b, 0, &work);
    chat_charge(r, x, work);
    return eq;
}

/* Python ordering; TypeError for unordered pairs. */
static int kv_cmp_d(rctx *r, const node *x, const kv *a, const kv *b, int depth) {
    chat_charge(r, x, 1);
    if (a->t == V_UNDEF) undef_fail(r, x, a);
    if (b->t == V_UNDEF) undef_fail(r, x, b);
    if (is_num(a) && is_num(b)) {
        if (a->t != V_FLOAT && b->t != V_FLOAT) return (a->i > b->i) - (a->i < b->i);
        double p = num_f(a), q = num_f(b);
        return (p > q) - (p < q);
    }
    if (a->t == V_STR && b->t == V_STR) {
        size_t n = a->s.n < b->s.n ? a->s.n : b->s.n;
        chat_charge(r, x, n / 64);
        int k = memcmp(a->s.p, b->s.p, n);
        if (k) return k < 0 ? -1 : 1;
        return (a->s.n > b->s.n) - (a->s.n < b->s.n);
    }
    if (a->t == V_LIST && b->t == V_LIST) {
        if (a->l == b->l) return 0;
        if (depth >= MAX_VALUE_DEPTH)
            chat_fail_at(r, x, "comparison nested too deeply (over %d levels)", MAX_VALUE_DEPTH);
        for (size_t i = 0; i < a->l->n && i < b->l->n; i++) {
            if (chat_kv_eq_r(r, x, &a->l->v[i], &b->l->v[i])) continue;
            return kv_cmp_d(r, x, &a->l->v[i], &b->l->v[i], depth + 1);
        }
        return (a->l->n > b->l->n) - (a->l->n < b->l->n);
    }
    chat_fail_at(r, x, "'<' not supported between instances of '%s' and '%s'", chat_type_name(a), chat_type_name(b));
}

int chat_kv_cmp(rctx *r, const node *x, const kv *a, const kv *b) { return kv_cmp_d(r, x, a, b, 0); }

/* The items a for loop or a filter iterates: list items, dict keys, string
 * characters; nothing for undefined. */
kv *chat_iter_items(rctx *r, const node *x, const kv *v, size_t *n) {
    switch (v->t) {
    case V_UNDEF: *n = 0; return NULL;
    case V_LIST:
        *n = v->l->n;
        chat_charge(r, x, *n);
        return v->l->v;
    case V_DICT:
        *n = v->d->n;
        chat_charge(r, x, *n);
        return v->d->keys;
    case V_STR: {
        size_t cnt;
        size_t *off = cp_offsets(&r->c, v->s, &cnt);
        kv *out = chat_ar_alloc(&r->c, (cnt ? cnt : 1) * sizeof(kv));
        for (size_t i = 0; i < cnt; i++) out[i] = mk_str(v->s.p + off[i], off[i + 1] - off[i]);
        *n = cnt;
        return out;
    }
    default: chat_fail_at(r, x, "'%s' object is not iterable", chat_type_name(v));
    }
}

static kv json_to_kv_d(ctx *c, const json_t *j, int depth) {
    if (depth > CHAT_MAX_INPUT_DEPTH)
        chat_fail(c, 0, 0, "template variables nested too deeply (over %d levels)", CHAT_MAX_INPUT_DEPTH);
    switch (json_typeof(j)) {
    case JSON_OBJECT: {
        kv d = mk_dict(c, json_object_size(j));
        const char *k;
        json_t *val;
        json_object_foreach((json_t *)j, k, val) {
            size_t i = d.d->n++;
            d.d->keys[i] = mk_str(k, strlen(k));
            d.d->vals[i] = json_to_kv_d(c, val, depth + 1);
        }
        return d;
    }
    case JSON_ARRAY: {
        size_t n = json_array_size(j);
        kv l = mk_list(c, n);
        for (size_t i = 0; i < n; i++) l.l->v[i] = json_to_kv_d(c, json_array_get(j, i), depth + 1);
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

kv chat_json_to_kv(ctx *c, const json_t *j) { return json_to_kv_d(c, j, 0); }

/* ---- frames */

void chat_frame_set(ctx *c, frame *f, str k, kv v) {
    for (int i = 0; i < f->n; i++)
        if (f->keys[i].n == k.n && memcmp(f->keys[i].p, k.p, k.n) == 0) {
            f->vals[i] = v;
            return;
        }
    if (f->n == f->cap) {
        int cap = f->cap ? f->cap * 2 : 4;
        str *nk = chat_ar_alloc(c, (size_t)cap * sizeof(str));
        kv *nv = chat_ar_alloc(c, (size_t)cap * sizeof(kv));
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

kv chat_lookup(rctx *r, frame *f, str k) {
    uint64_t seen = 0; /* frames and names looked at: deep scopes make a look-up long */
    for (; f; f = f->parent) {
        seen += 1 + (uint64_t)f->n;
        for (int i = f->n - 1; i >= 0; i--)
            if (f->keys[i].n == k.n && memcmp(f->keys[i].p, k.p, k.n) == 0) {
                chat_charge(r, NULL, seen / 8);
                return f->vals[i];
            }
    }
    chat_charge(r, NULL, seen / 8);
    int g = lookup_name(GLOBALS, sizeof GLOBALS / sizeof *GLOBALS, k);
    if (g >= 0) {
        kv v = {.t = V_FUNC};
        v.fn = ar_zalloc(&r->c, sizeof(kfn));
        v.fn->kind = FN_GLOBAL;
        v.fn->id = g;
        v.fn->name = k;
        return v;
    }
    return mk_undef(U_NAME, 0, k.p, k.n);
}
