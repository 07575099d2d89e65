/* Opening dataset files: regular files only (internal.h). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cdl/cdl.h>

#include "lib/data/internal.h"

const char *data_open_advice(int err, const char *hint, char *buf, size_t len)
{
    if (err == EMFILE)
        return "this process has as many files open as it may (ulimit -n): raise the limit "
               "(ulimit -n 4096 in the job script) or use fewer --workers";
    if (err == ENFILE)
        return "the node's table of open files is full: ask the administrators, or use fewer "
               "--workers";
    /* The advice fits the reason: a missing path is not a permission
     * problem (it said "No such file or directory: check its permissions"). */
    if (err == ENOENT)
        snprintf(buf, len, "the path does not exist: check its spelling, or %s", hint);
    else if (err == ENOTDIR)
        snprintf(buf, len, "a part of the path is a file, not a directory: check the path, or %s",
                 hint);
    else if (err == EACCES || err == EPERM)
        snprintf(buf, len, "check its permissions and those of the directories above it, or %s",
                 hint);
    else
        snprintf(buf, len, "%s", hint);
    return buf;
}

int data_open_regular(const char *path, const char *hint)
{
    /* O_NONBLOCK: opening a FIFO without a writer would wait forever. */
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
        int err = errno;
        char advice[512];
        return cdl_error("cannot open %s: %s: %s", path, strerror(err),
                         data_open_advice(err, hint, advice, sizeof advice));
    }
    struct stat st = {0};
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        int err = errno;
        close(fd);
        return cdl_error("%s is not a regular file (%s): a dataset file must be a plain file; "
                         "%s", path, S_ISFIFO(st.st_mode)  ? "a FIFO"
                                     : S_ISDIR(st.st_mode) ? "a directory"
                                     : err                 ? strerror(err)
                                                           : "a device or socket", hint);
    }
    int flags = fcntl(fd, F_GETFL);
    if (flags < 0 || fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) != 0) {
        int err = errno;
        close(fd);
        return cdl_error("cannot read %s: %s", path, strerror(err));
    }
    return fd;
}

int data_open_size(const char *path, const char *hint, size_t *size)
{
    int fd = data_open_regular(path, hint);
    if (fd < 0)
        return -1;
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int err = errno;
        close(fd);
        return cdl_error("cannot stat %s: %s", path, strerror(err));
    }
    *size = (size_t)st.st_size;
    return fd;
}
