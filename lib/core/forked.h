/* fork() and the threads libcdl starts.
 *
 * fork() copies only the thread that calls it: a CPU backend's pool
 * workers and a loader's workers, made before the fork, do not exist in
 * the child. An object that waits for its workers (every op of the pool,
 * cdl_loader_next) would wait there for ever, and joining them in
 * destroy is undefined. Such an object notes fork_count() when it starts
 * its threads; when the count differs, it runs in a child and does the
 * work on the calling thread instead (the same numbers: results never
 * depend on which thread did what).
 */
#ifndef CDL_CORE_FORKED_H
#define CDL_CORE_FORKED_H

/* The number of fork()s between the first call in this process's line and
 * now: 0 in the process that first called it, 1 in its child, ... The
 * first call installs the pthread_atfork handler that counts them, so an
 * object must call it when it starts its threads, before any fork. */
unsigned long fork_count(void);

#endif
