/*
 * vision — image input for decoder models: llama.cpp's multimodal
 * projector files ("mmproj" GGUF, general.architecture "clip"), the vision
 * encoders they hold, and prompts that mix text with images.
 *
 *   vision_load          reads an mmproj file: clip.vision.* hyperparameters,
 *                        the projector type (clip.projector_type, looked up in
 *                        vision.c's projector table), image mean/std, patch
 *                        and image size; every tensor's name, shape and type
 *                        is checked before anything is allocated.
 *   vision_encode        one image (RGB8) to its rows of text-model input
 *                        embeddings [n_tokens][n_embd_text]: the projector's
 *                        preprocessing, its ViT, its projection.
 *   vision_prompt_build  a prompt with VISION_MARKER where each image goes
 *                        (none: images first) to tokens and embedding rows.
 *
 * Image tokens carry negative ids: -1 - ((h + k * 0x9E3779B1) & 0x7fffffff)
 * for token k of an image whose input bytes' SHA-256 starts with the
 * big-endian word h, so the paged KV cache's prefix blocks match when the
 * same image comes again.  The k-th negative id of a prompt takes row k of
 * its embedding rows.
 *
 * A projector registers as one vision_proj row (vision.c's k_projs); the
 * SigLIP-style ViT its encoders share is vision_vit_run.
 */
#ifndef KILN_VISION_H
#define KILN_VISION_H

#include "kiln.h"

#include "gguf/gguf.h"
#include "kernels/matmul.h"
#include "thread/pool.h"
#include "tokenizer/tokenizer.h"
#include "vision/decode.h"

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

/* Where an image goes in a prompt (llama.cpp's marker). */
#define VISION_MARKER "<__media__>"

/* Most images one prompt may carry. */
#define VISION_MAX_IMAGES 64

/* An RGB8 image, row-major, w * h * 3 bytes (borrowed). */
typedef struct vision_image {
    int32_t w, h;
    const uint8_t *px;
} vision_image;

/* The ViT's hyperparameters (clip.vision.*). */
typedef struct vision_hp {
    int32_t n_embd, n_head, n_ff, n_layer;
    int32_t image_size, patch_size;
    int32_t n_merge; /* clip.vision.projector.scale_factor, or the projector's default */
    float eps;
    float mean[3], std[3];
    int act; /* the FFN's activation: VISION_ACT_* */
} vision_hp;

enum { VISION_ACT_GELU = 0, VISION_ACT_GELU_QUICK = 1, VISION_ACT_SILU = 2 };

/* One ViT block: pre-norm attention and MLP with biases. */
typedef struct vision_layer {
    kern_mat wq, wk, wv, wo, up, down;
    const float *bq, *bk, *bv, *bo, *b_up, *b_down;
    const float *ln1_w, *ln1_b, *ln2_w, *ln2_b;
} vision_layer;

typedef struct vision_model vision_model;

/* Images whose rows a projector keeps (least recently used goes). */
#define VISION_CACHE 8

/* A projector type: how its images become text-model embeddings. */
typedef struct vision_proj {
    const char *type;        /* clip.projector_type, e.g. "gemma3" */
    const char *begin, *end; /* text around an image's tokens ("": none) */
    int bidirectional;       /* 1: an image's tokens attend to each other both ways */
    int own_vit;             /* 1: bind reads the whole encoder itself (no shared ViT binding) */
    /* Sets the type's hyperparameter defaults (hp.n_merge ...) before the
     * file's keys are read. */
    void (*defaults)(vision_hp *hp);
    /* Binds the projector's own tensors (mm.*) and checks them against
     * vm->hp and vm->n_embd_text; a failure is a status with the last
     * error set. */
    kiln_status (*bind)(vision_model *vm);
    /* Tokens an image of w x h pixels becomes. */
    int32_t (*n_tokens)(const vision_model *vm, int32_t w, int32_t h);
    /* Multimodal RoPE projectors: merged tokens per row and column of a
     * w x h image (NULL: not one). */
    void (*grid)(const vision_model *vm, int32_t w, int32_t h, int32_t *nx, int32_t *ny);
    /* The image's rows, out [n_tokens][n_embd_text]. */
    kiln_status (*encode)(vision_model *vm, thread_pool *pool, const vision_image *im, float *out);
    void (*free)(vision_model *vm);
} vision_proj;

