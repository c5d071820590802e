/* The whisper.cpp GGML file reader.  Pass 1 walks the whole file and checks
 * every header, count and length against its size; pass 2 binds tensors by
 * name with shape checks; only then is memory allocated (one arena for the
 * F32 copies of small tensors and for matrices whose data is not aligned
 * for its element type, since the format does not align tensor data). */
#include "whisper/whisper.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { MAX_TENSORS = 4096, MAX_NAME = 128 };

typedef struct rd {
    const uint8_t *p;
    size_t len, off;
} rd;

static int rd_i32(rd *r, int32_t *v) {
    if (r->len - r->off < 4) return -1;
    memcpy(v, r->p + r->off, 4);
    r->off += 4;
    return 0;
}

typedef struct tinfo {
    char name[MAX_NAME];
    int type;
    int n_dims;
    int64_t ne[3];
    size_t off, nbytes;
    int used;
} tinfo;

int whisper_is_ggml_file(const char *path) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 0;
    uint32_t magic = 0;
    ssize_t n = read(fd, &magic, 4);
    close(fd);
    return n == 4 && magic == WHISPER_MAGIC;
}

/* ggml_ftype values of whisper.cpp files -> the matrices' type */
static int ftype_to_type(int ftype) {
    switch (ftype) {
    case 0: return QUANT_F32;
    case 1: return QUANT_F16;
    case 2: return QUANT_Q4_0;
    case 3: return QUANT_Q4_1;
    case 7: return QUANT_Q8_0;
    case 8: return QUANT_Q5_0;
    case 9: return QUANT_Q5_1;
    case 10: return QUANT_Q2_K;
    case 11: return QUANT_Q3_K;
    case 12: return QUANT_Q4_K;
    case 13: return QUANT_Q5_K;
    case 14: return QUANT_Q6_K;
    default: return -1;
    }
}

static const char *size_name(const whisper_hparams *hp) {
    int v3 = hp->n_vocab == 51866;
    switch (hp->n_audio_layer) {
    case 4: return hp->n_audio_state == 384 ? "tiny" : "custom";
    case 6: return hp->n_audio_state == 512 ? "base" : "custom";
    case 12: return hp->n_audio_state == 768 ? "small" : "custom";
    case 24: return hp->n_audio_state == 1024 ? "medium" : "custom";
    case 32:
        if (hp->n_audio_state != 1280) return "custom";
        if (hp->n_text_layer == 4) return "large-v3-turbo";
        return v3 ? "large-v3" : "large";
    default: return "custom";
    }
}

/* Sizes of the load: arena bytes for F32 copies and misaligned matrices. */
typedef struct plan {
    tinfo *t;
    int n;
    size_t arena;
} plan;

static tinfo *find(plan *p, const char *name) {
    for (int i = 0; i < p->n; i++)
        if (!strcmp(p->t[i].name, name)) return &p->t[i];
    return NULL;
}

typedef struct binder {
    whisper_model *m;
    plan *p;
    uint8_t *arena; /* NULL during the sizing pass */
    size_t used;
    kiln_status failed; /* KILN_OK until a binding fails */
} binder;

static void *arena_take(binder *b, size_t n) {
    size_t at = (b->used + 63) & ~(size_t)63;
    b->used = at + n;
    return b->arena ? b->arena + at : NULL;
}

static tinfo *need(binder *b, const char *name, int64_t ne0, int64_t ne1, int64_t ne2) {
    if (b->failed) return NULL;
    tinfo *t = find(b->p, name);
    if (!t) {
        b->failed = base_fail(KILN_ERR_FORMAT, "tensor '%s' is missing", name);
        return NULL;
    }
    int64_t want[3] = {ne0, ne1, ne2};
    int ok = 1;
    for (int d = 0; d < 3; d++) ok &= t->ne[d] == want[d];
    if (!ok) {
        b->failed = base_fail(KILN_ERR_FORMAT, "tensor '%s' has shape [%lld, %lld, %lld], expected [%lld, %lld, %lld]",
                              name, (long long)t->ne[0], (long long)t->ne[1], (long long)t->ne[2], (long long)want[0],
                              (long long)want[1], (long long)want[2]);
        return NULL;
    }
    if (t->used) {
        b->failed = base_fail(KILN_ERR_FORMAT, "tensor '%s' is bound twice", name);
        return NULL;
    }
    t->used = 1;
    return t;
}

