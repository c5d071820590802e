/* The registry of model families and what the family contract gives every
 * family (family.h): the metadata readers, the tensor binder and the list
 * of weights the backend prepares.  Each family's file declares its table
 * (model_family) with the architecture names it serves; this list is the only
 * place that names the families, and it never names an architecture. */
#include "model/family.h"

#include "base/base.h"
#include "gguf/check.h"
#include "quant/quant.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const model_family *const k_families[] = {
    &model_family_dense,      &model_family_hybrid,      &model_family_bert,
    &model_family_modernbert, &model_family_gemma_embed, &model_family_gemma,
    &model_family_deepseek2,  &model_family_gptoss,      &model_family_nemotron};
#define N_FAMILIES (sizeof k_families / sizeof k_families[0])

const model_arch *model_arch_find(const char *name) {
    for (size_t f = 0; f < N_FAMILIES; f++)
        for (int i = 0; i < k_families[f]->n_archs; i++)
            if (strcmp(k_families[f]->archs[i].name, name) == 0) return &k_families[f]->archs[i];
    return NULL;
}

static char g_list[512];
static pthread_once_t g_list_once = PTHREAD_ONCE_INIT;

static void build_list(void) {
    size_t o = 0;
    for (size_t f = 0; f < N_FAMILIES; f++)
        for (int i = 0; i < k_families[f]->n_archs; i++) {
            const char *n = k_families[f]->archs[i].name;
            if (o + strlen(n) + 3 >= sizeof g_list) return;
            o += (size_t)snprintf(g_list + o, sizeof g_list - o, "%s%s", o ? ", " : "", n);
        }
}

const char *model_arch_list(void) {
    pthread_once(&g_list_once, build_list);
    return g_list;
}

/* ---- metadata ---- */

static void meta_key(const kiln_model *m, const char *suffix, char *key, size_t cap) {
    snprintf(key, cap, "%s.%s", m->arch_name, suffix);
}

int64_t model_meta_int(const kiln_model *m, const char *suffix, int64_t def) {
    char key[128];
    meta_key(m, suffix, key, sizeof key);
    return gguf_get_int(m->gf, key, def);
}

double model_meta_float(const kiln_model *m, const char *suffix, double def) {
    char key[128];
    meta_key(m, suffix, key, sizeof key);
    return gguf_get_float(m->gf, key, def);
}

const gguf_kv *model_meta_kv(const kiln_model *m, const char *suffix) {
    char key[128];
    meta_key(m, suffix, key, sizeof key);
    return gguf_find(m->gf, key);
}

/* ---- the binder ---- */

void model_bind_fail(model_binder *B, const char *fmt, ...) {
    if (B->st) return;
    va_list ap;
    va_start(ap, fmt);
    B->st = base_vfail(KILN_ERR_FORMAT, fmt, ap);
    va_end(ap);
}

const gguf_tensor *model_bind_tensor(model_binder *B, const char *name, int dims, const int64_t *ne, int optional) {
    const gguf_tensor *t = NULL;
    if (!B->st) B->st = gguf_tensor_check(B->m->gf, name, dims, ne, optional, &t);
    return t;
}

const float *model_bind_vec(model_binder *B, const char *name, int64_t n, int optional) {
    const gguf_tensor *t = model_bind_tensor(B, name, 1, &n, optional);
    if (!t) return NULL;
    if (t->type != QUANT_F32) {
        model_bind_fail(B, "tensor %s must be F32 (it is %s)", name, quant_get((int)t->type)->name);
        return NULL;
    }
    return t->data;
}

kern_mat model_bind_mat(model_binder *B, const char *name, int64_t ncols, int64_t nrows, int optional) {
    kern_mat w = {0};
    const int64_t ne[2] = {ncols, nrows};
    const gguf_tensor *t = model_bind_tensor(B, name, 2, ne, optional);
    if (!t) return w;
    w.data = t->data;
    w.type = (int)t->type;
    w.ncols = ncols;
    w.nrows = t->ne[1];
    return w;
}

