/* trainer.h - the training loop, and the hooks callbacks and monitors react to.
 *
 * The trainer owns time (steps and epochs); callbacks and monitors only react to
 * hooks, as in tensorpack. One step of every trainer is: take the step's batch,
 * run the tower function on each tower's slice (forward, loss, backward), combine
 * the gradients as the trainer type says, apply the optimizer. The trainer types
 * differ only in that step (simple.c, ...); trainer.c runs the loop.
 */
#ifndef TT_TRAINER_H
#define TT_TRAINER_H

#include <stdbool.h>
#include <stdint.h>

#include <signal.h>

#include "backend/backend.h"
#include "config/job.h"
#include "dataflow/dataflow.h"
#include "model/model.h"
#include "optim/optimizer.h"
#include "train/loss_scale.h"
#include "train/tower_threads.h"
#include "util/err.h"

typedef struct trainer trainer_t;
typedef struct callback callback_t;
typedef struct monitor monitor_t;

/* One named scalar of the current epoch, as the json monitor writes it. */
#define TRAINER_MAX_SCALARS 64
typedef struct {
    char name[64];
    double value;
} scalar_t;

/* ---- callbacks (src/callbacks/, one file each) ---- */

typedef struct {
    const char *type;
    /* Every hook may be NULL. Hooks return 0 or -1 with err filled.
     * create reads the settings and opens what the callback needs (datasets)
     * before anything is written: bad settings fail with exit 2 and no logdir. */
    int (*create)(callback_t *cb, trainer_t *tr, tt_err *err);
    int (*before_train)(callback_t *cb, trainer_t *tr, tt_err *err);
    int (*before_epoch)(callback_t *cb, trainer_t *tr, tt_err *err);
    int (*after_step)(callback_t *cb, trainer_t *tr, tt_err *err);   /* every step */
    /* On the callback's schedule: after every every_k_steps-th step, or at the end
     * of every every_k_epochs-th epoch (the default: every epoch). */
    int (*trigger)(callback_t *cb, trainer_t *tr, tt_err *err);
    int (*after_epoch)(callback_t *cb, trainer_t *tr, tt_err *err);  /* every epoch, after triggers */
    int (*after_train)(callback_t *cb, trainer_t *tr, tt_err *err);
    void (*destroy)(callback_t *cb);
    /* At an epoch's end this one triggers after the monitors have written the
     * epoch (model_saver): the checkpoint a resume starts from is never ahead
     * of stats.json, whose entry would otherwise be lost for good. */
    bool trigger_after_monitors;
    /* What a resume must get back to go on as the run would have (early_stop's
     * best, a moving average): one line of text (no newline) into out; -1
     * when it does not fit. Every checkpoint keeps it (metadata
     * callback_state); state_load gets it back after a resume restores the
     * checkpoint, before before_train, when the callback is at the same place
     * in the callbacks list. Both NULL for a callback without state. */
    int (*state_save)(callback_t *cb, char *out, size_t len);
    int (*state_load)(callback_t *cb, trainer_t *tr, const char *text, tt_err *err);
} callback_ops;

struct callback {
    const callback_ops *ops;
    const plugin_cfg *cfg;
    void *state;
};

/* ---- monitors (monitors/, one file each) ---- */

typedef struct {
    const char *type;
    /* create: settings only, nothing written; open: the log directory exists. */
    int (*create)(monitor_t *mon, trainer_t *tr, tt_err *err);
    /* resume_check: a checkpoint is restored and nothing is written yet;
     * what open will read of the log directory must be readable (a resume
     * refused later would have rewritten job.cfg) */
    int (*resume_check)(monitor_t *mon, trainer_t *tr, tt_err *err);
    int (*open)(monitor_t *mon, trainer_t *tr, tt_err *err);
    /* A scalar at a global step (per-step scalars and epoch scalars alike). */
    int (*put_scalar)(monitor_t *mon, trainer_t *tr, const char *name, double value,
                      tt_err *err);
    /* The end of an epoch: scalars holds the latest value of every scalar. */
    int (*epoch_end)(monitor_t *mon, trainer_t *tr, const scalar_t *scalars, int n,
                     tt_err *err);
    int (*close)(monitor_t *mon, trainer_t *tr, tt_err *err);
    void (*destroy)(monitor_t *mon);
} monitor_ops;

