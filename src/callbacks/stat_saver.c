/* stat_saver.c - tensorpack's MinSaver / MaxSaver: when the monitored scalar
 * reaches a new minimum (maximum), the model is written to
 * min-<name>.safetensors (max-<name>.safetensors), with the value in its
 * metadata ("min_saver": "<name> <value>"), so a resumed run compares with
 * it and does not replace the best model with a worse one. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <libconfig.h>

#include "callbacks/stat_history.h"
#include "checkpoint/safetensors.h"
#include "comm/dist.h"
#include "train/trainer.h"
#include "util/fileio.h"
#include "util/log.h"

typedef struct {
    const char *monitor;
    bool is_max;
    double best;
} stat_saver_state;

static int stat_saver_create(callback_t *cb, bool is_max, tt_err *err)
{
    stat_saver_state *s = calloc(1, sizeof(*s));
    if (s == NULL)
        return err_set(err, TT_ERR_RUNTIME, "out of memory");
    s->is_max = is_max;
    s->best = is_max ? -INFINITY : INFINITY;
    if (cb->cfg->settings != NULL)
        config_setting_lookup_string(cb->cfg->settings, "monitor", &s->monitor);
    cb->state = s;
    if (s->monitor == NULL)
        return err_set(err, TT_ERR_USAGE, "%s: missing monitor", cb->cfg->type);
    return 0;
}

static int min_create(callback_t *cb, trainer_t *tr, tt_err *err)
{
    return stat_saver_create(cb, false, err);
}

static int max_create(callback_t *cb, trainer_t *tr, tt_err *err)
{
    return stat_saver_create(cb, true, err);
}

static void saver_path(const stat_saver_state *s, const trainer_t *tr, char *path, size_t len)
{
    snprintf(path, len, "%s/%s-%s.safetensors", tr->job->logdir, s->is_max ? "max" : "min",
             s->monitor);
}

/* On resume, the best so far is the value the existing file was written
 * with (rank 0 reads it: the log directory is its; the others are told, so
 * every rank decides alike, and saving is collective). A file without it
 * (written before it was recorded) is replaced by the next epoch's. */
static int stat_saver_before_train(callback_t *cb, trainer_t *tr, tt_err *err)
{
    stat_saver_state *s = cb->state;
    if (tr->global_step == 0)
        return 0;
    char path[4400];
    saver_path(s, tr, path, sizeof(path));
    double best = s->best;
    if (tr->rank == 0 && path_exists(path)) {
        safetensors_file *f = NULL;
        tt_err read_err = {0};
        const char *note = NULL, *space = NULL;
        if (safetensors_read(path, &f, &read_err) == 0 &&
            (note = safetensors_meta(f, cb->cfg->type)) != NULL &&
            (space = strrchr(note, ' ')) != NULL &&
            (size_t)(space - note) == strlen(s->monitor) &&
            strncmp(note, s->monitor, strlen(s->monitor)) == 0)
            best = strtod(space + 1, NULL);
        else
            log_printf("%s: %s has no %s value on record (%s): the next epoch's replaces it\n",
                       cb->cfg->type, path, s->monitor,
                       read_err.msg[0] ? read_err.msg : "written before it was kept");
        safetensors_free(f);
    }
    if (tr->n_ranks > 1)
        dist_broadcast(&best, sizeof(best), 0);
    s->best = best;
    return 0;
}

/* Runs after the other triggers of the epoch, so the scalar is this epoch's. */
static int stat_saver_after_epoch(callback_t *cb, trainer_t *tr, tt_err *err)
{
    stat_saver_state *s = cb->state;
    double value;
    if (!stat_current(tr, s->monitor, &value)) /* rank 0's: saving is collective */
        return 0; /* not reported this epoch */
    if (s->is_max ? !(value > s->best) : !(value < s->best))
        return 0;
    s->best = value;
    char path[4400], note[300];
    saver_path(s, tr, path, sizeof(path));
    snprintf(note, sizeof(note), "%s %.17g", s->monitor, value);
    if (trainer_save_checkpoint(tr, path, cb->cfg->type, note, err) != 0)
        return -1;
    log_printf("%s: %s = %.6g, saved %s\n", cb->cfg->type, s->monitor, value, path);
    return 0;
}

static void stat_saver_destroy(callback_t *cb)
{
    free(cb->state);
}

const callback_ops callback_min_saver_ops = {
    .type = "min_saver",
    .create = min_create,
    .before_train = stat_saver_before_train,
    .after_epoch = stat_saver_after_epoch,
    .destroy = stat_saver_destroy,
};

const callback_ops callback_max_saver_ops = {
    .type = "max_saver",
    .create = max_create,
    .before_train = stat_saver_before_train,
    .after_epoch = stat_saver_after_epoch,
    .destroy = stat_saver_destroy,
};
