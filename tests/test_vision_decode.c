/* The image decoders (src/vision/decode.c): pixels of PNG (every colour
 * type), JPEG (4:4:4, gray, CMYK, each EXIF orientation in both byte orders)
 * and WebP (lossless, lossy) written here with the libraries' encoders;
 * the committed files in data/vision/ decoded to the same pixels; every
 * truncation of each file, flipped bytes, sizes past the limits (checked
 * before allocating), unknown formats.
 * `test_vision_decode --write DIR` writes the committed files again. */
#include "vision/decode.h"

#include "base/base.h"
#include "testutil.h"

#include <png.h>
#include <setjmp.h>
#include <stdlib.h>
#include <string.h>
#include <webp/encode.h>
#include <zlib.h>

/* after stdio.h: jpeglib.h uses FILE */
#include <jpeglib.h>

/* The test picture: a grid of 3 x 2 flat 8x8 blocks of distinct colours
 * (24 x 16 pixels), so each of the 8 orientations moves it differently and
 * lossy codecs keep each block's colour (flat blocks, no chroma subsampling). */
#define PW 24
#define PH 16
static const uint8_t g_cols[6][3] = {{220, 30, 30},  {30, 200, 40},  {40, 50, 210},
                                     {240, 240, 40}, {30, 220, 220}, {250, 250, 250}};

static void pattern(uint8_t *px) {
    for (int y = 0; y < PH; y++)
        for (int x = 0; x < PW; x++) memcpy(px + (y * PW + x) * 3, g_cols[(y / 8) * 3 + x / 8], 3);
}

/* ---- encoders ---- */

typedef struct mbuf {
    uint8_t *p;
    size_t n, cap;
} mbuf;

static void mb_put(mbuf *b, const void *d, size_t n) {
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2;
        b->p = realloc(b->p, b->cap);
    }
    memcpy(b->p + b->n, d, n);
    b->n += n;
}

static void png_wr(png_structp png, png_bytep d, png_size_t n) { mb_put(png_get_io_ptr(png), d, n); }
static void png_fl(png_structp png) { (void)png; }

/* color: a PNG colour type; depth 8 or 16; the pixels from the pattern (gray: its green channel,
 * alpha: 128). */
static uint8_t *enc_png(int color, int depth, int interlace, size_t *len) {
    uint8_t rgb[PW * PH * 3];
    pattern(rgb);
    mbuf b = {0};
    png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, NULL, NULL, NULL);
    png_infop info = png_create_info_struct(png);
    if (setjmp(png_jmpbuf(png))) abort();
    png_set_write_fn(png, &b, png_wr, png_fl);
    png_set_IHDR(png, info, PW, PH, depth, color, interlace, PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
    if (color == PNG_COLOR_TYPE_PALETTE) {
        png_color pal[6];
        for (int i = 0; i < 6; i++) pal[i] = (png_color){g_cols[i][0], g_cols[i][1], g_cols[i][2]};
        png_set_PLTE(png, info, pal, 6);
    }
    png_write_info(png, info);
    int ch = color == PNG_COLOR_TYPE_RGB          ? 3
             : color == PNG_COLOR_TYPE_RGBA       ? 4
             : color == PNG_COLOR_TYPE_GRAY_ALPHA ? 2
                                                  : 1;
    int bps = depth / 8;
    uint8_t *rows = calloc((size_t)PH, (size_t)PW * ch * bps);
    for (int y = 0; y < PH; y++)
        for (int x = 0; x < PW; x++) {
            const uint8_t *s = rgb + (y * PW + x) * 3;
            uint8_t v[4];
            if (color == PNG_COLOR_TYPE_PALETTE)
                v[0] = (uint8_t)((y / 8) * 3 + x / 8);
            else if (ch <= 2)
                v[0] = s[1], v[1] = 128;
            else
                v[0] = s[0], v[1] = s[1], v[2] = s[2], v[3] = 128;
            for (int c = 0; c < ch; c++)
                for (int k = 0; k < bps; k++) rows[((size_t)y * PW * ch + x * ch + c) * bps + k] = k ? 0x5a : v[c];
        }
    png_bytep rp[PH];
    for (int y = 0; y < PH; y++) rp[y] = rows + (size_t)y * PW * ch * bps;
    png_write_image(png, rp);
    png_write_end(png, NULL);
    png_destroy_write_struct(&png, &info);
    free(rows);
    *len = b.n;
    return b.p;
}

