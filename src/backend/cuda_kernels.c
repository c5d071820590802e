#include "backend/cuda_kernels.h"

#include <math.h>

#ifdef BACKEND_CUDA_FATBIN
/* generated into the build tree by src/backend/cuda/embed.cmake */
extern const unsigned char backend_cuda_fatbin_data[];
extern const size_t backend_cuda_fatbin_len;

const void *backend_cuda_fatbin(size_t *size) {
    *size = backend_cuda_fatbin_len;
    return backend_cuda_fatbin_data;
}
#else
const void *backend_cuda_fatbin(size_t *size) {
    *size = 0;
    return NULL;
}
#endif

/* YaRN: the (fractional) dimension at which a rotation completes n_turns
 * turns over the original context, as kern_rope_table uses it. */
static double yarn_dim(int n_rot, int n_ctx_orig, float n_turns, float base) {
    return n_rot * log((double)n_ctx_orig / (n_turns * 2.0 * M_PI)) / (2.0 * log((double)base));
}

void backend_cuda_rope_freqs(const kern_rope *r, float *inv_freq, float *mscale) {
    const int half = r->n_rot / 2;
    double lo = 0, hi = 0, ms = r->attn_factor;
    if (r->ext_factor != 0.0f) {
        lo = floor(yarn_dim(r->n_rot, r->n_ctx_orig, r->beta_fast, r->base));
        hi = ceil(yarn_dim(r->n_rot, r->n_ctx_orig, r->beta_slow, r->base));
        if (lo < 0) lo = 0;
        if (hi > r->n_rot - 1) hi = r->n_rot - 1;
        ms *= 1.0 + 0.1 * log(1.0 / r->freq_scale);
    }
    for (int i = 0; i < half; i++) {
        /* the unscaled angle per position, then the interpolated
         * (freq_scale) and extrapolated (1) ones mixed as YaRN does */
        double f = pow((double)r->base, -2.0 * i / r->n_rot);
        if (r->freq_factors) f /= r->freq_factors[i];
        double mix = 0;
        if (r->ext_factor != 0.0f) {
            const double y = (i - lo) / fmax(0.001, hi - lo);
            mix = (1.0 - fmin(1.0, fmax(0.0, y))) * r->ext_factor;
        }
        inv_freq[i] = (float)(f * (r->freq_scale * (1.0 - mix) + mix));
    }
    *mscale = (float)ms;
}