struct vision_model {
    gguf_file *gf;
    const vision_proj *proj;
    vision_hp hp;
    int32_t n_embd_text; /* the text model's n_embd */
    kern_mat patch;      /* [n_embd rows][3 * patch * patch]: the patch convolution, (c, y, x) order */
    const float *patch_b;
    kern_mat pos; /* [n_patches rows][n_embd] */
    vision_layer *layers;
    const float *post_ln_w, *post_ln_b; /* NULL: none */
    void *state;                        /* the projector's */
    pthread_mutex_t mu;                 /* one encode at a time; guards the cache */
    /* the rows of the images encoded last (vision_prompt_build), keyed by
     * the SHA-256 of their input bytes and the raw size: a conversation or
     * a client that sends an image again is not encoded again */
    struct vision_cached {
        uint8_t key[32];
        int32_t w, h; /* kiln_image_input.width, height */
        int32_t n;    /* rows */
        float *rows;  /* [n][n_embd_text] */
        uint64_t used;
    } cache[VISION_CACHE];
    uint64_t tick;
};

/* Loads path as the projector of a text model of n_embd_text.  On failure
 * returns the status with the last error set and *out NULL. */
kiln_status vision_load(const char *path, int32_t n_embd_text, vision_model **out);
/* vision_load over an open file, which it takes (closed on failure, and with
 * the model by vision_free); path names it in messages. */
kiln_status vision_load_gguf(gguf_file *gf, const char *path, int32_t n_embd_text, vision_model **out);
void vision_free(vision_model *vm);

/* Tokens img becomes. */
int32_t vision_n_tokens(const vision_model *vm, const vision_image *im);
/* Encodes im into out [vision_n_tokens][n_embd_text] on pool (NULL: a pool
 * of its own); serialized per model. */
kiln_status vision_encode(vision_model *vm, thread_pool *pool, const vision_image *im, float *out);

/* ---- what projectors share (vision.c) ---- */

/* Binding helpers over gguf/check.h: a 1-D F32 vector of n, or a matrix
 * of nrows x ncols (any type kiln computes).  NULL / data NULL when
 * optional and missing; the first failure is kept in st (the last error
 * set) and later calls return nothing. */
typedef struct vision_binder {
    const gguf_file *gf;
    kiln_status st;
} vision_binder;
const float *vision_bind_vec(vision_binder *B, const char *name, int64_t n, int optional);
kern_mat vision_bind_mat(vision_binder *B, const char *name, int64_t ncols, int64_t nrows, int optional);

/* Resizes im into a size x size square as llama.cpp's fixed-size
 * preprocessing does (aspect kept, bilinear, rounded down to 8 bits, centred
 * on black), then normalizes: out [3][size][size] = (v / 255 - mean) / std. */
void vision_preprocess_square(const vision_image *im, int32_t size, const float mean[3], const float std[3],
                              float *out);
/* The ViT over a planar image pix [3][h][w] (w, h multiples of the patch
 * size): patch embedding, learned positions, the blocks, the post norm.
 * out [n_patches][n_embd], patches row by row. */
kiln_status vision_vit_run(vision_model *vm, thread_pool *pool, const float *pix, int32_t w, int32_t h, float *out);

/* ---- prompts ---- */

typedef struct vision_prompt {
    int32_t *tok; /* [n_tok]; image tokens are negative */
    int32_t n_tok;
    float *embd; /* [n_rows][n_embd]: the k-th negative id's row */
    int32_t n_rows;
    int32_t n_embd;
    int32_t *mpos; /* [n_tok][4] multimodal RoPE positions (kiln_batch_inputs), NULL: none */
} vision_prompt;

/* The image token id of token k of an image whose bytes hash to h. */
static inline int32_t vision_token_id(uint32_t h, uint32_t k) {
    return -1 - (int32_t)((h + k * 0x9E3779B1u) & 0x7fffffffu);
}

/* What a prompt takes of its text model (the model fills it in
 * model_image_prompt, model.h). */
typedef struct vision_text {
    const tokenizer *tok; /* its tokenizer */
    int32_t n_embd;       /* floats of an input embedding row (n_embd_inp) */
    int mrope;            /* 1: it takes multimodal RoPE positions (kiln_batch_inputs.mpos) */
} vision_text;

/* Text with one VISION_MARKER per image in order (none: every image goes
 * before the text) to tokens and embedding rows: each text piece tokenized
 * by tx->tok (add_special on the first only; parse_special as
 * kiln_tokenize), each image wrapped in its projector's begin/end text and
 * encoded by vm.  KILN_ERR_UNSUPPORTED when images come without a
 * projector (vm NULL), KILN_ERR_INVALID_ARG when the markers and images
 * disagree or an image is bad.  Free with vision_prompt_free (also after a
 * failure). */
kiln_status vision_prompt_build(vision_model *vm, const vision_text *tx, const char *text, size_t len, int add_special,
                                int parse_special, const kiln_image_input *images, int32_t n_images,
                                vision_prompt *out);
void vision_prompt_free(vision_prompt *p);

#endif
