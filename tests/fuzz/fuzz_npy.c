/* fuzz_npy.c - the .npy reader (src/dataflow/npy.c: its header parser, the
 * size and dtype checks, and the sample reads). Input: one flags byte (bit 0:
 * layout = "nhwc", bits 2-3: the model's classes 0 (no check), 4, 10 or 256,
 * bits 4-7: a `limit`), two bytes (little-endian) for the length L of the
 * label file, then the label file (L bytes, fewer if the input ends) and the
 * image file (the rest). Every sample of an opened dataset is read back. */
#include "tests/fuzz/fuzz_common.h"

#include "dataflow/dataflow.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    int flags;
    size_t l;
    if (!fuzz_head(&data, &size, &flags, &l))
        return 0;
    source_cfg src = { .type = SOURCE_NPY, .nhwc = flags & 1 };
    snprintf(src.labels, sizeof(src.labels), "%s", fuzz_write("labels.npy", data, l));
    snprintf(src.images, sizeof(src.images), "%s", fuzz_write("images.npy", data + l, size - l));
    static const int classes[4] = { 0, 4, 10, 256 };
    int k = classes[(flags >> 2) & 3];
    dataset_t *ds = NULL;
    tt_err err = { 0 };
    int rc = dataset_open(&src, flags >> 4, k, &ds, &err);
    fuzz_check_error(&err, rc);
    if (rc != 0)
        return 0;
    size_t n = dataset_size(ds);
    shape3 want = dataset_shape(ds);
    /* the data must be in the file: a sample is at most the file's bytes */
    if (n == 0 || shape3_size(want) == 0 || shape3_size(want) > size - l)
        abort();
    float *x = malloc(dataset_max_floats(ds) * sizeof(float) + 1);
    dataset_scratch scratch = { 0 };
    for (size_t i = 0; x != NULL && i < n; i++) {
        shape3 s;
        tt_err rerr = { 0 };
        int y = dataset_read(ds, i, x, &s, &scratch, &rerr);
        /* an opened file has every sample; with classes, each label was
         * checked at open (without, a negative label reads as itself) */
        if ((k > 0 && (y < 0 || y >= k)) || shape3_size(s) != shape3_size(want))
            abort();
    }
    dataset_scratch_free(&scratch);
    free(x);
    dataset_free(ds);
    return 0;
}
