/*
 * whisper — the Whisper speech-to-text model (kiln.h, "speech to text").
 *
 * load.c    the whisper.cpp GGML file: magic "ggml", 11 int32 hyper-
 *           parameters, the mel filterbank, the vocabulary, then tensors
 *           (n_dims, name length, type, ne[], name, data) to the end of the
 *           file.  Every count, length and shape is checked against the
 *           file before any weight memory is allocated.
 * vocab.c   the token layout and text <-> tokens (greedy longest match, as
 *           the files carry no merges), language codes, non-speech symbols
 * model.c   the forward pass on kernels/matmul.h and the thread pool:
 *           encoder (conv stem, sinusoidal positions, pre-norm blocks with
 *           GELU) and decoder steps (learned positions, self-attention over
 *           a per-beam KV cache, cross-attention over K/V computed once per
 *           window, tied output projection)
 * decode.c  transcription: windows, prompt, timestamp rules, suppression,
 *           greedy and beam search, temperature fallback, segments
 * api.c     the public kiln_stt_* entry points
 *
 * Token layout (n_text text tokens from the file, then):
 *   eot = n_text, sot, n_langs language tokens, translate, transcribe,
 *   solm, prev, nosp, notimestamps, then 1501 timestamps (0.00 .. 30.00 s
 *   in 0.02-s steps) from ts_begin; so n_vocab = n_text + n_langs + 1509.
 * The published files fit it (n_text 50256 / 50257, n_langs 99 / 100).
 */
#ifndef KILN_WHISPER_H
#define KILN_WHISPER_H

#include "kiln.h"

#include "base/base.h"
#include "kernels/matmul.h"
#include "quant/quant.h"
#include "thread/pool.h"

#include <stddef.h>
#include <stdint.h>

#define WHISPER_MAGIC 0x67676d6cu
#define WHISPER_N_FFT_BINS 201 /* 400-point FFT: 201 frequency bins */
#define WHISPER_MAX_LANGS 100
#define WHISPER_N_TIMESTAMPS 1501 /* 0.00 .. 30.00 s by 0.02 s */

typedef struct whisper_hparams {
    int32_t n_vocab, n_audio_ctx, n_audio_state, n_audio_head, n_audio_layer;
    int32_t n_text_ctx, n_text_state, n_text_head, n_text_layer, n_mels, ftype;
} whisper_hparams;

/* One transformer block's weights (cross_* NULL/unused in the encoder).
 * Vectors are F32 arrays of n_state (mlp_b0: 4 * n_state). */
typedef struct whisper_block {
    const float *attn_ln_w, *attn_ln_b;
    kern_mat q, k, v, o;
    const float *q_b, *v_b, *o_b;
    const float *cross_ln_w, *cross_ln_b;
    kern_mat cq, ck, cv, co;
    const float *cq_b, *cv_b, *co_b;
    const float *mlp_ln_w, *mlp_ln_b;
    kern_mat mlp0, mlp2;
    const float *mlp0_b, *mlp2_b;
} whisper_block;

typedef struct whisper_vocab {
    int32_t n_text; /* text tokens read from the file */
    int32_t n_langs;
    int32_t eot, sot, lang0, translate, transcribe, solm, prev, nosp, notimestamps, ts_begin;
    int multilingual;     /* language and task tokens are used */
    const uint8_t **text; /* [n_text] bytes of each text token (into the file) */
    int32_t *len;         /* [n_text] */
    int32_t max_len;
    /* open-addressing hash of text token bytes -> id */
    int32_t *hash;
    uint32_t hash_mask;
    int32_t *non_speech; /* ids of non-speech symbols, suppressed by default */
    int32_t n_non_speech;
    int32_t space; /* the " " token, -1 if none */
} whisper_vocab;

typedef struct whisper_model {
    base_map map;
    whisper_hparams hp;
    int wtype; /* kq type of the matrices (from ftype) */
    int n_langs;
    const char *size_name; /* "tiny", "base", ..., "large-v3-turbo", "custom" */
    float *filters;        /* [n_mels][201] */
    whisper_vocab vocab;
    /* encoder */
    kern_mat conv1, conv2; /* rows of 3 * n_in (kernel tap fastest) */
    const float *conv1_b, *conv2_b;
    const float *enc_pos; /* [n_audio_ctx][n_state] */
    whisper_block *enc;
    const float *ln_post_w, *ln_post_b;
    /* decoder */
    kern_mat tok;         /* [n_vocab][n_state] */
    const float *dec_pos; /* [n_text_ctx][n_state] */
    whisper_block *dec;
    const float *ln_w, *ln_b;
    /* memory: small tensors as F32 and misaligned matrices live here */
    void *arena;
    size_t arena_bytes;
    uint64_t copied_bytes;      /* matrices copied there for alignment */
    uint64_t n_params, n_bytes; /* elements and bytes of tensor data in the file */
    int n_tensors;
    int type_count[QUANT_TYPE_COUNT];
} whisper_model;

