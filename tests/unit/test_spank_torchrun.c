/* torchrun as a --cdl-ddp task (spank/torchrun.c): its command line read,
 * the layouts it cannot run refused, its workers' thread share. */
#include <string.h>

#include "testutil.h"

#include "spank/torchrun.h"
#include "spank/util.h"

#define PARSE(t, ...)                                                              \
    do {                                                                           \
        char *const argv_[] = {__VA_ARGS__};                                        \
        spk_torchrun_parse((int)(sizeof argv_ / sizeof argv_[0]), argv_, (t));      \
    } while (0)

static void test_parse(void **state)
{
    (void)state;
    struct spk_torchrun t;
    PARSE(&t, "/usr/bin/torchrun", "--nproc_per_node=4", "--nnodes", "2", "train.py",
          "--nnodes=9");
    assert_true(t.found);
    assert_int_equal(t.nproc, 4);
    assert_int_equal(t.nnodes_min, 2);
    assert_int_equal(t.nnodes_max, 2);
    assert_false(t.standalone);
    /* torch 2's dashes; MIN:MAX; the script's own options are not torchrun's. */
    PARSE(&t, "torchrun", "--nproc-per-node", "8", "--nnodes=1:4", "--rdzv-backend", "c10d",
          "train.py", "--standalone");
    assert_int_equal(t.nproc, 8);
    assert_int_equal(t.nnodes_min, 1);
    assert_int_equal(t.nnodes_max, 4);
    assert_false(t.standalone);
    PARSE(&t, "python3", "-u", "-m", "torch.distributed.run", "--standalone",
          "--nproc_per_node", "gpu", "train.py");
    assert_true(t.found);
    assert_true(t.standalone);
    assert_true(t.nproc_given);
    assert_int_equal(t.nproc, 0);
    PARSE(&t, "python3", "-X", "dev", "-W", "ignore", "-m", "torch.distributed.run", "x.py");
    assert_true(t.found);
    PARSE(&t, "/opt/venv/bin/python3.11", "-mtorch.distributed.launch", "--nnodes=x", "a.py");
    assert_true(t.found);
    assert_int_equal(t.nnodes_max, 0);
    /* Not torchrun. */
    PARSE(&t, "python3", "train.py", "--standalone");
    assert_false(t.found);
    PARSE(&t, "python3", "-m", "torch.utils.collect_env");
    assert_false(t.found);
    PARSE(&t, "python3", "-c", "import torch", "-m", "torch.distributed.run");
    assert_false(t.found);
    PARSE(&t, "bash", "-c", "torchrun --standalone x.py");
    assert_false(t.found);
    PARSE(&t, "mytorchrun", "--standalone");
    assert_false(t.found);
    spk_torchrun_parse(0, NULL, &t);
    assert_false(t.found);
}

static void test_check(void **state)
{
    (void)state;
    struct spk_torchrun t;
    PARSE(&t, "torchrun", "--standalone", "--nproc_per_node=2", "train.py");
    assert_int_equal(spk_torchrun_check(&t, 1, 1), 0);
    assert_int_equal(spk_torchrun_check(&t, 2, 1), -1);
    assert_non_null(strstr(spk_last_error(), "Drop --standalone"));
    PARSE(&t, "torchrun", "--nnodes=2", "--nproc_per_node=2", "train.py");
    assert_int_equal(spk_torchrun_check(&t, 2, 1), 0);
    /* --ntasks-per-node=2 on 2 nodes: 4 torchruns, 2 of them never admitted. */
    assert_int_equal(spk_torchrun_check(&t, 4, 2), -1);
    assert_non_null(strstr(spk_last_error(), "--nnodes=2, but this step has 4 tasks (2 on this node)"));
    assert_non_null(strstr(spk_last_error(), "--ntasks-per-node=1"));
    PARSE(&t, "torchrun", "--nnodes=2:4", "train.py");
    assert_int_equal(spk_torchrun_check(&t, 4, 2), 0);
    assert_int_equal(spk_torchrun_check(&t, 1, 1), -1);
    PARSE(&t, "python3", "train.py");
    assert_int_equal(spk_torchrun_check(&t, 4, 2), 0);
}

static void test_threads(void **state)
{
    (void)state;
    struct spk_torchrun t;
    int n;
    PARSE(&t, "torchrun", "--nproc_per_node=2", "train.py");
    assert_int_equal(spk_torchrun_threads(&t, NULL, 8, &n), 4);
    assert_int_equal(n, 2);
    assert_int_equal(spk_torchrun_threads(&t, NULL, 1, &n), 1);
    PARSE(&t, "torchrun", "train.py");   /* torchrun's default: 1 worker */
    assert_int_equal(spk_torchrun_threads(&t, NULL, 8, &n), 8);
    assert_int_equal(spk_torchrun_threads(&t, "4", 8, &n), 2);
    assert_int_equal(n, 4);
    assert_int_equal(spk_torchrun_threads(&t, "auto", 8, &n), 1);
    assert_int_equal(n, 0);
    PARSE(&t, "torchrun", "--nproc_per_node=gpu", "train.py");
    assert_int_equal(spk_torchrun_threads(&t, "2", 8, &n), 1);
    PARSE(&t, "python3", "train.py");
    assert_int_equal(spk_torchrun_threads(&t, "4", 8, &n), 8);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse),
        cmocka_unit_test(test_check),
        cmocka_unit_test(test_threads),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
