/*
 * Structured output (src/sample/jschema.c): texts fed byte by byte to the
 * recognizer of a schema must be accepted to the end (and be complete) or
 * be refused at the byte where they leave what the schema allows; schemas
 * the recognizer cannot honour are refused with a message.  Number ranges
 * and patterns are also checked exhaustively over short texts against an
 * oracle (exact decimal arithmetic; PCRE2 for patterns): the same texts
 * are allowed, every prefix an allowed text extends is taken, and no taken
 * prefix dead-ends.
 */
#include "sample/jschema.h"
#include "sample/sample.h"
#include "sample/regex.h"
#include "testutil.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* How many bytes of text the recognizer of s takes; *whole: whether they
 * make a complete value. */
static int feed(const sample_schema *s, const char *text, int *whole) {
    sample_sv v;
    sample_sv_init(&v, s);
    int n = (int)strlen(text), i = 0;
    for (; i < n; i++) {
        if (!sample_sv_accepts(&v, text + i, 1)) break; /* the copy refuses as the real one would */
        CHECK(sample_sv_byte(&v, (unsigned char)text[i]));
    }
    *whole = i == n && sample_sv_complete(&v);
    return i;
}

/* text is accepted whole (stop < 0) or refused at byte stop. */
static void expect(const sample_schema *s, const char *text, int stop, const char *what) {
    int whole;
    const int got = feed(s, text, &whole);
    if (stop < 0)
        CHECKF(got == (int)strlen(text) && whole, "%s: '%s' stopped at byte %d (whole %d)", what, text, got, whole);
    else
        CHECKF(got == stop, "%s: '%s' stopped at byte %d, not %d", what, text, got, stop);
}

/* text is accepted to its end but is not yet a whole value */
static void partial(const sample_schema *s, const char *text, const char *what) {
    int whole;
    const int got = feed(s, text, &whole);
    CHECKF(got == (int)strlen(text) && !whole, "%s: '%s' stopped at %d, whole %d", what, text, got, whole);
}

static sample_schema *compile(const char *src) {
    json_error_t je;
    json_t *j = json_loads(src, 0, &je);
    CHECKF(j != NULL, "schema does not parse: %s", src);
    char err[256];
    sample_schema *s = sample_schema_compile(j, err, sizeof err);
    CHECKF(s != NULL, "schema refused (%s): %s", err, src);
    json_decref(j); /* the compiled schema keeps no pointer into it */
    return s;
}

static void refused(const char *src, const char *msg) {
    json_t *j = json_loads(src, JSON_DECODE_ANY, NULL);
    CHECKF(j != NULL, "schema does not parse: %s", src);
    char err[256] = "";
    sample_schema *s = sample_schema_compile(j, err, sizeof err);
    CHECKF(!s && strstr(err, msg), "schema %s: want an error with '%s', got '%s'", src, msg, s ? "(compiled)" : err);
    sample_schema_free(s);
    json_decref(j);
}

/* ---- exhaustive checks against an oracle ----
 * For texts over an alphabet up to a length: the recognizer takes a whole
 * text exactly when the oracle allows it; it takes a prefix whenever some
 * allowed text of the enumeration extends it; and wherever it has taken a
 * prefix some byte may follow or the value is complete (no dead end), and
 * a greedy walk from there reaches a complete value the oracle allows. */

typedef int (*oracle_fn)(const char *text, int len, void *ud);

/* Bytes of the longest prefix the recognizer takes; *whole: all of it and
 * complete. */
static int take(const sample_schema *s, const char *t, int n, int *whole) {
    sample_sv v;
    sample_sv_init(&v, s);
    int i = 0;
    while (i < n && sample_sv_byte(&v, (unsigned char)t[i])) i++;
    *whole = i == n && sample_sv_complete(&v);
    return i;
}

/* Whether the value can be completed within depth more bytes from v,
 * trying the bytes of cands (the closing quote first); the completion is
 * written to out. */
static int search(const sample_sv *v, const char *cands, int nc, int depth, char *out) {
    if (sample_sv_complete(v)) return 1;
    if (!depth) return 0;
    for (int i = 0; i < nc; i++) {
        sample_sv w = *v;
        if (!sample_sv_byte(&w, (unsigned char)cands[i])) continue;
        out[0] = cands[i];
        if (search(&w, cands, nc, depth - 1, out + 1)) return 1;
    }
    return 0;
}

/* Completes t[0..n) (appending, up to cap bytes) with the shortest text
 * over cands, after checking that the state after t is no dead end (some
 * byte at all may follow, or it is complete).  Returns the new length, or
 * 0 when there is a dead end or no completion within 10 bytes. */
static int complete_with(const sample_schema *s, char *t, int n, int cap, const char *cands, int nc) {
    sample_sv v;
    sample_sv_init(&v, s);
    for (int i = 0; i < n; i++)
        if (!sample_sv_byte(&v, (unsigned char)t[i])) return 0;
    int any = sample_sv_complete(&v);
    for (int b = 0; b < 256 && !any; b++) {
        const char ch = (char)b;
        any = sample_sv_accepts(&v, &ch, 1);
    }
    if (!any) return 0;
    for (int d = 0; d <= 10 && n + d <= cap; d++)
        if (search(&v, cands, nc, d, t + n)) return n + d;
    return 0;
}

/* Some byte may follow t[0..n) (or the value is complete there). */
static int no_dead_end(const sample_schema *s, const char *t, int n) {
    sample_sv v;
    sample_sv_init(&v, s);
    for (int i = 0; i < n; i++)
        if (!sample_sv_byte(&v, (unsigned char)t[i])) return 0;
    int any = sample_sv_complete(&v);
    for (int b = 0; b < 256 && !any; b++) {
        const char ch = (char)b;
        any = sample_sv_accepts(&v, &ch, 1);
    }
    return any;
}

/* The distinct bytes of the texts in tok, and the quote first. */
static int cands_of(const char *const *tok, int n_tok, char *out) {
    int n = 0;
    out[n++] = '"';
    for (int i = 0; i < n_tok; i++)
        for (const char *p = tok[i]; *p; p++)
            if (!memchr(out, *p, (size_t)n)) out[n++] = *p;
    return n;
}

typedef struct enum_ctx {
    const char *const *tok; /* the alphabet: texts of one or more bytes */
    int n_tok, max_len;
    const char *prefix, *suffix; /* around every text (the quotes of a string) */
} enum_ctx;

/* Checks s against the oracle over every text of up to e->max_len tokens. */
static void exhaust(const sample_schema *s, const enum_ctx *e, oracle_fn ok, void *ud, const char *what) {
    enum { CAP = 600, MAXLEN = 8 };
    /* texts in order: by length, then as little-endian numbers in base
     * n_tok, so a prefix of p tokens is text base[p] + its digits */
    long base[MAXLEN + 2];
    base[0] = 0;
    long pw = 1;
    for (int l = 0; l <= e->max_len; l++, pw *= e->n_tok) base[l + 1] = base[l] + pw;
    const long nt = base[e->max_len + 1];
    CHECK(e->max_len <= MAXLEN && nt <= 500000);
    uint8_t *tok_of = malloc((size_t)nt * MAXLEN), *len_of = malloc((size_t)nt), *allowed = calloc((size_t)nt, 1),
            *viable = calloc((size_t)nt, 1);
    long at = 0;
    for (int len = 0; len <= e->max_len; len++) {
        int idx[MAXLEN] = {0};
        for (;;) {
            for (int i = 0; i < len; i++) tok_of[at * MAXLEN + i] = (uint8_t)idx[i];
            len_of[at++] = (uint8_t)len;
            int k = 0;
            while (k < len && ++idx[k] == e->n_tok) idx[k++] = 0;
            if (k == len) break;
        }
    }
    const int pl = (int)strlen(e->prefix), sl = (int)strlen(e->suffix);
    char t[CAP], cands[256];
    const int nc = cands_of(e->tok, e->n_tok, cands);
    /* the text of i between prefix and suffix; returns its byte length */
#define BODY(i)                                                \
    ({                                                         \
        int bl_ = pl;                                          \
        memcpy(t, e->prefix, (size_t)pl);                      \
        for (int q_ = 0; q_ < len_of[i]; q_++) {               \
            const char *tk_ = e->tok[tok_of[(i)*MAXLEN + q_]]; \
            memcpy(t + bl_, tk_, strlen(tk_));                 \
            bl_ += (int)strlen(tk_);                           \
        }                                                      \
        bl_ - pl;                                              \
    })
    long n_ok = 0;
    for (long i = 0; i < nt; i++) {
        const int bl = BODY(i);
        if (!(allowed[i] = (uint8_t)ok(t + pl, bl, ud))) continue;
        n_ok++;
        long pi = 0, p = 1; /* every prefix is viable */
        for (int q = 0; q <= len_of[i]; q++) {
            viable[base[q] + pi] = 1;
            if (q < len_of[i]) pi += tok_of[i * MAXLEN + q] * p, p *= e->n_tok;
        }
    }
    int bad = 0;
    for (long i = 0; i < nt && bad < 6; i++) {
        const int bl = BODY(i);
        memcpy(t + pl + bl, e->suffix, (size_t)sl);
        int whole, w2;
        take(s, t, pl + bl + sl, &whole);
        if (whole != allowed[i] && ++bad)
            fprintf(stderr, "  %s: '%.*s' whole %d, oracle %d\n", what, pl + bl + sl, t, whole, allowed[i]);
        const int took = take(s, t, pl + bl, &w2);
        if (viable[i] && took != pl + bl && ++bad)
            fprintf(stderr, "  %s: prefix '%.*s' refused at byte %d, but an allowed text extends it\n", what, pl + bl,
                    t, took);
        if (took == pl + bl) {
            const int cn = complete_with(s, t, pl + bl, CAP - 1, cands, nc);
            if (!cn && ++bad) fprintf(stderr, "  %s: prefix '%.*s' dead-ends\n", what, pl + bl, t);
            const int inner = cn - pl - sl;
            if (cn && !(inner >= 0 && !memcmp(t + cn - sl, e->suffix, (size_t)sl) && ok(t + pl, inner, ud)) && ++bad)
                fprintf(stderr, "  %s: the completion '%.*s' is not allowed\n", what, cn, t);
        }
    }
#undef BODY
    CHECKF(bad == 0, "%s: the recognizer and the oracle disagree", what);
    printf("%s: %ld texts (%ld allowed) agree with the oracle\n", what, nt, n_ok);
    free(tok_of);
    free(len_of);
    free(allowed);
    free(viable);
}

