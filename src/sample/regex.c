/* regex.c — pattern -> syntax tree -> NFA over bytes -> DFA (regex.h).
 *
 * The tree's leaves are sets of code points; each set becomes the UTF-8
 * byte sequences that encode it, so the NFA and the DFA read bytes and
 * accept only well-formed UTF-8.  The NFA is a list of edges (epsilon,
 * byte range, and the assertions ^ and $); ^ is followed only before the
 * first byte and $ only when asking whether the text may end.  A search
 * (no ^, no $) is the pattern between two loops over any character.
 *
 * The DFA comes from the subset construction over byte classes (bytes no
 * edge tells apart); states that cannot reach a match are then removed,
 * and each state learns the fewest and most characters (UTF-8 lead bytes)
 * still to come before a match, which string length bounds need. */
#include "sample/regex.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_PATTERN 4096 /* bytes of a pattern */
#define MAX_DEPTH 200    /* nesting of groups */
#define MAX_REPEAT 1000  /* n and m of {n,m} */
#define MAX_NFA 200000   /* NFA states (a {n,m} copies its operand) */
#define CP_MAX 0x10FFFF

/* ---- code point sets: sorted, disjoint, surrogates left out ---- */

typedef struct cprange {
    uint32_t lo, hi;
} cprange;

typedef struct cpset {
    cprange *r;
    int n, cap;
} cpset;

/* ---- the compile context ---- */

enum { R_SET, R_CAT, R_ALT, R_REP, R_EMPTY, R_BOL, R_EOL };

typedef struct rnode {
    int kind;
    int a, b;     /* children (R_CAT, R_ALT; R_REP: a) */
    int min, max; /* R_REP; max -1 = unbounded */
    cpset set;    /* R_SET */
} rnode;

enum { E_EPS, E_BYTE, E_BOL, E_EOL };

typedef struct redge {
    int from, to;
    uint8_t kind, lo, hi;
} redge;

typedef struct rctx {
    const char *p, *end;
    const char *pat;
    char *err;
    size_t errsz;
    int failed;
    rnode *nodes;
    int n_nodes, cap_nodes;
    redge *edges;
    int n_edges, cap_edges;
    int n_states;
} rctx;

static int failf(rctx *c, const char *fmt, const char *arg) {
    if (!c->failed && c->err && c->errsz) snprintf(c->err, c->errsz, fmt, arg);
    c->failed = 1;
    return -1;
}

static void *grow(rctx *c, void *p, int *cap, int need, size_t elem) {
    if (need <= *cap) return p;
    int nc = *cap ? *cap : 16;
    while (nc < need) nc *= 2;
    void *q = realloc(p, (size_t)nc * elem);
    if (!q) {
        failf(c, "%s", "out of memory");
        return NULL;
    }
    *cap = nc;
    return q;
}

static int set_add(rctx *c, cpset *s, uint32_t lo, uint32_t hi) {
    if (lo > hi) return 0;
    cprange *r = grow(c, s->r, &s->cap, s->n + 1, sizeof *r);
    if (!r) return -1;
    s->r = r;
    s->r[s->n++] = (cprange){lo, hi};
    return 0;
}

static int cmp_range(const void *a, const void *b) {
    const cprange *x = a, *y = b;
    return x->lo < y->lo ? -1 : x->lo > y->lo;
}

/* Sorts, merges and drops the surrogates (they have no UTF-8 form). */
static int set_norm(rctx *c, cpset *s) {
    if (!s->n) return 0;
    qsort(s->r, (size_t)s->n, sizeof *s->r, cmp_range);
    int k = 0;
    for (int i = 0; i < s->n; i++) {
        if (k && s->r[i].lo <= s->r[k - 1].hi + 1) {
            if (s->r[i].hi > s->r[k - 1].hi) s->r[k - 1].hi = s->r[i].hi;
        } else {
            s->r[k++] = s->r[i];
        }
    }
    s->n = k;
    for (int i = 0; i < s->n; i++) {
        cprange x = s->r[i];
        if (x.hi < 0xD800 || x.lo > 0xDFFF) continue;
        if (x.lo < 0xD800 && x.hi > 0xDFFF) { /* split around them */
            if (set_add(c, s, 0xE000, x.hi)) return -1;
            s->r[i].hi = 0xD7FF;
            return set_norm(c, s);
        }
        if (x.lo >= 0xD800 && x.hi <= 0xDFFF) {
            memmove(&s->r[i], &s->r[i + 1], (size_t)(s->n - i - 1) * sizeof *s->r);
            s->n--;
            i--;
        } else if (x.lo < 0xD800) {
            s->r[i].hi = 0xD7FF;
        } else {
            s->r[i].lo = 0xE000;
        }
    }
    return 0;
}

/* s := everything s does not hold. */
static int set_negate(rctx *c, cpset *s) {
    if (set_norm(c, s)) return -1;
    cpset t = {0};
    uint32_t next = 0;
    for (int i = 0; i < s->n; i++) {
        if (s->r[i].lo > next && set_add(c, &t, next, s->r[i].lo - 1)) return -1;
        next = s->r[i].hi + 1;
    }
    if (next <= CP_MAX && set_add(c, &t, next, CP_MAX)) return -1;
    free(s->r);
    *s = t;
    return set_norm(c, s);
}

static int set_union(rctx *c, cpset *s, const cpset *o) {
    for (int i = 0; i < o->n; i++)
        if (set_add(c, s, o->r[i].lo, o->r[i].hi)) return -1;
    return 0;
}

/* ---- the syntax tree ---- */

static int new_node(rctx *c, int kind) {
    rnode *nn = grow(c, c->nodes, &c->cap_nodes, c->n_nodes + 1, sizeof *nn);
    if (!nn) return -1;
    c->nodes = nn;
    memset(&c->nodes[c->n_nodes], 0, sizeof *c->nodes);
    c->nodes[c->n_nodes].kind = kind;
    c->nodes[c->n_nodes].max = -1;
    return c->n_nodes++;
}

static int node2(rctx *c, int kind, int a, int b) {
    if (a < 0 || b < 0) return -1;
    int n = new_node(c, kind);
    if (n >= 0) {
        c->nodes[n].a = a;
        c->nodes[n].b = b;
    }
    return n;
}

