#include "kernels/matmul.h"

#include "kernels/level.h"

#include "kernels/pack.h"
#include "quant/quant.h"

#include <stdatomic.h>
#include <string.h>

/* Rows handled together: one tile of weights stays in cache while every
 * token of the batch passes over it. */
#define ROW_TILE 16
#define MAX_OUTS KERN_MM_MAX_OUTS
#define MAX_ACT_TYPES 2
/* Jobs with at most this many activation elements are converted on the
 * calling thread: cheaper than a pool hand-off (decode steps). */
#define QUANT_INLINE_MAX 16384
/* Interleaved (pack.h) path: unpacked weights take it from this batch size
 * on; tokens per kernel call and bytes of weights packed per call (stack
 * buffers of 8 KB and 16 KB). */
#define X8_MIN_TOK 4
#define X8_TOK 256
#define X8_PACK_BYTES 16384
#define MAX_X8 2

int kern_mat_interleavable(const kern_mat *w) {
    const kern_x8_traits *xt = kern_x8_get(w->type);
    /* a SIMD level without interleaved kernels of its own (aarch64's) keeps
     * the plain rows for its vec_dot: the scalar interleaved ones are slower */
    const kern_level *l = kern_level_best();
    if (quant_active_isa() > QUANT_ISA_SCALAR && l->x8 == &kern_x8_scalar) return 0;
    return xt && w->nrows >= 8 && w->ncols % xt->blk == 0;
}

size_t kern_matmul_scratch_size(int64_t ncols, int n_tok) {
    /* the widest activation format is F32 (4 bytes/element); Q8 formats
     * are smaller.  Room for two formats covers a job mixing types. */
    return (size_t)MAX_ACT_TYPES * (size_t)n_tok * (size_t)ncols * 4 + 64 +
           (size_t)MAX_X8 * ((size_t)n_tok * (size_t)(ncols / 32) * sizeof(kern_act8) + 64);
}

typedef struct mm_out_info {
    int act;           /* index into act[] */
    kern_tile_fn tile; /* block kernel, NULL = none */
    int x8;            /* index into x8t[] + 1, 0 = not interleaved */
    int t0, nt;        /* the activation rows it takes */
} mm_out_info;

typedef struct mm_job {
    const kern_mm_out *outs;
    int n_out;
    const float *x;
    int n_tok;
    int64_t ncols;
    /* activation formats in use and their converted rows */
    int act_type[MAX_ACT_TYPES];
    const uint8_t *act[MAX_ACT_TYPES];
    size_t act_row[MAX_ACT_TYPES];
    int n_act;
    struct mm_out_info *oi;            /* [n_out] per output */
    const kern_x8_traits *x8t[MAX_X8]; /* interleaved formats in use, */
    kern_x8_fn x8fn[MAX_X8];           /* their kernels */
    kern_x8_dec_fn x8dec[MAX_X8];      /* and one-token kernels over groups */
    uint8_t *x8act[MAX_X8];            /* and [block][token] activations */
    int n_x8;
    int64_t total_rows;
    /* row tiles are handed out in pieces from this counter (dot_task), so a
     * thread that starts late (preempted on a busy machine) takes fewer */
    atomic_long next_tile; /* the first row tile nobody has taken */
} mm_job;

/* The scalar level: the reference vec_dot per output. */
void kern_tile_f16_ref(int n, const void *w, size_t wrow, int nr, const void *a, size_t arow, int nt, float *y,
                       int64_t ldy) {
    const quant_vec_dot_fn dot = quant_get(QUANT_F16)->vec_dot_ref;
    for (int t = 0; t < nt; t++)
        for (int r = 0; r < nr; r++)
            dot(n, &y[t * ldy + r], (const uint8_t *)w + (size_t)r * wrow, (const uint8_t *)a + (size_t)t * arow);
}

