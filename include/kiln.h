/*
 * kiln.h — the public C API of kiln, a local inference runtime.
 *
 * Handles are opaque.  Every call that can fail returns a kiln_status (0 is
 * success, errors are negative) and leaves a one-line message readable with
 * kiln_last_error() on the calling thread; calls on a context also keep it
 * in kiln_context_error().  The library never exits the process.
 *
 * A whole program: generate up to N tokens after a prompt.  It builds as
 * written (tests/header_example.sh compiles it against the installed
 * library):  cc gen.c $(pkg-config --cflags --libs kiln) -o gen
 *
 *     #include <kiln.h>
 *     #include <stdio.h>
 *     #include <stdlib.h>
 *     #include <string.h>
 *
 *     int main(int argc, char **argv) {
 *         if (argc != 4) {
 *             fprintf(stderr, "usage: %s MODEL.gguf PROMPT N\n", argv[0]);
 *             return 2;
 *         }
 *         const char *prompt = argv[2];
 *         const int n_predict = atoi(argv[3]);
 *         kiln_model *m = NULL;
 *         kiln_context *c = NULL;
 *         kiln_sampler *s = NULL;
 *         int32_t ids[512];
 *         if (kiln_model_load(argv[1], NULL, &m) != KILN_OK || kiln_context_new(m, NULL, &c) != KILN_OK) {
 *             fprintf(stderr, "%s\n", kiln_last_error());
 *             kiln_model_free(m);
 *             return 1;
 *         }
 *         kiln_model_info info;
 *         kiln_model_get_info(m, &info);
 *         kiln_sampler_params sp = kiln_sampler_default_params();
 *         sp.temperature = 0; // greedy: the same text every time (the default 0.8 samples)
 *         kiln_sampler_new(&sp, info.n_vocab, &s);
 *         // the prompt, with BOS as the model asks; a negative count is an error
 *         int n = kiln_tokenize(m, prompt, strlen(prompt), 1, 0, ids, 512);
 *         if (n < 1 || n > 512) {
 *             fprintf(stderr, "the prompt does not fit 512 tokens\n");
 *             return 1;
 *         }
 *         for (int i = 0; i < n; i++) kiln_sampler_accept(s, ids[i]); // the penalties' history
 *         kiln_detok *d = kiln_detok_new(m);
 *         kiln_batch b = {n, ids, NULL, NULL, NULL}; // sequence 0, logits of its last token
 *         int rc = 0;
 *         for (int k = 0; k < n_predict; k++) {
 *             if (kiln_decode(c, &b) != KILN_OK) { // KILN_ERR_CONTEXT_FULL when the context is full
 *                 fprintf(stderr, "%s\n", kiln_last_error());
 *                 rc = 1;
 *                 break;
 *             }
 *             int32_t next = kiln_sampler_sample(s, kiln_get_logits(c, b.n - 1));
 *             if (kiln_token_is_eog(m, next)) break;
 *             kiln_sampler_accept(s, next);
 *             size_t len;
 *             const char *piece = kiln_detok_push(d, next, &len); // whole UTF-8 characters only
 *             fwrite(piece, 1, len, stdout);
 *             fflush(stdout);
 *             ids[0] = next; // the next batch: the token just chosen
 *             b.n = 1;
 *         }
 *         size_t len;
 *         const char *tail = kiln_detok_flush(d, &len);
 *         fwrite(tail, 1, len, stdout);
 *         putchar('\n');
 *         kiln_detok_free(d);
 *         kiln_sampler_free(s);
 *         kiln_context_free(c);
 *         kiln_model_free(m);
 *         return rc;
 *     }
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

/* Every status: its name, its number and the text kiln_status_str gives.
 * The list is appended only: a status keeps its number forever, and a new
 * one takes the next negative number at the end, so codes a caller stored
 * or compared keep their meaning. */
#define KILN_STATUS_LIST(X)                                                                                 \
    X(KILN_OK, 0, "ok")                                                                                     \
    X(KILN_ERR_INVALID_ARG, -1, "invalid argument") /* a parameter is out of range or NULL */               \
    X(KILN_ERR_IO, -2, "I/O error")                 /* a file could not be opened, read or written */       \
    X(KILN_ERR_FORMAT, -3, "malformed file")        /* a file is malformed (bad GGUF, wrong shapes) */      \
    X(KILN_ERR_UNSUPPORTED, -4, "unsupported")      /* valid, but kiln can't run it (architecture, type) */ \
    X(KILN_ERR_NOMEM, -5, "out of memory")          /* an allocation failed */                              \
    X(KILN_ERR_CONTEXT_FULL, -6, "context full")    /* prompt + requested tokens exceed the context */      \
    X(KILN_ERR_CANCELLED, -7, "cancelled")          /* the request was cancelled */                         \
    X(KILN_ERR_STATE, -8, "invalid state")          /* the call is not valid in the current state */        \
    X(KILN_ERR_NOT_FOUND, -9, "not found")          /* a named model, key or sequence does not exist */     \
    X(KILN_ERR_INTERNAL, -10, "internal error")     /* a bug in kiln */                                     \
    X(KILN_ERR_CORRUPT, -11, "model corrupt")       /* its weights disagree with its own configuration */   \
    /* (a decision pack's heads) */

#define KILN_STATUS_ENUM_(name, value, text) name = value,
typedef enum kiln_status { KILN_STATUS_LIST(KILN_STATUS_ENUM_) } kiln_status;
#undef KILN_STATUS_ENUM_

/* A static English description of a status ("invalid argument"). */
const char *kiln_status_str(kiln_status st);
/* The message of the last failed call on this thread ("" if none). */
const char *kiln_last_error(void);

enum { KILN_LOG_ERROR = 0, KILN_LOG_WARN = 1, KILN_LOG_INFO = 2, KILN_LOG_DEBUG = 3 };
typedef void (*kiln_log_fn)(int level, const char *msg, void *user);
/* Sends log lines up to max_level to fn (NULL restores stderr). */
void kiln_set_log(kiln_log_fn fn, void *user, int max_level);

/* Highest SIMD level the kernels use: "scalar", "avx2", "avx512 vnni" or
 * "avx512 vnni bf16" (BF16 rows then use vdpbf16ps). */
const char *kiln_cpu_path(void);

/* --------------------------------------------------------------- backends */

/* What this machine can run, found without loading a model: each CPU path
 * kiln's kernels have (and AMX), and the GPU runtimes kiln knows of.  A
 * path is available only when the hardware has it AND the OS enables its
 * register state (a virtual machine may advertise AMX or AVX-512 and trap
 * on it); a GPU runtime is available when its driver library loads,
 * initializes and finds a device. */
typedef enum kiln_availability {
    KILN_AVAILABILITY_UNKNOWN = 0,
    KILN_AVAILABILITY_AVAILABLE = 1,
    KILN_AVAILABILITY_UNAVAILABLE = 2
} kiln_availability;

typedef struct kiln_backend_status {
    const char *name; /* "cpu", "cpu-avx2", "cpu-avx512", "cpu-avx512-vnni",
                                  "cpu-avx512-bf16", "cpu-amx", "cuda", "vulkan" */
    const char *kind; /* "cpu" or "gpu" */
    kiln_availability availability;
    int supported;    /* 1: this build has kernels for it */
    int used;         /* 1: kiln's kernels run on it now (KILN_ISA may cap) */
    char detail[256]; /* the reason or what was found, in a few words */
} kiln_backend_status;

/* Writes up to cap rows into out (may be NULL with cap 0) and returns how
 * many there are.  GPU checks dlopen the driver's library and initialize it
 * (which may take a moment); no model is read.  Safe from any thread. */
int kiln_backend_probe(kiln_backend_status *out, int cap);
/* "available", "unavailable" or "unknown". */
const char *kiln_availability_str(kiln_availability a);

/* ------------------------------------------------------------------ model */

typedef struct kiln_model kiln_model;

typedef struct kiln_model_params {
    int prefetch;       /* 1: advise the kernel to read the weights ahead */
    int repack;         /* 1: copy Q4_0, Q8_0, Q4_K and Q6_K matrices into the 8-row
                           interleaved layout at load (faster products; the
                           copies replace the mapped pages in memory, so RSS
                           stays about the same).  Default 1; the environment
                           variable KILN_REPACK=0 turns the default off. */
    int backend;        /* a kiln_engine_backend.  CPU (1); CUDA (2): the GPU, or
                     KILN_ERR_UNSUPPORTED with the reason in one line (no
                     GPU, a family or type without kernels, too little free
                     device memory); AUTO (0, the default): CUDA when a GPU
                     is usable and CUDA takes the model, else the CPU, with
                     one warning naming why when a GPU was there.  The
                     environment variable KILN_DEVICE=cpu|cuda turns AUTO
                     into that backend. */
    const char *mmproj; /* a multimodal projector (llama.cpp's mmproj GGUF) to
                           load with the model, so prompts may carry images
                           (kiln_model_has_vision); NULL: none */
    int32_t gpu_layers; /* layers on the GPU: 0 (the default) every one (on
                           AUTO: as many as fit when not all do); N below
                           or at the model's layers: its last N on the GPU,
                           the rest, the embeddings and the output head on
                           the CPU (llama.cpp's -ngl);
                           KILN_GPU_LAYERS_AUTO: as many as the GPU's
                           free memory holds */
    /* The context the caller will make (NULL: kiln_context_default_params
     * with min(the model's, 4096) tokens).  On CUDA the load checks that
     * the weights, that context's KV cache and the activations fit the
     * device's free memory before it uploads anything, and refuses a KV
     * cache type the GPU cannot keep. */
    const struct kiln_context_params *ctx;
} kiln_model_params;
#define KILN_GPU_LAYERS_AUTO (-1)

