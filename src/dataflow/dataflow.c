/* dataflow.c - batches by global step (SPEC 3) and the prefetch workers.
 *
 * A batch is a pure function of (seed, step), so workers claim steps in order,
 * fill the batch of their step into that step's slot, and dataflow_next hands
 * the slots out in step order. There are queue + 1 slots: the one the consumer
 * holds, and `queue` being filled ahead of it.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "dataflow/augment.h"
#include "dataflow/dataset_impl.h"
#include "util/rng.h"

#define PERM_CACHE 2

typedef struct {
    batch_t batch;
    int64_t ready_step; /* the step whose batch the slot holds, -1 when none */
} slot_t;

struct dataflow {
    const dataflow_cfg *cfg;
    const dataset_t *ds;
    uint64_t seed;
    dataflow_mode mode;
    int global_batch;        /* G (train) or the batch size (eval) */
    int local_offset, local_count;
    int64_t batches;         /* per pass */
    shape3 in_shape, out_shape;
    size_t sample_floats;    /* per-sample scratch size */

    /* permutations of recent passes, shared by the workers */
    pthread_mutex_t perm_lock;
    int64_t perm_pass[PERM_CACHE];
    uint32_t *perm[PERM_CACHE];
    int perm_next;

    /* prefetch */
    int n_workers;
    pthread_t *workers;
    bool running;
    slot_t *slots;
    int n_slots;
    pthread_mutex_t lock;
    pthread_cond_t space;    /* a slot may be free */
    pthread_cond_t ready;    /* a slot was filled */
    int64_t next_claim;      /* next step a worker takes */
    int64_t next_out;        /* next step the consumer takes */
    int64_t end;             /* eval: number of batches; train: INT64_MAX */
    bool stop;
    float *inline_tmp;       /* workers = 0 */
};

