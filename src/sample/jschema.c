/* jschema.c — JSON Schema to a recognizer of allowed output (jschema.h).
 *
 * Compiling turns the schema into a graph of nodes: object (keys in order,
 * which are required), array (item node, bounds), string (lengths, and a
 * DFA for pattern and format), number and integer (a range, exact in
 * decimal), literal (the compact JSON texts of enum / const / true / false
 * / null), union (alternatives told apart by their first character) and
 * "any".  A $ref compiles its target once, so a recursive schema becomes a
 * cycle.
 *
 * The recognizer is a stack of frames, one per value being written.  A
 * frame starts as "a value of node n, not begun"; its first byte fixes
 * which kind it is.  Numbers and literals have no closing byte: they end
 * when a byte arrives that cannot extend them, which then goes to the
 * frame below.  Every byte it takes can still lead to an allowed value:
 * a number's digits are taken only while some completion lies in its
 * range, a string's characters only while its DFA and length bounds still
 * reach an end. */
#include "sample/jschema.h"

#include "sample/regex.h"

#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { N_ANY, N_OBJECT, N_ARRAY, N_STRING, N_NUMBER, N_INTEGER, N_LITERAL, N_UNION };

#define MAX_KEYS 64 /* properties of one object, values of one enum: bits of a frame's cand */
#define MAX_WS 20   /* indentation after a line break */

/* Digits of a number without a range: integer part, fraction, exponent. */
#define FREE_INT_DIGITS 16
#define FREE_FRAC_DIGITS 16
#define FREE_EXP_DIGITS 3
/* A number with a range is written in plain decimal (no exponent) with at
 * most NUM_INT_DIGITS + NUM_FRAC_DIGITS digits, and held to its range
 * exactly: values are integers in units of 10^-NUM_FRAC_DIGITS.  An
 * integer has at most INT_DIGITS digits and, without bounds, lies within
 * +-(2^53 - 1), the integers every JSON parser reads exactly. */
#define NUM_INT_DIGITS 16
#define NUM_FRAC_DIGITS 16
#define INT_DIGITS 19
#define INT_SAFE 9007199254740991LL
/* minLength / maxLength up to this are folded into a pattern's DFA */
#define LEN_EXACT 1000
/* Schema keywords inside each other (the compiler's recursion): a level of
 * value nesting often takes two (properties, then a $ref). */
#define MAX_NEST (2 * SAMPLE_SV_DEPTH)
/* sample_node.min_depth beyond 1..SAMPLE_SV_DEPTH: a finite value exists but each
 * nests deeper than the recognizer's stack; no finite value exists */
#define DEPTH_DEEP (SAMPLE_SV_DEPTH + 1)
#define DEPTH_NONE INT_MAX

typedef __int128 i128;

struct sample_node {
    int kind;
    int id;            /* index in sample_schema.nodes; -1 for the static nodes */
    int min_depth;     /* frames the shallowest value takes (a leaf 1), DEPTH_DEEP
                      or DEPTH_NONE; 0 while compiling (counts as fitting) */
    uint8_t first[32]; /* bytes a value may begin with (bit set) */
    /* object: keys as they appear between the quotes (JSON-escaped) */
    int n_props, any_keys;
    char **keys;
    int *key_len;
    sample_node **props;
    uint8_t *req;
    /* array (items), string (characters) */
    sample_node *items;
    int min_items, max_items; /* max -1 = no bound */
    /* string: pattern and format as one DFA (NULL: any text) */
    const sample_re *re;
    sample_re *re_owned; /* re, when this node owns it */
    /* number, integer: ranged 1 when held to [lo, hi] in units of
     * 10^-frac (frac 0 for integers) */
    int ranged, frac;
    i128 lo, hi;
    /* literal */
    int n_lits;
    char **lits;
    int *lit_len;
    /* union */
    int n_alts;
    sample_node **alts;
};

struct sample_schema {
    sample_node *root;
    sample_node **nodes; /* every node, for sample_schema_free */
    int n_nodes, cap_nodes;
    const json_t **memo_json; /* schema object -> node, for $ref */
    sample_node **memo_node;
    int n_memo, cap_memo;
    const json_t *doc; /* the whole schema, where #/... refs point */
    char *err;
    size_t errsz;
};

/* Nodes the "any" node turns into at its first byte. */
static sample_node k_any, k_any_obj, k_any_arr, k_str, k_num, k_words;
static sample_schema k_any_obj_schema = {.root = &k_any_obj};
static char *k_word_txt[] = {"true", "false", "null"};
static int k_word_len[] = {4, 5, 4};
static i128 k_p10[39]; /* powers of ten */

static void set_bit(uint8_t *s, unsigned char c) { s[c >> 3] |= (uint8_t)(1u << (c & 7)); }
static int has_bit(const uint8_t *s, unsigned char c) { return s[c >> 3] >> (c & 7) & 1; }

static void first_of_kind(sample_node *n) {
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
    k_p10[0] = 1;
    for (int i = 1; i < 39; i++) k_p10[i] = k_p10[i - 1] * 10;
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
    sample_node *all[] = {&k_any_obj, &k_any_arr, &k_str, &k_num, &k_words, &k_any};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) {
        first_of_kind(all[i]);
        all[i]->id = -1;
        all[i]->min_depth = 1;
    }
}

static void init_statics(void) {
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, make_statics);
}

/* ---- formats: anchored patterns, compiled once per process ---- */

#define DATE_RE                                                                                                   \
    "(?:(?:[0-9]{2}(?:0[48]|[2468][048]|[13579][26])|(?:0[048]|[2468][048]|[13579][26])00)-02-29|[0-9]{4}-"       \
    "(?:(?:0[13578]|1[02])-(?:0[1-9]|[12][0-9]|3[01])|(?:0[469]|11)-(?:0[1-9]|[12][0-9]|30)|02-(?:0[1-9]|1[0-9]|" \
    "2[0-8])))"
#define TIME_RE \
    "(?:[01][0-9]|2[0-3]):[0-5][0-9]:(?:[0-5][0-9]|60)(?:\\.[0-9]{1,9})?(?:[Zz]|[+-](?:[01][0-9]|2[0-3]):[0-5][0-9])"
#define LABEL_RE "[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
#define ATOM_RE "[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+"

static const struct format {
    const char *name;
    const char *re;
    int max_len; /* characters, -1 none */
} k_formats[] = {
    /* RFC 3339 full-date (February 29 only in leap years), full-time
     * (fractions up to nanoseconds), date-time */
    {"date", "^" DATE_RE "$", -1},
    {"time", "^" TIME_RE "$", -1},
    {"date-time", "^" DATE_RE "[Tt]" TIME_RE "$", -1},
    /* RFC 4122 text form */
    {"uuid", "^[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}$", -1},
    /* a dot-atom local part at a domain of two or more labels, the last
     * beginning with a letter; RFC 5321's 254 characters */
    {"email", "^" ATOM_RE "(?:\\." ATOM_RE ")*@(?:" LABEL_RE "\\.)+[A-Za-z](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?$", 254},
    {"ipv4", "^(?:(?:25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])\\.){3}(?:25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])$",
     -1},
    /* RFC 1123 labels of up to 63 characters, 253 in all */
    {"hostname", "^" LABEL_RE "(?:\\." LABEL_RE ")*$", 253},
};
#define N_FORMATS ((int)(sizeof k_formats / sizeof k_formats[0]))

