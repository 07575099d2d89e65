/* Strict parsing of the plugstack.conf arguments (see conf.h). */
#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "spank/conf.h"

void spk_conf_defaults(struct spk_conf *c)
{
    memset(c, 0, sizeof *c);
    spk_copy(c->mps_control, sizeof c->mps_control, "/usr/bin/nvidia-cuda-mps-control");
    spk_copy(c->runtime_dir, sizeof c->runtime_dir, "/run/cdl");
    spk_copy(c->secret_key, sizeof c->secret_key, "/etc/munge/munge.key");
    /* Below Linux's ephemeral range (32768-60999), above torchrun's 29500. */
    c->port_lo = 29500;
    c->port_hi = 32499;
    c->max_replicas_per_gpu = 16;
    c->default_bind = SPK_BIND_NONE;
    c->addr_policy = SPK_ADDR_HOSTNAME;
    c->allow_batch = 1;
    c->mps_thread_percentage = 0;
    c->mps_timeout_s = 10;
}

/* An absolute, normalised path: no "..", no ".", no "//", printable ASCII
 * from a conservative set (admins name real directories and binaries). */
static int abs_path(const char *key, const char *v, char *dst, size_t len)
{
    if (v[0] != '/')
        return spk_error("plugstack.conf: %s=%s is not an absolute path", key, v);
    if (!spk_charset_ok(v, len, 1, "/._-+"))
        return spk_error("plugstack.conf: %s=%.80s: use at most %zu characters from "
                         "[A-Za-z0-9/._+-]", key, v, len - 1);
    for (const char *p = v; *p; p++) {
        if (p[0] == '/' && p[1] == '/')
            return spk_error("plugstack.conf: %s=%s contains '//'", key, v);
        if (p[0] == '/' && p[1] == '.' &&
            (p[2] == '/' || p[2] == '\0' || (p[2] == '.' && (p[3] == '/' || p[3] == '\0'))))
            return spk_error("plugstack.conf: %s=%s contains '.' or '..' components", key, v);
    }
    if (strlen(v) > 1 && v[strlen(v) - 1] == '/')
        return spk_error("plugstack.conf: %s=%s ends with '/'", key, v);
    return spk_copy(dst, len, v);
}

static int int_value(const char *key, const char *v, long lo, long hi, int *dst)
{
    long x;
    if (spk_parse_uint(v, lo, hi, &x) != 0)
        return spk_error("plugstack.conf: %s=%.40s: expected an integer in %ld..%ld", key, v,
                         lo, hi);
    *dst = (int)x;
    return 0;
}

static int port_range(const char *v, struct spk_conf *c)
{
    char lo[8], hi[8];
    const char *dash = strchr(v, '-');
    long a, b;
    if (!dash || (size_t)(dash - v) >= sizeof lo || strlen(dash + 1) >= sizeof hi)
        goto bad;
    memcpy(lo, v, (size_t)(dash - v));
    lo[dash - v] = '\0';
    strcpy(hi, dash + 1);
    if (spk_parse_uint(lo, 1024, 65535, &a) != 0 || spk_parse_uint(hi, 1024, 65535, &b) != 0 ||
        b < a)
        goto bad;
    c->port_lo = (int)a;
    c->port_hi = (int)b;
    return 0;
bad:
    return spk_error("plugstack.conf: port_range=%.40s: expected LO-HI with 1024 <= LO <= HI "
                     "<= 65535 (e.g. 29500-32499)", v);
}

static int bind_mode(const char *v, enum spk_bind_mode *m)
{
    if (!strcmp(v, "none"))
        *m = SPK_BIND_NONE;
    else if (!strcmp(v, "cores"))
        *m = SPK_BIND_CORES;
    else if (!strcmp(v, "closest"))
        *m = SPK_BIND_CLOSEST;
    else
        return spk_error("plugstack.conf: default_bind=%.40s: expected none, cores or closest", v);
    return 0;
}

static int master_addr(const char *v, struct spk_conf *c)
{
    const char *colon = strchr(v, ':');
    size_t n = colon ? (size_t)(colon - v) : strlen(v);
    if (n == 8 && !strncmp(v, "hostname", 8))
        c->addr_policy = SPK_ADDR_HOSTNAME;
    else if (n == 2 && !strncmp(v, "ip", 2))
        c->addr_policy = SPK_ADDR_IP;
    else
        goto bad;
    c->addr_suffix[0] = '\0';
    if (colon && (!spk_charset_ok(colon + 1, sizeof c->addr_suffix, 1, ".-_") ||
                  spk_copy(c->addr_suffix, sizeof c->addr_suffix, colon + 1) != 0))
        goto bad;
    return 0;
bad:
    return spk_error("plugstack.conf: master_addr=%.60s: expected hostname, hostname:SUFFIX, "
                     "ip or ip:SUFFIX (SUFFIX from [A-Za-z0-9._-], e.g. hostname:-ib)", v);
}

