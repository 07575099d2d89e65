/* Who holds a port rank 0 cannot bind: the kernel's socket tables
 * (/proc/net/tcp, tcp6) give every listening socket's owner to anyone on
 * the host, so rank 0 can say whether the port is taken by its own account
 * (an earlier step still running) or by another one (a collision, or
 * someone squatting the job's predictable port). */
#ifndef CDL_DIST_PORT_OWNER_H
#define CDL_DIST_PORT_OWNER_H

#include <stddef.h>

/* The uid listening on TCP port (any local address) in this network
 * namespace, with "uid N (name)" in who (len bytes); -1 when none is found
 * or the tables cannot be read. */
long dist_port_owner(int port, char *who, size_t len);
/* "uid N (name)", or "uid N" when the account has no name, into who. */
void dist_account(long uid, char *who, size_t len);

#endif
