/*
 * image — text to image: a T5 encoder (t5.h), a PixArt-alpha diffusion
 * transformer (dit.h), Euler sampling with classifier-free guidance
 * (sched.h) from a seeded Gaussian (nn.h), the Stable Diffusion VAE
 * decoder (vae.h), PNG out.  The subsystem's contract for the engine
 * family, the CLI and the server.
 *
 * A pack is a directory with pack.json:
 *   {"kind": "kiln-image-pack", "schema": 1, "name": ..., "license": ...,
 *    "artifacts": [{"role": "dit"|"text-encoder"|"tokenizer"|"vae",
 *                   "path": FILE, "length": BYTES, "sha256": HEX}, ...],
 *    "dit": {"attention_head_dim", "interpolation_scale"},
 *    "text_encoder": {"relative_attention_max_distance", "max_tokens"},
 *    "vae": {"scaling_factor", "norm_num_groups"},
 *    "scheduler": {diffusers' num_train_timesteps, beta_start, beta_end,
 *                  beta_schedule, prediction_type, timestep_spacing,
 *                  steps_offset},
 *    "defaults": {"steps", "cfg"}}
 * All four roles are required; each file must have its recorded length and
 * SHA-256.  The configuration objects are optional: their defaults are the
 * pinned pipeline's (PixArt-alpha 256 with 72-dim heads, Flan-T5 with 120
 * tokens, the SD VAE's 0.18215 and 32 groups, PixArt's linear schedule).
 *
 * Opening a pipeline checks, before any model memory is allocated: the DiT
 * (PyTorch ZIP, restricted reader), the encoder and the VAE (safetensors)
 * against their tensor schemas (names, shapes, F32/F16/BF16), the
 * tokenizer, and that they fit together (caption width = encoder width,
 * latent channels, vocabulary, 256 x 256 output).
 */
#ifndef KILN_IMAGE_H
#define KILN_IMAGE_H

#include "image/sched.h"

#include <limits.h>
#include <stddef.h>
#include <stdint.h>

typedef struct image_config {
    int head_dim;     /* DiT attention head size */
    float interp;     /* DiT position-table interpolation scale */
    int max_distance; /* T5 relative-position maximum distance */
    int max_tokens;   /* prompt tokens, EOS included */
    float vae_scaling;
    int vae_groups;
    image_sched sched;
    int steps; /* defaults of a request */
    float cfg;
    char name[128];
} image_config;

typedef struct image_files {
    char dit[PATH_MAX], t5[PATH_MAX], tokenizer[PATH_MAX], vae[PATH_MAX];
} image_files;

/* The pinned pipeline's configuration. */
void image_config_default(image_config *c);
/* The pinned pipeline's tokenizer: Flan-T5's SentencePiece model (the same
 * spiece.model as T5's), by length and SHA-256. */
#define IMAGE_SPIECE_PIN_BYTES 791656
#define IMAGE_SPIECE_PIN_SHA256 "d60acb128cf7b7f2536e8f38a5b18a05535c9e14c7a355904270e15b0945ea86"
/* The four files given without a pack: the tokenizer must be the pinned
 * one, or have the SHA-256 sha256 (64 hex digits) when that is not NULL
 * (the caller pinning its own).  0, or -1 with err. */
int image_tokenizer_pinned(const char *path, const char *sha256, char *err, size_t errlen);
/* 1 when path is a pack: a directory holding pack.json, or such a file. */
int image_is_pack(const char *path);
/* Reads a pack's manifest into files and config and checks every
 * artifact's length, and its SHA-256 when verify is set.  -1 with err. */
int image_pack_read(const char *path, int verify, image_files *files, image_config *config, char *err, size_t errlen);

typedef struct image_pipeline image_pipeline;

/* Checks the schemas (see above) and that the parts fit, loading nothing;
 * 0, or -1 with err. */
int image_pipeline_check(const image_files *files, const image_config *config, char *err, size_t errlen);
/* Checks the schemas (see above), then loads: weights stay mapped. */
int image_pipeline_open(const image_files *files, const image_config *config, int n_threads, image_pipeline **out,
                        char *err, size_t errlen);
void image_pipeline_free(image_pipeline *p);
const image_config *image_pipeline_config(const image_pipeline *p);
int image_pipeline_width(const image_pipeline *p); /* pixels: 256 */
int image_pipeline_height(const image_pipeline *p);

/* Called before each step (step 0 .. steps - 1) and once with step ==
 * steps before the VAE; nonzero cancels. */
typedef int (*image_progress_fn)(void *user, int step, int steps);

typedef struct image_request {
    const char *prompt;
    int steps; /* 0 = the pack's default */
    float cfg; /* guidance scale; <= 1 runs the conditional pass only; < 0 = default */
    uint64_t seed;
    image_progress_fn progress;
    void *user;
} image_request;

enum { IMAGE_OK = 0, IMAGE_ERR = -1, IMAGE_CANCELLED = -2, IMAGE_TOO_LONG = -3 };

/* Generates one image; *png (malloc'd) receives the PNG bytes.  Returns
 * IMAGE_OK, or IMAGE_ERR / IMAGE_TOO_LONG (the prompt exceeds max_tokens) /
 * IMAGE_CANCELLED with err set. */
int image_generate(image_pipeline *p, const image_request *r, uint8_t **png, size_t *png_len, char *err, size_t errlen);

/* Stages, for tests and tools.  Tokens of prompt with EOS (returns the
 * count, which may exceed cap; -1 on error). */
int image_tokenize(const image_pipeline *p, const char *prompt, int32_t *ids, int cap);
/* out [n][d_model]. */
int image_encode(image_pipeline *p, const int32_t *ids, int n, float *out, char *err, size_t errlen);
int image_encoder_width(const image_pipeline *p);
/* One DiT evaluation of x [in_ch][32][32] at timestep t with caption
 * states ctx [n][d_model]: out [out_ch][32][32]. */
int image_dit_once(image_pipeline *p, const float *x, float t, const float *ctx, int n, float *out, char *err,
                   size_t errlen);
int image_dit_out_channels(const image_pipeline *p);
/* img [3][256][256] from latents z [4][32][32] (scaled latents: divided by
 * the scaling factor first). */
int image_decode(image_pipeline *p, const float *z, float *img, char *err, size_t errlen);
/* [3][h][w] in [-1, 1] to h * w * 3 bytes: (x / 2 + 0.5) clamped to [0, 1],
 * times 255, rounded half to even. */
void image_to_pixels(const float *img, int w, int h, uint8_t *rgb);
int image_png_encode(const uint8_t *rgb, int w, int h, uint8_t **out, size_t *len, char *err, size_t errlen);

#endif
