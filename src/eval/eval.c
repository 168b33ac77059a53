/* eval.c - `towertrain eval` (eval.h). */
#include "eval/eval.h"

#include <stdlib.h>
#include <string.h>

#include <cJSON.h>

#include "checkpoint/safetensors.h"
#include "comm/dist.h"
#include "dataflow/augment.h"
#include "train/trainer.h"
#include "util/fileio.h"

const dataflow_cfg *eval_pick_dataflow(const job_t *job, dataflow_cfg **owned, const char **what,
                                       tt_err *err)
{
    *owned = NULL;
    if (job->eval_dataflow != NULL) {
        *what = "eval.dataflow";
        return job->eval_dataflow;
    }
    for (int i = 0; i < job->n_callbacks; i++)
        if (strcmp(job->callbacks[i].type, "inference_runner") == 0 &&
            job->callbacks[i].dataflow != NULL) {
            *what = "the inference_runner's dataflow";
            return job->callbacks[i].dataflow;
        }
    /* the training data, as it would be validated: in order, no random
     * augmentation */
    dataflow_cfg *d = calloc(1, sizeof(*d));
    if (d == NULL) {
        err_set(err, TT_ERR_RUNTIME, "out of memory");
        return NULL;
    }
    *d = job->dataflow;
    d->shuffle = false; /* source.files stays the job's: borrowed, never freed here */
    if (augment_for_eval(job->dataflow.augment, job->dataflow.n_augment, &d->augment,
                         &d->n_augment) != 0) {
        free(d);
        err_set(err, TT_ERR_RUNTIME, "out of memory");
        return NULL;
    }
    *owned = d;
    *what = "the training dataflow without random augmentation";
    return d;
}

void eval_dataflow_free(dataflow_cfg *d)
{
    if (d == NULL)
        return;
    free(d->augment);
    free(d);
}

/* Counts of one evaluation, filled by each chunk's logits. */
typedef struct {
    int classes;
    double *confusion; /* doubles: reduced over the ranks with dist_sum_doubles */
    double top5;
} tally;

/* The same argmax as the loss kernel (the first of equal maxima), so the
 * confusion matrix's diagonal is the accuracy's count exactly. */
static void tally_chunk(void *arg, const float *logits, const int32_t *labels, int n)
{
    tally *t = arg;
    int k = t->classes;
    for (int r = 0; r < n; r++) {
        const float *z = logits + (size_t)r * k;
        int arg_max = 0;
        for (int j = 1; j < k; j++)
            if (z[j] > z[arg_max])
                arg_max = j;
        int y = labels[r];
        t->confusion[(size_t)y * k + arg_max] += 1.0;
        /* top-5: fewer than 5 classes rank above the label, ties going to
         * the lower index as in the argmax */
        int above = 0;
        for (int j = 0; j < k; j++)
            above += z[j] > z[y] || (z[j] == z[y] && j < y);
        t->top5 += above < 5;
    }
}

/* The checkpoint's global_step, -1 when it has none (any safetensors file
 * with the model's tensors is accepted, as for session_init). */
static int64_t checkpoint_step(const char *path)
{
    safetensors_file *f = NULL;
    tt_err err = {0};
    if (safetensors_read(path, &f, &err) != 0)
        return -1;
    const char *v = safetensors_meta(f, "global_step");
    char *end = NULL;
    long long step = v ? strtoll(v, &end, 10) : -1;
    if (v == NULL || *end != '\0' || step < 0)
        step = -1;
    safetensors_free(f);
    return step;
}

