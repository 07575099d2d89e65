/* Threads for one rank of a data-parallel run when no count was given. */
#ifndef CDL_CORE_THREADS_H
#define CDL_CORE_THREADS_H

#include "lib/core/cpuquota.h"   /* cpus_capped */

/* cdl_default_threads() for one of `local_world` ranks on this node, except
 * that ranks free to run on the same CPUs share them. With neither
 * SLURM_CPUS_PER_TASK nor OMP_NUM_THREADS set and no binding that gives
 * each rank CPUs of its own (mpirun -n 4 --oversubscribe, srun -n 4 without
 * -c under TaskPlugin=task/none), every rank saw every CPU and started as
 * many threads: 4 ranks x 16 threads on 16 cores. Ranks whose affinity
 * masks together hold more CPUs than the node has online must overlap;
 * each then takes its share, the mask's CPUs / local_world (at least 1), as
 * cdlrun and torchrun give. */
int threads_for_rank(int local_world);

/* The CPUs this process may keep busy: its affinity mask's count, or the
 * CPU quota of its cgroup when lower (1.5; lib/core/cpuquota.h); 0 if
 * unknown. The thread pool spins less when it has more threads than this. */
double cpus_available(void);

#endif
