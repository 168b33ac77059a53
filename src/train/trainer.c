/* trainer.c - the training loop shared by every trainer type: creating the
 * trainer (towers, plug-ins, accumulators), the callbacks' hooks, a step,
 * an epoch and the run; the scalars it reports to the monitors. A tower's part
 * of a step is tower_step.c's, evaluation trainer_eval.c's, and what the
 * towers share (parameters, batchnorm statistics, learning rate)
 * tower_params.c's. */
#include "train/trainer.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/precision.h"
#include "comm/dist.h"
#include "train/device_towers.h"
#include "util/clock.h"
#include "util/env.h"
#include "util/log.h"
#include "util/threadpool.h"
#include "util/trace.h"

static const trainer_ops *trainer_ops_for(trainer_type t)
{
    switch (t) {
    case TRAINER_SIMPLE:
        return &trainer_simple_ops;
    case TRAINER_SYNC_REPLICATED:
        return &trainer_sync_replicated_ops;
    case TRAINER_SYNC_PARAMETER_SERVER:
        return &trainer_sync_parameter_server_ops;
    case TRAINER_ASYNC:
        return &trainer_async_ops;
    }
    return NULL;
}

/* The precision the towers' backend can run, or a usage error: never a
 * silent fp32 run. */
static int trainer_check_precision(const job_t *job, bool on_device, tt_err *err)
{
    if (on_device) /* every precision: each device tower's backend checks its device */
        return 0;
    switch (job->trainer.precision) {
    case PRECISION_FP32:
        return 0;
    case PRECISION_FP16:
        return err_set(err, TT_ERR_USAGE, "trainer.precision = \"fp16\" runs on GPU towers only "
                       "(this job trains on the CPU); use \"bf16\" or \"fp32\"");
    case PRECISION_BF16:
        break;
    }
    char why[256];
    if (backend_cpu_bf16_isa(why, sizeof(why)) == NULL)
        return err_set(err, TT_ERR_USAGE, "trainer.precision = \"bf16\" %s; use \"fp32\"", why);
    if (env_bit("TT_BF16_KERNELS") == ENV_OTHER)
        return err_set(err, TT_ERR_USAGE, "TT_BF16_KERNELS=%.40s: expected 0 or 1",
                       getenv("TT_BF16_KERNELS"));
    return 0;
}

/* A CPU tower's backend: in a bf16 job, bf16's kernels unless this CPU
 * computes it in fp32 (backend_cpu_bf16_fp32_why: bf16 would be slower). */
static backend_t *trainer_cpu_backend_create(const job_t *job, int t, int threads, tt_err *err)
{
    if (job->trainer.precision == PRECISION_BF16 && backend_cpu_bf16_fp32_why() == NULL)
        return backend_cpu_create_bf16(job->trainer.towers[t], threads, err);
    return backend_cpu_create(job->trainer.towers[t], threads, err);
}

static int trainer_create_towers(trainer_t *tr, bool on_device, tt_err *err)
{
    const job_t *job = tr->job;
    int n = tr->n_towers;
    int threads = job->trainer.threads_per_tower;
    if (threads <= 0) {
        /* this rank's cores shared by its towers (threadpool_cpu_share: a
         * process held to one CPU by taskset once ran a thread per online
         * CPU on it) */
        threads = threadpool_cpu_share(dist_local_size()) / n;
        if (threads < 1)
            threads = 1;
    }
    tr->backends = calloc((size_t)n, sizeof(backend_t *));
    tr->towers = calloc((size_t)n, sizeof(tower_t));
    if (!tr->backends || !tr->towers)
        return err_set(err, TT_ERR_RUNTIME, "out of memory");
    float *host = malloc((tr->model.n_floats ? tr->model.n_floats : 1) * sizeof(float));
    if (host == NULL)
        return err_set(err, TT_ERR_RUNTIME, "out of memory");
    model_init_params(&tr->model, job->seed, host);
    /* the same on every rank already (a pure function of the seed); rank 0's
     * all the same, as towertrain.cfg(5), TRAINER says */
    dist_broadcast(host, tr->model.n_floats * sizeof(float), 0);
    for (int t = 0; t < n; t++) {
        tr->backends[t] = on_device ? device_backend_create(job, t, err)
                                    : trainer_cpu_backend_create(job, t, threads, err);
        if (tr->backends[t] == NULL ||
            tower_create(&tr->model, tr->backends[t], job->dataflow.batch_size, &tr->towers[t],
                         err) != 0) {
            if (on_device) /* out of device memory names the tower and the bytes */
                device_explain_setup_failure(tr, t, err);
            free(host);
            return -1;
        }
        /* Every tower starts from the same values (tower 0's, towertrain.cfg(5), TRAINER). */
        tower_set_params(&tr->towers[t], host);
    }
    free(host);
    return 0;
}