/* ---- numbers ---- */

typedef __int128 i128;

/* Decimal text (digits, at most one point, a sign) in units of 1e-20. */
static int decimal(const char *t, int n, i128 *out) {
    int i = 0, neg = 0, frac = -1, digits = 0;
    i128 v = 0;
    if (i < n && t[i] == '-') neg = 1, i++;
    for (; i < n; i++) {
        if (t[i] == '.' && frac < 0)
            frac = 0;
        else if (t[i] >= '0' && t[i] <= '9' && frac < 20)
            v = v * 10 + (t[i] - '0'), digits++, frac += frac >= 0;
        else
            return 0;
    }
    if (!digits) return 0;
    for (int k = frac < 0 ? 0 : frac; k < 20; k++) v *= 10;
    *out = neg ? -v : v;
    return 1;
}

typedef struct num_oracle {
    int integer;
    i128 lo, hi; /* inclusive */
} num_oracle;

/* A JSON number of the plain decimal form a ranged number has (no
 * exponent; no fraction for an integer; at most 16 decimals), not
 * negative zero, in range. */
static int num_ok(const char *t, int n, void *ud) {
    const num_oracle *o = ud;
    int i = 0, neg = 0;
    if (i < n && t[i] == '-') neg = 1, i++;
    if (i >= n || t[i] < '0' || t[i] > '9') return 0;
    if (t[i] == '0' && i + 1 < n && t[i + 1] >= '0' && t[i + 1] <= '9') return 0; /* a leading zero */
    while (i < n && t[i] >= '0' && t[i] <= '9') i++;
    if (i < n && t[i] == '.') {
        if (o->integer) return 0;
        const int d0 = ++i;
        while (i < n && t[i] >= '0' && t[i] <= '9') i++;
        if (i == d0 || i - d0 > 16) return 0;
    }
    i128 v;
    if (i != n || !decimal(t, n, &v)) return 0;
    if (neg && v == 0) return 0;
    return v >= o->lo && v <= o->hi;
}

static const char *const k_num_tok[] = {"-", "0", "1", "2", "3", "5", "7", "9", "."};

/* lo and hi: the inclusive bounds as decimal text ("0.1000000000000001"). */
static void number_case(const char *schema, int integer, const char *lo, const char *hi, int max_len) {
    sample_schema *s = compile(schema);
    num_oracle o = {integer, 0, 0};
    CHECK(decimal(lo, (int)strlen(lo), &o.lo) && decimal(hi, (int)strlen(hi), &o.hi));
    enum_ctx e = {k_num_tok, (int)(sizeof k_num_tok / sizeof k_num_tok[0]), max_len, "", ""};
    exhaust(s, &e, num_ok, &o, schema);
    sample_schema_free(s);
}

static void test_numbers(void) {
    /* the case: 5..10, never -0 */
    number_case("{\"type\": \"integer\", \"minimum\": 5, \"maximum\": 10}", 1, "5", "10", 4);
    number_case("{\"type\": \"integer\", \"minimum\": -13, \"maximum\": 2}", 1, "-13", "2", 4);
    number_case("{\"type\": \"integer\", \"exclusiveMinimum\": -1, \"exclusiveMaximum\": 71}", 1, "0", "70", 4);
    number_case("{\"type\": \"integer\", \"minimum\": 5, \"exclusiveMinimum\": true, \"maximum\": 7}", 1, "6", "7", 3);
    number_case("{\"type\": \"integer\", \"minimum\": 2.5, \"maximum\": 9.5}", 1, "3", "9", 3);
    number_case("{\"type\": \"number\", \"minimum\": -2.5, \"maximum\": 3.75}", 0, "-2.5", "3.75", 5);
    number_case("{\"type\": \"number\", \"exclusiveMinimum\": 0.1, \"exclusiveMaximum\": 0.3}", 0, "0.1000000000000001",
                "0.2999999999999999", 5);
    number_case("{\"type\": \"number\", \"minimum\": 0, \"maximum\": 10}", 0, "0", "10", 5);
    number_case("{\"type\": \"number\", \"minimum\": -0.5, \"maximum\": -0.25}", 0, "-0.5", "-0.25", 5);
    /* no bounds: +-(2^53 - 1), so at most 16 digits; no -0 */
    sample_schema *i = compile("{\"type\": \"integer\"}");
    expect(i, "9007199254740991", -1, "the largest safe integer");
    expect(i, "-9007199254740991", -1, "the smallest");
    expect(i, "9007199254740992", 15, "one more");
    expect(i, "1234567890123456789012345678901234567890", 16, "40 digits");
    expect(i, "-0", 1, "minus zero");
    expect(i, "0", -1, "zero");
    expect(i, "[1]", 0, "an array");
    sample_schema_free(i);
    sample_schema *pos = compile("{\"type\": \"integer\", \"minimum\": 0}");
    expect(pos, "-1", 0, "no sign below 0");
    expect(pos, "12", -1, "positive");
    sample_schema_free(pos);
    sample_schema *i32 = compile("{\"type\": \"integer\", \"format\": \"int32\"}");
    expect(i32, "2147483647", -1, "int32 max");
    expect(i32, "2147483648", 9, "int32 max + 1");
    expect(i32, "-2147483648", -1, "int32 min");
    sample_schema_free(i32);
    sample_schema *big = compile("{\"type\": \"integer\", \"minimum\": 1e18, \"maximum\": 1.5e18}");
    expect(big, "1000000000000000000", -1, "a bound of 19 digits");
    expect(big, "1500000000000000001", 18, "just above");
    sample_schema_free(big);
    /* a range: plain decimal, 16 digits after the point */
    sample_schema *r = compile("{\"type\": \"number\", \"minimum\": 0, \"maximum\": 1}");
    expect(r, "0.1234567890123456", -1, "16 decimals");
    expect(r, "0.12345678901234567", 18, "17 decimals");
    expect(r, "1e0", 1, "no exponent in a range");
    expect(r, "1.0000000000000001", 17, "above 1 in the last decimal");
    expect(r, "-0.0", 0, "no sign when nothing is below 0");
    sample_schema_free(r);
    sample_schema *tiny = compile("{\"type\": \"number\", \"minimum\": 1e-17}");
    expect(tiny, "0.0000000000000001", -1, "the least number of 16 decimals above 1e-17");
    expect(tiny, "0.0", 3, "not zero");
    sample_schema_free(tiny);
    /* no range: exponents allowed, digits bounded */
    sample_schema *f = compile("{\"type\": \"number\"}");
    expect(f, "-1.5e+300", -1, "an exponent");
    expect(f, "12345678901234567", 16, "17 integer digits");
    expect(f, "1.12345678901234567", 18, "17 decimals");
    expect(f, "1e1234", 5, "a 4-digit exponent");
    sample_schema_free(f);
    sample_schema *in_obj =
        compile("{\"type\": \"object\", \"properties\": {\"n\": {\"type\": \"integer\", \"minimum\": 5, "
                "\"maximum\": 10}}, \"required\": [\"n\"]}");
    expect(in_obj, "{\"n\": 10}", -1, "a ranged integer in an object");
    expect(in_obj, "{\"n\": 1}", 7, "1 ends too early");
    expect(in_obj, "{\"n\": 11}", 7, "11 is too big");
    expect(in_obj, "{\"n\": 7 }", -1, "whitespace ends it");
    sample_schema_free(in_obj);
    refused("{\"type\": \"integer\", \"minimum\": 5, \"maximum\": 4}", "allows no integer");
    refused("{\"type\": \"integer\", \"minimum\": 5.5, \"maximum\": 5.9}", "allows no integer");
    refused("{\"type\": \"number\", \"multipleOf\": 0.5}", "'multipleOf' is not supported");
    refused("{\"type\": \"integer\", \"minimum\": \"3\"}", "'minimum' must be a number");
    sample_schema_free(compile("{\"type\": \"integer\", \"multipleOf\": 1}"));
}