struct monitor {
    const monitor_ops *ops;
    const plugin_cfg *cfg;
    void *state;
};

/* ---- the trainer ---- */

/* One trainer type (simple.c, sync_replicated.c, sync_parameter_server.c,
 * async.c). Each type owns its state behind tr->impl: the optimizers that
 * apply its updates, its all-reduce, its copy of the parameters. The loop,
 * callbacks and checkpoints reach that state only through these hooks. */
typedef struct {
    const char *name;
    /* Creates the type's state (tr->impl) once the towers hold their initial
     * parameters. */
    int (*setup)(trainer_t *tr, tt_err *err);
    /* One training step over the batch; fills tr->step_loss / step_accuracy. */
    int (*run_step)(trainer_t *tr, const batch_t *batch, tt_err *err);
    /* Logs what setup chose (all-reduce, placement) with the trainer table,
     * once nothing can fail before training; may be NULL. */
    void (*describe)(const trainer_t *tr);
    /* The optimizers that apply the updates, i = 0, 1, ... until NULL. Every
     * hyperparameter a callback sets goes to each of them; the first one's
     * state is what a checkpoint saves. */
    optimizer_t *(*optimizer)(trainer_t *tr, int i);
    /* Copies the parameters the type keeps outside the towers into tower 0,
     * before tower 0 is read (evaluation, checkpoints, histograms); NULL when
     * tower 0 always holds them. */
    void (*publish)(trainer_t *tr);
    /* The towers were given new parameters (resume) and tr->global_step its
     * new value: the type takes them into its own copy; may be NULL. */
    void (*reload)(trainer_t *tr);
    void (*destroy)(trainer_t *tr);
} trainer_ops;

struct trainer {
    const job_t *job;
    const trainer_ops *ops;
    void *impl;            /* the trainer type's own state (ops->setup) */
    model_t model;
    int n_towers;
    backend_t **backends;  /* one per tower */
    tower_t *towers;
    tower_threads *threads; /* call_for_each_tower: one thread per tower */
    struct device_towers *dev; /* device towers (GPU or sim): devices, staging (device_towers.c); NULL on CPU */
    char device_note[320];  /* device = "auto" without a GPU: why the CPU (logged with the table) */

    dataset_t *train_set;
    dataflow_t *train_flow;
    int global_batch;      /* batch_size x towers x ranks x accumulate */
    int local_batch;       /* batch_size x towers x accumulate: this rank's part */
    float **accum;         /* accumulate > 1: per tower, the sum of micro-batch gradients */

    /* MPI (src/comm/dist.h): this process among the job's; rank 0 alone
     * writes the log directory. One rank without mpirun. */
    int rank, n_ranks;
    int stop_agreed;       /* the stop signal all ranks saw in the last step, or 0 */

    /* time: as tensorpack */
    int64_t epoch_num;       /* the epoch running now (from starting_epoch) */
    int64_t global_step;     /* steps done since the start of training */
    int64_t updates;         /* optimizer updates applied: Adam's step count, which
                              * as torch's (optimizer.step() calls) leaves out the
                              * steps loss scaling skipped; async: one a tower */
    int64_t local_step;      /* steps done in this epoch */
    int64_t steps_per_epoch;
    int64_t max_epoch;
    bool stop_training;      /* set by a callback (early_stop): clean stop */
    int64_t epoch_first_step; /* local_step when this run entered the epoch */

    /* the last step */
    double step_loss;
    double step_accuracy;
    double epoch_seconds;    /* wall time of the running epoch's steps */
    int64_t resumed_global_batch; /* the checkpoint's global batch (resume), else 0 */
    bool learning_rate_restored;  /* resume set the rate the checkpoint had in effect */

