/* libFuzzer target: arbitrary bytes through the checkpoint readers (the
 * restricted PyTorch ZIP reader with its pickle interpreter, and the
 * safetensors reader), then the pickle interpreter and the SentencePiece
 * model reader alone on the same bytes; every tensor's claimed bytes are read.  Built only with
 * -DKILN_FUZZ=ON (clang). */
#include "ckpt/ckpt.h"
#include "ckpt/ckpt_internal.h"
#include "image/spiece.h"

#include <stddef.h>
#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    ckpt_file *f;
    ckpt_open_memory(data, size, &f);
    if (f) {
        volatile uint8_t s = 0;
        for (int i = 0; i < ckpt_n_tensors(f); i++) {
            const ckpt_tensor *t = ckpt_tensor_at(f, i);
            for (uint64_t k = 0; k < t->nbytes; k += 61) s ^= ((const uint8_t *)t->data)[k];
            if (t->nbytes) s ^= ((const uint8_t *)t->data)[t->nbytes - 1];
            (void)ckpt_find(f, t->name);
        }
        (void)s;
        ckpt_close(f);
    }
    ckpt_pkl_result r;
    if (ckpt_pickle_state_dict(data, size, &r) == KILN_OK) ckpt_pickle_free(&r);
    /* and as a SentencePiece model (protobuf, character map, encoder) */
    image_spiece *s;
    image_spiece_load(data, size, &s);
    if (s) {
        int32_t ids[64];
        static const char text[] = "a Red  circle ＡＢ\xff on a blue background";
        image_spiece_encode(s, text, sizeof text - 1, ids, 64);
        image_spiece_free(s);
    }
    return 0;
}
