#include "image/sched.h"

#include "base/base.h"

#include <math.h>
#include <stdlib.h>

/* torch.linspace in float: the first half counts up from start, the second
 * down from end. */
static float linspace_at(float a, float b, int n, int i) {
    const float step = (b - a) / (float)(n - 1);
    return i < n / 2 ? a + step * (float)i : b - step * (float)(n - 1 - i);
}

static double alpha_bar(double t) {
    const double c = cos((t + 0.008) / 1.008 * 3.14159265358979323846 / 2.0);
    return c * c;
}

int image_sched_plan(const image_sched *s, int steps, float *ts, float *sigmas, float *init, char *err, size_t errlen) {
    const int N = s->n_train;
    if (N < 2 || N > 100000 || steps < 1 || steps > N || steps > IMAGE_MAX_STEPS) {
        base_errf(err, errlen, "steps must be 1..%d (the schedule has %d training steps)",
                  N < IMAGE_MAX_STEPS ? N : IMAGE_MAX_STEPS, N);
        return -1;
    }
    float *sig = malloc((size_t)N * sizeof *sig);
    if (!sig) {
        base_errf(err, errlen, "out of memory");
        return -1;
    }
    float ac = 1.0f;
    for (int i = 0; i < N; i++) {
        float beta;
        if (s->beta_schedule == IMAGE_BETA_LINEAR)
            beta = linspace_at(s->beta_start, s->beta_end, N, i);
        else if (s->beta_schedule == IMAGE_BETA_SCALED_LINEAR) {
            beta = linspace_at(sqrtf(s->beta_start), sqrtf(s->beta_end), N, i);
            beta *= beta;
        } else {
            const double b = 1.0 - alpha_bar((double)(i + 1) / N) / alpha_bar((double)i / N);
            beta = (float)(b < 0.999 ? b : 0.999);
        }
        ac *= 1.0f - beta;
        sig[i] = sqrtf((1.0f - ac) / ac);
    }
    for (int i = 0; i < steps; i++) {
        double t;
        if (s->spacing == IMAGE_SPACING_LINSPACE) /* numpy: in double, the last exactly N - 1, then reversed */
            t = steps == 1 ? 0.0 : (i == 0 ? (double)(N - 1) : (double)(N - 1) / (steps - 1) * (steps - 1 - i));
        else if (s->spacing == IMAGE_SPACING_LEADING)
            t = nearbyint((double)((steps - 1 - i) * (N / steps))) + s->steps_offset;
        else
            t = nearbyint((double)N - (double)i * ((double)N / steps)) - 1.0;
        ts[i] = (float)t;
        double tf = ts[i];
        if (tf < 0) tf = 0;
        if (tf > N - 1) tf = N - 1;
        const int lo = (int)floor(tf);
        const double fr = tf - lo;
        sigmas[i] = lo + 1 < N ? (float)(sig[lo] + fr * ((double)sig[lo + 1] - sig[lo])) : sig[N - 1];
    }
    sigmas[steps] = 0.0f;
    float mx = 0.0f;
    for (int i = 0; i < steps; i++)
        if (sigmas[i] > mx) mx = sigmas[i];
    *init = s->spacing == IMAGE_SPACING_LEADING ? sqrtf(mx * mx + 1.0f) : mx;
    free(sig);
    return 0;
}

void image_euler_step(const image_sched *s, float *z, const float *model, float sigma, float sigma_next, size_t n) {
    const float dt = sigma_next - sigma;
    const float c = sqrtf(sigma * sigma + 1.0f);
    for (size_t i = 0; i < n; i++) {
        const float x0 = s->prediction == IMAGE_PRED_EPSILON ? z[i] - sigma * model[i]
                                                             : model[i] * (-sigma / c) + z[i] / (sigma * sigma + 1.0f);
        z[i] = z[i] + (z[i] - x0) / sigma * dt;
    }
}
