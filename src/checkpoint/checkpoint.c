/* checkpoint.c - a run to and from safetensors (SPEC 7). */
#include "checkpoint/checkpoint.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint/safetensors.h"
#include "util/fileio.h"

/* The optimizer whose state is saved: the shared one, or tower 0's. */
static optimizer_t *saved_optimizer(trainer_t *tr)
{
    return tr->shared_opt.be != NULL ? &tr->shared_opt : &tr->opts[0];
}

static bool is_int64(const trainer_t *tr, const param_entry *p)
{
    return tr->model.layers[p->layer].params[p->spec].is_int64;
}

/* An I64 value from tensor data that need not be 8-byte aligned. */
static int64_t read_i64(const void *data)
{
    int64_t v;
    memcpy(&v, data, sizeof(v));
    return v;
}

static void spec_shape(const trainer_t *tr, const param_entry *p, st_tensor *t)
{
    const param_spec *s = &tr->model.layers[p->layer].params[p->spec];
    t->ndim = s->ndim;
    for (int d = 0; d < s->ndim; d++)
        t->shape[d] = s->dims[d];
}

static int completed_epochs(const trainer_t *tr, int64_t *local)
{
    if (tr->local_step >= tr->steps_per_epoch) {
        *local = 0;
        return (int)tr->epoch_num;
    }
    *local = tr->local_step;
    return (int)tr->epoch_num - 1;
}

int checkpoint_save_as(trainer_t *tr, const char *path, tt_err *err)
{
    const model_t *m = &tr->model;
    optimizer_t *opt = saved_optimizer(tr);
    trainer_sync_tower0(tr);
    trainer_sync_batchnorm(tr); /* collective under MPI: every rank comes here */
    if (tr->rank != 0)
        return 0; /* rank 0 writes; the replicas are the same everywhere */
    tower_t *t0 = &tr->towers[0];
    size_t n_slots = (size_t)opt->n_slots;
    float *host = malloc((m->n_floats + n_slots * m->n_trainable + 1) * sizeof(float));
    int n_tensors = m->n_params * (1 + (int)n_slots);
    st_tensor *ts = calloc((size_t)n_tensors + 1, sizeof(st_tensor));
    char (*names)[TT_NAME_MAX + 64] = calloc((size_t)n_tensors + 1, sizeof(*names));
    int64_t *ints = calloc((size_t)m->n_params + 1, sizeof(int64_t)); /* I64 tensors */
    char *job_text = NULL;
    size_t job_len = 0;
    FILE *mem = open_memstream(&job_text, &job_len);
    int rc = -1;
    if (host == NULL || ts == NULL || names == NULL || ints == NULL || mem == NULL) {
        err_set(err, TT_ERR_RUNTIME, "out of memory writing %s", path);
        goto out;
    }
    job_write(tr->job, mem);
    fclose(mem);
    mem = NULL;
    t0->be->download(t0->be, host, t0->params, m->n_floats * sizeof(float));
    for (size_t s = 0; s < n_slots; s++)
        opt->be->download(opt->be, host + m->n_floats + s * m->n_trainable, opt->slots[s],
                          m->n_trainable * sizeof(float));
    /* a diverged model is never saved: it would overwrite a good checkpoint */
    for (int i = 0; i < m->n_params; i++) {
        const param_entry *p = &m->params[i];
        for (size_t j = 0; j < p->count; j++) {
            if (!isfinite(host[p->offset + j])) {
                err_set(err, TT_ERR_RUNTIME, "not writing %s: %s is not finite at global step "
                        "%" PRId64, path, p->name, tr->global_step);
                goto out;
            }
        }
    }
    int k = 0;
    for (int i = 0; i < m->n_params; i++, k++) {
        const param_entry *p = &m->params[i];
        ts[k] = (st_tensor){p->name, "F32", 0, {0}, host + p->offset, p->count * sizeof(float)};
        if (is_int64(tr, p)) {
            ints[i] = (int64_t)host[p->offset]; /* num_batches_tracked, exact below 2^24 */
            ts[k] = (st_tensor){p->name, "I64", 0, {0}, &ints[i], sizeof(int64_t)};
        }
        spec_shape(tr, p, &ts[k]);
    }
    for (size_t s = 0; s < n_slots; s++) {
        for (int i = 0; i < m->n_params; i++) {
            const param_entry *p = &m->params[i];
            if (!p->trainable)
                continue;
            snprintf(names[k], sizeof(names[k]), "optimizer.%s.%s", p->name, opt->slot_names[s]);
            ts[k] = (st_tensor){names[k], "F32", 0, {0},
                                host + m->n_floats + s * m->n_trainable + p->offset,
                                p->count * sizeof(float)};
            spec_shape(tr, p, &ts[k]);
            k++;
        }
    }
    int64_t local;
    int epochs = completed_epochs(tr, &local);
    char epoch_s[32], step_s[32], local_s[32], rng_s[64];
    snprintf(epoch_s, sizeof(epoch_s), "%d", epochs);
    snprintf(step_s, sizeof(step_s), "%" PRId64, tr->global_step);
    snprintf(local_s, sizeof(local_s), "%" PRId64, local);
    snprintf(rng_s, sizeof(rng_s), "splitmix64 seed %" PRIu64, tr->job->seed);
    const char *meta[] = {"format", "towertrain/1", "epoch_num", epoch_s, "global_step", step_s,
                          "local_step", local_s, "rng", rng_s, "job", job_text};
    rc = safetensors_write(path, ts, k, meta, 6, err);
out:
    if (mem != NULL)
        fclose(mem);
    free(job_text);
    free(ints);
    free(host);
    free(ts);
    free(names);
    return rc;
}

