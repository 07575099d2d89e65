/* NCCL collectives among GPUs (one rank per GPU; replicas packed on one GPU
 * reduce over shm first, then their leaders use this, see coll_hier.c).
 * Compiled when configure finds NCCL.
 *
 * The communicator is created non-blocking and every operation is waited by
 * polling its stream against the deadline, so a dead peer makes this rank
 * fail (ncclCommAbort) instead of hanging. Host buffers (metrics, the
 * hierarchical leaders' sums) are staged through a device scratch buffer.
 * DDP's gradient buckets are enqueued instead (enqueue_allreduce, join):
 * stream-ordered with the compute stream through events, no host wait.
 * A collective on device buffers first makes NCCL's stream wait (an event)
 * for the work queued so far on the compute stream, so a buffer an op is
 * still writing is never reduced stale. Every copy is checked and every
 * wait, copies included, is bounded by the timeout (CDL_TIMEOUT).
 *
 * Everything lives on the compute backend's GPU, whichever thread calls:
 * the communicator, stream, events and stage are created with that GPU
 * made current (NCCL takes the current device), and every entry makes it
 * current around its CUDA and NCCL calls, then gives the calling thread
 * its own current device back (device_guard). */
#include <sched.h>
#include <stdio.h>
#include <string.h>

#include <cuda_runtime.h>
/* nccl.h declares some functions as f() (no prototype). */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstrict-prototypes"
#include <nccl.h>
#pragma GCC diagnostic pop

#include <cdl/cdl.h>

#include "coll.h"
#include "util.h"

#define STAGE (8u << 20)

typedef struct nccl_coll {
    coll base;
    ncclComm_t comm;
    cudaStream_t stream;
    void *dev;                  /* STAGE bytes of device scratch */
    cudaEvent_t ready, done;    /* enqueue_allreduce: compute -> nccl -> compute stream */
    cudaStream_t compute;       /* the compute backend's stream (NULL: host buffers only) */
    cudaEvent_t queued;         /* recorded on compute before a device collective */
    double timeout;
    int host_buffers;
    int device;                 /* the backend's GPU (cudaSetDevice's index); -1: the current */
    int (*stop)(void);          /* the communicator's setup only: the bootstrap's stop
                                 * (boot.h); NULL afterwards */
    int world_rank;             /* for messages */
} nccl_coll;

static int nccl_fail(const char *what, ncclResult_t r)
{
    return cdl_error("NCCL %s failed: %s", what, ncclGetErrorString(r));
}

static int cuda_fail(const char *what, cudaError_t e)
{
    return cdl_error("CUDA %s failed: %s", what, cudaGetErrorString(e));
}

/* Makes `device` (-1: none, the current one stays) current on the calling
 * thread; *saved: the device to give back (device_restore). */
static int device_guard(int device, int *saved, const char *what)
{
    *saved = -1;
    if (device < 0)
        return 0;
    cudaError_t e = cudaGetDevice(saved);
    if (e == cudaSuccess && *saved == device)
        return 0;
    if (e != cudaSuccess)
        *saved = -1;
    e = cudaSetDevice(device);
    if (e != cudaSuccess)
        return cdl_error("NCCL %s: cudaSetDevice(%d), the compute backend's GPU, failed: %s", what,
                         device, cudaGetErrorString(e));
    return 0;
}

static void device_restore(int device, int saved)
{
    if (device >= 0 && saved >= 0 && saved != device)
        (void)cudaSetDevice(saved);
}

/* The communicator's asynchronous state: 0 with *ready (1: idle, 0: an
 * operation is still being enqueued); -1 after aborting it on an error. */
static int comm_state(nccl_coll *n, const char *what, int *ready)
{
    if (!n->comm)
        return cdl_error("NCCL %s: the communicator was aborted after an earlier failure", what);
    ncclResult_t st;
    ncclResult_t r = ncclCommGetAsyncError(n->comm, &st);
    if (r != ncclSuccess || (st != ncclSuccess && st != ncclInProgress)) {
        ncclCommAbort(n->comm);
        n->comm = NULL;
        return nccl_fail(what, r != ncclSuccess ? r : st);
    }
    *ready = st == ncclSuccess;
    return 0;
}

