/* The TCP store's server, run by rank 0: an accept thread plus one thread
 * per connection (a job has one connection per rank; waits block in a
 * condition variable, so the code reads top to bottom). All state is under
 * one mutex; waits use CLOCK_MONOTONIC deadlines. */
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <cdl/cdl.h>

#include "boot.h"
#include "contract.h"
#include "hmac.h"
#include "lib/core/log.h"
#include "port_owner.h"
#include "store_proto.h"
#include "util.h"

enum { RANK_NEVER, RANK_CONNECTED, RANK_BYE, RANK_LOST };

typedef struct entry {
    char *key;
    void *val;
    size_t len;
    int readers_left;        /* 0: kept until replaced */
    struct entry *next;
} entry;

/* How long a stopping store still answers a barrier every rank reached. */
#define STORE_REPLY_GRACE_MS 5000

typedef struct barrier {
    char *name;
    unsigned char *in;       /* world flags: arrived */
    int arrived, left;
    struct barrier *next;
} barrier;

typedef struct conn {
    store_server *srv;
    int fd, rank;            /* rank: -1 until the hello is accepted (under mu) */
    int done;                /* the thread has finished: join and free it */
    int evicted;             /* a stranger dropped for a newcomer (under mu) */
    int told;                /* an error message was sent: drain before closing */
    double deadline;         /* dist_now() by which a stranger must be accepted */
    int challenged;          /* the handshake's first half is done (store_proto.h) */
    uint64_t claim;          /* its world << 32 | rank */
    char cnonce[STORE_NONCE_HEX + 1], snonce[STORE_NONCE_HEX + 1];
    pthread_t thread;
    struct conn *next;
} conn;

struct store_server {
    int lfd, wake[2];
    int world, port;
    double hello_s;          /* a stranger's whole-handshake deadline */
    char token[STORE_KEY_MAX + 1];
    char host[256];
    pthread_t acceptor;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    unsigned char *state;    /* world entries of RANK_* */
    entry *entries;
    barrier *barriers;
    conn *conns;
    int nconns, stopping;
};

/* ------------------------------------------------------------ listening */

static int adopt_fd(const cdl_rank_info *info, const char *s)
{
    char *end;
    long fd = strtol(s, &end, 10);
    int listening = 0;
    socklen_t l = sizeof listening;
    struct sockaddr_storage sa;
    socklen_t sl = sizeof sa;
    if (end == s || *end || fd < 0 || fd > 1 << 20 ||
        getsockopt((int)fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &l) || !listening ||
        getsockname((int)fd, (struct sockaddr *)&sa, &sl))
        return cdl_error(CDL_ENV_STORE_FD "=%s is not a listening socket: it is for launchers "
                         "that bind the store's port for rank 0; unset it", s);
    int port = sa.ss_family == AF_INET6 ? ntohs(((struct sockaddr_in6 *)&sa)->sin6_port)
                                        : ntohs(((struct sockaddr_in *)&sa)->sin_port);
    if (port != info->master_port)
        return cdl_error(CDL_ENV_STORE_FD "=%s listens on port %d, not the store's port %d "
                         "(" CDL_ENV_STORE_PORT ", else " CDL_ENV_MASTER_PORT ")", s, port,
                         info->master_port);
    fcntl((int)fd, F_SETFD, FD_CLOEXEC);
    return (int)fd;
}

/* Listens on addr:port: the socket, or -1 with *e an errno value (or the
 * resolver's error, negative). SO_REUSEADDR lets a rerun rebind a port in
 * TIME_WAIT; it never lets two listeners share one. */
static int listen_at(const char *addr, int port, int *e)
{
    char service[16];
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_NUMERICSERV}, *res;
    snprintf(service, sizeof service, "%d", port);
    int g = getaddrinfo(addr, service, &hints, &res);
    if (g) {
        *e = g < 0 ? g : -g;
        return -1;
    }
    int fd = -1, one = 1;
    *e = 0;
    for (struct addrinfo *a = res; a && fd < 0 && *e != EADDRINUSE; a = a->ai_next) {
        fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
        if (fd < 0) {
            *e = errno;
            continue;
        }
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (bind(fd, a->ai_addr, a->ai_addrlen) != 0 || listen(fd, 1024) != 0) {
            *e = errno;
            close(fd);
            fd = -1;
        }
    }
    freeaddrinfo(res);
    return fd;
}

