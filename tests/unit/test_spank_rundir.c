/* Root-side paths of the step directories (spank/rundir.c): a tree the
 * job user leaves behind is removed however deep it is and without
 * following its links; every directory above runtime_dir is checked, and
 * the hint never asks to change a shared directory such as /tmp; pipe/ is
 * never reached through a link.
 *
 * The ownership checks need root (they hand directories to another user);
 * those parts are skipped otherwise. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <sys/inotify.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "testutil.h"
#include "fuse_stall.h"

#include "spank/rundir.h"

static char tmp[64], runtime[128], outside[128], canary[192];

static int setup(void **state)
{
    (void)state;
    snprintf(tmp, sizeof tmp, "/tmp/cdl-rundir-XXXXXX");
    if (!mkdtemp(tmp) || chmod(tmp, 0755))
        return -1;
    snprintf(runtime, sizeof runtime, "%s/run", tmp);
    snprintf(outside, sizeof outside, "%s/outside", tmp);
    snprintf(canary, sizeof canary, "%s/canary", outside);
    if (mkdir(runtime, 0755) || mkdir(outside, 0755))
        return -1;
    FILE *f = fopen(canary, "w");
    if (!f)
        return -1;
    fputs("keep me\n", f);
    return fclose(f);
}

static int teardown(void **state)
{
    (void)state;
    char cmd[256];
    snprintf(cmd, sizeof cmd, "chmod -R u+rwx '%s' 2>/dev/null; rm -rf '%s'", tmp, tmp);
    return system(cmd) == 0 ? 0 : -1;
}

static int exists(const char *path)
{
    struct stat st;
    return lstat(path, &st) == 0;
}

/* A chain of `depth` directories under dirfd/name, each with a file and
 * links out of the tree; as root, some levels are closed (mode 0) and the
 * bottom holds a FIFO. */
static void deep_tree(int dirfd, const char *name, int depth, int hostile_modes)
{
    assert_int_equal(mkdirat(dirfd, name, 0700), 0);
    int fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY);
    assert_true(fd >= 0);
    for (int i = 0; i < depth; i++) {
        assert_int_equal(symlinkat(outside, fd, "link-dir"), 0);
        assert_int_equal(symlinkat(canary, fd, "link-file"), 0);
        int f = openat(fd, "file", O_WRONLY | O_CREAT, 0600);
        assert_true(f >= 0);
        close(f);
        assert_int_equal(mkdirat(fd, "d", 0700), 0);
        int next = openat(fd, "d", O_RDONLY | O_DIRECTORY);
        assert_true(next >= 0);
        if (hostile_modes && i % 97 == 0)
            assert_int_equal(fchmod(fd, 0), 0);
        close(fd);
        fd = next;
    }
    assert_int_equal(mkfifoat(fd, "fifo", 0600), 0);
    close(fd);
}

/* 3000 levels (the old walk stopped at 16 and left the tree behind). */
static void test_deep_tree_removed(void **state)
{
    (void)state;
    struct spk_rundir rd;
    assert_int_equal(spk_rundir_init(&rd, runtime, 90, 0, "n1"), 0);
    int top = open(runtime, O_RDONLY | O_DIRECTORY);
    assert_true(top >= 0);
    deep_tree(top, rd.key, 3000, getuid() == 0);
    close(top);
    assert_int_equal(spk_rundir_remove(runtime, rd.key), 0);
    assert_false(exists(rd.step_dir));
    assert_true(exists(canary));
    assert_true(exists(outside));
    /* Nothing was moved out of the step directory either. */
    char p[256];
    snprintf(p, sizeof p, "%s/.cdl-rm.0", runtime);
    assert_false(exists(p));
}

/* The step directory itself replaced by a link, or pipe/ by a link to a
 * directory outside: removal takes the link, reading pipe/ refuses it. */