/* ---- strings: pattern and format ---- */

typedef struct str_oracle {
    pcre2_code *re;
    pcre2_match_data *md;
    int min_len, max_len; /* characters, max -1 none */
} str_oracle;

/* t is the inside of a JSON string: valid JSON, its decoded UTF-8 within
 * the lengths and matched by the pattern (a search, as JSON Schema's). */
static int str_ok(const char *t, int n, void *ud) {
    const str_oracle *o = ud;
    char buf[1200];
    if (n + 2 > (int)sizeof buf) return 0;
    buf[0] = '"';
    memcpy(buf + 1, t, (size_t)n);
    buf[n + 1] = '"';
    json_t *j = json_loadb(buf, (size_t)n + 2, JSON_DECODE_ANY | JSON_ALLOW_NUL, NULL);
    if (!json_is_string(j)) {
        json_decref(j);
        return 0;
    }
    const char *v = json_string_value(j);
    const size_t len = json_string_length(j);
    int chars = 0;
    for (size_t i = 0; i < len; i++) chars += ((unsigned char)v[i] & 0xC0) != 0x80;
    int fine = chars >= o->min_len && (o->max_len < 0 || chars <= o->max_len) &&
               (!o->re || pcre2_match(o->re, (PCRE2_SPTR)v, len, 0, 0, o->md, NULL) >= 0);
    json_decref(j);
    return fine;
}

/* Compares the string schema of pattern pat (and lengths) with PCRE2 over
 * texts of up to max_len tokens. */
static void pattern_case(const char *pat, int min_len, int max_len, const char *const *tok, int n_tok, int depth) {
    json_t *sch = json_pack("{s:s,s:s}", "type", "string", "pattern", pat);
    if (min_len > 0) json_object_set_new(sch, "minLength", json_integer(min_len));
    if (max_len >= 0) json_object_set_new(sch, "maxLength", json_integer(max_len));
    char err[256] = "";
    sample_schema *s = sample_schema_compile(sch, err, sizeof err);
    CHECKF(s != NULL, "pattern %s refused: %s", pat, err);
    int ec;
    PCRE2_SIZE eo;
    str_oracle o = {pcre2_compile((PCRE2_SPTR)pat, PCRE2_ZERO_TERMINATED,
                                  PCRE2_UTF | PCRE2_DOLLAR_ENDONLY | PCRE2_ALT_BSUX | PCRE2_ALLOW_EMPTY_CLASS, &ec, &eo,
                                  NULL),
                    NULL, min_len, max_len};
    CHECKF(o.re != NULL, "PCRE2 does not take %s", pat);
    o.md = pcre2_match_data_create(4, NULL);
    char what[200];
    snprintf(what, sizeof what, "pattern %s, length %d..%d", pat, min_len, max_len);
    enum_ctx e = {tok, n_tok, depth, "\"", "\""};
    if (s && o.re) exhaust(s, &e, str_ok, &o, what);
    pcre2_match_data_free(o.md);
    pcre2_code_free(o.re);
    sample_schema_free(s);
    json_decref(sch);
}

static void test_patterns(void) {
    static const char *const ab[] = {"a", "b", "c", "-", "\\n", "\\\"", "\\u0061", "\xc3\xa9"};
    const int nab = (int)(sizeof ab / sizeof ab[0]);
    const char *const pats[] = {
        "^[a-c]{2,3}$",
        "^(ab|a)*c?$",
        "abc",
        "b.a",
        "^(?:a|bc)+$",
        "^[^a]+$",
        "-$",
        "^a|b$",
        "^$",
        "c",
        "^\\d*$",
        "^[\\w-]{1,3}$",
        "^\\n\"?$",
        "^(?<x>a)(b)?$",
        "^(a|\xc3\xa9)+?$",
        "^\\u00e9$",
        "^[^\\n]*$",
        "^a{0,2}b{1,}$",
    };
    for (size_t i = 0; i < sizeof pats / sizeof pats[0]; i++) pattern_case(pats[i], 0, -1, ab, nab, 4);
    /* lengths with a pattern, folded into its DFA: only the lengths the
     * pattern has within the bounds (aa, aaaa: never a dead end at aaa) */
    pattern_case("^(aa)+$", 3, 5, ab, nab, 5);
    pattern_case("^[ab]*c$", 2, 3, ab, nab, 4);
    pattern_case("b", 1, 2, ab, nab, 4);
    /* raw control characters and escapes of non-ASCII characters are
     * refused where a pattern holds the string (é is written raw) */
    sample_schema *e = compile("{\"type\": \"string\", \"pattern\": \"^\\u00e9\\n$\"}");
    expect(e, "\"\xc3\xa9\\n\"", -1, "raw UTF-8 and a short escape");
    expect(e, "\"\xc3\xa9\\u000a\"", -1, "\\u000a for the line break");
    expect(e, "\"\\u00e9\\n\"", 1, "no escape stands for é");
    expect(e, "\"\xc3\xa9\n\"", 3, "a raw line break is no JSON");
    expect(e, "\"\xc3\xa9\\u0080\"", 7, "\\u0080: beyond ASCII");
    sample_schema_free(e);
    /* a pattern that cannot fit its lengths, and what the dialect lacks */
    refused("{\"type\": \"string\", \"pattern\": \"^a{5}$\", \"maxLength\": 3}", "no string of the pattern");
    refused("{\"type\": \"string\", \"pattern\": \"^(aa)+$\", \"minLength\": 3, \"maxLength\": 3}",
            "no string of the pattern");
    refused("{\"type\": \"string\", \"pattern\": \"(?=a)b\"}", "lookahead");
    refused("{\"type\": \"string\", \"pattern\": \"(a)\\\\1\"}", "backreferences");
    refused("{\"type\": \"string\", \"pattern\": \"\\\\bword\"}", "word boundaries");
    refused("{\"type\": \"string\", \"pattern\": \"\\\\p{L}\"}", "Unicode property");
    refused("{\"type\": \"string\", \"pattern\": \"a(b\"}", "without its ')'");
    refused("{\"type\": \"string\", \"pattern\": \"[z-a]\"}", "out of order");
    refused("{\"type\": \"string\", \"pattern\": \"a**\"}", "nothing to repeat");
    refused("{\"type\": \"string\", \"pattern\": \"a^b\"}", "matches no string");
    refused("{\"type\": \"string\", \"pattern\": \"[ab]*a[ab]{13}\"}", "too complex");
    /* random patterns: a DFA or a message, never a crash (ASan checks the
     * memory); where PCRE2 takes the pattern too and it uses no syntax the
     * dialects read differently, both agree on a few texts */
    uint64_t x = 7;
    const char sym[] = "ab()[]{}|*+?^$.-,01\\dw";
    int n_dfa = 0;
    for (int i = 0; i < 3000; i++) {
        char pat[16];
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        const int len = 1 + (int)((x >> 60) % 10);
        for (int k = 0; k < len; k++) {
            x = x * 6364136223846793005ull + 1442695040888963407ull;
            pat[k] = sym[(x >> 33) % (sizeof sym - 1)];
        }
        pat[len] = 0;
        char msg[160] = "";
        sample_re *r = sample_re_compile(pat, (size_t)len, msg, sizeof msg);
        CHECKF(r || msg[0], "pattern '%s': neither a DFA nor a message", pat);
        if (!r) continue;
        n_dfa++;
        int ec;
        PCRE2_SIZE eo;
        pcre2_code *re = strpbrk(pat, "{}") ? NULL
                                            : pcre2_compile((PCRE2_SPTR)pat, (size_t)len,
                                                            PCRE2_UTF | PCRE2_DOLLAR_ENDONLY | PCRE2_ALLOW_EMPTY_CLASS,
                                                            &ec, &eo, NULL);
        if (re) {
            pcre2_match_data *md = pcre2_match_data_create(4, NULL);
            const char *texts[] = {"", "a", "b", "ab", "ba", "a-b", "01", "aab", "(", "{1}", "-", "a.b"};
            for (size_t k = 0; k < sizeof texts / sizeof texts[0]; k++) {
                const char *t = texts[k];
                int st = r->start;
                for (const char *c = t; *c && st >= 0; c++) st = sample_re_step(r, st, (unsigned char)*c);
                const int mine = st >= 0 && r->accept[st];
                const int theirs = pcre2_match(re, (PCRE2_SPTR)t, strlen(t), 0, 0, md, NULL) >= 0;
                CHECKF(mine == theirs, "pattern '%s' on '%s': %d, PCRE2 %d", pat, t, mine, theirs);
            }
            pcre2_match_data_free(md);
            pcre2_code_free(re);
        }
        sample_re_free(r);
    }
    printf("random patterns: %d of 3000 compiled\n", n_dfa);
}

