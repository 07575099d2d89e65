/* slurmstepd: the hooks of a job step on one node.
 *
 *   init_post_opt         root, once: what to do; MPS directories and shared
 *                         state; the hwloc topology
 *   user_init             as the user, once: step-wide contract values
 *   task_init_privileged  root, per task child: MPS daemon up (first task)
 *   task_init             as the user, per task child: environment, binding
 *   task_exit             root, per task: the last one stops the daemon
 *   exit                  root, once: stop leftovers, remove directories and
 *                         the shared memory killed ranks left (shmsweep.h)
 *
 * Root hooks use only Slurm's items, the validated options and the admin's
 * settings: nothing from the job's environment is executed or used as a
 * path. Errors found where Slurm would not fail the step are kept in
 * spk_g.deferred and reported by every task, which then fails. */
#include <dlfcn.h>
#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#ifdef HAVE_HWLOC
#include <hwloc/glibc-sched.h>
#endif

#include "lib/dist/bind.h"
#include "spank/badexit.h"
#include "spank/overlap.h"
#include "spank/plugin.h"
#include "spank/port.h"
#include "spank/shmsweep.h"
#include "spank/stepcpus.h"
#include "spank/threads.h"
#include "spank/torchrun.h"

/* Keeps "cdl: OPTION: message" (without repeating OPTION if the message
 * starts with it) for the tasks to report. */
static void defer(const char *opt)
{
    const char *err = spk_last_error();
    if (spk_g.deferred[0])
        return;
    if (!strncmp(err, opt, strlen(opt)))
        snprintf(spk_g.deferred, sizeof spk_g.deferred, "cdl: %s", err);
    else
        snprintf(spk_g.deferred, sizeof spk_g.deferred, "cdl: %s: %s", opt, err);
}

static int item_u32(spank_t sp, spank_item_t item, uint32_t *v)
{
    return spank_get_item(sp, item, v) == ESPANK_SUCCESS ? 0 : -1;
}

/* A job environment variable; "" when absent or longer than len. */
static void job_env(spank_t sp, const char *name, char *buf, int len)
{
    if (spank_getenv(sp, name, buf, len) != ESPANK_SUCCESS)
        buf[0] = '\0';
}

/* CPUs in this process's affinity mask; 0 when unknown. */
static unsigned affinity_cpus(void)
{
    cpu_set_t mask;
    return sched_getaffinity(0, sizeof mask, &mask) == 0 ? (unsigned)CPU_COUNT(&mask) : 0;
}

static int normal_step(spank_t sp)
{
    uint32_t stepid;
    return item_u32(sp, S_JOB_STEPID, &stepid) == 0 && stepid <= SPK_MAX_NORMAL_STEP_ID;
}

static int get_cred(spank_t sp, struct spk_cred *c)
{
    gid_t *groups = NULL;
    int n = 0;
    memset(c, 0, sizeof *c);
    if (spank_get_item(sp, S_JOB_UID, &c->uid) != ESPANK_SUCCESS ||
        spank_get_item(sp, S_JOB_GID, &c->gid) != ESPANK_SUCCESS)
        return spk_error("cannot get the job's uid/gid from Slurm");
    if (spank_get_item(sp, S_JOB_SUPPLEMENTARY_GIDS, &groups, &n) == ESPANK_SUCCESS && groups) {
        if (n > SPK_MAX_GROUPS)
            n = SPK_MAX_GROUPS;
        memcpy(c->groups, groups, (size_t)n * sizeof *groups);
        c->ngroups = n;
    }
    return 0;
}

/* This node's Slurm name: set by slurmd in slurmstepd's own environment
 * (not the job's), else the host name. */
static void node_name(char *buf, size_t len)
{
    const char *n = getenv("SLURMD_NODENAME");
    if (!n || spk_copy(buf, len, n) != 0)
        if (gethostname(buf, len) != 0)
            spk_copy(buf, len, "localhost");
    buf[len - 1] = '\0';
}

static int setup_mps(spank_t sp)
{
    struct spk_cred cred;
    struct spk_rundir rd;
    char node[128];
    if (spk_gpus_parse(spk_g.step_gpus_str, &spk_g.step_gpus) != 0 ||
        spk_pack_plan((int)spk_g.step.local_tasks, spk_g.step_gpus.n, spk_g.opts.mps_n,
                      spk_g.conf.max_replicas_per_gpu, spk_g.conf.mps_thread_percentage,
                      &spk_g.pack) != 0)
        return -1;
    /* More replicas per GPU than local tasks: they all share GPU 0, which
     * the contract says with the task count (the slot rule gives the same
     * GPU); the note warns that part of the GPU idles. */
    spk_g.step.replicas_per_gpu = spk_g.pack.replicas < (int)spk_g.step.local_tasks
                                      ? spk_g.pack.replicas : (int)spk_g.step.local_tasks;
    /* No GPU shared (as many GPUs as tasks here): MPS would add nothing. */
    if (spk_g.step.replicas_per_gpu < 2) {
        spk_g.pack.note[0] = '\0';
        return 0;
    }
    node_name(node, sizeof node);
    if (get_cred(sp, &cred) != 0 ||
        spk_rundir_init(&rd, spk_g.conf.runtime_dir, spk_g.step.jobid, spk_g.step.stepid,
                        node) != 0 ||
        spk_mps_setup(&spk_g.mps, &spk_g.conf, &rd, &cred, spk_g.step_gpus_str,
                      (int)spk_g.step.local_tasks) != 0)
        return -1;
    spk_g.mps_ready = 1;
    return 0;
}

