/* Binding plans (lib/dist/bind.h) on saved hwloc topologies (tests/topologies/):
 *   2socket-4gpu-nvml.xml  2 sockets x 4 cores x 2 PUs, GPUs nvml0,1 on
 *                          socket 0 and nvml2,3 on socket 1
 *   1socket-2gpu-pci.xml   8 cores, 2 NVIDIA GPUs without NVML names (bus c1
 *                          listed before 41) and an ASPEED VGA
 *   this-vm-2pu.xml        a real 2-vCPU virtual machine, no GPU
 *   dgx-2socket-8gpu.xml, 1socket-4gpu.xml, gh200.xml: GPU nodes (README)
 *   2socket-smt-interleaved.xml  2 sockets x 4 cores x 2 PUs, core i = PUs
 *                          i and i+8 (Intel/AMD servers' OS numbering)
 *   2socket-smt-cpuset.xml the same, saved inside a cpuset of socket 1
 * One planner serves the plugin and cdlrun; each task's GPU comes from the
 * contract's slot rule, as in cdl-train. */
#include <stdio.h>
#include <string.h>

#include "testutil.h"

#include "lib/dist/bind.h"
#include "topo_testutil.h"

static hwloc_topology_t load(const char *name)
{
    return test_topology(name, 1);
}

/* Plans ntasks and compares each task's PUs with want[t] ("0-3"). */
static void expect_plan(hwloc_topology_t topo, const char *allowed_list,
                        enum bind_mode mode, int ntasks, const int *gpus,
                        const char *const *want, const char *note_has)
{
    hwloc_bitmap_t allowed = hwloc_bitmap_alloc();
    hwloc_cpuset_t out[64];
    char note[256], got[64];
    if (allowed_list)
        hwloc_bitmap_list_sscanf(allowed, allowed_list);
    else
        hwloc_bitmap_copy(allowed, hwloc_topology_get_topology_cpuset(topo));
    for (int t = 0; t < ntasks; t++)
        out[t] = hwloc_bitmap_alloc();
    contract_err e;
    if (bind_plan(topo, allowed, mode, ntasks, gpus, out, note, sizeof note, &e) != 0)
        fail_msg("%s", e.msg);
    for (int t = 0; t < ntasks; t++) {
        hwloc_bitmap_list_snprintf(got, sizeof got, out[t]);
        if (strcmp(got, want[t]))
            fail_msg("task %d: PUs %s, want %s", t, got, want[t]);
        hwloc_bitmap_free(out[t]);
    }
    if (note_has)
        assert_non_null(strstr(note, note_has));
    else
        assert_string_equal(note, "");
    hwloc_bitmap_free(allowed);
}

static void test_cores_blocks(void **state)
{
    (void)state;
    hwloc_topology_t t = load("2socket-4gpu-nvml.xml");
    static const char *const four[] = {"0-3", "4-7", "8-11", "12-15"};
    expect_plan(t, NULL, BIND_CORES, 4, NULL, four, NULL);
    static const char *const three[] = {"0-3", "4-9", "10-15"};   /* 8 cores / 3: 2,3,3 */
    expect_plan(t, NULL, BIND_CORES, 3, NULL, three, NULL);
    /* More tasks than cores: tasks 3-4 and 8-9 share a core, one thread
     * each (whole cores gave both tasks both threads: doubled up). */
    static const char *const ten[] = {"0-1", "2-3", "4-5", "6", "7",
                                      "8-9", "10-11", "12-13", "14", "15"};
    expect_plan(t, NULL, BIND_CORES, 10, NULL, ten, "10 tasks on 8 cores: tasks share cores "
                "(one thread each)");
    /* Only parts of cores allowed (a cgroup): a core counts with those PUs;
     * 3 cores of 4 PUs for 2 tasks: 2 PUs each (whole cores gave 1 and 3). */
    static const char *const part[] = {"0,2", "3,5"};
    expect_plan(t, "0,2-3,5", BIND_CORES, 2, NULL, part, NULL);
    hwloc_topology_destroy(t);
}

