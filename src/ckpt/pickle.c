/* A restricted interpreter of torch.save's pickle (protocols 2 to 5): it
 * builds data (numbers, strings, tuples, lists, dicts, storages and tensor
 * descriptions) and nothing else.  There is no general call: REDUCE works
 * only on the three whitelisted globals of ckpt.h, each checked for the
 * argument shapes PyTorch writes.  Nothing here recurses, so a deeply
 * nested pickle costs memory, bounded below, never C stack. */
#include "ckpt/ckpt_internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Values created and memo slots: beyond these a pickle is refused. */
#define MAX_VALUES (4 << 20)
#define MAX_MEMO (4 << 20)
#define MAX_ARENA ((size_t)512 << 20)
#define MAX_KEY 64

enum { V_NONE, V_BOOL, V_INT, V_FLOAT, V_STR, V_BYTES, V_TUPLE, V_LIST, V_DICT, V_GLOBAL, V_STORAGE, V_TENSOR };
static const char *const kind_names[] = {"None",  "bool", "int",  "float",  "str",     "bytes",
                                         "tuple", "list", "dict", "global", "storage", "tensor"};

enum { G_ORDERED_DICT, G_REBUILD_TENSOR, G_REBUILD_PARAMETER, G_STORAGE };

static const struct {
    const char *module, *name;
    int kind, dtype;
} whitelist[] = {
    {"collections", "OrderedDict", G_ORDERED_DICT, -1},
    {"torch._utils", "_rebuild_tensor_v2", G_REBUILD_TENSOR, -1},
    {"torch._utils", "_rebuild_parameter", G_REBUILD_PARAMETER, -1},
    {"torch", "FloatStorage", G_STORAGE, CKPT_F32},
    {"torch", "HalfStorage", G_STORAGE, CKPT_F16},
    {"torch", "BFloat16Storage", G_STORAGE, CKPT_BF16},
    {"torch", "DoubleStorage", G_STORAGE, CKPT_F64},
    {"torch", "LongStorage", G_STORAGE, CKPT_I64},
    {"torch", "IntStorage", G_STORAGE, CKPT_I32},
    {"torch", "ShortStorage", G_STORAGE, CKPT_I16},
    {"torch", "CharStorage", G_STORAGE, CKPT_I8},
    {"torch", "ByteStorage", G_STORAGE, CKPT_U8},
    {"torch", "BoolStorage", G_STORAGE, CKPT_BOOL},
};

typedef struct tensor_desc {
    struct pv *storage;
    int64_t offset;
    int n_dims;
    int64_t shape[CKPT_MAX_DIMS];
    int64_t numel;
} tensor_desc;

typedef struct pv {
    int kind;
    int gid; /* V_GLOBAL: index into whitelist */
    union {
        int64_t i;
        double f;
        struct {
            const uint8_t *s;
            size_t len;
        } str;
        struct {
            struct pv **it; /* dict: key, value pairs */
            int n, cap;     /* items (pairs count 2) */
        } seq;
        struct {
            int dtype;
            int64_t numel;
            const uint8_t *key;
            size_t key_len;
        } stg;
        tensor_desc *ten;
    } u;
} pv;

/* ---- a bump arena with a byte budget ---- */

typedef struct chunk {
    struct chunk *next;
    size_t used, cap;
    _Alignas(16) uint8_t mem[];
} chunk;

typedef struct arena {
    chunk *head;
    size_t total;
} arena;

static void *arena_alloc(arena *a, size_t n) {
    n = (n + 15) & ~(size_t)15;
    if (!a->head || a->head->cap - a->head->used < n) {
        size_t cap = n > (1u << 20) ? n : (1u << 20);
        if (a->total + cap > MAX_ARENA) return NULL;
        chunk *c = malloc(sizeof *c + cap);
        if (!c) return NULL;
        c->next = a->head;
        c->used = 0;
        c->cap = cap;
        a->head = c;
        a->total += cap;
    }
    void *p = a->head->mem + a->head->used;
    a->head->used += n;
    return p;
}

static void arena_free(arena *a) {
    for (chunk *c = a->head, *nx; c; c = nx) {
        nx = c->next;
        free(c);
    }
    a->head = NULL;
}

