/* The rank contract's rules, once (see contract.h). No allocation, no
 * global state, no environment access: callers pass get/set functions. */
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>

#include "lib/dist/contract.h"

int contract_errorf(contract_err *e, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->msg, sizeof e->msg, fmt, ap);
    va_end(ap);
    return -1;
}

#define fail contract_errorf

/* ------------------------------------------------------------ the table */

#define ROW(name, kind, field, flags) {name, kind, offsetof(contract, field), flags}
static const contract_var table[] = {
    ROW(CDL_ENV_RANK, CONTRACT_INT, rank, 0),
    ROW(CDL_ENV_WORLD_SIZE, CONTRACT_INT, world, 0),
    ROW(CDL_ENV_LOCAL_RANK, CONTRACT_INT, local_rank, 0),
    ROW(CDL_ENV_LOCAL_WORLD_SIZE, CONTRACT_INT, local_world, 0),
    ROW(CDL_ENV_LOCAL_SIZE, CONTRACT_INT, local_world, 0),
    ROW(CDL_ENV_GROUP_RANK, CONTRACT_INT, node_rank, 0),
    ROW(CDL_ENV_NODE_RANK, CONTRACT_INT, node_rank, 0),
    ROW(CDL_ENV_NNODES, CONTRACT_INT, nnodes, 0),
    ROW(CDL_ENV_REPLICAS_PER_GPU, CONTRACT_INT, replicas_per_gpu, 0),
    ROW(CDL_ENV_GPU_BIND, CONTRACT_STR, gpu_bind, CONTRACT_OPTIONAL),
    ROW(CDL_ENV_MASTER_ADDR, CONTRACT_STR, master_addr, 0),
    ROW(CDL_ENV_MASTER_PORT, CONTRACT_INT, master_port, CONTRACT_OPTIONAL),
    ROW(CDL_ENV_STORE_PORT, CONTRACT_INT, store_port, CONTRACT_OPTIONAL),
    ROW(CDL_ENV_JOB_ID, CONTRACT_STR, job_id, 0),
    ROW(CDL_ENV_LAUNCHER, CONTRACT_STR, launcher, 0),
    ROW(CDL_ENV_STORE_TOKEN, CONTRACT_STR, token, CONTRACT_OPTIONAL),
    ROW(CDL_ENV_CONTRACT_VERSION, CONTRACT_INT, version, 0),
    /* Tuning knobs: a value the user exported is theirs. */
    ROW("OMP_NUM_THREADS", CONTRACT_INT, threads, CONTRACT_OPTIONAL | CONTRACT_USER_WINS),
    ROW("MKL_NUM_THREADS", CONTRACT_INT, threads, CONTRACT_OPTIONAL | CONTRACT_USER_WINS),
};
#undef ROW

const char *const contract_foreign_vars[] = {
    CDL_ENV_STORE_FD,         /* only ever handed to one rank 0 by its launcher */
    "TORCHELASTIC_RUN_ID",    /* would make discovery report torchrun */
    "GROUP_WORLD_SIZE",       /* torchrun's node count */
    NULL,
};

const contract_var *contract_vars(size_t *n)
{
    *n = sizeof table / sizeof table[0];
    return table;
}

int contract_encode(const contract *c, contract_set_fn set, void *ctx, contract_err *e)
{
    contract v = *c;
    v.version = CDL_CONTRACT_VERSION;
    if (contract_check(&v, &contract_names_of_contract, e))
        return -1;
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++) {
        const contract_var *t = &table[i];
        const char *field = (const char *)&v + t->offset;
        char buf[32];
        const char *val = field;
        if (t->kind == CONTRACT_INT) {
            int x;
            memcpy(&x, field, sizeof x);
            if (x == 0 && (t->flags & CONTRACT_OPTIONAL))
                continue;
            snprintf(buf, sizeof buf, "%d", x);
            val = buf;
        } else if (!*val && (t->flags & CONTRACT_OPTIONAL)) {
            continue;
        }
        if (set(ctx, t->name, val, !!(t->flags & CONTRACT_USER_WINS), e))
            return -1;
    }
    return 0;
}

/* ------------------------------------------------------------ decoding */

