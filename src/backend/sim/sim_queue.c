/* sim_queue.c - the simulated GPU's queues and events (sim.h), and
 * backend.h's queue, event, pinned memory and asynchronous copy entries on
 * them.
 *
 * A queue is a worker thread that runs its jobs in the order they were
 * queued while the host goes on, as a stream does: the backend's compute
 * queue, and each queue_create'd one (the staging's copy queue). Two queues
 * run at the same time, so a missing event wait between them is a wrong
 * result or a data race ThreadSanitizer reports.
 *
 * An event counts its records (recorded, on the host) and the records that
 * completed (completed, set by the worker that reaches the record's job,
 * with the device's clock when its queue reached it: the event's device
 * time). A queue waiting for an event gets a job that blocks its worker
 * until the record the event held at the call has completed, as
 * cudaStreamWaitEvent captures the event's most recent record.
 *
 * The device's clock (sim.h's sim_clock, one for all the queues of a
 * backend) advances only while some worker of the device runs an operation
 * (not while every queue is empty or waits for an event): the elapsed time
 * between two events is the device's run time between them, whatever the
 * host's scheduling did meanwhile (on a machine shared with other jobs the
 * host may take milliseconds to queue the next operation, which a GPU's
 * clock would count as idle device time). One clock for every queue, as a
 * GPU's events on two streams are on one clock: the timeline measures a
 * tower's all-reduce (its communication queue) against its layers (its
 * compute queue).
 *
 * A capture (sim_graph.c, a CUDA graph's stream capture): while a queue
 * captures, the jobs queued on it are kept in a list instead of running;
 * a replay queues copies of them in order. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "backend/sim/sim.h"
#include "util/clock.h"

/* One queued operation: its function and its arguments, copied. */
typedef struct sim_job {
    struct sim_job *next;
    void (*run)(backend_t *be, void *args);
    int64_t queued_ns; /* the device's clock when it was queued */
    size_t size;        /* of args */
    max_align_t args[]; /* the bytes of the arguments */
} sim_job;

struct sim_queue {
    backend_t *be;
    pthread_t worker;
    pthread_mutex_t lock;
    pthread_cond_t work, idle;
    sim_job *head, *tail;
    int pending; /* queued or running */
    /* a capture: the jobs queued since it began, not run; lost: one could
     * not be kept (out of host memory) */
    bool capturing, cap_lost;
    sim_job *cap_head, *cap_tail;
    bool stop;
    sim_clock *clock; /* its device's */
    /* The device's clock when the last job ended, as a device without a
     * scheduler would have it (worker only): an event's record or the end
     * of a wait takes it, not the time the worker thread got a core (on a
     * machine shared with other jobs, milliseconds later: a GPU's stream
     * reaches a record at once). */
    int64_t free_ns;
};

typedef struct {
    pthread_mutex_t lock;
    pthread_cond_t done;
    uint64_t recorded, completed;
    int64_t done_ns; /* the device's clock when the last completed record ran */
    bool timing;
    int jobs;        /* queued jobs that refer to it */
    bool freed;      /* event_free came while jobs > 0: the last job frees it */
} sim_event;

void sim_clock_init(sim_clock *c)
{
    *c = (sim_clock){0};
    pthread_mutex_init(&c->lock, NULL);
}

void sim_clock_destroy(sim_clock *c)
{
    pthread_mutex_destroy(&c->lock);
}

/* The clock now, c->lock held. */
static int64_t clock_read(const sim_clock *c, int64_t now)
{
    return c->busy_ns + (c->running > 0 ? now - c->since_ns : 0);
}

/* An operation starts (+1) or ends (-1) on one of the device's queues;
 * returns the clock then. */
static int64_t clock_run(sim_clock *c, int delta)
{
    int64_t now = clock_ns();
    pthread_mutex_lock(&c->lock);
    if (c->running == 0)
        c->since_ns = now;
    c->running += delta;
    if (c->running == 0)
        c->busy_ns += now - c->since_ns;
    int64_t t = clock_read(c, now);
    pthread_mutex_unlock(&c->lock);
    return t;
}

static int64_t clock_now(sim_clock *c)
{
    int64_t now = clock_ns();
    pthread_mutex_lock(&c->lock);
    int64_t t = clock_read(c, now);
    pthread_mutex_unlock(&c->lock);
    return t;
}

