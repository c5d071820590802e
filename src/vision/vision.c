/*
 * The mmproj reader, the projector table, preprocessing and the SigLIP-style
 * ViT the projectors share (vision.h).
 *
 * ViT, per image (n patches of n_embd):
 *   x = patch_conv(pix) + patch_b + pos[p]        (pre_ln when the file has it)
 *   per block:  x += Wo attn(Wq ln1(x) + bq, Wk .. + bk, Wv .. + bv) + bo
 *               x += down(act(up ln2(x) + b_up)) + b_down
 *   x = post_ln(x)                                  (when the file has it)
 * with full bidirectional attention over the patches, score scale
 * 1 / sqrt(n_embd / n_head), layer norms with clip.vision.attention.
 * layer_norm_epsilon.  Files converted before llama.cpp fixed its naming
 * hold ffn_up and ffn_down swapped; as llama.cpp does, a down matrix that
 * takes n_embd inputs is read as the up one (biases with it).
 */
#include "vision/vision.h"

#include "base/base.h"
#include "gguf/check.h"
#include "kernels/ops.h"
#include "quant/quant.h"

#include <math.h>
#include <openssl/sha.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern const vision_proj vision_proj_gemma3;
extern const vision_proj vision_proj_qwen2vl, vision_proj_qwen25vl, vision_proj_qwen3vl;

/* The projector types kiln runs, one row each. */
static const vision_proj *const k_projs[] = {
    &vision_proj_gemma3,
    &vision_proj_qwen2vl,
    &vision_proj_qwen25vl,
    &vision_proj_qwen3vl,
};

/* Sanity bounds on a file's hyperparameters (the largest released encoders
 * are far inside them). */
#define VISION_MAX_EMBD 16384
#define VISION_MAX_LAYERS 256
#define VISION_MAX_IMAGE 4096
#define VISION_MAX_PATCH 64

/* ------------------------------------------------------------- binding */

