/* eval.h - `towertrain eval`: a trained model over a labelled dataflow in
 * inference mode (batchnorm running statistics, no dropout): loss, accuracy,
 * top-5 accuracy, per-class accuracy and the confusion matrix.
 *
 * The evaluation is the inference_runner's own (trainer_evaluate_each: tower
 * 0, batches dealt to the MPI ranks in turn and reduced), so its loss and
 * accuracy are the numbers a run's validation_loss and validation_accuracy
 * report for the same checkpoint and data. */
#ifndef TT_EVAL_H
#define TT_EVAL_H

#include <stdint.h>
#include <stdio.h>

#include "config/job.h"
#include "util/err.h"

typedef struct {
    char checkpoint[4400];
    int64_t global_step;     /* from the checkpoint's metadata; -1 when absent */
    int classes;
    int64_t samples;
    double loss, accuracy;
    double top5_accuracy;    /* classes >= 5 */
    int64_t *confusion;      /* [classes][classes]: rows true class, columns predicted */
    char **class_names;      /* [classes] an image folder's class folders, else NULL */
} eval_result;

/* Which dataflow eval reads: the job's eval.dataflow, else its first
 * inference_runner's, else the training dataflow without random
 * augmentation (augment_for_eval) and unshuffled. *owned is set when the
 * returned config was built here (free it with eval_dataflow_free). */
const dataflow_cfg *eval_pick_dataflow(const job_t *job, dataflow_cfg **owned, const char **what,
                                       tt_err *err);
void eval_dataflow_free(dataflow_cfg *d);

/* Evaluates the parameters of `checkpoint` (a safetensors file) under job's
 * model on the dataflow df. */
int eval_run(const job_t *job, const dataflow_cfg *df, const char *checkpoint, eval_result *r,
             tt_err *err);

/* The readable table (rank 0 prints it). */
void eval_print(const eval_result *r, const char *data_what, FILE *out);

/* {"checkpoint": ..., "global_step": ..., "samples": N, "loss": ..., "accuracy": ...,
 *  "top5_accuracy": ..., "per_class_accuracy": [...], "confusion_matrix": [[...]]},
 * written atomically. */
int eval_write_json(const eval_result *r, const char *path, tt_err *err);

void eval_result_free(eval_result *r);

#endif
