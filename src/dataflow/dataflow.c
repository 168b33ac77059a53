/* dataflow.c - batches by global step (towertrain.cfg(5), DATAFLOW) and the prefetch workers.
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
#include "dataflow/pixels.h"
#include "util/rng.h"
#include "util/trace.h"

#define PERM_CACHE 2

typedef struct {
    batch_t batch;
    int64_t ready_step; /* the step whose batch the slot holds, -1 when none */
    bool failed;        /* a sample of that step did not read: err says which */
    tt_err err;
} slot_t;

struct dataflow {
    const dataflow_cfg *cfg;
    const dataset_t *ds;
    uint64_t seed;
    dataflow_mode mode;
    int global_batch;        /* G (train) or the batch size (eval) */
    int local_offset, local_count;
    int parts;               /* dataflow_set_parts: the slice repeats in each part */
    int64_t batches;         /* per pass */
    shape3 out_shape;
    size_t sample_floats;    /* per-sample scratch size */
    float *norm;             /* byte sources: byte_norm's [C] means, [C] stds */
    int folded;              /* the augments the conversion applies (0 or 1) */

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
    dataset_scratch inline_scratch;
    bool failed;             /* the consumer reached a batch that did not read */
    tt_err error;
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
    /* part p of the global batch holds this rank's p-th piece at local_offset */
    size_t part = (size_t)df->global_batch / (size_t)df->parts;
    size_t piece = (size_t)df->local_count / (size_t)df->parts;
    for (int p = 0; p < df->parts; p++)
        memcpy(idx + (size_t)p * piece,
               df->perm[k] + (size_t)b * df->global_batch + (size_t)p * part + df->local_offset,
               piece * sizeof(uint32_t));
    pthread_mutex_unlock(&df->perm_lock);
}

/* Sample i into x (pixels_to_float where it is bytes): its label, or -1
 * with err. */
static int read_sample(dataflow_t *df, size_t i, float *x, shape3 *in, dataset_scratch *scratch,
                       tt_err *err)
{
    int64_t t0 = trace_begin();
    int label;
    const uint8_t *p = df->norm != NULL ? dataset_bytes(df->ds, i, &label) : NULL;
    if (p == NULL) {
        label = dataset_read(df->ds, i, x, in, scratch, err);
    } else {
        *in = dataset_shape(df->ds);
        size_t plane = (size_t)in->h * in->w;
        for (int c = 0; c < in->c; c++)
            pixels_to_float(p + (size_t)c * plane, plane, df->norm[c], df->norm[in->c + c],
                            x + (size_t)c * plane);
    }
    if (label >= 0)
        trace_end(TRACE_ROW_NONE, t0, TRACE_CAT_DATA, "decode", -1);
    return label;
}

/* Fills out with the batch of `step` using scratch of 2 * sample_floats floats
 * plus local_count indices, and a reader's buffers. Returns 0, or -1 with err
 * when a sample does not read (a corrupt image). */
static int fill_batch(dataflow_t *df, int64_t step, batch_t *out, float *tmp,
                      dataset_scratch *scratch, tt_err *err)
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
    out->step = step;
    const augment_cfg *aug = cfg->augment + df->folded;
    int n_aug = cfg->n_augment - df->folded;
    bool direct = df->norm != NULL && n_aug == 0; /* read_sample writes the batch's rows */
    for (int j = 0; j < n && j < 2; j++)
        dataset_prefetch(df->ds, idx[j]);
    for (int j = 0; j < n; j++) {
        float *dst = out->x + (size_t)j * out_floats, *x = direct ? dst : tmp;
        shape3 in;
        if (j + 2 < n)
            dataset_prefetch(df->ds, idx[j + 2]);
        int label = read_sample(df, idx[j], x, &in, scratch, err);
        if (label < 0)
            return -1;
        out->y[j] = label;
        if (direct)
            continue;
        rng_t rng = rng_make(df->seed ^ 0xa06a06ULL, (uint64_t)pass, idx[j]);
        int64_t t0 = n_aug > 0 ? trace_begin() : 0;
        augment_apply(aug, n_aug, &rng, x, in, tmp + df->sample_floats);
        trace_end(TRACE_ROW_NONE, t0, TRACE_CAT_DATA, "augment", -1);
        memcpy(dst, x, out_floats * sizeof(float));
    }
    out->n = n;
    return 0;
}