static void test_closest(void **state)
{
    (void)state;
    hwloc_topology_t t = load("2socket-4gpu-nvml.xml");
    /* One task per GPU: the two GPUs of a socket split its cores. */
    static const int g4[] = {0, 1, 2, 3};
    static const char *const w4[] = {"0-3", "4-7", "8-11", "12-15"};
    expect_plan(t, NULL, BIND_CLOSEST, 4, g4, w4, NULL);
    /* Two replicas on each of GPUs 2 and 3: all four on socket 1, one core
     * each, where `cores` would have spread them over both sockets. */
    static const int g23[] = {2, 2, 3, 3};
    static const char *const w23[] = {"8-9", "10-11", "12-13", "14-15"};
    expect_plan(t, NULL, BIND_CLOSEST, 4, g23, w23, NULL);
    static const char *const w23c[] = {"0-3", "4-7", "8-11", "12-15"};
    expect_plan(t, NULL, BIND_CORES, 4, g23, w23c, NULL);
    /* Eight replicas on GPU 0: socket 0's four cores, then the nearest
     * others, a core each (two tasks a core on socket 0 left socket 1
     * idle); the note says so. */
    static const int g0[] = {0, 0, 0, 0, 0, 0, 0, 0};
    static const char *const w0[] = {"0-1", "2-3", "4-5", "6-7", "8-9", "10-11", "12-13",
                                     "14-15"};
    expect_plan(t, NULL, BIND_CLOSEST, 8, g0, w0, "GPU 0: 8 tasks, 4 free cores near it: also "
                "given 4 cores farther away (in the whole node)");
    /* The step may only use socket 1: GPU 0's locality is widened to the
     * machine and the allowed cores are used. */
    static const int g01[] = {0, 1};
    static const char *const w01[] = {"8-11", "12-15"};
    expect_plan(t, "8-15", BIND_CLOSEST, 2, g01, w01, NULL);
    /* A GPU the topology does not have: like cores, and the note says so. */
    static const int g9[] = {9, 9};
    static const char *const w9[] = {"0-7", "8-15"};
    expect_plan(t, NULL, BIND_CLOSEST, 2, g9, w9, "GPU 9 not found in the topology");
    expect_plan(t, NULL, BIND_CLOSEST, 2, NULL, w9, "no GPU assigned");
    hwloc_topology_destroy(t);
}

static void test_gpu_identity(void **state)
{
    (void)state;
    hwloc_topology_t t = load("2socket-4gpu-nvml.xml");
    hwloc_obj_t g = bind_gpu(t, 2);
    assert_non_null(g);
    assert_string_equal(g->name, "nvml2");
    assert_null(bind_gpu(t, 4));
    assert_null(bind_gpu(t, -1));
    hwloc_topology_destroy(t);
    /* No NVML names: NVIDIA 3D controllers in PCI bus order, VGA skipped. */
    t = load("1socket-2gpu-pci.xml");
    g = bind_gpu(t, 0);
    assert_non_null(g);
    assert_int_equal(g->attr->pcidev.bus, 0x41);
    g = bind_gpu(t, 1);
    assert_non_null(g);
    assert_int_equal(g->attr->pcidev.bus, 0xc1);
    assert_null(bind_gpu(t, 2));
    /* One socket: one domain; each GPU's tasks side by side. */
    static const int g10[] = {1, 0, 1};
    static const char *const w[] = {"0-1", "5-7", "2-4"};
    expect_plan(t, NULL, BIND_CLOSEST, 3, g10, w, NULL);
    hwloc_topology_destroy(t);
}

static void test_real_vm(void **state)
{
    (void)state;
    hwloc_topology_t t = load("this-vm-2pu.xml");
    static const char *const w[] = {"0", "1"};
    expect_plan(t, NULL, BIND_CORES, 2, NULL, w, NULL);
    static const char *const w3[] = {"0", "1", "1"};
    expect_plan(t, NULL, BIND_CLOSEST, 3, NULL, w3, "no GPU assigned");
    /* Allowed CPUs outside the topology: an error, not an empty binding. */
    hwloc_bitmap_t allowed = hwloc_bitmap_alloc();
    hwloc_cpuset_t out[1] = {hwloc_bitmap_alloc()};
    hwloc_bitmap_list_sscanf(allowed, "40-41");
    contract_err e;
    assert_int_equal(bind_plan(t, allowed, BIND_CORES, 1, NULL, out, NULL, 0, &e), -1);
    assert_non_null(strstr(e.msg, "not in the topology"));
    assert_int_equal(bind_plan(t, allowed, BIND_CORES, 0, NULL, out, NULL, 0, &e), -1);
    hwloc_bitmap_free(out[0]);
    hwloc_bitmap_free(allowed);
    hwloc_topology_destroy(t);
}

