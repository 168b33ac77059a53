/* device_towers.c - device towers (a GPU's, or the simulated GPU's): device
 * choice, backends, staged input, the tower table and the per-step error
 * check (device_towers.h). Everything here goes through backend.h's device
 * side (be->dev), so the simulated device runs it in make check. */
#include "train/device_towers.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/mem_pool.h"
#include "backend/precision.h"
#include "backend/staging.h"
#include "train/device_spans.h"
#include "train/trainer.h"
#include "util/log.h"

struct device_towers {
    staging *staging[TT_MAX_TOWERS];
    device_spans *spans[TT_MAX_TOWERS]; /* the tower row's spans, on the device */
    device_spans *comm_spans[TT_MAX_TOWERS]; /* its all-reduce row's (device_towers_trace_comm) */
    struct comm_tower {
        backend_comm *comm;
        int t;
    } comm_tower[TT_MAX_TOWERS];
    float *input[TT_MAX_TOWERS];     /* the tower's own buffers, put back after a step */
    int32_t *labels[TT_MAX_TOWERS];
    tt_err err[TT_MAX_TOWERS];       /* an error met on a tower's thread */
    backend_device_info info[TT_MAX_TOWERS];
};

/* "cuda" or "sim": the kind of device trainer.device names */
static const char *device_kind_of(const job_t *job)
{
    return job->trainer.device == DEVICE_SIM ? "sim" : "cuda";
}

int device_select(const job_t *job, bool *on_device, char *note, size_t note_len, tt_err *err)
{
    const trainer_cfg *tc = &job->trainer;
    const char *kind = device_kind_of(job);
    *on_device = false;
    if (tc->device == DEVICE_CPU)
        return 0;
    char reason[256] = "";
    int n = backend_device_count(kind, reason, sizeof(reason));
    if (n == 0) {
        if (tc->device == DEVICE_GPU)
            return err_set(err, TT_ERR_USAGE, "trainer.device = \"gpu\" but no GPU is available "
                           "(%s)", reason);
        if (note != NULL)
            snprintf(note, note_len, "trainer.device = \"auto\": no GPU (%s); training on the "
                     "CPU", reason);
        return 0;
    }
    for (int t = 0; t < tc->nr_tower; t++) {
        for (int u = 0; u < t; u++)
            if (tc->towers[u] == tc->towers[t])
                return err_set(err, TT_ERR_USAGE, "trainer.towers: %s:%d is listed twice; GPU "
                               "towers take one GPU each", kind, tc->towers[t]);
        backend_device_info info;
        tt_err dev_err = {0};
        if (backend_device_query(kind, tc->towers[t], &info, &dev_err) != 0)
            return err_set(err, TT_ERR_USAGE, "trainer.towers[%d]: %s", t, dev_err.msg);
        if (info.major * 10 + info.minor < 80)
            return err_set(err, TT_ERR_USAGE, "trainer.towers[%d]: %s:%d (%s): compute "
                           "capability %d.%d is below 8.0, the lowest towertrain supports", t,
                           kind, tc->towers[t], info.name, info.major, info.minor);
    }
    *on_device = true;
    return 0;
}

static prec_t job_prec(const job_t *job)
{
    return job->trainer.precision == PRECISION_BF16   ? PREC_BF16
           : job->trainer.precision == PRECISION_FP16 ? PREC_FP16
                                                      : PREC_FP32;
}

backend_t *device_backend_create(const job_t *job, int t, tt_err *err)
{
    backend_device_options o = {.precision = prec_name(job_prec(job)),
                                .tf32 = job->trainer.tf32,
                                .deterministic = job->trainer.deterministic};
    tt_err be_err = {0};
    backend_t *be = backend_device_create(device_kind_of(job), job->trainer.towers[t], &o,
                                          &be_err);
    if (be == NULL)
        err_set(err, be_err.code, "tower %d: %s", t, be_err.msg);
    return be;
}