/* A set node; takes s. */
static int set_node(rctx *c, cpset *s) {
    if (set_norm(c, s)) return -1;
    int n = new_node(c, R_SET);
    if (n < 0) {
        free(s->r);
        return -1;
    }
    c->nodes[n].set = *s;
    return n;
}

static int add_class(rctx *c, cpset *s, char k) {
    switch (k) {
    case 'd': return set_add(c, s, '0', '9');
    case 'w':
        return set_add(c, s, '0', '9') || set_add(c, s, 'A', 'Z') || set_add(c, s, 'a', 'z') || set_add(c, s, '_', '_');
    case 's': { /* ECMAScript's WhiteSpace and LineTerminator */
        static const uint32_t ws[][2] = {{9, 13},          {32, 32},         {0xA0, 0xA0},     {0x1680, 0x1680},
                                         {0x2000, 0x200A}, {0x2028, 0x2029}, {0x202F, 0x202F}, {0x205F, 0x205F},
                                         {0x3000, 0x3000}, {0xFEFF, 0xFEFF}};
        for (size_t i = 0; i < sizeof ws / sizeof ws[0]; i++)
            if (set_add(c, s, ws[i][0], ws[i][1])) return -1;
        return 0;
    }
    default: return -1;
    }
}

/* A class escape (\d \D \w \W \s \S) into s. */
static int class_escape(rctx *c, cpset *s, char k) {
    cpset t = {0};
    char low = (char)(k | 32);
    if (add_class(c, &t, low) || (k != low && set_negate(c, &t)) || set_union(c, s, &t)) {
        free(t.r);
        return -1;
    }
    free(t.r);
    return 0;
}

static int hexval(char ch) {
    if (ch >= '0' && ch <= '9') return ch - '0';
    if ((ch | 32) >= 'a' && (ch | 32) <= 'f') return (ch | 32) - 'a' + 10;
    return -1;
}

/* n hex digits at c->p; -1 if they are not there. */
static long hex_n(rctx *c, int n) {
    long v = 0;
    for (int i = 0; i < n; i++) {
        if (c->p + i >= c->end || hexval(c->p[i]) < 0) return -1;
        v = v * 16 + hexval(c->p[i]);
    }
    c->p += n;
    return v;
}

/* One UTF-8 character of the pattern. */
static long utf8_char(rctx *c) {
    const unsigned char *s = (const unsigned char *)c->p;
    size_t left = (size_t)(c->end - c->p);
    unsigned b = s[0];
    int n = b < 0x80 ? 1 : (b & 0xE0) == 0xC0 ? 2 : (b & 0xF0) == 0xE0 ? 3 : (b & 0xF8) == 0xF0 ? 4 : 0;
    if (!n || (size_t)n > left) return failf(c, "%s", "the pattern is not valid UTF-8");
    uint32_t cp = n == 1 ? b : n == 2 ? b & 0x1F : n == 3 ? b & 0x0F : b & 0x07;
    for (int i = 1; i < n; i++) {
        if ((s[i] & 0xC0) != 0x80) return failf(c, "%s", "the pattern is not valid UTF-8");
        cp = cp << 6 | (s[i] & 0x3F);
    }
    static const uint32_t least[] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < least[n] || cp > CP_MAX || (cp >= 0xD800 && cp <= 0xDFFF))
        return failf(c, "%s", "the pattern is not valid UTF-8");
    c->p += n;
    return (long)cp;
}

/* The character of an escape after the backslash (c->p at the letter), or
 * -1 after failing; a class escape is left to the caller. */
static long char_escape(rctx *c, int in_class) {
    char k = *c->p;
    switch (k) {
    case 't': c->p++; return '\t';
    case 'n': c->p++; return '\n';
    case 'r': c->p++; return '\r';
    case 'v': c->p++; return '\v';
    case 'f': c->p++; return '\f';
    case '0':
        c->p++;
        if (c->p < c->end && *c->p >= '0' && *c->p <= '9') return failf(c, "%s", "octal escapes are not supported");
        return 0;
    case 'c':
        if (c->p + 1 < c->end && ((c->p[1] | 32) >= 'a' && (c->p[1] | 32) <= 'z')) {
            c->p += 2;
            return (c->p[-1] | 32) - 'a' + 1;
        }
        return failf(c, "%s", "'\\c' must be followed by a letter");
    case 'x': {
        c->p++;
        long v = hex_n(c, 2);
        return v < 0 ? failf(c, "%s", "'\\x' needs two hex digits") : v;
    }
    case 'u': {
        c->p++;
        if (c->p < c->end && *c->p == '{') {
            const char *q = ++c->p;
            long v = 0;
            while (c->p < c->end && hexval(*c->p) >= 0 && v <= CP_MAX) v = v * 16 + hexval(*c->p++);
            if (c->p == q || c->p >= c->end || *c->p != '}' || v > CP_MAX || (v >= 0xD800 && v <= 0xDFFF))
                return failf(c, "%s", "'\\u{...}' needs a code point in hex");
            c->p++;
            return v;
        }
        long v = hex_n(c, 4);
        if (v < 0) return failf(c, "%s", "'\\u' needs four hex digits");
        if (v >= 0xD800 && v <= 0xDBFF) { /* a surrogate pair is one character */
            if (c->end - c->p >= 6 && c->p[0] == '\\' && c->p[1] == 'u') {
                const char *save = c->p;
                c->p += 2;
                long lo = hex_n(c, 4);
                if (lo >= 0xDC00 && lo <= 0xDFFF) return 0x10000 + ((v - 0xD800) << 10) + (lo - 0xDC00);
                c->p = save;
            }
            return failf(c, "%s", "a lone surrogate escape matches no UTF-8 text");
        }
        if (v >= 0xDC00 && v <= 0xDFFF) return failf(c, "%s", "a lone surrogate escape matches no UTF-8 text");
        return v;
    }
    case 'b':
        if (in_class) {
            c->p++;
            return '\b';
        }
        return failf(c, "%s", "word boundaries (\\b, \\B) are not supported in a pattern");
    case 'B': return failf(c, "%s", "word boundaries (\\b, \\B) are not supported in a pattern");
    case 'k': return failf(c, "%s", "backreferences are not supported in a pattern");
    case 'p':
    case 'P': return failf(c, "%s", "Unicode property escapes (\\p{...}) are not supported in a pattern");
    default:
        if (k >= '1' && k <= '9') return failf(c, "%s", "backreferences are not supported in a pattern");
        if ((k >= 'a' && k <= 'z') || (k >= 'A' && k <= 'Z') || (k >= '0' && k <= '9'))
            return failf(c, "%s", "an unknown escape in the pattern");
        return utf8_char(c); /* an escaped punctuation character is itself */
    }
}

