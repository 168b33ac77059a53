/* checkpoint.h - saving and restoring a training run (SPEC 7).
 *
 * A checkpoint holds tower 0's parameters under PyTorch's names, the optimizer
 * slots as optimizer.<param>.<slot>, and in __metadata__ the format, the
 * completed epochs, global_step, local_step (steps done in the running epoch),
 * the RNG state and the resolved job. Every random stream in towertrain is a
 * pure function of the seed and counters, so the RNG state is the seed and
 * the position is global_step.
 */
#ifndef TT_CHECKPOINT_H
#define TT_CHECKPOINT_H

#include <stdbool.h>
#include <stddef.h>

#include "train/trainer.h"
#include "util/err.h"

/* Writes <logdir>/model-<global_step>.safetensors and then the `checkpoint`
 * pointer file, both atomically; name receives the file name written. */
int checkpoint_save(trainer_t *tr, char *name, size_t name_len, tt_err *err);

/* Writes tower 0's parameters (with the optimizer state) to `path` without
 * touching the pointer file (min_saver / max_saver). */
int checkpoint_save_as(trainer_t *tr, const char *path, tt_err *err);

/* Loads the model tensors of any safetensors file into every tower
 * (session_init): names and shapes must match; optimizer.* tensors and the
 * metadata are ignored. The error lists what is missing, unexpected or of
 * the wrong shape. */
int checkpoint_load_params(trainer_t *tr, const char *path, tt_err *err);

/* Restores everything `resume` needs: parameters, optimizer slots, epoch,
 * global_step and local_step. */
int checkpoint_restore(trainer_t *tr, const char *path, tt_err *err);

/* The path of the latest checkpoint of a log directory (its `checkpoint`
 * pointer file), TT_ERR_USAGE when there is none. */
int checkpoint_latest(const char *logdir, char *path, size_t len, tt_err *err);

#endif
