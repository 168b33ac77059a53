/* test_trainers.c - the trainers' equivalence (towertrain.cfg(5), TRAINER): for a model without batchnorm or
 * dropout, simple with batch B*K, sync_replicated and sync_parameter_server
 * with K towers of batch B give the same parameters after the same steps (to
 * float rounding of the reduction order), for every all-reduce algorithm,
 * gradient packing on and off; replicas stay bitwise identical; async trains a
 * learnable toy problem. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "train/trainer.h"
#include "tt_ref.h"
#include "tt_test.h"
#include "util/log.h"

static char dir[256];
/* loss scaling (precision fp16's, which runs on GPUs) forced on for CPU
 * towers, so its logic is checked here; the scale it starts from */
static float force_loss_scale;
static float last_loss_scale;
static int64_t last_good_steps;
static int64_t last_updates;

static const char *models[] = {
    /* an MLP big enough for 4 packs of >= 1024 gradients */
    "input = [64]; classes = 10; layers = ("
    " { name = \"fc0\"; type = \"dense\"; units = 64; activation = \"relu\"; },"
    " { name = \"fc1\"; type = \"dense\"; units = 10; } );",
    /* a small CNN */
    "input = [1, 8, 8]; classes = 10; layers = ("
    " { name = \"conv0\"; type = \"conv2d\"; filters = 8; kernel = 3; padding = 1; activation = \"relu\"; },"
    " { name = \"pool0\"; type = \"maxpool\"; kernel = 2; },"
    " { name = \"conv1\"; type = \"conv2d\"; filters = 16; kernel = 3; activation = \"relu\"; },"
    " { name = \"fc0\"; type = \"dense\"; units = 10; } );",
};

/* Trains with the given overrides; returns tower t's parameters (malloc'd). */
static float *train(const char *model, char sets_text[][160], int n_sets, int tower,
                    size_t *count, double *last_loss)
{
    char job_path[512];
    tt_write_toy_job(dir, model, 5, job_path, sizeof(job_path));
    job_override sets[16];
    for (int i = 0; i < n_sets; i++)
        sets[i].arg = sets_text[i];
    job_t job;
    tt_err err = {0};
    trainer_t tr;
    if (job_load(job_path, sets, n_sets, &job, &err) != 0 || trainer_create(&tr, &job, &err) != 0) {
        tt_diag("training failed: %s", err.msg);
        return NULL;
    }
    if (force_loss_scale > 0) {
        trainer_enable_loss_scale(&tr);
        tr.loss_scale.scale = force_loss_scale;
    }
    if (trainer_train(&tr, &err) != 0) {
        tt_diag("training failed: %s", err.msg);
        trainer_free(&tr);
        job_free(&job);
        return NULL;
    }
    last_loss_scale = tr.loss_scale.scale;
    last_good_steps = tr.loss_scale.good_steps;
    last_updates = tr.updates;
    trainer_sync_tower0(&tr);
    *count = tr.model.n_floats;
    float *p = malloc(*count * sizeof(float));
    tower_get_params(&tr.towers[tower], p);
    if (last_loss)
        *last_loss = tr.step_loss;
    trainer_free(&tr);
    job_free(&job);
    return p;
}

