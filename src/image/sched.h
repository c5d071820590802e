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

#include "kiln.h"

#include <stddef.h>

enum { IMAGE_BETA_LINEAR = 0, IMAGE_BETA_SCALED_LINEAR, IMAGE_BETA_COSINE };
enum { IMAGE_PRED_EPSILON = 0, IMAGE_PRED_V };
enum { IMAGE_SPACING_LINSPACE = 0, IMAGE_SPACING_LEADING, IMAGE_SPACING_TRAILING };

typedef struct image_sched {
    int n_train;
    float beta_start, beta_end;
    int beta_schedule, prediction, spacing, steps_offset;
} image_sched;

#define IMAGE_MAX_STEPS 1000

/* ts [steps], sigmas [steps + 1] and the initial noise scale for steps
 * (1..min(n_train, IMAGE_MAX_STEPS)).  Fails (base_fail) on a bad configuration. */
kiln_status image_sched_plan(const image_sched *s, int steps, float *ts, float *sigmas, float *init);
/* z += (z - x0) / sigma * (sigma_next - sigma) over n values, x0 from the
 * model's output (epsilon or v). */
void image_euler_step(const image_sched *s, float *z, const float *model, float sigma, float sigma_next, size_t n);

#endif