/* A JPEG of the pattern (quality 98, 4:4:4); space JCS_RGB, JCS_GRAYSCALE
 * (the green channel) or JCS_CMYK (Adobe's inverted ink, no black); exif
 * 0: no APP1, else an APP1 whose IFD0 holds orientation exif, big-endian
 * when be. */
static uint8_t *enc_jpeg(J_COLOR_SPACE space, int exif, int be, size_t *len) {
    uint8_t rgb[PW * PH * 3];
    pattern(rgb);
    struct jpeg_compress_struct c;
    struct jpeg_error_mgr em;
    c.err = jpeg_std_error(&em);
    jpeg_create_compress(&c);
    unsigned char *out = NULL;
    unsigned long outlen = 0;
    jpeg_mem_dest(&c, &out, &outlen);
    c.image_width = PW;
    c.image_height = PH;
    c.input_components = space == JCS_GRAYSCALE ? 1 : space == JCS_CMYK ? 4 : 3;
    c.in_color_space = space;
    jpeg_set_defaults(&c);
    jpeg_set_quality(&c, 98, TRUE);
    for (int i = 0; i < c.num_components; i++) c.comp_info[i].h_samp_factor = c.comp_info[i].v_samp_factor = 1;
    jpeg_start_compress(&c, TRUE);
    if (exif) {
        uint8_t a[6 + 8 + 2 + 24 + 4];
        memcpy(a, "Exif\0\0", 6);
        uint8_t *t = a + 6;
#define W16(p, v) \
    (be ? ((p)[0] = (uint8_t)((v) >> 8), (p)[1] = (uint8_t)(v)) : ((p)[1] = (uint8_t)((v) >> 8), (p)[0] = (uint8_t)(v)))
#define W32(p, v) (W16((p) + (be ? 2 : 0), (v)&0xffff), W16((p) + (be ? 0 : 2), (uint32_t)(v) >> 16))
        t[0] = t[1] = be ? 'M' : 'I';
        W16(t + 2, 42);
        W32(t + 4, 8);
        W16(t + 8, 2);
        /* an ImageWidth entry first, then Orientation */
        W16(t + 10, 0x0100), W16(t + 12, 4), W32(t + 14, 1), W32(t + 18, PW);
        W16(t + 22, 0x0112), W16(t + 24, 3), W32(t + 26, 1), W32(t + 30, 0);
        W16(t + 30, exif);
        W32(t + 34, 0);
#undef W16
#undef W32
        jpeg_write_marker(&c, JPEG_APP0 + 1, a, sizeof a);
    }
    uint8_t row[PW * 4];
    for (int y = 0; y < PH; y++) {
        for (int x = 0; x < PW; x++) {
            const uint8_t *s = rgb + (y * PW + x) * 3;
            if (space == JCS_GRAYSCALE)
                row[x] = s[1];
            else if (space == JCS_CMYK)
                row[x * 4] = s[0], row[x * 4 + 1] = s[1], row[x * 4 + 2] = s[2], row[x * 4 + 3] = 255;
            else
                memcpy(row + x * 3, s, 3);
        }
        JSAMPROW r = row;
        jpeg_write_scanlines(&c, &r, 1);
    }
    jpeg_finish_compress(&c);
    jpeg_destroy_compress(&c);
    uint8_t *p = malloc(outlen);
    memcpy(p, out, outlen);
    free(out);
    *len = outlen;
    return p;
}

static uint8_t *enc_webp(int lossless, int w, int h, size_t *len) {
    uint8_t *rgb = malloc((size_t)w * h * 3);
    if (w == PW && h == PH)
        pattern(rgb);
    else
        memset(rgb, 77, (size_t)w * h * 3);
    uint8_t *out = NULL;
    *len = lossless ? WebPEncodeLosslessRGB(rgb, w, h, w * 3, &out) : WebPEncodeRGB(rgb, w, h, w * 3, 95, &out);
    free(rgb);
    uint8_t *p = malloc(*len);
    memcpy(p, out, *len);
    WebPFree(out);
    return p;
}

/* ---- checks ---- */

/* The largest channel difference between im and the pattern, or 999 when
 * the size differs; gray: against the pattern's green channel; gray 2: RGB
 * away from the blocks' edges (lossy WebP subsamples chroma and blurs them). */
