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

static void try_pair(const tokenizer *t, const char *text, spm_sym *sym, int32_t l, int32_t r, tok_pair *heap,
                     size_t *nheap) {
    if (l < 0 || r < 0) return;
    int32_t id = tok_strmap_get(&t->map, t, text + sym[l].start, sym[l].n + sym[r].n);
    if (id < 0) return;
    tok_heap_push(heap, nheap, (tok_pair){t->score ? t->score[id] : 0.0f, l, r, id, sym[l].n, sym[r].n});
}

void tok_spm_encode(const tokenizer *t, const char *raw, size_t len, int prefix_space, tok_vec *out, tok_scratch *s) {
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
    tok_pair *heap = tok_scratch_get(s, 2, 3 * tl * sizeof *heap);
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
        tok_pair p = tok_heap_pop(heap, &nheap);
        spm_sym *l = &sym[p.left], *r = &sym[p.right];
        /* stale: one side was merged elsewhere since this pair was queued */
        if (l->n != p.ln || r->n != p.rn) continue;
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
