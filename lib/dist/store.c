/* The TCP store's client side, and store_open/close (rank 0 also serves). */
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <cdl/cdl.h>

#include "contract.h"
#include "lib/core/log.h"
#include "hmac.h"
#include "store.h"
#include "store_proto.h"
#include "util.h"

struct store {
    int fd, rank, world;
    double timeout;
    char addr[256];
    int port;
    int dropped;         /* the last request failed because the connection broke */
    int hello_closed;    /* ... and it was closed at the hello's first request */
    int closed_hellos;   /* how many times that happened in a row */
    int stranger;        /* the hello met a listener that is not this run's store */
    double hello_wait;   /* seconds the hello waits for the answer */
    int (*stop)(void);   /* 1 when this process was asked to stop (NULL: never) */
    int stopped;         /* a wait was left for it: the connection is out of step */
    store_server *srv;   /* rank 0 */
};

int store_token(const cdl_rank_info *info, char *out, size_t len)
{
    const char *t = getenv(CDL_ENV_STORE_TOKEN);
    if (t && *t) {
        snprintf(out, len, "%s", t);
        return 0;
    }
    if (info->world > 1)
        return cdl_error("rank %d: " CDL_ENV_STORE_TOKEN " is not set but WORLD_SIZE=%d: the "
                         "store on MASTER_ADDR:MASTER_PORT admits only ranks that present the "
                         "run's secret. Launch with cdlrun or srun --cdl-ddp (they set one per "
                         "run), or export the same random value to every rank, e.g. "
                         CDL_ENV_STORE_TOKEN "=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \\n') "
                         "(docs/rank-contract.md)", info->rank, info->world);
    /* One rank: nobody else may join, and none needs to. */
    snprintf(out, len, "single.%d", (int)getpid());
    return 0;
}

/* One connect attempt to any address of host:port, bounded by deadline. */
static int connect_once(const char *host, int port, double deadline, int *err,
                        int (*stop)(void))
{
    char service[16];
    snprintf(service, sizeof service, "%d", port);
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *res;
    int g = getaddrinfo(host, service, &hints, &res);
    if (g) {
        *err = -g;   /* resolver errors are negative, errno values positive */
        return -1;
    }
    int fd = -1;
    for (struct addrinfo *a = res; a && fd < 0; a = a->ai_next) {
        fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol);
        if (fd < 0) {
            *err = errno;
            continue;
        }
        int rc = connect(fd, a->ai_addr, a->ai_addrlen);
        if (rc && errno == EINPROGRESS) {
            struct pollfd p = {.fd = fd, .events = POLLOUT};
            int soerr = ETIMEDOUT, ready = 0;
            socklen_t l = sizeof soerr;
            /* In slices when a stop is looked for (store_open_stop). */
            for (double left; !ready && (left = deadline - dist_now()) > 0;) {
                if (stop && stop())
                    break;
                if (stop && left > STORE_STOP_POLL_S)
                    left = STORE_STOP_POLL_S;
                ready = poll(&p, 1, (int)(left * 1000) + 1) == 1;
            }
            if (ready)
                getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &l);
            rc = soerr ? -1 : 0;
            errno = soerr;
        }
        if (rc) {
            *err = errno;
            close(fd);
            fd = -1;
        }
    }
    freeaddrinfo(res);
    if (fd >= 0) {
        int one = 1;
        fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    }
    return fd;
}

/* A wait of the bootstrap left because this process was asked to stop
 * (stop, below: cdl_train_run's SIGTERM or SIGUSR1): an error of its own,
 * never a lost peer, naming the rank and the wait. */
static int stopped_error(int rank, const char *what, const char *host, int port)
{
    return cdl_error("rank %d was asked to stop while %s (the TCP store at %s:%d); "
                     "it stopped waiting", rank, what, host, port);
}

