/* test_sim_graph.c - the simulated GPU's step capture (backend.h:
 * capture_begin, capture_end, graph_launch, graph_free; src/backend/sim/
 * sim_graph.c) and the updates reading their per-step scalars from device
 * memory (backend_step_vars):
 * - nothing captured runs until a launch; each launch runs it again;
 * - a captured update reads the block when it runs: three launches with
 *   three learning rates give the by-value updates' bits, and the float64
 *   recomputation of momentum SGD;
 * - a captured by-value scalar stays the capture's (what the block is for);
 * - Adam and AdamW's decay through the block equal the by-value updates;
 * - dropout reads its seed from device memory at each launch;
 * - the loss of a launch is the eager loss; loss_read while capturing
 *   answers zeros without waiting;
 * - a host wait, an upload, an event, an allocation inside the capture make
 *   capture_end fail with one line naming it, leave the backend without an
 *   error, and nothing captured has run. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/math.h"
#include "backend/sim/sim.h"
#include "tt_test.h"

enum { N = 257 };

static backend_t *make(int device)
{
    tt_err err = {0};
    backend_t *be = backend_sim_create(device, "fp32", &err);
    if (be == NULL)
        tt_diag("%s", err.msg);
    return be;
}

static void fill(float *x, int n, float scale, float shift)
{
    for (int i = 0; i < n; i++)
        x[i] = scale * (float)((i * 37) % 101 - 50) / 50.0f + shift;
}

static void set_vars(backend_t *be, backend_step_vars *dev, float lr, int64_t step, bool first)
{
    tt_adam_consts a = tt_adam_make(lr, 0.9f, 0.999f, 1e-8f, 0.0f, step);
    backend_step_vars v = {.lr = lr, .decay = (float)(1.0 - (double)lr * 0.01),
                           .first_step = first, .adam_step_size = a.step_size,
                           .adam_bc2_sqrt = a.bias_correction2_sqrt, .step = step};
    be->upload(be, dev, &v, sizeof(v));
}

/* momentum SGD through a captured sgd_step_vars, three launches with
 * lr 0.1, 0.05, 0.025, against the by-value update on another sim device
 * and against float64 */
static void check_sgd_replays(void)
{
    static const float lrs[3] = {0.1f, 0.05f, 0.025f};
    float w0[N], g[N], got[N], want[N];
    fill(w0, N, 1.0f, 0.25f);
    fill(g, N, 0.5f, -0.1f);
    backend_t *a = make(0), *b = make(1);
    float *aw = a->alloc(a, sizeof(w0)), *ag = a->alloc(a, sizeof(g)), *ab = a->alloc(a, sizeof(g));
    float *bw = b->alloc(b, sizeof(w0)), *bg = b->alloc(b, sizeof(g)), *bb = b->alloc(b, sizeof(g));
    backend_step_vars *v = a->alloc(a, sizeof(*v));
    a->upload(a, aw, w0, sizeof(w0));
    a->upload(a, ag, g, sizeof(g));
    b->upload(b, bw, w0, sizeof(w0));
    b->upload(b, bg, g, sizeof(g));
    tt_err err = {0};
    set_vars(a, v, 1.0f, 1, true);
    a->dev->sync(a, &err);
    int rc = a->dev->capture_begin(a, &err);
    a->sgd_step_vars(a, N, v, 0.9f, false, 0.0f, aw, ag, ab);
    backend_graph *gr = a->dev->capture_end(a, &err);
    tt_ok(rc == 0 && gr != NULL, "a momentum update is captured (%s)", err.msg);
    a->download(a, got, aw, sizeof(got));
    tt_ok(memcmp(got, w0, sizeof(w0)) == 0, "nothing captured ran before a launch");
    for (int k = 0; k < 3 && gr != NULL; k++) {
        set_vars(a, v, lrs[k], k + 1, k == 0);
        a->dev->graph_launch(a, gr, &err);
        b->sgd_step(b, N, lrs[k], 0.9f, false, 0.0f, k == 0, bw, bg, bb);
    }
    a->download(a, got, aw, sizeof(got));
    b->download(b, want, bw, sizeof(want));
    tt_ok(memcmp(got, want, sizeof(got)) == 0,
          "3 launches with lr 0.1, 0.05, 0.025 in the block: the by-value updates' bits");
    /* float64: buf = g every step (g fixed), b_k = g (1 + 0.9 + ...) */
    double worst = 0.0;
    for (int i = 0; i < N; i++) {
        double buf = 0.0, w = w0[i];
        for (int k = 0; k < 3; k++) {
            buf = k == 0 ? g[i] : 0.9 * buf + g[i];
            w -= lrs[k] * buf;
        }
        double d = fabs(w - got[i]) / (fabs(w) + 1e-3);
        worst = d > worst ? d : worst;
    }
    tt_ok(worst < 1e-5, "the launches agree with float64 momentum SGD (max rel diff %.2g)", worst);

    /* the same capture with lr by value: every launch repeats the
     * capture's rate (the defect the block prevents) */
    a->upload(a, aw, w0, sizeof(w0));
    a->dev->sync(a, &err);
    a->dev->capture_begin(a, &err);
    a->sgd_step(a, N, lrs[0], 0.0f, false, 0.0f, false, aw, ag, NULL);
    backend_graph *baked = a->dev->capture_end(a, &err);
    for (int k = 0; k < 3 && baked != NULL; k++)
        a->dev->graph_launch(a, baked, &err);
    a->download(a, got, aw, sizeof(got));
    bool thrice = baked != NULL;
    for (int i = 0; i < N; i++) {
        float w = w0[i];
        for (int k = 0; k < 3; k++)
            w = tt_sgd_update(w, g[i], &(float){0}, lrs[0], 0.0f, 0, 0.0f, 0);
        thrice = thrice && got[i] == w;
    }
    tt_ok(thrice, "a rate captured by value is replayed unchanged 3 times");
    tt_ok(a->dev->check(a, &err) == 0 && b->dev->check(b, &err) == 0, "no device error");
    a->dev->graph_free(a, gr);
    a->dev->graph_free(a, baked);
    a->destroy(a);
    b->destroy(b);
}

