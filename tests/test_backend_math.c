/* test_backend_math.c - the per-element functions of backend/math.h that the
 * CUDA kernels run one thread per element (pooling windows and their
 * gradients, the softmax cross-entropy row, dropout, the optimizer rules),
 * checked bit for bit against the CPU backend's operations on random
 * inputs: so the GPU's arithmetic is tested here, without a GPU. Shapes
 * cover overlapping windows (stride < kernel), padding, ties and NaN. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/math.h"
#include "tt_test.h"

static uint64_t state = 977;

static float uniform(float lo, float hi)
{
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    return lo + (hi - lo) * (float)((double)(state >> 11) / 9007199254740992.0);
}

static backend_t *cpu(int threads)
{
    tt_err err = {0};
    backend_t *be = backend_cpu_create(0, threads, &err);
    if (be == NULL)
        tt_diag("backend_cpu_create: %s", err.msg);
    return be;
}

/* One pooling shape: the CPU backend's forward and backward against the
 * per-element functions, as the kernels apply them (a thread per output,
 * a thread per input). Returns the number of differing bits patterns. */
static long pool_case(backend_t *be, window_desc d, bool ties, bool nan)
{
    size_t in = (size_t)d.n * d.c * d.h * d.w, out = (size_t)d.n * d.c * d.oh * d.ow;
    float *x = malloc(in * sizeof(float)), *y = malloc(out * sizeof(float));
    float *dy = malloc(out * sizeof(float)), *dx = malloc(in * sizeof(float));
    float *y2 = malloc(out * sizeof(float)), *dx2 = malloc(in * sizeof(float));
    int32_t *mask = malloc(out * sizeof(int32_t)), *mask2 = malloc(out * sizeof(int32_t));
    for (size_t i = 0; i < in; i++)
        x[i] = ties ? (float)(int)uniform(0.0f, 3.0f) : uniform(-2.0f, 2.0f);
    if (nan)
        x[in / 3] = NAN;
    for (size_t i = 0; i < out; i++)
        dy[i] = uniform(-1.0f, 1.0f);
    long diff = 0;
    size_t pin = (size_t)d.h * d.w, pout = (size_t)d.oh * d.ow;

    /* max pooling */
    be->maxpool_forward(be, &d, x, y, mask);
    for (size_t i = 0; i < out; i++) {
        size_t plane = i / pout;
        int o = (int)(i % pout);
        y2[i] = tt_maxpool_window(d.h, d.w, d.k, d.stride, d.pad, x + plane * pin, o / d.ow,
                                  o % d.ow, &mask2[i]);
    }
    for (size_t i = 0; i < out; i++)
        diff += memcmp(&y[i], &y2[i], sizeof(float)) != 0 || mask[i] != mask2[i];
    be->maxpool_backward(be, &d, dy, mask, dx);
    for (size_t i = 0; i < in; i++) {
        size_t plane = i / pin;
        int q = (int)(i % pin);
        dx2[i] = tt_maxpool_grad(d.w, d.oh, d.ow, d.k, d.stride, d.pad, dy + plane * pout,
                                 mask + plane * pout, q / d.w, q % d.w);
    }
    for (size_t i = 0; i < in; i++)
        diff += memcmp(&dx[i], &dx2[i], sizeof(float)) != 0;

    /* average pooling */
    be->avgpool_forward(be, &d, x, y);
    for (size_t i = 0; i < out; i++) {
        size_t plane = i / pout;
        int o = (int)(i % pout);
        y2[i] = tt_avgpool_window(d.h, d.w, d.k, d.stride, d.pad, x + plane * pin, o / d.ow,
                                  o % d.ow);
    }
    for (size_t i = 0; i < out; i++)
        diff += memcmp(&y[i], &y2[i], sizeof(float)) != 0;
    be->avgpool_backward(be, &d, dy, dx);
    for (size_t i = 0; i < in; i++) {
        size_t plane = i / pin;
        int q = (int)(i % pin);
        dx2[i] = tt_avgpool_grad(d.oh, d.ow, d.k, d.stride, d.pad, dy + plane * pout, q / d.w,
                                 q % d.w);
    }
    for (size_t i = 0; i < in; i++)
        diff += memcmp(&dx[i], &dx2[i], sizeof(float)) != 0;
    free(x);
    free(y);
    free(dy);
    free(dx);
    free(y2);
    free(dx2);
    free(mask);
    free(mask2);
    return diff;
}

