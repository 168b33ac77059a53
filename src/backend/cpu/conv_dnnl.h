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
/* Frees the primitive cache of one backend instance (cpu_impl.conv). */
void cpu_conv_dnnl_free(void *conv);

#endif
