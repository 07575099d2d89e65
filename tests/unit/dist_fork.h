/* Multi-process tests inside one test binary: fork one child per rank with
 * the rank contract in its environment, run a function, and wait for all
 * children with a deadline (the deadline is a hang guard, not a timing
 * assertion). Children report failures on stderr and through their exit
 * code; they never call cmocka asserts (those longjmp into the parent's
 * state). */
#ifndef CDL_TEST_DIST_FORK_H
#define CDL_TEST_DIST_FORK_H

#include <errno.h>
#include <math.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* Fails the child: prints where and why, returns 1 from the rank function. */
#define CHILD_CHECK(cond, ...)                                                          \
    do {                                                                                \
        if (!(cond)) {                                                                  \
            fprintf(stderr, "rank %d: %s:%d: check '%s' failed: ", rank_of_child,       \
                    __FILE__, __LINE__, #cond);                                         \
            fprintf(stderr, __VA_ARGS__);                                               \
            fputc('\n', stderr);                                                        \
            return 1;                                                                   \
        }                                                                               \
    } while (0)

static int rank_of_child = -1;

/* Emulated nodes: the contract of rank r of world in a block layout of
 * `nodes` nodes (nothing for one node). */
static inline void dist_set_nodes(int rank, int world, int nodes)
{
    if (nodes <= 1)
        return;
    int per = world / nodes;
    char v[16];
    snprintf(v, sizeof v, "%d", rank / per);
    setenv("NODE_RANK", v, 1);
    snprintf(v, sizeof v, "%d", rank % per);
    setenv("LOCAL_RANK", v, 1);
    snprintf(v, sizeof v, "%d", per);
    setenv("LOCAL_WORLD_SIZE", v, 1);
    snprintf(v, sizeof v, "%d", nodes);
    setenv("CDL_NNODES", v, 1);
}

/* Environment of launchers the tests must not inherit. */
static inline void clear_launcher_env(void)
{
    static const char *vars[] = {
        "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "NODE_RANK",
        "MASTER_ADDR", "MASTER_PORT", "CDL_NNODES", "CDL_REPLICAS_PER_GPU", "CDL_JOB_ID",
        "CDL_LAUNCHER", "CDL_TIMEOUT", "CDL_STORE_TOKEN", "CDL_STORE_FD", "CDL_STORE_PORT",
        "CDL_SHM_SLAB_KB",
        "PMIX_RANK", "PMIX_NAMESPACE", "PMIX_SERVER_URI4", "PMIX_SERVER_URI3",
        "PMIX_SERVER_URI2", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK",
        "OMPI_COMM_WORLD_LOCAL_SIZE", "PMI_SIZE", "PMI_RANK", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID",
        "SLURM_NODEID", "SLURM_NNODES", "SLURM_STEP_ID", "SLURM_STEPID", "SLURM_JOB_ID",
        "SLURM_STEP_NUM_TASKS", "SLURM_STEP_NUM_NODES", "SLURM_STEP_TASKS_PER_NODE",
        "SLURM_TASKS_PER_NODE", "SLURM_STEP_NODELIST", "SLURM_NODELIST",
        "SLURM_STEP_RESV_PORTS", "TORCHELASTIC_RUN_ID", "GROUP_WORLD_SIZE",
        "CDL_CONTRACT_VERSION",
    };
    for (size_t i = 0; i < sizeof vars / sizeof *vars; i++)
        unsetenv(vars[i]);
}

/* A listening socket on a free loopback port (what cdlrun hands rank 0). */
static inline int listen_any(int *port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t l = sizeof a;
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) || listen(fd, 64) ||
        getsockname(fd, (struct sockaddr *)&a, &l)) {
        perror("listen_any");
        return -1;
    }
    *port = ntohs(a.sin_port);
    return fd;
}

typedef int (*rank_fn)(int rank, int world, void *arg);

typedef struct run_opts {
    double limit_s;        /* hang guard for the whole run */
    int no_store_fd;       /* 1: rank 0 binds MASTER_PORT itself */
    int port;              /* with no_store_fd: the port (0 = pick one, then close it) */
} run_opts;

/* Hang guards are seconds, scaled up under valgrind (CDL_TEST_SLOW=1). */
static inline double guard_s(double s)
{
    const char *slow = getenv("CDL_TEST_SLOW");
    return slow && *slow && *slow != '0' ? s * 10 : s;
}

static inline double fork_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Starts the ranks listed in start[0..nstart) of a world of `world`, each
 * running fn with the contract exported, and waits for all of them. status[i]
 * gets the wait status of start[i]. Returns 0, or -1 when the guard expired
 * (leftovers are killed). */
