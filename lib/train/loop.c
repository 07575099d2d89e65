/* The training loop, one for every backend: pipelined, so a GPU never
 * waits for the host between steps; on a backend without asynchronous
 * entries (the CPU: its ops are done when they return) the same code
 * counts each step's results right after it.
 *
 * Step k, in slot s = its buffers (pipeline.h):
 *   1. its batch was staged while step k-1 ran: copied from the loader into
 *      host x_pin[s], y_pin[s] (page-locked where the backend has it) and
 *      copied in (on a GPU's copy stream) to the device inputs x_in[s],
 *      y_in[s];
 *   2. the compute stream waits for that copy, runs the step (as a whole-
 *      step graph when the backend has them and the batch is full) and
 *      copies the per-sample loss and predictions into h_loss[s],
 *      h_pred[s]; a step mark ends the step;
 *   3. then, with step k queued, the host waits for step k-1's mark only,
 *      adds its results to the epoch's sums (labels from y_pin), and stages
 *      batch k+1 into step k-1's slot, which no queued work reads any more.
 * So metrics are exact and in step order, one step late on an asynchronous
 * backend; a non-finite loss is reported one step late there (the message
 * says so); before anything that stops or saves (a signal, --max-steps,
 * --ckpt-every, the epoch's end) the steps in flight are counted first, so
 * checkpoints hold exactly the state an unpipelined run has at that step.
 * Each step runs train_step_ops, as validation does, on the same data:
 * results do not depend on the pipeline.
 *
 * Graphs: graph.c replays a step only with the buffers it captured, so
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
 * every rank has counted the same steps, so all stop at the same one. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "grads.h"
#include "keep.h"
#include "loop.h"
#include "metrics.h"
#include "mfu.h"
#include "pipeline.h"
#include "signals.h"
#include "step.h"

struct train_loop {
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
    float stop_seen;          /* a counted step's agreement: stop_flag's sum, 0: go on */
    int async;                /* the backend's ops may still run after returning */
    int graphs;               /* whole-step graphs for full batches */
    int warm;                 /* an eager full step has run */
    step_lag lag;
    /* --metrics-every: rank 0's sums since the last step record, and the
     * gradient norm of the steps to record, per slot (NAN: not taken). */
    double win_loss, win_correct, win_seen, win_t0;
    double grad_norm[2];
    /* --clip-grad on the device: per slot, the squared norm read back with
     * the step's results (pinned), and whether it holds this step's. */
    double *norm_pin[2];
    int norm_pending[2];
    int norm_taken[2];        /* grad_norm[s] is the step's (NaN or inf where it diverged) */
    /* --accum-steps: per slot, whether its batch ends an optimizer step
     * (only then the step is recorded and the stop agreement rides). */
    int ends_step[2];
};

static size_t x_bytes(const run *r, int n)
{
    return (size_t)n * r->sample_floats * sizeof(float);
}

/* Labels, per-row losses or predictions of n samples (4 bytes a row). */
static size_t y_bytes(const run *r, int n)
{
    return (size_t)n * (size_t)r->positions * sizeof(int32_t);
}

int loop_create(run *r)
{
    cdl_backend *be = r->be;
    int on;
    const char *why;
    if (train_graphs_decide(r->cfg->cuda_graphs, NULL, be->ops->graph_begin != NULL,
                            r->ri.world, &on, &why) != 0)
        return -1;
    if (on && r->cfg->clip_grad > 0 && !train_clip_on_device(r)) {
        on = 0;   /* clipping reads the norm on the host */
        why = "--clip-grad steps run eagerly (the backend clips on the host)";
    }
    train_loop *g = cdl_calloc(1, sizeof *g);
    if (!g)
        return -1;
    r->loop = g;
    g->async = cdl_backend_is_async(be);
    g->graphs = on;
    int b = r->cfg->batch_size;
    for (int s = 0; s < 2; s++) {
        if (!(g->x_pin[s] = cdl_backend_host_alloc(be, x_bytes(r, b))) ||
            !(g->y_pin[s] = cdl_backend_host_alloc(be, y_bytes(r, b))) ||
            !(g->h_loss[s] = cdl_backend_host_alloc(be, y_bytes(r, b))) ||
            !(g->h_pred[s] = cdl_backend_host_alloc(be, y_bytes(r, b))) ||
            !(g->x_in[s] = be->ops->alloc(be, x_bytes(r, b))) ||
            !(g->y_in[s] = be->ops->alloc(be, y_bytes(r, b))))
            return -1;
    }
    g->stop_queued = r->ddp && ddp_queued(r->ddp);
    for (int s = 0; train_clip_on_device(r) && s < 2; s++)
        if (!(g->norm_pin[s] = cdl_backend_host_alloc(be, sizeof(double))))
            return -1;
    for (int s = 0; g->stop_queued && s < 2; s++)
        if (!(g->stop_pin[s] = cdl_backend_host_alloc(be, 2 * sizeof(float))) ||
            !(g->stop_dev[s] = be->ops->alloc(be, sizeof(float))))
            return -1;
    if (on && (!(g->x_step = be->ops->alloc(be, x_bytes(r, b))) ||
               !(g->y_step = be->ops->alloc(be, y_bytes(r, b)))))
        return -1;
    lag_init(&g->lag);
    if (g->async)
        train_report_note(r->rep, "GPU steps pipelined (pinned double-buffered input, results "
                          "read one step late%s); CUDA graphs %s%s%s",
                          ddp_queued(r->ddp) ? ", gradients reduced by NCCL during backward"
                                             : "",
                          on ? "on" : "off", why ? ": " : "", why ? why : "");
    return 0;
}

