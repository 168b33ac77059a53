/* profile.c - `towertrain profile` (profile.h).
 *
 * The job's trainer runs a warm-up, then N steps with every span recorded
 * (util/trace.h, the timeline's spans); the table is read off the spans:
 *   layers     tower 0's "<layer> forward" / "<layer> backward" spans
 *   data wait  the trainer's "data wait" spans, less their part inside
 *              tower 0's layer, pack and optimizer spans: device towers
 *              run behind the host, which may wait for the next batch
 *              while the device still runs the last step (on CPU towers
 *              the towers are idle while the trainer waits: all of it)
 *   all-reduce tower 0's packs: exposed = the part outside tower 0's layer
 *              spans (on CPU towers all of it: the tower's own thread
 *              averages the pack between two layers' backward), hidden =
 *              the part inside them (not added to the step). On device
 *              towers the packs run on the communication queue while
 *              backward runs (device time, as the layers'), and the packs
 *              of one group share its span: the union of the spans counts.
 *   optimizer  tower 0's "optimizer" spans
 *   rest       the step time (wall clock over the N steps, on the main
 *              thread; device towers: from idle devices to idle devices,
 *              as their spans are the devices' time) less all of the
 *              above: the loss, waiting for the other towers, the
 *              trainer's bookkeeping.
 * Tower 0 stands for every tower: they run at once, on their share of the
 * cores, and the step waits for the slowest. Nothing is written into the
 * log directory: no callback hook runs, no monitor opens. */
#include "profile/profile.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cJSON.h>

#include "callbacks/timeline.h"
#include "comm/dist.h"
#include "train/device_towers.h"
#include "profile/roof.h"
#include "train/trainer.h"
#include "util/clock.h"
#include "util/fileio.h"
#include "util/log.h"
#include "util/threadpool.h"
#include "util/trace.h"

#define WARMUP_STEPS 3

typedef struct {
    double fwd_ms, bwd_ms, gflop, gflops, share, roof_share;
} layer_row;

typedef struct {
    int steps, warmup;
    double step_ms, data_ms, exposed_ms, hidden_ms, optimizer_ms, rest_ms;
    double roof_gflops;   /* 0: not measured (GPU towers) */
    double tower_roof;    /* tower 0's share of it: roof x its threads / cores */
    layer_row *layers;
} profile_result;

static bool is_layer_span(const trace_event *e, const model_t *m)
{
    return (e->cat == TRACE_CAT_FORWARD || e->cat == TRACE_CAT_BACKWARD) &&
           (const layer_cost *)e->obj >= m->costs &&
           (const layer_cost *)e->obj < m->costs + m->n_layers;
}

typedef struct {
    int64_t lo, hi; /* [lo, hi) in ns */
} interval;

static int interval_cmp(const void *a, const void *b)
{
    const interval *x = a, *y = b;
    return (x->lo > y->lo) - (x->lo < y->lo);
}

/* Sorts v[0..n) and merges those that overlap, in place: returns how many
 * are left, their union in time order. */
static size_t interval_union(interval *v, size_t n)
{
    qsort(v, n, sizeof(*v), interval_cmp);
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (k > 0 && v[i].lo <= v[k - 1].hi) {
            if (v[i].hi > v[k - 1].hi)
                v[k - 1].hi = v[i].hi;
        } else {
            v[k++] = v[i];
        }
    }
    return k;
}

/* Nanoseconds of [a0, a1) inside the union u[0..k) (interval_union's). */
static int64_t interval_overlap(const interval *u, size_t k, int64_t a0, int64_t a1)
{
    size_t lo = 0, hi = k; /* the first that ends after a0 */
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (u[mid].hi <= a0)
            lo = mid + 1;
        else
            hi = mid;
    }
    int64_t in = 0;
    for (size_t b = lo; b < k && u[b].lo < a1; b++)
        in += (u[b].hi < a1 ? u[b].hi : a1) - (u[b].lo > a0 ? u[b].lo : a0);
    return in;
}

