/* device_spans.c - a device tower's timeline spans as device events
 * (device_spans.h), written only against backend.h, so sim runs it. */
#include "train/device_spans.h"

#include <stdlib.h>

typedef struct {
    int begin, end;    /* event indices */
    trace_event meta;  /* name, category, args */
} kept_span;

struct device_spans {
    backend_t *be;
    int row;
    device_spans_record_fn record; /* NULL: on the compute queue */
    void *record_arg;
    trace_device sink;
    int pool;           /* events in the pool, the reference not counted */
    backend_event **ev; /* pool + 1 (the reference), made at first use */
    bool no_pool;       /* making it failed: spans dropped */
    int n_events;
    int last_end;       /* the event (index + 1) that closed the last span; 0: none */
    kept_span *spans;   /* pool: a span has its own closing event */
    int64_t *host_ns;   /* each event's time on the host clock (flush), 0: unknown */
    int n_spans;
    unsigned window;    /* trace_window() of the kept spans */
};

static void pool_free(device_spans *s)
{
    if (s->ev != NULL)
        for (int i = 0; i <= s->pool; i++)
            s->be->dev->event_free(s->be, s->ev[i]);
    free(s->ev);
    free(s->spans);
    free(s->host_ns);
    s->ev = NULL;
    s->spans = NULL;
    s->host_ns = NULL;
}

/* Once, before the window (device_spans_prepare) or at its first recorded
 * span (on the tower's thread, before its event is recorded: the device
 * does not wait for this). */
static bool pool_make(device_spans *s)
{
    tt_err err = {0};
    s->ev = calloc((size_t)s->pool + 1, sizeof(*s->ev));
    s->spans = calloc((size_t)s->pool, sizeof(*s->spans));
    s->host_ns = calloc((size_t)s->pool, sizeof(*s->host_ns));
    bool ok = s->ev != NULL && s->spans != NULL && s->host_ns != NULL;
    for (int i = 0; ok && i <= s->pool; i++)
        ok = (s->ev[i] = s->be->dev->event_create(s->be, true, &err)) != NULL;
    if (!ok) {
        pool_free(s);
        s->no_pool = true;
    }
    return ok;
}

void device_spans_prepare(device_spans *s)
{
    if (s != NULL && s->ev == NULL && !s->no_pool)
        pool_make(s);
}

/* The next event of the window, recorded now on the row's queue: its
 * token (-(index + 1)), or 0. */
static int64_t record_next(device_spans *s, bool begin)
{
    if (s->window != trace_window()) { /* a new recording: the old spans are gone */
        s->window = trace_window();
        s->n_events = 0;
        s->n_spans = 0;
        s->last_end = 0;
    }
    if (s->ev == NULL && (s->no_pool || !pool_make(s)))
        return 0;
    if (s->n_events >= s->pool)
        return 0;
    tt_err err = {0};
    backend_t *be = s->be;
    backend_event *e = s->ev[s->n_events];
    if ((s->record != NULL ? s->record(s->record_arg, e, begin, &err)
                           : be->dev->event_record(be, e, be->dev->queue(be), &err)) != 0)
        return 0; /* the device's error ends the step; the span is dropped */
    return -(int64_t)(++s->n_events);
}

static int64_t span_begin(void *ctx)
{
    return record_next(ctx, true);
}

/* the row's last event (index + 1) when it closed a span of this window and
 * nothing was recorded since; else 0 */
static int last_end_event(const device_spans *s)
{
    return s->window == trace_window() && s->last_end > 0 && s->last_end == s->n_events
               ? s->last_end
               : 0;
}

static void span_end(void *ctx, int64_t token, const trace_event *span, bool with_last)
{
    device_spans *s = ctx;
    int begin = (int)(-token - 1);
    int last = with_last ? last_end_event(s) : 0;
    int64_t end = last > begin + 1 ? -(int64_t)last : record_next(s, false);
    if (end == 0 || begin >= s->n_events || s->n_spans >= s->pool) {
        trace_count_dropped(1);
        return;
    }
    s->spans[s->n_spans++] = (kept_span){begin, (int)(-end - 1), *span};
    s->last_end = (int)-end;
}

