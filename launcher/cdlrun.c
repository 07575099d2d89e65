/* cdlrun: starts N local ranks of PROGRAM with the rank contract (the same
 * variables srun --cdl-ddp exports), labels their output, forwards signals
 * and stops everything when one rank fails. Multi-node runs go through
 * Slurm or mpirun. See docs/rank-contract.md. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "launch.h"
#include "../cli/suggest.h"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: cdlrun -n N [--bind auto|none|cores] [--label] [--timeout S] [-v] PROGRAM [ARGS...]\n"
            "\n"
            "Starts N ranks of PROGRAM on this machine with RANK, WORLD_SIZE, LOCAL_RANK,\n"
            "LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT, CDL_* exported.\n"
            "\n"
            "  -n, --ntasks N     number of ranks (1-%d)\n"
            "  --bind auto|none|cores  cores: pin each rank to its own block of cores;\n"
            "                     auto (default): cores when there are at least N cores\n"
            "  --label            prefix every output line with [rank]\n"
            "  --timeout S        CDL_TIMEOUT for the ranks: seconds any wait for a peer may\n"
            "                     take (default 300)\n"
            "  -v, --verbose      print each rank's pid and CPUs\n"
            "  -h, --help         this text;  --version  print the version\n"
            "\n"
            "Exit code: 0 when all ranks succeed; 75 when they exit 75 (checkpointed, requeue);\n"
            "else that of the first rank to fail (128 + signal when killed).\n",
            CDLRUN_MAX_RANKS);
}

/* The value of --opt V or --opt=V; advances *i. */
static const char *opt_value(int argc, char **argv, int *i, const char *name)
{
    size_t n = strlen(name);
    if (!strncmp(argv[*i], name, n) && argv[*i][n] == '=')
        return argv[*i] + n + 1;
    if (*i + 1 >= argc) {
        fprintf(stderr, "cdlrun: %s needs a value\n", name);
        return NULL;
    }
    return argv[++*i];
}

/* Echoed values are cut at 80 characters: '%.80s%s', s, ell(s). */
static const char *ell(const char *s)
{
    return strlen(s) > 80 ? "..." : "";
}

static int is_opt(const char *arg, const char *name)
{
    size_t n = strlen(name);
    return !strncmp(arg, name, n) && (arg[n] == '\0' || arg[n] == '=');
}

static int parse(int argc, char **argv, run *r)
{
    int i = 1;
    for (; i < argc && argv[i][0] == '-'; i++) {
        const char *a = argv[i], *v;
        char *end;
        if (!strcmp(a, "--")) {
            i++;
            break;
        } else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            exit(0);
        } else if (!strcmp(a, "--version")) {
            printf("cdlrun (cdl) %s (rank contract %d)\n", PACKAGE_VERSION, CDL_CONTRACT_VERSION);
            exit(0);
        } else if (!strncmp(a, "-n", 2) || is_opt(a, "--ntasks")) {
            if (a[1] == '-')
                v = opt_value(argc, argv, &i, "--ntasks");
            else if (a[2])
                v = a + 2;   /* -n4 */
            else
                v = opt_value(argc, argv, &i, "-n");
            if (!v)
                return -1;
            long n = strtol(v, &end, 10);
            if (end == v || *end || n < 1 || n > CDLRUN_MAX_RANKS) {
                fprintf(stderr, "cdlrun: -n '%.80s%s': give a number of ranks from 1 to %d\n", v,
                        ell(v), CDLRUN_MAX_RANKS);
                return -1;
            }
            r->n = (int)n;
        } else if (is_opt(a, "--bind")) {
            if (!(v = opt_value(argc, argv, &i, "--bind")))
                return -1;
            if (strcmp(v, "auto") && strcmp(v, "none") && strcmp(v, "cores")) {
                fprintf(stderr, "cdlrun: --bind '%.80s%s': use auto, none or cores\n", v, ell(v));
                return -1;
            }
            r->bind_cores = !strcmp(v, "cores");
            r->bind_auto = !strcmp(v, "auto");
        } else if (!strcmp(a, "--label")) {
            r->label = 1;
        } else if (!strcmp(a, "-v") || !strcmp(a, "--verbose")) {
            r->verbose = 1;
        } else if (is_opt(a, "--timeout")) {
            if (!(v = opt_value(argc, argv, &i, "--timeout")))
                return -1;
            errno = 0;
            double t = strtod(v, &end);
            /* What every rank accepts as CDL_TIMEOUT (dist_resolve_timeout). */
            if (end == v || *end || errno || !(t > 0) || t > CDL_MAX_TIMEOUT) {
                fprintf(stderr, "cdlrun: --timeout '%.80s%s': give seconds > 0, at most %g\n", v,
                        ell(v), CDL_MAX_TIMEOUT);
                return -1;
            }
            r->timeout = t;
        } else {
            /* torchrun's spelling, and the nearest option to a typo. */
            static const char *const known[] = {"ntasks", "bind", "label", "timeout", "verbose",
                                                "help", "version", NULL};
            static const char *const aliases[] = {"nproc-per-node", "-n", NULL};
            char hint[96];
            suggest_option(a, known, aliases, hint, sizeof hint);
            fprintf(stderr, "cdlrun: unknown option '%.80s%s'%s (see cdlrun --help)\n", a, ell(a),
                    hint);
            return -1;
        }
    }
    if (!r->n) {
        fprintf(stderr, "cdlrun: -n N is required (see cdlrun --help)\n");
        return -1;
    }
    if (i >= argc) {
        fprintf(stderr, "cdlrun: no PROGRAM given (see cdlrun --help)\n");
        return -1;
    }
    r->argv = argv + i;
    return 0;
}

int main(int argc, char **argv)
{
    run r = {.listen_fd = -1, .bind_auto = 1};
    if (parse(argc, argv, &r))
        return 2;
    r.ranks = calloc((size_t)r.n, sizeof *r.ranks);
    if (!r.ranks) {
        fprintf(stderr, "cdlrun: out of memory\n");
        return 1;
    }
    signal(SIGPIPE, SIG_IGN);   /* a closed stdout must not kill the supervisor */
    if (launch_ranks(&r)) {
        for (int i = 0; i < r.n; i++)
            if (r.ranks[i].pid > 0)
                kill(-r.ranks[i].pid, SIGKILL);
        free(r.ranks);
        return 1;
    }
    int rc = supervise(&r);
    int swept = shm_sweep(r.job_id);
    if (swept && r.verbose)
        fprintf(stderr, "cdlrun: removed %d shared-memory segment%s the ranks left in /dev/shm\n",
                swept, swept == 1 ? "" : "s");
    free(r.ranks);
    return rc;
}
