/* The rank contract for one task (see contract.h). */
#include <netdb.h>
#include <stdarg.h>
#include <stdint.h>
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
    contract_err e;
    if (contract_hostlist_nth(step->nodelist, 0, out->master_node, sizeof out->master_node,
                              &e) != 0)
        return spk_error("--cdl-ddp: SLURM_STEP_NODELIST: %s", e.msg);
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
    uint32_t key_job, key_step;
    spk_port_key(step->jobid, step->stepid, step->array_job, step->array_task, &key_job,
                 &key_step);
    return spk_port_choose(step->resv_ports, key_job, key_step, conf->port_lo, conf->port_hi,
                           &out->master_port, &out->port_reserved);
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
    v->skip = v->unset = 0;
    env->n++;
    return 0;
}

int spk_env_unset(struct spk_env *env, const char *name)
{
    if (spk_env_add(env, name, 0, "%s", "") != 0)
        return -1;
    env->v[env->n - 1].unset = 1;
    return 0;
}

const char *spk_env_get(const struct spk_env *env, const char *name)
{
    for (int i = 0; i < env->n; i++)
        if (!env->v[i].unset && !strcmp(env->v[i].name, name))
            return env->v[i].value;
    return NULL;
}

/* contract_encode's writer: into the list, tuning knobs marked as the
 * user's to keep. */
static int env_set(void *ctx, const char *name, const char *value, int user_wins,
                   contract_err *e)
{
    if (spk_env_add(ctx, name, user_wins, "%s", value) != 0) {
        snprintf(e->msg, sizeof e->msg, "%s", spk_last_error());
        return -1;
    }
    return 0;
}

int spk_contract_task(const struct spk_step *s, const struct spk_step_contract *sc,
                      uint32_t local_id, uint32_t global_id, struct spk_env *out)
{
    contract c;
    contract_err e;
    spk_env_init(out);
    if (s->ntasks == 0 || s->local_tasks == 0 || s->nnodes == 0)
        return spk_error("--cdl-ddp: step %u.%u reports no tasks or nodes", s->jobid, s->stepid);
    if (global_id >= s->ntasks || local_id >= s->local_tasks || s->nodeid >= s->nnodes ||
        s->local_tasks > s->ntasks || s->ntasks > INT32_MAX)
        return spk_error("--cdl-ddp: inconsistent layout: task %u (local %u of %u) of %u on "
                         "node %u of %u", global_id, local_id, s->local_tasks, s->ntasks,
                         s->nodeid, s->nnodes);
    memset(&c, 0, sizeof c);
    c.rank = (int)global_id;
    c.world = (int)s->ntasks;
    c.local_rank = (int)local_id;
    c.local_world = (int)s->local_tasks;
    c.node_rank = (int)s->nodeid;
    c.nnodes = (int)s->nnodes;
    c.replicas_per_gpu = s->replicas_per_gpu;
    if (s->gpu_bind_task)
        snprintf(c.gpu_bind, sizeof c.gpu_bind, "task");
    c.master_port = sc->master_port;
    c.threads = s->cpus_per_task ? (int)s->cpus_per_task : 1;
    snprintf(c.master_addr, sizeof c.master_addr, "%s", sc->master_addr);
    snprintf(c.job_id, sizeof c.job_id, "%u.%u", s->jobid, s->stepid);
    snprintf(c.launcher, sizeof c.launcher, "slurm");
    snprintf(c.token, sizeof c.token, "%s", sc->token);
    if (contract_encode(&c, env_set, out, &e) != 0)
        return spk_error("--cdl-ddp: %s", e.msg);
    /* Whatever the contract does not set must not reach the task from the
     * submit shell: a stale token, store port or socket, torchrun's names. */
    if (!sc->token[0] && spk_env_unset(out, CDL_ENV_STORE_TOKEN))
        return -1;
    if (!c.store_port && spk_env_unset(out, CDL_ENV_STORE_PORT))   /* rank 0 binds MASTER_PORT */
        return -1;
    if (!c.gpu_bind[0] && spk_env_unset(out, CDL_ENV_GPU_BIND))   /* the slot rule */
        return -1;
    for (const char *const *f = contract_foreign_vars; *f; f++)
        if (spk_env_unset(out, *f))
            return -1;
    /* torchrun's option defaults (--nnodes, --node_rank, --master_addr,
     * --master_port), read only by torchrun: a task that runs torchrun is
     * one torchrun node of the step. Without them every torchrun would
     * default to --nnodes=1 at 127.0.0.1:29500, and each node would train
     * a world of its own. Options on torchrun's command line still win. */
    if (spk_env_add(out, "PET_NNODES", 0, "%u", s->ntasks) ||
        spk_env_add(out, "PET_NODE_RANK", 0, "%u", global_id) ||
        spk_env_add(out, "PET_MASTER_ADDR", 0, "%s", sc->master_addr) ||
        spk_env_add(out, "PET_MASTER_PORT", 0, "%d", sc->master_port))
        return -1;
    return 0;
}

int spk_env_keep_user(struct spk_env *env, spk_lookup_fn lookup, void *ctx)
{
    int kept = 0;
    for (int i = 0; i < env->n; i++) {
        struct spk_envvar *v = &env->v[i];
        v->skip = v->keep_user && !v->unset && lookup(ctx, v->name);
        kept += v->skip;
    }
    return kept;
}