void loop_free(run *r)
{
    train_loop *g = r->loop;
    cdl_backend *be = r->be;
    if (!g)
        return;
    for (int s = 0; s < 2; s++) {
        cdl_backend_host_free(be, g->x_pin[s]);
        cdl_backend_host_free(be, g->y_pin[s]);
        cdl_backend_host_free(be, g->h_loss[s]);
        cdl_backend_host_free(be, g->h_pred[s]);
        be->ops->free(be, g->x_in[s]);
        be->ops->free(be, g->y_in[s]);
        if (g->stop_pin[s])
            cdl_backend_host_free(be, g->stop_pin[s]);
        if (g->norm_pin[s])
            cdl_backend_host_free(be, g->norm_pin[s]);
        be->ops->free(be, g->stop_dev[s]);
    }
    be->ops->free(be, g->x_step);
    be->ops->free(be, g->y_step);
    cdl_free(g);
    r->loop = NULL;
}

/* The loader's batch into slot s: its buffer is only valid until the next
 * cdl_loader_next, and a copy from pinned memory can be asynchronous. */
static int stage(run *r, const cdl_batch *b, int s)
{
    train_loop *g = r->loop;
    memcpy(g->x_pin[s], b->x, x_bytes(r, b->n));
    memcpy(g->y_pin[s], b->y, y_bytes(r, b->n));
    if (cdl_backend_copy_in(r->be, g->x_in[s], g->x_pin[s], x_bytes(r, b->n)) != 0 ||
        cdl_backend_copy_in(r->be, g->y_in[s], g->y_pin[s], y_bytes(r, b->n)) != 0)
        return -1;
    return 0;
}

/* This rank's vote to stop after a step: 1 for a signal or the program's
 * should_stop (polled here, once per step; its yes is kept); rank 0 adds
 * world + 1 when a --metrics or --tensorboard record failed
 * (train_report_failed), so the ranks' sum tells every rank which stop it
 * is (signals and should_stop alone sum to at most the world size). */
static double stop_flag(run *r)
{
    const cdl_train_config *c = r->cfg;
    if (!r->program_stop && c->should_stop && c->should_stop(c->should_stop_ctx))
        r->program_stop = 1;
    double flag = train_stop_requested() || r->program_stop ? 1 : 0;
    if (r->ri.rank == 0 && train_report_failed(r->rep))
        flag += r->ri.world + 1;
    return flag;
}

/* Whether the step that makes `done` steps gets a step record (rank 0). */
static int record_due(const run *r, long done)
{
    long every = r->cfg->metrics_every;
    return every > 0 && r->ri.rank == 0 && done % every == 0;
}

/* Adds a counted step's results to the record window, and writes the
 * step record when it is due. */
