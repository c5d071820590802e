/* The CUDA backend's whole path on the mock device (tests/cuda_mock.cpp,
 * named by KILN_CUDA_DRIVER): the bundled stories260K model and the dense
 * F32/F16 fixtures, the hybrid ones (qwen35, qwen35moe in F32 and Q8_0,
 * qwen3next), the dense family's MoE (qwen3moe) and a Q8_0 KV cache run
 * through src/backend/cuda.c, every launch on the kernel emulator, and
 * must give the CPU's greedy ids, with the prompt's last logits within
 * LOGIT_TOL (relative to the largest logit) of the CPU's, and for the
 * fixtures' whole prompt within LOGIT_TOL of their float64 reference
 * logits too.  LOGIT_TOL is test_models' bound for the CPU's F16 cache
 * against that reference: attention accumulates in F32 on the GPU where
 * the CPU rounds to F16 (below 256 positions), the GEMM rounds activations
 * to F16, and sums go in another order (measured: up to 4.4e-3 between the
 * two backends, qwen35's prompt; the Q8_0 weights and cache have their own
 * bounds, see main).  What the backend has no kernel for is refused at load
 * or at context creation.  Without the mock (or a GPU) it is skipped (77). */
#include "kiln.h"
#include "interleave.h"
#include "testutil.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LOGIT_TOL 5e-3f

static kiln_context *new_ctx(kiln_model *m, int kv_type) {
    kiln_context_params cp = kiln_context_default_params();
    cp.kv_type = kv_type;
    cp.n_ctx = 128;
    cp.n_seq_max = 1;
    cp.n_threads = 1;
    kiln_context *c = NULL;
    if (kiln_context_new(m, &cp, &c) != KILN_OK) fprintf(stderr, "context: %s\n", kiln_last_error());
    return c;
}

static int kv_type = KILN_KV_F16; /* the caches run() makes */
static int gpu_layers;            /* the models run() and state_paths() load (0: all) */
static int last_gpu_layers;       /* kiln_model_info.gpu_layers of run()'s latest model */
static int last_n_layer;

/* prompt then n greedy steps on backend be: ids into out, the prompt's
 * last logits into first (n_vocab) */
static int run(const char *path, int be, const int32_t *prompt, int n_prompt, int n, int32_t *out, float *first,
               int *n_vocab) {
    kiln_model_params mp = kiln_model_default_params();
    mp.backend = be;
    mp.gpu_layers = be == KILN_ENGINE_BACKEND_CUDA ? gpu_layers : 0;
    kiln_model *m = NULL;
    if (kiln_model_load(path, &mp, &m) != KILN_OK) {
        fprintf(stderr, "%s: %s\n", path, kiln_last_error());
        return -1;
    }
    kiln_model_info info;
    kiln_model_get_info(m, &info);
    *n_vocab = info.n_vocab;
    last_gpu_layers = info.gpu_layers;
    last_n_layer = info.n_layer;
    kiln_context *c = new_ctx(m, kv_type);
    int rc = c ? 0 : -1;
    kiln_batch b = {n_prompt, prompt, NULL, NULL, NULL};
    if (!rc && kiln_decode(c, &b) != KILN_OK) rc = -1;
    const float *lg = rc ? NULL : kiln_get_logits(c, n_prompt - 1);
    if (lg) memcpy(first, lg, (size_t)info.n_vocab * sizeof(float));
    for (int i = 0; !rc && i < n; i++) {
        out[i] = t_argmax(lg, info.n_vocab);
        kiln_batch b1 = {1, &out[i], NULL, NULL, NULL};
        if (i + 1 < n && kiln_decode(c, &b1) != KILN_OK) rc = -1;
        lg = kiln_get_logits(c, 0);
    }
    kiln_context_free(c);
    kiln_model_free(m);
    return rc;
}

static float cpu_lg[65536], gpu_lg[65536];