static void test_links_not_followed(void **state)
{
    (void)state;
    struct spk_rundir rd;
    char p[600];
    assert_int_equal(spk_rundir_init(&rd, runtime, 91, 0, "n1"), 0);
    assert_int_equal(symlink(outside, rd.step_dir), 0);
    assert_int_equal(spk_rundir_open_sub(&rd, "pipe"), -1);
    assert_int_equal(spk_rundir_remove(runtime, rd.key), 0);
    assert_false(exists(rd.step_dir));
    assert_true(exists(canary));

    assert_int_equal(mkdir(rd.step_dir, 0700), 0);
    assert_int_equal(symlink(outside, rd.pipe_dir), 0);
    assert_int_equal(spk_rundir_open_sub(&rd, "pipe"), -1);
    assert_non_null(strstr(spk_last_error(), "pipe"));
    assert_int_equal(unlink(rd.pipe_dir), 0);
    assert_int_equal(mkdir(rd.pipe_dir, 0700), 0);
    int fd = spk_rundir_open_sub(&rd, "pipe");
    assert_true(fd >= 0);
    close(fd);
    snprintf(p, sizeof p, "%s/sub", rd.pipe_dir);
    assert_int_equal(symlink(tmp, p), 0);
    assert_int_equal(spk_rundir_remove(runtime, rd.key), 0);
    assert_false(exists(rd.step_dir));
    assert_true(exists(canary));
}

/* A mount point in the step directory (a user's FUSE mount; here a bind
 * mount of a directory outside, in a mount namespace of a child's own) is
 * not entered: what it shows is not the step's to remove. The walk used to
 * empty it. Needs root (CAP_SYS_ADMIN); skipped otherwise. */
static void test_mount_not_crossed(void **state)
{
    (void)state;
    struct spk_rundir rd;
    char sub[600];
    assert_int_equal(spk_rundir_init(&rd, runtime, 93, 0, "n1"), 0);
    assert_int_equal(mkdir(rd.step_dir, 0700), 0);
    snprintf(sub, sizeof sub, "%s/mnt", rd.step_dir);
    assert_int_equal(mkdir(sub, 0700), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        if (unshare(CLONE_NEWNS) != 0 ||
            mount("none", "/", "none", MS_REC | MS_PRIVATE, NULL) != 0 ||
            mount(outside, sub, "none", MS_BIND, NULL) != 0)
            _exit(77);
        int rc = spk_rundir_remove(runtime, rd.key);
        int named = strstr(spk_last_error(), "mount point") != NULL;
        int kept = exists(canary);
        umount2(sub, MNT_DETACH);
        _exit(rc == -1 && named && kept ? 0 : 1);
    }
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    if (WEXITSTATUS(status) == 77) {
        printf("skipped: no mount namespace here (needs root)\n");
    } else {
        assert_int_equal(WEXITSTATUS(status), 0);
    }
    assert_true(exists(canary));
    /* Unmounted, it goes. */
    assert_int_equal(spk_rundir_remove(runtime, rd.key), 0);
    assert_false(exists(rd.step_dir));
}

/* Reads what is queued on the inotify fd (non-blocking); 1 when one of the
 * events is an open or a read. */
static int opened(int ino)
{
    char buf[4096] __attribute__((aligned(8)));
    int seen = 0;
    ssize_t k;
    while ((k = read(ino, buf, sizeof buf)) > 0)
        for (char *p = buf; p < buf + k;) {
            const struct inotify_event *ev = (const struct inotify_event *)p;
            if (ev->mask & (IN_OPEN | IN_ACCESS))
                seen = 1;
            p += sizeof *ev + ev->len;
        }
    return seen;
}

static int count_dirs(const char *key, uid_t owner, gid_t group, void *arg);

/* Child of test_mount_not_asked, in a mount namespace of its own: `outside`
 * (and a file of it) mounted on the step directory's mnt/ and pid file, then
 * on the step directory itself. Exits 0 when every refusal happened and
 * nothing was ever opened or read on the mounted side, 77 without mount
 * namespaces, else the number of the first check that failed. */