/* Connects with bounded retries: the server may not listen yet. */
static int connect_retry(const char *host, int port, int rank, double timeout,
                         int (*stop)(void))
{
    double deadline = dist_now() + timeout, backoff = 0.01;
    int err = 0;
    for (;;) {
        if (stop && stop())
            return stopped_error(rank, "connecting to the store of rank 0", host, port);
        int fd = connect_once(host, port, deadline, &err, stop);
        if (fd >= 0)
            return fd;
        double left = deadline - dist_now();
        if (left <= 0)
            break;
        double pause = backoff < left ? backoff : left;
        struct timespec ts = {(time_t)pause, (long)((pause - (double)(time_t)pause) * 1e9)};
        nanosleep(&ts, NULL);
        backoff = backoff * 2 < 0.5 ? backoff * 2 : 0.5;
    }
    return cdl_error("rank %d could not reach the store of rank 0 at %s:%d within %.0f s (%s): "
                     "is rank 0 running, and are MASTER_ADDR/MASTER_PORT right?", rank, host, port,
                     timeout, err < 0 ? gai_strerror(-err) : strerror(err));
}

/* Sends one request and reads the reply into buf (cap bytes; *len its size)
 * by deadline (the server enforces the waits of gets and barriers itself and
 * answers before it). A hello's key is the run's secret: errors never echo
 * it. */
static int request(store *s, uint32_t op, const char *key, int owner, const void *val,
                   size_t vlen, uint64_t arg, void *buf, size_t cap, size_t *len,
                   double deadline)
{
    store_req h = {STORE_MAGIC, op, (uint32_t)strlen(key), owner, vlen, arg};
    int handshake = op == STORE_CHALLENGE || op == STORE_PROVE;
    const char *what = handshake ? "its hello" : key;
    if (s->stopped)
        return cdl_error("rank %d: the store at %s:%d is not usable after a wait left on a "
                         "request to stop", s->rank, s->addr, s->port);
    s->dropped = 1;
    if (store_send_all(s->fd, &h, sizeof h) || store_send_all(s->fd, key, h.klen) ||
        (vlen && store_send_all(s->fd, val, vlen)))
        return cdl_error("rank %d lost the store at %s:%d (%s): did rank 0 exit?", s->rank,
                         s->addr, s->port, strerror(errno));
    store_rep r;
    int got = store_recv_stop(s->fd, &r, sizeof r, deadline, s->stop);
    if (got && errno == ECANCELED) {
        char wait[300];
        s->stopped = 1;
        s->dropped = 0;
        if (op == STORE_BARRIER)
            snprintf(wait, sizeof wait, "it waited in barrier '%.200s'", key);
        else if (op == STORE_GET)
            snprintf(wait, sizeof wait, "it waited for '%.200s'%s", key,
                     owner >= 0 ? " of another rank" : "");
        else
            snprintf(wait, sizeof wait, "it waited for the answer to '%.200s'", what);
        return stopped_error(s->rank, wait, s->addr, s->port);
    }
    int silent = got != 0 && errno == ETIMEDOUT;
    if (got || r.magic != STORE_MAGIC) {
        if (handshake && errno == ETIMEDOUT) {
            s->stranger = 1;
            return cdl_error("rank %d: the store at %s:%d took the connection but did not "
                             "answer its hello within %.0f s: is rank 0 stuck before it "
                             "serves the store, or is another process listening there?",
                             s->rank, s->addr, s->port, s->hello_wait);
        }
        /* Only silence is a lost peer here: rank 0's node is gone or cut
         * off. A closed connection is rank 0's process ending, on an
         * error of its own (its status, 1, is the run's) or by a signal
         * (Slurm and cdlrun report 128 + the signal). */
        if (silent)
            dist_note_peer_lost();
        s->hello_closed = op == STORE_CHALLENGE && !silent;
        return cdl_error("rank %d lost the store at %s:%d during '%s' (%s): did rank 0 exit?",
                         s->rank, s->addr, s->port, what,
                         errno == EPIPE ? "connection closed" : strerror(errno));
    }
    s->dropped = 0;
    if (r.status) {
        char msg[1024];
        size_t n = r.vlen < sizeof msg - 1 ? (size_t)r.vlen : sizeof msg - 1;
        if (store_recv_all(s->fd, msg, n, deadline))
            return cdl_error("rank %d lost the store at %s:%d", s->rank, s->addr, s->port);
        msg[n] = '\0';
        dist_printable(msg, n);
        /* Before the handshake is through, the answer may come from any
         * process holding the port: quoted as its, and never a lost peer
         * (cdl-train would exit 76, which job scripts requeue on). */
        if (handshake)
            return cdl_error("rank %d: %s (the answer of %s:%d to its hello)", s->rank, msg,
                             s->addr, s->port);
        if (r.status == STORE_ST_LOST)
            dist_note_peer_lost();
        return cdl_error("%s", msg);
    }
    if (r.vlen > cap) {
        return cdl_error("rank %d: store value '%s' has %llu bytes, expected at most %zu (ranks "
                         "of different builds?)", s->rank, what, (unsigned long long)r.vlen, cap);
    }
    if (r.vlen && store_recv_all(s->fd, buf, (size_t)r.vlen, deadline))
        return cdl_error("rank %d lost the store at %s:%d", s->rank, s->addr, s->port);
    if (len)
        *len = (size_t)r.vlen;
    return 0;
}

