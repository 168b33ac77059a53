/* test_cpu_ops.c - the CPU backend's element-wise operations and loss, and the
 * thread pool under them, against float64 references written here:
 *   softmax_xent (loss sum, argmax with ties -> first index as torch.argmax,
 *   dlogits = (softmax - onehot)/n, logits around +-1000), relu forward and
 *   backward, axpy / scale / mul, dropout (fraction ~ rate over 1e6 elements,
 *   a pure function of (seed, i)), and threadpool_run running every task
 *   exactly once for many (ntasks, threads) pairs, fresh and reused pools.
 * Operations large enough to be split over threads are also checked for the
 * same bits on 1 and 2 threads.
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
#include "tt_test.h"
#include "util/rng.h"
#include "util/threadpool.h"

/* seconds before the watchdog fails the test (normally it takes ~3 s) */
#ifndef ALARM_S
#define ALARM_S 120
#endif

static backend_t *be1, *be2; /* 1 and 2 threads */

static void fill_uniform(rng_t *r, float *p, size_t n, float lo, float hi)
{
    for (size_t i = 0; i < n; i++)
        p[i] = rng_uniform_range(r, lo, hi);
}

/* ---- softmax cross-entropy ---- */

/* float64 reference: per-row loss -log softmax(z)[label], summed; argmax
 * is the first maximal index (torch.argmax); d = (softmax - onehot) / n. */
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

static void check_xent(const char *what, int n, int k, const float *z, const int32_t *lab)
{
    double rloss;
    int rcorrect;
    double *rd = malloc((size_t)n * k * sizeof(double));
    float *d = malloc((size_t)n * k * sizeof(float));
    ref_xent(n, k, z, lab, &rloss, &rcorrect, rd);
    for (size_t i = 0; i < (size_t)n * k; i++)
        d[i] = NAN;
    double loss = NAN, loss2 = NAN;
    int correct = -1, correct2 = -1;
    be1->softmax_xent(be1, n, k, z, lab, d, &loss, &correct);
    tt_ok(isfinite(loss) && fabs(loss - rloss) <= 1e-6 * fabs(rloss) + 1e-9,
          "softmax_xent %s: loss sum %.10g vs float64 %.10g", what, loss, rloss);
    tt_ok(correct == rcorrect, "softmax_xent %s: correct %d vs reference %d", what, correct,
          rcorrect);
    double num = 0.0, den = 0.0, rowsum = 0.0;
    for (int r = 0; r < n; r++) {
        double s = 0.0;
        for (int j = 0; j < k; j++) {
            size_t i = (size_t)r * k + j;
            double e = fabs((double)d[i] - rd[i]);
            if (!(e <= num))
                num = e;
            if (fabs(rd[i]) > den)
                den = fabs(rd[i]);
            s += d[i];
        }
        if (!(fabs(s) <= rowsum))
            rowsum = fabs(s);
    }
    tt_ok(num / (den + 1e-12) < 1e-6, "softmax_xent %s: dlogits vs float64 (err %.2e)", what,
          num / (den + 1e-12));
    tt_ok(rowsum < 1e-6 / n, "softmax_xent %s: every dlogits row sums to 0 (max %.2e)", what,
          rowsum);
    be1->softmax_xent(be1, n, k, z, lab, NULL, &loss2, &correct2);
    tt_ok(loss2 == loss && correct2 == correct,
          "softmax_xent %s: same loss and count without dlogits", what);
    free(rd);
    free(d);
}

static void test_softmax_xent(void)
{
    rng_t rng = rng_make(0x50f7, 0, 0);
    enum { N = 7, K = 10 };
    float z[N * K];
    int32_t lab[N];
    fill_uniform(&rng, z, N * K, -5.0f, 5.0f);
    for (int r = 0; r < N; r++)
        lab[r] = (int32_t)rng_below(&rng, K);
    lab[0] = 0; /* make sure some rows are right: set row 0's label to its argmax */
    for (int j = 1; j < K; j++)
        if (z[j] > z[lab[0]])
            lab[0] = j;
    check_xent("random 7x10", N, K, z, lab);

    /* ties: torch.argmax returns the first maximal index */
    const float tz[4 * 5] = {1, 3, 0, 3, 2,  /* max at 1 and 3 */
                             1, 3, 0, 3, 2,  /* same */
                             2, 2, 2, 2, 2,  /* all equal: 0 */
                             -1, -4, 5, 5, 5};
    const int32_t tl[4] = {1, 3, 0, 3};
    double loss;
    int correct = -1;
    be1->softmax_xent(be1, 4, 5, tz, tl, NULL, &loss, &correct);
    /* row 0 right (argmax 1), row 1 wrong (3 is not first), row 2 right (0), row 3 wrong (2) */
    tt_ok(correct == 2, "softmax_xent ties: first maximal index wins (correct %d, want 2)",
          correct);
    check_xent("ties", 4, 5, tz, tl);

    /* stability: logits around +-1000 */
    const float bz[4 * 4] = {1000, 999, -1000, 998,   -1000, -1000.5f, -999, -1001,
                             1000, -1000, 1000, -1000, 88.7f, 89.5f, -103.9f, 1000};
    const int32_t bl[4] = {0, 1, 2, 2};
    check_xent("logits +-1000", 4, 4, bz, bl);
    float dz[16];
    be1->softmax_xent(be1, 4, 4, bz, bl, dz, &loss, &correct);
    int finite = isfinite(loss);
    for (int i = 0; i < 16; i++)
        finite = finite && isfinite(dz[i]);
    tt_ok(finite && loss > 1100.0 && loss < 1110.0,
          "softmax_xent +-1000: finite loss and gradients (loss %.3f, row 3 alone costs ~1104)", loss);

    /* a bigger batch: one row per class */
    enum { N2 = 64, K2 = 100 };
    float *z2 = malloc(N2 * K2 * sizeof(float));
    int32_t lab2[N2];
    fill_uniform(&rng, z2, N2 * K2, -30.0f, 30.0f);
    for (int r = 0; r < N2; r++)
        lab2[r] = (int32_t)rng_below(&rng, K2);
    check_xent("random 64x100, logits +-30", N2, K2, z2, lab2);
    free(z2);
}

