/* Which task ends stop a --cdl-ddp step (spank/badexit.c). */
#include <signal.h>
#include <string.h>

#include "testutil.h"

#include "spank/badexit.h"

/* A wait status as the kernel makes it: exit code << 8, or the signal. */
#define EXITED(c) ((c) << 8)

static void test_exit_action(void **state)
{
    char why[96];
    (void)state;
    /* Done, or checkpointed for a requeue: the others finish on their own. */
    assert_int_equal(spk_exit_action(EXITED(0), why, sizeof why), SPK_EXIT_FINE);
    assert_int_equal(spk_exit_action(EXITED(75), why, sizeof why), SPK_EXIT_FINE);
    /* Any other code is a failure, named. */
    assert_int_equal(spk_exit_action(EXITED(3), why, sizeof why), SPK_EXIT_STOP);
    assert_string_equal(why, "exited with code 3");
    assert_int_equal(spk_exit_action(EXITED(1), why, sizeof why), SPK_EXIT_STOP);
    /* Crashes stop the step with a message ... */
    assert_int_equal(spk_exit_action(SIGSEGV, why, sizeof why), SPK_EXIT_STOP);
    assert_non_null(strstr(why, "signal 11"));
    assert_int_equal(spk_exit_action(SIGABRT, why, sizeof why), SPK_EXIT_STOP);
    /* ... SIGKILL (the OOM killer, the plugin's own stop) quietly ... */
    assert_int_equal(spk_exit_action(SIGKILL, why, sizeof why), SPK_EXIT_STOP_QUIET);
    /* ... and what Slurm or the user send to every rank (the time limit's
     * SIGTERM, Ctrl-C's SIGINT, --signal=USR1) leaves the others to end
     * on their own: they may be writing their checkpoint. */
    assert_int_equal(spk_exit_action(SIGTERM, why, sizeof why), SPK_EXIT_LEAVE);
    assert_int_equal(spk_exit_action(SIGINT, why, sizeof why), SPK_EXIT_LEAVE);
    assert_int_equal(spk_exit_action(SIGUSR1, why, sizeof why), SPK_EXIT_LEAVE);
    assert_int_equal(spk_exit_action(SIGHUP, why, sizeof why), SPK_EXIT_LEAVE);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_exit_action),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