static sample_re *k_format_re[N_FORMATS];
static char k_format_err[N_FORMATS][128];

static void make_formats(void) {
    for (int i = 0; i < N_FORMATS; i++)
        k_format_re[i] =
            sample_re_compile(k_formats[i].re, strlen(k_formats[i].re), k_format_err[i], sizeof k_format_err[i]);
}

static const sample_re *format_re(int i, const char **err) {
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, make_formats);
    *err = k_format_err[i];
    return k_format_re[i];
}

/* ---- compiling ---- */

static sample_node *fail(sample_schema *s, const char *fmt, const char *what) {
    if (!s->err[0]) snprintf(s->err, s->errsz, fmt, what);
    return NULL;
}

static int failn(sample_schema *s, const char *fmt, const char *what) {
    fail(s, fmt, what);
    return -1;
}

static sample_node *new_node(sample_schema *s, int kind) {
    if (s->n_nodes == s->cap_nodes) {
        int cap = s->cap_nodes ? 2 * s->cap_nodes : 16;
        sample_node **nn = realloc(s->nodes, (size_t)cap * sizeof *nn);
        if (!nn) return fail(s, "%s", "out of memory");
        s->nodes = nn;
        s->cap_nodes = cap;
    }
    sample_node *n = calloc(1, sizeof *n);
    if (!n) return fail(s, "%s", "out of memory");
    n->kind = kind;
    n->max_items = -1;
    n->id = s->n_nodes;
    s->nodes[s->n_nodes++] = n;
    return n;
}

static sample_node *compile(sample_schema *s, const json_t *j, int depth, int no_lit);
static int node_accepts(const sample_node *n, const char *text, int len);

/* A literal node of the compact texts of vals. */
static sample_node *literal(sample_schema *s, const json_t *const *vals, int n) {
    if (n < 1) return fail(s, "%s", "an empty enum allows nothing");
    if (n > MAX_KEYS) return fail(s, "an enum of more than %s values", "64");
    sample_node *node = new_node(s, N_LITERAL);
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
static sample_node *make_union(sample_schema *s, sample_node **alts, int n) {
    if (n == 1) return alts[0];
    sample_node *u = new_node(s, N_UNION);
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

static int get_count(sample_schema *s, const json_t *j, const char *name, int *out) {
    const json_t *v = json_object_get(j, name);
    if (!v) return 0;
    if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > 1000000)
        return failn(s, "'%s' must be a non-negative integer", name);
    *out = (int)json_integer_value(v);
    return 0;
}

static sample_node *compile_object(sample_schema *s, const json_t *j, sample_node *n, int depth) {
    const json_t *props = json_object_get(j, "properties");
    if (props && !json_is_object(props)) return fail(s, "%s", "'properties' must be an object");
    const json_t *req = json_object_get(j, "required");
    if (req && !json_is_array(req)) return fail(s, "%s", "'required' must be an array");
    const json_t *ap = json_object_get(j, "additionalProperties"), *up = json_object_get(j, "unevaluatedProperties");
    if (up && !json_is_false(up)) return fail(s, "%s", "'unevaluatedProperties' other than false is not supported");
    const size_t np = props ? json_object_size(props) : 0;
    int min_p = 0, max_p = -1;
    if (get_count(s, j, "minProperties", &min_p) || get_count(s, j, "maxProperties", &max_p)) return NULL;
    if (np == 0) {
        if (json_array_size(req))
            return fail(s, "required property '%s' is not among the properties",
                        json_string_value(json_array_get(req, 0)) ? json_string_value(json_array_get(req, 0)) : "?");
        if (json_is_false(ap) || json_is_false(up)) { /* no properties and no others: {} */
            if (min_p > 0) return fail(s, "%s", "'minProperties' above the properties the object may have");
            return n;
        }
        if (min_p > 0 || max_p >= 0)
            return fail(s, "%s", "minProperties / maxProperties on an open object are not supported");
        n->any_keys = 1; /* any keys, values as additionalProperties says */
        if (json_is_object(ap) && !(n->items = compile(s, ap, depth + 1, 0))) return NULL;
        return n;
    }
    if (np > MAX_KEYS) return fail(s, "an object of more than %s properties", "64");
    /* the keys are the properties (others are never written), so bounds
     * on their count hold when the required ones reach the minimum and
     * all of them stay under the maximum */
    if (max_p >= 0 && (size_t)max_p < np)
        return fail(s, "%s", "'maxProperties' below the number of properties is not supported");
    if ((size_t)min_p > json_array_size(req))
        return fail(s, "%s", "'minProperties' above the number of required properties is not supported");
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
        n->n_props = i + 1; /* for sample_schema_free */
        if (!(n->props[i] = compile(s, sub, depth + 1, 0))) return NULL;
        size_t k;
        const json_t *r;
        json_array_foreach((json_t *)req, k, r) if (json_is_string(r) && !strcmp(json_string_value(r), key)) n->req[i] =
            1;
        i++;
    }
    size_t k;
    const json_t *r;
    json_array_foreach((json_t *)req, k, r) {
        if (!json_is_string(r) || !json_object_get(props, json_string_value(r)))
            return fail(s, "required property '%s' is not among the properties",
                        json_is_string(r) ? json_string_value(r) : "?");
    }
    return n;
}

static int remember(sample_schema *s, const json_t *j, sample_node *n) {
    if (s->n_memo == s->cap_memo) {
        int cap = s->cap_memo ? 2 * s->cap_memo : 16;
        const json_t **mj = realloc(s->memo_json, (size_t)cap * sizeof *mj);
        if (mj) s->memo_json = mj;
        sample_node **mn = realloc(s->memo_node, (size_t)cap * sizeof *mn);
        if (mn) s->memo_node = mn;
        if (!mj || !mn) return failn(s, "%s", "out of memory");
        s->cap_memo = cap;
    }
    s->memo_json[s->n_memo] = j;
    s->memo_node[s->n_memo++] = n;
    return 0;
}

/* ---- numbers: bounds in units of 10^-frac ---- */

static i128 max_mag(const sample_node *n) {
    return n->kind == N_INTEGER ? k_p10[INT_DIGITS] - 1 : k_p10[NUM_INT_DIGITS + NUM_FRAC_DIGITS] - 1;
}

/* The JSON number v times 10^frac, rounded up (up) or down, saturating
 * far beyond any bound a number can reach. */
