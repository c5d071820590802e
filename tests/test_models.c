/*
 * Model parity tests.
 *  0. The hybrid family (qwen35, qwen35moe, qwen3next): llama.cpp's greedy
 *     continuations on its reference models (tests/data/hybrid) byte for
 *     byte; on the random-weight fixtures, a prompt split over several
 *     decode calls, sequences batched together, a prefix-cache hit and a
 *     truncation to a snapshot each give what a cold single run gives;
 *     truncating where no snapshot is fails and changes nothing; drafts
 *     verified and rolled back give the plain greedy text; the server's
 *     batched step (gen_batch) gives concurrent, cached, partly cached and
 *     suspended requests what each gets alone.
 *     The added architectures (tests/data/arch: qwen3moe, phi3, mistral3, gemma3,
 *     gemma4, deepseek2, gpt-oss, nemotron_h, nemotron_h_moe) likewise
 *     (nemotron's Mamba-2 state through the hybrid fixtures' state tests), and
 *     qwen3moe quantized by kiln quantize (q8_0, q4_k_m, q4_0) loads with
 *     its experts repacked, reads only the used experts' bytes per step and
 *     gives logits close to the F32 model's; gpt-oss quantized (q8_0, and
 *     mxfp4_moe: MXFP4 experts) likewise.
 *  1. The bundled stories260K model: greedy continuations equal the ones
 *     llama.cpp recorded (tests/data/stories/stories260K.expected.jsonl).
 *  2. Random-weight fixtures (tests/data/fixtures, written by
 *     gen_fixtures.py from an independent PyTorch forward): last-position
 *     logits and the 32-token greedy continuation.
 *  3. Context rules: a batch past n_ctx fails before any compute; two
 *     sequences in one batch give the logits each gives alone.
 *  4. The scripted tool-call fixture (toolcall.json): kiln's tokenizer
 *     gives the reference prompt ids for the rendered prompt text, and
 *     greedy decoding writes the scripted tokens, ends at end of generation
 *     and decodes to the expected text.  It has no logits file, so it is not
 *     in the table of item 2.
 */
#include "gen/gen.h"
#include "gguf/gguf.h"
#include "kernels/matmul.h"
#include "kiln.h"
#include "interleave.h"
#include "quant/quant.h"
#include "testutil.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define STORIES "../models/stories260K.gguf"
#define KL_BLOCK_TOKENS 16 /* kiln_kv_stats.block_tokens */

static kiln_context *new_ctx(kiln_model *m, int kv_type, int n_ctx, int n_seq) {
    kiln_context_params cp = kiln_context_default_params();
    cp.kv_type = kv_type;
    cp.n_ctx = n_ctx;
    cp.n_seq_max = n_seq;
    cp.n_threads = 2;
    kiln_context *c = NULL;
    if (kiln_context_new(m, &cp, &c) != KILN_OK) fprintf(stderr, "context: %s\n", kiln_last_error());
    return c;
}

/* Whether the active level repacks Q4_0 / Q8_0 weights at load: one with
 * interleaved kernels of its own (x86-64's); aarch64 keeps the rows. */
static int level_repacks(void) {
    const kern_mat probe = {.type = QUANT_Q4_0, .ncols = 32, .nrows = 8};
    return kern_mat_interleavable(&probe);
}

/* Feeds prompt then n greedy steps; writes the ids to out and, if margin
 * is not NULL, each step's top-1 minus top-2 logit. */
static int greedy(kiln_context *c, int n_vocab, const int32_t *prompt, int n_prompt, int n, int32_t *out,
                  float *margin) {
    kiln_batch b = {n_prompt, prompt, NULL, NULL, NULL};
    if (kiln_decode(c, &b) != KILN_OK) return -1;
    const float *lg = kiln_get_logits(c, n_prompt - 1);
    for (int i = 0; i < n; i++) {
        out[i] = t_argmax(lg, n_vocab);
        if (margin) {
            float second = -INFINITY;
            for (int k = 0; k < n_vocab; k++)
                if (k != out[i] && lg[k] > second) second = lg[k];
            margin[i] = lg[out[i]] - second;
        }
        kiln_batch b1 = {1, &out[i], NULL, NULL, NULL};
        if (i + 1 < n && kiln_decode(c, &b1) != KILN_OK) return -1;
        lg = kiln_get_logits(c, 0);
    }
    return 0;
}

/* A model names its backend at load: the CPU (or auto) runs; CUDA is one
 * clear error without kernels or a GPU; anything else is a bad argument. */
static void test_backend_choice(void) {
    kiln_model_params mp = kiln_model_default_params();
    kiln_model *m = NULL;
    mp.backend = KILN_ENGINE_BACKEND_CPU;
    CHECKF(kiln_model_load(STORIES, &mp, &m) == KILN_OK, "%s", kiln_last_error());
    kiln_model_free(m);
    m = NULL;
    mp.backend = KILN_ENGINE_BACKEND_CUDA; /* runs with kernels and a GPU (test_backend_cuda) */
    const kiln_status st = kiln_model_load(STORIES, &mp, &m);
    CHECK(st == KILN_OK ? m != NULL : st == KILN_ERR_UNSUPPORTED && !m && strstr(kiln_last_error(), "CUDA"));
    kiln_model_free(m);
    m = NULL;
    mp.backend = 77;
    CHECK(kiln_model_load(STORIES, &mp, &m) == KILN_ERR_INVALID_ARG && !m);
}

static void test_stories(void) {
    kiln_model *m;
    CHECKF(kiln_model_load(STORIES, NULL, &m) == KILN_OK, "%s", kiln_last_error());
    if (!m) return;
    kiln_model_info info;
    kiln_model_get_info(m, &info);
    CHECK(info.n_vocab == 512 && info.n_layer == 5 && info.n_embd == 64);
    /* llama.cpp tokenizes "Tom had a red" with BOS as these ids */
    int32_t ids[64];
    int n = kiln_tokenize(m, "Tom had a red", 13, 1, 0, ids, 64);
    const int32_t want_ids[] = {1, 274, 287, 381, 261, 352, 266};
    CHECK(n == 7 && memcmp(ids, want_ids, sizeof want_ids) == 0);

    size_t len;
    char *text = t_read_file("data/stories/stories260K.expected.jsonl", &len);
    CHECK(text != NULL);
    int cases = 0;
    for (char *line = text ? strtok(text, "\n") : NULL; line; line = strtok(NULL, "\n")) {
        json_error_t je;
        json_t *j = json_loads(line, 0, &je);
        CHECK(j != NULL);
        if (!j) continue;
        const char *prompt = json_string_value(json_object_get(j, "prompt"));
        const char *expect = json_string_value(json_object_get(j, "expected_text"));
        json_t *eids = json_object_get(j, "expected_ids");
        int np = (int)json_integer_value(json_object_get(j, "n_predict"));
        int32_t got[256];
        float margin[256];
        /* The default F16 KV cache reproduces the recorded continuation
         * exactly (its attention rounds as llama.cpp's does).  The F32
         * cache is more exact and may part ways at a near-tie: it must
         * agree up to the first step whose top-2 margin is under 0.01.
         * Off x86-64, where the continuations were not recorded, the
         * matrix products sum in another order and the F16 cache may part
         * ways at such a near-tie too (its text is then not checked). */
#if defined(__x86_64__)
        const int tie_f16 = 0;
#else
        const int tie_f16 = 1;
#endif
        for (int kv = 0; kv < 2; kv++) {
            kiln_context *c = new_ctx(m, kv == 0 ? KILN_KV_F16 : KILN_KV_F32, 0, 1);
            CHECK(c != NULL);
            if (!c) continue;
            n = kiln_tokenize(m, prompt, strlen(prompt), 1, 0, ids, 64);
            CHECK(greedy(c, info.n_vocab, ids, n, np, got, margin) == 0);
            int upto = np;
            for (int i = 0; (kv == 1 || tie_f16) && i < np; i++)
                if (margin[i] < 0.01f) {
                    upto = i;
                    break;
                }
            int same = (int)json_array_size(eids) == np;
            for (int i = 0; same && i < upto; i++)
                same = got[i] == (int32_t)json_integer_value(json_array_get(eids, (size_t)i));
            CHECKF(same, "stories '%s' (%s KV): greedy ids differ", prompt, kv == 0 ? "F16" : "F32");
            if (kv == 1 || upto < np) {
                kiln_context_free(c);
                continue;
            }
            /* the text, through the streaming detokenizer */
            kiln_detok *d = kiln_detok_new(m);
            char buf[2048];
            size_t bl = 0;
            for (int i = 0; i < np; i++) {
                size_t k;
                const char *p = kiln_detok_push(d, got[i], &k);
                if (bl + k < sizeof buf) {
                    memcpy(buf + bl, p, k);
                    bl += k;
                }
            }
            size_t k;
            const char *p = kiln_detok_flush(d, &k);
            if (bl + k < sizeof buf) {
                memcpy(buf + bl, p, k);
                bl += k;
            }
            buf[bl] = 0;
            kiln_detok_free(d);
            CHECKF(strcmp(buf, expect) == 0, "got '%s'", buf);
            kiln_context_free(c);
        }
        cases++;
        json_decref(j);
    }
    CHECK(cases == 4);
    free(text);
    kiln_model_free(m);
}

/* Largest |a - b| over n, relative to the largest |b|. */
static double rel_err(const float *a, const float *b, int n) {
    double md = 0, mb = 0;
    for (int i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]);
        if (d > md) md = d;
        if (fabs(b[i]) > mb) mb = fabs(b[i]);
    }
    return mb > 0 ? md / mb : md;
}

/* Tolerances per fixture.  F32 weights: 1e-4 relative (an F32 KV cache).
 * Quantized weights: kiln also quantizes activations (to Q8_0 blocks)
 * where the PyTorch reference keeps them in float, so the logits move by
 * the activation rounding (measured: 9e-3 relative, about 0.13 absolute on
 * logits near 14); the bound is 2e-2.
 * Greedy ids must match exactly up to the first step whose reference
 * top-2 margin is below the fixture's margin bound (beyond it a different
 * but equally valid path may be taken). */
typedef struct fixture {
    const char *name;
    double logit_tol;
    double margin;
    double f16_tol; /* the F16 cache's bound; 0: the larger of logit_tol and 5e-3 */
} fixture;

static const fixture k_fixtures[] = {
    {"llama", 1e-4, 0.0, 0},
    {"llama-yarn", 1e-4, 0.0, 0},
    {"qwen2", 1e-4, 0.0, 0},
    {"qwen3", 1e-4, 0.0, 0},
    {"llama-q8_0", 2e-2, 0.25, 0},
    {"llama-q4_0", 2e-2, 0.25, 0},
    {"qwen35", 1e-4, 0.0, 0},
    {"qwen35moe", 1e-4, 0.0, 0},
    {"qwen3next", 1e-4, 0.0, 0},
    /* its reference rounds each Q8_0 product's input as kiln does, so the
     * logits agree closely; the F16 cache's rounding flips this random
     * network's routing somewhere (1.2e-2 measured) */
    {"qwen35moe-q8_0", 1e-3, 0.01, 3e-2},
};