/* Largest |a - b| over n, relative to the largest |b| (at least 1). */
static float rel_err(const float *a, const float *b, int n) {
    float big = 1.0f, diff = 0.0f;
    for (int i = 0; i < n; i++) {
        big = fmaxf(big, fabsf(b[i]));
        diff = fmaxf(diff, fabsf(a[i] - b[i]));
    }
    return diff / big;
}

/* path on the CPU and on CUDA: the same greedy ids, logits within tol of
 * the CPU's (the CUDA run's last prompt logits stay in gpu_lg) */
static void compare_tol(const char *name, const char *path, const int32_t *prompt, int n_prompt, int n, float tol) {
    int32_t cpu_ids[64], gpu_ids[64];
    int nv = 0, nv2 = 0;
    CHECKF(run(path, KILN_ENGINE_BACKEND_CPU, prompt, n_prompt, n, cpu_ids, cpu_lg, &nv) == 0, "%s on the CPU", name);
    CHECKF(run(path, KILN_ENGINE_BACKEND_CUDA, prompt, n_prompt, n, gpu_ids, gpu_lg, &nv2) == 0, "%s on CUDA", name);
    if (nv != nv2 || nv <= 0 || nv > 65536) return;
    const float e = rel_err(gpu_lg, cpu_lg, nv);
    int same = memcmp(cpu_ids, gpu_ids, (size_t)n * sizeof(int32_t)) == 0;
    printf("%-12s prompt %2d tokens, %2d greedy steps: ids %s, logits rel diff %.2e from the CPU's\n", name, n_prompt,
           n, same ? "identical" : "DIFFERENT", e);
    CHECKF(same, "%s: greedy ids differ between the CPU and CUDA", name);
    CHECKF(e <= tol, "%s: logits differ by %g (relative)", name, e);
}

static void compare(const char *name, const char *path, const int32_t *prompt, int n_prompt, int n) {
    compare_tol(name, path, prompt, n_prompt, n, LOGIT_TOL);
}

/* The model split between the GPU and the CPU (-ngl N: its last N layers
 * on the GPU, the embeddings, the first layers and the output head on the
 * CPU) for N = 1, half, all but one and all of its layers: the CPU's
 * greedy ids, and the model reports N layers on the GPU.  Logits within
 * LOGIT_TOL of the CPU's, or within 1.1 times what the whole model on the
 * GPU (-ngl 99, run first) gives on the same prompt where that is more
 * (qwen35 on this prompt: 5.4e-3, the same with -ngl 6 as with 99). */
static void split(const char *name, const char *path, const int32_t *prompt, int n_prompt, int n) {
    int32_t cpu_ids[64], ids[64];
    int nv = 0, nv2 = 0;
    CHECKF(run(path, KILN_ENGINE_BACKEND_CPU, prompt, n_prompt, n, cpu_ids, cpu_lg, &nv) == 0, "%s on the CPU", name);
    const int nl = last_n_layer, counts[5] = {nl + 1, 1, nl / 2, nl - 1, nl};
    float tol = LOGIT_TOL;
    for (int k = 0; k < 5; k++) {
        if (counts[k] < 1 || (k > 1 && counts[k] == counts[k - 1])) continue;
        gpu_layers = counts[k];
        const int rc = run(path, KILN_ENGINE_BACKEND_CUDA, prompt, n_prompt, n, ids, gpu_lg, &nv2);
        gpu_layers = 0;
        CHECKF(rc == 0 && nv == nv2, "%s -ngl %d", name, counts[k]);
        if (rc || nv != nv2) continue;
        CHECKF(last_gpu_layers == (k ? counts[k] : nl), "%s -ngl %d: %d layers on the GPU", name, counts[k],
               last_gpu_layers);
        const float e = rel_err(gpu_lg, cpu_lg, nv);
        if (!k && 1.1f * e > tol) tol = 1.1f * e;
        const int same = memcmp(cpu_ids, ids, (size_t)n * sizeof(int32_t)) == 0;
        printf("%-12s -ngl %d of %d, prompt %2d, %2d steps: ids %s, logits rel diff %.2e from the CPU's\n", name,
               counts[k], nl, n_prompt, n, same ? "identical" : "DIFFERENT", e);
        CHECKF(same, "%s -ngl %d: greedy ids differ from the CPU's", name, counts[k]);
        CHECKF(e <= tol, "%s -ngl %d: logits differ by %g (relative)", name, counts[k], e);
    }
}

