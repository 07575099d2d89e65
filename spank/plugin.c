/* cdl's SPANK plugin: the slurm_spank_* entry points, the option table and
 * the dispatch to the file of each context.
 *
 *   srun, sbatch, salloc   init (admin settings, options), option callbacks
 *   slurmstepd             remote.c: contract, MPS daemon, binding
 *   slurmd job epilog      epilog.c: leftovers of crashed steps
 *
 * Only the slurm_spank_* functions and the four plugin_* / spank_plugin_*
 * symbols of SPANK_PLUGIN are exported (spank/cdl_spank.map). */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <unistd.h>

#include "spank/plugin.h"

SPANK_PLUGIN(cdl, 1)

struct spk_state spk_g;

static void log_to_slurm(const char *msg)
{
    slurm_spank_log("%s", msg);
}

/* Option callbacks: Slurm calls them in srun/sbatch for the command line and
 * #SBATCH lines, and again in slurmstepd with the forwarded values. */
static int batch_refused(const char *opt)
{
    if (spank_context() == S_CTX_ALLOCATOR && !spk_g.conf.allow_batch) {
        slurm_error("cdl: %s is disabled for sbatch and salloc by the administrator "
                    "(allow_batch=no): give it to srun inside the job", opt);
        return 1;
    }
    return 0;
}

/* An option given while plugstack.conf is wrong where it is read
 * (conf_refuse): srun fails at once; in slurmstepd every task of the step
 * fails with the reason (a node whose file differs from the submit host's)
 * instead of running without the option. */
static int refused(const char *opt, int remote)
{
    if (remote) {
        if (!spk_g.deferred[0])
            snprintf(spk_g.deferred, sizeof spk_g.deferred,
                     "cdl: %s cannot be honoured on this node: its plugstack.conf is wrong "
                     "(%s); ask the administrator to fix it", opt, spk_g.conf_error);
        return 0;
    }
    slurm_error("cdl: %s, asked for by this job (sbatch, salloc or #SBATCH), cannot be "
                "honoured while plugstack.conf is wrong (%.60s...): the step is not started "
                "without it", opt, spk_g.conf_error);
    return -1;
}

static int opt_ddp(int val, const char *arg, int remote)
{
    (void)val, (void)arg, (void)remote;
    if (spk_g.conf_refuse)
        return refused("--cdl-ddp", remote);
    if (spk_g.conf_broken)
        return 0;   /* node side with unknown settings: the option does nothing */
    if (batch_refused("--cdl-ddp"))
        return -1;
    spk_g.opts.ddp = 1;
    return 0;
}

static int opt_mps(int val, const char *arg, int remote)
{
    int n;
    (void)val, (void)remote;
    if (spk_g.conf_refuse)
        return refused("--cdl-mps", remote);
    if (spk_g.conf_broken)
        return 0;   /* node side with unknown settings: the option does nothing */
    if (batch_refused("--cdl-mps"))
        return -1;
    if (spk_opt_mps(arg, spk_g.conf.max_replicas_per_gpu, &n) != 0) {
        slurm_error("cdl: %s", spk_last_error());
        return -1;
    }
    spk_g.opts.mps = 1;
    spk_g.opts.mps_n = n;
    spk_g.opts.ddp = 1;
    return 0;
}

static int opt_bind(int val, const char *arg, int remote)
{
    enum spk_bind_mode m;
    int verbose;
    (void)val, (void)remote;
    if (spk_g.conf_refuse)
        return refused("--cdl-bind", remote);
    if (spk_g.conf_broken)
        return 0;   /* node side with unknown settings: the option does nothing */
    if (batch_refused("--cdl-bind"))
        return -1;
    if (spk_opt_bind(arg, spk_g.conf.default_bind, &m, &verbose) != 0) {
        slurm_error("cdl: %s", spk_last_error());
        return -1;
    }
    spk_g.opts.bind_given = 1;
    spk_g.opts.bind = m;
    spk_g.opts.bind_verbose = verbose;
    return 0;
}

/* srun/sbatch/salloc --cdl-version: which plugin build the cluster runs,
 * for a user's bug report; printed where the option is parsed (the
 * submitting command), which then stops like --version does. */
static int opt_version(int val, const char *arg, int remote)
{
    (void)val, (void)arg;
    if (remote)
        return 0;
    printf("cdl_spank %s (rank contract %d)\n", PACKAGE_VERSION, CDL_CONTRACT_VERSION);
    fflush(stdout);
    exit(0);
}

