#include "bench/bench_table.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/dist.h"
#include "util/fileio.h"

int bench_table_counts(size_t min_bytes, size_t max_bytes, int factor,
                       size_t counts[BENCH_TABLE_MAX_ROWS])
{
    int rows = 0;
    for (size_t bytes = min_bytes; bytes <= max_bytes && rows < BENCH_TABLE_MAX_ROWS;) {
        counts[rows++] = bytes < sizeof(float) ? 1 : bytes / sizeof(float);
        if (bytes == 0 || bytes > max_bytes / (size_t)factor)
            break;
        bytes *= (size_t)factor;
    }
    return rows;
}

int bench_table_start(bench_table *t, int peers, bool check, tt_err *err)
{
    memset(t, 0, sizeof(*t));
    t->peers = peers;
    t->check = check;
    if ((t->json = cJSON_CreateArray()) == NULL)
        return err_set(err, TT_ERR_RUNTIME, "out of memory");
    return 0;
}

void bench_table_heads(void)
{
    printf("#                                       out-of-place                       "
           "in-place\n");
    printf("# %10s %12s %6s %6s %9s %8s %8s %6s %9s %8s %8s %6s\n", "size", "count", "type",
           "redop", "time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw", "#wrong");
    printf("# %10s %12s %6s %6s %9s %8s %8s %6s %9s %8s %8s %6s\n", "(B)", "(elements)", "", "",
           "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "");
}

void bench_table_row(bench_table *t, const char *algo, int ranks, int towers, size_t size,
                     size_t count)
{
    printf("  %10zu %12zu %6s %6s", size, count, "float", "sum");
    t->row = cJSON_CreateObject();
    cJSON_AddStringToObject(t->row, "algo", algo);
    cJSON_AddNumberToObject(t->row, "ranks", ranks);
    cJSON_AddNumberToObject(t->row, "towers", towers);
    cJSON_AddNumberToObject(t->row, "size", (double)size);
    cJSON_AddNumberToObject(t->row, "count", (double)count);
    cJSON_AddItemToArray(t->json, t->row);
}

void bench_table_cell(bench_table *t, bool in_place, size_t size, double us, long wrong)
{
    double algbw = (double)size / us * 1e-3; /* bytes/us -> GB/s */
    double busbw = algbw * 2.0 * (t->peers - 1) / t->peers;
    int decimals = us < 100.0 ? 2 : us < 10000.0 ? 1 : 0;
    char wrong_text[24] = "N/A";
    if (t->check) {
        snprintf(wrong_text, sizeof(wrong_text), "%ld", wrong);
        t->wrong += wrong;
    }
    printf(" %9.*f %8.2f %8.2f %6s", decimals, us, algbw, busbw, wrong_text);
    t->bw_sum += busbw;
    t->bw_n++;
    cJSON *r = cJSON_AddObjectToObject(t->row, in_place ? "in_place" : "out_of_place");
    cJSON_AddNumberToObject(r, "time_us", us);
    cJSON_AddNumberToObject(r, "algbw", algbw);
    cJSON_AddNumberToObject(r, "busbw", busbw);
    if (t->check)
        cJSON_AddNumberToObject(r, "wrong", (double)wrong);
}

void bench_table_end_row(bench_table *t)
{
    (void)t;
    printf("\n");
}

long bench_table_finish(bench_table *t, const char *json_path, tt_err *err)
{
    long wrong = t->wrong;
    printf("# Out of bounds values : %ld %s\n", wrong, wrong ? "ERROR" : "OK");
    printf("# Avg bus bandwidth    : %g \n", t->bw_n ? t->bw_sum / t->bw_n : 0.0);
    if (json_path != NULL && dist_rank() == 0) {
        char *text = cJSON_Print(t->json);
        if (text == NULL || file_write_atomic(json_path, text, strlen(text), err) != 0)
            wrong = -1;
        if (text == NULL)
            err_set(err, TT_ERR_RUNTIME, "out of memory");
        free(text);
    }
    bench_table_free(t);
    return wrong;
}

void bench_table_free(bench_table *t)
{
    cJSON_Delete(t->json);
    t->json = t->row = NULL;
}