/* A heterogeneous step (srun --het-group=0,1, srun A : B): Slurm hands
 * each component its own layout, numbered from 0, so component 0's tasks
 * would get a contract of their own (WORLD_SIZE = that component's tasks)
 * and train alone while the others fail. SLURM_STEP_NUM_TASKS counts the
 * tasks of every component (Slurm's own task count is the component's);
 * the environment of a homogeneous step inside a heterogeneous job (which
 * keeps SLURM_HET_SIZE) has them equal. Refused on every node, so no task
 * of any component starts. */
static int het_step(spank_t sp, uint32_t ntasks)
{
    char buf[32];
    long n;
    job_env(sp, "SLURM_STEP_NUM_TASKS", buf, sizeof buf);
    if (!buf[0] || spk_parse_uint(buf, 1, 1L << 30, &n) != 0 || (uint32_t)n == ntasks)
        return 0;
    spk_error("--cdl-ddp: heterogeneous steps (srun --het-group=0,1, or srun A : B) are not "
              "supported: Slurm shows the plugin only its own component (its tasks numbered "
              "from 0, its own job id), so no one rank contract spans the components; run the "
              "data-parallel tasks in one component (srun --het-group=N) or as a job of one "
              "component (sbatch -N/-n without 'hetjob')");
    return 1;
}

/* A step without GPUs in a heterogeneous job: a component that has none
 * (CPU workers beside the GPU component). sbatch's --cdl-mps, written for
 * the GPU component, reaches every step of every component, and each
 * step of such a component with two tasks on a node failed: "the step has
 * no GPUs on this node: request them", which that component cannot. It
 * has nothing to share, like a node with one task. */
static int gpuless_component(spank_t sp)
{
    char het[16];
    if (spk_g.step_gpus.n > 0)
        return 0;
    job_env(sp, "SLURM_HET_SIZE", het, sizeof het);
    return het[0] != '\0';
}