static inline int run_ranks(int world, const int *start, int nstart, rank_fn fn, void *arg,
                            const run_opts *o, int *status)
{
    static int run_counter;
    int port = o->port, lfd = -1;
    if (!o->no_store_fd) {
        lfd = listen_any(&port);
        if (lfd < 0)
            return -1;
    } else if (!port) {
        int tmp = listen_any(&port);
        close(tmp);
    }
    char job[64];
    snprintf(job, sizeof job, "test-%d-%d", (int)getpid(), ++run_counter);
    sigset_t chld, old;
    sigemptyset(&chld);
    sigaddset(&chld, SIGCHLD);
    sigprocmask(SIG_BLOCK, &chld, &old);
    pid_t pids[64];
    fflush(NULL);
    for (int i = 0; i < nstart; i++) {
        pids[i] = fork();
        if (pids[i] == 0) {
            sigprocmask(SIG_SETMASK, &old, NULL);
            int rank = start[i];
            char v[32];
            clear_launcher_env();
            snprintf(v, sizeof v, "%d", rank);
            setenv("RANK", v, 1);
            snprintf(v, sizeof v, "%d", world);
            setenv("WORLD_SIZE", v, 1);
            snprintf(v, sizeof v, "%d", port);
            setenv("MASTER_PORT", v, 1);
            setenv("MASTER_ADDR", "127.0.0.1", 1);
            setenv("CDL_JOB_ID", job, 1);
            setenv("CDL_STORE_TOKEN", "0123456789abcdef0123456789abcdef", 1);
            setenv("CDL_LAUNCHER", "test", 1);
            if (lfd >= 0 && rank == 0) {
                int fd = dup(lfd);   /* without FD_CLOEXEC */
                snprintf(v, sizeof v, "%d", fd);
                setenv("CDL_STORE_FD", v, 1);
            }
            if (lfd >= 0)
                close(lfd);
            rank_of_child = rank;
            int rc = fn(rank, world, arg);
            fflush(NULL);
            _exit(rc);
        }
    }
    if (lfd >= 0)
        close(lfd);
    int left = nstart, rc = 0;
    double deadline = fork_now() + o->limit_s;
    for (int i = 0; i < nstart; i++)
        status[i] = -1;
    while (left > 0) {
        pid_t p;
        int st;
        while ((p = waitpid(-1, &st, WNOHANG)) > 0)
            for (int i = 0; i < nstart; i++)
                if (pids[i] == p) {
                    status[i] = st;
                    left--;
                }
        if (left == 0)
            break;
        double wait = deadline - fork_now();
        if (wait <= 0) {
            fprintf(stderr, "run_ranks: %d rank(s) still running after %.0f s: killing them\n",
                    left, o->limit_s);
            for (int i = 0; i < nstart; i++)
                if (status[i] == -1)
                    kill(pids[i], SIGKILL);
            for (int i = 0; i < nstart; i++)
                if (status[i] == -1)
                    waitpid(pids[i], &status[i], 0);
            rc = -1;
            break;
        }
        struct timespec ts = {(time_t)wait, (long)((wait - (double)(time_t)wait) * 1e9)};
        sigtimedwait(&chld, NULL, &ts);
    }
    sigprocmask(SIG_SETMASK, &old, NULL);
    return rc;
}

/* All of world ranks 0..world-1. */
static inline int run_world(int world, rank_fn fn, void *arg, double limit_s)
{
    int start[64], status[64];
    for (int i = 0; i < world; i++)
        start[i] = i;
    run_opts o = {limit_s, 0, 0};
    if (run_ranks(world, start, world, fn, arg, &o, status))
        return -1;
    for (int i = 0; i < world; i++)
        if (!WIFEXITED(status[i]) || WEXITSTATUS(status[i]) != 0) {
            fprintf(stderr, "rank %d: %s %d\n", i,
                    WIFEXITED(status[i]) ? "exit code" : "signal",
                    WIFEXITED(status[i]) ? WEXITSTATUS(status[i]) : WTERMSIG(status[i]));
            return -1;
        }
    return 0;
}

/* A float of rank r's element i: uniform in [-1,1) times 2^(i%9-4), so
 * rounding depends on the summation order. */
static inline float test_value(int r, size_t i)
{
    uint64_t z = ((uint64_t)r << 40) + i + 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    float u = (float)(z >> 40) * (1.0f / 8388608.0f) - 1.0f;
    return ldexpf(u, (int)(i % 9) - 4);
}

#endif
