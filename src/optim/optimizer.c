#include "optim/optimizer.h"

#include <fnmatch.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/math.h"

/* AdamW's factor on the weights before the update, 1 - lr wd (computed in
 * double); the by-value and the captured step use this one. */
static float adamw_decay(float lr, float wd)
{
    return (float)(1.0 - (double)lr * (double)wd);
}

static bool param_excluded(const optimizer_cfg *cfg, const char *name)
{
    for (int i = 0; i < cfg->n_wd_exclude; i++)
        if (fnmatch(cfg->wd_exclude[i], name, 0) == 0)
            return true;
    return false;
}

/* The segments (optimizer.h): one per parameter for LARS, else the runs of
 * equal decay, so without exclusions one segment over the whole block and
 * the update is one pass, as before exclusions existed. */
static int make_segments(optimizer_t *opt, const opt_param *params, int n)
{
    size_t room = (size_t)(n > 0 ? n : 1);
    opt->segs = calloc(room, sizeof(opt_segment));
    if (opt->segs == NULL)
        return -1;
    if (opt->cfg.type == OPT_LARS && /* lars_norms' two ranges a segment */
        ((opt->norm_x = calloc(2 * room, sizeof(*opt->norm_x))) == NULL ||
         (opt->norm_n = calloc(2 * room, sizeof(size_t))) == NULL ||
         (opt->norm_out = calloc(2 * room, sizeof(double))) == NULL))
        return -1;
    if (n == 0) {
        opt->segs[0] = (opt_segment){.lo = 0, .hi = opt->count, .decay = true};
        opt->n_segs = 1;
        return 0;
    }
    bool per_param = opt->cfg.type == OPT_LARS;
    for (int i = 0; i < n; i++) {
        bool decay = !param_excluded(&opt->cfg, params[i].name);
        size_t lo = params[i].offset, hi = lo + params[i].count;
        opt_segment *last = opt->n_segs > 0 ? &opt->segs[opt->n_segs - 1] : NULL;
        if (!per_param && last != NULL && last->decay == decay && last->hi == lo)
            last->hi = hi;
        else
            opt->segs[opt->n_segs++] = (opt_segment){.lo = lo, .hi = hi, .decay = decay};
    }
    return 0;
}

int optimizer_create(const optimizer_cfg *cfg, backend_t *be, size_t count,
                     const opt_param *params, int n, optimizer_t *opt, tt_err *err)
{
    memset(opt, 0, sizeof(*opt));
    opt->cfg = *cfg;
    opt->be = be;
    opt->count = count;
    switch (cfg->type) {
    case OPT_SGD:
        opt->n_slots = 0;
        break;
    case OPT_MOMENTUM:
    case OPT_LARS:
        opt->n_slots = cfg->momentum != 0.0f ? 1 : 0;
        opt->slot_names[0] = "momentum";
        break;
    case OPT_ADAM:
    case OPT_ADAMW:
        opt->n_slots = 2;
        opt->slot_names[0] = "exp_avg";
        opt->slot_names[1] = "exp_avg_sq";
        break;
    }
    size_t bytes = (count > 0 ? count : 1) * sizeof(float);
    for (int i = 0; i < opt->n_slots; i++)
        if ((opt->slots[i] = be->alloc(be, bytes)) == NULL)
            goto oom;
    if (cfg->type == OPT_LARS && (opt->scratch = be->alloc(be, bytes)) == NULL)
        goto oom;
    if (make_segments(opt, params, n) != 0)
        goto oom;
    return 0;
oom:
    optimizer_free(opt);
    return err_set(err, TT_ERR_RUNTIME, "out of memory for optimizer state");
}

void optimizer_free(optimizer_t *opt)
{
    for (int i = 0; i < opt->n_slots; i++)
        if (opt->slots[i] != NULL)
            opt->be->free(opt->be, opt->slots[i]);
    if (opt->scratch != NULL)
        opt->be->free(opt->be, opt->scratch);
    free(opt->segs);
    free(opt->norm_x);
    free(opt->norm_n);
    free(opt->norm_out);
    memset(opt, 0, sizeof(*opt));
}

