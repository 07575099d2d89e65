/* Waiting for a flock held by another process, never for ever (lockwait.c).
 * A blocking flock waits as long as the holder keeps the lock: another job
 * on the node staging into the same folder, a user's flock(1), a sweep
 * stuck removing a copy on a hung file system. Internal. */
#ifndef CDL_TRAIN_LOCKWAIT_H
#define CDL_TRAIN_LOCKWAIT_H

#include <stddef.h>

/* flock(fd, op) (LOCK_SH or LOCK_EX) on the file path, polled without
 * blocking until timeout_s seconds have passed; beat(ctx), when given, is
 * called between polls (a nonzero return gives up with its error), and a
 * signal of signals.h stops the wait. Returns 0 with the lock, 1 when the
 * file system has no locks (nothing is held), or -1 with an error naming
 * the file, the seconds waited, the holder when /proc/locks tells it
 * (lockwait_holder), and what to do; `what` says what the lock is for. */
int lockwait_flock(int fd, int op, const char *path, const char *what, double timeout_s,
                   int (*beat)(void *ctx), void *ctx);

/* Who holds a flock on the file of fd, from /proc/locks: "process PID
 * (NAME)", more than one joined by ", "; "" when no holder is listed (no
 * /proc, or the lock was let go). */
void lockwait_holder(int fd, char *out, size_t len);

#endif