int contract_parse_int(const char *name, const char *s, long lo, long hi, long *out,
                       contract_err *e)
{
    long v = 0;
    const char *p = s;
    for (; *p >= '0' && *p <= '9' && p - s < 10; p++)
        v = v * 10 + (*p - '0');
    if (p == s || *p || v < lo || v > hi)
        return fail(e, "%s='%.64s' is not an integer in [%ld, %ld]: fix the launcher's "
                    "environment (docs/rank-contract.md)", name, s, lo, hi);
    *out = v;
    return 0;
}

/* 1 and *out when set, 0 when unset, -1 when malformed. */
static int get_int(contract_get_fn get, void *ctx, const char *name, long lo, long hi, int *out,
                   contract_err *e)
{
    const char *s = get(ctx, name);
    long v;
    if (!s)
        return 0;
    if (contract_parse_int(name, s, lo, hi, &v, e))
        return -1;
    *out = (int)v;
    return 1;
}

static int get_str(contract_get_fn get, void *ctx, const char *name, char *out, size_t len,
                   contract_err *e)
{
    const char *s = get(ctx, name);
    if (!s)
        return 0;
    if (strlen(s) >= len)
        return fail(e, "%s='%.64s...' is longer than %zu characters", name, s, len - 1);
    memcpy(out, s, strlen(s) + 1);
    return 1;
}

static int required(contract_get_fn get, void *ctx, const char *name, long lo, int *out,
                    const char *why, contract_err *e)
{
    int r = get_int(get, ctx, name, lo, INT_MAX, out, e);
    if (r == 0)
        return fail(e, "%s is not set but %s: export it too (docs/rank-contract.md)", name, why);
    return r < 0 ? -1 : 0;
}

/* LOCAL_RANK, LOCAL_WORLD_SIZE, the node: given, or implied by one node. */
static int decode_node(contract *c, contract_get_fn get, void *ctx, contract_err *e)
{
    int group = 0, node = 0;
    int lr = get_int(get, ctx, CDL_ENV_LOCAL_RANK, 0, INT_MAX, &c->local_rank, e);
    int lw = get_int(get, ctx, CDL_ENV_LOCAL_WORLD_SIZE, 1, INT_MAX, &c->local_world, e);
    int g = get_int(get, ctx, CDL_ENV_GROUP_RANK, 0, INT_MAX, &group, e);
    int n = get_int(get, ctx, CDL_ENV_NODE_RANK, 0, INT_MAX, &node, e);
    int nn = get_int(get, ctx, CDL_ENV_NNODES, 1, INT_MAX, &c->nnodes, e);
    if (lr < 0 || lw < 0 || g < 0 || n < 0 || nn < 0)
        return -1;
    if (g && n && group != node)
        return fail(e, "GROUP_RANK=%d and NODE_RANK=%d disagree: they both name this "
                    "process's node; set them equal", group, node);
    c->node_rank = g ? group : node;
    /* Without CDL_NNODES the node count is inferred, right when every node
     * runs LOCAL_WORLD_SIZE ranks. Nodes that run different numbers (srun
     * -N2 -n3 gives 2 and 1) cannot tell: one that does not divide
     * WORLD_SIZE says so here (it used to take itself for the only node and
     * blame LOCAL_WORLD_SIZE, which is right). */
    if (!nn && lw && c->world % c->local_world != 0)
        return fail(e, CDL_ENV_LOCAL_WORLD_SIZE "=%d does not divide " CDL_ENV_WORLD_SIZE "=%d, "
                    "so the number of nodes is unknown (nodes running different numbers of "
                    "ranks): export " CDL_ENV_NNODES ", the number of nodes, to every rank "
                    "(under Slurm $SLURM_STEP_NUM_NODES; srun --cdl-ddp and cdlrun set it)",
                    c->local_world, c->world);
    if (!nn)
        c->nnodes = lw ? c->world / c->local_world : 1;
    if (c->nnodes == 1) {
        if (!lr)
            c->local_rank = c->rank;
        if (!lw)
            c->local_world = c->world;
        return 0;
    }
    const char *why = "several nodes are given";
    if ((!lr && required(get, ctx, CDL_ENV_LOCAL_RANK, 0, &c->local_rank, why, e)) ||
        (!lw && required(get, ctx, CDL_ENV_LOCAL_WORLD_SIZE, 1, &c->local_world, why, e)) ||
        (!g && !n && required(get, ctx, CDL_ENV_GROUP_RANK, 0, &c->node_rank, why, e)))
        return -1;
    return 0;
}

