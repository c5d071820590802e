/* filters.c — the builtins templates call: string, list and dict methods,
 * tests (`is defined`, `is string`, ...), filters (`|tojson`, `|join`,
 * `|selectattr`, ...) and globals (range, namespace, dict,
 * raise_exception, strftime_now). */
#define _GNU_SOURCE /* memmem: linear time, where a naive search is quadratic */
#include "chat/jinja.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

/* Names of the builtin filters and tests in the order of F_* and X_*
 * (jinja.h declares their sizes, so a name missing here fails to compile).
 * The parser resolves names to indices, so an unknown one fails
 * compilation with its position. */
const char *const chat_filters[] = {
    "abs",   "attr",   "capitalize", "count",      "d",       "default", "dictsort", "e",     "escape",    "first",
    "float", "indent", "int",        "items",      "join",    "last",    "length",   "list",  "lower",     "map",
    "max",   "min",    "reject",     "rejectattr", "replace", "reverse", "round",    "safe",  "select",    "selectattr",
    "sort",  "string", "sum",        "title",      "tojson",  "trim",    "unique",   "upper", "wordcount",
};

const char *const chat_tests[] = {
    "boolean",  "callable", "defined",  "divisibleby", "eq",          "equalto", "escaped", "even",
    "false",    "filter",   "float",    "ge",          "greaterthan", "gt",      "in",      "integer",
    "iterable", "le",       "lessthan", "lower",       "lt",          "mapping", "ne",      "none",
    "number",   "odd",      "sameas",   "sequence",    "string",      "test",    "true",    "undefined",
    "upper",    "==",       "!=",       "<",           "<=",          ">",       ">=",
};

/* ---- string helpers */

static uint32_t cp_upper(uint32_t c) {
    return c < 128 ? (uint32_t)toupper((int)c) : (uint32_t)utf8proc_toupper((utf8proc_int32_t)c);
}
static uint32_t cp_lower(uint32_t c) {
    return c < 128 ? (uint32_t)tolower((int)c) : (uint32_t)utf8proc_tolower((utf8proc_int32_t)c);
}
static int cp_cased(uint32_t c) { return cp_upper(c) != c || cp_lower(c) != c; }

/* mode 0: map every code point; 1: capitalize; 2: Python str.title; 3: Jinja2's title filter */
typedef uint32_t (*cpmap)(uint32_t);

