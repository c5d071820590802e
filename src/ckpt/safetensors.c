/* safetensors: u64 header length N, N bytes of JSON
 *   {"__metadata__": {str: str}?, NAME: {"dtype": "F16", "shape": [..],
 *    "data_offsets": [begin, end]}, ...}
 * then the data, offsets counted from the byte after the header.  Every
 * range must lie inside the file, match dtype x shape exactly and not
 * overlap another. */
#include "ckpt/ckpt_internal.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

static int dtype_from(const char *s) {
    for (int d = 0; d < CKPT_DTYPE_COUNT; d++)
        if (!strcmp(ckpt_dtype_name(d), s)) return d;
    return -1;
}

static int get_u64(json_t *v, uint64_t *out) {
    if (!json_is_integer(v) || json_integer_value(v) < 0) return -1;
    *out = (uint64_t)json_integer_value(v);
    return 0;
}

kiln_status ckpt_read_safetensors(ckpt_file *f) {
    if (f->len < 8) {
        return base_fail(KILN_ERR_FORMAT, "not a checkpoint: %zu bytes (neither a ZIP nor a safetensors header)",
                         f->len);
    }
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = hlen << 8 | f->data[i];
    if (hlen < 2 || hlen > f->len - 8 || hlen > CKPT_MAX_HEADER) {
        return base_fail(KILN_ERR_FORMAT, "not a safetensors file: header length %llu for a file of %zu bytes",
                         (unsigned long long)hlen, f->len);
    }
    if (f->data[8] != '{') {
        return base_fail(KILN_ERR_FORMAT, "not a safetensors file: the header does not start with '{'");
    }
    json_error_t je;
    json_t *root = json_loadb((const char *)f->data + 8, (size_t)hlen, JSON_REJECT_DUPLICATES, &je);
    if (!root || !json_is_object(root)) {
        json_decref(root);
        return base_fail(KILN_ERR_FORMAT, "safetensors header: %s", root ? "not a JSON object" : je.text);
    }
    const uint8_t *base = f->data + 8 + hlen;
    const uint64_t data_len = f->len - 8 - hlen;
    size_t n = json_object_size(root), strbytes = 0;
    json_t *meta = json_object_get(root, "__metadata__");
    if (meta && !json_is_object(meta)) {
        json_decref(root);
        return base_fail(KILN_ERR_FORMAT, "safetensors __metadata__ is not an object");
    }
    const char *key;
    json_t *val;
    json_object_foreach(root, key, val) strbytes += strlen(key) + 1;
    if (meta) json_object_foreach(meta, key, val) {
            if (!json_is_string(val)) {
                /* the message first: key lives in root */
                const kiln_status st =
                    base_fail(KILN_ERR_FORMAT, "safetensors __metadata__ value of '%s' is not a string", key);
                json_decref(root);
                return st;
            }
            strbytes += strlen(key) + strlen(json_string_value(val)) + 2;
        }
    if (n > CKPT_MAX_TENSORS) {
        json_decref(root);
        return base_fail(KILN_ERR_FORMAT, "safetensors header lists %zu entries (more than %d)", n, CKPT_MAX_TENSORS);
    }
    f->tensors = calloc(n ? n : 1, sizeof *f->tensors);
    f->strings = malloc(strbytes ? strbytes : 1);
    f->meta = meta ? calloc(2 * json_object_size(meta) + 1, sizeof *f->meta) : NULL;
    if (!f->tensors || !f->strings || (meta && !f->meta)) {
        json_decref(root);
        return base_fail(KILN_ERR_NOMEM, "out of memory");
    }
    char *sp = f->strings;
    kiln_status rc = KILN_OK;
    if (meta) json_object_foreach(meta, key, val) {
            size_t kl = strlen(key) + 1, vl = strlen(json_string_value(val)) + 1;
            f->meta[2 * f->n_meta] = memcpy(sp, key, kl);
            f->meta[2 * f->n_meta + 1] = memcpy(sp + kl, json_string_value(val), vl);
            sp += kl + vl;
            f->n_meta++;
        }
    json_object_foreach(root, key, val) {
        if (!strcmp(key, "__metadata__")) continue;
        ckpt_tensor *t = &f->tensors[f->n];
        json_t *dt = json_object_get(val, "dtype"), *sh = json_object_get(val, "shape"),
               *off = json_object_get(val, "data_offsets");
        uint64_t b, e;
        if (!json_is_object(val) || !json_is_string(dt) || !json_is_array(sh) || !json_is_array(off) ||
            json_array_size(off) != 2 || get_u64(json_array_get(off, 0), &b) || get_u64(json_array_get(off, 1), &e)) {
            rc = base_fail(KILN_ERR_FORMAT, "tensor '%s': needs dtype, shape and data_offsets [begin, end]", key);
            break;
        }
        t->dtype = dtype_from(json_string_value(dt));
        if (t->dtype < 0) {
            rc = base_fail(KILN_ERR_FORMAT, "tensor '%s': unknown dtype '%s'", key, json_string_value(dt));
            break;
        }
        if (json_array_size(sh) > CKPT_MAX_DIMS) {
            rc = base_fail(KILN_ERR_FORMAT, "tensor '%s': %zu dimensions (at most %d)", key, json_array_size(sh),
                           CKPT_MAX_DIMS);
            break;
        }
        t->n_dims = (int)json_array_size(sh);
        uint64_t numel = 1, bytes;
        for (int d = 0; d < t->n_dims && !rc; d++) {
            uint64_t s = 0;
            if (get_u64(json_array_get(sh, (size_t)d), &s) || base_mul_u64(numel, s, &numel) ||
                numel > ((uint64_t)1 << 50)) {
                rc = base_fail(KILN_ERR_FORMAT, "tensor '%s': bad shape", key);
            }
            t->shape[d] = (int64_t)s;
        }
        if (rc) break;
        bytes = numel * (uint64_t)ckpt_dtype_size(t->dtype);
        if (b > e || e > data_len || e - b != bytes) {
            rc = base_fail(KILN_ERR_FORMAT,
                           "tensor '%s': data_offsets [%llu, %llu] do not hold %llu bytes within the %llu of data", key,
                           (unsigned long long)b, (unsigned long long)e, (unsigned long long)bytes,
                           (unsigned long long)data_len);
            break;
        }
        t->numel = (int64_t)numel;
        t->nbytes = bytes;
        t->data = base + b;
        if (((uintptr_t)t->data) % (uintptr_t)ckpt_dtype_size(t->dtype)) {
            rc = base_fail(KILN_ERR_FORMAT, "tensor '%s': data at offset %llu is not aligned to its %d-byte elements",
                           key, (unsigned long long)b, ckpt_dtype_size(t->dtype));
            break;
        }
        size_t kl = strlen(key) + 1;
        t->name = memcpy(sp, key, kl);
        sp += kl;
        f->n++;
    }
    json_decref(root);
    if (rc || (rc = ckpt_finish(f))) return rc;
    /* ranges in data order must not overlap (empty tensors take none) */
    const uint8_t *end = base;
    for (int i = 0; i < f->n; i++) {
        const ckpt_tensor *t = &f->tensors[i];
        if (!t->nbytes) continue;
        if ((const uint8_t *)t->data < end) {
            return base_fail(KILN_ERR_FORMAT, "tensor '%s' overlaps the tensor before it", t->name);
        }
        end = (const uint8_t *)t->data + t->nbytes;
    }
    return 0;
}