/* MASTER_PORT is another account's: the first of the alternates derived
 * from the run's secret (store_proto.h) that is free, on the same address.
 * The socket (*port its port, said on stderr), or -1 with who holds them
 * in held. */
static int bind_alternate(const char *addr, const char *token, const char *host, int *port,
                          const char *owner, char *held, size_t len)
{
    int alt[STORE_ALT_PORTS], n = store_alt_ports(token, *port, alt);
    size_t used = 0;
    held[0] = '\0';
    for (int i = 0; i < n; i++) {
        int e = 0, fd = listen_at(addr, alt[i], &e);
        if (fd >= 0) {
            log_line(CDL_LOG_WARNING, stderr,
                     "cdl: rank 0: warning: MASTER_PORT %d on host %s is in use by a process "
                     "of another account, %s: the store listens on port %d instead, one of "
                     "the ports derived from the run's secret that the ranks try next. Tell "
                     "the administrator which account holds it (docs/admin.md, Ports)",
                     *port, host, owner, alt[i]);
            *port = alt[i];
            return fd;
        }
        char who[160] = "";
        if (e != EADDRINUSE || dist_port_owner(alt[i], who, sizeof who) < 0)
            snprintf(who, sizeof who, "%s", e > 0 ? strerror(e) : "cannot resolve");
        int k = snprintf(held + used, len - used, "%s%d (%s)", i ? ", " : "", alt[i], who);
        if (k > 0 && used + (size_t)k < len)
            used += (size_t)k;
    }
    return -1;
}

/* Binds the address rank 0 advertises (MASTER_ADDR, 127.0.0.1 when none)
 * before any rank connects, not every interface: only what routes to that
 * address can reach the store. When another account holds the port, an
 * alternate (bind_alternate); *port gets the port bound. */
static int bind_port(const cdl_rank_info *info, const char *host, const char *token, int *port)
{
    const char *addr = info->master_addr[0] ? info->master_addr : "127.0.0.1";
    int e = 0, fd = listen_at(addr, info->master_port, &e);
    *port = info->master_port;
    if (fd >= 0)
        return fd;
    if (e < 0)
        return cdl_error("rank 0 on host %s: cannot resolve MASTER_ADDR=%s (%s): it must name "
                         "this host", host, addr, gai_strerror(-e));
    /* torchrun's static rendezvous hands its workers the port of its
     * agent's own store (and says so in this variable): cdl's store cannot
     * share it. */
    const char *agent_store = getenv("TORCHELASTIC_USE_AGENT_STORE");
    if (e == EADDRINUSE && agent_store && !strcmp(agent_store, "True"))
        return cdl_error("MASTER_PORT %d on host %s is in use: it is the store of the "
                         "torchrun that started this rank (static rendezvous, "
                         "TORCHELASTIC_USE_AGENT_STORE=True), which cdl cannot share. Start "
                         "the ranks without torchrun: srun --ntasks-per-node=N --cdl-ddp "
                         "PROGRAM, or cdlrun -n N PROGRAM on one machine; or give torchrun "
                         "--rdzv_backend=c10d --rdzv_endpoint=HOST:PORT", info->master_port,
                         host);
    char who[160], held[512];
    long owner = e == EADDRINUSE ? dist_port_owner(info->master_port, who, sizeof who) : -1;
    if (owner >= 0 && owner != (long)getuid() &&
        (fd = bind_alternate(addr, token, host, port, who, held, sizeof held)) >= 0)
        return fd;
    if (owner >= 0 && owner != (long)getuid() && held[0])
        return cdl_error("MASTER_PORT %d on host %s is in use by a process of another account, "
                         "%s, and so are the ports derived from the run's secret that the "
                         "store would move to: %s. This step cannot run (its ranks stop, and "
                         "they send nothing secret to those processes): someone is taking the "
                         "ports on purpose. Tell the administrator which account holds them "
                         "(reserved ports, MpiParams=ports= in slurm.conf, make ports harder "
                         "to take; docs/admin.md), then run the step again", info->master_port,
                         host, who, held);
    if (owner >= 0 && owner != (long)getuid())
        return cdl_error("MASTER_PORT %d on host %s is in use by a process of another account, "
                         "%s: this step cannot run on it (its ranks stop, and they send nothing "
                         "secret to that process; Slurm reserved the port, "
                         "SLURM_STEP_RESV_PORTS, so the store does not move). Tell the "
                         "administrator which account holds it (docs/admin.md, Ports), then "
                         "run the step again", info->master_port, host, who);
    if (owner >= 0)
        return cdl_error("MASTER_PORT %d on host %s is in use by another process of yours (%s): "
                         "an earlier run or step still running on this host? (ss -ltnp shows "
                         "it); stop it, or run the step again for another step id (srun "
                         "--cdl-ddp hashes the job and step ids into the port, so two steps "
                         "on one node can meet; the administrator can have Slurm reserve ports, "
                         "MpiParams=ports= in slurm.conf, docs/admin.md); a hand-exported "
                         "MASTER_PORT: choose another, cdlrun picks a free one",
                         info->master_port, host, who);
    if (e == EADDRINUSE)
        return cdl_error("MASTER_PORT %d on host %s is in use: %s; another process holds it "
                         "(a step of another job: under srun --cdl-ddp the port is a hash of "
                         "the job and step ids, so two jobs on one node can meet; run the step "
                         "again for another step id, or ask the administrator to have Slurm "
                         "reserve ports (MpiParams=ports= in slurm.conf, docs/admin.md); a "
                         "hand-exported MASTER_PORT: choose another, cdlrun "
                         "picks a free one)", info->master_port, host, strerror(e));
    if (e == EADDRNOTAVAIL)
        return cdl_error("rank 0 runs on host %s, but MASTER_ADDR=%s is not an address of this "
                         "host: point MASTER_ADDR at rank 0's host", host, addr);
    return cdl_error("rank 0: cannot listen on %s:%d (MASTER_ADDR:MASTER_PORT) on host %s: %s",
                     addr, info->master_port, host, strerror(e));
}