/* ---- relu, axpy, scale, mul ---- */

#define BIG 100003 /* over 2 chunks of the backend, so 2 threads split it */

static void test_elementwise(void)
{
    rng_t rng = rng_make(0xe1e, 0, 0);
    float *x = malloc(BIG * sizeof(float)), *y = malloc(BIG * sizeof(float));
    float *dy = malloc(BIG * sizeof(float)), *a = malloc(BIG * sizeof(float));
    float *b = malloc(BIG * sizeof(float)), *c = malloc(BIG * sizeof(float));
    fill_uniform(&rng, x, BIG, -2.0f, 2.0f);
    fill_uniform(&rng, dy, BIG, -1.0f, 1.0f);
    for (int i = 0; i < BIG; i += 97)
        x[i] = 0.0f; /* exact zeros: relu'(0) = 0, as torch */

    be1->relu_forward(be1, BIG, x, y);
    int ok = 1;
    for (int i = 0; i < BIG; i++)
        if (y[i] != (x[i] > 0.0f ? x[i] : 0.0f))
            ok = 0;
    tt_ok(ok, "relu_forward: y = max(x, 0) over %d elements", BIG);
    be2->relu_forward(be2, BIG, x, a);
    tt_ok(memcmp(a, y, BIG * sizeof(float)) == 0, "relu_forward: same bits on 2 threads");
    be1->relu_backward(be1, BIG, y, dy, b);
    ok = 1;
    for (int i = 0; i < BIG; i++)
        if (b[i] != (x[i] > 0.0f ? dy[i] : 0.0f))
            ok = 0;
    tt_ok(ok, "relu_backward: dx = dy where x > 0, else 0 (including x = 0)");
    be2->relu_backward(be2, BIG, y, dy, c);
    tt_ok(memcmp(b, c, BIG * sizeof(float)) == 0, "relu_backward: same bits on 2 threads");

    /* axpy: y += alpha x, one float rounding from the float64 value */
    const float alpha = -0.37f;
    memcpy(a, dy, BIG * sizeof(float));
    memcpy(b, dy, BIG * sizeof(float));
    be1->axpy(be1, BIG, alpha, x, a);
    be2->axpy(be2, BIG, alpha, x, b);
    ok = 1;
    for (int i = 0; i < BIG; i++) {
        double ref = (double)dy[i] + (double)alpha * x[i];
        double tol = 2.4e-7 * (fabs(dy[i]) + fabs((double)alpha * x[i])) + 1e-30;
        if (!(fabs(a[i] - ref) <= tol))
            ok = 0;
    }
    tt_ok(ok, "axpy: y += alpha x vs float64");
    tt_ok(memcmp(a, b, BIG * sizeof(float)) == 0, "axpy: same bits on 2 threads");

    memcpy(a, x, BIG * sizeof(float));
    memcpy(b, x, BIG * sizeof(float));
    be1->scale(be1, BIG, 3.1f, a);
    be2->scale(be2, BIG, 3.1f, b);
    ok = 1;
    for (int i = 0; i < BIG; i++) {
        double ref = (double)x[i] * 3.1f;
        if (!(fabs(a[i] - ref) <= 6e-8 * fabs(ref)))
            ok = 0;
    }
    tt_ok(ok, "scale: x *= alpha vs float64");
    tt_ok(memcmp(a, b, BIG * sizeof(float)) == 0, "scale: same bits on 2 threads");

    be1->mul(be1, BIG, x, dy, a);
    be2->mul(be2, BIG, x, dy, b);
    ok = 1;
    for (int i = 0; i < BIG; i++) {
        double ref = (double)x[i] * dy[i];
        if (!(fabs(a[i] - ref) <= 6e-8 * fabs(ref)))
            ok = 0;
    }
    tt_ok(ok, "mul: y = a * b vs float64");
    tt_ok(memcmp(a, b, BIG * sizeof(float)) == 0, "mul: same bits on 2 threads");

    /* small and empty counts: only the first `count` elements change */
    memcpy(a, x, 8 * sizeof(float));
    be1->axpy(be1, 3, 1.0f, dy, a);
    be1->scale(be1, 0, 5.0f, a);
    tt_ok(a[0] == x[0] + dy[0] && a[2] == x[2] + dy[2] && a[3] == x[3] && a[7] == x[7],
          "axpy over 3 elements touches 3; scale over 0 touches none");
    free(x);
    free(y);
    free(dy);
    free(a);
    free(b);
    free(c);
}

