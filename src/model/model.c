/* model.c - the layer graph, the parameter layout and the tower function. */
#include "model/model.h"

#include <stdlib.h>
#include <string.h>

#include "util/env.h"
#include "util/log.h"
#include "util/rng.h"
#include "util/trace.h"

/* Input k of layer i: a layer index, or -1 for the model input. A layer with no
 * explicit inputs reads the previous layer. */
static int layer_input(const layer_cfg *lc, int i, int k)
{
    if (lc->n_inputs == 0)
        return i - 1;
    return lc->inputs[k];
}

int model_layer_input(const model_t *m, int i, int k)
{
    return layer_input(m->layers[i].cfg, i, k);
}

static int layer_input_count(const layer_cfg *lc)
{
    return lc->n_inputs == 0 ? 1 : lc->n_inputs;
}

static const char *model_file_name(const model_cfg *cfg)
{
    return cfg->path[0] ? cfg->path : "model";
}

/* A relu layer whose input is read by it alone, and made by a layer that can
 * apply relu to its own output, is fused into that layer: the producer writes
 * relu'd values and masks the gradient itself, and the relu layer shares its
 * buffers, costing no pass over memory. (dense and conv2d fuse in the same
 * loop; batchnorm and add with one more pass over data still in cache.) The
 * graph, parameter names and results stay those of the model file. */
static void fuse_relus(model_t *m)
{
    for (int i = 0; i < m->n_layers; i++) {
        layer_t *l = &m->layers[i];
        if (l->cfg->type != LAYER_RELU)
            continue;
        int src = layer_input(l->cfg, i, 0);
        if (src < 0 || m->consumers[src] != 1 || m->layers[src].relu_out)
            continue;
        layer_type t = m->layers[src].cfg->type;
        if (t == LAYER_DENSE || t == LAYER_CONV2D || t == LAYER_BATCHNORM || t == LAYER_ADD) {
            m->layers[src].relu_out = true;
            l->relu_fused = true;
        }
    }
}

/* Where layer i's reads happen: at i, or for an add done by a batchnorm
 * (fuse_adds) at that batchnorm. */
static int read_time(const model_t *m, int i)
{
    return m->layers[i].add_fused ? m->layers[i].add_src : i;
}

/* An add of two inputs, one of them a batchnorm read by nothing else and
 * later than the other input, runs inside that batchnorm (layer.h,
 * add_out): y = relu(batchnorm(x) + r) in one pass on a backend with the
 * fused operations (backend.h), and in backward the add's gradient goes to
 * r's gradient directly (no copy of it, no scratch and axpy). The add's
 * reads move back from the add to the batchnorm: allowed only where no
 * other reader of r runs from the batchnorm to the add, so that r's
 * gradients are still summed in the same order (same bits). */
static void fuse_adds(model_t *m)
{
    for (int a = 0; a < m->n_layers; a++) {
        layer_t *add = &m->layers[a];
        if (add->cfg->type != LAYER_ADD || add->n_in != 2)
            continue;
        int in0 = layer_input(add->cfg, a, 0), in1 = layer_input(add->cfg, a, 1);
        int b = in0 > in1 ? in0 : in1, r = in0 > in1 ? in1 : in0;
        if (b < 0 || b == r)
            continue;
        layer_t *bn = &m->layers[b];
        if (bn->cfg->type != LAYER_BATCHNORM || m->consumers[b] != 1 || bn->relu_out)
            continue;
        bool clash = false;
        for (int j = 0; j < m->n_layers && !clash; j++) {
            if (j == a || m->layers[j].relu_fused)
                continue;
            int t = read_time(m, j);
            for (int k = 0; k < m->layers[j].n_in; k++)
                if (layer_input(m->layers[j].cfg, j, k) == r && t >= b && t <= a)
                    clash = true;
        }
        if (clash)
            continue;
        bn->add_out = true;
        bn->add_other = r;
        bn->relu_out = add->relu_out;
        add->add_fused = true;
        add->add_src = b;
    }
}

/* layer_cost of every layer (model.h says what is counted). */
static void count_costs(model_t *m)
{
    for (int i = 0; i < m->n_layers; i++) {
        const layer_t *l = &m->layers[i];
        const layer_cfg *lc = l->cfg;
        double macs = 0.0;
        if (lc->type == LAYER_CONV2D)
            macs = (double)shape3_size(l->out) * l->in[0].c * lc->kernel * lc->kernel;
        else if (lc->type == LAYER_DENSE)
            macs = (double)shape3_size(l->in[0]) * lc->units;
        layer_cost *c = &m->costs[i];
        c->layer = l;
        c->fwd = 2.0 * macs;
        c->bwd = 2.0 * macs * (layer_input(lc, i, 0) < 0 ? 1 : 2);
    }
}

/* m->input: the data's shape, as the model's input names it (a rank-1
 * input takes the data's elements flattened) */
