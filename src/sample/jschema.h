/*
 * jschema — structured output: a JSON Schema compiled to a byte-level
 * recognizer that constrained sampling asks, token by token, whether a
 * piece of text can still lead to a value the schema allows.
 *
 * A compiled sample_schema is immutable and shared by every request that names
 * it; each generating sequence keeps its own sample_sv (a fixed-size stack of
 * frames, no allocation), which is copied to try a candidate token.
 *
 * Supported: type (a name or a list of them), properties with required
 * (properties come in the schema's order, as llama.cpp's grammars have
 * them; optional ones may be left out; no other keys), items, minItems /
 * maxItems, minLength / maxLength (in characters), pattern (the regex
 * subset of sample/regex.h, searching as JSON Schema's pattern does),
 * format (date, time, date-time, uuid, email, ipv4, hostname), minimum /
 * maximum / exclusiveMinimum / exclusiveMaximum (exactly, in decimal),
 * enum, const (their values filtered by the rest of the schema), anyOf /
 * oneOf whose alternatives begin with different characters, allOf of one
 * schema, and $ref into #/$defs or #/definitions (recursion allowed).  A
 * schema with none of these (or `true`) is any JSON value; an object
 * without properties takes any keys.
 *
 * Numbers are written in bounded digits: an integer has at most 19 and,
 * without bounds, lies within +-(2^53 - 1); "-0" is no integer.  A number
 * with a range is plain decimal (at most 16 digits before the point and
 * 16 after, no exponent); one without, at most 16 + 16 digits and a
 * 3-digit exponent.  In a string held to a pattern or format an escape
 * may stand only for an ASCII character (\u00XX or a short escape);
 * other characters are written as UTF-8.
 *
 * Values nest at most SAMPLE_SV_DEPTH deep (objects and arrays inside each
 * other, the recognizer's stack).  A schema none of whose values fits in
 * that, or that has no finite value at all (an object that requires
 * itself through $ref, an array of at least one of itself...), is refused;
 * a part that could only be written deeper (an optional property, more
 * items of a recursive array) is left out where the stack is full, so
 * every text the recognizer takes can still be completed.
 *
 * Anything else that constrains a value (not, if/then/else, contains,
 * patternProperties, uniqueItems, multipleOf except 1 on an integer, ...,
 * or a keyword beside $ref / anyOf / oneOf / allOf) is refused with a
 * message naming it rather than loosened.
 */
#ifndef KILN_JSCHEMA_H
#define KILN_JSCHEMA_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

typedef struct sample_schema sample_schema;
typedef struct sample_node sample_node;

/* schema NULL = any JSON value.  Returns NULL with a message in err when
 * the schema is invalid or uses what the recognizer cannot enforce. */
sample_schema *sample_schema_compile(const json_t *schema, char *err, size_t errsz);
void sample_schema_free(sample_schema *s);
/* Any JSON object (JSON mode, as OpenAI, llama.cpp and Ollama define it):
 * one schema for the process, never freed (sample_schema_free ignores it). */
const sample_schema *sample_schema_any_object(void);

/* Frames of the recognizer: the deepest nesting of objects and arrays a
 * value may have (a leaf inside them counts one). */
#define SAMPLE_SV_DEPTH 64

typedef struct sample_sv_frame {
    const sample_node *n;
    int32_t st;    /* state within the value (jschema.c) */
    int32_t idx;   /* object: last property written (-1 none); array: items so
                      far; string: characters; number: integer digits */
    int32_t pos;   /* bytes matched of a key or literal, \u digits; number:
                      fraction digits */
    int32_t sub;   /* number: sign or exponent digits; string: a \u value */
    uint64_t cand; /* keys or literals still possible; string: DFA state;
                      number: the integer part */
    uint64_t aux;  /* number: the fraction digits' value */
} sample_sv_frame;

typedef struct sample_sv {
    int depth; /* frames in use; 0 once the value is complete */
    int done;
    int ws; /* whitespace since the last token (jschema.c) */
    sample_sv_frame f[SAMPLE_SV_DEPTH];
} sample_sv;

void sample_sv_init(sample_sv *v, const sample_schema *s);
/* Feeds one byte; 0 when it cannot continue an allowed value (v is then
 * left in an unspecified state: try on a copy, see sample_sv_accepts). */
int sample_sv_byte(sample_sv *v, unsigned char ch);
/* Whether the text so far is a whole allowed value (so generation may end). */
int sample_sv_complete(const sample_sv *v);
/* Whether n bytes can follow the text so far (v is not changed). */
int sample_sv_accepts(const sample_sv *v, const char *s, int n);
/* *dst = *src, copying only the frames in use. */
void sample_sv_copy(sample_sv *dst, const sample_sv *src);

#endif
