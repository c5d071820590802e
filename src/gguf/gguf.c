/* GGUF reader (validating, over mmap) and writer.  See gguf.h for the layout. */
#include "gguf/gguf.h"

#include "base/base.h"
#include "quant/quant.h"

#include <errno.h>
#include <fcntl.h>
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define GGUF_MAGIC 0x46554747u /* "GGUF" read as little-endian u32 */
#define GGUF_DEFAULT_ALIGN 32
#define GGUF_MAX_SHARDS 256
#define GGUF_MAX_KEY 65535

typedef struct shard {
    base_map map;        /* empty for gguf_open_memory */
    const uint8_t *base; /* start of the image */
    uint64_t size;       /* of the file */
    uint64_t avail;      /* bytes of it at base: all, or a prefix (gguf_open_header) */
    int short_read;      /* parsing stopped only because the prefix ended */
    const uint8_t *data; /* start of the tensor data section */
    uint64_t data_size;
} shard;

struct gguf_file {
    uint32_t version;
    int n_shards;
    shard shards[GGUF_MAX_SHARDS];
    int n_kv;
    gguf_kv *kv;
    int n_tensors;
    gguf_tensor *tensors;
};

/* ---- reading cursor ---- */

typedef struct cur {
    const uint8_t *p, *end;
    kiln_status failed; /* KILN_OK until a read fails */
    uint64_t beyond;    /* bytes of the file after end: 0 unless a prefix is parsed */
    int *short_read;    /* set when only the prefix's end stopped the parse */
} cur;

static int need(cur *c, uint64_t n, const char *what) {
    if (c->failed) return -1;
    const uint64_t have = (uint64_t)(c->end - c->p);
    if (have < n) {
        if (n - have <= c->beyond) {
            *c->short_read = 1;
            c->failed = base_fail(KILN_ERR_FORMAT, "the header goes on past the bytes read (at %s)", what);
        } else {
            c->failed = base_fail(KILN_ERR_FORMAT, "truncated file while reading %s", what);
        }
        return -1;
    }
    return 0;
}

static uint32_t rd_u32(cur *c, const char *what) {
    uint32_t v = 0;
    if (need(c, 4, what)) return 0;
    memcpy(&v, c->p, 4);
    c->p += 4;
    return v;
}

static uint64_t rd_u64(cur *c, const char *what) {
    uint64_t v = 0;
    if (need(c, 8, what)) return 0;
    memcpy(&v, c->p, 8);
    c->p += 8;
    return v;
}

static gguf_str rd_str(cur *c, const char *what) {
    gguf_str s = {NULL, 0};
    uint64_t n = rd_u64(c, what);
    if (c->failed) return s;
    if (need(c, n, what)) return s;
    s.ptr = (const char *)c->p;
    s.len = n;
    c->p += n;
    return s;
}

size_t gguf_vtype_size(uint32_t t) {
    switch (t) {
    case GGUF_U8:
    case GGUF_I8:
    case GGUF_BOOL: return 1;
    case GGUF_U16:
    case GGUF_I16: return 2;
    case GGUF_U32:
    case GGUF_I32:
    case GGUF_F32: return 4;
    case GGUF_U64:
    case GGUF_I64:
    case GGUF_F64: return 8;
    default: return 0;
    }
}

const char *gguf_vtype_name(uint32_t t) {
    static const char *names[] = {"u8",   "i8",  "u16", "i16", "u32", "i32", "f32",
                                  "bool", "str", "arr", "u64", "i64", "f64"};
    return t < GGUF_VTYPE_COUNT ? names[t] : "?";
}

