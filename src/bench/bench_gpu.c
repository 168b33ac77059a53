/* bench_gpu.c - `towertrain bench --device gpu --algo nccl`: NCCL's float sum
 * all-reduce over this rank's GPUs (and every rank's under mpirun, one
 * communicator), printed as nccl-tests' all_reduce_perf prints it, with the
 * CPU bench's columns (bench.c).
 *
 * As nccl-tests: one thread queues every local GPU's all-reduce in one
 * ncclGroupStart/End; the time is the average over -n iterations queued back
 * to back after -w warm-up ones (a median would need a host wait after every
 * iteration, and would time the host). Each size is checked first (-c 1):
 * the inputs are small integers, so the sum is exact and so is the check.
 * Rank r uses devices r_local x N .. r_local x N + N - 1 of its machine.
 *
 * Host code of the CUDA build; without CUDA it says so (exit 2).
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "bench/bench.h"
#include "bench/bench_table.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/cuda/cuda_backend.h"
#include "comm/dist.h"
#include "comm/nccl_comm.h"
#include "util/clock.h"

#ifndef HAVE_CUDA

long bench_gpu_run(const bench_opts *o, tt_err *err)
{
    return err_set(err, TT_ERR_USAGE,
                   "bench: --device gpu: no GPU is available (towertrain was built without CUDA)");
}

#else

#include <cuda_runtime_api.h>

#define MAX_GPUS 64

typedef struct {
    int n, ranks;
    int devices[MAX_GPUS];
    float *send[MAX_GPUS], *recv[MAX_GPUS];
    void *streams[MAX_GPUS];
    float *host;          /* one tower's buffer on the host */
    nccl_comm *nccl;
} gpu_bench;

/* The same values as the CPU bench (bench.c): participant g, element i. */
static float bench_value(int g, size_t i)
{
    return (float)((int)((i * 7 + (size_t)g * 3) % 17) - 8);
}

static int cuda_check(cudaError_t rc, int device, const char *what, tt_err *err)
{
    if (rc == cudaSuccess)
        return 0;
    return err_set(err, TT_ERR_RUNTIME, "bench: cuda:%d: %s: %s (%s)", device, what,
                   cudaGetErrorString(rc), cudaGetErrorName(rc));
}

static int sync_all(gpu_bench *b, tt_err *err)
{
    for (int t = 0; t < b->n; t++)
        if (cuda_check(cudaSetDevice(b->devices[t]), b->devices[t], "cudaSetDevice", err) ||
            nccl_comm_wait(b->nccl, t, b->streams[t], true, err) != 0)
            return -1;
    return 0;
}

/* Fills every tower's input (recv when in place) with its pattern. */
static int fill(gpu_bench *b, size_t count, bool in_place, tt_err *err)
{
    int rank = dist_rank();
    for (int t = 0; t < b->n; t++) {
        int g = rank * b->n + t;
        for (size_t i = 0; i < count; i++)
            b->host[i] = bench_value(g, i);
        float *dst = in_place ? b->recv[t] : b->send[t];
        /* on the all-reduce's own stream, so it runs after the copy (the
         * pageable source is staged before the call returns) */
        if (cuda_check(cudaSetDevice(b->devices[t]), b->devices[t], "cudaSetDevice", err) ||
            cuda_check(cudaMemcpyAsync(dst, b->host, count * sizeof(float),
                                       cudaMemcpyHostToDevice, (cudaStream_t)b->streams[t]),
                       b->devices[t], "cudaMemcpyAsync", err))
            return -1;
    }
    return 0;
}

static int reduce_once(gpu_bench *b, size_t count, bool in_place, tt_err *err)
{
    return nccl_comm_allreduce_all(b->nccl, in_place ? b->recv : b->send, b->recv, count,
                                   b->streams, err);
}

/* Wrong elements on every GPU of every rank (a collective under MPI). */
static long count_wrong(gpu_bench *b, size_t count, tt_err *err)
{
    double wrong = 0;
    int all = b->n * b->ranks;
    for (int t = 0; t < b->n; t++) {
        if (cuda_check(cudaSetDevice(b->devices[t]), b->devices[t], "cudaSetDevice", err) ||
            cuda_check(cudaMemcpyAsync(b->host, b->recv[t], count * sizeof(float),
                                       cudaMemcpyDeviceToHost, (cudaStream_t)b->streams[t]),
                       b->devices[t], "cudaMemcpyAsync", err) ||
            nccl_comm_wait(b->nccl, t, b->streams[t], true, err) != 0)
            return -1;
        for (size_t i = 0; i < count; i++) {
            float want = 0;
            for (int g = 0; g < all; g++)
                want += bench_value(g, i);
            wrong += b->host[i] != want;
        }
    }
    dist_sum_doubles(&wrong, 1);
    return (long)wrong;
}

