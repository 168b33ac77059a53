/* test_config.c - job and model files (towertrain.cfg(5)): defaults, path
 * resolution, --set, bare plug-in names, the job_write round trip, and the exact
 * text of errors for bad input. Expected values come from the man pages, not from
 * the implementation. Works in a fresh temporary directory (the cwd), so
 * messages name files exactly as a user in that directory would type them. */
#include <libconfig.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config/job.h"
#include "tests/tt_test.h"

static char cwd[4096];

#define LENET_MODEL                                                                          \
    "input = [1, 28, 28];\n"                                                                 \
    "classes = 10;\n"                                                                        \
    "layers = (\n"                                                                           \
    "  { name = \"conv0\"; type = \"conv2d\"; filters = 6; kernel = 5; padding = 2; "        \
    "activation = \"relu\"; },\n"                                                            \
    "  { name = \"pool0\"; type = \"maxpool\"; kernel = 2; },\n"                             \
    "  { name = \"conv1\"; type = \"conv2d\"; filters = 16; kernel = 5; activation = \"relu\"; },\n" \
    "  { name = \"pool1\"; type = \"maxpool\"; kernel = 2; },\n"                             \
    "  { name = \"fc0\";   type = \"dense\"; units = 120; activation = \"relu\"; },\n"       \
    "  { name = \"fc1\";   type = \"dense\"; units = 84;  activation = \"relu\"; },\n"       \
    "  { name = \"fc2\";   type = \"dense\"; units = 10; }\n"                                \
    ");\n"                                                                                   \
    "loss = \"softmax_cross_entropy\";\n"

/* towertrain.cfg(5)'s example job, in jobs/, naming the model relative to itself. */
#define LENET_JOB                                                                            \
    "logdir = \"train_log/fashion_mnist_lenet\";\n"                                          \
    "seed = 42;\n"                                                                           \
    "dataflow = {\n"                                                                         \
    "  source = { type = \"idx\"; images = \"../data/train-images.gz\";\n"                   \
    "             labels = \"/usr/share/datasets/fashion-mnist/train-labels-idx1-ubyte.gz\"; };\n" \
    "  shuffle = true;\n"                                                                    \
    "  augment = ( { type = \"normalize\"; mean = [0.286]; std = [0.353]; },\n"              \
    "              { type = \"random_crop\"; size = 28; padding = 4; }, { type = \"flip\"; } );\n" \
    "  batch_size = 128;\n"                                                                  \
    "  limit = 0;\n"                                                                         \
    "  prefetch = { workers = 2; queue = 8; };\n"                                            \
    "};\n"                                                                                   \
    "model = \"../models/lenet.cfg\";\n"                                                     \
    "optimizer = { type = \"momentum\"; learning_rate = 0.05; momentum = 0.9; };\n"          \
    "trainer = { type = \"sync_replicated\"; nr_tower = 2; };\n"                             \
    "max_epoch = 5;\n"                                                                       \
    "session_init = \"init.safetensors\";\n"                                                 \
    "callbacks = ( { type = \"model_saver\"; max_to_keep = 3; }, \"throughput\",\n"          \
    "  { type = \"inference_runner\"; dataflow = { source = { type = \"idx\";\n"             \
    "      images = \"t10k-images.gz\"; labels = \"t10k-labels.gz\"; }; }; every_k_steps = 100; },\n" \
    "  { type = \"scheduled_hyperparam\"; schedule = ( (0, 0.05), (3, 0.005) ); } );\n"

/* The smallest job: everything else is a default. */
#define MIN_JOB                                                                              \
    "dataflow = { source = { type = \"fake\"; }; batch_size = 32; };\n"                      \
    "model = { input = [3, 32, 32]; classes = 10; layers = (\n"                              \
    "  { name = \"fc\"; type = \"dense\"; units = 10; } ); };\n"                             \
    "optimizer = { learning_rate = 0.1; };\n"

static char *job_to_string(const job_t *job)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (f == NULL)
        return NULL;
    int rc = job_write(job, f);
    fclose(f);
    if (rc != 0) {
        free(buf);
        return NULL;
    }
    return buf;
}

static void abs_of(char *out, size_t n, const char *rel)
{
    snprintf(out, n, "%s/%s", cwd, rel);
}

