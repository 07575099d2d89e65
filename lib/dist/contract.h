/* The rank contract: the environment variables through which the Slurm
 * plugin (srun --cdl-ddp), cdlrun and any other launcher tell each process
 * where it stands, and the one implementation of its rules (contract.c):
 *
 *   contract_encode   struct -> variables, from one table (plugin, cdlrun)
 *   contract_decode   variables -> struct, strict (libcdl's discovery)
 *   contract_check    is the layout possible? errors name the variables
 *   hostlists         Slurm's syntax: "a[08-10]b,gpu[01-02,05]-x[1-2]"
 *   GPU slot          which GPU a local rank uses (with MPS packing too)
 *   ports, tokens     MASTER_PORT choice, the per-run store secret
 *   exit codes        what a launcher returns when ranks asked for requeue
 *
 * Pure C with no dependency beyond libc: it is compiled into libcdl, cdlrun
 * and, statically, the SPANK plugin that runs inside slurmstepd. Errors go
 * into a contract_err the caller turns into cdl_error() or spk_error().
 * docs/rank-contract.md describes the variables. */
#ifndef CDL_DIST_CONTRACT_H
#define CDL_DIST_CONTRACT_H

#include <stddef.h>
#include <stdint.h>

#define CDL_ENV_RANK              "RANK"              /* global rank, 0..WORLD_SIZE-1 */
#define CDL_ENV_WORLD_SIZE        "WORLD_SIZE"        /* number of ranks */
#define CDL_ENV_LOCAL_RANK        "LOCAL_RANK"        /* rank among this node's ranks */
#define CDL_ENV_LOCAL_WORLD_SIZE  "LOCAL_WORLD_SIZE"  /* ranks on this node */
#define CDL_ENV_LOCAL_SIZE        "LOCAL_SIZE"        /* the same, DeepSpeed's name */
#define CDL_ENV_GROUP_RANK        "GROUP_RANK"        /* node index (torchrun's name) */
#define CDL_ENV_NODE_RANK         "NODE_RANK"         /* node index (Lightning's name) */
#define CDL_ENV_MASTER_ADDR       "MASTER_ADDR"       /* host of rank 0 */
#define CDL_ENV_MASTER_PORT       "MASTER_PORT"       /* port rank 0 binds for the store */
#define CDL_ENV_NNODES            "CDL_NNODES"        /* number of nodes */
#define CDL_ENV_REPLICAS_PER_GPU  "CDL_REPLICAS_PER_GPU" /* consecutive local ranks sharing a GPU */
#define CDL_ENV_GPU_BIND          "CDL_GPU_BIND"      /* "task": the launcher gave each task its own
                                                       * GPUs; a rank opens its first visible one */
#define CDL_ENV_JOB_ID            "CDL_JOB_ID"        /* unique per run (job.step under Slurm) */
#define CDL_ENV_LAUNCHER          "CDL_LAUNCHER"      /* "slurm", "cdlrun": who exported the contract */
#define CDL_ENV_TIMEOUT           "CDL_TIMEOUT"       /* seconds any cross-process wait may take */
#define CDL_ENV_CONTRACT_VERSION  "CDL_CONTRACT_VERSION" /* version of the writer's contract */

