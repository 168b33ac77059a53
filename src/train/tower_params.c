/* tower_params.c - what the towers hold in common, read and set from
 * outside the step: tower 0's copy of the parameters (published for
 * checkpoints and evaluation), the batchnorm statistics averaged over towers
 * and ranks, the learning rate, and each trainer type's optimizers
 * (trainer.h). checkpointing.c and the callbacks use these; they call
 * nothing of the loop's. */
#include "train/trainer.h"

#include <stdlib.h>

#include "comm/dist.h"

float trainer_get_learning_rate(trainer_t *tr)
{
    return tr->ops->optimizer(tr, 0)->cfg.learning_rate;
}

void trainer_set_learning_rate(trainer_t *tr, float lr)
{
    optimizer_t *opt;
    for (int i = 0; (opt = tr->ops->optimizer(tr, i)) != NULL; i++)
        opt->cfg.learning_rate = lr;
}

int trainer_create_optimizer(trainer_t *tr, backend_t *be, optimizer_t *opt, tt_err *err)
{
    const model_t *m = &tr->model;
    opt_param *params = calloc((size_t)m->n_params + 1, sizeof(opt_param));
    if (params == NULL)
        return err_set(err, TT_ERR_RUNTIME, "out of memory");
    int n = 0;
    for (int i = 0; i < m->n_params; i++) /* trainable first (model.h) */
        if (m->params[i].trainable)
            params[n++] = (opt_param){m->params[i].name, m->params[i].offset, m->params[i].count};
    int rc = optimizer_create(&tr->job->optimizer, be, m->n_trainable, params, n, opt, err);
    free(params);
    return rc;
}

int trainer_create_optimizers(trainer_t *tr, backend_t **backends, int n, optimizer_t *opts,
                              tt_err *err)
{
    for (int i = 0; i < n; i++)
        if (trainer_create_optimizer(tr, backends[i], &opts[i], err) != 0)
            return -1;
    return 0;
}

void trainer_sync_tower0(trainer_t *tr)
{
    if (tr->ops->publish != NULL)
        tr->ops->publish(tr);
}

float *trainer_average_batchnorm(trainer_t *tr)
{
    size_t lo = tr->model.n_trainable, n = tr->model.n_floats - lo;
    if (tr->n_towers * tr->n_ranks < 2 || n == 0)
        return NULL;
    float *sum = calloc(n, sizeof(float)), *one = malloc(n * sizeof(float));
    int ok = sum != NULL && one != NULL;
    for (int t = 0; ok && t < tr->n_towers; t++) {
        tower_t *tw = &tr->towers[t];
        tw->be->download(tw->be, one, tw->params + lo, n * sizeof(float));
        for (size_t i = 0; i < n; i++)
            sum[i] += one[i];
    }
    for (size_t i = 0; ok && i < n; i++)
        sum[i] /= (float)tr->n_towers;
    if (tr->n_ranks > 1 && (ok = dist_max_int(!ok) == 0)) { /* every rank alike */
        dist_sum_floats(sum, n);
        for (size_t i = 0; i < n; i++)
            sum[i] /= (float)tr->n_ranks;
    }
    free(one);
    if (!ok) {
        free(sum);
        return NULL; /* out of memory: the statistics stay tower-local */
    }
    return sum;
}

void trainer_sync_batchnorm(trainer_t *tr)
{
    size_t lo = tr->model.n_trainable, n = tr->model.n_floats - lo;
    float *avg = trainer_average_batchnorm(tr);
    for (int t = 0; avg != NULL && t < tr->n_towers; t++)
        tr->towers[t].be->upload(tr->towers[t].be, tr->towers[t].params + lo, avg,
                                 n * sizeof(float));
    free(avg);
}
