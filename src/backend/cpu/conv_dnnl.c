/* conv_dnnl.c - 2-D convolution through oneDNN's convolution primitives.
 *
 * Why: on our shapes (ResNet-20: 16-64 channels, 8-32 pixels square) oneDNN's
 * direct JIT kernels on its blocked layouts (nChw16c and friends) run 3-7x
 * faster than im2col + sgemm (conv.c), measured in bench/sgemm's neighbour
 * /tmp experiments and in bench/compare_pytorch. (Below 16 input channels,
 * as in LeNet, they are the slower ones: cpu_backend.c sends those shapes to
 * conv_small.c.) The rest of towertrain keeps
 * plain NCHW, so every call reorders at its boundary: x and dy into the
 * kernel's layout, y and dx back. Those reorders are one pass over the tensor
 * each, small beside the convolution.
 *
 * Threads: as everywhere in the CPU backend, our one thread pool splits the
 * work and oneDNN runs single-threaded inside a task (no second pool spinning
 * against ours). The batch is cut into CONV_GROUPS fixed groups whatever the
 * thread count; each group runs forward, backward-data and backward-weights on
 * its images, and the groups' weight gradients are summed in group order. So
 * the bits do not depend on the number of threads, as with conv.c.
 *
 * At AVX2 the 3x3, stride-1 shapes of conv_wino.c's rule run its Winograd
 * kernels instead, in the same groups (group_wino and the weight gradient
 * in group_backward), and at AVX-512 those of cpu_conv_dnnl_winograd's
 * rule oneDNN's Winograd primitives.
 *
 * Primitives are built once per shape (layer shape x images per group) and
 * cached per backend instance; a step only sets data handles and executes.
 * Scratchpads are ours (user mode), one per group, so a primitive may run on
 * any pool thread. Shapes oneDNN cannot do fall back to conv.c.
 *
 * Workspace per group: the blocked src, dst/ddst, a second ddst when the two
 * backward kernels want different layouts, dsrc, weights, blocked diff
 * weights, and the plain partial dw and db the reduction reads.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <dnnl.h>

#include "backend/cpu/bf16_io.h"
#include "backend/cpu/cpu.h"
#include "backend/cpu/dnnl_util.h"
#include "backend/cpu/conv_dnnl.h"
#include "backend/cpu/conv_wino.h"
#include "backend/math.h"

#define CONV_GROUPS 4
#define ALIGN(b) (((b) + 63) & ~(size_t)63)

/* The blocked tensors of one group, in workspace order. */
enum { B_SRC, B_DST, B_DDST2, B_DSRC, B_WEI, B_DWEI, N_BUFS };

/* The primitives of one shape, by index. */
enum {
    P_FWD, P_BWD_DATA, P_BWD_WEIGHTS,
    /* reorders plain -> blocked (NULL when the layouts are equal) */
    P_R_SRC, P_R_WEI, P_R_DDST, P_R_DDST_BW, P_R_WEI_BD, P_R_SRC_BW,
    /* reorders blocked -> plain */
    P_R_DST, P_R_DSRC, P_R_DWEI,
    N_PRIMS
};

/* The memory objects a group binds to buffers; one role, one layout. */
enum {
    M_X, M_SRC_B, M_W, M_WEI_B, M_DST_B, M_Y, M_BIAS, M_DY, M_DDST_B, M_WEI_BD, M_DSRC_B, M_DX,
    M_SRC_BW, M_DDST_BW, M_DWEI_B, M_DW, M_DB,
    M_WF, /* the weights flipped and transposed (dual_forward), plain */
    M_SCRATCH, /* + primitive index */
    N_MEMS = M_SCRATCH + N_PRIMS
};

typedef struct {
    /* key */
    window_desc d; /* d.n = images per group */
    bool relu, bias;
    bool bf16;     /* the backend's precision (cpu_impl.bf16), not part of the key */
    bool nhwc;     /* its blocked layout in NHWC order (backend.h), the same */
    bool act_bf16; /* its blocked activations in bf16 (backend.h), the same */
    bool ok;       /* false: oneDNN has no kernel for it; use conv.c */
    bool dual;     /* the forward runs as a backward-data primitive (dual_forward) */
    bool wino;     /* the three are oneDNN's Winograd ones (cpu_conv_dnnl_winograd) */

    dnnl_primitive_t prim[N_PRIMS];
    /* the user's x, w, y, b and the gradients dx (dsrc_u), dy (ddst_u): the
     * activations' type, float32 for the rest */
    dnnl_memory_desc_t src_u, wei_u, dst_u, bias_md, dsrc_u, ddst_u, wei_flip_u;
    dnnl_memory_desc_t src_b, wei_b, dst_b, ddst_b, dsrc_b, wei_bd_b, src_bw_b, ddst_bw_b,
        dwei_b;
    dnnl_memory_desc_t scratch_md[N_PRIMS];
    const dnnl_memory_desc_t *md[N_MEMS]; /* the layout of each role */
    size_t buf_bytes[N_BUFS];
    size_t group_bytes; /* all buffers of one group, 64-byte aligned each */
    size_t scratch_bytes;
    void *scratch[CONV_GROUPS];            /* user scratchpads, owned */
    dnnl_memory_t mem[CONV_GROUPS][N_MEMS]; /* created on first use */
} conv_prim;

/* One backend instance's cache: primitives by shape, a stream per group. */
typedef struct {
    conv_prim **prims;
    int n_prims, cap;
    dnnl_stream_t streams[CONV_GROUPS];
} conv_dnnl;

static bool same_desc(const window_desc *a, const window_desc *b)
{
    return a->n == b->n && a->c == b->c && a->h == b->h && a->w == b->w && a->f == b->f &&
           a->k == b->k && a->stride == b->stride && a->pad == b->pad &&
           a->blocked_x == b->blocked_x && a->blocked_y == b->blocked_y;
}

/* The user's layout of the input or output: blocked (nChw16c, what the
 * float32 kernels compute in, or NHWC, what the bf16 AMX kernels compute
 * in) or NCHW. */
static dnnl_format_tag_t user_tag(bool blocked, bool nhwc)
{
    return !blocked ? dnnl_nchw : nhwc ? dnnl_acdb : dnnl_aBcd16b;
}

/* ---- building a conv_prim ---- */

static dnnl_primitive_attr_t user_scratchpad_attr(bool relu)
{
    dnnl_primitive_attr_t attr;
    if (dnnl_primitive_attr_create(&attr) != dnnl_success)
        return NULL;
    dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user);
    if (relu) {
        dnnl_post_ops_t po;
        if (dnnl_post_ops_create(&po) != dnnl_success) {
            dnnl_primitive_attr_destroy(attr);
            return NULL;
        }
        bool ok = dnnl_post_ops_append_eltwise(po, 1.0f, dnnl_eltwise_relu, 0.0f, 0.0f) ==
                      dnnl_success &&
                  dnnl_primitive_attr_set_post_ops(attr, po) == dnnl_success;
        dnnl_post_ops_destroy(po);
        if (!ok) {
            dnnl_primitive_attr_destroy(attr);
            return NULL;
        }
    }
    return attr;
}