static int mount_child(const struct spk_rundir *rd)
{
    char sub[600], file[600];
    snprintf(sub, sizeof sub, "%s/mnt", rd->step_dir);
    snprintf(file, sizeof file, "%s/x.pid", rd->pipe_dir);
    if (unshare(CLONE_NEWNS) != 0 || mount("none", "/", "none", MS_REC | MS_PRIVATE, NULL) != 0 ||
        mount(outside, sub, "none", MS_BIND, NULL) != 0 ||
        mount(canary, file, "none", MS_BIND, NULL) != 0)
        return 77;
    /* The watches are on the inodes, whichever mount reaches them. */
    int ino = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
    if (ino < 0 || inotify_add_watch(ino, outside, IN_OPEN | IN_ACCESS) < 0 ||
        inotify_add_watch(ino, canary, IN_OPEN | IN_ACCESS) < 0)
        return 2;
    /* A mount point inside the step directory. */
    if (spk_rundir_remove(runtime, rd->key) != -1 || !strstr(spk_last_error(), "mount point"))
        return 3;
    if (opened(ino))
        return 4;
    /* A file the user mounted something on (the MPS pid file, say). */
    int pipe = spk_rundir_open_sub(rd, "pipe");
    if (pipe < 0)
        return 5;
    errno = 0;
    if (spk_open_beneath(pipe, "x.pid", 0) != -1 || errno != EXDEV)
        return 6;
    close(pipe);
    if (opened(ino))
        return 7;
    /* The step directory itself a mount point: not removed, not read, not
     * handed to the epilog's sweep. */
    if (umount2(sub, MNT_DETACH) != 0 || umount2(file, MNT_DETACH) != 0 ||
        mount(outside, rd->step_dir, "none", MS_BIND, NULL) != 0)
        return 8;
    if (spk_rundir_remove(runtime, rd->key) != -1 || !strstr(spk_last_error(), "mount point"))
        return 9;
    if (spk_rundir_open_sub(rd, "pipe") != -1 || !strstr(spk_last_error(), "mount point"))
        return 10;
    int calls = 0;
    if (spk_rundir_each_of_job(runtime, 94, count_dirs, &calls) != 1 || calls != 0)
        return 11;
    if (opened(ino))
        return 12;
    umount2(rd->step_dir, MNT_DETACH);
    return exists(canary) ? 0 : 13;
}

/* A mount point in (or on) the step directory, such as the job user's FUSE
 * mount, whose daemon may never answer: root neither enters it nor asks its
 * file system anything. Here a bind mount of a directory outside (which
 * inotify watches for opens and reads) stands in for it. The removal, the
 * reading of pipe/ and the pid file used to open the mount's root before
 * comparing mounts: a FUSE daemon that does not answer that open holds
 * slurmstepd or the epilog for ever. Needs root (CAP_SYS_ADMIN); skipped
 * otherwise. */
static void test_mount_not_asked(void **state)
{
    (void)state;
    struct spk_rundir rd;
    char sub[600], file[600];
    assert_int_equal(spk_rundir_init(&rd, runtime, 94, 0, "n1"), 0);
    assert_int_equal(mkdir(rd.step_dir, 0700), 0);
    assert_int_equal(mkdir(rd.pipe_dir, 0700), 0);
    snprintf(sub, sizeof sub, "%s/mnt", rd.step_dir);
    assert_int_equal(mkdir(sub, 0700), 0);
    snprintf(file, sizeof file, "%s/x.pid", rd.pipe_dir);
    int f = open(file, O_WRONLY | O_CREAT, 0600);
    assert_true(f >= 0);
    close(f);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0)
        _exit(mount_child(&rd));
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    if (WEXITSTATUS(status) == 77)
        printf("skipped: no mount namespace here (needs root)\n");
    else
        assert_int_equal(WEXITSTATUS(status), 0);
    assert_true(exists(canary));
    assert_int_equal(spk_rundir_remove(runtime, rd.key), 0);
    assert_false(exists(rd.step_dir));
}

