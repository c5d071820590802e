/* Image input: the mmproj reader, the Gemma 3 encoder and projector against
 * the PyTorch reference of tests/gen_vision.py, hostile projector files,
 * prompts with images, and the text model reading image rows. */
#include "testutil.h"
#include "vision_pack.h"

#include "kiln.h"

#include "base/base.h"
#include "gen/gen.h"
#include "model/model.h"
#include "quant/quant.h"
#include "vision/vision.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define DIR "data/vision/"
#define TEXT DIR "gemma3-text.gguf"
#define MMPROJ DIR "gemma3-mmproj.gguf"
#define MMPROJ_Q8 DIR "gemma3-mmproj-q8_0.gguf" /* tests/gen_vision_quant.py */

/* The reference's rows and kiln's agree to this (absolute; the rows reach
 * about 3.7, the reference's own float32 vs float64 gap is under 1e-6). */
#define EMBD_TOL 2e-4

static uint8_t *g_png;
static size_t g_png_len;
static uint8_t *g_px;
static int g_w, g_h;

/* gen_vision.py's image_pixels */
static int pixels_match(const uint8_t *px, int w, int h) {
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++) {
            const uint8_t *p = px + ((size_t)y * w + x) * 3;
            if (p[0] != (x * 255) / (w - 1) || p[1] != (y * 255) / (h - 1) ||
                p[2] != (((x / 8 + y / 8) % 2) ? 200 : 30))
                return 0;
        }
    return 1;
}

static void test_encode(void) {
    vision_model *vm = NULL;
    kiln_status st = vision_load(MMPROJ, 64, &vm);
    CHECKF(st == KILN_OK, "%s", kiln_last_error());
    if (!vm) return;
    CHECK(!strcmp(vm->proj->type, "gemma3"));
    CHECK(vm->hp.n_merge == 2 && vm->hp.image_size == 32 && vm->hp.patch_size == 4);
    const vision_image im = {g_w, g_h, g_px};
    const int nt = vision_n_tokens(vm, &im);
    CHECK(nt == 16);
    size_t len = 0;
    float *ref = (float *)t_read_file(DIR "gemma3-embd.bin", &len);
    CHECK(ref && len == (size_t)nt * 64 * sizeof(float));
    float *out = calloc((size_t)nt * 64, sizeof(float));
    st = vision_encode(vm, NULL, &im, out);
    CHECKF(st == KILN_OK, "%s", kiln_last_error());
    if (ref && len == (size_t)nt * 64 * sizeof(float)) {
        const double d = t_max_diff(out, ref, nt * 64);
        CHECKF(d < EMBD_TOL, "embeddings differ from the reference by %g", d);
        printf("gemma3 projector: %d rows, max |kiln - reference| %.3g\n", nt, d);
    }
    /* the same image again: the same bits (no state kept between images) */
    float *again = calloc((size_t)nt * 64, sizeof(float));
    vision_encode(vm, NULL, &im, again);
    CHECK(!memcmp(out, again, (size_t)nt * 64 * sizeof(float)));
    /* a bad image */
    const vision_image bad = {0, 5, g_px};
    CHECK(vision_encode(vm, NULL, &bad, out) == KILN_ERR_INVALID_ARG);
    free(again);
    free(out);
    free(ref);
    vision_free(vm);
}

/* The Q8_0 copy of the projector (the ViT's matrices Q8_0, the projection
 * F16, as llama.cpp's converter writes one): it runs through the quantized
 * matmul, its rows near the F32 reference's and not the same bits. */
static void test_encode_q8_0(void) {
    vision_model *vm = NULL;
    kiln_status st = vision_load(MMPROJ_Q8, 64, &vm);
    CHECKF(st == KILN_OK, "%s", kiln_last_error());
    if (!vm) return;
    CHECK(vm->layers[0].wq.type == QUANT_Q8_0 && vm->layers[0].down.type == QUANT_Q8_0);
    const vision_image im = {g_w, g_h, g_px};
    const int nt = vision_n_tokens(vm, &im);
    size_t len = 0;
    float *ref = (float *)t_read_file(DIR "gemma3-embd.bin", &len);
    float *out = calloc((size_t)nt * 64, sizeof(float));
    CHECK(out && vision_encode(vm, NULL, &im, out) == KILN_OK);
    if (out && ref && len == (size_t)nt * 64 * sizeof(float)) {
        const double d = t_max_diff(out, ref, nt * 64);
        CHECKF(d > 0 && d < 0.1, "Q8_0 embeddings differ from the F32 reference by %g", d);
        printf("gemma3 projector, Q8_0: max |kiln - F32 reference| %.3g\n", d);
    }
    free(out);
    free(ref);
    vision_free(vm);
}

