/* The Qwen-VL vision encoders and mergers (qwen.h).  Products on
 * kernels/conv.h's image GEMM (weights F32, F16 or BF16) or, for quantized
 * weights (a Q8_0 mmproj), the LLM's batched kern_matmul; the norms, the
 * rotary embedding and the softmax in plain loops over the patch rows.
 *
 * Patches are kept in window order: merged tokens (2 x 2 patch groups)
 * window by window, row-major inside a window and the windows row-major,
 * each group's four patches consecutive (row-major).  A windowed layer's
 * windows are then runs of rows, a full layer's the whole sequence, and
 * the merger's groups four consecutive rows; the outputs go back to
 * row-major grid order at the end.  Attention over a run takes queries
 * in chunks of VQ_QCHUNK so its scores need VQ_QCHUNK * run floats. */
#include "vision/qwen.h"

#include "vision/vision.h"

#include "base/base.h"
#include "kernels/conv.h"
#include "kernels/ops.h"
#include "quant/quant.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define VQ_QCHUNK 256
#define VQ_WINDOW_PX 112 /* Qwen2.5-VL's attention window side in pixels */

enum { VQ_Q2, VQ_Q25, VQ_Q3 };            /* qwen2vl_merger, qwen2.5vl_merger, qwen3vl_merger */
enum { VQ_GELU, VQ_GELU_QUICK, VQ_SILU }; /* the MLP's activation (clip.use_gelu / use_silu / neither) */

typedef struct vq_layer {
    const float *ln1, *ln2, *ln1_b, *ln2_b; /* [E] norm weights; biases (LayerNorm) or NULL (RMSNorm) */
    kern_mat q, k, v, o;                    /* E -> E (Qwen3-VL: row ranges of attn_qkv) */
    const float *bq, *bk, *bv, *bo;         /* [E] */
    kern_mat gate, up, down;                /* E -> F -> E; gate data NULL: not gated */
    const float *bgate, *bup, *bdown;       /* [F], [F], [E] */
    /* Qwen3-VL deepstack merger after this layer (ds_fc1.data NULL: none):
     * LayerNorm over a merged token's 4E, fc1 4E -> 4E, GELU, fc2 -> proj */
    const float *ds_norm, *ds_norm_b, *ds_b1, *ds_b2;
    kern_mat ds_fc1, ds_fc2;
} vq_layer;

struct vision_qwen {
    int kind, act;                    /* VQ_Q*, VQ_GELU* */
    int E, H, D, F, n_layer, P, proj; /* widths, heads, head size, MLP, layers, patch side, output width */
    int n_ds;                         /* deepstack mergers (Qwen3-VL): each adds proj floats to a row */
    int wa;                           /* n_wa_pattern: layer i is full when (i + 1) % wa == 0; 0: all full */
    int win;                          /* window side in merged tokens */
    float eps, mean[3], std[3];
    int64_t min_px, max_px; /* the resized image's pixel bounds */
    kern_mat patch[2];      /* E rows of 3 * P * P ([E][3][P][P]) */
    const float *patch_b;   /* [E] or NULL */
    const float *pos;       /* [n_side][n_side][E] learned positions (Qwen3-VL), or NULL */
    float *pos_owned;       /* pos when widened from F16 / BF16 at load */
    int n_side;
    vq_layer *L;
    const float *post_ln, *post_ln_b; /* [E]; bias NULL: RMSNorm */
    kern_mat mm0, mm2;                /* 4E -> 4E -> proj */
    const float *b0, *b2;
    int64_t mm_cols; /* widest quantized matrix's columns (kern_matmul's scratch); 0: all F32/F16/BF16 */
};

/* ---------------------------------------------------------------- binding */

typedef struct vq_bind {
    const gguf_file *f;
    int failed;
    char err[256];
} vq_bind;

/* The types kernels/conv.h's GEMM reads directly; others go through the
 * quant layer's matmul (kern_matmul), as the LLM's weights do. */
static int vq_gemm_type(int t) { return t == QUANT_F32 || t == QUANT_F16 || t == QUANT_BF16; }

/* Tensor name with n_dims dims of ne (unused ones 1), or NULL (err set). */
static const gguf_tensor *vq_find(vq_bind *B, const char *name, int nd, const int64_t *ne) {
    if (B->failed) return NULL;
    const gguf_tensor *t = gguf_find_tensor(B->f, name);
    if (!t) {
        snprintf(B->err, sizeof B->err, "mmproj: missing tensor %s", name);
        B->failed = 1;
        return NULL;
    }
    for (int i = 0; i < GGUF_MAX_DIMS; i++)
        if (t->ne[i] != (i < nd ? ne[i] : 1)) {
            snprintf(B->err, sizeof B->err, "mmproj: tensor %s has shape [%lld, %lld, %lld, %lld]", name,
                     (long long)t->ne[0], (long long)t->ne[1], (long long)t->ne[2], (long long)t->ne[3]);
            B->failed = 1;
            return NULL;
        }
    return t;
}

static const float *vq_vec(vq_bind *B, const char *name, int64_t n) {
    const gguf_tensor *t = vq_find(B, name, 1, &n);
    if (t && t->type != QUANT_F32) {
        snprintf(B->err, sizeof B->err, "mmproj: tensor %s is not F32", name);
        B->failed = 1;
        return NULL;
    }
    return t ? t->data : NULL;
}