    /* precision = "fp16": dynamic loss scaling (loss_scale.h) */
    bool loss_scaling;
    loss_scale loss_scale;
    /* The trainer type unscales each gradient pack itself before it goes to
     * the device all-reduce (sync_replicated on device towers with packing);
     * trainer_tower_compute then leaves the block scaled. */
    bool packs_unscale;
    int64_t fault_grad_step; /* test hook TT_FAULT_GRAD, read once (trainer.c); 0: none */
    double epoch_start_time;

    callback_t *callbacks;
    int n_callbacks;
    monitor_t *monitors;
    int n_monitors;
    scalar_t scalars[TRAINER_MAX_SCALARS]; /* this epoch's latest values */
    int n_scalars;
};

/* Builds everything a run needs (datasets, model, towers, optimizer, callbacks,
 * monitors) WITHOUT touching the log directory, so bad input fails with nothing
 * written. */
int trainer_create(trainer_t *tr, const job_t *job, tt_err *err);

/* Prints the model and trainer tables, then trains from tr->epoch_num /
 * tr->global_step to max_epoch. The log directory must exist. */
int trainer_train(trainer_t *tr, tt_err *err);

void trainer_free(trainer_t *tr);

/* One step of training, without callbacks: the batch (dataflow_start
 * called), the type's run_step and its checks; global_step and local_step
 * advance. trainer_train's loop, and `towertrain profile`'s. */
int trainer_step(trainer_t *tr, tt_err *err);

/* Publishes a scalar: recorded for the epoch's entry and sent to every monitor. */
int trainer_put_scalar(trainer_t *tr, const char *name, double value, tt_err *err);

/* The learning rate in use and its setter: it reaches every optimizer that
 * applies an update, whatever the trainer type. */
float trainer_get_learning_rate(trainer_t *tr);
void trainer_set_learning_rate(trainer_t *tr, float lr);

/* ---- checkpoints: the trainer gathers what is saved and hands it to
 *      checkpoint/ (which knows nothing of trainers), and puts back what is
 *      read (checkpointing.c) ---- */

/* Writes tower 0's parameters and the optimizer state to `path` (min_saver,
 * max_saver), with one more metadata pair when note_key is not NULL.
 * Collective under MPI: every rank calls it, rank 0 writes. */
int trainer_save_checkpoint(trainer_t *tr, const char *path, const char *note_key,
                            const char *note_value, tt_err *err);

/* Writes <logdir>/model-<global_step>.safetensors, then the `checkpoint`
 * pointer file; name receives the file name written. */
int trainer_save_latest(trainer_t *tr, char *name, size_t name_len, tt_err *err);

/* session_init: the model tensors of any safetensors file into every tower. */
int trainer_load_params(trainer_t *tr, const char *path, tt_err *err);

/* resume: parameters, optimizer state, epoch, global_step and local_step;
 * then each monitor's resume_check. */
int trainer_restore(trainer_t *tr, const char *path, tt_err *err);

/* For the trainer types: the optimizer over the trainable block on backend
 * be, its parameters named (weight_decay_exclude, LARS); n of them, one per
 * backend (backends[i]). */
int trainer_create_optimizer(trainer_t *tr, backend_t *be, optimizer_t *opt, tt_err *err);
int trainer_create_optimizers(trainer_t *tr, backend_t **backends, int n, optimizer_t *opts,
                              tt_err *err);

/* Runs the model in inference mode over an eval dataflow; fills mean loss and
 * accuracy over all samples. Used by inference_runner. */
int trainer_evaluate(trainer_t *tr, dataflow_t *df, double *loss, double *accuracy,
                     tt_err *err);

/* The same, calling visit with every chunk's logits (host, n x classes) and
 * labels as it goes (towertrain eval's per-class counts). Under MPI each rank
 * visits its own batches; loss and accuracy are reduced over the ranks. */
