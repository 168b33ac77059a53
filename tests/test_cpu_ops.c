/* test_cpu_ops.c - the CPU backend's own operations, and the thread pool
 * under them, against float64 references written here:
 *   creation and memory (alignment, zero fill, upload/copy/download);
 *   threadpool_run runs every task exactly once, for many (ntasks, threads)
 *   pairs, on fresh and reused pools;
 *   softmax_xent: the loss sum, the argmax (ties: the first maximal index, as
 *   torch.argmax), dlogits = (softmax - onehot) / n, logits around +-1000;
 *   relu forward and backward, mul, axpy, scale;
 *   sgd_step (momentum, nesterov, weight decay, the first step) and adam_step:
 *   math.h's per-element rule bit for bit, and the float64 formulas;
 *   dropout over a million elements: the fraction dropped, independence, scaling,
 *   a pure function of (seed, i);
 *   max pooling's 2x2 fast path: ties and NaN;
 *   batchnorm (forward with relu, backward) and global average pooling over
 *   the blocked layout in nChw16c and NHWC order: the NCHW operations' bits.
 * (the same operations over bf16 blocked activations: test_bf16.c).
 * All but the first two at every instruction-set level the CPU has
 * (cpu_isa.h: AVX-512, AVX2, plain). Every operation large enough to be
 * split over threads gives the same bits on 1 and 2 threads. Data goes through the backend's alloc and upload, as
 * the layers use it.
 */
#include <math.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend/backend.h"
#include "backend/cpu/cpu_isa.h"
#include "backend/math.h"
#include "tt_blocked.h"
#include "tt_ref.h"
#include "tt_test.h"
#include "util/threadpool.h"

/* seconds before the watchdog fails the test (normally it takes ~3 s) */
#ifndef ALARM_S
#define ALARM_S 120
#endif

static backend_t *be1, *be2; /* 1 and 2 threads */

/* ---- creation and memory ---- */

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

    backend_t *be = be2;
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
    window_desc d = {4, 3, 28, 28, 6, 5, 1, 2, 28, 28, false, false};
    tt_ok(be->conv_workspace(be, &d) >= (size_t)3 * 25 * 28 * 28 * sizeof(float),
          "conv workspace holds at least one image's columns");
}

/* ---- the thread pool ---- */

typedef struct {
    atomic_int *count;
    int ntasks;
    atomic_int bad_n;
} tp_arg;

static void tp_task(void *p, int task, int ntasks)
{
    tp_arg *a = p;
    if (ntasks != a->ntasks || task < 0 || task >= a->ntasks) {
        atomic_fetch_add(&a->bad_n, 1);
        return;
    }
    atomic_fetch_add(&a->count[task], 1);
}

/* A hang (a lost wake-up) must fail the test, not stall `make check`. */
static void on_alarm(int sig)
{
    static const char msg[] = "not ok - watchdog: the test hung (thread pool deadlock?)\n";
    ssize_t w = write(1, msg, sizeof(msg) - 1);
    (void)w;
    _exit(1);
}

static void test_threadpool(void)
{
    tt_ok(threadpool_create(0) == NULL, "threadpool_create(0) fails");
    const int threads[5] = {1, 2, 3, 4, 8};
    const int ntasks[9] = {0, 1, 2, 3, 5, 8, 17, 100, 1000};
    atomic_int *count = calloc(1000, sizeof(atomic_int));
    for (int t = 0; t < 5; t++) {
        int all_ok = 1;
        for (int q = 0; q < 9; q++) {
            /* a fresh pool, used at once: the workers may not have started yet */
            threadpool_t *tp = threadpool_create(threads[t]);
            if (tp == NULL || threadpool_size(tp) != threads[t]) {
                all_ok = 0;
                threadpool_destroy(tp);
                continue;
            }
            for (int rep = 0; rep < 30; rep++) {
                tp_arg a = {.count = count, .ntasks = ntasks[q]};
                atomic_init(&a.bad_n, 0);
                for (int i = 0; i < 1000; i++)
                    atomic_store(&count[i], 0);
                threadpool_run(tp, ntasks[q], tp_task, &a);
                int once = atomic_load(&a.bad_n) == 0;
                for (int i = 0; i < 1000; i++)
                    if (atomic_load(&count[i]) != (i < ntasks[q] ? 1 : 0))
                        once = 0;
                if (!once) {
                    tt_diag("threads %d, ntasks %d, run %d: a task ran twice, never or with "
                            "wrong arguments", threads[t], ntasks[q], rep);
                    all_ok = 0;
                    break;
                }
            }
            threadpool_destroy(tp);
        }
        tt_ok(all_ok, "threadpool %d thread(s): every task exactly once for ntasks 0..1000, "
              "30 runs each", threads[t]);
    }
    /* create, run at once, destroy: many times (start-up races) */
    int ok = 1;
    for (int rep = 0; rep < 300 && ok; rep++) {
        threadpool_t *tp = threadpool_create(2 + rep % 3);
        tp_arg a = {.count = count, .ntasks = 4};
        atomic_init(&a.bad_n, 0);
        for (int i = 0; i < 4; i++)
            atomic_store(&count[i], 0);
        if (tp == NULL)
            ok = 0;
        else
            threadpool_run(tp, 4, tp_task, &a);
        for (int i = 0; i < 4 && ok; i++)
            ok = atomic_load(&count[i]) == 1;
        threadpool_destroy(tp);
    }
    tt_ok(ok, "threadpool: 300 x (create, run at once, destroy) all complete");
    free(count);
}