/* A matrix of nrows rows of ncols (nd dims: the rows' elements may span
 * several dims, as a convolution's [P][P][3]). */
static kern_mat vq_mat(vq_bind *B, const char *name, int nd, const int64_t *ne) {
    kern_mat m = {0};
    const gguf_tensor *t = vq_find(B, name, nd, ne);
    if (!t) return m;
    int64_t ncols = 1;
    for (int i = 0; i < nd - 1; i++) ncols *= ne[i];
    /* any type the quant layer has a matmul for, rows of whole blocks */
    if (!quant_supported((int)t->type) || ncols % quant_get((int)t->type)->blck) {
        const quant_traits *tr = quant_get((int)t->type);
        snprintf(B->err, sizeof B->err, "mmproj: tensor %s has type %s, which kiln cannot compute in rows of %lld",
                 name, tr && tr->name ? tr->name : "?", (long long)ncols);
        B->failed = 1;
        return m;
    }
    m.data = t->data;
    m.type = (int)t->type;
    m.nrows = ne[nd - 1];
    m.ncols = ncols;
    return m;
}

static kern_mat vq_mat2(vq_bind *B, const char *name, int64_t ncols, int64_t nrows) {
    const int64_t ne[2] = {ncols, nrows};
    return vq_mat(B, name, 2, ne);
}

static int vq_hp(const gguf_file *f, const char *key, int64_t lo, int64_t hi, int64_t def, int *out, char *err,
                 size_t errlen) {
    const int64_t v = gguf_get_int(f, key, def);
    if (v < lo || v > hi) {
        snprintf(err, errlen, "mmproj: bad or missing %s (%lld)", key, (long long)v);
        return -1;
    }
    *out = (int)v;
    return 0;
}

