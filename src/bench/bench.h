/* bench.h - `towertrain bench`: all-reduce throughput measured and printed the
 * way nccl-tests' all_reduce_perf does (towertrain(1), bench). */
#ifndef TT_BENCH_H
#define TT_BENCH_H

#include <stdbool.h>
#include <stddef.h>

#include "util/cmdline.h"
#include "util/err.h"

typedef struct {
    int towers;            /* --towers, default: the number of cores (GPU: 0, every GPU) */
    char algo[16];         /* ring | naive | hierarchical | all (CPU towers); nccl (GPU) */
    bool gpu;              /* --device gpu: NCCL over this rank's GPUs (bench_gpu.c) */
    size_t min_bytes, max_bytes;
    int factor;            /* -f */
    int iters, warmup;     /* -n, -w */
    bool check;            /* -c */
    const char *json_path; /* --json FILE or NULL */
} bench_opts;

/* Reads the bench options, as main.c's option table found them (names it
 * knows, each with its value); TT_ERR_USAGE on a bad value. */
int bench_parse(const cmdline_opt *opts, int n_opts, bench_opts *o, tt_err *err);

/* Runs the benchmark, prints the table; returns the number of wrong elements
 * seen (0 when correct) or -1 on error. */
long bench_run(const bench_opts *o, tt_err *err);

/* The GPU towers' run of bench_run (--device gpu --algo nccl). */
long bench_gpu_run(const bench_opts *o, tt_err *err);

#endif
