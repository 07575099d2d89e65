/* A test double for a signal that comes during a long set-up (scancel while
 * the dataset is staged or decoded): preloaded into cdl-train, it raises
 * SIGTERM (or the signal numbered CDL_TEST_SIGNAL) in the process the first
 * time it opens a file or shared-memory object whose path holds the text in
 * CDL_TEST_SIGNAL_ON. The signal lands at a known point of the work, with
 * no timing involved. */
#define _GNU_SOURCE 1
#include <dlfcn.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/types.h>

static void maybe_raise(const char *path)
{
    static int raised;
    const char *mark = getenv("CDL_TEST_SIGNAL_ON");
    if (!raised && mark && *mark && path && strstr(path, mark)) {
        raised = 1;
        const char *sig = getenv("CDL_TEST_SIGNAL");
        raise(sig && atoi(sig) > 0 ? atoi(sig) : SIGTERM);
    }
}

/* open and open64 take a mode only with O_CREAT or O_TMPFILE. */
#define FORWARD(name)                                                            \
    int name(const char *path, int flags, ...)                                   \
    {                                                                            \
        mode_t mode = 0;                                                         \
        if (flags & (O_CREAT | O_TMPFILE)) {                                     \
            va_list ap;                                                          \
            va_start(ap, flags);                                                 \
            mode = (mode_t)va_arg(ap, int);                                      \
            va_end(ap);                                                          \
        }                                                                        \
        int (*real)(const char *, int, ...) =                                    \
            (int (*)(const char *, int, ...))dlsym(RTLD_NEXT, #name);            \
        int fd = real ? real(path, flags, mode) : -1;                            \
        maybe_raise(path);                                                       \
        return fd;                                                               \
    }
FORWARD(open)
FORWARD(open64)

/* A rank opening the shared memory of its node's collectives (it is not
 * given to open(): glibc opens /dev/shm itself). */
int shm_open(const char *name, int flags, mode_t mode)
{
    int (*real)(const char *, int, mode_t) =
        (int (*)(const char *, int, mode_t))dlsym(RTLD_NEXT, "shm_open");
    int fd = real ? real(name, flags, mode) : -1;
    maybe_raise(name);
    return fd;
}
