/* checkpointing.c - the trainer's side of checkpoints: it gathers the state
 * of a run into host memory for checkpoint/ (which knows nothing of
 * trainers), and puts what checkpoint/ reads back into the towers and into
 * the trainer type's optimizers and parameter copy. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint/checkpoint.h"
#include "comm/dist.h"
#include "train/trainer.h"
#include "util/log.h"
#include "util/trace.h"

/* Completed epochs, and the steps done in the epoch after them. */
static int64_t completed_epochs(const trainer_t *tr, int64_t *local)
{
    if (tr->local_step >= tr->steps_per_epoch) {
        *local = 0;
        return tr->epoch_num;
    }
    *local = tr->local_step;
    return tr->epoch_num - 1;
}

/* Host buffers for the model block and the saved optimizer's slots. */
static int state_alloc(trainer_t *tr, checkpoint_state *s, tt_err *err)
{
    const model_t *m = &tr->model;
    const optimizer_t *opt = tr->ops->optimizer(tr, 0);
    *s = (checkpoint_state){0};
    s->n_slots = opt->n_slots;
    s->slot_names = opt->slot_names;
    /* zeroed: the 16-float padding between tensors is never read from a
     * checkpoint, and restore uploads the whole block (valgrind: Adam ran on
     * uninitialised padding after a resume) */
    s->params = calloc(m->n_floats + (size_t)s->n_slots * m->n_trainable + 1, sizeof(float));
    if (s->params == NULL)
        return err_set(err, TT_ERR_RUNTIME, "out of memory");
    s->slots = s->params + m->n_floats;
    return 0;
}

/* The downloads of a save read device memory: tell each device (the sim
 * device injects TT_SIM_FAULT=download_error:checkpoint there). */
static void devices_mark(trainer_t *tr, const char *phase)
{
    for (int t = 0; t < tr->n_towers; t++) {
        backend_t *be = tr->backends[t];
        if (be->dev != NULL && be->dev->mark != NULL)
            be->dev->mark(be, phase);
    }
}

/* A checkpoint only from a state every device confirms (issue 27): a
 * failed download leaves zeros in the host copy, and an error may first
 * show in the wait after it; then no file is written, the pointer does not
 * move and nothing older is deleted (the caller stops at this error). */
static int devices_confirm(trainer_t *tr, const char *path, tt_err *err)
{
    const optimizer_t *opt = tr->ops->optimizer(tr, 0);
    for (int t = 0; t <= tr->n_towers; t++) {
        backend_t *be = t < tr->n_towers ? tr->backends[t] : opt->be;
        tt_err dev_err = {0};
        if (be->dev != NULL && be->dev->sync(be, &dev_err) != 0)
            return err_set(err, TT_ERR_RUNTIME, "%s not written: tower %d (%s:%d): %s", path,
                           t < tr->n_towers ? t : 0, be->dev->kind, be->device, dev_err.msg);
    }
    return 0;
}

/* The lines "<index> <type> <state>" of the callbacks that keep a state
 * (callback_ops.state_save), malloc'd, or NULL when none does; -1 out of
 * memory. A state longer than a line is given room until it fits
 * (stat_monitor_param keeps last_k values). */
static int callback_state_collect(trainer_t *tr, char **out, tt_err *err)
{
    *out = NULL;
    size_t len = 0;
    for (int i = 0; i < tr->n_callbacks; i++) {
        callback_t *cb = &tr->callbacks[i];
        if (cb->ops->state_save == NULL)
            continue;
        /* "4 moving_average_summary@extra_callbacks[1] ": the index, the
         * type, and the key it had, for the note when it cannot go back */
        char head[192], key[96];
        job_plugin_key(&tr->job->callbacks[i], key, sizeof(key));
        int h = snprintf(head, sizeof(head), "%d %s@%s ", i, cb->ops->type, key);
        for (size_t room = 4096;; room *= 4) {
            char *p = room <= ((size_t)1 << 30) ? realloc(*out, len + (size_t)h + room + 2) : NULL;
            if (p == NULL) {
                free(*out);
                *out = NULL;
                return err_set(err, TT_ERR_RUNTIME, "out of memory");
            }
            *out = p;
            memcpy(p + len, head, (size_t)h);
            if (cb->ops->state_save(cb, p + len + h, room) == 0)
                break;
        }
        len += strlen(*out + len);
        (*out)[len++] = '\n';
        (*out)[len] = '\0';
    }
    return 0;
}

