/* test_safetensors.c - the safetensors writer and reader: round trip, an
 * independent reader (Python's json + struct) agreeing on names, shapes and
 * values, and corrupt, truncated and failed writes refused or harmless. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "checkpoint/safetensors.h"
#include "tt_ref.h"
#include "tt_test.h"

static char dir[256], path[320];

static int write_sample(const char *where, float base, tt_err *err)
{
    float w[6] = {base, 1.5f, -2.25f, 3e-8f, 1e6f, -0.0f};
    float b[4] = {0.1f, 0.2f, 0.3f, base};
    int64_t steps = 1234567890123LL;
    st_tensor t[3] = {
        {"fc0.weight", "F32", 2, {2, 3}, w, sizeof(w)},
        {"fc0.bias", "F32", 1, {4}, b, sizeof(b)},
        {"bn.num_batches_tracked", "I64", 0, {0}, &steps, sizeof(steps)},
    };
    const char *meta[] = {"format", "towertrain/1", "global_step", "42"};
    return safetensors_write(where, t, 3, meta, 2, err);
}

static void copy_mutated(const char *to, long cut, long flip_at)
{
    FILE *in = fopen(path, "rb"), *out = fopen(to, "wb");
    fseek(in, 0, SEEK_END);
    long n = ftell(in);
    fseek(in, 0, SEEK_SET);
    char *buf = malloc((size_t)n);
    if (fread(buf, 1, (size_t)n, in) != (size_t)n)
        n = 0;
    if (flip_at >= 0)
        buf[flip_at < 0 ? n + flip_at : flip_at] ^= 0x10;
    fwrite(buf, 1, (size_t)(n - cut), out);
    free(buf);
    fclose(in);
    fclose(out);
}

/* A safetensors file of a header of len bytes and `data` bytes of data,
 * first_byte then zeros. */
static void raw_file_len(char *out, size_t n, const char *name, const char *header, size_t len,
                         size_t data, int first_byte)
{
    snprintf(out, n, "%s/%s.safetensors", dir, name);
    FILE *f = fopen(out, "wb");
    unsigned char le[8];
    for (int b = 0; b < 8; b++)
        le[b] = (unsigned char)((uint64_t)len >> (8 * b));
    fwrite(le, 1, 8, f);
    fwrite(header, 1, len, f);
    for (size_t i = 0; i < data; i++)
        fputc(i == 0 ? first_byte : 0, f);
    fclose(f);
}

/* A safetensors file of a given header and `data` zero bytes of data. */
static void raw_file(char *out, size_t n, const char *name, const char *header, size_t data)
{
    raw_file_len(out, n, name, header, strlen(header), data, 0);
}

static void expect_refused(const char *what, const char *file, const char *needle)
{
    safetensors_file *f = NULL;
    tt_err err = {0};
    int rc = safetensors_read(file, &f, &err);
    tt_ok(rc != 0 && err.code == TT_ERR_USAGE && strstr(err.msg, needle) != NULL,
          "%s refused: %s", what, err.msg);
    safetensors_free(f);
}

