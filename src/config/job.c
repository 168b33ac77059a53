/* job.c - job files (towertrain.cfg(5)): read, apply --set overrides, check
 * and resolve against the schema (schema_tables.c), then build the plain structs
 * of job.h from the resolved tree, which stays alive in job->tree for the
 * plug-ins' settings and for job_write. */
#include <errno.h>
#include <libconfig.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "config/job.h"
#include "config/schema_tables.h"
#include "util/strutil.h"

/* ---- --set KEY=VALUE ---- */

static bool valid_name(const char *s, size_t n)
{
    if (n == 0 || !((s[0] >= 'a' && s[0] <= 'z') || (s[0] >= 'A' && s[0] <= 'Z') || s[0] == '*'))
        return false;
    for (size_t i = 1; i < n; i++) {
        char ch = s[i];
        if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
              ch == '_' || ch == '-' || ch == '*'))
            return false;
    }
    return true;
}

/* A group value for a key that is a group merges into it:
 * trainer={type="async"; nr_tower=2;} changes those two keys and keeps the
 * job's others (its device, say). Each member replaces its namesake, a group
 * merging in turn; a list or a value is replaced whole. */
static int merge_group(config_setting_t *into, const config_setting_t *from, void *hook)
{
    /* another type: the keys kept from the file may belong to the old one */
    const char *was = NULL, *now = NULL;
    config_setting_lookup_string(into, "type", &was);
    config_setting_lookup_string(from, "type", &now);
    for (int i = 0; was != NULL && now != NULL && strcmp(was, now) != 0 &&
                    i < config_setting_length(into); i++)
        config_setting_set_hook(config_setting_get_elem(into, (unsigned)i), SCHEMA_HOOK_OTHER_TYPE);
    for (int i = 0; i < config_setting_length(from); i++) {
        const config_setting_t *m = config_setting_get_elem(from, (unsigned)i);
        const char *name = config_setting_name(m);
        config_setting_t *old = config_setting_get_member(into, name);
        if (old != NULL && config_setting_type(old) == CONFIG_TYPE_GROUP &&
            config_setting_type(m) == CONFIG_TYPE_GROUP) {
            if (merge_group(old, m, hook) != 0)
                return -1;
            continue;
        }
        if (old != NULL)
            config_setting_remove(into, name);
        config_setting_t *copy = schema_copy(into, name, m);
        if (copy == NULL)
            return -1;
        config_setting_set_hook(copy, hook);
    }
    return 0;
}

/* Sets the last key of a --set: a group value onto a group merges
 * (merge_group: only what it sets carries the --set's hook); anything else
 * replaces the key, hook and all. NULL on a bad value. */
static config_setting_t *set_value(config_t *cfg, config_setting_t *parent, const char *name,
                                   const char *value, void *hook)
{
    config_setting_t *old = config_setting_get_member(parent, name);
    if (old == NULL || config_setting_type(old) != CONFIG_TYPE_GROUP) {
        config_setting_t *s = schema_add_value(parent, name, value);
        if (s != NULL)
            config_setting_set_hook(s, hook);
        return s;
    }
    config_setting_t *root = config_root_setting(cfg);
    config_setting_t *scratch = config_setting_add(root, "tt-set", CONFIG_TYPE_GROUP);
    config_setting_t *v = scratch != NULL ? schema_add_value(scratch, name, value) : NULL;
    config_setting_t *out = NULL;
    if (v != NULL && config_setting_type(v) == CONFIG_TYPE_GROUP)
        out = merge_group(old, v, hook) == 0 ? old : NULL;
    else if (v != NULL && (out = schema_add_value(parent, name, value)) != NULL)
        config_setting_set_hook(out, hook);
    config_setting_remove(root, "tt-set");
    return out;
}

/* A plug-in list's bare names become groups ("model_saver" ->
 * { type = "model_saver"; }) so that a --set can pick a key inside one
 * (callbacks[2].max_to_keep); the list keeps its order. */