static int step_record(run *r, const train_position *pos, long step, int s, double loss,
                       double correct, int n)
{
    train_loop *g = r->loop;
    g->win_loss += loss;
    g->win_correct += correct;
    g->win_seen += n;
    if (!g->ends_step[s] || !record_due(r, step + 1))
        return 0;
    double now = train_now(), dt = now - g->win_t0;
    step_stats st = {
        .epoch = pos->epoch,
        .step = step + 1,
        .loss = g->win_loss / g->win_seen,
        .acc = g->win_correct / g->win_seen,
        .lr = cdl_schedule_lr(&r->sched, step),
        .grad_norm = g->grad_norm[s],
        .grad_norm_taken = g->norm_taken[s],
    };
    train_speed(r, dt > 0 ? g->win_seen * r->ri.world / dt : 0, &st.samples_per_sec,
                &st.tokens_per_sec, &st.mfu);
    g->win_loss = g->win_correct = g->win_seen = 0;
    g->win_t0 = now;
    return train_report_step(r->rep, &st);
}

/* The captured graph of a full batch: its size and which ops it runs
 * (--accum-steps: the step's first micro-batch copies its gradient, a
 * middle one adds it, the last adds and updates; alone: the plain step). */
static uint64_t graph_key(const run *r, int n, int ends)
{
    unsigned kind = ends ? (r->micro == 0 ? 3u : 2u) : (r->micro == 0 ? 0u : 1u);
    return (uint64_t)n << 2 | kind;
}

/* Queues step `step` on slot s's batch of n samples (with --accum-steps:
 * one micro-batch of it; ends: the last one). */
static int queue_step(run *r, int s, int n, long step, int ends)
{
    train_loop *g = r->loop;
    cdl_backend *be = r->be;
    const float *x = g->x_in[s];
    const int32_t *y = g->y_in[s];
    if (cdl_backend_copy_in_wait(be) != 0)
        return -1;
    int graphed = train_graph_step(g->graphs, g->warm, n, r->cfg->batch_size);
    if (graphed) {
        be->ops->copy(be, g->x_step, x, x_bytes(r, n));
        be->ops->copy(be, g->y_step, y, y_bytes(r, n));
        x = g->x_step;
        y = g->y_step;
        if (cdl_backend_graph_begin(be, graph_key(r, n, ends)) < 0)
            return -1;
    }
    r->valid_rows = train_valid_rows(g->y_pin[s], n * r->positions);
    int rc = train_step_ops(r, x, y, n, 1, step);
    if (graphed && cdl_backend_graph_end(be) != 0)
        return cdl_error("rank %d: step %ld as a CUDA graph: %s (run with --cuda-graphs off or "
                         "CDL_CUDA_GRAPHS=off, and report it)",
                         r->ri.rank, step, cdl_last_error());
    if (rc != 0)
        return -1;
    g->grad_norm[s] = NAN;
    g->ends_step[s] = ends;
    g->norm_pending[s] = ends && r->norm_dev;
    /* A norm taken may be NaN or inf (the step where training diverges):
     * recorded as such, not as "not computed". */
    g->norm_taken[s] = ends && (r->norm_dev || r->cfg->clip_grad > 0 ||
                                (record_due(r, step + 1) && !ddp_queued(r->ddp)));
    if (g->norm_pending[s])   /* --clip-grad's on the device: read when the step is done */
        be->ops->to_host(be, g->norm_pin[s], r->norm_dev, sizeof(double));
    else if (ends && r->cfg->clip_grad > 0)
        g->grad_norm[s] = r->grad_norm;   /* --clip-grad's: before clipping, as PyTorch's */
    else if (g->norm_taken[s])
        /* The averaged gradient the update used: a host sync every N
         * steps (not with NCCL in flight, whose wait has no deadline). */
        g->grad_norm[s] = sqrt(be->ops->sumsq(be, cdl_model_grads(r->model),
                                              cdl_model_nparams(r->model)));
    be->ops->to_host(be, g->h_loss[s], r->sample_loss, y_bytes(r, n));
    be->ops->to_host(be, g->h_pred[s], r->pred, y_bytes(r, n));
    if (g->stop_queued && !ends)
        g->stop_pin[s][1] = 0;   /* no collective inside an accumulation */
    else if (g->stop_queued) {
        g->stop_pin[s][0] = (float)stop_flag(r);
        be->ops->to_device(be, g->stop_dev[s], g->stop_pin[s], sizeof(float));
        if (ddp_queue_average(r->ddp, g->stop_dev[s], 1) != 0)
            return -1;
        be->ops->to_host(be, g->stop_pin[s] + 1, g->stop_dev[s], sizeof(float));
    }
    if (cdl_backend_mark(be, s) != 0)
        return -1;
    if (n == r->cfg->batch_size && ends)
        g->warm = 1;   /* every kind of micro-batch has run eagerly */
    return 0;
}

