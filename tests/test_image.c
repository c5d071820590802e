/*
 * The text-to-image pipeline against the PyTorch reference of
 * tests/gen_image.py (tests/data/image/tiny: a random-weight pipeline in
 * the real formats, a SentencePiece model trained there):
 *  - the tokenizer gives SentencePiece's ids on every conformance case;
 *  - the seeded Gaussian gives the reference's exact floats, and the
 *    schedule its timesteps and sigmas;
 *  - encoder states, one DiT evaluation and one VAE decode within the
 *    tolerances below (float32 against the float64 reference; the DiT's
 *    F16 MLP weights round its activations to F16);
 *  - the whole pipeline's pixels within 2 levels of the reference's, and
 *    the same PNG bytes across runs and thread counts;
 *  - packs with a wrong hash or length, a missing role, a substituted
 *    encoder or VAE, or a malicious DiT are refused before loading.
 */
#include "testutil.h"

#include "image/image.h"
#include "image/nn.h"
#include "image/spiece.h"

#include <jansson.h>
#include <math.h>
#include <png.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define TINY "data/image/tiny/"

static float *read_f32(const char *path, size_t n) {
    size_t len;
    char *b = t_read_file(path, &len);
    CHECKF(b && len == n * 4, "%s: %zu bytes, expected %zu", path, b ? len : 0, n * 4);
    if (!b || len != n * 4) {
        free(b);
        return NULL;
    }
    return (float *)b;
}

static double max_err(const float *a, const float *b, size_t n, double *ref_max) {
    double m = 0, r = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]);
        if (d > m || d != d) m = d != d ? INFINITY : d;
        if (fabs(b[i]) > r) r = fabs(b[i]);
    }
    if (ref_max) *ref_max = r;
    return m;
}

static void test_tokenizer(void) {
    size_t n;
    char *model = t_read_file(TINY "spiece.model", &n);
    char err[256];
    image_spiece *s = model ? image_spiece_load((const uint8_t *)model, n, err, sizeof err) : NULL;
    CHECKF(s != NULL, "spiece: %s", model ? err : "no file");
    free(model);
    json_error_t je;
    json_t *j = json_load_file(TINY "tokenizer.json", 0, &je);
    CHECK(j != NULL);
    if (!s || !j) return;
    CHECK(image_spiece_eos(s) == 1 && image_spiece_unk(s) == 2 && image_spiece_pad(s) == 0);
    size_t i;
    json_t *c;
    int n_ok = 0;
    json_array_foreach(json_object_get(j, "cases"), i, c) {
        const char *text = json_string_value(json_object_get(c, "text"));
        char bytes[256];
        size_t len;
        if (text) {
            len = strlen(text);
        } else {
            const char *hex = json_string_value(json_object_get(c, "hex"));
            len = strlen(hex) / 2;
            for (size_t k = 0; k < len; k++) {
                unsigned v;
                sscanf(hex + 2 * k, "%2x", &v);
                bytes[k] = (char)v;
            }
            text = bytes;
        }
        int32_t ids[256];
        int got = image_spiece_encode(s, text, len, ids, 256);
        json_t *want = json_object_get(c, "ids");
        int same = got == (int)json_array_size(want);
        for (int k = 0; same && k < got; k++) same = ids[k] == json_integer_value(json_array_get(want, (size_t)k));
        CHECKF(same, "case %zu: %d tokens, expected %zu", i, got, json_array_size(want));
        n_ok += same;
    }
    CHECK(n_ok == (int)json_array_size(json_object_get(j, "cases")));
    /* a truncated or garbled model is refused, never a crash */
    model = t_read_file(TINY "spiece.model", &n);
    for (size_t k = 1; model && k < n; k += k < 64 ? 1 : 997) {
        image_spiece *t = image_spiece_load((const uint8_t *)model, k, err, sizeof err);
        if (t) {
            int32_t ids[64];
            image_spiece_encode(t, "a red circle", 12, ids, 64);
            image_spiece_free(t);
        }
    }
    free(model);
    json_decref(j);
    image_spiece_free(s);
}

static image_pipeline *open_tiny(int threads) {
    image_files f;
    image_config c;
    char err[512];
    image_pipeline *p = NULL;
    int rc = image_pack_read(TINY, 1, &f, &c, err, sizeof err);
    CHECKF(rc == 0, "pack: %s", err);
    if (rc) return NULL;
    rc = image_pipeline_open(&f, &c, threads, &p, err, sizeof err);
    CHECKF(rc == 0, "open: %s", err);
    return p;
}

