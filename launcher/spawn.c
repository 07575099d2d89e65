/* Starting cdlrun's ranks: the store socket, the per-run token and job id,
 * and one child per rank with the rank contract in its environment.
 *
 * cdl's store has no port race: cdlrun binds 127.0.0.1:0 here and hands the
 * listening socket to rank 0 (CDL_STORE_FD, its port in CDL_STORE_PORT), so
 * the port is taken before any rank starts. MASTER_PORT is another port,
 * free when cdlrun looked, for programs that bind it themselves: PyTorch's
 * init_process_group("env://") binds MASTER_PORT in rank 0 and would find it
 * taken if it were the store's (torchrun --standalone picks its port alike).
 * It lies above the kernel's ephemeral ports (contract_quiet_port), which no
 * connection of the host can take in the seconds before rank 0 binds it. */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include "lib/core/cpuquota.h"
#include "lib/dist/contract.h"
#include "launch.h"

static int listen_loopback(run *r)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t l = sizeof a;
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) || listen(fd, 1024) ||
        getsockname(fd, (struct sockaddr *)&a, &l)) {
        fprintf(stderr, "cdlrun: cannot listen on a loopback port: %s\n", strerror(errno));
        if (fd >= 0)
            close(fd);
        return -1;
    }
    r->listen_fd = fd;
    r->port = ntohs(a.sin_port);
    return 0;
}

/* The top of the kernel's ephemeral ports (ip_local_port_range), or -1. */
static int ephemeral_top(void)
{
    FILE *f = fopen("/proc/sys/net/ipv4/ip_local_port_range", "re");
    int lo = -1, hi = -1;
    if (f) {
        if (fscanf(f, "%d %d", &lo, &hi) != 2)
            hi = -1;
        fclose(f);
    }
    return hi;
}

/* No socket of this machine holds port on 0.0.0.0 or :: (checked by binding
 * it there, never listening: nothing stays behind). */
static int port_free(int port)
{
    struct sockaddr_in a4 = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                             .sin_addr.s_addr = htonl(INADDR_ANY)};
    struct sockaddr_in6 a6 = {.sin6_family = AF_INET6, .sin6_port = htons((uint16_t)port),
                              .sin6_addr = IN6ADDR_ANY_INIT};
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int ok = fd >= 0 && bind(fd, (struct sockaddr *)&a4, sizeof a4) == 0;
    if (fd >= 0)
        close(fd);
    if (!ok)
        return 0;
    fd = socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return 1;   /* no IPv6 here */
    ok = bind(fd, (struct sockaddr *)&a6, sizeof a6) == 0;
    close(fd);
    return ok;
}

/* A port no socket of this machine holds on any address (PyTorch's rank 0
 * binds 0.0.0.0 and ::), released until rank 0 binds it: drawn above the
 * ephemeral ports (contract_quiet_port). Where there is no room there, or no
 * free one in 200 draws, asked of the kernel, which gives an ephemeral one:
 * an outgoing connection of the host could take that one meanwhile (a
 * PyTorch rank 0 binds it only after importing torch, seconds later). */
static int free_port(run *r)
{
    int top = ephemeral_top();
    for (int i = 0; top > 0 && i < 200; i++) {
        uint32_t x;
        if (getrandom(&x, sizeof x, 0) != (ssize_t)sizeof x)
            break;
        int p = contract_quiet_port(top, x);
        if (!p)
            break;
        if (port_free(p)) {
            r->master_port = p;
            return 0;
        }
    }
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_ANY)};
    socklen_t l = sizeof a;
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) ||
        getsockname(fd, (struct sockaddr *)&a, &l)) {
        fprintf(stderr, "cdlrun: cannot find a free port for MASTER_PORT: %s\n", strerror(errno));
        if (fd >= 0)
            close(fd);
        return -1;
    }
    close(fd);
    r->master_port = ntohs(a.sin_port);
    return 0;
}

static void setenv_int(const char *name, long v)
{
    char buf[32];
    snprintf(buf, sizeof buf, "%ld", v);
    setenv(name, buf, 1);
}

static int setenv_contract(void *ctx, const char *name, const char *value, int user_wins,
                           contract_err *e)
{
    (void)ctx;
    if (setenv(name, value, !user_wins) != 0) {
        snprintf(e->msg, sizeof e->msg, "cannot set %s: %s", name, strerror(errno));
        return -1;
    }
    return 0;
}