kiln_model_params kiln_model_default_params(void);

/* Loads a GGUF file (or the first shard of a split model).  Weights stay in
 * the read-only mapping.  Fails with one clear message on a bad file or an
 * unsupported architecture. */
kiln_status kiln_model_load(const char *path, const kiln_model_params *params, kiln_model **out);
void kiln_model_free(kiln_model *m);
/* 1 when the model was loaded with a projector (it takes images). */
int32_t kiln_model_has_vision(const kiln_model *m);

/* An image given to a model: an encoded file (PNG, JPEG or WebP) of len
 * bytes, or, with width and height > 0, raw RGB8 pixels row by row (len ==
 * width * height * 3).  Borrowed for the call. */
typedef struct kiln_image_input {
    const uint8_t *data;
    size_t len;
    int32_t width, height;
} kiln_image_input;

typedef struct kiln_model_info {
    const char *arch; /* general.architecture, e.g. "llama" */
    const char *name; /* general.name or "" */
    int32_t n_vocab;
    int32_t n_ctx_train; /* context length the model declares */
    int32_t n_embd;
    int32_t n_layer;
    int32_t n_head;
    int32_t n_head_kv;
    int32_t n_ff;
    uint64_t n_params;           /* number of weights */
    uint64_t n_bytes;            /* bytes of tensor data */
    const char *ftype;           /* dominant weight type, e.g. "Q4_0" */
    uint64_t repacked_bytes;     /* weights copied to the interleaved layout at
                                load (0: repacking off or nothing to repack) */
    uint64_t step_bytes;         /* tensor bytes one decode step reads: all but
                                the token embedding (one row of it), unless
                                the output projection is that same tensor */
    uint64_t active_bytes;       /* the same for one token of a mixture of
                                experts: only its experts' rows (= step_bytes
                                for other models) */
    int32_t n_attn_layer;        /* layers with a KV cache (hybrid models: the
                                full-attention ones; the rest are recurrent) */
    uint64_t kv_bytes_per_token; /* K and V of one token over those layers,
                                    F16 cache */
    uint64_t state_bytes;        /* recurrent state one sequence holds, whatever
                                its length (0: none) */
    const char *backend;         /* where it runs: "cpu" or "cuda" */
    uint64_t device_bytes;       /* weights in GPU memory (0 on the CPU) */
    int32_t n_embd_inp;          /* floats of an image token's input row
                                    (kiln_batch_inputs.embd): n_embd, wider for
                                    Qwen3-VL's deepstack */
    int32_t gpu_layers;          /* layers on the GPU: n_layer (with the head) when
                                    all, fewer when split, 0 on the CPU */
} kiln_model_info;

void kiln_model_get_info(const kiln_model *m, kiln_model_info *info);
/* The GGUF chat template, or NULL. */
const char *kiln_model_chat_template(const kiln_model *m);

/* -------------------------------------------------------------- tokenizer */

/* Tokenizes text.  add_special adds BOS/EOS as the model's metadata says;
 * parse_special maps control-token texts (e.g. "<|im_end|>") to their ids.
 * Returns the number of tokens; if that is more than cap only cap were
 * written.  A negative return is a kiln_status. */
int kiln_tokenize(const kiln_model *m, const char *text, size_t len, int add_special, int parse_special, int32_t *out,
                  int cap);
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

/* KV cache element types.  Q8_0 (llama.cpp's -ctk/-ctv q8_0) takes 34
 * bytes per 32 elements, 53 % of F16, and needs head sizes that are
 * multiples of 32 (at most 256). */
enum { KILN_KV_F16 = 0, KILN_KV_F32 = 1, KILN_KV_Q8_0 = 2 };

typedef struct kiln_context_params {
    int32_t n_ctx;             /* tokens per sequence; 0 = the model's, capped by memory */
    int32_t n_batch;           /* most tokens one kiln_decode call may carry */
    int32_t n_seq_max;         /* sequences that may be live at once */
    int32_t n_threads;         /* 0 = all online CPUs */
    int32_t kv_type;           /* KILN_KV_F16, KILN_KV_F32 or KILN_KV_Q8_0 */
    uint64_t mem_limit;        /* bytes the KV cache and the recurrent state may
                           take; 0 = half of RAM */
    int32_t embeddings;        /* 1: keep the final hidden states (after the output
                           norm) of requested tokens instead of logits */
    int32_t n_state_snapshots; /* models with recurrent layers: copies of a
                           sequence's state kept for prefix reuse and
                           kiln_seq_truncate; 0 = 4 per sequence, -1 = none */
    int32_t mtp;               /* 1: keep the KV cache of the model's MTP (NextN)
                           block, which speculative decoding with
                           KILN_SPEC_MTP needs (ignored for a model
                           without one) */
} kiln_context_params;

kiln_context_params kiln_context_default_params(void);
kiln_status kiln_context_new(kiln_model *m, const kiln_context_params *params, kiln_context **out);
void kiln_context_free(kiln_context *c);
int32_t kiln_context_n_ctx(const kiln_context *c);
/* Most tokens one kiln_decode call may carry, sequences that may be live
 * at once and threads (the values in effect after kiln_context_new). */
int32_t kiln_context_n_batch(const kiln_context *c);
int32_t kiln_context_n_seq_max(const kiln_context *c);
int32_t kiln_context_n_threads(const kiln_context *c);
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
/* What a batch may carry beside token ids (NULL members: none).  embd
 * ([n][n_embd]) gives the input of each token whose id is negative (an
 * image token: vision_prompt_build's ids), used as is in place of a token
 * embedding; the rows of other tokens are not read.  For a projector whose
 * images attend both ways (Gemma 3), a run of negative ids of one sequence
 * at consecutive positions in one batch is one image, each of its tokens
 * seeing all of it: feed an image's tokens in one batch.  mpos ([n][4])
 * gives multimodal RoPE positions (t, h, w, e) for models whose RoPE has
 * sections (qwen2vl, qwen3vl, qwen3vlmoe, qwen35, qwen35moe; others ignore
 * it): row i relative to its image's first token, whose row is
 * (0, 0, 0, 0) (t, h and w are offset by that token's text position, e is
 * taken as is), t < 0 for a text token.  A text token takes the
 * sequence's next position in all four: 1 + the largest t, h or w of its
 * tokens so far (0 when empty), so after an image of nx x ny tokens (rows
 * (0, r, c, 0)) text goes on at its first position + max(nx, ny).  An
 * image's rows may go on in a later batch (each cell keeps its image's
 * position). */
typedef struct kiln_batch_inputs {
    const float *embd;
    const int32_t *mpos;
} kiln_batch_inputs;
/* kiln_decode with in (NULL: kiln_decode).  Negative ids need in->embd. */
kiln_status kiln_decode_inputs(kiln_context *c, const kiln_batch *b, const kiln_batch_inputs *in);
/* Logits (n_vocab floats) of batch token i from the last decode, or NULL if
 * they were not requested. */
const float *kiln_get_logits(kiln_context *c, int32_t i);
/* Final hidden state (n_embd floats) of batch token i from the last decode
 * of an embeddings context, or NULL. */
const float *kiln_get_embeddings(kiln_context *c, int32_t i);
/* Tokens held for seq. */
int32_t kiln_seq_len(const kiln_context *c, int32_t seq);
/* Drops the tokens of seq from position p on (p = 0 clears it).  A model
 * with recurrent layers (qwen35, qwen35moe, qwen3next) keeps a state that
 * cannot be cut back to any position: only to 0, to the current length, or
 * where the context kept a snapshot of seq (the end of each prompt chunk,
 * its last block boundary, where kiln_seq_cache was called);
 * elsewhere this fails with KILN_ERR_STATE and changes nothing. */
kiln_status kiln_seq_truncate(kiln_context *c, int32_t seq, int32_t p);
/* The largest position q <= p that kiln_seq_truncate(c, seq, q) accepts:
 * p itself (at most the length) for models whose state is their KV cache;
 * for recurrent ones the nearest snapshot, else 0. */
int32_t kiln_seq_truncate_point(const kiln_context *c, int32_t seq, int32_t p);
/* Makes dst (which must be empty) hold what src holds: whole KV blocks
 * shared (copy on write), the last partial one copied, the recurrent state
 * copied.  A fork to try tokens on (speculative decoding) and drop with
 * kiln_seq_truncate(dst, 0). */
kiln_status kiln_seq_copy(kiln_context *c, int32_t src, int32_t dst);

/* Prefix cache.  The KV cache is made of blocks of block_tokens tokens; a
 * full block whose tokens were published with kiln_seq_cache can be shared
 * by later sequences that begin with the same tokens (the key chains every
 * earlier block, so only a whole common prefix matches).  Unused shared
 * blocks stay cached until their memory is needed (least recently used
 * first).
 *
 * kiln_seq_reuse: seq must be empty.  Attaches the cached blocks that match
 * the longest prefix of tokens[0..n), always leaving at least the last
 * token to decode, and returns the tokens now held (a multiple of
 * block_tokens); decode continues with tokens[returned..n).
 * kiln_seq_cache: tokens[0..n) are the first n tokens seq holds; publishes
 * its full blocks among them (call again as the sequence grows).
 * Models with recurrent layers reuse a prefix only where a snapshot of a
 * state after exactly those tokens exists (kiln_seq_cache keys seq's
 * snapshots by their tokens and takes one at the current length): the
 * returned count is then that snapshot's position (any, not only a
 * multiple of block_tokens), possibly 0; decoding resumes from it as if
 * the prefix had just been decoded.  Where the KV cache matched further
 * than any snapshot, the next prefill of seq takes one at that point. */
int32_t kiln_seq_reuse(kiln_context *c, int32_t seq, const int32_t *tokens, int32_t n);
kiln_status kiln_seq_cache(kiln_context *c, int32_t seq, const int32_t *tokens, int32_t n);

