/* sim_grad16.c - the simulated GPU's bf16 activation gradients
 * (backend.h: blocked_bf16_grads; precision.h's rule): where a sim backend
 * in bf16 keeps an activation in bf16 NHWC, it keeps that activation's
 * gradient in bf16 NHWC too, as a GPU under torch.autocast does, so the
 * gradient buffers take half the device memory and no operation converts
 * a float32 dy.
 *
 * The arithmetic stays the CPU backend's, as everywhere on sim: each
 * backward operation below widens its bf16 gradient input (dy) to float32
 * host scratch, runs the inner CPU backend's operation on it (which knows
 * float32 gradients only), and stores its gradient output (dx) rounded to
 * bf16, to nearest even, as a GPU kernel's __float2bfloat16_rn store does.
 * So a sim tower with bf16 gradients differs from one without exactly by
 * those roundings (tests/test_sim_grad16.c). The scratch is host memory
 * of the simulation, not counted by the device pool (sim_blocked.c says
 * why). conv2d's backward does the same in sim_blocked.c; add_blocked,
 * which the model calls to sum two readers' bf16 gradients, is the
 * activations' own (bf16 in, float32 sum, bf16 out).
 */
#include <stdint.h>

#include "backend/cpu/bf16_io.h"
#include "backend/sim/sim.h"

/* Scratch slots (sim_scratch_take) of the widened dy and the float32 dx;
 * the blocked convolutions use 0..3 */
enum { GRAD_DY = 4, GRAD_DX = 5 };

void sim_grad16_widen(size_t count, const void *g, float *f)
{
    const uint16_t *h = g;
    for (size_t i = 0; i < count; i++)
        f[i] = bf16_to_float(h[i]);
}

void sim_grad16_narrow(size_t count, const float *f, void *g)
{
    uint16_t *h = g;
    for (size_t i = 0; i < count; i++)
        h[i] = bf16_from_float(f[i]);
}

/* dy widened into slot GRAD_DY (NULL: out of host memory, sim_fail said so) */
static float *widened(backend_t *be, size_t count, const float *dy)
{
    float *f = sim_scratch_take(be, GRAD_DY, count);
    if (f != NULL)
        sim_grad16_widen(count, dy, f);
    return f;
}

/* ---- relu backward: dx = y > 0 ? dy : 0 over bf16 gradients ---- */

typedef struct {
    size_t count;
    const float *y, *dy;
    float *dx;
} q_relu_bwd;

static void q_relu_bwd_run(backend_t *be, void *p)
{
    q_relu_bwd *a = p;
    backend_t *cpu = sim_cpu(be);
    float *g = widened(be, a->count, a->dy);
    if (g == NULL)
        return;
    cpu->relu_backward_blocked(cpu, a->count, a->y, g, g);
    sim_grad16_narrow(a->count, g, a->dx);
}

static void sim_relu_bwd16(backend_t *be, size_t count, const float *y, const float *dy,
                           float *dx)
{
    q_relu_bwd q = {count, y, dy, dx};
    sim_enqueue(be, q_relu_bwd_run, &q, sizeof(q));
}

/* ---- batchnorm backward: dy and dx bf16; dgamma, dbeta float32 ---- */

typedef struct {
    int n, c, hw;
    const float *x, *gamma, *save_mean, *save_invstd, *y;
    bool relu;
    float *dy, *dx, *dgamma, *dbeta;
} q_bn_bwd16;

static void q_bn_bwd16_run(backend_t *be, void *p)
{
    q_bn_bwd16 *a = p;
    backend_t *cpu = sim_cpu(be);
    size_t count = tt_blocked_floats(a->n, a->c, a->hw);
    float *g = widened(be, count, a->dy);
    float *dx = a->dx != NULL ? sim_scratch_take(be, GRAD_DX, count) : NULL;
    if (g == NULL || (a->dx != NULL && dx == NULL))
        return;
    cpu->batchnorm_backward_blocked(cpu, a->n, a->c, a->hw, a->x, a->gamma, a->save_mean,
                                    a->save_invstd, a->y, a->relu, g, dx, a->dgamma, a->dbeta);
    if (dx != NULL)
        sim_grad16_narrow(count, dx, a->dx);
}