static void test_stages(json_t *ref) {
    image_pipeline *p = open_tiny(2);
    if (!p) return;
    char err[256];
    /* the noise, bit for bit */
    json_t *noise = json_object_get(ref, "noise");
    float g[8];
    image_rng r;
    image_rng_seed(&r, (uint64_t)json_integer_value(json_object_get(noise, "seed")));
    image_rng_gauss(&r, g, 8);
    for (int i = 0; i < 8; i++)
        CHECK(g[i] == (float)json_number_value(json_array_get(json_object_get(noise, "first"), (size_t)i)));
    /* schedule */
    json_t *pl = json_object_get(ref, "pipeline");
    const int steps = (int)json_integer_value(json_object_get(pl, "steps"));
    float ts[64], sig[65], init;
    CHECK(image_sched_plan(&image_pipeline_config(p)->sched, steps, ts, sig, &init, err, sizeof err) == 0);
    for (int i = 0; i < steps; i++)
        CHECK(ts[i] == (float)json_number_value(json_array_get(json_object_get(pl, "timesteps"), (size_t)i)));
    for (int i = 0; i <= steps; i++)
        CHECKF(fabsf(sig[i] - (float)json_number_value(json_array_get(json_object_get(pl, "sigmas"), (size_t)i))) <=
                   1e-6f * (1 + sig[i]),
               "sigma %d = %g", i, sig[i]);
    CHECK(fabsf(init - (float)json_number_value(json_object_get(pl, "init_noise_sigma"))) <= 1e-6f * init);
    /* tokens and encoder states */
    int32_t ids[128];
    const int n = image_tokenize(p, json_string_value(json_object_get(ref, "prompt")), ids, 128);
    json_t *want = json_object_get(ref, "ids");
    CHECK(n == (int)json_array_size(want));
    for (int i = 0; i < n && i < (int)json_array_size(want); i++)
        CHECK(ids[i] == json_integer_value(json_array_get(want, (size_t)i)));
    const int D = image_encoder_width(p);
    float *states = malloc((size_t)n * (size_t)D * sizeof *states);
    float *rt5 = read_f32(TINY "ref_t5.f32", (size_t)n * (size_t)D);
    CHECK(image_encode(p, ids, n, states, err, sizeof err) == 0);
    double rmax, e = rt5 ? max_err(states, rt5, (size_t)n * (size_t)D, &rmax) : INFINITY;
    printf("t5 states: max abs error %.3g (values up to %.3g)\n", e, rmax);
    CHECK(e < 1e-4);
    /* one DiT evaluation on the reference's own states */
    const size_t nz = 4 * 32 * 32, no = (size_t)image_dit_out_channels(p) * 32 * 32;
    float *x = malloc(nz * sizeof *x), *out = malloc(no * sizeof *out);
    json_t *ds = json_object_get(ref, "dit_step");
    image_rng_seed(&r, (uint64_t)json_integer_value(json_object_get(ds, "noise_seed")));
    image_rng_gauss(&r, x, nz);
    float *rd = read_f32(TINY "ref_dit_step.f32", no);
    CHECK(image_dit_once(p, x, (float)json_number_value(json_object_get(ds, "timestep")), rt5 ? rt5 : states, n, out,
                         err, sizeof err) == 0);
    e = rd ? max_err(out, rd, no, &rmax) : INFINITY;
    printf("dit step: max abs error %.3g (values up to %.3g)\n", e, rmax);
    CHECK(e < 5e-3);
    /* one VAE decode */
    json_t *vs = json_object_get(ref, "vae");
    image_rng_seed(&r, (uint64_t)json_integer_value(json_object_get(vs, "noise_seed")));
    image_rng_gauss(&r, x, nz);
    for (size_t i = 0; i < nz; i++) x[i] *= (float)json_number_value(json_object_get(vs, "latent_scale"));
    const size_t ni = 3 * 256 * 256;
    float *img = malloc(ni * sizeof *img), *rv = read_f32(TINY "ref_vae.f32", ni);
    CHECK(image_decode(p, x, img, err, sizeof err) == 0);
    e = rv ? max_err(img, rv, ni, &rmax) : INFINITY;
    printf("vae decode: max abs error %.3g (values up to %.3g)\n", e, rmax);
    CHECK(e < 1e-3);
    free(states);
    free(rt5);
    free(x);
    free(out);
    free(rd);
    free(img);
    free(rv);
    image_pipeline_free(p);
}