/* A get or barrier: the server gives up after wait_s and says so. */
static double reply_deadline(double wait_s)
{
    return dist_now() + wait_s + 30;
}

/* This rank could not check the proof of the listener it reached: not a
 * store of this build (a squatter), or a store with another secret. It
 * says so with an empty proof (nothing derived from its secret); a store
 * of this build answers STORE_ST_AUTH with the account it runs as
 * (store_proto.h). That uid, or -1 for any other answer. */
static long refusal_uid(store *s, double deadline)
{
    store_req h = {STORE_MAGIC, STORE_PROVE, 0, -1, 0, 0};
    store_rep r;
    char msg[128];
    long uid = -1;
    if (store_send_all(s->fd, &h, sizeof h) || store_recv_all(s->fd, &r, sizeof r, deadline) ||
        r.magic != STORE_MAGIC || r.status != STORE_ST_AUTH || r.vlen >= sizeof msg ||
        store_recv_all(s->fd, msg, (size_t)r.vlen, deadline))
        return -1;
    msg[r.vlen] = '\0';
    if (sscanf(msg, STORE_AUTH_FAILED, &uid) != 1 || uid < 0)
        return -1;
    return uid;
}

/* The handshake (store_proto.h). The server answers at once: a listening
 * socket that never answers (rank 0 stopped before its store thread runs,
 * while it holds the port cdlrun handed it) fails at the client's own
 * deadline. The token itself never goes over the wire, and a listener that
 * cannot prove it knows the token gets nothing but a nonce. */
static int hello(store *s, const char *token, double deadline)
{
    uint64_t arg = (uint64_t)(uint32_t)s->world << 32 | (uint32_t)s->rank;
    char cnonce[STORE_NONCE_HEX + 1], answer[STORE_NONCE_HEX + STORE_PROOF_HEX];
    char want[STORE_PROOF_HEX + 1], proof[STORE_PROOF_HEX + 1];
    size_t len = 0;
    s->dropped = 0;
    if (store_nonce(cnonce) ||
        request(s, STORE_CHALLENGE, cnonce, -1, NULL, 0, arg, answer, sizeof answer, &len,
                deadline))
        return -1;
    if (len == sizeof answer)
        store_proof(token, "server", s->world, s->rank, cnonce, answer, want);
    if (len != sizeof answer || !dist_equal_ct(answer + STORE_NONCE_HEX, want, STORE_PROOF_HEX)) {
        /* A store of this account that refuses us holds the port: rank 0
         * never moves away from one (it fails, naming it), so this is the
         * run's store and this rank's secret is not the run's (or another
         * run of the user's holds the port, and rank 0 fails). Final. A
         * store of another account is where rank 0 moves away from. */
        long uid = len == sizeof answer ? refusal_uid(s, deadline) : -1;
        if (uid >= 0 && uid == (long)getuid())
            return cdl_error("rank %d: the store at %s:%d refused this rank: authentication "
                             "failed. The store is a process of this account (uid %ld) that "
                             "holds another secret than this rank's " CDL_ENV_STORE_TOKEN
                             " (never sent, nor shown): every rank of a run needs the same "
                             "one, from the job's contract. Check where this rank's comes "
                             "from: a contract exported by hand, or copied from another job "
                             "or shell (a stale " CDL_ENV_STORE_TOKEN " in the environment, "
                             "a job script or ~/.bashrc); cdlrun and srun --cdl-ddp give "
                             "every rank the same fresh one per run. Or another run of yours "
                             "still holds the port (ss -ltnp shows it); then rank 0 says so "
                             "(docs/rank-contract.md, Bootstrap)",
                             s->rank, s->addr, s->port, uid);
        s->stranger = 1;
        return cdl_error("rank %d: the process listening on %s:%d (MASTER_ADDR:MASTER_PORT) "
                         "is not this run's store: it cannot prove it knows the run's secret "
                         "(CDL_STORE_TOKEN), so nothing more was sent to it. Another process "
                         "holds that port, perhaps another user's, or rank 0 has another "
                         "secret; rank 0 then fails to bind it and says so. Run again (under "
                         "srun --cdl-ddp a new step gets another port), and tell the "
                         "administrator if it recurs (docs/admin.md, the store secret)",
                         s->rank, s->addr, s->port);
    }
    store_proof(token, "client", s->world, s->rank, cnonce, answer, proof);
    return request(s, STORE_PROVE, proof, -1, NULL, 0, 0, NULL, 0, NULL, deadline);
}