kiln_status vision_qwen_load(const gguf_file *f, vision_qwen **out) {
    *out = NULL;
    char type[64], err[256];
    gguf_get_cstr(f, "clip.projector_type", type, sizeof type, "");
    vision_qwen h = {0};
    if (!strcmp(type, "qwen2vl_merger"))
        h.kind = VQ_Q2;
    else if (!strcmp(type, "qwen2.5vl_merger"))
        h.kind = VQ_Q25;
    else if (!strcmp(type, "qwen3vl_merger"))
        h.kind = VQ_Q3;
    else
        return base_fail(KILN_ERR_UNSUPPORTED, "mmproj: projector type '%s' is not a Qwen-VL merger", type);
    if (vq_hp(f, "clip.vision.embedding_length", 1, 16384, 0, &h.E, err, sizeof err) ||
        vq_hp(f, "clip.vision.attention.head_count", 1, 256, 0, &h.H, err, sizeof err) ||
        vq_hp(f, "clip.vision.feed_forward_length", 1, 65536, 0, &h.F, err, sizeof err) ||
        vq_hp(f, "clip.vision.block_count", 1, 256, 0, &h.n_layer, err, sizeof err) ||
        vq_hp(f, "clip.vision.patch_size", 1, 64, 0, &h.P, err, sizeof err) ||
        vq_hp(f, "clip.vision.projection_dim", 1, 65536, 0, &h.proj, err, sizeof err) ||
        (h.kind == VQ_Q25 && vq_hp(f, "clip.vision.n_wa_pattern", 1, 256, 0, &h.wa, err, sizeof err)))
        return base_fail(KILN_ERR_FORMAT, "%s", err);
    const int gelu = gguf_get_bool(f, "clip.use_gelu", 0), silu = gguf_get_bool(f, "clip.use_silu", 0);
    if (gelu && silu) return base_fail(KILN_ERR_FORMAT, "mmproj: clip.use_gelu and clip.use_silu both set");
    h.act = gelu ? VQ_GELU : silu ? VQ_SILU : VQ_GELU_QUICK;
    int merge = 2;
    if (vq_hp(f, "clip.vision.spatial_merge_size", 2, 2, 2, &merge, err, sizeof err))
        return base_fail(KILN_ERR_UNSUPPORTED, "%s (only 2 x 2 merging)", err);
    h.D = h.E / h.H;
    if (h.D * h.H != h.E || h.D % 4)
        return base_fail(KILN_ERR_FORMAT, "mmproj: %d heads do not split embedding_length %d into a multiple of 4", h.H,
                         h.E);
    h.eps = (float)gguf_get_float(f, "clip.vision.attention.layer_norm_epsilon", 1e-6);
    if (!(h.eps > 0.0f) || !(h.eps < 1.0f)) return base_fail(KILN_ERR_FORMAT, "mmproj: bad layer_norm_epsilon");
    const gguf_kv *mk = gguf_find(f, "clip.vision.image_mean"), *sk = gguf_find(f, "clip.vision.image_std");
    if (!mk || !sk || mk->type != GGUF_ARRAY || sk->type != GGUF_ARRAY || mk->n < 3 || sk->n < 3)
        return base_fail(KILN_ERR_FORMAT, "mmproj: missing image_mean / image_std");
    for (int c = 0; c < 3; c++) {
        h.mean[c] = (float)gguf_arr_float(mk, (uint64_t)c);
        h.std[c] = (float)gguf_arr_float(sk, (uint64_t)c);
        if (!isfinite(h.mean[c]) || !(h.std[c] > 0.0f) || !isfinite(h.std[c]))
            return base_fail(KILN_ERR_FORMAT, "mmproj: bad image_mean / image_std");
    }
    /* windows (Qwen2.5-VL): 112 px a side; one window for the others, so
     * their rows are the merged tokens row-major */
    h.win = h.kind == VQ_Q25 ? VQ_WINDOW_PX / h.P / 2 : 1 << 20;
    if (h.win < 1) h.win = 1;
    /* llama.cpp's bounds for Qwen-VL: 8 to 4096 merged tokens */
    const int64_t unit = (int64_t)h.P * 2 * h.P * 2;
    h.min_px = 8 * unit;
    h.max_px = 4096 * unit;

    vq_bind B = {f, 0, ""};
    const int64_t E = h.E, F = h.F, P = h.P;
    const int64_t pne[4] = {P, P, 3, E};
    h.patch[0] = vq_mat(&B, "v.patch_embd.weight", 4, pne);
    h.patch[1] = vq_mat(&B, "v.patch_embd.weight.1", 4, pne);
    /* the convolution's image GEMM takes float weights only */
    for (int i = 0; i < 2 && !B.failed; i++)
        if (!vq_gemm_type(h.patch[i].type)) {
            snprintf(B.err, sizeof B.err, "mmproj: the patch convolution must be F32, F16 or BF16");
            B.failed = 1;
        }
    const int ln = h.kind != VQ_Q25; /* LayerNorm with biases, else RMSNorm */
    if (gguf_find_tensor(f, "v.patch_embd.bias")) h.patch_b = vq_vec(&B, "v.patch_embd.bias", E);
    if (h.kind == VQ_Q3) {
        const gguf_tensor *pt = gguf_find_tensor(f, "v.position_embd.weight");
        h.n_side = pt ? (int)sqrt((double)pt->ne[1]) : 0;
        if (!pt || h.n_side < 1 || (int64_t)h.n_side * h.n_side != pt->ne[1] || h.n_side > 4096)
            return base_fail(KILN_ERR_FORMAT, "mmproj: missing or non-square v.position_embd.weight");
        /* F16 / BF16 tables widened once (the resize reads them as floats) */
        const kern_mat pm = vq_mat2(&B, "v.position_embd.weight", E, (int64_t)h.n_side * h.n_side);
        if (pm.data && pm.type != QUANT_F32) {
            float *w = malloc((size_t)pm.nrows * (size_t)E * sizeof *w);
            if (!w) return base_fail(KILN_ERR_NOMEM, "out of memory");
            quant_get(pm.type)->to_f32(pm.data, w, pm.nrows * E);
            h.pos = h.pos_owned = w;
        } else {
            h.pos = pm.data;
        }
    }
    vq_layer *L = calloc((size_t)h.n_layer, sizeof *L);
    if (!L) {
        free(h.pos_owned);
        return base_fail(KILN_ERR_NOMEM, "out of memory");
    }
    for (int i = 0; i < h.n_layer && !B.failed; i++) {
        vq_layer *l = &L[i];
        char n[96];
#define NAME(s) (snprintf(n, sizeof n, "v.blk.%d.%s", i, s), n)
        l->ln1 = vq_vec(&B, NAME("ln1.weight"), E);
        l->ln2 = vq_vec(&B, NAME("ln2.weight"), E);
        if (ln) {
            l->ln1_b = vq_vec(&B, NAME("ln1.bias"), E);
            l->ln2_b = vq_vec(&B, NAME("ln2.bias"), E);
        }
        if (gguf_find_tensor(f, NAME("attn_qkv.weight"))) { /* Q, K, V rows in one tensor */
            const kern_mat qkv = vq_mat2(&B, n, E, 3 * E);
            const float *b = vq_vec(&B, NAME("attn_qkv.bias"), 3 * E);
            const size_t rb = qkv.data ? quant_row_size(qkv.type, E) * (size_t)E : 0;
            l->q = l->k = l->v = qkv;
            l->q.nrows = l->k.nrows = l->v.nrows = E;
            if (qkv.data) {
                l->k.data = (const uint8_t *)qkv.data + rb;
                l->v.data = (const uint8_t *)qkv.data + 2 * rb;
            }
            l->bq = b;
            l->bk = b ? b + E : NULL;
            l->bv = b ? b + 2 * E : NULL;
        } else {
            l->q = vq_mat2(&B, NAME("attn_q.weight"), E, E);
            l->k = vq_mat2(&B, NAME("attn_k.weight"), E, E);
            l->v = vq_mat2(&B, NAME("attn_v.weight"), E, E);
            l->bq = vq_vec(&B, NAME("attn_q.bias"), E);
            l->bk = vq_vec(&B, NAME("attn_k.bias"), E);
            l->bv = vq_vec(&B, NAME("attn_v.bias"), E);
        }
        l->o = vq_mat2(&B, NAME("attn_out.weight"), E, E);
        l->bo = vq_vec(&B, NAME("attn_out.bias"), E);
        if (gguf_find_tensor(f, NAME("ffn_gate.weight"))) {
            l->gate = vq_mat2(&B, NAME("ffn_gate.weight"), E, F);
            l->bgate = vq_vec(&B, NAME("ffn_gate.bias"), F);
        }
        /* older conversions swapped up and down (llama.cpp swaps them back
         * when ffn_down reads n_embd inputs) */
        const gguf_tensor *dn = gguf_find_tensor(f, NAME("ffn_down.weight"));
        const int swapped = dn && dn->ne[0] == E && E != F;
        l->up = vq_mat2(&B, NAME(swapped ? "ffn_down.weight" : "ffn_up.weight"), E, F);
        l->bup = vq_vec(&B, NAME(swapped ? "ffn_down.bias" : "ffn_up.bias"), F);
        l->down = vq_mat2(&B, NAME(swapped ? "ffn_up.weight" : "ffn_down.weight"), F, E);
        l->bdown = vq_vec(&B, NAME(swapped ? "ffn_up.bias" : "ffn_down.bias"), E);
#undef NAME
        char d[96];
        snprintf(d, sizeof d, "v.deepstack.%d.fc1.weight", i);
        if (h.kind == VQ_Q3 && gguf_find_tensor(f, d)) {
#define DS(s) (snprintf(d, sizeof d, "v.deepstack.%d.%s", i, s), d)
            l->ds_norm = vq_vec(&B, DS("norm.weight"), 4 * E);
            l->ds_norm_b = vq_vec(&B, DS("norm.bias"), 4 * E);
            l->ds_fc1 = vq_mat2(&B, DS("fc1.weight"), 4 * E, 4 * E);
            l->ds_b1 = vq_vec(&B, DS("fc1.bias"), 4 * E);
            l->ds_fc2 = vq_mat2(&B, DS("fc2.weight"), 4 * E, h.proj);
            l->ds_b2 = vq_vec(&B, DS("fc2.bias"), h.proj);
#undef DS
            h.n_ds++;
        }
    }
    h.post_ln = vq_vec(&B, "v.post_ln.weight", E);
    if (ln) h.post_ln_b = vq_vec(&B, "v.post_ln.bias", E);
    h.mm0 = vq_mat2(&B, "mm.0.weight", 4 * E, 4 * E);
    h.b0 = vq_vec(&B, "mm.0.bias", 4 * E);
    h.mm2 = vq_mat2(&B, "mm.2.weight", 4 * E, h.proj);
    h.b2 = vq_vec(&B, "mm.2.bias", h.proj);
    if (B.failed) {
        free(L);
        free(h.pos_owned);
        return base_fail(KILN_ERR_FORMAT, "%s", B.err);
    }
    vision_qwen *q = malloc(sizeof *q);
    if (!q) {
        free(L);
        free(h.pos_owned);
        return base_fail(KILN_ERR_NOMEM, "out of memory");
    }
    *q = h;
    q->L = L;
    const kern_mat *mats[] = {&q->mm0, &q->mm2};
    for (int i = 0; i < 2; i++)
        if (!vq_gemm_type(mats[i]->type) && mats[i]->ncols > q->mm_cols) q->mm_cols = mats[i]->ncols;
    for (int l = 0; l < q->n_layer; l++) {
        const vq_layer *y = &L[l];
        const kern_mat *lm[] = {&y->q, &y->k, &y->v, &y->o, &y->gate, &y->up, &y->down, &y->ds_fc1, &y->ds_fc2};
        for (size_t i = 0; i < sizeof lm / sizeof lm[0]; i++)
            if (lm[i]->data && !vq_gemm_type(lm[i]->type) && lm[i]->ncols > q->mm_cols) q->mm_cols = lm[i]->ncols;
    }
    *out = q;
    return KILN_OK;
}

