/* Gradient averaging in buckets, overlapped with backward.
 *
 * The flat gradient buffer is cut into buckets of whole parameter tensors,
 * ~bucket_bytes each, from the end of the buffer towards the start: the
 * order backward finishes them (bucket 0 holds the last layers). Backward
 * reports each finished range through ddp_grad_ready; everything above the
 * lowest offset reported so far is final, so every bucket above it is handed
 * to a communication thread, which averages buckets in index order with
 * cdl_dist_allreduce while backward computes the earlier layers. ddp_finish
 * waits for those and averages whatever is left itself, in order.
 *
 * Every rank launches the same buckets in the same order. The collectives
 * reduce element by element in a fixed order, so bucketing does not change a
 * single bit of the result: it equals one allreduce of the whole buffer.
 *
 * Overlap on the host needs a synchronous backend (host memory, like the
 * CPU backend: a reported range is computed, not just enqueued). On a GPU
 * with NCCL each bucket is instead queued as it is reported: the NCCL
 * stream waits for the compute stream's work so far (an event), reduces,
 * and ddp_finish makes the compute stream wait for the NCCL stream before
 * the optimizer step; nothing waits on the host (dist_gpu.h). With other
 * collectives on a GPU (shm, hier: MPS-packed replicas) ddp_finish syncs
 * the backend and reduces all buckets through pinned host memory. If ranges
 * ever arrive out of order, nothing is launched early in that step. No
 * allocation per step.
 *
 * BatchNorm under data parallelism, as PyTorch's DDP does it: each rank
 * normalises with its own batch; the buffers (running statistics) follow
 * rank 0, broadcast from it at the start of every training forward
 * (broadcast_buffers=True), so what a checkpoint (rank 0) holds is what
 * every rank used. Layers with sync=true (SyncBatchNorm) sum their
 * per-channel statistics over the ranks through the model's allreduce
 * hook, ddp_sync_sum: a blocking sum on the same collective, in the order
 * every rank reaches it.
 *
 * ZeRO-1 (--shard-optimizer, ddp_create_shard): each rank owns a part of
 * the flat buffer (cdl_dist_shard: ~n/world, 256-byte aligned) and holds
 * the optimizer state of that part only. ddp_finish reduce-scatters the
 * gradients in one call after backward (no bucket overlap: the parts cut
 * across buckets), each rank steps its part, and ddp_step all-gathers the
 * parameters. The reduce-scatter sums in the allreduce's order and the
 * update is elementwise over aligned parts, so sharded training is
 * bitwise the unsharded one (tests/dist/shard_equiv.sh). On a GPU with
 * NCCL the sharded step is queued like the unsharded one: the same
 * gradient buckets allreduced during backward (NCCL has no reduce-scatter
 * here, so the full allreduce is what the host path ran too, and every
 * rank holds the whole averaged gradient: --clip-grad's norm needs no
 * collective), the update of the owned part, then each owner's part
 * broadcast on NCCL's stream; nothing in the step waits on the host. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cdl/cdl.h>

#include "../dist/dist_gpu.h"
#include "../dist/util.h"
#include "ddp.h"

typedef struct bucket {
    size_t start, end;           /* [start, end) of the gradient buffer */
} bucket;

struct ddp {
    cdl_dist *dist;              /* NULL: one rank, nothing to do */
    cdl_model *model;
    float *grads;
    size_t n;
    bucket *b;
    int nb;
    int overlap;                 /* the thread runs buckets during backward */
    int shard;                   /* ZeRO-1: gradients reduce-scattered, parameters gathered */
    size_t own_lo, own_hi;       /* this rank's part of the buffer when shard */
    int queued;                  /* buckets (and the shards' gather) are queued on the GPU
                                  * (nccl), no thread; sharded too, every rank then holds
                                  * the whole averaged gradient */
    const char *queued_ops;      /* what a step queues, for the timeout's message */

    pthread_t thread;
    int have_thread;
    pthread_mutex_t mu;
    pthread_cond_t work, done;
    /* Under mu. Per step: buckets [0, launched) are handed over, [0, finished)
     * are averaged; [low, n) of the gradients is final. */
    int launched, finished, stop, failed, unordered;
    size_t low;
    char err[1024];
};

/* Buckets of whole tensors from the last view backwards, each closed once it
 * holds at least bucket_bytes. */
