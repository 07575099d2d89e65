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
 *
 * fn runs with subnormal floats flushed to zero, on every thread (x86: MXCSR
 * FTZ and DAZ; AArch64: FPCR.FZ), as TensorFlow does on its threads and
 * torch.set_flush_denormal(True) asks. A subnormal operand costs an FMA a
 * microcode assist of about a hundred cycles: exact GELU of inputs below
 * about -13 is subnormal, and a run whose activations grew that large
 * (a too-high learning rate) trained ten times slower, nearly all of it in
 * the linear products. Values below 1.2e-38 change nothing a float32 model
 * can tell. The caller's own mode is restored before pool_run returns.
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

/* How a waiting thread waits (pool.c): it spins for spin_ns, handing its
 * core to any other runnable thread (sched_yield) once yield_after_ns have
 * passed, then sleeps until woken. The caller never waits for a worker
 * that has not started on a task: a short op on a loaded machine runs on
 * whoever is there. */
typedef struct pool_wait {
    long long spin_ns;
    long long yield_after_ns;
} pool_wait;

#define POOL_SPIN_NS 100000LL            /* a training step's gaps between ops */
#define POOL_YIELD_AFTER_NS 10000LL
#define POOL_ACTIVE_SPIN_NS 1000000LL    /* OMP_WAIT_POLICY=active: no yield */
#define POOL_THROTTLED_SPIN_NS 2000LL    /* more threads than CPUs */

/* The policy for `threads` threads where `cpus` CPUs may run (the mask's
 * CPUs or a lower cgroup quota, 1.5; 0 unknown) and OpenMP's
 * OMP_WAIT_POLICY (NULL, "active" or "passive", any case, spaces around
 * it ignored), as libgomp:
 * passive sleeps at once, active spins without yielding; by default a
 * pool with more threads than CPUs spins only briefly, since a spinning
 * thread then takes the core of one that has work. Pure, for the tests. */
pool_wait pool_wait_policy(const char *omp_wait_policy, int threads, double cpus);

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

/* This thread's floating-point control word (MXCSR, FPCR; 0 elsewhere),
 * setting it, and the bits of it that flush subnormals (0 where unknown):
 * for the tests. */
unsigned pool_fp_mode(void);
void pool_fp_set(unsigned mode);
extern const unsigned pool_fp_flush_bits;

/* Chunk i of `chunks` over [0,n). */
static inline void pool_chunk(size_t n, int i, int chunks, size_t *begin, size_t *end)
{
    *begin = n * (size_t)i / (size_t)chunks;
    *end = n * (size_t)(i + 1) / (size_t)chunks;
}

#endif
