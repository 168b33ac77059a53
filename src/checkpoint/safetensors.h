/* safetensors.h - the safetensors file format (towertrain(1), OUTPUT): 8-byte little-endian
 * header length, a JSON header naming each tensor's dtype, shape and byte
 * range, then the raw little-endian data.
 *
 * Writes are atomic (util/fileio.h) and record the CRC-32C of the data section
 * in __metadata__ as data_crc32c; reads check the size, the header, every
 * tensor's range and that CRC, and refuse a corrupt or truncated file with a
 * clear TT_ERR_USAGE error.
 */
#ifndef TT_SAFETENSORS_H
#define TT_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "util/err.h"

#define ST_MAX_DIMS 4

typedef struct {
    const char *name;
    const char *dtype;         /* "F32" or "I64" */
    int ndim;                  /* 0 for a scalar */
    int64_t shape[ST_MAX_DIMS];
    const void *data;
    size_t bytes;
} st_tensor;

/* Writes the tensors and the metadata pairs (meta[2i] = key, meta[2i+1] =
 * value; n_meta pairs) to path atomically. */
int safetensors_write(const char *path, const st_tensor *tensors, int n,
                      const char *const *meta, int n_meta, tt_err *err);

typedef struct safetensors_file safetensors_file;

int safetensors_read(const char *path, safetensors_file **out, tt_err *err);
int safetensors_count(const safetensors_file *f);
/* Tensor i (0 <= i < count) in header order; pointers live as long as f. */
const st_tensor *safetensors_tensor(const safetensors_file *f, int i);
const st_tensor *safetensors_find(const safetensors_file *f, const char *name);
/* A __metadata__ value, or NULL. */
const char *safetensors_meta(const safetensors_file *f, const char *key);
void safetensors_free(safetensors_file *f);

#endif
