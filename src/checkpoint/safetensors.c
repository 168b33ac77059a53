#include "checkpoint/safetensors.h"

#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cJSON.h>

#include "util/crc32c.h"
#include "util/fileio.h"
#include "util/strutil.h"

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

/* A JSON number that is a whole count in [0, 2^53], or -1. */
static int64_t json_count(const cJSON *v)
{
    if (!cJSON_IsNumber(v))
        return -1;
    double d = v->valuedouble;
    if (!(d >= 0 && d <= 9007199254740992.0) || d != (double)(int64_t)d)
        return -1;
    return (int64_t)d;
}

/* Orders tensors by their first byte, for the no-gap no-overlap check. */
static int by_offset(const void *a, const void *b)
{
    const st_tensor *x = *(const st_tensor *const *)a, *y = *(const st_tensor *const *)b;
    const char *xd = x->data, *yd = y->data;
    return xd < yd ? -1 : xd > yd;
}

/* One header entry "name": {dtype, shape, data_offsets} into st, checked
 * against the data section (data_len bytes); NULL, or why it is refused
 * (into what, of 160 bytes, when the reason names the tensor). */
static const char *tensor_entry(const cJSON *t, const char *data, size_t data_len, st_tensor *st,
                                char *what)
{
    cJSON *dtype = cJSON_GetObjectItemCaseSensitive(t, "dtype");
    cJSON *shape = cJSON_GetObjectItemCaseSensitive(t, "shape");
    cJSON *range = cJSON_GetObjectItemCaseSensitive(t, "data_offsets");
    if (!cJSON_IsString(dtype) || !cJSON_IsArray(shape) || !cJSON_IsArray(range) ||
        cJSON_GetArraySize(range) != 2 || cJSON_GetArraySize(shape) > ST_MAX_DIMS)
        return "bad tensor entry";
    st->name = t->string;
    st->dtype = dtype->valuestring;
    st->ndim = cJSON_GetArraySize(shape);
    size_t es = dtype_size(st->dtype);
    if (es == 0)
        return "unknown dtype";
    /* The element count is checked against the data before it is used,
     * in 64 bits: a header claiming 2^40 elements is refused here. */
    uint64_t elements = 1;
    bool too_many = false;
    for (int d = 0; d < st->ndim; d++) {
        int64_t v = json_count(cJSON_GetArrayItem(shape, d));
        if (v < 0)
            return "bad shape";
        st->shape[d] = v;
        too_many |= __builtin_mul_overflow(elements, (uint64_t)v, &elements);
    }
    if (too_many || elements > data_len / es) {
        snprintf(what, 160, "tensor '%.64s' claims %s%" PRIu64 " elements, more than the %zu "
                 "bytes of data hold", st->name, too_many ? "over " : "",
                 too_many ? UINT64_MAX : elements, data_len);
        return what;
    }
    int64_t lo = json_count(cJSON_GetArrayItem(range, 0));
    int64_t hi = json_count(cJSON_GetArrayItem(range, 1));
    if (lo < 0 || hi < lo || (uint64_t)hi > data_len)
        return "tensor data past the end of the file";
    st->bytes = (size_t)(hi - lo);
    if (st->bytes != elements * es)
        return "tensor size does not match its shape";
    st->data = data + lo;
    return NULL;
}

/* The tensors tile the data section: no gap, no overlap (as the format
 * requires), so no two tensors share bytes. NULL, or why not. */
static const char *tensors_tile(const safetensors_file *f, const char *data, size_t data_len)
{
    const st_tensor **order = calloc((size_t)f->n + 1, sizeof(*order));
    if (order == NULL)
        return "out of memory";
    for (int i = 0; i < f->n; i++)
        order[i] = &f->tensors[i];
    qsort(order, (size_t)f->n, sizeof(*order), by_offset);
    const char *next = data, *why = NULL;
    for (int i = 0; i < f->n && why == NULL; i++) {
        if (order[i]->bytes == 0)
            continue; /* shares no bytes wherever it points */
        if (order[i]->data != next)
            why = "tensors overlap or leave gaps in the data";
        next = (const char *)order[i]->data + order[i]->bytes;
    }
    free(order);
    if (why == NULL && next != data + data_len)
        why = "data section size does not match the tensors";
    return why;
}