/* idx and CIFAR-10 samples are bytes, converted by pixels_to_float with
 * each channel's mean and std: those of a leading normalize, folded into the
 * conversion (the same bits as converting, then normalizing), else 0 and 1.
 * Returns 0, or -1 out of memory. */
static int byte_norm(dataflow_t *df)
{
    const dataflow_cfg *cfg = df->cfg;
    int label;
    if (dataset_size(df->ds) == 0 || dataset_bytes(df->ds, 0, &label) == NULL)
        return 0;
    int C = dataset_shape(df->ds).c;
    if ((df->norm = malloc(2 * (size_t)C * sizeof(float))) == NULL)
        return -1;
    df->folded = cfg->n_augment > 0 && cfg->augment[0].type == AUG_NORMALIZE;
    for (int c = 0; c < C; c++) {
        df->norm[c] = 0.0f;
        df->norm[C + c] = 1.0f;
        if (df->folded)
            augment_normalize_params(&cfg->augment[0], c, &df->norm[c], &df->norm[C + c]);
    }
    return 0;
}

static size_t scratch_bytes(const dataflow_t *df)
{
    return 2 * df->sample_floats * sizeof(float) + (size_t)df->global_batch * sizeof(uint32_t);
}

/* Every sample must leave the augmentations with one shape; the scratch must
 * hold the largest stage of any. Samples of one size (all but image folders)
 * take one look. */
static int plan_shapes(dataflow_t *df, tt_err *err)
{
    const dataflow_cfg *cfg = df->cfg;
    const dataset_t *ds = df->ds;
    size_t n = dataset_uniform(ds) ? 1 : dataset_size(ds);
    shape3 prev = {0, 0, 0};
    size_t first = 0;
    df->sample_floats = dataset_max_floats(ds);
    for (size_t i = 0; i < n; i++) {
        shape3 in = dataset_sample_shape(ds, i), out;
        if (i > 0 && in.c == prev.c && in.h == prev.h && in.w == prev.w)
            continue;
        prev = in;
        tt_err e = {0};
        if (augment_output_shape(cfg->augment, cfg->n_augment, in, &out, &e) != 0) {
            if (dataset_uniform(ds))
                return err_set(err, e.code, "%s", e.msg);
            char path[4400];
            image_folder_path(ds, i, path, sizeof(path));
            return err_set(err, TT_ERR_USAGE, "%s (%dx%d): %s", path, in.h, in.w, e.msg);
        }
        size_t need = augment_buffer_size(cfg->augment, cfg->n_augment, in);
        df->sample_floats = need > df->sample_floats ? need : df->sample_floats;
        if (i == 0) {
            df->out_shape = out;
            continue;
        }
        if (out.c != df->out_shape.c || out.h != df->out_shape.h || out.w != df->out_shape.w) {
            char a[4400], b[4400];
            image_folder_path(ds, first, a, sizeof(a));
            image_folder_path(ds, i, b, sizeof(b));
            shape3 fa = dataset_sample_shape(ds, first);
            return err_set(err, TT_ERR_USAGE, "%s is %dx%d but %s is %dx%d, and the dataflow's "
                           "augment keeps sizes apart (%dx%d and %dx%d): images of different "
                           "sizes need an augment that fixes the size (resize and center_crop, "
                           "or random_resized_crop)", a, fa.h, fa.w, b, in.h, in.w,
                           df->out_shape.h, df->out_shape.w, out.h, out.w);
        }
    }
    return 0;
}