/* ------------------------------------------------------------ replies */

static int reply(conn *c, int status, const void *val, size_t len)
{
    store_rep h = {STORE_MAGIC, (uint32_t)status, len};
    if (store_send_all(c->fd, &h, sizeof h) || (len && store_send_all(c->fd, val, len)))
        return -1;
    return 0;
}

/* An error reply: STORE_ST_ERR, or STORE_ST_LOST when a wait failed
 * because a rank is gone (its connection dropped without a goodbye, or it
 * did not come in time; also the store's stop while rank 0, this process,
 * gave up over a lost peer): the client records that (cdl_dist_peer_lost)
 * and cdl-train exits CDL_EXIT_PEER_LOST. */
static int reply_status_f(conn *c, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int reply_status_f(conn *c, int status, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    c->told = 1;
    return reply(c, status, msg, strlen(msg));
}
#define reply_err(c, ...) reply_status_f(c, STORE_ST_ERR, __VA_ARGS__)
#define reply_lost(c, ...) reply_status_f(c, STORE_ST_LOST, __VA_ARGS__)

/* Before closing a connection that was just told why: a close with unread
 * bytes from the client (the rest of a refused request) sends a reset,
 * which can destroy the message before the client reads it. So stop
 * sending, then read and discard for a moment (bounded in time and bytes). */
static void drain(int fd)
{
    char buf[4096];
    size_t total = 0;
    double deadline = dist_now() + 1;
    shutdown(fd, SHUT_WR);
    while (total < (1u << 20)) {
        double left = deadline - dist_now();
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (left <= 0 || poll(&p, 1, (int)(left * 1000) + 1) <= 0)
            break;
        ssize_t k = recv(fd, buf, sizeof buf, MSG_DONTWAIT);
        if (k <= 0)
            break;
        total += (size_t)k;
    }
}

/* ------------------------------------------------------------ state (under mu) */

static entry *find(store_server *s, const char *key, entry ***link)
{
    entry **pp = &s->entries;
    for (; *pp; pp = &(*pp)->next)
        if (!strcmp((*pp)->key, key)) {
            if (link)
                *link = pp;
            return *pp;
        }
    return NULL;
}

static void drop(entry **link)
{
    entry *e = *link;
    *link = e->next;
    cdl_free(e->key);
    cdl_free(e->val);
    cdl_free(e);
}

/* The first lost rank, or -1. */
static int lost_rank(const store_server *s)
{
    for (int r = 0; r < s->world; r++)
        if (s->state[r] == RANK_LOST)
            return r;
    return -1;
}

/* The host rank r published in its release record at bootstrap (boot.c,
 * key "r/cdl.release", kept for the whole run) into out (cap bytes), or ""
 * when not known (the PMIx bootstrap, or lost before it). It comes from
 * another process: only a plain host name is taken. Under mu. */
static const char *host_of(store_server *s, int r, char *out, size_t cap)
{
    char key[32];
    snprintf(key, sizeof key, "%d/cdl.release", r);
    entry *e = find(s, key, NULL);
    out[0] = '\0';
    if (!e || e->len != sizeof(boot_release))
        return out;
    const char *h = ((const boot_release *)e->val)->host;
    size_t k = dist_plain_len(h, sizeof ((const boot_release *)0)->host, "._-");
    if (k && k < cap) {   /* all of it, and nothing odd */
        memcpy(out, h, k);
        out[k] = '\0';
    }
    return out;
}

/* "rank R on HOST" (or "rank R" when the host is not known): a lost node
 * named, so that the user knows which one to exclude or report. Under mu. */
static const char *where(store_server *s, int r, char *buf, size_t len)
{
    char host[80];
    if (*host_of(s, r, host, sizeof host))
        snprintf(buf, len, "rank %d on %s", r, host);
    else
        snprintf(buf, len, "rank %d", r);
    return buf;
}

/* "ranks 2, 3 (on n2, n3)": dist_rank_list, then the distinct known hosts
 * of the ranks it shows. Under mu. */
static const char *where_list(store_server *s, const int *ranks, int n, char *buf, size_t len)
{
    dist_rank_list(buf, len, ranks, n);
    size_t used = strlen(buf);
    int shown = 0;
    for (int i = 0; i < n && i < 9; i++) {
        char host[80], prev[80];
        int dup = 0;
        if (!*host_of(s, ranks[i], host, sizeof host))
            continue;
        for (int j = 0; j < i && !dup; j++)
            dup = !strcmp(host_of(s, ranks[j], prev, sizeof prev), host);
        if (dup || used + strlen(host) + 8 >= len)
            continue;
        used += (size_t)snprintf(buf + used, len - used, "%s%s", shown++ ? ", " : " (on ", host);
    }
    if (shown)
        snprintf(buf + used, len - used, ")");
    return buf;
}

static const char *state_word(int st)
{
    switch (st) {
    case RANK_NEVER: return "never connected to the store";
    case RANK_CONNECTED: return "is connected but did not get there";
    case RANK_BYE: return "has already finished";
    default: return "lost its connection (died?)";
    }
}

static struct timespec abs_deadline(uint64_t ms)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    ts.tv_sec += (time_t)(ms / 1000);
    ts.tv_nsec += (long)(ms % 1000) * 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    return ts;
}

