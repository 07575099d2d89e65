/* Every rank of a data-parallel run must train with the same settings and
 * data: ranks whose --batch-size, --epochs, model or dataset size differ
 * take different numbers of steps, so one rank's gradient all-reduce meets
 * another's validation sums, and the run goes on with mixed numbers until a
 * rank dies ("rank 1 died: allreduce #36 ..."), naming no cause. A wrapper
 * that passes rank-dependent options, a node-local spec file or a data copy
 * that differs between nodes is enough. Checked once before training: rank
 * 0's configuration (train_config_json, ~1 KB), data sizes, the training
 * data's fingerprint (data_fingerprint's CRC) and parameter count go to
 * every rank; each compares them with its own, and every rank
 * fails with the differences named where they are. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lib/core/log.h"

#include "checkpoint.h"
#include "run.h"

enum { AGREE_CONFIG_MAX = 16384 };

/* Rank 0's sizes, then the length of its configuration: what is sent
 * first. */
enum { SZ_TRAIN, SZ_VAL, SZ_TEST, SZ_PARAMS, SZ_DATA, SZ_LEN, SZ_N };

static void sizes_of(const run *r, double s[SZ_N])
{
    s[SZ_TRAIN] = r->train.n;
    s[SZ_VAL] = r->have_val ? r->val.n : -1;
    s[SZ_TEST] = r->have_test ? r->test.n : -1;
    s[SZ_PARAMS] = (double)cdl_model_nparams(r->model);
    /* The CRC of the training data's contents ("v1 crc32=XXXXXXXX"; -1
     * under --summary, which computes none). */
    const char *crc = strstr(r->fingerprint, "crc32=");
    s[SZ_DATA] = crc ? (double)strtoul(crc + 6, NULL, 16) : -1;
}

/* Rank 0's n values to every rank, in host memory (cdl_dist_broadcast
 * takes the backend's, a GPU's on a GPU): a sum to which only rank 0
 * adds. Whole numbers below 2^53 (sizes, bytes) arrive exactly. */
int train_from_rank0(run *r, double *v, size_t n)
{
    if (r->ri.rank != 0)
        memset(v, 0, n * sizeof *v);
    return cdl_dist_allreduce_f64(r->dist, v, n);
}

/* Appends "what A -> B" to msg when a != b. */
static void size_change(char *msg, size_t len, const char *what, double a, double b)
{
    size_t used = strlen(msg);
    if (a != b)
        snprintf(msg + used, len - used, "%s%s %.0f -> %.0f", used ? ", " : "", what, a, b);
}

int train_ranks_agree(run *r)
{
    if (!r->dist || r->ri.world < 2)
        return 0;
    int world = r->ri.world, rank = r->ri.rank, rc = -1;
    char *ref = cdl_malloc(AGREE_CONFIG_MAX), *mine = cdl_malloc(AGREE_CONFIG_MAX);
    double *bytes = cdl_malloc(AGREE_CONFIG_MAX * sizeof *bytes);
    int *bad = cdl_malloc((size_t)world * sizeof *bad);
    char msg[1024];
    double ref_sizes[SZ_N], my_sizes[SZ_N];
    if (!ref || !mine || !bytes || !bad || train_config_json(r->cfg, mine, AGREE_CONFIG_MAX) != 0)
        goto out;
    size_t len = strlen(mine);
    sizes_of(r, my_sizes);
    my_sizes[SZ_LEN] = (double)len;
    memcpy(ref_sizes, my_sizes, sizeof ref_sizes);
    for (size_t i = 0; i < len; i++)
        bytes[i] = (unsigned char)mine[i];
    if (train_from_rank0(r, ref_sizes, SZ_N) != 0)
        goto out;
    size_t ref_len = (size_t)ref_sizes[SZ_LEN];
    if (ref_len >= AGREE_CONFIG_MAX) {
        cdl_error("rank %d: rank 0's configuration is %zu bytes long", rank, ref_len);
        goto out;
    }
    if (train_from_rank0(r, bytes, ref_len) != 0)
        goto out;
    for (size_t i = 0; i < ref_len; i++)
        ref[i] = (char)bytes[i];
    ref[ref_len] = '\0';
    if (train_config_differences(ref, mine, msg, sizeof msg) != 0)
        goto out;
    size_change(msg, sizeof msg, "training samples", ref_sizes[SZ_TRAIN], my_sizes[SZ_TRAIN]);
    size_change(msg, sizeof msg, "validation samples", ref_sizes[SZ_VAL], my_sizes[SZ_VAL]);
    size_change(msg, sizeof msg, "test samples", ref_sizes[SZ_TEST], my_sizes[SZ_TEST]);
    size_change(msg, sizeof msg, "model parameters", ref_sizes[SZ_PARAMS],
                my_sizes[SZ_PARAMS]);
    /* Of the same size but other contents: a node's stale copy. */
    if (ref_sizes[SZ_DATA] != my_sizes[SZ_DATA] && ref_sizes[SZ_TRAIN] == my_sizes[SZ_TRAIN]) {
        size_t used = strlen(msg);
        snprintf(msg + used, sizeof msg - used,
                 "%straining data's contents (same size) crc32=%08lx -> %08lx",
                 used ? ", " : "", (unsigned long)ref_sizes[SZ_DATA],
                 (unsigned long)my_sizes[SZ_DATA]);
    }
    int me = msg[0] != '\0';
    if (cdl_dist_allgather(r->dist, &me, bad, sizeof me) != 0)
        goto out;
    int nbad = 0, first = -1;
    for (int i = 0; i < world; i++)
        if (bad[i]) {
            nbad++;
            if (first < 0)
                first = i;
        }
    if (me)
        cdl_error("rank %d runs with other settings or data than rank 0 (rank 0's -> this "
                  "rank's): %s. Every rank must run the same command on the same data: check "
                  "wrappers that pass rank-dependent options and node-local copies of the data "
                  "or spec file", rank, msg);
    else if (nbad)
        cdl_error("rank %d: %d rank%s (rank %d%s) run%s with other settings or data than rank "
                  "0 (see %s error); every rank must run the same command on the same data",
                  rank, nbad, nbad == 1 ? "" : "s", first, nbad > 1 ? " and others" : "",
                  nbad == 1 ? "s" : "", nbad == 1 ? "its" : "their");
    else
        rc = 0;
out:
    cdl_free(bad);
    cdl_free(bytes);
    cdl_free(mine);
    cdl_free(ref);
    return rc;
}