/* repack: kiln_model_params.repack (the Q4_0 fixture runs both ways). */
static void test_fixture(const fixture *fx, int repack) {
    char path[256];
    snprintf(path, sizeof path, "data/fixtures/%s.json", fx->name);
    json_error_t je;
    json_t *j = json_load_file(path, 0, &je);
    CHECKF(j != NULL, "%s: %s", path, je.text);
    if (!j) return;
    snprintf(path, sizeof path, "data/fixtures/%s", json_string_value(json_object_get(j, "model")));
    kiln_model *m;
    kiln_model_params mp = kiln_model_default_params();
    mp.repack = repack;
    CHECKF(kiln_model_load(path, &mp, &m) == KILN_OK, "%s", kiln_last_error());
    if (!m) {
        json_decref(j);
        return;
    }
    kiln_model_info info;
    kiln_model_get_info(m, &info);
    /* only types with an interleaved form (of these fixtures: Q4_0 and
     * Q8_0) are repacked, only when asked, and only by a level with
     * interleaved kernels of its own (x86-64's; aarch64 keeps the rows) */
    const int packable = level_repacks() && (strstr(fx->name, "q4_0") != NULL || strstr(fx->name, "q8_0") != NULL);
    CHECKF((info.repacked_bytes > 0) == (repack && packable), "%s: repacked %llu bytes", fx->name,
           (unsigned long long)info.repacked_bytes);
    if (repack == 0) printf("%-12s (file layout, --no-repack)\n", fx->name);
    /* a decode step reads every tensor but token_embd, and all of that too
     * when the output projection is token_embd itself (no output.weight) */
    char gerr[256];
    gguf_file *gf;
    if (gguf_open(path, &gf)) snprintf(gerr, sizeof gerr, "%s", kiln_last_error());
    CHECKF(gf != NULL, "%s", gerr);
    if (gf) {
        uint64_t step = 0;
        for (int i = 0; i < gguf_n_tensors(gf); i++) step += gguf_tensor_at(gf, i)->nbytes;
        CHECK(step == info.n_bytes);
        if (gguf_find_tensor(gf, "output.weight")) step -= gguf_find_tensor(gf, "token_embd.weight")->nbytes;
        CHECKF(info.step_bytes == step, "%s: step reads %llu bytes, want %llu", fx->name,
               (unsigned long long)info.step_bytes, (unsigned long long)step);
        gguf_close(gf);
    }
    int nv = (int)json_integer_value(json_object_get(j, "n_vocab"));
    CHECK(nv == info.n_vocab);
    json_t *pj = json_object_get(j, "prompt_ids"), *gj = json_object_get(j, "greedy_ids");
    json_t *mj = json_object_get(j, "greedy_top2_margins");
    int np = (int)json_array_size(pj), ng = (int)json_array_size(gj);
    int32_t prompt[64], got[64];
    for (int i = 0; i < np && i < 64; i++) prompt[i] = (int32_t)json_integer_value(json_array_get(pj, (size_t)i));
    snprintf(path, sizeof path, "data/fixtures/%s", json_string_value(json_object_get(j, "logits_file")));
    size_t lb;
    float *ref = (float *)t_read_file(path, &lb);
    CHECK(ref && lb == (size_t)nv * sizeof(float));

    kiln_context *c = new_ctx(m, KILN_KV_F32, 0, 1);
    CHECK(c != NULL);
    if (c && ref && lb == (size_t)nv * sizeof(float)) {
        kiln_batch b = {np, prompt, NULL, NULL, NULL};
        CHECK(kiln_decode(c, &b) == KILN_OK);
        double e = rel_err(kiln_get_logits(c, np - 1), ref, nv);
        CHECKF(e <= fx->logit_tol, "%s: logits relative error %.3g > %.3g", fx->name, e, fx->logit_tol);
        printf("%-12s logits rel err %.2e (bound %.0e)\n", fx->name, e, fx->logit_tol);
        kiln_seq_truncate(c, 0, 0);
        CHECK(greedy(c, nv, prompt, np, ng, got, NULL) == 0);
        int upto = ng;
        for (int i = 0; i < ng; i++)
            if (json_real_value(json_array_get(mj, (size_t)i)) < fx->margin) {
                upto = i;
                break;
            }
        int same = 1;
        for (int i = 0; i < upto; i++) same &= got[i] == (int32_t)json_integer_value(json_array_get(gj, (size_t)i));
        CHECKF(same, "%s: greedy continuation differs within the first %d steps", fx->name, upto);
        printf("%-12s greedy: %d of %d steps compared, %s\n", fx->name, upto, ng, same ? "identical" : "DIFFERENT");
    }
    /* the default F16 cache rounds keys, values and the query to F16 */
    kiln_context *c16 = new_ctx(m, KILN_KV_F16, 0, 1);
    if (c16 && ref && lb == (size_t)nv * sizeof(float)) {
        kiln_batch b = {np, prompt, NULL, NULL, NULL};
        CHECK(kiln_decode(c16, &b) == KILN_OK);
        double e = rel_err(kiln_get_logits(c16, np - 1), ref, nv);
        double bound = fx->f16_tol > 0 ? fx->f16_tol : fx->logit_tol > 5e-3 ? fx->logit_tol : 5e-3;
        CHECKF(e <= bound, "%s: F16 KV logits relative error %.3g > %.3g", fx->name, e, bound);
        printf("%-12s F16 KV logits rel err %.2e (bound %.0e)\n", fx->name, e, bound);
    }
    kiln_context_free(c16);
    kiln_context_free(c);
    free(ref);
    kiln_model_free(m);
    json_decref(j);
}

static void test_toolcall(void) {
    json_error_t je;
    json_t *j = json_load_file("data/fixtures/toolcall.json", 0, &je);
    CHECKF(j != NULL, "toolcall.json: %s", je.text);
    if (!j) return;
    kiln_model *m;
    CHECKF(kiln_model_load("data/fixtures/toolcall.gguf", NULL, &m) == KILN_OK, "%s", kiln_last_error());
    if (!m) {
        json_decref(j);
        return;
    }
    kiln_model_info info;
    kiln_model_get_info(m, &info);
    CHECK(info.n_vocab == (int)json_integer_value(json_object_get(j, "n_vocab")));
    CHECK(kiln_model_chat_template(m) != NULL);

    /* the rendered prompt, special tokens parsed, no BOS (gpt2 vocab) */
    json_t *pj = json_object_get(j, "prompt_ids"), *gj = json_object_get(j, "greedy_ids");
    const char *text = json_string_value(json_object_get(j, "prompt_text"));
    int np = (int)json_array_size(pj), ng = (int)json_array_size(gj);
    int32_t *prompt = malloc(((size_t)np + 16) * sizeof *prompt);
    int n = text && prompt ? kiln_tokenize(m, text, strlen(text), 1, 1, prompt, np + 16) : -1;
    int same = n == np;
    for (int i = 0; same && i < np; i++) same = prompt[i] == (int32_t)json_integer_value(json_array_get(pj, (size_t)i));
    CHECKF(same, "toolcall: tokenizing prompt_text gives %d ids, not the %d of prompt_ids", n, np);

    for (int kv = 0; kv < 2 && same; kv++) {
        kiln_context *c = new_ctx(m, kv == 0 ? KILN_KV_F16 : KILN_KV_F32, 0, 1);
        CHECK(c != NULL);
        if (!c) continue;
        int ok = 1;
        for (int off = 0; ok && off < np; off += 256) { /* prefill in chunks, as the server does */
            kiln_batch b = {np - off < 256 ? np - off : 256, prompt + off, NULL, NULL, NULL};
            ok = kiln_decode(c, &b) == KILN_OK;
        }
        CHECK(ok);
        const float *lg = ok ? kiln_get_logits(c, (np - 1) % 256) : NULL;
        int32_t got[64];
        int k = 0;
        kiln_detok *d = kiln_detok_new(m);
        char out[1024];
        size_t ol = 0, pl;
        while (lg && k < 64) {
            got[k] = t_argmax(lg, info.n_vocab);
            const char *p = kiln_detok_push(d, got[k], &pl);
            if (ol + pl < sizeof out) {
                memcpy(out + ol, p, pl);
                ol += pl;
            }
            if (kiln_token_is_eog(m, got[k++])) break;
            kiln_batch b1 = {1, &got[k - 1], NULL, NULL, NULL};
            lg = kiln_decode(c, &b1) == KILN_OK ? kiln_get_logits(c, 0) : NULL;
        }
        const char *p = kiln_detok_flush(d, &pl);
        if (ol + pl < sizeof out) {
            memcpy(out + ol, p, pl);
            ol += pl;
        }
        out[ol] = 0;
        kiln_detok_free(d);
        int gsame = k == ng;
        for (int i = 0; gsame && i < ng; i++)
            gsame = got[i] == (int32_t)json_integer_value(json_array_get(gj, (size_t)i));
        CHECKF(gsame, "toolcall (%s KV): %d greedy ids, not the scripted %d", kv == 0 ? "F16" : "F32", k, ng);
        const char *want = json_string_value(json_object_get(j, "expected_text"));
        CHECKF(want && strcmp(out, want) == 0, "toolcall: got text '%s'", out);
        printf("toolcall     %s KV: %d prompt ids, %d scripted tokens %s\n", kv == 0 ? "F16" : "F32", np, k,
               gsame ? "identical" : "DIFFERENT");
        kiln_context_free(c);
    }
    free(prompt);
    kiln_model_free(m);
    json_decref(j);
}

/* ---- the hybrid family ---- */

/* llama.cpp's continuations (dir/cases.json): the prompt tokenizes to its
 * ids and n_predict greedy steps give its ids and text, with the default
 * F16 cache; want_cases cases. */
static void reference_cases(const char *dir, int want_cases) {
    json_error_t je;
    char path[256];
    snprintf(path, sizeof path, "%s/cases.json", dir);
    json_t *cases = json_load_file(path, 0, &je);
    CHECKF(cases && json_is_array(cases), "%s: %s", path, je.text);
    size_t ci;
    json_t *cs;
    int n_cases = 0;
    json_array_foreach(cases, ci, cs) {
        snprintf(path, sizeof path, "%s/%s", dir, json_string_value(json_object_get(cs, "model")));
        kiln_model *m;
        CHECKF(kiln_model_load(path, NULL, &m) == KILN_OK, "%s", kiln_last_error());
        if (!m) continue;
        kiln_model_info info;
        kiln_model_get_info(m, &info);
        CHECK(!strcmp(info.arch, json_string_value(json_object_get(cs, "arch"))));
        const char *prompt = json_string_value(json_object_get(cs, "prompt"));
        json_t *pj = json_object_get(cs, "prompt_ids"), *ej = json_object_get(cs, "expected_ids");
        int32_t ids[512], got[64];
        int n = kiln_tokenize(m, prompt, strlen(prompt), 1, 0, ids, 512);
        int same = n == (int)json_array_size(pj);
        for (int i = 0; same && i < n; i++) same = ids[i] == json_integer_value(json_array_get(pj, (size_t)i));
        CHECKF(same, "%s: the prompt tokenizes differently", path);
        const int np = (int)json_integer_value(json_object_get(cs, "n_predict"));
        CHECK(np > 0 && np <= 64);
        kiln_context *c = new_ctx(m, KILN_KV_F16, 1024, 1);
        CHECK(c && np > 0 && np <= 64 && greedy(c, info.n_vocab, ids, n, np, got, NULL) == 0);
        same = (int)json_array_size(ej) == np;
        for (int i = 0; same && i < np; i++) same = got[i] == json_integer_value(json_array_get(ej, (size_t)i));
        char text[512];
        size_t tl = 0, k;
        kiln_detok *d = kiln_detok_new(m);
        for (int i = 0; i < np; i++) {
            const char *p = kiln_detok_push(d, got[i], &k);
            if (tl + k < sizeof text) {
                memcpy(text + tl, p, k);
                tl += k;
            }
        }
        const char *p = kiln_detok_flush(d, &k);
        if (tl + k < sizeof text) {
            memcpy(text + tl, p, k);
            tl += k;
        }
        text[tl] = 0;
        kiln_detok_free(d);
        const char *want = json_string_value(json_object_get(cs, "expected_text"));
        CHECKF(same && want && !strcmp(text, want), "%s: '%s' instead of llama.cpp's '%s'", path, text,
               want ? want : "");
        printf("%-24s %s: %d tokens as llama.cpp\n", json_string_value(json_object_get(cs, "model")), info.arch, np);
        kiln_context_free(c);
        kiln_model_free(m);
        n_cases++;
    }
    CHECK(n_cases == want_cases);
    json_decref(cases);
}

/* The last prompt position's logits of prompt (with BOS) on path, into
 * out[n_vocab]; repack as kiln_model_params.repack.  0 or -1. */
static int prompt_logits(const char *path, int repack, const char *prompt, float *out, int n_vocab,
                         kiln_model_info *info) {
    kiln_model_params mp = kiln_model_default_params();
    mp.repack = repack;
    kiln_model *m;
    if (kiln_model_load(path, &mp, &m) != KILN_OK) {
        fprintf(stderr, "%s: %s\n", path, kiln_last_error());
        return -1;
    }
    kiln_model_get_info(m, info);
    int32_t ids[512];
    const int n = kiln_tokenize(m, prompt, strlen(prompt), 1, 0, ids, 512);
    kiln_context *c = n > 0 && n <= 512 && info->n_vocab == n_vocab ? new_ctx(m, KILN_KV_F16, 1024, 1) : NULL;
    kiln_batch b = {n, ids, NULL, NULL, NULL};
    const int ok = c && kiln_decode(c, &b) == KILN_OK;
    if (ok) memcpy(out, kiln_get_logits(c, n - 1), (size_t)n_vocab * sizeof(float));
    kiln_context_free(c);
    kiln_model_free(m);
    return ok ? 0 : -1;
}

/* Largest |a - b| over n and, in *rms, the root mean square of a - b,
 * both in units of a's standard deviation. */
