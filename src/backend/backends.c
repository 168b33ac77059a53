/* backends.c - which backends this binary was built with, for --version. */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "backend/backend.h"

const char *backend_list_built(void)
{
#ifdef HAVE_CUDA
    return "cpu cuda";
#else
    return "cpu";
#endif
}