static uint8_t *generate(image_pipeline *p, json_t *ref, size_t *len) {
    json_t *pl = json_object_get(ref, "pipeline");
    image_request r = {json_string_value(json_object_get(ref, "prompt")),
                       (int)json_integer_value(json_object_get(pl, "steps")),
                       (float)json_number_value(json_object_get(pl, "cfg")),
                       (uint64_t)json_integer_value(json_object_get(pl, "seed")),
                       NULL,
                       NULL};
    uint8_t *png = NULL;
    char err[256];
    int rc = image_generate(p, &r, &png, len, err, sizeof err);
    CHECKF(rc == IMAGE_OK, "generate: %s", err);
    return png;
}

static int cancel_at_2(void *user, int step, int steps) {
    (void)steps;
    ++*(int *)user;
    return step == 2;
}

static void test_pipeline(json_t *ref) {
    image_pipeline *p2 = open_tiny(2), *p1 = open_tiny(1);
    if (!p1 || !p2) {
        image_pipeline_free(p1);
        image_pipeline_free(p2);
        return;
    }
    size_t l2, l2b, l1;
    uint8_t *a = generate(p2, ref, &l2), *b = generate(p2, ref, &l2b), *c = generate(p1, ref, &l1);
    CHECK(a && b && c && l2 == l2b && l2 == l1 && !memcmp(a, b, l2) && !memcmp(a, c, l2));
    int w = 0, h = 0;
    uint8_t *px = a ? t_png_pixels(a, l2, &w, &h) : NULL;
    size_t rl;
    uint8_t *want = (uint8_t *)t_read_file(TINY "ref_image.rgb", &rl);
    CHECK(px && w == 256 && h == 256 && want && rl == 256 * 256 * 3);
    if (px && want && rl == 256 * 256 * 3) {
        int mx = 0;
        long sum = 0, n_diff = 0;
        for (size_t i = 0; i < rl; i++) {
            int d = abs((int)px[i] - want[i]);
            mx = d > mx ? d : mx;
            sum += d;
            n_diff += d != 0;
        }
        printf("pipeline: max pixel error %d, mean %.4f, %.2f %% of values differ\n", mx, (double)sum / (double)rl,
               100.0 * (double)n_diff / (double)rl);
        CHECK(mx <= 2);
        CHECK((double)sum / (double)rl < 0.05);
    }
    /* another seed, another image; cancellation from the progress callback */
    json_t *pl = json_object_get(ref, "pipeline");
    image_request r = {"a red circle on a blue background", 4, 4.5f, 43, cancel_at_2, NULL};
    int calls = 0;
    r.user = &calls;
    uint8_t *png = NULL;
    size_t len;
    char err[256];
    CHECK(image_generate(p2, &r, &png, &len, err, sizeof err) == IMAGE_CANCELLED && !png && calls == 3);
    r.progress = NULL;
    CHECK(image_generate(p2, &r, &png, &len, err, sizeof err) == IMAGE_OK && png && (len != l2 || memcmp(png, a, len)));
    free(png);
    /* an over-long prompt is refused, not cut */
    char lng[2048];
    memset(lng, 'z', sizeof lng - 1);
    for (size_t i = 1; i < sizeof lng - 1; i += 2) lng[i] = ' ';
    lng[sizeof lng - 1] = 0;
    r.prompt = lng;
    CHECK(image_generate(p2, &r, &png, &len, err, sizeof err) == IMAGE_TOO_LONG && strstr(err, "at most 120"));
    (void)pl;
    free(a);
    free(b);
    free(c);
    free(px);
    free(want);
    image_pipeline_free(p1);
    image_pipeline_free(p2);
}

/* A copy of the tiny pack in dir with pack.json edited by fn. */
static char tmp[] = "/tmp/kiln-test-image-XXXXXX";

static int copy_file(const char *from, const char *to) {
    size_t n;
    char *b = t_read_file(from, &n);
    FILE *f = b ? fopen(to, "wb") : NULL;
    int ok = f && fwrite(b, 1, n, f) == n;
    if (f) fclose(f);
    free(b);
    return ok ? 0 : -1;
}