int main(void)
{
    log_set_quiet(true);
    tt_tmpdir_make(dir, sizeof(dir), "trainers");
    tt_write_toy_idx(dir, 600);
    tt_write_file(dir, "mlp.cfg", models[0]);
    tt_write_file(dir, "cnn.cfg", models[1]);
    const char *model_files[] = {"mlp.cfg", "cnn.cfg"};
    const char *algos[] = {"naive", "ring", "hierarchical"};

    for (int m = 0; m < 2; m++) {
        for (int K = 2; K <= 4; K++) {
            /* the reference: simple, one tower, batch B*K */
            char s[8][160];
            int B = 24 / K * K == 24 ? 24 / K : 6;
            snprintf(s[0], sizeof(s[0]), "dataflow.batch_size=%d", B * K);
            size_t n_ref;
            float *ref = train(model_files[m], s, 1, 0, &n_ref, NULL);
            if (!tt_ok(ref != NULL, "%s: simple with batch %d trains", model_files[m], B * K))
                continue;
            for (int a = 0; a < 3; a++) {
                for (int pack = 0; pack <= 2; pack += 2) {
                    snprintf(s[0], sizeof(s[0]), "dataflow.batch_size=%d", B);
                    snprintf(s[1], sizeof(s[1]), "trainer={type=\"sync_replicated\"; nr_tower=%d; "
                             "allreduce=\"%s\"; gradient_packing=%d;}", K, algos[a], pack);
                    size_t n;
                    float *p0 = train(model_files[m], s, 2, 0, &n, NULL);
                    float *plast = train(model_files[m], s, 2, K - 1, &n, NULL);
                    double d = p0 ? tt_rel_err_f(p0, ref, n) : 1;
                    tt_ok(p0 && d < 1e-5, "%s: sync_replicated K=%d %s packing %d equals simple "
                          "(rel diff %.2g)", model_files[m], K, algos[a], pack, d);
                    tt_ok(p0 && plast && memcmp(p0, plast, n * sizeof(float)) == 0,
                          "%s: K=%d %s: replicas 0 and %d bitwise identical", model_files[m], K,
                          algos[a], K - 1);
                    free(p0);
                    free(plast);
                }
            }
            for (int ps = 0; ps < 2; ps++) {
                snprintf(s[0], sizeof(s[0]), "dataflow.batch_size=%d", B);
                snprintf(s[1], sizeof(s[1]), "trainer={type=\"sync_parameter_server\"; nr_tower=%d; "
                         "ps_device=\"%s\";}", K, ps ? "gpu" : "cpu");
                size_t n;
                float *p = train(model_files[m], s, 2, 0, &n, NULL);
                double d = p ? tt_rel_err_f(p, ref, n) : 1;
                tt_ok(p && d < 1e-5, "%s: sync_parameter_server K=%d ps_device %s equals simple "
                      "(rel diff %.2g)", model_files[m], K, ps ? "gpu" : "cpu", d);
                free(p);
            }
            free(ref);
        }
    }

    /* batchnorm and a residual add: tower-local running statistics are
     * averaged at the epoch end, so the replicas are identical again */
    tt_write_file(dir, "res.cfg",
               "input = [1, 8, 8]; classes = 10; layers = ("
               " { name = \"conv0\"; type = \"conv2d\"; filters = 4; kernel = 3; padding = 1; bias = false; },"
               " { name = \"bn0\"; type = \"batchnorm\"; },"
               " { name = \"relu0\"; type = \"relu\"; },"
               " { name = \"conv1\"; type = \"conv2d\"; filters = 4; kernel = 3; padding = 1; },"
               " { name = \"sum\"; type = \"add\"; inputs = [\"conv1\", \"relu0\"]; },"
               " { name = \"pool\"; type = \"global_avgpool\"; },"
               " { name = \"fc\"; type = \"dense\"; units = 10; } );");
    {
        char s2[2][160];
        snprintf(s2[0], sizeof(s2[0]), "dataflow.batch_size=12");
        snprintf(s2[1], sizeof(s2[1]), "trainer={type=\"sync_replicated\"; nr_tower=2;}");
        size_t n2;
        float *a = train("res.cfg", s2, 2, 0, &n2, NULL);
        float *b = train("res.cfg", s2, 2, 1, &n2, NULL);
        int moved = 0;
        for (size_t i = 0; a && i < n2; i++)
            moved |= a[i] != 0.0f;
        tt_ok(a && b && memcmp(a, b, n2 * sizeof(float)) == 0 && moved,
              "batchnorm + add, 2 towers: after the epoch end both replicas, running "
              "statistics included, are bitwise identical");
        free(a);
        free(b);
    }

    /* async: learns the toy problem, parameters stay finite */
    char s[4][160];
    snprintf(s[0], sizeof(s[0]), "trainer={type=\"async\"; nr_tower=2;}");
    snprintf(s[1], sizeof(s[1]), "max_epoch=6");
    snprintf(s[2], sizeof(s[2]), "steps_per_epoch=0");
    size_t n;
    double loss_before = 0, loss_after = 0;
    snprintf(s[3], sizeof(s[3]), "max_epoch=1");
    char one[4][160];
    memcpy(one, s, sizeof(one));
    snprintf(one[1], sizeof(one[1]), "steps_per_epoch=1");
    float *p1 = train("mlp.cfg", one, 2, 0, &n, &loss_before);
    float *p = train("mlp.cfg", s, 3, 0, &n, &loss_after);
    int finite = p != NULL;
    for (size_t i = 0; p && i < n; i++)
        finite &= isfinite(p[i]);
    tt_ok(finite, "async: parameters finite after 6 epochs");
    tt_ok(p && loss_after < 0.5 * loss_before, "async: loss falls from %.3f (first step) to "
          "%.3f", loss_before, loss_after);
    free(p);
    free(p1);

    /* A learning-rate schedule reaches the optimizer that applies the update,
     * whatever the trainer type: sync_replicated (every replica) and
     * sync_parameter_server (the shared optimizer) against simple with the
     * global batch and the same schedule; async by its effect (a rate of 0
     * from the start leaves the initial parameters). */
    {
        const char *sched = "callbacks=({type=\"scheduled_hyperparam\"; step_based=true; "
                            "schedule=((0, 0.05), (2, 0.01), (3, 0.2));})";
        const char *zero = "callbacks=({type=\"scheduled_hyperparam\"; "
                           "schedule=((0, 0.0));})";
        char r[3][160];
        snprintf(r[0], sizeof(r[0]), "dataflow.batch_size=24");
        snprintf(r[1], sizeof(r[1]), "%s", sched);
        size_t n_ref, n_plain;
        float *ref = train("mlp.cfg", r, 2, 0, &n_ref, NULL);
        float *plain = train("mlp.cfg", r, 1, 0, &n_plain, NULL);
        tt_ok(ref && plain && tt_rel_err_f(ref, plain, n_ref) > 1e-3,
              "schedule: simple with the schedule differs from simple without (rel diff %.2g)",
              ref && plain ? tt_rel_err_f(ref, plain, n_ref) : 0.0);
        const char *types[] = {"sync_replicated", "sync_parameter_server"};
        for (int i = 0; i < 2; i++) {
            snprintf(r[0], sizeof(r[0]), "dataflow.batch_size=12");
            snprintf(r[2], sizeof(r[2]), "trainer={type=\"%s\"; nr_tower=2;}", types[i]);
            size_t n2; /* replicas: the last one; the parameter server: its copy */
            float *p2 = train("mlp.cfg", r, 3, i == 0 ? 1 : 0, &n2, NULL);
            double d = p2 && ref ? tt_rel_err_f(p2, ref, n2) : 1;
            tt_ok(p2 && d < 1e-5, "schedule: %s, 2 towers, follows the schedule as simple with "
                  "the global batch does (rel diff %.2g)", types[i], d);
            free(p2);
        }
        snprintf(r[0], sizeof(r[0]), "%s", zero);
        float *init = train("mlp.cfg", r, 1, 0, &n_ref, NULL);
        snprintf(r[1], sizeof(r[1]), "trainer={type=\"async\"; nr_tower=2;}");
        size_t na;
        float *pa = train("mlp.cfg", r, 2, 0, &na, NULL);
        float *pa_plain = train("mlp.cfg", r + 1, 1, 0, &na, NULL);
        tt_ok(init && pa && memcmp(init, pa, na * sizeof(float)) == 0,
              "schedule: async with a learning rate scheduled to 0 keeps the initial parameters");
        tt_ok(init && pa_plain && memcmp(init, pa_plain, na * sizeof(float)) != 0,
              "schedule: async without the schedule moves them");
        free(ref);
        free(plain);
        free(init);
        free(pa);
        free(pa_plain);
    }

    /* Loss scaling, GradScaler's rule: halve and skip on Inf/NaN, double
     * after LOSS_SCALE_GROWTH_INTERVAL clean steps, never to infinity. */
    {
        loss_scale ls;
        loss_scale_init(&ls);
        bool applied = loss_scale_update(&ls, true);
        tt_ok(ls.scale == 65536.0f && ls.good_steps == 1 && applied,
              "loss scale: starts at 2^16; a clean step is applied and counted");
        applied = loss_scale_update(&ls, false);
        tt_ok(ls.scale == 32768.0f && ls.good_steps == 0 && !applied,
              "loss scale: an overflow skips the step, halves the scale, resets the count");
        int64_t steps = 0;
        while (ls.scale == 32768.0f && steps < 10 * LOSS_SCALE_GROWTH_INTERVAL) {
            loss_scale_update(&ls, true);
            steps++;
        }
        tt_ok(steps == LOSS_SCALE_GROWTH_INTERVAL && ls.scale == 65536.0f && ls.good_steps == 0,
              "loss scale: doubles after exactly %d clean steps (took %lld)",
              LOSS_SCALE_GROWTH_INTERVAL, (long long)steps);
        ls.scale = 0x1p127f;
        ls.good_steps = LOSS_SCALE_GROWTH_INTERVAL - 1;
        loss_scale_update(&ls, true);
        tt_ok(ls.scale == 0x1p127f && ls.good_steps == 0,
              "loss scale: growth that would overflow keeps the old scale");
    }

    /* Loss scaling in every trainer type: scaling by a power of two and back
     * is exact, so a run with it equals a run without, bit for bit; an
     * overflow (TT_FAULT_GRAD) skips exactly that update in every tower. */
    {
        const char *cases[][2] = {
            {"trainer={type=\"simple\";}", "dataflow.batch_size=24"},
            {"trainer={type=\"sync_replicated\"; nr_tower=2; gradient_packing=2;}",
             "dataflow.batch_size=12"},
            {"trainer={type=\"sync_parameter_server\"; nr_tower=2;}", "dataflow.batch_size=12"},
            {"trainer={type=\"async\"; nr_tower=1;}", "dataflow.batch_size=24"},
        };
        for (int c = 0; c < 4; c++) {
            char ls[2][160];
            snprintf(ls[0], sizeof(ls[0]), "%s", cases[c][0]);
            snprintf(ls[1], sizeof(ls[1]), "%s", cases[c][1]);
            size_t n1 = 0, n2 = 0;
            force_loss_scale = 0;
            float *plain = train("mlp.cfg", ls, 2, 0, &n1, NULL);
            force_loss_scale = LOSS_SCALE_INIT;
            float *scaled = train("mlp.cfg", ls, 2, 0, &n2, NULL);
            tt_ok(plain && scaled && memcmp(plain, scaled, n1 * sizeof(float)) == 0 &&
                      last_loss_scale == LOSS_SCALE_INIT && last_good_steps == 5,
                  "loss scale: %s with scale 2^16 equals the unscaled run bitwise (5 clean "
                  "steps counted: %lld)", cases[c][0], (long long)last_good_steps);
            setenv("TT_FAULT_GRAD", "3", 1);
            float *skipped = train("mlp.cfg", ls, 2, 0, &n2, NULL);
            bool kept_finite = skipped != NULL;
            for (size_t i = 0; kept_finite && i < n2; i++)
                kept_finite = isfinite(skipped[i]);
            tt_ok(kept_finite && last_loss_scale == LOSS_SCALE_INIT / 2 && last_good_steps == 2 &&
                      last_updates == 4 && memcmp(skipped, scaled, n2 * sizeof(float)) != 0,
                  "loss scale: %s, Inf/NaN gradients at step 3: that update alone is skipped "
                  "(scale %g, %lld clean steps after it, %lld of 5 updates applied), parameters "
                  "finite", cases[c][0], (double)last_loss_scale, (long long)last_good_steps,
                  (long long)last_updates);
            if (c == 1) { /* the replicas agreed on the skip */
                float *other = train("mlp.cfg", ls, 2, 1, &n2, NULL);
                tt_ok(other && skipped && memcmp(other, skipped, n2 * sizeof(float)) == 0,
                      "loss scale: sync_replicated replicas stay identical across a skip");
                free(other);
            }
            force_loss_scale = 0;
            float *broken = train("mlp.cfg", ls, 2, 0, &n2, NULL);
            tt_ok(broken == NULL, "loss scale: without it the same fault ends the run (NaN loss)");
            unsetenv("TT_FAULT_GRAD");
            free(plain);
            free(scaled);
            free(skipped);
            free(broken);
        }
    }

    /* Adam counts the updates applied, as torch's Adam counts optimizer.step()
     * calls, which GradScaler leaves out on an overflow: with step 1 skipped,
     * step 2 is Adam's first, whose bias-corrected update moves every weight
     * with a gradient by the learning rate (m/(1-b1) / sqrt(v/(1-b2)) = g/|g|);
     * counted as Adam's second it would move them by sqrt(1+b2)/(1+b1) = 0.74
     * of it. */
    {
        const char *cases[][2] = {
            {"trainer={type=\"simple\";}", "dataflow.batch_size=24"},
            {"trainer={type=\"sync_replicated\"; nr_tower=2;}", "dataflow.batch_size=12"},
            {"trainer={type=\"sync_parameter_server\"; nr_tower=2;}", "dataflow.batch_size=12"},
            {"trainer={type=\"async\"; nr_tower=1;}", "dataflow.batch_size=24"},
        };
        const float lr = 1e-3f;
        for (int c = 0; c < 4; c++) {
            char sets[4][160];
            snprintf(sets[0], sizeof(sets[0]), "%s", cases[c][0]);
            snprintf(sets[1], sizeof(sets[1]), "%s", cases[c][1]);
            snprintf(sets[2], sizeof(sets[2]),
                     "optimizer={type=\"adam\"; learning_rate=%g; epsilon=1e-12;}", (double)lr);
            snprintf(sets[3], sizeof(sets[3]), "steps_per_epoch=1");
            size_t n0 = 0, n1 = 0;
            force_loss_scale = LOSS_SCALE_INIT;
            setenv("TT_FAULT_GRAD", "1", 1);
            float *init = train("mlp.cfg", sets, 4, 0, &n0, NULL); /* its one step skipped */
            snprintf(sets[3], sizeof(sets[3]), "steps_per_epoch=2");
            float *after = train("mlp.cfg", sets, 4, 0, &n1, NULL);
            unsetenv("TT_FAULT_GRAD");
            force_loss_scale = 0;
            /* a gradient near epsilon moves its weight less: most, not all */
            int moved = 0, near = 0, over = 0;
            for (size_t i = 0; init && after && i < n1; i++) {
                double d = fabs((double)after[i] - (double)init[i]) / lr;
                if (d < 0.5) /* no gradient (a dead unit): no move */
                    continue;
                moved++;
                near += fabs(d - 1.0) <= 1e-3;
                over += d > 1.0 + 1e-3;
            }
            tt_ok(init && after && n0 == n1 && moved > 100 && near >= moved * 99 / 100 &&
                      over == 0 && last_updates == 1,
                  "adam after a skipped first step: %s, %d of %d moved weights moved by lr "
                  "(Adam's first step: 1 x lr; counted as its second: 0.74), %lld update(s)",
                  cases[c][0], near, moved, (long long)last_updates);
            free(init);
            free(after);
        }
    }

    /* The loss scale travels in the checkpoint: a resumed fp16 run goes on
     * with the scale and the count of clean steps it had. */
    {
        char job_path[512], ckpt[600];
        snprintf(job_path, sizeof(job_path), "%s/job.cfg", dir);
        snprintf(ckpt, sizeof(ckpt), "%s/scale.safetensors", dir);
        job_t job;
        tt_err err = {0};
        trainer_t a, b;
        setenv("TT_FAULT_GRAD", "2", 1);
        int rc = job_load(job_path, NULL, 0, &job, &err) || trainer_create(&a, &job, &err);
        if (rc == 0) {
            trainer_enable_loss_scale(&a);
            rc = trainer_train(&a, &err) || trainer_save_checkpoint(&a, ckpt, NULL, NULL, &err);
        }
        unsetenv("TT_FAULT_GRAD");
        rc = rc || trainer_create(&b, &job, &err);
        if (rc == 0) {
            trainer_enable_loss_scale(&b);
            rc = trainer_restore(&b, ckpt, &err);
        }
        tt_ok(rc == 0 && a.loss_scale.scale == 32768.0f && a.loss_scale.good_steps == 3 &&
                  b.loss_scale.scale == a.loss_scale.scale &&
                  b.loss_scale.good_steps == a.loss_scale.good_steps && a.updates == 4 &&
                  b.updates == a.updates,
              "loss scale: resume continues with the checkpoint's scale, clean-step count and "
              "Adam's count of applied updates (%g, %lld, %lld) %s", (double)b.loss_scale.scale,
              (long long)b.loss_scale.good_steps, (long long)b.updates, err.msg);
        if (rc == 0) {
            trainer_free(&a);
            trainer_free(&b);
        }
        job_free(&job);
    }

    tt_tmpdir_remove(dir);
    return tt_done();
}