static struct spank_option options[] = {
    {"cdl-version", NULL, "print the version of the cdl plugin and exit", 0, 0, opt_version},
    {"cdl-ddp", NULL,
     "export the data-parallel rank contract (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, "
     "MASTER_PORT, ...) to every task", 0, 0, opt_ddp},
    {"cdl-mps", "N",
     "share each GPU among N consecutive local ranks through a per-step MPS daemon "
     "(default: local tasks / GPUs); implies --cdl-ddp", 2, 0, opt_mps},
    {"cdl-bind", "none|cores|closest[,verbose]",
     "bind each task to whole cores of the step (closest: the cores nearest its GPU)", 1, 0,
     opt_bind},
};

/* Options that sbatch or salloc forwarded to the job's steps: Slurm puts
 * them into the job's environment, which srun inherits. */
static int forwarded_options(void)
{
    static const char prefix[] = "SLURM_SPANK__SLURM_SPANK_OPTION_cdl_";
    for (char **e = environ; e && *e; e++)
        if (!strncmp(*e, prefix, sizeof prefix - 1))
            return 1;
    return 0;
}

/* A plugstack.conf error must never take a node down: slurmd (at start,
 * where a failure with `required` stops it), the job prolog/epilog and the
 * batch, extern and interactive steps (a failure there drains the node)
 * log it and go on without doing anything. srun, sbatch and salloc fail
 * with the message naming the key, so the admin hears of it at the first
 * job; a normal step in slurmstepd fails the tasks of a step that asked
 * for options (refused()). Returns what the hook returns. */
static int conf_failed(spank_t sp, spank_context_t ctx)
{
    uint32_t stepid = 0;
    const char *where = ctx == S_CTX_SLURMD       ? "slurmd"
                        : ctx == S_CTX_JOB_SCRIPT ? "the job prolog/epilog"
                        : ctx == S_CTX_REMOTE && sp &&
                                spank_get_item(sp, S_JOB_STEPID, &stepid) == ESPANK_SUCCESS &&
                                stepid > SPK_MAX_NORMAL_STEP_ID
                            ? "the batch/extern step"
                            : NULL;
    if (where) {
        slurm_error("cdl: %s; ignored in %s so the node stays up, but srun and sbatch fail "
                    "until it is fixed (with `optional`, those that use the --cdl-* options)",
                    spk_last_error(), where);
        spk_g.conf_broken = 1;
        return 0;
    }
    /* srun's user did not write the line: say whose it is. */
    if (ctx == S_CTX_REMOTE)
        slurm_error("cdl: %s", spk_last_error());
    else
        slurm_error("cdl: %s; this is the cluster's plugstack.conf line loading cdl_spank.so: "
                    "ask the administrator to fix it", spk_last_error());
    /* Failing init drops the plugin, which with `optional` runs the step
     * without the options (no RANK: every task trains alone, srun
     * succeeds). So the plugin stays loaded, and the options fail instead,
     * where they would be lost: in an srun of a job submitted with them
     * (sbatch, salloc, #SBATCH lines), which finds them in its
     * environment, and in slurmstepd (a node whose file is wrong while the
     * submit host's is right), whose tasks then fail. A step without
     * options runs. */
    if (ctx == S_CTX_REMOTE || (ctx == S_CTX_LOCAL && forwarded_options())) {
        snprintf(spk_g.conf_error, sizeof spk_g.conf_error, "%s", spk_last_error());
        spk_g.conf_broken = spk_g.conf_refuse = 1;
        return 0;
    }
    return -1;
}

/* plugstack.conf naming the plugin twice (a line of its own and the
 * packaged plugstack.conf.d/cdl.conf, or two builds). Slurm dlopens a path
 * once, so with one path every hook ran once per line on the same state
 * (bindings twice, the later line's settings silently winning); with two
 * paths the second copy's options are disabled by Slurm and its settings
 * silently lost. The first line loaded owns the plugin (owner_av: the
 * arguments Slurm passes to every hook of that line); later ones say so
 * and do nothing. A copy at another path finds the first through a
 * variable naming this exec of this process (AT_RANDOM's bytes: a pid
 * alone would survive an exec of slurmd). */
#define SPK_LOADED_VAR "CDL_SPANK_LOADED"
static char **owner_av;
static int inert;

static int mine(char **av)
{
    return !inert && av == owner_av;
}

static void self_path(char *buf, size_t n)
{
    Dl_info info;
    snprintf(buf, n, "%s",
             dladdr((const void *)&owner_av, &info) && info.dli_fname ? info.dli_fname : "cdl_spank.so");
}

