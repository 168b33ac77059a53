/* events.c - TensorBoard event files (towertrain.cfg(5), MONITORS).
 *
 * A file is a sequence of TFRecords: uint64 length, uint32 masked CRC-32C of the
 * length, the bytes, uint32 masked CRC-32C of the bytes. Each record is an Event
 * protocol buffer; the first one holds file_version = "brain.Event:2", the others
 * a Summary with one scalar each (simple_value). The few protobuf fields needed
 * are encoded here by hand rather than pulling in protobuf-c for five fields:
 *   Event   { double wall_time = 1; int64 step = 2; string file_version = 3;
 *             Summary summary = 5; }
 *   Summary { repeated Value value = 1; }
 *   Value   { string tag = 1; float simple_value = 2; HistogramProto histo = 5; }
 *   HistogramProto { double min = 1, max = 2, num = 3, sum = 4, sum_squares = 5;
 *                    repeated double bucket_limit = 6 [packed], bucket = 7 [packed]; }
 * Per-step scalars are written every `every_k_steps` steps (default 10); at each
 * epoch end every scalar of the epoch is written and the file is flushed.
 * With histograms = true, each epoch end also writes a histogram of every
 * parameter tensor (HISTO_BUCKETS equal-width buckets over its range).
 *
 * Records collect in memory and reach the file whole, at those flushes: a
 * write that fails (a full disk) is cut back to the last whole record, so the
 * file is always a valid sequence of records that TensorBoard reads to the
 * end.
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include <libconfig.h>

#include "train/trainer.h"
#include "util/crc32c.h"
#include "util/fileio.h"

typedef struct {
    int fd;              /* -1 until open and after close */
    off_t good;          /* bytes of whole records in the file */
    unsigned char *pending; /* records not yet written */
    size_t pending_len, pending_cap;
    char path[4400];
    int every_k_steps;
    int histograms;
} events_state;

/* Records pending beyond this are written before the next flush point. */
#define PENDING_MAX (1 << 20)

#define HISTO_BUCKETS 30

/* ---- a tiny protobuf encoder: bytes appended to a fixed buffer ---- */

typedef struct {
    unsigned char data[2048];
    size_t len;
} pbuf;

static void pb_byte(pbuf *b, unsigned char c)
{
    if (b->len < sizeof(b->data))
        b->data[b->len++] = c;
}

static void pb_varint(pbuf *b, uint64_t v)
{
    while (v >= 0x80) {
        pb_byte(b, (unsigned char)(v | 0x80));
        v >>= 7;
    }
    pb_byte(b, (unsigned char)v);
}

static void pb_fixed(pbuf *b, uint64_t v, int bytes)
{
    for (int i = 0; i < bytes; i++)
        pb_byte(b, (unsigned char)(v >> (8 * i)));
}

/* field with wire type 2 (length-delimited) */
static void pb_bytes(pbuf *b, int field, const void *data, size_t len)
{
    pb_varint(b, (uint64_t)field << 3 | 2);
    pb_varint(b, len);
    for (size_t i = 0; i < len; i++)
        pb_byte(b, ((const unsigned char *)data)[i]);
}

static double wall_time_now(void)
{
    struct timeval tv;
    gettimeofday(&tv, NULL);
    return (double)tv.tv_sec + (double)tv.tv_usec * 1e-6;
}

/* Event header fields: wall_time (1, fixed64) and step (2, varint). */
static void pb_event_header(pbuf *b, int64_t step)
{
    double wt = wall_time_now();
    uint64_t bits;
    memcpy(&bits, &wt, sizeof(bits));
    pb_varint(b, 1 << 3 | 1);
    pb_fixed(b, bits, 8);
    pb_varint(b, 2 << 3 | 0);
    pb_varint(b, (uint64_t)step);
}

/* Writes the pending records; on a failure the file is cut back to the last
 * whole record and the pending ones are dropped. */
static int flush_pending(events_state *s, tt_err *err)
{
    size_t done = 0;
    while (done < s->pending_len) {
        ssize_t w = write(s->fd, s->pending + done, s->pending_len - done);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            int e = w < 0 ? errno : ENOSPC;
            if (ftruncate(s->fd, s->good) != 0 || lseek(s->fd, s->good, SEEK_SET) < 0)
                e = errno;
            s->pending_len = 0;
            return err_set(err, TT_ERR_RUNTIME, "%s: write failed: %s", s->path, strerror(e));
        }
        done += (size_t)w;
    }
    s->good += (off_t)s->pending_len;
    s->pending_len = 0;
    return 0;
}

