/* test_grad_ready.c - the contract of tower_t.grad_ready, on which
 * sync_replicated overlaps the all-reduce with backward: during one backward
 * pass the hook is called with strictly decreasing offsets ending at 0, and
 * whenever it is called with lo, the gradients [lo, n_trainable) already hold
 * their final values (a snapshot taken in the hook equals the gradients
 * after the step, bitwise). On a device (sim) the hook hears of the whole
 * backward while the device has not yet run the forward: the step reads its
 * loss only after it queued everything (backend.h, loss_read), so packs
 * go to the all-reduce as backward is queued, and the device never idles
 * while the host waits in mid-step. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "backend/sim/sim.h"
#include "model/model.h"
#include "tt_ref.h"
#include "tt_test.h"
#include "util/rng.h"

static const char *MODEL =
    "input = [3, 8, 8]; classes = 5;\n"
    "layers = (\n"
    " { name = \"conv0\"; type = \"conv2d\"; filters = 4; kernel = 3; padding = 1; bias = false; },\n"
    " { name = \"bn0\"; type = \"batchnorm\"; },\n"
    " { name = \"relu0\"; type = \"relu\"; },\n"
    " { name = \"conv1\"; type = \"conv2d\"; filters = 4; kernel = 3; padding = 1; },\n"
    " { name = \"sum\"; type = \"add\"; inputs = [\"conv1\", \"relu0\"]; },\n"
    " { name = \"pool\"; type = \"maxpool\"; kernel = 2; },\n"
    " { name = \"fc0\"; type = \"dense\"; units = 8; activation = \"relu\"; },\n"
    " { name = \"fc1\"; type = \"dense\"; units = 5; }\n"
    ");\n";

typedef struct {
    const tower_t *tw;
    size_t n;
    size_t los[16];
    float *snap[16];
    int calls;
} recorder;

static bool record(void *arg, size_t lo)
{
    recorder *r = arg;
    if (r->calls >= 16)
        return false;
    r->los[r->calls] = lo;
    r->snap[r->calls] = malloc((r->n - lo + 1) * sizeof(float));
    r->tw->be->download(r->tw->be, r->snap[r->calls], r->tw->grads + lo,
                        (r->n - lo) * sizeof(float));
    r->calls++;
    return true;
}

/* ---- the sim's compute queue held shut: a job that blocks its worker
 * until the test opens the gate ---- */
static pthread_mutex_t gate_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t gate_cond = PTHREAD_COND_INITIALIZER;
static bool gate_open;

static void gate_run(backend_t *be, void *args)
{
    (void)be;
    (void)args;
    pthread_mutex_lock(&gate_lock);
    while (!gate_open)
        pthread_cond_wait(&gate_cond, &gate_lock);
    pthread_mutex_unlock(&gate_lock);
}

static void gate_release(void)
{
    pthread_mutex_lock(&gate_lock);
    gate_open = true;
    pthread_cond_broadcast(&gate_cond);
    pthread_mutex_unlock(&gate_lock);
}

typedef struct {
    tower_t *tw;
    atomic_int last_lo;    /* the hook's last offset; -1 before any call */
    atomic_bool returned;  /* tower_step has returned */
} step_run;

static bool note_lo(void *arg, size_t lo)
{
    atomic_store(&((step_run *)arg)->last_lo, (int)lo);
    return false;
}

static void *run_step(void *arg)
{
    step_run *r = arg;
    tower_step(r->tw, 4, true, true, 1);
    atomic_store(&r->returned, true);
    return NULL;
}

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, ms % 1000 * 1000000L};
    nanosleep(&ts, NULL);
}

/* A sim tower's training step with its device held shut from the start:
 * the host must still queue the whole backward (the hook reaches offset 0),
 * and must not return (its loss is not computed yet); opened, the step
 * ends with the CPU tower's loss and correct count, bitwise. */
