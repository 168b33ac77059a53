/* trace.c - the rows of spans behind trace.h. */
#include "util/trace.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/clock.h"

typedef struct {
    _Atomic(trace_event *) ev; /* allocated by the row's first writer */
    atomic_size_t count;
} trace_row;

atomic_int trace_recording_flag;
static trace_row rows[TRACE_ROWS];
static _Atomic(const trace_device *) devices[TRACE_ROWS];
static atomic_uint window;
static atomic_bool worker_taken[TRACE_MAX_WORKERS];
static atomic_size_t dropped;
static atomic_size_t device_events;
static _Thread_local int current_row = TRACE_ROW_NONE;
/* the end of the last span this thread stored on a host row, for
 * trace_continue: its row, window and time (0: none) */
static _Thread_local int last_end_row = TRACE_ROW_NONE;
static _Thread_local unsigned last_end_window;
static _Thread_local int64_t last_end_ns;

int64_t trace_clock_ns(void)
{
    int64_t t = clock_ns();
    return t != 0 ? t : 1;
}

void trace_set_row(int row)
{
    current_row = row;
}

int trace_current_row(void)
{
    return current_row;
}

int trace_worker_row_take(void)
{
    for (int i = 0; i < TRACE_MAX_WORKERS; i++) {
        bool no = false;
        if (atomic_compare_exchange_strong(&worker_taken[i], &no, true)) {
            current_row = TRACE_ROW_WORKER + i;
            return current_row;
        }
    }
    current_row = TRACE_ROW_NONE;
    return TRACE_ROW_NONE;
}

void trace_worker_row_release(int row)
{
    if (row >= TRACE_ROW_WORKER && row < TRACE_ROWS)
        atomic_store(&worker_taken[row - TRACE_ROW_WORKER], false);
    current_row = TRACE_ROW_NONE;
}

void trace_row_set_device(int row, const trace_device *d)
{
    if (row >= 0 && row < TRACE_ROWS)
        atomic_store(&devices[row], d);
}

static const trace_device *device_of(int row)
{
    return row >= 0 && row < TRACE_ROWS ? atomic_load_explicit(&devices[row], memory_order_acquire)
                                        : NULL;
}

int64_t trace_begin_now(void)
{
    return trace_begin_now_on(current_row);
}

/* The end time of the last span this thread stored on host row `row` in
 * this window, else 0. */
static int64_t host_last_end(int row)
{
    return last_end_row == row &&
                   last_end_window == atomic_load_explicit(&window, memory_order_relaxed)
               ? last_end_ns
               : 0;
}

/* A span's start on row: a device row's token (its begin, or with resume
 * its resume hook; 0 counted as dropped), a host row's time (with resume
 * the last span's end where there is one). */
static int64_t begin_on(int row, bool resume)
{
    const trace_device *d = device_of(row);
    if (d == NULL) {
        int64_t last = resume ? host_last_end(row) : 0;
        return last != 0 ? last : trace_clock_ns();
    }
    int64_t token = resume ? d->resume(d->ctx) : d->begin(d->ctx);
    if (token == 0)
        atomic_fetch_add(&dropped, 1);
    return token;
}

int64_t trace_begin_now_on(int row)
{
    return begin_on(row, false);
}

int64_t trace_continue_now(void)
{
    return begin_on(current_row, true);
}

void trace_count_dropped(size_t n)
{
    atomic_fetch_add(&dropped, n);
}

void trace_count_device_events(size_t n)
{
    atomic_fetch_add_explicit(&device_events, n, memory_order_relaxed);
}

size_t trace_device_events(void)
{
    return atomic_load(&device_events);
}

unsigned trace_window(void)
{
    return atomic_load(&window);
}

/* The row's next slot, its buffer allocated by its first writer; NULL
 * (counted) when full. */
static trace_event *row_slot(trace_row *r, size_t *i)
{
    trace_event *ev = atomic_load_explicit(&r->ev, memory_order_acquire);
    if (ev == NULL) { /* this row's only writer: no race on the allocation */
        if ((ev = malloc(TRACE_ROW_CAPACITY * sizeof(trace_event))) == NULL) {
            atomic_fetch_add(&dropped, 1);
            return NULL;
        }
        atomic_store_explicit(&r->ev, ev, memory_order_release);
    }
    *i = atomic_load_explicit(&r->count, memory_order_relaxed);
    if (*i >= TRACE_ROW_CAPACITY) {
        atomic_fetch_add(&dropped, 1);
        return NULL;
    }
    return ev + *i;
}