static void test_lenet(void)
{
    tt_write_file(NULL, "models/lenet.cfg", LENET_MODEL);
    tt_write_file(NULL, "jobs/lenet.cfg", LENET_JOB);
    job_t job;
    tt_err err = { 0 };
    int rc = job_load("jobs/lenet.cfg", NULL, 0, &job, &err);
    if (!tt_ok(rc == 0, "the man page's example job loads (%s)", err.msg))
        return;
    char want[8192];
    abs_of(want, sizeof(want), "jobs/lenet.cfg");
    tt_ok(strcmp(job.path, want) == 0, "job path absolute");
    abs_of(want, sizeof(want), "train_log/fashion_mnist_lenet");
    tt_ok(strcmp(job.logdir, want) == 0, "logdir relative to the cwd: %s", job.logdir);
    abs_of(want, sizeof(want), "models/lenet.cfg");
    tt_ok(strcmp(job.model.path, want) == 0, "model path relative to the job file: %s",
          job.model.path);
    abs_of(want, sizeof(want), "data/train-images.gz");
    tt_ok(strcmp(job.dataflow.source.images, want) == 0, "data path relative to the job file");
    tt_ok(strcmp(job.dataflow.source.labels,
                 "/usr/share/datasets/fashion-mnist/train-labels-idx1-ubyte.gz") == 0,
          "absolute data path kept");
    abs_of(want, sizeof(want), "jobs/init.safetensors");
    tt_ok(strcmp(job.session_init, want) == 0, "session_init relative to the job file");
    tt_ok(job.seed == 42 && job.max_epoch == 5, "seed and max_epoch");
    tt_ok(job.dataflow.source.type == SOURCE_IDX && job.dataflow.batch_size == 128,
          "dataflow source and batch");
    tt_ok(job.dataflow.n_augment == 3 && job.dataflow.augment[0].type == AUG_NORMALIZE &&
              job.dataflow.augment[0].n_mean == 1 &&
              fabsf(job.dataflow.augment[0].mean[0] - 0.286f) < 1e-7f &&
              fabsf(job.dataflow.augment[0].std[0] - 0.353f) < 1e-7f &&
              job.dataflow.augment[1].type == AUG_RANDOM_CROP && job.dataflow.augment[1].size == 28 &&
              job.dataflow.augment[1].padding == 4 && job.dataflow.augment[2].type == AUG_FLIP,
          "augment list in order");
    tt_ok(job.optimizer.type == OPT_MOMENTUM && fabsf(job.optimizer.learning_rate - 0.05f) < 1e-9f &&
              fabsf(job.optimizer.momentum - 0.9f) < 1e-7f && !job.optimizer.nesterov,
          "optimizer");
    tt_ok(job.trainer.type == TRAINER_SYNC_REPLICATED && job.trainer.nr_tower == 2 &&
              job.trainer.towers[0] == 0 && job.trainer.towers[1] == 1 &&
              strcmp(job.trainer.allreduce, "auto") == 0,
          "trainer: nr_tower 2 gives towers [0, 1], allreduce auto");

    /* model: MODEL FILE */
    const model_cfg *m = &job.model;
    tt_ok(m->input_rank == 3 && m->input[0] == 1 && m->input[1] == 28 && m->input[2] == 28 &&
              m->classes == 10 && m->n_layers == 7,
          "model input, classes, layers");
    tt_ok(m->n_layers == 7 && m->layers[0].type == LAYER_CONV2D && m->layers[0].filters == 6 &&
              m->layers[0].kernel == 5 && m->layers[0].padding == 2 && m->layers[0].stride == 1 &&
              m->layers[0].relu && m->layers[0].bias,
          "conv2d defaults: stride 1, bias true");
    tt_ok(m->n_layers == 7 && m->layers[1].type == LAYER_MAXPOOL && m->layers[1].kernel == 2 &&
              m->layers[1].stride == 2 && m->layers[1].padding == 0,
          "pool stride defaults to kernel, padding 0");
    tt_ok(m->n_layers == 7 && m->layers[6].type == LAYER_DENSE && m->layers[6].units == 10 &&
              !m->layers[6].relu && m->layers[6].bias && m->layers[6].n_inputs == 0 &&
              strcmp(m->layers[6].name, "fc2") == 0,
          "dense defaults: activation none, bias true, previous layer input");

    /* callbacks: callbacks then extra_callbacks; bare "throughput" is a group */
    tt_ok(job.n_callbacks == 6, "4 callbacks + 2 default extra_callbacks (%d)", job.n_callbacks);
    if (job.n_callbacks == 6) {
        tt_ok(strcmp(job.callbacks[0].type, "model_saver") == 0 &&
                  strcmp(job.callbacks[1].type, "throughput") == 0 &&
                  strcmp(job.callbacks[2].type, "inference_runner") == 0 &&
                  strcmp(job.callbacks[3].type, "scheduled_hyperparam") == 0 &&
                  strcmp(job.callbacks[4].type, "progress_bar") == 0 &&
                  strcmp(job.callbacks[5].type, "moving_average_summary") == 0,
              "callback order");
        const config_setting_t *s = job.callbacks[1].settings;
        tt_ok(s != NULL && config_setting_type(s) == CONFIG_TYPE_GROUP &&
                  strcmp(config_setting_get_string(config_setting_get_member(s, "type")),
                         "throughput") == 0,
              "bare string callback resolved to a group in the tree");
        int keep = 0;
        tt_ok(config_setting_lookup_int(job.callbacks[0].settings, "max_to_keep", &keep) && keep == 3,
              "plug-in settings readable from the group");
        tt_ok(job.callbacks[0].every_k_epochs == 1 && job.callbacks[0].every_k_steps == 0,
              "every_k_epochs defaults to 1");
        tt_ok(job.callbacks[2].every_k_epochs == 0 && job.callbacks[2].every_k_steps == 100,
              "every_k_steps given: every_k_epochs 0");
        const dataflow_cfg *ev = job.callbacks[2].dataflow;
        abs_of(want, sizeof(want), "jobs/t10k-images.gz");
        tt_ok(ev != NULL && !ev->shuffle && ev->batch_size == 128 && ev->workers == 2 &&
                  ev->queue == 8 && strcmp(ev->source.images, want) == 0,
              "inference_runner dataflow: shuffle false, batch/prefetch from training, paths");
        double decay = 0;
        tt_ok(config_setting_lookup_float(job.callbacks[5].settings, "decay", &decay) &&
                  fabs(decay - 0.95) < 1e-12,
              "moving_average_summary decay default 0.95");
    }
    job_free(&job);
}

