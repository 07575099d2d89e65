/* What cdl-train writes for TensorBoard (--tensorboard DIR, rank 0): the
 * run's hyper-parameters (hparams plugin) at start, scalars per step
 * record (--metrics-every) and per epoch, each flushed as it is written:
 * TensorBoard shows a running job (a language model's may never end an
 * epoch), and a job killed mid-epoch keeps them. */
#include <math.h>
#include <stdio.h>

#include "metrics.h"
#include "report.h"
#include "tfevents.h"

/* The metrics the hparams dashboard compares runs by: the epochs', and
 * the --eval-every validations' and step records' for runs measured in
 * steps (a language model on a large corpus ends no epoch: its sessions
 * showed no metric at all). */
static const char *const compared[] = {"epoch/val_loss", "epoch/val_accuracy",
                                       "epoch/train_loss", "epoch/train_accuracy",
                                       "eval/val_loss", "eval/val_accuracy", "step/loss", NULL};

int tboard_start(tfev *w, const cdl_train_config *c, const run_info *ri)
{
    int accum = c->accum_steps > 1 ? c->accum_steps : 1;
    const tfev_hparam hp[] = {
        {"model", c->model, 0},
        {"dataset", c->dataset, 0},
        {"optimizer", cdl_optim_kind_name(c->optim.kind), 0},
        {"schedule", cdl_sched_kind_name(c->schedule), 0},
        {"lr", NULL, c->lr},
        {"batch_size", NULL, c->batch_size},
        /* Samples per optimizer step: every rank's micro-batches (with
         * --accum-steps 4 it said a quarter of the real one). */
        {"accum_steps", NULL, accum},
        {"global_batch_size", NULL, (double)c->batch_size * accum * ri->world},
        {"epochs", NULL, c->epochs},
        {"momentum", NULL, c->optim.momentum},
        {"weight_decay", NULL, c->optim.weight_decay},
        {"warmup_epochs", NULL, c->warmup_epochs},
        /* A schedule in steps (--warmup-steps, --decay-steps, --min-lr), the
         * run's length and clipping: what runs measured in steps differ by. */
        {"warmup_steps", NULL, (double)c->warmup_steps},
        {"decay_steps", NULL, (double)c->decay_steps},
        {"min_lr", NULL, c->min_lr},
        {"max_steps", NULL, (double)c->max_steps},
        {"clip_grad", NULL, c->clip_grad},
        {"seed", NULL, (double)c->seed},
        {"world", NULL, ri->world},
        {"backend", ri->backend, 0},
        {"run_id", ri->run_id, 0},
    };
    /* The resumed run writes its steps from start_step + 1 again: a run
     * killed after its last checkpoint had written some of them (two
     * lines over those steps in TensorBoard without this). */
    if (tfev_session_start(w, ri->start_step + 1) != 0 ||
        tfev_hparams(w, hp, (int)(sizeof hp / sizeof hp[0]), compared, ri->run_id) != 0)
        return -1;
    return tfev_flush(w);
}

int tboard_step(tfev *w, const step_stats *s)
{
    if (tfev_scalar(w, "step/loss", s->step, s->loss) || tfev_scalar(w, "step/accuracy", s->step, s->acc) ||
        tfev_scalar(w, "step/lr", s->step, s->lr) ||
        tfev_scalar(w, "step/samples_per_sec", s->step, s->samples_per_sec))
        return -1;
    if (s->tokens_per_sec > 0 &&
        (tfev_scalar(w, "step/tokens_per_sec", s->step, s->tokens_per_sec) ||
         (isfinite(s->mfu) && tfev_scalar(w, "step/mfu", s->step, s->mfu))))
        return -1;
    /* NaN or inf at the step where training diverged: a point there. */
    if ((s->grad_norm_taken || isfinite(s->grad_norm)) &&
        tfev_scalar(w, "step/grad_norm", s->step, s->grad_norm))
        return -1;
    return tfev_flush(w);
}

int tboard_eval(tfev *w, long step, double loss, double acc)
{
    if (tfev_scalar(w, "eval/val_loss", step, loss) ||
        tfev_scalar(w, "eval/val_accuracy", step, acc))
        return -1;
    return tfev_flush(w);
}

int tboard_epoch(tfev *w, const epoch_stats *s)
{
    long x = s->step;   /* the x axis of every chart: optimizer steps */
    if (tfev_scalar(w, "epoch/train_loss", x, s->train_loss) ||
        tfev_scalar(w, "epoch/train_accuracy", x, s->train_acc) ||
        tfev_scalar(w, "epoch/val_loss", x, s->val_loss) ||
        tfev_scalar(w, "epoch/val_accuracy", x, s->val_acc) ||
        tfev_scalar(w, "epoch/lr", x, s->lr) ||
        tfev_scalar(w, "epoch/samples_per_sec", x, s->samples_per_sec) ||
        tfev_scalar(w, "epoch/epoch", x, s->epoch + 1))
        return -1;
    /* The older tag where samples are pictures or rows (a sequence model's
     * are windows, which it misnamed). */
    if (!(s->tokens_per_sec > 0) &&
        tfev_scalar(w, "epoch/images_per_sec", x, s->samples_per_sec))
        return -1;
    if (s->tokens_per_sec > 0 &&
        (tfev_scalar(w, "epoch/tokens_per_sec", x, s->tokens_per_sec) ||
         (isfinite(s->mfu) && tfev_scalar(w, "epoch/mfu", x, s->mfu))))
        return -1;
    return tfev_flush(w);
}

int tboard_test(tfev *w, long step, double loss, double acc)
{
    if (tfev_scalar(w, "test/loss", step, loss) || tfev_scalar(w, "test/accuracy", step, acc))
        return -1;
    return tfev_flush(w);
}
