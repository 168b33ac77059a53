/* fuzz_common.h - what the fuzz targets share (tests/fuzz/fuzz_*.c).
 *
 * Each target is one LLVMFuzzerTestOneInput. `make fuzz` links it with
 * libFuzzer (clang, ASan + UBSan); `make check` links it with replay_main.c
 * and runs it over its seed corpus (tests/fuzz/corpus/<target>), so every
 * input that once crashed stays a regression case without clang.
 *
 * The readers take paths, so an input is written to a file in a private
 * temporary directory first. A target aborts (a finding) when an invariant
 * breaks: an error message that is not one clean line, a resolved job that
 * does not read back to itself, a model the config accepted but the layers
 * refuse.
 */
#ifndef TT_FUZZ_COMMON_H
#define TT_FUZZ_COMMON_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config/job.h"
#include "util/err.h"
#include "util/log.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char fuzz_dir_path[64];

static inline void fuzz_cleanup(void)
{
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", fuzz_dir_path);
    if (fuzz_dir_path[0] != '\0' && system(cmd) != 0)
        fprintf(stderr, "fuzz: could not remove %s\n", fuzz_dir_path);
}

/* The private directory, made on first use and removed at exit. */
static inline const char *fuzz_dir(void)
{
    if (fuzz_dir_path[0] == '\0') {
        const char *tmp = getenv("TMPDIR");
        snprintf(fuzz_dir_path, sizeof(fuzz_dir_path), "%s/tt_fuzz.XXXXXX",
                 tmp && strlen(tmp) < 40 ? tmp : "/tmp");
        if (mkdtemp(fuzz_dir_path) == NULL) {
            perror("fuzz: mkdtemp");
            abort();
        }
        atexit(fuzz_cleanup);
        log_set_quiet(true);
    }
    return fuzz_dir_path;
}

/* Writes data to fuzz_dir()/name; returns the path (static per name slot). */
static inline const char *fuzz_write(const char *name, const void *data, size_t size)
{
    static char paths[8][128];
    static int next;
    char *path = paths[next++ % 8];
    snprintf(path, 128, "%s/%s", fuzz_dir(), name);
    FILE *f = fopen(path, "wb");
    if (f == NULL || (size > 0 && fwrite(data, 1, size, f) != size) || fclose(f) != 0) {
        perror(path);
        abort();
    }
    return path;
}

/* The head several targets' inputs start with: one flags byte and two bytes
 * (little-endian) for the length of a first part, cut to what follows.
 * Advances data and size past the head; false when the input is shorter. */
static inline bool fuzz_head(const uint8_t **data, size_t *size, int *flags, size_t *first)
{
    if (*size < 3)
        return false;
    *flags = (*data)[0];
    *first = (size_t)(*data)[1] | (size_t)(*data)[2] << 8;
    *data += 3;
    *size -= 3;
    if (*first > *size)
        *first = *size;
    return true;
}

/* Pixels a reader scaled from bytes lie in [0, 1] (NaN included in the abort). */
static inline void fuzz_check_pixels(const float *x, size_t n)
{
    for (size_t k = 0; k < n; k++)
        if (!(x[k] >= 0.0f && x[k] <= 1.0f))
            abort();
}

/* An error must be set, one line of printable text (UTF-8 allowed), and a
 * usage error (bad input) unless memory ran out. */
static inline void fuzz_check_error(const tt_err *err, int rc)
{
    if (rc == 0)
        return;
    const unsigned char *m = (const unsigned char *)err->msg;
    if (rc != -1 || m[0] == '\0' || err->code != TT_ERR_USAGE) {
        if (!(err->code == TT_ERR_RUNTIME && strstr(err->msg, "out of memory") != NULL)) {
            fprintf(stderr, "fuzz: bad error (rc %d, code %d): '%s'\n", rc, err->code, err->msg);
            abort();
        }
    }
    for (; *m; m++)
        if (*m < 0x20 || *m == 0x7f) {
            fprintf(stderr, "fuzz: control byte 0x%02x in the message '%s'\n", *m, err->msg);
            abort();
        }
}

/* The resolved job as text (job_write), malloc'd. */
static inline char *fuzz_job_text(const job_t *job)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (f == NULL || job_write(job, f) != 0 || fclose(f) != 0)
        abort();
    return text;
}

/* `validate` prints the resolved job, itself a valid job file: reading it
 * back must give the same job, text for text. */
static inline void fuzz_check_round_trip(const job_t *job)
{
    char *a = fuzz_job_text(job);
    const char *path = fuzz_write("resolved.cfg", a, strlen(a));
    job_t again;
    tt_err err = { 0 };
    if (job_load_resolved(path, NULL, 0, &again, &err) != 0) {
        fprintf(stderr, "fuzz: the resolved job does not load: %s\n%s", err.msg, a);
        abort();
    }
    char *b = fuzz_job_text(&again);
    if (strcmp(a, b) != 0) {
        fprintf(stderr, "fuzz: the resolved job changes when read back:\n%s\n----\n%s", a, b);
        abort();
    }
    free(a);
    free(b);
    job_free(&again);
}

#endif