/* Creates primitive i from pd, keeps its scratchpad layout, destroys pd. */
static bool prim_create(conv_prim *p, int i, dnnl_primitive_desc_t pd)
{
    p->scratch_md[i] = *dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
    size_t s = dnnl_memory_desc_get_size(&p->scratch_md[i]);
    if (s > p->scratch_bytes)
        p->scratch_bytes = s;
    bool ok = dnnl_primitive_create(&p->prim[i], pd) == dnnl_success;
    dnnl_primitive_desc_destroy(pd);
    return ok;
}

/* Reorder primitive i from one layout to another; none when they are equal. */
static bool reorder_create(conv_prim *p, int i, const dnnl_memory_desc_t *from,
                           const dnnl_memory_desc_t *to)
{
    if (dnnl_memory_desc_equal(from, to))
        return true;
    dnnl_primitive_attr_t attr = user_scratchpad_attr(false);
    dnnl_primitive_desc_t pd;
    bool ok = attr != NULL &&
              dnnl_reorder_primitive_desc_create(&pd, from, cpu_dnnl_engine(), to, cpu_dnnl_engine(), attr) ==
                  dnnl_success;
    if (attr != NULL)
        dnnl_primitive_attr_destroy(attr);
    return ok && prim_create(p, i, pd);
}

/* A convolution primitive descriptor: kind 0 forward, 1 backward data,
 * 2 backward weights (the backward ones hinted by the forward one). */
static dnnl_primitive_desc_t conv_pd(const conv_prim *p, int kind, dnnl_primitive_attr_t attr,
                                     const_dnnl_primitive_desc_t hint, bool fixed)
{
    const window_desc *d = &p->d;
    dnnl_dims_t src_dims = {d->n, d->c, d->h, d->w}, wei_dims = {d->f, d->c, d->k, d->k},
                dst_dims = {d->n, d->f, d->oh, d->ow};
    dnnl_dims_t strides = {d->stride, d->stride}, pad_l = {d->pad, d->pad};
    /* right padding such that the output size is PyTorch's floor division */
    dnnl_dims_t pad_r = {(d->oh - 1) * d->stride + d->k - d->h - d->pad,
                         (d->ow - 1) * d->stride + d->k - d->w - d->pad};
    /* precision bf16 (bf16.c): each kind reads bf16 (src, weights, diff_dst)
     * and writes float32 (diff_src, diff_weights); dst is bf16 where the
     * user's y is a bf16 activation, else float32. The reorders at the
     * boundary convert the rest. A blocked side whose type is the user's
     * is fixed to the user's layout, so the kernel reads or writes the
     * user's buffer in place; an NCHW side, and one converted anyway, lets
     * oneDNN pick. In bf16 the blocked layout is NHWC, the AMX kernels' own
     * (with nChw16c fixed the bf16 kernels were the AVX512_BF16 ones at
     * 2.7x the AMX ones' time; with it picked, every output was reordered
     * back to nChw16c: 296 of 1385 ms of oneDNN's time in a ResNet-20
     * epoch), and its activations bf16: x and y pass with no conversion. */
    dnnl_data_type_t in = p->bf16 ? dnnl_bf16 : dnnl_f32;
    dnnl_data_type_t src_type = kind == 1 ? dnnl_f32 : in;
    dnnl_data_type_t dst_type = kind != 0 ? in : p->dst_u.data_type;
    const dnnl_memory_desc_t *src_user = kind == 1 ? &p->dsrc_u : &p->src_u;
    const dnnl_memory_desc_t *dst_user = kind == 0 ? &p->dst_u : &p->ddst_u;
    dnnl_format_tag_t src_tag = fixed && d->blocked_x && src_type == src_user->data_type
                                    ? user_tag(true, p->nhwc) : dnnl_format_tag_any;
    dnnl_format_tag_t dst_tag = fixed && d->blocked_y && dst_type == dst_user->data_type
                                    ? user_tag(true, p->nhwc) : dnnl_format_tag_any;
    dnnl_memory_desc_t src, wei, dst;
    dnnl_memory_desc_init_by_tag(&src, 4, src_dims, src_type, src_tag);
    dnnl_memory_desc_init_by_tag(&wei, 4, wei_dims, kind == 2 ? dnnl_f32 : in,
                                 dnnl_format_tag_any);
    dnnl_memory_desc_init_by_tag(&dst, 4, dst_dims, dst_type, dst_tag);
    const dnnl_memory_desc_t *bias = p->bias ? &p->bias_md : NULL;
    dnnl_convolution_desc_t cd;
    dnnl_status_t st;
    dnnl_alg_kind_t alg = p->wino ? dnnl_convolution_winograd : dnnl_convolution_direct;
    if (kind == 0)
        st = dnnl_convolution_forward_desc_init(&cd, dnnl_forward_training, alg, &src, &wei,
                                                bias, &dst, strides, pad_l, pad_r);
    else if (kind == 1)
        st = dnnl_convolution_backward_data_desc_init(&cd, alg, &src, &wei, &dst, strides, pad_l,
                                                      pad_r);
    else
        st = dnnl_convolution_backward_weights_desc_init(&cd, alg, &src, &wei, bias, &dst,
                                                         strides, pad_l, pad_r);
    dnnl_primitive_desc_t pd;
    if (st != dnnl_success || dnnl_primitive_desc_create(&pd, &cd, attr, cpu_dnnl_engine(), hint) !=
                                  dnnl_success)
        return NULL;
    return pd;
}

/* Whether oneDNN gave its reference (plain C) kernel for pd. */
static bool pd_is_reference(const_dnnl_primitive_desc_t pd)
{
    const char *impl = NULL;
    return dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl) == dnnl_success &&
           impl != NULL && strncmp(impl, "ref", 3) == 0;
}

/* The descriptor of one kind with the blocked sides fixed, unless that
 * leaves oneDNN only its reference kernel (LeNet's 6-channel backward
 * weights has an AVX2 one for its own layouts): then it picks the layouts
 * and the blocked buffers are reordered like NCHW ones. */
static dnnl_primitive_desc_t conv_pd_best(const conv_prim *p, int kind,
                                          dnnl_primitive_attr_t attr,
                                          const_dnnl_primitive_desc_t hint)
{
    dnnl_primitive_desc_t pd = conv_pd(p, kind, attr, hint, true);
    if (pd != NULL && !pd_is_reference(pd))
        return pd;
    if (pd != NULL)
        dnnl_primitive_desc_destroy(pd);
    return conv_pd(p, kind, attr, hint, false);
}

