/* image_decode.c - JPEG through TurboJPEG, PNG through libpng, to 8-bit grey or
 * RGB as PIL's convert("L") / convert("RGB") gives them (image_decode.h). */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <setjmp.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <zlib.h>

#ifdef HAVE_TURBOJPEG
#include <turbojpeg.h>
#endif
#ifdef HAVE_LIBPNG
#include <png.h>
#endif

#include "dataflow/image_decode.h"

static const uint8_t png_magic[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};

static uint32_t be32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static bool is_png(const uint8_t *d, size_t n)
{
    return n >= 8 && memcmp(d, png_magic, 8) == 0;
}

static bool is_jpeg(const uint8_t *d, size_t n)
{
    return n >= 3 && d[0] == 0xff && d[1] == 0xd8 && d[2] == 0xff;
}

static int size_ok(int w, int h, char *why, size_t why_len)
{
    if (w < 1 || h < 1 || w > IMAGE_MAX_SIDE || h > IMAGE_MAX_SIDE ||
        (uint64_t)w * (uint64_t)h > IMAGE_MAX_PIXELS) {
        snprintf(why, why_len, "image of %dx%d pixels is not supported (at most %d on a side, "
                 "%u pixels)", w, h, IMAGE_MAX_SIDE, IMAGE_MAX_PIXELS);
        return -1;
    }
    return 0;
}

#if defined(HAVE_TURBOJPEG) || defined(HAVE_LIBPNG)
/* PIL's ITU-R 601-2 luma (Convert.c, L24). */
static inline uint8_t luma(unsigned r, unsigned g, unsigned b)
{
    return (uint8_t)((r * 19595 + g * 38470 + b * 7471 + 0x8000) >> 16);
}

static int grow(uint8_t **buf, size_t *cap, size_t need, char *why, size_t why_len)
{
    if (*cap >= need)
        return 0;
    uint8_t *p = realloc(*buf, need);
    if (p == NULL) {
        snprintf(why, why_len, "out of memory for %zu bytes of pixels", need);
        return -1;
    }
    *buf = p;
    *cap = need;
    return 0;
}
#endif

const char *image_formats_built(void)
{
#if defined(HAVE_TURBOJPEG) && defined(HAVE_LIBPNG)
    return "jpeg png";
#elif defined(HAVE_TURBOJPEG)
    return "jpeg";
#elif defined(HAVE_LIBPNG)
    return "png";
#else
    return "none";
#endif
}

/* ---- PNG ---- */

/* The IHDR chunk, always first: 8 signature bytes, length 13, "IHDR", width,
 * height, bit depth, colour type, compression, filter, interlace, CRC. */
static int png_probe(const uint8_t *d, size_t n, int *w, int *h, char *why, size_t why_len)
{
    if (n < 33)
        return 1;
    if (be32(d + 8) != 13 || memcmp(d + 12, "IHDR", 4) != 0) {
        snprintf(why, why_len, "corrupt PNG (no IHDR chunk first)");
        return -1;
    }
    if ((uint32_t)crc32(crc32(0L, Z_NULL, 0), d + 12, 17) != be32(d + 29)) {
        snprintf(why, why_len, "corrupt PNG (bad CRC in IHDR)");
        return -1;
    }
    uint32_t pw = be32(d + 16), ph = be32(d + 20);
    int depth = d[24], type = d[25];
    bool depth_ok = (type == 0 && (depth == 1 || depth == 2 || depth == 4 || depth == 8 ||
                                   depth == 16)) ||
                    (type == 3 && (depth == 1 || depth == 2 || depth == 4 || depth == 8)) ||
                    ((type == 2 || type == 4 || type == 6) && (depth == 8 || depth == 16));
    if (!depth_ok || d[26] != 0 || d[27] != 0 || d[28] > 1) {
        snprintf(why, why_len, "corrupt PNG (colour type %d, bit depth %d, compression %d, "
                 "filter %d, interlace %d)", type, depth, d[26], d[27], d[28]);
        return -1;
    }
    if (pw > IMAGE_MAX_SIDE || ph > IMAGE_MAX_SIDE) {
        snprintf(why, why_len, "image of %ux%u pixels is not supported (at most %d on a side)",
                 pw, ph, IMAGE_MAX_SIDE);
        return -1;
    }
#ifndef HAVE_LIBPNG
    snprintf(why, why_len, "PNG images need libpng, which this towertrain was built without "
             "(on Debian: apt-get install libpng-dev, then configure and make again)");
    return IMAGE_NOT_BUILT;
#endif
    *w = (int)pw;
    *h = (int)ph;
    return size_ok(*w, *h, why, why_len);
}

#ifdef HAVE_LIBPNG
typedef struct {
    jmp_buf jmp;
    const uint8_t *data;
    size_t len, pos;
    char *why;
    size_t why_len;
} png_reader;

static void png_fail(png_structp png, png_const_charp msg)
{
    png_reader *r = png_get_error_ptr(png);
    snprintf(r->why, r->why_len, "corrupt PNG (%s)", msg);
    longjmp(r->jmp, 1);
}

