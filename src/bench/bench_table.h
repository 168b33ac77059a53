/* bench_table.h - the table `towertrain bench` prints, as nccl-tests'
 * all_reduce_perf prints it, and its --json copy: one place for the CPU
 * towers (bench.c) and the GPU towers (bench_gpu.c). */
#ifndef TT_BENCH_TABLE_H
#define TT_BENCH_TABLE_H

#include <stdbool.h>
#include <stddef.h>

#include <cJSON.h>

#include "util/err.h"

typedef struct {
    cJSON *json;  /* the rows, for --json */
    cJSON *row;   /* the row being printed */
    int peers;    /* n of busbw: towers x ranks */
    bool check;   /* -c 1: #wrong counted */
    long wrong;   /* wrong elements so far */
    double bw_sum; /* busbw of every cell, for the average */
    int bw_n;
} bench_table;

#define BENCH_TABLE_MAX_ROWS 64

/* The rows' element counts, as nccl-tests steps its sizes: min_bytes, times
 * factor (>= 2), ... up to max_bytes; each size a whole number of floats, at
 * least one. Returns how many rows (at most BENCH_TABLE_MAX_ROWS). */
int bench_table_counts(size_t min_bytes, size_t max_bytes, int factor,
                       size_t counts[BENCH_TABLE_MAX_ROWS]);

/* Starts a table of `peers` all-reducing peers. -1 with err when out of
 * memory. */
int bench_table_start(bench_table *t, int peers, bool check, tt_err *err);

/* Prints the column heads (before the rows of each algorithm). */
void bench_table_heads(void);

/* Starts the row of one size: size (B), count, type, redop. */
void bench_table_row(bench_table *t, const char *algo, int ranks, int towers, size_t size,
                     size_t count);

/* One out-of-place or in-place cell of the row: time (us; digits as
 * nccl-tests: 2 decimals below 100 us, 1 below 10 ms), algbw = size / time,
 * busbw = algbw x 2(n-1)/n, #wrong. */
void bench_table_cell(bench_table *t, bool in_place, size_t size, double us, long wrong);

/* Ends the row (a newline). */
void bench_table_end_row(bench_table *t);

/* Prints the footer, writes --json (rank 0; NULL: none) and frees the table.
 * Returns the wrong elements seen, or -1 with err when the file fails. */
long bench_table_finish(bench_table *t, const char *json_path, tt_err *err);

/* Frees a table left early (an error). */
void bench_table_free(bench_table *t);

#endif
