/* Prompt lookup decoding (spec.h): proposals are what followed the latest
 * earlier occurrence of the sequence's last n tokens, the longest n first.
 *
 * Each sequence has one table per n-gram length, direct-mapped by a hash
 * of the n tokens, holding 1 + the position where the latest n-gram with
 * that hash ends (0: none).  A hit is checked against the tokens, so a
 * collision only costs a miss; a sequence that lost tokens is indexed
 * again (ng_sync).  A step indexes the tokens added since the last one (the
 * n-grams ending before the last token, which is the key) and looks up
 * once per length: no allocation, work proportional to the new tokens.
 * When the continuation runs into the key itself (a repeating stretch),
 * it goes on through the proposals made so far, so a loop is proposed as
 * far as asked. */
#include "spec/spec.h"

#include <stdlib.h>
#include <string.h>

typedef struct ng_seq {
    int32_t *tok;   /* [n_ctx] the tokens indexed, as the slot had them */
    int32_t n;      /* how many */
    int32_t *table; /* [n_len][mask + 1] */
} ng_seq;

struct spec_ngram {
    int32_t nmin, nmax, n_seq, n_ctx;
    uint32_t mask;
    ng_seq *seqs;
};

static uint32_t ng_hash(const int32_t *t, int32_t n) {
    uint64_t h = 0x9e3779b97f4a7c15ull ^ (uint64_t)n;
    for (int32_t i = 0; i < n; i++) h = (h ^ (uint32_t)t[i]) * 0x100000001b3ull;
    return (uint32_t)(h ^ (h >> 29) ^ (h >> 47));
}

spec_ngram *spec_ngram_new(const kiln_spec_params *p, int32_t n_seq, int32_t n_ctx) {
    spec_ngram *g = calloc(1, sizeof *g);
    if (!g) return NULL;
    g->nmin = p->ngram_min;
    g->nmax = p->ngram_max;
    g->n_seq = n_seq;
    g->n_ctx = n_ctx;
    uint32_t size = 1024;
    while (size < (uint32_t)n_ctx && size < (1u << 18)) size <<= 1;
    g->mask = size - 1;
    g->seqs = calloc((size_t)n_seq, sizeof *g->seqs);
    if (!g->seqs) {
        free(g);
        return NULL;
    }
    const size_t n_len = (size_t)(g->nmax - g->nmin + 1);
    for (int32_t i = 0; i < n_seq; i++) {
        g->seqs[i].tok = malloc((size_t)n_ctx * sizeof(int32_t));
        g->seqs[i].table = calloc(n_len * size, sizeof(int32_t)); /* untouched pages cost nothing */
        if (!g->seqs[i].tok || !g->seqs[i].table) {
            spec_ngram_free(g);
            return NULL;
        }
    }
    return g;
}

void spec_ngram_free(spec_ngram *g) {
    if (!g) return;
    for (int32_t i = 0; g->seqs && i < g->n_seq; i++) {
        free(g->seqs[i].tok);
        free(g->seqs[i].table);
    }
    free(g->seqs);
    free(g);
}

static inline int32_t *ng_table(const spec_ngram *g, const ng_seq *q, int32_t len) {
    return q->table + (size_t)(len - g->nmin) * (g->mask + 1);
}

/* Brings q's index to tok[0..n) (n-grams ending at positions < n).
 * When q held more than the common prefix (a new slot on the sequence, or
 * the same prompt again after a longer run), entries may point past it and
 * hide an earlier occurrence of their n-gram that is still valid: all of
 * tok[0..n) is indexed again, in order, so every n-gram present maps to
 * its latest occurrence below n (entries left pointing higher are n-grams
 * absent below n, and a lookup's checks turn them into misses). */
static void ng_sync(const spec_ngram *g, ng_seq *q, const int32_t *tok, int32_t n) {
    if (n > g->n_ctx) n = g->n_ctx;
    int32_t lcp = q->n < n ? q->n : n;
    if (memcmp(q->tok, tok, (size_t)lcp * sizeof *tok)) {
        int32_t i = 0;
        while (i < lcp && q->tok[i] == tok[i]) i++;
        lcp = i;
    }
    memcpy(q->tok + lcp, tok + lcp, (size_t)(n - lcp) * sizeof *tok);
    if (lcp < q->n) lcp = 0;
    for (int32_t e = lcp; e < n; e++)
        for (int32_t len = g->nmin; len <= g->nmax && len <= e + 1; len++)
            ng_table(g, q, len)[ng_hash(tok + e - len + 1, len) & g->mask] = e + 1;
    q->n = n;
}

void spec_ngram_propose(void *self, gen_ask *asks, int32_t n_asks) {
    spec_ngram *g = self;
    for (int32_t a = 0; a < n_asks; a++) {
        gen_ask *k = &asks[a];
        k->n = 0;
        if (k->seq < 0 || k->seq >= g->n_seq || k->n_tok < 2 || k->n_tok > g->n_ctx) continue;
        ng_seq *q = &g->seqs[k->seq];
        const int32_t *tok = k->tok;
        const int32_t nt = k->n_tok;
        ng_sync(g, q, tok, nt - 1);
        int32_t start = -1;
        for (int32_t len = g->nmax; len >= g->nmin && start < 0; len--) {
            if (nt < len + 1) continue;
            const int32_t *key = tok + nt - len;
            const int32_t e = ng_table(g, q, len)[ng_hash(key, len) & g->mask] - 1;
            if (e < len - 1 || e > nt - 2) continue;
            if (!memcmp(tok + e - len + 1, key, (size_t)len * sizeof *key)) start = e + 1;
        }
        if (start < 0) continue;
        for (int32_t i = 0; i < k->max; i++) {
            const int32_t src = start + i; /* past the end: the proposals so far */
            k->draft[i] = src < nt ? tok[src] : k->draft[src - nt];
        }
        k->n = k->max;
        k->dist = NULL;
    }
}
