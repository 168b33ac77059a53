/* device_towers.h - the device side of the trainer, for towers on a device
 * with its own memory and queues (a GPU, or the simulated GPU "sim"): which
 * device a job trains on, each tower's device backend, its staged input
 * (tensorpack's StagingInput), the tower table a GPU user sees, and the
 * error check after every step.
 *
 * The trainer calls these only when trainer.device resolves to "gpu" or
 * "sim" (tr->dev != NULL); CPU towers never reach this file.
 */
#ifndef TT_DEVICE_TOWERS_H
#define TT_DEVICE_TOWERS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backend/backend.h"
#include "config/job.h"
#include "model/model.h"
#include "util/err.h"

typedef struct trainer trainer_t;
typedef struct device_towers device_towers;

/* Resolves trainer.device. "cpu": false. "sim": true. "gpu": true, or TT_ERR_USAGE when
 * no GPU is usable, a tower's device id does not exist, or its compute
 * capability is below 8.0 (one line naming the device and CUDA's error
 * string). "auto": true when a GPU is present, else false, and note (may be
 * NULL) says why training runs on the CPU, for the log. */
int device_select(const job_t *job, bool *on_device, char *note, size_t note_len, tt_err *err);

/* Tower t's CUDA backend on device trainer.towers[t]. */
backend_t *device_backend_create(const job_t *job, int t, tt_err *err);

/* Mixed precision: the bytes of the 16-bit copies of the model's largest
 * dense or conv2d call at batch max_n (0 for fp32), which each tower's
 * backend reserves at setup (dev->reserve_copies); without w's place: a
 * tower's weights have copies of their own (dev->weights_add). blocked:
 * per layer, whether its output is in the backend's blocked layout (a
 * tower's, model.h), NULL for none; g16: the backend's blocked gradients
 * are bf16 (blocked_bf16_grads): a blocked side then needs no place
 * (prec_conv_copies_of). */
size_t device_copies_bytes(const model_t *m, const bool *blocked, bool g16,
                           precision_kind precision, int max_n);

/* Rewrites a failure of tower_create on tower t's device as the documented
 * (towertrain.cfg(5), GPU TOWERS) "tower t (cuda:D): out of device memory:
 * asked N bytes ..." (exit 2) when the pool refused an allocation, or names
 * the tower's device error;
 * returns whether tower t explains the failure (else err is left alone). */
bool device_explain_setup_failure(const trainer_t *tr, int t, tt_err *err);

/* Once the towers and their threads exist: binds each tower's thread to its
 * device and makes its staging buffers. */
int device_towers_create(trainer_t *tr, tt_err *err);

/* The end of setup: waits for every device and surfaces an error of the
 * setup's queued work; freezes the memory pools. */
int device_towers_finish_setup(trainer_t *tr, tt_err *err);

void device_towers_free(trainer_t *tr);

/* After trace_stop (the timeline's window, profile's steps), with the
 * towers' threads idle: each tower's device-measured spans (device_spans.h)
 * into its timeline row. */
void device_towers_trace_flush(trainer_t *tr);

/* Before trace_start (the timeline's window, profile's steps), between
 * steps: each tower's device rows make their pools of events on the
 * tower's thread (device_spans_prepare), so the window's first step is not
 * slowed by it. */
void device_towers_trace_prepare(trainer_t *tr);

/* The trainer's device communicator: each tower's all-reduce row becomes a
 * device row whose spans (a group's packs, begun with trace_begin_on) are
 * timing events recorded on the tower's communication queue (comm->record),
 * read back by device_towers_trace_flush. comm outlives the recording. */
int device_towers_trace_comm(trainer_t *tr, backend_comm *comm, tt_err *err);

/* Tower t's slice of the step's batch, staged to the device (replaces
 * tower_load_batch for the training step), and the end of its use. key
 * names the load in the staging ring, one per micro-batch: global step x
 * trainer.accumulate + the micro-batch's index. */
void device_tower_load(trainer_t *tr, int t, int64_t key, int n, const float *x, const int32_t *y);
void device_tower_consumed(trainer_t *tr, int t);

/* After a step: the first CUDA, cuDNN, cuBLAS or staging error of any tower
 * (TT_ERR_RUNTIME, exit 1), or 0. */
int device_towers_check(trainer_t *tr, tt_err *err);

/* Records an error found on tower t's thread for device_towers_check. */
void device_tower_fail(trainer_t *tr, int t, const tt_err *err);

/* The tower table with device names and memory, and the library versions. */
void device_print_table(const trainer_t *tr);

#endif
