/*
 * The Gemma 3 projector (clip.projector_type "gemma3"): the image resized
 * into the encoder's square (aspect kept, black bars; vision.c), the SigLIP
 * ViT, then
 *
 *   pooled = avg_pool(x, n_merge x n_merge)   over the side x side patch grid
 *   rows   = rms(pooled) * soft_emb_norm      (eps of the ViT's norms)
 *   out    = rows W                           W = mm.input_projection [n_embd][n_embd_text]
 *
 * giving (side / n_merge)^2 tokens (256 for the released models: a 64 x 64
 * grid pooled by 4), wrapped in <start_of_image> ... <end_of_image>, which
 * the text model attends to both ways.  GGUF keeps the projection as
 * ne = [n_embd_text, n_embd] (used transposed): it is transposed to F32
 * once at load, so the product runs as n_embd_text rows of n_embd.
 */
#include "vision/vision.h"

#include "base/base.h"
#include "kernels/ops.h"
#include "quant/quant.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct g3_state {
    const float *norm; /* [n_embd] */
    float *proj;       /* [n_embd_text][n_embd] */
    kern_mat proj_mat;
} g3_state;

static void g3_defaults(vision_hp *hp) { hp->n_merge = 4; }

static kiln_status g3_bind(vision_model *vm) {
    const int64_t E = vm->hp.n_embd, T = vm->n_embd_text;
    vision_binder B = {vm->gf, KILN_OK};
    g3_state *s = base_calloc(1, sizeof *s);
    if (!s) { return base_fail(KILN_ERR_NOMEM, "out of memory"); }
    vm->state = s;
    s->norm = vision_bind_vec(&B, "mm.soft_emb_norm.weight", E, 0);
    kern_mat w = vision_bind_mat(&B, "mm.input_projection.weight", T, E, 0);
    if (B.st) {
        const gguf_tensor *t = gguf_find_tensor(vm->gf, "mm.input_projection.weight");
        if (t && t->n_dims == 2 && t->ne[1] == E && t->ne[0] != T)
            return base_fail(KILN_ERR_FORMAT, "the projector gives %lld-wide embeddings, the text model takes %lld",
                             (long long)t->ne[0], (long long)T);
        return B.st;
    }
    s->proj = base_malloc((size_t)T * (size_t)E * sizeof(float));
    float *row = base_malloc((size_t)T * sizeof(float));
    if (!s->proj || !row) {
        free(row);
        return base_fail(KILN_ERR_NOMEM, "out of memory");
    }
    for (int64_t i = 0; i < E; i++) {
        kern_get_row(&w, i, row);
        for (int64_t j = 0; j < T; j++) s->proj[j * E + i] = row[j];
    }
    free(row);
    s->proj_mat = (kern_mat){s->proj, QUANT_F32, E, T, NULL};
    return KILN_OK;
}

static int32_t g3_n_tokens(const vision_model *vm, int32_t w, int32_t h) {
    (void)w, (void)h;
    const int32_t side = vm->hp.image_size / vm->hp.patch_size / vm->hp.n_merge;
    return side * side;
}

static kiln_status g3_encode(vision_model *vm, thread_pool *pool, const vision_image *im, float *out) {
    const vision_hp *hp = &vm->hp;
    const g3_state *s = vm->state;
    const int S = hp->image_size, side = S / hp->patch_size, k = hp->n_merge, ps = side / k, E = hp->n_embd;
    const int n = side * side, nt = ps * ps;
    float *pix = base_malloc((size_t)3 * S * S * sizeof(float));
    float *x = base_malloc((size_t)n * E * sizeof(float));
    float *pooled = base_malloc((size_t)nt * E * sizeof(float));
    void *scratch = base_malloc(kern_matmul_scratch_size(E, nt));
    kiln_status st = KILN_OK;
    if (!pix || !x || !pooled || !scratch) {
        st = base_fail(KILN_ERR_NOMEM, "out of memory encoding an image");
        goto done;
    }
    vision_preprocess_square(im, S, hp->mean, hp->std, pix);
    st = vision_vit_run(vm, pool, pix, S, S, x);
    if (st) goto done;
    const float inv = 1.0f / (float)(k * k);
    for (int oy = 0; oy < ps; oy++)
        for (int ox = 0; ox < ps; ox++) {
            float *p = pooled + ((size_t)oy * ps + ox) * E;
            memset(p, 0, (size_t)E * sizeof(float));
            for (int ky = 0; ky < k; ky++)
                for (int kx = 0; kx < k; kx++) {
                    const float *r = x + ((size_t)(oy * k + ky) * side + (size_t)(ox * k + kx)) * E;
                    for (int e = 0; e < E; e++) p[e] += r[e];
                }
            for (int e = 0; e < E; e++) p[e] *= inv;
            kern_rmsnorm(p, p, s->norm, E, hp->eps);
        }
    kern_matmul(pool, &s->proj_mat, pooled, nt, out, vm->n_embd_text, scratch);
done:
    free(pix);
    free(x);
    free(pooled);
    free(scratch);
    return st;
}

static void g3_free(vision_model *vm) {
    g3_state *s = vm->state;
    if (s) free(s->proj);
    free(s);
    vm->state = NULL;
}

const vision_proj vision_proj_gemma3 = {
    .type = "gemma3",
    .begin = "<start_of_image>",
    .end = "<end_of_image>",
    .bidirectional = 1,
    .defaults = g3_defaults,
    .bind = g3_bind,
    .n_tokens = g3_n_tokens,
    .encode = g3_encode,
    .free = g3_free,
};
