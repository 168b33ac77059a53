/* schema_tables.c - every key of job files (towertrain.cfg(5)), with its kind,
 * default, range and meaning, and the cross-key rules; a model file's keys are
 * in model_cfg.c. man/towertrain.cfg.5 documents exactly these tables: change
 * both together.
 *
 * Every integer has an upper bound: beyond any real job, and low enough that
 * what is computed from it (sizes, step counts) cannot overflow. */
#include "config/schema_tables.h"

#include "config/job.h"
#include "config/model_check.h"

#include "util/strutil.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#define END { .name = NULL }
#define GE BOUND_INCL
#define GT BOUND_EXCL
#define LE BOUND_INCL
#define LT BOUND_EXCL

#define MAX_WIDTH 16777216      /* a sample's dimensions, classes, batch_size */
#define MAX_SIDE 65536          /* random_crop size and padding */
#define MAX_EPOCHS 1073741824.0 /* max_epoch, steps_per_epoch: their product fits int64 */

/* ---- dataflow (towertrain.cfg(5), DATAFLOW) ---- */

static const key_spec idx_keys[] = {
    { .name = "images", .kind = KEY_PATH, .required = true, .doc = "IDX image file (raw or .gz)" },
    { .name = "labels", .kind = KEY_PATH, .required = true, .doc = "IDX label file (raw or .gz)" },
    END
};
static const key_spec cifar_keys[] = {
    { .name = "files", .kind = KEY_PATH_ARRAY, .required = true, .min_len = 1, .max_len = 256,
      .doc = "CIFAR-10 binary batch files",
      .missing_hint = "get the CIFAR-10 binary version from "
                      "https://www.cs.toronto.edu/~kriz/cifar-10-binary.tar.gz and unpack it so "
                      "that this path exists" },
    END
};
static const key_spec fake_keys[] = {
    { .name = "shape", .kind = KEY_INT_ARRAY, .def = "[3, 32, 32]", .lo_kind = GE, .lo = 1,
      .hi_kind = LE, .hi = MAX_WIDTH, .min_len = 1, .max_len = 3,
      .doc = "sample shape [C, H, W] or [N]" },
    { .name = "classes", .kind = KEY_INT, .def = "10", .lo_kind = GE, .lo = 1, .hi_kind = LE,
      .hi = MAX_WIDTH, .doc = "labels 0..classes-1" },
    { .name = "size", .kind = KEY_INT, .def = "50000", .lo_kind = GE, .lo = 1, .doc = "samples" },
    END
};
static const key_spec image_folder_keys[] = {
    { .name = "root", .kind = KEY_PATH, .required = true,
      .doc = "root/<class>/<image>.jpg|.jpeg|.png, classes in byte order" },
    { .name = "channels", .kind = KEY_INT, .def = "3", .lo_kind = GE, .lo = 1, .hi_kind = LE,
      .hi = 3, .doc = "3: RGB, 1: grey" },
    { .name = "skip_corrupt", .kind = KEY_BOOL, .def = "false",
      .doc = "skip files that do not decode (counted in the log)" },
    END
};
static const char *const layout_values[] = { "nchw", "nhwc", NULL };
static const key_spec npy_keys[] = {
    { .name = "images", .kind = KEY_PATH, .required = true,
      .doc = ".npy, uint8 or float32, [N, H, W], [N, C, H, W] or [N, H, W, C]" },
    { .name = "labels", .kind = KEY_PATH, .required = true, .doc = ".npy, integers, [N]" },
    { .name = "layout", .kind = KEY_STRING, .def = "\"nchw\"", .allowed = layout_values,
      .doc = "of 4-dimensional images" },
    END
};
static const variant_spec source_variants[] = {
    { .name = "idx", .keys = idx_keys },
    { .name = "cifar10", .keys = cifar_keys },
    { .name = "fake", .keys = fake_keys },
    { .name = "image_folder", .keys = image_folder_keys },
    { .name = "npy", .keys = npy_keys },
    END
};

