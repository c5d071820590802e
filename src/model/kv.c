/* The paged KV cache.  One mapping of the backend (backend_backend.map) holds
 * every block, so on the CPU memory is committed only as cells are written; blocks move between sequences
 * through a free list, and full blocks can be shared between sequences
 * through the prefix table (kv.h). */
#include "model/kv.h"

#include "base/base.h"

#include <stdlib.h>
#include <string.h>

/* Bytes of one head's row of hd elements: F16 or F32 elements, or hd / 32
 * Q8_0 blocks (34 bytes: an F16 scale and 32 int8). */
static size_t head_row_bytes(int hd, int type) {
    if (type == KILN_KV_Q8_0) return (size_t)(hd / 32) * 34;
    return (size_t)hd * (type == KILN_KV_F32 ? 4 : 2);
}

uint64_t model_kv_bytes_per_token(const model_seq_shape *shape, int type) {
    const int runs = shape->v_in_k ? 1 : 2;
    if (!shape->layer_hd)
        return (uint64_t)shape->n_attn_layer * (uint64_t)shape->n_head_kv * runs *
               (uint64_t)head_row_bytes(shape->hd, type);
    uint64_t n = 0;
    for (int l = 0; l < shape->n_attn_layer; l++)
        n += (uint64_t)shape->layer_n_head_kv[l] * runs * (uint64_t)head_row_bytes(shape->layer_hd[l], type);
    return n;
}

uint64_t model_kv_bytes_range(const model_seq_shape *shape, int type, int l0, int l1) {
    const int runs = shape->v_in_k ? 1 : 2;
    uint64_t n = 0;
    for (int l = l0 < 0 ? 0 : l0; l < l1 && l < shape->n_attn_layer; l++) {
        const int hkv = shape->layer_n_head_kv ? shape->layer_n_head_kv[l] : shape->n_head_kv;
        n += (uint64_t)hkv * runs * (uint64_t)head_row_bytes(shape->layer_hd ? shape->layer_hd[l] : shape->hd, type);
    }
    return n;
}

kiln_status model_kv_init(model_kv *kv, const backend_backend *be, const model_seq_shape *shape, int type, int n_seq,
                          int n_ctx, int n_extra) {
    return model_kv_init_split(kv, be, NULL, 0, shape, type, n_seq, n_ctx, n_extra);
}