static interval span_interval(const trace_event *e)
{
    return (interval){e->ts_ns, e->ts_ns + e->dur_ns};
}

/* The table's numbers from the recorded spans; step_ms is set. */
static int profile_tally(const trainer_t *tr, profile_result *r, tt_err *err)
{
    const model_t *m = &tr->model;
    double per = 1e6 * r->steps; /* ns in all steps -> ms per step */
    size_t n;
    const trace_event *ev = trace_row_events(TRACE_ROW_TOWER, &n);
    for (size_t i = 0; i < n; i++) {
        const trace_event *e = &ev[i];
        const layer_cost *c = e->obj;
        if (is_layer_span(e, m)) {
            layer_row *row = &r->layers[c - m->costs];
            *(e->cat == TRACE_CAT_FORWARD ? &row->fwd_ms : &row->bwd_ms) += e->dur_ns / per;
        } else if (e->cat == TRACE_CAT_OPTIMIZER) {
            r->optimizer_ms += e->dur_ns / per;
        }
    }
    /* three unions of spans, in one allocation: tower 0's layers; its
     * packs; and its layers, optimizer and packs (its work) */
    size_t na;
    const trace_event *ar = trace_row_events(TRACE_ROW_ALLREDUCE, &na);
    interval *lay = malloc((2 * (n + na) + 1) * sizeof(*lay));
    if (lay == NULL)
        return err_set(err, TT_ERR_RUNTIME, "out of memory");
    interval *packs = lay + n, *work = packs + na;
    size_t nl = 0, nw = 0;
    for (size_t i = 0; i < n; i++) {
        if (is_layer_span(&ev[i], m))
            lay[nl++] = work[nw++] = span_interval(&ev[i]);
        else if (ev[i].cat == TRACE_CAT_OPTIMIZER)
            work[nw++] = span_interval(&ev[i]);
    }
    for (size_t i = 0; i < na; i++)
        packs[i] = work[nw++] = span_interval(&ar[i]);
    nl = interval_union(lay, nl);
    size_t np = interval_union(packs, na);
    nw = interval_union(work, nw);
    /* all-reduce: the union of the packs, hidden inside the layer spans */
    for (size_t i = 0; i < np; i++) {
        int64_t hidden = interval_overlap(lay, nl, packs[i].lo, packs[i].hi);
        r->hidden_ms += hidden / per;
        r->exposed_ms += (packs[i].hi - packs[i].lo - hidden) / per;
    }
    /* data wait: outside the tower's work, which ran while the trainer
     * waited */
    size_t nt;
    const trace_event *tev = trace_row_events(TRACE_ROW_TRAINER, &nt);
    for (size_t i = 0; i < nt; i++) {
        if (tev[i].cat != TRACE_CAT_DATA || strcmp(tev[i].name, "data wait") != 0)
            continue;
        interval d = span_interval(&tev[i]);
        r->data_ms += (d.hi - d.lo - interval_overlap(work, nw, d.lo, d.hi)) / per;
    }
    free(lay);
    double accounted = r->data_ms + r->exposed_ms + r->optimizer_ms;
    int batch = tr->job->dataflow.batch_size; /* tower 0's slice */
    for (int i = 0; i < m->n_layers; i++) {
        layer_row *row = &r->layers[i];
        double ms = row->fwd_ms + row->bwd_ms;
        accounted += ms;
        row->gflop = (m->costs[i].fwd + m->costs[i].bwd) * batch / 1e9;
        row->gflops = ms > 0 ? row->gflop / (ms / 1e3) : 0.0;
        row->share = ms / r->step_ms;
    }
    r->rest_ms = r->step_ms - accounted;
    return 0;
}

static void shape_text(shape3 s, char *out, size_t len)
{
    if (s.h == 1 && s.w == 1)
        snprintf(out, len, "[%d]", s.c);
    else
        snprintf(out, len, "[%d, %d, %d]", s.c, s.h, s.w);
}

static const char *layer_type_text(const layer_t *l)
{
    return l->relu_fused  ? "relu (fused)"
           : l->add_fused ? "add (fused)"
                          : layer_type_name(l->cfg->type);
}