static int check_source(vctx *c, config_setting_t *g, const char *path, const variant_spec *v)
{
    char key[300];
    config_setting_t *shape = config_setting_get_member(g, "shape");
    snprintf(key, sizeof(key), "%s.shape", path);
    if (shape != NULL && config_setting_length(shape) == 2)
        return schema_error(c, shape, key, "must be [C, H, W] or [N] (got 2 elements)");
    config_setting_t *ch = config_setting_get_member(g, "channels");
    if (ch != NULL && config_setting_get_int(ch) == 2) {
        snprintf(key, sizeof(key), "%s.channels", path);
        return schema_error(c, ch, key, "must be 1 (grey) or 3 (RGB) (got 2)");
    }
    int64_t n = 1;
    for (int i = 0; shape != NULL && i < config_setting_length(shape); i++)
        n *= config_setting_get_int_elem(shape, i);
    if (n > TT_MAX_TENSOR) {
        snprintf(key, sizeof(key), "%s.shape", path);
        return schema_error(c, shape, key, "%lld elements per sample, more than %d",
                            (long long)n, TT_MAX_TENSOR);
    }
    return 0;
}

static const group_spec source_spec = {
    .what = "source", .keys = (const key_spec[]){ END }, .variants = source_variants,
    .check = check_source,
};

static const key_spec normalize_keys[] = {
    { .name = "mean", .kind = KEY_FLOAT_ARRAY, .required = true, .min_len = 1, .max_len = 16,
      .doc = "per-channel mean (one value: all channels)" },
    { .name = "std", .kind = KEY_FLOAT_ARRAY, .required = true, .min_len = 1, .max_len = 16,
      .lo_kind = GT, .lo = 0, .doc = "per-channel standard deviation" },
    END
};
static const key_spec crop_keys[] = {
    { .name = "size", .kind = KEY_INT, .required = true, .lo_kind = GE, .lo = 1, .hi_kind = LE,
      .hi = MAX_SIDE, .doc = "output height and width" },
    { .name = "padding", .kind = KEY_INT, .def = "0", .lo_kind = GE, .lo = 0, .hi_kind = LE,
      .hi = MAX_SIDE, .doc = "zeros added on each side first" },
    END
};
#define SIZE_KEY(what) { .name = "size", .kind = KEY_INT, .required = true, .lo_kind = GE, \
                        .lo = 1, .hi_kind = LE, .hi = 65536, .doc = what }
#define JITTER_KEY(n) { .name = n, .kind = KEY_FLOAT, .def = "0.0", .lo_kind = GE, .lo = 0, \
                        .doc = "factor uniform in [max(0, 1 - v), 1 + v]" }
static const variant_spec augment_variants[] = {
    { .name = "normalize", .keys = normalize_keys },
    { .name = "random_crop", .keys = crop_keys },
    { .name = "flip", .keys = (const key_spec[]){ END } },
    { .name = "resize", .keys = (const key_spec[]){ SIZE_KEY("the shorter side"), END } },
    { .name = "center_crop", .keys = (const key_spec[]){ SIZE_KEY("output height and width"), END } },
    { .name = "random_resized_crop",
      .keys = (const key_spec[]){
          SIZE_KEY("output height and width"),
          { .name = "scale", .kind = KEY_FLOAT_ARRAY, .def = "[0.08, 1.0]", .min_len = 2,
            .max_len = 2, .lo_kind = GT, .lo = 0, .hi_kind = LE, .hi = 1,
            .doc = "range of the crop's area as a fraction of the image's" },
          { .name = "ratio", .kind = KEY_FLOAT_ARRAY, .def = "[0.75, 1.3333333333333333]",
            .min_len = 2, .max_len = 2, .lo_kind = GT, .lo = 0, .hi_kind = LE, .hi = 1000,
            .doc = "range of the crop's aspect ratio (width / height)" },
          END } },
    { .name = "color_jitter",
      .keys = (const key_spec[]){
          JITTER_KEY("brightness"), JITTER_KEY("contrast"), JITTER_KEY("saturation"), END } },
    END
};