static double max_diff_std(const float *a, const float *b, int n, double *rms) {
    double mean = 0, var = 0, d = 0, sq = 0;
    for (int i = 0; i < n; i++) mean += a[i];
    mean /= n;
    for (int i = 0; i < n; i++) {
        var += (a[i] - mean) * (a[i] - mean);
        sq += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
        d = fabs(a[i] - b[i]) > d ? fabs(a[i] - b[i]) : d;
    }
    const double sd = sqrt(var / n);
    if (rms) *rms = sqrt(sq / n) / sd;
    return d / sd;
}

/* qwen3moe through kiln quantize: the expert stacks are quantized, load
 * repacked (or not) and a decode step counts 3 of the 6 experts' bytes;
 * the last prompt position's logits stay within a type's error of the F32
 * model's (random weights sit near ties, so greedy texts may part ways
 * under quantization; the first token's top-2 gap is 2.5 logit standard
 * deviations, far from any). */
static void qwen3moe_quantized(void) {
    const char *in = "data/arch/qwen3moe-f32.gguf";
    json_error_t je;
    json_t *cases = json_load_file("data/arch/cases.json", 0, &je);
    CHECKF(cases && json_array_size(cases) >= 2, "data/arch/cases.json: %s", je.text); /* qwen3moe's, first */
    char dir[] = "/tmp/kiln-test-qwen3moe-XXXXXX";
    if (!cases || !mkdtemp(dir)) {
        CHECK(0);
        json_decref(cases);
        return;
    }
    enum { NV = 512 };
    static float ref[2][NV], got[NV], raw[NV];
    kiln_model_info info;
    for (int k = 0; k < 2; k++) {
        const json_t *cs = json_array_get(cases, (size_t)k);
        const char *arch = json_string_value(json_object_get(cs, "arch"));
        CHECK(arch && !strcmp(arch, "qwen3moe"));
        const char *prompt = json_string_value(json_object_get(cs, "prompt"));
        CHECK(prompt && prompt_logits(in, 1, prompt, ref[k], NV, &info) == 0);
    }
    /* type, the logit error allowed (root mean square and largest, in logit
     * standard deviations: about 2.5 times what the types give here; a
     * wrong expert or row moves them by whole deviations), the experts'
     * type (q4_k_m's rows of 64 fall back from Q4_K / Q6_K to Q8_0) */
    const struct {
        const char *ftype;
        double rms_tol, max_tol;
        int exp_type;
    } qs[] = {{"q8_0", 0.06, 0.25, 8}, {"q4_k_m", 0.06, 0.25, 8}, {"q4_0", 0.4, 1.5, 2}};
    for (size_t q = 0; q < sizeof qs / sizeof qs[0]; q++) {
        char out[96], err[256];
        snprintf(out, sizeof out, "%s/%s.gguf", dir, qs[q].ftype);
        CHECKF(kiln_quantize(in, out, qs[q].ftype, 2) == KILN_OK, "%s: %s", qs[q].ftype, kiln_last_error());
        gguf_file *g;
        if (gguf_open(out, &g)) snprintf(err, sizeof err, "%s", kiln_last_error());
        uint64_t experts = 0;
        int n_exp = 0, exp_ok = 1;
        for (int i = 0; g && i < gguf_n_tensors(g); i++) {
            const gguf_tensor *t = gguf_tensor_at(g, i);
            if (t->n_dims != 3) continue;
            n_exp++;
            experts += t->nbytes;
            exp_ok &= (int)t->type == qs[q].exp_type;
        }
        gguf_close(g);
        CHECKF(g && n_exp == 12 && exp_ok, "%s: %d expert tensors, of the type wanted: %d", qs[q].ftype, n_exp, exp_ok);
        for (int k = 0; k < 2; k++) {
            const char *prompt = json_string_value(json_object_get(json_array_get(cases, (size_t)k), "prompt"));
            CHECK(prompt_logits(out, 1, prompt, got, NV, &info) == 0);
            CHECKF((info.repacked_bytes > 0) == level_repacks() && info.step_bytes - info.active_bytes == experts / 2,
                   "%s: repacked %llu, active %llu of %llu", qs[q].ftype, (unsigned long long)info.repacked_bytes,
                   (unsigned long long)info.active_bytes, (unsigned long long)info.step_bytes);
            double rms;
            const double d = max_diff_std(ref[k], got, NV, &rms);
            CHECKF(rms < qs[q].rms_tol && d < qs[q].max_tol,
                   "%s case %d: logits %.4f std (rms) and up to %.4f std from F32's (at most %.2f, %.2f)", qs[q].ftype,
                   k, rms, d, qs[q].rms_tol, qs[q].max_tol);
            CHECK(t_argmax(got, NV) == t_argmax(ref[k], NV));
            /* the repacked experts compute what the mapped ones do */
            CHECK(prompt_logits(out, 0, prompt, raw, NV, &info) == 0 && info.repacked_bytes == 0);
            const double dr = max_diff_std(raw, got, NV, NULL);
            CHECKF(dr < 1e-4, "%s case %d: repacked logits %.6f std from the mapped weights'", qs[q].ftype, k, dr);
            printf("qwen3moe %-7s case %d: logits within %.4f std of F32 (rms %.4f), repacked within %.2g\n",
                   qs[q].ftype, k, d, rms, dr);
        }
        remove(out);
    }
    rmdir(dir);
    json_decref(cases);
}

/* gpt-oss as its checkpoints ship (kiln quantize mxfp4_moe: experts MXFP4,
 * the rest Q8_0): it loads, reads only the used experts, and the last
 * prompt position's logits stay within the types' error of the F32
 * model's on both of its reference prompts. */
/* gpt-oss quantized by kiln quantize: q8_0, and mxfp4_moe as its
 * checkpoints ship (experts MXFP4, the rest Q8_0).  Each loads with its
 * experts in the type wanted, a decode step reads only the used ones, and
 * the last prompt position's logits stay within the types' error of the F32
 * model's on both reference prompts (root mean square and largest, in logit
 * standard deviations, about 1.5 to 2.5 times what they give here: this
 * model is touchy, q4_0 is as far off as MXFP4). */
static void gptoss_quantized(void) {
    const char *in = "data/arch/gpt-oss-f32.gguf";
    json_error_t je;
    json_t *cases = json_load_file("data/arch/cases.json", 0, &je);
    char dir[] = "/tmp/kiln-test-gptoss-XXXXXX";
    if (!cases || !mkdtemp(dir)) {
        CHECK(0);
        json_decref(cases);
        return;
    }
    const struct {
        const char *ftype;
        double rms_tol, max_tol;
        int exp_type;
    } qs[] = {{"q8_0", 0.2, 0.8, 8}, {"mxfp4_moe", 1.5, 4.5, 39}};
    enum { NV = 512 };
    static float ref[NV], got[NV];
    kiln_model_info info;
    for (size_t q = 0; q < sizeof qs / sizeof qs[0]; q++) {
        char out[96], err[256];
        snprintf(out, sizeof out, "%s/%s.gguf", dir, qs[q].ftype);
        CHECKF(kiln_quantize(in, out, qs[q].ftype, 2) == KILN_OK, "%s: %s", qs[q].ftype, kiln_last_error());
        gguf_file *g;
        if (gguf_open(out, &g)) snprintf(err, sizeof err, "%s", kiln_last_error());
        int n_exp = 0;
        for (int i = 0; g && i < gguf_n_tensors(g); i++) {
            const gguf_tensor *t = gguf_tensor_at(g, i);
            n_exp += t->n_dims == 3 && (int)t->type == qs[q].exp_type;
        }
        gguf_close(g);
        CHECKF(n_exp == 9, "%s: %d expert tensors of the type wanted", qs[q].ftype, n_exp);
        int n_case = 0;
        for (size_t k = 0; k < json_array_size(cases); k++) {
            const json_t *cs = json_array_get(cases, k);
            const char *arch = json_string_value(json_object_get(cs, "arch"));
            if (!arch || strcmp(arch, "gpt-oss")) continue;
            const char *prompt = json_string_value(json_object_get(cs, "prompt"));
            CHECK(prompt_logits(in, 1, prompt, ref, NV, &info) == 0);
            CHECK(prompt_logits(out, 1, prompt, got, NV, &info) == 0);
            CHECK(info.active_bytes < info.step_bytes);
            double rms;
            const double d = max_diff_std(ref, got, NV, &rms);
            CHECKF(rms < qs[q].rms_tol && d < qs[q].max_tol,
                   "%s case %zu: logits %.4f std (rms) and up to %.4f std from F32's (at most %.2f, %.2f)", qs[q].ftype,
                   k, rms, d, qs[q].rms_tol, qs[q].max_tol);
            printf("gpt-oss %-9s case %zu: logits within %.4f std of F32 (rms %.4f)\n", qs[q].ftype, k, d, rms);
            n_case++;
        }
        CHECK(n_case == 2);
        remove(out);
    }
    rmdir(dir);
    json_decref(cases);
}

/* Decodes ids[0..n) into seq in pieces of at most chunk tokens; returns
 * the logits of the last token (copied to out) or -1. */
static int feed_chunks(kiln_context *c, int seq, const int32_t *ids, int n, int chunk, float *out, int n_vocab) {
    int32_t seqs[64];
    for (int i = 0; i < 64; i++) seqs[i] = seq;
    for (int off = 0; off < n; off += chunk) {
        const int k = n - off < chunk ? n - off : chunk;
        kiln_batch b = {k, ids + off, NULL, seqs, NULL};
        if (kiln_decode(c, &b) != KILN_OK) return -1;
        if (off + k == n) memcpy(out, kiln_get_logits(c, k - 1), (size_t)n_vocab * sizeof(float));
    }
    return 0;
}

static int same_floats(const float *a, const float *b, int n) { return memcmp(a, b, (size_t)n * sizeof(float)) == 0; }

/* The files of a recurrent model's state tests: data/fixtures/NAME.ext, or
 * NAME.ext when NAME is a path (a model of data/arch with a json of its
 * prompt_ids beside it). */
static void fixture_path(char *buf, size_t n, const char *name, const char *ext) {
    if (strchr(name, '/'))
        snprintf(buf, n, "%s.%s", name, ext);
    else
        snprintf(buf, n, "data/fixtures/%s.%s", name, ext);
}

/* On one hybrid fixture: the ways a sequence's state can come about give
 * the same logits as one cold prefill. */