/* ------------------------------------------------------------ requests */

static int do_set(conn *c, char *key, void *val, size_t len, int readers)
{
    store_server *s = c->srv;
    pthread_mutex_lock(&s->mu);
    entry **link, *e = find(s, key, &link);
    if (e)
        drop(link);
    e = cdl_malloc(sizeof *e);
    if (!e) {
        pthread_mutex_unlock(&s->mu);
        cdl_free(key);
        cdl_free(val);
        return reply_err(c, "rank 0: store out of memory");
    }
    *e = (entry){key, val, len, readers, s->entries};
    s->entries = e;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    return reply(c, 0, NULL, 0);
}

static int do_get(conn *c, const char *key, int owner, uint64_t ms)
{
    store_server *s = c->srv;
    struct timespec dl = abs_deadline(ms);
    pthread_mutex_lock(&s->mu);
    for (;;) {
        entry **link, *e = find(s, key, &link);
        if (e) {
            void *copy = cdl_malloc(e->len ? e->len : 1);
            size_t len = e->len;
            if (copy)
                memcpy(copy, e->val, len);
            if (e->readers_left > 0 && --e->readers_left == 0)
                drop(link);
            pthread_mutex_unlock(&s->mu);
            int rc = copy ? reply(c, 0, copy, len) : reply_err(c, "rank 0: store out of memory");
            cdl_free(copy);
            return rc;
        }
        int lost = lost_rank(s);
        if (lost >= 0 || s->stopping) {
            char who[128];
            if (lost >= 0)
                where(s, lost, who, sizeof who);
            pthread_mutex_unlock(&s->mu);
            if (lost < 0 && !cdl_dist_peer_lost())
                return reply_err(c, "rank 0 stopped its store while rank %d waited for '%s'",
                                 c->rank, key);
            if (lost < 0)
                return reply_lost(c, "rank 0 lost a peer and stopped its store while rank %d "
                                  "waited for '%s'", c->rank, key);
            return reply_lost(c, "%s lost its connection to the store (died?) while rank %d "
                              "waited for '%s'", who, c->rank, key);
        }
        if (pthread_cond_timedwait(&s->cv, &s->mu, &dl) == ETIMEDOUT && !find(s, key, NULL)) {
            int st = owner >= 0 && owner < s->world ? s->state[owner] : -1;
            char who[128];
            if (st >= 0)
                where(s, owner, who, sizeof who);
            pthread_mutex_unlock(&s->mu);
            if (st < 0)
                return reply_lost(c, "rank %d timed out after %.0f s waiting for '%s'", c->rank,
                                  (double)ms / 1000, key);
            /* An owner that said goodbye ended on its own and said why. */
            return reply_status_f(c, st == RANK_BYE ? STORE_ST_ERR : STORE_ST_LOST,
                                  "rank %d timed out after %.0f s waiting for '%s' of %s, "
                                  "which %s", c->rank, (double)ms / 1000, key, who,
                                  state_word(st));
        }
    }
}