/* Parses one value of type t at the cursor into kv (data pointer, count). */
static int rd_value(cur *c, gguf_kv *kv, const char *key) {
    kv->data = c->p;
    kv->n = 1;
    if (kv->type == GGUF_STRING) {
        rd_str(c, key);
        return c->failed ? -1 : 0;
    }
    if (kv->type == GGUF_ARRAY) {
        kv->arr_type = rd_u32(c, key);
        uint64_t n = rd_u64(c, key);
        if (c->failed) return -1;
        kv->data = c->p;
        kv->n = n;
        if (kv->arr_type == GGUF_STRING) {
            /* each string takes at least its 8-byte length */
            if (n > ((uint64_t)(c->end - c->p) + c->beyond) / 8) {
                c->failed = base_fail(KILN_ERR_FORMAT, "key %s: array of %llu strings exceeds the file", key,
                                      (unsigned long long)n);
                return -1;
            }
            kv->str_off = malloc((n ? n : 1) * sizeof(uint64_t));
            if (!kv->str_off) {
                c->failed = base_fail(KILN_ERR_NOMEM, "out of memory");
                return -1;
            }
            for (uint64_t i = 0; i < n; i++) {
                kv->str_off[i] = (uint64_t)(c->p - kv->data);
                rd_str(c, key);
                if (c->failed) return -1;
            }
            return 0;
        }
        size_t es = gguf_vtype_size(kv->arr_type);
        if (es == 0) {
            c->failed = base_fail(KILN_ERR_FORMAT, "key %s: unsupported array element type %u", key, kv->arr_type);
            return -1;
        }
        uint64_t bytes;
        if (base_mul_u64(n, es, &bytes)) {
            c->failed = base_fail(KILN_ERR_FORMAT, "key %s: array size overflows", key);
            return -1;
        }
        if (need(c, bytes, key)) return -1;
        c->p += bytes;
        return 0;
    }
    size_t sz = gguf_vtype_size(kv->type);
    if (sz == 0) {
        c->failed = base_fail(KILN_ERR_FORMAT, "key %s: unknown value type %u", key, kv->type);
        return -1;
    }
    if (need(c, sz, key)) return -1;
    c->p += sz;
    return 0;
}

static char *dup_str(gguf_str s) {
    char *r = malloc(s.len + 1);
    if (!r) return NULL;
    memcpy(r, s.ptr, s.len);
    r[s.len] = 0;
    return r;
}

static void free_contents(gguf_file *f) {
    for (int i = 0; i < f->n_kv; i++) {
        free(f->kv[i].key);
        free(f->kv[i].str_off);
    }
    free(f->kv);
    for (int i = 0; i < f->n_tensors; i++) free(f->tensors[i].name);
    free(f->tensors);
    for (int i = 0; i < f->n_shards; i++) base_unmap(&f->shards[i].map);
}

/* Parses shard si of f (its base/size already set).  Metadata is kept only
 * for shard 0; tensors are appended. */
