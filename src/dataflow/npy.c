/* npy.c - NumPy .npy arrays (format 1.0, 2.0 and 3.0), memory-mapped.
 *
 * A file is the magic "\x93NUMPY", the format version (major, minor), the
 * header length (2 bytes little-endian in 1.0, 4 bytes in 2.0 and 3.0), the
 * header - a Python dict literal such as
 *     {'descr': '<f4', 'fortran_order': False, 'shape': (60000, 28, 28), }
 * padded with spaces and a newline - and then the raw data in C order.
 * Images are uint8 (scaled to [0, 1]) or float32 (taken as is), shaped
 * [N, H, W], [N, C, H, W] or, with layout = "nhwc", [N, H, W, C]; labels are
 * integers of any width, shaped [N]. Both stay mapped, so a dataset larger
 * than memory works. Every header that
 * does not say exactly that is refused with one line naming the file.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dataflow/dataset_impl.h"

#define NPY_MAX_DIMS 8

/* What a header says. */
typedef struct {
    char kind;        /* 'u', 'i', 'f', ... */
    int itemsize;     /* bytes */
    bool big_endian;
    bool fortran;
    int ndim;
    uint64_t shape[NPY_MAX_DIMS];
    size_t data_offset;
} npy_header;

typedef struct {
    const uint8_t *map;
    size_t map_len;
} npy_map;

struct npy_source {
    npy_map images, labels;
    npy_header head, label_head;
    const uint8_t *data; /* images.map + head.data_offset */
    bool nhwc;
    int c, h, w;
};

/* ---- the header's dict literal ---- */

typedef struct {
    const char *p, *end;
} cursor;

static void skip_space(cursor *c)
{
    while (c->p < c->end && (*c->p == ' ' || *c->p == '\t' || *c->p == '\n' || *c->p == '\r'))
        c->p++;
}

static bool eat(cursor *c, char ch)
{
    skip_space(c);
    if (c->p < c->end && *c->p == ch) {
        c->p++;
        return true;
    }
    return false;
}

/* A quoted string (no escapes: numpy never writes any in these keys). */
static bool read_string(cursor *c, char *out, size_t n)
{
    skip_space(c);
    if (c->p >= c->end || (*c->p != '\'' && *c->p != '"'))
        return false;
    char q = *c->p++;
    size_t k = 0;
    while (c->p < c->end && *c->p != q) {
        if (*c->p == '\\' || k + 1 >= n)
            return false;
        out[k++] = *c->p++;
    }
    if (c->p >= c->end)
        return false;
    c->p++;
    out[k] = '\0';
    return true;
}

static bool read_word(cursor *c, const char *word)
{
    skip_space(c);
    size_t n = strlen(word);
    if ((size_t)(c->end - c->p) < n || memcmp(c->p, word, n) != 0)
        return false;
    c->p += n;
    return true;
}

/* (), (5,), (60000, 28, 28) or (60000, 28, 28,) */
static bool read_shape(cursor *c, npy_header *h)
{
    if (!eat(c, '('))
        return false;
    h->ndim = 0;
    for (;;) {
        if (eat(c, ')'))
            return true;
        skip_space(c);
        if (c->p >= c->end || *c->p < '0' || *c->p > '9' || h->ndim == NPY_MAX_DIMS)
            return false;
        uint64_t v = 0;
        while (c->p < c->end && *c->p >= '0' && *c->p <= '9') {
            if (v > (UINT64_MAX - 9) / 10)
                return false;
            v = v * 10 + (uint64_t)(*c->p++ - '0');
        }
        if (c->p < c->end && *c->p == 'L') /* Python 2's long */
            c->p++;
        h->shape[h->ndim++] = v;
        if (!eat(c, ',')) {
            if (!eat(c, ')'))
                return false;
            /* a one-element tuple needs its comma: (5) is the number 5 */
            return h->ndim != 1;
        }
    }
}

/* descr: '<f4', '|u1', '>i8', ... (byte order, kind, size). */
static bool parse_descr(const char *d, npy_header *h)
{
    if (d[0] != '<' && d[0] != '>' && d[0] != '|' && d[0] != '=')
        return false;
    h->big_endian = d[0] == '>';
    h->kind = d[1];
    char *end;
    long size = strtol(d + 2, &end, 10);
    if (end == d + 2 || *end != '\0' || size < 1 || size > 16)
        return false;
    h->itemsize = (int)size;
    return true;
}

