/* trainer_eval.c - evaluation on tower 0: the loss and accuracy of a
 * dataflow, batches shared out over MPI ranks, optionally each batch's
 * logits to a visitor (inference_runner, towertrain eval; trainer.h). */
#include "train/trainer.h"

#include <stdlib.h>

#include "comm/dist.h"

int trainer_evaluate(trainer_t *tr, dataflow_t *df, double *loss, double *accuracy,
                     tt_err *err)
{
    return trainer_evaluate_each(tr, df, NULL, NULL, loss, accuracy, err);
}

int trainer_evaluate_each(trainer_t *tr, dataflow_t *df, trainer_eval_visit visit, void *arg,
                          double *loss, double *accuracy, tt_err *err)
{
    tower_t *t = &tr->towers[0];
    trainer_sync_tower0(tr);
    if (dataflow_start(df, 0, err) != 0)
        return -1;
    int classes = tr->job->model.classes;
    float *logits = visit ? malloc((size_t)t->max_n * classes * sizeof(float)) : NULL;
    if (visit && logits == NULL)
        return err_set(err, TT_ERR_RUNTIME, "out of memory");
    double sums[3] = {0.0, 0.0, 0.0}; /* loss, correct, samples */
    const batch_t *b;
    size_t sample = shape3_size(tr->model.input);
    /* under MPI the ranks take turns: batch i is rank (i mod ranks)'s */
    for (int64_t i = 0; (b = dataflow_next(df)) != NULL; i++) {
        if (i % tr->n_ranks != tr->rank)
            continue;
        /* The eval batch may exceed the tower's: run it in tower-sized chunks. */
        for (int off = 0; off < b->n; off += t->max_n) {
            int n = b->n - off < t->max_n ? b->n - off : t->max_n;
            tower_load_batch(t, n, b->x + (size_t)off * sample, b->y + off);
            const float *out = tower_step(t, n, false, false, 0);
            if (visit != NULL) {
                t->be->download(t->be, logits, out, (size_t)n * classes * sizeof(float));
                visit(arg, logits, b->y + off, n);
            }
            sums[0] += t->loss_sum;
            sums[1] += t->correct;
            sums[2] += n;
        }
    }
    free(logits);
    if (dataflow_error(df, err) != 0)
        return -1;
    dist_sum_doubles(sums, 3);
    if (sums[2] == 0)
        return err_set(err, TT_ERR_USAGE, "inference dataflow is empty");
    *loss = sums[0] / sums[2];
    *accuracy = sums[1] / sums[2];
    return 0;
}
