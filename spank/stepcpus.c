/* The step's CPUs from Slurm's core numbers (see stepcpus.h). */
#ifdef HAVE_HWLOC
#include <stdio.h>
#include <string.h>

#include "lib/dist/bind.h"
#include "spank/options.h"
#include "spank/stepcpus.h"

/* 1 when every number of ids names an object (of type t) with a CPU in
 * allowed: the reading under which Slurm's own cpuset holds them. */
static int fits(hwloc_topology_t topo, hwloc_obj_type_t t, hwloc_const_bitmap_t ids,
                hwloc_const_cpuset_t allowed)
{
    int i;
    hwloc_bitmap_foreach_begin(i, ids) {
        hwloc_obj_t o = hwloc_get_obj_by_type(topo, t, (unsigned)i);
        if (!o || !hwloc_bitmap_intersects(o->cpuset, allowed))
            return 0;
    }
    hwloc_bitmap_foreach_end();
    return 1;
}

int spk_slurm_reading(hwloc_topology_t topo, hwloc_const_cpuset_t allowed,
                      const struct spk_slurm_cpus *s, char *why, size_t whylen)
{
    int ncores = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_CORE);
    int npus = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_PU);
    int threads = s->user_threads ? 0 : spk_slurm_threads(s->job_cores, s->cpus_on_node);
    const char *ids_str = s->step_cores && *s->step_cores ? s->step_cores : s->job_cores;
    if (why && whylen)
        why[0] = '\0';
    /* Not SMT, Slurm counts several CPUs a core, or the count is unknown
     * (--threads-per-core): bind_slurm_cores's own rules. */
    if (threads != 1 || ncores < 1 || npus <= ncores || !ids_str || !*ids_str)
        return threads;
    hwloc_bitmap_t ids = hwloc_bitmap_alloc(), job = hwloc_bitmap_alloc();
    int rc = 1, hw = npus / ncores;
    if (!ids || !job || hwloc_bitmap_list_sscanf(ids, ids_str) != 0 ||
        hwloc_bitmap_last(ids) < 0)
        goto out;   /* bind_slurm_cores says it cannot read them */
    if (s->job_cores && hwloc_bitmap_list_sscanf(job, s->job_cores) == 0)
        hwloc_bitmap_or(ids, ids, job);
    /* A number past the cores: Slurm counts threads (CPUs=N alone). */
    if (hwloc_bitmap_last(ids) >= ncores)
        goto out;
    if (s->step_cores && *s->step_cores)
        hwloc_bitmap_list_sscanf(ids, s->step_cores);
    /* Slurm confined the task (task/cgroup, a cpuset of the job): the
     * reading its cpuset holds. */
    if (!hwloc_bitmap_isincluded(hwloc_topology_get_topology_cpuset(topo), allowed)) {
        int as_cores = fits(topo, HWLOC_OBJ_CORE, ids, allowed);
        int as_pus = fits(topo, HWLOC_OBJ_PU, ids, allowed);
        if (as_cores != as_pus) {
            rc = as_cores ? hw : 1;
            if (why && whylen)
                snprintf(why, whylen, "Slurm counts one CPU a core on this node of %d threads "
                         "a core: its numbers read as %s (the task's CPUs hold them)", hw,
                         as_cores ? "cores" : "threads");
            goto out;
        }
    }
    /* The whole node (task/none): as Slurm maps them itself (bug 16351,
     * Slurm 23.11: ThreadsPerCore below the hardware's gives whole cores;
     * before, core k was hardware thread k). */
    if (s->major > 23 || (s->major == 23 && s->minor >= 11)) {
        rc = hw;
        if (why && whylen)
            snprintf(why, whylen, "Slurm counts one CPU a core on this node of %d threads a "
                     "core: its numbers read as whole cores (ThreadsPerCore=1, as Slurm %d.%02d "
                     "maps them)", hw, s->major, s->minor);
    }
    else if (why && whylen)
        snprintf(why, whylen, "Slurm counts one CPU a core on this node of %d threads a core: "
                 "its numbers read as threads (as Slurm before 23.11 maps them)", hw);
out:
    hwloc_bitmap_free(ids);
    hwloc_bitmap_free(job);
    return rc;
}

int spk_step_cpus(hwloc_topology_t topo, hwloc_cpuset_t allowed, const struct spk_slurm_cpus *s,
                  char *note, size_t notelen)
{
    char why[192];
    int threads = spk_slurm_reading(topo, allowed, s, why, sizeof why);
    int rc = bind_slurm_cores(topo, allowed, s->step_cores, threads, note, notelen);
    if (why[0] && note && notelen) {
        size_t used = strlen(note);
        snprintf(note + used, notelen - used, "%s%s", used ? "; " : "", why);
    }
    return rc;
}
#endif /* HAVE_HWLOC */