/* Waits for the communicator to be ready (or an operation on the stream to
 * finish) until the deadline; aborts the communicator on failure. */
static int nccl_wait(nccl_coll *n, int stream_too, const char *what)
{
    double deadline = dist_now() + n->timeout, next_stop = 0;
    for (;;) {
        int done = 0;
        if (comm_state(n, what, &done))
            return -1;
        if (done && stream_too) {
            cudaError_t e = cudaStreamQuery(n->stream);
            if (e != cudaSuccess && e != cudaErrorNotReady)
                return cuda_fail(what, e);
            done = e == cudaSuccess;
        }
        if (done)
            return 0;
        double now = dist_now();
        /* Every 0.1 s: this process was asked to stop (a peer that never
         * comes holds the setup until the timeout). Nobody was lost. */
        if (n->stop && now >= next_stop) {
            next_stop = now + 0.1;
            if (n->stop()) {
                ncclCommAbort(n->comm);
                n->comm = NULL;
                return cdl_error("rank %d was asked to stop while it waited in NCCL %s (a "
                                 "peer had not joined); it stopped waiting", n->world_rank,
                                 what);
            }
        }
        if (now > deadline) {
            ncclCommAbort(n->comm);
            n->comm = NULL;
            dist_note_peer_lost();
            return cdl_error("NCCL %s did not complete within %.0f s: a peer is missing or dead",
                             what, n->timeout);
        }
        sched_yield();
    }
}

/* One checked copy on NCCL's stream. */
static int copy(nccl_coll *n, void *dst, const void *src, size_t bytes, enum cudaMemcpyKind kind,
                const char *what)
{
    cudaError_t e = cudaMemcpyAsync(dst, src, bytes, kind, n->stream);
    return e == cudaSuccess ? 0 : cuda_fail(what, e);
}

/* NCCL's stream waits (on the GPU) for the work queued so far on the
 * compute stream: the device buffer may still be being written. */
static int after_compute(nccl_coll *n, const char *what)
{
    if (!n->compute)
        return 0;
    cudaError_t e = cudaEventRecord(n->queued, n->compute);
    if (e == cudaSuccess)
        e = cudaStreamWaitEvent(n->stream, n->queued, 0);
    return e == cudaSuccess ? 0 : cuda_fail(what, e);
}

static int is_device(const void *p)
{
    struct cudaPointerAttributes a;
    if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    return a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged;
}

static ncclDataType_t nccl_type(coll_dtype t)
{
    return t == COLL_F32 ? ncclFloat32 : ncclFloat64;
}

static int run_allreduce(nccl_coll *n, void *dev, size_t count, coll_dtype t, int average)
{
    if (!n->comm)
        return cdl_error("NCCL communicator was aborted after an earlier failure");
    ncclResult_t r = ncclAllReduce(dev, dev, count, nccl_type(t), average ? ncclAvg : ncclSum,
                                   n->comm, n->stream);
    if (r != ncclSuccess && r != ncclInProgress)
        return nccl_fail("allreduce", r);
    return nccl_wait(n, 1, "allreduce");
}

static int n_allreduce_here(coll *c, void *buf, size_t count, coll_dtype t, int average)
{
    nccl_coll *n = (nccl_coll *)c;
    if (is_device(buf))
        return after_compute(n, "event before the allreduce") ||
                       run_allreduce(n, buf, count, t, average)
                   ? -1
                   : 0;
    size_t es = coll_dtype_size(t), per = STAGE / es;
    char *p = buf;
    for (size_t off = 0; off < count; off += per) {
        size_t m = count - off < per ? count - off : per;
        if (copy(n, n->dev, p + off * es, m * es, cudaMemcpyHostToDevice,
                 "copy to the allreduce stage") ||
            run_allreduce(n, n->dev, m, t, average) ||
            copy(n, p + off * es, n->dev, m * es, cudaMemcpyDeviceToHost,
                 "copy from the allreduce stage") ||
            nccl_wait(n, 1, "copy from the allreduce stage"))
            return -1;
    }
    return 0;
}