static void gpu_bench_free(gpu_bench *b)
{
    nccl_comm_free(b->nccl);
    for (int t = 0; t < b->n; t++) {
        if (cudaSetDevice(b->devices[t]) != cudaSuccess)
            continue;
        cudaFree(b->send[t]);
        cudaFree(b->recv[t]);
        if (b->streams[t])
            cudaStreamDestroy((cudaStream_t)b->streams[t]);
    }
    cudaGetLastError();
    free(b->host);
}

/* Devices, buffers, streams and the communicator. */
static int gpu_bench_setup(const bench_opts *o, gpu_bench *b, size_t max_count, tt_err *err)
{
    char reason[256] = "";
    int have = backend_cuda_device_count(reason, sizeof(reason));
    if (have == 0)
        return err_set(err, TT_ERR_USAGE, "bench: --device gpu: no GPU is available (%s)", reason);
    int local = dist_local_size(), first;
    b->n = o->towers > 0 ? o->towers : (have / local > 0 ? have / local : 1);
    first = dist_local_rank() * b->n;
    if (b->n > MAX_GPUS || first + b->n > have)
        return err_set(err, TT_ERR_USAGE, "bench: --device gpu: %d GPU(s) per rank for %d "
                       "rank(s) on this machine, but it has %d", b->n, local, have);
    b->ranks = dist_size();
    b->host = malloc(max_count * sizeof(float));
    if (b->host == NULL)
        return err_set(err, TT_ERR_RUNTIME, "out of memory");
    for (int t = 0; t < b->n; t++) {
        int d = b->devices[t] = first + t;
        cuda_device_info info;
        if (backend_cuda_device_info(d, &info, err) != 0)
            return -1;
        if (cuda_check(cudaSetDevice(d), d, "cudaSetDevice", err) ||
            cuda_check(cudaStreamCreateWithFlags((cudaStream_t *)&b->streams[t],
                                                 cudaStreamNonBlocking),
                       d, "cudaStreamCreate", err) ||
            cuda_check(cudaMalloc((void **)&b->send[t], max_count * sizeof(float)), d,
                       "cudaMalloc", err) ||
            cuda_check(cudaMalloc((void **)&b->recv[t], max_count * sizeof(float)), d,
                       "cudaMalloc", err))
            return -1;
        printf("#  rank %2d device %2d: %s (%d.%d, %.1f GiB)\n", dist_rank(), d, info.name,
               info.major, info.minor, (double)info.total_bytes / (1024.0 * 1024.0 * 1024.0));
    }
    b->nccl = nccl_comm_create(b->n, b->devices, err);
    return b->nccl == NULL ? -1 : 0;
}

long bench_gpu_run(const bench_opts *o, tt_err *err)
{
    size_t max_count = o->max_bytes / sizeof(float);
    if (max_count < 1)
        max_count = 1;
    gpu_bench b;
    memset(&b, 0, sizeof(b));
    long total_wrong = 0;
    bench_table table = {0};
    if (gpu_bench_setup(o, &b, max_count, err) != 0 ||
        bench_table_start(&table, b.n * b.ranks, o->check, err) != 0) {
        total_wrong = -1;
        goto out;
    }
    printf("# towertrain bench: float sum all-reduce, %d rank(s) x %d GPU(s), algo nccl (%s)\n",
           b.ranks, b.n, backend_cuda_build_info());
    bench_table_heads();
    size_t counts[BENCH_TABLE_MAX_ROWS];
    int rows = bench_table_counts(o->min_bytes, o->max_bytes, o->factor, counts);
    for (int r = 0; r < rows; r++) {
        size_t count = counts[r], size = count * sizeof(float);
        bench_table_row(&table, "nccl", b.ranks, b.n, size, count);
        for (int place = 0; place < 2; place++) {
            bool in_place = place == 1;
            long wrong = 0;
            if (o->check && (fill(&b, count, in_place, err) != 0 ||
                             reduce_once(&b, count, in_place, err) != 0 ||
                             sync_all(&b, err) != 0 || (wrong = count_wrong(&b, count, err)) < 0))
                goto fail;
            for (int it = 0; it < o->warmup; it++)
                if (reduce_once(&b, count, in_place, err) != 0)
                    goto fail;
            if (sync_all(&b, err) != 0)
                goto fail;
            dist_barrier(); /* the ranks start together */
            double t0 = clock_us();
            for (int it = 0; it < o->iters; it++)
                if (reduce_once(&b, count, in_place, err) != 0)
                    goto fail;
            if (sync_all(&b, err) != 0)
                goto fail;
            /* averaged over the ranks too, as bench.c's (rank_median_us) */
            double us = (clock_us() - t0) / o->iters;
            dist_sum_doubles(&us, 1);
            bench_table_cell(&table, in_place, size, us / b.ranks, wrong);
        }
        bench_table_end_row(&table);
    }
    total_wrong = bench_table_finish(&table, o->json_path, err);
    goto out;
fail:
    printf("\n");
    total_wrong = -1;
out:
    bench_table_free(&table);
    gpu_bench_free(&b);
    return total_wrong;
}

#endif
