/* One MPS control daemon per node per step, owned by the job user.
 *
 * Lifecycle (all in slurmstepd, see remote.c):
 *   spk_mps_setup       init_post_opt, root, before any task is forked:
 *                       directories (rundir.h) and the shared state: an
 *                       anonymous MAP_SHARED page with a robust
 *                       process-shared mutex, inherited by every task child
 *                       (no file the user could swap or write)
 *   spk_mps_task_start  task_init_privileged, root, in each task child: the
 *                       first to take the lock starts the daemon as the user
 *                       and waits until it answers; the others wait on the
 *                       lock, so no task execs before the daemon is up
 *   spk_mps_task_exit   task_exit, root, once per task: the last one sends
 *                       `quit` and waits for the daemon to go
 *   spk_mps_teardown    exit: stops a daemon still running (tasks that never
 *                       started), removes the directories
 *   spk_mps_cleanup     job_epilog: the same for a step whose slurmstepd
 *                       died (found by directory name)
 *
 * The control binary is the administrator's path, run through spawn.h with a
 * fixed environment; the pid file in the user's pipe directory is only ever
 * used to signal as the user. */
#ifndef CDL_SPANK_MPS_H
#define CDL_SPANK_MPS_H

#include "spank/conf.h"
#include "spank/rundir.h"
#include "spank/spawn.h"

struct spk_mps_shared;

struct spk_mps {
    struct spk_rundir rd;
    char runtime_dir[SPK_PATH_MAX];
    char control[SPK_PATH_MAX];       /* the admin's nvidia-cuda-mps-control */
    char visible[1024];               /* the step's CUDA_VISIBLE_DEVICES for the daemon */
    struct spk_cred cred;
    double timeout_s;
    struct spk_mps_shared *sh;
};

int spk_mps_setup(struct spk_mps *m, const struct spk_conf *conf, const struct spk_rundir *rd,
                  const struct spk_cred *cred, const char *visible, int local_tasks);
int spk_mps_task_start(struct spk_mps *m);
int spk_mps_task_exit(struct spk_mps *m);
int spk_mps_teardown(struct spk_mps *m);

/* Stops whatever daemon runs in the step directory `key` and removes it. */
int spk_mps_cleanup(const struct spk_conf *conf, const char *key, const struct spk_cred *cred);

/* 1 when the daemon of m has been started and not stopped (for tests). */
int spk_mps_running(const struct spk_mps *m);

#endif