static char *dup_str(const char *s)
{
    size_t n = strlen(s) + 1;
    char *d = cdl_malloc(n);
    if (d)
        memcpy(d, s, n);
    return d;
}

static barrier *barrier_get(store_server *s, const char *name)
{
    for (barrier *b = s->barriers; b; b = b->next)
        if (!strcmp(b->name, name) && b->arrived < s->world)
            return b;   /* a completed one still replying is not joined again */
    barrier *b = cdl_calloc(1, sizeof *b);
    if (!b)
        return NULL;
    b->name = dup_str(name);
    b->in = cdl_calloc((size_t)s->world, 1);
    if (!b->name || !b->in) {
        cdl_free(b->name);
        cdl_free(b->in);
        cdl_free(b);
        return NULL;
    }
    b->next = s->barriers;
    s->barriers = b;
    return b;
}

static void barrier_leave(store_server *s, barrier *b)
{
    if (++b->left < s->world)
        return;
    for (barrier **pp = &s->barriers; *pp; pp = &(*pp)->next)
        if (*pp == b) {
            *pp = b->next;
            break;
        }
    cdl_free(b->name);
    cdl_free(b->in);
    cdl_free(b);
}

static int do_barrier(conn *c, const char *name, uint64_t ms)
{
    store_server *s = c->srv;
    struct timespec dl = abs_deadline(ms);
    pthread_mutex_lock(&s->mu);
    barrier *b = barrier_get(s, name);
    if (!b) {
        pthread_mutex_unlock(&s->mu);
        return reply_err(c, "rank 0: store out of memory");
    }
    if (!b->in[c->rank]) {
        b->in[c->rank] = 1;
        b->arrived++;
        pthread_cond_broadcast(&s->cv);
    }
    for (;;) {
        if (b->arrived == s->world) {
            /* Leave only once replied: store_server_stop waits for the
             * replies of a completed barrier (rank 0 may stop its store
             * the moment its own reply comes). */
            pthread_mutex_unlock(&s->mu);
            int rc = reply(c, 0, NULL, 0);
            pthread_mutex_lock(&s->mu);
            barrier_leave(s, b);
            pthread_cond_broadcast(&s->cv);
            pthread_mutex_unlock(&s->mu);
            return rc;
        }
        int lost = lost_rank(s);
        if (lost < 0 && !s->stopping) {
            if (pthread_cond_timedwait(&s->cv, &s->mu, &dl) != ETIMEDOUT || b->arrived == s->world)
                continue;
        }
        {
            int missing[64], n = 0, never = 0;
            for (int r = 0; r < s->world; r++)
                if (!b->in[r]) {
                    if (n < 64)
                        missing[n] = r;
                    n++;
                    never += s->state[r] == RANK_NEVER;
                }
            char list[768], who[128];
            where_list(s, missing, n < 64 ? n : 64, list, sizeof list);
            if (lost >= 0)
                where(s, lost, who, sizeof who);
            /* It stays counted as arrived: the others' messages then name
             * only the ranks that really are missing. */
            pthread_mutex_unlock(&s->mu);
            if (lost >= 0)
                return reply_lost(c, "%s lost its connection to the store (died?) while "
                                  "rank %d waited in barrier '%s'", who, c->rank, name);
            if (s->stopping && cdl_dist_peer_lost())
                return reply_lost(c, "rank 0 lost a peer and stopped its store during barrier "
                                  "'%s'", name);
            if (s->stopping)
                return reply_err(c, "rank 0 stopped its store during barrier '%s'", name);
            return reply_lost(c, "rank %d timed out after %.0f s in barrier '%s': %s did not "
                              "arrive%s", c->rank, (double)ms / 1000, name, list,
                              never ? " (some never connected to the store: did they start?)" : "");
        }
    }
}

