/* PNG (libpng), JPEG (libjpeg-turbo) and WebP (libwebp) to RGB8.  Each
 * decoder reads the header first and checks the size against the limits
 * before the pixel buffer is allocated; the libraries' own errors come back
 * here by longjmp and become one line. */
#include "vision/decode.h"

#include "base/base.h"

#include <png.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <webp/decode.h>

/* after stdio.h: jpeglib.h uses FILE */
#include <jerror.h>
#include <jpeglib.h>

/* The most progressive scans a JPEG may have (each scan is a pass over the
 * whole image; a hostile file can hold thousands of tiny ones). */
#define VD_MAX_SCANS 1000
/* libjpeg's working memory for one image: a progressive 40M-pixel image
 * keeps 2 bytes of coefficients per sample. */
#define VD_JPEG_MEM (512L * 1024 * 1024)
/* libpng: the largest ancillary chunk it keeps in memory, and how many. */
#define VD_PNG_CHUNK_MAX (8L * 1024 * 1024)
#define VD_PNG_CHUNK_CACHE 256
/* deflate's largest expansion: a 258-byte match per 2 bits at best. */
#define VD_DEFLATE_RATIO 1032

static kiln_status vd_check_size(const char *fmt, uint64_t w, uint64_t h) {
    if (w == 0 || h == 0)
        return base_fail(KILN_ERR_INVALID_ARG, "image: %s has no pixels (%llux%llu)", fmt, (unsigned long long)w,
                         (unsigned long long)h);
    if (w > VISION_MAX_SIDE || h > VISION_MAX_SIDE || w * h > (uint64_t)VISION_MAX_PIXELS)
        return base_fail(KILN_ERR_INVALID_ARG,
                         "image: %s of %llux%llu pixels is too large (at most %d per side, %ld in all)", fmt,
                         (unsigned long long)w, (unsigned long long)h, VISION_MAX_SIDE, VISION_MAX_PIXELS);
    return KILN_OK;
}

static uint8_t *vd_alloc_px(uint32_t w, uint32_t h) { return base_malloc((size_t)w * h * 3); }

const char *vision_format(const uint8_t *b, size_t len) {
    static const uint8_t png_sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    if (len >= 8 && memcmp(b, png_sig, 8) == 0) return "png";
    if (len >= 3 && b[0] == 0xff && b[1] == 0xd8 && b[2] == 0xff) return "jpeg";
    if (len >= 12 && memcmp(b, "RIFF", 4) == 0 && memcmp(b + 8, "WEBP", 4) == 0) return "webp";
    return NULL;
}

void vision_rgb_free(vision_rgb *im) {
    if (!im) return;
    free(im->px);
    memset(im, 0, sizeof *im);
}

/* ---- EXIF orientation ---- */

static uint32_t vd_rd16(const uint8_t *p, int be) {
    return be ? (uint32_t)p[0] << 8 | p[1] : (uint32_t)p[1] << 8 | p[0];
}

static uint32_t vd_rd32(const uint8_t *p, int be) {
    return be ? (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3]
              : (uint32_t)p[3] << 24 | (uint32_t)p[2] << 16 | (uint32_t)p[1] << 8 | p[0];
}

int vision_exif_orientation(const uint8_t *app1, size_t len) {
    /* "Exif\0\0", then a TIFF header (byte order, 42, IFD0's offset from
     * the header), then IFD0: a 2-byte count of 12-byte entries (tag, type,
     * count, value).  Orientation is tag 0x0112, one SHORT (type 3). */
    if (!app1 || len < 6 + 8 || memcmp(app1, "Exif\0\0", 6) != 0) return 1;
    const uint8_t *t = app1 + 6;
    size_t n = len - 6;
    int be;
    if (t[0] == 'I' && t[1] == 'I')
        be = 0;
    else if (t[0] == 'M' && t[1] == 'M')
        be = 1;
    else
        return 1;
    if (vd_rd16(t + 2, be) != 42) return 1;
    uint32_t ifd = vd_rd32(t + 4, be);
    if (ifd < 8 || ifd > n || n - ifd < 2) return 1;
    uint32_t count = vd_rd16(t + ifd, be);
    if ((n - ifd - 2) / 12 < count) return 1;
    for (uint32_t i = 0; i < count; i++) {
        const uint8_t *e = t + ifd + 2 + (size_t)i * 12;
        if (vd_rd16(e, be) != 0x0112) continue;
        if (vd_rd16(e + 2, be) != 3 || vd_rd32(e + 4, be) != 1) return 1;
        uint32_t v = vd_rd16(e + 8, be);
        return v >= 1 && v <= 8 ? (int)v : 1;
    }
    return 1;
}