int eval_run(const job_t *job, const dataflow_cfg *dc, const char *checkpoint, eval_result *r,
             tt_err *err)
{
    memset(r, 0, sizeof(*r));
    snprintf(r->checkpoint, sizeof(r->checkpoint), "%s", checkpoint);
    r->classes = job->model.classes;
    r->global_step = -1;
    dataset_t *set = NULL;
    dataflow_t *flow = NULL;
    trainer_t tr = {0};
    tally t = {.classes = r->classes};
    int rc = -1;
    if (dataset_open(&dc->source, dc->limit, job->model.classes, &set, err) != 0 ||
        dataflow_create(dc, set, job->seed, DATAFLOW_EVAL, dc->batch_size, 0, dc->batch_size,
                        &flow, err) != 0 ||
        trainer_create_eval(&tr, job, dataflow_shape(flow), err) != 0 ||
        trainer_load_params(&tr, checkpoint, err) != 0)
        goto out;
    size_t cells = (size_t)r->classes * r->classes;
    t.confusion = calloc(cells + 1, sizeof(double));
    r->confusion = calloc(cells, sizeof(int64_t));
    if (t.confusion == NULL || r->confusion == NULL) {
        err_set(err, TT_ERR_RUNTIME, "out of memory");
        goto out;
    }
    if (trainer_evaluate_each(&tr, flow, tally_chunk, &t, &r->loss, &r->accuracy, err) != 0)
        goto out;
    t.confusion[cells] = t.top5;
    dist_sum_doubles(t.confusion, cells + 1); /* each rank tallied its own batches */
    for (size_t i = 0; i < cells; i++) {
        r->confusion[i] = (int64_t)t.confusion[i];
        r->samples += r->confusion[i];
    }
    r->top5_accuracy = r->samples ? t.confusion[cells] / (double)r->samples : 0.0;
    if (dataset_class_name(set, 0) != NULL && (r->class_names = calloc((size_t)r->classes,
                                                                      sizeof(char *))) != NULL)
        for (int k = 0; k < r->classes; k++) {
            const char *name = dataset_class_name(set, k);
            r->class_names[k] = strdup(name ? name : "");
        }
    r->global_step = checkpoint_step(checkpoint);
    rc = 0;
out:
    free(t.confusion);
    if (tr.job != NULL)
        trainer_free(&tr);
    if (flow != NULL)
        dataflow_free(flow);
    dataset_free(set);
    return rc;
}

/* A number as stats.json writes it (cJSON's shortest round-trip form), so a
 * reader can compare the two to the last digit. */
static void json_number(double v, char *out, size_t n)
{
    cJSON *num = cJSON_CreateNumber(v);
    char *s = num ? cJSON_PrintUnformatted(num) : NULL;
    snprintf(out, n, "%s", s ? s : "?");
    free(s);
    cJSON_Delete(num);
}

static int64_t class_total(const eval_result *r, int c)
{
    int64_t n = 0;
    for (int j = 0; j < r->classes; j++)
        n += r->confusion[(size_t)c * r->classes + j];
    return n;
}

void eval_print(const eval_result *r, const char *data_what, FILE *out)
{
    char loss[64], acc[64], top5[64];
    json_number(r->loss, loss, sizeof(loss));
    json_number(r->accuracy, acc, sizeof(acc));
    json_number(r->top5_accuracy, top5, sizeof(top5));
    int64_t right = 0;
    for (int c = 0; c < r->classes; c++)
        right += r->confusion[(size_t)c * r->classes + c];
    fprintf(out, "checkpoint     %s", r->checkpoint);
    if (r->global_step >= 0)
        fprintf(out, " (global step %lld)", (long long)r->global_step);
    fprintf(out, "\ndata           %s: %lld samples\n", data_what, (long long)r->samples);
    fprintf(out, "loss           %s\n", loss);
    fprintf(out, "accuracy       %s (%lld of %lld)\n", acc, (long long)right, (long long)r->samples);
    if (r->classes >= 5)
        fprintf(out, "top-5 accuracy %s\n", top5);
    fprintf(out, "\nclass  samples  accuracy%s\n", r->class_names ? "  name" : "");
    for (int c = 0; c < r->classes; c++) {
        int64_t n = class_total(r, c);
        char acc_text[32] = "-";
        if (n > 0)
            snprintf(acc_text, sizeof(acc_text), "%.4f",
                     (double)r->confusion[(size_t)c * r->classes + c] / (double)n);
        fprintf(out, "%5d  %7lld  %s", c, (long long)n, acc_text);
        if (r->class_names && r->class_names[c]) {
            /* the folder's name; control bytes escaped, never sent to the terminal */
            fprintf(out, "%*s", 10 - (int)strlen(acc_text), "");
            for (const unsigned char *q = (const unsigned char *)r->class_names[c]; *q; q++)
                fprintf(out, *q < 0x20 || *q == 0x7f ? "\\x%02x" : "%c", *q);
        }
        fprintf(out, "\n");
    }
    /* columns as wide as the largest count */
    int64_t most = 0;
    for (size_t i = 0; i < (size_t)r->classes * r->classes; i++)
        most = r->confusion[i] > most ? r->confusion[i] : most;
    int w = 1;
    for (int64_t v = most; v >= 10; v /= 10)
        w++;
    for (int64_t v = r->classes - 1; v >= 10; v /= 10)
        w = w > 2 ? w : 2;
    fprintf(out, "\nconfusion matrix (rows: true class, columns: predicted)\n%*s", 6, "");
    for (int j = 0; j < r->classes; j++)
        fprintf(out, " %*d", w, j);
    fprintf(out, "\n");
    for (int c = 0; c < r->classes; c++) {
        fprintf(out, "%5d ", c);
        for (int j = 0; j < r->classes; j++)
            fprintf(out, " %*lld", w, (long long)r->confusion[(size_t)c * r->classes + j]);
        fprintf(out, "\n");
    }
}