static int model_input(const model_cfg *cfg, shape3 data, model_t *m, tt_err *err)
{
    if (cfg->input_rank == 1) {
        if (shape3_size(data) != (size_t)cfg->input[0])
            return err_set(err, TT_ERR_USAGE,
                           "%s: model input [%d] does not match the data's %d elements "
                           "(%dx%dx%d)", model_file_name(cfg), cfg->input[0],
                           (int)shape3_size(data), data.c, data.h, data.w);
        m->input = shape3_make(cfg->input[0], 1, 1);
    } else {
        if (data.c != cfg->input[0] || data.h != cfg->input[1] || data.w != cfg->input[2])
            return err_set(err, TT_ERR_USAGE,
                           "%s: model input [%d, %d, %d] does not match the data's "
                           "[%d, %d, %d]", model_file_name(cfg), cfg->input[0], cfg->input[1],
                           cfg->input[2], data.c, data.h, data.w);
        m->input = data;
    }
    return 0;
}

/* The parameter layout: trainable tensors first, then the others, each
 * 16-float aligned */
static int model_layout_params(model_t *m, tt_err *err)
{
    int total = 0;
    for (int i = 0; i < m->n_layers; i++)
        total += m->layers[i].n_params;
    m->params = calloc(total > 0 ? (size_t)total : 1, sizeof(param_entry));
    if (m->params == NULL)
        return err_set(err, TT_ERR_RUNTIME, "out of memory building the model");
    size_t offset = 0;
    for (int pass = 0; pass < 2; pass++) {
        bool want_trainable = pass == 0;
        for (int i = 0; i < m->n_layers; i++) {
            const layer_t *l = &m->layers[i];
            for (int j = 0; j < l->n_params; j++) {
                if (l->params[j].trainable != want_trainable)
                    continue;
                param_entry *p = &m->params[m->n_params++];
                snprintf(p->name, sizeof(p->name), "%s.%s", l->cfg->name, l->params[j].suffix);
                p->layer = i;
                p->spec = j;
                p->offset = offset;
                p->count = l->params[j].count;
                p->trainable = want_trainable;
                m->param_offset[i * LAYER_MAX_PARAMS + j] = offset;
                /* keep every tensor 16-float (64-byte) aligned for vector loads */
                offset += (p->count + 15) & ~(size_t)15;
            }
        }
        if (pass == 0)
            m->n_trainable = offset;
    }
    m->n_floats = offset;
    return 0;
}

int model_build(const model_cfg *cfg, shape3 data, model_t *m, tt_err *err)
{
    memset(m, 0, sizeof(*m));
    m->cfg = cfg;
    if (model_input(cfg, data, m, err) != 0)
        return -1;
    if (cfg->n_layers < 1)
        return err_set(err, TT_ERR_USAGE, "%s: the model has no layers", model_file_name(cfg));

    m->n_layers = cfg->n_layers;
    m->layers = calloc((size_t)m->n_layers, sizeof(layer_t));
    m->param_offset = calloc((size_t)m->n_layers * LAYER_MAX_PARAMS, sizeof(size_t));
    m->consumers = calloc((size_t)m->n_layers, sizeof(int));
    m->costs = calloc((size_t)m->n_layers, sizeof(layer_cost));
    if (!m->layers || !m->param_offset || !m->consumers || !m->costs) {
        model_free(m);
        return err_set(err, TT_ERR_RUNTIME, "out of memory building the model");
    }

    for (int i = 0; i < m->n_layers; i++) {
        const layer_cfg *lc = &cfg->layers[i];
        shape3 in[LAYER_MAX_INPUTS];
        int n_in = layer_input_count(lc);
        for (int k = 0; k < n_in; k++) {
            int src = layer_input(lc, i, k);
            if (src >= i) {
                model_free(m);
                return err_set(err, TT_ERR_USAGE, "%s: layers[%d] (%s): input is not an "
                               "earlier layer", model_file_name(cfg), i, lc->name);
            }
            in[k] = src < 0 ? m->input : m->layers[src].out;
            if (src >= 0)
                m->consumers[src]++;
        }
        if (layer_setup(&m->layers[i], lc, in, n_in, err) != 0) {
            model_free(m);
            return -1;
        }
    }
    fuse_relus(m);
    fuse_adds(m);
    count_costs(m);
    shape3 out = m->layers[m->n_layers - 1].out;
    if (shape3_size(out) != (size_t)cfg->classes) {
        model_free(m);
        return err_set(err, TT_ERR_USAGE, "%s: the last layer (%s) outputs %d values but "
                       "classes = %d", model_file_name(cfg), cfg->layers[m->n_layers - 1].name,
                       (int)shape3_size(out), cfg->classes);
    }

    if (model_layout_params(m, err) != 0) {
        model_free(m);
        return -1;
    }
    return 0;
}

void model_free(model_t *m)
{
    free(m->layers);
    free(m->params);
    free(m->param_offset);
    free(m->consumers);
    free(m->costs);
    memset(m, 0, sizeof(*m));
}

void model_init_params(const model_t *m, uint64_t seed, float *host_block)
{
    memset(host_block, 0, m->n_floats * sizeof(float));
    for (int i = 0; i < m->n_layers; i++) {
        const layer_t *l = &m->layers[i];
        float *ptrs[LAYER_MAX_PARAMS] = {0};
        for (int j = 0; j < l->n_params; j++)
            ptrs[j] = host_block + m->param_offset[i * LAYER_MAX_PARAMS + j];
        rng_t rng = rng_make(seed, 0x1417a11ULL, (uint64_t)i);
        if (l->ops->init != NULL)
            l->ops->init(l, &rng, ptrs);
    }
}

