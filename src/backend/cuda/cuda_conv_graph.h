/* cuda_conv_graph.h - convolutions through cuDNN's graph (backend) API.
 *
 * One operation graph per pass, shape, data type, layout and alignment
 * (conv_graph_spec.h describes it in plain C); its candidate engine configs
 * come from cuDNN's heuristics (mode A, then the fallback list), filtered by
 * their numerical notes as PyTorch filters them; at most CG_MAX_PLANS of
 * them are finalized (precompiled engines; runtime-compiled ones, whose
 * finalize can take a second, only when none of those finalizes),
 * and when timing is asked each runs on the caller's buffers and the
 * fastest is kept, else the first that finalizes. The chosen plan lives in
 * a cg_table until the table is freed.
 *
 * The order of the calls, as cuDNN's documentation gives it: tensors ->
 * convolution descriptor -> operation -> operation graph -> heuristics ->
 * engine config -> execution plan -> variant pack -> execute. Every call's
 * status is checked; a failure is an error in err, and the caller (the
 * backend, cuda_conv.c) falls back to the legacy API.
 *
 * The functions take a cuDNN handle and a stream, not a tower, so that
 * bench/gpu/convbench runs exactly these plans.
 */
#ifndef TT_CUDA_CONV_GRAPH_H
#define TT_CUDA_CONV_GRAPH_H

#include <cuda_runtime_api.h>
#include <cudnn.h>

#include "backend/cuda/conv_graph_spec.h"
#include "util/err.h"

typedef struct cg_table cg_table;

cg_table *cg_table_create(void);
/* destroys every plan and its descriptors */
void cg_table_free(cg_table *t);

/* The device buffers of a pass's three tensors, in the spec's order:
 * forward x, w -> y; backward data dx <- w, dy; backward filter x, dy -> dw
 * (x holds dx, y holds dy, w holds dw). */
typedef struct {
    void *x, *w, *y;
} cg_ptrs;

/* How a plan is chosen. */
typedef struct {
    int max_plans; /* finalized at most (1..CG_MAX_PLANS; 1: the heuristics' first) */
    int reps;      /* timed runs per plan, median (0 or deterministic: untimed) */
} cg_search;

/* Builds the graph of s and chooses its plan (above), timing on p and ws
 * (ws_limit bytes) when asked: index of the plan in t, its workspace and
 * median time (0 untimed) in *ws_bytes and *time_ms; -1 with the reason
 * in err when cuDNN offers no plan or a call fails. */
int cg_table_build(cg_table *t, cudnnHandle_t h, cudaStream_t st, const cg_spec *s,
                   const cg_search *how, const cg_ptrs *p, void *ws, size_t ws_limit,
                   size_t *ws_bytes, float *time_ms, tt_err *err);

/* Builds and finalizes the graph's tensors, convolution and operation
 * alone, then destroys them: cuDNN checks the attributes and the shapes'
 * consistency, with no handle and no GPU (tests/test_cuda_libs.c). */
int cg_spec_validate(const cg_spec *s, tt_err *err);

/* Runs plan on p with ws (at least its workspace) on the handle's stream. */
int cg_table_execute(cg_table *t, cudnnHandle_t h, int plan, const cg_ptrs *p, void *ws,
                     tt_err *err);

/* The median of reps timed runs of plan on stream st (after one warm-up). */
int cg_table_time(cg_table *t, cudnnHandle_t h, cudaStream_t st, int plan, const cg_ptrs *p,
                  void *ws, int reps, float *ms, tt_err *err);

#endif
