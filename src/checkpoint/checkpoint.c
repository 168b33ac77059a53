/* checkpoint.c - a run's state to and from safetensors (the format:
 * towertrain(1), OUTPUT, model-STEP.safetensors). */
#include "checkpoint/checkpoint.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint/safetensors.h"
#include "util/fileio.h"

/* Each replica's running statistics in a checkpoint written mid-epoch. */
#define REPLICA_STATS "replica_statistics"

static bool is_int64(const model_t *m, const param_entry *p)
{
    return m->layers[p->layer].params[p->spec].is_int64;
}

/* An I64 value from tensor data that need not be 8-byte aligned. */
static int64_t read_i64(const void *data)
{
    int64_t v;
    memcpy(&v, data, sizeof(v));
    return v;
}

static void spec_shape(const model_t *m, const param_entry *p, st_tensor *t)
{
    const param_spec *s = &m->layers[p->layer].params[p->spec];
    t->ndim = s->ndim;
    for (int d = 0; d < s->ndim; d++)
        t->shape[d] = s->dims[d];
}

/* A diverged model is never saved: it would overwrite a good checkpoint. */
static int params_finite(const model_t *m, const checkpoint_state *s, const char *path,
                         tt_err *err)
{
    for (int i = 0; i < m->n_params; i++) {
        const param_entry *p = &m->params[i];
        for (size_t j = 0; j < p->count; j++)
            if (!isfinite(s->params[p->offset + j]))
                return err_set(err, TT_ERR_RUNTIME, "not writing %s: %s is not finite at global "
                               "step %" PRId64, path, p->name, s->global_step);
    }
    return 0;
}

/* The tensors of a checkpoint: the parameters (I64 ones through ints), the
 * optimizer slots (named into names) and the replicas' statistics. Returns
 * their count. */
static int tensors_of(const model_t *m, const checkpoint_state *s, st_tensor *ts,
                      char (*names)[TT_NAME_MAX + 64], int64_t *ints)
{
    int k = 0;
    for (int i = 0; i < m->n_params; i++, k++) {
        const param_entry *p = &m->params[i];
        ts[k] = (st_tensor){p->name, "F32", 0, {0}, s->params + p->offset,
                            p->count * sizeof(float)};
        if (is_int64(m, p)) {
            ints[i] = (int64_t)s->params[p->offset]; /* num_batches_tracked, exact below 2^24 */
            ts[k] = (st_tensor){p->name, "I64", 0, {0}, &ints[i], sizeof(int64_t)};
        }
        spec_shape(m, p, &ts[k]);
    }
    for (size_t sl = 0; sl < (size_t)s->n_slots; sl++) {
        for (int i = 0; i < m->n_params; i++) {
            const param_entry *p = &m->params[i];
            if (!p->trainable)
                continue;
            snprintf(names[k], sizeof(names[k]), "optimizer.%s.%s", p->name, s->slot_names[sl]);
            ts[k] = (st_tensor){names[k], "F32", 0, {0}, s->slots + sl * m->n_trainable + p->offset,
                                p->count * sizeof(float)};
            spec_shape(m, p, &ts[k]);
            k++;
        }
    }
    if (s->replica_stats != NULL) { /* each replica's running statistics, for a resume */
        size_t stats = m->n_floats - m->n_trainable;
        ts[k++] = (st_tensor){REPLICA_STATS, "F32", 2, {s->n_replicas, (int64_t)stats},
                              s->replica_stats, (size_t)s->n_replicas * stats * sizeof(float)};
    }
    return k;
}

/* The metadata's values, as text. */
typedef struct {
    char epoch[32], step[32], local[32], batch[32], rng[64], updates[32];
    char scale[32], good[32], lr[32], job_lr[32];
} meta_text;

/* The metadata: key, value pairs into meta (room for 16 pairs); returns
 * the number of pairs. */
