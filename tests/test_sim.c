/* test_sim.c - the simulated GPU (src/backend/sim/) itself, against values
 * worked out by hand: 16-bit storage rounded as a GPU stores it (fp16 to
 * nearest even, past 65504 to Inf; bf16 to nearest even), the queue running
 * operations in the order they were queued while the host goes on, device
 * memory's guard bytes, and the 16-bit scratch a call may not outgrow. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/precision.h"
#include "backend/sim/sim.h"
#include "tt_test.h"

/* y = x * 1 through the backend's dense call (one row, one input, one
 * output): the 16-bit rounding of x, widened back. */
static float dense_round(const char *precision, float x)
{
    tt_err err = {0};
    backend_t *be = backend_sim_create(0, precision, &err);
    if (be == NULL) {
        tt_diag("%s", err.msg);
        return NAN;
    }
    prec_t p;
    prec_parse(precision, &p);
    prec_dense_copies l;
    prec_dense_copies_of(p, 1, 1, 1, &l);
    float one = 1.0f, y = 0.0f;
    float *dx = be->alloc(be, 4), *dw = be->alloc(be, 4), *dy = be->alloc(be, 4);
    if (be->dev->reserve_copies(be, l.bytes, &err) != 0)
        tt_diag("%s", err.msg);
    be->upload(be, dx, &x, 4);
    be->upload(be, dw, &one, 4);
    be->dense_forward(be, 1, 1, 1, dx, dw, NULL, false, dy);
    be->download(be, &y, dy, 4);
    be->destroy(be);
    return y;
}

/* sim_round_16bit in fp16 (8 at a time with F16C where the CPU has it)
 * against the compiler's own conversion, one element at a time: the same
 * bits for every float in a sweep of exponents and mantissas, both signs,
 * the subnormal, overflow and tie cases, Inf and NaN (any NaN for a NaN). */
static void check_fp16_vector_rounding(void)
{
    enum { N = 1 << 20 };
    float *x = malloc(N * sizeof(float)), *y = malloc(N * sizeof(float));
    if (x == NULL || y == NULL) {
        tt_ok(false, "fp16 rounding sweep: out of memory");
        free(x);
        free(y);
        return;
    }
    uint64_t r = 0x9e3779b97f4a7c15u;
    for (size_t i = 0; i < N; i++) {
        r = r * 6364136223846793005u + 1442695040888963407u;
        uint32_t u = (uint32_t)(r >> 32);
        /* most of them near fp16's range: exponents 2^-27 .. 2^17 */
        if (i % 4 != 0)
            u = (u & 0x807fffffu) | ((uint32_t)(100 + (r >> 8) % 45) << 23);
        memcpy(&x[i], &u, sizeof(u));
    }
    const float edge[] = {0.0f, -0.0f, 65504.0f, 65519.0f, 65520.0f, -65520.0f, 0x1p-24f,
                          0x1p-25f, 0x1.8p-25f, 0x1p-14f, 0x1.ffcp-15f, 1.0f + 0x1p-11f,
                          1.0f + 0x1.8p-11f, INFINITY, -INFINITY, NAN};
    memcpy(x + 3, edge, sizeof(edge)); /* also through the scalar tail: */
    memcpy(x + N - 5, edge, 5 * sizeof(float));
    sim_round_16bit(PREC_FP16, N, x, y);
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < N; i++) {
        float ref = (float)(_Float16)x[i];
        bool same = isnan(ref) ? isnan(y[i]) : memcmp(&ref, &y[i], sizeof(float)) == 0;
        if (!same && bad++ == 0)
            first = i;
    }
    tt_ok(bad == 0, "fp16 rounding of %d floats: the compiler's conversion's bits (%zu differ%s)",
          N, bad, bad ? ", see diag" : "");
    if (bad)
        tt_diag("first: x = %a, got %a, expected %a", x[first], y[first],
                (float)(_Float16)x[first]);
    free(x);
    free(y);
}

