/* simd_target.h - the target attributes of the CPU kernels' per-level
 * variants (conv_small.c, pool.c, batchnorm.c).
 *
 * A function marked TARGET_AVX2 or TARGET_AVX512 is compiled for that level
 * whatever the build's -march, and is called only where cpu_isa() (cpu_isa.h)
 * says that level runs, so TT_CPU_ISA caps it. Explicit attributes need no
 * ifunc resolver (target_clones do), so they build under the sanitizers too
 * and the unit tests there run every level the CPU has. X86_KERNELS says the
 * compiler can build them (GCC or clang on x86-64); elsewhere only the plain
 * C variants exist and cpu_isa() says plain. */
#ifndef TT_SIMD_TARGET_H
#define TT_SIMD_TARGET_H

#if defined(__x86_64__) && defined(__GNUC__)
#define X86_KERNELS 1
#define TARGET_AVX2 __attribute__((target("avx2,fma")))
#define TARGET_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq")))
#endif

#endif
