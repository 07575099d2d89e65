/* The host-side logic of the GPU training pipeline (lib/train/pipeline.c),
 * without a GPU: buffer slots of the steps in flight, results one step
 * late, the batch sums, the divergence message, when steps run as CUDA
 * graphs, and which GPU a rank opens. */
#include "testutil.h"

#include <stdlib.h>
#include <string.h>

#include <cdl/cdl.h>

#include "lib/train/pipeline.h"

static void expect_error(const char *needle)
{
    if (!strstr(cdl_last_error(), needle))
        fail_msg("error '%s' lacks '%s'", cdl_last_error(), needle);
}

static void test_lag_slots(void **state)
{
    (void)state;
    step_lag l;
    long step;
    int n;
    lag_init(&l);
    assert_int_equal(lag_oldest(&l, &step, &n), -1);
    assert_int_equal(lag_free_slot(&l), 0);
    /* With nothing in flight the first slot is the one to fill. */
    assert_int_equal(lag_push(&l, 1, 9, 64), -1);
    assert_int_equal(lag_push(&l, 0, 10, 64), 0);
    assert_int_equal(lag_free_slot(&l), 1);
    assert_int_equal(lag_push(&l, 0, 11, 64), -1);   /* step 10 still owns it */
    expect_error("in use");
    assert_int_equal(lag_push(&l, 1, 11, 17), 0);
    assert_int_equal(lag_free_slot(&l), -1);
    assert_int_equal(lag_push(&l, 1, 12, 64), -1);
    expect_error("both are in use");
    /* Read in step order; each read frees that step's slot. */
    assert_int_equal(lag_oldest(&l, &step, &n), 0);
    assert_true(step == 10 && n == 64);
    lag_pop(&l);
    assert_int_equal(lag_free_slot(&l), 0);
    assert_int_equal(lag_oldest(&l, &step, &n), 1);
    assert_true(step == 11 && n == 17);
    assert_int_equal(lag_push(&l, 0, 12, 64), 0);
    assert_int_equal(lag_oldest(&l, &step, NULL), 1);
    assert_int_equal(step, 11);
    lag_pop(&l);
    lag_pop(&l);
    assert_int_equal(l.count, 0);
    lag_pop(&l);   /* nothing in flight: no effect */
    assert_int_equal(l.count, 0);
    assert_int_equal(lag_free_slot(&l), 0);
}

/* The schedule of loop_epoch (lib/train/loop.c) over an epoch: queue step k, read every
 * step but the newest, sometimes everything (a checkpoint), stage the next
 * batch into the free slot. Every step is read once, in order, one step
 * late except where flushed, and no batch is staged into a slot whose step
 * is still in flight. */
static void test_lag_schedule(void **state)
{
    (void)state;
    step_lag l;
    lag_init(&l);
    int owner[2] = {-1, -1};   /* step in flight per slot, -1 none */
    long next_read = 0;
    int slot = lag_free_slot(&l);
    for (long k = 0; k < 9; k++) {
        assert_int_equal(owner[slot], -1);        /* staged into a free slot */
        assert_int_equal(lag_push(&l, slot, k, (int)k + 1), 0);
        owner[slot] = (int)k;
        int flush = k % 4 == 3;                   /* e.g. --ckpt-every 4 */
        while (l.count > (flush ? 0 : 1)) {
            long step;
            int n;
            int s = lag_oldest(&l, &step, &n);
            assert_int_equal(step, next_read++);
            assert_int_equal(n, (int)step + 1);
            assert_int_equal(owner[s], (int)step);
            owner[s] = -1;
            lag_pop(&l);
        }
        assert_int_equal(next_read, flush ? k + 1 : k);   /* one step late */
        slot = lag_free_slot(&l);
        assert_true(slot >= 0);
    }
    assert_int_equal(l.count, 1);   /* the epoch's end flushes the last */
}

static void test_batch_sums(void **state)
{
    (void)state;
    const float loss[] = {0.5f, 1.25f, 2.0f, 0.25f};
    const int32_t pred[] = {1, 2, 3, 4}, labels[] = {1, 0, 3, 0};
    double s, c;
    train_batch_sums(loss, pred, labels, 4, &s, &c);
    assert_true(s == 4.0 && c == 2.0);
    train_batch_sums(loss, pred, labels, 1, &s, &c);
    assert_true(s == 0.5 && c == 1.0);
    const float bad[] = {1.0f, NAN};
    train_batch_sums(bad, pred, labels, 2, &s, &c);
    assert_true(isnan(s));
}

