/* Model loading: hyperparameters from metadata, tensors bound by name with
 * their shapes checked, so the forward pass can trust every pointer. */
#include "model/model.h"

#include "base/base.h"
#include "kernels/pack.h"
#include "thread/pool.h"
#include "quant/quant.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

typedef struct loader {
    kiln_model *m;
    char err[512];
} loader;

static void meta_key(const kiln_model *m, const char *suffix, char *key, size_t cap) {
    snprintf(key, cap, "%s.%s", m->arch_name, suffix);
}

int64_t kl_meta_int(const kiln_model *m, const char *suffix, int64_t def) {
    char key[128];
    meta_key(m, suffix, key, sizeof key);
    return gguf_get_int(m->gf, key, def);
}

double kl_meta_float(const kiln_model *m, const char *suffix, double def) {
    char key[128];
    meta_key(m, suffix, key, sizeof key);
    return gguf_get_float(m->gf, key, def);
}

const gguf_kv *kl_meta_kv(const kiln_model *m, const char *suffix) {
    char key[128];
    meta_key(m, suffix, key, sizeof key);
    return gguf_find(m->gf, key);
}

static const char *meta_str(const kiln_model *m, const char *suffix, char *buf, size_t cap) {
    char key[128];
    meta_key(m, suffix, key, sizeof key);
    return gguf_get_cstr(m->gf, key, buf, cap, NULL);
}

static void shape_str(char *buf, size_t cap, const int64_t *ne, int n) {
    int o = snprintf(buf, cap, "[");
    for (int i = 0; i < n && o < (int)cap; i++)
        o += snprintf(buf + o, cap - (size_t)o, i ? ", %lld" : "%lld", (long long)ne[i]);
    if (o < (int)cap) snprintf(buf + o, cap - (size_t)o, "]");
}

/* ---- the binder (model.h) ---- */

void kl_bind_fail(kl_binder *B, const char *fmt, ...) {
    if (B->failed) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(B->err, B->errlen, fmt, ap);
    va_end(ap);
    B->failed = 1;
}

const gguf_tensor *kl_bind_tensor(kl_binder *B, const char *name, int dims, const int64_t *ne, int optional) {
    if (B->failed) return NULL;
    const gguf_tensor *t = gguf_find_tensor(B->m->gf, name);
    if (!t) {
        if (!optional) kl_bind_fail(B, "missing tensor %s", name);
        return NULL;
    }
    int ok = (int)t->n_dims == dims;
    for (int d = 0; d < dims && ok; d++) ok = ne[d] < 0 ? t->ne[d] >= 1 : t->ne[d] == ne[d];
    if (!ok) {
        char a[96], b[96];
        shape_str(a, sizeof a, t->ne, (int)t->n_dims);
        shape_str(b, sizeof b, ne, dims);
        kl_bind_fail(B, "tensor %s has shape %s, expected %s", name, a, b);
        return NULL;
    }
    if (!kq_supported((int)t->type)) {
        const kq_traits *tr = kq_get((int)t->type);
        kl_bind_fail(B, "tensor %s has type %s, which kiln cannot compute", name, tr && tr->name ? tr->name : "?");
        return NULL;
    }
    return t;
}

const float *kl_bind_vec(kl_binder *B, const char *name, int64_t n, int optional) {
    const gguf_tensor *t = kl_bind_tensor(B, name, 1, &n, optional);
    if (!t) return NULL;
    if (t->type != KQ_F32) {
        kl_bind_fail(B, "tensor %s must be F32 (it is %s)", name, kq_get((int)t->type)->name);
        return NULL;
    }
    return t->data;
}

kk_mat kl_bind_mat(kl_binder *B, const char *name, int64_t ncols, int64_t nrows, int optional) {
    kk_mat w = {0};
    const int64_t ne[2] = {ncols, nrows};
    const gguf_tensor *t = kl_bind_tensor(B, name, 2, ne, optional);
    if (!t) return w;
    w.data = t->data;
    w.type = (int)t->type;
    w.ncols = ncols;
    w.nrows = t->ne[1];
    return w;
}