static int loaded_before(void)
{
    const unsigned char *rnd = (const unsigned char *)getauxval(AT_RANDOM);
    unsigned long long id = 0;
    char me[32], path[1024], mark[1100];
    const char *prev = getenv(SPK_LOADED_VAR);
    for (int i = 0; rnd && i < 8; i++)
        id = id << 8 | rnd[i];
    snprintf(me, sizeof me, "%llx ", id);
    self_path(path, sizeof path);
    if (!owner_av && !(prev && !strncmp(prev, me, strlen(me)))) {
        snprintf(mark, sizeof mark, "%s%s", me, path);
        setenv(SPK_LOADED_VAR, mark, 1);
        return 0;
    }
    slurm_error("cdl: plugstack.conf loads cdl_spank.so twice (%s, then %s): the first line's "
                "settings apply and the later line is ignored; keep one line (an included "
                "plugstack.conf.d/cdl.conf may repeat a line of plugstack.conf)",
                owner_av ? path : prev + strlen(me), path);
    return 1;
}

int slurm_spank_init(spank_t sp, int ac, char **av)
{
    spank_context_t ctx = spank_context();
    spk_set_log(log_to_slurm);
    if (loaded_before()) {
        if (!owner_av)
            inert = 1;   /* a second copy: its own state stays unused */
        return 0;
    }
    owner_av = av;
    memset(&spk_g, 0, sizeof spk_g);
    /* One line in the slurmd log (at its start and per step) tells the
     * admin which build a node runs; srun/sbatch stay quiet for users. */
    if (ctx == S_CTX_SLURMD || ctx == S_CTX_REMOTE)
        slurm_info("cdl_spank %s (rank contract %d) loaded", PACKAGE_VERSION,
                   CDL_CONTRACT_VERSION);
    /* With a broken configuration on the node side the options are still
     * registered (forwarded values must be accepted) but do nothing. */
    if (spk_conf_parse(&spk_g.conf, ac, av) != 0 && conf_failed(sp, ctx) != 0)
        return -1;
    /* slurmd and prolog/epilog scripts parse no options. */
    if (ctx == S_CTX_SLURMD || ctx == S_CTX_JOB_SCRIPT)
        return 0;
    for (size_t i = 0; i < sizeof options / sizeof options[0]; i++)
        if (spank_option_register(sp, &options[i]) != ESPANK_SUCCESS) {
            slurm_error("cdl: cannot register option --%s", options[i].name);
            return -1;
        }
    return 0;
}

int slurm_spank_init_post_opt(spank_t sp, int ac, char **av)
{
    (void)ac;
    if (!mine(av))
        return 0;
    /* srun, sbatch and salloc hand their environment to the job. */
    if (spank_context() != S_CTX_REMOTE)
        unsetenv(SPK_LOADED_VAR);
    if (spk_g.conf_broken)
        return 0;
    return spank_context() == S_CTX_REMOTE ? spk_remote_post_opt(sp) : 0;
}

int slurm_spank_user_init(spank_t sp, int ac, char **av)
{
    (void)ac;
    if (!mine(av))
        return 0;
    if (spk_g.conf_broken)
        return 0;
    return spk_remote_user_init(sp);
}

int slurm_spank_task_init_privileged(spank_t sp, int ac, char **av)
{
    (void)ac;
    if (!mine(av))
        return 0;
    if (spk_g.conf_broken)
        return spk_g.conf_refuse ? spk_remote_refused() : 0;
    return spk_remote_task_privileged(sp);
}

int slurm_spank_task_init(spank_t sp, int ac, char **av)
{
    (void)ac;
    if (!mine(av))
        return 0;
    if (spk_g.conf_broken)
        return spk_g.conf_refuse ? spk_remote_refused() : 0;
    return spk_remote_task_init(sp);
}

int slurm_spank_task_exit(spank_t sp, int ac, char **av)
{
    (void)ac;
    if (!mine(av))
        return 0;
    if (spk_g.conf_broken)
        return 0;
    return spk_remote_task_exit(sp);
}

int slurm_spank_exit(spank_t sp, int ac, char **av)
{
    (void)ac;
    if (!mine(av))
        return 0;
    /* A process that loads the stack again (slurmd reconfiguring) starts
     * afresh, not with a line "loaded twice". */
    owner_av = NULL;
    unsetenv(SPK_LOADED_VAR);
    if (spk_g.conf_broken)
        return 0;
    return spank_context() == S_CTX_REMOTE ? spk_remote_exit(sp) : 0;
}

/* The job script context gets no slurm_spank_init: the settings are parsed
 * here from the same arguments. With a broken configuration nothing is swept
 * (runtime_dir itself may be the broken value): steps cannot start with it,
 * and the logged error tells the admin to look. */
int slurm_spank_job_epilog(spank_t sp, int ac, char **av)
{
    spk_set_log(log_to_slurm);
    if (spk_conf_parse(&spk_g.conf, ac, av) != 0)
        return conf_failed(sp, S_CTX_JOB_SCRIPT);
    return spk_epilog(sp);
}
