/* The persistent thread pool behind every CPU op (see pool.h).
 *
 * A training step is a few dozen ops of tens of microseconds each, so a
 * wake-up through the kernel (futex) per op would cost as much as the work.
 * Workers therefore spin on the task generation for a short while after each
 * task (SPIN_ROUNDS pauses, about 100 microseconds) and only then sleep
 * on the condition variable; the caller likewise spins before sleeping on
 * completion. Between steps (data loading, logging) everybody sleeps.
 *
 * Chunks are claimed with atomic counters (see pool.h): thread t first works
 * through its own share of the chunks, [t*C/T, (t+1)*C/T), then helps the
 * others with theirs. When nobody is late, every op gives a thread the same
 * images as the op before (data stays in that core's cache); when a thread is
 * descheduled, the others take over its remaining chunks.
 *
 * Lost wake-ups are excluded Dekker-style with sequentially consistent
 * atomics: a sleeper announces itself (sleepers / caller_waiting) before it
 * re-checks the condition under the mutex, and the other side changes the
 * condition before it looks for sleepers and signals under the mutex.
 *
 * Every op runs with subnormal floats flushed to zero (see pool.h): the
 * workers set the mode once, the caller around each call, restoring its own.
 *
 * In a child of fork() the workers are gone (lib/core/forked.h): every op
 * runs all its chunks on the caller, as on one thread, and destroy frees
 * the memory without touching the workers, the mutex or the condition
 * variables (their state is the parent's at the fork: locked, or with
 * waiters that will never wake).
 */
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#include <cdl/cdl.h>

#include "kernels/cpu/pool.h"
#include "lib/core/forked.h"

#if defined(__SSE__)   /* x86-64 always; 32-bit x86 when built for SSE */
#include <xmmintrin.h>
/* MXCSR: FTZ (bit 15) writes subnormal results as zero, DAZ (bit 6)
 * reads subnormal operands as zero; both for SSE and AVX alike. */
#define FLUSH_BITS 0x8040u
unsigned pool_fp_mode(void) { return _mm_getcsr(); }
void pool_fp_set(unsigned mode) { _mm_setcsr(mode); }
#elif defined(__aarch64__)
/* FPCR.FZ (bit 24) flushes subnormal inputs and outputs of float ops. */
#define FLUSH_BITS (1u << 24)
unsigned pool_fp_mode(void)
{
    unsigned long v;
    __asm__ volatile("mrs %0, fpcr" : "=r"(v));
    return (unsigned)v;
}
void pool_fp_set(unsigned mode)
{
    unsigned long v = mode;
    __asm__ volatile("msr fpcr, %0" : : "r"(v));
}
#else
#define FLUSH_BITS 0u
unsigned pool_fp_mode(void) { return 0; }
void pool_fp_set(unsigned mode) { (void)mode; }
#endif

const unsigned pool_fp_flush_bits = FLUSH_BITS;

/* Sets flush-to-zero on this thread; returns the mode to restore. */
static inline unsigned flush_enter(void)
{
    unsigned old = pool_fp_mode();
    if ((old & FLUSH_BITS) != FLUSH_BITS)
        pool_fp_set(old | FLUSH_BITS);
    return old;
}

static inline void flush_leave(unsigned old)
{
    if ((old & FLUSH_BITS) != FLUSH_BITS)
        pool_fp_set(old);
}

#define SPIN_ROUNDS 10000   /* ~100 us of pause instructions */

/* One counter per cache line. */
typedef struct claim {
    atomic_int next;
    char pad[64 - sizeof(atomic_int)];
} claim;

struct pool {
    int nthreads;
    pthread_t *tids;              /* workers 1..nthreads-1 */
    pthread_mutex_t mu;
    pthread_cond_t wake;          /* gen changed or stop */
    pthread_cond_t done;          /* pending reached 0 */
    atomic_ulong gen;             /* task generation, bumped per call */
    atomic_int pending;           /* workers still running this generation */
    atomic_int sleepers;          /* workers asleep (or about to be) on wake */
    atomic_int caller_waiting;    /* the caller sleeps (or is about to) on done */
    atomic_int stop;
    claim *claims;                /* per thread: the next chunk of its share */
    unsigned long forks;          /* fork_count() when the workers started */
    /* The current task, published before gen is bumped. */
    pool_fn fn;
    void *ctx;
    size_t n;
    int chunks;
};

typedef struct worker_arg {
    pool *p;
    int tid;
} worker_arg;

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

/* Claims and runs chunks of the current task until none is left: first
 * thread tid's share, then the other threads' shares in turn. */
static void run_chunks(pool *p, int tid)
{
    int chunks = p->chunks, t = p->nthreads;
    for (int k = 0; k < t; k++) {
        int owner = (tid + k) % t;
        size_t first, end;
        pool_chunk((size_t)chunks, owner, t, &first, &end);
        for (;;) {
            size_t i = first + (size_t)atomic_fetch_add(&p->claims[owner].next, 1);
            if (i >= end)
                break;
            size_t b, e;
            pool_chunk(p->n, (int)i, chunks, &b, &e);
            if (b < e)
                p->fn(p->ctx, b, e, (int)i, tid);
        }
    }
}

