/*
 * The Qwen-VL vision encoders (src/vision/qwen.c: Qwen2-VL, Qwen2.5-VL,
 * Qwen3-VL) against tests/gen_vision_qwen.py --vision's float64 PyTorch
 * references: tiny random-weight mmproj files and one 168 x 140 PNG (6 x 5
 * merged tokens; Qwen2.5-VL's windowed and full-attention layers, Qwen3-VL's
 * learned positions and deepstack rows), every output within 1e-3 of the
 * largest reference value (F32 weights; the tolerance covers float32 sums
 * and the tanh GELU's exponential), the same bits on one thread or two.
 * Also the resize rule (smart resize to multiples of 28 within 8..4096
 * merged tokens) on a few sizes, a resized image, and bad sizes.
 */
#include "vision/qwen.h"

#include "vision/decode.h"
#include "vision/vision.h"

#include "gguf/gguf.h"
#include "model/model.h"
#include "testutil.h"
#include "vision_pack.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static unsigned char *read_all(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = n > 0 ? malloc((size_t)n) : NULL;
    if (b && fread(b, 1, (size_t)n, f) != (size_t)n) {
        free(b);
        b = NULL;
    }
    fclose(f);
    *len = b ? (size_t)n : 0;
    return b;
}

/* One projector's case (data/vision/<name>-embd.json); 0 when it ran. */
static int encode_case(const char *name, thread_pool *pool) {
    json_error_t je;
    char path[256], err[256];
    snprintf(path, sizeof path, "data/vision/%s-embd.json", name);
    json_t *j = json_load_file(path, 0, &je);
    CHECKF(j != NULL, "%s: %s", path, je.text);
    if (!j) return -1;
    snprintf(path, sizeof path, "data/vision/%s", json_string_value(json_object_get(j, "mmproj")));
    gguf_file *f;
    if (gguf_open(path, &f)) snprintf(err, sizeof err, "%s", kiln_last_error());
    CHECKF(f != NULL, "%s: %s", path, err);
    vision_qwen *q = NULL;
    CHECKF(f && vision_qwen_load(f, &q) == KILN_OK, "%s", kiln_last_error());
    size_t len;
    snprintf(path, sizeof path, "data/vision/%s", json_string_value(json_object_get(j, "image_png")));
    unsigned char *png = read_all(path, &len);
    vision_rgb im = {0};
    CHECK(png && vision_decode(png, len, &im) == KILN_OK);
    free(png);
    const int W = (int)json_integer_value(json_object_get(j, "width")),
              H = (int)json_integer_value(json_object_get(j, "height"));
    const int NX = (int)json_integer_value(json_object_get(j, "nx")),
              NY = (int)json_integer_value(json_object_get(j, "ny"));
    const int NE = q ? vision_qwen_n_embd(q) : 0;
    int rw, rh, nx, ny;
    CHECK(q && NE == (int)json_integer_value(json_object_get(j, "n_embd")) && im.w == W && im.h == H);
    CHECK(q && vision_qwen_grid(q, W, H, &rw, &rh, &nx, &ny) == 0 && rw == W && rh == H && nx == NX && ny == NY);
    json_t *ej = json_object_get(j, "embeddings");
    CHECK((int)json_array_size(ej) == NX * NY);
    float *out = malloc((size_t)NX * NY * NE * sizeof(float)), *out1 = malloc((size_t)NX * NY * NE * sizeof(float));
    CHECKF(q && im.px && vision_qwen_encode(q, pool, im.px, W, H, out) == KILN_OK, "%s", kiln_last_error());
    double scale = 0, d = 0;
    for (int t = 0; q && t < NX * NY; t++)
        for (int e = 0; e < NE; e++) {
            const double r = json_real_value(json_array_get(json_array_get(ej, (size_t)t), (size_t)e));
            if (fabs(r) > scale) scale = fabs(r);
            if (fabs(r - out[(size_t)t * NE + e]) > d) d = fabs(r - out[(size_t)t * NE + e]);
        }
    CHECKF(d <= 1e-3 * scale, "%s: embeddings off the reference by %g (largest %g)", name, d, scale);
    printf("%-10s %s: %d x %d tokens of %d, max diff %.3g of %.3g\n", name,
           json_string_value(json_object_get(j, "projector")), NX, NY, NE, d, scale);
    CHECK(q && vision_qwen_encode(q, NULL, im.px, W, H, out1) == KILN_OK);
    CHECK(memcmp(out, out1, (size_t)NX * NY * NE * sizeof(float)) == 0);
    free(out);
    free(out1);
    vision_rgb_free(&im);
    vision_qwen_free(q);
    if (f) gguf_close(f);
    json_decref(j);
    return 0;
}

