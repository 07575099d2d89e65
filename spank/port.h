/* MASTER_PORT: the port rank 0 binds for the rendezvous store. */
#ifndef CDL_SPANK_PORT_H
#define CDL_SPANK_PORT_H

#include <stdint.h>

/* Chooses the port for step (jobid, stepid):
 *  - the first port of SLURM_STEP_RESV_PORTS ("12000-12003" or "12000,12007")
 *    when Slurm reserved ports for the step (srun --resv-ports=N with
 *    MpiParams=ports=...): Slurm guarantees no other step holds them;
 *  - otherwise contract_port_hash: lo + (jobid x k + stepid) mod (hi - lo + 1)
 *    with k coprime to the span: identical on every node without any
 *    communication, different for every step of one job (up to hi - lo + 1
 *    steps), and different for the first steps of jobs whose ids differ by
 *    less than the span.
 * *reserved is set to 1 in the first case. A malformed reservation is an
 * error (it comes from the job's environment). */
int spk_port_choose(const char *resv_ports, uint32_t jobid, uint32_t stepid, int lo, int hi,
                    int *port, int *reserved);

/* How many tasks of one job array get ports side by side (see below). */
#define SPK_PORT_ARRAY_TASKS 64u

/* The (jobid, stepid) spk_port_choose hashes for a step. A job array's
 * tasks have job ids of their own, which hash to independent places, so two
 * tasks of a sweep on one node met on a port with a chance of 1 in the
 * range per pair (one task failing at rendezvous). For an array task
 * (array_job != 0 and a task id, from S_JOB_ARRAY_ID/S_JOB_ARRAY_TASK_ID) the
 * key is (array_job, array_task + stepid * SPK_PORT_ARRAY_TASKS): one place
 * per array, its tasks' steps of one number side by side. The tasks of a
 * sweep run the same script, so their steps of one number run at the same
 * time: up to the range's size (or SPK_PORT_ARRAY_TASKS) such tasks never
 * meet; steps of other numbers never meet while tasks <
 * SPK_PORT_ARRAY_TASKS and steps < range / SPK_PORT_ARRAY_TASKS. Other
 * jobs keep (jobid, stepid). */
void spk_port_key(uint32_t jobid, uint32_t stepid, uint32_t array_job, uint32_t array_task,
                  uint32_t *key_job, uint32_t *key_step);

#endif
