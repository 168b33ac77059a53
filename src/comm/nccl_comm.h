/* nccl_comm.h - NCCL all-reduce among GPU towers: within a process, and
 * under mpirun across every GPU of every rank with one communicator.
 *
 * Each tower has its NCCL communicator (one per device, ncclCommInitAll in a
 * single process; ncclCommInitRank with global rank = rank x towers + tower
 * under MPI, the unique id sent from rank 0 with MPI_Bcast through
 * comm/dist.h). A tower thread starts a group of packs on the stream it
 * gives, its communication stream, which backend.h's backend_comm_queue
 * (cuda_device.c) has made wait for its compute stream, and later makes its
 * compute stream wait for the communication stream: the host never waits.
 *
 * Built without CUDA, nccl_none.c answers "built without CUDA".
 */
#ifndef TT_NCCL_COMM_H
#define TT_NCCL_COMM_H

#include <stdbool.h>
#include <stddef.h>

#include "util/err.h"

typedef struct nccl_comm nccl_comm;

/* Communicators for this process's n towers on CUDA devices `devices`.
 * Collective over the MPI ranks: every rank calls it, from its main thread,
 * with the same n. Errors name the device and NCCL's (or CUDA's) string. */
nccl_comm *nccl_comm_create(int n, const int *devices, tt_err *err);
void nccl_comm_free(nccl_comm *c);

/* Participants: towers x ranks. */
int nccl_comm_size(const nccl_comm *c);

/* Tower t: all-reduces the packs [lo[i], hi[i]) of buf in place (sum, or
 * mean over every participant), in one ncclGroupStart/End on `stream` (a
 * cudaStream_t of tower t's device). Returns at once. */
int nccl_comm_allreduce(nccl_comm *c, int t, void *stream, float *buf, const size_t *lo,
                        const size_t *hi, int n_packs, bool mean, tt_err *err);

/* An asynchronous NCCL error of tower t's communicator (a peer gone, a
 * network failure), or 0. */
int nccl_comm_check(nccl_comm *c, int t, tt_err *err);

/* Waits for the work queued on `stream` (a CUDA stream of tower t's device)
 * by polling it together with the communicator's asynchronous error: on an
 * error the communicator is aborted and -1 returned. Never blocks on a
 * collective that cannot complete (nccl.h: only ncclCommAbort ends it).
 * spin: poll without sleeping (the bench, whose timings a sleep would
 * lengthen, as nccl-tests' own wait); else sleep 1 us, doubling to 1 ms. */
int nccl_comm_wait(nccl_comm *c, int t, void *stream, bool spin, tt_err *err);

/* ncclCommAbort of every tower's communicator (operations still running on
 * the devices end; the streams drain); check reports an error from then
 * on. Idempotent, from any tower's thread. */
void nccl_comm_abort(nccl_comm *c);

/* The bench: from one thread, one group over the n local towers, each
 * reducing count floats from send[t] to recv[t] (in place when equal) on
 * streams[t]; sum. */
int nccl_comm_allreduce_all(nccl_comm *c, float *const *send, float *const *recv, size_t count,
                            void *const *streams, tt_err *err);

#endif
