/* test_dataflow.c - the dataflow's determinism rules (towertrain.cfg(5), DATAFLOW) on generated data: prefetch
 * workers 0 and 3 give identical batches over two passes; every pass is a
 * permutation; a dataflow started at step s continues exactly; slices
 * concatenate to the global batch; eval mode covers every sample once.
 * And the pixels' values: an IDX (1 channel) and a CIFAR-10 file (3),
 * read through pixels_to_float (a leading normalize folded into it), give
 * ToTensor's v / 255 and then Normalize's (x - mean) / std in float32,
 * computed here from the files' bytes, bit for bit, whether normalize comes
 * first (folded), before a flip (folded, the flip applied after) or after
 * one (applied as an augment), at every instruction-set level this CPU has;
 * and pixels_to_float itself, for every byte value and every tail length. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend/cpu/cpu_isa.h"
#include "dataflow/dataflow.h"
#include "dataflow/pixels.h"
#include "tt_test.h"

#define N 203 /* samples: not a multiple of the batch, so a remainder is dropped */
#define H 6
#define G 16

static char dir[64];

/* Sample i: pixel 0 holds i % 256 and pixel 1 holds i / 256, so a batch's
 * samples can be identified; the rest vary for the augmentations. */
static uint8_t idx_pixel(int i, int k)
{
    return k == 0 ? (uint8_t)(i % 256) : k == 1 ? (uint8_t)(i / 256) : (uint8_t)((i * 7 + k * 13) % 256);
}

static void write_idx(void)
{
    char path[128];
    snprintf(path, sizeof(path), "%s/img", dir);
    FILE *f = fopen(path, "wb");
    tt_put_be32(f, 0x803);
    tt_put_be32(f, N);
    tt_put_be32(f, H);
    tt_put_be32(f, H);
    for (int i = 0; i < N; i++)
        for (int k = 0; k < H * H; k++)
            fputc(idx_pixel(i, k), f);
    fclose(f);
    snprintf(path, sizeof(path), "%s/lab", dir);
    f = fopen(path, "wb");
    tt_put_be32(f, 0x801);
    tt_put_be32(f, N);
    for (int i = 0; i < N; i++)
        fputc(i % 10, f);
    fclose(f);
}

static dataflow_cfg make_cfg(int workers, int queue, bool augment)
{
    static augment_cfg aug[2];
    aug[0] = (augment_cfg){.type = AUG_RANDOM_CROP, .size = H, .padding = 2};
    aug[1] = (augment_cfg){.type = AUG_FLIP};
    dataflow_cfg c;
    memset(&c, 0, sizeof(c));
    c.source.type = SOURCE_IDX;
    snprintf(c.source.images, sizeof(c.source.images), "%s/img", dir);
    snprintf(c.source.labels, sizeof(c.source.labels), "%s/lab", dir);
    c.shuffle = true;
    c.augment = augment ? aug : NULL;
    c.n_augment = augment ? 2 : 0;
    c.batch_size = G;
    c.workers = workers;
    c.queue = queue;
    return c;
}

#define NC 37 /* CIFAR-10 records */

/* NC records whose pixel k of record i is (i * 31 + k * 7) % 256: every byte
 * value in every channel. */
static void write_cifar(uint8_t *bytes)
{
    char path[128];
    snprintf(path, sizeof(path), "%s/cifar.bin", dir);
    FILE *f = fopen(path, "wb");
    for (int i = 0; i < NC; i++) {
        fputc(i % 10, f);
        for (int k = 0; k < 3072; k++) {
            bytes[i * 3072 + k] = (uint8_t)((i * 31 + k * 7) % 256);
            fputc(bytes[i * 3072 + k], f);
        }
    }
    fclose(f);
}

/* Every sample of ds in order (eval mode, batches of 8): n x floats. */
static float *read_all(const dataset_t *ds, const dataflow_cfg *cfg, size_t floats)
{
    dataflow_t *df;
    tt_err err = {0};
    size_t n = dataset_size(ds);
    float *x = malloc(n * floats * sizeof(float));
    if (dataflow_create(cfg, ds, 3, DATAFLOW_EVAL, 8, 0, 8, &df, &err) != 0 ||
        dataflow_start(df, 0, &err) != 0) {
        free(x);
        return NULL;
    }
    size_t at = 0;
    const batch_t *b;
    while ((b = dataflow_next(df)) != NULL)
        for (int j = 0; j < b->n; j++, at++)
            memcpy(x + at * floats, b->x + (size_t)j * floats, floats * sizeof(float));
    dataflow_free(df);
    return x;
}

