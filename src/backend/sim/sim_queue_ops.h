/* sim_queue_ops.h - the simulated GPU's operations queued in order on the
 * tower's queue (sim_queue.c): each captures its arguments by value (a
 * window_desc too: callers keep it on their stack) and returns at once, as
 * a kernel launch does; the queue's worker thread runs the operation
 * (sim_backend.c's run_<op>, the arithmetic) later. Included once, by
 * sim_backend.c, after the run_<op> functions. One block per operation,
 * each a mechanical transcription of backend.h's prototype. */

typedef struct {
    int n;
    int in;
    int out;
    const float *x;
    const float *w;
    const float *b;
    bool relu;
    float *y;
} q_dense_forward_args;

static void q_dense_forward_run(backend_t *be, void *p)
{
    q_dense_forward_args *a = p;
    run_dense_forward(be, a->n, a->in, a->out, a->x, a->w, a->b, a->relu, a->y);
}

static void sim_dense_forward(backend_t *be, int n, int in, int out, const float *x, const float *w,
                              const float *b, bool relu, float *y)
{
    q_dense_forward_args q = {n, in, out, x, w, b, relu, y};
    sim_enqueue(be, q_dense_forward_run, &q, sizeof(q));
}

typedef struct {
    int n;
    int in;
    int out;
    const float *x;
    const float *w;
    const float *y;
    bool relu;
    float *dy;
    float *dx;
    float *dw;
    float *db;
} q_dense_backward_args;

static void q_dense_backward_run(backend_t *be, void *p)
{
    q_dense_backward_args *a = p;
    run_dense_backward(be, a->n, a->in, a->out, a->x, a->w, a->y, a->relu, a->dy, a->dx, a->dw,
                       a->db);
}

static void sim_dense_backward(backend_t *be, int n, int in, int out, const float *x,
                               const float *w, const float *y, bool relu, float *dy, float *dx,
                               float *dw, float *db)
{
    q_dense_backward_args q = {n, in, out, x, w, y, relu, dy, dx, dw, db};
    sim_enqueue(be, q_dense_backward_run, &q, sizeof(q));
}

typedef struct {
    window_desc d;
    const float *x;
    const float *w;
    const float *b;
    bool relu;
    float *y;
    void *ws;
} q_conv_forward_args;

static void q_conv_forward_run(backend_t *be, void *p)
{
    q_conv_forward_args *a = p;
    run_conv_forward(be, &a->d, a->x, a->w, a->b, a->relu, a->y, a->ws);
}

static void sim_conv_forward(backend_t *be, const window_desc *d, const float *x, const float *w,
                             const float *b, bool relu, float *y, void *ws)
{
    q_conv_forward_args q = {*d, x, w, b, relu, y, ws};
    sim_enqueue(be, q_conv_forward_run, &q, sizeof(q));
}

typedef struct {
    window_desc d;
    const float *x;
    const float *w;
    const float *y;
    bool relu;
    float *dy;
    float *dx;
    float *dw;
    float *db;
    void *ws;
} q_conv_backward_args;

static void q_conv_backward_run(backend_t *be, void *p)
{
    q_conv_backward_args *a = p;
    run_conv_backward(be, &a->d, a->x, a->w, a->y, a->relu, a->dy, a->dx, a->dw, a->db, a->ws);
}

static void sim_conv_backward(backend_t *be, const window_desc *d, const float *x, const float *w,
                              const float *y, bool relu, float *dy, float *dx, float *dw, float *db,
                              void *ws)
{
    q_conv_backward_args q = {*d, x, w, y, relu, dy, dx, dw, db, ws};
    sim_enqueue(be, q_conv_backward_run, &q, sizeof(q));
}

typedef struct {
    window_desc d;
    const float *x;
    float *y;
    int32_t *mask;
} q_maxpool_forward_args;