static void test_defaults(void)
{
    tt_write_file(NULL, "minimal.cfg", MIN_JOB);
    job_t job;
    tt_err err = { 0 };
    if (!tt_ok(job_load("minimal.cfg", NULL, 0, &job, &err) == 0, "minimal job (%s)", err.msg))
        return;
    char want[8192];
    abs_of(want, sizeof(want), "train_log/minimal");
    tt_ok(strcmp(job.logdir, want) == 0, "logdir default train_log/<job name>: %s", job.logdir);
    tt_ok(job.seed == 1, "seed default 1");
    tt_ok(job.max_epoch == 99999, "max_epoch default 99999");
    tt_ok(job.steps_per_epoch == 0, "steps_per_epoch default 0");
    tt_ok(job.starting_epoch == 1, "starting_epoch default 1");
    tt_ok(job.session_init[0] == '\0', "no session_init");
    tt_ok(job.model.path[0] == '\0' && job.model.n_layers == 1, "inline model");
    const dataflow_cfg *d = &job.dataflow;
    tt_ok(d->shuffle && d->limit == 0 && d->workers == 2 && d->queue == 8 && d->n_augment == 0,
          "dataflow defaults: shuffle, limit 0, prefetch 2/8, no augment");
    tt_ok(d->source.type == SOURCE_FAKE && d->source.shape_rank == 3 && d->source.shape[0] == 3 &&
              d->source.shape[1] == 32 && d->source.shape[2] == 32 && d->source.classes == 10 &&
              d->source.size == 50000,
          "fake source defaults [3,32,32], 10 classes, 50000");
    const optimizer_cfg *o = &job.optimizer;
    tt_ok(o->type == OPT_SGD && o->momentum == 0 && !o->nesterov && o->weight_decay == 0,
          "optimizer default sgd, no momentum, weight_decay 0");
    const trainer_cfg *t = &job.trainer;
    tt_ok(t->type == TRAINER_SIMPLE && t->device == DEVICE_AUTO && t->nr_tower == 1 &&
              t->towers[0] == 0 && t->gradient_packing == 0 && t->threads_per_tower == 0,
          "trainer defaults: simple, auto, one tower 0");
    tt_ok(strcmp(t->allreduce, "auto") == 0 && strcmp(t->ps_device, "cpu") == 0 &&
              t->scale_gradient,
          "trainer struct defaults: allreduce auto, ps_device cpu, scale_gradient");
    tt_ok(job.n_callbacks == 2 && strcmp(job.callbacks[0].type, "progress_bar") == 0 &&
              strcmp(job.callbacks[1].type, "moving_average_summary") == 0,
          "extra_callbacks default (progress_bar, moving_average_summary)");
    tt_ok(job.n_monitors == 3 && strcmp(job.monitors[0].type, "events") == 0 &&
              strcmp(job.monitors[1].type, "json") == 0 &&
              strcmp(job.monitors[2].type, "scalar_printer") == 0,
          "monitors default (events, json, scalar_printer)");
    if (job.n_monitors == 3) {
        tt_ok(job.monitors[0].every_k_steps == 10 && job.monitors[0].every_k_epochs == 0,
              "events: every_k_steps 10");
        const config_setting_t *wl = config_setting_get_member(job.monitors[2].settings, "whitelist");
        tt_ok(wl != NULL && config_setting_length(wl) == 0, "scalar_printer whitelist []");
    }
    job_free(&job);

    /* the whole optimizer group replaced by --set */
    job_override adam[] = { { "optimizer={ type = \"adam\"; learning_rate = 1; }" } };
    err_clear(&err);
    if (tt_ok(job_load("minimal.cfg", adam, 1, &job, &err) == 0, "adam via --set (%s)", err.msg)) {
        tt_ok(job.optimizer.type == OPT_ADAM && job.optimizer.learning_rate == 1.0f &&
                  fabsf(job.optimizer.beta1 - 0.9f) < 1e-7f &&
                  fabsf(job.optimizer.beta2 - 0.999f) < 1e-7f &&
                  fabsf(job.optimizer.epsilon - 1e-8f) < 1e-15f,
              "adam defaults 0.9, 0.999, 1e-8; integer learning_rate accepted");
        job_free(&job);
    }
}

static void test_sets(void)
{
    job_override sets[] = {
        { "trainer.nr_tower=4" },                      /* existing key */
        { "dataflow.limit=1000" },                      /* key absent from the file */
        { "dataflow.augment=( { type = \"flip\"; } )" }, /* a list, replaced whole */
        { "extra_callbacks=( \"throughput\" )" },
        { "session_init=\"other.safetensors\"" },      /* relative to the cwd */
        { "callbacks[0].max_to_keep=0" },
        { "optimizer.learning_rate=0.0123456789" },
    };
    job_t job;
    tt_err err = { 0 };
    if (!tt_ok(job_load("jobs/lenet.cfg", sets, 7, &job, &err) == 0, "--set overrides (%s)",
               err.msg))
        return;
    tt_ok(job.trainer.nr_tower == 4 && job.trainer.towers[3] == 3, "--set existing key");
    tt_ok(job.dataflow.limit == 1000, "--set adds an absent key");
    tt_ok(job.dataflow.n_augment == 1 && job.dataflow.augment[0].type == AUG_FLIP,
          "--set replaces a list whole");
    tt_ok(job.n_callbacks == 5 && strcmp(job.callbacks[4].type, "throughput") == 0,
          "--set extra_callbacks");
    char want[8192];
    abs_of(want, sizeof(want), "other.safetensors");
    tt_ok(strcmp(job.session_init, want) == 0, "--set path relative to the cwd");
    int keep = -1;
    tt_ok(job.n_callbacks > 0 &&
              config_setting_lookup_int(job.callbacks[0].settings, "max_to_keep", &keep) &&
              keep == 0,
          "--set into a list element");

    /* round trip: the written job is a job file resolving to the same job */
    char *a = job_to_string(&job);
    tt_ok(a != NULL && strstr(a, "learning_rate = 0.0123456789;") != NULL,
          "floats written in full (round-trip form)");
    tt_write_file(NULL, "resolved.cfg", a ? a : "");
    job_t again;
    err_clear(&err);
    int rc = job_load_resolved("resolved.cfg", NULL, 0, &again, &err);
    tt_ok(rc == 0, "job_load_resolved reads job_write's output (%s)", err.msg);
    if (rc == 0) {
        char *b = job_to_string(&again);
        tt_ok(a && b && strcmp(a, b) == 0, "job_write -> job_load_resolved -> job_write identical");
        tt_ok(again.trainer.nr_tower == 4 && again.optimizer.learning_rate == job.optimizer.learning_rate &&
                  strcmp(again.session_init, job.session_init) == 0 &&
                  strcmp(again.model.path, job.model.path) == 0 &&
                  again.n_callbacks == job.n_callbacks && again.n_monitors == job.n_monitors &&
                  strcmp(again.logdir, job.logdir) == 0,
              "resolved job has the same values");
        free(b);
        job_free(&again);
    }
    /* a group value merges into the job's group: keys it does not name stay */
    job_override merge[] = {
        { "trainer={ type = \"simple\"; nr_tower = 1; }" },
        { "dataflow={ batch_size = 64; }" },
        { "optimizer={ type = \"adam\"; learning_rate = 0.001; }" },
        { "callbacks[1].every_k_steps=7" }, /* "throughput", a bare name */
    };
    err_clear(&err);
    rc = job_load("jobs/lenet.cfg", merge, 4, &again, &err);
    if (tt_ok(rc == 0, "--set of groups and into a bare plug-in name (%s)", err.msg)) {
        tt_ok(again.trainer.type == TRAINER_SIMPLE && again.trainer.nr_tower == 1,
              "--set trainer={...}: the keys it names");
        tt_ok(again.dataflow.batch_size == 64 && again.dataflow.limit == 0 &&
                  again.dataflow.n_augment == 3 && again.seed == 42,
              "--set dataflow={ batch_size = 64; }: the job's source, augment and limit stay");
        tt_ok(again.optimizer.type == OPT_ADAM && fabsf(again.optimizer.beta1 - 0.9f) < 1e-7f,
              "--set optimizer={ type = \"adam\"; }: the momentum optimizer's momentum is "
              "dropped, not refused");
        int every = -1;
        tt_ok(again.n_callbacks > 1 && strcmp(again.callbacks[1].type, "throughput") == 0 &&
                  config_setting_lookup_int(again.callbacks[1].settings, "every_k_steps",
                                            &every) && every == 7,
              "--set callbacks[1].every_k_steps on the bare name \"throughput\" (%d)", every);
        job_free(&again);
    }
    /* a resolved job lists towers; --set nr_tower on it still works */
    job_override nr2[] = { { "trainer.nr_tower=2" } };
    err_clear(&err);
    rc = job_load_resolved("resolved.cfg", nr2, 1, &again, &err);
    tt_ok(rc == 0 && again.trainer.nr_tower == 2 && again.trainer.towers[1] == 1,
          "--set trainer.nr_tower on a resolved job (%s)", err.msg);
    if (rc == 0)
        job_free(&again);
    free(a);
    job_free(&job);

    /* libconfig 1.5's own writer would print 6 digits: check the value itself */
    config_t cfg;
    config_init(&cfg);
    double lr = 0;
    tt_ok(config_read_file(&cfg, "resolved.cfg") &&
              config_lookup_float(&cfg, "optimizer.learning_rate", &lr) && lr == 0.0123456789,
          "written float reads back to the same double");
    config_destroy(&cfg);
}