/* One rank's outcome of a set-up stage, exchanged by train_setup_agree. */
struct setup_outcome {
    int failed;
    char host[60];
};

int train_setup_agree(run *r, int failed, const char *what)
{
    if (!r->dist || r->ri.world < 2)
        return failed ? -1 : 0;
    int world = r->ri.world, rc = -1;
    struct setup_outcome me = {.failed = failed}, *all = cdl_malloc((size_t)world * sizeof *all);
    char mine[1024];
    if (!all)
        return -1;
    /* The node as Slurm names it (squeue, sinfo), else the host name. */
    const char *node = getenv("SLURMD_NODENAME");
    if (node && *node)
        snprintf(me.host, sizeof me.host, "%s", node);
    else if (gethostname(me.host, sizeof me.host - 1) != 0)
        snprintf(me.host, sizeof me.host, "?");
    snprintf(mine, sizeof mine, "%s", failed ? cdl_last_error() : "");
    if (cdl_dist_allgather(r->dist, &me, all, sizeof me) != 0)
        goto out;
    int nbad = 0, first = -1;
    for (int i = 0; i < world; i++)
        if (all[i].failed) {
            nbad++;
            if (first < 0)
                first = i;
        }
    if (failed)
        cdl_error("%s (rank %d, on %s)", mine, r->ri.rank, me.host);
    else if (nbad)
        cdl_error("%s failed on rank %d (on %s)%s: see that rank's error; every rank stops",
                  what, first, all[first].host, nbad > 1 ? " and other ranks" : "");
    else
        rc = 0;
out:
    cdl_free(all);
    return rc;
}

/* A whole number from the environment, 0 when unset or not a number. */
static long env_count(const char *name)
{
    const char *v = getenv(name);
    char *end;
    long n = v && *v ? strtol(v, &end, 10) : 0;
    return v && *v && !*end && n > 0 ? n : 0;
}

void train_alone_warning(const run *r)
{
    const char *job = getenv("SLURM_JOB_ID");
    long tasks = env_count("SLURM_NTASKS"), nodes = env_count("SLURM_JOB_NUM_NODES");
    if (r->ri.world != 1 || strcmp(r->ri.source, "single") || !job || !*job ||
        (tasks < 2 && nodes < 2) || getenv("SLURM_STEP_ID") || getenv("SLURM_STEPID"))
        return;
    char has[64];
    if (tasks >= 2 && nodes >= 2)
        snprintf(has, sizeof has, "%ld tasks on %ld nodes", tasks, nodes);
    else if (tasks >= 2)
        snprintf(has, sizeof has, "%ld tasks", tasks);
    else
        snprintf(has, sizeof has, "%ld nodes", nodes);
    log_line(CDL_LOG_WARNING, stderr,
             "cdl: warning: Slurm job %s has %s, but this process runs outside a job step (in "
             "the batch script or salloc's shell) and trains alone: start it with srun (srun "
             "cdl-train ...; with --cdl-ddp each task gets its rank) to train on all of them",
             job, has);
}