static i128 scaled(const json_t *v, int frac, int up) {
    const i128 big = k_p10[37];
    if (json_is_integer(v)) return (i128)json_integer_value(v) * k_p10[frac];
    /* a real: its shortest decimal form, which is what the schema said */
    const double d = json_real_value(v);
    char buf[40];
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(buf, sizeof buf, "%.*e", prec - 1, d);
        if (strtod(buf, NULL) == d) break;
    }
    const char *p = buf;
    int neg = 0;
    if (*p == '-') neg = 1, p++;
    if (*p == 'i' || *p == 'n') return neg ? -big : big; /* inf, nan: no bound */
    i128 mant = 0;
    int nd = 0, exp10 = 0;
    for (; *p && *p != 'e'; p++)
        if (*p >= '0' && *p <= '9') mant = mant * 10 + (*p - '0'), nd++;
    if (*p == 'e') exp10 = atoi(p + 1);
    /* value = mant * 10^(exp10 - (nd - 1)); scaled: times 10^frac */
    int e = exp10 - (nd - 1) + frac;
    i128 mag;
    int exact = 1;
    if (e >= 0) {
        mag = e + nd > 37 ? big : mant * k_p10[e];
    } else if (-e > 37) {
        mag = 0;
        exact = mant == 0;
    } else {
        mag = mant / k_p10[-e];
        exact = mant % k_p10[-e] == 0;
    }
    /* round the magnitude so the signed value rounds as asked */
    if (!exact && (neg ? !up : up)) mag++;
    return neg ? -mag : mag;
}

/* Bounds of a number or integer node from minimum, maximum and their
 * exclusive forms (numbers, or draft 4's booleans). */
static int number_range(sample_schema *s, const json_t *j, sample_node *n) {
    const json_t *mn = json_object_get(j, "minimum"), *mx = json_object_get(j, "maximum");
    const json_t *emn = json_object_get(j, "exclusiveMinimum"), *emx = json_object_get(j, "exclusiveMaximum");
    const json_t *mo = json_object_get(j, "multipleOf"), *fm = json_object_get(j, "format");
    const int integer = n->kind == N_INTEGER;
    const char *names[] = {"minimum", "maximum"};
    const json_t *vals[] = {mn, mx};
    for (int i = 0; i < 2; i++)
        if (vals[i] && !json_is_number(vals[i])) return failn(s, "'%s' must be a number", names[i]);
    if ((emn && !json_is_number(emn) && !json_is_boolean(emn)) ||
        (emx && !json_is_number(emx) && !json_is_boolean(emx)))
        return failn(s, "%s", "'exclusiveMinimum' / 'exclusiveMaximum' must be numbers");
    if (mo && !(integer && json_is_number(mo) && json_number_value(mo) == 1))
        return failn(s, "%s", "'multipleOf' is not supported (except 1 on an integer)");
    n->frac = integer ? 0 : NUM_FRAC_DIGITS;
    n->ranged = integer || mn || mx || json_is_number(emn) || json_is_number(emx);
    const i128 lim = max_mag(n);
    /* an integer without a bound on one side stays safe on that side */
    n->lo = integer && !mn && !json_is_number(emn) ? -(i128)INT_SAFE : -lim;
    n->hi = integer && !mx && !json_is_number(emx) ? (i128)INT_SAFE : lim;
    if (integer && json_is_string(fm)) { /* OpenAPI's integer formats (string formats say nothing of numbers) */
        const char *f = json_string_value(fm);
        if (!strcmp(f, "int32"))
            n->lo = -(i128)2147483648LL, n->hi = 2147483647;
        else if (!strcmp(f, "int64"))
            n->lo = -(i128)9223372036854775807LL - 1, n->hi = 9223372036854775807LL;
    }
    if (!n->ranged) return 0;
    i128 lo = n->lo, hi = n->hi, v;
    if (mn) {
        v = json_is_true(emn) ? scaled(mn, n->frac, 0) + 1 : scaled(mn, n->frac, 1);
        if (v > lo) lo = v;
    }
    if (json_is_number(emn) && (v = scaled(emn, n->frac, 0) + 1) > lo) lo = v;
    if (mx) {
        v = json_is_true(emx) ? scaled(mx, n->frac, 1) - 1 : scaled(mx, n->frac, 0);
        if (v < hi) hi = v;
    }
    if (json_is_number(emx) && (v = scaled(emx, n->frac, 1) - 1) < hi) hi = v;
    if (lo < -lim) lo = -lim;
    if (hi > lim) hi = lim;
    if (lo > hi)
        return failn(s, "the range (minimum, maximum and their exclusive forms) allows no %s",
                     integer ? "integer" : "number of up to 16 decimals");
    n->lo = lo;
    n->hi = hi;
    return 0;
}

/* ---- strings: pattern and format ---- */

static int compile_string(sample_schema *s, const json_t *j, sample_node *n) {
    if (get_count(s, j, "minLength", &n->min_items) || get_count(s, j, "maxLength", &n->max_items)) return -1;
    const json_t *pat = json_object_get(j, "pattern"), *fm = json_object_get(j, "format");
    if (pat && !json_is_string(pat)) return failn(s, "%s", "'pattern' must be a string");
    if (fm && !json_is_string(fm)) return failn(s, "%s", "'format' must be a string");
    const sample_re *fre = NULL;
    if (fm) {
        const char *name = json_string_value(fm), *ferr = "";
        int i = 0;
        while (i < N_FORMATS && strcmp(k_formats[i].name, name)) i++;
        if (i == N_FORMATS)
            return failn(s,
                         "format '%s' is not supported (supported: date, time, date-time, uuid, email, ipv4, hostname)",
                         name);
        if (!(fre = format_re(i, &ferr))) return failn(s, "format: %s", ferr);
        if (k_formats[i].max_len >= 0 && (n->max_items < 0 || n->max_items > k_formats[i].max_len))
            n->max_items = k_formats[i].max_len;
    }
    if (n->max_items >= 0 && n->max_items < n->min_items) return failn(s, "%s", "maxLength is below minLength");
    if (pat) {
        char msg[160];
        sample_re *re = sample_re_compile(json_string_value(pat), json_string_length(pat), msg, sizeof msg);
        if (!re) return failn(s, "pattern: %s", msg);
        if (fre) {
            sample_re *both = sample_re_intersect(re, fre, msg, sizeof msg);
            sample_re_free(re);
            if (!both) return failn(s, "pattern with format: %s", msg);
            re = both;
        }
        n->re = n->re_owned = re;
    } else {
        n->re = fre;
    }
    if (n->re && (n->min_items > 0 || n->max_items >= 0) && n->min_items <= LEN_EXACT && n->max_items <= LEN_EXACT) {
        /* lengths exactly: the DFA times a count of characters, while that
         * stays small; beyond, the bounds are checked against each state's
         * shortest and longest completion (pat_step) */
        char len_pat[64], msg[160];
        if (n->max_items >= 0)
            snprintf(len_pat, sizeof len_pat, "^[\\s\\S]{%d,%d}$", n->min_items, n->max_items);
        else
            snprintf(len_pat, sizeof len_pat, "^[\\s\\S]{%d,}$", n->min_items);
        sample_re *lr = sample_re_compile(len_pat, strlen(len_pat), msg, sizeof msg);
        sample_re *both = lr ? sample_re_intersect(n->re, lr, msg, sizeof msg) : NULL;
        sample_re_free(lr);
        if (both) {
            sample_re_free(n->re_owned);
            n->re = n->re_owned = both;
        } else if (!strstr(msg, "too complex")) {
            return failn(s, "%s",
                         strstr(msg, "no string") ? "no string of the pattern / format has a length within "
                                                    "minLength and maxLength"
                                                  : msg);
        }
    }
    if (n->re) { /* the lengths must leave room for a match */
        const sample_re *r = n->re;
        const int lo = r->min_chars[r->start], hi = r->max_chars[r->start];
        if ((n->max_items >= 0 && lo > n->max_items) || (hi >= 0 && hi < n->min_items))
            return failn(s, "%s", "no string of the pattern / format has a length within minLength and maxLength");
    }
    return 0;
}

