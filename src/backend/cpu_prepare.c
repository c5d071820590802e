/* The CPU backend's weight preparation (backend.h, backend_backend.prepare):
 * the interleaved copies of the matrices its kernels read fastest. */
#include "backend/cpu.h"

#include "kernels/pack.h"
#include "quant/quant.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static int can_pack(const kern_mat *w) { return w->data && !w->packed && kern_mat_interleavable(w); }

typedef struct byte_range {
    uintptr_t a, b;
} byte_range;

static int range_cmp(const void *x, const void *y) {
    const byte_range *r = x, *s = y;
    return r->a < s->a ? -1 : r->a > s->a;
}

/* Gives back the mapped pages of the copied tensors: the mapping is private
 * and read-only, so they come back from the file if touched.  Ranges are
 * merged across the alignment padding first, because a large folio of the
 * page cache mapped whole (PMD) stays mapped unless one call covers it;
 * each tensor is also dropped right after its copy, which keeps the peak
 * near one copy of the weights. */
static void drop_range(byte_range r) {
    const uintptr_t pg = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t a = (r.a + pg - 1) & ~(pg - 1), b = r.b & ~(pg - 1);
    if (b > a) madvise((void *)a, b - a, MADV_DONTNEED);
}

static void drop_ranges(byte_range *r, int n) {
    if (n <= 0) return;
    qsort(r, (size_t)n, sizeof *r, range_cmp);
    int k = 0;
    for (int i = 1; i < n; i++) {
        if (r[i].a <= r[k].b + 64) {
            if (r[i].b > r[k].b) r[k].b = r[i].b;
        } else
            r[++k] = r[i];
    }
    for (int i = 0; i <= k; i++) drop_range(r[i]);
}

/* One piece of packing: groups [g0, g1) of matrix m, whose source bytes
 * start at src. */
typedef struct pack_piece {
    uintptr_t src;
    int m;
    int64_t g0, g1;
} pack_piece;

typedef struct pack_job {
    kern_mat **mats;    /* the matrices to pack, */
    uint8_t **dst;      /* where each one's copy goes, */
    pack_piece *pieces; /* in pieces of about PACK_PIECE source bytes, by address */
    int n, n_pieces;
} pack_job;

#define PACK_PIECE (2u << 20)
#define FOLIO (2u << 20)

static int piece_cmp(const void *x, const void *y) {
    const pack_piece *a = x, *b = y;
    return a->src < b->src ? -1 : a->src > b->src;
}

/* Each thread packs one run of pieces in address order and gives back the
 * mapped source behind it as it goes, so a load's peak memory stays near
 * one copy of the weights.  It keeps the last 2 MB: where the page cache
 * holds the file in large folios, reading the next piece maps the whole
 * folio around it again. */
static void pack_task(void *ud, int ith, int nth) {
    pack_job *j = ud;
    long lo, hi;
    thread_pool_range(j->n_pieces, ith, nth, &lo, &hi);
    uintptr_t done = lo < hi ? j->pieces[lo].src : 0;
    for (long i = lo; i < hi; i++) {
        const pack_piece *pc = &j->pieces[i];
        const kern_mat *w = j->mats[pc->m];
        const kern_x8_traits *xt = kern_x8_get(w->type);
        const size_t gbytes = 8 * quant_row_size(w->type, w->ncols), nb = (size_t)(w->ncols / xt->blk);
        kern_x8_pack_matrix(w->type, (const void *)pc->src, w->ncols, 8 * (pc->g1 - pc->g0),
                            j->dst[pc->m] + (size_t)pc->g0 * nb * xt->pblock);
        const uintptr_t end = pc->src + (size_t)(pc->g1 - pc->g0) * gbytes;
        const uintptr_t upto = (i + 1 < hi ? j->pieces[i + 1].src : end) & ~(uintptr_t)(FOLIO - 1);
        if (upto > done) {
            drop_range((byte_range){done, upto});
            done = upto;
        }
    }
}

/* Copies every Q4_0, Q8_0, Q4_K and Q6_K matrix into its 8-row interleaved layout
 * (kernels/pack.h), all in
 * one anonymous mapping, and releases the mapped originals.  The caller shares a tied
 * output's copy with tok_embd (kern_get_row reads packed rows).
 * The norms and biases move too: they sit between the matrices in the
 * file, and where the page cache holds the file in large folios, touching
 * them every token would map the released matrix pages around them back
 * into the process. */