/* A vector (or small table) as F32 in the arena, whatever its stored type. */
static const float *vec(binder *b, const char *name, int64_t ne0, int64_t ne1) {
    tinfo *t = need(b, name, ne0, ne1, 1);
    if (!t) return NULL;
    if (t->type != QUANT_F32 && t->type != QUANT_F16) {
        b->failed = base_fail(KILN_ERR_FORMAT, "tensor '%s' has type %s; vectors must be F32 or F16", name,
                              quant_get(t->type)->name);
        return NULL;
    }
    int64_t n = ne0 * ne1;
    float *dst = arena_take(b, (size_t)n * sizeof(float));
    if (dst) quant_get(t->type)->to_f32(b->m->map.addr + t->off, dst, n);
    return dst;
}

static const float *bias(binder *b, const char *name, int64_t n) {
    tinfo *t = find(b->p, name);
    if (t && t->n_dims == 2 && t->ne[0] == 1) {
        /* conv biases are stored as [1, n] */
        t->ne[0] = n;
        t->ne[1] = 1;
        t->n_dims = 1;
    }
    return vec(b, name, n, 1);
}

static void mat(binder *b, kern_mat *out, const char *name, int64_t ncols, int64_t nrows, int conv) {
    tinfo *t = conv ? need(b, name, 3, ncols / 3, nrows) : need(b, name, ncols, nrows, 1);
    if (!t) return;
    if (!quant_supported(t->type)) {
        b->failed = base_fail(KILN_ERR_UNSUPPORTED, "tensor '%s' has type %s, which kiln cannot multiply", name,
                              quant_get(t->type) && quant_get(t->type)->name ? quant_get(t->type)->name : "unknown");
        return;
    }
    if (conv && t->type != QUANT_F32 && t->type != QUANT_F16) {
        b->failed = base_fail(KILN_ERR_FORMAT, "tensor '%s': convolution kernels must be F32 or F16, not %s", name,
                              quant_get(t->type)->name);
        return;
    }
    const quant_traits *tr = quant_get(t->type);
    if (ncols % tr->blck != 0) {
        b->failed = base_fail(KILN_ERR_FORMAT, "tensor '%s': rows of %lld are not whole %s blocks", name,
                              (long long)ncols, tr->name);
        return;
    }
    size_t align = t->type == QUANT_F32 ? 4 : 2;
    const uint8_t *src = b->m->map.addr + t->off;
    const void *data = src;
    if (((uintptr_t)src) % align != 0) {
        void *dst = arena_take(b, t->nbytes);
        if (dst) {
            memcpy(dst, src, t->nbytes);
            b->m->copied_bytes += t->nbytes;
        }
        data = dst;
    }
    out->data = data;
    out->type = t->type;
    out->ncols = ncols;
    out->nrows = nrows;
    out->packed = NULL;
}

