/* Shared memory a step's ranks left behind on a node, removed by the plugin
 * at the step's end (slurmstepd, as root).
 *
 * libcdl's node segment is /dev/shm/cdl-<job>.<step>-<tag>-<16 hex>
 * (lib/dist/coll_shm.c: the contract's CDL_JOB_ID "<job>.<step>", a tag
 * n<i> or n<i>g<j>, a random name) and is unlinked once every member of
 * the node opened it. A rank killed before that (SIGKILL during set-up, a
 * step cancelled as it starts) leaves the file, and its memory, until
 * reboot; no rank of the step can open it once the step's tasks on the node
 * have ended. cdlrun sweeps its own runs (launcher/shm_sweep.c); under Slurm
 * the plugin does, since the ranks are gone and the user may never run on
 * that node again.
 *
 * Root deletes in a directory every user writes to, so only what the step's
 * own ranks could have created is touched: the exact name pattern of this
 * job and step, a regular file (never a link, directory or device), owned
 * by the job's uid; entries are named relative to the directory's
 * descriptor (fstatat without following links, unlinkat), so no path the
 * user controls is resolved. A directory every account may write to
 * without the sticky bit (a /dev/shm mounted with the wrong mode) is
 * refused with an error: anyone could swap an entry between its check and
 * its removal. */
#ifndef CDL_SPANK_SHMSWEEP_H
#define CDL_SPANK_SHMSWEEP_H

#include <stdint.h>
#include <sys/types.h>

/* stepid for every step of the job: the job epilog's sweep, which catches
 * the steps whose slurmstepd did not reach its exit hook (killed, crashed). */
#define SPK_SHM_ANY_STEP UINT32_MAX

/* 1 when name (a directory entry, no slash) is a segment of step jobid.stepid
 * (of any step of the job with SPK_SHM_ANY_STEP). */
int spk_shm_name_is_step(const char *name, uint32_t jobid, uint32_t stepid);

/* Removes dir's segments of step jobid.stepid (or SPK_SHM_ANY_STEP) owned by uid. Returns the
 * number removed, or -1 (spk_last_error) when dir cannot be read or an
 * entry could not be removed (the others are still removed); a missing dir
 * is 0. say(name, arg) is called for every removed entry (may be NULL). */
int spk_shm_sweep(const char *dir, uint32_t jobid, uint32_t stepid, uid_t uid,
                  void (*say)(const char *name, void *arg), void *arg);

#endif