static void test_pooling(void)
{
    backend_t *be = cpu(2);
    if (be == NULL)
        return;
    /* (h, w, k, stride, pad): LeNet's 2x2, overlapping 3x3/2 with padding
     * (ResNet's stem), kernel > stride by 2, odd sizes, 1x1 */
    int shapes[][5] = {{28, 28, 2, 2, 0}, {14, 14, 2, 2, 0}, {7, 9, 3, 2, 1}, {12, 12, 3, 1, 1},
                       {11, 5, 4, 2, 2}, {5, 5, 5, 1, 2}, {1, 1, 1, 1, 0}, {33, 17, 3, 3, 0}};
    int n_shapes = (int)(sizeof(shapes) / sizeof(shapes[0]));
    long diff = 0;
    for (int s = 0; s < n_shapes; s++)
        for (int variant = 0; variant < 3; variant++) {
            window_desc d = {.n = 3, .c = 2, .h = shapes[s][0], .w = shapes[s][1],
                             .k = shapes[s][2], .stride = shapes[s][3], .pad = shapes[s][4]};
            d.f = d.c;
            d.oh = window_out_size(d.h, d.k, d.stride, d.pad);
            d.ow = window_out_size(d.w, d.k, d.stride, d.pad);
            diff += pool_case(be, d, variant == 1, variant == 2);
        }
    tt_ok(diff == 0, "max and average pooling, forward (values, argmax) and backward: the "
          "per-element functions give the CPU backend's bits over %d shapes with ties and NaN "
          "(%ld differ)", n_shapes, diff);
    be->destroy(be);
}

static void test_softmax(void)
{
    backend_t *be = cpu(1);
    if (be == NULL)
        return;
    int n = 37, classes = 10;
    float *z = malloc((size_t)n * classes * sizeof(float));
    float *d = malloc((size_t)n * classes * sizeof(float));
    float *d2 = malloc((size_t)n * classes * sizeof(float));
    int32_t *labels = malloc((size_t)n * sizeof(int32_t));
    for (int i = 0; i < n * classes; i++)
        z[i] = uniform(-8.0f, 8.0f);
    for (int j = 0; j < classes; j++)
        z[5 * classes + j] = 1000.0f + (float)(j % 3); /* large logits, tied maxima */
    for (int r = 0; r < n; r++)
        labels[r] = (int32_t)(r * 7 % classes);
    /* an independent reference in long double: target = (1 - s) onehot + s / classes,
     * loss = -sum_j target_j log p_j, gradient (p - target) / n (torch's
     * CrossEntropyLoss with label_smoothing s) */
    static const float smooth[] = {0.0f, 0.1f, 1.0f};
    for (int k = 0; k < 3; k++) {
        double loss;
        int correct;
        be->softmax_xent(be, n, classes, z, labels, smooth[k], d);
        be->loss_read(be, &loss, &correct);
        long double ref = 0.0L, worst = 0.0L;
        int correct2 = 0;
        for (int r = 0; r < n; r++) {
            const float *zr = z + (size_t)r * classes;
            int arg = 0;
            long double mx = zr[0], se = 0.0L;
            for (int j = 1; j < classes; j++)
                if (zr[j] > zr[arg])
                    arg = j;
            mx = zr[arg];
            for (int j = 0; j < classes; j++)
                se += expl((long double)zr[j] - mx);
            for (int j = 0; j < classes; j++) {
                long double logp = (long double)zr[j] - mx - logl(se);
                long double tj = (long double)smooth[k] / classes +
                                 (j == labels[r] ? 1.0L - smooth[k] : 0.0L);
                ref -= tj * logp;
                d2[(size_t)r * classes + j] = (float)((expl(logp) - tj) / n);
                long double e = fabsl((long double)d[(size_t)r * classes + j] -
                                      d2[(size_t)r * classes + j]);
                worst = e > worst ? e : worst;
            }
            correct2 += arg == labels[r];
        }
        tt_ok(fabsl(loss - ref) <= 1e-12L * fabsl(ref) && correct == correct2 && worst <= 1e-8L,
              "softmax cross-entropy, label smoothing %g: loss %.17g vs long double %.17Lg, "
              "argmax count %d vs %d, gradient within %.3Lg", (double)smooth[k], loss, ref,
              correct, correct2, worst);
    }
    free(z);
    free(d);
    free(d2);
    free(labels);
    be->destroy(be);
}

