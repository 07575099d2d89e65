/* The data-parallel should_stop tests of tests/unit/test_train_stop.c on
 * two fake GPUs with NCCL: there the stop vote rides with the queued
 * steps (no host collective per step) and results are counted one step
 * late (so the stop comes two steps after the step on_step reported, not
 * at it as on the CPU), yet rank 1's should_stop alone must stop both
 * ranks at one step, with rank 0's checkpoint of it, CDL_TRAIN_STOPPED on
 * both; and a signal at the same step wins (CDL_EXIT_REQUEUE). */
#define STOP_DEVICE "cuda"
#define STOP_DIST "nccl"
/* Asked when step 3 is counted, with step 4 already queued: the vote rides
 * with the next step queued, 5, and is read when 5 is counted. */
#define STOP_STEP 5
int test_train_stop_main(void);
#define main test_train_stop_main
#include "tests/unit/test_train_stop.c"
#undef main
#include "unit_scope.h"

int main(void)
{
    if (fakegpu_skip_in_unit_pass())
        return 77;
    setenv("CDL_FAKE_GPUS", "2", 1);   /* one per rank */
    return test_train_stop_main();
}
