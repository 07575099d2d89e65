/* The rank contract for one task (see contract.h). */
#include <netdb.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

#include "lib/dist/contract.h"
#include "spank/contract.h"
#include "spank/port.h"

int spk_resolve_host(const char *name, char *addr, size_t len)
{
    struct addrinfo hints, *res = NULL, *ai, *pick = NULL;
    int rc;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    rc = getaddrinfo(name, NULL, &hints, &res);
    if (rc != 0)
        return spk_error("master_addr=ip: cannot resolve node name '%s' (%s); ask the "
                         "administrator to use master_addr=hostname or fix name resolution",
                         name, gai_strerror(rc));
    for (ai = res; ai; ai = ai->ai_next)
        if (ai->ai_family == AF_INET) {
            pick = ai;
            break;
        }
    if (!pick)
        pick = res;
    rc = getnameinfo(pick->ai_addr, pick->ai_addrlen, addr, (socklen_t)len, NULL, 0,
                     NI_NUMERICHOST);
    freeaddrinfo(res);
    if (rc != 0)
        return spk_error("master_addr=ip: no numeric address for '%s' (%s)", name,
                         gai_strerror(rc));
    return 0;
}

int spk_contract_step(const struct spk_conf *conf, const struct spk_step *step,
                      spk_resolve_fn resolve, struct spk_step_contract *out)
{
    char name[SPK_VALUE_MAX];
    memset(out, 0, sizeof *out);
    if (step->distribution && !strncmp(step->distribution, "arbitrary", 9))
        return spk_error("--cdl-ddp: with -m arbitrary the node of task 0 is unknown to the "
                         "other nodes; use a block, cyclic or plane distribution");
    if (!step->nodelist || !*step->nodelist)
        return spk_error("--cdl-ddp: SLURM_STEP_NODELIST is missing from the step's "
                         "environment, so MASTER_ADDR cannot be derived");
    if (spk_hostlist_first(step->nodelist, out->master_node, sizeof out->master_node) != 0)
        return spk_error("--cdl-ddp: SLURM_STEP_NODELIST: %s", spk_last_error());
    if ((size_t)snprintf(name, sizeof name, "%s%s", out->master_node, conf->addr_suffix) >=
        sizeof name)
        return spk_error("--cdl-ddp: master node name '%s' is too long", out->master_node);
    if (conf->addr_policy == SPK_ADDR_IP) {
        if (!resolve)
            return spk_error("master_addr=ip: no resolver");
        if (resolve(name, out->master_addr, sizeof out->master_addr) != 0)
            return -1;
    } else {
        strcpy(out->master_addr, name);
    }
    return spk_port_choose(step->resv_ports, step->jobid, step->stepid, conf->port_lo,
                           conf->port_hi, &out->master_port, &out->port_reserved);
}

void spk_env_init(struct spk_env *env)
{
    memset(env, 0, sizeof *env);
}

int spk_env_add(struct spk_env *env, const char *name, int keep_user, const char *fmt, ...)
{
    struct spk_envvar *v;
    va_list ap;
    int n;
    if (env->n >= SPK_ENV_MAX || strlen(name) >= sizeof env->v[0].name)
        return spk_error("internal: environment list full at %s", name);
    v = &env->v[env->n];
    strcpy(v->name, name);
    va_start(ap, fmt);
    n = vsnprintf(v->value, sizeof v->value, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof v->value)
        return spk_error("value of %s is too long", name);
    v->keep_user = keep_user;
    v->skip = 0;
    env->n++;
    return 0;
}

const char *spk_env_get(const struct spk_env *env, const char *name)
{
    for (int i = 0; i < env->n; i++)
        if (!strcmp(env->v[i].name, name))
            return env->v[i].value;
    return NULL;
}

int spk_contract_task(const struct spk_step *s, const struct spk_step_contract *sc,
                      uint32_t local_id, uint32_t global_id, struct spk_env *out)
{
    spk_env_init(out);
    if (s->ntasks == 0 || s->local_tasks == 0 || s->nnodes == 0)
        return spk_error("--cdl-ddp: step %u.%u reports no tasks or nodes", s->jobid, s->stepid);
    if (global_id >= s->ntasks || local_id >= s->local_tasks || s->nodeid >= s->nnodes ||
        s->local_tasks > s->ntasks)
        return spk_error("--cdl-ddp: inconsistent layout: task %u (local %u of %u) of %u on "
                         "node %u of %u", global_id, local_id, s->local_tasks, s->ntasks,
                         s->nodeid, s->nnodes);
    if (s->replicas_per_gpu < 1)
        return spk_error("--cdl-ddp: replicas per GPU must be at least 1");
    uint32_t cpus = s->cpus_per_task ? s->cpus_per_task : 1;
    /* Every value but the MPS ones may be overridden by the user (kept). */
    if (spk_env_add(out, CDL_ENV_RANK, 1, "%u", global_id) ||
        spk_env_add(out, CDL_ENV_WORLD_SIZE, 1, "%u", s->ntasks) ||
        spk_env_add(out, CDL_ENV_LOCAL_RANK, 1, "%u", local_id) ||
        spk_env_add(out, CDL_ENV_LOCAL_WORLD_SIZE, 1, "%u", s->local_tasks) ||
        spk_env_add(out, CDL_ENV_GROUP_RANK, 1, "%u", s->nodeid) ||
        spk_env_add(out, CDL_ENV_NODE_RANK, 1, "%u", s->nodeid) ||
        spk_env_add(out, CDL_ENV_MASTER_ADDR, 1, "%s", sc->master_addr) ||
        spk_env_add(out, CDL_ENV_MASTER_PORT, 1, "%d", sc->master_port) ||
        spk_env_add(out, CDL_ENV_NNODES, 1, "%u", s->nnodes) ||
        spk_env_add(out, CDL_ENV_REPLICAS_PER_GPU, 1, "%d", s->replicas_per_gpu) ||
        spk_env_add(out, CDL_ENV_JOB_ID, 1, "%u.%u", s->jobid, s->stepid) ||
        spk_env_add(out, CDL_ENV_LAUNCHER, 1, "slurm") ||
        spk_env_add(out, "OMP_NUM_THREADS", 1, "%u", cpus))
        return -1;
    return 0;
}

int spk_env_keep_user(struct spk_env *env, const char *self_job_id, spk_lookup_fn lookup,
                      void *ctx)
{
    /* A value is only good until the next lookup (the plugin's shares one
     * buffer): compare each before asking for the next. */
    const char *launcher = lookup(ctx, CDL_ENV_LAUNCHER);
    int from_slurm = launcher && !strcmp(launcher, "slurm");
    const char *job = lookup(ctx, CDL_ENV_JOB_ID);
    int inherited = from_slurm && job && strcmp(job, self_job_id);
    int kept = 0;
    for (int i = 0; i < env->n; i++) {
        struct spk_envvar *v = &env->v[i];
        v->skip = 0;
        if (!v->keep_user || inherited)
            continue;
        if (lookup(ctx, v->name)) {
            v->skip = 1;
            kept++;
        }
    }
    return kept;
}
