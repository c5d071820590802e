/* libFuzzer target: arbitrary bytes through the image decoders (PNG, JPEG
 * with its EXIF orientation, WebP) and the EXIF parser on its own.  Built
 * only with -DKILN_FUZZ=ON (clang). */
#include "vision/decode.h"

#include <stddef.h>
#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    vision_rgb im;
    if (vision_decode(data, size, &im) == KILN_OK) {
        /* touch the last pixel: the buffer holds w*h*3 bytes */
        volatile uint8_t last = im.px[(size_t)im.w * (size_t)im.h * 3 - 1];
        (void)last;
        vision_rgb_free(&im);
    }
    (void)vision_exif_orientation(data, size);
    return 0;
}