static void test_describe_and_load(void **state)
{
    (void)state;
    hwloc_topology_t t = load("2socket-4gpu-nvml.xml");
    hwloc_bitmap_t s = hwloc_bitmap_alloc();
    char buf[128];
    hwloc_bitmap_list_sscanf(s, "0-3,9");
    bind_describe(t, s, buf, sizeof buf);
    assert_string_equal(buf, "cores 0-1,4 (PUs 0-3,9)");
    hwloc_bitmap_free(s);
    hwloc_topology_destroy(t);
    contract_err e;
    assert_int_equal(bind_load(&t, "/nonexistent/topology.xml", 0, &e), -1);
    assert_non_null(strstr(e.msg, "topology=/nonexistent/topology.xml"));
    /* The machine itself (as slurmstepd and cdlrun load it). */
    assert_int_equal(bind_load(&t, NULL, 0, &e), 0);
    assert_true(hwloc_get_nbobjs_by_type(t, HWLOC_OBJ_PU) >= 1);
    hwloc_topology_destroy(t);
}

/* Each task's GPU by the contract's slot rule over ngpus visible GPUs. */
static void slot_gpus(int ntasks, int rpg, int ngpus, int *out)
{
    for (int t = 0; t < ntasks; t++)
        out[t] = contract_task_gpu(t, rpg, ngpus);
}

/* DGX-like: 2 sockets x 2 NUMA domains (L3) x 8 cores x 2 PUs, GPUs 2k and
 * 2k+1 behind the PCIe switch of domain k (PUs 16k..16k+15). */
static void test_dgx(void **state)
{
    (void)state;
    hwloc_topology_t t = load("dgx-2socket-8gpu.xml");
    int g[16];
    /* 2 tasks: task 1 uses GPU 1 (what cdl-train opens), next to GPU 0 in
     * domain 0. The plugin used to spread tasks over the GPUs (task 1 ->
     * GPU 4) and bound it on the other socket. */
    slot_gpus(2, 1, 8, g);
    assert_int_equal(g[1], 1);
    static const char *const w2[] = {"0-7", "8-15"};
    expect_plan(t, NULL, BIND_CLOSEST, 2, g, w2, NULL);
    /* One task per GPU: the two tasks of a domain split its 8 cores. */
    slot_gpus(8, 1, 8, g);
    static const char *const w8[] = {"0-7", "8-15", "16-23", "24-31",
                                     "32-39", "40-47", "48-55", "56-63"};
    expect_plan(t, NULL, BIND_CLOSEST, 8, g, w8, NULL);
    /* MPS, 2 replicas per GPU: 4 tasks per domain, 2 cores each. */
    slot_gpus(16, 2, 8, g);
    static const char *const w16[] = {"0-3", "4-7", "8-11", "12-15", "16-19", "20-23",
                                      "24-27", "28-31", "32-35", "36-39", "40-43", "44-47",
                                      "48-51", "52-55", "56-59", "60-63"};
    expect_plan(t, NULL, BIND_CLOSEST, 16, g, w16, NULL);
    /* The step got socket 1 only, 2 tasks on GPUs 4 and 5. */
    static const int g45[] = {4, 5};
    static const char *const w45[] = {"32-39", "40-47"};
    expect_plan(t, "32-63", BIND_CLOSEST, 2, g45, w45, NULL);
    hwloc_topology_destroy(t);
}

/* More ranks than cores (the plugin and cdlrun used to differ: cdlrun went
 * round-robin, 0 and 32 sharing core 0): neighbouring ranks share a core,
 * as MPS replicas of one GPU are neighbours, each on a thread of its own. */
static void test_more_tasks_than_cores(void **state)
{
    (void)state;
    hwloc_topology_t t = load("dgx-2socket-8gpu.xml");
    static char want[64][8];
    const char *w[64];
    /* Two ranks a core, one thread each (both threads each doubled them). */
    for (int r = 0; r < 64; r++) {
        snprintf(want[r], sizeof want[r], "%d", r);
        w[r] = want[r];
    }
    expect_plan(t, NULL, BIND_CORES, 64, NULL, w, "64 tasks on 32 cores");
    hwloc_topology_destroy(t);
}

