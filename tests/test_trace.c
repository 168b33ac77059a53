/* test_trace.c - util/trace.h: nothing recorded while off, every span of
 * every row while on (one writer per row, threads at once), names escaped
 * for JSON, a full row dropping and counting, worker rows handed out once. */
#include <pthread.h>
#include <string.h>

#include "tests/tt_test.h"
#include "util/trace.h"

#define THREADS 4
#define PER_THREAD 20000

static void *writer(void *arg)
{
    int row = TRACE_ROW_TOWER + (int)(intptr_t)arg;
    trace_set_row(row);
    for (int i = 0; i < PER_THREAD; i++) {
        int64_t t0 = trace_begin();
        trace_end_full(TRACE_ROW_NONE, t0, TRACE_CAT_FORWARD, "layer", i, NULL, NULL, NULL, 0);
    }
    return NULL;
}

static void args_n(trace_text *b, const void *obj, int64_t n)
{
    trace_text_printf(b, "\"bytes\": %lld, \"algorithm\": \"%s\"", (long long)n,
                      (const char *)obj);
}

int main(void)
{
    size_t n;
    /* off: no time taken, nothing kept */
    tt_ok(trace_begin() == 0, "off: trace_begin returns 0");
    trace_end_full(TRACE_ROW_TRAINER, trace_clock_ns(), TRACE_CAT_TRAINER, "x", -1, NULL, NULL,
                   NULL, 0);
    trace_row_events(TRACE_ROW_TRAINER, &n);
    tt_ok(n == 0, "off: a span ending while off is not kept (%zu)", n);

    /* on: a span begun while on and ended after stop is dropped */
    trace_start();
    int64_t t0 = trace_begin();
    tt_ok(t0 != 0, "on: trace_begin returns the time");
    trace_stop();
    trace_end(TRACE_ROW_TRAINER, t0, TRACE_CAT_TRAINER, "late", -1);
    trace_row_events(TRACE_ROW_TRAINER, &n);
    tt_ok(n == 0, "a span ending after trace_stop is not kept (%zu)", n);

    /* threads, each on its own row, at once */
    trace_start();
    pthread_t th[THREADS];
    for (int i = 0; i < THREADS; i++)
        pthread_create(&th[i], NULL, writer, (void *)(intptr_t)i);
    for (int i = 0; i < THREADS; i++)
        pthread_join(th[i], NULL);
    int all = 1;
    for (int i = 0; i < THREADS; i++) {
        const trace_event *ev = trace_row_events(TRACE_ROW_TOWER + i, &n);
        all = all && n == PER_THREAD;
        for (size_t k = 0; all && k < n; k++)
            all = ev[k].number == (int64_t)k && ev[k].dur_ns >= 0 &&
                  (k == 0 || ev[k].ts_ns >= ev[k - 1].ts_ns);
    }
    tt_ok(all, "%d threads x %d spans: every span on its row, in order", THREADS, PER_THREAD);
    trace_row_events(TRACE_ROW_NONE, &n);
    trace_row_events(TRACE_ROW_TRAINER, &n);
    tt_ok(n == 0, "no span on a row nobody wrote (%zu)", n);

    /* a name with a quote and a backslash, args, as JSON */
    trace_start();
    t0 = trace_begin();
    trace_end_full(TRACE_ROW_ALLREDUCE, t0, TRACE_CAT_ALLREDUCE, "a\"b\\c", 3, "forward",
                   args_n, "ring", 4096);
    trace_stop();
    trace_text b = {0};
    bool first = true;
    trace_append_json(&b, &first, 1, "rank 1", 0, 0);
    tt_ok(!b.oom && strstr(b.p, "\"name\": \"a\\\"b\\\\c 3 forward\"") != NULL,
          "names are escaped for JSON");
    tt_ok(strstr(b.p, "\"args\": {\"bytes\": 4096, \"algorithm\": \"ring\"}") != NULL,
          "args are written by their function");
    tt_ok(strstr(b.p, "\"ph\": \"M\", \"pid\": 1, \"tid\": 0, \"args\": {\"name\": \"rank 1\"}") &&
              strstr(b.p, "\"args\": {\"name\": \"allreduce tower 0\"}"),
          "process and row names as metadata events");
    tt_ok(strstr(b.p, "\"cat\": \"allreduce\", \"ph\": \"X\"") != NULL,
          "a complete event with its category");
    trace_text_free(&b);

    /* a full row drops the rest and counts them */
    trace_start();
    for (int i = 0; i < TRACE_ROW_CAPACITY + 5; i++) {
        t0 = trace_begin();
        trace_end(TRACE_ROW_TRAINER, t0, TRACE_CAT_TRAINER, "s", i);
    }
    trace_stop();
    trace_row_events(TRACE_ROW_TRAINER, &n);
    tt_ok(n == TRACE_ROW_CAPACITY && trace_dropped() == 5,
          "a full row keeps %d spans and counts the 5 dropped (%zu, %zu)", TRACE_ROW_CAPACITY,
          n, trace_dropped());
    trace_start();
    trace_row_events(TRACE_ROW_TRAINER, &n);
    tt_ok(n == 0 && trace_dropped() == 0, "trace_start drops what was recorded");

    /* worker rows: one each, reused once released */
    int a = trace_worker_row_take(), w2 = trace_worker_row_take();
    tt_ok(a >= TRACE_ROW_WORKER && w2 >= TRACE_ROW_WORKER && a != w2 &&
              trace_current_row() == w2,
          "two workers get two rows, each its thread's row");
    trace_worker_row_release(a);
    int c = trace_worker_row_take();
    tt_ok(c == a, "a released worker row is taken again");
    char name[64];
    trace_row_name(c, name, sizeof(name));
    tt_ok(strncmp(name, "prefetch worker ", 16) == 0, "worker rows are named (%s)", name);
    trace_stop();
    return tt_done();
}