/* Adam and AdamW's decay through the block against the by-value calls,
 * two launches (steps 1 and 2, two rates) */
static void check_adam_replays(void)
{
    float w0[N], g[N], got[N], want[N];
    fill(w0, N, 1.0f, 0.0f);
    fill(g, N, 0.3f, 0.05f);
    backend_t *a = make(2), *b = make(3);
    float *aw = a->alloc(a, sizeof(w0)), *ag = a->alloc(a, sizeof(g));
    float *am = a->alloc(a, sizeof(g)), *av = a->alloc(a, sizeof(g));
    float *bw = b->alloc(b, sizeof(w0)), *bg = b->alloc(b, sizeof(g));
    float *bm = b->alloc(b, sizeof(g)), *bv = b->alloc(b, sizeof(g));
    backend_step_vars *v = a->alloc(a, sizeof(*v));
    a->upload(a, aw, w0, sizeof(w0));
    a->upload(a, ag, g, sizeof(g));
    b->upload(b, bw, w0, sizeof(w0));
    b->upload(b, bg, g, sizeof(g));
    tt_err err = {0};
    a->dev->sync(a, &err);
    a->dev->capture_begin(a, &err);
    a->decay_vars(a, N, v, aw);
    a->adam_step_vars(a, N, v, 0.9f, 0.999f, 1e-8f, 0.0f, aw, ag, am, av);
    backend_graph *gr = a->dev->capture_end(a, &err);
    static const float lrs[2] = {1e-3f, 3e-4f};
    for (int k = 0; k < 2 && gr != NULL; k++) {
        set_vars(a, v, lrs[k], k + 1, k == 0);
        a->dev->graph_launch(a, gr, &err);
        b->scale(b, N, (float)(1.0 - (double)lrs[k] * 0.01), bw);
        b->adam_step(b, N, lrs[k], 0.9f, 0.999f, 1e-8f, 0.0f, k + 1, bw, bg, bm, bv);
    }
    a->download(a, got, aw, sizeof(got));
    b->download(b, want, bw, sizeof(want));
    tt_ok(gr != NULL && memcmp(got, want, sizeof(got)) == 0,
          "AdamW (decay, then Adam) through the block, steps 1 and 2: the by-value bits");
    tt_ok(a->dev->check(a, &err) == 0, "the block's bias corrections are its step's (%s)",
          err.msg);
    a->dev->graph_free(a, gr);
    a->destroy(a);
    b->destroy(b);
}

/* dropout with its seed in device memory: two launches with two seeds
 * give the by-value dropout's masks and outputs, each factor that of
 * math.h's tt_dropout_factor for its seed */
static void check_dropout(void)
{
    float x[N], got[N], mask[N];
    fill(x, N, 1.0f, 0.5f);
    backend_t *be = make(6);
    float *dx = be->alloc(be, sizeof(x)), *dy = be->alloc(be, sizeof(x));
    float *dm = be->alloc(be, sizeof(x));
    uint64_t *seed = be->alloc(be, sizeof(uint64_t));
    be->upload(be, dx, x, sizeof(x));
    tt_err err = {0};
    be->dev->sync(be, &err);
    be->dev->capture_begin(be, &err);
    be->dropout_forward_vars(be, N, 0.3f, seed, dx, dy, dm);
    backend_graph *g = be->dev->capture_end(be, &err);
    static const uint64_t seeds[2] = {0x1234u, 0xfeedface0ddu};
    for (int k = 0; k < 2 && g != NULL; k++) {
        be->upload(be, seed, &seeds[k], sizeof(seeds[k]));
        be->dev->graph_launch(be, g, &err);
        be->download(be, got, dy, sizeof(got));
        be->download(be, mask, dm, sizeof(mask));
        bool same = true;
        int dropped = 0;
        for (int i = 0; i < N; i++) {
            float f = tt_dropout_factor(seeds[k], (uint64_t)i, 0.3f);
            same = same && mask[i] == f && got[i] == x[i] * f;
            dropped += f == 0.0f;
        }
        tt_ok(same && dropped > 0 && dropped < N,
              "launch %d: dropout reads seed %#llx from the block (%d of %d dropped)", k + 1,
              (unsigned long long)seeds[k], dropped, N);
    }
    be->dev->graph_free(be, g);
    be->destroy(be);
}

