/* model_saver.c - tensorpack's ModelSaver: writes model-<global_step>.safetensors
 * and the `checkpoint` pointer on its schedule (every epoch by default), and
 * keeps the newest max_to_keep files (0 keeps all): never the one the pointer
 * names. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <libconfig.h>

#include "train/trainer.h"
#include "util/log.h"

typedef struct {
    int max_to_keep;
} saver_state;

static int saver_create(callback_t *cb, trainer_t *tr, tt_err *err)
{
    saver_state *s = calloc(1, sizeof(*s));
    if (s == NULL)
        return err_set(err, TT_ERR_RUNTIME, "out of memory");
    s->max_to_keep = 10;
    if (cb->cfg->settings != NULL)
        config_setting_lookup_int(cb->cfg->settings, "max_to_keep", &s->max_to_keep);
    cb->state = s;
    return 0;
}

static int compare_steps(const void *a, const void *b)
{
    long long x = *(const long long *)a, y = *(const long long *)b;
    return x < y ? -1 : x > y;
}

/* Keeps max_to_keep model-<step>.safetensors: the one just written (step
 * `now`) and those before it, newest first; then, if room is left, those of
 * a later step, written by a run this one resumed from an older checkpoint
 * of (an abandoned future, older than anything this run wrote). */
static void saver_prune(const trainer_t *tr, int keep, long long now)
{
    DIR *d = opendir(tr->job->logdir);
    if (d == NULL || keep <= 0) {
        if (d)
            closedir(d);
        return;
    }
    long long *steps = NULL;
    size_t n = 0, cap = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        long long step;
        char tail[32];
        if (sscanf(e->d_name, "model-%lld.%31s", &step, tail) != 2 ||
            strcmp(tail, "safetensors") != 0)
            continue;
        if (n == cap) {
            size_t c = cap ? cap * 2 : 64;
            long long *p = realloc(steps, c * sizeof(*p));
            if (p == NULL)
                break; /* out of memory: prune what was listed */
            steps = p;
            cap = c;
        }
        steps[n++] = step;
    }
    closedir(d);
    if (steps == NULL)
        return;
    qsort(steps, n, sizeof(steps[0]), compare_steps);
    int kept = 0;
    for (int later = 0; later <= 1; later++)
        for (size_t i = n; i-- > 0;) {
            if ((steps[i] > now) != later)
                continue;
            if (kept < keep) {
                kept++;
                continue;
            }
            char path[4400];
            snprintf(path, sizeof(path), "%s/model-%lld.safetensors", tr->job->logdir, steps[i]);
            unlink(path);
        }
    free(steps);
}

static int saver_trigger(callback_t *cb, trainer_t *tr, tt_err *err)
{
    saver_state *s = cb->state;
    char name[256];
    if (trainer_save_latest(tr, name, sizeof(name), err) != 0)
        return -1;
    log_printf("model_saver: saved %s\n", name);
    if (tr->rank == 0)
        saver_prune(tr, s->max_to_keep, (long long)tr->global_step);
    return 0;
}

static void saver_destroy(callback_t *cb)
{
    free(cb->state);
}

const callback_ops callback_model_saver_ops = {
    .type = "model_saver",
    .create = saver_create,
    .trigger = saver_trigger,
    .destroy = saver_destroy,
    .trigger_after_monitors = true,
};