static void q_maxpool_forward_run(backend_t *be, void *p)
{
    q_maxpool_forward_args *a = p;
    run_maxpool_forward(be, &a->d, a->x, a->y, a->mask);
}

static void sim_maxpool_forward(backend_t *be, const window_desc *d, const float *x, float *y,
                                int32_t *mask)
{
    q_maxpool_forward_args q = {*d, x, y, mask};
    sim_enqueue(be, q_maxpool_forward_run, &q, sizeof(q));
}

typedef struct {
    window_desc d;
    const float *dy;
    const int32_t *mask;
    float *dx;
} q_maxpool_backward_args;

static void q_maxpool_backward_run(backend_t *be, void *p)
{
    q_maxpool_backward_args *a = p;
    run_maxpool_backward(be, &a->d, a->dy, a->mask, a->dx);
}

static void sim_maxpool_backward(backend_t *be, const window_desc *d, const float *dy,
                                 const int32_t *mask, float *dx)
{
    q_maxpool_backward_args q = {*d, dy, mask, dx};
    sim_enqueue(be, q_maxpool_backward_run, &q, sizeof(q));
}

typedef struct {
    window_desc d;
    const float *x;
    float *y;
} q_avgpool_forward_args;

static void q_avgpool_forward_run(backend_t *be, void *p)
{
    q_avgpool_forward_args *a = p;
    run_avgpool_forward(be, &a->d, a->x, a->y);
}

static void sim_avgpool_forward(backend_t *be, const window_desc *d, const float *x, float *y)
{
    q_avgpool_forward_args q = {*d, x, y};
    sim_enqueue(be, q_avgpool_forward_run, &q, sizeof(q));
}

typedef struct {
    window_desc d;
    const float *dy;
    float *dx;
} q_avgpool_backward_args;

static void q_avgpool_backward_run(backend_t *be, void *p)
{
    q_avgpool_backward_args *a = p;
    run_avgpool_backward(be, &a->d, a->dy, a->dx);
}

static void sim_avgpool_backward(backend_t *be, const window_desc *d, const float *dy, float *dx)
{
    q_avgpool_backward_args q = {*d, dy, dx};
    sim_enqueue(be, q_avgpool_backward_run, &q, sizeof(q));
}

typedef struct {
    int n;
    int c;
    int hw;
    const float *x;
    const float *gamma;
    const float *beta;
    float *running_mean;
    float *running_var;
    float momentum;
    float eps;
    bool training;
    bool relu;
    float *y;
    float *save_mean;
    float *save_invstd;
} q_batchnorm_forward_args;

static void q_batchnorm_forward_run(backend_t *be, void *p)
{
    q_batchnorm_forward_args *a = p;
    run_batchnorm_forward(be, a->n, a->c, a->hw, a->x, a->gamma, a->beta, a->running_mean,
                          a->running_var, a->momentum, a->eps, a->training, a->relu, a->y,
                          a->save_mean, a->save_invstd);
}

static void sim_batchnorm_forward(backend_t *be, int n, int c, int hw, const float *x,
                                  const float *gamma, const float *beta, float *running_mean,
                                  float *running_var, float momentum, float eps, bool training,
                                  bool relu, float *y, float *save_mean, float *save_invstd)
{
    q_batchnorm_forward_args q = {n,           c,        hw,  x,        gamma, beta, running_mean,
                                  running_var, momentum, eps, training, relu,  y,    save_mean,
                                  save_invstd};
    sim_enqueue(be, q_batchnorm_forward_run, &q, sizeof(q));
}

typedef struct {
    int n;
    int c;
    int hw;
    const float *x;
    const float *gamma;
    const float *save_mean;
    const float *save_invstd;
    const float *y;
    bool relu;
    float *dy;
    float *dx;
    float *dgamma;
    float *dbeta;
} q_batchnorm_backward_args;

