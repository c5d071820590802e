/* eval.c — evaluating expressions (attributes, items, slices, calls,
 * arithmetic) and executing statements (output, if, for with loop.*, set,
 * macros and call blocks) against frames of variables. */
#include "chat/jinja.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

/* ------------------------------------------------------------ evaluator */

static kv eval(rctx *r, const node *x, frame *f);

static void eval_args(rctx *r, const node *x, frame *f, args *a) {
    a->npos = x->args.n;
    a->nkw = x->args2.n;
    a->pos = chat_ar_alloc(&r->c, (size_t)(a->npos + 1) * sizeof(kv));
    a->kw = chat_ar_alloc(&r->c, (size_t)(a->nkw + 1) * sizeof(kv));
    a->kwn = x->names;
    for (int i = 0; i < a->npos; i++) a->pos[i] = eval(r, x->args.v[i], f);
    for (int i = 0; i < a->nkw; i++) a->kw[i] = eval(r, x->args2.v[i], f);
}

static const char *const STR_METHODS[] = {"strip", "lstrip", "rstrip",  "split",   "startswith", "endswith",
                                          "upper", "lower",  "replace", "title",   "capitalize", "find",
                                          "count", "join",   "isdigit", "isspace", "splitlines"};
static const char *const DICT_METHODS[] = {"get", "items", "keys", "values"};
static const char *const LIST_METHODS[] = {"append", "index", "count"};

static kv bind_method(rctx *r, const kv *self, str name) {
    kv v = {.t = V_FUNC};
    v.fn = ar_zalloc(&r->c, sizeof(kfn));
    v.fn->kind = FN_METHOD;
    v.fn->self = *self;
    v.fn->name = name;
    return v;
}

static kv loop_attr(rctx *r, const kv *lv, str name) {
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
    if (str_is(name, "nextitem"))
        return L->i + 1 < L->n ? L->items[L->i + 1] : mk_undef(U_ATTR, V_LOOP, name.p, name.n);
    if (str_is(name, "cycle")) return bind_method(r, lv, name);
    return mk_undef(U_ATTR, V_LOOP, name.p, name.n);
}