/* The store of an earlier build (before the challenge-response handshake,
 * store_proto.h) closes the connection at this build's first request, as
 * this build's store does to a stranger it evicts; retrying would last until
 * CDL_TIMEOUT and end in "lost the store". So after the second such close
 * in a row (one may be an eviction) ask it in the old way,
 * with an empty token (nothing secret): an old store answers "wrong token",
 * this build's store names the old hello instead. 1 when it is an old store
 * (cdl_error says so), else 0. */
static int old_store(store *s, double deadline)
{
    int err = 0, old = 0;
    double until = dist_now() + STORE_HELLO_S;
    int fd = connect_once(s->addr, s->port, until < deadline ? until : deadline, &err, s->stop);
    if (fd < 0)
        return 0;
    uint64_t arg = (uint64_t)(uint32_t)s->world << 32 | (uint32_t)s->rank;
    store_req h = {STORE_MAGIC, STORE_HELLO_V1, 0, -1, 0, arg};
    store_rep r;
    char msg[512];
    if (!store_send_all(fd, &h, sizeof h) && !store_recv_all(fd, &r, sizeof r, until) &&
        r.magic == STORE_MAGIC && r.status != STORE_ST_OK && r.vlen < sizeof msg &&
        !store_recv_all(fd, msg, (size_t)r.vlen, until)) {
        msg[r.vlen] = '\0';
        old = strstr(msg, "wrong token") != NULL;
    }
    close(fd);
    if (old)
        cdl_error("rank %d: the store at %s:%d (MASTER_ADDR:MASTER_PORT, served by rank 0) "
                  "is of an earlier cdl build: it closed the connection at this build's hello "
                  "and answers the old one (which sent the run's secret in the clear). This "
                  "rank runs cdl %s (build %s); every rank of a job must run the same cdl "
                  "release: see which cdl-train and libcdl.so rank 0's node finds (PATH, "
                  "LD_LIBRARY_PATH, a $HOME/.local install; cdl-train --version prints it)",
                  s->rank, s->addr, s->port, cdl_version(),
                  *cdl_build_id() ? cdl_build_id() : "unknown");
    return old;
}

/* One hello on s->fd, its answer awaited until hello_s from now at most
 * (a real store answers at once; a listener that does not is a stranger). */
static int hello_on(store *s, const char *token, double deadline, double hello_s)
{
    double now = dist_now(), until = now + hello_s < deadline ? now + hello_s : deadline;
    s->hello_closed = 0;
    s->stranger = 0;
    s->hello_wait = until - now > 0 ? until - now : 0;
    return hello(s, token, until);
}

static void pause_for(double *backoff)
{
    struct timespec ts = {0, (long)(*backoff * 1e9)};
    nanosleep(&ts, NULL);
    *backoff = *backoff * 2 < 0.5 ? *backoff * 2 : 0.5;
}

