/* The TCP store: strangers rejected, a taken port reported, every wait
 * bounded with the missing or lost ranks named. One forked process per rank. */
#include "testutil.h"
#include "dist_fork.h"

#include <poll.h>
#include <pthread.h>
#include <string.h>

#include <cdl/cdl.h>

#include "lib/dist/boot.h"
#include "lib/dist/contract.h"
#include "lib/dist/hmac.h"
#include "lib/dist/store.h"
#include "lib/dist/store_proto.h"
#include "lib/dist/util.h"

/* The server's wait for a client's hello (0 = its default): set before
 * run_world, so the forked ranks inherit it. */
static double hello_s;

static int raw_connect(int port);
static int raw_handshake(int fd, const char *token, int rank, int world, double deadline);

static store *open_store(double timeout, cdl_rank_info *info)
{
    if (cdl_rank_discover(info))
        return NULL;
    return store_open(info, NULL, timeout, hello_s);
}

static int expect_children_ok(int n, const int *status)
{
    for (int i = 0; i < n; i++)
        if (!WIFEXITED(status[i]) || WEXITSTATUS(status[i]) != 0)
            return -1;
    return 0;
}

/* Rank 1 first tries to get in as strangers, then joins for real. */
static int stranger_rank(int rank, int world, void *arg)
{
    (void)world;
    (void)arg;
    cdl_rank_info info;
    if (rank == 1) {
        if (cdl_rank_discover(&info))
            return 1;
        char token[300];
        CHILD_CHECK(store_token(&info, token, sizeof token) == 0, "%s", cdl_last_error());
        /* A wrong token: the client cannot check the store's proof, says
         * so without sending anything derived from its token, and the
         * store, a process of this account, answers that the
         * authentication failed: the rank fails at once, not at its
         * timeout (test_wrong_secret_fails_at_once). */
        CHILD_CHECK(store_probe("127.0.0.1", info.master_port, "not-the-token", 1, 2, 1) == -1,
                    "a wrong token was accepted");
        CHILD_CHECK(strstr(cdl_last_error(), "refused this rank: authentication failed"),
                    "error '%s'", cdl_last_error());
        /* What anyone could compute before: FNV-1a over the job id, uid,
         * world size and port (issue 13, item 1). */
        char old[512], oldtok[17];
        snprintf(old, sizeof old, "cdl-store|%s|%u|%d|%d", info.job_id, (unsigned)getuid(),
                 info.world, info.master_port);
        uint64_t h = 1469598103934665603ull;
        for (const char *p = old; *p; p++)
            h = (h ^ (unsigned char)*p) * 1099511628211ull;
        snprintf(oldtok, sizeof oldtok, "%016llx", (unsigned long long)h);
        CHILD_CHECK(store_probe("127.0.0.1", info.master_port, oldtok, 1, 2, 1) == -1,
                    "the computable token was accepted");
        /* The store listens on MASTER_ADDR (127.0.0.1) only, not on every
         * address of the host: 127.0.0.2 is this host too. */
        int fd2 = socket(AF_INET, SOCK_STREAM, 0);
        struct sockaddr_in other = {.sin_family = AF_INET,
                                    .sin_port = htons((uint16_t)info.master_port),
                                    .sin_addr.s_addr = htonl(0x7f000002)};
        CHILD_CHECK(fd2 >= 0 && connect(fd2, (struct sockaddr *)&other, sizeof other) != 0,
                    "the store accepts connections on 127.0.0.2");
        close(fd2);
        CHILD_CHECK(strstr(cdl_last_error(), "refused this rank: authentication failed"),
                    "error '%s'", cdl_last_error());
        /* A stranger that answers the challenge with a made-up proof. */
        int fd3 = raw_connect(info.master_port);
        CHILD_CHECK(fd3 >= 0, "connect");
        CHILD_CHECK(raw_handshake(fd3, "not-the-token", 1, 2, dist_now() + 10) == -1,
                    "a made-up proof was accepted");
        close(fd3);
        /* The handshake of earlier builds (the token in the clear) is
         * refused, even with the right token, naming the mismatch. */
        fd3 = raw_connect(info.master_port);
        store_req v1 = {STORE_MAGIC, STORE_HELLO_V1, (uint32_t)strlen(token), -1, 0,
                        2ull << 32 | 1};
        store_rep r = {0};
        char msg[512] = "";
        CHILD_CHECK(fd3 >= 0 && store_send_all(fd3, &v1, sizeof v1) == 0 &&
                    store_send_all(fd3, token, v1.klen) == 0 &&
                    store_recv_all(fd3, &r, sizeof r, dist_now() + 10) == 0 && r.status != 0 &&
                    r.vlen < sizeof msg &&
                    store_recv_all(fd3, msg, (size_t)r.vlen, dist_now() + 10) == 0,
                    "an old-style hello was not refused");
        CHILD_CHECK(strstr(msg, "earlier cdl build"), "reply '%s'", msg);
        close(fd3);
        CHILD_CHECK(store_probe("127.0.0.1", info.master_port, token, 7, 2, 10) == -1,
                    "rank 7 of 2 was accepted");
        CHILD_CHECK(strstr(cdl_last_error(), "rank 7 of 2"), "error '%s'", cdl_last_error());
        /* Not our protocol at all: the server drops it and goes on. */
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)info.master_port),
                                .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
        CHILD_CHECK(fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof a) == 0, "connect");
        const char junk[] = "GET / HTTP/1.0\r\n\r\n0123456789abcdef0123456789abcdef";
        (void)!write(fd, junk, sizeof junk);
        char c;
        CHILD_CHECK(read(fd, &c, 1) <= 0, "the server answered junk");   /* EOF or reset */
        close(fd);
    }
    store *s = open_store(10, &info);
    CHILD_CHECK(s, "%s", cdl_last_error());
    CHILD_CHECK(store_barrier(s, "after-strangers") == 0, "%s", cdl_last_error());
    /* A value set by rank 0 and read by rank 1, and back. */
    char key[16], buf[32];
    size_t len;
    snprintf(key, sizeof key, "from%d", rank);
    CHILD_CHECK(store_set(s, key, key, strlen(key) + 1, 1) == 0, "%s", cdl_last_error());
    snprintf(key, sizeof key, "from%d", 1 - rank);
    CHILD_CHECK(store_get(s, key, 1 - rank, buf, sizeof buf, &len) == 0, "%s", cdl_last_error());
    CHILD_CHECK(len == strlen(key) + 1 && !strcmp(buf, key), "got '%s'", buf);
    /* A second process claiming a connected rank is refused. */
    if (rank == 1) {
        char token[300];
        CHILD_CHECK(store_token(&info, token, sizeof token) == 0, "%s", cdl_last_error());
        CHILD_CHECK(store_probe("127.0.0.1", info.master_port, token, 0, 2, 10) == -1,
                    "a second rank 0 was accepted");
        CHILD_CHECK(strstr(cdl_last_error(), "twice"), "error '%s'", cdl_last_error());
    }
    CHILD_CHECK(store_barrier(s, "done") == 0, "%s", cdl_last_error());
    store_close(s);
    return 0;
}

static void test_stranger_rejected(void **state)
{
    (void)state;
    if (run_world(2, stranger_rank, NULL, guard_s(30)))
        fail_msg("stranger test failed");
}

/* A rank given another secret than the run's (a contract exported by
 * hand, or copied from another job or shell) used to take the run's store
 * for a stranger and look for it on the alternates until CDL_TIMEOUT (60 s
 * here: the guard would end the test first). The store answers its
 * refusal in the protocol's framing with its account, this one: the rank
 * fails at once, naming itself, the store's address and the secret to
 * check, never showing a secret. */