/* The format version's preamble: where the header dict starts and how long
 * it is. NULL, or why the file is refused. */
static const char *read_preamble(const uint8_t *b, size_t len, size_t *start, size_t *hlen,
                                 char *why, size_t why_len)
{
    if (len < 10 || memcmp(b, "\x93NUMPY", 6) != 0)
        return "not a .npy file (bad magic)";
    int major = b[6], minor = b[7];
    if (major == 2 || major == 3) {
        if (len < 12)
            return "truncated header";
        *hlen = (size_t)b[8] | (size_t)b[9] << 8 | (size_t)b[10] << 16 | (size_t)b[11] << 24;
        *start = 12;
    } else {
        *hlen = (size_t)b[8] | (size_t)b[9] << 8;
        *start = 10;
    }
    if ((major != 1 && major != 2 && major != 3) || minor != 0) {
        snprintf(why, why_len, "unsupported .npy format version %d.%d (1.0, 2.0 and 3.0 are "
                 "read)", major, minor);
        return why;
    }
    if (*hlen > len - *start) {
        snprintf(why, why_len, "truncated header (%zu bytes announced, %zu present)", *hlen,
                 len - *start);
        return why;
    }
    return NULL;
}

static const char *const npy_syntax =
    "malformed header (expected a dict of 'descr', 'fortran_order' and 'shape')";

/* One key's value of the header dict (seen: the keys read so far, a bit
 * each). NULL, or why the header is refused. */
static const char *read_entry(cursor *c, npy_header *h, unsigned *seen, char *why, size_t why_len)
{
    char key[32], descr[32];
    if (!read_string(c, key, sizeof(key)) || !eat(c, ':'))
        return npy_syntax;
    if (strcmp(key, "descr") == 0 && !(*seen & 1)) {
        if (!read_string(c, descr, sizeof(descr)))
            return "unsupported dtype (a structured or unreadable 'descr')";
        if (!parse_descr(descr, h)) {
            snprintf(why, why_len, "unsupported dtype '%s'", descr);
            return why;
        }
        *seen |= 1;
    } else if (strcmp(key, "fortran_order") == 0 && !(*seen & 2)) {
        if (read_word(c, "True"))
            h->fortran = true;
        else if (!read_word(c, "False"))
            return npy_syntax;
        *seen |= 2;
    } else if (strcmp(key, "shape") == 0 && !(*seen & 4)) {
        if (!read_shape(c, h))
            return npy_syntax;
        *seen |= 4;
    } else {
        snprintf(why, why_len, "unexpected key '%s' in the header", key);
        return why;
    }
    return NULL;
}

/* Fills h from the file's bytes, or sets why. */
static int parse_header(const uint8_t *b, size_t len, npy_header *h, char *why, size_t why_len)
{
    memset(h, 0, sizeof(*h));
    size_t start = 0, hlen = 0;
    const char *bad = read_preamble(b, len, &start, &hlen, why, why_len);
    unsigned seen = 0;
    cursor c = { (const char *)b + start, (const char *)b + start + hlen };
    h->data_offset = start + hlen;
    if (bad == NULL && !eat(&c, '{'))
        bad = npy_syntax;
    while (bad == NULL && !eat(&c, '}')) {
        bad = read_entry(&c, h, &seen, why, why_len);
        if (bad == NULL && !eat(&c, ',')) {
            if (!eat(&c, '}'))
                bad = npy_syntax;
            break;
        }
    }
    skip_space(&c);
    if (bad == NULL && c.p != c.end)
        bad = npy_syntax;
    if (bad == NULL && seen != 7) {
        snprintf(why, why_len, "the header lacks '%s'",
                 !(seen & 1) ? "descr" : !(seen & 2) ? "fortran_order" : "shape");
        bad = why;
    }
    if (bad == NULL && h->fortran)
        bad = "fortran_order is True: save a C-order array (numpy.ascontiguousarray)";
    if (bad != NULL && bad != why)
        snprintf(why, why_len, "%s", bad);
    return bad != NULL ? -1 : 0;
}

