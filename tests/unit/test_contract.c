/* The rank contract's rules (lib/dist/contract.c), alone: hostlists, the
 * GPU slot, Slurm's counts and ports, the encoder/decoder round trip and
 * the version check. */
#include <string.h>

#include "testutil.h"

#include "lib/dist/contract.h"

/* Every host of a list, comma-joined. */
static const char *expand(const char *list, char *buf, size_t len)
{
    contract_err e;
    long n = contract_hostlist_count(list, &e);
    size_t used = 0;
    buf[0] = '\0';
    if (n < 0)
        fail_msg("host list '%s' refused: %s", list, e.msg);
    for (long i = 0; i < n; i++) {
        char h[64];
        assert_int_equal(contract_hostlist_nth(list, i, h, sizeof h, &e), 0);
        used += (size_t)snprintf(buf + used, len - used, "%s%s", i ? "," : "", h);
    }
    assert_int_equal(contract_hostlist_nth(list, n, buf + used, len - used, &e), 1);
    return buf;
}

/* Slurm's syntax in full: suffixes after brackets (the bug: a[08-10]b gave
 * a08 in the library, n[1-2]-ib gave n1), padding, several groups. */
static void test_hostlist(void **state)
{
    (void)state;
    static const struct {
        const char *list, *hosts;
    } ok[] = {
        {"n1", "n1"},
        {"n[1-2]", "n1,n2"},
        {"a[08-10]b", "a08b,a09b,a10b"},
        {"n[1-2]-ib", "n1-ib,n2-ib"},
        {"gpu[01-02,05]-x[1-2]", "gpu01-x1,gpu01-x2,gpu02-x1,gpu02-x2,gpu05-x1,gpu05-x2"},
        {"n[1-4,7],gpu05", "n1,n2,n3,n4,n7,gpu05"},
        {"gpu05,n[1-2]", "gpu05,n1,n2"},
        {"rack[2-3]-node[001-002]", "rack2-node001,rack2-node002,rack3-node001,rack3-node002"},
        {"node7.cluster.example", "node7.cluster.example"},
        {"n[3,1-2]", "n3,n1,n2"},
        {"n[8-10]", "n8,n9,n10"},
        {"[1-2]x", "1x,2x"},
    };
    char buf[512];
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++)
        assert_string_equal(expand(ok[i].list, buf, sizeof buf), ok[i].hosts);
    static const char *const bad[] = {"", "n[", "n[a-b]", "n[1-2", "[]", ",n1", "n;1",
                                      "n$(id)", "../x", "n[2-1]", "n[1,]", "n[,1]", "n]1",
                                      "n[1-]", "n1,,n2", "n[1-99999999]"};
    contract_err e;
    char h[64];
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        if (contract_hostlist_nth(bad[i], 0, h, sizeof h, &e) >= 0 &&
            contract_hostlist_count(bad[i], &e) >= 0)
            fail_msg("host list '%s' accepted as '%s'", bad[i], h);
    char small[4];
    assert_int_equal(contract_hostlist_nth("node1", 0, small, sizeof small, &e), -1);
    assert_non_null(strstr(e.msg, "longer"));
}

/* One rule for the plugin's binding and cdl-train's device. */
static void test_gpu_slot(void **state)
{
    (void)state;
    /* 2 tasks on a 4-GPU node: task 1 uses GPU 1 (the plugin bound it near
     * GPU 2 before, while cdl-train opened GPU 1). */
    assert_int_equal(contract_task_gpu(1, 1, 4), 1);
    /* MPS packing: 4 replicas per GPU. */
    assert_int_equal(contract_task_gpu(5, 4, 2), 1);
    assert_int_equal(contract_task_gpu(3, 4, 2), 0);
    /* More ranks than GPUs and no packing: none. */
    assert_int_equal(contract_task_gpu(2, 1, 2), -1);
    assert_int_equal(contract_task_gpu(0, 1, 0), -1);
    assert_int_equal(contract_gpu_slot(5, 0), 5);
}

/* The block rule of both binding planners (also cdlrun without hwloc). */
static void test_share(void **state)
{
    (void)state;
    int lo, hi;
    contract_share(1, 3, 8, &lo, &hi);   /* 8 cores / 3 tasks: 2, 3, 3 */
    assert_int_equal(lo, 2);
    assert_int_equal(hi, 5);
    /* 4 tasks on 2 cores: neighbours 0,1 share core 0 (not 0 and 2). */
    for (int j = 0; j < 4; j++) {
        contract_share(j, 4, 2, &lo, &hi);
        assert_int_equal(lo, j / 2);
        assert_int_equal(hi, j / 2 + 1);
    }
}

