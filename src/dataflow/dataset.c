/* dataset.c - opening a source, the label rule, and reading samples as floats
 * in [0, 1]. */
#include <stdlib.h>
#include <string.h>

#include "dataflow/dataset_impl.h"
#include "dataflow/pixels.h"

/* towertrain.cfg(5), DATAFLOW: every label is in [0, classes), the model's; a source has no class
 * count of its own. The message names the file, the sample and the value. */
static int check_labels(const struct dataset *ds, const source_cfg *src, int classes,
                        tt_err *err)
{
    if (classes <= 0)
        return 0;
    if (ds->type == SOURCE_FAKE) {
        if (ds->classes > classes)
            return err_set(err, TT_ERR_USAGE, "dataflow.source: fake data with classes = %d "
                           "has labels up to %d, but the model has classes = %d", ds->classes,
                           ds->classes - 1, classes);
        return 0;
    }
    for (size_t i = 0; i < ds->n; i++) {
        int32_t y = ds->type == SOURCE_NPY ? npy_label(ds, i) : ds->labels[i];
        if (y >= 0 && y < classes)
            continue;
        const char *why = y < 0 ? "<" : ">=";
        int bound = y < 0 ? 0 : classes;
        const char *what = y < 0 ? "" : "classes ";
        if (ds->type == SOURCE_CIFAR10) {
            int f = 0;
            while (f + 1 < ds->n_files && ds->file_first[f + 1] <= i)
                f++;
            return err_set(err, TT_ERR_USAGE, "%s: sample %zu: label %d %s %s%d",
                           ds->files[f], i - ds->file_first[f], y, why, what, bound);
        }
        if (ds->type == SOURCE_IMAGE_FOLDER) {
            char path[4400];
            image_folder_path(ds, i, path, sizeof(path));
            return err_set(err, TT_ERR_USAGE, "%s: sample %zu: label %d %s %s%d (its class "
                           "folder is number %d in byte order of %s)", path, i, y, why, what,
                           bound, y + 1, src->root);
        }
        return err_set(err, TT_ERR_USAGE, "%s: sample %zu: label %d %s %s%d", ds->label_file, i,
                       y, why, what, bound);
    }
    return 0;
}

int dataset_open(const source_cfg *src, int limit, int classes, dataset_t **out, tt_err *err)
{
    struct dataset *ds = calloc(1, sizeof(*ds));
    if (ds == NULL)
        return err_set(err, TT_ERR_RUNTIME, "out of memory");
    ds->type = src->type;
    ds->uniform = true;
    int rc;
    switch (src->type) {
    case SOURCE_IDX:
        rc = idx_read(src, limit, ds, err);
        ds->label_file = src->labels;
        break;
    case SOURCE_CIFAR10:
        rc = cifar10_read(src, limit, ds, err);
        break;
    case SOURCE_FAKE:
        rc = fake_open(src, ds, err);
        break;
    case SOURCE_NPY:
        rc = npy_open(src, ds, err);
        ds->label_file = src->labels;
        break;
    case SOURCE_IMAGE_FOLDER:
        rc = image_folder_open(src, limit, ds, err);
        break;
    default:
        rc = err_set(err, TT_ERR_USAGE, "dataflow.source: unknown type");
    }
    if (rc == 0 && limit > 0 && (size_t)limit < ds->n)
        ds->n = (size_t)limit;
    /* the dataflow draws and orders samples by 32-bit index */
    if (rc == 0 && ds->n > UINT32_MAX)
        rc = err_set(err, TT_ERR_USAGE, "dataflow.source: %zu samples; at most %u are read "
                     "(set dataflow.limit)", ds->n, UINT32_MAX);
    if (rc == 0 && ds->max_floats == 0)
        ds->max_floats = shape3_size(ds->shape);
    if (rc != 0 || check_labels(ds, src, classes, err) != 0) {
        dataset_free(ds);
        return -1;
    }
    *out = ds;
    return 0;
}

size_t dataset_size(const dataset_t *ds)
{
    return ds->n;
}

shape3 dataset_shape(const dataset_t *ds)
{
    return ds->shape;
}

shape3 dataset_sample_shape(const dataset_t *ds, size_t i)
{
    return ds->uniform ? ds->shape : image_folder_shape(ds, i);
}

bool dataset_uniform(const dataset_t *ds)
{
    return ds->uniform;
}

size_t dataset_max_floats(const dataset_t *ds)
{
    return ds->max_floats;
}

const char *dataset_class_name(const dataset_t *ds, int k)
{
    return ds->type == SOURCE_IMAGE_FOLDER ? image_folder_class(ds, k) : NULL;
}

int dataset_read(const dataset_t *ds, size_t i, float *x, shape3 *shape, dataset_scratch *s,
                 tt_err *err)
{
    *shape = ds->shape;
    switch (ds->type) {
    case SOURCE_FAKE:
        return fake_sample(ds, i, x);
    case SOURCE_NPY:
        return npy_sample(ds, i, x);
    case SOURCE_IMAGE_FOLDER:
        return image_folder_sample(ds, i, x, shape, s, err);
    default:
        break;
    }
    size_t n = shape3_size(ds->shape);
    pixels_to_float(ds->pixels + i * n, n, 0.0f, 1.0f, x);
    return ds->labels[i];
}

const uint8_t *dataset_bytes(const dataset_t *ds, size_t i, int *label)
{
    if (ds->pixels == NULL)
        return NULL;
    *label = ds->labels[i];
    return ds->pixels + i * shape3_size(ds->shape);
}

/* The samples are random rows of a file's worth of bytes (47 MB for
 * Fashion-MNIST): each row's first loads missed the cache, and that stall
 * was two thirds of the conversion's time. */
void dataset_prefetch(const dataset_t *ds, size_t i)
{
    if (ds->pixels == NULL || i >= ds->n)
        return;
    size_t n = shape3_size(ds->shape);
    const uint8_t *p = ds->pixels + i * n;
    for (size_t k = 0; k < n; k += 64)
        __builtin_prefetch(p + k);
    __builtin_prefetch(p + n - 1);
}

void dataset_free(dataset_t *ds)
{
    if (ds == NULL)
        return;
    free(ds->pixels);
    free(ds->labels);
    free(ds->file_first);
    image_folder_close(ds->folder);
    npy_close(ds->npy);
    free(ds);
}
