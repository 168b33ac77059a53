/* cpu_isa.c - the CPU kernels' instruction-set level (cpu_isa.h). */
#include "backend/cpu/cpu_isa.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/env.h"

/* cpu_isa()'s answer, once asked. Atomic (relaxed: every thread computes
 * the same value) because the first ask may come from several of a team's
 * threads at once, in a kernel. */
static _Atomic int isa_level = -1;

cpu_isa_t cpu_isa_detected(void)
{
#if defined(__x86_64__) && defined(__GNUC__)
    static _Atomic int have = -1; /* atomic as isa_level */
    int h = atomic_load_explicit(&have, memory_order_relaxed);
    if (h < 0) {
        __builtin_cpu_init();
        if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
            __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq"))
            h = CPU_ISA_AVX512;
        else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
            h = CPU_ISA_AVX2;
        else
            h = CPU_ISA_PLAIN;
        atomic_store_explicit(&have, h, memory_order_relaxed);
    }
    return (cpu_isa_t)h;
#else
    return CPU_ISA_PLAIN;
#endif
}

const char *cpu_isa_name(cpu_isa_t isa)
{
    return isa == CPU_ISA_AVX512 ? "avx512" : isa == CPU_ISA_AVX2 ? "avx2" : "plain";
}

/* TT_CPU_ISA's level, or ENV_UNSET, or ENV_OTHER when it names none. */
static int env_level(void)
{
    const char *names[] = {cpu_isa_name(CPU_ISA_PLAIN), cpu_isa_name(CPU_ISA_AVX2),
                           cpu_isa_name(CPU_ISA_AVX512)};
    return env_word("TT_CPU_ISA", names, 3); /* the index is the level */
}

int cpu_isa_check_env(char *why, size_t n)
{
    if (env_level() != ENV_OTHER)
        return 0;
    snprintf(why, n, "TT_CPU_ISA must be avx512, avx2 or plain, not '%.40s'",
             getenv("TT_CPU_ISA"));
    return -1;
}

cpu_isa_t cpu_isa(void)
{
    int l = atomic_load_explicit(&isa_level, memory_order_relaxed);
    if (l < 0) {
        int have = (int)cpu_isa_detected(), cap = env_level();
        l = cap >= 0 && cap < have ? cap : have;
        atomic_store_explicit(&isa_level, l, memory_order_relaxed);
    }
    return (cpu_isa_t)l;
}

void cpu_isa_set_for_test(cpu_isa_t isa)
{
    int have = (int)cpu_isa_detected();
    atomic_store_explicit(&isa_level, (int)isa <= have ? (int)isa : have, memory_order_relaxed);
}