int spk_remote_post_opt(spank_t sp)
{
    struct spk_step *s = &spk_g.step;
    struct spk_opts *o = &spk_g.opts;
    if (!normal_step(sp))
        return 0;   /* batch script, extern and interactive steps: untouched */
    spk_g.bind = o->bind_given ? o->bind : (o->ddp ? spk_g.conf.default_bind : SPK_BIND_NONE);
    if (!o->ddp && !o->mps && spk_g.bind == SPK_BIND_NONE)
        return 0;
    spk_g.active = 1;
    memset(s, 0, sizeof *s);
    s->replicas_per_gpu = 1;
    if (item_u32(sp, S_JOB_ID, &s->jobid) || item_u32(sp, S_JOB_STEPID, &s->stepid) ||
        item_u32(sp, S_JOB_NNODES, &s->nnodes) || item_u32(sp, S_JOB_NODEID, &s->nodeid) ||
        item_u32(sp, S_JOB_TOTAL_TASK_COUNT, &s->ntasks) ||
        item_u32(sp, S_JOB_LOCAL_TASK_COUNT, &s->local_tasks)) {
        spk_error("Slurm did not give the step's layout");
        defer("--cdl-ddp");
        return 0;
    }
    /* Not an array (or a Slurm without the items): 0, 0. */
    if (item_u32(sp, S_JOB_ARRAY_ID, &s->array_job) != 0 ||
        item_u32(sp, S_JOB_ARRAY_TASK_ID, &s->array_task) != 0)
        s->array_job = s->array_task = 0;
    if (item_u32(sp, S_STEP_CPUS_PER_TASK, &s->cpus_per_task) != 0)
        s->cpus_per_task = 1;
    if (o->ddp && het_step(sp, s->ntasks))
        defer("--cdl-ddp");
    /* The store secret, as root (the site key is root's to read). */
    uid_t uid;
    if (o->ddp && (spank_get_item(sp, S_JOB_UID, &uid) != ESPANK_SUCCESS ||
                   spk_secret_step(spk_g.conf.secret_key, s->nnodes, (uint32_t)uid, s->jobid,
                                   s->stepid, spk_g.token, sizeof spk_g.token) != 0))
        defer("--cdl-ddp");
    spank_err_t nl = spank_getenv(sp, "SLURM_STEP_NODELIST", spk_g.nodelist,
                                  (int)sizeof spk_g.nodelist);
    if (nl != ESPANK_SUCCESS) {
        /* Too long would read as absent, and the step would fail saying
         * the list is missing. */
        if (o->ddp && nl == ESPANK_NOSPACE) {
            spk_error("SLURM_STEP_NODELIST is longer than %zu bytes: this plugin build "
                      "cannot derive MASTER_ADDR for so many nodes", sizeof spk_g.nodelist - 1);
            defer("--cdl-ddp");
        }
        spk_g.nodelist[0] = '\0';
    }
    job_env(sp, "SLURM_DISTRIBUTION", spk_g.distribution, sizeof spk_g.distribution);
    /* srun's own variable for --kill-on-bad-exit=0 (the option itself does
     * not reach the step): the user wants the others to go on. */
    char kbe[8];
    job_env(sp, "SLURM_KILL_BAD_EXIT", kbe, sizeof kbe);
    spk_g.keep_on_bad_exit = !strcmp(kbe, "0");
    job_env(sp, "CUDA_VISIBLE_DEVICES", spk_g.step_gpus_str, sizeof spk_g.step_gpus_str);
    s->nodelist = spk_g.nodelist;
    s->distribution = spk_g.distribution[0] ? spk_g.distribution : NULL;
    if (spk_gpus_parse(spk_g.step_gpus_str, &spk_g.step_gpus) != 0)
        spk_g.step_gpus.n = 0;   /* only --cdl-mps needs them; it re-parses and fails */
    spk_g.step_cpus = affinity_cpus();
    /* The user's --cpu-bind, read here: in the tasks task/affinity has
     * replaced SLURM_CPU_BIND with the masks it applied, even when the
     * user asked for nothing (--cdl-bind then never bound). */
    spank_err_t cb = spank_getenv(sp, "SLURM_CPU_BIND", spk_g.cpu_bind,
                                  (int)sizeof spk_g.cpu_bind);
    /* A value too long for the buffer is a long map_cpu/mask_cpu list,
     * certainly a binding (it used to read as none, and the plugin bound
     * over it). */
    job_env(sp, "SLURM_THREADS_PER_CORE", spk_g.threads_per_core,
            sizeof spk_g.threads_per_core);
    /* The step's cores on this node, for --cdl-bind where nothing else
     * tells the task which CPUs are its own (task/none: bind.h). */
    char *cores = NULL;
    spk_g.step_cores[0] = '\0';
    if (spank_get_item(sp, S_STEP_ALLOC_CORES, &cores) == ESPANK_SUCCESS && cores &&
        strlen(cores) < sizeof spk_g.step_cores)
        snprintf(spk_g.step_cores, sizeof spk_g.step_cores, "%s", cores);
    /* The job's, for Slurm's CPUs per core (spk_slurm_threads). */
    cores = NULL;
    spk_g.job_cores[0] = '\0';
    if (spank_get_item(sp, S_JOB_ALLOC_CORES, &cores) == ESPANK_SUCCESS && cores &&
        strlen(cores) < sizeof spk_g.job_cores)
        snprintf(spk_g.job_cores, sizeof spk_g.job_cores, "%s", cores);
    /* Slurm's version: how it maps its core numbers to CPUs (stepcpus.h). */
    char *ver = NULL;
    spk_g.slurm_major = spk_g.slurm_minor = 0;
    if (spank_get_item(sp, S_SLURM_VERSION_MAJOR, &ver) == ESPANK_SUCCESS && ver)
        spk_g.slurm_major = atoi(ver);
    ver = NULL;
    if (spank_get_item(sp, S_SLURM_VERSION_MINOR, &ver) == ESPANK_SUCCESS && ver)
        spk_g.slurm_minor = atoi(ver);
    if (cb == ESPANK_NOSPACE)
        snprintf(spk_g.cpu_bind, sizeof spk_g.cpu_bind, "%s", "(a list too long to show)");
    else if (cb != ESPANK_SUCCESS)
        spk_g.cpu_bind[0] = '\0';
    /* MPS lets several replicas share a GPU: a node where the step runs
     * one task (or no more tasks than GPUs, setup_mps) has nothing to
     * share, so no daemon, no MPS variables and no
     * GPU requirement there. That is every set-up step of a job submitted
     * with --cdl-mps (sbatch forwards the option to all its steps):
     * `srun -n1 cp ...`, a staging step with one task per node, a tool
     * started with `srun --overlap -n1`. A one-task step that uses the GPU
     * gets the whole GPU, as without the option. */
    if (o->mps && s->local_tasks > 1 && !gpuless_component(sp) && setup_mps(sp) != 0)
        defer("--cdl-mps");
#ifdef HAVE_HWLOC
    if (spk_g.bind != SPK_BIND_NONE) {
        contract_err e;
        if (bind_load(&spk_g.topo, spk_g.conf.topology, spk_g.bind == SPK_BIND_CLOSEST, &e)) {
            spk_error("%s", e.msg);
            defer("--cdl-bind");
        }
        else if (spk_g.conf.topology[0] &&
                 bind_check_node(spk_g.topo, (int)sysconf(_SC_NPROCESSORS_ONLN),
                                 spk_g.conf.topology, &e) != 0) {
            hwloc_topology_destroy(spk_g.topo);
            spk_error("%s", e.msg);
            defer("--cdl-bind");
        }
        else {
            spk_g.have_topo = 1;
            /* The CPUs of other steps of the job running here (overlap.h). */
            cpu_set_t set;
            uid_t job_uid;
            hwloc_bitmap_t mine = hwloc_bitmap_alloc();
            spk_g.others = hwloc_bitmap_alloc();
            if (mine && spk_g.others && sched_getaffinity(0, sizeof set, &set) == 0 &&
                hwloc_cpuset_from_glibc_sched_affinity(spk_g.topo, mine, &set, sizeof set) == 0 &&
                spank_get_item(sp, S_JOB_UID, &job_uid) == ESPANK_SUCCESS)
                spk_overlap_scan("/proc", job_uid, s->jobid, s->stepid, mine, spk_g.others,
                                 spk_g.other_steps, sizeof spk_g.other_steps);
            hwloc_bitmap_free(mine);
        }
    }
#else
    if (spk_g.bind != SPK_BIND_NONE) {
        spk_error("this plugin was built without hwloc");
        defer("--cdl-bind");
    }
#endif
    return 0;
}

