/* timeline.h - one Chrome trace event file from the spans of every rank
 * (util/trace.h), for the timeline callback and `towertrain profile --trace`. */
#ifndef TT_TIMELINE_H
#define TT_TIMELINE_H

#include <stdint.h>

#include "util/err.h"

/* This rank's clock against rank 0's: rank 0's CLOCK_MONOTONIC = ours +
 * offset_ns, measured as Horovod does, around barriers at start
 * (collective: every rank calls it). 0 with one rank. */
int64_t timeline_clock_offset(void);

/* Writes every rank's recorded spans (trace_stop called) to path, atomically,
 * on rank 0: one process row per rank ("rank <r>"), times in microseconds
 * from the earliest span on rank 0's clock. Collective under MPI; the other
 * ranks write nothing. first and last go into "otherData". */
int timeline_write(const char *path, int64_t offset_ns, int64_t first, int64_t last,
                   tt_err *err);

#endif
