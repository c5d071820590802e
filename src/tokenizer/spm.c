/* SentencePiece-style tokenization as llama.cpp does it for "llama" vocabs:
 * start from single UTF-8 characters and repeatedly merge the adjacent pair
 * whose concatenation is a vocabulary token with the highest score (ties:
 * leftmost).  Characters left over that are not tokens become <0xXX> byte
 * tokens. */
#include <string.h>

#include "tokenizer/tok_internal.h"

typedef struct spm_sym {
    int32_t prev, next; /* neighbours in the live chain, -1 at the ends */
    uint32_t start, n;  /* byte span in the escaped text; n = 0 once merged away */
} spm_sym;

typedef struct spm_pair {
    float score;
    int32_t left, right;
    uint32_t size; /* byte length of the merged text when queued */
} spm_pair;

/* a is better than b: higher score, then further left. */
static int pair_better(const spm_pair *a, const spm_pair *b) {
    return a->score > b->score || (a->score == b->score && a->left < b->left);
}

static void heap_push(spm_pair *h, size_t *n, spm_pair p) {
    size_t i = (*n)++;
    while (i > 0) {
        size_t up = (i - 1) / 2;
        if (!pair_better(&p, &h[up])) break;
        h[i] = h[up];
        i = up;
    }
    h[i] = p;
}

static spm_pair heap_pop(spm_pair *h, size_t *n) {
    spm_pair top = h[0], last = h[--*n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= *n) break;
        if (c + 1 < *n && pair_better(&h[c + 1], &h[c])) c++;
        if (!pair_better(&h[c], &last)) break;
        h[i] = h[c];
        i = c;
    }
    if (*n > 0) h[i] = last;
    return top;
}

static void try_pair(const ktok *t, const char *text, spm_sym *sym, int32_t l, int32_t r, spm_pair *heap,
                     size_t *nheap) {
    if (l < 0 || r < 0) return;
    uint32_t size = sym[l].n + sym[r].n;
    int32_t id = tok_strmap_get(&t->map, t, text + sym[l].start, size);
    if (id < 0) return;
    spm_pair p = {t->score ? t->score[id] : 0.0f, l, r, size};
    heap_push(heap, nheap, p);
}

void tok_spm_encode(const ktok *t, const char *raw, size_t len, int prefix_space, tok_vec *out, tok_scratch *s) {
    /* escape: optional dummy prefix, every ' ' becomes U+2581 (3 bytes) */
    size_t cap = (len + 1) * 3;
    char *text = tok_scratch_get(s, 0, cap);
    if (!text) return;
    size_t tl = 0;
    if (prefix_space) {
        memcpy(text, "\xe2\x96\x81", 3);
        tl = 3;
    }
    for (size_t i = 0; i < len; i++) {
        if (raw[i] == ' ') {
            memcpy(text + tl, "\xe2\x96\x81", 3);
            tl += 3;
        } else
            text[tl++] = raw[i];
    }
    if (tl == 0) return;

    spm_sym *sym = tok_scratch_get(s, 1, tl * sizeof *sym);
    /* each merge queues at most two pairs, plus the initial n-1 */
    spm_pair *heap = tok_scratch_get(s, 2, 3 * tl * sizeof *heap);
    if (!sym || !heap) return;

    int32_t n = 0;
    for (size_t off = 0; off < tl;) {
        size_t cl = tok_utf8_len((uint8_t)text[off]);
        if (cl > tl - off) cl = tl - off;
        sym[n].start = (uint32_t)off;
        sym[n].n = (uint32_t)cl;
        sym[n].prev = n - 1;
        off += cl;
        sym[n].next = off == tl ? -1 : n + 1;
        n++;
    }

    size_t nheap = 0;
    for (int32_t i = 1; i < n; i++) try_pair(t, text, sym, i - 1, i, heap, &nheap);

    while (nheap > 0) {
        spm_pair p = heap_pop(heap, &nheap);
        spm_sym *l = &sym[p.left], *r = &sym[p.right];
        /* stale: one side was merged elsewhere since this pair was queued */
        if (l->n == 0 || r->n == 0 || l->n + r->n != p.size) continue;
        l->n += r->n;
        r->n = 0;
        l->next = r->next;
        if (r->next >= 0) sym[r->next].prev = p.left;
        try_pair(t, text, sym, l->prev, p.left, heap, &nheap);
        try_pair(t, text, sym, p.left, l->next, heap, &nheap);
    }

    for (int32_t i = 0; i != -1; i = sym[i].next) {
        const char *piece = text + sym[i].start;
        int32_t id = tok_strmap_get(&t->map, t, piece, sym[i].n);
        if (id >= 0) {
            tok_vec_push(out, id);
            continue;
        }
        /* merged symbols are always tokens, so this is a single character
         * the vocabulary lacks: spell it in bytes */
        for (uint32_t j = 0; j < sym[i].n; j++) {
            int32_t b = t->byte_tok[(uint8_t)piece[j]];
            if (b >= 0) tok_vec_push(out, b);
        }
    }
}