/* obj.name: Jinja2 tries the Python attribute first (methods), then the item. */
kv chat_get_attr(rctx *r, const node *x, const kv *obj, str name) {
    switch (obj->t) {
    case V_UNDEF: undef_fail(r, x, obj);
    case V_DICT: {
        if (!obj->aux && lookup_name(DICT_METHODS, sizeof DICT_METHODS / sizeof *DICT_METHODS, name) >= 0)
            return bind_method(r, obj, name);
        chat_charge(r, x, obj->d->n / 16); /* the look-up is linear */
        kv *v = dict_find_str(obj->d, name.p, name.n);
        return v ? *v : mk_undef(U_ATTR, V_DICT, name.p, name.n);
    }
    case V_STR:
        if (lookup_name(STR_METHODS, sizeof STR_METHODS / sizeof *STR_METHODS, name) >= 0)
            return bind_method(r, obj, name);
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
kv chat_get_item(rctx *r, const node *x, const kv *obj, const kv *key) {
    if (obj->t == V_UNDEF) undef_fail(r, x, obj);
    if (key->t == V_UNDEF) undef_fail(r, x, key);
    if (obj->t == V_DICT) {
        chat_charge(r, x, obj->d->n / 16);
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
        kv a = chat_get_attr(r, x, obj, key->s);
        return a;
    }
    str ks = kv_tostr(r, key);
    return mk_undef(U_ITEM, obj->t, ks.p, ks.n);
}

/* Python slice index normalisation (as slice.indices). */
static void slice_bounds(int64_t n, const kv *a, const kv *b, int64_t step, int64_t *start, int64_t *stop) {
    int64_t lo = step < 0 ? -1 : 0, hi = step < 0 ? n - 1 : n;
    if (a->t == V_NONE || a->t == V_UNDEF)
        *start = step < 0 ? hi : lo;
    else {
        int64_t s = a->i < 0 ? a->i + n : a->i;
        *start = s < lo ? lo : s > hi ? hi : s;
    }
    if (b->t == V_NONE || b->t == V_UNDEF)
        *stop = step < 0 ? lo : hi;
    else {
        int64_t s = b->i < 0 ? b->i + n : b->i;
        *stop = s < lo ? lo : s > hi ? hi : s;
    }
}

static kv do_slice(rctx *r, const node *x, const kv *obj, const kv *a, const kv *b, const kv *st) {
    const kv *ends[3] = {a, b, st};
    for (int i = 0; i < 3; i++)
        if (ends[i]->t != V_NONE && ends[i]->t != V_UNDEF && ends[i]->t != V_INT && ends[i]->t != V_BOOL)
            chat_fail_at(r, x, "slice indices must be integers or None");
    int64_t step = (st->t == V_INT || st->t == V_BOOL) ? st->i : 1;
    if (step == 0) chat_fail_at(r, x, "slice step cannot be zero");
    if (obj->t == V_UNDEF) undef_fail(r, x, obj);
    if (obj->t == V_LIST) {
        int64_t s, e, n = (int64_t)obj->l->n;
        slice_bounds(n, a, b, step, &s, &e);
        kv out = mk_list(&r->c, 0);
        out.aux = obj->aux;
        for (int64_t i = s; step > 0 ? i < e : i > e;) {
            chat_list_push(&r->c, out.l, obj->l->v[i]);
            if (__builtin_add_overflow(i, step, &i)) break; /* past either end */
        }
        return out;
    }
    if (obj->t == V_STR) {
        size_t n;
        size_t *off = cp_offsets(&r->c, obj->s, &n);
        int64_t s, e;
        slice_bounds((int64_t)n, a, b, step, &s, &e);
        if (step == 1) return mk_str(obj->s.p + off[s], s < e ? off[e] - off[s] : 0);
        sbuf sb = {0};
        chat_sb_put(&r->c, &sb, "", 0);
        for (int64_t i = s; step > 0 ? i < e : i > e;) {
            chat_sb_put(&r->c, &sb, obj->s.p + off[i], off[i + 1] - off[i]);
            if (__builtin_add_overflow(i, step, &i)) break;
        }
        return mk_str(sb.p, sb.n);
    }
    chat_fail_at(r, x, "'%s' object is not subscriptable", chat_type_name(obj));
}

/* Calls a macro (or a call block's caller) and returns its output. */
static kv call_macro(rctx *r, const node *x, const kfn *fn, const args *a, const kv *caller) {
    const node *def = fn->def;
    if (++r->call_depth > MAX_CALL_DEPTH) chat_fail_at(r, x, "macro calls nested too deeply");
    frame *f = new_frame(&r->c, fn->closure);
    if (a->npos > def->nnames)
        chat_fail_at(r, x, "macro '%.*s' takes not more than %d argument(s)", (int)fn->name.n, fn->name.p, def->nnames);
    for (int i = 0; i < a->nkw; i++) {
        int known = 0;
        for (int k = 0; k < def->nnames; k++) known |= str_eq(def->names[k], a->kwn[i].p, a->kwn[i].n);
        if (!known)
            chat_fail_at(r, x, "macro '%.*s' takes no keyword argument '%.*s'", (int)fn->name.n, fn->name.p,
                         (int)a->kwn[i].n, a->kwn[i].p);
    }
    for (int k = 0; k < def->nnames; k++) {
        kv v;
        int found = k < a->npos;
        if (found) v = a->pos[k];
        for (int i = 0; i < a->nkw && !found; i++)
            if (str_eq(def->names[k], a->kwn[i].p, a->kwn[i].n)) {
                v = a->kw[i];
                found = 1;
            }
        if (!found) {
            const node *dn = k < def->args2.n ? def->args2.v[k] : NULL;
            v = dn ? eval(r, dn, f) : mk_undef(U_NAME, 0, def->names[k].p, def->names[k].n);
        }
        chat_frame_set(&r->c, f, def->names[k], v);
    }
    if (caller) chat_frame_set(&r->c, f, (str){"caller", 6}, *caller);
    sbuf out = {0};
    chat_sb_put(&r->c, &out, "", 0);
    chat_exec_body(r, &def->args, f, &out);
    r->call_depth--;
    return mk_str(out.p, out.n);
}

static kv call_value(rctx *r, const node *x, const kv *callee, const args *a, const kv *caller) {
    if (callee->t == V_UNDEF) undef_fail(r, x, callee);
    if (callee->t != V_FUNC) chat_fail_at(r, x, "'%s' object is not callable", chat_type_name(callee));
    const kfn *fn = callee->fn;
    switch (fn->kind) {
    case FN_GLOBAL: return chat_call_global(r, x, fn, a);
    case FN_METHOD: return chat_call_method(r, x, fn, a);
    default: return call_macro(r, x, fn, a, caller);
    }
}

/* ---- expressions */

static kv arith(rctx *r, const node *x, int op, const kv *a, const kv *b) {
    ctx *c = &r->c;
    static const char *const opn[] = {"+", "-", "*", "/", "//", "%", "**", "~"};
    if (a->t == V_UNDEF) undef_fail(r, x, a);
    if (b->t == V_UNDEF) undef_fail(r, x, b);
    if (is_num(a) && is_num(b)) {
        int ints = a->t != V_FLOAT && b->t != V_FLOAT;
        int64_t p = a->i, q = b->i, res;
        double f = num_f(a), g = num_f(b);
        switch (op) {
        case B_ADD:
            if (ints) {
                if (__builtin_add_overflow(p, q, &res)) chat_fail_at(r, x, "integer overflow");
                return mk_int(res);
            }
            return mk_float(f + g);
        case B_SUB:
            if (ints) {
                if (__builtin_sub_overflow(p, q, &res)) chat_fail_at(r, x, "integer overflow");
                return mk_int(res);
            }
            return mk_float(f - g);
        case B_MUL:
            if (ints) {
                if (__builtin_mul_overflow(p, q, &res)) chat_fail_at(r, x, "integer overflow");
                return mk_int(res);
            }
            return mk_float(f * g);
        case B_DIV:
            if (g == 0) chat_fail_at(r, x, "division by zero");
            return mk_float(f / g);
        case B_FDIV:
        case B_MOD:
            if (ints) {
                if (q == 0) chat_fail_at(r, x, "integer division or modulo by zero");
                if (q == -1) { /* p / -1 overflows for INT64_MIN (and traps on x86) */
                    if (op == B_MOD) return mk_int(0);
                    if (p == INT64_MIN) chat_fail_at(r, x, "integer overflow");
                    return mk_int(-p);
                }
                int64_t d = p / q, m = p % q;
                if (m != 0 && ((m < 0) != (q < 0))) {
                    d--;
                    m += q;
                }
                return mk_int(op == B_FDIV ? d : m);
            }
            if (g == 0) chat_fail_at(r, x, "float division by zero");
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
                    if ((e & 1) && __builtin_mul_overflow(acc, base, &acc)) chat_fail_at(r, x, "integer overflow");
                    if (e > 1 && __builtin_mul_overflow(base, base, &base)) chat_fail_at(r, x, "integer overflow");
                }
                return mk_int(acc);
            }
            return mk_float(pow(f, g));
        default: break;
        }
    }
    if (op == B_ADD && a->t == V_STR && b->t == V_STR) {
        char *p = chat_ar_alloc(c, a->s.n + b->s.n + 1);
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
                if (k && seq->s.n > (1u << 26) / (uint64_t)k) chat_fail_at(r, x, "string repetition too large");
                sbuf sb = {0};
                chat_sb_put(c, &sb, "", 0);
                for (int64_t i = 0; i < k; i++) chat_sb_put(c, &sb, seq->s.p, seq->s.n);
                return mk_str(sb.p, sb.n);
            }
            if (k && seq->l->n > (1u << 20) / (uint64_t)k) chat_fail_at(r, x, "list repetition too large");
            kv out = mk_list(c, seq->l->n * (size_t)k);
            out.aux = seq->aux;
            for (int64_t i = 0; i < k; i++)
                for (size_t j = 0; j < seq->l->n; j++) out.l->v[out.l->n++] = seq->l->v[j];
            return out;
        }
    }
    chat_fail_at(r, x, "unsupported operand type(s) for %s: '%s' and '%s'", opn[op], chat_type_name(a),
                 chat_type_name(b));
}