static void wait_run(backend_t *be, void *p);
static void record_run(backend_t *be, void *p);

static void *queue_main(void *p)
{
    sim_queue *q = p;
    pthread_mutex_lock(&q->lock);
    for (;;) {
        while (q->head == NULL && !q->stop)
            pthread_cond_wait(&q->work, &q->lock);
        if (q->head == NULL)
            break;
        sim_job *j = q->head;
        q->head = j->next;
        if (q->head == NULL)
            q->tail = NULL;
        pthread_mutex_unlock(&q->lock);
        /* a job may start once it was queued and the one before it ended */
        if (j->queued_ns > q->free_ns)
            q->free_ns = j->queued_ns;
        /* waiting for another queue is idle time; a record reads free_ns */
        bool op = j->run != wait_run && j->run != record_run;
        if (op)
            clock_run(q->clock, 1);
        j->run(q->be, j->args);
        if (op)
            q->free_ns = clock_run(q->clock, -1);
        free(j);
        pthread_mutex_lock(&q->lock);
        if (--q->pending == 0)
            pthread_cond_broadcast(&q->idle);
    }
    pthread_mutex_unlock(&q->lock);
    return NULL;
}

sim_queue *sim_queue_new(backend_t *be)
{
    sim_queue *q = calloc(1, sizeof(*q));
    if (q == NULL)
        return NULL;
    q->be = be;
    q->clock = sim_device_clock(be);
    pthread_mutex_init(&q->lock, NULL);
    pthread_cond_init(&q->work, NULL);
    pthread_cond_init(&q->idle, NULL);
    if (pthread_create(&q->worker, NULL, queue_main, q) != 0) {
        pthread_mutex_destroy(&q->lock);
        pthread_cond_destroy(&q->work);
        pthread_cond_destroy(&q->idle);
        free(q);
        return NULL;
    }
    return q;
}

void sim_queue_drain(sim_queue *q)
{
    pthread_mutex_lock(&q->lock);
    while (q->pending > 0)
        pthread_cond_wait(&q->idle, &q->lock);
    pthread_mutex_unlock(&q->lock);
}

bool sim_queue_idle(sim_queue *q)
{
    pthread_mutex_lock(&q->lock);
    bool idle = q->pending == 0;
    pthread_mutex_unlock(&q->lock);
    return idle;
}

void sim_queue_delete(sim_queue *q)
{
    if (q == NULL)
        return;
    sim_queue_drain(q);
    pthread_mutex_lock(&q->lock);
    q->stop = true;
    pthread_cond_signal(&q->work);
    pthread_mutex_unlock(&q->lock);
    pthread_join(q->worker, NULL);
    pthread_mutex_destroy(&q->lock);
    pthread_cond_destroy(&q->work);
    pthread_cond_destroy(&q->idle);
    free(q);
}

/* j at the end of the list [*head, *tail] */
static void append(sim_job **head, sim_job **tail, sim_job *j)
{
    if (*tail != NULL)
        (*tail)->next = j;
    else
        *head = j;
    *tail = j;
}

void sim_enqueue_on(sim_queue *q, void (*run)(backend_t *be, void *args), const void *args,
                    size_t size)
{
    sim_job *j = malloc(sizeof(*j) + size);
    if (j != NULL) {
        *j = (sim_job){.run = run, .size = size, .queued_ns = clock_now(q->clock)};
        if (size > 0) /* a job without arguments may pass NULL */
            memcpy(j->args, args, size);
    }
    pthread_mutex_lock(&q->lock);
    if (j == NULL && !q->capturing) { /* out of host memory: run it here, after the rest */
        pthread_mutex_unlock(&q->lock);
        sim_queue_drain(q);
        run(q->be, (void *)args);
        return;
    }
    if (j == NULL) {
        q->cap_lost = true; /* the capture fails */
    } else if (q->capturing) { /* kept for the graph, not run */
        append(&q->cap_head, &q->cap_tail, j);
    } else {
        append(&q->head, &q->tail, j);
        q->pending++;
        pthread_cond_signal(&q->work);
    }
    pthread_mutex_unlock(&q->lock);
}