/* After MASTER_PORT's listener proved not to be this run's store: rank 0
 * may have moved to an alternate (store_proto.h). Tries MASTER_PORT and the
 * alternates in turn until the deadline; a refusal by the store itself is
 * final. 0 when connected (s->fd, s->port), -2 when refused, else -1. */
static int client_moved(store *s, const char *token, int port, const int *alt, int nalt,
                        double deadline, double hello_s)
{
    double backoff = 0.01;
    for (;;) {
        for (int i = -1; i < nalt; i++) {
            int err = 0;
            double now = dist_now(), until = now + 1 < deadline ? now + 1 : deadline;
            s->port = i < 0 ? port : alt[i];
            if (s->stop && s->stop())
                return stopped_error(s->rank, "looking for the store of rank 0", s->addr,
                                     port), -2;
            if (until <= now ||
                (s->fd = connect_once(s->addr, s->port, until, &err, s->stop)) < 0)
                continue;
            if (hello_on(s, token, deadline, hello_s) == 0)
                return 0;
            close(s->fd);
            s->fd = -1;
            if (!s->dropped && !s->stranger)
                return -2;
        }
        if (deadline - dist_now() <= backoff)
            return -1;
        pause_for(&backoff);
    }
}

/* Connects and says hello. A connection that breaks before the server's
 * answer (the server dropped us among strangers, or was not ready) is
 * retried with backoff until the timeout; a refusal is final. A listener
 * on the port that is not this run's store sends the rank to the
 * alternates rank 0 moves to (client_moved). */
static store *client(const char *addr, int port, int rank, int world, double timeout,
                     const char *token, double hello_s, int (*stop)(void))
{
    store *s = cdl_calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->stop = stop;
    s->rank = rank;
    s->world = world;
    s->timeout = timeout;
    s->port = port;
    snprintf(s->addr, sizeof s->addr, "%s", addr);
    if (!(hello_s > 0))
        hello_s = STORE_HELLO_S;
    int alt[STORE_ALT_PORTS], nalt = store_alt_ports(token, port, alt);
    double deadline = dist_now() + timeout, backoff = 0.01;
    for (;;) {
        s->fd = connect_retry(addr, port, rank, deadline - dist_now(), stop);
        if (s->fd < 0)
            break;
        if (hello_on(s, token, deadline, hello_s) == 0)
            return s;
        close(s->fd);
        s->fd = -1;
        s->closed_hellos = s->hello_closed ? s->closed_hellos + 1 : 0;
        if (s->closed_hellos >= 2 && old_store(s, deadline))
            break;
        /* A listener that closes every hello is no store of this build
         * either (this build's closes a stranger's only to make room). */
        s->stranger |= s->closed_hellos >= 2;
        if (s->stranger && nalt) {
            char first[1024];
            snprintf(first, sizeof first, "%s", cdl_last_error());
            /* Said now: when rank 0 could not move either, the launcher may
             * end this rank before its own timeout. */
            log_line(CDL_LOG_WARNING, stderr, "cdl: %s. Looking for this run's store on the "
                     "ports rank 0 moves it to when another account holds MASTER_PORT (%d, "
                     "%d, %d, %d)", first, alt[0], alt[1], alt[2], alt[3]);
            int rc = client_moved(s, token, port, alt, nalt, deadline, hello_s);
            if (rc == 0)
                return s;
            if (rc == -1)
                cdl_error("%s. Nor did this run's store answer within %.0f s on the ports "
                          "rank 0 moves it to when another account holds MASTER_PORT (%d, "
                          "%d, %d, %d, derived from the run's secret): rank 0's error says "
                          "why", first, timeout, alt[0], alt[1], alt[2], alt[3]);
            break;
        }
        if (!s->dropped || deadline - dist_now() <= backoff)
            break;
        if (stop && stop()) {
            stopped_error(rank, "connecting to the store of rank 0", addr, s->port);
            break;
        }
        pause_for(&backoff);
    }
    cdl_free(s);
    return NULL;
}