void backend_cpu_prepare(kern_mat **all, int n_all, const float ***vecs, const int64_t *vlen, int nv, void **out_mem,
                         size_t *out_bytes) {
    *out_mem = NULL;
    *out_bytes = 0;
    pack_job j = {.mats = malloc(sizeof(kern_mat *) * (size_t)(n_all ? n_all : 1)),
                  .dst = malloc(sizeof(uint8_t *) * (size_t)(n_all ? n_all : 1))};
    byte_range *dropped = malloc(sizeof *dropped * (size_t)(n_all + nv + 1));
    size_t total = 0;
    for (int i = 0; i < n_all && j.mats && j.dst && dropped; i++)
        if (can_pack(all[i])) {
            j.mats[j.n++] = all[i];
            total += (kern_x8_matrix_size(all[i]->type, all[i]->ncols, all[i]->nrows) + 63) & ~(size_t)63;
        }
    void *mem = MAP_FAILED;
    if (total) {
        for (int i = 0; i < nv; i++) total += ((size_t)vlen[i] * sizeof(float) + 63) & ~(size_t)63;
        mem = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    }
    if (mem == MAP_FAILED) { /* nothing to pack, or the plain layout stays */
        free(j.mats);
        free(j.dst);
        free(dropped);
        return;
    }
    madvise(mem, total, MADV_HUGEPAGE); /* fewer faults while filling it, fewer TLB misses after */
    uint8_t *p = mem;
    for (int i = 0; i < j.n; i++) {
        const kern_mat *w = j.mats[i];
        j.dst[i] = p;
        p += (kern_x8_matrix_size(w->type, w->ncols, w->nrows) + 63) & ~(size_t)63;
        /* only whole groups of 8 rows are copied: the last nrows % 8 stay
         * mapped (e.g. a vocabulary of 50257) */
        dropped[i].a = (uintptr_t)w->data;
        dropped[i].b = (uintptr_t)w->data + quant_row_size(w->type, w->ncols) * (size_t)(w->nrows & ~(int64_t)7);
    }
    /* the vectors first: reading them maps the large folios around them,
     * which the packing below then releases as it passes */
    int nd = j.n;
    for (int i = 0; i < nv; i++) {
        const size_t bytes = (size_t)vlen[i] * sizeof(float);
        memcpy(p, *vecs[i], bytes);
        dropped[nd].a = (uintptr_t)*vecs[i];
        dropped[nd++].b = (uintptr_t)*vecs[i] + bytes;
        *vecs[i] = (const float *)p;
        p += (bytes + 63) & ~(size_t)63;
    }
    int cap = 0;
    for (int i = 0; i < j.n; i++) {
        const size_t gbytes = 8 * quant_row_size(j.mats[i]->type, j.mats[i]->ncols);
        const int64_t per = gbytes >= PACK_PIECE ? 1 : (int64_t)(PACK_PIECE / gbytes);
        cap += (int)((j.mats[i]->nrows / 8 + per - 1) / per);
    }
    j.pieces = malloc(sizeof *j.pieces * (size_t)(cap ? cap : 1));
    if (!j.pieces) { /* the plain layout stays */
        munmap(mem, total);
        free(j.mats);
        free(j.dst);
        free(dropped);
        return;
    }
    for (int i = 0; i < j.n; i++) {
        const size_t gbytes = 8 * quant_row_size(j.mats[i]->type, j.mats[i]->ncols);
        const int64_t ng = j.mats[i]->nrows / 8;
        const int64_t per = gbytes >= PACK_PIECE ? 1 : (int64_t)(PACK_PIECE / gbytes);
        for (int64_t g = 0; g < ng; g += per)
            j.pieces[j.n_pieces++] =
                (pack_piece){(uintptr_t)j.mats[i]->data + (size_t)g * gbytes, i, g, g + per < ng ? g + per : ng};
    }
    qsort(j.pieces, (size_t)j.n_pieces, sizeof *j.pieces, piece_cmp);
    /* the pieces are independent: pack them on every CPU */
    const long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    thread_pool *pool = ncpu > 1 ? thread_pool_new(ncpu < 16 ? (int)ncpu : 16) : NULL;
    if (pool) {
        thread_pool_run(pool, pack_task, &j);
        thread_pool_free(pool);
    } else {
        pack_task(&j, 0, 1);
    }
    for (int i = 0; i < j.n; i++) j.mats[i]->packed = j.dst[i];
    free(j.pieces);
    drop_ranges(dropped, nd);
    free(dropped);
    free(j.mats);
    free(j.dst);
    *out_mem = mem;
    *out_bytes = total;
}

void backend_cpu_release(void *mem, size_t bytes) {
    if (mem) munmap(mem, bytes);
}
