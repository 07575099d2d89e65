/* The rank contract (lib/dist/contract.h) computed from what Slurm says about
 * the step and the task. Pure: no Slurm calls, no environment access; the
 * name resolver is passed in. */
#ifndef CDL_SPANK_CONTRACT_H
#define CDL_SPANK_CONTRACT_H

#include <stddef.h>
#include <stdint.h>

#include "spank/conf.h"

/* The step as slurmstepd sees it on this node. */
struct spk_step {
    uint32_t jobid, stepid;
    uint32_t array_job, array_task; /* S_JOB_ARRAY_ID, S_JOB_ARRAY_TASK_ID; 0, 0: no array */
    uint32_t nnodes, nodeid;        /* nodes of the step, this node's index */
    uint32_t ntasks, local_tasks;   /* tasks of the step, tasks on this node */
    uint32_t cpus_per_task;         /* 1 under --overcommit */
    const char *nodelist;           /* SLURM_STEP_NODELIST, e.g. "n[1-2]" */
    const char *distribution;       /* SLURM_DISTRIBUTION or NULL */
    const char *resv_ports;         /* SLURM_STEP_RESV_PORTS or NULL */
    int replicas_per_gpu;           /* 1 unless --cdl-mps packs replicas */
    int gpu_bind_task;              /* Slurm gave each task its own GPUs
                                     * (SLURMD_TRES_BIND): CDL_GPU_BIND=task */
};

/* The values shared by every task of the step, computed once per node. */
struct spk_step_contract {
    char master_node[SPK_VALUE_MAX];   /* Slurm name of task 0's node */
    char master_addr[SPK_VALUE_MAX];   /* what MASTER_ADDR says (admin policy) */
    int master_port;
    int port_reserved;                 /* port from SLURM_STEP_RESV_PORTS */
    char token[80];                    /* CDL_STORE_TOKEN for every task, "": none */
};

/* Resolves a host name to a numeric address; 0 or -1 with spk_error(). */
typedef int (*spk_resolve_fn)(const char *name, char *addr, size_t len);

/* getaddrinfo(): the first IPv4 address, else the first IPv6 one. */
int spk_resolve_host(const char *name, char *addr, size_t len);

/* Task 0 of a block, cyclic or plane distribution runs on the first node of
 * the step's node list (the list Slurm sorts); with -m arbitrary no node can
 * tell without asking the others, so that is refused with a message. */
int spk_contract_step(const struct spk_conf *conf, const struct spk_step *step,
                      spk_resolve_fn resolve, struct spk_step_contract *out);

#define SPK_ENV_MAX 40
struct spk_envvar {
    char name[40];
    char value[SPK_VALUE_MAX];
    int keep_user;   /* a value already in the task's environment wins */
    int skip;        /* set by spk_env_keep_user(): leave the task's value */
    int unset;       /* remove the variable from the task's environment */
};
struct spk_env {
    int n;
    struct spk_envvar v[SPK_ENV_MAX];
};

void spk_env_init(struct spk_env *env);
/* Appends name=value; keep_user says whether a value the user set wins. */
int spk_env_add(struct spk_env *env, const char *name, int keep_user, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* Appends "remove name from the task's environment". */
int spk_env_unset(struct spk_env *env, const char *name);
const char *spk_env_get(const struct spk_env *env, const char *name);

/* The contract of one task, written by lib/dist/contract.c's encoder:
 * RANK = global task id, WORLD_SIZE = tasks of the step, LOCAL_RANK,
 * LOCAL_WORLD_SIZE, GROUP_RANK = NODE_RANK = node index, MASTER_ADDR,
 * MASTER_PORT, CDL_NNODES, CDL_REPLICAS_PER_GPU, CDL_JOB_ID =
 * "<jobid>.<stepid>", CDL_LAUNCHER = slurm, CDL_CONTRACT_VERSION, the
 * step's CDL_STORE_TOKEN, OMP_NUM_THREADS = CPUs per task; plus removals of
 * every other contract variable (a RANK exported in the submit shell must
 * not survive); plus torchrun's PET_NNODES = tasks of the step,
 * PET_NODE_RANK = RANK, PET_MASTER_ADDR, PET_MASTER_PORT (torchrun.h).
 * Inconsistent input is an error. */
int spk_contract_task(const struct spk_step *step, const struct spk_step_contract *sc,
                      uint32_t local_id, uint32_t global_id, struct spk_env *out);

/* Marks the tuning knobs (OMP_NUM_THREADS, ...) whose value the user set
 * (lookup returns the task's current value or NULL, valid until its next
 * call): those are kept. Contract variables are always the plugin's.
 * Returns the number of variables kept. */
typedef const char *(*spk_lookup_fn)(void *ctx, const char *name);
int spk_env_keep_user(struct spk_env *env, spk_lookup_fn lookup, void *ctx);

#endif