/* The tower set the trainer and eval share: the backends and towers, the
 * towers' threads, and on a device (GPU or sim) each tower's staging. */
static int trainer_create_tower_set(trainer_t *tr, bool on_device, tt_err *err)
{
    if (trainer_create_towers(tr, on_device, err) != 0)
        return -1;
    tr->threads = tower_threads_create(tr->n_towers, err);
    if (tr->threads == NULL || (on_device && device_towers_create(tr, err) != 0))
        return -1;
    return 0;
}

/* trainer.accumulate > 1: each tower's sum of its micro-batches' gradients */
static int trainer_create_accumulators(trainer_t *tr, tt_err *err)
{
    size_t bytes = (tr->model.n_trainable ? tr->model.n_trainable : 1) * sizeof(float);
    if ((tr->accum = calloc((size_t)tr->n_towers, sizeof(float *))) == NULL)
        return err_set(err, TT_ERR_RUNTIME, "out of memory");
    for (int t = 0; t < tr->n_towers; t++)
        if ((tr->accum[t] = tr->backends[t]->alloc(tr->backends[t], bytes)) == NULL)
            return err_set(err, TT_ERR_RUNTIME, "out of memory for gradient accumulation");
    return 0;
}

static int trainer_create_plugins(trainer_t *tr, tt_err *err)
{
    const job_t *job = tr->job;
    tr->callbacks = calloc((size_t)job->n_callbacks + 1, sizeof(callback_t));
    tr->monitors = calloc((size_t)job->n_monitors + 1, sizeof(monitor_t));
    if (!tr->callbacks || !tr->monitors)
        return err_set(err, TT_ERR_RUNTIME, "out of memory");
    for (int i = 0; i < job->n_callbacks; i++) {
        const callback_ops *ops = callback_ops_find(job->callbacks[i].type);
        if (ops == NULL)
            return err_set(err, TT_ERR_USAGE, "callback '%s' is not implemented in this "
                           "version", job->callbacks[i].type);
        callback_t *cb = &tr->callbacks[tr->n_callbacks++];
        cb->ops = ops;
        cb->cfg = &job->callbacks[i];
        if (ops->create && ops->create(cb, tr, err) != 0)
            return -1;
    }
    /* monitors only record; under MPI rank 0 alone has them */
    for (int i = 0; i < job->n_monitors && tr->rank == 0; i++) {
        const monitor_ops *ops = monitor_ops_find(job->monitors[i].type);
        if (ops == NULL)
            return err_set(err, TT_ERR_USAGE, "monitor '%s' is not implemented in this version",
                           job->monitors[i].type);
        monitor_t *mon = &tr->monitors[tr->n_monitors++];
        mon->ops = ops;
        mon->cfg = &job->monitors[i];
        if (ops->create && ops->create(mon, tr, err) != 0)
            return -1;
    }
    return 0;
}