static int run_bcast(nccl_coll *n, void *dev, size_t bytes, int root)
{
    if (!n->comm)
        return cdl_error("NCCL communicator was aborted after an earlier failure");
    ncclResult_t r = ncclBroadcast(dev, dev, bytes, ncclChar, root, n->comm, n->stream);
    if (r != ncclSuccess && r != ncclInProgress)
        return nccl_fail("broadcast", r);
    return nccl_wait(n, 1, "broadcast");
}

static int n_broadcast_here(coll *c, void *buf, size_t bytes, int root)
{
    nccl_coll *n = (nccl_coll *)c;
    if (is_device(buf))
        return after_compute(n, "event before the broadcast") || run_bcast(n, buf, bytes, root)
                   ? -1
                   : 0;
    char *p = buf;
    for (size_t off = 0; off < bytes; off += STAGE) {
        size_t m = bytes - off < STAGE ? bytes - off : STAGE;
        if ((c->rank == root && copy(n, n->dev, p + off, m, cudaMemcpyHostToDevice,
                                     "copy to the broadcast stage")) ||
            run_bcast(n, n->dev, m, root) ||
            copy(n, p + off, n->dev, m, cudaMemcpyDeviceToHost, "copy from the broadcast stage") ||
            nccl_wait(n, 1, "copy from the broadcast stage"))
            return -1;
    }
    return 0;
}

static int n_barrier_here(coll *c)
{
    nccl_coll *n = (nccl_coll *)c;
    return run_allreduce(n, n->dev, 1, COLL_F32, 0);
}

/* Small host buffers: staged whole. */
static int n_allgather_here(coll *c, const void *in, void *out, size_t bytes)
{
    nccl_coll *n = (nccl_coll *)c;
    if ((size_t)c->size * bytes + bytes > STAGE)
        return cdl_error("NCCL allgather of %zu bytes per rank exceeds the %u-byte stage", bytes,
                         STAGE);
    if (!n->comm)
        return cdl_error("NCCL communicator was aborted after an earlier failure");
    char *dev = n->dev;
    if (copy(n, dev, in, bytes, cudaMemcpyHostToDevice, "copy to the allgather stage"))
        return -1;
    ncclResult_t r = ncclAllGather(dev, dev + bytes, bytes, ncclChar, n->comm, n->stream);
    if (r != ncclSuccess && r != ncclInProgress)
        return nccl_fail("allgather", r);
    if (nccl_wait(n, 1, "allgather"))
        return -1;
    return copy(n, out, dev + bytes, (size_t)c->size * bytes, cudaMemcpyDeviceToHost,
                "copy from the allgather stage") ||
                   nccl_wait(n, 1, "copy from the allgather stage")
               ? -1
               : 0;
}

static void n_destroy(coll *c)
{
    nccl_coll *n = (nccl_coll *)c;
    int saved;
    (void)device_guard(n->device, &saved, "teardown");   /* failed: frees what it can */
    if (n->comm)
        ncclCommDestroy(n->comm);
    if (n->stream)
        cudaStreamDestroy(n->stream);
    if (n->dev)
        cudaFree(n->dev);
    if (n->ready)
        cudaEventDestroy(n->ready);
    if (n->done)
        cudaEventDestroy(n->done);
    if (n->queued)
        cudaEventDestroy(n->queued);
    device_restore(n->device, saved);
    cdl_free(n);
}

/* Gradient buckets while backward runs: the NCCL stream waits for the
 * compute stream's work so far, then reduces; nothing waits on the host
 * but the enqueueing itself (a non-blocking communicator may take a moment
 * to accept the call). */
