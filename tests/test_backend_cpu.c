/* test_backend_cpu.c - the CPU backend's memory, element-wise operations and
 * loss against float64 references written here: softmax cross-entropy (also
 * with logits of 1e3, where a naive exp overflows), argmax ties, relu,
 * dropout statistics and determinism, mul/axpy/scale; threads 1 vs 2 bits;
 * 2x2 max pooling's fast path (ties, NaN, rows of 1 to 33 windows). */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/math.h"
#include "tests/tt_test.h"

static uint64_t test_state = 424242;

static double test_uniform(double lo, double hi)
{
    test_state ^= test_state << 13;
    test_state ^= test_state >> 7;
    test_state ^= test_state << 17;
    return lo + (hi - lo) * (double)(test_state >> 11) / 9007199254740992.0;
}

static backend_t *make(int threads)
{
    tt_err err;
    err_clear(&err);
    backend_t *be = backend_cpu_create(0, threads, &err);
    if (be == NULL)
        tt_diag("backend_cpu_create(%d): %s", threads, err.msg);
    return be;
}

static void test_create_and_memory(void)
{
    tt_err err;
    err_clear(&err);
    backend_t *bad = backend_cpu_create(0, 0, &err);
    tt_ok(bad == NULL && err.code != 0 && err.msg[0] != '\0',
          "backend_cpu_create with 0 threads fails with a message (%s)", err.msg);
    const char *built = backend_list_built();
    tt_ok(built != NULL && strncmp(built, "cpu", 3) == 0, "backend_list_built starts with cpu (%s)",
          built ? built : "(null)");

    backend_t *be = make(2);
    if (!tt_ok(be != NULL && strcmp(be->name, "cpu") == 0 && be->threads == 2,
               "CPU backend with 2 threads"))
        return;
    /* every operation of the seam is filled in */
    void (*const ops[])(void) = {
        (void (*)(void))be->alloc, (void (*)(void))be->free, (void (*)(void))be->upload,
        (void (*)(void))be->download, (void (*)(void))be->copy,
        (void (*)(void))be->dense_forward, (void (*)(void))be->dense_backward,
        (void (*)(void))be->conv_workspace, (void (*)(void))be->conv_forward,
        (void (*)(void))be->conv_backward, (void (*)(void))be->maxpool_forward,
        (void (*)(void))be->maxpool_backward, (void (*)(void))be->avgpool_forward,
        (void (*)(void))be->avgpool_backward, (void (*)(void))be->relu_forward,
        (void (*)(void))be->relu_backward, (void (*)(void))be->dropout_forward,
        (void (*)(void))be->mul, (void (*)(void))be->axpy, (void (*)(void))be->scale,
        (void (*)(void))be->softmax_xent, (void (*)(void))be->sgd_step,
        (void (*)(void))be->adam_step, (void (*)(void))be->destroy};
    int missing = 0;
    for (size_t i = 0; i < sizeof(ops) / sizeof(ops[0]); i++)
        missing += ops[i] == NULL;
    tt_ok(missing == 0, "every backend_t operation is set (%d missing)", missing);

    size_t sizes[] = {1, 3, 64, 1000, 1 << 20};
    int bad_align = 0, not_zero = 0, bad_copy = 0;
    for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
        unsigned char *p = be->alloc(be, sizes[s]), *q = be->alloc(be, sizes[s]);
        unsigned char *h = malloc(sizes[s]), *back = malloc(sizes[s]);
        bad_align += ((uintptr_t)p % 64) != 0 || ((uintptr_t)q % 64) != 0;
        for (size_t i = 0; i < sizes[s]; i++) {
            not_zero += p[i] != 0;
            h[i] = (unsigned char)(i * 7 + s);
        }
        be->upload(be, p, h, sizes[s]);
        be->copy(be, q, p, sizes[s]);
        be->download(be, back, q, sizes[s]);
        bad_copy += memcmp(back, h, sizes[s]) != 0;
        be->free(be, p);
        be->free(be, q);
        free(h);
        free(back);
    }
    tt_ok(bad_align == 0, "alloc is 64-byte aligned");
    tt_ok(not_zero == 0, "alloc is zero-filled");
    tt_ok(bad_copy == 0, "upload, copy, download round trip");
    window_desc d = {4, 3, 28, 28, 6, 5, 1, 2, 28, 28};
    tt_ok(be->conv_workspace(be, &d) >= (size_t)3 * 25 * 28 * 28 * sizeof(float),
          "conv workspace holds at least one image's columns");
    be->destroy(be);
}

