/* slurmd's job epilog (root, once per node at the end of a job): removes
 * what a cancelled or crashed step left in runtime_dir, i.e. the step
 * directories of this job whose slurmstepd did not get to its exit hook,
 * stopping a daemon still running in them (as the job user), and the
 * job's leftover shared memory in /dev/shm (shmsweep.h).
 *
 * Only Slurm's items (job id, uid) and the admin's runtime_dir are used; the
 * job's environment is not consulted (CVE-2017-15566, CVE-2021-31215). */
#include <string.h>

#include "spank/plugin.h"
#include "spank/shmsweep.h"

struct sweep {
    struct spk_cred cred;
    int have_uid;
    int failed;
};

static int sweep_one(const char *key, uid_t owner, gid_t group, void *arg)
{
    struct sweep *s = arg;
    struct spk_cred cred = s->cred;
    /* The directory was handed to the job user; anything else is not ours
     * to touch with that user's identity. */
    if (owner == 0 || (s->have_uid && owner != s->cred.uid)) {
        slurm_error("cdl: epilog: %s/%s is owned by uid %u, not the job's: left alone "
                    "(remove it by hand once no step of this job runs on the node)",
                    spk_g.conf.runtime_dir, key, (unsigned)owner);
        s->failed = 1;
        return 0;
    }
    if (!s->have_uid) {
        cred.uid = owner;
        cred.gid = group;
    }
    slurm_info("cdl: epilog: removing leftover step directory %s/%s", spk_g.conf.runtime_dir,
               key);
    if (spk_mps_cleanup(&spk_g.conf, key, &cred) != 0) {
        slurm_error("cdl: epilog: %s", spk_last_error());
        s->failed = 1;
    }
    return 0;
}

static void say_removed(const char *name, void *arg)
{
    slurm_info("cdl: epilog: removed /dev/shm/%s, left by a rank of job %u killed before its "
               "node had set up", name, *(const uint32_t *)arg);
}

int spk_epilog(spank_t sp)
{
    struct sweep s;
    uint32_t jobid;
    memset(&s, 0, sizeof s);
    if (spank_get_item(sp, S_JOB_ID, &jobid) != ESPANK_SUCCESS)
        return 0;
    if (spank_get_item(sp, S_JOB_UID, &s.cred.uid) == ESPANK_SUCCESS &&
        spank_get_item(sp, S_JOB_GID, &s.cred.gid) == ESPANK_SUCCESS)
        s.have_uid = 1;
    s.cred.ngroups = 0;
    if (spk_rundir_each_of_job(spk_g.conf.runtime_dir, jobid, sweep_one, &s) < 0)
        slurm_error("cdl: epilog: %s", spk_last_error());
    /* Shared memory of steps whose slurmstepd did not reach its exit hook
     * (shmsweep.h): no step of the job runs on the node any more. */
    if (s.have_uid &&
        spk_shm_sweep("/dev/shm", jobid, SPK_SHM_ANY_STEP, s.cred.uid, say_removed, &jobid) < 0)
        slurm_error("cdl: epilog: leftover shared memory: %s", spk_last_error());
    return 0;
}
