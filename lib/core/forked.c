/* Counting fork()s for the objects with threads (see forked.h). */
#include <pthread.h>
#include <stdatomic.h>

#include "lib/core/forked.h"

static atomic_ulong forks;
static pthread_once_t installed = PTHREAD_ONCE_INIT;

/* In the child, before fork() returns there; only one thread exists. */
static void in_child(void)
{
    atomic_fetch_add(&forks, 1);
}

/* glibc removes the handler again when a dlopen'ed libcdl is unloaded. */
static void install(void)
{
    pthread_atfork(NULL, NULL, in_child);
}

unsigned long fork_count(void)
{
    pthread_once(&installed, install);
    return atomic_load_explicit(&forks, memory_order_relaxed);
}
