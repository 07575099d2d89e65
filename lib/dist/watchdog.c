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
    int (*stop)(void);   /* NULL: never */
    int stop_status;
    pthread_t thread;
};

#define STOP_POLL_S 0.1   /* as the bootstrap's waits (store_proto.h) */

/* The end of the next slice of the wait: STOP_POLL_S from now, or until. */
static struct timespec slice_end(const struct timespec *until)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    t.tv_nsec += (long)(STOP_POLL_S * 1e9);
    if (t.tv_nsec >= 1000000000L) {
        t.tv_sec++;
        t.tv_nsec -= 1000000000L;
    }
    if (t.tv_sec > until->tv_sec || (t.tv_sec == until->tv_sec && t.tv_nsec > until->tv_nsec))
        t = *until;
    return t;
}

static int before(const struct timespec *until)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return now.tv_sec < until->tv_sec ||
           (now.tv_sec == until->tv_sec && now.tv_nsec < until->tv_nsec);
}

static void *watch(void *arg)
{
    dist_watchdog *w = arg;
    pthread_mutex_lock(&w->mu);
    int rc = 0, stopped = 0;
    /* In slices when a stop is looked for: the signal's handler only sets
     * a flag, and nothing wakes this thread for it. */
    while (!w->disarmed && rc != ETIMEDOUT && !(stopped = w->stop && w->stop())) {
        struct timespec end = w->stop ? slice_end(&w->until) : w->until;
        rc = pthread_cond_timedwait(&w->cv, &w->mu, &end);
        if (rc == ETIMEDOUT && w->stop && before(&w->until))
            rc = 0;   /* a slice's end, not the wait's */
    }
    int fire = !w->disarmed;
    pthread_mutex_unlock(&w->mu);
    if (fire && stopped) {
        /* Asked to stop (scancel, the time limit) while a peer keeps this
         * rank in a call nothing interrupts: nobody was lost, this rank
         * was told to stop. */
        fprintf(stderr, "cdl: rank %d: error: rank %d was asked to stop while it waited in %s "
                "(a signal: SIGTERM or SIGUSR1); it stopped waiting: exiting with status %d\n",
                w->rank, w->rank, w->what, w->stop_status);
        fflush(NULL);
        _exit(w->stop_status);
    }
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
    return dist_watchdog_arm_stop(what, rank, timeout_s, hint, NULL, 1);
}

dist_watchdog *dist_watchdog_arm_stop(const char *what, int rank, double timeout_s,
                                      const char *hint, int (*stop)(void), int stop_status)
{
    dist_watchdog *w = cdl_calloc(1, sizeof *w);
    if (!w)
        return NULL;
    w->stop = stop;
    w->stop_status = stop_status;
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
