/* shared_params.c - the parameter copy of sync_parameter_server and async. */
#include "train/shared_params.h"

#include "util/threadpool.h"

backend_t *shared_params_backend(const trainer_t *tr, const shared_params *sp)
{
    return sp->server != NULL ? sp->server : tr->backends[0];
}

/* Device towers: the shared copy and the towers' gradients live in page-
 * locked host memory of the first tower's device (cudaMallocHost, portable
 * across a process's GPUs), which a GPU's copies read and write directly,
 * so the towers' uploads and downloads overlap; from pageable memory each
 * goes through the driver's staging buffers. The server backend computes
 * on it as on any host memory. */
static float *pinned_block(trainer_t *tr, size_t n, tt_err *err)
{
    backend_t *be = tr->backends[0];
    return be->dev->host_alloc(be, n * sizeof(float), err);
}

int shared_params_create(trainer_t *tr, shared_params *sp, tt_err *err)
{
    size_t n = tr->model.n_trainable ? tr->model.n_trainable : 1;
    if (!tr->backends[0]->host_memory) { /* device towers: the copy in host memory */
        sp->server = backend_cpu_create(0, threadpool_cpu_share(1), err);
        if (sp->server == NULL)
            return -1;
        for (int t = 0; t < tr->n_towers; t++)
            if ((sp->host_grads[t] = pinned_block(tr, n, err)) == NULL)
                return -1;
        if ((sp->params = pinned_block(tr, n, err)) == NULL)
            return -1;
    } else if ((sp->params = tr->backends[0]->alloc(tr->backends[0], n * sizeof(float))) ==
               NULL) {
        return err_set(err, TT_ERR_RUNTIME, "out of memory for the shared parameters");
    }
    shared_params_reload(tr, sp);
    return trainer_create_optimizer(tr, shared_params_backend(tr, sp), &sp->opt, err);
}

void shared_params_read(trainer_t *tr, const shared_params *sp, int t)
{
    tower_t *tw = &tr->towers[t];
    size_t bytes = tr->model.n_trainable * sizeof(float);
    if (sp->server != NULL) /* host to device, in the tower's stream order */
        tw->be->upload(tw->be, tw->params, sp->params, bytes);
    else
        tw->be->copy(tw->be, tw->params, sp->params, bytes);
}

float *shared_params_grads(trainer_t *tr, shared_params *sp, int t)
{
    tower_t *tw = &tr->towers[t];
    if (sp->server == NULL)
        return tw->grads;
    tw->be->download(tw->be, sp->host_grads[t], tw->grads, tr->model.n_trainable * sizeof(float));
    return sp->host_grads[t];
}

void shared_params_reload(trainer_t *tr, shared_params *sp)
{
    size_t bytes = tr->model.n_trainable * sizeof(float);
    backend_t *be = tr->backends[0];
    if (sp->server != NULL)
        be->download(be, sp->params, tr->towers[0].params, bytes);
    else
        be->copy(be, sp->params, tr->towers[0].params, bytes);
}

void shared_params_free(trainer_t *tr, shared_params *sp)
{
    backend_t *be = tr->backends[0];
    if (sp->opt.be != NULL)
        optimizer_free(&sp->opt);
    if (sp->server != NULL) { /* pinned on the first tower's device */
        for (int t = 0; t < TT_MAX_TOWERS; t++)
            if (sp->host_grads[t] != NULL)
                be->dev->host_free(be, sp->host_grads[t]);
        if (sp->params != NULL)
            be->dev->host_free(be, sp->params);
        sp->server->destroy(sp->server);
        sp->server = NULL;
    } else if (sp->params != NULL) {
        be->free(be, sp->params);
    }
    sp->params = NULL;
}
