/* torch.save's ZIP archive.  libzip opens and checks the archive (central
 * directory against local headers) and reads PREFIX/data.pkl; the pickle
 * goes to the restricted interpreter (pickle.c); each storage it names must
 * be a stored, uncompressed entry PREFIX/data/KEY of exactly its size.
 *
 * libzip has no call that tells where an entry's bytes start in the file,
 * which mapping them needs, so locate() reads that from the central
 * directory and the local header (both bounds-checked against the file,
 * and their names checked against libzip's), and the tensors point into
 * the mapping. */
#include "ckpt/ckpt_internal.h"

#include <stdlib.h>
#include <string.h>
#include <zip.h>

static uint32_t le16(const uint8_t *p) { return (uint32_t)p[0] | (uint32_t)p[1] << 8; }
static uint32_t le32(const uint8_t *p) { return le16(p) | le16(p + 2) << 16; }
static uint64_t le64(const uint8_t *p) { return (uint64_t)le32(p) | (uint64_t)le32(p + 4) << 32; }

/* The central directory: its offset, size and entry count. */
static int find_cd(const uint8_t *d, size_t len, uint64_t *off, uint64_t *size, uint64_t *count) {
    if (len < 22) return -1;
    size_t lo = len > 22 + 65535 ? len - 22 - 65535 : 0;
    for (size_t e = len - 22 + 1; e-- > lo;) {
        if (le32(d + e) != 0x06054b50) continue;
        *count = le16(d + e + 10);
        *size = le32(d + e + 12);
        *off = le32(d + e + 16);
        if ((*count == 0xFFFF || *size == 0xFFFFFFFF || *off == 0xFFFFFFFF) && e >= 20 &&
            le32(d + e - 20) == 0x07064b50) { /* ZIP64 end record through its locator */
            uint64_t z = le64(d + e - 20 + 8);
            if (z > len || len - z < 56 || le32(d + z) != 0x06064b50) return -1;
            *count = le64(d + z + 32);
            *size = le64(d + z + 40);
            *off = le64(d + z + 48);
        }
        return *off <= len && *size <= len - *off ? 0 : -1;
    }
    return -1;
}

/* File offset of the data of entry index (central directory order), whose
 * name libzip reports as name; 0 on a mismatch. */
typedef struct cd_index {
    uint64_t *lho; /* local header offset per entry */
    uint64_t n;
} cd_index;

static kiln_status build_index(const uint8_t *d, size_t len, cd_index *ix) {
    uint64_t off, size, count;
    if (find_cd(d, len, &off, &size, &count)) {
        return base_fail(KILN_ERR_FORMAT, "ZIP central directory not found or out of range");
    }
    if (count > CKPT_MAX_ENTRIES || count > size / 46) {
        return base_fail(KILN_ERR_FORMAT, "ZIP central directory claims %llu entries", (unsigned long long)count);
    }
    ix->n = count;
    ix->lho = malloc((size_t)(count ? count : 1) * sizeof *ix->lho);
    if (!ix->lho) { return base_fail(KILN_ERR_NOMEM, "out of memory"); }
    uint64_t p = off, end = off + size;
    for (uint64_t i = 0; i < count; i++) {
        if (end - p < 46 || le32(d + p) != 0x02014b50) {
            return base_fail(KILN_ERR_FORMAT, "ZIP central directory entry %llu is malformed", (unsigned long long)i);
        }
        uint32_t nl = le16(d + p + 28), xl = le16(d + p + 30), cl = le16(d + p + 32);
        uint64_t lho = le32(d + p + 42);
        if (end - p - 46 < (uint64_t)nl + xl + cl) {
            return base_fail(KILN_ERR_FORMAT, "ZIP central directory entry %llu runs past the directory",
                             (unsigned long long)i);
        }
        if (lho == 0xFFFFFFFF) { /* ZIP64 extra field: sizes first when they overflowed */
            const uint8_t *x = d + p + 46 + nl, *xe = x + xl;
            int skip = (le32(d + p + 24) == 0xFFFFFFFF) + (le32(d + p + 20) == 0xFFFFFFFF);
            int found = 0;
            while (xe - x >= 4) {
                uint32_t id = le16(x), sz = le16(x + 2);
                if ((size_t)(xe - x - 4) < sz) break;
                if (id == 1 && sz >= 8u * (uint32_t)(skip + 1)) {
                    lho = le64(x + 4 + 8 * skip);
                    found = 1;
                    break;
                }
                x += 4 + sz;
            }
            if (!found) {
                return base_fail(KILN_ERR_FORMAT, "ZIP entry %llu has no ZIP64 offset", (unsigned long long)i);
            }
        }
        ix->lho[i] = lho;
        p += 46 + (uint64_t)nl + xl + cl;
    }
    return 0;
}

static uint64_t locate(const uint8_t *d, size_t len, const cd_index *ix, zip_uint64_t index, const char *name,
                       uint64_t size) {
    if (index >= ix->n) return 0;
    uint64_t h = ix->lho[index];
    size_t nl = strlen(name);
    if (h > len || len - h < 30 || le32(d + h) != 0x04034b50) return 0;
    if (le16(d + h + 26) != nl || len - h - 30 < nl || memcmp(d + h + 30, name, nl)) return 0;
    uint64_t data = h + 30 + nl + le16(d + h + 28);
    if (data > len || len - data < size) return 0;
    return data;
}

