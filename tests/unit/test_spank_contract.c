/* The rank contract, MASTER_PORT choice and MPS replica packing: pure
 * functions of the step's layout and the admin's settings. */
#include <stdio.h>
#include <string.h>

#include "testutil.h"

#include "lib/dist/contract.h"
#include "spank/conf.h"
#include "spank/contract.h"
#include "spank/packing.h"
#include "spank/port.h"

static struct spk_step step_2x2(void)
{
    struct spk_step s = {
        .jobid = 4242, .stepid = 3, .nnodes = 2, .nodeid = 1, .ntasks = 4, .local_tasks = 2,
        .cpus_per_task = 3, .nodelist = "n[1-2]", .distribution = NULL, .resv_ports = NULL,
        .replicas_per_gpu = 1,
    };
    return s;
}

static int fake_resolve(const char *name, char *addr, size_t len)
{
    if (!strcmp(name, "n1"))
        return snprintf(addr, len, "10.0.0.1") < 0 ? -1 : 0;
    if (!strcmp(name, "n1-ib"))
        return snprintf(addr, len, "10.1.0.1") < 0 ? -1 : 0;
    return spk_error("cannot resolve '%s'", name);
}

/* Task 3 of a 2-node x 2-task step, on the second node. */
static void test_task_contract(void **state)
{
    (void)state;
    struct spk_conf c;
    struct spk_step s = step_2x2();
    struct spk_step_contract sc;
    struct spk_env env;
    spk_conf_defaults(&c);
    assert_int_equal(spk_contract_step(&c, &s, NULL, &sc), 0);
    assert_string_equal(sc.master_node, "n1");
    assert_string_equal(sc.master_addr, "n1");
    assert_int_equal(sc.port_reserved, 0);
    assert_in_range(sc.master_port, 29500, 32499);
    assert_int_equal(spk_contract_task(&s, &sc, 1, 3, &env), 0);
    char port[8];
    snprintf(port, sizeof port, "%d", sc.master_port);
    static const char *const want[][2] = {
        {CDL_ENV_RANK, "3"}, {CDL_ENV_WORLD_SIZE, "4"}, {CDL_ENV_LOCAL_RANK, "1"},
        {CDL_ENV_LOCAL_WORLD_SIZE, "2"}, {CDL_ENV_GROUP_RANK, "1"}, {CDL_ENV_NODE_RANK, "1"},
        {CDL_ENV_MASTER_ADDR, "n1"}, {CDL_ENV_NNODES, "2"}, {CDL_ENV_REPLICAS_PER_GPU, "1"},
        {CDL_ENV_JOB_ID, "4242.3"}, {CDL_ENV_LAUNCHER, "slurm"}, {"OMP_NUM_THREADS", "3"},
        {"MKL_NUM_THREADS", "3"}, {CDL_ENV_LOCAL_SIZE, "2"},
        /* torchrun's defaults: this task is torchrun node 3 of 4. */
        {"PET_NNODES", "4"}, {"PET_NODE_RANK", "3"}, {"PET_MASTER_ADDR", "n1"},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        const char *v = spk_env_get(&env, want[i][0]);
        if (!v || strcmp(v, want[i][1]))
            fail_msg("%s=%s, want %s", want[i][0], v ? v : "(unset)", want[i][1]);
    }
    assert_string_equal(spk_env_get(&env, CDL_ENV_MASTER_PORT), port);
    assert_string_equal(spk_env_get(&env, "PET_MASTER_PORT"), port);
    char version[8];
    snprintf(version, sizeof version, "%d", CDL_CONTRACT_VERSION);
    assert_string_equal(spk_env_get(&env, CDL_ENV_CONTRACT_VERSION), version);
    /* Only the tuning knobs are the user's to override. */
    for (int i = 0; i < env.n; i++)
        assert_int_equal(env.v[i].keep_user, !strcmp(env.v[i].name, "OMP_NUM_THREADS") ||
                                                 !strcmp(env.v[i].name, "MKL_NUM_THREADS"));
}