/* ---- keywords ---- */

/* Keywords of JSON Schema that constrain a value but that the recognizer
 * does not enforce (some are handled where they are redundant). */
static const char *const k_unsupported[] = {
    "not",
    "if",
    "then",
    "else",
    "contains",
    "minContains",
    "maxContains",
    "patternProperties",
    "propertyNames",
    "dependentRequired",
    "dependentSchemas",
    "dependencies",
    "unevaluatedItems",
    "$dynamicRef",
    "$recursiveRef",
};

/* The keywords kiln enforces.  Any other keyword (title, description,
 * default, $defs, an extension...) says nothing about the value and is
 * ignored; one of these next to $ref, anyOf, oneOf or allOf would have to
 * hold as well, which the recognizer cannot combine. */
static const char *const k_constraints[] = {
    "type",
    "enum",
    "const",
    "properties",
    "required",
    "additionalProperties",
    "unevaluatedProperties",
    "items",
    "prefixItems",
    "additionalItems",
    "minItems",
    "maxItems",
    "uniqueItems",
    "minLength",
    "maxLength",
    "pattern",
    "format",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "multipleOf",
    "minProperties",
    "maxProperties",
    "anyOf",
    "oneOf",
    "allOf",
    "$ref",
};

static int in_list(const char *k, const char *const *list, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!strcmp(k, list[i])) return 1;
    return 0;
}
#define IN(k, list) in_list(k, list, sizeof list / sizeof list[0])

static int check_keywords(sample_schema *s, const json_t *j) {
    const char *key;
    const json_t *v;
    json_object_foreach((json_t *)j, key, v) {
        if (IN(key, k_unsupported)) return failn(s, "'%s' is not supported", key);
        if (!strcmp(key, "uniqueItems") && json_is_true(v)) return failn(s, "%s", "'uniqueItems' is not supported");
    }
    return 0;
}

/* The first constraint keyword of j other than the one named self (and
 * the others listed with it, NULL-terminated), or NULL. */
static const char *other_constraint(const json_t *j, const char *const *self) {
    const char *key;
    const json_t *v;
    json_object_foreach((json_t *)j, key, v) {
        int mine = 0;
        for (const char *const *p = self; *p; p++) mine |= !strcmp(key, *p);
        if (!mine && IN(key, k_constraints)) return key;
    }
    return NULL;
}

static int alone(sample_schema *s, const json_t *j, const char *kw) {
    const char *self[] = {kw, NULL};
    const char *other = other_constraint(j, self);
    if (!other) return 0;
    char msg[160];
    snprintf(msg, sizeof msg, "'%s' beside '%s' is not supported: put '%s' inside", kw, other, other);
    return failn(s, "%s", msg);
}

/* The type the keywords of a schema without "type" imply, or NULL. */
static const char *implied_type(sample_schema *s, const json_t *j, int *clash) {
    static const struct {
        const char *kw, *type;
    } imp[] = {
        {"properties", "object"},       {"additionalProperties", "object"},
        {"required", "object"},         {"minProperties", "object"},
        {"maxProperties", "object"},    {"items", "array"},
        {"minItems", "array"},          {"maxItems", "array"},
        {"minLength", "string"},        {"maxLength", "string"},
        {"pattern", "string"},          {"format", "string"},
        {"minimum", "number"},          {"maximum", "number"},
        {"exclusiveMinimum", "number"}, {"exclusiveMaximum", "number"},
        {"multipleOf", "number"},
    };
    const char *t = NULL;
    *clash = 0;
    for (size_t i = 0; i < sizeof imp / sizeof imp[0]; i++) {
        if (!json_object_get(j, imp[i].kw)) continue;
        if (t && strcmp(t, imp[i].type)) {
            *clash = 1;
            fail(s, "%s", "keywords of several types without 'type' are not supported");
            return NULL;
        }
        t = imp[i].type;
    }
    return t;
}

/* The node of j with its type fixed to the name t.  memo: j is this one
 * node, so it is remembered before its children are compiled and a $ref
 * back to it closes a cycle. */
static sample_node *typed(sample_schema *s, const json_t *j, const char *t, int depth, int memo) {
    static const char *const names[] = {"object", "array", "string", "number", "integer"};
    static const int kinds[] = {N_OBJECT, N_ARRAY, N_STRING, N_NUMBER, N_INTEGER};
    if (!strcmp(t, "boolean")) return literal(s, (const json_t *[]){json_true(), json_false()}, 2);
    if (!strcmp(t, "null")) return literal(s, (const json_t *[]){json_null()}, 1);
    int kind = -1;
    for (int i = 0; i < 5; i++)
        if (!strcmp(t, names[i])) kind = kinds[i];
    if (kind < 0) return fail(s, "unknown type '%s'", t);
    sample_node *n = new_node(s, kind);
    if (!n) return NULL;
    first_of_kind(n); /* known before the children: enough for a union above a $ref back to n */
    if (memo && remember(s, j, n)) return NULL;
    if (kind == N_OBJECT) return compile_object(s, j, n, depth);
    if (kind == N_STRING) return compile_string(s, j, n) ? NULL : n;
    if (kind == N_NUMBER || kind == N_INTEGER) return number_range(s, j, n) ? NULL : n;
    const json_t *items = json_object_get(j, "items");
    if (json_is_array(items) || json_object_get(j, "prefixItems"))
        return fail(s, "%s", "tuple arrays (items as a list, prefixItems) are not supported");
    n->items = items ? compile(s, items, depth + 1, 0) : &k_any;
    if (!n->items) return NULL;
    if (get_count(s, j, "minItems", &n->min_items) || get_count(s, j, "maxItems", &n->max_items)) return NULL;
    if (n->max_items >= 0 && n->max_items < n->min_items) return fail(s, "%s", "maxItems is below minItems");
    return n;
}

