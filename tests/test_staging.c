/* test_staging.c - backend.h's queues, events and asynchronous copies, and
 * the staged input written on them (staging.h), on the simulated GPU, whose
 * queues are threads of their own: a copy queue and the compute queue run
 * at once, so only the events order them.
 *
 * The staged batches are large (16 MiB) and the compute queue reads the
 * LAST float of each first: were the compute queue's wait for the copy
 * event missing (staging.c's queue_wait_event on dev->queue), the read
 * would run while the copy queue is still writing the batch and see the
 * slot's older contents (checked: with that line removed, 6 of the 8 steps
 * read a stale value), and under ThreadSanitizer (make check-tsan) it is a
 * data race (checked: TSan reports the copy queue's memcpy racing with the
 * compute queue's read, exit 66). */
#include <string.h>
#include <time.h>

#include "backend/backend.h"
#include "backend/staging.h"
#include "tt_test.h"

#define FLOATS (4u << 20) /* 16 MiB a batch */
#define STEPS 8

/* The primitives themselves: a copy on another queue, ordered before the
 * compute queue's read by an event; events' state and elapsed times. */
static void test_primitives(backend_t *be)
{
    const backend_device_ops *dev = be->dev;
    tt_err err = {0};
    backend_queue *q = dev->queue_create(be, &err);
    backend_event *copied = dev->event_create(be, false, &err);
    backend_event *t0 = dev->event_create(be, true, &err), *t1 = dev->event_create(be, true, &err);
    float *host = dev->host_alloc(be, FLOATS * sizeof(float), &err);
    float *dev_a = be->alloc(be, FLOATS * sizeof(float)), *dev_b = be->alloc(be, sizeof(float));
    if (!tt_ok(q && copied && t0 && t1 && host && dev_a && dev_b,
               "a queue, events, pinned and device memory (%s)", err.msg))
        return;
    tt_ok(dev->queue(be) != NULL && dev->queue(be) != q, "the compute queue is not the new one");
    tt_ok(dev->event_query(be, copied, &err) == 1, "an event never recorded is done");
    for (size_t i = 0; i < FLOATS; i++)
        host[i] = (float)(i % 1000);
    host[FLOATS - 1] = 42.0f;
    int rc = dev->event_record(be, t0, dev->queue(be), &err);
    rc |= dev->copy_h2d_async(be, dev_a, host, FLOATS * sizeof(float), q, &err);
    rc |= dev->event_record(be, copied, q, &err);
    rc |= dev->queue_wait_event(be, dev->queue(be), copied, &err);
    be->copy(be, dev_b, dev_a + FLOATS - 1, sizeof(float));
    rc |= dev->event_record(be, t1, dev->queue(be), &err);
    float got = 0.0f;
    be->download(be, &got, dev_b, sizeof(float)); /* waits for the compute queue */
    tt_ok(rc == 0 && got == 42.0f, "the compute queue reads the copy queue's copy after its "
          "event (read %g, want 42)", (double)got);
    tt_ok(backend_device_wait_event(be, copied, "test", &err) == 0 &&
              dev->event_query(be, copied, &err) == 1 && dev->event_query(be, t1, &err) == 1,
          "after the compute queue's wait, the copy event is done");
    float ms = -1.0f, back = 1.0f;
    rc = dev->event_elapsed_ms(be, t0, t1, &ms, &err);
    rc |= dev->event_elapsed_ms(be, t1, t0, &back, &err);
    tt_ok(rc == 0 && ms >= 0.0f && back == -ms,
          "elapsed time between two timing events: %g ms, and back %g", (double)ms,
          (double)back);
    tt_err e2 = {0};
    tt_ok(dev->event_elapsed_ms(be, copied, t1, &ms, &e2) != 0 && e2.msg[0] != '\0',
          "an event without timing has no elapsed time (%s)", e2.msg);
    /* device to host on the other queue, after the compute queue's write */
    float seven = 7.0f, back7 = 0.0f;
    float *pinned = dev->host_alloc(be, sizeof(float), &err);
    be->upload(be, dev_b, &seven, sizeof(float));
    rc = dev->event_record(be, copied, dev->queue(be), &err);
    rc |= dev->queue_wait_event(be, q, copied, &err);
    rc |= dev->copy_d2h_async(be, pinned, dev_b, sizeof(float), q, &err);
    rc |= dev->event_record(be, t1, q, &err);
    rc |= backend_device_wait_event(be, t1, "test", &err);
    back7 = rc == 0 ? *pinned : 0.0f;
    tt_ok(back7 == 7.0f, "a device-to-host copy on the copy queue after the compute queue's "
          "event (read %g)", (double)back7);
    dev->host_free(be, pinned);
    dev->queue_free(be, q);
    dev->event_free(be, copied);
    dev->event_free(be, t0);
    dev->event_free(be, t1);
    dev->host_free(be, host);
    be->free(be, dev_a);
    be->free(be, dev_b);
}

/* A fresh device's two queues on one clock (sim.h's sim_clock), as a GPU's
 * streams are: t0 on the compute queue, then a copy on the copy queue
 * (after t0) and tc after it, then t1 on the compute queue after tc:
 * t0 < tc <= t1. With a clock per queue (each its own run time, as sim had
 * it) t1 came out before tc by the copy's time: seen, -1.04 ms. And the
 * clock stands still while the device idles: two records on the compute
 * queue with the host asleep between and nothing queued are 0 ms apart. */