static int write_record(events_state *s, const pbuf *b, tt_err *err)
{
    size_t need = 16 + b->len;
    if (s->pending_len + need > s->pending_cap) {
        size_t cap = s->pending_cap ? s->pending_cap * 2 : 8192;
        while (cap < s->pending_len + need)
            cap *= 2;
        unsigned char *bigger = realloc(s->pending, cap);
        if (bigger == NULL)
            return err_set(err, TT_ERR_RUNTIME, "out of memory");
        s->pending = bigger;
        s->pending_cap = cap;
    }
    unsigned char *p = s->pending + s->pending_len;
    uint64_t len = b->len;
    for (int i = 0; i < 8; i++)
        p[i] = (unsigned char)(len >> (8 * i));
    uint32_t len_crc = crc32c_mask(crc32c_update(0, p, 8));
    uint32_t data_crc = crc32c_mask(crc32c_update(0, b->data, b->len));
    for (int i = 0; i < 4; i++)
        p[8 + i] = (unsigned char)(len_crc >> (8 * i));
    memcpy(p + 12, b->data, b->len);
    for (int i = 0; i < 4; i++)
        p[12 + b->len + i] = (unsigned char)(data_crc >> (8 * i));
    s->pending_len += need;
    return s->pending_len > PENDING_MAX ? flush_pending(s, err) : 0;
}

/* One Summary.Value (tag and payload already encoded) as an Event record. */
static int write_value(events_state *s, const pbuf *value, int64_t step, tt_err *err)
{
    pbuf summary = {{0}, 0};
    pb_bytes(&summary, 1, value->data, value->len);
    pbuf ev = {{0}, 0};
    pb_event_header(&ev, step);
    pb_bytes(&ev, 5, summary.data, summary.len);
    return write_record(s, &ev, err);
}

static int write_scalar(events_state *s, const char *tag, double value, int64_t step,
                        tt_err *err)
{
    pbuf v = {{0}, 0};
    size_t tag_len = strlen(tag);
    if (tag_len > 200)
        tag_len = 200;
    pb_bytes(&v, 1, tag, tag_len);
    float f = (float)value;
    uint32_t fbits;
    memcpy(&fbits, &f, sizeof(fbits));
    pb_varint(&v, 2 << 3 | 5);
    pb_fixed(&v, fbits, 4);
    return write_value(s, &v, step, err);
}

static int events_create(monitor_t *mon, trainer_t *tr, tt_err *err)
{
    events_state *s = calloc(1, sizeof(*s));
    if (s == NULL)
        return err_set(err, TT_ERR_RUNTIME, "out of memory");
    mon->state = s;
    s->fd = -1;
    s->every_k_steps = 10;
    if (mon->cfg->settings != NULL)
        config_setting_lookup_int((const config_setting_t *)mon->cfg->settings, "every_k_steps",
                                  &s->every_k_steps);
    if (mon->cfg->settings != NULL)
        config_setting_lookup_bool((const config_setting_t *)mon->cfg->settings, "histograms",
                                   &s->histograms);
    if (s->every_k_steps < 1)
        s->every_k_steps = 10;
    return 0;
}