/* What each stage of test_fuse_not_waited_for checks, in a child the FUSE
 * mounts can stall (fuse_stall_run): 0 when root's code refused them
 * without waiting, else the number of the check that failed. */
struct fuse_case {
    struct spk_rundir rd;
    int stage;
};

static int fuse_stage(void *arg)
{
    const struct fuse_case *c = arg;
    if (c->stage == 1) {
        /* Mounts in the step directory: mnt/ and the MPS pid file. */
        if (spk_rundir_remove(runtime, c->rd.key) != -1 ||
            !strstr(spk_last_error(), "mount point"))
            return 1;
        int pipe = spk_rundir_open_sub(&c->rd, "pipe");
        if (pipe < 0)
            return 2;
        errno = 0;
        if (spk_open_beneath(pipe, "nvidia-cuda-mps-control.pid", 0) != -1 || errno != EXDEV)
            return 3;
        close(pipe);
        return 0;
    }
    /* A mount on the step directory itself. */
    int calls = 0;
    if (spk_rundir_remove(runtime, c->rd.key) != -1 || !strstr(spk_last_error(), "mount point"))
        return 4;
    if (spk_rundir_open_sub(&c->rd, "pipe") != -1 || !strstr(spk_last_error(), "mount point"))
        return 5;
    if (spk_rundir_each_of_job(runtime, 95, count_dirs, &calls) != 1 || calls != 0)
        return 6;
    return 0;
}

/* In a mount namespace of its own: 77 without FUSE, else what the stages
 * returned (100 + stage when one hung). */
static int fuse_child(struct fuse_case *c)
{
    struct fuse_stall s = {.n = 0};
    char mnt[600], pid[600];
    snprintf(mnt, sizeof mnt, "%s/mnt", c->rd.step_dir);
    snprintf(pid, sizeof pid, "%s/nvidia-cuda-mps-control.pid", c->rd.pipe_dir);
    if (fuse_stall_ns() != 0 || fuse_stall_mount(&s, mnt, 1, 65534) != 0 ||
        fuse_stall_mount(&s, pid, 0, 65534) != 0)
        return 77;
    for (c->stage = 1; c->stage <= 2; c->stage++) {
        if (c->stage == 2 && fuse_stall_mount(&s, c->rd.step_dir, 1, 65534) != 0)
            return 7;
        int rc = fuse_stall_run(&s, fuse_stage, c, 20);
        if (rc != 0)
            return rc == -1 ? 100 + c->stage : rc;
    }
    return 0;
}

/* A FUSE file system of the job user's (user_allow_other) in or on the
 * step directory whose daemon never answers: the removal (step end,
 * epilog), reading pipe/ and the pid file, and the epilog's sweep return
 * with an error naming the mount point instead of waiting for it for ever.
 * They used to open the mount's root (or the pid file) before comparing
 * mounts, and the epilog's sweep stat'ed the step directory: a request
 * the daemon never answers. Needs root and FUSE; skipped otherwise. */
static void test_fuse_not_waited_for(void **state)
{
    (void)state;
    struct fuse_case c;
    char p[600];
    memset(&c, 0, sizeof c);
    assert_int_equal(spk_rundir_init(&c.rd, runtime, 95, 0, "n1"), 0);
    assert_int_equal(mkdir(c.rd.step_dir, 0700), 0);
    assert_int_equal(mkdir(c.rd.pipe_dir, 0700), 0);
    snprintf(p, sizeof p, "%s/mnt", c.rd.step_dir);
    assert_int_equal(mkdir(p, 0700), 0);
    snprintf(p, sizeof p, "%s/nvidia-cuda-mps-control.pid", c.rd.pipe_dir);
    int f = open(p, O_WRONLY | O_CREAT, 0600);
    assert_true(f >= 0);
    close(f);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0)
        _exit(fuse_child(&c));
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    if (WEXITSTATUS(status) == 77)
        printf("skipped: no FUSE mount possible here (needs root and /dev/fuse)\n");
    else if (WEXITSTATUS(status) > 100)
        fail_msg("stage %d waited on the FUSE mount (its connection was aborted after 20 s)",
                 WEXITSTATUS(status) - 100);
    else
        assert_int_equal(WEXITSTATUS(status), 0);
    /* The mounts went with the child's namespace; the tree goes now. */
    assert_int_equal(spk_rundir_remove(runtime, c.rd.key), 0);
    assert_false(exists(c.rd.step_dir));
}