static void hybrid_state(const char *name) {
    char path[256];
    fixture_path(path, sizeof path, name, "json");
    json_t *j = json_load_file(path, 0, NULL);
    CHECK(j != NULL);
    if (!j) return;
    fixture_path(path, sizeof path, name, "gguf");
    kiln_model *m;
    CHECKF(kiln_model_load(path, NULL, &m) == KILN_OK, "%s", kiln_last_error());
    if (!m) {
        json_decref(j);
        return;
    }
    kiln_model_info info;
    kiln_model_get_info(m, &info);
    const int V = info.n_vocab;
    json_t *pj = json_object_get(j, "prompt_ids");
    const int np = (int)json_array_size(pj);
    int32_t prompt[64];
    for (int i = 0; i < np && i < 64; i++) prompt[i] = (int32_t)json_integer_value(json_array_get(pj, (size_t)i));
    CHECK(np > KL_BLOCK_TOKENS && np <= 64);
    float *cold = malloc(sizeof(float) * (size_t)V), *lg = malloc(sizeof(float) * (size_t)V);
    float *alone[3];
    kiln_context *c = new_ctx(m, KILN_KV_F32, 256, 3);
    CHECK(c != NULL);
    if (!c) goto done;
    /* the KV cache holds the attention layers only: fewer bytes than a
     * dense model of the same shape; the state is a fixed size */
    CHECK(info.n_attn_layer > 0 && info.n_attn_layer < info.n_layer && info.state_bytes > 0);
    CHECK(info.kv_bytes_per_token ==
          (uint64_t)info.n_attn_layer * (uint64_t)info.n_head_kv * 2 * 2 * (uint64_t)(info.n_embd ? 16 : 0));

    /* one call; then the same prompt in pieces of 16 and of 7 tokens */
    CHECK(feed_chunks(c, 0, prompt, np, 64, cold, V) == 0);
    double worst = 0;
    for (int pass = 0; pass < 2; pass++) {
        CHECK(kiln_seq_truncate(c, 0, 0) == KILN_OK && kiln_seq_len(c, 0) == 0);
        CHECK(feed_chunks(c, 0, prompt, np, pass ? 7 : 16, lg, V) == 0);
        const double e = rel_err(lg, cold, V);
        worst = e > worst ? e : worst;
        if (pass == 0) CHECKF(same_floats(lg, cold, V), "%s: a prompt cut at block boundaries gives other bits", name);
    }
    CHECKF(worst < 1e-5, "%s: a prompt in pieces moves the logits by %.3g", name, worst);

    /* three sequences side by side (their tokens interleaved in one batch)
     * give what each gives alone */
    const int lens[3] = {np, np - 5, 23};
    for (int s = 0; s < 3; s++) {
        alone[s] = malloc(sizeof(float) * (size_t)V);
        CHECK(kiln_seq_truncate(c, 0, 0) == KILN_OK);
        CHECK(feed_chunks(c, 0, prompt + s, lens[s], 64, alone[s], V) == 0);
    }
    CHECK(kiln_seq_truncate(c, 0, 0) == KILN_OK);
    {
        int32_t tok[192], seq[192];
        int8_t want[192] = {0};
        int last[3] = {0};
        const int n = t_interleave(prompt, lens, 3, tok, seq, want, last);
        kiln_batch b = {n, tok, NULL, seq, want};
        CHECK(kiln_decode(c, &b) == KILN_OK);
        for (int s = 0; s < 3; s++)
            CHECKF(same_floats(kiln_get_logits(c, last[s]), alone[s], V), "%s: sequence %d batched differs", name, s);
        /* one decode step of all three: each as alone */
        for (int s = 0; s < 3; s++) kiln_seq_truncate(c, s, 0);
    }

    /* the prefix cache: seq 0 publishes its prompt; seq 1, the same prompt,
     * reuses the state at the last block boundary and decodes the rest;
     * seq 2, the prompt with another end, reuses what they share */
    CHECK(feed_chunks(c, 0, prompt, np, 64, lg, V) == 0);
    CHECK(kiln_seq_cache(c, 0, prompt, np) == KILN_OK);
    int32_t got = kiln_seq_reuse(c, 1, prompt, np);
    CHECKF(got == (np - 1) / KL_BLOCK_TOKENS * KL_BLOCK_TOKENS, "%s: reused %d tokens", name, got);
    CHECK(kiln_seq_len(c, 1) == got);
    CHECK(feed_chunks(c, 1, prompt + got, np - got, 64, lg, V) == 0);
    CHECKF(same_floats(lg, cold, V), "%s: a prefix-cache hit gives other logits (rel %.3g)", name,
           rel_err(lg, cold, V));
    kiln_kv_stats st;
    kiln_kv_get_stats(c, &st);
    CHECK(st.state_restores >= 1 && st.state_snapshots >= 1 && st.state_slots == 12);
    {
        int32_t other[64];
        memcpy(other, prompt, sizeof other);
        other[np - 3] = (other[np - 3] + 7) % V;
        got = kiln_seq_reuse(c, 2, other, np);
        CHECKF(got > 0 && got <= np - 3, "%s: reuse of a shared prefix: %d", name, got);
        float *ref = malloc(sizeof(float) * (size_t)V);
        CHECK(feed_chunks(c, 2, other + got, np - got, 64, lg, V) == 0);
        CHECK(kiln_seq_truncate(c, 2, 0) == KILN_OK);
        CHECK(feed_chunks(c, 2, other, np, 64, ref, V) == 0);
        CHECKF(rel_err(lg, ref, V) < 1e-5, "%s: partial prefix hit off by %.3g", name, rel_err(lg, ref, V));
        free(ref);
    }

    /* truncation: only where a snapshot is (the prompt's end here, after
     * kiln_seq_cache, and its last block boundary), never elsewhere */
    {
        int32_t t = prompt[3];
        kiln_batch b1 = {1, &t, NULL, NULL, NULL};
        CHECK(kiln_decode(c, &b1) == KILN_OK && kiln_seq_len(c, 0) == np + 1);
        CHECK(kiln_seq_truncate_point(c, 0, np - 1) == (np - 1) / KL_BLOCK_TOKENS * KL_BLOCK_TOKENS);
        CHECK(kiln_seq_truncate_point(c, 0, np) == np);
        CHECK(kiln_seq_truncate(c, 0, np - 2) == KILN_ERR_STATE && kiln_seq_len(c, 0) == np + 1);
        CHECK(kiln_seq_truncate(c, 0, np) == KILN_OK && kiln_seq_len(c, 0) == np);
        kiln_decode(c, &b1);
        memcpy(lg, kiln_get_logits(c, 0), sizeof(float) * (size_t)V);
        CHECK(kiln_seq_truncate(c, 0, np) == KILN_OK);
        kiln_decode(c, &b1);
        CHECKF(same_floats(kiln_get_logits(c, 0), lg, V), "%s: decoding after a truncation differs", name);
        /* a fork continues as the original does */
        CHECK(kiln_seq_truncate(c, 1, 0) == KILN_OK);
        CHECK(kiln_seq_copy(c, 0, 1) == KILN_OK && kiln_seq_len(c, 1) == np + 1);
        int32_t t2 = prompt[5], seq1 = 1;
        kiln_batch a = {1, &t2, NULL, NULL, NULL}, f = {1, &t2, NULL, &seq1, NULL};
        kiln_decode(c, &a);
        memcpy(lg, kiln_get_logits(c, 0), sizeof(float) * (size_t)V);
        kiln_decode(c, &f);
        CHECKF(same_floats(kiln_get_logits(c, 0), lg, V), "%s: a copied sequence decodes differently", name);
        CHECK(kiln_seq_copy(c, 0, 1) == KILN_ERR_STATE); /* dst not empty */
    }
    printf("%-12s pieces, batches, prefix reuse, truncation, copy: as a cold run\n", name);
    for (int s = 0; s < 3; s++) free(alone[s]);
done:
    kiln_context_free(c);
    free(cold);
    free(lg);
    kiln_model_free(m);
    json_decref(j);
}

/* kiln quantize on a hybrid model: llama.cpp's type rules for the new
 * tensors (the type each one is given before any block-size fallback:
 * these rows of 32 fall back from K types), and the Q8_0 result runs. */
typedef struct qseen {
    int n, bad;
} qseen;

static void q_rule(const kiln_quantize_tensor *t, void *user) {
    qseen *q = user;
    const char *got = t->wanted ? t->wanted : t->type_out;
    int layer = -1;
    sscanf(t->name, "blk.%d.", &layer);
    const char *want = "Q4_K";
    if (t->n_dims < 2 || strstr(t->name, "ffn_gate_inp.weight") || strstr(t->name, "ssm_conv1d"))
        want = "F32";
    else if (!strcmp(t->name, "token_embd.weight"))
        want = "Q6_K"; /* the tied output */
    /* attn_qkv and attn_v count together in file order: 0, 1 base, 2, 3 more bits */
    else if (strstr(t->name, "attn_qkv.weight") || strstr(t->name, "attn_v.weight"))
        want = layer >= 2 ? "Q6_K" : "Q4_K";
    else if (strstr(t->name, "ffn_down"))
        want = layer >= 2 ? "Q6_K" : "Q4_K"; /* experts, shared: by layer */
    q->n++;
    if (strcmp(got, want)) {
        q->bad++;
        fprintf(stderr, "quantize rule: %s got %s, want %s\n", t->name, got, want);
    }
}

static void hybrid_quantize(void) {
    const char *in = "data/fixtures/qwen35moe.gguf";
    char dir[] = "/tmp/kiln-test-hybrid-XXXXXX", tmp[64], out[64];
    if (!mkdtemp(dir)) {
        CHECK(0);
        return;
    }
    snprintf(tmp, sizeof tmp, "%s/q4_k_m.gguf", dir);
    qseen q = {0, 0};
    kiln_quantize_params p = kiln_quantize_default_params();
    p.n_threads = 2;
    p.on_tensor = q_rule;
    p.user = &q;
    CHECKF(kiln_quantize_with(in, tmp, "q4_k_m", &p) == KILN_OK, "%s", kiln_last_error());
    CHECKF(q.n > 40 && q.bad == 0, "q4_k_m: %d of %d tensors against llama.cpp's rules", q.bad, q.n);
    remove(tmp);
    snprintf(out, sizeof out, "%s/q8_0.gguf", dir);
    CHECK(kiln_quantize(in, out, "q8_0", 2) == KILN_OK);
    /* the same bytes as the generator's reference quantizer, experts too */
    char err[256];
    gguf_file *g, *r;
    gguf_open(out, &g);
    gguf_open("data/fixtures/qwen35moe-q8_0.gguf", &r);
    CHECK(g && r && gguf_n_tensors(g) == gguf_n_tensors(r));
    int same = 0;
    for (int i = 0; g && r && i < gguf_n_tensors(g); i++) {
        const gguf_tensor *a = gguf_tensor_at(g, i), *b = gguf_find_tensor(r, a->name);
        same += b && a->type == b->type && a->nbytes == b->nbytes && !memcmp(a->data, b->data, a->nbytes);
    }
    CHECKF(g && r && same == gguf_n_tensors(g), "qwen35moe q8_0: %d of %d tensors as the reference", same,
           g ? gguf_n_tensors(g) : 0);
    const gguf_tensor *e = g ? gguf_find_tensor(g, "blk.0.ffn_up_exps.weight") : NULL;
    CHECK(e && e->type == 8 && e->n_dims == 3);
    gguf_close(g);
    gguf_close(r);
    kiln_model *m;
    CHECKF(kiln_model_load(out, NULL, &m) == KILN_OK, "%s", kiln_last_error());
    if (m) {
        kiln_model_info info;
        kiln_model_get_info(m, &info);
        /* a decode step reads the used experts' share of the expert bytes */
        CHECK(info.active_bytes < info.step_bytes && (info.repacked_bytes > 0) == level_repacks());
        /* 2 of 4 experts: the expert bytes count half */
        uint64_t experts = 0;
        gguf_file *f;
        if (gguf_open(out, &f)) snprintf(err, sizeof err, "%s", kiln_last_error());
        for (int i = 0; f && i < gguf_n_tensors(f); i++)
            if (gguf_tensor_at(f, i)->n_dims == 3) experts += gguf_tensor_at(f, i)->nbytes;
        gguf_close(f);
        CHECKF(info.step_bytes - info.active_bytes == experts / 2, "active bytes %llu of %llu",
               (unsigned long long)info.active_bytes, (unsigned long long)info.step_bytes);
    }
    kiln_model_free(m);
    remove(out);
    rmdir(dir);
}

/* Speculative decoding on a hybrid model through the generation core: a
 * verification step (the last token and drafts, logits for each) runs the
 * recurrent layers token by token and is recorded, so cutting the rejected
 * drafts off replays the state up to the accepted ones.  Greedy text with
 * drafts, right or wrong, equals the text without, token for token. */
typedef struct hy_out {
    int32_t tok[64];
    int n;
} hy_out;

static int hy_collect(void *user, const gen_event *ev, const float *logits) {
    (void)logits;
    hy_out *o = user;
    if (ev->kind == GEN_EV_TOKEN && o->n < 64) o->tok[o->n++] = ev->tok.id;
    return 0;
}

typedef struct hy_oracle {
    int n_prompt;
    const hy_out *ref;
    int wrong_every, proposed;
} hy_oracle;

static int32_t hy_propose(void *user, const int32_t *tok, int32_t n, int32_t *dst, int32_t max) {
    (void)tok;
    hy_oracle *o = user;
    int32_t at = n - o->n_prompt, k = 0;
    for (; k < max && at + k < o->ref->n; k++) {
        dst[k] = o->ref->tok[at + k];
        if (o->wrong_every && (o->proposed + k) % o->wrong_every == o->wrong_every - 1) dst[k] = (dst[k] + 1) % 500 + 3;
    }
    o->proposed += k;
    return k;
}

