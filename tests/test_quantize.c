/*
 * kiln quantize.
 *  - Q8_0 and Q4_0 tensors written by kiln are byte-identical to the ones
 *    gen_fixtures.py wrote with ggml's reference quantizers (an independent
 *    implementation in Python), so llama.cpp reads them the same way;
 *  - the Q4_K_M mix puts Q6_K exactly where llama.cpp's rules do, and the
 *    result loads and computes close to the F32 model;
 *  - the input is never the output; every block-size fallback is reported;
 *    kiln quantize prints a summary and takes store names, as kiln embed
 *    does; Q3_K_L follows llama.cpp's mix; a quantized file is quantized
 *    again only with --allow-requantize.
 */
#include "kiln.h"
#include "testutil.h"

#include "gguf/gguf.h"
#include "quant/quant.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static char tmpdir[] = "/tmp/kiln-test-quantize-XXXXXX";

static void compare_with_fixture(const char *type, const char *fixture) {
    char out[512];
    snprintf(out, sizeof out, "%s/llama-%s.gguf", tmpdir, type);
    CHECKF(kiln_quantize("data/fixtures/llama.gguf", out, type, 2) == KILN_OK, "%s", kiln_last_error());
    gguf_file *a;
    gguf_file *b;
    gguf_open(out, &a);
    gguf_open(fixture, &b);
    CHECK(a && b);
    if (!a || !b) {
        gguf_close(a);
        gguf_close(b);
        return;
    }
    int same = 0, compared = 0;
    for (int i = 0; i < gguf_n_tensors(a); i++) {
        const gguf_tensor *ta = gguf_tensor_at(a, i), *tb = gguf_find_tensor(b, ta->name);
        CHECK(tb != NULL);
        if (!tb || ta->type != tb->type) continue; /* e.g. the output projection kiln makes Q6_K */
        compared++;
        same += ta->nbytes == tb->nbytes && memcmp(ta->data, tb->data, ta->nbytes) == 0;
    }
    CHECKF(same == compared && compared >= 18, "%s: %d of %d tensors identical", type, same, compared);
    printf("%s: %d of %d same-type tensors byte-identical to the reference quantizer\n", type, same, compared);
    /* llama.cpp makes the output projection of a Q4_0 file Q6_K; these rows
     * of 32 don't divide into Q6_K's 256-element blocks, so it falls back
     * to Q8_0 */
    const gguf_tensor *o = gguf_find_tensor(a, "output.weight");
    CHECK(o && (int)o->type == QUANT_Q8_0);
    CHECK(gguf_get_int(a, "general.quantization_version", 0) == 2);
    gguf_close(a);
    gguf_close(b);
}

/* Writes a llama-shaped model whose rows divide into 256-element blocks,
 * with random F32 weights, borrowing the stories tokenizer. */
