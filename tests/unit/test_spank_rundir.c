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
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "testutil.h"

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
        cmocka_unit_test(test_parents_checked),
        cmocka_unit_test(test_shared_dir_hint),
        cmocka_unit_test(test_sweep_checks_runtime_dir),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
