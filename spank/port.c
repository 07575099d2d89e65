/* MASTER_PORT choice (see port.h). */
#include <string.h>

#include "spank/port.h"
#include "spank/util.h"

/* A bijective 32-bit mix (the finaliser of MurmurHash3): neighbouring job
 * ids land far apart, so "job id modulo range" aliasing does not line up
 * consecutive jobs on neighbouring ports. */
static uint32_t mix32(uint32_t x)
{
    x ^= x >> 16;
    x *= 0x85ebca6bu;
    x ^= x >> 13;
    x *= 0xc2b2ae35u;
    x ^= x >> 16;
    return x;
}

int spk_port_choose(const char *resv, uint32_t jobid, uint32_t stepid, int lo, int hi,
                    int *port, int *reserved)
{
    *reserved = 0;
    if (resv && *resv) {
        char first[8];
        size_t n = strcspn(resv, ",-");
        long p;
        if (n == 0 || n >= sizeof first)
            goto bad;
        memcpy(first, resv, n);
        first[n] = '\0';
        if (spk_parse_uint(first, 1, 65535, &p) != 0)
            goto bad;
        *port = (int)p;
        *reserved = 1;
        return 0;
    bad:
        return spk_error("SLURM_STEP_RESV_PORTS='%.32s' is not a port list (expected e.g. "
                         "12000-12003)", resv);
    }
    if (lo < 1 || hi > 65535 || hi < lo)
        return spk_error("port range %d-%d is empty", lo, hi);
    uint32_t span = (uint32_t)(hi - lo + 1);
    *port = lo + (int)((mix32(jobid) % span + stepid % span) % span);
    return 0;
}
