/* augment.c - normalize, random_crop (zero padding), horizontal flip, and
 * torchvision's resize, center_crop, random_resized_crop and color_jitter on
 * float tensors in [0, 1] (torchvision 0.14's functional_tensor semantics;
 * resizing with antialias = True, which is what PIL images get). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dataflow/augment.h"

/* ---- shapes ---- */

void augment_resize_shape(int h, int w, int size, int *oh, int *ow)
{
    /* torchvision's _compute_resized_output_size: the shorter side becomes
     * size, the longer int(size * long / short) */
    int64_t sh = w <= h ? w : h, lo = w <= h ? h : w;
    int64_t nl = (int64_t)((double)((int64_t)size * lo) / (double)sh);
    *ow = w <= h ? size : (int)nl;
    *oh = w <= h ? (int)nl : size;
}

static shape3 stage_shape(const augment_cfg *a, shape3 s)
{
    switch (a->type) {
    case AUG_RANDOM_CROP:
    case AUG_CENTER_CROP:
    case AUG_RANDOM_RESIZED_CROP:
        return shape3_make(s.c, a->size, a->size);
    case AUG_RESIZE: {
        int oh, ow;
        augment_resize_shape(s.h, s.w, a->size, &oh, &ow);
        return shape3_make(s.c, oh, ow);
    }
    default:
        return s;
    }
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
        } else if (a->type == AUG_COLOR_JITTER) {
            if (s.c != 1 && s.c != 3)
                return err_set(err, TT_ERR_USAGE, "dataflow.augment[%d]: color_jitter works on "
                               "1 or 3 channels (the data has %d)", i, s.c);
        } else if (a->type == AUG_RANDOM_RESIZED_CROP) {
            /* the fallback crop (when ten draws miss) spans the whole side
             * along one axis and the ratio's bound along the other: it must
             * keep a pixel (torchvision raises on the empty crop) */
            double rmin = fmin(a->ratio[0], a->ratio[1]), rmax = fmax(a->ratio[0], a->ratio[1]);
            if (nearbyint(s.w / rmin) < 1 || nearbyint(s.h * rmax) < 1)
                return err_set(err, TT_ERR_USAGE, "dataflow.augment[%d]: random_resized_crop "
                               "ratio [%g, %g] on a %dx%d image can leave an empty crop (the "
                               "smaller bound must be at most 2W = %d, the larger at least "
                               "1/(2H) = %.3g)", i, a->ratio[0], a->ratio[1], s.h, s.w,
                               2 * s.w, 0.5 / s.h);
        } else if (a->type == AUG_RESIZE) {
            int oh, ow;
            augment_resize_shape(s.h, s.w, a->size, &oh, &ow);
            if (oh < 1 || ow < 1 || oh > 65536 || ow > 65536 ||
                (uint64_t)oh * (uint64_t)ow * (uint64_t)s.c > (1ULL << 31))
                return err_set(err, TT_ERR_USAGE, "dataflow.augment[%d]: resize of a %dx%d "
                               "image to a shorter side of %d gives %dx%d", i, s.h, s.w,
                               a->size, oh, ow);
        }
        s = stage_shape(a, s);
    }
    *out = s;
    return 0;
}

size_t augment_buffer_size(const augment_cfg *aug, int n_aug, shape3 in)
{
    shape3 s = in;
    size_t most = shape3_size(s);
    for (int i = 0; i < n_aug; i++) {
        shape3 o = stage_shape(&aug[i], s);
        size_t need = shape3_size(o);
        if (aug[i].type == AUG_RESIZE) /* the horizontal pass: C x H x out W */
            need = need > (size_t)s.c * s.h * o.w ? need : (size_t)s.c * s.h * o.w;
        if (aug[i].type == AUG_RANDOM_RESIZED_CROP) /* the crop's rows at out W */
            need = need > (size_t)s.c * s.h * o.w ? need : (size_t)s.c * s.h * o.w;
        most = need > most ? need : most;
        s = o;
    }
    return most;
}

