/* augment.h - per-sample augmentation (SPEC 3): normalize, random_crop, flip. */
#ifndef TT_AUGMENT_H
#define TT_AUGMENT_H

#include "config/job.h"
#include "tensor.h"
#include "util/rng.h"

/* The shape after the augmentations, or -1 when they do not fit the input
 * (a crop larger than the padded image, a mean/std count that is neither 1
 * nor C). */
int augment_output_shape(const augment_cfg *aug, int n_aug, shape3 in, shape3 *out,
                         tt_err *err);

/* Largest per-sample buffer (floats) any stage needs. */
size_t augment_buffer_size(const augment_cfg *aug, int n_aug, shape3 in);

/* Applies the augmentations in order to x (shape in), writing the result back
 * into x (which must hold augment_buffer_size floats); tmp is scratch of the
 * same size. Random choices come from rng, which the caller derives from
 * (seed, pass, sample index). */
void augment_apply(const augment_cfg *aug, int n_aug, rng_t *rng, float *x, shape3 in,
                   float *tmp);

#endif