static void hybrid_drafts(const char *name) {
    char path[256];
    fixture_path(path, sizeof path, name, "json");
    json_t *j = json_load_file(path, 0, NULL);
    fixture_path(path, sizeof path, name, "gguf");
    kiln_model *m;
    if (!j || kiln_model_load(path, NULL, &m) != KILN_OK) {
        CHECK(0);
        json_decref(j);
        return;
    }
    json_t *pj = json_object_get(j, "prompt_ids");
    int32_t prompt[64];
    const int np = (int)json_array_size(pj);
    for (int i = 0; i < np; i++) prompt[i] = (int32_t)json_integer_value(json_array_get(pj, (size_t)i));
    kiln_context *c = new_ctx(m, KILN_KV_F16, 256, 1);
    gen_batch *b = NULL;
    CHECK(c && gen_batch_new(m, c, 0, &b) == KILN_OK);
    hy_out ref = {{0}, 0};
    gen_params p = gen_params_default();
    p.prompt = prompt;
    p.n_prompt = np;
    p.n_predict = 24;
    p.sampler.temperature = 0;
    p.on_event = hy_collect;
    p.user = &ref;
    CHECK(b && gen_batch_add(b, &p, -1, NULL) == KILN_OK);
    for (int i = 0; b && i < 200 && gen_batch_n_active(b); i++) CHECK(gen_batch_step(b) == KILN_OK);
    CHECK(ref.n == 24);
    const int wrongs[] = {0, 3, 2};
    for (int w = 0; b && w < 3; w++)
        for (int nd = 2; nd <= 8; nd *= 2) {
            hy_out o = {{0}, 0};
            hy_oracle orc = {np, &ref, wrongs[w], 0};
            gen_params q = p;
            q.user = &o;
            q.draft = hy_propose;
            q.draft_user = &orc;
            q.n_draft = nd;
            CHECK(gen_batch_add(b, &q, -1, NULL) == KILN_OK);
            int steps = 0;
            for (; steps < 200 && gen_batch_n_active(b); steps++) CHECK(gen_batch_step(b) == KILN_OK);
            CHECKF(o.n == ref.n && !memcmp(o.tok, ref.tok, sizeof ref.tok), "%s: %d drafts, wrong every %d: other text",
                   name, nd, wrongs[w]);
        }
    printf("%-12s verified drafts (2 to 8, right and wrong): the same greedy text\n", name);
    gen_batch_free(b);
    kiln_context_free(c);
    kiln_model_free(m);
    json_decref(j);
}

/* The server's batched step on a hybrid model (gen_batch, as gen_sched
 * drives it), prompts fed 7 tokens a step: N concurrent greedy requests
 * each get the tokens they get alone; a request with a finished one's
 * prompt takes a prefix from the cache (a snapshot) and gives the same
 * tokens; one whose prompt differs 3 tokens from the end reuses only up to
 * a snapshot before that and prefills the rest; a slot suspended
 * mid-generation (its state published) and resumed continues as it would
 * have. */
typedef struct hy_req {
    int32_t tok[64];
    int n, n_cached, done;
} hy_req;

static int hy_req_event(void *user, const gen_event *ev, const float *logits) {
    (void)logits;
    hy_req *r = user;
    if (ev->kind == GEN_EV_TOKEN && r->n < 64) r->tok[r->n++] = ev->tok.id;
    if (ev->kind == GEN_EV_DONE) {
        r->done = 1;
        r->n_cached = ev->n_cached;
    }
    return 0;
}

static int hy_run(gen_batch *b, int n, const int32_t *const *prompts, const int *lens, int reuse, hy_req *out) {
    for (int i = 0; i < n; i++) {
        memset(&out[i], 0, sizeof out[i]);
        gen_params p = gen_params_default();
        p.prompt = prompts[i];
        p.n_prompt = lens[i];
        p.n_predict = 16;
        p.sampler.temperature = 0;
        p.ignore_eos = 1;
        p.reuse = reuse;
        p.on_event = hy_req_event;
        p.user = &out[i];
        if (gen_batch_add(b, &p, -1, NULL) != KILN_OK) return -1;
    }
    for (int i = 0; i < 400 && gen_batch_n_active(b); i++)
        if (gen_batch_step(b) != KILN_OK) return -1;
    for (int i = 0; i < n; i++)
        if (!out[i].done || out[i].n != 16) return -1;
    return 0;
}

static void hybrid_serving(const char *name) {
    char path[256];
    fixture_path(path, sizeof path, name, "json");
    json_t *j = json_load_file(path, 0, NULL);
    fixture_path(path, sizeof path, name, "gguf");
    kiln_model *m;
    if (!j || kiln_model_load(path, NULL, &m) != KILN_OK) {
        CHECK(0);
        json_decref(j);
        return;
    }
    json_t *pj = json_object_get(j, "prompt_ids");
    const int np = (int)json_array_size(pj);
    int32_t pa[64], pb[64], pc[64], pd[64];
    for (int i = 0; i < np && i < 64; i++) pa[i] = (int32_t)json_integer_value(json_array_get(pj, (size_t)i));
    CHECK(np > 2 * KL_BLOCK_TOKENS && np <= 64);
    kiln_model_info info;
    kiln_model_get_info(m, &info);
    /* b: a's system prefix with another question; c: a shorter prompt of
     * its own; d: a with a token 3 from the end changed */
    memcpy(pb, pa, sizeof pa);
    for (int i = np - 9; i < np; i++) pb[i] = (pa[i] * 7 + 11) % info.n_vocab;
    for (int i = 0; i < np; i++) pc[i] = pa[(i * 5 + 3) % np];
    memcpy(pd, pa, sizeof pa);
    pd[np - 3] = (pd[np - 3] + 7) % info.n_vocab;
    const int32_t *prompts[4] = {pa, pb, pc, pd};
    const int lens[4] = {np, np, np - 13, np};
    kiln_context *c = new_ctx(m, KILN_KV_F16, 256, 3);
    gen_batch *b = NULL;
    CHECK(c && gen_batch_new(m, c, 7, &b) == KILN_OK);
    hy_req alone[4], got[4];
    for (int i = 0; b && i < 4; i++) CHECK(hy_run(b, 1, prompts + i, lens + i, 0, &alone[i]) == 0);
    /* three at once, publishing their prompts */
    CHECK(b && hy_run(b, 3, prompts, lens, 1, got) == 0);
    for (int i = 0; b && i < 3; i++)
        CHECKF(!memcmp(got[i].tok, alone[i].tok, sizeof got[i].tok) && got[i].n_cached == 0,
               "%s: request %d of 3 batched: other tokens (or %d cached)", name, i, got[i].n_cached);
    kiln_kv_stats st0, st1;
    kiln_kv_get_stats(c, &st0);
    /* a's prompt again: a prefix from a snapshot, the same tokens */
    CHECK(b && hy_run(b, 1, prompts, lens, 1, got) == 0);
    CHECKF(got[0].n_cached >= np - KL_BLOCK_TOKENS && got[0].n_cached < np, "%s: a repeated prompt reused %d of %d",
           name, got[0].n_cached, np);
    CHECKF(!memcmp(got[0].tok, alone[0].tok, sizeof got[0].tok), "%s: a prefix-cache hit gives other tokens", name);
    /* d: what it shares with a, up to a snapshot, and no further */
    CHECK(b && hy_run(b, 1, prompts + 3, lens + 3, 1, got + 3) == 0);
    CHECKF(got[3].n_cached > 0 && got[3].n_cached <= np - 3, "%s: a prompt that differs at %d reused %d", name, np - 3,
           got[3].n_cached);
    CHECKF(!memcmp(got[3].tok, alone[3].tok, sizeof got[3].tok), "%s: a partial prefix hit gives other tokens", name);
    kiln_kv_get_stats(c, &st1);
    CHECK(st1.state_restores >= st0.state_restores + 2);
    /* suspended after 5 tokens, b's prompt run meanwhile, then resumed */
    {
        hy_req r = {{0}, 0, 0, 0}, other;
        gen_params p = gen_params_default();
        p.prompt = pc;
        p.n_prompt = lens[2];
        p.n_predict = 16;
        p.sampler.temperature = 0;
        p.ignore_eos = 1;
        p.reuse = 1;
        p.on_event = hy_req_event;
        p.user = &r;
        gen_slot *s = NULL;
        CHECK(b && gen_batch_add(b, &p, -1, &s) == KILN_OK);
        for (int i = 0; s && i < 100 && r.n < 5; i++) CHECK(gen_batch_step(b) == KILN_OK);
        if (s) gen_slot_suspend(b, s);
        CHECK(b && hy_run(b, 1, prompts + 1, lens + 1, 0, &other) == 0 &&
              !memcmp(other.tok, alone[1].tok, sizeof other.tok));
        CHECK(s && gen_slot_resume(b, s) == KILN_OK);
        for (int i = 0; s && i < 100 && gen_batch_n_active(b); i++) CHECK(gen_batch_step(b) == KILN_OK);
        CHECKF(r.done && r.n == 16 && !memcmp(r.tok, alone[2].tok, sizeof r.tok),
               "%s: suspended and resumed: other tokens", name);
    }
    printf("%-12s gen_batch: 3 at once, prefix hits, a partial hit, suspend/resume: as alone\n", name);
    gen_batch_free(b);
    kiln_context_free(c);
    kiln_model_free(m);
    json_decref(j);
}

static void test_context_rules(void) {
    kiln_model *m;
    if (kiln_model_load(STORIES, NULL, &m) != KILN_OK) {
        CHECK(0);
        return;
    }
    kiln_context *c = new_ctx(m, KILN_KV_F32, 16, 2);
    CHECK(c && kiln_context_n_ctx(c) == 16);
    if (!c) {
        kiln_model_free(m);
        return;
    }
    int32_t toks[20];
    for (int i = 0; i < 20; i++) toks[i] = 300 + i;
    kiln_batch big = {17, toks, NULL, NULL, NULL};
    CHECK(kiln_decode(c, &big) == KILN_ERR_CONTEXT_FULL);
    CHECK(kiln_seq_len(c, 0) == 0); /* nothing was computed */
    CHECK(strstr(kiln_context_error(c), "16") != NULL);
    /* a position that skips ahead is refused */
    int32_t pos[1] = {3};
    kiln_batch skip = {1, toks, pos, NULL, NULL};
    CHECK(kiln_decode(c, &skip) == KILN_ERR_INVALID_ARG);
    int32_t badtok = 100000;
    kiln_batch bad = {1, &badtok, NULL, NULL, NULL};
    CHECK(kiln_decode(c, &bad) == KILN_ERR_INVALID_ARG);

    /* two sequences together == each alone */
    float solo[2][512];
    for (int s = 0; s < 2; s++) {
        kiln_seq_truncate(c, 0, 0);
        kiln_batch b = {5, toks + s * 5, NULL, NULL, NULL};
        CHECK(kiln_decode(c, &b) == KILN_OK);
        memcpy(solo[s], kiln_get_logits(c, 4), sizeof solo[s]);
    }
    kiln_seq_truncate(c, 0, 0);
    int32_t mt[10], ms[10];
    int8_t want[10] = {0};
    for (int i = 0; i < 5; i++) {
        mt[2 * i] = toks[i];
        ms[2 * i] = 0;
        mt[2 * i + 1] = toks[5 + i];
        ms[2 * i + 1] = 1;
    }
    want[8] = want[9] = 1;
    kiln_batch mb = {10, mt, NULL, ms, want};
    CHECK(kiln_decode(c, &mb) == KILN_OK);
    CHECK(kiln_seq_len(c, 0) == 5 && kiln_seq_len(c, 1) == 5);
    CHECK(rel_err(kiln_get_logits(c, 8), solo[0], 512) < 1e-5);
    CHECK(rel_err(kiln_get_logits(c, 9), solo[1], 512) < 1e-5);
    CHECK(kiln_get_logits(c, 3) == NULL);
    kiln_context_free(c);
    kiln_model_free(m);
}

/* deepseek2 as files from before attn_kv_b was split store it: per head,
 * the Dn rows of attn_k_b transposed, then the Dv rows of attn_v_b, in one
 * attn_kv_b [R, H * (Dn + Dv)]; no *_mla keys, key_length Dn + Dr,
 * value_length Dv, a KV head per head.  Written from the reference model
 * (H 4, R 24, Dn 8, Dr 8, Dv 12, F16), so kiln's transposed copy holds
 * the very F16 values and the logits are the same bits. */