/* float64 reference: loss = logsumexp(z) - z[label], softmax - onehot. */
static void ref_xent(int n, int classes, const float *z, const int32_t *labels, double *loss,
                     int *correct, double *dz)
{
    *loss = 0.0;
    *correct = 0;
    for (int r = 0; r < n; r++) {
        const float *row = z + (size_t)r * classes;
        double m = row[0];
        int arg = 0;
        for (int j = 1; j < classes; j++)
            if (row[j] > m) {
                m = row[j];
                arg = j;
            }
        double s = 0.0;
        for (int j = 0; j < classes; j++)
            s += exp(row[j] - m);
        *loss += m + log(s) - row[labels[r]];
        *correct += arg == labels[r];
        for (int j = 0; j < classes; j++)
            dz[(size_t)r * classes + j] =
                (exp(row[j] - m) / s - (j == labels[r] ? 1.0 : 0.0)) / (double)n;
    }
}

static void check_xent(backend_t *be, backend_t *be2, int n, int classes, double scale,
                       const char *what)
{
    size_t count = (size_t)n * classes;
    float *z = malloc(count * sizeof(float)), *dz = malloc(count * sizeof(float));
    float *dz2 = malloc(count * sizeof(float));
    int32_t *labels = malloc((size_t)n * sizeof(int32_t));
    double *ref = malloc(count * sizeof(double));
    for (size_t i = 0; i < count; i++)
        z[i] = (float)test_uniform(-scale, scale);
    for (int r = 0; r < n; r++)
        labels[r] = (int32_t)(test_uniform(0, classes - 1e-9));
    /* make some rows right for sure: put the max at the label */
    for (int r = 0; r < n; r += 3)
        z[(size_t)r * classes + labels[r]] = (float)(2.0 * scale);
    float *dev_z = be->alloc(be, count * sizeof(float));
    float *dev_dz = be->alloc(be, count * sizeof(float));
    int32_t *dev_l = be->alloc(be, (size_t)n * sizeof(int32_t));
    be->upload(be, dev_z, z, count * sizeof(float));
    be->upload(be, dev_l, labels, (size_t)n * sizeof(int32_t));
    double loss = -1.0, loss2 = -1.0, ref_loss;
    int correct = -1, correct2 = -1, ref_correct;
    be->softmax_xent(be, n, classes, dev_z, dev_l, dev_dz, &loss, &correct);
    be->download(be, dz, dev_dz, count * sizeof(float));
    be2->softmax_xent(be2, n, classes, dev_z, dev_l, dev_dz, &loss2, &correct2);
    be2->download(be2, dz2, dev_dz, count * sizeof(float));
    ref_xent(n, classes, z, labels, &ref_loss, &ref_correct, ref);
    double e = 0.0, mx = 0.0;
    for (size_t i = 0; i < count; i++) {
        e = fmax(e, fabs(dz[i] - ref[i]));
        mx = fmax(mx, fabs(ref[i]));
    }
    tt_ok(isfinite(loss) && fabs(loss - ref_loss) <= 1e-9 * fmax(1.0, fabs(ref_loss)),
          "softmax_xent %s: loss sum %.9g vs float64 %.9g", what, loss, ref_loss);
    tt_ok(e <= 1e-6 * mx, "softmax_xent %s: dlogits vs float64 (max err %.2g of %.2g)", what, e,
          mx);
    tt_ok(correct == ref_correct, "softmax_xent %s: correct %d (reference %d)", what, correct,
          ref_correct);
    tt_ok(loss == loss2 && correct == correct2 && memcmp(dz, dz2, count * sizeof(float)) == 0,
          "softmax_xent %s: threads 1 and 2 give the same bits", what);
    /* dlogits = NULL: loss and count only */
    double loss3 = -1.0;
    int correct3 = -1;
    be->softmax_xent(be, n, classes, dev_z, dev_l, NULL, &loss3, &correct3);
    tt_ok(loss3 == loss && correct3 == correct, "softmax_xent %s: without dlogits", what);
    be->free(be, dev_z);
    be->free(be, dev_dz);
    be->free(be, dev_l);
    free(z);
    free(dz);
    free(dz2);
    free(labels);
    free(ref);
}

