/* tests/fuzz/fuzz.h: a private directory for the inputs of one process. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tests/fuzz/fuzz.h"

static char dir[4096];
static char names[8][64];   /* files written, removed at exit */
static int nnames;

static void cleanup(void)
{
    char path[4200];
    for (int i = 0; i < nnames; i++) {
        snprintf(path, sizeof path, "%.4000s/%.60s", dir, names[i]);
        unlink(path);
    }
    rmdir(dir);
}

const char *fuzz_dir(void)
{
    if (!dir[0]) {
        const char *tmp = getenv("TMPDIR");
        snprintf(dir, sizeof dir, "%s/cdl-fuzz.XXXXXX", tmp && *tmp ? tmp : "/tmp");
        if (!mkdtemp(dir)) {
            perror("fuzz: mkdtemp");
            abort();
        }
        atexit(cleanup);
    }
    return dir;
}

const char *fuzz_write(const char *name, const uint8_t *data, size_t len)
{
    static char path[4200];
    snprintf(path, sizeof path, "%.4000s/%.60s", fuzz_dir(), name);
    int known = 0;
    for (int i = 0; i < nnames; i++)
        known |= !strcmp(names[i], name);
    if (!known && nnames < 8)
        snprintf(names[nnames++], sizeof names[0], "%s", name);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) {
        perror(path);
        abort();
    }
    while (len > 0) {
        ssize_t w = write(fd, data, len);
        if (w <= 0) {
            perror(path);
            abort();
        }
        data += w;
        len -= (size_t)w;
    }
    close(fd);
    return path;
}
