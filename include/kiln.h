/*
 * kiln.h — the public C API of kiln, a local inference runtime.
 *
 * Handles are opaque.  Every call that can fail returns a kiln_status (0 is
 * success, errors are negative) and leaves a one-line message readable with
 * kiln_last_error() on the calling thread; calls on a context also keep it
 * in kiln_context_error().  The library never exits the process.
 *
 * A typical generation:
 *
 *   kiln_model *m;   kiln_model_load("model.gguf", NULL, &m);
 *   kiln_context *c; kiln_context_new(m, NULL, &c);
 *   int32_t ids[512]; int n = kiln_tokenize(m, text, len, 1, 0, ids, 512);
 *   kiln_batch b = { n, ids, NULL, NULL, NULL };       // seq 0, appended
 *   kiln_decode(c, &b);                                 // logits of the last
 *   int32_t next = kiln_sampler_sample(s, kiln_get_logits(c, n - 1));
 *
 * Threads: one model may back many contexts; one context is driven by one
 * thread at a time.
 */
#ifndef KILN_H
#define KILN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define KILN_VERSION "0.1.0"

typedef enum kiln_status {
    KILN_OK = 0,
    KILN_ERR_INVALID_ARG = -1,  /* a parameter is out of range or NULL */
    KILN_ERR_IO = -2,           /* a file could not be opened, read or written */
    KILN_ERR_FORMAT = -3,       /* a file is malformed (bad GGUF, wrong shapes) */
    KILN_ERR_UNSUPPORTED = -4,  /* valid, but kiln can't run it (architecture, type) */
    KILN_ERR_NOMEM = -5,        /* an allocation failed */
    KILN_ERR_CONTEXT_FULL = -6, /* prompt + requested tokens exceed the context */
    KILN_ERR_CANCELLED = -7,    /* the request was cancelled */
    KILN_ERR_STATE = -8,        /* the call is not valid in the current state */
    KILN_ERR_NOT_FOUND = -9,    /* a named model, key or sequence does not exist */
    KILN_ERR_INTERNAL = -10     /* a bug in kiln */
} kiln_status;

/* A static English description of a status ("invalid argument"). */
const char *kiln_status_str(kiln_status st);
/* The message of the last failed call on this thread ("" if none). */
const char *kiln_last_error(void);

enum { KILN_LOG_ERROR = 0, KILN_LOG_WARN = 1, KILN_LOG_INFO = 2, KILN_LOG_DEBUG = 3 };
typedef void (*kiln_log_fn)(int level, const char *msg, void *user);
/* Sends log lines up to max_level to fn (NULL restores stderr). */
void kiln_set_log(kiln_log_fn fn, void *user, int max_level);

/* Highest SIMD level the kernels use: "scalar", "avx2" or "avx512". */
const char *kiln_cpu_path(void);

/* ------------------------------------------------------------------ model */

typedef struct kiln_model kiln_model;

typedef struct kiln_model_params {
    int prefetch;       /* 1: advise the kernel to read the weights ahead */
} kiln_model_params;

kiln_model_params kiln_model_default_params(void);

/* Loads a GGUF file (or the first shard of a split model).  Weights stay in
 * the read-only mapping.  Fails with one clear message on a bad file or an
 * unsupported architecture. */
kiln_status kiln_model_load(const char *path, const kiln_model_params *params, kiln_model **out);
void kiln_model_free(kiln_model *m);

typedef struct kiln_model_info {
    const char *arch;        /* general.architecture, e.g. "llama" */
    const char *name;        /* general.name or "" */
    int32_t n_vocab;
    int32_t n_ctx_train;     /* context length the model declares */
    int32_t n_embd;
    int32_t n_layer;
    int32_t n_head;
    int32_t n_head_kv;
    int32_t n_ff;
    uint64_t n_params;       /* number of weights */
    uint64_t n_bytes;        /* bytes of tensor data */
    const char *ftype;       /* dominant weight type, e.g. "Q4_0" */
} kiln_model_info;

void kiln_model_get_info(const kiln_model *m, kiln_model_info *info);
/* The GGUF chat template, or NULL. */
const char *kiln_model_chat_template(const kiln_model *m);

/* -------------------------------------------------------------- tokenizer */

/* Tokenizes text.  add_special adds BOS/EOS as the model's metadata says;
 * parse_special maps control-token texts (e.g. "<|im_end|>") to their ids.
 * Returns the number of tokens; if that is more than cap only cap were
 * written.  A negative return is a kiln_status. */
int kiln_tokenize(const kiln_model *m, const char *text, size_t len, int add_special, int parse_special,
                  int32_t *out, int cap);
/* The bytes of one token (special tokens rendered only when special != 0).
 * Returns the length, which may exceed cap (then nothing is written). */