static const dnnl_memory_desc_t *md_of(const_dnnl_primitive_desc_t pd, dnnl_query_t q)
{
    return dnnl_primitive_desc_query_md(pd, q, 0);
}

/* ---- Winograd at AVX-512 ----
 *
 * oneDNN has Winograd F(4x4, 3x3) convolutions (jit_wino_4x3) at AVX-512
 * only: 2.25 products an output per channel pair instead of 9. Against its
 * direct kernels, one thread, batch 32, nChw16c (bench/conv_rules/run):
 * forward and backward-data 1.24-1.85x as fast wherever both channel
 * counts are 32 or more (32 -> 32 at 16x16 1.64x / 1.30x, 64 -> 64 at 8x8
 * 1.36x / 1.74x, up to 1.85x at 128 channels), backward-weights 1.14-1.74x
 * but for 32 channels at 32x32 (0.91x); with 16 channels on either side
 * all three are slower (0.6-0.99x). So the rule: AVX-512, float32, 3x3,
 * stride 1, padding 1, no bias or relu, at least 32 channels in and out;
 * all three passes (the backward primitives take the forward's algorithm
 * from their hint). ResNet-20's second and third stages. The transforms
 * put the error of a sum at a few times a direct one's (entries up to 5 in
 * B^T, 8 in A^T); test_cpu_isa_kernels bounds it against float64. A shape
 * and a level, not a timing: the same bits on every run. */
bool cpu_conv_dnnl_winograd(const window_desc *d, bool relu, bool bias, bool bf16, bool avx512)
{
    return avx512 && !bf16 && !relu && !bias && d->c >= 32 && d->f >= 32 && window_same_3x3(d);
}

/* ---- the forward as a backward-data primitive ----
 *
 * A stride-1 convolution y = x * w (K x K, padding p, output as large as
 * the input) is the backward-data pass of its dual, the convolution from
 * y's shape to x's with padding K - 1 - p and the weights transposed and
 * flipped, w'[c][f][ky][kx] = w[f][c][K-1-ky][K-1-kx]: backward-data
 * computes dsrc[f][i][j] = the sum over c, ky', kx' of
 * ddst[c][i + K-1-p - ky'][j + K-1-p - kx'] * w'[c][f][ky'][kx'], which with
 * ky = K-1-ky' is x[c][i - p + ky][j - p + kx] * w[f][c][ky][kx]: y.
 *
 * Why: oneDNN's (2.6) forward kernels for 16 -> 16 channels are slower than
 * its backward-data kernels doing the same work. One thread, batch 32,
 * 3x3, padding 1, forward against dual, ms (bench/conv_rules/run, Zen 5):
 *   AVX2 (NHWC)        32x32 1.87 / 1.28, 16x16 0.41 / 0.32, 8x8 0.106 / 0.077
 *   AVX-512 (nChw16c)  32x32 0.76 / 0.64, 16x16 and 8x8 within 3%
 *   SSE4.1 (NHWC)      within 5%, and there its backward-data kernel sums
 *                      in another order in NHWC than in the layout it picks
 *                      behind an NCHW tower (test_blocked_layout saw it)
 * That is ResNet-20's first stage (six of its convolutions; its training
 * 1.06x as fast at AVX2, 1.02x at AVX-512, interleaved). At AVX2 with
 * NHWC activations conv_wino.c now takes these shapes first, so the rule
 * serves AVX-512 and NCHW activations. With 32 or 64
 * channels on either side, each wins for some sizes and loses for others,
 * so the rule is this one shape: 16 -> 16 channels, 3x3, stride 1,
 * padding 1, float32, no bias or relu (backward-data has neither), where
 * oneDNN runs at AVX2 or above. It reads the shape and the CPU's level
 * only (not a timing), so every run gives the same bits;
 * they differ from the forward kernel's in the last place (another order
 * of the same sums; test_layers checks y against float64). */
bool cpu_conv_dnnl_dual_forward(const window_desc *d, bool relu, bool bias, bool bf16,
                                bool avx2)
{
    return avx2 && !bf16 && !relu && !bias && d->c == 16 && d->f == 16 && window_same_3x3(d);
}

/* The backward-data descriptor that computes the forward: its diff_src is
 * y, its diff_dst x, its weights w'. The blocked sides fixed to the user's
 * layout, the NCHW ones picked by oneDNN. NULL where oneDNN has only its
 * reference kernel for it (the forward path then stays). */
static dnnl_primitive_desc_t dual_pd(const conv_prim *p)
{
    const window_desc *d = &p->d;
    dnnl_dims_t y_dims = {d->n, d->f, d->oh, d->ow}, x_dims = {d->n, d->c, d->h, d->w},
                wei_dims = {d->c, d->f, d->k, d->k};
    dnnl_dims_t strides = {1, 1}, pad = {d->k - 1 - d->pad, d->k - 1 - d->pad};
    dnnl_memory_desc_t y, x, wei;
    dnnl_memory_desc_init_by_tag(&y, 4, y_dims, dnnl_f32,
                                 d->blocked_y ? user_tag(true, p->nhwc) : dnnl_format_tag_any);
    dnnl_memory_desc_init_by_tag(&x, 4, x_dims, dnnl_f32,
                                 d->blocked_x ? user_tag(true, p->nhwc) : dnnl_format_tag_any);
    dnnl_memory_desc_init_by_tag(&wei, 4, wei_dims, dnnl_f32, dnnl_format_tag_any);
    dnnl_primitive_attr_t attr = user_scratchpad_attr(false);
    dnnl_convolution_desc_t fd, bd;
    dnnl_primitive_desc_t hint = NULL, pd = NULL;
    bool ok = attr != NULL &&
              dnnl_convolution_forward_desc_init(&fd, dnnl_forward_training,
                                                 dnnl_convolution_direct, &y, &wei, NULL, &x,
                                                 strides, pad, pad) == dnnl_success &&
              dnnl_primitive_desc_create(&hint, &fd, attr, cpu_dnnl_engine(), NULL) ==
                  dnnl_success &&
              dnnl_convolution_backward_data_desc_init(&bd, dnnl_convolution_direct, &y, &wei,
                                                       &x, strides, pad, pad) == dnnl_success &&
              dnnl_primitive_desc_create(&pd, &bd, attr, cpu_dnnl_engine(), hint) ==
                  dnnl_success &&
              !pd_is_reference(pd);
    if (!ok && pd != NULL)
        dnnl_primitive_desc_destroy(pd);
    if (hint != NULL)
        dnnl_primitive_desc_destroy(hint);
    if (attr != NULL)
        dnnl_primitive_attr_destroy(attr);
    return ok ? pd : NULL;
}

/* The three descriptors (the backward ones hinted by the forward); all
 * NULL, false, when oneDNN refuses one. */
