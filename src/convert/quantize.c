/*
 * kiln_quantize: rewrites a GGUF with its 2-D weights in another type.
 *
 * Which tensor gets which type follows the rules llama.cpp's quantizer
 * applies, so a file written here has the tensor types users expect:
 *   - 1-D tensors (norms, biases) stay F32;
 *   - the output projection (token_embd when embeddings are tied) becomes
 *     Q6_K for every target below Q8_0;
 *   - the _M mixes give attn_v and ffn_down Q6_K (Q4_K_M) or Q5_K (Q3_K_M)
 *     in the first and last eighth of the layers and every third layer
 *     between ("use more bits"); Q3_K_L gives attn_v, ffn_down and
 *     attn_output Q5_K in every layer; attn_v counts with attn_qkv (a Gated
 *     DeltaNet layer's fused input) by their order in the file, ffn_down
 *     with the experts' and the shared expert's down projections by layer;
 *   - with 8 experts, attn_v, attn_qkv and attn_k become Q8_0 and, in the
 *     K mixes up to Q4_K_M, attn_output Q5_K;
 *   - a mixture of experts' 3-D expert tensors are quantized like 2-D ones;
 *     its router (ffn_gate_inp) and a Gated DeltaNet's ssm_conv1d keep
 *     their type, as tensors whose names do not end in "weight" do;
 *   - IQ3_S gives attn_v Q4_K where 4 or more query heads share a KV head;
 *   - a tensor whose rows don't divide into the type's blocks falls back to
 *     a type whose blocks fit (the caller hears of each one).
 * Metadata is copied, with general.file_type and
 * general.quantization_version updated.
 */
#include "kiln.h"

#include "base/base.h"
#include "gguf/gguf.h"
#include "quant/quant.h"
#include "thread/pool.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

typedef struct qmix {
    const char *name;
    int base;      /* type of ordinary 2-D weights */
    int more_bits; /* attn_v / ffn_down in "more bits" layers, -1 = base */
    int ftype;     /* general.file_type value (llama.cpp's enum) */
    int all_bits;  /* attn_v, ffn_down and attn_output in every layer (Q3_K_L), -1 = none */
} qmix;

static const qmix k_mixes[] = {
    {"f32", QUANT_F32, -1, 0, -1},
    {"f16", QUANT_F16, -1, 1, -1},
    {"bf16", QUANT_BF16, -1, 32, -1},
    {"q4_0", QUANT_Q4_0, -1, 2, -1},
    {"q4_1", QUANT_Q4_1, -1, 3, -1},
    {"q8_0", QUANT_Q8_0, -1, 7, -1},
    {"q5_0", QUANT_Q5_0, -1, 8, -1},
    {"q5_1", QUANT_Q5_1, -1, 9, -1},
    {"q2_k", QUANT_Q2_K, -1, 10, -1},
    {"q3_k", QUANT_Q3_K, -1, 11, -1},
    {"q3_k_s", QUANT_Q3_K, -1, 11, -1},
    {"q3_k_m", QUANT_Q3_K, QUANT_Q5_K, 12, -1},
    {"q3_k_l", QUANT_Q3_K, -1, 13, QUANT_Q5_K},
    {"q4_k", QUANT_Q4_K, -1, 14, -1},
    {"q4_k_s", QUANT_Q4_K, -1, 14, -1},
    {"q4_k_m", QUANT_Q4_K, QUANT_Q6_K, 15, -1},
    {"q5_k", QUANT_Q5_K, -1, 16, -1},
    {"q5_k_s", QUANT_Q5_K, -1, 16, -1},
    {"q5_k_m", QUANT_Q5_K, QUANT_Q6_K, 17, -1},
    {"q6_k", QUANT_Q6_K, -1, 18, -1},
    {"iq4_nl", QUANT_IQ4_NL, -1, 25, -1},
    {"iq4_xs", QUANT_IQ4_XS, -1, 30, -1},
    {"iq3_s", QUANT_IQ3_S, -1, 26, -1},
};

/* The low-bit mixes: ternary, and MXFP4 experts (rules in pick_type). */
static const qmix k_mixes_lowbit[] = {
    {"tq1_0", QUANT_TQ1_0, -1, 36, -1},
    {"tq2_0", QUANT_TQ2_0, -1, 37, -1},
    {"mxfp4_moe", QUANT_MXFP4, -1, 38, -1},
};

/* Elements per block of the ternary types. */
#define KQ_QK_TQ 256

static const qmix *find_mix(const char *name) {
    char low[32];
    size_t n = strlen(name);
    if (n >= sizeof low) return NULL;
    for (size_t i = 0; i <= n; i++) low[i] = (char)tolower((unsigned char)name[i]);
    for (size_t i = 0; i < sizeof k_mixes / sizeof k_mixes[0]; i++)
        if (!strcmp(k_mixes[i].name, low)) return &k_mixes[i];
    for (size_t i = 0; i < sizeof k_mixes_lowbit / sizeof k_mixes_lowbit[0]; i++)
        if (!strcmp(k_mixes_lowbit[i].name, low)) return &k_mixes_lowbit[i];
    return NULL;
}

