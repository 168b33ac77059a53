/* cpu_isa.h - the instruction-set level the CPU backend's own kernels run at.
 *
 * Each hand-written kernel has a variant per level: AVX-512 (32 vector
 * registers of 16 floats), AVX2 + FMA (16 registers of 8 floats) and plain C.
 * The level is the highest the CPU has (CPUID), capped by the environment
 * variable TT_CPU_ISA (avx512, avx2 or plain), and is read once: every kernel
 * of a run uses the same level, so a run's bits do not change midway. The cap
 * also caps oneDNN (ONEDNN_MAX_CPU_ISA, unless the user set that too), so a
 * capped run uses no instruction above the cap in our code or oneDNN's. */
#ifndef TT_CPU_ISA_H
#define TT_CPU_ISA_H

#include <stdbool.h>
#include <stddef.h>

typedef enum {
    CPU_ISA_PLAIN = 0,  /* plain C, any x86-64 (or another architecture) */
    CPU_ISA_AVX2 = 1,   /* AVX2 + FMA + F16C (Haswell, Zen 1 and later) */
    CPU_ISA_AVX512 = 2, /* AVX512F + BW + VL + DQ (Skylake-SP, Zen 4 and later) */
} cpu_isa_t;

/* The highest level this CPU has, from CPUID, ignoring TT_CPU_ISA. */
cpu_isa_t cpu_isa_detected(void);

/* The level the kernels run at: cpu_isa_detected() capped by TT_CPU_ISA.
 * Read once; a TT_CPU_ISA that cpu_isa_check_env refuses counts as unset
 * here (the backend refuses it first). */
cpu_isa_t cpu_isa(void);

/* "avx512", "avx2" or "plain". */
const char *cpu_isa_name(cpu_isa_t isa);

/* Checks TT_CPU_ISA: 0 when it is unset or names a level; otherwise -1 with
 * `why` (of `n` bytes) saying what is wrong, for a one-line usage error.
 * A cap above what the CPU has is not an error: the CPU's level runs. */
int cpu_isa_check_env(char *why, size_t n);

/* The function attributes that compile one variant of a kernel for a level
 * (explicit targets, not ifunc clones: the variant is picked by a switch on
 * cpu_isa(), so TT_CPU_ISA caps it, and it works under the sanitizers).
 * CPU_ISA_TARGETS is defined where the compiler has them (x86-64 GCC and
 * clang); elsewhere only the plain variants exist. */
#if defined(__x86_64__) && defined(__GNUC__)
#define CPU_ISA_TARGETS 1
#define CPU_TARGET_AVX512 \
    __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")))
#define CPU_TARGET_AVX2 __attribute__((target("avx2,fma,f16c")))
#endif

/* For unit tests only: run the kernels at `isa` (at most the detected level)
 * from now on, as if TT_CPU_ISA said so. */
void cpu_isa_set_for_test(cpu_isa_t isa);

#endif