static const json_t *resolve_ref(sample_schema *s, const char *ref) {
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

/* enum / const: the literal values that also satisfy the rest of j. */
static sample_node *compile_literals(sample_schema *s, const json_t *j, int depth) {
    const json_t *en = json_object_get(j, "enum"), *cn = json_object_get(j, "const");
    if (en && !json_is_array(en)) return fail(s, "%s", "'enum' must be an array");
    const json_t *vals[MAX_KEYS];
    int n = 0;
    if (en) {
        if (json_array_size(en) > MAX_KEYS) return fail(s, "an enum of more than %s values", "64");
        for (size_t i = 0; i < json_array_size(en); i++)
            if (!cn || json_equal(json_array_get(en, i), (json_t *)cn)) vals[n++] = json_array_get(en, i);
        if (!n) return fail(s, "%s", cn ? "'const' is not among the 'enum' values" : "an empty enum allows nothing");
    } else {
        vals[n++] = cn;
    }
    const char *self[] = {"enum", "const", NULL};
    if (other_constraint(j, self)) { /* the values the other keywords allow too */
        sample_node *rest = compile(s, j, depth + 1, 1);
        if (!rest) return NULL;
        int k = 0;
        for (int i = 0; i < n; i++) {
            char *txt = json_dumps(vals[i], JSON_COMPACT | JSON_ENCODE_ANY);
            if (!txt) return fail(s, "%s", "out of memory");
            if (node_accepts(rest, txt, (int)strlen(txt))) vals[k++] = vals[i];
            free(txt);
        }
        if (!k) return fail(s, "%s", "no 'enum' / 'const' value satisfies the rest of its schema");
        n = k;
    }
    return literal(s, vals, n);
}

/* no_lit: compile j as if it had no enum or const (their values are then
 * checked against the result), and without remembering it for $ref. */
static sample_node *compile(sample_schema *s, const json_t *j, int depth, int no_lit) {
    if (depth > MAX_NEST) {
        char lim[16];
        snprintf(lim, sizeof lim, "%d", MAX_NEST);
        return fail(s, "the schema's keywords nest deeper than %s levels", lim);
    }
    if (json_is_true(j)) return &k_any;
    if (json_is_false(j)) return fail(s, "%s", "a 'false' schema allows nothing");
    if (!json_is_object(j)) return fail(s, "%s", "a schema must be an object or a boolean");
    if (!no_lit)
        for (int i = 0; i < s->n_memo; i++)
            if (s->memo_json[i] == j) return s->memo_node[i];
    if (check_keywords(s, j)) return NULL;
    const json_t *ref = json_object_get(j, "$ref");
    if (ref) {
        if (!json_is_string(ref)) return fail(s, "%s", "'$ref' must be a string");
        if (alone(s, j, "$ref")) return NULL;
        const json_t *target = resolve_ref(s, json_string_value(ref));
        if (!target) return fail(s, "'$ref' %s does not point into this schema", json_string_value(ref));
        return compile(s, target, depth + 1, 0);
    }
    if (!no_lit && (json_object_get(j, "enum") || json_object_get(j, "const"))) return compile_literals(s, j, depth);
    const json_t *all = json_object_get(j, "allOf");
    if (all) {
        if (!json_is_array(all) || json_array_size(all) != 1)
            return fail(s, "%s", "allOf is supported with exactly one schema");
        if (alone(s, j, "allOf")) return NULL;
        return compile(s, json_array_get(all, 0), depth + 1, 0);
    }
    const char *which = json_object_get(j, "anyOf") ? "anyOf" : "oneOf";
    const json_t *any = json_object_get(j, which);
    if (any) {
        if (!json_is_array(any) || !json_array_size(any))
            return fail(s, "%s", "anyOf / oneOf must be a non-empty array");
        if (json_object_get(j, "anyOf") && json_object_get(j, "oneOf"))
            return fail(s, "%s", "'anyOf' beside 'oneOf' is not supported");
        if (alone(s, j, which)) return NULL;
        sample_node *alts[MAX_KEYS];
        size_t n = json_array_size(any);
        if (n > MAX_KEYS) return fail(s, "anyOf of more than %s schemas", "64");
        for (size_t i = 0; i < n; i++)
            if (!(alts[i] = compile(s, json_array_get(any, i), depth + 1, 0))) return NULL;
        return make_union(s, alts, (int)n);
    }
    const json_t *type = json_object_get(j, "type");
    if (!type) { /* no type: what the keywords imply, else anything */
        int clash;
        const char *t = implied_type(s, j, &clash);
        if (clash) return NULL;
        return t ? typed(s, j, t, depth, !no_lit) : &k_any;
    }
    if (json_is_string(type)) return typed(s, j, json_string_value(type), depth, !no_lit);
    if (!json_is_array(type)) return fail(s, "%s", "'type' must be a string or an array of strings");
    sample_node *alts[8];
    size_t nt = json_array_size(type);
    if (!nt || nt > 8) return fail(s, "%s", "'type' must list 1 to 8 types");
    for (size_t i = 0; i < nt; i++) {
        const char *t = json_string_value(json_array_get(type, i));
        if (!t) return fail(s, "%s", "'type' must hold strings");
        if (!(alts[i] = typed(s, j, t, depth, 0))) return NULL;
    }
    return make_union(s, alts, (int)nt);
}

/* ---- depth: which values fit in the recognizer's stack ---- */

/* The frames n's shallowest value takes, from its children's: an object
 * holds its required properties, an array its minItems items, a union its
 * shallowest alternative; DEPTH_NONE when a child it needs has no finite
 * value. */
static int depth_of(const sample_node *n) {
    int d = 0;
    switch (n->kind) {
    case N_OBJECT:
        for (int i = 0; i < n->n_props && !n->any_keys; i++) {
            if (!n->req[i]) continue;
            if (n->props[i]->min_depth == DEPTH_NONE) return DEPTH_NONE;
            if (n->props[i]->min_depth > d) d = n->props[i]->min_depth;
        }
        break;
    case N_ARRAY:
        if (n->min_items > 0) d = n->items->min_depth;
        break;
    case N_UNION:
        d = DEPTH_NONE;
        for (int i = 0; i < n->n_alts; i++)
            if (n->alts[i]->min_depth < d) d = n->alts[i]->min_depth;
        return d;
    default: break;
    }
    if (d == DEPTH_NONE) return DEPTH_NONE;
    return d + 1 > DEPTH_DEEP ? DEPTH_DEEP : d + 1;
}

/* Each node's min_depth: the greatest fixpoint of depth_of from DEPTH_NONE
 * down, by a worklist over the nodes' parents.  A value only falls, and at
 * most DEPTH_DEEP + 1 times, so the work is O(edges * SAMPLE_SV_DEPTH).
 * Returns -1 when out of memory. */
static int set_depths(sample_schema *s) {
    const int nn = s->n_nodes;
    int n_edges = 0;
    for (int i = 0; i < nn; i++) {
        const sample_node *n = s->nodes[i];
        n_edges += n->n_props + n->n_alts + (n->items != NULL);
    }
    /* parents of node i: par[start[i] .. start[i + 1]) */
    int *start = calloc((size_t)nn + 1, sizeof *start), *par = malloc((size_t)(n_edges ? n_edges : 1) * sizeof *par);
    int *fill = calloc((size_t)nn + 1, sizeof *fill), *work = malloc((size_t)(nn ? nn : 1) * sizeof *work);
    uint8_t *queued = malloc((size_t)(nn ? nn : 1));
    int rc = -1;
    if (!start || !par || !fill || !work || !queued) goto out;
    for (int pass = 0; pass < 2; pass++) { /* count, then place */
        for (int i = 0; i < nn; i++) {
            const sample_node *n = s->nodes[i];
            const int nk = n->n_props + n->n_alts + 1;
            for (int k = 0; k < nk; k++) {
                const sample_node *c = k < n->n_props               ? n->props[k]
                                       : k < n->n_props + n->n_alts ? n->alts[k - n->n_props]
                                                                    : n->items;
                if (!c || c->id < 0) continue;
                if (pass == 0)
                    start[c->id + 1]++;
                else
                    par[start[c->id] + fill[c->id]++] = i;
            }
        }
        if (pass == 0)
            for (int i = 0; i < nn; i++) start[i + 1] += start[i];
    }
    int top = 0;
    for (int i = 0; i < nn; i++) {
        s->nodes[i]->min_depth = DEPTH_NONE;
        work[top++] = i; /* children (made later) come off first */
        queued[i] = 1;
    }
    while (top > 0) {
        const int i = work[--top];
        queued[i] = 0;
        sample_node *n = s->nodes[i];
        const int d = depth_of(n);
        if (d >= n->min_depth) continue;
        n->min_depth = d;
        for (int k = start[i]; k < start[i + 1]; k++)
            if (!queued[par[k]]) {
                queued[par[k]] = 1;
                work[top++] = par[k];
            }
    }
    rc = 0;
out:
    free(start);
    free(par);
    free(fill);
    free(work);
    free(queued);
    return rc;
}

/* Whether a value of n can be written in the frames from index at up. */
static int fits_at(int at, const sample_node *n) { return n->min_depth <= SAMPLE_SV_DEPTH - at; }

sample_schema *sample_schema_compile(const json_t *schema, char *err, size_t errsz) {
    init_statics();
    sample_schema *s = calloc(1, sizeof *s);
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
    s->root = schema ? compile(s, schema, 0, 0) : &k_any;
    s->doc = NULL; /* nothing of the caller's is kept */
    free(s->memo_json);
    free(s->memo_node);
    s->memo_json = NULL;
    s->memo_node = NULL;
    if (s->root && set_depths(s)) s->root = fail(s, "%s", "out of memory");
    if (s->root && s->root->min_depth == DEPTH_NONE)
        s->root = fail(s, "%s",
                       "the schema allows no finite value: what it requires (a property, minItems of an array, "
                       "through $ref) contains itself again without end");
    if (s->root && s->root->min_depth == DEPTH_DEEP) {
        char lim[16];
        snprintf(lim, sizeof lim, "%d", SAMPLE_SV_DEPTH);
        s->root = fail(s, "every value of the schema nests objects and arrays deeper than %s levels", lim);
    }
    if (!s->root) {
        if (!err[0]) snprintf(err, errsz, "the schema could not be compiled");
        sample_schema_free(s);
        return NULL;
    }
    return s;
}

const sample_schema *sample_schema_any_object(void) {
    init_statics();
    return &k_any_obj_schema;
}

void sample_schema_free(sample_schema *s) {
    if (!s || s == &k_any_obj_schema) return;
    for (int i = 0; i < s->n_nodes; i++) {
        sample_node *n = s->nodes[i];
        for (int k = 0; k < n->n_props; k++) free(n->keys[k]);
        free(n->keys);
        free(n->key_len);
        free(n->props);
        free(n->req);
        for (int k = 0; k < n->n_lits; k++) free(n->lits[k]);
        free(n->lits);
        free(n->lit_len);
        free(n->alts);
        sample_re_free(n->re_owned);
        free(n);
    }
    free(s->nodes);
    free(s->memo_json);
    free(s->memo_node);
    free(s);
}

/* ---- recognizing ---- */

enum {
    S_VALUE, /* not begun: whitespace, then the first byte */
    S_OBJ_OPEN,
    S_OBJ_KEY,
    S_OBJ_KEY_ESC,
    S_OBJ_KEY_U,
    S_OBJ_COLON,
    S_OBJ_VALUE,
    S_OBJ_AFTER,
    S_OBJ_COMMA,
    S_ARR_OPEN,
    S_ARR_VALUE,
    S_ARR_AFTER,
    S_STR,
    S_STR_ESC,
    S_STR_U,
    S_NUM_BEGIN,
    S_NUM_MINUS,
    S_NUM_ZERO,
    S_NUM_INT,
    S_NUM_DOT,
    S_NUM_FRAC,
    S_NUM_E,
    S_NUM_ESIGN,
    S_NUM_EXP,
    S_LIT,
};

static int is_ws(unsigned char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }
static int is_hex(unsigned char c) { return (c >= '0' && c <= '9') || ((c | 32) >= 'a' && (c | 32) <= 'f'); }
static int hex_val(unsigned char c) { return c <= '9' ? c - '0' : (c | 32) - 'a' + 10; }

static void sv_init_node(sample_sv *v, const sample_node *n) {
    v->depth = 1;
    v->done = 0;
    v->ws = 0;
    v->f[0] = (sample_sv_frame){n, S_VALUE, -1, 0, 0, 0, 0};
}

void sample_sv_init(sample_sv *v, const sample_schema *s) {
    init_statics();
    sv_init_node(v, s ? s->root : &k_any);
}

/* Keys that may come after property idx, their values in frames from
 * index at up: the next ones in order up to and including the first
 * required one, less the optional ones whose values do not fit (a required
 * one does: the object's own depth counts it). */
static uint64_t next_keys(const sample_node *n, int idx, int at) {
    uint64_t m = 0;
    for (int j = idx + 1; j < n->n_props; j++) {
        if (n->req[j] || fits_at(at, n->props[j])) m |= 1ull << j;
        if (n->req[j]) break;
    }
    return m;
}

/* The node of an open object's values. */
static const sample_node *any_value(const sample_node *n) { return n->items ? n->items : &k_any; }

static int required_after(const sample_node *n, int idx) {
    for (int j = idx + 1; j < n->n_props; j++)
        if (n->req[j]) return 1;
    return 0;
}

/* Every caller has checked that n fits (fits_at); while compiling, depths
 * are not known yet and only the stack's end holds. */
static int push(sample_sv *v, const sample_node *n) {
    if (v->depth == SAMPLE_SV_DEPTH || !fits_at(v->depth, n)) return 0;
    v->f[v->depth++] = (sample_sv_frame){n, S_VALUE, -1, 0, 0, 0, 0};
    return 1;
}

/* The top frame's value is complete: pop it and tell the frame below. */
static void value_done(sample_sv *v) {
    if (--v->depth == 0) {
        v->done = 1;
        return;
    }
    sample_sv_frame *p = &v->f[v->depth - 1];
    if (p->st == S_OBJ_VALUE)
        p->st = S_OBJ_AFTER;
    else if (p->st == S_ARR_VALUE) {
        p->idx++;
        p->st = S_ARR_AFTER;
    }
}

/* ---- numbers ----
 * A frame of a number: idx integer digits, pos fraction digits, cand the
 * integer part's value and aux the fraction digits' (ranged numbers);
 * sub the sign (ranged) or exponent digits (free). */

/* The magnitudes a ranged number of sign neg may have: [*a, *b]; 0 when
 * none. */
static int mag_range(const sample_node *n, int neg, i128 *a, i128 *b) {
    if (neg) { /* -0 is no negative number */
        *a = -n->hi > 1 ? -n->hi : 1;
        *b = -n->lo;
    } else {
        *a = n->lo > 0 ? n->lo : 0;
        *b = n->hi;
    }
    return *a <= *b;
}

/* Whether the digits so far can still be completed into a value in the
 * range. */
static int num_feasible(const sample_sv_frame *f) {
    const sample_node *n = f->n;
    i128 a, b;
    if (!mag_range(n, f->sub, &a, &b)) return 0;
    const i128 unit = k_p10[n->frac];
    const int max_int = n->kind == N_INTEGER ? INT_DIGITS : NUM_INT_DIGITS;
    const i128 ip = (i128)f->cand;
    switch (f->st) {
    case S_NUM_MINUS: return a <= max_mag(n);
    case S_NUM_ZERO: return a <= unit - 1; /* 0 or 0.xxx */
    case S_NUM_INT:                        /* I, I?, I??, ... each with any fraction */
        for (int k = 0; f->idx + k <= max_int; k++) {
            const i128 lo = ip * k_p10[k] * unit, hi = (ip + 1) * k_p10[k] * unit - 1;
            if (lo > b) return 0;
            if (hi >= a) return 1;
        }
        return 0;
    default: { /* S_NUM_DOT, S_NUM_FRAC: I.F followed by any digits */
        const i128 step = k_p10[n->frac - f->pos];
        const i128 lo = ip * unit + (i128)f->aux * step, hi = lo + step - 1;
        return lo <= b && hi >= a;
    }
    }
}

static int num_whole(const sample_sv_frame *f) {
    const sample_node *n = f->n;
    if (!n->ranged) return f->st == S_NUM_ZERO || f->st == S_NUM_INT || f->st == S_NUM_FRAC || f->st == S_NUM_EXP;
    if (f->st != S_NUM_ZERO && f->st != S_NUM_INT && f->st != S_NUM_FRAC) return 0;
    i128 a, b;
    if (!mag_range(n, f->sub, &a, &b)) return 0;
    const i128 m = (i128)f->cand * k_p10[n->frac] + (f->st == S_NUM_FRAC ? (i128)f->aux * k_p10[n->frac - f->pos] : 0);
    return m >= a && m <= b;
}

/* One byte of a number: 1 taken, 0 refused, -1 not part of it (the
 * number ends there if it is whole). */
static int num_byte(sample_sv_frame *f, unsigned char ch) {
    const sample_node *n = f->n;
    const int digit = ch >= '0' && ch <= '9', d = ch - '0';
    if (n->ranged) {
        sample_sv_frame t = *f;
        const int max_int = n->kind == N_INTEGER ? INT_DIGITS : NUM_INT_DIGITS;
        switch (f->st) {
        case S_NUM_BEGIN:
            if (ch == '-') {
                t.st = S_NUM_MINUS;
                t.sub = 1;
                break;
            }
            /* fall through */
        case S_NUM_MINUS:
            if (!digit) return f->st == S_NUM_BEGIN ? 0 : -1;
            t.st = d ? S_NUM_INT : S_NUM_ZERO;
            t.cand = (uint64_t)d;
            t.idx = 1;
            break;
        case S_NUM_ZERO:
        case S_NUM_INT:
            if (digit && f->st == S_NUM_INT && f->idx < max_int) {
                t.cand = f->cand * 10 + (uint64_t)d;
                t.idx++;
            } else if (ch == '.' && n->frac > 0) {
                t.st = S_NUM_DOT;
            } else {
                return -1;
            }
            break;
        case S_NUM_DOT:
        case S_NUM_FRAC:
            if (!digit || f->pos >= n->frac) return -1;
            t.st = S_NUM_FRAC;
            t.aux = f->aux * 10 + (uint64_t)d;
            t.pos++;
            break;
        default: return -1;
        }
        if (!num_feasible(&t)) return 0;
        *f = t;
        return 1;
    }
    /* free: JSON's number grammar with bounded digits */
    const int integer = n->kind == N_INTEGER;
    switch (f->st) {
    case S_NUM_BEGIN:
        if (ch == '-') {
            f->st = S_NUM_MINUS;
            return 1;
        }
        /* fall through */
    case S_NUM_MINUS:
        if (!digit) return f->st == S_NUM_BEGIN ? 0 : -1;
        f->st = d ? S_NUM_INT : S_NUM_ZERO;
        f->idx = 1;
        return 1;
    case S_NUM_ZERO:
    case S_NUM_INT:
        if (digit && f->st == S_NUM_INT) {
            if (f->idx >= FREE_INT_DIGITS) return -1;
            f->idx++;
            return 1;
        }
        if (!integer && ch == '.')
            f->st = S_NUM_DOT;
        else if (!integer && (ch == 'e' || ch == 'E'))
            f->st = S_NUM_E;
        else
            return -1;
        return 1;
    case S_NUM_DOT:
    case S_NUM_FRAC:
        if (digit && f->pos < FREE_FRAC_DIGITS) {
            f->st = S_NUM_FRAC;
            f->pos++;
            return 1;
        }
        if (f->st == S_NUM_FRAC && (ch == 'e' || ch == 'E')) {
            f->st = S_NUM_E;
            return 1;
        }
        return -1;
    case S_NUM_E:
        if (ch == '+' || ch == '-') {
            f->st = S_NUM_ESIGN;
            return 1;
        }
        /* fall through */
    case S_NUM_ESIGN:
    case S_NUM_EXP:
        if (!digit || f->sub >= FREE_EXP_DIGITS) return -1;
        f->st = S_NUM_EXP;
        f->sub++;
        return 1;
    default: return -1;
    }
}

/* ---- strings ---- */

/* One byte of string content, the frame in state in, esc (after a
 * backslash) or u (in \uXXXX): 1 taken, 0 refused, 2 the closing quote. */
static int str_byte(sample_sv_frame *f, unsigned char ch, int in, int esc, int u) {
    if (f->st == in) {
        if (ch == '"') return 2;
        if (ch == '\\')
            f->st = esc;
        else if (ch < 0x20)
            return 0;
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

/* A string held to a DFA (pattern, format): cand its state, idx the
 * characters so far.  Byte b of the decoded text may come next: the DFA
 * takes it and a match within the length bounds stays reachable.  Sets
 * *state and *count on success. */
static int pat_step(const sample_node *n, uint64_t state, int count, unsigned char b, uint64_t *nstate, int *ncount) {
    const sample_re *r = n->re;
    const int32_t t = sample_re_step(r, (int32_t)state, b);
    if (t < 0) return 0;
    const int c = count + ((b & 0xC0) != 0x80); /* a lead byte begins a character */
    if (n->max_items >= 0 && c + r->min_chars[t] > n->max_items) return 0;
    if (r->max_chars[t] >= 0 && c + r->max_chars[t] < n->min_items) return 0;
    *nstate = (uint64_t)t;
    *ncount = c;
    return 1;
}

/* Whether some character written as an escape (all of them are ASCII:
 * short escapes and \u00XX) may follow; lo..hi narrows \u00XX's last
 * digit. */
static int pat_escapable(const sample_node *n, uint64_t state, int count, int lo, int hi) {
    uint64_t s2;
    int c2;
    for (int b = lo; b <= hi; b++)
        if (pat_step(n, state, count, (unsigned char)b, &s2, &c2)) return 1;
    return 0;
}

/* One byte of a string held to a DFA: 1 taken, 0 refused, 2 closed.  Raw
 * bytes go to the DFA as they are; an escape goes as the byte it stands
 * for (\u only as \u00XX, ASCII: other characters are written raw). */
static int pat_byte(sample_sv_frame *f, unsigned char ch) {
    const sample_node *n = f->n;
    const sample_re *r = n->re;
    uint64_t s2;
    int c2;
    switch (f->st) {
    case S_STR:
        if (ch == '"') return r->accept[f->cand] && f->idx >= n->min_items ? 2 : 0;
        if (ch == '\\') {
            if (!pat_escapable(n, f->cand, f->idx, 0, 0x7F)) return 0;
            f->st = S_STR_ESC;
            return 1;
        }
        if (ch < 0x20 || !pat_step(n, f->cand, f->idx, ch, &s2, &c2)) return 0;
        break;
    case S_STR_ESC: {
        if (ch == 'u') {
            if (!pat_escapable(n, f->cand, f->idx, 0, 0x7F)) return 0;
            f->st = S_STR_U;
            f->pos = 0;
            f->sub = 0;
            return 1;
        }
        static const char esc[] = "\"\\/bfnrt", dec[] = "\"\\/\b\f\n\r\t";
        const char *e = ch ? strchr(esc, ch) : NULL;
        if (!e || !pat_step(n, f->cand, f->idx, (unsigned char)dec[e - esc], &s2, &c2)) return 0;
        break;
    }
    default: /* S_STR_U: "00", then 0-7 and a hex digit */
        if (f->pos < 2) {
            if (ch != '0') return 0;
            f->pos++;
            return 1;
        }
        if (f->pos == 2) {
            if (ch < '0' || ch > '7' || !pat_escapable(n, f->cand, f->idx, (ch - '0') << 4, ((ch - '0') << 4) | 15))
                return 0;
            f->sub = ch - '0';
            f->pos++;
            return 1;
        }
        if (!is_hex(ch) || !pat_step(n, f->cand, f->idx, (unsigned char)(f->sub << 4 | hex_val(ch)), &s2, &c2))
            return 0;
        break;
    }
    f->cand = s2;
    f->idx = c2;
    f->st = S_STR;
    return 1;
}

static int lit_whole(const sample_sv_frame *f) {
    for (int i = 0; i < f->n->n_lits; i++)
        if ((f->cand >> i & 1) && f->n->lit_len[i] == f->pos) return 1;
    return 0;
}

static int is_num_state(int st) { return st >= S_NUM_BEGIN && st <= S_NUM_EXP; }

int sample_sv_byte(sample_sv *v, unsigned char ch) {
    if (is_ws(ch)) {
        /* inside a string or key it is content, else between tokens */
        sample_sv_frame *f = v->depth ? &v->f[v->depth - 1] : NULL;
        const int content = f && ((f->st >= S_STR && f->st <= S_STR_U) || (f->st >= S_OBJ_KEY && f->st <= S_OBJ_KEY_U));
        if (!content) {
            if (f && (is_num_state(f->st) || f->st == S_LIT)) {
                /* ends a number or literal, if it is whole */
                if (f->st == S_LIT ? !lit_whole(f) : !num_whole(f)) return 0;
                value_done(v);
            }
            /* between two tokens: nothing, one space, or a line break and
             * up to MAX_WS spaces or tabs (the whitespace llama.cpp's JSON
             * grammars allow), so a model that likes blank lines cannot
             * spend its budget on them.  v->ws: 0 none yet, 1 a space,
             * 2 + n a line break and n more. */
            if (v->ws == 0)
                v->ws = ch == ' ' ? 1 : ch == '\n' ? 2 : -1;
            else if (v->ws >= 2 && (ch == ' ' || ch == '\t') && v->ws - 2 < MAX_WS)
                v->ws++;
            else
                v->ws = -1;
            return v->ws > 0;
        }
    }
    v->ws = 0;
    for (;;) {
        if (v->done || v->depth == 0) return 0;
        sample_sv_frame *f = &v->f[v->depth - 1];
        const sample_node *n = f->n;
        switch (f->st) {
        case S_VALUE:
            while (n->kind == N_UNION) { /* the alternative this byte begins */
                const sample_node *pick = NULL;
                for (int i = 0; i < n->n_alts && !pick; i++)
                    if (has_bit(n->alts[i]->first, ch)) pick = n->alts[i];
                if (!pick || !fits_at(v->depth - 1, pick)) return 0;
                n = pick;
            }
            if (n->kind == N_ANY) {
                n = ch == '{'                                 ? &k_any_obj
                    : ch == '['                               ? &k_any_arr
                    : ch == '"'                               ? &k_str
                    : (ch == '-' || (ch >= '0' && ch <= '9')) ? &k_num
                                                              : &k_words;
            }
            if (!has_bit(n->first, ch)) return 0;
            f->n = n;
            switch (n->kind) {
            case N_OBJECT:
                f->st = S_OBJ_OPEN;
                f->idx = -1;
                return 1;
            case N_ARRAY:
                f->st = S_ARR_OPEN;
                f->idx = 0;
                return 1;
            case N_STRING:
                f->st = S_STR;
                f->idx = 0;
                if (n->re) f->cand = (uint64_t)n->re->start;
                return 1;
            case N_NUMBER:
            case N_INTEGER:
                f->st = S_NUM_BEGIN;
                f->idx = f->pos = f->sub = 0;
                f->cand = f->aux = 0;
                continue; /* the byte begins the number */
            default:      /* N_LITERAL */
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
            if (n->any_keys ? !fits_at(v->depth, any_value(n)) : !(f->cand = next_keys(n, f->idx, v->depth))) return 0;
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
            return push(v, n->any_keys ? any_value(n) : n->props[f->idx]);
        case S_OBJ_AFTER:
            if (ch == '}' && (n->any_keys || !required_after(n, f->idx))) break;
            if (ch != ',' || (n->any_keys ? !fits_at(v->depth, any_value(n)) : !next_keys(n, f->idx, v->depth)))
                return 0;
            f->st = S_OBJ_COMMA;
            return 1;
        case S_ARR_OPEN:
            if (ch == ']' && n->min_items == 0) break;
            if (n->max_items == 0 || !fits_at(v->depth, n->items)) return 0;
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
            if (n->re) {
                const int r = pat_byte(f, ch);
                if (r != 2) return r;
                break;
            }
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
            const int r = num_byte(f, ch);
            if (r >= 0) return r;
            if (!num_whole(f)) return 0;
            value_done(v);
            continue;
        }
        }
        /* the closing byte of an object, array or string */
        value_done(v);
        return 1;
    }
}

int sample_sv_complete(const sample_sv *v) {
    if (v->done) return 1;
    if (v->depth != 1) return 0;
    const sample_sv_frame *f = &v->f[0];
    if (f->st == S_LIT) return lit_whole(f);
    return is_num_state(f->st) && num_whole(f);
}

void sample_sv_copy(sample_sv *dst, const sample_sv *src) {
    /* frames above the current depth are written before they are read */
    dst->depth = src->depth;
    dst->done = src->done;
    dst->ws = src->ws;
    memcpy(dst->f, src->f, (size_t)src->depth * sizeof src->f[0]);
}

int sample_sv_accepts(const sample_sv *v, const char *s, int n) {
    sample_sv t;
    sample_sv_copy(&t, v);
    for (int i = 0; i < n; i++)
        if (!sample_sv_byte(&t, (unsigned char)s[i])) return 0;
    return 1;
}

/* Whether text is a whole value of node n. */
static int node_accepts(const sample_node *n, const char *text, int len) {
    sample_sv v;
    sv_init_node(&v, n);
    for (int i = 0; i < len; i++)
        if (!sample_sv_byte(&v, (unsigned char)text[i])) return 0;
    return sample_sv_complete(&v);
}
