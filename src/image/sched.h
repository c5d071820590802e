/*
 * sched — the noise schedule of a diffusers scheduler configuration and
 * the Euler sampler (diffusers' EulerDiscreteScheduler without churn).
 *
 * betas over n_train steps (linear, scaled_linear or squaredcos_cap_v2),
 * alphas_cumprod = running product of 1 - beta in float, sigma(t) =
 * sqrt((1 - ac) / ac); the steps' timesteps by the spacing (linspace,
 * leading with steps_offset, trailing); the steps' sigmas by linear
 * interpolation at those timesteps, then a final 0.  The model sees
 * z / sqrt(sigma^2 + 1) and the timestep; an Euler step moves z by
 * (z - x0) / sigma * (sigma_next - sigma), x0 from the prediction type.
 */
#ifndef KILN_IMAGE_SCHED_H
#define KILN_IMAGE_SCHED_H

#include <stddef.h>

enum { IM_BETA_LINEAR = 0, IM_BETA_SCALED_LINEAR, IM_BETA_COSINE };
enum { IM_PRED_EPSILON = 0, IM_PRED_V };
enum { IM_SPACING_LINSPACE = 0, IM_SPACING_LEADING, IM_SPACING_TRAILING };

typedef struct im_sched {
    int n_train;
    float beta_start, beta_end;
    int beta_schedule, prediction, spacing, steps_offset;
} im_sched;

#define IM_MAX_STEPS 1000

/* ts [steps], sigmas [steps + 1] and the initial noise scale for steps
 * (1..min(n_train, IM_MAX_STEPS)).  -1 with err on a bad configuration. */
int im_sched_plan(const im_sched *s, int steps, float *ts, float *sigmas, float *init, char *err, size_t errlen);
/* z += (z - x0) / sigma * (sigma_next - sigma) over n values, x0 from the
 * model's output (epsilon or v). */
void im_euler_step(const im_sched *s, float *z, const float *model, float sigma, float sigma_next, size_t n);

#endif