/* Waits until the generation differs from `seen` or the pool stops. */
static void wait_for_task(pool *p, unsigned long seen)
{
    for (int i = 0; i < SPIN_ROUNDS; i++) {
        if (atomic_load(&p->gen) != seen || atomic_load(&p->stop))
            return;
        cpu_relax();
    }
    pthread_mutex_lock(&p->mu);
    atomic_fetch_add(&p->sleepers, 1);
    while (atomic_load(&p->gen) == seen && !atomic_load(&p->stop))
        pthread_cond_wait(&p->wake, &p->mu);
    atomic_fetch_sub(&p->sleepers, 1);
    pthread_mutex_unlock(&p->mu);
}

static void *worker_main(void *arg)
{
    pool *p = ((worker_arg *)arg)->p;
    int tid = ((worker_arg *)arg)->tid;
    unsigned long seen = 0;
    flush_enter();   /* a worker runs nothing but ops */
    for (;;) {
        wait_for_task(p, seen);
        if (atomic_load(&p->stop))
            return NULL;
        seen = atomic_load(&p->gen);
        run_chunks(p, tid);
        if (atomic_fetch_sub(&p->pending, 1) == 1 && atomic_load(&p->caller_waiting)) {
            pthread_mutex_lock(&p->mu);
            pthread_cond_signal(&p->done);
            pthread_mutex_unlock(&p->mu);
        }
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
    atomic_init(&p->gen, 0);
    atomic_init(&p->pending, 0);
    atomic_init(&p->sleepers, 0);
    atomic_init(&p->caller_waiting, 0);
    atomic_init(&p->stop, 0);
    if (nthreads == 1)
        return p;
    p->forks = fork_count();
    p->claims = cdl_calloc((size_t)nthreads, sizeof *p->claims);
    if (!p->claims) {
        pool_destroy(p);
        return NULL;
    }
    for (int t = 0; t < nthreads; t++)
        atomic_init(&p->claims[t].next, 0);
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
    if (p->tids && fork_count() != p->forks) {   /* a child: no workers to stop */
        cdl_free(p->tids);
        cdl_free(p->claims);
        cdl_free(p);
        return;
    }
    if (p->tids) {
        pthread_mutex_lock(&p->mu);
        atomic_store(&p->stop, 1);
        pthread_cond_broadcast(&p->wake);
        pthread_mutex_unlock(&p->mu);
        for (int t = 1; t < p->nthreads; t++)
            pthread_join(p->tids[t - 1], NULL);
        cdl_free(p->tids);
    }
    cdl_free(p->claims);
    pthread_cond_destroy(&p->done);
    pthread_cond_destroy(&p->wake);
    pthread_mutex_destroy(&p->mu);
    cdl_free(p);
}

int pool_threads(const pool *p)
{
    return p->nthreads;
}

int pool_chunks(const pool *p, size_t n, size_t grain)
{
    return pool_chunks_for(p->nthreads, n, grain);
}

void pool_run(pool *p, size_t n, int chunks, pool_fn fn, void *ctx)
{
    if (!n)
        return;
    if (chunks < 1)
        chunks = 1;
    if ((size_t)chunks > n)
        chunks = (int)n;
    unsigned mode = flush_enter();
    if (chunks == 1 || p->nthreads == 1 || fork_count() != p->forks) {
        for (int i = 0; i < chunks; i++) {
            size_t b, e;
            pool_chunk(n, i, chunks, &b, &e);
            fn(ctx, b, e, i, 0);
        }
        flush_leave(mode);
        return;
    }
    p->fn = fn;
    p->ctx = ctx;
    p->n = n;
    p->chunks = chunks;
    for (int t = 0; t < p->nthreads; t++)
        atomic_store_explicit(&p->claims[t].next, 0, memory_order_relaxed);
    atomic_store(&p->pending, p->nthreads - 1);
    atomic_fetch_add(&p->gen, 1);   /* publishes the task (seq_cst) */
    if (atomic_load(&p->sleepers) > 0) {
        pthread_mutex_lock(&p->mu);
        pthread_cond_broadcast(&p->wake);
        pthread_mutex_unlock(&p->mu);
    }

    run_chunks(p, 0);

    for (int i = 0; i < SPIN_ROUNDS && atomic_load(&p->pending) > 0; i++)
        cpu_relax();
    if (atomic_load(&p->pending) > 0) {
        pthread_mutex_lock(&p->mu);
        atomic_store(&p->caller_waiting, 1);
        while (atomic_load(&p->pending) > 0)
            pthread_cond_wait(&p->done, &p->mu);
        atomic_store(&p->caller_waiting, 0);
        pthread_mutex_unlock(&p->mu);
    }
    flush_leave(mode);
}

void pool_for(pool *p, size_t n, size_t grain, pool_fn fn, void *ctx)
{
    pool_run(p, n, pool_chunks(p, n, grain), fn, ctx);
}
