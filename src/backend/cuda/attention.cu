/*
 * attention.cu — softmax(q . k * scale) v over a paged F16 KV cache, GQA.
 *
 * The cache of one layer: k and v are uint16_t (F16) [n_cells][cell_stride];
 * the row of KV head j in cell c starts at c * cell_stride + j * hd.  Cells
 * come in blocks of KCU_KV_BLOCK = 16: position t of a sequence is in cell
 * table[t / 16] * 16 + t % 16, table being the sequence's block table.
 * Query head h reads KV head h / (n_head / n_kv_head).  Queries are F32,
 * rounded to F16 before the dot (as the CPU's kern_attn_f16 does), scores and
 * the softmax in F32.  hd: even, at most KCU_ATT_MAXD.
 *
 * Decode: one query per sequence, split over the positions (split-K):
 * kcu_attn_decode writes each split's unnormalized output, maximum and sum,
 * kcu_attn_combine merges the splits.  Prefill: consecutive tokens of one
 * sequence, causal (kcu_attn_prefill); a block's warps share each 16-row
 * page of K and V through shared memory.
 *
 * The scalar twin: kern_attn_f16 with acc_f32 = 1 (src/kernels/ops.h).
 */
#include "kcu.cuh"
#include "shapes.h"

#define KCU_ATT_PAIRS (KCU_ATT_MAXD / 64) /* element pairs per lane */

/* One warp's online softmax over positions: lane l holds output elements
 * 2l + 64i and 2l + 64i + 1 (i < KCU_ATT_PAIRS). */
struct kcu_att_state {
    float m, l;
    float o[2 * KCU_ATT_PAIRS];
};

KCU_DEV void kcu_att_init(kcu_att_state *st) {
    st->m = -INFINITY;
    st->l = 0.0f;
    for (int i = 0; i < 2 * KCU_ATT_PAIRS; i++) st->o[i] = 0.0f;
}

/* The query row of head h rounded to F16 and held as lane pairs. */
KCU_DEV void kcu_att_load_q(const float *q, int hd, float qr[2 * KCU_ATT_PAIRS]) {
    const int lane = kcu_lane();
    for (int i = 0; i < KCU_ATT_PAIRS; i++) {
        const int d = 2 * lane + 64 * i;
        qr[2 * i] = d < hd ? kcu_h2f(kcu_f2h(q[d])) : 0.0f;
        qr[2 * i + 1] = d < hd ? kcu_h2f(kcu_f2h(q[d + 1])) : 0.0f;
    }
}

/* Folds position rows k, v (F16, hd elements) into st. */
KCU_DEV void kcu_att_step(kcu_att_state *st, const float qr[2 * KCU_ATT_PAIRS], const uint16_t *k, const uint16_t *v,
                          int hd, float scale) {
    const int lane = kcu_lane();
    float s = 0.0f;
    for (int i = 0; i < KCU_ATT_PAIRS; i++) {
        const int d = 2 * lane + 64 * i;
        if (d < hd) s += qr[2 * i] * kcu_h2f(k[d]) + qr[2 * i + 1] * kcu_h2f(k[d + 1]);
    }
    s = kcu_warp_sum(s) * scale;
    const float m = fmaxf(st->m, s);
    const float corr = kcu_expf(st->m - m), p = kcu_expf(s - m);
    st->m = m;
    st->l = st->l * corr + p;
    for (int i = 0; i < KCU_ATT_PAIRS; i++) {
        const int d = 2 * lane + 64 * i;
        if (d < hd) {
            st->o[2 * i] = st->o[2 * i] * corr + p * kcu_h2f(v[d]);
            st->o[2 * i + 1] = st->o[2 * i + 1] * corr + p * kcu_h2f(v[d + 1]);
        }
    }
}

/* A Q8_0 cache (KILN_KV_Q8_0): a row of hd elements is hd / 32 blocks of
 * 34 bytes, an F16 scale then 32 int8 values; element d is
 * (int8)row[(d / 32) * 34 + 2 + d % 32] times block d / 32's scale. */
KCU_DEV float kcu_q8_elem(const uint8_t *row, int d) {
    const uint8_t *b = row + (d >> 5) * 34;
    return kcu_h2f(kcu_ld_u16(b)) * (float)(int8_t)b[2 + (d & 31)];
}