/* ---- load.c ---- */

/* Opens path and validates it as a whisper.cpp GGML file into *out.  Fails
 * with KILN_ERR_IO, _FORMAT, _UNSUPPORTED (a tensor type kiln can't
 * multiply, an unknown ftype) or _NOMEM. */
kiln_status whisper_load(const char *path, whisper_model **out);
void whisper_free(whisper_model *m);
/* 1 when the first bytes of path are the GGML magic (cheap; no validation). */
int whisper_is_ggml_file(const char *path);
/* Seconds one window covers: n_audio_ctx * 2 frames of 10 ms. */
static inline double whisper_window_seconds(const whisper_model *m) { return m->hp.n_audio_ctx * 0.02; }

/* ---- vocab.c ---- */

/* Builds the layout, the lookup hash and the non-speech list; validates
 * the counts (KILN_ERR_FORMAT, or _NOMEM). */
kiln_status whisper_vocab_init(whisper_vocab *v, int32_t n_vocab);
/* Once text[] and len[] are filled: the lookup hash, the " " token and
 * the non-speech list.  Returns 0 or -1 (out of memory). */
int whisper_vocab_index(whisper_vocab *v);
void whisper_vocab_free(whisper_vocab *v);
/* Greedy longest-match tokenization of text; returns the count written
 * (at most cap) or -1 when a byte has no token. */
int whisper_tokenize(const whisper_vocab *v, const char *text, size_t len, int32_t *out, int cap);
/* The id of a text token spelled exactly s (n bytes), -1 if none. */
int32_t whisper_token_find(const whisper_vocab *v, const char *s, size_t n);
/* Language codes in Whisper's order; index i is token lang0 + i. */
const char *whisper_lang_code(int i);
const char *whisper_lang_name(int i);
/* Index of a code ("en") or English name ("english"), -1 if none. */
int whisper_lang_find(const char *code_or_name);

/* ---- model.c ---- */

/* Working memory of one transcription: encoder activations and the
 * decoder's per-beam caches, sized once for n_beams beams. */
typedef struct whisper_state whisper_state;
whisper_state *whisper_state_new(const whisper_model *m, int n_beams, int n_threads);
void whisper_state_free(whisper_state *s);
/* Encodes one window of mel frames ([n_mels][n_frames] rows with stride
 * ld, n_frames = 2 * n_audio_ctx) and computes every decoder layer's
 * cross-attention K and V from it. */
void whisper_encode(whisper_state *s, const float *mel, size_t ld);
/* Encoder output of the last whisper_encode: [n_audio_ctx][n_state]. */
const float *whisper_encoder_out(const whisper_state *s);
/* Runs n tokens of beam b from its current length on; returns the logits
 * of the last ([n_vocab] floats, valid until the next call), or NULL when
 * the text context is full. */
const float *whisper_decode(whisper_state *s, int b, const int32_t *tokens, int n);
/* Runs one token for each of n beams (beams[i] gets tokens[i]); logits row
 * i ([n][n_vocab]) belongs to beams[i].  NULL when a beam is full. */
const float *whisper_decode_beams(whisper_state *s, const int *beams, const int32_t *tokens, int n);
/* Tokens beam b holds; truncates it; copies beam src's cache to dst. */
int whisper_beam_len(const whisper_state *s, int b);
void whisper_beam_truncate(whisper_state *s, int b, int len);
void whisper_beam_copy(whisper_state *s, int dst, int src);
thread_pool *whisper_state_pool(whisper_state *s);

/* ---- api.c ---- */

/* The model behind a public handle. */
const whisper_model *whisper_of(const kiln_stt *s);

/* ---- decode.c ---- */

/* Validates p against m; *lang receives the forced language index or -1. */
kiln_status whisper_check_params(const whisper_model *m, const kiln_transcribe_params *p, int *lang);
/* Transcribes 16 kHz mono audio (kiln_transcribe). */
kiln_status whisper_transcribe(const whisper_model *m, const float *pcm, int64_t n, const kiln_transcribe_params *p,
                               kiln_transcript **out);
/* Tests: the try that the first window's decode keeps, with p's
 * temperature fallback (p->temperature_inc 0: one try at p->temperature;
 * p->initial_prompt taken verbatim as previous text). */
typedef struct whisper_try {
    float temperature;
    float avg_logprob; /* over the tokens and the end (the thresholds') */
    float score;       /* log-probability per token (the ranking's) */
    float compression_ratio;
    float no_speech;
    int n_fallbacks;
} whisper_try;
/* Returns the count of its tokens written to tokens (at most cap) or -1;
 * *info (may be NULL) receives its figures. */
int whisper_decode_first(const whisper_model *m, const float *pcm, int64_t n, const kiln_transcribe_params *p,
                         int32_t *tokens, int cap, whisper_try *info);

#endif