int spk_remote_user_init(spank_t sp)
{
    (void)sp;
    if (!spk_g.active || !spk_g.opts.ddp || spk_g.deferred[0])
        return 0;
    /* SLURM_STEP_RESV_PORTS is set per task (after this hook): read in
     * task_init; the rest of the step-wide values is computed once here. */
    if (spk_contract_step(&spk_g.conf, &spk_g.step, spk_resolve_host, &spk_g.sc) != 0)
        defer("--cdl-ddp");
    return 0;
}

/* A task that cannot have what its step asked for must not start. Slurm
 * stops a task whose hook fails only when the plugin is `required`; with
 * `optional` (how the installed plugstack.conf.d snippet loads it) it logs
 * the failure and runs the task anyway, without the contract, binding or
 * MPS. So the task's own process, in which these hooks run before exec,
 * ends here, as Slurm ends it for a required plugin. The error is already
 * on the task's stderr. */
static int task_failed(void)
{
    fflush(stderr);
    _exit(1);
}

int spk_remote_refused(void)
{
    if (!spk_g.deferred[0])
        return 0;
    slurm_error("%s", spk_g.deferred);
    return task_failed();
}

int spk_remote_task_privileged(spank_t sp)
{
    (void)sp;
    if (!spk_g.active)
        return 0;
    if (spk_g.deferred[0]) {
        slurm_error("%s", spk_g.deferred);
        return task_failed();
    }
    if (spk_g.mps_ready && spk_mps_task_start(&spk_g.mps) != 0) {
        slurm_error("cdl: --cdl-mps: %s", spk_last_error());
        return task_failed();
    }
    return 0;
}

struct env_ctx {
    spank_t sp;
    char buf[SPK_VALUE_MAX];
};

static const char *task_lookup(void *arg, const char *name)
{
    struct env_ctx *c = arg;
    return spank_getenv(c->sp, name, c->buf, sizeof c->buf) == ESPANK_SUCCESS ? c->buf : NULL;
}

static int apply_env(spank_t sp, const struct spk_env *env)
{
    for (int i = 0; i < env->n; i++) {
        if (env->v[i].skip)
            continue;
        if (env->v[i].unset) {
            spank_unsetenv(sp, env->v[i].name);   /* absent already: fine */
            continue;
        }
        if (spank_setenv(sp, env->v[i].name, env->v[i].value, 1) != ESPANK_SUCCESS)
            return spk_error("cannot set %s in the task's environment", env->v[i].name);
    }
    return 0;
}

/* threads: this task's CPU share (threads.h), computed after binding. */
static int task_contract(spank_t sp, uint32_t local_id, uint32_t global_id, unsigned threads,
                         const struct spk_torchrun *tr)
{
    struct spk_env env;
    struct env_ctx ctx = {.sp = sp};
    char resv[64];
    struct spk_step_contract sc = spk_g.sc;
    int nproc;
    snprintf(sc.token, sizeof sc.token, "%s", spk_g.token);
    /* torchrun as the task (torchrun.h): a layout it cannot run as one job
     * is refused here, before it waits for agents that never come; its
     * workers split the task's threads. */
    if (spk_torchrun_check(tr, spk_g.step.ntasks, spk_g.step.local_tasks) != 0)
        return -1;
    unsigned share = threads;
    threads = spk_torchrun_threads(tr, task_lookup(&ctx, "PET_NPROC_PER_NODE"), share, &nproc);
    if (local_id == 0 && nproc > 0 && (unsigned)nproc > share)
        slurm_spank_log("cdl: torchrun starts %d workers in a task of %u CPU%s: they share "
                        "%s; ask for --cpus-per-task=CPUS (all the CPUs its workers use)",
                        nproc, share, share == 1 ? "" : "s", share == 1 ? "it" : "them");
    /* The contract's OMP_NUM_THREADS/MKL_NUM_THREADS come from cpus_per_task:
     * give it this task's share instead of Slurm's grant. */
    struct spk_step step = spk_g.step;
    step.cpus_per_task = threads;
    job_env(sp, "SLURM_STEP_RESV_PORTS", resv, sizeof resv);
    if (resv[0] && spk_port_choose(resv, spk_g.step.jobid, spk_g.step.stepid, spk_g.conf.port_lo,
                                   spk_g.conf.port_hi, &sc.master_port, &sc.port_reserved) != 0)
        return -1;
    if (spk_contract_task(&step, &sc, local_id, global_id, &env) != 0)
        return -1;
    spk_env_keep_user(&env, task_lookup, &ctx);
    return apply_env(sp, &env);
}

