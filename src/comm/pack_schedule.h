/* pack_schedule.h - which gradients each all-reduce pack holds, and when it
 * may start (tensorpack's GradientPacker, PyTorch DDP's buckets).
 *
 * The gradient block [0, count) is cut into `packs` contiguous ranges, pack k
 * below pack k+1. Backward runs from the last layer to the first and reports
 * through the grad-ready hook the lowest offset now final: [lo, count) will
 * not change again this step. A pack may start once it lies wholly in the
 * final part, so packs start last first; every pack that became ready at one
 * report starts together (one ncclGroupStart/End on the GPU). Whatever the
 * granularity of the reports, every pack starts exactly once per step and
 * never before its gradients are final.
 *
 * Boundaries are multiples of `align` floats (64 floats = 256 bytes: NCCL
 * and the copy engines run best on aligned buffers), the last pack ending at
 * count. Plain C: tests/test_pack_schedule.c.
 */
#ifndef TT_PACK_SCHEDULE_H
#define TT_PACK_SCHEDULE_H

#include <stddef.h>

typedef struct {
    size_t count; /* gradient floats */
    int packs;    /* after init: at most one pack per aligned unit */
    size_t align; /* boundary granularity in floats (>= 1) */
    int pending;  /* packs [0, pending) have not started this step */
} pack_schedule;

/* packs >= 1; fewer are used when count holds fewer aligned units. */
void pack_schedule_init(pack_schedule *s, size_t count, int packs, size_t align);

/* Pack k's range [*lo, *hi). */
void pack_schedule_range(const pack_schedule *s, int k, size_t *lo, size_t *hi);

/* A new step: every pack pending. */
void pack_schedule_begin(pack_schedule *s);

/* Backward made [lo, count) final. Returns how many packs start now; they
 * are *top, *top - 1, ..., *top - n + 1, in that order (0: none). lo = 0 at
 * the end of backward starts every pack still pending. */
int pack_schedule_ready(pack_schedule *s, size_t lo, int *top);

#endif