static int enqueue_after(nccl_coll *n, void *after, const char *what)
{
    if (!n->comm)
        return cdl_error("NCCL communicator was aborted after an earlier failure");
    cudaError_t e = cudaEventRecord(n->ready, (cudaStream_t)after);
    if (e == cudaSuccess)
        e = cudaStreamWaitEvent(n->stream, n->ready, 0);
    return e == cudaSuccess ? 0 : cuda_fail(what, e);
}

/* The result of enqueueing a collective: a non-blocking communicator may
 * need a moment to accept it (nothing waits for the operation itself). */
static int enqueued(nccl_coll *n, ncclResult_t r, const char *what)
{
    if (r != ncclSuccess && r != ncclInProgress)
        return nccl_fail(what, r);
    return r == ncclInProgress ? nccl_wait(n, 0, what) : 0;
}

static int n_enqueue_allreduce_here(coll *c, void *buf, size_t count, coll_dtype t, int average,
                                    void *after)
{
    nccl_coll *n = (nccl_coll *)c;
    if (enqueue_after(n, after, "event before the gradient allreduce"))
        return -1;
    return enqueued(n, ncclAllReduce(buf, buf, count, nccl_type(t), average ? ncclAvg : ncclSum,
                                     n->comm, n->stream),
                    "allreduce (enqueued)");
}

/* The sharded optimizer's parameter allgather: one broadcast per owner. */
static int n_enqueue_broadcast_here(coll *c, void *buf, size_t bytes, int root, void *after)
{
    nccl_coll *n = (nccl_coll *)c;
    if (enqueue_after(n, after, "event before the parameter broadcast"))
        return -1;
    return enqueued(n, ncclBroadcast(buf, buf, bytes, ncclChar, root, n->comm, n->stream),
                    "broadcast (enqueued)");
}

static int n_join_here(coll *c, void *stream)
{
    nccl_coll *n = (nccl_coll *)c;
    cudaError_t e = cudaEventRecord(n->done, n->stream);
    if (e == cudaSuccess)
        e = cudaStreamWaitEvent((cudaStream_t)stream, n->done, 0);
    return e == cudaSuccess ? 0 : cuda_fail("event after the gradient allreduces", e);
}

static int n_poll_here(coll *c)
{
    int ready = 0;
    return comm_state((nccl_coll *)c, "allreduce (enqueued)", &ready);
}

/* Frees this rank from NCCL kernels that wait for a dead peer. */
static void n_abort(coll *c, const char *why)
{
    nccl_coll *n = (nccl_coll *)c;
    (void)why;
    int saved;
    (void)device_guard(n->device, &saved, "abort");
    if (n->comm)
        ncclCommAbort(n->comm);
    n->comm = NULL;
    device_restore(n->device, saved);
}

/* The entries: each on the backend's GPU (device_guard). */
#define ON_DEVICE(what, call)                                                                      \
    do {                                                                                           \
        nccl_coll *n_ = (nccl_coll *)c;                                                            \
        int saved_;                                                                                \
        if (device_guard(n_->device, &saved_, what))                                               \
            return -1;                                                                             \
        int rc_ = call;                                                                            \
        device_restore(n_->device, saved_);                                                        \
        return rc_;                                                                                \
    } while (0)

static int n_allreduce(coll *c, void *buf, size_t count, coll_dtype t, int average)
{
    ON_DEVICE("allreduce", n_allreduce_here(c, buf, count, t, average));
}

static int n_broadcast(coll *c, void *buf, size_t bytes, int root)
{
    ON_DEVICE("broadcast", n_broadcast_here(c, buf, bytes, root));
}

static int n_barrier(coll *c)
{
    ON_DEVICE("barrier", n_barrier_here(c));
}

static int n_allgather(coll *c, const void *in, void *out, size_t bytes)
{
    ON_DEVICE("allgather", n_allgather_here(c, in, out, bytes));
}

static int n_enqueue_allreduce(coll *c, void *buf, size_t count, coll_dtype t, int average,
                               void *after)
{
    ON_DEVICE("allreduce (enqueued)", n_enqueue_allreduce_here(c, buf, count, t, average, after));
}

