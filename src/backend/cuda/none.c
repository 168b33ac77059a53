/* none.c - device discovery when towertrain is built without the CUDA backend. */
#include <stdio.h>

#include "backend/backend.h"

int backend_cuda_device_count(char *reason, size_t reason_len)
{
    if (reason != NULL && reason_len > 0)
        snprintf(reason, reason_len, "towertrain was built without CUDA");
    return 0;
}