void vision_qwen_free(vision_qwen *q) {
    if (!q) return;
    free(q->pos_owned);
    free(q->L);
    free(q);
}

int vision_qwen_n_embd(const vision_qwen *q) { return q->proj * (1 + q->n_ds); }

/* ---------------------------------------------------------- preprocessing */

int vision_qwen_grid(const vision_qwen *q, int w, int h, int *rw, int *rh, int *nx, int *ny) {
    if (w <= 0 || h <= 0) return -1;
    const int a = q->P * 2;
    /* nearest multiples of a, then scaled into [min_px, max_px] keeping the
     * aspect ratio (llama.cpp's calc_size_preserved_ratio, in float) */
    int wb = (int)roundf((float)w / (float)a) * a, hb = (int)roundf((float)h / (float)a) * a;
    if (wb < a) wb = a;
    if (hb < a) hb = a;
    if ((int64_t)wb * hb > q->max_px) {
        const float beta = sqrtf((float)h * (float)w / (float)q->max_px);
        hb = (int)floorf((float)h / beta / (float)a) * a;
        wb = (int)floorf((float)w / beta / (float)a) * a;
        if (hb < a) hb = a;
        if (wb < a) wb = a;
    } else if ((int64_t)wb * hb < q->min_px) {
        const float beta = sqrtf((float)q->min_px / ((float)h * (float)w));
        hb = (int)ceilf((float)h * beta / (float)a) * a;
        wb = (int)ceilf((float)w * beta / (float)a) * a;
    }
    *rw = wb;
    *rh = hb;
    *nx = wb / a;
    *ny = hb / a;
    return 0;
}

