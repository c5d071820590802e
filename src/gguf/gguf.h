/*
 * gguf — reader and writer for GGUF v2/v3 model files.
 *
 * On-disk layout (little-endian):
 *   u32 magic "GGUF" | u32 version | u64 n_tensors | u64 n_kv
 *   n_kv × { string key | u32 value type | value }
 *   n_tensors × { string name | u32 n_dims | u64 ne[n_dims] | u32 ggml type | u64 offset }
 *   padding to general.alignment (default 32) | tensor data
 * A string is u64 length + bytes (no NUL).  An array is u32 element type +
 * u64 count + elements.  ne[0] is the innermost (contiguous) dimension.
 *
 * The reader maps the file read-only and validates everything before use:
 * counts, lengths and offsets are checked against the file size, so a
 * truncated or hostile file yields an error message, never a crash or a huge
 * allocation.  Tensor data stays in the mapping (no copy).  A split model
 * (NAME-00001-of-0000N.gguf) opens as one: metadata from the first shard,
 * tensors from all.
 */
#ifndef KILN_GGUF_H
#define KILN_GGUF_H

#include "kiln.h"

#include <stddef.h>
#include <stdint.h>

enum gguf_vtype {
    GGUF_U8 = 0,
    GGUF_I8 = 1,
    GGUF_U16 = 2,
    GGUF_I16 = 3,
    GGUF_U32 = 4,
    GGUF_I32 = 5,
    GGUF_F32 = 6,
    GGUF_BOOL = 7,
    GGUF_STRING = 8,
    GGUF_ARRAY = 9,
    GGUF_U64 = 10,
    GGUF_I64 = 11,
    GGUF_F64 = 12,
    GGUF_VTYPE_COUNT
};

#define GGUF_MAX_DIMS 4

typedef struct gguf_str {
    const char *ptr; /* into the mapping, not NUL-terminated */
    uint64_t len;
} gguf_str;

typedef struct gguf_kv {
    char *key;           /* NUL-terminated copy */
    uint32_t type;       /* enum gguf_vtype */
    uint32_t arr_type;   /* element type when type == GGUF_ARRAY */
    uint64_t n;          /* element count for arrays, 1 otherwise */
    const uint8_t *data; /* value (or first array element) in the mapping */
    uint64_t *str_off;   /* string arrays: offset of element i from data */
} gguf_kv;

typedef struct gguf_tensor {
    char *name; /* NUL-terminated copy */
    uint32_t n_dims;
    int64_t ne[GGUF_MAX_DIMS]; /* unused dims are 1 */
    uint32_t type;             /* ggml type id, see quant.h */
    uint64_t offset;           /* from the shard's data section */
    const void *data;          /* in the mapping */
    uint64_t nbytes;
    int shard;
} gguf_tensor;

typedef struct gguf_file gguf_file;

/* Split-model names, PREFIX-00002-of-00005.gguf (case-insensitive): returns
 * the shard count and writes the shard's number (from 1) and the prefix's
 * length; for any other name returns 1, shard 1, and the length without the
 * last 5 characters (".gguf"). */
int gguf_split_name(const char *path, int *shard_no, size_t *prefix_len);
/* Opens and validates path (and its other shards) into *out; a failure
 * returns KILN_ERR_IO (the file can't be opened or mapped), _FORMAT or
 * _NOMEM with the last error naming the file and the problem. */
kiln_status gguf_open(const char *path, gguf_file **out);
/* Parses an in-memory image (no mapping; used by the fuzzer).  The buffer
 * must outlive the result. */
kiln_status gguf_open_memory(const void *buf, size_t len, gguf_file **out);
/* Parses the header of a file of file_size bytes from its first len bytes
 * (a Range read): metadata and tensor infos, every count and offset checked
 * against file_size; tensor data pointers are NULL.  When the header goes
 * on past len, fails with *more set (read more and call again). */
