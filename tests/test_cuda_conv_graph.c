/* test_cuda_conv_graph.c - the graph-API convolution's descriptors against
 * the cuDNN library itself, without a GPU: for each pass, layout and data
 * type of a few ResNet shapes (the stem's 7x7/2 on 3 channels, a 1x1/2
 * downsample, a 3x3/1), the tensors, convolution and operation that
 * cuda_conv_graph.c builds are finalized by cuDNN (which checks every
 * attribute's name, type and count, and the shapes' consistency), and an
 * operation whose output size is off by one is refused. The operation
 * graph, heuristics and plans need a handle, hence a GPU: test_gpu_ops and
 * bench/gpu/convbench run those. */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "tt_test.h"

#ifndef HAVE_CUDA
int main(void)
{
    tt_skip("cuDNN graph API descriptors (built without CUDA)");
    return tt_done();
}
#else

#include "backend/cuda/cuda_conv_graph.h"
#include "backend/cuda/cuda_libs.h"

/* n, c, h, w, f, k, stride, pad; oh and ow from them */
static window_desc shape(int n, int c, int h, int f, int k, int stride, int pad)
{
    int o = (h + 2 * pad - k) / stride + 1;
    return (window_desc){.n = n, .c = c, .h = h, .w = h, .f = f, .k = k, .stride = stride,
                         .pad = pad, .oh = o, .ow = o};
}

int main(void)
{
    tt_err err = {0};
    if (!tt_ok(cuda_libs_load(&err) == 0, "cuDNN loads (%s)", err.msg[0] ? err.msg : "ok"))
        return tt_done();
    window_desc shapes[3] = {shape(8, 3, 224, 64, 7, 2, 3), shape(8, 256, 56, 512, 1, 2, 0),
                             shape(8, 64, 56, 64, 3, 1, 1)};
    int total = 0, bad = 0;
    char first[512] = "";
    for (int i = 0; i < 3; i++)
        for (int p = CONV_PASS_FORWARD; p <= CONV_PASS_BACKWARD_FILTER; p++)
            for (int l = CG_LAYOUT_NCHW; l <= CG_LAYOUT_NHWC; l++)
                for (int t = CG_DTYPE_FLOAT; t <= CG_DTYPE_HALF; t++) {
                    cg_spec s = {.pass = (conv_pass)p, .win = shapes[i], .layout = (cg_layout)l,
                                 .dtype = (cg_dtype)t, .align = 16};
                    tt_err e = {0};
                    total++;
                    if (cg_spec_validate(&s, &e) != 0) {
                        bad++;
                        if (!first[0])
                            snprintf(first, sizeof(first), "%s", e.msg);
                    }
                }
    tt_ok(bad == 0, "cuDNN finalizes the tensors, convolution and operation of %d specs "
          "(3 shapes x 3 passes x NCHW/NHWC x float/bf16/half): %d refused%s%s", total, bad,
          first[0] ? ": " : "", first);
    /* cuDNN does check: an output one row too tall is refused, in each pass */
    int refused = 0;
    for (int p = CONV_PASS_FORWARD; p <= CONV_PASS_BACKWARD_FILTER; p++) {
        cg_spec s = {.pass = (conv_pass)p, .win = shapes[2], .layout = CG_LAYOUT_NHWC,
                     .dtype = CG_DTYPE_BF16, .align = 16};
        s.win.oh += 1;
        tt_err e = {0};
        refused += cg_spec_validate(&s, &e) != 0 && e.code == TT_ERR_RUNTIME && e.msg[0];
    }
    tt_ok(refused == 3, "an inconsistent output size is refused with a message in each pass "
          "(%d of 3)", refused);
    return tt_done();
}
#endif
