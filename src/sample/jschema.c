/* jschema.c — JSON Schema to a recognizer of allowed output (jschema.h).
 *
 * Compiling turns the schema into a graph of nodes: object (keys in order,
 * which are required), array (item node, bounds), string, number, integer,
 * literal (the compact JSON texts of enum / const / true / false / null),
 * union (alternatives told apart by their first character) and "any".  A
 * $ref compiles its target once, so a recursive schema becomes a cycle.
 *
 * The recognizer is a stack of frames, one per value being written.  A
 * frame starts as "a value of node n, not begun"; its first byte fixes
 * which kind it is.  Numbers and literals have no closing byte: they end
 * when a byte arrives that cannot extend them, which then goes to the
 * frame below. */
#include "sample/jschema.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { N_ANY, N_OBJECT, N_ARRAY, N_STRING, N_NUMBER, N_INTEGER, N_LITERAL, N_UNION };

#define MAX_KEYS 64 /* properties of one object, values of one enum: bits of a frame's cand */
#define MAX_NUM 40  /* bytes of one number: a model must not write digits forever */
#define MAX_WS 20   /* indentation after a line break */

struct ks_node {
    int kind;
    uint8_t first[32];  /* bytes a value may begin with (bit set) */
    /* object: keys as they appear between the quotes (JSON-escaped) */
    int n_props, any_keys;
    char **keys;
    int *key_len;
    ks_node **props;
    uint8_t *req;
    /* array (items), string (characters) */
    ks_node *items;
    int min_items, max_items; /* max -1 = no bound */
    /* literal */
    int n_lits;
    char **lits;
    int *lit_len;
    /* union */
    int n_alts;
    ks_node **alts;
};

struct ks_schema {
    ks_node *root;
    ks_node **nodes; /* every node, for ks_schema_free */
    int n_nodes, cap_nodes;
    const json_t **memo_json; /* schema object -> node, for $ref */
    ks_node **memo_node;
    int n_memo, cap_memo;
    const json_t *doc;        /* the whole schema, where #/... refs point */
    char *err;
    size_t errsz;
};

/* Nodes the "any" node turns into at its first byte. */
static ks_node k_any, k_any_obj, k_any_arr, k_str, k_num, k_words;
static char *k_word_txt[] = {"true", "false", "null"};
static int k_word_len[] = {4, 5, 4};

static void set_bit(uint8_t *s, unsigned char c) { s[c >> 3] |= (uint8_t)(1u << (c & 7)); }
static int has_bit(const uint8_t *s, unsigned char c) { return s[c >> 3] >> (c & 7) & 1; }

static void first_of_kind(ks_node *n) {
    memset(n->first, 0, sizeof n->first);
    switch (n->kind) {
    case N_OBJECT: set_bit(n->first, '{'); break;
    case N_ARRAY: set_bit(n->first, '['); break;
    case N_STRING: set_bit(n->first, '"'); break;
    case N_NUMBER:
    case N_INTEGER:
        set_bit(n->first, '-');
        for (int c = '0'; c <= '9'; c++) set_bit(n->first, (unsigned char)c);
        break;
    case N_LITERAL:
        for (int i = 0; i < n->n_lits; i++) set_bit(n->first, (unsigned char)n->lits[i][0]);
        break;
    case N_ANY:
        for (const char *p = "{[\"-0123456789tfn"; *p; p++) set_bit(n->first, (unsigned char)*p);
        break;
    default: break;
    }
}

static void make_statics(void) {
    k_any.kind = N_ANY;
    k_any_obj.kind = N_OBJECT;
    k_any_obj.any_keys = 1;
    k_any_arr.kind = N_ARRAY;
    k_any_arr.items = &k_any;
    k_any_arr.max_items = -1;
    k_str.kind = N_STRING;
    k_str.max_items = -1;
    k_num.kind = N_NUMBER;
    k_words.kind = N_LITERAL;
    k_words.n_lits = 3;
    k_words.lits = k_word_txt;
    k_words.lit_len = k_word_len;
    ks_node *all[] = {&k_any_obj, &k_any_arr, &k_str, &k_num, &k_words, &k_any};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) first_of_kind(all[i]);
}