static int wrong_secret_rank(int rank, int world, void *arg)
{
    (void)world;
    (void)arg;
    cdl_rank_info info;
    CHILD_CHECK(cdl_rank_discover(&info) == 0, "%s", cdl_last_error());
    if (rank == 1) {
        char token[300], want[96];
        CHILD_CHECK(store_token(&info, token, sizeof token) == 0, "%s", cdl_last_error());
        setenv("CDL_STORE_TOKEN", "a-stale-secret-of-another-job", 1);
        store *bad = store_open(&info, NULL, 60, hello_s);
        const char *e = cdl_last_error();
        CHILD_CHECK(!bad, "a rank with another secret joined");
        snprintf(want, sizeof want, "rank 1: the store at 127.0.0.1:%d refused this rank: "
                 "authentication failed", info.master_port);
        CHILD_CHECK(strstr(e, want) && strstr(e, "CDL_STORE_TOKEN") &&
                        strstr(e, "copied from another job or shell") &&
                        !strstr(e, "a-stale-secret") && !strstr(e, token) &&
                        !strstr(e, "Nor did this run's store answer"),
                    "error '%s'", e);
        CHILD_CHECK(!cdl_dist_peer_lost(), "a refusal was taken for a lost peer");
        setenv("CDL_STORE_TOKEN", token, 1);
    }
    store *s = store_open(&info, NULL, 20, hello_s);
    CHILD_CHECK(s, "rank %d: %s", rank, cdl_last_error());
    CHILD_CHECK(store_barrier(s, "after-wrong-secret") == 0, "%s", cdl_last_error());
    store_close(s);
    return 0;
}

static void test_wrong_secret_fails_at_once(void **state)
{
    (void)state;
    if (run_world(2, wrong_secret_rank, NULL, guard_s(30)))
        fail_msg("wrong secret test failed");
}

/* The token is CDL_STORE_TOKEN; without one, only a world of one rank may
 * open a store, and the error for more says how to get a secret. */
static void test_token_from_env(void **state)
{
    (void)state;
    cdl_rank_info info = {.world = 2, .master_port = 1};
    char a[300];
    unsetenv("CDL_STORE_TOKEN");
    assert_int_equal(store_token(&info, a, sizeof a), -1);
    assert_non_null(strstr(cdl_last_error(), "CDL_STORE_TOKEN is not set but WORLD_SIZE=2"));
    assert_non_null(strstr(cdl_last_error(), "srun --cdl-ddp"));
    info.world = 1;
    assert_int_equal(store_token(&info, a, sizeof a), 0);
    setenv("CDL_STORE_TOKEN", "s3cret", 1);
    info.world = 2;
    assert_int_equal(store_token(&info, a, sizeof a), 0);
    assert_string_equal(a, "s3cret");
    unsetenv("CDL_STORE_TOKEN");
}

static int port_taken_rank(int rank, int world, void *arg)
{
    (void)rank;
    (void)world;
    cdl_rank_info info;
    store *s = open_store(5, &info);
    CHILD_CHECK(!s, "rank 0 served on a taken port");
    char want[64];
    snprintf(want, sizeof want, "MASTER_PORT %d on host", *(int *)arg);
    CHILD_CHECK(strstr(cdl_last_error(), want) && strstr(cdl_last_error(), "is in use"),
                "error '%s'", cdl_last_error());
    /* Under torchrun's static rendezvous the port is its agent's store. */
    CHILD_CHECK(!getenv("TORCHELASTIC_USE_AGENT_STORE") ||
                    (strstr(cdl_last_error(), "is the store of the torchrun that started this "
                                              "rank") &&
                     strstr(cdl_last_error(), "srun --ntasks-per-node=N --cdl-ddp")),
                "error '%s'", cdl_last_error());
    return 0;
}

/* Rank 0 alone, on a port another socket holds: fn checks its error. */
static void on_taken_port(int (*fn)(int rank, int world, void *arg))
{
    int port = 0, fd = listen_any(&port);
    assert_true(fd >= 0);
    int start[1] = {0}, status[1];
    run_opts o = {guard_s(30), 1, port};
    assert_int_equal(run_ranks(2, start, 1, fn, &port, &o, status), 0);
    close(fd);
    assert_int_equal(expect_children_ok(1, status), 0);
}

static void test_port_in_use(void **state)
{
    (void)state;
    on_taken_port(port_taken_rank);
}

/* Another account squats MASTER_PORT (and, with all, its alternates): a
 * process of uid nobody listens on 127.0.0.1 there and never answers. Its
 * pid, or -1 (not root: the test skips). */
static pid_t squat_as_nobody(const int *ports, int n)
{
    int ready[2];
    if (geteuid() != 0 || pipe(ready))
        return -1;
    pid_t pid = fork();
    if (pid == 0) {
        close(ready[0]);
        if (setgid(65534) || setuid(65534))
            _exit(1);
        for (int i = 0; i < n; i++) {
            int fd = socket(AF_INET, SOCK_STREAM, 0), one = 1;
            struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)ports[i]),
                                    .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
            /* SO_REUSEADDR as the store binds; a port it cannot take
             * (another test's socket there) makes the caller draw again. */
            if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) ||
                bind(fd, (struct sockaddr *)&a, sizeof a) || listen(fd, 64))
                _exit(1);
        }
        (void)!write(ready[1], "r", 1);
        for (;;)
            pause();
    }
    close(ready[1]);
    char c;
    ssize_t k = pid > 0 ? read(ready[0], &c, 1) : -1;
    close(ready[0]);
    if (k != 1 && pid > 0) {
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        return -2;
    }
    return pid;
}

typedef struct squat_case {
    int port, alt[STORE_ALT_PORTS], all;
    char log[64];
} squat_case;

static int squatted_rank(int rank, int world, void *arg)
{
    (void)world;
    squat_case *q = arg;
    cdl_rank_info info;
    CHILD_CHECK(cdl_rank_discover(&info) == 0, "%s", cdl_last_error());
    if (rank == 0)
        CHILD_CHECK(freopen(q->log, "w", stderr), "cannot open %s", q->log);
    store *s = store_open(&info, NULL, q->all ? 3 : 20, 1);
    if (q->all) {
        const char *e = cdl_last_error();
        CHILD_CHECK(!s, "rank %d: a store came up although every port is taken", rank);
        char want[128];
        snprintf(want, sizeof want, "MASTER_PORT %d on host", q->port);
        CHILD_CHECK(rank != 0 || (strstr(e, want) &&
                                  strstr(e, "is in use by a process of another account, "
                                            "uid 65534") &&
                                  strstr(e, "and so are the ports derived from the run's "
                                            "secret that the store would move to")),
                    "rank 0's error '%s'", e);
        snprintf(want, sizeof want, "(%d, %d, %d, %d, derived from the run's secret)", q->alt[0],
                 q->alt[1], q->alt[2], q->alt[3]);
        CHILD_CHECK(rank != 1 || (strstr(e, "did not answer its hello within 1 s") &&
                                  strstr(e, "Nor did this run's store answer") &&
                                  strstr(e, want)),
                    "rank 1's error '%s'", e);
        return 0;
    }
    CHILD_CHECK(s, "rank %d: %s", rank, cdl_last_error());
    CHILD_CHECK(store_barrier(s, "squat") == 0, "rank %d: %s", rank, cdl_last_error());
    store_close(s);
    if (rank == 0) {
        fflush(stderr);
        char text[2048] = "", want[160];
        FILE *f = fopen(q->log, "r");
        CHILD_CHECK(f, "cannot read %s", q->log);
        text[fread(text, 1, sizeof text - 1, f)] = '\0';
        fclose(f);
        snprintf(want, sizeof want, "MASTER_PORT %d on host", q->port);
        CHILD_CHECK(strstr(text, want) && strstr(text, "is in use by a process of another "
                                                       "account, uid 65534") &&
                        strstr(text, "the store listens on port") &&
                        strstr(text, "Tell the administrator"),
                    "rank 0 did not say where its store moved: '%s'", text);
    }
    return 0;
}

