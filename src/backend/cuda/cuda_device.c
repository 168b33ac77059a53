/* cuda_device.c - the CUDA backend's device side (backend.h's
 * backend_device_ops): each entry is one call of cuda_backend.h,
 * cuda_staging.h or comm/nccl_comm.h, which answer "built without CUDA"
 * when the toolkit is absent, so this file is built either way. */
#include "backend/cuda/cuda_backend.h"

#include <stdlib.h>

#include "backend/cuda/cuda_staging.h"
#include "comm/nccl_comm.h"

static int cuda_dev_info(backend_t *be, backend_device_info *info, tt_err *err)
{
    return backend_cuda_device_info(be->device, info, err);
}

static backend_staging *cuda_dev_staging_create(backend_t *be, size_t x_bytes, size_t y_bytes,
                                                tt_err *err)
{
    return (backend_staging *)cuda_staging_create(be, x_bytes, y_bytes, err);
}

static int cuda_dev_staging_load(backend_staging *s, int64_t step, const float *x,
                                 size_t x_bytes, const int32_t *y, size_t y_bytes,
                                 float **dev_x, int32_t **dev_y, tt_err *err)
{
    return cuda_staging_load((cuda_staging *)s, step, x, x_bytes, y, y_bytes, dev_x, dev_y, err);
}

static int cuda_dev_staging_done(backend_staging *s, tt_err *err)
{
    return cuda_staging_done((cuda_staging *)s, err);
}

static void cuda_dev_staging_free(backend_staging *s)
{
    cuda_staging_free((cuda_staging *)s);
}

/* ---- the communicator: nccl_comm behind backend_comm; each tower's
 *      compute stream is its backend's ---- */

typedef struct {
    backend_comm base;
    nccl_comm *nccl;
    int n; /* local towers */
    backend_t *bes[TT_MAX_SIM_DEVICES];
} cuda_comm;

static int cuda_comm_allreduce(backend_comm *c, int t, float *buf, const size_t *lo,
                               const size_t *hi, int n_packs, bool mean, tt_err *err)
{
    cuda_comm *cc = (cuda_comm *)c;
    return nccl_comm_allreduce(cc->nccl, t, backend_cuda_stream(cc->bes[t]), buf, lo, hi,
                               n_packs, mean, err);
}

static int cuda_comm_join(backend_comm *c, int t, tt_err *err)
{
    cuda_comm *cc = (cuda_comm *)c;
    return nccl_comm_join(cc->nccl, t, backend_cuda_stream(cc->bes[t]), err);
}

static int cuda_comm_check(backend_comm *c, int t, tt_err *err)
{
    return nccl_comm_check(((cuda_comm *)c)->nccl, t, err);
}

static void cuda_comm_abort(backend_comm *c)
{
    nccl_comm_abort(((cuda_comm *)c)->nccl);
}

/* The compute streams first, by polling with the error checked (a stalled
 * collective is aborted there); nccl_comm_free then polls its own streams
 * the same way. */
static void cuda_comm_free(backend_comm *c)
{
    if (c == NULL)
        return;
    cuda_comm *cc = (cuda_comm *)c;
    for (int t = 0; t < cc->n; t++)
        backend_device_wait(cc->bes[t], "communicator teardown", &(tt_err){0});
    backend_device_watch(cc->bes, cc->n, NULL);
    nccl_comm_free(((cuda_comm *)c)->nccl);
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
    int devices[TT_MAX_SIM_DEVICES];
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
                             .abort = cuda_comm_abort,
                             .free = cuda_comm_free};
    backend_device_watch(c->bes, n, &c->base);
    return &c->base;
}

const backend_device_ops backend_cuda_device_ops = {
    .kind = "cuda",
    .pinned_staging = true,
    .device_allreduce = true,
    .info = cuda_dev_info,
    .reserve_copies = backend_cuda_reserve_copies,
    .bind = backend_cuda_bind,
    .check = backend_cuda_check,
    .sync = backend_cuda_sync,
    .query = backend_cuda_query,
    .peer_enable = backend_cuda_peer_enable,
    .freeze = backend_cuda_freeze,
    .memory = backend_cuda_memory,
    .alloc_error = backend_cuda_alloc_error,
    .staging_create = cuda_dev_staging_create,
    .staging_load = cuda_dev_staging_load,
    .staging_done = cuda_dev_staging_done,
    .staging_free = cuda_dev_staging_free,
    .comm_create = cuda_comm_create,
    .build_info = backend_cuda_build_info,
};
