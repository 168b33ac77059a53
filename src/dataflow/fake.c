/* fake.c - random data for benchmarks: sample i is a pure function of i, made on
 * the fly, so a fake dataset of any size costs no memory. */
#include "dataflow/dataset_impl.h"
#include "util/rng.h"

int fake_open(const source_cfg *src, struct dataset *ds, tt_err *err)
{
    if (src->size < 1 || src->classes < 1)
        return err_set(err, TT_ERR_USAGE, "dataflow.source: fake needs size >= 1 and classes >= 1");
    ds->n = (size_t)src->size;
    if (src->shape_rank == 1)
        ds->shape = shape3_make(src->shape[0], 1, 1);
    else
        ds->shape = shape3_make(src->shape[0], src->shape[1], src->shape[2]);
    ds->classes = src->classes;
    return 0;
}

int fake_sample(const struct dataset *ds, size_t i, float *x)
{
    rng_t rng = rng_make(0xfa4eda7aULL, i, 0);
    size_t n = shape3_size(ds->shape);
    for (size_t k = 0; k < n; k++)
        x[k] = rng_uniform(&rng);
    return (int)rng_below(&rng, (uint32_t)ds->classes);
}