static void quantize_task(void *ud, int ith, int nth) {
    mm_job *j = ud;
    long lo, hi;
    const int n_fmt = j->n_act + j->n_x8;
    thread_pool_range((long)j->n_tok * n_fmt, ith, nth, &lo, &hi);
    for (long i = lo; i < hi; i++) {
        int a = (int)(i / j->n_tok);
        int t = (int)(i % j->n_tok);
        if (a >= j->n_act) {
            const kern_x8_traits *xt = j->x8t[a - j->n_act];
            xt->act(j->x + (int64_t)t * j->ncols, j->ncols, j->x8act[a - j->n_act] + (size_t)t * xt->ablock,
                    (size_t)j->n_tok);
            continue;
        }
        const quant_traits *tr = quant_get(j->act_type[a]);
        tr->from_f32_fast(j->x + (int64_t)t * j->ncols, (void *)(j->act[a] + (size_t)t * j->act_row[a]), j->ncols);
    }
}

/* Rows [a, b) (multiples of 8) of output o through its interleaved kernel. */
static void x8_rows(mm_job *j, int o, int64_t a, int64_t b) {
    const kern_mat *w = j->outs[o].w;
    const int x = j->oi[o].x8 - 1;
    const kern_x8_traits *xt = j->x8t[x];
    const kern_x8_fn fn = j->x8fn[x];
    const uint8_t *act = j->x8act[x] + (size_t)j->oi[o].t0 * xt->ablock;
    const int nb = (int)(w->ncols / xt->blk);
    const int chunk = (int)(X8_PACK_BYTES / xt->pblock);
    const size_t wrow = quant_row_size(w->type, w->ncols);
    float *y = j->outs[o].y;
    const int64_t ldy = j->outs[o].ldy;
    const int n_tok = j->oi[o].nt, stride = j->n_tok;
    if (w->packed && n_tok == 1 && j->x8dec[x]) { /* decode: the piece's groups in one call */
        j->x8dec[x]((int)((b - a) / 8), nb, (const uint8_t *)w->packed + (size_t)(a / 8) * (size_t)nb * xt->pblock, act,
                    (size_t)stride, y + a);
        return;
    }
    float acc[X8_TOK * 8];
    _Alignas(64) uint8_t pk[X8_PACK_BYTES];
    for (int64_t g = a; g < b; g += 8) {
        for (int t0 = 0; t0 < n_tok; t0 += X8_TOK) {
            const int nt = n_tok - t0 < X8_TOK ? n_tok - t0 : X8_TOK;
            /* one token (decode) sums straight into y */
            float *dst = nt == 1 ? y + (int64_t)t0 * ldy + g : acc;
            /* per token, a fixed 32 bytes: one variable-length memset
             * became rep stos, 3 % of an 8-token decode step */
            for (int t = 0; t < nt; t++) memset(dst + 8 * t, 0, 8 * sizeof(float));
            if (w->packed) {
                const uint8_t *wp = (const uint8_t *)w->packed + (size_t)(g / 8) * (size_t)nb * xt->pblock;
                fn(nb, wp, act + (size_t)t0 * xt->ablock, (size_t)stride, nt, dst);
            } else {
                for (int b0 = 0; b0 < nb; b0 += chunk) {
                    const int kb = nb - b0 < chunk ? nb - b0 : chunk;
                    xt->pack((const uint8_t *)w->data + (size_t)g * wrow, wrow, b0, kb, pk);
                    fn(kb, pk, act + ((size_t)b0 * (size_t)stride + (size_t)t0) * xt->ablock, (size_t)stride, nt, dst);
                }
            }
            if (dst == acc)
                for (int t = 0; t < nt; t++) memcpy(y + (int64_t)(t0 + t) * ldy + g, acc + 8 * t, 8 * sizeof(float));
        }
    }
}