int trainer_create(trainer_t *tr, const job_t *job, tt_err *err)
{
    memset(tr, 0, sizeof(*tr));
    tr->job = job;
    bool on_device;
    if (device_select(job, &on_device, tr->device_note, sizeof(tr->device_note), err) != 0 ||
        trainer_check_precision(job, on_device, err) != 0)
        return -1;
    if (job->trainer.precision == PRECISION_FP16)
        trainer_enable_loss_scale(tr);
    tr->ops = trainer_ops_for(job->trainer.type);
    tr->n_towers = job->trainer.nr_tower;
    tr->rank = dist_rank();
    tr->n_ranks = dist_size();
    if (tr->n_ranks > 1 && job->trainer.type != TRAINER_SYNC_REPLICATED)
        return err_set(err, TT_ERR_USAGE, "trainer.type: only sync_replicated runs across MPI "
                       "ranks (this job has %d)", tr->n_ranks);
    /* before the first collective (the broadcast of tower 0's initial
     * values); one process of CPU towers never waits on another */
    if ((tr->n_ranks > 1 || on_device) &&
        dist_watch_start(job->trainer.collective_timeout, false, err) != 0)
        return -1;
    /* accumulate: the global batch is K micro-batches, in each of which
     * rank r has its slices at r * towers (dataflow_set_parts) */
    int parts = job->trainer.accumulate;
    tr->local_batch = job->dataflow.batch_size * tr->n_towers * parts;
    tr->global_batch = tr->local_batch * tr->n_ranks;

    if (dataset_open(&job->dataflow.source, job->dataflow.limit, job->model.classes,
                     &tr->train_set, err) != 0)
        return -1;
    /* rank r reads slices r*towers .. of every global batch (towertrain.cfg(5), DATAFLOW) */
    if (dataflow_create(&job->dataflow, tr->train_set, job->seed, DATAFLOW_TRAIN,
                        tr->global_batch, tr->rank * tr->local_batch / parts, tr->local_batch,
                        &tr->train_flow, err) != 0 ||
        dataflow_set_parts(tr->train_flow, parts, err) != 0)
        return -1;
    if (model_build(&job->model, dataflow_shape(tr->train_flow), &tr->model, err) != 0)
        return -1;
    if (trainer_create_tower_set(tr, on_device, err) != 0 ||
        (parts > 1 && trainer_create_accumulators(tr, err) != 0))
        return -1;
    /* session_init before the type's setup: every copy starts there */
    if (job->session_init[0] != '\0' && trainer_load_params(tr, job->session_init, err) != 0)
        return -1;
    if (tr->ops->setup(tr, err) != 0) {
        for (int t = 0; on_device && t < tr->n_towers; t++) /* out of device memory: which tower */
            if (device_explain_setup_failure(tr, t, err))
                break;
        return -1;
    }

    tr->steps_per_epoch = job->steps_per_epoch > 0
                              ? job->steps_per_epoch
                              : dataflow_batches_per_pass(tr->train_flow);
    tr->max_epoch = job->max_epoch;
    tr->epoch_num = job->starting_epoch;
    tr->global_step = 0;
    tr->updates = 0;
    const char *fault = getenv("TT_FAULT_GRAD"); /* fault_gradient_step */
    tr->fault_grad_step = fault != NULL ? atoll(fault) : 0;
    tr->local_step = 0;
    if (trainer_create_plugins(tr, err) != 0)
        return -1;
    /* GPU: nothing is cudaMalloc'ed from here on */
    return on_device ? device_towers_finish_setup(tr, err) : 0;
}

int trainer_create_eval(trainer_t *tr, const job_t *job, shape3 data, tt_err *err)
{
    memset(tr, 0, sizeof(*tr));
    tr->job = job;
    bool on_device;
    /* the job's precision, as its inference_runner evaluated */
    if (device_select(job, &on_device, tr->device_note, sizeof(tr->device_note), err) != 0 ||
        trainer_check_precision(job, on_device, err) != 0)
        return -1;
    /* the towers alone, whatever the job's type: the type's setup is not
     * run (tr->impl stays NULL), and simple has no shared copy to publish */
    tr->ops = &trainer_simple_ops;
    tr->n_towers = 1; /* evaluation runs on tower 0, as the inference_runner's */
    tr->rank = dist_rank();
    tr->n_ranks = dist_size();
    if (model_build(&job->model, data, &tr->model, err) != 0 ||
        trainer_create_tower_set(tr, on_device, err) != 0)
        return -1;
    return on_device ? device_towers_finish_setup(tr, err) : 0;
}

