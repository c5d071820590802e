/* Internal to src/ckpt: the file record both readers fill in, and the
 * pickle interpreter's result that torchzip.c binds to ZIP entries. */
#ifndef KILN_CKPT_INTERNAL_H
#define KILN_CKPT_INTERNAL_H

#include "base/base.h"
#include "ckpt/ckpt.h"

#include <stddef.h>
#include <stdint.h>

struct ckpt_file {
    int format;
    base_map map;        /* owned mapping (ckpt_open), or addr NULL */
    const uint8_t *data; /* the whole file */
    size_t len;
    ckpt_tensor *tensors; /* [n], in data order */
    int n;
    int *by_name;      /* [n] indices sorted by name */
    char *strings;     /* names and metadata, one block */
    const char **meta; /* [2 * n_meta] key, value pairs */
    int n_meta;
};

/* Sorts f->tensors by data address, builds the name index and refuses
 * duplicate names. */
kiln_status ckpt_finish(ckpt_file *f);

/* ---- pickle.c ---- */

/* A tensor of the state dictionary as the pickle describes it. */
typedef struct ckpt_pkl_tensor {
    const char *name;        /* into the result's arena */
    const char *storage_key; /* the persistent id's key: entry data/KEY */
    int dtype;               /* of the storage */
    int64_t storage_numel;   /* elements the persistent id declares */
    int64_t offset;          /* storage offset, elements */
    int n_dims;
    int64_t shape[CKPT_MAX_DIMS];
    int64_t numel;
} ckpt_pkl_tensor;

typedef struct ckpt_pkl_result {
    ckpt_pkl_tensor *tensors;
    int n;
    void *arena; /* owns every string and the array */
} ckpt_pkl_result;

/* Interprets a torch.save pickle as a state dictionary: a dict or
 * OrderedDict of name -> tensor (or such a dict under the key
 * "state_dict").  Non-tensor values are skipped.  Fails with
 * KILN_ERR_FORMAT (the message names the refused opcode, global or value and
 * its byte offset) or _NOMEM. */
kiln_status ckpt_pickle_state_dict(const uint8_t *p, size_t n, ckpt_pkl_result *out);
void ckpt_pickle_free(ckpt_pkl_result *r);

/* ---- safetensors.c / torchzip.c ---- */
kiln_status ckpt_read_safetensors(ckpt_file *f);
kiln_status ckpt_read_torchzip(ckpt_file *f);

#endif
