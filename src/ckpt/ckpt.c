/* Opening a checkpoint: format detection, the name index, accessors. */
#include "ckpt/ckpt_internal.h"

#include "quant/quant.h"

#include <stdlib.h>
#include <string.h>

static const struct {
    const char *name;
    int size;
} dtypes[CKPT_DTYPE_COUNT] = {
    [CKPT_F32] = {"F32", 4},   [CKPT_F16] = {"F16", 2},         [CKPT_BF16] = {"BF16", 2},
    [CKPT_F64] = {"F64", 8},   [CKPT_I64] = {"I64", 8},         [CKPT_I32] = {"I32", 4},
    [CKPT_I16] = {"I16", 2},   [CKPT_I8] = {"I8", 1},           [CKPT_U8] = {"U8", 1},
    [CKPT_BOOL] = {"BOOL", 1}, [CKPT_F8_E4M3] = {"F8_E4M3", 1}, [CKPT_F8_E5M2] = {"F8_E5M2", 1},
};

const char *ckpt_dtype_name(int dtype) { return dtype >= 0 && dtype < CKPT_DTYPE_COUNT ? dtypes[dtype].name : "?"; }
int ckpt_dtype_size(int dtype) { return dtype >= 0 && dtype < CKPT_DTYPE_COUNT ? dtypes[dtype].size : 0; }

int ckpt_dtype_kq(int dtype) {
    switch (dtype) {
    case CKPT_F32: return QUANT_F32;
    case CKPT_F16: return QUANT_F16;
    case CKPT_BF16: return QUANT_BF16;
    default: return -1;
    }
}

const char *ckpt_format_name(int format) { return format == CKPT_TORCH_ZIP ? "pytorch-zip" : "safetensors"; }

static int by_addr(const void *a, const void *b) {
    const ckpt_tensor *x = a, *y = b;
    if (x->data != y->data) return (const uint8_t *)x->data < (const uint8_t *)y->data ? -1 : 1;
    return x->nbytes < y->nbytes ? -1 : x->nbytes > y->nbytes;
}

typedef struct named {
    const char *name;
    int idx;
} named;

static int by_name(const void *a, const void *b) { return strcmp(((const named *)a)->name, ((const named *)b)->name); }

kiln_status ckpt_finish(ckpt_file *f) {
    if (f->n > 1) qsort(f->tensors, (size_t)f->n, sizeof *f->tensors, by_addr);
    f->by_name = malloc((size_t)(f->n ? f->n : 1) * sizeof *f->by_name);
    named *tmp = malloc((size_t)(f->n ? f->n : 1) * sizeof *tmp);
    if (!f->by_name || !tmp) {
        free(tmp);
        return base_fail(KILN_ERR_NOMEM, "out of memory");
    }
    for (int i = 0; i < f->n; i++) tmp[i] = (named){f->tensors[i].name, i};
    if (f->n > 1) qsort(tmp, (size_t)f->n, sizeof *tmp, by_name);
    for (int i = 0; i < f->n; i++) f->by_name[i] = tmp[i].idx;
    free(tmp);
    for (int i = 1; i < f->n; i++)
        if (!strcmp(f->tensors[f->by_name[i - 1]].name, f->tensors[f->by_name[i]].name)) {
            return base_fail(KILN_ERR_FORMAT, "tensor '%s' appears twice", f->tensors[f->by_name[i]].name);
        }
    return KILN_OK;
}

static kiln_status open_bytes(ckpt_file *f, ckpt_file **out) {
    kiln_status st;
    if (f->len >= 4 && !memcmp(f->data, "PK\x03\x04", 4)) {
        f->format = CKPT_TORCH_ZIP;
        st = ckpt_read_torchzip(f);
    } else {
        f->format = CKPT_SAFETENSORS;
        st = ckpt_read_safetensors(f);
    }
    if (st) {
        ckpt_close(f);
        return st;
    }
    *out = f;
    return KILN_OK;
}

kiln_status ckpt_open(const char *path, ckpt_file **out) {
    *out = NULL;
    ckpt_file *f = calloc(1, sizeof *f);
    if (!f) return base_fail(KILN_ERR_NOMEM, "out of memory");
    kiln_status st = base_map_file(path, &f->map);
    if (st) {
        free(f);
        return st;
    }
    f->data = f->map.addr;
    f->len = f->map.len;
    st = open_bytes(f, out);
    if (st) return base_fail(st, "%s: %s", path, kiln_last_error());
    return KILN_OK;
}

kiln_status ckpt_open_memory(const void *data, size_t len, ckpt_file **out) {
    *out = NULL;
    ckpt_file *f = calloc(1, sizeof *f);
    if (!f) return base_fail(KILN_ERR_NOMEM, "out of memory");
    f->data = data;
    f->len = len;
    return open_bytes(f, out);
}

void ckpt_close(ckpt_file *f) {
    if (!f) return;
    if (f->map.addr) base_unmap(&f->map);
    free(f->tensors);
    free(f->by_name);
    free(f->strings);
    free(f->meta);
    free(f);
}

int ckpt_format(const ckpt_file *f) { return f->format; }
uint64_t ckpt_file_size(const ckpt_file *f) { return f->len; }
int ckpt_n_tensors(const ckpt_file *f) { return f->n; }
const ckpt_tensor *ckpt_tensor_at(const ckpt_file *f, int i) { return i >= 0 && i < f->n ? &f->tensors[i] : NULL; }

const ckpt_tensor *ckpt_find(const ckpt_file *f, const char *name) {
    int lo = 0, hi = f->n - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        int c = strcmp(f->tensors[f->by_name[mid]].name, name);
        if (!c) return &f->tensors[f->by_name[mid]];
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid - 1;
    }
    return NULL;
}

const char *ckpt_meta(const ckpt_file *f, const char *key) {
    for (int i = 0; i < f->n_meta; i++)
        if (!strcmp(f->meta[2 * i], key)) return f->meta[2 * i + 1];
    return NULL;
}
