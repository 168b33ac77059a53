/* checkpoint.h - a training run's state to and from a safetensors file
 * (the format: towertrain(1), OUTPUT, model-STEP.safetensors).
 *
 * A checkpoint holds the model block (parameters and batchnorm statistics)
 * under PyTorch's names, the optimizer slots as optimizer.<param>.<slot>, and
 * in __metadata__ the format, the completed epochs, global_step, local_step
 * (steps done in the running epoch), the global batch, the RNG state, the
 * resolved job, and with fp16 the loss scale. Every random stream in towertrain is a pure function of the
 * seed and counters, so the RNG state is the seed and the position is
 * global_step.
 *
 * This module knows models and files, not trainers: the trainer gathers the
 * state into host memory (src/train/checkpointing.c) and hands it here.
 */
#ifndef TT_CHECKPOINT_H
#define TT_CHECKPOINT_H

#include <stddef.h>
#include <stdint.h>

#include "model/model.h"
#include "util/err.h"

/* A run's state in host memory, laid out as the model's parameter block. */
typedef struct {
    float *params;                  /* [model->n_floats] */
    int n_slots;                    /* optimizer slots per trainable element */
    const char *const *slot_names;  /* "momentum" | "exp_avg", "exp_avg_sq" */
    float *slots;                   /* [n_slots][model->n_trainable] */
    int64_t epochs_done;            /* completed epochs */
    int64_t global_step;
    int64_t local_step;             /* steps done in the epoch after those */
    int64_t global_batch;           /* samples per step, every tower of every rank; 0: unknown */
    uint64_t seed;
    const char *job_text;           /* the resolved job, as job.cfg holds it */
    float loss_scale;               /* fp16's dynamic loss scale; 0: none */
    int64_t loss_scale_good_steps;  /* clean steps since it last changed */
    int64_t updates;                /* optimizer updates applied (Adam's step count);
                                     * -1 when the file predates it */
    const char *note_key;           /* one more metadata pair, or NULL (min_saver's */
    const char *note_value;         /* value: what a resume compares against) */
    float learning_rate;            /* the rate in effect; 0: not recorded */
    float job_learning_rate;        /* the job's optimizer.learning_rate then; 0: not recorded */
    char *callback_state;           /* lines "<index> <type> <state>" of the callbacks
                                     * that have one, or NULL; read: malloc'd */
    float *replica_stats;           /* mid-epoch, several replicas: each replica's (rank x
                                     * towers + tower) non-trainable block, [n_replicas]
                                     * [n_floats - n_trainable], tensor replica_statistics;
                                     * else NULL. read: malloc'd */
    int n_replicas;
} checkpoint_state;

/* Writes the state to `path` atomically. A tensor that is not finite is
 * never written (it would replace a good checkpoint with a diverged one). */
int checkpoint_write(const char *path, const model_t *m, const checkpoint_state *s,
                     tt_err *err);

/* Points <logdir>/checkpoint at `name` (a file in the log directory), atomically. */
int checkpoint_write_pointer(const char *logdir, const char *name, tt_err *err);

/* Reads a checkpoint written by checkpoint_write into s: the caller sets
 * s->params, s->slots, s->n_slots and s->slot_names (the optimizer's); the
 * counters and global_batch are filled in. The error names what is missing,
 * unexpected or of the wrong shape. */
int checkpoint_read(const char *path, const model_t *m, checkpoint_state *s, tt_err *err);

/* session_init: the model tensors of any safetensors file into params
 * ([m->n_floats]); optimizer.* tensors and the metadata are ignored. */
int checkpoint_read_params(const char *path, const model_t *m, float *params, tt_err *err);

/* The path of the latest checkpoint of a log directory (its `checkpoint`
 * pointer file), TT_ERR_USAGE when there is none. */
int checkpoint_latest(const char *logdir, char *path, size_t len, tt_err *err);

#endif
