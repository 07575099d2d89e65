/* The step's CPUs from Slurm's core numbers (spank/stepcpus.c) on saved
 * topologies: 2socket-smt-interleaved.xml (2 sockets x 4 cores x 2 PUs,
 * core i = OS PUs i and i+8; hwloc's logical PU k is core k/2) and
 * 2socket-smt-cpuset.xml (the same, saved inside a cpuset of socket 1).
 * Each case names the slurm.conf it stands for. */
#include <stdio.h>
#include <string.h>

#include "testutil.h"

#include "lib/dist/bind.h"
#include "topo_testutil.h"
#include "spank/stepcpus.h"

static hwloc_topology_t load(const char *name)
{
    return test_topology(name, 0);
}

/* Narrows allowed_list (NULL: the whole node, task/none) to the step's
 * CPUs and compares them (OS numbers) with want; the note must hold
 * note_has (NULL: be empty). */
static void expect(hwloc_topology_t topo, const char *allowed_list, const char *job,
                   const char *step, const char *cpus, int major, int minor, const char *want,
                   const char *note_has)
{
    hwloc_bitmap_t allowed = hwloc_bitmap_alloc();
    char note[384], got[64];
    if (allowed_list)
        hwloc_bitmap_list_sscanf(allowed, allowed_list);
    else
        hwloc_bitmap_copy(allowed, hwloc_topology_get_topology_cpuset(topo));
    struct spk_slurm_cpus s = {.step_cores = step, .job_cores = job, .cpus_on_node = cpus,
                               .major = major, .minor = minor};
    spk_step_cpus(topo, allowed, &s, note, sizeof note);
    hwloc_bitmap_list_snprintf(got, sizeof got, allowed);
    if (strcmp(got, want))
        fail_msg("job %s step %s (CPUs %s, Slurm %d.%02d): PUs %s, want %s (%s)", job, step,
                 cpus, major, minor, got, want, note);
    if (note_has && !strstr(note, note_has))
        fail_msg("step %s: note '%s' lacks '%s'", step, note, note_has);
    if (!note_has && note[0])
        fail_msg("step %s: unexpected note '%s'", step, note);
    hwloc_bitmap_free(allowed);
}

/* Sockets=2 CoresPerSocket=4 ThreadsPerCore=1 on this 2-thread hardware
 * (whole cores scheduled), TaskPlugin=task/none: the task may use the
 * whole node. Slurm 23.11 maps its core k to hardware core k; the plugin
 * read k as hardware thread k, so a job of Slurm's cores 2-3 was bound to
 * core 1 (PUs 1,9), the core of the job given Slurm's cores 0-1. */
static void test_threads_per_core_1(void **state)
{
    (void)state;
    hwloc_topology_t t = load("2socket-smt-interleaved.xml");
    expect(t, NULL, "0-1", "0-1", "2", 23, 11, "0-1,8-9", "read as whole cores");
    expect(t, NULL, "2-3", "2-3", "2", 23, 11, "2-3,10-11", "read as whole cores");
    expect(t, NULL, "4-7", "6", "4", 24, 5, "6,14", "read as whole cores");
    /* Before 23.11 Slurm itself mapped core k to hardware thread k (both
     * threads of half the cores): read as it did, the jobs stay apart. */
    expect(t, NULL, "0-1", "0-1", "2", 22, 5, "0,8", "read as threads");
    expect(t, NULL, "2-3", "2-3", "2", 22, 5, "1,9", "read as threads");
    hwloc_topology_destroy(t);
}

/* task/cgroup: the task's cpuset is Slurm's mapping, whatever its version:
 * the reading under which it holds every number of the step wins. */
static void test_cpuset_decides(void **state)
{
    (void)state;
    hwloc_topology_t t = load("2socket-smt-interleaved.xml");
    /* 23.11, ThreadsPerCore=1: the job's cores 0-3 are their first
     * threads, P#0-3; its step of cores 2-3 gets P#2-3 (read as threads:
     * P#1 only, one CPU of the two). Version unknown. */
    expect(t, "0-3", "0-3", "2-3", "4", 0, 0, "2-3", "(the task's CPUs hold them)");
    /* Before 23.11: the job's cpuset is threads 0-3 (P#0,8,1,9). */
    expect(t, "0-1,8-9", "0-3", "2-3", "4", 23, 11, "1,9", "read as threads (the task");
    hwloc_topology_destroy(t);

    /* Saved inside socket 1's cpuset: a job of cores 4-7 under 23.11 has
     * their first threads P#4-7; its steps of cores 4-5 and 6-7 were read
     * as threads 4-7 (cores 2-3, none of the job's) and both planned over
     * all four CPUs. */
    t = load("2socket-smt-cpuset.xml");
    expect(t, "4-7", "4-7", "4-5", "4", 23, 11, "4-5", "read as cores");
    expect(t, "4-7", "4-7", "6-7", "4", 23, 11, "6-7", "read as cores");
    hwloc_topology_destroy(t);
}

/* What was right stays: CPUs=16 alone (numbers past the 8 cores are
 * threads), ThreadsPerCore=2 (two CPUs a core), a node without SMT. */
static void test_unchanged(void **state)
{
    (void)state;
    hwloc_topology_t t = load("2socket-smt-interleaved.xml");
    expect(t, NULL, "8-9", "8-9", "2", 23, 11, "4,12", NULL);
    expect(t, NULL, "0-1,14-15", "0-1", "4", 23, 11, "0,8", NULL);
    expect(t, NULL, "0-1", "0-1", "4", 23, 11, "0-1,8-9", NULL);
    expect(t, NULL, "0-1", "0-1", "4", 22, 5, "0-1,8-9", NULL);
    /* --threads-per-core (the count is not Slurm's per core): cores. */
    hwloc_bitmap_t a = hwloc_bitmap_alloc();
    hwloc_bitmap_copy(a, hwloc_topology_get_topology_cpuset(t));
    struct spk_slurm_cpus s = {.step_cores = "2-3", .job_cores = "2-3", .cpus_on_node = "2",
                               .user_threads = 1, .major = 22, .minor = 5};
    assert_int_equal(spk_slurm_reading(t, a, &s, NULL, 0), 0);
    hwloc_bitmap_free(a);
    hwloc_topology_destroy(t);
    t = load("this-vm-2pu.xml");
    expect(t, NULL, "0-1", "1", "2", 23, 11, "1", NULL);
    hwloc_topology_destroy(t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_threads_per_core_1),
        cmocka_unit_test(test_cpuset_decides),
        cmocka_unit_test(test_unchanged),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