static void bind_fail(vision_binder *B, kiln_status st, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void bind_fail(vision_binder *B, kiln_status st, const char *fmt, ...) {
    if (B->st) return;
    va_list ap;
    va_start(ap, fmt);
    B->st = base_vfail(st, fmt, ap);
    va_end(ap);
}

static const gguf_tensor *bind_tensor(vision_binder *B, const char *name, int dims, const int64_t *ne, int optional) {
    const gguf_tensor *t = NULL;
    if (!B->st) B->st = gguf_tensor_check(B->gf, name, dims, ne, optional, &t);
    return t;
}

const float *vision_bind_vec(vision_binder *B, const char *name, int64_t n, int optional) {
    const gguf_tensor *t = bind_tensor(B, name, 1, &n, optional);
    if (!t) return NULL;
    if (t->type != QUANT_F32) {
        bind_fail(B, KILN_ERR_FORMAT, "tensor %s must be F32", name);
        return NULL;
    }
    return t->data;
}

kern_mat vision_bind_mat(vision_binder *B, const char *name, int64_t ncols, int64_t nrows, int optional) {
    kern_mat w = {0};
    const int64_t ne[2] = {ncols, nrows};
    const gguf_tensor *t = bind_tensor(B, name, 2, ne, optional);
    if (!t) return w;
    if (ncols % quant_get((int)t->type)->blck) {
        bind_fail(B, KILN_ERR_FORMAT, "tensor %s: %lld columns are not whole blocks", name, (long long)ncols);
        return w;
    }
    w.data = t->data;
    w.type = (int)t->type;
    w.ncols = ncols;
    w.nrows = nrows;
    return w;
}

/* ----------------------------------------------------------------- load */

static kiln_status read_hparams(vision_model *vm) {
    const gguf_file *gf = vm->gf;
    vision_hp *hp = &vm->hp;
    const int64_t n_embd = gguf_get_int(gf, "clip.vision.embedding_length", -1);
    const int64_t n_head = gguf_get_int(gf, "clip.vision.attention.head_count", -1);
    const int64_t n_ff = gguf_get_int(gf, "clip.vision.feed_forward_length", -1);
    const int64_t n_layer = gguf_get_int(gf, "clip.vision.block_count", -1);
    const int64_t img = gguf_get_int(gf, "clip.vision.image_size", -1);
    const int64_t patch = gguf_get_int(gf, "clip.vision.patch_size", -1);
    const int64_t merge = gguf_get_int(gf, "clip.vision.projector.scale_factor", hp->n_merge);
    const double eps = gguf_get_float(gf, "clip.vision.attention.layer_norm_epsilon", -1.0);
    if (n_embd < 1 || n_embd > VISION_MAX_EMBD || n_head < 1 || n_embd % n_head || n_ff < 1 ||
        n_ff > 4 * VISION_MAX_EMBD || n_layer < 1 || n_layer > VISION_MAX_LAYERS) {
        return base_fail(KILN_ERR_FORMAT,
                         "bad or missing clip.vision sizes (embedding %lld, heads %lld, ffn %lld, blocks %lld)",
                         (long long)n_embd, (long long)n_head, (long long)n_ff, (long long)n_layer);
    }
    if (patch < 1 || patch > VISION_MAX_PATCH || img < patch || img > VISION_MAX_IMAGE || img % patch || merge < 1 ||
        (img / patch) % merge) {
        return base_fail(KILN_ERR_FORMAT, "bad clip.vision image_size %lld / patch_size %lld / scale_factor %lld",
                         (long long)img, (long long)patch, (long long)merge);
    }
    if (!(eps > 0.0 && eps < 1.0)) {
        return base_fail(KILN_ERR_FORMAT, "bad or missing clip.vision.attention.layer_norm_epsilon");
    }
    hp->n_embd = (int32_t)n_embd;
    hp->n_head = (int32_t)n_head;
    hp->n_ff = (int32_t)n_ff;
    hp->n_layer = (int32_t)n_layer;
    hp->image_size = (int32_t)img;
    hp->patch_size = (int32_t)patch;
    hp->n_merge = (int32_t)merge;
    hp->eps = (float)eps;
    const char *keys[2] = {"clip.vision.image_mean", "clip.vision.image_std"};
    float *dst[2] = {hp->mean, hp->std};
    for (int a = 0; a < 2; a++) {
        const gguf_kv *kv = gguf_find(gf, keys[a]);
        if (!kv || kv->type != GGUF_ARRAY || kv->n < 3 || kv->arr_type == GGUF_STRING || kv->arr_type == GGUF_ARRAY) {
            return base_fail(KILN_ERR_FORMAT, "missing or bad %s (3 numbers)", keys[a]);
        }
        for (int c = 0; c < 3; c++) {
            const double v = gguf_arr_float(kv, (uint64_t)c);
            if (!isfinite(v) || (a == 1 && !(v > 1e-6))) { return base_fail(KILN_ERR_FORMAT, "bad %s value", keys[a]); }
            dst[a][c] = (float)v;
        }
    }
    const int gelu = gguf_get_bool(gf, "clip.use_gelu", 0), silu = gguf_get_bool(gf, "clip.use_silu", 0);
    if (gelu && silu) { return base_fail(KILN_ERR_FORMAT, "clip.use_gelu and clip.use_silu are both set"); }
    hp->act = gelu ? VISION_ACT_GELU : silu ? VISION_ACT_SILU : VISION_ACT_GELU_QUICK;
    return 0;
}

static kiln_status bind_vit(vision_model *vm) {
    const vision_hp *hp = &vm->hp;
    vision_binder B = {vm->gf, KILN_OK};
    const int64_t E = hp->n_embd, F = hp->n_ff, P = hp->patch_size, side = hp->image_size / hp->patch_size;
    /* the convolution [n_embd][3][P][P] read as n_embd rows of 3 P P */
    const int64_t ne4[4] = {P, P, 3, E};
    const gguf_tensor *pt = gguf_find_tensor(vm->gf, "v.patch_embd.weight");
    if (!pt || pt->n_dims != 4 || memcmp(pt->ne, ne4, sizeof ne4) || !quant_supported((int)pt->type) ||
        (3 * P * P) % quant_get((int)pt->type)->blck) {
        return base_fail(KILN_ERR_FORMAT, "missing or bad tensor v.patch_embd.weight (expected [%lld, %lld, 3, %lld])",
                         (long long)P, (long long)P, (long long)E);
    }
    vm->patch = (kern_mat){pt->data, (int)pt->type, 3 * P * P, E, NULL};
    vm->patch_b = vision_bind_vec(&B, "v.patch_embd.bias", E, 1);
    vm->pos = vision_bind_mat(&B, "v.position_embd.weight", E, side * side, 0);
    vm->post_ln_w = vision_bind_vec(&B, "v.post_ln.weight", E, 1);
    vm->post_ln_b = vision_bind_vec(&B, "v.post_ln.bias", E, 1);
    if (B.st) return B.st;
    if (gguf_find_tensor(vm->gf, "v.pre_ln.weight")) {
        return base_fail(KILN_ERR_UNSUPPORTED, "a pre-layernorm ViT (v.pre_ln) is not supported");
    }
    vm->layers = base_calloc((size_t)hp->n_layer, sizeof *vm->layers);
    if (!vm->layers) { return base_fail(KILN_ERR_NOMEM, "out of memory"); }
    char nm[96];
#define VEC(field, suffix, n, opt) \
    (snprintf(nm, sizeof nm, "v.blk.%d.%s", l, suffix), L->field = vision_bind_vec(&B, nm, n, opt))
#define MAT(field, suffix, c, r) \
    (snprintf(nm, sizeof nm, "v.blk.%d.%s", l, suffix), L->field = vision_bind_mat(&B, nm, c, r, 0))
    for (int l = 0; l < hp->n_layer && !B.st; l++) {
        vision_layer *L = &vm->layers[l];
        MAT(wq, "attn_q.weight", E, E);
        MAT(wk, "attn_k.weight", E, E);
        MAT(wv, "attn_v.weight", E, E);
        MAT(wo, "attn_out.weight", E, E);
        VEC(bq, "attn_q.bias", E, 1);
        VEC(bk, "attn_k.bias", E, 1);
        VEC(bv, "attn_v.bias", E, 1);
        VEC(bo, "attn_out.bias", E, 1);
        VEC(ln1_w, "ln1.weight", E, 0);
        VEC(ln1_b, "ln1.bias", E, 1);
        VEC(ln2_w, "ln2.weight", E, 0);
        VEC(ln2_b, "ln2.bias", E, 1);
        /* up [F][E], down [E][F]; swapped names hold down as [F][E] */
        snprintf(nm, sizeof nm, "v.blk.%d.ffn_down.weight", l);
        const gguf_tensor *dt = gguf_find_tensor(vm->gf, nm);
        const int swapped = dt && dt->n_dims == 2 && dt->ne[0] == E && E != F;
        const char *up = swapped ? "ffn_down" : "ffn_up", *down = swapped ? "ffn_up" : "ffn_down";
        char s1[32], s2[32], s3[32], s4[32];
        snprintf(s1, sizeof s1, "%s.weight", up);
        snprintf(s2, sizeof s2, "%s.bias", up);
        snprintf(s3, sizeof s3, "%s.weight", down);
        snprintf(s4, sizeof s4, "%s.bias", down);
        MAT(up, s1, E, F);
        VEC(b_up, s2, F, 1);
        MAT(down, s3, F, E);
        VEC(b_down, s4, E, 1);
    }
#undef VEC
#undef MAT
    return B.st;
}

kiln_status vision_load(const char *path, int32_t n_embd_text, vision_model **out) {
    *out = NULL;
    gguf_file *gf;
    kiln_status st = gguf_open(path, &gf);
    if (st) return base_fail(st, "projector %s", kiln_last_error());
    return vision_load_gguf(gf, path, n_embd_text, out);
}

kiln_status vision_load_gguf(gguf_file *gf, const char *path, int32_t n_embd_text, vision_model **out) {
    *out = NULL;
    char arch[32], type[64];
    if (strcmp(gguf_get_cstr(gf, "general.architecture", arch, sizeof arch, ""), "clip") ||
        !gguf_get_bool(gf, "clip.has_vision_encoder", 0)) {
        gguf_close(gf);
        return base_fail(KILN_ERR_FORMAT,
                         "projector %s: not a vision projector (general.architecture \"clip\" with "
                         "clip.has_vision_encoder)",
                         path);
    }
    if (!gguf_get_cstr(gf, "clip.projector_type", type, sizeof type, NULL) &&
        !gguf_get_cstr(gf, "clip.vision.projector_type", type, sizeof type, NULL)) {
        gguf_close(gf);
        return base_fail(KILN_ERR_FORMAT, "projector %s: no clip.projector_type", path);
    }
    const vision_proj *proj = NULL;
    for (size_t i = 0; i < sizeof k_projs / sizeof k_projs[0]; i++)
        if (!strcmp(k_projs[i]->type, type)) proj = k_projs[i];
    if (!proj) {
        gguf_close(gf);
        return base_fail(KILN_ERR_UNSUPPORTED, "projector %s: projector type \"%s\" is not supported", path, type);
    }
    vision_model *vm = base_calloc(1, sizeof *vm);
    if (!vm) {
        gguf_close(gf);
        return base_fail(KILN_ERR_NOMEM, "out of memory");
    }
    vm->gf = gf;
    vm->proj = proj;
    vm->n_embd_text = n_embd_text;
    pthread_mutex_init(&vm->mu, NULL);
    if (proj->defaults) proj->defaults(&vm->hp);
    kiln_status st = read_hparams(vm);
    if (!st && !proj->own_vit) st = bind_vit(vm);
    if (!st) st = proj->bind(vm);
    if (st) {
        char err[512];
        snprintf(err, sizeof err, "%s", kiln_last_error());
        vision_free(vm);
        return base_fail(st, "projector %s: %s", path, err);
    }
    *out = vm;
    return KILN_OK;
}

void vision_free(vision_model *vm) {
    if (!vm) return;
    if (vm->proj && vm->proj->free) vm->proj->free(vm);
    for (int i = 0; i < VISION_CACHE; i++) free(vm->cache[i].rows);
    free(vm->layers);
    pthread_mutex_destroy(&vm->mu);
    gguf_close(vm->gf);
    free(vm);
}

int32_t vision_n_tokens(const vision_model *vm, const vision_image *im) { return vm->proj->n_tokens(vm, im->w, im->h); }

kiln_status vision_encode(vision_model *vm, thread_pool *pool, const vision_image *im, float *out) {
    if (!im || !im->px || im->w < 1 || im->h < 1 || im->w > VISION_MAX_SIDE || im->h > VISION_MAX_SIDE ||
        (int64_t)im->w * im->h > VISION_MAX_PIXELS)
        return base_fail(KILN_ERR_INVALID_ARG, "image of %d x %d pixels: each side must be 1..%d and at most %d pixels",
                         im ? im->w : 0, im ? im->h : 0, VISION_MAX_SIDE, (int)VISION_MAX_PIXELS);
    thread_pool *own = NULL;
    if (!pool && !(pool = own = thread_pool_new(0))) return base_fail(KILN_ERR_NOMEM, "out of memory");
    pthread_mutex_lock(&vm->mu);
    kiln_status st = vm->proj->encode(vm, pool, im, out);
    pthread_mutex_unlock(&vm->mu);
    thread_pool_free(own);
    return st;
}

/* -------------------------------------------------------- preprocessing */

void vision_preprocess_square(const vision_image *im, int32_t size, const float mean[3], const float std[3],
                              float *out) {
    const int W = im->w, H = im->h;
    /* the scaled size: the longer side fills the square, the other rounds up */
    int nw = size, nh = size, ox = 0, oy = 0;
    if (W != size || H != size) {
        const float sw = (float)size / (float)W, sh = (float)size / (float)H, s = sw < sh ? sw : sh;
        nw = (int)ceilf((float)W * s);
        nh = (int)ceilf((float)H * s);
        if (nw > size) nw = size;
        if (nh > size) nh = size;
        if (nw < 1) nw = 1;
        if (nh < 1) nh = 1;
        ox = (size - nw) / 2;
        oy = (size - nh) / 2;
    }
    const size_t plane = (size_t)size * (size_t)size;
    /* black padding, normalized */
    for (int c = 0; c < 3; c++) {
        const float v = (0.0f - mean[c]) / std[c];
        for (size_t i = 0; i < plane; i++) out[c * plane + i] = v;
    }
    const float xr = nw > 1 ? (float)(W - 1) / (float)(nw - 1) : 0.0f;
    const float yr = nh > 1 ? (float)(H - 1) / (float)(nh - 1) : 0.0f;
    for (int y = 0; y < nh; y++) {
        for (int x = 0; x < nw; x++) {
            uint8_t px[3];
            if (nw == W && nh == H) {
                memcpy(px, im->px + ((size_t)y * W + x) * 3, 3);
            } else {
                const float fx = (float)x * xr, fy = (float)y * yr;
                int x0 = (int)fx, y0 = (int)fy;
                if (x0 > W - 1) x0 = W - 1;
                if (y0 > H - 1) y0 = H - 1;
                const int x1 = x0 + 1 < W ? x0 + 1 : W - 1, y1 = y0 + 1 < H ? y0 + 1 : H - 1;
                const float ax = fx - (float)x0, ay = fy - (float)y0;
                const uint8_t *p00 = im->px + ((size_t)y0 * W + x0) * 3, *p10 = im->px + ((size_t)y0 * W + x1) * 3;
                const uint8_t *p01 = im->px + ((size_t)y1 * W + x0) * 3, *p11 = im->px + ((size_t)y1 * W + x1) * 3;
                for (int c = 0; c < 3; c++) {
                    const float top = (float)p00[c] + ((float)p10[c] - (float)p00[c]) * ax;
                    const float bot = (float)p01[c] + ((float)p11[c] - (float)p01[c]) * ax;
                    px[c] = (uint8_t)(top + (bot - top) * ay);
                }
            }
            const size_t o = (size_t)(y + oy) * size + (size_t)(x + ox);
            for (int c = 0; c < 3; c++) out[c * plane + o] = ((float)px[c] / 255.0f - mean[c]) / std[c];
        }
    }
}

/* ------------------------------------------------------------------ ViT */

static void add_bias(float *x, const float *b, int n_rows, int n) {
    if (!b) return;
    for (int i = 0; i < n_rows; i++)
        for (int e = 0; e < n; e++) x[(size_t)i * n + e] += b[e];
}

static void act_rows(float *x, size_t n, int act) {
    switch (act) {
    case VISION_ACT_GELU: kern_gelu(x, (int)n); break;
    case VISION_ACT_GELU_QUICK:
        for (size_t i = 0; i < n; i++) x[i] = x[i] / (1.0f + expf(-1.702f * x[i]));
        break;
    default:
        for (size_t i = 0; i < n; i++) x[i] = x[i] / (1.0f + expf(-x[i]));
        break;
    }
}

/* Query rows one attention pass scores at once (bounds the score buffer). */
#define VIT_QCHUNK 256

kiln_status vision_vit_run(vision_model *vm, thread_pool *pool, const float *pix, int32_t w, int32_t h, float *out) {
    const vision_hp *hp = &vm->hp;
    const int P = hp->patch_size, E = hp->n_embd, F = hp->n_ff, NH = hp->n_head, D = E / NH;
    const int npx = w / P, npy = h / P, n = npx * npy, K = 3 * P * P;
    if (w % P || h % P || n != vm->pos.nrows)
        return base_fail(KILN_ERR_INVALID_ARG, "image of %d x %d does not fit the encoder", w, h);
    const int qc = n < VIT_QCHUNK ? n : VIT_QCHUNK;
    int64_t maxc = K > F ? K : F;
    if (E > maxc) maxc = E;
    if (n > maxc) maxc = n;
    const size_t nE = (size_t)n * E;
    float *xn = base_malloc(nE * sizeof(float)), *q = base_malloc(nE * sizeof(float)),
          *k = base_malloc(nE * sizeof(float));
    float *v = base_malloc(nE * sizeof(float)), *att = base_malloc(nE * sizeof(float));
    float *big = base_malloc((size_t)n * (F > K ? F : K) * sizeof(float)); /* patches, then the FFN's rows */
    float *kh = base_malloc((size_t)n * D * sizeof(float)), *vt = base_malloc((size_t)n * D * sizeof(float));
    float *qh = base_malloc((size_t)qc * D * sizeof(float)), *sc = base_malloc((size_t)qc * n * sizeof(float));
    float *oh = base_malloc((size_t)qc * D * sizeof(float));
    void *scratch = base_malloc(kern_matmul_scratch_size(maxc, n));
    kiln_status st = KILN_OK;
    if (!xn || !q || !k || !v || !att || !big || !kh || !vt || !qh || !sc || !oh || !scratch) {
        st = base_fail(KILN_ERR_NOMEM, "out of memory encoding an image");
        goto done;
    }
    /* patches [n][3][P][P] */
    for (int py = 0; py < npy; py++)
        for (int px = 0; px < npx; px++) {
            float *row = big + ((size_t)py * npx + px) * K;
            for (int c = 0; c < 3; c++)
                for (int ky = 0; ky < P; ky++)
                    memcpy(row + (c * P + ky) * P, pix + (size_t)c * w * h + (size_t)(py * P + ky) * w + px * P,
                           (size_t)P * sizeof(float));
        }
    float *x = out; /* the residual stream lives in the caller's buffer */
    kern_matmul(pool, &vm->patch, big, n, x, E, scratch);
    add_bias(x, vm->patch_b, n, E);
    for (int i = 0; i < n; i++) {
        kern_get_row(&vm->pos, i, xn);
        for (int e = 0; e < E; e++) x[(size_t)i * E + e] += xn[e];
    }
    const float scale = 1.0f / sqrtf((float)D);
    for (int l = 0; l < hp->n_layer; l++) {
        const vision_layer *L = &vm->layers[l];
        for (int i = 0; i < n; i++)
            kern_layernorm(xn + (size_t)i * E, x + (size_t)i * E, L->ln1_w, L->ln1_b, E, hp->eps);
        kern_mm_out qkv[3] = {{&L->wq, q, E}, {&L->wk, k, E}, {&L->wv, v, E}};
        kern_matmul_multi(pool, qkv, 3, xn, n, scratch);
        add_bias(q, L->bq, n, E);
        add_bias(k, L->bk, n, E);
        add_bias(v, L->bv, n, E);
        for (int hh = 0; hh < NH; hh++) {
            /* K of the head as n rows of D; V transposed, D rows of n */
            for (int i = 0; i < n; i++) {
                memcpy(kh + (size_t)i * D, k + (size_t)i * E + hh * D, (size_t)D * sizeof(float));
                for (int d = 0; d < D; d++) vt[(size_t)d * n + i] = v[(size_t)i * E + hh * D + d];
            }
            const kern_mat km = {kh, QUANT_F32, D, n, NULL}, vm_t = {vt, QUANT_F32, n, D, NULL};
            for (int i0 = 0; i0 < n; i0 += qc) {
                const int nq = n - i0 < qc ? n - i0 : qc;
                for (int i = 0; i < nq; i++)
                    memcpy(qh + (size_t)i * D, q + (size_t)(i0 + i) * E + hh * D, (size_t)D * sizeof(float));
                kern_matmul(pool, &km, qh, nq, sc, n, scratch);
                for (int i = 0; i < nq; i++) {
                    float *s = sc + (size_t)i * n;
                    for (int j = 0; j < n; j++) s[j] *= scale;
                    kern_softmax(s, n);
                }
                kern_matmul(pool, &vm_t, sc, nq, oh, D, scratch);
                for (int i = 0; i < nq; i++)
                    memcpy(att + (size_t)(i0 + i) * E + hh * D, oh + (size_t)i * D, (size_t)D * sizeof(float));
            }
        }
        kern_matmul(pool, &L->wo, att, n, xn, E, scratch);
        add_bias(xn, L->bo, n, E);
        for (size_t i = 0; i < nE; i++) x[i] += xn[i];
        for (int i = 0; i < n; i++)
            kern_layernorm(xn + (size_t)i * E, x + (size_t)i * E, L->ln2_w, L->ln2_b, E, hp->eps);
        kern_matmul(pool, &L->up, xn, n, big, F, scratch);
        add_bias(big, L->b_up, n, F);
        act_rows(big, (size_t)n * F, hp->act);
        kern_matmul(pool, &L->down, big, n, xn, E, scratch);
        add_bias(xn, L->b_down, n, E);
        for (size_t i = 0; i < nE; i++) x[i] += xn[i];
    }
    if (vm->post_ln_w)
        for (int i = 0; i < n; i++)
            kern_layernorm(x + (size_t)i * E, x + (size_t)i * E, vm->post_ln_w, vm->post_ln_b, E, hp->eps);
done:
    free(xn);
    free(q);
    free(k);
    free(v);
    free(att);
    free(big);
    free(kh);
    free(vt);
    free(qh);
    free(sc);
    free(oh);
    free(scratch);
    return st;
}

/* -------------------------------------------------------------- prompts */

void vision_prompt_free(vision_prompt *p) {
    if (!p) return;
    free(p->tok);
    free(p->embd);
    free(p->mpos);
    memset(p, 0, sizeof *p);
}

/* Appends the tokens of text[0..len) to p (grown as needed). */
static kiln_status push_text(const vision_text *tx, vision_prompt *p, int32_t *cap, const char *text, size_t len,
                             int add, int special) {
    if (!len && !add) return KILN_OK;
    if (!tx->tok || (!text && len)) return base_fail(KILN_ERR_INVALID_ARG, "bad tokenize arguments");
    int32_t n = tok_encode(tx->tok, text ? text : "", len, add, special, NULL, 0);
    if (n == TOK_ERR_NOMEM) return base_fail(KILN_ERR_NOMEM, "out of memory while tokenizing");
    if (n < 0) n = -n;
    if (p->n_tok + n > *cap) {
        int32_t nc = (p->n_tok + n) * 2 + 16;
        int32_t *t = base_realloc(p->tok, (size_t)nc * sizeof *t);
        if (!t) return base_fail(KILN_ERR_NOMEM, "out of memory");
        p->tok = t;
        *cap = nc;
    }
    int32_t got = tok_encode(tx->tok, text ? text : "", len, add, special, p->tok + p->n_tok, n);
    if (got != n) return base_fail(KILN_ERR_INTERNAL, "the tokenizer gave %d tokens, then %d", n, got);
    p->n_tok += n;
    return KILN_OK;
}

/* Copies the cached rows of the image keyed (key, w, h) into out: 1, or 0
 * when they are not cached. */
static int cache_get(vision_model *vm, const uint8_t key[32], int32_t w, int32_t h, int32_t n, float *out) {
    int hit = 0;
    pthread_mutex_lock(&vm->mu);
    for (int i = 0; i < VISION_CACHE && !hit; i++) {
        struct vision_cached *e = &vm->cache[i];
        if (e->rows && e->n == n && e->w == w && e->h == h && !memcmp(e->key, key, 32)) {
            memcpy(out, e->rows, (size_t)n * (size_t)vm->n_embd_text * sizeof(float));
            e->used = ++vm->tick;
            hit = 1;
        }
    }
    pthread_mutex_unlock(&vm->mu);
    return hit;
}

/* Keeps a copy of rows in place of the least recently used entry. */
static kiln_status cache_put(vision_model *vm, const uint8_t key[32], int32_t w, int32_t h, int32_t n,
                             const float *rows) {
    const size_t bytes = (size_t)n * (size_t)vm->n_embd_text * sizeof(float);
    float *copy = base_malloc(bytes);
    if (!copy) return base_fail(KILN_ERR_NOMEM, "out of memory");
    memcpy(copy, rows, bytes);
    pthread_mutex_lock(&vm->mu);
    struct vision_cached *lru = &vm->cache[0];
    for (int i = 1; i < VISION_CACHE; i++)
        if (vm->cache[i].used < lru->used) lru = &vm->cache[i];
    free(lru->rows);
    memcpy(lru->key, key, 32);
    lru->w = w;
    lru->h = h;
    lru->n = n;
    lru->rows = copy;
    lru->used = ++vm->tick;
    pthread_mutex_unlock(&vm->mu);
    return KILN_OK;
}

/* The first VISION_MARKER in s[0..n), or NULL. */
static const char *find_marker(const char *s, size_t n) {
    const size_t ml = sizeof VISION_MARKER - 1;
    for (size_t i = 0; s && i + ml <= n; i++)
        if (s[i] == '<' && !memcmp(s + i, VISION_MARKER, ml)) return s + i;
    return NULL;
}

/* The pixels of image in (an encoded one decoded into *owned, freed by the caller). */
static kiln_status image_pixels(const kiln_image_input *in, vision_image *im, uint8_t **owned) {
    *owned = NULL;
    if (!in->data) return base_fail(KILN_ERR_INVALID_ARG, "an image has no data");
    if (in->width > 0 || in->height > 0) {
        if (in->width < 1 || in->height < 1 || in->width > VISION_MAX_SIDE || in->height > VISION_MAX_SIDE ||
            (int64_t)in->width * in->height > VISION_MAX_PIXELS)
            return base_fail(KILN_ERR_INVALID_ARG,
                             "image of %d x %d pixels: each side must be 1..%d, at most %d pixels", in->width,
                             in->height, VISION_MAX_SIDE, (int)VISION_MAX_PIXELS);
        if (in->len != (size_t)in->width * (size_t)in->height * 3)
            return base_fail(KILN_ERR_INVALID_ARG, "raw image of %d x %d needs %zu bytes, got %zu", in->width,
                             in->height, (size_t)in->width * (size_t)in->height * 3, in->len);
        *im = (vision_image){in->width, in->height, in->data};
        return KILN_OK;
    }
    vision_rgb rgb;
    kiln_status st = vision_decode(in->data, in->len, &rgb);
    if (st != KILN_OK) return st;
    *owned = rgb.px;
    *im = (vision_image){rgb.w, rgb.h, rgb.px};
    return KILN_OK;
}

/* The prompt's M-RoPE rows (kiln_batch_inputs.mpos): text -1, image i's
 * token r * nx + c (0, r, c, 0) from its first token img_at[i]. */
static kiln_status fill_mpos(vision_prompt *out, int32_t n_images, const int32_t *img_at, const int32_t *img_nx,
                             const int32_t *img_ny) {
    out->mpos = base_malloc((size_t)out->n_tok * 4 * sizeof *out->mpos);
    if (!out->mpos) return base_fail(KILN_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < (size_t)out->n_tok * 4; i++) out->mpos[i] = -1;
    for (int32_t i = 0; i < n_images; i++)
        for (int32_t k = 0; k < img_nx[i] * img_ny[i] && img_at[i] + k < out->n_tok; k++) {
            int32_t *r = out->mpos + (size_t)(img_at[i] + k) * 4;
            r[0] = 0;
            r[1] = k / img_nx[i];
            r[2] = k % img_nx[i];
            r[3] = 0;
        }
    return KILN_OK;
}

kiln_status vision_prompt_build(vision_model *vm, const vision_text *tx, const char *text, size_t len, int add_special,
                                int parse_special, const kiln_image_input *images, int32_t n_images,
                                vision_prompt *out) {
    memset(out, 0, sizeof *out);
    if (n_images > 0 && !vm) return base_fail(KILN_ERR_UNSUPPORTED, "the model does not take images (no projector)");
    if (n_images < 0 || n_images > VISION_MAX_IMAGES || (n_images && !images))
        return base_fail(KILN_ERR_INVALID_ARG, "%d images: at most %d", n_images, VISION_MAX_IMAGES);
    if (!text) len = 0;
    const size_t ml = strlen(VISION_MARKER);
    int markers = 0;
    for (const char *s = text; (s = find_marker(s, len - (size_t)(s - text))); s += ml) markers++;
    if (markers && markers != n_images)
        return base_fail(KILN_ERR_INVALID_ARG, "the prompt has %d image markers for %d images", markers, n_images);
    out->n_embd = tx->n_embd;
    int32_t cap = 0;
    kiln_status st = KILN_OK;
    thread_pool *pool = NULL;
    if (n_images && !(pool = thread_pool_new(0))) return base_fail(KILN_ERR_NOMEM, "out of memory");
    const char *rest = text;
    size_t rest_len = len;
    int first = 1;
    int32_t img_at[VISION_MAX_IMAGES], img_nx[VISION_MAX_IMAGES] = {0}, img_ny[VISION_MAX_IMAGES] = {0};
    for (int i = 0; i < n_images && st == KILN_OK; i++) {
        /* the text before this image */
        if (markers) {
            const char *mk = find_marker(rest, rest_len);
            st = push_text(tx, out, &cap, rest, (size_t)(mk - rest), first && add_special, parse_special);
            rest_len -= (size_t)(mk - rest) + ml;
            rest = mk + ml;
        } else if (first) {
            st = push_text(tx, out, &cap, "", 0, add_special, parse_special);
        }
        first = 0;
        if (st) break;
        st = push_text(tx, out, &cap, vm->proj->begin, strlen(vm->proj->begin), 0, 1);
        vision_image im;
        uint8_t *owned = NULL;
        if (!st) st = image_pixels(&images[i], &im, &owned);
        int32_t nt = st ? 0 : vision_n_tokens(vm, &im);
        if (!st && nt > 0) {
            const size_t rows = (size_t)out->n_rows + (size_t)nt;
            float *e = base_realloc(out->embd, rows * (size_t)out->n_embd * sizeof(float));
            int32_t *t = e ? base_realloc(out->tok, ((size_t)out->n_tok + (size_t)nt + 1) * sizeof *t) : NULL;
            if (e) out->embd = e;
            if (t) {
                out->tok = t;
                cap = out->n_tok + nt + 1;
            }
            if (!e || !t) st = base_fail(KILN_ERR_NOMEM, "out of memory");
        }
        unsigned char dg[SHA256_DIGEST_LENGTH];
        if (!st) SHA256(images[i].data, images[i].len, dg);
        float *rows = st ? NULL : out->embd + (size_t)out->n_rows * out->n_embd;
        if (!st && !cache_get(vm, dg, images[i].width, images[i].height, nt, rows)) {
            st = vision_encode(vm, pool, &im, rows);
            if (!st) st = cache_put(vm, dg, images[i].width, images[i].height, nt, rows);
        }
        if (!st) {
            const uint32_t hh = (uint32_t)dg[0] << 24 | (uint32_t)dg[1] << 16 | (uint32_t)dg[2] << 8 | dg[3];
            for (int32_t k = 0; k < nt; k++) out->tok[out->n_tok + k] = vision_token_id(hh, (uint32_t)k);
            img_at[i] = out->n_tok;
            if (vm->proj->grid) vm->proj->grid(vm, im.w, im.h, &img_nx[i], &img_ny[i]);
            out->n_tok += nt;
            out->n_rows += nt;
            st = push_text(tx, out, &cap, vm->proj->end, strlen(vm->proj->end), 0, 1);
        }
        free(owned);
    }
    if (!st) st = push_text(tx, out, &cap, rest, rest_len, first && add_special, parse_special);
    thread_pool_free(pool);
    if (!st && n_images && tx->mrope && vm->proj->grid) st = fill_mpos(out, n_images, img_at, img_nx, img_ny);
    if (st) vision_prompt_free(out);
    return st;
}