/* Texts of a format: each allowed whole, each refused one refused at the
 * byte given (-2: taken to its end but not complete). */
typedef struct fcase {
    const char *text;
    int stop;
} fcase;

static void format_case(const char *fmt, const fcase *c, int n) {
    char src[128];
    snprintf(src, sizeof src, "{\"type\": \"string\", \"format\": \"%s\"}", fmt);
    sample_schema *s = compile(src);
    for (int i = 0; i < n; i++) {
        char t[256], what[64];
        snprintf(t, sizeof t, "\"%s\"", c[i].text);
        snprintf(what, sizeof what, "format %s", fmt);
        if (c[i].stop == -2)
            partial(s, t, what);
        else if (c[i].stop == -3)
            expect(s, t, (int)strlen(t) - 1, what); /* all taken but the closing quote */
        else
            expect(s, t, c[i].stop < 0 ? -1 : c[i].stop + 1, what);
        /* every prefix of an allowed text completes */
        if (c[i].stop == -1)
            for (int k = 1; k < (int)strlen(t); k++) {
                char u[600];
                memcpy(u, t, (size_t)k);
                CHECKF(no_dead_end(s, u, k), "format %s: '%.*s' dead-ends", fmt, k, t);
            }
    }
    sample_schema_free(s);
}

static void test_formats(void) {
    const fcase date[] = {{"2024-02-29", -1}, {"2000-02-29", -1}, {"1999-12-31", -1}, {"0000-02-29", -1},
                          {"2023-02-29", 9},  {"1900-02-29", 9},  {"2024-13-01", 6},  {"2024-04-31", 9},
                          {"2024-4-01", 5},   {"2024-02-2", -3}};
    format_case("date", date, (int)(sizeof date / sizeof date[0]));
    const fcase time[] = {
        {"23:59:60Z", -1}, {"12:00:00.123456789+05:30", -1}, {"00:00:00z", -1},     {"24:00:00Z", 1}, {"12:60:00Z", 3},
        {"12:00:00", -3},  {"12:00:00.1234567890Z", 18},     {"12:00:00+24:00", 10}};
    format_case("time", time, (int)(sizeof time / sizeof time[0]));
    const fcase dt[] = {
        {"2024-01-01T00:00:00Z", -1}, {"2024-01-01t10:20:30.5-08:00", -1}, {"2024-01-01 00:00:00Z", 10}};
    format_case("date-time", dt, (int)(sizeof dt / sizeof dt[0]));
    const fcase uuid[] = {{"123e4567-e89b-12d3-a456-426614174000", -1},
                          {"123E4567-E89B-12D3-A456-426614174000", -1},
                          {"123e4567e89b", 8},
                          {"123e4567-e89b-12d3-a456-42661417400", -3},
                          {"g23e4567", 0}};
    format_case("uuid", uuid, (int)(sizeof uuid / sizeof uuid[0]));
    const fcase email[] = {{"a.b+c@example.com", -1},
                           {"x@sub.example.org", -1},
                           {"a..b@x.com", 2},
                           {"@x.com", 0},
                           {"a@b", -3},
                           {"a@b.1c", -3},
                           {"a@b.c1", -1},
                           {"a@-b.com", 2},
                           {"a b@x.com", 1}};
    format_case("email", email, (int)(sizeof email / sizeof email[0]));
    const fcase ip[] = {{"255.255.255.255", -1}, {"0.0.0.0", -1}, {"10.1.2.3", -1}, {"256.1.1.1", 2},
                        {"01.2.3.4", 1},         {"1.2.3", -3},   {"1.2.3.4.5", 7}};
    format_case("ipv4", ip, (int)(sizeof ip / sizeof ip[0]));
    const fcase host2[] = {{"example.com", -1}, {"a-b.c", -1}, {"localhost", -1}, {"-a.com", 0}, {"a..b", 2}};
    format_case("hostname", host2, (int)(sizeof host2 / sizeof host2[0]));
    /* a label of 63 characters, not 64; 253 characters in all */
    char longl[200] = "\"", *p = longl + 1;
    for (int i = 0; i < 64; i++) *p++ = 'a';
    strcpy(p, ".com\"");
    sample_schema *h = compile("{\"type\": \"string\", \"format\": \"hostname\"}");
    expect(h, longl, 64, "a 64-character label");
    sample_schema_free(h);
    /* pattern and format together: both hold */
    sample_schema *both = compile("{\"type\": \"string\", \"format\": \"date\", \"pattern\": \"^2024-\"}");
    expect(both, "\"2024-05-01\"", -1, "date and pattern");
    expect(both, "\"2023-05-01\"", 4, "the date, not the pattern");
    expect(both, "\"2024-02-30\"", 9, "the pattern, not the date");
    sample_schema_free(both);
    /* format with lengths */
    sample_schema *ml = compile("{\"type\": \"string\", \"format\": \"ipv4\", \"maxLength\": 7}");
    expect(ml, "\"1.2.3.4\"", -1, "7 characters");
    expect(ml, "\"1.2.3.45\"", 8, "8 characters");
    expect(ml, "\"10.2.3.4\"", 2, "10 leaves no room for three more numbers");
    sample_schema_free(ml);
    refused("{\"type\": \"string\", \"format\": \"uri\"}", "format 'uri' is not supported");
    refused("{\"type\": \"string\", \"format\": \"uuid\", \"maxLength\": 10}", "no string of the pattern");
}

/* ---- keywords ---- */

/* ---- schemas and texts ---- */

enum { WHOLE = -1, PARTIAL = -2 };

/* A text fed to a schema's recognizer: accepted whole (WHOLE), accepted to
 * its end but not yet a whole value (PARTIAL), or refused at byte stop. */
typedef struct text_case {
    const char *text;
    int stop;
    const char *what;
} text_case;

typedef struct schema_case {
    const char *schema;  /* NULL: any JSON value (the JSON mode) */
    text_case texts[24]; /* up to the first with no text */
} schema_case;

/* A schema the recognizer cannot honour, and a part of the message that
 * must name why. */
typedef struct refusal {
    const char *schema, *msg;
} refusal;

static void run_schemas(const schema_case *t, size_t n) {
    for (size_t i = 0; i < n; i++) {
        sample_schema *s = t[i].schema ? compile(t[i].schema) : sample_schema_compile(NULL, NULL, 0);
        CHECKF(s != NULL, "schema %s", t[i].schema ? t[i].schema : "(any)");
        if (!s) continue;
        for (const text_case *c = t[i].texts; c->text; c++) {
            if (c->stop == PARTIAL)
                partial(s, c->text, c->what);
            else
                expect(s, c->text, c->stop, c->what);
        }
        sample_schema_free(s);
    }
}

static void run_refusals(const refusal *t, size_t n) {
    for (size_t i = 0; i < n; i++) refused(t[i].schema, t[i].msg);
}