static int task_mps_env(spank_t sp, uint32_t local_id)
{
    struct spk_env env;
    struct env_ctx ctx = {.sp = sp};
    int g = spk_pack_gpu(&spk_g.pack, (int)local_id);
    spk_env_init(&env);
    /* The pipe/log directories and the device are the plugin's: a value in
     * the job's environment would point the task at another daemon. */
    if (spk_env_add(&env, "CUDA_MPS_PIPE_DIRECTORY", 0, "%s", spk_g.mps.rd.pipe_dir) ||
        spk_env_add(&env, "CUDA_MPS_LOG_DIRECTORY", 0, "%s", spk_g.mps.rd.log_dir) ||
        spk_env_add(&env, "CUDA_VISIBLE_DEVICES", 0, "%s", spk_g.step_gpus.id[g]) ||
        spk_env_add(&env, "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", 1, "%d", spk_g.pack.thread_pct))
        return -1;
    spk_env_keep_user(&env, task_lookup, &ctx);
    return apply_env(sp, &env);
}

/* Slurm's GPU binding of this task (SLURMD_TRES_BIND, "" when none): read
 * in task_init, before binding, in the task's own process. */
static char tres_bind[1024];

#ifdef HAVE_HWLOC
/* Slurm's index of local task t's GPU (packing.h). */
static int task_gpu_index(int t)
{
    /* srun --gpu-bind=map_gpu: Slurm, not the slot rule, gave each task
     * its one GPU (which cdl-train opens as its device 0). Under MPS the
     * plugin's packing sets the GPU instead. */
    int g = spk_g.mps_ready ? -1 : spk_tres_bind_map_gpu(tres_bind, t);
    /* srun --gpus-per-task=N: task t has the step's GPUs t*N.. and opens
     * the first (CDL_GPU_BIND=task); task 2 of N=2 was bound near GPU 2. */
    int per_task = spk_g.mps_ready ? 0 : spk_tres_bind_per_task(tres_bind);
    if (g < 0 && per_task > 0)
        return spk_task_gpu_index(&spk_g.step_gpus, t * per_task, 1);
    return g >= 0 ? g : spk_task_gpu_index(&spk_g.step_gpus, t, spk_g.step.replicas_per_gpu);
}

/* closest: a task that runs torchrun (tr->found) binds as with cores: its
 * workers use all the task's GPUs, not the one of its local rank, and
 * would share that GPU's cores (on a two-socket node, half the node). */