static int write_deepseek2_legacy(const char *dst) {
    enum { H = 4, R = 24, DN = 8, DV = 12, PER = DN + DV };
    char err[256];
    gguf_file *f;
    if (gguf_open("data/arch/deepseek2-f16.gguf", &f)) snprintf(err, sizeof err, "%s", kiln_last_error());
    if (!f) return -1;
    gguf_writer *w = gguf_writer_new();
    for (int i = 0; i < gguf_n_kv(f); i++) {
        const gguf_kv *kv = gguf_kv_at(f, i);
        if (!strstr(kv->key, "_mla") && !strstr(kv->key, ".key_length") && !strstr(kv->key, ".value_length") &&
            !strstr(kv->key, ".head_count_kv"))
            gguf_w_copy_kv(w, kv);
    }
    gguf_w_u32(w, "deepseek2.attention.key_length", 16);
    gguf_w_u32(w, "deepseek2.attention.value_length", DV);
    gguf_w_u32(w, "deepseek2.attention.head_count_kv", H);
    static uint16_t kvb[4][H * PER * R];
    int nl = 0;
    for (int i = 0; i < gguf_n_tensors(f); i++) {
        const gguf_tensor *x = gguf_tensor_at(f, i);
        int il;
        char rest[64];
        if (sscanf(x->name, "blk.%d.%63s", &il, rest) == 2 && !strcmp(rest, "attn_v_b.weight")) continue;
        if (sscanf(x->name, "blk.%d.%63s", &il, rest) != 2 || strcmp(rest, "attn_k_b.weight")) {
            gguf_w_tensor(w, x->name, x->type, (int)x->n_dims, x->ne, x->data);
            continue;
        }
        char vn[64];
        snprintf(vn, sizeof vn, "blk.%d.attn_v_b.weight", il);
        const gguf_tensor *v = gguf_find_tensor(f, vn);
        if (il < 0 || il >= 4 || !v || x->type != 1 || v->type != 1) break;
        const uint16_t *kb = x->data, *vb = v->data; /* [H][R][DN], [H][DV][R] */
        uint16_t *o = kvb[il];
        for (int h = 0; h < H; h++) {
            for (int d = 0; d < DN; d++)
                for (int r = 0; r < R; r++) o[(size_t)(h * PER + d) * R + r] = kb[(size_t)(h * R + r) * DN + d];
            for (int j = 0; j < DV; j++)
                for (int r = 0; r < R; r++) o[(size_t)(h * PER + DN + j) * R + r] = vb[(size_t)(h * DV + j) * R + r];
        }
        char kn[64];
        snprintf(kn, sizeof kn, "blk.%d.attn_kv_b.weight", il);
        const int64_t ne[2] = {R, H * PER};
        gguf_w_tensor(w, kn, 1 /* F16 */, 2, ne, o);
        nl++;
    }
    int rc = nl == 4 ? gguf_writer_save(w, dst, NULL, NULL) : -1;
    if (rc) fprintf(stderr, "write_deepseek2_legacy: %s\n", nl == 4 ? kiln_last_error() : "unexpected tensors");
    gguf_writer_free(w);
    gguf_close(f);
    return rc;
}

/* The legacy attn_kv_b layout gives the split file's logits bit for bit. */
static void deepseek2_legacy(void) {
    char path[64];
    snprintf(path, sizeof path, "/tmp/kiln-test-ds2-%d.gguf", (int)getpid());
    CHECK(write_deepseek2_legacy(path) == 0);
    enum { NV = 512 };
    static float a[NV], b[NV];
    kiln_model_info ia, ib;
    const char *prompt = "Grandma told us a story about";
    CHECK(prompt_logits("data/arch/deepseek2-f16.gguf", 1, prompt, a, NV, &ia) == 0);
    CHECKF(prompt_logits(path, 1, prompt, b, NV, &ib) == 0, "%s", kiln_last_error());
    CHECKF(memcmp(a, b, sizeof a) == 0, "deepseek2 attn_kv_b layout: logits differ by %.3g", rel_err(a, b, NV));
    unlink(path);
}

/* The reference deepseek2 model with one u32 key set to v; 0 or -1. */
static int write_deepseek2_key(const char *dst, const char *key, uint32_t v) {
    char err[256];
    gguf_file *f;
    if (gguf_open("data/arch/deepseek2-f16.gguf", &f)) snprintf(err, sizeof err, "%s", kiln_last_error());
    if (!f) return -1;
    gguf_writer *w = gguf_writer_new();
    for (int i = 0; i < gguf_n_kv(f); i++)
        if (strcmp(gguf_kv_at(f, i)->key, key)) gguf_w_copy_kv(w, gguf_kv_at(f, i));
    gguf_w_u32(w, key, v);
    for (int i = 0; i < gguf_n_tensors(f); i++) {
        const gguf_tensor *x = gguf_tensor_at(f, i);
        gguf_w_tensor(w, x->name, x->type, (int)x->n_dims, x->ne, x->data);
    }
    int rc = gguf_writer_save(w, dst, NULL, NULL);
    gguf_writer_free(w);
    gguf_close(f);
    return rc;
}

/* MLA hyperparameters that disagree with each other or with the tensors
 * are refused at load, with a message. */
static void deepseek2_bad_keys(void) {
    static const struct {
        const char *key;
        uint32_t v;
    } bad[] = {
        {"deepseek2.attention.kv_lora_rank", 20},     /* key_length is R + Dr */
        {"deepseek2.attention.key_length_mla", 8},    /* no no-rope part */
        {"deepseek2.attention.value_length_mla", 10}, /* attn_v_b's rows */
        {"deepseek2.attention.q_lora_rank", 0},       /* no attn_q */
        {"deepseek2.leading_dense_block_count", 5},   /* past the layers */
        {"deepseek2.nextn_predict_layers", 4},        /* no trunk left */
        {"deepseek2.expert_group_count", 4},          /* 6 experts */
        {"deepseek2.expert_gating_func", 3},
    };
    char path[64];
    snprintf(path, sizeof path, "/tmp/kiln-test-ds2k-%d.gguf", (int)getpid());
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        CHECK(write_deepseek2_key(path, bad[i].key, bad[i].v) == 0);
        kiln_model *m = NULL;
        const kiln_status st = kiln_model_load(path, NULL, &m);
        CHECKF(st != KILN_OK && m == NULL && *kiln_last_error(), "%s = %u loaded", bad[i].key, bad[i].v);
        kiln_model_free(m);
    }
    unlink(path);
}

/* Past MODEL_ATTN_F16_ACC_MAX (256) positions the F16 cache accumulates
 * attention in float.  The choice is per query position, so a 300-token
 * prompt gives the same logits in one batch as in chunks of 7 (the
 * chunks cross 256 mid-batch); and the F16 cache stays close to the F32
 * one over that span: 8.2e-4 measured (1.35e-3 with the F16 accumulator all
 * the way); a broken float path is far off. */
/* A qwen3-shaped model with heads 128 wide, two query heads per KV head
 * (the shape the tiled float-accumulator attention path takes), written
 * from the qwen3 fixture: its vocabulary, embeddings and FFN, with random
 * attention projections and q/k norms around 1. */
static int write_hd128_model(const char *dst) {
    enum { HD = 128, NH = 2, NKV = 1 };
    char err[256];
    gguf_file *f;
    if (gguf_open("data/fixtures/qwen3.gguf", &f)) snprintf(err, sizeof err, "%s", kiln_last_error());
    if (!f) return -1;
    gguf_writer *w = gguf_writer_new();
    for (int i = 0; i < gguf_n_kv(f); i++) {
        const gguf_kv *kv = gguf_kv_at(f, i);
        if (!strstr(kv->key, ".attention.head_count") && !strstr(kv->key, ".attention.key_length") &&
            !strstr(kv->key, ".attention.value_length"))
            gguf_w_copy_kv(w, kv);
    }
    gguf_w_u32(w, "qwen3.attention.head_count", NH);
    gguf_w_u32(w, "qwen3.attention.head_count_kv", NKV);
    gguf_w_u32(w, "qwen3.attention.key_length", HD);
    gguf_w_u32(w, "qwen3.attention.value_length", HD);
    const int64_t E = gguf_find_tensor(f, "output_norm.weight")->ne[0];
    float *bufs[64];
    int nbuf = 0;
    uint32_t seed = 12345;
    for (int i = 0; i < gguf_n_tensors(f) && nbuf < 64; i++) {
        const gguf_tensor *x = gguf_tensor_at(f, i);
        int64_t ne[2] = {0, 0};
        int nd = 2;
        float scale = 1.0f / sqrtf((float)E), base = 0.0f;
        if (strstr(x->name, "attn_q.weight"))
            ne[0] = E, ne[1] = NH * HD;
        else if (strstr(x->name, "attn_k.weight") || strstr(x->name, "attn_v.weight"))
            ne[0] = E, ne[1] = NKV * HD;
        else if (strstr(x->name, "attn_output.weight"))
            ne[0] = NH * HD, ne[1] = E, scale = 1.0f / sqrtf(NH * HD);
        else if (strstr(x->name, "attn_q_norm.weight") || strstr(x->name, "attn_k_norm.weight"))
            nd = 1, ne[0] = HD, scale = 0.2f, base = 1.0f;
        if (!ne[0]) {
            gguf_w_tensor(w, x->name, x->type, (int)x->n_dims, x->ne, x->data);
            continue;
        }
        const int64_t n = ne[0] * (nd == 2 ? ne[1] : 1);
        float *b = bufs[nbuf++] = malloc(sizeof(float) * (size_t)n);
        for (int64_t k = 0; k < n; k++) {
            seed = seed * 1664525u + 1013904223u;
            b[k] = base + scale * ((float)(seed >> 8) / 8388608.0f - 1.0f) * 1.7f;
        }
        gguf_w_tensor(w, x->name, 0 /* F32 */, nd, ne, b);
    }
    int rc = gguf_writer_save(w, dst, NULL, NULL);
    if (rc) fprintf(stderr, "write_hd128_model: %s\n", kiln_last_error());
    gguf_writer_free(w);
    for (int i = 0; i < nbuf; i++) free(bufs[i]);
    gguf_close(f);
    return rc;
}

/* 300 positions cross MODEL_ATTN_F16_ACC_MAX (256): in one batch (tiles of 4
 * float-accumulator tokens from position 256 on), in chunks of 7 (tiles cut
 * at every chunk) and one token at a time (no tiles), the logits are the
 * same bits; the F16 cache stays within 4e-3 of the F32 one.  On the stories
 * model (heads 8 wide) and on a model with heads 128 wide, which takes the
 * tiled SIMD path.  q8: the Q8_0 cache too (tiles of 4 from position 0),
 * same bits in all three chunkings and within q8 (relative) of the F32
 * cache (its keys and values carry 8-bit blocks: 1e-2 for the 128-wide
 * heads; the random MLA model's logits move about ten times its F16 cache's
 * error, as the others'); the stories model's heads of 8 are refused for it
 * (q8 0). */
