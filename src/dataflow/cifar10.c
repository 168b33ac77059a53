/* cifar10.c - the CIFAR-10 binary format: records of 1 label byte and 3072
 * pixel bytes (3 x 32 x 32, channel-major), several files concatenated.
 * Every file is checked (it opens, it is whole records); with
 * dataflow.limit only the first `limit` records are read and held.
 * Labels are checked against the model's classes by dataset_open, which names
 * the file and the record (a source imposes no class count of its own). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "dataflow/dataset_impl.h"

#define CIFAR_PIXELS 3072
#define CIFAR_RECORD (1 + CIFAR_PIXELS)
#define CIFAR_URL "https://www.cs.toronto.edu/~kriz/cifar-10-binary.tar.gz"

int cifar10_read(const source_cfg *src, int limit, struct dataset *ds, tt_err *err)
{
    size_t total = 0;
    long sizes[256];
    if (src->n_files < 1 || src->n_files > 256)
        return err_set(err, TT_ERR_USAGE, "dataflow.source.files: 1 to 256 files");
    for (int i = 0; i < src->n_files; i++) {
        FILE *f = fopen(src->files[i], "rb");
        if (f == NULL && errno == ENOENT)
            return err_set(err, TT_ERR_USAGE, "%s: no such file: get the CIFAR-10 binary version "
                           "from %s and unpack it so that this path exists", src->files[i],
                           CIFAR_URL);
        if (f == NULL)
            return err_set(err, TT_ERR_USAGE, "%s: cannot open: %s", src->files[i],
                           strerror(errno));
        struct stat st;
        bool regular = fstat(fileno(f), &st) == 0 && S_ISREG(st.st_mode);
        fclose(f);
        if (!regular)
            return err_set(err, TT_ERR_USAGE, "%s: not a regular file", src->files[i]);
        sizes[i] = (long)st.st_size;
        if (sizes[i] <= 0 || sizes[i] % CIFAR_RECORD != 0)
            return err_set(err, TT_ERR_USAGE, "%s: %ld bytes is not a whole number of CIFAR-10 "
                           "records of %d bytes", src->files[i], sizes[i], CIFAR_RECORD);
        total += (size_t)sizes[i] / CIFAR_RECORD;
    }
    if (limit > 0 && (size_t)limit < total)
        total = (size_t)limit;
    ds->pixels = malloc(total * CIFAR_PIXELS);
    ds->labels = malloc(total * sizeof(int32_t));
    ds->file_first = malloc(((size_t)src->n_files + 1) * sizeof(size_t));
    if (ds->pixels == NULL || ds->labels == NULL || ds->file_first == NULL)
        return err_set(err, TT_ERR_RUNTIME, "out of memory for %zu CIFAR-10 images", total);
    size_t k = 0;
    uint8_t rec[CIFAR_RECORD];
    for (int i = 0; i < src->n_files; i++) {
        ds->file_first[i] = k;
        if (k == total) /* the limit's records are read */
            continue;
        FILE *f = fopen(src->files[i], "rb");
        if (f == NULL)
            return err_set(err, TT_ERR_USAGE, "%s: cannot open: %s", src->files[i],
                           strerror(errno));
        for (long r = 0; r < sizes[i] / CIFAR_RECORD && k < total; r++, k++) {
            if (fread(rec, 1, CIFAR_RECORD, f) != CIFAR_RECORD) {
                fclose(f);
                return err_set(err, TT_ERR_USAGE, "%s: truncated", src->files[i]);
            }
            ds->labels[k] = rec[0];
            memcpy(ds->pixels + k * CIFAR_PIXELS, rec + 1, CIFAR_PIXELS);
        }
        fclose(f);
    }
    ds->file_first[src->n_files] = k;
    ds->files = src->files;
    ds->n_files = src->n_files;
    ds->n = total;
    ds->shape = shape3_make(3, 32, 32);
    return 0;
}