static void bind_block(binder *b, whisper_block *blk, const char *pre, int64_t d, int cross) {
    char n[MAX_NAME];
#define NM(s) (snprintf(n, sizeof n, "%s.%s", pre, s), n)
    blk->attn_ln_w = vec(b, NM("attn_ln.weight"), d, 1);
    blk->attn_ln_b = vec(b, NM("attn_ln.bias"), d, 1);
    mat(b, &blk->q, NM("attn.query.weight"), d, d, 0);
    blk->q_b = vec(b, NM("attn.query.bias"), d, 1);
    mat(b, &blk->k, NM("attn.key.weight"), d, d, 0);
    mat(b, &blk->v, NM("attn.value.weight"), d, d, 0);
    blk->v_b = vec(b, NM("attn.value.bias"), d, 1);
    mat(b, &blk->o, NM("attn.out.weight"), d, d, 0);
    blk->o_b = vec(b, NM("attn.out.bias"), d, 1);
    if (cross) {
        blk->cross_ln_w = vec(b, NM("cross_attn_ln.weight"), d, 1);
        blk->cross_ln_b = vec(b, NM("cross_attn_ln.bias"), d, 1);
        mat(b, &blk->cq, NM("cross_attn.query.weight"), d, d, 0);
        blk->cq_b = vec(b, NM("cross_attn.query.bias"), d, 1);
        mat(b, &blk->ck, NM("cross_attn.key.weight"), d, d, 0);
        mat(b, &blk->cv, NM("cross_attn.value.weight"), d, d, 0);
        blk->cv_b = vec(b, NM("cross_attn.value.bias"), d, 1);
        mat(b, &blk->co, NM("cross_attn.out.weight"), d, d, 0);
        blk->co_b = vec(b, NM("cross_attn.out.bias"), d, 1);
    }
    blk->mlp_ln_w = vec(b, NM("mlp_ln.weight"), d, 1);
    blk->mlp_ln_b = vec(b, NM("mlp_ln.bias"), d, 1);
    mat(b, &blk->mlp0, NM("mlp.0.weight"), d, 4 * d, 0);
    blk->mlp0_b = vec(b, NM("mlp.0.bias"), 4 * d, 1);
    mat(b, &blk->mlp2, NM("mlp.2.weight"), 4 * d, d, 0);
    blk->mlp2_b = vec(b, NM("mlp.2.bias"), d, 1);
#undef NM
}

static void bind_all(binder *b) {
    whisper_model *m = b->m;
    const whisper_hparams *hp = &m->hp;
    int64_t d = hp->n_audio_state;
    char n[MAX_NAME];
    mat(b, &m->conv1, "encoder.conv1.weight", 3 * (int64_t)hp->n_mels, d, 1);
    m->conv1_b = bias(b, "encoder.conv1.bias", d);
    mat(b, &m->conv2, "encoder.conv2.weight", 3 * d, d, 1);
    m->conv2_b = bias(b, "encoder.conv2.bias", d);
    m->enc_pos = vec(b, "encoder.positional_embedding", d, hp->n_audio_ctx);
    for (int l = 0; l < hp->n_audio_layer; l++) {
        snprintf(n, sizeof n, "encoder.blocks.%d", l);
        bind_block(b, &m->enc[l], n, d, 0);
    }
    m->ln_post_w = vec(b, "encoder.ln_post.weight", d, 1);
    m->ln_post_b = vec(b, "encoder.ln_post.bias", d, 1);
    mat(b, &m->tok, "decoder.token_embedding.weight", d, hp->n_vocab, 0);
    m->dec_pos = vec(b, "decoder.positional_embedding", d, hp->n_text_ctx);
    for (int l = 0; l < hp->n_text_layer; l++) {
        snprintf(n, sizeof n, "decoder.blocks.%d", l);
        bind_block(b, &m->dec[l], n, d, 1);
    }
    m->ln_w = vec(b, "decoder.ln.weight", d, 1);
    m->ln_b = vec(b, "decoder.ln.bias", d, 1);
}