/* Bilinear resize of RGB8 (corners aligned, each channel interpolated in
 * float along x then y and truncated, as llama.cpp's resize_bilinear). */
static void vq_bilinear(const uint8_t *src, int sw, int sh, uint8_t *dst, int dw, int dh, int dstride) {
    const float xr = dw > 1 ? (float)(sw - 1) / (float)(dw - 1) : 0.0f;
    const float yr = dh > 1 ? (float)(sh - 1) / (float)(dh - 1) : 0.0f;
    for (int y = 0; y < dh; y++)
        for (int x = 0; x < dw; x++) {
            const float px = (float)x * xr, py = (float)y * yr;
            int x0 = (int)px, y0 = (int)py;
            if (x0 > sw - 1) x0 = sw - 1;
            if (y0 > sh - 1) y0 = sh - 1;
            const int x1 = x0 + 1 < sw ? x0 + 1 : sw - 1, y1 = y0 + 1 < sh ? y0 + 1 : sh - 1;
            const float xf = px - (float)x0, yf = py - (float)y0;
            for (int c = 0; c < 3; c++) {
                const float p00 = src[((size_t)y0 * sw + x0) * 3 + c], p10 = src[((size_t)y0 * sw + x1) * 3 + c];
                const float p01 = src[((size_t)y1 * sw + x0) * 3 + c], p11 = src[((size_t)y1 * sw + x1) * 3 + c];
                const float top = p00 + (p10 - p00) * xf, bot = p01 + (p11 - p01) * xf;
                dst[((size_t)y * dstride + x) * 3 + c] = (uint8_t)(top + (bot - top) * yf);
            }
        }
}

/* The image into dw x dh as llama.cpp's Qwen-VL preprocessing does: scaled
 * by the smaller of the two ratios (sides rounded up, at most the target),
 * bilinear, centred on black. */
static void vq_resize(const uint8_t *src, int sw, int sh, uint8_t *dst, int dw, int dh) {
    const float sx = (float)dw / (float)sw, sy = (float)dh / (float)sh, sc = sx < sy ? sx : sy;
    int nw = (int)ceilf((float)sw * sc), nh = (int)ceilf((float)sh * sc);
    if (nw > dw) nw = dw;
    if (nh > dh) nh = dh;
    if (nw < 1) nw = 1;
    if (nh < 1) nh = 1;
    memset(dst, 0, (size_t)dw * dh * 3);
    const int ox = (dw - nw) / 2, oy = (dh - nh) / 2;
    vq_bilinear(src, sw, sh, dst + ((size_t)oy * dw + ox) * 3, nw, nh, dw);
}

/* ------------------------------------------------------------------ math */

/* RMSNorm of n_rows rows of n (b NULL), else LayerNorm with bias b. */
static void vq_norm(float *y, const float *x, const float *w, const float *b, int n_rows, int n, float eps) {
    for (int r = 0; r < n_rows; r++) {
        const float *xr = x + (size_t)r * n;
        float *yr = y + (size_t)r * n;
        if (!b) {
            kern_rmsnorm(yr, xr, w, n, eps);
            continue;
        }
        double s = 0, s2 = 0;
        for (int i = 0; i < n; i++) s += xr[i];
        const float mean = (float)(s / n);
        for (int i = 0; i < n; i++) s2 += (double)(xr[i] - mean) * (xr[i] - mean);
        const float inv = 1.0f / sqrtf((float)(s2 / n) + eps);
        for (int i = 0; i < n; i++) yr[i] = (xr[i] - mean) * inv * w[i] + b[i];
    }
}

/* Bilinear resize with the corners aligned of the [n_side][n_side][E]
 * position table to the ph x pw patch grid: out [ph][pw][E]. */
static void vq_pos_resize(const float *pos, int n_side, int E, int ph, int pw, float *out) {
    const float sy = ph > 1 ? (float)(n_side - 1) / (float)(ph - 1) : 0.0f;
    const float sx = pw > 1 ? (float)(n_side - 1) / (float)(pw - 1) : 0.0f;
    for (int y = 0; y < ph; y++)
        for (int x = 0; x < pw; x++) {
            const float fy = (float)y * sy, fx = (float)x * sx;
            int y0 = (int)floorf(fy), x0 = (int)floorf(fx);
            if (y0 > n_side - 1) y0 = n_side - 1;
            if (x0 > n_side - 1) x0 = n_side - 1;
            const int y1 = y0 + 1 < n_side ? y0 + 1 : n_side - 1, x1 = x0 + 1 < n_side ? x0 + 1 : n_side - 1;
            const float dy = fy - (float)y0, dx = fx - (float)x0;
            const float *p00 = pos + ((size_t)y0 * n_side + x0) * E, *p01 = pos + ((size_t)y0 * n_side + x1) * E;
            const float *p10 = pos + ((size_t)y1 * n_side + x0) * E, *p11 = pos + ((size_t)y1 * n_side + x1) * E;
            float *o = out + ((size_t)y * pw + x) * E;
            for (int e = 0; e < E; e++)
                o[e] =
                    p00[e] * (1 - dx) * (1 - dy) + p01[e] * dx * (1 - dy) + p10[e] * (1 - dx) * dy + p11[e] * dx * dy;
        }
}