static int make_buckets(ddp *g, size_t bucket_bytes)
{
    int nv = cdl_model_nviews(g->model);
    size_t cap = bucket_bytes / sizeof(float);
    g->b = cdl_calloc((size_t)(nv > 0 ? nv : 1), sizeof *g->b);
    if (!g->b)
        return -1;
    if (nv == 0) {
        g->b[0] = (bucket){0, g->n};
        g->nb = g->n ? 1 : 0;
        return 0;
    }
    size_t end = g->n;
    for (int i = nv - 1; i >= 0; i--) {
        const cdl_param_view *v = cdl_model_view(g->model, i);
        if (v->offset >= end && i > 0)
            continue;   /* views out of order: it joins the bucket being built */
        if (end - v->offset >= cap || i == 0) {
            g->b[g->nb++] = (bucket){i == 0 ? 0 : v->offset, end};
            end = v->offset;
        }
    }
    return 0;
}

/* Averages bucket k; the error message is copied for the main thread. */
static int reduce_bucket(ddp *g, int k)
{
    bucket *b = &g->b[k];
    if (cdl_dist_allreduce(g->dist, g->grads + b->start, b->end - b->start, 1) == 0)
        return 0;
    return -1;
}

static void *comm_main(void *arg)
{
    ddp *g = arg;
    pthread_mutex_lock(&g->mu);
    for (;;) {
        while (!g->stop && g->finished == g->launched)
            pthread_cond_wait(&g->work, &g->mu);
        if (g->stop)
            break;
        int k = g->finished, skip = g->failed;
        pthread_mutex_unlock(&g->mu);
        int rc = skip ? 0 : reduce_bucket(g, k);
        pthread_mutex_lock(&g->mu);
        if (rc && !g->failed) {
            g->failed = 1;
            snprintf(g->err, sizeof g->err, "%s", cdl_last_error());
        }
        g->finished++;
        pthread_cond_broadcast(&g->done);
    }
    pthread_mutex_unlock(&g->mu);
    return NULL;
}

/* Waits until the communication thread has averaged every bucket handed
 * to it: the collectives of one coll must not run concurrently. Called on
 * the thread that launches buckets, so none can be added meanwhile. */
static int wait_thread_idle(ddp *g)
{
    if (!g->have_thread)
        return 0;
    pthread_mutex_lock(&g->mu);
    while (g->finished < g->launched)
        pthread_cond_wait(&g->done, &g->mu);
    int failed = g->failed;
    pthread_mutex_unlock(&g->mu);
    return failed ? cdl_error("%s", g->err) : 0;
}

int ddp_sync_sum(void *ctx, float *buf, size_t count)
{
    ddp *g = ctx;
    if (!g->dist || !count)
        return 0;
    if (wait_thread_idle(g) != 0)
        return -1;
    if (cdl_dist_allreduce(g->dist, buf, count, 0) != 0)
        return cdl_error("SyncBatchNorm: summing %zu statistics over %d ranks: %s", count,
                         cdl_dist_world(g->dist), cdl_last_error());
    return 0;
}

int ddp_broadcast_buffers(ddp *g)
{
    size_t n = g->dist ? cdl_model_nbuffer_floats(g->model) : 0;
    if (!n)
        return 0;
    return cdl_dist_broadcast(g->dist, cdl_model_buffers(g->model), n * sizeof(float), 0);
}

ddp *ddp_create(cdl_dist *d, cdl_model *m, size_t bucket_bytes)
{
    return ddp_create_shard(d, m, bucket_bytes, 0);
}

ddp *ddp_create_shard(cdl_dist *d, cdl_model *m, size_t bucket_bytes, int shard)
{
    ddp *g = cdl_calloc(1, sizeof *g);
    if (!g)
        return NULL;
    g->model = m;
    g->n = m ? cdl_model_nparams(m) : 0;
    g->own_hi = g->n;
    if (!d || cdl_dist_world(d) <= 1)
        return g;
    g->dist = d;
    g->grads = cdl_model_grads(m);
    g->low = g->n;
    if (shard) {
        g->shard = 1;
        cdl_dist_shard(g->n, cdl_dist_world(d), cdl_dist_rank(d), &g->own_lo, &g->own_hi);
        /* On the host: no buckets, no thread, ddp_finish reduce-scatters
         * the whole buffer. On the GPU: the unsharded buckets, queued. */
        g->queued = dist_can_enqueue_shards(d);
        g->queued_ops = "the gradient allreduce, the parameter broadcasts of "
                        "--shard-optimizer";
        if (g->queued && make_buckets(g, bucket_bytes ? bucket_bytes : 25u << 20)) {
            cdl_free(g);
            return NULL;
        }
        cdl_model_set_allreduce(m, ddp_sync_sum, g);
        return g;
    }
    if (make_buckets(g, bucket_bytes ? bucket_bytes : 25u << 20)) {
        cdl_free(g);
        return NULL;
    }
    g->queued_ops = "the gradient allreduce";
    pthread_mutex_init(&g->mu, NULL);
    pthread_cond_init(&g->work, NULL);
    pthread_cond_init(&g->done, NULL);
    cdl_backend *be = cdl_model_backend(m);
    g->queued = dist_can_enqueue(d);
    g->overlap = be && be->host_memory && !g->queued;
    /* Without a thread (it could not start) ddp_finish reduces every bucket. */
    g->have_thread = g->overlap && pthread_create(&g->thread, NULL, comm_main, g) == 0;
    g->overlap = g->have_thread;
    cdl_model_set_allreduce(m, ddp_sync_sum, g);
    return g;
}