/* 1 socket x 16 cores x 2 PUs, 4 PCIe GPUs: one domain for all. */
static void test_one_socket_4gpu(void **state)
{
    (void)state;
    hwloc_topology_t t = load("1socket-4gpu.xml");
    int g[8];
    slot_gpus(4, 1, 4, g);
    static const char *const w4[] = {"0-7", "8-15", "16-23", "24-31"};
    expect_plan(t, NULL, BIND_CLOSEST, 4, g, w4, NULL);
    /* 5 tasks on 4 GPUs without packing: task 4 has none, and is told. */
    slot_gpus(5, 1, 4, g);
    assert_int_equal(g[4], -1);
    static const char *const w5[] = {"0-5", "6-11", "12-17", "18-23", "24-31"};
    expect_plan(t, NULL, BIND_CLOSEST, 5, g, w5, "no GPU assigned");
    hwloc_topology_destroy(t);
}

/* GH200-like: 72 cores without SMT, one GPU; 4 MPS replicas share it. */
static void test_gh200(void **state)
{
    (void)state;
    hwloc_topology_t t = load("gh200.xml");
    int g[4];
    slot_gpus(4, 4, 1, g);
    static const char *const w[] = {"0-17", "18-35", "36-53", "54-71"};
    expect_plan(t, NULL, BIND_CLOSEST, 4, g, w, NULL);
    assert_non_null(bind_gpu(t, 0));
    assert_null(bind_gpu(t, 1));
    hwloc_topology_destroy(t);
}

/* OS numbering where a core's PUs are n and n+8: blocks are whole cores
 * (never "PUs 0-1", which would be halves of two cores), and a cgroup
 * that allows one thread of some cores and both of others is cut by
 * cores, each counting with its allowed PUs. */
static void test_interleaved_smt(void **state)
{
    (void)state;
    hwloc_topology_t t = load("2socket-smt-interleaved.xml");
    static const char *const four[] = {"0-1,8-9", "2-3,10-11", "4-5,12-13", "6-7,14-15"};
    expect_plan(t, NULL, BIND_CORES, 4, NULL, four, NULL);
    /* Slurm's --hint=nomultithread cpuset: the first PU of each core. */
    static const char *const first_pu[] = {"0-1", "2-3", "4-5", "6-7"};
    expect_plan(t, "0-7", BIND_CORES, 4, NULL, first_pu, NULL);
    /* Asymmetric: 3 cores of socket 0 (one with both PUs), 1 of socket 1. */
    static const char *const odd[] = {"0,8", "1", "2,5"};   /* 4 cores / 3: 1,1,2 */
    expect_plan(t, "0-2,5,8", BIND_CORES, 3, NULL, odd, NULL);
    /* srun -n2 -c3 under CR_CPU: 3 cores (6 PUs) for 2 tasks. Whole cores
     * gave 2 PUs and 4; each now has the 3 Slurm granted, core 1 split. */
    static const char *const c3[] = {"0-1,8", "2,9-10"};
    expect_plan(t, "0-2,8-10", BIND_CORES, 2, NULL, c3, NULL);
    /* 3 tasks on 5 cores: 1, 2, 2 (contract_share), cores not split. */
    static const char *const three[] = {"0,8", "1-2,9-10", "3-4,11-12"};
    expect_plan(t, "0-4,8-12", BIND_CORES, 3, NULL, three, NULL);
    hwloc_topology_destroy(t);
}

/* srun --hint=nomultithread under task/none: nothing narrowed the task to
 * one thread per core; the planner keeps the first PU of each core. */
static void test_one_pu_per_core(void **state)
{
    (void)state;
    hwloc_topology_t t = load("2socket-smt-interleaved.xml");
    hwloc_bitmap_t a = hwloc_bitmap_alloc();
    char got[64];
    static const struct { const char *in, *want; } cases[] = {
        {"0-15", "0-7"},          /* the whole node: P#0-7, one per core */
        {"8-15", "8-15"},         /* only second threads allowed: those */
        {"2-3,10-11", "2-3"},     /* Slurm's cores 2-3 (task/none) */
        {"0,9", "0,9"},           /* one PU of each of two cores */
        {"0-7", "0-7"},           /* task/affinity applied it already */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        hwloc_bitmap_list_sscanf(a, cases[i].in);
        bind_one_pu_per_core(t, a);
        hwloc_bitmap_list_snprintf(got, sizeof got, a);
        if (strcmp(got, cases[i].want))
            fail_msg("%s: got %s, want %s", cases[i].in, got, cases[i].want);
    }
    hwloc_bitmap_free(a);
    hwloc_topology_destroy(t);
    /* Without SMT: nothing to drop. */
    t = load("this-vm-2pu.xml");
    a = hwloc_bitmap_alloc();
    hwloc_bitmap_list_sscanf(a, "0-1");
    bind_one_pu_per_core(t, a);
    assert_int_equal(hwloc_bitmap_weight(a), 2);
    hwloc_bitmap_free(a);
    hwloc_topology_destroy(t);
}