/* Applies a filter chain parsed on a placeholder (set/filter blocks) to `in`. */
static kv apply_chain(rctx *r, const node *x, frame *f, kv in) {
    if (!x || x->kind != E_FILTER) return in;
    kv v = apply_chain(r, x->a, f, in);
    args a;
    eval_args(r, x, f, &a);
    return chat_filter_apply(r, x, x->id, &v, &a);
}

static kv eval_node(rctx *r, const node *x, frame *f) {
    ctx *c = &r->c;
    switch (x->kind) {
    case E_LIT: return x->lit;
    case E_NAME: return chat_lookup(r, f, x->name);
    case E_LIST:
    case E_TUPLE: {
        kv out = mk_list(c, (size_t)x->args.n);
        out.aux = x->kind == E_TUPLE;
        for (int i = 0; i < x->args.n; i++) out.l->v[i] = eval(r, x->args.v[i], f);
        out.l->n = (size_t)x->args.n;
        return out;
    }
    case E_DICT: {
        kv d = mk_dict(c, (size_t)x->args.n);
        for (int i = 0; i < x->args.n; i++) {
            chat_charge(r, x, d.d->n / 16);
            chat_dict_set(c, d.d, eval(r, x->args.v[i], f), eval(r, x->args2.v[i], f));
        }
        return d;
    }
    case E_ATTR: {
        kv o = eval(r, x->a, f);
        return chat_get_attr(r, x, &o, x->name);
    }
    case E_ITEM: {
        kv o = eval(r, x->a, f), k = eval(r, x->b, f);
        return chat_get_item(r, x, &o, &k);
    }
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
        return chat_filter_apply(r, x, x->id, &v, &a);
    }
    case E_TEST: {
        kv v = eval(r, x->a, f);
        args a;
        eval_args(r, x, f, &a);
        return mk_bool(chat_test_apply(r, x, x->id, &v, &a) != x->neg);
    }
    case E_NOT: {
        kv v = eval(r, x->a, f);
        return mk_bool(!chat_truthy(&v));
    }
    case E_NEG:
    case E_POS: {
        kv v = eval(r, x->a, f);
        if (v.t == V_UNDEF) undef_fail(r, x, &v);
        if (v.t == V_FLOAT) return mk_float(x->kind == E_NEG ? -v.f : v.f);
        if (v.t == V_INT || v.t == V_BOOL) {
            if (x->kind == E_NEG && v.i == INT64_MIN) chat_fail_at(r, x, "integer overflow");
            return mk_int(x->kind == E_NEG ? -v.i : v.i);
        }
        chat_fail_at(r, x, "bad operand type for unary %c: '%s'", x->kind == E_NEG ? '-' : '+', chat_type_name(&v));
    }
    case E_BIN: {
        kv a = eval(r, x->a, f), b = eval(r, x->b, f);
        if (x->op == B_CAT) {
            sbuf sb = {0};
            chat_sb_put(c, &sb, "", 0);
            chat_to_str(r, &sb, &a);
            chat_to_str(r, &sb, &b);
            return mk_str(sb.p, sb.n);
        }
        return arith(r, x, x->op, &a, &b);
    }
    case E_AND: {
        kv a = eval(r, x->a, f);
        return chat_truthy(&a) ? eval(r, x->b, f) : a;
    }
    case E_OR: {
        kv a = eval(r, x->a, f);
        return chat_truthy(&a) ? a : eval(r, x->b, f);
    }
    case E_COND: {
        kv cnd = eval(r, x->a, f);
        if (chat_truthy(&cnd)) return eval(r, x->b, f);
        return x->c ? eval(r, x->c, f) : mk_undef(U_NAME, 0, "<conditional without else>", 26);
    }
    case E_CMP: {
        kv a = eval(r, x->a, f), b = eval(r, x->b, f);
        switch (x->op) {
        case C_EQ: return mk_bool(chat_kv_eq_r(r, x, &a, &b));
        case C_NE: return mk_bool(!chat_kv_eq_r(r, x, &a, &b));
        case C_LT: return mk_bool(chat_kv_cmp(r, x, &a, &b) < 0);
        case C_LE: return mk_bool(chat_kv_cmp(r, x, &a, &b) <= 0);
        case C_GT: return mk_bool(chat_kv_cmp(r, x, &a, &b) > 0);
        case C_GE: return mk_bool(chat_kv_cmp(r, x, &a, &b) >= 0);
        case C_IN: return mk_bool(chat_kv_contains(r, x, &b, &a));
        default: return mk_bool(!chat_kv_contains(r, x, &b, &a));
        }
    }
    default: chat_fail_at(r, x, "not an expression");
    }
}

