/* sim.h - the simulated GPU ("sim", trainer.device = "sim"): a test device
 * that runs the host code of a GPU tower without a GPU.
 *
 * A sim backend has its own device memory (allocations apart from the
 * host's, each with guard bytes after it that every free and every sync
 * checks), its own pool accounting (reserved, in use, peak), a staged input
 * (staging.h, as CUDA's) on its queues and events, the 16-bit
 * copies of mixed precision rounded as the GPU stores them (bf16 to nearest
 * even; fp16 to nearest even with overflow to Inf, so loss scaling is real),
 * read from a scratch region reserved at setup as precision.h sizes it,
 * and an in-process communicator with NCCL's interface (sim_comm.c). The
 * arithmetic is the CPU backend's.
 *
 * Its queues (streams, sim_queue.c): the compute queue and every queue
 * made with queue_create (the staging's copy queue) are worker threads,
 * each running its operations in the order they were queued while the host
 * goes on, as a GPU does; the operations that answer the host (download,
 * all_finite, sumsq) and sync wait for the compute queue, and loss_read
 * for the event recorded after the loss. Events order
 * two queues. A missing wait is therefore a wrong result or a data race
 * that ThreadSanitizer reports, not a silent pass. All-reduces run on a
 * communication queue per tower (sim_comm.c), as NCCL's stream, ordered by
 * events as nccl_comm.c orders it. Faults (issue 27) can be injected where a queued job runs: a
 * stalled all-reduce in sim_comm.c's group, a failed download in
 * sim_download (sim_fail records it), a failed step capture (sim_graph.c).
 * A step captured and replayed (backend.h's capture entries) is
 * sim_graph.c's: the compute queue's jobs kept and queued again.
 */
#ifndef TT_SIM_H
#define TT_SIM_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>

#include "backend/backend.h"
#include "backend/precision.h"
#include "backend/weight_copies.h"

extern const backend_device_ops backend_sim_device_ops;

/* A queue: its worker thread started (NULL when it cannot be); delete
 * waits for what was queued, then ends the thread. enqueue_on queues
 * run(be, copy of args) after everything queued before and returns at once;
 * drain waits until the queue is empty; idle says whether it is. */
typedef struct sim_queue sim_queue;
sim_queue *sim_queue_new(backend_t *be);
void sim_queue_delete(sim_queue *q);
void sim_enqueue_on(sim_queue *q, void (*run)(backend_t *be, void *args), const void *args,
                    size_t size);
void sim_queue_drain(sim_queue *q);
bool sim_queue_idle(sim_queue *q);

/* A queue's capture (sim_graph.c): from capture_begin the jobs queued on q
 * are kept, in order, instead of run; capture_end returns them (lost: one
 * could not be kept, out of host memory) and q runs its jobs again; replay
 * queues a copy of each, in order; jobs_free frees such a list. */
typedef struct sim_job sim_job;
void sim_queue_capture_begin(sim_queue *q);
sim_job *sim_queue_capture_end(sim_queue *q, bool *lost);
void sim_queue_replay(sim_queue *q, const sim_job *jobs);
void sim_jobs_free(sim_job *jobs);
int sim_jobs_count(const sim_job *jobs);

/* backend.h's capture entries and the *_vars updates (sim_graph.c). */
int sim_capture_begin(backend_t *be, tt_err *err);
backend_graph *sim_capture_end(backend_t *be, tt_err *err);
int sim_graph_launch(backend_t *be, backend_graph *g, tt_err *err);
void sim_graph_free(backend_t *be, backend_graph *g);
void sim_install_vars_ops(backend_t *be);

/* A device's clock, one for all its queues (sim_queue.c): it advances while
 * at least one of them runs an operation (not while they are all empty or
 * waiting for an event), so the elapsed time between events of two queues
 * (a tower's compute and communication queues) is meaningful, and between
 * two events of one queue it is still device time, whatever the host's
 * scheduling did while the device was idle. Each backend has one
 * (sim_device_clock); its queues read it when they are made. */
typedef struct {
    pthread_mutex_t lock;
    int running;      /* operations running now, on any queue of the device */
    int64_t busy_ns;  /* the clock when running last fell to 0 */
    int64_t since_ns; /* CLOCK_MONOTONIC when running last rose from 0 */
} sim_clock;
void sim_clock_init(sim_clock *c);
void sim_clock_destroy(sim_clock *c);

/* backend.h's queue, event, pinned memory and copy entries (sim_queue.c).
 * An event's device time is its device's clock (sim_clock) when the
 * queue's worker reached its record (so elapsed times are the device's run
 * time, on one clock for every queue of the device). */