static void test_master_addr_policies(void **state)
{
    (void)state;
    struct spk_conf c;
    struct spk_step s = step_2x2();
    struct spk_step_contract sc;
    const char *suffix[] = {"master_addr=hostname:-ib"};
    assert_int_equal(spk_conf_parse(&c, 1, (char **)suffix), 0);
    assert_int_equal(spk_contract_step(&c, &s, fake_resolve, &sc), 0);
    assert_string_equal(sc.master_addr, "n1-ib");
    const char *ip[] = {"master_addr=ip"};
    assert_int_equal(spk_conf_parse(&c, 1, (char **)ip), 0);
    assert_int_equal(spk_contract_step(&c, &s, fake_resolve, &sc), 0);
    assert_string_equal(sc.master_addr, "10.0.0.1");
    const char *ipsuf[] = {"master_addr=ip:-ib"};
    assert_int_equal(spk_conf_parse(&c, 1, (char **)ipsuf), 0);
    assert_int_equal(spk_contract_step(&c, &s, fake_resolve, &sc), 0);
    assert_string_equal(sc.master_addr, "10.1.0.1");
    /* Unresolvable: an error naming the host. */
    s.nodelist = "gpu[07-08]";
    assert_int_equal(spk_contract_step(&c, &s, fake_resolve, &sc), -1);
    assert_non_null(strstr(spk_last_error(), "gpu07-ib"));
    /* The real resolver on a name every machine has. */
    assert_int_equal(spk_resolve_host("localhost", sc.master_addr, sizeof sc.master_addr), 0);
    assert_true(!strcmp(sc.master_addr, "127.0.0.1") || !strcmp(sc.master_addr, "::1"));
}

/* Task 0 of the step, not of the job: the step's own node list decides. */
static void test_master_is_first_node_of_step(void **state)
{
    (void)state;
    struct spk_conf c;
    struct spk_step s = step_2x2();
    struct spk_step_contract sc;
    spk_conf_defaults(&c);
    s.nodelist = "n[5-6],m1";
    assert_int_equal(spk_contract_step(&c, &s, NULL, &sc), 0);
    assert_string_equal(sc.master_addr, "n5");
    s.distribution = "cyclic";
    assert_int_equal(spk_contract_step(&c, &s, NULL, &sc), 0);
    assert_string_equal(sc.master_addr, "n5");
    s.distribution = "arbitrary";
    assert_int_equal(spk_contract_step(&c, &s, NULL, &sc), -1);
    assert_non_null(strstr(spk_last_error(), "arbitrary"));
    s.distribution = NULL;
    s.nodelist = "";
    assert_int_equal(spk_contract_step(&c, &s, NULL, &sc), -1);
    assert_non_null(strstr(spk_last_error(), "SLURM_STEP_NODELIST"));
    s.nodelist = "n1;reboot";
    assert_int_equal(spk_contract_step(&c, &s, NULL, &sc), -1);
}

/* A fragmented allocation: Slurm compresses only consecutive names, so
 * 2000 nodes take ~14 KB ("nid[000001,000003,...]"); the plugin used to
 * read SLURM_STEP_NODELIST into 1 KiB and failed such steps saying the
 * list was missing. */
static void test_master_of_long_node_list(void **state)
{
    (void)state;
    struct spk_conf c;
    struct spk_step s = step_2x2();
    struct spk_step_contract sc;
    static char list[16 * 1024];
    size_t n = (size_t)snprintf(list, sizeof list, "nid[");
    for (int i = 0; i < 2000; i++)
        n += (size_t)snprintf(list + n, sizeof list - n, "%s%06d", i ? "," : "", 2 * i + 1);
    snprintf(list + n, sizeof list - n, "]");
    assert_true(strlen(list) > 13000);
    spk_conf_defaults(&c);
    s.nodelist = list;
    assert_int_equal(spk_contract_step(&c, &s, NULL, &sc), 0);
    assert_string_equal(sc.master_addr, "nid000001");
}