/* spk_open_beneath: a link is not followed, a directory or file of the
 * wrong type is refused, the right one opened. */
static void test_open_beneath(void **state)
{
    (void)state;
    char d[256];
    snprintf(d, sizeof d, "%s/beneath", tmp);
    assert_int_equal(mkdir(d, 0700), 0);
    int dfd = open(d, O_RDONLY | O_DIRECTORY);
    assert_true(dfd >= 0);
    assert_int_equal(mkdirat(dfd, "dir", 0700), 0);
    int f = openat(dfd, "file", O_WRONLY | O_CREAT, 0600);
    assert_true(f >= 0);
    assert_int_equal(write(f, "42\n", 3), 3);
    close(f);
    assert_int_equal(symlinkat(canary, dfd, "link"), 0);
    assert_int_equal(symlinkat(outside, dfd, "dlink"), 0);
    errno = 0;
    assert_int_equal(spk_open_beneath(dfd, "link", 0), -1);
    assert_int_equal(errno, ELOOP);
    assert_int_equal(spk_open_beneath(dfd, "dlink", 1), -1);
    assert_int_equal(errno, ELOOP);
    assert_int_equal(spk_open_beneath(dfd, "dir", 0), -1);
    assert_int_equal(errno, EISDIR);
    assert_int_equal(spk_open_beneath(dfd, "file", 1), -1);
    assert_int_equal(errno, ENOTDIR);
    assert_int_equal(spk_open_beneath(dfd, "absent", 1), -1);
    assert_int_equal(errno, ENOENT);
    int fd = spk_open_beneath(dfd, "file", 0);
    assert_true(fd >= 0);
    char buf[8] = "";
    assert_int_equal(read(fd, buf, sizeof buf), 3);
    assert_memory_equal(buf, "42\n", 3);
    close(fd);
    fd = spk_open_beneath(dfd, "dir", 1);
    assert_true(fd >= 0);
    assert_int_equal(mkdirat(fd, "inside", 0700), 0);   /* the directory itself */
    close(fd);
    close(dfd);
}

/* Every parent of runtime_dir: root's, not writable by others unless
 * sticky. */
static void test_parents_checked(void **state)
{
    (void)state;
    if (getuid() != 0)
        skip();
    char dir[256], rt[300];
    /* Group-writable parent, no sticky bit: refused, the parent named. */
    snprintf(dir, sizeof dir, "%s/group-w", tmp);
    assert_int_equal(mkdir(dir, 0775), 0);
    assert_int_equal(chmod(dir, 0775), 0);
    snprintf(rt, sizeof rt, "%s/cdl", dir);
    assert_int_equal(spk_rundir_check_root(rt), -1);
    assert_non_null(strstr(spk_last_error(), dir));
    assert_non_null(strstr(spk_last_error(), "writable by group"));
    assert_false(exists(rt));   /* nothing created under it */
    /* A parent owned by a user, two levels up. */
    snprintf(dir, sizeof dir, "%s/users", tmp);
    assert_int_equal(mkdir(dir, 0755), 0);
    assert_int_equal(chown(dir, 65534, 65534), 0);
    snprintf(rt, sizeof rt, "%s/users/x", tmp);
    assert_int_equal(mkdir(rt, 0755), 0);
    snprintf(rt, sizeof rt, "%s/users/x/cdl", tmp);
    assert_int_equal(spk_rundir_check_root(rt), -1);
    assert_non_null(strstr(spk_last_error(), "not owned by root"));
    assert_non_null(strstr(spk_last_error(), dir));
    /* A link in the parents resolves to a checked path. */
    char link[256];
    snprintf(link, sizeof link, "%s/via-link", tmp);
    assert_int_equal(symlink(dir, link), 0);
    snprintf(rt, sizeof rt, "%s/via-link/x/cdl", tmp);
    assert_int_equal(spk_rundir_check_root(rt), -1);
    assert_non_null(strstr(spk_last_error(), "not owned by root"));
    /* Sticky and world-writable (like /tmp) above a root directory: fine. */
    snprintf(dir, sizeof dir, "%s/sticky", tmp);
    assert_int_equal(mkdir(dir, 0755), 0);
    assert_int_equal(chmod(dir, 01777), 0);
    snprintf(rt, sizeof rt, "%s/cdl", dir);
    assert_int_equal(spk_rundir_check_root(rt), 0);
}

