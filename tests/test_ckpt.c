/*
 * The checkpoint readers (src/ckpt): the restricted PyTorch ZIP reader and
 * the safetensors reader.
 *  - good files list every tensor with its dtype, shape and values as the
 *    generator (tests/gen_image.py, PyTorch) wrote them, views into a shared
 *    storage included;
 *  - every malicious checkpoint is refused with an error naming what is
 *    wrong, and the two that carry live code leave no marker file;
 *  - every truncation and a few thousand byte mutations of good files fail
 *    cleanly or parse (never a crash: run under ASan in CI);
 *  - crafted safetensors headers (lengths, offsets, overlap, dtypes) are refused.
 */
#include "testutil.h"

#include "ckpt/ckpt.h"
#include "quant/quant.h"

#include <jansson.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define DIR "data/image/ckpt/"

static double value_at(const ckpt_tensor *t, int64_t i) {
    const uint8_t *p = t->data;
    switch (t->dtype) {
    case CKPT_F32: {
        float v;
        memcpy(&v, p + 4 * i, 4);
        return v;
    }
    case CKPT_F16: {
        uint16_t h;
        memcpy(&h, p + 2 * i, 2);
        return quant_f16_to_f32(h);
    }
    case CKPT_BF16: {
        uint16_t h;
        memcpy(&h, p + 2 * i, 2);
        return quant_bf16_to_f32(h);
    }
    case CKPT_I64: {
        int64_t v;
        memcpy(&v, p + 8 * i, 8);
        return (double)v;
    }
    default: return NAN;
    }
}

/* Every tensor of expect (a JSON array) is in f with its values. */
static void check_tensors(const ckpt_file *f, json_t *expect, const char *what) {
    CHECKF(ckpt_n_tensors(f) == (int)json_array_size(expect), "%s: %d tensors", what, ckpt_n_tensors(f));
    size_t i;
    json_t *e;
    json_array_foreach(expect, i, e) {
        const char *name = json_string_value(json_object_get(e, "name"));
        const ckpt_tensor *t = ckpt_find(f, name);
        CHECKF(t != NULL, "%s: no tensor %s", what, name);
        if (!t) continue;
        CHECKF(!strcmp(ckpt_dtype_name(t->dtype), json_string_value(json_object_get(e, "dtype"))), "%s: %s dtype %s",
               what, name, ckpt_dtype_name(t->dtype));
        json_t *shape = json_object_get(e, "shape"), *vals = json_object_get(e, "values");
        CHECKF(t->n_dims == (int)json_array_size(shape), "%s: %s has %d dims", what, name, t->n_dims);
        for (int d = 0; d < t->n_dims && d < (int)json_array_size(shape); d++)
            CHECK(t->shape[d] == json_integer_value(json_array_get(shape, (size_t)d)));
        CHECKF(t->numel == (int64_t)json_array_size(vals), "%s: %s numel %lld", what, name, (long long)t->numel);
        int same = 1;
        for (int64_t k = 0; k < t->numel && k < (int64_t)json_array_size(vals); k++)
            if (value_at(t, k) != json_number_value(json_array_get(vals, (size_t)k))) same = 0;
        CHECKF(same, "%s: %s values differ", what, name);
        CHECK(t->nbytes == (uint64_t)t->numel * (uint64_t)ckpt_dtype_size(t->dtype));
        CHECK(((uintptr_t)t->data) % (uintptr_t)ckpt_dtype_size(t->dtype) == 0);
    }
}

static int opens(const void *p, size_t n, char *err, size_t errlen) {
    err[0] = 0;
    ckpt_file *f;
    if (ckpt_open_memory(p, n, &f)) snprintf(err, errlen, "%s", kiln_last_error());
    if (!f) return 0;
    for (int i = 0; i < ckpt_n_tensors(f); i++) { /* touch every byte a tensor claims */
        const ckpt_tensor *t = ckpt_tensor_at(f, i);
        volatile uint8_t s = 0;
        for (uint64_t k = 0; k < t->nbytes; k++) s ^= ((const uint8_t *)t->data)[k];
        (void)s;
    }
    ckpt_close(f);
    return 1;
}