/* ---- bad input: exact messages ---- */

typedef struct {
    const char *job;   /* text of bad.cfg */
    const char *model; /* text of m.cfg, or NULL */
    const char *set;   /* one --set, or NULL */
    const char *want;  /* the exact message */
} bad_case;

#define DF "dataflow = { source = { type = \"fake\"; }; batch_size = 32; };\n"
#define MODEL_INLINE                                                                          \
    "model = { input = [3, 32, 32]; classes = 10; layers = (\n"                               \
    "  { name = \"fc\"; type = \"dense\"; units = 10; } ); };\n"
#define OPT "optimizer = { learning_rate = 0.1; };\n"
#define MF "model = \"m.cfg\";\n"

static const bad_case bad_cases[] = {
    { "optimzer = { learning_rate = 0.1; };\n" DF MODEL_INLINE, NULL, NULL,
      "bad.cfg:1: unknown key 'optimzer' (did you mean 'optimizer'?)" },
    { DF MODEL_INLINE OPT "trainer = {\n  nr_towr = 2; };\n", NULL, NULL,
      "bad.cfg:6: unknown key 'trainer.nr_towr' (did you mean 'trainer.nr_tower'?)" },
    { DF MODEL_INLINE OPT "trainer = { nr_tower = \"2\"; };\n", NULL, NULL,
      "bad.cfg:5: trainer.nr_tower: expected an integer (got a string)" },
    { DF MODEL_INLINE OPT "trainer = { nr_tower = 0; };\n", NULL, NULL,
      "bad.cfg:5: trainer.nr_tower: must be >= 1 (got 0)" },
    { DF MODEL_INLINE OPT "trainer = { type = \"sync_replicated\"; nr_tower = 65; };\n", NULL, NULL,
      "bad.cfg:5: trainer.nr_tower: must be <= 64 (got 65)" },
    { DF MODEL_INLINE "optimizer = { type = \"momentun\"; learning_rate = 0.1; };\n", NULL, NULL,
      "bad.cfg:4: optimizer.type: unknown optimizer 'momentun' (did you mean 'momentum'?)" },
    { DF MODEL_INLINE "optimizer = { type = \"sgd\"; learning_rate = 0.1;\n momentum = 0.9; };\n",
      NULL, NULL, "bad.cfg:5: optimizer.momentum: not allowed for optimizer 'sgd' (only for 'momentum', 'lars')" },
    { DF MODEL_INLINE "optimizer = { type = \"momentum\"; learning_rate = 0.1; momentum = 1.0; };\n",
      NULL, NULL, "bad.cfg:4: optimizer.momentum: must be < 1 (got 1)" },
    { DF MODEL_INLINE "optimizer = { type = \"momentum\"; learning_rate = 0.1; momentum = 0.0; nesterov = true; };\n",
      NULL, NULL, "bad.cfg:4: optimizer.nesterov: requires momentum > 0" },
    { DF MODEL_INLINE "optimizer = { learning_rate = 0; };\n", NULL, NULL,
      "bad.cfg:4: optimizer.learning_rate: must be > 0 (got 0)" },
    /* a float key is checked as the float it is stored in: 1e-50 is 0 there,
     * and a dropout of 0.99999999 would be a rate of 1 (an infinite scale) */
    { DF MODEL_INLINE "optimizer = { learning_rate = 1e-50; };\n", NULL, NULL,
      "bad.cfg:4: optimizer.learning_rate: must be > 0 (got 1e-50, stored as the float 0)" },
    { DF MODEL_INLINE "optimizer = { type = \"adam\"; learning_rate = 0.1; epsilon = 1e-46; };\n",
      NULL, NULL, "bad.cfg:4: optimizer.epsilon: must be > 0 (got 1e-46, stored as the float 0)" },
    { DF "model = { input = [1, 4, 4]; classes = 2;\n layers = ( { name = \"d\"; type = \"dropout\"; "
      "rate = 0.99999999; },\n { name = \"fc\"; type = \"dense\"; units = 2; } ); };\n" OPT, NULL, NULL,
      "bad.cfg:3: model.layers[0].rate: must be < 1 (got 0.99999999, stored as the float 1)" },
    { DF MODEL_INLINE "optimizer = { type = \"sgd\"; };\n", NULL, NULL,
      "bad.cfg:4: optimizer: missing required key 'learning_rate'" },
    { MODEL_INLINE OPT, NULL, NULL, "bad.cfg: missing required key 'dataflow'" },
    { "dataflow = {\n source = { type = \"fake\"; }; };\n" MODEL_INLINE OPT, NULL, NULL,
      "bad.cfg:1: dataflow: missing required key 'batch_size'" },
    { DF MODEL_INLINE OPT "trainer = { type = \"simple\"; nr_tower = 2; };\n", NULL, NULL,
      "bad.cfg:5: trainer.nr_tower: the simple trainer has exactly one tower (got 2)" },
    { DF MODEL_INLINE OPT "trainer = { type = \"sync_replicated\"; towers = [0, 1, 1]; };\n", NULL,
      NULL, "bad.cfg:5: trainer.towers: duplicate tower 1" },
    { DF MODEL_INLINE OPT "trainer = { type = \"sync_replicated\"; towers = [0, 1]; nr_tower = 3; };\n",
      NULL, NULL, "bad.cfg:5: trainer.nr_tower: 3 does not match the 2 towers of trainer.towers" },
    { DF MODEL_INLINE OPT "trainer = { type = \"sync_parameter_server\"; allreduce = \"ring\"; };\n",
      NULL, NULL,
      "bad.cfg:5: trainer.allreduce: not allowed for trainer 'sync_parameter_server' (only for 'sync_replicated')" },
    { DF MODEL_INLINE OPT "trainer = { type = \"sync_replicated\"; allreduce = \"rin\"; };\n", NULL,
      NULL, "bad.cfg:5: trainer.allreduce: unknown value 'rin' (did you mean 'ring'?)" },
    { DF MODEL_INLINE OPT "trainer = { device = \"fpga\"; };\n", NULL, NULL,
      "bad.cfg:5: trainer.device: unknown value 'fpga' (expected auto, cpu, gpu or sim)" },
    { DF MODEL_INLINE OPT "max_epoch = 3;\nstarting_epoch = 4;\n", NULL, NULL,
      "bad.cfg:6: starting_epoch: must be <= max_epoch = 3 (got 4)" },
    { DF MODEL_INLINE OPT "callbacks = ( \"model_saver\",\n \"early_stp\" );\n", NULL, NULL,
      "bad.cfg:6: callbacks[1]: unknown callback 'early_stp' (did you mean 'early_stop'?)" },
    { DF MODEL_INLINE OPT "callbacks = ( { type = \"early_stop\"; patience = 2; } );\n", NULL, NULL,
      "bad.cfg:5: callbacks[0]: missing required key 'monitor'" },
    { DF MODEL_INLINE OPT "callbacks = ( { type = \"timeline\"; steps = [5, 3]; } );\n", NULL, NULL,
      "bad.cfg:5: callbacks[0].steps[1]: must not be below the element before it (3 < 5)" },
    { DF MODEL_INLINE OPT "callbacks = ( { type = \"model_saver\"; every_k_epochs = 1; every_k_steps = 5; } );\n",
      NULL, NULL, "bad.cfg:5: callbacks[0].every_k_steps: give every_k_epochs or every_k_steps, not both" },
    { DF MODEL_INLINE OPT "callbacks = ( { type = \"scheduled_hyperparam\";\n schedule = ( (0, 0.1),\n (5, 0.01), (2, 0.001) ); } );\n",
      NULL, NULL, "bad.cfg:7: callbacks[0].schedule[2]: epochs must not decrease (2 after 5)" },
    { DF MODEL_INLINE OPT "monitors = ( \"json\", \"throughput\" );\n", NULL, NULL,
      "bad.cfg:5: monitors[1]: unknown monitor 'throughput' ('throughput' is a callback: list it in callbacks)" },
    { "dataflow = { source = { type = \"fake\"; }; batch_size = 32;\n augment = ( { type = \"normalize\"; mean = [0.5]; std = [0.0]; } ); };\n" MODEL_INLINE OPT,
      NULL, NULL, "bad.cfg:2: dataflow.augment[0].std[0]: must be > 0 (got 0)" },
    { "dataflow = { source = { type = \"fake\"; }; batch_size = 32; prefetch = { workers = 65; }; };\n" MODEL_INLINE OPT,
      NULL, NULL, "bad.cfg:1: dataflow.prefetch.workers: must be <= 64 (got 65)" },
    { "dataflow = { source = { type = \"idx\"; images = \"a.gz\"; }; batch_size = 32; };\n" MODEL_INLINE OPT,
      NULL, NULL, "bad.cfg:1: dataflow.source: missing required key 'labels'" },
    { "dataflow = { source = { type = \"fake\"; }; batch_size = 32.0; };\n" MODEL_INLINE OPT,
      NULL, NULL, "bad.cfg:1: dataflow.batch_size: expected an integer (got a float)" },
    { DF MODEL_INLINE OPT "seed = = 1;\n", NULL, NULL, "bad.cfg:5: syntax error" },
    { DF MF OPT, NULL, NULL, "bad.cfg:2: model: cannot read m.cfg: No such file or directory" },
    /* model files: errors name the model file */
    { DF MF OPT, "input = [1, 28, 28];\nclasses = 10;\nlayers = (\n { name = \"a\"; type = \"dense\"; units = 10; }\n", NULL,
      "m.cfg:5: syntax error" },
    { DF MF OPT, "input = [1, 28, 28];\nclasses = 10;\nlayers = (\n { name = \"a\"; type = \"dense\"; units = 5; },\n { name = \"a\"; type = \"dense\"; units = 10; } );\n",
      NULL, "m.cfg:5: layers[1].name: duplicate layer name 'a' (also layers[0])" },
    { DF MF OPT, "input = [1, 28, 28];\nclasses = 10;\nlayers = (\n { name = \"x0\"; type = \"dense\"; units = 10; },\n { name = \"b\"; type = \"relu\"; input = \"x\"; },\n { name = \"x\"; type = \"dense\"; units = 10; } );\n",
      NULL, "m.cfg:5: layers[1].input (b): 'x' is not an earlier layer (did you mean 'x0'?)" },
    { DF MF OPT, "input = [1, 28, 28];\nclasses = 10;\nlayers = (\n { name = \"a\"; type = \"dense\"; units = 10; },\n { name = \"b\"; type = \"convolution\"; } );\n",
      NULL, "m.cfg:5: layers[1].type: unknown layer type 'convolution'" },
    /* errors name the line of the offending key, not of its layer */
    { DF MF OPT, "input = [1, 28, 28];\nclasses = 10;\nlayers = (\n { name = \"c\"; type = \"conv2d\"; filters = 4;\n   kernel = 29; },\n { name = \"d\"; type = \"dense\"; units = 10; } );\n",
      NULL, "m.cfg:5: layers[0].kernel (c): 29 is larger than the input [1, 28, 28] with padding 0" },
    { DF MF OPT, "input = [1, 28, 28];\nclasses = 10;\nlayers = (\n { name = \"c\"; type = \"conv2d\"; filters = 4; kernel = 0; } );\n",
      NULL, "m.cfg:4: layers[0].kernel: must be >= 1 (got 0)" },
    { DF MF OPT, "input = [1, 28, 28];\nclasses = 10;\nlayers = (\n { name = \"a\"; type = \"dense\";\n   units = 12; } );\n",
      NULL, "m.cfg:5: layers[0].units (a): the last layer's output [12] has 12 values, but classes = 10" },
    { DF MF OPT, "input = [1, 28, 28];\nclasses = 10;\nlayers = (\n { name = \"a\"; type = \"conv2d\"; kernel = 28;\n   filters = 12; } );\n",
      NULL, "m.cfg:5: layers[0].filters (a): the last layer's output [12, 1, 1] has 12 values, but classes = 10" },
    { DF MF OPT, "input = [1, 28, 28];\nclasses = 10;\nlayers = (\n { name = \"a\"; type = \"dense\"; units = 10; },\n { name = \"b\"; type = \"dense\"; units = 12; },\n { name = \"s\"; type = \"add\";\n   inputs = [\"a\", \"b\"]; } );\n",
      NULL, "m.cfg:7: layers[2].inputs (s): inputs have different shapes [10] and [12]" },
    { DF MF OPT, "input = [1, 28, 28];\nclasses = 10;\nlayers = (\n { name = \"a\"; type = \"dense\"; units = 10; },\n { name = \"d\"; type = \"dropout\"; rate = 1.0; } );\n",
      NULL, "m.cfg:5: layers[1].rate: must be < 1 (got 1)" },
    { DF MF OPT, "input = [1, 28, 28];\nclasses = 10;\nlayers = (\n { name = \"a\"; type = \"conv2d\"; filters = 10; kernel = 3;\n  units = 4; } );\n",
      NULL, "m.cfg:5: layers[0].units: not allowed for layer type 'conv2d' (only for 'dense')" },
    { DF MF OPT, "input = [1, 28, 28];\nclasses = 10;\nlayers = (\n { name = \"a\"; type = \"maxpool\"; kernel = 2; padding = 2; } );\n",
      NULL, "m.cfg:4: layers[0].padding: must be <= kernel / 2 = 1 (got 2)" },
    { DF MF OPT, "input = [1, 28, 28];\nclasses = 10;\nlayers = (\n { name = \"a\"; type = \"flatten\"; },\n { name = \"b\"; type = \"conv2d\"; filters = 1; kernel = 1; } );\n",
      NULL, "m.cfg:5: layers[1].type (b): conv2d needs an image input [C, H, W] (got [784])" },
    { DF MF OPT, "input = [1, 28, 28];\nclasses = 10;\nlayers = (\n { name = \"a\"; type = \"dense\"; units = 10; },\n { name = \"b\"; type = \"dense\"; units = 10; },\n { name = \"s\"; type = \"add\"; inputs = [\"a\", \"b\", \"zzz\"]; } );\n",
      NULL, "m.cfg:6: layers[2].inputs[2] (s): 'zzz' is not an earlier layer" },
    { DF MF OPT, "input = [1, 28];\nclasses = 10;\nlayers = ( { name = \"a\"; type = \"dense\"; units = 10; } );\n",
      NULL, "m.cfg:1: input: must be [C, H, W] or [N] (got 2 elements)" },
    { DF MF OPT, "inputs = [1, 28, 28];\nclasses = 10;\nlayers = ( { name = \"a\"; type = \"dense\"; units = 10; } );\n",
      NULL, "m.cfg:1: unknown key 'inputs' (did you mean 'input'?)" },
    /* absurd values are refused before any arithmetic, naming file:line:key;
     * libconfig 1.5 alone would read 1000000000000 as -727379968 and
     * 4294967306 as 10 */
    { DF MF OPT, "input = [1, 28, 28];\nclasses = 10;\nlayers = (\n { name = \"c\"; type = \"conv2d\"; filters = 4; kernel = 3;\n   padding = 0x7fffffff; },\n { name = \"d\"; type = \"dense\"; units = 10; } );\n",
      NULL, "m.cfg:5: layers[0].padding: must be <= 65536 (got 2147483647)" },
    { DF MF OPT, "input = [1, 28, 28];\nclasses = 10;\nlayers = (\n { name = \"a\"; type = \"dense\";\n   units = 1000000000000; } );\n",
      NULL, "m.cfg:5: layers[0].units: must be <= 16777216 (got 1000000000000)" },
    { DF MF OPT, "input = [1, 28, 28];\nclasses = 10;\nlayers = (\n { name = \"a\"; type = \"dense\";\n   units = 4294967306; } );\n",
      NULL, "m.cfg:5: layers[0].units: must be <= 16777216 (got 4294967306)" },
    { DF MF OPT, "input = [1, 28, 28];\nclasses = -2147483649;\nlayers = (\n { name = \"a\"; type = \"dense\"; units = 10; } );\n",
      NULL, "m.cfg:2: classes: must be >= 1 (got -2147483649)" },
    { DF MF OPT, "input = [1, 28, 28];\nclasses = 99999999999999999999;\nlayers = (\n { name = \"a\"; type = \"dense\"; units = 10; } );\n",
      NULL, "m.cfg:2: syntax error: an integer beyond 64 bits" },
    { "dataflow = { source = { type = \"fake\"; }; batch_size = 2147483648; };\n" MODEL_INLINE OPT,
      NULL, NULL, "bad.cfg:1: dataflow.batch_size: must be <= 16777216 (got 2147483648)" },
    { DF MODEL_INLINE OPT, NULL, "dataflow.batch_size=2147483648",
      "--set dataflow.batch_size=2147483648: must be <= 16777216 (got 2147483648)" },
    { "dataflow = { source = { type = \"fake\"; }; batch_size = 1000000; };\n" MODEL_INLINE OPT,
      NULL, NULL, "bad.cfg:1: dataflow.batch_size: 1000000 samples of the model input (3072 "
      "values each) are 3072000000 values, more than 2147483647" },
    { DF MODEL_INLINE OPT "callbacks = ( { type = \"inference_runner\"; dataflow = {\n source = { type = \"fake\"; };\n batch_size = 700000; }; } );\n",
      NULL, NULL, "bad.cfg:7: callbacks[0].dataflow.batch_size: 700000 samples of the model "
      "input (3072 values each) are 2150400000 values, more than 2147483647" },
    { DF MF OPT, "input = [3, 32, 32];\nclasses = 10;\nlayers = (\n { name = \"a\"; type = \"dense\";\n   units = 16777216; } );\n",
      NULL, "m.cfg:5: layers[0].units (a): the weight [16777216, 3072] has 51539607552 elements, more than 2147483647" },
    { DF MF OPT, "input = [1, 1, 1];\nclasses = 10;\nlayers = (\n { name = \"c\"; type = \"conv2d\"; filters = 1; kernel = 1;\n   padding = 65536; },\n { name = \"d\"; type = \"dense\"; units = 10; } );\n",
      NULL, "m.cfg:5: layers[0].padding (c): the output [1, 131073, 131073] has 17180131329 elements, more than 2147483647" },
    { DF MF OPT, "input = [65536,\n 65536, 1];\nclasses = 10;\nlayers = (\n { name = \"a\"; type = \"dense\"; units = 10; } );\n",
      NULL, "m.cfg:1: input: 4294967296 elements per sample, more than 2147483647" },
    { "dataflow = { source = { type = \"fake\"; }; batch_size = 32; prefetch = { queue = 2147483647; }; };\n" MODEL_INLINE OPT,
      NULL, NULL, "bad.cfg:1: dataflow.prefetch.queue: must be <= 1024 (got 2147483647)" },
    { DF MODEL_INLINE "optimizer = { learning_rate = 1e39; };\n", NULL, NULL,
      "bad.cfg:4: optimizer.learning_rate: must be <= 3.4028234663852886e+38 (got 1e+39)" },
    { DF MODEL_INLINE OPT "callbacks = ( { type = \"scheduled_hyperparam\";\n schedule = ( (0, 0.1),\n (5, 1e999) ); } );\n",
      NULL, NULL, "bad.cfg:7: callbacks[0].schedule[1]: the value must be a finite float (got inf)" },
    { DF MODEL_INLINE OPT "max_epoch = 100000000000000L;\n", NULL, NULL,
      "bad.cfg:5: max_epoch: must be <= 1073741824 (got 100000000000000)" },
    { DF MODEL_INLINE OPT "seed = 1;\n@include \"/dev/stdin\"\n", NULL, NULL,
      "bad.cfg:6: syntax error: @include is not supported" },
    /* bytes from the file are escaped in messages: one line, no control codes */
    { DF "model = \"m\x1b]0;owned\x07\nx\xff.cfg\";\n" OPT, NULL, NULL,
      "bad.cfg:2: model: cannot read m\\x1b]0;owned\\x07\\x0ax\\xff.cfg: No such file or directory" },
    { DF MF OPT, "input = [1, 28, 28];\nclasses = 10;\nlayers = (\n { name = \"a\\x1b[2J\xc3\xa9\"; type = \"dense\"; units = 5; },\n { name = \"a\x1b[2J\xc3\xa9\"; type = \"dense\"; units = 10; } );\n",
      NULL, "m.cfg:5: layers[1].name: duplicate layer name 'a\\x1b[2J\xc3\xa9' (also layers[0])" },
    { DF MODEL_INLINE OPT "trainer = { type = \"sync_replicated\"; allreduce = \"r\x9b" "1m\"; };\n", NULL,
      NULL, "bad.cfg:5: trainer.allreduce: unknown value 'r\\x9b1m' (expected auto, ring, naive, hierarchical or nccl)" },
    /* inline model: key paths start with model. */
    { DF "model = { input = [4]; classes = 2; layers = (\n { name = \"a\"; type = \"dense\"; units = 0; } ); };\n" OPT,
      NULL, NULL, "bad.cfg:3: model.layers[0].units: must be >= 1 (got 0)" },
    /* --set errors name the --set */
    { DF MODEL_INLINE OPT, NULL, "trainer.nr_tower=0", "--set trainer.nr_tower=0: must be >= 1 (got 0)" },
    { DF MODEL_INLINE OPT, NULL, "trainer.nr_towr=2",
      "--set trainer.nr_towr=2: unknown key 'trainer.nr_towr' (did you mean 'trainer.nr_tower'?)" },
    { DF MODEL_INLINE OPT, NULL, "trainer.nr_tower=abc", "--set trainer.nr_tower=abc: invalid value" },
    /* one --set, one value: what follows a ';' is not dropped silently */
    { DF MODEL_INLINE OPT, NULL, "max_epoch=1; seed=5", "--set max_epoch=1; seed=5: invalid value" },
    { DF MODEL_INLINE OPT, NULL, "trainer.nr_tower", "--set trainer.nr_tower: expected KEY=VALUE" },
    { DF MODEL_INLINE OPT, NULL, "=4", "--set =4: expected KEY=VALUE" },
    { DF MODEL_INLINE OPT, NULL, "optimizer.learning_rate.x=4", "--set optimizer.learning_rate.x=4: 'learning_rate' is not a group" },
    { DF MODEL_INLINE OPT, NULL, "optimizer.type=\"adm\"",
      "--set optimizer.type=\"adm\": unknown optimizer 'adm' (did you mean 'adam'?)" },
    { DF MODEL_INLINE OPT, NULL, "model=\"nowhere.cfg\"",
      "--set model=\"nowhere.cfg\": cannot read nowhere.cfg: No such file or directory" },
};