static size_t layer_param_count(const layer_t *l)
{
    size_t n = 0;
    for (int j = 0; j < l->n_params; j++)
        n += l->params[j].count;
    return n;
}

void model_print_table(const model_t *m)
{
    log_printf("%-16s %-15s %-16s %12s\n", "layer", "type", "output shape", "parameters");
    size_t total = 0;
    for (int i = 0; i < m->n_layers; i++) {
        const layer_t *l = &m->layers[i];
        char shape[64];
        if (l->out.h == 1 && l->out.w == 1)
            snprintf(shape, sizeof(shape), "[%d]", l->out.c);
        else
            snprintf(shape, sizeof(shape), "[%d, %d, %d]", l->out.c, l->out.h, l->out.w);
        size_t n = layer_param_count(l);
        total += n;
        log_printf("%-16s %-15s %-16s %12zu\n", l->cfg->name,
                   l->relu_fused  ? "relu (fused)"
                   : l->add_fused ? "add (fused)"
                                  : layer_type_name(l->cfg->type),
                   shape, n);
    }
    log_printf("%-16s %-15s %-16s %12zu\n", "total", "", "", total);
}

/* ---- the tower function ---- */

/* Layer i's work is done by another layer, whose buffers it shares: a
 * fused relu or add. */
static bool done_elsewhere(const layer_t *l)
{
    return l->relu_fused || l->add_fused;
}

/* The layer whose buffers layer i uses: itself, or for a fused relu or add
 * the layer it is fused into. */
static int buffer_owner(const model_t *m, int i)
{
    while (done_elsewhere(&m->layers[i]))
        i = m->layers[i].add_fused ? m->layers[i].add_src : layer_input(m->layers[i].cfg, i, 0);
    return i;
}

/* The layers layer i reads when it runs: its inputs, and for a batchnorm
 * doing an add the add's other input too (-1: the model input). */
static int run_input_count(const layer_t *l)
{
    return l->n_in + (l->add_out ? 1 : 0);
}

static int run_input(const model_t *m, int i, int k)
{
    const layer_t *l = &m->layers[i];
    return k < l->n_in ? layer_input(l->cfg, i, k) : l->add_other;
}

/* ---- where activations stay in the backend's blocked layout ---- */

/* batchnorm, add and relu compute in their input's layout: both sides
 * blocked or neither. Pools read either and write NCHW or, from a blocked
 * input, blocked. */
static bool type_follows_input(layer_type t)
{
    return t == LAYER_BATCHNORM || t == LAYER_ADD || t == LAYER_RELU;
}

static bool blocked_out_needs_blocked_in(layer_type t)
{
    return type_follows_input(t) || t == LAYER_MAXPOOL || t == LAYER_AVGPOOL;
}

/* Layer l can read a blocked input: pools convert it to either layout;
 * convolutions, batchnorm, add, relu and global_avgpool read it over whole
 * blocks of 16 channels only (oneDNN has no fast kernel for a padded
 * blocked input; the model's element counts are NCHW's, equal only then);
 * the rest read NCHW. */
static bool reads_blocked(const layer_t *l)
{
    switch (l->cfg->type) {
    case LAYER_MAXPOOL:
    case LAYER_AVGPOOL:
        return true;
    case LAYER_CONV2D:
    case LAYER_BATCHNORM:
    case LAYER_ADD:
    case LAYER_RELU:
    case LAYER_GLOBAL_AVGPOOL:
        return l->in[0].c % TT_BLOCK == 0;
    default:
        return false;
    }
}

/* Whole blocks only: channels padded to 16 cost every element-wise pass
 * over the tensor (relu masks, pools) 16/C times the memory traffic, as
 * much as the reorder they save (LeNet's 6-filter conv, measured: no
 * gain). */
static bool writes_blocked(const layer_t *l)
{
    layer_type t = l->cfg->type;
    bool kind = t == LAYER_CONV2D || t == LAYER_MAXPOOL || t == LAYER_AVGPOOL ||
                type_follows_input(t);
    return kind && l->out.c % TT_BLOCK == 0;
}

/* blocked[i]: layer i's output in the blocked layout. Start from every
 * layer that can write it, then take it back from any whose readers cannot
 * read it, whose input-following readers stay NCHW, or that needs a blocked
 * input and has an NCHW one, until nothing changes. The last layer feeds
 * the loss: NCHW. */