/* The prompt of the end-to-end case: chatml as llama-mtmd-cli's
 * --chat-template chatml renders "Describe this image." with the image. */
#define QPROMPT "<|im_start|>user\n" VISION_MARKER "Describe this image.<|im_end|>\n<|im_start|>assistant\n"

/* qwen2vl-f32 text + the Qwen2.5-VL mmproj, end to end: the prompt through
 * vision_prompt_build (image rows and M-RoPE rows), one batch, 12 greedy
 * tokens; kiln run --image prints the same text, and llama-mtmd-cli's
 * recorded output (qwen25vl-mtmd.txt) when present. */
static void end_to_end(char *api_text, size_t cap) {
    kiln_model_params mp = kiln_model_default_params();
    mp.mmproj = "data/vision/qwen25vl-mmproj-f32.gguf";
    kiln_model *m = NULL;
    CHECKF(kiln_model_load("data/vision/qwen2vl-f32.gguf", &mp, &m) == KILN_OK, "%s", kiln_last_error());
    if (!m) return;
    CHECK(kiln_model_has_vision(m));
    size_t len;
    unsigned char *png = read_all("data/vision/qwen25vl-image.png", &len);
    const kiln_image_input img = {png, len, 0, 0};
    vision_prompt vp;
    CHECKF(png && model_image_prompt(m, QPROMPT, strlen(QPROMPT), 1, 1, &img, 1, &vp) == KILN_OK, "%s",
           kiln_last_error());
    CHECK(vp.n_rows == 30 && vp.mpos != NULL && vp.n_embd == 64);
    kiln_model_info info;
    kiln_model_get_info(m, &info);
    kiln_context_params cp = kiln_context_default_params();
    cp.n_ctx = 256;
    cp.n_threads = 2;
    kiln_context *c = NULL;
    CHECK(kiln_context_new(m, &cp, &c) == KILN_OK);
    float *rows = calloc((size_t)vp.n_tok * vp.n_embd, sizeof(float));
    for (int i = 0, k = 0; i < vp.n_tok; i++)
        if (vp.tok[i] < 0)
            memcpy(rows + (size_t)i * vp.n_embd, vp.embd + (size_t)k++ * vp.n_embd, (size_t)vp.n_embd * 4);
    kiln_batch b = {vp.n_tok, vp.tok, NULL, NULL, NULL};
    CHECKF(c && kiln_decode_inputs(c, &b, &(kiln_batch_inputs){rows, vp.mpos}) == KILN_OK, "%s", kiln_last_error());
    char text[512];
    size_t tl = 0;
    kiln_detok *d = kiln_detok_new(m);
    const float *lg = c ? kiln_get_logits(c, vp.n_tok - 1) : NULL;
    for (int s = 0; lg && s < 12; s++) {
        int32_t t = 0;
        for (int v = 1; v < info.n_vocab; v++)
            if (lg[v] > lg[t]) t = v;
        if (kiln_token_is_eog(m, t)) break;
        size_t pl;
        const char *p = kiln_detok_push(d, t, &pl);
        if (tl + pl < sizeof text) memcpy(text + tl, p, pl), tl += pl;
        kiln_batch b1 = {1, &t, NULL, NULL, NULL};
        lg = kiln_decode(c, &b1) == KILN_OK ? kiln_get_logits(c, 0) : NULL;
    }
    size_t pl;
    const char *p = kiln_detok_flush(d, &pl);
    if (tl + pl < sizeof text) memcpy(text + tl, p, pl), tl += pl;
    text[tl] = 0;
    kiln_detok_free(d);
    printf("qwen2vl + qwen2.5-vl mmproj: \"%s\"\n", text);
    snprintf(api_text, cap, "%s", text);
    const char *bin = getenv("KILN_BIN");
    if (bin) {
        char tmpl[] = "/tmp/kiln_vqwen_cli_XXXXXX", cmd[1024], *out = NULL, *err = NULL;
        char *dir = mkdtemp(tmpl);
        snprintf(cmd, sizeof cmd,
                 "%s run -m data/vision/qwen2vl-f32.gguf --mmproj data/vision/qwen25vl-mmproj-f32.gguf --image "
                 "data/vision/qwen25vl-image.png -n 12 --temp 0 -t 2 -c 256 -e -p "
                 "'<|im_start|>user\\n<__media__>Describe this image.<|im_end|>\\n<|im_start|>assistant\\n'",
                 bin);
        CHECK(dir && t_run_capture(cmd, dir, &out, &err) == 0);
        CHECKF(out && !strcmp(out, text), "kiln run: \"%s\", the API: \"%s\" (%s)", out ? out : "", text,
               err ? err : "");
        size_t ml = 0;
        char *mt = t_read_file("data/vision/qwen25vl-mtmd.txt", &ml);
        if (!mt) printf("no recorded llama-mtmd-cli output (qwen25vl-mtmd.txt)\n");
        CHECKF(!mt || !strcmp(mt, text), "kiln: \"%s\", llama-mtmd-cli: \"%s\"", text, mt ? mt : "");
        free(mt);
        free(out);
        free(err);
        if (dir) rmdir(dir);
    }
    free(rows);
    free(png);
    vision_prompt_free(&vp);
    kiln_context_free(c);
    kiln_model_free(m);
}