int model_bind_mats3(model_binder *B, const char *name, int64_t ncols, int64_t nrows, int n_mat, kern_mat *out,
                     int optional) {
    const int64_t ne[3] = {ncols, nrows, n_mat};
    const gguf_tensor *t = model_bind_tensor(B, name, 3, ne, optional);
    if (!t) return 0;
    const size_t bytes = quant_row_size((int)t->type, ncols) * (size_t)nrows;
    for (int e = 0; e < n_mat; e++)
        out[e] = (kern_mat){(const uint8_t *)t->data + (size_t)e * bytes, (int)t->type, ncols, nrows, NULL};
    return 1;
}

/* ---- the repack list ---- */

/* Whether what the family lists now belongs to w's part. */
static int weights_take(const model_weights *w) {
    if (!w->part) return 1;
    const int lo = w->layer1 == 0 || w->layer1 - 1 < w->l0;
    return lo == (w->part == 1);
}

void model_weights_layer(model_weights *w, int l) { w->layer1 = l + 1; }

void model_weights_mat(model_weights *w, kern_mat *m) {
    if (w->failed || !m->data || !weights_take(w)) return;
    if (w->n_mats == w->cap_mats) {
        int nc = w->cap_mats ? 2 * w->cap_mats : 256;
        kern_mat **nm = realloc(w->mats, (size_t)nc * sizeof *nm);
        if (!nm) {
            w->failed = 1;
            return;
        }
        w->mats = nm;
        w->cap_mats = nc;
    }
    w->mats[w->n_mats++] = m;
}

void model_weights_vec(model_weights *w, const float **v, int64_t len) {
    if (w->failed || !*v || !weights_take(w)) return;
    if (w->n_vecs == w->cap_vecs) {
        int nc = w->cap_vecs ? 2 * w->cap_vecs : 256;
        const float ***nv = realloc(w->vecs, (size_t)nc * sizeof *nv);
        int64_t *nl = nv ? realloc(w->vlen, (size_t)nc * sizeof *nl) : NULL;
        if (nv) w->vecs = nv;
        if (!nv || !nl) {
            w->failed = 1;
            return;
        }
        w->vlen = nl;
        w->cap_vecs = nc;
    }
    w->vecs[w->n_vecs] = v;
    w->vlen[w->n_vecs++] = len;
}

kiln_status model_rope_sections(kiln_model *m, int kind) {
    kern_rope *r = &m->hp.rope;
    const gguf_kv *sec = model_meta_kv(m, "rope.dimension_sections");
    if (!sec) { return base_fail(KILN_ERR_FORMAT, "%s without rope.dimension_sections", m->arch_name); }
    int64_t sum = 0;
    const uint64_t n = sec->type == GGUF_ARRAY ? sec->n : 1;
    if (n > 4 && sec->type == GGUF_ARRAY)
        for (uint64_t i = 4; i < n; i++)
            if (gguf_arr_int(sec, i) != 0) {
                return base_fail(KILN_ERR_FORMAT, "rope.dimension_sections has more than 4 non-zero sections");
            }
    for (uint64_t i = 0; i < 4; i++) {
        const int64_t v = i >= n                    ? 0
                          : sec->type == GGUF_ARRAY ? gguf_arr_int(sec, i)
                                                    : model_meta_int(m, "rope.dimension_sections", 0);
        if (v < 0 || v > 4096) {
            return base_fail(KILN_ERR_FORMAT, "bad rope.dimension_sections[%llu] %lld", (unsigned long long)i,
                             (long long)v);
        }
        r->sections[i] = (int)v;
        sum += v;
    }
    if (sum <= 0 || sum * 2 > r->n_rot) {
        return base_fail(KILN_ERR_FORMAT, "rope.dimension_sections cover %lld dims; rope.dimension_count is %d",
                         (long long)(sum * 2), r->n_rot);
    }
    r->mrope = kind;
    return KILN_OK;
}

int model_attn_below(const kiln_model *m, int l) {
    return m->arch->family->attn_below ? m->arch->family->attn_below(m, l) : l;
}