void sim_queue_capture_begin(sim_queue *q)
{
    pthread_mutex_lock(&q->lock);
    q->capturing = true;
    q->cap_lost = false;
    q->cap_head = q->cap_tail = NULL;
    pthread_mutex_unlock(&q->lock);
}

sim_job *sim_queue_capture_end(sim_queue *q, bool *lost)
{
    pthread_mutex_lock(&q->lock);
    sim_job *jobs = q->cap_head;
    *lost = q->cap_lost;
    q->capturing = false;
    q->cap_head = q->cap_tail = NULL;
    pthread_mutex_unlock(&q->lock);
    return jobs;
}

void sim_queue_replay(sim_queue *q, const sim_job *jobs)
{
    for (const sim_job *j = jobs; j != NULL; j = j->next)
        sim_enqueue_on(q, j->run, j->args, j->size);
}

void sim_jobs_free(sim_job *jobs)
{
    while (jobs != NULL) {
        sim_job *next = jobs->next;
        free(jobs);
        jobs = next;
    }
}

int sim_jobs_count(const sim_job *jobs)
{
    int n = 0;
    for (; jobs != NULL; jobs = jobs->next)
        n++;
    return n;
}

/* ---- backend.h's entries ---- */

backend_queue *sim_dev_queue(backend_t *be)
{
    return (backend_queue *)sim_compute_queue(be);
}

backend_queue *sim_dev_queue_create(backend_t *be, tt_err *err)
{
    sim_queue *q = sim_queue_new(be);
    if (q == NULL)
        err_set(err, TT_ERR_RUNTIME, "sim:%d: cannot start a queue's thread", be->device);
    return (backend_queue *)q;
}

static int query_idle(void *p, tt_err *err)
{
    (void)err;
    return sim_queue_idle(p) ? 1 : 0;
}

void sim_dev_queue_free(backend_t *be, backend_queue *bq)
{
    sim_queue *q = (sim_queue *)bq;
    if (q == NULL)
        return;
    /* as a stream's teardown: polling, with the communicator watched (a
     * wait on a stalled all-reduce ends with its abort) */
    backend_device_wait_for(be, query_idle, q, "queue teardown", &(tt_err){0});
    sim_queue_delete(q);
}

backend_event *sim_dev_event_create(backend_t *be, bool timing, tt_err *err)
{
    sim_event *e = calloc(1, sizeof(*e));
    if (e == NULL) {
        err_set(err, TT_ERR_RUNTIME, "sim:%d: out of host memory (event)", be->device);
        return NULL;
    }
    pthread_mutex_init(&e->lock, NULL);
    pthread_cond_init(&e->done, NULL);
    e->timing = timing;
    return (backend_event *)e;
}

static void event_destroy(sim_event *e)
{
    pthread_mutex_destroy(&e->lock);
    pthread_cond_destroy(&e->done);
    free(e);
}

/* As cudaEventDestroy: returns at once; an event that queued jobs still
 * refer to is freed by the last of them. */
void sim_dev_event_free(backend_t *be, backend_event *be_e)
{
    sim_event *e = (sim_event *)be_e;
    (void)be;
    if (e == NULL)
        return;
    pthread_mutex_lock(&e->lock);
    bool now = e->jobs == 0;
    e->freed = true;
    pthread_mutex_unlock(&e->lock);
    if (now)
        event_destroy(e);
}

/* A job that referred to e is done with it (e->lock held; released here). */
static void event_job_end(sim_event *e)
{
    bool last = --e->jobs == 0 && e->freed;
    pthread_mutex_unlock(&e->lock);
    if (last)
        event_destroy(e);
}

typedef struct {
    sim_event *e;
    uint64_t gen;
    sim_queue *q; /* where it was queued */
} event_job;

static void record_run(backend_t *be, void *p)
{
    event_job *j = p;
    (void)be;
    pthread_mutex_lock(&j->e->lock);
    if (j->gen > j->e->completed) {
        j->e->completed = j->gen;
        j->e->done_ns = j->q->free_ns; /* on j->q's worker: its own field */
    }
    pthread_cond_broadcast(&j->e->done);
    event_job_end(j->e);
}