/* Fisher-Yates with a stream that depends only on (seed, pass). */
static void make_perm(const dataflow_t *df, int64_t pass, uint32_t *perm)
{
    size_t n = dataset_size(df->ds);
    for (size_t i = 0; i < n; i++)
        perm[i] = (uint32_t)i;
    if (!df->cfg->shuffle || df->mode == DATAFLOW_EVAL)
        return;
    rng_t rng = rng_make(df->seed, (uint64_t)pass, 0x5eedULL);
    for (size_t i = n - 1; i > 0; i--) {
        size_t j = rng_below(&rng, (uint32_t)(i + 1));
        uint32_t t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
}

/* Copies the sample indices of step `step` into idx (local_count of them). */
static void step_indices(dataflow_t *df, int64_t step, uint32_t *idx)
{
    int64_t pass = step / df->batches, b = step % df->batches;
    pthread_mutex_lock(&df->perm_lock);
    int k;
    for (k = 0; k < PERM_CACHE; k++)
        if (df->perm_pass[k] == pass)
            break;
    if (k == PERM_CACHE) {
        k = df->perm_next;
        df->perm_next = (df->perm_next + 1) % PERM_CACHE;
        make_perm(df, pass, df->perm[k]);
        df->perm_pass[k] = pass;
    }
    memcpy(idx, df->perm[k] + (size_t)b * df->global_batch + df->local_offset,
           (size_t)df->local_count * sizeof(uint32_t));
    pthread_mutex_unlock(&df->perm_lock);
}

/* Fills out with the batch of `step` using scratch of 2 * sample_floats floats
 * plus local_count indices. */
static void fill_batch(dataflow_t *df, int64_t step, batch_t *out, float *tmp)
{
    const dataflow_cfg *cfg = df->cfg;
    size_t out_floats = shape3_size(df->out_shape);
    uint32_t *idx = (uint32_t *)(tmp + 2 * df->sample_floats);
    int64_t pass;
    int n;
    if (df->mode == DATAFLOW_TRAIN) {
        step_indices(df, step, idx);
        pass = step / df->batches;
        n = df->local_count;
    } else {
        size_t first = (size_t)step * (size_t)df->global_batch;
        size_t left = dataset_size(df->ds) - first;
        n = left < (size_t)df->global_batch ? (int)left : df->global_batch;
        for (int j = 0; j < n; j++)
            idx[j] = (uint32_t)(first + (size_t)j);
        pass = 0;
    }
    for (int j = 0; j < n; j++) {
        float *x = tmp;
        out->y[j] = dataset_get(df->ds, idx[j], x);
        rng_t rng = rng_make(df->seed ^ 0xa06a06ULL, (uint64_t)pass, idx[j]);
        augment_apply(cfg->augment, cfg->n_augment, &rng, x, df->in_shape,
                      tmp + df->sample_floats);
        memcpy(out->x + (size_t)j * out_floats, x, out_floats * sizeof(float));
    }
    out->n = n;
    out->step = step;
}

static size_t scratch_bytes(const dataflow_t *df)
{
    return 2 * df->sample_floats * sizeof(float) + (size_t)df->global_batch * sizeof(uint32_t);
}

void dataflow_make_batch(const dataflow_t *df, int64_t step, batch_t *out)
{
    float *tmp = malloc(scratch_bytes(df));
    if (tmp == NULL) {
        out->n = 0;
        return;
    }
    /* the permutation cache is the only state touched, under its lock */
    fill_batch((dataflow_t *)df, step, out, tmp);
    free(tmp);
}

int dataflow_create(const dataflow_cfg *cfg, const dataset_t *ds, uint64_t seed,
                    dataflow_mode mode, int global_batch, int local_offset, int local_count,
                    dataflow_t **out, tt_err *err)
{
    size_t n = dataset_size(ds);
    if (global_batch < 1 || local_offset < 0 || local_count < 1 ||
        local_offset + local_count > global_batch)
        return err_set(err, TT_ERR_USAGE, "dataflow: bad batch slice %d+%d of %d", local_offset,
                       local_count, global_batch);
    if (mode == DATAFLOW_TRAIN && n < (size_t)global_batch)
        return err_set(err, TT_ERR_USAGE, "dataflow: %zu samples%s are fewer than one global "
                       "batch of %d (batch_size x towers x ranks)", n,
                       cfg->limit > 0 ? " (limit)" : "", global_batch);
    dataflow_t *df = calloc(1, sizeof(*df));
    if (df == NULL)
        return err_set(err, TT_ERR_RUNTIME, "out of memory");
    df->cfg = cfg;
    df->ds = ds;
    df->seed = seed;
    df->mode = mode;
    df->global_batch = global_batch;
    df->local_offset = mode == DATAFLOW_TRAIN ? local_offset : 0;
    df->local_count = mode == DATAFLOW_TRAIN ? local_count : global_batch;
    df->batches = mode == DATAFLOW_TRAIN ? (int64_t)(n / (size_t)global_batch)
                                         : (int64_t)((n + (size_t)global_batch - 1) / global_batch);
    df->in_shape = dataset_shape(ds);
    pthread_mutex_init(&df->perm_lock, NULL);
    pthread_mutex_init(&df->lock, NULL);
    pthread_cond_init(&df->space, NULL);
    pthread_cond_init(&df->ready, NULL);
    *out = df; /* from here dataflow_free cleans up */
    if (augment_output_shape(cfg->augment, cfg->n_augment, df->in_shape, &df->out_shape, err))
        goto fail;
    df->sample_floats = augment_buffer_size(cfg->augment, cfg->n_augment, df->in_shape);
    for (int k = 0; k < PERM_CACHE; k++) {
        df->perm_pass[k] = -1;
        if (mode == DATAFLOW_TRAIN && (df->perm[k] = malloc(n * sizeof(uint32_t))) == NULL)
            goto oom;
    }
    df->n_workers = cfg->workers;
    df->n_slots = (df->n_workers > 0 ? cfg->queue : 0) + 1;
    df->slots = calloc((size_t)df->n_slots, sizeof(slot_t));
    if (df->slots == NULL)
        goto oom;
    size_t out_floats = shape3_size(df->out_shape);
    for (int i = 0; i < df->n_slots; i++) {
        df->slots[i].ready_step = -1;
        df->slots[i].batch.x = malloc((size_t)df->local_count * out_floats * sizeof(float));
        df->slots[i].batch.y = malloc((size_t)df->local_count * sizeof(int32_t));
        if (df->slots[i].batch.x == NULL || df->slots[i].batch.y == NULL)
            goto oom;
    }
    if ((df->inline_tmp = malloc(scratch_bytes(df))) == NULL)
        goto oom;
    return 0;
oom:
    err_set(err, TT_ERR_RUNTIME, "out of memory for the dataflow");
fail:
    dataflow_free(df);
    *out = NULL;
    return -1;
}

shape3 dataflow_shape(const dataflow_t *df)
{
    return df->out_shape;
}

int64_t dataflow_batches_per_pass(const dataflow_t *df)
{
    return df->batches;
}

static void *worker_main(void *p)
{
    dataflow_t *df = p;
    float *tmp = malloc(scratch_bytes(df));
    pthread_mutex_lock(&df->lock);
    for (;;) {
        while (!df->stop && (df->next_claim >= df->end ||
                             df->next_claim >= df->next_out + df->n_slots - 1))
            pthread_cond_wait(&df->space, &df->lock);
        if (df->stop || tmp == NULL)
            break;
        int64_t step = df->next_claim++;
        slot_t *slot = &df->slots[step % df->n_slots];
        pthread_mutex_unlock(&df->lock);
        fill_batch(df, step, &slot->batch, tmp);
        pthread_mutex_lock(&df->lock);
        slot->ready_step = step;
        pthread_cond_broadcast(&df->ready);
    }
    pthread_mutex_unlock(&df->lock);
    free(tmp);
    return NULL;
}

static void stop_workers(dataflow_t *df)
{
    if (!df->running)
        return;
    pthread_mutex_lock(&df->lock);
    df->stop = true;
    pthread_cond_broadcast(&df->space);
    pthread_mutex_unlock(&df->lock);
    for (int i = 0; i < df->n_workers; i++)
        pthread_join(df->workers[i], NULL);
    free(df->workers);
    df->workers = NULL;
    df->running = false;
}

int dataflow_start(dataflow_t *df, int64_t first_step, tt_err *err)
{
    stop_workers(df);
    df->stop = false;
    df->next_claim = df->next_out = df->mode == DATAFLOW_EVAL ? 0 : first_step;
    df->end = df->mode == DATAFLOW_EVAL ? df->batches : INT64_MAX;
    for (int i = 0; i < df->n_slots; i++)
        df->slots[i].ready_step = -1;
    if (df->n_workers == 0)
        return 0;
    df->workers = calloc((size_t)df->n_workers, sizeof(pthread_t));
    if (df->workers == NULL)
        return err_set(err, TT_ERR_RUNTIME, "out of memory");
    for (int i = 0; i < df->n_workers; i++) {
        if (pthread_create(&df->workers[i], NULL, worker_main, df) != 0) {
            df->n_workers = i;
            df->running = true;
            stop_workers(df);
            return err_set(err, TT_ERR_RUNTIME, "cannot start prefetch workers");
        }
    }
    df->running = true;
    return 0;
}

const batch_t *dataflow_next(dataflow_t *df)
{
    int64_t want = df->next_out;
    if (want >= df->end)
        return NULL;
    if (df->n_workers == 0) {
        df->next_out++;
        fill_batch(df, want, &df->slots[0].batch, df->inline_tmp);
        return &df->slots[0].batch;
    }
    slot_t *slot = &df->slots[want % df->n_slots];
    pthread_mutex_lock(&df->lock);
    while (slot->ready_step != want)
        pthread_cond_wait(&df->ready, &df->lock);
    /* Taking `want` releases the batch handed out before it. */
    df->next_out = want + 1;
    pthread_cond_broadcast(&df->space);
    pthread_mutex_unlock(&df->lock);
    return &slot->batch;
}

void dataflow_free(dataflow_t *df)
{
    if (df == NULL)
        return;
    stop_workers(df);
    for (int k = 0; k < PERM_CACHE; k++)
        free(df->perm[k]);
    for (int i = 0; df->slots && i < df->n_slots; i++) {
        free(df->slots[i].batch.x);
        free(df->slots[i].batch.y);
    }
    free(df->slots);
    free(df->inline_tmp);
    pthread_mutex_destroy(&df->perm_lock);
    pthread_mutex_destroy(&df->lock);
    pthread_cond_destroy(&df->space);
    pthread_cond_destroy(&df->ready);
    free(df);
}