static void png_warn(png_structp png, png_const_charp msg)
{
    /* warnings (an sRGB profile libpng dislikes, a bad ancillary chunk it
     * skips) leave the pixels as PIL reads them */
}

static void png_read_mem(png_structp png, png_bytep out, png_size_t n)
{
    png_reader *r = png_get_io_ptr(png);
    if (n > r->len - r->pos)
        png_error(png, "truncated file");
    memcpy(out, r->data + r->pos, n);
    r->pos += n;
}

static int png_decode(const uint8_t *data, size_t len, int channels, uint8_t **pix,
                      size_t *pix_cap, int *width, int *height, char *why, size_t why_len)
{
    png_reader r = {.data = data, .len = len, .why = why, .why_len = why_len};
    png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &r, png_fail, png_warn);
    png_infop info = png ? png_create_info_struct(png) : NULL;
    /* set after setjmp, used after a longjmp: volatile */
    png_bytep *volatile rows = NULL;
    uint8_t *volatile line = NULL;
    if (png == NULL || info == NULL) {
        snprintf(why, why_len, "out of memory");
        png_destroy_read_struct(png ? &png : NULL, NULL, NULL);
        return -1;
    }
    if (setjmp(r.jmp)) {
        png_destroy_read_struct(&png, &info, NULL);
        free(rows);
        free(line);
        return -1;
    }
    png_set_read_fn(png, &r, png_read_mem);
    png_read_info(png, info);
    int w = (int)png_get_image_width(png, info), h = (int)png_get_image_height(png, info);
    int type = png_get_color_type(png, info), depth = png_get_bit_depth(png, info);
    if (size_ok(w, h, why, why_len) != 0)
        longjmp(r.jmp, 1);
    /* to 8-bit grey, grey+alpha, RGB or RGBA; alpha and tRNS are dropped below */
    if (type == PNG_COLOR_TYPE_PALETTE)
        png_set_palette_to_rgb(png);
    if (type == PNG_COLOR_TYPE_GRAY && depth < 8)
        png_set_expand_gray_1_2_4_to_8(png);
    if (depth == 16)
        png_set_strip_16(png); /* the high byte, as PIL's RGB;16B */
    png_set_interlace_handling(png);
    png_read_update_info(png, info);
    int in_ch = png_get_channels(png, info);
    size_t stride = png_get_rowbytes(png, info);
    if (in_ch < 1 || in_ch > 4 || stride != (size_t)w * in_ch)
        png_error(png, "unexpected row layout");
    line = malloc(stride * (size_t)h);
    rows = malloc((size_t)h * sizeof(png_bytep));
    if (line == NULL || rows == NULL)
        png_error(png, "out of memory");
    for (int y = 0; y < h; y++)
        rows[y] = line + (size_t)y * stride;
    png_read_image(png, rows);
    if (grow(pix, pix_cap, (size_t)w * h * channels, why, why_len) != 0)
        longjmp(r.jmp, 1);
    uint8_t *out = *pix;
    size_t npx = (size_t)w * h;
    bool colour = in_ch >= 3;
    for (size_t i = 0; i < npx; i++) {
        const uint8_t *p = line + i * in_ch;
        if (channels == 1) {
            out[i] = colour ? luma(p[0], p[1], p[2]) : p[0];
        } else {
            out[3 * i] = p[0];
            out[3 * i + 1] = colour ? p[1] : p[0];
            out[3 * i + 2] = colour ? p[2] : p[0];
        }
    }
    png_destroy_read_struct(&png, &info, NULL);
    free(rows);
    free(line);
    *width = w;
    *height = h;
    return 0;
}
#endif

/* ---- JPEG ---- */

#ifdef HAVE_TURBOJPEG
static tjhandle jpeg_handle(void **jpeg, char *why, size_t why_len)
{
    if (*jpeg == NULL && (*jpeg = tjInitDecompress()) == NULL)
        snprintf(why, why_len, "cannot start the JPEG decoder: %s", tjGetErrorStr2(NULL));
    return *jpeg;
}
#endif

static int jpeg_probe(const uint8_t *d, size_t n, void **jpeg, int *w, int *h, char *why,
                      size_t why_len)
{
#ifndef HAVE_TURBOJPEG
    snprintf(why, why_len, "JPEG images need libjpeg-turbo's TurboJPEG library, which this "
             "towertrain was built without (on Debian: apt-get install libturbojpeg0-dev, "
             "then configure and make again)");
    return IMAGE_NOT_BUILT;
#else
    tjhandle tj = jpeg_handle(jpeg, why, why_len);
    if (tj == NULL)
        return -1;
    int subsamp, space;
    if (tjDecompressHeader3(tj, d, (unsigned long)n, w, h, &subsamp, &space) != 0) {
        snprintf(why, why_len, "corrupt JPEG (%s)", tjGetErrorStr2(tj));
        return 1; /* perhaps only cut short: the caller retries with the whole file */
    }
    return size_ok(*w, *h, why, why_len);
#endif
}

