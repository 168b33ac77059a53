/* sync_replicated.c - tensorpack's SyncMultiGPUTrainerReplicated (and TF's
 * MirroredStrategy): every tower holds a replica of the parameters and of the
 * optimizer state; each step every tower computes the gradients of its slice,
 * the gradients are all-reduced (averaged), and every tower applies the same
 * update, so the replicas stay bitwise identical.
 *
 * Under mpirun the towers of each process first average among themselves
 * over shared memory, then tower 0 of every rank joins one MPI all-reduce
 * per pack, and the towers copy its result back: Horovod's hierarchy. */
#include <stdlib.h>
#include <string.h>

#include "comm/dist.h"
#include "train/trainer.h"
#include "util/log.h"

/* gradient_packing below this many elements per pack does not pay. */
#define MIN_PACK 1024

static int replicated_setup(trainer_t *tr, tt_err *err)
{
    const trainer_cfg *tc = &tr->job->trainer;
    size_t count = tr->model.n_trainable;
    tr->allreduce = allreduce_create(tr->n_towers, err);
    if (tr->allreduce == NULL)
        return -1;
    if (strcmp(tc->allreduce, "auto") == 0) {
        tr->algo = allreduce_choose(tr->n_towers, count * sizeof(float));
        log_printf("allreduce: auto chose %s for %d towers and %zu gradients\n",
                   allreduce_algo_name(tr->algo), tr->n_towers, count);
    } else {
        int a = allreduce_algo_parse(tc->allreduce);
        if (a < 0)
            return err_set(err, TT_ERR_USAGE, "trainer.allreduce: '%s' needs the GPU backend",
                           tc->allreduce);
        tr->algo = (allreduce_algo)a;
    }
    tr->packs = 1;
    if (tc->gradient_packing > 0) {
        if (count / (size_t)tc->gradient_packing < MIN_PACK)
            log_printf("gradient_packing: %d packs would hold under %d gradients each; "
                       "packing skipped\n", tc->gradient_packing, MIN_PACK);
        else
            tr->packs = tc->gradient_packing;
    }
    return 0;
}

typedef struct {
    trainer_t *tr;
    const batch_t *b;
} step_arg;

/* Tower t's part of averaging one pack of gradients over every tower of
 * every rank. */
static void average_pack(trainer_t *tr, int t, float *grads, size_t count)
{
    allreduce_run(tr->allreduce, t, grads, count, tr->algo, true);
    if (tr->n_ranks == 1)
        return;
    if (t == 0) {
        dist_sum_floats(grads, count);
        for (size_t i = 0; i < count; i++)
            grads[i] /= (float)tr->n_ranks;
    }
    allreduce_broadcast(tr->allreduce, t, grads, count, 0);
}

static void replicated_tower(const tower_context *ctx, void *p)
{
    step_arg *a = p;
    trainer_t *tr = a->tr;
    int t = ctx->index;
    tower_t *tw = &tr->towers[t];
    trainer_tower_compute(tr, t, a->b);
    size_t count = tr->model.n_trainable;
    for (int k = 0; k < tr->packs; k++) {
        size_t lo = count * (size_t)k / (size_t)tr->packs;
        size_t hi = count * (size_t)(k + 1) / (size_t)tr->packs;
        average_pack(tr, t, tw->grads + lo, hi - lo);
    }
    optimizer_apply(&tr->opts[t], tw->params, tw->grads, tr->global_step + 1);
}

static int replicated_run_step(trainer_t *tr, const batch_t *b, tt_err *err)
{
    step_arg a = {tr, b};
    tower_team_run(tr->team, true, replicated_tower, &a);
    trainer_collect_step(tr, b);
    return 0;
}

const trainer_ops trainer_sync_replicated_ops = {
    .name = "sync_replicated",
    .setup = replicated_setup,
    .run_step = replicated_run_step,
};
