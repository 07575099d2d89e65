/* Per-step state directories under the administrator's runtime_dir:
 *
 *   runtime_dir/                      root, 0755 (created if missing)
 *   runtime_dir/<job>.<step>.<node>/  the job user, 0700
 *       pipe/                         the job user, 0700: CUDA_MPS_PIPE_DIRECTORY
 *       log/                          the job user, 0700: CUDA_MPS_LOG_DIRECTORY
 *
 * The node name is part of the key because several slurmd may share one
 * host (and one runtime_dir). Root only creates and removes these and
 * reads pipe/ through spk_rundir_open_sub; every walk opens through
 * spk_open_beneath and removes with unlinkat(), so links the user plants
 * inside cannot redirect it and a mount point (the user's FUSE mount) is
 * never entered. A step directory with a mount point left in it is left
 * behind with an error naming it. */
#ifndef CDL_SPANK_RUNDIR_H
#define CDL_SPANK_RUNDIR_H

#include <stdint.h>
#include <sys/types.h>

#include "spank/util.h"

struct spk_rundir {
    char key[128];                 /* "<job>.<step>.<node>" */
    char step_dir[SPK_PATH_MAX];
    char pipe_dir[SPK_PATH_MAX];
    char log_dir[SPK_PATH_MAX];
};

/* Fills rd for (jobid, stepid, node). The node name must be [A-Za-z0-9._-]. */
int spk_rundir_init(struct spk_rundir *rd, const char *runtime_dir, uint32_t jobid,
                    uint32_t stepid, const char *node);

/* The same from a key found in runtime_dir ([A-Za-z0-9._-], no leading dot). */
int spk_rundir_from_key(struct spk_rundir *rd, const char *runtime_dir, const char *key);

/* Makes sure runtime_dir is a real directory owned by root and not writable
 * by group or others (creating it with 0755 when it is missing), and that
 * every directory above it is root's and not writable by group or others
 * unless sticky. The hint never suggests changing a shared directory. */
int spk_rundir_check_root(const char *runtime_dir);

/* Creates the step directory with pipe/ and log/ for uid:gid, removing a
 * stale one of the same key first (a requeued job reuses its step ids). */
int spk_rundir_create(const struct spk_rundir *rd, const char *runtime_dir, uid_t uid, gid_t gid);

/* Removes the step directory tree; a missing one is not an error. No link
 * is followed, there is no depth limit and no recursion (rundir.c). */
int spk_rundir_remove(const char *runtime_dir, const char *key);

/* Opens the step directory's subdirectory `sub` (pipe, log) for reading as
 * root without following a link at any level below runtime_dir: an fd, or
 * -1 with spk_last_error(). */
int spk_rundir_open_sub(const struct spk_rundir *rd, const char *sub);

/* Opens name in the directory dirfd as root may: without following a link
 * and without entering a mount point (the job user's FUSE mount, whose
 * daemon might never answer), asking nothing of a file system mounted
 * there. want_dir: a directory (O_RDONLY | O_DIRECTORY), else a regular
 * file (O_RDONLY | O_NONBLOCK). An fd, or -1 with errno: EXDEV for a mount
 * point, ELOOP for a link, ENOTDIR, EISDIR or EINVAL for the wrong type. */
int spk_open_beneath(int dirfd, const char *name, int want_dir);

/* Calls fn(key, owner uid, owner gid, arg) for every step directory of jobid in
 * runtime_dir (names "<jobid>.*"). Returns the number found, 0 when
 * runtime_dir does not exist, or -1 (nothing called) when it is not one
 * spk_rundir_check_root would accept: in a directory others may write to,
 * the entries could be anybody's. A step directory something is mounted
 * on (the user's FUSE mount) is counted but not passed to fn: logged
 * (spk_log), it is left for the admin, since its owner as seen is the
 * mount's. Nothing is asked of a file system mounted there. */
int spk_rundir_each_of_job(const char *runtime_dir, uint32_t jobid,
                           int (*fn)(const char *key, uid_t owner, gid_t group, void *arg),
                           void *arg);

#endif