/* random_resized_crop: each range is [low, high] */
static int check_augment(vctx *c, config_setting_t *g, const char *path, const variant_spec *v)
{
    static const char *const ranges[] = { "scale", "ratio" };
    for (int i = 0; i < 2; i++) {
        config_setting_t *r = config_setting_get_member(g, ranges[i]);
        if (r == NULL || config_setting_length(r) != 2)
            continue;
        double lo = schema_number(config_setting_get_elem(r, 0));
        double hi = schema_number(config_setting_get_elem(r, 1));
        if (lo > hi) {
            char key[300];
            snprintf(key, sizeof(key), "%s.%s", path, ranges[i]);
            return schema_error(c, r, key, "must be [low, high] (got [%g, %g])", lo, hi);
        }
    }
    return 0;
}

static const group_spec augment_spec = {
    .what = "augment", .keys = (const key_spec[]){ END }, .variants = augment_variants,
    .check = check_augment,
};

static const group_spec prefetch_spec = {
    .what = "prefetch",
    .keys = (const key_spec[]){
        { .name = "workers", .kind = KEY_INT, .def = "2", .lo_kind = GE, .lo = 0, .hi_kind = LE, .hi = 64,
          .doc = "worker threads; 0: batches are made inline" },
        { .name = "queue", .kind = KEY_INT, .def = "8", .lo_kind = GE, .lo = 1, .hi_kind = LE,
          .hi = 1024, .doc = "batches queued ahead" },
        END },
};

static const group_spec dataflow_spec = {
    .what = "dataflow",
    .keys = (const key_spec[]){
        { .name = "source", .kind = KEY_GROUP, .required = true, .sub = &source_spec },
        { .name = "shuffle", .kind = KEY_BOOL, .def = "true", .doc = "new permutation every pass" },
        { .name = "augment", .kind = KEY_GROUP_LIST, .def = "( )", .sub = &augment_spec },
        { .name = "batch_size", .kind = KEY_INT, .required = true, .lo_kind = GE, .lo = 1,
          .hi_kind = LE, .hi = MAX_WIDTH, .doc = "per tower" },
        { .name = "limit", .kind = KEY_INT, .def = "0", .lo_kind = GE, .lo = 0, .doc = "first N samples; 0: all" },
        { .name = "prefetch", .kind = KEY_GROUP, .def = "{ }", .sub = &prefetch_spec },
        END },
};

/* inference_runner's dataflow: batch_size and prefetch default to the training
 * dataflow's (filled by check_plugin), shuffle to false. */
static const group_spec eval_dataflow_spec = {
    .what = "dataflow",
    .keys = (const key_spec[]){
        { .name = "source", .kind = KEY_GROUP, .required = true, .sub = &source_spec },
        { .name = "shuffle", .kind = KEY_BOOL, .def = "false" },
        { .name = "augment", .kind = KEY_GROUP_LIST, .def = "( )", .sub = &augment_spec },
        { .name = "batch_size", .kind = KEY_INT, .lo_kind = GE, .lo = 1, .hi_kind = LE,
          .hi = MAX_WIDTH },
        { .name = "limit", .kind = KEY_INT, .def = "0", .lo_kind = GE, .lo = 0 },
        { .name = "prefetch", .kind = KEY_GROUP, .sub = &prefetch_spec },
        END },
};

/* eval: the dataflow `towertrain eval` reads by default; batch_size and
 * prefetch default to the training dataflow's, as an inference_runner's. */
static int inherit_batching(vctx *c, config_setting_t *df)
{
    config_setting_t *train = config_lookup(c->cfg, "dataflow");
    if (train == NULL || df == NULL)
        return 0; /* reported as missing elsewhere */
    if (config_setting_get_member(df, "batch_size") == NULL &&
        schema_copy(df, "batch_size", config_setting_get_member(train, "batch_size")) == NULL)
        return err_set(c->err, TT_ERR_RUNTIME, "out of memory");
    if (config_setting_get_member(df, "prefetch") == NULL &&
        schema_copy(df, "prefetch", config_setting_get_member(train, "prefetch")) == NULL)
        return err_set(c->err, TT_ERR_RUNTIME, "out of memory");
    return 0;
}

static int check_eval(vctx *c, config_setting_t *g, const char *path, const variant_spec *v)
{
    return inherit_batching(c, config_setting_get_member(g, "dataflow"));
}

static const group_spec eval_spec = {
    .what = "eval",
    .keys = (const key_spec[]){
        { .name = "dataflow", .kind = KEY_GROUP, .required = true, .sub = &eval_dataflow_spec,
          .doc = "the dataflow towertrain eval reads" },
        END },
    .check = check_eval,
};

