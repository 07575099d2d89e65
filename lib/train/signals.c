/* SIGUSR1 (Slurm's --signal=USR1@T before the time limit) and SIGTERM
 * (scancel, preemption) ask the harness to finish the current step, write a
 * checkpoint and exit with CDL_EXIT_REQUEUE.
 *
 * Handlers are process-wide, runs are not: a program may run cdl_train_run
 * in several threads at once (two surrogate models of one simulation).
 * The first run in installs the handler and keeps the program's; the last
 * one out gives them back. Restoring at every run's end instead left
 * libcdl's handler installed for good after two overlapping runs (the
 * second saved the first's handler as "the program's"), and the process
 * then ignored SIGTERM. A signal asks every running run to stop.
 *
 * fork() copies the count but not the runs (their threads are not in the
 * child): a child counted them as still running, so its own run, the
 * "last one out" no more, left libcdl's handler installed, and the lock
 * could be copied held. The child gives the program's handlers back and
 * starts with no runs, as a process that never ran one. */
#include <pthread.h>
#include <signal.h>
#include <string.h>

#include <cdl/train.h>

#include "signals.h"

static volatile sig_atomic_t stop_requested;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct sigaction old_usr1, old_term;   /* the program's, under lock */
static int runs;                              /* runs inside install..restore */
static int early;                             /* cdl_train_signals_early's, no run yet */

static void on_signal(int sig)
{
    (void)sig;
    stop_requested = 1;
}

/* Under lock, with no run in: the handler in, the program's kept. */
static void take_signals(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    stop_requested = 0;
    sigaction(SIGUSR1, &sa, &old_usr1);
    sigaction(SIGTERM, &sa, &old_term);
}

static void before_fork(void)
{
    pthread_mutex_lock(&lock);
}

static void after_fork_parent(void)
{
    pthread_mutex_unlock(&lock);
}

/* Only the forking thread exists here; sigaction is async-signal-safe. */
static void after_fork_child(void)
{
    if (runs > 0) {
        sigaction(SIGUSR1, &old_usr1, NULL);
        sigaction(SIGTERM, &old_term, NULL);
        runs = 0;
    }
    stop_requested = 0;
    pthread_mutex_init(&lock, NULL);
}

static pthread_once_t at_fork_once = PTHREAD_ONCE_INIT;

static void at_fork(void)
{
    pthread_atfork(before_fork, after_fork_parent, after_fork_child);
}

/* A job signalled as it starts (Slurm's --signal when the job has less
 * time left than the signal's lead, scancel at once) would otherwise kill
 * the program, or go unseen, before cdl_train_run is reached: the handler
 * goes in now, and what it records stops the next run at its set-up. */
void cdl_train_signals_early(void)
{
    pthread_once(&at_fork_once, at_fork);
    pthread_mutex_lock(&lock);
    if (runs == 0 && !early) {
        take_signals();
        early = 1;
    }
    pthread_mutex_unlock(&lock);
}

void train_signals_install(void)
{
    pthread_once(&at_fork_once, at_fork);   /* before the first handler: nothing to undo earlier */
    pthread_mutex_lock(&lock);
    if (runs++ == 0) {
        if (early)
            early = 0;   /* in since cdl_train_signals_early: a signal since then stands */
        else
            take_signals();
    }
    pthread_mutex_unlock(&lock);
}

void train_signals_restore(void)
{
    pthread_mutex_lock(&lock);
    if (runs > 0 && --runs == 0) {
        sigaction(SIGUSR1, &old_usr1, NULL);
        sigaction(SIGTERM, &old_term, NULL);
    }
    pthread_mutex_unlock(&lock);
}

int train_stop_requested(void)
{
    return stop_requested != 0;
}