static bool conv_pds(const conv_prim *p, dnnl_primitive_attr_t fattr, dnnl_primitive_attr_t attr,
                     dnnl_primitive_desc_t *fpd, dnnl_primitive_desc_t *bdpd,
                     dnnl_primitive_desc_t *bwpd)
{
    *fpd = conv_pd_best(p, 0, fattr, NULL);
    *bdpd = *fpd != NULL ? conv_pd_best(p, 1, attr, *fpd) : NULL;
    *bwpd = *bdpd != NULL ? conv_pd_best(p, 2, attr, *fpd) : NULL;
    if (*bwpd != NULL)
        return true;
    dnnl_primitive_desc_t *all[3] = {fpd, bdpd, bwpd};
    for (int i = 0; i < 3; i++)
        if (*all[i] != NULL) {
            dnnl_primitive_desc_destroy(*all[i]);
            *all[i] = NULL;
        }
    return false;
}

/* The three convolution primitives (oneDNN's best for this CPU) and the
 * layouts they chose */
static bool prim_convs(conv_prim *p)
{
    const window_desc *d = &p->d;
    dnnl_dims_t src_dims = {d->n, d->c, d->h, d->w}, wei_dims = {d->f, d->c, d->k, d->k},
                dst_dims = {d->n, d->f, d->oh, d->ow}, bias_dims = {d->f};
    dnnl_data_type_t x_type = d->blocked_x && p->act_bf16 ? dnnl_bf16 : dnnl_f32;
    dnnl_data_type_t y_type = d->blocked_y && p->act_bf16 ? dnnl_bf16 : dnnl_f32;
    dnnl_memory_desc_init_by_tag(&p->src_u, 4, src_dims, x_type, user_tag(d->blocked_x, p->nhwc));
    dnnl_memory_desc_init_by_tag(&p->dsrc_u, 4, src_dims, dnnl_f32, user_tag(d->blocked_x, p->nhwc));
    dnnl_memory_desc_init_by_tag(&p->wei_u, 4, wei_dims, dnnl_f32, dnnl_oihw);
    dnnl_dims_t flip_dims = {d->c, d->f, d->k, d->k};
    dnnl_memory_desc_init_by_tag(&p->wei_flip_u, 4, flip_dims, dnnl_f32, dnnl_oihw);
    dnnl_memory_desc_init_by_tag(&p->dst_u, 4, dst_dims, y_type, user_tag(d->blocked_y, p->nhwc));
    dnnl_memory_desc_init_by_tag(&p->ddst_u, 4, dst_dims, dnnl_f32, user_tag(d->blocked_y, p->nhwc));
    dnnl_memory_desc_init_by_tag(&p->bias_md, 1, bias_dims, dnnl_f32, dnnl_x);

    dnnl_primitive_attr_t fattr = user_scratchpad_attr(p->relu);
    dnnl_primitive_attr_t attr = user_scratchpad_attr(false);
    dnnl_primitive_desc_t fpd = NULL, bdpd = NULL, bwpd = NULL, dpd = NULL;
    dnnl_cpu_isa_t isa = dnnl_get_effective_cpu_isa();
    bool avx2 = (isa & dnnl_cpu_isa_avx2) == dnnl_cpu_isa_avx2;
    bool avx512 = (isa & dnnl_cpu_isa_avx512_core) == dnnl_cpu_isa_avx512_core;
    p->wino = cpu_conv_dnnl_winograd(d, p->relu, p->bias, p->bf16 || p->act_bf16, avx512);
    bool ok = fattr != NULL && attr != NULL && conv_pds(p, fattr, attr, &fpd, &bdpd, &bwpd);
    if (!ok && p->wino && fattr != NULL && attr != NULL) {
        /* oneDNN refused a Winograd one: its direct kernels, as elsewhere */
        p->wino = false;
        ok = conv_pds(p, fattr, attr, &fpd, &bdpd, &bwpd);
    }
    /* the forward through the dual where the rule says so and oneDNN has a
     * kernel for it; the backward ones are hinted by the real forward */
    p->dual = ok && cpu_conv_dnnl_dual_forward(d, p->relu, p->bias, p->bf16 || p->act_bf16, avx2) &&
              (dpd = dual_pd(p)) != NULL;
    if (ok && p->dual) {
        p->src_b = *md_of(dpd, dnnl_query_diff_dst_md);
        p->wei_b = *md_of(dpd, dnnl_query_weights_md);
        p->dst_b = *md_of(dpd, dnnl_query_diff_src_md);
    } else if (ok) {
        p->src_b = *md_of(fpd, dnnl_query_src_md);
        p->wei_b = *md_of(fpd, dnnl_query_weights_md);
        p->dst_b = *md_of(fpd, dnnl_query_dst_md);
    }
    if (ok) {
        p->dsrc_b = *md_of(bdpd, dnnl_query_diff_src_md);
        p->wei_bd_b = *md_of(bdpd, dnnl_query_weights_md);
        p->ddst_b = *md_of(bdpd, dnnl_query_diff_dst_md);
        p->src_bw_b = *md_of(bwpd, dnnl_query_src_md);
        p->dwei_b = *md_of(bwpd, dnnl_query_diff_weights_md);
        p->ddst_bw_b = *md_of(bwpd, dnnl_query_diff_dst_md);
        ok = prim_create(p, P_BWD_DATA, bdpd) & prim_create(p, P_BWD_WEIGHTS, bwpd) &
             prim_create(p, P_FWD, p->dual ? dpd : fpd);
        bdpd = bwpd = NULL; /* prim_create destroyed them, and fpd or dpd */
        if (p->dual)
            dpd = NULL;
        else
            fpd = NULL;
    }
    if (dpd != NULL)
        dnnl_primitive_desc_destroy(dpd);
    if (fpd != NULL)
        dnnl_primitive_desc_destroy(fpd);
    if (bdpd != NULL)
        dnnl_primitive_desc_destroy(bdpd);
    if (bwpd != NULL)
        dnnl_primitive_desc_destroy(bwpd);
    if (fattr != NULL)
        dnnl_primitive_attr_destroy(fattr);
    if (attr != NULL)
        dnnl_primitive_attr_destroy(attr);
    return ok;
}

/* The reorders between our layouts and the primitives', and the memory
 * descriptors of every buffer a call binds */