static void choose_layouts(const model_t *m, bool backend_has_it, bool *blocked)
{
    int L = m->n_layers;
    for (int i = 0; i < L; i++) {
        const layer_t *l = &m->layers[i];
        blocked[i] = backend_has_it && i < L - 1 && writes_blocked(l);
        for (int k = 0; k < l->n_in && blocked_out_needs_blocked_in(l->cfg->type); k++)
            if (layer_input(l->cfg, i, k) < 0)
                blocked[i] = false;
    }
    for (bool changed = true; changed;) {
        changed = false;
        for (int i = 0; i < L; i++) {
            if (!blocked[i])
                continue;
            const layer_t *l = &m->layers[i];
            bool ok = true;
            for (int k = 0; k < l->n_in && blocked_out_needs_blocked_in(l->cfg->type); k++)
                ok = ok && blocked[layer_input(l->cfg, i, k)];
            for (int j = i + 1; j < L && ok; j++)
                for (int k = 0; k < m->layers[j].n_in; k++)
                    if (layer_input(m->layers[j].cfg, j, k) == i &&
                        (!reads_blocked(&m->layers[j]) ||
                         (type_follows_input(m->layers[j].cfg->type) && !blocked[j])))
                        ok = false;
            if (!ok) {
                blocked[i] = false;
                changed = true;
            }
        }
    }
}

/* Bytes of layer i's output for n samples in its layout in float32 (the
 * output itself, or its gradient, is half that where the backend keeps
 * blocked activations, or their gradients, in bf16). */
static size_t output_bytes(const layer_t *l, size_t n, bool blocked)
{
    size_t floats = blocked ? tt_blocked_floats((int)n, l->out.c, l->out.h * l->out.w)
                            : n * shape3_size(l->out);
    return floats * sizeof(float);
}

/* The buffer for a `want`-byte holder among the nb that are not busy: the
 * smallest that fits, else the largest (grown); a new one (nb grows) when
 * all are busy. */
static int pick_buffer(size_t *bytes, const bool *busy, int *nb, size_t want)
{
    int pick = -1;
    for (int b = 0; b < *nb; b++) {
        if (busy[b])
            continue;
        bool fits = bytes[b] >= want, pick_fits = pick >= 0 && bytes[pick] >= want;
        if (pick < 0 || (fits && (!pick_fits || bytes[b] < bytes[pick])) ||
            (!fits && !pick_fits && bytes[b] > bytes[pick]))
            pick = b;
    }
    if (pick < 0) {
        pick = (*nb)++;
        bytes[pick] = 0;
    }
    if (bytes[pick] < want)
        bytes[pick] = want;
    return pick;
}

/* Gradient buffers are shared by layers whose output gradients are never
 * live at once: backward runs the layers last to first, and the gradient at
 * layer o's output is live from the backward of its latest reader (which
 * writes it; the loss, for the last layer) until o's own backward has read
 * it. Interval by interval in backward order, each gradient takes a free
 * buffer (the smallest that fits, else the largest, grown), so a chain of
 * layers needs two or three buffers instead of one per layer (ResNet-20's
 * gradients went from 250 MB to the size of a few stage-1 outputs). A layer
 * nobody reads keeps a zeroed buffer of its own. Fills buf_of[layer] and
 * bytes[buffer]; returns the number of buffers, -1 when out of memory. */
static int plan_gradient_buffers(const model_t *m, const size_t *out_bytes, int *buf_of,
                                 size_t *bytes)
{
    int L = m->n_layers, nb = 0;
    int *first = malloc((size_t)L * sizeof(int));
    bool *busy = calloc((size_t)L, sizeof(bool));
    if (first == NULL || busy == NULL) {
        free(first);
        free(busy);
        return -1;
    }
    for (int i = 0; i < L; i++)
        first[i] = -1;
    first[buffer_owner(m, L - 1)] = L;
    for (int k = 0; k < L; k++) {
        if (done_elsewhere(&m->layers[k]))
            continue;
        for (int q = 0; q < run_input_count(&m->layers[k]); q++) {
            int src = run_input(m, k, q);
            if (src >= 0 && k > first[buffer_owner(m, src)])
                first[buffer_owner(m, src)] = k;
        }
    }
    for (int i = 0; i < L; i++)
        if (!done_elsewhere(&m->layers[i]) && first[i] < 0) { /* never written: private */
            bytes[nb] = out_bytes[i];
            busy[nb] = true;
            buf_of[i] = nb++;
        }
    for (int time = L; time >= 0; time--) {
        for (int o = 0; o < L; o++) {
            if (done_elsewhere(&m->layers[o]) || first[o] != time)
                continue;
            int pick = pick_buffer(bytes, busy, &nb, out_bytes[o]);
            busy[pick] = true;
            buf_of[o] = pick;
        }
        /* layer `time` has read its gradient: the buffer is free again */
        if (time < L && !done_elsewhere(&m->layers[time]) && first[time] >= 0)
            busy[buf_of[time]] = false;
    }
    free(first);
    free(busy);
    return nb;
}

/* Does layer i's own backward read its output? (relu masks by it; a
 * fused relu makes conv2d, batchnorm, dense and add mask by it too) */
static bool backward_reads_output(const layer_t *l)
{
    return l->relu_out || l->cfg->type == LAYER_RELU;
}

/* Does layer l's backward read its input x? (the weight gradient and
 * batchnorm's statistics; global_avgpool's counted too, to be safe) */
static bool backward_reads_input(const layer_t *l)
{
    layer_type t = l->cfg->type;
    return t == LAYER_CONV2D || t == LAYER_BATCHNORM || t == LAYER_DENSE ||
           t == LAYER_GLOBAL_AVGPOOL;
}