static kiln_status parse_shard(gguf_file *f, int si) {
    shard *sh = &f->shards[si];
    if (!sh->avail || sh->avail > sh->size) sh->avail = sh->size;
    cur c = {sh->base, sh->base + sh->avail, KILN_OK, sh->size - sh->avail, &sh->short_read};
    uint32_t magic = rd_u32(&c, "magic");
    if (c.failed) return c.failed;
    if (magic != GGUF_MAGIC) { return base_fail(KILN_ERR_FORMAT, "not a GGUF file (bad magic)"); }
    uint32_t version = rd_u32(&c, "version");
    if (c.failed) return c.failed;
    if (version < 2 || version > 3) {
        return base_fail(KILN_ERR_FORMAT, "unsupported GGUF version %u (kiln reads 2 and 3)", version);
    }
    uint64_t n_tensors = rd_u64(&c, "tensor count");
    uint64_t n_kv = rd_u64(&c, "metadata count");
    if (c.failed) return c.failed;
    uint64_t left = (uint64_t)(c.end - c.p) + c.beyond;
    /* a key/value takes at least 8 (key length) + 4 (type) + 1 bytes;
     * a tensor info at least 8 + 4 + 8 + 4 + 8 */
    if (n_kv > left / 13 || n_kv > 1000000) {
        return base_fail(KILN_ERR_FORMAT, "metadata count %llu is impossible for a file of %llu bytes",
                         (unsigned long long)n_kv, (unsigned long long)sh->size);
    }
    if (n_tensors > left / 32 || n_tensors > 1000000) {
        return base_fail(KILN_ERR_FORMAT, "tensor count %llu is impossible for a file of %llu bytes",
                         (unsigned long long)n_tensors, (unsigned long long)sh->size);
    }
    if (si == 0) f->version = version;

    uint64_t alignment = GGUF_DEFAULT_ALIGN;
    gguf_kv *kvs = calloc(n_kv ? n_kv : 1, sizeof *kvs);
    if (!kvs) { return base_fail(KILN_ERR_NOMEM, "out of memory"); }
    uint64_t nk = 0;
    int ok = 1;
    kiln_status st = KILN_ERR_FORMAT; /* why ok went 0, when no read failed */
    for (; nk < n_kv; nk++) {
        gguf_str key = rd_str(&c, "metadata key");
        if (c.failed) {
            ok = 0;
            break;
        }
        if (key.len == 0 || key.len > GGUF_MAX_KEY || memchr(key.ptr, 0, key.len)) {
            base_fail(KILN_ERR_FORMAT, "metadata key %llu has an invalid name", (unsigned long long)nk);
            ok = 0;
            break;
        }
        gguf_kv *kv = &kvs[nk];
        kv->key = dup_str(key);
        if (!kv->key) {
            st = base_fail(KILN_ERR_NOMEM, "out of memory");
            ok = 0;
            break;
        }
        for (uint64_t j = 0; j < nk; j++) {
            if (strcmp(kvs[j].key, kv->key) == 0) {
                base_fail(KILN_ERR_FORMAT, "duplicate metadata key %s", kv->key);
                ok = 0;
                break;
            }
        }
        if (!ok) {
            nk++;
            break;
        }
        kv->type = rd_u32(&c, kv->key);
        if (c.failed || rd_value(&c, kv, kv->key)) {
            ok = 0;
            nk++;
            break;
        }
        if (strcmp(kv->key, "general.alignment") == 0) {
            if (kv->type != GGUF_U32) {
                base_fail(KILN_ERR_FORMAT, "general.alignment must be u32");
                ok = 0;
                nk++;
                break;
            }
            uint32_t a;
            memcpy(&a, kv->data, 4);
            if (a == 0 || (a & (a - 1)) || a > (1u << 20)) {
                base_fail(KILN_ERR_FORMAT, "general.alignment %u is not a power of two", a);
                ok = 0;
                nk++;
                break;
            }
            alignment = a;
        }
    }
    if (si == 0) {
        f->kv = kvs;
        f->n_kv = (int)nk;
    } else {
        for (uint64_t j = 0; j < nk; j++) {
            free(kvs[j].key);
            free(kvs[j].str_off);
        }
        free(kvs);
    }
    if (!ok) return c.failed ? c.failed : st;

    int base_t = f->n_tensors;
    gguf_tensor *nt = realloc(f->tensors, (size_t)(base_t + n_tensors + 1) * sizeof *nt);
    if (!nt) { return base_fail(KILN_ERR_NOMEM, "out of memory"); }
    f->tensors = nt;
    for (uint64_t i = 0; i < n_tensors; i++) {
        gguf_tensor *t = &f->tensors[f->n_tensors];
        memset(t, 0, sizeof *t);
        gguf_str name = rd_str(&c, "tensor name");
        if (c.failed) return c.failed;
        if (name.len == 0 || name.len > 1024 || memchr(name.ptr, 0, name.len)) {
            return base_fail(KILN_ERR_FORMAT, "tensor %llu has an invalid name", (unsigned long long)i);
        }
        t->name = dup_str(name);
        if (!t->name) { return base_fail(KILN_ERR_NOMEM, "out of memory"); }
        f->n_tensors++;
        t->shard = si;
        t->n_dims = rd_u32(&c, t->name);
        if (c.failed) return c.failed;
        if (t->n_dims == 0 || t->n_dims > GGUF_MAX_DIMS) {
            return base_fail(KILN_ERR_FORMAT, "tensor %s: %u dimensions (1 to %d allowed)", t->name, t->n_dims,
                             GGUF_MAX_DIMS);
        }
        uint64_t nel = 1;
        for (int d = 0; d < GGUF_MAX_DIMS; d++) t->ne[d] = 1;
        for (uint32_t d = 0; d < t->n_dims; d++) {
            uint64_t ne = rd_u64(&c, t->name);
            if (c.failed) return c.failed;
            if (ne == 0 || ne > (1ull << 40) || base_mul_u64(nel, ne, &nel) || nel > (1ull << 48)) {
                return base_fail(KILN_ERR_FORMAT, "tensor %s: dimension %u of %llu is out of range", t->name, d,
                                 (unsigned long long)ne);
            }
            t->ne[d] = (int64_t)ne;
        }
        t->type = rd_u32(&c, t->name);
        t->offset = rd_u64(&c, t->name);
        if (c.failed) return c.failed;
        const quant_traits *tr = quant_get((int)t->type);
        if (!tr || !tr->name) {
            return base_fail(KILN_ERR_FORMAT, "tensor %s: unknown tensor type %u", t->name, t->type);
        }
        if (t->ne[0] % tr->blck != 0) {
            return base_fail(KILN_ERR_FORMAT, "tensor %s: row of %lld is not a multiple of the %s block size %d",
                             t->name, (long long)t->ne[0], tr->name, tr->blck);
        }
        uint64_t rows = (uint64_t)t->ne[1] * (uint64_t)t->ne[2] * (uint64_t)t->ne[3];
        if (base_mul_u64((uint64_t)(t->ne[0] / tr->blck), tr->bsize, &t->nbytes) ||
            base_mul_u64(t->nbytes, rows, &t->nbytes)) {
            return base_fail(KILN_ERR_FORMAT, "tensor %s: size overflows", t->name);
        }
        if (t->offset % alignment != 0) {
            return base_fail(KILN_ERR_FORMAT, "tensor %s: data offset %llu is not aligned to %llu", t->name,
                             (unsigned long long)t->offset, (unsigned long long)alignment);
        }
        for (int j = 0; j < f->n_tensors - 1; j++) {
            if (strcmp(f->tensors[j].name, t->name) == 0) {
                return base_fail(KILN_ERR_FORMAT, "duplicate tensor %s", t->name);
            }
        }
    }
    /* tensor data begins at the next multiple of the alignment */
    uint64_t pos = (uint64_t)(c.p - sh->base);
    uint64_t data_off = (pos + alignment - 1) / alignment * alignment;
    if (data_off > sh->size) {
        if (n_tensors > 0) { return base_fail(KILN_ERR_FORMAT, "truncated file: no tensor data section"); }
        data_off = sh->size;
    }
    /* a prefix holds no tensor data: its pointers stay NULL */
    sh->data = data_off <= sh->avail && sh->avail == sh->size ? sh->base + data_off : NULL;
    sh->data_size = sh->size - data_off;
    for (int i = base_t; i < f->n_tensors; i++) {
        gguf_tensor *t = &f->tensors[i];
        uint64_t endo;
        if (base_add_u64(t->offset, t->nbytes, &endo) || endo > sh->data_size) {
            return base_fail(KILN_ERR_FORMAT,
                             "tensor %s: data (offset %llu, %llu bytes) lies beyond the end of the file", t->name,
                             (unsigned long long)t->offset, (unsigned long long)t->nbytes);
        }
        t->data = sh->data ? sh->data + t->offset : NULL;
    }
    return 0;
}