/* ------------------------------------------------------------ connections */

/* Reads one request. A stranger must send a whole hello by its deadline
 * (one byte every few seconds does not extend it); ranks may stay idle. The
 * announced lengths are checked before anything is allocated. */
static int read_request(conn *c, store_req *h, char **key, void **val)
{
    double deadline = c->rank < 0 ? c->deadline : 0;
    *key = NULL;
    *val = NULL;
    if (store_recv_all(c->fd, h, sizeof *h, deadline) || h->magic != STORE_MAGIC ||
        h->klen > STORE_KEY_MAX)
        return -1;
    if (c->rank < 0 && ((h->op != STORE_CHALLENGE && h->op != STORE_PROVE &&
                         h->op != STORE_HELLO_V1) || h->vlen))
        return -1;   /* strangers get nothing but the handshake */
    if (h->vlen > STORE_VAL_MAX) {
        /* A rank of another build, or a bug: say why, then drop it (the
         * value's bytes that follow cannot be skipped). */
        reply_err(c, "rank %d sent a store value of %llu bytes; the store takes at most %llu "
                  "(ranks of different builds?)", c->rank, (unsigned long long)h->vlen,
                  (unsigned long long)STORE_VAL_MAX);
        return -1;
    }
    *key = cdl_malloc(h->klen + 1);
    *val = cdl_malloc(h->vlen ? h->vlen : 1);
    if (!*key || !*val || store_recv_all(c->fd, *key, h->klen, deadline) ||
        store_recv_all(c->fd, *val, h->vlen, deadline)) {
        cdl_free(*key);
        cdl_free(*val);
        *key = NULL;
        *val = NULL;
        return -1;
    }
    (*key)[h->klen] = '\0';
    return 0;
}

/* The handshake's first half (store_proto.h): the server's nonce and its
 * proof of knowing the token. Anyone may ask; the answer proves nothing to
 * another connection (fresh nonces, a side of its own). */
static int do_challenge(conn *c, const store_req *h, const char *cnonce)
{
    store_server *s = c->srv;
    char answer[STORE_NONCE_HEX + STORE_PROOF_HEX + 1];
    if (c->challenged || h->klen != STORE_NONCE_HEX)
        return -1;
    c->challenged = 1;
    c->claim = h->arg;
    memcpy(c->cnonce, cnonce, STORE_NONCE_HEX + 1);
    if (store_nonce(c->snonce))
        return reply_err(c, "rank 0: %s", cdl_last_error()), -1;
    memcpy(answer, c->snonce, STORE_NONCE_HEX);
    store_proof(s->token, "server", (int)(c->claim >> 32), (int)(c->claim & 0xffffffffu),
                c->cnonce, c->snonce, answer + STORE_NONCE_HEX);
    return reply(c, 0, answer, STORE_NONCE_HEX + STORE_PROOF_HEX);
}

/* The second half: the client's proof, then its rank. */
static int do_prove(conn *c, const store_req *h, const char *proof)
{
    store_server *s = c->srv;
    int rank = (int)(c->claim & 0xffffffffu), world = (int)(c->claim >> 32);
    char want[STORE_PROOF_HEX + 1];
    if (!c->challenged)
        return -1;
    /* The client could not check our proof: its secret is not ours. A
     * fixed answer, the same for anyone (store_proto.h). */
    if (h->klen == 0)
        return reply_status_f(c, STORE_ST_AUTH, STORE_AUTH_FAILED, (long)geteuid()), -1;
    store_proof(s->token, "client", world, rank, c->cnonce, c->snonce, want);
    if (h->klen != STORE_PROOF_HEX || !dist_equal_ct(proof, want, STORE_PROOF_HEX))
        return reply_err(c, "the store at port %d refused the connection: wrong token (a "
                         "process of another job? every rank needs the same CDL_STORE_TOKEN)",
                         s->port), -1;
    if (world != s->world || rank < 0 || rank >= world)
        return reply_err(c, "the store serves WORLD_SIZE=%d but a client claims rank %d of %d",
                         s->world, rank, world), -1;
    pthread_mutex_lock(&s->mu);
    int st = s->state[rank], evicted = c->evicted;
    if (st == RANK_NEVER && !evicted) {
        s->state[rank] = RANK_CONNECTED;
        c->rank = rank;   /* no longer a stranger: never evicted from now on */
    }
    pthread_mutex_unlock(&s->mu);
    if (evicted)
        return -1;        /* its socket is shut down; the rank retries */
    if (st != RANK_NEVER)
        return reply_err(c, "rank %d connected to the store twice: two processes claim RANK=%d",
                         rank, rank), -1;
    return reply(c, 0, NULL, 0);
}