static bool prim_reorders(conv_prim *p)
{
    bool ok = reorder_create(p, P_R_SRC, &p->src_u, &p->src_b) &&
              reorder_create(p, P_R_WEI, p->dual ? &p->wei_flip_u : &p->wei_u, &p->wei_b) &&
              reorder_create(p, P_R_DST, &p->dst_b, &p->dst_u) &&
              reorder_create(p, P_R_DDST, &p->ddst_u, &p->ddst_b) &&
              reorder_create(p, P_R_DDST_BW, &p->ddst_u, &p->ddst_bw_b) &&
              reorder_create(p, P_R_WEI_BD, &p->wei_u, &p->wei_bd_b) &&
              reorder_create(p, P_R_SRC_BW, &p->src_u, &p->src_bw_b) &&
              reorder_create(p, P_R_DSRC, &p->dsrc_b, &p->dsrc_u) &&
              reorder_create(p, P_R_DWEI, &p->dwei_b, &p->wei_u);
    if (!ok)
        return false;

    const dnnl_memory_desc_t *md[M_SCRATCH] = {
        [M_X] = &p->src_u,        [M_SRC_B] = &p->src_b,   [M_W] = &p->wei_u,
        [M_WEI_B] = &p->wei_b,    [M_DST_B] = &p->dst_b,   [M_Y] = &p->dst_u,
        [M_BIAS] = &p->bias_md,   [M_DY] = &p->ddst_u,     [M_DDST_B] = &p->ddst_b,
        [M_WEI_BD] = &p->wei_bd_b, [M_DSRC_B] = &p->dsrc_b, [M_DX] = &p->dsrc_u,
        [M_SRC_BW] = &p->src_bw_b, [M_DDST_BW] = &p->ddst_bw_b, [M_DWEI_B] = &p->dwei_b,
        [M_DW] = &p->wei_u,       [M_DB] = &p->bias_md,    [M_WF] = &p->wei_flip_u};
    for (int i = 0; i < M_SCRATCH; i++)
        p->md[i] = md[i];
    for (int i = 0; i < N_PRIMS; i++)
        p->md[M_SCRATCH + i] = &p->scratch_md[i];
    return true;
}

/* the bytes of a copy in layout md where reorder `prim` exists, else 0 */
static size_t copy_bytes(const conv_prim *p, int prim, const dnnl_memory_desc_t *md)
{
    return p->prim[prim] != NULL ? dnnl_memory_desc_get_size(md) : 0;
}

static size_t max_bytes(size_t a, size_t b)
{
    return a > b ? a : b;
}

/* A group's copies in the kernels' layouts, only where a reorder makes one,
 * and each group's scratchpad */
static bool prim_buffers(conv_prim *p)
{
    p->buf_bytes[B_SRC] = ALIGN(max_bytes(copy_bytes(p, P_R_SRC, &p->src_b),
                                          copy_bytes(p, P_R_SRC_BW, &p->src_bw_b)));
    p->buf_bytes[B_DST] = ALIGN(max_bytes(copy_bytes(p, P_R_DST, &p->dst_b),
                                          copy_bytes(p, P_R_DDST, &p->ddst_b)));
    p->buf_bytes[B_DDST2] = ALIGN(dnnl_memory_desc_equal(&p->ddst_bw_b, &p->ddst_b)
                                      ? 0
                                      : copy_bytes(p, P_R_DDST_BW, &p->ddst_bw_b));
    p->buf_bytes[B_DSRC] = ALIGN(copy_bytes(p, P_R_DSRC, &p->dsrc_b));
    p->buf_bytes[B_WEI] = ALIGN(max_bytes(copy_bytes(p, P_R_WEI, &p->wei_b),
                                          copy_bytes(p, P_R_WEI_BD, &p->wei_bd_b)));
    p->buf_bytes[B_DWEI] = ALIGN(copy_bytes(p, P_R_DWEI, &p->dwei_b));
    p->group_bytes = 0;
    for (int i = 0; i < N_BUFS; i++)
        p->group_bytes += p->buf_bytes[i];
    p->scratch_bytes = ALIGN(p->scratch_bytes);
    for (int g = 0; g < CONV_GROUPS && p->scratch_bytes > 0; g++)
        if ((p->scratch[g] = aligned_alloc(64, p->scratch_bytes)) == NULL)
            return false;
    return true;
}

static bool prim_build(conv_prim *p)
{
    return prim_convs(p) && prim_reorders(p) && prim_buffers(p);
}

static void prim_free(conv_prim *p)
{
    for (int i = 0; i < N_PRIMS; i++)
        if (p->prim[i] != NULL)
            dnnl_primitive_destroy(p->prim[i]);
    for (int g = 0; g < CONV_GROUPS; g++) {
        for (int i = 0; i < N_MEMS; i++)
            if (p->mem[g][i] != NULL)
                dnnl_memory_destroy(p->mem[g][i]);
        free(p->scratch[g]);
    }
}

/* The cached primitives for d (d->n images per group); built on first use.
 * Called from the tower's own thread only, before the tasks start. */
static conv_prim *prims_get(backend_t *be, const window_desc *d, bool relu, bool bias)
{
    cpu_impl *impl = be->impl;
    conv_dnnl *cd = impl->conv;
    if (cd == NULL) {
        if (cpu_dnnl_engine() == NULL || (cd = calloc(1, sizeof(*cd))) == NULL)
            return NULL;
        for (int g = 0; g < CONV_GROUPS; g++)
            if (dnnl_stream_create(&cd->streams[g], cpu_dnnl_engine(), dnnl_stream_default_flags) !=
                dnnl_success) {
                free(cd);
                return NULL;
            }
        impl->conv = cd;
    }
    for (int i = 0; i < cd->n_prims; i++) {
        conv_prim *p = cd->prims[i];
        if (same_desc(&p->d, d) && p->relu == relu && p->bias == bias)
            return p;
    }
    if (cd->n_prims == cd->cap) {
        int cap = cd->cap ? 2 * cd->cap : 16;
        conv_prim **np = realloc(cd->prims, (size_t)cap * sizeof(*np));
        if (np == NULL)
            return NULL;
        cd->prims = np;
        cd->cap = cap;
    }
    conv_prim *p = calloc(1, sizeof(*p));
    if (p == NULL)
        return NULL;
    cd->prims[cd->n_prims++] = p;
    p->d = *d;
    p->relu = relu;
    p->bias = bias;
    p->bf16 = impl->bf16;
    p->nhwc = be->blocked_nhwc;
    p->act_bf16 = be->blocked_bf16;
    cpu_dnnl_single_thread();
    p->ok = prim_build(p);
    return p;
}

void cpu_conv_dnnl_free(void *conv)
{
    conv_dnnl *cd = conv;
    if (cd == NULL)
        return;
    for (int i = 0; i < cd->n_prims; i++) {
        prim_free(cd->prims[i]);
        free(cd->prims[i]);
    }
    for (int g = 0; g < CONV_GROUPS; g++)
        dnnl_stream_destroy(cd->streams[g]);
    free(cd->prims);
    free(cd);
}

/* ---- running ---- */

