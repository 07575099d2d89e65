/* SIGUSR1 (Slurm's --signal=USR1@T before the time limit) and SIGTERM
 * (scancel, preemption) ask the harness to finish the current step, write a
 * checkpoint and exit with CDL_EXIT_REQUEUE. */
#include <signal.h>
#include <string.h>

#include "signals.h"

static volatile sig_atomic_t stop_requested;
static struct sigaction old_usr1, old_term;
static int installed;

static void on_signal(int sig)
{
    (void)sig;
    stop_requested = 1;
}

void train_signals_install(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    stop_requested = 0;
    sigaction(SIGUSR1, &sa, &old_usr1);
    sigaction(SIGTERM, &sa, &old_term);
    installed = 1;
}

void train_signals_restore(void)
{
    if (!installed)
        return;
    sigaction(SIGUSR1, &old_usr1, NULL);
    sigaction(SIGTERM, &old_term, NULL);
    installed = 0;
}

int train_stop_requested(void)
{
    return stop_requested != 0;
}