/* Targets llama.cpp's quantizer writes only with an importance matrix (its
 * tensor_requires_imatrix: IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS, IQ2_S and IQ3_XXS
 * tensors, and the mixes that use them, IQ2_M and IQ3_XS: their grid search
 * is weighted by it); kiln reads no importance matrix yet. */
static const char *const k_need_imatrix[] = {"iq1_s", "iq1_m", "iq2_xxs", "iq2_xs",
                                             "iq2_s", "iq2_m", "iq3_xxs", "iq3_xs"};

static const char *need_imatrix(const char *name) {
    for (size_t i = 0; i < sizeof k_need_imatrix / sizeof k_need_imatrix[0]; i++)
        if (!strcasecmp(k_need_imatrix[i], name)) return k_need_imatrix[i];
    return NULL;
}

static int use_more_bits(int layer, int n_layer) {
    return layer < n_layer / 8 || layer >= 7 * n_layer / 8 || (layer - n_layer / 8) % 3 == 2;
}

static int layer_of(const char *name) {
    int l;
    return sscanf(name, "blk.%d.", &l) == 1 ? l : -1;
}

static int is_output(const gguf_file *f, const char *name) {
    if (!strcmp(name, "output.weight")) return 1;
    return !strcmp(name, "token_embd.weight") && !gguf_find_tensor(f, "output.weight");
}

static int ends_with(const char *s, const char *tail) {
    const size_t n = strlen(s), k = strlen(tail);
    return n >= k && !strcmp(s + n - k, tail);
}

/* attn_v-like tensors: counted together, in file order */
static int is_attn_v(const char *name) {
    return strstr(name, "attn_v.weight") || strstr(name, "attn_qkv.weight") || strstr(name, "attn_kv_b.weight");
}

/* What the rules need from the whole file. */
typedef struct qplan {
    int n_layer;            /* {arch}.block_count */
    int n_expert;           /* {arch}.expert_count */
    int n_attn_v, i_attn_v; /* attn_v-like tensors, and how many came before */
    int n_gqa;              /* query heads per KV head (1 when not given) */
} qplan;

/* Target type of tensor t under mix q; *wanted receives the type the rules
 * chose before the block-size fallback. */
static int pick_type(const gguf_file *f, const gguf_tensor *t, const qmix *q, qplan *qp, int *wanted) {
    *wanted = -1;
    if (t->n_dims < 2 || strstr(t->name, "norm"))
        return t->type == QUANT_F16 || t->type == QUANT_BF16 ? QUANT_F32 : (int)t->type;
    if (!ends_with(t->name, "weight") || strstr(t->name, "ffn_gate_inp.weight") || strstr(t->name, "ssm_conv1d"))
        return (int)t->type;
    int want = q->base;
    int quantized = quant_get(want)->blck > 1;
    if (quantized && want != QUANT_Q8_0 && is_output(f, t->name)) want = QUANT_Q6_K;
    if (is_attn_v(t->name)) {
        const int i = qp->i_attn_v++;
        if (q->all_bits >= 0) want = q->all_bits;
        if (q->more_bits >= 0 && use_more_bits(i, qp->n_attn_v)) want = q->more_bits;
        if (q->base == QUANT_IQ3_S && qp->n_gqa >= 4) want = QUANT_Q4_K;
        if (quantized && qp->n_expert == 8) want = QUANT_Q8_0;
    } else if (quantized && qp->n_expert == 8 && strstr(t->name, "attn_k.weight")) {
        want = QUANT_Q8_0;
    } else if (quantized && qp->n_expert == 8 && strstr(t->name, "attn_output.weight") &&
               (q->ftype == 11 || q->ftype == 12 || q->ftype == 14 || q->ftype == 15 || q->ftype == 25 ||
                q->ftype == 30 || q->ftype == 10 || q->ftype == 26)) {
        want = QUANT_Q5_K; /* Q2_K, Q3_K_S/M, Q4_K_S/M, IQ4_NL, IQ4_XS, IQ3_S */
    } else if (q->all_bits >= 0 && (strstr(t->name, "ffn_down") || strstr(t->name, "attn_output.weight"))) {
        want = q->all_bits;
    } else if (q->more_bits >= 0 && strstr(t->name, "ffn_down")) {
        int l = layer_of(t->name);
        if (l >= 0 && use_more_bits(l, qp->n_layer)) want = q->more_bits;
    }
    /* MXFP4_MOE: the experts' 3-D tensors MXFP4, every other weight Q8_0 */
    if (q->base == QUANT_MXFP4) want = t->n_dims >= 3 && t->ne[2] > 1 ? QUANT_MXFP4 : QUANT_Q8_0;
    /* the ternary mixes keep an untied token embedding Q4_K */
    if ((q->base == QUANT_TQ1_0 || q->base == QUANT_TQ2_0) && !strcmp(t->name, "token_embd.weight") &&
        !is_output(f, t->name))
        want = QUANT_Q4_K;
    /* rows must divide into blocks; fall back toward finer blocks */
    *wanted = want;
    /* as llama.cpp, a ternary type falls back to Q4_0 (F16 when rows are not whole 32s) */
    if ((want == QUANT_TQ1_0 || want == QUANT_TQ2_0) && t->ne[0] % KQ_QK_TQ != 0)
        want = t->ne[0] % 32 == 0 ? QUANT_Q4_0 : QUANT_F16;
    if (t->ne[0] % quant_get(want)->blck != 0) {
        if (t->ne[0] % 32 == 0)
            want = want == QUANT_IQ3_S ? QUANT_IQ4_NL : quant_get(want)->blck == 256 ? QUANT_Q8_0 : want;
        else
            want = QUANT_F16;
        if (t->ne[0] % quant_get(want)->blck != 0) want = QUANT_F32;
    }
    return want;
}