/* ---- optimizer (towertrain.cfg(5), OPTIMIZER) ---- */

#define WD_KEY { .name = "weight_decay", .kind = KEY_FLOAT, .def = "0.0", \
                                 .lo_kind = GE, .lo = 0, .doc = "L2, added to the gradient" }
#define MOMENTUM_KEYS { .name = "momentum", .kind = KEY_FLOAT, .def = "0.9", .lo_kind = GE, \
                        .lo = 0, .hi_kind = LT, .hi = 1 }, \
                      { .name = "nesterov", .kind = KEY_BOOL, .def = "false" }
#define ADAM_KEYS { .name = "beta1", .kind = KEY_FLOAT, .def = "0.9", .lo_kind = GE, .lo = 0, \
                    .hi_kind = LT, .hi = 1 }, \
                  { .name = "beta2", .kind = KEY_FLOAT, .def = "0.999", .lo_kind = GE, .lo = 0, \
                    .hi_kind = LT, .hi = 1 }, \
                  { .name = "epsilon", .kind = KEY_FLOAT, .def = "1e-08", .lo_kind = GT, .lo = 0 }

static const variant_spec optimizer_variants[] = {
    { .name = "sgd", .keys = (const key_spec[]){ WD_KEY, END } },
    { .name = "momentum", .keys = (const key_spec[]){ MOMENTUM_KEYS, WD_KEY, END } },
    { .name = "adam", .keys = (const key_spec[]){ ADAM_KEYS, WD_KEY, END } },
    { .name = "adamw",
      .keys = (const key_spec[]){
          ADAM_KEYS,
          { .name = "weight_decay", .kind = KEY_FLOAT, .def = "0.01", .lo_kind = GE, .lo = 0,
            .doc = "decoupled, as torch.optim.AdamW" },
          END } },
    { .name = "lars",
      .keys = (const key_spec[]){
          MOMENTUM_KEYS, WD_KEY,
          { .name = "trust_coefficient", .kind = KEY_FLOAT, .def = "0.001", .lo_kind = GT, .lo = 0 },
          { .name = "epsilon", .kind = KEY_FLOAT, .def = "1e-08", .lo_kind = GE, .lo = 0 },
          END } },
    END
};

static int check_optimizer(vctx *c, config_setting_t *g, const char *path, const variant_spec *v)
{
    config_setting_t *nest = config_setting_get_member(g, "nesterov");
    config_setting_t *mom = config_setting_get_member(g, "momentum");
    if (nest && mom && config_setting_get_bool(nest) && schema_number(mom) <= 0)
        return schema_error(c, nest, "optimizer.nesterov", "requires momentum > 0");
    return 0;
}

static const group_spec optimizer_spec = {
    .what = "optimizer",
    .keys = (const key_spec[]){
        { .name = "learning_rate", .kind = KEY_FLOAT, .required = true, .lo_kind = GT, .lo = 0 },
        { .name = "weight_decay_exclude", .kind = KEY_STRING_ARRAY, .def = "[ ]",
          .doc = "shell globs over parameter names: no weight decay (lars: no adaptation)" },
        { .name = "clip_global_norm", .kind = KEY_FLOAT, .def = "0.0", .lo_kind = GE, .lo = 0,
          .doc = "0: off" },
        END },
    .variants = optimizer_variants, .default_type = "sgd", .check = check_optimizer,
};

/* ---- trainer (towertrain.cfg(5), TRAINER) ---- */

static const char *const device_values[] = { "auto", "cpu", "gpu", "sim", NULL };
static const char *const allreduce_values[] = { "auto", "ring", "naive", "hierarchical", "nccl", NULL };
static const char *const ps_values[] = { "cpu", "gpu", NULL };
static const char *const precision_values[] = { "fp32", "bf16", "fp16", NULL };

