/* The checkpoint directory before the first step: usable, ours alone,
 * free of what an interrupted writer left, and a last.safetensors that is
 * really there. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "checkpoint.h"
#include "keep.h"
#include "owned.h"
#include "lib/dist/port_owner.h"

/* Two runs in one directory (a job submitted twice, a sweep whose runs
 * share --ckpt-dir) would overwrite each other's checkpoints, resume from
 * each other's, and remove each other's temporary files. flock on
 * DIR/.lock keeps the second one out; the kernel drops the lock when its
 * holder exits, however it ends, so no stale lock survives a killed run.
 * File systems without flock (some Lustre mounts: ENOSYS, EOPNOTSUPP,
 * ENOLCK) run unlocked, as before. */
static int take_lock(const char *dir, int *lock_fd)
{
    char path[1100], holder[200] = "";
    snprintf(path, sizeof path, "%.1000s/.lock", dir);
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
    if (fd < 0)
        return cdl_error("--ckpt-dir %s: cannot open its lock file %s: %s", dir, path,
                         strerror(errno));
    struct stat st;   /* one put there since check_files looked */
    if (fstat(fd, &st) == 0 && ckpt_file_foreign(dir, ".lock", &st) != 0) {
        close(fd);
        return -1;
    }
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        int err = errno;
        if (err != EWOULDBLOCK) {
            close(fd);
            *lock_fd = -1;
            return 0;
        }
        ssize_t n = pread(fd, holder, sizeof holder - 1, 0);
        holder[n > 0 ? n : 0] = '\0';
        holder[strcspn(holder, "\n")] = '\0';
        close(fd);
        return cdl_error("--ckpt-dir %s is in use by another run (%s): two runs in one "
                         "directory would overwrite each other's checkpoints; wait for it to "
                         "end, stop it, or give this run another --ckpt-dir", dir,
                         holder[0] ? holder : "its lock file names no process");
    }
    char host[128] = "?", since[32] = "?";
    gethostname(host, sizeof host);
    host[sizeof host - 1] = '\0';
    time_t now = time(NULL);
    struct tm tm;
    if (localtime_r(&now, &tm))
        strftime(since, sizeof since, "%Y-%m-%d %H:%M:%S", &tm);
    int len = snprintf(holder, sizeof holder, "pid %ld on %s since %s\n", (long)getpid(), host,
                       since);
    if (ftruncate(fd, 0) != 0 || pwrite(fd, holder, (size_t)len, 0) != len) {
        /* Only the message of a second run would lack the holder's name. */
    }
    *lock_fd = fd;
    return 0;
}

/* Whether the files this run would resume from or write over (name in
 * dir, st from lstat: a link's own owner) are another account's (owned.h):
 * a last.safetensors to resume from (for any user, root included), a .lock
 * to hold, a best or numbered checkpoint or a link in place of one to be
 * read or that this run then fails to replace in a sticky folder, only
 * after its first epoch. */
int ckpt_file_foreign(const char *dir, const char *name, const struct stat *st)
{
    char owner[160];
    if (!train_foreign(st, owner, sizeof owner))
        return 0;
    return cdl_error("--ckpt-dir %s: %s%s belongs to another account (%s), which could have "
                     "put it there: this run would %s it; remove it (as %s or root) if it is not "
                     "yours to use, or give a --ckpt-dir of your own (mkdir -m 700 DIR); to go "
                     "on from it, copy it into that directory, or name it with --resume PATH",
                     dir, name, S_ISLNK(st->st_mode) ? " (a link)" : "", owner,
                     !strcmp(name, ".lock") ? "lock through" : "resume from or write over",
                     owner);
}

/* The names of dir that ckpt_file_foreign is asked about. */
static int ckpt_own_name(const char *name)
{
    long step;
    return !strcmp(name, "last.safetensors") || !strcmp(name, "best.safetensors") ||
           !strcmp(name, ".lock") || ckpt_keep_name(name, &step);
}

static int check_files(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return cdl_error("--ckpt-dir %s: cannot list it: %s", dir, strerror(errno));
    struct dirent *e;
    int rc = 0;
    while (rc == 0 && (e = readdir(d))) {
        struct stat st;
        if (ckpt_own_name(e->d_name) &&
            fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0)
            rc = ckpt_file_foreign(dir, e->d_name, &st);
    }
    closedir(d);
    return rc;
}