void ddp_free(ddp *g)
{
    if (!g)
        return;
    if (g->dist && g->shard) {
        cdl_model_set_allreduce(g->model, NULL, NULL);
        cdl_free(g->b);
    } else if (g->dist) {
        cdl_model_set_allreduce(g->model, NULL, NULL);
        if (g->have_thread) {
            pthread_mutex_lock(&g->mu);
            g->stop = 1;
            pthread_cond_broadcast(&g->work);
            pthread_mutex_unlock(&g->mu);
            pthread_join(g->thread, NULL);
        }
        pthread_cond_destroy(&g->work);
        pthread_cond_destroy(&g->done);
        pthread_mutex_destroy(&g->mu);
        cdl_free(g->b);
    }
    cdl_free(g);
}

int ddp_broadcast_params(ddp *g)
{
    if (!g->dist)
        return 0;
    return cdl_dist_broadcast(g->dist, cdl_model_params(g->model),
                              cdl_model_nparams(g->model) * sizeof(float), 0);
}

/* [offset, offset+count) is final: how many buckets, from 0, are complete. */
static int complete_buckets(ddp *g, size_t offset, size_t count)
{
    if (offset + count > g->low || offset + count > g->n)
        g->unordered = 1;   /* not below what was reported: launch nothing early */
    else
        g->low = offset;
    int k = g->launched;
    while (!g->unordered && k < g->nb && g->b[k].start >= g->low)
        k++;
    return k;
}

/* Queues buckets [launched, upto) on the GPU, in index order. */
static void queue_buckets(ddp *g, int upto)
{
    for (; g->launched < upto; g->launched++) {
        const bucket *b = &g->b[g->launched];
        if (!g->failed && dist_enqueue_allreduce(g->dist, g->grads + b->start, b->end - b->start)) {
            g->failed = 1;
            snprintf(g->err, sizeof g->err, "%s", cdl_last_error());
        }
    }
}

void ddp_grad_ready(void *ctx, size_t offset, size_t count)
{
    ddp *g = ctx;
    if (!g->dist)
        return;
    if (g->queued) {
        queue_buckets(g, complete_buckets(g, offset, count));
        return;
    }
    if (!g->overlap)
        return;
    pthread_mutex_lock(&g->mu);
    int k = complete_buckets(g, offset, count);
    if (k != g->launched) {
        g->launched = k;
        pthread_cond_signal(&g->work);
    }
    pthread_mutex_unlock(&g->mu);
}

/* The queued path's end of a step: the rest of the buckets, then the
 * compute stream waits for all of them. */
static int finish_queued(ddp *g)
{
    queue_buckets(g, g->nb);
    if (!g->failed && dist_enqueue_join(g->dist)) {
        g->failed = 1;
        snprintf(g->err, sizeof g->err, "%s", cdl_last_error());
    }
    g->launched = 0;
    g->unordered = 0;
    g->low = g->n;
    return g->failed ? cdl_error("%s", g->err) : 0;
}

int ddp_queued(const ddp *g)
{
    return g->dist && g->queued;
}

int ddp_queue_average(ddp *g, float *dev, size_t n)
{
    if (!ddp_queued(g))
        return cdl_error("ddp_queue_average without a GPU collective (a bug in lib/train)");
    if (dist_enqueue_allreduce(g->dist, dev, n) != 0 || dist_enqueue_join(g->dist) != 0)
        return -1;
    return 0;
}

int ddp_poll(ddp *g)
{
    return ddp_queued(g) ? dist_enqueue_poll(g->dist) : 0;
}

void ddp_abort(ddp *g, const char *why)
{
    if (g->dist)
        dist_abort(g->dist, why);
}

double ddp_timeout(const ddp *g)
{
    return g->dist ? dist_timeout(g->dist) : 0;
}