static kiln_status zfail(const char *what, zip_error_t *ze) {
    return base_fail(KILN_ERR_FORMAT, "%s: %s", what, zip_error_strerror(ze));
}

/* Reads a whole (small) entry into a malloc'd buffer. */
static kiln_status read_entry(zip_t *za, zip_uint64_t i, uint64_t size, uint8_t **out) {
    *out = NULL;
    zip_file_t *zf = zip_fopen_index(za, i, 0);
    if (!zf) return zfail("cannot open data.pkl", zip_get_error(za));
    uint8_t *buf = malloc(size ? size : 1);
    zip_int64_t got = buf ? zip_fread(zf, buf, size) : -1;
    if (got < 0 || (uint64_t)got != size) {
        kiln_status st =
            buf ? zfail("cannot read data.pkl", zip_file_get_error(zf)) : base_fail(KILN_ERR_NOMEM, "out of memory");
        free(buf);
        zip_fclose(zf);
        return st;
    }
    zip_fclose(zf);
    *out = buf;
    return KILN_OK;
}

static int by_key(const void *a, const void *b) {
    return strcmp((*(const ckpt_pkl_tensor *const *)a)->storage_key, (*(const ckpt_pkl_tensor *const *)b)->storage_key);
}

/* Views of one storage must agree on its type and size. */
static kiln_status storages_agree(const ckpt_pkl_result *pr) {
    const ckpt_pkl_tensor **v = malloc((size_t)(pr->n ? pr->n : 1) * sizeof *v);
    if (!v) { return base_fail(KILN_ERR_NOMEM, "out of memory"); }
    for (int i = 0; i < pr->n; i++) v[i] = &pr->tensors[i];
    qsort(v, (size_t)pr->n, sizeof *v, by_key);
    kiln_status rc = KILN_OK;
    for (int i = 1; i < pr->n && !rc; i++)
        if (!strcmp(v[i - 1]->storage_key, v[i]->storage_key) &&
            (v[i - 1]->dtype != v[i]->dtype || v[i - 1]->storage_numel != v[i]->storage_numel)) {
            rc = base_fail(KILN_ERR_FORMAT, "storage %s is declared twice with different types or sizes",
                           v[i]->storage_key);
        }
    free(v);
    return rc;
}