static void test_bad(void)
{
    int n = (int)(sizeof(bad_cases) / sizeof(bad_cases[0]));
    tt_ok(n >= 25, "at least 25 bad inputs (%d)", n);
    for (int i = 0; i < n; i++) {
        const bad_case *b = &bad_cases[i];
        unlink("m.cfg");
        tt_write_file(NULL, "bad.cfg", b->job);
        if (b->model)
            tt_write_file(NULL, "m.cfg", b->model);
        job_override set = { b->set };
        job_t job;
        tt_err err = { 0 };
        int rc = job_load("bad.cfg", &set, b->set ? 1 : 0, &job, &err);
        bool ok = rc == -1 && err.code == TT_ERR_USAGE && strcmp(err.msg, b->want) == 0;
        tt_ok(ok, "bad input %d: %s", i, b->want);
        if (!ok)
            tt_diag("got rc %d code %d: %s", rc, err.code, err.msg);
        if (rc == 0)
            job_free(&job);
    }
}

/* libconfig stops reading at a NUL byte: the rest of the file would be
 * ignored, here a syntax error. */
static void test_nul(void)
{
    static const char text[] = DF MODEL_INLINE OPT "seed = 1; # a NUL: \0 then\nseed = = 2;\n";
    FILE *f = fopen("bad.cfg", "wb");
    if (f == NULL || fwrite(text, 1, sizeof(text) - 1, f) != sizeof(text) - 1 || fclose(f) != 0) {
        perror("bad.cfg");
        exit(99);
    }
    job_t job;
    tt_err err = { 0 };
    int rc = job_load("bad.cfg", NULL, 0, &job, &err);
    tt_ok(rc == -1 && strcmp(err.msg, "bad.cfg:5: syntax error: a NUL byte (not a text file)") == 0,
          "a NUL byte is refused (%s)", err.msg);
    if (rc == 0)
        job_free(&job);
}

