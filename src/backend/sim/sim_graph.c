/* sim_graph.c - the simulated GPU's captured steps (backend.h's
 * capture_begin, capture_end, graph_launch, graph_free: a CUDA graph's
 * stream capture, instantiation and launch) and the optimizer updates that
 * read their per-step scalars from device memory (backend_step_vars).
 *
 * A capture keeps the jobs queued on the compute queue (sim_queue.c) in a
 * list instead of running them; a launch queues a copy of each, in order.
 * A replay therefore runs the captured step's jobs with the arguments they
 * had at capture, as a GPU's graph replays its kernels' parameters: a
 * per-step value passed by value is the capture's forever, which the
 * bitwise tests against eager steps catch (tests/e2e_sim_graph.sh).
 *
 * What a CUDA capture refuses (a host wait, a pageable copy, work on
 * another stream, an allocation) sim refuses too (sim_capture_refuse, called
 * by those operations): the capture fails and nothing of the step ran, as
 * after a CUDA capture is invalidated. */
#include "backend/sim/sim.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "backend/math.h"

struct backend_graph {
    sim_job *jobs; /* the captured step, in queue order */
};

int sim_capture_begin(backend_t *be, tt_err *err)
{
    sim_impl *s = sim_impl_of(be);
    if (atomic_load(&s->capturing))
        return err_set(err, TT_ERR_RUNTIME, "sim:%d: a capture is already under way",
                       be->device);
    s->capture_thread = pthread_self();
    s->capture_failed = false;
    s->capture_why[0] = '\0';
    atomic_store(&s->capturing, true);
    sim_queue_capture_begin(s->compute);
    return 0;
}

backend_graph *sim_capture_end(backend_t *be, tt_err *err)
{
    sim_impl *s = sim_impl_of(be);
    if (!sim_capturing(be)) {
        err_set(err, TT_ERR_RUNTIME, "sim:%d: no capture under way", be->device);
        return NULL;
    }
    bool lost;
    sim_job *jobs = sim_queue_capture_end(s->compute, &lost);
    atomic_store(&s->capturing, false);
    if (lost)
        sim_capture_refuse(be, "out of host memory");
    if (!s->capture_failed && sim_fault_capture()) {
        s->capture_failed = true;
        snprintf(s->capture_why, sizeof(s->capture_why),
                 "injected by TT_SIM_FAULT=capture_error");
    }
    backend_graph *g = s->capture_failed ? NULL : malloc(sizeof(*g));
    if (g == NULL) {
        sim_jobs_free(jobs);
        err_set(err, TT_ERR_RUNTIME, "sim:%d: the step cannot be captured: %s", be->device,
                s->capture_failed ? s->capture_why : "out of host memory");
        return NULL;
    }
    g->jobs = jobs;
    return g;
}

/* The graph's jobs, then the loss's event (loss_read waits for it: the
 * captured softmax_xent recorded none) */
int sim_graph_launch(backend_t *be, backend_graph *g, tt_err *err)
{
    sim_impl *s = sim_impl_of(be);
    if (atomic_load(&s->capturing))
        return err_set(err, TT_ERR_RUNTIME, "sim:%d: a graph launched while capturing",
                       be->device);
    sim_queue_replay(s->compute, g->jobs);
    return sim_dev_event_record(be, s->loss_done, sim_dev_queue(be), err);
}

void sim_graph_free(backend_t *be, backend_graph *g)
{
    (void)be;
    if (g == NULL)
        return;
    sim_jobs_free(g->jobs); /* the queue ran copies */
    free(g);
}

/* ---- the updates reading backend_step_vars when they run (on the
 *      queue's worker), through the CPU's arithmetic: the by-value
 *      updates' bits ---- */

typedef struct {
    size_t count;
    const backend_step_vars *v;
    float momentum, beta1, beta2, eps, weight_decay;
    bool nesterov;
    float *w, *buf, *m, *v_sq;
    const float *g;
} q_vars_args;