int kiln_token_to_piece(const kiln_model *m, int32_t id, char *buf, int cap, int special);
int32_t kiln_token_bos(const kiln_model *m); /* -1 when the vocab has none */
int32_t kiln_token_eos(const kiln_model *m);
/* 1 for tokens that end generation (EOS, EOT, <|im_end|> ...). */
int kiln_token_is_eog(const kiln_model *m, int32_t id);

/* Turns a token stream into text that never splits a UTF-8 character. */
typedef struct kiln_detok kiln_detok;
kiln_detok *kiln_detok_new(const kiln_model *m);
void kiln_detok_free(kiln_detok *d);
/* Appends token id and returns the bytes that are now complete (valid until
 * the next call); *len receives their count. */
const char *kiln_detok_push(kiln_detok *d, int32_t id, size_t *len);
/* Returns whatever is held back (an incomplete character) at the end. */
const char *kiln_detok_flush(kiln_detok *d, size_t *len);

/* --------------------------------------------------------------- context */

typedef struct kiln_context kiln_context;

enum { KILN_KV_F16 = 0, KILN_KV_F32 = 1 };

typedef struct kiln_context_params {
    int32_t n_ctx;      /* tokens per sequence; 0 = the model's, capped by memory */
    int32_t n_batch;    /* most tokens one kiln_decode call may carry */
    int32_t n_seq_max;  /* sequences that may be live at once */
    int32_t n_threads;  /* 0 = all online CPUs */
    int32_t kv_type;    /* KILN_KV_F16 or KILN_KV_F32 */
    uint64_t mem_limit; /* bytes the KV cache may take; 0 = half of RAM */
    int32_t embeddings; /* 1: keep the final hidden states (after the output
                           norm) of requested tokens instead of logits */
} kiln_context_params;

kiln_context_params kiln_context_default_params(void);
kiln_status kiln_context_new(kiln_model *m, const kiln_context_params *params, kiln_context **out);
void kiln_context_free(kiln_context *c);
int32_t kiln_context_n_ctx(const kiln_context *c);
const char *kiln_context_error(const kiln_context *c);

/* A batch of tokens from one or more sequences.  Each sequence grows at its
 * end: the tokens of seq s carry positions len(s), len(s)+1, ... in order.
 * pos NULL: positions follow from that rule.  seq NULL: every token is in
 * sequence 0.  logits[i] != 0 asks for the logits of token i (NULL: only
 * the last token of the batch). */
typedef struct kiln_batch {
    int32_t n;
    const int32_t *token;
    const int32_t *pos;
    const int32_t *seq;
    const int8_t *logits;
} kiln_batch;

/* Runs the forward pass.  Fails with KILN_ERR_CONTEXT_FULL (and computes
 * nothing) when a sequence would exceed n_ctx. */
kiln_status kiln_decode(kiln_context *c, const kiln_batch *b);
/* Logits (n_vocab floats) of batch token i from the last decode, or NULL if
 * they were not requested. */
const float *kiln_get_logits(kiln_context *c, int32_t i);
/* Final hidden state (n_embd floats) of batch token i from the last decode
 * of an embeddings context, or NULL. */
const float *kiln_get_embeddings(kiln_context *c, int32_t i);
/* Tokens held for seq. */
int32_t kiln_seq_len(const kiln_context *c, int32_t seq);
/* Drops the tokens of seq from position p on (p = 0 clears it). */
kiln_status kiln_seq_truncate(kiln_context *c, int32_t seq, int32_t p);

/* --------------------------------------------------------------- sampler */

typedef struct kiln_sampler kiln_sampler;

typedef struct kiln_sampler_params {
    float temperature;      /* <= 0: greedy */
    int32_t top_k;          /* 0 = off */
    float top_p;            /* 1 = off */
    float min_p;            /* 0 = off */
    float repeat_penalty;   /* 1 = off */
    int32_t repeat_last_n;  /* window of the penalties; -1 = whole history */
    float presence_penalty; /* 0 = off */
    float frequency_penalty;/* 0 = off */
    uint64_t seed;
} kiln_sampler_params;

kiln_sampler_params kiln_sampler_default_params(void);
kiln_status kiln_sampler_new(const kiln_sampler_params *p, int32_t n_vocab, kiln_sampler **out);
void kiln_sampler_free(kiln_sampler *s);
/* Chooses the next token from logits (n_vocab floats, left unchanged). */
int32_t kiln_sampler_sample(kiln_sampler *s, const float *logits);
/* Records a token in the history the penalties look at (prompt tokens too). */
void kiln_sampler_accept(kiln_sampler *s, int32_t id);
void kiln_sampler_reset(kiln_sampler *s);

/* ------------------------------------------------------------- quantizer */

/* Writes a copy of in_path with 2-D weights converted to type ("q8_0",
 * "q4_0", "q4_k_m", ...).  Norms and 1-D tensors stay F32. */
kiln_status kiln_quantize(const char *in_path, const char *out_path, const char *type, int n_threads);

#ifdef __cplusplus
}
#endif
#endif
