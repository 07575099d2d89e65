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
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cdl/cdl.h>

#include "boot.h"
#include "contract.h"

/* The variable names of one source, for error messages. */
typedef struct src_names {
    const char *source;     /* "contract", ... */
    const char *what;       /* "the contract variables" */
    const char *rank, *world, *local_rank, *local_world, *node, *nnodes;
} src_names;

static const src_names contract_names = {
    "contract", "the contract variables", CDL_ENV_RANK, CDL_ENV_WORLD_SIZE, CDL_ENV_LOCAL_RANK,
    CDL_ENV_LOCAL_WORLD_SIZE, CDL_ENV_GROUP_RANK, CDL_ENV_NNODES,
};
static const src_names torchrun_names = {
    "torchrun", "torchrun's variables", "RANK", "WORLD_SIZE", "LOCAL_RANK",
    "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE",
};
static const src_names slurm_names = {
    "slurm", "Slurm's variables", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID",
    "SLURM_STEP_TASKS_PER_NODE", "SLURM_NODEID", "SLURM_NNODES",
};
static const src_names pmix_names = {
    "pmix", "PMIx", "PMIX_RANK", "PMIX_JOB_SIZE", "PMIX_LOCAL_RANK",
    "PMIX_LOCAL_SIZE", "PMIX_NODEID", "PMIX_NUM_NODES",
};

static int env_set(const char *name)
{
    const char *s = getenv(name);
    return s && *s;
}

/* 1 and *out when name holds an integer in [lo, INT_MAX], 0 when unset, -1
 * with an error naming the variable and its value otherwise. */
static int env_int(const char *name, int lo, int *out)
{
    const char *s = getenv(name);
    if (!s || !*s)
        return 0;
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > INT_MAX)
        return cdl_error("%s='%s' is not an integer >= %d: fix the launcher's environment "
                         "(docs/rank-contract.md)", name, s, lo);
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

/* The first host of a Slurm hostlist: "n[01-04,7],m" -> "n01". */
static void first_host(const char *list, char *out, size_t len)
{
    size_t i = 0;
    int in_bracket = 0;
    for (const char *p = list; *p && i + 1 < len; p++) {
        if (*p == '[') {
            in_bracket = 1;
            continue;
        }
        if (in_bracket && (*p == '-' || *p == ',' || *p == ']'))
            break;
        if (!in_bracket && *p == ',')
            break;
        out[i++] = *p;
    }
    out[i] = '\0';
}