/* src (w x h) turned upright by EXIF orientation o into dst, whose size is
 * h x w for o >= 5. */
static void vd_orient(const uint8_t *src, int32_t w, int32_t h, int o, uint8_t *dst) {
    int32_t dw = o >= 5 ? h : w, dh = o >= 5 ? w : h;
    for (int32_t y = 0; y < dh; y++) {
        for (int32_t x = 0; x < dw; x++) {
            int32_t sx, sy;
            switch (o) {
            case 2: sx = w - 1 - x, sy = y; break;
            case 3: sx = w - 1 - x, sy = h - 1 - y; break;
            case 4: sx = x, sy = h - 1 - y; break;
            case 5: sx = y, sy = x; break;
            case 6: sx = y, sy = h - 1 - x; break;
            case 7: sx = w - 1 - y, sy = h - 1 - x; break;
            case 8: sx = w - 1 - y, sy = x; break;
            default: sx = x, sy = y; break;
            }
            memcpy(dst + ((size_t)y * dw + x) * 3, src + ((size_t)sy * w + sx) * 3, 3);
        }
    }
}

/* ---- PNG ---- */

typedef struct vd_png_src {
    const uint8_t *p;
    size_t len, pos;
    char msg[160];
} vd_png_src;

static void vd_png_read(png_structp png, png_bytep out, png_size_t n) {
    vd_png_src *s = png_get_io_ptr(png);
    if (n > s->len - s->pos) png_error(png, "truncated");
    memcpy(out, s->p + s->pos, n);
    s->pos += n;
}

static void vd_png_error(png_structp png, png_const_charp msg) {
    vd_png_src *s = png_get_error_ptr(png);
    snprintf(s->msg, sizeof s->msg, "%s", msg);
    png_longjmp(png, 1);
}

static void vd_png_warning(png_structp png, png_const_charp msg) { (void)png, (void)msg; }

static kiln_status vd_png(const uint8_t *b, size_t len, vision_rgb *out) {
    vd_png_src src = {b, len, 0, ""};
    png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &src, vd_png_error, vd_png_warning);
    png_infop info = png ? png_create_info_struct(png) : NULL;
    if (!png || !info) {
        png_destroy_read_struct(&png, &info, NULL);
        return base_fail(KILN_ERR_NOMEM, "image: out of memory for the PNG reader");
    }
    /* volatile: assigned after setjmp and read in its error branch */
    uint8_t *volatile px = NULL;
    png_bytep *volatile rows = NULL;
    volatile kiln_status st = KILN_ERR_INVALID_ARG;
    if (setjmp(png_jmpbuf(png))) {
        if (st == KILN_ERR_INVALID_ARG) base_fail(st, "image: bad PNG: %s", src.msg);
        goto fail;
    }
    png_set_read_fn(png, &src, vd_png_read);
    png_set_chunk_malloc_max(png, VD_PNG_CHUNK_MAX);
    png_set_chunk_cache_max(png, VD_PNG_CHUNK_CACHE);
    png_read_info(png, info);
    png_uint_32 w, h;
    int depth, color, interlace;
    png_get_IHDR(png, info, &w, &h, &depth, &color, &interlace, NULL, NULL);
    if ((st = vd_check_size("PNG", w, h)) != KILN_OK) goto fail;
    /* the filtered rows deflate must produce: more than the file could
     * expand to is a lie about the size, refused before allocating */
    uint64_t raw = (uint64_t)h * (1 + ((uint64_t)w * (uint64_t)png_get_channels(png, info) * (uint64_t)depth + 7) / 8);
    if (raw / VD_DEFLATE_RATIO > len) {
        st = base_fail(KILN_ERR_INVALID_ARG, "image: PNG claims %ux%u pixels but holds only %zu bytes", (unsigned)w,
                       (unsigned)h, len);
        goto fail;
    }
    st = KILN_ERR_INVALID_ARG;
    if (depth == 16) png_set_strip_16(png);
    if (color == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);
    if (color == PNG_COLOR_TYPE_GRAY && depth < 8) png_set_expand_gray_1_2_4_to_8(png);
    if (color == PNG_COLOR_TYPE_GRAY || color == PNG_COLOR_TYPE_GRAY_ALPHA) png_set_gray_to_rgb(png);
    if (color & PNG_COLOR_MASK_ALPHA) png_set_strip_alpha(png);
    if (interlace != PNG_INTERLACE_NONE) png_set_interlace_handling(png);
    png_read_update_info(png, info);
    if (png_get_rowbytes(png, info) != (size_t)w * 3) {
        snprintf(src.msg, sizeof src.msg, "unexpected row layout");
        png_longjmp(png, 1);
    }
    px = vd_alloc_px(w, h);
    rows = base_malloc((size_t)h * sizeof *rows);
    if (!px || !rows) {
        st = base_fail(KILN_ERR_NOMEM, "image: out of memory for %ux%u pixels", (unsigned)w, (unsigned)h);
        goto fail;
    }
    for (png_uint_32 y = 0; y < h; y++) rows[y] = px + (size_t)y * w * 3;
    png_read_image(png, rows);
    png_read_end(png, NULL);
    free(rows);
    png_destroy_read_struct(&png, &info, NULL);
    out->w = (int32_t)w;
    out->h = (int32_t)h;
    out->px = px;
    return KILN_OK;