int eval_write_json(const eval_result *r, const char *path, tt_err *err)
{
    cJSON *o = cJSON_CreateObject();
    cJSON *per = cJSON_CreateArray(), *cm = cJSON_CreateArray();
    bool ok = o && per && cm;
    ok = ok && cJSON_AddStringToObject(o, "checkpoint", r->checkpoint);
    ok = ok && (r->global_step >= 0 ? cJSON_AddNumberToObject(o, "global_step", (double)r->global_step)
                                    : cJSON_AddNullToObject(o, "global_step"));
    ok = ok && cJSON_AddNumberToObject(o, "samples", (double)r->samples);
    ok = ok && cJSON_AddNumberToObject(o, "loss", r->loss);
    ok = ok && cJSON_AddNumberToObject(o, "accuracy", r->accuracy);
    if (r->classes >= 5)
        ok = ok && cJSON_AddNumberToObject(o, "top5_accuracy", r->top5_accuracy);
    for (int c = 0; ok && c < r->classes; c++) {
        int64_t n = class_total(r, c);
        cJSON *v = n ? cJSON_CreateNumber((double)r->confusion[(size_t)c * r->classes + c] / (double)n)
                     : cJSON_CreateNull(); /* no samples of this class */
        cJSON *row = cJSON_CreateArray();
        ok = v && row && cJSON_AddItemToArray(per, v);
        for (int j = 0; ok && j < r->classes; j++) {
            cJSON *x = cJSON_CreateNumber((double)r->confusion[(size_t)c * r->classes + j]);
            ok = x && cJSON_AddItemToArray(row, x);
        }
        ok = ok && cJSON_AddItemToArray(cm, row);
    }
    if (ok && cJSON_AddItemToObject(o, "per_class_accuracy", per))
        per = NULL; /* o owns it */
    else
        ok = false;
    if (ok && cJSON_AddItemToObject(o, "confusion_matrix", cm))
        cm = NULL;
    else
        ok = false;
    char *text = ok ? cJSON_Print(o) : NULL;
    cJSON_Delete(o);
    cJSON_Delete(per);
    cJSON_Delete(cm);
    if (text == NULL)
        return err_set(err, TT_ERR_RUNTIME, "out of memory");
    size_t len = strlen(text);
    text[len] = '\n'; /* cJSON's buffer has room for its NUL, taken by the newline */
    int rc = file_write_atomic(path, text, len + 1, err);
    free(text);
    return rc;
}

void eval_result_free(eval_result *r)
{
    for (int k = 0; r->class_names && k < r->classes; k++)
        free(r->class_names[k]);
    free(r->class_names);
    free(r->confusion);
    r->confusion = NULL;
    r->class_names = NULL;
}
