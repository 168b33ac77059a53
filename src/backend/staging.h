/* staging.h - the staged input of a device tower (tensorpack's
 * StagingInput): two slots of pinned host and device memory, a copy queue
 * and events, driven by the state machine of staging_ring.h and written
 * only against backend.h's device primitives, so CUDA and sim run the same
 * code (staging.c).
 *
 * Per step the tower thread calls staging_load with the step's batch: it
 * goes into the free slot's pinned buffer, is copied to the device on the
 * copy queue, and the tower's compute queue is made to wait for that copy
 * (an event, not the host). The call returns at once, so while the device
 * still runs the previous step's backward and update, the copy of this
 * batch runs beside it. staging_done marks where the step's last read of
 * its input is queued, so that the slot is not overwritten before.
 */
#ifndef TT_STAGING_H
#define TT_STAGING_H

#include <stddef.h>
#include <stdint.h>

#include "backend/backend.h"
#include "util/err.h"

typedef struct staging staging;

/* Two slots for batches of up to x_bytes of input and y_bytes of labels on
 * the device of be (be->dev != NULL; device memory from its pool). */
staging *staging_create(backend_t *be, size_t x_bytes, size_t y_bytes, tt_err *err);

/* Stages the batch of `step` and returns its device buffers, valid for the
 * tower's compute queue until staging_done. -1 with err set on a device
 * error or when a load comes before the previous step's done. */
int staging_load(staging *s, int64_t step, const float *x, size_t x_bytes, const int32_t *y,
                 size_t y_bytes, float **dev_x, int32_t **dev_y, tt_err *err);

/* The compute queue has queued its last read of the current batch. */
int staging_done(staging *s, tt_err *err);

/* After the copies queued so far are done (polling, the communicator
 * watched); then nothing refers to the slots. */
void staging_free(staging *s);

#endif
