/* fuzz_cifar10.c - the CIFAR-10 binary reader. Input: one byte n (its low
 * 7 bits m: 1 + m % 3 files, dataflow.limit m / 3 (0: all); bit 7: the
 * model's classes are 10, else unchecked), then the files one after the other, each but the last preceded by
 * its length (3 bytes, little-endian; cut at the input's end). Every sample of
 * an opened dataset is read back. */
#include "tests/fuzz/fuzz_common.h"

#include "dataflow/dataflow.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    int n_files = 1 + (data[0] & 0x7f) % 3;
    int classes = data[0] & 0x80 ? 10 : 0, limit = (data[0] & 0x7f) / 3;
    data++;
    size--;
    char names[3][128], *files[3];
    for (int i = 0; i < n_files; i++) {
        size_t len = size;
        if (i + 1 < n_files) {
            if (size < 3)
                return 0;
            len = (size_t)data[0] | (size_t)data[1] << 8 | (size_t)data[2] << 16;
            data += 3;
            size -= 3;
            if (len > size)
                len = size;
        }
        char name[32];
        snprintf(name, sizeof(name), "data_batch_%d.bin", i + 1);
        snprintf(names[i], sizeof(names[i]), "%s", fuzz_write(name, data, len));
        files[i] = names[i];
        data += len;
        size -= len;
    }
    source_cfg src = { .type = SOURCE_CIFAR10, .files = files, .n_files = n_files };
    dataset_t *ds = NULL;
    tt_err err = { 0 };
    int rc = dataset_open(&src, limit, classes, &ds, &err);
    fuzz_check_error(&err, rc);
    if (rc != 0)
        return 0;
    shape3 s = dataset_shape(ds);
    if (s.c != 3 || s.h != 32 || s.w != 32 || dataset_max_floats(ds) != 3 * 32 * 32 ||
        (limit > 0 && dataset_size(ds) > (size_t)limit))
        abort();
    float x[3 * 32 * 32];
    dataset_scratch scratch = { 0 };
    for (size_t i = 0; i < dataset_size(ds); i++) {
        tt_err rerr = { 0 };
        int y = dataset_read(ds, i, x, &s, &scratch, &rerr);
        if (y < 0 || y > 255 || (classes > 0 && y >= classes))
            abort(); /* labels are bytes, below the model's classes when checked */
        fuzz_check_pixels(x, 3 * 32 * 32);
    }
    dataset_scratch_free(&scratch);
    dataset_free(ds);
    return 0;
}