static void init_statics(void) {
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, make_statics);
}

/* ---- compiling ---- */

static ks_node *fail(ks_schema *s, const char *fmt, const char *what) {
    if (!s->err[0]) snprintf(s->err, s->errsz, fmt, what);
    return NULL;
}

static ks_node *new_node(ks_schema *s, int kind) {
    if (s->n_nodes == s->cap_nodes) {
        int cap = s->cap_nodes ? 2 * s->cap_nodes : 16;
        ks_node **nn = realloc(s->nodes, (size_t)cap * sizeof *nn);
        if (!nn) return fail(s, "%s", "out of memory");
        s->nodes = nn;
        s->cap_nodes = cap;
    }
    ks_node *n = calloc(1, sizeof *n);
    if (!n) return fail(s, "%s", "out of memory");
    n->kind = kind;
    n->max_items = -1;
    s->nodes[s->n_nodes++] = n;
    return n;
}

static ks_node *compile(ks_schema *s, const json_t *j, int depth);

/* A literal node of the compact texts of vals. */
static ks_node *literal(ks_schema *s, const json_t *const *vals, int n) {
    if (n < 1) return fail(s, "%s", "an empty enum allows nothing");
    if (n > MAX_KEYS) return fail(s, "an enum of more than %s values", "64");
    ks_node *node = new_node(s, N_LITERAL);
    if (!node) return NULL;
    node->lits = calloc((size_t)n, sizeof *node->lits);
    node->lit_len = calloc((size_t)n, sizeof *node->lit_len);
    if (!node->lits || !node->lit_len) return fail(s, "%s", "out of memory");
    node->n_lits = n;
    for (int i = 0; i < n; i++) {
        node->lits[i] = json_dumps(vals[i], JSON_COMPACT | JSON_ENCODE_ANY);
        if (!node->lits[i]) return fail(s, "%s", "out of memory");
        node->lit_len[i] = (int)strlen(node->lits[i]);
    }
    first_of_kind(node);
    return node;
}

/* The alternatives' first bytes must not overlap: the recognizer picks one
 * by the first byte and never goes back. */
static ks_node *make_union(ks_schema *s, ks_node **alts, int n) {
    if (n == 1) return alts[0];
    ks_node *u = new_node(s, N_UNION);
    if (!u) return NULL;
    u->alts = malloc((size_t)n * sizeof *u->alts);
    if (!u->alts) return fail(s, "%s", "out of memory");
    memcpy(u->alts, alts, (size_t)n * sizeof *alts);
    u->n_alts = n;
    for (int i = 0; i < n; i++) {
        for (int b = 0; b < 32; b++) {
            if (u->first[b] & alts[i]->first[b])
                return fail(s, "%s",
                            "anyOf / oneOf / a list of types whose alternatives can begin alike (two objects, two "
                            "arrays, string and string enum, number and integer...) is not supported");
            u->first[b] |= alts[i]->first[b];
        }
    }
    return u;
}