static int refused(json_t *pack, const char *expect) {
    char path[600], err[512];
    snprintf(path, sizeof path, "%s/pack.json", tmp);
    json_dump_file(pack, path, JSON_INDENT(1));
    image_files f;
    image_config c;
    image_pipeline *p = NULL;
    int rc = image_pack_read(tmp, 1, &f, &c, err, sizeof err);
    if (!rc) rc = image_pipeline_open(&f, &c, 1, &p, err, sizeof err);
    image_pipeline_free(p);
    CHECKF(rc != 0, "accepted (expected: %s)", expect);
    CHECKF(rc == 0 || strstr(err, expect), "'%s' lacks '%s'", err, expect);
    return rc != 0;
}

static json_t *art(json_t *pack, const char *role) {
    size_t i;
    json_t *a;
    json_array_foreach(json_object_get(pack, "artifacts"), i,
                       a) if (!strcmp(json_string_value(json_object_get(a, "role")), role)) return a;
    return NULL;
}

static void set_file(json_t *pack, const char *role, const char *file) {
    char path[600];
    snprintf(path, sizeof path, "%s/%s", tmp, file);
    size_t n;
    char *b = t_read_file(path, &n);
    free(b);
    json_t *a = art(pack, role);
    json_object_set_new(a, "path", json_string(file));
    json_object_set_new(a, "length", json_integer((json_int_t)n));
    /* the right hash, so the schema check is what refuses */
    char cmd[700], hex[80] = "";
    snprintf(cmd, sizeof cmd, "sha256sum '%s'", path);
    FILE *pp = popen(cmd, "r");
    if (pp && fscanf(pp, "%64s", hex) == 1) json_object_set_new(a, "sha256", json_string(hex));
    if (pp) pclose(pp);
}

static void test_packs(void) {
    if (!mkdtemp(tmp)) {
        CHECK(0);
        return;
    }
    const char *files[] = {"dit.pt", "t5.safetensors", "spiece.model", "vae.safetensors"};
    char to[600], from[600];
    for (int i = 0; i < 4; i++) {
        snprintf(from, sizeof from, TINY "%s", files[i]);
        snprintf(to, sizeof to, "%s/%s", tmp, files[i]);
        CHECK(copy_file(from, to) == 0);
    }
    snprintf(to, sizeof to, "%s/evil.pt", tmp);
    CHECK(copy_file("data/image/ckpt/evil_system.pt", to) == 0);
    json_error_t je;
    json_t *orig = json_load_file(TINY "pack.json", 0, &je), *p;
    if (!orig) return;
    p = json_deep_copy(orig);
    json_object_set_new(art(p, "vae"), "sha256",
                        json_string("00000000000000000000000000000000000000000000000000000000000000ff"));
    refused(p, "has sha256");
    json_decref(p);
    p = json_deep_copy(orig);
    json_object_set_new(art(p, "dit"), "length", json_integer(12));
    refused(p, "the pack records 12");
    json_decref(p);
    p = json_deep_copy(orig);
    json_array_remove(json_object_get(p, "artifacts"), 2);
    refused(p, "no tokenizer artifact");
    json_decref(p);
    p = json_deep_copy(orig);
    set_file(p, "text-encoder", "vae.safetensors");
    refused(p, "not a T5 encoder");
    json_decref(p);
    p = json_deep_copy(orig);
    set_file(p, "vae", "t5.safetensors");
    refused(p, "not an AutoencoderKL decoder");
    json_decref(p);
    p = json_deep_copy(orig);
    set_file(p, "dit", "vae.safetensors");
    refused(p, "PyTorch ZIP");
    json_decref(p);
    p = json_deep_copy(orig);
    set_file(p, "dit", "evil.pt");
    refused(p, "posix.system");
    json_decref(p);
    p = json_deep_copy(orig);
    json_object_set_new(json_object_get(p, "dit"), "attention_head_dim", json_integer(50));
    refused(p, "head size 50");
    json_decref(p);
    json_decref(orig);
    const char *all[] = {"dit.pt", "t5.safetensors", "spiece.model", "vae.safetensors", "evil.pt", "pack.json"};
    for (int i = 0; i < 6; i++) {
        snprintf(to, sizeof to, "%s/%s", tmp, all[i]);
        unlink(to);
    }
    rmdir(tmp);
}