/* Gives each callback its line of a restored checkpoint's callback_state,
 * when the callback at that index is of that type (a resume whose --set
 * changed the callbacks list leaves the others as they start, and says so). */
static int callback_state_restore(trainer_t *tr, const char *text, tt_err *err)
{
    for (const char *p = text; p != NULL && *p != '\0';) {
        const char *eol = strchr(p, '\n');
        size_t n = eol != NULL ? (size_t)(eol - p) : strlen(p);
        char *line = strndup(p, n), type[160];
        int index, used = 0;
        p = eol != NULL ? eol + 1 : NULL;
        if (line == NULL)
            return err_set(err, TT_ERR_RUNTIME, "out of memory");
        if (sscanf(line, "%d %159s %n", &index, type, &used) < 2 || used == 0) {
            free(line);
            continue;
        }
        char *key = strchr(type, '@'); /* absent in checkpoints before the key was kept */
        if (key != NULL)
            *key++ = '\0';
        callback_t *cb = index >= 0 && index < tr->n_callbacks ? &tr->callbacks[index] : NULL;
        int rc = 0;
        if (cb == NULL || strcmp(cb->ops->type, type) != 0 || cb->ops->state_load == NULL) {
            char where[96];
            if (key != NULL)
                snprintf(where, sizeof(where), "%s", key);
            else
                snprintf(where, sizeof(where), "callback %d", index);
            log_printf("resume: %s (%s) of the job as it was is not at that place in this job: "
                       "its state starts afresh\n", where, type);
        } else {
            rc = cb->ops->state_load(cb, tr, line + used, err);
        }
        free(line);
        if (rc != 0)
            return -1;
    }
    return 0;
}

/* Every replica's (rank x towers + tower) non-trainable block, gathered to
 * every rank (a sum of blocks each rank fills its own rows of); NULL with one
 * replica, no such tensor, or out of memory on some rank. Collective. */
static float *replica_stats_gather(trainer_t *tr, int *n_replicas)
{
    size_t lo = tr->model.n_trainable, n = tr->model.n_floats - lo;
    int replicas = tr->n_ranks * tr->n_towers;
    if (replicas < 2 || n == 0)
        return NULL;
    float *all = calloc((size_t)replicas * n, sizeof(float));
    int ok = all != NULL;
    if (tr->n_ranks > 1)
        ok = dist_max_int(!ok) == 0;
    if (!ok) {
        free(all);
        return NULL;
    }
    for (int t = 0; t < tr->n_towers; t++) {
        tower_t *tw = &tr->towers[t];
        tw->be->download(tw->be, all + (size_t)(tr->rank * tr->n_towers + t) * n,
                         tw->params + lo, n * sizeof(float));
    }
    if (tr->n_ranks > 1)
        dist_sum_floats(all, (size_t)replicas * n); /* x + 0: exact */
    *n_replicas = replicas;
    return all;
}

/* A resume from a checkpoint written mid-epoch gives each replica its own
 * statistics back when the replicas are as they were (else every one keeps
 * the average the parameters hold, and the run is no longer bit for bit). */
static void replica_stats_restore(trainer_t *tr, const checkpoint_state *s)
{
    size_t lo = tr->model.n_trainable, n = tr->model.n_floats - lo;
    if (s->replica_stats == NULL)
        return;
    if (s->n_replicas != tr->n_ranks * tr->n_towers) {
        if (tr->rank == 0)
            log_printf("resume: the checkpoint holds the batchnorm statistics of %d replicas, "
                       "this run has %d: every one starts from their average\n", s->n_replicas,
                       tr->n_ranks * tr->n_towers);
        return;
    }
    for (int t = 0; t < tr->n_towers; t++)
        tr->towers[t].be->upload(tr->towers[t].be, tr->towers[t].params + lo,
                                 s->replica_stats + (size_t)(tr->rank * tr->n_towers + t) * n,
                                 n * sizeof(float));
}