static gguf_file *new_file(void) {
    gguf_file *f = calloc(1, sizeof *f);
    return f;
}

kiln_status gguf_open_header(const void *buf, size_t len, uint64_t file_size, int *more, gguf_file **out) {
    *more = 0;
    *out = NULL;
    if (len > file_size)
        return base_fail(KILN_ERR_FORMAT, "%zu bytes read of a file of %llu", len, (unsigned long long)file_size);
    gguf_file *f = new_file();
    if (!f) return base_fail(KILN_ERR_NOMEM, "out of memory");
    f->n_shards = 1;
    f->shards[0].base = buf;
    f->shards[0].size = file_size;
    f->shards[0].avail = len;
    kiln_status st = parse_shard(f, 0);
    if (st) {
        *more = f->shards[0].short_read;
        gguf_close(f);
        return st;
    }
    *out = f;
    return KILN_OK;
}

kiln_status gguf_open_memory(const void *buf, size_t len, gguf_file **out) {
    *out = NULL;
    gguf_file *f = new_file();
    if (!f) return base_fail(KILN_ERR_NOMEM, "out of memory");
    f->n_shards = 1;
    f->shards[0].base = buf;
    f->shards[0].size = len;
    kiln_status st = parse_shard(f, 0);
    if (st) {
        gguf_close(f);
        return st;
    }
    *out = f;
    return KILN_OK;
}

int gguf_split_name(const char *path, int *shard_no, size_t *prefix_len) {
    static const char tail[] = "-00000-of-00000.gguf";
    size_t n = strlen(path), tl = sizeof tail - 1;
    *shard_no = 1;
    *prefix_len = n >= 5 ? n - 5 : n;
    if (n < tl) return 1;
    const char *s = path + n - tl;
    int a = 0, b = 0;
    for (size_t i = 0; i < tl; i++) {
        char ch = (char)tolower((unsigned char)s[i]), pat = tail[i];
        if (pat == '0') {
            if (ch < '0' || ch > '9') return 1;
            if (i < 6)
                a = a * 10 + (ch - '0');
            else
                b = b * 10 + (ch - '0');
        } else if (ch != pat) {
            return 1;
        }
    }
    if (a < 1 || b < 1 || a > b) return 1;
    *shard_no = a;
    *prefix_len = n - tl;
    return b;
}