/* plugstack topology= saved on another kind of node: refused, naming the
 * file and both CPU counts (the plan bound two tasks of a 2-CPU node to
 * the same "cores 0 (PUs 0-1)" of a 16-PU file). */
static void test_check_node(void **state)
{
    (void)state;
    hwloc_topology_t t = load("2socket-4gpu-nvml.xml");
    contract_err e;
    assert_int_equal(bind_check_node(t, 16, "/etc/cdl/node.xml", &e), 0);
    assert_int_equal(bind_check_node(t, 0, "/etc/cdl/node.xml", &e), 0);   /* unknown */
    assert_int_equal(bind_check_node(t, 2, "/etc/cdl/node.xml", &e), -1);
    assert_non_null(strstr(e.msg, "topology=/etc/cdl/node.xml describes a machine with 16 CPUs, "
                                  "this node has 2 online"));
    assert_int_equal(bind_check_node(t, 32, "/etc/cdl/node.xml", &e), -1);
    hwloc_topology_destroy(t);
    t = load("this-vm-2pu.xml");
    assert_int_equal(bind_check_node(t, 2, "x.xml", &e), 0);
    assert_int_equal(bind_check_node(t, 16, "x.xml", &e), -1);
    hwloc_topology_destroy(t);
}

/* Narrows the whole node to Slurm's step cores (task/none) and plans. */
static void expect_slurm_cpus(hwloc_topology_t topo, const char *allowed_list,
                              const char *cores, int slurm_threads, int want_rc,
                              const char *want_set, const char *note_has)
{
    hwloc_bitmap_t allowed = hwloc_bitmap_alloc();
    char note[160], got[64];
    if (allowed_list)
        hwloc_bitmap_list_sscanf(allowed, allowed_list);
    else
        hwloc_bitmap_copy(allowed, hwloc_topology_get_topology_cpuset(topo));
    int rc = bind_slurm_cores(topo, allowed, cores, slurm_threads, note, sizeof note);
    if (rc != want_rc)
        fail_msg("cores %s (threads %d): returned %d, want %d (%s)", cores ? cores : "(null)",
                 slurm_threads, rc, want_rc, note);
    hwloc_bitmap_list_snprintf(got, sizeof got, allowed);
    if (strcmp(got, want_set))
        fail_msg("cores %s: PUs %s, want %s", cores ? cores : "(null)", got, want_set);
    if (note_has)
        assert_non_null(strstr(note, note_has));
    else
        assert_string_equal(note, "");
    hwloc_bitmap_free(allowed);
}

static void expect_slurm_cores(hwloc_topology_t topo, const char *allowed_list,
                               const char *cores, int want_rc, const char *want_set,
                               const char *note_has)
{
    expect_slurm_cpus(topo, allowed_list, cores, 0, want_rc, want_set, note_has);
}

/* TaskPlugin=task/none: each task may use the whole node, and the plans
 * of two jobs sharing it both started at core 0. Slurm's step cores (its
 * core numbers, hwloc's logical indexes) now say which are the job's. */
