/* The persistent thread pool behind every CPU op (see pool.h). */
#include <pthread.h>
#include <string.h>

#include <cdl/cdl.h>

#include "kernels/cpu/pool.h"

struct pool {
    int nthreads;
    pthread_t *tids;              /* workers 1..nthreads-1 */
    pthread_mutex_t mu;
    pthread_cond_t wake;          /* a new task (gen changed) or stop */
    pthread_cond_t done;          /* pending reached 0 */
    unsigned long gen;            /* task generation, bumped per call */
    int pending;                  /* workers still running this generation */
    int stop;
    /* The current task: [0,n) split over `active` threads. */
    pool_fn fn;
    void *ctx;
    size_t n;
    int active;
};

typedef struct worker_arg {
    pool *p;
    int tid;
} worker_arg;

static void run_chunk(pool_fn fn, void *ctx, size_t n, int active, int tid)
{
    if (tid >= active)
        return;
    size_t b, e;
    pool_chunk(n, tid, active, &b, &e);
    if (b < e)
        fn(ctx, b, e, tid);
}

static void *worker_main(void *arg)
{
    pool *p = ((worker_arg *)arg)->p;
    int tid = ((worker_arg *)arg)->tid;
    unsigned long seen = 0;
    for (;;) {
        pthread_mutex_lock(&p->mu);
        while (p->gen == seen && !p->stop)
            pthread_cond_wait(&p->wake, &p->mu);
        if (p->stop) {
            pthread_mutex_unlock(&p->mu);
            return NULL;
        }
        seen = p->gen;
        pool_fn fn = p->fn;
        void *ctx = p->ctx;
        size_t n = p->n;
        int active = p->active;
        pthread_mutex_unlock(&p->mu);

        run_chunk(fn, ctx, n, active, tid);

        pthread_mutex_lock(&p->mu);
        if (--p->pending == 0)
            pthread_cond_signal(&p->done);
        pthread_mutex_unlock(&p->mu);
    }
}

pool *pool_create(int nthreads)
{
    if (nthreads < 1) {
        cdl_error("thread pool needs at least 1 thread, got %d", nthreads);
        return NULL;
    }
    pool *p = cdl_calloc(1, sizeof *p);
    if (!p)
        return NULL;
    p->nthreads = nthreads;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->wake, NULL);
    pthread_cond_init(&p->done, NULL);
    if (nthreads == 1)
        return p;
    /* Worker arguments live right after the thread ids (one allocation). */
    size_t tids_bytes = (size_t)(nthreads - 1) * sizeof(pthread_t);
    tids_bytes = (tids_bytes + 15) & ~(size_t)15;
    p->tids = cdl_malloc(tids_bytes + (size_t)(nthreads - 1) * sizeof(worker_arg));
    if (!p->tids) {
        pool_destroy(p);
        return NULL;
    }
    worker_arg *args = (worker_arg *)((char *)p->tids + tids_bytes);
    for (int t = 1; t < nthreads; t++) {
        args[t - 1].p = p;
        args[t - 1].tid = t;
        int rc = pthread_create(&p->tids[t - 1], NULL, worker_main, &args[t - 1]);
        if (rc != 0) {
            cdl_error("cannot start CPU worker thread %d of %d: %s; lower --threads",
                      t, nthreads, strerror(rc));
            p->nthreads = t;   /* join only the ones that started */
            pool_destroy(p);
            return NULL;
        }
    }
    return p;
}

void pool_destroy(pool *p)
{
    if (!p)
        return;
    if (p->tids) {
        pthread_mutex_lock(&p->mu);
        p->stop = 1;
        pthread_cond_broadcast(&p->wake);
        pthread_mutex_unlock(&p->mu);
        for (int t = 1; t < p->nthreads; t++)
            pthread_join(p->tids[t - 1], NULL);
        cdl_free(p->tids);
    }
    pthread_cond_destroy(&p->done);
    pthread_cond_destroy(&p->wake);
    pthread_mutex_destroy(&p->mu);
    cdl_free(p);
}

int pool_threads(const pool *p)
{
    return p->nthreads;
}

static void pool_run(pool *p, size_t n, int active, pool_fn fn, void *ctx)
{
    if (active <= 1 || p->nthreads == 1) {
        if (n)
            fn(ctx, 0, n, 0);
        return;
    }
    pthread_mutex_lock(&p->mu);
    p->fn = fn;
    p->ctx = ctx;
    p->n = n;
    p->active = active;
    p->pending = p->nthreads - 1;
    p->gen++;
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mu);

    run_chunk(fn, ctx, n, active, 0);

    pthread_mutex_lock(&p->mu);
    while (p->pending > 0)
        pthread_cond_wait(&p->done, &p->mu);
    pthread_mutex_unlock(&p->mu);
}

void pool_for(pool *p, size_t n, pool_fn fn, void *ctx)
{
    pool_run(p, n, p->nthreads, fn, ctx);
}

void pool_for_grain(pool *p, size_t n, size_t grain, pool_fn fn, void *ctx)
{
    size_t want = grain ? (n + grain - 1) / grain : n;
    int active = want < (size_t)p->nthreads ? (int)want : p->nthreads;
    pool_run(p, n, active, fn, ctx);
}