int checkpoint_save(trainer_t *tr, char *name, size_t name_len, tt_err *err)
{
    char path[4400], pointer[4400], line[128];
    snprintf(line, sizeof(line), "model-%" PRId64 ".safetensors", tr->global_step);
    snprintf(path, sizeof(path), "%s/%s", tr->job->logdir, line);
    snprintf(pointer, sizeof(pointer), "%s/checkpoint", tr->job->logdir);
    if (checkpoint_save_as(tr, path, err) != 0)
        return -1;
    if (tr->rank == 0) { /* under MPI rank 0 alone writes the log directory */
        size_t len = strlen(line);
        line[len] = '\n';
        int rc = file_write_atomic(pointer, line, len + 1, err);
        line[len] = '\0';
        if (rc != 0)
            return -1;
    }
    if (name != NULL)
        snprintf(name, name_len, "%s", line);
    return 0;
}

/* Appends "name" to a comma-separated list for the error message. */
static void list_add(char *list, size_t len, const char *name)
{
    size_t used = strlen(list);
    if (used + strlen(name) + 3 < len)
        snprintf(list + used, len - used, "%s%s", used ? ", " : "", name);
}

static bool shape_matches(const trainer_t *tr, const param_entry *p, const st_tensor *t)
{
    st_tensor want = {0};
    spec_shape(tr, p, &want);
    if (strcmp(t->dtype, is_int64(tr, p) ? "I64" : "F32") != 0 || t->ndim != want.ndim)
        return false;
    for (int d = 0; d < want.ndim; d++)
        if (t->shape[d] != want.shape[d])
            return false;
    return true;
}

