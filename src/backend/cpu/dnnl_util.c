/* dnnl_util.c - the CPU backend's oneDNN plumbing (dnnl_util.h). */
#include "backend/cpu/dnnl_util.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>

#include <omp.h>

#include "backend/cpu/cpu_isa.h"

static pthread_once_t cap_once = PTHREAD_ONCE_INIT;

static void cap_isa(void)
{
    cpu_isa_t isa = cpu_isa();
    if (getenv("ONEDNN_MAX_CPU_ISA") != NULL || isa >= cpu_isa_detected())
        return;
    /* fails only after oneDNN's first kernel, which cannot have run: every
     * path into oneDNN passes here first */
    dnnl_set_max_cpu_isa(isa == CPU_ISA_AVX2 ? dnnl_cpu_isa_avx2 : dnnl_cpu_isa_sse41);
}

void cpu_dnnl_cap_isa(void)
{
    pthread_once(&cap_once, cap_isa);
}

bool cpu_dnnl_convs_nhwc(void)
{
    cpu_dnnl_cap_isa();
    dnnl_cpu_isa_t isa = dnnl_get_effective_cpu_isa();
    return (isa & dnnl_cpu_isa_avx512_core) != dnnl_cpu_isa_avx512_core;
}

const char *cpu_dnnl_isa_name(dnnl_cpu_isa_t isa)
{
    switch (isa) {
    case dnnl_cpu_isa_sse41:
        return "SSE41";
    case dnnl_cpu_isa_avx:
        return "AVX";
    case dnnl_cpu_isa_avx2:
        return "AVX2";
    case dnnl_cpu_isa_avx2_vnni:
        return "AVX2_VNNI";
    case dnnl_cpu_isa_avx512_mic:
    case dnnl_cpu_isa_avx512_mic_4ops:
        return "AVX512_MIC";
    case dnnl_cpu_isa_avx512_core:
        return "AVX512_CORE";
    case dnnl_cpu_isa_avx512_core_vnni:
        return "AVX512_CORE_VNNI";
    case dnnl_cpu_isa_avx512_core_bf16:
        return "AVX512_CORE_BF16";
    case dnnl_cpu_isa_avx512_core_amx:
        return "AVX512_CORE_AMX";
    default:
        return "no vector extension";
    }
}

static dnnl_engine_t engine;
static pthread_once_t engine_once = PTHREAD_ONCE_INIT;

static void engine_create(void)
{
    cpu_dnnl_cap_isa();
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
        cpu_dnnl_cap_isa();
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