/* Waits for the step that marked slot s (with NCCL queued: polled against
 * CDL_TIMEOUT, ddp_wait_mark). */
static int wait_step(run *r, int s, long step)
{
    char what[48];
    snprintf(what, sizeof what, "step %ld", step);
    return ddp_wait_mark(r->ddp, s, what);
}

/* The oldest step in flight: waits for it and adds its results. */
static int count_oldest(run *r, train_position *pos)
{
    train_loop *g = r->loop;
    long step;
    int n;
    int s = lag_oldest(&g->lag, &step, &n);
    if (s < 0)
        return 0;
    int late = g->lag.count > 1;
    if (wait_step(r, s, step) != 0)
        return -1;
    double loss, correct;
    if (g->stop_queued && g->stop_pin[s][1] > 0 && !(g->stop_seen > 0))
        g->stop_seen = g->stop_pin[s][1] * (float)r->ri.world;   /* the average: the sum */
    if (g->norm_pending[s])
        g->grad_norm[s] = sqrt(*g->norm_pin[s]);
    long rows = train_batch_sums(g->h_loss[s], g->h_pred[s], g->y_pin[s], n * r->positions,
                                 &loss, &correct);
    if (!isfinite(loss)) {
        diverge_hint h;
        char earlier[1200];
        return train_loss_error(r->ri.rank, loss, step, late,
                                train_diverge_hint(r, step, &h, earlier, sizeof earlier));
    }
    if (g->ends_step[s] && r->cfg->clip_grad > 0 && !train_norm_clippable(g->grad_norm[s])) {
        /* --clip-grad's norm: the update was skipped, on the host or, read
         * from the device, held there (hold_updates, with the updates of
         * the steps queued behind it) */
        diverge_hint h;
        char earlier[1200];
        return train_norm_error(r->ri.rank, g->grad_norm[s], r->cfg->clip_grad, step, late,
                                train_diverge_hint(r, step, &h, earlier, sizeof earlier));
    }
    pos->loss_sum += loss;
    pos->correct += correct;
    pos->seen += rows;
    lag_pop(&g->lag);
    return step_record(r, pos, step, s, loss, correct, rows);
}

/* Waits for the steps in flight and adds their results to pos. */
static int flush(run *r, train_position *pos)
{
    while (r->loop->lag.count > 0)
        if (count_oldest(r, pos) != 0)
            return -1;
    return 0;
}

/* --keep-last, --keep-every (keep.c): the checkpoint just written to
 * last.safetensors also as DIR/step-NNNNNNNN.safetensors, then the
 * numbered ones beyond those kept removed. Rank 0. A numbered file that
 * cannot be written fails the checkpoint, as last's own write does; one
 * that cannot be removed is a warning (it only takes space). */
static int keep_numbered(run *r, cdl_optim *o, const train_position *pos)
{
    const cdl_train_config *c = r->cfg;
    if (!ckpt_keep_wanted(pos->step, c->keep_last, c->keep_every))
        return 0;
    char path[1100], msg[1200];
    int rc = ckpt_keep_link(c->ckpt_dir, r->last_path, pos->step, path, sizeof path);
    if (rc == 1)   /* no hard links on this file system: a copy */
        rc = train_ckpt_save(path, r->model, o, c, pos);
    if (rc == 2) {
        train_report_warning(r->rep, "%s is not a regular file: left as it is, so the "
                             "checkpoint of step %ld is not kept apart from last.safetensors "
                             "(move it away)", path, pos->step);
        rc = 0;
    }
    if (rc != 0)
        return -1;
    const char *resumed = strcmp(c->resume, "auto") && strcmp(c->resume, "never") ? c->resume
                                                                                  : NULL;
    if (ckpt_keep_prune(c->ckpt_dir, c->keep_last, c->keep_every, pos->step, resumed, msg,
                        sizeof msg) != 0)
        train_report_warning(r->rep, "%s", msg);
    return 0;
}