static int metadata_of(const checkpoint_state *s, meta_text *t, const char **meta)
{
    snprintf(t->epoch, sizeof(t->epoch), "%" PRId64, s->epochs_done);
    snprintf(t->step, sizeof(t->step), "%" PRId64, s->global_step);
    snprintf(t->local, sizeof(t->local), "%" PRId64, s->local_step);
    snprintf(t->batch, sizeof(t->batch), "%" PRId64, s->global_batch);
    snprintf(t->updates, sizeof(t->updates), "%" PRId64, s->updates);
    snprintf(t->rng, sizeof(t->rng), "splitmix64 seed %" PRIu64, s->seed);
    const char *fixed[16] = {"format", "towertrain/1", "epoch_num", t->epoch, "global_step",
                             t->step, "local_step", t->local, "global_batch", t->batch, "rng",
                             t->rng, "job", s->job_text ? s->job_text : "", "optimizer_updates",
                             t->updates};
    memcpy(meta, fixed, sizeof(fixed));
    int n = 8;
    if (s->loss_scale > 0) {
        snprintf(t->scale, sizeof(t->scale), "%.9g", (double)s->loss_scale);
        snprintf(t->good, sizeof(t->good), "%" PRId64, s->loss_scale_good_steps);
        meta[2 * n] = "loss_scale", meta[2 * n + 1] = t->scale;
        meta[2 * n + 2] = "loss_scale_good_steps", meta[2 * n + 3] = t->good;
        n += 2;
    }
    if (s->learning_rate > 0 && s->job_learning_rate > 0) {
        snprintf(t->lr, sizeof(t->lr), "%.9g", (double)s->learning_rate);
        snprintf(t->job_lr, sizeof(t->job_lr), "%.9g", (double)s->job_learning_rate);
        meta[2 * n] = "learning_rate", meta[2 * n + 1] = t->lr;
        meta[2 * n + 2] = "job_learning_rate", meta[2 * n + 3] = t->job_lr;
        n += 2;
    }
    if (s->callback_state != NULL) {
        meta[2 * n] = "callback_state", meta[2 * n + 1] = s->callback_state;
        n++;
    }
    if (s->note_key != NULL) {
        meta[2 * n] = s->note_key, meta[2 * n + 1] = s->note_value;
        n++;
    }
    return n;
}

int checkpoint_write(const char *path, const model_t *m, const checkpoint_state *s,
                     tt_err *err)
{
    int n_tensors = m->n_params * (1 + s->n_slots) + (s->replica_stats != NULL);
    st_tensor *ts = calloc((size_t)n_tensors + 1, sizeof(st_tensor));
    char (*names)[TT_NAME_MAX + 64] = calloc((size_t)n_tensors + 1, sizeof(*names));
    int64_t *ints = calloc((size_t)m->n_params + 1, sizeof(int64_t)); /* I64 tensors */
    int rc = -1;
    if (ts == NULL || names == NULL || ints == NULL) {
        err_set(err, TT_ERR_RUNTIME, "out of memory writing %s", path);
    } else if (params_finite(m, s, path, err) == 0) {
        int k = tensors_of(m, s, ts, names, ints);
        meta_text text;
        const char *meta[32];
        int n_meta = metadata_of(s, &text, meta);
        rc = safetensors_write(path, ts, k, meta, n_meta, err);
    }
    free(ints);
    free(ts);
    free(names);
    return rc;
}

int checkpoint_write_pointer(const char *logdir, const char *name, tt_err *err)
{
    char pointer[4400], line[512];
    snprintf(pointer, sizeof(pointer), "%s/checkpoint", logdir);
    int len = snprintf(line, sizeof(line), "%s\n", name);
    return file_write_atomic(pointer, line, (size_t)len, err);
}

/* Appends "name" to a comma-separated list for the error message. */
static void list_add(char *list, size_t len, const char *name)
{
    size_t used = strlen(list);
    if (used + strlen(name) + 3 < len)
        snprintf(list + used, len - used, "%s%s", used ? ", " : "", name);
}

static bool shape_matches(const model_t *m, const param_entry *p, const st_tensor *t)
{
    st_tensor want = {0};
    spec_shape(m, p, &want);
    if (strcmp(t->dtype, is_int64(m, p) ? "I64" : "F32") != 0 || t->ndim != want.ndim)
        return false;
    for (int d = 0; d < want.ndim; d++)
        if (t->shape[d] != want.shape[d])
            return false;
    return true;
}