static config_setting_t *plugin_names_to_groups(config_setting_t *parent, config_setting_t *list)
{
    const char *name = config_setting_name(list);
    config_setting_t *fresh = config_setting_add(parent, "tt-groups", CONFIG_TYPE_LIST);
    for (int i = 0; fresh != NULL && i < config_setting_length(list); i++) {
        config_setting_t *e = config_setting_get_elem(list, (unsigned)i);
        if (config_setting_type(e) != CONFIG_TYPE_STRING) {
            if (schema_copy(fresh, NULL, e) == NULL)
                return NULL;
            continue;
        }
        config_setting_t *g = config_setting_add(fresh, NULL, CONFIG_TYPE_GROUP);
        config_setting_t *t = g != NULL ? config_setting_add(g, "type", CONFIG_TYPE_STRING) : NULL;
        if (t == NULL)
            return NULL;
        config_setting_set_string(t, config_setting_get_string(e));
        config_setting_set_hook(g, config_setting_get_hook(e));
    }
    if (fresh == NULL)
        return NULL;
    void *hook = config_setting_get_hook(list);
    char key[128];
    snprintf(key, sizeof(key), "%s", name);
    config_setting_remove(parent, key);
    config_setting_t *out = schema_copy(parent, key, fresh);
    config_setting_remove(parent, "tt-groups");
    if (out != NULL)
        config_setting_set_hook(out, hook);
    return out;
}

/* KEY is dotted ("trainer.nr_tower"); a segment may pick an element of a list,
 * "callbacks[0].max_to_keep" (a bare plug-in name there becomes its group).
 * The value replaces the key (a list whole; a group merges into a group);
 * absent groups on the way are created. The new settings carry the --set's
 * number as their hook, so messages about them name the --set. */
static int apply_set(config_t *cfg, const job_override *set, int idx, tt_err *err)
{
    const char *arg = set->arg;
    const char *eq = strchr(arg, '=');
    if (eq == NULL || eq == arg)
        return err_set(err, TT_ERR_USAGE, "--set %s: expected KEY=VALUE", arg);
    const char *value = eq + 1;
    void *hook = (void *)(intptr_t)(idx + 1);
    config_setting_t *cur = config_root_setting(cfg);
    const char *p = arg;
    while (p < eq) {
        const char *seg = p;
        while (p < eq && *p != '.' && *p != '[')
            p++;
        size_t n = (size_t)(p - seg);
        char name[128];
        if (!valid_name(seg, n) || n >= sizeof(name))
            return err_set(err, TT_ERR_USAGE, "--set %s: invalid key '%.*s'", arg,
                           (int)(eq - arg), arg);
        memcpy(name, seg, n);
        name[n] = '\0';
        long index = -1;
        if (p < eq && *p == '[') {
            char *end;
            errno = 0;
            index = strtol(p + 1, &end, 10);
            if (end == p + 1 || *end != ']' || index < 0 || end >= eq || errno)
                return err_set(err, TT_ERR_USAGE, "--set %s: invalid key '%.*s'", arg,
                               (int)(eq - arg), arg);
            p = end + 1;
        }
        bool last = p >= eq;
        if (!last && *p != '.')
            return err_set(err, TT_ERR_USAGE, "--set %s: invalid key '%.*s'", arg,
                           (int)(eq - arg), arg);
        if (!last)
            p++;
        if (last && index >= 0)
            return err_set(err, TT_ERR_USAGE, "--set %s: cannot set one element of a list; "
                           "set the whole list", arg);
        if (last) {
            if (set_value(cfg, cur, name, value, hook) == NULL)
                return err_set(err, TT_ERR_USAGE, "--set %s: invalid value", arg);
            return 0;
        }
        config_setting_t *child = config_setting_get_member(cur, name);
        if (index >= 0) {
            if (child == NULL || (config_setting_type(child) != CONFIG_TYPE_LIST &&
                                  config_setting_type(child) != CONFIG_TYPE_ARRAY))
                return err_set(err, TT_ERR_USAGE, "--set %s: '%s' is not a list", arg, name);
            if (index >= config_setting_length(child))
                return err_set(err, TT_ERR_USAGE, "--set %s: '%s' has no element [%ld]", arg,
                               name, index);
            if (config_setting_type(config_setting_get_elem(child, (unsigned)index)) ==
                    CONFIG_TYPE_STRING &&
                (child = plugin_names_to_groups(cur, child)) == NULL)
                return err_set(err, TT_ERR_RUNTIME, "out of memory");
            child = config_setting_get_elem(child, (unsigned)index);
            if (config_setting_type(child) != CONFIG_TYPE_GROUP)
                return err_set(err, TT_ERR_USAGE, "--set %s: '%s[%ld]' is not a group", arg,
                               name, index);
        } else if (child == NULL) {
            if ((child = config_setting_add(cur, name, CONFIG_TYPE_GROUP)) == NULL)
                return err_set(err, TT_ERR_RUNTIME, "out of memory");
            config_setting_set_hook(child, hook);
        } else if (config_setting_type(child) != CONFIG_TYPE_GROUP) {
            return err_set(err, TT_ERR_USAGE, "--set %s: '%s' is not a group", arg, name);
        }
        cur = child;
    }
    return err_set(err, TT_ERR_USAGE, "--set %s: expected KEY=VALUE", arg);
}

