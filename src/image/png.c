/* PNG encoding through libpng into memory.  No time or text chunks, so the
 * same pixels give the same bytes. */
#include "image/image.h"

#include "base/base.h"

#include <png.h>
#include <setjmp.h>
#include <stdlib.h>
#include <string.h>

typedef struct membuf {
    uint8_t *p;
    size_t n, cap;
    int oom;
} membuf;

static void write_fn(png_structp png, png_bytep data, png_size_t len) {
    membuf *b = png_get_io_ptr(png);
    if (b->oom) return;
    if (b->n + len > b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 65536;
        while (cap < b->n + len) cap *= 2;
        uint8_t *q = realloc(b->p, cap);
        if (!q) {
            b->oom = 1;
            return;
        }
        b->p = q;
        b->cap = cap;
    }
    memcpy(b->p + b->n, data, len);
    b->n += len;
}

static void flush_fn(png_structp png) { (void)png; }

kiln_status image_png_encode(const uint8_t *rgb, int w, int h, uint8_t **out, size_t *len) {
    *out = NULL;
    *len = 0;
    membuf b = {NULL, 0, 0, 0};
    png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, NULL, NULL, NULL);
    png_infop info = png ? png_create_info_struct(png) : NULL;
    png_bytep *rows = malloc((size_t)h * sizeof *rows);
    if (!png || !info || !rows) {
        png_destroy_write_struct(&png, &info);
        free(rows);
        return base_fail(KILN_ERR_NOMEM, "out of memory");
    }
    if (setjmp(png_jmpbuf(png))) {
        png_destroy_write_struct(&png, &info);
        free(rows);
        free(b.p);
        return base_fail(KILN_ERR_INTERNAL, "PNG encoding failed");
    }
    png_set_write_fn(png, &b, write_fn, flush_fn);
    png_set_IHDR(png, info, (png_uint_32)w, (png_uint_32)h, 8, PNG_COLOR_TYPE_RGB, PNG_INTERLACE_NONE,
                 PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
    png_write_info(png, info);
    for (int y = 0; y < h; y++) rows[y] = (png_bytep)(rgb + (size_t)y * (size_t)w * 3);
    png_write_image(png, rows);
    png_write_end(png, NULL);
    png_destroy_write_struct(&png, &info);
    free(rows);
    if (b.oom) {
        free(b.p);
        return base_fail(KILN_ERR_NOMEM, "out of memory");
    }
    *out = b.p;
    *len = b.n;
    return KILN_OK;
}