/* MASTER_PORT held by another account (a squatter, or another user's job
 * on the same hash): rank 0 used to fail the step. Now it moves to a port
 * derived from the run's secret, says so, and the ranks find it there (the
 * squatter never answers their hello); only when those are taken too does
 * the step fail, naming them. */
static void run_squatted(int all)
{
    squat_case q = {.all = all};
    unsetenv("SLURM_STEP_RESV_PORTS");
    /* The alternates lie near a free port, in the ephemeral range, where
     * tests running beside this one (make -j check) may hold one: draw
     * another free port then, a few times, before calling it a failure. */
    pid_t squatter = -2;
    for (int attempt = 0; attempt < 20 && squatter == -2; attempt++) {
        int tmp = listen_any(&q.port);
        assert_true(tmp >= 0);
        close(tmp);
        assert_int_equal(store_alt_ports("0123456789abcdef0123456789abcdef", q.port, q.alt),
                         STORE_ALT_PORTS);
        int ports[1 + STORE_ALT_PORTS] = {q.port, q.alt[0], q.alt[1], q.alt[2], q.alt[3]};
        squatter = squat_as_nobody(ports, all ? 1 + STORE_ALT_PORTS : 1);
    }
    if (squatter == -1)
        skip();
    if (squatter < 0)
        fail_msg("could not squat port %d (or its alternates) in 20 tries: in use already?",
                 q.port);
    snprintf(q.log, sizeof q.log, "/tmp/cdl-squat.XXXXXX");
    int fd = mkstemp(q.log);
    assert_true(fd >= 0);
    close(fd);
    int start[2] = {0, 1}, status[2];
    run_opts o = {guard_s(60), 1, q.port};
    int rc = run_ranks(2, start, 2, squatted_rank, &q, &o, status);
    kill(squatter, SIGKILL);
    waitpid(squatter, NULL, 0);
    unlink(q.log);
    assert_int_equal(rc, 0);
    assert_int_equal(expect_children_ok(2, status), 0);
}

static void test_squatted_port_moves(void **state)
{
    (void)state;
    run_squatted(0);
}

static void test_squatted_alternates_fail(void **state)
{
    (void)state;
    run_squatted(1);
}

/* The alternates: distinct, near MASTER_PORT, a function of the secret;
 * none when Slurm reserved the step's ports. */
static void test_alt_ports(void **state)
{
    (void)state;
    int a[STORE_ALT_PORTS], b[STORE_ALT_PORTS], top[STORE_ALT_PORTS];
    unsetenv("SLURM_STEP_RESV_PORTS");
    assert_int_equal(store_alt_ports("secret-a", 29500, a), STORE_ALT_PORTS);
    assert_int_equal(store_alt_ports("secret-b", 29500, b), STORE_ALT_PORTS);
    assert_int_equal(store_alt_ports("secret-a", 65535, top), STORE_ALT_PORTS);
    int same = 1;
    for (int i = 0; i < STORE_ALT_PORTS; i++) {
        assert_true(a[i] > 29500 && a[i] <= 29500 + STORE_ALT_SPAN);
        assert_true(top[i] < 65535 && top[i] >= 65535 - STORE_ALT_SPAN);
        for (int j = 0; j < i; j++)
            assert_int_not_equal(a[i], a[j]);
        same &= a[i] == b[i];
    }
    assert_false(same);
    setenv("SLURM_STEP_RESV_PORTS", "12000-12003", 1);
    assert_int_equal(store_alt_ports("secret-a", 12000, a), 0);
    unsetenv("SLURM_STEP_RESV_PORTS");
}

/* A plain srun step (or --mpi=pmi2) has no port for the store: the error
 * names the launches that need none. */
static void test_no_port_names_launches(void **state)
{
    (void)state;
    cdl_rank_info info = {.rank = 1, .world = 2, .local_world = 1, .nnodes = 2, .node_rank = 1};
    assert_null(store_open(&info, "t0ken", 1, 0));
    const char *e = cdl_last_error();
    if (!strstr(e, "rank 1: no MASTER_PORT") || !strstr(e, "srun --cdl-ddp"))
        fail_msg("%s", e);
#ifdef HAVE_PMIX
    if (!strstr(e, "srun --mpi=pmix (no port needed)"))
        fail_msg("the error does not name srun --mpi=pmix: %s", e);
#endif
}

/* Under torchrun's static rendezvous the taken port is its agent's store:
 * the error says so and what to run instead. */
static void test_port_of_torchrun_agent(void **state)
{
    (void)state;
    setenv("TORCHELASTIC_USE_AGENT_STORE", "True", 1);
    on_taken_port(port_taken_rank);
    unsetenv("TORCHELASTIC_USE_AGENT_STORE");
}

/* Rank 2 never starts: the barrier names it. */
static int missing_rank(int rank, int world, void *arg)
{
    (void)rank;
    (void)world;
    (void)arg;
    cdl_rank_info info;
    store *s = open_store(1, &info);
    CHILD_CHECK(s, "%s", cdl_last_error());
    CHILD_CHECK(store_barrier(s, "b") == -1, "barrier passed without rank 2");
    CHILD_CHECK(strstr(cdl_last_error(), "rank 2 did not arrive") &&
                strstr(cdl_last_error(), "never connected"), "error '%s'", cdl_last_error());
    CHILD_CHECK(store_get(s, "2/x", 2, NULL, 0, NULL) == -1, "got a value nobody set");
    CHILD_CHECK(strstr(cdl_last_error(), "of rank 2, which never connected"), "error '%s'",
                cdl_last_error());
    store_close(s);
    return 0;
}

static void test_missing_rank_named(void **state)
{
    (void)state;
    int start[2] = {0, 1}, status[2];
    run_opts o = {guard_s(30), 0, 0};
    assert_int_equal(run_ranks(3, start, 2, missing_rank, NULL, &o, status), 0);
    assert_int_equal(expect_children_ok(2, status), 0);
}

/* Rank 0 never starts: connecting gives up after the timeout. */
static int no_server_rank(int rank, int world, void *arg)
{
    (void)rank;
    (void)world;
    (void)arg;
    cdl_rank_info info;
    store *s = open_store(1, &info);
    CHILD_CHECK(!s, "connected to nobody");
    CHILD_CHECK(strstr(cdl_last_error(), "could not reach the store of rank 0 at 127.0.0.1"),
                "error '%s'", cdl_last_error());
    return 0;
}

static void test_rank0_absent(void **state)
{
    (void)state;
    int start[1] = {1}, status[1];
    run_opts o = {guard_s(30), 1, 0};
    assert_int_equal(run_ranks(2, start, 1, no_server_rank, NULL, &o, status), 0);
    assert_int_equal(expect_children_ok(1, status), 0);
}

/* store_open_stop's stop: what cdl_train_run's SIGTERM handler sets. */
static volatile int stop_asked;

static int asked_to_stop(void)
{
    return stop_asked;
}

/* Rank 0 of 2 alone (rank 1 never comes), asked to stop as it waits in the
 * bootstrap's first barrier: it leaves the barrier at once, naming itself
 * and the barrier, and no peer counts as lost (cdl-train would exit 76).
 * It waited out its 300 s timeout before (the guard fails the test). */
static int stopped_in_barrier(int rank, int world, void *arg)
{
    (void)world;
    (void)arg;
    cdl_rank_info info;
    CHILD_CHECK(cdl_rank_discover(&info) == 0, "%s", cdl_last_error());
    store *s = store_open_stop(&info, NULL, 0, 300, hello_s, asked_to_stop);
    CHILD_CHECK(s, "%s", cdl_last_error());
    CHILD_CHECK(rank == 0, "rank %d", rank);
    stop_asked = 1;
    CHILD_CHECK(store_barrier(s, "fence0") == -1, "the barrier passed without rank 1");
    CHILD_CHECK(strstr(cdl_last_error(), "rank 0 was asked to stop while it waited in barrier "
                       "'fence0' (the TCP store at 127.0.0.1:"), "error '%s'", cdl_last_error());
    CHILD_CHECK(!cdl_dist_peer_lost(), "a stop was taken for a lost peer");
    CHILD_CHECK(store_get(s, "1/x", 1, NULL, 0, NULL) == -1, "the store went on after a stop");
    store_linger_off(s);
    store_close(s);
    return 0;
}

