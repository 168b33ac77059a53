/* device_spans.h - the timeline's spans of a device tower measured on the
 * device (util/trace.h's device rows): while the timeline records, each span
 * the tower's row begins and ends (every layer's forward and backward, the
 * step, the optimizer) is a timing event recorded on the tower's compute
 * queue before and after its work, from a pool made before the window
 * (device_spans_prepare) or else at its first recorded span (nothing at
 * all while nothing records; no allocation per step).
 * After the recorded window device_spans_flush reads the events back,
 * against one reference event whose host time was taken when it completed,
 * and stores the spans on the host clock: the layer spans are then the
 * device's time, not the host's time to queue the work.
 *
 * A row's events may be recorded on another queue of the device: a
 * tower's all-reduce row records them on the tower's communication queue
 * (backend_comm's record) around each group of packs, and they are read
 * against the same reference on the compute queue (a device's events are
 * on one clock, whatever their queue: CUDA's, sim_clock). */
#ifndef TT_DEVICE_SPANS_H
#define TT_DEVICE_SPANS_H

#include "backend/backend.h"
#include "util/trace.h"

/* Timing events in a tower row's pool: two a span, one where a span
 * continues the last (trace_continue: a pass's layers); the spans past it
 * in one window are dropped (and counted in the timeline's dropped_spans).
 * ResNet-50's step (129 layers not fused) takes ~265, so ~60 recorded
 * steps; an all-reduce row's spans are its groups of packs, a few a step:
 * it has a quarter. */
#define DEVICE_SPAN_EVENTS 16384
#define DEVICE_SPAN_EVENTS_COMM (DEVICE_SPAN_EVENTS / 4)

typedef struct device_spans device_spans;

/* The spans of row `row`, measured on be's compute queue with a pool of
 * DEVICE_SPAN_EVENTS; registers the row as a device row
 * (trace_row_set_device). NULL when out of memory. */
device_spans *device_spans_create(backend_t *be, int row);

/* The same with a pool of `events` (>= 2), each event recorded by
 * record(arg, e, begin, err) instead (0,
 * or -1 with err: the span is dropped), where the device's work for the
 * row is queued (begin: a span's first event); every event must be done
 * once the compute queue is (the row's queue joined into it, as
 * backend_comm's join does each step). */
typedef int (*device_spans_record_fn)(void *arg, backend_event *e, bool begin, tt_err *err);
device_spans *device_spans_create_on(backend_t *be, int row, int events,
                                     device_spans_record_fn record, void *arg);

/* Makes the row's pool of events now, as its first recorded span would (on
 * the thread that works on the device, while nothing records): so that the
 * window's first step does not pay for it (16385 events: ~11 ms on sim,
 * cudaEventCreate's time on a GPU). Nothing when made already. */
void device_spans_prepare(device_spans *s);

/* After trace_stop, with the tower's thread idle: waits for the compute
 * queue, reads the window's events of rows[0..n) (NULL ones skipped), rows
 * of ONE backend, against one reference event, and stores their spans with
 * trace_put. */
void device_spans_flush(device_spans *const *rows, int n);

/* Unregisters the row and frees the pool. */
void device_spans_free(device_spans *s);

#endif
