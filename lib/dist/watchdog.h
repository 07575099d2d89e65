/* A watchdog for the few cross-process waits that have no timeout of their
 * own: MPI_Init (its PMIx fence waits for every rank, and Slurm's pmix
 * plugin ignores PMIX_TIMEOUT), MPI_Comm_split, MPI_Finalize. When the
 * call has not returned within the timeout, a thread prints which wait of
 * which rank it was and what to check, then ends the process with
 * CDL_EXIT_PEER_LOST (76), the status of a lost peer that the requeue
 * templates resume after: nothing else can interrupt those calls. */
#ifndef CDL_DIST_WATCHDOG_H
#define CDL_DIST_WATCHDOG_H

typedef struct dist_watchdog dist_watchdog;

/* Arms a watchdog for the wait `what` of `rank` (timeout_s seconds, > 0;
 * hint: what the user should check). NULL with cdl_error when no thread
 * can be started: the caller then must not wait. */
dist_watchdog *dist_watchdog_arm(const char *what, int rank, double timeout_s,
                                 const char *hint);
/* The same, for a wait of the set-up: stop (NULL: never) is looked at
 * every tenth of a second too, and when it returns 1 (the process was
 * asked to stop: cdl_train_run's SIGTERM/SIGUSR1, cdl-eval's) the thread
 * says which wait of which rank it left and ends the process with
 * stop_status (the call cannot be left any other way), instead of waiting
 * on until the timeout and exiting as a lost peer. */
dist_watchdog *dist_watchdog_arm_stop(const char *what, int rank, double timeout_s,
                                      const char *hint, int (*stop)(void), int stop_status);
/* The wait returned: stops and frees the watchdog (NULL: nothing). */
void dist_watchdog_disarm(dist_watchdog *w);

#endif