kiln_status gguf_open_header(const void *buf, size_t len, uint64_t file_size, int *more, gguf_file **out);
void gguf_close(gguf_file *f);

uint32_t gguf_version(const gguf_file *f);
int gguf_n_kv(const gguf_file *f);
const gguf_kv *gguf_kv_at(const gguf_file *f, int i);
const gguf_kv *gguf_find(const gguf_file *f, const char *key);
int gguf_n_tensors(const gguf_file *f);
const gguf_tensor *gguf_tensor_at(const gguf_file *f, int i);
const gguf_tensor *gguf_find_tensor(const gguf_file *f, const char *name);
int gguf_n_shards(const gguf_file *f);
uint64_t gguf_file_size(const gguf_file *f); /* sum over shards */
/* Advises the kernel to read the tensor data ahead (MADV_WILLNEED). */
void gguf_prefetch(const gguf_file *f);

/* Typed getters: return def when the key is missing or has another type.
 * Integer getters accept any integer type whose value fits. */
int64_t gguf_get_int(const gguf_file *f, const char *key, int64_t def);
double gguf_get_float(const gguf_file *f, const char *key, double def);
int gguf_get_bool(const gguf_file *f, const char *key, int def);
/* String value; returns 0 and sets *out when present. */
int gguf_get_str(const gguf_file *f, const char *key, gguf_str *out);
/* Copies a string value into buf (NUL-terminated, truncated to cap-1);
 * returns buf, or def when missing. */
const char *gguf_get_cstr(const gguf_file *f, const char *key, char *buf, size_t cap, const char *def);

/* Array element access (no bounds checks beyond assert; check kv->n). */
gguf_str gguf_arr_str(const gguf_kv *kv, uint64_t i);
double gguf_arr_float(const gguf_kv *kv, uint64_t i);
int64_t gguf_arr_int(const gguf_kv *kv, uint64_t i);

const char *gguf_vtype_name(uint32_t t);
size_t gguf_vtype_size(uint32_t t); /* 0 for string/array */

/* ---- writer ----
 * Builds a file in two passes: add metadata and tensor infos, then stream
 * the data.  Everything is written to a temporary file next to the target
 * and renamed into place on success. */
typedef struct gguf_writer gguf_writer;

gguf_writer *gguf_writer_new(void);
void gguf_writer_free(gguf_writer *w);
void gguf_w_u32(gguf_writer *w, const char *key, uint32_t v);
void gguf_w_i32(gguf_writer *w, const char *key, int32_t v);
void gguf_w_u64(gguf_writer *w, const char *key, uint64_t v);
void gguf_w_f32(gguf_writer *w, const char *key, float v);
void gguf_w_bool(gguf_writer *w, const char *key, int v);
void gguf_w_str(gguf_writer *w, const char *key, const char *s, size_t len);
/* Copies a key/value (any type, including arrays) from an open file. */
void gguf_w_copy_kv(gguf_writer *w, const gguf_kv *kv);
/* Raw array of fixed-size elements (elem_type not STRING/ARRAY). */
void gguf_w_arr(gguf_writer *w, const char *key, uint32_t elem_type, const void *data, uint64_t n);
/* Declares a tensor; data is written later with gguf_w_tensor_data in the
 * same order, or taken from `data` now if non-NULL (must stay valid until
 * gguf_writer_save returns). */
void gguf_w_tensor(gguf_writer *w, const char *name, uint32_t type, int n_dims, const int64_t *ne, const void *data);
/* Writes the file.  `produce` (may be NULL when every tensor was given data)
 * is called per tensor without data to fill `dst` (nbytes). Returns 0 or -1
 * with a message in err. */
typedef int (*gguf_produce_fn)(void *ud, int idx, void *dst, uint64_t nbytes);
kiln_status gguf_writer_save(gguf_writer *w, const char *path, gguf_produce_fn produce, void *ud);

#endif