bool device_explain_setup_failure(const trainer_t *tr, int t, tt_err *err)
{
    backend_t *be = tr->backends[t];
    if (be == NULL || be->dev == NULL)
        return false;
    tt_err dev_err = {0};
    const char *oom = be->dev->alloc_error(be);
    if (oom[0] != '\0') {
        if (strstr(err->msg, oom) != NULL)
            return true; /* said already */
        err_clear(err);
        err_set(err, TT_ERR_USAGE, "tower %d (%s:%d): %s", t, be->dev->kind, be->device, oom);
        return true;
    }
    if (be->dev->check(be, &dev_err) != 0) {
        err_clear(err);
        err_set(err, dev_err.code, "tower %d: %s", t, dev_err.msg);
        return true;
    }
    return false;
}

size_t device_copies_bytes(const model_t *m, const bool *blocked, bool g16,
                           precision_kind precision, int max_n)
{
    prec_t p = precision == PRECISION_BF16   ? PREC_BF16
               : precision == PRECISION_FP16 ? PREC_FP16
                                             : PREC_FP32;
    size_t most = 0;
    for (int i = 0; i < m->n_layers; i++) {
        const layer_t *l = &m->layers[i];
        size_t bytes = 0;
        /* global_avgpool's dense call is float32 on devices
         * (dense_forward_fp32): no copies */
        if (l->cfg->type == LAYER_DENSE) {
            prec_dense_copies dc;
            prec_dense_copies_of(p, max_n, (int)shape3_size(l->in[0]), l->out.c, &dc);
            bytes = dc.bytes_no_w; /* w: the tower's weight copies (weight_copies.h) */
        } else if (l->cfg->type == LAYER_CONV2D) {
            /* conv2d.c's window, its sides blocked as the tower's are */
            int src = model_layer_input(m, i, 0);
            bool bx = blocked != NULL && src >= 0 && blocked[src];
            bool by = blocked != NULL && blocked[i];
            window_desc d = {max_n,         l->in[0].c,      l->in[0].h,       l->in[0].w,
                             l->cfg->filters, l->cfg->kernel, l->cfg->stride, l->cfg->padding,
                             l->out.h,      l->out.w,        bx,             by};
            prec_conv_copies cc;
            prec_conv_copies_of(p, &d, g16, &cc);
            bytes = cc.bytes_no_w;
        }
        if (bytes > most)
            most = bytes;
    }
    return most;
}

/* Each tower's thread works on its device from now on. */
static void bind_tower(const tower_context *ctx, void *arg)
{
    trainer_t *tr = arg;
    tt_err err = {0};
    backend_t *be = tr->backends[ctx->index];
    if (be->dev->bind(be, &err) != 0)
        device_tower_fail(tr, ctx->index, &err);
}

int device_towers_create(trainer_t *tr, tt_err *err)
{
    device_towers *g = calloc(1, sizeof(*g));
    if (g == NULL)
        return err_set(err, TT_ERR_RUNTIME, "out of memory");
    tr->dev = g;
    size_t sample = shape3_size(tr->model.input);
    int batch = tr->job->dataflow.batch_size;
    for (int t = 0; t < tr->n_towers; t++) {
        tower_t *tw = &tr->towers[t];
        g->input[t] = tw->input;
        g->labels[t] = tw->labels;
        backend_t *be = tr->backends[t];
        if (be->dev->info(be, &g->info[t], err) != 0)
            return -1;
        /* mixed precision: room for the 16-bit copies of the largest layer */
        size_t copies = device_copies_bytes(&tr->model, tw->blocked, be->blocked_bf16_grads,
                                            tr->job->trainer.precision, batch);
        if (be->dev->reserve_copies(be, copies, err) != 0) {
            device_explain_setup_failure(tr, t, err);
            return -1;
        }
        tt_err st_err = {0};
        g->staging[t] = staging_create(be, (size_t)batch * sample * sizeof(float),
                                                (size_t)batch * sizeof(int32_t), &st_err);
        if (g->staging[t] == NULL)
            return err_set(err, st_err.code, "tower %d: %s", t, st_err.msg);
        if ((g->spans[t] = device_spans_create(be, TRACE_ROW_TOWER + t)) == NULL)
            return err_set(err, TT_ERR_RUNTIME, "out of memory");
    }
    tower_threads_run(tr->threads, bind_tower, tr);
    return device_towers_check(tr, err);
}