/* ---- softmax cross-entropy ---- */

/* float64 reference: per-row loss -log softmax(z)[label] = logsumexp(z) -
 * z[label], summed; argmax is the first maximal index (torch.argmax);
 * d = (softmax - onehot) / n. */
static void ref_xent(int n, int k, const float *z, const int32_t *lab, double *loss, int *correct,
                     double *d)
{
    *loss = 0.0;
    *correct = 0;
    for (int r = 0; r < n; r++) {
        const float *row = z + (size_t)r * k;
        int arg = 0;
        for (int j = 1; j < k; j++)
            if (row[j] > row[arg])
                arg = j;
        double mx = row[arg], s = 0.0;
        for (int j = 0; j < k; j++)
            s += exp((double)row[j] - mx);
        *loss += mx + log(s) - row[lab[r]];
        *correct += arg == lab[r];
        for (int j = 0; j < k; j++)
            d[(size_t)r * k + j] = (exp((double)row[j] - mx) / s - (j == lab[r])) / n;
    }
}

/* One batch of logits through softmax_xent on 1 and 2 threads, against
 * ref_xent: the loss sum to 1e-9, dlogits to 1e-6 (every element written:
 * it starts as NaN), the correct count, rows of dlogits summing to 0, the
 * same bits on 2 threads, and the same loss and count without dlogits.
 * What the 1-thread run gave goes to *out for further checks. */
typedef struct {
    double loss;
    int correct;
    bool finite; /* the loss and every dlogit */
} xent_out;

static void check_xent(const char *what, int n, int k, const float *z, const int32_t *lab,
                       xent_out *out)
{
    size_t count = (size_t)n * k;
    double *rd = malloc(count * sizeof(double)), rloss;
    int rcorrect;
    ref_xent(n, k, z, lab, &rloss, &rcorrect, rd);
    float *nans = malloc(count * sizeof(float));
    for (size_t i = 0; i < count; i++)
        nans[i] = NAN;
    float *dz = tt_dev_copy(be1, z, count * sizeof(float));
    int32_t *dl = tt_dev_copy(be1, lab, (size_t)n * sizeof(int32_t));
    float *dd = tt_dev_copy(be1, nans, count * sizeof(float));
    float *dd2 = tt_dev_copy(be2, nans, count * sizeof(float));
    double loss = NAN, loss2 = NAN, loss3 = NAN;
    int correct = -1, correct2 = -1, correct3 = -1;
    be1->softmax_xent(be1, n, k, dz, dl, 0.0f, dd);
    be1->loss_read(be1, &loss, &correct);
    be2->softmax_xent(be2, n, k, dz, dl, 0.0f, dd2);
    be2->loss_read(be2, &loss2, &correct2);
    be1->softmax_xent(be1, n, k, dz, dl, 0.0f, NULL);
    be1->loss_read(be1, &loss3, &correct3);
    float *d = tt_host_copy(be1, dd, count * sizeof(float));
    float *d2 = tt_host_copy(be2, dd2, count * sizeof(float));

    tt_ok(isfinite(loss) && fabs(loss - rloss) <= 1e-9 * fmax(1.0, fabs(rloss)),
          "softmax_xent %s: loss sum %.10g vs float64 %.10g", what, loss, rloss);
    tt_ok(correct == rcorrect, "softmax_xent %s: correct %d vs reference %d", what, correct,
          rcorrect);
    double e = tt_rel_err(d, rd, count);
    tt_ok(e < 1e-6, "softmax_xent %s: dlogits vs float64 (err %.2e)", what, e);
    double rowsum = 0.0;
    for (int r = 0; r < n; r++) {
        double s = 0.0;
        for (int j = 0; j < k; j++)
            s += d[(size_t)r * k + j];
        if (!(fabs(s) <= rowsum))
            rowsum = fabs(s);
    }
    tt_ok(rowsum < 1e-6 / n, "softmax_xent %s: every dlogits row sums to 0 (max %.2e)", what,
          rowsum);
    tt_ok(loss2 == loss && correct2 == correct && tt_same_bits(d, d2, count),
          "softmax_xent %s: threads 1 and 2 give the same bits", what);
    tt_ok(loss3 == loss && correct3 == correct,
          "softmax_xent %s: the same loss and count without dlogits", what);
    double loss0 = NAN;
    int correct0 = -1;
    be1->softmax_xent(be1, 0, k, dz, dl, 0.0f, NULL);
    be1->loss_read(be1, &loss0, &correct0);
    tt_ok(loss0 == 0.0 && correct0 == 0,
          "softmax_xent %s: 0 rows read back as loss 0 and 0 correct, not the last call's (%g, %d)",
          what, loss0, correct0);
    if (out != NULL) {
        out->loss = loss;
        out->correct = correct;
        out->finite = isfinite(loss);
        for (size_t i = 0; i < count; i++)
            out->finite = out->finite && isfinite(d[i]);
    }
    be1->free(be1, dz);
    be1->free(be1, dl);
    be1->free(be1, dd);
    be2->free(be2, dd2);
    free(rd);
    free(nans);
    free(d);
    free(d2);
}

