/* Rank discovery: where this process stands among its peers.
 *
 * Order (docs/rank-contract.md): the contract variables (RANK and
 * WORLD_SIZE; set by cdlrun, srun --cdl-ddp, torchrun) -> PMIx (srun
 * --mpi=pmix, mpirun) -> Slurm's SLURM_* of an srun step -> a single
 * process. torchrun exports the contract's names itself; it is reported as
 * source "torchrun" (TORCHELASTIC_RUN_ID set, CDL_LAUNCHER unset).
 *
 * Node identity always comes from the launcher's node id (GROUP_RANK,
 * SLURM_NODEID, PMIX_NODEID), never from the hostname, so emulated nodes on
 * one host are distinct nodes. */
#include <limits.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cdl/cdl.h>

#include "announce.h"
#include "lib/core/log.h"
#include "boot.h"
#include "contract.h"

static const contract_names torchrun_names = {
    "torchrun", "torchrun's variables", "RANK", "WORLD_SIZE", "LOCAL_RANK",
    "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE",
};
static const contract_names slurm_names = {
    "slurm", "Slurm's variables", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID",
    "SLURM_STEP_TASKS_PER_NODE", "SLURM_NODEID", "SLURM_NNODES",
};
static const contract_names pmix_names = {
    "pmix", "PMIx", "PMIX_RANK", "PMIX_JOB_SIZE", "PMIX_LOCAL_RANK",
    "PMIX_LOCAL_SIZE", "PMIX_NODEID", "PMIX_NUM_NODES",
};

_Static_assert(CONTRACT_EXIT_REQUEUE == CDL_EXIT_REQUEUE, "one requeue exit code");

static int env_set(const char *name)
{
    const char *s = getenv(name);
    return s && *s;
}

static int contract_fail(const contract_err *e)
{
    return cdl_error("%s", e->msg);
}

/* 1 and *out when name holds an integer in [lo, INT_MAX], 0 when unset, -1
 * with an error naming the variable and its value otherwise. */
static int env_int(const char *name, int lo, int *out)
{
    const char *s = getenv(name);
    contract_err e;
    long v;
    if (!s || !*s)
        return 0;
    if (contract_parse_int(name, s, lo, INT_MAX, &v, &e))
        return contract_fail(&e);
    *out = (int)v;
    return 1;
}

/* Like env_int, but the value must be given. */
static int env_int_req(const char *name, int lo, int *out, const char *why)
{
    int r = env_int(name, lo, out);
    if (r == 0)
        return cdl_error("%s is not set but %s: export it too (docs/rank-contract.md)", name, why);
    return r < 0 ? -1 : 0;
}

static void env_str(const char *name, char *out, size_t len)
{
    const char *s = getenv(name);
    if (s && *s)
        snprintf(out, len, "%s", s);
}

static void master_from_env(cdl_rank_info *info)
{
    env_str(CDL_ENV_MASTER_ADDR, info->master_addr, sizeof info->master_addr);
}

static int port_from_env(cdl_rank_info *info)
{
    int port;
    int r = env_int(CDL_ENV_MASTER_PORT, 0, &port);
    if (r < 0)
        return -1;
    if (r == 1) {
        if (port > 65535)
            return cdl_error(CDL_ENV_MASTER_PORT "=%d is not a TCP port (1-65535)", port);
        info->master_port = port;
    }
    return 0;
}

/* The contract as the process environment holds it; torchrun spells the
 * node count GROUP_WORLD_SIZE. */
static const char *contract_getenv(void *torchrun, const char *name)
{
    if (torchrun && !strcmp(name, CDL_ENV_NNODES))
        name = "GROUP_WORLD_SIZE";
    const char *s = getenv(name);
    return s && *s ? s : NULL;
}

static void info_of(const contract *c, cdl_rank_info *info)
{
    info->rank = c->rank;
    info->world = c->world;
    info->local_rank = c->local_rank;
    info->local_world = c->local_world;
    info->node_rank = c->node_rank;
    info->nnodes = c->nnodes;
    info->replicas_per_gpu = c->replicas_per_gpu;
    /* The port cdl's own store uses: a launcher that holds one for rank 0
     * (cdlrun) leaves MASTER_PORT to the program (PyTorch binds it). */
    info->master_port = c->store_port ? c->store_port : c->master_port;
    snprintf(info->master_addr, sizeof info->master_addr, "%s", c->master_addr);
    snprintf(info->job_id, sizeof info->job_id, "%s", c->job_id);
}