static void test_slurm_cores(void **state)
{
    (void)state;
    hwloc_topology_t t = load("2socket-smt-interleaved.xml");
    /* A job's cores 2-3 and another job's 4-5: their own PUs, apart. */
    expect_slurm_cores(t, NULL, "2-3", 1, "2-3,10-11", NULL);
    expect_slurm_cores(t, NULL, "4-5", 1, "4-5,12-13", NULL);
    expect_slurm_cores(t, NULL, "0,7", 1, "0,7-8,15", NULL);
    /* All cores: nothing to narrow. */
    expect_slurm_cores(t, NULL, "0-7", 0, "0-15", NULL);
    /* Only ever narrows: a list that names none of the task's CPUs leaves
     * them, saying so; one that names them all changes nothing. */
    expect_slurm_cores(t, "2-3,10-11", "0-1", 0, "2-3,10-11",
                       "Slurm's cores 0-1 are none of the task's CPUs");
    expect_slurm_cores(t, "2-3,10-11", "2-3", 0, "2-3,10-11", NULL);
    /* The task may use its job's cores 0-3 only (a cpuset of the job, or
     * of the batch step an srun ran inside): two steps of the job, cores
     * 0-1 and 2-3, were both planned from core 0. */
    expect_slurm_cores(t, "0-3,8-11", "2-3", 1, "2-3,10-11", NULL);
    expect_slurm_cores(t, "0-3,8-11", "0-1", 1, "0-1,8-9", NULL);
    expect_slurm_cores(t, NULL, "", 0, "0-15", NULL);
    expect_slurm_cores(t, NULL, NULL, 0, "0-15", NULL);
    hwloc_topology_destroy(t);

    /* The plans of two one-task jobs on the 2-socket GPU node: disjoint. */
    t = load("2socket-4gpu-nvml.xml");
    hwloc_bitmap_t a = hwloc_bitmap_alloc(), b = hwloc_bitmap_alloc();
    hwloc_cpuset_t out[2] = {hwloc_bitmap_alloc(), hwloc_bitmap_alloc()};
    contract_err e;
    hwloc_bitmap_copy(a, hwloc_topology_get_topology_cpuset(t));
    hwloc_bitmap_copy(b, a);
    assert_int_equal(bind_slurm_cores(t, a, "0", 0, NULL, 0), 1);
    assert_int_equal(bind_slurm_cores(t, b, "1", 0, NULL, 0), 1);
    assert_int_equal(bind_plan(t, a, BIND_CORES, 1, NULL, out, NULL, 0, &e), 0);
    assert_int_equal(bind_plan(t, b, BIND_CORES, 1, NULL, out + 1, NULL, 0, &e), 0);
    assert_false(hwloc_bitmap_intersects(out[0], out[1]));
    hwloc_bitmap_free(a);
    hwloc_bitmap_free(b);
    hwloc_bitmap_free(out[0]);
    hwloc_bitmap_free(out[1]);
    hwloc_topology_destroy(t);
}