static void test_softmax_xent(void)
{
    backend_t *be = make(1), *be2 = make(2);
    if (be == NULL || be2 == NULL)
        return;
    check_xent(be, be2, 37, 10, 3.0, "logits in [-3, 3]");
    check_xent(be, be2, 5, 7, 1000.0, "logits in [-1e3, 1e3]");
    check_xent(be, be2, 128, 10, 20.0, "batch 128");

    /* ties: argmax is the first maximum (torch.argmax); the loss of k equal
     * logits is log(k) */
    float z[2 * 4] = {5, 5, 1, 5, /* */ -2, 7, 7, 7};
    int32_t labels[2] = {0, 2};
    float *dz = be->alloc(be, sizeof(z));
    int32_t *dl = be->alloc(be, sizeof(labels));
    be->upload(be, dz, z, sizeof(z));
    be->upload(be, dl, labels, sizeof(labels));
    double loss;
    int correct;
    be->softmax_xent(be, 2, 4, dz, dl, NULL, &loss, &correct);
    double want = (log(3.0 + exp(-4.0))) + (log(3.0 + exp(-9.0)));
    tt_ok(correct == 1, "softmax_xent ties: first maximum wins (correct %d, want 1)", correct);
    tt_ok(fabs(loss - want) < 1e-9, "softmax_xent ties: loss %.12g (want %.12g)", loss, want);
    be->free(be, dz);
    be->free(be, dl);
    be->destroy(be);
    be2->destroy(be2);
}

