/* test_device_spans.c - a device row's spans (train/device_spans.h) on the
 * simulated GPU: spans measured on the device and read back on the host
 * clock, and the events trace_continue and trace_end_with_last share. A span that continues the last
 * one begins at that span's closing event: the two abut exactly, and a pass
 * of N spans takes N + 1 events, so a pool of 4 events holds 3 continued
 * spans where it holds 2 begun afresh (were the event not shared, the third
 * span would be dropped and counted). Continuing after another span began
 * on the row (a parent, then its first child) takes a new event: the child
 * never begins before its parent. */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "backend/backend.h"
#include "train/device_spans.h"
#include "tt_test.h"
#include "util/trace.h"

#define FLOATS (1u << 20)

/* some device work, so that the sim device's clock moves */
static void work(backend_t *be, float *x)
{
    be->scale(be, FLOATS, 1.0f, x);
}

static void span(int64_t t0, const char *name)
{
    trace_end_full(TRACE_ROW_NONE, t0, TRACE_CAT_FORWARD, name, -1, NULL, NULL, NULL, 0);
}

/* Records n spans one after another on a fresh window (continued: each
 * after the first begun with trace_continue) and reads them back. Returns
 * the spans kept. */
static size_t pass(backend_t *be, device_spans *s, float *x, int n, bool continued,
                   const trace_event **ev)
{
    static const char *names[] = {"a", "b", "c", "d", "e", "f"};
    trace_start();
    for (int i = 0; i < n; i++) {
        int64_t t0 = i > 0 && continued ? trace_continue() : trace_begin();
        work(be, x);
        span(t0, names[i]);
    }
    trace_stop();
    device_spans_flush(&s, 1);
    size_t count;
    *ev = trace_row_events(TRACE_ROW_TOWER, &count);
    return count;
}