static const variant_spec trainer_variants[] = {
    { .name = "simple", .keys = (const key_spec[]){ END } },
    { .name = "sync_replicated",
      .keys = (const key_spec[]){
          { .name = "allreduce", .kind = KEY_STRING, .def = "\"auto\"", .allowed = allreduce_values },
          END } },
    { .name = "sync_parameter_server",
      .keys = (const key_spec[]){
          { .name = "ps_device", .kind = KEY_STRING, .def = "\"cpu\"", .allowed = ps_values },
          END } },
    { .name = "async",
      .keys = (const key_spec[]){
          { .name = "scale_gradient", .kind = KEY_BOOL, .def = "true" },
          END } },
    END
};

/* nr_tower and towers describe the same thing: fill both, and they must agree. */
static int check_trainer(vctx *c, config_setting_t *g, const char *path, const variant_spec *v)
{
    config_setting_t *nr = config_setting_get_member(g, "nr_tower");
    config_setting_t *towers = config_setting_get_member(g, "towers");
    /* A --set of one of them (say nr_tower on a resolved job that lists towers)
     * wins over the other from the file. */
    if (nr && towers && schema_set_of(nr) != schema_set_of(towers)) {
        if (schema_set_of(nr) > schema_set_of(towers)) {
            config_setting_remove(g, "towers");
            towers = NULL;
        } else {
            config_setting_remove(g, "nr_tower");
            nr = NULL;
        }
    }
    if (towers != NULL) {
        int n = config_setting_length(towers);
        for (int i = 0; i < n; i++)
            for (int j = 0; j < i; j++)
                if (config_setting_get_int_elem(towers, i) ==
                    config_setting_get_int_elem(towers, j))
                    return schema_error(c, towers, "trainer.towers", "duplicate tower %d",
                                        config_setting_get_int_elem(towers, i));
        if (nr != NULL && config_setting_get_int(nr) != n)
            return schema_error(c, nr, "trainer.nr_tower",
                                "%d does not match the %d towers of trainer.towers",
                                config_setting_get_int(nr), n);
        if (nr == NULL) {
            char buf[16];
            snprintf(buf, sizeof(buf), "%d", n);
            if ((nr = schema_add_value(g, "nr_tower", buf)) == NULL)
                return err_set(c->err, TT_ERR_RUNTIME, "out of memory");
        }
    } else {
        int n = nr ? config_setting_get_int(nr) : 1;
        if ((towers = config_setting_add(g, "towers", CONFIG_TYPE_ARRAY)) == NULL)
            return err_set(c->err, TT_ERR_RUNTIME, "out of memory");
        for (int i = 0; i < n; i++)
            if (config_setting_set_int_elem(towers, -1, i) == NULL)
                return err_set(c->err, TT_ERR_RUNTIME, "out of memory");
    }
    if (nr == NULL) {
        if ((nr = schema_add_value(g, "nr_tower", "1")) == NULL)
            return err_set(c->err, TT_ERR_RUNTIME, "out of memory");
    }
    if (strcmp(v->name, "simple") == 0 && config_setting_get_int(nr) != 1) {
        /* blame what the user wrote */
        config_setting_t *s = config_setting_source_line(nr) || schema_set_of(nr) ? nr : towers;
        return schema_error(c, s, s == nr ? "trainer.nr_tower" : "trainer.towers",
                            "the simple trainer has exactly one tower (got %d)",
                            config_setting_get_int(nr));
    }
    return 0;
}

static const group_spec trainer_spec = {
    .what = "trainer",
    .keys = (const key_spec[]){
        { .name = "device", .kind = KEY_STRING, .def = "\"auto\"", .allowed = device_values },
        { .name = "nr_tower", .kind = KEY_INT, .lo_kind = GE, .lo = 1, .hi_kind = LE, .hi = TT_MAX_TOWERS },
        { .name = "towers", .kind = KEY_INT_ARRAY, .lo_kind = GE, .lo = 0, .hi_kind = LE,
          .hi = 65535, .min_len = 1, .max_len = TT_MAX_TOWERS },
        { .name = "gradient_packing", .kind = KEY_INT, .def = "0", .lo_kind = GE, .lo = 0,
          .hi_kind = LE, .hi = 65536 },
        { .name = "threads_per_tower", .kind = KEY_INT, .def = "0", .lo_kind = GE, .lo = 0,
          .hi_kind = LE, .hi = 1024 },
        { .name = "precision", .kind = KEY_STRING, .def = "\"fp32\"", .allowed = precision_values },
        { .name = "tf32", .kind = KEY_BOOL, .def = "false" },
        { .name = "deterministic", .kind = KEY_BOOL, .def = "true" },
        { .name = "accumulate", .kind = KEY_INT, .def = "1", .lo_kind = GE, .lo = 1,
          .hi_kind = LE, .hi = 65536, .doc = "micro-batches averaged per update" },
        { .name = "collective_timeout", .kind = KEY_INT, .def = "300", .lo_kind = GE, .lo = 0,
          .hi_kind = LE, .hi = 86400,
          .doc = "seconds a rank waits in one collective; 0 = forever" },
        END },
    .variants = trainer_variants, .default_type = "simple", .check = check_trainer,
};

