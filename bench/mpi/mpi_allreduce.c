/* The reference figure for bench/comm_bandwidth: MPI_Allreduce (sum) of
 * float arrays among the processes mpirun starts, the same sizes and the
 * same statistic as our ring all-reduce (median of `reps` after one
 * warm-up, rank 0's clock, a barrier before each repetition).
 *
 * Usage: mpirun -np P mpi_allreduce REPS FLOATS... ; rank 0 prints one line
 * per size: "mpi_allreduce p=P floats=N median_ms=T". Built only when CMake
 * finds MPI (the benchmark's reference, not a dependency of pipetop). */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

#define REPS_MAX 1000

static int by_value(const void *a, const void *b)
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
    int reps = argc > 1 ? atoi(argv[1]) : 0;
    if (argc < 3 || reps < 1 || reps > REPS_MAX) {
        if (rank == 0)
            fprintf(stderr, "usage: mpirun -np P mpi_allreduce REPS(1..%d) FLOATS...\n", REPS_MAX);
        MPI_Finalize();
        return 2;
    }
    double times[REPS_MAX];
    for (int a = 2; a < argc; a++) {
        long n = atol(argv[a]);
        float *buf = n > 0 ? malloc((size_t)n * sizeof *buf) : NULL;
        if (!buf) {
            fprintf(stderr, "mpi_allreduce: bad size or no memory: %s\n", argv[a]);
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
        for (long i = 0; i < n; i++)
            buf[i] = (float)(i % 7);
        MPI_Allreduce(MPI_IN_PLACE, buf, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        for (int r = 0; r < reps; r++) {
            MPI_Barrier(MPI_COMM_WORLD);
            double t0 = MPI_Wtime();
            MPI_Allreduce(MPI_IN_PLACE, buf, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
            times[r] = MPI_Wtime() - t0;
        }
        qsort(times, (size_t)reps, sizeof times[0], by_value);
        if (rank == 0)
            printf("mpi_allreduce p=%d floats=%ld median_ms=%.4f\n", size, n,
                   times[reps / 2] * 1e3);
        fflush(stdout);
        free(buf);
    }
    MPI_Finalize();
    return 0;
}
