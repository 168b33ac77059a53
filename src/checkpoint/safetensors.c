#include "checkpoint/safetensors.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cJSON.h>

#include "util/crc32c.h"
#include "util/fileio.h"

static size_t dtype_size(const char *dtype)
{
    if (strcmp(dtype, "F32") == 0)
        return 4;
    if (strcmp(dtype, "I64") == 0)
        return 8;
    return 0;
}

static size_t tensor_elements(const st_tensor *t)
{
    size_t n = 1;
    for (int d = 0; d < t->ndim; d++)
        n *= (size_t)t->shape[d];
    return n;
}

int safetensors_write(const char *path, const st_tensor *tensors, int n,
                      const char *const *meta, int n_meta, tt_err *err)
{
    size_t data_bytes = 0;
    for (int i = 0; i < n; i++) {
        size_t es = dtype_size(tensors[i].dtype);
        if (es == 0 || tensors[i].ndim < 0 || tensors[i].ndim > ST_MAX_DIMS ||
            tensor_elements(&tensors[i]) * es != tensors[i].bytes)
            return err_set(err, TT_ERR_RUNTIME, "%s: tensor %s: bad dtype or size", path,
                           tensors[i].name);
        data_bytes += tensors[i].bytes;
    }
    uint32_t crc = 0;
    for (int i = 0; i < n; i++)
        crc = crc32c_update(crc, tensors[i].data, tensors[i].bytes);

    cJSON *head = cJSON_CreateObject();
    cJSON *md = cJSON_AddObjectToObject(head, "__metadata__");
    char crc_text[16];
    snprintf(crc_text, sizeof(crc_text), "%08x", crc);
    int ok = head != NULL && md != NULL && cJSON_AddStringToObject(md, "data_crc32c", crc_text);
    for (int i = 0; ok && i < n_meta; i++)
        ok = cJSON_AddStringToObject(md, meta[2 * i], meta[2 * i + 1]) != NULL;
    size_t offset = 0;
    for (int i = 0; ok && i < n; i++) {
        cJSON *t = cJSON_AddObjectToObject(head, tensors[i].name);
        cJSON *shape = cJSON_CreateArray(), *range = cJSON_CreateArray();
        ok = t && shape && range && cJSON_AddStringToObject(t, "dtype", tensors[i].dtype);
        for (int d = 0; ok && d < tensors[i].ndim; d++)
            cJSON_AddItemToArray(shape, cJSON_CreateNumber((double)tensors[i].shape[d]));
        cJSON_AddItemToArray(range, cJSON_CreateNumber((double)offset));
        cJSON_AddItemToArray(range, cJSON_CreateNumber((double)(offset + tensors[i].bytes)));
        if (t != NULL) {
            cJSON_AddItemToObject(t, "shape", shape);
            cJSON_AddItemToObject(t, "data_offsets", range);
        } else {
            cJSON_Delete(shape);
            cJSON_Delete(range);
        }
        offset += tensors[i].bytes;
    }
    char *json = ok ? cJSON_PrintUnformatted(head) : NULL;
    cJSON_Delete(head);
    if (json == NULL)
        return err_set(err, TT_ERR_RUNTIME, "%s: out of memory", path);

    /* header padded with spaces so the data starts 8-byte aligned */
    size_t hlen = strlen(json), padded = (hlen + 7) & ~(size_t)7;
    size_t total = 8 + padded + data_bytes;
    char *buf = malloc(total);
    if (buf == NULL) {
        free(json);
        return err_set(err, TT_ERR_RUNTIME, "%s: out of memory", path);
    }
    for (int b = 0; b < 8; b++)
        buf[b] = (char)((uint64_t)padded >> (8 * b));
    memcpy(buf + 8, json, hlen);
    memset(buf + 8 + hlen, ' ', padded - hlen);
    free(json);
    char *p = buf + 8 + padded;
    for (int i = 0; i < n; i++) {
        memcpy(p, tensors[i].data, tensors[i].bytes);
        p += tensors[i].bytes;
    }
    int rc = file_write_atomic(path, buf, total, err);
    free(buf);
    return rc;
}

struct safetensors_file {
    char *raw;       /* the whole file */
    size_t len;
    cJSON *head;
    st_tensor *tensors;
    int n;
};

void safetensors_free(safetensors_file *f)
{
    if (f == NULL)
        return;
    free(f->raw);
    cJSON_Delete(f->head);
    free(f->tensors);
    free(f);
}

static int corrupt(safetensors_file *f, tt_err *err, const char *path, const char *why)
{
    safetensors_free(f);
    return err_set(err, TT_ERR_USAGE, "%s: corrupt or truncated checkpoint (%s)", path, why);
}

