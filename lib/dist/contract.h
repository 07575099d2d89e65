/* The rank contract: the environment variables through which the Slurm
 * plugin (srun --cdl-ddp), cdlrun and any other launcher tell each process
 * where it stands. The names PyTorch users know, plus CDL_* for what they
 * lack. Shared verbatim by lib/, spank/ and launcher/ (docs/rank-contract.md).
 * Plain macros and a pure helper: no dependencies, safe inside slurmstepd. */
#ifndef CDL_DIST_CONTRACT_H
#define CDL_DIST_CONTRACT_H

#define CDL_ENV_RANK              "RANK"              /* global rank, 0..WORLD_SIZE-1 */
#define CDL_ENV_WORLD_SIZE        "WORLD_SIZE"        /* number of ranks */
#define CDL_ENV_LOCAL_RANK        "LOCAL_RANK"        /* rank among this node's ranks */
#define CDL_ENV_LOCAL_WORLD_SIZE  "LOCAL_WORLD_SIZE"  /* ranks on this node */
#define CDL_ENV_GROUP_RANK        "GROUP_RANK"        /* node index (torchrun's name) */
#define CDL_ENV_NODE_RANK         "NODE_RANK"         /* node index (Lightning's name) */
#define CDL_ENV_MASTER_ADDR       "MASTER_ADDR"       /* host of rank 0 */
#define CDL_ENV_MASTER_PORT       "MASTER_PORT"       /* port rank 0 binds for the store */
#define CDL_ENV_NNODES            "CDL_NNODES"        /* number of nodes */
#define CDL_ENV_REPLICAS_PER_GPU  "CDL_REPLICAS_PER_GPU" /* consecutive local ranks sharing a GPU */
#define CDL_ENV_JOB_ID            "CDL_JOB_ID"        /* unique per run (job.step under Slurm) */
#define CDL_ENV_LAUNCHER          "CDL_LAUNCHER"      /* "slurm", "cdlrun": who exported the contract */
#define CDL_ENV_TIMEOUT           "CDL_TIMEOUT"       /* seconds any cross-process wait may take */

/* The TCP store (bootstrap without PMIx) served by rank 0. */
#define CDL_ENV_STORE_TOKEN       "CDL_STORE_TOKEN"   /* per-run secret a client must present */
#define CDL_ENV_STORE_FD          "CDL_STORE_FD"      /* rank 0 only: an already listening socket on
                                                       * MASTER_PORT, inherited from the launcher */

/* Default of CDL_TIMEOUT, in seconds. */
#define CDL_DEFAULT_TIMEOUT 300

#endif
