/* Small helpers shared by the files of lib/dist: clocks, timeouts, rank
 * lists for error messages, names safe for shm_open. */
#ifndef CDL_DIST_UTIL_H
#define CDL_DIST_UTIL_H

#include <stddef.h>

/* Seconds on CLOCK_MONOTONIC. */
double dist_now(void);

/* The timeout every cross-process wait uses: t if t > 0, else
 * CDL_DEFAULT_TIMEOUT (the edge reads CDL_TIMEOUT into cdl_dist_config).
 * -1 with cdl_error when t is negative or above CDL_MAX_TIMEOUT. */
int dist_resolve_timeout(double t, double *out);

/* Copies in to out keeping [A-Za-z0-9._-] and mapping the rest to '_';
 * out is always terminated (truncated to len-1). */
void dist_sanitize(const char *in, char *out, size_t len);

/* Replaces the terminal control bytes of s (up to its NUL, at most n
 * bytes) with '?': text from another process, shown in the job's log. */
void dist_printable(char *s, size_t n);

/* "ranks 2, 3, 5" or "rank 2" for the n ranks listed, into buf; long lists
 * end in "... (17 in all)". Returns buf. */
const char *dist_rank_list(char *buf, size_t len, const int *ranks, int n);
/* The length of the name at s (at most max bytes, NUL-terminated within
 * them) when it is whole and only letters, digits and bytes of punct, else
 * 0: a host name or build id from another process, safe to print. */
size_t dist_plain_len(const char *s, size_t max, const char *punct);

/* Fills buf with n bytes from the kernel's random source; -1 on failure. */
int dist_random(void *buf, size_t n);

/* Is the process (pid, start time from /proc/pid/stat, 0 = unknown) still
 * alive? Zombies count as dead: a rank killed by a signal is a zombie until
 * its parent reaps it. */
int dist_pid_alive(int pid, unsigned long long starttime);
/* Start time (clock ticks since boot) of pid, 0 if unknown. */
unsigned long long dist_pid_starttime(int pid);

/* Records that a wait of this process failed because a peer rank is gone:
 * its process or node died, its connection (or rank 0's store) dropped
 * without a goodbye, or it did not arrive within the timeout. Not for a
 * peer that stopped with an error of its own (it says why and exits 1
 * itself). Process-wide; cdl_dist_peer_lost reads it, cdl_dist_create
 * clears it. */
void dist_note_peer_lost(void);
void dist_clear_peer_lost(void);

#endif