/* n rows of k logits uniform in [-scale, scale), random labels; every third
 * row's label holds the row's maximum (2 scale), so some rows are right. */
static void check_random_xent(tt_rng *rng, int n, int k, double scale)
{
    float *z = malloc((size_t)n * k * sizeof(float));
    int32_t *lab = malloc((size_t)n * sizeof(int32_t));
    tt_fill(rng, z, (size_t)n * k, -scale, scale);
    for (int r = 0; r < n; r++)
        lab[r] = tt_below(rng, k);
    for (int r = 0; r < n; r += 3)
        z[(size_t)r * k + lab[r]] = (float)(2.0 * scale);
    char what[64];
    snprintf(what, sizeof(what), "%dx%d, logits in [-%g, %g]", n, k, scale, scale);
    check_xent(what, n, k, z, lab, NULL);
    free(z);
    free(lab);
}

static void test_softmax_xent(void)
{
    tt_rng rng = tt_rng_make(0x50f7);
    check_random_xent(&rng, 37, 10, 3.0);
    check_random_xent(&rng, 128, 10, 20.0);
    check_random_xent(&rng, 64, 100, 30.0);
    check_random_xent(&rng, 5, 7, 1000.0);

    /* ties: torch.argmax returns the first maximal index */
    const float tz[4 * 5] = {1, 3, 0, 3, 2,  /* max at 1 and 3 */
                             1, 3, 0, 3, 2,  /* same */
                             2, 2, 2, 2, 2,  /* all equal: 0 */
                             -1, -4, 5, 5, 5};
    const int32_t tl[4] = {1, 3, 0, 3};
    xent_out o;
    check_xent("ties 4x5", 4, 5, tz, tl, &o);
    /* row 0 right (argmax 1), row 1 wrong (3 is not first), row 2 right (0), row 3 wrong (2) */
    tt_ok(o.correct == 2, "softmax_xent ties 4x5: first maximal index wins (correct %d, want 2)",
          o.correct);
    /* the loss of k equal maxima: log(k + the rest) */
    const float z2[2 * 4] = {5, 5, 1, 5, /* */ -2, 7, 7, 7};
    const int32_t l2[2] = {0, 2};
    check_xent("ties 2x4", 2, 4, z2, l2, &o);
    double want = log(3.0 + exp(-4.0)) + log(3.0 + exp(-9.0));
    tt_ok(o.correct == 1, "softmax_xent ties 2x4: first maximum wins (correct %d, want 1)",
          o.correct);
    tt_ok(fabs(o.loss - want) < 1e-9, "softmax_xent ties 2x4: loss %.12g (want %.12g)", o.loss,
          want);

    /* stability: logits around +-1000, where a naive exp overflows */
    const float bz[4 * 4] = {1000, 999, -1000, 998,   -1000, -1000.5f, -999, -1001,
                             1000, -1000, 1000, -1000, 88.7f, 89.5f, -103.9f, 1000};
    const int32_t bl[4] = {0, 1, 2, 2};
    check_xent("logits +-1000", 4, 4, bz, bl, &o);
    tt_ok(o.finite && o.loss > 1100.0 && o.loss < 1110.0,
          "softmax_xent +-1000: finite loss and gradients (loss %.3f, row 3 alone costs ~1104)",
          o.loss);
}

/* ---- relu, mul, axpy, scale ---- */

#define BIG 100003 /* a prime over 2 chunks of the backend: 2 threads split it */

