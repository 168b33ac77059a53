/* image_decode.h - JPEG (libjpeg-turbo's TurboJPEG API) and PNG (libpng) to
 * 8-bit pixels, as torchvision's ImageFolder sees them through PIL's
 * Image.convert("RGB") (channels = 3) or convert("L") (channels = 1).
 *
 * PNG: grey, grey+alpha, RGB, RGBA and palette images of every bit depth,
 * interlaced or not; alpha (and a palette's transparency) is dropped, not
 * composited, as PIL's convert does; 16-bit samples keep their high byte.
 * JPEG: baseline and progressive, grey, YCbCr and CMYK/YCCK (converted as PIL
 * converts CMYK to RGB). Grey from colour is PIL's ITU-R 601-2 luma,
 * L = (19595 R + 38470 G + 7471 B + 32768) >> 16.
 *
 * A build without libjpeg-turbo or libpng refuses that format with a message
 * naming the Debian package to install.
 */
#ifndef TT_IMAGE_DECODE_H
#define TT_IMAGE_DECODE_H

#include <stddef.h>
#include <stdint.h>

#define IMAGE_MAX_SIDE 32768
#define IMAGE_MAX_PIXELS (1u << 28)

/* Reads the format and size from the first bytes of a file (PNG: 33 bytes;
 * JPEG: up to its first scan). jpeg is a decoder handle (see image_decode),
 * made on first use. Returns 0, or -1 with a reason in why (no file name):
 * not an image, an unsupported kind, a header that does not decode, a size
 * beyond IMAGE_MAX_SIDE / IMAGE_MAX_PIXELS; IMAGE_NOT_BUILT for a format this
 * build lacks (not a corrupt file: skip_corrupt does not skip it). 1 when the
 * bytes end before the header does (read more and try again). */
#define IMAGE_NOT_BUILT (-2)
int image_probe(const uint8_t *data, size_t len, void **jpeg, int *width, int *height,
                char *why, size_t why_len);

/* Decodes a whole file's bytes into *pix (grown with realloc as needed), rows
 * of width x channels bytes (channels 1 or 3, interleaved). Returns 0 or -1
 * with a reason in why: corrupt or truncated data. */
int image_decode(const uint8_t *data, size_t len, int channels, void **jpeg, uint8_t **pix,
                 size_t *pix_cap, int *width, int *height, char *why, size_t why_len);

void image_decoder_free(void *jpeg);

/* What this build decodes: "jpeg png", "png", ... */
const char *image_formats_built(void);

#endif