static void q_batchnorm_backward_run(backend_t *be, void *p)
{
    q_batchnorm_backward_args *a = p;
    run_batchnorm_backward(be, a->n, a->c, a->hw, a->x, a->gamma, a->save_mean, a->save_invstd,
                           a->y, a->relu, a->dy, a->dx, a->dgamma, a->dbeta);
}

static void sim_batchnorm_backward(backend_t *be, int n, int c, int hw, const float *x,
                                   const float *gamma, const float *save_mean,
                                   const float *save_invstd, const float *y, bool relu, float *dy,
                                   float *dx, float *dgamma, float *dbeta)
{
    q_batchnorm_backward_args q = {n, c,    hw, x,  gamma,  save_mean, save_invstd,
                                   y, relu, dy, dx, dgamma, dbeta};
    sim_enqueue(be, q_batchnorm_backward_run, &q, sizeof(q));
}

typedef struct {
    size_t count;
    const float *x;
    float *y;
} q_relu_forward_args;

static void q_relu_forward_run(backend_t *be, void *p)
{
    q_relu_forward_args *a = p;
    run_relu_forward(be, a->count, a->x, a->y);
}

static void sim_relu_forward(backend_t *be, size_t count, const float *x, float *y)
{
    q_relu_forward_args q = {count, x, y};
    sim_enqueue(be, q_relu_forward_run, &q, sizeof(q));
}

typedef struct {
    size_t count;
    const float *y;
    const float *dy;
    float *dx;
} q_relu_backward_args;

static void q_relu_backward_run(backend_t *be, void *p)
{
    q_relu_backward_args *a = p;
    run_relu_backward(be, a->count, a->y, a->dy, a->dx);
}

static void sim_relu_backward(backend_t *be, size_t count, const float *y, const float *dy,
                              float *dx)
{
    q_relu_backward_args q = {count, y, dy, dx};
    sim_enqueue(be, q_relu_backward_run, &q, sizeof(q));
}

typedef struct {
    size_t count;
    float rate;
    uint64_t seed;
    const float *x;
    float *y;
    float *mask;
} q_dropout_forward_args;

static void q_dropout_forward_run(backend_t *be, void *p)
{
    q_dropout_forward_args *a = p;
    run_dropout_forward(be, a->count, a->rate, a->seed, a->x, a->y, a->mask);
}

static void sim_dropout_forward(backend_t *be, size_t count, float rate, uint64_t seed,
                                const float *x, float *y, float *mask)
{
    q_dropout_forward_args q = {count, rate, seed, x, y, mask};
    sim_enqueue(be, q_dropout_forward_run, &q, sizeof(q));
}

typedef struct {
    size_t count;
    const float *a;
    const float *b;
    float *y;
} q_mul_args;

static void q_mul_run(backend_t *be, void *p)
{
    q_mul_args *a = p;
    run_mul(be, a->count, a->a, a->b, a->y);
}

static void sim_mul(backend_t *be, size_t count, const float *a, const float *b, float *y)
{
    q_mul_args q = {count, a, b, y};
    sim_enqueue(be, q_mul_run, &q, sizeof(q));
}

typedef struct {
    size_t count;
    float alpha;
    const float *x;
    float *y;
} q_axpy_args;

static void q_axpy_run(backend_t *be, void *p)
{
    q_axpy_args *a = p;
    run_axpy(be, a->count, a->alpha, a->x, a->y);
}

static void sim_axpy(backend_t *be, size_t count, float alpha, const float *x, float *y)
{
    q_axpy_args q = {count, alpha, x, y};
    sim_enqueue(be, q_axpy_run, &q, sizeof(q));
}

typedef struct {
    size_t count;
    const float *a;
    const float *b;
    bool relu;
    float *y;
} q_add_args;

static void q_add_run(backend_t *be, void *p)
{
    q_add_args *a = p;
    run_add(be, a->count, a->a, a->b, a->relu, a->y);
}

static void sim_add(backend_t *be, size_t count, const float *a, const float *b, bool relu,
                    float *y)
{
    q_add_args q = {count, a, b, relu, y};
    sim_enqueue(be, q_add_run, &q, sizeof(q));
}