/* The query row of head h quantized to Q8_0 blocks as the CPU's
 * kern_attn_q8 does (the reference quantizer: scale amax / 127 stored as
 * F16, values rounded), held dequantized as lane pairs.  Block 2i + (lane
 * >= 16) is the half-warp's: its maximum by shuffles within the half. */
KCU_DEV void kcu_att_load_q_q8(const float *q, int hd, float qr[2 * KCU_ATT_PAIRS]) {
    const int lane = kcu_lane();
    for (int i = 0; i < KCU_ATT_PAIRS; i++) {
        const int d = 2 * lane + 64 * i;
        const float x0 = d < hd ? q[d] : 0.0f, x1 = d < hd ? q[d + 1] : 0.0f;
        float amax = fmaxf(fabsf(x0), fabsf(x1));
        for (int m = 8; m > 0; m >>= 1) amax = fmaxf(amax, kcu_shfl_xor(amax, m));
        const float s = amax / 127.0f, id = s != 0.0f ? 1.0f / s : 0.0f, sd = kcu_h2f(kcu_f2h(s));
        qr[2 * i] = roundf(x0 * id) * sd;
        qr[2 * i + 1] = roundf(x1 * id) * sd;
    }
}

/* kcu_att_step over Q8_0 rows. */
KCU_DEV void kcu_att_step_q8(kcu_att_state *st, const float qr[2 * KCU_ATT_PAIRS], const uint8_t *k, const uint8_t *v,
                             int hd, float scale) {
    const int lane = kcu_lane();
    float s = 0.0f;
    for (int i = 0; i < KCU_ATT_PAIRS; i++) {
        const int d = 2 * lane + 64 * i;
        if (d < hd) s += qr[2 * i] * kcu_q8_elem(k, d) + qr[2 * i + 1] * kcu_q8_elem(k, d + 1);
    }
    s = kcu_warp_sum(s) * scale;
    const float m = fmaxf(st->m, s);
    const float corr = kcu_expf(st->m - m), p = kcu_expf(s - m);
    st->m = m;
    st->l = st->l * corr + p;
    for (int i = 0; i < KCU_ATT_PAIRS; i++) {
        const int d = 2 * lane + 64 * i;
        if (d < hd) {
            st->o[2 * i] = st->o[2 * i] * corr + p * kcu_q8_elem(v, d);
            st->o[2 * i + 1] = st->o[2 * i + 1] * corr + p * kcu_q8_elem(v, d + 1);
        }
    }
}

/* Split s of query head blockIdx.x of sequence blockIdx.z:
 *   q      [n_seq][n_head][hd] F32, sequences q_stride floats apart
 *   tables [n_seq][table_stride] block ids; n_kv[n_seq] positions each sees
 *   part   [n_seq][n_head][n_split][hd + 2]: the split's output sum, then
 *          its maximum score and its sum of weights (0 when it had none)
 * Positions [s * split_len, (s + 1) * split_len) go to split s = blockIdx.y;
 * window > 0 keeps only the last window positions a query sees (sliding
 * window: those before go to no split);
 * n_split = gridDim.y.  blockDim.x = 32 * KCU_ATT_WARPS. */