void trainer_free(trainer_t *tr)
{
    for (int i = 0; i < tr->n_callbacks; i++)
        if (tr->callbacks[i].ops->destroy)
            tr->callbacks[i].ops->destroy(&tr->callbacks[i]);
    for (int i = 0; i < tr->n_monitors; i++)
        if (tr->monitors[i].ops->destroy)
            tr->monitors[i].ops->destroy(&tr->monitors[i]);
    free(tr->callbacks);
    free(tr->monitors);
    tower_threads_free(tr->threads);
    if (tr->impl != NULL)
        tr->ops->destroy(tr);
    device_towers_free(tr);
    for (int t = 0; t < tr->n_towers; t++) {
        if (tr->accum && tr->accum[t])
            tr->backends[t]->free(tr->backends[t], tr->accum[t]);
        if (tr->towers && tr->towers[t].be)
            tower_free(&tr->towers[t]);
        if (tr->backends && tr->backends[t])
            tr->backends[t]->destroy(tr->backends[t]);
    }
    free(tr->accum);
    free(tr->towers);
    free(tr->backends);
    if (tr->train_flow)
        dataflow_free(tr->train_flow);
    if (tr->train_set)
        dataset_free(tr->train_set);
    model_free(&tr->model);
    memset(tr, 0, sizeof(*tr));
}

/* The double whose shortest decimal form reads back as f: a learning rate of
 * 0.05f is reported as 0.05, not 0.0500000007450581. */
static double float_shortest(float f)
{
    char buf[32];
    for (int digits = 6; digits <= 9; digits++) {
        snprintf(buf, sizeof(buf), "%.*g", digits, (double)f);
        if (strtof(buf, NULL) == f)
            break;
    }
    return strtod(buf, NULL);
}

/* Test hook: with TT_DUMP_TOWERS=<dir>, every epoch end writes each tower's
 * non-trainable block (batchnorm statistics, as float32) to
 * <dir>/step-<global step>-tower-<t>.bin, so a test can see through the
 * binary that the towers agree. Best effort: a failure only warns. */
static void dump_tower_statistics(trainer_t *tr)
{
    const char *dir = getenv("TT_DUMP_TOWERS");
    size_t lo = tr->model.n_trainable, n = tr->model.n_floats - lo;
    if (dir == NULL || *dir == '\0' || n == 0)
        return;
    float *one = malloc(n * sizeof(float));
    for (int t = 0; one != NULL && t < tr->n_towers; t++) {
        tower_t *tw = &tr->towers[t];
        tw->be->download(tw->be, one, tw->params + lo, n * sizeof(float));
        char path[4096];
        snprintf(path, sizeof(path), "%s/step-%lld-tower-%d.bin", dir,
                 (long long)tr->global_step, t);
        FILE *f = fopen(path, "wb");
        if (f == NULL || fwrite(one, sizeof(float), n, f) != n)
            log_printf("warning: TT_DUMP_TOWERS: cannot write %s\n", path);
        if (f != NULL)
            fclose(f);
    }
    free(one);
}

/* A callback triggers after every every_k_steps-th step when it has one, else at
 * the end of every every_k_epochs-th epoch. */
static bool triggers_on_step(const callback_t *cb, int64_t global_step)
{
    int k = cb->cfg->every_k_steps;
    return k > 0 && global_step % k == 0;
}

static bool triggers_on_epoch(const callback_t *cb, int64_t epoch)
{
    int k = cb->cfg->every_k_epochs;
    return cb->cfg->every_k_steps <= 0 && k > 0 && epoch % k == 0;
}