static void profile_print(const trainer_t *tr, const profile_opts *o, const profile_result *r,
                          const char *roof_note)
{
    const model_t *m = &tr->model;
    printf("profile %s: %d step(s) after %d warm-up, %d tower(s)%s, batch %d a tower; "
           "tower 0's layers (threads %d)\n", o->job_path, r->steps, r->warmup, tr->n_towers,
           tr->n_ranks > 1 ? " a rank" : "", tr->job->dataflow.batch_size,
           tr->backends[0]->threads);
    if (tr->dev == NULL && tr->job->trainer.precision == PRECISION_BF16) {
        /* what the CPU towers multiply in, against an fp32 roof either way */
        const char *fp32_why = backend_cpu_bf16_fp32_why();
        if (fp32_why != NULL)
            printf("precision bf16: computed in fp32 here: %s\n", fp32_why);
        else
            printf("precision bf16: conv2d and dense multiply bf16 on %s (the roof below is "
                   "fp32's)\n", backend_cpu_bf16_isa(NULL, 0));
    }
    printf("%s\n\n", roof_note);
    printf("%-16s %-14s %-14s %8s %8s %8s %8s %6s %6s\n", "layer", "type", "output shape",
           "fwd ms", "bwd ms", "GFLOP", "GFLOP/s", "step", "roof");
    double total_gflop = 0, total_ms = 0;
    for (int i = 0; i < m->n_layers; i++) {
        const layer_row *row = &r->layers[i];
        char shape[48], roof[16] = "-";
        shape_text(m->layers[i].out, shape, sizeof(shape));
        if (r->tower_roof > 0 && row->gflop > 0)
            snprintf(roof, sizeof(roof), "%.0f%%", 100.0 * row->roof_share);
        printf("%-16s %-14s %-14s %8.3f %8.3f %8.4f %8.1f %5.1f%% %6s\n",
               m->layers[i].cfg->name, layer_type_text(&m->layers[i]), shape, row->fwd_ms,
               row->bwd_ms, row->gflop, row->gflops, 100.0 * row->share, roof);
        total_gflop += row->gflop;
        total_ms += row->fwd_ms + row->bwd_ms;
    }
    char roof[16] = "-";
    double gflops = total_ms > 0 ? total_gflop / (total_ms / 1e3) : 0.0;
    if (r->tower_roof > 0)
        snprintf(roof, sizeof(roof), "%.0f%%", 100.0 * gflops / r->tower_roof);
    printf("%-16s %-14s %-14s %8s %8s %8.4f %8.1f %5.1f%% %6s\n", "layers", "", "",
           "", "", total_gflop, gflops, 100.0 * total_ms / r->step_ms, roof);
    struct {
        const char *name;
        double ms;
    } other[] = {{"data wait", r->data_ms}, {"allreduce exposed", r->exposed_ms},
                 {"optimizer", r->optimizer_ms}, {"rest", r->rest_ms}};
    printf("\n%-30s %8s %6s\n", "", "ms", "step");
    printf("%-30s %8.3f %5.1f%%\n", "layers (forward + backward)", total_ms,
           100.0 * total_ms / r->step_ms);
    for (size_t i = 0; i < sizeof(other) / sizeof(other[0]); i++)
        printf("%-30s %8.3f %5.1f%%\n", other[i].name, other[i].ms,
               100.0 * other[i].ms / r->step_ms);
    printf("%-30s %8.3f %5.1f%%\n", "step", r->step_ms, 100.0);
    printf("(allreduce hidden behind backward, not in the sum: %.3f ms)\n", r->hidden_ms);
}

