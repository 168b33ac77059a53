/* json.c - stats.json, tensorpack's JSONWriter: a JSON array with one object per
 * epoch, {"epoch_num": 1, "global_step": 468, "<scalar>": value, ...}, rewritten
 * atomically at every epoch end so a crash never leaves half a file. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cJSON.h>

#include "train/trainer.h"
#include "util/fileio.h"

typedef struct {
    char path[4200];
    cJSON *entries; /* array */
    cJSON *earlier; /* a resumed run's stats.json, read by json_resume_check */
} json_state;

static int json_create(monitor_t *mon, trainer_t *tr, tt_err *err)
{
    json_state *s = calloc(1, sizeof(*s));
    if (s == NULL)
        return err_set(err, TT_ERR_RUNTIME, "out of memory");
    mon->state = s;
    snprintf(s->path, sizeof(s->path), "%s/stats.json", tr->job->logdir);
    s->entries = cJSON_CreateArray();
    if (s->entries == NULL)
        return err_set(err, TT_ERR_RUNTIME, "out of memory");
    return 0;
}

/* On resume, stats.json continues. A missing file is fine; one that is there
 * and cannot be read, or is not an array, is an error, since rewriting it
 * would lose data: found here, before the resume writes anything. */
static int json_resume_check(monitor_t *mon, trainer_t *tr, tt_err *err)
{
    json_state *s = mon->state;
    cJSON_Delete(s->earlier);
    s->earlier = NULL;
    if (tr->global_step == 0 || !path_exists(s->path))
        return 0;
    char *text = NULL;
    size_t len = 0;
    tt_err read_err = {0};
    if (file_read_all(s->path, &text, &len, &read_err) != 0)
        return err_set(err, TT_ERR_USAGE, "%s; move it away to resume", read_err.msg);
    cJSON *old = cJSON_ParseWithLength(text, len);
    free(text);
    if (!cJSON_IsArray(old)) {
        cJSON_Delete(old);
        return err_set(err, TT_ERR_USAGE, "%s: not a JSON array; move it away to resume",
                       s->path);
    }
    s->earlier = old;
    return 0;
}

/* A resume continues the earlier file (read by json_resume_check, which
 * trainer_restore runs): the entries of epochs that will be run again (from
 * the resumed epoch on) are dropped. */
static int json_open(monitor_t *mon, trainer_t *tr, tt_err *err)
{
    json_state *s = mon->state;
    cJSON *old = s->earlier;
    if (old == NULL)
        return 0; /* a fresh run, or no earlier file */
    s->earlier = NULL;
    cJSON *e = old->child;
    while (e != NULL) {
        cJSON *next = e->next;
        cJSON *ep = cJSON_GetObjectItemCaseSensitive(e, "epoch_num");
        if (!cJSON_IsNumber(ep) || ep->valuedouble >= (double)tr->epoch_num)
            cJSON_Delete(cJSON_DetachItemViaPointer(old, e));
        e = next;
    }
    cJSON_Delete(s->entries);
    s->entries = old;
    return 0;
}

static int json_write(json_state *s, tt_err *err)
{
    char *text = cJSON_Print(s->entries);
    if (text == NULL)
        return err_set(err, TT_ERR_RUNTIME, "out of memory writing %s", s->path);
    size_t len = strlen(text);
    char *with_newline = realloc(text, len + 2);
    if (with_newline == NULL) {
        free(text);
        return err_set(err, TT_ERR_RUNTIME, "out of memory writing %s", s->path);
    }
    with_newline[len] = '\n';
    with_newline[len + 1] = '\0';
    int rc = file_write_atomic(s->path, with_newline, len + 1, err);
    free(with_newline);
    return rc;
}

static int json_epoch_end(monitor_t *mon, trainer_t *tr, const scalar_t *scalars, int n,
                          tt_err *err)
{
    json_state *s = mon->state;
    cJSON *e = cJSON_CreateObject();
    if (e == NULL)
        return err_set(err, TT_ERR_RUNTIME, "out of memory");
    cJSON_AddItemToArray(s->entries, e);
    if (!cJSON_AddNumberToObject(e, "epoch_num", (double)tr->epoch_num) ||
        !cJSON_AddNumberToObject(e, "global_step", (double)tr->global_step))
        return err_set(err, TT_ERR_RUNTIME, "out of memory");
    for (int i = 0; i < n; i++)
        if (!cJSON_AddNumberToObject(e, scalars[i].name, scalars[i].value))
            return err_set(err, TT_ERR_RUNTIME, "out of memory");
    return json_write(s, err);
}

static void json_destroy(monitor_t *mon)
{
    json_state *s = mon->state;
    if (s == NULL)
        return;
    cJSON_Delete(s->entries);
    cJSON_Delete(s->earlier);
    free(s);
}

const monitor_ops monitor_json_ops = {
    .type = "json",
    .create = json_create,
    .resume_check = json_resume_check,
    .open = json_open,
    .epoch_end = json_epoch_end,
    .destroy = json_destroy,
};