/* cpu_tol, ref_tol: the bounds against the CPU's logits and the float64
 * reference (0: LOGIT_TOL) */
static void fixture(const char *name, int n, float cpu_tol, float ref_tol) {
    char path[256];
    snprintf(path, sizeof path, "data/fixtures/%s.json", name);
    json_error_t je;
    json_t *j = json_load_file(path, 0, &je);
    CHECKF(j != NULL, "%s: %s", path, je.text);
    if (!j) return;
    json_t *pj = json_object_get(j, "prompt_ids");
    int32_t prompt[64];
    int np = (int)json_array_size(pj);
    for (int i = 0; i < np && i < 64; i++) prompt[i] = (int32_t)json_integer_value(json_array_get(pj, (size_t)i));
    snprintf(path, sizeof path, "data/fixtures/%s.gguf", name);
    if (cpu_tol <= 0.0f) cpu_tol = LOGIT_TOL;
    compare_tol(name, path, prompt, np < 8 ? np : 8, n, cpu_tol); /* decode products only (matvec) */
    compare_tol(name, path, prompt, np < 64 ? np : 64, n, cpu_tol);
    snprintf(path, sizeof path, "data/fixtures/%s", json_string_value(json_object_get(j, "logits_file")));
    size_t lb;
    float *ref = (float *)t_read_file(path, &lb);
    const int nv = (int)(lb / sizeof(float));
    CHECK(ref && nv > 0 && nv <= 65536);
    if (ref && nv > 0 && nv <= 65536) {
        const float e = rel_err(gpu_lg, ref, nv);
        const float bound = ref_tol > 0.0f ? ref_tol : LOGIT_TOL;
        printf("%-12s CUDA logits rel err %.2e from the reference (bound %.0e)\n", name, e, bound);
        CHECKF(e <= bound, "%s: CUDA logits %g from the reference", name, e);
    }
    free(ref);
    json_decref(j);
}

/* tokens of seq s at its end; the last one's logits into lg (n_vocab) */
static int feed(kiln_context *c, int s, const int32_t *tok, int n, float *lg, int nv) {
    int32_t seq[64];
    int8_t want[64] = {0};
    for (int i = 0; i < n; i++) seq[i] = s;
    want[n - 1] = 1;
    kiln_batch b = {n, tok, NULL, seq, want};
    if (kiln_decode(c, &b) != KILN_OK) return -1;
    memcpy(lg, kiln_get_logits(c, n - 1), (size_t)nv * sizeof(float));
    return 0;
}

/* The recurrent state's other paths on backend be, for a hybrid fixture
 * (the CPU first, as the control): three
 * sequences interleaved in one batch (runs, the rows put back in batch
 * order) give what each gives alone; the prefix cache (a state snapshot
 * captured mid-prompt, restored into another sequence); a run of drafts
 * recorded (every token's logits asked for) and cut back inside it (the
 * state restored and the kept tokens replayed) gives what feeding the
 * kept tokens gives (the KV block shared with the prefix cache copied on
 * write, cell-major on CUDA).  Logits within LOGIT_TOL with the same
 * argmax: the batches differ, so products take matvec or the GEMM. */