static void q_sgd_vars_run(backend_t *be, void *p)
{
    q_vars_args *a = p;
    backend_t *cpu = sim_cpu(be);
    cpu->sgd_step(cpu, a->count, a->v->lr, a->momentum, a->nesterov, a->weight_decay,
                  a->v->first_step != 0, a->w, a->g, a->buf);
}

static void sim_sgd_step_vars(backend_t *be, size_t count, const backend_step_vars *v,
                              float momentum, bool nesterov, float weight_decay, float *w,
                              const float *g, float *buf)
{
    q_vars_args a = {.count = count, .v = v, .momentum = momentum, .nesterov = nesterov,
                     .weight_decay = weight_decay, .w = w, .g = g, .buf = buf};
    sim_enqueue(be, q_sgd_vars_run, &a, sizeof(a));
}

/* The CPU's Adam recomputes the bias corrections from v->step; the CUDA
 * kernel reads v's adam_step_size and adam_bc2_sqrt instead, so those must
 * be the same numbers: a block whose fill disagrees is the device's error
 * here, before a GPU ever runs it. */
static void q_adam_vars_run(backend_t *be, void *p)
{
    q_vars_args *a = p;
    backend_t *cpu = sim_cpu(be);
    const backend_step_vars *v = a->v;
    tt_adam_consts c = tt_adam_make(v->lr, a->beta1, a->beta2, a->eps, a->weight_decay, v->step);
    if (c.step_size != v->adam_step_size || c.bias_correction2_sqrt != v->adam_bc2_sqrt)
        sim_fail(be, "the step block's Adam constants are not those of step %lld",
                 (long long)v->step);
    cpu->adam_step(cpu, a->count, v->lr, a->beta1, a->beta2, a->eps, a->weight_decay, v->step,
                   a->w, a->g, a->m, a->v_sq);
}

static void sim_adam_step_vars(backend_t *be, size_t count, const backend_step_vars *v,
                               float beta1, float beta2, float eps, float weight_decay, float *w,
                               const float *g, float *m, float *v_sq)
{
    q_vars_args a = {.count = count, .v = v, .beta1 = beta1, .beta2 = beta2, .eps = eps,
                     .weight_decay = weight_decay, .w = w, .g = g, .m = m, .v_sq = v_sq};
    sim_enqueue(be, q_adam_vars_run, &a, sizeof(a));
}

static void q_decay_vars_run(backend_t *be, void *p)
{
    q_vars_args *a = p;
    backend_t *cpu = sim_cpu(be);
    cpu->scale(cpu, a->count, a->v->decay, a->w);
}

static void sim_decay_vars(backend_t *be, size_t count, const backend_step_vars *v, float *w)
{
    q_vars_args a = {.count = count, .v = v, .w = w};
    sim_enqueue(be, q_decay_vars_run, &a, sizeof(a));
}

typedef struct {
    size_t count;
    float rate;
    const uint64_t *seed;
    const float *x;
    float *y, *mask;
} q_dropout_vars_args;

static void q_dropout_vars_run(backend_t *be, void *p)
{
    q_dropout_vars_args *a = p;
    backend_t *cpu = sim_cpu(be);
    cpu->dropout_forward(cpu, a->count, a->rate, *a->seed, a->x, a->y, a->mask);
}

static void sim_dropout_forward_vars(backend_t *be, size_t count, float rate,
                                     const uint64_t *seed, const float *x, float *y,
                                     float *mask)
{
    q_dropout_vars_args a = {count, rate, seed, x, y, mask};
    sim_enqueue(be, q_dropout_vars_run, &a, sizeof(a));
}

void sim_install_vars_ops(backend_t *be)
{
    be->dropout_forward_vars = sim_dropout_forward_vars;
    be->sgd_step_vars = sim_sgd_step_vars;
    be->adam_step_vars = sim_adam_step_vars;
    be->decay_vars = sim_decay_vars;
}
