/* NCCL collectives of lib/dist/coll_nccl.c on the fake GPU, as 2 ranks of
 * cdlrun (tests/fakegpu/coll.sh):
 * - a device buffer still being written by ops queued on the compute
 *   stream (nothing synchronised) is reduced and broadcast only after
 *   them: the fake runs NCCL's stream first unless it waits for an event;
 * - after the communicator is aborted, allgather is an error that says so
 *   (not a call on a dead communicator).
 * With --sync-flags (one process, no ranks) it creates the backend and says
 * how host threads wait for this GPU: replicas packed on one GPU
 * (CDL_REPLICAS_PER_GPU > 1) must block, not spin a core each.
 * Prints one line per check; exits 1 when one fails. */
#include <stdio.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include <cdl/cdl.h>
#include <cdl/dist.h>

#include "lib/dist/dist_gpu.h"

#define N 4096

static int failures;

static void check(int rank, int ok, const char *what)
{
    printf("rank %d: %s %s\n", rank, ok ? "ok  " : "FAIL", what);
    failures += !ok;
}

/* Whether every element of dev[0..N) is want. */
static int all_are(cdl_backend *be, const float *dev, float want)
{
    static float h[N];
    be->ops->to_host(be, h, dev, sizeof h);
    if (be->ops->sync(be))
        return 0;
    for (int i = 0; i < N; i++)
        if (h[i] != want)
            return 0;
    return 1;
}

static int sync_flags(void)
{
    cdl_backend_params p;
    cdl_backend_params_from_env(&p);   /* CDL_REPLICAS_PER_GPU: tests/fakegpu/coll.sh */
    cdl_backend *be = cdl_backend_create_with("cuda", &p);
    unsigned int f = 0;
    if (!be || cudaGetDeviceFlags(&f) != cudaSuccess) {
        fprintf(stderr, "coll_order: %s\n", be ? "cudaGetDeviceFlags failed" : cdl_last_error());
        return 1;
    }
    printf("host waits: %s\n",
           (f & cudaDeviceScheduleMask) == cudaDeviceScheduleBlockingSync ? "block" : "other");
    cdl_backend_destroy(be);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc > 1 && !strcmp(argv[1], "--sync-flags"))
        return sync_flags();
    cdl_rank_info info;
    if (cdl_rank_discover(&info)) {
        fprintf(stderr, "coll_order: %s\n", cdl_last_error());
        return 1;
    }
    cdl_backend_params p;
    cdl_backend_params_init(&p);
    p.device = info.local_rank;
    p.replicas_per_gpu = info.replicas_per_gpu;
    cdl_backend *be = cdl_backend_create_with("cuda", &p);
    cdl_dist *d = be ? cdl_dist_create(&info, "nccl", be, 60) : NULL;
    float *buf = d ? be->ops->alloc(be, N * sizeof(float)) : NULL;
    if (!buf) {
        fprintf(stderr, "coll_order: rank %d: %s\n", info.rank, cdl_last_error());
        return 1;
    }
    int r = info.rank;
    /* Queued, not waited for: the collective must order itself after it. */
    be->ops->fill(be, buf, (float)(r + 1), N);
    check(r, cdl_dist_allreduce(d, buf, N, 0) == 0 && all_are(be, buf, 3.0f),
          "allreduce after queued ops sums what they wrote");
    be->ops->fill(be, buf, (float)(10 + r), N);
    check(r, cdl_dist_broadcast(d, buf, N * sizeof(float), 0) == 0 && all_are(be, buf, 10.0f),
          "broadcast after queued ops sends what they wrote");

    dist_abort(d, "test");
    int in = r, out[2];
    int rc = cdl_dist_allgather(d, &in, out, sizeof in);
    check(r, rc != 0 && strstr(cdl_last_error(), "aborted") != NULL,
          "allgather after an abort says the communicator was aborted");
    if (rc == 0 || !strstr(cdl_last_error(), "aborted"))
        printf("rank %d:      allgather: rc %d, %s\n", r, rc, cdl_last_error());

    be->ops->free(be, buf);
    cdl_dist_destroy(d);
    cdl_backend_destroy(be);
    return failures ? 1 : 0;
}
