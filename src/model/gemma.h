/*
 * gemma — what the Gemma families share (gemma.c, the decoder of gemma3
 * and gemma4; gemma_embed.c, the bidirectional EmbeddingGemma encoder).
 */
#ifndef KILN_GEMMA_H
#define KILN_GEMMA_H

#include "model/model.h"

/* Which of the n_layer layers use the sliding window (local[l] = 1):
 * {arch}.attention.sliding_window_pattern as a per-layer array (nonzero:
 * sliding), or as a period P (def_period when absent) where layer l slides
 * when l % P < P - 1 (P 0: every layer).  A failure is a status with the
 * last error set. */
kiln_status model_gemma_swa_layers(const kiln_model *m, uint8_t *local, int def_period);

/* The sliding layers' RoPE: m's (hp.rope), with rope.freq_base_swa (10000
 * when absent) and no scaling, over n_rot dimensions. */
kiln_status model_gemma_rope_local(const kiln_model *m, int n_rot, kern_rope *r);

/* In place: g = gelu(g) * u, the tanh GELU as ggml's CPU backend evaluates
 * it: 0 for g <= -10, g for g >= 10, otherwise its F16 table, the GELU of g
 * rounded to F16, rounded to F16 (u NULL: gelu(g) alone). */
void model_gemma_geglu(float *g, const float *u, int n);

#endif
