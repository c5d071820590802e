/*
 * model — model families, weights, the sequence state and the forward pass.
 *
 * A family is one file that declares itself once, through a model_family
 * table: the architecture names it serves, how it binds its tensors, how
 * much state a sequence needs, and its forward pass.  Nothing outside the
 * family's file knows its architectures' names.
 *
 * family.h  the family contract: the model_family row, hyperparameters, the
 *           model struct, the binding helpers
 * family.c  the registry of families (model_arch_find looks a name up) and
 *           the tensor binder (shapes checked, 1-, 2- and 3-D)
 * model.c   kiln_model_load: common hyperparameters, the backend's weight
 *           preparation (backend/backend.h; on the CPU, repacking), the
 *           projector (vision/)
 * dense.c   llama, qwen2, qwen3: every layer attention + SwiGLU
 * gemma.c   gemma3, gemma4: sliding/global attention layers, GeGLU
 * hybrid.c  qwen35, qwen35moe, qwen3next: Gated DeltaNet and gated full
 *           attention layers, dense or mixture-of-experts FFN
 * deepseek2.c  deepseek2: multi-head latent attention (one cached latent
 *           row per token), routed and shared experts
 * gptoss.c  gpt-oss: attention with sinks, alternating sliding window,
 *           biased mixture-of-experts FFN
 * nemotron.c nemotron_h, nemotron_h_moe: Mamba-2, attention and MLP or
 *           mixture-of-experts blocks
 * bert.c    the bert encoder (embeddings only)
 * decoder.c what the decoder families share: the batch's positions,
 *           attention over the KV cache, the output head (decoder.h)
 * context.h the context internals: KV cache, state, batch, outputs;
 *           context.c its error (model_fail) and CUDA activation estimate
 * kv.c      the paged KV cache of the attention layers (kv.h)
 * state.c   the recurrent-state pool: a slot per sequence, snapshots
 * api.c     contexts and the public decode/sequence calls
 * embed.c   kiln_embedder: formatting, limits, pooling, fingerprints
 *
 * model.h is what the rest of kiln includes: all of the above.
 */
#ifndef KILN_MODEL_H
#define KILN_MODEL_H

#include "model/context.h"
#include "model/family.h"
#include "model/kv.h"

/* 1 when the header describes a reranker (what kiln_reranker takes): a
 * classification head cls.output.weight on an encoder (a cross-encoder),
 * or on a decoder with rank pooling ({arch}.pooling_type 4).  Reads the
 * header only. */
int model_gguf_is_reranker(const gguf_file *f);

struct vision_prompt;
/* vision_prompt_build (vision/vision.h) with m's projector and tokenizer:
 * text with VISION_MARKERs and n_images images to tokens and embedding
 * rows; KILN_ERR_UNSUPPORTED when images come and m has no projector. */
kiln_status model_image_prompt(kiln_model *m, const char *text, size_t len, int add_special, int parse_special,
                               const kiln_image_input *images, int32_t n_images, struct vision_prompt *out);

#endif