static void state_paths(const char *name, int be) {
    char path[256];
    snprintf(path, sizeof path, "data/fixtures/%s.json", name);
    json_t *j = json_load_file(path, 0, NULL);
    CHECK(j != NULL);
    if (!j) return;
    json_t *pj = json_object_get(j, "prompt_ids");
    int32_t prompt[64];
    /* 40 tokens (a shorter prompt repeated: three blocks of the cache) */
    const int np = 40, n0 = (int)json_array_size(pj);
    for (int i = 0; i < np && n0 > 0; i++)
        prompt[i] = (int32_t)json_integer_value(json_array_get(pj, (size_t)(i % n0)));
    json_decref(j);
    snprintf(path, sizeof path, "data/fixtures/%s.gguf", name);
    kiln_model_params mp = kiln_model_default_params();
    mp.backend = be;
    mp.gpu_layers = be == KILN_ENGINE_BACKEND_CUDA ? gpu_layers : 0;
    kiln_model *m = NULL;
    CHECKF(kiln_model_load(path, &mp, &m) == KILN_OK, "%s", kiln_last_error());
    if (!m) return;
    kiln_model_info info;
    kiln_model_get_info(m, &info);
    const int V = info.n_vocab;
    kiln_context_params cp = kiln_context_default_params();
    cp.n_ctx = 128;
    cp.n_seq_max = 3;
    cp.n_threads = 1;
    kiln_context *c = NULL;
    CHECKF(kiln_context_new(m, &cp, &c) == KILN_OK, "%s", kiln_last_error());
    float *cold = malloc(sizeof(float) * V), *lg = malloc(sizeof(float) * V), *alone = malloc(sizeof(float) * 3 * V);
    int ok = c && cold && lg && alone && V <= 65536;
    /* three sequences alone, then interleaved in one batch */
    const int lens[3] = {np, np - 5, 23};
    for (int s = 0; ok && s < 3; s++) {
        CHECK(kiln_seq_truncate(c, 0, 0) == KILN_OK);
        CHECK(feed(c, 0, prompt + s, lens[s], alone + (size_t)s * V, V) == 0);
    }
    memcpy(cold, alone, sizeof(float) * V);
    if (ok) {
        CHECK(kiln_seq_truncate(c, 0, 0) == KILN_OK);
        int32_t tok[128], seq[128];
        int8_t want[128] = {0};
        int last[3] = {0};
        const int n = t_interleave(prompt, lens, 3, tok, seq, want, last);
        kiln_batch b = {n, tok, NULL, seq, want};
        CHECK(kiln_decode(c, &b) == KILN_OK);
        for (int s = 0; s < 3; s++) {
            const float *l = kiln_get_logits(c, last[s]);
            const float e = l ? rel_err(l, alone + (size_t)s * V, V) : 1.0f;
            CHECKF(l && e <= LOGIT_TOL && t_argmax(l, V) == t_argmax(alone + (size_t)s * V, V),
                   "%s: sequence %d batched with others: %g from alone", name, s, e);
        }
        for (int s = 0; s < 3; s++) kiln_seq_truncate(c, s, 0);
    }
    /* the prefix cache */
    if (ok) {
        CHECK(feed(c, 0, prompt, np, lg, V) == 0);
        CHECK(kiln_seq_cache(c, 0, prompt, np) == KILN_OK);
        const int32_t got = kiln_seq_reuse(c, 1, prompt, np);
        CHECKF(got > 0 && got < np, "%s: reused %d tokens", name, got);
        if (got > 0 && got < np) CHECK(feed(c, 1, prompt + got, np - got, lg, V) == 0);
        const float e = rel_err(lg, cold, V);
        CHECKF(e <= LOGIT_TOL && t_argmax(lg, V) == t_argmax(cold, V), "%s: a prefix-cache hit: %g from cold", name, e);
        kiln_kv_stats st;
        kiln_kv_get_stats(c, &st);
        CHECK(!info.state_bytes || (st.state_restores >= 1 && st.state_snapshots >= 1));
        printf("%-12s prefix cache: %d of %d tokens reused, logits %.2e from cold\n", name, got, np, e);
        kiln_seq_truncate(c, 1, 0);
    }
    /* a fork: sequence 0 copied into 1, which takes one more token
     * (written into a copy of the shared last block): what the same
     * tokens fed to an empty sequence give */
    if (ok && !info.state_bytes) {
        int32_t ext[64];
        memcpy(ext, prompt, sizeof(int32_t) * np);
        ext[np] = prompt[5];
        CHECK(kiln_seq_copy(c, 0, 1) == KILN_OK && feed(c, 1, ext + np, 1, lg, V) == 0);
        CHECK(kiln_seq_truncate(c, 1, 0) == KILN_OK && feed(c, 1, ext, np + 1, cold, V) == 0);
        const float e = rel_err(lg, cold, V);
        CHECKF(e <= LOGIT_TOL && t_argmax(lg, V) == t_argmax(cold, V), "%s: a fork: %g from fed", name, e);
        printf("%-12s fork: logits %.2e from the tokens fed\n", name, e);
        CHECK(kiln_seq_truncate(c, 1, 0) == KILN_OK);
    }
    /* drafts: 4 tokens with every logit asked for, cut back to 2 of them,
     * then another token; against the same tokens fed to a fresh sequence */
    if (ok) {
        const int32_t drafts[4] = {prompt[3], prompt[7], prompt[11], prompt[13]}, next = prompt[17];
        int32_t seq[4] = {0, 0, 0, 0};
        int8_t want[4] = {1, 1, 1, 1};
        kiln_batch b = {4, drafts, NULL, seq, want};
        CHECK(kiln_decode(c, &b) == KILN_OK);
        CHECKF(kiln_seq_truncate(c, 0, np + 2) == KILN_OK, "%s: truncate into the drafts: %s", name,
               kiln_context_error(c));
        CHECK(feed(c, 0, &next, 1, lg, V) == 0);
        int32_t ref_tok[64];
        memcpy(ref_tok, prompt, sizeof(int32_t) * np);
        ref_tok[np] = drafts[0];
        ref_tok[np + 1] = drafts[1];
        ref_tok[np + 2] = next;
        CHECK(feed(c, 2, ref_tok, np + 3, cold, V) == 0);
        const float e = rel_err(lg, cold, V);
        CHECKF(e <= LOGIT_TOL && t_argmax(lg, V) == t_argmax(cold, V), "%s: drafts cut back: %g from fed", name, e);
        printf("%-12s drafts cut back (replay): logits %.2e from the tokens fed\n", name, e);
    }
    free(cold);
    free(lg);
    free(alone);
    kiln_context_free(c);
    kiln_model_free(m);
}

