#include "backend/cuda_fatbin.h"

#ifdef KBE_CUDA_FATBIN
/* generated into the build tree by src/backend/cuda/embed.cmake */
extern const unsigned char kbe_cuda_fatbin_data[];
extern const size_t kbe_cuda_fatbin_len;

const void *kbe_cuda_fatbin(size_t *size) {
    *size = kbe_cuda_fatbin_len;
    return kbe_cuda_fatbin_data;
}
#else
const void *kbe_cuda_fatbin(size_t *size) {
    *size = 0;
    return NULL;
}
#endif