static ks_node *compile_object(ks_schema *s, const json_t *j, ks_node *n, int depth) {
    const json_t *props = json_object_get(j, "properties");
    if (props && !json_is_object(props)) return fail(s, "%s", "'properties' must be an object");
    const json_t *req = json_object_get(j, "required");
    if (req && !json_is_array(req)) return fail(s, "%s", "'required' must be an array");
    const size_t np = props ? json_object_size(props) : 0;
    if (np == 0) { /* no properties: any keys, values as additionalProperties says */
        n->any_keys = 1;
        const json_t *ap = json_object_get(j, "additionalProperties");
        if (json_is_object(ap) && !(n->items = compile(s, ap, depth + 1))) return NULL;
        return n;
    }
    if (np > MAX_KEYS) return fail(s, "an object of more than %s properties", "64");
    n->keys = calloc(np, sizeof *n->keys);
    n->key_len = calloc(np, sizeof *n->key_len);
    n->props = calloc(np, sizeof *n->props);
    n->req = calloc(np, 1);
    if (!n->keys || !n->key_len || !n->props || !n->req) return fail(s, "%s", "out of memory");
    const char *key;
    const json_t *sub;
    int i = 0;
    json_object_foreach((json_t *)props, key, sub) {
        json_t *ks = json_string(key);
        char *q = ks ? json_dumps(ks, JSON_ENCODE_ANY) : NULL; /* "key", escaped */
        json_decref(ks);
        if (!q) return fail(s, "%s", "out of memory");
        n->key_len[i] = (int)strlen(q) - 2;
        n->keys[i] = strndup(q + 1, (size_t)n->key_len[i]);
        free(q);
        if (!n->keys[i]) return fail(s, "%s", "out of memory");
        n->n_props = i + 1; /* for ks_schema_free */
        if (!(n->props[i] = compile(s, sub, depth + 1))) return NULL;
        size_t k;
        const json_t *r;
        json_array_foreach((json_t *)req, k, r) if (json_is_string(r) && !strcmp(json_string_value(r), key)) n->req[i] = 1;
        i++;
    }
    size_t k;
    const json_t *r;
    json_array_foreach((json_t *)req, k, r) {
        if (!json_is_string(r) || !json_object_get(props, json_string_value(r)))
            return fail(s, "required property '%s' is not among the properties", json_is_string(r) ? json_string_value(r) : "?");
    }
    return n;
}

static int get_count(ks_schema *s, const json_t *j, const char *name, int *out) {
    const json_t *v = json_object_get(j, name);
    if (!v) return 0;
    if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > 1000000) {
        fail(s, "'%s' must be a non-negative integer", name);
        return -1;
    }
    *out = (int)json_integer_value(v);
    return 0;
}

static int remember(ks_schema *s, const json_t *j, ks_node *n) {
    if (s->n_memo == s->cap_memo) {
        int cap = s->cap_memo ? 2 * s->cap_memo : 16;
        const json_t **mj = realloc(s->memo_json, (size_t)cap * sizeof *mj);
        if (mj) s->memo_json = mj;
        ks_node **mn = realloc(s->memo_node, (size_t)cap * sizeof *mn);
        if (mn) s->memo_node = mn;
        if (!mj || !mn) {
            fail(s, "%s", "out of memory");
            return -1;
        }
        s->cap_memo = cap;
    }
    s->memo_json[s->n_memo] = j;
    s->memo_node[s->n_memo++] = n;
    return 0;
}

/* The node of j with its type fixed to the name t.  memo: j is this one
 * node, so it is remembered before its children are compiled and a $ref
 * back to it closes a cycle. */
static ks_node *typed(ks_schema *s, const json_t *j, const char *t, int depth, int memo) {
    static const char *const names[] = {"object", "array", "string", "number", "integer"};
    static const int kinds[] = {N_OBJECT, N_ARRAY, N_STRING, N_NUMBER, N_INTEGER};
    if (!strcmp(t, "boolean")) return literal(s, (const json_t *[]){json_true(), json_false()}, 2);
    if (!strcmp(t, "null")) return literal(s, (const json_t *[]){json_null()}, 1);
    int kind = -1;
    for (int i = 0; i < 5; i++)
        if (!strcmp(t, names[i])) kind = kinds[i];
    if (kind < 0) return fail(s, "unknown type '%s'", t);
    ks_node *n = new_node(s, kind);
    if (!n) return NULL;
    first_of_kind(n); /* known before the children: enough for a union above a $ref back to n */
    if (memo && remember(s, j, n)) return NULL;
    if (kind == N_OBJECT) return compile_object(s, j, n, depth);
    if (kind == N_STRING) {
        if (get_count(s, j, "minLength", &n->min_items) || get_count(s, j, "maxLength", &n->max_items)) return NULL;
        if (n->max_items >= 0 && n->max_items < n->min_items) return fail(s, "%s", "maxLength is below minLength");
        return n;
    }
    if (kind != N_ARRAY) return n;
    const json_t *items = json_object_get(j, "items");
    if (json_is_array(items) || json_object_get(j, "prefixItems"))
        return fail(s, "%s", "tuple arrays (items as a list, prefixItems) are not supported");
    n->items = items ? compile(s, items, depth + 1) : &k_any;
    if (!n->items) return NULL;
    if (get_count(s, j, "minItems", &n->min_items) || get_count(s, j, "maxItems", &n->max_items)) return NULL;
    if (n->max_items >= 0 && n->max_items < n->min_items) return fail(s, "%s", "maxItems is below minItems");
    return n;
}