static int write_k_model(const char *path, int n_layer) {
    char err[256];
    gguf_file *src;
    if (gguf_open("../models/stories260K.gguf", &src)) snprintf(err, sizeof err, "%s", kiln_last_error());
    if (!src) return -1;
    const int E = 256, F = 512, V = 512, H = 4;
    gguf_writer *w = gguf_writer_new();
    for (int i = 0; i < gguf_n_kv(src); i++) {
        const gguf_kv *kv = gguf_kv_at(src, i);
        if (!strncmp(kv->key, "tokenizer.", 10) || !strcmp(kv->key, "general.architecture")) gguf_w_copy_kv(w, kv);
    }
    gguf_w_u32(w, "llama.context_length", 256);
    gguf_w_u32(w, "llama.embedding_length", E);
    gguf_w_u32(w, "llama.feed_forward_length", F);
    gguf_w_u32(w, "llama.block_count", (uint32_t)n_layer);
    gguf_w_u32(w, "llama.attention.head_count", H);
    gguf_w_u32(w, "llama.attention.head_count_kv", H);
    gguf_w_f32(w, "llama.attention.layer_norm_rms_epsilon", 1e-5f);
    size_t total = (size_t)V * E * 2 + E + (size_t)n_layer * (2 * E + 4 * (size_t)E * E + 3 * (size_t)E * F);
    float *buf = malloc(total * sizeof(float)), *p = buf;
    uint64_t x = 99;
    for (size_t i = 0; i < total; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        buf[i] = ((float)((x >> 40) & 0xffff) / 65536.0f - 0.5f) * 0.2f;
    }
#define T2(name, a, b)                               \
    do {                                             \
        int64_t ne[2] = {a, b};                      \
        gguf_w_tensor(w, name, QUANT_F32, 2, ne, p); \
        p += (size_t)(a) * (b);                      \
    } while (0)
#define T1(name, a)                                  \
    do {                                             \
        int64_t ne[1] = {a};                         \
        for (int k = 0; k < (a); k++) p[k] = 1.0f;   \
        gguf_w_tensor(w, name, QUANT_F32, 1, ne, p); \
        p += (a);                                    \
    } while (0)
    T2("token_embd.weight", E, V);
    T2("output.weight", E, V);
    T1("output_norm.weight", E);
    char n[64];
    for (int l = 0; l < n_layer; l++) {
#define NM(s) (snprintf(n, sizeof n, "blk.%d.%s", l, s), n)
        T1(NM("attn_norm.weight"), E);
        T2(NM("attn_q.weight"), E, E);
        T2(NM("attn_k.weight"), E, E);
        T2(NM("attn_v.weight"), E, E);
        T2(NM("attn_output.weight"), E, E);
        T1(NM("ffn_norm.weight"), E);
        T2(NM("ffn_gate.weight"), E, F);
        T2(NM("ffn_up.weight"), E, F);
        T2(NM("ffn_down.weight"), F, E);
#undef NM
    }
#undef T1
#undef T2
    int rc = gguf_writer_save(w, path, NULL, NULL);
    gguf_writer_free(w);
    free(buf);
    gguf_close(src);
    return rc;
}

static void last_logits(const char *path, float *out) {
    kiln_model *m;
    kiln_context *c;
    memset(out, 0, 512 * sizeof(float));
    if (kiln_model_load(path, NULL, &m) != KILN_OK) {
        CHECKF(0, "%s", kiln_last_error());
        return;
    }
    kiln_context_params cp = kiln_context_default_params();
    cp.n_ctx = 64;
    CHECK(kiln_context_new(m, &cp, &c) == KILN_OK);
    int32_t toks[6] = {1, 274, 287, 381, 261, 352};
    kiln_batch b = {6, toks, NULL, NULL, NULL};
    CHECK(kiln_decode(c, &b) == KILN_OK);
    memcpy(out, kiln_get_logits(c, 5), 512 * sizeof(float));
    kiln_context_free(c);
    kiln_model_free(m);
}

static double cosine(const float *a, const float *b, int n) {
    double ab = 0, aa = 0, bb = 0;
    for (int i = 0; i < n; i++) {
        ab += (double)a[i] * b[i];
        aa += (double)a[i] * a[i];
        bb += (double)b[i] * b[i];
    }
    return ab / sqrt(aa * bb + 1e-30);
}

