/* mpi_allreduce.c - Open MPI's own MPI_Allreduce (float sum, in place), timed
 * the way towertrain bench times its collectives: barrier, then the median of
 * n iterations after w warm-up ones on each rank, averaged over the ranks.
 * Built and run by bench/allreduce.
 *
 *   mpirun -np N mpi_allreduce MINBYTES MAXBYTES FACTOR ITERS WARMUP
 * Prints "bytes time_us busbw_GBps" per size on rank 0. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, n;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    if (argc != 6) {
        if (rank == 0)
            fprintf(stderr, "usage: mpi_allreduce MINBYTES MAXBYTES FACTOR ITERS WARMUP\n");
        MPI_Finalize();
        return 2;
    }
    size_t lo = strtoull(argv[1], NULL, 10), hi = strtoull(argv[2], NULL, 10);
    int factor = atoi(argv[3]), iters = atoi(argv[4]), warmup = atoi(argv[5]);
    float *buf = malloc(hi);
    double *us = malloc((size_t)iters * sizeof(double));
    for (size_t bytes = lo; bytes <= hi; bytes *= (size_t)factor) {
        int count = (int)(bytes / sizeof(float));
        for (int it = 0; it < warmup + iters; it++) {
            for (int i = 0; i < count; i++)
                buf[i] = (float)(i % 17 + rank);
            MPI_Barrier(MPI_COMM_WORLD);
            double t0 = MPI_Wtime();
            MPI_Allreduce(MPI_IN_PLACE, buf, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
            if (it >= warmup)
                us[it - warmup] = (MPI_Wtime() - t0) * 1e6;
        }
        qsort(us, (size_t)iters, sizeof(double), cmp);
        double t = us[iters / 2];
        MPI_Allreduce(MPI_IN_PLACE, &t, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
        t /= n;
        if (rank == 0)
            printf("%zu %.2f %.3f\n", bytes, t, (double)bytes / t * 1e-3 * 2.0 * (n - 1) / n);
    }
    free(buf);
    free(us);
    MPI_Finalize();
    return 0;
}