static const json_t *resolve_ref(ks_schema *s, const char *ref) {
    if (strncmp(ref, "#/", 2) && strcmp(ref, "#")) return NULL;
    const json_t *at = s->doc;
    const char *p = ref + 1;
    while (at && *p == '/') {
        const char *e = strchr(p + 1, '/');
        size_t len = e ? (size_t)(e - p - 1) : strlen(p + 1);
        char name[256];
        if (len >= sizeof name) return NULL;
        size_t o = 0; /* JSON pointer escapes: ~1 is '/', ~0 is '~' */
        for (size_t i = 0; i < len; i++) {
            if (p[1 + i] == '~' && i + 1 < len && (p[2 + i] == '0' || p[2 + i] == '1')) {
                name[o++] = p[2 + i] == '1' ? '/' : '~';
                i++;
            } else {
                name[o++] = p[1 + i];
            }
        }
        name[o] = 0;
        at = json_object_get(at, name);
        p += 1 + len;
    }
    return at;
}

static ks_node *compile(ks_schema *s, const json_t *j, int depth) {
    if (depth > 64) return fail(s, "%s", "the schema nests deeper than 64 levels");
    if (json_is_true(j)) return &k_any;
    if (json_is_false(j)) return fail(s, "%s", "a 'false' schema allows nothing");
    if (!json_is_object(j)) return fail(s, "%s", "a schema must be an object or a boolean");
    for (int i = 0; i < s->n_memo; i++)
        if (s->memo_json[i] == j) return s->memo_node[i];
    const json_t *ref = json_object_get(j, "$ref");
    if (ref) {
        if (!json_is_string(ref)) return fail(s, "%s", "'$ref' must be a string");
        const json_t *target = resolve_ref(s, json_string_value(ref));
        if (!target) return fail(s, "'$ref' %s does not point into this schema", json_string_value(ref));
        return compile(s, target, depth + 1);
    }
    const json_t *en = json_object_get(j, "enum"), *cn = json_object_get(j, "const");
    if (en) {
        if (!json_is_array(en)) return fail(s, "%s", "'enum' must be an array");
        const json_t *vals[MAX_KEYS];
        size_t n = json_array_size(en);
        if (n > MAX_KEYS) return fail(s, "an enum of more than %s values", "64");
        for (size_t i = 0; i < n; i++) vals[i] = json_array_get(en, i);
        return literal(s, vals, (int)n);
    }
    if (cn) return literal(s, &cn, 1);
    const json_t *all = json_object_get(j, "allOf");
    if (all) {
        if (!json_is_array(all) || json_array_size(all) != 1)
            return fail(s, "%s", "allOf is supported with exactly one schema");
        return compile(s, json_array_get(all, 0), depth + 1);
    }
    const json_t *any = json_object_get(j, "anyOf");
    if (!any) any = json_object_get(j, "oneOf");
    if (any) {
        if (!json_is_array(any) || !json_array_size(any)) return fail(s, "%s", "anyOf / oneOf must be a non-empty array");
        ks_node *alts[MAX_KEYS];
        size_t n = json_array_size(any);
        if (n > MAX_KEYS) return fail(s, "anyOf of more than %s schemas", "64");
        for (size_t i = 0; i < n; i++)
            if (!(alts[i] = compile(s, json_array_get(any, i), depth + 1))) return NULL;
        return make_union(s, alts, (int)n);
    }
    const json_t *type = json_object_get(j, "type");
    if (!type) { /* no type: what the keywords imply, else anything */
        if (json_object_get(j, "properties")) return typed(s, j, "object", depth, 1);
        if (json_object_get(j, "items")) return typed(s, j, "array", depth, 1);
        return &k_any;
    }
    if (json_is_string(type)) return typed(s, j, json_string_value(type), depth, 1);
    if (!json_is_array(type)) return fail(s, "%s", "'type' must be a string or an array of strings");
    ks_node *alts[8];
    size_t nt = json_array_size(type);
    if (!nt || nt > 8) return fail(s, "%s", "'type' must list 1 to 8 types");
    for (size_t i = 0; i < nt; i++) {
        const char *t = json_string_value(json_array_get(type, i));
        if (!t) return fail(s, "%s", "'type' must hold strings");
        if (!(alts[i] = typed(s, j, t, depth, 0))) return NULL;
    }
    return make_union(s, alts, (int)nt);
}