/* A stranger's request: the handshake, or the one of an earlier build. */
static int do_stranger(conn *c, const store_req *h, const char *key)
{
    if (h->op == STORE_CHALLENGE)
        return do_challenge(c, h, key);
    if (h->op == STORE_PROVE)
        return do_prove(c, h, key);
    return reply_err(c, "a rank of an earlier cdl build (it sends the store's secret in the "
                     "clear) connected to the store at port %d: every rank of a job must run "
                     "the same cdl release (cdl-train --version)", c->srv->port), -1;
}

static void *conn_main(void *arg)
{
    conn *c = arg;
    store_server *s = c->srv;
    int bye = 0;
    for (;;) {
        store_req h;
        char *key;
        void *val;
        if (read_request(c, &h, &key, &val))
            break;
        int rc = 0;
        if (c->rank < 0) {
            rc = do_stranger(c, &h, key);
        } else if (h.op == STORE_SET) {
            rc = do_set(c, key, val, h.vlen, (int)h.arg);
            key = NULL;
            val = NULL;
        } else if (h.op == STORE_GET) {
            rc = do_get(c, key, h.owner, h.arg);
        } else if (h.op == STORE_BARRIER) {
            rc = do_barrier(c, key, h.arg);
        } else if (h.op == STORE_BYE) {
            bye = 1;
            rc = -1;
        } else {
            rc = -1;
        }
        cdl_free(key);
        cdl_free(val);
        if (rc)
            break;
    }
    if (c->told && !bye)
        drain(c->fd);
    pthread_mutex_lock(&s->mu);
    if (c->rank >= 0 && s->state[c->rank] == RANK_CONNECTED)
        s->state[c->rank] = bye || s->stopping ? RANK_BYE : RANK_LOST;
    close(c->fd);   /* now: a dropped stranger sees EOF at once */
    c->fd = -1;
    c->done = 1;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

/* Joins finished connection threads (strangers come and go). Under mu. */
static void reap(store_server *s)
{
    for (conn **pp = &s->conns; *pp;) {
        conn *c = *pp;
        if (!c->done) {
            pp = &c->next;
            continue;
        }
        *pp = c->next;
        pthread_join(c->thread, NULL);
        cdl_free(c);
        s->nconns--;
    }
}

/* Makes room for one more stranger: when STORE_STRANGERS_MAX are waiting
 * for their handshake, the oldest is dropped (its thread sees EOF and
 * exits). Under mu. */
static void evict_stranger(store_server *s)
{
    conn *oldest = NULL;
    int n = 0;
    for (conn *c = s->conns; c; c = c->next)
        if (c->rank < 0 && !c->done && !c->evicted) {
            n++;
            if (!oldest || c->deadline <= oldest->deadline)
                oldest = c;
        }
    if (n >= STORE_STRANGERS_MAX && oldest) {
        oldest->evicted = 1;
        shutdown(oldest->fd, SHUT_RDWR);
    }
}

static void *accept_main(void *arg)
{
    store_server *s = arg;
    for (;;) {
        struct pollfd p[2] = {{.fd = s->lfd, .events = POLLIN}, {.fd = s->wake[0], .events = POLLIN}};
        if (poll(p, 2, -1) < 0) {
            if (errno == EINTR)
                continue;
            break;
        }
        if (p[1].revents)
            break;
        int fd = accept4(s->lfd, NULL, NULL, SOCK_CLOEXEC);
        if (fd < 0)
            continue;
        pthread_mutex_lock(&s->mu);
        reap(s);
        evict_stranger(s);
        /* Ranks' slots plus the strangers' quota, and room for evicted
         * strangers whose threads are on their way out. */
        conn *c = s->nconns < s->world + 2 * STORE_STRANGERS_MAX ? cdl_calloc(1, sizeof *c) : NULL;
        if (c) {
            *c = (conn){.srv = s, .fd = fd, .rank = -1, .next = s->conns,
                        .deadline = dist_now() + s->hello_s};
            if (pthread_create(&c->thread, NULL, conn_main, c) == 0) {
                s->conns = c;
                s->nconns++;
            } else {
                cdl_free(c);
                c = NULL;
            }
        }
        pthread_mutex_unlock(&s->mu);
        if (!c)
            close(fd);
    }
    return NULL;
}

/* ------------------------------------------------------------ lifetime */

store_server *store_server_start(const cdl_rank_info *info, const char *token, double hello_s)
{
    store_server *s = cdl_calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->world = info->world;
    s->port = info->master_port;
    s->hello_s = hello_s > 0 && hello_s <= 3600 ? hello_s : STORE_HELLO_S;
    snprintf(s->token, sizeof s->token, "%s", token);
    gethostname(s->host, sizeof s->host - 1);
    s->state = cdl_calloc((size_t)info->world, 1);
    s->lfd = -1;
    s->wake[0] = s->wake[1] = -1;
    if (!s->state)
        goto fail;
    const char *fdenv = getenv(CDL_ENV_STORE_FD);
    s->lfd = fdenv && *fdenv ? adopt_fd(info, fdenv) : bind_port(info, s->host, token, &s->port);
    if (s->lfd < 0 || pipe2(s->wake, O_CLOEXEC)) {
        if (s->lfd >= 0)
            cdl_error("rank 0: pipe2 failed: %s", strerror(errno));
        goto fail;
    }
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&s->cv, &ca);
    pthread_condattr_destroy(&ca);
    pthread_mutex_init(&s->mu, NULL);
    if (pthread_create(&s->acceptor, NULL, accept_main, s) != 0) {
        pthread_cond_destroy(&s->cv);
        pthread_mutex_destroy(&s->mu);
        cdl_error("rank 0: cannot start the store thread");
        goto fail;
    }
    return s;
fail:
    if (s->lfd >= 0)
        close(s->lfd);
    if (s->wake[0] >= 0) {
        close(s->wake[0]);
        close(s->wake[1]);
    }
    cdl_free(s->state);
    cdl_free(s);
    return NULL;
}