int ddp_finish(ddp *g)
{
    if (!g->dist)
        return 0;
    int rc = 0;
    if (g->shard && !g->queued) {
        cdl_backend *be = cdl_model_backend(g->model);
        if (be && be->ops->sync(be))
            return -1;
        return cdl_dist_reduce_scatter(g->dist, g->grads, g->n, 1);
    }
    if (g->queued)
        return finish_queued(g);
    if (!g->have_thread) {
        cdl_backend *be = cdl_model_backend(g->model);
        if (be && be->ops->sync(be))
            return -1;
        for (int k = 0; k < g->nb && rc == 0; k++)
            rc = reduce_bucket(g, k);
        return rc;
    }
    /* Backward is over. The thread finishes what it was handed; the rest
     * this thread reduces itself, in the same order: handing it over would
     * only add two wake-ups to the step's critical path. */
    pthread_mutex_lock(&g->mu);
    int first = g->launched;
    while (g->finished < first)
        pthread_cond_wait(&g->done, &g->mu);
    if (g->failed)
        rc = cdl_error("%s", g->err);
    pthread_mutex_unlock(&g->mu);
    for (int k = first; k < g->nb && rc == 0; k++)
        rc = reduce_bucket(g, k);
    pthread_mutex_lock(&g->mu);
    g->launched = g->finished = 0;
    g->unordered = 0;
    g->low = g->n;
    pthread_mutex_unlock(&g->mu);
    return rc;
}

/* ------------------------------------------------------------ ZeRO-1 */

int ddp_sharded(const ddp *g)
{
    return g->shard;
}

void ddp_owned(const ddp *g, size_t *offset, size_t *count)
{
    *offset = g->own_lo;
    *count = g->own_hi - g->own_lo;
}

cdl_optim *ddp_optim_create(ddp *g, const cdl_optim_config *cfg)
{
    return cdl_optim_create_shard(cfg, g->n, g->own_lo, g->own_hi - g->own_lo,
                                  cdl_model_backend(g->model));
}

int ddp_sum_shards(ddp *g, double *v, size_t n)
{
    return g->shard ? cdl_dist_allreduce_f64(g->dist, v, n) : 0;
}

int ddp_grad_sumsq(ddp *g, double *out)
{
    cdl_backend *be = cdl_model_backend(g->model);
    const float *grads = cdl_model_grads(g->model);
    if (g->shard && !g->queued) {
        *out = be->ops->sumsq(be, grads + g->own_lo, g->own_hi - g->own_lo);
        return cdl_dist_allreduce_f64(g->dist, out, 1);
    }
    /* Unsharded (or sharded and queued: the whole gradient is averaged
     * here too), the same parts added in rank order: the bits the sharded
     * sum has on the flat backends (shm, mpi: left to right). */
    int world = g->dist ? cdl_dist_world(g->dist) : 1;
    double sum = 0;
    for (int r = 0; r < world; r++) {
        size_t lo, hi;
        cdl_dist_shard(g->n, world, r, &lo, &hi);
        double part = be->ops->sumsq(be, grads + lo, hi - lo);
        sum = r == 0 ? part : sum + part;
    }
    *out = sum;
    return 0;
}

int ddp_norm_on_device(const ddp *g)
{
    return !g->shard || g->queued;
}