ks_schema *ks_schema_compile(const json_t *schema, char *err, size_t errsz) {
    init_statics();
    ks_schema *s = calloc(1, sizeof *s);
    char scratch[8];
    if (!err || !errsz) {
        err = scratch;
        errsz = sizeof scratch;
    }
    err[0] = 0;
    if (!s) {
        snprintf(err, errsz, "out of memory");
        return NULL;
    }
    s->err = err;
    s->errsz = errsz;
    s->doc = schema;
    s->root = schema ? compile(s, schema, 0) : &k_any;
    s->doc = NULL; /* nothing of the caller's is kept */
    free(s->memo_json);
    free(s->memo_node);
    s->memo_json = NULL;
    s->memo_node = NULL;
    if (!s->root) {
        if (!err[0]) snprintf(err, errsz, "the schema could not be compiled");
        ks_schema_free(s);
        return NULL;
    }
    return s;
}

void ks_schema_free(ks_schema *s) {
    if (!s) return;
    for (int i = 0; i < s->n_nodes; i++) {
        ks_node *n = s->nodes[i];
        for (int k = 0; k < n->n_props; k++) free(n->keys[k]);
        free(n->keys);
        free(n->key_len);
        free(n->props);
        free(n->req);
        for (int k = 0; k < n->n_lits; k++) free(n->lits[k]);
        free(n->lits);
        free(n->lit_len);
        free(n->alts);
        free(n);
    }
    free(s->nodes);
    free(s->memo_json);
    free(s->memo_node);
    free(s);
}

/* ---- recognizing ---- */

enum {
    S_VALUE,                                  /* not begun: whitespace, then the first byte */
    S_OBJ_OPEN, S_OBJ_KEY, S_OBJ_KEY_ESC, S_OBJ_KEY_U, S_OBJ_COLON, S_OBJ_VALUE, S_OBJ_AFTER, S_OBJ_COMMA,
    S_ARR_OPEN, S_ARR_VALUE, S_ARR_AFTER,
    S_STR, S_STR_ESC, S_STR_U,
    S_NUM_MINUS, S_NUM_ZERO, S_NUM_INT, S_NUM_DOT, S_NUM_FRAC, S_NUM_E, S_NUM_ESIGN, S_NUM_EXP,
    S_LIT,
};

static int is_ws(unsigned char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }
static int is_hex(unsigned char c) { return (c >= '0' && c <= '9') || ((c | 32) >= 'a' && (c | 32) <= 'f'); }