/* The MLP's activation in place over n values (act VQ_*). */
static void vq_act(thread_pool *pool, int act, float *x, size_t n) {
    if (act == VQ_GELU) {
        kern_gelu_tanh(pool, x, n);
        return;
    }
    const float k = act == VQ_SILU ? 1.0f : 1.702f;
    for (size_t i = 0; i < n; i++) x[i] = x[i] / (1.0f + expf(-k * x[i]));
}

/* c [m][w's rows] = a [m][k] w^T + bias; quantized weights through
 * kern_matmul with scratch mscr (kern_matmul_scratch_size(q->mm_cols, m)) */
static void vq_linear(thread_pool *pool, const kern_mat *w, const float *bias, const float *a, int m, float *c,
                      void *mscr) {
    if (!vq_gemm_type(w->type)) {
        kern_matmul(pool, w, a, m, c, w->nrows, mscr);
        if (bias)
            for (int i = 0; i < m; i++)
                for (int64_t r = 0; r < w->nrows; r++) c[(size_t)i * w->nrows + r] += bias[r];
        return;
    }
    const kern_gemm g = {
        .m = m,
        .n = (int)w->nrows,
        .k = (int)w->ncols,
        .a = a,
        .lda = (size_t)w->ncols,
        .b_kind = KERN_GB_ROWS,
        .b = w->data,
        .b_type = w->type,
        .ldb = quant_row_size(w->type, w->ncols),
        .c = c,
        .ldc = (size_t)w->nrows,
        .bias_n = bias,
    };
    kern_gemm_run(pool, &g);
}

/* Rotates every head of n rows of x ([n][E]) by its row's table cs
 * ([n][D / 2] cos, sin pairs): pairs (i, i + D / 2). */
static void vq_rope(const vision_qwen *q, const float *cs, float *x, int n) {
    const int half = q->D / 2;
    for (int t = 0; t < n; t++)
        for (int h = 0; h < q->H; h++) {
            float *v = x + (size_t)t * q->E + (size_t)h * q->D;
            const float *c = cs + (size_t)t * q->D;
            for (int i = 0; i < half; i++) {
                const float x0 = v[i], x1 = v[i + half];
                v[i] = x0 * c[2 * i] - x1 * c[2 * i + 1];
                v[i + half] = x0 * c[2 * i + 1] + x1 * c[2 * i];
            }
        }
}

/* Attention of rows [s, e) among themselves, head by head: att = softmax(q
 * k^T / sqrt(D)) v; sc holds VQ_QCHUNK * (e - s) floats. */
static void vq_attn_run(const vision_qwen *q, thread_pool *pool, const float *qm, const float *km, const float *vm,
                        float *att, int s, int e, float *sc) {
    const int L = e - s, E = q->E, D = q->D;
    const float scale = 1.0f / sqrtf((float)D);
    for (int h = 0; h < q->H; h++)
        for (int q0 = s; q0 < e; q0 += VQ_QCHUNK) {
            const int m = e - q0 < VQ_QCHUNK ? e - q0 : VQ_QCHUNK;
            const kern_gemm qk = {
                .m = m,
                .n = L,
                .k = D,
                .a = qm + (size_t)q0 * E + (size_t)h * D,
                .lda = (size_t)E,
                .b_kind = KERN_GB_ROWS,
                .b = km + (size_t)s * E + (size_t)h * D,
                .b_type = QUANT_F32,
                .ldb = (size_t)E * sizeof(float),
                .c = sc,
                .ldc = (size_t)L,
            };
            kern_gemm_run(pool, &qk);
            for (int r = 0; r < m; r++) {
                float *row = sc + (size_t)r * L, mx = -INFINITY;
                for (int j = 0; j < L; j++) {
                    row[j] *= scale;
                    if (row[j] > mx) mx = row[j];
                }
                double sum = 0;
                for (int j = 0; j < L; j++) {
                    row[j] = expf(row[j] - mx);
                    sum += row[j];
                }
                const float inv = (float)(1.0 / sum);
                for (int j = 0; j < L; j++) row[j] *= inv;
            }
            const kern_gemm pv = {
                .m = m,
                .n = D,
                .k = L,
                .a = sc,
                .lda = (size_t)L,
                .b_kind = KERN_GB_KN,
                .b = vm + (size_t)s * E + (size_t)h * D,
                .ldb = (size_t)E,
                .c = att + (size_t)q0 * E + (size_t)h * D,
                .ldc = (size_t)E,
            };
            kern_gemm_run(pool, &pv);
        }
}

