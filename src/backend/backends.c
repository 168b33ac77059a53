/* backends.c - which backends this binary was built with, for --version,
 * and the device towers' backends by kind (backend.h). */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <stdio.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/cuda/cuda_backend.h"
#include "backend/precision.h"

const char *backend_list_built(void)
{
#ifdef HAVE_CUDA
    return "cpu sim cuda";
#else
    return "cpu sim";
#endif
}

backend_t *backend_device_create(const char *kind, int device, const backend_device_options *o,
                                 tt_err *err)
{
    if (prec_check_env(err) != 0)
        return NULL;
    if (strcmp(kind, "sim") == 0)
        return backend_sim_create(device, o->precision, err);
    cuda_options opt = {.tf32 = o->tf32, .deterministic = o->deterministic};
    backend_t *be;
    if (strcmp(o->precision, "bf16") == 0)
        be = backend_cuda_create_bf16(device, &opt, err);
    else if (strcmp(o->precision, "fp16") == 0)
        be = backend_cuda_create_fp16(device, &opt, err);
    else
        be = backend_cuda_create(device, &opt, err);
    /* The device side (cuda_device.c) is one call of cuda_backend.h per
     * entry; it is wired here, not in cuda_backend.c, so that the two files
     * do not call each other. */
    if (be != NULL)
        be->dev = &backend_cuda_device_ops;
    return be;
}

int backend_device_count(const char *kind, char *reason, size_t reason_len)
{
    if (strcmp(kind, "sim") == 0)
        return TT_MAX_SIM_DEVICES;
    return backend_cuda_device_count(reason, reason_len);
}

int backend_device_query(const char *kind, int device, backend_device_info *info, tt_err *err)
{
    if (strcmp(kind, "sim") == 0)
        return backend_sim_device_info(device, info, err);
    return backend_cuda_device_info(device, info, err);
}
