/* nccl_comm.c - NCCL communicators and their groups of all-reduces on the
 * streams the caller gives (the towers' communication streams, ordered
 * against their compute streams by backend.h's backend_comm_queue in
 * cuda_device.c). Every NCCL and CUDA status is checked and becomes one
 * line naming the device. */
#include "comm/nccl_comm.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda_runtime_api.h>

#include "backend/cuda/cuda_libs.h"
#include "comm/dist.h"

struct nccl_comm {
    int n;                  /* local towers */
    int ranks;              /* MPI ranks */
    int devices[64];
    ncclComm_t comms[64];
    pthread_mutex_t lock;      /* abort (any tower's thread) against check */
    bool aborted;
};

static int nccl_fail(ncclResult_t rc, ncclComm_t comm, int device, const char *what, tt_err *err)
{
    const char *detail = comm != NULL ? cu.ncclGetLastError(comm) : cu.ncclGetLastError(NULL);
    if (detail != NULL && *detail != '\0')
        return err_set(err, TT_ERR_RUNTIME, "cuda:%d: %s: %s (%s)", device, what,
                       cu.ncclGetErrorString(rc), detail);
    return err_set(err, TT_ERR_RUNTIME, "cuda:%d: %s: %s", device, what,
                   cu.ncclGetErrorString(rc));
}

static int nccl_ok(ncclResult_t rc, ncclComm_t comm, int device, const char *what, tt_err *err)
{
    return rc == ncclSuccess ? 0 : nccl_fail(rc, comm, device, what, err);
}

static int cuda_ok(cudaError_t rc, int device, const char *what, tt_err *err)
{
    if (rc == cudaSuccess)
        return 0;
    return err_set(err, TT_ERR_RUNTIME, "cuda:%d: %s: %s (%s)", device, what,
                   cudaGetErrorString(rc), cudaGetErrorName(rc));
}

void nccl_comm_abort(nccl_comm *c)
{
    pthread_mutex_lock(&c->lock);
    for (int t = 0; t < c->n; t++) {
        if (c->comms[t] == NULL || cudaSetDevice(c->devices[t]) != cudaSuccess)
            continue;
        cu.ncclCommAbort(c->comms[t]); /* frees it: never used again */
        c->comms[t] = NULL;
    }
    c->aborted = true;
    pthread_mutex_unlock(&c->lock);
}

int nccl_comm_wait(nccl_comm *c, int t, void *stream, bool spin, tt_err *err)
{
    long ns = 1000;
    for (;;) {
        cudaError_t rc = cudaStreamQuery((cudaStream_t)stream);
        if (rc == cudaSuccess)
            return 0;
        if (rc != cudaErrorNotReady)
            return cuda_ok(rc, c->devices[t], "cudaStreamQuery", err);
        if (nccl_comm_check(c, t, err) != 0) {
            nccl_comm_abort(c);
            return -1;
        }
        if (spin)
            continue;
        struct timespec ts = {0, ns};
        nanosleep(&ts, NULL);
        if (ns < 1000000)
            ns *= 2;
    }
}

/* After the work on the streams the caller gave is done (or aborted). */
void nccl_comm_free(nccl_comm *c)
{
    if (c == NULL)
        return;
    for (int t = 0; t < c->n; t++) {
        if (cudaSetDevice(c->devices[t]) != cudaSuccess)
            continue;
        if (c->comms[t]) {
            ncclResult_t async = ncclSuccess;
            cu.ncclCommGetAsyncError(c->comms[t], &async);
            if (async != ncclSuccess)
                cu.ncclCommAbort(c->comms[t]); /* a broken communicator cannot finish */
            else
                cu.ncclCommDestroy(c->comms[t]);
        }
    }
    cudaGetLastError();
    pthread_mutex_destroy(&c->lock);
    free(c);
}

/* What rank 0 sends every rank: whether it could make an id, and the id. */
typedef struct {
    int ok;
    ncclUniqueId id;
} id_message;

