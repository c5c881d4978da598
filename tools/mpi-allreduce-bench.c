/*
 * mpi-allreduce-bench: MPI_Allreduce (float sum, in place) with the sizes,
 * iterations and output columns of shs-allreduce-bench, for the side-by-side
 * comparison (tools/allreduce-compare). Built only when an MPI is found; no
 * shadowsync here. Run it the way the comparison does, off shared memory:
 *
 *   mpirun -np 4 --mca pml ob1 --mca btl tcp,self \
 *          --mca btl_tcp_if_include IFACE mpi-allreduce-bench -b 64k -e 16m
 */
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int parse_bytes(const char *s, size_t *out)
{
    char *end;
    double v = strtod(s, &end), mult = 1;
    if (*end == 'k' || *end == 'K')
        mult = 1024, end++;
    else if (*end == 'm' || *end == 'M')
        mult = 1024.0 * 1024, end++;
    else if (*end == 'g' || *end == 'G')
        mult = 1024.0 * 1024 * 1024, end++;
    if (end == s || *end != '\0' || v < 0)
        return 0;
    *out = (size_t)(v * mult);
    return 1;
}

static float input(int r, size_t i)
{
    return (float)((int)((i * 7 + (size_t)r * 13) % 17) - 8);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
    size_t min_bytes = 4096, max_bytes = 16u << 20;
    double factor = 4;
    int iters = 20, warmup = 5, rank, size;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    for (int c; (c = getopt(argc, argv, "b:e:f:n:w:")) != -1;) {
        int ok = 1;
        switch (c) {
        case 'b': ok = parse_bytes(optarg, &min_bytes); break;
        case 'e': ok = parse_bytes(optarg, &max_bytes); break;
        case 'f': factor = atof(optarg); break;
        case 'n': iters = atoi(optarg); break;
        case 'w': warmup = atoi(optarg); break;
        default: ok = 0;
        }
        if (!ok || iters < 1 || factor <= 1) {
            if (rank == 0)
                fprintf(stderr, "usage: mpi-allreduce-bench [-b MIN] [-e MAX] [-f FACTOR] "
                                "[-n ITERS] [-w WARMUP]\n");
            MPI_Abort(MPI_COMM_WORLD, 2);
        }
    }
    double *times = malloc((size_t)iters * sizeof(double));
    float *buf = malloc(max_bytes + 64);
    if (times == NULL || buf == NULL)
        MPI_Abort(MPI_COMM_WORLD, 1);
    if (rank == 0) {
        printf("# mpi-allreduce-bench: %d ranks, MPI_Allreduce in place, %d iterations after "
               "%d warmup\n", size, iters, warmup);
        printf("# %10s %12s %6s %6s %11s %12s %12s %7s %10s %10s\n", "size", "count", "type",
               "redop", "time(us)", "algbw(MB/s)", "busbw(MB/s)", "#wrong", "p50(us)",
               "p99(us)");
    }
    for (double b = (double)min_bytes; b <= (double)max_bytes * 1.0001; b *= factor) {
        size_t count = (size_t)b / sizeof(float);
        for (size_t i = 0; i < count; i++)
            buf[i] = input(rank, i);
        MPI_Allreduce(MPI_IN_PLACE, buf, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        double wrong = 0;
        for (size_t i = 0; i < count; i++) {
            float want = 0;
            for (int r = 0; r < size; r++)
                want += input(r, i);
            wrong += buf[i] != want;
        }
        for (size_t i = 0; i < count; i++)
            buf[i] = input(rank, i);
        for (int i = 0; i < warmup; i++)
            MPI_Allreduce(MPI_IN_PLACE, buf, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        MPI_Barrier(MPI_COMM_WORLD);
        for (int i = 0; i < iters; i++) {
            double t0 = MPI_Wtime();
            MPI_Allreduce(MPI_IN_PLACE, buf, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
            times[i] = (MPI_Wtime() - t0) * 1e6;
        }
        MPI_Allreduce(MPI_IN_PLACE, times, iters, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
        MPI_Allreduce(MPI_IN_PLACE, &wrong, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
        double mean = 0;
        for (int i = 0; i < iters; i++) {
            times[i] /= size;
            mean += times[i];
        }
        mean /= iters;
        qsort(times, (size_t)iters, sizeof(double), cmp_double);
        int k99 = (int)ceil(0.99 * iters) - 1;
        double algbw = (double)(count * sizeof(float)) / mean;
        if (rank == 0) {
            printf("%12zu %12zu %6s %6s %11.1f %12.2f %12.2f %7.0f %10.1f %10.1f\n",
                   count * sizeof(float), count, "float", "sum", mean, algbw,
                   algbw * 2.0 * (size - 1) / size, wrong, times[(iters - 1) / 2],
                   times[k99 < 0 ? 0 : k99]);
            fflush(stdout);
        }
    }
    free(buf);
    free(times);
    MPI_Finalize();
    return 0;
}
