/* Model loading: hyperparameters from metadata, the family's binding (its
 * tensors' shapes checked, so the forward pass can trust every pointer),
 * the backend's weight preparation and the projector (vision/). */
#include "model/model.h"

#include "backend/cuda.h"
#include "base/base.h"
#include "model/state.h"
#include "quant/quant.h"
#include "vision/vision.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct loader {
    kiln_model *m;
    char err[512];
} loader;

static const char *meta_str(const kiln_model *m, const char *suffix, char *buf, size_t cap) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", m->arch_name, suffix);
    return gguf_get_cstr(m->gf, key, buf, cap, NULL);
}

/* The hyperparameters every family reads the same way.  n_ff may be
 * absent (mixture-of-experts models); a family that needs it checks. */
static int load_hparams(loader *L) {
    kiln_model *m = L->m;
    model_hparams *hp = &m->hp;
    hp->n_embd = (int)model_meta_int(m, "embedding_length", 0);
    hp->n_layer = (int)model_meta_int(m, "block_count", 0);
    hp->n_ff = (int)model_meta_int(m, "feed_forward_length", 0);
    hp->n_head = (int)model_meta_int(m, "attention.head_count", 0);
    hp->n_head_kv = (int)model_meta_int(m, "attention.head_count_kv", hp->n_head);
    hp->n_ctx_train = (int)model_meta_int(m, "context_length", 2048);
    hp->eps = (float)model_meta_float(m, "attention.layer_norm_rms_epsilon", 1e-5);
    if (hp->n_embd <= 0 || hp->n_embd > 65536 || hp->n_layer <= 0 || hp->n_layer > 1024 || hp->n_ff < 0 ||
        hp->n_ff > (1 << 20) || hp->n_head <= 0 || hp->n_head > 1024 || hp->n_head_kv <= 0 ||
        hp->n_head % hp->n_head_kv != 0 || hp->n_ctx_train <= 0) {
        snprintf(L->err, sizeof L->err,
                 "bad or missing hyperparameters (n_embd %d, n_layer %d, n_ff %d, n_head %d, n_head_kv %d, "
                 "context %d)",
                 hp->n_embd, hp->n_layer, hp->n_ff, hp->n_head, hp->n_head_kv, hp->n_ctx_train);
        return -1;
    }
    hp->hd_k = (int)model_meta_int(m, "attention.key_length", hp->n_embd / hp->n_head);
    hp->hd_v = (int)model_meta_int(m, "attention.value_length", hp->hd_k);
    if (hp->hd_k <= 0 || hp->hd_k > 1024 || hp->hd_v <= 0 || hp->hd_v > 1024 ||
        (hp->hd_v != hp->hd_k && !m->arch->family->split_head_sizes)) {
        snprintf(L->err, sizeof L->err, "unsupported head sizes (key %d, value %d)", hp->hd_k, hp->hd_v);
        return -1;
    }
    kern_rope *r = &hp->rope;
    r->n_rot = (int)model_meta_int(m, "rope.dimension_count", hp->hd_k);
    if (r->n_rot <= 0 || r->n_rot > hp->hd_k || r->n_rot % 2) {
        snprintf(L->err, sizeof L->err, "bad rope.dimension_count %d", r->n_rot);
        return -1;
    }
    r->base = (float)model_meta_float(m, "rope.freq_base", 10000.0);
    r->freq_scale = 1.0f;
    r->attn_factor = 1.0f;
    r->beta_fast = (float)model_meta_float(m, "rope.scaling.yarn_beta_fast", 32.0);
    r->beta_slow = (float)model_meta_float(m, "rope.scaling.yarn_beta_slow", 1.0);
    r->n_ctx_orig = (int)model_meta_int(m, "rope.scaling.original_context_length", hp->n_ctx_train);
    char st[32];
    const char *stype = meta_str(m, "rope.scaling.type", st, sizeof st);
    double factor = model_meta_float(m, "rope.scaling.factor", 0.0);
    if (factor == 0.0) {
        double lin = model_meta_float(m, "rope.scale_linear", 0.0); /* older files */
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
            r->attn_factor = (float)model_meta_float(m, "rope.scaling.attn_factor", 1.0);
            /* With yarn_log_multiplier (mscale_all_dim) the cos/sin magnitude
             * is mscale(1) / mscale(log_mul), mscale(a) = 1 + 0.1 a ln(factor);
             * kern_rope_table multiplies by mscale(1) itself, so divide that out. */
            double log_mul = model_meta_float(m, "rope.scaling.yarn_log_multiplier", 0.0);
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
    hp->n_embd_inp = hp->n_embd;
    return 0;
}

static void summarize(kiln_model *m) {
    int counts[QUANT_TYPE_COUNT] = {0};
    for (int i = 0; i < gguf_n_tensors(m->gf); i++) {
        const gguf_tensor *t = gguf_tensor_at(m->gf, i);
        m->n_params += (uint64_t)(t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3]);
        m->n_bytes += t->nbytes;
        if (t->n_dims >= 2 && t->type < QUANT_TYPE_COUNT) counts[t->type]++;
    }
    int best = QUANT_F32;
    for (int t = 0; t < QUANT_TYPE_COUNT; t++)
        if (counts[t] > counts[best]) best = t;
    snprintf(m->ftype, sizeof m->ftype, "%s", quant_get(best)->name);
}