kiln_status gguf_open(const char *path, gguf_file **out) {
    *out = NULL;
    gguf_file *f = new_file();
    if (!f) return base_fail(KILN_ERR_NOMEM, "out of memory");
    kiln_status st = base_map_file(path, &f->shards[0].map);
    if (st) {
        free(f);
        return st;
    }
    f->n_shards = 1;
    f->shards[0].base = f->shards[0].map.addr;
    f->shards[0].size = f->shards[0].map.len;
    if ((st = parse_shard(f, 0))) {
        gguf_close(f);
        return base_fail(st, "%s: %s", path, kiln_last_error());
    }
    size_t plen;
    int shard_no;
    int count = gguf_split_name(path, &shard_no, &plen);
    int64_t meta_count = gguf_get_int(f, "split.count", 0);
    if (count > 1 || meta_count > 1) {
        if (shard_no != 1)
            st = base_fail(KILN_ERR_FORMAT, "%s: shard %d of a split model; open the first shard (-00001-of-%05d)",
                           path, shard_no, count);
        else if (meta_count > 0 && meta_count != count)
            st = base_fail(KILN_ERR_FORMAT, "%s: file name says %d shards, split.count says %lld", path, count,
                           (long long)meta_count);
        else if (count > GGUF_MAX_SHARDS)
            st = base_fail(KILN_ERR_FORMAT, "%s: %d shards (at most %d)", path, count, GGUF_MAX_SHARDS);
        for (int i = 2; !st && i <= count; i++) {
            char spath[4096];
            snprintf(spath, sizeof spath, "%.*s-%05d-of-%05d.gguf", (int)plen, path, i, count);
            shard *sh = &f->shards[f->n_shards];
            if ((st = base_map_file(spath, &sh->map))) {
                st = base_fail(st, "split model: missing shard: %s", kiln_last_error());
                break;
            }
            f->n_shards++;
            sh->base = sh->map.addr;
            sh->size = sh->map.len;
            if ((st = parse_shard(f, f->n_shards - 1))) st = base_fail(st, "%s: %s", spath, kiln_last_error());
        }
        if (st) {
            gguf_close(f);
            return st;
        }
    }
    *out = f;
    return KILN_OK;
}

void gguf_close(gguf_file *f) {
    if (!f) return;
    free_contents(f);
    free(f);
}

uint32_t gguf_version(const gguf_file *f) { return f->version; }
int gguf_n_kv(const gguf_file *f) { return f->n_kv; }
const gguf_kv *gguf_kv_at(const gguf_file *f, int i) { return (i >= 0 && i < f->n_kv) ? &f->kv[i] : NULL; }
int gguf_n_tensors(const gguf_file *f) { return f->n_tensors; }
const gguf_tensor *gguf_tensor_at(const gguf_file *f, int i) {
    return (i >= 0 && i < f->n_tensors) ? &f->tensors[i] : NULL;
}
int gguf_n_shards(const gguf_file *f) { return f->n_shards; }

uint64_t gguf_file_size(const gguf_file *f) {
    uint64_t s = 0;
    for (int i = 0; i < f->n_shards; i++) s += f->shards[i].size;
    return s;
}

void gguf_prefetch(const gguf_file *f) {
    for (int i = 0; i < f->n_shards; i++)
        if (f->shards[i].map.addr) madvise((void *)f->shards[i].map.addr, f->shards[i].map.len, MADV_WILLNEED);
}

const gguf_kv *gguf_find(const gguf_file *f, const char *key) {
    for (int i = 0; i < f->n_kv; i++)
        if (strcmp(f->kv[i].key, key) == 0) return &f->kv[i];
    return NULL;
}

const gguf_tensor *gguf_find_tensor(const gguf_file *f, const char *name) {
    for (int i = 0; i < f->n_tensors; i++)
        if (strcmp(f->tensors[i].name, name) == 0) return &f->tensors[i];
    return NULL;
}