/* Rows [r0, r1) of the concatenated outputs. */
static void dot_rows(mm_job *j, int64_t r0, int64_t r1) {
    int64_t base = 0;
    for (int o = 0; o < j->n_out && r0 < r1; o++) {
        const kern_mat *w = j->outs[o].w;
        int64_t end = base + w->nrows;
        if (r0 < end) {
            int64_t a = r0 - base, b = (r1 < end ? r1 : end) - base;
            if (j->oi[o].x8) { /* whole groups interleaved, the last nrows % 8 rows plain */
                const int64_t n8 = w->nrows & ~(int64_t)7;
                if (a < n8) x8_rows(j, o, a, b < n8 ? b : n8);
                if (b <= n8) {
                    r0 = base + b;
                    base = end;
                    continue;
                }
                if (a < n8) a = n8;
            }
            const quant_traits *tr = quant_get(w->type);
            size_t wrow = quant_row_size(w->type, w->ncols);
            size_t arow = j->act_row[j->oi[o].act];
            const uint8_t *act = j->act[j->oi[o].act] + (size_t)j->oi[o].t0 * arow;
            const int n_tok = j->oi[o].nt;
            float *y = j->outs[o].y;
            int64_t ldy = j->outs[o].ldy;
            kern_tile_fn tile = j->oi[o].tile;
            if (tile) /* the whole piece: the kernel blocks its rows itself */
                tile((int)w->ncols, (const uint8_t *)w->data + (size_t)a * wrow, wrow, (int)(b - a), act, arow, n_tok,
                     y + a, ldy);
            for (int64_t rt = a; !tile && rt < b; rt += ROW_TILE) {
                int64_t re = rt + ROW_TILE < b ? rt + ROW_TILE : b;
                for (int t = 0; t < n_tok; t++) {
                    const void *xa = act + (size_t)t * arow;
                    float *yt = y + (int64_t)t * ldy;
                    for (int64_t r = rt; r < re; r++)
                        tr->vec_dot((int)w->ncols, &yt[r], (const uint8_t *)w->data + (size_t)r * wrow, xa);
                }
            }
            r0 = base + b;
        }
        base = end;
    }
}

/* Guided split: a thread takes half its fair share of what is left (at
 * least one tile), so pieces shrink toward the end and the threads finish
 * within a small piece of each other; early pieces stay long, so the
 * weight stream of each is long too. */
static void dot_task(void *ud, int ith, int nth) {
    (void)ith;
    mm_job *j = ud;
    const long n_tiles = (long)((j->total_rows + ROW_TILE - 1) / ROW_TILE);
    long lo = atomic_load_explicit(&j->next_tile, memory_order_relaxed);
    for (;;) {
        if (lo >= n_tiles) break;
        long take = (n_tiles - lo) / (2L * nth);
        if (take < 1) take = 1;
        const long hi = lo + take < n_tiles ? lo + take : n_tiles;
        if (!atomic_compare_exchange_weak_explicit(&j->next_tile, &lo, hi, memory_order_relaxed, memory_order_relaxed))
            continue; /* lo now holds the current value */
        dot_rows(j, lo * ROW_TILE, hi * ROW_TILE < j->total_rows ? hi * ROW_TILE : j->total_rows);
        lo = atomic_load_explicit(&j->next_tile, memory_order_relaxed);
    }
}

void kern_matmul_multi(thread_pool *pool, const kern_mm_out *outs, int n_out, const float *x, int n_tok,
                       void *scratch) {
    kern_matmul_ranges(pool, outs, NULL, NULL, n_out, x, n_tok, scratch);
}