/* Maps a whole file read-only and parses its header. */
static int map_file(const char *path, npy_map *m, npy_header *h, tt_err *err)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return err_set(err, TT_ERR_USAGE, "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return err_set(err, TT_ERR_USAGE, "%s: not a regular file", path);
    }
    if (st.st_size == 0) {
        close(fd);
        return err_set(err, TT_ERR_USAGE, "%s: not a .npy file (empty)", path);
    }
    void *p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (p == MAP_FAILED)
        return err_set(err, TT_ERR_RUNTIME, "%s: cannot map: %s", path, strerror(errno));
    m->map = p;
    m->map_len = (size_t)st.st_size;
    char why[200];
    if (parse_header(m->map, m->map_len, h, why, sizeof(why)) != 0)
        return err_set(err, TT_ERR_USAGE, "%s: %s", path, why);
    /* the data must be exactly what the shape says */
    uint64_t count = 1, bytes;
    for (int i = 0; i < h->ndim; i++)
        if (__builtin_mul_overflow(count, h->shape[i], &count))
            return err_set(err, TT_ERR_USAGE, "%s: shape does not match the file size "
                           "(its element count overflows)", path);
    if (__builtin_mul_overflow(count, (uint64_t)h->itemsize, &bytes) ||
        bytes != m->map_len - h->data_offset)
        return err_set(err, TT_ERR_USAGE, "%s: shape does not match the file size (%llu "
                       "elements of %d bytes need %llu data bytes, the file has %zu)", path,
                       (unsigned long long)count, h->itemsize,
                       (unsigned long long)(count * (uint64_t)h->itemsize),
                       m->map_len - h->data_offset);
    return 0;
}

static void unmap(npy_map *m)
{
    if (m->map != NULL)
        munmap((void *)m->map, m->map_len);
    m->map = NULL;
}

static void shape_text(const npy_header *h, char *out, size_t n)
{
    size_t k = (size_t)snprintf(out, n, "(");
    for (int i = 0; i < h->ndim && k < n; i++)
        k += (size_t)snprintf(out + k, n - k, i ? ", %llu" : "%llu",
                              (unsigned long long)h->shape[i]);
    if (k < n)
        snprintf(out + k, n - k, h->ndim == 1 ? ",)" : ")");
}

/* A little- or big-endian integer of 1 to 8 bytes, signed or not. */
static int64_t read_int(const uint8_t *p, const npy_header *h)
{
    uint64_t v = 0;
    for (int k = 0; k < h->itemsize; k++) {
        int b = h->big_endian ? k : h->itemsize - 1 - k;
        v = v << 8 | p[b];
    }
    if (h->kind == 'i' && h->itemsize < 8 && (v >> (8 * h->itemsize - 1)) & 1)
        v |= ~0ULL << (8 * h->itemsize);
    return (int64_t)v;
}

static int map_labels(const char *path, size_t n, struct npy_source *s, tt_err *err)
{
    npy_header *h = &s->label_head;
    if (map_file(path, &s->labels, h, err) != 0)
        return -1;
    char shape[160];
    shape_text(h, shape, sizeof(shape));
    if ((h->kind != 'i' && h->kind != 'u') || h->itemsize > 8 ||
        (h->itemsize & (h->itemsize - 1)) != 0)
        return err_set(err, TT_ERR_USAGE, "%s: unsupported dtype for labels (kind '%c', %d "
                       "bytes; integers are read)", path, h->kind, h->itemsize);
    if (h->ndim != 1)
        return err_set(err, TT_ERR_USAGE, "%s: labels must have shape (N,) (got %s)", path, shape);
    if (h->shape[0] != n)
        return err_set(err, TT_ERR_USAGE, "%s: %llu labels but the images have N = %zu", path,
                       (unsigned long long)h->shape[0], n);
    return 0;
}

int npy_label(const struct dataset *ds, size_t i)
{
    const struct npy_source *s = ds->npy;
    const npy_header *h = &s->label_head;
    int64_t v = read_int(s->labels.map + h->data_offset + i * (size_t)h->itemsize, h);
    /* beyond int32 reads as beyond the classes (an 8-byte unsigned above
     * 2^63 wraps negative: still out of range) */
    if (h->kind == 'u' && h->itemsize == 8 && v < 0)
        return INT32_MAX;
    return v < INT32_MIN ? -1 : v > INT32_MAX ? INT32_MAX : (int)v;
}