static void test_hostile(void) {
    vision_model *vm = NULL;
    /* a projector for another text width */
    CHECK(vision_load(MMPROJ, 48, &vm) == KILN_ERR_FORMAT && !vm);
    CHECKF(strstr(kiln_last_error(), "64-wide"), "%s", kiln_last_error());
    /* a text model is no projector */
    CHECK(vision_load(TEXT, 64, &vm) == KILN_ERR_FORMAT && !vm);
    CHECKF(strstr(kiln_last_error(), "not a vision projector"), "%s", kiln_last_error());
    CHECK(vision_load(DIR "missing.gguf", 64, &vm) != KILN_OK && !vm);
    /* every truncation of the file fails cleanly */
    size_t len = 0;
    char *buf = t_read_file(MMPROJ, &len);
    CHECK(buf != NULL);
    char tmpl[] = "/tmp/kiln_vision_XXXXXX";
    char *dir = mkdtemp(tmpl);
    CHECK(dir != NULL);
    if (!buf || !dir) return;
    char path[256];
    snprintf(path, sizeof path, "%s/p.gguf", dir);
    const size_t cuts[] = {0, 3, 24, 100, 600, 2000, len / 2, len - 1};
    for (size_t i = 0; i < sizeof cuts / sizeof cuts[0]; i++) {
        FILE *f = fopen(path, "wb");
        fwrite(buf, 1, cuts[i], f);
        fclose(f);
        CHECKF(vision_load(path, 64, &vm) != KILN_OK && !vm, "a file cut at %zu loaded", cuts[i]);
    }
    /* an unknown projector type and a patch size that does not divide the
     * image: the same length, so the tensor offsets stay valid */
    struct {
        const char *from, *to;
        kiln_status want;
    } edits[] = {
        {"\x06\0\0\0\0\0\0\0gemma3", "\x06\0\0\0\0\0\0\0gemmaX", KILN_ERR_UNSUPPORTED},
    };
    for (size_t e = 0; e < sizeof edits / sizeof edits[0]; e++) {
        char *copy = malloc(len);
        memcpy(copy, buf, len);
        const size_t fl = 14; /* the u64 length and six letters */
        for (size_t i = 0; i + fl <= len; i++)
            if (!memcmp(copy + i, edits[e].from, fl)) {
                memcpy(copy + i, edits[e].to, fl);
                break;
            }
        FILE *f = fopen(path, "wb");
        fwrite(copy, 1, len, f);
        fclose(f);
        free(copy);
        CHECKF(vision_load(path, 64, &vm) == edits[e].want && !vm, "edit %zu: %s", e, kiln_last_error());
    }
    unlink(path);
    rmdir(dir);
    free(buf);
}

/* Logits of the last token after feeding vp's tokens in batches ending
 * where splits says (0: the end). */
static int run_prompt(kiln_model *m, const vision_prompt *vp, const int *splits, float *logits, int n_vocab) {
    kiln_context_params cp = kiln_context_default_params();
    cp.n_ctx = 256;
    cp.n_threads = 2;
    kiln_context *c = NULL;
    if (kiln_context_new(m, &cp, &c) != KILN_OK) return -1;
    int at = 0, row = 0, rc = 0, n = 0;
    for (int s = 0; at < vp->n_tok; s++) {
        n = splits[s] ? splits[s] - at : vp->n_tok - at;
        float *embd = calloc((size_t)n * vp->n_embd, sizeof(float));
        for (int i = 0; i < n; i++)
            if (vp->tok[at + i] < 0)
                memcpy(embd + (size_t)i * vp->n_embd, vp->embd + (size_t)row++ * vp->n_embd,
                       (size_t)vp->n_embd * sizeof(float));
        const kiln_batch b = {n, vp->tok + at, NULL, NULL, NULL};
        const kiln_batch_inputs in = {embd, NULL};
        if (kiln_decode_inputs(c, &b, &in) != KILN_OK) rc = -1;
        free(embd);
        at += n;
        if (rc) break;
    }
    if (!rc) memcpy(logits, kiln_get_logits(c, n - 1), (size_t)n_vocab * sizeof(float));
    kiln_context_free(c);
    return rc;
}