bool optimizer_needs_whole(const optimizer_t *opt)
{
    return opt->cfg.type == OPT_LARS || opt->cfg.clip_global_norm > 0.0f;
}

/* torch.nn.utils.clip_grad_norm_: the norm over the whole block, then every
 * gradient times min(1, clip / (norm + 1e-6)) (torch multiplies by the
 * clamped factor, 1 included). */
static void clip_gradients(optimizer_t *opt, backend_t *be, float *grads)
{
    double norm = sqrt(be->sumsq(be, opt->count, grads));
    opt->grad_norm = norm;
    float coef = (float)((double)opt->cfg.clip_global_norm / (norm + 1e-6));
    be->scale(be, opt->count, coef < 1.0f ? coef : 1.0f, grads);
}

/* Whether LARS adapts segment sg of an update of [lo, hi): it lies inside,
 * and weight decay applies to it. */
static bool lars_adapts(const optimizer_t *opt, const opt_segment *sg, size_t lo, size_t hi)
{
    return sg->lo >= lo && sg->hi <= hi && sg->decay && opt->cfg.weight_decay != 0.0f;
}

/* LARS: |w|^2 and |g|^2 of every adapted parameter in [lo, hi), in one
 * sumsq_each: on a GPU one read back a step instead of two a parameter. */
static void lars_norms(optimizer_t *opt, backend_t *be, const float *params, const float *grads,
                       size_t lo, size_t hi)
{
    int k = 0;
    for (int i = 0; i < opt->n_segs; i++) {
        const opt_segment *sg = &opt->segs[i];
        if (!lars_adapts(opt, sg, lo, hi))
            continue;
        opt->norm_x[2 * k] = params + sg->lo;
        opt->norm_x[2 * k + 1] = grads + sg->lo;
        opt->norm_n[2 * k] = opt->norm_n[2 * k + 1] = sg->hi - sg->lo;
        k++;
    }
    if (k > 0)
        be->sumsq_each(be, 2 * k, opt->norm_x, opt->norm_n, opt->norm_out);
    k = 0;
    for (int i = 0; i < opt->n_segs; i++) {
        opt_segment *sg = &opt->segs[i];
        if (!lars_adapts(opt, sg, lo, hi))
            continue;
        sg->w_sumsq = opt->norm_out[2 * k];
        sg->g_sumsq = opt->norm_out[2 * k + 1];
        k++;
    }
}

/* LARS on one parameter w[0, n) (SPEC: timm.optim.Lars with trust_clip and
 * always_adapt false): g' = (g + wd w) r with the trust ratio
 * r = tc |w| / (|g| + wd |w| + eps) (1 where |w| or |g| is 0), into the
 * scratch block; then momentum SGD on g' without weight decay. The norms
 * are the segment's, from lars_norms. */
static void lars_segment(optimizer_t *opt, backend_t *be, float *w, const float *g, float *buf,
                         float *gs, size_t n, const opt_segment *sg)
{
    const optimizer_cfg *c = &opt->cfg;
    float momentum = c->momentum;
    if (!sg->decay || c->weight_decay == 0.0f) { /* no adaptation */
        be->sgd_step(be, n, c->learning_rate, momentum, c->nesterov, 0.0f, !opt->has_state, w, g,
                     buf);
        return;
    }
    double wn = sqrt(sg->w_sumsq), gn = sqrt(sg->g_sumsq);
    double r = wn > 0.0 && gn > 0.0
                   ? (double)c->trust_coefficient * wn /
                         (gn + (double)c->weight_decay * wn + (double)c->epsilon)
                   : 1.0;
    be->copy(be, gs, g, n * sizeof(float));
    be->axpy(be, n, c->weight_decay, w, gs);
    be->scale(be, n, (float)r, gs);
    be->sgd_step(be, n, c->learning_rate, momentum, c->nesterov, 0.0f, !opt->has_state, w, gs,
                 buf);
}

