/* precision.c - the precision table, the device layouts and the layout of
 * the convolutions' and dense products' copies (precision.h). */
#include "backend/precision.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/mem_pool.h"
#include "util/env.h"

static const char *const names[] = {"fp32", "bf16", "fp16"};

int prec_parse(const char *name, prec_t *p)
{
    for (int i = 0; i < 3; i++)
        if (name != NULL && strcmp(name, names[i]) == 0) {
            *p = (prec_t)i;
            return 0;
        }
    return -1;
}

const char *prec_name(prec_t p)
{
    return names[p];
}

/* Only the matrix products: their float32 accumulation keeps the sums
 * exact enough, while statistics, the loss and the update need float32's
 * range and mantissa (torch.autocast's lists make the same split). */
bool prec_reduced(prec_t p, prec_op op)
{
    return p != PREC_FP32 && (op == PREC_OP_DENSE || op == PREC_OP_CONV);
}

const char *prec_op_name(prec_op op)
{
    static const char *const ops[PREC_OP_COUNT] = {
        "dense", "conv2d", "batchnorm", "pooling", "element-wise", "softmax and loss",
        "all-reduce", "optimizer"};
    return ops[op];
}

size_t prec_elem_bytes(prec_t p)
{
    return p == PREC_FP32 ? 4 : 2;
}

int prec_min_capability(prec_t p)
{
    return p == PREC_BF16 ? 80 : p == PREC_FP16 ? 70 : 0;
}

int prec_check_device(prec_t p, int device, const char *gpu_name, int major, int minor,
                      tt_err *err)
{
    int need = prec_min_capability(p);
    if (major * 10 + minor >= need)
        return 0;
    return err_set(err, TT_ERR_USAGE,
                   "cuda:%d (%s): precision \"%s\" needs compute capability %d.%d or above "
                   "(%s tensor cores); this GPU has %d.%d",
                   device, gpu_name, prec_name(p), need / 10, need % 10, prec_name(p), major,
                   minor);
}

void prec_describe(prec_t p, char *buf, size_t len)
{
    char low[128] = "", high[256] = "";
    for (int op = 0; op < PREC_OP_COUNT; op++) {
        char *dst = prec_reduced(p, (prec_op)op) ? low : high;
        size_t size = dst == low ? sizeof(low) : sizeof(high), used = strlen(dst);
        snprintf(dst + used, size - used, "%s%s", used ? ", " : "", prec_op_name((prec_op)op));
    }
    if (low[0] == '\0')
        snprintf(buf, len, "everything in fp32");
    else
        snprintf(buf, len, "%s in %s (fp32 accumulation); %s in fp32", low, prec_name(p), high);
}

/* Whether a device in tf32 keeps float32 activations in NHWC: no GPU has
 * yet timed NHWC float convolutions (convbench's tf32 rows) or a tf32
 * tower in float32 NHWC (the kit's bench_nhwc, TT_CUDA_LAYOUT=nhwc against
 * NCHW), so NCHW, today's measured layout, stays until one does (one line
 * to change). */
#define PREC_TF32_NHWC false

static const char *const layouts[] = {"nchw", "nhwc"};
enum { LAYOUT_NCHW, LAYOUT_NHWC };

bool prec_bf16_grads_on(void)
{
    return env_bit("TT_BF16_GRADS") != 0;
}

int prec_check_env(tt_err *err)
{
    if (env_word("TT_CUDA_LAYOUT", layouts, 2) == ENV_OTHER)
        return err_set(err, TT_ERR_USAGE, "TT_CUDA_LAYOUT=%.40s: use nchw or nhwc (or unset it)",
                       getenv("TT_CUDA_LAYOUT"));
    if (env_bit("TT_BF16_GRADS") == ENV_OTHER)
        return err_set(err, TT_ERR_USAGE,
                       "TT_BF16_GRADS=%.40s: use 0 (float32 activation gradients) or 1 (bf16)",
                       getenv("TT_BF16_GRADS"));
    if (env_bit("TT_CUDNN_LEGACY") == ENV_OTHER)
        return err_set(err, TT_ERR_USAGE,
                       "TT_CUDNN_LEGACY=%.40s: use 1 (cuDNN's legacy API) or 0 (its graph API)",
                       getenv("TT_CUDNN_LEGACY"));
    return 0;
}

prec_layout prec_layout_of(prec_t p, bool tf32, bool fp32_nchw16c)
{
    prec_layout l = {false, false, false, false};
    if (p == PREC_BF16)
        l = (prec_layout){true, true, true, prec_bf16_grads_on()};
    else if (p == PREC_FP32 && tf32 && PREC_TF32_NHWC)
        l = (prec_layout){true, true, false, false};
    else if (p == PREC_FP32 && fp32_nchw16c)
        l = (prec_layout){true, false, false, false};
    return l;
}

prec_layout prec_device_layout(prec_t p, bool tf32)
{
    int e = env_word("TT_CUDA_LAYOUT", layouts, 2);
    if (e == LAYOUT_NCHW)
        return (prec_layout){false, false, false, false};
    if (e == LAYOUT_NHWC && p == PREC_FP32)
        return (prec_layout){true, true, false, false};
    return prec_layout_of(p, tf32, false);
}

/* Appends `count` elements of `elem` bytes at the next aligned offset. */
static size_t place(size_t *end, size_t count, size_t elem)
{
    size_t at = (*end + MEM_POOL_ALIGN - 1) / MEM_POOL_ALIGN * MEM_POOL_ALIGN;
    *end = at + count * elem;
    return at;
}

void prec_dense_copies_of(prec_t p, int n, int in, int out, prec_dense_copies *l)
{
    memset(l, 0, sizeof(*l));
    if (!prec_reduced(p, PREC_OP_DENSE) || n <= 0 || in <= 0 || out <= 0)
        return;
    size_t e = prec_elem_bytes(p), end = 0;
    l->x = place(&end, (size_t)n * (size_t)in, e);
    l->dy = place(&end, (size_t)n * (size_t)out, e);
    l->bytes_no_w = end;
    l->w = place(&end, (size_t)out * (size_t)in, e);
    l->bytes = end;
}

void prec_conv_copies_of(prec_t p, const window_desc *d, bool g16, prec_conv_copies *l)
{
    memset(l, 0, sizeof(*l));
    bool nhwc = d->blocked_x || d->blocked_y;
    if ((!prec_reduced(p, PREC_OP_CONV) && !nhwc) || d->n <= 0)
        return;
    /* a blocked side whose gradient has the convolution's type (bf16
     * gradients, or float32 NHWC) is read and written in place */
    bool in_place = g16 || p == PREC_FP32;
    size_t e = prec_elem_bytes(p), end = 0;
    size_t xs = (size_t)d->n * d->c * d->h * d->w, ws = (size_t)d->f * d->c * d->k * d->k;
    size_t ys = (size_t)d->n * d->f * d->oh * d->ow;
    l->x = place(&end, d->blocked_x && in_place ? 0 : xs, e);
    l->y = place(&end, d->blocked_y && in_place ? 0 : ys, e);
    l->dw = place(&end, ws, e);
    l->bytes_no_w = end;
    l->w = place(&end, ws, e);
    l->bytes = end;
}

bool prec_weight_copies(prec_t p, bool nhwc)
{
    return p != PREC_FP32 || nhwc;
}