/* The backend be prepares part (model_weights.part) of the weights (on the
 * CPU: the interleaved copies of the matrices, with the norms and biases
 * between them moved beside; on CUDA: everything uploaded, the token
 * embeddings too unless the model is split) into *mem.  -1 with err when
 * the backend has no kernel for a matrix's type. */
static int prepare_part(kiln_model *m, const backend_backend *be, int part, void **mem, size_t *bytes, char *err,
                        size_t errlen) {
    model_weights wl;
    memset(&wl, 0, sizeof wl);
    wl.part = part;
    wl.l0 = m->gpu_l0;
    const int cuda = be->kind == BACKEND_CUDA;
    if (m->arch->family->weights) m->arch->family->weights(m, &wl);
    wl.layer1 = 0;
    if (cuda && part == 0) model_weights_mat(&wl, &m->tok_embd);
    int rc = 0;
    for (int i = 0; cuda && i < wl.n_mats && !rc; i++)
        if (wl.mats[i]->data && !backend_cuda_weight_type(wl.mats[i]->type)) {
            snprintf(err, errlen, "the CUDA backend has no kernels for %s weights", quant_get(wl.mats[i]->type)->name);
            rc = -1;
        }
    if (cuda && wl.failed && !rc) {
        snprintf(err, errlen, "out of memory");
        rc = -1;
    }
    /* the host builds the step's RoPE tables: the frequency factors stay
     * host memory whatever the backend does with the other vectors */
    const float *freq_factors = m->hp.rope.freq_factors;
    if (!wl.failed && !rc) be->prepare(wl.mats, wl.n_mats, wl.vecs, wl.vlen, wl.n_vecs, mem, bytes);
    if (cuda) m->hp.rope.freq_factors = freq_factors;
    if (part != 2 && *mem && m->tok_embd.data == m->output.data) m->tok_embd.packed = m->output.packed;
    free(wl.mats);
    free(wl.vecs);
    free(wl.vlen);
    return rc;
}

/* The model's weights prepared: all on m->be, or split: the GPU's layers
 * on m->be and, when repack, the host part on m->be_lo. */
static int prepare(kiln_model *m, int repack, char *err, size_t errlen) {
    if (!m->be_lo) return prepare_part(m, m->be, 0, &m->packed_mem, &m->packed_bytes, err, errlen);
    if (prepare_part(m, m->be, 2, &m->packed_mem, &m->packed_bytes, err, errlen)) return -1;
    return repack ? prepare_part(m, m->be_lo, 1, &m->lo_mem, &m->lo_bytes, err, errlen) : 0;
}

/* Bytes of the weights a split model keeps on the GPU (as stored). */
static uint64_t gpu_weight_bytes(kiln_model *m) {
    if (!m->be_lo) return m->n_bytes;
    model_weights wl;
    memset(&wl, 0, sizeof wl);
    wl.part = 2;
    wl.l0 = m->gpu_l0;
    if (m->arch->family->weights) m->arch->family->weights(m, &wl);
    uint64_t n = 0;
    for (int i = 0; i < wl.n_mats; i++) n += quant_row_size(wl.mats[i]->type, wl.mats[i]->ncols) * wl.mats[i]->nrows;
    for (int i = 0; i < wl.n_vecs; i++) n += (uint64_t)wl.vlen[i] * sizeof(float);
    free(wl.mats);
    free(wl.vecs);
    free(wl.vlen);
    return n;
}

/* What a model needs that the CUDA backend has no kernel for yet, in buf
 * (NULL: nothing): the dense family (plain attention, SwiGLU or
 * mixture-of-experts FFN) and the hybrid one (Gated DeltaNet and gated
 * attention) run. */