static void contract_of(const cdl_rank_info *info, contract *c)
{
    memset(c, 0, sizeof *c);
    c->rank = info->rank;
    c->world = info->world;
    c->local_rank = info->local_rank;
    c->local_world = info->local_world;
    c->node_rank = info->node_rank;
    c->nnodes = info->nnodes;
    c->replicas_per_gpu = info->replicas_per_gpu;
    c->master_port = info->master_port;
}

/* RANK/WORLD_SIZE and the rest of the contract (or torchrun's spelling). */
static int from_contract(cdl_rank_info *info, int torchrun)
{
    contract c;
    contract_err e;
    if (contract_decode(&c, contract_getenv, torchrun ? (void *)"" : NULL, &e))
        return contract_fail(&e);
    info_of(&c, info);
    if (torchrun && !c.job_id[0])
        env_str("TORCHELASTIC_RUN_ID", info->job_id, sizeof info->job_id);
    info->source = torchrun ? torchrun_names.source : contract_names_of_contract.source;
    return 0;
}

/* An srun step (not the batch script, which also has SLURM_PROCID=0). */
static int slurm_step(void)
{
    return env_set("SLURM_PROCID") && (env_set("SLURM_STEP_ID") || env_set("SLURM_STEPID"));
}

static int from_slurm(cdl_rank_info *info)
{
    const char *world_var = env_set("SLURM_STEP_NUM_TASKS") ? "SLURM_STEP_NUM_TASKS" : "SLURM_NTASKS";
    const char *nn_var = env_set("SLURM_STEP_NUM_NODES") ? "SLURM_STEP_NUM_NODES" : "SLURM_NNODES";
    if (env_int_req("SLURM_PROCID", 0, &info->rank, "this is a Slurm step") ||
        env_int_req(world_var, 1, &info->world, "SLURM_PROCID is"))
        return -1;
    int r = env_int(nn_var, 1, &info->nnodes);
    if (r < 0)
        return -1;
    if (r == 0)
        info->nnodes = 1;
    r = env_int("SLURM_NODEID", 0, &info->node_rank);
    if (r < 0 || (r == 0 && info->nnodes > 1 &&
                  env_int_req("SLURM_NODEID", 0, &info->node_rank, "the step spans several nodes")))
        return -1;
    r = env_int("SLURM_LOCALID", 0, &info->local_rank);
    if (r < 0)
        return -1;
    if (r == 0) {
        if (info->nnodes > 1)
            return env_int_req("SLURM_LOCALID", 0, &info->local_rank, "the step spans several nodes");
        info->local_rank = info->rank;
    }
    const char *tpn_var = env_set("SLURM_STEP_TASKS_PER_NODE") ? "SLURM_STEP_TASKS_PER_NODE"
                                                               : "SLURM_TASKS_PER_NODE";
    const char *tpn = getenv(tpn_var);
    contract_err e;
    if (tpn && *tpn) {
        if (contract_tasks_on_node(tpn, info->node_rank, &info->local_world, &e))
            return cdl_error("%s='%.64s' %s (SLURM_NODEID)", tpn_var, tpn, e.msg);
    } else if (info->nnodes == 1) {
        info->local_world = info->world;
    } else {
        return cdl_error("SLURM_STEP_TASKS_PER_NODE is not set but the step spans %d nodes",
                         info->nnodes);
    }
    if (env_int(CDL_ENV_REPLICAS_PER_GPU, 1, &info->replicas_per_gpu) < 0)
        return -1;
    master_from_env(info);
    if (!info->master_addr[0]) {
        const char *nodes = getenv("SLURM_STEP_NODELIST");
        if (!nodes || !*nodes)
            nodes = getenv("SLURM_NODELIST");
        if (nodes && contract_hostlist_nth(nodes, 0, info->master_addr,
                                           sizeof info->master_addr, &e) != 0)
            return cdl_error("MASTER_ADDR from SLURM_STEP_NODELIST: %s", e.msg);
    }
    if (port_from_env(info))
        return -1;
    const char *resv = getenv("SLURM_STEP_RESV_PORTS");
    if (!info->master_port && resv && *resv &&
        contract_resv_port(resv, &info->master_port, &e))   /* the first reserved port */
        return contract_fail(&e);
    const char *job = getenv("SLURM_JOB_ID");
    const char *step = getenv("SLURM_STEP_ID");
    if (!step)
        step = getenv("SLURM_STEPID");
    snprintf(info->job_id, sizeof info->job_id, "%s.%s", job ? job : "0", step);
    env_str(CDL_ENV_JOB_ID, info->job_id, sizeof info->job_id);
    info->source = slurm_names.source;
    return 0;
}