static int parse_alt(rctx *c, int depth);

static int parse_class(rctx *c) {
    cpset s = {0};
    int neg = 0;
    c->p++; /* '[' */
    if (c->p < c->end && *c->p == '^') {
        neg = 1;
        c->p++;
    }
    for (;;) {
        if (c->p >= c->end) {
            free(s.r);
            return failf(c, "%s", "a '[' without its ']'");
        }
        if (*c->p == ']') break; /* [] matches nothing, [^] any character */
        long lo;
        if (*c->p == '\\') {
            c->p++;
            if (c->p >= c->end) {
                failf(c, "%s", "a '[' without its ']'");
                break;
            }
            if (strchr("dDwWsS", *c->p)) {
                if (class_escape(c, &s, *c->p++)) break;
                continue; /* a class escape is never a range end */
            }
            lo = char_escape(c, 1);
        } else {
            lo = utf8_char(c);
        }
        if (lo < 0) break;
        long hi = lo;
        if (c->end - c->p >= 2 && c->p[0] == '-' && c->p[1] != ']') {
            c->p++;
            if (*c->p == '\\') {
                c->p++;
                if (c->p < c->end && strchr("dDwWsS", *c->p)) {
                    failf(c, "%s", "a class escape cannot end a range");
                    break;
                }
                hi = c->p < c->end ? char_escape(c, 1) : -1;
            } else {
                hi = utf8_char(c);
            }
            if (hi < 0) break;
            if (hi < lo) {
                failf(c, "%s", "a range out of order in a character class");
                break;
            }
        }
        if (set_add(c, &s, (uint32_t)lo, (uint32_t)hi)) break;
    }
    if (c->failed) {
        free(s.r);
        return -1;
    }
    c->p++; /* ']' */
    if (neg && set_negate(c, &s)) {
        free(s.r);
        return -1;
    }
    return set_node(c, &s);
}

static int one_char(rctx *c, uint32_t lo, uint32_t hi) {
    cpset s = {0};
    if (set_add(c, &s, lo, hi)) return -1;
    return set_node(c, &s);
}

static int parse_atom(rctx *c, int depth) {
    char ch = *c->p;
    switch (ch) {
    case '(': {
        if (depth >= MAX_DEPTH) return failf(c, "%s", "the pattern nests too deep");
        c->p++;
        if (c->p < c->end && *c->p == '?') {
            if (c->end - c->p >= 2 && c->p[1] == ':') {
                c->p += 2;
            } else if (c->end - c->p >= 3 && c->p[1] == '<' && c->p[2] != '=' && c->p[2] != '!') {
                const char *q = memchr(c->p, '>', (size_t)(c->end - c->p));
                if (!q) return failf(c, "%s", "a group name without its '>'");
                c->p = q + 1;
            } else {
                return failf(c, "%s", "lookahead and lookbehind are not supported in a pattern");
            }
        }
        int n = parse_alt(c, depth + 1);
        if (n < 0) return -1;
        if (c->p >= c->end || *c->p != ')') return failf(c, "%s", "a '(' without its ')'");
        c->p++;
        return n;
    }
    case '[': return parse_class(c);
    case '.': {
        c->p++;
        cpset s = {0};
        if (set_add(c, &s, '\n', '\n') || set_add(c, &s, '\r', '\r') || set_add(c, &s, 0x2028, 0x2029) ||
            set_negate(c, &s)) {
            free(s.r);
            return -1;
        }
        return set_node(c, &s);
    }
    case '^': c->p++; return new_node(c, R_BOL);
    case '$': c->p++; return new_node(c, R_EOL);
    case '\\': {
        c->p++;
        if (c->p >= c->end) return failf(c, "%s", "the pattern ends with a lone '\\'");
        if (strchr("dDwWsS", *c->p)) {
            cpset s = {0};
            if (class_escape(c, &s, *c->p++)) {
                free(s.r);
                return -1;
            }
            return set_node(c, &s);
        }
        long v = char_escape(c, 0);
        return v < 0 ? -1 : one_char(c, (uint32_t)v, (uint32_t)v);
    }
    case '*':
    case '+':
    case '?': return failf(c, "%s", "a quantifier with nothing to repeat");
    default: {
        long v = utf8_char(c);
        return v < 0 ? -1 : one_char(c, (uint32_t)v, (uint32_t)v);
    }
    }
}

/* {n}, {n,} or {n,m} at c->p: 1 read (c->p past it), 0 not a quantifier
 * (then '{' is a literal, as ECMAScript's web grammar has it). */
static int brace_quant(rctx *c, int *min, int *max) {
    const char *q = c->p + 1;
    long a = 0, b = -1;
    int digits = 0;
    while (q < c->end && *q >= '0' && *q <= '9') {
        if (a <= MAX_REPEAT) a = a * 10 + (*q - '0');
        q++, digits++;
    }
    if (!digits) return 0;
    if (q < c->end && *q == ',') {
        q++;
        int d2 = 0;
        long v = 0;
        while (q < c->end && *q >= '0' && *q <= '9') {
            if (v <= MAX_REPEAT) v = v * 10 + (*q - '0');
            q++, d2++;
        }
        b = d2 ? v : -1;
    } else {
        b = a;
    }
    if (q >= c->end || *q != '}') return 0;
    if (a > MAX_REPEAT || b > MAX_REPEAT) return failf(c, "a repetition count over %s", "1000");
    if (b >= 0 && b < a) return failf(c, "%s", "a {n,m} with m below n");
    *min = (int)a;
    *max = (int)b;
    c->p = q + 1;
    return 1;
}

