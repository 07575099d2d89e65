/* Host-side decisions of the GPU training pipeline (see pipeline.h). */
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <cdl/cdl.h>

#include "../dist/gpu_group.h"
#include "pipeline.h"

void lag_init(step_lag *l)
{
    memset(l, 0, sizeof *l);
}

int lag_free_slot(const step_lag *l)
{
    if (l->count == 0)
        return 0;
    return l->count == 1 ? 1 - l->oldest : -1;
}

int lag_push(step_lag *l, int slot, long step, int n)
{
    if (slot < 0 || slot > 1 || slot != lag_free_slot(l))
        return cdl_error("GPU pipeline: step %ld wants buffer slot %d, but %s: its batch would "
                         "overwrite one still in flight (a bug in lib/train/loop.c)",
                         step, slot, l->count == 2 ? "both are in use" : "that one is in use");
    if (l->count == 0)
        l->oldest = slot;
    l->step[slot] = step;
    l->n[slot] = n;
    l->count++;
    return 0;
}

int lag_oldest(const step_lag *l, long *step, int *n)
{
    if (l->count == 0)
        return -1;
    if (step)
        *step = l->step[l->oldest];
    if (n)
        *n = l->n[l->oldest];
    return l->oldest;
}

void lag_pop(step_lag *l)
{
    if (l->count == 0)
        return;
    l->count--;
    l->oldest = 1 - l->oldest;
}

long train_batch_sums(const float *loss, const int32_t *pred, const int32_t *labels, int n,
                      double *loss_sum, double *correct)
{
    double s = 0, c = 0;
    long valid = 0;
    for (int i = 0; i < n; i++) {
        if (labels[i] < 0)
            continue;
        s += loss[i];
        c += pred[i] == labels[i];
        valid++;
    }
    *loss_sum = s;
    *correct = c;
    return valid;
}

long train_valid_rows(const int32_t *labels, int n)
{
    long valid = 0;
    for (int i = 0; i < n; i++)
        valid += labels[i] >= 0;
    return valid;
}

/* What a diverged run does next. No checkpoint holds non-finite weights
 * (checkpoint.c refuses them), but the last one may hold the weights whose
 * loss overflowed (a checkpoint every step, or one at the step before):
 * a resume from it fails again at once, so another is named. */
static const char *resume_todo(char *buf, size_t len, long step, const diverge_hint *h,
                               const char *what)
{
    const char *clip = h && h->clipping ? ""
                                        : ", or with the gradient norm clipped (--clip-grad 1 "
                                          "--resume-allow clip-grad)";
    const char *clip_new = h && h->clipping ? "" : " or --clip-grad 1";
    if (step == 0)   /* no update yet: the learning rate played no part */
        snprintf(buf, len, "this is the first step's %s, before any update, so not the "
                 "learning rate's doing: the initial weights (--init's file) or the data give "
                 "it (inputs of a huge magnitude? check the data's values and --normalize)",
                 what);
    else if (!h || !h->last)
        snprintf(buf, len, "no checkpoint to resume from: start again with a lower --lr%s",
                 clip_new);
    else if (h->last_step < step)
        snprintf(buf, len, "resume from the last checkpoint, %s (step %ld), with a lower "
                 "learning rate (--lr X --resume-allow lr)%s", h->last, h->last_step, clip);
    else if (h->earlier)
        snprintf(buf, len, "the last checkpoint, %s, holds the weights of step %ld that gave "
                 "this %s, so a resume from it fails here again whatever the learning "
                 "rate: resume from an earlier one, --resume %s (step %ld), with a lower "
                 "learning rate (--lr X --resume-allow lr)%s", h->last, h->last_step, what,
                 h->earlier, h->earlier_step, clip);
    else
        snprintf(buf, len, "the last checkpoint, %s, holds the weights of step %ld that gave "
                 "this %s, so a resume from it fails here again whatever the learning "
                 "rate, and no earlier checkpoint is kept (--keep-last N keeps some): start "
                 "again with a lower --lr%s (--resume never)", h->last, h->last_step, what,
                 clip_new);
    return buf;
}

/* "nan", "inf" or "-inf" (glibc prints a NaN with its sign bit, "-nan"). */
static double shown(double loss)
{
    return isnan(loss) ? NAN : loss;
}

/* " (noticed one step late: ...)" for a check of step + 1 read a step
 * late (GPU pipelining), else "". */
static void late_note(char *where, size_t len, long step, int late)
{
    if (late)
        snprintf(where, len, " (noticed one step late: GPU steps are pipelined, step %ld "
                 "was already queued)", step + 2);
    else
        where[0] = 0;
}

int train_loss_error(int rank, double loss, long step, int late, const diverge_hint *h)
{
    /* Counted as every record counts: step k + 1 is the one after k done. */
    char where[96], todo[5000];
    late_note(where, sizeof where, step, late);
    return cdl_error("rank %d: loss is %g at step %ld%s: training diverged; %s", rank,
                     shown(loss), step + 1, where, resume_todo(todo, sizeof todo, step, h, "loss"));
}

int train_norm_error(int rank, double norm, float max_norm, long step, int late,
                     const diverge_hint *h)
{
    char where[96], todo[5000];
    late_note(where, sizeof where, step, late);
    return cdl_error("rank %d: the gradient norm is %g at step %ld%s, which --clip-grad %g "
                     "cannot clip: training diverged (the update was skipped); %s", rank,
                     shown(norm), step + 1, where, (double)max_norm,
                     resume_todo(todo, sizeof todo, step, h, "gradient"));
}

int train_eval_loss_error(int rank, double loss, const diverge_hint *h)
{
    char todo[5000];
    /* Not the loss of a step: the checkpoint is from before these weights
     * went wrong only as far as the caller knows (last_step < LONG_MAX). */
    return cdl_error("rank %d: the loss of an evaluation batch is %g: the weights have diverged; "
                     "%s", rank, shown(loss), resume_todo(todo, sizeof todo, LONG_MAX, h, "loss"));
}

int train_graphs_decide(int setting, const char *env, int is_cuda, int world, int *on,
                        const char **why)
{
    int want = setting;
    *on = 0;
    *why = NULL;
    if (env && *env) {
        int e = !strcasecmp(env, "on") ? 1 : !strcasecmp(env, "off") ? -1 : 0;
        if (!e)
            return cdl_error("CDL_CUDA_GRAPHS '%s': use on or off (or unset it: on for CUDA)",
                             env);
        if (!want)
            want = e;
    }
    if (!is_cuda)
        *why = "not a CUDA backend";
    else if (want < 0)
        *why = setting < 0 ? "--cuda-graphs off" : "CDL_CUDA_GRAPHS=off";
    else if (world > 1)
        *why = "data-parallel steps run eagerly";
    else
        *on = 1;
    return 0;
}

int train_graph_step(int graphs_on, int warmed_up, int n, int batch_size)
{
    return graphs_on && warmed_up && n == batch_size;
}

int train_pick_gpu(int visible, int world, int local_rank, int rpg, int *device)
{
    cdl_rank_info ri = {.world = world, .local_rank = local_rank, .replicas_per_gpu = rpg};
    return cdl_rank_gpu(&ri, visible, device);
}
