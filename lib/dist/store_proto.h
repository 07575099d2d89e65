/* The TCP store's wire format (both ends are the same libcdl build on one
 * architecture; the magic catches strangers speaking something else) and
 * the socket helpers its two ends share. */
#ifndef CDL_DIST_STORE_PROTO_H
#define CDL_DIST_STORE_PROTO_H

#include <stddef.h>
#include <stdint.h>

#include <cdl/dist.h>

#define STORE_MAGIC 0x53444c43u          /* "CLDS" */
#define STORE_KEY_MAX 256                /* bytes of a key (or token) */
/* A value's largest size, checked before anything is allocated (a header
 * announcing 16 GiB must not make rank 0 allocate it). Larger collectives
 * go through in pieces of this size (coll_store.c). */
#define STORE_VAL_MAX (64ull << 20)
/* Strangers (connections that have not completed the handshake) have their
 * own quota, apart from the ranks' slots: when it is full the oldest
 * stranger is dropped for the newcomer, so trickling connections cannot
 * keep a real rank out (it retries, see store.c). */
#define STORE_STRANGERS_MAX 16
/* Whole-handshake deadline of a stranger, in seconds (a rank's hello is one
 * round trip); CDL_STORE_HELLO_TIMEOUT overrides it (tests, slow links). */
#define STORE_HELLO_S 10.0
#define STORE_ENV_HELLO_TIMEOUT "CDL_STORE_HELLO_TIMEOUT"

/* The handshake: each end proves it knows the run's secret (the token)
 * without sending it, so a process that took MASTER_PORT before rank 0 (a
 * stranger listening there) learns nothing and cannot pose as the store:
 *   client: STORE_CHALLENGE, key = its nonce (STORE_NONCE_HEX hex digits),
 *           arg = world << 32 | rank
 *   server: OK, value = its nonce, then proof("server")
 *   client: checks the server's proof (a wrong one ends the connection before
 *           anything else is sent); STORE_PROVE, key = proof("client")
 *   server: checks it, then the rank and world; OK
 * A client that cannot check the server's proof sends STORE_PROVE with an
 * empty key instead (nothing derived from its secret): a store of this
 * build answers STORE_ST_AUTH with the fixed text STORE_AUTH_FAILED and the
 * account it runs as (public: ps shows it), so a rank with a secret that is
 * not the run's learns at once that its own account's store refused it,
 * while a listener of another account (a squatter, another user's job on
 * the same port), or one that does not answer so, still sends it to the
 * alternates below. The answer does not depend on anything the client sent.
 * proof(side) = hex HMAC-SHA256(token, "cdl-store|side|world|rank|client
 * nonce|server nonce"): both nonces are fresh per connection, so no answer
 * can be replayed, and the sides differ, so the server's answer to a
 * stranger never serves as a client's. */
enum store_op {
    STORE_HELLO_V1 = 1,   /* the handshake of earlier builds (key = the token
                           * itself): refused, naming the mismatch */
    STORE_SET,            /* key, value, arg = readers (0 = keep) */
    STORE_GET,            /* key, arg = timeout in ms, owner = rank expected to set it */
    STORE_BARRIER,        /* key = name, arg = timeout in ms */
    STORE_BYE,            /* no reply */
    STORE_CHALLENGE,      /* key = client nonce, arg = world << 32 | rank */
    STORE_PROVE,          /* key = the client's proof */
};

#define STORE_NONCE_HEX 32            /* 16 random bytes */
#define STORE_PROOF_HEX 64            /* an HMAC-SHA256 */

/* Ports the store moves to when another account holds MASTER_PORT (a
 * collision with another job, or someone squatting the predictable port):
 * STORE_ALT_PORTS distinct ports among the STORE_ALT_SPAN above it (below
 * it at the top of the port space), derived from the run's secret
 * (HMAC-SHA256(token, "cdl-store-port|PORT|i")), so that every rank
 * computes them and nobody else can. Rank 0 binds the first free one; a
 * rank that finds a listener on MASTER_PORT that is not this run's store
 * (it cannot prove the secret, or does not answer) tries them in turn,
 * and the handshake still admits only the real store. None when Slurm
 * reserved the step's ports (SLURM_STEP_RESV_PORTS): the library stays in
 * what Slurm reserved. */
#define STORE_ALT_PORTS 4
#define STORE_ALT_SPAN 64
/* The alternates of port into out[STORE_ALT_PORTS]; returns how many (0 or
 * STORE_ALT_PORTS). */
int store_alt_ports(const char *token, int port, int out[STORE_ALT_PORTS]);

/* out (STORE_PROOF_HEX + 1 bytes): proof(side) of the handshake above. */
void store_proof(const char *token, const char *side, int world, int rank, const char *cnonce,
                 const char *snonce, char *out);
/* A fresh nonce: STORE_NONCE_HEX hex digits. 0, or -1 (cdl_error). */
int store_nonce(char *out);

/* A request: header, then klen key bytes, then vlen value bytes. */
typedef struct store_req {
    uint32_t magic, op, klen;
    int32_t owner;
    uint64_t vlen, arg;
} store_req;

/* A reply's status: ok; an error; an error because a rank is lost (its
 * connection dropped without a goodbye, or it did not come in time), which
 * the client records (cdl_dist_peer_lost); the handshake's refusal of a
 * client that could not check the store's proof (see above). */
enum { STORE_ST_OK = 0, STORE_ST_ERR = 1, STORE_ST_LOST = 2, STORE_ST_AUTH = 3 };
/* STORE_ST_AUTH's text: "authentication failed, store uid N". */
#define STORE_AUTH_FAILED "authentication failed, store uid %ld"

/* A reply: header, then vlen bytes (the value, or the error message). */
typedef struct store_rep {
    uint32_t magic, status;   /* STORE_ST_* */
    uint64_t vlen;
} store_rep;

/* Sends all n bytes (no SIGPIPE). 0, or -1 with errno. */
int store_send_all(int fd, const void *buf, size_t n);
/* Receives exactly n bytes by `deadline` (dist_now() seconds; <= 0 waits
 * forever). 0, or -1 with errno: ETIMEDOUT, EPIPE when the peer closed. */
int store_recv_all(int fd, void *buf, size_t n, double deadline);
/* The same, giving up with ECANCELED as soon as stop (NULL: never) says
 * this process was asked to stop (cdl_train_run's SIGTERM/SIGUSR1): looked
 * at every STORE_STOP_POLL_S and whenever a signal interrupts the wait. */
#define STORE_STOP_POLL_S 0.1
int store_recv_stop(int fd, void *buf, size_t n, double deadline, int (*stop)(void));

/* Server side (store_server.c): binds MASTER_PORT (or adopts CDL_STORE_FD)
 * and serves from a thread. */
typedef struct store_server store_server;
store_server *store_server_start(const cdl_rank_info *info, const char *token, double hello_s);
/* The port it listens on: MASTER_PORT (or CDL_STORE_PORT), or an alternate. */
int store_server_port(const store_server *srv);
/* Waits up to timeout_s for every connected rank to say goodbye, then stops. */
void store_server_stop(store_server *srv, double timeout_s);

#endif