/* ---- normalize, random_crop, flip ---- */

void augment_normalize_params(const augment_cfg *a, int c, float *mean, float *std)
{
    *mean = a->mean[a->n_mean == 1 ? 0 : c];
    *std = a->std[a->n_std == 1 ? 0 : c];
}

static void normalize(const augment_cfg *a, float *x, shape3 s)
{
    size_t plane = (size_t)s.h * s.w;
    for (int c = 0; c < s.c; c++) {
        float mean, std;
        augment_normalize_params(a, c, &mean, &std);
        float *p = x + (size_t)c * plane;
        for (size_t i = 0; i < plane; i++)
            p[i] = (p[i] - mean) / std;
    }
}

/* out (S x S per channel) = in shifted by (oy, ox), zeros outside. */
static void window(const float *x, shape3 s, int oy, int ox, int S, float *out)
{
    for (int c = 0; c < s.c; c++) {
        const float *in = x + (size_t)c * s.h * s.w;
        float *o = out + (size_t)c * S * S;
        for (int y = 0; y < S; y++) {
            int sy = y + oy;
            for (int xx = 0; xx < S; xx++) {
                int sx = xx + ox;
                o[y * S + xx] = (sy >= 0 && sy < s.h && sx >= 0 && sx < s.w) ? in[sy * s.w + sx]
                                                                              : 0.0f;
            }
        }
    }
}

/* Pads by `padding` zeros on every side, then takes a size x size window at a
 * random offset: out[y][x] = in[y + oy - padding][x + ox - padding], or 0. */