static void test_tasks_on_node(void **state)
{
    (void)state;
    contract_err e;
    int n = 0;
    assert_int_equal(contract_tasks_on_node("2(x3),1", 2, &n, &e), 0);
    assert_int_equal(n, 2);
    assert_int_equal(contract_tasks_on_node("2(x3),1", 3, &n, &e), 0);
    assert_int_equal(n, 1);
    assert_int_equal(contract_tasks_on_node("2(x3),1", 4, &n, &e), -1);
    static const char *const bad[] = {"", "x", "0", "2(x0)", "2(x3", "2,", "99999999999",
                                      "2(x99999999999)", "-1", "2 ,1"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        if (contract_tasks_on_node(bad[i], 0, &n, &e) == 0)
            fail_msg("tasks per node '%s' accepted as %d", bad[i], n);
}

/* Port 99999 is refused, not wrapped to 34463. */
static void test_resv_port(void **state)
{
    (void)state;
    contract_err e;
    int p = 0;
    assert_int_equal(contract_resv_port("12000-12003", &p, &e), 0);
    assert_int_equal(p, 12000);
    assert_int_equal(contract_resv_port("12007,12000", &p, &e), 0);
    assert_int_equal(p, 12007);
    static const char *const bad[] = {"99999", "12000-99999", "0", "x", "-5", "12a-13",
                                      ",1", "1,", "13-12", "1234567"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        if (contract_resv_port(bad[i], &p, &e) == 0)
            fail_msg("SLURM_STEP_RESV_PORTS=%s accepted as %d", bad[i], p);
        assert_non_null(strstr(e.msg, "SLURM_STEP_RESV_PORTS"));
    }
}

/* An environment of at most 32 variables for the encoder and decoder. */
struct env {
    int n;
    char name[32][32], value[32][128];
};

static int env_put(void *ctx, const char *name, const char *value, int user_wins,
                   contract_err *e)
{
    struct env *v = ctx;
    (void)e;
    for (int i = 0; i < v->n; i++)
        if (!strcmp(v->name[i], name)) {
            if (!user_wins)
                snprintf(v->value[i], sizeof v->value[i], "%s", value);
            return 0;
        }
    assert_true(v->n < 32);
    snprintf(v->name[v->n], sizeof v->name[0], "%s", name);
    snprintf(v->value[v->n], sizeof v->value[0], "%s", value);
    v->n++;
    return 0;
}

static const char *env_get(void *ctx, const char *name)
{
    struct env *v = ctx;
    for (int i = 0; i < v->n; i++)
        if (!strcmp(v->name[i], name))
            return v->value[i][0] ? v->value[i] : NULL;
    return NULL;
}

static contract sample(void)
{
    contract c = {0};
    c.rank = 5;
    c.world = 8;
    c.local_rank = 1;
    c.local_world = 4;
    c.node_rank = 1;
    c.nnodes = 2;
    c.replicas_per_gpu = 2;
    c.master_port = 29876;
    c.threads = 3;
    snprintf(c.master_addr, sizeof c.master_addr, "a08b");
    snprintf(c.job_id, sizeof c.job_id, "77.0");
    snprintf(c.launcher, sizeof c.launcher, "slurm");
    snprintf(c.token, sizeof c.token, "00ff00ff00ff00ff00ff00ff00ff00ff");
    return c;
}

static void test_round_trip(void **state)
{
    (void)state;
    contract c = sample(), back;
    contract_err e;
    struct env env = {0};
    assert_int_equal(contract_encode(&c, env_put, &env, &e), 0);
    assert_int_equal(contract_decode(&back, env_get, &env, &e), 0);
    c.version = CDL_CONTRACT_VERSION;
    assert_memory_equal(&c, &back, sizeof c);
    /* A user's OMP_NUM_THREADS wins, the layout does not. */
    struct env user = {0};
    env_put(&user, "OMP_NUM_THREADS", "1", 0, &e);
    env_put(&user, CDL_ENV_RANK, "0", 0, &e);
    assert_int_equal(contract_encode(&c, env_put, &user, &e), 0);
    assert_string_equal(env_get(&user, "OMP_NUM_THREADS"), "1");
    assert_string_equal(env_get(&user, CDL_ENV_RANK), "5");
    /* The encoder refuses an impossible layout. */
    c.rank = 8;
    assert_int_equal(contract_encode(&c, env_put, &env, &e), -1);
    assert_non_null(strstr(e.msg, "RANK=8"));
}

/* srun --gpus-per-task=2: Slurm gives each task its own two GPUs, and the
 * contract says so (CDL_GPU_BIND=task), so that a rank opens the first of
 * them, not the one its LOCAL_RANK indexes (rank 2 asked for a third). */
static void test_gpu_bind(void **state)
{
    (void)state;
    contract c = sample(), back;
    contract_err e;
    struct env env = {0};
    assert_int_equal(contract_encode(&c, env_put, &env, &e), 0);
    assert_null(env_get(&env, CDL_ENV_GPU_BIND));   /* the slot rule: not written */
    snprintf(c.gpu_bind, sizeof c.gpu_bind, "task");
    assert_int_equal(contract_encode(&c, env_put, &env, &e), 0);
    assert_string_equal(env_get(&env, CDL_ENV_GPU_BIND), "task");
    assert_int_equal(contract_decode(&back, env_get, &env, &e), 0);
    assert_string_equal(back.gpu_bind, "task");
    assert_true(contract_gpu_bound_to_task("task"));
    assert_false(contract_gpu_bound_to_task(NULL));
    assert_false(contract_gpu_bound_to_task("tasks"));
    assert_false(contract_gpu_bound_to_task(""));
}

/* A plugin and a library of different releases say so. */
static void test_version(void **state)
{
    (void)state;
    contract c = sample(), back;
    contract_err e;
    struct env env = {0};
    assert_int_equal(contract_encode(&c, env_put, &env, &e), 0);
    char other[16];
    snprintf(other, sizeof other, "%d", CDL_CONTRACT_VERSION + 1);
    env_put(&env, CDL_ENV_CONTRACT_VERSION, other, 0, &e);
    assert_int_equal(contract_decode(&back, env_get, &env, &e), -1);
    assert_non_null(strstr(e.msg, CDL_ENV_CONTRACT_VERSION));
    assert_non_null(strstr(e.msg, "slurm"));
    /* Which side is behind, and how to see the plugin's release. */
    assert_non_null(strstr(e.msg, "launcher is of a newer release"));
    assert_non_null(strstr(e.msg, "srun --cdl-version"));
    assert_non_null(strstr(e.msg, PACKAGE_VERSION));
    assert_non_null(strstr(e.msg, "without --cdl-ddp"));   /* a user's own build */
    snprintf(other, sizeof other, "%d", CDL_CONTRACT_VERSION - 1);
    env_put(&env, CDL_ENV_CONTRACT_VERSION, other, 0, &e);
    env_put(&env, CDL_ENV_LAUNCHER, "cdlrun", 0, &e);
    assert_int_equal(contract_decode(&back, env_get, &env, &e), -1);
    assert_non_null(strstr(e.msg, "launcher is of an older release"));
    assert_non_null(strstr(e.msg, "cdlrun --version"));
    /* Hand-exported (no version): accepted. */
    env_put(&env, CDL_ENV_CONTRACT_VERSION, "", 0, &e);
    assert_int_equal(contract_decode(&back, env_get, &env, &e), 0);
    assert_int_equal(back.version, 0);
}

static void test_decode_strict(void **state)
{
    (void)state;
    static const struct {
        const char *name, *value, *needle;
    } bad[] = {
        {CDL_ENV_RANK, "1x", "RANK='1x'"},
        {CDL_ENV_MASTER_PORT, "99999", "MASTER_PORT=99999"},
        {CDL_ENV_MASTER_PORT, "0", "MASTER_PORT='0'"},
        {CDL_ENV_WORLD_SIZE, "99999999999", "WORLD_SIZE="},
        {CDL_ENV_REPLICAS_PER_GPU, "5", "CDL_REPLICAS_PER_GPU=5"},
        {CDL_ENV_LOCAL_RANK, "-1", "LOCAL_RANK='-1'"},
        {CDL_ENV_GPU_BIND, "per_task:2", "CDL_GPU_BIND='per_task:2' is not 'task'"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        contract c = sample(), back;
        contract_err e;
        struct env env = {0};
        assert_int_equal(contract_encode(&c, env_put, &env, &e), 0);
        env_put(&env, bad[i].name, bad[i].value, 0, &e);
        assert_int_equal(contract_decode(&back, env_get, &env, &e), -1);
        if (!strstr(e.msg, bad[i].needle))
            fail_msg("%s=%s: message '%s' does not name it", bad[i].name, bad[i].value, e.msg);
    }
}

/* Hand-exported variables of ranks spread unevenly (srun -N2 -n3: 2 ranks
 * on node 0, 1 on node 1) without CDL_NNODES: node 0 took itself for the
 * only node and blamed LOCAL_WORLD_SIZE ("differs from WORLD_SIZE=3 but
 * there is one node (CDL_NNODES=1 ...)", a value nobody set). */
static void test_uneven_nodes(void **state)
{
    (void)state;
    contract c;
    contract_err e;
    struct env env = {0};
    env_put(&env, CDL_ENV_RANK, "1", 0, &e);
    env_put(&env, CDL_ENV_WORLD_SIZE, "3", 0, &e);
    env_put(&env, CDL_ENV_LOCAL_RANK, "1", 0, &e);
    env_put(&env, CDL_ENV_LOCAL_WORLD_SIZE, "2", 0, &e);
    env_put(&env, CDL_ENV_NODE_RANK, "0", 0, &e);
    assert_int_equal(contract_decode(&c, env_get, &env, &e), -1);
    assert_non_null(strstr(e.msg, "LOCAL_WORLD_SIZE=2 does not divide WORLD_SIZE=3"));
    assert_non_null(strstr(e.msg, "export " CDL_ENV_NNODES));
    env_put(&env, CDL_ENV_NNODES, "2", 0, &e);
    assert_int_equal(contract_decode(&c, env_get, &env, &e), 0);
    assert_int_equal(c.nnodes, 2);
    assert_int_equal(c.local_world, 2);
    /* Node 1's single rank. */
    env_put(&env, CDL_ENV_RANK, "2", 0, &e);
    env_put(&env, CDL_ENV_LOCAL_RANK, "0", 0, &e);
    env_put(&env, CDL_ENV_LOCAL_WORLD_SIZE, "1", 0, &e);
    env_put(&env, CDL_ENV_NODE_RANK, "1", 0, &e);
    assert_int_equal(contract_decode(&c, env_get, &env, &e), 0);
    assert_int_equal(c.nnodes, 2);
}

static void test_token(void **state)
{
    (void)state;
    char a[CONTRACT_TOKEN_LEN + 1], b[CONTRACT_TOKEN_LEN + 1];
    contract_err e;
    assert_int_equal(contract_token_make(a, sizeof a, &e), 0);
    assert_int_equal(contract_token_make(b, sizeof b, &e), 0);
    assert_int_equal(strlen(a), CONTRACT_TOKEN_LEN);
    assert_true(strcmp(a, b) != 0);
    assert_int_equal(contract_token_make(a, 8, &e), -1);
}

/* cdlrun's MASTER_PORT lies above the kernel's ephemeral ports (which an
 * outgoing connection could take before rank 0 binds the port) and leaves
 * the 64 ports of the store's alternates below 65536; no room: 0. */
static void test_quiet_port(void **state)
{
    (void)state;
    static const uint32_t draws[] = {0, 1, 4470, 4471, 4472, 12345, 0x7fffffffu, 0xffffffffu};
    int seen_lo = 0, seen_hi = 0;
    for (size_t i = 0; i < sizeof draws / sizeof draws[0]; i++) {
        int p = contract_quiet_port(60999, draws[i]);   /* Linux's default 32768-60999 */
        if (p < 61000 || p > 65535 - 64)
            fail_msg("draw %u: port %d outside 61000-65471", (unsigned)draws[i], p);
        seen_lo |= p == 61000;
        seen_hi |= p == 65471;
    }
    assert_true(seen_lo && seen_hi);   /* both ends are reached */
    assert_int_equal(contract_quiet_port(60999, 4472), 61000);   /* span 4472: wraps */
    assert_int_equal(contract_quiet_port(65535, 7), 0);   /* ephemeral up to the top */
    assert_int_equal(contract_quiet_port(64500, 7), 0);   /* fewer than 1000 above */
    assert_int_equal(contract_quiet_port(-1, 7), 0);      /* range unknown */
    assert_int_equal(contract_quiet_port(64471 - 1000, 999), 64471);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hostlist),
        cmocka_unit_test(test_gpu_slot),
        cmocka_unit_test(test_share),
        cmocka_unit_test(test_tasks_on_node),
        cmocka_unit_test(test_resv_port),
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_gpu_bind),
        cmocka_unit_test(test_version),
        cmocka_unit_test(test_decode_strict),
        cmocka_unit_test(test_uneven_nodes),
        cmocka_unit_test(test_token),
        cmocka_unit_test(test_quiet_port),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
