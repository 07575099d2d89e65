/* Who listens on a TCP port of this host (port_owner.h). */
#include <pwd.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "port_owner.h"

/* One /proc/net/tcp or tcp6 file: the uid of a socket listening on port
 * (state 0A) or bound to it (07), or -1. A line is
 *   sl local_address rem_address st tx_queue:rx_queue tr:tm->when retrnsmt uid ...
 * with local_address ADDR:PORT in hex. */
static long scan(const char *file, int port)
{
    FILE *f = fopen(file, "re");
    if (!f)
        return -1;
    char line[512];
    long uid = -1;
    while (uid < 0 && fgets(line, sizeof line, f)) {
        char local[80], st[8];
        unsigned p;
        long u;
        if (sscanf(line, " %*s %79s %*s %7s %*s %*s %*s %ld", local, st, &u) != 3)
            continue;
        const char *colon = strrchr(local, ':');
        /* Listening (0A), or bound and not yet listening (07) */
        if (colon && sscanf(colon + 1, "%x", &p) == 1 && (int)p == port &&
            (!strcmp(st, "0A") || !strcmp(st, "07")))
            uid = u;
    }
    fclose(f);
    return uid;
}

void dist_account(long uid, char *who, size_t len)
{
    struct passwd pw, *res = NULL;
    char buf[1024];
    if (getpwuid_r((uid_t)uid, &pw, buf, sizeof buf, &res) == 0 && res)
        snprintf(who, len, "uid %ld (%s)", uid, res->pw_name);
    else
        snprintf(who, len, "uid %ld", uid);
}

long dist_port_owner(int port, char *who, size_t len)
{
    long uid = scan("/proc/net/tcp", port);
    if (uid < 0)
        uid = scan("/proc/net/tcp6", port);
    if (uid >= 0)
        dist_account(uid, who, len);
    return uid;
}