/* Truncations must fail with a message; mutations must not crash. */
static void robustness(const char *path, int all_prefixes_fail) {
    size_t n;
    uint8_t *orig = (uint8_t *)t_read_file(path, &n);
    CHECKF(orig != NULL, "cannot read %s", path);
    if (!orig) return;
    char err[512];
    int fail_ok = 1, msg_ok = 1;
    for (size_t k = 0; k < n; k++) {
        uint8_t *p = malloc(k ? k : 1);
        memcpy(p, orig, k);
        if (opens(p, k, err, sizeof err))
            fail_ok = 0;
        else if (!err[0])
            msg_ok = 0;
        free(p);
    }
    if (all_prefixes_fail) CHECKF(fail_ok, "%s: a truncation opened", path);
    CHECKF(msg_ok, "%s: a failure without a message", path);
    uint8_t *p = malloc(n);
    uint64_t s = 0x9E3779B97F4A7C15ull;
    int n_open = 0;
    for (int it = 0; it < 3000; it++) {
        memcpy(p, orig, n);
        for (int j = 0; j < 1 + it % 4; j++) {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            p[(s >> 33) % n] = (uint8_t)(s >> 17);
        }
        n_open += opens(p, n, err, sizeof err);
    }
    CHECK(n_open >= 0);
    free(p);
    free(orig);
}

static json_t *load_json(const char *path) {
    json_error_t je;
    json_t *j = json_load_file(path, 0, &je);
    CHECKF(j != NULL, "%s: %s", path, je.text);
    return j;
}

static void test_good(json_t *spec) {
    char err[512];
    json_t *expect = json_object_get(spec, "expect");
    ckpt_file *f;
    if (ckpt_open(DIR "good.pt", &f)) snprintf(err, sizeof err, "%s", kiln_last_error());
    CHECKF(f != NULL, "good.pt: %s", err);
    if (f) {
        CHECK(ckpt_format(f) == CKPT_TORCH_ZIP);
        check_tensors(f, json_object_get(expect, "pt"), "good.pt");
        /* views of one storage point into the same bytes */
        const ckpt_tensor *b = ckpt_find(f, "blocks.0.attn.to_q.bias"), *w = ckpt_find(f, "blocks.0.norm.weight");
        CHECK(b && w && (const float *)w->data == (const float *)b->data + 5);
        CHECK(ckpt_find(f, "missing") == NULL && ckpt_meta(f, "format") == NULL);
        ckpt_close(f);
    }
    if (ckpt_open(DIR "trainckpt.pt", &f)) snprintf(err, sizeof err, "%s", kiln_last_error());
    CHECKF(f != NULL, "trainckpt.pt: %s", err);
    if (f) {
        check_tensors(f, json_object_get(expect, "pt"), "trainckpt.pt");
        ckpt_close(f);
    }
    if (ckpt_open(DIR "good.safetensors", &f)) snprintf(err, sizeof err, "%s", kiln_last_error());
    CHECKF(f != NULL, "good.safetensors: %s", err);
    if (f) {
        CHECK(ckpt_format(f) == CKPT_SAFETENSORS);
        check_tensors(f, json_object_get(expect, "safetensors"), "good.safetensors");
        CHECK(ckpt_meta(f, "note") && !strcmp(ckpt_meta(f, "note"), "kiln fixture"));
        /* file order is data order */
        CHECK(!strcmp(ckpt_tensor_at(f, 0)->name, "ids") && !strcmp(ckpt_tensor_at(f, 3)->name, "h.bf16"));
        ckpt_close(f);
    }
}

static void test_evil(json_t *spec) {
    const char *k;
    json_t *why;
    char path[512], err[512];
    json_object_foreach(json_object_get(spec, "evil"), k, why) {
        snprintf(path, sizeof path, DIR "%s", k);
        err[0] = 0;
        ckpt_file *f;
        if (ckpt_open(path, &f)) snprintf(err, sizeof err, "%s", kiln_last_error());
        CHECKF(f == NULL, "%s was accepted", k);
        ckpt_close(f);
        CHECKF(strstr(err, json_string_value(why)) != NULL, "%s: error '%s' does not name '%s'", k, err,
               json_string_value(why));
        if (t_failures == 0 && getenv("KILN_TEST_VERBOSE")) printf("%s: %s\n", k, err);
    }
    CHECK(access("kiln-pwned-system", F_OK) != 0);
    CHECK(access("kiln-pwned-eval", F_OK) != 0);
    /* not a file of either kind */
    ckpt_file *none;
    CHECK(ckpt_open(DIR "ckpt.json", &none) != KILN_OK && none == NULL && strstr(kiln_last_error(), "safetensors"));
}