/* the loss of a launched graph is read after it; while capturing,
 * loss_read answers zeros at once */
static void check_loss(void)
{
    float logits[8] = {1, 2, 0, -1, 0.5f, 0.25f, 3, 1};
    int32_t labels[2] = {1, 2};
    backend_t *be = make(4);
    float *dl = be->alloc(be, sizeof(logits)), *dg = be->alloc(be, sizeof(logits));
    int32_t *dy = be->alloc(be, sizeof(labels));
    be->upload(be, dl, logits, sizeof(logits));
    be->upload(be, dy, labels, sizeof(labels));
    double eager = 0.0, during = -1.0, replay = 0.0;
    int ce = 0, cd = -1, cr = 0;
    be->softmax_xent(be, 2, 4, dl, dy, 0.0f, dg);
    be->loss_read(be, &eager, &ce);
    tt_err err = {0};
    be->dev->capture_begin(be, &err);
    be->softmax_xent(be, 2, 4, dl, dy, 0.0f, dg);
    be->loss_read(be, &during, &cd);
    backend_graph *g = be->dev->capture_end(be, &err);
    tt_ok(during == 0.0 && cd == 0, "loss_read while capturing: zeros, no wait");
    /* another loss in between: the launch's read must be the graph's */
    be->softmax_xent(be, 1, 4, dl + 4, dy + 1, 0.0f, dg);
    double other;
    int co;
    be->loss_read(be, &other, &co);
    if (g != NULL)
        be->dev->graph_launch(be, g, &err);
    be->loss_read(be, &replay, &cr);
    tt_ok(g != NULL && replay == eager && cr == ce && other != eager,
          "the launch's loss is the eager loss (%.6f, %d correct)", replay, cr);
    be->dev->graph_free(be, g);
    be->destroy(be);
}

/* one refused operation inside a capture: capture_end fails naming it,
 * nothing captured ran, the backend has no error and runs on */
static void check_refusal(const char *name, const char *want)
{
    float w0[N], got[N];
    fill(w0, N, 1.0f, 0.0f);
    backend_t *be = make(5);
    float *w = be->alloc(be, sizeof(w0));
    be->upload(be, w, w0, sizeof(w0));
    backend_event *e = be->dev->event_create(be, false, &(tt_err){0});
    tt_err err = {0};
    be->dev->sync(be, &err);
    be->dev->capture_begin(be, &err);
    be->scale(be, N, 2.0f, w);
    if (strcmp(name, "download") == 0)
        be->download(be, got, w, sizeof(got));
    else if (strcmp(name, "upload") == 0)
        be->upload(be, w, w0, sizeof(w0));
    else if (strcmp(name, "event") == 0)
        be->dev->event_record(be, e, be->dev->queue(be), &err);
    else if (strcmp(name, "alloc") == 0)
        be->alloc(be, 64);
    else if (strcmp(name, "sumsq") == 0)
        be->sumsq(be, N, w);
    be->scale(be, N, 2.0f, w);
    backend_graph *g = be->dev->capture_end(be, &err);
    tt_ok(g == NULL && strstr(err.msg, want) != NULL, "%s inside a capture: it fails (%s)", name,
          err.msg);
    be->download(be, got, w, sizeof(got));
    tt_ok(memcmp(got, w0, sizeof(w0)) == 0, "%s: nothing of the failed capture ran", name);
    be->scale(be, N, 2.0f, w);
    be->download(be, got, w, sizeof(got));
    tt_ok(got[3] == 2.0f * w0[3] && be->dev->check(be, &err) == 0,
          "%s: the backend has no error and runs eagerly after it", name);
    be->dev->event_free(be, e);
    be->destroy(be);
}

int main(void)
{
    check_sgd_replays();
    check_adam_replays();
    check_dropout();
    check_loss();
    check_refusal("download", "waits for the device (download)");
    check_refusal("sumsq", "waits for the device (norm)");
    check_refusal("upload", "an upload");
    check_refusal("event", "an event record");
    check_refusal("alloc", "an allocation");
    return tt_done();
}