int kl_bind_mats3(kl_binder *B, const char *name, int64_t ncols, int64_t nrows, int n_mat, kk_mat *out, int optional) {
    const int64_t ne[3] = {ncols, nrows, n_mat};
    const gguf_tensor *t = kl_bind_tensor(B, name, 3, ne, optional);
    if (!t) return 0;
    const size_t bytes = kq_row_size((int)t->type, ncols) * (size_t)nrows;
    for (int e = 0; e < n_mat; e++)
        out[e] = (kk_mat){(const uint8_t *)t->data + (size_t)e * bytes, (int)t->type, ncols, nrows, NULL};
    return 1;
}

/* ---- the repack list (model.h) ---- */

void kl_weights_mat(kl_weights *w, kk_mat *m) {
    if (w->failed || !m->data) return;
    if (w->n_mats == w->cap_mats) {
        int nc = w->cap_mats ? 2 * w->cap_mats : 256;
        kk_mat **nm = realloc(w->mats, (size_t)nc * sizeof *nm);
        if (!nm) {
            w->failed = 1;
            return;
        }
        w->mats = nm;
        w->cap_mats = nc;
    }
    w->mats[w->n_mats++] = m;
}

void kl_weights_vec(kl_weights *w, const float **v, int64_t len) {
    if (w->failed || !*v) return;
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

/* The hyperparameters every family reads the same way.  n_ff may be
 * absent (mixture-of-experts models); a family that needs it checks. */
static int load_hparams(loader *L) {
    kiln_model *m = L->m;
    kl_hparams *hp = &m->hp;
    hp->n_embd = (int)kl_meta_int(m, "embedding_length", 0);
    hp->n_layer = (int)kl_meta_int(m, "block_count", 0);
    hp->n_ff = (int)kl_meta_int(m, "feed_forward_length", 0);
    hp->n_head = (int)kl_meta_int(m, "attention.head_count", 0);
    hp->n_head_kv = (int)kl_meta_int(m, "attention.head_count_kv", hp->n_head);
    hp->n_ctx_train = (int)kl_meta_int(m, "context_length", 2048);
    hp->eps = (float)kl_meta_float(m, "attention.layer_norm_rms_epsilon", 1e-5);
    if (hp->n_embd <= 0 || hp->n_embd > 65536 || hp->n_layer <= 0 || hp->n_layer > 1024 || hp->n_ff < 0 ||
        hp->n_ff > (1 << 20) || hp->n_head <= 0 || hp->n_head > 1024 || hp->n_head_kv <= 0 ||
        hp->n_head % hp->n_head_kv != 0 || hp->n_ctx_train <= 0) {
        snprintf(L->err, sizeof L->err,
                 "bad or missing hyperparameters (n_embd %d, n_layer %d, n_ff %d, n_head %d, n_head_kv %d, "
                 "context %d)",
                 hp->n_embd, hp->n_layer, hp->n_ff, hp->n_head, hp->n_head_kv, hp->n_ctx_train);
        return -1;
    }
    hp->hd_k = (int)kl_meta_int(m, "attention.key_length", hp->n_embd / hp->n_head);
    hp->hd_v = (int)kl_meta_int(m, "attention.value_length", hp->hd_k);
    if (hp->hd_k <= 0 || hp->hd_k > 1024 || hp->hd_v <= 0 || hp->hd_v > 1024 ||
        (hp->hd_v != hp->hd_k && !m->arch->family->split_head_sizes)) {
        snprintf(L->err, sizeof L->err, "unsupported head sizes (key %d, value %d)", hp->hd_k, hp->hd_v);
        return -1;
    }
    kk_rope *r = &hp->rope;
    r->n_rot = (int)kl_meta_int(m, "rope.dimension_count", hp->hd_k);
    if (r->n_rot <= 0 || r->n_rot > hp->hd_k || r->n_rot % 2) {
        snprintf(L->err, sizeof L->err, "bad rope.dimension_count %d", r->n_rot);
        return -1;
    }
    r->base = (float)kl_meta_float(m, "rope.freq_base", 10000.0);
    r->freq_scale = 1.0f;
    r->attn_factor = 1.0f;
    r->beta_fast = (float)kl_meta_float(m, "rope.scaling.yarn_beta_fast", 32.0);
    r->beta_slow = (float)kl_meta_float(m, "rope.scaling.yarn_beta_slow", 1.0);
    r->n_ctx_orig = (int)kl_meta_int(m, "rope.scaling.original_context_length", hp->n_ctx_train);
    char st[32];
    const char *stype = meta_str(m, "rope.scaling.type", st, sizeof st);
    double factor = kl_meta_float(m, "rope.scaling.factor", 0.0);
    if (factor == 0.0) {
        double lin = kl_meta_float(m, "rope.scale_linear", 0.0); /* older files */
        if (lin != 0.0) {
            factor = lin;
            if (!stype) stype = "linear";
        }
    }
    if (stype && strcmp(stype, "none") != 0 && factor > 0.0 && factor != 1.0) {
        if (strcmp(stype, "linear") == 0) {
            r->freq_scale = (float)(1.0 / factor);
        } else if (strcmp(stype, "yarn") == 0) {
            r->freq_scale = (float)(1.0 / factor);
            r->ext_factor = 1.0f;
            r->attn_factor = (float)kl_meta_float(m, "rope.scaling.attn_factor", 1.0);
            /* With yarn_log_multiplier (mscale_all_dim) the cos/sin magnitude
             * is mscale(1) / mscale(log_mul), mscale(a) = 1 + 0.1 a ln(factor);
             * kk_rope_table multiplies by mscale(1) itself, so divide that out. */
            double log_mul = kl_meta_float(m, "rope.scaling.yarn_log_multiplier", 0.0);
            if (log_mul != 0.0 && factor > 1.0) r->attn_factor = (float)(1.0 / (1.0 + 0.1 * log_mul * log(factor)));
        } else {
            snprintf(L->err, sizeof L->err, "unsupported rope scaling type '%s'", stype);
            return -1;
        }
    }
    if (!(r->base > 0.0f) || !isfinite(r->base)) {
        snprintf(L->err, sizeof L->err, "bad rope.freq_base");
        return -1;
    }
    return 0;
}

static void summarize(kiln_model *m) {
    int counts[KQ_TYPE_COUNT] = {0};
    for (int i = 0; i < gguf_n_tensors(m->gf); i++) {
        const gguf_tensor *t = gguf_tensor_at(m->gf, i);
        m->n_params += (uint64_t)(t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3]);
        m->n_bytes += t->nbytes;
        if (t->n_dims >= 2 && t->type < KQ_TYPE_COUNT) counts[t->type]++;
    }
    int best = KQ_F32;
    for (int t = 0; t < KQ_TYPE_COUNT; t++)
        if (counts[t] > counts[best]) best = t;
    snprintf(m->ftype, sizeof m->ftype, "%s", kq_get(best)->name);
}

