/*
 * spiece — a SentencePiece unigram tokenizer read from its .model file
 * (the ModelProto protobuf: pieces with scores and types, the trainer's
 * special ids, the normalizer with its precompiled character map).
 *
 * Encoding follows SentencePiece: normalize (the precompiled map's
 * longest-prefix rules, e.g. NFKC; extra whitespace removed; a dummy "▁"
 * prefix; spaces as "▁"), then the Viterbi segmentation over piece scores,
 * with an unknown character costing the lowest score minus 10.  No BOS or
 * EOS is added here; Flan-T5 appends EOS itself (t5.h).
 */
#ifndef KILN_IMAGE_SPIECE_H
#define KILN_IMAGE_SPIECE_H

#include "kiln.h"

#include <stddef.h>
#include <stdint.h>

typedef struct image_spiece image_spiece;

/* Parses a .model file's bytes (copied; data may be freed afterwards).
 * *out receives the tokenizer; it is NULL on failure (base_fail: a
 * malformed protobuf, a model type other than unigram, a bad character
 * map, KILN_ERR_NOMEM). */
kiln_status image_spiece_load(const uint8_t *data, size_t len, image_spiece **out);
void image_spiece_free(image_spiece *s);

int image_spiece_n_pieces(const image_spiece *s);
int image_spiece_eos(const image_spiece *s); /* -1 when the model has none */
int image_spiece_unk(const image_spiece *s);
int image_spiece_pad(const image_spiece *s);
const char *image_spiece_piece(const image_spiece *s, int id); /* NULL when out of range */

/* Tokenizes len bytes of text into ids (at most cap written).  Returns the
 * number of tokens, which may exceed cap, or -1 when out of memory. */
int image_spiece_encode(const image_spiece *s, const char *text, size_t len, int32_t *ids, int cap);

#endif
