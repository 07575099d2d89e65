/* The persistent thread pool behind every CPU op (see pool.h).
 *
 * A training step is a few dozen ops of tens of microseconds each, so a
 * wake-up through the kernel (futex) per op would cost as much as the work.
 * Workers therefore spin on the task generation for a short while after each
 * task (pool_wait_policy: 100 microseconds, yielding the core after the
 * first 10) and only then sleep on the condition variable; the caller
 * likewise spins before sleeping on completion. Between steps (data
 * loading, logging) everybody sleeps.
 *
 * On a loaded machine (other jobs' processes on our CPUs, a cgroup quota
 * below the thread count) a worker is often not running when a task comes.
 * The caller used to wait until every worker had seen every task, so each
 * short op waited for the scheduler to give the late worker a core, and
 * the spinning took that core from whoever needed it: ops of 5 us took
 * 100-300 us on 2 threads, 20 times what they took on 1. Now the caller
 * waits only for chunks that are running: it runs whatever nobody claimed,
 * and a worker that comes after the last chunk was claimed finds nothing
 * to claim (the claim counters carry the task's generation). Which thread
 * runs a chunk never changes the result (pool.h).
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
#include <ctype.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include <cdl/cdl.h>

#include "kernels/cpu/pool.h"
#include "lib/core/forked.h"
#include "lib/core/threads.h"

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

/* A claim counter holds its task's generation (low 32 bits) above the
 * next chunk of its share: a worker claims only with a compare-and-swap
 * that finds its own generation, so one that the OS woke after its task
 * was over cannot take a chunk of the next one. */
#define CLAIM_TAG(gen) (((gen) & 0xffffffffull) << 32)
#define CLAIM_INDEX 0xffffffffull

/* One counter per cache line. */
typedef struct claim {
    _Atomic unsigned long long next;
    char pad[64 - sizeof(unsigned long long)];
} claim;

struct pool {
    int nthreads;
    pool_wait wait;               /* how long waiting threads spin */
    pthread_t *tids;              /* workers 1..nthreads-1 */
    pthread_mutex_t mu;
    pthread_cond_t wake;          /* a new generation, or stop */
    pthread_cond_t done;          /* the last chunk ran */
    _Atomic unsigned long long gen;   /* task generation, bumped per call */
    atomic_int done_chunks;       /* chunks of this task that have run */
    atomic_int sleepers;          /* workers asleep (or about to be) on wake */
    atomic_int caller_waiting;    /* the caller sleeps (or is about to) on done */
    atomic_int stop;
    claim *claims;                /* per thread: the next chunk of its share */
    unsigned long forks;          /* fork_count() when the workers started */
    /* The current task, written after the claims are reset and before gen
     * is bumped; atomic, as a late worker may read them while they change
     * (its claim then fails). */
    _Atomic(pool_fn) fn;
    _Atomic(void *) ctx;
    _Atomic size_t n;
    atomic_int chunks;
};

typedef struct worker_arg {
    pool *p;
    int tid;
} worker_arg;

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ volatile("yield");
#endif
}

static long long now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (long long)t.tv_sec * 1000000000LL + t.tv_nsec;
}

/* Spins until ready(p, arg) or p->wait's budget is spent: pause
 * instructions at first, then sched_yield between looks, which hands the
 * core to a thread that is waiting for it (another job's, a loader
 * thread, this pool's own caller) and returns at once when there is none.
 * 1 if ready. */
static int spin_until(pool *p, int (*ready)(pool *, unsigned long long), unsigned long long arg)
{
    if (p->wait.spin_ns <= 0)
        return ready(p, arg);
    long long start = now_ns(), t;
    for (;;) {
        for (int i = 0; i < 64; i++) {
            if (ready(p, arg))
                return 1;
            cpu_relax();
        }
        t = now_ns();
        if (t - start >= p->wait.spin_ns)
            return ready(p, arg);
        if (t - start >= p->wait.yield_after_ns)
            sched_yield();
    }
}

/* Runs fn over one chunk and counts it done; the caller may sleep on the
 * last one. */
static void run_one(pool *p, size_t i, int tid)
{
    size_t b, e;
    int chunks = atomic_load(&p->chunks);
    pool_chunk(atomic_load(&p->n), (int)i, chunks, &b, &e);
    if (b < e)
        atomic_load(&p->fn)(atomic_load(&p->ctx), b, e, (int)i, tid);
    if (atomic_fetch_add(&p->done_chunks, 1) + 1 == chunks && atomic_load(&p->caller_waiting)) {
        pthread_mutex_lock(&p->mu);
        pthread_cond_signal(&p->done);
        pthread_mutex_unlock(&p->mu);
    }
}

/* Claims and runs chunks of task `gen` until none is left: first thread
 * tid's share, then the other threads' shares in turn; nothing once a
 * later task has begun. */