void trace_put(int row, const trace_event *e)
{
    if (row < 0 || row >= TRACE_ROWS)
        return;
    size_t i;
    trace_event *slot = row_slot(&rows[row], &i);
    if (slot == NULL)
        return;
    *slot = *e;
    atomic_store_explicit(&rows[row].count, i + 1, memory_order_release);
}

static void end_span(int row, int64_t t0, bool with_last, trace_cat cat, const char *name,
                     int64_t number, const char *suffix, trace_args_fn args, const void *obj,
                     int64_t n)
{
    if (t0 == 0 || !trace_recording())
        return;
    if (row == TRACE_ROW_NONE)
        row = current_row;
    if (row < 0 || row >= TRACE_ROWS)
        return;
    if (t0 < 0) { /* begun on a device row: its device measures it */
        const trace_device *d = device_of(row);
        trace_event span = {0, 0, name, suffix, number, args, obj, n, (int)cat};
        if (d != NULL)
            d->end(d->ctx, t0, &span, with_last);
        else
            atomic_fetch_add(&dropped, 1);
        return;
    }
    int64_t last = with_last ? host_last_end(row) : 0;
    int64_t t1 = last != 0 && last >= t0 ? last : trace_clock_ns();
    trace_row *r = &rows[row];
    size_t i;
    trace_event *slot = row_slot(r, &i);
    if (slot == NULL)
        return;
    *slot = (trace_event){t0, t1 - t0, name, suffix, number, args, obj, n, (int)cat};
    atomic_store_explicit(&r->count, i + 1, memory_order_release);
    last_end_row = row;
    last_end_window = atomic_load_explicit(&window, memory_order_relaxed);
    last_end_ns = t1;
}

void trace_end_full(int row, int64_t t0, trace_cat cat, const char *name, int64_t number,
                    const char *suffix, trace_args_fn args, const void *obj, int64_t n)
{
    end_span(row, t0, false, cat, name, number, suffix, args, obj, n);
}

void trace_end_with_last(int row, int64_t t0, trace_cat cat, const char *name, int64_t number,
                         const char *suffix, trace_args_fn args, const void *obj, int64_t n)
{
    end_span(row, t0, true, cat, name, number, suffix, args, obj, n);
}

int trace_start(void)
{
    for (int i = 0; i < TRACE_ROWS; i++)
        atomic_store(&rows[i].count, 0);
    atomic_store(&dropped, 0);
    atomic_store(&device_events, 0);
    atomic_fetch_add(&window, 1);
    atomic_store(&trace_recording_flag, 1);
    return 0;
}

void trace_stop(void)
{
    atomic_store(&trace_recording_flag, 0);
}

const trace_event *trace_row_events(int row, size_t *count)
{
    if (row < 0 || row >= TRACE_ROWS) {
        *count = 0;
        return NULL;
    }
    *count = atomic_load_explicit(&rows[row].count, memory_order_acquire);
    return atomic_load_explicit(&rows[row].ev, memory_order_acquire);
}

size_t trace_dropped(void)
{
    return atomic_load(&dropped);
}

void trace_row_name(int row, char *buf, size_t len)
{
    if (row == TRACE_ROW_TRAINER)
        snprintf(buf, len, "trainer");
    else if (row >= TRACE_ROW_TOWER && row < TRACE_ROW_ALLREDUCE)
        snprintf(buf, len, "tower %d", row - TRACE_ROW_TOWER);
    else if (row >= TRACE_ROW_ALLREDUCE && row < TRACE_ROW_WORKER)
        snprintf(buf, len, "allreduce tower %d", row - TRACE_ROW_ALLREDUCE);
    else
        snprintf(buf, len, "prefetch worker %d", row - TRACE_ROW_WORKER);
}

const char *trace_cat_name(int cat)
{
    static const char *const names[] = {"forward", "backward", "allreduce",
                                        "optimizer", "data", "trainer"};
    return cat >= 0 && cat <= TRACE_CAT_TRAINER ? names[cat] : "trainer";
}

void trace_event_name(const trace_event *e, char *buf, size_t len)
{
    int k = snprintf(buf, len, "%s", e->name);
    if (e->number >= 0 && k >= 0 && (size_t)k < len)
        k += snprintf(buf + k, len - (size_t)k, " %lld", (long long)e->number);
    if (e->suffix != NULL && k >= 0 && (size_t)k < len)
        snprintf(buf + k, len - (size_t)k, " %s", e->suffix);
}

