/* libFuzzer target: arbitrary bytes through the GGUF reader and, when they
 * parse, the tokenizer loader and every metadata accessor.  Built only
 * with -DKILN_FUZZ=ON (clang). */
#include "gguf/gguf.h"
#include "tokenizer/tokenizer.h"

#include <stddef.h>
#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    gguf_file *f;
    if (gguf_open_memory(data, size, &f)) return 0;
    for (int i = 0; i < gguf_n_kv(f); i++) {
        const gguf_kv *kv = gguf_kv_at(f, i);
        if (kv->type != GGUF_ARRAY) continue;
        for (uint64_t k = 0; k < kv->n && k < 64; k++) {
            if (kv->arr_type == GGUF_STRING)
                (void)gguf_arr_str(kv, k);
            else
                (void)gguf_arr_float(kv, k);
        }
    }
    tokenizer *t;
    if (tok_load(f, &t) == KILN_OK) {
        int32_t ids[64];
        tok_encode(t, "Hello world, 123!", 17, 1, 1, ids, 64);
        tok_free(t);
    }
    gguf_close(f);
    return 0;
}
