/* roof.c - the fp32 roof (roof.h). */
#include "profile/roof.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "backend/cpu/gemm.h"
#include "train/trainer.h"
#include "util/clock.h"
#include "util/fileio.h"
#include "util/threadpool.h"

#define ROOF_N 3072
#define ROOF_CALLS 3

typedef struct {
    const float *a, *b;
    float *c;
    int n;
} roof_job;

/* Task i of k: rows [i n / k, (i+1) n / k) of C = A B, row-major. */
static void roof_task(void *arg, int task, int ntasks)
{
    const roof_job *j = arg;
    int lo = (int)((long)j->n * task / ntasks), hi = (int)((long)j->n * (task + 1) / ntasks);
    if (hi > lo)
        cpu_sgemm(0, 0, hi - lo, j->n, j->n, 1.0f, j->a + (size_t)lo * j->n, j->n, j->b, j->n,
                  0.0f, j->c + (size_t)lo * j->n, j->n);
}

static double roof_measure(int cores)
{
    size_t count = (size_t)ROOF_N * ROOF_N;
    float *a = malloc(count * sizeof(float)), *b = malloc(count * sizeof(float)),
          *c = malloc(count * sizeof(float));
    threadpool_t *tp = threadpool_create(cores);
    double best = 0.0;
    if (a != NULL && b != NULL && c != NULL && tp != NULL) {
        for (size_t i = 0; i < count; i++) { /* sgemm_roof.c's values */
            a[i] = (float)(i % 7) * 0.1f;
            b[i] = (float)(i % 5) * 0.1f;
        }
        roof_job j = {a, b, c, ROOF_N};
        threadpool_run(tp, cores, roof_task, &j); /* untimed: threads, JIT */
        for (int k = 0; k < ROOF_CALLS; k++) {
            double t = clock_s();
            threadpool_run(tp, cores, roof_task, &j);
            double gf = 2.0 * ROOF_N * (double)ROOF_N * ROOF_N / (clock_s() - t) / 1e9;
            best = gf > best ? gf : best;
        }
    }
    if (tp != NULL)
        threadpool_destroy(tp);
    free(a);
    free(b);
    free(c);
    return best;
}

/* "AMD EPYC 9B45" from /proc/cpuinfo, as a file name part; "unknown-cpu". */
static void cpu_model(char *out, size_t len)
{
    snprintf(out, len, "unknown-cpu");
    FILE *f = fopen("/proc/cpuinfo", "r");
    char line[512];
    while (f != NULL && fgets(line, sizeof(line), f) != NULL) {
        char *colon = strchr(line, ':');
        if (strncmp(line, "model name", 10) != 0 || colon == NULL)
            continue;
        size_t k = 0;
        for (const char *p = colon + 1; *p && k + 1 < len; p++) {
            if (isalnum((unsigned char)*p) || *p == '.' || *p == '-')
                out[k++] = *p;
            else if (k > 0 && out[k - 1] != '_')
                out[k++] = '_';
        }
        while (k > 0 && out[k - 1] == '_')
            k--;
        out[k] = '\0';
        break;
    }
    if (f != NULL)
        fclose(f);
}

double roof_fp32_gflops(int *cores, int *from_cache, char *where, size_t where_len,
                        double at_least)
{
    *cores = threadpool_cpu_count();
    *from_cache = 0;
    where[0] = '\0';
    char dir[4096], model[256];
    const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    if (xdg != NULL && xdg[0] == '/')
        snprintf(dir, sizeof(dir), "%s/towertrain", xdg);
    else if (home != NULL && home[0] == '/')
        snprintf(dir, sizeof(dir), "%s/.cache/towertrain", home);
    else
        dir[0] = '\0';
    cpu_model(model, sizeof(model));
    if (dir[0] != '\0')
        snprintf(where, where_len, "%s/roof-fp32-%s-%dcores-%s.txt", dir, model, *cores,
                 cpu_sgemm_library());
    char *text = NULL;
    size_t len = 0;
    tt_err err = {0};
    double cached = 0.0;
    if (where[0] != '\0' && path_exists(where) && file_read_all(where, &text, &len, &err) == 0) {
        cached = strtod(text, NULL);
        free(text);
        if (!isfinite(cached)) /* a damaged cache ("inf", "nan"): none */
            cached = 0.0;
        if (cached > 0.0 && cached >= at_least) {
            *from_cache = 1;
            return cached;
        }
    }
    /* none cached, or one that a measured rate beat: it was taken while
     * something else ran. The cache keeps the best seen. */
    double gf = roof_measure(*cores);
    if (cached > gf) {
        *from_cache = 1;
        return cached;
    }
    char num[64];
    int n = snprintf(num, sizeof(num), "%.1f\n", gf);
    /* a cache that cannot be written is only slower next time */
    if (gf <= 0.0 || where[0] == '\0' || dir_create(dir, &err) != 0 ||
        file_write_atomic(where, num, (size_t)n, &err) != 0)
        where[0] = '\0';
    return gf;
}