static void test_model_load(void)
{
    model_cfg m;
    tt_err err = { 0 };
    tt_write_file(NULL, "res.cfg", "input = [784];\nclasses = 10;\nlayers = (\n"
                          " { name = \"a\"; type = \"dense\"; units = 32; activation = \"relu\"; },\n"
                          " { name = \"bn\"; type = \"batchnorm\"; },\n"
                          " { name = \"d\"; type = \"dropout\"; },\n"
                          " { name = \"b\"; type = \"dense\"; units = 32; input = \"a\"; },\n"
                          " { name = \"s\"; type = \"add\"; inputs = [\"d\", \"b\"]; },\n"
                          " { name = \"out\"; type = \"dense\"; units = 10; bias = false; } );\n");
    int rc = model_cfg_load("res.cfg", &m, &err);
    if (!tt_ok(rc == 0, "model with add and input loads (%s)", err.msg))
        return;
    tt_ok(m.input_rank == 1 && m.input[0] == 784 && m.input[1] == 1 && m.input[2] == 1,
          "flat input [N] is {N, 1, 1}, rank 1");
    tt_ok(m.n_layers == 6 && m.layers[3].n_inputs == 1 && m.layers[3].inputs[0] == 0 &&
              m.layers[4].type == LAYER_ADD && m.layers[4].n_inputs == 2 &&
              m.layers[4].inputs[0] == 2 && m.layers[4].inputs[1] == 3,
          "input / inputs resolved to earlier layer indices");
    tt_ok(m.n_layers == 6 && fabsf(m.layers[1].momentum - 0.1f) < 1e-8f &&
              fabsf(m.layers[1].epsilon - 1e-5f) < 1e-12f && fabsf(m.layers[2].rate - 0.5f) < 1e-8f &&
              !m.layers[5].bias,
          "batchnorm 0.1 / 1e-5, dropout 0.5 (PyTorch), bias false");
    tt_ok(strcmp(layer_type_name(LAYER_GLOBAL_AVGPOOL), "global_avgpool") == 0 &&
              strcmp(layer_type_name(LAYER_ADD), "add") == 0,
          "layer_type_name");
    model_cfg_free(&m);
}

int main(void)
{
    char tmpl[256];
    tt_tmpdir_make(tmpl, sizeof(tmpl), "config");
    if (chdir(tmpl) != 0 || getcwd(cwd, sizeof(cwd)) == NULL) {
        perror("temporary directory");
        return 99;
    }
    mkdir("jobs", 0755);
    mkdir("models", 0755);
    mkdir("data", 0755);
    test_lenet();
    test_defaults();
    test_sets();
    test_model_load();
    test_bad();
    test_nul();
    /* leave nothing behind */
    if (chdir("/") == 0)
        tt_tmpdir_remove(tmpl);
    return tt_done();
}
