/* Ranks sharing a GPU (lib/dist/gpu_group.c): the rank contract's groups
 * (CDL_REPLICAS_PER_GPU) against the GPUs the ranks opened, by UUID. */
#include "testutil.h"

#include <string.h>

#include <cdl/cdl.h>

#include "lib/dist/gpu_group.h"

/* Rank r on node[r], local rank local[r], GPU number gpu[r] (-1: none). */
static void places(gpu_place *p, int n, const int *node, const int *local, const int *gpu)
{
    memset(p, 0, (size_t)n * sizeof *p);
    for (int r = 0; r < n; r++) {
        p[r].node = node[r];
        p[r].local_rank = local[r];
        p[r].replicas_per_gpu = 1;
        if (gpu[r] >= 0) {
            p[r].uuid[0] = 0xab;
            p[r].uuid[15] = (unsigned char)(gpu[r] + 1);
        }
    }
}

/* gpu_groups_check with every rank packed rpg per GPU. */
static int check(gpu_place *p, int n, int rpg)
{
    for (int r = 0; r < n; r++)
        p[r].replicas_per_gpu = rpg;
    return gpu_groups_check(p, n);
}

static void expect_error(const char *needle)
{
    if (!strstr(cdl_last_error(), needle))
        fail_msg("error '%s' lacks '%s'", cdl_last_error(), needle);
}

static void test_slot(void **state)
{
    (void)state;
    assert_int_equal(contract_gpu_slot(0, 2), 0);
    assert_int_equal(contract_gpu_slot(3, 2), 1);
    assert_int_equal(contract_gpu_slot(7, 4), 1);
    assert_int_equal(contract_gpu_slot(5, 1), 5);
    assert_int_equal(contract_gpu_slot(5, 0), 5);   /* unset: one per GPU */
}

static void test_uuid_str(void **state)
{
    (void)state;
    unsigned char u[16];
    for (int i = 0; i < 16; i++)
        u[i] = (unsigned char)(i * 17);
    char s[41];
    gpu_uuid_str(u, s);
    assert_string_equal(s, "GPU-00112233-4455-6677-8899-aabbccddeeff");
}

static void test_groups_agree(void **state)
{
    (void)state;
    gpu_place p[8];
    /* Two nodes, 4 ranks each, 2 replicas per GPU, GPUs 0,1 on each. */
    const int node[] = {0, 0, 0, 0, 1, 1, 1, 1}, local[] = {0, 1, 2, 3, 0, 1, 2, 3};
    const int gpu[] = {0, 0, 1, 1, 2, 2, 3, 3};
    places(p, 8, node, local, gpu);
    assert_int_equal(check(p, 8, 2), 0);
    /* One rank per GPU. */
    const int own[] = {0, 1, 2, 3, 4, 5, 6, 7};
    places(p, 8, node, local, own);
    assert_int_equal(check(p, 8, 1), 0);
    /* Ranks on different nodes are never compared; nor ranks without GPUs. */
    const int n2[] = {0, 1}, l2[] = {0, 0}, same[] = {0, 0}, none[] = {-1, -1};
    places(p, 2, n2, l2, same);
    assert_int_equal(check(p, 2, 1), 0);
    const int n1[] = {0, 0}, l1[] = {0, 1};
    places(p, 2, n1, l1, none);
    assert_int_equal(check(p, 2, 1), 0);
}

static void test_shared_gpu_without_packing(void **state)
{
    (void)state;
    gpu_place p[3];
    /* cdlrun -n 3 on a 1-GPU machine without CDL_REPLICAS_PER_GPU. */
    const int node[] = {0, 0, 0}, local[] = {0, 1, 2}, gpu[] = {0, 0, 0};
    places(p, 3, node, local, gpu);
    assert_int_equal(check(p, 3, 1), -1);
    expect_error("ranks 0 and 1 (LOCAL_RANK 0 and 1 on node 0) both use GPU GPU-ab");
    expect_error("CDL_REPLICAS_PER_GPU=1 gives them GPUs of their own");
    assert_int_equal(check(p, 3, 3), 0);
}

static void test_group_split_over_gpus(void **state)
{
    (void)state;
    gpu_place p[4];
    /* Replicas 0,1 should share a GPU but each opened another one. */
    const int node[] = {0, 0, 0, 0}, local[] = {0, 1, 2, 3}, gpu[] = {0, 1, 0, 1};
    places(p, 4, node, local, gpu);
    assert_int_equal(check(p, 4, 2), -1);
    expect_error("ranks 0 and 1 (LOCAL_RANK 0 and 1 on node 0) share a GPU under "
                 "CDL_REPLICAS_PER_GPU=2 but opened different GPUs");
}

static void test_nodes_pack_differently(void **state)
{
    (void)state;
    gpu_place p[3];
    /* srun -N2 -n3 --cdl-mps: two replicas share node 0's GPU; node 1's lone
     * task has its GPU to itself (CDL_REPLICAS_PER_GPU=1 there). */
    const int node[] = {0, 0, 1}, local[] = {0, 1, 0}, gpu[] = {0, 0, 0};
    places(p, 3, node, local, gpu);
    p[0].replicas_per_gpu = p[1].replicas_per_gpu = 2;
    assert_int_equal(gpu_groups_check(p, 3), 0);
    /* Ranks of one node must agree. */
    p[1].replicas_per_gpu = 1;
    assert_int_equal(gpu_groups_check(p, 3), -1);
    expect_error("ranks 0 and 1 (LOCAL_RANK 0 and 1 on node 0) disagree on "
                 "CDL_REPLICAS_PER_GPU (2 and 1)");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_slot),
        cmocka_unit_test(test_uuid_str),
        cmocka_unit_test(test_groups_agree),
        cmocka_unit_test(test_shared_gpu_without_packing),
        cmocka_unit_test(test_group_split_over_gpus),
        cmocka_unit_test(test_nodes_pack_differently),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