static shape3 random_crop(const augment_cfg *a, rng_t *rng, float *x, shape3 s, float *tmp)
{
    int p = a->padding, S = a->size;
    int oy = (int)rng_below(rng, (uint32_t)(s.h + 2 * p - S + 1));
    int ox = (int)rng_below(rng, (uint32_t)(s.w + 2 * p - S + 1));
    window(x, s, oy - p, ox - p, S, tmp);
    shape3 o = shape3_make(s.c, S, S);
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

/* ---- center_crop ---- */

/* Python's round(d / 2.0) for an integer d >= 0: halves go to the even side. */
static int half_round_even(int d)
{
    int q = d / 2;
    return (d & 1) && (q & 1) ? q + 1 : q;
}

/* torchvision's F.center_crop: pads with zeros ((S - w) // 2 left and
 * (S - w + 1) // 2 right, the same vertically) when the image is smaller,
 * then crops at round((H - S) / 2), round((W - S) / 2). */
static shape3 center_crop(int S, float *x, shape3 s, float *tmp)
{
    int pl = S > s.w ? (S - s.w) / 2 : 0, pr = S > s.w ? (S - s.w + 1) / 2 : 0;
    int pt = S > s.h ? (S - s.h) / 2 : 0, pb = S > s.h ? (S - s.h + 1) / 2 : 0;
    int ph = s.h + pt + pb, pw = s.w + pl + pr;
    int top = half_round_even(ph - S), left = half_round_even(pw - S);
    window(x, s, top - pt, left - pl, S, tmp);
    shape3 o = shape3_make(s.c, S, S);
    memcpy(x, tmp, shape3_size(o) * sizeof(float));
    return o;
}

/* ---- resampling ---- */

#define LOCAL_WEIGHTS 1024

/* PyTorch's _compute_weights_aa for bilinear (PIL's ImagingResample): output
 * index i of out samples over in; the triangle filter is widened by the scale
 * when shrinking. Fills w[0 .. *size) (normalised, at most cap) and *first. */
static void aa_weights(int i, int in, int out, float *w, int cap, int *first, int *size)
{
    double scale = (double)in / out;
    double support = scale >= 1.0 ? scale : 1.0;
    double invscale = scale >= 1.0 ? 1.0 / scale : 1.0;
    double center = scale * (i + 0.5);
    int64_t lo = (int64_t)(center - support + 0.5);
    int64_t hi = (int64_t)(center + support + 0.5);
    lo = lo < 0 ? 0 : lo;
    hi = hi > in ? in : hi;
    double total = 0.0, dw[LOCAL_WEIGHTS];
    int n = (int)(hi - lo);
    double *d = n <= LOCAL_WEIGHTS ? dw : n <= cap ? malloc((size_t)n * sizeof(double)) : NULL;
    if (d == NULL) { /* out of memory: nearest neighbour rather than nothing */
        *first = (int)(center < in ? center : in - 1);
        *size = 1;
        w[0] = 1.0f;
        return;
    }
    for (int j = 0; j < n; j++) {
        double t = fabs((j + lo - center + 0.5) * invscale);
        d[j] = t < 1.0 ? 1.0 - t : 0.0;
        total += d[j];
    }
    for (int j = 0; j < n; j++)
        w[j] = (float)(total != 0.0 ? d[j] / total : d[j]);
    if (d != dw)
        free(d);
    *first = (int)lo;
    *size = n;
}

/* Rows of `len` floats: out[r][ox] = sum_j w[j] in[r][first + j], for `rows`
 * rows; rows of in are in_w apart, of out out_w apart. */
static void resample_w(const float *in, int rows, int in_w, float *out, int out_w)
{
    float local[LOCAL_WEIGHTS], *w = in_w <= LOCAL_WEIGHTS ? local : malloc((size_t)in_w * sizeof(float));
    int cap = w == NULL ? 1 : in_w; /* out of memory: aa_weights keeps to one tap */
    if (w == NULL)
        w = local;
    for (int ox = 0; ox < out_w; ox++) {
        int first, n;
        aa_weights(ox, in_w, out_w, w, cap, &first, &n);
        for (int r = 0; r < rows; r++) {
            const float *p = in + (size_t)r * in_w + first;
            float acc = 0.0f;
            for (int j = 0; j < n; j++)
                acc += w[j] * p[j];
            out[(size_t)r * out_w + ox] = acc;
        }
    }
    if (w != local)
        free(w);
}

/* Planes of in_h rows of `cols` floats to out_h rows. */
static void resample_h(const float *in, int planes, int in_h, int cols, float *out, int out_h)
{
    float local[LOCAL_WEIGHTS], *w = in_h <= LOCAL_WEIGHTS ? local : malloc((size_t)in_h * sizeof(float));
    int cap = w == NULL ? 1 : in_h;
    if (w == NULL)
        w = local;
    for (int oy = 0; oy < out_h; oy++) {
        int first, n;
        aa_weights(oy, in_h, out_h, w, cap, &first, &n);
        for (int c = 0; c < planes; c++) {
            const float *p = in + ((size_t)c * in_h + first) * cols;
            float *o = out + ((size_t)c * out_h + oy) * cols;
            for (int k = 0; k < cols; k++)
                o[k] = w[0] * p[k];
            for (int j = 1; j < n; j++)
                for (int k = 0; k < cols; k++)
                    o[k] += w[j] * p[(size_t)j * cols + k];
        }
    }
    if (w != local)
        free(w);
}

void augment_resample(float *x, shape3 s, int oh, int ow, float *tmp)
{
    if (oh == s.h && ow == s.w)
        return; /* torchvision returns the image itself */
    /* horizontal pass into tmp, vertical pass back into x */
    const float *src = x;
    if (ow != s.w) {
        resample_w(x, s.c * s.h, s.w, tmp, ow);
        src = tmp;
    }
    if (oh != s.h) {
        resample_h(src, s.c, s.h, ow, src == x ? tmp : x, oh);
        if (src == x)
            memcpy(x, tmp, (size_t)s.c * oh * ow * sizeof(float));
    } else {
        memcpy(x, tmp, (size_t)s.c * oh * ow * sizeof(float));
    }
}

/* ---- random_resized_crop ---- */

static double uniform53(rng_t *rng)
{
    return (double)(rng_next(rng) >> 11) * (1.0 / 9007199254740992.0);
}

void augment_rrc_params(rng_t *rng, int h, int w, const double scale[2], const double ratio[2],
                        int *top, int *left, int *ch, int *cw)
{
    double area = (double)h * w;
    double lr0 = log(ratio[0]), lr1 = log(ratio[1]);
    for (int t = 0; t < 10; t++) {
        double target = area * (scale[0] + (scale[1] - scale[0]) * uniform53(rng));
        double aspect = exp(lr0 + (lr1 - lr0) * uniform53(rng));
        /* Python's round(): halves to even, as nearbyint in the default mode */
        int cwt = (int)nearbyint(sqrt(target * aspect));
        int cht = (int)nearbyint(sqrt(target / aspect));
        if (cwt > 0 && cwt <= w && cht > 0 && cht <= h) {
            *top = (int)rng_below(rng, (uint32_t)(h - cht + 1));
            *left = (int)rng_below(rng, (uint32_t)(w - cwt + 1));
            *ch = cht;
            *cw = cwt;
            return;
        }
    }
    /* the central crop, clamped to the ratio range */
    double in_ratio = (double)w / h;
    double rmin = ratio[0] < ratio[1] ? ratio[0] : ratio[1];
    double rmax = ratio[0] < ratio[1] ? ratio[1] : ratio[0];
    if (in_ratio < rmin) {
        *cw = w;
        *ch = (int)nearbyint(w / rmin);
    } else if (in_ratio > rmax) {
        *ch = h;
        *cw = (int)nearbyint(h * rmax);
    } else {
        *cw = w;
        *ch = h;
    }
    /* an image smaller than the first one (a folder's) can still come here
     * with an empty side: keep a pixel rather than resample nothing */
    *ch = *ch < 1 ? 1 : *ch;
    *cw = *cw < 1 ? 1 : *cw;
    *top = (h - *ch) / 2;
    *left = (w - *cw) / 2;
}

static shape3 random_resized_crop(const augment_cfg *a, rng_t *rng, float *x, shape3 s,
                                  float *tmp)
{
    int top, left, ch, cw, S = a->size;
    augment_rrc_params(rng, s.h, s.w, a->scale, a->ratio, &top, &left, &ch, &cw);
    /* the crop into tmp, then resampled to S x S into x */
    for (int c = 0; c < s.c; c++)
        for (int y = 0; y < ch; y++)
            memcpy(tmp + ((size_t)c * ch + y) * cw, x + ((size_t)c * s.h + top + y) * s.w + left,
                   (size_t)cw * sizeof(float));
    shape3 crop = shape3_make(s.c, ch, cw);
    memcpy(x, tmp, shape3_size(crop) * sizeof(float));
    augment_resample(x, crop, S, S, tmp);
    return shape3_make(s.c, S, S);
}

/* ---- color_jitter ---- */

void augment_color_jitter_params(rng_t *rng, const augment_cfg *a, int order[3],
                                 double factor[3])
{
    order[0] = 0;
    order[1] = 1;
    order[2] = 2;
    for (int i = 2; i > 0; i--) { /* a random order, as torchvision's randperm */
        int j = (int)rng_below(rng, (uint32_t)(i + 1));
        int t = order[i];
        order[i] = order[j];
        order[j] = t;
    }
    const float v[3] = {a->brightness, a->contrast, a->saturation};
    for (int k = 0; k < 3; k++) {
        double lo = v[k] < 1.0f ? 1.0 - v[k] : 0.0, hi = 1.0 + v[k];
        factor[k] = v[k] > 0.0f ? lo + (hi - lo) * uniform53(rng) : -1.0;
    }
}

static inline float clamp01(float v)
{
    return v < 0.0f ? 0.0f : v > 1.0f ? 1.0f : v;
}

/* torchvision's rgb_to_grayscale weights (TF's) */
static inline float grey(float r, float g, float b)
{
    return 0.2989f * r + 0.587f * g + 0.114f * b;
}

/* _blend(img, other, f) = clamp(f * img + (1 - f) * other, 0, 1) */
void augment_color_jitter_with(float *x, shape3 s, const int order[3], const double factor[3])
{
    size_t plane = (size_t)s.h * s.w, n = shape3_size(s);
    for (int k = 0; k < 3; k++) {
        int op = order[k];
        if (factor[op] < 0.0)
            continue;
        float f = (float)factor[op], g = (float)(1.0 - factor[op]);
        if (op == 0) { /* brightness: blend with black */
            for (size_t i = 0; i < n; i++)
                x[i] = clamp01(f * x[i]);
        } else if (op == 1) { /* contrast: blend with the mean grey */
            double sum = 0.0;
            if (s.c == 3)
                for (size_t i = 0; i < plane; i++)
                    sum += grey(x[i], x[plane + i], x[2 * plane + i]);
            else
                for (size_t i = 0; i < plane; i++)
                    sum += x[i];
            float mean = (float)(sum / (double)plane);
            for (size_t i = 0; i < n; i++)
                x[i] = clamp01(f * x[i] + g * mean);
        } else if (s.c == 3) { /* saturation: blend with the pixel's grey */
            for (size_t i = 0; i < plane; i++) {
                float l = grey(x[i], x[plane + i], x[2 * plane + i]);
                for (int c = 0; c < 3; c++)
                    x[c * plane + i] = clamp01(f * x[c * plane + i] + g * l);
            }
        } /* saturation of a grey image changes nothing (torchvision) */
    }
}

/* ---- the pipeline ---- */

void augment_apply(const augment_cfg *aug, int n_aug, rng_t *rng, float *x, shape3 in,
                   float *tmp)
{
    shape3 s = in;
    for (int i = 0; i < n_aug; i++) {
        const augment_cfg *a = &aug[i];
        switch (a->type) {
        case AUG_NORMALIZE:
            normalize(a, x, s);
            break;
        case AUG_RANDOM_CROP:
            s = random_crop(a, rng, x, s, tmp);
            break;
        case AUG_FLIP:
            flip(rng, x, s);
            break;
        case AUG_RESIZE: {
            int oh, ow;
            augment_resize_shape(s.h, s.w, a->size, &oh, &ow);
            augment_resample(x, s, oh, ow, tmp);
            s = shape3_make(s.c, oh, ow);
            break;
        }
        case AUG_CENTER_CROP:
            s = center_crop(a->size, x, s, tmp);
            break;
        case AUG_RANDOM_RESIZED_CROP:
            s = random_resized_crop(a, rng, x, s, tmp);
            break;
        case AUG_COLOR_JITTER: {
            int order[3];
            double factor[3];
            augment_color_jitter_params(rng, a, order, factor);
            augment_color_jitter_with(x, s, order, factor);
            break;
        }
        }
    }
}

int augment_for_eval(const augment_cfg *aug, int n_aug, augment_cfg **out, int *n_out)
{
    *n_out = 0;
    *out = calloc((size_t)(2 * n_aug + 1), sizeof(augment_cfg));
    if (*out == NULL)
        return -1;
    for (int i = 0; i < n_aug; i++) {
        augment_cfg a = aug[i];
        switch (a.type) {
        case AUG_FLIP:
        case AUG_COLOR_JITTER:
            break;
        case AUG_RANDOM_CROP:
            a.type = AUG_CENTER_CROP;
            a.padding = 0;
            (*out)[(*n_out)++] = a;
            break;
        case AUG_RANDOM_RESIZED_CROP:
            a.type = AUG_RESIZE;
            (*out)[(*n_out)++] = a;
            a.type = AUG_CENTER_CROP;
            (*out)[(*n_out)++] = a;
            break;
        default:
            (*out)[(*n_out)++] = a;
        }
    }
    return 0;
}