void ks_sv_init(ks_sv *v, const ks_schema *s) {
    init_statics();
    v->depth = 1;
    v->done = 0;
    v->ws = 0;
    v->f[0] = (ks_sv_frame){s ? s->root : &k_any, S_VALUE, -1, 0, 0};
}

/* Keys that may come after property idx: the next ones in order up to and
 * including the first required one. */
static uint64_t next_keys(const ks_node *n, int idx) {
    uint64_t m = 0;
    for (int j = idx + 1; j < n->n_props; j++) {
        m |= 1ull << j;
        if (n->req[j]) break;
    }
    return m;
}

static int required_after(const ks_node *n, int idx) {
    for (int j = idx + 1; j < n->n_props; j++)
        if (n->req[j]) return 1;
    return 0;
}

static int push(ks_sv *v, const ks_node *n) {
    if (v->depth == KS_SV_DEPTH) return 0;
    v->f[v->depth++] = (ks_sv_frame){n, S_VALUE, -1, 0, 0};
    return 1;
}

/* The top frame's value is complete: pop it and tell the frame below. */
static void value_done(ks_sv *v) {
    if (--v->depth == 0) {
        v->done = 1;
        return;
    }
    ks_sv_frame *p = &v->f[v->depth - 1];
    if (p->st == S_OBJ_VALUE) p->st = S_OBJ_AFTER;
    else if (p->st == S_ARR_VALUE) {
        p->idx++;
        p->st = S_ARR_AFTER;
    }
}

/* A number's state accepts an end there. */
static int num_whole(int st) { return st == S_NUM_ZERO || st == S_NUM_INT || st == S_NUM_FRAC || st == S_NUM_EXP; }

/* One byte of string content, the frame in state in, esc (after a
 * backslash) or u (in \uXXXX): 1 taken, 0 refused, 2 the closing quote. */
static int str_byte(ks_sv_frame *f, unsigned char ch, int in, int esc, int u) {
    if (f->st == in) {
        if (ch == '"') return 2;
        if (ch == '\\') f->st = esc;
        else if (ch < 0x20) return 0;
        return 1;
    }
    if (f->st == esc) {
        if (ch == 'u') {
            f->st = u;
            f->pos = 0;
            return 1;
        }
        if (!ch || !strchr("\"\\/bfnrt", ch)) return 0;
        f->st = in;
        return 1;
    }
    if (!is_hex(ch)) return 0;
    if (++f->pos == 4) f->st = in;
    return 1;
}

static int lit_whole(const ks_sv_frame *f) {
    for (int i = 0; i < f->n->n_lits; i++)
        if ((f->cand >> i & 1) && f->n->lit_len[i] == f->pos) return 1;
    return 0;
}