static int pattern_diff(const vision_rgb *im, int gray) {
    if (im->w != PW || im->h != PH || !im->px) return 999;
    uint8_t want[PW * PH * 3];
    pattern(want);
    int worst = 0;
    for (int i = 0; i < PW * PH; i++)
        for (int c = 0; c < 3; c++) {
            int bx = i % PW % 8, by = i / PW % 8;
            if (gray == 2 && (bx < 2 || bx > 5 || by < 2 || by > 5)) continue;
            int d = abs((int)im->px[i * 3 + c] - (int)want[i * 3 + (gray == 1 ? 1 : c)]);
            if (d > worst) worst = d;
        }
    return worst;
}

static int decode_diff(const uint8_t *b, size_t len, int gray) {
    vision_rgb im;
    kiln_status st = vision_decode(b, len, &im);
    if (st != KILN_OK) {
        fprintf(stderr, "  decode: %s\n", kiln_last_error());
        return 1000;
    }
    int d = pattern_diff(&im, gray);
    vision_rgb_free(&im);
    return d;
}

/* Every strict prefix of the file fails cleanly. */
static void truncations(const char *what, const uint8_t *b, size_t len) {
    int ok = 0;
    for (size_t n = 0; n < len; n++) {
        vision_rgb im;
        if (vision_decode(b, n, &im) == KILN_OK) {
            ok++;
            vision_rgb_free(&im);
        } else {
            CHECK(im.px == NULL && im.w == 0);
        }
    }
    CHECKF(ok == 0, "%s: %d of %zu truncations decoded", what, ok, len);
}

/* Flipped bytes: each mutant either decodes to an image within the limits
 * or fails with a message; nothing crashes (the fuzz target goes further). */
static void mutations(const uint8_t *b, size_t len, uint32_t seed) {
    uint8_t *m = malloc(len);
    for (int k = 0; k < 300; k++) {
        memcpy(m, b, len);
        for (int f = 0; f < 1 + k % 4; f++) {
            seed = seed * 1664525u + 1013904223u;
            size_t at = (seed >> 8) % len;
            m[at] ^= (uint8_t)(1u << (seed >> 29));
        }
        vision_rgb im;
        kiln_status st = vision_decode(m, len, &im);
        if (st == KILN_OK) {
            CHECK(im.w > 0 && im.h > 0 && im.w <= VISION_MAX_SIDE && im.h <= VISION_MAX_SIDE && im.px);
            vision_rgb_free(&im);
        } else {
            CHECK(kiln_last_error()[0] != 0);
        }
    }
    free(m);
}

