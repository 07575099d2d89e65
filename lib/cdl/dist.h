/* Data-parallel runtime: where this process stands among its peers (the rank
 * contract, docs/rank-contract.md) and the collectives over them.
 *
 * The same contract is exported by the Slurm plugin (srun --cdl-ddp) and by
 * cdlrun, and read here; discovery order: contract variables -> PMIx ->
 * Slurm's SLURM_* -> torchrun's variables -> a single process.
 */
#ifndef CDL_DIST_H
#define CDL_DIST_H

#include <stddef.h>
#include <stdint.h>

#include <cdl/backend.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct cdl_rank_info {
    int rank, world;               /* RANK, WORLD_SIZE */
    int local_rank, local_world;   /* LOCAL_RANK, LOCAL_WORLD_SIZE */
    int node_rank, nnodes;         /* GROUP_RANK / NODE_RANK, CDL_NNODES */
    int replicas_per_gpu;          /* CDL_REPLICAS_PER_GPU (1 unless MPS-packed) */
    char master_addr[256];         /* MASTER_ADDR */
    int master_port;               /* the TCP store's port: CDL_STORE_PORT when the
                                      launcher gives one (cdlrun), else MASTER_PORT;
                                      0 if none */
    char job_id[64];               /* CDL_JOB_ID: identifies the run (shm names, store token) */
    const char *source;            /* "contract", "pmix", "slurm", "torchrun", "single" */
} cdl_rank_info;

/* Fills *info from the environment (and PMIx when started by a PMIx server).
 * Inconsistent values (RANK >= WORLD_SIZE, ...) are an error naming them.
 * Rank 0 of a world of several ranks prints "cdl: rank 0 of N: ranks from
 * ..." to stderr once per process (a later cdl_train_run does not repeat it). */
int cdl_rank_discover(cdl_rank_info *info);

/* CPU threads for this rank when the user gave no count:
 * cdl_default_threads(), except that ranks of one node free to run on the
 * same CPUs (mpirun -n 4 without binding, OMP_NUM_THREADS and
 * SLURM_CPUS_PER_TASK unset) take a share each, the affinity mask's CPUs /
 * local_world (at least 1). cdl_train_run, cdl-eval and cdl-predict use it;
 * NULL is a single process. */
int cdl_rank_threads(const cdl_rank_info *info);

/* The GPU this rank opens (rank contract 5), as a device index among the
 * `visible` ones (cdl_backend_cuda_device_count()) into *device, for
 * cdl_backend_params.device: one rank alone takes the first (-1); several
 * take local_rank / replicas_per_gpu, the slot the contract gives them, or
 * 0 when only one GPU is visible (the launcher gave each rank its own
 * CUDA_VISIBLE_DEVICES, or they share it under MPS; cdl_dist checks that
 * against the contract) or when the contract says CDL_GPU_BIND=task (Slurm
 * gave each task its own GPUs, e.g. srun --gpus-per-task=2: each task's
 * first visible GPU is its own, not its LOCAL_RANK'th). cdl_train_run,
 * cdl-eval, cdl-predict and cdl-generate use it. -1 with cdl_error when the
 * slot has no GPU. */
int cdl_rank_gpu(const cdl_rank_info *info, int visible, int *device);

typedef struct cdl_dist cdl_dist;

/* Settings of the collectives (docs/data-parallel.md names the variables a
 * program's edge reads them from). Start from cdl_dist_config_init: it sets
 * size, so a libcdl with more fields reads only those a caller knows, and
 * the defaults (zero, or -1 where zero is a setting). */
typedef struct cdl_dist_config {
    size_t size;              /* sizeof(cdl_dist_config) */
    double timeout_s;         /* CDL_TIMEOUT: bound of every wait (0 = 300 s) */
    double shm_spin_us;       /* CDL_SHM_SPIN_US: spin before sleeping, 0..1e6 (-1 = 1000 us,
                                 20 us when members share CPUs) */
    long shm_slab_kb;         /* CDL_SHM_SLAB_KB: 4..1048576 (0 = by member count) */
    long shm_small_kb;        /* CDL_SHM_SMALL_KB: small-message threshold (0 = default) */
    long shm_stream_mb;       /* CDL_SHM_STREAM_MB: streaming threshold (0 = default) */
    double store_hello_s;     /* CDL_STORE_HELLO_TIMEOUT: the TCP store's wait for a
                                 client's hello, and a rank's for the store's answer
                                 to it, (0, 3600] (0 = default) */
} cdl_dist_config;

void cdl_dist_config_init(cdl_dist_config *cfg);
/* The size of this program's struct to libcdl, as cdl_train_defaults. */
void cdl_dist_config_init_sized(cdl_dist_config *cfg, size_t size);
#define cdl_dist_config_init(cfg) cdl_dist_config_init_sized((cfg), sizeof *(cfg))

/* The defaults, then the variables above from the environment: for a
 * program's edge (cdl-train, tests, benchmarks); the library itself does not
 * read them. -1 with cdl_error naming a variable with a bad value. */