static void sim_bn_bwd16(backend_t *be, int n, int c, int hw, const float *x,
                         const float *gamma, const float *save_mean, const float *save_invstd,
                         const float *y, bool relu, float *dy, float *dx, float *dgamma,
                         float *dbeta)
{
    q_bn_bwd16 q = {n, c, hw, x, gamma, save_mean, save_invstd, y, relu, dy, dx, dgamma, dbeta};
    sim_enqueue(be, q_bn_bwd16_run, &q, sizeof(q));
}

/* ---- global average pooling backward: dy [n, c] float32, dx bf16 ---- */

typedef struct {
    int n, c, hw;
    const float *dy;
    float *dx;
} q_gap_bwd16;

static void q_gap_bwd16_run(backend_t *be, void *p)
{
    q_gap_bwd16 *a = p;
    backend_t *cpu = sim_cpu(be);
    size_t count = tt_blocked_floats(a->n, a->c, a->hw);
    float *dx = sim_scratch_take(be, GRAD_DX, count);
    if (dx == NULL)
        return;
    cpu->global_avgpool_blocked_backward(cpu, a->n, a->c, a->hw, a->dy, dx);
    sim_grad16_narrow(count, dx, a->dx);
}

static void sim_gap_bwd16(backend_t *be, int n, int c, int hw, const float *dy, float *dx)
{
    q_gap_bwd16 q = {n, c, hw, dy, dx};
    sim_enqueue(be, q_gap_bwd16_run, &q, sizeof(q));
}

/* ---- pools' backward: dy bf16 where d.blocked_y, dx where d.blocked_x ---- */

typedef struct {
    window_desc d;
    bool max;
    const float *dy;
    const int32_t *mask;
    float *dx;
} q_pool_bwd16;

static void q_pool_bwd16_run(backend_t *be, void *p)
{
    q_pool_bwd16 *a = p;
    backend_t *cpu = sim_cpu(be);
    const window_desc *d = &a->d;
    size_t ny = tt_blocked_floats(d->n, d->c, d->oh * d->ow);
    size_t nx = tt_blocked_floats(d->n, d->c, d->h * d->w);
    const float *dy = d->blocked_y ? widened(be, ny, a->dy) : a->dy;
    float *dx = d->blocked_x ? sim_scratch_take(be, GRAD_DX, nx) : a->dx;
    if (dy == NULL || dx == NULL)
        return;
    if (a->max)
        cpu->maxpool_backward(cpu, d, dy, a->mask, dx);
    else
        cpu->avgpool_backward(cpu, d, dy, dx);
    if (d->blocked_x)
        sim_grad16_narrow(nx, dx, a->dx);
}

static void sim_maxpool_bwd16(backend_t *be, const window_desc *d, const float *dy,
                              const int32_t *mask, float *dx)
{
    q_pool_bwd16 q = {*d, true, dy, mask, dx};
    sim_enqueue(be, q_pool_bwd16_run, &q, sizeof(q));
}

static void sim_avgpool_bwd16(backend_t *be, const window_desc *d, const float *dy, float *dx)
{
    q_pool_bwd16 q = {*d, false, dy, NULL, dx};
    sim_enqueue(be, q_pool_bwd16_run, &q, sizeof(q));
}

void sim_install_grad16(backend_t *be)
{
    be->blocked_bf16_grads = true;
    be->relu_backward_blocked = sim_relu_bwd16;
    be->batchnorm_backward_blocked = sim_bn_bwd16;
    be->global_avgpool_blocked_backward = sim_gap_bwd16;
    be->maxpool_backward = sim_maxpool_bwd16;
    be->avgpool_backward = sim_avgpool_bwd16;
}
