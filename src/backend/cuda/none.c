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

int backend_cuda_weights_add(backend_t *be, const float *params, size_t count, tt_err *err)
{
    return err_set(err, TT_ERR_USAGE, "%s", why);
}

void backend_cuda_weights_remove(backend_t *be, const float *params)
{
}

void backend_cuda_weights_step(backend_t *be, const float *params, bool begin)
{
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

/* queues and events (cuda_queue.c): never reached, no CUDA backend exists */
backend_queue *backend_cuda_queue(backend_t *be)
{
    return NULL;
}

backend_queue *backend_cuda_queue_create(backend_t *be, tt_err *err)
{
    err_set(err, TT_ERR_USAGE, "%s", why);
    return NULL;
}

void backend_cuda_queue_free(backend_t *be, backend_queue *q)
{
}

backend_event *backend_cuda_event_create(backend_t *be, bool timing, tt_err *err)
{
    err_set(err, TT_ERR_USAGE, "%s", why);
    return NULL;
}

void backend_cuda_event_free(backend_t *be, backend_event *e)
{
}

int backend_cuda_event_record(backend_t *be, backend_event *e, backend_queue *q, tt_err *err)
{
    return err_set(err, TT_ERR_USAGE, "%s", why);
}

int backend_cuda_queue_wait_event(backend_t *be, backend_queue *q, backend_event *e,
                                  tt_err *err)
{
    return err_set(err, TT_ERR_USAGE, "%s", why);
}

int backend_cuda_event_query(backend_t *be, backend_event *e, tt_err *err)
{
    return err_set(err, TT_ERR_USAGE, "%s", why);
}

int backend_cuda_event_elapsed_ms(backend_t *be, backend_event *start, backend_event *end,
                                  float *ms, tt_err *err)
{
    return err_set(err, TT_ERR_USAGE, "%s", why);
}

void *backend_cuda_host_alloc(backend_t *be, size_t bytes, tt_err *err)
{
    err_set(err, TT_ERR_USAGE, "%s", why);
    return NULL;
}

void backend_cuda_host_free(backend_t *be, void *p)
{
}

int backend_cuda_copy_h2d_async(backend_t *be, void *dst, const void *host_src, size_t bytes,
                                backend_queue *q, tt_err *err)
{
    return err_set(err, TT_ERR_USAGE, "%s", why);
}

int backend_cuda_copy_d2h_async(backend_t *be, void *host_dst, const void *src, size_t bytes,
                                backend_queue *q, tt_err *err)
{
    return err_set(err, TT_ERR_USAGE, "%s", why);
}

int backend_cuda_capture_begin(backend_t *be, tt_err *err)
{
    return err_set(err, TT_ERR_USAGE, "%s", why);
}

backend_graph *backend_cuda_capture_end(backend_t *be, tt_err *err)
{
    err_set(err, TT_ERR_USAGE, "%s", why);
    return NULL;
}

int backend_cuda_graph_launch(backend_t *be, backend_graph *g, tt_err *err)
{
    return err_set(err, TT_ERR_USAGE, "%s", why);
}

void backend_cuda_graph_free(backend_t *be, backend_graph *g)
{
}
