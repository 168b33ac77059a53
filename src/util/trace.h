/* trace.h - spans on one time axis, for the timeline callback and `towertrain
 * profile` (towertrain.cfg(5), CALLBACKS: timeline; towertrain(1), profile).
 *
 * Recording costs nothing when off: a hook reads one global flag
 * (trace_begin returns 0) and trace_end does nothing for a span begun while
 * off. When on, a span is two clock reads and one store into its row's buffer.
 *
 * A row is one line of the timeline (a Chrome trace "tid"): the trainer, each
 * tower, each tower's all-reduce, each prefetch worker. Every row has ONE
 * writer at a time (the thread doing that row's work), so recording takes no
 * lock; a row's events are published with a release store of its count, and
 * read after trace_stop. A thread says which row it works for with
 * trace_set_row; a hook that knows its row passes it.
 *
 * Names are not copied: a span holds a pointer to a name that outlives the
 * recording (a layer's name in the model, a string literal), a number and a
 * suffix, and formats "<name>[ <number>][ <suffix>]" only when written out.
 * Args likewise: a function that prints them from (obj, n) at write time. */
#ifndef TT_TRACE_H
#define TT_TRACE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* A growing text buffer (malloc'd; oom set on a failed growth, after which
 * appends do nothing). */
typedef struct {
    char *p;
    size_t len, cap;
    bool oom;
} trace_text;
void trace_text_printf(trace_text *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
void trace_text_free(trace_text *b);

/* Events a row holds; later ones are dropped (and counted). A ResNet-20
 * tower makes ~130 a step, a prefetch worker two a sample: 64K hold hundreds
 * of steps (3.5 MiB, allocated only for the rows used). */
#define TRACE_ROW_CAPACITY 65536

/* Rows: fixed slots, so no hook looks anything up. */
#define TRACE_MAX_TOWERS 64
#define TRACE_MAX_WORKERS 64
enum {
    TRACE_ROW_NONE = -1,                    /* a thread with no row: spans dropped */
    TRACE_ROW_TRAINER = 0,
    TRACE_ROW_TOWER = 1,                    /* + tower index */
    TRACE_ROW_ALLREDUCE = 1 + TRACE_MAX_TOWERS, /* + tower index: that tower's packs */
    TRACE_ROW_WORKER = 1 + 2 * TRACE_MAX_TOWERS, /* + worker slot */
    TRACE_ROWS = 1 + 2 * TRACE_MAX_TOWERS + TRACE_MAX_WORKERS,
};

/* SPEC 9's categories. */
typedef enum {
    TRACE_CAT_FORWARD,
    TRACE_CAT_BACKWARD,
    TRACE_CAT_ALLREDUCE,
    TRACE_CAT_OPTIMIZER,
    TRACE_CAT_DATA,
    TRACE_CAT_TRAINER,
} trace_cat;

/* Prints a span's args (the members of a JSON object, without braces) into
 * b, from what the hook stored. */
typedef void (*trace_args_fn)(trace_text *b, const void *obj, int64_t n);

typedef struct {
    int64_t ts_ns, dur_ns;  /* CLOCK_MONOTONIC */
    const char *name;
    const char *suffix;     /* NULL: none */
    int64_t number;         /* < 0: none */
    trace_args_fn args;     /* NULL: no args */
    const void *obj;
    int64_t n;
    int cat;
} trace_event;

extern atomic_int trace_recording_flag;

static inline bool trace_recording(void)
{
    return atomic_load_explicit(&trace_recording_flag, memory_order_relaxed) != 0;
}

/* Monotonic nanoseconds (never 0). */
int64_t trace_clock_ns(void);

/* A row whose spans a device measures (a device tower's: the layers'
 * forward and backward, its step and its optimizer run on the device's
 * compute queue, and the host only queues them). Its spans begin with
 * begin(ctx), which records a device event and returns a token standing for
 * it (< 0; 0 when it cannot: the span is dropped and counted), and end with
 * end(ctx, token, span), which records the closing event and keeps the span
 * (its name, category and args; no times yet). After trace_stop the row's
 * owner reads the events back and stores the spans with trace_put, on the
 * host clock (src/train/device_spans.c). */
typedef struct {
    void *ctx;
    int64_t (*begin)(void *ctx);
    /* with_last: trace_end_with_last's end, at the event that closed the
     * row's last span when no event was recorded on the row since */
    void (*end)(void *ctx, int64_t token, const trace_event *span, bool with_last);
    /* trace_continue's begin: the token of the event that closed the row's
     * last span when no event was recorded on the row since, else begin(ctx) */
    int64_t (*resume)(void *ctx);
} trace_device;

/* Makes row a device row (NULL: a host row again, the default). Set before
 * the row's writers start, cleared after they end. */
void trace_row_set_device(int row, const trace_device *d);

/* The start of a span on the calling thread's row, or on row, while
 * recording. */
int64_t trace_begin_now(void);
int64_t trace_begin_now_on(int row);

/* The start of a span: its time while recording (a device row's token),
 * else 0. */
static inline int64_t trace_begin(void)
{
    return trace_recording() ? trace_begin_now() : 0;
}

/* The start of a span that follows the last span ended on the calling
 * thread's row with nothing between them: no work for the row's device
 * queued and no other span recorded on the row since (one layer after
 * another). It begins where that span ended: on a device row, at that
 * span's closing event, so that a pass of N layers takes N + 1 events
 * instead of 2N (each costs the host a driver call on a GPU); on a host
 * row, at its end time. Without such a span, as trace_begin. */
int64_t trace_continue_now(void);
static inline int64_t trace_continue(void)
{
    return trace_recording() ? trace_continue_now() : 0;
}

/* The start of a span of another row than the calling thread's (a device
 * tower's thread begins its all-reduce row's pack spans: on a device row,
 * that row's device measures them). */
static inline int64_t trace_begin_on(int row)
{
    return trace_recording() ? trace_begin_now_on(row) : 0;
}

/* The same on the host clock whatever the calling thread's row: for a span
 * that a thread working for a device row ends on a host row. */
static inline int64_t trace_begin_host(void)
{
    return trace_recording() ? trace_clock_ns() : 0;
}

/* Records the span [t0, now) on row (TRACE_ROW_NONE: the calling thread's
 * row) when it began while recording and recording goes on; on a device
 * row, a span begun with its token (a token ended on another row is
 * dropped and counted). */
void trace_end_full(int row, int64_t t0, trace_cat cat, const char *name, int64_t number,
                    const char *suffix, trace_args_fn args, const void *obj, int64_t n);

/* The same, ending where the last span ended on row when nothing was
 * queued for its device and no other span recorded there since (the packs
 * of one group, which end together): on a device row at that span's closing
 * event, no new one; on a host row at its end time. Otherwise as
 * trace_end_full. */
void trace_end_with_last(int row, int64_t t0, trace_cat cat, const char *name, int64_t number,
                         const char *suffix, trace_args_fn args, const void *obj, int64_t n);

static inline void trace_end(int row, int64_t t0, trace_cat cat, const char *name,
                             int64_t number)
{
    if (t0 != 0)
        trace_end_full(row, t0, cat, name, number, NULL, NULL, NULL, 0);
}

/* An all-reduce pack's args: obj its algorithm's name, n its bytes. */
void trace_args_pack(trace_text *b, const void *obj, int64_t n);

/* The calling thread's row (TRACE_ROW_NONE until set). */
void trace_set_row(int row);
int trace_current_row(void);

/* A free prefetch-worker row for the calling thread (its row from now on),
 * and its release when the worker ends. */
int trace_worker_row_take(void);
void trace_worker_row_release(int row);

/* Drops every recorded span and starts recording. */
int trace_start(void);
void trace_stop(void);
/* Counts trace_start calls: a device row's owner tells a new recording from
 * the one its kept spans belong to. */
unsigned trace_window(void);

/* Stores a finished span (times on the host clock) into row, after
 * trace_stop: a device row's spans read back. Dropped and counted when the
 * row is full. Only the row's owner calls it, while no span is recorded. */
void trace_put(int row, const trace_event *e);
/* Counts spans a device row had to drop. */
void trace_count_dropped(size_t n);

/* Events of one row, valid after trace_stop until the next trace_start. */
const trace_event *trace_row_events(int row, size_t *count);
/* The row's name: "trainer", "tower 0", "allreduce tower 0", "prefetch worker 0". */
void trace_row_name(int row, char *buf, size_t len);
/* Spans dropped because a row's buffer was full. */
size_t trace_dropped(void);
/* Adds n timing events a device row recorded in this window (the
 * timeline's device_events: what recording cost the devices' queues);
 * device_spans_flush counts each row's. */
void trace_count_device_events(size_t n);
size_t trace_device_events(void);

/* Appends this process's events as Chrome trace JSON objects (each preceded
 * by ",\n" unless *first), with pid, and times shifted by offset_ns and
 * relative to origin_ns, in microseconds; "M" events name the process
 * (process_name) and every row with events (thread_name). */
void trace_append_json(trace_text *b, bool *first, int pid, const char *process_name,
                       int64_t offset_ns, int64_t origin_ns);

/* The span's name as written: "<name>[ <number>][ <suffix>]". */
void trace_event_name(const trace_event *e, char *buf, size_t len);
const char *trace_cat_name(int cat);

#endif
