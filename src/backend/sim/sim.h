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
 * Its queues: the compute queue is the calling thread (work runs in order
 * as it is queued); copies and all-reduces complete before their call
 * returns. A fault-injection hook for issue 27 goes in sim_comm.c's
 * rendezvous and in sim_fail (below).
 */
#ifndef TT_SIM_H
#define TT_SIM_H

#include "backend/backend.h"

extern const backend_device_ops backend_sim_device_ops;

/* Records the first error of a sim backend (its check and sync return it). */
void sim_fail(backend_t *be, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* The in-process communicator (sim_comm.c). */
backend_comm *sim_comm_create(int n, backend_t *const *bes, tt_err *err);

#endif
