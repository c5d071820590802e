/*
 * vision/qwen — the Qwen-VL vision encoders and patch mergers of llama.cpp
 * mmproj files (GGUF arch "clip", clip.projector_type qwen2vl_merger,
 * qwen2.5vl_merger or qwen3vl_merger), written from the models' math:
 *
 *   preprocess  resize to multiples of 2 * patch ("smart resize": nearest
 *               multiple, then scaled into [8, 4096] merged tokens' worth
 *               of pixels; the image scaled by the smaller ratio, bilinear,
 *               centred on black, as llama.cpp), (x / 255 - mean) / std
 *   patch embed two patch x patch convolutions of the same still image
 *               (Qwen's temporal patch of 2 frames), summed; Qwen3-VL adds
 *               a bias and learned positions (a square table resized
 *               bilinearly, corners aligned, to the patch grid)
 *   layers      x += Wo attn(rope2d(Wq xn + bq), rope2d(Wk xn + bk), Wv xn + bv) + bo,
 *               x += Wdown mlp(xn) + bd,   xn = norm(x)
 *               norm: RMSNorm (2.5) or LayerNorm with bias (2, 3); mlp:
 *               silu(Wgate xn + bg) * (Wup xn + bu) (2.5), else
 *               act(Wup xn + bu) with quick GELU (2) or tanh GELU (3);
 *               Qwen2.5-VL's layers (i + 1) % n_wa_pattern != 0 attend
 *               within windows of 112 / patch / 2 merged tokens a side
 *   merger      norm(x) per patch, each 2 x 2 patch group's four rows
 *               concatenated, mm.2 gelu(mm.0 . + b0) + b2; Qwen3-VL's
 *               deepstack mergers (LayerNorm over the 4E, fc1, GELU, fc2)
 *               after their layers append their rows after the merger's
 *
 * The 2-D rotary embedding of head size D: angle pair i (i < D / 4) turns
 * by row * 10000^(-4i / D), pair D / 4 + i by column * the same, pairs
 * (i, i + D / 2) as NeoX.  Output: one row of n_embd floats per merged
 * token, row-major over the nx x ny grid (kiln_batch_inputs.mpos rows
 * (0, r, c, 0)).
 */
#ifndef KILN_VISION_QWEN_H
#define KILN_VISION_QWEN_H

#include "gguf/gguf.h"
#include "kiln.h"
#include "thread/pool.h"

#include <stddef.h>
#include <stdint.h>

typedef struct vision_qwen vision_qwen;

/* Binds the encoder from f (kept open by the caller while the result
 * lives): every hyperparameter and tensor shape checked before anything is
 * allocated for it.  KILN_ERR_UNSUPPORTED for another projector type. */
kiln_status vision_qwen_load(const gguf_file *f, vision_qwen **out);
void vision_qwen_free(vision_qwen *q);
/* Floats per output row: clip.vision.projection_dim, times 1 + the
 * deepstack mergers (Qwen3-VL; the text model's n_embd_inp). */
int vision_qwen_n_embd(const vision_qwen *q);
/* The size a w x h image is resized to (*rw x *rh) and its grid of merged
 * tokens (*nx columns, *ny rows); -1 when w or h is not positive. */
int vision_qwen_grid(const vision_qwen *q, int w, int h, int *rw, int *rh, int *nx, int *ny);
/* Encodes w x h RGB8 pixels (row-major, 3 bytes a pixel) into out
 * [ny * nx][n_embd] (vision_qwen_grid's), on pool's threads (NULL: the
 * calling thread).  KILN_ERR_NOMEM when scratch cannot be had. */
kiln_status vision_qwen_encode(const vision_qwen *q, thread_pool *pool, const uint8_t *rgb, int w, int h, float *out);

#endif