int main(void) {
    kiln_model_params mp = kiln_model_default_params();
    mp.backend = KILN_ENGINE_BACKEND_CUDA;
    kiln_model *m = NULL;
    if (kiln_model_load("../models/stories260K.gguf", &mp, &m) == KILN_ERR_UNSUPPORTED &&
        strstr(kiln_last_error(), "no CUDA backend")) {
        printf("skipped: %s\n", kiln_last_error());
        return 77;
    }
    CHECKF(m != NULL, "%s", kiln_last_error());
    /* an F32 cache has no kernels: refused when the context is made */
    kiln_context_params cp = kiln_context_default_params();
    cp.kv_type = KILN_KV_F32;
    kiln_context *c = NULL;
    CHECK(m && kiln_context_new(m, &cp, &c) != KILN_OK && !c && strstr(kiln_last_error(), "CUDA"));
    kiln_model_free(m);

    /* a prompt of 12 tokens (the tensor-core GEMM), then decode steps
     * (matvec): the stories model's 5 layers, 64 wide */
    const int32_t story[12] = {1, 274, 287, 381, 261, 352, 266, 300, 410, 290, 330, 261};
    compare("stories260K", "../models/stories260K.gguf", story, 12, 24);
    compare("stories260K", "../models/stories260K.gguf", story, 3, 8);
    fixture("llama", 4, 0.0f, 0.0f);
    fixture("qwen2", 4, 0.0f, 0.0f);
    fixture("qwen3", 4, 0.0f, 0.0f);
    /* the hybrid family: Gated DeltaNet, gated attention, MoE with a
     * gated shared expert */
    fixture("qwen35", 4, 0.0f, 0.0f);
    fixture("qwen35moe", 4, 0.0f, 0.0f);
    fixture("qwen3next", 4, 0.0f, 0.0f);
    /* Q8_0: the CPU rounds a product's activations to Q8_0 blocks (as
     * llama.cpp does, and the fixture's reference with it), the GPU takes
     * them in F32, and this random network amplifies activation rounding
     * (gen_fixtures.py): measured 1.2e-1 from the CPU's logits after 8
     * tokens, 2.4e-2 from both after 40; the reference bound is
     * test_models' for the CPU's F16 cache.  Greedy ids stay identical. */
    fixture("qwen35moe-q8_0", 4, 0.15f, 3e-2f);
    state_paths("qwen35", KILN_ENGINE_BACKEND_CPU);
    state_paths("qwen35", KILN_ENGINE_BACKEND_CUDA);
    /* layers split between the GPU and the CPU: greedy text, and the
     * cache's paths with each layer's blocks where it runs */
    split("stories260K", "../models/stories260K.gguf", story, 12, 16);
    const int32_t fx_prompt[12] = {1, 20, 35, 70, 90, 110, 120, 140, 160, 180, 200, 220};
    split("llama", "data/fixtures/llama.gguf", fx_prompt, 12, 8);
    split("qwen3", "data/fixtures/qwen3.gguf", fx_prompt, 12, 8);
    split("qwen3moe", "data/arch/qwen3moe-f32.gguf", fx_prompt, 12, 8);
    const int32_t hy_prompt[12] = {1, 20, 35, 70, 90, 110, 120, 140, 160, 180, 200, 220};
    split("qwen35", "data/fixtures/qwen35.gguf", hy_prompt, 12, 8);
    split("qwen35moe", "data/fixtures/qwen35moe.gguf", hy_prompt, 12, 8);
    gpu_layers = 1;
    state_paths("llama", KILN_ENGINE_BACKEND_CUDA);
    state_paths("qwen35", KILN_ENGINE_BACKEND_CUDA);
    gpu_layers = 0;
    /* a Q8_0 KV cache on both, for models whose head size is a multiple
     * of 32 (the CPU quantizes the query and sums integers per block, the
     * GPU sums the same products in float).  Bound 1.5e-2: a key or value
     * whose bits differ (the GEMM's F16 inputs) can round to the next of
     * a block's 255 levels; measured 4.5e-3 (llama), 7.4e-3 (qwen35). */
    kv_type = KILN_KV_Q8_0;
    const int32_t q8_prompt[12] = {1, 20, 35, 70, 90, 110, 120, 140, 160, 180, 200, 220};
    compare_tol("llama q8kv", "data/spec/spec-llama.gguf", q8_prompt, 12, 8, 1.5e-2f);
    compare_tol("qwen35 q8kv", "data/hybrid/qwen35-spm-f32.gguf", q8_prompt, 12, 8, 1.5e-2f);
    kv_type = KILN_KV_F16;
    /* the dense family's MoE (qwen3moe: softmax routing, no shared expert) */
    const int32_t moe_prompt[19] = {1,   410, 447, 410, 456, 425, 417, 316, 410, 325,
                                    330, 352, 379, 419, 308, 420, 277, 428, 415};
    compare("qwen3moe", "data/arch/qwen3moe-f32.gguf", moe_prompt, 19, 8);
    compare("qwen3moe", "data/arch/qwen3moe-f32.gguf", moe_prompt, 5, 8);

    /* families and features without kernels are refused at load, in one line */
    m = NULL;
    CHECK(kiln_model_load("data/arch/gemma3-f32.gguf", &mp, &m) == KILN_ERR_UNSUPPORTED && !m);
    CHECKF(strstr(kiln_last_error(), "CUDA backend has no kernels") != NULL, "%s", kiln_last_error());
    printf("refused: %s\n", kiln_last_error());
    return t_done();
}
