/* A persistent thread pool for the CPU backend.
 *
 * The calling thread is worker 0; workers 1..n-1 are parked on a condition
 * variable between calls. pool_for() splits [0,n) into one static chunk per
 * thread, so for a given thread count every index always lands on the same
 * worker: that is what makes per-thread gradient partials deterministic.
 * No allocation happens per call. One caller at a time (the backend is not
 * re-entrant); fn must not call back into the pool.
 */
#ifndef KERNELS_CPU_POOL_H
#define KERNELS_CPU_POOL_H

#include <stddef.h>

typedef struct pool pool;

/* fn handles [begin,end) on worker tid (0 <= tid < nthreads). */
typedef void (*pool_fn)(void *ctx, size_t begin, size_t end, int tid);

pool *pool_create(int nthreads);   /* NULL + cdl_error on failure */
void pool_destroy(pool *p);
int pool_threads(const pool *p);

/* Runs fn over [0,n) split into pool_threads() static chunks. Empty chunks
 * are not called. Returns when every chunk is done. */
void pool_for(pool *p, size_t n, pool_fn fn, void *ctx);

/* Like pool_for, but uses only as many threads as give each at least `grain`
 * items (so tiny ranges run inline on the caller, without a wake-up). */
void pool_for_grain(pool *p, size_t n, size_t grain, pool_fn fn, void *ctx);

/* The static chunk of worker tid out of nthreads over [0,n). */
static inline void pool_chunk(size_t n, int tid, int nthreads, size_t *begin, size_t *end)
{
    *begin = n * (size_t)tid / (size_t)nthreads;
    *end = n * (size_t)(tid + 1) / (size_t)nthreads;
}

#endif
