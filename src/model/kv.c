/* The paged KV cache.  One anonymous mapping holds every block, so memory
 * is committed only as cells are written; blocks move between sequences
 * through a free list. */
#include "model/model.h"

#include "base/base.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

uint64_t kl_kv_bytes_per_token(const kl_hparams *hp, int type) {
    uint64_t elt = type == KILN_KV_F32 ? 4 : 2;
    return (uint64_t)hp->n_layer * (uint64_t)hp->n_head_kv * (uint64_t)(hp->hd_k + hp->hd_v) * elt;
}

int kl_kv_init(kl_kv *kv, const kl_hparams *hp, int type, int n_seq, int n_ctx, char *err, size_t errlen) {
    memset(kv, 0, sizeof *kv);
    kv->type = type;
    kv->elt = type == KILN_KV_F32 ? 4 : 2;
    kv->n_layer = hp->n_layer;
    kv->row_k = (int64_t)hp->n_head_kv * hp->hd_k;
    kv->row_v = (int64_t)hp->n_head_kv * hp->hd_v;
    kv->n_seq = n_seq;
    kv->max_blocks_per_seq = (n_ctx + KL_KV_BLOCK - 1) / KL_KV_BLOCK;
    kv->n_blocks = kv->max_blocks_per_seq * n_seq;
    kv->mem_bytes = (size_t)kv->n_blocks * KL_KV_BLOCK * kl_kv_bytes_per_token(hp, type);
    kv->mem = mmap(NULL, kv->mem_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (kv->mem == MAP_FAILED) {
        kv->mem = NULL;
        kb_errf(err, errlen, "cannot reserve %zu bytes for the KV cache", kv->mem_bytes);
        return -1;
    }
    kv->free_list = malloc((size_t)kv->n_blocks * sizeof(int32_t));
    kv->seqs = calloc((size_t)n_seq, sizeof(kl_seq));
    if (!kv->free_list || !kv->seqs) {
        kb_errf(err, errlen, "out of memory");
        kl_kv_free(kv);
        return -1;
    }
    /* hand out low block ids first so a short run touches little memory */
    for (int32_t i = 0; i < kv->n_blocks; i++) kv->free_list[i] = kv->n_blocks - 1 - i;
    kv->n_free = kv->n_blocks;
    for (int s = 0; s < n_seq; s++) {
        kv->seqs[s].blocks = malloc((size_t)kv->max_blocks_per_seq * sizeof(int32_t));
        if (!kv->seqs[s].blocks) {
            kb_errf(err, errlen, "out of memory");
            kl_kv_free(kv);
            return -1;
        }
    }
    return 0;
}

void kl_kv_free(kl_kv *kv) {
    if (kv->mem) munmap(kv->mem, kv->mem_bytes);
    if (kv->seqs)
        for (int s = 0; s < kv->n_seq; s++) free(kv->seqs[s].blocks);
    free(kv->seqs);
    free(kv->free_list);
    memset(kv, 0, sizeof *kv);
}

int kl_kv_reserve(kl_kv *kv, int seq, int32_t len) {
    kl_seq *s = &kv->seqs[seq];
    int32_t need = (len + KL_KV_BLOCK - 1) / KL_KV_BLOCK;
    if (need > kv->max_blocks_per_seq) return -1;
    while (s->n_blocks < need) {
        if (kv->n_free == 0) return -1;
        s->blocks[s->n_blocks++] = kv->free_list[--kv->n_free];
    }
    return 0;
}

void kl_kv_truncate(kl_kv *kv, int seq, int32_t len) {
    kl_seq *s = &kv->seqs[seq];
    if (len < s->len) s->len = len;
    int32_t keep = (s->len + KL_KV_BLOCK - 1) / KL_KV_BLOCK;
    while (s->n_blocks > keep) kv->free_list[kv->n_free++] = s->blocks[--s->n_blocks];
}

void *kl_kv_k(const kl_kv *kv, int layer, int64_t cell) {
    size_t n_cells = (size_t)kv->n_blocks * KL_KV_BLOCK;
    size_t off = ((size_t)layer * n_cells + (size_t)cell) * (size_t)kv->row_k;
    return (uint8_t *)kv->mem + off * kv->elt;
}

void *kl_kv_v(const kl_kv *kv, int layer, int64_t cell) {
    size_t n_cells = (size_t)kv->n_blocks * KL_KV_BLOCK;
    size_t k_total = (size_t)kv->n_layer * n_cells * (size_t)kv->row_k;
    size_t off = k_total + ((size_t)layer * n_cells + (size_t)cell) * (size_t)kv->row_v;
    return (uint8_t *)kv->mem + off * kv->elt;
}