int npy_open(const source_cfg *src, struct dataset *ds, tt_err *err)
{
    struct npy_source *s = calloc(1, sizeof(*s));
    if (s == NULL)
        return err_set(err, TT_ERR_RUNTIME, "out of memory");
    ds->npy = s;
    npy_header *h = &s->head;
    if (map_file(src->images, &s->images, h, err) != 0)
        return -1;
    char shape[160];
    shape_text(h, shape, sizeof(shape));
    bool u8 = h->kind == 'u' && h->itemsize == 1;
    bool f32 = h->kind == 'f' && h->itemsize == 4;
    if (!u8 && !f32)
        return err_set(err, TT_ERR_USAGE, "%s: unsupported dtype for images (kind '%c', %d "
                       "bytes; uint8 and float32 are read)", src->images, h->kind, h->itemsize);
    if (h->ndim != 3 && h->ndim != 4)
        return err_set(err, TT_ERR_USAGE, "%s: images must be [N, H, W], [N, C, H, W] or "
                       "[N, H, W, C] (got shape %s)", src->images, shape);
    for (int i = 0; i < h->ndim; i++)
        if (h->shape[i] == 0 || h->shape[i] > (i == 0 ? (1ULL << 40) : 65536ULL))
            return err_set(err, TT_ERR_USAGE, "%s: images of shape %s: every dimension must be "
                           "1 to %s", src->images, shape, i == 0 ? "2^40" : "65536");
    s->nhwc = src->nhwc && h->ndim == 4;
    if (h->ndim == 3) {
        s->c = 1;
        s->h = (int)h->shape[1];
        s->w = (int)h->shape[2];
    } else if (s->nhwc) {
        s->h = (int)h->shape[1];
        s->w = (int)h->shape[2];
        s->c = (int)h->shape[3];
    } else {
        s->c = (int)h->shape[1];
        s->h = (int)h->shape[2];
        s->w = (int)h->shape[3];
    }
    if ((uint64_t)s->c * (uint64_t)s->h * (uint64_t)s->w > (1ULL << 31))
        return err_set(err, TT_ERR_USAGE, "%s: images of shape %s: a sample of more than 2^31 "
                       "values is not supported", src->images, shape);
    s->data = s->images.map + h->data_offset;
    ds->n = (size_t)h->shape[0];
    ds->shape = shape3_make(s->c, s->h, s->w);
    return map_labels(src->labels, ds->n, s, err);
}

int npy_sample(const struct dataset *ds, size_t i, float *x)
{
    const struct npy_source *s = ds->npy;
    size_t n = (size_t)s->c * s->h * s->w, plane = (size_t)s->h * s->w;
    if (s->head.itemsize == 1) {
        const uint8_t *p = s->data + i * n;
        if (!s->nhwc) {
            for (size_t k = 0; k < n; k++)
                x[k] = dataset_byte_value(p[k]);
        } else {
            for (size_t k = 0; k < plane; k++)
                for (int c = 0; c < s->c; c++)
                    x[(size_t)c * plane + k] = dataset_byte_value(p[k * s->c + c]);
        }
    } else {
        const uint8_t *p = s->data + i * n * 4;
        for (size_t k = 0; k < n; k++) {
            size_t src = s->nhwc ? (k % plane) * s->c + k / plane : k;
            const uint8_t *b = p + src * 4;
            uint32_t v = s->head.big_endian
                             ? (uint32_t)b[0] << 24 | (uint32_t)b[1] << 16 | (uint32_t)b[2] << 8 | b[3]
                             : (uint32_t)b[3] << 24 | (uint32_t)b[2] << 16 | (uint32_t)b[1] << 8 | b[0];
            memcpy(&x[k], &v, 4);
        }
    }
    return npy_label(ds, i);
}

void npy_close(struct npy_source *s)
{
    if (s == NULL)
        return;
    unmap(&s->images);
    unmap(&s->labels);
    free(s);
}