int main(void)
{
    tt_err err = {0};
    backend_t *be = backend_sim_create(0, "fp32", &err);
    if (!tt_ok(be != NULL, "a sim backend (%s)", err.msg))
        return tt_done();
    float *x = be->alloc(be, FLOATS * sizeof(float));
    device_spans *s = device_spans_create_on(be, TRACE_ROW_TOWER, 4, NULL, NULL);
    if (!tt_ok(x != NULL && s != NULL, "a buffer and a row of 4 events"))
        return tt_done();
    trace_set_row(TRACE_ROW_TOWER);
    device_spans_prepare(s);

    const trace_event *ev;
    size_t n = pass(be, s, x, 3, false, &ev);
    tt_ok(n == 2 && trace_dropped() == 1,
          "spans begun afresh: 4 events hold 2 spans, the third dropped and counted "
          "(%zu kept, %zu dropped)", n, trace_dropped());

    n = pass(be, s, x, 3, true, &ev);
    bool abut = n == 3;
    for (size_t i = 1; abut && i < n; i++)
        abut = ev[i].ts_ns == ev[i - 1].ts_ns + ev[i - 1].dur_ns && ev[i].dur_ns > 0;
    tt_ok(n == 3 && trace_dropped() == 0,
          "continued spans: 4 events hold 3 spans (%zu kept, %zu dropped)", n, trace_dropped());
    tt_ok(abut, "each continued span begins exactly where the last one ended, on the device's "
                "clock, and lasts as long as its work");

    /* a 4th continued span: its begin is shared, its end has no event left */
    n = pass(be, s, x, 4, true, &ev);
    tt_ok(n == 3 && trace_dropped() == 1,
          "a 4th continued span finds the pool spent: dropped and counted (%zu, %zu)", n,
          trace_dropped());

    /* a parent, then its first child continued: no shared event (the last
     * event of the row is the parent's begin, not a span's end) */
    device_spans *big = device_spans_create_on(be, TRACE_ROW_TOWER, 16, NULL, NULL);
    trace_start();
    int64_t t0 = trace_begin();
    work(be, x);
    span(t0, "before");
    int64_t parent = trace_begin();
    work(be, x);
    int64_t child = trace_continue();
    work(be, x);
    span(child, "child");
    span(parent, "parent");
    trace_stop();
    device_spans_flush(&big, 1);
    ev = trace_row_events(TRACE_ROW_TOWER, &n);
    const trace_event *p = NULL, *c = NULL, *b = NULL;
    for (size_t i = 0; i < n; i++) {
        if (strcmp(ev[i].name, "parent") == 0)
            p = &ev[i];
        else if (strcmp(ev[i].name, "child") == 0)
            c = &ev[i];
        else if (strcmp(ev[i].name, "before") == 0)
            b = &ev[i];
    }
    tt_ok(p && c && b && c->ts_ns > p->ts_ns && p->ts_ns >= b->ts_ns + b->dur_ns &&
              c->ts_ns + c->dur_ns <= p->ts_ns + p->dur_ns,
          "a span continued after a parent began takes a new event: it nests in the parent, "
          "which follows the span before");
    device_spans_free(big);

    /* a group's spans end together (trace_end_with_last): a pool of 2 events
     * holds two spans of one begin and one end; ended apart, the second
     * finds the pool spent */
    device_spans *two = device_spans_create_on(be, TRACE_ROW_TOWER, 2, NULL, NULL);
    for (int shared = 0; shared < 2; shared++) {
        trace_start();
        t0 = trace_begin();
        work(be, x);
        span(t0, "g0");
        (shared ? trace_end_with_last : trace_end_full)(TRACE_ROW_NONE, t0, TRACE_CAT_ALLREDUCE,
                                                        "g1", -1, NULL, NULL, NULL, 0);
        trace_stop();
        device_spans_flush(&two, 1);
        ev = trace_row_events(TRACE_ROW_TOWER, &n);
        if (shared)
            tt_ok(n == 2 && trace_dropped() == 0 && ev[0].ts_ns == ev[1].ts_ns &&
                      ev[0].dur_ns == ev[1].dur_ns && ev[0].dur_ns > 0,
                  "spans ended with trace_end_with_last share the closing event: 2 events hold "
                  "both, the same begin and end (%zu kept, %zu dropped)", n, trace_dropped());
        else
            tt_ok(n == 1 && trace_dropped() == 1,
                  "ended apart, the second span needs a third event: dropped and counted (%zu, "
                  "%zu)", n, trace_dropped());
    }
    device_spans_free(two);

    /* host rows: a continued span begins at the last one's end time */
    trace_set_row(TRACE_ROW_TRAINER);
    trace_start();
    t0 = trace_begin();
    span(t0, "h1");
    t0 = trace_continue();
    span(t0, "h2");
    t0 = trace_begin();
    span(t0, "h3");
    trace_end_with_last(TRACE_ROW_NONE, t0, TRACE_CAT_FORWARD, "h4", -1, NULL, NULL, NULL, 0);
    trace_stop();
    ev = trace_row_events(TRACE_ROW_TRAINER, &n);
    tt_ok(n == 4 && ev[1].ts_ns == ev[0].ts_ns + ev[0].dur_ns,
          "a host row's continued span begins at the last one's end");
    tt_ok(n == 4 && ev[3].ts_ns == ev[2].ts_ns && ev[3].dur_ns == ev[2].dur_ns,
          "a host row's span ended with trace_end_with_last ends where the last one did");
    int64_t last_end = n == 4 ? ev[3].ts_ns + ev[3].dur_ns : 0;
    nanosleep(&(struct timespec){0, 1000 * 1000}, NULL);
    trace_start();
    t0 = trace_continue();
    tt_ok(t0 > last_end, "in a new window trace_continue begins afresh, not at the last "
                         "window's end");
    trace_stop();

    device_spans_free(s);
    be->free(be, x);
    be->destroy(be);
    return tt_done();
}
