/* Open-addressing hash tables for token lookup, plus the small growable
 * buffers the encoders share. */
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tok_internal.h"

/* FNV-1a, then a multiply-xorshift finaliser so linear probing sees well
 * spread low bits. */
uint64_t tok_hash(const char *s, size_t len) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < len; i++) {
        h ^= (uint8_t)s[i];
        h *= 0x100000001b3ull;
    }
    h ^= h >> 32;
    h *= 0xd6e8feb86659fd93ull;
    h ^= h >> 32;
    return h;
}

static uint32_t pow2_at_least(uint64_t n) {
    uint32_t c = 16;
    while (c < n) c <<= 1;
    return c;
}

/* Later ids win on duplicate texts, matching the reference loader. */
int tok_strmap_build(tok_strmap *m, const tokenizer *t) {
    uint32_t cap = pow2_at_least((uint64_t)t->n * 2);
    m->slot = malloc((size_t)cap * sizeof *m->slot);
    if (!m->slot) return -1;
    memset(m->slot, 0xff, (size_t)cap * sizeof *m->slot);
    m->mask = cap - 1;
    for (int32_t id = 0; id < t->n; id++) {
        size_t len;
        const char *s = tok_str(t, id, &len);
        uint32_t i = (uint32_t)tok_hash(s, len) & m->mask;
        for (;; i = (i + 1) & m->mask) {
            int32_t cur = m->slot[i];
            if (cur < 0) {
                m->slot[i] = id;
                break;
            }
            size_t clen;
            const char *cs = tok_str(t, cur, &clen);
            if (clen == len && memcmp(cs, s, len) == 0) {
                m->slot[i] = id;
                break;
            }
        }
    }
    return 0;
}

int32_t tok_strmap_get(const tok_strmap *m, const tokenizer *t, const char *s, size_t len) {
    uint32_t i = (uint32_t)tok_hash(s, len) & m->mask;
    for (;; i = (i + 1) & m->mask) {
        int32_t cur = m->slot[i];
        if (cur < 0) return -1;
        size_t clen;
        const char *cs = tok_str(t, cur, &clen);
        if (clen == len && memcmp(cs, s, len) == 0) return cur;
    }
}

void tok_strmap_free(tok_strmap *m) {
    free(m->slot);
    m->slot = NULL;
}

static uint32_t pair_slot(uint64_t key, uint32_t mask) {
    key ^= key >> 33;
    key *= 0xff51afd7ed558ccdull;
    key ^= key >> 33;
    return (uint32_t)key & mask;
}

int tok_pairmap_init(tok_pairmap *m, uint32_t n) {
    uint32_t cap = pow2_at_least((uint64_t)n * 2);
    m->key = calloc(cap, sizeof *m->key);
    m->rank = malloc((size_t)cap * sizeof *m->rank);
    m->result = malloc((size_t)cap * sizeof *m->result);
    m->mask = cap - 1;
    if (!m->key || !m->rank || !m->result) {
        tok_pairmap_free(m);
        return -1;
    }
    return 0;
}

/* The first (lowest-rank) entry for a pair is kept. */
void tok_pairmap_put(tok_pairmap *m, int32_t a, int32_t b, int32_t rank, int32_t result) {
    uint64_t key = ((uint64_t)(uint32_t)a << 32 | (uint32_t)b) + 1;
    for (uint32_t i = pair_slot(key, m->mask);; i = (i + 1) & m->mask) {
        if (m->key[i] == key) return;
        if (m->key[i] == 0) {
            m->key[i] = key;
            m->rank[i] = rank;
            m->result[i] = result;
            return;
        }
    }
}

int32_t tok_pairmap_get(const tok_pairmap *m, int32_t a, int32_t b, int32_t *result) {
    uint64_t key = ((uint64_t)(uint32_t)a << 32 | (uint32_t)b) + 1;
    for (uint32_t i = pair_slot(key, m->mask);; i = (i + 1) & m->mask) {
        if (m->key[i] == key) {
            *result = m->result[i];
            return m->rank[i];
        }
        if (m->key[i] == 0) return -1;
    }
}

void tok_pairmap_free(tok_pairmap *m) {
    free(m->key);
    free(m->rank);
    free(m->result);
    m->key = NULL;
    m->rank = m->result = NULL;
}

void tok_vec_push(tok_vec *v, int32_t id) {
    if (v->oom) return;
    if (v->n == v->cap) {
        int32_t nc = v->cap ? v->cap * 2 : 64;
        int32_t *nv = realloc(v->v, (size_t)nc * sizeof *nv);
        if (!nv) {
            v->oom = 1;
            return;
        }
        v->v = nv;
        v->cap = nc;
    }
    v->v[v->n++] = id;
}

static int pair_first(const tok_pair *a, const tok_pair *b) {
    return a->pri > b->pri || (a->pri == b->pri && a->left < b->left);
}

void tok_heap_push(tok_pair *h, size_t *n, tok_pair p) {
    size_t i = (*n)++;
    while (i > 0) {
        size_t up = (i - 1) / 2;
        if (!pair_first(&p, &h[up])) break;
        h[i] = h[up];
        i = up;
    }
    h[i] = p;
}

tok_pair tok_heap_pop(tok_pair *h, size_t *n) {
    tok_pair top = h[0], last = h[--*n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= *n) break;
        if (c + 1 < *n && pair_first(&h[c + 1], &h[c])) c++;
        if (!pair_first(&h[c], &last)) break;
        h[i] = h[c];
        i = c;
    }
    if (*n > 0) h[i] = last;
    return top;
}

void *tok_scratch_get(tok_scratch *s, int i, size_t bytes) {
    if (s->cap[i] < bytes) {
        size_t nc = s->cap[i] ? s->cap[i] : 256;
        while (nc < bytes) nc *= 2;
        void *nb = realloc(s->buf[i], nc);
        if (!nb) {
            s->oom = 1;
            return NULL;
        }
        s->buf[i] = nb;
        s->cap[i] = nc;
    }
    return s->buf[i];
}

void tok_scratch_free(tok_scratch *s) {
    for (int i = 0; i < 6; i++) free(s->buf[i]);
    memset(s, 0, sizeof *s);
}
