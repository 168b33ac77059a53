/* timeline.c - the timeline callback (towertrain.cfg(5), CALLBACKS): records
 * global steps [first, last] and writes <logdir>/timeline-<first>-<last>.json
 * in the Chrome trace event format (Perfetto, chrome://tracing), as Horovod's
 * timeline and torch.profiler do.
 *
 * Step s is the s-th step of training (global_step is s after it, as
 * model-<s>.safetensors counts). Recording starts in step first - 1's
 * after_step hook and stops in step last's, so the window holds steps
 * first..last whole (their data wait, towers, all-reduce, optimizer) and the
 * callbacks between them. A file that cannot be written is a warning:
 * training goes on. */
#include <libconfig.h>
#include <stdio.h>
#include <stdlib.h>

#include "callbacks/timeline.h"
#include "comm/dist.h"
#include "train/device_towers.h"
#include "train/trainer.h"
#include "util/fileio.h"
#include "util/log.h"
#include "util/trace.h"

/* ---- every rank's spans into one file ---- */

int64_t timeline_clock_offset(void)
{
    if (dist_size() == 1)
        return 0;
    /* Five rounds; the median: one late wake-up from a barrier must not
     * skew every span of this rank. */
    int64_t off[5];
    for (int k = 0; k < 5; k++) {
        dist_barrier();
        int64_t mine = trace_clock_ns(), ref = mine;
        dist_broadcast(&ref, sizeof(ref), 0);
        off[k] = ref - mine;
    }
    for (int i = 1; i < 5; i++) /* insertion sort of five */
        for (int j = i; j > 0 && off[j - 1] > off[j]; j--) {
            int64_t t = off[j];
            off[j] = off[j - 1];
            off[j - 1] = t;
        }
    return off[2];
}

/* The earliest span of this process, on rank 0's clock; INT64_MAX when none. */
static int64_t earliest_span(int64_t offset_ns)
{
    int64_t first = INT64_MAX;
    for (int row = 0; row < TRACE_ROWS; row++) {
        size_t n;
        const trace_event *ev = trace_row_events(row, &n);
        for (size_t i = 0; i < n; i++)
            if (ev[i].ts_ns + offset_ns < first)
                first = ev[i].ts_ns + offset_ns;
    }
    return first;
}

int timeline_write(const char *path, int64_t offset_ns, int64_t first, int64_t last,
                   tt_err *err)
{
    int rank = dist_rank(), ranks = dist_size();
    /* every rank's earliest span, dropped spans, device events and text
     * length, known to all (sums of vectors where each rank fills its own
     * entries) */
    double *early = calloc((size_t)ranks * 4, sizeof(double));
    if (early == NULL)
        return err_set(err, TT_ERR_RUNTIME, "out of memory writing %s", path);
    double *drop = early + ranks, *devev = early + 2 * ranks, *lens = early + 3 * ranks;
    early[rank] = (double)earliest_span(offset_ns);
    drop[rank] = (double)trace_dropped();
    devev[rank] = (double)trace_device_events();
    dist_sum_doubles(early, 3 * ranks);
    int64_t origin = INT64_MAX;
    double dropped = 0, device_events = 0;
    for (int r = 0; r < ranks; r++) {
        if (early[r] < (double)origin)
            origin = (int64_t)early[r];
        dropped += drop[r];
        device_events += devev[r];
    }
    if (origin == INT64_MAX)
        origin = 0;
    char pname[32];
    snprintf(pname, sizeof(pname), "rank %d", rank);
    trace_text mine = {0};
    bool first_ev = true;
    trace_append_json(&mine, &first_ev, rank, pname, offset_ns, origin);
    lens[rank] = mine.oom ? 0.0 : (double)mine.len;
    dist_sum_doubles(lens, ranks);

    trace_text out = {0};
    trace_text_printf(&out, "{\"traceEvents\": [\n");
    bool any = false;
    for (int r = 0; r < ranks; r++) {
        size_t len = (size_t)lens[r];
        if (len == 0)
            continue;
        char *part = r == rank ? mine.p : malloc(len);
        if (part == NULL) { /* the broadcast below needs every rank */
            log_printf("towertrain: out of memory gathering the timeline\n");
            dist_abort(1);
        }
        if (ranks > 1) /* collective: every rank takes part */
            dist_broadcast(part, len, r);
        if (rank == 0)
            trace_text_printf(&out, "%s%.*s", any ? ",\n" : "", (int)len, part);
        any = true;
        if (r != rank)
            free(part);
    }
    trace_text_printf(&out, "\n],\n\"displayTimeUnit\": \"ms\",\n\"otherData\": {\"first_step\": "
                      "%lld, \"last_step\": %lld, \"ranks\": %d, \"dropped_spans\": %.0f, "
                      "\"device_events\": %.0f}}\n",
                      (long long)first, (long long)last, ranks, dropped, device_events);
    free(early);
    int rc = 0;
    if (mine.oom || out.oom)
        rc = err_set(err, TT_ERR_RUNTIME, "out of memory writing %s", path);
    else if (rank == 0)
        rc = file_write_atomic(path, out.p, out.len, err);
    trace_text_free(&mine);
    trace_text_free(&out);
    if (rc == 0 && rank == 0 && dropped > 0)
        log_printf("timeline: %.0f span(s) left out (a row's buffer was full); record fewer "
                   "steps\n", dropped);
    return rc;
}

