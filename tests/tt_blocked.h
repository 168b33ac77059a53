/* tt_blocked.h - the CPU backend's blocked layout (backend.h) in the tests'
 * own words, for the tests of the operations over it in float32
 * (test_cpu_ops.c), in bf16 (test_bf16.c) and at each kernel level
 * (test_cpu_isa_kernels.c), and their run of blocked batchnorm. */
#ifndef TT_BLOCKED_H
#define TT_BLOCKED_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tt_ref.h"

/* Where element (i, ch, p) of an [n, c, hw] batch (c % 16 == 0) sits in
 * the blocked layout, written out here rather than taken from backend.h:
 * nChw16c, or plain NHWC. */
static inline size_t blocked_at(int i, int ch, int p, int c, int hw, bool nhwc)
{
    if (nhwc)
        return ((size_t)i * hw + p) * c + ch;
    return (((size_t)i * (c / 16) + ch / 16) * hw + p) * 16 + ch % 16;
}

/* NCHW [n, c, hw] to the blocked layout (nhwc: its NHWC order) and back. */
static inline void to_blocked(const float *x, int n, int c, int hw, bool nhwc, float *b)
{
    for (int i = 0; i < n; i++)
        for (int ch = 0; ch < c; ch++)
            for (int p = 0; p < hw; p++)
                b[blocked_at(i, ch, p, c, hw, nhwc)] = x[((size_t)i * c + ch) * hw + p];
}

static inline void from_blocked(const float *b, int n, int c, int hw, bool nhwc, float *x)
{
    for (int i = 0; i < n; i++)
        for (int ch = 0; ch < c; ch++)
            for (int p = 0; p < hw; p++)
                x[((size_t)i * c + ch) * hw + p] = b[blocked_at(i, ch, p, c, hw, nhwc)];
}

typedef struct {
    float *y, *mean, *invstd, *rmean, *rvar, *dx, *dgamma, *dbeta;
} bn_out;

static inline bn_out bn_out_make(size_t count, int c)
{
    bn_out o = {malloc(count * 4), malloc(c * 4), malloc(c * 4), malloc(c * 4), malloc(c * 4),
                malloc(count * 4), malloc(c * 4), malloc(c * 4)};
    for (int i = 0; i < c; i++) {
        o.rmean[i] = 0.1f * (float)i;
        o.rvar[i] = 1.0f + 0.01f * (float)i;
    }
    return o;
}

static inline void bn_out_free(bn_out *o)
{
    free(o->y), free(o->mean), free(o->invstd), free(o->rmean), free(o->rvar), free(o->dx);
    free(o->dgamma), free(o->dbeta);
}

/* NCHW floats (bf16-exact) to a blocked bf16 tensor, blocked_at's order */
static inline void to_blocked16(const float *x, int n, int c, int hw, bool nhwc, uint16_t *b)
{
    for (int i = 0; i < n; i++)
        for (int ch = 0; ch < c; ch++)
            for (int p = 0; p < hw; p++)
                b[blocked_at(i, ch, p, c, hw, nhwc)] =
                    tt_bf16_round(x[((size_t)i * c + ch) * hw + p]);
}

/* A blocked tensor of 4-byte elements (float or int32) to NCHW order */
static inline void from_blocked32(const void *b, int n, int c, int hw, bool nhwc, void *x)
{
    for (int i = 0; i < n; i++)
        for (int ch = 0; ch < c; ch++)
            for (int p = 0; p < hw; p++)
                memcpy((char *)x + (((size_t)i * c + ch) * hw + p) * 4,
                       (const char *)b + blocked_at(i, ch, p, c, hw, nhwc) * 4, 4);
}

/* The batchnorm tests' inputs: x in [-2, 3], dy in [-1, 1] (count each),
 * gamma in [0.5, 1.5], beta in [-0.5, 0.5] (c each). */
static inline void bn_inputs_fill(tt_rng *rng, size_t count, int c, float *x, float *dy,
                                  float *gamma, float *beta)
{
    tt_fill(rng, x, count, -2.0, 3.0);
    tt_fill(rng, dy, count, -1.0, 1.0);
    tt_fill(rng, gamma, c, 0.5, 1.5);
    tt_fill(rng, beta, c, -0.5, 0.5);
}

/* One training forward (relu) and backward of blocked batchnorm on be, x
 * (NCHW) in nChw16c or NHWC order (nhwc), float32 or bf16 activations
 * (bf16: x, y rounded to bf16; the backend's blocked_bf16); y and dx back
 * in NCHW floats. */
static inline void bn_run_blocked(backend_t *be, bool nhwc, bool bf16, int n, int c, int hw,
                                  const float *x, const float *gamma, const float *beta,
                                  const float *dy, bn_out *o)
{
    size_t count = (size_t)n * c * hw;
    bool saved_nhwc = be->blocked_nhwc, saved_bf16 = be->blocked_bf16;
    be->blocked_nhwc = nhwc;
    be->blocked_bf16 = bf16;
    void *bx = malloc(count * 4), *by = malloc(count * 4);
    float *bg = malloc(count * 4), *bdx = malloc(count * 4);
    if (bf16)
        to_blocked16(x, n, c, hw, nhwc, bx);
    else
        to_blocked(x, n, c, hw, nhwc, bx);
    to_blocked(dy, n, c, hw, nhwc, bg);
    be->batchnorm_forward_blocked(be, n, c, hw, bx, gamma, beta, o->rmean, o->rvar, 0.1f, 1e-5f,
                                  true, true, by, o->mean, o->invstd);
    be->batchnorm_backward_blocked(be, n, c, hw, bx, gamma, o->mean, o->invstd, by, true, bg, bdx,
                                   o->dgamma, o->dbeta);
    if (bf16) {
        const uint16_t *h = by;
        for (int i = 0; i < n; i++)
            for (int ch = 0; ch < c; ch++)
                for (int p = 0; p < hw; p++)
                    o->y[((size_t)i * c + ch) * hw + p] =
                        tt_bf16_widen(h[blocked_at(i, ch, p, c, hw, nhwc)]);
    } else {
        from_blocked(by, n, c, hw, nhwc, o->y);
    }
    from_blocked(bdx, n, c, hw, nhwc, o->dx);
    be->blocked_nhwc = saved_nhwc;
    be->blocked_bf16 = saved_bf16;
    free(bx), free(by), free(bg), free(bdx);
}

#endif