static int profile_write_json(const trainer_t *tr, const profile_opts *o,
                              const profile_result *r, tt_err *err)
{
    const model_t *m = &tr->model;
    cJSON *root = cJSON_CreateObject(), *layers = NULL;
    bool ok = root != NULL;
    ok = ok && cJSON_AddStringToObject(root, "job", o->job_path);
    ok = ok && cJSON_AddNumberToObject(root, "steps", r->steps);
    ok = ok && cJSON_AddNumberToObject(root, "warmup_steps", r->warmup);
    ok = ok && cJSON_AddNumberToObject(root, "towers", tr->n_towers);
    ok = ok && cJSON_AddNumberToObject(root, "batch", tr->job->dataflow.batch_size);
    ok = ok && cJSON_AddNumberToObject(root, "step_ms", r->step_ms);
    ok = ok && (r->roof_gflops > 0 ? cJSON_AddNumberToObject(root, "roof_gflops", r->roof_gflops)
                                   : cJSON_AddNullToObject(root, "roof_gflops"));
    ok = ok && (layers = cJSON_AddArrayToObject(root, "layers")) != NULL; /* towertrain(1)'s order */
    for (int i = 0; ok && i < m->n_layers; i++) {
        const layer_row *row = &r->layers[i];
        const layer_t *l = &m->layers[i];
        cJSON *e = cJSON_CreateObject();
        int dims[3] = {l->out.c, l->out.h, l->out.w};
        ok = e != NULL && cJSON_AddItemToArray(layers, e);
        ok = ok && cJSON_AddStringToObject(e, "name", l->cfg->name);
        ok = ok && cJSON_AddStringToObject(e, "type", layer_type_text(l));
        ok = ok && cJSON_AddItemToObject(e, "shape", cJSON_CreateIntArray(dims, 3));
        ok = ok && cJSON_AddNumberToObject(e, "forward_ms", row->fwd_ms);
        ok = ok && cJSON_AddNumberToObject(e, "backward_ms", row->bwd_ms);
        ok = ok && cJSON_AddNumberToObject(e, "gflop", row->gflop);
        ok = ok && cJSON_AddNumberToObject(e, "gflops", row->gflops);
        ok = ok && cJSON_AddNumberToObject(e, "share", row->share);
        ok = ok && cJSON_AddNumberToObject(e, "roof_share", row->roof_share);
    }
    ok = ok && cJSON_AddNumberToObject(root, "data_wait_ms", r->data_ms);
    ok = ok && cJSON_AddNumberToObject(root, "allreduce_exposed_ms", r->exposed_ms);
    ok = ok && cJSON_AddNumberToObject(root, "allreduce_hidden_ms", r->hidden_ms);
    ok = ok && cJSON_AddNumberToObject(root, "optimizer_ms", r->optimizer_ms);
    ok = ok && cJSON_AddNumberToObject(root, "rest_ms", r->rest_ms);
    char *text = ok ? cJSON_Print(root) : NULL;
    cJSON_Delete(root);
    if (text == NULL)
        return err_set(err, TT_ERR_RUNTIME, "out of memory writing %s", o->json);
    size_t len = strlen(text);
    text[len] = '\n'; /* cJSON's buffer has room for its NUL, taken by the newline */
    int rc = file_write_atomic(o->json, text, len + 1, err);
    free(text);
    return rc;
}

/* Device towers: waits until every tower's device is idle, so that the
 * wall clock between two such points holds the device work of the steps
 * between them (the host returns from a step while its backward still
 * runs on the device). */
static int profile_devices_idle(const trainer_t *tr, tt_err *err)
{
    for (int t = 0; tr->dev != NULL && t < tr->n_towers; t++) {
        tt_err e = {0};
        if (backend_device_wait(tr->backends[t], "profile", &e) != 0)
            return err_set(err, e.code ? e.code : TT_ERR_RUNTIME, "tower %d: %s", t, e.msg);
    }
    return 0;
}

/* The roof (CPU towers) and tower 0's part of it, a cached one at least
 * tower_at_least for tower 0's threads; a line saying so. */