static void test_stop_leaves_barrier(void **state)
{
    (void)state;
    int start[1] = {0}, status[1];
    run_opts o = {guard_s(60), 0, 0};
    assert_int_equal(run_ranks(2, start, 1, stopped_in_barrier, NULL, &o, status), 0);
    assert_int_equal(expect_children_ok(1, status), 0);
}

/* Rank 1 asked to stop while rank 0's store is not there yet: it stops
 * retrying at once instead of after its 300 s timeout. Without a stop
 * function (a program that installs no handler) nothing changes: the
 * other tests open their stores so. */
static int stopped_connecting(int rank, int world, void *arg)
{
    (void)rank;
    (void)world;
    (void)arg;
    cdl_rank_info info;
    CHILD_CHECK(cdl_rank_discover(&info) == 0, "%s", cdl_last_error());
    stop_asked = 1;
    CHILD_CHECK(!store_open_stop(&info, NULL, 0, 300, hello_s, asked_to_stop),
                "connected to nobody");
    CHILD_CHECK(strstr(cdl_last_error(), "rank 1 was asked to stop while connecting to the store "
                       "of rank 0"), "error '%s'", cdl_last_error());
    CHILD_CHECK(!cdl_dist_peer_lost(), "a stop was taken for a lost peer");
    return 0;
}

static void test_stop_leaves_connect(void **state)
{
    (void)state;
    int start[1] = {1}, status[1];
    run_opts o = {guard_s(60), 1, 0};
    assert_int_equal(run_ranks(2, start, 1, stopped_connecting, NULL, &o, status), 0);
    assert_int_equal(expect_children_ok(1, status), 0);
}

/* What boot.c publishes first: the rank's release and host, here
 * "node-<rank>" (SLURMD_NODENAME), so that messages can name the host. */
static int publish_host(store *s, int rank)
{
    char node[32], key[32];
    boot_release me;
    snprintf(node, sizeof node, "node-%d", rank);
    setenv("SLURMD_NODENAME", node, 1);
    boot_release_of(&me, cdl_version());
    snprintf(key, sizeof key, "%d/cdl.release", rank);
    return store_set(s, key, &me, sizeof me, 0);
}

/* Rank 2 dies without saying goodbye: waits fail at once, naming it and
 * its host (the user excludes or reports that node). */
static int lost_rank(int rank, int world, void *arg)
{
    (void)world;
    (void)arg;
    cdl_rank_info info;
    store *s = open_store(300, &info);
    CHILD_CHECK(s, "%s", cdl_last_error());
    CHILD_CHECK(publish_host(s, rank) == 0, "%s", cdl_last_error());
    CHILD_CHECK(store_barrier(s, "all-here") == 0, "%s", cdl_last_error());
    if (rank == 2)
        raise(SIGKILL);
    CHILD_CHECK(store_barrier(s, "after") == -1, "barrier passed without rank 2");
    CHILD_CHECK(strstr(cdl_last_error(), "rank 2 on node-2 lost its connection"), "error '%s'",
                cdl_last_error());
    CHILD_CHECK(store_get(s, "2/x", 2, NULL, 0, NULL) == -1, "got a value nobody set");
    CHILD_CHECK(strstr(cdl_last_error(), "rank 2 on node-2 lost its connection"), "error '%s'",
                cdl_last_error());
    /* A lost peer, not an error of its own: cdl-train exits 76 (requeued). */
    CHILD_CHECK(cdl_dist_peer_lost(), "rank %d: the loss of rank 2 is not recorded", rank);
    store_close(s);
    return 0;
}

static void test_lost_rank_named(void **state)
{
    (void)state;
    int start[3] = {0, 1, 2}, status[3];
    run_opts o = {guard_s(10), 0, 0};
    assert_int_equal(run_ranks(3, start, 3, lost_rank, NULL, &o, status), 0);
    assert_int_equal(expect_children_ok(2, status), 0);
    assert_true(WIFSIGNALED(status[2]));
}

/* Rank 2's node stops answering (its connection stays open): the waits of
 * the others time out naming rank 2 and its host. Rank 2 waits in another
 * barrier instead. The waits have no time (store_linger_off sets the
 * store's timeout to 0), so a slow host (valgrind) changes nothing but
 * which ranks are named with rank 2. */
static int silent_rank(int rank, int world, void *arg)
{
    (void)world;
    (void)arg;
    cdl_rank_info info;
    store *s = open_store(30, &info);
    CHILD_CHECK(s, "%s", cdl_last_error());
    CHILD_CHECK(publish_host(s, rank) == 0, "%s", cdl_last_error());
    CHILD_CHECK(store_barrier(s, "all-here") == 0, "%s", cdl_last_error());
    store_linger_off(s);
    CHILD_CHECK(store_barrier(s, rank == 2 ? "elsewhere" : "here") == -1, "barrier passed");
    if (rank != 2) {
        /* "rank 2 (on node-2) did not arrive", or "ranks 1, 2 (on node-1,
         * node-2) ..." when rank 1 had not come yet either */
        CHILD_CHECK(strstr(cdl_last_error(), " 2 (on ") &&
                    strstr(cdl_last_error(), "node-2) did not arrive"), "error '%s'",
                    cdl_last_error());
        CHILD_CHECK(cdl_dist_peer_lost(), "rank %d: the silence of rank 2 is not recorded", rank);
    }
    store_close(s);
    return 0;
}

static void test_silent_rank_named(void **state)
{
    (void)state;
    int start[3] = {0, 1, 2}, status[3];
    run_opts o = {guard_s(30), 0, 0};
    assert_int_equal(run_ranks(3, start, 3, silent_rank, NULL, &o, status), 0);
    assert_int_equal(expect_children_ok(3, status), 0);
}

/* Rank 0 stops its store on an error of its own (it says why and exits 1):
 * rank 1's wait fails, but no peer was lost, so cdl-train exits 1 there
 * too and a job script does not requeue a run that would fail again. */
static int stopped_rank(int rank, int world, void *arg)
{
    (void)world;
    (void)arg;
    cdl_rank_info info;
    store *s = open_store(300, &info);
    CHILD_CHECK(s, "%s", cdl_last_error());
    CHILD_CHECK(store_barrier(s, "all-here") == 0, "%s", cdl_last_error());
    if (rank == 0) {
        store_linger_off(s);   /* as a broken cdl_dist is destroyed */
        store_close(s);
        CHILD_CHECK(!cdl_dist_peer_lost(), "rank 0 recorded a lost peer");
        return 0;
    }
    char c;
    CHILD_CHECK(store_get(s, "never-set", 0, &c, 1, NULL) == -1, "got a value never set");
    /* Told by the store, or its connection closed as rank 0 exited. */
    CHILD_CHECK(strstr(cdl_last_error(), "rank 0 stopped its store") ||
                strstr(cdl_last_error(), "lost the store"), "error '%s'", cdl_last_error());
    CHILD_CHECK(!cdl_dist_peer_lost(), "rank 0's own stop recorded as a lost peer: %s",
                cdl_last_error());
    store_close(s);
    return 0;
}

static void test_stopped_store_not_lost(void **state)
{
    (void)state;
    int start[2] = {0, 1}, status[2];
    run_opts o = {guard_s(30), 0, 0};
    assert_int_equal(run_ranks(2, start, 2, stopped_rank, NULL, &o, status), 0);
    assert_int_equal(expect_children_ok(2, status), 0);
}

/* Rank 2 runs another cdl release (a $HOME install on one node): the
 * bootstrap refuses on rank 0 and on rank 2, naming both releases; rank 1,
 * of rank 0's release, gets through the check (and finds rank 0 gone). */