store *store_open(const cdl_rank_info *info, const char *given, double timeout_s,
                  double hello_s)
{
    return store_open_stop(info, given, 0, timeout_s, hello_s, NULL);
}

store *store_open_at(const cdl_rank_info *info, const char *given, int port, double timeout_s,
                     double hello_s)
{
    return store_open_stop(info, given, port, timeout_s, hello_s, NULL);
}

int store_port(const store *s)
{
    return s->port;
}

store *store_open_stop(const cdl_rank_info *info, const char *given, int port,
                       double timeout_s, double hello_s, int (*stop)(void))
{
    /* A plain srun (or --mpi=pmi2) step lands here: say the launch that
     * needs no port, where this libcdl has PMIx. */
#ifdef HAVE_PMIX
    const char *launch = "cdlrun, srun --cdl-ddp or srun --mpi=pmix (no port needed)";
#else
    const char *launch = "cdlrun or srun --cdl-ddp";
#endif
    if (!info->master_port)
        return cdl_error("rank %d: no MASTER_PORT: the TCP store (the bootstrap without PMIx, "
                         "and the hier:store transport) is served by rank 0 on "
                         "MASTER_ADDR:MASTER_PORT; launch with %s, or export MASTER_PORT",
                         info->rank, launch), NULL;
    const char *addr = info->master_addr[0] ? info->master_addr : "127.0.0.1";
    char token[STORE_KEY_MAX + 1];
    if (given)
        snprintf(token, sizeof token, "%s", given);
    else if (store_token(info, token, sizeof token))
        return NULL;
    store_server *srv = NULL;
    if (info->rank == 0 && !(srv = store_server_start(info, token, hello_s)))
        return NULL;
    /* Rank 0 too connects to the advertised address: the server listens
     * there only (on MASTER_PORT, or the alternate it moved to). */
    if (srv)
        port = store_server_port(srv);
    else if (port <= 0)
        port = info->master_port;
    store *s = client(addr, port, info->rank, info->world, timeout_s, token, hello_s, stop);
    if (!s) {
        store_server_stop(srv, 0);
        return NULL;
    }
    s->srv = srv;
    return s;
}

void store_close(store *s)
{
    if (!s)
        return;
    store_req h = {STORE_MAGIC, STORE_BYE, 0, -1, 0, 0};
    (void)store_send_all(s->fd, &h, sizeof h);
    close(s->fd);
    store_server_stop(s->srv, s->timeout);
    cdl_free(s);
}

void store_stop_off(store *s)
{
    if (s)
        s->stop = NULL;
}

void store_linger_off(store *s)
{
    if (s)
        s->timeout = 0;
}

static uint64_t ms_of(double s)
{
    return (uint64_t)(s * 1000 + 0.5);
}

int store_set(store *s, const char *key, const void *val, size_t len, int readers)
{
    if (len > STORE_VAL_MAX)
        return cdl_error("rank %d: store value '%s' has %zu bytes; the store takes at most %llu "
                         "per value", s->rank, key, len, (unsigned long long)STORE_VAL_MAX);
    return request(s, STORE_SET, key, -1, val, len, (uint64_t)(readers > 0 ? readers : 0), NULL,
                   0, NULL, reply_deadline(s->timeout));
}

int store_get(store *s, const char *key, int owner, void *buf, size_t cap, size_t *len)
{
    return request(s, STORE_GET, key, owner, NULL, 0, ms_of(s->timeout), buf, cap, len,
                   reply_deadline(s->timeout));
}

int store_barrier(store *s, const char *name)
{
    return request(s, STORE_BARRIER, name, -1, NULL, 0, ms_of(s->timeout), NULL, 0, NULL,
                   reply_deadline(s->timeout));
}

int store_probe(const char *addr, int port, const char *token, int rank, int world,
                double timeout_s)
{
    store *s = client(addr, port, rank, world, timeout_s, token, 0, NULL);
    if (!s)
        return -1;
    store_req h = {STORE_MAGIC, STORE_BYE, 0, -1, 0, 0};
    (void)store_send_all(s->fd, &h, sizeof h);
    close(s->fd);
    cdl_free(s);
    return 0;
}