static void test_elementwise(void)
{
    backend_t *be = make(1), *be2 = make(2);
    if (be == NULL || be2 == NULL)
        return;
    const size_t n = 70001; /* several chunks, not a multiple of anything */
    size_t bytes = n * sizeof(float);
    float *x = malloc(bytes), *dy = malloc(bytes), *out1 = malloc(bytes), *out2 = malloc(bytes);
    for (size_t i = 0; i < n; i++) {
        x[i] = (float)test_uniform(-1, 1);
        dy[i] = (float)test_uniform(-1, 1);
    }
    x[5] = 0.0f;
    x[6] = -0.0f;
    float *dx = be->alloc(be, bytes), *ddy = be->alloc(be, bytes), *dout = be->alloc(be, bytes);
    float *dmask = be->alloc(be, bytes);
    be->upload(be, dx, x, bytes);
    be->upload(be, ddy, dy, bytes);

    /* relu */
    be->relu_forward(be, n, dx, dout);
    be->download(be, out1, dout, bytes);
    size_t bad = 0;
    for (size_t i = 0; i < n; i++)
        bad += out1[i] != (x[i] > 0.0f ? x[i] : 0.0f);
    tt_ok(bad == 0, "relu forward: max(x, 0) (%zu wrong)", bad);
    be2->relu_forward(be2, n, dx, dout);
    be2->download(be2, out2, dout, bytes);
    tt_ok(memcmp(out1, out2, bytes) == 0, "relu forward: threads 1 and 2 give the same bits");
    float *dyv = be->alloc(be, bytes);
    be->upload(be, dyv, out1, bytes); /* y of the forward */
    be->relu_backward(be, n, dyv, ddy, dout);
    be->download(be, out2, dout, bytes);
    bad = 0;
    for (size_t i = 0; i < n; i++)
        bad += out2[i] != (x[i] > 0.0f ? dy[i] : 0.0f);
    tt_ok(bad == 0, "relu backward: dy where x > 0, else 0 (%zu wrong)", bad);

    /* mul, axpy, scale */
    be->mul(be, n, dx, ddy, dout);
    be->download(be, out1, dout, bytes);
    bad = 0;
    for (size_t i = 0; i < n; i++)
        bad += out1[i] != x[i] * dy[i];
    tt_ok(bad == 0, "mul (%zu wrong)", bad);
    be->upload(be, dout, dy, bytes);
    be->axpy(be, n, 0.25f, dx, dout);
    be->download(be, out1, dout, bytes);
    bad = 0;
    for (size_t i = 0; i < n; i++)
        bad += fabs(out1[i] - (dy[i] + 0.25 * x[i])) > 1e-6;
    tt_ok(bad == 0, "axpy (%zu wrong)", bad);
    be->scale(be, n, -3.0f, dout);
    be->download(be, out2, dout, bytes);
    bad = 0;
    for (size_t i = 0; i < n; i++)
        bad += out2[i] != out1[i] * -3.0f;
    tt_ok(bad == 0, "scale (%zu wrong)", bad);

    /* dropout: statistics, scaling, determinism */
    const float rates[] = {0.25f, 0.5f, 0.9f};
    for (int r = 0; r < 3; r++) {
        float rate = rates[r], keep = 1.0f / (1.0f - rate);
        be->dropout_forward(be, n, rate, 1234, dx, dout, dmask);
        float *mask1 = malloc(bytes), *mask2 = malloc(bytes);
        be->download(be, out1, dout, bytes);
        be->download(be, mask1, dmask, bytes);
        size_t dropped = 0, bad_y = 0, bad_m = 0;
        double msum = 0.0;
        for (size_t i = 0; i < n; i++) {
            msum += mask1[i];
            if (mask1[i] == 0.0f) {
                dropped++;
                bad_y += out1[i] != 0.0f;
            } else {
                bad_m += mask1[i] != keep;
                bad_y += out1[i] != x[i] * keep;
            }
        }
        double frac = (double)dropped / (double)n, sd = sqrt(rate * (1 - rate) / (double)n);
        tt_ok(fabs(frac - rate) < 5 * sd, "dropout %.2f: drops %.4f of %zu", rate, frac, n);
        tt_ok(bad_m == 0 && bad_y == 0,
              "dropout %.2f: mask is 0 or 1/(1-rate), y = x * mask (%zu, %zu wrong)", rate, bad_m,
              bad_y);
        double mean = msum / (double)n, msd = sqrt(rate / (1 - rate) / (double)n);
        tt_ok(fabs(mean - 1.0) < 5 * msd, "dropout %.2f: E[mask] = %.4f ~ 1 (inverted dropout)",
              rate, mean);
        be2->dropout_forward(be2, n, rate, 1234, dx, dout, dmask);
        be2->download(be2, mask2, dmask, bytes);
        be2->download(be2, out2, dout, bytes);
        tt_ok(memcmp(mask1, mask2, bytes) == 0 && memcmp(out1, out2, bytes) == 0,
              "dropout %.2f: same seed, threads 1 and 2: same mask", rate);
        be->dropout_forward(be, n, rate, 1235, dx, dout, dmask);
        be->download(be, mask2, dmask, bytes);
        size_t same = 0;
        for (size_t i = 0; i < n; i++)
            same += (mask1[i] == 0.0f) == (mask2[i] == 0.0f);
        /* independent masks agree on about rate^2 + (1-rate)^2 of the units */
        double agree = (double)same / (double)n, want = rate * rate + (1 - rate) * (1 - rate);
        tt_ok(fabs(agree - want) < 0.01, "dropout %.2f: another seed, independent mask "
              "(agreement %.4f, want %.4f)", rate, agree, want);
        free(mask1);
        free(mask2);
    }
    /* a unit's fate depends on (seed, index) only: a prefix gives the same mask */
    float *m_all = malloc(bytes), *m_pre = malloc(bytes);
    be->dropout_forward(be, n, 0.5f, 77, dx, dout, dmask);
    be->download(be, m_all, dmask, bytes);
    be->dropout_forward(be, 1000, 0.5f, 77, dx, dout, dmask);
    be->download(be, m_pre, dmask, 1000 * sizeof(float));
    tt_ok(memcmp(m_all, m_pre, 1000 * sizeof(float)) == 0,
          "dropout mask of element i depends on (seed, i) only");
    free(m_all);
    free(m_pre);

    be->free(be, dx);
    be->free(be, ddy);
    be->free(be, dout);
    be->free(be, dmask);
    be->free(be, dyv);
    free(x);
    free(dy);
    free(out1);
    free(out2);
    be->destroy(be);
    be2->destroy(be2);
}