/* ---- bare plug-in names -> groups ---- */

/* "json" in a plug-in list is short for { type = "json"; }: the resolved tree
 * holds the group, with its defaults, so plug-ins always read a group. */
static int expand_plugin_list(vctx *c, const char *key, const group_spec *spec)
{
    config_setting_t *root = config_root_setting(c->cfg);
    config_setting_t *list = config_setting_get_member(root, key);
    bool any = false;
    for (int i = 0; list && i < config_setting_length(list); i++)
        if (config_setting_type(config_setting_get_elem(list, (unsigned)i)) == CONFIG_TYPE_STRING)
            any = true;
    if (!any)
        return 0;
    config_setting_t *tmp = config_setting_add(root, "tt-expanding", CONFIG_TYPE_LIST);
    if (tmp == NULL)
        return err_set(c->err, TT_ERR_RUNTIME, "out of memory");
    for (int i = 0; i < config_setting_length(list); i++) {
        config_setting_t *e = config_setting_get_elem(list, (unsigned)i);
        if (config_setting_type(e) != CONFIG_TYPE_STRING) {
            if (schema_copy(tmp, NULL, e) == NULL)
                return err_set(c->err, TT_ERR_RUNTIME, "out of memory");
            continue;
        }
        config_setting_t *g = config_setting_add(tmp, NULL, CONFIG_TYPE_GROUP);
        config_setting_t *t = g ? config_setting_add(g, "type", CONFIG_TYPE_STRING) : NULL;
        if (t == NULL)
            return err_set(c->err, TT_ERR_RUNTIME, "out of memory");
        config_setting_set_string(t, config_setting_get_string(e));
        char ekey[128];
        snprintf(ekey, sizeof(ekey), "%s[%d]", key, i);
        if (schema_check_group(c, g, spec, ekey) != 0)
            return -1;
    }
    config_setting_remove(root, key);
    config_setting_t *fresh = schema_copy(root, key, tmp);
    config_setting_remove(root, "tt-expanding");
    return fresh ? 0 : err_set(c->err, TT_ERR_RUNTIME, "out of memory");
}

/* ---- tree -> structs ---- */

static int get_int(const config_setting_t *g, const char *name, int def)
{
    const config_setting_t *s = config_setting_get_member(g, name);
    return s ? (int)schema_number(s) : def;
}

static double get_num(const config_setting_t *g, const char *name, double def)
{
    const config_setting_t *s = config_setting_get_member(g, name);
    return s ? schema_number(s) : def;
}

static bool get_bool(const config_setting_t *g, const char *name, bool def)
{
    const config_setting_t *s = config_setting_get_member(g, name);
    return s ? config_setting_get_bool(s) != 0 : def;
}

static const char *get_str(const config_setting_t *g, const char *name, const char *def)
{
    const config_setting_t *s = config_setting_get_member(g, name);
    return s ? config_setting_get_string(s) : def;
}

static void copy_str(char *dst, size_t n, const char *src)
{
    snprintf(dst, n, "%s", src);
}