static void test_k_mix(void) {
    const int n_layer = 8;
    char src[512], dst[512], err[256];
    snprintf(src, sizeof src, "%s/k-f32.gguf", tmpdir);
    snprintf(dst, sizeof dst, "%s/k-q4_k_m.gguf", tmpdir);
    CHECK(write_k_model(src, n_layer) == 0);
    CHECKF(kiln_quantize(src, dst, "q4_k_m", 2) == KILN_OK, "%s", kiln_last_error());
    gguf_file *f;
    if (gguf_open(dst, &f)) snprintf(err, sizeof err, "%s", kiln_last_error());
    CHECK(f != NULL);
    if (!f) return;
    int ok = 1;
    for (int i = 0; i < gguf_n_tensors(f); i++) {
        const gguf_tensor *t = gguf_tensor_at(f, i);
        int want;
        int l = -1;
        sscanf(t->name, "blk.%d.", &l);
        if (t->n_dims == 1)
            want = QUANT_F32;
        else if (!strcmp(t->name, "output.weight"))
            want = QUANT_Q6_K;
        else if (strstr(t->name, "attn_v.weight") || strstr(t->name, "ffn_down.weight"))
            /* more bits in the first and last eighth and every third layer between */
            want = (l < n_layer / 8 || l >= 7 * n_layer / 8 || (l - n_layer / 8) % 3 == 2) ? QUANT_Q6_K : QUANT_Q4_K;
        else
            want = QUANT_Q4_K;
        if ((int)t->type != want) {
            ok = 0;
            fprintf(stderr, "%s: %s, want %s\n", t->name, quant_get((int)t->type)->name, quant_get(want)->name);
        }
    }
    CHECK(ok);
    CHECK(gguf_get_int(f, "general.file_type", 0) == 15);
    gguf_close(f);
    float ref[512], q[512];
    last_logits(src, ref);
    /* Every type end to end (quantizer, dot kernels, forward).  This random
     * 8-layer network has no outliers and amplifies rounding, so the bounds
     * sit a little under what was measured (q8_0 0.9996, q6_k 0.9978,
     * q5_k_m 0.9927, q4_k_m 0.9770, q4_0 0.9624, q3_k_m 0.8661, q2_k 0.6117,
     * iq4_xs 0.9680, iq3_s 0.8241); a broken kernel gives a cosine near 0. */
    static const struct {
        const char *type;
        double min_cos;
    } types[] = {
        {"q8_0", 0.999},  {"q6_k", 0.995},  {"q5_k_m", 0.985}, {"q4_k_m", 0.96}, {"q4_0", 0.95},  {"q3_k_m", 0.83},
        {"q2_k", 0.5},    {"iq4_xs", 0.95}, {"iq4_nl", 0.95},  {"q5_0", 0.985},  {"q5_1", 0.985}, {"q4_1", 0.95},
        {"f16", 0.99999}, {"bf16", 0.9999}, {"q3_k_l", 0.83},  {"iq3_s", 0.5},
    };
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
        snprintf(dst, sizeof dst, "%s/k-%s.gguf", tmpdir, types[i].type);
        CHECKF(kiln_quantize(src, dst, types[i].type, 2) == KILN_OK, "%s", kiln_last_error());
        last_logits(dst, q);
        double cs = cosine(ref, q, 512);
        CHECKF(cs >= types[i].min_cos, "%s: logits cosine %.5f < %.3f", types[i].type, cs, types[i].min_cos);
        printf("%-7s logits cosine to F32 %.5f (bound %.3f)\n", types[i].type, cs, types[i].min_cos);
    }
    CHECK(kiln_quantize(src, dst, "q9_9", 1) == KILN_ERR_INVALID_ARG);
    CHECK(strstr(kiln_last_error(), "q9_9") != NULL);
    /* the types llama.cpp writes only with an importance matrix: refused, saying so */
    static const char *const imx[] = {"iq2_xxs", "IQ2_XS", "iq2_s", "iq3_xxs"};
    for (int i = 0; i < 4; i++) {
        CHECK(kiln_quantize(src, dst, imx[i], 1) == KILN_ERR_UNSUPPORTED);
        CHECKF(strstr(kiln_last_error(), "importance matrix") != NULL, "%s: %s", imx[i], kiln_last_error());
    }
}

typedef struct seen {
    int n, fallbacks, ffn_down_f16;
    uint64_t in, out;
} seen;

static void on_tensor(const kiln_quantize_tensor *t, void *user) {
    seen *s = user;
    CHECK(t->index == s->n && t->count == 48);
    s->n++;
    s->in += t->bytes_in;
    s->out += t->bytes_out;
    if (!t->wanted) return;
    /* a fallback only where the wanted type's blocks do not divide the rows */
    s->fallbacks++;
    CHECKF(t->ne[0] % t->wanted_block != 0 && strcmp(t->wanted, t->type_out), "%s: %s -> %s", t->name, t->wanted,
           t->type_out);
    if (strstr(t->name, "ffn_down") && !strcmp(t->type_out, "F16") && t->ne[0] == 172) s->ffn_down_f16++;
}

/* Runs kiln with args (a shell fragment); stdout and stderr land in files
 * of tmpdir and are returned (freed by the caller). */
static int run_kiln(const char *args, char **out, char **err) {
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "KILN_STORE='%s/store' '%s' %s", tmpdir, getenv("KILN_BIN"), args);
    return t_run_capture(cmd, tmpdir, out, err);
}

