/* Validation of the user's option values (see options.h). Values come from
 * the command line or #SBATCH lines: anything unexpected is refused with a
 * message that says what is accepted, never truncated or guessed at. */
#include <stdlib.h>
#include <string.h>

#include "spank/options.h"
#include "spank/util.h"

int spk_opt_mps(const char *arg, int max, int *n)
{
    long v;
    /* "(null)": how Slurm (22.05) forwards `sbatch --cdl-mps` without a
     * value to the job's steps (SLURM_SPANK__SLURM_SPANK_OPTION_cdl_cdl_mps
     * is printf's rendering of its NULL argument); every srun of such a
     * job failed on it. It means no value, as on the command line. */
    if (!arg || !*arg || !strcmp(arg, "(null)")) {
        *n = 0;
        return 0;
    }
    if (strlen(arg) > 2 || spk_parse_uint(arg, 1, max, &v) != 0)
        return spk_error("--cdl-mps=%.16s%s: expected the number of replicas per GPU, 1..%d "
                         "(the administrator's max_replicas_per_gpu), or no value for local "
                         "tasks / GPUs", arg, strlen(arg) > 16 ? "..." : "", max);
    *n = (int)v;
    return 0;
}

int spk_opt_bind(const char *arg, enum spk_bind_mode dflt, enum spk_bind_mode *mode,
                 int *verbose)
{
    char buf[32], *tok, *save = NULL;
    int have_mode = 0;
    *mode = dflt;
    *verbose = 0;
    if (!arg || !*arg || strlen(arg) >= sizeof buf || !spk_charset_ok(arg, sizeof buf, 0,
                                                                     "abcdefghijklmnopqrstuvwxyz,") ||
        arg[0] == ',' || arg[strlen(arg) - 1] == ',' || strstr(arg, ",,"))
        goto bad;
    strcpy(buf, arg);
    for (tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        enum spk_bind_mode m;
        if (!strcmp(tok, "verbose")) {
            if ((*verbose)++)
                goto bad;
            continue;
        }
        if (!strcmp(tok, "none"))
            m = SPK_BIND_NONE;
        else if (!strcmp(tok, "cores"))
            m = SPK_BIND_CORES;
        else if (!strcmp(tok, "closest"))
            m = SPK_BIND_CLOSEST;
        else
            goto bad;
        if (have_mode++)
            goto bad;
        *mode = m;
    }
    if (!have_mode && !*verbose)
        goto bad;
    /* "verbose" alone prints the map of the site's default binding: with
     * none there is no map, and the option did nothing without a word. */
    if (!have_mode && dflt == SPK_BIND_NONE)
        return spk_error("--cdl-bind=verbose: this site's default binding (default_bind) is "
                         "none, so nothing is bound and there is no map to print: say "
                         "--cdl-bind=cores,verbose or --cdl-bind=closest,verbose");
    return 0;
bad:
    return spk_error("--cdl-bind=%.24s%s: expected none, cores or closest, optionally followed "
                     "by ',verbose'", arg ? arg : "", arg && strlen(arg) > 24 ? "..." : "");
}

int spk_user_cpu_bind(const char *v)
{
    char buf[256], *tok, *save = NULL;
    if (!v || !*v)
        return 0;
    if (strlen(v) >= sizeof buf)
        return 1;   /* a long map/mask list is certainly a binding */
    strcpy(buf, v);
    for (tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save))
        if (strcmp(tok, "none") && strcmp(tok, "quiet") && strcmp(tok, "verbose") &&
            strcmp(tok, "q") && strcmp(tok, "v") && strcmp(tok, "no"))
            return 1;
    return 0;
}

int spk_cpu_bind_from_hint(const char *v, const char *threads_per_core)
{
    char buf[64], *tok, *save = NULL;
    int words = 0;
    if (!threads_per_core || !*threads_per_core || !v || strlen(v) >= sizeof buf)
        return 0;
    strcpy(buf, v);
    for (tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        if (!strcmp(tok, "quiet") || !strcmp(tok, "verbose") || !strcmp(tok, "q") ||
            !strcmp(tok, "v"))
            continue;
        if (strcmp(tok, "threads") && strcmp(tok, "cores"))
            return 0;
        words++;
    }
    return words == 1;
}

int spk_cpu_mask_union(const char *list, cpu_set_t *out)
{
    const char *p = list;
    CPU_ZERO(out);
    if (!p || !*p)
        return -1;
    for (;;) {
        size_t n = strcspn(p, ",");
        if (n < 3 || p[0] != '0' || (p[1] != 'x' && p[1] != 'X'))
            return -1;
        /* Digits from the right: the last one holds CPUs 0-3. */
        for (size_t i = n; i > 2; i--) {
            char c = p[i - 1];
            int v = c >= '0' && c <= '9' ? c - '0'
                    : c >= 'a' && c <= 'f' ? c - 'a' + 10
                    : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
            size_t cpu = 4 * (n - i);
            if (v < 0)
                return -1;
            for (int b = 0; b < 4; b++)
                if (v & (1 << b)) {
                    if (cpu + (size_t)b >= CPU_SETSIZE)
                        return -1;
                    CPU_SET(cpu + (size_t)b, out);
                }
        }
        if (!p[n])
            break;
        p += n + 1;
    }
    return CPU_COUNT(out) > 0 ? 0 : -1;
}

int spk_slurm_threads(const char *job_cores, const char *cpus_on_node)
{
    long cpus, n = 0;
    const char *p = job_cores;
    if (!p || !*p || spk_parse_uint(cpus_on_node, 1, 1 << 20, &cpus) != 0)
        return 0;
    while (*p) {
        char *end;
        long lo, hi;
        if (*p < '0' || *p > '9')
            return 0;
        lo = hi = strtol(p, &end, 10);
        if (*end == '-') {
            if (end[1] < '0' || end[1] > '9')
                return 0;
            hi = strtol(end + 1, &end, 10);
        }
        if (hi < lo || hi >= 1 << 20 || (*end && *end != ','))
            return 0;
        n += hi - lo + 1;
        p = *end ? end + 1 : end;
        if (*end && !*p)
            return 0;   /* a trailing comma */
    }
    return n > 0 && cpus % n == 0 ? (int)(cpus / n) : 0;
}

int spk_cpu_mask_is_step(const cpu_set_t *union_set, const cpu_set_t *own)
{
    cpu_set_t both;
    if (!CPU_COUNT(own))
        return 0;
    CPU_AND(&both, union_set, own);
    return CPU_EQUAL(&both, own);
}