static int can_pack(const kk_mat *w) { return w->data && !w->packed && kk_mat_interleavable(w); }

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

/* Copies every Q4_0 and Q6_K matrix into its 8-row interleaved layout
 * (kernels/pack.h), all in
 * one anonymous mapping, and releases the mapped originals.  A tied output
 * is packed once and shared with tok_embd (kk_get_row reads packed rows).
 * The norms and biases move too: they sit between the matrices in the
 * file, and where the page cache holds the file in large folios, touching
 * them every token would map the released matrix pages around them back
 * into the process. */
/* One piece of packing: groups [g0, g1) of matrix m, whose source bytes
 * start at src. */
typedef struct pack_piece {
    uintptr_t src;
    int m;
    int64_t g0, g1;
} pack_piece;

typedef struct pack_job {
    kk_mat **mats;      /* the matrices to pack, */
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
    kpool_range(j->n_pieces, ith, nth, &lo, &hi);
    uintptr_t done = lo < hi ? j->pieces[lo].src : 0;
    for (long i = lo; i < hi; i++) {
        const pack_piece *pc = &j->pieces[i];
        const kk_mat *w = j->mats[pc->m];
        const kk_x8_traits *xt = kk_x8_get(w->type);
        const size_t gbytes = 8 * kq_row_size(w->type, w->ncols), nb = (size_t)(w->ncols / xt->blk);
        kk_x8_pack_matrix(w->type, (const void *)pc->src, w->ncols, 8 * (pc->g1 - pc->g0),
                          j->dst[pc->m] + (size_t)pc->g0 * nb * xt->pblock);
        const uintptr_t end = pc->src + (size_t)(pc->g1 - pc->g0) * gbytes;
        const uintptr_t upto = (i + 1 < hi ? j->pieces[i + 1].src : end) & ~(uintptr_t)(FOLIO - 1);
        if (upto > done) {
            drop_range((byte_range){done, upto});
            done = upto;
        }
    }
}