typedef struct {
    size_t count;
    float alpha;
    float *x;
} q_scale_args;

static void q_scale_run(backend_t *be, void *p)
{
    q_scale_args *a = p;
    run_scale(be, a->count, a->alpha, a->x);
}

static void sim_scale(backend_t *be, size_t count, float alpha, float *x)
{
    q_scale_args q = {count, alpha, x};
    sim_enqueue(be, q_scale_run, &q, sizeof(q));
}

typedef struct {
    size_t count;
    float alpha;
    float *x;
} q_add_scalar_args;

static void q_add_scalar_run(backend_t *be, void *p)
{
    q_add_scalar_args *a = p;
    run_add_scalar(be, a->count, a->alpha, a->x);
}

static void sim_add_scalar(backend_t *be, size_t count, float alpha, float *x)
{
    q_add_scalar_args q = {count, alpha, x};
    sim_enqueue(be, q_add_scalar_run, &q, sizeof(q));
}

typedef struct {
    size_t count;
    float lr;
    float momentum;
    bool nesterov;
    float weight_decay;
    bool first_step;
    float *w;
    const float *g;
    float *buf;
} q_sgd_step_args;

static void q_sgd_step_run(backend_t *be, void *p)
{
    q_sgd_step_args *a = p;
    run_sgd_step(be, a->count, a->lr, a->momentum, a->nesterov, a->weight_decay, a->first_step,
                 a->w, a->g, a->buf);
}

static void sim_sgd_step(backend_t *be, size_t count, float lr, float momentum, bool nesterov,
                         float weight_decay, bool first_step, float *w, const float *g, float *buf)
{
    q_sgd_step_args q = {count, lr, momentum, nesterov, weight_decay, first_step, w, g, buf};
    sim_enqueue(be, q_sgd_step_run, &q, sizeof(q));
}

typedef struct {
    size_t count;
    float lr;
    float beta1;
    float beta2;
    float eps;
    float weight_decay;
    int64_t step;
    float *w;
    const float *g;
    float *m;
    float *v;
} q_adam_step_args;

static void q_adam_step_run(backend_t *be, void *p)
{
    q_adam_step_args *a = p;
    run_adam_step(be, a->count, a->lr, a->beta1, a->beta2, a->eps, a->weight_decay, a->step, a->w,
                  a->g, a->m, a->v);
}

static void sim_adam_step(backend_t *be, size_t count, float lr, float beta1, float beta2,
                          float eps, float weight_decay, int64_t step, float *w, const float *g,
                          float *m, float *v)
{
    q_adam_step_args q = {count, lr, beta1, beta2, eps, weight_decay, step, w, g, m, v};
    sim_enqueue(be, q_adam_step_run, &q, sizeof(q));
}

/* Installs the queued operations in be. */
static void sim_install_queued_ops(backend_t *be)
{
    be->dense_forward = sim_dense_forward;
    be->dense_backward = sim_dense_backward;
    be->conv_forward = sim_conv_forward;
    be->conv_backward = sim_conv_backward;
    be->maxpool_forward = sim_maxpool_forward;
    be->maxpool_backward = sim_maxpool_backward;
    be->avgpool_forward = sim_avgpool_forward;
    be->avgpool_backward = sim_avgpool_backward;
    be->batchnorm_forward = sim_batchnorm_forward;
    be->batchnorm_backward = sim_batchnorm_backward;
    be->relu_forward = sim_relu_forward;
    be->relu_backward = sim_relu_backward;
    be->dropout_forward = sim_dropout_forward;
    be->mul = sim_mul;
    be->axpy = sim_axpy;
    be->add = sim_add;
    be->scale = sim_scale;
    be->add_scalar = sim_add_scalar;
    be->sgd_step = sim_sgd_step;
    be->adam_step = sim_adam_step;
}