static int release_rank(int rank, int world, void *arg)
{
    (void)world;
    (void)arg;
    cdl_rank_info info;
    CHILD_CHECK(cdl_rank_discover(&info) == 0, "%s", cdl_last_error());
    boot *b = boot_open_as(&info, 30, 0, rank == 2 ? "9.9.9" : cdl_version());
    if (rank == 1) {
        CHILD_CHECK(b, "rank 1 refused: %s", cdl_last_error());
        boot_close(b);
        return 0;
    }
    CHILD_CHECK(!b, "rank %d trained on with another release", rank);
    char want[128];
    snprintf(want, sizeof want, "runs cdl 9.9.9 (rank contract %d)", CDL_CONTRACT_VERSION);
    CHILD_CHECK(strstr(cdl_last_error(), "rank 2 (on ") && strstr(cdl_last_error(), want) &&
                strstr(cdl_last_error(), " but rank 0 (on ") &&
                strstr(cdl_last_error(), cdl_version()) &&
                strstr(cdl_last_error(), "same cdl release"), "error '%s'", cdl_last_error());
    return 0;
}

static void test_release_mismatch_named(void **state)
{
    (void)state;
    assert_int_equal(run_world(3, release_rank, NULL, guard_s(30)), 0);
}

/* The refusal names both builds (cdl_build_id) beside the releases, so
 * that two installs of one version are told apart; a record of an earlier
 * build (nothing after the release) or with odd bytes there names none. */
static void test_release_builds_named(void **state)
{
    (void)state;
    boot_release me, other;
    boot_release_of(&me, "0.1.0");
    boot_release_of(&other, "0.2.0");
    snprintf(other.host, sizeof other.host, "n7");
    size_t n = strlen(other.release);
    snprintf(other.release + n + 1, sizeof other.release - n - 1, "v0.2.0-3-gdeadbee");
    assert_string_equal(boot_release_build(&other), "v0.2.0-3-gdeadbee");
    assert_int_equal(boot_release_compare(0, &me, 2, &other), -1);
    const char *e = cdl_last_error();
    if (!strstr(e, "rank 2 (on n7) runs cdl 0.2.0 (rank contract") ||
        !strstr(e, ") (build v0.2.0-3-gdeadbee) but rank 0 (on "))
        fail_msg("error '%s'", e);
    if (*cdl_build_id() && !strstr(e, cdl_build_id()))
        fail_msg("error '%s' does not name this build %s", e, cdl_build_id());
    /* Same release, another build: they agree. */
    boot_release_of(&other, "0.1.0");
    n = strlen(other.release);
    snprintf(other.release + n + 1, sizeof other.release - n - 1, "other-build");
    assert_int_equal(boot_release_compare(1, &me, 0, &other), 0);
    /* An earlier build's record, or control bytes: no build named. */
    memset(other.release + n + 1, 0, sizeof other.release - n - 1);
    assert_string_equal(boot_release_build(&other), "");
    snprintf(other.release + n + 1, sizeof other.release - n - 1, "x\033]0;");
    assert_string_equal(boot_release_build(&other), "");
    /* Another rank's host and release reach the log without their control
     * bytes (a terminal's escapes). */
    boot_release_of(&other, "0.2.0\033[2J");
    snprintf(other.host, sizeof other.host, "n\0337\n");
    assert_int_equal(boot_release_compare(0, &me, 2, &other), -1);
    e = cdl_last_error();
    if (strchr(e, '\033') || strchr(e, '\n') || !strstr(e, "(on n?7?) runs cdl 0.2.0?[2J"))
        fail_msg("error '%s'", e);
}

/* A rank 0 of a build before the challenge-response handshake
 * (store_proto.h): its store closes the connection at the new hello
 * (unread bytes: a reset) and answers the old one (the token as key) with
 * "wrong token". The new rank must stop at once naming the mismatch, not
 * retry until CDL_TIMEOUT and say it lost the store, and never send the
 * secret. */
struct old_server {
    int lfd, conns;
    int got_secret;
};

static void *old_server_main(void *arg)
{
    struct old_server *o = arg;
    for (;;) {
        struct pollfd p = {.fd = o->lfd, .events = POLLIN};
        if (poll(&p, 1, 5000) != 1)
            break;   /* the client gave up: no more connections */
        int fd = accept(o->lfd, NULL, NULL);
        if (fd < 0)
            break;
        o->conns++;
        store_req h;
        double deadline = dist_now() + 10;
        if (store_recv_all(fd, &h, sizeof h, deadline) == 0 && h.op == STORE_HELLO_V1 &&
            h.klen < 256) {
            char key[256] = "";
            (void)!store_recv_all(fd, key, h.klen, deadline);
            o->got_secret |= strstr(key, "secret") != NULL;
            static const char msg[] = "the store at port 1 refused the connection: wrong "
                                      "token (a process of another job? every rank needs the "
                                      "same CDL_STORE_TOKEN or CDL_JOB_ID)";
            store_rep r = {STORE_MAGIC, STORE_ST_ERR, sizeof msg - 1};
            (void)!store_send_all(fd, &r, sizeof r);
            (void)!store_send_all(fd, msg, sizeof msg - 1);
        }
        close(fd);
        if (o->conns >= 50)
            break;   /* retrying: the client did not recognise it */
    }
    return NULL;
}

static void test_old_store_named(void **state)
{
    (void)state;
    struct old_server o = {0};
    int port = 0;
    o.lfd = listen_any(&port);
    assert_true(o.lfd >= 0);
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, old_server_main, &o), 0);
    int rc = store_probe("127.0.0.1", port, "the-run-secret", 1, 2, 20);
    char err[1024];
    snprintf(err, sizeof err, "%s", cdl_last_error());
    shutdown(o.lfd, SHUT_RDWR);
    pthread_join(t, NULL);
    close(o.lfd);
    assert_int_equal(rc, -1);
    if (!strstr(err, "is of an earlier cdl build") || !strstr(err, cdl_version()) ||
        !strstr(err, "same cdl release") || strstr(err, "lost the store"))
        fail_msg("error '%s' (after %d connections)", err, o.conns);
    /* The new hello twice (a store of this build may drop one stranger for
     * another), then the old one: no more retries. */
    assert_int_equal(o.conns, 3);
    assert_false(o.got_secret);
    assert_false(cdl_dist_peer_lost());
}

/* A value with readers=1 is gone after one get. */
static int readers_rank(int rank, int world, void *arg)
{
    (void)world;
    (void)arg;
    cdl_rank_info info;
    store *s = open_store(1, &info);
    CHILD_CHECK(s, "%s", cdl_last_error());
    int v = 42, got = 0;
    if (rank == 0)
        CHILD_CHECK(store_set(s, "once", &v, sizeof v, 1) == 0, "%s", cdl_last_error());
    CHILD_CHECK(store_barrier(s, "set") == 0, "%s", cdl_last_error());
    if (rank == 1)
        CHILD_CHECK(store_get(s, "once", 0, &got, sizeof got, NULL) == 0 && got == 42, "%s",
                    cdl_last_error());
    CHILD_CHECK(store_barrier(s, "read") == 0, "%s", cdl_last_error());
    if (rank == 0)
        CHILD_CHECK(store_get(s, "once", 0, &got, sizeof got, NULL) == -1 &&
                    strstr(cdl_last_error(), "timed out"), "value outlived its readers");
    store_close(s);
    return 0;
}

static void test_readers_drop_value(void **state)
{
    (void)state;
    if (run_world(2, readers_rank, NULL, guard_s(30)))
        fail_msg("readers test failed");
}

/* A raw TCP connection to the store on loopback (what a stranger opens). */
static int raw_connect(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        close(fd);
        fd = -1;
    }
    return fd;
}

/* 1 when the server has closed fd (EOF or reset), polling up to wait_s. */
static int closed_by_server(int fd, double wait_s)
{
    struct pollfd p = {.fd = fd, .events = POLLIN};
    char c;
    if (poll(&p, 1, (int)(wait_s * 1000)) != 1)
        return 0;
    return recv(fd, &c, 1, MSG_DONTWAIT) <= 0;
}