static int scalar_int(uint32_t type, const uint8_t *p, int64_t *out) {
    switch (type) {
    case GGUF_U8: *out = *p; return 0;
    case GGUF_I8: *out = (int8_t)*p; return 0;
    case GGUF_BOOL: *out = *p != 0; return 0;
    case GGUF_U16: {
        uint16_t v;
        memcpy(&v, p, 2);
        *out = v;
        return 0;
    }
    case GGUF_I16: {
        int16_t v;
        memcpy(&v, p, 2);
        *out = v;
        return 0;
    }
    case GGUF_U32: {
        uint32_t v;
        memcpy(&v, p, 4);
        *out = v;
        return 0;
    }
    case GGUF_I32: {
        int32_t v;
        memcpy(&v, p, 4);
        *out = v;
        return 0;
    }
    case GGUF_U64: {
        uint64_t v;
        memcpy(&v, p, 8);
        if (v > INT64_MAX) return -1;
        *out = (int64_t)v;
        return 0;
    }
    case GGUF_I64: {
        int64_t v;
        memcpy(&v, p, 8);
        *out = v;
        return 0;
    }
    default: return -1;
    }
}

static int scalar_float(uint32_t type, const uint8_t *p, double *out) {
    if (type == GGUF_F32) {
        float v;
        memcpy(&v, p, 4);
        *out = v;
        return 0;
    }
    if (type == GGUF_F64) {
        double v;
        memcpy(&v, p, 8);
        *out = v;
        return 0;
    }
    int64_t i;
    if (scalar_int(type, p, &i) == 0) {
        *out = (double)i;
        return 0;
    }
    return -1;
}

int64_t gguf_get_int(const gguf_file *f, const char *key, int64_t def) {
    const gguf_kv *kv = gguf_find(f, key);
    int64_t v;
    if (!kv || kv->type == GGUF_ARRAY || kv->type == GGUF_STRING) return def;
    return scalar_int(kv->type, kv->data, &v) == 0 ? v : def;
}

double gguf_get_float(const gguf_file *f, const char *key, double def) {
    const gguf_kv *kv = gguf_find(f, key);
    double v;
    if (!kv || kv->type == GGUF_ARRAY || kv->type == GGUF_STRING) return def;
    return scalar_float(kv->type, kv->data, &v) == 0 ? v : def;
}

int gguf_get_bool(const gguf_file *f, const char *key, int def) {
    const gguf_kv *kv = gguf_find(f, key);
    if (!kv || kv->type != GGUF_BOOL) return def;
    return kv->data[0] != 0;
}

int gguf_get_str(const gguf_file *f, const char *key, gguf_str *out) {
    const gguf_kv *kv = gguf_find(f, key);
    if (!kv || kv->type != GGUF_STRING) return -1;
    uint64_t n;
    memcpy(&n, kv->data, 8);
    out->ptr = (const char *)kv->data + 8;
    out->len = n;
    return 0;
}

const char *gguf_get_cstr(const gguf_file *f, const char *key, char *buf, size_t cap, const char *def) {
    gguf_str s;
    if (gguf_get_str(f, key, &s) != 0) return def;
    size_t n = s.len < cap - 1 ? (size_t)s.len : cap - 1;
    memcpy(buf, s.ptr, n);
    buf[n] = 0;
    return buf;
}

gguf_str gguf_arr_str(const gguf_kv *kv, uint64_t i) {
    gguf_str s = {NULL, 0};
    if (kv->type != GGUF_ARRAY || kv->arr_type != GGUF_STRING || i >= kv->n) return s;
    const uint8_t *p = kv->data + kv->str_off[i];
    memcpy(&s.len, p, 8);
    s.ptr = (const char *)p + 8;
    return s;
}

double gguf_arr_float(const gguf_kv *kv, uint64_t i) {
    double v = 0;
    if (kv->type != GGUF_ARRAY || i >= kv->n) return 0;
    size_t es = gguf_vtype_size(kv->arr_type);
    if (!es || scalar_float(kv->arr_type, kv->data + i * es, &v)) return 0;
    return v;
}

int64_t gguf_arr_int(const gguf_kv *kv, uint64_t i) {
    int64_t v = 0;
    if (kv->type != GGUF_ARRAY || i >= kv->n) return 0;
    size_t es = gguf_vtype_size(kv->arr_type);
    if (!es || scalar_int(kv->arr_type, kv->data + i * es, &v)) return 0;
    return v;
}

/* ---------------------------------------------------------------- writer */

typedef struct wbuf {
    uint8_t *p;
    size_t len, cap;
    int oom;
} wbuf;