typedef int (*hook_fn)(callback_t *cb, trainer_t *tr, tt_err *err);
typedef enum { HOOK_BEFORE_TRAIN, HOOK_BEFORE_EPOCH, HOOK_AFTER_STEP, HOOK_AFTER_EPOCH,
               HOOK_AFTER_TRAIN } hook_id;

static hook_fn hook_of(const callback_ops *ops, hook_id h)
{
    switch (h) {
    case HOOK_BEFORE_TRAIN:
        return ops->before_train;
    case HOOK_BEFORE_EPOCH:
        return ops->before_epoch;
    case HOOK_AFTER_STEP:
        return ops->after_step;
    case HOOK_AFTER_EPOCH:
        return ops->after_epoch;
    case HOOK_AFTER_TRAIN:
        return ops->after_train;
    }
    return NULL;
}

/* Calls one hook of every callback, in the job's order. */
static int trainer_call_hook(trainer_t *tr, hook_id h, tt_err *err)
{
    for (int i = 0; i < tr->n_callbacks; i++) {
        hook_fn fn = hook_of(tr->callbacks[i].ops, h);
        if (fn != NULL && fn(&tr->callbacks[i], tr, err) != 0)
            return -1;
    }
    return 0;
}

static void trainer_print_table(const trainer_t *tr)
{
    const job_t *job = tr->job;
    if (tr->ops->describe != NULL)
        tr->ops->describe(tr);
    if (tr->device_note[0] != '\0')
        log_printf("%s\n", tr->device_note);
    if (tr->dev != NULL) {
        device_print_table(tr);
    } else {
        log_printf("%-6s %-8s %-8s %-8s\n", "tower", "device", "threads", "batch");
        for (int t = 0; t < tr->n_towers; t++)
            log_printf("%-6d %s:%-4d %-8d %-8d\n", t, tr->backends[t]->name,
                       job->trainer.towers[t], tr->backends[t]->threads,
                       job->dataflow.batch_size);
        char kernels[160];
        log_printf("cpu kernels: %s\n", backend_cpu_kernels(kernels, sizeof(kernels)));
        const char *fp32_why =
            job->trainer.precision == PRECISION_BF16 ? backend_cpu_bf16_fp32_why() : NULL;
        if (fp32_why != NULL) {
            log_printf("precision bf16: computed in fp32 here, every layer: %s (bf16 would be "
                       "slower; TT_BF16_KERNELS=1 runs its kernels anyway)\n", fp32_why);
        } else if (job->trainer.precision == PRECISION_BF16) { /* as GPU towers say it */
            char what[256];
            prec_describe(PREC_BF16, what, sizeof(what));
            log_printf("precision bf16: %s; on %s (%s)\n", what, backend_cpu_bf16_isa(NULL, 0),
                       backend_cpu_bf16_engines());
        }
    }
    if (tr->n_ranks > 1)
        log_printf("trainer %s: %d rank(s) x %d tower(s), global batch %d (%d x %d x %d), "
                   "%lld steps per epoch\n", tr->ops->name, tr->n_ranks,
                   tr->n_towers, tr->global_batch, job->dataflow.batch_size, tr->n_towers,
                   tr->n_ranks, (long long)tr->steps_per_epoch);
    else
        log_printf("trainer %s: %d tower(s), global batch %d (%d x %d), %lld steps per epoch\n",
                   tr->ops->name, tr->n_towers, tr->global_batch,
                   job->dataflow.batch_size, tr->n_towers, (long long)tr->steps_per_epoch);
    if (job->trainer.accumulate > 1)
        log_printf("accumulate: %d micro-batches of %d per tower and update (the global batch "
                   "above counts them all)\n", job->trainer.accumulate, job->dataflow.batch_size);
    /* batches are cut from the global batch (towertrain.cfg(5), DATAFLOW):
     * another one takes other samples at every step from here on */
    if (tr->resumed_global_batch > 0 && tr->resumed_global_batch != tr->global_batch)
        log_printf("resume: the global batch is now %d (batch_size %d x %d tower(s) x %d "
                   "rank(s)); the checkpoint was written with %lld: training continues, but "
                   "no longer bit for bit as the original run would have\n", tr->global_batch,
                   job->dataflow.batch_size, tr->n_towers, tr->n_ranks,
                   (long long)tr->resumed_global_batch);
}

