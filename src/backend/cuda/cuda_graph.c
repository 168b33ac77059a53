/* cuda_graph.c - a training step captured in a CUDA graph and replayed
 * (backend.h: capture_begin, capture_end, graph_launch, graph_free), and
 * the optimizer updates reading their per-step scalars from device memory
 * (backend_step_vars), for src/train/step_graph.c.
 *
 * Capture is cudaStreamBeginCapture on the tower's stream in
 * cudaStreamCaptureModeThreadLocal (this thread's unsafe calls, such as a
 * synchronous copy, invalidate the capture; other threads' do not),
 * cudaStreamEndCapture, then cudaGraphInstantiate; a launch is
 * cudaGraphLaunch on the stream, followed by the loss's event. While the
 * stream captures, an operation's error fails the capture instead of the
 * backend (cuda_check.c), and the backend's host waits and pageable copies
 * refuse (cuda_capture_refuse): capture_end then returns NULL with the
 * first reason, after ending the capture, destroying what it made and
 * clearing the runtime's error, and the trainer runs the step eagerly.
 * cuBLAS runs on the workspace set at setup (cublasSetWorkspace), so it
 * allocates nothing inside a capture; the convolutions' algorithm searches
 * run in the eager warm-up steps.
 *
 * No GPU has run this file yet (2026-11-29): the simulated device's twin
 * (src/backend/sim/sim_graph.c) runs the same host code in make check. */
#include "backend/cuda/cuda_impl.h"

#include <stdio.h>
#include <stdlib.h>

struct backend_graph {
    cudaGraphExec_t exec;
};

int backend_cuda_capture_begin(backend_t *be, tt_err *err)
{
    cuda_impl *c = cuda_of(be);
    if (c->capturing)
        return err_set(err, TT_ERR_RUNTIME, "cuda:%d: a capture is already under way",
                       c->device);
    if (!cuda_begin(be))
        return err_set(err, TT_ERR_RUNTIME, "cuda:%d: the device failed before", c->device);
    if (cuda_check_err(cudaStreamBeginCapture(c->stream, cudaStreamCaptureModeThreadLocal),
                       c->device, "cudaStreamBeginCapture", TT_ERR_RUNTIME, err) != 0) {
        cudaGetLastError();
        return -1;
    }
    c->capturing = true;
    c->capture_failed = false;
    c->capture_why[0] = '\0';
    return 0;
}

/* Ends the capture whatever happened in it (the stream leaves capture
 * mode only so); the graph, or NULL with err. */
static cudaGraph_t end_capture(cuda_impl *c, tt_err *err)
{
    cudaGraph_t graph = NULL;
    cudaError_t rc = cudaStreamEndCapture(c->stream, &graph);
    c->capturing = false;
    if (rc != cudaSuccess && !c->capture_failed)
        cuda_check_err(rc, c->device, "cudaStreamEndCapture", TT_ERR_RUNTIME, err);
    if (rc != cudaSuccess || c->capture_failed || graph == NULL) {
        if (graph != NULL)
            cudaGraphDestroy(graph);
        cudaGetLastError(); /* the invalidated capture's error is not the device's */
        if (err->code == TT_OK)
            err_set(err, TT_ERR_RUNTIME, "cuda:%d: the step cannot be captured: %s", c->device,
                    c->capture_failed ? c->capture_why : "cudaStreamEndCapture gave no graph");
        return NULL;
    }
    return graph;
}

backend_graph *backend_cuda_capture_end(backend_t *be, tt_err *err)
{
    cuda_impl *c = cuda_of(be);
    if (!c->capturing) {
        err_set(err, TT_ERR_RUNTIME, "cuda:%d: no capture under way", c->device);
        return NULL;
    }
    cudaGraph_t graph = end_capture(c, err);
    if (graph == NULL)
        return NULL;
    backend_graph *g = calloc(1, sizeof(*g));
    cudaError_t rc = g != NULL ? cudaGraphInstantiate(&g->exec, graph, 0) : cudaErrorMemoryAllocation;
    cudaGraphDestroy(graph); /* the instantiated graph does not need it */
    if (rc != cudaSuccess) {
        cudaGetLastError();
        cuda_check_err(rc, c->device, "cudaGraphInstantiate", TT_ERR_RUNTIME, err);
        free(g);
        return NULL;
    }
    return g;
}

int backend_cuda_graph_launch(backend_t *be, backend_graph *g, tt_err *err)
{
    cuda_impl *c = cuda_of(be);
    if (!cuda_begin(be))
        return err_set(err, TT_ERR_RUNTIME, "cuda:%d: the device failed before", c->device);
    if (cuda_check_err(cudaGraphLaunch(g->exec, c->stream), c->device, "cudaGraphLaunch",
                       TT_ERR_RUNTIME, err) != 0)
        return -1;
    /* the captured loss copied itself to pinned memory; loss_read waits
     * for this event */
    return backend_cuda_event_record(be, c->loss_done, backend_cuda_queue(be), err);
}

void backend_cuda_graph_free(backend_t *be, backend_graph *g)
{
    if (g == NULL)
        return;
    if (cuda_begin(be)) /* queued launches keep what they need */
        cuda_ok(cuda_of(be), cudaGraphExecDestroy(g->exec), "cudaGraphExecDestroy");
    free(g);
}

/* ---- the updates reading backend_step_vars on the device ---- */

static void cuda_sgd_step_vars(backend_t *be, size_t count, const backend_step_vars *v,
                               float momentum, bool nesterov, float weight_decay, float *w,
                               const float *g, float *buf)
{
    if (cuda_begin(be))
        cuda_ok(cuda_of(be),
                tt_k_sgd_vars(cuda_of(be)->stream, count, v, momentum, nesterov, weight_decay, w,
                              g, buf),
                "sgd kernel (step block)");
}

/* Adam's constants but the step's (lr 0, step 1: replaced on the device) */
static void cuda_adam_step_vars(backend_t *be, size_t count, const backend_step_vars *v,
                                float beta1, float beta2, float eps, float weight_decay, float *w,
                                const float *g, float *m, float *v_sq)
{
    if (cuda_begin(be))
        cuda_ok(cuda_of(be),
                tt_k_adam_vars(cuda_of(be)->stream, count,
                               tt_adam_make(0.0f, beta1, beta2, eps, weight_decay, 1), v, w, g,
                               m, v_sq),
                "adam kernel (step block)");
}

static void cuda_decay_vars(backend_t *be, size_t count, const backend_step_vars *v, float *w)
{
    if (cuda_begin(be))
        cuda_ok(cuda_of(be), tt_k_decay_vars(cuda_of(be)->stream, count, v, w),
                "decay kernel (step block)");
}

static void cuda_dropout_forward_vars(backend_t *be, size_t count, float rate,
                                      const uint64_t *seed, const float *x, float *y,
                                      float *mask)
{
    if (cuda_begin(be))
        cuda_ok(cuda_of(be),
                tt_k_dropout_vars(cuda_of(be)->stream, count, rate, seed, x, y, mask),
                "dropout kernel (step block)");
}

void cuda_install_vars_ops(backend_t *be)
{
    be->dropout_forward_vars = cuda_dropout_forward_vars;
    be->sgd_step_vars = cuda_sgd_step_vars;
    be->adam_step_vars = cuda_adam_step_vars;
    be->decay_vars = cuda_decay_vars;
}