kiln_status model_kv_init_split(model_kv *kv, const backend_backend *be, const backend_backend *be_lo, int n_lo,
                                const model_seq_shape *shape, int type, int n_seq, int n_ctx, int n_extra) {
    memset(kv, 0, sizeof *kv);
    if (!be_lo || n_lo < 0) n_lo = 0;
    if (n_lo > shape->n_attn_layer) n_lo = shape->n_attn_layer;
    if (be->kind == BACKEND_CUDA && shape->n_attn_layer > n_lo && (type == KILN_KV_F32 || shape->v_in_k)) {
        return base_fail(KILN_ERR_NOMEM, "the CUDA backend keeps only an F16 or Q8_0 KV cache with separate K and V");
    }
    kv->be = be;
    kv->be_lo = be_lo;
    kv->n_lo = n_lo;
    kv->type = type;
    kv->hrow = head_row_bytes(shape->hd, type);
    kv->n_layer = shape->n_attn_layer;
    kv->n_head_kv = shape->n_head_kv;
    kv->hd = shape->hd; /* keys and values have the same head size */
    kv->v_in_k = shape->v_in_k;
    const size_t nl = kv->n_layer > 0 ? (size_t)kv->n_layer : 1;
    kv->l_hkv = malloc(nl * sizeof *kv->l_hkv);
    kv->l_hd = malloc(nl * sizeof *kv->l_hd);
    kv->l_hrow = malloc(nl * sizeof *kv->l_hrow);
    kv->l_off = malloc(nl * sizeof *kv->l_off);
    if (!kv->l_hkv || !kv->l_hd || !kv->l_hrow || !kv->l_off) {
        model_kv_free(kv);
        return base_fail(KILN_ERR_NOMEM, "out of memory");
    }
    /* a split's host layers first, in blocks of their own */
    for (int l = 0; l < kv->n_layer; l++) {
        size_t *bb = l < n_lo ? &kv->block_lo : &kv->block_bytes;
        kv->l_hkv[l] = shape->layer_n_head_kv ? shape->layer_n_head_kv[l] : shape->n_head_kv;
        kv->l_hd[l] = shape->layer_hd ? shape->layer_hd[l] : shape->hd;
        kv->l_hrow[l] = head_row_bytes(kv->l_hd[l], type);
        kv->l_off[l] = *bb;
        *bb += (kv->v_in_k ? 1 : 2) * (size_t)kv->l_hkv[l] * MODEL_KV_BLOCK * kv->l_hrow[l];
    }
    kv->n_seq = n_seq;
    kv->max_blocks_per_seq = (n_ctx + MODEL_KV_BLOCK - 1) / MODEL_KV_BLOCK;
    kv->n_blocks = kv->max_blocks_per_seq * n_seq + n_extra;
    kv->mem_bytes =
        (size_t)kv->n_blocks * MODEL_KV_BLOCK * model_kv_bytes_range(shape, type, n_lo, shape->n_attn_layer);
    kv->mem = be->map(kv->mem_bytes);
    if (!kv->mem) { return base_fail(KILN_ERR_NOMEM, "cannot reserve %zu bytes for the KV cache", kv->mem_bytes); }
    if (n_lo) {
        kv->mem_lo_bytes = (size_t)kv->n_blocks * kv->block_lo;
        if (!(kv->mem_lo = be_lo->map(kv->mem_lo_bytes))) {
            model_kv_free(kv);
            return base_fail(KILN_ERR_NOMEM, "cannot reserve %zu bytes for the KV cache's host layers",
                             kv->mem_lo_bytes);
        }
    }
    size_t nb = (size_t)kv->n_blocks;
    kv->n_bucket = 16;
    while (kv->n_bucket < kv->n_blocks) kv->n_bucket *= 2;
    kv->free_list = malloc(nb * sizeof(int32_t));
    kv->seqs = calloc((size_t)n_seq, sizeof(model_seq));
    kv->seq_blocks = calloc((size_t)n_seq, sizeof(int32_t *));
    kv->ref = calloc(nb, sizeof(int32_t));
    kv->hashed = calloc(nb, 1);
    kv->bhash = calloc(nb, sizeof(uint64_t));
    kv->btok = malloc(nb * MODEL_KV_BLOCK * sizeof(int32_t));
    if (shape->pos_cells && (!(kv->rnext = calloc(nb * MODEL_KV_BLOCK, sizeof(int32_t))) ||
                             !(kv->rbase = calloc(nb * MODEL_KV_BLOCK, sizeof(int32_t))))) {
        model_kv_free(kv);
        return base_fail(KILN_ERR_NOMEM, "out of memory");
    }
    kv->chain = malloc(nb * sizeof(int32_t));
    kv->lru_prev = malloc(nb * sizeof(int32_t));
    kv->lru_next = malloc(nb * sizeof(int32_t));
    kv->bucket = malloc((size_t)kv->n_bucket * sizeof(int32_t));
    if (!kv->free_list || !kv->seqs || !kv->seq_blocks || !kv->ref || !kv->hashed || !kv->bhash || !kv->btok ||
        !kv->chain || !kv->lru_prev || !kv->lru_next || !kv->bucket) {
        model_kv_free(kv);
        return base_fail(KILN_ERR_NOMEM, "out of memory");
    }
    for (int32_t i = 0; i < kv->n_bucket; i++) kv->bucket[i] = -1;
    kv->lru_head = kv->lru_tail = -1;
    /* hand out low block ids first so a short run touches little memory */
    for (int32_t i = 0; i < kv->n_blocks; i++) kv->free_list[i] = kv->n_blocks - 1 - i;
    kv->n_free = kv->n_blocks;
    for (int s = 0; s < n_seq; s++) {
        kv->seqs[s].blocks = kv->seq_blocks[s] = malloc((size_t)kv->max_blocks_per_seq * sizeof(int32_t));
        if (!kv->seqs[s].blocks) {
            model_kv_free(kv);
            return base_fail(KILN_ERR_NOMEM, "out of memory");
        }
    }
    return 0;
}

