/* allreduce.h - float32 all-reduce among the towers of one process, over shared
 * memory. Knows nothing of models: the trainers, `towertrain bench` and (later)
 * the GPU backend reuse it.
 *
 * Every participant (a tower thread) calls allreduce_run() with its own buffer
 * of the same length; when it returns, every buffer holds the sum (or the mean)
 * of all of them. Algorithms:
 *   naive        tower 0 sums every buffer, the others copy the result back.
 *   ring         reduce-scatter then all-gather: the buffer is cut into one chunk
 *                per tower; tower t sums chunk t of every buffer into its own,
 *                then every tower copies the other towers' chunks.
 *   hierarchical two groups each reduce to their root, the two roots combine,
 *                the result goes back down; any tower count >= 2.
 * Sums are taken in a fixed order, so every replica gets the same bits and the
 * result never depends on timing.
 */
#ifndef TT_ALLREDUCE_H
#define TT_ALLREDUCE_H

#include <stdbool.h>
#include <stddef.h>

#include "util/err.h"

typedef enum { ALLREDUCE_NAIVE, ALLREDUCE_RING, ALLREDUCE_HIERARCHICAL } allreduce_algo;

typedef struct allreduce allreduce_t;

/* A communicator for n participants. */
allreduce_t *allreduce_create(int n, tt_err *err);
void allreduce_free(allreduce_t *ar);

/* Collective: all n participants call it with the same count, algo and mean. */
void allreduce_run(allreduce_t *ar, int rank, float *buf, size_t count, allreduce_algo algo,
                   bool mean);

/* Collective broadcast of rank root's buffer to everyone. */
void allreduce_broadcast(allreduce_t *ar, int rank, float *buf, size_t count, int root);

/* The algorithm "auto" picks for a tower count and size in bytes. */
allreduce_algo allreduce_choose(int n, size_t bytes);

/* "naive", "ring", "hierarchical" <-> enum; -1 when unknown. */
int allreduce_algo_parse(const char *name);
const char *allreduce_algo_name(allreduce_algo a);

/* dst[i] = (srcs[0][i] + ... + srcs[nsrc-1][i]) / divisor over [lo, hi), summed
 * in source order: the reduction the algorithms use, for reducers outside them
 * (sync_parameter_server's averaging). dst may be one of the sources. */
void allreduce_sum_range(float *dst, float *const *srcs, int nsrc, size_t lo, size_t hi,
                         float divisor);

/* A reusable barrier among the n participants; each calls it with its rank. */
void allreduce_barrier(allreduce_t *ar, int rank);

#endif