static kiln_status check_hparams(const whisper_hparams *hp) {
#define RANGE(f, lo, hi)                                                                                           \
    if (hp->f < (lo) || hp->f > (hi)) {                                                                            \
        return base_fail(KILN_ERR_FORMAT, "hyperparameter " #f " = %d is out of range [%d, %d]", hp->f, (int)(lo), \
                         (int)(hi));                                                                               \
    }
    RANGE(n_vocab, 1, 1 << 20);
    RANGE(n_audio_ctx, 1, 1500);
    RANGE(n_audio_state, 1, 8192);
    RANGE(n_audio_head, 1, 256);
    RANGE(n_audio_layer, 1, 128);
    RANGE(n_text_ctx, 4, 4096);
    RANGE(n_text_state, 1, 8192);
    RANGE(n_text_head, 1, 256);
    RANGE(n_text_layer, 1, 128);
    RANGE(n_mels, 1, 512);
#undef RANGE
    if (hp->n_text_state != hp->n_audio_state) {
        return base_fail(KILN_ERR_FORMAT, "n_text_state %d differs from n_audio_state %d", hp->n_text_state,
                         hp->n_audio_state);
    }
    if (hp->n_audio_state % hp->n_audio_head || hp->n_text_state % hp->n_text_head) {
        return base_fail(KILN_ERR_FORMAT, "the width %d is not a multiple of the head counts (%d, %d)",
                         hp->n_audio_state, hp->n_audio_head, hp->n_text_head);
    }
    if (hp->n_audio_state % 2) {
        return base_fail(KILN_ERR_FORMAT, "n_audio_state %d is odd (sinusoidal positions need pairs)",
                         hp->n_audio_state);
    }
    return KILN_OK;
}