int contract_decode(contract *c, contract_get_fn get, void *ctx, contract_err *e)
{
    memset(c, 0, sizeof *c);
    c->replicas_per_gpu = 1;
    int r = get_int(get, ctx, CDL_ENV_CONTRACT_VERSION, 1, INT_MAX, &c->version, e);
    if (r < 0)
        return -1;
    if (r && c->version != CDL_CONTRACT_VERSION) {
        /* Which side is behind, and how the admin sees the launcher's
         * release: the numbers alone left both to guess. */
        const char *l = get(ctx, CDL_ENV_LAUNCHER);
        /* A user's own build under the site's plugin cannot install
         * another plugin: Slurm's own variables (PMIx, SLURM_*) need none. */
        const char *see = !l                   ? ""
                          : !strcmp(l, "slurm")  ? "; srun --cdl-version prints the plugin's"
                          : !strcmp(l, "cdlrun") ? "; cdlrun --version prints its"
                                                 : "";
        const char *own = l && !strcmp(l, "slurm")
                              ? " (a cdl of your own: run the plugin's release, or start the "
                                "ranks without --cdl-ddp, srun --mpi=pmix, to take them from "
                                "Slurm)"
                              : "";
        return fail(e, CDL_ENV_CONTRACT_VERSION "=%d (from launcher %s) but this libcdl (cdl %s) "
                    "reads version %d: the launcher is of %s release%s; install the plugin, "
                    "cdlrun and libcdl of one release%s",
                    c->version, l ? l : "unknown", PACKAGE_VERSION, CDL_CONTRACT_VERSION,
                    c->version < CDL_CONTRACT_VERSION ? "an older" : "a newer", see, own);
    }
    if (required(get, ctx, CDL_ENV_RANK, 0, &c->rank, CDL_ENV_WORLD_SIZE " is", e) ||
        required(get, ctx, CDL_ENV_WORLD_SIZE, 1, &c->world, CDL_ENV_RANK " is", e) ||
        decode_node(c, get, ctx, e) ||
        get_int(get, ctx, CDL_ENV_REPLICAS_PER_GPU, 1, INT_MAX, &c->replicas_per_gpu, e) < 0 ||
        get_int(get, ctx, CDL_ENV_MASTER_PORT, 1, INT_MAX, &c->master_port, e) < 0 ||
        get_int(get, ctx, CDL_ENV_STORE_PORT, 1, INT_MAX, &c->store_port, e) < 0 ||
        get_int(get, ctx, "OMP_NUM_THREADS", 1, INT_MAX, &c->threads, e) < 0 ||
        get_str(get, ctx, CDL_ENV_MASTER_ADDR, c->master_addr, sizeof c->master_addr, e) < 0 ||
        get_str(get, ctx, CDL_ENV_JOB_ID, c->job_id, sizeof c->job_id, e) < 0 ||
        get_str(get, ctx, CDL_ENV_LAUNCHER, c->launcher, sizeof c->launcher, e) < 0 ||
        get_str(get, ctx, CDL_ENV_STORE_TOKEN, c->token, sizeof c->token, e) < 0)
        return -1;
    const char *b = get(ctx, CDL_ENV_GPU_BIND);
    if (b && !contract_gpu_bound_to_task(b))
        return fail(e, CDL_ENV_GPU_BIND "='%.32s' is not 'task' (each task has its own GPUs): "
                    "unset it for the GPU slot rule (docs/rank-contract.md)", b);
    if (b)
        snprintf(c->gpu_bind, sizeof c->gpu_bind, "task");
    return contract_check(c, &contract_names_of_contract, e);
}

const contract_names contract_names_of_contract = {
    "contract", "the contract variables", CDL_ENV_RANK, CDL_ENV_WORLD_SIZE, CDL_ENV_LOCAL_RANK,
    CDL_ENV_LOCAL_WORLD_SIZE, CDL_ENV_GROUP_RANK, CDL_ENV_NNODES,
};

