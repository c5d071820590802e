/* The check that lets the store hold image packs (image/image.h) beside
 * GGUF and whisper.cpp files: a pack's pack.json and its four artifacts are
 * one store pack, published only when the pipeline would open. */
#include "store/store.h"

#include "base/base.h"
#include "ckpt/ckpt.h"
#include "image/image.h"

#include <stdio.h>
#include <string.h>

/* The most common dtype of the DiT's matrices (its weights). */
static void dit_dtype(const char *path, char quant[16]) {
    ckpt_file *f;
    ckpt_open(path, &f);
    int counts[CKPT_DTYPE_COUNT] = {0}, best = CKPT_F32;
    for (int i = 0; f && i < ckpt_n_tensors(f); i++) {
        const ckpt_tensor *t = ckpt_tensor_at(f, i);
        if (t->n_dims == 2 && t->dtype >= 0 && t->dtype < CKPT_DTYPE_COUNT) counts[t->dtype]++;
    }
    for (int t = 0; t < CKPT_DTYPE_COUNT; t++)
        if (counts[t] > counts[best]) best = t;
    snprintf(quant, 16, "%s", ckpt_dtype_name(best));
    ckpt_close(f);
}

kiln_status store_check_image(const char *path, const char *artifact, char arch[64], char quant[16]) {
    image_files files;
    image_config cfg;
    /* lengths here; the caller hashed every file against pack.json */
    kiln_status st = image_pack_read(path, 0, &files, &cfg);
    if (!st) st = image_pipeline_check(&files, &cfg);
    if (st) return base_fail(st, "artifact %s is not a usable image pack: %s", artifact, kiln_last_error());
    snprintf(arch, 64, "image");
    dit_dtype(files.dit, quant);
    return KILN_OK;
}