static void test_in_out_and_report(void) {
    const char *stories = "../models/stories260K.gguf";
    char in[512], lnk[512], hard[512], out[512];
    snprintf(in, sizeof in, "%s/in.gguf", tmpdir);
    snprintf(lnk, sizeof lnk, "%s/link.gguf", tmpdir);
    snprintf(hard, sizeof hard, "%s/hard.gguf", tmpdir);
    snprintf(out, sizeof out, "%s/out.gguf", tmpdir);
    size_t len, len2;
    char *orig = t_read_file(stories, &len);
    FILE *f = fopen(in, "wb");
    CHECK(orig && f && fwrite(orig, 1, len, f) == len);
    if (f) fclose(f);
    CHECK(symlink(in, lnk) == 0 && link(in, hard) == 0);
    /* the same file by its path, a symlink or a hard link is refused and
     * left as it was */
    const char *same[] = {in, lnk, hard};
    for (int i = 0; i < 3; i++) {
        CHECKF(kiln_quantize(in, same[i], "q8_0", 1) == KILN_ERR_INVALID_ARG, "%s accepted as the output", same[i]);
        CHECKF(strstr(kiln_last_error(), "input file itself") != NULL, "%s", kiln_last_error());
    }
    char *now = t_read_file(in, &len2);
    CHECK(now && len2 == len && !memcmp(now, orig, len));
    free(now);
    /* stories' rows of 64 and 172 do not divide into Q4_K's 256: every
     * such tensor is reported with the type it got instead */
    seen s = {0};
    kiln_quantize_params p = kiln_quantize_default_params();
    p.n_threads = 1;
    p.on_tensor = on_tensor;
    p.user = &s;
    CHECKF(kiln_quantize_with(in, out, "q4_k_m", &p) == KILN_OK, "%s", kiln_last_error());
    CHECKF(s.n == 48 && s.fallbacks == 37 && s.ffn_down_f16 == 5, "%d tensors, %d fallbacks, %d ffn_down in F16", s.n,
           s.fallbacks, s.ffn_down_f16);
    /* the sizes reported are the tensor bytes of the two files */
    gguf_file *g;
    gguf_file *gi;
    gguf_open(out, &g);
    gguf_open(in, &gi);
    uint64_t bytes = 0, bytes_in = 0;
    for (int i = 0; g && i < gguf_n_tensors(g); i++) bytes += gguf_tensor_at(g, i)->nbytes;
    for (int i = 0; gi && i < gguf_n_tensors(gi); i++) bytes_in += gguf_tensor_at(gi, i)->nbytes;
    CHECKF(g && gi && bytes == s.out && s.in == bytes_in && s.out < s.in,
           "reported %llu -> %llu bytes, files %llu -> %llu", (unsigned long long)s.in, (unsigned long long)s.out,
           (unsigned long long)bytes_in, (unsigned long long)bytes);
    gguf_close(g);
    gguf_close(gi);
    free(orig);

    if (!getenv("KILN_BIN")) {
        printf("CLI cases skipped: KILN_BIN is not set\n");
        return;
    }
    /* the CLI: refused in == out, a summary, each fallback on stderr */
    char args[1400], *o = NULL, *e = NULL;
    snprintf(args, sizeof args, "quantize '%s' '%s' q8_0", in, lnk);
    CHECK(run_kiln(args, &o, &e) == 1 && e && strstr(e, "input file itself"));
    free(o);
    free(e);
    snprintf(args, sizeof args, "quantize '%s' '%s' q4_k_m", in, out);
    CHECK(run_kiln(args, &o, &e) == 0);
    CHECKF(o && strstr(o, "types: F32 48 -> ") && strstr(o, "Q8_0 32") && strstr(o, "F16 5") && strstr(o, "size:") &&
               strstr(o, "37 of 48 tensors fell back"),
           "summary: %s", o ? o : "");
    CHECKF(e && strstr(e, "blk.0.ffn_down.weight: rows of 172 are not a multiple of 256, which Q4_K needs: F16"),
           "fallback warnings: %s", e ? e : "");
    free(o);
    free(e);
    /* store names work for quantize and embed */
    snprintf(args, sizeof args,
             "import '%s' --name tiny --link && KILN_STORE='%s/store' '%s' import "
             "data/fixtures/bert-embed.gguf --name bert --link",
             stories, tmpdir, getenv("KILN_BIN"));
    CHECK(run_kiln(args, &o, &e) == 0);
    free(o);
    free(e);
    snprintf(args, sizeof args, "quantize tiny '%s' q8_0", out);
    CHECKF(run_kiln(args, &o, &e) == 0 && o && strstr(o, "quantized tiny"), "quantize by name: %s", e ? e : "");
    free(o);
    free(e);
    CHECK(run_kiln("embed -m bert 'a kiln'", &o, &e) == 0);
    CHECKF(o && strstr(o, "\"embedding\"") && strstr(o, "\"model\":\"bert\""), "embed by name: %s", e ? e : "");
    free(o);
    free(e);
    CHECK(run_kiln("embed -m nothing-here 'a kiln'", &o, &e) == 1 && e && strstr(e, "not a model in the store"));
    free(o);
    free(e);
}