static void run_chunks(pool *p, int tid, unsigned long long gen)
{
    int chunks = atomic_load(&p->chunks), t = p->nthreads;
    unsigned long long tag = CLAIM_TAG(gen);
    for (int k = 0; k < t; k++) {
        int owner = (tid + k) % t;
        size_t first, end;
        pool_chunk((size_t)chunks, owner, t, &first, &end);
        unsigned long long c = atomic_load(&p->claims[owner].next);
        for (;;) {
            if ((c & ~CLAIM_INDEX) != tag)
                return;   /* task gen is over */
            size_t i = first + (size_t)(c & CLAIM_INDEX);
            if (i >= end)
                break;
            if (atomic_compare_exchange_weak(&p->claims[owner].next, &c, c + 1)) {
                run_one(p, i, tid);
                c = atomic_load(&p->claims[owner].next);
            }
        }
    }
}

static int task_changed(pool *p, unsigned long long seen)
{
    return atomic_load(&p->gen) != seen || atomic_load(&p->stop);
}

/* Waits until the generation differs from `seen` or the pool stops. */
static void wait_for_task(pool *p, unsigned long long seen)
{
    if (spin_until(p, task_changed, seen))
        return;
    pthread_mutex_lock(&p->mu);
    atomic_fetch_add(&p->sleepers, 1);
    while (!task_changed(p, seen))
        pthread_cond_wait(&p->wake, &p->mu);
    atomic_fetch_sub(&p->sleepers, 1);
    pthread_mutex_unlock(&p->mu);
}

static void *worker_main(void *arg)
{
    pool *p = ((worker_arg *)arg)->p;
    int tid = ((worker_arg *)arg)->tid;
    unsigned long long seen = 0;
    flush_enter();   /* a worker runs nothing but ops */
    for (;;) {
        wait_for_task(p, seen);
        if (atomic_load(&p->stop))
            return NULL;
        seen = atomic_load(&p->gen);
        run_chunks(p, tid, seen);
    }
}

/* The caller's wait: every chunk has run. */
static int all_done(pool *p, unsigned long long chunks)
{
    return (unsigned long long)atomic_load(&p->done_chunks) >= chunks;
}

/* Whether `value` is `word` in any case with spaces around it, as libgomp
 * reads OMP_WAIT_POLICY (" passive" from a job script's quoting sleeps
 * there, so it sleeps here too). */
static int policy_is(const char *value, const char *word)
{
    size_t n = strlen(word);
    while (isspace((unsigned char)*value))
        value++;
    if (strncasecmp(value, word, n))
        return 0;
    for (value += n; isspace((unsigned char)*value); value++)
        ;
    return *value == '\0';
}

pool_wait pool_wait_policy(const char *omp_wait_policy, int threads, double cpus)
{
    pool_wait w = {POOL_SPIN_NS, POOL_YIELD_AFTER_NS};
    if (omp_wait_policy && policy_is(omp_wait_policy, "passive"))
        w.spin_ns = w.yield_after_ns = 0;
    else if (omp_wait_policy && policy_is(omp_wait_policy, "active"))
        w.spin_ns = w.yield_after_ns = POOL_ACTIVE_SPIN_NS;
    else if (cpus > 0 && threads > cpus)
        w.spin_ns = w.yield_after_ns = POOL_THROTTLED_SPIN_NS;
    return w;
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
    p->wait = pool_wait_policy(getenv("OMP_WAIT_POLICY"), nthreads, cpus_available());
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->wake, NULL);
    pthread_cond_init(&p->done, NULL);
    atomic_init(&p->gen, 0);
    atomic_init(&p->done_chunks, 0);
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
        atomic_init(&p->claims[t].next, CLAIM_TAG(0ull));
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
    /* The claims first: a worker late for the last task that reads the
     * fields below as they change then fails to claim (run_chunks). */
    unsigned long long gen = atomic_load(&p->gen) + 1;
    for (int t = 0; t < p->nthreads; t++)
        atomic_store(&p->claims[t].next, CLAIM_TAG(gen));
    atomic_store(&p->done_chunks, 0);
    atomic_store(&p->fn, fn);
    atomic_store(&p->ctx, ctx);
    atomic_store(&p->n, n);
    atomic_store(&p->chunks, chunks);
    atomic_store(&p->gen, gen);   /* publishes the task (seq_cst) */
    if (atomic_load(&p->sleepers) > 0) {
        pthread_mutex_lock(&p->mu);
        pthread_cond_broadcast(&p->wake);
        pthread_mutex_unlock(&p->mu);
    }

    run_chunks(p, 0, gen);
    /* Every chunk is claimed; wait for the ones still running elsewhere,
     * never for a worker that has not come: it finds nothing to claim. */
    if (!spin_until(p, all_done, (unsigned long long)chunks)) {
        pthread_mutex_lock(&p->mu);
        atomic_store(&p->caller_waiting, 1);
        while (!all_done(p, (unsigned long long)chunks))
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