void model_kv_free(model_kv *kv) {
    if (kv->mem) kv->be->unmap(kv->mem, kv->mem_bytes);
    if (kv->mem_lo) kv->be_lo->unmap(kv->mem_lo, kv->mem_lo_bytes);
    if (kv->seqs)
        for (int s = 0; s < kv->n_seq; s++) free(kv->seqs[s].blocks);
    free(kv->seqs);
    free(kv->seq_blocks);
    free(kv->free_list);
    free(kv->ref);
    free(kv->hashed);
    free(kv->bhash);
    free(kv->btok);
    free(kv->rnext);
    free(kv->rbase);
    free(kv->chain);
    free(kv->lru_prev);
    free(kv->lru_next);
    free(kv->bucket);
    free(kv->l_hkv);
    free(kv->l_hd);
    free(kv->l_hrow);
    free(kv->l_off);
    memset(kv, 0, sizeof *kv);
}

/* ---- prefix table ---- */

static uint64_t mix64(uint64_t x) {
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* Key of a block: its parent's key (0 for the first block) and tokens. */
static uint64_t block_key(uint64_t parent, const int32_t *tok) {
    uint64_t h = mix64(parent ^ 0x9e3779b97f4a7c15ull);
    for (int i = 0; i < MODEL_KV_BLOCK; i++) h = mix64(h ^ (uint32_t)tok[i]);
    return h;
}

static void lru_unlink(model_kv *kv, int32_t b) {
    KILN_DASSERT(kv->n_cached > 0 && kv->ref[b] == 0 && kv->hashed[b]);
    int32_t p = kv->lru_prev[b], n = kv->lru_next[b];
    if (p >= 0)
        kv->lru_next[p] = n;
    else
        kv->lru_head = n;
    if (n >= 0)
        kv->lru_prev[n] = p;
    else
        kv->lru_tail = p;
    kv->n_cached--;
}

static void lru_push(model_kv *kv, int32_t b) {
    kv->lru_prev[b] = kv->lru_tail;
    kv->lru_next[b] = -1;
    if (kv->lru_tail >= 0)
        kv->lru_next[kv->lru_tail] = b;
    else
        kv->lru_head = b;
    kv->lru_tail = b;
    kv->n_cached++;
}

static void table_remove(model_kv *kv, int32_t b) {
    int32_t *link = &kv->bucket[kv->bhash[b] & (uint64_t)(kv->n_bucket - 1)];
    while (*link >= 0 && *link != b) link = &kv->chain[*link];
    if (*link == b) *link = kv->chain[b];
    kv->hashed[b] = 0;
}

static int32_t table_find(const model_kv *kv, uint64_t key, const int32_t *tok) {
    for (int32_t b = kv->bucket[key & (uint64_t)(kv->n_bucket - 1)]; b >= 0; b = kv->chain[b])
        if (kv->bhash[b] == key &&
            !memcmp(kv->btok + (size_t)b * MODEL_KV_BLOCK, tok, MODEL_KV_BLOCK * sizeof(int32_t)))
            return b;
    return -1;
}

#ifdef KILN_CHECKS
/* The whole cache, walked after each change in a checked build (KILN_CHECKS,
 * base.h):
 * - every block is held (ref > 0), cached (ref 0, registered, in the LRU
 *   list) or free (ref 0, unregistered, on the free list), and n_free and
 *   n_cached count the last two;
 * - a registered block sits in the chain of the bucket its key selects,
 *   once;
 * - a sequence's table holds held blocks only and covers its length, its
 *   registered prefix lies within its whole blocks, and a registered block
 *   there has the key of its parent's key and its own tokens. */
static void kv_check(const model_kv *kv) {
    KILN_ASSERT(kv->n_free >= 0 && kv->n_free <= kv->n_blocks);
    KILN_ASSERT(kv->n_cached >= 0 && kv->n_cached <= kv->n_blocks - kv->n_free);
    int32_t n_free = 0, n_cached = 0, n_hashed = 0;
    for (int32_t b = 0; b < kv->n_blocks; b++) {
        KILN_ASSERT(kv->ref[b] >= 0);
        n_free += kv->ref[b] == 0 && !kv->hashed[b];
        n_cached += kv->ref[b] == 0 && kv->hashed[b];
        n_hashed += kv->hashed[b] != 0;
    }
    KILN_ASSERT(n_free == kv->n_free && n_cached == kv->n_cached);
    for (int32_t i = 0; i < kv->n_free; i++) {
        const int32_t b = kv->free_list[i];
        KILN_ASSERT(b >= 0 && b < kv->n_blocks && kv->ref[b] == 0 && !kv->hashed[b]);
    }
    int32_t n_lru = 0, prev = -1;
    for (int32_t b = kv->lru_head; b >= 0; prev = b, b = kv->lru_next[b]) {
        KILN_ASSERT(++n_lru <= kv->n_cached && kv->lru_prev[b] == prev && kv->ref[b] == 0 && kv->hashed[b]);
    }
    KILN_ASSERT(n_lru == kv->n_cached && kv->lru_tail == prev);
    int32_t n_chained = 0;
    for (int32_t i = 0; i < kv->n_bucket; i++)
        for (int32_t b = kv->bucket[i]; b >= 0; b = kv->chain[b])
            KILN_ASSERT(++n_chained <= n_hashed && kv->hashed[b] &&
                        (kv->bhash[b] & (uint64_t)(kv->n_bucket - 1)) == (uint64_t)i);
    KILN_ASSERT(n_chained == n_hashed);
    for (int q = 0; q < kv->n_seq; q++) {
        const model_seq *s = &kv->seqs[q];
        KILN_ASSERT(s->n_blocks >= 0 && s->n_blocks <= kv->max_blocks_per_seq);
        KILN_ASSERT(s->len >= 0 && s->len <= s->n_blocks * MODEL_KV_BLOCK);
        KILN_ASSERT(s->n_hashed >= 0 && s->n_hashed <= s->len / MODEL_KV_BLOCK);
        for (int32_t i = 0; i < s->n_blocks; i++) {
            const int32_t b = s->blocks[i];
            KILN_ASSERT(b >= 0 && b < kv->n_blocks && kv->ref[b] > 0);
            if (i < s->n_hashed && kv->hashed[b])
                KILN_ASSERT(kv->bhash[b] ==
                            block_key(i ? kv->bhash[s->blocks[i - 1]] : 0, kv->btok + (size_t)b * MODEL_KV_BLOCK));
        }
    }
}
#define KV_CHECK(kv) kv_check(kv)
#else
#define KV_CHECK(kv) ((void)0)
#endif

/* A block for exclusive use: a free one, else the least recently used
 * cached one (dropped from the table).  -1 when every block is held. */
static int32_t take_block(model_kv *kv) {
    int32_t b;
    if (kv->n_free > 0) {
        b = kv->free_list[--kv->n_free];
    } else if (kv->lru_head >= 0) {
        b = kv->lru_head;
        lru_unlink(kv, b);
        table_remove(kv, b);
    } else {
        return -1;
    }
    KILN_DASSERT(kv->ref[b] == 0 && !kv->hashed[b]); /* nobody reads a block handed out */
    kv->ref[b] = 1;
    return b;
}

static void drop_block(model_kv *kv, int32_t b) {
    /* a block dropped more often than held would go to the free list while
     * a sequence still reads it */
    KILN_ASSERT(kv->ref[b] > 0);
    if (--kv->ref[b] > 0) return;
    if (kv->hashed[b])
        lru_push(kv, b);
    else {
        KILN_ASSERT(kv->n_free < kv->n_blocks);
        kv->free_list[kv->n_free++] = b;
    }
}

/* The first n cells of block src into block dst, head by head (on CUDA,
 * whose blocks are cell-major (backend/cuda.h), the block's first n cells
 * in one copy). */
static void copy_cells(model_kv *kv, int32_t dst, int32_t src, int32_t n) {
    if (kv->rnext) {
        memcpy(kv->rnext + (size_t)dst * MODEL_KV_BLOCK, kv->rnext + (size_t)src * MODEL_KV_BLOCK,
               (size_t)n * sizeof(int32_t));
        memcpy(kv->rbase + (size_t)dst * MODEL_KV_BLOCK, kv->rbase + (size_t)src * MODEL_KV_BLOCK,
               (size_t)n * sizeof(int32_t));
    }
    const int cuda = kv->be->kind == BACKEND_CUDA;
    if (cuda && kv->block_bytes)
        kv->be->copy((uint8_t *)kv->mem + (size_t)dst * kv->block_bytes,
                     (uint8_t *)kv->mem + (size_t)src * kv->block_bytes,
                     (size_t)n * (kv->block_bytes / MODEL_KV_BLOCK));
    for (int l = 0; l < (cuda ? kv->n_lo : kv->n_layer); l++) {
        const backend_backend *be = l < kv->n_lo ? kv->be_lo : kv->be;
        const size_t run = (size_t)MODEL_KV_BLOCK * kv->l_hrow[l], bytes = (size_t)n * kv->l_hrow[l];
        for (int h = 0; h < kv->l_hkv[l]; h++) {
            be->copy((uint8_t *)model_kv_kblock(kv, l, dst) + h * run, (uint8_t *)model_kv_kblock(kv, l, src) + h * run,
                     bytes);
            if (!kv->v_in_k)
                be->copy((uint8_t *)model_kv_vblock(kv, l, dst) + h * run,
                         (uint8_t *)model_kv_vblock(kv, l, src) + h * run, bytes);
        }
    }
}

int32_t model_kv_rope_next(const model_kv *kv, int seq, int32_t len) {
    if (!kv->rnext || len <= 0) return kv->rnext ? 0 : len;
    const model_seq *s = &kv->seqs[seq];
    if (len > s->len) return model_kv_rope_next(kv, seq, s->len) + (len - s->len); /* text past the cells */
    const int32_t i = len - 1;
    return kv->rnext[(size_t)s->blocks[i / MODEL_KV_BLOCK] * MODEL_KV_BLOCK + i % MODEL_KV_BLOCK];
}

int32_t model_kv_rope_base(const model_kv *kv, int seq, int32_t len) {
    const model_seq *s = &kv->seqs[seq];
    if (!kv->rbase || len <= 0 || len > s->len) return -1;
    const int32_t i = len - 1;
    return kv->rbase[(size_t)s->blocks[i / MODEL_KV_BLOCK] * MODEL_KV_BLOCK + i % MODEL_KV_BLOCK];
}

int model_kv_reserve(model_kv *kv, int seq, int32_t len) {
    model_seq *s = &kv->seqs[seq];
    int32_t need = (len + MODEL_KV_BLOCK - 1) / MODEL_KV_BLOCK;
    if (need > kv->max_blocks_per_seq) return -1;
    while (s->n_blocks < need) {
        int32_t b = take_block(kv);
        if (b < 0) return -1;
        s->blocks[s->n_blocks++] = b;
    }
    KV_CHECK(kv);
    return 0;
}

void model_kv_truncate(model_kv *kv, int seq, int32_t len) {
    model_seq *s = &kv->seqs[seq];
    if (len < s->len) s->len = len;
    int32_t keep = (s->len + MODEL_KV_BLOCK - 1) / MODEL_KV_BLOCK;
    while (s->n_blocks > keep) drop_block(kv, s->blocks[--s->n_blocks]);
    int32_t full = s->len / MODEL_KV_BLOCK;
    if (s->n_hashed > full) s->n_hashed = full;
    /* the last block is partly kept and will be written again: it must
     * stop matching its key, and other holders must keep their copy */
    int32_t part = s->len % MODEL_KV_BLOCK;
    if (part && keep > 0) {
        int32_t b = s->blocks[keep - 1];
        if (kv->ref[b] > 1) {
            int32_t nb = take_block(kv);
            if (nb < 0) { /* cannot happen (see model.h); keep whole blocks only */
                s->len = full * MODEL_KV_BLOCK;
                model_kv_truncate(kv, seq, s->len);
                return;
            }
            copy_cells(kv, nb, b, part);
            kv->ref[b]--;
            s->blocks[keep - 1] = nb;
        } else if (kv->hashed[b]) {
            table_remove(kv, b);
        }
    }
    KV_CHECK(kv);
}

int32_t model_kv_reuse(model_kv *kv, int seq, const int32_t *tokens, int32_t n, int32_t max_tokens) {
    model_seq *s = &kv->seqs[seq];
    if (s->len != 0 || s->n_blocks != 0) return 0;
    int32_t limit = n < max_tokens ? n : max_tokens;
    uint64_t parent = 0;
    int32_t nb = 0;
    while ((nb + 1) * MODEL_KV_BLOCK <= limit && nb < kv->max_blocks_per_seq) {
        const int32_t *tok = tokens + (size_t)nb * MODEL_KV_BLOCK;
        uint64_t key = block_key(parent, tok);
        int32_t b = table_find(kv, key, tok);
        kv->n_lookup_blocks++;
        if (b < 0) break;
        kv->n_hit_blocks++;
        if (kv->ref[b] == 0) lru_unlink(kv, b);
        kv->ref[b]++;
        s->blocks[nb++] = b;
        parent = key;
    }
    s->n_blocks = nb;
    s->n_hashed = nb;
    s->len = nb * MODEL_KV_BLOCK;
    KV_CHECK(kv);
    return s->len;
}

void model_kv_register(model_kv *kv, int seq, const int32_t *tokens, int32_t n) {
    model_seq *s = &kv->seqs[seq];
    if (n > s->len) n = s->len;
    int32_t full = n / MODEL_KV_BLOCK;
    for (; s->n_hashed < full; s->n_hashed++) {
        int32_t i = s->n_hashed, b = s->blocks[i];
        if (kv->hashed[b]) continue; /* attached by model_kv_reuse */
        uint64_t parent = i ? kv->bhash[s->blocks[i - 1]] : 0;
        const int32_t *tok = tokens + (size_t)i * MODEL_KV_BLOCK;
        uint64_t key = block_key(parent, tok);
        /* bhash chains the keys even for a block that stays private because
         * another sequence registered an equal one first */
        kv->bhash[b] = key;
        if (table_find(kv, key, tok) >= 0) continue;
        memcpy(kv->btok + (size_t)b * MODEL_KV_BLOCK, tok, MODEL_KV_BLOCK * sizeof(int32_t));
        int32_t *head = &kv->bucket[key & (uint64_t)(kv->n_bucket - 1)];
        kv->chain[b] = *head;
        *head = b;
        kv->hashed[b] = 1;
    }
    KV_CHECK(kv);
}

uint64_t model_kv_chain_key(const int32_t *tokens, int32_t nb) {
    uint64_t key = 0;
    for (int32_t i = 0; i < nb; i++) key = block_key(key, tokens + (size_t)i * MODEL_KV_BLOCK);
    return key;
}

void model_kv_pin(model_kv *kv, int32_t b) {
    KILN_DASSERT(kv->ref[b] > 0 || kv->hashed[b]); /* a free block holds nothing to pin */
    if (kv->ref[b]++ == 0 && kv->hashed[b]) lru_unlink(kv, b);
    KV_CHECK(kv);
}

void model_kv_unpin(model_kv *kv, int32_t b) {
    drop_block(kv, b);
    KV_CHECK(kv);
}

int32_t model_kv_copy_block(model_kv *kv, int32_t src, int32_t n) {
    KILN_DASSERT(kv->ref[src] > 0 && n >= 0 && n <= MODEL_KV_BLOCK); /* the source is held while it is read */
    int32_t b = take_block(kv);
    if (b >= 0) copy_cells(kv, b, src, n);
    return b;
}

int model_kv_fork(model_kv *kv, int src, int dst) {
    model_seq *s = &kv->seqs[src], *d = &kv->seqs[dst];
    if (d->len || d->n_blocks) return -1;
    const int32_t full = s->len / MODEL_KV_BLOCK, part = s->len % MODEL_KV_BLOCK;
    int32_t last = -1;
    if (part && (last = take_block(kv)) < 0) return -1;
    for (int32_t i = 0; i < full; i++) {
        kv->ref[s->blocks[i]]++;
        d->blocks[i] = s->blocks[i];
    }
    d->n_blocks = full;
    if (part) {
        copy_cells(kv, last, s->blocks[full], part);
        d->blocks[d->n_blocks++] = last;
    }
    d->n_hashed = s->n_hashed < full ? s->n_hashed : full;
    d->len = s->len;
    KV_CHECK(kv);
    return 0;
}

void model_kv_append_block(model_kv *kv, int seq, int32_t b, int32_t len) {
    model_seq *s = &kv->seqs[seq];
    /* b extends a table that ends at a whole block, and its cells cover
     * what the sequence holds then */
    KILN_DASSERT(s->n_blocks < kv->max_blocks_per_seq && kv->ref[b] > 0 && s->len == s->n_blocks * MODEL_KV_BLOCK &&
                 len > s->len && len <= s->len + MODEL_KV_BLOCK);
    s->blocks[s->n_blocks++] = b;
    s->len = len;
    KV_CHECK(kv);
}

/* Block-major: a block holds, layer by layer, its K then its V run
 * (n_head_kv * MODEL_KV_BLOCK head rows each; the K run alone when V is in
 * K), so a sequence's cache is its blocks and nothing else: huge pages (the
 * mapping asks for them) are filled by the blocks in use, and one TLB entry
 * covers about a block. */
/* bytes of one layer's K (or V) run in a block */
static size_t run_bytes(const model_kv *kv, int layer) {
    return (size_t)kv->l_hkv[layer] * MODEL_KV_BLOCK * kv->l_hrow[layer];
}

size_t model_kv_block_bytes(const model_kv *kv) { return kv->block_bytes; }

void model_kv_view(const model_kv *kv, backend_kv *out) { model_kv_view_part(kv, 0, out); }

void model_kv_view_part(const model_kv *kv, int lo, backend_kv *out) {
    const int l0 = lo ? 0 : kv->n_lo;
    *out = (backend_kv){
        .type = kv->type,
        .v_in_k = kv->v_in_k,
        .n_head_kv = kv->n_head_kv,
        .hd = kv->hd,
        .mem = lo ? kv->mem_lo : kv->mem,
        .block_bytes = lo ? kv->block_lo : kv->block_bytes,
        .l_hkv = kv->l_hkv + l0,
        .l_hd = kv->l_hd + l0,
        .l_hrow = kv->l_hrow + l0,
        .l_off = kv->l_off + l0,
        .blocks = kv->seq_blocks,
    };
}

void *model_kv_kblock(const model_kv *kv, int layer, int32_t b) {
    if (layer < kv->n_lo) return (uint8_t *)kv->mem_lo + (size_t)b * kv->block_lo + kv->l_off[layer];
    return (uint8_t *)kv->mem + (size_t)b * kv->block_bytes + kv->l_off[layer];
}

void *model_kv_vblock(const model_kv *kv, int layer, int32_t b) {
    return (uint8_t *)model_kv_kblock(kv, layer, b) + (kv->v_in_k ? 0 : run_bytes(kv, layer));
}

static size_t head_off(const model_kv *kv, int layer, int64_t cell, int h) {
    return ((size_t)h * MODEL_KV_BLOCK + (size_t)(cell % MODEL_KV_BLOCK)) * kv->l_hrow[layer];
}

void *model_kv_khead(const model_kv *kv, int layer, int64_t cell, int h) {
    return (uint8_t *)model_kv_kblock(kv, layer, (int32_t)(cell / MODEL_KV_BLOCK)) + head_off(kv, layer, cell, h);
}

void *model_kv_vhead(const model_kv *kv, int layer, int64_t cell, int h) {
    return (uint8_t *)model_kv_vblock(kv, layer, (int32_t)(cell / MODEL_KV_BLOCK)) + head_off(kv, layer, cell, h);
}