static int parse_quant(rctx *c, int depth) {
    if (*c->p == '{') { /* a literal '{' unless it quantifies, and nothing precedes it */
        int mn, mx;
        const char *save = c->p;
        int r = brace_quant(c, &mn, &mx);
        if (r < 0) return -1;
        if (r > 0) {
            c->p = save;
            return failf(c, "%s", "a quantifier with nothing to repeat");
        }
        c->p++;
        return one_char(c, '{', '{');
    }
    int n = parse_atom(c, depth);
    if (n < 0) return -1;
    const int kind = c->nodes[n].kind;
    int quantified = 0;
    while (c->p < c->end) {
        int mn, mx;
        if (*c->p == '*')
            mn = 0, mx = -1, c->p++;
        else if (*c->p == '+')
            mn = 1, mx = -1, c->p++;
        else if (*c->p == '?')
            mn = 0, mx = 1, c->p++;
        else if (*c->p == '{') {
            int r = brace_quant(c, &mn, &mx);
            if (r < 0) return -1;
            if (!r) break;
        } else
            break;
        if (quantified) return failf(c, "%s", "a quantifier with nothing to repeat");
        if (kind == R_BOL || kind == R_EOL) return failf(c, "%s", "a quantifier on an anchor");
        if (c->p < c->end && *c->p == '?') c->p++; /* lazy: the same language */
        int r = new_node(c, R_REP);
        if (r < 0) return -1;
        c->nodes[r].a = n;
        c->nodes[r].min = mn;
        c->nodes[r].max = mx;
        n = r;
        quantified = 1;
    }
    return n;
}

static int parse_cat(rctx *c, int depth) {
    int n = -2;
    while (c->p < c->end && *c->p != '|' && *c->p != ')') {
        int q = parse_quant(c, depth);
        if (q < 0) return -1;
        n = n == -2 ? q : node2(c, R_CAT, n, q);
        if (n < 0) return -1;
    }
    return n == -2 ? new_node(c, R_EMPTY) : n;
}

static int parse_alt(rctx *c, int depth) {
    int n = parse_cat(c, depth);
    while (n >= 0 && c->p < c->end && *c->p == '|') {
        c->p++;
        n = node2(c, R_ALT, n, parse_cat(c, depth));
    }
    return n;
}

/* ---- the NFA ---- */

static int nfa_state(rctx *c) {
    if (c->n_states >= MAX_NFA) return failf(c, "%s", "the pattern is too complex");
    return c->n_states++;
}

static int edge(rctx *c, int from, int to, int kind, int lo, int hi) {
    redge *e = grow(c, c->edges, &c->cap_edges, c->n_edges + 1, sizeof *e);
    if (!e) return -1;
    c->edges = e;
    c->edges[c->n_edges++] = (redge){from, to, (uint8_t)kind, (uint8_t)lo, (uint8_t)hi};
    return 0;
}

static int utf8_len(uint32_t cp) { return cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4; }

static void utf8_enc(uint32_t cp, uint8_t *b) {
    const int n = utf8_len(cp);
    if (n == 1) {
        b[0] = (uint8_t)cp;
        return;
    }
    for (int i = n - 1; i > 0; i--, cp >>= 6) b[i] = (uint8_t)(0x80 | (cp & 0x3F));
    b[0] = (uint8_t)((n == 2 ? 0xC0 : n == 3 ? 0xE0 : 0xF0) | cp);
}

/* Edges from s to t for the UTF-8 encodings of [lo, hi]: split until every
 * byte position of the piece is an independent range. */
static int utf8_range(rctx *c, int s, int t, uint32_t lo, uint32_t hi) {
    static const uint32_t len_max[] = {0x7F, 0x7FF, 0xFFFF};
    for (int i = 0; i < 3; i++)
        if (lo <= len_max[i] && hi > len_max[i])
            return utf8_range(c, s, t, lo, len_max[i]) || utf8_range(c, s, t, len_max[i] + 1, hi);
    const int n = utf8_len(lo);
    for (int i = 1; i < n; i++) {
        const uint32_t m = (1u << (6 * i)) - 1;
        if ((lo & ~m) != (hi & ~m)) {
            if (lo & m) return utf8_range(c, s, t, lo, lo | m) || utf8_range(c, s, t, (lo | m) + 1, hi);
            if ((hi & m) != m) return utf8_range(c, s, t, lo, (hi & ~m) - 1) || utf8_range(c, s, t, hi & ~m, hi);
        }
    }
    uint8_t a[4], b[4];
    utf8_enc(lo, a);
    utf8_enc(hi, b);
    int from = s;
    for (int i = 0; i < n; i++) {
        int to = i == n - 1 ? t : nfa_state(c);
        if (to < 0 || edge(c, from, to, E_BYTE, a[i], b[i])) return -1;
        from = to;
    }
    return 0;
}

/* Edges from s to t that read what node n matches. */
static int build(rctx *c, int n, int s, int t, int depth) {
    if (c->failed) return -1;
    if (depth > 4 * MAX_DEPTH) return failf(c, "%s", "the pattern nests too deep");
    const rnode *x = &c->nodes[n];
    switch (x->kind) {
    case R_EMPTY: return edge(c, s, t, E_EPS, 0, 0);
    case R_BOL: return edge(c, s, t, E_BOL, 0, 0);
    case R_EOL: return edge(c, s, t, E_EOL, 0, 0);
    case R_SET:
        for (int i = 0; i < x->set.n; i++)
            if (utf8_range(c, s, t, x->set.r[i].lo, x->set.r[i].hi)) return -1;
        return 0;
    case R_CAT: {
        int m = nfa_state(c);
        return m < 0 || build(c, x->a, s, m, depth + 1) || build(c, c->nodes[n].b, m, t, depth + 1) ? -1 : 0;
    }
    case R_ALT: return build(c, x->a, s, t, depth + 1) || build(c, c->nodes[n].b, s, t, depth + 1) ? -1 : 0;
    default: { /* R_REP: min copies, then max - min optional ones or a loop */
        const int a = x->a, mn = x->min, mx = x->max;
        int cur = s;
        for (int i = 0; i < mn; i++) {
            int m = nfa_state(c);
            if (m < 0 || build(c, a, cur, m, depth + 1)) return -1;
            cur = m;
        }
        if (mx < 0) {
            int loop = nfa_state(c);
            if (loop < 0 || edge(c, cur, loop, E_EPS, 0, 0) || build(c, a, loop, loop, depth + 1) ||
                edge(c, loop, t, E_EPS, 0, 0))
                return -1;
            return 0;
        }
        for (int i = mn; i < mx; i++) {
            int m = nfa_state(c);
            if (m < 0 || edge(c, cur, t, E_EPS, 0, 0) || build(c, a, cur, m, depth + 1)) return -1;
            cur = m;
        }
        return edge(c, cur, t, E_EPS, 0, 0);
    }
    }
}

