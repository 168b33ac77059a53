/* dataflow.h - sources, augmentation, batching and prefetch (towertrain.cfg(5), DATAFLOW).
 *
 * The data is a stream of passes over the dataset. Pass k uses a permutation that
 * depends only on (seed, k) and yields B = floor(N / G) global batches of G
 * samples (the remainder is dropped). Global step s takes batch s mod B of pass
 * floor(s / B): samples perm[b*G .. (b+1)*G). A process takes the contiguous part
 * [local_offset, local_offset + local_count) of each global batch (its towers'
 * slices, towertrain.cfg(5), DATAFLOW). Random augmentation of a sample depends only on
 * (seed, pass, sample index). So a batch is a pure function of (seed, step):
 * prefetch workers compute batches for different steps in parallel and hand them
 * out in step order, and results never depend on the number of workers.
 */
#ifndef TT_DATAFLOW_H
#define TT_DATAFLOW_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "config/job.h"
#include "tensor.h"
#include "util/err.h"

/* ---- datasets: the samples of a source ---- */

typedef struct dataset dataset_t;

/* Opens a source (idx raw or gzip, cifar10, fake, image_folder, npy). limit > 0
 * keeps the first `limit` samples. Every label kept must be in [0, classes)
 * (the model's classes; classes <= 0 skips the check): a source imposes no
 * class count of its own. Bad files (truncated, wrong magic, label count
 * mismatch, a label out of range, an image that does not decode) are
 * TT_ERR_USAGE errors naming the file, and the sample and value where there
 * is one. image_folder reads only the file list and each image's header here;
 * pixels are decoded by dataset_read, in the prefetch workers. */
int dataset_open(const source_cfg *src, int limit, int classes, dataset_t **out, tt_err *err);
size_t dataset_size(const dataset_t *ds);
/* The shape of every sample, or of sample 0 when their sizes differ
 * (image_folder); dataset_sample_shape gives each one's. */
shape3 dataset_shape(const dataset_t *ds);
shape3 dataset_sample_shape(const dataset_t *ds, size_t i);
/* Whether every sample has dataset_shape(ds). */
bool dataset_uniform(const dataset_t *ds);
/* The most floats any sample takes. */
size_t dataset_max_floats(const dataset_t *ds);
/* The name of class k where the source has one (an image folder's class
 * folder), else NULL. */
const char *dataset_class_name(const dataset_t *ds, int k);

/* A reader thread's reusable buffers (file bytes, decoded pixels, decoder
 * handles): one per prefetch worker, zero-initialised, freed with
 * dataset_scratch_free. */
typedef struct {
    uint8_t *bytes;
    size_t bytes_cap;
    uint8_t *pix;
    size_t pix_cap;
    void *jpeg;  /* a TurboJPEG handle, made on first use */
} dataset_scratch;
void dataset_scratch_free(dataset_scratch *s);

/* Reads sample i scaled to [0, 1] into x (dataset_max_floats floats, C x H x W)
 * and its shape into *shape; returns its label, or -1 with err when the file
 * does not decode (image_folder without skip_corrupt; with it the next image
 * in file order that decodes stands in, and the file is reported once in the
 * log). Thread-safe for distinct scratches. */
int dataset_read(const dataset_t *ds, size_t i, float *x, shape3 *shape, dataset_scratch *s,
                 tt_err *err);
/* A pixel byte's value, as torchvision's ToTensor gives it. */
static inline float dataset_byte_value(uint8_t v)
{
    return (float)v / 255.0f;
}
/* Sample i's bytes ([C, H, W]) and label, for the sources that hold bytes
 * (idx, cifar10); NULL for the others, which only dataset_read reads. */
const uint8_t *dataset_bytes(const dataset_t *ds, size_t i, int *label);
/* A hint that sample i is read next: its bytes (idx, cifar10) are fetched
 * into the cache while the one before is converted. No effect on results. */
void dataset_prefetch(const dataset_t *ds, size_t i);
void dataset_free(dataset_t *ds);

/* ---- batches ---- */

typedef struct {
    int n;          /* samples in this batch (local: this process's towers) */
    float *x;       /* [n, C, H, W], augmented */
    int32_t *y;     /* [n] */
    int64_t step;   /* training: the global step; eval: the batch index */
} batch_t;

typedef enum {
    DATAFLOW_TRAIN, /* endless stream by global step, shuffled per pass if cfg->shuffle */
    DATAFLOW_EVAL   /* one pass in order, ceil(N / batch) batches, last one partial */
} dataflow_mode;

typedef struct dataflow dataflow_t;

/* global_batch: G (train) or the batch size (eval). The dataset stays owned by
 * the caller and must outlive the dataflow. Errors: limit below one global batch. */
int dataflow_create(const dataflow_cfg *cfg, const dataset_t *ds, uint64_t seed,
                    dataflow_mode mode, int global_batch, int local_offset, int local_count,
                    dataflow_t **out, tt_err *err);

/* Train mode, before the first batch: the global batch is `parts` equal
 * parts (trainer.accumulate's micro-batches), and this dataflow's slice is
 * local_count / parts samples at local_offset of each part, in part order.
 * With the 1 part of dataflow_create: the slice [local_offset,
 * local_offset + local_count) of the global batch. */
int dataflow_set_parts(dataflow_t *df, int parts, tt_err *err);

/* Shape of one sample as the dataflow outputs it (after the augmentations). */
shape3 dataflow_shape(const dataflow_t *df);

/* Batches per pass: floor(N / G) in train mode, ceil(N / batch) in eval mode. */
int64_t dataflow_batches_per_pass(const dataflow_t *df);

/* Starts the prefetch workers (cfg->workers; 0 = compute inline in next) at
 * `first_step` (eval: 0). Stops any earlier run first. */
int dataflow_start(dataflow_t *df, int64_t first_step, tt_err *err);

/* The next batch in order; NULL at the end of an eval pass, or when a sample
 * of the batch did not read (dataflow_error says which). Valid until the next
 * call of dataflow_next, dataflow_start or dataflow_free. Blocks while the
 * workers catch up. */
const batch_t *dataflow_next(dataflow_t *df);

/* 0, or -1 with err filled when dataflow_next stopped at a sample that did
 * not read (a corrupt image: TT_ERR_USAGE naming the file). */
int dataflow_error(const dataflow_t *df, tt_err *err);

/* Stops the workers and frees everything. */
void dataflow_free(dataflow_t *df);

#endif