int contract_check(const contract *in, const contract_names *nm, contract_err *e)
{
    if (in->world < 1 || in->rank < 0 || in->rank >= in->world)
        return fail(e, "%s=%d is not below %s=%d (from %s): ranks are 0..%d", nm->rank, in->rank,
                    nm->world, in->world, nm->what, in->world - 1);
    if (in->local_world < 1 || in->local_world > in->world)
        return fail(e, "%s=%d exceeds %s=%d (from %s)", nm->local_world, in->local_world,
                    nm->world, in->world, nm->what);
    if (in->local_rank < 0 || in->local_rank >= in->local_world)
        return fail(e, "%s=%d is not below %s=%d (from %s)", nm->local_rank, in->local_rank,
                    nm->local_world, in->local_world, nm->what);
    if (in->nnodes < 1 || in->nnodes > in->world)
        return fail(e, "%s=%d exceeds %s=%d (from %s): every node runs at least one rank",
                    nm->nnodes, in->nnodes, nm->world, in->world, nm->what);
    if (in->node_rank < 0 || in->node_rank >= in->nnodes)
        return fail(e, "%s=%d is not below %s=%d (from %s)", nm->node, in->node_rank,
                    nm->nnodes, in->nnodes, nm->what);
    if (in->nnodes == 1 && in->local_world != in->world)
        return fail(e, "%s=%d differs from %s=%d but there is one node (%s=1, from %s)",
                    nm->local_world, in->local_world, nm->world, in->world, nm->nnodes, nm->what);
    if (in->replicas_per_gpu < 1 || in->replicas_per_gpu > in->local_world)
        return fail(e, CDL_ENV_REPLICAS_PER_GPU "=%d is not in 1..%s=%d: replicas sharing a GPU "
                    "are ranks of one node", in->replicas_per_gpu, nm->local_world,
                    in->local_world);
    if (in->master_port < 0 || in->master_port > 65535)
        return fail(e, CDL_ENV_MASTER_PORT "=%d is not a TCP port (1-65535)", in->master_port);
    if (in->store_port < 0 || in->store_port > 65535)
        return fail(e, CDL_ENV_STORE_PORT "=%d is not a TCP port (1-65535)", in->store_port);
    return 0;
}

/* ------------------------------------------------------------ hostlists */

#define HL_GROUPS 8             /* bracket groups in one item */
#define HL_MAX_HOSTS (1L << 24) /* more would be a typo, not a cluster */

static int host_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           c == '-' || c == '.' || c == '_';
}

/* Walks the ranges of the group g[0..n) ("01-03,7"): counts its numbers, and
 * when want >= 0 stores the want-th number and its width. */
static long group_walk(const char *list, const char *g, size_t n, long want, long *num,
                       int *width, contract_err *e)
{
    long count = 0;
    const char *p = g, *end = g + n;
    while (p < end) {
        const char *a = p;
        long lo = 0, hi;
        while (p < end && *p >= '0' && *p <= '9' && p - a < 9)
            lo = lo * 10 + (*p++ - '0');
        int w = (int)(p - a);
        hi = lo;
        if (w && p < end && *p == '-') {
            const char *b = ++p;
            hi = 0;
            while (p < end && *p >= '0' && *p <= '9' && p - b < 9)
                hi = hi * 10 + (*p++ - '0');
            if (p == b)
                w = 0;
        }
        if (!w || hi < lo || (p < end && *p != ','))
            return fail(e, "host list '%.64s': bad range in '[%.*s]' (expected e.g. "
                        "[01-04,7])", list, (int)n, g);
        if (want >= count && want <= count + (hi - lo)) {
            *num = lo + (want - count);
            *width = w;
        }
        count += hi - lo + 1;
        if (count > HL_MAX_HOSTS)
            return fail(e, "host list '%.64s' names more than %ld hosts", list, HL_MAX_HOSTS);
        if (p < end)
            p++;   /* the comma */
        if (p == end && end[-1] == ',')
            return fail(e, "host list '%.64s': empty range in '[%.*s]'", list, (int)n, g);
    }
    if (count == 0)
        return fail(e, "host list '%.64s': empty brackets", list);
    return count;
}

/* One item it[0..n): its host count, and host `want` written to out when
 * want >= 0. Groups are mixed-radix digits, the last one fastest. */