/* ---- NFA to DFA ---- */

typedef struct nfa {
    int n;
    int *off; /* [n + 1] edges of state i: e[off[i]..off[i+1]) */
    redge *e; /* sorted by from */
    int match;
} nfa;

typedef struct dfa_build {
    int n, cap;
    int n_classes;
    int32_t *next; /* [cap][n_classes] */
    uint8_t *accept;
    /* the set of each state, for the subset construction */
    int *set_off, *set_len, *pool;
    int pool_n, pool_cap;
    uint8_t *at_start;
    int *hash; /* open addressing over states, -1 empty */
    int hash_cap;
} dfa_build;

static uint32_t set_hash(const int *s, int n, int start) {
    uint32_t h = 2166136261u ^ (uint32_t)start;
    for (int i = 0; i < n; i++) h = (h ^ (uint32_t)s[i]) * 16777619u;
    return h;
}

static int cmp_int(const void *a, const void *b) {
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

/* Closes set[0..n) in place (set has room for every state): through
 * epsilon edges, ^ only when at_start, $ only when at_end; stack has room
 * for every state, mark is all zero and left so.  Returns the count,
 * sorted. */
static int closure(const nfa *a, int *set, int n, int *stack, uint8_t *mark, int at_start, int at_end) {
    int nt = 0;
    for (int i = 0; i < n; i++) {
        mark[set[i]] = 1;
        stack[nt++] = set[i];
    }
    while (nt) {
        const int s = stack[--nt];
        for (int k = a->off[s]; k < a->off[s + 1]; k++) {
            const redge *e = &a->e[k];
            if (e->kind == E_BYTE || (e->kind == E_BOL && !at_start) || (e->kind == E_EOL && !at_end)) continue;
            if (mark[e->to]) continue;
            mark[e->to] = 1;
            set[n++] = e->to;
            stack[nt++] = e->to;
        }
    }
    for (int i = 0; i < n; i++) mark[set[i]] = 0;
    qsort(set, (size_t)n, sizeof *set, cmp_int);
    return n;
}

static int db_find(dfa_build *d, const int *s, int n, int start) {
    uint32_t h = set_hash(s, n, start);
    for (uint32_t i = h & (uint32_t)(d->hash_cap - 1);; i = (i + 1) & (uint32_t)(d->hash_cap - 1)) {
        int k = d->hash[i];
        if (k < 0) return -1 - (int)i;
        if (d->set_len[k] == n && d->at_start[k] == start && !memcmp(d->pool + d->set_off[k], s, (size_t)n * sizeof *s))
            return k;
    }
}

/* The DFA state of set s (adding it); -1 on failure. */
static int db_state(rctx *c, dfa_build *d, const int *s, int n, int start, const nfa *a, uint8_t *mark, int *scratch,
                    int *stack) {
    int f = db_find(d, s, n, start);
    if (f >= 0) return f;
    if (d->n >= SAMPLE_RE_MAX_STATES) return failf(c, "%s", "the pattern is too complex (too many DFA states)");
    if (d->n == d->cap) {
        int cap = d->cap * 2;
        int32_t *nx = realloc(d->next, (size_t)cap * (size_t)d->n_classes * sizeof *nx);
        if (nx) d->next = nx;
        uint8_t *ac = realloc(d->accept, (size_t)cap);
        if (ac) d->accept = ac;
        int *so = realloc(d->set_off, (size_t)cap * sizeof *so),
            *sl = so ? realloc(d->set_len, (size_t)cap * sizeof *sl) : NULL;
        if (so) d->set_off = so;
        if (sl) d->set_len = sl;
        uint8_t *as = realloc(d->at_start, (size_t)cap);
        if (as) d->at_start = as;
        if (!nx || !ac || !so || !sl || !as) return failf(c, "%s", "out of memory");
        d->cap = cap;
    }
    if (d->pool_n + n > d->pool_cap) {
        int cap = d->pool_cap ? d->pool_cap : 1024;
        while (cap < d->pool_n + n) cap *= 2;
        int *p = realloc(d->pool, (size_t)cap * sizeof *p);
        if (!p) return failf(c, "%s", "out of memory");
        d->pool = p;
        d->pool_cap = cap;
    }
    if (2 * (d->n + 1) > d->hash_cap) { /* rehash */
        int hc = d->hash_cap * 2;
        int *h = malloc((size_t)hc * sizeof *h);
        if (!h) return failf(c, "%s", "out of memory");
        for (int i = 0; i < hc; i++) h[i] = -1;
        free(d->hash);
        d->hash = h;
        d->hash_cap = hc;
        for (int k = 0; k < d->n; k++) {
            uint32_t i = set_hash(d->pool + d->set_off[k], d->set_len[k], d->at_start[k]) & (uint32_t)(hc - 1);
            while (h[i] >= 0) i = (i + 1) & (uint32_t)(hc - 1);
            h[i] = k;
        }
        f = db_find(d, s, n, start);
    }
    const int k = d->n++;
    d->hash[-1 - f] = k;
    memcpy(d->pool + d->pool_n, s, (size_t)n * sizeof *s);
    d->set_off[k] = d->pool_n;
    d->set_len[k] = n;
    d->pool_n += n;
    d->at_start[k] = (uint8_t)start;
    for (int i = 0; i < d->n_classes; i++) d->next[(size_t)k * (size_t)d->n_classes + i] = -1;
    /* accepting: the match state is reachable where the text may end */
    memcpy(scratch, s, (size_t)n * sizeof *s);
    int m = closure(a, scratch, n, stack, mark, start, 1);
    d->accept[k] = bsearch(&a->match, scratch, (size_t)m, sizeof *scratch, cmp_int) != NULL;
    return k;
}

/* ---- trimming, renumbering, character counts ---- */

static int is_cont_byte(int b) { return b >= 0x80 && b < 0xC0; }

/* Builds the result from a raw DFA: drops states that cannot reach an
 * accepting one, renumbers, counts characters.  Takes next and accept. */
static sample_re *finish(rctx *c, int n, int n_classes, const uint8_t *cls, int32_t *next, uint8_t *accept, int start) {
    sample_re *r = NULL;
    int *live = calloc((size_t)n, sizeof *live), *map = malloc((size_t)n * sizeof *map);
    int *rev_off = calloc((size_t)n + 1, sizeof *rev_off), *rev = NULL, *queue = malloc((size_t)n * sizeof *queue);
    uint8_t weight[256];
    if (!live || !map || !rev_off || !queue) goto oom;
    /* class weights: 1 for a class of lead bytes, 0 for continuation bytes */
    for (int b = 0; b < 256; b++) weight[cls[b]] = (uint8_t)!is_cont_byte(b);
    /* reverse edges */
    for (int s = 0; s < n; s++)
        for (int k = 0; k < n_classes; k++) {
            int t = next[(size_t)s * (size_t)n_classes + k];
            if (t >= 0) rev_off[t + 1]++;
        }
    for (int s = 0; s < n; s++) rev_off[s + 1] += rev_off[s];
    rev = malloc(((size_t)rev_off[n] + 1) * sizeof *rev);
    int *fill = calloc((size_t)n, sizeof *fill);
    if (!rev || !fill) {
        free(fill);
        goto oom;
    }
    for (int s = 0; s < n; s++)
        for (int k = 0; k < n_classes; k++) {
            int t = next[(size_t)s * (size_t)n_classes + k];
            if (t >= 0) rev[rev_off[t] + fill[t]++] = s;
        }
    free(fill);
    int qh = 0, qt = 0;
    for (int s = 0; s < n; s++)
        if (accept[s]) live[s] = 1, queue[qt++] = s;
    while (qh < qt) {
        int t = queue[qh++];
        for (int k = rev_off[t]; k < rev_off[t + 1]; k++)
            if (!live[rev[k]]) live[rev[k]] = 1, queue[qt++] = rev[k];
    }
    if (!live[start]) {
        failf(c, "%s", "the pattern matches no string");
        goto out;
    }
    /* live states reachable from start, numbered in BFS order */
    for (int s = 0; s < n; s++) map[s] = -1;
    int m = 0;
    qh = qt = 0;
    map[start] = m++;
    queue[qt++] = start;
    while (qh < qt) {
        int s = queue[qh++];
        for (int k = 0; k < n_classes; k++) {
            int t = next[(size_t)s * (size_t)n_classes + k];
            if (t >= 0 && live[t] && map[t] < 0) map[t] = m++, queue[qt++] = t;
        }
    }
    r = calloc(1, sizeof *r);
    if (!r) goto oom;
    r->n_states = m;
    r->n_classes = n_classes;
    r->start = 0;
    memcpy(r->cls, cls, 256);
    r->next = malloc((size_t)m * (size_t)n_classes * sizeof *r->next);
    r->accept = malloc((size_t)m);
    r->min_chars = malloc((size_t)m * sizeof *r->min_chars);
    r->max_chars = malloc((size_t)m * sizeof *r->max_chars);
    if (!r->next || !r->accept || !r->min_chars || !r->max_chars) goto oom;
    for (int s = 0; s < n; s++) {
        if (map[s] < 0) continue;
        r->accept[map[s]] = accept[s];
        for (int k = 0; k < n_classes; k++) {
            int t = next[(size_t)s * (size_t)n_classes + k];
            r->next[(size_t)map[s] * (size_t)n_classes + k] = t >= 0 && map[t] >= 0 ? map[t] : -1;
        }
    }
    /* reverse edges of the result, each with its weight */
    {
        const size_t ne = (size_t)m * (size_t)n_classes;
        int *roff = calloc((size_t)m + 1, sizeof *roff), *rsrc = malloc((ne + 1) * sizeof *rsrc);
        uint8_t *rw = malloc(ne + 1);
        /* the deque: a state goes in once per improvement, at most once per edge */
        int *pending = calloc((size_t)m, sizeof *pending), *dq = malloc(2 * (ne + (size_t)m + 1) * sizeof *dq);
        if (!roff || !rsrc || !rw || !pending || !dq) {
            free(roff), free(rsrc), free(rw), free(pending), free(dq);
            goto oom;
        }
        for (size_t i = 0; i < ne; i++)
            if (r->next[i] >= 0) roff[r->next[i] + 1]++;
        for (int t = 0; t < m; t++) roff[t + 1] += roff[t];
        for (int st = 0; st < m; st++) /* pending doubles as the fill count */
            for (int k = 0; k < n_classes; k++) {
                const int t = r->next[(size_t)st * (size_t)n_classes + k];
                if (t < 0) continue;
                const int at = roff[t] + pending[t]++;
                rsrc[at] = st;
                rw[at] = weight[k];
            }
        /* fewest characters: 0/1 breadth-first search back from the
         * accepting states (a deque: weight 0 in front, 1 at the back) */
        const int32_t inf = INT32_MAX / 2;
        size_t head = ne + (size_t)m + 1, tail = head; /* dq[head..tail) */
        for (int st = 0; st < m; st++) {
            r->min_chars[st] = r->accept[st] ? 0 : inf;
            if (r->accept[st]) dq[tail++] = st;
        }
        while (head < tail) {
            const int t = dq[head++];
            for (int k = roff[t]; k < roff[t + 1]; k++) {
                const int st = rsrc[k];
                if (r->min_chars[t] + rw[k] >= r->min_chars[st]) continue;
                r->min_chars[st] = r->min_chars[t] + rw[k];
                if (rw[k])
                    dq[tail++] = st;
                else
                    dq[--head] = st;
            }
        }
        /* most characters: the longest path, settling a state once all its
         * successors are; one on or before a cycle is never settled and has
         * no bound (every cycle reads a lead byte: the DFA reads only
         * well-formed UTF-8) */
        memset(pending, 0, (size_t)m * sizeof *pending);
        for (size_t i = 0; i < ne; i++)
            if (r->next[i] >= 0) pending[i / (size_t)n_classes]++;
        qh = qt = 0;
        for (int st = 0; st < m; st++) {
            r->max_chars[st] = -1;
            if (!pending[st]) queue[qt++] = st;
        }
        while (qh < qt) {
            const int st = queue[qh++];
            int32_t best = r->accept[st] ? 0 : -1;
            for (int k = 0; k < n_classes; k++) {
                const int t = r->next[(size_t)st * (size_t)n_classes + k];
                if (t >= 0 && r->max_chars[t] + weight[k] > best) best = r->max_chars[t] + weight[k];
            }
            r->max_chars[st] = best;
            for (int k = roff[st]; k < roff[st + 1]; k++)
                if (--pending[rsrc[k]] == 0) queue[qt++] = rsrc[k];
        }
        free(roff), free(rsrc), free(rw), free(pending), free(dq);
    }
    goto out;
oom:
    failf(c, "%s", "out of memory");
    sample_re_free(r);
    r = NULL;
out:
    if (c->failed && r) {
        sample_re_free(r);
        r = NULL;
    }
    free(live), free(map), free(rev_off), free(rev), free(queue);
    free(next), free(accept);
    return r;
}

static void free_tree(rctx *c) {
    for (int i = 0; i < c->n_nodes; i++)
        if (c->nodes[i].kind == R_SET) free(c->nodes[i].set.r);
    free(c->nodes);
    free(c->edges);
}

static int cmp_edge(const void *a, const void *b) {
    const redge *x = a, *y = b;
    return (x->from > y->from) - (x->from < y->from);
}

sample_re *sample_re_compile(const char *pattern, size_t len, char *err, size_t errsz) {
    rctx c = {.p = pattern, .end = pattern + len, .pat = pattern, .err = err, .errsz = errsz};
    if (err && errsz) err[0] = 0;
    if (len > MAX_PATTERN) {
        failf(&c, "a pattern longer than %s bytes", "4096");
        return NULL;
    }
    int root = parse_alt(&c, 0);
    if (root >= 0 && c.p < c.end) failf(&c, "%s", "a ')' without its '('");
    /* search: any text, the pattern, any text */
    int any = -1, pre = -1, post = -1;
    if (!c.failed) {
        cpset s = {0};
        if (!set_add(&c, &s, 0, CP_MAX))
            any = set_node(&c, &s);
        else
            free(s.r);
        if (any >= 0 && (pre = new_node(&c, R_REP)) >= 0)
            c.nodes[pre].a = any, c.nodes[pre].min = 0, c.nodes[pre].max = -1;
        if (pre >= 0 && (post = new_node(&c, R_REP)) >= 0)
            c.nodes[post].a = any, c.nodes[post].min = 0, c.nodes[post].max = -1;
    }
    int s0 = -1, s1 = -1, s2 = -1, fin = -1;
    if (!c.failed) {
        s0 = nfa_state(&c), s1 = nfa_state(&c), s2 = nfa_state(&c), fin = nfa_state(&c);
        if (!c.failed) build(&c, pre, s0, s1, 0), build(&c, root, s1, s2, 0), build(&c, post, s2, fin, 0);
    }
    if (c.failed) {
        free_tree(&c);
        return NULL;
    }
    /* edges by state */
    nfa a = {.n = c.n_states, .match = fin};
    qsort(c.edges, (size_t)c.n_edges, sizeof *c.edges, cmp_edge);
    a.e = c.edges;
    a.off = calloc((size_t)a.n + 1, sizeof *a.off);
    /* byte classes: the boundaries of every byte range, and 0x80 / 0xC0 so
     * no class mixes lead and continuation bytes */
    uint8_t cut[257] = {0}, cls[256];
    cut[0] = cut[0x80] = cut[0xC0] = 1;
    for (int i = 0; i < c.n_edges; i++)
        if (c.edges[i].kind == E_BYTE) cut[c.edges[i].lo] = 1, cut[c.edges[i].hi + 1] = 1;
    int n_classes = 0, rep[256];
    for (int b = 0; b < 256; b++) {
        if (b && cut[b]) n_classes++;
        cls[b] = (uint8_t)n_classes;
        if (!b || cut[b]) rep[n_classes] = b;
    }
    n_classes++;
    dfa_build d = {.cap = 64, .n_classes = n_classes, .hash_cap = 256};
    d.next = malloc((size_t)d.cap * (size_t)n_classes * sizeof *d.next);
    d.accept = malloc((size_t)d.cap);
    d.set_off = malloc((size_t)d.cap * sizeof *d.set_off);
    d.set_len = malloc((size_t)d.cap * sizeof *d.set_len);
    d.at_start = malloc((size_t)d.cap);
    d.hash = malloc((size_t)d.hash_cap * sizeof *d.hash);
    int *work = malloc(((size_t)a.n + 1) * sizeof *work), *scratch = malloc(((size_t)a.n + 1) * sizeof *scratch);
    int *stack = malloc(((size_t)a.n + 1) * sizeof *stack);
    uint8_t *mark = calloc((size_t)a.n, 1);
    sample_re *r = NULL;
    if (!a.off || !d.next || !d.accept || !d.set_off || !d.set_len || !d.at_start || !d.hash || !work || !scratch ||
        !stack || !mark) {
        failf(&c, "%s", "out of memory");
        goto done;
    }
    for (int i = 0; i < d.hash_cap; i++) d.hash[i] = -1;
    for (int i = 0; i < c.n_edges; i++) a.off[c.edges[i].from + 1]++;
    for (int i = 0; i < a.n; i++) a.off[i + 1] += a.off[i];
    work[0] = s0;
    int n = closure(&a, work, 1, stack, mark, 1, 0);
    if (db_state(&c, &d, work, n, 1, &a, mark, scratch, stack) < 0) goto done;
    for (int k = 0; k < d.n && !c.failed; k++) {
        for (int cl = 0; cl < n_classes; cl++) {
            const int b = rep[cl];
            int cnt = 0;
            const int *set = d.pool + d.set_off[k];
            for (int i = 0; i < d.set_len[k]; i++) {
                const int s = set[i];
                for (int e = a.off[s]; e < a.off[s + 1]; e++) {
                    const redge *x = &a.e[e];
                    if (x->kind == E_BYTE && b >= x->lo && b <= x->hi && !mark[x->to]) {
                        mark[x->to] = 1;
                        work[cnt++] = x->to;
                    }
                }
            }
            for (int i = 0; i < cnt; i++) mark[work[i]] = 0;
            if (!cnt) continue;
            n = closure(&a, work, cnt, stack, mark, 0, 0);
            int t = db_state(&c, &d, work, n, 0, &a, mark, scratch, stack);
            if (t < 0) break;
            d.next[(size_t)k * (size_t)n_classes + cl] = t;
        }
    }
    if (!c.failed) {
        r = finish(&c, d.n, n_classes, cls, d.next, d.accept, 0);
        d.next = NULL;
        d.accept = NULL;
    }
done:
    free(d.next), free(d.accept), free(d.set_off), free(d.set_len), free(d.at_start), free(d.hash), free(d.pool);
    free(work), free(scratch), free(stack), free(mark), free(a.off);
    free_tree(&c);
    return r;
}

sample_re *sample_re_intersect(const sample_re *x, const sample_re *y, char *err, size_t errsz) {
    rctx c = {.err = err, .errsz = errsz};
    if (err && errsz) err[0] = 0;
    /* classes of the product: pairs of classes some byte has */
    uint8_t cls[256];
    int pair_of[256], n_classes = 0, rep[256];
    for (int b = 0; b < 256; b++) {
        const int key = x->cls[b] * 256 + y->cls[b];
        int k = -1;
        for (int i = 0; i < n_classes; i++)
            if (pair_of[i] == key) k = i;
        if (k < 0) {
            k = n_classes++;
            pair_of[k] = key;
            rep[k] = b;
        }
        cls[b] = (uint8_t)k;
    }
    int cap = 64, n = 0;
    int *sa = malloc((size_t)cap * sizeof *sa), *sb = malloc((size_t)cap * sizeof *sb);
    int32_t *next = malloc((size_t)cap * (size_t)n_classes * sizeof *next);
    uint8_t *accept = malloc((size_t)cap);
    /* pair -> state, by a hash over the pairs */
    int hcap = 1024;
    int *hash = malloc((size_t)hcap * sizeof *hash);
    if (!sa || !sb || !next || !accept || !hash) goto oom;
    for (int i = 0; i < hcap; i++) hash[i] = -1;
    sa[0] = x->start, sb[0] = y->start, n = 1;
    hash[((unsigned)x->start * 31u + (unsigned)y->start) & (unsigned)(hcap - 1)] = 0;
    for (int k = 0; k < n; k++) {
        accept[k] = x->accept[sa[k]] && y->accept[sb[k]];
        for (int cl = 0; cl < n_classes; cl++) {
            const int ta = sample_re_step(x, sa[k], (unsigned char)rep[cl]),
                      tb = sample_re_step(y, sb[k], (unsigned char)rep[cl]);
            int t = -1;
            if (ta >= 0 && tb >= 0) {
                unsigned h = ((unsigned)ta * 31u + (unsigned)tb) & (unsigned)(hcap - 1);
                while (hash[h] >= 0 && !(sa[hash[h]] == ta && sb[hash[h]] == tb)) h = (h + 1) & (unsigned)(hcap - 1);
                if (hash[h] >= 0) {
                    t = hash[h];
                } else {
                    if (n >= SAMPLE_RE_MAX_STATES) {
                        failf(&c, "%s", "the pattern is too complex together with the format (too many DFA states)");
                        goto fail;
                    }
                    if (n == cap) {
                        cap *= 2;
                        int *na = realloc(sa, (size_t)cap * sizeof *na);
                        if (na) sa = na;
                        int *nb = realloc(sb, (size_t)cap * sizeof *nb);
                        if (nb) sb = nb;
                        int32_t *nn = realloc(next, (size_t)cap * (size_t)n_classes * sizeof *nn);
                        if (nn) next = nn;
                        uint8_t *ac = realloc(accept, (size_t)cap);
                        if (ac) accept = ac;
                        if (!na || !nb || !nn || !ac) goto oom;
                    }
                    t = n++;
                    sa[t] = ta, sb[t] = tb;
                    hash[h] = t;
                    if (2 * n > hcap) { /* rehash */
                        int nh = hcap * 2, *h2 = malloc((size_t)nh * sizeof *h2);
                        if (!h2) goto oom;
                        for (int i = 0; i < nh; i++) h2[i] = -1;
                        for (int i = 0; i < n; i++) {
                            unsigned q = ((unsigned)sa[i] * 31u + (unsigned)sb[i]) & (unsigned)(nh - 1);
                            while (h2[q] >= 0) q = (q + 1) & (unsigned)(nh - 1);
                            h2[q] = i;
                        }
                        free(hash);
                        hash = h2;
                        hcap = nh;
                    }
                }
            }
            next[(size_t)k * (size_t)n_classes + cl] = t;
        }
    }
    free(sa), free(sb), free(hash);
    return finish(&c, n, n_classes, cls, next, accept, 0);
oom:
    failf(&c, "%s", "out of memory");
fail:
    free(sa), free(sb), free(hash), free(next), free(accept);
    return NULL;
}

void sample_re_free(sample_re *r) {
    if (!r) return;
    free(r->next);
    free(r->accept);
    free(r->min_chars);
    free(r->max_chars);
    free(r);
}