/* Model tensors into host (n_floats); optimizer slots too when slots != NULL. */
static int read_tensors(trainer_t *tr, const safetensors_file *f, const char *path, float *host,
                        float *slots, tt_err *err)
{
    const model_t *m = &tr->model;
    const optimizer_t *opt = saved_optimizer(tr);
    char missing[512] = "", wrong[512] = "", unexpected[512] = "";
    for (int i = 0; i < m->n_params; i++) {
        const param_entry *p = &m->params[i];
        const st_tensor *t = safetensors_find(f, p->name);
        if (t == NULL)
            list_add(missing, sizeof(missing), p->name);
        else if (!shape_matches(tr, p, t))
            list_add(wrong, sizeof(wrong), p->name);
        else if (is_int64(tr, p))
            host[p->offset] = (float)read_i64(t->data);
        else
            memcpy(host + p->offset, t->data, t->bytes);
        for (int s = 0; slots != NULL && p->trainable && s < opt->n_slots; s++) {
            char name[TT_NAME_MAX + 64];
            snprintf(name, sizeof(name), "optimizer.%s.%s", p->name, opt->slot_names[s]);
            const st_tensor *st = safetensors_find(f, name);
            if (st == NULL)
                list_add(missing, sizeof(missing), name);
            else if (!shape_matches(tr, p, st))
                list_add(wrong, sizeof(wrong), name);
            else
                memcpy(slots + (size_t)s * m->n_trainable + p->offset, st->data, st->bytes);
        }
    }
    for (int i = 0; i < safetensors_count(f); i++) {
        const char *name = safetensors_tensor(f, i)->name;
        if (strncmp(name, "optimizer.", 10) == 0)
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

static void upload_params(trainer_t *tr, const float *host)
{
    for (int t = 0; t < tr->n_towers; t++)
        tower_set_params(&tr->towers[t], host);
    if (tr->shared_params != NULL) {
        backend_t *be = tr->backends[0];
        be->upload(be, tr->shared_params, host, tr->model.n_floats * sizeof(float));
    }
}

int checkpoint_load_params(trainer_t *tr, const char *path, tt_err *err)
{
    safetensors_file *f = NULL;
    if (safetensors_read(path, &f, err) != 0)
        return -1;
    float *host = calloc(tr->model.n_floats + 1, sizeof(float));
    int rc = host == NULL ? err_set(err, TT_ERR_RUNTIME, "out of memory")
                          : read_tensors(tr, f, path, host, NULL, err);
    if (rc == 0)
        upload_params(tr, host);
    free(host);
    safetensors_free(f);
    return rc;
}

static int meta_int(const safetensors_file *f, const char *path, const char *key, int64_t *out,
                    tt_err *err)
{
    const char *v = safetensors_meta(f, key);
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

int checkpoint_restore(trainer_t *tr, const char *path, tt_err *err)
{
    safetensors_file *f = NULL;
    if (safetensors_read(path, &f, err) != 0)
        return -1;
    const model_t *m = &tr->model;
    optimizer_t *opt = saved_optimizer(tr);
    int64_t epochs = 0, step = 0, local = 0;
    const char *format = safetensors_meta(f, "format");
    int rc = -1;
    float *host = calloc(m->n_floats + (size_t)opt->n_slots * m->n_trainable + 1, sizeof(float));
    if (host == NULL) {
        err_set(err, TT_ERR_RUNTIME, "out of memory");
        goto out;
    }
    if (format == NULL || strcmp(format, "towertrain/1") != 0) {
        err_set(err, TT_ERR_USAGE, "%s: not a towertrain checkpoint (format %s)", path,
                format ? format : "missing");
        goto out;
    }
    if (meta_int(f, path, "epoch_num", &epochs, err) || meta_int(f, path, "global_step", &step, err) ||
        meta_int(f, path, "local_step", &local, err))
        goto out;
    float *slots = host + m->n_floats;
    if (read_tensors(tr, f, path, host, slots, err) != 0)
        goto out;
    upload_params(tr, host);
    optimizer_t *targets[TT_MAX_TOWERS + 1];
    int n_targets = 0;
    if (tr->shared_opt.be != NULL)
        targets[n_targets++] = &tr->shared_opt;
    else
        for (int t = 0; t < tr->n_towers; t++)
            targets[n_targets++] = &tr->opts[t];
    for (int i = 0; i < n_targets; i++) {
        for (int s = 0; s < targets[i]->n_slots; s++)
            targets[i]->be->upload(targets[i]->be, targets[i]->slots[s],
                                   slots + (size_t)s * m->n_trainable,
                                   m->n_trainable * sizeof(float));
        targets[i]->has_state = step > 0;
    }
    tr->global_step = step;
    tr->local_step = local;
    tr->epoch_num = epochs + 1;
    tr->updates = step * tr->n_towers;
    rc = 0;
out:
    free(host);
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
        return err_set(err, TT_ERR_USAGE, "%s: no checkpoint to resume from (%s)", logdir,
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