int trainer_save_checkpoint(trainer_t *tr, const char *path, const char *note_key,
                            const char *note_value, tt_err *err)
{
    trainer_sync_tower0(tr);
    /* the towers' statistics averaged into the file, not given back: a save
     * mid-epoch does not change what they train with (collective under MPI:
     * every rank comes here) */
    float *stats = trainer_average_batchnorm(tr);
    /* mid-epoch, each replica's own too, so a resume goes on from them bit
     * for bit (collective under MPI, as the condition is every rank's) */
    int n_replicas = 0;
    int64_t local = 0;
    completed_epochs(tr, &local);
    float *replicas = local > 0 ? replica_stats_gather(tr, &n_replicas) : NULL;
    if (tr->rank != 0) {
        free(stats);
        free(replicas);
        return 0; /* rank 0 writes; the replicas are the same everywhere */
    }
    const model_t *m = &tr->model;
    checkpoint_state s;
    if (state_alloc(tr, &s, err) != 0) {
        free(stats);
        free(replicas);
        return -1;
    }
    s.replica_stats = replicas;
    s.n_replicas = n_replicas;
    devices_mark(tr, "checkpoint");
    tower_get_params(&tr->towers[0], s.params);
    if (stats != NULL)
        memcpy(s.params + m->n_trainable, stats, (m->n_floats - m->n_trainable) * sizeof(float));
    free(stats);
    const optimizer_t *opt = tr->ops->optimizer(tr, 0);
    for (int i = 0; i < s.n_slots; i++)
        opt->be->download(opt->be, s.slots + (size_t)i * m->n_trainable, opt->slots[i],
                          m->n_trainable * sizeof(float));
    if (devices_confirm(tr, path, err) != 0) {
        free(s.replica_stats);
        free(s.params);
        return -1;
    }
    s.epochs_done = completed_epochs(tr, &s.local_step);
    s.global_step = tr->global_step;
    s.updates = tr->updates;
    s.global_batch = tr->global_batch;
    s.seed = tr->job->seed;
    s.note_key = note_key;
    s.note_value = note_value;
    s.learning_rate = trainer_get_learning_rate(tr);
    s.job_learning_rate = tr->job->optimizer.learning_rate;
    if (callback_state_collect(tr, &s.callback_state, err) != 0) {
        free(s.replica_stats);
        free(s.params);
        return -1;
    }
    if (tr->loss_scaling) {
        s.loss_scale = tr->loss_scale.scale;
        s.loss_scale_good_steps = tr->loss_scale.good_steps;
    }
    char *job_text = NULL;
    size_t job_len = 0;
    FILE *mem = open_memstream(&job_text, &job_len);
    int rc = -1;
    if (mem == NULL || job_write(tr->job, mem) != 0 || fclose(mem) != 0) {
        if (mem == NULL)
            err_set(err, TT_ERR_RUNTIME, "out of memory writing %s", path);
        else
            err_set(err, TT_ERR_RUNTIME, "cannot format the resolved job for %s", path);
    } else {
        s.job_text = job_text;
        int64_t t0 = trace_begin();
        rc = checkpoint_write(path, m, &s, err);
        trace_end(TRACE_ROW_TRAINER, t0, TRACE_CAT_TRAINER, "checkpoint", -1);
    }
    free(job_text);
    free(s.callback_state);
    free(s.replica_stats);
    free(s.params);
    return rc;
}

