/* cuda_staging.h - the staged input of a GPU tower (tensorpack's
 * StagingInput): two slots of pinned host and device memory, a copy stream,
 * and events, driven by the state machine of staging_ring.h.
 *
 * Per step the tower thread calls cuda_staging_load with the step's batch:
 * it goes into the free slot's pinned buffer, is copied to the device on the
 * copy stream, and the tower's compute stream is made to wait for that copy
 * (an event, not the host). The call returns at once, so while the device
 * still runs the previous step's backward and update, the copy of this batch
 * runs beside it. cuda_staging_done marks where the step's last read of its
 * input is queued, so that the slot is not overwritten before.
 */
#ifndef TT_CUDA_STAGING_H
#define TT_CUDA_STAGING_H

#include <stddef.h>
#include <stdint.h>

#include "backend/backend.h"
#include "util/err.h"

typedef struct cuda_staging cuda_staging;

/* Two slots for batches of up to x_bytes of input and y_bytes of labels on
 * the backend's device (device memory from its pool). */
cuda_staging *cuda_staging_create(backend_t *be, size_t x_bytes, size_t y_bytes, tt_err *err);

/* Stages the batch of `step` and returns its device buffers, valid for the
 * tower's compute stream until cuda_staging_done. -1 with err set on a CUDA
 * error or when a load comes before the previous step's done. */
int cuda_staging_load(cuda_staging *s, int64_t step, const float *x, size_t x_bytes,
                      const int32_t *y, size_t y_bytes, float **dev_x, int32_t **dev_y,
                      tt_err *err);

/* The compute stream has queued its last read of the current batch. */
int cuda_staging_done(cuda_staging *s, tt_err *err);

void cuda_staging_free(cuda_staging *s);

#endif