static void test_loss_error(void **state)
{
    (void)state;
    /* Named as the records name it: index 40 is step 41 (it said 40,
     * one before the step record of the same step). A NaN is "nan", not
     * glibc's "-nan". */
    assert_int_equal(train_loss_error(3, INFINITY, 40, 0, NULL), -1);
    expect_error("rank 3: loss is inf at step 41: training diverged");
    expect_error("no checkpoint to resume from: start again with a lower --lr or --clip-grad 1");
    assert_null(strstr(cdl_last_error(), "late"));
    /* No checkpoint, but --clip-grad on: the advice is only the rate (it
     * said "or --clip-grad 1" to a run clipping at 1 already). */
    diverge_hint h = {.clipping = 1};
    assert_int_equal(train_loss_error(3, INFINITY, 40, 0, &h), -1);
    expect_error("no checkpoint to resume from: start again with a lower --lr");
    assert_null(strstr(cdl_last_error(), "clip"));
    h = (diverge_hint){.last = "runs/a/last.safetensors", .last_step = 39};
    assert_int_equal(train_loss_error(0, -NAN, 40, 1, &h), -1);
    expect_error("loss is nan at step 41 (noticed one step late");
    expect_error("step 42 was already queued");
    expect_error("resume from the last checkpoint, runs/a/last.safetensors (step 39), with a "
                 "lower learning rate (--lr X --resume-allow lr), or with the gradient norm "
                 "clipped (--clip-grad 1 --resume-allow clip-grad)");
    /* Clipping already: only the learning rate is left to lower. */
    h.clipping = 1;
    assert_int_equal(train_loss_error(0, NAN, 40, 0, &h), -1);
    assert_null(strstr(cdl_last_error(), "clip"));
    /* last holds the weights whose loss this is: a resume from it fails at
     * once, whatever --lr (it was the advice, and failed the same way). */
    h = (diverge_hint){.last = "c/last.safetensors", .last_step = 40};
    assert_int_equal(train_loss_error(0, NAN, 40, 0, &h), -1);
    expect_error("the last checkpoint, c/last.safetensors, holds the weights of step 40 that "
                 "gave this loss, so a resume from it fails here again whatever the learning "
                 "rate, and no earlier checkpoint is kept (--keep-last N keeps some): start "
                 "again with a lower --lr or --clip-grad 1 (--resume never)");
    h.earlier = "c/step-00000030.safetensors";
    h.earlier_step = 30;
    assert_int_equal(train_loss_error(0, NAN, 40, 0, &h), -1);
    expect_error("resume from an earlier one, --resume c/step-00000030.safetensors (step 30), "
                 "with a lower learning rate (--lr X --resume-allow lr)");
    /* The first step's loss comes before any update: not the rate. */
    assert_int_equal(train_loss_error(0, INFINITY, 0, 0, NULL), -1);
    expect_error("loss is inf at step 1: training diverged; this is the first step's loss, "
                 "before any update, so not the learning rate's doing");
    assert_null(strstr(cdl_last_error(), "--lr"));
    /* An evaluation's loss is no step's: the message says so. */
    assert_int_equal(train_eval_loss_error(1, NAN, NULL), -1);
    expect_error("rank 1: the loss of an evaluation batch is nan: the weights have diverged");
    assert_null(strstr(cdl_last_error(), "step"));
    h = (diverge_hint){.last = "c/last.safetensors", .last_step = 7};
    assert_int_equal(train_eval_loss_error(1, NAN, &h), -1);
    expect_error("diverged; resume from the last checkpoint, c/last.safetensors (step 7), with a "
                 "lower");
}

/* --clip-grad's non-finite norm stops the run as a non-finite loss does,
 * with the same advice: the weights of the step gave the gradient, so a
 * last.safetensors of that step is no place to resume from. */
static void test_norm_error(void **state)
{
    (void)state;
    diverge_hint h = {.last = "c/last.safetensors", .last_step = 40, .clipping = 1,
                      .earlier = "c/step-00000030.safetensors", .earlier_step = 30};
    assert_int_equal(train_norm_error(2, INFINITY, 1.0f, 40, 0, &h), -1);
    expect_error("rank 2: the gradient norm is inf at step 41, which --clip-grad 1 cannot clip: "
                 "training diverged (the update was skipped); the last checkpoint, "
                 "c/last.safetensors, holds the weights of step 40 that gave this gradient, so "
                 "a resume from it fails here again whatever the learning rate: resume from an "
                 "earlier one, --resume c/step-00000030.safetensors (step 30), with a lower "
                 "learning rate (--lr X --resume-allow lr)");
    assert_null(strstr(cdl_last_error(), "--clip-grad 1 --resume-allow"));
    /* On the GPU the norm is read with the step's results; the update was
     * held on the device (hold_updates), so it was skipped there too. */
    h = (diverge_hint){.last = "c/last.safetensors", .last_step = 39, .clipping = 1};
    assert_int_equal(train_norm_error(0, -NAN, 0.5f, 40, 1, &h), -1);
    expect_error("the gradient norm is nan at step 41 (noticed one step late");
    expect_error("--clip-grad 0.5 cannot clip: training diverged (the update was skipped); "
                 "resume from the last checkpoint, c/last.safetensors (step 39)");
    assert_int_equal(train_norm_error(0, NAN, 1.0f, 0, 0, NULL), -1);
    expect_error("this is the first step's gradient, before any update");
}