int main(void)
{
    tt_tmpdir_make(dir, sizeof(dir), "st");
    snprintf(path, sizeof(path), "%s/model-42.safetensors", dir);
    tt_err err = {0};
    tt_ok(write_sample(path, 0.5f, &err) == 0, "write: %s", err.msg[0] ? err.msg : "ok");

    safetensors_file *f = NULL;
    tt_ok(safetensors_read(path, &f, &err) == 0, "read back: %s", err.msg[0] ? err.msg : "ok");
    if (f != NULL) {
        const st_tensor *w = safetensors_find(f, "fc0.weight");
        const st_tensor *s = safetensors_find(f, "bn.num_batches_tracked");
        tt_ok(safetensors_count(f) == 3, "three tensors");
        tt_ok(w && w->ndim == 2 && w->shape[0] == 2 && w->shape[1] == 3 &&
                  ((const float *)w->data)[0] == 0.5f && ((const float *)w->data)[4] == 1e6f,
              "F32 [2, 3] tensor round-trips");
        tt_ok(s && s->ndim == 0 && strcmp(s->dtype, "I64") == 0 &&
                  *(const int64_t *)s->data == 1234567890123LL,
              "I64 scalar round-trips");
        const char *fmt = safetensors_meta(f, "format"), *crc = safetensors_meta(f, "data_crc32c");
        tt_ok(fmt && strcmp(fmt, "towertrain/1") == 0, "metadata format");
        tt_ok(crc && strlen(crc) == 8 && strspn(crc, "0123456789abcdef") == 8,
              "data_crc32c is 8 lowercase hex digits (%s)", crc ? crc : "none");
        safetensors_free(f);
    }

    /* an independent reader: Python's json and struct, no safetensors code */
    const char *py = tt_python("json, struct");
    char cmd[2048];
    snprintf(cmd, sizeof(cmd),
             "'%s' -c 'import json,struct,sys; b=open(sys.argv[1],\"rb\").read(); "
             "n=struct.unpack(\"<Q\",b[:8])[0]; h=json.loads(b[8:8+n]); d=b[8+n:]; "
             "t=h[\"fc0.weight\"]; lo,hi=t[\"data_offsets\"]; v=struct.unpack(\"<6f\",d[lo:hi]); "
             "assert t[\"shape\"]==[2,3] and t[\"dtype\"]==\"F32\" and v[2]==-2.25, v; "
             "s=h[\"bn.num_batches_tracked\"]; lo,hi=s[\"data_offsets\"]; "
             "assert s[\"shape\"]==[] and struct.unpack(\"<q\",d[lo:hi])[0]==1234567890123; "
             "assert (8+n)%%8==0 and h[\"__metadata__\"][\"global_step\"]==\"42\"' '%s'",
             py ? py : "", path);
    if (py != NULL)
        tt_ok(system(cmd) == 0, "an independent reader (python json + struct) agrees");
    else
        tt_skip("independent python reader: no python3 ($PYTHON3 or /usr/bin/python3)");

    char bad[352];
    snprintf(bad, sizeof(bad), "%s/truncated.safetensors", dir);
    copy_mutated(bad, 5, -1);
    expect_refused("a truncated file", bad, "corrupt or truncated");
    snprintf(bad, sizeof(bad), "%s/flipped-data.safetensors", dir);
    copy_mutated(bad, 0, 8 + 300);
    safetensors_file *probe = NULL;
    tt_err e2 = {0};
    /* the flip may land in the header padding or the data: either is refused */
    int rc = safetensors_read(bad, &probe, &e2);
    tt_ok(rc != 0 && e2.code == TT_ERR_USAGE, "a flipped bit is refused: %s", e2.msg);
    safetensors_free(probe);
    snprintf(bad, sizeof(bad), "%s/flipped-header.safetensors", dir);
    copy_mutated(bad, 0, 9);
    expect_refused("a flipped header byte", bad, "corrupt or truncated");
    snprintf(bad, sizeof(bad), "%s/tiny.safetensors", dir);
    FILE *t = fopen(bad, "wb");
    fputs("abc", t);
    fclose(t);
    expect_refused("a 3-byte file", bad, "shorter than its 8-byte header");
    snprintf(bad, sizeof(bad), "%s/missing.safetensors", dir);
    expect_refused("a missing file", bad, "missing.safetensors");

    /* headers that lie: refused before anything is sized from them */
    raw_file(bad, sizeof(bad), "huge", "{\"w\":{\"dtype\":\"F32\",\"shape\":[1048576,1048576],"
             "\"data_offsets\":[0,16]}}", 16);
    expect_refused("a header claiming 2^40 elements", bad,
                   "tensor 'w' claims 1099511627776 elements, more than the 16 bytes of data hold");
    /* 2^32 x 2^32 F32 elements: 2^66 bytes, 0 in 64-bit arithmetic */
    raw_file(bad, sizeof(bad), "wrap", "{\"w\":{\"dtype\":\"F32\",\"shape\":[4294967296,"
             "4294967296],\"data_offsets\":[0,0]},\"b\":{\"dtype\":\"F32\",\"shape\":[2],"
             "\"data_offsets\":[0,8]}}", 8);
    expect_refused("a shape whose size overflows 64 bits", bad, "claims over 18446744073709551615");
    raw_file(bad, sizeof(bad), "overlap", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],"
             "\"data_offsets\":[0,8]},\"b\":{\"dtype\":\"F32\",\"shape\":[2],"
             "\"data_offsets\":[0,8]}}", 16);
    expect_refused("two tensors sharing bytes", bad, "overlap or leave gaps");
    raw_file(bad, sizeof(bad), "twice", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],"
             "\"data_offsets\":[0,4]},\"a\":{\"dtype\":\"F32\",\"shape\":[1],"
             "\"data_offsets\":[4,8]}}", 8);
    expect_refused("a tensor named twice", bad, "tensor 'a' appears twice");
    raw_file(bad, sizeof(bad), "frac", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1.5],"
             "\"data_offsets\":[0,4]}}", 4);
    expect_refused("a fractional dimension", bad, "bad shape");
    /* header text the reference (serde_json) refuses and cJSON takes */