static int build_dataflow(const config_setting_t *g, dataflow_cfg *d)
{
    const config_setting_t *src = config_setting_get_member(g, "source");
    const char *type = get_str(src, "type", "fake");
    source_cfg *s = &d->source;
    s->type = strcmp(type, "idx") == 0            ? SOURCE_IDX
              : strcmp(type, "cifar10") == 0      ? SOURCE_CIFAR10
              : strcmp(type, "image_folder") == 0 ? SOURCE_IMAGE_FOLDER
              : strcmp(type, "npy") == 0          ? SOURCE_NPY
                                                  : SOURCE_FAKE;
    copy_str(s->images, sizeof(s->images), get_str(src, "images", ""));
    copy_str(s->labels, sizeof(s->labels), get_str(src, "labels", ""));
    const config_setting_t *files = config_setting_get_member(src, "files");
    if (files != NULL && config_setting_length(files) > 0) {
        s->n_files = config_setting_length(files);
        if ((s->files = calloc((size_t)s->n_files, sizeof(char *))) == NULL)
            return -1;
        for (int i = 0; i < s->n_files; i++)
            if ((s->files[i] = strdup(config_setting_get_string_elem(files, i))) == NULL)
                return -1;
    }
    const config_setting_t *shape = config_setting_get_member(src, "shape");
    if (shape != NULL) {
        s->shape_rank = config_setting_length(shape);
        for (int i = 0; i < 3; i++)
            s->shape[i] = i < s->shape_rank ? config_setting_get_int_elem(shape, i) : 1;
    }
    s->classes = get_int(src, "classes", 0);
    s->size = get_int(src, "size", 0);
    copy_str(s->root, sizeof(s->root), get_str(src, "root", ""));
    s->channels = get_int(src, "channels", 3);
    s->skip_corrupt = get_bool(src, "skip_corrupt", false);
    s->nhwc = strcmp(get_str(src, "layout", "nchw"), "nhwc") == 0;

    d->shuffle = get_bool(g, "shuffle", false);
    d->batch_size = get_int(g, "batch_size", 1);
    d->limit = get_int(g, "limit", 0);
    const config_setting_t *pf = config_setting_get_member(g, "prefetch");
    d->workers = pf ? get_int(pf, "workers", 2) : 2;
    d->queue = pf ? get_int(pf, "queue", 8) : 8;

    const config_setting_t *aug = config_setting_get_member(g, "augment");
    d->n_augment = aug ? config_setting_length(aug) : 0;
    if (d->n_augment > 0 && (d->augment = calloc((size_t)d->n_augment, sizeof(augment_cfg))) == NULL)
        return -1;
    for (int i = 0; i < d->n_augment; i++) {
        const config_setting_t *a = config_setting_get_elem(aug, (unsigned)i);
        augment_cfg *o = &d->augment[i];
        const char *t = get_str(a, "type", "flip");
        o->type = strcmp(t, "normalize") == 0             ? AUG_NORMALIZE
                  : strcmp(t, "random_crop") == 0         ? AUG_RANDOM_CROP
                  : strcmp(t, "resize") == 0              ? AUG_RESIZE
                  : strcmp(t, "center_crop") == 0         ? AUG_CENTER_CROP
                  : strcmp(t, "random_resized_crop") == 0 ? AUG_RANDOM_RESIZED_CROP
                  : strcmp(t, "color_jitter") == 0        ? AUG_COLOR_JITTER
                                                          : AUG_FLIP;
        const config_setting_t *m = config_setting_get_member(a, "mean");
        const config_setting_t *sd = config_setting_get_member(a, "std");
        o->n_mean = m ? config_setting_length(m) : 0;
        o->n_std = sd ? config_setting_length(sd) : 0;
        for (int k = 0; k < o->n_mean; k++)
            o->mean[k] = (float)schema_number(config_setting_get_elem(m, (unsigned)k));
        for (int k = 0; k < o->n_std; k++)
            o->std[k] = (float)schema_number(config_setting_get_elem(sd, (unsigned)k));
        o->size = get_int(a, "size", 0);
        o->padding = get_int(a, "padding", 0);
        const config_setting_t *sc = config_setting_get_member(a, "scale");
        const config_setting_t *ra = config_setting_get_member(a, "ratio");
        for (int k = 0; k < 2; k++) {
            o->scale[k] = sc ? schema_number(config_setting_get_elem(sc, (unsigned)k)) : 0;
            o->ratio[k] = ra ? schema_number(config_setting_get_elem(ra, (unsigned)k)) : 0;
        }
        o->brightness = (float)get_num(a, "brightness", 0);
        o->contrast = (float)get_num(a, "contrast", 0);
        o->saturation = (float)get_num(a, "saturation", 0);
    }
    return 0;
}