/* The contract of one rank: all ranks on this host. */
static int export_contract(const run *r, int rank)
{
    contract c = {0};
    contract_err e;
    const char *rpg = getenv(CDL_ENV_REPLICAS_PER_GPU);
    long v = 1;
    if (rpg && *rpg && contract_parse_int(CDL_ENV_REPLICAS_PER_GPU, rpg, 1, r->n, &v, &e)) {
        fprintf(stderr, "cdlrun: %s\n", e.msg);
        return -1;
    }
    c.rank = c.local_rank = rank;
    c.world = c.local_world = r->n;
    c.nnodes = 1;
    c.replicas_per_gpu = (int)v;
    c.master_port = r->master_port;
    c.store_port = r->port;
    snprintf(c.master_addr, sizeof c.master_addr, "127.0.0.1");
    snprintf(c.job_id, sizeof c.job_id, "%s", r->job_id);
    snprintf(c.launcher, sizeof c.launcher, "cdlrun");
    snprintf(c.token, sizeof c.token, "%s", r->token);
    for (const char *const *f = contract_foreign_vars; *f; f++)
        unsetenv(*f);
    /* Every rank sees the same GPUs: the slot rule, whatever an enclosing
     * srun --gpus-per-task --cdl-ddp step said (all ranks opened GPU 0). */
    unsetenv(CDL_ENV_GPU_BIND);
    if (contract_encode(&c, setenv_contract, NULL, &e) != 0) {
        fprintf(stderr, "cdlrun: rank %d: %s\n", rank, e.msg);
        return -1;
    }
    return 0;
}

/* The signals cdlrun forwards (supervise.c), and SIGCHLD it waits on. */
static const int forwarded[] = {SIGCHLD, SIGINT, SIGTERM, SIGUSR1, SIGUSR2, SIGHUP, SIGQUIT};
#define NFORWARDED (sizeof forwarded / sizeof forwarded[0])

/* In the child: the contract, then exec. Never returns. */
static void exec_rank(run *r, int rank, const sigset_t *mask, pid_t launcher, int out_w,
                      int err_w)
{
    setpgid(0, 0);   /* its own group: cdlrun forwards terminal signals once */
    /* A rank dies with cdlrun: a SIGKILLed launcher must not leave ranks
     * training. The parent check closes the race with a launcher that died
     * before prctl (the flag survives exec). */
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != launcher)
        _exit(127);
    /* Dispositions survive exec: signals ignored by whoever started cdlrun
     * (nohup, '&' in a script) must still reach the program. */
    signal(SIGPIPE, SIG_DFL);
    for (size_t i = 0; i < NFORWARDED; i++)
        signal(forwarded[i], SIG_DFL);
    sigprocmask(SIG_SETMASK, mask, NULL);
    int null = open("/dev/null", O_RDONLY);
    if (null >= 0) {
        dup2(null, 0);
        close(null);
    }
    if (out_w >= 0) {
        dup2(out_w, 1);
        dup2(err_w, 2);
        close(out_w);
        close(err_w);
    }
    if (export_contract(r, rank) != 0)
        _exit(127);
    if (r->timeout > 0) {
        char buf[32];
        snprintf(buf, sizeof buf, "%g", r->timeout);
        setenv(CDL_ENV_TIMEOUT, buf, 1);
    }
    cpu_set_t mine;
    if (r->bind_cores) {
        mine = r->ranks[rank].cpus;
        if (sched_setaffinity(0, sizeof mine, &mine))
            fprintf(stderr, "cdlrun: rank %d: cannot bind: %s\n", rank, strerror(errno));
    }
    if (!getenv("OMP_NUM_THREADS")) {
        /* One share of the CPUs per rank, like torchrun. */
        if (!r->bind_cores && sched_getaffinity(0, sizeof mine, &mine))
            CPU_ZERO(&mine);
        /* A cgroup quota (a container's --cpus) is the ranks' together. */
        setenv_int("OMP_NUM_THREADS", cpus_per_rank(CPU_COUNT(&mine), r->bind_cores, r->n,
                                                    cpu_quota()));
    }
    if (rank == 0) {
        fcntl(r->listen_fd, F_SETFD, 0);   /* inherited across exec */
        setenv_int(CDL_ENV_STORE_FD, r->listen_fd);
    } else {
        close(r->listen_fd);
    }
    execvp(r->argv[0], r->argv);
    fprintf(stderr, "cdlrun: rank %d: cannot run %s: %s\n", rank, r->argv[0], strerror(errno));
    _exit(127);
}

