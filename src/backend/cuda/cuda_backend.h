/* cuda_backend.h - what the trainer, the bench and the tests use of the CUDA
 * backend beyond backend.h: creating a tower's backend on a device, its
 * stream, its error state, its memory pool, and the device table.
 *
 * Built without CUDA (configure --without-cuda, or no toolkit), none.c
 * answers every call with "built without CUDA", so callers need no #ifdef.
 *
 * Errors: backend.h's operations return nothing, so the CUDA backend records
 * the first CUDA, cuBLAS or cuDNN error of a tower (naming the device, the
 * call and the library's error string) and skips its later operations; the
 * trainer asks backend_cuda_check after each step and stops with exit 1.
 */
#ifndef TT_CUDA_BACKEND_H
#define TT_CUDA_BACKEND_H

#include <stdbool.h>
#include <stddef.h>

#include "backend/backend.h"
#include "util/err.h"

typedef struct {
    bool tf32;          /* trainer.tf32: TF32 tensor cores in fp32 matmul and conv */
    bool deterministic; /* trainer.deterministic: deterministic cuDNN algorithms only */
} cuda_options;

/* One GPU's description for the tower table and for errors. */
typedef backend_device_info cuda_device_info;

/* backend.h's device side of a CUDA backend (cuda_device.c): be->dev. */
extern const backend_device_ops backend_cuda_device_ops;

/* A backend on CUDA device `device`, with its stream, cuBLAS and cuDNN
 * handles and memory pool, bound on the calling thread (cudaSetDevice).
 * TT_ERR_USAGE (exit 2) when the device does not exist or is not usable
 * (compute capability below 8.0, no driver): one line naming the device and
 * the CUDA error string. */
backend_t *backend_cuda_create(int device, const cuda_options *opt, tt_err *err);

/* The same in mixed precision (precision "bf16" or "fp16", precision.h):
 * dense and conv2d, forward and backward, multiply 16-bit copies of their
 * operands on tensor cores with float32 accumulation; every tensor, and
 * every other operation, stays float32. TT_ERR_USAGE as above, and for a
 * GPU whose tensor cores lack the type (one line naming it). */
backend_t *backend_cuda_create_bf16(int device, const cuda_options *opt, tt_err *err);
backend_t *backend_cuda_create_fp16(int device, const cuda_options *opt, tt_err *err);

/* Setup, mixed precision (and float32 NHWC): reserves the scratch region
 * of the copies for the largest dense or conv2d call the tower will make
 * (bytes from precision.h's layouts). Training never grows it; a call that
 * would need more is an error. Nothing to do for 0 bytes (fp32 NCHW).
 * TT_ERR_USAGE when out of device memory (backend_cuda_alloc_error says
 * more). */
int backend_cuda_reserve_copies(backend_t *be, size_t bytes, tt_err *err);
/* backend.h's weights_add, weights_remove and weights_step: one copy of
 * each weight of a tower a step (weight_copies.h): 16-bit, or float32 KRSC
 * filters in float32 NHWC; nothing in fp32 NCHW (prec_weight_copies). */
int backend_cuda_weights_add(backend_t *be, const float *params, size_t count, tt_err *err);
void backend_cuda_weights_remove(backend_t *be, const float *params);
void backend_cuda_weights_step(backend_t *be, const float *params, bool begin);

/* Is `be` a CUDA backend? */
bool backend_is_cuda(const backend_t *be);

/* The device's name, capability and memory; TT_ERR_USAGE naming the device
 * when it cannot be queried. */
int backend_cuda_device_info(int device, cuda_device_info *info, tt_err *err);

/* Makes the calling thread use the backend's device (a tower's thread does
 * this once; every operation does it too, for callers on other threads). */
int backend_cuda_bind(backend_t *be, tt_err *err);

/* The first error of the backend's operations, or of the work queued on its
 * stream so far (without waiting for it): 0, or -1 with err set. */
int backend_cuda_check(backend_t *be, tt_err *err);

/* Waits for the stream (backend_device_wait), then as backend_cuda_check. */
int backend_cuda_sync(backend_t *be, tt_err *err);
/* cudaStreamQuery of the compute stream: 1 done, 0 running, -1 error. */
int backend_cuda_query(backend_t *be, tt_err *err);
/* cudaDeviceEnablePeerAccess from be's device to peer's where
 * cudaDeviceCanAccessPeer says it can: whether copies between them now go
 * directly (NVLink, PCIe P2P) rather than through the host. */
bool backend_cuda_peer_enable(backend_t *be, const backend_t *peer);

/* Ends setup: the memory pool no longer grows (nothing is cudaMalloc'ed
 * during training). */
void backend_cuda_freeze(backend_t *be);

/* Bytes the pool holds and uses; the last allocation failure, if any
 * (names the bytes asked), for the trainer's out-of-memory message. */
void backend_cuda_memory(backend_t *be, size_t *reserved, size_t *in_use, size_t *peak);
const char *backend_cuda_alloc_error(backend_t *be);

/* backend.h's queues, events, pinned memory and asynchronous copies
 * (cuda_queue.c): the compute stream, and one CUDA runtime call each. */
backend_queue *backend_cuda_queue(backend_t *be);
backend_queue *backend_cuda_queue_create(backend_t *be, tt_err *err);
void backend_cuda_queue_free(backend_t *be, backend_queue *q);
backend_event *backend_cuda_event_create(backend_t *be, bool timing, tt_err *err);
void backend_cuda_event_free(backend_t *be, backend_event *e);
int backend_cuda_event_record(backend_t *be, backend_event *e, backend_queue *q, tt_err *err);
int backend_cuda_queue_wait_event(backend_t *be, backend_queue *q, backend_event *e,
                                  tt_err *err);
int backend_cuda_event_query(backend_t *be, backend_event *e, tt_err *err);
int backend_cuda_event_elapsed_ms(backend_t *be, backend_event *start, backend_event *end,
                                  float *ms, tt_err *err);
void *backend_cuda_host_alloc(backend_t *be, size_t bytes, tt_err *err);
void backend_cuda_host_free(backend_t *be, void *p);
int backend_cuda_copy_h2d_async(backend_t *be, void *dst, const void *host_src, size_t bytes,
                                backend_queue *q, tt_err *err);
int backend_cuda_copy_d2h_async(backend_t *be, void *host_dst, const void *src, size_t bytes,
                                backend_queue *q, tt_err *err);
/* A step captured on the stream in a CUDA graph (cuda_graph.c; backend.h's
 * capture entries). */
int backend_cuda_capture_begin(backend_t *be, tt_err *err);
backend_graph *backend_cuda_capture_end(backend_t *be, tt_err *err);
int backend_cuda_graph_launch(backend_t *be, backend_graph *g, tt_err *err);
void backend_cuda_graph_free(backend_t *be, backend_graph *g);

/* "cuda: sm_80 sm_90 +ptx (CUDA 13.0, cuDNN 9.19.0, NCCL 2.28.9)", the
 * device code and the library versions this binary was built with; NULL
 * without CUDA. */
const char *backend_cuda_build_info(void);

#endif
