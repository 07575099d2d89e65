/* The watchdog of waits without a timeout (watchdog.h): one thread per
 * armed wait, sleeping on a condition variable until disarmed or the
 * deadline (CLOCK_MONOTONIC). */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cdl/cdl.h>

#include "watchdog.h"

struct dist_watchdog {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int disarmed;
    struct timespec until;
    double timeout;
    int rank;
    char what[96], hint[512];
    pthread_t thread;
};

static void *watch(void *arg)
{
    dist_watchdog *w = arg;
    pthread_mutex_lock(&w->mu);
    int rc = 0;
    while (!w->disarmed && rc != ETIMEDOUT)
        rc = pthread_cond_timedwait(&w->cv, &w->mu, &w->until);
    int fire = !w->disarmed;
    pthread_mutex_unlock(&w->mu);
    if (fire) {
        /* The waiting thread is inside a library call that nothing else
         * interrupts: say so and end the process (no atexit handler: MPI's
         * would wait again). */
        fprintf(stderr, "cdl: rank %d: error: %s did not return within %.0f s (CDL_TIMEOUT): "
                "%s; exiting with status %d (a lost peer: the requeue templates resume "
                "the run)\n", w->rank, w->what, w->timeout, w->hint, CDL_EXIT_PEER_LOST);
        fflush(NULL);
        _exit(CDL_EXIT_PEER_LOST);
    }
    return NULL;
}

dist_watchdog *dist_watchdog_arm(const char *what, int rank, double timeout_s,
                                 const char *hint)
{
    dist_watchdog *w = cdl_calloc(1, sizeof *w);
    if (!w)
        return NULL;
    snprintf(w->what, sizeof w->what, "%s", what);
    snprintf(w->hint, sizeof w->hint, "%s", hint);
    w->rank = rank;
    w->timeout = timeout_s;
    clock_gettime(CLOCK_MONOTONIC, &w->until);
    double end = (double)w->until.tv_sec + w->until.tv_nsec * 1e-9 + timeout_s;
    w->until.tv_sec = (time_t)end;
    w->until.tv_nsec = (long)((end - (double)w->until.tv_sec) * 1e9);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&w->cv, &ca);
    pthread_condattr_destroy(&ca);
    pthread_mutex_init(&w->mu, NULL);
    int e = pthread_create(&w->thread, NULL, watch, w);
    if (e) {
        pthread_cond_destroy(&w->cv);
        pthread_mutex_destroy(&w->mu);
        cdl_free(w);
        cdl_error("rank %d: cannot start the watchdog thread of %s (%s): it would wait "
                  "without a timeout", rank, what, strerror(e));
        return NULL;
    }
    return w;
}

void dist_watchdog_disarm(dist_watchdog *w)
{
    if (!w)
        return;
    pthread_mutex_lock(&w->mu);
    w->disarmed = 1;
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
    pthread_join(w->thread, NULL);
    pthread_cond_destroy(&w->cv);
    pthread_mutex_destroy(&w->mu);
    cdl_free(w);
}
