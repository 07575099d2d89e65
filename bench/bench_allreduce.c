/* Allreduce latency and bandwidth: cdl's shm backend beside Open MPI's
 * MPI_Allreduce, in the same run on the same ranks (start with mpirun;
 * bench/run_allreduce.sh runs 2 and 4 ranks).
 *
 * Both reduce float32 sums in place. Time per op is the slowest rank's
 * mean over a timed loop, best of TRIALS loops that alternate between the
 * two; bandwidth is bytes / time (the "algorithm bandwidth"). Targets (issue 4): cdl >= 2x Open MPI's bandwidth
 * at 25M floats and no slower at 62,006 floats. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cdl/cdl.h>

#define TRIALS 5   /* timed loops per size and implementation; the best counts */

typedef struct size_case {
    size_t n;
    int iters;
} size_case;

static double now_s(void)
{
    return MPI_Wtime();
}

/* Seconds per op of one timed loop: the slowest rank's mean over iters. */
static double loop_cdl(cdl_dist *d, float *buf, size_t n, int iters)
{
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = now_s();
    for (int i = 0; i < iters; i++)
        if (cdl_dist_allreduce(d, buf, n, 0)) {
            fprintf(stderr, "bench_allreduce: %s\n", cdl_last_error());
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
    double t = (now_s() - t0) / iters, worst;
    MPI_Allreduce(&t, &worst, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    return worst;
}

static double loop_mpi(float *buf, size_t n, int iters)
{
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = now_s();
    for (int i = 0; i < iters; i++)
        MPI_Allreduce(MPI_IN_PLACE, buf, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    double t = (now_s() - t0) / iters, worst;
    MPI_Allreduce(&t, &worst, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    return worst;
}

static void fmt_time(double s, char *buf, size_t len)
{
    if (s < 1e-3)
        snprintf(buf, len, "%7.1f us", s * 1e6);
    else
        snprintf(buf, len, "%7.2f ms", s * 1e3);
}

int main(int argc, char **argv)
{
    int quick = argc > 1 && !strcmp(argv[1], "--quick");
    cdl_rank_info info;
    if (cdl_rank_discover(&info)) {
        fprintf(stderr, "bench_allreduce: %s\n", cdl_last_error());
        return 1;
    }
    cdl_dist_config dc;   /* CDL_TIMEOUT, CDL_SHM_* */
    cdl_dist *d = cdl_dist_config_from_env(&dc) ? NULL
                                                 : cdl_dist_create_with(&info, "shm", NULL, &dc);
    if (!d) {
        fprintf(stderr, "bench_allreduce: %s\n", cdl_last_error());
        return 1;
    }
    MPI_Init(&argc, &argv);
    int rank, world;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);

    const size_case cases[] = {{62006, quick ? 50 : 200}, {1u << 20, quick ? 10 : 30},
                               {25u << 20, quick ? 1 : 3}};
    float *buf = cdl_calloc(25u << 20, sizeof *buf);   /* zeros: sums stay 0, no denormals */
    if (!buf)
        MPI_Abort(MPI_COMM_WORLD, 1);
    if (rank == 0)
        printf("allreduce of float32 sums in place, %d ranks: time per op (slowest rank, best "
               "of 5 alternating loops), bandwidth = bytes / time\n"
               "      floats |  cdl %-4s      GB/s |  Open MPI     GB/s | cdl speedup\n",
               world, cdl_dist_backend_name(d));
    double speedup[3];
    for (int k = 0; k < 3; k++) {
        size_t n = cases[k].n;
        /* Warm up both (page faults, Open MPI's connection setup). */
        cdl_dist_allreduce(d, buf, n, 0);
        MPI_Allreduce(MPI_IN_PLACE, buf, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        /* Loops alternate, so load from other processes hits both alike. */
        double tc = 1e30, tm = 1e30;
        for (int trial = 0; trial < TRIALS; trial++) {
            double a = loop_cdl(d, buf, n, cases[k].iters), b = loop_mpi(buf, n, cases[k].iters);
            tc = a < tc ? a : tc;
            tm = b < tm ? b : tm;
        }
        speedup[k] = tm / tc;
        if (rank == 0) {
            char a[32], b[32];
            fmt_time(tc, a, sizeof a);
            fmt_time(tm, b, sizeof b);
            double bytes = (double)n * sizeof(float);
            printf("%12zu | %s %8.2f | %s %8.2f | %6.2fx\n", n, a, bytes / tc / 1e9, b,
                   bytes / tm / 1e9, speedup[k]);
        }
    }
    if (rank == 0)
        printf("targets: 25M floats >= 2x Open MPI: %s (%.2fx); 62006 floats no slower: %s "
               "(%.2fx)\n", speedup[2] >= 2 ? "met" : "MISSED", speedup[2],
               speedup[0] >= 1 ? "met" : "MISSED", speedup[0]);
    cdl_free(buf);
    cdl_dist_destroy(d);
    MPI_Finalize();
    return 0;
}