int sim_dev_event_record(backend_t *be, backend_event *be_e, backend_queue *q, tt_err *err)
{
    sim_event *e = (sim_event *)be_e;
    (void)err;
    if (sim_capture_refuse(be, "an event record"))
        return 0;
    pthread_mutex_lock(&e->lock);
    event_job j = {e, ++e->recorded, (sim_queue *)q};
    e->jobs++;
    pthread_mutex_unlock(&e->lock);
    sim_enqueue_on((sim_queue *)q, record_run, &j, sizeof(j));
    return 0;
}

static void wait_run(backend_t *be, void *p)
{
    event_job *j = p;
    (void)be;
    pthread_mutex_lock(&j->e->lock);
    while (j->e->completed < j->gen)
        pthread_cond_wait(&j->e->done, &j->e->lock);
    /* the queue goes on from the record's time (or a later record's, if
     * one completed meanwhile: never before the one waited for) */
    if (j->e->done_ns > j->q->free_ns)
        j->q->free_ns = j->e->done_ns;
    event_job_end(j->e);
}

int sim_dev_queue_wait_event(backend_t *be, backend_queue *q, backend_event *be_e, tt_err *err)
{
    sim_event *e = (sim_event *)be_e;
    (void)err;
    if (sim_capture_refuse(be, "a wait for an event"))
        return 0;
    pthread_mutex_lock(&e->lock);
    event_job j = {e, e->recorded, (sim_queue *)q}; /* the record it holds now */
    if (j.gen > 0)
        e->jobs++;
    pthread_mutex_unlock(&e->lock);
    if (j.gen > 0)
        sim_enqueue_on((sim_queue *)q, wait_run, &j, sizeof(j));
    return 0;
}

int sim_dev_event_query(backend_t *be, backend_event *be_e, tt_err *err)
{
    sim_event *e = (sim_event *)be_e;
    (void)be;
    (void)err;
    pthread_mutex_lock(&e->lock);
    int done = e->completed >= e->recorded;
    pthread_mutex_unlock(&e->lock);
    return done;
}

/* Whether e is a timing event whose last record completed, and when. */
static bool event_timed(sim_event *e, int64_t *at)
{
    pthread_mutex_lock(&e->lock);
    bool ok = e->timing && e->recorded > 0 && e->completed >= e->recorded;
    *at = e->done_ns;
    pthread_mutex_unlock(&e->lock);
    return ok;
}

int sim_dev_event_elapsed_ms(backend_t *be, backend_event *start, backend_event *end, float *ms,
                             tt_err *err)
{
    int64_t ta, tb;
    *ms = 0.0f;
    if (!event_timed((sim_event *)start, &ta) || !event_timed((sim_event *)end, &tb))
        /* as cudaEventElapsedTime's cudaErrorNotReady / InvalidResourceHandle */
        return err_set(err, TT_ERR_RUNTIME, "sim:%d: elapsed time of an event not recorded, "
                       "not done, or without timing", be->device);
    *ms = (float)((double)(tb - ta) / 1e6);
    return 0;
}

/* "pinned": plain host memory (only asynchronous copies read it while the
 * host goes on, and a missing wait for them is a race TSan sees) */
void *sim_dev_host_alloc(backend_t *be, size_t bytes, tt_err *err)
{
    void *p = malloc(bytes ? bytes : 1);
    if (p == NULL)
        err_set(err, TT_ERR_USAGE, "sim:%d: out of host memory (%zu pinned bytes)", be->device,
                bytes);
    return p;
}

void sim_dev_host_free(backend_t *be, void *p)
{
    (void)be;
    free(p);
}

typedef struct {
    void *dst;
    const void *src;
    size_t bytes;
} copy_job;

static void copy_run(backend_t *be, void *p)
{
    copy_job *j = p;
    (void)be;
    memcpy(j->dst, j->src, j->bytes);
}

int sim_dev_copy_async(backend_t *be, void *dst, const void *src, size_t bytes, backend_queue *q,
                       tt_err *err)
{
    (void)err;
    if (sim_capture_refuse(be, "an asynchronous copy"))
        return 0;
    copy_job j = {dst, src, bytes};
    if (bytes > 0)
        sim_enqueue_on((sim_queue *)q, copy_run, &j, sizeof(j));
    return 0;
}