static int task_bind(spank_t sp, uint32_t local_id, uint32_t global_id,
                     const struct spk_torchrun *tr)
{
    /* One mask per local task: 8 KiB for 128 tasks on a 256-CPU node. A
     * task process (forked for this task): static is its own. */
    static char masks[64 * 1024];
    char desc[256], note[256];
    int n = (int)spk_g.step.local_tasks, rc = -1, verbose = spk_g.opts.bind_verbose;
    int closest = spk_g.bind == SPK_BIND_CLOSEST && !tr->found;
    cpu_set_t mask;
    /* srun --hint=nomultithread (and compute_bound, memory_bound,
     * --threads-per-core) sets a binding of its own: not one the user
     * asked for, and they stood back from it ("srun --cpu-bind=quiet,
     * threads asked Slurm to bind", a --cpu-bind never typed; under
     * task/none nothing bound at all). The plan honours its one thread
     * per core instead. */
    int hint = spk_cpu_bind_from_hint(spk_g.cpu_bind, spk_g.threads_per_core);
    if (!hint && spk_user_cpu_bind(spk_g.cpu_bind)) {
        /* Said without verbose too, once, when --cdl-bind was asked for
         * (not the admin's default_bind): the user's option does nothing. */
        if (verbose)
            slurm_spank_log("cdl: --cdl-bind: not binding task %u: srun --cpu-bind=%s asked "
                            "Slurm to bind", global_id, spk_g.cpu_bind);
        else if (spk_g.opts.bind_given && global_id == 0)
            slurm_spank_log("cdl: --cdl-bind: not binding: srun --cpu-bind=%s asked Slurm to "
                            "bind the tasks (drop --cpu-bind to let --cdl-bind bind, or "
                            "--cdl-bind to keep Slurm's binding)", spk_g.cpu_bind);
        return 0;
    }
    if (!spk_g.have_topo)
        return spk_error("no topology");
    hwloc_cpuset_t allowed = hwloc_bitmap_alloc();
    hwloc_cpuset_t *out = calloc((size_t)n, sizeof *out);
    int *gpu = calloc((size_t)n, sizeof *gpu);
    if (!out || !gpu) {
        spk_error("out of memory");
        goto done;
    }
    for (int t = 0; t < n; t++) {
        out[t] = hwloc_bitmap_alloc();
        gpu[t] = task_gpu_index(t);
    }
    /* The CPUs the plan divides: the step's on this node. task/affinity
     * may already have bound this task to a part of them (its automatic
     * binding); the masks it applied to all local tasks add up to the
     * step's, and hold this task's own. Masks that do not are another
     * step's, inherited through the environment (an srun inside a task of
     * a bound step): the plan starts from the task's own CPUs then. */
    cpu_set_t own;
    if (sched_getaffinity(0, sizeof own, &own) != 0) {
        spk_error("sched_getaffinity failed");
        goto done;
    }
    mask = own;
    job_env(sp, "SLURM_CPU_BIND_TYPE", masks, sizeof masks);
    int from_slurm = !strncmp(masks, "mask_cpu", 8);
    job_env(sp, "SLURM_CPU_BIND_LIST", masks, sizeof masks);
    cpu_set_t all_masks;
    const char *mask_note = "";
    if (from_slurm && spk_cpu_mask_union(masks, &all_masks) == 0) {
        if (spk_cpu_mask_is_step(&all_masks, &own))
            mask = all_masks;
        else {
            from_slurm = 0;
            mask_note = "; SLURM_CPU_BIND_LIST is not this step's binding (inherited from an "
                        "outer step?): planned within the task's CPUs";
        }
    }
    if (hwloc_cpuset_from_glibc_sched_affinity(spk_g.topo, allowed, &mask, sizeof mask) != 0) {
        spk_error("hwloc cannot read the step's CPU mask");
        goto done;
    }
    /* Nothing bound the task to the step's own CPUs (task/none: the whole
     * node; a cpuset of the job only, or of the step an srun ran inside):
     * the step's cores within them keep two jobs, and two steps of one
     * job, apart. The note (verbose) says when they cannot. */
    char cores_note[384];
    cores_note[0] = '\0';
    if (!from_slurm) {
        char cpus_on_node[16];
        job_env(sp, "SLURM_CPUS_ON_NODE", cpus_on_node, sizeof cpus_on_node);
        struct spk_slurm_cpus sc = {
            .step_cores = spk_g.step_cores, .job_cores = spk_g.job_cores,
            .cpus_on_node = cpus_on_node, .user_threads = spk_g.threads_per_core[0] != '\0',
            .major = spk_g.slurm_major, .minor = spk_g.slurm_minor,
        };
        spk_step_cpus(spk_g.topo, allowed, &sc, cores_note, sizeof cores_note);
    }
    int one_pu = hint && !strcmp(spk_g.threads_per_core, "1");
    if (one_pu)
        bind_one_pu_per_core(spk_g.topo, allowed);
    /* Other steps of the job already bound on these CPUs (srun --overlap):
     * left to them where the rest still give each task a core. Read once
     * for the step (post_opt), so that its tasks plan alike. */
    char ovl[384];
    spk_overlap_apply(spk_g.topo, allowed, spk_g.others, spk_g.other_steps, n,
                      (int)spk_g.step.cpus_per_task, ovl, sizeof ovl);
    contract_err e;
    if (bind_plan(spk_g.topo, allowed, closest ? BIND_CLOSEST : BIND_CORES,
                  n, gpu, out, note, sizeof note, &e) != 0) {
        spk_error("%s", e.msg);
        goto done;
    }
    if (hwloc_cpuset_to_glibc_sched_affinity(spk_g.topo, out[local_id], &mask, sizeof mask) ||
        sched_setaffinity(0, sizeof mask, &mask) != 0) {
        spk_error("sched_setaffinity failed");
        goto done;
    }
    if (verbose) {
        /* The plan's first remark is about the first task without a GPU
         * (when one has none); say it about this one, and keep the rest
         * (GPUs whose tasks got cores farther away, tasks sharing cores). */
        char rest[sizeof note];
        const char *r = note;
        int missing = 0;
        for (int t = 0; closest && t < n; t++)
            missing |= !bind_gpu(spk_g.topo, gpu[t]);
        if (missing)
            r = strstr(note, "; ") ? strstr(note, "; ") + 2 : "";
        snprintf(rest, sizeof rest, "%s", r);
        note[0] = '\0';
        if (spk_g.bind == SPK_BIND_CLOSEST && !closest)
            snprintf(note, sizeof note, "torchrun: its workers use all the task's GPUs, "
                     "bound as with cores");
        else if (closest && !bind_gpu(spk_g.topo, gpu[local_id]))
            snprintf(note, sizeof note, gpu[local_id] < 0 ? "no GPU known: bound as with cores, "
                     "on the cores the GPUs' tasks leave" : "GPU %d not found in the topology: "
                     "bound as with cores, on the cores the GPUs' tasks leave", gpu[local_id]);
        bind_describe(spk_g.topo, out[local_id], desc, sizeof desc);
        slurm_spank_log("cdl: --cdl-bind=%s: task %u (local %u, GPU %d) -> %s%s%s%s%s%s%s%s%s%s%s",
                        spk_g.bind == SPK_BIND_CLOSEST ? "closest" : "cores", global_id,
                        local_id, gpu[local_id], desc, note[0] ? "; " : "", note,
                        rest[0] ? "; " : "", rest, mask_note, cores_note[0] ? "; " : "",
                        cores_note,
                        one_pu ? "; one thread per core (srun --hint or --threads-per-core=1)" : "",
                        ovl[0] ? "; " : "", ovl);
    }
    rc = 0;
done:
    for (int t = 0; out && t < n; t++)
        hwloc_bitmap_free(out[t]);
    free(out);
    free(gpu);
    hwloc_bitmap_free(allowed);
    return rc;
}
#endif

