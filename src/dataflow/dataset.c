/* dataset.c - opening a source and reading samples as floats in [0, 1]. */
#include <stdlib.h>

#include "dataflow/dataset_impl.h"

int dataset_open(const source_cfg *src, int limit, dataset_t **out, tt_err *err)
{
    struct dataset *ds = calloc(1, sizeof(*ds));
    if (ds == NULL)
        return err_set(err, TT_ERR_RUNTIME, "out of memory");
    ds->type = src->type;
    int rc;
    switch (src->type) {
    case SOURCE_IDX:
        rc = idx_read(src, ds, err);
        break;
    case SOURCE_CIFAR10:
        rc = cifar10_read(src, ds, err);
        break;
    case SOURCE_FAKE:
        rc = fake_open(src, ds, err);
        break;
    default:
        rc = err_set(err, TT_ERR_USAGE, "dataflow.source: unknown type");
    }
    if (rc != 0) {
        dataset_free(ds);
        return -1;
    }
    if (limit > 0 && (size_t)limit < ds->n)
        ds->n = (size_t)limit;
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

int dataset_classes(const dataset_t *ds)
{
    return ds->classes;
}

int dataset_get(const dataset_t *ds, size_t i, float *x)
{
    if (ds->type == SOURCE_FAKE)
        return fake_sample(ds, i, x);
    size_t n = shape3_size(ds->shape);
    const uint8_t *p = ds->pixels + i * n;
    for (size_t k = 0; k < n; k++)
        x[k] = (float)p[k] / 255.0f; /* as torchvision ToTensor */
    return ds->labels[i];
}

void dataset_free(dataset_t *ds)
{
    if (ds == NULL)
        return;
    free(ds->pixels);
    free(ds->labels);
    free(ds);
}