typedef struct {
    const window_desc *d;
    conv_prim *prim[2]; /* [0]: floor(n / G) images per group, [1]: ceil */
    dnnl_stream_t *streams;
    const float *x, *w, *b, *y;
    float *yo, *dy, *dx, *dw, *db;
    bool relu;
    bool x_bf16, y_bf16; /* x, y: bf16 activations (backend.h: blocked_bf16) */
    char *ws;
    size_t group_bytes; /* workspace stride between groups */
    float *pdw, *pdb;   /* [CONV_GROUPS, F*CKK], [CONV_GROUPS, F] plain partials */
    float *wflip;       /* the weights flipped (cpu_conv_flip_weights): a dual forward's, or
                         * conv_wino's backward-data's before its transform */
    bool wino;          /* the three passes by conv_wino.c (its rule) */
    float *wino_u;      /* its transformed weights */
    float *wino_scratch; /* [CONV_GROUPS] of wino_stride floats */
    size_t wino_stride;
    char *shared_wei;   /* room for the weights in a kernel's layout */
    const void *wei;    /* the weights reordered once for every group, or NULL */
    bool backward;      /* dnnl_group runs group_backward, else group_forward */
} dnnl_args;

/* Group g's memory object for a role, pointing at ptr. Created once, so the
 * steady-state step allocates nothing. */
static dnnl_memory_t mem_at(conv_prim *p, int g, int role, const void *ptr)
{
    dnnl_memory_t *m = &p->mem[g][role];
    if (*m == NULL)
        cpu_dnnl_check(dnnl_memory_create(m, p->md[role], cpu_dnnl_engine(), (void *)ptr), "memory_create");
    else
        cpu_dnnl_check(dnnl_memory_set_data_handle(*m, (void *)ptr), "set_data_handle");
    return *m;
}

/* Runs primitive i with (argument, role, pointer) triples, plus the group's
 * scratchpad when the primitive wants one. */
typedef struct {
    int arg, role;
    const void *ptr;
} bind;

static void exec(conv_prim *p, int g, dnnl_stream_t s, int i, int n, const bind *b)
{
    dnnl_exec_arg_t args[6];
    for (int k = 0; k < n; k++) {
        args[k].arg = b[k].arg;
        args[k].memory = mem_at(p, g, b[k].role, b[k].ptr);
    }
    if (dnnl_memory_desc_get_size(&p->scratch_md[i]) > 0) {
        args[n].arg = DNNL_ARG_SCRATCHPAD;
        args[n].memory = mem_at(p, g, M_SCRATCH + i, p->scratch[g]);
        n++;
    }
    cpu_dnnl_check(dnnl_primitive_execute(p->prim[i], s, n, args), "primitive_execute");
}

/* Reorder primitive i from (role, ptr) into (role, buf); returns where the
 * data now is: buf, or ptr itself when the layouts are equal. */
static const void *reorder(conv_prim *p, int g, dnnl_stream_t s, int i, int from_role,
                           const void *from, int to_role, void *buf)
{
    if (p->prim[i] == NULL)
        return from;
    bind b[2] = {{DNNL_ARG_FROM, from_role, from}, {DNNL_ARG_TO, to_role, buf}};
    exec(p, g, s, i, 2, b);
    return buf;
}

/* Group g's images [*lo, *hi) and the primitives for that many; NULL when
 * the group has none. */
static conv_prim *group_begin(const dnnl_args *a, int g, int groups, int *lo, int *hi)
{
    cpu_range(a->d->n, groups, g, lo, hi);
    if (*lo == *hi)
        return NULL;
    cpu_dnnl_single_thread();
    return *hi - *lo == a->prim[0]->d.n ? a->prim[0] : a->prim[1];
}

/* Floats of one image's input and output, in their layouts. */
static size_t image_in(const window_desc *d)
{
    return d->blocked_x ? tt_blocked_floats(1, d->c, d->h * d->w) : (size_t)d->c * d->h * d->w;
}

static size_t image_out(const window_desc *d)
{
    return d->blocked_y ? tt_blocked_floats(1, d->f, d->oh * d->ow) : (size_t)d->f * d->oh * d->ow;
}

static char *group_buf(const dnnl_args *a, const conv_prim *p, int g, int which)
{
    char *base = a->ws + (size_t)g * a->group_bytes;
    for (int i = 0; i < which; i++)
        base += p->buf_bytes[i];
    return base;
}

/* Images [lo, hi) through conv_wino.c (NHWC float32): forward x -> y
 * (cin = C), or backward-data dy -> dx (cin = F). */
static void group_wino(const dnnl_args *a, int g, int lo, int hi, bool forward)
{
    const window_desc *d = a->d;
    int cin = forward ? d->c : d->f, cout = forward ? d->f : d->c;
    size_t in = forward ? image_in(d) : image_out(d), out = forward ? image_out(d) : image_in(d);
    const float *src = forward ? a->x : a->dy;
    float *dst = forward ? a->yo : a->dx;
    cpu_conv_wino_forward(hi - lo, d->h, d->w, cin, cout, src + (size_t)lo * in, a->wino_u,
                          dst + (size_t)lo * out, a->wino_scratch + (size_t)g * a->wino_stride);
}

/* Group g's images [lo, hi) forward through primitive p */
static void group_forward(dnnl_args *a, conv_prim *p, int g, int lo, int hi)
{
    const window_desc *d = a->d;
    if (a->wino) {
        group_wino(a, g, lo, hi, true);
        return;
    }
    dnnl_stream_t s = a->streams[g];
    const void *x = act_at(a->x, (size_t)lo * image_in(d), a->x_bf16);
    void *y = (void *)act_at(a->yo, (size_t)lo * image_out(d), a->y_bf16);
    const void *src = reorder(p, g, s, P_R_SRC, M_X, x, M_SRC_B, group_buf(a, p, g, B_SRC));
    const void *wei = a->wei != NULL ? a->wei
                                     : reorder(p, g, s, P_R_WEI, p->dual ? M_WF : M_W,
                                               p->dual ? a->wflip : a->w, M_WEI_B,
                                               group_buf(a, p, g, B_WEI));
    void *dst = p->prim[P_R_DST] != NULL ? (void *)group_buf(a, p, g, B_DST) : (void *)y;
    bind b[4] = {{DNNL_ARG_SRC, M_SRC_B, src}, {DNNL_ARG_WEIGHTS, M_WEI_B, wei},
                 {DNNL_ARG_DST, M_DST_B, dst}, {DNNL_ARG_BIAS, M_BIAS, a->b}};
    if (p->dual) {
        /* backward-data: x is its diff_dst, y its diff_src */
        b[0].arg = DNNL_ARG_DIFF_DST;
        b[2].arg = DNNL_ARG_DIFF_SRC;
    }
    exec(p, g, s, P_FWD, p->bias ? 4 : 3, b);
    reorder(p, g, s, P_R_DST, M_DST_B, dst, M_Y, y);
}

