/* cuda_device.c - the CUDA backend's device side (backend.h's
 * backend_device_ops): each entry is one call of cuda_backend.h,
 * cuda_queue.c or comm/nccl_comm.h, which answer "built without CUDA"
 * when the toolkit is absent, so this file is built either way. */
#include "backend/cuda/cuda_backend.h"

#include <stdlib.h>

#include "comm/nccl_comm.h"

static int cuda_dev_info(backend_t *be, backend_device_info *info, tt_err *err)
{
    return backend_cuda_device_info(be->device, info, err);
}

/* ---- the communicator: nccl_comm behind backend_comm; each tower's
 *      groups on its communication stream, ordered against its compute
 *      stream by backend_comm_queue (comm_queue.c, the ordering sim runs) ---- */

typedef struct {
    backend_comm base;
    nccl_comm *nccl;
    int n; /* local towers */
    backend_t *bes[TT_MAX_SIM_DEVICES];
    backend_comm_queue cq[TT_MAX_SIM_DEVICES];
} cuda_comm;

static int cuda_comm_allreduce(backend_comm *c, int t, float *buf, const size_t *lo,
                               const size_t *hi, int n_packs, bool mean, tt_err *err)
{
    cuda_comm *cc = (cuda_comm *)c;
    if (backend_comm_queue_start(cc->bes[t], &cc->cq[t], err) != 0)
        return -1;
    /* a CUDA backend_queue is its cudaStream_t (cuda_queue.c) */
    return nccl_comm_allreduce(cc->nccl, t, (void *)cc->cq[t].q, buf, lo, hi, n_packs, mean,
                               err);
}

static int cuda_comm_join(backend_comm *c, int t, tt_err *err)
{
    cuda_comm *cc = (cuda_comm *)c;
    return backend_comm_queue_join(cc->bes[t], &cc->cq[t], err);
}

static int cuda_comm_record(backend_comm *c, int t, backend_event *e, bool at_start,
                            tt_err *err)
{
    cuda_comm *cc = (cuda_comm *)c;
    return backend_comm_queue_record(cc->bes[t], &cc->cq[t], e, at_start, err);
}

static int cuda_comm_check(backend_comm *c, int t, tt_err *err)
{
    return nccl_comm_check(((cuda_comm *)c)->nccl, t, err);
}

static void cuda_comm_abort(backend_comm *c)
{
    nccl_comm_abort(((cuda_comm *)c)->nccl);
}

/* The compute streams first, then the communication streams, by polling
 * with the communicator's error checked (a stalled collective is aborted
 * there), before the communicators go. */
static void cuda_comm_free(backend_comm *c)
{
    if (c == NULL)
        return;
    cuda_comm *cc = (cuda_comm *)c;
    for (int t = 0; t < cc->n; t++)
        backend_device_wait(cc->bes[t], "communicator teardown", &(tt_err){0});
    for (int t = 0; t < cc->n; t++)
        if (cc->cq[t].q != NULL)
            backend_comm_queue_free(cc->bes[t], &cc->cq[t]);
    backend_device_watch(cc->bes, cc->n, NULL);
    nccl_comm_free(cc->nccl);
    free(c);
}

static backend_comm *cuda_comm_create(int n, backend_t *const *bes, tt_err *err)
{
    if (n > TT_MAX_SIM_DEVICES) {
        err_set(err, TT_ERR_USAGE, "at most %d towers", TT_MAX_SIM_DEVICES);
        return NULL;
    }
    cuda_comm *c = calloc(1, sizeof(*c));
    if (c == NULL) {
        err_set(err, TT_ERR_RUNTIME, "out of memory");
        return NULL;
    }
    int devices[TT_MAX_SIM_DEVICES] = {0};
    c->n = n;
    for (int t = 0; t < n; t++) {
        devices[t] = bes[t]->device;
        c->bes[t] = bes[t];
    }
    c->nccl = nccl_comm_create(n, devices, err);
    if (c->nccl == NULL) {
        free(c);
        return NULL;
    }
    c->base = (backend_comm){.size = nccl_comm_size(c->nccl),
                             .allreduce = cuda_comm_allreduce,
                             .join = cuda_comm_join,
                             .check = cuda_comm_check,
                             .record = cuda_comm_record,
                             .abort = cuda_comm_abort,
                             .free = cuda_comm_free};
    backend_device_watch(c->bes, n, &c->base);
    for (int t = 0; t < n; t++)
        if (backend_comm_queue_create(bes[t], &c->cq[t], err) != 0) {
            cuda_comm_free(&c->base);
            return NULL;
        }
    return &c->base;
}

const backend_device_ops backend_cuda_device_ops = {
    .kind = "cuda",
    .pinned_staging = true,
    .device_allreduce = true,
    .info = cuda_dev_info,
    .reserve_copies = backend_cuda_reserve_copies,
    .weights_add = backend_cuda_weights_add,
    .weights_remove = backend_cuda_weights_remove,
    .weights_step = backend_cuda_weights_step,
    .bind = backend_cuda_bind,
    .check = backend_cuda_check,
    .sync = backend_cuda_sync,
    .query = backend_cuda_query,
    .peer_enable = backend_cuda_peer_enable,
    .freeze = backend_cuda_freeze,
    .memory = backend_cuda_memory,
    .alloc_error = backend_cuda_alloc_error,
    .queue = backend_cuda_queue,
    .queue_create = backend_cuda_queue_create,
    .queue_free = backend_cuda_queue_free,
    .event_create = backend_cuda_event_create,
    .event_free = backend_cuda_event_free,
    .event_record = backend_cuda_event_record,
    .queue_wait_event = backend_cuda_queue_wait_event,
    .event_query = backend_cuda_event_query,
    .event_elapsed_ms = backend_cuda_event_elapsed_ms,
    .host_alloc = backend_cuda_host_alloc,
    .host_free = backend_cuda_host_free,
    .copy_h2d_async = backend_cuda_copy_h2d_async,
    .copy_d2h_async = backend_cuda_copy_d2h_async,
    .comm_create = cuda_comm_create,
    .capture_begin = backend_cuda_capture_begin,
    .capture_end = backend_cuda_capture_end,
    .graph_launch = backend_cuda_graph_launch,
    .graph_free = backend_cuda_graph_free,
    .build_info = backend_cuda_build_info,
};
