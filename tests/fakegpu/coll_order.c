/* NCCL collectives of lib/dist/coll_nccl.c on the fake GPU, as 2 ranks of
 * cdlrun (tests/fakegpu/coll.sh):
 * - a device buffer still being written by ops queued on the compute
 *   stream (nothing synchronised) is reduced and broadcast only after
 *   them: the fake runs NCCL's stream first unless it waits for an event;
 * - after the communicator is aborted, allgather is an error that says so
 *   (not a call on a dead communicator).
 * With --threads (2 ranks of cdlrun on 4 fake GPUs, CDL_FAKE_NCCL_LOG=1):
 * the backend is created on one thread, on GPU 2 * rank + 1, and cdl_dist
 * on another thread whose current device is 0: the communicator, its
 * stream and events must be on the backend's GPU all the same (the log
 * says where NCCL made it; coll.sh checks), collectives work from a thread
 * with another device current, each call leaves that thread's device as
 * it found it, and the backend's ops still run after the program itself
 * made another device current on the backend's thread.
 * With --sync-flags (one process, no ranks) it creates the backend and says
 * how host threads wait for this GPU: replicas packed on one GPU
 * (CDL_REPLICAS_PER_GPU > 1) must block, not spin a core each.
 * Prints one line per check; exits 1 when one fails. */
#include <pthread.h>
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

static int current(void)
{
    int dev = -1;
    return cudaGetDevice(&dev) == cudaSuccess ? dev : -1;
}

typedef struct other_thread {
    cdl_rank_info *info;
    cdl_backend *be;
} other_thread;

/* Thread B: device 0 current (a new thread's), the backend on another GPU. */
static void *collectives(void *arg)
{
    other_thread *t = arg;
    cdl_backend *be = t->be;
    int r = t->info->rank;
    check(r, current() == 0, "a new thread starts on device 0");
    cdl_dist *d = cdl_dist_create(t->info, "nccl", be, 60);
    if (!d) {
        printf("rank %d:      cdl_dist_create: %s\n", r, cdl_last_error());
        check(r, 0, "cdl_dist over nccl created on a thread on another device");
        return NULL;
    }
    check(r, current() == 0, "creating cdl_dist leaves the thread's current device");
    float *buf = be->ops->alloc(be, N * sizeof(float));
    if (!buf) {
        printf("rank %d:      alloc: %s\n", r, cdl_last_error());
        failures++;
        cdl_dist_destroy(d);
        return NULL;
    }
    be->ops->fill(be, buf, (float)(r + 1), N);
    /* The ops made the backend's GPU current here; the program goes back. */
    cudaSetDevice(0);
    int rc = cdl_dist_allreduce(d, buf, N, 0);
    if (rc)
        printf("rank %d:      allreduce: %s\n", r, cdl_last_error());
    check(r, rc == 0 && current() == 0,
          "allreduce from a thread on another device works and leaves its device");
    check(r, all_are(be, buf, 3.0f), "allreduce summed the backend's buffers");
    cudaSetDevice(0);
    int in = r, out[2] = {-1, -1};
    rc = cdl_dist_allgather(d, &in, out, sizeof in);
    check(r, rc == 0 && out[0] == 0 && out[1] == 1 && current() == 0,
          "allgather from a thread on another device works and leaves its device");
    be->ops->free(be, buf);
    cdl_dist_destroy(d);
    return NULL;
}

static int threads(void)
{
    cdl_rank_info info;
    if (cdl_rank_discover(&info)) {
        fprintf(stderr, "coll_order: %s\n", cdl_last_error());
        return 1;
    }
    int r = info.rank, gpu = 2 * info.local_rank + 1;
    cdl_backend_params p;
    cdl_backend_params_init(&p);
    p.device = gpu;
    cdl_backend *be = cdl_backend_create_with("cuda", &p);
    if (!be) {
        fprintf(stderr, "coll_order: rank %d: %s\n", r, cdl_last_error());
        return 1;
    }
    check(r, be->ops->device_index && be->ops->device_index(be) == gpu,
          "the backend says which GPU it is on");
    other_thread t = {&info, be};
    pthread_t th;
    if (pthread_create(&th, NULL, collectives, &t) != 0 || pthread_join(th, NULL) != 0) {
        fprintf(stderr, "coll_order: rank %d: cannot run the second thread\n", r);
        return 1;
    }
    /* The program selects another GPU on the backend's own thread: the
     * next op must make the backend's current again (a kernel queued on
     * its stream from device 0 fails). */
    cudaSetDevice(0);
    float *buf = be->ops->alloc(be, N * sizeof(float));
    if (buf) {
        be->ops->fill(be, buf, 7.0f, N);
        check(r, all_are(be, buf, 7.0f), "ops after the program selected another device run");
        be->ops->free(be, buf);
    } else {
        check(r, 0, "alloc after the program selected another device");
    }
    cdl_backend_destroy(be);
    return failures ? 1 : 0;
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
    if (argc > 1 && !strcmp(argv[1], "--threads"))
        return threads();
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
