/* conv_wino.h - 3x3, stride-1, padding-1 convolutions by Winograd's
 * F(4x4, 3x3) on AVX2, NHWC (conv_wino.c). conv_dnnl.c calls it for the
 * three passes of the shapes cpu_conv_wino_fits takes. */
#ifndef TT_CONV_WINO_H
#define TT_CONV_WINO_H

#include <stdbool.h>
#include <stddef.h>

#include "backend/backend.h"
#include "backend/cpu/cpu_isa.h"

/* The rule: AVX2 (isa, the level the kernels run at), float32 NHWC on both
 * sides (blocked, nhwc), channels in and out multiples of 16, 3x3, stride
 * 1, padding 1, no bias or relu. It reads the shape and the level only. */
bool cpu_conv_wino_fits(const window_desc *d, bool relu, bool bias, bool bf16, bool nhwc,
                        cpu_isa_t isa);

/* Floats of the transformed weights (36 x cin x cout) and of one task's
 * scratch (a block of tiles transformed and its products, and the weight
 * gradient's sums). */
size_t cpu_conv_wino_weight_floats(int cin, int cout);
size_t cpu_conv_wino_scratch_floats(int cin, int cout);

/* u[36][cin][cout] = G g G^T for each 3x3 filter g = w[o][i] of w
 * [cout][cin][3][3]: conv2d's weights for the forward (cout = F, cin = C),
 * cpu_conv_flip_weights' for the backward-data pass (cout = C, cin = F). */
void cpu_conv_wino_weights(const float *w, int cout, int cin, float *u);

/* wf[c][f][ky][kx] = w[f][c][k-1-ky][k-1-kx]: the filters of the transposed
 * convolution, whose forward is w's backward-data (and whose backward-data
 * is w's forward: conv_dnnl.c's dual forward). */
void cpu_conv_flip_weights(const float *w, int f, int c, int k, float *wf);

/* n images: y[n][h][w][cout] = the 3x3 convolution (padding 1) of
 * x[n][h][w][cin] with the filters u holds (cpu_conv_wino_weights). */
void cpu_conv_wino_forward(int n, int h, int w, int cin, int cout, const float *x,
                           const float *u, float *y, float *scratch);

/* The weight gradient of n images, x[n][h][w][c] and dy[n][h][w][f], into
 * dw[f][c][3][3], summed over the images' tiles in order. */
void cpu_conv_wino_weight_grad(int n, int h, int w, int c, int f, const float *x,
                               const float *dy, float *scratch, float *dw);

#endif