int cdl_dist_config_from_env(cdl_dist_config *cfg);
int cdl_dist_config_from_env_sized(cdl_dist_config *cfg, size_t size);
#define cdl_dist_config_from_env(cfg) cdl_dist_config_from_env_sized((cfg), sizeof *(cfg))

/* Connects to the peers: backend "auto", "shm", "mpi", "nccl", "hier"
 * (or "hier:mpi", "hier:nccl", "hier:store") or "single" (NULL or "" =
 * "auto"; any of them is "single" in a world of one rank, and any other
 * name is refused there too), with cfg (NULL = the defaults; a cfg without a size is refused).
 * cfg->timeout_s bounds every wait; a peer that does not arrive in time is
 * an error naming the missing ranks. be (may be NULL: host memory) is the
 * compute backend whose buffers the collectives take; on a GPU it picks
 * nccl or the GPU groups of MPS-packed replicas and holds pinned staging
 * memory, so destroy it only after cdl_dist_destroy. */
cdl_dist *cdl_dist_create_with(const cdl_rank_info *info, const char *backend, cdl_backend *be,
                               const cdl_dist_config *cfg);
/* The same with the defaults and timeout_s (0 = 300 s). */
cdl_dist *cdl_dist_create(const cdl_rank_info *info, const char *backend, cdl_backend *be,
                          double timeout_s);
/* cdl_dist_create_with for a program that catches SIGTERM/SIGUSR1 (scancel,
 * the time limit) itself: stop (NULL: never, as cdl_dist_create_with) says
 * 1 once the program was asked to stop; it is called from the waiting
 * thread, or a watchdog's, at least every 0.1 s while the ranks connect
 * (the bootstrap's store or PMIx fences, the shared-memory attach, NCCL's
 * communicator setup), so a signal handler's flag (volatile sig_atomic_t)
 * is enough. A stop leaves the wait at once: NULL, with an error naming the
 * rank and the wait ("rank 0 was asked to stop while it waited in barrier
 * 'fence0' ...; it stopped waiting"), and no peer counts as lost
 * (cdl_dist_peer_lost is 0). MPI_Init and MPI_Comm_split cannot be left: a
 * stop there prints that line and ends the process with status 1. Once
 * created, the cdl_dist no longer calls stop. */
cdl_dist *cdl_dist_create_stoppable(const cdl_rank_info *info, const char *backend,
                                    cdl_backend *be, const cdl_dist_config *cfg,
                                    int (*stop)(void));
void cdl_dist_destroy(cdl_dist *d);

/* 1 when a collective of this process failed because a peer rank was lost:
 * its process or node died, its connection dropped without a goodbye, or it
 * did not arrive within the timeout; 0 otherwise, also when a peer stopped
 * with an error of its own (that rank reports it and fails itself). A lost
 * peer is worth a restart from the last checkpoint: cdl-train then exits
 * with CDL_EXIT_PEER_LOST (cdl/train.h), which the requeue templates
 * requeue. Process-wide; cdl_dist_create clears it. */
int cdl_dist_peer_lost(void);

int cdl_dist_rank(const cdl_dist *d);
int cdl_dist_world(const cdl_dist *d);
const char *cdl_dist_backend_name(const cdl_dist *d);

/* In-place float32 allreduce of n elements (device memory); average divides
 * by the world size. The summation order is fixed, so every rank gets
 * bitwise-identical results. */
int cdl_dist_allreduce(cdl_dist *d, float *buf, size_t n, int average);
/* Same for doubles in host memory (metrics: loss sums, counts). */
int cdl_dist_allreduce_f64(cdl_dist *d, double *buf, size_t n);
/* Root's bytes to every rank, in the backend's memory like
 * cdl_dist_allreduce (the model's parameters at the start of DDP). */
int cdl_dist_broadcast(cdl_dist *d, void *buf, size_t bytes, int root);
int cdl_dist_barrier(cdl_dist *d);
/* Gathers `bytes` from every rank into out (world * bytes), in rank order. */
int cdl_dist_allgather(cdl_dist *d, const void *in, void *out, size_t bytes);

/* ZeRO-1 (a sharded optimizer). The part [*lo, *hi) of n elements that
 * `rank` of `world` owns: equal parts of ceil(n / world) rounded up to 64
 * elements (256-byte aligned), the last ones shorter or empty. */
void cdl_dist_shard(size_t n, int world, int rank, size_t *lo, size_t *hi);
/* In place over buf[0..n) (device memory): this rank's part (cdl_dist_shard)
 * gets the sum over the ranks, divided by the world size when average, with
 * exactly the bits cdl_dist_allreduce gives it (the same summation order on
 * every backend); the rest of buf is left undefined. Backends without a
 * native reduce-scatter run the allreduce (same result, more traffic). */
int cdl_dist_reduce_scatter(cdl_dist *d, float *buf, size_t n, int average);
/* In place: every rank's part of buf[0..n) (device memory) to every rank. */
int cdl_dist_allgather_shards(cdl_dist *d, float *buf, size_t n);

#ifdef __cplusplus
}
#endif
#endif
