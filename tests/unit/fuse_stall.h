/* A FUSE mount whose daemon never answers, for the plugin's tests: what a
 * job user can mount in their step directory or in /dev/shm with
 * user_allow_other. The test holds the /dev/fuse descriptor and never reads
 * it, so every request the kernel sends to the file system (an open, a
 * getattr of expired attributes, a readdir) waits; the caller of a request
 * would hang for ever. Closing the descriptor aborts the connection and
 * ends every wait with ENOTCONN.
 *
 * Needs root and FUSE, in a mount namespace of the caller's own
 * (fuse_stall_ns). Static functions: each test includes it once. */
#ifndef CDL_TEST_FUSE_STALL_H
#define CDL_TEST_FUSE_STALL_H

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#define FUSE_STALL_MAX 4

struct fuse_stall {
    int fd[FUSE_STALL_MAX];
    int n;
};

/* A private mount namespace for this process: 0, or -1 (not root, no
 * namespaces). */
static int fuse_stall_ns(void)
{
    /* The type "none", not NULL: ignored for MS_PRIVATE, and valgrind
     * counts a NULL string argument as an error. */
    if (unshare(CLONE_NEWNS) != 0 || mount("none", "/", "none", MS_REC | MS_PRIVATE, NULL) != 0)
        return -1;
    return 0;
}

/* Mounts a never-answering FUSE file system on path, a directory (is_dir)
 * or a regular file, its root owned by uid. 0, or -1 (no FUSE here). */
static int fuse_stall_mount(struct fuse_stall *s, const char *path, int is_dir, unsigned uid)
{
    char opts[160];
    if (s->n >= FUSE_STALL_MAX)
        return -1;
    int fd = open("/dev/fuse", O_RDWR | O_CLOEXEC);
    if (fd < 0)
        return -1;
    snprintf(opts, sizeof opts, "fd=%d,rootmode=%o,user_id=%u,group_id=0,allow_other", fd,
             is_dir ? 040000u : 0100000u, uid);
    if (mount("cdl-stall", path, "fuse", MS_NOSUID | MS_NODEV, opts) != 0) {
        close(fd);
        return -1;
    }
    s->fd[s->n++] = fd;
    return 0;
}

/* Runs fn(arg) in a child and waits for it at most guard_s seconds (a
 * guard against the hang under test, not a timing). Returns fn's exit
 * status (0..255); -1 when the child hung on a FUSE request: then every
 * connection of s is aborted (the child gets ENOTCONN and ends) and the
 * mounts no longer stall. */
static int fuse_stall_run(struct fuse_stall *s, int (*fn)(void *), void *arg, int guard_s)
{
    /* The child holds the write end of a pipe until it exits: the read
     * end's hang-up is its end (a pidfd would do, but valgrind, which runs
     * these tests, does not know pidfd_open). */
    int alive[2], status = 0, hung = 0;
    if (pipe2(alive, O_CLOEXEC) != 0)
        return -2;
    pid_t pid = fork();
    if (pid < 0) {
        close(alive[0]);
        close(alive[1]);
        return -2;
    }
    if (pid == 0) {
        close(alive[0]);
        for (int i = 0; i < s->n; i++)
            close(s->fd[i]);
        _exit(fn(arg) & 0xff);
    }
    close(alive[1]);
    struct pollfd p = {.fd = alive[0], .events = POLLIN};
    int r;
    while ((r = poll(&p, 1, guard_s * 1000)) < 0 && errno == EINTR)
        ;
    if (r == 0) {
        hung = 1;
        for (int i = 0; i < s->n; i++)
            close(s->fd[i]);
        s->n = 0;
        kill(pid, SIGKILL);   /* a FUSE wait is killable */
    }
    close(alive[0]);
    if (waitpid(pid, &status, 0) != pid)
        return -2;
    if (hung)
        return -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

#endif