static void test_prompt(void) {
    kiln_model_params mp = kiln_model_default_params();
    kiln_model *plain = NULL, *m = NULL;
    CHECK(kiln_model_load(TEXT, &mp, &plain) == KILN_OK);
    CHECK(plain && !kiln_model_has_vision(plain));
    mp.mmproj = MMPROJ;
    kiln_status st = kiln_model_load(TEXT, &mp, &m);
    CHECKF(st == KILN_OK, "%s", kiln_last_error());
    if (!m || !plain) return;
    CHECK(kiln_model_has_vision(m));
    const kiln_image_input img = {g_px, (size_t)g_w * g_h * 3, g_w, g_h};
    const char *text = "<start_of_turn>user\nWhat is in " VISION_MARKER " here?<end_of_turn>\n<start_of_turn>model\n";
    vision_prompt vp;
    /* a model without a projector refuses images */
    CHECK(model_image_prompt(plain, text, strlen(text), 1, 1, &img, 1, &vp) == KILN_ERR_UNSUPPORTED);
    CHECKF(strstr(kiln_last_error(), "does not take images"), "%s", kiln_last_error());
    /* markers and images must agree */
    CHECK(model_image_prompt(m, text, strlen(text), 1, 1, &img, 0, &vp) == KILN_ERR_INVALID_ARG);
    const kiln_image_input two[2] = {img, img};
    CHECK(model_image_prompt(m, text, strlen(text), 1, 1, two, 2, &vp) == KILN_ERR_INVALID_ARG);
    /* raw pixels of the wrong length, a damaged file, an empty one */
    const kiln_image_input short_raw = {g_px, (size_t)g_w * g_h * 3 - 1, g_w, g_h};
    CHECK(model_image_prompt(m, text, strlen(text), 1, 1, &short_raw, 1, &vp) == KILN_ERR_INVALID_ARG);
    const kiln_image_input cut_png = {g_png, g_png_len / 2, 0, 0}, empty = {g_png, 0, 0, 0};
    CHECK(model_image_prompt(m, text, strlen(text), 1, 1, &cut_png, 1, &vp) == KILN_ERR_INVALID_ARG);
    CHECK(model_image_prompt(m, text, strlen(text), 1, 1, &empty, 1, &vp) == KILN_ERR_INVALID_ARG);
    st = model_image_prompt(m, text, strlen(text), 1, 1, &img, 1, &vp);
    CHECKF(st == KILN_OK, "%s", kiln_last_error());
    if (st) return;
    CHECK(vp.n_rows == 16 && vp.n_embd == 64);
    int first = -1, n_neg = 0;
    for (int i = 0; i < vp.n_tok; i++)
        if (vp.tok[i] < 0) {
            if (first < 0) first = i;
            n_neg++;
        }
    CHECK(n_neg == 16 && first > 1);
    CHECK(vp.tok[0] == kiln_token_bos(m));
    int32_t soi = -1, eoi = -1;
    kiln_tokenize(m, "<start_of_image>", 16, 0, 1, &soi, 1);
    kiln_tokenize(m, "<end_of_image>", 14, 0, 1, &eoi, 1);
    CHECK(first > 0 && vp.tok[first - 1] == soi && vp.tok[first + 16] == eoi);
    /* the same image gives the same ids; another image other ids */
    vision_prompt v2;
    CHECK(model_image_prompt(m, text, strlen(text), 1, 1, &img, 1, &v2) == KILN_OK);
    CHECK(v2.n_tok == vp.n_tok && !memcmp(v2.tok, vp.tok, (size_t)vp.n_tok * sizeof *vp.tok));
    /* (its rows from the projector's cache, the same bits) */
    CHECK(v2.n_rows == vp.n_rows && !memcmp(v2.embd, vp.embd, (size_t)vp.n_rows * vp.n_embd * sizeof(float)));
    vision_prompt_free(&v2);
    uint8_t *px2 = malloc((size_t)g_w * g_h * 3);
    memcpy(px2, g_px, (size_t)g_w * g_h * 3);
    px2[0] ^= 1;
    const kiln_image_input img2 = {px2, (size_t)g_w * g_h * 3, g_w, g_h};
    CHECK(model_image_prompt(m, text, strlen(text), 1, 1, &img2, 1, &v2) == KILN_OK);
    CHECK(v2.tok[first] != vp.tok[first]);
    CHECK(memcmp(v2.embd, vp.embd, (size_t)vp.n_rows * vp.n_embd * sizeof(float)) != 0);
    vision_prompt_free(&v2);
    free(px2);
    /* no marker: the image goes first, after BOS */
    CHECK(model_image_prompt(m, "Hi", 2, 1, 1, &img, 1, &v2) == KILN_OK);
    CHECK(v2.n_tok > 18 && v2.tok[0] == kiln_token_bos(m) && v2.tok[1] == soi && v2.tok[2] < 0);
    vision_prompt_free(&v2);

    /* the forward: one batch, or the text before the image apart; the image
     * split across batches computes something else (its first half would not
     * see its second) */
    kiln_model_info info;
    kiln_model_get_info(m, &info);
    float *a = calloc((size_t)info.n_vocab, sizeof(float)), *b = calloc((size_t)info.n_vocab, sizeof(float));
    const int one[] = {0};
    const int before[] = {first, 0};
    const int mid[] = {first + 8, 0};
    CHECK(run_prompt(m, &vp, one, a, info.n_vocab) == 0);
    CHECK(run_prompt(m, &vp, before, b, info.n_vocab) == 0);
    CHECKF(t_max_diff(a, b, info.n_vocab) < 1e-4, "split before the image: %g", t_max_diff(a, b, info.n_vocab));
    CHECK(run_prompt(m, &vp, mid, b, info.n_vocab) == 0);
    CHECKF(t_max_diff(a, b, info.n_vocab) > 1e-3, "the image attends both ways");
    /* image tokens without rows, and on a model without image input */
    {
        kiln_context *c = NULL;
        CHECK(kiln_context_new(m, NULL, &c) == KILN_OK);
        const kiln_batch bb = {vp.n_tok, vp.tok, NULL, NULL, NULL};
        CHECK(kiln_decode(c, &bb) == KILN_ERR_INVALID_ARG);
        kiln_context_free(c);
    }
    free(a);
    free(b);
    vision_prompt_free(&vp);
    kiln_model_free(m);
    kiln_model_free(plain);
    /* a projector for another width fails the load with one line */
    mp.mmproj = DIR "missing.gguf";
    CHECK(kiln_model_load(TEXT, &mp, &m) != KILN_OK && !m);
}