static void free_dataflow(dataflow_cfg *d)
{
    for (int i = 0; i < d->source.n_files; i++)
        free(d->source.files ? d->source.files[i] : NULL);
    free(d->source.files);
    free(d->augment);
    memset(d, 0, sizeof(*d));
}

static int build_plugins(config_setting_t *root, const char *const *keys, int n_keys,
                         plugin_cfg **out, int *n_out)
{
    int n = 0;
    for (int k = 0; k < n_keys; k++) {
        config_setting_t *l = config_setting_get_member(root, keys[k]);
        n += l ? config_setting_length(l) : 0;
    }
    *n_out = 0;
    if (n == 0)
        return 0;
    if ((*out = calloc((size_t)n, sizeof(plugin_cfg))) == NULL)
        return -1;
    for (int k = 0; k < n_keys; k++) {
        config_setting_t *l = config_setting_get_member(root, keys[k]);
        for (int i = 0; l && i < config_setting_length(l); i++) {
            config_setting_t *g = config_setting_get_elem(l, (unsigned)i);
            plugin_cfg *p = &(*out)[(*n_out)++];
            copy_str(p->type, sizeof(p->type), get_str(g, "type", ""));
            p->every_k_epochs = get_int(g, "every_k_epochs", 1);
            p->every_k_steps = get_int(g, "every_k_steps", 0);
            p->settings = g;
            config_setting_t *df = config_setting_get_member(g, "dataflow");
            if (df != NULL) {
                if ((p->dataflow = calloc(1, sizeof(dataflow_cfg))) == NULL ||
                    build_dataflow(df, p->dataflow) != 0)
                    return -1;
            }
        }
    }
    return 0;
}

static int build_optimizer(const config_setting_t *o, optimizer_cfg *opt)
{
    const char *ot = get_str(o, "type", "sgd");
    opt->type = strcmp(ot, "adam") == 0       ? OPT_ADAM
                : strcmp(ot, "adamw") == 0    ? OPT_ADAMW
                : strcmp(ot, "lars") == 0     ? OPT_LARS
                : strcmp(ot, "momentum") == 0 ? OPT_MOMENTUM
                                              : OPT_SGD;
    opt->learning_rate = (float)get_num(o, "learning_rate", 0);
    opt->momentum = (float)get_num(o, "momentum", 0);
    opt->nesterov = get_bool(o, "nesterov", false);
    opt->beta1 = (float)get_num(o, "beta1", 0.9);
    opt->beta2 = (float)get_num(o, "beta2", 0.999);
    opt->epsilon = (float)get_num(o, "epsilon", 1e-8);
    opt->weight_decay = (float)get_num(o, "weight_decay", 0);
    opt->trust_coefficient = (float)get_num(o, "trust_coefficient", 0.001);
    opt->clip_global_norm = (float)get_num(o, "clip_global_norm", 0);
    const config_setting_t *ex = config_setting_get_member(o, "weight_decay_exclude");
    opt->n_wd_exclude = ex != NULL ? config_setting_length(ex) : 0;
    if (opt->n_wd_exclude > 0 &&
        (opt->wd_exclude = calloc((size_t)opt->n_wd_exclude, sizeof(char *))) == NULL)
        return -1;
    for (int i = 0; i < opt->n_wd_exclude; i++)
        opt->wd_exclude[i] = config_setting_get_string_elem(ex, i);
    return 0;
}

