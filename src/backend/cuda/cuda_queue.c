/* cuda_queue.c - backend.h's queues, events, pinned memory and asynchronous
 * copies on CUDA: each entry is one CUDA runtime call (after cudaSetDevice:
 * the setup thread and the tower threads both call them), its status
 * checked and turned into one line naming the device. A backend_queue is a
 * cudaStream_t, a backend_event a cudaEvent_t. Everything that decides
 * when to record or wait (the staging, the timeline's spans) is written
 * against backend.h and runs on sim in make check. */
#include "backend/cuda/cuda_impl.h"

static cudaStream_t stream_of(backend_queue *q)
{
    return (cudaStream_t)(void *)q;
}

static cudaEvent_t event_of(backend_event *e)
{
    return (cudaEvent_t)(void *)e;
}

/* cudaSetDevice(be's device), then the call's status: 0 or -1 with err. */
#define CUDA_ON(be, call, what, err)                                                         \
    (cuda_check_err(cudaSetDevice((be)->device), (be)->device, "cudaSetDevice",             \
                    TT_ERR_RUNTIME, err) != 0 ||                                             \
             cuda_check_err((call), (be)->device, what, TT_ERR_RUNTIME, err) != 0            \
         ? -1                                                                                \
         : 0)

backend_queue *backend_cuda_queue(backend_t *be)
{
    return (backend_queue *)(void *)cuda_of(be)->stream;
}

backend_queue *backend_cuda_queue_create(backend_t *be, tt_err *err)
{
    cudaStream_t s = NULL;
    /* not ordered with the compute stream (nor with the legacy default one) */
    if (CUDA_ON(be, cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate",
                err) != 0)
        return NULL;
    return (backend_queue *)(void *)s;
}

typedef struct {
    backend_t *be;
    cudaStream_t s;
} stream_query;

/* For backend_device_wait_for: 1 done, 0 running, -1 error. */
static int query_stream(void *p, tt_err *err)
{
    stream_query *q = p;
    if (cuda_check_err(cudaSetDevice(q->be->device), q->be->device, "cudaSetDevice",
                       TT_ERR_RUNTIME, err) != 0)
        return -1;
    cudaError_t rc = cudaStreamQuery(q->s);
    if (rc == cudaErrorNotReady)
        return 0;
    return cuda_check_err(rc, q->be->device, "cudaStreamQuery", TT_ERR_RUNTIME, err) != 0 ? -1
                                                                                          : 1;
}

void backend_cuda_queue_free(backend_t *be, backend_queue *q)
{
    if (q == NULL)
        return;
    stream_query sq = {be, stream_of(q)};
    tt_err err = {0};
    /* polling with the communicator's error watched: the copy stream may
     * wait on compute events that wait on an all-reduce */
    backend_device_wait_for(be, query_stream, &sq, "queue teardown", &err);
    if (cudaSetDevice(be->device) == cudaSuccess)
        cudaStreamDestroy(sq.s);
    cudaGetLastError();
}

backend_event *backend_cuda_event_create(backend_t *be, bool timing, tt_err *err)
{
    cudaEvent_t e = NULL;
    if (CUDA_ON(be, cudaEventCreateWithFlags(&e, timing ? cudaEventDefault
                                                         : cudaEventDisableTiming),
                "cudaEventCreateWithFlags", err) != 0)
        return NULL;
    return (backend_event *)(void *)e;
}

/* cudaEventDestroy returns at once for an event still pending; the device
 * releases it when done. */
void backend_cuda_event_free(backend_t *be, backend_event *e)
{
    if (e == NULL)
        return;
    if (cudaSetDevice(be->device) == cudaSuccess)
        cudaEventDestroy(event_of(e));
    cudaGetLastError();
}

int backend_cuda_event_record(backend_t *be, backend_event *e, backend_queue *q, tt_err *err)
{
    return CUDA_ON(be, cudaEventRecord(event_of(e), stream_of(q)), "cudaEventRecord", err);
}

int backend_cuda_queue_wait_event(backend_t *be, backend_queue *q, backend_event *e,
                                  tt_err *err)
{
    return CUDA_ON(be, cudaStreamWaitEvent(stream_of(q), event_of(e), 0), "cudaStreamWaitEvent",
                   err);
}

int backend_cuda_event_query(backend_t *be, backend_event *e, tt_err *err)
{
    if (cuda_check_err(cudaSetDevice(be->device), be->device, "cudaSetDevice", TT_ERR_RUNTIME,
                       err) != 0)
        return -1;
    cudaError_t rc = cudaEventQuery(event_of(e));
    if (rc == cudaErrorNotReady)
        return 0;
    return cuda_check_err(rc, be->device, "cudaEventQuery", TT_ERR_RUNTIME, err) != 0 ? -1 : 1;
}

int backend_cuda_event_elapsed_ms(backend_t *be, backend_event *start, backend_event *end,
                                  float *ms, tt_err *err)
{
    *ms = 0.0f;
    return CUDA_ON(be, cudaEventElapsedTime(ms, event_of(start), event_of(end)),
                   "cudaEventElapsedTime", err);
}

void *backend_cuda_host_alloc(backend_t *be, size_t bytes, tt_err *err)
{
    void *p = NULL;
    /* unified addressing: pinned memory of any device's context is usable
     * by every device */
    if (CUDA_ON(be, cudaMallocHost(&p, bytes ? bytes : 1), "cudaMallocHost", err) != 0)
        return NULL;
    return p;
}

void backend_cuda_host_free(backend_t *be, void *p)
{
    if (p == NULL)
        return;
    if (cudaSetDevice(be->device) == cudaSuccess)
        cudaFreeHost(p);
    cudaGetLastError();
}

int backend_cuda_copy_h2d_async(backend_t *be, void *dst, const void *host_src, size_t bytes,
                                backend_queue *q, tt_err *err)
{
    if (bytes == 0)
        return 0;
    return CUDA_ON(be, cudaMemcpyAsync(dst, host_src, bytes, cudaMemcpyHostToDevice,
                                       stream_of(q)),
                   "cudaMemcpyAsync (host to device)", err);
}

int backend_cuda_copy_d2h_async(backend_t *be, void *host_dst, const void *src, size_t bytes,
                                backend_queue *q, tt_err *err)
{
    if (bytes == 0)
        return 0;
    return CUDA_ON(be, cudaMemcpyAsync(host_dst, src, bytes, cudaMemcpyDeviceToHost,
                                       stream_of(q)),
                   "cudaMemcpyAsync (device to host)", err);
}