/* Q3_K_L as llama.cpp mixes it: attn_v, ffn_down and attn_output Q5_K in
 * every layer, the output projection Q6_K, the rest Q3_K. */
typedef struct mix_seen {
    int n, bad;
} mix_seen;

static void q3_k_l_rule(const kiln_quantize_tensor *t, void *user) {
    mix_seen *m = user;
    const char *want = "Q3_K";
    if (t->n_dims < 2 || strstr(t->name, "norm"))
        want = "F32";
    else if (!strcmp(t->name, "output.weight")) /* the model has its own; token_embd is an ordinary weight */
        want = "Q6_K";
    else if (strstr(t->name, "attn_v.weight") || strstr(t->name, "ffn_down") || strstr(t->name, "attn_output.weight"))
        want = "Q5_K";
    m->n++;
    if (strcmp(t->type_out, want)) {
        m->bad++;
        fprintf(stderr, "q3_k_l rule: %s got %s, want %s\n", t->name, t->type_out, want);
    }
}

/* A file already quantized is quantized again only when asked (as
 * llama-quantize's --allow-requantize); back to a float type it may be. */
static void test_q3_k_l_and_requantize(void) {
    char src[512], q4[512], dst[512];
    snprintf(src, sizeof src, "%s/k-f32.gguf", tmpdir);
    snprintf(q4, sizeof q4, "%s/k-q4_k_m.gguf", tmpdir);
    snprintf(dst, sizeof dst, "%s/k-again.gguf", tmpdir);
    mix_seen m = {0, 0};
    kiln_quantize_params p = kiln_quantize_default_params();
    p.n_threads = 2;
    p.on_tensor = q3_k_l_rule;
    p.user = &m;
    CHECKF(kiln_quantize_with(src, dst, "q3_k_l", &p) == KILN_OK, "%s", kiln_last_error());
    CHECKF(m.n > 20 && m.bad == 0, "q3_k_l: %d of %d tensors against llama.cpp's rules", m.bad, m.n);
    CHECK(kiln_quantize(q4, dst, "q8_0", 1) == KILN_ERR_INVALID_ARG);
    CHECKF(strstr(kiln_last_error(), "already quantized") && strstr(kiln_last_error(), "Q4_K"), "%s",
           kiln_last_error());
    kiln_quantize_params r = kiln_quantize_default_params();
    r.allow_requantize = 1;
    CHECKF(kiln_quantize_with(q4, dst, "q8_0", &r) == KILN_OK, "%s", kiln_last_error());
    CHECKF(kiln_quantize(q4, dst, "f16", 1) == KILN_OK, "%s", kiln_last_error());
    char args[1200], *out = NULL, *err = NULL;
    snprintf(args, sizeof args, "quantize '%s' '%s' q8_0", q4, dst);
    CHECK(run_kiln(args, &out, &err) == 1 && err && strstr(err, "--allow-requantize"));
    free(out);
    free(err);
    snprintf(args, sizeof args, "quantize '%s' '%s' q8_0 --allow-requantize", q4, dst);
    CHECK(run_kiln(args, &out, &err) == 0 && out && strstr(out, "Q8_0"));
    free(out);
    free(err);
}

int main(void) {
    if (!mkdtemp(tmpdir)) return 1;
    test_in_out_and_report();
    compare_with_fixture("q8_0", "data/fixtures/llama-q8_0.gguf");
    compare_with_fixture("q4_0", "data/fixtures/llama-q4_0.gguf");
    test_k_mix();
    test_q3_k_l_and_requantize();
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmpdir);
    return t_done();
}