kiln_status vision_qwen_encode(const vision_qwen *q, thread_pool *pool, const uint8_t *rgb, int w, int h, float *out) {
    int rw, rh, nx, ny;
    if (!rgb || vision_qwen_grid(q, w, h, &rw, &rh, &nx, &ny))
        return base_fail(KILN_ERR_INVALID_ARG, "image of %d x %d pixels", w, h);
    const int E = q->E, F = q->F, P = q->P, pw = rw / P, ph = rh / P, n = pw * ph, nm = nx * ny;
    const int win = q->win, nwx = (nx + win - 1) / win, nwy = (ny + win - 1) / win;
    const size_t En = (size_t)n * E;
    kern_conv cv = {&q->patch[0], NULL, 3, rh, rw, P, P, P, 0};
    const size_t qc = (size_t)(n < VQ_QCHUNK ? n : VQ_QCHUNK);
    /* scratch: resized pixels, the normalized image, two patch grids, the
     * residual, its norm, q, k, v, attention, MLP gate and up, scores */
    uint8_t *px = NULL;
    float *img = base_malloc((size_t)3 * rh * rw * sizeof(float));
    float *pg = base_malloc(2 * En * sizeof(float));
    float *x = base_malloc(En * sizeof(float)), *xn = base_malloc(En * sizeof(float));
    float *qm = base_malloc(En * sizeof(float)), *km = base_malloc(En * sizeof(float)),
          *vm = base_malloc(En * sizeof(float));
    float *att = base_malloc(En * sizeof(float));
    float *g = base_malloc((size_t)n * F * sizeof(float)), *u = base_malloc((size_t)n * F * sizeof(float));
    float *sc = base_malloc(qc * (size_t)n * sizeof(float));
    float *cs = base_malloc((size_t)n * q->D * sizeof(float)), *o = base_malloc((size_t)nm * q->proj * sizeof(float));
    int32_t *unit = base_malloc((size_t)nm * sizeof(int32_t)),
            *wbeg = base_malloc(((size_t)nwx * nwy + 1) * sizeof(int32_t));
    void *cscr = base_malloc(kern_conv2d_scratch(&cv));
    void *mscr = q->mm_cols ? base_malloc(kern_matmul_scratch_size(q->mm_cols, n)) : NULL;
    kiln_status st = KILN_OK;
    if (rw != w || rh != h) px = base_malloc((size_t)rw * rh * 3);
    if (!img || !pg || !x || !xn || !qm || !km || !vm || !att || !g || !u || !sc || !cs || !o || !unit || !wbeg ||
        !cscr || (q->mm_cols && !mscr) || ((rw != w || rh != h) && !px)) {
        st = base_fail(KILN_ERR_NOMEM, "out of memory encoding a %d x %d image", rw, rh);
        goto done;
    }
    if (px) {
        vq_resize(rgb, w, h, px, rw, rh);
        rgb = px;
    }
    for (int c = 0; c < 3; c++)
        for (size_t i = 0; i < (size_t)rw * rh; i++)
            img[(size_t)c * rw * rh + i] = ((float)rgb[i * 3 + c] / 255.0f - q->mean[c]) / q->std[c];
    kern_conv2d(pool, &cv, img, pg, cscr);
    cv.wt = &q->patch[1];
    kern_conv2d(pool, &cv, img, pg + En, cscr);
    /* window order of the merged tokens, and each window's first row */
    int k = 0, nw = 0;
    for (int wy = 0; wy < ny; wy += win)
        for (int wx = 0; wx < nx; wx += win) {
            wbeg[nw++] = 4 * k;
            for (int dy = 0; dy < win && wy + dy < ny; dy++)
                for (int dx = 0; dx < win && wx + dx < nx; dx++) unit[k++] = (wy + dy) * nx + wx + dx;
        }
    wbeg[nw] = n;
    /* rows: patch sums (+ bias, + learned positions), and the rotary tables
     * of their (row, column) */
    if (q->pos) vq_pos_resize(q->pos, q->n_side, E, ph, pw, att);
    const int q4 = q->D / 4;
    const float theta_scale = powf(10000.0f, -4.0f / (float)q->D);
    for (int t = 0; t < n; t++) {
        const int uy = unit[t / 4] / nx, ux = unit[t / 4] % nx, py = 2 * uy + (t % 4) / 2, pxx = 2 * ux + t % 2;
        const size_t cell = (size_t)py * pw + pxx;
        float *xt = x + (size_t)t * E;
        for (int e = 0; e < E; e++) xt[e] = pg[(size_t)e * n + cell] + pg[En + (size_t)e * n + cell];
        if (q->patch_b)
            for (int e = 0; e < E; e++) xt[e] += q->patch_b[e];
        if (q->pos)
            for (int e = 0; e < E; e++) xt[e] += att[cell * E + e];
        float *c = cs + (size_t)t * q->D, ty = (float)py, tx = (float)pxx;
        for (int i = 0; i < q4; i++) {
            c[2 * i] = cosf(ty);
            c[2 * i + 1] = sinf(ty);
            c[2 * (q4 + i)] = cosf(tx);
            c[2 * (q4 + i) + 1] = sinf(tx);
            ty *= theta_scale;
            tx *= theta_scale;
        }
    }
    const int W = vision_qwen_n_embd(q); /* an output row: the merger's, then each deepstack merger's */
    for (int l = 0, ds = 0; l < q->n_layer; l++) {
        const vq_layer *L = &q->L[l];
        vq_norm(xn, x, L->ln1, L->ln1_b, n, E, q->eps);
        vq_linear(pool, &L->q, L->bq, xn, n, qm, mscr);
        vq_linear(pool, &L->k, L->bk, xn, n, km, mscr);
        vq_linear(pool, &L->v, L->bv, xn, n, vm, mscr);
        vq_rope(q, cs, qm, n);
        vq_rope(q, cs, km, n);
        if (!q->wa || (l + 1) % q->wa == 0)
            vq_attn_run(q, pool, qm, km, vm, att, 0, n, sc);
        else
            for (int i = 0; i < nw; i++) vq_attn_run(q, pool, qm, km, vm, att, wbeg[i], wbeg[i + 1], sc);
        vq_linear(pool, &L->o, L->bo, att, n, xn, mscr);
        for (size_t i = 0; i < En; i++) x[i] += xn[i];
        vq_norm(xn, x, L->ln2, L->ln2_b, n, E, q->eps);
        vq_linear(pool, &L->up, L->bup, xn, n, u, mscr);
        if (L->gate.data) {
            vq_linear(pool, &L->gate, L->bgate, xn, n, g, mscr);
            vq_act(pool, q->act, g, (size_t)n * F);
            for (size_t i = 0; i < (size_t)n * F; i++) g[i] *= u[i];
        } else {
            vq_act(pool, q->act, u, (size_t)n * F);
            memcpy(g, u, (size_t)n * F * sizeof(float));
        }
        vq_linear(pool, &L->down, L->bdown, g, n, xn, mscr);
        for (size_t i = 0; i < En; i++) x[i] += xn[i];
        if (L->ds_fc1.data) { /* a deepstack merger over this layer's output */
            vq_norm(xn, x, L->ds_norm, L->ds_norm_b, nm, 4 * E, q->eps);
            vq_linear(pool, &L->ds_fc1, L->ds_b1, xn, nm, att, mscr);
            kern_gelu_tanh(pool, att, (size_t)nm * 4 * E);
            vq_linear(pool, &L->ds_fc2, L->ds_b2, att, nm, o, mscr);
            ds++;
            for (int i = 0; i < nm; i++)
                memcpy(out + (size_t)unit[i] * W + (size_t)ds * q->proj, o + (size_t)i * q->proj,
                       (size_t)q->proj * sizeof(float));
        }
    }
    /* merger: four consecutive rows are one merged token's 4E inputs */
    vq_norm(xn, x, q->post_ln, q->post_ln_b, n, E, q->eps);
    vq_linear(pool, &q->mm0, q->b0, xn, nm, att, mscr);
    kern_gelu_tanh(pool, att, (size_t)nm * 4 * E);
    vq_linear(pool, &q->mm2, q->b2, att, nm, o, mscr);
    for (int i = 0; i < nm; i++)
        memcpy(out + (size_t)unit[i] * W, o + (size_t)i * q->proj, (size_t)q->proj * sizeof(float));
done:
    free(px);
    free(img);
    free(pg);
    free(x);
    free(xn);
    free(qm);
    free(km);
    free(vm);
    free(att);
    free(g);
    free(u);
    free(sc);
    free(cs);
    free(o);
    free(unit);
    free(wbeg);
    free(cscr);
    free(mscr);
    return st;
}

