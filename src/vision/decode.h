/*
 * vision/decode — encoded image bytes (PNG, JPEG, WebP) to 8-bit RGB pixels
 * for the vision encoders.  The format is told by its magic bytes, never by
 * a name or a MIME type; a JPEG's EXIF orientation is applied, so the pixels
 * are upright as a viewer shows them; alpha is dropped (as llama.cpp's
 * loader does).  Everything here may come from a client: sizes are checked
 * before anything is allocated for the pixels, and a bad, truncated or
 * oversized image is KILN_ERR_INVALID_ARG with one line saying why.
 */
#ifndef KILN_VISION_DECODE_H
#define KILN_VISION_DECODE_H

#include "kiln.h"

#include <stddef.h>
#include <stdint.h>

/* Limits on a decoded image: each side in pixels, and the area (40M pixels
 * is 120 MB of RGB). */
#define VISION_MAX_SIDE 8192
#define VISION_MAX_PIXELS (40L * 1000 * 1000)

/* w*h*3 bytes, RGB8, row-major, top row first; px is owned (vision_rgb_free). */
typedef struct vision_rgb {
    int32_t w, h;
    uint8_t *px;
} vision_rgb;

/* Decodes bytes[0, len) into out (zeroed on failure).  KILN_ERR_INVALID_ARG
 * for an unknown format, a malformed or truncated file, an animated WebP or
 * a size past the limits; KILN_ERR_NOMEM when the pixels cannot be
 * allocated.  The bytes are only borrowed. */
kiln_status vision_decode(const uint8_t *bytes, size_t len, vision_rgb *out);

/* Frees im's pixels and zeroes it; NULL or a zeroed image is a no-op. */
void vision_rgb_free(vision_rgb *im);

/* The name of the format bytes[0, len) starts like ("png", "jpeg", "webp"),
 * or NULL when it is none of them. */
const char *vision_format(const uint8_t *bytes, size_t len);

/* The EXIF orientation (1..8) in an APP1 segment's payload (from "Exif\0\0"
 * on), or 1 when it has none or the segment is malformed: 1 upright, 2
 * mirrored left-right, 3 turned 180 degrees, 4 mirrored top-bottom, 5
 * transposed, 6 to be turned 90 degrees clockwise, 7 transversed, 8 to be
 * turned 90 degrees counter-clockwise. */
int vision_exif_orientation(const uint8_t *app1, size_t len);

#endif