/* One step of the budget and one level of the evaluator's depth. */
static kv eval(rctx *r, const node *x, frame *f) {
    chat_enter(r, x);
    chat_charge(r, x, 1);
    kv v = eval_node(r, x, f);
    r->depth--;
    return v;
}

/* ---- statements */

static void assign_targets(rctx *r, const node *x, frame *f, const kv *v) {
    if (x->nnames == 1) {
        chat_frame_set(&r->c, f, x->names[0], *v);
        return;
    }
    size_t n;
    kv *it = chat_iter_items(r, x, v, &n);
    if (n != (size_t)x->nnames)
        chat_fail_at(r, x, "%s values to unpack (expected %d, got %zu)",
                     n > (size_t)x->nnames ? "too many" : "not enough", x->nnames, n);
    for (int i = 0; i < x->nnames; i++) chat_frame_set(&r->c, f, x->names[i], it[i]);
}

static int exec_for(rctx *r, const node *x, frame *f, sbuf *out) {
    ctx *c = &r->c;
    kv seq = eval(r, x->a, f);
    size_t n;
    kv *it = chat_iter_items(r, x->a, &seq, &n);
    if (x->b) { /* {% for a in b if cond %}: filter before counting */
        kv *keep = chat_ar_alloc(c, (n + 1) * sizeof(kv));
        size_t m = 0;
        for (size_t i = 0; i < n; i++) {
            frame *tf = new_frame(c, f);
            assign_targets(r, x, tf, &it[i]);
            kv cnd = eval(r, x->b, tf);
            if (chat_truthy(&cnd)) keep[m++] = it[i];
        }
        it = keep;
        n = m;
    }
    if (n == 0) return chat_exec_body(r, &x->args2, f, out);
    kloop *L = chat_ar_alloc(c, sizeof(kloop));
    L->items = it;
    L->n = (int64_t)n;
    kv lv = {.t = V_LOOP};
    lv.loop = L;
    for (size_t i = 0; i < n; i++) {
        L->i = (int64_t)i;
        frame *bf = new_frame(c, f); /* a fresh scope per iteration, as in Jinja2 */
        assign_targets(r, x, bf, &it[i]);
        chat_frame_set(c, bf, (str){"loop", 4}, lv);
        int rc = chat_exec_body(r, &x->args, bf, out);
        if (rc == 1) break;
    }
    return 0;
}