/* Layer i's output is read by forward passes only (a batchnorm feeding a
 * residual add, ResNet's bn2 and projection batchnorm): it is dead once
 * its last reader's forward has run, so such outputs can share buffers.
 * The last layer's output (the logits) is read by the loss and returned. */
static int transient_until(const model_t *m, int i)
{
    const layer_t *l = &m->layers[i];
    /* a batchnorm doing an add holds the add's output, read by the add's
     * readers (fuse_adds): never transient */
    if (i == m->n_layers - 1 || done_elsewhere(l) || l->add_out || backward_reads_output(l))
        return -1;
    int last = -1;
    for (int j = i + 1; j < m->n_layers; j++)
        for (int k = 0; k < m->layers[j].n_in; k++)
            if (layer_input(m->layers[j].cfg, j, k) == i) {
                if (m->layers[j].relu_fused || backward_reads_input(&m->layers[j]))
                    return -1;
                last = j;
            }
    return last;
}

/* TT_ACT_SHARING=0 turns the sharing off (the test of its bits); unset
 * or 1, on; anything else is a usage error (act_sharing_check). */
static bool act_sharing_on(void)
{
    return env_bit("TT_ACT_SHARING") != 0;
}

static int act_sharing_check(tt_err *err)
{
    if (env_bit("TT_ACT_SHARING") != ENV_OTHER)
        return 0;
    return err_set(err, TT_ERR_USAGE, "TT_ACT_SHARING=%.40s: use 0 or 1 (or unset it)",
                   getenv("TT_ACT_SHARING"));
}

/* Activation buffers shared by lifetime (the forward-only outputs above):
 * in forward order, each such output takes a buffer whose last holder's
 * last reader has run (the smallest that fits, else the largest, grown),
 * as plan_gradient_buffers does for gradients; every other output keeps a
 * buffer of its own (-1). ResNet-20 bf16: its nine such outputs share
 * one. Fills share_of[layer] and bytes[buffer]; returns the buffers. */
static int plan_shared_activations(const model_t *m, const size_t *act_bytes, int *share_of,
                                   size_t *bytes, int *free_after)
{
    int L = m->n_layers, nb = 0;
    bool *held = calloc((size_t)L + 1, sizeof(bool)); /* out of memory: no sharing */
    bool on = act_sharing_on() && held != NULL;
    for (int i = 0; i < L; i++) {
        share_of[i] = -1;
        int until = on ? transient_until(m, i) : -1;
        if (until < 0)
            continue;
        for (int b = 0; b < nb; b++) /* held while its holder is still read */
            held[b] = free_after[b] >= i;
        int pick = pick_buffer(bytes, held, &nb, act_bytes[i]);
        free_after[pick] = until;
        share_of[i] = pick;
    }
    free(held);
    return nb;
}

static void tower_plan_free(int *buf_of, int *grad_of, int *free_after, size_t *grad_bytes,
                            size_t *out_bytes, size_t *act_bytes)
{
    free(buf_of);
    free(grad_of);
    free(free_after);
    free(grad_bytes);
    free(out_bytes);
    free(act_bytes);
}

/* The tower's per-layer tables (tower_free frees them); false when out of
 * memory. */
static bool tower_tables_alloc(tower_t *t, int L)
{
    t->blocked = calloc((size_t)L, sizeof(bool));
    t->act = calloc((size_t)L, sizeof(float *));
    t->dact = calloc((size_t)L, sizeof(float *));
    t->grad_bufs = calloc((size_t)L, sizeof(float *));
    t->state = calloc((size_t)L, sizeof(void *));
    t->grad_written = calloc((size_t)L, sizeof(bool));
    t->act_bufs = calloc((size_t)L, sizeof(float *));
    t->act_shared = calloc((size_t)L, sizeof(bool));
    return t->blocked && t->act && t->dact && t->grad_bufs && t->state && t->grad_written &&
           t->act_bufs && t->act_shared;
}

/* Layer i's workspace for up to max_n images in the layouts the tower
 * chose for its input and output (t->blocked). */
static size_t layer_ws_bytes(const tower_t *t, int i, int max_n)
{
    const layer_t *l = &t->model->layers[i];
    if (l->ops->ws_bytes == NULL)
        return 0;
    int src = layer_input(l->cfg, i, 0);
    return l->ops->ws_bytes(l, t->be, max_n, src >= 0 && t->blocked[src], t->blocked[i]);
}

/* Each layer's output and gradient buffers (its own, a shared one, or the
 * layer's that does its work), its state, and the tower's workspace and
 * scratch (the largest any layer needs); false when out of memory */
