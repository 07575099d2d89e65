/* Host-side decisions of the GPU training pipeline (pipeline.c): which
 * buffers a step may fill, which step's results are read when, when a step
 * runs as a CUDA graph, which GPU a rank opens. Pure functions of their
 * arguments, so the logic is tested without a GPU (tests/unit/test_pipeline.c);
 * loop.c drives the backend with them. */
#ifndef CDL_TRAIN_PIPELINE_H
#define CDL_TRAIN_PIPELINE_H

#include <stdint.h>

/* Steps whose per-sample results are still on their way to the host. Each
 * step owns one of two buffer slots (pinned batch staging, device input,
 * pinned loss and predictions) from when its batch is staged until its
 * results are read: at most two steps are in flight, the one just queued and
 * the one before it, and results are read in step order. */
typedef struct step_lag {
    int count;          /* steps in flight: 0, 1 or 2 */
    int oldest;         /* slot of the oldest one (count > 0) */
    long step[2];       /* per slot: the step's number and samples */
    int n[2];
} step_lag;

void lag_init(step_lag *l);
/* The slot the next step may fill: one no step in flight owns; -1 when
 * both are owned (read the oldest first). */
int lag_free_slot(const step_lag *l);
/* Step `step` of n samples now owns `slot`; -1 with cdl_error if the slot is
 * not free (a pipeline bug: the buffers would be overwritten in flight). */
int lag_push(step_lag *l, int slot, long step, int n);
/* The oldest step in flight: its slot (and number, samples), -1 if none. */
int lag_oldest(const step_lag *l, long *step, int *n);
/* Its results have been read: its slot is free again. */
void lag_pop(step_lag *l);

/* The loss and correct predictions of one batch's n rows (samples, or
 * samples x positions of a language model), added in row order (the epoch
 * metrics are sums of these, the same on every backend). Rows with an
 * ignored label (< 0) count nowhere; returns the rows counted. */
long train_batch_sums(const float *loss, const int32_t *pred, const int32_t *labels, int n,
                      double *loss_sum, double *correct);
/* The rows of labels[0..n) that are not ignored (>= 0). */
long train_valid_rows(const int32_t *labels, int n);

/* The checkpoints a diverged run can go back to (diverged.c finds them;
 * NULL pointers: none). last: DIR/last.safetensors, holding the weights
 * after last_step steps; earlier: the newest checkpoint of the directory
 * of a step before the loss went wrong, when last's is not (best, or a
 * step-N.safetensors of --keep-last/--keep-every); clipping: --clip-grad
 * is on already. */
typedef struct diverge_hint {
    const char *last;
    long last_step;
    const char *earlier;
    long earlier_step;
    int clipping;
} diverge_hint;

/* The error for a non-finite batch loss of the step with 0-based index
 * step (named step + 1, as the records count steps done). late: it was
 * noticed after the next step had already been queued (the GPU pipeline
 * reads results one step late), which the message says. h: where to go
 * on from (NULL, or last NULL: no checkpoint). The loss of step `step` comes from the
 * weights after `step` steps: a last.safetensors of that step holds them,
 * and a resume from it fails at the same step whatever the learning
 * rate, so the message names an earlier checkpoint then. Returns -1. */
int train_loss_error(int rank, double loss, long step, int late, const diverge_hint *h);
/* The same for a non-finite global gradient norm of --clip-grad
 * (max_norm) at the step with 0-based index step: PyTorch's
 * clip_grad_norm_(error_if_nonfinite=True). Clipping cannot rescue it (the
 * coefficient of an infinite norm is 0, and 0 times infinity is NaN; that
 * of a NaN norm is NaN), so the run stops as for a non-finite loss, with
 * the same advice; the weights of `step` gave the gradient, so a
 * last.safetensors of that step is not the one to resume from. The update
 * of that step was skipped: on the host before it, or on the GPU, where the
 * norm is read with the step's results, held on the device (backend.h's
 * hold_updates). Returns -1. */
int train_norm_error(int rank, double norm, float max_norm, long step, int late,
                     const diverge_hint *h);
/* The same for a batch of an evaluation (validation or test): not a
 * step's loss, but the weights' outputs overflowed. Returns -1. */
int train_eval_loss_error(int rank, double loss, const diverge_hint *h);

/* Whole-step CUDA graphs for this run. setting: --cuda-graphs (1 on, -1
 * off, 0 not given); env: CDL_CUDA_GRAPHS (on|off, NULL or "" unset).
 * *on: graphs are used (a CUDA backend, one rank, not switched off); *why:
 * a short reason when they are not. -1 with cdl_error for a bad env value. */
int train_graphs_decide(int setting, const char *env, int is_cuda, int world, int *on,
                        const char **why);

/* Whether a step runs as a graph: graphs on, an eager full step ran before
 * in this process (cuDNN and cuBLAS settle their plans), and the batch is
 * full (the graph's shape; the last partial batch runs eagerly). */
int train_graph_step(int graphs_on, int warmed_up, int n, int batch_size);

/* cdl_rank_gpu (lib/cdl/dist.h) of a rank given by its numbers. */
int train_pick_gpu(int visible, int world, int local_rank, int replicas_per_gpu, int *device);

#endif