typedef void (*trainer_eval_visit)(void *arg, const float *logits, const int32_t *labels,
                                   int n);
int trainer_evaluate_each(trainer_t *tr, dataflow_t *df, trainer_eval_visit visit, void *arg,
                          double *loss, double *accuracy, tt_err *err);

/* What `towertrain eval` needs of a trainer: the model for data of shape
 * `data` and one tower (tower 0, as the inference_runner evaluates on), no
 * dataset, optimizer state or plug-ins. Fill its parameters with
 * trainer_load_params; free with trainer_free. */
int trainer_create_eval(trainer_t *tr, const job_t *job, shape3 data, tt_err *err);

extern const trainer_ops trainer_simple_ops, trainer_sync_replicated_ops,
    trainer_sync_parameter_server_ops, trainer_async_ops;

/* Tower t's part of a step: loads its slice of the batch and runs forward and
 * backward (gradients of its slice's mean loss into its grads; with loss
 * scaling, scaled by the tower's loss_scale during backward and divided by it
 * again here). With trainer.accumulate = K, K micro-batches, and grads the
 * mean of their gradients (loss_sum and correct their sums). */
void trainer_tower_compute(trainer_t *tr, int t, const batch_t *b);

/* The seed of tower t's micro-batch `micro` (global_step * accumulate + k)
 * that dropout draws its masks from: the job's seed, the micro-batch and
 * the tower's global index (rank * nr_tower + t), nothing else. */
uint64_t trainer_dropout_seed(const trainer_t *tr, int t, int64_t micro);

/* ---- loss scaling (precision = "fp16"); every trainer type, once per
 *      update: check the gradients it is about to apply, then advance ---- */

/* Turns loss scaling on (trainer_create does for fp16; tests on CPU too). */
void trainer_enable_loss_scale(trainer_t *tr);

/* Whether g[0, count) is free of Inf and NaN; true when loss scaling is off. */
bool trainer_grads_finite(trainer_t *tr, backend_t *be, const float *g, size_t count);

/* Advances the loss scale after an update was checked; a skipped step is
 * logged. Returns whether the update is applied. No-op (true) when off. */
bool trainer_loss_scale_step(trainer_t *tr, bool grads_finite);

/* Sums the towers' losses and accuracies of the step into step_loss and
 * step_accuracy (over the whole global batch, every rank's towers); under MPI
 * the ranks also agree here on whether a stop signal arrived anywhere. */
void trainer_collect_step(trainer_t *tr, const batch_t *b);

/* Brings tower 0's parameters up to date before it is read (evaluation,
 * checkpoints, histograms): the trainer types that keep one shared copy
 * publish it there (ops->publish). */
void trainer_sync_tower0(trainer_t *tr);

/* Averages the towers' batchnorm running statistics (and every other
 * non-trainable tensor) in tower order, then over the ranks. Collective under
 * MPI. Returns them (model.n_floats - model.n_trainable floats, to free), or
 * NULL: nothing to average (one tower and rank, or no such tensor) or out of
 * memory on some rank (the statistics stay tower-local). */
float *trainer_average_batchnorm(trainer_t *tr);

/* trainer_average_batchnorm, then gives every tower the result
 * (towertrain.cfg(5), TRAINER: at every epoch end). A checkpoint written
 * mid-epoch saves the average without giving it back, so saving does not
 * change what the towers train with. */
void trainer_sync_batchnorm(trainer_t *tr);

/* Callback and monitor registries (src/callbacks/registry.c, monitors/registry.c). */
const callback_ops *callback_ops_find(const char *type);
const monitor_ops *monitor_ops_find(const char *type);

/* Set by the SIGINT / SIGTERM handler (main.c): the trainer finishes the step,
 * writes a checkpoint, flushes the monitors and returns TT_STOPPED_BY_SIGNAL. */
extern volatile sig_atomic_t trainer_stop_signal;
#define TT_STOPPED_BY_SIGNAL (-2)

#endif
