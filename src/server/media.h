/* Images in requests (media.c): every API's image parts to the encoded
 * bytes the vision path decodes, and a marker in the message's text where
 * each image was.
 *
 * Part types read from a message's content array: OpenAI chat's
 * {"type": "image_url", "image_url": {"url": U}} (or the URL as a string),
 * Responses' {"type": "input_image", "image_url": U}, Anthropic's
 * {"type": "image", "source": {"type": "base64", "data": B} or {"type":
 * "url", "url": U}}; text parts ("text", "input_text", "output_text") keep
 * their text.  Ollama's "images" (a message's, or /api/generate's) is an
 * array of base64 strings, each a marker before the message's text.  U is
 * a data: URL (base64) or, with kiln serve --allow-image-urls, an http(s)
 * URL fetched with size and time limits.  The format is the bytes' own
 * (PNG, JPEG, WebP); a MIME type given is not trusted. */
#ifndef KILN_SERVER_MEDIA_H
#define KILN_SERVER_MEDIA_H

#include "server/deltas.h"
#include "server/srv.h"

#include "vision/vision.h"

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

/* Where an image goes in the prompt text (llama.cpp's marker). */
#define SERVER_MEDIA_MARKER VISION_MARKER
/* The default limit on one request's images, decoded bytes in all. */
#define SERVER_MEDIA_MAX_BYTES ((size_t)20 << 20)
/* Seconds one fetch of an image URL may take, and the redirects it follows. */
#define SERVER_MEDIA_FETCH_SECONDS 20
#define SERVER_MEDIA_MAX_REDIRECTS 3

typedef struct server_image {
    uint8_t *data; /* base_malloc'd encoded bytes */
    size_t len;
} server_image;

typedef struct server_media {
    server_image *im; /* in prompt order */
    int32_t n;
    size_t bytes; /* of all of them */
} server_media;

/* 1 when the model r takes images (it has a vision projector). */
int server_media_model_ok(server_model *r);

/* The images of a chat request's messages (chat form, with the parts
 * above).  0 when none has an image: *rewritten NULL, out empty.  1 when
 * some do: out holds the images in order and *rewritten (owned) is a copy
 * of messages whose image-bearing messages have a string content with
 * SERVER_MEDIA_MARKER for each image.  -1 on a refusal, with *status (400: a
 * bad part, base64 or URL, a URL without --allow-image-urls, a model
 * without a projector; 413: over the byte limit; 500: out of memory) and
 * a message in err; param is the field to name.  The model is asked
 * before any URL is fetched. */
int server_media_chat(server_model *r, json_t *messages, json_t **rewritten, server_media *out, int *status, char *err,
                      size_t cap);

/* /api/generate's "images" (an array of base64 strings, or NULL): 0 when
 * none, 1 with out filled, -1 as server_media_chat. */
int server_media_list(server_model *r, json_t *images, server_media *out, int *status, char *err, size_t cap);

void server_media_free(server_media *m);

/* GETs an http(s) image URL (redirects to http(s) only, SERVER_MEDIA_FETCH_SECONDS
 * in all) into a base_malloc'd buffer of at most max bytes.  0, or the HTTP
 * status to answer with a message in err: 413 over max, 400 a failed fetch,
 * a status other than 200 or bytes that are no image, 500 out of memory. */
int server_media_fetch(const char *url, size_t max, uint8_t **out, size_t *len, char *err, size_t cap);

/* The rendered prompt text (a SERVER_MEDIA_MARKER per image, in order) and
 * m's images to tokens (an image's are negative) and what server_start takes
 * beside them (the image tokens' embedding rows, M-RoPE positions).  -1 with *status and err as server_media_chat (400: an image
 * that does not decode, markers that do not match the images). */
int server_media_prompt(server_model *r, const char *text, const server_media *m, int32_t **ids, int32_t *n,
                        server_prompt_media *pm, int *status, char *err, size_t cap);

/* Decodes base64 (the standard alphabet, padding optional, line breaks
 * and spaces skipped) into a base_malloc'd buffer.  -1 on a character
 * outside it or a bad length, with *bad its offset; -2 when more than max
 * bytes would come out; -3 out of memory. */
int server_media_b64(const char *s, size_t n, size_t max, uint8_t **out, size_t *len, size_t *bad);

#endif