/* Entry `index` of a Slurm tasks-per-node list: "2(x3),1" is 2,2,2,1. */
static int tasks_on_node(const char *list, int index)
{
    const char *p = list;
    int node = 0;
    while (*p) {
        char *end;
        long count = strtol(p, &end, 10);
        if (end == p || count <= 0)
            return -1;
        long repeat = 1;
        p = end;
        if (p[0] == '(' && p[1] == 'x') {
            repeat = strtol(p + 2, &end, 10);
            if (end == p + 2 || *end != ')' || repeat <= 0)
                return -1;
            p = end + 1;
        }
        if (index < node + repeat)
            return (int)count;
        node += (int)repeat;
        if (*p == ',')
            p++;
        else if (*p)
            return -1;
    }
    return -1;
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

/* RANK/WORLD_SIZE and the rest of the contract (or torchrun's spelling). */
static int from_contract(cdl_rank_info *info, int torchrun)
{
    const src_names *nm = torchrun ? &torchrun_names : &contract_names;
    if (env_int_req(CDL_ENV_RANK, 0, &info->rank, CDL_ENV_WORLD_SIZE " is") ||
        env_int_req(CDL_ENV_WORLD_SIZE, 1, &info->world, CDL_ENV_RANK " is"))
        return -1;
    int have_lr = env_int(CDL_ENV_LOCAL_RANK, 0, &info->local_rank);
    int have_lw = env_int(CDL_ENV_LOCAL_WORLD_SIZE, 1, &info->local_world);
    int group = 0, node = 0;
    int have_group = env_int(CDL_ENV_GROUP_RANK, 0, &group);
    int have_node = env_int(CDL_ENV_NODE_RANK, 0, &node);
    int have_nn = env_int(torchrun ? "GROUP_WORLD_SIZE" : CDL_ENV_NNODES, 1, &info->nnodes);
    if (have_lr < 0 || have_lw < 0 || have_group < 0 || have_node < 0 || have_nn < 0)
        return -1;
    if (have_group && have_node && group != node)
        return cdl_error("GROUP_RANK=%d and NODE_RANK=%d disagree: they both name this "
                         "process's node; set them equal", group, node);
    int have_noderank = have_group || have_node;
    info->node_rank = have_group ? group : node;
    if (!have_nn)
        info->nnodes = (have_lw == 1 && info->world % info->local_world == 0)
                           ? info->world / info->local_world : 1;
    if (info->nnodes == 1) {
        if (!have_lr)
            info->local_rank = info->rank;
        if (!have_lw)
            info->local_world = info->world;
        if (!have_noderank)
            info->node_rank = 0;
    } else {
        const char *why = "several nodes are given";
        if ((!have_lr && env_int_req(CDL_ENV_LOCAL_RANK, 0, &info->local_rank, why)) ||
            (!have_lw && env_int_req(CDL_ENV_LOCAL_WORLD_SIZE, 1, &info->local_world, why)) ||
            (!have_noderank && env_int_req(CDL_ENV_GROUP_RANK, 0, &info->node_rank, why)))
            return -1;
    }
    if (env_int(CDL_ENV_REPLICAS_PER_GPU, 1, &info->replicas_per_gpu) < 0)
        return -1;
    master_from_env(info);
    if (port_from_env(info))
        return -1;
    if (torchrun)
        env_str("TORCHELASTIC_RUN_ID", info->job_id, sizeof info->job_id);
    env_str(CDL_ENV_JOB_ID, info->job_id, sizeof info->job_id);   /* wins when both are set */
    info->source = nm->source;
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
    if (tpn && *tpn) {
        info->local_world = tasks_on_node(tpn, info->node_rank);
        if (info->local_world <= 0)
            return cdl_error("%s='%s' has no task count for node %d (SLURM_NODEID)", tpn_var, tpn,
                             info->node_rank);
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
        if (nodes)
            first_host(nodes, info->master_addr, sizeof info->master_addr);
    }
    if (port_from_env(info))
        return -1;
    const char *resv = getenv("SLURM_STEP_RESV_PORTS");
    if (!info->master_port && resv && *resv)
        info->master_port = atoi(resv);   /* "12000-12003": the first reserved port */
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

static const src_names *names_of(const char *source)
{
    if (!strcmp(source, "torchrun"))
        return &torchrun_names;
    if (!strcmp(source, "slurm"))
        return &slurm_names;
    if (!strcmp(source, "pmix"))
        return &pmix_names;
    return &contract_names;
}

/* The values must describe a possible layout; errors name the variables. */
static int validate(const cdl_rank_info *in)
{
    const src_names *nm = names_of(in->source);
    if (in->rank >= in->world)
        return cdl_error("%s=%d is not below %s=%d (from %s): ranks are 0..%d", nm->rank, in->rank,
                         nm->world, in->world, nm->what, in->world - 1);
    if (in->local_world > in->world)
        return cdl_error("%s=%d exceeds %s=%d (from %s)", nm->local_world, in->local_world,
                         nm->world, in->world, nm->what);
    if (in->local_rank >= in->local_world)
        return cdl_error("%s=%d is not below %s=%d (from %s)", nm->local_rank, in->local_rank,
                         nm->local_world, in->local_world, nm->what);
    if (in->nnodes > in->world)
        return cdl_error("%s=%d exceeds %s=%d (from %s): every node runs at least one rank",
                         nm->nnodes, in->nnodes, nm->world, in->world, nm->what);
    if (in->node_rank >= in->nnodes)
        return cdl_error("%s=%d is not below %s=%d (from %s)", nm->node, in->node_rank,
                         nm->nnodes, in->nnodes, nm->what);
    if (in->nnodes == 1 && in->local_world != in->world)
        return cdl_error("%s=%d differs from %s=%d but there is one node (%s=1, from %s)",
                         nm->local_world, in->local_world, nm->world, in->world, nm->nnodes,
                         nm->what);
    if (in->replicas_per_gpu > in->local_world)
        return cdl_error(CDL_ENV_REPLICAS_PER_GPU "=%d exceeds %s=%d: replicas sharing a GPU "
                         "are ranks of one node", in->replicas_per_gpu, nm->local_world,
                         in->local_world);
    return 0;
}

int cdl_rank_discover(cdl_rank_info *info)
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
    } else {
        single(info);
        rc = 0;
    }
    if (rc == 0)
        rc = validate(info);
    if (rc != 0)
        return -1;
    if (info->rank == 0 && info->world > 1) {
        const char *launcher = getenv(CDL_ENV_LAUNCHER);
        int l = launcher && *launcher;
        fprintf(stderr, "cdl: rank 0 of %d: ranks from %s%s%s%s, %d node%s%s%s%s\n", info->world,
                names_of(info->source)->what, l ? " (launcher " : "", l ? launcher : "",
                l ? ")" : "", info->nnodes, info->nnodes == 1 ? "" : "s",
                info->job_id[0] ? ", job '" : "", info->job_id, info->job_id[0] ? "'" : "");
    }
    return 0;
}