/* runtime_dir=/tmp (or another shared directory): refused, and the hint
 * says to choose a directory of its own, never to chmod it. */
static void test_shared_dir_hint(void **state)
{
    (void)state;
    if (getuid() != 0)
        skip();
    assert_int_equal(spk_rundir_check_root("/tmp"), -1);
    assert_null(strstr(spk_last_error(), "chmod"));
    assert_non_null(strstr(spk_last_error(), "runtime_dir=/run/cdl"));
    char dir[256];
    snprintf(dir, sizeof dir, "%s/shared", tmp);
    assert_int_equal(mkdir(dir, 0755), 0);
    assert_int_equal(chmod(dir, 01777), 0);
    assert_int_equal(spk_rundir_check_root(dir), -1);
    assert_null(strstr(spk_last_error(), "chmod"));
}

static int count_dirs(const char *key, uid_t owner, gid_t group, void *arg)
{
    (void)key, (void)owner, (void)group;
    ++*(int *)arg;
    return 0;
}

/* The epilog's sweep (spk_rundir_each_of_job) makes the steps' checks
 * first: in a runtime_dir everyone may write to (runtime_dir=/tmp by
 * mistake) a "<jobid>.*" directory could be anybody's, so none is handed
 * over; in a proper one they are. */
static void test_sweep_checks_runtime_dir(void **state)
{
    (void)state;
    if (getuid() != 0)
        skip();
    char dir[256], sub[300];
    int calls = 0;
    snprintf(dir, sizeof dir, "%s/sweep-shared", tmp);
    assert_int_equal(mkdir(dir, 0755), 0);
    assert_int_equal(chmod(dir, 01777), 0);
    snprintf(sub, sizeof sub, "%s/81.0.n1", dir);
    assert_int_equal(mkdir(sub, 0700), 0);
    assert_int_equal(spk_rundir_each_of_job(dir, 81, count_dirs, &calls), -1);
    assert_int_equal(calls, 0);
    assert_non_null(strstr(spk_last_error(), "writable by everyone"));
    assert_int_equal(chmod(dir, 0755), 0);
    assert_int_equal(spk_rundir_each_of_job(dir, 81, count_dirs, &calls), 1);
    assert_int_equal(calls, 1);
    snprintf(sub, sizeof sub, "%s/absent", tmp);
    assert_int_equal(spk_rundir_each_of_job(sub, 81, count_dirs, &calls), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_deep_tree_removed),
        cmocka_unit_test(test_links_not_followed),
        cmocka_unit_test(test_mount_not_crossed),
        cmocka_unit_test(test_mount_not_asked),
        cmocka_unit_test(test_fuse_not_waited_for),
        cmocka_unit_test(test_open_beneath),
        cmocka_unit_test(test_parents_checked),
        cmocka_unit_test(test_shared_dir_hint),
        cmocka_unit_test(test_sweep_checks_runtime_dir),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