static bool tower_layer_buffers(tower_t *t, const int *grad_of, const int *buf_of,
                                const size_t *act_bytes, const size_t *out_bytes)
{
    const model_t *m = t->model;
    backend_t *be = t->be;
    int max_n = t->max_n;
    size_t ws = 0, scratch = 0;
    for (int i = 0; i < m->n_layers; i++) {
        const layer_t *l = &m->layers[i];
        size_t out = out_bytes[i];
        if (m->consumers[i] > 1 && out > scratch)
            scratch = out;
        if (done_elsewhere(l)) { /* the buffers of the layer doing its work */
            int src = l->add_fused ? l->add_src : layer_input(l->cfg, i, 0);
            t->act[i] = t->act[src];
            t->dact[i] = t->dact[src];
            continue;
        }
        t->dact[i] = t->grad_bufs[grad_of[i]];
        t->act_shared[i] = buf_of[i] >= 0;
        t->act[i] = t->act_shared[i] ? t->act_bufs[buf_of[i]] : be->alloc(be, act_bytes[i]);
        if (!t->act[i])
            return false;
        size_t sb = l->ops->state_bytes ? l->ops->state_bytes(l, max_n) : 0;
        if (sb > 0 && (t->state[i] = be->alloc(be, sb)) == NULL)
            return false;
        size_t w = layer_ws_bytes(t, i, max_n);
        if (w > ws)
            ws = w;
    }
    if (ws > 0 && (t->ws = be->alloc(be, ws)) == NULL)
        return false;
    if (scratch > 0 && (t->dlogits_scratch = be->alloc(be, scratch)) == NULL)
        return false;
    return true;
}

int tower_create(const model_t *m, backend_t *be, int max_n, tower_t *t, tt_err *err)
{
    memset(t, 0, sizeof(*t));
    if (act_sharing_check(err) != 0)
        return -1;
    t->model = m;
    t->be = be;
    t->max_n = max_n;
    t->loss_scale = 1.0f;
    size_t n = (size_t)max_n;
    int L = m->n_layers;
    int *buf_of = malloc((size_t)L * sizeof(int));
    size_t *grad_bytes = malloc((size_t)L * sizeof(size_t));
    size_t *out_bytes = malloc((size_t)L * sizeof(size_t));
    bool tables = tower_tables_alloc(t, L);
    size_t *act_bytes = malloc((size_t)L * sizeof(size_t));
    int *grad_of = malloc((size_t)L * sizeof(int)), *free_after = malloc((size_t)L * sizeof(int));
    if (!tables || !grad_of || !free_after || !buf_of || !grad_bytes || !out_bytes || !act_bytes)
        goto oom;
    /* buf_of and grad_bytes: first the gradients' plan, then (grad_of
     * keeping the first) the activations' */
    choose_layouts(m, be->blocked_layout, t->blocked);
    for (int i = 0; i < L; i++) { /* out_bytes: the gradient's */
        size_t f32 = output_bytes(&m->layers[i], n, t->blocked[i]);
        act_bytes[i] = t->blocked[i] && be->blocked_bf16 ? f32 / 2 : f32;
        out_bytes[i] = t->blocked[i] && be->blocked_bf16_grads ? f32 / 2 : f32;
    }
    t->params = be->alloc(be, (m->n_floats > 0 ? m->n_floats : 1) * sizeof(float));
    t->grads = be->alloc(be, (m->n_trainable > 0 ? m->n_trainable : 1) * sizeof(float));
    if (!be->host_memory) {
        t->input = be->alloc(be, n * shape3_size(m->input) * sizeof(float));
        t->labels = be->alloc(be, n * sizeof(int32_t));
        if (!t->input || !t->labels)
            goto oom;
    }
    t->batch_x = t->input;
    t->batch_y = t->labels;
    if (!t->params || !t->grads)
        goto oom;
    /* mixed precision on a device: its weights' 16-bit copies, made once
     * per step (tower_step) */
    if (be->dev != NULL && be->dev->weights_add(be, t->params, m->n_trainable, err) != 0) {
        tower_plan_free(buf_of, grad_of, free_after, grad_bytes, out_bytes, act_bytes);
        tower_free(t);
        return -1;
    }
    t->n_grad_bufs = plan_gradient_buffers(m, out_bytes, buf_of, grad_bytes);
    if (t->n_grad_bufs < 0) {
        t->n_grad_bufs = 0;
        goto oom;
    }
    for (int b = 0; b < t->n_grad_bufs; b++)
        if ((t->grad_bufs[b] = be->alloc(be, grad_bytes[b])) == NULL)
            goto oom;
    memcpy(grad_of, buf_of, (size_t)L * sizeof(int));
    t->n_act_bufs = plan_shared_activations(m, act_bytes, buf_of, grad_bytes, free_after);
    for (int b = 0; b < t->n_act_bufs; b++)
        if ((t->act_bufs[b] = be->alloc(be, grad_bytes[b])) == NULL)
            goto oom;
    if (!tower_layer_buffers(t, grad_of, buf_of, act_bytes, out_bytes))
        goto oom;
    tower_plan_free(buf_of, grad_of, free_after, grad_bytes, out_bytes, act_bytes);
    return 0;
oom:
    tower_plan_free(buf_of, grad_of, free_after, grad_bytes, out_bytes, act_bytes);
    tower_free(t);
    return err_set(err, TT_ERR_RUNTIME, "out of memory creating a tower for batch %d", max_n);
}