int loop_save(run *r, const train_position *pos, int what)
{
    int rc = 0, best = (what & SAVE_BEST) != 0;
    if (!r->cfg->ckpt_dir[0] || !what)
        return 0;
    /* The unfinished epoch's running sums over all ranks (each rank holds
     * its share): a resume on any number of ranks gives them to rank 0. */
    train_position all = *pos;
    if (r->dist && r->ri.world > 1) {
        double sums[3] = {pos->loss_sum, pos->correct, pos->seen};
        if (cdl_dist_allreduce_f64(r->dist, sums, 3) != 0)
            return -1;
        all.loss_sum = sums[0];
        all.correct = sums[1];
        all.seen = sums[2];
    }
    /* --shard-optimizer: rank 0 gathers the state (a collective). */
    cdl_optim *full = NULL;
    if (ddp_optim_gather(r->ddp, r->optim, &full) != 0)
        return -1;
    /* best.safetensors first: last.safetensors records this validation's
     * loss as the best, so once it is written a resume never writes
     * best.safetensors for it again. Were best's write to fail after last's
     * (a full disk has room for one file), the resumed run would lack the
     * best model for good (the run's end: none at all); failing first, it
     * leaves last.safetensors at the previous checkpoint, and the resumed
     * run redoes these steps and writes both. */
    if (r->ri.rank == 0) {
        if (best)
            rc = train_ckpt_save(r->best_path, r->model, full, r->cfg, &all);
        if (rc == 0 && (what & SAVE_LAST))
            rc = train_ckpt_save(r->last_path, r->model, full, r->cfg, &all);
        if (rc == 0 && (what & SAVE_LAST))
            rc = keep_numbered(r, full, &all);
        /* A quota that the numbered checkpoints fill: say which option frees it. */
        if (rc != 0 && (r->cfg->keep_last > 0 || r->cfg->keep_every > 0) &&
            strstr(cdl_last_error(), "over quota"))
            cdl_error("%s; the numbered checkpoints of --keep-last %ld --keep-every %ld take "
                      "room there too: remove old step-*.safetensors files or keep fewer",
                      cdl_last_error(), r->cfg->keep_last, r->cfg->keep_every);
    }
    ddp_optim_release(r->optim, full);
    if (what & SAVE_LAST) {
        r->saved_step = pos->step;   /* every rank: its own count of the same steps */
        r->saved_path = r->last_path;
        if (ckpt_keep_wanted(pos->step, r->cfg->keep_last, r->cfg->keep_every)) {
            r->kept[1] = r->kept[0];
            r->kept[0] = pos->step;
        }
    }
    if (best)
        r->best_written = pos->step;
    if (r->dist && r->ri.world > 1) {
        /* Everyone learns whether rank 0 succeeded, so nobody reads a file
         * that is not there or keeps training alone: a sum to which only
         * rank 0 adds (a host-memory collective; cdl_dist_broadcast takes
         * the backend's memory, a GPU's on a GPU). */
        double ok = r->ri.rank == 0 && rc == 0;
        if (cdl_dist_allreduce_f64(r->dist, &ok, 1) != 0)
            return -1;
        if (!ok && r->ri.rank != 0)
            return cdl_error("rank %d: rank 0 could not write its checkpoint %s%s%s: rank 0's "
                             "error says why and what to do", r->ri.rank,
                             what & SAVE_LAST ? r->last_path : "",
                             what == (SAVE_LAST | SAVE_BEST) ? " or " : "",
                             best ? r->best_path : "");
    }
    return rc;
}

/* Whether any rank was told to stop, so all stop at one step: carried by
 * the counted steps with NCCL, else (and during set-up, before the loop
 * exists) a host collective. The sum of the ranks' stop_flag: above the
 * world size only when rank 0's records failed, which every rank so
 * learns (r->records_failed) from the same collective. */
int train_stop_agreed(run *r)
{
    double flag;
    if (r->loop && r->loop->stop_queued)
        flag = r->loop->stop_seen;
    else {
        flag = stop_flag(r);
        if (r->dist && r->ri.world > 1 && cdl_dist_allreduce_f64(r->dist, &flag, 1) != 0)
            return -1;
    }
    r->records_failed = flag > r->ri.world + 0.5;
    return flag > 0;
}

/* A signal's stop wins over the program's when both came (a job being
 * ended wants its checkpoint and CDL_EXIT_REQUEUE). Once per run, so a
 * collective of its own rather than a code in the per-step vote. */
int train_stop_kind(run *r)
{
    double signalled = train_stop_requested() ? 1 : 0;
    if (r->dist && r->ri.world > 1 && cdl_dist_allreduce_f64(r->dist, &signalled, 1) != 0)
        return -1;
    r->stop_by_program = !(signalled > 0);
    return 0;
}