/* ------------------------------------------------- the projector table row */

/* vision.h's vision_proj for the three Qwen-VL mergers: the whole ViT is
 * the projector's own (vision_proj.own_vit), bound from vm->gf. */
static kiln_status qwen_bind(vision_model *vm) {
    vision_qwen *q = NULL;
    const kiln_status st = vision_qwen_load(vm->gf, &q);
    if (st) return st;
    if (vision_qwen_n_embd(q) != vm->n_embd_text) {
        const int n = vision_qwen_n_embd(q);
        vision_qwen_free(q);
        return base_fail(KILN_ERR_FORMAT, "rows of %d floats for a text model that takes %d", n, vm->n_embd_text);
    }
    vm->state = q;
    return KILN_OK;
}

static void qwen_grid(const vision_model *vm, int32_t w, int32_t h, int32_t *nx, int32_t *ny) {
    int rw, rh, x = 0, y = 0;
    if (vision_qwen_grid(vm->state, w, h, &rw, &rh, &x, &y)) x = y = 0;
    *nx = x;
    *ny = y;
}

static int32_t qwen_n_tokens(const vision_model *vm, int32_t w, int32_t h) {
    int32_t nx, ny;
    qwen_grid(vm, w, h, &nx, &ny);
    return nx * ny;
}

static kiln_status qwen_encode(vision_model *vm, thread_pool *pool, const vision_image *im, float *out) {
    return vision_qwen_encode(vm->state, pool, im->px, im->w, im->h, out);
}

static void qwen_free(vision_model *vm) {
    vision_qwen_free(vm->state);
    vm->state = NULL;
}

static void qwen_defaults(vision_hp *hp) { hp->n_merge = 2; }

#define QWEN_PROJ(ty)                                                                                              \
    {                                                                                                              \
        .type = ty, .begin = "<|vision_start|>", .end = "<|vision_end|>", .own_vit = 1, .defaults = qwen_defaults, \
        .bind = qwen_bind, .n_tokens = qwen_n_tokens, .grid = qwen_grid, .encode = qwen_encode, .free = qwen_free, \
    }
const vision_proj vision_proj_qwen2vl = QWEN_PROJ("qwen2vl_merger");
const vision_proj vision_proj_qwen25vl = QWEN_PROJ("qwen2.5vl_merger");
const vision_proj vision_proj_qwen3vl = QWEN_PROJ("qwen3vl_merger");
