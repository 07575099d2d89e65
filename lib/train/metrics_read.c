/* Reading a --metrics file back (metrics.h): the one question a run asks
 * of the records earlier starts wrote. The file is the user's (any bytes):
 * lines are matched by their fixed start, never parsed further. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "metrics.h"
#include "owned.h"

int metrics_tested(const char *path, const char *run_id)
{
    /* A pipe or terminal (--metrics /dev/stdout | tee ...) holds no earlier
     * records, and reading it waited for ever on its own output, deaf to
     * SIGTERM (a resubmitted finished run hung): not tested yet. */
    /* Opened without waiting for a writer (a FIFO's open blocks), then
     * looked at: the file read is the file checked. */
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0)
        return errno == ENOENT ? 0 : cdl_error("cannot read %s: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return 0;
    }
    if (train_check_fd("--metrics", path, fd) != 0) {   /* put there since it was opened */
        close(fd);
        return -1;
    }
    FILE *f = fdopen(fd, "r");
    if (!f) {
        close(fd);
        return cdl_error("cannot read %s: %s", path, strerror(errno));
    }
    /* Records of other runs in the same file are not this run's. */
    char id[64];
    int idn = snprintf(id, sizeof id, "\",\"run_id\":\"%s\"", run_id);
    char *line = NULL;
    size_t cap = 0;
    int tested = 0;
    while (getline(&line, &cap, f) > 0) {
        static const char type[] = "{\"type\":\"";
        if (strncmp(line, type, sizeof type - 1) != 0)
            continue;
        const char *t = line + sizeof type - 1, *q = strchr(t, '"');
        if (!q || strncmp(q, id, (size_t)idn) != 0)
            continue;
        if (q - t == 4 && !strncmp(t, "test", 4))
            tested = 1;
        else if (strncmp(t, "config", 6) != 0)   /* step, eval, epoch: weights changed */
            tested = 0;
    }
    int err = ferror(f);
    free(line);
    fclose(f);
    return err ? cdl_error("cannot read %s", path) : tested;
}