/* The TCP store (bootstrap without PMIx) served by rank 0. */
#define CDL_ENV_STORE_TOKEN       "CDL_STORE_TOKEN"   /* per-run secret a client must present */
#define CDL_ENV_STORE_PORT        "CDL_STORE_PORT"    /* the store's port when it is not MASTER_PORT:
                                                       * cdlrun holds it for rank 0 and leaves
                                                       * MASTER_PORT free for the program's own
                                                       * rendezvous (PyTorch's TCPStore binds it) */
#define CDL_ENV_STORE_FD          "CDL_STORE_FD"      /* rank 0 only: an already listening socket on
                                                       * the store's port, inherited from the launcher */

/* Raised whenever a variable is added, removed or changes meaning: a plugin
 * and a library of different versions then say so instead of misreading. */
#define CDL_CONTRACT_VERSION 5

/* Default of CDL_TIMEOUT, in seconds. */
#define CDL_DEFAULT_TIMEOUT 300
#define CDL_MAX_TIMEOUT 1e7   /* seconds: CDL_TIMEOUT and cdlrun --timeout */

/* Exit code of a rank (and of cdlrun) that checkpointed after SIGUSR1 or
 * SIGTERM and wants the job requeued: EX_TEMPFAIL, as CDL_EXIT_REQUEUE in
 * lib/cdl/train.h (checked in contract.c). */
#define CONTRACT_EXIT_REQUEUE 75

/* Length of a store token made by contract_token_make (hex, 128 bits). */
#define CONTRACT_TOKEN_LEN 32

typedef struct contract_err {
    char msg[512];
} contract_err;

/* Writes the message into e (printf-style); returns -1. */
int contract_errorf(contract_err *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* One process's place, as the variables say it. */
typedef struct contract {
    int version;                   /* CDL_CONTRACT_VERSION; 0 when not given */
    int rank, world;               /* RANK, WORLD_SIZE */
    int local_rank, local_world;   /* LOCAL_RANK, LOCAL_WORLD_SIZE */
    int node_rank, nnodes;         /* GROUP_RANK = NODE_RANK, CDL_NNODES */
    int replicas_per_gpu;          /* CDL_REPLICAS_PER_GPU, >= 1 */
    char gpu_bind[8];              /* CDL_GPU_BIND: "task" or "" (the GPU slot rule) */
    int master_port;               /* MASTER_PORT, 0: none */
    int store_port;                /* CDL_STORE_PORT, 0: the store binds MASTER_PORT */
    int threads;                   /* OMP_NUM_THREADS = MKL_NUM_THREADS, 0: leave them alone */
    char master_addr[256];         /* MASTER_ADDR, "": none */
    char job_id[64];               /* CDL_JOB_ID */
    char launcher[16];             /* CDL_LAUNCHER */
    char token[80];                /* CDL_STORE_TOKEN, "": none */
} contract;

/* ------------------------------------------------------------ the table */

/* One variable of the encoder. To export a new variable: a field in
 * struct contract, a row in contract.c's table (and docs/rank-contract.md). */
enum contract_kind { CONTRACT_INT, CONTRACT_STR };
enum {
    CONTRACT_OPTIONAL = 1,     /* not written when 0 or "" */
    CONTRACT_USER_WINS = 2,    /* a tuning knob: a value the task already has is kept */
};
typedef struct contract_var {
    const char *name;
    enum contract_kind kind;
    size_t offset;             /* into struct contract */
    int flags;
} contract_var;

/* The table, and the variables of other launchers (torchrun's, the store
 * socket) that a launcher must remove so no stale value survives. */
const contract_var *contract_vars(size_t *n);
extern const char *const contract_foreign_vars[];   /* NULL-terminated */

/* Sets one variable; user_wins: keep a value the process already has.
 * Returns 0, or -1 with the reason in e. */
typedef int (*contract_set_fn)(void *ctx, const char *name, const char *value, int user_wins,
                               contract_err *e);
/* Gets one variable: its value, or NULL when unset or empty. */
typedef const char *(*contract_get_fn)(void *ctx, const char *name);

/* Writes every row of the table for c (checked first with contract_check)
 * and CDL_CONTRACT_VERSION. */
int contract_encode(const contract *c, contract_set_fn set, void *ctx, contract_err *e);

/* Reads the variables strictly: integers in range, every error naming the
 * variable and value. RANK and WORLD_SIZE are required; on one node the
 * LOCAL_* and GROUP_RANK default to the global values and 0, on several
 * they are required. A CDL_CONTRACT_VERSION other than ours is an error. */
int contract_decode(contract *c, contract_get_fn get, void *ctx, contract_err *e);

/* The variable names of one source of rank information, for messages. */
typedef struct contract_names {
    const char *source;     /* "contract", "slurm", ... */
    const char *what;       /* "the contract variables" */
    const char *rank, *world, *local_rank, *local_world, *node, *nnodes;
} contract_names;
extern const contract_names contract_names_of_contract;

/* The layout must be possible (rank < world, one node means local = global,
 * replicas of a GPU are ranks of one node, ...). */
int contract_check(const contract *c, const contract_names *nm, contract_err *e);

/* ------------------------------------------------------------ numbers */

/* Strict decimal: all of s, no sign or spaces, in [lo, hi]. 0, or -1 with
 * "NAME='VALUE' is not an integer in [lo, hi]" in e. */
int contract_parse_int(const char *name, const char *s, long lo, long hi, long *out,
                       contract_err *e);

/* ------------------------------------------------------------ hostlists */

/* Host `index` (0-based) of a Slurm host list, in Slurm's order: items are
 * separated by commas outside brackets; an item is literal text and bracket
 * groups of numbers and ranges ("[01-03,7]"), zero-padded to the width of
 * each range's first number; with several groups the last varies fastest:
 * "a[08-10]b" is a08b,a09b,a10b and "r[1-2]n[1-2]" is r1n1,r1n2,r2n1,r2n2.
 * Returns 0, 1 when the list has fewer hosts, -1 when it is malformed. */
int contract_hostlist_nth(const char *list, long index, char *out, size_t len, contract_err *e);

/* Number of hosts of the list, or -1 when malformed. */
long contract_hostlist_count(const char *list, contract_err *e);

/* ------------------------------------------------------------ Slurm values */

/* Entry `index` of a tasks-per-node list ("2(x3),1" is 2,2,2,1) into *out;
 * the whole list is checked, counts and repeats in 1..2^20. The message
 * in e continues "VARIABLE='list' ...". */
int contract_tasks_on_node(const char *list, int index, int *out, contract_err *e);

/* The first port of SLURM_STEP_RESV_PORTS ("12000-12003", "12000,12007"):
 * every number must be a TCP port (1-65535), ranges ascending. */
int contract_resv_port(const char *resv, int *port, contract_err *e);

/* MASTER_PORT without a reservation: lo + (jobid x k + stepid) mod span,
 * k coprime to the span and near 0.618 x span: the same on every node
 * without any exchange, different for the steps of one job (up to the
 * span), different for the steps 0 of any two jobs whose ids differ by less
 * than the span (jobs submitted together), and neighbouring ids about
 * 0.38 x span apart. Jobs further apart may meet (on average one pair in
 * the span): rank 0's store then fails to bind with a message (docs/admin.md:
 * reserve ports). */
int contract_port_hash(uint32_t jobid, uint32_t stepid, int lo, int hi);

/* A MASTER_PORT a launcher picks on one host and releases until the
 * program binds it (cdlrun, for PyTorch's rank 0): the draw r mapped onto
 * the ports above the kernel's ephemeral range (eph_hi: the top of
 * ip_local_port_range) and below 65535 - 64 (room for the store's
 * alternates). The kernel gives none of those to a connection or to
 * bind(0); an ephemeral port (what bind(0) returns) could be taken by any
 * outgoing connection of the host before the program bound it. 0 when
 * fewer than 1000 such ports remain: the caller then asks the kernel. */
int contract_quiet_port(int eph_hi, uint32_t r);

/* ------------------------------------------------------------ GPUs */

/* The GPU slot of a local rank: replicas_per_gpu consecutive local ranks
 * share one GPU, so slot = local_rank / replicas_per_gpu (replicas 1: each
 * rank its own). The index is into the GPUs visible to the step on this
 * node, in CUDA_VISIBLE_DEVICES order: the plugin binds near that GPU and
 * cdl-train opens that one. */
int contract_gpu_slot(int local_rank, int replicas_per_gpu);

/* Whether CDL_GPU_BIND's value (NULL: unset) says the launcher gave each
 * task its own GPUs (srun --gpus-per-task, --gpu-bind=map_gpu:...): the
 * task's CUDA_VISIBLE_DEVICES lists its GPUs only, so its first visible
 * GPU is its own and the slot rule does not apply. */
int contract_gpu_bound_to_task(const char *gpu_bind);

/* The same, -1 when the slot is not below ngpus (more ranks than GPUs). */
int contract_task_gpu(int local_rank, int replicas_per_gpu, int ngpus);

/* CPU sharing: member j of k tasks that share `units` cores (in local-rank
 * order) gets cores [lo, hi) = [j*U/k, (j+1)*U/k), or core j*U/k alone when
 * U < k: neighbouring ranks (the replicas of one GPU) share a core, and no
 * core is left out. Both binding planners (bind.h) use it. */
void contract_share(int j, int k, int units, int *lo, int *hi);

/* ------------------------------------------------------------ secrets */

/* CONTRACT_TOKEN_LEN hex digits from getrandom(); out holds one more. */
int contract_token_make(char *out, size_t len, contract_err *e);

#endif