void tower_free(tower_t *t)
{
    backend_t *be = t->be;
    if (be == NULL)
        return;
    const model_t *m = t->model;
    for (int i = 0; m && i < m->n_layers; i++) {
        if (done_elsewhere(&m->layers[i]))
            continue; /* shares another layer's buffers */
        if (t->act && !(t->act_shared && t->act_shared[i]))
            be->free(be, t->act[i]);
        if (t->state)
            be->free(be, t->state[i]);
    }
    for (int b = 0; t->grad_bufs && b < t->n_grad_bufs; b++)
        be->free(be, t->grad_bufs[b]);
    for (int b = 0; t->act_bufs && b < t->n_act_bufs; b++)
        be->free(be, t->act_bufs[b]);
    if (be->dev != NULL && t->params != NULL)
        be->dev->weights_remove(be, t->params);
    be->free(be, t->params);
    be->free(be, t->grads);
    be->free(be, t->input);
    be->free(be, t->labels);
    be->free(be, t->ws);
    be->free(be, t->dlogits_scratch);
    free(t->act);
    free(t->act_bufs);
    free(t->act_shared);
    free(t->dact);
    free(t->grad_bufs);
    free(t->blocked);
    free(t->state);
    free(t->grad_written);
    memset(t, 0, sizeof(*t));
}

void tower_set_params(tower_t *t, const float *host_block)
{
    t->be->upload(t->be, t->params, host_block, t->model->n_floats * sizeof(float));
}

void tower_get_params(const tower_t *t, float *host_block)
{
    t->be->download(t->be, host_block, t->params, t->model->n_floats * sizeof(float));
}

void tower_load_batch(tower_t *t, int n, const float *x, const int32_t *y)
{
    if (t->be->host_memory) { /* the 400 KB copy took 2-4% of an MLP step */
        t->batch_x = x;
        t->batch_y = y;
        return;
    }
    t->be->upload(t->be, t->input, x, (size_t)n * shape3_size(t->model->input) * sizeof(float));
    t->be->upload(t->be, t->labels, y, (size_t)n * sizeof(int32_t));
}

/* Fills the parameter and gradient views of layer i. */
static void bind_params(tower_t *t, int i, layer_call *c)
{
    const model_t *m = t->model;
    const layer_t *l = &m->layers[i];
    for (int j = 0; j < l->n_params; j++) {
        size_t off = m->param_offset[i * LAYER_MAX_PARAMS + j];
        c->params[j] = t->params + off;
        c->grads[j] = l->params[j].trainable ? t->grads + off : NULL;
    }
}

uint64_t tower_layer_seed(uint64_t seed, int i)
{
    return rng_hash3(seed, 0xd40u, (uint64_t)i);
}

/* The call of layer i on this tower: inputs, output, buffers, parameters. */
static layer_call layer_call_for(tower_t *t, int i, int n, bool training, uint64_t seed)
{
    const layer_t *l = &t->model->layers[i];
    layer_call c;
    memset(&c, 0, sizeof(c));
    c.be = t->be;
    c.n = n;
    c.training = training;
    c.seed = tower_layer_seed(seed, i);
    c.seed_dev = t->step_seeds != NULL ? t->step_seeds + i : NULL;
    for (int k = 0; k < l->n_in; k++) {
        int src = layer_input(l->cfg, i, k);
        c.x[k] = src < 0 ? t->batch_x : t->act[src];
        c.blocked_x[k] = src >= 0 && t->blocked[src];
    }
    if (l->add_out) { /* the fused add's other input */
        int r = l->add_other;
        c.x[l->n_in] = r < 0 ? t->batch_x : t->act[r];
        c.blocked_x[l->n_in] = r >= 0 && t->blocked[r];
    }
    c.y = t->act[i];
    c.blocked_y = t->blocked[i];
    c.ws = t->ws;
    c.state = t->state[i];
    bind_params(t, i, &c);
    return c;
}

/* A layer span's args (timeline): the shapes of its call and its FLOPs;
 * obj is its layer_cost, n the batch. */
static void shape_args(trace_text *b, const char *key, int n, shape3 s)
{
    trace_text_printf(b, "\"%s\": [%d, %d, %d, %d], ", key, n, s.c, s.h, s.w);
}

static void layer_args(trace_text *b, const layer_cost *c, int64_t n, double flops)
{
    shape_args(b, "input", (int)n, c->layer->in[0]);
    shape_args(b, "output", (int)n, c->layer->out);
    trace_text_printf(b, "\"type\": \"%s\", \"flops\": %.0f",
                      layer_type_name(c->layer->cfg->type), flops * (double)n);
}

static void layer_args_forward(trace_text *b, const void *obj, int64_t n)
{
    layer_args(b, obj, n, ((const layer_cost *)obj)->fwd);
}

static void layer_args_backward(trace_text *b, const void *obj, int64_t n)
{
    layer_args(b, obj, n, ((const layer_cost *)obj)->bwd);
}

/* Every layer's forward, in order. The timeline: each layer's span begins
 * where the last one's ended (nothing is queued between two layers), after
 * the first. */