static void long_attention(const char *path, int n_vocab, double q8) {
    kiln_model *m;
    if (kiln_model_load(path, NULL, &m) != KILN_OK) {
        CHECKF(0, "%s: %s", path, kiln_last_error());
        return;
    }
    enum { N = 300 };
    static int32_t toks[N];
    float *out[7];
    for (int r = 0; r < 7; r++) out[r] = calloc((size_t)n_vocab, sizeof(float));
    for (int i = 0; i < N; i++) toks[i] = 3 + (i * 37) % 500;
    /* runs: F16 whole, chunks of 7, one by one; F32; Q8_0 whole, chunks of 7, one by one */
    for (int run = 0; run < (q8 ? 7 : 4); run++) {
        const int kv = run == 3 ? KILN_KV_F32 : run >= 4 ? KILN_KV_Q8_0 : KILN_KV_F16;
        kiln_context *c = new_ctx(m, kv, 512, 1);
        CHECK(c != NULL);
        if (!c) continue;
        const int step = run % 4 == 1 || run == 5 ? 7 : run == 2 || run == 6 ? 1 : N;
        int ok = 1;
        for (int i = 0; i < N; i += step) {
            kiln_batch b = {N - i < step ? N - i : step, toks + i, NULL, NULL, NULL};
            ok &= kiln_decode(c, &b) == KILN_OK;
        }
        CHECK(ok);
        const float *lg = kiln_get_logits(c, (N - 1) % step);
        if (lg) memcpy(out[run], lg, sizeof(float) * (size_t)n_vocab);
        kiln_context_free(c);
    }
    CHECKF(memcmp(out[1], out[0], sizeof(float) * (size_t)n_vocab) == 0, "%s: 300 tokens in chunks of 7 != one batch",
           path);
    CHECKF(memcmp(out[2], out[0], sizeof(float) * (size_t)n_vocab) == 0, "%s: 300 tokens one by one != one batch",
           path);
    CHECKF(rel_err(out[0], out[3], n_vocab) < 4e-3, "%s: F16 cache at 300 positions: %.3g from the F32 cache", path,
           rel_err(out[0], out[3], n_vocab));
    if (q8) {
        CHECKF(memcmp(out[5], out[4], sizeof(float) * (size_t)n_vocab) == 0, "%s: Q8_0 cache, chunks of 7 != one batch",
               path);
        CHECKF(memcmp(out[6], out[4], sizeof(float) * (size_t)n_vocab) == 0, "%s: Q8_0 cache, one by one != one batch",
               path);
        const double e = rel_err(out[4], out[3], n_vocab);
        CHECKF(e < q8, "%s: Q8_0 cache at 300 positions: %.3g from the F32 cache", path, e);
        printf("Q8_0 KV cache at 300 positions: logits rel err %.2e from the F32 cache (F16: %.2e)\n", e,
               rel_err(out[0], out[3], n_vocab));
        /* prefix blocks are shared and copied as Q8_0 rows too: sequence 1
         * attaches sequence 0's two cached blocks of a 40-token prompt and
         * decodes the rest, then truncates into a shared block (a copy) and
         * decodes again; the last logits equal sequence 0's each time */
        kiln_context *c = new_ctx(m, KILN_KV_Q8_0, 512, 2);
        CHECK(c != NULL);
        if (c) {
            enum { P = 40 };
            const int32_t s1 = 1;
            kiln_batch b0 = {P, toks, NULL, NULL, NULL};
            CHECK(kiln_decode(c, &b0) == KILN_OK);
            memcpy(out[5], kiln_get_logits(c, P - 1), sizeof(float) * (size_t)n_vocab);
            CHECK(kiln_seq_cache(c, 0, toks, P) == KILN_OK);
            const int32_t got = kiln_seq_reuse(c, 1, toks, P);
            CHECKF(got == 32, "reused %d positions, want 32", got);
            int32_t seq[P];
            for (int i = 0; i < P; i++) seq[i] = s1;
            for (int round = 0; round < 2; round++) {
                const int32_t from = round ? 20 : got;
                if (round) CHECK(kiln_seq_truncate(c, 1, from) == KILN_OK);
                kiln_batch b1 = {P - from, toks + from, NULL, seq, NULL};
                CHECK(kiln_decode(c, &b1) == KILN_OK);
                const float *lg = kiln_get_logits(c, P - from - 1);
                CHECKF(lg && memcmp(lg, out[5], sizeof(float) * (size_t)n_vocab) == 0,
                       "Q8_0 cache: sequence 1 from %d shared positions != sequence 0", from);
            }
            kiln_context_free(c);
        }
    } else {
        kiln_context_params cp = kiln_context_default_params();
        cp.kv_type = KILN_KV_Q8_0;
        kiln_context *c = NULL;
        CHECK(kiln_context_new(m, &cp, &c) == KILN_ERR_UNSUPPORTED && c == NULL);
        CHECKF(strstr(kiln_last_error(), "multiple of 32") != NULL, "%s", kiln_last_error());
    }
    for (int r = 0; r < 7; r++) free(out[r]);
    kiln_model_free(m);
}

static void test_long_attention(void) {
    long_attention(STORIES, 512, 0.0);
    char path[64];
    snprintf(path, sizeof path, "/tmp/kiln-test-hd128-%d.gguf", (int)getpid());
    CHECK(write_hd128_model(path) == 0);
    long_attention(path, 50257, 1e-2);
    unlink(path);
    /* MLA's cache: one latent row per token with V in it (F16, F32, Q8_0;
     * prefix blocks shared and copied) */
    long_attention("data/arch/deepseek2-f16.gguf", 512, 4e-2);
}

/* Batch invariance: a token's logits do not depend on the batch it is in
 * (speculative verification and continuous batching rely on it).  After a
 * 32-token prompt in one batch, 30 more tokens in chunks of 1, 2, 4 and 8
 * (twice) give, at every position, the very bits one-token decoding gives.
 * Weights F32 and kiln quantize's F16, BF16, Q8_0 and Q4_0 of the qwen3
 * fixture (F16 takes the block kernel for every batch size; the others the
 * interleaved or row kernels), and the hybrid F16 fixtures (chunks this
 * short use the recurrent delta rule). */
static int invariance_run(const char *path, int chunked, float **out, int *n_vocab) {
    kiln_model *m;
    if (kiln_model_load(path, NULL, &m) != KILN_OK) {
        fprintf(stderr, "%s: %s\n", path, kiln_last_error());
        return -1;
    }
    kiln_model_info info;
    kiln_model_get_info(m, &info);
    const int V = info.n_vocab;
    enum { NP = 32, NC = 30 };
    int32_t toks[NP + NC];
    for (int i = 0; i < NP + NC; i++) toks[i] = 3 + (i * 37) % (V - 3 < 400 ? V - 3 : 400);
    kiln_context *c = new_ctx(m, KILN_KV_F16, 128, 1);
    int rc = c ? 0 : -1;
    if (c) {
        kiln_batch b = {NP, toks, NULL, NULL, NULL};
        rc |= kiln_decode(c, &b) != KILN_OK;
        const int sizes[] = {1, 2, 4, 8};
        int8_t all[8] = {1, 1, 1, 1, 1, 1, 1, 1};
        for (int i = NP, k = 0; rc == 0 && i < NP + NC; k++) {
            int n = chunked ? sizes[k % 4] : 1;
            if (n > NP + NC - i) n = NP + NC - i;
            kiln_batch cb = {n, toks + i, NULL, NULL, all};
            rc |= kiln_decode(c, &cb) != KILN_OK;
            for (int j = 0; rc == 0 && j < n; j++) {
                const float *lg = kiln_get_logits(c, j);
                if (!lg)
                    rc = -1;
                else
                    memcpy(*out + (size_t)(i - NP + j) * V, lg, sizeof(float) * (size_t)V);
            }
            i += n;
        }
        kiln_context_free(c);
    }
    *n_vocab = V;
    kiln_model_free(m);
    return rc;
}

static void batch_invariance(const char *path, const char *label) {
    enum { NC = 30 };
    int V = 0;
    kiln_model *m;
    if (kiln_model_load(path, NULL, &m) != KILN_OK) {
        CHECKF(0, "%s: %s", path, kiln_last_error());
        return;
    }
    kiln_model_info info;
    kiln_model_get_info(m, &info);
    V = info.n_vocab;
    kiln_model_free(m);
    float *a = malloc(sizeof(float) * (size_t)NC * (size_t)V), *b = malloc(sizeof(float) * (size_t)NC * (size_t)V);
    CHECKF(invariance_run(path, 1, &a, &V) == 0 && invariance_run(path, 0, &b, &V) == 0, "%s: decode failed", label);
    int bad = 0;
    for (int i = 0; i < NC; i++) bad += memcmp(a + (size_t)i * V, b + (size_t)i * V, sizeof(float) * (size_t)V) != 0;
    CHECKF(bad == 0, "%s: %d of %d positions decoded in chunks of 1/2/4/8 differ from one-token decoding", label, bad,
           NC);
    free(a);
    free(b);
}

static void test_batch_invariance(void) {
    char dir[] = "/tmp/kiln-test-invariance-XXXXXX", out[80];
    if (!mkdtemp(dir)) {
        CHECK(0);
        return;
    }
    batch_invariance("data/fixtures/qwen3.gguf", "qwen3 F32");
    const char *types[] = {"f16", "bf16", "q8_0", "q4_0"};
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
        snprintf(out, sizeof out, "%s/%s.gguf", dir, types[i]);
        CHECKF(kiln_quantize("data/fixtures/qwen3.gguf", out, types[i], 2) == KILN_OK, "%s", kiln_last_error());
        char label[32];
        snprintf(label, sizeof label, "qwen3 %s", types[i]);
        batch_invariance(out, label);
        remove(out);
    }
    /* a mixture of experts: a decode step's experts read the token's row
     * itself, a batch's read copies grouped by expert */
    batch_invariance("data/arch/qwen3moe-f32.gguf", "qwen3moe F32");
    const char *moe_types[] = {"q8_0", "q4_0"};
    for (size_t i = 0; i < sizeof moe_types / sizeof moe_types[0]; i++) {
        snprintf(out, sizeof out, "%s/moe-%s.gguf", dir, moe_types[i]);
        CHECKF(kiln_quantize("data/arch/qwen3moe-f32.gguf", out, moe_types[i], 2) == KILN_OK, "%s", kiln_last_error());
        char label[32];
        snprintf(label, sizeof label, "qwen3moe %s", moe_types[i]);
        batch_invariance(out, label);
        remove(out);
    }
    /* fused attn_qkv and gate|up read as row ranges, F32 and repacked */
    batch_invariance("data/arch/phi3-f32.gguf", "phi3 F32");
    /* sliding-window layers (30 positions over a window of 16), per-layer
     * head sizes, KV heads, FFN widths and shared caches */
    batch_invariance("data/arch/gemma3-f32.gguf", "gemma3 F32");
    batch_invariance("data/arch/gemma4-f32.gguf", "gemma4 F32");
    snprintf(out, sizeof out, "%s/phi3-q4_0.gguf", dir);
    CHECKF(kiln_quantize("data/arch/phi3-f32.gguf", out, "q4_0", 2) == KILN_OK, "%s", kiln_last_error());
    batch_invariance(out, "phi3 q4_0");
    remove(out);
    /* MLA: one latent row per token, the per-head absorbed products */
    batch_invariance("data/arch/deepseek2-f16.gguf", "deepseek2 F16");
    snprintf(out, sizeof out, "%s/deepseek2-q4_0.gguf", dir);
    CHECKF(kiln_quantize("data/arch/deepseek2-f16.gguf", out, "q4_0", 2) == KILN_OK, "%s", kiln_last_error());
    batch_invariance(out, "deepseek2 q4_0");
    remove(out);
    rmdir(dir);
    batch_invariance("data/hybrid/qwen35moe-spm-f16.gguf", "qwen35moe F16");
    batch_invariance("data/hybrid/qwen3next-spm-f16.gguf", "qwen3next F16");
    batch_invariance("data/arch/nemotron-h-f32.gguf", "nemotron_h F32");
    batch_invariance("data/arch/nemotron-h-moe-f16.gguf", "nemotron_h_moe F16");
}

/* ---- M-RoPE (qwen2vl, qwen3vl) ---- */

/* Largest |a - b| over n floats. */
static float max_diff(const float *a, const float *b, int n) {
    float d = 0;
    for (int i = 0; i < n; i++)
        if (fabsf(a[i] - b[i]) > d) d = fabsf(a[i] - b[i]);
    return d;
}

/* data/vision/qwen-mrope.json (tests/gen_vision_qwen.py --text): a token
 * sequence whose middle carries an image's 2-D M-RoPE rows.  Its last
 * logits against the float64 reference (F32 cache: within 1e-3 of the
 * largest logit), the greedy ids after it, and the same logits when the
 * sequence comes in pieces, after a truncation into the text after the
 * image and in a copied sequence (the next text position is kept per
 * cell); an image row without its first token is refused. */
