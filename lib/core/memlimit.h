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

/* The cgroup limit in the text of a memory.max (v2: bytes or "max") or
 * memory.limit_in_bytes (v1: bytes, ~2^63 when unlimited) file: SIZE_MAX
 * for none or an unreadable text. Pure, for the unit test. */
size_t cgroup_limit_parse(const char *text);

#endif