template <int Q8, typename T>
KCU_DEV void kcu_attn_decode_t(const float *q, int64_t q_stride, const T *k, const T *v, int64_t cell_stride,
                               const int32_t *tables, int table_stride, const int32_t *n_kv, int n_head, int n_kv_head,
                               int hd, float scale, int split_len, int window, float *part) {
    __shared__ float sm_o[KCU_ATT_WARPS][KCU_ATT_MAXD];
    __shared__ float sm_ml[KCU_ATT_WARPS][2];
    const int h = (int)blockIdx.x, split = (int)blockIdx.y, seq = (int)blockIdx.z;
    const int warp = (int)(threadIdx.x >> 5), lane = kcu_lane();
    const int kvh = h / (n_head / n_kv_head);
    const int32_t *table = tables + (int64_t)seq * table_stride;
    const int n = n_kv[seq];
    const int lo = window > 0 && n > window ? n - window : 0;
    const int t0 = max(split * split_len, lo), t1 = min(n, split * split_len + split_len);
    float qr[2 * KCU_ATT_PAIRS];
    if (Q8)
        kcu_att_load_q_q8(q + (int64_t)seq * q_stride + (int64_t)h * hd, hd, qr);
    else
        kcu_att_load_q(q + (int64_t)seq * q_stride + (int64_t)h * hd, hd, qr);
    kcu_att_state st;
    kcu_att_init(&st);
    const int64_t head_row = Q8 ? (int64_t)(hd / 32) * 34 : hd; /* elements of T */
    for (int t = t0 + warp; t < t1; t += KCU_ATT_WARPS) {
        const int64_t cell = (int64_t)table[t / KCU_KV_BLOCK] * KCU_KV_BLOCK + t % KCU_KV_BLOCK;
        const int64_t off = cell * cell_stride + (int64_t)kvh * head_row;
        if (Q8)
            kcu_att_step_q8(&st, qr, (const uint8_t *)(k + off), (const uint8_t *)(v + off), hd, scale);
        else
            kcu_att_step(&st, qr, (const uint16_t *)(k + off), (const uint16_t *)(v + off), hd, scale);
    }
    for (int i = 0; i < KCU_ATT_PAIRS; i++) {
        const int d = 2 * lane + 64 * i;
        if (d < hd) {
            sm_o[warp][d] = st.o[2 * i];
            sm_o[warp][d + 1] = st.o[2 * i + 1];
        }
    }
    if (lane == 0) {
        sm_ml[warp][0] = st.m;
        sm_ml[warp][1] = st.l;
    }
    kcu_sync();
    float m = -INFINITY;
    for (int w = 0; w < KCU_ATT_WARPS; w++) m = fmaxf(m, sm_ml[w][0]);
    float *out = part + (((int64_t)seq * n_head + h) * gridDim.y + split) * (hd + 2);
    for (int d = (int)threadIdx.x; d < hd; d += (int)blockDim.x) {
        float o = 0.0f;
        for (int w = 0; w < KCU_ATT_WARPS; w++)
            if (sm_ml[w][1] > 0.0f) o += sm_o[w][d] * kcu_expf(sm_ml[w][0] - m);
        out[d] = o;
    }
    if (threadIdx.x == 0) {
        float l = 0.0f;
        for (int w = 0; w < KCU_ATT_WARPS; w++)
            if (sm_ml[w][1] > 0.0f) l += sm_ml[w][1] * kcu_expf(sm_ml[w][0] - m);
        out[hd] = m;
        out[hd + 1] = l;
    }
}

KCU_KERNEL void kcu_attn_decode(const float *q, int64_t q_stride, const uint16_t *k, const uint16_t *v,
                                int64_t cell_stride, const int32_t *tables, int table_stride, const int32_t *n_kv,
                                int n_head, int n_kv_head, int hd, float scale, int split_len, int window,
                                float *part) {
    kcu_attn_decode_t<0>(q, q_stride, k, v, cell_stride, tables, table_stride, n_kv, n_head, n_kv_head, hd, scale,
                         split_len, window, part);
}

/* The same over a Q8_0 cache: k, v and cell_stride in bytes; hd a multiple
 * of 32. */
KCU_KERNEL void kcu_attn_decode_q8(const float *q, int64_t q_stride, const uint8_t *k, const uint8_t *v,
                                   int64_t cell_stride, const int32_t *tables, int table_stride, const int32_t *n_kv,
                                   int n_head, int n_kv_head, int hd, float scale, int split_len, int window,
                                   float *part) {
    kcu_attn_decode_t<1>(q, q_stride, k, v, cell_stride, tables, table_stride, n_kv, n_head, n_kv_head, hd, scale,
                         split_len, window, part);
}

/* out [n_seq][n_head][hd] (sequences out_stride floats apart) from the
 * n_split partials of kcu_attn_decode; sinks [n_head] (NULL: none) adds
 * each head's sink logit to its softmax, with no value (kern_attn_inv).
 * grid = (n_head, n_seq), any blockDim.x. */
