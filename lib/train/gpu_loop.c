/* The training epoch on a CUDA backend: pipelined, so the GPU never waits
 * for the host between steps.
 *
 * Step k, in slot s = its buffers (pipeline.h):
 *   1. its batch was staged while step k-1 ran: copied from the loader into
 *      pinned x_pin[s], y_pin[s] and prefetched on the copy stream into the
 *      device inputs x_in[s], y_in[s];
 *   2. the compute stream waits for that copy, runs the step (as a CUDA
 *      graph when the batch is full) and copies the per-sample loss and
 *      predictions into pinned h_loss[s], h_pred[s]; a mark ends the step;
 *   3. then, with step k queued, the host waits for step k-1's mark only,
 *      adds its results to the epoch's sums (labels from y_pin), and stages
 *      batch k+1 into step k-1's slot, which no queued work reads any more.
 * So metrics are exact and in step order, one step late; a non-finite loss
 * is reported one step late (the message says so); before anything that
 * stops or saves (a signal, --max-steps, --ckpt-every, the epoch's end) the
 * steps in flight are counted first, so checkpoints hold exactly the state
 * an unpipelined run has at that step. Each step runs train_step_ops, as
 * the host loop does, on the same data: results do not depend on the pipeline.
 *
 * CUDA graphs: graph.c replays a step only with the buffers it captured, so
 * graph steps read fixed inputs x_step, y_step, filled from x_in[s], y_in[s]
 * by a device copy before the graph. Every per-step value (learning rate,
 * Adam's step count, SGD's first step, dropout seed, loss scale) reaches the
 * kernels through graph.c's scalar block, collected from the ops' arguments
 * at each replay. With several ranks the steps run eagerly: the gradient
 * allreduce sits between backward and the update (docs/cuda.md).
 *
 * Nothing is allocated per step; the loop waits on the host only for step
 * marks (with NCCL: polled with CDL_TIMEOUT's deadline, so a dead peer does
 * not hang it). The ranks' agreement to stop (a signal reached one of them)
 * is a host collective after each step, except with NCCL, where a host
 * collective would wait for the step's gradient allreduce and so for the
 * whole step: there each step carries the rank's stop flag, averaged on the
 * GPU after the step and read with its results, one step late like them;
 * every rank has counted the same steps, so all stop at the same one.
 *
 * CDL_TEST_GPU_LOOP=1 runs this loop on a host-memory backend too (plain
 * buffers, copies instead of prefetches, marks that are always done), so
 * tests/unit/test_train.c checks its bookkeeping against the host loop
 * without a GPU. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/cuda/cuda_backend.h"

#include "pipeline.h"
#include "run.h"

struct gpu_loop {
    float *x_pin[2];          /* pinned: batch staging */
    int32_t *y_pin[2];
    float *x_in[2];           /* device: prefetch targets */
    int32_t *y_in[2];
    float *x_step;            /* device: the inputs graph steps read */
    int32_t *y_step;
    float *h_loss[2];         /* pinned: per-sample results */
    int32_t *h_pred[2];
    float *stop_pin[2];       /* pinned: [0] this rank's stop flag, [1] the ranks' average */
    float *stop_dev[2];       /* device: the average */
    int stop_queued;          /* the stop agreement rides with the steps (NCCL) */
    int stop_seen;            /* a counted step's agreement says stop */
    int graphs;               /* whole-step CUDA graphs for full batches */
    int warm;                 /* an eager full step has run */
    step_lag lag;
};

static size_t x_bytes(const run *r, int n)
{
    return (size_t)n * r->sample_floats * sizeof(float);
}

/* Page-locked on a GPU; plain memory under CDL_TEST_GPU_LOOP elsewhere. */
static void *host_buf(run *r, size_t bytes)
{
    return cuda_backend_is_cuda(r->be) ? cuda_backend_host_alloc(r->be, bytes)
                                       : cdl_calloc(1, bytes);
}

static void host_buf_free(run *r, void *p)
{
    if (cuda_backend_is_cuda(r->be))
        cuda_backend_host_free(r->be, p);
    else
        cdl_free(p);
}

/* dev <- host on the copy stream (a plain copy on host-memory backends). */
static int copy_in(run *r, void *dev, const void *host, size_t bytes)
{
    if (cuda_backend_is_cuda(r->be))
        return cuda_backend_prefetch(r->be, dev, host, bytes);
    r->be->ops->to_device(r->be, dev, host, bytes);
    return 0;
}

static int copy_in_wait(run *r)
{
    return cuda_backend_is_cuda(r->be) ? cuda_backend_prefetch_wait(r->be) : 0;
}