int trainer_step(trainer_t *tr, tt_err *err)
{
    trace_set_row(TRACE_ROW_TRAINER); /* simple's tower 0 took it last step */
    int64_t t_step = trace_begin(), t_data = t_step;
    const batch_t *b = dataflow_next(tr->train_flow);
    trace_end(TRACE_ROW_TRAINER, t_data, TRACE_CAT_DATA, "data wait", -1);
    if (b == NULL)
        return dataflow_error(tr->train_flow, err) != 0
                   ? -1
                   : err_set(err, TT_ERR_RUNTIME, "the training dataflow stopped");
    /* the step's scale, fixed for the whole step (async may change
     * tr->loss_scale while other towers still compute) */
    for (int t = 0; t < tr->n_towers && tr->loss_scaling; t++)
        tr->towers[t].loss_scale = tr->loss_scale.scale;
    dist_watch_set_step(tr->global_step + 1); /* what a collective that times out names */
    if (tr->ops->run_step(tr, b, err) != 0)
        return -1;
    /* simple's tower 0 may have taken this thread's row: the callbacks'
     * span begun next is the trainer's (a device row's would be dropped) */
    trace_set_row(TRACE_ROW_TRAINER);
    if (tr->dev != NULL && device_towers_check(tr, err) != 0)
        return -1; /* a CUDA error: exit 1, the monitors flushed on the way out */
    if (!isfinite(tr->step_loss))
        return err_set(err, TT_ERR_RUNTIME, "loss became %s at global step %lld",
                       isnan(tr->step_loss) ? "NaN" : "Inf", (long long)tr->global_step);
    trace_end(TRACE_ROW_TRAINER, t_step, TRACE_CAT_TRAINER, "step", tr->global_step + 1);
    tr->global_step++;
    tr->local_step++;
    return 0;
}

/* The epoch-end triggers of the callbacks due this epoch: those that run
 * before the monitors write the epoch, or those that run after (model_saver). */
static int epoch_triggers(trainer_t *tr, bool after_monitors, tt_err *err)
{
    for (int i = 0; i < tr->n_callbacks; i++) {
        callback_t *cb = &tr->callbacks[i];
        if (cb->ops->trigger && cb->ops->trigger_after_monitors == after_monitors &&
            triggers_on_epoch(cb, tr->epoch_num) && cb->ops->trigger(cb, tr, err) != 0)
            return -1;
    }
    return 0;
}