static void wb_put(wbuf *b, const void *src, size_t n) {
    if (b->oom) return;
    if (b->len + n > b->cap) {
        size_t nc = b->cap ? b->cap * 2 : 4096;
        while (nc < b->len + n) nc *= 2;
        uint8_t *np = realloc(b->p, nc);
        if (!np) {
            b->oom = 1;
            return;
        }
        b->p = np;
        b->cap = nc;
    }
    memcpy(b->p + b->len, src, n);
    b->len += n;
}

static void wb_u32(wbuf *b, uint32_t v) { wb_put(b, &v, 4); }
static void wb_u64(wbuf *b, uint64_t v) { wb_put(b, &v, 8); }
static void wb_str(wbuf *b, const char *s, size_t n) {
    wb_u64(b, n);
    wb_put(b, s, n);
}

typedef struct wtensor {
    char *name;
    uint32_t type;
    int n_dims;
    int64_t ne[GGUF_MAX_DIMS];
    const void *data;
    uint64_t nbytes, offset;
} wtensor;

struct gguf_writer {
    wbuf kv;
    uint64_t n_kv;
    wtensor *t;
    int n_t, cap_t;
    int oom;
};

gguf_writer *gguf_writer_new(void) { return calloc(1, sizeof(gguf_writer)); }

void gguf_writer_free(gguf_writer *w) {
    if (!w) return;
    free(w->kv.p);
    for (int i = 0; i < w->n_t; i++) free(w->t[i].name);
    free(w->t);
    free(w);
}

static void w_key(gguf_writer *w, const char *key, uint32_t type) {
    wb_str(&w->kv, key, strlen(key));
    wb_u32(&w->kv, type);
    w->n_kv++;
}

void gguf_w_u32(gguf_writer *w, const char *key, uint32_t v) {
    w_key(w, key, GGUF_U32);
    wb_u32(&w->kv, v);
}
void gguf_w_i32(gguf_writer *w, const char *key, int32_t v) {
    w_key(w, key, GGUF_I32);
    wb_put(&w->kv, &v, 4);
}
void gguf_w_u64(gguf_writer *w, const char *key, uint64_t v) {
    w_key(w, key, GGUF_U64);
    wb_u64(&w->kv, v);
}
void gguf_w_f32(gguf_writer *w, const char *key, float v) {
    w_key(w, key, GGUF_F32);
    wb_put(&w->kv, &v, 4);
}
void gguf_w_bool(gguf_writer *w, const char *key, int v) {
    uint8_t b = v ? 1 : 0;
    w_key(w, key, GGUF_BOOL);
    wb_put(&w->kv, &b, 1);
}
void gguf_w_str(gguf_writer *w, const char *key, const char *s, size_t len) {
    w_key(w, key, GGUF_STRING);
    wb_str(&w->kv, s, len);
}

void gguf_w_arr(gguf_writer *w, const char *key, uint32_t elem_type, const void *data, uint64_t n) {
    w_key(w, key, GGUF_ARRAY);
    wb_u32(&w->kv, elem_type);
    wb_u64(&w->kv, n);
    wb_put(&w->kv, data, (size_t)(n * gguf_vtype_size(elem_type)));
}

void gguf_w_copy_kv(gguf_writer *w, const gguf_kv *kv) {
    w_key(w, kv->key, kv->type);
    if (kv->type == GGUF_STRING) {
        uint64_t n;
        memcpy(&n, kv->data, 8);
        wb_put(&w->kv, kv->data, 8 + n);
    } else if (kv->type == GGUF_ARRAY) {
        wb_u32(&w->kv, kv->arr_type);
        wb_u64(&w->kv, kv->n);
        if (kv->arr_type == GGUF_STRING) {
            for (uint64_t i = 0; i < kv->n; i++) {
                gguf_str s = gguf_arr_str(kv, i);
                wb_str(&w->kv, s.ptr, s.len);
            }
        } else {
            wb_put(&w->kv, kv->data, (size_t)(kv->n * gguf_vtype_size(kv->arr_type)));
        }
    } else {
        wb_put(&w->kv, kv->data, gguf_vtype_size(kv->type));
    }
}