#define N_OF(a) (sizeof(a) / sizeof((a)[0]))

/* values: the JSON mode, objects, enum and const, unions, strings, $ref */
static const schema_case k_values[] = {
    /* any JSON value (the JSON mode) */
    {NULL,
     {{"{\"a\": [1, -2.5e+3, \"x\\n\\u00e9\", true, null, {}], \"b\": {\"c\": false}}", WHOLE, "any"},
      {" [ ] ", WHOLE, "any, a space around"},
      {"12", WHOLE, "a top-level number is whole at the end"},
      {"-", PARTIAL, "a lone minus"},
      {"{\"a\":1", PARTIAL, "an open object"},
      {"{\"a\" 1}", 5, "no colon"},
      {"[1,]", 3, "a trailing comma"},
      {"01", 1, "a leading zero"},
      {"tru ", 3, "a cut literal"},
      {"\"a\\x\"", 3, "a bad escape"},
      {"\"\\ n\"", 2, "a space is no escape"},
      {"{\"k\\u00 1\": 1}", 7, "nor a hex digit"},
      {"\"a b\\t\"", WHOLE, "spaces in a string"},
      {"{}}", 2, "after the value only whitespace"},
      {"[\n                    1]", WHOLE, "a line break and 20 spaces"},
      {"[\n                     1]", 22, "not 21"},
      {"{\n  \"a\":\n\t1\n}", WHOLE, "indented lines"},
      {"[1,\n\n2]", 4, "not two line breaks"},
      {"[1,  2]", 4, "not two spaces"},
      {"[1, \n2]", 4, "not a space before the line break"}}},
    /* an object: properties in order, required ones present */
    {"{\"type\": \"object\", \"properties\": {\"name\": {\"type\": \"string\"}, \"age\": {\"type\": \"integer\"},"
     " \"tags\": {\"type\": \"array\", \"items\": {\"type\": \"string\"}, \"maxItems\": 2}},"
     " \"required\": [\"name\", \"age\"]}",
     {{"{\"name\": \"Bo\", \"age\": 7}", WHOLE, "required properties"},
      {"{ \"name\":\"Bo\",\"age\":-7,\"tags\":[\"a\",\"b\"] }", WHOLE, "with the optional one"},
      {"{\"age\": 7", 2, "a required property skipped"},
      {"{\"name\": \"Bo\"}", 13, "a required property missing"},
      {"{\"name\": \"Bo\", \"age\": 7.5}", 23, "a fraction in an integer"},
      {"{\"name\": \"Bo\", \"age\": 7, \"tags\": [\"a\", \"b\", \"c\"]}", 42, "more items than maxItems"},
      {"{\"nam\": 1}", 5, "a key that is not a property"},
      {"{\"name\": 5}", 9, "a number for a string"},
      {"[]", 0, "an array for an object"},
      {"{\"name\": \"Bo\", \"age\": 7", PARTIAL, "no closing brace yet"}}},
    /* optional properties may be skipped, but order holds */
    {"{\"properties\": {\"a\": {\"type\": \"boolean\"}, \"b\": {\"type\": \"null\"}, "
     "\"c\": {\"type\": \"number\"}}, \"required\": [\"c\"]}",
     {{"{\"c\": 1}", WHOLE, "optional ones left out"},
      {"{\"b\": null, \"c\": 0.5}", WHOLE, "one optional one"},
      {"{\"c\": 1, \"a\": true}", 7, "out of order: nothing may follow the last one"},
      {"{\"a\": true, \"a\": true}", 13, "a key twice"}}},
    /* enum and const: the compact JSON texts */
    {"{\"enum\": [\"red\", \"green\", 3, 31, null, [1, 2]]}",
     {{"\"green\"", WHOLE, "a string enum value"},
      {"3", WHOLE, "a number that is a prefix of another"},
      {"31", WHOLE, "the longer one"},
      {"null", WHOLE, "null"},
      {"[1,2]", WHOLE, "an array value, compact"},
      {"\"blue\"", 1, "a string not in the enum"},
      {"4", 0, "a number not in the enum"},
      {"[1, 2]", 3, "spaces the compact text does not have"},
      {"\"gre", PARTIAL, "an enum string cut short"}}},
    {"{\"type\": \"object\", \"properties\": {\"kind\": {\"const\": \"point\"}}, "
     "\"required\": [\"kind\"]}",
     {{"{\"kind\": \"point\"}", WHOLE, "const"}, {"{\"kind\": \"line\"}", 10, "not the const"}}},
    /* unions told apart by their first byte */
    {"{\"anyOf\": [{\"type\": \"string\"}, {\"type\": \"integer\"}, "
     "{\"type\": \"array\", \"items\": {\"type\": \"boolean\"}, \"minItems\": 1}]}",
     {{"\"x\"", WHOLE, "anyOf: the string"},
      {"-5", WHOLE, "anyOf: the integer"},
      {"[true, false]", WHOLE, "anyOf: the array"},
      {"[]", 1, "anyOf: minItems"},
      {"true", 0, "anyOf: none of them"}}},
    {"{\"type\": [\"string\", \"null\"]}",
     {{"null", WHOLE, "a type list"}, {"\"s\"", WHOLE, "a type list"}, {"1", 0, "a type list"}}},
    {"{\"anyOf\": [{\"type\": [\"string\", \"null\"]}, {\"type\": \"integer\"}]}",
     {{"null", WHOLE, "a union inside a union"},
      {"7", WHOLE, "a union inside a union"},
      {"true", 0, "a union inside a union"}}},
    {"{\"$defs\": {\"n\": {\"type\": \"object\", \"properties\": {\"next\": {\"anyOf\": "
     "[{\"$ref\": \"#/$defs/n\"}, {\"type\": \"null\"}]}}, \"required\": [\"next\"]}}, "
     "\"$ref\": \"#/$defs/n\"}",
     {{"{\"next\": {\"next\": null}}", WHOLE, "a $ref back through anyOf"},
      {"{\"next\": 1}", 9, "a $ref back through anyOf"}}},
    /* string lengths in characters: a UTF-8 character or an escape is one */
    {"{\"type\": \"string\", \"minLength\": 2, \"maxLength\": 3}",
     {{"\"ab\"", WHOLE, "2 characters"},
      {"\"a\"", 2, "under minLength"},
      {"\"abcd\"", 4, "over maxLength"},
      {"\"\xc3\xa9\\u00e9x\"", WHOLE, "a 2-byte character, an escape and a letter: 3"},
      {"\"\\n\\t\\\\\\\"\"", 7, "4 escapes: the fourth is over"}}},
    /* $ref into $defs, recursive; additionalProperties as a schema */
    {"{\"$defs\": {\"node\": {\"type\": \"object\", \"properties\": {\"v\": {\"type\": \"integer\"}, "
     "\"kids\": {\"type\": \"array\", \"items\": {\"$ref\": \"#/$defs/node\"}}}, \"required\": [\"v\"]}}, "
     "\"$ref\": \"#/$defs/node\"}",
     {{"{\"v\": 1, \"kids\": [{\"v\": 2}, {\"v\": 3, \"kids\": []}]}", WHOLE, "a recursive $ref"},
      {"{\"v\": 1, \"kids\": [{\"kids\": []}]}", 20, "a required property deep down"}}},
    {"{\"type\": \"object\", \"additionalProperties\": {\"type\": \"number\"}}",
     {{"{\"x\": 1, \"y z\": 2e5}", WHOLE, "any keys, number values"},
      {"{\"x\": \"s\"}", 6, "a string for a number value"}}},
};

/* what the recognizer cannot honour is refused, never loosened */
static const refusal k_values_refused[] = {
    /* what the recognizer cannot honour is refused, never loosened */
    {"{\"anyOf\": [{\"type\": \"object\"}, {\"type\": \"object\", \"properties\": {\"a\": {}}}]}", "begin alike"},
    {"{\"type\": [\"number\", \"integer\"]}", "begin alike"},
    {"{\"type\": \"array\", \"items\": [{\"type\": \"string\"}]}", "tuple"},
    {"{\"type\": \"strin\"}", "unknown type 'strin'"},
    {"{\"properties\": {\"a\": {}}, \"required\": [\"b\"]}", "'b' is not among the properties"},
    {"{\"$ref\": \"#/$defs/none\"}", "does not point into this schema"},
    {"{\"allOf\": [{}, {}]}", "exactly one"},
    {"{\"enum\": []}", "allows nothing"},
    {"false", "allows nothing"},
};

/* keywords: constraints kiln cannot enforce are named, never dropped;
 * what is redundant or only annotates passes */
