/* dnnl_util.h - what the CPU backend's oneDNN users share (conv_dnnl.c,
 * dense_bf16.c, gemm.c): one engine for the process, one OpenMP thread per
 * calling thread, and the abort on a call that cannot fail. Built with
 * oneDNN only. */
#ifndef TT_DNNL_UTIL_H
#define TT_DNNL_UTIL_H

#include <stdbool.h>

#include <dnnl.h>

/* Caps oneDNN's instruction sets to cpu_isa()'s level where TT_CPU_ISA
 * lowered it (AVX2, or SSE4.1 for plain), unless the user set
 * ONEDNN_MAX_CPU_ISA: once per process, before oneDNN's first use (the
 * engine, sgemm and the bf16 check call it). */
void cpu_dnnl_cap_isa(void);

/* True where oneDNN's convolutions run below AVX-512 (its AVX2 and SSE4.1
 * kernels block channels by 8, not by the 16 of nChw16c, and read and
 * write NHWC as it is): the CPU backend's float32 blocked layout is NHWC
 * there (cpu_backend.c). Caps oneDNN first (cpu_dnnl_cap_isa). */
bool cpu_dnnl_convs_nhwc(void);

/* oneDNN's name of an instruction-set level, as ONEDNN_MAX_CPU_ISA spells
 * it ("AVX2", "AVX512_CORE", ...). */
const char *cpu_dnnl_isa_name(dnnl_cpu_isa_t isa);

/* The process's CPU engine, made on first use; NULL when oneDNN cannot make one. */
dnnl_engine_t cpu_dnnl_engine(void);

/* oneDNN threads with OpenMP; inside our tasks it must use one thread. The
 * setting is per calling thread: every caller calls this first. */
void cpu_dnnl_single_thread(void);

/* oneDNN failing on a primitive it built and accepted is a broken library or
 * memory corruption: nothing sensible can continue, and a wrong gradient must
 * not be trained on silently. Aborts with one line naming `what`. */
void cpu_dnnl_check(dnnl_status_t st, const char *what);

#endif
