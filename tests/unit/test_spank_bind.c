/* --cdl-bind plans on saved hwloc topologies (tests/topologies/):
 *   2socket-4gpu-nvml.xml  2 sockets x 4 cores x 2 PUs, GPUs nvml0,1 on
 *                          socket 0 and nvml2,3 on socket 1
 *   1socket-2gpu-pci.xml   8 cores, 2 NVIDIA GPUs without NVML names (bus c1
 *                          listed before 41) and an ASPEED VGA
 *   this-vm-2pu.xml        a real 2-vCPU virtual machine, no GPU */
#include <stdio.h>
#include <string.h>

#include "testutil.h"

#include "spank/bind.h"

static hwloc_topology_t load(const char *name)
{
    char rel[128], path[512];
    hwloc_topology_t t;
    snprintf(rel, sizeof rel, "tests/topologies/%s", name);
    test_path(rel, path, sizeof path);
    if (spk_bind_load(&t, path, 1) != 0)
        fail_msg("%s", spk_last_error());
    return t;
}

/* Plans ntasks and compares each task's PUs with want[t] ("0-3"). */
static void expect_plan(hwloc_topology_t topo, const char *allowed_list,
                        enum spk_bind_mode mode, int ntasks, const int *gpus,
                        const char *const *want, const char *note_has)
{
    hwloc_bitmap_t allowed = hwloc_bitmap_alloc();
    hwloc_cpuset_t out[16];
    char note[128], got[64];
    if (allowed_list)
        hwloc_bitmap_list_sscanf(allowed, allowed_list);
    else
        hwloc_bitmap_copy(allowed, hwloc_topology_get_topology_cpuset(topo));
    for (int t = 0; t < ntasks; t++)
        out[t] = hwloc_bitmap_alloc();
    assert_int_equal(spk_bind_plan(topo, allowed, mode, ntasks, gpus, out, note, sizeof note), 0);
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
    expect_plan(t, NULL, SPK_BIND_CORES, 4, NULL, four, NULL);
    static const char *const three[] = {"0-3", "4-9", "10-15"};   /* 8 cores / 3: 2,3,3 */
    expect_plan(t, NULL, SPK_BIND_CORES, 3, NULL, three, NULL);
    /* More tasks than cores: neighbours share a core, none is left out. */
    static const char *const ten[] = {"0-1", "0-1", "2-3", "4-5", "6-7",
                                      "8-9", "8-9", "10-11", "12-13", "14-15"};
    expect_plan(t, NULL, SPK_BIND_CORES, 10, NULL, ten, NULL);
    /* Only parts of cores allowed (a cgroup): a core counts with those PUs. */
    static const char *const part[] = {"0", "2-3,5"};
    expect_plan(t, "0,2-3,5", SPK_BIND_CORES, 2, NULL, part, NULL);
    hwloc_topology_destroy(t);
}

static void test_closest(void **state)
{
    (void)state;
    hwloc_topology_t t = load("2socket-4gpu-nvml.xml");
    /* One task per GPU: the two GPUs of a socket split its cores. */
    static const int g4[] = {0, 1, 2, 3};
    static const char *const w4[] = {"0-3", "4-7", "8-11", "12-15"};
    expect_plan(t, NULL, SPK_BIND_CLOSEST, 4, g4, w4, NULL);
    /* Two replicas on each of GPUs 2 and 3: all four on socket 1, one core
     * each, where `cores` would have spread them over both sockets. */
    static const int g23[] = {2, 2, 3, 3};
    static const char *const w23[] = {"8-9", "10-11", "12-13", "14-15"};
    expect_plan(t, NULL, SPK_BIND_CLOSEST, 4, g23, w23, NULL);
    static const char *const w23c[] = {"0-3", "4-7", "8-11", "12-15"};
    expect_plan(t, NULL, SPK_BIND_CORES, 4, g23, w23c, NULL);
    /* Eight replicas on GPU 0: socket 0's four cores, two tasks per core. */
    static const int g0[] = {0, 0, 0, 0, 0, 0, 0, 0};
    static const char *const w0[] = {"0-1", "0-1", "2-3", "2-3", "4-5", "4-5", "6-7", "6-7"};
    expect_plan(t, NULL, SPK_BIND_CLOSEST, 8, g0, w0, NULL);
    /* The step may only use socket 1: GPU 0's locality is widened to the
     * machine and the allowed cores are used. */
    static const int g01[] = {0, 1};
    static const char *const w01[] = {"8-11", "12-15"};
    expect_plan(t, "8-15", SPK_BIND_CLOSEST, 2, g01, w01, NULL);
    /* A GPU the topology does not have: like cores, and the note says so. */
    static const int g9[] = {9, 9};
    static const char *const w9[] = {"0-7", "8-15"};
    expect_plan(t, NULL, SPK_BIND_CLOSEST, 2, g9, w9, "GPU 9 not found in the topology");
    expect_plan(t, NULL, SPK_BIND_CLOSEST, 2, NULL, w9, "no GPU assigned");
    hwloc_topology_destroy(t);
}