/* Max pooling with the 2x2, stride 2 window (LeNet's and the vectorised
 * path): values from {0, 1, 2} make ties common, so the index shows whether
 * the first maximum wins; NaNs in some windows must propagate with the first
 * NaN's index (PyTorch). Rows of 1 to 33 windows cover the masked short rows
 * and the 16-wide steps. The reference is the window scanned in order. */
static void test_maxpool_2x2(void)
{
    backend_t *be = make(2);
    if (be == NULL)
        return;
    const int widths[] = {2, 6, 10, 28, 30, 32, 34, 40, 66, 67};
    int bad_y = 0, bad_m = 0, checked = 0, nans = 0;
    for (size_t wi = 0; wi < sizeof(widths) / sizeof(widths[0]); wi++) {
        window_desc d = {.n = 2, .c = 3, .h = 9, .w = widths[wi], .k = 2, .stride = 2, .pad = 0};
        d.f = d.c;
        d.oh = window_out_size(d.h, 2, 2, 0);
        d.ow = window_out_size(d.w, 2, 2, 0);
        size_t in = (size_t)d.n * d.c * d.h * d.w, out = (size_t)d.n * d.c * d.oh * d.ow;
        float *x = malloc(in * sizeof(float)), *y = malloc(out * sizeof(float));
        int32_t *m = malloc(out * sizeof(int32_t));
        float *dx = be->alloc(be, in * sizeof(float)), *dy = be->alloc(be, out * sizeof(float));
        int32_t *dm = be->alloc(be, out * sizeof(int32_t));
        for (size_t i = 0; i < in; i++)
            x[i] = (float)(int)test_uniform(0.0, 3.0);
        for (size_t i = 0; i < (size_t)d.h * d.w; i += 37) /* first plane only: */
            x[i] = NAN; /* the other rows stay on the fast path */
        be->upload(be, dx, x, in * sizeof(float));
        be->maxpool_forward(be, &d, dx, dy, dm);
        be->download(be, y, dy, out * sizeof(float));
        be->download(be, m, dm, out * sizeof(int32_t));
        for (int pl = 0; pl < d.n * d.c; pl++)
            for (int oy = 0; oy < d.oh; oy++)
                for (int ox = 0; ox < d.ow; ox++) {
                    const float *px = x + (size_t)pl * d.h * d.w;
                    int arg = 2 * oy * d.w + 2 * ox;
                    for (int ky = 0; ky < 2; ky++)
                        for (int kx = 0; kx < 2; kx++) {
                            int i = (2 * oy + ky) * d.w + 2 * ox + kx;
                            if (isnan(px[arg]))
                                continue;
                            if (isnan(px[i]) || px[i] > px[arg])
                                arg = i;
                        }
                    size_t o = ((size_t)pl * d.oh + oy) * d.ow + ox;
                    float want = px[arg], got = y[o];
                    nans += isnan(want);
                    bad_y += !(got == want || (isnan(got) && isnan(want)));
                    bad_m += m[o] != arg;
                    checked++;
                }
        free(x);
        free(y);
        free(m);
        be->free(be, dx);
        be->free(be, dy);
        be->free(be, dm);
    }
    tt_ok(bad_y == 0 && nans > 0, "maxpool 2x2: %d of %d maxima wrong (%d NaN windows)", bad_y,
          checked, nans);
    tt_ok(bad_m == 0, "maxpool 2x2: %d of %d indices wrong (ties: first maximum; NaN: first NaN)",
          bad_m, checked);
    be->destroy(be);
}

int main(void)
{
    test_create_and_memory();
    test_softmax_xent();
    test_elementwise();
    test_maxpool_2x2();
    return tt_done();
}