static void test_bad_layout(void **state)
{
    (void)state;
    struct spk_conf c;
    struct spk_step s = step_2x2();
    struct spk_step_contract sc;
    struct spk_env env;
    spk_conf_defaults(&c);
    assert_int_equal(spk_contract_step(&c, &s, NULL, &sc), 0);
    assert_int_equal(spk_contract_task(&s, &sc, 0, 4, &env), -1);   /* rank >= world */
    assert_int_equal(spk_contract_task(&s, &sc, 2, 0, &env), -1);   /* local >= local tasks */
    s.nodeid = 2;
    assert_int_equal(spk_contract_task(&s, &sc, 0, 0, &env), -1);
    s = step_2x2();
    s.ntasks = 0;
    assert_int_equal(spk_contract_task(&s, &sc, 0, 0, &env), -1);
    s = step_2x2();
    s.cpus_per_task = 0;   /* unknown: one thread */
    assert_int_equal(spk_contract_task(&s, &sc, 0, 0, &env), 0);
    assert_string_equal(spk_env_get(&env, "OMP_NUM_THREADS"), "1");
}

struct fake_env {
    const char *kv[8][2];
};

static const char *fake_lookup(void *arg, const char *name)
{
    struct fake_env *e = arg;
    for (int i = 0; i < 8 && e->kv[i][0]; i++)
        if (!strcmp(e->kv[i][0], name))
            return e->kv[i][1];
    return NULL;
}

/* The plugin's lookup (spank_getenv into one buffer) returns the same
 * pointer for every name: each value is only good until the next call. */
struct buffered_env {
    struct fake_env env;
    char buf[64];
};

static const char *buffered_lookup(void *arg, const char *name)
{
    struct buffered_env *b = arg;
    const char *v = fake_lookup(&b->env, name);
    if (!v)
        return NULL;
    snprintf(b->buf, sizeof b->buf, "%s", v);
    return b->buf;
}

/* Item 7 of issue 13: a RANK (or any contract variable) exported in the
 * submit shell must not survive into the tasks; only tuning knobs
 * (OMP_NUM_THREADS) are the user's. Variables the contract does not set
 * (a stale CDL_STORE_FD or CDL_STORE_PORT, torchrun's) are removed. */
static void test_user_values(void **state)
{
    (void)state;
    struct spk_conf c;
    struct spk_step s = step_2x2();
    struct spk_step_contract sc;
    struct spk_env env;
    spk_conf_defaults(&c);
    assert_int_equal(spk_contract_step(&c, &s, NULL, &sc), 0);
    assert_int_equal(spk_contract_task(&s, &sc, 0, 2, &env), 0);
    struct fake_env user = {{{"OMP_NUM_THREADS", "1"}, {"MASTER_PORT", "3456"}, {"RANK", "0"},
                             {"CDL_STORE_FD", "7"}, {"CDL_STORE_PORT", "7"}}};
    assert_int_equal(spk_env_keep_user(&env, fake_lookup, &user), 1);
    for (int i = 0; i < env.n; i++)
        assert_int_equal(env.v[i].skip, !strcmp(env.v[i].name, "OMP_NUM_THREADS"));
    static const char *const removed[] = {CDL_ENV_STORE_FD, "TORCHELASTIC_RUN_ID",
                                          "GROUP_WORLD_SIZE", CDL_ENV_STORE_TOKEN,
                                          CDL_ENV_STORE_PORT};
    for (size_t k = 0; k < sizeof removed / sizeof removed[0]; k++) {
        int found = 0;
        for (int i = 0; i < env.n; i++)
            found |= env.v[i].unset && !strcmp(env.v[i].name, removed[k]);
        if (!found)
            fail_msg("%s is not removed from the task's environment", removed[k]);
    }
    assert_null(spk_env_get(&env, CDL_ENV_STORE_FD));
    /* Through a lookup that reuses its buffer. */
    struct buffered_env b_user = {user, ""};
    assert_int_equal(spk_env_keep_user(&env, buffered_lookup, &b_user), 1);
}