void gguf_w_tensor(gguf_writer *w, const char *name, uint32_t type, int n_dims, const int64_t *ne, const void *data) {
    if (w->n_t == w->cap_t) {
        int nc = w->cap_t ? w->cap_t * 2 : 64;
        wtensor *nt = realloc(w->t, (size_t)nc * sizeof *nt);
        if (!nt) {
            w->oom = 1;
            return;
        }
        w->t = nt;
        w->cap_t = nc;
    }
    wtensor *t = &w->t[w->n_t++];
    memset(t, 0, sizeof *t);
    t->name = strdup(name);
    if (!t->name) w->oom = 1;
    t->type = type;
    t->n_dims = n_dims;
    for (int d = 0; d < GGUF_MAX_DIMS; d++) t->ne[d] = d < n_dims ? ne[d] : 1;
    t->data = data;
    t->nbytes = quant_row_size((int)type, t->ne[0]) * (uint64_t)(t->ne[1] * t->ne[2] * t->ne[3]);
}

static int write_all(int fd, const void *p, size_t n) {
    const uint8_t *b = p;
    while (n) {
        ssize_t k = write(fd, b, n);
        if (k < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        b += k;
        n -= (size_t)k;
    }
    return 0;
}

kiln_status gguf_writer_save(gguf_writer *w, const char *path, gguf_produce_fn produce, void *ud) {
    if (w->oom || w->kv.oom) { return base_fail(KILN_ERR_NOMEM, "out of memory while building %s", path); }
    const uint64_t align = GGUF_DEFAULT_ALIGN;
    wbuf hdr = {0};
    wb_u32(&hdr, GGUF_MAGIC);
    wb_u32(&hdr, 3);
    wb_u64(&hdr, (uint64_t)w->n_t);
    wb_u64(&hdr, w->n_kv);
    wb_put(&hdr, w->kv.p, w->kv.len);
    uint64_t off = 0;
    for (int i = 0; i < w->n_t; i++) {
        wtensor *t = &w->t[i];
        wb_str(&hdr, t->name, strlen(t->name));
        wb_u32(&hdr, (uint32_t)t->n_dims);
        for (int d = 0; d < t->n_dims; d++) wb_u64(&hdr, (uint64_t)t->ne[d]);
        wb_u32(&hdr, t->type);
        t->offset = off;
        wb_u64(&hdr, off);
        off += (t->nbytes + align - 1) / align * align;
    }
    static const uint8_t zeros[GGUF_DEFAULT_ALIGN];
    wb_put(&hdr, zeros, (size_t)((align - hdr.len % align) % align));
    if (hdr.oom) {
        free(hdr.p);
        return base_fail(KILN_ERR_NOMEM, "out of memory while building %s", path);
    }
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp.%d", path, (int)getpid());
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        kiln_status st = base_fail(KILN_ERR_IO, "%s: %s", tmp, strerror(errno));
        free(hdr.p);
        return st;
    }
    kiln_status st = KILN_OK;
    if (write_all(fd, hdr.p, hdr.len)) st = base_fail(KILN_ERR_IO, "%s: write failed: %s", tmp, strerror(errno));
    free(hdr.p);
    void *scratch = NULL;
    size_t scratch_cap = 0;
    for (int i = 0; !st && i < w->n_t; i++) {
        wtensor *t = &w->t[i];
        const void *src = t->data;
        if (!src) {
            if (!produce) {
                st = base_fail(KILN_ERR_IO, "tensor %s has no data", t->name);
                break;
            }
            if (scratch_cap < t->nbytes) {
                free(scratch);
                scratch = malloc(t->nbytes);
                scratch_cap = scratch ? t->nbytes : 0;
                if (!scratch) {
                    st = base_fail(KILN_ERR_NOMEM, "out of memory");
                    break;
                }
            }
            if (produce(ud, i, scratch, t->nbytes)) {
                st = base_fail(KILN_ERR_IO, "could not produce data for tensor %s", t->name);
                break;
            }
            src = scratch;
        }
        if (write_all(fd, src, t->nbytes) || write_all(fd, zeros, (size_t)((align - t->nbytes % align) % align))) {
            st = base_fail(KILN_ERR_IO, "%s: write failed: %s", tmp, strerror(errno));
        }
    }
    free(scratch);
    if (!st && fsync(fd) != 0) { st = base_fail(KILN_ERR_IO, "%s: fsync failed: %s", tmp, strerror(errno)); }
    close(fd);
    if (!st && rename(tmp, path) != 0) {
        st = base_fail(KILN_ERR_IO, "rename to %s failed: %s", path, strerror(errno));
    }
    if (st) unlink(tmp);
    return st;
}