/* ---- the machine ---- */

typedef struct vm {
    const uint8_t *p;
    size_t n, pos, op_pos;
    arena ar;
    long n_values;
    pv **stack;
    long sp, stack_cap;
    long *marks;
    long n_marks, marks_cap;
    pv **memo;
    long memo_cap;  /* slots allocated; unset slots are NULL */
    long memo_next; /* MEMOIZE's next index */
    kiln_status st; /* of the first failure */
} vm;

static int fail(vm *m, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(vm *m, const char *fmt, ...) {
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    m->st = base_fail(strncmp(msg, "out of memory", 13) ? KILN_ERR_FORMAT : KILN_ERR_NOMEM, "data.pkl byte %zu: %s",
                      m->op_pos, msg);
    return -1;
}

static pv *new_value(vm *m, int kind) {
    if (++m->n_values > MAX_VALUES) {
        fail(m, "more than %d objects", MAX_VALUES);
        return NULL;
    }
    pv *v = arena_alloc(&m->ar, sizeof *v);
    if (!v) {
        fail(m, "out of memory (the pickle needs more than %zu MiB)", MAX_ARENA >> 20);
        return NULL;
    }
    memset(v, 0, sizeof *v);
    v->kind = kind;
    return v;
}

static int push(vm *m, pv *v) {
    if (!v) return -1;
    if (m->sp == m->stack_cap) {
        long cap = m->stack_cap ? m->stack_cap * 2 : 256;
        if (cap > MAX_VALUES) return fail(m, "stack deeper than %d", MAX_VALUES);
        pv **s = realloc(m->stack, (size_t)cap * sizeof *s);
        if (!s) return fail(m, "out of memory");
        m->stack = s;
        m->stack_cap = cap;
    }
    m->stack[m->sp++] = v;
    return 0;
}

/* Start of the current frame (after the last mark). */
static long frame(const vm *m) { return m->n_marks ? m->marks[m->n_marks - 1] : 0; }

static pv *pop(vm *m) {
    if (m->sp <= frame(m)) {
        fail(m, "stack underflow");
        return NULL;
    }
    return m->stack[--m->sp];
}

static pv *top(vm *m) {
    if (m->sp <= frame(m)) {
        fail(m, "stack underflow");
        return NULL;
    }
    return m->stack[m->sp - 1];
}

/* Ends the current frame: *base receives where its items start. */
static int pop_mark(vm *m, long *base) {
    if (!m->n_marks) return fail(m, "no MARK to close");
    *base = m->marks[--m->n_marks];
    return 0;
}

static int seq_add(vm *m, pv *s, pv *item) {
    if (s->u.seq.n == s->u.seq.cap) {
        int cap = s->u.seq.cap ? s->u.seq.cap * 2 : 4;
        if (cap > MAX_VALUES) return fail(m, "container larger than %d items", MAX_VALUES);
        pv **it = arena_alloc(&m->ar, (size_t)cap * sizeof *it);
        if (!it) return fail(m, "out of memory");
        if (s->u.seq.n) memcpy(it, s->u.seq.it, (size_t)s->u.seq.n * sizeof *it);
        s->u.seq.it = it; /* the old array stays in the arena */
        s->u.seq.cap = cap;
    }
    s->u.seq.it[s->u.seq.n++] = item;
    return 0;
}

/* A tuple of the stack items [base, sp). */
static pv *make_tuple(vm *m, long base) {
    pv *t = new_value(m, V_TUPLE);
    if (!t) return NULL;
    long n = m->sp - base;
    if (n > 0) {
        t->u.seq.it = arena_alloc(&m->ar, (size_t)n * sizeof(pv *));
        if (!t->u.seq.it) {
            fail(m, "out of memory");
            return NULL;
        }
        memcpy(t->u.seq.it, m->stack + base, (size_t)n * sizeof(pv *));
    }
    t->u.seq.n = t->u.seq.cap = (int)n;
    m->sp = base;
    return t;
}

static int need(vm *m, size_t k) {
    if (m->n - m->pos < k) return fail(m, "truncated (needs %zu more bytes)", k);
    return 0;
}

static uint64_t rd_le(const uint8_t *p, int k) {
    uint64_t v = 0;
    for (int i = k - 1; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

static int memo_put(vm *m, uint64_t idx, pv *v) {
    if (!v) return -1;
    if (idx >= MAX_MEMO) return fail(m, "memo index %llu out of range", (unsigned long long)idx);
    if ((long)idx >= m->memo_cap) {
        long cap = m->memo_cap ? m->memo_cap : 64;
        while (cap <= (long)idx) cap *= 2;
        if (cap > MAX_MEMO) cap = MAX_MEMO;
        pv **mm = realloc(m->memo, (size_t)cap * sizeof *mm);
        if (!mm) return fail(m, "out of memory");
        memset(mm + m->memo_cap, 0, (size_t)(cap - m->memo_cap) * sizeof *mm);
        m->memo = mm;
        m->memo_cap = cap;
    }
    m->memo[idx] = v;
    return 0;
}

static int memo_get(vm *m, uint64_t idx) {
    if ((long)idx >= m->memo_cap || idx >= MAX_MEMO || !m->memo[idx])
        return fail(m, "memo index %llu was never stored", (unsigned long long)idx);
    return push(m, m->memo[idx]);
}

static int str_is(const pv *v, const char *s) {
    size_t n = strlen(s);
    return v->kind == V_STR && v->u.str.len == n && memcmp(v->u.str.s, s, n) == 0;
}

/* module.name into buf for messages (non-printing bytes as '?'). */
static void global_text(char *buf, size_t cap, const uint8_t *mod, size_t ml, const uint8_t *name, size_t nl) {
    size_t k = 0;
    for (size_t i = 0; i < ml && k + 2 < cap && i < 80; i++)
        buf[k++] = mod[i] >= 32 && mod[i] < 127 ? (char)mod[i] : '?';
    if (k + 2 < cap) buf[k++] = '.';
    for (size_t i = 0; i < nl && k + 1 < cap && i < 80; i++)
        buf[k++] = name[i] >= 32 && name[i] < 127 ? (char)name[i] : '?';
    buf[k] = 0;
}

static int push_global(vm *m, const uint8_t *mod, size_t ml, const uint8_t *name, size_t nl) {
    for (int g = 0; g < (int)(sizeof whitelist / sizeof whitelist[0]); g++)
        if (strlen(whitelist[g].module) == ml && !memcmp(whitelist[g].module, mod, ml) &&
            strlen(whitelist[g].name) == nl && !memcmp(whitelist[g].name, name, nl)) {
            pv *v = new_value(m, V_GLOBAL);
            if (!v) return -1;
            v->gid = g;
            return push(m, v);
        }
    char buf[200];
    global_text(buf, sizeof buf, mod, ml, name, nl);
    return fail(m,
                "global '%s' is not allowed (a state dictionary needs only tensor rebuilds, storages and "
                "OrderedDict)",
                buf);
}

/* One newline-terminated line of GLOBAL's operand. */
static int read_line(vm *m, const uint8_t **s, size_t *len) {
    const uint8_t *start = m->p + m->pos;
    const uint8_t *nl = memchr(start, '\n', m->n - m->pos < 256 ? m->n - m->pos : 256);
    if (!nl) return fail(m, "GLOBAL operand without a newline within 256 bytes");
    *s = start;
    *len = (size_t)(nl - start);
    m->pos += *len + 1;
    return 0;
}

static const char *value_name(const pv *v) {
    if (v->kind != V_GLOBAL) return kind_names[v->kind];
    static _Thread_local char buf[96];
    snprintf(buf, sizeof buf, "%s.%s", whitelist[v->gid].module, whitelist[v->gid].name);
    return buf;
}

static int as_int(const pv *v, int64_t *out) {
    if (v->kind == V_INT || v->kind == V_BOOL) {
        *out = v->u.i;
        return 0;
    }
    return -1;
}

/* _rebuild_tensor_v2(storage, offset, size, stride, requires_grad, hooks[, metadata]) */
static pv *rebuild_tensor(vm *m, const pv *args) {
    if (args->u.seq.n != 6 && args->u.seq.n != 7) {
        fail(m, "_rebuild_tensor_v2 takes 6 or 7 arguments, not %d", args->u.seq.n);
        return NULL;
    }
    pv **a = args->u.seq.it;
    int64_t off;
    if (a[0]->kind != V_STORAGE) {
        fail(m, "_rebuild_tensor_v2: argument 1 is a %s, not a storage", value_name(a[0]));
        return NULL;
    }
    if (as_int(a[1], &off) || off < 0) {
        fail(m, "_rebuild_tensor_v2: bad storage offset");
        return NULL;
    }
    if (a[2]->kind != V_TUPLE || a[3]->kind != V_TUPLE || a[2]->u.seq.n != a[3]->u.seq.n ||
        a[2]->u.seq.n > CKPT_MAX_DIMS) {
        fail(m, "_rebuild_tensor_v2: size and stride must be tuples of equal length (at most %d)", CKPT_MAX_DIMS);
        return NULL;
    }
    if (a[4]->kind != V_BOOL && a[4]->kind != V_INT) {
        fail(m, "_rebuild_tensor_v2: requires_grad is a %s", value_name(a[4]));
        return NULL;
    }
    if (a[5]->kind != V_DICT || a[5]->u.seq.n) {
        fail(m, "_rebuild_tensor_v2: backward hooks must be an empty dict");
        return NULL;
    }
    if (args->u.seq.n == 7 && a[6]->kind != V_DICT && a[6]->kind != V_NONE) {
        fail(m, "_rebuild_tensor_v2: metadata is a %s", value_name(a[6]));
        return NULL;
    }
    tensor_desc *t = arena_alloc(&m->ar, sizeof *t);
    pv *v = t ? new_value(m, V_TENSOR) : NULL;
    if (!v) {
        if (!t) fail(m, "out of memory");
        return NULL;
    }
    memset(t, 0, sizeof *t);
    t->storage = a[0];
    t->offset = off;
    t->n_dims = a[2]->u.seq.n;
    uint64_t numel = 1;
    for (int d = 0; d < t->n_dims; d++) {
        int64_t s;
        if (as_int(a[2]->u.seq.it[d], &s) || s < 0 || base_mul_u64(numel, (uint64_t)s, &numel) ||
            numel > ((uint64_t)1 << 50)) {
            fail(m, "_rebuild_tensor_v2: bad size in dimension %d", d);
            return NULL;
        }
        t->shape[d] = s;
    }
    t->numel = (int64_t)numel;
    /* contiguous, row-major: dimensions of size 1 may carry any stride */
    int64_t want = 1;
    for (int d = t->n_dims - 1; d >= 0; d--) {
        int64_t st;
        if (as_int(a[3]->u.seq.it[d], &st)) {
            fail(m, "_rebuild_tensor_v2: stride %d is not an integer", d);
            return NULL;
        }
        if (t->shape[d] != 1 && st != want) {
            fail(m, "_rebuild_tensor_v2: the tensor is not contiguous (stride %lld in dimension %d, expected %lld)",
                 (long long)st, d, (long long)want);
            return NULL;
        }
        want *= t->shape[d];
    }
    uint64_t end;
    if (numel && (base_add_u64((uint64_t)off, numel, &end) || end > (uint64_t)a[0]->u.stg.numel)) {
        fail(m, "_rebuild_tensor_v2: elements %lld..%lld reach past the storage's %lld", (long long)off,
             (long long)(off + (int64_t)numel), (long long)a[0]->u.stg.numel);
        return NULL;
    }
    v->u.ten = t;
    return v;
}

static int do_reduce(vm *m) {
    pv *args = pop(m);
    pv *fn = args ? pop(m) : NULL;
    if (!fn) return -1;
    if (fn->kind != V_GLOBAL) return fail(m, "REDUCE of a %s (only whitelisted globals may be called)", value_name(fn));
    if (args->kind != V_TUPLE) return fail(m, "REDUCE of %s with %s arguments", value_name(fn), value_name(args));
    switch (whitelist[fn->gid].kind) {
    case G_ORDERED_DICT:
        if (args->u.seq.n) return fail(m, "OrderedDict called with %d arguments (expected none)", args->u.seq.n);
        return push(m, new_value(m, V_DICT));
    case G_REBUILD_TENSOR: return push(m, rebuild_tensor(m, args));
    case G_REBUILD_PARAMETER:
        if (args->u.seq.n != 3 || args->u.seq.it[0]->kind != V_TENSOR || args->u.seq.it[2]->kind != V_DICT ||
            args->u.seq.it[2]->u.seq.n)
            return fail(m, "_rebuild_parameter takes (tensor, requires_grad, {})");
        return push(m, args->u.seq.it[0]);
    default: return fail(m, "REDUCE of %s (a storage type is not callable here)", value_name(fn));
    }
}

/* BINPERSID: ('storage', StorageType, key, location, numel) */
static int do_persid(vm *m) {
    pv *pid = pop(m);
    if (!pid) return -1;
    if (pid->kind != V_TUPLE || pid->u.seq.n != 5 || !str_is(pid->u.seq.it[0], "storage"))
        return fail(m, "persistent id is not ('storage', type, key, location, size)");
    pv **a = pid->u.seq.it;
    if (a[1]->kind != V_GLOBAL || whitelist[a[1]->gid].kind != G_STORAGE)
        return fail(m, "persistent id names %s, not a storage type", value_name(a[1]));
    if (a[2]->kind != V_STR || !a[2]->u.str.len || a[2]->u.str.len > MAX_KEY)
        return fail(m, "storage key must be a string of 1 to %d characters", MAX_KEY);
    for (size_t i = 0; i < a[2]->u.str.len; i++) {
        uint8_t c = a[2]->u.str.s[i];
        if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'))
            return fail(m, "storage key has a character other than letters, digits and '_'");
    }
    if (a[3]->kind != V_STR) return fail(m, "storage location is a %s", value_name(a[3]));
    int64_t numel;
    if (as_int(a[4], &numel) || numel < 0 || numel > ((int64_t)1 << 50))
        return fail(m, "storage size is not an element count");
    pv *s = new_value(m, V_STORAGE);
    if (!s) return -1;
    s->u.stg.dtype = whitelist[a[1]->gid].dtype;
    s->u.stg.numel = numel;
    s->u.stg.key = a[2]->u.str.s;
    s->u.stg.key_len = a[2]->u.str.len;
    return push(m, s);
}

static int push_str(vm *m, int kind, uint64_t len) {
    if (need(m, len)) return -1;
    pv *v = new_value(m, kind);
    if (!v) return -1;
    v->u.str.s = m->p + m->pos;
    v->u.str.len = (size_t)len;
    m->pos += (size_t)len;
    return push(m, v);
}

static int push_int(vm *m, int64_t i, int kind) {
    pv *v = new_value(m, kind);
    if (!v) return -1;
    v->u.i = i;
    return push(m, v);
}

static int run(vm *m) {
    while (m->pos < m->n) {
        m->op_pos = m->pos;
        const uint8_t op = m->p[m->pos++];
        int rc = 0;
        long base = 0;
        pv *a, *b, *c;
        switch (op) {
        case 0x80: /* PROTO */
            if (need(m, 1)) return -1;
            if (m->p[m->pos] < 2 || m->p[m->pos] > 5) return fail(m, "pickle protocol %d", m->p[m->pos]);
            m->pos++;
            break;
        case 0x95: /* FRAME: the length only helps a streaming reader */
            if (need(m, 8)) return -1;
            m->pos += 8;
            break;
        case '.': /* STOP */ return 0;
        case '(': /* MARK */
            if (m->n_marks == m->marks_cap) {
                long cap = m->marks_cap ? m->marks_cap * 2 : 64;
                if (cap > MAX_VALUES) return fail(m, "more than %d marks", MAX_VALUES);
                long *mk = realloc(m->marks, (size_t)cap * sizeof *mk);
                if (!mk) return fail(m, "out of memory");
                m->marks = mk;
                m->marks_cap = cap;
            }
            m->marks[m->n_marks++] = m->sp;
            break;
        case '}': rc = push(m, new_value(m, V_DICT)); break;  /* EMPTY_DICT */
        case ']': rc = push(m, new_value(m, V_LIST)); break;  /* EMPTY_LIST */
        case ')': rc = push(m, new_value(m, V_TUPLE)); break; /* EMPTY_TUPLE */
        case 'N': rc = push(m, new_value(m, V_NONE)); break;
        case 0x88: rc = push_int(m, 1, V_BOOL); break; /* NEWTRUE */
        case 0x89: rc = push_int(m, 0, V_BOOL); break; /* NEWFALSE */
        case 'J':                                      /* BININT */
            if (need(m, 4)) return -1;
            rc = push_int(m, (int32_t)(uint32_t)rd_le(m->p + m->pos, 4), V_INT);
            m->pos += 4;
            break;
        case 'K': /* BININT1 */
            if (need(m, 1)) return -1;
            rc = push_int(m, m->p[m->pos++], V_INT);
            break;
        case 'M': /* BININT2 */
            if (need(m, 2)) return -1;
            rc = push_int(m, (int64_t)rd_le(m->p + m->pos, 2), V_INT);
            m->pos += 2;
            break;
        case 0x8a: { /* LONG1: little-endian two's complement */
            if (need(m, 1)) return -1;
            int k = m->p[m->pos++];
            if (k > 8) return fail(m, "integer of %d bytes", k);
            if (need(m, (size_t)k)) return -1;
            uint64_t u = rd_le(m->p + m->pos, k);
            if (k && k < 8 && (m->p[m->pos + k - 1] & 0x80)) u |= ~(uint64_t)0 << (8 * k);
            m->pos += (size_t)k;
            rc = push_int(m, (int64_t)u, V_INT);
            break;
        }
        case 'G': { /* BINFLOAT, big-endian */
            if (need(m, 8)) return -1;
            uint64_t u = 0;
            for (int i = 0; i < 8; i++) u = u << 8 | m->p[m->pos + i];
            m->pos += 8;
            pv *v = new_value(m, V_FLOAT);
            if (!v) return -1;
            memcpy(&v->u.f, &u, 8);
            rc = push(m, v);
            break;
        }
        case 'X': /* BINUNICODE */
            if (need(m, 4)) return -1;
            m->pos += 4;
            rc = push_str(m, V_STR, rd_le(m->p + m->pos - 4, 4));
            break;
        case 0x8c: /* SHORT_BINUNICODE */
            if (need(m, 1)) return -1;
            m->pos += 1;
            rc = push_str(m, V_STR, m->p[m->pos - 1]);
            break;
        case 0x8d: /* BINUNICODE8 */
            if (need(m, 8)) return -1;
            m->pos += 8;
            rc = push_str(m, V_STR, rd_le(m->p + m->pos - 8, 8));
            break;
        case 'U': /* SHORT_BINSTRING */
            if (need(m, 1)) return -1;
            m->pos += 1;
            rc = push_str(m, V_STR, m->p[m->pos - 1]);
            break;
        case 'T': { /* BINSTRING: a signed length */
            if (need(m, 4)) return -1;
            int32_t len = (int32_t)(uint32_t)rd_le(m->p + m->pos, 4);
            if (len < 0) return fail(m, "negative string length");
            m->pos += 4;
            rc = push_str(m, V_STR, (uint64_t)len);
            break;
        }
        case 'C': /* SHORT_BINBYTES */
            if (need(m, 1)) return -1;
            m->pos += 1;
            rc = push_str(m, V_BYTES, m->p[m->pos - 1]);
            break;
        case 'B': /* BINBYTES */
            if (need(m, 4)) return -1;
            m->pos += 4;
            rc = push_str(m, V_BYTES, rd_le(m->p + m->pos - 4, 4));
            break;
        case 0x8e: /* BINBYTES8 */
            if (need(m, 8)) return -1;
            m->pos += 8;
            rc = push_str(m, V_BYTES, rd_le(m->p + m->pos - 8, 8));
            break;
        case 'c': { /* GLOBAL "module\nname\n" */
            const uint8_t *mod, *name;
            size_t ml, nl;
            if (read_line(m, &mod, &ml) || read_line(m, &name, &nl)) return -1;
            rc = push_global(m, mod, ml, name, nl);
            break;
        }
        case 0x93: /* STACK_GLOBAL */
            b = pop(m);
            a = b ? pop(m) : NULL;
            if (!a) return -1;
            if (a->kind != V_STR || b->kind != V_STR) return fail(m, "STACK_GLOBAL of non-strings");
            rc = push_global(m, a->u.str.s, a->u.str.len, b->u.str.s, b->u.str.len);
            break;
        case 'q': /* BINPUT */
            if (need(m, 1)) return -1;
            rc = memo_put(m, m->p[m->pos++], top(m));
            break;
        case 'r': /* LONG_BINPUT */
            if (need(m, 4)) return -1;
            rc = memo_put(m, rd_le(m->p + m->pos, 4), top(m));
            m->pos += 4;
            break;
        case 0x94: /* MEMOIZE */
            rc = memo_put(m, (uint64_t)m->memo_next, top(m));
            m->memo_next++;
            break;
        case 'h': /* BINGET */
            if (need(m, 1)) return -1;
            rc = memo_get(m, m->p[m->pos++]);
            break;
        case 'j': /* LONG_BINGET */
            if (need(m, 4)) return -1;
            rc = memo_get(m, rd_le(m->p + m->pos, 4));
            m->pos += 4;
            break;
        case 't': /* TUPLE */
            if (pop_mark(m, &base)) return -1;
            rc = push(m, make_tuple(m, base));
            break;
        case 0x85:
        case 0x86:
        case 0x87: /* TUPLE1..3 */
            base = m->sp - (op - 0x84);
            if (base < frame(m)) return fail(m, "stack underflow");
            rc = push(m, make_tuple(m, base));
            break;
        case 'R': rc = do_reduce(m); break;
        case 'Q': rc = do_persid(m); break;
        case 'b': /* BUILD: state set on a dict (OrderedDict's _metadata) is data; skip it */
            a = pop(m);
            b = a ? top(m) : NULL;
            if (!b) return -1;
            if (b->kind != V_DICT) return fail(m, "BUILD on a %s (only a dict may take state)", value_name(b));
            break;
        case 's': /* SETITEM */
            c = pop(m);
            b = c ? pop(m) : NULL;
            a = b ? top(m) : NULL;
            if (!a) return -1;
            if (a->kind != V_DICT) return fail(m, "SETITEM on a %s", value_name(a));
            rc = seq_add(m, a, b) || seq_add(m, a, c) ? -1 : 0;
            break;
        case 'u': /* SETITEMS */
            if (pop_mark(m, &base)) return -1;
            if (base < 1 || base <= frame(m)) return fail(m, "SETITEMS without a dict");
            a = m->stack[base - 1];
            if (a->kind != V_DICT) return fail(m, "SETITEMS on a %s", value_name(a));
            if ((m->sp - base) % 2) return fail(m, "SETITEMS with an odd number of items");
            for (long i = base; i < m->sp && !rc; i++) rc = seq_add(m, a, m->stack[i]);
            m->sp = base;
            break;
        case 'a': /* APPEND */
            b = pop(m);
            a = b ? top(m) : NULL;
            if (!a) return -1;
            if (a->kind != V_LIST) return fail(m, "APPEND to a %s", value_name(a));
            rc = seq_add(m, a, b);
            break;
        case 'e': /* APPENDS */
            if (pop_mark(m, &base)) return -1;
            if (base < 1 || base <= frame(m)) return fail(m, "APPENDS without a list");
            a = m->stack[base - 1];
            if (a->kind != V_LIST) return fail(m, "APPENDS to a %s", value_name(a));
            for (long i = base; i < m->sp && !rc; i++) rc = seq_add(m, a, m->stack[i]);
            m->sp = base;
            break;
        case '0': /* POP: an item, or the mark when the frame is empty */
            if (m->sp > frame(m))
                m->sp--;
            else if (pop_mark(m, &base))
                return -1;
            break;
        case '1': /* POP_MARK */
            if (pop_mark(m, &base)) return -1;
            m->sp = base;
            break;
        case '2': /* DUP */
            a = top(m);
            rc = a ? push(m, a) : -1;
            break;
        case 'i': return fail(m, "opcode INST (creates an arbitrary object) is not allowed");
        case 'o': return fail(m, "opcode OBJ (creates an arbitrary object) is not allowed");
        case 0x81: return fail(m, "opcode NEWOBJ (creates an arbitrary object) is not allowed");
        case 0x92: return fail(m, "opcode NEWOBJ_EX (creates an arbitrary object) is not allowed");
        case 0x82:
        case 0x83:
        case 0x84: return fail(m, "opcode EXT (extension registry) is not allowed");
        case 'P': return fail(m, "opcode PERSID (text persistent id) is not allowed");
        default:
            if (op >= 32 && op < 127) return fail(m, "opcode '%c' (0x%02x) is not supported", op, op);
            return fail(m, "opcode 0x%02x is not supported", op);
        }
        if (rc) return -1;
    }
    m->op_pos = m->pos;
    return fail(m, "no STOP opcode");
}

/* The number of tensor values in dict d. */
static int n_tensor_values(const pv *d) {
    int k = 0;
    for (int i = 1; i < d->u.seq.n; i += 2) k += d->u.seq.it[i]->kind == V_TENSOR;
    return k;
}

static char *arena_strdup(arena *a, const uint8_t *s, size_t n) {
    char *d = arena_alloc(a, n + 1);
    if (!d) return NULL;
    memcpy(d, s, n);
    d[n] = 0;
    return d;
}

kiln_status ckpt_pickle_state_dict(const uint8_t *p, size_t n, ckpt_pkl_result *out) {
    memset(out, 0, sizeof *out);
    vm m;
    memset(&m, 0, sizeof m);
    m.p = p;
    m.n = n;
    int rc = run(&m);
    pv *root = NULL;
    if (!rc) {
        if (m.sp < 1)
            rc = fail(&m, "the pickle leaves nothing on the stack");
        else
            root = m.stack[m.sp - 1];
    }
    if (!rc && root->kind != V_DICT) rc = fail(&m, "the pickle holds a %s, not a state dictionary", value_name(root));
    if (!rc && !n_tensor_values(root)) /* a training checkpoint: {"state_dict": {...}, ...} */
        for (int i = 0; i + 1 < root->u.seq.n; i += 2)
            if (str_is(root->u.seq.it[i], "state_dict") && root->u.seq.it[i + 1]->kind == V_DICT) {
                root = root->u.seq.it[i + 1];
                break;
            }
    int nt = rc ? 0 : n_tensor_values(root);
    if (!rc && !nt) rc = fail(&m, "the state dictionary holds no tensors");
    ckpt_pkl_tensor *ts = rc ? NULL : arena_alloc(&m.ar, (size_t)nt * sizeof *ts);
    if (!rc && !ts) rc = fail(&m, "out of memory");
    int k = 0;
    for (int i = 0; !rc && i + 1 < root->u.seq.n; i += 2) {
        const pv *key = root->u.seq.it[i], *val = root->u.seq.it[i + 1];
        if (val->kind != V_TENSOR) continue;
        if (key->kind != V_STR || !key->u.str.len || memchr(key->u.str.s, 0, key->u.str.len)) {
            rc = fail(&m, "a tensor's key is not a non-empty string");
            break;
        }
        const tensor_desc *t = val->u.ten;
        ckpt_pkl_tensor *o = &ts[k++];
        o->name = arena_strdup(&m.ar, key->u.str.s, key->u.str.len);
        o->storage_key = arena_strdup(&m.ar, t->storage->u.stg.key, t->storage->u.stg.key_len);
        if (!o->name || !o->storage_key) rc = fail(&m, "out of memory");
        o->dtype = t->storage->u.stg.dtype;
        o->storage_numel = t->storage->u.stg.numel;
        o->offset = t->offset;
        o->n_dims = t->n_dims;
        memcpy(o->shape, t->shape, sizeof o->shape);
        o->numel = t->numel;
    }
    free(m.stack);
    free(m.marks);
    free(m.memo);
    if (rc) {
        arena_free(&m.ar);
        return m.st ? m.st : KILN_ERR_FORMAT;
    }
    /* the arena moves into the result: its chunks are freed by ckpt_pickle_free */
    arena *keep = malloc(sizeof *keep);
    if (!keep) {
        arena_free(&m.ar);
        return base_fail(KILN_ERR_NOMEM, "out of memory");
    }
    *keep = m.ar;
    out->tensors = ts;
    out->n = nt;
    out->arena = keep;
    return KILN_OK;
}

void ckpt_pickle_free(ckpt_pkl_result *r) {
    if (!r || !r->arena) return;
    arena_free(r->arena);
    free(r->arena);
    memset(r, 0, sizeof *r);
}