kiln_status whisper_load(const char *path, whisper_model **out) {
    *out = NULL;
    whisper_model *m = calloc(1, sizeof *m);
    tinfo *tabs = NULL;
    if (!m) return base_fail(KILN_ERR_NOMEM, "out of memory");
    kiln_status st = base_map_file(path, &m->map);
    if (st) {
        free(m);
        return st;
    }
    rd r = {m->map.addr, m->map.len, 0};
    uint32_t magic = 0;
    if (r.len < 4 || (memcpy(&magic, r.p, 4), magic != WHISPER_MAGIC)) {
        st = base_fail(KILN_ERR_FORMAT, "%s: not a whisper.cpp GGML file (bad magic)", path);
        goto fail;
    }
    r.off = 4;
    int32_t *hv = &m->hp.n_vocab;
    for (int i = 0; i < 11; i++)
        if (rd_i32(&r, &hv[i])) {
            st = base_fail(KILN_ERR_FORMAT, "%s: truncated in the hyperparameters", path);
            goto fail;
        }
    if ((st = check_hparams(&m->hp))) {
        st = base_fail(st, "%s: %s", path, kiln_last_error());
        goto fail;
    }
    {
        int ft = m->hp.ftype % 1000;
        m->wtype = m->hp.ftype < 0 ? -1 : ftype_to_type(ft);
        if (m->wtype < 0) {
            st = base_fail(KILN_ERR_UNSUPPORTED, "%s: unknown ftype %d", path, m->hp.ftype);
            goto fail;
        }
    }
    /* mel filters */
    int32_t fm = 0, fb = 0;
    if (rd_i32(&r, &fm) || rd_i32(&r, &fb)) {
        st = base_fail(KILN_ERR_FORMAT, "%s: truncated before the mel filters", path);
        goto fail;
    }
    if (fm != m->hp.n_mels || fb != WHISPER_N_FFT_BINS) {
        st = base_fail(KILN_ERR_FORMAT, "%s: mel filters are %d x %d, expected %d x %d", path, fm, fb, m->hp.n_mels,
                       WHISPER_N_FFT_BINS);
        goto fail;
    }
    size_t filt_bytes = (size_t)fm * (size_t)fb * 4;
    if (r.len - r.off < filt_bytes) {
        st = base_fail(KILN_ERR_FORMAT, "%s: truncated in the mel filters", path);
        goto fail;
    }
    size_t filt_off = r.off;
    r.off += filt_bytes;
    /* vocabulary */
    int32_t n_text = 0;
    if (rd_i32(&r, &n_text) || n_text < 1 || n_text >= m->hp.n_vocab) {
        st = base_fail(KILN_ERR_FORMAT, "%s: bad or truncated vocabulary count", path);
        goto fail;
    }
    size_t voc_off = r.off;
    for (int32_t i = 0; i < n_text; i++) {
        int32_t len;
        if (rd_i32(&r, &len) || len < 0 || len > 1024 || r.len - r.off < (size_t)len) {
            st = base_fail(KILN_ERR_FORMAT, "%s: vocabulary entry %d is bad or truncated", path, i);
            goto fail;
        }
        r.off += (size_t)len;
    }
    /* tensor headers */
    tabs = calloc(MAX_TENSORS, sizeof *tabs);
    if (!tabs) {
        st = base_fail(KILN_ERR_NOMEM, "out of memory");
        goto fail;
    }
    plan p = {tabs, 0, 0};
    while (r.off < r.len) {
        int32_t nd, nl, ty;
        if (p.n == MAX_TENSORS) {
            st = base_fail(KILN_ERR_FORMAT, "%s: more than %d tensors", path, MAX_TENSORS);
            goto fail;
        }
        tinfo *t = &tabs[p.n];
        if (rd_i32(&r, &nd) || rd_i32(&r, &nl) || rd_i32(&r, &ty)) {
            st = base_fail(KILN_ERR_FORMAT, "%s: tensor %d: truncated header", path, p.n);
            goto fail;
        }
        if (nd < 1 || nd > 3 || nl < 1 || nl >= MAX_NAME || ty < 0 || ty >= QUANT_TYPE_COUNT || !quant_get(ty) ||
            !quant_get(ty)->name) {
            st = base_fail(KILN_ERR_FORMAT, "%s: tensor %d: bad header (dims %d, name length %d, type %d)", path, p.n,
                           nd, nl, ty);
            goto fail;
        }
        uint64_t nel = 1;
        for (int d = 0; d < nd; d++) {
            int32_t ne;
            if (rd_i32(&r, &ne) || ne < 1) {
                st = base_fail(KILN_ERR_FORMAT, "%s: tensor %d: bad or truncated shape", path, p.n);
                goto fail;
            }
            t->ne[d] = ne;
            if (base_mul_u64(nel, (uint64_t)ne, &nel) || nel > ((uint64_t)1 << 40)) {
                st = base_fail(KILN_ERR_FORMAT, "%s: tensor %d: too many elements", path, p.n);
                goto fail;
            }
        }
        for (int d = nd; d < 3; d++) t->ne[d] = 1;
        if (r.len - r.off < (size_t)nl) {
            st = base_fail(KILN_ERR_FORMAT, "%s: tensor %d: truncated name", path, p.n);
            goto fail;
        }
        memcpy(t->name, r.p + r.off, (size_t)nl);
        t->name[nl] = 0;
        if (strlen(t->name) != (size_t)nl) {
            st = base_fail(KILN_ERR_FORMAT, "%s: tensor %d: name has a NUL byte", path, p.n);
            goto fail;
        }
        r.off += (size_t)nl;
        const quant_traits *tr = quant_get(ty);
        if (t->ne[0] % tr->blck) {
            st = base_fail(KILN_ERR_FORMAT, "%s: tensor '%s': %lld elements per row are not whole %s blocks", path,
                           t->name, (long long)t->ne[0], tr->name);
            goto fail;
        }
        t->type = ty;
        t->n_dims = nd;
        t->nbytes = quant_row_size(ty, t->ne[0]) * (size_t)(t->ne[1] * t->ne[2]);
        if (r.len - r.off < t->nbytes) {
            st = base_fail(KILN_ERR_FORMAT, "%s: tensor '%s': data truncated (%zu bytes, %zu left in the file)", path,
                           t->name, t->nbytes, r.len - r.off);
            goto fail;
        }
        t->off = r.off;
        r.off += t->nbytes;
        for (int i = 0; i < p.n; i++)
            if (!strcmp(tabs[i].name, t->name)) {
                st = base_fail(KILN_ERR_FORMAT, "%s: tensor '%s' appears twice", path, t->name);
                goto fail;
            }
        m->n_params += nel;
        m->n_bytes += t->nbytes;
        m->type_count[ty]++;
        p.n++;
    }
    m->n_tensors = p.n;
    /* the vocabulary layout */
    m->vocab.n_text = n_text;
    if ((st = whisper_vocab_init(&m->vocab, m->hp.n_vocab))) {
        st = base_fail(st, "%s: %s", path, kiln_last_error());
        goto fail;
    }
    m->n_langs = m->vocab.n_langs;
    m->size_name = size_name(&m->hp);
    /* sizing pass, then the allocation, then the real binding */
    m->enc = calloc((size_t)m->hp.n_audio_layer, sizeof *m->enc);
    m->dec = calloc((size_t)m->hp.n_text_layer, sizeof *m->dec);
    if (!m->enc || !m->dec) {
        st = base_fail(KILN_ERR_NOMEM, "out of memory");
        goto fail;
    }
    binder b = {m, &p, NULL, 0, KILN_OK};
    bind_all(&b);
    if (b.failed) {
        st = base_fail(b.failed, "%s: %s", path, kiln_last_error());
        goto fail;
    }
    for (int i = 0; i < p.n; i++)
        if (!tabs[i].used) {
            st = base_fail(KILN_ERR_FORMAT, "%s: unexpected tensor '%s'", path, tabs[i].name);
            goto fail;
        }
    size_t arena = b.used + (size_t)m->hp.n_mels * WHISPER_N_FFT_BINS * sizeof(float) + 64;
    if (posix_memalign(&m->arena, 64, arena)) {
        m->arena = NULL;
        st = base_fail(KILN_ERR_NOMEM, "out of memory (%zu bytes)", arena);
        goto fail;
    }
    m->arena_bytes = arena;
    for (int i = 0; i < p.n; i++) tabs[i].used = 0;
    binder b2 = {m, &p, m->arena, 0, KILN_OK};
    bind_all(&b2);
    if (b2.failed) {
        st = base_fail(b2.failed, "%s: %s", path, kiln_last_error());
        goto fail;
    }
    m->filters = (float *)((uint8_t *)m->arena + ((b2.used + 63) & ~(size_t)63));
    memcpy(m->filters, m->map.addr + filt_off, filt_bytes);
    for (size_t i = 0; i < (size_t)fm * (size_t)fb; i++)
        if (!(m->filters[i] >= 0.0f && m->filters[i] < 1e30f)) {
            st = base_fail(KILN_ERR_FORMAT, "%s: mel filter value %zu is negative or not finite", path, i);
            goto fail;
        }
    /* text tokens point into the map */
    {
        size_t off = voc_off;
        int32_t maxl = 0;
        for (int32_t i = 0; i < n_text; i++) {
            int32_t len;
            memcpy(&len, m->map.addr + off, 4);
            m->vocab.text[i] = m->map.addr + off + 4;
            m->vocab.len[i] = len;
            if (len > maxl) maxl = len;
            off += 4 + (size_t)len;
        }
        m->vocab.max_len = maxl;
        if (whisper_vocab_index(&m->vocab)) {
            st = base_fail(KILN_ERR_NOMEM, "out of memory");
            goto fail;
        }
    }
    free(tabs);
    *out = m;
    return KILN_OK;
fail:
    free(tabs);
    whisper_free(m);
    return st;
}

void whisper_free(whisper_model *m) {
    if (!m) return;
    whisper_vocab_free(&m->vocab);
    free(m->enc);
    free(m->dec);
    free(m->arena);
    base_unmap(&m->map);
    free(m);
}