/* ---- every allocation of a projector load and a prompt build failing ---- */

static void test_fault(void) {
    kiln_model_params mp = kiln_model_default_params();
    mp.mmproj = MMPROJ;
    const kiln_image_input img = {g_png, g_png_len, 0, 0};
    const char *text = "<start_of_turn>user\n" VISION_MARKER "Hi<end_of_turn>\n";
    long n_fail = 0;
    for (long n = 1; n < 4000; n++) {
        kiln_model *m = NULL;
        vision_prompt vp;
        base_fault_arm(n);
        kiln_status st = kiln_model_load(TEXT, &mp, &m);
        if (st == KILN_OK) st = model_image_prompt(m, text, strlen(text), 1, 1, &img, 1, &vp);
        const int fired = base_fault_fired();
        base_fault_arm(0);
        if (st == KILN_OK) vision_prompt_free(&vp);
        kiln_model_free(m);
        if (!fired) {
            CHECKF(st == KILN_OK, "with no failed allocation: %s", kiln_last_error());
            break;
        }
        n_fail++;
        CHECKF(st != KILN_OK, "allocation %ld failed, yet the call succeeded", n);
    }
    CHECK(n_fail > 5);
    printf("projector load and prompt: %ld allocations failed one at a time\n", n_fail);
}

/* ---- gen: prompt chunks never split an image ---- */

typedef struct gen_out {
    int32_t tok[16];
    int n;
} gen_out;

static int on_gen(void *user, const gen_event *ev, const float *logits) {
    (void)logits;
    gen_out *o = user;
    if (ev->kind == GEN_EV_TOKEN && o->n < 16) o->tok[o->n++] = ev->tok.id;
    return 0;
}

/* Greedy tokens of vp with prompt chunks of chunk tokens in a batch of
 * n_batch; the add's status into *st. */
static gen_out gen_run(kiln_model *m, const vision_prompt *vp, int chunk, int n_batch, kiln_status *st) {
    gen_out o = {{0}, 0};
    kiln_context_params cp = kiln_context_default_params();
    cp.n_ctx = 256;
    cp.n_batch = n_batch;
    cp.n_threads = 2;
    kiln_context *c = NULL;
    gen_batch *b = NULL;
    *st = kiln_context_new(m, &cp, &c);
    if (*st == KILN_OK) *st = gen_batch_new(m, c, chunk, &b);
    gen_params p = gen_params_default();
    p.prompt = vp->tok;
    p.n_prompt = vp->n_tok;
    p.embd = vp->embd;
    p.n_embd_rows = vp->n_rows;
    p.n_predict = 8;
    p.sampler.temperature = 0;
    p.on_event = on_gen;
    p.user = &o;
    if (*st == KILN_OK) *st = gen_batch_add(b, &p, 0, NULL);
    while (*st == KILN_OK && gen_batch_n_active(b) > 0) gen_batch_step(b);
    gen_batch_free(b);
    kiln_context_free(c);
    return o;
}

