/* augment.h - per-sample augmentation (towertrain.cfg(5), DATAFLOW): normalize, random_crop, flip,
 * and torchvision's resize, center_crop, random_resized_crop, color_jitter.
 *
 * A sample is C x H x W floats (pixels in [0, 1] before normalize). Samples of
 * an image folder may differ in size; resize, center_crop, random_resized_crop
 * and random_crop give every sample the same size from there on. */
#ifndef TT_AUGMENT_H
#define TT_AUGMENT_H

#include "config/job.h"
#include "tensor.h"
#include "util/rng.h"

/* The shape after the augmentations for an input of shape `in`, or -1 when
 * they do not fit it (a random_crop larger than the padded image, a mean/std
 * count that is neither 1 nor C, color_jitter on other than 1 or 3 channels). */
int augment_output_shape(const augment_cfg *aug, int n_aug, shape3 in, shape3 *out,
                         tt_err *err);

/* Largest per-sample buffer (floats) any stage needs for an input of shape in. */
size_t augment_buffer_size(const augment_cfg *aug, int n_aug, shape3 in);

/* Applies the augmentations in order to x (shape in), writing the result back
 * into x; x and tmp must each hold augment_buffer_size(in) floats. Random
 * choices come from rng, which the caller derives from (seed, pass, sample
 * index). */
/* A normalize's mean and std for channel c (one value may serve them all);
 * it computes (x - mean) / std in float32, as torchvision's Normalize. */
void augment_normalize_params(const augment_cfg *a, int c, float *mean, float *std);

void augment_apply(const augment_cfg *aug, int n_aug, rng_t *rng, float *x, shape3 in,
                   float *tmp);

/* The deterministic counterpart of a training augmentation, for evaluation:
 * random_crop becomes center_crop of its size, random_resized_crop becomes
 * resize + center_crop of its size, flip and color_jitter are left out.
 * *out is malloc'd (at most 2 * n_aug entries). */
int augment_for_eval(const augment_cfg *aug, int n_aug, augment_cfg **out, int *n_out);

/* ---- the pieces, for tests against torchvision ---- */

/* torchvision's resize output size for `size` = the shorter side. */
void augment_resize_shape(int h, int w, int size, int *oh, int *ow);

/* Bilinear resampling of x (shape s) to oh x ow as torchvision's
 * F.resize(antialias=True) (PIL's filter: a triangle widened by the scale when
 * shrinking), result in x; tmp as for augment_apply. */
void augment_resample(float *x, shape3 s, int oh, int ow, float *tmp);

/* RandomResizedCrop.get_params: ten tries, then the central crop. */
void augment_rrc_params(rng_t *rng, int h, int w, const double scale[2], const double ratio[2],
                        int *top, int *left, int *ch, int *cw);

/* ColorJitter with its draws made: order[] is a permutation of 0 (brightness),
 * 1 (contrast), 2 (saturation); factor[k] < 0 leaves k out. */
void augment_color_jitter_with(float *x, shape3 s, const int order[3], const double factor[3]);

/* ColorJitter's draws: the order and each factor, uniform in
 * [max(0, 1 - v), 1 + v] (-1 where v = 0). */
void augment_color_jitter_params(rng_t *rng, const augment_cfg *a, int order[3],
                                 double factor[3]);

#endif