/* ---- callbacks and monitors (towertrain.cfg(5), CALLBACKS, MONITORS) ---- */

static const key_spec plugin_keys[] = {
    { .name = "every_k_epochs", .kind = KEY_INT, .lo_kind = GE, .lo = 0 },
    { .name = "every_k_steps", .kind = KEY_INT, .lo_kind = GE, .lo = 0 },
    END
};

static const char *const param_values[] = { "learning_rate", NULL };
static const char *const interp_values[] = { "none", "linear", NULL };
static const char *const mode_values[] = { "min", "max", NULL };

#define MONITOR_KEY { .name = "monitor", .kind = KEY_STRING, .required = true, \
                                      .doc = "a scalar name" }

static const variant_spec callback_variants[] = {
    { .name = "model_saver",
      .keys = (const key_spec[]){
          { .name = "max_to_keep", .kind = KEY_INT, .def = "10", .lo_kind = GE, .lo = 0 }, END } },
    { .name = "min_saver", .keys = (const key_spec[]){ MONITOR_KEY, END } },
    { .name = "max_saver", .keys = (const key_spec[]){ MONITOR_KEY, END } },
    { .name = "inference_runner",
      .keys = (const key_spec[]){
          { .name = "dataflow", .kind = KEY_GROUP, .required = true, .sub = &eval_dataflow_spec },
          END } },
    { .name = "scheduled_hyperparam",
      .keys = (const key_spec[]){
          { .name = "param", .kind = KEY_STRING, .def = "\"learning_rate\"", .allowed = param_values },
          { .name = "schedule", .kind = KEY_SCHEDULE, .required = true },
          { .name = "interp", .kind = KEY_STRING, .def = "\"none\"", .allowed = interp_values },
          { .name = "step_based", .kind = KEY_BOOL, .def = "false" },
          END } },
    { .name = "stat_monitor_param",
      .keys = (const key_spec[]){
          { .name = "param", .kind = KEY_STRING, .def = "\"learning_rate\"", .allowed = param_values },
          MONITOR_KEY,
          { .name = "factor", .kind = KEY_FLOAT, .def = "0.1", .lo_kind = GT, .lo = 0 },
          { .name = "threshold", .kind = KEY_FLOAT, .def = "0.0", .lo_kind = GE, .lo = 0 },
          { .name = "last_k", .kind = KEY_INT, .def = "5", .lo_kind = GE, .lo = 1, .hi_kind = LE,
            .hi = 1000000 },
          { .name = "reverse", .kind = KEY_BOOL, .def = "false" },
          END } },
    { .name = "early_stop",
      .keys = (const key_spec[]){
          MONITOR_KEY,
          { .name = "mode", .kind = KEY_STRING, .def = "\"min\"", .allowed = mode_values },
          { .name = "patience", .kind = KEY_INT, .def = "3", .lo_kind = GE, .lo = 0 },
          { .name = "min_delta", .kind = KEY_FLOAT, .def = "0.0", .lo_kind = GE, .lo = 0 },
          END } },
    { .name = "progress_bar", .keys = (const key_spec[]){ END } },
    { .name = "moving_average_summary",
      .keys = (const key_spec[]){
          { .name = "decay", .kind = KEY_FLOAT, .def = "0.95", .lo_kind = GT, .lo = 0,
            .hi_kind = LT, .hi = 1 },
          END } },
    { .name = "estimated_time_left", .keys = (const key_spec[]){ END } },
    { .name = "throughput", .keys = (const key_spec[]){ END } },
    { .name = "peak_memory", .keys = (const key_spec[]){ END } },
    { .name = "gpu_utilization",
      .keys = (const key_spec[]){
          { .name = "interval", .kind = KEY_FLOAT, .def = "0.2", .lo_kind = GT, .lo = 0,
            .doc = "seconds between NVML samples" },
          END } },
    { .name = "timeline",
      .keys = (const key_spec[]){
          { .name = "steps", .kind = KEY_INT_ARRAY, .def = "[21, 30]", .lo_kind = GE, .lo = 1,
            .min_len = 2, .max_len = 2, .ascending = true,
            .doc = "[first, last] global steps recorded" },
          END } },
    END
};