static int yes_no(const char *key, const char *v, int *dst)
{
    if (!strcmp(v, "yes"))
        *dst = 1;
    else if (!strcmp(v, "no"))
        *dst = 0;
    else
        return spk_error("plugstack.conf: %s=%.40s: expected yes or no", key, v);
    return 0;
}

static const char *const known_keys[] = {
    "mps_control", "runtime_dir", "topology", "port_range", "max_replicas_per_gpu",
    "default_bind", "master_addr", "allow_batch", "mps_thread_percentage", "mps_timeout",
    "secret_key",
};
enum { NKEYS = sizeof known_keys / sizeof known_keys[0] };

static int set_key(struct spk_conf *c, int k, const char *v)
{
    switch (k) {
    case 0: return abs_path("mps_control", v, c->mps_control, sizeof c->mps_control);
    case 1: return abs_path("runtime_dir", v, c->runtime_dir, sizeof c->runtime_dir);
    case 2: return abs_path("topology", v, c->topology, sizeof c->topology);
    case 3: return port_range(v, c);
    /* MPS serves at most 48 clients per GPU (Volta and later). */
    case 4: return int_value("max_replicas_per_gpu", v, 1, 48, &c->max_replicas_per_gpu);
    case 5: return bind_mode(v, &c->default_bind);
    case 6: return master_addr(v, c);
    case 7: return yes_no("allow_batch", v, &c->allow_batch);
    case 8:
        if (!strcmp(v, "auto")) {
            c->mps_thread_percentage = 0;
            return 0;
        }
        if (int_value("mps_thread_percentage", v, 1, 100, &c->mps_thread_percentage) != 0)
            return spk_error("plugstack.conf: mps_thread_percentage=%.40s: expected auto or an "
                             "integer in 1..100", v);
        return 0;
    case 9: return int_value("mps_timeout", v, 1, 300, &c->mps_timeout_s);
    case 10: return abs_path("secret_key", v, c->secret_key, sizeof c->secret_key);
    }
    return -1;
}

/* No control byte reaches a message (a terminal would act on it). A '\r'
 * ending an argument is a file saved with Windows line endings: Slurm
 * splits the line at spaces and leaves it on the last argument (or alone,
 * after a trailing space), and "default_bind=cores<CR>: expected none,
 * cores or closest" showed on a terminal as if cores were refused. */
static int control_bytes(int ac, char **av)
{
    for (int i = 0; i < ac; i++)
        for (const char *p = av[i]; *p; p++) {
            unsigned char b = (unsigned char)*p;
            if (b >= 0x20 && b != 0x7f)
                continue;
            if (b == '\r' && p[1] == '\0')
                return spk_error("plugstack.conf: the line loading cdl_spank.so ends in a "
                                 "carriage return (Windows line endings): remove them with "
                                 "sed -i 's/\\r$//' on the file");
            return spk_error("plugstack.conf: control character 0x%02x in '%.*s'", b,
                             (int)(p - av[i] > 64 ? 64 : p - av[i]), av[i]);
        }
    return 0;
}

/* Where the line with these arguments is: "FILE:LINE". Slurm hands the
 * plugin its arguments, not their place, and a site may load it from
 * plugstack.conf or from any file that includes (Debian:
 * plugstack.conf.d/cdl.conf): "plugstack.conf: unknown key" sent the admin
 * to the wrong file. The files are Slurm's: slurm.conf (SLURM_CONF, else
 * /etc/slurm/slurm.conf) names PlugStackConfig (default plugstack.conf
 * beside it), whose `include GLOB` lines are followed (relative to the
 * including file's directory, 4 levels). The first line loading a
 * cdl_spank.so with exactly these arguments wins (the one Slurm loads
 * first). Only read, only on an error; nothing found leaves where empty. */
struct where {
    const char *args;   /* the arguments, joined by single spaces */
    char *out;
    size_t len;
};

static int where_file(struct where *w, const char *path, int depth);

static int where_line(struct where *w, const char *path, int depth, int lineno, char *line)
{
    char *save = NULL, *tok[3], rest[1024] = "";
    size_t used = 0;
    char *hash = strchr(line, '#');
    if (hash)
        *hash = '\0';
    line[strcspn(line, "\n")] = '\0';
    for (int i = 0; i < 2; i++)
        if (!(tok[i] = strtok_r(i ? NULL : line, " \t", &save)))
            return 0;
    if (!strcmp(tok[0], "include")) {
        glob_t g;
        char pattern[SPK_PATH_MAX];
        const char *slash = strrchr(path, '/');
        if (tok[1][0] == '/' || !slash)
            snprintf(pattern, sizeof pattern, "%s", tok[1]);
        else
            snprintf(pattern, sizeof pattern, "%.*s/%s", (int)(slash - path), path, tok[1]);
        if (depth >= 4 || glob(pattern, 0, NULL, &g) != 0)
            return 0;
        int found = 0;
        for (size_t i = 0; !found && i < g.gl_pathc; i++)
            found = where_file(w, g.gl_pathv[i], depth + 1);
        globfree(&g);
        return found;
    }
    size_t n = strlen(tok[1]);
    if ((strcmp(tok[0], "required") && strcmp(tok[0], "optional")) || n < 12 ||
        strcmp(tok[1] + n - 12, "cdl_spank.so") || (n > 12 && tok[1][n - 13] != '/'))
        return 0;
    while ((tok[2] = strtok_r(NULL, " \t", &save)) && used < sizeof rest)
        used += (size_t)snprintf(rest + used, sizeof rest - used, "%s%s", used ? " " : "", tok[2]);
    if (strcmp(rest, w->args))
        return 0;
    snprintf(w->out, w->len, "%s:%d", path, lineno);
    return 1;
}

