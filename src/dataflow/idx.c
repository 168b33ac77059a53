/* idx.c - the IDX format of MNIST and Fashion-MNIST, raw or gzip-compressed
 * (zlib's gzread reads both). Images: magic 0x00000803, then N, H, W as
 * big-endian uint32, then N*H*W bytes. Labels: magic 0x00000801, N, then N bytes.
 * IDX has no class count: any label byte is read, and dataset_open checks it
 * against the model's classes. With dataflow.limit only the first records
 * are inflated (the rest of the file is neither read nor checked): a job on
 * 512 of Fashion-MNIST's 60,000 images inflates 0.4 MB, not 47 MB. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <zlib.h>

#include "dataflow/dataset_impl.h"

static uint32_t be32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* The bytes of an IDX file's header (`header` bytes: magic, count, then
 * the dimensions from byte 8) and its first `limit` records, each the
 * dimensions' product; SIZE_MAX when that does not fit. */
static size_t limit_bytes(const uint8_t *h, size_t header, int limit)
{
    size_t record = 1, bytes;
    for (size_t d = 8; d < header; d += 4)
        record *= be32(h + d);
    if (__builtin_mul_overflow(record, (size_t)limit, &bytes) || bytes >= SIZE_MAX - header)
        return SIZE_MAX;
    return header + bytes;
}

/* Reads an IDX file (possibly gzip-compressed) into memory: all of it, or
 * with a limit (> 0) its `header` bytes and then only the first `limit`
 * records they describe (or the whole file when it is shorter). */
static int read_gz(const char *path, size_t header, int limit, uint8_t **data, size_t *len,
                   tt_err *err)
{
    gzFile f = gzopen(path, "rb");
    if (f == NULL)
        return err_set(err, TT_ERR_USAGE, "%s: cannot open: %s", path,
                       errno ? strerror(errno) : "out of memory");
    gzbuffer(f, 1 << 17);
    size_t cap = 1 << 20, n = 0;
    size_t most = limit > 0 ? header : SIZE_MAX; /* the header first, then the records */
    bool sized = limit <= 0;
    uint8_t *buf = malloc(cap);
    for (;;) {
        if (buf == NULL) {
            gzclose(f);
            return err_set(err, TT_ERR_RUNTIME, "%s: out of memory", path);
        }
        size_t room = (cap < most ? cap : most) - n;
        int want = (int)(room > (1u << 30) ? (1u << 30) : room);
        int got = want > 0 ? gzread(f, buf + n, (unsigned)want) : 0;
        if (got < 0) {
            int code;
            const char *msg = gzerror(f, &code);
            err_set(err, TT_ERR_USAGE, "%s: corrupt or truncated (%s)", path, msg);
            free(buf);
            gzclose(f);
            return -1;
        }
        n += (size_t)got;
        if (got < want)
            break;
        if (n == most && !sized) {
            most = limit_bytes(buf, header, limit);
            sized = true;
        }
        if (n == most)
            break;
        if (n == cap) {
            uint8_t *bigger = realloc(buf, cap * 2);
            if (bigger == NULL)
                free(buf);
            buf = bigger;
            cap *= 2;
        }
    }
    /* A gzip stream cut short reads as a clean end: gzclose_r reports it. */
    int rc = gzclose(f);
    if (rc != Z_OK && rc != Z_BUF_ERROR) {
        free(buf);
        return err_set(err, TT_ERR_USAGE, "%s: corrupt gzip data", path);
    }
    if (rc == Z_BUF_ERROR) {
        free(buf);
        return err_set(err, TT_ERR_USAGE, "%s: truncated gzip data", path);
    }
    *data = buf;
    *len = n;
    return 0;
}

int idx_read(const source_cfg *src, int limit, struct dataset *ds, tt_err *err)
{
    uint8_t *img = NULL, *lab = NULL;
    size_t img_len = 0, lab_len = 0;
    if (read_gz(src->images, 16, limit, &img, &img_len, err) != 0)
        return -1;
    if (read_gz(src->labels, 8, limit, &lab, &lab_len, err) != 0) {
        free(img);
        return -1;
    }
    int rc = -1;
    if (img_len < 16 || be32(img) != 0x00000803) {
        err_set(err, TT_ERR_USAGE, "%s: not an IDX image file (magic 0x%08x, want 0x00000803)",
                src->images, img_len >= 4 ? be32(img) : 0);
        goto out;
    }
    if (lab_len < 8 || be32(lab) != 0x00000801) {
        err_set(err, TT_ERR_USAGE, "%s: not an IDX label file (magic 0x%08x, want 0x00000801)",
                src->labels, lab_len >= 4 ? be32(lab) : 0);
        goto out;
    }
    uint32_t n = be32(img + 4), h = be32(img + 8), w = be32(img + 12);
    uint32_t nl = be32(lab + 4);
    if (n == 0 || h == 0 || w == 0 || h > 65536 || w > 65536) {
        err_set(err, TT_ERR_USAGE, "%s: bad IDX dimensions %ux%ux%u", src->images, n, h, w);
        goto out;
    }
    if (nl != n) {
        err_set(err, TT_ERR_USAGE, "%s has %u labels but %s has %u images", src->labels, nl,
                src->images, n);
        goto out;
    }
    /* the records read: the first `limit`, else all the header counts */
    if (limit > 0 && (uint32_t)limit < n)
        n = (uint32_t)limit;
    const char *of = n < nl ? "the first " : "";
    size_t bytes;
    if (__builtin_mul_overflow((size_t)n, (size_t)h * w, &bytes) || img_len - 16 < bytes) {
        err_set(err, TT_ERR_USAGE, "%s: truncated: %s%u images of %ux%u need %zu bytes but "
                "%zu bytes follow the header", src->images, of, n, h, w, (size_t)n * h * w,
                img_len - 16);
        goto out;
    }
    if (lab_len - 8 < n) {
        err_set(err, TT_ERR_USAGE, "%s: truncated: %s%u labels need %u bytes but %zu bytes "
                "follow the header", src->labels, of, n, n, lab_len - 8);
        goto out;
    }
    ds->n = n;
    ds->shape = shape3_make(1, (int)h, (int)w);
    /* IDX has no class count: labels are checked against the model's */
    if ((ds->labels = malloc((size_t)n * sizeof(int32_t))) == NULL) {
        err_set(err, TT_ERR_RUNTIME, "out of memory for %u labels", n);
        goto out;
    }
    for (uint32_t i = 0; i < n; i++)
        ds->labels[i] = lab[8 + i];
    memmove(img, img + 16, (size_t)n * h * w);
    ds->pixels = realloc(img, (size_t)n * h * w);
    if (ds->pixels == NULL)
        ds->pixels = img;
    img = NULL;
    rc = 0;
out:
    free(img);
    free(lab);
    return rc;
}