/* The stop the program asked for (should_stop): the checkpoint at this
 * step when there is a ckpt_dir, then CDL_TRAIN_STOPPED on every rank,
 * not an error with no ckpt_dir (nothing is lost that the program did not
 * want to end). */
static int program_stop(run *r, const train_position *at)
{
    const char *asked = "the program asked to stop (cdl_train_config.should_stop)";
    if (!r->cfg->ckpt_dir[0]) {
        train_report_note(r->rep, "stopped at epoch %d, batch %ld (step %ld): %s; no ckpt_dir, "
                          "nothing saved", at->epoch + 1, at->batch, at->step, asked);
        return CDL_TRAIN_STOPPED;
    }
    if (loop_save(r, at, SAVE_LAST) != 0)
        return -1;
    train_report_note(r->rep, "stopped at epoch %d, batch %ld (step %ld): %s; checkpoint "
                      "written in %s, resume \"auto\" goes on from it", at->epoch + 1, at->batch,
                      at->step, asked, r->cfg->ckpt_dir);
    return CDL_TRAIN_STOPPED;
}

/* The stop after a --metrics or --tensorboard record failed on rank 0
 * (agreed as a signal's is): the checkpoint at this step, then -1 on every
 * rank, rank 0's error saying what failed and where to go on. Not
 * CDL_EXIT_REQUEUE: a requeued run would meet the same full disk. */
static int records_stop(run *r, const train_position *at)
{
    const char *why = train_report_failed(r->rep);
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", why ? why : "rank 0 could not write a --metrics or "
             "--tensorboard record (rank 0's error says why)");
    if (!r->cfg->ckpt_dir[0])
        return cdl_error("%s: stopped at epoch %d, batch %ld (step %ld) with no --ckpt-dir: "
                         "nothing saved (give --ckpt-dir to keep a run's work)", msg, at->epoch + 1, at->batch,
                         at->step);
    if (loop_save(r, at, SAVE_LAST) != 0)
        return cdl_error("%s: stopped at epoch %d, batch %ld (step %ld), and its checkpoint "
                         "failed too: %s", msg, at->epoch + 1, at->batch, at->step,
                         cdl_last_error());
    return cdl_error("%s: stopped at epoch %d, batch %ld (step %ld) with a checkpoint in %s "
                     "(--resume auto goes on from it)", msg, at->epoch + 1, at->batch, at->step,
                     r->cfg->ckpt_dir);
}

/* After the optimizer step pos->step (counted in pos): progress, on_step,
 * the stop agreed by all ranks, --max-steps and --ckpt-every. Returns like
 * loop_epoch, 0 to go on. */