int main(void)
{
    check_fp16_vector_rounding();
    /* fp16: 11 significant bits; 65504 is the largest finite, and 65520
     * (half-way to 65536) rounds to even, which is Inf */
    tt_ok(dense_round("fp16", 1.0f / 3.0f) == 0.333251953125f,
          "fp16 stores 1/3 as 0.333251953125 (nearest even of 11 bits)");
    tt_ok(dense_round("fp16", 65519.0f) == 65504.0f, "fp16 stores 65519 as 65504");
    tt_ok(isinf(dense_round("fp16", 65520.0f)), "fp16 overflows to Inf from 65520");
    tt_ok(dense_round("fp16", 2.9e-8f) == 0.0f && dense_round("fp16", 3.1e-8f) == 0x1p-24f,
          "fp16 rounds 2.9e-8 to 0 and 3.1e-8 to 2^-24, its least subnormal (half of it: 2.98e-8)");
    /* bf16: 8 significant bits */
    tt_ok(dense_round("bf16", 1.0f / 3.0f) == 0.333984375f,
          "bf16 stores 1/3 as 0.333984375 (nearest even of 8 bits)");
    tt_ok(dense_round("bf16", 1.00390625f) == 1.0f, "bf16 rounds a tie (1 + 2^-8) to even (1)");
    tt_ok(dense_round("fp32", 1.0f / 3.0f) == 1.0f / 3.0f, "fp32 keeps 1/3");

    tt_err err = {0};
    backend_t *be = backend_sim_create(1, "fp32", &err);
    if (!tt_ok(be != NULL && be->dev != NULL && !be->host_memory,
               "a sim backend has a device side and memory of its own"))
        return tt_done();

    /* the queue: an upload, a scale and an axpy run in order; the download
     * waits for them */
    float host[1000], back[1000];
    for (int i = 0; i < 1000; i++)
        host[i] = (float)i;
    float *d = be->alloc(be, sizeof(host));
    for (int round = 0; round < 20; round++) {
        be->upload(be, d, host, sizeof(host));
        be->scale(be, 1000, 2.0f, d);
        be->axpy(be, 1000, 1.0f, d, d);
    }
    be->download(be, back, d, sizeof(back));
    bool in_order = true;
    for (int i = 0; i < 1000; i++)
        in_order = in_order && back[i] == 4.0f * (float)i;
    tt_ok(in_order, "queued upload, scale and axpy run in order before the download returns");

    size_t reserved, in_use, peak;
    be->dev->memory(be, &reserved, &in_use, &peak);
    tt_ok(in_use >= sizeof(host) && peak >= in_use,
          "the pool counts the allocation (%zu bytes in use)", in_use);

    /* a write past the end: the guard bytes say so at the next sync */
    tt_ok(be->dev->sync(be, &err) == 0, "sync: no error before the overrun");
    float *small = be->alloc(be, 64);
    be->upload(be, small, host, 68);
    tt_ok(be->dev->sync(be, &err) != 0 && strstr(err.msg, "past the end") != NULL,
          "a write past a 64-byte allocation is reported at sync (%s)", err.msg);
    be->free(be, small);
    be->free(be, d);
    be->destroy(be);

    /* a 16-bit call larger than the scratch setup reserved: an error */
    err = (tt_err){0};
    be = backend_sim_create(2, "bf16", &err);
    float *x = be->alloc(be, 64 * sizeof(float)), *y = be->alloc(be, 64 * sizeof(float));
    be->dev->reserve_copies(be, 64, &err);
    be->dense_forward(be, 8, 8, 8, x, x, NULL, false, y);
    tt_ok(be->dev->sync(be, &err) != 0 && strstr(err.msg, "bf16 copies need") != NULL,
          "a bf16 call past the reserved scratch fails (%s)", err.msg);
    be->destroy(be);

    /* float32 NHWC (TT_CUDA_LAYOUT=nhwc): a conv with a blocked side needs
     * its float32 copies (dw's KRSC place at least) reserved, as on CUDA;
     * an NCHW fp32 conv none */
    err = (tt_err){0};
    setenv("TT_CUDA_LAYOUT", "nhwc", 1);
    be = backend_sim_create(3, "fp32", &err);
    unsetenv("TT_CUDA_LAYOUT");
    window_desc cd = {1, 2, 4, 4, 2, 3, 1, 1, 4, 4, false, false};
    x = be->alloc(be, 64 * sizeof(float));
    y = be->alloc(be, 64 * sizeof(float));
    size_t wsb = be->conv_workspace(be, &cd);
    void *ws = wsb > 0 ? be->alloc(be, wsb) : NULL;
    be->conv_forward(be, &cd, x, x, NULL, false, y, ws);
    tt_ok(be->dev->sync(be, &err) == 0, "fp32 NHWC sim: an NCHW conv needs no copies %s",
          err.msg);
    cd.blocked_y = true;
    be->conv_forward(be, &cd, x, x, NULL, false, y, ws);
    tt_ok(be->dev->sync(be, &err) != 0 && strstr(err.msg, "fp32 copies need") != NULL,
          "fp32 NHWC sim: a conv into the blocked layout past the reserved scratch fails (%s)",
          err.msg);
    be->destroy(be);
    return tt_done();
}