static void test_env_limits(void **state)
{
    (void)state;
    struct spk_env env;
    char big[SPK_VALUE_MAX + 10];
    spk_env_init(&env);
    memset(big, 'x', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    assert_int_equal(spk_env_add(&env, "A", 1, "%s", big), -1);
    assert_int_equal(env.n, 0);
    for (int i = 0; i < SPK_ENV_MAX; i++)
        assert_int_equal(spk_env_add(&env, "B", 1, "%d", i), 0);
    assert_int_equal(spk_env_add(&env, "C", 1, "x"), -1);
    assert_null(spk_env_get(&env, "C"));
}

static void test_port_reserved(void **state)
{
    (void)state;
    int p, r;
    assert_int_equal(spk_port_choose("12000-12003", 1, 0, 29500, 32499, &p, &r), 0);
    assert_int_equal(p, 12000);
    assert_int_equal(r, 1);
    assert_int_equal(spk_port_choose("12007,12000", 1, 0, 29500, 32499, &p, &r), 0);
    assert_int_equal(p, 12007);
    assert_int_equal(spk_port_choose("13001", 1, 0, 29500, 32499, &p, &r), 0);
    assert_int_equal(p, 13001);
    static const char *const bad[] = {"x", "-5", "70000", "1234567", ",1", "12a-13"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        if (spk_port_choose(bad[i], 1, 0, 29500, 32499, &p, &r) != -1)
            fail_msg("SLURM_STEP_RESV_PORTS=%s accepted as %d", bad[i], p);
        assert_non_null(strstr(spk_last_error(), "SLURM_STEP_RESV_PORTS"));
    }
}

/* Same (job, step) -> same port on every node; all steps of one job differ;
 * jobs with neighbouring ids do not land on neighbouring ports. */
static void test_port_deterministic(void **state)
{
    (void)state;
    int p, q, r;
    assert_int_equal(spk_port_choose(NULL, 777, 2, 29500, 32499, &p, &r), 0);
    assert_int_equal(r, 0);
    assert_int_equal(spk_port_choose("", 777, 2, 29500, 32499, &q, &r), 0);
    assert_int_equal(p, q);
    static unsigned char used[3000];
    memset(used, 0, sizeof used);
    for (uint32_t step = 0; step < 3000; step++) {
        assert_int_equal(spk_port_choose(NULL, 123456, step, 29500, 32499, &p, &r), 0);
        assert_in_range(p, 29500, 32499);
        assert_int_equal(used[p - 29500], 0);
        used[p - 29500] = 1;
    }
    int adjacent = 0;
    for (uint32_t job = 1000; job < 1100; job++) {
        assert_int_equal(spk_port_choose(NULL, job, 0, 29500, 32499, &p, &r), 0);
        assert_int_equal(spk_port_choose(NULL, job + 1, 0, 29500, 32499, &q, &r), 0);
        if (p == q || p + 1 == q)
            adjacent++;
    }
    assert_true(adjacent <= 2);
    assert_int_equal(spk_port_choose(NULL, 5, 5, 40000, 40000, &p, &r), 0);
    assert_int_equal(p, 40000);
    assert_int_equal(spk_port_choose(NULL, 5, 5, 40001, 40000, &p, &r), -1);
}

/* Jobs submitted together run side by side: any two whose ids differ by
 * less than the range's size get different ports for their first steps
 * (before, a pseudo-random hash gave jobs 1863301 and 1863302 one port of
 * a 100-port range, and the second PyTorch job failed to bind it), and the
 * next job's first steps stay clear of this job's first steps. */
static void test_port_neighbour_jobs(void **state)
{
    (void)state;
    int p, q, r;
    assert_int_equal(spk_port_choose(NULL, 1863301, 0, 10000, 10099, &p, &r), 0);
    assert_int_equal(spk_port_choose(NULL, 1863302, 0, 10000, 10099, &q, &r), 0);
    assert_int_not_equal(p, q);
    static const int spans[] = {1, 2, 3, 7, 64, 100, 101, 128, 1000, 3000, 65535};
    static unsigned char used[65535];
    for (size_t i = 0; i < sizeof spans / sizeof spans[0]; i++) {
        int lo = 65536 - spans[i], hi = 65535;
        for (uint32_t first = 0; first < 3; first++) {
            uint32_t j0 = first == 0 ? 1000 : first == 1 ? 1863301 : 67043328 - 10;
            memset(used, 0, sizeof used);
            for (uint32_t d = 0; d < (uint32_t)spans[i]; d++) {
                assert_int_equal(spk_port_choose(NULL, j0 + d, 0, lo, hi, &p, &r), 0);
                assert_in_range(p, lo, hi);
                if (used[p - lo])
                    fail_msg("range of %d: job %u took the port of an earlier job", spans[i],
                             j0 + d);
                used[p - lo] = 1;
            }
        }
    }
    /* Steps 0-29 of job j and of job j + 1 never meet in a range of 100. */
    for (uint32_t job = 5000; job < 5200; job++)
        for (uint32_t s = 0; s < 30; s++)
            for (uint32_t t = 0; t < 30; t++) {
                assert_int_equal(spk_port_choose(NULL, job, s, 10000, 10099, &p, &r), 0);
                assert_int_equal(spk_port_choose(NULL, job + 1, t, 10000, 10099, &q, &r), 0);
                if (p == q)
                    fail_msg("job %u step %u and job %u step %u: port %d", job, s, job + 1, t, p);
            }
}

/* The tasks of a job array (a sweep: --array=0-3, often several on one
 * node) have job ids of their own: hashed apart, two of them met on one
 * MASTER_PORT with a chance of 1 in the range per pair. Every step of every
 * task of one array now gets a port of its own (up to 64 tasks and range /
 * 64 steps), and 4 tasks' steps 0 fit a range of 4 ports; other jobs keep
 * their ports. */
static void test_port_array_tasks(void **state)
{
    (void)state;
    struct spk_conf c;
    struct spk_step s = step_2x2();
    struct spk_step_contract sc;
    const char *range[] = {"port_range=10000-10639"};
    assert_int_equal(spk_conf_parse(&c, 1, (char **)range), 0);
    static unsigned char used[640];
    for (uint32_t task = 0; task < SPK_PORT_ARRAY_TASKS; task++)
        for (uint32_t step = 0; step < 640 / SPK_PORT_ARRAY_TASKS; step++) {
            /* Array 5000's tasks have job ids of their own (any ids do). */
            s.jobid = 5000 + task * 7;
            s.stepid = step;
            s.array_job = 5000;
            s.array_task = task;
            assert_int_equal(spk_contract_step(&c, &s, NULL, &sc), 0);
            assert_in_range(sc.master_port, 10000, 10639);
            if (used[sc.master_port - 10000])
                fail_msg("array task %u step %u: port %d already taken", task, step,
                         sc.master_port);
            used[sc.master_port - 10000] = 1;
        }
    const char *four[] = {"port_range=10000-10003"};
    assert_int_equal(spk_conf_parse(&c, 1, (char **)four), 0);
    unsigned seen = 0;
    for (uint32_t task = 0; task < 4; task++) {
        s.jobid = 7001 + task;
        s.stepid = 0;
        s.array_job = 7001;
        s.array_task = task;
        assert_int_equal(spk_contract_step(&c, &s, NULL, &sc), 0);
        seen |= 1u << (sc.master_port - 10000);
    }
    assert_int_equal(seen, 0xf);
    /* A job outside an array (Slurm's 0 and NO_VAL) hashes its own id as
     * before: the same port with and without the items. */
    int p, r;
    s.jobid = 777;
    s.stepid = 2;
    s.array_job = 0;
    s.array_task = 0xfffffffe;
    assert_int_equal(spk_contract_step(&c, &s, NULL, &sc), 0);
    assert_int_equal(spk_port_choose(NULL, 777, 2, 10000, 10003, &p, &r), 0);
    assert_int_equal(sc.master_port, p);
    s.array_task = 0;
    assert_int_equal(spk_contract_step(&c, &s, NULL, &sc), 0);
    assert_int_equal(sc.master_port, p);
}

static void test_gpus_parse(void **state)
{
    (void)state;
    struct spk_gpus g;
    assert_int_equal(spk_gpus_parse(NULL, &g), 0);
    assert_int_equal(g.n, 0);
    assert_int_equal(spk_gpus_parse("0,1,3", &g), 0);
    assert_int_equal(g.n, 3);
    assert_string_equal(g.id[2], "3");
    assert_int_equal(spk_gpus_parse("GPU-8f3d2c1a-0000-1111-2222-333344445555,MIG-1", &g), 0);
    assert_int_equal(g.n, 2);
    assert_string_equal(g.id[1], "MIG-1");
    static const char *const bad[] = {"0,,1", "0,", ",0", "0;1", "$(id)", "../0", "0 1"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        if (spk_gpus_parse(bad[i], &g) != -1)
            fail_msg("CUDA_VISIBLE_DEVICES=%s accepted", bad[i]);
}

static void test_pack_plan(void **state)
{
    (void)state;
    struct spk_pack p;
    /* The seeds' recipe: 8 replicas on one GPU. */
    assert_int_equal(spk_pack_plan(8, 1, 0, 16, 0, &p), 0);
    assert_int_equal(p.replicas, 8);
    assert_int_equal(p.gpus_used, 1);
    assert_int_equal(p.thread_pct, 13);   /* ceil(100 / 8) */
    for (int t = 0; t < 8; t++)
        assert_int_equal(spk_pack_gpu(&p, t), 0);
    /* 6 tasks on 4 GPUs: 2 per GPU, 3 GPUs used; consecutive ranks share. */
    assert_int_equal(spk_pack_plan(6, 4, 0, 16, 0, &p), 0);
    assert_int_equal(p.replicas, 2);
    assert_int_equal(p.gpus_used, 3);
    assert_int_equal(p.thread_pct, 50);
    static const int want[6] = {0, 0, 1, 1, 2, 2};
    for (int t = 0; t < 6; t++)
        assert_int_equal(spk_pack_gpu(&p, t), want[t]);
    /* Explicit N and the admin's percentage. */
    assert_int_equal(spk_pack_plan(4, 2, 3, 16, 40, &p), 0);
    assert_int_equal(p.replicas, 3);
    assert_int_equal(p.gpus_used, 2);
    assert_int_equal(p.thread_pct, 40);
    assert_int_equal(spk_pack_plan(1, 1, 0, 16, 0, &p), 0);
    assert_int_equal(p.thread_pct, 100);
    assert_string_equal(p.note, "");
    /* --cdl-mps=4 with 2 tasks: each held to 25%, half the GPU idles: warned. */
    assert_int_equal(spk_pack_plan(2, 1, 4, 16, 0, &p), 0);
    assert_non_null(strstr(p.note, "idle"));
    assert_non_null(strstr(p.note, "2 local tasks in groups of 4"));
    assert_int_equal(spk_pack_plan(8, 2, 4, 16, 0, &p), 0);
    assert_string_equal(p.note, "");
    /* Errors name the numbers. */
    assert_int_equal(spk_pack_plan(6, 2, 2, 16, 0, &p), -1);
    assert_non_null(strstr(spk_last_error(), "need 3 GPUs"));
    assert_int_equal(spk_pack_plan(20, 1, 0, 16, 0, &p), -1);
    assert_non_null(strstr(spk_last_error(), "max_replicas_per_gpu=16"));
    assert_int_equal(spk_pack_plan(4, 1, 17, 16, 0, &p), -1);
    assert_int_equal(spk_pack_plan(4, 0, 0, 16, 0, &p), -1);
    assert_non_null(strstr(spk_last_error(), "no GPUs"));
}

/* Which GPU --cdl-bind=closest binds near: the one cdl-train opens (issue
 * 14: with 2 tasks on a 4-GPU node the plugin bound task 1 near GPU 2 while
 * cdl-train opened GPU 1). */
static void test_task_gpu_index(void **state)
{
    (void)state;
    struct spk_gpus g;
    assert_int_equal(spk_gpus_parse("0,1,2,3", &g), 0);
    assert_int_equal(spk_task_gpu_index(&g, 0, 1), 0);
    assert_int_equal(spk_task_gpu_index(&g, 1, 1), 1);
    assert_int_equal(spk_gpus_parse("4,5,6,7", &g), 0);   /* Slurm's indexes, not 0-based */
    assert_int_equal(spk_task_gpu_index(&g, 1, 1), 5);
    assert_int_equal(spk_task_gpu_index(&g, 4, 1), -1);   /* more tasks than GPUs */
    assert_int_equal(spk_task_gpu_index(&g, 3, 2), 5);    /* MPS: 2 replicas per GPU */
    assert_int_equal(spk_gpus_parse("GPU-8f1e,GPU-77aa", &g), 0);
    assert_int_equal(spk_task_gpu_index(&g, 0, 1), -1);   /* UUIDs: no index */
}

/* srun --ntasks-per-gpu=N puts N consecutive tasks on each GPU itself
 * (SLURMD_TRES_BIND=gpu:single:N): the contract's CDL_REPLICAS_PER_GPU
 * must say so, or cdl-train refuses the ranks sharing a GPU. */
static void test_tres_bind(void **state)
{
    (void)state;
    assert_int_equal(spk_tres_bind_tasks_per_gpu("gpu:single:2"), 2);
    assert_int_equal(spk_tres_bind_tasks_per_gpu("gpu:verbose,single:4"), 4);
    assert_int_equal(spk_tres_bind_tasks_per_gpu("gpu:single:1"), 1);
    assert_int_equal(spk_tres_bind_tasks_per_gpu("gpu:per_task:2"), 1);
    assert_int_equal(spk_tres_bind_tasks_per_gpu("gpu:map_gpu:0,0,1,1"), 1);
    assert_int_equal(spk_tres_bind_tasks_per_gpu("gpu:closest"), 1);
    assert_int_equal(spk_tres_bind_tasks_per_gpu("gpu:single:"), 1);
    assert_int_equal(spk_tres_bind_tasks_per_gpu("gpu:single:x"), 1);
    assert_int_equal(spk_tres_bind_tasks_per_gpu("gpu:single:99999999999999999999"), 1);
    assert_int_equal(spk_tres_bind_tasks_per_gpu("nic:single:2"), 1);
    assert_int_equal(spk_tres_bind_tasks_per_gpu("gpu:closest+nic:single:2"), 1);
    assert_int_equal(spk_tres_bind_tasks_per_gpu(""), 1);
    assert_int_equal(spk_tres_bind_tasks_per_gpu(NULL), 1);
}

/* srun --gpu-bind=map_gpu:1,0 --cdl-bind=closest: task 0 uses GPU 1 and
 * was bound near GPU 0 (the slot rule), on a two-socket node the other
 * socket. */
static void test_tres_bind_map_gpu(void **state)
{
    (void)state;
    assert_int_equal(spk_tres_bind_map_gpu("gpu:map_gpu:1,0", 0), 1);
    assert_int_equal(spk_tres_bind_map_gpu("gpu:map_gpu:1,0", 1), 0);
    assert_int_equal(spk_tres_bind_map_gpu("gpu:map_gpu:1,0", 2), 1);   /* the list repeats */
    assert_int_equal(spk_tres_bind_map_gpu("gpu:verbose,map_gpu:3", 5), 3);
    assert_int_equal(spk_tres_bind_map_gpu("gpu:map_gpu:0*2,1*2", 1), 0);
    assert_int_equal(spk_tres_bind_map_gpu("gpu:map_gpu:0*2,1*2", 2), 1);
    assert_int_equal(spk_tres_bind_map_gpu("gpu:map_gpu:0*2,1*2", 5), 0);
    assert_int_equal(spk_tres_bind_map_gpu("gpu:map_gpu:2,3+nic:map_nic:7", 3), 3);
    assert_int_equal(spk_tres_bind_map_gpu("gpu:map_gpu:0x1,0", 0), -1);   /* hex: not read */
    assert_int_equal(spk_tres_bind_map_gpu("gpu:map_gpu:", 0), -1);
    assert_int_equal(spk_tres_bind_map_gpu("gpu:map_gpu:1,,0", 0), -1);
    assert_int_equal(spk_tres_bind_map_gpu("gpu:map_gpu:1*0", 0), -1);
    assert_int_equal(spk_tres_bind_map_gpu("gpu:single:2", 0), -1);
    assert_int_equal(spk_tres_bind_map_gpu("nic:map_gpu:1", 0), -1);
    assert_int_equal(spk_tres_bind_map_gpu("", 0), -1);
    assert_int_equal(spk_tres_bind_map_gpu(NULL, 0), -1);
    assert_int_equal(spk_tres_bind_map_gpu("gpu:map_gpu:1", -1), -1);
}

/* Slurm bindings that give each task GPUs of its own (SLURMD_TRES_BIND):
 * the contract then says CDL_GPU_BIND=task (srun --gpus-per-task=2 with 4
 * tasks: ranks 2 and 3 asked for GPU 2 of their two), and --cdl-mps
 * refuses the user's map_gpu/mask_gpu instead of dropping it. */
static void test_tres_bind_task_gpus(void **state)
{
    (void)state;
    assert_string_equal(spk_tres_bind_task_gpus("gpu:per_task:2"), "per_task");
    assert_string_equal(spk_tres_bind_task_gpus("gpu:verbose,map_gpu:1,0"), "map_gpu");
    assert_string_equal(spk_tres_bind_task_gpus("gpu:mask_gpu:0x3,0xc"), "mask_gpu");
    assert_string_equal(spk_tres_bind_task_gpus("gpu:single:2"), "single");
    assert_null(spk_tres_bind_task_gpus("gpu:closest"));
    assert_null(spk_tres_bind_task_gpus("gpu:none"));
    assert_null(spk_tres_bind_task_gpus("gpu:per_task"));
    assert_null(spk_tres_bind_task_gpus("nic:map_gpu:1"));
    assert_null(spk_tres_bind_task_gpus("gpu:closest+nic:per_task:1"));
    assert_null(spk_tres_bind_task_gpus(""));
    assert_null(spk_tres_bind_task_gpus(NULL));
    /* --gpus-per-task=N: task t's first GPU is the step's t*N. */
    assert_int_equal(spk_tres_bind_per_task("gpu:per_task:2"), 2);
    assert_int_equal(spk_tres_bind_per_task("gpu:verbose,per_task:3+nic:per_task:1"), 3);
    assert_int_equal(spk_tres_bind_per_task("gpu:single:2"), 0);
    assert_int_equal(spk_tres_bind_per_task("gpu:per_task:"), 0);
    assert_int_equal(spk_tres_bind_per_task("gpu:per_task:0"), 0);
    assert_int_equal(spk_tres_bind_per_task("nic:per_task:2"), 0);
    assert_int_equal(spk_tres_bind_per_task(NULL), 0);
    /* The contract: written when bound, and a stale value from the
     * submit shell removed when not. */
    struct spk_conf c;
    struct spk_step s = step_2x2();
    struct spk_step_contract sc;
    struct spk_env env;
    spk_conf_defaults(&c);
    assert_int_equal(spk_contract_step(&c, &s, NULL, &sc), 0);
    assert_int_equal(spk_contract_task(&s, &sc, 1, 3, &env), 0);
    assert_null(spk_env_get(&env, CDL_ENV_GPU_BIND));
    int unset = 0;
    for (int i = 0; i < env.n; i++)
        unset += env.v[i].unset && !strcmp(env.v[i].name, CDL_ENV_GPU_BIND);
    assert_int_equal(unset, 1);
    s.gpu_bind_task = 1;
    assert_int_equal(spk_contract_task(&s, &sc, 1, 3, &env), 0);
    assert_string_equal(spk_env_get(&env, CDL_ENV_GPU_BIND), "task");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_task_contract),
        cmocka_unit_test(test_master_addr_policies),
        cmocka_unit_test(test_master_is_first_node_of_step),
        cmocka_unit_test(test_master_of_long_node_list),
        cmocka_unit_test(test_bad_layout),
        cmocka_unit_test(test_user_values),
        cmocka_unit_test(test_env_limits),
        cmocka_unit_test(test_port_reserved),
        cmocka_unit_test(test_port_deterministic),
        cmocka_unit_test(test_port_neighbour_jobs),
        cmocka_unit_test(test_port_array_tasks),
        cmocka_unit_test(test_gpus_parse),
        cmocka_unit_test(test_pack_plan),
        cmocka_unit_test(test_task_gpu_index),
        cmocka_unit_test(test_tres_bind),
        cmocka_unit_test(test_tres_bind_map_gpu),
        cmocka_unit_test(test_tres_bind_task_gpus),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
