/* convbench.h - bench/gpu/convbench: ResNet-50's distinct convolution shapes
 * x the three passes x bf16 / tf32 / fp32, timed in each way the CUDA
 * backend can run them (convbench.c: the shapes, the command line, JSON and
 * the summary; convbench_gpu.c: the measurements, built with CUDA). */
#ifndef TT_CONVBENCH_H
#define TT_CONVBENCH_H

#include <stdbool.h>
#include <stddef.h>

#include "backend/backend.h"
#include "backend/cuda/algo_cache.h"

/* One distinct shape: its first layer's name (torchvision's) and how many
 * of the model's convolutions have it. */
typedef struct {
    char name[40];
    int count;
    window_desc d;
} cb_shape;

typedef enum { CB_BF16, CB_TF32, CB_FP32, CB_PRECS } cb_prec;

/* The ways the backend can run a convolution. */
typedef enum {
    CB_LEGACY_DEFAULT,  /* legacy API, NCHW, the math type before issue 36 (DEFAULT) */
    CB_LEGACY_TENSOROP, /* legacy API, NCHW, TENSOR_OP math for 16-bit data */
    CB_LEGACY_NHWC,     /* legacy API, NHWC, TENSOR_OP math for 16-bit data */
    CB_GRAPH_HEUR,      /* graph API, NHWC, the heuristics' first plan, untimed */
    CB_GRAPH_AUTO,      /* graph API, NHWC, the fastest of <= 8 timed plans */
    CB_GRAPH_AUTO_NCHW, /* graph API, NCHW, the fastest of <= 8 timed plans */
    CB_VARIANTS
} cb_variant;

typedef struct {
    bool ok;
    double ms;       /* median of the timed runs */
    size_t ws_bytes; /* the chosen algorithm's or plan's workspace */
    int algo;        /* legacy: cudnnConvolution*Algo_t; graph: -1 */
    char err[1024];
} cb_result;

extern const char *const cb_variant_names[CB_VARIANTS];
extern const char *const cb_prec_names[CB_PRECS];

/* 2 * n * f * oh * ow * c * k * k: the multiply-adds of each pass, twice */
double cb_flops(const window_desc *d);

typedef struct cb_gpu cb_gpu;

/* The GPU, a cuDNN handle and buffers for the largest of the shapes (random
 * data); NULL with the reason in why. */
cb_gpu *cb_gpu_open(const cb_shape *s, int n, char *why, size_t len);
void cb_gpu_close(cb_gpu *g);
/* "NVIDIA H200, cuDNN 9.19.0" */
const char *cb_gpu_describe(const cb_gpu *g);
void cb_gpu_measure(cb_gpu *g, const window_desc *d, conv_pass pass, cb_prec prec, cb_variant v,
                    int reps, cb_result *r);

#endif
