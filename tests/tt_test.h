/* tt_test.h - a tiny TAP producer for the unit tests, and the file chores
 * they share (a temporary directory, writing a file, big-endian integers, a
 * toy IDX data set and a job on it, the GPUs a GPU test may use).
 *
 * Each check prints one TAP line ("ok 3 - dense backward dx"), so automake's TAP
 * driver counts every check, not every program. tt_done() prints the plan and
 * returns the exit status for main(). A test that cannot set itself up exits
 * 99, which the driver reports as a hard error rather than a failed check.
 * The numerical helpers are in tt_ref.h.
 */
#ifndef TT_TEST_H
#define TT_TEST_H

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/rng.h"

static int tt_test_count, tt_test_failed;

static inline void tt_vreport(int ok, const char *directive, const char *fmt, va_list ap)
{
    tt_test_count++;
    if (!ok)
        tt_test_failed++;
    printf("%sok %d - ", ok ? "" : "not ", tt_test_count);
    vprintf(fmt, ap);
    if (directive)
        printf(" # %s", directive);
    printf("\n");
    fflush(stdout);
}

/* Reports one check; returns cond so callers can stop on failure. */
static inline int tt_ok(int cond, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static inline int tt_ok(int cond, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    tt_vreport(cond, NULL, fmt, ap);
    va_end(ap);
    return cond;
}

/* Reports a check that could not run here, visibly. */
static inline void tt_skip(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static inline void tt_skip(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    tt_vreport(1, "SKIP", fmt, ap);
    va_end(ap);
}

/* Diagnostic line (shown by the TAP driver, not counted). */
static inline void tt_diag(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static inline void tt_diag(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    printf("# ");
    vprintf(fmt, ap);
    printf("\n");
    va_end(ap);
}

static inline int tt_done(void)
{
    printf("1..%d\n", tt_test_count);
    return tt_test_failed ? 1 : 0;
}

/* ---- files ---- */

/* Makes a fresh directory $TMPDIR/tt_<name>.XXXXXX (/tmp without TMPDIR)
 * into dir[len]; exits 99 when it cannot. */
static inline void tt_tmpdir_make(char *dir, size_t len, const char *name)
{
    const char *tmp = getenv("TMPDIR");
    int k = snprintf(dir, len, "%s/tt_%s.XXXXXX", tmp != NULL && tmp[0] != '\0' ? tmp : "/tmp",
                     name);
    if (k < 0 || (size_t)k >= len || strchr(dir, '\'') != NULL || mkdtemp(dir) == NULL) {
        fprintf(stderr, "cannot make a temporary directory for %s\n", name);
        exit(99);
    }
}

/* Removes a directory made by tt_tmpdir_make and all it holds. */
static inline void tt_tmpdir_remove(const char *dir)
{
    char cmd[4200];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        tt_diag("could not remove %s", dir);
}

/* Writes text to dir/name (to name itself when dir is NULL); exits 99 when
 * it cannot. */
static inline void tt_write_file(const char *dir, const char *name, const char *text)
{
    char path[4200];
    snprintf(path, sizeof(path), "%s%s%s", dir ? dir : "", dir ? "/" : "", name);
    FILE *f = fopen(path, "w");
    if (f == NULL || fputs(text, f) < 0 || fclose(f) != 0) {
        perror(path);
        exit(99);
    }
}

/* A 32-bit big-endian integer, as IDX headers hold them. */
static inline void tt_put_be32(FILE *f, uint32_t v)
{
    unsigned char b[4] = {(unsigned char)(v >> 24), (unsigned char)(v >> 16),
                          (unsigned char)(v >> 8), (unsigned char)v};
    fwrite(b, 1, 4, f);
}

/* A learnable toy set of n 8x8 images in IDX files dir/toy-images and
 * dir/toy-labels: label = the row of the brightest pixels (0-7), with noise;
 * the same files every time. Exits 99 when it cannot write them. */
static inline void tt_write_toy_idx(const char *dir, int n)
{
    char path[4200];
    snprintf(path, sizeof(path), "%s/toy-images", dir);
    FILE *fi = fopen(path, "wb");
    snprintf(path, sizeof(path), "%s/toy-labels", dir);
    FILE *fl = fopen(path, "wb");
    if (fi == NULL || fl == NULL) {
        perror(path);
        exit(99);
    }
    tt_put_be32(fi, 0x803);
    tt_put_be32(fi, (unsigned)n);
    tt_put_be32(fi, 8);
    tt_put_be32(fi, 8);
    tt_put_be32(fl, 0x801);
    tt_put_be32(fl, (unsigned)n);
    rng_t rng = rng_make(5, 6, 7);
    for (int i = 0; i < n; i++) {
        int label = (int)rng_below(&rng, 8);
        unsigned char px[64];
        for (int k = 0; k < 64; k++)
            px[k] = (unsigned char)rng_below(&rng, 60);
        for (int x = 0; x < 8; x++)
            px[label * 8 + x] = (unsigned char)(150 + rng_below(&rng, 100));
        fwrite(px, 1, 64, fi);
        unsigned char l = (unsigned char)label;
        fwrite(&l, 1, 1, fl);
    }
    if (fclose(fi) != 0 || fclose(fl) != 0) {
        perror(dir);
        exit(99);
    }
}

/* dir/job.cfg: `model` trained on tt_write_toy_idx's set, batch 24, momentum
 * SGD, seed 3, one epoch of `steps` steps, no callbacks or monitors, batches
 * made inline; its path in path. Tests vary it with --set overrides. */
static inline void tt_write_toy_job(const char *dir, const char *model, int steps, char *path,
                                    size_t len)
{
    char text[2048];
    snprintf(text, sizeof(text),
             "model = \"%s\";\n"
             "seed = 3;\n"
             "dataflow = { source = { type = \"idx\"; images = \"toy-images\"; labels = \"toy-labels\"; };\n"
             "  batch_size = 24; prefetch = { workers = 0; queue = 1; }; };\n"
             "optimizer = { type = \"momentum\"; learning_rate = 0.05; momentum = 0.9; };\n"
             "max_epoch = 1; steps_per_epoch = %d;\n"
             "callbacks = ( ); extra_callbacks = ( ); monitors = ( );\n",
             model, steps);
    tt_write_file(dir, "job.cfg", text);
    snprintf(path, len, "%s/job.cfg", dir);
}

/* make check hides the GPUs from the CPU tests (Makefile.am): a GPU test
 * gives back the GPUs the user made visible (TT_GPUS), before CUDA reads the
 * variable. */
static inline void tt_restore_visible_gpus(void)
{
    const char *kept = getenv("TT_GPUS");
    if (kept == NULL)
        return;
    if (strcmp(kept, "all") == 0)
        unsetenv("CUDA_VISIBLE_DEVICES");
    else
        setenv("CUDA_VISIBLE_DEVICES", kept, 1);
}

#endif
