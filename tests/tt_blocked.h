/* tt_blocked.h - the CPU backend's blocked layout (backend.h) in the tests'
 * own words, for the tests of the operations over it in float32
 * (test_cpu_ops.c) and in bf16 (test_bf16.c). */
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

#endif
