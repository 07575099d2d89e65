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

void spk_port_key(uint32_t jobid, uint32_t stepid, uint32_t array_job, uint32_t array_task,
                  uint32_t *key_job, uint32_t *key_step)
{
    /* Slurm gives 0 as the array id of other jobs, and NO_VAL (0xfffffffe)
     * or similar as their task id. */
    if (array_job != 0 && array_task < 0xfffffff0u) {
        *key_job = array_job;
        *key_step = array_task + stepid * SPK_PORT_ARRAY_TASKS;   /* wraps: still one value */
    } else {
        *key_job = jobid;
        *key_step = stepid;
    }
}