int trainer_save_latest(trainer_t *tr, char *name, size_t name_len, tt_err *err)
{
    char file[128], path[4400];
    snprintf(file, sizeof(file), "model-%" PRId64 ".safetensors", tr->global_step);
    snprintf(path, sizeof(path), "%s/%s", tr->job->logdir, file);
    if (trainer_save_checkpoint(tr, path, NULL, NULL, err) != 0)
        return -1;
    /* under MPI rank 0 alone writes the log directory */
    if (tr->rank == 0 && checkpoint_write_pointer(tr->job->logdir, file, err) != 0)
        return -1;
    if (name != NULL)
        snprintf(name, name_len, "%s", file);
    return 0;
}

int trainer_load_params(trainer_t *tr, const char *path, tt_err *err)
{
    float *host = calloc(tr->model.n_floats + 1, sizeof(float));
    if (host == NULL)
        return err_set(err, TT_ERR_RUNTIME, "out of memory");
    int rc = checkpoint_read_params(path, &tr->model, host, err);
    for (int t = 0; rc == 0 && t < tr->n_towers; t++)
        tower_set_params(&tr->towers[t], host);
    if (rc == 0 && tr->impl != NULL && tr->ops->reload != NULL)
        tr->ops->reload(tr);
    free(host);
    return rc;
}

int trainer_restore(trainer_t *tr, const char *path, tt_err *err)
{
    const model_t *m = &tr->model;
    checkpoint_state s;
    if (state_alloc(tr, &s, err) != 0)
        return -1;
    if (checkpoint_read(path, m, &s, err) != 0) {
        free(s.callback_state);
        free(s.replica_stats);
        free(s.params);
        return -1;
    }
    for (int t = 0; t < tr->n_towers; t++)
        tower_set_params(&tr->towers[t], s.params);
    replica_stats_restore(tr, &s);
    free(s.replica_stats);
    optimizer_t *opt;
    for (int i = 0; (opt = tr->ops->optimizer(tr, i)) != NULL; i++) {
        for (int k = 0; k < opt->n_slots; k++)
            opt->be->upload(opt->be, opt->slots[k], s.slots + (size_t)k * m->n_trainable,
                            m->n_trainable * sizeof(float));
        opt->has_state = s.updates != 0 && s.global_step > 0;
    }
    tr->global_step = s.global_step;
    tr->updates = s.updates; /* -1: the trainer's reload derives it, else as below */
    tr->local_step = s.local_step;
    tr->epoch_num = s.epochs_done + 1;
    tr->resumed_global_batch = s.global_batch;
    if (tr->loss_scaling && s.loss_scale > 0) { /* else an fp32 run goes on in fp16: from 2^16 */
        tr->loss_scale.scale = s.loss_scale;
        tr->loss_scale.good_steps = s.loss_scale_good_steps;
    }
    if (tr->ops->reload != NULL)
        tr->ops->reload(tr);
    if (tr->updates < 0) /* a checkpoint from before the count: one update a step */
        tr->updates = tr->global_step;
    free(s.params);
    /* the rate in effect (stat_monitor_param may have changed it; a schedule
     * sets its own in before_train), unless a --set gave the job another
     * optimizer.learning_rate than the run had; then the callbacks' states */
    float job_lr = tr->job->optimizer.learning_rate;
    if (s.learning_rate > 0 && s.job_learning_rate == job_lr) {
        trainer_set_learning_rate(tr, s.learning_rate);
        tr->learning_rate_restored = true;
    } else if (s.learning_rate > 0 && s.learning_rate != job_lr) {
        log_printf("resume: optimizer.learning_rate is now %g (the run had %g in effect): "
                   "%g is used\n", (double)job_lr, (double)s.learning_rate, (double)job_lr);
    }
    int rc = callback_state_restore(tr, s.callback_state, err);
    free(s.callback_state);
    if (rc != 0)
        return -1;
    /* before anything is written: what the monitors will read back */
    for (int k = 0; k < tr->n_monitors; k++) {
        monitor_t *mon = &tr->monitors[k];
        if (mon->ops->resume_check && mon->ops->resume_check(mon, tr, err) != 0)
            return -1;
    }
    return 0;
}