static void test_elementwise(void)
{
    tt_rng rng = tt_rng_make(0xe1e);
    size_t bytes = BIG * sizeof(float);
    float *x = malloc(bytes), *dy = malloc(bytes);
    tt_fill(&rng, x, BIG, -2.0, 2.0);
    tt_fill(&rng, dy, BIG, -1.0, 1.0);
    for (int i = 0; i < BIG; i += 97)
        x[i] = 0.0f; /* exact zeros: relu'(0) = 0, as torch */
    x[5] = -0.0f;
    float *dx = tt_dev_copy(be1, x, bytes), *ddy = tt_dev_copy(be1, dy, bytes);
    float *o1 = tt_dev_copy(be1, NULL, bytes), *o2 = tt_dev_copy(be1, NULL, bytes);

    be1->relu_forward(be1, BIG, dx, o1);
    be2->relu_forward(be2, BIG, dx, o2);
    float *y = tt_host_copy(be1, o1, bytes), *y2 = tt_host_copy(be1, o2, bytes);
    size_t bad = 0;
    for (int i = 0; i < BIG; i++)
        bad += y[i] != (x[i] > 0.0f ? x[i] : 0.0f);
    tt_ok(bad == 0, "relu_forward: y = max(x, 0) over %d elements (%zu wrong)", BIG, bad);
    tt_ok(tt_same_bits(y, y2, BIG), "relu_forward: same bits on 2 threads");

    float *dyv = tt_dev_copy(be1, y, bytes); /* the forward's y */
    be1->relu_backward(be1, BIG, dyv, ddy, o1);
    be2->relu_backward(be2, BIG, dyv, ddy, o2);
    float *a = tt_host_copy(be1, o1, bytes), *b = tt_host_copy(be1, o2, bytes);
    bad = 0;
    for (int i = 0; i < BIG; i++)
        bad += a[i] != (x[i] > 0.0f ? dy[i] : 0.0f);
    tt_ok(bad == 0, "relu_backward: dx = dy where x > 0, else 0, x = 0 included (%zu wrong)",
          bad);
    tt_ok(tt_same_bits(a, b, BIG), "relu_backward: same bits on 2 threads");
    free(a);
    free(b);

    /* mul and scale: one float rounding of the float64 product, exactly */
    be1->mul(be1, BIG, dx, ddy, o1);
    be2->mul(be2, BIG, dx, ddy, o2);
    a = tt_host_copy(be1, o1, bytes);
    b = tt_host_copy(be1, o2, bytes);
    bad = 0;
    for (int i = 0; i < BIG; i++)
        bad += a[i] != (float)((double)x[i] * dy[i]);
    tt_ok(bad == 0, "mul: y = a * b, the float64 product rounded once (%zu wrong)", bad);
    tt_ok(tt_same_bits(a, b, BIG), "mul: same bits on 2 threads");
    free(a);
    free(b);

    const float s = 3.1f;
    be1->upload(be1, o1, x, bytes);
    be1->upload(be1, o2, x, bytes);
    be1->scale(be1, BIG, s, o1);
    be2->scale(be2, BIG, s, o2);
    a = tt_host_copy(be1, o1, bytes);
    b = tt_host_copy(be1, o2, bytes);
    bad = 0;
    for (int i = 0; i < BIG; i++)
        bad += a[i] != (float)((double)x[i] * s);
    tt_ok(bad == 0, "scale: x *= alpha, the float64 product rounded once (%zu wrong)", bad);
    tt_ok(tt_same_bits(a, b, BIG), "scale: same bits on 2 threads");
    free(a);
    free(b);

    /* axpy: y += alpha x within one float rounding of the float64 value
     * (a fused multiply-add may round once, a multiply then add twice) */
    const float alpha = -0.37f;
    be1->upload(be1, o1, dy, bytes);
    be1->upload(be1, o2, dy, bytes);
    be1->axpy(be1, BIG, alpha, dx, o1);
    be2->axpy(be2, BIG, alpha, dx, o2);
    a = tt_host_copy(be1, o1, bytes);
    b = tt_host_copy(be1, o2, bytes);
    bad = 0;
    for (int i = 0; i < BIG; i++) {
        double ref = (double)dy[i] + (double)alpha * x[i];
        double tol = 2.4e-7 * (fabs(dy[i]) + fabs((double)alpha * x[i])) + 1e-30;
        bad += !(fabs(a[i] - ref) <= tol);
    }
    tt_ok(bad == 0, "axpy: y += alpha x vs float64 (%zu wrong)", bad);
    tt_ok(tt_same_bits(a, b, BIG), "axpy: same bits on 2 threads");
    free(a);
    free(b);

    /* small and empty counts: only the first `count` elements change */
    be1->upload(be1, o1, x, 8 * sizeof(float));
    be1->axpy(be1, 3, 1.0f, ddy, o1);
    be1->scale(be1, 0, 5.0f, o1);
    a = tt_host_copy(be1, o1, 8 * sizeof(float));
    tt_ok(a[0] == x[0] + dy[0] && a[2] == x[2] + dy[2] && a[3] == x[3] && a[7] == x[7],
          "axpy over 3 elements touches 3; scale over 0 touches none");
    free(a);

    be1->free(be1, dx);
    be1->free(be1, ddy);
    be1->free(be1, o1);
    be1->free(be1, o2);
    be1->free(be1, dyv);
    free(x);
    free(dy);
    free(y);
    free(y2);
}

/* ---- the optimizer updates ---- */

/* One sgd_step or adam_step over BIG elements from fixed w, g and slots, on
 * be: the new w and slots in out[0..2] (host copies, BIG floats each). */