static void test_one_clock(void)
{
    tt_err err = {0};
    backend_t *be = backend_sim_create(1, "fp32", &err);
    if (!tt_ok(be != NULL, "a second sim backend (%s)", err.msg))
        return;
    const backend_device_ops *dev = be->dev;
    backend_queue *q = dev->queue_create(be, &err), *cq = dev->queue(be);
    backend_event *ev[5];
    for (int i = 0; i < 5; i++)
        ev[i] = dev->event_create(be, true, &err);
    float *host = dev->host_alloc(be, FLOATS * sizeof(float), &err);
    float *dst = be->alloc(be, FLOATS * sizeof(float));
    if (tt_ok(q && ev[0] && ev[1] && ev[2] && ev[3] && ev[4] && host && dst,
              "a copy queue, five timing events, buffers (%s)", err.msg)) {
        memset(host, 0, FLOATS * sizeof(float));
        int rc = dev->event_record(be, ev[0], cq, &err);
        rc |= dev->queue_wait_event(be, q, ev[0], &err);
        rc |= dev->copy_h2d_async(be, dst, host, FLOATS * sizeof(float), q, &err);
        rc |= dev->event_record(be, ev[1], q, &err);
        rc |= dev->queue_wait_event(be, cq, ev[1], &err);
        rc |= dev->event_record(be, ev[2], cq, &err);
        rc |= backend_device_wait_event(be, ev[2], "test", &err);
        float copy_ms = -1.0f, after_ms = -1.0f, idle_ms = -1.0f;
        rc |= dev->event_elapsed_ms(be, ev[0], ev[1], &copy_ms, &err);
        rc |= dev->event_elapsed_ms(be, ev[1], ev[2], &after_ms, &err);
        tt_ok(rc == 0 && copy_ms > 0.0f && after_ms >= 0.0f,
              "events of two queues on one clock: the copy queue's event %g ms after the "
              "compute queue's before it, and %g ms before the compute queue's after it (%s)",
              (double)copy_ms, (double)after_ms, err.msg);
        rc = dev->event_record(be, ev[3], cq, &err);
        rc |= backend_device_wait_event(be, ev[3], "test", &err);
        nanosleep(&(struct timespec){0, 20 * 1000 * 1000}, NULL);
        rc |= dev->event_record(be, ev[4], cq, &err);
        rc |= backend_device_wait_event(be, ev[4], "test", &err);
        rc |= dev->event_elapsed_ms(be, ev[3], ev[4], &idle_ms, &err);
        tt_ok(rc == 0 && idle_ms == 0.0f, "the device's clock stands still while it idles: "
              "%g ms between two records 20 ms apart on the host (%s)", (double)idle_ms,
              err.msg);
    }
    dev->queue_free(be, q);
    for (int i = 0; i < 5; i++)
        dev->event_free(be, ev[i]);
    dev->host_free(be, host);
    be->free(be, dst);
    be->destroy(be);
}

/* Eight steps through the staging: each batch holds step + 1 everywhere;
 * the compute queue copies the batch's last input float and its first
 * label out, then marks the batch consumed. */
static void test_staging(backend_t *be)
{
    tt_err err = {0};
    staging *s = staging_create(be, FLOATS * sizeof(float), 64 * sizeof(int32_t), &err);
    float *x = malloc(FLOATS * sizeof(float));
    int32_t y[64];
    float *out = be->alloc(be, STEPS * sizeof(float));
    int32_t *lab = be->alloc(be, STEPS * sizeof(int32_t));
    if (!tt_ok(s != NULL && x != NULL && out != NULL && lab != NULL, "a staging (%s)", err.msg)) {
        free(x);
        return;
    }
    int rc = 0;
    for (int step = 0; step < STEPS && rc == 0; step++) {
        for (size_t i = 0; i < FLOATS; i++)
            x[i] = (float)(step + 1);
        for (int i = 0; i < 64; i++)
            y[i] = step + 1;
        float *dx;
        int32_t *dy;
        rc = staging_load(s, step, x, FLOATS * sizeof(float), y, sizeof(y), &dx, &dy, &err);
        if (rc != 0)
            break;
        be->copy(be, out + step, dx + FLOATS - 1, sizeof(float));
        be->copy(be, lab + step, dy, sizeof(int32_t));
        rc = staging_done(s, &err);
    }
    tt_ok(rc == 0, "eight steps staged (%s)", err.msg);
    float got[STEPS];
    int32_t got_y[STEPS];
    be->download(be, got, out, sizeof(got));
    be->download(be, got_y, lab, sizeof(got_y));
    int wrong = 0;
    for (int step = 0; step < STEPS; step++)
        if (got[step] != (float)(step + 1) || got_y[step] != step + 1) {
            if (wrong++ == 0)
                tt_diag("step %d read input %g, label %d", step, (double)got[step],
                        (int)got_y[step]);
        }
    tt_ok(wrong == 0, "every step's compute reads its own batch, input and labels, after its "
          "copy (%d of %d read another)", wrong, STEPS);
    tt_err bad = {0};
    float *dx;
    int32_t *dy;
    tt_ok(staging_load(s, STEPS, x, FLOATS * sizeof(float) + 4, y, sizeof(y), &dx, &dy, &bad) !=
                  0 &&
              strstr(bad.msg, "larger than the staging buffers") != NULL,
          "a batch larger than the slots is refused (%s)", bad.msg);
    staging_free(s);
    be->free(be, out);
    be->free(be, lab);
    free(x);
    tt_ok(be->dev->sync(be, &err) == 0, "the device is without error after the staging's "
          "teardown (guards intact)");
}

int main(void)
{
    tt_err err = {0};
    backend_t *be = backend_sim_create(0, "fp32", &err);
    if (!tt_ok(be != NULL, "a sim backend (%s)", err.msg))
        return tt_done();
    test_primitives(be);
    test_one_clock();
    test_staging(be);
    be->destroy(be);
    return tt_done();
}
