#include "optim/optimizer.h"

#include <string.h>

int optimizer_create(const optimizer_cfg *cfg, backend_t *be, size_t count, optimizer_t *opt,
                     tt_err *err)
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
        opt->n_slots = cfg->momentum != 0.0f ? 1 : 0;
        opt->slot_names[0] = "momentum";
        break;
    case OPT_ADAM:
        opt->n_slots = 2;
        opt->slot_names[0] = "exp_avg";
        opt->slot_names[1] = "exp_avg_sq";
        break;
    }
    for (int i = 0; i < opt->n_slots; i++) {
        opt->slots[i] = be->alloc(be, (count > 0 ? count : 1) * sizeof(float));
        if (opt->slots[i] == NULL) {
            optimizer_free(opt);
            return err_set(err, TT_ERR_RUNTIME, "out of memory for optimizer state");
        }
    }
    return 0;
}

void optimizer_free(optimizer_t *opt)
{
    for (int i = 0; i < opt->n_slots; i++)
        if (opt->slots[i] != NULL)
            opt->be->free(opt->be, opt->slots[i]);
    memset(opt, 0, sizeof(*opt));
}

void optimizer_apply_range(optimizer_t *opt, backend_t *be, float *params, const float *grads,
                           size_t lo, size_t hi, int64_t step)
{
    const optimizer_cfg *c = &opt->cfg;
    size_t n = hi - lo;
    float *w = params + lo;
    const float *g = grads + lo;
    switch (c->type) {
    case OPT_SGD:
    case OPT_MOMENTUM: {
        float momentum = c->type == OPT_MOMENTUM ? c->momentum : 0.0f;
        be->sgd_step(be, n, c->learning_rate, momentum, c->nesterov, c->weight_decay,
                     !opt->has_state, w, g, opt->n_slots ? opt->slots[0] + lo : NULL);
        break;
    }
    case OPT_ADAM:
        be->adam_step(be, n, c->learning_rate, c->beta1, c->beta2, c->epsilon, c->weight_decay,
                      step, w, g, opt->slots[0] + lo, opt->slots[1] + lo);
        break;
    }
}

void optimizer_mark_stepped(optimizer_t *opt)
{
    opt->has_state = true;
}

void optimizer_apply(optimizer_t *opt, float *params, const float *grads, int64_t step)
{
    optimizer_apply_range(opt, opt->be, params, grads, 0, opt->count, step);
    optimizer_mark_stepped(opt);
}