typedef struct {
    bool adam;
    float lr, momentum, weight_decay;
    bool nesterov, first;
    int64_t step; /* adam */
} opt_case;

static void opt_run(backend_t *be, const opt_case *c, const float *const in[4], float *out[3])
{
    size_t bytes = BIG * sizeof(float);
    float *w = tt_dev_copy(be, in[0], bytes), *g = tt_dev_copy(be, in[1], bytes);
    float *m = tt_dev_copy(be, in[2], bytes), *v = tt_dev_copy(be, in[3], bytes);
    if (c->adam)
        be->adam_step(be, BIG, c->lr, 0.9f, 0.999f, 1e-8f, c->weight_decay, c->step, w, g, m, v);
    else
        be->sgd_step(be, BIG, c->lr, c->momentum, c->nesterov, c->weight_decay, c->first, w, g,
                     c->momentum != 0.0f ? m : NULL);
    out[0] = tt_host_copy(be, w, bytes);
    out[1] = tt_host_copy(be, m, bytes);
    out[2] = tt_host_copy(be, v, bytes);
    be->free(be, w);
    be->free(be, g);
    be->free(be, m);
    be->free(be, v);
}

/* The new w of element i in float64 from torch.optim's formulas (SGD with
 * momentum, nesterov, weight decay; Adam with its bias corrections), and
 * the float32 rule of backend/math.h applied one element at a time. */
static double opt_ref64(const opt_case *c, float w, float g, float m, float v)
{
    double d = (double)g + (double)c->weight_decay * w;
    if (c->adam) {
        double mm = m + 0.1 * (d - m), vv = 0.999 * v + 0.001 * d * d;
        double bc1 = 1.0 - pow(0.9, (double)c->step), bc2 = 1.0 - pow(0.999, (double)c->step);
        return w - c->lr / bc1 * mm / (sqrt(vv) / sqrt(bc2) + 1e-8);
    }
    if (c->momentum != 0.0f) {
        double b = c->first ? d : (double)c->momentum * m + d;
        d = c->nesterov ? d + (double)c->momentum * b : b;
    }
    return w - (double)c->lr * d;
}

static float opt_ref32(const opt_case *c, float w, float g, float *m, float *v)
{
    if (c->adam) {
        tt_adam_consts k = tt_adam_make(c->lr, 0.9f, 0.999f, 1e-8f, c->weight_decay, c->step);
        return tt_adam_update(w, g, m, v, &k);
    }
    return tt_sgd_update(w, g, m, c->lr, c->momentum, c->nesterov, c->weight_decay, c->first);
}

/* sgd_step and adam_step, every variant of their loops (which the compiler
 * vectorises at each level): the same bits as backend/math.h's rule applied
 * element by element (every level computes the same roundings), within
 * 1e-5 relative of the float64 formulas, and the same bits on 2 threads. */
static void test_optimizer_steps(void)
{
    static const opt_case cases[] = {
        {false, 0.05f, 0.0f, 0.0f, false, false, 0},   {false, 0.05f, 0.0f, 1e-4f, false, false, 0},
        {false, 0.05f, 0.9f, 0.0f, false, true, 0},    {false, 0.05f, 0.9f, 0.0f, false, false, 0},
        {false, 0.05f, 0.9f, 5e-4f, true, false, 0},   {false, 0.1f, 0.9f, 1e-4f, false, true, 0},
        {true, 1e-3f, 0.0f, 0.0f, false, false, 1},    {true, 1e-3f, 0.0f, 1e-2f, false, false, 7},
    };
    tt_rng rng = tt_rng_make(0x0b7);
    float *in[4];
    for (int k = 0; k < 4; k++) {
        in[k] = malloc(BIG * sizeof(float));
        tt_fill(&rng, in[k], BIG, k == 3 ? 0.0 : -1.0, 1.0); /* v >= 0 */
    }
    for (size_t ci = 0; ci < sizeof(cases) / sizeof(cases[0]); ci++) {
        const opt_case *c = &cases[ci];
        float *o1[3], *o2[3];
        opt_run(be1, c, (const float *const *)in, o1);
        opt_run(be2, c, (const float *const *)in, o2);
        size_t bits = 0, far = 0;
        for (int i = 0; i < BIG; i++) {
            float m = in[2][i], v = in[3][i];
            float w = opt_ref32(c, in[0][i], in[1][i], &m, &v);
            bits += memcmp(&w, &o1[0][i], 4) != 0 ||
                    (c->adam || c->momentum != 0.0f ? memcmp(&m, &o1[1][i], 4) != 0 : 0) ||
                    (c->adam ? memcmp(&v, &o1[2][i], 4) != 0 : 0);
            double r = opt_ref64(c, in[0][i], in[1][i], in[2][i], in[3][i]);
            far += !(fabs(o1[0][i] - r) <= 1e-5 * fabs(r) + 1e-7);
        }
        tt_ok(bits == 0 && far == 0,
              "%s (lr %g, momentum %g, weight decay %g%s%s): as math.h's rule bit for bit "
              "(%zu differ), float64 to 1e-5 (%zu far)", c->adam ? "adam_step" : "sgd_step",
              (double)c->lr, (double)c->momentum, (double)c->weight_decay,
              c->nesterov ? ", nesterov" : "", c->first ? ", first step" : "", bits, far);
        tt_ok(tt_same_bits(o1[0], o2[0], BIG) && tt_same_bits(o1[1], o2[1], BIG) &&
                  tt_same_bits(o1[2], o2[2], BIG),
              "%s case %zu: same bits on 2 threads", c->adam ? "adam_step" : "sgd_step", ci);
        for (int k = 0; k < 3; k++) {
            free(o1[k]);
            free(o2[k]);
        }
    }
    for (int k = 0; k < 4; k++)
        free(in[k]);
}

