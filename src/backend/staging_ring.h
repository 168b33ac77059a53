/* staging_ring.h - the double-buffered input of a GPU tower, as tensorpack's
 * StagingInput: two slots, each a pinned host buffer and a device buffer.
 *
 * The batch of a step is written into a slot's pinned buffer and copied to
 * the device on the tower's copy stream, which records the slot's copy event;
 * the compute queue waits for that event before the step reads the slot,
 * and records the slot's consumed event once the step's last reader of the
 * input (backward) is queued. Meanwhile the other slot takes the next batch,
 * so the copy overlaps the step still running on the device.
 *
 * This file is the state machine only: which slot a batch goes to, and which
 * events each side must wait for. It is plain C (tests/test_staging_ring.c);
 * staging.c does what it says, on backend.h's queues and events.
 */
#ifndef TT_STAGING_RING_H
#define TT_STAGING_RING_H

#include <stdbool.h>
#include <stdint.h>

typedef enum {
    SLOT_FREE,    /* may be filled (after the waits fill reports) */
    SLOT_LOADED,  /* its copy is queued; the compute has not taken it yet */
    SLOT_IN_USE   /* the compute stream reads it */
} slot_state;

typedef struct {
    slot_state state[2];
    int64_t step[2];      /* the step whose batch the slot holds (-1: none) */
    bool copied[2];       /* a copy was ever queued from the pinned buffer */
    bool consumed[2];     /* a compute step has read the device buffer */
    int next;             /* the slot the next fill takes */
} staging_ring;

void staging_ring_init(staging_ring *r);

/* Where the batch of `step` goes. Returns the slot, or -1 when no slot is
 * free (both loaded or in use: the caller skipped a take or a release).
 * *host_wait: the host must wait for the slot's last copy event before it
 * writes the pinned buffer (the DMA may still read it). *copy_wait: the copy
 * stream must wait for the slot's consumed event before overwriting the
 * device buffer (an earlier step may still read it). */
int staging_ring_fill(staging_ring *r, int64_t step, bool *host_wait, bool *copy_wait);

/* The compute takes the batch of `step`: returns its slot (the compute
 * stream must wait for the slot's copy event), or -1 when no loaded slot
 * holds that step. */
int staging_ring_take(staging_ring *r, int64_t step);

/* The compute has queued its last read of the slot and recorded the slot's
 * consumed event. -1 when the slot is not in use. */
int staging_ring_release(staging_ring *r, int slot);

/* Forgets loaded batches that will not be taken (evaluation, a new pass):
 * loaded slots become free; in-use slots are left alone. */
void staging_ring_drop(staging_ring *r);

#endif
