/* shared_params.c - the parameter copy of sync_parameter_server and async. */
#include "train/shared_params.h"

int shared_params_create(trainer_t *tr, shared_params *sp, tt_err *err)
{
    backend_t *be = tr->backends[0];
    size_t n = tr->model.n_trainable ? tr->model.n_trainable : 1;
    sp->params = be->alloc(be, n * sizeof(float));
    if (sp->params == NULL)
        return err_set(err, TT_ERR_RUNTIME, "out of memory for the shared parameters");
    shared_params_reload(tr, sp);
    return optimizer_create(&tr->job->optimizer, be, tr->model.n_trainable, &sp->opt, err);
}

void shared_params_read(trainer_t *tr, const shared_params *sp, int t)
{
    tower_t *tw = &tr->towers[t];
    tw->be->copy(tw->be, tw->params, sp->params, tr->model.n_trainable * sizeof(float));
}

void shared_params_reload(trainer_t *tr, shared_params *sp)
{
    backend_t *be = tr->backends[0];
    be->copy(be, sp->params, tr->towers[0].params, tr->model.n_trainable * sizeof(float));
}

void shared_params_free(trainer_t *tr, shared_params *sp)
{
    if (sp->opt.be != NULL)
        optimizer_free(&sp->opt);
    if (sp->params != NULL)
        tr->backends[0]->free(tr->backends[0], sp->params);
    sp->params = NULL;
}
