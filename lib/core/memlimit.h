/* How much memory this process may use: the node's physical memory, or less
 * when the process runs in a memory-limited control group (a Slurm job
 * started with --mem under cgroup v1 or v2). Readers that keep a whole
 * decoded dataset in memory check against it, so a dataset too large fails
 * with a message instead of an OOM kill halfway through the load. */
#ifndef CDL_CORE_MEMLIMIT_H
#define CDL_CORE_MEMLIMIT_H

#include <stddef.h>

/* Bytes; SIZE_MAX when nothing can be read (then there is no check). */
size_t memory_limit(void);

/* memory_limit() read once per process (the limits do not change while a
 * run lasts; cdl_malloc asks for every large block). */
size_t memory_limit_cached(void);

/* Whether a block of `bytes` more would take this process past its memory
 * limit: 1 (and *held, *limit: the bytes it holds now and may hold), else
 * 0. What it holds is the larger of its resident anonymous and shared
 * memory (what the kernel cannot reclaim) and `committed`, the large
 * blocks it allocated, touched or not yet; the limit is this process's share
 * (memory_share_among). Only blocks of
 * MEMORY_CHECK_MIN bytes or more are checked (small ones cannot be what
 * breaks a limit, and reading /proc for each would cost). The answer errs
 * towards 0: memory other processes of the job hold in the same cgroup is
 * not seen. */
enum { MEMORY_CHECK_MIN = 1 << 20 };
/* The resident anonymous and shared memory of this process, bytes (0 if
 * unreadable). */
size_t memory_resident(void);
int memory_would_exceed(size_t bytes, size_t committed, size_t *held, size_t *limit);

/* The ranks of a node share its memory and a Slurm step's limit (one
 * cgroup): with memory_share_among(N), memory_would_exceed allows this
 * process 1/N of the limit (each rank alone fitting, N ranks were killed
 * together by the OOM killer, without a message). 1 (the default): all of
 * it. memory_share_ranks() says the N in force. */
void memory_share_among(int ranks);
int memory_share_ranks(void);

/* The cgroup limit in the text of a memory.max (v2: bytes or "max") or
 * memory.limit_in_bytes (v1: bytes, ~2^63 when unlimited) file: SIZE_MAX
 * for none or an unreadable text. Pure, for the unit test. */
size_t cgroup_limit_parse(const char *text);

/* The lowest limit in `file` (memory.max, memory.limit_in_bytes) of the
 * cgroup `group` ("/slurm/uid_1000/job_7/step_0/task_0", as in
 * /proc/self/cgroup) under `mount` and of every group above it up to the
 * mount's root; SIZE_MAX for none. */
size_t cgroup_limit_under(const char *mount, const char *file, const char *group);

/* One line of /proc/self/cgroup, split in place: 2 for cgroup v2's
 * "0::GROUP", 1 for a v1 line "N:CONTROLLERS:GROUP" (*ctrl "cpu,cpuacct"),
 * 0 for a line to skip (malformed, or a group outside this namespace). */
int cgroup_line(char *line, const char **ctrl, const char **group);

#endif
