/* sim_device.c - what every file of the simulated GPU shares below its
 * backend (sim.h): the first error, the faults TT_SIM_FAULT plants,
 * 16-bit storage rounded as a GPU rounds it, and the blocked operations'
 * host scratch. sim_backend.c, sim_comm.c, sim_blocked.c and sim_grad16.c
 * call these; these call none of theirs. */
#include "backend/sim/sim.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>
#endif

void sim_fail(backend_t *be, const char *fmt, ...)
{
    sim_impl *s = sim_impl_of(be);
    pthread_mutex_lock(&s->lock);
    if (s->err.code == TT_OK) {
        char msg[sizeof(s->err.msg)];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof(msg), fmt, ap);
        va_end(ap);
        err_set(&s->err, TT_ERR_RUNTIME, "sim:%d: %s", be->device, msg);
    }
    pthread_mutex_unlock(&s->lock);
}

/* TT_SIM_FAULT (sim.h): parsed once. */
static pthread_once_t fault_once = PTHREAD_ONCE_INIT;
static int64_t fault_stall_from = -1;
static bool fault_download_checkpoint;
static bool fault_silent;
static bool fault_capture;

static void fault_parse(void)
{
    const char *f = getenv("TT_SIM_FAULT");
    long long step;
    if (f == NULL)
        return;
    if (sscanf(f, "stall_allreduce:%lld", &step) == 1 && step >= 0)
        fault_stall_from = step;
    else if (sscanf(f, "hang_allreduce:%lld", &step) == 1 && step >= 0) {
        fault_stall_from = step;
        fault_silent = true;
    } else if (strcmp(f, "download_error:checkpoint") == 0)
        fault_download_checkpoint = true;
    else if (strcmp(f, "capture_error") == 0)
        fault_capture = true;
}

bool sim_fault_stalls(backend_t *be, int64_t *step)
{
    pthread_once(&fault_once, fault_parse);
    *step = sim_impl_of(be)->step;
    return fault_stall_from >= 0 && *step >= fault_stall_from;
}

bool sim_fault_silent(void)
{
    pthread_once(&fault_once, fault_parse);
    return fault_silent;
}

bool sim_fault_download_checkpoint(void)
{
    pthread_once(&fault_once, fault_parse);
    return fault_download_checkpoint;
}

bool sim_fault_capture(void)
{
    pthread_once(&fault_once, fault_parse);
    return fault_capture;
}

/* ---- 16-bit storage, as the GPU rounds it ---- */

static float round_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof(u));
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return f; /* NaN */
    u = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
    memcpy(&f, &u, sizeof(f));
    return f;
}

/* fp16: to nearest even; past 65504 (half-way to 65536 and beyond) Inf.
 * The compiler's conversion is a libgcc call per element (without F16C in
 * the build's target): the reference, and the tail of the F16C path. */
static float round_fp16(float f)
{
    return (float)(_Float16)f;
}

#if defined(__x86_64__)
/* The same 8 at a time with F16C's vcvtps2ph (IEEE round to nearest even,
 * overflow to Inf, subnormals kept) and back: what the scalar loop cost
 * was 43% of an fp16 sim run. */
__attribute__((target("avx,f16c"))) static void round_fp16_f16c(size_t count, const float *x,
                                                                 float *y)
{
    size_t i = 0;
    for (; i + 8 <= count; i += 8) {
        __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT);
        _mm256_storeu_ps(y + i, _mm256_cvtph_ps(h));
    }
    for (; i < count; i++)
        y[i] = round_fp16(x[i]);
}

/* F16C: CPUID leaf 1, ECX bit 29 (clang's __builtin_cpu_supports does not
 * know "f16c"); its 256-bit form needs the OS's AVX state, which
 * __builtin_cpu_supports("avx") checks. Asked once: CPUID traps to the
 * hypervisor in a guest, and this runs for every 16-bit operand. */
static bool has_f16c(void)
{
    static atomic_int have = -1;
    int h = atomic_load_explicit(&have, memory_order_relaxed);
    if (h < 0) {
        unsigned a, b, c, d;
        h = __builtin_cpu_supports("avx") && __get_cpuid(1, &a, &b, &c, &d) && (c >> 29 & 1u);
        atomic_store_explicit(&have, h, memory_order_relaxed);
    }
    return h;
}
#endif

void sim_round_16bit(prec_t p, size_t count, const float *x, float *y)
{
    if (p == PREC_FP16) {
#if defined(__x86_64__)
        if (has_f16c()) {
            round_fp16_f16c(count, x, y);
            return;
        }
#endif
        for (size_t i = 0; i < count; i++)
            y[i] = round_fp16(x[i]);
        return;
    }
    for (size_t i = 0; i < count; i++)
        y[i] = round_bf16(x[i]);
}

/* ---- the blocked operations' host scratch (sim.h: sim_scratch) ---- */

float *sim_scratch_grow(sim_scratch *sc, int which, size_t floats)
{
    if (floats > sc->floats[which]) {
        float *p = realloc(sc->buf[which], floats * sizeof(float));
        if (p == NULL)
            return NULL;
        sc->buf[which] = p;
        sc->floats[which] = floats;
    }
    return sc->buf[which];
}

float *sim_scratch_take(backend_t *be, int which, size_t floats)
{
    float *p = sim_scratch_grow(sim_scratch_of(be), which, floats);
    if (p == NULL)
        sim_fail(be, "out of host memory for a blocked operation's scratch");
    return p;
}

void sim_scratch_free(sim_scratch *sc)
{
    for (int i = 0; i < SIM_SCRATCH_N; i++)
        free(sc->buf[i]);
    memset(sc, 0, sizeof(*sc));
}