static void test_gen(void) {
    kiln_model_params mp = kiln_model_default_params();
    mp.mmproj = MMPROJ;
    kiln_model *m = NULL;
    CHECK(kiln_model_load(TEXT, &mp, &m) == KILN_OK);
    if (!m) return;
    const kiln_image_input img = {g_png, g_png_len, 0, 0};
    const char *text = "<start_of_turn>user\n" VISION_MARKER "Describe this image.<end_of_turn>\n";
    vision_prompt vp;
    CHECK(model_image_prompt(m, text, strlen(text), 1, 1, &img, 1, &vp) == KILN_OK);
    kiln_status st;
    const gen_out whole = gen_run(m, &vp, 0, 512, &st);
    CHECK(st == KILN_OK && whole.n == 8);
    /* chunks of 5 (and 7) would cut the image: it goes whole in a step */
    for (int chunk = 5; chunk <= 7; chunk += 2) {
        const gen_out part = gen_run(m, &vp, chunk, 512, &st);
        CHECKF(st == KILN_OK && part.n == whole.n && !memcmp(part.tok, whole.tok, sizeof whole.tok), "chunk %d", chunk);
    }
    /* a batch smaller than the image cannot take it */
    gen_run(m, &vp, 0, 8, &st);
    CHECK(st == KILN_ERR_INVALID_ARG);
    CHECKF(strstr(kiln_last_error(), "does not fit a batch"), "%s", kiln_last_error());
    vision_prompt_free(&vp);
    kiln_model_free(m);
}

/* ---- the engine and the command line ---- */

#define CHAT_PROMPT "<start_of_turn>user\n" VISION_MARKER "Describe this image.<end_of_turn>\n<start_of_turn>model\n"

/* The engine's llm family: a pack's mmproj companion, a request with an
 * image, and the greedy text (into out). */
static void test_engine(char *out, size_t cap) {
    vision_pack pk;
    CHECK(vision_pack_make(&pk, "/tmp/kiln_vision_pack_XXXXXX", TEXT, MMPROJ) == 0);
    kiln_context_params cp;
    kiln_engine *e = vision_engine(pk.model, &cp);
    CHECKF(e != NULL, "%s", kiln_last_error());
    if (!e) {
        vision_pack_remove(&pk);
        return;
    }
    const kiln_image_input img = {g_png, g_png_len, 0, 0};
    kiln_engine_generate_request q = kiln_engine_generate_default();
    q.prompt = CHAT_PROMPT;
    q.n_predict = 12;
    q.sampler.temperature = 0;
    q.images = &img;
    q.n_images = 1;
    text_buf t = {{0}, 0};
    q.on_token = on_piece;
    q.user = &t;
    int32_t n_gen = 0;
    kiln_status st = kiln_engine_generate(e, &q, &n_gen);
    CHECKF(st == KILN_OK && n_gen > 0, "%s", kiln_last_error());
    snprintf(out, cap, "%s", t.s);
    /* the same request again: the prefix cache holds the image's blocks */
    text_buf t2 = {{0}, 0};
    q.user = &t2;
    CHECK(kiln_engine_generate(e, &q, NULL) == KILN_OK && !strcmp(t.s, t2.s));
    /* a marker without an image */
    q.n_images = 0;
    CHECK(kiln_engine_generate(e, &q, NULL) == KILN_ERR_INVALID_ARG);
    kiln_engine_free(e);
    vision_pack_remove(&pk);
    /* a model without a projector refuses images with one line */
    e = vision_engine(TEXT, &cp);
    CHECK(e != NULL);
    if (!e) return;
    q.n_images = 1;
    CHECK(kiln_engine_generate(e, &q, NULL) == KILN_ERR_UNSUPPORTED);
    CHECKF(strstr(kiln_last_error(), "does not take images"), "%s", kiln_last_error());
    kiln_engine_free(e);
}

/* kiln run --image gives the engine's text, and llama-mtmd-cli's as
 * recorded in gemma3-mtmd.txt (its generated bytes for the same files). */
