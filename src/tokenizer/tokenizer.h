/*
 * tokenizer — text <-> token ids for the vocabularies GGUF files carry
 * (llama.cpp conventions, keys under "tokenizer.ggml.").
 *
 *   "llama"  SentencePiece-style: pieces merged by score, space written as
 *            U+2581, optional dummy prefix space, <0xXX> byte fallback.
 *   "gpt2"   byte-level BPE: bytes mapped to printable code points, a
 *            pre-tokenizer (PCRE2 regexes chosen by tokenizer.ggml.pre)
 *            splits the text into words, merges applied by rank.
 *   "bert"   WordPiece: lowercase, accents stripped, split on whitespace and
 *            punctuation, greedy longest match per word.
 *
 * A loaded ktok owns copies of everything it needs (the gguf_file may be
 * closed afterwards) and is immutable, so one ktok can serve many threads.
 */
#ifndef KILN_TOKENIZER_H
#define KILN_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "gguf/gguf.h"

typedef struct ktok ktok;

enum ktok_kind { KTOK_SPM = 1, KTOK_BPE = 2, KTOK_WPM = 3 };

/* Token types as stored in tokenizer.ggml.token_type. */
enum ktok_type {
    KTOK_T_UNDEFINED = 0,
    KTOK_T_NORMAL = 1,
    KTOK_T_UNKNOWN = 2,
    KTOK_T_CONTROL = 3,
    KTOK_T_USER_DEFINED = 4,
    KTOK_T_UNUSED = 5,
    KTOK_T_BYTE = 6
};

/* Returned by ktok_encode when memory runs out or the text is longer than
 * KTOK_MAX_TEXT bytes (offsets are 32-bit). */
#define KTOK_ERR_NOMEM INT32_MIN
#define KTOK_MAX_TEXT ((size_t)1 << 30)

/* Builds the tokenizer from the file's tokenizer.ggml.* metadata into *out.
 * Fails with KILN_ERR_FORMAT (missing or malformed arrays, unknown model or
 * pre-tokenizer name) or KILN_ERR_NOMEM.  A special-token id outside the
 * vocabulary is ignored (the model type's default, or none, is used). */
kiln_status ktok_load(const gguf_file *f, ktok **out);
void ktok_free(ktok *t);

enum ktok_kind ktok_kind(const ktok *t);
int32_t ktok_n_vocab(const ktok *t);
/* Special ids; -1 when the vocabulary has none. */
int32_t ktok_bos(const ktok *t);
int32_t ktok_eos(const ktok *t);
int32_t ktok_eot(const ktok *t);
int32_t ktok_pad(const ktok *t);
int32_t ktok_unk(const ktok *t);
int32_t ktok_sep(const ktok *t);
/* Whether encode(add_special) prepends BOS / appends EOS. */
int ktok_add_bos(const ktok *t);
int ktok_add_eos(const ktok *t);
/* End of generation: eos, eot, and end-of-turn tokens found by text
 * (<|im_end|>, <|eot_id|>, <|endoftext|>, <end_of_turn>, ...). */
int ktok_is_eog(const ktok *t, int32_t id);

/* Raw vocabulary string of id (not NUL-terminated; *len set), NULL when
 * id is out of range. */
const char *ktok_text(const ktok *t, int32_t id, size_t *len);
/* enum ktok_type of id (KTOK_T_UNDEFINED when out of range). */
int ktok_type(const ktok *t, int32_t id);
/* Id of the exact vocabulary string, or -1. */
int32_t ktok_find(const ktok *t, const char *s, size_t len);

/* Tokenizes len bytes of text into out (capacity cap).
 *   add_special:   BOS/EOS per the add_bos/add_eos metadata; for WordPiece
 *                  [CLS] ... [SEP].
 *   parse_special: substrings equal to control token texts become those
 *                  tokens (longest token first).  User-defined tokens are
 *                  always matched, as the reference tokenizers do.
 * Returns the number of ids.  When that exceeds cap, nothing useful is in
 * out and the result is minus the needed count.  KTOK_ERR_NOMEM on
 * allocation failure or oversized text.  Invalid UTF-8 is tolerated (stray
 * bytes fall back to byte tokens where the vocabulary has them). */
int32_t ktok_encode(const ktok *t, const char *text, size_t len, int add_special, int parse_special, int32_t *out,
                    int32_t cap);

/* ktok_encode into a buffer of the right size: *out is malloc'd (free it;
 * NULL when the result is 0 tokens).  Returns the count or KTOK_ERR_NOMEM. */
int32_t ktok_encode_alloc(const ktok *t, const char *text, size_t len, int add_special, int parse_special,
                          int32_t **out);

/* Bytes of one token: SPM maps U+2581 to space and <0xXX> to the byte, BPE
 * undoes the byte-to-code-point mapping, WordPiece gives the text without
 * its word-start marker (with a leading space instead).  Control and
 * unknown tokens give nothing unless special is set.  Returns the byte
 * count, or minus the needed size when cap is too small. */
int32_t ktok_token_to_piece(const ktok *t, int32_t id, char *buf, int32_t cap, int special);
/* Longest piece any token produces (for sizing buffers). */
int32_t ktok_max_piece(const ktok *t);

/* Streaming detokenizer: feed ids one at a time, receive only complete
 * UTF-8 sequences; a character split across byte tokens is held back until
 * it completes.  Plain struct, no allocation; initialise with
 * ktok_stream_init. */
typedef struct ktok_stream {
    const ktok *t;
    uint8_t pend[4]; /* bytes of an unfinished UTF-8 character */
    int n_pend;
    int special;     /* render control tokens */
    int strip_space; /* drop one leading space from the first text */
    int started;     /* some text has been emitted */
} ktok_stream;

/* strip_leading_space: for SPM vocabularies with the dummy prefix, drop the
 * space the encoder added in front of the first word. */
void ktok_stream_init(ktok_stream *s, const ktok *t, int special, int strip_leading_space);
/* Appends id; writes the newly completed text to out and returns its
 * length.  If cap is too small (needs at most ktok_max_piece + 4) returns
 * minus the needed size and the id is not consumed. */
int32_t ktok_stream_put(ktok_stream *s, int32_t id, char *out, int32_t cap);
/* Emits whatever is held back (an incomplete sequence, as raw bytes) and
 * resets the stream for reuse.  Returns the length (at most 4), or minus
 * the needed size. */
int32_t ktok_stream_flush(ktok_stream *s, char *out, int32_t cap);

/* Decodes a whole id sequence (stream + flush).  Returns the byte count or
 * minus the needed size. */
int32_t ktok_decode(const ktok *t, const int32_t *ids, int32_t n, char *out, int32_t cap, int special,
                    int strip_leading_space);

#endif