static int after_step(run *r, train_position *pos, epoch_clock *ck, cdl_train_result *res)
{
    const cdl_train_config *c = r->cfg;
    if (c->on_step)
        c->on_step(c->on_step_ctx, pos->step);
    double dt = train_now() - ck->t0;
    if (pos->seen > 0) {   /* a pipelined loop counts a step's results one step late */
        double samples, tokens, mfu;
        train_speed(r, dt > 0 ? (pos->seen - ck->seen0) * r->ri.world / dt : 0, &samples,
                    &tokens, &mfu);
        train_report_progress(r->rep, pos->epoch, pos->batch, ck->spe, pos->step,
                              pos->loss_sum / pos->seen, pos->correct / pos->seen, samples,
                              tokens);
    }
    int stop = train_stop_agreed(r);
    if (stop < 0)
        return -1;
    int max_steps = c->max_steps > 0 && pos->step >= c->max_steps;
    int ckpt = c->ckpt_every > 0 && pos->step % c->ckpt_every == 0 && pos->batch < ck->spe;
    int eval = c->eval_every > 0 && pos->step % c->eval_every == 0 && pos->batch < ck->spe &&
               !max_steps;
    if ((stop || max_steps || ckpt || eval) && flush(r, pos) != 0)
        return -1;
    if (stop) {
        /* The validation this step owes (--eval-every's, or the run's end
         * at --max-steps inside an epoch) is left to the resumed run,
         * which does it first: a signal asks for a quick exit. */
        train_position at = *pos;
        at.validation_due = eval || (max_steps && pos->batch < ck->spe);
        res->steps = pos->step;
        res->interrupted = 1;
        /* Without a checkpoint directory nothing can be resumed: a status
         * of CDL_EXIT_REQUEUE would have a requeueing script start the run
         * from its first step again, at every time limit, for ever. */
        if (r->records_failed)
            return records_stop(r, &at);
        if (train_stop_kind(r) != 0)
            return -1;
        if (r->stop_by_program) {
            res->interrupted = 2;
            return program_stop(r, &at);
        }
        if (!c->ckpt_dir[0]) {
            cdl_error("stopped by a signal (SIGUSR1 or SIGTERM) at epoch %d, batch %ld (step %ld) "
                      "with no --ckpt-dir: nothing saved, and a restart would begin at step 1; "
                      "give --ckpt-dir to keep the work of a run that is stopped",
                      pos->epoch + 1, pos->batch, pos->step);
            return -1;
        }
        if (loop_save(r, &at, SAVE_LAST) != 0)
            return -1;
        train_report_note(r->rep, "stopped by signal at epoch %d, batch %ld (step %ld): "
                          "checkpoint written, resume with --resume auto",
                          pos->epoch + 1, pos->batch, pos->step);
        return CDL_EXIT_REQUEUE;
    }
    if (max_steps)
        return EPOCH_MAX_STEPS;
    /* The steps are all counted (flushed): from here the time is no
     * training's, and the rates (the progress line, step and epoch
     * records' samples, tokens/s and MFU) leave it out, as they leave out
     * the epoch's end. Counted, a validation of 1000 batches made the
     * next step record's throughput a fraction of the real one. */
    double paused = train_now();
    int save = ckpt ? SAVE_LAST : 0;
    if (eval && loop_eval(r, pos, &save) != 0)
        return -1;
    /* After the validation: last.safetensors then holds its lowest loss,
     * and a resumed run does not take a worse model for a better one. */
    if (loop_save(r, pos, save) != 0)
        return -1;
    paused = train_now() - paused;
    ck->t0 += paused;
    r->loop->win_t0 += paused;
    return 0;
}

int loop_eval(run *r, train_position *pos, int *save)
{
    /* --eval-every: validation in the middle of an epoch (the epoch's end
     * has its own); it changes no state training reads. A new lowest loss
     * writes best.safetensors, as at an epoch's end: a long run on a large
     * corpus may end no epoch before its last step. */
    double loss, acc;
    if (train_evaluate(r, r->val_loader, &loss, &acc) != 0 ||
        train_report_eval(r->rep, pos->epoch, pos->step, loss, acc) != 0)
        return -1;
    if (loss < pos->best_val_loss) {
        pos->best_val_loss = loss;
        *save |= SAVE_BEST;
    }
    return 0;
}

int loop_epoch(run *r, train_position *pos, epoch_clock *ck, cdl_train_result *res)
{
    train_loop *g = r->loop;
    /* Steps left in flight after queueing one: the one before it on an
     * asynchronous backend, none on a synchronous one. */
    int in_flight = g->async ? 1 : 0;
    /* Step records cover this epoch's training only, not validation. */
    g->win_loss = g->win_correct = g->win_seen = 0;
    g->win_t0 = train_now();
    cdl_batch b;
    int got = cdl_loader_next(r->train_loader, &b);
    int s = lag_free_slot(&g->lag);
    if (got == 1 && stage(r, &b, s) != 0)
        return -1;
    while (got == 1) {
        long index = b.index;
        int ends = train_micro_begin(r, index, ck->spe, cdl_loader_samples(r->train_loader));
        if (queue_step(r, s, b.n, pos->step, ends) != 0 ||
            lag_push(&g->lag, s, pos->step, b.n) != 0)
            return -1;
        pos->step += ends;
        pos->batch = index + 1;
        /* The previous step's results, while this one runs. */
        while (g->lag.count > in_flight)
            if (count_oldest(r, pos) != 0)
                return -1;
        int rc = ends ? after_step(r, pos, ck, res) : 0;
        if (rc != 0)
            return rc;
        got = cdl_loader_next(r->train_loader, &b);
        if (got != 1)
            break;
        /* At most this step is in flight: the other slot is free. */
        if ((s = lag_free_slot(&g->lag)) < 0)
            return cdl_error("training loop: no free buffer slot for step %ld (a bug in "
                             "lib/train/loop.c)", pos->step);
        if (stage(r, &b, s) != 0)
            return -1;
    }
    if (got < 0)
        return -1;
    return flush(r, pos);
}