kiln_status ckpt_read_torchzip(ckpt_file *f) {
    zip_error_t ze;
    zip_error_init(&ze);
    zip_source_t *src = zip_source_buffer_create(f->data, f->len, 0, &ze);
    if (!src) return zfail("not a readable ZIP", &ze);
    zip_t *za = zip_open_from_source(src, ZIP_RDONLY | ZIP_CHECKCONS, &ze);
    if (!za) {
        zip_source_free(src);
        kiln_status rc = zfail("not a readable ZIP", &ze);
        zip_error_fini(&ze);
        return rc;
    }
    zip_error_fini(&ze);
    kiln_status rc = KILN_ERR_FORMAT;
    cd_index ix = {NULL, 0};
    ckpt_pkl_result pr = {NULL, 0, NULL};
    uint8_t *pkl = NULL;
    char prefix[256] = "", name[512];
    zip_int64_t n = zip_get_num_entries(za, 0), pkl_index = -1;
    if (n < 0 || n > CKPT_MAX_ENTRIES) {
        rc = base_fail(KILN_ERR_FORMAT, "the ZIP has %lld entries", (long long)n);
        goto done;
    }
    for (zip_int64_t i = 0; i < n; i++) {
        const char *nm = zip_get_name(za, (zip_uint64_t)i, ZIP_FL_ENC_RAW);
        if (!nm) continue;
        size_t l = strlen(nm);
        const char *slash = strchr(nm, '/');
        int top = l >= 8 && !strcmp(nm + l - 8, "data.pkl") &&
                  ((l == 8) || (slash && slash == nm + l - 9 && l - 9 < sizeof prefix - 1));
        if (!top) continue;
        if (pkl_index >= 0) {
            rc = base_fail(KILN_ERR_FORMAT, "the ZIP holds more than one data.pkl");
            goto done;
        }
        pkl_index = i;
        memcpy(prefix, nm, l - 8);
        prefix[l - 8] = 0;
    }
    if (pkl_index < 0) {
        rc = base_fail(KILN_ERR_FORMAT, "not a PyTorch checkpoint: the ZIP has no data.pkl");
        goto done;
    }
    zip_stat_t zs;
    if (zip_stat_index(za, (zip_uint64_t)pkl_index, 0, &zs) || !(zs.valid & ZIP_STAT_SIZE)) {
        rc = zfail("data.pkl", zip_get_error(za));
        goto done;
    }
    if (zs.size > CKPT_MAX_PICKLE) {
        rc = base_fail(KILN_ERR_FORMAT, "data.pkl is %llu bytes (more than %u)", (unsigned long long)zs.size,
                       CKPT_MAX_PICKLE);
        goto done;
    }
    /* the byte order record, when there is one, must say little-endian */
    snprintf(name, sizeof name, "%sbyteorder", prefix);
    zip_int64_t bo = zip_name_locate(za, name, ZIP_FL_ENC_RAW);
    if (bo >= 0) {
        zip_stat_t bs;
        uint8_t *b = NULL;
        if (!zip_stat_index(za, (zip_uint64_t)bo, 0, &bs) && bs.size <= 16)
            read_entry(za, (zip_uint64_t)bo, bs.size, &b);
        int little = b && bs.size == 6 && !memcmp(b, "little", 6);
        free(b);
        if (!little) {
            rc = base_fail(KILN_ERR_FORMAT, "the checkpoint's byte order is not little-endian");
            goto done;
        }
    }
    if ((rc = read_entry(za, (zip_uint64_t)pkl_index, zs.size, &pkl))) goto done;
    if ((rc = ckpt_pickle_state_dict(pkl, (size_t)zs.size, &pr))) goto done;
    if (pr.n > CKPT_MAX_TENSORS) {
        rc = base_fail(KILN_ERR_FORMAT, "the state dictionary holds %d tensors (more than %d)", pr.n, CKPT_MAX_TENSORS);
        goto done;
    }
    if ((rc = storages_agree(&pr)) || (rc = build_index(f->data, f->len, &ix))) goto done;
    size_t strbytes = 0;
    for (int i = 0; i < pr.n; i++) strbytes += strlen(pr.tensors[i].name) + 1;
    f->tensors = calloc((size_t)pr.n, sizeof *f->tensors);
    f->strings = malloc(strbytes ? strbytes : 1);
    if (!f->tensors || !f->strings) {
        rc = base_fail(KILN_ERR_NOMEM, "out of memory");
        goto done;
    }
    char *sp = f->strings;
    for (int i = 0; i < pr.n; i++) {
        const ckpt_pkl_tensor *pt = &pr.tensors[i];
        ckpt_tensor *t = &f->tensors[i];
        const int es = ckpt_dtype_size(pt->dtype);
        if (snprintf(name, sizeof name, "%sdata/%s", prefix, pt->storage_key) >= (int)sizeof name) {
            rc = base_fail(KILN_ERR_FORMAT, "tensor '%s': storage name too long", pt->name);
            goto done;
        }
        zip_int64_t e = zip_name_locate(za, name, ZIP_FL_ENC_RAW);
        if (e < 0) {
            rc = base_fail(KILN_ERR_FORMAT, "tensor '%s': storage %s is missing from the archive", pt->name, name);
            goto done;
        }
        zip_stat_t st;
        uint64_t want;
        if (zip_stat_index(za, (zip_uint64_t)e, 0, &st) || !(st.valid & ZIP_STAT_SIZE) ||
            !(st.valid & ZIP_STAT_COMP_METHOD)) {
            rc = zfail(name, zip_get_error(za));
            goto done;
        }
        if (st.comp_method != ZIP_CM_STORE ||
            ((st.valid & ZIP_STAT_ENCRYPTION_METHOD) && st.encryption_method != ZIP_EM_NONE)) {
            rc = base_fail(KILN_ERR_FORMAT,
                           "tensor '%s': storage %s is compressed or encrypted (torch.save stores them raw)", pt->name,
                           name);
            goto done;
        }
        if (base_mul_u64((uint64_t)pt->storage_numel, (uint64_t)es, &want) || want != st.size) {
            rc = base_fail(KILN_ERR_FORMAT,
                           "tensor '%s': storage %s declares %lld elements of %d bytes but holds %llu bytes", pt->name,
                           name, (long long)pt->storage_numel, es, (unsigned long long)st.size);
            goto done;
        }
        uint64_t at = locate(f->data, f->len, &ix, (zip_uint64_t)e, name, st.size);
        if (!at) {
            rc = base_fail(KILN_ERR_FORMAT, "tensor '%s': cannot locate the bytes of %s in the file", pt->name, name);
            goto done;
        }
        if ((uintptr_t)(f->data + at) % (uintptr_t)es) {
            rc = base_fail(KILN_ERR_FORMAT, "tensor '%s': storage %s is not aligned to its %d-byte elements", pt->name,
                           name, es);
            goto done;
        }
        size_t kl = strlen(pt->name) + 1;
        t->name = memcpy(sp, pt->name, kl);
        sp += kl;
        t->dtype = pt->dtype;
        t->n_dims = pt->n_dims;
        memcpy(t->shape, pt->shape, sizeof t->shape);
        t->numel = pt->numel;
        t->nbytes = (uint64_t)pt->numel * (uint64_t)es; /* within the storage: checked by the interpreter */
        t->data = f->data + at + (uint64_t)pt->offset * (uint64_t)es;
        f->n++;
    }
    rc = ckpt_finish(f);
done:
    free(ix.lho);
    free(pkl);
    ckpt_pickle_free(&pr);
    zip_discard(za);
    return rc;
}