/* The client's side of the handshake by hand (store_proto.h), as rank of
 * world presenting token: 0 when the server accepted it. */
static int raw_handshake(int fd, const char *token, int rank, int world, double deadline)
{
    char cn[STORE_NONCE_HEX + 1], answer[STORE_NONCE_HEX + STORE_PROOF_HEX];
    char proof[STORE_PROOF_HEX + 1];
    store_rep r = {0};
    memset(cn, 'c', STORE_NONCE_HEX);
    cn[STORE_NONCE_HEX] = '\0';
    store_req h = {STORE_MAGIC, STORE_CHALLENGE, STORE_NONCE_HEX, -1, 0,
                   (uint64_t)world << 32 | (uint32_t)rank};
    if (store_send_all(fd, &h, sizeof h) || store_send_all(fd, cn, STORE_NONCE_HEX) ||
        store_recv_all(fd, &r, sizeof r, deadline) || r.status || r.vlen != sizeof answer ||
        store_recv_all(fd, answer, sizeof answer, deadline))
        return -1;
    store_proof(token, "client", world, rank, cn, answer, proof);
    store_req p = {STORE_MAGIC, STORE_PROVE, STORE_PROOF_HEX, -1, 0, 0};
    if (store_send_all(fd, &p, sizeof p) || store_send_all(fd, proof, STORE_PROOF_HEX) ||
        store_recv_all(fd, &r, sizeof r, deadline))
        return -1;
    return r.status == 0 && r.vlen == 0 ? 0 : -1;
}

/* The server's side by hand, for a fake store that knows token: 0 when the
 * client proved it knows it too. */
static int raw_serve_handshake(int fd, const char *token, double deadline)
{
    store_req h;
    char cn[STORE_NONCE_HEX + 1], proof[STORE_PROOF_HEX];
    char answer[STORE_NONCE_HEX + STORE_PROOF_HEX + 1], want[STORE_PROOF_HEX + 1];
    if (store_recv_all(fd, &h, sizeof h, deadline) || h.op != STORE_CHALLENGE ||
        h.klen != STORE_NONCE_HEX || store_recv_all(fd, cn, STORE_NONCE_HEX, deadline))
        return -1;
    cn[STORE_NONCE_HEX] = '\0';
    int world = (int)(h.arg >> 32), rank = (int)(h.arg & 0xffffffffu);
    memset(answer, 's', STORE_NONCE_HEX);
    store_proof(token, "server", world, rank, cn, answer, answer + STORE_NONCE_HEX);
    store_rep r = {STORE_MAGIC, 0, STORE_NONCE_HEX + STORE_PROOF_HEX};
    if (store_send_all(fd, &r, sizeof r) ||
        store_send_all(fd, answer, STORE_NONCE_HEX + STORE_PROOF_HEX) ||
        store_recv_all(fd, &h, sizeof h, deadline) || h.op != STORE_PROVE ||
        h.klen != STORE_PROOF_HEX || store_recv_all(fd, proof, STORE_PROOF_HEX, deadline))
        return -1;
    store_proof(token, "client", world, rank, cn, answer, want);
    r.vlen = 0;
    return memcmp(proof, want, STORE_PROOF_HEX) == 0 && store_send_all(fd, &r, sizeof r) == 0
               ? 0 : -1;
}

/* Rank 1 trickles a hello one byte every 50 ms: the whole-handshake
 * deadline (2 s here: room for valgrind) drops it although bytes keep
 * coming, then rank 1 joins for real. */
static int trickle_rank(int rank, int world, void *arg)
{
    (void)world;
    (void)arg;
    cdl_rank_info info;
    if (rank == 1) {
        CHILD_CHECK(cdl_rank_discover(&info) == 0, "%s", cdl_last_error());
        int fd = raw_connect(info.master_port);
        CHILD_CHECK(fd >= 0, "connect");
        store_req h = {STORE_MAGIC, STORE_CHALLENGE, STORE_KEY_MAX, -1, 0, 1ull << 32 | 1};
        unsigned char bytes[sizeof h + STORE_KEY_MAX];
        memcpy(bytes, &h, sizeof h);
        memset(bytes + sizeof h, 'x', STORE_KEY_MAX);
        size_t sent = 0;
        int dropped = 0;
        /* 280 bytes (the hello has 288) = 14 s of trickling: 7 times the
         * deadline. */
        while (sent < 280 && !(dropped = closed_by_server(fd, 0.05)))
            if (send(fd, bytes + sent++, 1, MSG_NOSIGNAL) != 1)
                dropped = 1;
        close(fd);
        CHILD_CHECK(dropped, "a stranger trickling %zu bytes was never dropped", sent);
    }
    store *s = open_store(10, &info);
    CHILD_CHECK(s, "%s", cdl_last_error());
    CHILD_CHECK(store_barrier(s, "after-trickle") == 0, "%s", cdl_last_error());
    store_close(s);
    return 0;
}

static void test_stranger_deadline(void **state)
{
    (void)state;
    hello_s = 2;
    int rc = run_world(2, trickle_rank, NULL, guard_s(60));
    hello_s = 0;
    if (rc)
        fail_msg("trickle test failed");
}

/* 40 strangers hold connections open (a generous deadline, so only the
 * quota can save the day): rank 1 still gets in, and the oldest strangers
 * are the ones dropped. */
enum { NSTRANGERS = 40 };

static int exhaust_rank(int rank, int world, void *arg)
{
    (void)world;
    (void)arg;
    cdl_rank_info info;
    int fds[NSTRANGERS];
    if (rank == 1) {
        CHILD_CHECK(cdl_rank_discover(&info) == 0, "%s", cdl_last_error());
        for (int i = 0; i < NSTRANGERS; i++) {
            fds[i] = raw_connect(info.master_port);
            CHILD_CHECK(fds[i] >= 0, "connect %d", i);
            CHILD_CHECK(send(fds[i], "C", 1, MSG_NOSIGNAL) == 1, "send %d", i);
        }
    }
    store *s = open_store(10, &info);
    CHILD_CHECK(s, "%s", cdl_last_error());
    if (rank == 1) {
        /* The quota keeps at most STORE_STRANGERS_MAX of them: wait (bounded)
         * until the server has closed the others. */
        int closed[NSTRANGERS] = {0}, nclosed = 0;
        double until = dist_now() + 10;
        while (nclosed < NSTRANGERS - STORE_STRANGERS_MAX && dist_now() < until) {
            struct pollfd p[NSTRANGERS];
            for (int i = 0; i < NSTRANGERS; i++)
                p[i] = (struct pollfd){.fd = closed[i] ? -1 : fds[i], .events = POLLIN};
            if (poll(p, NSTRANGERS, 100) > 0)
                for (int i = 0; i < NSTRANGERS; i++)
                    if (p[i].revents && closed_by_server(fds[i], 0)) {
                        closed[i] = 1;
                        nclosed++;
                    }
        }
        for (int i = 0; i < NSTRANGERS; i++)
            close(fds[i]);
        CHILD_CHECK(nclosed >= NSTRANGERS - STORE_STRANGERS_MAX,
                    "%d strangers kept a connection", NSTRANGERS - nclosed);
    }
    CHILD_CHECK(store_barrier(s, "after-exhaust") == 0, "%s", cdl_last_error());
    store_close(s);
    return 0;
}

static void test_strangers_cannot_exhaust(void **state)
{
    (void)state;
    hello_s = 60;
    int rc = run_world(2, exhaust_rank, NULL, guard_s(60));
    hello_s = 0;
    if (rc)
        fail_msg("exhaustion test failed");
}

/* A rank announcing a 16 GiB value is refused before rank 0 allocates it;
 * a client refuses to send one at all. */