static void test_gpu_identity(void **state)
{
    (void)state;
    hwloc_topology_t t = load("2socket-4gpu-nvml.xml");
    hwloc_obj_t g = spk_bind_gpu(t, 2);
    assert_non_null(g);
    assert_string_equal(g->name, "nvml2");
    assert_null(spk_bind_gpu(t, 4));
    assert_null(spk_bind_gpu(t, -1));
    hwloc_topology_destroy(t);
    /* No NVML names: NVIDIA 3D controllers in PCI bus order, VGA skipped. */
    t = load("1socket-2gpu-pci.xml");
    g = spk_bind_gpu(t, 0);
    assert_non_null(g);
    assert_int_equal(g->attr->pcidev.bus, 0x41);
    g = spk_bind_gpu(t, 1);
    assert_non_null(g);
    assert_int_equal(g->attr->pcidev.bus, 0xc1);
    assert_null(spk_bind_gpu(t, 2));
    static const int g10[] = {1, 0, 1};
    static const char *const w[] = {"0-1", "2-4", "5-7"};   /* one socket: one domain */
    expect_plan(t, NULL, SPK_BIND_CLOSEST, 3, g10, w, NULL);
    hwloc_topology_destroy(t);
}

static void test_real_vm(void **state)
{
    (void)state;
    hwloc_topology_t t = load("this-vm-2pu.xml");
    static const char *const w[] = {"0", "1"};
    expect_plan(t, NULL, SPK_BIND_CORES, 2, NULL, w, NULL);
    static const char *const w3[] = {"0", "0", "1"};
    expect_plan(t, NULL, SPK_BIND_CLOSEST, 3, NULL, w3, "no GPU assigned");
    /* Allowed CPUs outside the topology: an error, not an empty binding. */
    hwloc_bitmap_t allowed = hwloc_bitmap_alloc();
    hwloc_cpuset_t out[1] = {hwloc_bitmap_alloc()};
    hwloc_bitmap_list_sscanf(allowed, "40-41");
    assert_int_equal(spk_bind_plan(t, allowed, SPK_BIND_CORES, 1, NULL, out, NULL, 0), -1);
    assert_non_null(strstr(spk_last_error(), "not in the topology"));
    assert_int_equal(spk_bind_plan(t, allowed, SPK_BIND_CORES, 0, NULL, out, NULL, 0), -1);
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
    spk_bind_describe(t, s, buf, sizeof buf);
    assert_string_equal(buf, "cores 0-1,4 (PUs 0-3,9)");
    hwloc_bitmap_free(s);
    hwloc_topology_destroy(t);
    assert_int_equal(spk_bind_load(&t, "/nonexistent/topology.xml", 0), -1);
    assert_non_null(strstr(spk_last_error(), "topology=/nonexistent/topology.xml"));
    /* The machine itself (as slurmstepd loads it). */
    assert_int_equal(spk_bind_load(&t, NULL, 0), 0);
    assert_true(hwloc_get_nbobjs_by_type(t, HWLOC_OBJ_PU) >= 1);
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
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