static void mrope_cases(void) {
    json_error_t je;
    json_t *j = json_load_file("data/vision/qwen-mrope.json", 0, &je);
    CHECKF(j != NULL, "qwen-mrope.json: %s", je.text);
    json_t *cases = json_object_get(j, "cases");
    size_t ci;
    json_t *cs;
    int n_cases = 0;
    json_array_foreach(cases, ci, cs) {
        char path[256];
        snprintf(path, sizeof path, "data/vision/%s", json_string_value(json_object_get(cs, "model")));
        kiln_model *m;
        CHECKF(kiln_model_load(path, NULL, &m) == KILN_OK, "%s", kiln_last_error());
        if (!m) continue;
        kiln_model_info info;
        kiln_model_get_info(m, &info);
        json_t *ij = json_object_get(cs, "ids"), *mj = json_object_get(cs, "mpos");
        json_t *lj = json_object_get(cs, "last_logits"), *gj = json_object_get(cs, "greedy");
        const int n = (int)json_array_size(ij), V = info.n_vocab;
        CHECK(n > 0 && n <= 64 && (int)json_array_size(mj) == n && (int)json_array_size(lj) == V);
        int32_t ids[64], mpos[64 * 4];
        float *ref = malloc((size_t)V * sizeof *ref), *lg0 = malloc((size_t)V * sizeof *lg0);
        for (int i = 0; i < n && i < 64; i++) {
            ids[i] = (int32_t)json_integer_value(json_array_get(ij, (size_t)i));
            for (int k = 0; k < 4; k++)
                mpos[4 * i + k] = (int32_t)json_integer_value(json_array_get(json_array_get(mj, (size_t)i), (size_t)k));
        }
        float scale = 0;
        for (int v = 0; v < V; v++) {
            ref[v] = (float)json_real_value(json_array_get(lj, (size_t)v));
            if (fabsf(ref[v]) > scale) scale = fabsf(ref[v]);
        }
        kiln_context *c = new_ctx(m, KILN_KV_F32, 256, 2);
        CHECK(c != NULL);
        /* one batch */
        kiln_batch b = {n, ids, NULL, NULL, NULL};
        CHECKF(kiln_decode_inputs(c, &b, &(kiln_batch_inputs){NULL, mpos}) == KILN_OK, "%s", kiln_last_error());
        const float *lg = kiln_get_logits(c, n - 1);
        const float d = lg ? max_diff(lg, ref, V) : INFINITY;
        CHECKF(d <= 1e-3f * scale, "%s: last logits off the reference by %g (largest %g)", path, d, scale);
        if (lg) memcpy(lg0, lg, (size_t)V * sizeof *lg0);
        /* greedy after it, text positions from the cells */
        int32_t got[16];
        const int ng = (int)json_array_size(gj);
        int same = ng <= 16 && lg;
        for (int i = 0; same && i < ng; i++) {
            got[i] = t_argmax(lg, V);
            same = got[i] == (int32_t)json_integer_value(json_array_get(gj, (size_t)i));
            kiln_batch b1 = {1, &got[i], NULL, NULL, NULL};
            lg = i + 1 < ng && kiln_decode(c, &b1) == KILN_OK ? kiln_get_logits(c, 0) : lg;
        }
        CHECKF(same, "%s: greedy ids differ from the reference", path);
        /* in pieces: the text before the image, the image in two, the rest */
        const int first = (int)json_integer_value(json_object_get(json_object_get(cs, "image"), "first"));
        const int nimg = (int)(json_integer_value(json_object_get(json_object_get(cs, "image"), "nx")) *
                               json_integer_value(json_object_get(json_object_get(cs, "image"), "ny")));
        CHECK(first > 0 && first + nimg < n);
        CHECK(kiln_seq_truncate(c, 0, 0) == KILN_OK);
        const int cut[] = {0, first, first + 7, first + nimg, n}; /* one cut inside the image */
        for (int k = 0; k < 4; k++) {
            kiln_batch bk = {cut[k + 1] - cut[k], ids + cut[k], NULL, NULL, NULL};
            CHECK(kiln_decode_inputs(c, &bk, &(kiln_batch_inputs){NULL, mpos + 4 * cut[k]}) == KILN_OK);
        }
        lg = kiln_get_logits(c, n - cut[3] - 1);
        CHECKF(lg && max_diff(lg, lg0, V) <= 1e-4f * scale, "%s: the logits depend on the batches", path);
        /* a copy of it, then cut back into the text after the image and fed again */
        CHECK(kiln_seq_copy(c, 0, 1) == KILN_OK);
        int32_t s1[64];
        for (int i = 0; i < 64; i++) s1[i] = 1;
        const int keep = first + nimg + 2;
        CHECK(kiln_seq_truncate(c, 1, keep) == KILN_OK);
        kiln_batch bt = {n - keep, ids + keep, NULL, s1, NULL};
        CHECK(kiln_decode(c, &bt) == KILN_OK);
        lg = kiln_get_logits(c, n - keep - 1);
        CHECKF(lg && max_diff(lg, lg0, V) <= 1e-4f * scale, "%s: truncation loses the text position", path);
        /* without the image rows the model sees plain positions: other logits */
        CHECK(kiln_seq_truncate(c, 1, 0) == KILN_OK);
        kiln_batch bp = {n, ids, NULL, s1, NULL};
        CHECK(kiln_decode(c, &bp) == KILN_OK);
        lg = kiln_get_logits(c, n - 1);
        CHECK(lg && max_diff(lg, lg0, V) > 1e-2f * scale);
        /* an image row whose first token is not in the batch */
        CHECK(kiln_seq_truncate(c, 1, 0) == KILN_OK);
        kiln_batch bb = {nimg - 1, ids + first + 1, NULL, s1, NULL};
        CHECK(kiln_decode_inputs(c, &bb, &(kiln_batch_inputs){NULL, mpos + 4 * (first + 1)}) == KILN_ERR_INVALID_ARG);
        printf("%-24s %s: M-RoPE image rows as the reference (%.2g of %.3g)\n",
               json_string_value(json_object_get(cs, "model")), info.arch, d, scale);
        kiln_context_free(c);
        free(ref);
        free(lg0);
        kiln_model_free(m);
        n_cases++;
    }
    CHECK(n_cases == 2);
    json_decref(j);
}

/* qwen35's interleaved sections with an image's input and M-RoPE rows (no reference: the
 * same logits however the batch is cut or mixed with another sequence,
 * which makes the hybrid family reorder its rows, and different ones from
 * plain positions). */
static void mrope_hybrid(void) {
    kiln_model *m;
    CHECKF(kiln_model_load("data/hybrid/qwen35-spm-f32.gguf", NULL, &m) == KILN_OK, "%s", kiln_last_error());
    if (!m) return;
    kiln_model_info info;
    kiln_model_get_info(m, &info);
    const int V = info.n_vocab, n = 24, first = 5, nx = 4, ny = 3;
    int32_t ids[48], mpos[48 * 4], seq[48];
    const int E = info.n_embd;
    float *rows = malloc((size_t)48 * E * sizeof *rows), *mrows = malloc((size_t)48 * E * sizeof *mrows);
    for (int i = 0; i < 48 * E; i++) rows[i] = (float)((i * 7919) % 2001 - 1000) / 1000.0f;
    for (int i = 0; i < n; i++) {
        const int k = i - first, img = k >= 0 && k < nx * ny;
        ids[i] = img ? -1 - k : 3 + (i * 37) % (V - 3); /* image tokens: negative ids with rows of their own */
        mpos[4 * i] = img ? 0 : -1;
        mpos[4 * i + 1] = img ? k / nx : -1;
        mpos[4 * i + 2] = img ? k % nx : -1;
        mpos[4 * i + 3] = img ? 0 : -1;
    }
    float *lg0 = malloc((size_t)V * sizeof *lg0);
    kiln_context *c = new_ctx(m, KILN_KV_F32, 256, 2);
    CHECK(c != NULL);
    kiln_batch b = {n, ids, NULL, NULL, NULL};
    CHECK(kiln_decode_inputs(c, &b, &(kiln_batch_inputs){rows, mpos}) == KILN_OK);
    const float *lg = kiln_get_logits(c, n - 1);
    CHECK(lg != NULL);
    if (lg) memcpy(lg0, lg, (size_t)V * sizeof *lg0);
    /* the same tokens as sequence 1, interleaved with sequence 0's next ones */
    int32_t mix[48], mm[48 * 4];
    int k = 0;
    for (int i = 0; i < n; i++) {
        mix[k] = ids[i];
        seq[k] = 1;
        memcpy(mrows + (size_t)k * E, rows + (size_t)i * E, (size_t)E * sizeof(float));
        memcpy(mm + 4 * k++, mpos + 4 * i, 4 * sizeof(int32_t));
        if (i % 3 == 0) {
            mix[k] = 3 + (i * 37) % (V - 3);
            seq[k] = 0;
            for (int r = 0; r < 4; r++) mm[4 * k + r] = -1;
            k++;
        }
    }
    int8_t want[48] = {0};
    for (int i = k - 1; i >= 0; i--)
        if (seq[i] == 1) {
            want[i] = 1;
            break;
        }
    kiln_batch bm = {k, mix, NULL, seq, want};
    CHECK(kiln_decode_inputs(c, &bm, &(kiln_batch_inputs){mrows, mm}) == KILN_OK);
    int last = 0;
    for (int i = 0; i < k; i++)
        if (want[i]) last = i;
    lg = kiln_get_logits(c, last);
    CHECKF(lg && max_diff(lg, lg0, V) <= 1e-4f, "qwen35: M-RoPE rows depend on the batch's mix");
    /* plain positions differ */
    CHECK(kiln_seq_truncate(c, 1, 0) == KILN_OK);
    int32_t s1[48];
    for (int i = 0; i < 48; i++) s1[i] = 1;
    kiln_batch bp = {n, ids, NULL, s1, NULL};
    CHECK(kiln_decode_inputs(c, &bp, &(kiln_batch_inputs){rows, NULL}) == KILN_OK);
    lg = kiln_get_logits(c, n - 1);
    CHECK(lg && max_diff(lg, lg0, V) > 1e-3f);
    printf("qwen35       image rows and M-RoPE rows: the same logits mixed with another sequence\n");
    free(rows);
    free(mrows);
    kiln_context_free(c);
    free(lg0);
    kiln_model_free(m);
}

/* data/vision/qwen-text.json: llama-completion's greedy text (4 cases) for the tiny
 * qwen2vl / qwen3vl models (text only: every M-RoPE section at the text
 * position), byte for byte (as hex), with the default F16 cache. */
static void mrope_text_cases(void) {
    json_error_t je;
    json_t *cases = json_load_file("data/vision/qwen-text.json", 0, &je);
    CHECKF(cases != NULL, "data/vision/qwen-text.json: %s", je.text);
    if (!cases) return;
    size_t ci;
    json_t *cs;
    json_array_foreach(cases, ci, cs) {
        char path[256];
        snprintf(path, sizeof path, "data/vision/%s", json_string_value(json_object_get(cs, "model")));
        kiln_model *m;
        CHECKF(kiln_model_load(path, NULL, &m) == KILN_OK, "%s", kiln_last_error());
        if (!m) continue;
        kiln_model_info info;
        kiln_model_get_info(m, &info);
        const char *prompt = json_string_value(json_object_get(cs, "prompt"));
        const int np = (int)json_integer_value(json_object_get(cs, "n_predict"));
        int32_t ids[512], got[64];
        const int n = prompt ? kiln_tokenize(m, prompt, strlen(prompt), 1, 0, ids, 512) : -1;
        kiln_context *c = new_ctx(m, KILN_KV_F16, 1024, 1);
        CHECK(c && n > 0 && np > 0 && np <= 64 && greedy(c, info.n_vocab, ids, n, np, got, NULL) == 0);
        char text[1024];
        size_t tl = 0, k;
        kiln_detok *d = kiln_detok_new(m);
        for (int i = 0; i < np && np <= 64; i++) {
            const char *p = kiln_detok_push(d, got[i], &k);
            if (tl + k < sizeof text) memcpy(text + tl, p, k), tl += k;
        }
        const char *p = kiln_detok_flush(d, &k);
        if (tl + k < sizeof text) memcpy(text + tl, p, k), tl += k;
        text[tl] = 0;
        kiln_detok_free(d);
        /* the bytes as hex: random weights print byte tokens that are not UTF-8 */
        char hex[2048];
        for (size_t i = 0; i < tl && 2 * i + 2 < sizeof hex; i++)
            snprintf(hex + 2 * i, 3, "%02x", (unsigned char)text[i]);
        hex[tl ? 2 * tl : 0] = 0;
        const char *want = json_string_value(json_object_get(cs, "expected_hex"));
        CHECKF(want && !strcmp(hex, want), "%s: %s instead of llama-completion's %s", path, hex, want ? want : "");
        printf("%-24s %s: %d tokens as llama-completion\n", json_string_value(json_object_get(cs, "model")), info.arch,
               np);
        kiln_context_free(c);
        kiln_model_free(m);
    }
    json_decref(cases);
}

int main(void) {
    test_backend_choice();
    test_stories();
    for (size_t i = 0; i < sizeof k_fixtures / sizeof k_fixtures[0]; i++) test_fixture(&k_fixtures[i], 1);
    test_fixture(&k_fixtures[5], 0); /* llama-q4_0 in the file layout */
    test_toolcall();
    reference_cases("data/hybrid", 3);
    reference_cases("data/arch", 20);
    mrope_cases();
    mrope_text_cases();
    mrope_hybrid();
    deepseek2_legacy();
    deepseek2_bad_keys();
    qwen3moe_quantized();
    gptoss_quantized();
    hybrid_state("qwen35");
    hybrid_state("qwen35moe");
    hybrid_state("qwen3next");
    hybrid_quantize();
    hybrid_drafts("qwen35");
    hybrid_drafts("qwen3next");
    hybrid_serving("qwen35");
    hybrid_serving("qwen35moe");
    hybrid_state("data/arch/nemotron-h-f32");
    hybrid_state("data/arch/nemotron-h-moe-f16");
    hybrid_drafts("data/arch/nemotron-h-f32");
    hybrid_drafts("data/arch/nemotron-h-moe-f16");
    hybrid_serving("data/arch/nemotron-h-f32");
    hybrid_serving("data/arch/nemotron-h-moe-f16");
    test_context_rules();
    test_long_attention();
    test_batch_invariance();
    return t_done();
}