static int run(const char *cmd, char *out, size_t cap) {
    FILE *p = popen(cmd, "r");
    size_t n = p ? fread(out, 1, cap - 1, p) : 0;
    out[n] = 0;
    return p ? pclose(p) : -1;
}

/* kiln image with a pack and with the four files (the tiny pipeline has the
 * pinned defaults' settings, so both give the same bytes); usage errors. */
static void test_cli(void) {
    const char *bin = getenv("KILN_BIN");
    if (!bin) return;
    char cmd[2048], out[4096], a[64], b[64];
    snprintf(a, sizeof a, "/tmp/kiln-test-image-a-%d.png", (int)getpid());
    snprintf(b, sizeof b, "/tmp/kiln-test-image-b-%d.png", (int)getpid());
    snprintf(cmd, sizeof cmd,
             "'%s' image -m " TINY " -p 'a green square on a white background' --steps 3 --seed 7 "
             "-t 2 -o %s 2>&1",
             bin, a);
    CHECKF(run(cmd, out, sizeof out) == 0 && strstr(out, "wrote"), "%s", out);
    /* the four files alone: the tokenizer must be Flan-T5's pinned one or the
     * one --tokenizer-sha256 names (the tiny pack's, from its pack.json) */
    char tok_sha[65] = "";
    {
        size_t lj;
        char *pj = t_read_file(TINY "pack.json", &lj);
        const char *r = pj ? strstr(pj, "\"role\": \"tokenizer\"") : NULL;
        const char *h = r ? strstr(r, "\"sha256\": \"") : NULL;
        if (h && strlen(h) >= 11 + 64) memcpy(tok_sha, h + 11, 64);
        free(pj);
    }
    CHECK(strlen(tok_sha) == 64);
    const char *files = "--dit " TINY "dit.pt --t5 " TINY "t5.safetensors --tokenizer " TINY "spiece.model --vae " TINY
                        "vae.safetensors -p 'a green square on a white background' --steps 3 --cfg 4.5 --seed 7 -t 1";
    snprintf(cmd, sizeof cmd, "'%s' image %s -o %s 2>&1", bin, files, b);
    CHECKF(run(cmd, out, sizeof out) != 0 && strstr(out, "not Flan-T5's spiece.model") && strstr(out, "791656"), "%s",
           out);
    snprintf(cmd, sizeof cmd, "'%s' image %s --tokenizer-sha256 %064d -o %s 2>&1", bin, files, 0, b);
    CHECKF(run(cmd, out, sizeof out) != 0 && strstr(out, "--tokenizer-sha256 pins"), "%s", out);
    snprintf(cmd, sizeof cmd, "'%s' image %s --tokenizer-sha256 %s -o %s 2>&1", bin, files, tok_sha, b);
    CHECKF(run(cmd, out, sizeof out) == 0, "%s", out);
    size_t la, lb;
    char *pa = t_read_file(a, &la), *pb = t_read_file(b, &lb);
    CHECK(pa && pb && la == lb && la > 8 && !memcmp(pa, "\x89PNG", 4) && !memcmp(pa, pb, la));
    free(pa);
    free(pb);
    unlink(a);
    unlink(b);
    snprintf(cmd, sizeof cmd, "'%s' image -m " TINY " 2>&1", bin);
    CHECK(run(cmd, out, sizeof out) != 0 && strstr(out, "no prompt"));
    snprintf(cmd, sizeof cmd, "'%s' image -m data/image/ckpt -p x 2>&1", bin);
    CHECK(run(cmd, out, sizeof out) != 0 && strstr(out, "not an image pack") &&
          strchr(out, '\n') == out + strlen(out) - 1);
    snprintf(cmd, sizeof cmd, "'%s' image -m " TINY " -p x --steps 0 2>&1", bin);
    CHECK(run(cmd, out, sizeof out) != 0 && strstr(out, "out of range"));
}

int main(void) {
    test_tokenizer();
    test_cli();
    json_error_t je;
    json_t *ref = json_load_file(TINY "ref.json", 0, &je);
    CHECKF(ref != NULL, "ref.json: %s", je.text);
    if (ref) {
        test_stages(ref);
        test_pipeline(ref);
        json_decref(ref);
    }
    test_packs();
    return t_done();
}