static const char *cuda_missing(const kiln_model *m, char *buf, size_t cap) {
    if (m->arch->family != &model_family_dense && m->arch->family != &model_family_hybrid) {
        snprintf(buf, cap, "the %s family", m->arch->family->name);
        return buf;
    }
    if (model_meta_float(m, "attention.temperature_scale", 0.0) != 0.0) return "a query temperature";
    if (m->hp.rope_factors_long) return "LongRoPE";
    /* M-RoPE sections (qwen35, qwen2vl, qwen3vl) run: without images (a
     * projector is refused below) a token's section positions are all its
     * position, the plain rotation bit for bit */
    if (m->hp.hd_k != m->hp.hd_v || m->hp.hd_k > 256 || m->hp.hd_k % 2) return "this attention head size";
    return NULL;
}

/* Whether the model, with the context p (NULL: the defaults) and its KV
 * cache, fits the GPU's free memory: -1 with the reason in why if not. */
static int cuda_fits(kiln_model *m, const kiln_context_params *cp, char *why, size_t cap) {
    kiln_context_params p = cp ? *cp : kiln_context_default_params();
    const int n_seq = p.n_seq_max > 0 ? p.n_seq_max : 1;
    int n_ctx = p.n_ctx > 0 ? p.n_ctx : m->hp.n_ctx_train < 4096 ? m->hp.n_ctx_train : 4096;
    if (n_ctx < 1) n_ctx = 1;
    uint64_t kv = 0, rs = 0;
    if (m->arch->family->seq_shape) {
        model_seq_shape s;
        m->arch->family->seq_shape(m, &s);
        if (s.n_attn_layer > 0 && (p.kv_type == KILN_KV_F32 || s.v_in_k)) {
            snprintf(why, cap, "the CUDA backend keeps only an F16 or Q8_0 KV cache with separate K and V");
            return -1;
        }
        const int lo = m->be_lo ? model_attn_below(m, m->gpu_l0) : 0;
        kv = model_kv_bytes_range(&s, p.kv_type, lo, s.n_attn_layer) * (uint64_t)n_ctx * (uint64_t)n_seq;
        if (s.rs_floats) rs = model_rs_bytes(s.rs_floats, s.roll_floats, n_seq, MODEL_RS_SNAP_PER_SEQ * n_seq);
    }
    const uint64_t w = gpu_weight_bytes(m), act = model_cuda_act_bytes(m, p.n_batch, n_seq);
    size_t free_b = 0, total_b = 0;
    if (backend_cuda_mem(&free_b, &total_b, NULL, 0)) {
        snprintf(why, cap, "the GPU's free memory is unknown");
        return -1;
    }
    if (w + kv + rs + act <= free_b) return 0;
    snprintf(why, cap,
             "not enough GPU memory: %llu MiB needed (weights %llu, KV cache %llu for %d tokens x %d sequence(s), "
             "states %llu, activations %llu), %llu MiB free of %llu",
             (unsigned long long)((w + kv + rs + act) >> 20), (unsigned long long)(w >> 20),
             (unsigned long long)(kv >> 20), n_ctx, n_seq, (unsigned long long)(rs >> 20),
             (unsigned long long)(act >> 20), (unsigned long long)(free_b >> 20), (unsigned long long)(total_b >> 20));
    return -1;
}

/* Whether the model's layers cannot be split between the GPU and the CPU
 * (the reason in why): the dense and hybrid families' can. */
static int split_refused(const kiln_model *m, char *why, size_t cap) {
    if (m->arch->family == &model_family_dense || m->arch->family == &model_family_hybrid) return 0;
    if (why)
        snprintf(why, cap,
                 "kiln cannot split the %s family's layers between the GPU and the CPU yet (all layers, or the CPU)",
                 m->arch->family->name);
    return 1;
}

/* Loads path onto backend be (fit: on CUDA, as many layers as fit when not
 * all do).  A refusal by the CUDA backend (no kernels
 * for the model, too little memory) sets *refused with its reason in why
 * (cap bytes). */
