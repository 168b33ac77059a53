#include "backend/cpu/dnnl_util.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>

#include <omp.h>

static dnnl_engine_t engine;
static pthread_once_t engine_once = PTHREAD_ONCE_INIT;

static void engine_create(void)
{
    if (dnnl_engine_create(&engine, dnnl_cpu, 0) != dnnl_success)
        engine = NULL;
}

dnnl_engine_t cpu_dnnl_engine(void)
{
    pthread_once(&engine_once, engine_create);
    return engine;
}

void cpu_dnnl_single_thread(void)
{
    static _Thread_local bool single;
    if (!single) {
        omp_set_num_threads(1);
        single = true;
    }
}

void cpu_dnnl_check(dnnl_status_t st, const char *what)
{
    if (st != dnnl_success) {
        fprintf(stderr, "towertrain: internal error: oneDNN %s failed (status %d)\n", what,
                (int)st);
        abort();
    }
}