int safetensors_read(const char *path, safetensors_file **out, tt_err *err)
{
    safetensors_file *f = calloc(1, sizeof(*f));
    if (f == NULL)
        return err_set(err, TT_ERR_RUNTIME, "out of memory");
    if (file_read_all(path, &f->raw, &f->len, err) != 0) {
        safetensors_free(f);
        return -1;
    }
    if (f->len < 8)
        return corrupt(f, err, path, "shorter than its 8-byte header length");
    uint64_t hlen = 0;
    for (int b = 0; b < 8; b++)
        hlen |= (uint64_t)(unsigned char)f->raw[b] << (8 * b);
    if (hlen > f->len - 8)
        return corrupt(f, err, path, "header longer than the file");
    f->head = cJSON_ParseWithLength(f->raw + 8, (size_t)hlen);
    if (f->head == NULL || !cJSON_IsObject(f->head))
        return corrupt(f, err, path, "header is not a JSON object");
    const char *data = f->raw + 8 + hlen;
    size_t data_len = f->len - 8 - (size_t)hlen;
    int count = cJSON_GetArraySize(f->head);
    f->tensors = calloc((size_t)count + 1, sizeof(st_tensor));
    if (f->tensors == NULL) {
        safetensors_free(f);
        return err_set(err, TT_ERR_RUNTIME, "out of memory");
    }
    size_t covered = 0;
    for (cJSON *t = f->head->child; t != NULL; t = t->next) {
        if (strcmp(t->string, "__metadata__") == 0)
            continue;
        st_tensor *st = &f->tensors[f->n];
        cJSON *dtype = cJSON_GetObjectItemCaseSensitive(t, "dtype");
        cJSON *shape = cJSON_GetObjectItemCaseSensitive(t, "shape");
        cJSON *range = cJSON_GetObjectItemCaseSensitive(t, "data_offsets");
        if (!cJSON_IsString(dtype) || !cJSON_IsArray(shape) || !cJSON_IsArray(range) ||
            cJSON_GetArraySize(range) != 2 || cJSON_GetArraySize(shape) > ST_MAX_DIMS)
            return corrupt(f, err, path, "bad tensor entry");
        st->name = t->string;
        st->dtype = dtype->valuestring;
        st->ndim = cJSON_GetArraySize(shape);
        for (int d = 0; d < st->ndim; d++) {
            double v = cJSON_GetArrayItem(shape, d)->valuedouble;
            if (v < 0 || v > 1e12)
                return corrupt(f, err, path, "bad shape");
            st->shape[d] = (int64_t)v;
        }
        double lo = cJSON_GetArrayItem(range, 0)->valuedouble;
        double hi = cJSON_GetArrayItem(range, 1)->valuedouble;
        size_t es = dtype_size(st->dtype);
        if (es == 0)
            return corrupt(f, err, path, "unknown dtype");
        if (lo < 0 || hi < lo || hi > (double)data_len)
            return corrupt(f, err, path, "tensor data past the end of the file");
        st->bytes = (size_t)hi - (size_t)lo;
        if (st->bytes != tensor_elements(st) * es)
            return corrupt(f, err, path, "tensor size does not match its shape");
        st->data = data + (size_t)lo;
        covered += st->bytes;
        f->n++;
    }
    if (covered != data_len)
        return corrupt(f, err, path, "data section size does not match the tensors");
    const char *want = safetensors_meta(f, "data_crc32c");
    if (want != NULL) {
        char got[16];
        snprintf(got, sizeof(got), "%08x", crc32c_update(0, data, data_len));
        if (strcmp(got, want) != 0)
            return corrupt(f, err, path, "CRC-32C of the data does not match");
    }
    *out = f;
    return 0;
}

int safetensors_count(const safetensors_file *f)
{
    return f->n;
}

const st_tensor *safetensors_tensor(const safetensors_file *f, int i)
{
    return i >= 0 && i < f->n ? &f->tensors[i] : NULL;
}

const st_tensor *safetensors_find(const safetensors_file *f, const char *name)
{
    for (int i = 0; i < f->n; i++)
        if (strcmp(f->tensors[i].name, name) == 0)
            return &f->tensors[i];
    return NULL;
}

const char *safetensors_meta(const safetensors_file *f, const char *key)
{
    cJSON *md = cJSON_GetObjectItemCaseSensitive(f->head, "__metadata__");
    cJSON *v = md ? cJSON_GetObjectItemCaseSensitive(md, key) : NULL;
    return cJSON_IsString(v) ? v->valuestring : NULL;
}