int store_server_port(const store_server *s)
{
    return s->port;
}

void store_server_stop(store_server *s, double timeout_s)
{
    if (!s)
        return;
    struct timespec dl = abs_deadline((uint64_t)(timeout_s * 1000));
    pthread_mutex_lock(&s->mu);
    /* A barrier every rank reached is answered to all of them, even by a
     * store stopped without lingering: otherwise a rank that passed it
     * with the others reads "lost the store" (a lost peer) instead of the
     * error rank 0 reports next. Replies are short writes; the bound only
     * covers a peer that stopped reading. */
    struct timespec grace = abs_deadline(STORE_REPLY_GRACE_MS);
    for (;;) {
        int owed = 0;
        for (barrier *b = s->barriers; b; b = b->next)
            owed += b->arrived == s->world;
        if (!owed || pthread_cond_timedwait(&s->cv, &s->mu, &grace) == ETIMEDOUT)
            break;
    }
    for (;;) {
        int connected = 0;
        for (int r = 0; r < s->world; r++)
            connected += s->state[r] == RANK_CONNECTED;
        if (!connected || pthread_cond_timedwait(&s->cv, &s->mu, &dl) == ETIMEDOUT)
            break;
    }
    s->stopping = 1;
    pthread_cond_broadcast(&s->cv);
    for (conn *c = s->conns; c; c = c->next)
        if (c->fd >= 0)
            shutdown(c->fd, SHUT_RDWR);
    pthread_mutex_unlock(&s->mu);
    (void)!write(s->wake[1], "x", 1);
    pthread_join(s->acceptor, NULL);
    while (s->conns) {
        conn *c = s->conns;
        s->conns = c->next;
        pthread_join(c->thread, NULL);
        cdl_free(c);
    }
    while (s->entries)
        drop(&s->entries);
    while (s->barriers) {
        barrier *b = s->barriers;
        s->barriers = b->next;
        cdl_free(b->name);
        cdl_free(b->in);
        cdl_free(b);
    }
    close(s->lfd);
    close(s->wake[0]);
    close(s->wake[1]);
    pthread_cond_destroy(&s->cv);
    pthread_mutex_destroy(&s->mu);
    cdl_free(s->state);
    cdl_free(s);
}