static int huge_rank(int rank, int world, void *arg)
{
    (void)world;
    (void)arg;
    cdl_rank_info info;
    if (rank == 0) {
        store *s = open_store(10, &info);
        CHILD_CHECK(s, "%s", cdl_last_error());
        char c = 0;
        CHILD_CHECK(store_set(s, "big", &c, (size_t)STORE_VAL_MAX + 1, 0) == -1 &&
                    strstr(cdl_last_error(), "at most"), "an oversized value was sent: %s",
                    cdl_last_error());
        /* Rank 1 is dropped after its oversized request. */
        CHILD_CHECK(store_get(s, "never", 1, &c, 1, NULL) == -1 &&
                    strstr(cdl_last_error(), "rank 1 lost"), "error '%s'", cdl_last_error());
        store_close(s);
        return 0;
    }
    CHILD_CHECK(cdl_rank_discover(&info) == 0, "%s", cdl_last_error());
    char token[STORE_KEY_MAX + 1];
    store_token(&info, token, sizeof token);
    int fd = -1;
    double deadline = dist_now() + 10;
    store_rep r = {0};
    /* Rank 0 may not listen yet: retry the connection until it does. */
    while (fd < 0 && dist_now() < deadline) {
        fd = raw_connect(info.master_port);
        if (fd < 0)
            closed_by_server(-1, 0.05);   /* a 50 ms pause: poll on no fd */
    }
    CHILD_CHECK(fd >= 0, "connect");
    CHILD_CHECK(raw_handshake(fd, token, 1, 2, deadline) == 0, "hello refused");
    store_req set = {STORE_MAGIC, STORE_SET, 1, -1, 16ull << 30, 0};
    CHILD_CHECK(store_send_all(fd, &set, sizeof set) == 0 && store_send_all(fd, "k", 1) == 0,
                "send");
    CHILD_CHECK(store_recv_all(fd, &r, sizeof r, dist_now() + 10) == 0 && r.status == 1,
                "no refusal of a 16 GiB value");
    char msg[512] = "";
    size_t n = r.vlen < sizeof msg - 1 ? (size_t)r.vlen : sizeof msg - 1;
    CHILD_CHECK(store_recv_all(fd, msg, n, dist_now() + 10) == 0 && strstr(msg, "at most"),
                "reply '%s'", msg);
    close(fd);
    return 0;
}

static void test_value_length_capped(void **state)
{
    (void)state;
    if (run_world(2, huge_rank, NULL, guard_s(60)))
        fail_msg("value cap test failed");
}

/* A server that drops a client's first connection before answering its
 * hello (as the store drops the oldest stranger when its quota is full),
 * then accepts the second: the client retries and gets in. */
static void *drop_first_server(void *arg)
{
    int lfd = *(int *)arg, ok = 0;
    int fd = accept(lfd, NULL, NULL);
    if (fd >= 0)
        close(fd);
    /* A client that does not retry never comes back: bounded wait. */
    struct pollfd p = {.fd = lfd, .events = POLLIN};
    fd = poll(&p, 1, 10000) == 1 ? accept(lfd, NULL, NULL) : -1;
    if (fd >= 0)
        ok = raw_serve_handshake(fd, "tok", dist_now() + 10) == 0;
    if (fd >= 0)
        close(fd);
    return ok ? arg : NULL;
}

static void test_hello_retried(void **state)
{
    (void)state;
    int port = 0, lfd = listen_any(&port);
    assert_true(lfd >= 0);
    pthread_t t;
    void *served;
    assert_int_equal(pthread_create(&t, NULL, drop_first_server, &lfd), 0);
    int rc = store_probe("127.0.0.1", port, "tok", 1, 2, 10);
    const char *err = cdl_last_error();
    pthread_join(t, &served);
    close(lfd);
    if (rc != 0)
        fail_msg("the client did not retry after its first connection was dropped: %s", err);
    assert_non_null(served);
}

/* A port that takes connections but never answers (rank 0 stopped before
 * its store thread runs, holding the socket cdlrun handed it): the hello
 * fails at the client's timeout, not 40 s later, and the error never
 * shows the run's secret (it went into job logs). */
static void test_hello_unanswered(void **state)
{
    (void)state;
    int port = 0, lfd = listen_any(&port);
    assert_true(lfd >= 0);
    int rc = store_probe("127.0.0.1", port, "secret-token-1234", 1, 2, 1);
    const char *err = cdl_last_error();
    close(lfd);
    assert_int_equal(rc, -1);
    if (strstr(err, "secret-token-1234"))
        fail_msg("the error shows the store token: '%s'", err);
    if (!strstr(err, "did not answer its hello within 1 s"))
        fail_msg("error '%s'", err);
}

/* A process that took MASTER_PORT before rank 0 (another user's, say) and
 * answers like a store: the client must not hand it the run's secret, and
 * must not take its answers. answer_len: what the impostor's reply to the
 * first request carries (0: a bare OK; 96: a made-up nonce and proof). */
struct impostor {
    int lfd;
    size_t answer_len;
    const char *refusal;   /* answer "lost a peer" with this text instead */
    char got[4096];   /* every byte the client sent */
    size_t ngot;
};

static void *impostor_main(void *arg)
{
    struct impostor *im = arg;
    struct pollfd p = {.fd = im->lfd, .events = POLLIN};
    int fd = poll(&p, 1, 10000) == 1 ? accept(im->lfd, NULL, NULL) : -1;
    double deadline = dist_now() + 10;
    store_req h;
    if (fd < 0)
        return NULL;
    /* The first request, answered OK; then all that follows until EOF. */
    if (store_recv_all(fd, &h, sizeof h, deadline) == 0) {
        memcpy(im->got, &h, sizeof h);
        im->ngot = sizeof h;
        char answer[96];
        memset(answer, '0', sizeof answer);
        store_rep r = {STORE_MAGIC, 0, im->answer_len};
        if (im->refusal)
            r = (store_rep){STORE_MAGIC, STORE_ST_LOST, strlen(im->refusal)};
        (void)!store_send_all(fd, &r, sizeof r);
        (void)!store_send_all(fd, im->refusal ? im->refusal : answer, (size_t)r.vlen);
        for (;;) {
            p = (struct pollfd){.fd = fd, .events = POLLIN};
            if (poll(&p, 1, 2000) != 1 || im->ngot == sizeof im->got)
                break;
            ssize_t k = recv(fd, im->got + im->ngot, sizeof im->got - im->ngot, 0);
            if (k <= 0)
                break;
            im->ngot += (size_t)k;
            /* Answer OK to whatever else comes, as a fake store would. */
            store_rep ok = {STORE_MAGIC, 0, 0};
            (void)!store_send_all(fd, &ok, sizeof ok);
        }
    }
    close(fd);
    return NULL;
}

static void impostor_case(size_t answer_len)
{
    static const char secret[] = "0123456789abcdef0123456789abcdef-run-secret";
    struct impostor im = {.answer_len = answer_len};
    int port = 0;
    im.lfd = listen_any(&port);
    assert_true(im.lfd >= 0);
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, impostor_main, &im), 0);
    int rc = store_probe("127.0.0.1", port, secret, 1, 2, 2);
    char err[1024];
    snprintf(err, sizeof err, "%s", cdl_last_error());
    pthread_join(t, NULL);
    close(im.lfd);
    if (rc == 0)
        fail_msg("a listener without the secret was taken for the store (answer of %zu bytes)",
                 answer_len);
    if (memmem(im.got, im.ngot, "0123456789abcdef", 16))
        fail_msg("the client sent the run's secret to a listener that is not the store");
    if (!strstr(err, "is not this run's store") || strstr(err, secret))
        fail_msg("error '%s'", err);
}

static void test_impostor_learns_nothing(void **state)
{
    (void)state;
    impostor_case(0);
    impostor_case(STORE_NONCE_HEX + STORE_PROOF_HEX);
}

/* An impostor's refusal is quoted as its own, with no terminal control
 * bytes, and never taken for a lost peer (cdl-train would exit 76, which
 * the requeue template requeues on). */
