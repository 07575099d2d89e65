/* MASTER_PORT choice (see port.h). */
#include "lib/dist/contract.h"
#include "spank/port.h"
#include "spank/util.h"

int spk_port_choose(const char *resv, uint32_t jobid, uint32_t stepid, int lo, int hi,
                    int *port, int *reserved)
{
    contract_err e;
    *reserved = 0;
    if (resv && *resv) {
        if (contract_resv_port(resv, port, &e) != 0)
            return spk_error("%s", e.msg);
        *reserved = 1;
        return 0;
    }
    if (lo < 1 || hi > 65535 || hi < lo)
        return spk_error("port range %d-%d is empty", lo, hi);
    *port = contract_port_hash(jobid, stepid, lo, hi);
    return 0;
}
