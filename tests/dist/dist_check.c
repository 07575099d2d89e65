/* One rank of a multi-process check, run under cdlrun, mpirun or srun:
 * discovers its place, connects with the given backend and checks every
 * collective against a fixed-order reference (bitwise), so the scripts in
 * tests/dist/ only launch it and look at exit codes.
 *
 *   dist_check [--backend B] [--expect-source S] [--expect-backend B]
 *              [--expect-world N] [--expect-nodes N] [--big] [--stop-rank R PID_FILE]
 *
 * --big adds 1M-float buffers. The reference of a hierarchical backend sums
 * each node in local-rank order, then the node sums in node order. */
#include <math.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cdl/cdl.h>

static int rank = -1;

#define CHECK(cond, ...)                                                                 \
    do {                                                                                 \
        if (!(cond)) {                                                                   \
            fprintf(stderr, "dist_check: rank %d: %s:%d: ", rank, __FILE__, __LINE__);   \
            fprintf(stderr, __VA_ARGS__);                                                \
            fputc('\n', stderr);                                                         \
            return 1;                                                                    \
        }                                                                                \
    } while (0)

static float value(int r, size_t i)
{
    uint64_t z = ((uint64_t)r << 40) + i + 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return ldexpf((float)(z >> 40) * (1.0f / 8388608.0f) - 1.0f, (int)(i % 9) - 4);
}

typedef struct place {
    int32_t node, local;
} place;

/* Fixed-order reference: nodes in order, each node's ranks by local rank
 * (flat backends: one "node" holding everyone, in rank order). */
static float reference(const place *pl, int world, int nodes, size_t i, int average)
{
    float total = 0;
    for (int g = 0; g < nodes; g++) {
        float s = 0;
        int first = 1;
        for (int l = 0; l < world; l++)
            for (int r = 0; r < world; r++)
                if (pl[r].node == g && pl[r].local == l) {
                    s = first ? value(r, i) : s + value(r, i);
                    first = 0;
                }
        total = g == 0 ? s : total + s;
    }
    return average ? total / (float)world : total;
}

