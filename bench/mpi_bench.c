/*
 * mpi_bench.c - Open MPI's MPI_Allreduce (default tuning), timed as
 * ringd_bench times ringd, for bench/compare.sh.
 *
 *   mpirun ... mpi_bench BYTES ITERS
 *
 * Every rank reduces BYTES of float32 (at least one element) with
 * MPI_SUM: WARMUP untimed allreduces, then ITERS timed ones, each right
 * after an 8-byte allreduce (untimed) so that the ranks start together.
 * The time of a run is the slowest rank's (an allreduce with MPI_MAX over
 * every run's times, after the loop); rank 0 prints one line: the bytes,
 * the runs, the median and the minimum in microseconds, and whether every
 * result was right (each rank's input is its rank + 1 in every element, so
 * each element of the sum is N(N+1)/2, exact in float32).
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define WARMUP 10

static double now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (argc != 3) {
        if (rank == 0) fprintf(stderr, "usage: mpi_bench BYTES ITERS\n");
        MPI_Finalize();
        return 2;
    }
    long bytes = atol(argv[1]);
    int iters = atoi(argv[2]);
    int count = bytes >= (long)sizeof(float) ? (int)(bytes / (long)sizeof(float)) : 1;
    float *buf = malloc((size_t)count * sizeof(float));
    double *times = malloc((size_t)iters * sizeof(double));
    if (!buf || !times || iters < 1) {
        fprintf(stderr, "mpi_bench: out of memory or no runs\n");
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    const float want = (float)size * (float)(size + 1) / 2;
    int wrong = 0;
    double sync = 0;
    for (int i = -WARMUP; i < iters; i++) {
        for (int k = 0; k < count; k++)
            buf[k] = (float)(rank + 1);
        MPI_Allreduce(MPI_IN_PLACE, &sync, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
        double t0 = now_us();
        MPI_Allreduce(MPI_IN_PLACE, buf, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        double t = now_us() - t0;
        if (i >= 0) times[i] = t;
        for (int k = 0; k < count; k++)
            wrong += buf[k] != want;
    }
    MPI_Allreduce(MPI_IN_PLACE, times, iters, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    MPI_Allreduce(MPI_IN_PLACE, &wrong, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0) {
        qsort(times, (size_t)iters, sizeof *times, cmp_double);
        double median =
            iters % 2 ? times[iters / 2] : (times[iters / 2 - 1] + times[iters / 2]) / 2;
        printf("bytes %ld runs %d median_us %.1f min_us %.1f wrong %d\n",
               (long)count * (long)sizeof(float), iters, median, times[0], wrong);
    }
    free(buf);
    free(times);
    MPI_Finalize();
    return wrong ? 1 : 0;
}
