/*
 * regex — a regular-expression subset compiled to a DFA over UTF-8 bytes,
 * for constrained sampling: after any prefix the DFA says in one table
 * lookup whether a byte can come next, and in a flag whether the text so
 * far is a whole match.
 *
 * The dialect is ECMAScript's (what JSON Schema's `pattern` uses), without
 * flags: literals, `.`, classes (`[a-z]`, `[^...]`, `\d \w \s` and their
 * negations), groups (`(...)`, `(?:...)`, `(?<name>...)`), alternation,
 * quantifiers (`* + ? {n} {n,} {n,m}`, lazy or not: the language is the
 * same), anchors `^ $`, and the escapes `\t \n \r \v \f \0 \cX \xHH \uHHHH
 * \u{H...}`.  Like JSON Schema's pattern it searches: without `^` a match
 * may begin anywhere, without `$` end anywhere.  Lookaround,
 * backreferences, word boundaries and Unicode properties are refused.
 *
 * Every state of a compiled DFA can still reach a match (dead states are
 * removed), so a byte the DFA takes never leads into a dead end.  A
 * compiled DFA is immutable: any number of threads may step through it.
 */
#ifndef KILN_SAMPLE_REGEX_H
#define KILN_SAMPLE_REGEX_H

#include <stddef.h>
#include <stdint.h>

typedef struct sample_re {
    int32_t n_states, n_classes;
    int32_t start;
    uint8_t cls[256];   /* byte -> class */
    int32_t *next;      /* [n_states][n_classes]: next state, -1 none */
    uint8_t *accept;    /* [n_states]: the text so far is a whole match */
    int32_t *min_chars; /* [n_states]: fewest characters still to come to a match */
    int32_t *max_chars; /* [n_states]: most, -1 unbounded */
} sample_re;

/* Most states a compiled DFA may have; a pattern that needs more is
 * refused as too complex. */
#define SAMPLE_RE_MAX_STATES 8192

/* Compiles pattern (len bytes of UTF-8).  NULL with a message in err when
 * it is malformed, uses what the dialect lacks, matches nothing or is too
 * complex. */
sample_re *sample_re_compile(const char *pattern, size_t len, char *err, size_t errsz);
/* The texts both a and b match (an anchored pattern and a format, say). */
sample_re *sample_re_intersect(const sample_re *a, const sample_re *b, char *err, size_t errsz);
void sample_re_free(sample_re *r);

/* The state after byte c in state s, or -1 when no match continues so. */
static inline int32_t sample_re_step(const sample_re *r, int32_t s, unsigned char c) {
    return r->next[(size_t)s * (size_t)r->n_classes + r->cls[c]];
}

#endif