static void test_dropout_and_optimizers(void)
{
    backend_t *be = cpu(2);
    if (be == NULL)
        return;
    size_t n = 50000;
    float *x = malloc(n * sizeof(float)), *y = malloc(n * sizeof(float));
    float *m = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++)
        x[i] = uniform(-1.0f, 1.0f);
    uint64_t seed = 0x1234abcdULL;
    be->dropout_forward(be, n, 0.3f, seed, x, y, m);
    long diff = 0;
    for (size_t i = 0; i < n; i++) {
        float f = tt_dropout_factor(seed, i, 0.3f);
        float yy = x[i] * f;
        diff += memcmp(&f, &m[i], sizeof(float)) != 0 || memcmp(&yy, &y[i], sizeof(float)) != 0;
    }
    tt_ok(diff == 0, "dropout: the mask is tt_dropout_factor(seed, i) element by element, as "
          "a GPU thread draws it (%ld differ)", diff);

    float *w = malloc(n * sizeof(float)), *w2 = malloc(n * sizeof(float));
    float *g = malloc(n * sizeof(float)), *b1 = malloc(n * sizeof(float));
    float *b2 = malloc(n * sizeof(float)), *v1 = malloc(n * sizeof(float));
    float *v2 = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) {
        w[i] = w2[i] = uniform(-1.0f, 1.0f);
        g[i] = uniform(-0.1f, 0.1f);
        b1[i] = b2[i] = 0.0f;
        v1[i] = v2[i] = 0.0f;
    }
    diff = 0;
    for (int step = 1; step <= 3; step++) {
        be->sgd_step(be, n, 0.05f, 0.9f, true, 1e-4f, step == 1, w, g, b1);
        for (size_t i = 0; i < n; i++)
            w2[i] = tt_sgd_update(w2[i], g[i], &b2[i], 0.05f, 0.9f, 1, 1e-4f, step == 1);
    }
    diff += memcmp(w, w2, n * sizeof(float)) != 0 || memcmp(b1, b2, n * sizeof(float)) != 0;
    tt_adam_consts c = tt_adam_make(1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f, 4);
    be->adam_step(be, n, 1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f, 4, w, g, b1, v1);
    for (size_t i = 0; i < n; i++)
        w2[i] = tt_adam_update(w2[i], g[i], &b2[i], &v2[i], &c);
    diff += memcmp(w, w2, n * sizeof(float)) != 0 || memcmp(v1, v2, n * sizeof(float)) != 0;
    tt_ok(diff == 0, "sgd (nesterov, weight decay) and adam: the element rules give the CPU "
          "backend's bits");
    free(x);
    free(y);
    free(m);
    free(w);
    free(w2);
    free(g);
    free(b1);
    free(b2);
    free(v1);
    free(v2);
    be->destroy(be);
}

static void test_outputs_of(void)
{
    /* tt_pool_outputs_of against a brute-force scan of every output window */
    int bad = 0;
    for (int k = 1; k <= 5; k++)
        for (int stride = 1; stride <= 4; stride++)
            for (int pad = 0; pad <= k / 2; pad++)
                for (int h = k; h <= 12; h++) {
                    int oh = window_out_size(h, k, stride, pad);
                    for (int i = 0; i < h; i++) {
                        int o0, o1, lo = -1, hi = -1;
                        tt_pool_outputs_of(i, k, stride, pad, oh, &o0, &o1);
                        for (int o = 0; o < oh; o++)
                            if (o * stride - pad <= i && i < o * stride - pad + k) {
                                if (lo < 0)
                                    lo = o;
                                hi = o + 1;
                            }
                        if (lo < 0)
                            bad += o0 < o1; /* no window holds it: the range is empty */
                        else
                            bad += o0 != lo || o1 != hi;
                    }
                }
    tt_ok(bad == 0, "tt_pool_outputs_of: the outputs whose windows hold an input, for kernels "
          "1-5, strides 1-4, every padding (%d wrong)", bad);
}

int main(void)
{
    test_pooling();
    test_softmax();
    test_dropout_and_optimizers();
    test_outputs_of();
    return tt_done();
}
