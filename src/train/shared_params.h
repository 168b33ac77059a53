/* shared_params.h - one copy of the parameters kept outside the towers, with
 * the one optimizer that updates it: what sync_parameter_server and async
 * have in common. The copy lives on tower 0's backend (the parameter-server
 * device); the towers read it each step, the updates are applied to it.
 *
 * GPU towers: the copy lives in host memory, on a CPU backend of its own
 * (sp->server): the towers upload it each step, and the updates run there on
 * gradients the towers download (shared_params_grads). sync_parameter_server
 * with ps_device = "gpu" keeps its copy on the GPUs instead (its own file). */
#ifndef TT_SHARED_PARAMS_H
#define TT_SHARED_PARAMS_H

#include "optim/optimizer.h"
#include "train/trainer.h"
#include "util/err.h"

typedef struct {
    float *params;   /* [model.n_trainable]; batchnorm statistics stay with each tower */
    optimizer_t opt; /* the only optimizer that applies updates */
    backend_t *server;                 /* GPU towers: the host's CPU backend, else NULL */
    float *host_grads[TT_MAX_TOWERS];  /* GPU towers: each tower's gradients on the host */
} shared_params;

/* The backend holding the copy (and running its updates). */
backend_t *shared_params_backend(const trainer_t *tr, const shared_params *sp);

/* Tower t's gradients where the copy's updates can read them: the tower's
 * own block on CPU towers; on GPU towers, downloaded to the host (waits for
 * the tower's backward). */
float *shared_params_grads(trainer_t *tr, shared_params *sp, int t);

/* Takes tower 0's values (every tower starts from them). */
int shared_params_create(trainer_t *tr, shared_params *sp, tt_err *err);

/* Copies the trainable block into tower `t` (its statistics stay its own). */
void shared_params_read(trainer_t *tr, const shared_params *sp, int t);

/* Takes tower 0's trainable block again (after resume wrote it). */
void shared_params_reload(trainer_t *tr, shared_params *sp);

void shared_params_free(trainer_t *tr, shared_params *sp);

#endif
