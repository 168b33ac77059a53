/* dot_rate.c - how many float32 and bf16 products one core retires a
 * cycle-equivalent: vfmadd231ps zmm (16 products) against vdpbf16ps zmm
 * (32 bf16 products summed in float32), each as 24 independent sums so
 * that latency never binds. The premise of towertrain's bf16 rule
 * (towertrain.cfg(5), precision): where vdpbf16ps retires no more products
 * a second than vfmadd231ps, bf16's kernels cannot beat float32's, and an
 * Intel core with AVX512_FP16 and no AMX computes bf16 jobs in fp32.
 *
 *   cc -O2 dot_rate.c -o dot_rate
 * usage: dot_rate [ROUNDS]   (default 3; the best of them is printed)
 * prints "fma <GFLOP/s> vdpbf16ps <GFLOP/s> bf16/fp32 <ratio>" on one
 * core (2 FLOP a product), or "vdpbf16ps: not on this CPU" and exit 2. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define ITERS 20000000L
#define X24(op)                                                                            \
    op(0) op(1) op(2) op(3) op(4) op(5) op(6) op(7) op(8) op(9) op(10) op(11) op(12) op(13) \
        op(14) op(15) op(16) op(17) op(18) op(19) op(20) op(21) op(22) op(23)
#define FMA(i) "vfmadd231ps %%zmm30, %%zmm31, %%zmm" #i "\n\t"
#define DPBF16(i) "vdpbf16ps %%zmm30, %%zmm31, %%zmm" #i "\n\t"

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* the 24 sums' registers, which the loops below overwrite */
#define SUMS                                                                                   \
    "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10",    \
        "xmm11", "xmm12", "xmm13", "xmm14", "xmm15", "xmm16", "xmm17", "xmm18", "xmm19",       \
        "xmm20", "xmm21", "xmm22", "xmm23"

/* seconds for ITERS x 24 vdpbf16ps (bf16) or vfmadd231ps; the registers
 * hold whatever they hold (denormals or NaNs cost these units nothing
 * extra); compiled for AVX-512 alone, run only where the CPU has it */
__attribute__((target("avx512f"), noinline)) static double time_products(int bf16)
{
    double t = now();
    if (bf16)
        for (long i = 0; i < ITERS; i++)
            __asm__ volatile(X24(DPBF16)::: SUMS);
    else
        for (long i = 0; i < ITERS; i++)
            __asm__ volatile(X24(FMA)::: SUMS);
    return now() - t;
}

int main(int argc, char **argv)
{
    int rounds = argc > 1 ? atoi(argv[1]) : 3;
    if (rounds < 1) {
        fprintf(stderr, "dot_rate: ROUNDS is a whole number >= 1\n");
        return 2;
    }
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx512f") || !__builtin_cpu_supports("avx512bf16")) {
        printf("vdpbf16ps: not on this CPU\n");
        return 2;
    }
    double fma = 1e30, dp = 1e30; /* the best (shortest) of the rounds, interleaved */
    for (int r = 0; r < rounds; r++) {
        double f = time_products(0), d = time_products(1);
        fma = f < fma ? f : fma;
        dp = d < dp ? d : dp;
    }
    double n = (double)ITERS * 24.0;
    double fma_gflops = n * 16 * 2 / fma / 1e9, dp_gflops = n * 32 * 2 / dp / 1e9;
    printf("fma %.1f vdpbf16ps %.1f bf16/fp32 %.2f\n", fma_gflops, dp_gflops,
           dp_gflops / fma_gflops);
    return 0;
}
