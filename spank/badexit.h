/* Whether a task's end must stop the rest of its --cdl-ddp step. Pure:
 * task_exit passes the task's wait status in.
 *
 * A data-parallel step cannot go on without any of its ranks, but Slurm
 * leaves the others running unless the step was started with srun
 * --kill-on-bad-exit (or the site set KillOnBadExit): a PyTorch rank 0
 * whose peer died before the rendezvous waits 30 minutes in
 * init_process_group, a cdl-train rank CDL_TIMEOUT. cdlrun stops the
 * others at once; the plugin does the same for its steps. */
#ifndef CDL_SPANK_BADEXIT_H
#define CDL_SPANK_BADEXIT_H

#include <stddef.h>

/* Seconds the other ranks have to end by themselves before the step is
 * killed (cdlrun gives 3 between its SIGTERM and SIGKILL). */
#define SPK_STOP_GRACE_S 3

enum spk_exit_action {
    SPK_EXIT_FINE,      /* 0, or 75 (checkpointed for a requeue): nothing */
    SPK_EXIT_STOP,      /* a failure: stop the step, saying why (in `why`) */
    SPK_EXIT_STOP_QUIET,/* SIGKILL: stop the step without a message. srun
                         * already says "Killed" or "Out Of Memory", and the
                         * ranks the plugin itself stops end this way: a
                         * line for each would hide the one that failed */
    SPK_EXIT_LEAVE,     /* a signal Slurm or the user sends to the whole step
                         * (SIGTERM at the time limit, SIGINT, SIGUSR1, ...):
                         * the other ranks got it too and may still be writing
                         * their checkpoint, so they are left alone */
};

/* status: the task's wait status (S_TASK_EXIT_STATUS). `why` (len bytes)
 * receives "exited with code 3" or "was killed by signal 9 (Killed)". */
enum spk_exit_action spk_exit_action(int status, char *why, size_t len);

#endif