void trace_text_printf(trace_text *b, const char *fmt, ...)
{
    if (b->oom)
        return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int k = vsnprintf(b->p ? b->p + b->len : NULL, b->p ? b->cap - b->len : 0, fmt, ap);
        va_end(ap);
        if (k < 0) {
            b->oom = true;
            return;
        }
        if (b->p != NULL && b->len + (size_t)k < b->cap) {
            b->len += (size_t)k;
            return;
        }
        size_t cap = b->cap ? b->cap * 2 : 65536;
        while (cap < b->len + (size_t)k + 1)
            cap *= 2;
        char *p = realloc(b->p, cap);
        if (p == NULL) {
            b->oom = true;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
}

void trace_text_free(trace_text *b)
{
    free(b->p);
    memset(b, 0, sizeof(*b));
}

void trace_args_pack(trace_text *b, const void *obj, int64_t n)
{
    trace_text_printf(b, "\"bytes\": %lld, \"algorithm\": \"%s\"", (long long)n,
                      (const char *)obj);
}

/* s as a JSON string (the names are the model file's: printable, but a
 * quote or a backslash must not break the file). */
static void json_string(trace_text *b, const char *s)
{
    trace_text_printf(b, "\"");
    while (*s) {
        size_t run = 0; /* plain characters go in one piece */
        while (s[run] && s[run] != '"' && s[run] != '\\' && (unsigned char)s[run] >= 0x20)
            run++;
        if (run > 0)
            trace_text_printf(b, "%.*s", (int)run, s);
        s += run;
        if (*s == '"' || *s == '\\')
            trace_text_printf(b, "\\%c", *s++);
        else if (*s)
            trace_text_printf(b, "\\u%04x", (unsigned char)*s++);
    }
    trace_text_printf(b, "\"");
}

static void sep(trace_text *b, bool *first)
{
    if (!*first)
        trace_text_printf(b, ",\n");
    *first = false;
}

static void append_metadata(trace_text *b, bool *first, int pid, int tid, const char *what,
                            const char *name)
{
    sep(b, first);
    trace_text_printf(b, "{\"name\": \"%s\", \"ph\": \"M\", \"pid\": %d, \"tid\": %d, "
                      "\"args\": {\"name\": ", what, pid, tid);
    json_string(b, name);
    trace_text_printf(b, "}}");
}

void trace_append_json(trace_text *b, bool *first, int pid, const char *process_name,
                       int64_t offset_ns, int64_t origin_ns)
{
    append_metadata(b, first, pid, 0, "process_name", process_name);
    sep(b, first);
    trace_text_printf(b, "{\"name\": \"process_sort_index\", \"ph\": \"M\", \"pid\": %d, "
                      "\"tid\": 0, \"args\": {\"sort_index\": %d}}", pid, pid);
    for (int row = 0; row < TRACE_ROWS; row++) {
        size_t n;
        const trace_event *ev = trace_row_events(row, &n);
        if (n == 0)
            continue;
        char name[64];
        trace_row_name(row, name, sizeof(name));
        append_metadata(b, first, pid, row, "thread_name", name);
        sep(b, first);
        trace_text_printf(b, "{\"name\": \"thread_sort_index\", \"ph\": \"M\", \"pid\": %d, "
                          "\"tid\": %d, \"args\": {\"sort_index\": %d}}", pid, row, row);
        for (size_t i = 0; i < n; i++) {
            const trace_event *e = &ev[i];
            char full[160];
            trace_event_name(e, full, sizeof(full));
            sep(b, first);
            trace_text_printf(b, "{\"name\": ");
            json_string(b, full);
            trace_text_printf(b, ", \"cat\": \"%s\", \"ph\": \"X\", \"ts\": %.3f, "
                              "\"dur\": %.3f, \"pid\": %d, \"tid\": %d",
                              trace_cat_name(e->cat),
                              (double)(e->ts_ns + offset_ns - origin_ns) / 1e3,
                              (double)e->dur_ns / 1e3, pid, row);
            if (e->args != NULL) {
                trace_text_printf(b, ", \"args\": {");
                e->args(b, e->obj, e->n);
                trace_text_printf(b, "}");
            }
            trace_text_printf(b, "}");
        }
    }
}