static kiln_status load_on(const char *path, const kiln_model_params *pp, const backend_backend *be, int fit,
                           kiln_model **out, int *refused, char *why, size_t cap) {
    const kiln_model_params p = *pp;
    kiln_model *m = calloc(1, sizeof *m);
    if (!m) return base_fail(KILN_ERR_NOMEM, "out of memory");
    m->be = be;
    loader L = {m, {0}};
    kiln_status gst = gguf_open(path, &m->gf);
    if (gst) {
        free(m);
        return gst;
    }
    kiln_status st = KILN_ERR_FORMAT;
    if (!gguf_get_cstr(m->gf, "general.architecture", m->arch_name, sizeof m->arch_name, NULL)) {
        snprintf(L.err, sizeof L.err, "no general.architecture in the metadata");
        goto fail;
    }
    m->arch = model_arch_find(m->arch_name);
    if (!m->arch) {
        snprintf(L.err, sizeof L.err, "unsupported architecture '%s' (kiln runs: %s)", m->arch_name, model_arch_list());
        st = KILN_ERR_UNSUPPORTED;
        goto fail;
    }
    gguf_get_cstr(m->gf, "general.name", m->name, sizeof m->name, "");
    if (load_hparams(&L)) goto fail;
    st = m->arch->family->bind(m);
    if (st) {
        snprintf(L.err, sizeof L.err, "%s", kiln_last_error());
        goto fail;
    }
    st = KILN_ERR_FORMAT;
    if (m->hp.n_vocab <= 0) {
        snprintf(L.err, sizeof L.err, "tensor token_embd.weight has no rows");
        goto fail;
    }
    if (tok_load(m->gf, &m->tok)) {
        snprintf(L.err, sizeof L.err, "tokenizer: %s", kiln_last_error());
        goto fail;
    }
    if (tok_n_vocab(m->tok) > m->hp.n_vocab) {
        snprintf(L.err, sizeof L.err, "the vocabulary has %d tokens but token_embd.weight only %d rows",
                 tok_n_vocab(m->tok), m->hp.n_vocab);
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
    if (be->kind == BACKEND_CUDA) {
        char what[64];
        const char *miss = cuda_missing(m, what, sizeof what);
        st = KILN_ERR_UNSUPPORTED;
        *refused = 1;
        if (!miss && p.mmproj && p.mmproj[0]) miss = "image inputs (a projector)";
        if (miss) {
            snprintf(L.err, sizeof L.err, "the CUDA backend has no kernels for %s yet", miss);
            goto fail;
        }
        /* llama.cpp's rule: -ngl N puts the last N layers on the GPU, the
         * output head too only past n_layer (-ngl 99) */
        const int nl = m->hp.n_layer;
        int ngl = p.gpu_layers > nl ? 0 : p.gpu_layers;
        if (ngl == KILN_GPU_LAYERS_AUTO || (ngl == 0 && fit)) {
            ngl = 0;
            if (cuda_fits(m, p.ctx, L.err, sizeof L.err) && !split_refused(m, NULL, 0)) {
                /* as many layers as fit, the most first */
                m->be_lo = backend_get(BACKEND_CPU);
                int n = nl;
                for (; n > 0; n--) {
                    m->gpu_l0 = nl - n;
                    if (!cuda_fits(m, p.ctx, NULL, 0)) break;
                }
                m->be_lo = NULL;
                m->gpu_l0 = 0;
                if (n > 0) ngl = n;
            }
        }
        if (ngl > 0) {
            if (split_refused(m, L.err, sizeof L.err)) goto fail;
            m->be_lo = backend_get(BACKEND_CPU);
            m->gpu_l0 = nl - ngl;
        }
        if (cuda_fits(m, p.ctx, L.err, sizeof L.err)) goto fail;
        *refused = 0;
    }
    if (p.repack || be->kind != BACKEND_CPU) {
        if (prepare(m, p.repack, L.err, sizeof L.err)) {
            st = KILN_ERR_UNSUPPORTED;
            if (be->kind == BACKEND_CUDA) *refused = 1;
            goto fail;
        }
    }
    if (p.mmproj && p.mmproj[0]) {
        if (!m->arch->family->image_input) {
            snprintf(L.err, sizeof L.err, "the %s architecture does not take images", m->arch_name);
            st = KILN_ERR_UNSUPPORTED;
            goto fail;
        }
        st = vision_load(p.mmproj, m->hp.n_embd_inp, &m->vision);
        if (st != KILN_OK) {
            kiln_model_free(m);
            return st;
        }
        m->image_bidi = m->vision->proj->bidirectional;
    }
    *out = m;
    return KILN_OK;
fail:
    if (*refused) snprintf(why, cap, "%s", L.err);
    base_fail(st, "%s: %s", path, L.err);
    kiln_model_free(m);
    return st;
}

/* The backend KILN_DEVICE names for AUTO ("cpu", "cuda"; anything else:
 * AUTO). */
static int env_device(void) {
    const char *e = getenv("KILN_DEVICE");
    if (e && strcmp(e, "cpu") == 0) return KILN_ENGINE_BACKEND_CPU;
    if (e && (strcmp(e, "cuda") == 0 || strcmp(e, "cuda:0") == 0 || strcmp(e, "gpu") == 0))
        return KILN_ENGINE_BACKEND_CUDA;
    return KILN_ENGINE_BACKEND_AUTO;
}

kiln_status kiln_model_load(const char *path, const kiln_model_params *params, kiln_model **out) {
    *out = NULL;
    kiln_model_params p = params ? *params : kiln_model_default_params();
    if (!path) return base_fail(KILN_ERR_INVALID_ARG, "no model path given");
    int want = p.backend == KILN_ENGINE_BACKEND_AUTO ? env_device() : p.backend;
    if (want != KILN_ENGINE_BACKEND_AUTO && want != KILN_ENGINE_BACKEND_CPU && want != KILN_ENGINE_BACKEND_CUDA)
        return base_fail(KILN_ERR_INVALID_ARG, "unknown backend %d", p.backend);
    char why[512];
    const backend_backend *cuda = want == KILN_ENGINE_BACKEND_CPU ? NULL : backend_cuda_get(why, sizeof why);
    if (want == KILN_ENGINE_BACKEND_CUDA && !cuda) return base_fail(KILN_ERR_UNSUPPORTED, "no CUDA backend: %s", why);
    if (cuda) {
        int refused = 0;
        const int fit = want == KILN_ENGINE_BACKEND_AUTO && p.gpu_layers == 0;
        kiln_status st = load_on(path, &p, cuda, fit, out, &refused, why, sizeof why);
        if (st == KILN_OK || want == KILN_ENGINE_BACKEND_CUDA || !refused) return st;
        base_log(BASE_LOG_WARN, "running %s on the CPU, not the GPU: %s", path, why);
    }
    int refused = 0;
    return load_on(path, &p, backend_get(BACKEND_CPU), 0, out, &refused, why, sizeof why);
}

void kiln_model_free(kiln_model *m) {
    if (!m) return;
    if (m->tok) tok_free(m->tok);
    if (m->arch && m->arch->family->free) m->arch->family->free(m);
    free(m->chat_template);
    gguf_close(m->gf);
    if (m->packed_mem) m->be->release(m->packed_mem, m->packed_bytes);
    if (m->lo_mem) m->be_lo->release(m->lo_mem, m->lo_bytes);
    vision_free(m->vision);
    free(m);
}

int32_t kiln_model_has_vision(const kiln_model *m) { return m && m->vision ? 1 : 0; }

kiln_status model_image_prompt(kiln_model *m, const char *text, size_t len, int add_special, int parse_special,
                               const kiln_image_input *images, int32_t n_images, vision_prompt *out) {
    const vision_text tx = {m ? m->tok : NULL, m ? m->hp.n_embd_inp : 0, m && m->hp.rope.mrope};
    return vision_prompt_build(m ? m->vision : NULL, &tx, text, len, add_special, parse_special, images, n_images, out);
}

kiln_model_params kiln_model_default_params(void) {
    kiln_model_params p = {1, 1, KILN_ENGINE_BACKEND_AUTO, NULL, 0, NULL};
    const char *e = getenv("KILN_REPACK");
    if (e && strcmp(e, "0") == 0) p.repack = 0;
    return p;
}

void kiln_model_get_info(const kiln_model *m, kiln_model_info *info) {
    memset(info, 0, sizeof *info);
    info->arch = m->arch_name;
    info->name = m->name;
    const int cuda = m->be->kind == BACKEND_CUDA;
    info->repacked_bytes = cuda ? m->lo_bytes : m->packed_bytes;
    info->backend = m->be->name;
    info->device_bytes = cuda ? m->packed_bytes : 0;
    info->gpu_layers = cuda ? m->hp.n_layer - m->gpu_l0 : 0;
    info->n_vocab = m->hp.n_vocab;
    info->n_ctx_train = m->hp.n_ctx_train;
    info->n_embd = m->hp.n_embd;
    info->n_embd_inp = m->hp.n_embd_inp;
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
        model_seq_shape s;
        m->arch->family->seq_shape(m, &s);
        info->n_attn_layer = s.n_attn_layer;
        info->kv_bytes_per_token = model_kv_bytes_per_token(&s, KILN_KV_F16);
        info->state_bytes = (uint64_t)s.rs_floats * sizeof(float);
    }
}

const char *kiln_model_chat_template(const kiln_model *m) { return m->chat_template; }