/* trace_continue: the last span's closing event, when it is the row's
 * latest event of this window (the caller vouches that nothing was queued
 * after it), as the next span's begin */
static int64_t span_resume(void *ctx)
{
    device_spans *s = ctx;
    int last = last_end_event(s);
    return last > 0 ? -(int64_t)last : record_next(s, true);
}

device_spans *device_spans_create(backend_t *be, int row)
{
    return device_spans_create_on(be, row, DEVICE_SPAN_EVENTS, NULL, NULL);
}

device_spans *device_spans_create_on(backend_t *be, int row, int events,
                                     device_spans_record_fn record, void *arg)
{
    if (events < 2)
        return NULL;
    device_spans *s = calloc(1, sizeof(*s));
    if (s == NULL)
        return NULL;
    s->be = be;
    s->row = row;
    s->pool = events;
    s->record = record;
    s->record_arg = arg;
    s->sink = (trace_device){s, span_begin, span_end, span_resume};
    trace_row_set_device(row, &s->sink);
    return s;
}

/* Row s's window on the host clock: every event's host time from one
 * elapsed time each against ref (done at ref_ns): a monotone function of
 * its device time, so spans nested on the device stay nested (a span's own
 * elapsed time, rounded apart, could cross its parent's end by the
 * rounding). */
static void row_put(device_spans *s, backend_event *ref, int64_t ref_ns)
{
    backend_t *be = s->be;
    tt_err err = {0};
    for (int i = 0; i < s->n_events; i++) {
        float before_ref;
        s->host_ns[i] = be->dev->event_elapsed_ms(be, s->ev[i], ref, &before_ref, &err) == 0
                            ? ref_ns - (int64_t)((double)before_ref * 1e6)
                            : 0;
    }
    for (int i = 0; i < s->n_spans; i++) {
        const kept_span *k = &s->spans[i];
        int64_t t0 = s->host_ns[k->begin], t1 = s->host_ns[k->end];
        if (t0 == 0 || t1 == 0) {
            trace_count_dropped(1);
            continue;
        }
        trace_event e = k->meta;
        e.ts_ns = t0;
        e.dur_ns = t1 > t0 ? t1 - t0 : 0;
        trace_put(s->row, &e);
    }
}

void device_spans_flush(device_spans *const *rows, int n_rows)
{
    device_spans *first = NULL;
    for (int r = 0; r < n_rows; r++) {
        device_spans *s = rows[r];
        if (s == NULL || s->window != trace_window())
            continue;
        /* the window's events, counted here once a row (not one atomic
         * add an event: the towers' threads would share its line) */
        trace_count_device_events((size_t)s->n_events);
        if (s->n_spans == 0)
            s->n_events = s->last_end = 0;
        else if (first == NULL)
            first = s;
    }
    if (first == NULL)
        return;
    backend_t *be = first->be;
    const backend_device_ops *dev = be->dev;
    backend_event *ref = first->ev[first->pool];
    /* the queue idle first, so that the reference completes as soon as it
     * is recorded: its host time is taken around that (one reference for
     * every row: sim's clock stands still while the device idles, so two
     * references taken one after the other would shift one row against
     * the other by the host's time between them) */
    tt_err err = {0};
    int64_t h0 = 0;
    bool ok = backend_device_wait(be, "timeline", &err) == 0 &&
              dev->event_record(be, ref, dev->queue(be), &err) == 0 &&
              (h0 = trace_clock_ns()) != 0 &&
              backend_device_wait_event(be, ref, "timeline", &err) == 0;
    int64_t ref_ns = h0 + (trace_clock_ns() - h0) / 2;
    for (int r = 0; r < n_rows; r++) {
        device_spans *s = rows[r];
        if (s == NULL || s->window != trace_window() || s->n_spans == 0)
            continue;
        if (ok)
            row_put(s, ref, ref_ns);
        else
            trace_count_dropped((size_t)s->n_spans);
        s->n_spans = 0;
        s->n_events = 0;
        s->last_end = 0;
    }
}

void device_spans_free(device_spans *s)
{
    if (s == NULL)
        return;
    trace_row_set_device(s->row, NULL);
    pool_free(s);
    free(s);
}