static long item_walk(const char *list, const char *it, size_t n, long want, char *out,
                      size_t len, contract_err *e)
{
    const char *gs[HL_GROUPS];
    size_t gn[HL_GROUPS];
    long gc[HL_GROUPS], total = 1, num = 0;
    int ng = 0, width = 0;
    for (size_t i = 0; i < n; i++) {
        if (it[i] == ']')
            return fail(e, "host list '%.64s': ']' without '['", list);
        if (it[i] != '[') {
            if (!host_char(it[i]))
                return fail(e, "host list '%.64s': character '%c' is not allowed in a host "
                            "name", list, it[i]);
            continue;
        }
        const char *close = memchr(it + i, ']', n - i);
        if (!close)
            return fail(e, "host list '%.64s': unclosed '['", list);
        if (ng == HL_GROUPS)
            return fail(e, "host list '%.64s': more than %d bracket groups", list, HL_GROUPS);
        gs[ng] = it + i + 1;
        gn[ng] = (size_t)(close - gs[ng]);
        gc[ng] = group_walk(list, gs[ng], gn[ng], -1, &num, &width, e);
        if (gc[ng] < 0)
            return -1;
        total *= gc[ng];
        if (total > HL_MAX_HOSTS)
            return fail(e, "host list '%.64s' names more than %ld hosts", list, HL_MAX_HOSTS);
        ng++;
        i = (size_t)(close - it);
    }
    if (n == 0)
        return fail(e, "host list '%.64s': empty entry", list);
    if (want < 0)
        return total;
    size_t o = 0;
    long stride = total;
    for (size_t i = 0, g = 0; i < n; i++) {
        char digits[16];
        const char *src = it + i;
        size_t k = 1;
        if (it[i] == '[') {
            stride /= gc[g];
            group_walk(list, gs[g], gn[g], (want / stride) % gc[g], &num, &width, e);
            k = (size_t)snprintf(digits, sizeof digits, "%0*ld", width, num);
            src = digits;
            i += gn[g] + 1;
            g++;
        }
        if (o + k >= len)
            return fail(e, "host list '%.64s': a host name is longer than %zu", list, len - 1);
        memcpy(out + o, src, k);
        o += k;
    }
    out[o] = '\0';
    return total;
}

/* Calls item_walk on each top-level item until host `index` is written;
 * returns the total count (want < 0) or 0/1 (found / too few). */
static long list_walk(const char *list, long index, char *out, size_t len, contract_err *e)
{
    long seen = 0;
    if (!list || !*list)
        return fail(e, "empty host list");
    for (const char *p = list;;) {
        size_t n = 0;
        int depth = 0;
        for (; p[n] && (depth || p[n] != ','); n++)
            depth += p[n] == '[' ? 1 : p[n] == ']' ? -1 : 0;
        long c = item_walk(list, p, n, -1, NULL, 0, e);
        if (c < 0)
            return -1;
        if (index >= 0 && index < seen + c)
            return item_walk(list, p, n, index - seen, out, len, e) < 0 ? -1 : 0;
        seen += c;
        if (seen > HL_MAX_HOSTS)
            return fail(e, "host list '%.64s' names more than %ld hosts", list, HL_MAX_HOSTS);
        if (!p[n])
            break;
        p += n + 1;
    }
    return index >= 0 ? 1 : seen;
}

int contract_hostlist_nth(const char *list, long index, char *out, size_t len, contract_err *e)
{
    if (index < 0)
        return fail(e, "host index %ld is negative", index);
    return (int)list_walk(list, index, out, len, e);
}

long contract_hostlist_count(const char *list, contract_err *e)
{
    return list_walk(list, -1, NULL, 0, e);
}

/* ------------------------------------------------------------ Slurm values */

/* Reads digits at *p into [lo, hi] (at most 9 of them). */
static int take_num(const char **p, long lo, long hi, long *out)
{
    const char *s = *p;
    long v = 0;
    while (**p >= '0' && **p <= '9' && *p - s < 9)
        v = v * 10 + (*(*p)++ - '0');
    if (*p == s || (**p >= '0' && **p <= '9') || v < lo || v > hi)
        return -1;
    *out = v;
    return 0;
}

int contract_tasks_on_node(const char *list, int index, int *out, contract_err *e)
{
    const char *p = list;
    long node = 0, found = 0;
    while (p && *p) {
        long count, repeat = 1;
        if (take_num(&p, 1, 1L << 20, &count))
            goto bad;
        if (p[0] == '(' && p[1] == 'x') {
            p += 2;
            if (take_num(&p, 1, 1L << 20, &repeat) || *p++ != ')')
                goto bad;
        }
        if (index >= node && index < node + repeat)
            found = count;
        node += repeat;
        if (*p == ',' && p[1])
            p++;
        else if (*p)
            goto bad;
    }
    if (!found)
        return fail(e, "has no entry for node %d", index);
    *out = (int)found;
    return 0;
bad:
    return fail(e, "is malformed (expected e.g. 2(x3),1 with counts 1..%ld)", 1L << 20);
}