static kv str_case(rctx *r, str s, cpmap fn, int mode) {
    if (is_ascii(s) && mode == 0) {
        char *p = chat_ar_alloc(&r->c, s.n + 1);
        for (size_t i = 0; i < s.n; i++) p[i] = (char)fn((unsigned char)s.p[i]);
        p[s.n] = 0;
        return mk_str(p, s.n);
    }
    sbuf b = {0};
    chat_sb_put(&r->c, &b, "", 0);
    int prev_cased = 0, word_start = 1;
    for (size_t i = 0; i < s.n;) {
        size_t adv;
        uint32_t cp = cp_decode(s.p + i, s.n - i, &adv);
        uint32_t o;
        if (mode == 0)
            o = fn(cp);
        else if (mode == 1)
            o = i == 0 ? cp_upper(cp) : cp_lower(cp);
        else if (mode == 2) {
            o = prev_cased ? cp_lower(cp) : cp_upper(cp);
            prev_cased = cp_cased(cp);
        } else {
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
static kv str_strip(rctx *r, str s, const kv *chars, int which) {
    (void)r;
    size_t b = 0, e = s.n;
    int ws = !chars || chars->t == V_NONE || chars->t == V_UNDEF;
    str cs = ws ? (str){"", 0} : chars->s;
    if (which & 1)
        while (b < e) {
            size_t adv;
            uint32_t cp = cp_decode(s.p + b, e - b, &adv);
            int in = 0;
            if (ws)
                in = py_isspace(cp);
            else
                for (size_t k = 0; k < cs.n;) {
                    size_t a2;
                    if (cp_decode(cs.p + k, cs.n - k, &a2) == cp) {
                        in = 1;
                        break;
                    }
                    k += a2;
                }
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
            if (ws)
                in = py_isspace(cp);
            else
                for (size_t k = 0; k < cs.n;) {
                    size_t a2;
                    if (cp_decode(cs.p + k, cs.n - k, &a2) == cp) {
                        in = 1;
                        break;
                    }
                    k += a2;
                }
            if (!in) break;
            e = st;
        }
    return mk_str(s.p + b, e - b);
}

static const char *memmem_s(str h, size_t from, str nd) {
    if (nd.n == 0) return h.p + from;
    if (h.n < nd.n || from > h.n - nd.n) return NULL;
    return memmem(h.p + from, h.n - from, nd.p, nd.n);
}

static kv str_replace(rctx *r, str s, str old, str new_, int64_t count) {
    sbuf b = {0};
    chat_sb_put(&r->c, &b, "", 0);
    if (old.n == 0) {
        /* Python inserts `new` between code points (and at both ends) */
        int64_t done = 0;
        for (size_t i = 0; i <= s.n;) {
            if (count < 0 || done < count) {
                chat_sb_put(&r->c, &b, new_.p, new_.n);
                done++;
            }
            if (i == s.n) break;
            size_t adv;
            cp_decode(s.p + i, s.n - i, &adv);
            chat_sb_put(&r->c, &b, s.p + i, adv);
            i += adv;
        }
        return mk_str(b.p, b.n);
    }
    size_t pos = 0;
    int64_t done = 0;
    const char *hit;
    while ((count < 0 || done < count) && (hit = memmem_s(s, pos, old)) != NULL) {
        size_t at = (size_t)(hit - s.p);
        chat_sb_put(&r->c, &b, s.p + pos, at - pos);
        chat_sb_put(&r->c, &b, new_.p, new_.n);
        pos = at + old.n;
        done++;
    }
    chat_sb_put(&r->c, &b, s.p + pos, s.n - pos);
    return mk_str(b.p, b.n);
}

static kv str_split(rctx *r, const node *x, str s, const kv *sep, int64_t maxsplit) {
    kv out = mk_list(&r->c, 4);
    if (!sep || sep->t == V_NONE || sep->t == V_UNDEF) {
        size_t i = 0;
        int64_t done = 0;
        for (;;) {
            while (i < s.n) {
                size_t adv;
                if (!py_isspace(cp_decode(s.p + i, s.n - i, &adv))) break;
                i += adv;
            }
            if (i >= s.n) break;
            if (maxsplit >= 0 && done >= maxsplit) {
                size_t e = s.n;
                while (e > i) {
                    size_t st = e - 1, adv;
                    while (st > i && ((unsigned char)s.p[st] & 0xC0) == 0x80) st--;
                    if (!py_isspace(cp_decode(s.p + st, e - st, &adv))) break;
                    e = st;
                }
                chat_list_push(&r->c, out.l, mk_str(s.p + i, e - i));
                break;
            }
            size_t st = i;
            while (i < s.n) {
                size_t adv;
                if (py_isspace(cp_decode(s.p + i, s.n - i, &adv))) break;
                i += adv;
            }
            chat_list_push(&r->c, out.l, mk_str(s.p + st, i - st));
            done++;
        }
        return out;
    }
    str sp = need_str(r, x, sep, "split").s;
    if (!sp.n) chat_fail_at(r, x, "empty separator");
    size_t pos = 0;
    int64_t done = 0;
    const char *hit;
    while ((maxsplit < 0 || done < maxsplit) && (hit = memmem_s(s, pos, sp)) != NULL) {
        size_t at = (size_t)(hit - s.p);
        chat_list_push(&r->c, out.l, mk_str(s.p + pos, at - pos));
        pos = at + sp.n;
        done++;
    }
    chat_list_push(&r->c, out.l, mk_str(s.p + pos, s.n - pos));
    return out;
}

static int str_affix1(rctx *r, const node *x, str s, const kv *arg, int end) {
    str a = need_str(r, x, arg, end ? "endswith" : "startswith").s;
    chat_charge(r, x, a.n / 64);
    if (a.n > s.n) return 0;
    return memcmp(end ? s.p + s.n - a.n : s.p, a.p, a.n) == 0;
}

/* str.startswith / endswith: a string or a tuple of strings (one level, as
 * in Python) */
static int str_affix(rctx *r, const node *x, str s, const kv *arg, int end) {
    if (arg->t == V_LIST && arg->aux) {
        for (size_t i = 0; i < arg->l->n; i++)
            if (str_affix1(r, x, s, &arg->l->v[i], end)) return 1;
        return 0;
    }
    return str_affix1(r, x, s, arg, end);
}

static kv join_items(rctx *r, const node *x, const kv *seq, str sep, const kv *attr);

kv chat_call_method(rctx *r, const node *x, const kfn *fn, const args *a) {
    const kv *self = &fn->self;
    str m = fn->name;
    kv v0 = arg_or(a, 0, NULL, UNDEF), v1 = arg_or(a, 1, NULL, UNDEF);
    if (self->t == V_STR) {
        str s = self->s;
        chat_charge(r, x, s.n / 64); /* every string method walks the string at most once */
        if (str_is(m, "strip") || str_is(m, "lstrip") || str_is(m, "rstrip")) {
            if (v0.t != V_UNDEF && v0.t != V_NONE) need_str(r, x, &v0, m.p);
            return str_strip(r, s, &v0, m.p[0] == 'l' ? 1 : m.p[0] == 'r' ? 2 : 3);
        }
        if (str_is(m, "split")) {
            kv sep = arg_or(a, 0, "sep", NONE), mx = arg_or(a, 1, "maxsplit", mk_int(-1));
            return str_split(r, x, s, &sep, mx.t == V_INT ? mx.i : -1);
        }
        if (str_is(m, "splitlines")) {
            kv out = mk_list(&r->c, 4);
            size_t st = 0;
            for (size_t i = 0; i < s.n; i++)
                if (s.p[i] == '\n' || s.p[i] == '\r') {
                    chat_list_push(&r->c, out.l, mk_str(s.p + st, i - st));
                    if (s.p[i] == '\r' && i + 1 < s.n && s.p[i + 1] == '\n') i++;
                    st = i + 1;
                }
            if (st < s.n) chat_list_push(&r->c, out.l, mk_str(s.p + st, s.n - st));
            return out;
        }
        if (str_is(m, "startswith") || str_is(m, "endswith")) return mk_bool(str_affix(r, x, s, &v0, m.p[0] == 'e'));
        if (str_is(m, "upper")) return str_case(r, s, cp_upper, 0);
        if (str_is(m, "lower")) return str_case(r, s, cp_lower, 0);
        if (str_is(m, "title")) return str_case(r, s, cp_upper, 2);
        if (str_is(m, "capitalize")) return str_case(r, s, cp_upper, 1);
        if (str_is(m, "replace")) {
            kv cnt = arg_or(a, 2, "count", mk_int(-1));
            return str_replace(r, s, need_str(r, x, &v0, "replace").s, need_str(r, x, &v1, "replace").s,
                               cnt.t == V_INT ? cnt.i : -1);
        }
        if (str_is(m, "find") || str_is(m, "count")) {
            str nd = need_str(r, x, &v0, m.p).s;
            if (m.p[0] == 'f') {
                const char *h = memmem_s(s, 0, nd);
                return mk_int(h ? (int64_t)cp_count((str){s.p, (size_t)(h - s.p)}) : -1);
            }
            if (!nd.n) return mk_int((int64_t)cp_count(s) + 1);
            int64_t k = 0;
            size_t pos = 0;
            const char *h;
            while ((h = memmem_s(s, pos, nd)) != NULL) {
                k++;
                pos = (size_t)(h - s.p) + nd.n;
            }
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
        chat_charge(r, x, d->n / 16);
        if (str_is(m, "get")) {
            kv *v = dict_find(d, &v0);
            return v ? *v : (a->npos > 1 ? v1 : NONE);
        }
        kv out = mk_list(&r->c, d->n);
        for (size_t i = 0; i < d->n; i++) {
            if (str_is(m, "keys"))
                out.l->v[i] = d->keys[i];
            else if (str_is(m, "values"))
                out.l->v[i] = d->vals[i];
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
        if (str_is(m, "append")) {
            chat_list_push(&r->c, l, v0);
            return NONE;
        }
        if (str_is(m, "count")) {
            int64_t k = 0;
            for (size_t i = 0; i < l->n; i++) k += chat_kv_eq_r(r, x, &l->v[i], &v0);
            return mk_int(k);
        }
        for (size_t i = 0; i < l->n; i++)
            if (chat_kv_eq_r(r, x, &l->v[i], &v0)) return mk_int((int64_t)i);
        chat_fail_at(r, x, "value is not in list");
    } else if (self->t == V_LOOP) {
        if (!a->npos) chat_fail_at(r, x, "no items for cycling given");
        return a->pos[self->loop->i % a->npos];
    }
    chat_fail_at(r, x, "'%s' object has no method '%.*s'", chat_type_name(self), (int)m.n, m.p);
}

/* ---- containment, tests */

int chat_kv_contains(rctx *r, const node *x, const kv *hay, const kv *item) {
    switch (hay->t) {
    case V_UNDEF: return 0;
    case V_STR:
        if (item->t == V_UNDEF) undef_fail(r, x, item);
        if (item->t != V_STR)
            chat_fail_at(r, x, "'in <string>' requires string as left operand, not %s", chat_type_name(item));
        chat_charge(r, x, hay->s.n / 64);
        return memmem_s(hay->s, 0, item->s) != NULL;
    case V_LIST:
        for (size_t i = 0; i < hay->l->n; i++)
            if (chat_kv_eq_r(r, x, &hay->l->v[i], item)) return 1;
        return 0;
    case V_DICT: chat_charge(r, x, hay->d->n / 8); return dict_find(hay->d, item) != NULL;
    default: chat_fail_at(r, x, "argument of type '%s' is not iterable", chat_type_name(hay));
    }
}

static int all_cased(str s, int upper) {
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

int chat_test_apply(rctx *r, const node *x, int id, const kv *v, const args *a) {
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
    case X_EQ:
    case X_EQUALTO:
    case X_SYM_EQ: return chat_kv_eq_r(r, x, v, &a0);
    case X_NE:
    case X_SYM_NE: return !chat_kv_eq_r(r, x, v, &a0);
    case X_LT:
    case X_LESSTHAN:
    case X_SYM_LT: return chat_kv_cmp(r, x, v, &a0) < 0;
    case X_LE:
    case X_SYM_LE: return chat_kv_cmp(r, x, v, &a0) <= 0;
    case X_GT:
    case X_GREATERTHAN:
    case X_SYM_GT: return chat_kv_cmp(r, x, v, &a0) > 0;
    case X_GE:
    case X_SYM_GE: return chat_kv_cmp(r, x, v, &a0) >= 0;
    case X_IN: return chat_kv_contains(r, x, &a0, v);
    case X_SAMEAS:
        if (v->t != a0.t) return 0;
        if (v->t == V_NONE || v->t == V_UNDEF) return 1;
        if (v->t == V_BOOL || v->t == V_INT) return v->i == a0.i;
        if (v->t == V_LIST) return v->l == a0.l;
        if (v->t == V_DICT) return v->d == a0.d;
        return chat_kv_eq_r(r, x, v, &a0);
    case X_ODD:
    case X_EVEN:
    case X_DIVISIBLEBY: {
        if (v->t == V_UNDEF) undef_fail(r, x, v);
        if (v->t != V_INT && v->t != V_BOOL) chat_fail_at(r, x, "test expects an integer, got %s", chat_type_name(v));
        if (id == X_ODD) return (v->i & 1) != 0;
        if (id == X_EVEN) return (v->i & 1) == 0;
        if ((a0.t != V_INT && a0.t != V_BOOL) || a0.i == 0)
            chat_fail_at(r, x, "divisibleby expects a non-zero integer");
        return a0.i == -1 || v->i % a0.i == 0; /* INT64_MIN % -1 traps */
    }
    case X_LOWER:
    case X_UPPER: return v->t == V_STR && all_cased(v->s, id == X_UPPER);
    case X_FILTER:
    case X_TEST:
        if (v->t != V_STR) return 0;
        return id == X_FILTER ? lookup_name(chat_filters, sizeof chat_filters / sizeof *chat_filters, v->s) >= 0
                              : lookup_name(chat_tests, sizeof chat_tests / sizeof *chat_tests, v->s) >= 0;
    default: chat_fail_at(r, x, "test not implemented");
    }
}

/* ---- filters */

/* attribute path "a.b.0" as Jinja2's make_attrgetter resolves it */
static kv attr_path(rctx *r, const node *x, const kv *item, const kv *attr) {
    if (attr->t == V_INT) return chat_get_item(r, x, item, attr);
    str p = need_str(r, x, attr, "attribute").s;
    kv cur = *item;
    size_t st = 0;
    for (size_t i = 0; i <= p.n; i++) {
        if (i < p.n && p.p[i] != '.') continue;
        str part = {p.p + st, i - st};
        /* a part of digits is an index (Jinja2: int(part)); past int64 it
         * cannot index anything, so it stays a (missing) key */
        int num = part.n > 0;
        int64_t iv = 0;
        for (size_t k = 0; k < part.n && num; k++)
            if (!isdigit((unsigned char)part.p[k]) || __builtin_mul_overflow(iv, 10, &iv) ||
                __builtin_add_overflow(iv, part.p[k] - '0', &iv))
                num = 0;
        kv key = num ? mk_int(iv) : mk_str(part.p, part.n);
        cur = chat_get_item(r, x, &cur, &key);
        st = i + 1;
    }
    return cur;
}

static kv sort_key(rctx *r, const node *x, const kv *v, const kv *attr, int case_sensitive) {
    kv k = attr && attr->t != V_NONE && attr->t != V_UNDEF ? attr_path(r, x, v, attr) : *v;
    if (!case_sensitive && k.t == V_STR) return str_case(r, k.s, cp_lower, 0);
    return k;
}

/* Stable insertion sort of items by keys (templates sort small lists). */
static void sort_items(rctx *r, const node *x, kv *items, kv *keys, size_t n, int reverse) {
    for (size_t i = 1; i < n; i++)
        for (size_t j = i; j > 0; j--) {
            int c = chat_kv_cmp(r, x, &keys[j - 1], &keys[j]);
            if (reverse ? c >= 0 : c <= 0) break;
            kv t = items[j];
            items[j] = items[j - 1];
            items[j - 1] = t;
            t = keys[j];
            keys[j] = keys[j - 1];
            keys[j - 1] = t;
        }
}

static kv join_items(rctx *r, const node *x, const kv *seq, str sep, const kv *attr) {
    size_t n;
    kv *it = chat_iter_items(r, x, seq, &n);
    sbuf b = {0};
    chat_sb_put(&r->c, &b, "", 0);
    for (size_t i = 0; i < n; i++) {
        if (i) chat_sb_put(&r->c, &b, sep.p, sep.n);
        kv e = attr && attr->t != V_NONE && attr->t != V_UNDEF ? attr_path(r, x, &it[i], attr) : it[i];
        chat_to_str(r, &b, &e);
    }
    return mk_str(b.p, b.n);
}

static double py_round(double v, int64_t nd) {
    char buf[400];
    if (nd > 300 || !isfinite(v)) return v;
    if (nd < -300) return copysign(0.0, v); /* 10^300 rounds every double to 0 */
    if (nd >= 0) {
        snprintf(buf, sizeof buf, "%.*f", (int)nd, v); /* correctly rounded, ties to even */
        return strtod(buf, NULL);
    }
    double p = pow(10.0, (double)-nd);
    return nearbyint(v / p) * p;
}

/* int(s, base): 1 and *out, or 0 (not a number, or past int64: Python's
 * int has no bound, so there is no int64 answer). */
static int parse_int_str(str s, int64_t base, int64_t *out) {
    char buf[80];
    size_t b = 0, e = s.n;
    if (base != 0 && (base < 2 || base > 36)) return 0;
    while (b < e && is_ws(s.p[b])) b++;
    while (e > b && is_ws(s.p[e - 1])) e--;
    if (e - b == 0 || e - b >= sizeof buf) return 0;
    size_t k = 0;
    for (size_t i = b; i < e; i++)
        if (s.p[i] != '_') buf[k++] = s.p[i];
    buf[k] = 0;
    char *end;
    errno = 0;
    long long v = strtoll(buf, &end, (int)base);
    if (*end || errno == ERANGE) return 0;
    *out = v;
    return 1;
}

/* A double's integer part as an int64 when it has one (|d| < 2^63). */
static int f2i(double d, int64_t *out) {
    if (!(d > -9223372036854775808.0 && d < 9223372036854775808.0)) return 0;
    *out = (int64_t)d;
    return 1;
}

static int parse_float_str(str s, double *out) {
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

static kv html_escape(rctx *r, str s) {
    sbuf b = {0};
    chat_sb_put(&r->c, &b, "", 0);
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

static args shift_args(const args *a, int by) {
    args s = *a;
    s.pos += by;
    s.npos -= by;
    return s;
}

/* select/reject/selectattr/rejectattr */
static kv select_items(rctx *r, const node *x, const kv *v, const args *a, int want, int by_attr) {
    size_t n;
    kv *it = chat_iter_items(r, x, v, &n);
    kv out = mk_list(&r->c, n);
    int first = by_attr ? 1 : 0;
    kv attr = by_attr ? arg_or(a, 0, NULL, UNDEF) : UNDEF;
    int tid = -1;
    args targs = shift_args(a, a->npos > first ? first + 1 : a->npos);
    if (a->npos > first) {
        kv tn = a->pos[first];
        tid = lookup_name(chat_tests, sizeof chat_tests / sizeof *chat_tests, need_str(r, x, &tn, "test name").s);
        if (tid < 0) chat_fail_at(r, x, "unknown test '%.*s'", (int)tn.s.n, tn.s.p);
    }
    for (size_t i = 0; i < n; i++) {
        kv e = by_attr ? attr_path(r, x, &it[i], &attr) : it[i];
        int ok = tid < 0 ? chat_truthy(&e) : chat_test_apply(r, x, tid, &e, &targs);
        if (ok == want) chat_list_push(&r->c, out.l, it[i]);
    }
    return out;
}

kv chat_filter_apply(rctx *r, const node *x, int id, const kv *v, const args *a) {
    ctx *c = &r->c;
    kv a0 = arg_or(a, 0, NULL, UNDEF);
    if (v->t == V_STR) chat_charge(r, x, v->s.n / 64); /* a string filter walks it at most once */
    switch (id) {
    case F_D:
    case F_DEFAULT: {
        kv def = arg_or(a, 0, "default_value", mk_str("", 0));
        kv boolean = arg_or(a, 1, "boolean", mk_bool(0));
        if (v->t == V_UNDEF || (chat_truthy(&boolean) && !chat_truthy(v))) return def;
        return *v;
    }
    case F_LENGTH:
    case F_COUNT:
        switch (v->t) {
        case V_UNDEF: return mk_int(0);
        case V_STR: return mk_int((int64_t)cp_count(v->s));
        case V_LIST: return mk_int((int64_t)v->l->n);
        case V_DICT: return mk_int((int64_t)v->d->n);
        default: chat_fail_at(r, x, "object of type '%s' has no len()", chat_type_name(v));
        }
    case F_SAFE: return *v;
    case F_STRING: {
        str s = kv_tostr(r, v);
        return mk_str(s.p, s.n);
    }
    case F_E:
    case F_ESCAPE: return html_escape(r, kv_tostr(r, v));
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
        kv wd = arg_or(a, 0, "width", mk_int(4)), first = arg_or(a, 1, "first", mk_bool(0)),
           blank = arg_or(a, 2, "blank", mk_bool(0));
        str pad;
        if (wd.t == V_STR)
            pad = wd.s;
        else {
            int64_t w = wd.t == V_INT ? wd.i : 4;
            char *p = chat_ar_alloc(c, (size_t)(w > 0 ? w : 0) + 1);
            memset(p, ' ', (size_t)(w > 0 ? w : 0));
            pad = (str){p, (size_t)(w > 0 ? w : 0)};
        }
        str s = kv_tostr(r, v);
        sbuf b = {0};
        chat_sb_put(c, &b, "", 0);
        size_t st = 0;
        int line = 0;
        for (size_t i = 0; i <= s.n; i++) {
            if (i < s.n && s.p[i] != '\n') continue;
            str ln = {s.p + st, i - st};
            int has_nl = i < s.n;
            int blank_line = 1;
            for (size_t k = 0; k < ln.n; k++)
                if (!is_ws(ln.p[k])) {
                    blank_line = 0;
                    break;
                }
            if ((line > 0 || chat_truthy(&first)) && (chat_truthy(&blank) || !blank_line))
                chat_sb_put(c, &b, pad.p, pad.n);
            chat_sb_put(c, &b, ln.p, ln.n);
            if (has_nl) sb_putc(c, &b, '\n');
            line++;
            st = i + 1;
        }
        return mk_str(b.p, b.n);
    }
    case F_ABS:
        if (v->t == V_FLOAT) return mk_float(fabs(v->f));
        if (v->t == V_INT || v->t == V_BOOL) {
            if (v->i == INT64_MIN) chat_fail_at(r, x, "integer overflow");
            return mk_int(v->i < 0 ? -v->i : v->i);
        }
        if (v->t == V_UNDEF) undef_fail(r, x, v);
        chat_fail_at(r, x, "bad operand type for abs(): '%s'", chat_type_name(v));
    case F_INT: {
        kv def = arg_or(a, 0, "default", mk_int(0)), base = arg_or(a, 1, "base", mk_int(10));
        int64_t i;
        if (v->t == V_INT || v->t == V_BOOL) return mk_int(v->i);
        if (v->t == V_FLOAT) {
            if (!isfinite(v->f)) return def;
            if (!f2i(v->f, &i)) chat_fail_at(r, x, "int: %g is out of the integer range", v->f);
            return mk_int(i);
        }
        if (v->t == V_STR) {
            double d;
            if (parse_int_str(v->s, base.t == V_INT ? base.i : 10, &i)) return mk_int(i);
            if (parse_float_str(v->s, &d) && isfinite(d)) {
                if (!f2i(d, &i)) chat_fail_at(r, x, "int: %g is out of the integer range", d);
                return mk_int(i);
            }
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
        if (!is_num(v)) chat_fail_at(r, x, "round expects a number, got %s", chat_type_name(v));
        int64_t nd = prec.t == V_INT ? prec.i : 0;
        str m = meth.t == V_STR ? meth.s : (str){"common", 6};
        if (str_is(m, "common")) return v->t == V_FLOAT ? mk_float(py_round(v->f, nd)) : mk_int(v->i);
        if (!str_is(m, "floor") && !str_is(m, "ceil")) chat_fail_at(r, x, "method must be common, ceil or floor");
        double p = pow(10.0, (double)nd), f = num_f(v) * p;
        return mk_float((m.p[0] == 'f' ? floor(f) : ceil(f)) / p);
    }
    case F_FIRST:
    case F_LAST: {
        size_t n;
        kv *it = chat_iter_items(r, x, v, &n);
        if (!n) return mk_undef(U_ATTR, v->t, "first", 5);
        return id == F_FIRST ? it[0] : it[n - 1];
    }
    case F_LIST: return list_of(r, x, v);
    case F_ITEMS: {
        if (v->t == V_UNDEF) return mk_list(c, 0);
        if (v->t != V_DICT) chat_fail_at(r, x, "can only get item pairs from a mapping");
        kfn fn = {.kind = FN_METHOD, .self = *v, .name = {"items", 5}};
        args none = {0};
        return chat_call_method(r, x, &fn, &none);
    }
    case F_DICTSORT: {
        if (v->t != V_DICT) chat_fail_at(r, x, "dictsort expects a mapping, got %s", chat_type_name(v));
        kv cs = arg_or(a, 0, "case_sensitive", mk_bool(0)), by = arg_or(a, 1, "by", mk_str("key", 3));
        kv rev = arg_or(a, 2, "reverse", mk_bool(0));
        size_t n = v->d->n;
        kv *items = chat_ar_alloc(c, (n + 1) * sizeof(kv)), *keys = chat_ar_alloc(c, (n + 1) * sizeof(kv));
        int by_value = by.t == V_STR && str_is(by.s, "value");
        for (size_t i = 0; i < n; i++) {
            kv t = mk_list(c, 2);
            t.aux = 1;
            t.l->v[0] = v->d->keys[i];
            t.l->v[1] = v->d->vals[i];
            t.l->n = 2;
            items[i] = t;
            keys[i] = sort_key(r, x, by_value ? &v->d->vals[i] : &v->d->keys[i], NULL, chat_truthy(&cs));
        }
        sort_items(r, x, items, keys, n, chat_truthy(&rev));
        kv out = mk_list(c, n);
        memcpy(out.l->v, items, n * sizeof(kv));
        out.l->n = n;
        return out;
    }
    case F_SORT:
    case F_UNIQUE:
    case F_MIN:
    case F_MAX: {
        int sort = id == F_SORT;
        kv rev = sort ? arg_or(a, 0, "reverse", mk_bool(0)) : mk_bool(0);
        kv cs = arg_or(a, sort ? 1 : 0, "case_sensitive", mk_bool(0));
        kv attr = arg_or(a, sort ? 2 : 1, "attribute", NONE);
        size_t n;
        kv *it = chat_iter_items(r, x, v, &n);
        kv *items = chat_ar_alloc(c, (n + 1) * sizeof(kv)), *keys = chat_ar_alloc(c, (n + 1) * sizeof(kv));
        size_t m = 0;
        for (size_t i = 0; i < n; i++) {
            kv k = sort_key(r, x, &it[i], &attr, chat_truthy(&cs));
            if (id == F_UNIQUE) {
                int seen = 0;
                for (size_t j = 0; j < m && !seen; j++) seen = chat_kv_eq_r(r, x, &keys[j], &k);
                if (seen) continue;
            }
            items[m] = it[i];
            keys[m++] = k;
        }
        if (id == F_MIN || id == F_MAX) {
            if (!m) return mk_undef(U_ATTR, v->t, id == F_MIN ? "min" : "max", 3);
            size_t best = 0;
            for (size_t i = 1; i < m; i++) {
                int k = chat_kv_cmp(r, x, &keys[i], &keys[best]);
                if (id == F_MIN ? k < 0 : k > 0) best = i;
            }
            return items[best];
        }
        if (sort) sort_items(r, x, items, keys, m, chat_truthy(&rev));
        kv out = mk_list(c, m);
        if (m) memcpy(out.l->v, items, m * sizeof(kv));
        out.l->n = m;
        return out;
    }
    case F_REVERSE: {
        if (v->t == V_STR) {
            size_t n;
            size_t *off = cp_offsets(c, v->s, &n);
            char *p = chat_ar_alloc(c, v->s.n + 1);
            size_t k = 0;
            for (size_t i = n; i-- > 0;) {
                memcpy(p + k, v->s.p + off[i], off[i + 1] - off[i]);
                k += off[i + 1] - off[i];
            }
            p[k] = 0;
            return mk_str(p, k);
        }
        size_t n;
        kv *it = chat_iter_items(r, x, v, &n);
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
        kv *it = chat_iter_items(r, x, v, &n);
        for (size_t i = 0; i < n; i++) {
            kv e = attr.t != V_NONE ? attr_path(r, x, &it[i], &attr) : it[i];
            if (!is_num(&e) || !is_num(&acc)) chat_fail_at(r, x, "sum expects numbers");
            if (acc.t == V_FLOAT || e.t == V_FLOAT) {
                acc = mk_float(num_f(&acc) + num_f(&e));
            } else {
                int64_t t;
                if (__builtin_add_overflow(acc.i, e.i, &t)) chat_fail_at(r, x, "integer overflow");
                acc = mk_int(t);
            }
        }
        return acc;
    }
    case F_ATTR: return chat_get_attr(r, x, v, kv_tostr(r, &a0));
    case F_MAP: {
        size_t n;
        kv *it = chat_iter_items(r, x, v, &n);
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
            int fid = lookup_name(chat_filters, sizeof chat_filters / sizeof *chat_filters, fname);
            if (fid < 0) chat_fail_at(r, x, "unknown filter '%.*s'", (int)fname.n, fname.p);
            args rest = shift_args(a, 1);
            /* map('map', 'map', ...) recurses once per argument */
            chat_enter(r, x);
            for (size_t i = 0; i < n; i++) out.l->v[i] = chat_filter_apply(r, x, fid, &it[i], &rest);
            r->depth--;
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
        kv ind = arg_or(a, 1, "indent", NONE), seps = arg_or(a, 2, "separators", NONE),
           sk = arg_or(a, 3, "sort_keys", mk_bool(0));
        kv ea = arg_or(a, 0, "ensure_ascii", mk_bool(0));
        if (chat_truthy(&ea)) chat_fail_at(r, x, "tojson: ensure_ascii=True is not supported");
        jopts o = {.item_sep = {", ", 2}, .key_sep = {": ", 2}, .sort_keys = chat_truthy(&sk)};
        if (ind.t == V_INT) {
            char *p = chat_ar_alloc(c, (size_t)(ind.i > 0 ? ind.i : 0) + 1);
            memset(p, ' ', (size_t)(ind.i > 0 ? ind.i : 0));
            o.indent = (str){p, (size_t)(ind.i > 0 ? ind.i : 0)};
            o.has_indent = 1;
            o.item_sep = (str){",", 1};
        } else if (ind.t == V_STR) {
            o.indent = ind.s;
            o.has_indent = 1;
            o.item_sep = (str){",", 1};
        }
        if (seps.t == V_LIST && seps.l->n == 2) {
            o.item_sep = need_str(r, x, &seps.l->v[0], "separators").s;
            o.key_sep = need_str(r, x, &seps.l->v[1], "separators").s;
        }
        sbuf b = {0};
        chat_sb_put(c, &b, "", 0);
        chat_json_dump(r, x, &b, v, &o, 0);
        return mk_str(b.p, b.n);
    }
    default: chat_fail_at(r, x, "filter not implemented");
    }
}

/* ---- globals */

kv chat_call_global(rctx *r, const node *x, const kfn *fn, const args *a) {
    ctx *c = &r->c;
    switch (fn->id) {
    case G_RANGE: {
        int64_t v[3] = {0, 0, 1};
        if (a->npos < 1 || a->npos > 3) chat_fail_at(r, x, "range expected 1 to 3 arguments, got %d", a->npos);
        for (int i = 0; i < a->npos; i++) {
            if (a->pos[i].t != V_INT && a->pos[i].t != V_BOOL)
                chat_fail_at(r, x, "'%s' object cannot be interpreted as an integer", chat_type_name(&a->pos[i]));
        }
        if (a->npos == 1)
            v[1] = a->pos[0].i;
        else {
            v[0] = a->pos[0].i;
            v[1] = a->pos[1].i;
            if (a->npos == 3) v[2] = a->pos[2].i;
        }
        if (v[2] == 0) chat_fail_at(r, x, "range() arg 3 must not be zero");
        /* in 128 bits: stop - start and the step's magnitude span up to 2^64 */
        __int128 lo = v[0], hi = v[1], st = v[2];
        __int128 n = st > 0 ? (hi > lo ? (hi - lo + st - 1) / st : 0) : (lo > hi ? (lo - hi - st - 1) / -st : 0);
        if (n > 100000) chat_fail_at(r, x, "range too big (over 100000 items)");
        kv out = mk_list(c, (size_t)n);
        for (int64_t i = 0; i < (int64_t)n; i++) out.l->v[i] = mk_int((int64_t)(lo + (__int128)i * st));
        out.l->n = (size_t)n;
        chat_charge(r, x, (uint64_t)n);
        return out;
    }
    case G_NAMESPACE:
    case G_DICT: {
        kv d = mk_dict(c, (size_t)a->nkw);
        d.aux = fn->id == G_NAMESPACE;
        for (int i = 0; i < a->npos; i++) {
            if (a->pos[i].t != V_DICT)
                chat_fail_at(r, x, "%s() positional arguments must be mappings",
                             fn->id == G_DICT ? "dict" : "namespace");
            for (size_t k = 0; k < a->pos[i].d->n; k++) {
                chat_charge(r, x, 1 + d.d->n / 16); /* each set looks the key up */
                chat_dict_set(c, d.d, a->pos[i].d->keys[k], a->pos[i].d->vals[k]);
            }
        }
        for (int i = 0; i < a->nkw; i++) {
            chat_charge(r, x, 1 + d.d->n / 16);
            chat_dict_set(c, d.d, mk_str(a->kwn[i].p, a->kwn[i].n), a->kw[i]);
        }
        return d;
    }
    case G_RAISE: {
        kv m = arg_or(a, 0, NULL, mk_str("", 0));
        str s = kv_tostr(r, &m);
        chat_fail_at(r, x, "raise_exception: %.*s", (int)s.n, s.p);
    }
    case G_STRFTIME: {
        kv f = arg_or(a, 0, NULL, UNDEF);
        str fs = need_str(r, x, &f, "strftime_now").s;
        char *fmt = ar_strdup(c, fs.p, fs.n);
        time_t t = r->has_now ? (time_t)r->now : time(NULL);
        struct tm tm;
        if (r->has_now)
            gmtime_r(&t, &tm);
        else
            localtime_r(&t, &tm);
        char buf[256];
        size_t n = strftime(buf, sizeof buf, fmt, &tm);
        return mk_str(ar_strdup(c, buf, n), n);
    }
    default: chat_fail_at(r, x, "unknown function");
    }
}