int device_towers_finish_setup(trainer_t *tr, tt_err *err)
{
    for (int t = 0; t < tr->n_towers; t++) {
        backend_t *be = tr->backends[t];
        tt_err dev_err = {0};
        if (be->dev->sync(be, &dev_err) != 0)
            return err_set(err, TT_ERR_RUNTIME, "tower %d: %s", t, dev_err.msg);
        be->dev->freeze(be);
    }
    return 0;
}

void device_towers_free(trainer_t *tr)
{
    device_towers *g = tr->dev;
    if (g == NULL)
        return;
    for (int t = 0; t < tr->n_towers; t++) {
        if (tr->towers != NULL && tr->towers[t].be != NULL && g->input[t] != NULL) {
            tr->towers[t].input = g->input[t];
            tr->towers[t].labels = g->labels[t];
        }
        if (g->staging[t] != NULL)
            staging_free(g->staging[t]);
        device_spans_free(g->spans[t]);
        device_spans_free(g->comm_spans[t]);
    }
    free(g);
    tr->dev = NULL;
}

void device_towers_trace_flush(trainer_t *tr)
{
    device_towers *g = tr->dev;
    if (g == NULL)
        return;
    for (int t = 0; t < tr->n_towers; t++) {
        device_spans *rows[] = {g->spans[t], g->comm_spans[t]}; /* one clock */
        device_spans_flush(rows, 2);
    }
}

static void prepare_tower(const tower_context *ctx, void *arg)
{
    device_towers *g = ((trainer_t *)arg)->dev;
    device_spans_prepare(g->spans[ctx->index]);
    device_spans_prepare(g->comm_spans[ctx->index]);
}

void device_towers_trace_prepare(trainer_t *tr)
{
    if (tr->dev != NULL)
        tower_threads_run(tr->threads, prepare_tower, tr);
}

/* device_spans_record_fn of an all-reduce row: on the tower's
 * communication queue, a span's begin when its group starts there (after
 * the queue's wait for the gradients), its end after the group */
static int comm_record(void *arg, backend_event *e, bool begin, tt_err *err)
{
    struct comm_tower *ct = arg;
    return ct->comm->record(ct->comm, ct->t, e, begin, err);
}

int device_towers_trace_comm(trainer_t *tr, backend_comm *comm, tt_err *err)
{
    device_towers *g = tr->dev;
    for (int t = 0; g != NULL && t < tr->n_towers; t++) {
        g->comm_tower[t] = (struct comm_tower){comm, t};
        g->comm_spans[t] = device_spans_create_on(tr->backends[t], TRACE_ROW_ALLREDUCE + t,
                                                  DEVICE_SPAN_EVENTS_COMM, comm_record,
                                                  &g->comm_tower[t]);
        if (g->comm_spans[t] == NULL)
            return err_set(err, TT_ERR_RUNTIME, "out of memory");
    }
    return 0;
}

void device_tower_fail(trainer_t *tr, int t, const tt_err *err)
{
    device_towers *g = tr->dev;
    if (g != NULL && g->err[t].code == TT_OK)
        err_set(&g->err[t], err->code ? err->code : TT_ERR_RUNTIME, "tower %d: %s", t, err->msg);
}

