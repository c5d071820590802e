/*
 * ckpt — tensor checkpoints written by PyTorch tooling, read as data.
 *
 * Two formats, told apart by their first bytes:
 *   safetensors   8-byte little-endian header length, a JSON header (read
 *                 with jansson) naming each tensor's dtype, shape and byte
 *                 range, then the raw data;
 *   PyTorch ZIP   torch.save's archive: PREFIX/data.pkl, a pickle of the
 *                 state dictionary, and PREFIX/data/KEY, one stored (not
 *                 compressed) entry per storage.  libzip reads the archive.
 *
 * The pickle is a program for Python's unpickler; kiln never runs it.
 * pickle.c interprets only the opcodes a state dictionary uses and only
 * these globals:
 *   collections.OrderedDict            called with no arguments
 *   torch._utils._rebuild_tensor_v2    (storage, offset, size, stride,
 *                                       requires_grad, hooks[, metadata])
 *   torch._utils._rebuild_parameter    (tensor, requires_grad, hooks)
 *   torch.{Float,Half,BFloat16,Double,Long,Int,Short,Char,Byte,Bool}Storage
 *                                      as the type inside a persistent id
 * Any other global, a REDUCE of anything else, a BUILD on anything but a
 * dictionary, an object-creating opcode (INST, OBJ, NEWOBJ, EXT*), a
 * storage that is missing, compressed, misaligned or whose size disagrees
 * with its entry, and a tensor that reaches past its storage or is not
 * contiguous are refused with an error that names it.  Every count and
 * length is bounded before anything is allocated for it.
 *
 * Tensor data is never copied: ckpt_tensor.data points into the read-only
 * mapping (or the caller's buffer), so listing a checkpoint touches no
 * weight pages.
 */
#ifndef KILN_CKPT_H
#define KILN_CKPT_H

#include "kiln.h"

#include <stddef.h>
#include <stdint.h>

enum ckpt_dtype {
    CKPT_F32 = 0,
    CKPT_F16,
    CKPT_BF16,
    CKPT_F64,
    CKPT_I64,
    CKPT_I32,
    CKPT_I16,
    CKPT_I8,
    CKPT_U8,
    CKPT_BOOL,
    CKPT_F8_E4M3,
    CKPT_F8_E5M2,
    CKPT_DTYPE_COUNT
};

enum ckpt_format { CKPT_SAFETENSORS = 0, CKPT_TORCH_ZIP = 1 };

#define CKPT_MAX_DIMS 8

typedef struct ckpt_tensor {
    const char *name;             /* NUL-terminated, owned by the file */
    int dtype;                    /* enum ckpt_dtype */
    int n_dims;                   /* 0 (a scalar) .. CKPT_MAX_DIMS */
    int64_t shape[CKPT_MAX_DIMS]; /* outermost first, as PyTorch prints it */
    int64_t numel;
    const void *data; /* numel elements, row-major, aligned to the element size */
    uint64_t nbytes;
} ckpt_tensor;

typedef struct ckpt_file ckpt_file;

/* Limits a reader enforces before allocating (bytes or counts). */
#define CKPT_MAX_HEADER (100u << 20) /* safetensors JSON header */
#define CKPT_MAX_PICKLE (64u << 20)  /* data.pkl, uncompressed */
#define CKPT_MAX_TENSORS 1000000
#define CKPT_MAX_ENTRIES 1000000 /* ZIP entries */

/* Maps path and reads its tensor directory into *out.  Fails with
 * KILN_ERR_IO, _FORMAT or _NOMEM, the message naming the file and what is
 * wrong. */
kiln_status ckpt_open(const char *path, ckpt_file **out);
/* The same over bytes the caller keeps alive and unchanged until ckpt_close
 * (used by the fuzzer and the tests). */
kiln_status ckpt_open_memory(const void *data, size_t len, ckpt_file **out);
void ckpt_close(ckpt_file *f);

int ckpt_format(const ckpt_file *f);
const char *ckpt_format_name(int format); /* "safetensors", "pytorch-zip" */
uint64_t ckpt_file_size(const ckpt_file *f);
int ckpt_n_tensors(const ckpt_file *f);
/* Tensor i in file order (by data offset); NULL when out of range. */
const ckpt_tensor *ckpt_tensor_at(const ckpt_file *f, int i);
/* The tensor called name, or NULL. */
const ckpt_tensor *ckpt_find(const ckpt_file *f, const char *name);
/* safetensors __metadata__ value of key, or NULL (always NULL for ZIP). */
const char *ckpt_meta(const ckpt_file *f, const char *key);

const char *ckpt_dtype_name(int dtype); /* "F32", ... as safetensors spells them */
int ckpt_dtype_size(int dtype);
/* The kq type (quant.h) of a float dtype kiln computes with: QUANT_F32, QUANT_F16
 * or QUANT_BF16; -1 for any other. */
int ckpt_dtype_kq(int dtype);

#endif
