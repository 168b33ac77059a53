/* job.h - the resolved job: what a job file (towertrain.cfg(5)) says, validated,
 * with every default filled in and every path absolute.
 *
 * job_load() reads the libconfig file, applies --set overrides, checks every
 * key (unknown keys are errors with a did-you-mean), fills in defaults and builds
 * these plain structs. The same resolved libconfig tree is what `validate` prints
 * and what `run` stores as <logdir>/job.cfg, so it is itself a valid job file.
 */
#ifndef TT_JOB_H
#define TT_JOB_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "config/model_cfg.h"
#include "util/err.h"

#define TT_MAX_DIMS 4

/* ---- dataflow (DATAFLOW) ---- */

typedef enum { SOURCE_IDX, SOURCE_CIFAR10, SOURCE_FAKE, SOURCE_IMAGE_FOLDER, SOURCE_NPY } source_type;

typedef struct {
    source_type type;
    char images[4096];  /* idx, npy: absolute paths */
    char labels[4096];
    char **files;       /* cifar10: absolute paths */
    int n_files;
    int shape[3];       /* fake: C, H, W (rank 1: {N,1,1}) */
    int shape_rank;
    int classes;        /* fake */
    int size;           /* fake */
    char root[4096];    /* image_folder: absolute path */
    int channels;       /* image_folder: 3 (RGB) or 1 (grey) */
    bool skip_corrupt;  /* image_folder */
    bool nhwc;          /* npy: layout = "nhwc" */
} source_cfg;

typedef enum {
    AUG_NORMALIZE,
    AUG_RANDOM_CROP,
    AUG_FLIP,
    AUG_RESIZE,
    AUG_CENTER_CROP,
    AUG_RANDOM_RESIZED_CROP,
    AUG_COLOR_JITTER
} augment_type;

typedef struct {
    augment_type type;
    float mean[TT_MAX_DIMS * 4]; /* normalize: one value per channel, or one for all */
    float std[TT_MAX_DIMS * 4];
    int n_mean, n_std;
    int size, padding;  /* random_crop; size: resize, center_crop, random_resized_crop */
    double scale[2];    /* random_resized_crop: area fraction range */
    double ratio[2];    /* random_resized_crop: aspect ratio range */
    float brightness, contrast, saturation; /* color_jitter */
} augment_cfg;

typedef struct {
    source_cfg source;
    bool shuffle;       /* default true for the training dataflow */
    augment_cfg *augment;
    int n_augment;
    int batch_size;     /* per tower */
    int limit;          /* 0 = all */
    int workers;        /* prefetch.workers, default 2 */
    int queue;          /* prefetch.queue, default 8 */
} dataflow_cfg;

/* ---- optimizer (OPTIMIZER) ---- */

typedef enum { OPT_SGD, OPT_MOMENTUM, OPT_ADAM, OPT_ADAMW, OPT_LARS } optimizer_type;

typedef struct {
    optimizer_type type;
    float learning_rate;
    float momentum;     /* momentum and lars: default 0.9; sgd: 0 */
    bool nesterov;
    float beta1, beta2, epsilon; /* epsilon: adam, adamw, lars */
    float weight_decay;
    float trust_coefficient;     /* lars */
    const char **wd_exclude;     /* weight_decay_exclude: shell globs (strings of the tree) */
    int n_wd_exclude;
    float clip_global_norm;      /* 0: off */
} optimizer_cfg;

/* ---- trainer (TRAINER) ---- */

typedef enum {
    TRAINER_SIMPLE,
    TRAINER_SYNC_REPLICATED,
    TRAINER_SYNC_PARAMETER_SERVER,
    TRAINER_ASYNC
} trainer_type;

/* DEVICE_SIM: simulated GPUs (src/backend/sim/), a test device */
typedef enum { DEVICE_AUTO, DEVICE_CPU, DEVICE_GPU, DEVICE_SIM } device_kind;

/* What the forward and backward passes compute in (mixed precision against
 * fp32 master parameters, as torch.autocast); fp16 adds dynamic loss scaling. */
