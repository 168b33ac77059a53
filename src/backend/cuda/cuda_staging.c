/* cuda_staging.c - staging_ring.h's decisions carried out with CUDA: pinned
 * buffers (cudaMallocHost), a copy stream, and per slot a copy event and a
 * consumed event. */
#include "backend/cuda/cuda_staging.h"

#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_impl.h"
#include "backend/staging_ring.h"

struct cuda_staging {
    backend_t *be;
    int device;
    cudaStream_t copy_stream;
    size_t x_bytes, y_bytes;
    void *host_x[2], *host_y[2];   /* pinned */
    float *dev_x[2];
    int32_t *dev_y[2];
    cudaEvent_t copied[2], consumed[2];
    staging_ring ring;
    int current;                   /* the slot the compute has taken, -1: none */
};

static int ok(const cuda_staging *s, cudaError_t rc, const char *what, tt_err *err)
{
    return cuda_check_err(rc, s->device, what, TT_ERR_RUNTIME, err);
}

/* For backend_device_wait_for: the copy stream waits on the compute
 * stream's consumed events, which wait on the all-reduce, so a blocking
 * wait here could hang on a collective that never completes. */
static int query_result(const cuda_staging *s, cudaError_t rc, tt_err *err)
{
    if (rc == cudaErrorNotReady)
        return 0;
    return ok(s, rc, "cudaEventQuery / cudaStreamQuery (staging)", err) != 0 ? -1 : 1;
}

typedef struct {
    const cuda_staging *s;
    cudaEvent_t event;
} event_query;

static int query_event(void *p, tt_err *err)
{
    event_query *q = p;
    return query_result(q->s, cudaEventQuery(q->event), err);
}

static int query_copy_stream(void *p, tt_err *err)
{
    const cuda_staging *s = p;
    return query_result(s, cudaStreamQuery(s->copy_stream), err);
}

void cuda_staging_free(cuda_staging *s)
{
    if (s == NULL)
        return;
    if (cudaSetDevice(s->device) == cudaSuccess && s->copy_stream != NULL)
        backend_device_wait_for(s->be, query_copy_stream, s, "staging teardown", &(tt_err){0});
    for (int i = 0; i < 2; i++) {
        if (s->host_x[i])
            cudaFreeHost(s->host_x[i]);
        if (s->host_y[i])
            cudaFreeHost(s->host_y[i]);
        s->be->free(s->be, s->dev_x[i]);
        s->be->free(s->be, s->dev_y[i]);
        if (s->copied[i])
            cudaEventDestroy(s->copied[i]);
        if (s->consumed[i])
            cudaEventDestroy(s->consumed[i]);
    }
    if (s->copy_stream)
        cudaStreamDestroy(s->copy_stream);
    cudaGetLastError();
    free(s);
}

cuda_staging *cuda_staging_create(backend_t *be, size_t x_bytes, size_t y_bytes, tt_err *err)
{
    cuda_staging *s = calloc(1, sizeof(*s));
    if (s == NULL) {
        err_set(err, TT_ERR_RUNTIME, "out of host memory");
        return NULL;
    }
    s->be = be;
    s->device = be->device;
    s->x_bytes = x_bytes;
    s->y_bytes = y_bytes;
    s->current = -1;
    staging_ring_init(&s->ring);
    if (ok(s, cudaSetDevice(s->device), "cudaSetDevice", err) != 0 ||
        ok(s, cudaStreamCreateWithFlags(&s->copy_stream, cudaStreamNonBlocking),
           "cudaStreamCreate (copy stream)", err) != 0)
        goto fail;
    for (int i = 0; i < 2; i++) {
        if (ok(s, cudaMallocHost(&s->host_x[i], x_bytes ? x_bytes : 1), "cudaMallocHost", err) ||
            ok(s, cudaMallocHost(&s->host_y[i], y_bytes ? y_bytes : 1), "cudaMallocHost", err) ||
            ok(s, cudaEventCreateWithFlags(&s->copied[i], cudaEventDisableTiming),
               "cudaEventCreate", err) ||
            ok(s, cudaEventCreateWithFlags(&s->consumed[i], cudaEventDisableTiming),
               "cudaEventCreate", err))
            goto fail;
        s->dev_x[i] = be->alloc(be, x_bytes);
        s->dev_y[i] = be->alloc(be, y_bytes);
        if (s->dev_x[i] == NULL || s->dev_y[i] == NULL) {
            err_set(err, TT_ERR_USAGE, "cuda:%d: staging buffers: %s", s->device,
                    backend_cuda_alloc_error(be));
            goto fail;
        }
    }
    return s;
fail:
    cuda_staging_free(s);
    return NULL;
}

int cuda_staging_load(cuda_staging *s, int64_t step, const float *x, size_t x_bytes,
                      const int32_t *y, size_t y_bytes, float **dev_x, int32_t **dev_y,
                      tt_err *err)
{
    if (x_bytes > s->x_bytes || y_bytes > s->y_bytes)
        return err_set(err, TT_ERR_RUNTIME, "cuda:%d: a batch larger than the staging buffers",
                       s->device);
    bool host_wait, copy_wait;
    int slot = staging_ring_fill(&s->ring, step, &host_wait, &copy_wait);
    if (slot < 0)
        return err_set(err, TT_ERR_RUNTIME, "cuda:%d: staging: no free slot for step %lld",
                       s->device, (long long)step);
    cudaStream_t compute = (cudaStream_t)backend_cuda_stream(s->be);
    /* the DMA of this slot's previous batch must be done before the host
     * writes its pinned buffer (long done: it was two steps ago) */
    event_query q = {s, s->copied[slot]};
    if (host_wait && backend_device_wait_for(s->be, query_event, &q, "staging", err) != 0)
        return -1;
    memcpy(s->host_x[slot], x, x_bytes);
    memcpy(s->host_y[slot], y, y_bytes);
    /* the step that last read this slot's device buffer must be past it */
    if ((copy_wait && ok(s, cudaStreamWaitEvent(s->copy_stream, s->consumed[slot], 0),
                         "cudaStreamWaitEvent (consumed)", err)) ||
        ok(s, cudaMemcpyAsync(s->dev_x[slot], s->host_x[slot], x_bytes, cudaMemcpyHostToDevice,
                              s->copy_stream),
           "cudaMemcpyAsync (staging input)", err) ||
        ok(s, cudaMemcpyAsync(s->dev_y[slot], s->host_y[slot], y_bytes, cudaMemcpyHostToDevice,
                              s->copy_stream),
           "cudaMemcpyAsync (staging labels)", err) ||
        ok(s, cudaEventRecord(s->copied[slot], s->copy_stream), "cudaEventRecord (copied)", err))
        return -1;
    int taken = staging_ring_take(&s->ring, step);
    if (taken != slot)
        return err_set(err, TT_ERR_RUNTIME, "cuda:%d: staging: step %lld not loaded", s->device,
                       (long long)step);
    if (ok(s, cudaStreamWaitEvent(compute, s->copied[slot], 0), "cudaStreamWaitEvent (copied)",
           err))
        return -1;
    s->current = slot;
    *dev_x = s->dev_x[slot];
    *dev_y = s->dev_y[slot];
    return 0;
}

int cuda_staging_done(cuda_staging *s, tt_err *err)
{
    if (s->current < 0)
        return 0;
    cudaStream_t compute = (cudaStream_t)backend_cuda_stream(s->be);
    if (ok(s, cudaEventRecord(s->consumed[s->current], compute), "cudaEventRecord (consumed)",
           err))
        return -1;
    staging_ring_release(&s->ring, s->current);
    s->current = -1;
    return 0;
}
