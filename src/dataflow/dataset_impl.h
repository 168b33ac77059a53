/* dataset_impl.h - the dataset shared by the source readers (private to
 * src/dataflow). */
#ifndef TT_DATASET_IMPL_H
#define TT_DATASET_IMPL_H

#include <stdint.h>

#include "dataflow/dataflow.h"

struct image_folder;
struct npy_source;

struct dataset {
    source_type type;
    size_t n;          /* samples */
    shape3 shape;      /* per sample (image_folder: of sample 0) */
    bool uniform;      /* every sample has `shape` */
    size_t max_floats; /* the largest sample */
    uint8_t *pixels;   /* [n, C, H, W] bytes (idx, cifar10); NULL otherwise */
    int32_t *labels;   /* [n]; NULL for fake (made with each sample) and npy (mapped) */
    int classes;       /* fake: its labels are below this */
    /* cifar10: the files' first samples, for messages naming the file */
    char **files;
    size_t *file_first; /* [n_files + 1] */
    int n_files;
    const char *label_file; /* idx, npy: the labels' path, for messages */
    struct image_folder *folder;
    struct npy_source *npy;
};

/* Readers fill ds (n, shape, pixels or their own part, labels) or return -1
 * with err naming the file. They check formats, not label ranges: that is
 * dataset_open's, against the model's classes. The IDX and CIFAR-10 readers
 * only need src->images / src->labels and src->files (fuzz targets call them
 * on any file). */
/* idx_read and cifar10_read read the first `limit` records only (0: all);
 * image_folder_open lists every file but reads the first `limit` images'
 * headers only. */
int idx_read(const source_cfg *src, int limit, struct dataset *ds, tt_err *err);
int cifar10_read(const source_cfg *src, int limit, struct dataset *ds, tt_err *err);
int fake_open(const source_cfg *src, struct dataset *ds, tt_err *err);
int fake_sample(const struct dataset *ds, size_t i, float *x);
int npy_open(const source_cfg *src, struct dataset *ds, tt_err *err);
int npy_sample(const struct dataset *ds, size_t i, float *x);
int npy_label(const struct dataset *ds, size_t i);
void npy_close(struct npy_source *npy);
int image_folder_open(const source_cfg *src, int limit, struct dataset *ds, tt_err *err);
/* Decodes image i into x; returns its label or -1 (err names the file). */
int image_folder_sample(const struct dataset *ds, size_t i, float *x, shape3 *shape,
                        dataset_scratch *s, tt_err *err);
shape3 image_folder_shape(const struct dataset *ds, size_t i);
/* "ROOT/class/file.png" of image i, for messages. */
void image_folder_path(const struct dataset *ds, size_t i, char *out, size_t len);
const char *image_folder_class(const struct dataset *ds, int k);
void image_folder_close(struct image_folder *f);

#endif