/* ---- dropout ---- */

/* Over 1e6 + 3 elements, per rate: the fraction dropped within 5 binomial
 * standard errors, neighbours dropped together ~ rate^2 (independent), the
 * mask exactly 0 or 1/(1-rate), y = x * mask, E[mask] ~ 1 and sum y ~ sum x
 * (inverted dropout), the same mask for the same seed (run again, on 2
 * threads, and for a prefix: element i depends on (seed, i) only), and an
 * independent mask for another seed. */
static void test_dropout(void)
{
    const size_t n = 1000003; /* odd: the split over threads has a tail */
    size_t bytes = n * sizeof(float);
    tt_rng rng = tt_rng_make(0xd409);
    float *x = malloc(bytes);
    tt_fill(&rng, x, n, 0.5, 1.5);
    float *dx = tt_dev_copy(be1, x, bytes);
    float *dy1 = tt_dev_copy(be1, NULL, bytes), *dm1 = tt_dev_copy(be1, NULL, bytes);
    float *dy2 = tt_dev_copy(be1, NULL, bytes), *dm2 = tt_dev_copy(be1, NULL, bytes);
    const float rates[4] = {0.25f, 0.3f, 0.5f, 0.9f};
    for (int q = 0; q < 4; q++) {
        float rate = rates[q], keep = 1.0f / (1.0f - rate);
        be1->dropout_forward(be1, n, rate, 7, dx, dy1, dm1);
        float *y = tt_host_copy(be1, dy1, bytes), *m = tt_host_copy(be1, dm1, bytes);
        size_t dropped = 0, pairs = 0, bad_m = 0, bad_y = 0;
        double sum_x = 0.0, sum_y = 0.0, sum_m = 0.0;
        for (size_t i = 0; i < n; i++) {
            dropped += m[i] == 0.0f;
            bad_m += m[i] != 0.0f && m[i] != keep;
            bad_y += y[i] != x[i] * m[i];
            pairs += i + 1 < n && m[i] == 0.0f && m[i + 1] == 0.0f;
            sum_x += x[i];
            sum_y += y[i];
            sum_m += m[i];
        }
        double frac = (double)dropped / n, pfrac = (double)pairs / (n - 1);
        double sd = sqrt(rate * (1.0 - rate) / n);   /* of the fraction dropped */
        double msd = sqrt(rate / (1.0 - rate) / n);  /* of the mean of the mask */
        tt_ok(fabs(frac - rate) < 5 * sd, "dropout %.2f: dropped fraction %.5f over 1e6 + 3 "
              "(rate +- 5 sd = %.1e)", rate, frac, 5 * sd);
        tt_ok(fabs(pfrac - (double)rate * rate) < 3e-3,
              "dropout %.2f: neighbours dropped together %.5f ~ rate^2 (independent)", rate,
              pfrac);
        tt_ok(bad_m == 0, "dropout %.2f: mask values are 0 or 1/(1-rate) = %.6f (%zu wrong)",
              rate, keep, bad_m);
        tt_ok(bad_y == 0, "dropout %.2f: y = x * mask (%zu wrong)", rate, bad_y);
        tt_ok(fabs(sum_m / n - 1.0) < 5 * msd,
              "dropout %.2f: E[mask] = %.5f ~ 1 within 5 sd (inverted dropout)", rate,
              sum_m / n);
        /* sum y / sum x: the mask's mean weighted by x, whose rms/mean is 1.04 */
        tt_ok(fabs(sum_y / sum_x - 1.0) < 4.5 * 1.04 * msd,
              "dropout %.2f: expectation preserved (sum y / sum x = %.5f, 4.5 sd %.1e)", rate,
              sum_y / sum_x, 4.5 * 1.04 * msd);

        be1->dropout_forward(be1, n, rate, 7, dx, dy2, dm2);
        float *y2 = tt_host_copy(be1, dy2, bytes), *m2 = tt_host_copy(be1, dm2, bytes);
        tt_ok(tt_same_bits(y, y2, n) && tt_same_bits(m, m2, n),
              "dropout %.2f: same seed, same mask and output", rate);
        free(y2);
        free(m2);
        be2->dropout_forward(be2, n, rate, 7, dx, dy2, dm2);
        y2 = tt_host_copy(be1, dy2, bytes);
        m2 = tt_host_copy(be1, dm2, bytes);
        tt_ok(tt_same_bits(y, y2, n) && tt_same_bits(m, m2, n),
              "dropout %.2f: same bits on 2 threads", rate);
        free(y2);
        free(m2);
        be1->dropout_forward(be1, 1000, rate, 7, dx, dy2, dm2);
        m2 = tt_host_copy(be1, dm2, 1000 * sizeof(float));
        tt_ok(tt_same_bits(m, m2, 1000),
              "dropout %.2f: element i depends on (seed, i) only (prefix of a longer call)",
              rate);
        free(m2);
        be1->dropout_forward(be1, n, rate, 8, dx, dy2, dm2);
        m2 = tt_host_copy(be1, dm2, bytes);
        size_t differ = 0;
        for (size_t i = 0; i < n; i++)
            differ += (m[i] == 0.0f) != (m2[i] == 0.0f);
        double want = 2.0 * rate * (1.0 - rate);
        tt_ok(fabs((double)differ / n - want) < 5e-3,
              "dropout %.2f: another seed, an independent mask (%.4f differ, want ~%.4f)", rate,
              (double)differ / n, want);
        free(m2);
        free(y);
        free(m);
    }
    be1->free(be1, dx);
    be1->free(be1, dy1);
    be1->free(be1, dm1);
    be1->free(be1, dy2);
    be1->free(be1, dm2);
    free(x);
}

