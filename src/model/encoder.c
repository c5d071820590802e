/* The unpadded batch, attention and pooling shared by the encoder
 * families (encoder.h). */
#include "model/encoder.h"

#include <stdlib.h>

#include <math.h>
#include <string.h>

void model_enc_batch_init(model_enc_batch *b, const int32_t *len, int n_seq, int32_t *off, int32_t *seq) {
    b->n_seq = n_seq;
    b->len = len;
    b->off = off;
    b->seq = seq;
    b->max_len = 0;
    off[0] = 0;
    for (int s = 0; s < n_seq; s++) {
        off[s + 1] = off[s] + len[s];
        for (int32_t r = off[s]; r < off[s + 1]; r++) seq[r] = s;
        if (len[s] > b->max_len) b->max_len = len[s];
    }
    b->n_rows = off[n_seq];
}

/* One (row, head) per work item.  The scores of a row live in this
 * thread's share of the scratch, indexed by the key's position. */
static void attn_task(void *ud, int ith, int nth) {
    const model_enc_attn *a = ud;
    const model_enc_batch *b = a->b;
    const int H = a->n_head, hd = a->hd, group = a->n_head / a->n_head_kv;
    float *p = a->scratch + (size_t)ith * (size_t)b->max_len;
    long lo, hi;
    thread_pool_range((long)b->n_rows * H, ith, nth, &lo, &hi);
    for (long it = lo; it < hi; it++) {
        const int r = (int)(it / H), h = (int)(it % H), s = b->seq[r];
        const int r0 = b->off[s], t = r - r0, n = b->len[s];
        float *o = a->out + (size_t)r * a->out_stride + (size_t)h * hd;
        int u0 = 0, u1 = n; /* keys [u0, u1) */
        if (a->window >= 0) {
            u0 = t - a->window > 0 ? t - a->window : 0;
            u1 = t + a->window + 1 < n ? t + a->window + 1 : n;
        }
        const float *q = a->q + (size_t)r * a->q_stride + (size_t)h * hd;
        const size_t kh = (size_t)(h / group) * hd;
        float mx = -INFINITY;
        for (int u = u0; u < u1; u++) {
            p[u] = kern_dot_f32(q, a->k + (size_t)(r0 + u) * a->kv_stride + kh, hd) * a->scale;
            if (p[u] > mx) mx = p[u];
        }
        double sum = 0.0;
        for (int u = u0; u < u1; u++) sum += p[u] = expf(p[u] - mx);
        const float inv = (float)(1.0 / sum);
        memset(o, 0, (size_t)hd * sizeof *o);
        for (int u = u0; u < u1; u++)
            kern_scale_axpy_f32(o, 1.0f, p[u] * inv, a->v + (size_t)(r0 + u) * a->kv_stride + kh, hd);
    }
}

void model_enc_attention(thread_pool *pool, const model_enc_attn *a) { thread_pool_run(pool, attn_task, (void *)a); }

void model_enc_pool(const model_enc_batch *b, const float *x, int E, int pooling, float *out) {
    for (int s = 0; s < b->n_seq; s++) {
        const float *rows = x + (size_t)b->off[s] * E;
        float *o = out + (size_t)s * E;
        const int n = b->len[s];
        if (pooling == MODEL_POOL_MEAN) {
            for (int d = 0; d < E; d++) {
                double acc = 0.0;
                for (int t = 0; t < n; t++) acc += rows[(size_t)t * E + d];
                o[d] = (float)(acc / n);
            }
        } else {
            const int t = pooling == MODEL_POOL_LAST ? n - 1 : 0;
            memcpy(o, rows + (size_t)t * E, (size_t)E * sizeof *o);
        }
    }
}

int32_t model_enc_run_count(const int32_t *n_tokens, const int32_t *order, int32_t n, int64_t max_tokens) {
    if (n <= 0) return 0;
    int32_t c = 1;
    int64_t sum = n_tokens[order ? order[0] : 0];
    while (c < n && c < MODEL_ENC_MAX_SEQ) {
        const int32_t next = n_tokens[order ? order[c] : c];
        if (sum + next > max_tokens) break;
        sum += next;
        c++;
    }
    return c;
}

typedef struct by_len {
    int32_t n_tokens, index;
} by_len;

static int by_length(const void *a, const void *b) {
    const by_len *x = a, *y = b;
    if (x->n_tokens != y->n_tokens) return x->n_tokens < y->n_tokens ? -1 : 1;
    return x->index < y->index ? -1 : x->index > y->index;
}

int model_enc_order_by_length(const int32_t *n_tokens, int32_t begin, int32_t end, int32_t *order) {
    const int32_t n = end - begin;
    by_len *o = malloc((size_t)(n > 0 ? n : 1) * sizeof *o);
    if (!o) return -1;
    for (int32_t k = 0; k < n; k++) o[k] = (by_len){n_tokens[begin + k], begin + k};
    qsort(o, (size_t)(n > 0 ? n : 0), sizeof *o, by_length);
    for (int32_t k = 0; k < n; k++) order[k] = o[k].index;
    free(o);
    return 0;
}
