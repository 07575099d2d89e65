/* The CPU thread pool's decisions (kernels/cpu/pool.c): how its threads
 * wait, and that the caller never waits for a worker that is not running. */
#include "testutil.h"

#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>
#include <unistd.h>

#include "kernels/cpu/pool.h"

/* OMP_WAIT_POLICY as libgomp reads it, and a short spin where the pool
 * has more threads than CPUs (a 1.5-CPU quota, a mask of 2 for 4). */
static void test_wait_policy(void **state)
{
    (void)state;
    pool_wait w = pool_wait_policy(NULL, 2, 2);
    assert_true(w.spin_ns == POOL_SPIN_NS && w.yield_after_ns == POOL_YIELD_AFTER_NS);
    assert_true(w.yield_after_ns < w.spin_ns);
    w = pool_wait_policy(NULL, 2, 0);   /* unknown CPUs: the default */
    assert_true(w.spin_ns == POOL_SPIN_NS);
    w = pool_wait_policy("PASSIVE", 8, 64);
    assert_true(w.spin_ns == 0 && w.yield_after_ns == 0);
    w = pool_wait_policy("active", 2, 1.5);
    assert_true(w.spin_ns == POOL_ACTIVE_SPIN_NS && w.yield_after_ns == w.spin_ns);
    w = pool_wait_policy(NULL, 2, 1.5);
    assert_true(w.spin_ns == POOL_THROTTLED_SPIN_NS);
    assert_true(POOL_THROTTLED_SPIN_NS < POOL_YIELD_AFTER_NS);
    w = pool_wait_policy("", 4, 2);
    assert_true(w.spin_ns == POOL_THROTTLED_SPIN_NS);
    w = pool_wait_policy(" passive\n", 2, 2);   /* libgomp trims spaces */
    assert_true(w.spin_ns == 0 && w.yield_after_ns == 0);
    w = pool_wait_policy("\tACTIVE ", 2, 2);
    assert_true(w.spin_ns == POOL_ACTIVE_SPIN_NS);
    w = pool_wait_policy("passive x", 2, 2);   /* not a policy: the default */
    assert_true(w.spin_ns == POOL_SPIN_NS);
    w = pool_wait_policy("bogus", 2, 2);
    assert_true(w.spin_ns == POOL_SPIN_NS);
}

/* A worker stopped by the test (in a signal handler, as the OS stops one
 * on a loaded machine): the caller ran the chunks itself and returned;
 * before, it waited until that worker had run, so each short op waited
 * for the scheduler. */
static sem_t entered, release;
static _Atomic pthread_t worker_id;
static atomic_int seen_worker;
static int ran[64];
static int ran_tid[64];

static void hold(int sig)
{
    (void)sig;
    sem_post(&entered);
    while (sem_wait(&release) != 0)
        ;
}

static void meet(void *ctx, size_t b, size_t e, int chunk, int tid)
{
    (void)ctx, (void)b, (void)e, (void)chunk;
    if (tid == 1) {
        worker_id = pthread_self();
        atomic_store(&seen_worker, 1);
    } else {
        while (!atomic_load(&seen_worker))   /* chunk 1 is worker 1's own share */
            sched_yield();
    }
}

static void record(void *ctx, size_t b, size_t e, int chunk, int tid)
{
    (void)ctx, (void)e;
    ran[b]++;
    ran_tid[chunk] = tid;
}

static void watchdog(int sig)
{
    (void)sig;
    static const char msg[] = "test_pool: pool_run waited for a stopped worker\n";
    if (write(2, msg, sizeof msg - 1) < 0) {
    }
    _exit(1);
}

static void test_late_worker(void **state)
{
    (void)state;
    assert_int_equal(sem_init(&entered, 0, 0), 0);
    assert_int_equal(sem_init(&release, 0, 0), 0);
    struct sigaction sa = {0};
    sa.sa_handler = hold;
    sigemptyset(&sa.sa_mask);
    assert_int_equal(sigaction(SIGUSR2, &sa, NULL), 0);
    pool *p = pool_create(2);
    assert_non_null(p);
    pool_run(p, 2, 2, meet, NULL);   /* learns worker 1's thread */
    assert_int_equal(pthread_kill(worker_id, SIGUSR2), 0);
    while (sem_wait(&entered) != 0)
        ;
    signal(SIGALRM, watchdog);   /* a failure, not a hang */
    alarm(60);
    memset(ran, 0, sizeof ran);
    pool_run(p, 16, 16, record, NULL);
    alarm(0);
    for (int i = 0; i < 16; i++) {
        assert_int_equal(ran[i], 1);
        assert_int_equal(ran_tid[i], 0);
    }
    sem_post(&release);
    /* The woken worker finds that task closed; the pool goes on. */
    for (int r = 0; r < 50; r++) {
        memset(ran, 0, sizeof ran);
        pool_run(p, 64, 64, record, NULL);
        for (int i = 0; i < 64; i++)
            assert_int_equal(ran[i], 1);
    }
    pool_destroy(p);
    signal(SIGUSR2, SIG_DFL);
    sem_destroy(&entered);
    sem_destroy(&release);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_wait_policy),
        cmocka_unit_test(test_late_worker),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
