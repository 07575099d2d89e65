/* A task's thread count (spank/threads.c): its share of the CPUs. */
#include "testutil.h"

#include "spank/threads.h"

static void test_thread_share(void **state)
{
    (void)state;
    /* What Slurm granted, when the node has it. */
    assert_int_equal(spk_thread_share(4, 16, 2, 0), 4);
    assert_int_equal(spk_thread_share(0, 16, 2, 0), 1);
    /* An overcommitted node: 8 packed replicas on 4 CPUs get 1 each, 2
     * tasks asking 4 CPUs on a 4-CPU node get 2 each. */
    assert_int_equal(spk_thread_share(1, 4, 8, 0), 1);
    assert_int_equal(spk_thread_share(4, 4, 2, 0), 2);
    /* Bound tasks follow their own mask (replicas splitting a GPU's cores). */
    assert_int_equal(spk_thread_share(8, 32, 4, 3), 3);
    assert_int_equal(spk_thread_share(8, 32, 4, 16), 8);
    /* Unknown counts do not lower the share; never 0. */
    assert_int_equal(spk_thread_share(6, 0, 0, 0), 6);
    assert_int_equal(spk_thread_share(1, 1, 3, 0), 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_thread_share),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