static void repack_list(kiln_model *m, kl_weights *wl);

static void repack(kiln_model *m) {
    kl_weights wl;
    memset(&wl, 0, sizeof wl);
    if (m->arch->family->weights) m->arch->family->weights(m, &wl);
    if (!wl.failed) repack_list(m, &wl);
    free(wl.mats);
    free(wl.vecs);
    free(wl.vlen);
}

static void repack_list(kiln_model *m, kl_weights *wl) {
    kk_mat **all = wl->mats;
    const float ***vecs = wl->vecs;
    const int64_t *vlen = wl->vlen;
    const int n_all = wl->n_mats, nv = wl->n_vecs;
    pack_job j = {.mats = malloc(sizeof(kk_mat *) * (size_t)(n_all ? n_all : 1)),
                  .dst = malloc(sizeof(uint8_t *) * (size_t)(n_all ? n_all : 1))};
    byte_range *dropped = malloc(sizeof *dropped * (size_t)(n_all + nv + 1));
    size_t total = 0;
    for (int i = 0; i < n_all && j.mats && j.dst && dropped; i++)
        if (can_pack(all[i])) {
            j.mats[j.n++] = all[i];
            total += (kk_x8_matrix_size(all[i]->type, all[i]->ncols, all[i]->nrows) + 63) & ~(size_t)63;
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
        const kk_mat *w = j.mats[i];
        j.dst[i] = p;
        p += (kk_x8_matrix_size(w->type, w->ncols, w->nrows) + 63) & ~(size_t)63;
        /* only whole groups of 8 rows are copied: the last nrows % 8 stay
         * mapped (e.g. a vocabulary of 50257) */
        dropped[i].a = (uintptr_t)w->data;
        dropped[i].b = (uintptr_t)w->data + kq_row_size(w->type, w->ncols) * (size_t)(w->nrows & ~(int64_t)7);
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
        const size_t gbytes = 8 * kq_row_size(j.mats[i]->type, j.mats[i]->ncols);
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
        const size_t gbytes = 8 * kq_row_size(j.mats[i]->type, j.mats[i]->ncols);
        const int64_t ng = j.mats[i]->nrows / 8;
        const int64_t per = gbytes >= PACK_PIECE ? 1 : (int64_t)(PACK_PIECE / gbytes);
        for (int64_t g = 0; g < ng; g += per)
            j.pieces[j.n_pieces++] =
                (pack_piece){(uintptr_t)j.mats[i]->data + (size_t)g * gbytes, i, g, g + per < ng ? g + per : ng};
    }
    qsort(j.pieces, (size_t)j.n_pieces, sizeof *j.pieces, piece_cmp);
    /* the pieces are independent: pack them on every CPU */
    const long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    kpool *pool = ncpu > 1 ? kpool_new(ncpu < 16 ? (int)ncpu : 16) : NULL;
    if (pool) {
        kpool_run(pool, pack_task, &j);
        kpool_free(pool);
    } else {
        pack_task(&j, 0, 1);
    }
    for (int i = 0; i < j.n; i++) j.mats[i]->packed = j.dst[i];
    free(j.pieces);
    drop_ranges(dropped, nd);
    free(dropped);
    free(j.mats);
    free(j.dst);
    if (m->tok_embd.data == m->output.data) m->tok_embd.packed = m->output.packed;
    m->packed_mem = mem;
    m->packed_bytes = total;
}