static const schema_case k_keywords[] = {
    /* keywords without "type" imply it */
    {"{\"minimum\": 1, \"maximum\": 3}", {{"2", WHOLE, "minimum implies a number"}, {"\"2\"", 0, "not a string"}}},
    {"{\"maxLength\": 2}", {{"\"ab\"", WHOLE, "maxLength implies a string"}, {"\"abc\"", 3, "over it"}}},
    /* an object with no properties and no others is {} */
    {"{\"type\": \"object\", \"additionalProperties\": false}",
     {{"{}", WHOLE, "the empty object"}, {"{\"a\": 1}", 1, "no key"}}},
    /* enum and const with the rest of the schema: values it refuses go */
    {"{\"type\": \"string\", \"enum\": [\"ab\", \"abc\", 3, \"b\"], \"maxLength\": 2}",
     {{"\"ab\"", WHOLE, "an enum value within maxLength"},
      {"\"abc\"", 3, "an enum value over maxLength"},
      {"3", 0, "an enum value of another type"},
      {"\"b\"", WHOLE, "another"}}},
    {"{\"enum\": [1, 2, 3], \"const\": 2}", {{"2", WHOLE, "const among the enum values"}, {"1", 0, "the others go"}}},
    {"{\"$defs\": {\"Color\": {\"enum\": [\"red\", \"green\"], \"title\": \"Color\", "
     "\"type\": \"string\"}}, \"type\": \"object\", \"properties\": {\"c\": {\"$ref\": "
     "\"#/$defs/Color\", \"description\": \"a color\"}}, \"required\": [\"c\"]}",
     {{"{\"c\": \"green\"}", WHOLE, "an enum by $ref beside a description"}}},
};

static const refusal k_keywords_refused[] = {
    /* constraints kiln cannot enforce are named, never dropped */
    {"{\"not\": {\"type\": \"string\"}}", "'not' is not supported"},
    {"{\"type\": \"object\", \"if\": {}, \"then\": {}}", "'if' is not supported"},
    {"{\"type\": \"array\", \"contains\": {\"type\": \"integer\"}}", "'contains' is not supported"},
    {"{\"type\": \"array\", \"uniqueItems\": true}", "'uniqueItems' is not supported"},
    {"{\"type\": \"object\", \"patternProperties\": {\"^a\": {}}}", "'patternProperties' is not supported"},
    {"{\"type\": \"object\", \"propertyNames\": {\"maxLength\": 3}}", "'propertyNames' is not supported"},
    {"{\"type\": \"object\", \"minProperties\": 1}", "minProperties"},
    {"{\"type\": \"object\", \"required\": [\"a\"]}", "'a' is not among the properties"},
    {"{\"type\": \"object\", \"anyOf\": [{\"required\": [\"a\"]}, {\"required\": [\"b\"]}]}", "'anyOf' beside 'type'"},
    {"{\"$defs\": {\"a\": {\"type\": \"string\"}}, \"$ref\": \"#/$defs/a\", \"maxLength\": 3}",
     "'$ref' beside 'maxLength'"},
    {"{\"allOf\": [{\"type\": \"string\"}], \"minLength\": 2}", "'allOf' beside 'minLength'"},
    {"{\"minLength\": 2, \"minimum\": 3}", "several types"},
    {"{\"enum\": [\"a\", \"b\"], \"minLength\": 2}", "no 'enum' / 'const' value"},
    {"{\"enum\": [1, 2], \"const\": 3}", "not among the 'enum' values"},
};

static const char *const k_keywords_pass[] = {
    /* what is redundant or only annotates passes */
    "{\"type\": \"array\", \"uniqueItems\": false, \"title\": \"t\", \"x-extra\": 1}",
    "{\"type\": \"object\", \"properties\": {\"a\": {}}, \"required\": [\"a\"], "
    "\"minProperties\": 1, \"maxProperties\": 1, \"unevaluatedProperties\": false}",
    "{\"anyOf\": [{\"type\": \"integer\"}, {\"type\": \"null\"}], \"default\": null, "
    "\"title\": \"Count\", \"description\": \"how many\"}",
};

static void test_keywords(void) {
    run_schemas(k_keywords, N_OF(k_keywords));
    run_refusals(k_keywords_refused, N_OF(k_keywords_refused));
    for (size_t i = 0; i < N_OF(k_keywords_pass); i++) sample_schema_free(compile(k_keywords_pass[i]));
}

/* ---- a forced tool call (src/sample/call.c) ---- */

/* Bytes of text the call constraint takes; *whole: whether it is done. */
static int call_feed(const sample_schema *const *schemas, const char *const *names, int n, int think, const char *text,
                     int *whole) {
    sample_call k;
    CHECK(sample_call_init(&k, names, schemas, n, think) == 0);
    sample_constraint c;
    sample_call_constraint(&c, &k);
    const int len = (int)strlen(text);
    int i = 0;
    for (; i < len; i++) {
        if (!c.allows(c.state, text + i, 1)) break;
        c.accept(c.state, text + i, 1);
    }
    *whole = i == len && c.complete(c.state) && c.done(c.state);
    return i;
}

static void call_expect(const sample_schema *const *schemas, const char *const *names, int n, int think,
                        const char *text, int stop, const char *what) {
    int whole;
    const int got = call_feed(schemas, names, n, think, text, &whole);
    if (stop < 0)
        CHECKF(got == (int)strlen(text) && whole, "%s: stopped at byte %d (whole %d) of '%s'", what, got, whole, text);
    else
        CHECKF(got == stop, "%s: stopped at byte %d, not %d, of '%s'", what, got, stop, text);
}

/* The other families' forms (sample_call_form): each accepts its call
 * whole for either tool, with reasoning first where asked, and nothing
 * after it. */
