/* none.c - the CUDA backend's calls when towertrain is built without it
 * (configure --without-cuda, or no CUDA toolkit found): no device, and every
 * request for one is answered "built without CUDA". */
#include <stdio.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/cuda/cuda_backend.h"

static const char why[] = "towertrain was built without CUDA";

int backend_cuda_device_count(char *reason, size_t reason_len)
{
    if (reason != NULL && reason_len > 0)
        snprintf(reason, reason_len, "%s", why);
    return 0;
}

backend_t *backend_cuda_create(int device, const cuda_options *opt, tt_err *err)
{
    err_set(err, TT_ERR_USAGE, "cuda:%d: %s", device, why);
    return NULL;
}

backend_t *backend_cuda_create_bf16(int device, const cuda_options *opt, tt_err *err)
{
    return backend_cuda_create(device, opt, err);
}

backend_t *backend_cuda_create_fp16(int device, const cuda_options *opt, tt_err *err)
{
    return backend_cuda_create(device, opt, err);
}

int backend_cuda_reserve_copies(backend_t *be, size_t bytes, tt_err *err)
{
    return err_set(err, TT_ERR_USAGE, "%s", why);
}

bool backend_is_cuda(const backend_t *be)
{
    return false;
}

int backend_cuda_device_info(int device, cuda_device_info *info, tt_err *err)
{
    memset(info, 0, sizeof(*info));
    return err_set(err, TT_ERR_USAGE, "cuda:%d: %s", device, why);
}

int backend_cuda_bind(backend_t *be, tt_err *err)
{
    return err_set(err, TT_ERR_USAGE, "%s", why);
}

void *backend_cuda_stream(backend_t *be)
{
    return NULL;
}

int backend_cuda_check(backend_t *be, tt_err *err)
{
    return 0;
}

int backend_cuda_sync(backend_t *be, tt_err *err)
{
    return 0;
}

int backend_cuda_query(backend_t *be, tt_err *err)
{
    return 1;
}

bool backend_cuda_peer_enable(backend_t *be, const backend_t *peer)
{
    return false;
}

void backend_cuda_freeze(backend_t *be)
{
}

void backend_cuda_memory(backend_t *be, size_t *reserved, size_t *in_use, size_t *peak)
{
    *reserved = *in_use = *peak = 0;
}

const char *backend_cuda_alloc_error(backend_t *be)
{
    return "";
}

const char *backend_cuda_build_info(void)
{
    return NULL;
}

/* staging (cuda_staging.h) */
#include "backend/cuda/cuda_staging.h"

cuda_staging *cuda_staging_create(backend_t *be, size_t x_bytes, size_t y_bytes, tt_err *err)
{
    err_set(err, TT_ERR_USAGE, "%s", why);
    return NULL;
}

int cuda_staging_load(cuda_staging *s, int64_t step, const float *x, size_t x_bytes,
                      const int32_t *y, size_t y_bytes, float **dev_x, int32_t **dev_y,
                      tt_err *err)
{
    return err_set(err, TT_ERR_USAGE, "%s", why);
}

int cuda_staging_done(cuda_staging *s, tt_err *err)
{
    return 0;
}

void cuda_staging_free(cuda_staging *s)
{
}
