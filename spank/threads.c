/* A task's thread count from its CPU share (see threads.h). */
#include "spank/threads.h"

unsigned spk_thread_share(unsigned cpus_per_task, unsigned step_cpus, unsigned local_tasks,
                          unsigned task_cpus)
{
    unsigned n = cpus_per_task ? cpus_per_task : 1;
    if (step_cpus && local_tasks && step_cpus / local_tasks < n)
        n = step_cpus / local_tasks;
    if (task_cpus && task_cpus < n)
        n = task_cpus;
    return n ? n : 1;
}
