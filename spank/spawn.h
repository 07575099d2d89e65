/* Running a helper as the job user from a root context of slurmstepd: a
 * fork that drops every privilege before it does anything else.
 *
 * The child: default signal dispositions and an empty signal mask, a new
 * session, oom_score_adj reset to 0 (slurmstepd protects itself with -1000
 * and children inherit it), stdio on /dev/null or pipes, every other file
 * descriptor closed, setgroups + setresgid + setresuid to the job's
 * credentials (checked: root cannot be regained), no_new_privs, umask 077,
 * chdir, then execve of an absolute path with exactly the environment given
 * (nothing of slurmstepd's or the job's environment leaks in). */
#ifndef CDL_SPANK_SPAWN_H
#define CDL_SPANK_SPAWN_H

#include <stddef.h>
#include <sys/types.h>

#define SPK_MAX_GROUPS 64

struct spk_cred {
    uid_t uid;
    gid_t gid;
    int ngroups;                     /* supplementary groups (the job's) */
    gid_t groups[SPK_MAX_GROUPS];
};

struct spk_cmd {
    const char *path;                /* absolute */
    char *const *argv;
    char *const *envp;               /* the whole environment */
    const char *input;               /* written to stdin, then EOF (NULL: /dev/null) */
    char *output;                    /* stdout + stderr captured here (NULL: /dev/null) */
    size_t output_len;
    const char *cwd;                 /* NULL: "/" */
    double timeout_s;                /* the child is killed after this */
};

/* Runs cmd as cred and waits for it (up to timeout_s). *status gets the
 * waitpid() status. Returns 0 when the command ran to an exit (of any
 * status), -1 with spk_error() when it could not be started, did not drop
 * privileges, or timed out (then it is killed). A command that forks and
 * leaves (a daemon) ends the wait when the first process exits. */
int spk_spawn(const struct spk_cred *cred, const struct spk_cmd *cmd, int *status);

/* A helper past its deadline gets spk_spawn_kill_signal (SIGKILL), then is
 * waited for at most spk_spawn_reap_grace_s (5 s): one stuck in an
 * uninterruptible wait in the kernel (state D, a hung NFS or FUSE mount)
 * does not die of SIGKILL until that wait ends, and root must not block on
 * it. Such a helper is logged (spk_log: path, pid, uid) and left behind,
 * and spk_spawn/spk_run_as fail with an error saying so. Both are variables
 * so the unit tests can stand in signal 0 (none: the helper stays, as a
 * stuck one does) for the one no process can ignore. */
extern int spk_spawn_kill_signal;
extern double spk_spawn_reap_grace_s;

/* Runs fn(arg) in a child holding only cred (same privilege drop, no exec):
 * for the few things root must not do itself, such as signalling a pid read
 * from a file the user can write. Returns fn's result (0..125), or -1. */
int spk_run_as(const struct spk_cred *cred, int (*fn)(void *), void *arg, double timeout_s);

/* The admin-configured program must be an absolute path to a regular,
 * executable file owned by root and not writable by group or others, in a
 * directory of the same kind, below directories owned by root that group
 * and others cannot write to (or sticky ones). real[len] gets the path with
 * every link resolved, the one checked: run that one (a link elsewhere on
 * the configured path could be changed after the check). */
int spk_admin_binary_resolve(const char *key, const char *path, char *real, size_t len);
int spk_check_admin_binary(const char *key, const char *path);

#endif