int gpu_loop_create(run *r)
{
    cdl_backend *be = r->be;
    const char *test = getenv("CDL_TEST_GPU_LOOP");
    if (!cuda_backend_is_cuda(be) && !(test && !strcmp(test, "1")))
        return 0;
    int on;
    const char *why;
    if (train_graphs_decide(r->cfg->cuda_graphs, getenv("CDL_CUDA_GRAPHS"),
                            cuda_backend_is_cuda(be), r->ri.world, &on, &why) != 0)
        return -1;
    gpu_loop *g = cdl_calloc(1, sizeof *g);
    if (!g)
        return -1;
    r->gpu = g;
    g->graphs = on;
    int b = r->cfg->batch_size;
    for (int s = 0; s < 2; s++) {
        if (!(g->x_pin[s] = host_buf(r, x_bytes(r, b))) ||
            !(g->y_pin[s] = host_buf(r, (size_t)b * sizeof(int32_t))) ||
            !(g->h_loss[s] = host_buf(r, (size_t)b * sizeof(float))) ||
            !(g->h_pred[s] = host_buf(r, (size_t)b * sizeof(int32_t))) ||
            !(g->x_in[s] = be->ops->alloc(be, x_bytes(r, b))) ||
            !(g->y_in[s] = be->ops->alloc(be, (size_t)b * sizeof(int32_t))))
            return -1;
    }
    g->stop_queued = r->ddp && ddp_queued(r->ddp);
    for (int s = 0; g->stop_queued && s < 2; s++)
        if (!(g->stop_pin[s] = host_buf(r, 2 * sizeof(float))) ||
            !(g->stop_dev[s] = be->ops->alloc(be, sizeof(float))))
            return -1;
    if (on && (!(g->x_step = be->ops->alloc(be, x_bytes(r, b))) ||
               !(g->y_step = be->ops->alloc(be, (size_t)b * sizeof(int32_t)))))
        return -1;
    lag_init(&g->lag);
    train_report_note(r->rep, "GPU steps pipelined (pinned double-buffered input, results read "
                      "one step late%s); CUDA graphs %s%s%s",
                      ddp_queued(r->ddp) ? ", gradients reduced by NCCL during backward" : "",
                      on ? "on" : "off", why ? ": " : "", why ? why : "");
    return 0;
}

void gpu_loop_free(run *r)
{
    gpu_loop *g = r->gpu;
    cdl_backend *be = r->be;
    if (!g)
        return;
    for (int s = 0; s < 2; s++) {
        host_buf_free(r, g->x_pin[s]);
        host_buf_free(r, g->y_pin[s]);
        host_buf_free(r, g->h_loss[s]);
        host_buf_free(r, g->h_pred[s]);
        be->ops->free(be, g->x_in[s]);
        be->ops->free(be, g->y_in[s]);
        if (g->stop_pin[s])
            host_buf_free(r, g->stop_pin[s]);
        be->ops->free(be, g->stop_dev[s]);
    }
    be->ops->free(be, g->x_step);
    be->ops->free(be, g->y_step);
    cdl_free(g);
    r->gpu = NULL;
}

/* The loader's batch into slot s: its buffer is only valid until the next
 * cdl_loader_next, and a copy from pinned memory can be asynchronous. */
static int stage(run *r, const cdl_batch *b, int s)
{
    gpu_loop *g = r->gpu;
    memcpy(g->x_pin[s], b->x, x_bytes(r, b->n));
    memcpy(g->y_pin[s], b->y, (size_t)b->n * sizeof(int32_t));
    if (copy_in(r, g->x_in[s], g->x_pin[s], x_bytes(r, b->n)) != 0 ||
        copy_in(r, g->y_in[s], g->y_pin[s], (size_t)b->n * sizeof(int32_t)) != 0)
        return -1;
    return 0;
}