static const variant_spec monitor_variants[] = {
    { .name = "json", .keys = (const key_spec[]){ END } },
    { .name = "events", .k_steps = 10,
      .keys = (const key_spec[]){ { .name = "histograms", .kind = KEY_BOOL, .def = "false" }, END } },
    { .name = "scalar_printer",
      .keys = (const key_spec[]){
          { .name = "whitelist", .kind = KEY_STRING_ARRAY, .def = "[ ]" },
          { .name = "blacklist", .kind = KEY_STRING_ARRAY, .def = "[ ]" },
          END } },
    END
};

/* every_k_epochs / every_k_steps: one of them, filled both; inference_runner's
 * dataflow inherits batch_size and prefetch from the training dataflow. */
static int check_plugin(vctx *c, config_setting_t *g, const char *path, const variant_spec *v)
{
    config_setting_t *ep = config_setting_get_member(g, "every_k_epochs");
    config_setting_t *st = config_setting_get_member(g, "every_k_steps");
    char key[300];
    int e = ep ? config_setting_get_int(ep) : -1, s = st ? config_setting_get_int(st) : -1;
    if (e > 0 && s > 0) {
        snprintf(key, sizeof(key), "%s.every_k_steps", path);
        return schema_error(c, st, key, "give every_k_epochs or every_k_steps, not both");
    }
    if (e == 0 && s <= 0) {
        snprintf(key, sizeof(key), "%s.every_k_epochs", path);
        return schema_error(c, ep, key, "must be >= 1 (got 0) unless every_k_steps is given");
    }
    if (s == 0 && e < 0) {
        snprintf(key, sizeof(key), "%s.every_k_steps", path);
        return schema_error(c, st, key, "must be >= 1 (got 0) unless every_k_epochs is given");
    }
    if (e < 0 && s < 0) {
        e = v->k_steps > 0 ? 0 : 1;
        s = v->k_steps;
    } else if (e < 0) {
        e = 0;
    } else if (s < 0) {
        s = 0;
    }
    char buf[16];
    snprintf(buf, sizeof(buf), "%d", e);
    if (ep == NULL && schema_add_value(g, "every_k_epochs", buf) == NULL)
        return err_set(c->err, TT_ERR_RUNTIME, "out of memory");
    snprintf(buf, sizeof(buf), "%d", s);
    if (st == NULL && schema_add_value(g, "every_k_steps", buf) == NULL)
        return err_set(c->err, TT_ERR_RUNTIME, "out of memory");

    if (strcmp(v->name, "inference_runner") == 0)
        return inherit_batching(c, config_setting_get_member(g, "dataflow"));
    return 0;
}

const group_spec callback_spec = {
    .what = "callback", .keys = plugin_keys, .variants = callback_variants, .check = check_plugin,
    .sibling = &monitor_spec, .sibling_list = "monitors",
};
const group_spec monitor_spec = {
    .what = "monitor", .keys = plugin_keys, .variants = monitor_variants, .check = check_plugin,
    .sibling = &callback_spec, .sibling_list = "callbacks",
};

/* ---- the job (towertrain.cfg(5), JOB FILE) ---- */

/* Every batch of the job (training, each inference_runner's) must keep the
 * model's batch tensors within TT_MAX_TENSOR elements. */
