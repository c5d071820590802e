/* libFuzzer target: the JSON-schema compiler and recognizer
 * (src/sample/jschema.c).  The input is a schema's JSON text, a NUL byte,
 * then bytes fed to the recognizer one at a time (no NUL: all of it is the
 * text, fed under JSON mode and under "any value").  Besides what ASan and
 * UBSan catch, it aborts when
 *   - sample_sv_accepts and sample_sv_byte disagree about a byte;
 *   - a text the recognizer has taken leaves no byte to follow and is not
 *     complete (a dead end: constrained sampling would have nowhere to go);
 *   - a complete text is not JSON to jansson (numbers beyond a double or an
 *     int64, \u escapes and raw bytes of 0x80 and up aside: the recognizer
 *     takes those as JSON's grammar does, jansson refuses some).
 * Built only with -DKILN_FUZZ=ON (clang). */
#include "sample/jschema.h"

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void die(const char *what, const uint8_t *text, size_t n) {
    fprintf(stderr, "fuzz_jschema: %s after %zu bytes: '%.*s'\n", what, n, (int)n, (const char *)text);
    abort();
}

/* Whether jansson may refuse a JSON text the recognizer rightly takes. */
static int beyond_jansson(const uint8_t *t, size_t n, const json_error_t *e) {
    if (json_error_code(e) == json_error_numeric_overflow) return 1;
    for (size_t i = 0; i < n; i++)
        if (t[i] >= 0x80 || (t[i] == '\\' && i + 1 < n && t[i + 1] == 'u')) return 1;
    return 0;
}

static void run(const sample_schema *s, const uint8_t *text, size_t n) {
    sample_sv v, t;
    sample_sv_init(&v, s);
    size_t i = 0;
    for (; i < n; i++) {
        const char ch = (char)text[i];
        const int would = sample_sv_accepts(&v, &ch, 1);
        sample_sv_copy(&t, &v);
        const int took = sample_sv_byte(&t, text[i]);
        if (would != took) die("sample_sv_accepts and sample_sv_byte disagree", text, i + 1);
        if (!took) break;
        sample_sv_copy(&v, &t);
        int any = sample_sv_complete(&v);
        for (int b = 0; b < 256 && !any; b++) {
            const char c = (char)b;
            any = sample_sv_accepts(&v, &c, 1);
        }
        if (!any) die("a dead end", text, i + 1);
    }
    if (i > 0 && sample_sv_complete(&v)) {
        json_error_t e;
        json_t *j = json_loadb((const char *)text, i, JSON_DECODE_ANY | JSON_ALLOW_NUL, &e);
        if (!j && !beyond_jansson(text, i, &e)) die("a complete text jansson does not read", text, i);
        if (j && s == sample_schema_any_object() && !json_is_object(j)) die("JSON mode gave no object", text, i);
        json_decref(j);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const uint8_t *nul = memchr(data, 0, size);
    if (!nul) {
        run(sample_schema_any_object(), data, size);
        run(NULL, data, size);
        return 0;
    }
    const size_t n_schema = (size_t)(nul - data);
    json_t *j = json_loadb((const char *)data, n_schema, JSON_DECODE_ANY, NULL);
    if (!j) return 0;
    char err[256];
    sample_schema *s = sample_schema_compile(j, err, sizeof err);
    json_decref(j); /* the compiled schema keeps nothing of it */
    if (!s) return 0;
    run(s, nul + 1, size - n_schema - 1);
    sample_schema_free(s);
    return 0;
}