/* Slurm's own GPU binding (srun --ntasks-per-gpu=N, --gpu-bind=single:N)
 * gives N consecutive local tasks one GPU, time-sliced without MPS. The
 * contract says so, as under --cdl-mps, so that cdl reduces within each
 * GPU first and --cdl-bind=closest binds near the GPU the task has; with 1
 * every rank failed, told to set CDL_REPLICAS_PER_GPU, which the contract
 * replaces. Slurm puts the binding into each task's environment (the
 * same on all of a node's tasks), not the step's. */
static void slurm_gpu_sharing(spank_t sp)
{
    job_env(sp, "SLURMD_TRES_BIND", tres_bind, sizeof tres_bind);
    if (!spk_g.opts.ddp || spk_g.opts.mps || spk_g.step.local_tasks < 2)
        return;
    /* Each task sees its own GPUs only (srun --gpus-per-task=2 with 4
     * tasks: two each), so LOCAL_RANK is no index into them; the contract
     * tells cdl-train to open its first (rank 2 asked for a third GPU).
     * Not for mask_gpu: masks may overlap (0x3,0x3: both tasks see GPUs
     * 0 and 1), where the slot rule keeps the ranks apart. */
    const char *w = spk_tres_bind_task_gpus(tres_bind);
    spk_g.step.gpu_bind_task = w && strcmp(w, "mask_gpu");
    int n = spk_tres_bind_tasks_per_gpu(tres_bind);
    spk_g.step.replicas_per_gpu = n < (int)spk_g.step.local_tasks ? n
                                                                   : (int)spk_g.step.local_tasks;
}

/* --cdl-mps chooses each task's GPU itself (its packing), replacing the
 * CUDA_VISIBLE_DEVICES of Slurm's binding: a binding the user asked for
 * GPU by GPU (srun --gpu-bind=map_gpu:..., mask_gpu:...) would be dropped
 * without a word. Refused instead, saying how to get either. Read in
 * task_init: Slurm gives the binding to the tasks only. */
static int mps_user_binding(uint32_t local_id)
{
    const char *w = spk_tres_bind_task_gpus(tres_bind);
    if (!w || (strcmp(w, "map_gpu") && strcmp(w, "mask_gpu")))
        return 0;
    if (local_id == 0)
        slurm_error("cdl: --cdl-mps packs %u tasks per GPU itself and would replace srun "
                    "--gpu-bind=%s: drop --gpu-bind to let --cdl-mps[=N] place the tasks, or "
                    "drop --cdl-mps to keep your binding (without MPS)",
                    (unsigned)spk_g.pack.replicas, strchr(tres_bind, ':') + 1);
    return -1;
}

int spk_remote_task_init(spank_t sp)
{
    uint32_t local_id, global_id;
    int tid;
    if (!spk_g.active)
        return 0;
    if (spk_g.deferred[0]) {
        slurm_error("%s", spk_g.deferred);
        return task_failed();
    }
    if (spank_get_item(sp, S_TASK_ID, &tid) != ESPANK_SUCCESS ||
        item_u32(sp, S_TASK_GLOBAL_ID, &global_id) != 0 || tid < 0) {
        slurm_error("cdl: Slurm did not give the task's ids");
        return task_failed();
    }
    local_id = (uint32_t)tid;
    /* torchrun as the task's command changes binding and the contract. */
    struct spk_torchrun tr;
    char **argv = NULL;
    int argc = 0;
    if (spank_get_item(sp, S_JOB_ARGV, &argc, &argv) != ESPANK_SUCCESS)
        argc = 0;
    spk_torchrun_parse(argc, argv, &tr);
    slurm_gpu_sharing(sp);
    if (spk_g.mps_ready && mps_user_binding(local_id) != 0)
        return task_failed();
#ifdef HAVE_HWLOC
    if (spk_g.bind != SPK_BIND_NONE && task_bind(sp, local_id, global_id, &tr) != 0) {
        slurm_error("cdl: --cdl-bind: %s", spk_last_error());
        return task_failed();
    }
#endif
    /* After binding: the thread count follows the task's own CPUs. */
    unsigned threads = spk_thread_share(spk_g.step.cpus_per_task, spk_g.step_cpus,
                                        spk_g.step.local_tasks, affinity_cpus());
    if (spk_g.opts.ddp && task_contract(sp, local_id, global_id, threads, &tr) != 0) {
        slurm_error("cdl: --cdl-ddp: %s", spk_last_error());
        return task_failed();
    }
    if (spk_g.mps_ready && task_mps_env(sp, local_id) != 0) {
        slurm_error("cdl: --cdl-mps: %s", spk_last_error());
        return task_failed();
    }
    /* The packing note is the user's: slurmstepd's messages below "error"
     * reach only the slurmd log, while what a task writes reaches srun (or
     * the job's output file). Once per node that has the remainder. */
    if (spk_g.mps_ready && spk_g.pack.note[0] && local_id == 0) {
        char node[128];
        node_name(node, sizeof node);
        slurm_spank_log("cdl: %s (on %s)", spk_g.pack.note, node);
    }
    return 0;
}