/* Segment part [lo, hi) of the block (a whole parameter for LARS). */
static void apply_part(optimizer_t *opt, backend_t *be, float *params, const float *grads,
                       size_t lo, size_t hi, const opt_segment *sg, int64_t step)
{
    bool decay = sg->decay;
    const optimizer_cfg *c = &opt->cfg;
    size_t n = hi - lo;
    float *w = params + lo;
    const float *g = grads + lo;
    float *slot0 = opt->n_slots > 0 ? opt->slots[0] + lo : NULL;
    float wd = decay ? c->weight_decay : 0.0f;
    switch (c->type) {
    case OPT_SGD:
    case OPT_MOMENTUM: {
        float momentum = c->type == OPT_MOMENTUM ? c->momentum : 0.0f;
        if (opt->vars != NULL)
            be->sgd_step_vars(be, n, opt->vars, momentum, c->nesterov, wd, w, g, slot0);
        else
            be->sgd_step(be, n, c->learning_rate, momentum, c->nesterov, wd, !opt->has_state, w,
                         g, slot0);
        break;
    }
    case OPT_ADAM:
    case OPT_ADAMW: /* torch.optim.AdamW: p *= 1 - lr wd, then Adam without decay */
        if (c->type == OPT_ADAMW && wd != 0.0f) {
            if (opt->vars != NULL)
                be->decay_vars(be, n, opt->vars, w);
            else
                be->scale(be, n, adamw_decay(c->learning_rate, wd), w);
        }
        if (c->type == OPT_ADAMW)
            wd = 0.0f;
        if (opt->vars != NULL)
            be->adam_step_vars(be, n, opt->vars, c->beta1, c->beta2, c->epsilon, wd, w, g, slot0,
                               opt->slots[1] + lo);
        else
            be->adam_step(be, n, c->learning_rate, c->beta1, c->beta2, c->epsilon, wd, step, w,
                          g, slot0, opt->slots[1] + lo);
        break;
    case OPT_LARS:
        lars_segment(opt, be, w, g, slot0, opt->scratch + lo, n, sg);
        break;
    }
}

void optimizer_apply_range(optimizer_t *opt, backend_t *be, float *params, float *grads,
                           size_t lo, size_t hi, int64_t step)
{
    if (lo == 0 && hi == opt->count && opt->cfg.clip_global_norm > 0.0f)
        clip_gradients(opt, be, grads);
    if (opt->cfg.type == OPT_LARS)
        lars_norms(opt, be, params, grads, lo, hi);
    for (int i = 0; i < opt->n_segs; i++) {
        size_t a = opt->segs[i].lo > lo ? opt->segs[i].lo : lo;
        size_t b = opt->segs[i].hi < hi ? opt->segs[i].hi : hi;
        if (a < b)
            apply_part(opt, be, params, grads, a, b, &opt->segs[i], step);
    }
}

void optimizer_mark_stepped(optimizer_t *opt)
{
    opt->has_state = true;
}

void optimizer_step_vars(const optimizer_t *opt, int64_t step, backend_step_vars *v)
{
    const optimizer_cfg *c = &opt->cfg;
    /* apply_part's values: the decay as AdamW's scale, the bias
     * corrections as the backends' tt_adam_make */
    tt_adam_consts a = tt_adam_make(c->learning_rate, c->beta1, c->beta2, c->epsilon, 0.0f, step);
    *v = (backend_step_vars){
        .lr = c->learning_rate,
        .decay = adamw_decay(c->learning_rate, c->weight_decay),
        .first_step = opt->has_state ? 0 : 1,
        .adam_step_size = a.step_size,
        .adam_bc2_sqrt = a.bias_correction2_sqrt,
        .step = step,
    };
}

bool optimizer_capturable(const optimizer_t *opt, const backend_t *be)
{
    return !optimizer_needs_whole(opt) && be->sgd_step_vars != NULL &&
           be->adam_step_vars != NULL && be->decay_vars != NULL &&
           be->dropout_forward_vars != NULL;
}

void optimizer_apply(optimizer_t *opt, float *params, float *grads, int64_t step)
{
    optimizer_apply_range(opt, opt->be, params, grads, 0, opt->count, step);
    optimizer_mark_stepped(opt);
}
