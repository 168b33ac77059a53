/* step_graph.h - a device tower's training step (forward, loss, backward
 * and the optimizer's update) captured once per input buffer after a few
 * eager steps and replayed from then on (a CUDA graph; the simulated GPU
 * records its queued jobs): one launch a step instead of hundreds, what
 * small models spend their step on (GPU_SPEED step 7). Opt-in with the
 * environment's TT_CUDA_GRAPH=1 (towertrain(1), ENVIRONMENT); eager steps
 * stay the default and the fallback.
 *
 * A replay reads every per-step scalar of the update (backend.h,
 * backend_step_vars) and each dropout layer's seed from a device block
 * that one host-to-device copy fills before it; everything else a step
 * reads (its input buffer, the parameters, the other constants) is the
 * same at every step with the same input buffer. What would change between steps keeps the step eager:
 * see step_graph_create and step_graph_step. */
#ifndef TT_STEP_GRAPH_H
#define TT_STEP_GRAPH_H

#include <stdbool.h>

#include "dataflow/dataflow.h"
#include "optim/optimizer.h"
#include "util/err.h"

typedef struct trainer trainer_t;
typedef struct step_graph step_graph;

/* The step graph of tower 0 of a simple trainer updating with opt, or NULL
 * (then *err is clear) when TT_CUDA_GRAPH is not 1 or graphs cannot serve
 * this job; one log line says which when TT_CUDA_GRAPH=1. A
 * TT_CUDA_GRAPH other than 0 or 1 is a usage error. Call during setup
 * (it allocates device memory). */
step_graph *step_graph_create(trainer_t *tr, optimizer_t *opt, tt_err *err);

/* Runs the step of batch b as a graph (captured now, or replayed) and
 * marks the optimizer stepped; true when it did. false: the caller runs
 * the step eagerly (warm-up, a partial batch, the timeline recording, a
 * failed capture before). Errors go to the tower (device_tower_fail). */
bool step_graph_step(step_graph *sg, const batch_t *b);

/* Logs how many steps were replayed, then frees the graphs. */
void step_graph_free(step_graph *sg);

#endif