int launch_ranks(run *r)
{
    contract_err e;
    if (listen_loopback(r) || free_port(r))
        return -1;
    if (contract_token_make(r->token, sizeof r->token, &e) != 0) {
        fprintf(stderr, "cdlrun: %s\n", e.msg);
        return -1;
    }
    /* The job id is public (shm names): its own bits, not the token's. */
    char rnd[CONTRACT_TOKEN_LEN + 1];
    if (contract_token_make(rnd, sizeof rnd, &e) != 0) {
        fprintf(stderr, "cdlrun: %s\n", e.msg);
        return -1;
    }
    snprintf(r->job_id, sizeof r->job_id, "cdlrun.%d.%.8s", (int)getpid(), rnd);
    if (r->bind_cores || r->bind_auto) {
        cpu_set_t *sets = calloc((size_t)r->n, sizeof *sets);
        char err[256];
        int cores = sets ? bind_plan_cpus(r->n, sets, err, sizeof err) : -1;
        if (cores < 0 && r->bind_cores) {
            fprintf(stderr, "cdlrun: --bind cores: %s\n", sets ? err : "out of memory");
            free(sets);
            return -1;
        }
        /* auto: pin only when every rank gets cores of its own; sharing
         * pinned cores would be worse than letting the kernel spread. */
        if (r->bind_auto)
            r->bind_cores = cores >= r->n;
        else if (cores < r->n)   /* asked for: pinned, but say who shares */
            fprintf(stderr, "cdlrun: warning: --bind cores: %d ranks on %d core%s: ranks share "
                    "pinned cores, and every step waits for the slowest (give -n %d at most, "
                    "or --bind auto to let the kernel spread them)\n", r->n, cores,
                    cores == 1 ? "" : "s", cores);
        for (int i = 0; i < r->n && r->bind_cores; i++)
            r->ranks[i].cpus = sets[i];
        free(sets);
    }
    /* The signals supervise() takes through a signalfd stay blocked from
     * here on; children get the original mask back. */
    sigset_t block, old;
    sigemptyset(&block);
    for (size_t i = 0; i < NFORWARDED; i++)
        sigaddset(&block, forwarded[i]);
    sigprocmask(SIG_BLOCK, &block, &old);
    /* An ignored signal is discarded even while blocked: the signalfd would
     * never see a SIGINT or SIGHUP that nohup or '&' ignored. */
    for (size_t i = 0; i < NFORWARDED; i++)
        signal(forwarded[i], SIG_DFL);
    pid_t launcher = getpid();
    fflush(NULL);
    for (int i = 0; i < r->n; i++) {
        int out[2] = {-1, -1}, err[2] = {-1, -1};
        if (r->label && (pipe2(out, O_CLOEXEC) || pipe2(err, O_CLOEXEC))) {
            int why = errno;
            fprintf(stderr, "cdlrun: --label: cannot make the output pipes of rank %d: %s%s\n", i,
                    strerror(why), why == EMFILE || why == ENFILE
                                     ? " (--label keeps 2 descriptors per rank until it "
                                       "exits: raise 'ulimit -n' or drop --label)"
                                     : "");
            return -1;
        }
        pid_t pid = fork();
        if (pid < 0) {
            fprintf(stderr, "cdlrun: cannot start rank %d: %s\n", i, strerror(errno));
            return -1;
        }
        if (pid == 0)
            exec_rank(r, i, &old, launcher, out[1], err[1]);
        setpgid(pid, pid);   /* also here: no race with signals sent right away */
        r->ranks[i] = (rank_proc){pid, out[0], err[0], 1, 0, r->ranks[i].cpus};
        if (r->label) {
            close(out[1]);
            close(err[1]);
        }
        if (r->verbose) {
            char cpus[256] = "any";
            if (r->bind_cores)
                cpus_format(&r->ranks[i].cpus, cpus, sizeof cpus);
            fprintf(stderr, "cdlrun: rank %d: pid %d, CPUs %s\n", i, (int)pid, cpus);
        }
    }
    close(r->listen_fd);   /* rank 0 owns it now */
    r->listen_fd = -1;
    return 0;
}
