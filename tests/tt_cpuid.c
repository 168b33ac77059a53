/* tt_cpuid - the CPU features the tests derive their expectations from.
 *
 * Prints, on one line, the features of the CPU it runs on (CPUID, and XGETBV
 * for what the OS saves), named as /proc/cpuinfo names them:
 *   sse4_1 avx avx2 fma f16c avx_vnni avx512f avx512cd avx512bw avx512vl avx512dq
 *   avx512_vnni avx512_bf16 avx512_fp16 amx_tile amx_int8 amx_bf16
 * each only where the CPU has it and the OS saves its registers (YMM for the
 * AVX ones, ZMM and opmasks for AVX-512, tile data for AMX). No test reads
 * /proc/cpuinfo for this: under QEMU's user mode (make check-cpus) it is the
 * host's, while CPUID is the emulated CPU's, the one the programs see. Its
 * own reading, independent of towertrain's (backend/cpu/cpu_isa.c) and of
 * oneDNN's, so that a test can check theirs against it. */
#include <stdio.h>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>

static unsigned long long xgetbv0(void)
{
    unsigned lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return (unsigned long long)hi << 32 | lo;
}

static void print_if(int have, const char *name)
{
    if (have)
        printf(" %s", name);
}

int main(void)
{
    unsigned a, b, c, d, max;
    if (!__get_cpuid(0, &max, &b, &c, &d))
        max = 0;
    unsigned c1 = 0, b7 = 0, c7 = 0, d7 = 0, a71 = 0;
    if (max >= 1)
        __get_cpuid(1, &a, &b, &c1, &d);
    if (max >= 7) {
        __get_cpuid_count(7, 0, &a, &b7, &c7, &d7);
        __get_cpuid_count(7, 1, &a71, &b, &c, &d);
    }
    unsigned long long xcr0 = (c1 >> 27 & 1u) ? xgetbv0() : 0; /* OSXSAVE */
    int ymm = (xcr0 & 0x6) == 0x6;        /* SSE and AVX state */
    int zmm = ymm && (xcr0 & 0xe0) == 0xe0; /* opmask, ZMM0-15 upper, ZMM16-31 */
    int tiles = (xcr0 & 0x60000) == 0x60000; /* XTILECFG, XTILEDATA */
    printf("cpu:");
    print_if(c1 >> 19 & 1u, "sse4_1");
    print_if(ymm && (c1 >> 28 & 1u), "avx");
    print_if(ymm && (b7 >> 5 & 1u), "avx2");
    print_if(ymm && (c1 >> 12 & 1u), "fma");
    print_if(ymm && (c1 >> 29 & 1u), "f16c");
    print_if(ymm && (a71 >> 4 & 1u), "avx_vnni");
    print_if(zmm && (b7 >> 16 & 1u), "avx512f");
    print_if(zmm && (b7 >> 28 & 1u), "avx512cd");
    print_if(zmm && (b7 >> 30 & 1u), "avx512bw");
    print_if(zmm && (b7 >> 31 & 1u), "avx512vl");
    print_if(zmm && (b7 >> 17 & 1u), "avx512dq");
    print_if(zmm && (c7 >> 11 & 1u), "avx512_vnni");
    print_if(zmm && (a71 >> 5 & 1u), "avx512_bf16");
    print_if(zmm && (d7 >> 23 & 1u), "avx512_fp16");
    print_if(tiles && (d7 >> 24 & 1u), "amx_tile");
    print_if(tiles && (d7 >> 25 & 1u), "amx_int8");
    print_if(tiles && (d7 >> 22 & 1u), "amx_bf16");
    printf("\n");
    return 0;
}
#else
int main(void)
{
    printf("cpu:\n");
    return 0;
}
#endif