#define ONE_F32 "\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}"
    raw_file(bad, sizeof(bad), "utf8", "{\"\xee" ONE_F32, 4);
    expect_refused("a name that is not UTF-8", bad, "header is not UTF-8");
    raw_file(bad, sizeof(bad), "ctl", "{\"a\x12" ONE_F32, 4);
    expect_refused("a control character in a name", bad, "control character inside a string");
    static const char nul_pad[] = "{\"a" ONE_F32 "\0\0";
    raw_file_len(bad, sizeof(bad), "nul", nul_pad, sizeof(nul_pad) - 1, 4, 0);
    expect_refused("NUL padding", bad, "header has a control character");
    static const char cut[] = "{\"a" ONE_F32 " \xc3"; /* its second byte in the data */
    raw_file_len(bad, sizeof(bad), "cut", cut, sizeof(cut) - 1, 4, 0xa9);
    expect_refused("a character cut by the header's end", bad, "header is not UTF-8");
    raw_file(bad, sizeof(bad), "after", "{\"a" ONE_F32 " 0   ", 4);
    expect_refused("a digit after the object", bad, "header has bytes after its JSON object");
    raw_file(bad, sizeof(bad), "bom", "\xef\xbb\xbf{\"a" ONE_F32, 4);
    expect_refused("a byte-order mark", bad, "header is not a JSON object");
    raw_file(bad, sizeof(bad), "ws", "{\n\t\"caf\xc3\xa9 \\\"x\\\\" ONE_F32 " \r\n\t", 4);
    f = NULL;
    err = (tt_err){0};
    tt_ok(safetensors_read(bad, &f, &err) == 0 && safetensors_find(f, "caf\xc3\xa9 \"x\\") != NULL,
          "JSON's whitespace, UTF-8 and escaped quotes are read (%s)", err.msg);
    safetensors_free(f);
#undef ONE_F32
    raw_file(bad, sizeof(bad), "empty", "{\"z\":{\"dtype\":\"F32\",\"shape\":[0],"
             "\"data_offsets\":[4,4]},\"a\":{\"dtype\":\"F32\",\"shape\":[2],"
             "\"data_offsets\":[0,8]}}", 8);
    f = NULL;
    err = (tt_err){0};
    tt_ok(safetensors_read(bad, &f, &err) == 0 && safetensors_count(f) == 2,
          "an empty tensor inside the data is fine (%s)", err.msg);
    safetensors_free(f);

    /* a write that fails half-way leaves the previous file intact */
    setenv("TT_FAULT_WRITE", "1", 1);
    tt_err werr = {0};
    int wrc = write_sample(path, 9.0f, &werr);
    unsetenv("TT_FAULT_WRITE");
    tt_ok(wrc != 0 && werr.code == TT_ERR_RUNTIME, "an injected write failure is reported: %s",
          werr.msg);
    f = NULL;
    tt_err rerr = {0};
    int ok = safetensors_read(path, &f, &rerr) == 0 && f &&
             ((const float *)safetensors_find(f, "fc0.weight")->data)[0] == 0.5f;
    tt_ok(ok, "after the failed write the previous file still loads, unchanged");
    safetensors_free(f);

    tt_tmpdir_remove(dir);
    return tt_done();
}