static void group_backward(dnnl_args *a, conv_prim *p, int g, int lo, int hi)
{
    const window_desc *d = a->d;
    dnnl_stream_t s = a->streams[g];
    size_t out = image_out(d), in = image_in(d);
    float *dy = a->dy + (size_t)lo * out;
    if (a->relu) {
        const void *y = act_at(a->y, (size_t)lo * out, a->y_bf16);
        for (size_t q = 0; q < (size_t)(hi - lo) * out; q++)
            dy[q] = tt_relu_grad(act_load(y, q, a->y_bf16), dy[q]);
    }
    const void *ddst = reorder(p, g, s, P_R_DDST, M_DY, dy, M_DDST_B, group_buf(a, p, g, B_DST));
    if (a->dx != NULL && a->wino) {
        group_wino(a, g, lo, hi, false);
    } else if (a->dx != NULL) {
        float *dx = a->dx + (size_t)lo * in;
        const void *wei = a->wei != NULL ? a->wei
                                         : reorder(p, g, s, P_R_WEI_BD, M_W, a->w, M_WEI_BD,
                                                   group_buf(a, p, g, B_WEI));
        void *dsrc = p->prim[P_R_DSRC] != NULL ? (void *)group_buf(a, p, g, B_DSRC) : (void *)dx;
        bind b[3] = {{DNNL_ARG_DIFF_DST, M_DDST_B, ddst}, {DNNL_ARG_WEIGHTS, M_WEI_BD, wei},
                     {DNNL_ARG_DIFF_SRC, M_DSRC_B, dsrc}};
        exec(p, g, s, P_BWD_DATA, 3, b);
        reorder(p, g, s, P_R_DSRC, M_DSRC_B, dsrc, M_DX, dx);
    }
    if (a->dw != NULL && a->wino) {
        /* conv_wino's weight gradient of the group's images, into its
         * partial as oneDNN's would be (no bias: the rule) */
        cpu_conv_wino_weight_grad(hi - lo, d->h, d->w, d->c, d->f, a->x + (size_t)lo * in,
                                  a->dy + (size_t)lo * out,
                                  a->wino_scratch + (size_t)g * a->wino_stride,
                                  a->pdw + (size_t)g * d->f * d->c * d->k * d->k);
    } else if (a->dw != NULL) {
        const void *x = act_at(a->x, (size_t)lo * in, a->x_bf16);
        const void *src =
            reorder(p, g, s, P_R_SRC_BW, M_X, x, M_SRC_BW, group_buf(a, p, g, B_SRC));
        const void *ddst_bw = dnnl_memory_desc_equal(&p->ddst_bw_b, &p->ddst_b)
                                  ? ddst
                                  : reorder(p, g, s, P_R_DDST_BW, M_DY, dy, M_DDST_BW,
                                            group_buf(a, p, g, B_DDST2));
        size_t ckk = (size_t)d->c * d->k * d->k;
        float *pdw = a->pdw + (size_t)g * d->f * ckk, *pdb = a->pdb + (size_t)g * d->f;
        void *dwei = p->prim[P_R_DWEI] != NULL ? (void *)group_buf(a, p, g, B_DWEI) : (void *)pdw;
        bind b[4] = {{DNNL_ARG_SRC, M_SRC_BW, src}, {DNNL_ARG_DIFF_DST, M_DDST_BW, ddst_bw},
                     {DNNL_ARG_DIFF_WEIGHTS, M_DWEI_B, dwei}, {DNNL_ARG_DIFF_BIAS, M_DB, pdb}};
        exec(p, g, s, P_BWD_WEIGHTS, p->bias ? 4 : 3, b);
        reorder(p, g, s, P_R_DWEI, M_DWEI_B, dwei, M_DW, pdw);
    }
}

/* Team task g of CONV_GROUPS: its group's images, forward or backward. */
static void dnnl_group(void *arg, int g, int groups)
{
    dnnl_args *a = arg;
    int lo, hi;
    conv_prim *p = group_begin(a, g, groups, &lo, &hi);
    if (p != NULL && a->backward)
        group_backward(a, p, g, lo, hi);
    else if (p != NULL)
        group_forward(a, p, g, lo, hi);
}

/* Whether group g of a call over n images has any (cpu_range puts the empty
 * groups first when n < CONV_GROUPS). */
static bool group_used(int n, int g)
{
    int lo, hi;
    cpu_range(n, CONV_GROUPS, g, &lo, &hi);
    return hi > lo;
}

/* dw and db: the group partials summed in group order, split by element.
 * Groups without images wrote no partials and are left out. */
static void dnnl_reduce_task(void *arg, int k, int tasks)
{
    dnnl_args *a = arg;
    const window_desc *d = a->d;
    int total = d->f * d->c * d->k * d->k;
    int first = 0;
    while (!group_used(d->n, first))
        first++;
    int lo, hi;
    cpu_range(total, tasks, k, &lo, &hi);
    for (int i = lo; i < hi; i++)
        a->dw[i] = cpu_sum_in_order(a->pdw + (size_t)first * total + i, CONV_GROUPS - first,
                                    (size_t)total);
    cpu_range(d->f, tasks, k, &lo, &hi);
    if (a->db != NULL)
        for (int f = lo; f < hi; f++)
            a->db[f] = cpu_sum_in_order(a->pdb + (size_t)first * d->f + f, CONV_GROUPS - first,
                                        (size_t)d->f);
}

/* The primitives for a call over d->n images: groups hold floor or ceil of
 * n / G images (one each when n < G). False when oneDNN cannot do the shape. */
static bool prims_for_call(backend_t *be, const window_desc *d, bool relu, bool bias,
                           conv_prim **prim)
{
    int sizes[2] = {d->n / CONV_GROUPS, (d->n + CONV_GROUPS - 1) / CONV_GROUPS};
    for (int i = 0; i < 2; i++) {
        window_desc g = *d;
        g.n = sizes[i] > 0 ? sizes[i] : 1;
        prim[i] = prims_get(be, &g, relu, bias);
        if (prim[i] == NULL || !prim[i]->ok)
            return false;
    }
    return true;
}

/* The weights in the forward or backward-data kernel's layout, whichever
 * is larger. */
static size_t shared_wei_bytes(const conv_prim *p)
{
    size_t f = dnnl_memory_desc_get_size(&p->wei_b), b = dnnl_memory_desc_get_size(&p->wei_bd_b);
    return ALIGN(f > b ? f : b);
}

static size_t flip_bytes(const window_desc *d)
{
    return ALIGN((size_t)d->f * d->c * d->k * d->k * sizeof(float));
}

static size_t partial_dw_bytes(const window_desc *d)
{
    return ALIGN(CONV_GROUPS * (size_t)d->f * d->c * d->k * d->k * sizeof(float));
}

/* conv_wino.c's transformed weights and a scratch per group, for a shape
 * its rule takes at AVX2 (whatever the level now: TT_CPU_ISA is read once,
 * but a test may change the level between calls). */