static void test_call_forms(void) {
    sample_schema *weather = compile("{\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\"}}, "
                                     "\"required\": [\"city\"]}");
    const sample_schema *schemas[] = {weather, NULL};
    const char *names[] = {"get_weather", "get_time"};
    static const struct {
        sample_call_form f;
        const char *text;
    } cases[] = {
        {{"", "{\"name\": \"", "\", \"parameters\": ", "}", ""},
         "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}"},
        {{"[TOOL_CALLS]", "", "[ARGS]", "", ""}, "[TOOL_CALLS]get_time[ARGS]{}"},
        {{"[TOOL_CALLS]", "[{\"name\": \"", "\", \"arguments\": ", "}]", ""},
         "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}]"},
        {{"<B><C>function<S>", "", "\n```json\n", "```<E>", "<EE>"},
         "<B><C>function<S>get_weather\n```json\n{\"city\": \"Paris\"}\n```<E><EE>"},
        {{"<TOOLCALL>", "[{\"name\": \"", "\", \"arguments\": ", "}]", "</TOOLCALL>"},
         "<TOOLCALL>[{\"name\": \"get_time\", \"arguments\": {\"tz\": 1} }]</TOOLCALL>"},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
        for (int think = 0; think <= 1; think++) {
            char text[256];
            snprintf(text, sizeof text, "%s%s", think ? "<think>hm</think>\n" : "", cases[c].text);
            sample_call k;
            CHECK(sample_call_init_form(&k, &cases[c].f, names, schemas, 2, think) == 0);
            sample_constraint con;
            sample_call_constraint(&con, &k);
            int i = 0;
            const int len = (int)strlen(text);
            for (; i < len && con.allows(con.state, text + i, 1); i++) con.accept(con.state, text + i, 1);
            CHECKF(i == len && con.complete(con.state) && !con.allows(con.state, "x", 1) &&
                       !con.allows(con.state, " ", 1) && sample_call_name(&k),
                   "form %zu (think %d): stopped at byte %d of '%s'", c, think, i, text);
        }
    /* a name may not hold the byte that ends it */
    sample_call k;
    const char *bracket[] = {"a[b"};
    static const sample_call_form mistral = {"[TOOL_CALLS]", "", "[ARGS]", "", ""};
    CHECK(sample_call_init_form(&k, &mistral, bracket, schemas, 1, 0) != 0);
    sample_schema_free(weather);
}

static void test_call(void) {
    sample_schema *weather = compile("{\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\"}, "
                                     "\"unit\": {\"enum\": [\"celsius\", \"fahrenheit\"]}}, \"required\": [\"city\"]}");
    sample_schema *clock = compile("{\"type\": \"object\", \"properties\": {\"tz\": {\"type\": \"string\"}}, "
                                   "\"required\": [\"tz\"]}");
    const sample_schema *schemas[] = {weather, clock};
    const char *names[] = {"get_weather", "get_time"};
    const char *w = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": "
                    "\"celsius\"}}\n</tool_call>";
    call_expect(schemas, names, 2, 0, w, -1, "the Hermes form");
    call_expect(schemas, names, 2, 0,
                "<tool_call>{\"name\": \"get_time\", \"arguments\": {\"tz\": \"UTC\"}}</tool_call>", -1,
                "another tool, no line breaks");
    call_expect(schemas, names, 2, 0,
                "\n<tool_call>{\"name\": \"get_time\", \"arguments\": {\"tz\": \"UTC\"} }</tool_call>", -1,
                "a line break first, a space before the closing brace");
    /* one name only: a named tool_choice */
    call_expect(schemas + 1, names + 1, 1, 0, w, 26, "not the named tool");
    call_expect(schemas, names, 2, 0, "<tool_call>{\"name\": \"get_wind\"", 26, "no such tool");
    call_expect(schemas, names, 2, 0, "<tool_call>{\"name\": \"get_time\", \"arguments\": {\"city\": 1}}", 47,
                "the arguments follow the named tool's schema");
    call_expect(schemas, names, 2, 0, "<tool_call>{\"name\": \"get_time\", \"arguments\": {}}", 46,
                "a required argument");
    call_expect(schemas, names, 2, 0, "Sure! <tool_call>", 0, "no text before the call");
    call_expect(schemas, names, 2, 0, "<tool_call>{\"name\": \"get_time\", \"arguments\": {\n", 46,
                "the arguments on one line");
    call_expect(schemas, names, 2, 0, "<tool_call>{\"name\": \"get_time\", \"arguments\": {\"tz\":  ", 52,
                "one space between tokens");
    call_expect(schemas, names, 2, 0,
                "<tool_call>{\"name\": \"get_time\", \"arguments\": {\"tz\": \"a  \\n b\"}}</tool_call>", -1,
                "spaces inside a string are its text");
    call_expect(schemas, names, 2, 0, "<think>hm</think>", 2, "no reasoning unless the model has it");
    call_expect(schemas, names, 2, 0, "   <tool_call>", 2, "at most two whitespace bytes");
    const char *tail = "<tool_call>{\"name\": \"get_time\", \"arguments\": {\"tz\": \"UTC\"}}</tool_call>";
    char buf[512];
    snprintf(buf, sizeof buf, "%s ", tail);
    call_expect(schemas, names, 2, 0, buf, (int)strlen(tail), "nothing after the call");
    /* reasoning first, when the template has it; "</think>" may be
     * preceded by a partial match */
    snprintf(buf, sizeof buf, "<think>I should look < up </th the time.</think>\n\n%s", tail);
    call_expect(schemas, names, 2, 1, buf, -1, "a reasoning block first");
    call_expect(schemas, names, 2, 1, tail, -1, "or none");
    snprintf(buf, sizeof buf, "the time.</think>\n%s", tail);
    call_expect(schemas, names, 2, 2, buf, -1, "the prompt opened the block");
    call_expect(schemas, names, 2, 1, "<think>x</think><think>", 18, "one block only");
    /* a token may cross from one part into the next */
    sample_call k;
    CHECK(sample_call_init(&k, names, schemas, 2, 0) == 0);
    sample_constraint c;
    sample_call_constraint(&c, &k);
    const char *toks[] = {"<tool_call>{\"name\": \"get_", "time\", \"arguments\": {\"tz", "\": \"UTC\"}}</tool",
                          "_call>"};
    for (int i = 0; i < 4; i++) {
        CHECKF(c.allows(c.state, toks[i], (int)strlen(toks[i])), "token %d", i);
        CHECK(!c.complete(c.state));
        c.accept(c.state, toks[i], (int)strlen(toks[i]));
    }
    CHECK(c.complete(c.state) && c.done(c.state) && !strcmp(sample_call_name(&k), "get_time"));
    CHECK(!c.allows(c.state, "\n", 1));
    /* names it cannot write as they are, repeated or none */
    const char *badn[] = {"a\"b", "ok"};
    CHECK(sample_call_init(&k, badn, schemas, 2, 0) != 0);
    const char *twice[] = {"same", "same"};
    CHECK(sample_call_init(&k, twice, schemas, 2, 0) != 0);
    CHECK(sample_call_init(&k, names, schemas, 0, 0) != 0);
    sample_schema_free(weather);
    sample_schema_free(clock);
}

/* ---- depth: the recognizer's stack and values that cannot end ---- */

/* src repeated n times, then tail, in a buffer of the caller's (cap bytes). */
static char *repeat(char *buf, size_t cap, const char *src, int n, const char *tail) {
    size_t len = 0;
    for (int i = 0; i < n; i++) {
        CHECK(len + strlen(src) < cap);
        memcpy(buf + len, src, strlen(src));
        len += strlen(src);
    }
    CHECK(len + strlen(tail) < cap);
    memcpy(buf + len, tail, strlen(tail) + 1);
    return buf;
}

/* Every prefix of text the recognizer takes leaves some byte to follow, or
 * is complete. */
static void no_dead_ends(const sample_schema *s, const char *text, const char *what) {
    const int n = (int)strlen(text);
    sample_sv v;
    sample_sv_init(&v, s);
    for (int i = 0; i < n && sample_sv_byte(&v, (unsigned char)text[i]); i++) {
        int any = sample_sv_complete(&v);
        for (int b = 0; b < 256 && !any; b++) {
            const char ch = (char)b;
            any = sample_sv_accepts(&v, &ch, 1);
        }
        CHECKF(any, "%s: a dead end after byte %d of '%s'", what, i, text);
        if (!any) return;
    }
}

/* Objects nested n deep, each requiring "a", around a string: n + 1 frames. */
static char *nested_objects(char *buf, size_t cap, int n) {
    char tail[64];
    snprintf(tail, sizeof tail, "{\"type\": \"string\"}%s", "");
    size_t len = 0;
    for (int i = 0; i < n; i++)
        len += (size_t)snprintf(buf + len, cap - len,
                                "{\"type\": \"object\", \"required\": [\"a\"], \"properties\": "
                                "{\"a\": ");
    len += (size_t)snprintf(buf + len, cap - len, "%s", tail);
    for (int i = 0; i < n; i++) len += (size_t)snprintf(buf + len, cap - len, "}}");
    CHECK(len < cap);
    return buf;
}

static void test_depth(void) {
    static char sch[16384], txt[4096];
    /* SAMPLE_SV_DEPTH frames: the deepest value is taken byte by byte to its
     * end; one frame more is refused when compiling */
    sample_schema *s = compile(nested_objects(sch, sizeof sch, SAMPLE_SV_DEPTH - 1));
    repeat(txt, sizeof txt, "{\"a\":", SAMPLE_SV_DEPTH - 1, "\"x\"");
    for (int i = 0; i < SAMPLE_SV_DEPTH - 1; i++) strcat(txt, "}");
    expect(s, txt, WHOLE, "objects at the deepest");
    no_dead_ends(s, txt, "objects at the deepest");
    sample_schema_free(s);
    refused(nested_objects(sch, sizeof sch, SAMPLE_SV_DEPTH), "nests objects and arrays deeper than 64 levels");

    /* arrays of at least one item, the same */
    repeat(sch, sizeof sch, "{\"type\": \"array\", \"minItems\": 1, \"items\": ", SAMPLE_SV_DEPTH - 1,
           "{\"type\": \"integer\"}");
    for (int i = 0; i < SAMPLE_SV_DEPTH - 1; i++) strcat(sch, "}");
    s = compile(sch);
    repeat(txt, sizeof txt, "[", SAMPLE_SV_DEPTH - 1, "7");
    for (int i = 0; i < SAMPLE_SV_DEPTH - 1; i++) strcat(txt, "]");
    expect(s, txt, WHOLE, "arrays at the deepest");
    no_dead_ends(s, txt, "arrays at the deepest");
    sample_schema_free(s);
    repeat(sch, sizeof sch, "{\"type\": \"array\", \"minItems\": 1, \"items\": ", SAMPLE_SV_DEPTH,
           "{\"type\": \"integer\"}");
    for (int i = 0; i < SAMPLE_SV_DEPTH; i++) strcat(sch, "}");
    refused(sch, "deeper than 64 levels");

    /* an optional property that may recurse: written while its value fits,
     * left out once the stack is full (an object at the last frame can
     * hold no property at all) */
    s = compile("{\"$defs\": {\"n\": {\"type\": \"object\", \"properties\": {\"next\": {\"$ref\": \"#/$defs/n\"}, "
                "\"v\": {\"type\": \"integer\"}}}}, \"$ref\": \"#/$defs/n\"}");
    repeat(txt, sizeof txt, "{\"next\":", SAMPLE_SV_DEPTH - 1, "{}");
    for (int i = 0; i < SAMPLE_SV_DEPTH - 1; i++) strcat(txt, "}");
    expect(s, txt, WHOLE, "optional recursion to the last frame");
    no_dead_ends(s, txt, "optional recursion to the last frame");
    repeat(txt, sizeof txt, "{\"next\":", SAMPLE_SV_DEPTH - 1, "{\"v\":1}");
    expect(s, txt, 8 * (SAMPLE_SV_DEPTH - 1) + 1, "no key at the last frame");
    repeat(txt, sizeof txt, "{\"next\":", SAMPLE_SV_DEPTH - 2, "{\"next\":{},\"v\":1}");
    for (int i = 0; i < SAMPLE_SV_DEPTH - 2; i++) strcat(txt, "}");
    expect(s, txt, WHOLE, "a key whose value takes the last frame");
    sample_schema_free(s);

    /* a recursive array: items while an item fits (an item is an object
     * and its integer, two frames), then only an empty array */
    s = compile("{\"$defs\": {\"n\": {\"type\": \"object\", \"properties\": {\"v\": {\"type\": \"integer\"}, "
                "\"kids\": {\"type\": \"array\", \"items\": {\"$ref\": \"#/$defs/n\"}}}, \"required\": [\"v\"]}}, "
                "\"$ref\": \"#/$defs/n\"}");
    const int levels = SAMPLE_SV_DEPTH / 2 - 1; /* objects with a non-empty "kids" */
    repeat(txt, sizeof txt, "{\"v\":1,\"kids\":[", levels, "{\"v\":1,\"kids\":[]}");
    for (int i = 0; i < levels; i++) strcat(txt, "]}");
    expect(s, txt, WHOLE, "a recursive array at the deepest");
    no_dead_ends(s, txt, "a recursive array at the deepest");
    repeat(txt, sizeof txt, "{\"v\":1,\"kids\":[", levels + 1, "{\"v\":1}");
    expect(s, txt, 15 * (levels + 1), "no item past the deepest");
    sample_schema_free(s);

    /* JSON mode nests as deep as a schema */
    s = sample_schema_compile(NULL, NULL, 0);
    repeat(txt, sizeof txt, "[", SAMPLE_SV_DEPTH + 1, "");
    expect(s, txt, SAMPLE_SV_DEPTH, "any value: 64 arrays, not 65");
    repeat(txt, sizeof txt, "[", SAMPLE_SV_DEPTH - 1, "1");
    for (int i = 0; i < SAMPLE_SV_DEPTH - 1; i++) strcat(txt, "]");
    expect(s, txt, WHOLE, "any value at the deepest");
    repeat(txt, sizeof txt, "{\"a\":", SAMPLE_SV_DEPTH - 1, "{\"");
    expect(s, txt, 5 * (SAMPLE_SV_DEPTH - 1) + 1, "no key in an open object at the last frame");
    repeat(txt, sizeof txt, "{\"a\":", SAMPLE_SV_DEPTH - 1, "{}");
    for (int i = 0; i < SAMPLE_SV_DEPTH - 1; i++) strcat(txt, "}");
    expect(s, txt, WHOLE, "an empty open object at the last frame");
    sample_schema_free(s);
}

/* Schemas whose only values are infinite are refused; a part of a schema
 * with no finite value is never begun. */
static const refusal k_infinite[] = {
    {"{\"$defs\": {\"n\": {\"type\": \"object\", \"properties\": {\"next\": {\"$ref\": \"#/$defs/n\"}}, "
     "\"required\": [\"next\"]}}, \"$ref\": \"#/$defs/n\"}",
     "no finite value"},
    {"{\"$defs\": {\"a\": {\"type\": \"array\", \"minItems\": 1, \"items\": {\"$ref\": \"#/$defs/a\"}}}, "
     "\"$ref\": \"#/$defs/a\"}",
     "no finite value"},
    /* through each other */
    {"{\"$defs\": {\"a\": {\"type\": \"object\", \"properties\": {\"b\": {\"$ref\": \"#/$defs/b\"}}, \"required\": "
     "[\"b\"]}, \"b\": {\"type\": \"array\", \"minItems\": 2, \"items\": {\"$ref\": \"#/$defs/a\"}}}, "
     "\"$ref\": \"#/$defs/a\"}",
     "no finite value"},
    /* every branch of a union requires itself */
    {"{\"$defs\": {\"u\": {\"anyOf\": [{\"type\": \"object\", \"properties\": {\"x\": {\"$ref\": \"#/$defs/u\"}}, "
     "\"required\": [\"x\"]}, {\"type\": \"array\", \"minItems\": 1, \"items\": {\"$ref\": \"#/$defs/u\"}}]}}, "
     "\"$ref\": \"#/$defs/u\"}",
     "no finite value"},
    {"{\"type\": \"object\", \"properties\": {\"a\": {\"type\": \"string\", \"enum\": []}}}", "empty enum"},
    {"{\"type\": \"array\", \"minItems\": 1, \"items\": false}", "allows nothing"},
};

static void test_infinite(void) {
    run_refusals(k_infinite, N_OF(k_infinite));
    /* a union with one finite branch: the other is never begun */
    sample_schema *s = compile("{\"$defs\": {\"inf\": {\"type\": \"object\", \"properties\": {\"x\": {\"$ref\": "
                               "\"#/$defs/inf\"}}, \"required\": [\"x\"]}}, \"anyOf\": [{\"$ref\": \"#/$defs/inf\"}, "
                               "{\"type\": \"null\"}]}");
    expect(s, "null", WHOLE, "the finite branch");
    expect(s, "{", 0, "the branch without a finite value");
    sample_schema_free(s);
    /* an optional property with no finite value is never written */
    s = compile("{\"$defs\": {\"inf\": {\"type\": \"object\", \"properties\": {\"x\": {\"$ref\": \"#/$defs/inf\"}}, "
                "\"required\": [\"x\"]}}, \"type\": \"object\", \"properties\": {\"x\": {\"$ref\": \"#/$defs/inf\"}, "
                "\"y\": {\"type\": \"integer\"}}}");
    expect(s, "{}", WHOLE, "the object without it");
    expect(s, "{\"y\": 2}", WHOLE, "the other property");
    expect(s, "{\"x", 2, "never the property without a finite value");
    no_dead_ends(s, "{\"y\": 2}", "an optional infinite property");
    sample_schema_free(s);
    /* an array of them may only be empty */
    s = compile(
        "{\"$defs\": {\"inf\": {\"type\": \"array\", \"minItems\": 1, \"items\": {\"$ref\": \"#/$defs/inf\"}}}, "
        "\"type\": \"array\", \"items\": {\"$ref\": \"#/$defs/inf\"}}");
    expect(s, "[]", WHOLE, "an empty array");
    expect(s, "[[", 1, "no item");
    sample_schema_free(s);
}

/* JSON mode (no schema): an object at the top, as OpenAI, llama.cpp and
 * Ollama give; any value inside it. */
static void test_json_mode(void) {
    const sample_schema *s = sample_schema_any_object();
    expect(s, "{}", WHOLE, "an empty object");
    expect(s, "{\"a\":1}", WHOLE, "an object");
    expect(s, "\n {\"a\": [1, true, null, \"x\", {\"b\": -2.5}]}", WHOLE, "whitespace before, any values inside");
    expect(s, "-500", 0, "a number");
    expect(s, "7", 0, "a digit");
    expect(s, "true", 0, "a literal");
    expect(s, "null", 0, "null");
    expect(s, "\"x\"", 0, "a string");
    expect(s, "[1]", 0, "an array");
    expect(s, " 7", 1, "a number after a space");
    partial(s, "{\"a\":", "an open object");
    sample_schema_free((sample_schema *)s); /* the static schema is left alone */
    expect(sample_schema_any_object(), "{}", WHOLE, "after a free");
}

int main(void) {
    run_schemas(k_values, N_OF(k_values));
    run_refusals(k_values_refused, N_OF(k_values_refused));
    test_numbers();
    test_patterns();
    test_formats();
    test_keywords();
    test_call();
    test_call_forms();
    test_depth();
    test_infinite();
    test_json_mode();
    return t_done();
}