void device_tower_load(trainer_t *tr, int t, int64_t key, int n, const float *x, const int32_t *y)
{
    device_towers *g = tr->dev;
    tower_t *tw = &tr->towers[t];
    size_t sample = shape3_size(tr->model.input);
    float *dx;
    int32_t *dy;
    tt_err err = {0};
    if (staging_load(g->staging[t], key, x,
                                  (size_t)n * sample * sizeof(float), y,
                                  (size_t)n * sizeof(int32_t), &dx, &dy, &err) != 0) {
        device_tower_fail(tr, t, &err);
        tower_load_batch(tw, n, x, y); /* the step still sees its data; it fails after */
        return;
    }
    /* tower_step reads batch_x / batch_y: point them at the staged batch */
    tw->input = dx;
    tw->labels = dy;
    tw->batch_x = dx;
    tw->batch_y = dy;
}

void device_tower_consumed(trainer_t *tr, int t)
{
    device_towers *g = tr->dev;
    tt_err err = {0};
    if (staging_done(g->staging[t], &err) != 0)
        device_tower_fail(tr, t, &err);
    tr->towers[t].input = g->input[t];
    tr->towers[t].labels = g->labels[t];
    tr->towers[t].batch_x = g->input[t];
    tr->towers[t].batch_y = g->labels[t];
}

int device_towers_check(trainer_t *tr, tt_err *err)
{
    device_towers *g = tr->dev;
    for (int t = 0; t < tr->n_towers; t++) {
        if (g->err[t].code != TT_OK)
            return err_set(err, TT_ERR_RUNTIME, "%s", g->err[t].msg);
        backend_t *be = tr->backends[t];
        tt_err dev_err = {0};
        if (be->dev->check(be, &dev_err) != 0)
            return err_set(err, TT_ERR_RUNTIME, "tower %d: %s", t, dev_err.msg);
    }
    return 0;
}

/* What a device tower keeps between layers (precision.h's device layout:
 * TT_CUDA_LAYOUT, TT_BF16_GRADS) */
static const char *activations_name(const backend_t *be)
{
    if (!be->blocked_layout)
        return "float32 NCHW";
    if (!be->blocked_bf16)
        return "float32 NHWC";
    return be->blocked_bf16_grads ? "bf16 NHWC, their gradients bf16"
                                  : "bf16 NHWC, their gradients float32";
}

void device_print_table(const trainer_t *tr)
{
    const device_towers *g = tr->dev;
    const job_t *job = tr->job;
    const backend_device_ops *dev = tr->backends[0]->dev;
    log_printf("%-6s %-8s %-28s %-5s %-24s %-6s\n", "tower", "device", "gpu", "sm",
               "memory (pool / device)", "batch");
    for (int t = 0; t < tr->n_towers; t++) {
        const backend_device_info *i = &g->info[t];
        size_t reserved, in_use, peak;
        dev->memory(tr->backends[t], &reserved, &in_use, &peak);
        char pool[32], total[32], mem[80], name[16];
        mem_format_bytes(reserved, pool, sizeof(pool));
        mem_format_bytes(i->total_bytes, total, sizeof(total));
        snprintf(mem, sizeof(mem), "%s / %s", pool, total);
        snprintf(name, sizeof(name), "%s:%d", dev->kind, job->trainer.towers[t]);
        log_printf("%-6d %-8s %-28.28s %d.%-3d %-24s %-6d\n", t, name, i->name, i->major,
                   i->minor, mem, job->dataflow.batch_size);
    }
    const char *built = dev->build_info();
    log_printf("%s; tf32 %s, deterministic %s; input staged through pinned buffers (2 per "
               "tower)\n", built ? built : dev->kind, job->trainer.tf32 ? "on" : "off",
               job->trainer.deterministic ? "on" : "off");
    log_printf("activations between layers: %s\n", activations_name(tr->backends[0]));
    prec_t p = job_prec(job);
    if (p != PREC_FP32) {
        char what[256];
        prec_describe(p, what, sizeof(what));
        log_printf("precision %s: %s%s\n", prec_name(p), what,
                   p == PREC_FP16 ? "; dynamic loss scaling" : "");
    }
}
