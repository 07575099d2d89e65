/* A persistent thread pool for the CPU backend.
 *
 * The calling thread is worker 0; workers 1..n-1 wait between calls (see
 * pool.c). A call splits [0,n) into `chunks` contiguous chunks whose bounds
 * depend only on n and the chunk count, and every chunk runs exactly once;
 * threads claim chunks in order as they become free, so a thread that the
 * OS has descheduled does not hold back the others. Kernels keep anything
 * that is summed (gradient partials) per chunk, never per thread, and reduce
 * the chunks in order: results are bitwise reproducible for a given thread
 * count however the chunks were scheduled. Scratch buffers are per thread
 * (tid). No allocation happens per call. One caller at a time (the backend
 * is not re-entrant); fn must not call back into the pool.
 */
#ifndef KERNELS_CPU_POOL_H
#define KERNELS_CPU_POOL_H

#include <stddef.h>

typedef struct pool pool;

/* fn handles items [begin,end), the chunk number `chunk`, on worker tid
 * (0 <= tid < pool_threads()). */
typedef void (*pool_fn)(void *ctx, size_t begin, size_t end, int chunk, int tid);

/* Chunks per thread for dynamic balancing. */
#define POOL_CHUNKS_PER_THREAD 4

pool *pool_create(int nthreads);   /* NULL + cdl_error on failure */
void pool_destroy(pool *p);
int pool_threads(const pool *p);

/* How many chunks pool_for() makes of n items with at least `grain` items
 * per chunk on `threads` threads: 1 on one thread or when n <= grain, at
 * most POOL_CHUNKS_PER_THREAD per thread. */
static inline int pool_chunks_for(int threads, size_t n, size_t grain)
{
    if (threads <= 1 || n <= grain)
        return 1;
    size_t want = grain ? (n + grain - 1) / grain : n;
    size_t most = (size_t)threads * POOL_CHUNKS_PER_THREAD;
    return (int)(want < most ? want : most);
}

int pool_chunks(const pool *p, size_t n, size_t grain);   /* on p's threads */

/* Runs fn over [0,n) split into `chunks` chunks (1 <= chunks <= n; n == 0
 * runs nothing). One chunk runs inline on the caller. */
void pool_run(pool *p, size_t n, int chunks, pool_fn fn, void *ctx);

/* pool_run with pool_chunks(p, n, grain) chunks. */
void pool_for(pool *p, size_t n, size_t grain, pool_fn fn, void *ctx);

/* Chunk i of `chunks` over [0,n). */
static inline void pool_chunk(size_t n, int i, int chunks, size_t *begin, size_t *end)
{
    *begin = n * (size_t)i / (size_t)chunks;
    *end = n * (size_t)(i + 1) / (size_t)chunks;
}

#endif