backend_queue *sim_dev_queue(backend_t *be);
backend_queue *sim_dev_queue_create(backend_t *be, tt_err *err);
void sim_dev_queue_free(backend_t *be, backend_queue *q);
backend_event *sim_dev_event_create(backend_t *be, bool timing, tt_err *err);
void sim_dev_event_free(backend_t *be, backend_event *e);
int sim_dev_event_record(backend_t *be, backend_event *e, backend_queue *q, tt_err *err);
int sim_dev_queue_wait_event(backend_t *be, backend_queue *q, backend_event *e, tt_err *err);
int sim_dev_event_query(backend_t *be, backend_event *e, tt_err *err);
int sim_dev_event_elapsed_ms(backend_t *be, backend_event *start, backend_event *end, float *ms,
                             tt_err *err);
void *sim_dev_host_alloc(backend_t *be, size_t bytes, tt_err *err);
void sim_dev_host_free(backend_t *be, void *p);
int sim_dev_copy_async(backend_t *be, void *dst, const void *src, size_t bytes, backend_queue *q,
                       tt_err *err);

/* x rounded to the 16-bit type of p as a GPU stores it (bf16 or fp16: to
 * nearest even; fp16 past 65504 to Inf), held as floats in y (y may be x). */
void sim_round_16bit(prec_t p, size_t count, const float *x, float *y);