static int events_open(monitor_t *mon, trainer_t *tr, tt_err *err)
{
    events_state *s = mon->state;
    char host[256] = "localhost";
    gethostname(host, sizeof(host) - 1);
    long long now = (long long)time(NULL);
    snprintf(s->path, sizeof(s->path), "%s/events.out.tfevents.%lld.%s", tr->job->logdir, now,
             host);
    /* A resume in the same second must not overwrite the earlier file: the
     * first name that is free, taken with O_EXCL so that nothing that exists
     * is ever truncated. */
    s->fd = open(s->path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    for (int k = 1; s->fd < 0 && errno == EEXIST && k < 1000000; k++) {
        snprintf(s->path, sizeof(s->path), "%s/events.out.tfevents.%lld.%s.%d", tr->job->logdir,
                 now, host, k);
        s->fd = open(s->path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    }
    if (s->fd < 0)
        return err_set(err, TT_ERR_RUNTIME, "cannot create %s: %s", s->path, strerror(errno));
    s->good = 0;
    pbuf ev = {{0}, 0};
    pb_event_header(&ev, tr->global_step);
    pb_bytes(&ev, 3, "brain.Event:2", 13);
    if (write_record(s, &ev, err) != 0)
        return -1;
    return flush_pending(s, err);
}

static int events_put_scalar(monitor_t *mon, trainer_t *tr, const char *name, double value,
                             tt_err *err)
{
    events_state *s = mon->state;
    /* At an epoch's last step epoch_end writes every scalar; do not write twice. */
    if (s->fd < 0 || tr->local_step == tr->steps_per_epoch ||
        tr->global_step % s->every_k_steps != 0)
        return 0;
    return write_scalar(s, name, value, tr->global_step, err);
}

static void pb_double(pbuf *b, int field, double v)
{
    uint64_t bits;
    memcpy(&bits, &v, sizeof(bits));
    pb_varint(b, (uint64_t)field << 3 | 1);
    pb_fixed(b, bits, 8);
}

static void pb_packed_doubles(pbuf *b, int field, const double *v, int n)
{
    pb_varint(b, (uint64_t)field << 3 | 2);
    pb_varint(b, (uint64_t)n * 8);
    for (int i = 0; i < n; i++) {
        uint64_t bits;
        memcpy(&bits, &v[i], sizeof(bits));
        pb_fixed(b, bits, 8);
    }
}

/* A histogram of x as TensorBoard's HistogramProto: equal-width buckets over
 * [min, max], bucket_limit the right edge of each. Values that are not finite
 * (an update that overflowed, written before the next step's loss stops the
 * run) are left out: num counts the finite ones. */
static int write_histogram(events_state *s, const char *tag, const float *x, size_t n,
                           int64_t step, tt_err *err)
{
    double lo = 0, hi = 0, sum = 0, sum2 = 0;
    size_t finite = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(x[i]))
            continue;
        lo = finite == 0 || x[i] < lo ? x[i] : lo;
        hi = finite == 0 || x[i] > hi ? x[i] : hi;
        sum += x[i];
        sum2 += (double)x[i] * x[i];
        finite++;
    }
    double limit[HISTO_BUCKETS], count[HISTO_BUCKETS] = {0};
    double width = hi > lo ? (hi - lo) / HISTO_BUCKETS : 1.0;
    for (int k = 0; k < HISTO_BUCKETS; k++)
        limit[k] = lo + width * (k + 1);
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(x[i]))
            continue;
        int k = (int)((x[i] - lo) / width);
        count[k < 0 ? 0 : k < HISTO_BUCKETS ? k : HISTO_BUCKETS - 1] += 1;
    }
    pbuf h = {{0}, 0};
    pb_double(&h, 1, lo);
    pb_double(&h, 2, hi);
    pb_double(&h, 3, (double)finite);
    pb_double(&h, 4, sum);
    pb_double(&h, 5, sum2);
    pb_packed_doubles(&h, 6, limit, HISTO_BUCKETS);
    pb_packed_doubles(&h, 7, count, HISTO_BUCKETS);
    pbuf v = {{0}, 0};
    pb_bytes(&v, 1, tag, strlen(tag) < 200 ? strlen(tag) : 200);
    pb_bytes(&v, 5, h.data, h.len);
    return write_value(s, &v, step, err);
}

static int write_param_histograms(events_state *s, trainer_t *tr, tt_err *err)
{
    const model_t *m = &tr->model;
    float *host = malloc((m->n_floats ? m->n_floats : 1) * sizeof(float));
    if (host == NULL)
        return err_set(err, TT_ERR_RUNTIME, "out of memory");
    trainer_sync_tower0(tr);
    tower_get_params(&tr->towers[0], host);
    int rc = 0;
    for (int i = 0; i < m->n_params && rc == 0; i++)
        if (m->params[i].count > 0)
            rc = write_histogram(s, m->params[i].name, host + m->params[i].offset,
                                 m->params[i].count, tr->global_step, err);
    free(host);
    return rc;
}

static int events_epoch_end(monitor_t *mon, trainer_t *tr, const scalar_t *scalars, int n,
                            tt_err *err)
{
    events_state *s = mon->state;
    for (int i = 0; i < n; i++)
        if (write_scalar(s, scalars[i].name, scalars[i].value, tr->global_step, err) != 0)
            return -1;
    if (s->histograms && write_param_histograms(s, tr, err) != 0)
        return -1;
    return flush_pending(s, err);
}

static int events_close(monitor_t *mon, trainer_t *tr, tt_err *err)
{
    events_state *s = mon->state;
    if (s->fd < 0)
        return 0;
    int rc = flush_pending(s, err);
    if (close(s->fd) != 0 && rc == 0)
        rc = err_set(err, TT_ERR_RUNTIME, "%s: write failed: %s", s->path, strerror(errno));
    s->fd = -1;
    return rc;
}

static void events_destroy(monitor_t *mon)
{
    events_state *s = mon->state;
    if (s != NULL && s->fd >= 0)
        close(s->fd);
    if (s != NULL)
        free(s->pending);
    free(s);
}

const monitor_ops monitor_events_ops = {
    .type = "events",
    .create = events_create,
    .open = events_open,
    .put_scalar = events_put_scalar,
    .epoch_end = events_epoch_end,
    .close = events_close,
    .destroy = events_destroy,
};
