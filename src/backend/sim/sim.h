/* sim.h - the simulated GPU ("sim", trainer.device = "sim"): a test device
 * that runs the host code of a GPU tower without a GPU.
 *
 * A sim backend has its own device memory (allocations apart from the
 * host's, each with guard bytes after it that every free and every sync
 * checks), its own pool accounting (reserved, in use, peak), a staged input
 * (sim_backend.c) driven by the same staging_ring.h as CUDA's, the 16-bit
 * copies of mixed precision rounded as the GPU stores them (bf16 to nearest
 * even; fp16 to nearest even with overflow to Inf, so loss scaling is real),
 * read from a scratch region reserved at setup as precision.h sizes it,
 * and an in-process communicator with NCCL's interface (sim_comm.c). The
 * arithmetic is the CPU backend's.
 *
 * Its queue (a stream): each sim backend has a worker thread that runs its
 * operations in the order they were queued, while the host goes on, as a
 * GPU does; the operations that answer the host (download, all_finite, the
 * loss) and sync wait for it. A missing wait is therefore a wrong result or
 * a data race that ThreadSanitizer reports, not a silent pass. Input
 * copies and all-reduces run on the same queue, in order (a GPU's copy and
 * communication streams would overlap them). Faults (issue 27) can be
 * injected where a queued job runs: a stalled all-reduce in sim_comm.c's
 * group, a failed download in sim_download (sim_fail records it).
 */
#ifndef TT_SIM_H
#define TT_SIM_H

#include "backend/backend.h"

extern const backend_device_ops backend_sim_device_ops;

/* Queues run(be, copy of args) on the backend's queue, after everything
 * queued before; returns at once. sim_drain waits until the queue is empty. */
void sim_enqueue(backend_t *be, void (*run)(backend_t *be, void *args), const void *args,
                 size_t size);
void sim_drain(backend_t *be);

/* Records the first error of a sim backend (its check and sync return it). */
void sim_fail(backend_t *be, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* TT_SIM_FAULT=stall_allreduce:S: whether an all-reduce started now (at
 * the global step of the tower's last staged batch) stalls. */
bool sim_fault_stalls(backend_t *be, int64_t *step);

/* The in-process communicator (sim_comm.c). */
backend_comm *sim_comm_create(int n, backend_t *const *bes, tt_err *err);

#endif