static void tower_forward(tower_t *t, int n, bool training, uint64_t seed)
{
    const model_t *m = t->model;
    bool first = true;
    for (int i = 0; i < m->n_layers; i++) {
        if (done_elsewhere(&m->layers[i]))
            continue; /* done by the layer it is fused into */
        layer_call c = layer_call_for(t, i, n, training, seed);
        int64_t t0 = first ? trace_begin() : trace_continue();
        first = false;
        m->layers[i].ops->forward(&m->layers[i], &c);
        if (t0 != 0)
            trace_end_full(TRACE_ROW_NONE, t0, TRACE_CAT_FORWARD, m->layers[i].cfg->name, -1,
                           "forward", layer_args_forward, &m->costs[i], n);
    }
}

/* Layer i's backward. An output read by several layers gets the sum of
 * their gradients: the first consumer met (the latest layer) overwrites
 * (done[src] is then set), the others add through the scratch buffer. */
static void layer_backward(tower_t *t, int i, int n, uint64_t seed, bool *done)
{
    const model_t *m = t->model;
    const layer_t *l = &m->layers[i];
    backend_t *be = t->be;
    layer_call c = layer_call_for(t, i, n, true, seed);
    c.dy = t->dact[i];
    int accumulate[LAYER_MAX_INPUTS] = {0}, n_acc = 0;
    for (int k = 0; k < l->n_in; k++) {
        int src = layer_input(l->cfg, i, k);
        if (src < 0) {
            c.dx[k] = NULL; /* no gradient for the data */
        } else if (!done[src]) {
            c.dx[k] = t->dact[src];
            done[src] = true;
        } else {
            c.dx[k] = t->dlogits_scratch;
            accumulate[k] = 1;
            n_acc++;
        }
    }
    if (l->add_out && l->add_other >= 0) {
        /* the fused add's gradient of its other input: written, or
         * added by the batchnorm itself where another reader wrote first */
        c.dx[l->n_in] = t->dact[l->add_other];
        c.dx_accumulate[l->n_in] = done[l->add_other];
        done[l->add_other] = true;
    }
    /* Several inputs accumulating at once would share the scratch buffer:
     * run them one at a time (only `add` has several inputs). */
    for (int k = 0; k < l->n_in; k++) {
        if (n_acc > 1 || k == 0) {
            layer_call one = c;
            for (int q = 0; n_acc > 1 && q < l->n_in; q++)
                if (q != k)
                    one.dx[q] = NULL;
            l->ops->backward(l, &one);
        }
        if (accumulate[k]) {
            int src = layer_input(l->cfg, i, k);
            layer_grad_accumulate(be, t->blocked[src], (size_t)n * shape3_size(m->layers[src].out),
                                  t->dlogits_scratch, t->dact[src]);
        }
    }
}

/* A step of the tower begins or ends on a device: its weights' 16-bit
 * copies are made at their first use after the begin and read until the
 * end (backend.h, weights_step); the layers never write their weights. */
static void tower_weights_step(tower_t *t, bool begin)
{
    if (t->be->dev != NULL)
        t->be->dev->weights_step(t->be, t->params, begin);
}

const float *tower_step(tower_t *t, int n, bool training, bool backward, uint64_t seed)
{
    const model_t *m = t->model;
    backend_t *be = t->be;
    int last = m->n_layers - 1;
    tower_weights_step(t, true);
    tower_forward(t, n, training, seed);

    /* queued: a device computes the loss while the host queues backward,
     * and the host reads it at the end (backend.h, loss_read) */
    be->softmax_xent(be, n, m->cfg->classes, t->act[last], t->batch_y, m->cfg->label_smoothing,
                     backward ? t->dact[last] : NULL);
    if (!backward) {
        tower_weights_step(t, false);
        be->loss_read(be, &t->loss_sum, &t->correct);
        return t->act[last];
    }
    if (t->loss_scale != 1.0f)
        be->scale(be, (size_t)n * (size_t)m->cfg->classes, t->loss_scale, t->dact[last]);

    /* Reverse order; done[j]: layer j's output gradient has been written */
    bool *done = t->grad_written;
    memset(done, 0, (size_t)m->n_layers * sizeof(bool));
    done[last] = true;
    bool chained = false; /* the last layer's span ended with nothing after it */
    for (int i = last; i >= 0; i--) {
        const layer_t *l = &m->layers[i];
        if (done_elsewhere(l)) {
            /* its gradient already sits in the dact it shares with the
             * layer doing its work, which masks it and passes it on */
            done[l->add_fused ? l->add_src : layer_input(l->cfg, i, 0)] = true;
            continue;
        }
        int64_t t0 = chained ? trace_continue() : trace_begin();
        layer_backward(t, i, n, seed, done);
        if (t0 != 0)
            trace_end_full(TRACE_ROW_NONE, t0, TRACE_CAT_BACKWARD, l->cfg->name, -1, "backward",
                           layer_args_backward, &m->costs[i], n);
        chained = true;
        if (t->grad_ready != NULL && l->n_params > 0 && l->params[0].trainable)
            chained = !t->grad_ready(t->grad_ready_arg, m->param_offset[i * LAYER_MAX_PARAMS]);
    }
    tower_weights_step(t, false);
    be->loss_read(be, &t->loss_sum, &t->correct);
    return t->act[last];
}