static void single(cdl_rank_info *info)
{
    info->rank = 0;
    info->world = info->local_world = info->nnodes = 1;
    info->local_rank = info->node_rank = 0;
    info->source = "single";
    master_from_env(info);
    env_str(CDL_ENV_JOB_ID, info->job_id, sizeof info->job_id);
}

/* No source above took this process, yet an MPI launcher started it as one
 * of several: PMIx's variables in a libcdl built without PMIx (mpirun -n 2,
 * or srun --mpi=pmix run by mpirun's daemons), or a launcher that speaks
 * only PMI (MPICH's hydra). Every rank would train alone as rank 0 of 1,
 * all writing one --ckpt-dir: an error that says what to do instead. */
static int launched_unreadable(void)
{
    static const char *const sizes[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE"};
    const char *by = NULL, *val = "";
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes && !by; i++) {
        const char *s = getenv(sizes[i]);
        if (s && *s && strcmp(s, "1") && strcmp(s, "0"))
            by = sizes[i], val = s;
    }
    if (!by && (env_set("PMIX_RANK") || env_set("PMIX_NAMESPACE")))
        by = env_set("PMIX_RANK") ? "PMIX_RANK" : "PMIX_NAMESPACE", val = getenv(by);
    if (!by)
        return 0;
    return cdl_error("an MPI launcher (mpirun, or srun --mpi) started this process (%s=%.32s) "
                     "but this libcdl cannot read its rank from it (%s): every rank would "
                     "train alone; rebuild cdl with libpmix-dev, start the ranks with cdlrun "
                     "or srun --cdl-ddp instead, or give each its rank (RANK, WORLD_SIZE; "
                     "docs/rank-contract.md); to train each process alone on purpose, use "
                     "--dist-backend single", by, val,
#ifdef HAVE_PMIX
                     "it speaks PMI, not PMIx"
#else
                     "built without PMIx"
#endif
                     );
}

static const contract_names *names_of(const char *source)
{
    if (!strcmp(source, "torchrun"))
        return &torchrun_names;
    if (!strcmp(source, "slurm"))
        return &slurm_names;
    if (!strcmp(source, "pmix"))
        return &pmix_names;
    return &contract_names_of_contract;
}

/* The values must describe a possible layout; errors name the variables. */
static int validate(const cdl_rank_info *in)
{
    contract c;
    contract_err e;
    contract_of(in, &c);
    return contract_check(&c, names_of(in->source), &e) ? contract_fail(&e) : 0;
}

/* Set once rank 0 has said where its ranks came from: a program that calls
 * cdl_rank_discover and then cdl_train_run (templates/train.c) discovers
 * twice but the line is about the process, so it is printed once. */
static atomic_flag announced = ATOMIC_FLAG_INIT;

int rank_discover(cdl_rank_info *info, int announce)
{
    memset(info, 0, sizeof *info);
    info->replicas_per_gpu = 1;
    int rc;
    if (env_set(CDL_ENV_RANK) || env_set(CDL_ENV_WORLD_SIZE)) {
        int torchrun = env_set("TORCHELASTIC_RUN_ID") && !env_set(CDL_ENV_LAUNCHER);
        rc = from_contract(info, torchrun);
    } else if (pmix_present()) {
        rc = pmix_discover(info);
    } else if (slurm_step()) {
        rc = from_slurm(info);
    } else if (launched_unreadable()) {
        rc = -1;
    } else {
        single(info);
        rc = 0;
    }
    if (rc == 0)
        rc = validate(info);
    if (rc != 0)
        return -1;
    if (announce && info->rank == 0 && info->world > 1 && !atomic_flag_test_and_set(&announced)) {
        const char *launcher = getenv(CDL_ENV_LAUNCHER);
        int l = launcher && *launcher;
        log_line(CDL_LOG_INFO, stderr, "cdl: rank 0 of %d: ranks from %s%s%s%s, %d node%s%s%s%s",
                 info->world,
                names_of(info->source)->what, l ? " (launcher " : "", l ? launcher : "",
                l ? ")" : "", info->nnodes, info->nnodes == 1 ? "" : "s",
                info->job_id[0] ? ", job '" : "", info->job_id, info->job_id[0] ? "'" : "");
    }
    return 0;
}

int cdl_rank_discover(cdl_rank_info *info)
{
    if (!info)
        return cdl_error("cdl_rank_discover: info is NULL");
    return rank_discover(info, 1);
}