/* Queues step `step` on slot s's batch of n samples. */
static int queue_step(run *r, int s, int n, long step)
{
    gpu_loop *g = r->gpu;
    cdl_backend *be = r->be;
    const float *x = g->x_in[s];
    const int32_t *y = g->y_in[s];
    if (copy_in_wait(r) != 0)
        return -1;
    int graphed = train_graph_step(g->graphs, g->warm, n, r->cfg->batch_size);
    if (graphed) {
        be->ops->copy(be, g->x_step, x, x_bytes(r, n));
        be->ops->copy(be, g->y_step, y, (size_t)n * sizeof(int32_t));
        x = g->x_step;
        y = g->y_step;
        if (cuda_backend_graph_begin(be, (uint64_t)n) < 0)
            return -1;
    }
    int rc = train_step_ops(r, x, y, n, 1, step);
    if (graphed && cuda_backend_graph_end(be) != 0)
        return cdl_error("rank %d: step %ld as a CUDA graph: %s (run with --cuda-graphs off or "
                         "CDL_CUDA_GRAPHS=off, and report it)",
                         r->ri.rank, step, cdl_last_error());
    if (rc != 0)
        return -1;
    be->ops->to_host(be, g->h_loss[s], r->sample_loss, (size_t)n * sizeof(float));
    be->ops->to_host(be, g->h_pred[s], r->pred, (size_t)n * sizeof(int32_t));
    if (g->stop_queued) {
        g->stop_pin[s][0] = train_stop_requested() ? 1.0f : 0.0f;
        be->ops->to_device(be, g->stop_dev[s], g->stop_pin[s], sizeof(float));
        if (ddp_queue_average(r->ddp, g->stop_dev[s], 1) != 0)
            return -1;
        be->ops->to_host(be, g->stop_pin[s] + 1, g->stop_dev[s], sizeof(float));
    }
    if (cuda_backend_mark(be, s) != 0)
        return -1;
    if (n == r->cfg->batch_size)
        g->warm = 1;
    return 0;
}

/* Waits for the step that marked slot s. With NCCL queued on the GPU the
 * wait is polled: a peer that died leaves NCCL's kernels (and so this
 * step) waiting forever, which only the deadline and an abort end. */
static int wait_step(run *r, int s, long step)
{
    if (!ddp_queued(r->ddp))
        return cuda_backend_mark_wait(r->be, s);
    double deadline = train_now() + ddp_timeout(r->ddp);
    for (;;) {
        int done = cuda_backend_mark_done(r->be, s);
        if (done != 0)
            return done > 0 ? 0 : -1;
        if (ddp_poll(r->ddp) != 0)
            return -1;
        if (train_now() > deadline) {
            cdl_error("rank %d: step %ld did not finish within %.0f s (CDL_TIMEOUT): its "
                      "gradient allreduce waits for a rank that died or hangs (see the other "
                      "ranks' errors)", r->ri.rank, step, ddp_timeout(r->ddp));
            ddp_abort(r->ddp, cdl_last_error());
            return -1;
        }
        struct timespec ts = {0, 20000};
        nanosleep(&ts, NULL);
    }
}

/* The oldest step in flight: waits for it and adds its results. */
static int count_oldest(run *r, train_position *pos)
{
    gpu_loop *g = r->gpu;
    long step;
    int n;
    int s = lag_oldest(&g->lag, &step, &n);
    if (s < 0)
        return 0;
    int late = g->lag.count > 1;
    if (wait_step(r, s, step) != 0)
        return -1;
    double loss, correct;
    if (g->stop_queued && g->stop_pin[s][1] > 0)
        g->stop_seen = 1;
    train_batch_sums(g->h_loss[s], g->h_pred[s], g->y_pin[s], n, &loss, &correct);
    if (!isfinite(loss))
        return train_loss_error(r->ri.rank, loss, step, late);
    pos->loss_sum += loss;
    pos->correct += correct;
    pos->seen += n;
    lag_pop(&g->lag);
    return 0;
}

int gpu_loop_stop_agreed(const run *r)
{
    return r->gpu && r->gpu->stop_queued ? r->gpu->stop_seen : -1;
}

int gpu_loop_flush(run *r, train_position *pos)
{
    while (r->gpu->lag.count > 0)
        if (count_oldest(r, pos) != 0)
            return -1;
    return 0;
}

int gpu_loop_epoch(run *r, train_position *pos, const epoch_clock *ck, cdl_train_result *res)
{
    gpu_loop *g = r->gpu;
    cdl_batch b;
    int got = cdl_loader_next(r->train_loader, &b);
    int s = lag_free_slot(&g->lag);
    if (got == 1 && stage(r, &b, s) != 0)
        return -1;
    while (got == 1) {
        long index = b.index;
        if (queue_step(r, s, b.n, pos->step) != 0 || lag_push(&g->lag, s, pos->step, b.n) != 0)
            return -1;
        pos->step++;
        pos->batch = index + 1;
        /* The previous step's results, while this one runs. */
        while (g->lag.count > 1)
            if (count_oldest(r, pos) != 0)
                return -1;
        int rc = train_after_step(r, pos, ck, res);
        if (rc != 0)
            return rc;
        got = cdl_loader_next(r->train_loader, &b);
        if (got != 1)
            break;
        /* At most this step is in flight: the other slot is free. */
        if ((s = lag_free_slot(&g->lag)) < 0)
            return cdl_error("GPU pipeline: no free buffer slot for step %ld (a bug in "
                             "lib/train/gpu_loop.c)", pos->step);
        if (stage(r, &b, s) != 0)
            return -1;
    }
    if (got < 0)
        return -1;
    return gpu_loop_flush(r, pos);
}