static void test_png(void) {
    struct {
        int color, depth, interlace, gray;
    } cases[] = {
        {PNG_COLOR_TYPE_RGB, 8, PNG_INTERLACE_NONE, 0},   {PNG_COLOR_TYPE_RGBA, 8, PNG_INTERLACE_NONE, 0},
        {PNG_COLOR_TYPE_RGB, 16, PNG_INTERLACE_NONE, 0},  {PNG_COLOR_TYPE_RGBA, 16, PNG_INTERLACE_NONE, 0},
        {PNG_COLOR_TYPE_GRAY, 8, PNG_INTERLACE_NONE, 1},  {PNG_COLOR_TYPE_GRAY_ALPHA, 8, PNG_INTERLACE_NONE, 1},
        {PNG_COLOR_TYPE_GRAY, 16, PNG_INTERLACE_NONE, 1}, {PNG_COLOR_TYPE_PALETTE, 8, PNG_INTERLACE_NONE, 0},
        {PNG_COLOR_TYPE_RGB, 8, PNG_INTERLACE_ADAM7, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        size_t len;
        uint8_t *b = enc_png(cases[i].color, cases[i].depth, cases[i].interlace, &len);
        CHECK(strcmp(vision_format(b, len), "png") == 0);
        int d = decode_diff(b, len, cases[i].gray);
        CHECKF(d == 0, "PNG case %zu: max diff %d", i, d);
        if (i == 0 || i == 8) truncations("PNG", b, len);
        mutations(b, len, (uint32_t)i + 1);
        free(b);
    }
}

/* Where the stored pixel (x, y) of a w x h image shows after orientation o,
 * from the EXIF wording: which side of the picture the stored 0th row is
 * on, and which side the 0th column is on. */
static void shown_at(int o, int x, int y, int w, int h, int *sx, int *sy) {
    static const char *row0[9] = {"", "top", "top", "bottom", "bottom", "left", "right", "right", "left"};
    static const char *col0[9] = {"", "left", "right", "right", "left", "top", "top", "bottom", "bottom"};
    if (!strcmp(row0[o], "top") || !strcmp(row0[o], "bottom")) {
        *sy = !strcmp(row0[o], "top") ? y : h - 1 - y;
        *sx = !strcmp(col0[o], "left") ? x : w - 1 - x;
    } else {
        *sx = !strcmp(row0[o], "left") ? y : h - 1 - y;
        *sy = !strcmp(col0[o], "top") ? x : w - 1 - x;
    }
}

static void test_jpeg(void) {
    size_t len;
    uint8_t *b = enc_jpeg(JCS_RGB, 0, 0, &len);
    CHECK(strcmp(vision_format(b, len), "jpeg") == 0);
    int d = decode_diff(b, len, 0);
    CHECKF(d <= 8, "JPEG max diff %d", d);
    truncations("JPEG", b, len);
    mutations(b, len, 99);
    free(b);

    b = enc_jpeg(JCS_GRAYSCALE, 0, 0, &len);
    d = decode_diff(b, len, 1);
    CHECKF(d <= 8, "gray JPEG max diff %d", d);
    free(b);

    b = enc_jpeg(JCS_CMYK, 0, 0, &len);
    d = decode_diff(b, len, 0);
    CHECKF(d <= 8, "CMYK JPEG max diff %d", d);
    free(b);

    for (int be = 0; be < 2; be++)
        for (int o = 1; o <= 8; o++) {
            b = enc_jpeg(JCS_RGB, o, be, &len);
            vision_rgb im;
            CHECKF(vision_decode(b, len, &im) == KILN_OK, "orientation %d: %s", o, kiln_last_error());
            int ow = o >= 5 ? PH : PW, oh = o >= 5 ? PW : PH;
            CHECKF(im.w == ow && im.h == oh, "orientation %d: %dx%d", o, im.w, im.h);
            if (im.w == ow && im.h == oh) {
                int worst = 0;
                uint8_t want[PW * PH * 3];
                pattern(want);
                for (int y = 0; y < PH; y++)
                    for (int x = 0; x < PW; x++) {
                        int sx, sy;
                        shown_at(o, x, y, PW, PH, &sx, &sy);
                        for (int c = 0; c < 3; c++) {
                            int dd = abs((int)im.px[((size_t)sy * ow + sx) * 3 + c] - want[(y * PW + x) * 3 + c]);
                            if (dd > worst) worst = dd;
                        }
                    }
                CHECKF(worst <= 8, "orientation %d (%s-endian): max diff %d", o, be ? "big" : "little", worst);
            }
            vision_rgb_free(&im);
            if (o == 6 && be) truncations("JPEG with EXIF", b, len);
            free(b);
        }
}

static void test_exif_parser(void) {
    static const uint8_t good[] = {'E', 'x', 'i',  'f',  0, 0, 'M', 'M', 0, 42, 0, 0, 0, 8,
                                   0,   1,   0x01, 0x12, 0, 3, 0,   0,   0, 1,  0, 6, 0, 0};
    CHECK(vision_exif_orientation(good, sizeof good) == 6);
    /* every shorter segment: no orientation, no read past the end */
    for (size_t n = 0; n < sizeof good; n++) {
        uint8_t *c = malloc(n ? n : 1);
        memcpy(c, good, n);
        CHECK(vision_exif_orientation(c, n) == 1);
        free(c);
    }
    uint8_t bad[sizeof good];
    memcpy(bad, good, sizeof good);
    bad[25] = 9; /* out of range */
    CHECK(vision_exif_orientation(bad, sizeof bad) == 1);
    memcpy(bad, good, sizeof good);
    bad[15] = 200; /* 200 entries claimed */
    CHECK(vision_exif_orientation(bad, sizeof bad) == 1);
    memcpy(bad, good, sizeof good);
    bad[13] = 0xf0; /* IFD0 past the end */
    CHECK(vision_exif_orientation(bad, sizeof bad) == 1);
    memcpy(bad, good, sizeof good);
    bad[10] = 0xff; /* IFD0 offset near 4 GB */
    CHECK(vision_exif_orientation(bad, sizeof bad) == 1);
    memcpy(bad, good, sizeof good);
    bad[19] = 4; /* LONG, not SHORT */
    CHECK(vision_exif_orientation(bad, sizeof bad) == 1);
    CHECK(vision_exif_orientation(NULL, 0) == 1);
}

static void test_webp(void) {
    size_t len;
    uint8_t *b = enc_webp(1, PW, PH, &len);
    CHECK(strcmp(vision_format(b, len), "webp") == 0);
    int d = decode_diff(b, len, 0);
    CHECKF(d == 0, "lossless WebP max diff %d", d);
    truncations("lossless WebP", b, len);
    mutations(b, len, 7);
    free(b);
    b = enc_webp(0, PW, PH, &len);
    d = decode_diff(b, len, 2);
    CHECKF(d <= 24, "lossy WebP max diff %d", d);
    truncations("lossy WebP", b, len);
    mutations(b, len, 8);
    free(b);
}

static void png_chunk(mbuf *b, const char *type, const uint8_t *d, uint32_t n) {
    uint8_t be[4] = {(uint8_t)(n >> 24), (uint8_t)(n >> 16), (uint8_t)(n >> 8), (uint8_t)n};
    mb_put(b, be, 4);
    uint32_t crc = (uint32_t)crc32(0, (const uint8_t *)type, 4);
    crc = (uint32_t)crc32(crc, d, n);
    mb_put(b, type, 4);
    if (n) mb_put(b, d, n);
    uint8_t cb[4] = {(uint8_t)(crc >> 24), (uint8_t)(crc >> 16), (uint8_t)(crc >> 8), (uint8_t)crc};
    mb_put(b, cb, 4);
}

/* A PNG whose header says w x h and whose IDAT is a few bytes of zlib. */
static uint8_t *lying_png(uint32_t w, uint32_t h, size_t *len) {
    mbuf b = {0};
    mb_put(&b, "\x89PNG\r\n\x1a\n", 8);
    uint8_t ihdr[13] = {(uint8_t)(w >> 24),
                        (uint8_t)(w >> 16),
                        (uint8_t)(w >> 8),
                        (uint8_t)w,
                        (uint8_t)(h >> 24),
                        (uint8_t)(h >> 16),
                        (uint8_t)(h >> 8),
                        (uint8_t)h,
                        8,
                        2,
                        0,
                        0,
                        0};
    png_chunk(&b, "IHDR", ihdr, 13);
    static const uint8_t idat[] = {0x78, 0x9c, 0x63, 0x00, 0x00, 0x00, 0x01, 0x00, 0x01};
    png_chunk(&b, "IDAT", idat, sizeof idat);
    png_chunk(&b, "IEND", NULL, 0);
    *len = b.n;
    return b.p;
}

static void expect_refused(const char *what, const uint8_t *b, size_t len, const char *needle) {
    vision_rgb im;
    kiln_status st = vision_decode(b, len, &im);
    CHECKF(st == KILN_ERR_INVALID_ARG, "%s: status %d", what, (int)st);
    CHECKF(strstr(kiln_last_error(), needle) != NULL, "%s: message \"%s\" lacks \"%s\"", what, kiln_last_error(),
           needle);
    CHECK(im.px == NULL);
    vision_rgb_free(&im);
}

static void test_limits(void) {
    size_t len;
    uint8_t *b = lying_png(100000, 100000, &len);
    expect_refused("PNG 100000^2", b, len, "too large");
    free(b);
    b = lying_png(8192, 8192, &len); /* each side allowed, the area is not */
    expect_refused("PNG 8192^2", b, len, "too large");
    free(b);
    b = lying_png(4000, 4000, &len); /* within the limits, but not in 60 bytes */
    expect_refused("PNG 4000^2 in a few bytes", b, len, "holds only");
    free(b);
    b = lying_png(0, 5, &len);
    expect_refused("PNG 0x5", b, len, "bad PNG");
    free(b);

    /* a JPEG whose SOF says 20000 x 20000 */
    b = enc_jpeg(JCS_RGB, 0, 0, &len);
    for (size_t i = 2; i + 9 < len; i++)
        if (b[i] == 0xff && b[i + 1] == 0xc0) {
            b[i + 5] = 20000 >> 8, b[i + 6] = 20000 & 255, b[i + 7] = 20000 >> 8, b[i + 8] = 20000 & 255;
            break;
        }
    expect_refused("JPEG 20000^2", b, len, "too large");
    free(b);

    /* a real lossless WebP one pixel too wide, and one within the limits */
    b = enc_webp(1, VISION_MAX_SIDE + 1, 1, &len);
    expect_refused("WebP 8193x1", b, len, "too large");
    free(b);
    b = enc_webp(1, VISION_MAX_SIDE, 2, &len);
    vision_rgb im;
    CHECK(vision_decode(b, len, &im) == KILN_OK && im.w == VISION_MAX_SIDE && im.h == 2 && im.px[5] == 77);
    vision_rgb_free(&im);
    free(b);

    static const uint8_t gif[] = "GIF89a\x01\x00\x01\x00\x00\x00\x00";
    expect_refused("GIF", gif, sizeof gif, "not a PNG, JPEG or WebP");
    expect_refused("empty", gif, 0, "no bytes");
    static const uint8_t riff[] = "RIFF\x04\x00\x00\x00WEBPVP8 ";
    expect_refused("bare RIFF", riff, sizeof riff - 1, "bad WebP");
    static const uint8_t soi[] = {0xff, 0xd8, 0xff, 0xd9};
    expect_refused("SOI EOI", soi, sizeof soi, "bad JPEG");
}

/* The committed files: name, whether gray, the largest difference allowed. */
static const struct {
    const char *name;
    int gray, tol;
} g_files[] = {
    {"rgb.png", 0, 0}, {"rgba16.png", 0, 0}, {"gray.png", 1, 0},      {"palette.png", 0, 0},
    {"rgb.jpg", 0, 8}, {"cmyk.jpg", 0, 8},   {"lossless.webp", 0, 0}, {"lossy.webp", 2, 24},
};

static uint8_t *file_bytes(const char *name, size_t *len) {
    if (!strcmp(name, "rgb.png")) return enc_png(PNG_COLOR_TYPE_RGB, 8, PNG_INTERLACE_NONE, len);
    if (!strcmp(name, "rgba16.png")) return enc_png(PNG_COLOR_TYPE_RGBA, 16, PNG_INTERLACE_ADAM7, len);
    if (!strcmp(name, "gray.png")) return enc_png(PNG_COLOR_TYPE_GRAY, 8, PNG_INTERLACE_NONE, len);
    if (!strcmp(name, "palette.png")) return enc_png(PNG_COLOR_TYPE_PALETTE, 8, PNG_INTERLACE_NONE, len);
    if (!strcmp(name, "rgb.jpg")) return enc_jpeg(JCS_RGB, 0, 0, len);
    if (!strcmp(name, "cmyk.jpg")) return enc_jpeg(JCS_CMYK, 0, 0, len);
    if (!strcmp(name, "lossless.webp")) return enc_webp(1, PW, PH, len);
    if (!strcmp(name, "lossy.webp")) return enc_webp(0, PW, PH, len);
    return NULL;
}

static void test_committed(void) {
    for (size_t i = 0; i < sizeof g_files / sizeof g_files[0]; i++) {
        char path[256];
        snprintf(path, sizeof path, "data/vision/%s", g_files[i].name);
        size_t len;
        char *b = t_read_file(path, &len);
        CHECKF(b != NULL, "%s missing", path);
        if (!b) continue;
        int d = decode_diff((const uint8_t *)b, len, g_files[i].gray);
        CHECKF(d <= g_files[i].tol, "%s: max diff %d", path, d);
        free(b);
    }
    /* one per orientation (6: turned a quarter clockwise) */
    size_t len;
    char *b = t_read_file("data/vision/exif6.jpg", &len);
    CHECK(b != NULL);
    vision_rgb im;
    if (b && vision_decode((const uint8_t *)b, len, &im) == KILN_OK) {
        CHECK(im.w == PH && im.h == PW);
        /* the stored top-left block (red) shows at the top right */
        CHECK(im.px[((size_t)2 * im.w + im.w - 3) * 3] > 180 && im.px[((size_t)2 * im.w + im.w - 3) * 3 + 1] < 80);
        vision_rgb_free(&im);
    } else {
        CHECKF(0, "exif6.jpg: %s", kiln_last_error());
    }
    free(b);
}

static int write_files(const char *dir) {
    for (size_t i = 0; i <= sizeof g_files / sizeof g_files[0]; i++) {
        const char *name = i < sizeof g_files / sizeof g_files[0] ? g_files[i].name : "exif6.jpg";
        size_t len;
        uint8_t *b = i < sizeof g_files / sizeof g_files[0] ? file_bytes(name, &len) : enc_jpeg(JCS_RGB, 6, 1, &len);
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", dir, name);
        FILE *f = fopen(path, "wb");
        if (!f || fwrite(b, 1, len, f) != len || fclose(f) != 0) {
            fprintf(stderr, "cannot write %s\n", path);
            return 1;
        }
        printf("wrote %s (%zu bytes)\n", path, len);
        free(b);
    }
    return 0;
}

int main(int argc, char **argv) {
    if (argc == 3 && !strcmp(argv[1], "--write")) return write_files(argv[2]);
    test_png();
    test_jpeg();
    test_exif_parser();
    test_webp();
    test_limits();
    test_committed();
    return t_done();
}