int ckpt_dir_prepare(const char *dir, int *lock_fd)
{
    *lock_fd = -1;
    struct stat st;
    if (stat(dir, &st) != 0)
        return cdl_error("--ckpt-dir %s: %s: create it or name another directory", dir,
                         strerror(errno));
    if (!S_ISDIR(st.st_mode))
        return cdl_error("--ckpt-dir %s is not a directory: name a directory", dir);
    if (access(dir, W_OK | X_OK) != 0) {
        if (errno == EROFS)   /* no chmod helps: a read-only mount (a snapshot, a dataset share) */
            return cdl_error("--ckpt-dir %s is on a read-only file system: name a directory on "
                             "a writable one (resume from a checkpoint there with --resume "
                             "PATH); checkpoints would fail only after the first epoch", dir);
        return cdl_error("--ckpt-dir %s is not writable by this user (%s): fix its permissions "
                         "or name another directory; checkpoints would fail only after the "
                         "first epoch", dir, strerror(errno));
    }
    /* A folder of another account that every account may write to: anyone
     * on the host can put a last.safetensors there that this run resumes
     * from, take its .lock, or (its owner) replace or read the checkpoints. */
    if (train_shared_dir("--ckpt-dir", dir, &st, "put a checkpoint there that this run resumes "
                         "from, or replace or take this run's") != 0)
        return -1;
    if (check_files(dir) != 0 || take_lock(dir, lock_fd) != 0)
        return -1;
    /* Temporary files of a writer that was killed (atomic.h names them
     * .NAME.tmp.XXXXXX): only ours, only files. */
    DIR *d = opendir(dir);
    if (!d) {
        if (*lock_fd >= 0)
            close(*lock_fd);
        *lock_fd = -1;
        return cdl_error("--ckpt-dir %s: cannot list it: %s", dir, strerror(errno));
    }
    struct dirent *e;
    while ((e = readdir(d))) {
        long step;
        const char *tmp = strstr(e->d_name, ".tmp.");
        char numbered[64];
        /* and those of a numbered checkpoint (keep.c): .step-N.safetensors.tmp.* */
        int ours = tmp && e->d_name[0] == '.' && (size_t)(tmp - e->d_name) < sizeof numbered &&
                   snprintf(numbered, sizeof numbered, "%.*s", (int)(tmp - e->d_name - 1),
                            e->d_name + 1) > 0 &&
                   ckpt_keep_name(numbered, &step);
        if (strncmp(e->d_name, ".last.safetensors.tmp.", 22) != 0 &&
            strncmp(e->d_name, ".best.safetensors.tmp.", 22) != 0 && !ours)
            continue;
        struct stat fst;
        if (fstatat(dirfd(d), e->d_name, &fst, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(fst.st_mode))
            unlinkat(dirfd(d), e->d_name, 0);
    }
    closedir(d);
    return 0;
}

int ckpt_last_present(const char *path)
{
    struct stat st;
    if (lstat(path, &st) != 0)
        return errno == ENOENT ? 0
                               : cdl_error("cannot check %s: %s", path, strerror(errno));
    /* Again here: set-up (staging the data) may have taken minutes since
     * ckpt_dir_prepare looked, and the file may be new. */
    const char *slash = strrchr(path, '/');
    if (st.st_uid != geteuid() && st.st_uid != 0) {
        char dir[PATH_MAX];
        snprintf(dir, sizeof dir, "%.*s", slash ? (int)(slash - path) : 1, slash ? path : ".");
        return ckpt_file_foreign(dir, slash ? slash + 1 : path, &st);
    }
    if (!S_ISLNK(st.st_mode) || stat(path, &st) == 0)
        return 1;
    char target[PATH_MAX];
    ssize_t n = readlink(path, target, sizeof target - 1);
    target[n > 0 ? n : 0] = '\0';
    return cdl_error("%s is a link to %s, which cannot be reached (%s): is its file system "
                     "mounted? Fix the link, remove it to start afresh, or pass --resume never",
                     path, target, strerror(errno));
}
