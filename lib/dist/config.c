/* cdl_dist_config: its defaults, and reading it from the environment at a
 * program's edge (the only place in lib/dist that reads these variables). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <cdl/cdl.h>

#include "contract.h"
#include "lib/core/sized.h"
#include "store_proto.h"

static void defaults(cdl_dist_config *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->size = sizeof *cfg;
    cfg->shm_spin_us = -1;
}

void cdl_dist_config_init_sized(cdl_dist_config *cfg, size_t size)
{
    cdl_dist_config d;
    defaults(&d);
    sized_write(cfg, size, &d, sizeof d);
}

/* Programs built before the macro of that name (lib/core/sized.h). */
void (cdl_dist_config_init)(cdl_dist_config *cfg)
{
    cdl_dist_config_init_sized(cfg, SIZED_UPTO(cdl_dist_config, store_hello_s));
}

/* A whole number from name, 0 (the default) when unset or not positive:
 * these tuning knobs were always lenient. */
static int from_env(cdl_dist_config *cfg);

static long env_long(const char *name)
{
    const char *e = getenv(name);
    long v = e ? atol(e) : 0;
    return v > 0 ? v : 0;
}

/* Seconds from name in (0, max], 0 when unset; -1 with msg when garbage. */
static int env_seconds(const char *name, double max, const char *msg, double *out)
{
    const char *s = getenv(name);
    *out = 0;
    if (!s || !*s)
        return 0;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !(v > 0) || v > max)
        return cdl_error("%s='%.40s' %s", name, s, msg);
    *out = v;
    return 0;
}

int cdl_dist_config_from_env_sized(cdl_dist_config *out, size_t size)
{
    if (!out)
        return cdl_error("cdl_dist_config_from_env: cfg is NULL");
    cdl_dist_config c, *cfg = &c;
    defaults(cfg);
    int rc = from_env(cfg);
    sized_write(out, size, cfg, sizeof *cfg);
    return rc ? rc : size > sizeof *cfg ? sized_newer("cdl_dist_config", size, sizeof *cfg) : 0;
}

int (cdl_dist_config_from_env)(cdl_dist_config *cfg)
{
    return cdl_dist_config_from_env_sized(cfg, SIZED_UPTO(cdl_dist_config, store_hello_s));
}

static int from_env(cdl_dist_config *cfg)
{
    if (env_seconds(CDL_ENV_TIMEOUT, CDL_MAX_TIMEOUT,
                    "is not a positive number of seconds: unset it or give e.g. "
                    CDL_ENV_TIMEOUT "=300", &cfg->timeout_s) ||
        env_seconds(STORE_ENV_HELLO_TIMEOUT, 3600, "expected seconds in (0, 3600]",
                    &cfg->store_hello_s))
        return -1;
    const char *e = getenv("CDL_SHM_SPIN_US");
    if (e && *e) {
        char *end;
        double v = strtod(e, &end);
        if (*end == '\0' && v >= 0 && v <= 1e6)
            cfg->shm_spin_us = v;
    }
    cfg->shm_slab_kb = env_long("CDL_SHM_SLAB_KB");
    cfg->shm_small_kb = env_long("CDL_SHM_SMALL_KB");
    cfg->shm_stream_mb = env_long("CDL_SHM_STREAM_MB");
    return 0;
}
