/* libFuzzer target: arbitrary bytes as an mmproj projector file: the GGUF
 * reader, then the projector's hyperparameters and tensor binding for every
 * projector type, and the token count of a small image.  Built only with
 * -DKILN_FUZZ=ON (clang). */
#include "gguf/gguf.h"
#include "vision/vision.h"

#include <stddef.h>
#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    gguf_file *f;
    if (gguf_open_memory(data, size, &f)) return 0;
    vision_model *vm = NULL;
    if (vision_load_gguf(f, "fuzz", 64, &vm) == KILN_OK) {
        static const uint8_t px[64 * 48 * 3];
        const vision_image im = {64, 48, px};
        (void)vision_n_tokens(vm, &im);
        vision_free(vm);
    }
    return 0;
}