static void graphs(int setting, const char *env, int cuda, int world, int want_on,
                   const char *want_why)
{
    int on = -1;
    const char *why = "unset";
    assert_int_equal(train_graphs_decide(setting, env, cuda, world, &on, &why), 0);
    assert_int_equal(on, want_on);
    if (want_why)
        assert_string_equal(why, want_why);
    else
        assert_null(why);
}

static void test_graphs_decide(void **state)
{
    (void)state;
    graphs(0, NULL, 1, 1, 1, NULL);                          /* the default on a GPU */
    graphs(0, "", 1, 1, 1, NULL);
    graphs(0, "OFF", 1, 1, 0, "CDL_CUDA_GRAPHS=off");
    graphs(1, "off", 1, 1, 1, NULL);                         /* the option wins */
    graphs(-1, "on", 1, 1, 0, "--cuda-graphs off");
    graphs(0, "on", 1, 4, 0, "data-parallel steps run eagerly");
    graphs(1, NULL, 0, 1, 0, "not a CUDA backend");
    int on;
    const char *why;
    assert_int_equal(train_graphs_decide(0, "maybe", 1, 1, &on, &why), -1);
    expect_error("CDL_CUDA_GRAPHS 'maybe'");
    assert_int_equal(on, 0);
}

static void test_graph_step(void **state)
{
    (void)state;
    assert_false(train_graph_step(1, 0, 64, 64));   /* the eager warm-up step */
    assert_true(train_graph_step(1, 1, 64, 64));
    assert_false(train_graph_step(1, 1, 17, 64));   /* the partial last batch */
    assert_false(train_graph_step(0, 1, 64, 64));
}

static void pick(int visible, int world, int local, int rpg, int want)
{
    int dev = 99;
    assert_int_equal(train_pick_gpu(visible, world, local, rpg, &dev), 0);
    assert_int_equal(dev, want);
}

static void test_pick_gpu(void **state)
{
    (void)state;
    pick(8, 1, 0, 1, -1);   /* alone: the first visible GPU */
    pick(0, 4, 2, 1, -1);   /* none: the backend reports it */
    pick(1, 4, 3, 1, 0);    /* the launcher narrowed CUDA_VISIBLE_DEVICES */
    pick(4, 4, 3, 1, 3);
    pick(2, 4, 3, 2, 1);    /* two replicas per GPU */
    pick(2, 8, 7, 4, 1);
    int dev;
    assert_int_equal(train_pick_gpu(2, 8, 4, 2, &dev), -1);
    expect_error("LOCAL_RANK=4 with CDL_REPLICAS_PER_GPU=2 needs GPU 2, but only 2 are visible");
    /* srun --gpus-per-task=2 --cdl-ddp, 4 tasks: each sees its own two
     * GPUs and the contract says so; ranks 2 and 3 failed, needing GPU 2. */
    assert_int_equal(setenv("CDL_GPU_BIND", "task", 1), 0);
    pick(2, 4, 2, 1, 0);
    pick(2, 4, 3, 1, 0);
    pick(2, 1, 0, 1, -1);   /* alone: as before */
    /* The public rule that cdl-eval, cdl-predict and cdl-generate take
     * (they opened LOCAL_RANK % visible: this task's second GPU). */
    cdl_rank_info ri = {.rank = 3, .world = 4, .local_rank = 3, .local_world = 4,
                        .replicas_per_gpu = 1};
    assert_int_equal(cdl_rank_gpu(&ri, 2, &dev), 0);
    assert_int_equal(dev, 0);
    assert_int_equal(unsetenv("CDL_GPU_BIND"), 0);
    /* Packed replicas: the slot, LOCAL_RANK / CDL_REPLICAS_PER_GPU. */
    ri.local_rank = 1;
    ri.replicas_per_gpu = 2;
    assert_int_equal(cdl_rank_gpu(&ri, 2, &dev), 0);
    assert_int_equal(dev, 0);
    assert_int_equal(cdl_rank_gpu(NULL, 2, &dev), 0);
    assert_int_equal(dev, -1);
    assert_int_equal(train_pick_gpu(2, 4, 2, 1, &dev), -1);
    expect_error("LOCAL_RANK=2 with CDL_REPLICAS_PER_GPU=1 needs GPU 2, but only 2 are visible");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lag_slots),
        cmocka_unit_test(test_lag_schedule),
        cmocka_unit_test(test_batch_sums),
        cmocka_unit_test(test_loss_error),
        cmocka_unit_test(test_norm_error),
        cmocka_unit_test(test_graphs_decide),
        cmocka_unit_test(test_graph_step),
        cmocka_unit_test(test_pick_gpu),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