/* A safetensors file from a header text and n data bytes. */
static uint8_t *st_make(const char *hdr, size_t data, size_t *len) {
    size_t h0 = strlen(hdr), h = (h0 + 7) & ~(size_t)7; /* padded with spaces, as writers do */
    *len = 8 + h + data;
    uint8_t *p = calloc(1, *len);
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)((uint64_t)h >> (8 * i));
    memcpy(p + 8, hdr, h0);
    memset(p + 8 + h0, ' ', h - h0);
    return p;
}

static void st_case(const char *hdr, size_t data, int ok, const char *msg) {
    size_t n;
    uint8_t *p = st_make(hdr, data, &n);
    char err[512];
    int got = opens(p, n, err, sizeof err);
    CHECKF(got == ok, "header %s: %s", hdr, got ? "opened" : err);
    if (!ok && msg) CHECKF(strstr(err, msg) != NULL, "header %s: '%s' lacks '%s'", hdr, err, msg);
    free(p);
}

static void test_safetensors_crafted(void) {
    st_case("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}    ", 8, 1, NULL);
    st_case("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}    ", 7, 0, "data_offsets");
    st_case("{\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}    ", 8, 0, "data_offsets");
    st_case("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,0]}}    ", 8, 0, "data_offsets");
    st_case("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
            "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
            8, 0, "overlaps");
    st_case("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
            "\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}",
            8, 0, "duplicate");
    st_case("{\"a\":{\"dtype\":\"Q9\",\"shape\":[2],\"data_offsets\":[0,8]}}     ", 8, 0, "dtype");
    st_case("{\"a\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}}   ", 8, 0, "shape");
    st_case("{\"a\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296,4294967296],\"data_offsets\":[0,8]}}", 8, 0,
            "shape");
    st_case("{\"a\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,4]}}", 4, 0, "dimensions");
    st_case("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[2,10]}}   ", 10, 0, "aligned");
    st_case("{\"__metadata__\":{\"k\":1}}", 0, 0, "__metadata__");
    st_case("[1,2,3]", 0, 0, "{");
    st_case("{\"a\":5}", 0, 0, "dtype");
    st_case("{}", 0, 1, NULL);
    /* a header length beyond the file */
    uint8_t big[16] = {0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0, '{', '}'};
    char err[256];
    CHECK(!opens(big, sizeof big, err, sizeof err) && strstr(err, "header length"));
}

/* kiln show lists a checkpoint's tensors; a malicious one is one error line. */
static void test_cli_show(void) {
    const char *bin = getenv("KILN_BIN");
    if (!bin) return;
    char cmd[1024], out[8192];
    snprintf(cmd, sizeof cmd, "'%s' show " DIR "good.pt 2>&1", bin);
    FILE *p = popen(cmd, "r");
    size_t n = p ? fread(out, 1, sizeof out - 1, p) : 0;
    out[n] = 0;
    CHECK(p && pclose(p) == 0);
    CHECKF(strstr(out, "pytorch-zip") && strstr(out, "blocks.0.attn.to_q.weight") && strstr(out, "[3, 4]") &&
               strstr(out, "tensors (7)"),
           "%s", out);
    snprintf(cmd, sizeof cmd, "'%s' show " DIR "good.safetensors 2>&1", bin);
    p = popen(cmd, "r");
    n = p ? fread(out, 1, sizeof out - 1, p) : 0;
    out[n] = 0;
    CHECK(p && pclose(p) == 0);
    CHECKF(strstr(out, "safetensors") && strstr(out, "h.bf16") && strstr(out, "BF16"), "%s", out);
    snprintf(cmd, sizeof cmd, "'%s' show " DIR "evil_eval.pt 2>&1", bin);
    p = popen(cmd, "r");
    n = p ? fread(out, 1, sizeof out - 1, p) : 0;
    out[n] = 0;
    CHECK(p && pclose(p) != 0);
    CHECKF(strstr(out, "eval' is not allowed") && strchr(out, '\n') == out + n - 1, "%s", out);
}

int main(void) {
    json_t *spec = load_json(DIR "ckpt.json");
    if (!spec) return t_done();
    test_good(spec);
    test_evil(spec);
    test_safetensors_crafted();
    test_cli_show();
    robustness(DIR "good.pt", 1);
    robustness(DIR "good.safetensors", 0);
    json_decref(spec);
    return t_done();
}