#ifdef HAVE_TURBOJPEG
static int jpeg_decode(const uint8_t *data, size_t len, int channels, void **jpeg, uint8_t **pix,
                       size_t *pix_cap, int *width, int *height, char *why, size_t why_len)
{
    tjhandle tj = jpeg_handle(jpeg, why, why_len);
    if (tj == NULL)
        return -1;
    int w, h, subsamp, space;
    if (tjDecompressHeader3(tj, data, (unsigned long)len, &w, &h, &subsamp, &space) != 0) {
        snprintf(why, why_len, "corrupt JPEG (%s)", tjGetErrorStr2(tj));
        return -1;
    }
    if (size_ok(w, h, why, why_len) != 0)
        return -1;
    bool cmyk = space == TJCS_CMYK || space == TJCS_YCCK;
    bool grey = space == TJCS_GRAY;
    /* grey files decode as grey; colour ones as RGB (then luma for channels 1,
     * as PIL's convert("L") does after its RGB decode) */
    int fmt = cmyk ? TJPF_CMYK : grey ? TJPF_GRAY : TJPF_RGB;
    int in_ch = tjPixelSize[fmt];
    size_t npx = (size_t)w * h;
    /* decode into the tail of the buffer, convert into its head */
    size_t need = npx * in_ch + npx * channels;
    if (grow(pix, pix_cap, need, why, why_len) != 0)
        return -1;
    uint8_t *raw = *pix + npx * channels;
    /* LIMITSCANS: a progressive file with absurdly many scans is refused
     * rather than decoded for minutes */
    int flags = TJFLAG_ACCURATEDCT | TJFLAG_LIMITSCANS;
    if (tjDecompress2(tj, data, (unsigned long)len, raw, w, 0, h, fmt, flags) != 0) {
        const char *msg = tjGetErrorStr2(tj);
        /* libjpeg's warnings leave a whole image (extraneous bytes, say),
         * except a file cut short, which PIL refuses too */
        if (tjGetErrorCode(tj) == TJERR_FATAL || strstr(msg, "Premature end") != NULL) {
            snprintf(why, why_len, "corrupt or truncated JPEG (%s)", msg);
            return -1;
        }
    }
    uint8_t *out = *pix;
    for (size_t i = 0; i < npx; i++) {
        const uint8_t *p = raw + i * in_ch;
        uint8_t rgb[3];
        if (cmyk) {
            /* PIL: Adobe polarity (stored values inverted), then
             * R = (255 - K) - (255 - K) * C / 255 rounded (Convert.c) */
            unsigned nk = p[3];
            for (int c = 0; c < 3; c++) {
                unsigned ink = 255u - p[c], t = ink * nk + 128;
                rgb[c] = (uint8_t)(nk - (((t >> 8) + t) >> 8));
            }
        } else if (in_ch == 1) {
            rgb[0] = rgb[1] = rgb[2] = p[0];
        } else {
            rgb[0] = p[0];
            rgb[1] = p[1];
            rgb[2] = p[2];
        }
        if (channels == 1) {
            out[i] = in_ch == 1 ? p[0] : luma(rgb[0], rgb[1], rgb[2]);
        } else {
            out[3 * i] = rgb[0];
            out[3 * i + 1] = rgb[1];
            out[3 * i + 2] = rgb[2];
        }
    }
    *width = w;
    *height = h;
    return 0;
}
#endif

/* ---- the API ---- */

int image_probe(const uint8_t *data, size_t len, void **jpeg, int *width, int *height,
                char *why, size_t why_len)
{
    if (is_png(data, len))
        return png_probe(data, len, width, height, why, why_len);
    if (is_jpeg(data, len))
        return jpeg_probe(data, len, jpeg, width, height, why, why_len);
    if (len < 8 && (len == 0 || data[0] == 0x89 || data[0] == 0xff))
        return 1;
    snprintf(why, why_len, "not a JPEG or PNG file");
    return -1;
}

int image_decode(const uint8_t *data, size_t len, int channels, void **jpeg, uint8_t **pix,
                 size_t *pix_cap, int *width, int *height, char *why, size_t why_len)
{
    if (is_png(data, len)) {
#ifdef HAVE_LIBPNG
        return png_decode(data, len, channels, pix, pix_cap, width, height, why, why_len);
#else
        png_probe(data, len, width, height, why, why_len);
        return -1;
#endif
    }
    if (is_jpeg(data, len)) {
#ifdef HAVE_TURBOJPEG
        return jpeg_decode(data, len, channels, jpeg, pix, pix_cap, width, height, why, why_len);
#else
        jpeg_probe(data, len, jpeg, width, height, why, why_len);
        return -1;
#endif
    }
    snprintf(why, why_len, "not a JPEG or PNG file");
    return -1;
}

void image_decoder_free(void *jpeg)
{
#ifdef HAVE_TURBOJPEG
    if (jpeg != NULL)
        tjDestroy(jpeg);
#endif
}