/* Model tensors into params (n_floats); with s, the optimizer slots too. */
static int read_tensors(const model_t *m, const safetensors_file *f, const char *path,
                        float *params, const checkpoint_state *s, tt_err *err)
{
    char missing[512] = "", wrong[512] = "", unexpected[512] = "";
    for (int i = 0; i < m->n_params; i++) {
        const param_entry *p = &m->params[i];
        const st_tensor *t = safetensors_find(f, p->name);
        if (t == NULL)
            list_add(missing, sizeof(missing), p->name);
        else if (!shape_matches(m, p, t))
            list_add(wrong, sizeof(wrong), p->name);
        else if (is_int64(m, p))
            params[p->offset] = (float)read_i64(t->data);
        else
            memcpy(params + p->offset, t->data, t->bytes);
        for (int sl = 0; s != NULL && p->trainable && sl < s->n_slots; sl++) {
            char name[TT_NAME_MAX + 64];
            snprintf(name, sizeof(name), "optimizer.%s.%s", p->name, s->slot_names[sl]);
            const st_tensor *st = safetensors_find(f, name);
            if (st == NULL)
                list_add(missing, sizeof(missing), name);
            else if (!shape_matches(m, p, st))
                list_add(wrong, sizeof(wrong), name);
            else
                memcpy(s->slots + (size_t)sl * m->n_trainable + p->offset, st->data, st->bytes);
        }
    }
    for (int i = 0; i < safetensors_count(f); i++) {
        const char *name = safetensors_tensor(f, i)->name;
        if (strncmp(name, "optimizer.", 10) == 0 || strcmp(name, REPLICA_STATS) == 0)
            continue;
        bool known = false;
        for (int j = 0; j < m->n_params && !known; j++)
            known = strcmp(m->params[j].name, name) == 0;
        if (!known)
            list_add(unexpected, sizeof(unexpected), name);
    }
    if (!missing[0] && !wrong[0] && !unexpected[0])
        return 0;
    char what[1700] = "";
    const char *labels[3] = {"missing ", "wrong shape ", "unexpected "};
    const char *lists[3] = {missing, wrong, unexpected};
    for (int i = 0; i < 3; i++)
        if (lists[i][0])
            snprintf(what + strlen(what), sizeof(what) - strlen(what), "%s%s%s",
                     what[0] ? "; " : "", labels[i], lists[i]);
    return err_set(err, TT_ERR_USAGE, "%s does not match the model: %s", path, what);
}

int checkpoint_read_params(const char *path, const model_t *m, float *params, tt_err *err)
{
    safetensors_file *f = NULL;
    if (safetensors_read(path, &f, err) != 0)
        return -1;
    int rc = read_tensors(m, f, path, params, NULL, err);
    safetensors_free(f);
    return rc;
}

/* A count from the metadata; an absent optional one reads as 0. */
static int meta_int(const safetensors_file *f, const char *path, const char *key, bool required,
                    int64_t *out, tt_err *err)
{
    const char *v = safetensors_meta(f, key);
    if (v == NULL && !required) {
        *out = 0;
        return 0;
    }
    char *end = NULL;
    errno = 0;
    long long x = v ? strtoll(v, &end, 10) : -1;
    /* a count up to 2^53: the arithmetic on it (epochs + 1, steps x towers)
     * cannot overflow */
    if (v == NULL || *v == '\0' || *end != '\0' || errno != 0 || x < 0 || x > (1LL << 53))
        return err_set(err, TT_ERR_USAGE, "%s: not a towertrain checkpoint (metadata %s %s)",
                       path, key, v ? "is not a count" : "missing");
    *out = x;
    return 0;
}

/* The optional loss scale: a finite power of two above 0, or 0 when absent. */
static int meta_scale(const safetensors_file *f, const char *path, float *out, tt_err *err)
{
    const char *v = safetensors_meta(f, "loss_scale");
    *out = 0.0f;
    if (v == NULL)
        return 0;
    char *end = NULL;
    float x = strtof(v, &end);
    int e;
    if (*v == '\0' || *end != '\0' || !isfinite(x) || x <= 0.0f || frexpf(x, &e) != 0.5f)
        return err_set(err, TT_ERR_USAGE, "%s: metadata loss_scale '%s' is not a power of two",
                       path, v);
    *out = x;
    return 0;
}

/* The optional replica_statistics tensor: F32 [replicas, non-trainable
 * floats], finite; absent leaves s->replica_stats NULL. */