typedef struct qjob {
    const gguf_file *src;
    int *types; /* target type per source tensor */
    thread_pool *pool;
    /* per-call state for the thread tasks */
    const gguf_tensor *t;
    int dst_type;
    uint8_t *dst;
    float *rowbuf; /* [threads][ne0] */
    int failed;
} qjob;

static void quant_rows(void *ud, int ith, int nth) {
    qjob *j = ud;
    const gguf_tensor *t = j->t;
    int64_t ne0 = t->ne[0], rows = t->ne[1] * t->ne[2] * t->ne[3];
    size_t srow = quant_row_size((int)t->type, ne0), drow = quant_row_size(j->dst_type, ne0);
    const quant_traits *from = quant_get((int)t->type), *to = quant_get(j->dst_type);
    float *buf = j->rowbuf + (size_t)ith * (size_t)ne0;
    long lo, hi;
    thread_pool_range((long)rows, ith, nth, &lo, &hi);
    for (long r = lo; r < hi; r++) {
        from->to_f32((const uint8_t *)t->data + (size_t)r * srow, buf, ne0);
        to->from_f32(buf, j->dst + (size_t)r * drow, ne0);
    }
}

static int produce(void *ud, int idx, void *dst, uint64_t nbytes) {
    qjob *j = ud;
    j->t = gguf_tensor_at(j->src, idx);
    j->dst_type = j->types[idx];
    j->dst = dst;
    if ((int)j->t->type == j->dst_type) {
        memcpy(dst, j->t->data, nbytes);
        return 0;
    }
    thread_pool_run(j->pool, quant_rows, j);
    return j->failed ? -1 : 0;
}

kiln_quantize_params kiln_quantize_default_params(void) {
    kiln_quantize_params p;
    memset(&p, 0, sizeof p);
    return p;
}

kiln_status kiln_quantize(const char *in_path, const char *out_path, const char *type, int n_threads) {
    kiln_quantize_params p = kiln_quantize_default_params();
    p.n_threads = n_threads;
    return kiln_quantize_with(in_path, out_path, type, &p);
}

