/* fuzz_idx.c - the IDX reader (MNIST's format, raw or gzip). Input: one
 * flags byte (bit 0: gzip the images, bit 1: gzip the labels, bits 2-3: the
 * model's classes 0 (no check), 4, 10 or 256, bits 4-7: a `limit`), two
 * bytes (little-endian) for the length L of the label file,
 * then the label file (L bytes, fewer if the input ends) and the image file
 * (the rest). Every sample of an opened dataset is read back. */
#include "tests/fuzz/fuzz_common.h"

#include <zlib.h>

#include "dataflow/dataflow.h"

static void write_maybe_gz(const char *path, const uint8_t *p, size_t n, int gz)
{
    if (!gz) {
        fuzz_write(strrchr(path, '/') + 1, p, n);
        return;
    }
    gzFile f = gzopen(path, "wb");
    if (f == NULL || (n > 0 && gzwrite(f, p, (unsigned)n) != (int)n) || gzclose(f) != Z_OK)
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    int flags;
    size_t l;
    if (!fuzz_head(&data, &size, &flags, &l))
        return 0;
    source_cfg src = { .type = SOURCE_IDX };
    snprintf(src.labels, sizeof(src.labels), "%s/labels.idx", fuzz_dir());
    snprintf(src.images, sizeof(src.images), "%s/images.idx", fuzz_dir());
    write_maybe_gz(src.labels, data, l, flags & 2);
    write_maybe_gz(src.images, data + l, size - l, flags & 1);
    static const int classes[4] = { 0, 4, 10, 256 };
    dataset_t *ds = NULL;
    tt_err err = { 0 };
    int rc = dataset_open(&src, flags >> 4, classes[(flags >> 2) & 3], &ds, &err);
    fuzz_check_error(&err, rc);
    if (rc != 0)
        return 0;
    size_t n = dataset_size(ds);
    float *x = malloc(dataset_max_floats(ds) * sizeof(float) + 1);
    dataset_scratch scratch = { 0 };
    for (size_t i = 0; x != NULL && i < n; i++) {
        shape3 s;
        tt_err rerr = { 0 };
        int y = dataset_read(ds, i, x, &s, &scratch, &rerr);
        if (y < 0 || y > 255 || shape3_size(s) > dataset_max_floats(ds))
            abort(); /* an opened IDX file has every sample */
        fuzz_check_pixels(x, shape3_size(s));
    }
    dataset_scratch_free(&scratch);
    free(x);
    dataset_free(ds);
    return 0;
}