static const float norm_mean[3] = {0.4914f, 0.4822f, 0.4465f};
static const float norm_std[3] = {0.247f, 0.2435f, 0.2616f};

/* Normalize's float32 (x - mean) / std on v / 255, channel c. */
static float normalized(uint8_t v, int c)
{
    float u = (float)v / 255.0f;
    return (u - norm_mean[c]) / norm_std[c];
}

/* The byte values of src (C channels of `plane` pixels a sample, bytes as
 * the files hold them) through four pipelines. */
/* pixels_to_float at the current level: every byte value at every offset
 * of the vectors, n = 0..300 (every tail), against the float32 formula. */
static void check_pixels(void)
{
    uint8_t p[300 + 256];
    float x[300];
    for (int i = 0; i < 300 + 256; i++)
        p[i] = (uint8_t)(i * 37 % 256);
    const float ms[3][2] = {{0.0f, 1.0f}, {0.286f, 0.353f}, {-1.5f, 3e-3f}};
    size_t bad = 0;
    for (int q = 0; q < 3; q++)
        for (int start = 0; start < 256; start += 5)
            for (size_t n = 0; n <= 300; n += start % 2 ? 7 : 1) {
                memset(x, 0xff, sizeof(x));
                pixels_to_float(p + start, n, ms[q][0], ms[q][1], x);
                for (size_t k = 0; k < 300; k++) {
                    float want = ((float)p[start + k] / 255.0f - ms[q][0]) / ms[q][1];
                    uint32_t none = 0xffffffffu;
                    bad += k < n ? memcmp(&x[k], &want, 4) != 0 : memcmp(&x[k], &none, 4) != 0;
                }
            }
    tt_ok(bad == 0, "%s: pixels_to_float is (v / 255 - mean) / std in float32 for every byte "
          "and length 0..300, nothing written past n (%zu differ)", cpu_isa_name(cpu_isa()), bad);
}

static void check_values(const source_cfg *src, const uint8_t *bytes, int C, int plane)
{
    dataset_t *ds;
    tt_err err = {0};
    if (!tt_ok(dataset_open(src, 0, 10, &ds, &err) == 0, "open %s: %s",
               src->type == SOURCE_IDX ? "the IDX" : "the CIFAR-10 file", err.msg))
        return;
    augment_cfg norm = {.type = AUG_NORMALIZE, .n_mean = C, .n_std = C};
    for (int c = 0; c < C; c++) {
        norm.mean[c] = norm_mean[c];
        norm.std[c] = norm_std[c];
    }
    augment_cfg flip = {.type = AUG_FLIP};
    augment_cfg pipes[4][2] = {{norm}, {norm, flip}, {flip, norm}, {flip}};
    int n_aug[4] = {1, 2, 2, 1};
    dataflow_cfg cfg = {.source = *src, .batch_size = 8, .workers = 1, .queue = 2};
    size_t n = dataset_size(ds), floats = (size_t)C * plane;
    float *got[4] = {NULL};
    for (int p = 0; p < 4; p++) {
        cfg.augment = pipes[p];
        cfg.n_augment = n_aug[p];
        got[p] = read_all(ds, &cfg, floats);
    }
    cfg.n_augment = 0;
    float *unit = read_all(ds, &cfg, floats);
    size_t bad_unit = 0, bad_norm = 0, bad_flip = 0, flipped = 0;
    for (size_t i = 0; i < n && unit && got[0] && got[1] && got[2] && got[3]; i++)
        for (size_t k = 0; k < floats; k++) {
            size_t at = i * floats + k;
            uint8_t v = bytes[at];
            float u = (float)v / 255.0f, e = normalized(v, (int)(k / (size_t)plane));
            bad_unit += memcmp(&unit[at], &u, sizeof(float)) != 0;
            bad_norm += memcmp(&got[0][at], &e, sizeof(float)) != 0;
            /* the flip moves pixels; normalizing the flipped bytes here */
            float f = (got[3][at] * 255.0f) + 0.5f;
            float fe = normalized((uint8_t)f, (int)(k / (size_t)plane));
            bad_flip += memcmp(&got[1][at], &fe, sizeof(float)) != 0 ||
                        memcmp(&got[2][at], &fe, sizeof(float)) != 0;
            flipped += got[3][at] != u;
        }
    char what[32];
    snprintf(what, sizeof(what), "%s, %s", cpu_isa_name(cpu_isa()),
             src->type == SOURCE_IDX ? "IDX" : "CIFAR-10");
    tt_ok(unit && bad_unit == 0, "%s, no augment: every pixel v / 255 in float32 (%zu differ)",
          what, bad_unit);
    tt_ok(got[0] && bad_norm == 0, "%s, normalize (folded into the conversion): every pixel "
          "(v / 255 - mean[c]) / std[c] in float32 (%zu differ)", what, bad_norm);
    tt_ok(got[1] && got[2] && bad_flip == 0 && flipped > 0, "%s: normalize then flip, and flip "
          "then normalize, are the flipped bytes normalized here (%zu differ; %zu pixels moved)",
          what, bad_flip, flipped);
    for (int p = 0; p < 4; p++)
        free(got[p]);
    free(unit);
    dataset_free(ds);
}

