/* cuda_bn_nhwc.c - the CUDA backend's batchnorm over the blocked layout in
 * NHWC order (blocked_nhwc, C % 16 == 0: plain NHWC), float32 or bf16
 * activations (blocked_bf16), with kernels of our own (cuda_bn_nhwc.cu)
 * instead of cuDNN's NCHW batchnorm (cuda_batchnorm.c), and the residual
 * add and relu fused in (backend.h, batchnorm_add_*_blocked).
 *
 * Deterministic: every sum runs in an order that the shape alone fixes
 * (tt_bn_nhwc_plan), so a job gives the same bits run after run. The
 * arithmetic follows the CPU backend's (cpu/batchnorm.c): two-pass-exact
 * statistics (Welford, merged in double), y = x * scale + shift, and
 * dx = A dy + B x + C; sums in another order, so results agree with the
 * CPU's within rounding, not bit for bit.
 *
 * Forward: statistics (training), coefficients, the apply pass. Backward:
 * the sums (with the relu mask recomputed from y and the add's gradient
 * written to r on the way), coefficients, the dx pass. Five or six launches
 * where cuDNN's path took three to five passes plus the add's copy.
 *
 * The conv bias gradient (cuda_channel_sum, for cuda_conv.c, NHWC or NCHW)
 * sums its channels on the same kind of split, in the same scratch.
 */
#include "backend/cuda/cuda_bn_nhwc.h"

#include <limits.h>

#include "backend/cuda/cuda_impl.h"

/* The conv bias gradient (cuda_impl.h). The scratch is free here: each
 * batchnorm call below uses it only between its own launches, on the same
 * stream, and nothing keeps it across calls. */
int cuda_channel_sum(cuda_impl *c, bool g16, int n, int ch, int inner, const void *dy,
                     float *db)
{
    tt_colsum_grid k = tt_colsum_plan(n, ch, inner);
    if (k.g.g == 0 && n > 0 && ch > 0 && inner > 0) { /* n * inner past an int */
        c->failed = true;
        return err_set(&c->err, TT_ERR_RUNTIME,
                       "cuda:%d: conv bias gradient of %d x %d elements a channel (at most %d)",
                       c->device, n, inner, INT_MAX);
    }
    return cuda_ok(c, tt_k_channel_sum(c->stream, g16, k, dy, c->bn_scratch, db),
                   "conv bias gradient kernel");
}

int cuda_bn_nhwc_setup(cuda_impl *c, tt_err *err)
{
    tt_err pool_err = {0};
    c->bn_scratch = mem_pool_alloc(c->pool, TT_BN_SCRATCH_FLOATS * sizeof(float), &pool_err);
    if (c->bn_scratch == NULL)
        return err_set(err, TT_ERR_USAGE, "cuda:%d: %s", c->device, pool_err.msg);
    return 0;
}

/* The split of this call and its scratch: k, the coefficients, then
 * part, the partial sums. g.g == 0 where there is nothing to run (no
 * rows, or the stream has failed) or it cannot run (recorded why). */
static tt_bn_grid plan_call(backend_t *be, int n, int ch, int hw, float **k, float **part)
{
    cuda_impl *c = cuda_of(be);
    tt_bn_grid g = {0};
    if (n <= 0 || !cuda_begin(be))
        return g;
    g = tt_bn_nhwc_plan(n * hw, ch);
    if (!be->blocked_nhwc || ch % TT_BLOCK != 0 || g.g == 0) {
        c->failed = true;
        err_set(&c->err, TT_ERR_RUNTIME,
                "cuda:%d: NHWC batchnorm of %d channels (must be NHWC, a multiple of 16 "
                "and at most %d)",
                c->device, ch, TT_BN_MAX_CHANNELS);
        g.g = 0;
    }
    *k = c->bn_scratch;
    *part = *k + (size_t)TT_BN_COEFS * ch;
    return g;
}