int ks_sv_byte(ks_sv *v, unsigned char ch) {
    if (is_ws(ch)) {
        /* inside a string or key it is content, else between tokens */
        ks_sv_frame *f = v->depth ? &v->f[v->depth - 1] : NULL;
        const int content = f && ((f->st >= S_STR && f->st <= S_STR_U) || (f->st >= S_OBJ_KEY && f->st <= S_OBJ_KEY_U));
        if (!content) {
            if (f && ((f->st >= S_NUM_MINUS && f->st <= S_NUM_EXP) || f->st == S_LIT)) {
                /* ends a number or literal, if it is whole */
                if (f->st == S_LIT ? !lit_whole(f) : !num_whole(f->st)) return 0;
                value_done(v);
            }
            /* between two tokens: nothing, one space, or a line break and
             * up to MAX_WS spaces or tabs (the whitespace llama.cpp's JSON
             * grammars allow), so a model that likes blank lines cannot
             * spend its budget on them.  v->ws: 0 none yet, 1 a space,
             * 2 + n a line break and n more. */
            if (v->ws == 0) v->ws = ch == ' ' ? 1 : ch == '\n' ? 2 : -1;
            else if (v->ws >= 2 && (ch == ' ' || ch == '\t') && v->ws - 2 < MAX_WS) v->ws++;
            else v->ws = -1;
            return v->ws > 0;
        }
    }
    v->ws = 0;
    for (;;) {
        if (v->done || v->depth == 0) return 0;
        ks_sv_frame *f = &v->f[v->depth - 1];
        const ks_node *n = f->n;
        switch (f->st) {
        case S_VALUE:
            while (n->kind == N_UNION) { /* the alternative this byte begins */
                const ks_node *pick = NULL;
                for (int i = 0; i < n->n_alts && !pick; i++)
                    if (has_bit(n->alts[i]->first, ch)) pick = n->alts[i];
                if (!pick) return 0;
                n = pick;
            }
            if (n->kind == N_ANY) {
                n = ch == '{' ? &k_any_obj : ch == '[' ? &k_any_arr : ch == '"' ? &k_str
                  : (ch == '-' || (ch >= '0' && ch <= '9')) ? &k_num : &k_words;
            }
            if (!has_bit(n->first, ch)) return 0;
            f->n = n;
            switch (n->kind) {
            case N_OBJECT: f->st = S_OBJ_OPEN; f->idx = -1; return 1;
            case N_ARRAY: f->st = S_ARR_OPEN; f->idx = 0; return 1;
            case N_STRING: f->st = S_STR; f->idx = 0; return 1;
            case N_NUMBER:
            case N_INTEGER:
                f->st = ch == '-' ? S_NUM_MINUS : ch == '0' ? S_NUM_ZERO : S_NUM_INT;
                f->pos = 1;
                return 1;
            default: /* N_LITERAL */
                f->cand = 0;
                for (int i = 0; i < n->n_lits; i++)
                    if ((unsigned char)n->lits[i][0] == ch) f->cand |= 1ull << i;
                f->st = S_LIT;
                f->pos = 1;
                return 1;
            }
        case S_OBJ_OPEN:
        case S_OBJ_COMMA:
            if (ch == '}' && f->st == S_OBJ_OPEN && (n->any_keys || !required_after(n, -1))) break;
            if (ch != '"') return 0;
            if (!n->any_keys && !(f->cand = next_keys(n, f->idx))) return 0;
            f->st = S_OBJ_KEY;
            f->pos = 0;
            return 1;
        case S_OBJ_KEY:
            if (n->any_keys) {
                const int r = str_byte(f, ch, S_OBJ_KEY, S_OBJ_KEY_ESC, S_OBJ_KEY_U);
                if (r == 2) f->st = S_OBJ_COLON;
                return r != 0;
            }
            if (ch == '"') { /* the key whose text ends here */
                for (int i = 0; i < n->n_props; i++)
                    if ((f->cand >> i & 1) && n->key_len[i] == f->pos) {
                        f->idx = i;
                        f->st = S_OBJ_COLON;
                        return 1;
                    }
                return 0;
            }
            {
                uint64_t keep = 0;
                for (int i = 0; i < n->n_props; i++)
                    if ((f->cand >> i & 1) && n->key_len[i] > f->pos && (unsigned char)n->keys[i][f->pos] == ch)
                        keep |= 1ull << i;
                if (!keep) return 0;
                f->cand = keep;
                f->pos++;
                return 1;
            }
        case S_OBJ_KEY_ESC:
        case S_OBJ_KEY_U: return str_byte(f, ch, S_OBJ_KEY, S_OBJ_KEY_ESC, S_OBJ_KEY_U) != 0;
        case S_OBJ_COLON:
            if (ch != ':') return 0;
            f->st = S_OBJ_VALUE;
            return push(v, n->any_keys ? (n->items ? n->items : &k_any) : n->props[f->idx]);
        case S_OBJ_AFTER:
            if (ch == '}' && (n->any_keys || !required_after(n, f->idx))) break;
            if (ch != ',' || (!n->any_keys && !next_keys(n, f->idx))) return 0;
            f->st = S_OBJ_COMMA;
            return 1;
        case S_ARR_OPEN:
            if (ch == ']' && n->min_items == 0) break;
            if (n->max_items == 0) return 0;
            f->st = S_ARR_VALUE;
            if (!push(v, n->items)) return 0;
            continue; /* the byte begins the first item */
        case S_ARR_AFTER:
            if (ch == ']' && f->idx >= n->min_items) break;
            if (ch != ',' || (n->max_items >= 0 && f->idx >= n->max_items)) return 0;
            f->st = S_ARR_VALUE;
            return push(v, n->items);
        case S_STR:
        case S_STR_ESC:
        case S_STR_U: {
            /* characters counted for min/maxLength: a UTF-8 lead byte or an
             * escape (\\n, \\u00e9) begins one */
            if (f->st == S_STR && ch == '"' && f->idx < n->min_items) return 0;
            if (f->st == S_STR && ch != '"' && (ch & 0xC0) != 0x80) {
                if (n->max_items >= 0 && f->idx >= n->max_items) return 0;
                f->idx++;
            }
            const int r = str_byte(f, ch, S_STR, S_STR_ESC, S_STR_U);
            if (r != 2) return r;
            break;
        }
        case S_LIT: {
            uint64_t keep = 0;
            for (int i = 0; i < n->n_lits; i++)
                if ((f->cand >> i & 1) && n->lit_len[i] > f->pos && (unsigned char)n->lits[i][f->pos] == ch)
                    keep |= 1ull << i;
            if (keep) {
                f->cand = keep;
                f->pos++;
                return 1;
            }
            if (!lit_whole(f)) return 0;
            value_done(v);
            continue; /* the byte belongs to the frame below */
        }
        default: { /* numbers */
            const int integer = n->kind == N_INTEGER;
            const int digit = ch >= '0' && ch <= '9';
            int next = -1;
            switch (f->st) {
            case S_NUM_MINUS: next = ch == '0' ? S_NUM_ZERO : digit ? S_NUM_INT : -1; break;
            case S_NUM_ZERO:
            case S_NUM_INT:
                if (digit && f->st == S_NUM_INT) next = S_NUM_INT;
                else if (!integer && ch == '.') next = S_NUM_DOT;
                else if (!integer && (ch == 'e' || ch == 'E')) next = S_NUM_E;
                break;
            case S_NUM_DOT: next = digit ? S_NUM_FRAC : -1; break;
            case S_NUM_FRAC: next = digit ? S_NUM_FRAC : (ch == 'e' || ch == 'E') ? S_NUM_E : -1; break;
            case S_NUM_E: next = digit ? S_NUM_EXP : (ch == '+' || ch == '-') ? S_NUM_ESIGN : -1; break;
            case S_NUM_ESIGN: next = digit ? S_NUM_EXP : -1; break;
            case S_NUM_EXP: next = digit ? S_NUM_EXP : -1; break;
            default: return 0;
            }
            if (next >= 0) {
                if (++f->pos > MAX_NUM) return 0;
                f->st = next;
                return 1;
            }
            if (!num_whole(f->st)) return 0;
            value_done(v);
            continue;
        }
        }
        /* the closing byte of an object, array or string */
        value_done(v);
        return 1;
    }
}

int ks_sv_complete(const ks_sv *v) {
    if (v->done) return 1;
    if (v->depth != 1) return 0;
    const ks_sv_frame *f = &v->f[0];
    if (f->st == S_LIT) return lit_whole(f);
    return f->st >= S_NUM_MINUS && f->st <= S_NUM_EXP && num_whole(f->st);
}

int ks_sv_accepts(const ks_sv *v, const char *s, int n) {
    ks_sv t;
    /* frames above the current depth are written before they are read */
    t.depth = v->depth;
    t.done = v->done;
    t.ws = v->ws;
    memcpy(t.f, v->f, (size_t)v->depth * sizeof v->f[0]);
    for (int i = 0; i < n; i++)
        if (!ks_sv_byte(&t, (unsigned char)s[i])) return 0;
    return 1;
}