/* ---- dropout ---- */

static void test_dropout(void)
{
    const size_t n = 1000000;
    float *x = malloc(n * sizeof(float)), *y = malloc(n * sizeof(float));
    float *m = malloc(n * sizeof(float)), *y2 = malloc(n * sizeof(float));
    float *m2 = malloc(n * sizeof(float));
    rng_t rng = rng_make(0xd409, 0, 0);
    fill_uniform(&rng, x, n, 0.5f, 1.5f);
    const float rates[2] = {0.3f, 0.5f};
    for (int q = 0; q < 2; q++) {
        float rate = rates[q];
        be1->dropout_forward(be1, n, rate, 7, x, y, m);
        size_t dropped = 0, pairs = 0;
        int values = 1, prod = 1;
        float keep = 1.0f / (1.0f - rate);
        double sum_x = 0.0, sum_y = 0.0;
        for (size_t i = 0; i < n; i++) {
            if (m[i] == 0.0f)
                dropped++;
            else if (fabs((double)m[i] - 1.0 / (1.0 - rate)) > 1e-6)
                values = 0;
            if (y[i] != x[i] * m[i])
                prod = 0;
            if (i + 1 < n && m[i] == 0.0f && m[i + 1] == 0.0f)
                pairs++;
            sum_x += x[i];
            sum_y += y[i];
        }
        double frac = (double)dropped / n, pfrac = (double)pairs / (n - 1);
        /* binomial standard error sqrt(r(1-r)/n) < 5e-4: allow 6 of them */
        tt_ok(fabs(frac - rate) < 3e-3, "dropout rate %.1f: dropped fraction %.5f over 1e6",
              rate, frac);
        tt_ok(fabs(pfrac - (double)rate * rate) < 3e-3,
              "dropout rate %.1f: neighbours dropped together %.5f ~ rate^2 (independent)", rate,
              pfrac);
        tt_ok(values, "dropout rate %.1f: mask values are 0 or 1/(1-rate) = %.6f", rate, keep);
        tt_ok(prod, "dropout rate %.1f: y = x * mask", rate);
        tt_ok(fabs(sum_y / sum_x - 1.0) < 5e-3,
              "dropout rate %.1f: expectation preserved (sum y / sum x = %.5f)", rate,
              sum_y / sum_x);

        be1->dropout_forward(be1, n, rate, 7, x, y2, m2);
        tt_ok(memcmp(y, y2, n * sizeof(float)) == 0 && memcmp(m, m2, n * sizeof(float)) == 0,
              "dropout rate %.1f: same seed, same mask and output", rate);
        be2->dropout_forward(be2, n, rate, 7, x, y2, m2);
        tt_ok(memcmp(y, y2, n * sizeof(float)) == 0 && memcmp(m, m2, n * sizeof(float)) == 0,
              "dropout rate %.1f: same bits on 2 threads", rate);
        be1->dropout_forward(be1, 1000, rate, 7, x, y2, m2);
        tt_ok(memcmp(m, m2, 1000 * sizeof(float)) == 0,
              "dropout rate %.1f: element i depends on (seed, i) only (prefix of a longer call)",
              rate);
        be1->dropout_forward(be1, n, rate, 8, x, y2, m2);
        size_t differ = 0;
        for (size_t i = 0; i < n; i++)
            differ += (m[i] == 0.0f) != (m2[i] == 0.0f);
        double want = 2.0 * rate * (1.0 - rate);
        tt_ok(fabs((double)differ / n - want) < 5e-3,
              "dropout rate %.1f: another seed, another mask (%.4f differ, want ~%.4f)", rate,
              (double)differ / n, want);
    }
    free(x);
    free(y);
    free(m);
    free(y2);
    free(m2);
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

int main(void)
{
    signal(SIGALRM, on_alarm);
    alarm(ALARM_S);
    tt_err err = {0};
    be1 = backend_cpu_create(0, 1, &err);
    be2 = backend_cpu_create(0, 2, &err);
    if (!tt_ok(be1 != NULL && be2 != NULL, "CPU backends with 1 and 2 threads %s", err.msg))
        return tt_done();
    test_threadpool();
    test_softmax_xent();
    test_elementwise();
    test_dropout();
    be1->destroy(be1);
    be2->destroy(be2);
    return tt_done();
}