static void check_device_step_overlap(const model_t *m, const float *host, const float *x,
                                      const int32_t *labels, double cpu_loss, int cpu_correct)
{
    tt_err err = {0};
    backend_t *be = backend_sim_create(0, "fp32", &err);
    tower_t tw;
    if (!tt_ok(be != NULL && tower_create(m, be, 4, &tw, &err) == 0, "sim tower %s", err.msg)) {
        if (be != NULL)
            be->destroy(be);
        return;
    }
    tower_set_params(&tw, host);
    tower_load_batch(&tw, 4, x, labels);
    step_run r = {.tw = &tw};
    atomic_init(&r.last_lo, -1);
    atomic_init(&r.returned, false);
    tw.grad_ready = note_lo;
    tw.grad_ready_arg = &r;
    sim_enqueue(be, gate_run, NULL, 0);
    pthread_t th;
    if (!tt_ok(pthread_create(&th, NULL, run_step, &r) == 0, "step thread")) {
        gate_release();
        tower_free(&tw);
        be->destroy(be);
        return;
    }
    /* queuing takes microseconds; 20 s is only a guard against a hang */
    for (int i = 0; i < 20000 && atomic_load(&r.last_lo) != 0; i++)
        sleep_ms(1);
    int reached = atomic_load(&r.last_lo);
    sleep_ms(50); /* time for a step that does not wait for its loss to return */
    bool returned_shut = atomic_load(&r.returned);
    gate_release();
    pthread_join(th, NULL);
    tt_ok(reached == 0, "with the device held shut, the host queued the whole backward (the "
          "hook's last offset %d, 0 expected): the loss is not waited for in mid-step", reached);
    tt_ok(!returned_shut, "and the step did not return before its loss was computed");
    tt_ok(tw.loss_sum == cpu_loss && tw.correct == cpu_correct,
          "the sim step's loss %.17g and correct %d are the CPU tower's (%.17g, %d)",
          tw.loss_sum, tw.correct, cpu_loss, cpu_correct);
    tower_free(&tw);
    be->destroy(be);
}

int main(void)
{
    char dir[256], path[320];
    tt_tmpdir_make(dir, sizeof(dir), "grad_ready");
    snprintf(path, sizeof(path), "%s/model.cfg", dir);
    tt_write_file(NULL, path, MODEL);
    model_cfg mc;
    model_t m;
    tt_err err = {0};
    if (!tt_ok(model_cfg_load(path, &mc, &err) == 0 &&
                   model_build(&mc, shape3_make(3, 8, 8), &m, &err) == 0,
               "model builds %s", err.msg))
        return tt_done();
    backend_t *be = tt_cpu_backend(2);
    tower_t tw;
    if (!tt_ok(be != NULL && tower_create(&m, be, 4, &tw, &err) == 0, "tower %s", err.msg))
        return tt_done();
    float *host = calloc(m.n_floats, sizeof(float)), x[4 * 3 * 8 * 8];
    int32_t labels[4] = {0, 1, 2, 3};
    model_init_params(&m, 1, host);
    rng_t rng = rng_make(2, 0, 0);
    for (size_t i = 0; i < sizeof(x) / sizeof(x[0]); i++)
        x[i] = (float)rng_below(&rng, 1000) / 500.0f - 1.0f;
    tower_set_params(&tw, host);
    tower_load_batch(&tw, 4, x, labels);

    recorder r = {.tw = &tw, .n = m.n_trainable};
    tw.grad_ready = record;
    tw.grad_ready_arg = &r;
    tower_step(&tw, 4, true, true, 1);
    check_device_step_overlap(&m, host, x, labels, tw.loss_sum, tw.correct);
    float *final = malloc(m.n_trainable * sizeof(float));
    be->download(be, final, tw.grads, m.n_trainable * sizeof(float));

    /* conv0, bn0, conv1, fc0, fc1 have parameters: five calls */
    bool order = r.calls == 5 && r.los[r.calls - 1] == 0;
    for (int i = 1; i < r.calls; i++)
        order = order && r.los[i] < r.los[i - 1];
    tt_ok(order, "%d calls with strictly decreasing offsets ending at 0", r.calls);
    bool final_ok = r.calls > 0;
    for (int i = 0; i < r.calls; i++)
        final_ok = final_ok && memcmp(r.snap[i], final + r.los[i],
                                      (m.n_trainable - r.los[i]) * sizeof(float)) == 0;
    tt_ok(final_ok, "at every call the announced gradients were already final (bitwise)");

    /* no hook: no calls, the same gradients */
    int before = r.calls;
    tw.grad_ready = NULL;
    tower_step(&tw, 4, true, true, 1);
    float *again = malloc(m.n_trainable * sizeof(float));
    be->download(be, again, tw.grads, m.n_trainable * sizeof(float));
    tt_ok(r.calls == before && memcmp(again, final, m.n_trainable * sizeof(float)) == 0,
          "without the hook: no calls and bitwise the same gradients");

    for (int i = 0; i < r.calls; i++)
        free(r.snap[i]);
    free(final);
    free(again);
    free(host);
    tower_free(&tw);
    be->destroy(be);
    model_free(&m);
    model_cfg_free(&mc);
    tt_tmpdir_remove(dir);
    return tt_done();
}
