/* torchrun's command line as the plugin sees it (see torchrun.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "spank/torchrun.h"
#include "spank/util.h"

static const char *base(const char *p)
{
    const char *s = strrchr(p, '/');
    return s ? s + 1 : p;
}

static int is_module(const char *m)
{
    return !strcmp(m, "torch.distributed.run") || !strcmp(m, "torch.distributed.launch");
}

/* Index of the first torchrun option: 1 for torchrun itself, after
 * "-m torch.distributed.run" for python; 0 when argv is not torchrun. */
static int torchrun_args(int argc, char *const *argv)
{
    if (argc < 1 || !argv[0])
        return 0;
    const char *b = base(argv[0]);
    if (!strcmp(b, "torchrun"))
        return 1;
    if (strncmp(b, "python", 6) != 0)
        return 0;
    for (int i = 1; i < argc && argv[i] && argv[i][0] == '-'; i++) {
        if (!strcmp(argv[i], "-m"))
            return i + 1 < argc && argv[i + 1] && is_module(argv[i + 1]) ? i + 2 : 0;
        if (!strncmp(argv[i], "-m", 2))
            return is_module(argv[i] + 2) ? i + 1 : 0;
        if (!strcmp(argv[i], "-c"))
            return 0;
        if (!strcmp(argv[i], "-X") || !strcmp(argv[i], "-W"))
            i++;   /* their value */
    }
    return 0;
}

/* "--nproc_per_node" and "--nproc-per-node" (torch 2) are one option. */
static int opt_is(const char *arg, const char *name, const char **value)
{
    size_t i = 0;
    for (; name[i]; i++) {
        char a = arg[i] == '-' && i > 2 ? '_' : arg[i];
        if (a != name[i])
            return 0;
    }
    if (arg[i] == '=') {
        *value = arg + i + 1;
        return 1;
    }
    if (arg[i] == '\0') {
        *value = NULL;
        return 1;
    }
    return 0;
}

/* torchrun's options that take no value (everything else takes one). */
static int is_flag(const char *arg)
{
    static const char *const flags[] = {"--standalone", "-m", "--module", "--no_python",
                                        "--run_path", "--use_env", "-h", "--help", NULL};
    const char *v;
    for (int i = 0; flags[i]; i++)
        if (opt_is(arg, flags[i], &v) && !v)
            return 1;
    return 0;
}

/* --nnodes N or MIN:MAX; left 0 when malformed (torchrun says so itself). */
static void parse_nnodes(const char *s, struct spk_torchrun *t)
{
    char lo[16], *hi;
    snprintf(t->nnodes, sizeof t->nnodes, "%s", s);
    if (spk_copy(lo, sizeof lo, s) != 0)
        return;
    hi = strchr(lo, ':');
    if (hi)
        *hi++ = '\0';
    if (spk_parse_uint(lo, 1, 1L << 30, &t->nnodes_min) != 0 ||
        spk_parse_uint(hi ? hi : lo, 1, 1L << 30, &t->nnodes_max) != 0 ||
        t->nnodes_max < t->nnodes_min)
        t->nnodes_min = t->nnodes_max = 0;
}

void spk_torchrun_parse(int argc, char *const *argv, struct spk_torchrun *t)
{
    memset(t, 0, sizeof *t);
    int i = torchrun_args(argc, argv);
    if (!i)
        return;
    t->found = 1;
    for (; i < argc && argv[i] && argv[i][0] == '-'; i++) {
        const char *arg = argv[i], *next = NULL, *val = NULL;
        int takes_next = !is_flag(arg) && !strchr(arg, '=');
        if (takes_next && i + 1 < argc)
            next = argv[i + 1];
        if (opt_is(arg, "--standalone", &val)) {
            t->standalone = 1;
        } else if (opt_is(arg, "--nproc_per_node", &val)) {
            long n;
            t->nproc_given = 1;
            t->nproc = spk_parse_uint(val ? val : next ? next : "", 1, 4096, &n) == 0 ? (int)n : 0;
        } else if (opt_is(arg, "--nnodes", &val)) {
            parse_nnodes(val ? val : next ? next : "", t);
        }
        if (takes_next && !val)
            i++;   /* its value */
    }
}

int spk_torchrun_check(const struct spk_torchrun *t, uint32_t ntasks, uint32_t local_tasks)
{
    if (!t->found || ntasks < 1)
        return 0;
    if (t->standalone && ntasks > 1)
        return spk_error("torchrun --standalone starts a rendezvous of its own on each "
                         "task's node, but this step has %u tasks: they would not form one "
                         "job. Drop --standalone: under --cdl-ddp torchrun takes --nnodes, "
                         "--node_rank, --master_addr and --master_port from the step "
                         "(PET_NNODES=%u and the others), one torchrun per task; or run "
                         "one task (srun -N1 -n1)", ntasks, ntasks);
    if (t->nnodes_max && (ntasks < (uint32_t)t->nnodes_min || ntasks > (uint32_t)t->nnodes_max))
        return spk_error("torchrun --nnodes=%s, but this step has %u tasks (%u on this node): "
                         "each task runs one torchrun, which is one torchrun node. Run one "
                         "task per node (srun --ntasks-per-node=1) and let torchrun start "
                         "--nproc_per_node workers on each, or leave --nnodes out: the "
                         "plugin sets PET_NNODES=%u", t->nnodes, ntasks, local_tasks, ntasks);
    return 0;
}

unsigned spk_torchrun_threads(const struct spk_torchrun *t, const char *env_nproc,
                              unsigned share, int *nproc)
{
    long n = 1;
    *nproc = 1;
    if (!t->found)
        return share;
    if (t->nproc_given)
        n = t->nproc;
    else if (env_nproc && spk_parse_uint(env_nproc, 1, 4096, &n) != 0)
        n = 0;
    *nproc = (int)n;
    if (n <= 0)
        return 1;
    return share / (unsigned)n ? share / (unsigned)n : 1;
}