kiln_status kiln_quantize_with(const char *in_path, const char *out_path, const char *type,
                               const kiln_quantize_params *params) {
    const qmix *q = type ? find_mix(type) : NULL;
    if (!q && type && need_imatrix(type))
        return base_fail(KILN_ERR_UNSUPPORTED,
                         "%s needs an importance matrix (as llama-quantize --imatrix), which kiln "
                         "cannot read yet",
                         type);
    if (!q) return base_fail(KILN_ERR_INVALID_ARG, "unknown quantization type '%s'", type ? type : "");
    if (!in_path || !out_path) return base_fail(KILN_ERR_INVALID_ARG, "missing input or output path");
    const kiln_quantize_params defaults = kiln_quantize_default_params();
    if (!params) params = &defaults;
    const int n_threads = params->n_threads;
    /* the output replaces its path when complete: never the input itself
     * (the same path, a link to it, or another name of its inode) */
    struct stat si, so;
    if (stat(in_path, &si) != 0) return base_fail(KILN_ERR_IO, "%s: %s", in_path, strerror(errno));
    if (stat(out_path, &so) == 0 && si.st_dev == so.st_dev && si.st_ino == so.st_ino)
        return base_fail(KILN_ERR_INVALID_ARG, "the output %s is the input file itself; write to another path",
                         out_path);
    gguf_file *f;
    kiln_status st = gguf_open(in_path, &f);
    if (st) return st;
    char arch[64];
    char key[96];
    qplan qp = {0, 0, 0, 0, 1};
    if (gguf_get_cstr(f, "general.architecture", arch, sizeof arch, NULL)) {
        snprintf(key, sizeof key, "%s.block_count", arch);
        qp.n_layer = (int)gguf_get_int(f, key, 0);
        snprintf(key, sizeof key, "%s.expert_count", arch);
        qp.n_expert = (int)gguf_get_int(f, key, 0);
        snprintf(key, sizeof key, "%s.attention.head_count", arch);
        const int64_t nh = gguf_get_int(f, key, 0);
        snprintf(key, sizeof key, "%s.attention.head_count_kv", arch);
        const int64_t nkv = gguf_get_int(f, key, nh);
        qp.n_gqa = nh > 0 && nkv > 0 ? (int)(nh / nkv) : 1;
    }
    for (int i = 0; i < gguf_n_tensors(f); i++) qp.n_attn_v += is_attn_v(gguf_tensor_at(f, i)->name) != 0;
    st = KILN_OK;
    int nt = gguf_n_tensors(f);
    int *types = calloc((size_t)(nt ? nt : 1), sizeof *types);
    int64_t max_ne0 = 1;
    gguf_writer *w = gguf_writer_new();
    thread_pool *pool = thread_pool_new(n_threads);
    if (!types || !w || !pool) {
        st = base_fail(KILN_ERR_NOMEM, "out of memory");
        goto done;
    }
    quant_init();
    for (int i = 0; i < gguf_n_kv(f); i++) {
        const gguf_kv *kv = gguf_kv_at(f, i);
        if (!strcmp(kv->key, "general.file_type") || !strcmp(kv->key, "general.quantization_version") ||
            !strcmp(kv->key, "general.alignment") || !strncmp(kv->key, "split.", 6))
            continue;
        gguf_w_copy_kv(w, kv);
    }
    gguf_w_u32(w, "general.file_type", (uint32_t)q->ftype);
    gguf_w_u32(w, "general.quantization_version", 2);
    for (int i = 0; i < nt; i++) {
        const gguf_tensor *t = gguf_tensor_at(f, i);
        if (!quant_supported((int)t->type)) {
            st = base_fail(KILN_ERR_UNSUPPORTED, "tensor %s has type %s, which kiln cannot convert", t->name,
                           quant_get((int)t->type)->name);
            goto done;
        }
        int wanted;
        types[i] = pick_type(f, t, q, &qp, &wanted);
        /* as llama-quantize: a quantized weight is quantized again only when asked (back to a float type is fine) */
        if (types[i] != (int)t->type && quant_get((int)t->type)->blck > 1 && quant_get(types[i])->blck > 1 &&
            !params->allow_requantize) {
            st = base_fail(KILN_ERR_INVALID_ARG,
                           "tensor %s is already quantized (%s); converting it again to %s loses more precision than "
                           "converting the F16/BF16/F32 original: allow requantizing to do it anyway",
                           t->name, quant_get((int)t->type)->name, quant_get(types[i])->name);
            goto done;
        }
        if (t->ne[0] > max_ne0) max_ne0 = t->ne[0];
        if (params->on_tensor) {
            const int64_t nrows = t->ne[1] * t->ne[2] * t->ne[3];
            kiln_quantize_tensor qt = {.name = t->name,
                                       .index = i,
                                       .count = nt,
                                       .n_dims = (int32_t)t->n_dims,
                                       .ne = {t->ne[0], t->ne[1], t->ne[2], t->ne[3]},
                                       .type_in = quant_get((int)t->type)->name,
                                       .type_out = quant_get(types[i])->name,
                                       .wanted = wanted >= 0 && wanted != types[i] ? quant_get(wanted)->name : NULL,
                                       .wanted_block = wanted >= 0 ? (int32_t)quant_get(wanted)->blck : 0,
                                       .bytes_in = t->nbytes,
                                       .bytes_out = (uint64_t)nrows * quant_row_size(types[i], t->ne[0])};
            params->on_tensor(&qt, params->user);
        }
        gguf_w_tensor(w, t->name, (uint32_t)types[i], (int)t->n_dims, t->ne, (int)t->type == types[i] ? t->data : NULL);
    }
    qjob j;
    memset(&j, 0, sizeof j);
    j.src = f;
    j.types = types;
    j.pool = pool;
    j.rowbuf = malloc((size_t)thread_pool_size(pool) * (size_t)max_ne0 * sizeof(float));
    if (!j.rowbuf) {
        st = base_fail(KILN_ERR_NOMEM, "out of memory");
        goto done;
    }
    st = gguf_writer_save(w, out_path, produce, &j);
    free(j.rowbuf);
done:
    thread_pool_free(pool);
    gguf_writer_free(w);
    free(types);
    gguf_close(f);
    return st;
}