kiln_status kiln_model_load(const char *path, const kiln_model_params *params, kiln_model **out) {
    *out = NULL;
    kiln_model_params p = params ? *params : kiln_model_default_params();
    if (!path) return kb_fail(KILN_ERR_INVALID_ARG, "no model path given");
    kiln_model *m = calloc(1, sizeof *m);
    if (!m) return kb_fail(KILN_ERR_NOMEM, "out of memory");
    loader L = {m, {0}};
    char err[512];
    m->gf = gguf_open(path, err, sizeof err);
    if (!m->gf) {
        free(m);
        return kb_fail(strstr(err, "No such file") || strstr(err, "Permission") ? KILN_ERR_IO : KILN_ERR_FORMAT, "%s",
                       err);
    }
    kiln_status st = KILN_ERR_FORMAT;
    if (!gguf_get_cstr(m->gf, "general.architecture", m->arch_name, sizeof m->arch_name, NULL)) {
        snprintf(L.err, sizeof L.err, "no general.architecture in the metadata");
        goto fail;
    }
    m->arch = kl_arch_find(m->arch_name);
    if (!m->arch) {
        snprintf(L.err, sizeof L.err, "unsupported architecture '%s' (kiln runs: %s)", m->arch_name, kl_arch_list());
        st = KILN_ERR_UNSUPPORTED;
        goto fail;
    }
    gguf_get_cstr(m->gf, "general.name", m->name, sizeof m->name, "");
    if (load_hparams(&L) || m->arch->family->bind(m, L.err, sizeof L.err)) {
        if (strstr(L.err, "cannot compute") || strstr(L.err, "unsupported")) st = KILN_ERR_UNSUPPORTED;
        goto fail;
    }
    if (m->hp.n_vocab <= 0) {
        snprintf(L.err, sizeof L.err, "tensor token_embd.weight has no rows");
        goto fail;
    }
    char terr[400];
    m->tok = ktok_load(m->gf, terr, sizeof terr);
    if (!m->tok) {
        snprintf(L.err, sizeof L.err, "tokenizer: %s", terr);
        goto fail;
    }
    if (ktok_n_vocab(m->tok) > m->hp.n_vocab) {
        snprintf(L.err, sizeof L.err, "the vocabulary has %d tokens but token_embd.weight only %d rows",
                 ktok_n_vocab(m->tok), m->hp.n_vocab);
        goto fail;
    }
    gguf_str tmpl;
    if (gguf_get_str(m->gf, "tokenizer.chat_template", &tmpl) == 0) {
        m->chat_template = malloc(tmpl.len + 1);
        if (m->chat_template) {
            memcpy(m->chat_template, tmpl.ptr, tmpl.len);
            m->chat_template[tmpl.len] = 0;
        }
    }
    summarize(m);
    if (p.prefetch) gguf_prefetch(m->gf);
    if (p.repack) repack(m);
    *out = m;
    return KILN_OK;
fail:
    kb_fail(st, "%s: %s", path, L.err);
    kiln_model_free(m);
    return st;
}

void kiln_model_free(kiln_model *m) {
    if (!m) return;
    if (m->tok) ktok_free(m->tok);
    if (m->arch && m->arch->family->free) m->arch->family->free(m);
    free(m->chat_template);
    gguf_close(m->gf);
    if (m->packed_mem) munmap(m->packed_mem, m->packed_bytes);
    free(m);
}

kiln_model_params kiln_model_default_params(void) {
    kiln_model_params p = {1, 1};
    const char *e = getenv("KILN_REPACK");
    if (e && strcmp(e, "0") == 0) p.repack = 0;
    return p;
}

void kiln_model_get_info(const kiln_model *m, kiln_model_info *info) {
    memset(info, 0, sizeof *info);
    info->arch = m->arch_name;
    info->name = m->name;
    info->repacked_bytes = m->packed_bytes;
    info->n_vocab = m->hp.n_vocab;
    info->n_ctx_train = m->hp.n_ctx_train;
    info->n_embd = m->hp.n_embd;
    info->n_layer = m->hp.n_layer;
    info->n_head = m->hp.n_head;
    info->n_head_kv = m->hp.n_head_kv;
    info->n_ff = m->hp.n_ff;
    info->n_params = m->n_params;
    info->n_bytes = m->n_bytes;
    info->step_bytes = m->n_bytes;
    const gguf_tensor *te = gguf_find_tensor(m->gf, "token_embd.weight");
    const int tied = m->output.data && m->output.data == m->tok_embd.data;
    if (te && !tied) info->step_bytes -= te->nbytes;
    info->active_bytes = m->active_bytes ? m->active_bytes : m->n_bytes;
    if (te && !tied) info->active_bytes -= te->nbytes;
    info->ftype = m->ftype;
    if (m->arch->family->seq_shape) {
        kl_seq_shape s;
        m->arch->family->seq_shape(m, &s);
        info->n_attn_layer = s.n_attn_layer;
        info->kv_bytes_per_token = kl_kv_bytes_per_token(&s, KILN_KV_F16);
        info->state_bytes = (uint64_t)s.rs_floats * sizeof(float);
    }
}

const char *kiln_model_chat_template(const kiln_model *m) { return m->chat_template; }
