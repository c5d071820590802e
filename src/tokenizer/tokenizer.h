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
 * A loaded tokenizer owns copies of everything it needs (the gguf_file may be
 * closed afterwards) and is immutable, so one tokenizer can serve many threads.
 */
#ifndef KILN_TOKENIZER_H
#define KILN_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "gguf/gguf.h"

typedef struct tokenizer tokenizer;

enum tok_kind { TOK_SPM = 1, TOK_BPE = 2, TOK_WPM = 3 };

/* Token types as stored in tokenizer.ggml.token_type. */
enum tok_type {
    TOK_T_UNDEFINED = 0,
    TOK_T_NORMAL = 1,
    TOK_T_UNKNOWN = 2,
    TOK_T_CONTROL = 3,
    TOK_T_USER_DEFINED = 4,
    TOK_T_UNUSED = 5,
    TOK_T_BYTE = 6
};

/* Returned by tok_encode when memory runs out or the text is longer than
 * TOK_MAX_TEXT bytes (offsets are 32-bit). */
#define TOK_ERR_NOMEM INT32_MIN
#define TOK_MAX_TEXT ((size_t)1 << 30)

/* Builds the tokenizer from the file's tokenizer.ggml.* metadata into *out.
 * Fails with KILN_ERR_FORMAT (missing or malformed arrays, unknown model or
 * pre-tokenizer name) or KILN_ERR_NOMEM.  A special-token id outside the
 * vocabulary is ignored (the model type's default, or none, is used). */
kiln_status tok_load(const gguf_file *f, tokenizer **out);
void tok_free(tokenizer *t);

enum tok_kind tok_kind(const tokenizer *t);
int32_t tok_n_vocab(const tokenizer *t);
/* Special ids; -1 when the vocabulary has none. */
int32_t tok_bos(const tokenizer *t);
int32_t tok_eos(const tokenizer *t);
int32_t tok_eot(const tokenizer *t);
int32_t tok_pad(const tokenizer *t);
int32_t tok_unk(const tokenizer *t);
int32_t tok_sep(const tokenizer *t);
/* Whether encode(add_special) prepends BOS / appends EOS. */
int tok_add_bos(const tokenizer *t);
int tok_add_eos(const tokenizer *t);
/* End of generation: eos, eot, and end-of-turn tokens found by text
 * (<|im_end|>, <|eot_id|>, <|endoftext|>, <end_of_turn>, ...). */
int tok_is_eog(const tokenizer *t, int32_t id);

/* Raw vocabulary string of id (not NUL-terminated; *len set), NULL when
 * id is out of range. */
const char *tok_text(const tokenizer *t, int32_t id, size_t *len);
/* enum tok_type of id (TOK_T_UNDEFINED when out of range). */
int tok_type(const tokenizer *t, int32_t id);
/* Id of the exact vocabulary string, or -1. */
int32_t tok_find(const tokenizer *t, const char *s, size_t len);

/* Tokenizes len bytes of text into out (capacity cap).
 *   add_special:   BOS/EOS per the add_bos/add_eos metadata; for WordPiece
 *                  [CLS] ... [SEP].
 *   parse_special: substrings equal to control token texts become those
 *                  tokens (longest token first).  User-defined tokens are
 *                  always matched, as the reference tokenizers do.
 * Returns the number of ids.  When that exceeds cap, nothing useful is in
 * out and the result is minus the needed count.  TOK_ERR_NOMEM on
 * allocation failure or oversized text.  Invalid UTF-8 is tolerated (stray
 * bytes fall back to byte tokens where the vocabulary has them). */
int32_t tok_encode(const tokenizer *t, const char *text, size_t len, int add_special, int parse_special, int32_t *out,
                   int32_t cap);

/* tok_encode into a buffer of the right size: *out is malloc'd (free it;
 * NULL when the result is 0 tokens).  Returns the count or TOK_ERR_NOMEM. */
int32_t tok_encode_alloc(const tokenizer *t, const char *text, size_t len, int add_special, int parse_special,
                         int32_t **out);

/* Bytes of one token: SPM maps U+2581 to space and <0xXX> to the byte, BPE
 * undoes the byte-to-code-point mapping, WordPiece gives the text without
 * its word-start marker (with a leading space instead).  Control and
 * unknown tokens give nothing unless special is set.  Returns the byte
 * count, or minus the needed size when cap is too small. */
int32_t tok_token_to_piece(const tokenizer *t, int32_t id, char *buf, int32_t cap, int special);
/* Longest piece any token produces (for sizing buffers). */
int32_t tok_max_piece(const tokenizer *t);

/* Streaming detokenizer: feed ids one at a time, receive only complete
 * UTF-8 sequences; a character split across byte tokens is held back until
 * it completes.  Plain struct, no allocation; initialise with
 * tok_stream_init. */
typedef struct tok_stream {
    const tokenizer *t;
    uint8_t pend[4]; /* bytes of an unfinished UTF-8 character */
    int n_pend;
    int special;     /* render control tokens */
    int strip_space; /* drop one leading space from the first text */
    int started;     /* some text has been emitted */
} tok_stream;

/* strip_leading_space: for SPM vocabularies with the dummy prefix, drop the
 * space the encoder added in front of the first word. */
void tok_stream_init(tok_stream *s, const tokenizer *t, int special, int strip_leading_space);
/* Appends id; writes the newly completed text to out and returns its
 * length.  If cap is too small (needs at most tok_max_piece + 4) returns
 * minus the needed size and the id is not consumed. */
int32_t tok_stream_put(tok_stream *s, int32_t id, char *out, int32_t cap);
/* Emits whatever is held back (an incomplete sequence, as raw bytes) and
 * resets the stream for reuse.  Returns the length (at most 4), or minus
 * the needed size. */
int32_t tok_stream_flush(tok_stream *s, char *out, int32_t cap);

/* Decodes a whole id sequence (stream + flush).  Returns the byte count or
 * minus the needed size. */
int32_t tok_decode(const tokenizer *t, const int32_t *ids, int32_t n, char *out, int32_t cap, int special,
                   int strip_leading_space);

#endif