int ddp_grad_sumsq_dev(ddp *g, double *out)
{
    cdl_backend *be = cdl_model_backend(g->model);
    if (!ddp_norm_on_device(g) || !be->ops->sumsq_dev)
        return 1;
    const float *grads = cdl_model_grads(g->model);
    int world = g->dist ? cdl_dist_world(g->dist) : 1;
    for (int r = 0; r < world; r++) {   /* ddp_grad_sumsq's parts and order */
        size_t lo, hi;
        cdl_dist_shard(g->n, world, r, &lo, &hi);
        be->ops->sumsq_dev(be, grads + lo, hi - lo, out, r > 0);
    }
    return 0;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int ddp_wait_mark(ddp *g, int slot, const char *what)
{
    cdl_backend *be = cdl_model_backend(g->model);
    if (!ddp_queued(g))
        return cdl_backend_mark_wait(be, slot);
    double deadline = now_s() + ddp_timeout(g);
    for (;;) {
        int done = cdl_backend_mark_done(be, slot);
        if (done != 0)
            return done > 0 ? 0 : -1;
        if (ddp_poll(g) != 0)
            return -1;
        if (now_s() > deadline) {
            dist_note_peer_lost();   /* cdl-train exits CDL_EXIT_PEER_LOST */
            cdl_error("rank %d: %s did not finish within %.0f s (CDL_TIMEOUT): one of its NCCL "
                      "collectives (%s) waits for a rank that died or hangs: the other ranks' "
                      "output says which if it could; a rank that is only slow (writing a "
                      "large checkpoint, a slow file system) needs a larger CDL_TIMEOUT; "
                      "else resume from the last checkpoint without the failed node",
                      cdl_dist_rank(g->dist), what, ddp_timeout(g), g->queued_ops);
            ddp_abort(g, cdl_last_error());
            return -1;
        }
        struct timespec ts = {0, 20000};
        nanosleep(&ts, NULL);
    }
}

/* The mark slot of ddp_drain: the training loop's steps use 0 and 1. */
#define DRAIN_MARK (CDL_BACKEND_MARKS - 1)

int ddp_drain(ddp *g, const char *what)
{
    if (!ddp_queued(g))
        return 0;
    if (cdl_backend_mark(cdl_model_backend(g->model), DRAIN_MARK) != 0)
        return -1;
    return ddp_wait_mark(g, DRAIN_MARK, what);
}

int ddp_step(ddp *g, cdl_optim *o, float lr)
{
    float *params = cdl_model_params(g->model);
    cdl_optim_step(o, params, cdl_model_grads(g->model), lr);   /* a shard steps its part */
    if (!g->shard)
        return 0;
    if (g->queued ? dist_enqueue_allgather_shards(g->dist, params, g->n) != 0 ||
                        dist_enqueue_join(g->dist) != 0
                  : cdl_dist_allgather_shards(g->dist, params, g->n) != 0)
        return cdl_error("rank %d: gathering the updated parameters (--shard-optimizer): %s",
                         cdl_dist_rank(g->dist), cdl_last_error());
    return 0;
}

/* Part r's state buffer i to `full` on rank 0: every rank takes part in
 * the owner's broadcast (non-owners but rank 0 into scratch). */
static int gather_part(ddp *g, cdl_optim *o, cdl_optim *full, int i, int r, float *scratch)
{
    cdl_backend *be = cdl_model_backend(g->model);
    int me = cdl_dist_rank(g->dist);
    size_t lo, hi;
    cdl_dist_shard(g->n, cdl_dist_world(g->dist), r, &lo, &hi);
    if (hi == lo)
        return 0;
    float *buf = me == r ? cdl_optim_state(o, i) : me == 0 ? cdl_optim_state(full, i) + lo
                                                            : scratch;
    if (cdl_dist_broadcast(g->dist, buf, (hi - lo) * sizeof(float), r) != 0)
        return -1;
    if (me == 0 && r == 0)
        be->ops->copy(be, cdl_optim_state(full, i) + lo, buf, (hi - lo) * sizeof(float));
    return 0;
}

int ddp_optim_gather(ddp *g, cdl_optim *o, cdl_optim **full)
{
    *full = NULL;
    if (!g->shard) {
        *full = o;
        return 0;
    }
    cdl_backend *be = cdl_model_backend(g->model);
    int me = cdl_dist_rank(g->dist), world = cdl_dist_world(g->dist), rc = 0;
    size_t lo, hi;
    cdl_dist_shard(g->n, world, 0, &lo, &hi);   /* part 0 is the largest */
    float *scratch = NULL;
    cdl_optim *f = NULL;
    if (me == 0)
        f = cdl_optim_create(cdl_optim_get_config(o), g->n, be);
    else if (cdl_optim_nstate(o) && hi > lo)
        scratch = be->ops->alloc(be, (hi - lo) * sizeof(float));
    /* Everyone learns whether the buffers exist before the broadcasts. */
    double ok = me == 0 ? f != NULL : scratch != NULL || !cdl_optim_nstate(o) || hi == lo;
    double bad = !ok;
    char msg[512];
    snprintf(msg, sizeof msg, "%s", ok ? "" : cdl_last_error());
    if (cdl_dist_allreduce_f64(g->dist, &bad, 1) != 0)
        rc = -1;
    else if (bad > 0)
        rc = cdl_error("rank %d: gathering the sharded optimizer state for a checkpoint: %s",
                       me, ok ? "another rank could not allocate its buffer (its error says "
                                "why)" : msg);
    for (int i = 0; rc == 0 && i < cdl_optim_nstate(o); i++)
        for (int r = 0; rc == 0 && r < world; r++)
            rc = gather_part(g, o, f, i, r, scratch);
    if (scratch)
        be->ops->free(be, scratch);
    if (rc == 0 && f)
        cdl_optim_set_steps(f, cdl_optim_steps(o));
    if (rc == 0 && be->ops->sync(be) != 0)
        rc = -1;
    if (rc) {
        cdl_optim_destroy(f);
        return -1;
    }
    *full = f;
    return 0;
}

void ddp_optim_release(cdl_optim *o, cdl_optim *full)
{
    if (full != o)
        cdl_optim_destroy(full);
}
