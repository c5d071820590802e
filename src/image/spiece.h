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

#include <stddef.h>
#include <stdint.h>

typedef struct im_spiece im_spiece;

/* Parses a .model file's bytes (copied; data may be freed afterwards).
 * NULL on failure with err set (a malformed protobuf, a model type other
 * than unigram, a bad character map). */
im_spiece *im_spiece_load(const uint8_t *data, size_t len, char *err, size_t errlen);
void im_spiece_free(im_spiece *s);

int im_spiece_n_pieces(const im_spiece *s);
int im_spiece_eos(const im_spiece *s); /* -1 when the model has none */
int im_spiece_unk(const im_spiece *s);
int im_spiece_pad(const im_spiece *s);
const char *im_spiece_piece(const im_spiece *s, int id); /* NULL when out of range */

/* Tokenizes len bytes of text into ids (at most cap written).  Returns the
 * number of tokens, which may exceed cap, or -1 when out of memory. */
int im_spiece_encode(const im_spiece *s, const char *text, size_t len, int32_t *ids, int cap);

#endif