static int n_enqueue_broadcast(coll *c, void *buf, size_t bytes, int root, void *after)
{
    ON_DEVICE("broadcast (enqueued)", n_enqueue_broadcast_here(c, buf, bytes, root, after));
}

static int n_join(coll *c, void *stream)
{
    ON_DEVICE("join", n_join_here(c, stream));
}

static int n_poll(coll *c)
{
    ON_DEVICE("poll", n_poll_here(c));
}

static const coll_ops nccl_ops = {
    .name = "nccl", .allreduce = n_allreduce, .broadcast = n_broadcast,
    .barrier = n_barrier, .allgather = n_allgather, .abort = n_abort,
    .destroy = n_destroy, .enqueue_allreduce = n_enqueue_allreduce,
    .enqueue_broadcast = n_enqueue_broadcast, .join = n_join,
    .poll = n_poll,
};

static void id_key(const coll_group *g, char *key, size_t len)
{
    snprintf(key, len, "nccl.%s", g->tag);
}

int nccl_prepare(const coll_group *g, boot *b)
{
    if (g->me != 0)
        return 0;
    ncclUniqueId id;
    ncclResult_t r = ncclGetUniqueId(&id);
    if (r != ncclSuccess)
        return nccl_fail("ncclGetUniqueId", r);
    char key[64];
    id_key(g, key, sizeof key);
    return boot_put(b, key, &id, sizeof id);
}

/* Everything of the communicator on `device`, then the caller's device back. */
static coll *create_here(const coll_group *g, const ncclUniqueId *id, int device, int host_buffers,
                         double timeout_s, void *compute_stream, int (*stop)(void))
{
    nccl_coll *n = cdl_calloc(1, sizeof *n);
    if (!n)
        return NULL;
    n->base = (coll){&nccl_ops, g->me, g->size, 1};
    n->timeout = timeout_s;
    n->host_buffers = host_buffers;
    n->compute = (cudaStream_t)compute_stream;
    n->device = device;
    n->world_rank = g->ranks[g->me];
    cudaError_t e = cudaStreamCreateWithFlags(&n->stream, cudaStreamNonBlocking);
    if (e == cudaSuccess)
        e = cudaMalloc(&n->dev, STAGE);
    if (e == cudaSuccess)
        e = cudaEventCreateWithFlags(&n->ready, cudaEventDisableTiming);
    if (e == cudaSuccess)
        e = cudaEventCreateWithFlags(&n->done, cudaEventDisableTiming);
    if (e == cudaSuccess)
        e = cudaEventCreateWithFlags(&n->queued, cudaEventDisableTiming);
    if (e != cudaSuccess) {
        cuda_fail("setup", e);
        n_destroy(&n->base);
        return NULL;
    }
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    ncclResult_t r = ncclCommInitRankConfig(&n->comm, g->size, *id, g->me, &config);
    n->stop = stop;   /* the setup's wait only: a step must end after a signal */
    int failed = (r != ncclSuccess && r != ncclInProgress) ||
                 nccl_wait(n, 0, "communicator setup");
    n->stop = NULL;
    if (failed) {
        if (r != ncclSuccess && r != ncclInProgress)
            nccl_fail("ncclCommInitRankConfig", r);
        n_destroy(&n->base);
        return NULL;
    }
    return &n->base;
}

coll *coll_nccl_create(const coll_group *g, boot *b, int device, int host_buffers,
                       double timeout_s, void *compute_stream)
{
    ncclUniqueId id;
    char key[64];
    id_key(g, key, sizeof key);
    if (boot_get(b, g->ranks[0], key, &id, sizeof id))
        return NULL;
    int saved;
    if (device_guard(device, &saved, "communicator setup"))
        return NULL;
    coll *c = create_here(g, &id, device, host_buffers, timeout_s, compute_stream, b->stop);
    device_restore(device, saved);
    return c;
}