fail:
    free(rows);
    free(px);
    png_destroy_read_struct(&png, &info, NULL);
    return st;
}

/* ---- JPEG ---- */

typedef struct vd_jpeg_err {
    struct jpeg_error_mgr mgr;
    jmp_buf jb;
    char msg[JMSG_LENGTH_MAX];
} vd_jpeg_err;

static void vd_jpeg_exit(j_common_ptr c) {
    vd_jpeg_err *e = (vd_jpeg_err *)c->err;
    c->err->format_message(c, e->msg);
    longjmp(e->jb, 1);
}

/* Warnings about corrupt or missing entropy data fail the decode: libjpeg
 * would fill the rest of the image with gray and go on. */
static void vd_jpeg_message(j_common_ptr c, int level) {
    if (level != -1) return;
    switch (c->err->msg_code) {
    case JWRN_JPEG_EOF:
    case JWRN_HIT_MARKER:
    case JWRN_HUFF_BAD_CODE:
    case JWRN_MUST_RESYNC:
    case JWRN_NOT_SEQUENTIAL:
    case JWRN_BOGUS_PROGRESSION: vd_jpeg_exit(c); break;
    default: break;
    }
}

static void vd_jpeg_progress(j_common_ptr c) {
    j_decompress_ptr d = (j_decompress_ptr)c;
    if (d->input_scan_number > VD_MAX_SCANS) {
        vd_jpeg_err *e = (vd_jpeg_err *)c->err;
        snprintf(e->msg, sizeof e->msg, "more than %d scans", VD_MAX_SCANS);
        longjmp(e->jb, 1);
    }
}

