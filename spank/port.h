/* MASTER_PORT: the port rank 0 binds for the rendezvous store. */
#ifndef CDL_SPANK_PORT_H
#define CDL_SPANK_PORT_H

#include <stdint.h>

/* Chooses the port for step (jobid, stepid):
 *  - the first port of SLURM_STEP_RESV_PORTS ("12000-12003" or "12000,12007")
 *    when Slurm reserved ports for the step (srun --resv-ports=N with
 *    MpiParams=ports=...): Slurm guarantees no other step holds them;
 *  - otherwise lo + (mix(jobid) + stepid) mod (hi - lo + 1): identical on
 *    every node without any communication, different for every step of one
 *    job (up to hi - lo + 1 steps), and spread over the range across jobs.
 * *reserved is set to 1 in the first case. A malformed reservation is an
 * error (it comes from the job's environment). */
int spk_port_choose(const char *resv_ports, uint32_t jobid, uint32_t stepid, int lo, int hi,
                    int *port, int *reserved);

#endif
