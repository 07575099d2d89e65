/* The TCP key-value store: bootstrap without PMIx, and the transport of the
 * slow multi-node fallback. Rank 0 serves it (a thread) at
 * MASTER_ADDR:MASTER_PORT; every rank, rank 0 included, is a client.
 *
 * - Rank 0 binds the port before anyone connects and fails clearly when it
 *   is taken, or adopts the listening socket a launcher passed in
 *   CDL_STORE_FD (cdlrun: no port race at all).
 * - Client and server first prove to each other that they know the run's
 *   token (CDL_STORE_TOKEN) without sending it (store_proto.h): a client
 *   sends nothing more to a listener that cannot, and the server drops
 *   connections with a wrong proof, a bad rank or a second process
 *   claiming a connected rank.
 * - Every wait (get, barrier) is bounded by the timeout, enforced by the
 *   server, whose error names the ranks still missing; a rank whose
 *   connection drops without saying goodbye is "lost" and fails every wait.
 * - Clients connect with bounded retries (backoff) until the timeout.
 * - A process asked to stop (store_open_stop) leaves any of these waits
 *   at once. */
#ifndef CDL_DIST_STORE_H
#define CDL_DIST_STORE_H

#include <stddef.h>

#include <cdl/dist.h>

typedef struct store store;

/* Rank 0 serves, everyone connects; token NULL: store_token()'s. */
store *store_open(const cdl_rank_info *info, const char *token, double timeout_s,
                  double hello_s);
/* The same, the other ranks connecting to port, where rank 0's store
 * listens (it published the port through PMIx: an alternate when another
 * account held MASTER_PORT); 0: MASTER_PORT (or CDL_STORE_PORT), trying
 * the alternates when a stranger holds it. Rank 0 ignores port. */
store *store_open_at(const cdl_rank_info *info, const char *token, int port, double timeout_s,
                     double hello_s);
/* The same, every wait of this store (connecting, and each get and
 * barrier) left at once, with an error naming the rank and the wait, when
 * stop (NULL: never) returns 1: the process was asked to stop
 * (cdl_train_run's SIGTERM/SIGUSR1). Looked at every STORE_STOP_POLL_S.
 * After such a stop the store takes no more requests; close it. */
store *store_open_stop(const cdl_rank_info *info, const char *token, int port,
                       double timeout_s, double hello_s, int (*stop)(void));
/* From now on no wait of s looks at store_open_stop's stop (NULL: nothing). */
void store_stop_off(store *s);
/* The port this store is reached at (rank 0: the one its server bound). */
int store_port(const store *s);
/* Says goodbye; rank 0 then waits (bounded) for the connected ranks to say
 * goodbye too before the server stops. */
void store_close(store *s);
/* After a failed collective: rank 0's store_close then stops serving at
 * once instead of waiting up to the timeout for the other ranks to
 * disconnect (one that hangs never would; the others fail without it). */
void store_linger_off(store *s);

/* Sets key (replacing any value). readers > 0: the value is dropped after
 * that many gets (values exchanged once per collective). */
int store_set(store *s, const char *key, const void *val, size_t len, int readers);
/* Waits for key and copies its value into buf (cap bytes); *len gets its
 * size (a larger value is an error). owner: the rank expected to set it, for
 * the timeout's message (-1: unknown). */
int store_get(store *s, const char *key, int owner, void *buf, size_t cap, size_t *len);
/* All ranks of the job; names are unique per use (e.g. "fence3"). */
int store_barrier(store *s, const char *name);

/* The run's secret: CDL_STORE_TOKEN (cdlrun and srun --cdl-ddp set an
 * unpredictable one per run; PMIx runs exchange one, dist.c). Without it a
 * world of one rank gets a private value, a larger world is an error that
 * says how to get one: anything computable from public values (job id,
 * uid, port) would let any user on the network join as a rank. */
int store_token(const cdl_rank_info *info, char *out, size_t len);

/* Connects to a store as `rank` of `world` presenting `token`: 0 when
 * accepted (then says goodbye), -1 with the server's reason. For tests and
 * diagnostics. */
int store_probe(const char *addr, int port, const char *token, int rank, int world,
                double timeout_s);

#endif