/* The engine (gen's batches carry the M-RoPE rows): a pack of the text
 * model and its mmproj, the same request twice (the second reuses cached
 * blocks that end inside the image), the API's text both times. */
static void engine_case(const char *api_text) {
    vision_pack pk;
    CHECK(vision_pack_make(&pk, "/tmp/kiln_vqwen_pack_XXXXXX", "data/vision/qwen2vl-f32.gguf",
                           "data/vision/qwen25vl-mmproj-f32.gguf") == 0);
    size_t len;
    unsigned char *png = read_all("data/vision/qwen25vl-image.png", &len);
    kiln_context_params cp;
    kiln_engine *e = vision_engine(pk.model, &cp);
    CHECKF(e != NULL, "%s", kiln_last_error());
    if (!e) {
        free(png);
        vision_pack_remove(&pk);
        return;
    }
    const kiln_image_input img = {png, len, 0, 0};
    kiln_engine_generate_request q = kiln_engine_generate_default();
    q.prompt = QPROMPT;
    q.n_predict = 12;
    q.sampler.temperature = 0;
    q.images = &img;
    q.n_images = 1;
    for (int r = 0; r < 2; r++) {
        text_buf t = {{0}, 0};
        q.on_token = on_piece;
        q.user = &t;
        kiln_status st = kiln_engine_generate(e, &q, NULL);
        CHECKF(st == KILN_OK, "%s", kiln_last_error());
        CHECKF(!strcmp(t.s, api_text), "engine request %d: \"%s\", the API: \"%s\"", r, t.s, api_text);
    }
    printf("engine: the API's text, twice (the second from cached blocks)\n");
    kiln_engine_free(e);
    free(png);
    vision_pack_remove(&pk);
}

/* kiln run with the qwen2vl text model and the Qwen2-VL mmproj, the
 * qwen3vl one (deepstack rows) with the Qwen3-VL mmproj, and qwen2vl with
 * the Qwen2.5-VL mmproj on an image that must be resized: llama-mtmd-cli's
 * recorded bytes (<name>-mtmd.txt) for the same files, prompt and image. */
static void cli_pairs(void) {
    const char *bin = getenv("KILN_BIN");
    if (!bin) {
        printf("KILN_BIN is not set: the command line is not tested\n");
        return;
    }
    static const char *const pairs[][4] = {
        {"qwen2vl-f32", "qwen2vl-mmproj-f32", "qwen2vl", "qwen25vl-image.png"},
        {"qwen3vl-f32", "qwen3vl-mmproj-f32", "qwen3vl", "qwen25vl-image.png"},
        /* 170 x 150: resized (aspect kept, padded) to 168 x 140 first */
        {"qwen2vl-f32", "qwen25vl-mmproj-f32", "qwen25vl-odd", "qwen-image-170x150.png"},
        /* its Q8_0 copy (tests/gen_vision_quant.py): Q8_0 and F16 matrices */
        {"qwen2vl-f32", "qwen25vl-mmproj-q8_0", "qwen25vl-q8_0", "qwen-image-170x150.png"},
    };
    for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; i++) {
        char tmpl[] = "/tmp/kiln_vqwen_cli_XXXXXX", cmd[1024], path[256], *out = NULL, *err = NULL;
        char *dir = mkdtemp(tmpl);
        snprintf(cmd, sizeof cmd,
                 "%s run -m data/vision/%s.gguf --mmproj data/vision/%s.gguf --image data/vision/%s "
                 "-n 12 --temp 0 -t 2 -c 256 -e -p "
                 "'<|im_start|>user\\n<__media__>Describe this image.<|im_end|>\\n<|im_start|>assistant\\n'",
                 bin, pairs[i][0], pairs[i][1], pairs[i][3]);
        CHECK(dir && t_run_capture(cmd, dir, &out, &err) == 0);
        snprintf(path, sizeof path, "data/vision/%s-mtmd.txt", pairs[i][2]);
        size_t ml = 0;
        char *mt = t_read_file(path, &ml);
        CHECKF(mt && out && !strcmp(mt, out), "%s: kiln \"%s\", llama-mtmd-cli \"%s\" (%s)", pairs[i][2],
               out ? out : "", mt ? mt : "", err ? err : "");
        printf("%-10s kiln run --image: llama-mtmd-cli's bytes\n", pairs[i][2]);
        free(mt);
        free(out);
        free(err);
        if (dir) rmdir(dir);
    }
}