/* ---- max pooling's 2x2 fast path ---- */

/* Max pooling with the 2x2, stride 2 window (LeNet's and the vectorised
 * path): values from {0, 1, 2} make ties common, so the index shows whether
 * the first maximum wins; NaNs in some windows must propagate with the first
 * NaN's index (PyTorch). Rows of 1 to 33 windows cover the masked short rows
 * and the 16-wide steps. The reference is the window scanned in order. */
static void test_maxpool_2x2(void)
{
    backend_t *be = be2;
    tt_rng rng = tt_rng_make(0x22);
    const int widths[] = {2, 6, 10, 28, 30, 32, 34, 40, 66, 67};
    int bad_y = 0, bad_m = 0, checked = 0, nans = 0;
    for (size_t wi = 0; wi < sizeof(widths) / sizeof(widths[0]); wi++) {
        window_desc d = {.n = 2, .c = 3, .h = 9, .w = widths[wi], .k = 2, .stride = 2, .pad = 0};
        d.f = d.c;
        d.oh = window_out_size(d.h, 2, 2, 0);
        d.ow = window_out_size(d.w, 2, 2, 0);
        size_t in = (size_t)d.n * d.c * d.h * d.w, out = (size_t)d.n * d.c * d.oh * d.ow;
        float *x = malloc(in * sizeof(float));
        for (size_t i = 0; i < in; i++)
            x[i] = (float)tt_below(&rng, 3);
        for (size_t i = 0; i < (size_t)d.h * d.w; i += 37) /* first plane only: */
            x[i] = NAN; /* the other rows stay on the fast path */
        float *dx = tt_dev_copy(be, x, in * sizeof(float));
        float *dy = tt_dev_copy(be, NULL, out * sizeof(float));
        int32_t *dm = tt_dev_copy(be, NULL, out * sizeof(int32_t));
        be->maxpool_forward(be, &d, dx, dy, dm);
        float *y = tt_host_copy(be, dy, out * sizeof(float));
        int32_t *m = tt_host_copy(be, dm, out * sizeof(int32_t));
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
}

/* ---- batchnorm and global average pooling over the blocked layout, in
 *      nChw16c and NHWC order (backend.h), against the NCHW operations ---- */

/* One forward (training, relu) and backward on NCHW data; layout 0: the
 * NCHW operations, 1: blocked nChw16c, 2: blocked NHWC. Results in NCHW. */
static void bn_run(backend_t *be, int layout, int n, int c, int hw, const float *x,
                   const float *gamma, const float *beta, const float *dy, bn_out *o)
{
    size_t count = (size_t)n * c * hw;
    if (layout == 0) {
        float *g = malloc(count * 4);
        memcpy(g, dy, count * 4);
        be->batchnorm_forward(be, n, c, hw, x, gamma, beta, o->rmean, o->rvar, 0.1f, 1e-5f, true,
                              true, o->y, o->mean, o->invstd);
        be->batchnorm_backward(be, n, c, hw, x, gamma, o->mean, o->invstd, o->y, true, g, o->dx,
                               o->dgamma, o->dbeta);
        free(g);
        return;
    }
    bn_run_blocked(be, layout == 2, false, n, c, hw, x, gamma, beta, dy, o);
}

static void test_blocked_orders(void)
{
    tt_rng rng = tt_rng_make(0xb10c);
    /* 3 blocks of channels; 37 pixels: a tail past the 16-pixel lanes */
    const int n = 3, c = 48, hw = 37;
    size_t count = (size_t)n * c * hw;
    float *x = malloc(count * 4), *dy = malloc(count * 4), gamma[48], beta[48];
    bn_inputs_fill(&rng, count, c, x, dy, gamma, beta);
    for (int th = 0; th < 2; th++) {
        backend_t *be = th ? be2 : be1;
        bn_out o[3];
        for (int layout = 0; layout < 3; layout++) {
            o[layout] = bn_out_make(count, c);
            bn_run(be, layout, n, c, hw, x, gamma, beta, dy, &o[layout]);
        }
        for (int layout = 1; layout < 3; layout++) {
            const char *name = layout == 1 ? "nChw16c" : "NHWC";
            tt_ok(tt_same_bits(o[0].y, o[layout].y, count) &&
                      tt_same_bits(o[0].mean, o[layout].mean, c) &&
                      tt_same_bits(o[0].invstd, o[layout].invstd, c) &&
                      tt_same_bits(o[0].rmean, o[layout].rmean, c) &&
                      tt_same_bits(o[0].rvar, o[layout].rvar, c),
                  "batchnorm+relu forward, blocked %s, %d thread(s): NCHW's bits", name, th + 1);
            tt_ok(tt_same_bits(o[0].dx, o[layout].dx, count) &&
                      tt_same_bits(o[0].dgamma, o[layout].dgamma, c) &&
                      tt_same_bits(o[0].dbeta, o[layout].dbeta, c),
                  "batchnorm+relu backward, blocked %s, %d thread(s): NCHW's bits", name, th + 1);
        }
        for (int layout = 0; layout < 3; layout++)
            bn_out_free(&o[layout]);
        /* global average pooling: both orders, the same bits */
        float *gy[2], *gdx[2], *bx = malloc(count * 4), *bdx = malloc(count * 4);
        float *g = malloc((size_t)n * c * 4);
        tt_fill(&rng, g, (size_t)n * c, -1.0, 1.0);
        for (int o2 = 0; o2 < 2; o2++) {
            bool saved = be->blocked_nhwc;
            be->blocked_nhwc = o2 == 1;
            gy[o2] = malloc((size_t)n * c * 4);
            gdx[o2] = malloc(count * 4);
            to_blocked(x, n, c, hw, o2 == 1, bx);
            be->global_avgpool_blocked_forward(be, n, c, hw, bx, gy[o2]);
            be->global_avgpool_blocked_backward(be, n, c, hw, g, bdx);
            from_blocked(bdx, n, c, hw, o2 == 1, gdx[o2]);
            be->blocked_nhwc = saved;
        }
        double err = 0;
        for (int i = 0; i < n; i++)
            for (int ch = 0; ch < c; ch++) {
                double s = 0;
                for (int p = 0; p < hw; p++)
                    s += x[((size_t)i * c + ch) * hw + p];
                double d = fabs(gy[1][i * c + ch] - s / hw);
                err = d > err ? d : err;
            }
        tt_ok(tt_same_bits(gy[0], gy[1], (size_t)n * c) && tt_same_bits(gdx[0], gdx[1], count) &&
                  err < 1e-5 && gdx[1][hw + 5] == g[1] / (float)hw,
              "global average pooling, blocked NHWC = nChw16c bits, %d thread(s) (err %.2g)",
              th + 1, err);
        for (int o2 = 0; o2 < 2; o2++)
            free(gy[o2]), free(gdx[o2]);
        free(bx), free(bdx), free(g);
    }
    free(x), free(dy);
}

int main(void)
{
    signal(SIGALRM, on_alarm);
    alarm(ALARM_S);
    be1 = tt_cpu_backend(1);
    be2 = tt_cpu_backend(2);
    if (!tt_ok(be1 != NULL && be2 != NULL && strcmp(be1->name, "cpu") == 0 &&
                   strcmp(be2->name, "cpu") == 0 && be1->threads == 1 && be2->threads == 2,
               "CPU backends named cpu with 1 and 2 threads"))
        return tt_done();
    test_create_and_memory();
    test_threadpool();
    /* the kernels at every instruction-set level this CPU has (as
     * TT_CPU_ISA would cap them), each against the references above */
    for (int level = CPU_ISA_PLAIN; level <= (int)cpu_isa_detected(); level++) {
        cpu_isa_set_for_test((cpu_isa_t)level);
        tt_ok(cpu_isa() == (cpu_isa_t)level, "level %s: the checks below run at it (CPU: %s)",
              cpu_isa_name((cpu_isa_t)level), cpu_isa_name(cpu_isa_detected()));
        test_softmax_xent();
        test_elementwise();
        test_optimizer_steps();
        test_dropout();
        test_maxpool_2x2();
        test_blocked_orders();
    }
    be1->destroy(be1);
    be2->destroy(be2);
    return tt_done();
}