nccl_comm *nccl_comm_create(int n, const int *devices, tt_err *err)
{
    if (cuda_libs_load(err) != 0)
        return NULL;
    nccl_comm *c = calloc(1, sizeof(*c));
    if (c == NULL || n < 1 || n > 64) {
        free(c);
        err_set(err, TT_ERR_RUNTIME, "nccl: cannot make communicators for %d towers", n);
        return NULL;
    }
    c->n = n;
    c->ranks = dist_size();
    pthread_mutex_init(&c->lock, NULL);
    memcpy(c->devices, devices, (size_t)n * sizeof(int));
    if (c->ranks == 1) {
        if (nccl_ok(cu.ncclCommInitAll(c->comms, n, devices), NULL, devices[0],
                    "ncclCommInitAll", err) != 0)
            goto fail;
    } else {
        /* one communicator over every GPU of every rank: rank 0 makes the
         * id, MPI_Bcast carries it (with whether it could) */
        id_message m;
        memset(&m, 0, sizeof(m));
        tt_err id_err = {0};
        if (dist_rank() == 0)
            m.ok = nccl_ok(cu.ncclGetUniqueId(&m.id), NULL, devices[0], "ncclGetUniqueId",
                           &id_err) == 0;
        dist_broadcast(&m, sizeof(m), 0);
        if (!m.ok) {
            if (dist_rank() == 0)
                err_set(err, id_err.code, "%s", id_err.msg);
            else
                err_set(err, TT_ERR_RUNTIME, "nccl: rank 0 could not make the communicator id");
            goto fail;
        }
        int total = c->ranks * n;
        if (nccl_ok(cu.ncclGroupStart(), NULL, devices[0], "ncclGroupStart", err) != 0)
            goto fail;
        int bad = -1;
        ncclResult_t rc = ncclSuccess;
        for (int t = 0; t < n && rc == ncclSuccess; t++) {
            if (cudaSetDevice(devices[t]) != cudaSuccess) {
                bad = t;
                break;
            }
            rc = cu.ncclCommInitRank(&c->comms[t], total, m.id, dist_rank() * n + t);
            if (rc != ncclSuccess)
                bad = t;
        }
        ncclResult_t end = cu.ncclGroupEnd();
        if (bad >= 0) {
            if (rc == ncclSuccess)
                cuda_ok(cudaSetDevice(devices[bad]), devices[bad], "cudaSetDevice", err);
            else
                nccl_fail(rc, NULL, devices[bad], "ncclCommInitRank", err);
            goto fail;
        }
        if (nccl_ok(end, NULL, devices[0], "ncclCommInitRank (group)", err) != 0)
            goto fail;
    }
    return c;
fail:
    nccl_comm_free(c);
    return NULL;
}

int nccl_comm_size(const nccl_comm *c)
{
    return c->n * c->ranks;
}

int nccl_comm_allreduce(nccl_comm *c, int t, void *stream, float *buf, const size_t *lo,
                        const size_t *hi, int n_packs, bool mean, tt_err *err)
{
    int d = c->devices[t];
    if (n_packs <= 0)
        return 0;
    if (cuda_ok(cudaSetDevice(d), d, "cudaSetDevice", err) != 0 ||
        nccl_ok(cu.ncclGroupStart(), c->comms[t], d, "ncclGroupStart", err) != 0)
        return -1;
    ncclResult_t rc = ncclSuccess;
    for (int i = 0; i < n_packs && rc == ncclSuccess; i++)
        rc = cu.ncclAllReduce(buf + lo[i], buf + lo[i], hi[i] - lo[i], ncclFloat32,
                              mean ? ncclAvg : ncclSum, c->comms[t], (cudaStream_t)stream);
    ncclResult_t end = cu.ncclGroupEnd(); /* always close the group */
    if (nccl_ok(rc, c->comms[t], d, "ncclAllReduce", err) != 0 ||
        nccl_ok(end, c->comms[t], d, "ncclGroupEnd", err) != 0)
        return -1;
    return 0;
}

int nccl_comm_check(nccl_comm *c, int t, tt_err *err)
{
    ncclResult_t async = ncclSuccess;
    int ret = 0;
    pthread_mutex_lock(&c->lock); /* an abort frees comms[t] */
    if (c->aborted) {
        ret = err_set(err, TT_ERR_RUNTIME, "cuda:%d: NCCL communicator aborted", c->devices[t]);
    } else {
        ncclResult_t rc = cu.ncclCommGetAsyncError(c->comms[t], &async);
        if (rc != ncclSuccess)
            ret = nccl_fail(rc, c->comms[t], c->devices[t], "ncclCommGetAsyncError", err);
        else if (async != ncclSuccess)
            ret = nccl_fail(async, c->comms[t], c->devices[t], "NCCL (asynchronous error)", err);
    }
    pthread_mutex_unlock(&c->lock);
    return ret;
}

int nccl_comm_allreduce_all(nccl_comm *c, float *const *send, float *const *recv, size_t count,
                            void *const *streams, tt_err *err)
{
    if (nccl_ok(cu.ncclGroupStart(), NULL, c->devices[0], "ncclGroupStart", err) != 0)
        return -1;
    ncclResult_t rc = ncclSuccess;
    int bad = 0;
    for (int t = 0; t < c->n && rc == ncclSuccess; t++) {
        rc = cu.ncclAllReduce(send[t], recv[t], count, ncclFloat32, ncclSum, c->comms[t],
                              (cudaStream_t)streams[t]);
        bad = t;
    }
    ncclResult_t end = cu.ncclGroupEnd();
    if (nccl_ok(rc, c->comms[bad], c->devices[bad], "ncclAllReduce", err) != 0 ||
        nccl_ok(end, c->comms[0], c->devices[0], "ncclGroupEnd", err) != 0)
        return -1;
    return 0;
}
