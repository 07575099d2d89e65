/* A library the hostile-input test puts into the job's LD_PRELOAD: when any
 * process loads it, it leaves a mark "uid euid exe" in the folder
 * evil-marks/ next to itself. The test then checks that no process with
 * root in its uids ever loaded it (the user's own tasks may). */
#define _GNU_SOURCE 1
#include <dlfcn.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

void evil_preload_mark(void) __attribute__((constructor));

void evil_preload_mark(void)
{
    Dl_info info;
    char dir[PATH_MAX], path[PATH_MAX + 64], exe[PATH_MAX];
    if (!dladdr((void *)evil_preload_mark, &info) || !info.dli_fname)
        return;
    snprintf(dir, sizeof dir, "%s", info.dli_fname);
    char *slash = strrchr(dir, '/');
    if (!slash)
        return;
    *slash = '\0';
    snprintf(path, sizeof path, "%s/evil-marks/mark.%d", dir, (int)getpid());
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    exe[n > 0 ? n : 0] = '\0';
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return;
    dprintf(fd, "%u %u %s\n", (unsigned)getuid(), (unsigned)geteuid(), exe);
    close(fd);
}