int main(int argc, char **argv)
{
    const char *backend = "auto", *want_source = NULL, *want_backend = NULL;
    int want_world = 0, want_nodes = 0, big = 0, stop_rank = -1;
    const char *pid_file = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--backend") && i + 1 < argc)
            backend = argv[++i];
        else if (!strcmp(argv[i], "--expect-source") && i + 1 < argc)
            want_source = argv[++i];
        else if (!strcmp(argv[i], "--expect-backend") && i + 1 < argc)
            want_backend = argv[++i];
        else if (!strcmp(argv[i], "--expect-world") && i + 1 < argc)
            want_world = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--expect-nodes") && i + 1 < argc)
            want_nodes = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--big"))
            big = 1;
        else if (!strcmp(argv[i], "--stop-rank") && i + 2 < argc) {
            stop_rank = atoi(argv[++i]);
            pid_file = argv[++i];
        }
        else {
            fprintf(stderr, "dist_check: unknown argument '%s'\n", argv[i]);
            return 2;
        }
    }
    cdl_rank_info info;
    CHECK(cdl_rank_discover(&info) == 0, "%s", cdl_last_error());
    rank = info.rank;
    CHECK(!want_source || !strcmp(info.source, want_source), "source %s, expected %s",
          info.source, want_source);
    CHECK(!want_world || info.world == want_world, "world %d, expected %d", info.world,
          want_world);
    CHECK(!want_nodes || info.nnodes == want_nodes, "%d nodes, expected %d", info.nnodes,
          want_nodes);
    /* This program is an edge: CDL_TIMEOUT and CDL_SHM_* from cdlrun or the test. */
    cdl_dist_config dc;
    CHECK(cdl_dist_config_from_env(&dc) == 0, "%s", cdl_last_error());
    cdl_dist *d = cdl_dist_create_with(&info, backend, NULL, &dc);
    CHECK(d, "%s", cdl_last_error());
    const char *name = cdl_dist_backend_name(d);
    CHECK(!want_backend || !strcmp(name, want_backend), "backend %s, expected %s", name,
          want_backend);
    if (strstr(name, "mpi")) {
        /* cdl started MPI: a peer's death must come back as an error, not
         * kill this rank with SIGPIPE (Open MPI's TCP writes). */
        struct sigaction sa;
        CHECK(sigaction(SIGPIPE, NULL, &sa) == 0 && sa.sa_handler == SIG_IGN,
              "SIGPIPE is not ignored after the %s backend started MPI", name);
    }
    int world = info.world, hier = !strncmp(name, "hier", 4);
    if (stop_rank >= 0) {
        /* A peer that stops (SIGSTOP) after connecting: the others must fail
         * within one timeout and the job must end, not hang. The stopped
         * rank's pid goes to PID_FILE for the script's cleanup. */
        if (rank == stop_rank) {
            FILE *f = fopen(pid_file, "w");
            CHECK(f, "cannot write %s", pid_file);
            fprintf(f, "%d\n", (int)getpid());
            fclose(f);
            raise(SIGSTOP);
            return 0;
        }
        float x[64] = {0};
        int rc = cdl_dist_allreduce(d, x, 64, 0);
        CHECK(rc == -1, "allreduce completed without rank %d", stop_rank);
        fprintf(stderr, "dist_check: rank %d: (expected) %s\n", rank, cdl_last_error());
        return 3;
    }

    /* Everyone's place, for the reference order. */
    place me = {hier ? info.node_rank : 0, hier ? info.local_rank : info.rank};
    place *pl = cdl_calloc((size_t)world, sizeof *pl);
    CHECK(pl, "no memory");
    CHECK(cdl_dist_allgather(d, &me, pl, sizeof me) == 0, "%s", cdl_last_error());
    int nodes = hier ? info.nnodes : 1;

    size_t sizes[] = {1, 1001, 62006, (size_t)1 << 20};
    int nsizes = big ? 4 : 3;
    float *buf = cdl_malloc(sizes[nsizes - 1] * sizeof *buf);
    CHECK(buf, "no memory");
    for (int k = 0; k < nsizes; k++)
        for (int average = 0; average < 2; average++) {
            size_t n = sizes[k];
            for (size_t i = 0; i < n; i++)
                buf[i] = value(rank, i);
            CHECK(cdl_dist_allreduce(d, buf, n, average) == 0, "%s", cdl_last_error());
            for (size_t i = 0; i < n; i++) {
                float want = reference(pl, world, nodes, i, average);
                CHECK(!memcmp(&buf[i], &want, sizeof want),
                      "allreduce n=%zu average=%d: [%zu] = %.9g, expected %.9g", n, average, i,
                      buf[i], want);
            }
        }
    double m[2] = {rank, 1};
    CHECK(cdl_dist_allreduce_f64(d, m, 2) == 0, "%s", cdl_last_error());
    CHECK(m[0] == world * (world - 1) / 2.0 && m[1] == world, "f64 sums %g %g", m[0], m[1]);
    int root = world - 1;
    for (size_t i = 0; i < 62006; i++)
        buf[i] = rank == root ? (float)i : -1.0f;
    CHECK(cdl_dist_broadcast(d, buf, 62006 * sizeof *buf, root) == 0, "%s", cdl_last_error());
    for (size_t i = 0; i < 62006; i++)
        CHECK(buf[i] == (float)i, "broadcast: [%zu] = %g", i, buf[i]);
    int mine = 1000 + rank, *all = cdl_calloc((size_t)world, sizeof *all);
    CHECK(all, "no memory");
    CHECK(cdl_dist_allgather(d, &mine, all, sizeof mine) == 0, "%s", cdl_last_error());
    for (int r = 0; r < world; r++)
        CHECK(all[r] == 1000 + r, "allgather: [%d] = %d", r, all[r]);
    CHECK(cdl_dist_barrier(d) == 0, "%s", cdl_last_error());
    printf("dist_check: rank %d of %d ok (source %s, backend %s, node %d)\n", rank, world,
           info.source, name, info.node_rank);
    cdl_free(all);
    cdl_free(buf);
    cdl_free(pl);
    cdl_dist_destroy(d);
    return 0;
}
