/* cdlrun's parts: the run description, starting ranks, CPU binding and the
 * supervision loop (labelled output, signals, failure handling). */
#ifndef CDL_LAUNCHER_LAUNCH_H
#define CDL_LAUNCHER_LAUNCH_H

#include <sched.h>
#include <stddef.h>
#include <sys/types.h>

#include "lib/dist/contract.h"

#define CDLRUN_MAX_RANKS 1024
#define CDLRUN_KILL_GRACE 3.0      /* seconds between SIGTERM and SIGKILL when stopping ranks */

typedef struct rank_proc {
    pid_t pid;                     /* also its process group */
    int out_fd, err_fd;            /* read ends with --label, else -1 */
    int running;
    int status;                    /* wait status once exited */
    cpu_set_t cpus;                /* --bind cores */
} rank_proc;

typedef struct run {
    int n;
    int label, bind_cores, verbose;
    int bind_auto;                 /* --bind auto (default): cores when every rank gets its own */
    double timeout;                /* --timeout: exported as CDL_TIMEOUT (0 = unset) */
    char **argv;                   /* PROGRAM ARGS... */
    int listen_fd, port;           /* the store socket handed to rank 0: CDL_STORE_PORT */
    int master_port;               /* MASTER_PORT: free, for the program's own rendezvous */
    char token[CONTRACT_TOKEN_LEN + 1], job_id[64];
    rank_proc *ranks;
} run;

/* Plans one CPU set per rank over the CPUs this process may use: the
 * plugin's `cores` plan (lib/dist/bind.h) when built with hwloc, else the
 * same block rule over the affinity mask's CPUs. With more ranks than
 * cores, neighbouring ranks share a core. Returns the number of cores
 * found, or -1 with a message in err. */
int bind_plan_cpus(int n, cpu_set_t *sets, char *err, size_t errlen);
/* "0-3,8" for a set. */
void cpus_format(const cpu_set_t *set, char *buf, size_t len);

/* Binds the store port, picks MASTER_PORT, makes the token and job id, starts all ranks. */
int launch_ranks(run *r);

/* Waits for the ranks, labelling their output and forwarding signals;
 * returns cdlrun's exit code (docs/rank-contract.md). */
int supervise(run *r);

/* After the ranks have exited: removes the shared-memory segments of job_id
 * left in /dev/shm (a rank killed before all had opened them); returns how
 * many. */
int shm_sweep(const char *job_id);

#endif