void kern_matmul_ranges(thread_pool *pool, const kern_mm_out *outs, const int32_t *t0, const int32_t *nt, int n_out,
                        const float *x, int n_tok, void *scratch) {
    mm_out_info oi[MAX_OUTS];
    const int isa = quant_active_isa(); /* the block kernel beside the vec_dot of the same level */
    mm_job j;
    memset(&j, 0, sizeof j);
    atomic_init(&j.next_tile, 0);
    j.oi = oi;
    j.outs = outs;
    j.n_out = n_out;
    j.x = x;
    j.n_tok = n_tok;
    j.ncols = outs[0].w->ncols;
    uint8_t *sp = scratch;
    for (int o = 0; o < n_out; o++) {
        const kern_mat *w = outs[o].w;
        oi[o] = (mm_out_info){0, NULL, 0, nt ? t0[o] : 0, nt ? nt[o] : n_tok};
        /* x8 needs 8-row groups that start at multiples of 8 in the
         * concatenated rows, which the 16-row tiles then keep whole */
        const kern_x8_traits *xt = kern_x8_get(w->type);
        if (kern_mat_interleavable(w) && j.total_rows % 8 == 0 && (w->packed || oi[o].nt >= X8_MIN_TOK)) {
            int f = 0;
            while (f < j.n_x8 && j.x8t[f] != xt) f++;
            if (f == j.n_x8) {
                j.x8t[f] = xt;
                j.x8fn[f] = kern_x8_best(w->type);
                j.x8dec[f] = kern_x8_dec_best(w->type);
                j.x8act[f] = sp;
                sp += ((size_t)n_tok * (size_t)(j.ncols / xt->blk) * xt->ablock + 63) & ~(size_t)63;
                j.n_x8++;
            }
            oi[o].x8 = f + 1;
            if (w->nrows % 8 == 0) {
                j.total_rows += w->nrows;
                continue;
            } /* else the last rows also need the plain format */
        }
        int vt = quant_get(outs[o].w->type)->vec_dot_type;
        int a = 0;
        while (a < j.n_act && j.act_type[a] != vt) a++;
        if (a == j.n_act) {
            j.act_type[a] = vt;
            j.act_row[a] = quant_row_size(vt, j.ncols);
            if (vt == QUANT_F32) {
                j.act[a] = (const uint8_t *)x; /* already in the right format */
            } else {
                j.act[a] = sp;
                sp += (j.act_row[a] * (size_t)n_tok + 63) & ~(size_t)63;
            }
            j.n_act++;
        }
        oi[o].act = a;
        oi[o].tile = isa > QUANT_ISA_SCALAR ? kern_tile_at(outs[o].w->type, isa) : NULL;
        j.total_rows += outs[o].w->nrows;
    }
    /* only non-F32 formats need converting */
    mm_job q = j;
    q.n_act = 0;
    for (int a = 0; a < j.n_act; a++) {
        if (j.act_type[a] == QUANT_F32) continue;
        q.act_type[q.n_act] = j.act_type[a];
        q.act[q.n_act] = j.act[a];
        q.act_row[q.n_act] = j.act_row[a];
        q.n_act++;
    }
    if (q.n_act || q.n_x8) {
        if ((int64_t)n_tok * j.ncols <= QUANT_INLINE_MAX)
            quantize_task(&q, 0, 1);
        else
            thread_pool_run(pool, quantize_task, &q);
    }
    thread_pool_run_shared(pool, dot_task, &j);
}

void kern_matmul(thread_pool *pool, const kern_mat *w, const float *x, int n_tok, float *y, int64_t ldy,
                 void *scratch) {
    kern_mm_out o = {w, y, ldy};
    kern_matmul_multi(pool, &o, 1, x, n_tok, scratch);
}

void kern_get_row(const kern_mat *w, int64_t r, float *out) {
    if (w->packed && r < (w->nrows & ~(int64_t)7)) { /* row r is lane r % 8 of its group's blocks */
        const kern_x8_traits *xt = kern_x8_get(w->type);
        const int nb = (int)(w->ncols / xt->blk);
        xt->get_row((const uint8_t *)w->packed + (size_t)(r / 8) * (size_t)nb * xt->pblock, (int)(r % 8), nb, out);
        return;
    }
    size_t rs = quant_row_size(w->type, w->ncols);
    quant_get(w->type)->to_f32((const uint8_t *)w->data + (size_t)r * rs, out, w->ncols);
}
