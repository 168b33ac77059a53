/* nccl_none.c - the NCCL calls when towertrain is built without CUDA. */
#include "comm/nccl_comm.h"

static const char why[] = "towertrain was built without CUDA (NCCL)";

nccl_comm *nccl_comm_create(int n, const int *devices, tt_err *err)
{
    err_set(err, TT_ERR_USAGE, "%s", why);
    return NULL;
}

void nccl_comm_free(nccl_comm *c)
{
}

int nccl_comm_size(const nccl_comm *c)
{
    return 0;
}

int nccl_comm_allreduce(nccl_comm *c, int t, void *stream, float *buf, const size_t *lo,
                        const size_t *hi, int n_packs, bool mean, tt_err *err)
{
    return err_set(err, TT_ERR_USAGE, "%s", why);
}

int nccl_comm_check(nccl_comm *c, int t, tt_err *err)
{
    return 0;
}

int nccl_comm_wait(nccl_comm *c, int t, void *stream, bool spin, tt_err *err)
{
    return err_set(err, TT_ERR_USAGE, "%s", why);
}

void nccl_comm_abort(nccl_comm *c)
{
}

int nccl_comm_allreduce_all(nccl_comm *c, float *const *send, float *const *recv, size_t count,
                            void *const *streams, tt_err *err)
{
    return err_set(err, TT_ERR_USAGE, "%s", why);
}