/* Records the first error of a sim backend (its check and sync return it). */
void sim_fail(backend_t *be, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* TT_SIM_FAULT=stall_allreduce:S (or hang_allreduce:S): whether an
 * all-reduce started now (at the global step of the tower's last staged
 * batch) stalls. */
bool sim_fault_stalls(backend_t *be, int64_t *step);
/* hang_allreduce: the stall never becomes an asynchronous error (a peer
 * gone silent; only trainer.collective_timeout ends it). */
bool sim_fault_silent(void);
/* download_error:checkpoint: the first download of the first save fails. */
bool sim_fault_download_checkpoint(void);
/* capture_error: every capture_end fails (the trainer's fallback to
 * eager steps). */
bool sim_fault_capture(void);


/* ---- the blocked layout (sim_blocked.c) ---- */
/* Host scratch of the blocked convolutions' NCHW operands (x, y or dy, w,
 * dx: slots 0-3) and of the bf16 gradients widened to float32 (4-5,
 * sim_grad16.c), grown as needed; not device memory (sim_blocked.c says
 * why). */
#define SIM_SCRATCH_N 6
typedef struct {
    float *buf[SIM_SCRATCH_N];
    size_t floats[SIM_SCRATCH_N];
} sim_scratch;
void sim_scratch_free(sim_scratch *sc);
/* Slot `which` of sc grown to hold `floats` (the queue's worker is its
 * only user); NULL when out of host memory. */
float *sim_scratch_grow(sim_scratch *sc, int which, size_t floats);
/* Slot `which` of be's scratch with room for `floats`, on the queue's
 * worker; NULL (sim_fail says so) when out of host memory. */
float *sim_scratch_take(backend_t *be, int which, size_t floats);
/* Sets be's layout flags (and its CPU's) as lay says and, with lay.blocked,
 * installs the queued *_blocked operations. */
void sim_install_blocked(backend_t *be, prec_layout lay);
/* conv2d forward / backward with d->blocked_x or d->blocked_y, on the
 * queue's worker, in precision p (cuDNN's NHWC 16-bit arithmetic). */
void sim_conv_forward_blocked(backend_t *be, prec_t p, const window_desc *d, const float *x,
                              const float *w, const float *w16, const float *b, bool relu,
                              float *y, void *ws);
void sim_conv_backward_blocked(backend_t *be, prec_t p, const window_desc *d, const float *x,
                               const float *w, const float *w16, const float *y, bool relu,
                               float *dy, float *dx, float *dw, float *db, void *ws);

/* The 16-bit copy (as floats) of the tower weight tensor w[count] in this
 * step, made now at its first use (weight_copies.h), or a float32 NHWC
 * tower's float32 copy (a GPU's KRSC; sim keeps the stored order: the
 * values are the same); NULL in fp32 NCHW or for weights of no tower's
 * step (the caller rounds them at this call). On the queue's worker. */
const float *sim_weight_copy(backend_t *be, const float *w, size_t count);
/* How many weight tensors sim has converted into the towers' copies
 * (waits for the queue): one a weight a step, TT_WEIGHT_COPIES=each_call
 * one a call. */
uint64_t sim_weight_conversions(backend_t *be);

/* bf16 activation gradients (sim_grad16.c): sets blocked_bf16_grads and
 * installs the backward operations that read and write them (after
 * sim_install_blocked's); widen / narrow convert `count` bf16 gradient
 * elements to float32 and back (to nearest even). */
void sim_install_grad16(backend_t *be);
void sim_grad16_widen(size_t count, const void *g, float *f);
void sim_grad16_narrow(size_t count, const float *f, void *g);

/* The in-process communicator (sim_comm.c). */
backend_comm *sim_comm_create(int n, backend_t *const *bes, tt_err *err);

/* ---- a sim backend's state (be->impl), for the files of this folder ---- */
typedef struct sim_block sim_block; /* one allocation (sim_backend.c) */
typedef struct {
    backend_t *cpu;          /* the arithmetic */
    prec_t prec;
    pthread_mutex_t lock;    /* the block list and counters (setup and teardown may
                              * come from another thread than the tower's) */
    sim_block *blocks;
    size_t in_use, peak;
    bool frozen;
    char alloc_error[160];
    size_t copies_reserved;  /* bytes of the 16-bit copies' scratch */
    float *copies;           /* that scratch: 16-bit values held as floats, host memory */
    void *copies_dev;        /* its device reservation, of the 16-bit size: what the
                              * pool counts (a GPU holds 2 bytes an element) */
    tt_err err;              /* the first error */
    sim_queue *compute;      /* the compute queue: the operations, in order */
    sim_clock clock;         /* every queue's events' clock (sim.h) */
    int64_t step;            /* the key of the last staged batch (dev->step) */
    /* the last loss (softmax_xent): its result, written by the compute
     * queue as a GPU's copy to pinned memory is, and the event recorded
     * after it, which loss_read waits for */
    double loss_sum;
    int correct;
    backend_event *loss_done;
    bool fail_download;      /* TT_SIM_FAULT download_error: the next download fails */
    /* a step being captured (sim_graph.c) by thread capture_thread (as
     * cudaStreamCaptureModeThreadLocal: another thread's operations on the
     * device are not refused); failed, why: set by that thread, the first
     * operation that could not be captured */
    atomic_bool capturing;
    pthread_t capture_thread;
    bool capture_failed;
    char capture_why[96];
    sim_scratch scratch;     /* the blocked convolutions' (sim_blocked.c) */
    /* the towers' weight copies (weight_copies.h): kept by the queue's
     * worker only (weights_add, _step and _remove are queued), as a GPU
     * stream orders them with the convolutions */
    weight_copies weights;
} sim_impl;

static inline sim_impl *sim_impl_of(backend_t *be) { return be->impl; }
/* The CPU backend that does a sim backend's arithmetic. */
static inline backend_t *sim_cpu(backend_t *be) { return sim_impl_of(be)->cpu; }
static inline sim_scratch *sim_scratch_of(backend_t *be) { return &sim_impl_of(be)->scratch; }
/* The backend's compute queue, and its device clock (every queue's). */
static inline sim_queue *sim_compute_queue(backend_t *be) { return sim_impl_of(be)->compute; }
static inline sim_clock *sim_device_clock(backend_t *be) { return &sim_impl_of(be)->clock; }
/* The compute queue, as sim_enqueue_on / sim_queue_drain. */
static inline void sim_enqueue(backend_t *be, void (*run)(backend_t *be, void *args),
                               const void *args, size_t size)
{
    sim_enqueue_on(sim_impl_of(be)->compute, run, args, size);
}
static inline void sim_drain(backend_t *be) { sim_queue_drain(sim_impl_of(be)->compute); }

/* Whether be captures now, on this thread (its loss_read answers zeros
 * without waiting). */
static inline bool sim_capturing(backend_t *be)
{
    sim_impl *s = sim_impl_of(be);
    return atomic_load(&s->capturing) && pthread_equal(s->capture_thread, pthread_self());
}
/* While be captures a step (backend.h, capture_begin): an operation that
 * cannot be captured (a host wait, an upload, an event, a copy queue's
 * work, an allocation or a free) calls this, which fails the capture
 * (the first reason is capture_end's error) and returns true: the caller
 * then skips its work, which the step's eager run does again. false when
 * be does not capture. Inline, so that the queue and the backend ask it
 * without calling into sim_graph.c. */
static inline bool sim_capture_refuse(backend_t *be, const char *what)
{
    sim_impl *s = sim_impl_of(be);
    if (!sim_capturing(be))
        return false;
    if (!s->capture_failed) {
        s->capture_failed = true;
        snprintf(s->capture_why, sizeof(s->capture_why), "%s", what);
    }
    return true;
}

#endif
