/* inference_runner.c - evaluates the model on another dataflow (tensorpack's
 * InferenceRunner with ScalarStats + ClassificationError): writes
 * validation_loss (mean cross-entropy) and validation_accuracy. */
#include <stdlib.h>

#include <libconfig.h>

#include "train/trainer.h"

typedef struct {
    dataset_t *set;
    dataflow_t *flow;
} inference_state;

static int inference_create(callback_t *cb, trainer_t *tr, tt_err *err)
{
    const dataflow_cfg *dc = cb->cfg->dataflow;
    if (dc == NULL)
        return err_set(err, TT_ERR_USAGE, "inference_runner: missing dataflow");
    inference_state *s = calloc(1, sizeof(*s));
    if (s == NULL)
        return err_set(err, TT_ERR_RUNTIME, "out of memory");
    cb->state = s;
    if (dataset_open(&dc->source, dc->limit, tr->job->model.classes, &s->set, err) != 0 ||
        dataflow_create(dc, s->set, tr->job->seed, DATAFLOW_EVAL, dc->batch_size, 0,
                        dc->batch_size, &s->flow, err) != 0)
        return -1;
    shape3 want = dataflow_shape(tr->train_flow), got = dataflow_shape(s->flow);
    if (shape3_size(want) != shape3_size(got) || want.c != got.c)
        return err_set(err, TT_ERR_USAGE, "inference_runner: its data has samples of "
                       "%dx%dx%d but training uses %dx%dx%d", got.c, got.h, got.w, want.c,
                       want.h, want.w);
    return 0;
}

static int inference_trigger(callback_t *cb, trainer_t *tr, tt_err *err)
{
    inference_state *s = cb->state;
    double loss, accuracy;
    if (trainer_evaluate(tr, s->flow, &loss, &accuracy, err) != 0)
        return -1;
    if (trainer_put_scalar(tr, "validation_loss", loss, err) != 0 ||
        trainer_put_scalar(tr, "validation_accuracy", accuracy, err) != 0)
        return -1;
    return 0;
}

static void inference_destroy(callback_t *cb)
{
    inference_state *s = cb->state;
    if (s == NULL)
        return;
    if (s->flow)
        dataflow_free(s->flow);
    if (s->set)
        dataset_free(s->set);
    free(s);
}

const callback_ops callback_inference_runner_ops = {
    .type = "inference_runner",
    .create = inference_create,
    .trigger = inference_trigger,
    .destroy = inference_destroy,
};