static int read_replica_stats(const model_t *m, const safetensors_file *f, const char *path,
                              checkpoint_state *s, tt_err *err)
{
    const st_tensor *t = safetensors_find(f, REPLICA_STATS);
    size_t stats = m->n_floats - m->n_trainable;
    s->replica_stats = NULL;
    s->n_replicas = 0;
    if (t == NULL)
        return 0;
    if (strcmp(t->dtype, "F32") != 0 || t->ndim != 2 || t->shape[0] < 2 || t->shape[0] > 65536 ||
        t->shape[1] != (int64_t)stats)
        return err_set(err, TT_ERR_USAGE, "%s: %s is not F32 [replicas, %zu]", path,
                       REPLICA_STATS, stats);
    size_t n = (size_t)t->shape[0] * stats;
    float *v = malloc(n * sizeof(float) + 1);
    if (v == NULL)
        return err_set(err, TT_ERR_RUNTIME, "out of memory reading %s", path);
    memcpy(v, t->data, n * sizeof(float)); /* the file's data need not be aligned */
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(v[i])) {
            free(v);
            return err_set(err, TT_ERR_USAGE, "%s: %s is not finite", path, REPLICA_STATS);
        }
    }
    s->replica_stats = v;
    s->n_replicas = (int)t->shape[0];
    return 0;
}

/* An optional rate: finite and above 0, or 0 when absent or not a number. */
static float meta_rate(const safetensors_file *f, const char *key)
{
    const char *v = safetensors_meta(f, key);
    char *end = NULL;
    float x = v != NULL ? strtof(v, &end) : 0.0f;
    return v != NULL && *v != '\0' && *end == '\0' && isfinite(x) && x > 0 ? x : 0.0f;
}

int checkpoint_read(const char *path, const model_t *m, checkpoint_state *s, tt_err *err)
{
    safetensors_file *f = NULL;
    if (safetensors_read(path, &f, err) != 0)
        return -1;
    const char *format = safetensors_meta(f, "format");
    int rc = -1;
    if (format == NULL || strcmp(format, "towertrain/1") != 0)
        err_set(err, TT_ERR_USAGE, "%s: not a towertrain checkpoint (format %s)", path,
                format ? format : "missing");
    else if (meta_int(f, path, "epoch_num", true, &s->epochs_done, err) == 0 &&
             meta_int(f, path, "global_step", true, &s->global_step, err) == 0 &&
             meta_int(f, path, "local_step", true, &s->local_step, err) == 0 &&
             meta_int(f, path, "global_batch", false, &s->global_batch, err) == 0 &&
             meta_int(f, path, "loss_scale_good_steps", false, &s->loss_scale_good_steps,
                      err) == 0 &&
             meta_int(f, path, "optimizer_updates", false, &s->updates, err) == 0 &&
             meta_scale(f, path, &s->loss_scale, err) == 0) {
        if (safetensors_meta(f, "optimizer_updates") == NULL)
            s->updates = -1;
        /* optional, so a file without them resumes as before they were kept */
        const char *cbs;
        s->learning_rate = meta_rate(f, "learning_rate");
        s->job_learning_rate = meta_rate(f, "job_learning_rate");
        s->callback_state = (cbs = safetensors_meta(f, "callback_state")) ? strdup(cbs) : NULL;
        if (cbs != NULL && s->callback_state == NULL)
            err_set(err, TT_ERR_RUNTIME, "out of memory reading %s", path);
        else if ((rc = read_tensors(m, f, path, s->params, s, err)) == 0)
            rc = read_replica_stats(m, f, path, s, err);
    }
    safetensors_free(f);
    return rc;
}

int checkpoint_latest(const char *logdir, char *path, size_t len, tt_err *err)
{
    char pointer[4400];
    snprintf(pointer, sizeof(pointer), "%s/checkpoint", logdir);
    char *text = NULL;
    size_t n = 0;
    tt_err read_err = {0};
    if (file_read_all(pointer, &text, &n, &read_err) != 0)
        return err_set(err, TT_ERR_USAGE, "%s: no checkpoint in it (%s)", logdir,
                       read_err.msg);
    text[strcspn(text, "\r\n")] = '\0';
    int bad = text[0] == '\0' || strchr(text, '/') != NULL;
    if (!bad)
        snprintf(path, len, "%s/%s", logdir, text);
    free(text);
    if (bad)
        return err_set(err, TT_ERR_USAGE, "%s: its first line must name a checkpoint file in "
                       "the log directory", pointer);
    return 0;
}