/* The forward with or without the add (r NULL). */
static void bn_forward(backend_t *be, int n, int ch, int hw, const float *x, const float *gamma,
                       const float *beta, float *running_mean, float *running_var,
                       float momentum, float eps, bool training, const float *r, bool relu,
                       float *y, float *save_mean, float *save_invstd)
{
    cuda_impl *c = cuda_of(be);
    float *k, *part;
    tt_bn_grid g = plan_call(be, n, ch, hw, &k, &part);
    if (g.g == 0)
        return;
    if (training &&
        cuda_ok(c, tt_k_bn_nhwc_stats(c->stream, be->blocked_bf16, g, x, part),
                "batchnorm statistics kernel"))
        return;
    if (cuda_ok(c,
                tt_k_bn_nhwc_stats_finish(c->stream, g, part, gamma, beta, running_mean,
                                          running_var, momentum, eps, training, save_mean,
                                          save_invstd, k),
                "batchnorm coefficients kernel"))
        return;
    cuda_ok(c, tt_k_bn_nhwc_apply(c->stream, be->blocked_bf16, g, x, r, k, relu, y),
            "batchnorm apply kernel");
}

/* The backward with or without the add's gradient dr. */
static void bn_backward(backend_t *be, int n, int ch, int hw, const float *x, const float *gamma,
                        const float *save_mean, const float *save_invstd, const float *y,
                        bool relu, const float *dy, float *dx, float *dgamma, float *dbeta,
                        float *dr, bool dr_add)
{
    cuda_impl *c = cuda_of(be);
    float *k, *part;
    tt_bn_grid g = plan_call(be, n, ch, hw, &k, &part);
    if (g.g == 0)
        return;
    bool bf16 = be->blocked_bf16, g16 = be->blocked_bf16_grads;
    if (cuda_ok(c,
                tt_k_bn_nhwc_grad_sums(c->stream, bf16, g16, g, x, y, dy, save_mean, relu, dr,
                                       dr_add, part),
                "batchnorm gradient sums kernel") ||
        cuda_ok(c,
                tt_k_bn_nhwc_grad_finish(c->stream, g, part, gamma, save_mean, save_invstd,
                                         dgamma, dbeta, k),
                "batchnorm gradient coefficients kernel"))
        return;
    if (dx != NULL)
        cuda_ok(c, tt_k_bn_nhwc_dx(c->stream, bf16, g16, g, x, y, dy, k, relu, dx),
                "batchnorm dx kernel");
}

void cuda_batchnorm_forward_blocked(backend_t *be, int n, int c, int hw, const float *x,
                                    const float *gamma, const float *beta, float *running_mean,
                                    float *running_var, float momentum, float eps, bool training,
                                    bool relu, float *y, float *save_mean, float *save_invstd)
{
    bn_forward(be, n, c, hw, x, gamma, beta, running_mean, running_var, momentum, eps, training,
               NULL, relu, y, save_mean, save_invstd);
}

void cuda_batchnorm_backward_blocked(backend_t *be, int n, int c, int hw, const float *x,
                                     const float *gamma, const float *save_mean,
                                     const float *save_invstd, const float *y, bool relu,
                                     float *dy, float *dx, float *dgamma, float *dbeta)
{
    bn_backward(be, n, c, hw, x, gamma, save_mean, save_invstd, y, relu, dy, dx, dgamma, dbeta,
                NULL, false);
}

void cuda_batchnorm_add_forward_blocked(backend_t *be, int n, int c, int hw, const float *x,
                                        const float *gamma, const float *beta,
                                        float *running_mean, float *running_var, float momentum,
                                        float eps, bool training, const float *r, bool relu,
                                        float *y, float *save_mean, float *save_invstd)
{
    bn_forward(be, n, c, hw, x, gamma, beta, running_mean, running_var, momentum, eps, training,
               r, relu, y, save_mean, save_invstd);
}

void cuda_batchnorm_add_backward_blocked(backend_t *be, int n, int c, int hw, const float *x,
                                         const float *gamma, const float *save_mean,
                                         const float *save_invstd, const float *y, bool relu,
                                         float *dy, float *dx, float *dgamma, float *dbeta,
                                         float *dr, bool dr_accumulate)
{
    bn_backward(be, n, c, hw, x, gamma, save_mean, save_invstd, y, relu, dy, dx, dgamma, dbeta,
                dr, dr_accumulate);
}