/* A rank that failed ends its --cdl-ddp step (badexit.h), as cdlrun ends
 * its ranks: slurmctld is asked to kill the step on every node, once per
 * node. The call is looked up at run time: slurmstepd links libslurm, and
 * a host without it must still load the plugin. */
static void stop_step_after(spank_t sp)
{
    typedef int (*kill_step_fn)(uint32_t job, uint32_t step, uint16_t sig);
    static int stopping;
    int status;
    uint32_t global_id;
    char why[96], node[128];
    /* deferred: the plugin itself failed every task, and said why. */
    if (stopping || !spk_g.active || !spk_g.opts.ddp || spk_g.deferred[0] ||
        spk_g.keep_on_bad_exit ||
        spk_g.step.ntasks < 2 ||
        spank_get_item(sp, S_TASK_EXIT_STATUS, &status) != ESPANK_SUCCESS)
        return;
    enum spk_exit_action a = spk_exit_action(status, why, sizeof why);
    if (a != SPK_EXIT_STOP && a != SPK_EXIT_STOP_QUIET)
        return;
    stopping = 1;
    char who[32] = "a rank";
    if (item_u32(sp, S_TASK_GLOBAL_ID, &global_id) == 0)
        snprintf(who, sizeof who, "rank %u", global_id);
    node_name(node, sizeof node);
    kill_step_fn kill_step = (kill_step_fn)(uintptr_t)dlsym(RTLD_DEFAULT, "slurm_kill_job_step");
    if (!kill_step) {
        if (a == SPK_EXIT_STOP)
            slurm_error("cdl: --cdl-ddp: %s on %s %s; the other ranks may wait for it until "
                        "their timeout (this Slurm gives the plugin no way to stop the "
                        "step: use srun --kill-on-bad-exit)", who, node, why);
        return;
    }
    /* Said at once: the first failure's line comes first (the ranks that
     * lose their peer may fail too, and their nodes say so), and srun has
     * the grace to read it before the step is cancelled. */
    if (a == SPK_EXIT_STOP)
        slurm_error("cdl: --cdl-ddp: %s on %s %s: stopping step %u.%u (its other ranks "
                    "cannot go on without it)", who, node, why, spk_g.step.jobid,
                    spk_g.step.stepid);
    /* The others first get SPK_STOP_GRACE_S to end by themselves: ranks
     * that fail for the same reason (a bad option, a missing file) then
     * keep their own exit code (srun's status is 137 once one is killed),
     * and a cdl-train rank names the lost peer itself. */
    struct timespec grace = {SPK_STOP_GRACE_S, 0};
    while (nanosleep(&grace, &grace) != 0 && errno == EINTR) {
    }
    /* Fails harmlessly when the step is already ending (scancel). */
    (void)kill_step(spk_g.step.jobid, spk_g.step.stepid, SIGKILL);
}

int spk_remote_task_exit(spank_t sp)
{
    stop_step_after(sp);
    if (spk_g.mps_ready && spk_mps_task_exit(&spk_g.mps) != 0)
        slurm_error("cdl: --cdl-mps: %s", spk_last_error());
    return 0;
}

static void say_removed(const char *name, void *arg)
{
    const uint32_t *ids = arg;
    slurm_info("cdl: removed /dev/shm/%s, left by a rank of step %u.%u killed before its node "
               "had set up", name, ids[0], ids[1]);
}

/* Every step, not only --cdl-ddp ones: cdl-train under a plain srun names
 * its segments the same way (lib/dist/discover.c). The tasks of the step on
 * this node have all ended, so no rank can still open them. On a cluster
 * /dev/shm is the node's own; nodes emulated on one host share it, and
 * there the segments of the step's other nodes go too (a step whose ranks
 * are still setting up on another node has lost this node's ranks). */
static void sweep_shm(spank_t sp)
{
    uint32_t ids[2];
    uid_t uid;
    if (!normal_step(sp) || item_u32(sp, S_JOB_ID, &ids[0]) ||
        item_u32(sp, S_JOB_STEPID, &ids[1]) ||
        spank_get_item(sp, S_JOB_UID, &uid) != ESPANK_SUCCESS)
        return;
    if (spk_shm_sweep("/dev/shm", ids[0], ids[1], uid, say_removed, ids) < 0)
        slurm_error("cdl: step %u.%u: leftover shared memory: %s", ids[0], ids[1],
                    spk_last_error());
}

int spk_remote_exit(spank_t sp)
{
    sweep_shm(sp);
    if (spk_g.mps_ready) {
        if (spk_mps_teardown(&spk_g.mps) != 0)
            slurm_error("cdl: --cdl-mps: %s", spk_last_error());
        spk_g.mps_ready = 0;
    }
#ifdef HAVE_HWLOC
    if (spk_g.have_topo) {
        hwloc_topology_destroy(spk_g.topo);
        spk_g.have_topo = 0;
    }
    hwloc_bitmap_free(spk_g.others);
    spk_g.others = NULL;
#endif
    return 0;
}