KCU_KERNEL void kcu_attn_combine(const float *part, int n_split, int n_head, int hd, const float *sinks, float *out,
                                 int64_t out_stride) {
    const int h = (int)blockIdx.x, seq = (int)blockIdx.y;
    const float *p = part + ((int64_t)seq * n_head + h) * n_split * (hd + 2);
    float m = sinks ? sinks[h] : -INFINITY;
    for (int s = 0; s < n_split; s++)
        if (p[s * (hd + 2) + hd + 1] > 0.0f) m = fmaxf(m, p[s * (hd + 2) + hd]);
    float l = sinks ? kcu_expf(sinks[h] - m) : 0.0f;
    for (int s = 0; s < n_split; s++) {
        const float *ps = p + s * (hd + 2);
        if (ps[hd + 1] > 0.0f) l += ps[hd + 1] * kcu_expf(ps[hd] - m);
    }
    const float inv = l > 0.0f ? 1.0f / l : 0.0f;
    float *o = out + (int64_t)seq * out_stride + (int64_t)h * hd;
    for (int d = (int)threadIdx.x; d < hd; d += (int)blockDim.x) {
        float acc = 0.0f;
        for (int s = 0; s < n_split; s++) {
            const float *ps = p + s * (hd + 2);
            if (ps[hd + 1] > 0.0f) acc += ps[d] * kcu_expf(ps[hd] - m);
        }
        o[d] = acc * inv;
    }
}

/* Causal attention for n_tok consecutive tokens of one sequence: token u
 * sees positions [0, n_past + u].  q and out [n_tok][n_head][hd], tokens
 * tok_stride floats apart; table the sequence's block table.
 * grid = (ceil(n_tok / KCU_ATT_WARPS), n_head); blockDim.x = 32 *
 * KCU_ATT_WARPS; warp w takes token blockIdx.x * KCU_ATT_WARPS + w. */
KCU_KERNEL void kcu_attn_prefill(const float *q, int64_t tok_stride, const uint16_t *k, const uint16_t *v,
                                 int64_t cell_stride, const int32_t *table, int n_past, int n_tok, int n_head,
                                 int n_kv_head, int hd, float scale, float *out) {
    __shared__ uint16_t sk[KCU_KV_BLOCK][KCU_ATT_MAXD];
    __shared__ uint16_t sv[KCU_KV_BLOCK][KCU_ATT_MAXD];
    const int h = (int)blockIdx.y, warp = (int)(threadIdx.x >> 5), lane = kcu_lane();
    const int kvh = h / (n_head / n_kv_head);
    const int u0 = (int)blockIdx.x * KCU_ATT_WARPS, u = u0 + warp;
    const int last = min(n_tok, u0 + KCU_ATT_WARPS) - 1; /* the block's last token */
    const int n_end = n_past + last + 1;                 /* positions it must read */
    const int mine = u < n_tok ? n_past + u + 1 : 0;     /* positions this warp's token sees */
    float qr[2 * KCU_ATT_PAIRS];
    kcu_att_load_q(q + (int64_t)(u < n_tok ? u : last) * tok_stride + (int64_t)h * hd, hd, qr);
    kcu_att_state st;
    kcu_att_init(&st);
    for (int b = 0; b * KCU_KV_BLOCK < n_end; b++) {
        const int64_t cell0 = (int64_t)table[b] * KCU_KV_BLOCK;
        const int rows = min(KCU_KV_BLOCK, n_end - b * KCU_KV_BLOCK);
        for (int i = (int)threadIdx.x; i < rows * hd; i += (int)blockDim.x) {
            const int r = i / hd, d = i % hd;
            const int64_t off = (cell0 + r) * cell_stride + (int64_t)kvh * hd + d;
            sk[r][d] = k[off];
            sv[r][d] = v[off];
        }
        kcu_sync();
        for (int r = 0; r < rows && b * KCU_KV_BLOCK + r < mine; r++) kcu_att_step(&st, qr, sk[r], sv[r], hd, scale);
        kcu_sync();
    }
    if (u < n_tok) {
        float *o = out + (int64_t)u * tok_stride + (int64_t)h * hd;
        const float inv = 1.0f / st.l;
        for (int i = 0; i < KCU_ATT_PAIRS; i++) {
            const int d = 2 * lane + 64 * i;
            if (d < hd) {
                o[d] = st.o[2 * i] * inv;
                o[d + 1] = st.o[2 * i + 1] * inv;
            }
        }
    }
}
