/* The signal tests of tests/unit/test_train.c, unchanged, on the fake GPU:
 * SIGUSR1 after a step inside an epoch, at an epoch's last step, at the
 * --max-steps that is also an epoch's last, and at a step that owes a
 * validation (--eval-every's, or the run's end at --max-steps inside an
 * epoch), and should_stop's stop, which rides the same vote; and
 * test_checkpoint_cadence (--ckpt-every, --eval-every's
 * best.safetensors). The configs' device is auto, which picks the (fake)
 * GPU here, so the pipelined GPU loop (results counted one step late, CUDA
 * graphs, the steps in flight counted before the checkpoint) must stop,
 * checkpoint and resume to the weights, best.safetensors and records of
 * the run that was not signalled, as the CPU's loop does in
 * tests/unit/test_train. */
int test_train_main(void);
#define main test_train_main
#include "tests/unit/test_train.c"
#undef main
#include "unit_scope.h"

int main(void)
{
    if (fakegpu_skip_in_unit_pass())   /* 30 s on the fake GPU */
        return 77;
    /* Without a GPU device auto trains on the CPU: the test would prove
     * nothing about the GPU loop. */
    if (cdl_backend_cuda_device_count() < 1) {
        fprintf(stderr, "test_train_signals: the fake GPU is not visible (CDL_FAKE_GPUS)\n");
        return 1;
    }
    cmocka_set_test_filter("test_signal*");
    int rc = test_train_main();
    /* --ckpt-every's and --eval-every's checkpoints, at the steps they
     * are due (probed from on_step, one step on). */
    cmocka_set_test_filter("test_checkpoint_cadence");
    return rc | test_train_main();
}