int dataflow_set_parts(dataflow_t *df, int parts, tt_err *err)
{
    if (parts < 1 || df->global_batch % parts != 0 || df->local_count % parts != 0 ||
        df->local_offset + df->local_count / parts > df->global_batch / parts)
        return err_set(err, TT_ERR_USAGE, "dataflow: %d parts do not divide the batch slice "
                       "%d+%d of %d", parts, df->local_offset, df->local_count,
                       df->global_batch);
    df->parts = parts;
    return 0;
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
    df->parts = 1;
    df->batches = mode == DATAFLOW_TRAIN ? (int64_t)(n / (size_t)global_batch)
                                         : (int64_t)((n + (size_t)global_batch - 1) / global_batch);
    pthread_mutex_init(&df->perm_lock, NULL);
    pthread_mutex_init(&df->lock, NULL);
    pthread_cond_init(&df->space, NULL);
    pthread_cond_init(&df->ready, NULL);
    *out = df; /* from here dataflow_free cleans up */
    if (plan_shapes(df, err) != 0)
        goto fail;
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
    if ((df->inline_tmp = malloc(scratch_bytes(df))) == NULL || byte_norm(df) != 0)
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
    dataset_scratch scratch = {0};
    int row = trace_worker_row_take(); /* the timeline's "prefetch worker" row */
    pthread_mutex_lock(&df->lock);
    for (;;) {
        int64_t t0 = trace_begin(), waited = 0; /* the queue full: a span */
        while (!df->stop && (df->next_claim >= df->end ||
                             df->next_claim >= df->next_out + df->n_slots - 1)) {
            pthread_cond_wait(&df->space, &df->lock);
            waited = t0;
        }
        trace_end(row, waited, TRACE_CAT_DATA, "queue wait", -1);
        if (df->stop || tmp == NULL)
            break;
        int64_t step = df->next_claim++;
        slot_t *slot = &df->slots[step % df->n_slots];
        pthread_mutex_unlock(&df->lock);
        tt_err err = {0};
        bool failed = fill_batch(df, step, &slot->batch, tmp, &scratch, &err) != 0;
        pthread_mutex_lock(&df->lock);
        slot->failed = failed;
        slot->err = err;
        slot->ready_step = step;
        pthread_cond_broadcast(&df->ready);
    }
    pthread_mutex_unlock(&df->lock);
    trace_worker_row_release(row);
    dataset_scratch_free(&scratch);
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
    df->failed = false;
    err_clear(&df->error);
    df->end = df->mode == DATAFLOW_EVAL ? df->batches : INT64_MAX;
    for (int i = 0; i < df->n_slots; i++) {
        df->slots[i].ready_step = -1;
        df->slots[i].failed = false;
    }
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
    if (want >= df->end || df->failed)
        return NULL;
    if (df->n_workers == 0) {
        df->next_out++;
        if (fill_batch(df, want, &df->slots[0].batch, df->inline_tmp, &df->inline_scratch,
                       &df->error) != 0) {
            df->failed = true;
            return NULL;
        }
        return &df->slots[0].batch;
    }
    slot_t *slot = &df->slots[want % df->n_slots];
    pthread_mutex_lock(&df->lock);
    while (slot->ready_step != want)
        pthread_cond_wait(&df->ready, &df->lock);
    if (slot->failed) {
        /* the error of this step, whichever worker made it: the same as
         * with no workers */
        df->failed = true;
        df->error = slot->err;
        pthread_mutex_unlock(&df->lock);
        return NULL;
    }
    /* Taking `want` releases the batch handed out before it. */
    df->next_out = want + 1;
    pthread_cond_broadcast(&df->space);
    pthread_mutex_unlock(&df->lock);
    return &slot->batch;
}

int dataflow_error(const dataflow_t *df, tt_err *err)
{
    if (!df->failed)
        return 0;
    return err_set(err, df->error.code, "%s", df->error.msg);
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
    free(df->norm);
    dataset_scratch_free(&df->inline_scratch);
    pthread_mutex_destroy(&df->perm_lock);
    pthread_mutex_destroy(&df->lock);
    pthread_cond_destroy(&df->space);
    pthread_cond_destroy(&df->ready);
    free(df);
}