static void build_trainer(const config_setting_t *t, trainer_cfg *tr)
{
    const char *tt = get_str(t, "type", "simple");
    tr->type = strcmp(tt, "sync_replicated") == 0         ? TRAINER_SYNC_REPLICATED
               : strcmp(tt, "sync_parameter_server") == 0 ? TRAINER_SYNC_PARAMETER_SERVER
               : strcmp(tt, "async") == 0                 ? TRAINER_ASYNC
                                                          : TRAINER_SIMPLE;
    const char *dev = get_str(t, "device", "auto");
    tr->device = strcmp(dev, "cpu") == 0   ? DEVICE_CPU
                 : strcmp(dev, "gpu") == 0 ? DEVICE_GPU
                 : strcmp(dev, "sim") == 0 ? DEVICE_SIM
                                           : DEVICE_AUTO;
    tr->nr_tower = get_int(t, "nr_tower", 1);
    const config_setting_t *towers = config_setting_get_member(t, "towers");
    for (int i = 0; i < tr->nr_tower && i < TT_MAX_TOWERS; i++)
        tr->towers[i] = towers ? config_setting_get_int_elem(towers, i) : i;
    copy_str(tr->allreduce, sizeof(tr->allreduce), get_str(t, "allreduce", "auto"));
    copy_str(tr->ps_device, sizeof(tr->ps_device), get_str(t, "ps_device", "cpu"));
    tr->scale_gradient = get_bool(t, "scale_gradient", true);
    tr->gradient_packing = get_int(t, "gradient_packing", 0);
    tr->threads_per_tower = get_int(t, "threads_per_tower", 0);
    tr->tf32 = get_bool(t, "tf32", false);
    tr->deterministic = get_bool(t, "deterministic", true);
    tr->accumulate = get_int(t, "accumulate", 1);
    tr->collective_timeout = get_int(t, "collective_timeout", 300);
    const char *prec = get_str(t, "precision", "fp32");
    tr->precision = strcmp(prec, "bf16") == 0   ? PRECISION_BF16
                    : strcmp(prec, "fp16") == 0 ? PRECISION_FP16
                                                : PRECISION_FP32;
}

static int build_job(job_t *job, config_t *cfg)
{
    config_setting_t *root = config_root_setting(cfg);
    copy_str(job->logdir, sizeof(job->logdir), get_str(root, "logdir", ""));
    job->seed = (uint64_t)config_setting_get_int64(config_setting_get_member(root, "seed"));
    if (config_setting_type(config_setting_get_member(root, "seed")) == CONFIG_TYPE_INT)
        job->seed = (uint64_t)get_int(root, "seed", 1);
    job->max_epoch = (int64_t)get_num(root, "max_epoch", 99999);
    job->steps_per_epoch = (int64_t)get_num(root, "steps_per_epoch", 0);
    job->starting_epoch = (int64_t)get_num(root, "starting_epoch", 1);
    copy_str(job->session_init, sizeof(job->session_init), get_str(root, "session_init", ""));
    if (build_dataflow(config_setting_get_member(root, "dataflow"), &job->dataflow) != 0 ||
        build_optimizer(config_setting_get_member(root, "optimizer"), &job->optimizer) != 0)
        return -1;
    build_trainer(config_setting_get_member(root, "trainer"), &job->trainer);

    const config_setting_t *ev = config_setting_get_member(root, "eval");
    const config_setting_t *evd = ev ? config_setting_get_member(ev, "dataflow") : NULL;
    if (evd != NULL && ((job->eval_dataflow = calloc(1, sizeof(dataflow_cfg))) == NULL ||
                        build_dataflow(evd, job->eval_dataflow) != 0))
        return -1;

    static const char *const cb_keys[] = { "callbacks", "extra_callbacks" };
    static const char *const mon_keys[] = { "monitors" };
    if (build_plugins(root, cb_keys, 2, &job->callbacks, &job->n_callbacks) != 0 ||
        build_plugins(root, mon_keys, 1, &job->monitors, &job->n_monitors) != 0)
        return -1;
    return 0;
}

/* ---- the API ---- */