typedef struct kiln_kv_stats {
    int32_t block_tokens;    /* tokens per block */
    int32_t n_blocks;        /* blocks in the budget */
    int32_t n_used;          /* held by sequences */
    int32_t n_cached;        /* unheld but kept for reuse */
    uint64_t lookup_blocks;  /* blocks kiln_seq_reuse looked up, in total */
    uint64_t hit_blocks;     /* of those, found */
    int32_t state_snapshots; /* recurrent models: snapshot slots in use */
    int32_t state_slots;     /* and in all */
    uint64_t state_restores; /* states restored (reuse, truncate) */
} kiln_kv_stats;
void kiln_kv_get_stats(const kiln_context *c, kiln_kv_stats *out);

/* --------------------------------------------------------------- sampler */

typedef struct kiln_sampler kiln_sampler;

typedef struct kiln_sampler_params {
    float temperature;       /* <= 0: greedy */
    int32_t top_k;           /* 0 = off */
    float top_p;             /* 1 = off */
    float min_p;             /* 0 = off */
    float repeat_penalty;    /* 1 = off */
    int32_t repeat_last_n;   /* window of the penalties; -1 = whole history */
    float presence_penalty;  /* 0 = off */
    float frequency_penalty; /* 0 = off */
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

/* ---------------------------------------------------- speculative decoding */

/* Speculative decoding: a proposer guesses the next few tokens and the
 * model checks them all in one batched forward, so every accepted guess
 * costs little more than reading the weights once.  The model's verdict is
 * the output: greedy decoding gives byte-identical text with or without
 * it, and sampling keeps the model's distribution exactly.  Proposers:
 *   KILN_SPEC_NGRAM  prompt lookup: the continuation of the latest earlier
 *                    occurrence of the last few tokens in the prompt and
 *                    output so far (no extra model; good for quoting,
 *                    code edits, answers from given documents)
 *   KILN_SPEC_DRAFT  a smaller model with the same vocabulary (checked at
 *                    load: the same token texts and special ids), with its
 *                    own context and KV cache
 *   KILN_SPEC_MTP    the model's own multi-token-prediction (NextN)
 *                    block(s), as Qwen 3.5 checkpoints carry them
 * The number of guesses per step adapts to how many are accepted, so
 * speculation that does not pay costs only a few percent. */
typedef enum kiln_spec_type {
    KILN_SPEC_NONE = 0,
    KILN_SPEC_NGRAM = 1,
    KILN_SPEC_DRAFT = 2,
    KILN_SPEC_MTP = 3
} kiln_spec_type;

typedef struct kiln_spec_params {
    kiln_spec_type type;
    int32_t n_max;           /* most tokens proposed per step, 1..16 (default 8) */
    int32_t fixed;           /* 1: always propose n_max (no adaptive length) */
    const char *draft_model; /* KILN_SPEC_DRAFT: the draft model's GGUF path */
    int32_t ngram_min;       /* KILN_SPEC_NGRAM: shortest match looked up (default 2) */
    int32_t ngram_max;       /*   and longest, tried first (default 5) */
    float p_min;             /* draft and MTP, greedy: stop proposing at a token the
                                proposer gives less probability than this (default 0) */
} kiln_spec_params;

kiln_spec_params kiln_spec_default_params(void);
/* "none", "ngram", "draft", "mtp"; the type named s, or -1. */
const char *kiln_spec_type_str(kiln_spec_type t);
int kiln_spec_type_from_str(const char *s);

/* ------------------------------------------------------------------ store */

/* The model store: named packs of verified artifacts under one root
 * (default $KILN_STORE, else $XDG_DATA_HOME/kiln, else ~/.local/share/kiln).
 * A pack is visible only once every artifact is complete, hash-checked and
 * the GGUF parses with a supported architecture.  Names look like
 * "qwen3-0.6b:q4_k_m" (":latest" is implied); a pack id is the SHA-256 (64
 * hex digits) of its manifest.  Every call is safe across processes. */
typedef struct kiln_store kiln_store;
typedef struct kiln_store_lease kiln_store_lease;

/* Opens (creating if needed) the store at root; NULL uses the default. */
kiln_status kiln_store_open(const char *root, kiln_store **out);
void kiln_store_close(kiln_store *s);
const char *kiln_store_root(const kiln_store *s);

/* One progress event.  event is "start", "waiting" (another process holds
 * the pack), "resume", "restart", "progress", "retry", "verify", "done" (an
 * artifact is complete), "published" or "warning".  Byte counts are for the
 * artifact and for the whole pack; a total of 0 is unknown. */
typedef struct kiln_store_progress {
    const char *event;
    const char *artifact; /* file name, or NULL for pack-wide events */
    int32_t index, count; /* artifact number (from 0) and how many */
    uint64_t done, total;
    uint64_t all_done, all_total;
    double rate;         /* bytes per second, smoothed */
    double eta;          /* seconds left, -1 when unknown */
    const char *message; /* reason of a retry/restart/warning, or NULL */
} kiln_store_progress;
typedef void (*kiln_store_progress_fn)(const kiln_store_progress *p, void *user);
/* Renders p as one JSON object (the /api/pull event); returns its length,
 * which may exceed cap (then buf holds a truncated prefix). */
int kiln_store_progress_json(const kiln_store_progress *p, char *buf, size_t cap);

typedef struct kiln_store_pull_params {
    const char *const *headers; /* "Name: value" lines sent to the source's
                                   own origin only (the URL's, the hub's or
                                   the registry's), never after a redirect
                                   to another host; NULL = $KILN_AUTH_HEADER */
    int32_t n_headers;
    kiln_store_progress_fn progress;
    void *user;
    const volatile int *cancel; /* non-zero cancels; the partial file stays */
    const char *token;          /* bearer token for the hub or registry (its
                                   origin only); NULL = $HF_TOKEN (or the
                                   token file huggingface_hub writes) for
                                   the hub, none for a registry */
} kiln_store_pull_params;

/* Downloads a model into the store and names it.  ref is one of
 *   https://host/path/model.gguf   a file (HTTP only to this machine); a
 *                                  URL ending in ".json" is a pack
 *                                  manifest listing several artifacts
 *   hf.co/ORG/REPO[:QUANT]         Hugging Face: the GGUF of QUANT (else
 *   hf.co/ORG/REPO/FILE.gguf[@REV] Q4_K_M, Q8_0, the first), every shard
 *                                  and the mmproj companion, at the commit
 *                                  the revision (default main) names;
 *                                  $HF_ENDPOINT sets the hub
 *   [HOST/][NS/]MODEL[:TAG]        an Ollama registry ($KILN_REGISTRY, a
 *                                  base URL, default
 *                                  https://registry.ollama.ai; NS library)
 * name (may be NULL) defaults to ref itself for hub and registry pulls,
 * to the file name for URLs.  sha256 (64 hex digits, may be NULL) must
 * match the (first) artifact.  Interrupted pulls resume from their partial
 * files; a pack of the same pinned source already installed is reused.
 * id_out (65 bytes, may be NULL) receives the pack id.  On failure
 * kiln_store_last_source_result() tells what kind of failure it was. */
kiln_status kiln_store_pull(kiln_store *s, const char *ref, const char *name, const char *sha256,
                            const kiln_store_pull_params *params, char *id_out);

/* Inspects a model before any download: ref as kiln_store_pull takes it
 * (a URL, a hub or a registry reference; params as for a pull, may be
 * NULL).  Only metadata and the GGUF header are read, with Range requests
 * of at most 16 MiB and 64 MiB in all; a server that ignores Range gives
 * KILN_SOURCE_UNVERIFIED rather than a whole-file read.  *json_out (free
 * with kiln_store_free_string): {reference, source?, files [{path, role,
 * length?, sha256?}], size?, metadata_verified, arch, model_name?,
 * context_length, layers, embedding_length, quantization, file_type,
 * tensors, parameters, tensor_bytes, split_count, gguf_version,
 * model_file_size, header_bytes_read, range_requests, runnable,
 * runnable_reason}.  Counts from the header are of the first file of a
 * split model. */
kiln_status kiln_store_inspect(const char *ref, const kiln_store_pull_params *params, char **json_out);

/* What the last pull or inspection of this thread ended with at its
 * source: the distinct results a user needs to act on. */
typedef enum kiln_store_source_result {
    KILN_SOURCE_OK = 0,
    KILN_SOURCE_AUTH_REQUIRED = 1, /* credentials needed and none given */
    KILN_SOURCE_GATED = 2,         /* the account must accept the terms first */
    KILN_SOURCE_DENIED = 3,        /* credentials given and refused */
    KILN_SOURCE_NOT_FOUND = 4,     /* no such repository, revision, file or tag (or private) */
    KILN_SOURCE_TRANSIENT = 5,     /* network or server failures outlasted the retries */
    KILN_SOURCE_UNVERIFIED = 6,    /* metadata missing, inconsistent, or a Range ignored */
    KILN_SOURCE_OTHER = 7          /* anything else: local I/O, integrity, format */
} kiln_store_source_result;
kiln_store_source_result kiln_store_last_source_result(void);
const char *kiln_store_source_result_str(kiln_store_source_result r);

enum { KILN_STORE_COPY = 0, KILN_STORE_MOVE = 1, KILN_STORE_LINK = 2 };
/* Imports a local GGUF.  COPY leaves the source alone; MOVE commits a copy
 * and then removes the source if it is unchanged; LINK records the file in
 * place (checked again at every resolve). */
kiln_status kiln_store_import(kiln_store *s, const char *path, const char *name, int mode,
                              kiln_store_progress_fn progress, void *user, char *id_out);

/* JSON texts, freed with kiln_store_free_string.  list: an array of
 * {name, id, size, arch, quantization, mode, state (ok, changed, missing
 * with "missing" naming the file, damaged), family ("rerank" or
 * "decision" when the architecture does not tell it), installed (when the pack was
 * published), modified (when the name was last bound to it; both seconds
 * since the epoch)}; info: {name, id, state,
 * names, defaults, manifest} of one name or id (defaults: see
 * kiln_store_lease_defaults). */
kiln_status kiln_store_list(kiln_store *s, char **json_out);
kiln_status kiln_store_info(kiln_store *s, const char *name, char **json_out);
void kiln_store_free_string(char *str);

/* Re-hashes every artifact; a mismatch names the file and marks the pack
 * damaged (resolve then refuses it). */
kiln_status kiln_store_verify(kiln_store *s, const char *name, kiln_store_progress_fn progress, void *user);
/* Wherever a call takes a name it also takes a pack id, or a prefix of one
 * (at least 4 hex digits, such as the 12 kiln ls prints) that begins only
 * one pack; a name wins over a prefix, and an ambiguous prefix is
 * KILN_ERR_INVALID_ARG. */
/* Removes a name, or with an id the pack and all its names.  A pack whose
 * last name goes is deleted; refused (KILN_ERR_STATE) while leased. */
kiln_status kiln_store_remove(kiln_store *s, const char *name_or_id);
/* Receives one name (valid during the call only). */
typedef void (*kiln_store_name_fn)(const char *name, void *user);
/* kiln_store_remove as kiln rm does it: an id (or prefix) whose pack carries
 * several names is refused (KILN_ERR_STATE, the message lists them) unless
 * force; removed (may be NULL) hears each name that went, after it went. */
kiln_status kiln_store_remove_names(kiln_store *s, const char *name_or_id, int force, kiln_store_name_fn removed,
                                    void *user);
/* Adds the name dst for the pack src names (kiln cp).  When dst already
 * names another pack it is refused (KILN_ERR_STATE) unless force; then dst
 * moves, and the pack it named goes with its last name (at once, or by gc
 * while a lease holds it). */
kiln_status kiln_store_copy(kiln_store *s, const char *src, const char *dst, int force);
/* kiln_store_copy without force. */
kiln_status kiln_store_alias(kiln_store *s, const char *src, const char *dst);
/* Installs name as a new model made of src's (kiln chat's /save, as
 * Ollama's): the same weights (hard links inside the store, nothing
 * copied), template and license, with system (may be NULL: src's) as its
 * system prompt and options_json (may be NULL: src's; a JSON object of
 * Ollama's option names, as kiln_store_lease_defaults lists them) as its
 * options.  A name that named another model now names this one.  id_out
 * (65 bytes, may be NULL) receives the new pack's id. */
kiln_status kiln_store_save_as(kiln_store *s, const char *src, const char *name, const char *system,
                               const char *options_json, char *id_out);

/* Deletes orphaned staging and quarantine entries older than a day, and
 * packs that no name points at and no lease holds; each() (may be NULL)
 * hears every removal. */
typedef void (*kiln_store_gc_fn)(const char *path, uint64_t bytes, void *user);
kiln_status kiln_store_gc(kiln_store *s, kiln_store_gc_fn each, void *user, uint64_t *n_removed,
                          uint64_t *bytes_removed);

/* Finds name (or id), revalidates its files (a stamp of inode, size, mtime
 * and ctime skips re-hashing unchanged files) and takes a lease: a shared
 * lock that keeps the pack from removal until kiln_store_release.  The
 * lease outlives the store handle. */
kiln_status kiln_store_resolve(kiln_store *s, const char *name, kiln_store_lease **out);
const char *kiln_store_lease_path(const kiln_store_lease *l); /* the GGUF */
const char *kiln_store_lease_id(const kiln_store_lease *l);
/* What the pack brings beside its weights, read with the verified pack, as
 * one JSON object (owned by the lease; "{}" for a plain GGUF):
 *   "template"         chat template override ("template_format": "go",
 *                      Go text/template as Ollama models carry it)
 *   "system"           default system prompt
 *   "options"          default options by Ollama's names (temperature,
 *                      top_k, top_p, min_p, repeat_penalty, num_ctx,
 *                      num_predict, stop, seed, ...); request options win
 *   "license"          array of license texts
 *   "messages"         an initial conversation (array of {role, content})
 * Each key is present only when the pack has it. */
const char *kiln_store_lease_defaults(const kiln_store_lease *l);
void kiln_store_release(kiln_store_lease *l);

/* Built-in models: names kiln knows without a manifest (the published
 * Whisper variants, "whisper:tiny" ... "whisper:large-v3-turbo").  Reading
 * the table touches no file. */
typedef struct kiln_builtin_model {
    const char *name;   /* store name */
    const char *family; /* engine family key ("stt") */
    const char *file;   /* the publisher's file name */
    const char *size;   /* as published ("142 MiB"); exact length unknown */
    const char *sha1;   /* the publisher's SHA-1, NULL if unknown */
    const char *sha256; /* NULL: not published; the pull records it */
} kiln_builtin_model;
int kiln_builtin_count(void);
const kiln_builtin_model *kiln_builtin_at(int i);
const kiln_builtin_model *kiln_builtin_find(const char *name);
/* Pulls a built-in model, from the Hugging Face repository
 * ggerganov/whisper.cpp ($HF_ENDPOINT sets the hub; lengths and SHA-256
 * from its LFS metadata) when url is NULL or "", else from url (a file URL,
 * or a mirror folder ending in "/" to which the file name is added); names
 * it, then checks the published SHA-1 (a mismatch removes the pack). */
kiln_status kiln_builtin_pull(kiln_store *s, const char *name, const char *url, const kiln_store_pull_params *p,
                              char *id_out);

/* ------------------------------------------------------------- embedder */

/* Text embeddings: an encoder (bert, modern-bert, gemma-embedding), or a
 * decoder (e.g. qwen3) whose final normalized hidden states are pooled.
 * Every vector is L2-normalized.
 *
 *   kiln_embedder *e;  kiln_embedder_new("model.gguf", NULL, &e);
 *   const char *texts[] = {"first doc", "second doc"};
 *   kiln_embed_request r = {2, texts, NULL, KILN_EMBED_DOCUMENT, 0, 0};
 *   kiln_embed_job *j;  kiln_embed(e, &r, &j);   // counts, then embeds all
 *   const kiln_embeddings *out = kiln_embed_result(j);
 *   ... out->vectors[i * out->dim + k] ...
 *   kiln_embed_job_free(j);
 *
 * A caller that must yield between forward runs (a request gate) uses
 * kiln_embed_begin, then kiln_embed_next until no input is left (or
 * kiln_embed_run over the ranges kiln_embed_batch_end gives).  Encoder
 * inputs run shortest first, several per run laid end to end (no padding);
 * each vector equals the one its input gets alone.  One embedder is driven
 * by one thread at a time.
 *
 * Formatting: the runtime formats each input itself.  A format replaces
 * "{text}" by the input and "{title}" by the document's title ("none"
 * without one); a format without "{text}" is a prefix.  The GGUF string
 * keys kiln.embedding.query_prefix and kiln.embedding.document_prefix (an
 * empty string means none) win; then the architecture's own
 * (gemma-embedding: "task: search result | query: {text}" and
 * "title: {title} | text: {text}"); then general.name picks a family
 * default (case-insensitive):
 *   "e5"                   query "query: ", document "passage: "
 *   "bge" (English)        query "Represent this sentence for searching relevant passages: "
 *   "nomic-embed"          "search_query: " / "search_document: "
 *   "qwen3-embedding"      query "Instruct: Given a web search query, retrieve relevant
 *                          passages that answer the query\nQuery:"
 * and otherwise no prefix.  Special tokens ([CLS]/[SEP], BOS/EOS) follow
 * the vocabulary's metadata.
 *
 * Pooling comes from {arch}.pooling_type (1 mean, 2 CLS, 3 last); without
 * the key bert pools by mean and decoders take the last token.  Type 0
 * (none, one vector per token) and others are refused. */
typedef struct kiln_embedder kiln_embedder;
typedef struct kiln_embed_job kiln_embed_job;

enum { KILN_EMBED_DOCUMENT = 0, KILN_EMBED_QUERY = 1 };
enum { KILN_POOLING_NONE = 0, KILN_POOLING_MEAN = 1, KILN_POOLING_CLS = 2, KILN_POOLING_LAST = 3 };

typedef struct kiln_embedder_params {
    int32_t n_threads;  /* 0 = all online CPUs */
    int32_t n_batch;    /* encoders: most tokens several inputs share one forward
                           run with (an input longer than that runs alone);
                           decoders: most tokens per decode; 0 = 2048 */
    int32_t max_tokens; /* per-input limit; 0 = the model's context length
                           (for decoders capped by the KV memory budget) */
} kiln_embedder_params;

kiln_embedder_params kiln_embedder_default_params(void);
/* Loads path and prepares the embedder, including the fingerprint (a
 * SHA-256 over every tensor's bytes: proportional to the file size). */
kiln_status kiln_embedder_new(const char *path, const kiln_embedder_params *p, kiln_embedder **out);
/* Same over an already loaded model, which must outlive the embedder. */
kiln_status kiln_embedder_new_from_model(kiln_model *m, const kiln_embedder_params *p, kiln_embedder **out);
void kiln_embedder_free(kiln_embedder *e);

typedef struct kiln_embedder_info {
    const char *arch;         /* general.architecture */
    int32_t n_embd;           /* full vector length */
    int32_t max_tokens;       /* per input, prefix and special tokens included */
    int32_t pooling;          /* KILN_POOLING_* */
    const char *query_prefix; /* "" when none */
    const char *document_prefix;
    const char *fingerprint; /* 64 lowercase hex digits */
} kiln_embedder_info;

void kiln_embedder_get_info(const kiln_embedder *e, kiln_embedder_info *info);

typedef struct kiln_embed_request {
    int32_t n;                 /* inputs */
    const char *const *texts;  /* UTF-8, as the caller wrote them */
    const size_t *lens;        /* byte lengths; NULL: texts are NUL-terminated */
    int32_t kind;              /* KILN_EMBED_QUERY or KILN_EMBED_DOCUMENT */
    int32_t dim;               /* 0 = n_embd; 1..n_embd keeps the leading values
                                   and renormalizes (Matryoshka) */
    int32_t allow_truncate;    /* 1: cut inputs over the limit (keeping the
                                   closing special token) instead of failing */
    const char *const *titles; /* documents: [n] titles for formats with
                                   {title} (NULL, or a NULL/"" entry: "none") */
} kiln_embed_request;

typedef struct kiln_embeddings {
    int32_t n;               /* inputs */
    int32_t dim;             /* floats per vector */
    const float *vectors;    /* [n][dim], unit length once embedded */
    const int32_t *n_tokens; /* [n] tokens each input runs with */
    int32_t n_truncated;
    const int32_t *truncated; /* [n_truncated] ascending indices of cut inputs */
    const char *fingerprint;  /* the embedder's; compare before mixing vectors */
} kiln_embeddings;

/* Formats and tokenizes every input and checks each against max_tokens;
 * runs no model.  An input over the limit fails the whole request with
 * KILN_ERR_CONTEXT_FULL and a message naming each such input ("input 3:
 * 700 tokens > limit 512"), unless allow_truncate. */
kiln_status kiln_embed_begin(kiln_embedder *e, const kiln_embed_request *r, kiln_embed_job **out);
/* After a failed kiln_embed_begin: how many inputs were over the limit,
 * their indices and token counts (valid until the next begin). */
int32_t kiln_embed_over_limit(const kiln_embedder *e, const int32_t **index, const int32_t **n_tokens);
/* The end of the longest range [begin, end) that one forward run holds. */
int32_t kiln_embed_batch_end(const kiln_embed_job *j, int32_t begin);
/* Runs the next forward run of the job: the shortest inputs not embedded
 * yet, as many as one run holds (decoders: the next input).  *n_left
 * (optional) gets the inputs still to embed; 0 when done. */
kiln_status kiln_embed_next(kiln_embed_job *j, int32_t *n_left);
/* Embeds inputs [begin, end) (several forward runs when they do not fit
 * one).  Each vector equals the one its input gets alone (within 1e-5). */
kiln_status kiln_embed_run(kiln_embed_job *j, int32_t begin, int32_t end);
/* Results; vectors of inputs not run yet are zero.  Owned by the job. */
const kiln_embeddings *kiln_embed_result(const kiln_embed_job *j);
void kiln_embed_job_free(kiln_embed_job *j);
/* kiln_embed_begin + kiln_embed_run over every input.  On failure *out is
 * NULL. */
kiln_status kiln_embed(kiln_embedder *e, const kiln_embed_request *r, kiln_embed_job **out);

/* ------------------------------------------------------------- reranker */

/* Scores (query, document) pairs for relevance: a cross-encoder (an
 * encoder with a classification head, cls.output: BERT-family, ModernBERT)
 * or a causal LM reranker (Qwen3-Reranker: {arch}.pooling_type 4, the
 * "yes"/"no" rows in cls.output and the tokenizer.chat_template.rerank
 * prompt with {query} and {document}).
 *
 *   kiln_reranker *r;  kiln_reranker_new("reranker.gguf", NULL, &r);
 *   const char *docs[] = {"a kiln fires clay", "the weather is sunny"};
 *   kiln_rerank_request q = {"what does a kiln do", 0, 2, docs, NULL, 1};
 *   kiln_rerank_job *j;  kiln_rerank(r, &q, &j);
 *   ... kiln_rerank_result(j)->scores[i] ...
 *   kiln_rerank_job_free(j);
 *
 * Framing of a cross-encoder's pair, each text tokenized on its own with
 * every special token recognized:
 *   WordPiece (BERT):   [CLS] q [SEP] d [SEP], token type 1 from d on
 *                       (Hugging Face's pair encoding; llama.cpp drops the
 *                       last [SEP] and uses type 0 throughout)
 *   ModernBERT:         [CLS] q [SEP] d [SEP]
 *   others:             [BOS] q [EOS] [SEP] d [EOS], each piece only when the
 *                       vocabulary adds it (RoBERTa: <s> q </s></s> d </s>)
 * The score is the head's first output, raw (a logit: higher is more
 * relevant); a causal reranker's is the probability of "yes" against "no"
 * at the last token.  A pair longer than max_tokens fails the request
 * naming each such document unless allow_truncate, which cuts the
 * document's end (framing kept). */
typedef struct kiln_reranker kiln_reranker;
typedef struct kiln_rerank_job kiln_rerank_job;

typedef struct kiln_reranker_params {
    int32_t n_threads;  /* 0 = all online CPUs */
    int32_t n_batch;    /* cross-encoders: most tokens several pairs share one
                           forward run with (a longer pair runs alone); 0 = 2048 */
    int32_t max_tokens; /* per pair, framing included; 0 = the model's context
                           (decoders: capped by the KV memory budget) */
} kiln_reranker_params;

kiln_reranker_params kiln_reranker_default_params(void);
/* Loads path and checks that it is a reranker (KILN_ERR_UNSUPPORTED when
 * the model has no classification head). */
kiln_status kiln_reranker_new(const char *path, const kiln_reranker_params *p, kiln_reranker **out);
/* Same over an already loaded model, which must outlive the reranker. */
kiln_status kiln_reranker_new_from_model(kiln_model *m, const kiln_reranker_params *p, kiln_reranker **out);
void kiln_reranker_free(kiln_reranker *r);

typedef struct kiln_reranker_info {
    const char *arch;   /* general.architecture */
    int32_t causal;     /* 1: a causal LM scoring yes/no */
    int32_t max_tokens; /* per pair */
    int32_t n_labels;   /* outputs of the head (the score is the first) */
} kiln_reranker_info;
void kiln_reranker_get_info(const kiln_reranker *r, kiln_reranker_info *info);

typedef struct kiln_rerank_request {
    const char *query; /* UTF-8 */
    size_t query_len;  /* 0: NUL-terminated */
    int32_t n;         /* documents */
    const char *const *documents;
    const size_t *lens;     /* byte lengths; NULL: NUL-terminated */
    int32_t allow_truncate; /* 1: cut documents over the limit */
} kiln_rerank_request;

typedef struct kiln_rerank_scores {
    int32_t n;
    const float *scores;     /* [n] in the documents' order */
    const int32_t *n_tokens; /* [n] tokens each pair runs with */
    int32_t n_truncated;
    const int32_t *truncated; /* [n_truncated] ascending indices of cut documents */
} kiln_rerank_scores;

/* Frames and tokenizes every pair and checks the limit; runs no model. */
kiln_status kiln_rerank_begin(kiln_reranker *r, const kiln_rerank_request *q, kiln_rerank_job **out);
/* Runs the next forward run (the shortest pairs left, as many as one run
 * holds; a causal reranker: the next pair, reusing the cached prompt
 * prefix).  *n_left (optional) gets the pairs still to score. */
kiln_status kiln_rerank_next(kiln_rerank_job *j, int32_t *n_left);
/* Scores of pairs not run yet are 0.  Owned by the job. */
const kiln_rerank_scores *kiln_rerank_result(const kiln_rerank_job *j);
void kiln_rerank_job_free(kiln_rerank_job *j);
/* begin + next until done.  On failure *out is NULL. */
kiln_status kiln_rerank(kiln_reranker *r, const kiln_rerank_request *q, kiln_rerank_job **out);

/* --------------------------------------------------------- speech to text */

/* Whisper speech recognition over whisper.cpp's GGML files (ggml-tiny.bin
 * ... ggml-large-v3-turbo.bin, F32, F16 or quantized).
 *
 *   kiln_stt *m;  kiln_stt_load("ggml-base.en.bin", &m);
 *   float *pcm; int64_t n;  kiln_audio_load("talk.flac", &pcm, &n, NULL);
 *   kiln_transcribe_params p = kiln_transcribe_default_params();
 *   kiln_transcript *t;  kiln_transcribe(m, pcm, n, &p, &t);
 *   for (i < t->n_segments) ... t->segments[i].start, .end, .text ...
 *   kiln_transcript_free(t);  kiln_audio_free(pcm);
 *
 * One kiln_stt may serve several threads, each call with its own working
 * memory; the model is read-only after load. */
typedef struct kiln_stt kiln_stt;

kiln_status kiln_stt_load(const char *path, kiln_stt **out);
/* 1 when path begins with the GGML magic (reads 4 bytes; no validation). */
int kiln_is_whisper_file(const char *path);
void kiln_stt_free(kiln_stt *m);

typedef struct kiln_stt_info {
    const char *size;  /* "tiny" ... "large-v3-turbo", or "custom" */
    const char *ftype; /* type of the matrices: "F16", "Q8_0", ... */
    int32_t n_vocab, n_text_tokens, n_langs;
    int32_t n_audio_ctx, n_audio_state, n_audio_head, n_audio_layer;
    int32_t n_text_ctx, n_text_state, n_text_head, n_text_layer, n_mels;
    int32_t multilingual;       /* 0: English only */
    int32_t can_translate;      /* multilingual and not large-v3-turbo */
    double window_seconds;      /* audio one encoder pass covers (30 s) */
    uint64_t n_params, n_bytes; /* weights and their bytes in the file */
    uint64_t copied_bytes;      /* tensors copied out of the mapping (the
                                   format does not align tensor data) */
} kiln_stt_info;
void kiln_stt_get_info(const kiln_stt *m, kiln_stt_info *info);
/* Language code of token index i (0 = "en"), NULL past the model's. */
const char *kiln_stt_language(const kiln_stt *m, int i);

/* Audio files (WAV, FLAC, Ogg/Vorbis, MP3 ... as libsndfile reads them, 8 to
 * 192 kHz, 1 to 8 channels) decoded to 16 kHz mono floats; *pcm (free with
 * kiln_audio_free) is NULL when the clip is empty.  format (may be NULL,
 * 64 bytes) receives the container and encoding.  The source is decoded,
 * downmixed and resampled in chunks: memory held is the output (64 KB a
 * second) and one chunk, whatever the file's rate and channels.  At most
 * 24 hours of audio are read. */
kiln_status kiln_audio_load(const char *path, float **pcm, int64_t *n, char *format);
kiln_status kiln_audio_decode(const void *data, size_t len, float **pcm, int64_t *n, char *format);
/* The same with a tighter bound for untrusted input (a server's upload):
 * audio longer than max_seconds (<= 0: 24 hours) fails with
 * KILN_ERR_UNSUPPORTED and a message naming the limit (and the length, when
 * the file declares it), before it is decoded or as soon as the decoding
 * passes the limit. */
kiln_status kiln_audio_load_max(const char *path, double max_seconds, float **pcm, int64_t *n, char *format);
kiln_status kiln_audio_decode_max(const void *data, size_t len, double max_seconds, float **pcm, int64_t *n,
                                  char *format);
/* Interleaved PCM (n_samples values in frames of channels) to 16 kHz mono:
 * finite samples and whole frames only; pcm is not written. */
kiln_status kiln_audio_to_mono16k(const float *pcm, int64_t n_samples, int32_t sample_rate, int32_t channels,
                                  float **out, int64_t *n);
void kiln_audio_free(float *pcm);

/* Called after each window: seconds of audio done and in all; a nonzero
 * return cancels (KILN_ERR_CANCELLED). */
typedef int (*kiln_stt_progress_fn)(double done, double total, void *user);

typedef struct kiln_transcribe_params {
    const char *language;  /* "en", "german", ...; NULL, "" or "auto":
                                   detected (English on English-only models) */
    int32_t translate;     /* 1: English text from any language */
    int32_t beam_size;     /* at temperature 0; 1 = greedy (default 5) */
    int32_t best_of;       /* samples kept at temperature > 0 (default 5) */
    float temperature;     /* the first try (default 0) */
    float temperature_inc; /* fallback step up to 1.0 (default 0.2; 0: none) */
    /* a try falls back to the next temperature when its text compresses
     * (zlib) better than compression_ratio_threshold (2.4) or its mean token
     * log-probability is below logprob_threshold (-1), unless the window
     * is silence: no-speech probability above no_speech_threshold (0.6).
     * A silent window whose mean log-probability is also below the
     * threshold yields no segment.  When every temperature fails, the best
     * try is kept, not the last: a text within the compression threshold
     * first, then the highest log-probability per token.  Thresholds
     * <= -1e9 (or a ratio <= 0) switch a test off. */
    float compression_ratio_threshold;
    float logprob_threshold;
    float no_speech_threshold;
    int32_t timestamps;            /* 1: segment times from timestamp tokens (default) */
    int32_t condition_on_previous; /* 1: a window's text prompts the next (default) */
    const char *initial_prompt;    /* text that prompts the first window, or NULL */
    int32_t suppress_non_speech;   /* 1: never emit symbols such as "#" or "♪" (default) */
    int32_t n_threads;             /* 0 = all online CPUs */
    uint64_t seed;                 /* of the sampling at temperature > 0 */
    kiln_stt_progress_fn progress;
    void *user;
    /* polled during decoding; nonzero cancels (the engine sets it) */
    int (*abort)(void *user);
    void *abort_user;
} kiln_transcribe_params;

kiln_transcribe_params kiln_transcribe_default_params(void);
/* Checks p against m (language code, translation on an English-only or
 * turbo model, ranges) without any work. */
kiln_status kiln_transcribe_check(const kiln_stt *m, const kiln_transcribe_params *p);

typedef struct kiln_segment {
    double start, end; /* seconds from the start of the audio */
    const char *text;  /* UTF-8, as decoded (usually a leading space) */
    int32_t n_tokens;
    const int32_t *tokens; /* text and timestamp tokens */
    float avg_logprob;     /* of the window's decode */
    float no_speech_prob;
    float compression_ratio;
    float temperature; /* of the try that was kept */
} kiln_segment;

typedef struct kiln_transcript {
    const char *text;     /* every segment's text joined */
    const char *language; /* code, "" when not known */
    float language_prob;  /* of a detected language (1 when given) */
    double duration;      /* seconds of audio */
    int32_t n_segments;
    const kiln_segment *segments;
    int32_t n_windows;   /* encoder passes */
    int32_t n_fallbacks; /* tries at a higher temperature */
} kiln_transcript;

/* Transcribes 16 kHz mono audio (pcm may be NULL when n is 0: an empty
 * clip gives an empty transcript).  Long audio goes in windows of
 * window_seconds, each starting where the last one's last complete
 * segment ended. */
kiln_status kiln_transcribe(kiln_stt *m, const float *pcm, int64_t n, const kiln_transcribe_params *p,
                            kiln_transcript **out);
void kiln_transcript_free(kiln_transcript *t);
/* t as "txt" (the text, trimmed), "srt", "vtt", "json" ({"text"}) or
 * "verbose_json" (OpenAI's shape: task, language name, duration, text,
 * segments with times, tokens and scores; translated sets its task).
 * Returns a malloc'ed string, or NULL for an unknown format. */
char *kiln_transcript_format(const kiln_transcript *t, const char *format, int translated);

/* ------------------------------------------------------------- decisions */

/* Typed decisions over a state text: a decision pack is an encoder GGUF
 * (ModernBERT) with heads as tensors decision.<head>.* and its
 * configuration (question types, each with a labels head or an options
 * head scored option by option; max_len; head_max_len; option slots;
 * calibration temperatures by question type and by option-count bucket)
 * as JSON in the metadata key kiln.decision.config.  docs/decision.md
 * describes the format.
 *
 *   kiln_decider *d;  kiln_decider_new("pack.gguf", NULL, &d);
 *   const char *opts[] = {"weather", "search"};
 *   kiln_decide_question qs[] = {{"q1", "route", "what next", 0, NULL},
 *                                {"q2", "pick", "which tool", 2, opts}};
 *   kiln_decide_request r = {state, 0, 2, qs};
 *   kiln_decide_job *j;  kiln_decide(d, &r, &j);
 *   const kiln_decisions *out = kiln_decide_result(j);
 *   ... out->d[1].probs[k], out->d[1].truncated ...
 *   kiln_decide_job_free(j);
 *
 * Each question's sequence is [CLS] head part [SEP] state [SEP]; a state
 * longer than a question's room keeps the tokens that fit before the
 * final [SEP] (no error: kiln_decide_measure tells beforehand).  Texts are
 * tokenized with every added token recognized.  A malformed configuration
 * fails the load (KILN_ERR_FORMAT) and keeps nothing; heads whose shapes
 * disagree with it are KILN_ERR_CORRUPT.  A request naming an unknown
 * type, more options than the type's slots, or a head part longer than
 * head_max_len is KILN_ERR_INVALID_ARG. */
typedef struct kiln_decider kiln_decider;
typedef struct kiln_decide_job kiln_decide_job;

typedef struct kiln_decider_params {
    int32_t n_threads;    /* 0 = all online CPUs */
    int32_t n_batch;      /* most tokens several sequences share one forward run
                             with (a longer one runs alone); 0 = 2048 */
    int32_t measure_only; /* 1: read the tokenizer and configuration only (no
                             weights bound, no workspace): Measure works,
                             decide fails with KILN_ERR_STATE */
} kiln_decider_params;

kiln_decider_params kiln_decider_default_params(void);
kiln_status kiln_decider_new(const char *path, const kiln_decider_params *p, kiln_decider **out);
void kiln_decider_free(kiln_decider *d);

typedef struct kiln_decider_info {
    const char *arch;
    int32_t max_len, head_max_len;
    int32_t n_types;
    const char *const *types; /* [n_types] question type names */
} kiln_decider_info;
void kiln_decider_get_info(const kiln_decider *d, kiln_decider_info *info);

typedef struct kiln_decide_question {
    const char *id;    /* echoed in the result (may be NULL) */
    const char *type;  /* a question type of the pack */
    const char *text;  /* the question; NULL or "": none */
    int32_t n_options; /* options types: the options to score */
    const char *const *options;
} kiln_decide_question;

typedef struct kiln_decide_request {
    const char *state; /* UTF-8 */
    size_t state_len;  /* 0: NUL-terminated */
    int32_t n_questions;
    const kiln_decide_question *questions;
} kiln_decide_request;

typedef struct kiln_decision {
    const char *id, *type;
    int32_t n;                 /* labels (labels types) or options */
    const char *const *labels; /* the type's labels or the request's options */
    const float *probs;        /* [n], summing to 1 */
    int32_t best;              /* index of the most probable */
    float temperature;         /* the calibration temperature applied */
    int32_t state_tokens_kept; /* state tokens the sequences hold */
    int32_t truncated;         /* 1: the state was cut to fit */
} kiln_decision;

typedef struct kiln_decisions {
    int32_t n; /* questions */
    const kiln_decision *d;
    int32_t state_tokens; /* tokens the whole state encodes to */
} kiln_decisions;

/* Measure: the state's token count and, per question, the most state
 * tokens its sequence keeps (budgets[n_questions]), with the same
 * tokenizer and framing as kiln_decide and no forward pass.  A question
 * truncates the state exactly when *state_tokens > budgets[i]. */
kiln_status kiln_decide_measure(kiln_decider *d, const kiln_decide_request *r, int32_t *state_tokens, int32_t *budgets);
/* Tokenizes and frames every question; runs no model. */
kiln_status kiln_decide_begin(kiln_decider *d, const kiln_decide_request *r, kiln_decide_job **out);
/* Runs the next forward run (the shortest sequences left); *n_left gets
 * the sequences still to run.  The results are complete when it is 0. */
kiln_status kiln_decide_next(kiln_decide_job *j, int32_t *n_left);
/* Owned by the job; valid once every sequence ran. */
const kiln_decisions *kiln_decide_result(const kiln_decide_job *j);
void kiln_decide_job_free(kiln_decide_job *j);
/* begin + next until done.  On failure *out is NULL. */
kiln_status kiln_decide(kiln_decider *d, const kiln_decide_request *r, kiln_decide_job **out);

/* ---------------------------------------------------------------- engine */

/* An engine instance hosts one model at a time for a host program.  The
 * host calls create, start, load, the family's inference calls as often as
 * it likes, unload, stop and destroy.
 *
 * start, load, unload and stop validate their input and return as soon as
 * the engine accepts the work; the work then runs in order on the engine's
 * own thread and each transition arrives through the status callback.  A
 * model that is missing or that the family cannot run fails on the call.
 * Inference calls run on the calling thread and block until done; running
 * one never loads a model.
 *
 * Request gate: a load or unload runs alone; requests take one of the
 * gate's places, as many as the resident model runs at once (1 for the
 * embedding family; for the LLM family the context's n_seq_max, whose
 * requests decode together by continuous batching).  An urgent request
 * goes ahead of every waiting non-urgent request and every waiting load or
 * unload.  A request made of several native runs yields before each run
 * (an LLM generation at each decode step): when an urgent request waits
 * for a place, it gets the yielding request's, which then takes one back
 * ahead of all other waiters, so no load or unload runs between two runs
 * of one request.  (A yielded generation keeps its tokens; its KV cache
 * goes to the prefix cache and is picked up again when it resumes.)
 *
 * Teardown: once unload or stop is accepted new requests are refused.  An
 * uncancelled teardown waits for the requests already admitted; firing its
 * cancel token (before the call or later) cancels them.  Model memory is
 * released only after native work stopped using it, and only then is
 * UNLOADED or STOPPED reported.  A release that fails keeps the model and
 * its store lease: new loads and requests are refused until an explicit
 * unload (or stop) retries the release.  Stop is terminal; a second stop
 * and a start after stop are no-ops. */

typedef struct kiln_engine kiln_engine;

/* Ids are stable once published. */
typedef enum kiln_engine_family_id {
    KILN_ENGINE_LLM = 0,       /* text generation */
    KILN_ENGINE_EMBEDDING = 1, /* text embeddings */
    KILN_ENGINE_IMAGE = 2,     /* text to image */
    KILN_ENGINE_STT = 3,       /* speech to text (Whisper) */
    KILN_ENGINE_DECISION = 4,  /* typed decisions (decision packs) */
    KILN_ENGINE_RERANK = 5     /* relevance of documents to a query */
} kiln_engine_family_id;

typedef enum kiln_engine_backend {
    KILN_ENGINE_BACKEND_AUTO = 0, /* CUDA when a GPU takes the model, else the CPU (kiln_model_params) */
    KILN_ENGINE_BACKEND_CPU = 1,
    KILN_ENGINE_BACKEND_CUDA = 2 /* NVIDIA GPUs (docs/gpu.md) */
} kiln_engine_backend;

typedef enum kiln_engine_state {
    KILN_ENGINE_CREATED = 0,
    KILN_ENGINE_STARTING,
    KILN_ENGINE_STARTED,
    KILN_ENGINE_LOADING,
    KILN_ENGINE_LOADED,
    KILN_ENGINE_UNLOADING,
    KILN_ENGINE_UNLOADED,
    KILN_ENGINE_STOPPING,
    KILN_ENGINE_STOPPED,
    KILN_ENGINE_FAILED
} kiln_engine_state;

/* "loaded", "failed", ... */
const char *kiln_engine_state_str(kiln_engine_state s);

/* The registry of engine families.  Reading it loads nothing, opens no
 * store and touches no file. */
typedef struct kiln_engine_family {
    kiln_engine_family_id id;
    const char *key; /* stable id: "llm", "embedding" */
    const char *display_name;
    const char *const *tasks; /* NULL-terminated: "generate", "embed" */
    unsigned backends;        /* bit (1u << kiln_engine_backend) per backend */
    int available;            /* 1 when this build can create the family */
} kiln_engine_family;

int kiln_engine_family_count(void);
/* Family i (0 <= i < count), or NULL. */
const kiln_engine_family *kiln_engine_family_at(int i);
/* The family with this key, or NULL. */
const kiln_engine_family *kiln_engine_family_find(const char *key);
/* The registry listing (kiln engines): a JSON array of families in
 * registry order, {key, display_name, tasks, backends, available,
 * builtin_count, models}, each model {name, builtin, state, reason?, file?,
 * id?, size?, arch?, quantization?} with state "installed" (every file
 * present; "changed" files are re-hashed at the next load), "not-downloaded"
 * (a built-in the store lacks), "files-missing" (file names the first
 * absent one), "damaged" or "not-supported" (reason says why), built-ins
 * first, then the store's models by name.  It reads the store's records
 * with stat calls only: nothing is loaded, hashed, installed or
 * downloaded.  s may be NULL (built-ins only).  Free *json_out with
 * kiln_store_free_string. */
kiln_status kiln_engine_listing(kiln_store *s, char **json_out);

/* A cancel token: fired once, never reset.  Shared by reference: the
 * engine keeps its own reference while it watches the token, so the
 * caller may free its reference at any time. */
typedef struct kiln_engine_cancel kiln_engine_cancel;
kiln_engine_cancel *kiln_engine_cancel_new(void);
void kiln_engine_cancel_fire(kiln_engine_cancel *c);
int kiln_engine_cancel_fired(const kiln_engine_cancel *c);
void kiln_engine_cancel_free(kiln_engine_cancel *c);

/* One transition.  error and message are set for KILN_ENGINE_FAILED only;
 * model names the model the transition concerns ("" for none).  Strings
 * are valid during the callback. */
typedef struct kiln_engine_event {
    kiln_engine_state state;
    kiln_status error;
    const char *message;
    const char *model;
} kiln_engine_event;
/* Called on the engine's thread, in order; it should return promptly. */
typedef void (*kiln_engine_status_fn)(kiln_engine *e, const kiln_engine_event *ev, void *user);

/* Resolves a model name that is not a file path.  acquire writes the file
 * path into path (cap bytes) and may hand back a lease that keeps the files
 * in place; release drops it once the model is released. */
typedef struct kiln_engine_store {
    kiln_status (*acquire)(void *user, const char *family_key, const char *name, char *path, size_t cap, void **lease);
    void (*release)(void *user, void *lease);
    void *user;
} kiln_engine_store;

/* Creates an idle instance (no thread, no model).  Fails with
 * KILN_ERR_UNSUPPORTED for a family or backend this build cannot run. */
kiln_status kiln_engine_create(kiln_engine_family_id family, kiln_engine_backend backend, kiln_engine **out);
/* Set these before start. */
kiln_status kiln_engine_set_status_fn(kiln_engine *e, kiln_engine_status_fn fn, void *user);
kiln_status kiln_engine_set_store(kiln_engine *e, const kiln_engine_store *store);
/* LLM family: the context each loaded model gets (KV type, n_ctx, threads
 * ...); its n_seq_max is how many requests decode together (continuous
 * batching); n_ctx 0 means min(the model's, 4096) per sequence (a model
 * declaring 131072 tokens does not reserve them for every sequence).  The
 * embedding family takes n_threads.  Applies to the next load; without it
 * a load uses kiln_context_default_params(). */
kiln_status kiln_engine_set_context_params(kiln_engine *e, const kiln_context_params *p);
/* LLM family: speculative decoding for every request of the models loaded
 * from now on (a draft model loads with its target, an MTP model's context
 * keeps its MTP cache); a load fails when the model cannot do it (no MTP
 * blocks, a draft of another vocabulary).  NULL or KILN_SPEC_NONE: off. */
kiln_status kiln_engine_set_spec_params(kiln_engine *e, const kiln_spec_params *p);
/* LLM family: the image projector (llama.cpp's mmproj GGUF) loaded with
 * each model this engine loads (path copied; NULL or "": none, and a store
 * pack's own mmproj companion is used).  Read at each load. */
kiln_status kiln_engine_set_mmproj(kiln_engine *e, const char *path);
/* LLM family: kiln_model_params.gpu_layers for each model this engine
 * loads (0, the default: all, or as many as fit on AUTO; N: the last N;
 * KILN_GPU_LAYERS_AUTO).  Read at each load. */
kiln_status kiln_engine_set_gpu_layers(kiln_engine *e, int32_t n);

kiln_status kiln_engine_start(kiln_engine *e);
/* model: a file path, or a name the store resolves.  cancel (optional)
 * abandons the load while it waits or runs. */
kiln_status kiln_engine_load(kiln_engine *e, const char *model, kiln_engine_cancel *cancel);
kiln_status kiln_engine_unload(kiln_engine *e, kiln_engine_cancel *cancel);
kiln_status kiln_engine_stop(kiln_engine *e, kiln_engine_cancel *cancel);
/* Waits up to timeout_ms (< 0: no limit) until all accepted lifecycle work
 * has run and returns the outcome of the latest; KILN_ERR_STATE on timeout. */
kiln_status kiln_engine_wait_idle(kiln_engine *e, int timeout_ms);
/* Stops and returns once model memory is released, with the cleanup
 * outcome.  Safe to call repeatedly and from several threads: every call
 * returns the outcome of the first cleanup, even if a later explicit stop
 * releases what it could not. */
kiln_status kiln_engine_destroy(kiln_engine *e, kiln_engine_cancel *cancel);
/* Destroys (if not done yet) and frees the handle.  A model whose release
 * failed is abandoned, not freed. */
void kiln_engine_free(kiln_engine *e);

typedef struct kiln_engine_observation {
    kiln_engine_state state;     /* latest transition */
    kiln_engine_backend backend; /* the backend the latest model loaded runs on
                                    (AUTO resolved); before a load, CPU unless
                                    CUDA was asked for */
    char model[512];             /* resident model as named at load, "" */
    kiln_status error;           /* of the latest failure, KILN_OK if none */
    char message[512];
    int32_t n_active;  /* admitted requests not yet finished */
    int32_t n_waiting; /* of those, waiting for the gate */
} kiln_engine_observation;
kiln_status kiln_engine_observe(kiln_engine *e, kiln_engine_observation *out);

/* LLM family.  Receives each generated piece (whole UTF-8 characters);
 * returning nonzero ends the generation successfully. */
typedef int (*kiln_engine_token_fn)(const char *piece, size_t len, int32_t token, void *user);

typedef struct kiln_engine_generate_request {
    const char *prompt; /* tokenized with BOS as the model says */
    int32_t n_predict;  /* most tokens to generate (> 0) */
    kiln_sampler_params sampler;
    kiln_engine_token_fn on_token; /* optional */
    void *user;
    int urgent;                     /* 1: go ahead of waiting work */
    kiln_engine_cancel *cancel;     /* optional */
    int32_t n_threads;              /* unused: requests share the model's context, whose
                                      threads kiln_engine_set_context_params sets */
    const kiln_image_input *images; /* [n_images], in the order of the prompt's
                                       "<__media__>" markers (none: before the
                                       text); the model needs a projector */
    int32_t n_images;
} kiln_engine_generate_request;

kiln_engine_generate_request kiln_engine_generate_default(void);
/* Generates until n_predict tokens, an end-of-generation token, or the
 * callback asks to stop; the callback runs on the calling thread (a slow
 * one holds its own generation after 32 tokens, not the others').  The
 * prompt must fit the context with n_predict (KILN_ERR_CONTEXT_FULL);
 * prompts that share a prefix with earlier ones reuse its KV cache.
 * *n_generated (optional) receives the count. */
kiln_status kiln_engine_generate(kiln_engine *e, const kiln_engine_generate_request *req, int32_t *n_generated);

/* Embedding family.  Embeds r like kiln_embed; a query request is urgent
 * (it goes ahead of waiting document requests), and a long request yields
 * before each forward run.  On success *out is the job (free it with
 * kiln_embed_job_free); on failure NULL. */
kiln_status kiln_engine_embed(kiln_engine *e, const kiln_embed_request *r, kiln_engine_cancel *cancel,
                              kiln_embed_job **out);

/* Image family.  The model a load names is an image pack's pack.json (the
 * manifest in the pack's directory), whose four artifacts (a PixArt-alpha
 * DiT as a PyTorch ZIP state dict, a T5 encoder and a Stable Diffusion VAE
 * as safetensors, a SentencePiece tokenizer) are checked at load for their
 * recorded lengths and SHA-256 and for their tensor schemas, before any
 * model memory is allocated.  A request generates n 256 x 256 images, the
 * i-th from seed + i; the same seed gives the same PNG bytes on every run
 * and thread count.  It yields before each sampling step. */
typedef int (*kiln_image_progress_fn)(int32_t image, int32_t step, int32_t steps, void *user);

typedef struct kiln_image_request {
    const char *prompt; /* UTF-8; at most the pack's token limit */
    int32_t steps;      /* Euler steps; 0 = the pack's default */
    float cfg;          /* classifier-free guidance; < 0 = the pack's
                                      default, <= 1 = the prompt's pass only */
    uint64_t seed;
    int32_t n;                       /* images (>= 1) */
    int32_t width, height;           /* 0 or 256 */
    kiln_image_progress_fn progress; /* optional: before each step, and with
                                        step == steps before decoding; nonzero
                                        cancels */
    void *user;
    int urgent;
    kiln_engine_cancel *cancel; /* optional */
} kiln_image_request;

typedef struct kiln_image {
    uint8_t *png; /* PNG bytes, owned by the result */
    size_t len;
    uint64_t seed;
} kiln_image;

typedef struct kiln_image_result {
    int32_t n;
    int32_t width, height;
    kiln_image *images; /* [n] */
} kiln_image_result;

kiln_image_request kiln_image_request_default(void);
/* On success *out holds n images (free with kiln_image_result_free); an
 * over-long prompt is KILN_ERR_CONTEXT_FULL, an unsupported size
 * KILN_ERR_UNSUPPORTED. */
kiln_status kiln_engine_image(kiln_engine *e, const kiln_image_request *r, kiln_image_result **out);
void kiln_image_result_free(kiln_image_result *r);

/* Speech-to-text family.  Transcribes interleaved PCM (any rate from 8 to
 * 192 kHz, 1 to 8 channels; the caller's buffer is not written) like
 * kiln_transcribe, yielding before each window.  On success *out is the
 * transcript (free with kiln_transcript_free). */
typedef struct kiln_audio_window {
    const char *id;   /* the caller's name for it, echoed back */
    const float *pcm; /* interleaved */
    int64_t n_samples;
    int32_t sample_rate, channels;
} kiln_audio_window;

kiln_status kiln_engine_transcribe(kiln_engine *e, const kiln_audio_window *audio, const kiln_transcribe_params *p,
                                   kiln_engine_cancel *cancel, kiln_transcript **out);

/* A stream of windows: next fills *w and returns 1, or returns 0 at the
 * end (a negative return fails the stream with KILN_ERR_INVALID_ARG); each
 * window yields one result through on_result (an empty transcript when
 * nothing was said; times relative to the window), whose nonzero return
 * ends the stream successfully.  The whole stream holds the engine's
 * gate: no other request, load or unload runs until it ends, and a
 * graceful teardown waits for it.  *n_windows (optional) counts results. */
typedef int (*kiln_window_next_fn)(void *user, kiln_audio_window *w);
typedef int (*kiln_window_result_fn)(void *user, const char *id, const kiln_transcript *t);
kiln_status kiln_engine_transcribe_stream(kiln_engine *e, kiln_window_next_fn next, kiln_window_result_fn on_result,
                                          void *user, const kiln_transcribe_params *p, kiln_engine_cancel *cancel,
                                          int32_t *n_windows);

/* Rerank family.  Scores q like kiln_rerank, yielding before each forward
 * run; urgent goes ahead of waiting non-urgent requests (a search's small
 * rerank ahead of a long batch).  On success *out is the job (free it with
 * kiln_rerank_job_free); on failure NULL. */
kiln_status kiln_engine_rerank(kiln_engine *e, const kiln_rerank_request *q, int urgent, kiln_engine_cancel *cancel,
                               kiln_rerank_job **out);

/* Decision family (load takes a decision pack).  Decides like kiln_decide,
 * yielding before each forward run.  Measure runs no forward pass but, like
 * a decision, needs a resident pack; it goes ahead of waiting work. */
kiln_status kiln_engine_decide(kiln_engine *e, const kiln_decide_request *r, kiln_engine_cancel *cancel,
                               kiln_decide_job **out);
kiln_status kiln_engine_decide_measure(kiln_engine *e, const kiln_decide_request *r, int32_t *state_tokens,
                                       int32_t *budgets);

/* ------------------------------------------------------------- quantizer */

/* Writes a copy of in_path with 2-D weights converted to type ("q8_0",
 * "q4_0", "q4_k_m", ...).  Norms and 1-D tensors stay F32.  The output is
 * written beside out_path and renamed over it when complete; an out_path
 * that is the input file (the same path, a link, another name of its
 * inode) is refused with KILN_ERR_INVALID_ARG. */
kiln_status kiln_quantize(const char *in_path, const char *out_path, const char *type, int n_threads);

/* One tensor's conversion, told before the file is written.  wanted is set
 * when the type rules chose a type whose blocks (wanted_block elements)
 * do not divide the tensor's rows (ne[0] elements), so type_out is a
 * fallback; it is NULL otherwise.  Strings are valid during the call. */
typedef struct kiln_quantize_tensor {
    const char *name;
    int32_t index, count; /* tensor number (from 0) and how many */
    int32_t n_dims;
    int64_t ne[4];
    const char *type_in; /* "F16", "Q8_0", ... */
    const char *type_out;
    const char *wanted;
    int32_t wanted_block;
    uint64_t bytes_in, bytes_out;
} kiln_quantize_tensor;
typedef void (*kiln_quantize_fn)(const kiln_quantize_tensor *t, void *user);

typedef struct kiln_quantize_params {
    int32_t n_threads;          /* 0 = all online CPUs */
    kiln_quantize_fn on_tensor; /* optional: hears every tensor, in file order */
    void *user;
    int32_t allow_requantize; /* 0: a tensor already quantized that would change type is refused
                                 (KILN_ERR_INVALID_ARG), as llama-quantize without --allow-requantize */
} kiln_quantize_params;

kiln_quantize_params kiln_quantize_default_params(void);
/* kiln_quantize with params (NULL: the defaults). */
kiln_status kiln_quantize_with(const char *in_path, const char *out_path, const char *type,
                               const kiln_quantize_params *params);

#ifdef __cplusplus
}
#endif
#endif
