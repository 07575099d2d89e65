/* How many pictures are decoded at once, by memory.
 *
 * Every decoding thread (the folder reader's --threads, the loader's
 * workers with --decode stream) holds a whole decoded picture while it
 * shrinks it: up to 1 GiB for an RGBA PNG at the 2^28-pixel limit. The
 * memory check of the folder reader counts only the decoded samples it
 * keeps, so 16 threads each decoding a 300-megapixel microscope PNG took
 * a job far past its memory limit and the kernel killed it without a
 * word. Now a decode whose picture (told by its header, before decoding)
 * does not fit beside those running waits for them to finish; one that
 * does not fit even alone is an error naming the file, its size and the
 * limit. Pictures under MEMORY_CHECK_MIN decoded are not counted. */
#include <pthread.h>
#include <stdint.h>

#include <cdl/cdl.h>

#include "lib/core/forked.h"
#include "lib/core/memlimit.h"
#include "lib/data/internal.h"

int decode_admit(size_t need, size_t running, size_t held, size_t limit)
{
    if (limit == SIZE_MAX || (held <= limit && running <= limit - held &&
                              need <= limit - held - running))
        return 1;
    return running ? 0 : -1;
}

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static size_t running;        /* bytes promised to the decodes under way */
static unsigned long forks;   /* fork_count() the state is of */

/* In a child of fork() the parent's decoders are gone (and the mutex may
 * have been held by one): start afresh. The child decodes on one thread
 * (its loaders have no workers: lib/core/forked.h). */
static void after_fork(void)
{
    if (fork_count() == forks)
        return;
    pthread_mutex_init(&mu, NULL);
    pthread_cond_init(&cv, NULL);
    running = 0;
    forks = fork_count();
}

int decode_gate_enter(size_t need, const char *name, int h, int w)
{
    if (need < MEMORY_CHECK_MIN || memory_limit_cached() == SIZE_MAX)
        return 0;
    after_fork();
    size_t limit = memory_limit_cached() / (size_t)memory_share_ranks();
    pthread_mutex_lock(&mu);
    int ok;
    size_t held;
    while ((ok = decode_admit(need, running, held = memory_resident(), limit)) == 0)
        pthread_cond_wait(&cv, &mu);
    if (ok > 0)
        running += need;
    pthread_mutex_unlock(&mu);
    if (ok < 0)
        return cdl_error("%s: a %dx%d picture needs about %.1f MB to decode, and this process "
                         "holds %.1f MB of the %.1f MB it may use (the node's memory or the "
                         "job's memory limit%s): shrink the picture first, or ask for more "
                         "memory (sbatch --mem)", name, w, h, need / 1e6, held / 1e6,
                         limit / 1e6, memory_share_ranks() > 1 ? ", shared by the ranks on "
                         "the node" : "");
    return 1;
}

void decode_gate_leave(size_t need)
{
    pthread_mutex_lock(&mu);
    running -= need;
    pthread_cond_broadcast(&cv);
    pthread_mutex_unlock(&mu);
}
