/* augment.c - normalize, random_crop (zero padding), horizontal flip. */
#include <string.h>

#include "dataflow/augment.h"

static shape3 crop_shape(const augment_cfg *a, shape3 s)
{
    return shape3_make(s.c, a->size, a->size);
}

int augment_output_shape(const augment_cfg *aug, int n_aug, shape3 in, shape3 *out,
                         tt_err *err)
{
    shape3 s = in;
    for (int i = 0; i < n_aug; i++) {
        const augment_cfg *a = &aug[i];
        if (a->type == AUG_NORMALIZE) {
            if ((a->n_mean != 1 && a->n_mean != s.c) || (a->n_std != 1 && a->n_std != s.c))
                return err_set(err, TT_ERR_USAGE, "dataflow.augment[%d]: normalize has %d mean "
                               "and %d std values for data of %d channel(s) (give 1 or %d)", i,
                               a->n_mean, a->n_std, s.c, s.c);
        } else if (a->type == AUG_RANDOM_CROP) {
            if (a->size > s.h + 2 * a->padding || a->size > s.w + 2 * a->padding)
                return err_set(err, TT_ERR_USAGE, "dataflow.augment[%d]: random_crop size %d "
                               "is larger than the padded %dx%d image", i, a->size,
                               s.h + 2 * a->padding, s.w + 2 * a->padding);
            s = crop_shape(a, s);
        }
    }
    *out = s;
    return 0;
}

size_t augment_buffer_size(const augment_cfg *aug, int n_aug, shape3 in)
{
    shape3 s = in;
    size_t most = shape3_size(s);
    for (int i = 0; i < n_aug; i++) {
        if (aug[i].type == AUG_RANDOM_CROP) {
            s = crop_shape(&aug[i], s);
            if (shape3_size(s) > most)
                most = shape3_size(s);
        }
    }
    return most;
}

static void normalize(const augment_cfg *a, float *x, shape3 s)
{
    size_t plane = (size_t)s.h * s.w;
    for (int c = 0; c < s.c; c++) {
        float mean = a->mean[a->n_mean == 1 ? 0 : c];
        float std = a->std[a->n_std == 1 ? 0 : c];
        float *p = x + (size_t)c * plane;
        for (size_t i = 0; i < plane; i++)
            p[i] = (p[i] - mean) / std;
    }
}

/* Pads by `padding` zeros on every side, then takes a size x size window at a
 * random offset: out[y][x] = in[y + oy - padding][x + ox - padding], or 0. */
static shape3 random_crop(const augment_cfg *a, rng_t *rng, float *x, shape3 s, float *tmp)
{
    int p = a->padding, S = a->size;
    int oy = (int)rng_below(rng, (uint32_t)(s.h + 2 * p - S + 1));
    int ox = (int)rng_below(rng, (uint32_t)(s.w + 2 * p - S + 1));
    for (int c = 0; c < s.c; c++) {
        const float *in = x + (size_t)c * s.h * s.w;
        float *out = tmp + (size_t)c * S * S;
        for (int y = 0; y < S; y++) {
            int sy = y + oy - p;
            for (int xx = 0; xx < S; xx++) {
                int sx = xx + ox - p;
                out[y * S + xx] = (sy >= 0 && sy < s.h && sx >= 0 && sx < s.w)
                                      ? in[sy * s.w + sx]
                                      : 0.0f;
            }
        }
    }
    shape3 o = crop_shape(a, s);
    memcpy(x, tmp, shape3_size(o) * sizeof(float));
    return o;
}

static void flip(rng_t *rng, float *x, shape3 s)
{
    if (rng_uniform(rng) >= 0.5f)
        return;
    for (int c = 0; c < s.c; c++)
        for (int y = 0; y < s.h; y++) {
            float *row = x + ((size_t)c * s.h + y) * s.w;
            for (int i = 0, j = s.w - 1; i < j; i++, j--) {
                float t = row[i];
                row[i] = row[j];
                row[j] = t;
            }
        }
}

void augment_apply(const augment_cfg *aug, int n_aug, rng_t *rng, float *x, shape3 in,
                   float *tmp)
{
    shape3 s = in;
    for (int i = 0; i < n_aug; i++) {
        switch (aug[i].type) {
        case AUG_NORMALIZE:
            normalize(&aug[i], x, s);
            break;
        case AUG_RANDOM_CROP:
            s = random_crop(&aug[i], rng, x, s, tmp);
            break;
        case AUG_FLIP:
            flip(rng, x, s);
            break;
        }
    }
}
