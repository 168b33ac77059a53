/* dataset_impl.h - the in-memory dataset shared by the source readers. */
#ifndef TT_DATASET_IMPL_H
#define TT_DATASET_IMPL_H

#include <stdint.h>

#include "dataflow/dataflow.h"

struct dataset {
    source_type type;
    size_t n;          /* samples */
    shape3 shape;      /* per sample */
    int classes;
    uint8_t *pixels;   /* [n, C, H, W] bytes (idx, cifar10); NULL for fake */
    uint8_t *labels;   /* [n] */
};

/* Readers fill ds (pixels, labels, n, shape, classes) or return -1. */
int idx_read(const source_cfg *src, struct dataset *ds, tt_err *err);
int cifar10_read(const source_cfg *src, struct dataset *ds, tt_err *err);
int fake_open(const source_cfg *src, struct dataset *ds, tt_err *err);
int fake_sample(const struct dataset *ds, size_t i, float *x);

#endif
