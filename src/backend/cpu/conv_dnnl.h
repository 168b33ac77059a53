/* conv_dnnl.h - conv2d through oneDNN's convolution primitives (conv_dnnl.c),
 * used by the CPU backend when configure found oneDNN; conv.c otherwise. */
#ifndef TT_CONV_DNNL_H
#define TT_CONV_DNNL_H

#include "backend/backend.h"

size_t cpu_conv_dnnl_workspace(backend_t *be, const window_desc *d);
void cpu_conv_dnnl_forward(backend_t *be, const window_desc *d, const float *x, const float *w,
                           const float *b, bool relu, float *y, void *ws);
void cpu_conv_dnnl_backward(backend_t *be, const window_desc *d, const float *x,
                            const float *w, const float *y, bool relu, float *dy, float *dx,
                            float *dw, float *db, void *ws);
/* Whether the forward of d runs as the backward-data pass of its dual
 * convolution (conv_dnnl.c says why and for which shape). bf16: the
 * backend's precision or activations are bf16; avx2: oneDNN runs at AVX2
 * or above. */
bool cpu_conv_dnnl_dual_forward(const window_desc *d, bool relu, bool bias, bool bf16,
                                bool avx2);
/* Whether d's three passes are oneDNN's Winograd convolutions (conv_dnnl.c
 * says why and for which shapes). avx512: oneDNN runs at AVX512_CORE or
 * above. */
bool cpu_conv_dnnl_winograd(const window_desc *d, bool relu, bool bias, bool bf16, bool avx512);
/* Frees the primitive cache of one backend instance (cpu_impl.conv). */
void cpu_conv_dnnl_free(void *conv);

#endif