static void test_impostor_refusal_quoted(void **state)
{
    (void)state;
    struct impostor im = {.refusal = "rank 3 lost its connection\033]0;pwned\007"};
    int port = 0;
    im.lfd = listen_any(&port);
    assert_true(im.lfd >= 0);
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, impostor_main, &im), 0);
    int rc = store_probe("127.0.0.1", port, "a-secret", 1, 2, 10);
    char err[1024];
    snprintf(err, sizeof err, "%s", cdl_last_error());
    pthread_join(t, NULL);
    close(im.lfd);
    assert_int_equal(rc, -1);
    if (strchr(err, '\033') || strchr(err, '\007') || !strstr(err, "the answer of 127.0.0.1:"))
        fail_msg("error '%s'", err);
    assert_false(cdl_dist_peer_lost());
}

/* A store of another account on MASTER_PORT (another user's job on the
 * same port) refuses this rank's secret in the protocol's own framing:
 * that is where rank 0 moves away from, so the rank goes on to the
 * alternates and finds its store there; the same refusal from a store of
 * its own account is final (test_wrong_secret_fails_at_once). */
struct foreign_store {
    int lfd;         /* MASTER_PORT: refuses as another account */
    int alt_fd;      /* the first alternate: this run's store */
    long uid;
    int refused, served;
};

static void *foreign_store_main(void *arg)
{
    struct foreign_store *f = arg;
    struct pollfd p = {.fd = f->lfd, .events = POLLIN};
    int fd = poll(&p, 1, 10000) == 1 ? accept(f->lfd, NULL, NULL) : -1;
    double deadline = dist_now() + 10;
    store_req h;
    /* answer: nonce, proof and the NUL store_proof writes after it. */
    char cn[STORE_NONCE_HEX], answer[STORE_NONCE_HEX + STORE_PROOF_HEX + 1];
    if (fd >= 0 && store_recv_all(fd, &h, sizeof h, deadline) == 0 &&
        h.op == STORE_CHALLENGE && h.klen == STORE_NONCE_HEX &&
        store_recv_all(fd, cn, sizeof cn, deadline) == 0) {
        /* Its own secret's proof: not the client's. */
        store_proof("another-users-secret", "server", 2, 1, "x", "y", answer + STORE_NONCE_HEX);
        memset(answer, 's', STORE_NONCE_HEX);
        store_rep r = {STORE_MAGIC, 0, STORE_NONCE_HEX + STORE_PROOF_HEX};
        char msg[96];
        if (store_send_all(fd, &r, sizeof r) == 0 &&
            store_send_all(fd, answer, STORE_NONCE_HEX + STORE_PROOF_HEX) == 0 &&
            store_recv_all(fd, &h, sizeof h, deadline) == 0 && h.op == STORE_PROVE && h.klen == 0) {
            snprintf(msg, sizeof msg, STORE_AUTH_FAILED, f->uid);
            r = (store_rep){STORE_MAGIC, STORE_ST_AUTH, strlen(msg)};
            f->refused = store_send_all(fd, &r, sizeof r) == 0 &&
                         store_send_all(fd, msg, strlen(msg)) == 0;
        }
    }
    if (fd >= 0)
        close(fd);
    /* Gone now: the rank's next try on MASTER_PORT is refused at once. */
    close(f->lfd);
    f->lfd = -1;
    p = (struct pollfd){.fd = f->alt_fd, .events = POLLIN};
    fd = poll(&p, 1, 10000) == 1 ? accept(f->alt_fd, NULL, NULL) : -1;
    if (fd >= 0) {
        f->served = raw_serve_handshake(fd, "the-run-secret", dist_now() + 10) == 0;
        close(fd);
    }
    return NULL;
}

static int listen_port(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (fd >= 0 && (bind(fd, (struct sockaddr *)&a, sizeof a) || listen(fd, 8))) {
        close(fd);
        fd = -1;
    }
    return fd;
}

static void test_foreign_store_refusal_moves_on(void **state)
{
    (void)state;
    struct foreign_store f = {.uid = (long)getuid() + 1};
    int port = 0, alt[STORE_ALT_PORTS];
    unsetenv("SLURM_STEP_RESV_PORTS");
    f.lfd = listen_any(&port);
    assert_true(f.lfd >= 0);
    assert_int_equal(store_alt_ports("the-run-secret", port, alt), STORE_ALT_PORTS);
    f.alt_fd = listen_port(alt[0]);
    if (f.alt_fd < 0) {
        close(f.lfd);
        skip();   /* the alternate is in use here */
    }
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, foreign_store_main, &f), 0);
    int rc = store_probe("127.0.0.1", port, "the-run-secret", 1, 2, 20);
    char err[1024];
    snprintf(err, sizeof err, "%s", cdl_last_error());
    pthread_join(t, NULL);
    if (f.lfd >= 0)
        close(f.lfd);
    close(f.alt_fd);
    assert_true(f.refused);
    if (rc != 0 || !f.served)
        fail_msg("the rank did not go on to the alternate %d after another account's store "
                 "refused it on %d: %s", alt[0], port, err);
}

/* The handshake's HMAC-SHA256 against RFC 4231 (test cases 1, 2 and 6: a
 * key longer than a block). */
static void test_hmac_vectors(void **state)
{
    (void)state;
    unsigned char mac[DIST_HMAC_LEN], key[131];
    char hex[2 * DIST_HMAC_LEN + 1];
    memset(key, 0x0b, 20);
    dist_hmac_sha256(key, 20, "Hi There", 8, mac);
    dist_hex(mac, sizeof mac, hex);
    assert_string_equal(hex, "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
    dist_hmac_sha256("Jefe", 4, "what do ya want for nothing?", 28, mac);
    dist_hex(mac, sizeof mac, hex);
    assert_string_equal(hex, "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
    static const char m6[] = "Test Using Larger Than Block-Size Key - Hash Key First";
    memset(key, 0xaa, sizeof key);
    dist_hmac_sha256(key, sizeof key, m6, sizeof m6 - 1, mac);
    dist_hex(mac, sizeof mac, hex);
    assert_string_equal(hex, "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
    assert_true(dist_equal_ct("abc", "abc", 3));
    assert_false(dist_equal_ct("abc", "abd", 3));
}

int main(void)
{
    clear_launcher_env();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stranger_rejected),
        cmocka_unit_test(test_wrong_secret_fails_at_once),
        cmocka_unit_test(test_foreign_store_refusal_moves_on),
        cmocka_unit_test(test_token_from_env),
        cmocka_unit_test(test_port_in_use),
        cmocka_unit_test(test_no_port_names_launches),
        cmocka_unit_test(test_port_of_torchrun_agent),
        cmocka_unit_test(test_missing_rank_named),
        cmocka_unit_test(test_rank0_absent),
        cmocka_unit_test(test_stop_leaves_barrier),
        cmocka_unit_test(test_stop_leaves_connect),
        cmocka_unit_test(test_lost_rank_named),
        cmocka_unit_test(test_silent_rank_named),
        cmocka_unit_test(test_release_builds_named),
        cmocka_unit_test(test_old_store_named),
        cmocka_unit_test(test_stopped_store_not_lost),
        cmocka_unit_test(test_release_mismatch_named),
        cmocka_unit_test(test_readers_drop_value),
        cmocka_unit_test(test_stranger_deadline),
        cmocka_unit_test(test_strangers_cannot_exhaust),
        cmocka_unit_test(test_value_length_capped),
        cmocka_unit_test(test_hello_retried),
        cmocka_unit_test(test_hello_unanswered),
        cmocka_unit_test(test_impostor_learns_nothing),
        cmocka_unit_test(test_impostor_refusal_quoted),
        cmocka_unit_test(test_hmac_vectors),
        cmocka_unit_test(test_squatted_port_moves),
        cmocka_unit_test(test_squatted_alternates_fail),
        cmocka_unit_test(test_alt_ports),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