typedef enum { PRECISION_FP32, PRECISION_BF16, PRECISION_FP16 } precision_kind;

#define TT_MAX_TOWERS 64

typedef struct {
    trainer_type type;
    device_kind device;
    int nr_tower;
    int towers[TT_MAX_TOWERS]; /* device ids; 0..nr_tower-1 unless `towers` given */
    char allreduce[32];        /* "auto" | "ring" | "naive" | "hierarchical" | "nccl" */
    int gradient_packing;
    char ps_device[8];         /* "cpu" | "gpu" */
    bool scale_gradient;
    int threads_per_tower;     /* 0 = cores / towers */
    precision_kind precision;
    bool tf32;                 /* GPU: TF32 tensor cores in fp32 matmul and conv */
    bool deterministic;        /* GPU: deterministic cuDNN algorithms only */
    int accumulate;            /* micro-batches averaged per update, default 1 */
    int collective_timeout;    /* seconds a rank waits in one collective; 0 = forever */
} trainer_cfg;

/* ---- callbacks and monitors (CALLBACKS, MONITORS) ---- */

/* A callback or monitor: its type and its own settings. Each plug-in reads the
 * keys it knows from `settings` (a libconfig group of the resolved job); the
 * config module has already checked names and types against the plug-in's key
 * table, so plug-ins only read. */
typedef struct {
    char type[TT_NAME_MAX];
    int every_k_epochs;   /* default 1 (0 when every_k_steps is given) */
    int every_k_steps;    /* default 0 */
    const void *settings; /* config_setting_t * of the resolved job */
    dataflow_cfg *dataflow; /* inference_runner: its resolved dataflow, else NULL */
} plugin_cfg;

/* ---- the job ---- */

typedef struct {
    char path[4096];     /* absolute path of the job file */
    char logdir[4096];   /* absolute */
    uint64_t seed;
    dataflow_cfg dataflow;
    model_cfg model;
    optimizer_cfg optimizer;
    trainer_cfg trainer;
    int64_t max_epoch;
    int64_t steps_per_epoch; /* 0 in the file means "dataset / global batch"; resolved
                                by the trainer once the dataset is opened */
    int64_t starting_epoch;
    char session_init[4096]; /* absolute, "" when none */
    plugin_cfg *callbacks;   /* callbacks then extra_callbacks, in order */
    int n_callbacks;
    plugin_cfg *monitors;
    int n_monitors;
    dataflow_cfg *eval_dataflow; /* eval.dataflow (towertrain eval), NULL when absent */
    void *tree;              /* the resolved libconfig tree (config_t *) */
    /* the first data or session_init file that is not there, as a one-line
     * message naming the job's file, line and key; "" when all are
     * (job_check_files) */
    char missing_file[1024];
} job_t;

/* One --set KEY=VALUE override, as given on the command line. */
typedef struct {
    const char *arg; /* "trainer.nr_tower=4" */
} job_override;

/* Reads, overrides, validates and resolves a job file. On error fills err
 * (TT_ERR_USAGE, "FILE:LINE: key.path: message") and returns -1. */
/* The key of a callback or monitor in its job ("extra_callbacks[1]"). */
void job_plugin_key(const plugin_cfg *p, char *out, size_t n);

/* 0 when every file the job reads is there; otherwise TT_ERR_USAGE with
 * the message naming the first one that is not (file:line: key: path: why).
 * run, resume, validate and profile ask it; the loader itself does not, so
 * a job can be read where its data is not. */
int job_check_files(const job_t *job, tt_err *err);

int job_load(const char *path, const job_override *sets, int n_sets, job_t *job, tt_err *err);

/* Loads a resolved job stored in a log directory (no relative path rewriting). */
int job_load_resolved(const char *path, const job_override *sets, int n_sets, job_t *job,
                      tt_err *err);

/* Writes the resolved job in libconfig syntax (what `validate` prints and what
 * <logdir>/job.cfg holds). Returns 0 or -1 on an I/O error. */
int job_write(const job_t *job, FILE *out);

void job_free(job_t *job);

#endif