/* ---- the callback ---- */

typedef struct {
    int64_t first, last;
    int64_t offset_ns;
    bool recording, done;
} timeline_state;

static int timeline_create(callback_t *cb, trainer_t *tr, tt_err *err)
{
    timeline_state *s = calloc(1, sizeof(*s));
    if (s == NULL)
        return err_set(err, TT_ERR_RUNTIME, "out of memory");
    cb->state = s;
    /* the schema filled [21, 30] where the job gave none, and checked that
     * 1 <= first <= last */
    const config_setting_t *steps =
        config_setting_lookup((config_setting_t *)cb->cfg->settings, "steps");
    s->first = config_setting_get_int_elem(steps, 0);
    s->last = config_setting_get_int_elem(steps, 1);
    return 0;
}

static void timeline_start(timeline_state *s, trainer_t *tr)
{
    device_towers_trace_prepare(tr); /* device towers' events: not in the window */
    s->recording = true;
    trace_start();
}

static void timeline_finish(timeline_state *s, trainer_t *tr, int64_t last)
{
    trace_stop();
    device_towers_trace_flush(tr); /* device towers: their spans, read off the device */
    s->recording = false;
    s->done = true;
    char path[4200];
    snprintf(path, sizeof(path), "%s/timeline-%lld-%lld.json", tr->job->logdir,
             (long long)s->first, (long long)s->last);
    tt_err werr = {0};
    if (timeline_write(path, s->offset_ns, s->first, last, &werr) != 0) {
        log_printf("warning: timeline: %s; training goes on\n", werr.msg);
        return;
    }
    if (tr->rank == 0)
        log_printf("timeline: steps %lld-%lld written to %s\n", (long long)s->first,
                   (long long)last, path);
}

static int timeline_before_train(callback_t *cb, trainer_t *tr, tt_err *err)
{
    timeline_state *s = cb->state;
    s->offset_ns = timeline_clock_offset();
    if (tr->global_step >= s->first) {
        s->done = true; /* resumed past it: nothing to record */
        if (tr->rank == 0)
            log_printf("timeline: training resumes after step %lld: steps %lld-%lld are not "
                       "recorded\n", (long long)tr->global_step, (long long)s->first,
                       (long long)s->last);
    } else if (tr->global_step == s->first - 1) {
        timeline_start(s, tr);
    }
    return 0;
}

static int timeline_after_step(callback_t *cb, trainer_t *tr, tt_err *err)
{
    timeline_state *s = cb->state;
    if (s->recording && tr->global_step >= s->last)
        timeline_finish(s, tr, s->last);
    else if (!s->done && !s->recording && tr->global_step == s->first - 1)
        timeline_start(s, tr);
    return 0;
}

/* Training ended inside the window (max_epoch, early_stop): what was recorded. */
static int timeline_after_train(callback_t *cb, trainer_t *tr, tt_err *err)
{
    timeline_state *s = cb->state;
    if (!s->recording)
        return 0;
    if (tr->rank == 0)
        log_printf("timeline: training ended at step %lld, before step %lld\n",
                   (long long)tr->global_step, (long long)s->last);
    timeline_finish(s, tr, tr->global_step);
    return 0;
}

static void timeline_destroy(callback_t *cb)
{
    timeline_state *s = cb->state;
    if (s != NULL && s->recording)
        trace_stop();
    free(s);
}

const callback_ops callback_timeline_ops = {
    .type = "timeline",
    .create = timeline_create,
    .before_train = timeline_before_train,
    .after_step = timeline_after_step,
    .after_train = timeline_after_train,
    .destroy = timeline_destroy,
};