static kiln_status vd_jpeg(const uint8_t *b, size_t len, vision_rgb *out) {
    struct jpeg_decompress_struct d;
    vd_jpeg_err err;
    struct jpeg_progress_mgr prog = {.progress_monitor = vd_jpeg_progress};
    memset(&d, 0, sizeof d);
    d.err = jpeg_std_error(&err.mgr);
    err.mgr.error_exit = vd_jpeg_exit;
    err.mgr.emit_message = vd_jpeg_message;
    err.msg[0] = 0;
    uint8_t *volatile px = NULL;
    uint8_t *volatile turned = NULL;
    volatile kiln_status st = KILN_ERR_INVALID_ARG;
    if (setjmp(err.jb)) {
        if (st == KILN_ERR_INVALID_ARG) base_fail(st, "image: bad JPEG: %s", err.msg);
        goto fail;
    }
    jpeg_create_decompress(&d);
    d.mem->max_memory_to_use = VD_JPEG_MEM;
    d.progress = &prog;
    jpeg_save_markers(&d, JPEG_APP0 + 1, 0xffff);
    jpeg_mem_src(&d, b, (unsigned long)len);
    jpeg_read_header(&d, TRUE);
    if ((st = vd_check_size("JPEG", d.image_width, d.image_height)) != KILN_OK) goto fail;
    st = KILN_ERR_INVALID_ARG;
    int orient = 1;
    for (jpeg_saved_marker_ptr m = d.marker_list; m; m = m->next) {
        if (m->marker != JPEG_APP0 + 1) continue;
        int o = vision_exif_orientation(m->data, m->data_length);
        if (o != 1 || (m->data_length >= 6 && memcmp(m->data, "Exif\0\0", 6) == 0)) {
            orient = o;
            break;
        }
    }
    /* CMYK and YCCK (Adobe's) come out as CMYK; libjpeg does not make RGB of them */
    int cmyk = d.jpeg_color_space == JCS_CMYK || d.jpeg_color_space == JCS_YCCK;
    d.out_color_space = cmyk ? JCS_CMYK : JCS_RGB;
    jpeg_start_decompress(&d);
    uint32_t w = d.output_width, h = d.output_height;
    if (d.output_components != (cmyk ? 4 : 3) || w != d.image_width || h != d.image_height) {
        snprintf(err.msg, sizeof err.msg, "unexpected output layout");
        goto fail_msg;
    }
    px = vd_alloc_px(w, h);
    JSAMPROW row = NULL;
    if (px && cmyk) row = (*d.mem->alloc_small)((j_common_ptr)&d, JPOOL_IMAGE, (size_t)w * 4);
    if (!px) {
        st = base_fail(KILN_ERR_NOMEM, "image: out of memory for %ux%u pixels", (unsigned)w, (unsigned)h);
        goto fail;
    }
    while (d.output_scanline < h) {
        uint8_t *dst = px + (size_t)d.output_scanline * w * 3;
        if (!cmyk) {
            JSAMPROW r = dst;
            if (jpeg_read_scanlines(&d, &r, 1) != 1) break;
            continue;
        }
        if (jpeg_read_scanlines(&d, &row, 1) != 1) break;
        /* Adobe writes CMYK inverted (255 is no ink), the others do not */
        for (uint32_t x = 0; x < w; x++) {
            const uint8_t *s = row + (size_t)x * 4;
            unsigned k = d.saw_Adobe_marker ? s[3] : 255u - s[3];
            for (int c = 0; c < 3; c++) {
                unsigned v = d.saw_Adobe_marker ? s[c] : 255u - s[c];
                dst[x * 3 + c] = (uint8_t)((v * k + 127) / 255);
            }
        }
    }
    if (d.output_scanline < h) {
        snprintf(err.msg, sizeof err.msg, "%u of %u rows decoded", (unsigned)d.output_scanline, (unsigned)h);
        goto fail_msg;
    }
    jpeg_finish_decompress(&d);
    jpeg_destroy_decompress(&d);
    if (orient != 1) {
        turned = vd_alloc_px(w, h);
        if (!turned) {
            free(px);
            return base_fail(KILN_ERR_NOMEM, "image: out of memory for %ux%u pixels", (unsigned)w, (unsigned)h);
        }
        vd_orient(px, (int32_t)w, (int32_t)h, orient, turned);
        free(px);
        px = turned;
        if (orient >= 5) {
            uint32_t t = w;
            w = h;
            h = t;
        }
    }
    out->w = (int32_t)w;
    out->h = (int32_t)h;
    out->px = px;
    return KILN_OK;
fail_msg:
    base_fail(KILN_ERR_INVALID_ARG, "image: bad JPEG: %s", err.msg);
    st = KILN_ERR_INVALID_ARG;
fail:
    free(px);
    jpeg_destroy_decompress(&d);
    return st;
}

/* ---- WebP ---- */

static kiln_status vd_webp(const uint8_t *b, size_t len, vision_rgb *out) {
    WebPBitstreamFeatures f;
    VP8StatusCode vs = WebPGetFeatures(b, len, &f);
    if (vs != VP8_STATUS_OK)
        return base_fail(KILN_ERR_INVALID_ARG, "image: bad WebP: %s",
                         vs == VP8_STATUS_NOT_ENOUGH_DATA ? "truncated" : "malformed header");
    if (f.has_animation) return base_fail(KILN_ERR_INVALID_ARG, "image: animated WebP is not supported");
    kiln_status st = vd_check_size("WebP", (uint64_t)f.width, (uint64_t)f.height);
    if (st != KILN_OK) return st;
    uint32_t w = (uint32_t)f.width, h = (uint32_t)f.height;
    uint8_t *px = vd_alloc_px(w, h);
    if (!px) return base_fail(KILN_ERR_NOMEM, "image: out of memory for %ux%u pixels", (unsigned)w, (unsigned)h);
    if (!WebPDecodeRGBInto(b, len, px, (size_t)w * h * 3, (int)w * 3)) {
        free(px);
        return base_fail(KILN_ERR_INVALID_ARG,
                         "image: bad WebP: the bitstream does not decode (malformed or truncated)");
    }
    out->w = (int32_t)w;
    out->h = (int32_t)h;
    out->px = px;
    return KILN_OK;
}

kiln_status vision_decode(const uint8_t *bytes, size_t len, vision_rgb *out) {
    if (!out) return base_fail(KILN_ERR_INVALID_ARG, "image: no output");
    memset(out, 0, sizeof *out);
    if (!bytes || len == 0) return base_fail(KILN_ERR_INVALID_ARG, "image: no bytes");
    const char *fmt = vision_format(bytes, len);
    if (!fmt) return base_fail(KILN_ERR_INVALID_ARG, "image: not a PNG, JPEG or WebP file (unknown magic bytes)");
    if (fmt[0] == 'p') return vd_png(bytes, len, out);
    if (fmt[0] == 'j') return vd_jpeg(bytes, len, out);
    return vd_webp(bytes, len, out);
}