/* Copies `steps` batches from a dataflow started at `first`. */
static float *collect(dataset_t *ds, const dataflow_cfg *cfg, int64_t first, int steps,
                      int offset, int count, int32_t *labels)
{
    dataflow_t *df;
    tt_err err = {0};
    if (dataflow_create(cfg, ds, 11, DATAFLOW_TRAIN, G, offset, count, &df, &err) != 0 ||
        dataflow_start(df, first, &err) != 0)
        return NULL;
    size_t per = (size_t)count * H * H;
    float *x = malloc((size_t)steps * per * sizeof(float));
    for (int s = 0; s < steps; s++) {
        const batch_t *b = dataflow_next(df);
        memcpy(x + s * per, b->x, per * sizeof(float));
        memcpy(labels + s * count, b->y, (size_t)count * sizeof(int32_t));
    }
    dataflow_free(df);
    return x;
}

int main(void)
{
    tt_tmpdir_make(dir, sizeof(dir), "df");
    write_idx();
    dataflow_cfg c0 = make_cfg(0, 1, true);
    dataset_t *ds;
    tt_err err = {0};
    if (!tt_ok(dataset_open(&c0.source, 0, 10, &ds, &err) == 0, "open the generated IDX: %s",
               err.msg))
        return tt_done();
    const int B = N / G, steps = 2 * B;
    int32_t *y0 = malloc(steps * G * sizeof(int32_t)), *y3 = malloc(steps * G * sizeof(int32_t));
    float *x0 = collect(ds, &c0, 0, steps, 0, G, y0);
    for (int q = 2; q <= 8; q += 6) {
        dataflow_cfg c3 = make_cfg(3, q, true);
        float *x3 = collect(ds, &c3, 0, steps, 0, G, y3);
        tt_ok(x3 && memcmp(x0, x3, (size_t)steps * G * H * H * sizeof(float)) == 0 &&
                  memcmp(y0, y3, steps * G * sizeof(int32_t)) == 0,
              "workers 0 and 3 (queue %d): identical batches over two passes with crop and flip",
              q);
        free(x3);
    }

    /* without augmentation pixel 0 and 1 name the sample */
    dataflow_cfg plain = make_cfg(2, 4, false);
    float *xp = collect(ds, &plain, 0, steps, 0, G, y3);
    int perm_ok = 1, differ = 0;
    int seen[2][N];
    memset(seen, 0, sizeof(seen));
    for (int s = 0; s < steps; s++)
        for (int j = 0; j < G; j++) {
            const float *px = xp + ((size_t)s * G + j) * H * H;
            int id = (int)(px[0] * 255.0f + 0.5f) + 256 * (int)(px[1] * 255.0f + 0.5f);
            if (id >= N || seen[s / B][id]++)
                perm_ok = 0;
            if (y3[s * G + j] != id % 10)
                perm_ok = 0;
        }
    for (size_t k = 0; k < (size_t)B * G; k++) {
        const float *a = xp + k * H * H, *b = xp + ((size_t)B * G + k) * H * H;
        differ |= a[0] != b[0] || a[1] != b[1];
    }
    tt_ok(perm_ok, "each pass takes %d batches of distinct samples (remainder dropped), labels "
          "follow their samples", B);
    tt_ok(differ, "the second pass is in another order");

    /* resume: start at step B + 3 and get the same batches as from 0 */
    int32_t *yr = malloc(4 * G * sizeof(int32_t));
    float *xr = collect(ds, &c0, B + 3, 4, 0, G, yr);
    tt_ok(xr && memcmp(xr, x0 + (size_t)(B + 3) * G * H * H, 4 * G * H * H * sizeof(float)) == 0,
          "a dataflow started at step %d continues exactly where one from 0 is", B + 3);
    free(xr);

    /* slices: 4 towers of 4 samples make the global batch */
    int slices_ok = 1;
    for (int t = 0; t < 4; t++) {
        float *xs = collect(ds, &c0, 0, 3, t * 4, 4, yr);
        for (int s = 0; s < 3 && xs; s++)
            slices_ok &= memcmp(xs + (size_t)s * 4 * H * H,
                                x0 + ((size_t)s * G + t * 4) * H * H,
                                4 * H * H * sizeof(float)) == 0;
        free(xs);
    }
    tt_ok(slices_ok, "slices r*towers+t of each global batch concatenate to it");

    /* eval: every sample once, in order, the last batch partial */
    dataflow_cfg ce = make_cfg(2, 3, false);
    ce.batch_size = 50;
    dataflow_t *de;
    int eval_ok = dataflow_create(&ce, ds, 11, DATAFLOW_EVAL, 50, 0, 50, &de, &err) == 0 &&
                  dataflow_batches_per_pass(de) == 5;
    for (int pass = 0; pass < 2 && eval_ok; pass++) {
        dataflow_start(de, 0, &err);
        int next = 0;
        const batch_t *b;
        while ((b = dataflow_next(de)) != NULL)
            for (int j = 0; j < b->n; j++, next++)
                eval_ok &= (int)(b->x[(size_t)j * H * H] * 255.0f + 0.5f) == next % 256;
        eval_ok &= next == N;
    }
    if (eval_ok)
        dataflow_free(de);
    tt_ok(eval_ok, "eval mode: %d samples once each, in order, twice after restarts", N);

    /* a limit below one global batch is refused */
    dataflow_cfg cl = make_cfg(0, 1, false);
    dataset_t *small;
    dataflow_t *dl = NULL;
    tt_err e2 = {0};
    int refused = dataset_open(&cl.source, 10, 10, &small, &e2) == 0 &&
                  dataflow_create(&cl, small, 1, DATAFLOW_TRAIN, G, 0, G, &dl, &e2) != 0 &&
                  e2.code == TT_ERR_USAGE && strstr(e2.msg, "fewer than one global batch");
    tt_ok(refused, "limit 10 below a global batch of %d is refused: %s", G, e2.msg);
    dataset_free(small);

    /* the pixels' values, through pixels_to_float */
    uint8_t idx_bytes[N * H * H];
    for (int i = 0; i < N; i++)
        for (int k = 0; k < H * H; k++)
            idx_bytes[i * H * H + k] = idx_pixel(i, k);
    uint8_t *cifar = malloc((size_t)NC * 3072);
    write_cifar(cifar);
    char cpath[128];
    snprintf(cpath, sizeof(cpath), "%s/cifar.bin", dir);
    char *files[1] = {cpath};
    source_cfg cs = {.type = SOURCE_CIFAR10, .files = files, .n_files = 1};
    for (int level = CPU_ISA_PLAIN; level <= (int)cpu_isa_detected(); level++) {
        cpu_isa_set_for_test((cpu_isa_t)level);
        check_pixels();
        check_values(&c0.source, idx_bytes, 1, H * H);
        check_values(&cs, cifar, 3, 1024);
    }
    free(cifar);

    free(x0);
    free(xp);
    free(y0);
    free(y3);
    free(yr);
    dataset_free(ds);
    tt_tmpdir_remove(dir);
    return tt_done();
}