static int where_file(struct where *w, const char *path, int depth)
{
    char line[1024];
    int lineno = 0, found = 0;
    FILE *f = fopen(path, "re");
    if (!f)
        return 0;
    while (!found && fgets(line, sizeof line, f))
        found = where_line(w, path, depth, ++lineno, line);
    fclose(f);
    return found;
}

static void spk_conf_where(int ac, char **av, char *out, size_t len)
{
    char args[1024] = "", conf[SPK_PATH_MAX], stack[SPK_PATH_MAX] = "", line[1024];
    const char *env = getenv("SLURM_CONF");
    size_t used = 0;
    struct where w = {args, out, len};
    out[0] = '\0';
    for (int i = 0; i < ac && used < sizeof args; i++)
        used += (size_t)snprintf(args + used, sizeof args - used, "%s%s", i ? " " : "", av[i]);
    snprintf(conf, sizeof conf, "%s", env && env[0] == '/' ? env : "/etc/slurm/slurm.conf");
    FILE *f = fopen(conf, "re");
    if (!f)
        return;
    while (fgets(line, sizeof line, f)) {
        char *p = line + strspn(line, " \t");
        if (!strncasecmp(p, "PlugStackConfig=", 16)) {
            p += 16;
            p[strcspn(p, " \t\r\n#")] = '\0';
            snprintf(stack, sizeof stack, "%s", p);
        }
    }
    fclose(f);
    if (!stack[0]) {
        const char *slash = strrchr(conf, '/');
        snprintf(stack, sizeof stack, "%.*s/plugstack.conf", (int)(slash - conf), conf);
    }
    where_file(&w, stack, 0);
}

static int conf_parse(struct spk_conf *c, int ac, char **av);

/* The messages of conf_parse ("plugstack.conf: ...") end in "(at
 * FILE:LINE)" when the line is found. At the end: the key comes first,
 * and shortened copies of the message (srun's refusal of an option) keep
 * it. */
int spk_conf_parse(struct spk_conf *c, int ac, char **av)
{
    char where[SPK_PATH_MAX + 16];
    if (conf_parse(c, ac, av) == 0)
        return 0;
    spk_conf_where(ac, av, where, sizeof where);
    if (where[0])
        spk_error("%s (at %s)", spk_last_error(), where);
    return -1;
}

static int conf_parse(struct spk_conf *c, int ac, char **av)
{
    int seen[NKEYS] = {0};
    spk_conf_defaults(c);
    if (control_bytes(ac, av) != 0)
        return -1;
    for (int i = 0; i < ac; i++) {
        const char *arg = av[i], *eq = strchr(arg, '=');
        int k;
        if (!eq || eq == arg) {
            /* "runtime_dir = /run/cdl": Slurm splits the line at spaces. */
            for (k = 0; !eq && k < NKEYS; k++)
                if (!strcmp(known_keys[k], arg))
                    return spk_error("plugstack.conf: key '%s' has no value: write %s=VALUE, "
                                     "with no spaces around '='", arg, arg);
            return spk_error("plugstack.conf: argument '%.80s' is not key=value (no spaces "
                             "around '=')", arg);
        }
        for (k = 0; k < NKEYS; k++)
            if (strlen(known_keys[k]) == (size_t)(eq - arg) &&
                !strncmp(known_keys[k], arg, (size_t)(eq - arg)))
                break;
        /* The release is named: during an upgrade a key of the new
         * release reaches hosts that still run the old plugin. */
        if (k == NKEYS)
            return spk_error("plugstack.conf: unknown key '%.*s' (cdl_spank %s knows "
                             "mps_control, runtime_dir, topology, port_range, "
                             "max_replicas_per_gpu, default_bind, master_addr, allow_batch, "
                             "mps_thread_percentage, mps_timeout, secret_key; a key of a later "
                             "release needs that release's plugin on every node and submit host)",
                             (int)(eq - arg > 64 ? 64 : eq - arg), arg, PACKAGE_VERSION);
        if (seen[k]++)
            return spk_error("plugstack.conf: key '%s' given twice: keep one", known_keys[k]);
        if (eq[1] == '\0')
            return spk_error("plugstack.conf: key '%s' has an empty value", known_keys[k]);
        if (set_key(c, k, eq + 1) != 0)
            return -1;
    }
    return 0;
}