int contract_resv_port(const char *resv, int *port, contract_err *e)
{
    const char *p = resv;
    long first = 0;
    for (int i = 0; p && *p; i++) {
        long lo, hi;
        if (take_num(&p, 1, 65535, &lo))
            goto bad;
        hi = lo;
        if (*p == '-' && (p++, take_num(&p, lo, 65535, &hi)))
            goto bad;
        if (i == 0)
            first = lo;
        if (*p == ',' && p[1])
            p++;
        else if (*p)
            goto bad;
    }
    if (!first)
        goto bad;
    *port = (int)first;
    return 0;
bad:
    return fail(e, "SLURM_STEP_RESV_PORTS='%.32s' is not a list of TCP ports 1-65535 (expected "
                "e.g. 12000-12003)", resv ? resv : "");
}

/* The multiplier of the job id in contract_port_hash: the integer nearest
 * span x 0.618 (the golden ratio's fraction) that shares no factor with the
 * span. Coprime, job ids j -> j x k mod span is a permutation of the range,
 * so any two jobs whose ids differ by less than the span get different
 * ports; near the golden ratio, neighbouring ids land about 0.38 x span
 * apart, so the steps 1, 2, ... of one job (base + step) do not run into the
 * next job's step 0. A pseudo-random hash gave every pair of jobs one
 * chance in the span, consecutive ones included: two jobs submitted
 * together met on one port that way (ids 1863301 and 1863302 in a range of
 * 100 ports). */
static uint32_t port_multiplier(uint32_t span)
{
    uint32_t k = (uint32_t)((double)span * 0.6180339887498949 + 0.5);
    if (k < 1)
        k = 1;
    for (uint32_t d = 0; d < span; d++) {   /* k + 1, k - 1, k + 2, ...: 1 is coprime */
        uint32_t c = d % 2 ? k + (d + 1) / 2 : k - d / 2;
        if (c >= 1 && c <= span) {
            uint32_t a = span, b = c;
            while (b) {
                uint32_t t = a % b;
                a = b;
                b = t;
            }
            if (a == 1)
                return c;
        }
    }
    return 1;
}

int contract_port_hash(uint32_t jobid, uint32_t stepid, int lo, int hi)
{
    uint32_t span = (uint32_t)(hi - lo + 1);
    uint64_t base = (uint64_t)(jobid % span) * port_multiplier(span) % span;
    return lo + (int)((base + stepid % span) % span);
}

int contract_quiet_port(int eph_hi, uint32_t r)
{
    int lo = eph_hi + 1, hi = 65535 - 64;   /* store_proto.h: STORE_ALT_SPAN */
    if (eph_hi < 0 || hi - lo + 1 < 1000)
        return 0;
    return lo + (int)(r % (uint32_t)(hi - lo + 1));
}

/* ------------------------------------------------------------ GPUs */

int contract_gpu_slot(int local_rank, int replicas_per_gpu)
{
    return replicas_per_gpu > 0 ? local_rank / replicas_per_gpu : local_rank;
}

int contract_gpu_bound_to_task(const char *gpu_bind)
{
    return gpu_bind && !strcmp(gpu_bind, "task");
}

int contract_task_gpu(int local_rank, int replicas_per_gpu, int ngpus)
{
    int s = contract_gpu_slot(local_rank, replicas_per_gpu);
    return s >= 0 && s < ngpus ? s : -1;
}

void contract_share(int j, int k, int units, int *lo, int *hi)
{
    *lo = (int)((long)j * units / k);
    *hi = (int)((long)(j + 1) * units / k);
    if (*hi <= *lo)
        *hi = *lo + 1;
}

/* ------------------------------------------------------------ secrets */

int contract_token_make(char *out, size_t len, contract_err *e)
{
    unsigned char b[CONTRACT_TOKEN_LEN / 2];
    ssize_t got;
    if (len < CONTRACT_TOKEN_LEN + 1)
        return fail(e, "internal: token buffer too small");
    do
        got = getrandom(b, sizeof b, 0);
    while (got < 0 && errno == EINTR);
    if (got != (ssize_t)sizeof b)
        return fail(e, "getrandom failed: %s", got < 0 ? strerror(errno) : "short read");
    for (size_t i = 0; i < sizeof b; i++)
        snprintf(out + 2 * i, 3, "%02x", b[i]);
    return 0;
}