int main(void) {
    thread_pool *pool = thread_pool_new(2);
    encode_case("qwen25vl", pool);
    encode_case("qwen2vl", pool);
    encode_case("qwen3vl", pool);
    char api_text[512] = "";
    end_to_end(api_text, sizeof api_text);
    engine_case(api_text);
    cli_pairs();
    char err[256];
    gguf_file *f;
    if (gguf_open("data/vision/qwen25vl-mmproj-f32.gguf", &f)) snprintf(err, sizeof err, "%s", kiln_last_error());
    vision_qwen *q = NULL;
    CHECKF(f && vision_qwen_load(f, &q) == KILN_OK, "%s", kiln_last_error());
    if (!q) return t_done();
    int rw, rh, nx, ny;
    size_t len;
    unsigned char *png = read_all("data/vision/qwen25vl-image.png", &len);
    vision_rgb im = {0};
    CHECK(png && vision_decode(png, len, &im) == KILN_OK);
    free(png);
    const unsigned char *rgb = im.px;
    const int W = im.w, H = im.h, NX = 6, NY = 5, NE = vision_qwen_n_embd(q);
    float *out1 = malloc((size_t)NX * NY * NE * sizeof(float));
    /* the resize rule: nearest multiples of 28, then into 8..4096 tokens */
    static const int sizes[][6] = {
        {168, 140, 168, 140, 6, 5},  {170, 150, 168, 140, 6, 5},       {10, 10, 84, 84, 3, 3},
        {1000, 20, 1008, 28, 36, 1}, {4000, 3000, 2044, 1540, 73, 55},
    };
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        CHECK(vision_qwen_grid(q, sizes[i][0], sizes[i][1], &rw, &rh, &nx, &ny) == 0);
        CHECKF(rw == sizes[i][2] && rh == sizes[i][3] && nx == sizes[i][4] && ny == sizes[i][5],
               "%d x %d resizes to %d x %d (%d x %d tokens)", sizes[i][0], sizes[i][1], rw, rh, nx, ny);
    }
    /* a 170 x 150 image is resized to 168 x 140 first: the same rows as
     * encoding that resize's result */
    CHECK(vision_qwen_grid(q, 170, 150, &rw, &rh, &nx, &ny) == 0);
    unsigned char *big = malloc(170 * 150 * 3);
    for (int y = 0; y < 150; y++)
        for (int x = 0; x < 170; x++)
            for (int c = 0; c < 3; c++)
                big[((size_t)y * 170 + x) * 3 + c] = rgb ? rgb[((size_t)(y % H) * W + x % W) * 3 + c] : 0;
    CHECK(vision_qwen_encode(q, pool, big, 170, 150, out1) == KILN_OK);
    int finite = 1;
    for (size_t i = 0; i < (size_t)NX * NY * NE; i++) finite &= isfinite(out1[i]) != 0;
    CHECK(finite);
    /* bad sizes */
    CHECK(vision_qwen_encode(q, pool, rgb, 0, 10, out1) == KILN_ERR_INVALID_ARG);
    CHECK(vision_qwen_grid(q, -1, 5, &rw, &rh, &nx, &ny) == -1);
    free(big);
    free(out1);
    vision_rgb_free(&im);
    thread_pool_free(pool);
    vision_qwen_free(q);
    gguf_close(f);
    return t_done();
}