static int check_batches(vctx *c, config_setting_t *g)
{
    config_setting_t *df = config_setting_get_member(g, "dataflow");
    config_setting_t *b = df ? config_setting_get_member(df, "batch_size") : NULL;
    if (b != NULL && model_check_batch(c, b, "dataflow.batch_size") != 0)
        return -1;
    static const char *const lists[] = { "callbacks", "extra_callbacks" };
    for (int k = 0; k < 2; k++) {
        config_setting_t *l = config_setting_get_member(g, lists[k]);
        for (int i = 0; l != NULL && i < config_setting_length(l); i++) {
            config_setting_t *e = config_setting_get_elem(l, (unsigned)i);
            df = config_setting_type(e) == CONFIG_TYPE_GROUP
                     ? config_setting_get_member(e, "dataflow") : NULL;
            b = df ? config_setting_get_member(df, "batch_size") : NULL;
            char key[128];
            snprintf(key, sizeof(key), "%s[%d].dataflow.batch_size", lists[k], i);
            if (b != NULL && model_check_batch(c, b, key) != 0)
                return -1;
        }
    }
    return 0;
}

static int check_job(vctx *c, config_setting_t *g, const char *path, const variant_spec *v)
{
    if (check_batches(c, g) != 0)
        return -1;
    config_setting_t *st = config_setting_get_member(g, "starting_epoch");
    config_setting_t *mx = config_setting_get_member(g, "max_epoch");
    if (schema_number(st) > schema_number(mx))
        return schema_error(c, st, "starting_epoch", "must be <= max_epoch = %.0f (got %.0f)",
                            schema_number(mx), schema_number(st));

    /* logdir: relative to the current directory, default train_log/<job name>. */
    config_setting_t *ld = config_setting_get_member(g, "logdir");
    if (ld == NULL) {
        char stem[256], rel[300];
        path_stem(c->base, stem, sizeof(stem));
        snprintf(rel, sizeof(rel), "\"train_log/%s\"", stem);
        if ((ld = schema_add_value(g, "logdir", rel)) == NULL)
            return err_set(c->err, TT_ERR_RUNTIME, "out of memory");
        config_setting_set_hook(ld, NULL);
    }
    const char *base = c->base;
    c->base = NULL;
    int r = schema_resolve_path(c, ld, -1, "logdir");
    c->base = base;
    return r;
}

const group_spec job_spec = {
    .what = "job",
    .keys = (const key_spec[]){
        { .name = "logdir", .kind = KEY_STRING, .doc = "default train_log/<job file base name>" },
        { .name = "seed", .kind = KEY_INT64, .def = "1", .lo_kind = GE, .lo = 0 },
        { .name = "dataflow", .kind = KEY_GROUP, .required = true, .sub = &dataflow_spec },
        { .name = "model", .kind = KEY_CUSTOM, .required = true, .parse = model_parse_key,
          .doc = "a model file (relative to the job file) or an inline model group" },
        { .name = "optimizer", .kind = KEY_GROUP, .required = true, .sub = &optimizer_spec },
        { .name = "trainer", .kind = KEY_GROUP, .def = "{ }", .sub = &trainer_spec },
        { .name = "max_epoch", .kind = KEY_INT64, .def = "99999", .lo_kind = GE, .lo = 1,
          .hi_kind = LE, .hi = MAX_EPOCHS },
        { .name = "steps_per_epoch", .kind = KEY_INT64, .def = "0", .lo_kind = GE, .lo = 0,
          .hi_kind = LE, .hi = MAX_EPOCHS },
        { .name = "starting_epoch", .kind = KEY_INT64, .def = "1", .lo_kind = GE, .lo = 1,
          .hi_kind = LE, .hi = MAX_EPOCHS },
        { .name = "session_init", .kind = KEY_PATH },
        { .name = "eval", .kind = KEY_GROUP, .sub = &eval_spec },
        { .name = "callbacks", .kind = KEY_PLUGIN_LIST, .def = "( )", .sub = &callback_spec },
        { .name = "extra_callbacks", .kind = KEY_PLUGIN_LIST,
          .def = "( \"progress_bar\", \"moving_average_summary\" )", .sub = &callback_spec },
        { .name = "monitors", .kind = KEY_PLUGIN_LIST,
          .def = "( \"events\", \"json\", \"scalar_printer\" )", .sub = &monitor_spec },
        END },
    .check = check_job,
};