static void test_cli(const char *engine_text) {
    const char *bin = getenv("KILN_BIN");
    if (!bin) {
        printf("KILN_BIN is not set: the command line is not tested\n");
        return;
    }
    char tmpl[] = "/tmp/kiln_vision_cli_XXXXXX";
    char *dir = mkdtemp(tmpl);
    CHECK(dir != NULL);
    if (!dir) return;
    char cmd[2048], *out = NULL, *err = NULL;
    snprintf(cmd, sizeof cmd,
             "%s run -m " TEXT " --mmproj " MMPROJ " --image " DIR "image.png -n 12 --temp 0 -t 2 -c 256 -e -p "
             "'<start_of_turn>user\\n<__media__>Describe this image.<end_of_turn>\\n<start_of_turn>model\\n'",
             bin);
    int rc = t_run_capture(cmd, dir, &out, &err);
    CHECKF(rc == 0, "%s", err ? err : "");
    CHECKF(out && !strcmp(out, engine_text), "kiln run: \"%s\", the engine: \"%s\"", out ? out : "", engine_text);
    /* llama-mtmd-cli's generated bytes for the same files, prompt and image */
    size_t jl = 0;
    char *json = t_read_file(DIR "gemma3-mtmd.txt", &jl);
    CHECK(json != NULL);
    CHECKF(json && out && !strcmp(out, json), "kiln run: \"%s\", llama-mtmd-cli: \"%s\"", out ? out : "",
           json ? json : "");
    free(json);
    free(out);
    free(err);
    /* the Q8_0 projector: llama-mtmd-cli's bytes for the same command with it */
    snprintf(cmd, sizeof cmd,
             "%s run -m " TEXT " --mmproj " MMPROJ_Q8 " --image " DIR "image.png -n 12 --temp 0 -t 2 -c 256 -e -p "
             "'<start_of_turn>user\\n<__media__>Describe this image.<end_of_turn>\\n<start_of_turn>model\\n'",
             bin);
    out = err = NULL;
    rc = t_run_capture(cmd, dir, &out, &err);
    json = t_read_file(DIR "gemma3-q8_0-mtmd.txt", &jl);
    CHECKF(rc == 0 && json && out && !strcmp(out, json), "kiln run, Q8_0 mmproj: \"%s\", llama-mtmd-cli: \"%s\" (%s)",
           out ? out : "", json ? json : "", err ? err : "");
    free(json);
    free(out);
    free(err);
    /* kiln chat: /image, then the message, rendered by the model's template */
    snprintf(cmd, sizeof cmd,
             "printf '/image " DIR "image.png\\nDescribe this image.\\n' | %s chat -m " TEXT " --mmproj " MMPROJ
             " -n 12 --temp 0 -t 2 -c 256",
             bin);
    char *cout = NULL, *cerr = NULL;
    rc = t_run_capture(cmd, dir, &cout, &cerr);
    CHECKF(rc == 0 && cout && strstr(cout, engine_text) == cout, "kiln chat: \"%s\" (%s)", cout ? cout : "",
           cerr ? cerr : "");
    free(cout);
    free(cerr);
    /* a model without a projector: one line, exit 1 */
    snprintf(cmd, sizeof cmd, "%s run -m " TEXT " --image " DIR "image.png -n 4 -p hi", bin);
    out = err = NULL;
    rc = t_run_capture(cmd, dir, &out, &err);
    CHECKF(rc == 1 && err && strstr(err, "does not take images") && !strchr(strchr(err, '\n') + 1, '\n'), "%s",
           err ? err : "");
    free(out);
    free(err);
    char p[600];
    snprintf(p, sizeof p, "%s/out.txt", dir);
    unlink(p);
    snprintf(p, sizeof p, "%s/err.txt", dir);
    unlink(p);
    rmdir(dir);
}

int main(void) {
    g_png = (uint8_t *)t_read_file(DIR "image.png", &g_png_len);
    CHECK(g_png != NULL);
    if (!g_png) return t_done();
    g_px = t_png_pixels(g_png, g_png_len, &g_w, &g_h);
    CHECK(g_px && g_w == 40 && g_h == 30 && pixels_match(g_px, g_w, g_h));
    if (!g_px) return t_done();
    test_encode();
    test_encode_q8_0();
    test_hostile();
    test_prompt();
    test_gen();
    test_fault();
    char text[4096] = "";
    test_engine(text, sizeof text);
    printf("greedy text after the image: \"%s\"\n", text);
    test_cli(text);
    free(g_px);
    free(g_png);
    return t_done();
}