static int job_load_any(const char *path, const job_override *sets, int n_sets, job_t *job,
                        tt_err *err)
{
    memset(job, 0, sizeof(*job));
    if (path_resolve(NULL, path, job->path, sizeof(job->path)) != 0)
        return err_set(err, TT_ERR_USAGE, "%s: path too long", path);
    config_t *cfg = malloc(sizeof(config_t));
    if (cfg == NULL)
        return err_set(err, TT_ERR_RUNTIME, "out of memory");
    config_init(cfg);
    /* plug-ins may read a float key written as an integer (min_delta = 0) */
    config_set_auto_convert(cfg, CONFIG_TRUE);
    job->tree = cfg;

    /* messages quote the --set arguments as given */
    const char **args = calloc((size_t)n_sets + 1, sizeof(*args));
    if (args == NULL) {
        job_free(job);
        return err_set(err, TT_ERR_RUNTIME, "out of memory");
    }
    for (int i = 0; i < n_sets; i++)
        args[i] = sets[i].arg;
    vctx c = { .file = path, .real_path = path, .base = job->path, .sets = args,
               .n_sets = n_sets, .cfg = cfg, .err = err, .model = &job->model,
               .missing = job->missing_file, .missing_len = sizeof(job->missing_file) };
    if (schema_read_file(cfg, path, path, err) != 0)
        goto fail;
    for (int i = 0; i < n_sets; i++)
        if (apply_set(cfg, &sets[i], i, err) != 0)
            goto fail;
    if (schema_check_group(&c, config_root_setting(cfg), &job_spec, "") != 0)
        goto fail;
    if (expand_plugin_list(&c, "callbacks", &callback_spec) != 0 ||
        expand_plugin_list(&c, "extra_callbacks", &callback_spec) != 0 ||
        expand_plugin_list(&c, "monitors", &monitor_spec) != 0)
        goto fail;
    if (build_job(job, cfg) != 0) {
        err_set(err, TT_ERR_RUNTIME, "out of memory");
        goto fail;
    }
    free(args);
    return 0;
fail:
    free(args);
    job_free(job);
    return -1;
}

void job_plugin_key(const plugin_cfg *p, char *out, size_t n)
{
    const config_setting_t *g = p->settings;
    const config_setting_t *list = g != NULL ? config_setting_parent(g) : NULL;
    if (list == NULL || config_setting_name(list) == NULL)
        snprintf(out, n, "%s", p->type);
    else
        snprintf(out, n, "%s[%d]", config_setting_name(list), config_setting_index(g));
}

int job_check_files(const job_t *job, tt_err *err)
{
    if (job->missing_file[0] == '\0')
        return 0;
    return err_set(err, TT_ERR_USAGE, "%s", job->missing_file);
}

int job_load(const char *path, const job_override *sets, int n_sets, job_t *job, tt_err *err)
{
    return job_load_any(path, sets, n_sets, job, err);
}

/* A resolved job has absolute paths and every default already, so loading it is
 * the same walk: resolving an absolute path changes nothing, and filling a
 * default that is present changes nothing. */
int job_load_resolved(const char *path, const job_override *sets, int n_sets, job_t *job,
                      tt_err *err)
{
    return job_load_any(path, sets, n_sets, job, err);
}

int job_write(const job_t *job, FILE *out)
{
    if (job->tree == NULL)
        return -1;
    return cfg_write_root(config_root_setting((config_t *)job->tree), out);
}

void job_free(job_t *job)
{
    if (job == NULL)
        return;
    free_dataflow(&job->dataflow);
    for (int i = 0; i < job->n_callbacks; i++)
        if (job->callbacks[i].dataflow != NULL) {
            free_dataflow(job->callbacks[i].dataflow);
            free(job->callbacks[i].dataflow);
        }
    free(job->optimizer.wd_exclude);
    free(job->callbacks);
    free(job->monitors);
    if (job->eval_dataflow != NULL) {
        free_dataflow(job->eval_dataflow);
        free(job->eval_dataflow);
    }
    model_cfg_free(&job->model);
    if (job->tree != NULL) {
        config_destroy(job->tree);
        free(job->tree);
    }
    memset(job, 0, sizeof(*job));
}