static void profile_roof(const trainer_t *tr, profile_result *r, double tower_at_least,
                         char *note, size_t len)
{
    if (tr->dev != NULL) {
        snprintf(note, len, "layers and all-reduce: device time (events on tower 0's compute "
                 "and communication queues); roof: not measured (device towers; the roof "
                 "here is the CPU's)");
        return;
    }
    int cores = threadpool_cpu_count(), cached;
    int threads = tr->backends[0]->threads;
    int used = threads < cores ? threads : cores;
    char where[4400];
    r->roof_gflops = roof_fp32_gflops(&cores, &cached, where, sizeof(where),
                                      tower_at_least * cores / used);
    r->tower_roof = r->roof_gflops * used / cores;
    snprintf(note, len, "fp32 roof %.1f GFLOP/s (best N = 3072 sgemm on %d core(s)%s%s); "
             "tower 0's %d thread(s): %.1f GFLOP/s", r->roof_gflops, cores,
             cached ? ", cached in " : where[0] ? ", cached to " : "", where, threads,
             r->tower_roof);
}

/* Each layer's share of tower 0's roof. A cached roof that the fastest
 * layer beat was measured while the machine was busy: measured again (the
 * higher kept), and the note says so. */
static void profile_roof_shares(const trainer_t *tr, profile_result *r, char *note, size_t len)
{
    const char *fastest = NULL;
    double top = 0.0;
    for (int i = 0; i < tr->model.n_layers; i++)
        if (r->layers[i].gflops > top) {
            top = r->layers[i].gflops;
            fastest = tr->model.layers[i].cfg->name;
        }
    if (r->tower_roof > 0 && top > r->tower_roof) {
        double was = r->roof_gflops;
        profile_roof(tr, r, top, note, len);
        size_t at = strlen(note);
        snprintf(note + at, len - at,
                 "\n(the cached roof, %.1f GFLOP/s, was below layer %s's %.1f: measured again)",
                 was, fastest, top);
    }
    for (int i = 0; i < tr->model.n_layers; i++)
        r->layers[i].roof_share = r->tower_roof > 0 ? r->layers[i].gflops / r->tower_roof : 0.0;
}

int profile_run(const job_t *job, const profile_opts *o, tt_err *err)
{
    trainer_t tr;
    profile_result r = {.steps = o->steps, .warmup = WARMUP_STEPS};
    int rc = -1;
    if (trainer_create(&tr, job, err) != 0)
        goto out;
    r.layers = calloc((size_t)tr.model.n_layers, sizeof(layer_row));
    if (r.layers == NULL) {
        err_set(err, TT_ERR_RUNTIME, "out of memory");
        goto out;
    }
    char roof_note[4800];
    profile_roof(&tr, &r, 0.0, roof_note, sizeof(roof_note)); /* first: nothing else running */
    int64_t offset = timeline_clock_offset();
    if (dataflow_start(tr.train_flow, 0, err) != 0)
        goto out;
    for (int i = 0; i < r.warmup; i++)
        if (trainer_step(&tr, err) != 0)
            goto out;
    device_towers_trace_prepare(&tr); /* device towers' events: before the steps */
    if (profile_devices_idle(&tr, err) != 0)
        goto out;
    trace_start();
    double t0 = clock_s();
    for (int i = 0; i < r.steps; i++)
        if (trainer_step(&tr, err) != 0) {
            trace_stop();
            goto out;
        }
    if (profile_devices_idle(&tr, err) != 0) {
        trace_stop();
        goto out;
    }
    r.step_ms = (clock_s() - t0) * 1e3 / r.steps;
    trace_stop();
    device_towers_trace_flush(&tr); /* device towers: their spans, read off the device */
    if (profile_tally(&tr, &r, err) != 0)
        goto out;
    profile_roof_shares(&tr, &r, roof_note, sizeof(roof_note));
    if (tr.rank == 0)
        profile_print(&tr, o, &r, roof_note);
    if (o->json != NULL && tr.rank == 0 && profile_write_json(&tr, o, &r, err) != 0)
        goto out;
    if (o->trace != NULL &&
        timeline_write(o->trace, offset, r.warmup + 1, r.warmup + r.steps, err) != 0)
        goto out;
    rc = 0;
out:
    if (tr.job != NULL)
        trainer_free(&tr);
    free(r.layers);
    return rc;
}
