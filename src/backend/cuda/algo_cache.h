/* algo_cache.h - the convolution algorithm chosen once per shape.
 *
 * cuDNN offers several algorithms for each pass of a convolution (forward,
 * backward data, backward filter), each with its workspace size, whether it
 * is deterministic and whether it uses tensor-core (TF32) math. The backend
 * ranks them once per shape, keeps the choice here, and every later call
 * with that shape reuses it. The ranking: with trainer.deterministic = false,
 * cudnnFind*AlgorithmEx times them on real buffers (fastest first); with
 * deterministic = true, cuDNN's heuristics (cudnnGet*Algorithm_v7) rank them,
 * because a choice by timing can differ from run to run, and so would the
 * bits, even among deterministic algorithms.
 *
 * Plain C and GPU-independent (the CUDA glue converts cuDNN's perf structs
 * to algo_perf), so tests/test_algo_cache.c checks keys and choices on the
 * CPU.
 */
#ifndef TT_ALGO_CACHE_H
#define TT_ALGO_CACHE_H

#include <stdbool.h>
#include <stddef.h>

#include "backend/backend.h"

typedef enum { CONV_PASS_FORWARD, CONV_PASS_BACKWARD_DATA, CONV_PASS_BACKWARD_FILTER } conv_pass;

/* What a choice depends on: the pass, the whole window (batch included),
 * and the settings that restrict the candidates. */
typedef struct {
    int pass;                 /* conv_pass */
    int n, c, h, w, f, k, stride, pad;
    int tf32;                 /* trainer.tf32: tensor-core math allowed */
    int deterministic;        /* trainer.deterministic: deterministic algorithms only */
    int nhwc;                 /* NHWC tensors, bf16 or float32 (cuda_conv.c: a blocked
                               * side); set by the caller after algo_key_make (0 there) */
    /* the graph API's keys (conv_graph_spec.h: cg_spec_key); 0 in the legacy
     * API's, whose layout (NCHW) and type (the backend's) are fixed */
    int graph;                /* 1: a plan of the graph API */
    int layout, dtype;        /* cg_layout, cg_dtype */
    int align;                /* bytes: the data pointers' alignment */
} algo_key;

algo_key algo_key_make(conv_pass pass, const window_desc *d, bool tf32, bool deterministic);

/* One timed candidate, as cudnnFind*AlgorithmEx reports it. */
typedef struct {
    int algo;          /* cudnnConvolution*Algo_t */
    bool ok;           /* status == CUDNN_STATUS_SUCCESS */
    float time_ms;
    size_t memory;     /* workspace bytes */
    bool deterministic;
    bool tensor_math;  /* mathType is not CUDNN_FMA_MATH: may use TF32 */
    int math_type;     /* cudnnMathType_t, to set on the descriptor */
} algo_perf;

/* The choice for a key. For a graph key, algo is the index of the plan in
 * the tower's table of finalized plans (cuda_conv_graph.c), or -1 when the
 * graph API has none for it: the legacy API runs that shape. */
typedef struct {
    int algo;
    int math_type;
    size_t ws_bytes;
    float time_ms;
} algo_choice;

/* The first candidate, in cuDNN's order (fastest or best ranked first), that
 * succeeded, fits in ws_limit bytes, is deterministic when asked, and uses no
 * tensor-core math unless tf32. Returns its index, or -1 when none does. */
int algo_pick(const algo_perf *r, int n, bool deterministic, bool tf32, size_t ws_limit);

typedef struct algo_cache algo_cache;

algo_cache *algo_cache_create(void);
void algo_cache_free(algo_cache *c);

/* The choice stored for key, or NULL. */
const algo_choice *algo_cache_find(const algo_cache *c, const algo_key *key);

/* Stores (or replaces) the choice for key; -1 when out of host memory. */
int algo_cache_put(algo_cache *c, const algo_key *key, const algo_choice *choice);

int algo_cache_size(const algo_cache *c);

#endif