static int trainer_run_epoch(trainer_t *tr, tt_err *err)
{
    if (trainer_call_hook(tr, HOOK_BEFORE_EPOCH, err) != 0)
        return -1;
    tr->epoch_start_time = clock_s();
    tr->epoch_first_step = tr->local_step; /* > 0 when resumed mid-epoch */
    while (tr->local_step < tr->steps_per_epoch && !tr->stop_training) {
        /* under MPI only a stop the ranks agreed on, or some would wait forever */
        if ((tr->n_ranks > 1 ? tr->stop_agreed : trainer_stop_signal) != 0)
            return TT_STOPPED_BY_SIGNAL;
        if (trainer_step(tr, err) != 0)
            return -1;
        tr->epoch_seconds = clock_s() - tr->epoch_start_time;
        int64_t t_cb = trace_begin();
        if (trainer_call_hook(tr, HOOK_AFTER_STEP, err) != 0)
            return -1;
        /* per step too, so event files show schedules within an epoch */
        if (trainer_put_scalar(tr, "learning_rate",
                               float_shortest(trainer_get_learning_rate(tr)), err) != 0)
            return -1;
        /* the norm clip_global_norm saw (the epoch's entry keeps the last) */
        if (tr->job->optimizer.clip_global_norm > 0.0f &&
            trainer_put_scalar(tr, "grad_norm", tr->ops->optimizer(tr, 0)->grad_norm, err) != 0)
            return -1;
        for (int i = 0; i < tr->n_callbacks; i++) {
            callback_t *cb = &tr->callbacks[i];
            if (cb->ops->trigger && triggers_on_step(cb, tr->global_step) &&
                cb->ops->trigger(cb, tr, err) != 0)
                return -1;
        }
        trace_end(TRACE_ROW_TRAINER, t_cb, TRACE_CAT_TRAINER, "callbacks", -1);
    }
    tr->epoch_seconds = clock_s() - tr->epoch_start_time;
    /* tower-local batchnorm statistics become one, before validation and saving */
    trainer_sync_batchnorm(tr);
    dump_tower_statistics(tr);
    if (trainer_put_scalar(tr, "learning_rate",
                           float_shortest(trainer_get_learning_rate(tr)), err) != 0)
        return -1;
    if (tr->loss_scaling &&
        trainer_put_scalar(tr, "loss_scale", (double)tr->loss_scale.scale, err) != 0)
        return -1;
    if (epoch_triggers(tr, false, err) != 0 || trainer_call_hook(tr, HOOK_AFTER_EPOCH, err) != 0)
        return -1;
    for (int m = 0; m < tr->n_monitors; m++) {
        monitor_t *mon = &tr->monitors[m];
        if (mon->ops->epoch_end &&
            mon->ops->epoch_end(mon, tr, tr->scalars, tr->n_scalars, err) != 0)
            return -1;
    }
    /* the checkpoint last: never ahead of its epoch's stats.json entry */
    if (epoch_triggers(tr, true, err) != 0)
        return -1;
    tr->n_scalars = 0;
    tr->local_step = 0;
    return 0;
}

int trainer_train(trainer_t *tr, tt_err *err)
{
    model_print_table(&tr->model);
    trainer_print_table(tr);
    for (int m = 0; m < tr->n_monitors; m++) {
        monitor_t *mon = &tr->monitors[m];
        if (mon->ops->open && mon->ops->open(mon, tr, err) != 0)
            return -1;
    }
    if (dataflow_start(tr->train_flow, tr->global_step, err) != 0)
        return -1;
    if (trainer_call_hook(tr, HOOK_BEFORE_TRAIN, err) != 0)
        return -1;
    int rc = 0;
    while (tr->epoch_num <= tr->max_epoch && !tr->stop_training) {
        if ((rc = trainer_run_epoch(tr, err)) != 0)
            break;
        tr->epoch_num++;
    }
    if (rc == TT_STOPPED_BY_SIGNAL) {
        /* the step in flight is done: keep what was trained */
        char name[256];
        log_printf("\nstopped by signal %d at global step %lld: writing a checkpoint\n",
                   (int)trainer_stop_signal, (long long)tr->global_step);
        if (trainer_save_latest(tr, name, sizeof(name), err) != 0)
            rc = -1;
        else
            log_printf("saved %s\n", name);
    }
    if (rc == 0)
        rc = trainer_call_hook(tr, HOOK_AFTER_TRAIN, err);
    /* Monitors are closed (flushed) on failure too, so nothing already
     * recorded is lost. */
    tt_err close_err = {0};
    for (int m = 0; m < tr->n_monitors; m++) {
        monitor_t *mon = &tr->monitors[m];
        if (mon->ops->close)
            mon->ops->close(mon, tr, rc == 0 ? err : &close_err);
    }
    if (rc == TT_STOPPED_BY_SIGNAL && err->code == TT_OK)
        return TT_STOPPED_BY_SIGNAL;
    return rc != 0 || err->code != TT_OK ? -1 : 0;
}