static int exec_body(rctx *r, const nlist *body, frame *f, sbuf *out);

int chat_exec_body(rctx *r, const nlist *body, frame *f, sbuf *out) {
    const node *at = body->n ? body->v[0] : NULL;
    chat_enter(r, at);
    int rc = exec_body(r, body, f, out);
    r->depth--;
    return rc;
}

static int exec_body(rctx *r, const nlist *body, frame *f, sbuf *out) {
    ctx *c = &r->c;
    for (int i = 0; i < body->n; i++) {
        const node *x = body->v[i];
        chat_charge(r, x, 1);
        if (out->n > r->max_output) chat_fail_at(r, x, "render exceeded its output budget (%zu bytes)", r->max_output);
        switch (x->kind) {
        case N_DATA: chat_sb_put(c, out, x->lit.s.p, x->lit.s.n); break;
        case N_OUTPUT: {
            kv v = eval(r, x->a, f);
            chat_to_str(r, out, &v);
            break;
        }
        case N_IF: {
            kv cnd = eval(r, x->a, f);
            int rc = chat_exec_body(r, chat_truthy(&cnd) ? &x->args : &x->args2, f, out);
            if (rc) return rc;
            break;
        }
        case N_FOR: exec_for(r, x, f, out); break;
        case N_SET: {
            kv v = eval(r, x->a, f);
            assign_targets(r, x, f, &v);
            break;
        }
        case N_SETATTR: {
            kv ns = chat_lookup(r, f, x->name);
            if (ns.t == V_UNDEF) undef_fail(r, x, &ns);
            if (ns.t != V_DICT || !ns.aux) chat_fail_at(r, x, "cannot assign attribute on non-namespace object");
            kv v = eval(r, x->a, f);
            chat_charge(r, x, ns.d->n / 16);
            chat_dict_set(c, ns.d, mk_str(x->name2.p, x->name2.n), v);
            break;
        }
        case N_SETBLOCK: {
            sbuf b = {0};
            chat_sb_put(c, &b, "", 0);
            chat_exec_body(r, &x->args, new_frame(c, f), &b);
            chat_frame_set(c, f, x->name, apply_chain(r, x->b, f, mk_str(b.p, b.n)));
            break;
        }
        case N_MACRO: {
            kv v = {.t = V_FUNC};
            v.fn = ar_zalloc(c, sizeof(kfn));
            v.fn->kind = FN_MACRO;
            v.fn->def = x;
            v.fn->closure = f;
            v.fn->name = x->name;
            chat_frame_set(c, f, x->name, v);
            break;
        }
        case N_CALLBLOCK: {
            kv cal = {.t = V_FUNC};
            cal.fn = ar_zalloc(c, sizeof(kfn));
            cal.fn->kind = FN_CALLER;
            cal.fn->def = x;
            cal.fn->closure = f;
            cal.fn->name = (str){"caller", 6};
            kv callee = eval(r, x->a->a, f);
            args a;
            eval_args(r, x->a, f, &a);
            if (callee.t != V_FUNC || callee.fn->kind != FN_MACRO) chat_fail_at(r, x, "call block needs a macro");
            kv v = call_value(r, x->a, &callee, &a, &cal);
            chat_to_str(r, out, &v);
            break;
        }
        case N_SCOPE:
            if (x->b) {
                sbuf b = {0};
                chat_sb_put(c, &b, "", 0);
                chat_exec_body(r, &x->args, f, &b);
                kv v = apply_chain(r, x->b, f, mk_str(b.p, b.n));
                chat_to_str(r, out, &v);
            } else {
                int rc = chat_exec_body(r, &x->args, f, out);
                if (rc) return rc;
            }
            break;
        case N_BREAK: return 1;
        case N_CONTINUE: return 2;
        default: chat_fail_at(r, x, "not a statement");
        }
    }
    if (out->n > r->max_output && body->n)
        chat_fail_at(r, body->v[body->n - 1], "render exceeded its output budget (%zu bytes)", r->max_output);
    return 0;
}