static size_t wino_bytes(const window_desc *d)
{
    if (!cpu_conv_wino_fits(d, false, false, false, true, CPU_ISA_AVX2))
        return 0;
    return ALIGN(cpu_conv_wino_weight_floats(d->c, d->f) * sizeof(float)) +
           CONV_GROUPS * ALIGN(cpu_conv_wino_scratch_floats(d->c, d->f) * sizeof(float));
}

size_t cpu_conv_dnnl_workspace(backend_t *be, const window_desc *d)
{
    size_t fallback = cpu_conv_workspace(be, d);
    conv_prim *prim[2];
    /* relu and bias do not change the buffer sizes; build the common case */
    if (!prims_for_call(be, d, false, false, prim))
        return fallback;
    size_t bytes = CONV_GROUPS * prim[1]->group_bytes + partial_dw_bytes(d) +
                   ALIGN(CONV_GROUPS * (size_t)d->f * sizeof(float)) + flip_bytes(d) +
                   shared_wei_bytes(prim[1]) + wino_bytes(d);
    return bytes > fallback ? bytes : fallback;
}

static bool args_init(backend_t *be, const window_desc *d, bool relu, bool bias, void *ws,
                      dnnl_args *a)
{
    if (!prims_for_call(be, d, relu, bias, a->prim))
        return false;
    /* the workspace was sized with the plain variant (no relu, no bias); a
     * variant wanting more than that (never seen) takes conv.c instead */
    conv_prim *plain[2];
    if ((relu || bias) && (!prims_for_call(be, d, false, false, plain) ||
                           a->prim[1]->group_bytes > plain[1]->group_bytes))
        return false;
    a->d = d;
    a->relu = relu;
    a->x_bf16 = d->blocked_x && be->blocked_bf16;
    a->y_bf16 = d->blocked_y && be->blocked_bf16;
    a->streams = ((conv_dnnl *)((cpu_impl *)be->impl)->conv)->streams;
    a->ws = ws;
    a->group_bytes = a->prim[1]->group_bytes;
    a->pdw = (float *)(a->ws + CONV_GROUPS * a->group_bytes);
    a->pdb = (float *)((char *)a->pdw + partial_dw_bytes(d));
    a->wflip = (float *)((char *)a->pdb + ALIGN(CONV_GROUPS * (size_t)d->f * sizeof(float)));
    a->shared_wei = (char *)a->wflip + flip_bytes(d);
    /* conv_wino.c where its rule takes the call (the plain variant: the
     * workspace's layout is the plain prim[1]'s) */
    a->wino = cpu_conv_wino_fits(d, relu, bias, a->prim[1]->bf16 || a->prim[1]->act_bf16,
                                 a->prim[1]->nhwc, cpu_isa());
    if (a->wino) {
        a->wino_u = (float *)(a->shared_wei + shared_wei_bytes(a->prim[1]));
        a->wino_stride = ALIGN(cpu_conv_wino_scratch_floats(d->c, d->f) * sizeof(float)) /
                         sizeof(float);
        a->wino_scratch =
            a->wino_u + ALIGN(cpu_conv_wino_weight_floats(d->c, d->f) * sizeof(float)) /
                            sizeof(float);
    }
    return true;
}

/* conv.c knows NCHW only. oneDNN has a kernel (its reference one at worst)
 * for every convolution in the blocked layout, so this never happens; if
 * it did, computing on misread data must not go unnoticed. */
static void no_blocked_fallback(const window_desc *d)
{
    if (d->blocked_x || d->blocked_y) {
        fprintf(stderr, "towertrain: internal error: oneDNN has no convolution for a blocked "
                        "%dx%dx%d input\n", d->c, d->h, d->w);
        abort();
    }
}

/* The weights change every step, but not between the groups of one call:
 * reorder them once, here on the calling thread (with group 0's memory
 * objects, before its task), instead of once per group (8 reorders per
 * layer and step). Only when both primitives of the call want the same
 * layout. */
static void share_weights(dnnl_args *a, int reorder_i, int role, int from_role,
                          const float *from)
{
    conv_prim *p0 = a->prim[0], *p1 = a->prim[1];
    a->wei = NULL;
    if (p1->prim[reorder_i] == NULL || p0->prim[reorder_i] == NULL || p0->dual != p1->dual ||
        !dnnl_memory_desc_equal(p0->md[role], p1->md[role]) ||
        dnnl_memory_desc_get_size(p1->md[role]) > shared_wei_bytes(p1))
        return;
    cpu_dnnl_single_thread();
    a->wei = reorder(p1, 0, a->streams[0], reorder_i, from_role, from, role, a->shared_wei);
}

void cpu_conv_dnnl_forward(backend_t *be, const window_desc *d, const float *x, const float *w,
                           const float *b, bool relu, float *y, void *ws)
{
    dnnl_args a = {.x = x, .w = w, .b = b, .yo = y};
    if (!args_init(be, d, relu, b != NULL, ws, &a)) {
        no_blocked_fallback(d);
        cpu_conv_forward(be, d, x, w, b, relu, y, ws);
        return;
    }
    bool dual = a.prim[1]->dual;
    if (a.wino) {
        cpu_conv_wino_weights(w, d->f, d->c, a.wino_u);
    } else {
        if (a.prim[0]->dual || dual)
            cpu_conv_flip_weights(w, d->f, d->c, d->k, a.wflip);
        share_weights(&a, P_R_WEI, M_WEI_B, dual ? M_WF : M_W, dual ? a.wflip : w);
    }
    cpu_run(be, CONV_GROUPS, dnnl_group, &a);
}

void cpu_conv_dnnl_backward(backend_t *be, const window_desc *d, const float *x,
                            const float *w, const float *y, bool relu, float *dy, float *dx,
                            float *dw, float *db, void *ws)
{
    dnnl_args a = {.x = x, .w = w, .y = y, .dy = dy, .dx = dx, .dw = dw, .db = db,
                   .backward = true};
    /* the bias gradient comes out of the backward-weights primitive, so a
     * call for db without dw (never made by conv2d) takes conv.c */
    if ((dw == NULL && db != NULL) || !args_init(be, d, relu, db != NULL, ws, &a)) {
        no_blocked_fallback(d);
        cpu_conv_backward(be, d, x, w, y, relu, dy, dx, dw, db, ws);
        return;
    }
    if (dx != NULL && a.wino) {
        cpu_conv_flip_weights(w, d->f, d->c, d->k, a.wflip);
        cpu_conv_wino_weights(a.wflip, d->c, d->f, a.wino_u);
    } else if (dx != NULL)
        share_weights(&a, P_R_WEI_BD, M_WEI_BD, M_W, w);
    cpu_run(be, CONV_GROUPS, dnnl_group, &a);
    if (dw != NULL)
        cpu_run(be, be->threads, dnnl_reduce_task, &a);
}