/* Reads the header's tensor entries into f->tensors; NULL, or why not. */
static const char *tensors_read(safetensors_file *f, const char *data, size_t data_len,
                                char *what)
{
    for (cJSON *t = f->head->child; t != NULL; t = t->next) {
        if (strcmp(t->string, "__metadata__") == 0)
            continue;
        st_tensor *st = &f->tensors[f->n];
        const char *why = tensor_entry(t, data, data_len, st, what);
        if (why != NULL)
            return why;
        for (int j = 0; j < f->n; j++)
            if (strcmp(f->tensors[j].name, st->name) == 0) {
                snprintf(what, 160, "tensor '%.64s' appears twice", st->name);
                return what;
            }
        f->n++;
    }
    return tensors_tile(f, data, data_len);
}

/* The header's n bytes as the format's reference reader (Rust's safetensors,
 * through serde_json) takes them: UTF-8 throughout, no control character
 * inside a string (JSON escapes them) and none outside one but JSON's
 * whitespace. cJSON lets all three through, and a file the reference refuses
 * read here (121 of e2e_safetensors.sh's 1,027 one-bit flips). NULL, or why
 * not. header_json checks the rest. */
static const char *header_text(const char *h, size_t n)
{
    bool in_string = false, escaped = false;
    for (size_t i = 0; i < n;) {
        unsigned char c = (unsigned char)h[i];
        if (c < 0x20 && (in_string || (c != '\t' && c != '\n' && c != '\r')))
            return in_string ? "header has a control character inside a string"
                             : "header has a control character";
        int len = str_utf8_len(h + i);
        if (len == 0 || (size_t)len > n - i)
            return "header is not UTF-8";
        if (in_string && !escaped && c == '"')
            in_string = false;
        else if (!in_string && c == '"')
            in_string = true;
        escaped = in_string && !escaped && c == '\\';
        i += (size_t)len;
    }
    return NULL;
}

static bool json_space(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

/* The header's JSON object, as serde_json reads it: nothing but whitespace
 * before or after it. cJSON skips a UTF-8 byte-order mark before the value and
 * stops at its end, so a padding space flipped to '0' (the writer pads with
 * spaces) read here while the reference refused it. NULL, or why not. */
static const char *header_json(const char *h, size_t n, cJSON **out)
{
    size_t i = 0;
    while (i < n && json_space(h[i]))
        i++;
    if (i == n || h[i] != '{')
        return "header is not a JSON object";
    const char *end = NULL;
    *out = cJSON_ParseWithLengthOpts(h + i, n - i, &end, false);
    if (*out == NULL || !cJSON_IsObject(*out))
        return "header is not a JSON object";
    for (; end < h + n; end++)
        if (!json_space(*end))
            return "header has bytes after its JSON object";
    return NULL;
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
    const char *bad_text = header_text(f->raw + 8, (size_t)hlen);
    if (bad_text != NULL)
        return corrupt(f, err, path, bad_text);
    const char *bad_json = header_json(f->raw + 8, (size_t)hlen, &f->head);
    if (bad_json != NULL)
        return corrupt(f, err, path, bad_json);
    const char *data = f->raw + 8 + hlen;
    size_t data_len = f->len - 8 - (size_t)hlen;
    f->tensors = calloc((size_t)cJSON_GetArraySize(f->head) + 1, sizeof(st_tensor));
    if (f->tensors == NULL) {
        safetensors_free(f);
        return err_set(err, TT_ERR_RUNTIME, "out of memory");
    }
    char what[160];
    const char *why = tensors_read(f, data, data_len, what);
    if (why != NULL)
        return corrupt(f, err, path, why);
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