/* Lists that cannot be this node's cores leave the whole node, saying why. */
static void test_slurm_cores_refused(void **state)
{
    (void)state;
    hwloc_topology_t t = load("this-vm-2pu.xml");
    /* slurm.conf says CPUs=4 on a 2-core machine: core 3 does not exist. */
    expect_slurm_cores(t, NULL, "2-3", 0, "0-1", "the topology has fewer cores");
    expect_slurm_cores(t, NULL, "0", 1, "0", NULL);
    static const char *const bad[] = {"x", "0-", "-1", "1-0", "0,", ",0", "0,,1", "0-1-2",
                                      "99999999999999999999", "0 1"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        expect_slurm_cores(t, NULL, bad[i], 0, "0-1", "cannot read them");
    hwloc_topology_destroy(t);
}

/* Plans ntasks and checks what every closest plan must give while there
 * are no more tasks than cores: each task some of the allowed CPUs, no two
 * tasks a common PU. (They may share a core only where the allowed cores
 * do not divide evenly and their PUs do: even_pus, Slurm's CR_CPU grant.) */
static void expect_apart(hwloc_topology_t topo, const char *allowed_list, int ntasks,
                         const int *gpus)
{
    hwloc_bitmap_t allowed = hwloc_bitmap_alloc();
    hwloc_cpuset_t out[64];
    char note[256];
    contract_err e;
    hwloc_bitmap_list_sscanf(allowed, allowed_list);
    for (int t = 0; t < ntasks; t++)
        out[t] = hwloc_bitmap_alloc();
    if (bind_plan(topo, allowed, BIND_CLOSEST, ntasks, gpus, out, note, sizeof note, &e) != 0)
        fail_msg("%s", e.msg);
    for (int t = 0; t < ntasks; t++) {
        if (hwloc_bitmap_iszero(out[t]) || !hwloc_bitmap_isincluded(out[t], allowed))
            fail_msg("allowed %s, %d tasks: task %d outside the allowed CPUs", allowed_list,
                     ntasks, t);
        for (int s = 0; s < t; s++)
            if (hwloc_bitmap_intersects(out[s], out[t])) {
                for (int x = 0; x < ntasks; x++) {
                    char l[64];
                    hwloc_bitmap_list_snprintf(l, sizeof l, out[x]);
                    print_message("task %d (GPU %d): %s\n", x, gpus[x], l);
                }
                fail_msg("allowed %s, %d tasks: tasks %d and %d overlap (%s)", allowed_list,
                         ntasks, s, t, note);
            }
    }
    for (int t = 0; t < ntasks; t++)
        hwloc_bitmap_free(out[t]);
    hwloc_bitmap_free(allowed);
}

/* closest piled tasks up: a task without a GPU (or whose GPU's domain had
 * no allowed core) planned over all the allowed cores, on top of the
 * GPUs' tasks; the replicas of one GPU doubled up on its socket while the
 * other socket idled. Each GPU's tasks now get free cores near it, the
 * rest go to the others, and no core is shared unless there are more
 * tasks than cores. */
static void test_closest_apart(void **state)
{
    (void)state;
    hwloc_topology_t t = load("2socket-4gpu-nvml.xml");
    /* A task without a GPU next to one on GPU 0: it got all 16 PUs. */
    static const int g0n[] = {0, -1};
    static const char *const w0n[] = {"0-7", "8-15"};
    expect_plan(t, NULL, BIND_CLOSEST, 2, g0n, w0n, "no GPU assigned");
    /* Ranks of two GPUs of one socket, interleaved: each GPU's together. */
    static const int g0101[] = {0, 1, 0, 1};
    static const char *const w0101[] = {"0-1", "4-5", "2-3", "6-7"};
    expect_plan(t, NULL, BIND_CLOSEST, 4, g0101, w0101, NULL);
    /* GPUs 0 and 2 with the step on socket 0 and one core of socket 1:
     * GPU 2 takes that core. */
    static const int g02[] = {0, 2};
    static const char *const w02[] = {"0-7", "8-9"};
    expect_plan(t, "0-9", BIND_CLOSEST, 2, g02, w02, NULL);
    hwloc_topology_destroy(t);

    t = load("dgx-2socket-8gpu.xml");
    /* The step has domains 0 and 1: GPU 4's domain has no allowed core,
     * so its task was planned over all of them, on top of tasks 0 and 1. */
    static const int g014[] = {0, 1, 4};
    static const char *const w014[] = {"0-7", "8-15", "16-31"};
    expect_plan(t, "0-31", BIND_CLOSEST, 3, g014, w014, NULL);
    /* 20 MPS replicas of GPU 0: domain 0's 8 cores, then socket 0's
     * other domain, then socket 1: a core each (they were 20 tasks on 8
     * cores with 24 idle). */
    int g[64];
    static char want[20][8];
    const char *w[20];
    for (int r = 0; r < 20; r++) {
        g[r] = 0;
        snprintf(want[r], sizeof want[r], "%d-%d", 2 * r, 2 * r + 1);
        w[r] = want[r];
    }
    expect_plan(t, NULL, BIND_CLOSEST, 20, g, w, "GPU 0: 20 tasks, 8 free cores near it: also "
                "given 12 cores farther away (in the whole node)");
    /* Mixed layouts: never a shared core while cores suffice. */
    static const char *const sets[] = {"0-63", "0-31", "16-47", "0-7,48-63", "32-35,40-63"};
    static const int layouts[][8] = {
        {0, 1, 2, 3, 4, 5, 6, 7}, {0, 0, 0, 0, 0, 0, 0, 7}, {-1, 0, -1, 4, 9, 4, -1, 1},
        {6, 6, 6, 6, 1, 1, 1, 1}, {7, 3, 5, 1, 6, 2, 4, 0}, {-1, -1, -1, -1, -1, -1, -1, 2},
    };
    for (size_t i = 0; i < sizeof sets / sizeof sets[0]; i++)
        for (size_t l = 0; l < sizeof layouts / sizeof layouts[0]; l++)
            for (int n = 1; n <= 8; n++)
                expect_apart(t, sets[i], n, layouts[l]);
    /* 16 tasks, one core each of a 16-core step, mixed GPUs. */
    for (int r = 0; r < 16; r++)
        g[r] = r % 3 == 0 ? -1 : (r * 5) % 8;
    expect_apart(t, "0-15,40-55", 16, g);
    hwloc_topology_destroy(t);
}

/* CR_CPU on an SMT node described as CPUs=N (no threads): Slurm's "cores"
 * are PUs. Read as cores, a job's CPUs 0-1 (one core's two threads) gave
 * cores 0-1 (4 PUs, two of them another job's), and CPUs past the core
 * count were refused (the whole node). */
static void test_slurm_cpus(void **state)
{
    (void)state;
    hwloc_topology_t t = load("2socket-smt-interleaved.xml");
    /* Slurm's CPUs 0-1: logical PUs 0-1, core 0's threads P#0 and P#8. */
    expect_slurm_cpus(t, NULL, "0-1", 1, 1, "0,8", NULL);
    expect_slurm_cpus(t, NULL, "2", 1, 1, "1", NULL);
    expect_slurm_cpus(t, NULL, "8-9", 1, 1, "4,12", NULL);
    /* Unknown count, numbers past the 8 cores: PUs all the same. */
    expect_slurm_cpus(t, NULL, "8-9", 0, 1, "4,12", NULL);
    expect_slurm_cpus(t, NULL, "14-15", 0, 1, "7,15", NULL);
    /* Two CPUs a core (ThreadsPerCore=2 in slurm.conf): cores. */
    expect_slurm_cpus(t, NULL, "0-1", 2, 1, "0-1,8-9", NULL);
    expect_slurm_cpus(t, NULL, "8-9", 2, 0, "0-15", "the topology has fewer cores");
    expect_slurm_cpus(t, NULL, "16", 1, 0, "0-15", "the topology has fewer cores");

    /* Two tasks on those two CPUs: one thread each (both got both). */
    static const char *const two[] = {"0", "8"};
    expect_plan(t, "0,8", BIND_CORES, 2, NULL, two, "2 tasks on 1 core:");
    expect_plan(t, "0,8", BIND_CLOSEST, 2, NULL, two, "no GPU assigned");
    /* Four tasks on 3 CPUs of 2 cores: never outside the three. */
    static const char *const four[] = {"0", "8", "1", "1"};
    expect_plan(t, "0-1,8", BIND_CORES, 4, NULL, four, "more tasks than CPUs");
    hwloc_topology_destroy(t);
}

/* slurmstepd (or cdlrun) loaded the topology inside a cpuset: hwloc left
 * the other CPUs out, its core 0 was the node's core 4, and Slurm's cores
 * were not applied at all (the topology did not cover the node): two
 * steps of a job confined to socket 1 were both bound from its first core.
 * The file is 2socket-smt-interleaved.xml with allowed_cpuset socket 1. */
static void test_inside_cpuset(void **state)
{
    (void)state;
    hwloc_topology_t t = load("2socket-smt-cpuset.xml");
    char buf[128];
    assert_int_equal(hwloc_get_nbobjs_by_type(t, HWLOC_OBJ_CORE), 8);
    expect_slurm_cores(t, "4-7,12-15", "4-5", 1, "4-5,12-13", NULL);
    expect_slurm_cores(t, "4-7,12-15", "6-7", 1, "6-7,14-15", NULL);
    /* The two steps' plans: apart, named with the node's core numbers. */
    static const char *const s1[] = {"4,12", "5,13"};
    static const char *const s2[] = {"6,14", "7,15"};
    expect_plan(t, "4-5,12-13", BIND_CORES, 2, NULL, s1, NULL);
    expect_plan(t, "6-7,14-15", BIND_CORES, 2, NULL, s2, NULL);
    hwloc_bitmap_t s = hwloc_bitmap_alloc();
    hwloc_bitmap_list_sscanf(s, "6,14");
    bind_describe(t, s, buf, sizeof buf);
    assert_string_equal(buf, "cores 6 (PUs 6,14)");
    hwloc_bitmap_free(s);
    hwloc_topology_destroy(t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cores_blocks),
        cmocka_unit_test(test_closest),
        cmocka_unit_test(test_gpu_identity),
        cmocka_unit_test(test_real_vm),
        cmocka_unit_test(test_describe_and_load),
        cmocka_unit_test(test_dgx),
        cmocka_unit_test(test_more_tasks_than_cores),
        cmocka_unit_test(test_one_socket_4gpu),
        cmocka_unit_test(test_gh200),
        cmocka_unit_test(test_interleaved_smt),
        cmocka_unit_test(test_slurm_cores),
        cmocka_unit_test(test_slurm_cores_refused),
        cmocka_unit_test(test_one_pu_per_core),
        cmocka_unit_test(test_check_node),
        cmocka_unit_test(test_closest_apart),
        cmocka_unit_test(test_slurm_cpus),
        cmocka_unit_test(test_inside_cpuset),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
