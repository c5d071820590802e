/* Internals shared by the tokenizer files (not part of the public API). */
#ifndef KILN_TOK_INTERNAL_H
#define KILN_TOK_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "base/base.h"
#include "tokenizer/tokenizer.h"

/* ---- string -> id hash map (open addressing, linear probing) ----
 * Keys are token texts owned by the tokenizer arena; the table stores ids and
 * compares against the tokenizer's text table. */
typedef struct tok_strmap {
    int32_t *slot; /* id or -1 */
    uint32_t mask; /* capacity - 1, capacity a power of two */
} tok_strmap;

/* ---- u64 -> (rank, id) map for BPE merges keyed by (left id, right id) ---- */
typedef struct tok_pairmap {
    uint64_t *key; /* (left << 32 | right) + 1, 0 = empty */
    int32_t *rank;
    int32_t *result; /* id of the merged token */
    uint32_t mask;
} tok_pairmap;

/* Attribute bits kept per token next to its type. */
enum { TOK_A_EOG = 1, TOK_A_RSTRIP = 2, TOK_A_LSTRIP = 4 };

typedef struct tok_pretok tok_pretok;

struct tokenizer {
    enum tok_kind kind;
    int32_t n;
    char *arena;   /* all token texts, back to back */
    uint32_t *off; /* n+1 offsets into arena */
    float *score;  /* SPM merge scores (NULL when absent) */
    uint8_t *type; /* enum tok_type */
    uint8_t *attr; /* TOK_A_* */
    tok_strmap map;
    int32_t max_len; /* longest token text in bytes */

    /* decoded pieces (token_to_piece with special set) */
    char *piece;
    uint32_t *piece_off;
    int32_t max_piece;

    int32_t bos, eos, eot, eom, unk, sep, pad;
    int add_bos, add_eos, add_space_prefix;

    /* special-token partition: control/user-defined/unknown ids, longest first */
    int32_t *special;
    int32_t n_special;

    /* SPM: id of <0xXX> (or of the one-byte string) per byte, -1 if none */
    int32_t byte_tok[256];

    /* BPE */
    tok_pairmap merges;
    int32_t byte_enc_tok[256]; /* id of the token spelling byte b's code point */
    char byte_enc[256][3];     /* UTF-8 of the code point byte b maps to, NUL-terminated */
    int16_t cp_to_byte[324];   /* inverse mapping for code points < 324, -1 = none */
    int ignore_merges;
    tok_pretok *pre;

    /* WordPiece: word-start marker ("\xe2\x96\x81" in llama.cpp GGUFs, "" with
     * "##" continuation in raw BERT vocabularies) */
    const char *wpm_start;
    const char *wpm_cont;
};

static inline const char *tok_str(const tokenizer *t, int32_t id, size_t *len) {
    *len = t->off[id + 1] - t->off[id];
    return t->arena + t->off[id];
}

uint64_t tok_hash(const char *s, size_t len);
int tok_strmap_build(tok_strmap *m, const tokenizer *t);
int32_t tok_strmap_get(const tok_strmap *m, const tokenizer *t, const char *s, size_t len);
void tok_strmap_free(tok_strmap *m);
int tok_pairmap_init(tok_pairmap *m, uint32_t n);
void tok_pairmap_put(tok_pairmap *m, int32_t a, int32_t b, int32_t rank, int32_t result);
/* Returns the rank (or -1) and sets *result. */
int32_t tok_pairmap_get(const tok_pairmap *m, int32_t a, int32_t b, int32_t *result);
void tok_pairmap_free(tok_pairmap *m);

/* ---- growable id vector used while encoding ---- */
typedef struct tok_vec {
    int32_t *v;
    int32_t n, cap;
    int oom;
} tok_vec;

void tok_vec_push(tok_vec *v, int32_t id);

/* ---- shared scratch for one encode call ---- */
typedef struct tok_scratch {
    void *buf[6];
    size_t cap[6];
    int oom;
} tok_scratch;

/* Returns buffer slot i with at least bytes capacity (contents kept), or
 * NULL (and sets oom). */
void *tok_scratch_get(tok_scratch *s, int i, size_t bytes);
void tok_scratch_free(tok_scratch *s);

/* ---- the merge queue of BPE and SentencePiece ---- */
/* A candidate merge of adjacent symbols left and right, queued when both
 * sides spanned ln and rn bytes (a later merge of either makes it stale).
 * The queue pops the largest pri first, then the leftmost. */
typedef struct tok_pair {
    float pri; /* SentencePiece: the merged token's score; BPE: -rank (exact below 2^24) */
    int32_t left, right;
    int32_t result; /* BPE: the merged token */
    uint32_t ln, rn;
} tok_pair;

/* A binary heap in h (room for every push is the caller's): *n entries. */
void tok_heap_push(tok_pair *h, size_t *n, tok_pair p);
tok_pair tok_heap_pop(tok_pair *h, size_t *n); /* *n > 0 */

/* Byte length of the UTF-8 sequence its lead byte announces (1 for stray
 * continuation bytes). */
static inline size_t tok_utf8_len(uint8_t c) {
    static const uint8_t lens[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
    return lens[c >> 4];
}

/* Tokenizers for one fragment of plain text (no special tokens inside). */
/* prefix_space: add SentencePiece's dummy space in front. */
void tok_spm_encode(const tokenizer *t, const char *text, size_t len, int prefix_space, tok_vec *out, tok_scratch *s);
void tok_bpe_encode(const tokenizer *t, const char *text, size_t len, tok_vec *out, tok_scratch *s);
void tok_wpm_encode(const tokenizer *t, const char *text, size_t len, tok_vec *out, tok_scratch *s);

/* BPE setup: byte mapping, merges, pre-tokenizer for the name in pre
 * (NULL = missing).  Returns 0 or -1 with a message. */
kiln_status tok_bpe_init(tokenizer *t, const gguf_file *f, const char *pre);
void tok_bpe_free(tokenizer *t);

#endif
