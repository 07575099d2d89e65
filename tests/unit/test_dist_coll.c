/* Collectives through the public API, one forked process per rank: shm on
 * 1-4 ranks and the hierarchical backend over two emulated nodes (shm plus
 * the TCP store between them). Results must equal a fixed-order reference
 * bit for bit on every rank; dead and missing ranks must fail the others
 * with their names, never hang. */
#include "testutil.h"
#include "dist_fork.h"

#include <dirent.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <string.h>

#include <cdl/cdl.h>

#include "lib/dist/dist_gpu.h"   /* dist_abort: how cdl-train gives up on its own */
#include "lib/dist/oversub.h"
#include "lib/dist/watchdog.h"

typedef struct coll_case {
    const char *backend;
    int nodes;               /* emulated nodes (block layout), 1 = one node */
    const size_t *sizes;
    int nsizes;
    const char *slab_kb;     /* CDL_SHM_SLAB_KB, NULL = default */
    const char *expect_name; /* cdl_dist_backend_name, NULL = do not check */
} coll_case;

/* The largest spans two rounds of the default slab (2 MB); under valgrind
 * (test_size) just over one, with a ragged second round all the same. */
static size_t big_sizes[] = {1, 1001, 62006, 1u << 20};
static const size_t small_sizes[] = {1, 17, 1001, 5003};

static cdl_dist *open_dist(const char *backend, double timeout)
{
    cdl_rank_info info;
    cdl_dist_config dc;
    /* The test is the edge: CDL_SHM_SLAB_KB as the cases set it. */
    if (cdl_rank_discover(&info) || cdl_dist_config_from_env(&dc))
        return NULL;
    dc.timeout_s = timeout;
    return cdl_dist_create_with(&info, backend, NULL, &dc);
}

/* The fixed order: flat, x0 + x1 + ...; over nodes, each node's sum in
 * local order, the node sums added in node order. */
static float reference(int world, int nodes, size_t i, int average)
{
    int per = world / (nodes > 1 ? nodes : 1);
    float total = 0;
    for (int g = 0; g < (nodes > 1 ? nodes : 1); g++) {
        float s = test_value(g * per, i);
        for (int l = 1; l < per; l++)
            s += test_value(g * per + l, i);
        total = g == 0 ? s : total + s;
    }
    return average ? total / (float)world : total;
}

static int allreduce_rank(int rank, int world, void *arg)
{
    const coll_case *c = arg;
    dist_set_nodes(rank, world, c->nodes);
    if (c->slab_kb)
        setenv("CDL_SHM_SLAB_KB", c->slab_kb, 1);
    cdl_dist *d = open_dist(c->backend, 30);
    CHILD_CHECK(d, "%s", cdl_last_error());
    if (c->expect_name)
        CHILD_CHECK(!strcmp(cdl_dist_backend_name(d), c->expect_name), "backend %s, expected %s",
                    cdl_dist_backend_name(d), c->expect_name);
    size_t maxn = 0;
    for (int k = 0; k < c->nsizes; k++)
        maxn = c->sizes[k] > maxn ? c->sizes[k] : maxn;
    float *buf = cdl_malloc(maxn * sizeof *buf);
    CHILD_CHECK(buf, "no memory");
    int bad = 0;
    for (int k = 0; k < c->nsizes && !bad; k++)
        for (int average = 0; average < 2 && !bad; average++) {
            size_t n = c->sizes[k];
            for (size_t i = 0; i < n; i++)
                buf[i] = test_value(rank, i);
            CHILD_CHECK(cdl_dist_allreduce(d, buf, n, average) == 0, "%s", cdl_last_error());
            for (size_t i = 0; i < n && !bad; i++) {
                float want = reference(world, c->nodes, i, average);
                if (memcmp(&buf[i], &want, sizeof want)) {
                    fprintf(stderr, "rank %d: n=%zu avg=%d: [%zu] = %.9g, want %.9g\n", rank, n,
                            average, i, buf[i], want);
                    bad = 1;
                }
            }
        }
    cdl_free(buf);
    /* f64 metrics: sums of small integers are exact. */
    double m[3] = {rank, 1, 0.5 * rank};
    CHILD_CHECK(cdl_dist_allreduce_f64(d, m, 3) == 0, "%s", cdl_last_error());
    double wsum = world * (world - 1) / 2.0;
    CHILD_CHECK(m[0] == wsum && m[1] == world && m[2] == 0.5 * wsum, "f64 %g %g %g", m[0], m[1],
                m[2]);
    cdl_dist_destroy(d);
    return bad;
}

static void run_case(const coll_case *c, int world)
{
    if (run_world(world, allreduce_rank, (void *)c, guard_s(60)))
        fail_msg("%s allreduce on %d ranks failed", c->backend, world);
}

static void test_allreduce_shm(void **state)
{
    (void)state;
    big_sizes[3] = (size_t)test_size(1L << 20, (1L << 19) + 1001);
    coll_case c = {"shm", 1, big_sizes, 4, NULL, NULL};
    for (int world = 1; world <= 4; world++) {
        c.expect_name = world == 1 ? "single" : "shm";
        run_case(&c, world);
    }
}

/* Buffers spanning many slabs, with ragged ends. */
static void test_allreduce_shm_small_slabs(void **state)
{
    (void)state;
    coll_case c = {"shm", 1, small_sizes, 4, "4", "shm"};
    run_case(&c, 3);
}

static void test_allreduce_hier_two_nodes(void **state)
{
    (void)state;
    coll_case c = {"auto", 2, small_sizes, 4, NULL, "hier:store"};
    run_case(&c, 4);
    coll_case one_per_node = {"hier:store", 2, small_sizes, 4, NULL, "hier:store"};
    run_case(&one_per_node, 2);
}

static void test_auto_one_node_is_shm(void **state)
{
    (void)state;
    coll_case c = {"auto", 1, small_sizes, 2, NULL, "shm"};
    run_case(&c, 2);
}

/* Broadcast (odd sizes, several slabs), barrier, allgather. */
static int others_rank(int rank, int world, void *arg)
{
    const coll_case *c = arg;
    dist_set_nodes(rank, world, c->nodes);
    if (c->slab_kb)
        setenv("CDL_SHM_SLAB_KB", c->slab_kb, 1);
    cdl_dist *d = open_dist(c->backend, 30);
    CHILD_CHECK(d, "%s", cdl_last_error());
    /* The largest spans slabs: 48 of the shm case's 64 KB and two of the
     * hier case's default 2 MB (under valgrind, test_size: 33 and two). */
    const size_t sizes[] = {1, 10007, (size_t)test_size(3L << 20, (2L << 20) + 10007)};
    unsigned char *b = cdl_malloc(sizes[2]);
    CHILD_CHECK(b, "no memory");
    for (int k = 0; k < 3; k++) {
        int root = (k + world - 1) % world;
        for (size_t i = 0; i < sizes[k]; i++)
            b[i] = rank == root ? (unsigned char)(i * 7 + k) : 0xee;
        CHILD_CHECK(cdl_dist_broadcast(d, b, sizes[k], root) == 0, "%s", cdl_last_error());
        for (size_t i = 0; i < sizes[k]; i++)
            CHILD_CHECK(b[i] == (unsigned char)(i * 7 + k), "broadcast from %d: byte %zu", root, i);
    }
    cdl_free(b);
    for (int k = 0; k < 5; k++)
        CHILD_CHECK(cdl_dist_barrier(d) == 0, "%s", cdl_last_error());
    char mine[13], all[64 * 13];
    for (int i = 0; i < 13; i++)
        mine[i] = (char)(rank * 13 + i);
    CHILD_CHECK(cdl_dist_allgather(d, mine, all, 13) == 0, "%s", cdl_last_error());
    for (int r = 0; r < world; r++)
        for (int i = 0; i < 13; i++)
            CHILD_CHECK(all[r * 13 + i] == (char)(r * 13 + i), "allgather: rank %d byte %d", r, i);
    cdl_dist_destroy(d);
    return 0;
}

static void test_broadcast_barrier_allgather(void **state)
{
    (void)state;
    coll_case shm = {"shm", 1, NULL, 0, "64", NULL};
    coll_case hier = {"hier", 2, NULL, 0, NULL, NULL};
    for (int world = 1; world <= 4; world++)
        if (run_world(world, others_rank, &shm, guard_s(60)))
            fail_msg("shm collectives on %d ranks failed", world);
    if (run_world(4, others_rank, &hier, guard_s(60)))
        fail_msg("hier collectives on 4 ranks failed");
}

/* Ops back to back in a varying order: no op may overwrite what a slower
 * member still reads of the previous one. */
static int mixed_rank(int rank, int world, void *arg)
{
    (void)arg;
    setenv("CDL_SHM_SLAB_KB", "64", 1);
    cdl_dist *d = open_dist("shm", 30);
    CHILD_CHECK(d, "%s", cdl_last_error());
    enum { N = 40000 };
    float *buf = cdl_malloc(N * sizeof *buf);
    int all[64];
    CHILD_CHECK(buf, "no memory");
    for (int it = 0; it < 600; it++) {
        size_t n = 1 + (size_t)(it * 7919) % N;
        /* A fixed pseudo-random order: every op follows every other. */
        uint64_t z = ((uint64_t)it + 1) * 0x9E3779B97F4A7C15ull;
        z = (z ^ (z >> 31)) * 0xBF58476D1CE4E5B9ull;
        int op = (int)((z >> 40) & 3), root = (int)((z >> 50) % (uint64_t)world);
        if (op == 0) {
            for (size_t i = 0; i < n; i++)
                buf[i] = test_value(rank, i + (size_t)it);
            CHILD_CHECK(cdl_dist_allreduce(d, buf, n, 0) == 0, "%s", cdl_last_error());
            for (size_t i = 0; i < n; i++) {
                float want = test_value(0, i + (size_t)it);
                for (int r = 1; r < world; r++)
                    want += test_value(r, i + (size_t)it);
                CHILD_CHECK(!memcmp(&want, &buf[i], sizeof want), "it %d allreduce [%zu]", it, i);
            }
        } else if (op == 1) {
            for (size_t i = 0; i < n; i++)
                buf[i] = rank == root ? (float)(i + (size_t)it) : -1;
            CHILD_CHECK(cdl_dist_broadcast(d, buf, n * sizeof *buf, root) == 0, "%s",
                        cdl_last_error());
            for (size_t i = 0; i < n; i++)
                CHILD_CHECK(buf[i] == (float)(i + (size_t)it), "it %d broadcast [%zu]", it, i);
        } else if (op == 2) {
            int mine = it * 100 + rank;
            CHILD_CHECK(cdl_dist_allgather(d, &mine, all, sizeof mine) == 0, "%s",
                        cdl_last_error());
            for (int r = 0; r < world; r++)
                CHILD_CHECK(all[r] == it * 100 + r, "it %d allgather [%d]", it, r);
        } else {
            CHILD_CHECK(cdl_dist_barrier(d) == 0, "%s", cdl_last_error());
        }
    }
    cdl_free(buf);
    cdl_dist_destroy(d);
    return 0;
}

static void test_mixed_sequence(void **state)
{
    (void)state;
    for (int world = 2; world <= 4; world++)
        if (run_world(world, mixed_rank, NULL, guard_s(60)))
            fail_msg("mixed sequence on %d ranks failed", world);
}

/* The segment is unlinked once everyone attached: nothing is left behind
 * in /dev/shm even if the job is killed. */
static int unlinked_rank(int rank, int world, void *arg)
{
    (void)world;
    (void)arg;
    cdl_dist *d = open_dist("shm", 30);
    CHILD_CHECK(d, "%s", cdl_last_error());
    /* Rank 0 unlinks before it reaches the barrier. */
    CHILD_CHECK(cdl_dist_barrier(d) == 0, "%s", cdl_last_error());
    const char *job = getenv("CDL_JOB_ID");
    DIR *dir = opendir("/dev/shm");
    CHILD_CHECK(dir, "no /dev/shm");
    struct dirent *e;
    int found = 0;
    while ((e = readdir(dir)))
        found += strstr(e->d_name, job) != NULL;
    closedir(dir);
    CHILD_CHECK(found == 0, "rank %d sees %d segment(s) of job %s", rank, found, job);
    cdl_dist_destroy(d);
    return 0;
}

static void test_segment_unlinked(void **state)
{
    (void)state;
    if (run_world(3, unlinked_rank, NULL, guard_s(30)))
        fail_msg("a segment was left in /dev/shm");
}

/* kill -9 of one rank: the others fail naming it, within 10 s. */
static int killed_rank(int rank, int world, void *arg)
{
    const coll_case *c = arg;
    dist_set_nodes(rank, world, c->nodes);
    cdl_dist *d = open_dist(c->backend, 300);
    CHILD_CHECK(d, "%s", cdl_last_error());
    if (rank == world - 1)
        raise(SIGKILL);
    float x[1000] = {0};
    int rc = 0;
    for (int step = 0; step < 1000 && rc == 0; step++)
        rc = cdl_dist_allreduce(d, x, 1000, 1);
    CHILD_CHECK(rc == -1, "allreduce went on without rank %d", world - 1);
    char want[32];
    snprintf(want, sizeof want, "rank %d", world - 1);
    CHILD_CHECK(strstr(cdl_last_error(), want), "error '%s' does not name %s", cdl_last_error(),
                want);
    fprintf(stderr, "(expected) %s\n", cdl_last_error());
    cdl_dist_destroy(d);
    return 0;
}

static void check_killed(const coll_case *c, int world)
{
    int start[8], status[8];
    for (int i = 0; i < world; i++)
        start[i] = i;
    run_opts o = {guard_s(10), 0, 0};
    assert_int_equal(run_ranks(world, start, world, killed_rank, (void *)c, &o, status), 0);
    for (int i = 0; i < world - 1; i++)
        assert_true(WIFEXITED(status[i]) && WEXITSTATUS(status[i]) == 0);
    assert_true(WIFSIGNALED(status[world - 1]) && WTERMSIG(status[world - 1]) == SIGKILL);
}

static void test_killed_rank_shm(void **state)
{
    (void)state;
    coll_case c = {"shm", 1, NULL, 0, NULL, NULL};
    check_killed(&c, 3);
}

static void test_killed_rank_hier(void **state)
{
    (void)state;
    coll_case c = {"hier:store", 2, NULL, 0, NULL, NULL};
    check_killed(&c, 4);
}

static int opened_segment;   /* this process opened a segment another member created */
static void stall_until(const char *dir);

/* shm_open as libcdl calls it: the real one, except that the rank named by
 * TEST_SHM_DIE_RANK is killed when it opens the segment another member
 * created, i.e. after the attach fence but before attaching, and the one
 * named by TEST_SHM_STALL_RANK stalls there (stall_until). */
int shm_open(const char *name, int flags, mode_t mode)
{
    const char *die = getenv("TEST_SHM_DIE_RANK"), *rank = getenv("RANK");
    const char *stall = getenv("TEST_SHM_STALL_RANK");
    if (die && rank && !strcmp(die, rank) && !(flags & O_CREAT))
        raise(SIGKILL);
    if (stall && rank && !strcmp(stall, rank) && !(flags & O_CREAT))
        stall_until(getenv("TEST_SHM_STALL_DIR"));
    opened_segment |= !(flags & O_CREAT);
    int (*real)(const char *, int, mode_t) =
        (int (*)(const char *, int, mode_t))dlsym(RTLD_NEXT, "shm_open");
    return real(name, flags, mode);
}

/* Counts /dev/shm entries whose name contains part. */
static int shm_entries(const char *part)
{
    DIR *dir = opendir("/dev/shm");
    int found = 0;
    struct dirent *e;
    while (dir && (e = readdir(dir)))
        found += strstr(e->d_name, part) != NULL;
    if (dir)
        closedir(dir);
    return found;
}

static int attach_dies_rank(int rank, int world, void *arg)
{
    (void)arg;
    setenv("TEST_SHM_DIE_RANK", "2", 1);
    cdl_dist *d = open_dist("shm", 300);
    CHILD_CHECK(!d, "rank %d: init succeeded without rank 2", rank);
    CHILD_CHECK(strstr(cdl_last_error(), "rank 2") && strstr(cdl_last_error(), "died"),
                "error '%s' does not say that rank 2 died", cdl_last_error());
    CHILD_CHECK(cdl_dist_peer_lost(), "rank %d: rank 2's death is not a lost peer", rank);
    fprintf(stderr, "(expected) %s\n", cdl_last_error());
    (void)world;
    return 0;
}

/* A rank killed before it attaches (it never wrote its pid into the
 * segment) is seen dead at once, not waited for until the 300 s timeout,
 * and the segment does not outlive the job. */
static void test_rank_dies_before_attaching(void **state)
{
    (void)state;
    int start[3] = {0, 1, 2}, status[3];
    run_opts o = {guard_s(20), 0, 0};
    assert_int_equal(run_ranks(3, start, 3, attach_dies_rank, NULL, &o, status), 0);
    for (int i = 0; i < 2; i++)
        assert_true(WIFEXITED(status[i]) && WEXITSTATUS(status[i]) == 0);
    assert_true(WIFSIGNALED(status[2]) && WTERMSIG(status[2]) == SIGKILL);
    char part[64];
    snprintf(part, sizeof part, "cdl-test-%d-", (int)getpid());
    assert_int_equal(shm_entries(part), 0);
}

/* A member that passed the attach fence but does not attach (stopped, or
 * slow): it says so ("stalled" in dir), then waits until the others are
 * done ("done") or 20 s, whichever comes first, and goes on attaching. */
static int file_in(const char *dir, const char *name)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    return access(path, F_OK) == 0;
}

static void touch_in(const char *dir, const char *name)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    int fd = open(path, O_CREAT | O_WRONLY, 0600);
    if (fd >= 0)
        close(fd);
}

static void stall_until(const char *dir)
{
    touch_in(dir, "stalled");
    for (double end = fork_now() + 20; !file_in(dir, "done") && fork_now() < end;)
        usleep(10000);
}

static const char *stall_dir;

/* The stalled member (rank 1 of 2) comes after rank 0 gave up on it and
 * removed the segment: an error saying the segment is gone, where it died
 * of SIGSEGV (the message read the members' ranks shm_attach had taken). */
static int late_opener_rank(int rank, int world, void *arg)
{
    (void)world;
    setenv("TEST_SHM_STALL_RANK", "1", 1);
    setenv("TEST_SHM_STALL_DIR", arg, 1);
    cdl_dist *d = open_dist("shm", 1);
    CHILD_CHECK(!d, "rank %d: init succeeded with rank 1 late", rank);
    const char *e = cdl_last_error();
    if (rank == 0) {
        CHILD_CHECK(strstr(e, "timed out") && strstr(e, "rank 1 did not arrive"), "error '%s'",
                    e);
        touch_in(arg, "done");
    } else {
        CHILD_CHECK(strstr(e, "rank 1: cannot open the shared memory") &&
                    strstr(e, "of rank 0: No such file or directory (gone: the other members "
                              "may have given up"), "error '%s'", e);
    }
    fprintf(stderr, "(expected) %s\n", e);
    return 0;
}

/* stall_dir's files, then the directory. */
static void remove_stall_dir(const char *dir)
{
    char path[512];
    const char *names[] = {"stalled", "done"};
    for (int i = 0; i < 2; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        unlink(path);
    }
    rmdir(dir);
}

static void test_late_member_cannot_open(void **state)
{
    (void)state;
    char dir[] = "/tmp/cdl-late-open.XXXXXX";
    assert_non_null(mkdtemp(dir));
    int start[2] = {0, 1}, status[2];
    run_opts o = {guard_s(60), 0, 0};
    int rc = run_ranks(2, start, 2, late_opener_rank, dir, &o, status);
    remove_stall_dir(dir);
    assert_int_equal(rc, 0);
    for (int i = 0; i < 2; i++)
        if (!WIFEXITED(status[i]) || WEXITSTATUS(status[i]) != 0)
            fail_msg("rank %d ended with status %#x", i, status[i]);
}

/* Rank 1's stop: asked once it waits in the attach (it opened the segment)
 * while rank 2 stalls before attaching: never earlier, in a fence. */
static int attach_stop(void)
{
    return opened_segment && file_in(stall_dir, "stalled");
}

static int attach_stopped_rank(int rank, int world, void *arg)
{
    (void)world;
    stall_dir = arg;
    setenv("TEST_SHM_STALL_RANK", "2", 1);
    setenv("TEST_SHM_STALL_DIR", stall_dir, 1);
    cdl_rank_info info;
    cdl_dist_config dc;
    CHILD_CHECK(cdl_rank_discover(&info) == 0 && cdl_dist_config_from_env(&dc) == 0, "%s",
                cdl_last_error());
    dc.timeout_s = 300;
    cdl_dist *d = cdl_dist_create_stoppable(&info, "shm", NULL, &dc,
                                            rank == 1 ? attach_stop : NULL);
    CHILD_CHECK(!d, "rank %d: init succeeded although rank 1 was asked to stop", rank);
    const char *e = cdl_last_error();
    if (rank == 2)   /* came after rank 0 unlinked the segment: it cannot open it */
        return 0;
    /* Rank 0 may not have arrived yet either (it reads the members' pids
     * after the fence): "ranks 0, 2". */
    CHILD_CHECK(strstr(e, "rank 1 was asked to stop while it waited on shared memory "
                          "(attaching to the segment): rank") &&
                (strstr(e, ": rank 2 did not arrive; it stopped waiting") ||
                 strstr(e, ": ranks 0, 2 did not arrive; it stopped waiting")),
                "rank %d: error '%s'", rank, e);
    /* Rank 1 lost nobody; to rank 0 it is gone, a restart gets past it. */
    CHILD_CHECK(cdl_dist_peer_lost() == (rank == 0), "rank %d: cdl_dist_peer_lost() is %d",
                rank, cdl_dist_peer_lost());
    CHILD_CHECK(strstr(e, "timed out") == NULL, "rank %d: waited out the timeout: '%s'", rank,
                e);
    if (rank == 0)
        touch_in(stall_dir, "done");
    fprintf(stderr, "(expected) %s\n", e);
    return 0;
}

/* A rank asked to stop (cdl_dist_create_stoppable) while a member of its
 * node passed the attach fence but never attaches leaves the attach at
 * once, and tells the others, instead of waiting out the 300 s timeout;
 * the member that comes later reads why. It waited until the timeout (or
 * succeeded, once the stalled rank went on after 20 s). */
static void test_stop_leaves_attach(void **state)
{
    (void)state;
    char dir[] = "/tmp/cdl-attach-stop.XXXXXX";
    assert_non_null(mkdtemp(dir));
    int start[3] = {0, 1, 2}, status[3];
    run_opts o = {guard_s(60), 0, 0};
    int rc = run_ranks(3, start, 3, attach_stopped_rank, dir, &o, status);
    remove_stall_dir(dir);
    assert_int_equal(rc, 0);
    for (int i = 0; i < 3; i++)
        if (!WIFEXITED(status[i]) || WEXITSTATUS(status[i]) != 0)
            fail_msg("rank %d ended with status %#x", i, status[i]);
}

/* A rank that never starts: init times out naming it. */
static int lonely_rank(int rank, int world, void *arg)
{
    (void)world;
    (void)arg;
    cdl_dist *d = open_dist("shm", 1);
    CHILD_CHECK(!d, "rank %d: init succeeded without rank 2", rank);
    CHILD_CHECK(strstr(cdl_last_error(), "rank 2") && strstr(cdl_last_error(), "did not arrive"),
                "error '%s' does not name rank 2", cdl_last_error());
    CHILD_CHECK(cdl_dist_peer_lost(), "rank %d: a rank that never came is not a lost peer", rank);
    fprintf(stderr, "(expected) %s\n", cdl_last_error());
    return 0;
}

static void test_missing_rank_times_out(void **state)
{
    (void)state;
    int start[2] = {0, 1}, status[2];
    run_opts o = {guard_s(30), 0, 0};
    assert_int_equal(run_ranks(3, start, 2, lonely_rank, NULL, &o, status), 0);
    for (int i = 0; i < 2; i++)
        assert_true(WIFEXITED(status[i]) && WEXITSTATUS(status[i]) == 0);
}

/* A wait with no timeout of its own (MPI_Init's fence, for one) under the
 * watchdog: when it never returns, the process ends with 76 (a lost peer)
 * and a line naming the wait, the rank and what to check. The child's wait
 * here is pause(), which only a signal ends; its stderr goes to a file. */
static int stuck_rank(int rank, int world, void *arg)
{
    (void)world;
    CHILD_CHECK(freopen((const char *)arg, "w", stderr), "cannot open %s", (const char *)arg);
    dist_watchdog *w = dist_watchdog_arm("MPI_Init_thread", 7, 0.2, "check the peers");
    CHILD_CHECK(w, "%s", cdl_last_error());
    /* A wait that returns in time is not ended. */
    dist_watchdog *ok = dist_watchdog_arm("a quick wait", rank, 600, "-");
    CHILD_CHECK(ok, "%s", cdl_last_error());
    dist_watchdog_disarm(ok);
    for (;;)
        pause();
    return 1;
}

/* Runs fn as the one rank of a forked child (a 30-s guard) with its stderr
 * in a temporary file; returns its wait status, its stderr in text. */
static int run_watched(rank_fn fn, char *text, size_t size)
{
    char log[] = "/tmp/cdl-watchdog.XXXXXX";
    int fd = mkstemp(log);
    assert_true(fd >= 0);
    close(fd);
    int start[1] = {0}, status[1];
    run_opts o = {guard_s(30), 0, 0};
    int rc = run_ranks(1, start, 1, fn, log, &o, status);
    text[0] = '\0';
    FILE *f = fopen(log, "r");
    if (f) {
        size_t n = fread(text, 1, size - 1, f);
        text[n] = '\0';
        fclose(f);
    }
    unlink(log);
    assert_int_equal(rc, 0);
    return status[0];
}

static void test_watchdog_ends_stuck_wait(void **state)
{
    (void)state;
    char text[1024];
    int status = run_watched(stuck_rank, text, sizeof text);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != CDL_EXIT_PEER_LOST)
        fail_msg("the stuck wait ended with status %#x, not exit %d: '%s'", status,
                 CDL_EXIT_PEER_LOST, text);
    if (!strstr(text, "cdl: rank 7: error: MPI_Init_thread did not return within 0 s "
                      "(CDL_TIMEOUT): check the peers; exiting with status 76"))
        fail_msg("stderr '%s'", text);
}

/* The same wait, the process asked to stop (cdl_train_run's SIGTERM while
 * MPI_Init waits for a rank that never comes): the watchdog sees it within
 * a tenth of a second and ends the process with the status it was given
 * (75 here, cdl-train's with --ckpt-dir), naming the wait, instead of
 * waiting out the timeout (600 s: the guard) and exiting 76. The stop is
 * asked after arming, from this thread, as a signal's handler would. */
static volatile sig_atomic_t stop_flag;

static int stop_flag_set(void)
{
    return stop_flag != 0;
}

static int stopped_rank(int rank, int world, void *arg)
{
    (void)world;
    (void)rank;
    CHILD_CHECK(freopen((const char *)arg, "w", stderr), "cannot open %s", (const char *)arg);
    dist_watchdog *w = dist_watchdog_arm_stop("MPI_Init_thread", 3, 600, "check the peers",
                                              stop_flag_set, CDL_EXIT_REQUEUE);
    CHILD_CHECK(w, "%s", cdl_last_error());
    stop_flag = 1;
    for (;;)
        pause();
    return 1;
}

static void test_watchdog_sees_stop(void **state)
{
    (void)state;
    char text[1024];
    int status = run_watched(stopped_rank, text, sizeof text);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != CDL_EXIT_REQUEUE)
        fail_msg("the stopped wait ended with status %#x, not exit %d: '%s'", status,
                 CDL_EXIT_REQUEUE, text);
    if (!strstr(text, "cdl: rank 3: error: rank 3 was asked to stop while it waited in "
                      "MPI_Init_thread (a signal: SIGTERM or SIGUSR1); it stopped waiting: "
                      "exiting with status 75"))
        fail_msg("stderr '%s'", text);
}

/* A rank that gives up on an error of its own (cdl-train's --ckpt-dir it
 * cannot make) stops the others at once, but lost no peer: they exit 1 as
 * it does, not 76, which job scripts requeue. */
static int own_error_rank(int rank, int world, void *arg)
{
    (void)world;
    (void)arg;
    cdl_dist *d = open_dist("shm", 60);
    CHILD_CHECK(d, "%s", cdl_last_error());
    if (rank == 0) {
        dist_abort(d, "cannot create --ckpt-dir x");
        cdl_dist_destroy(d);
        return 0;
    }
    CHILD_CHECK(cdl_dist_barrier(d) == -1, "rank %d: barrier passed without rank 0", rank);
    CHILD_CHECK(strstr(cdl_last_error(), "rank 0 gave up: cannot create --ckpt-dir x"),
                "error '%s'", cdl_last_error());
    CHILD_CHECK(!cdl_dist_peer_lost(), "rank %d: rank 0's own error counted as a lost peer",
                rank);
    cdl_dist_destroy(d);
    return 0;
}

static void test_own_error_not_lost(void **state)
{
    (void)state;
    int start[2] = {0, 1}, status[2];
    run_opts o = {guard_s(30), 0, 0};
    assert_int_equal(run_ranks(2, start, 2, own_error_rank, NULL, &o, status), 0);
    for (int i = 0; i < 2; i++)
        assert_true(WIFEXITED(status[i]) && WEXITSTATUS(status[i]) == 0);
}

/* A rank that was stopped (SIGSTOP, a swapped-out node) comes back after
 * the others gave up waiting for it: its error says who gave up and why,
 * not a timeout that reads as its own. The pipe orders the two ranks: rank
 * 1 arrives only once rank 0 has given up. */
static int late_rank(int rank, int world, void *arg)
{
    (void)world;
    int *fds = arg;
    char byte = 0;
    cdl_dist *d = open_dist("shm", 1);
    CHILD_CHECK(d, "%s", cdl_last_error());
    if (rank == 0) {
        CHILD_CHECK(cdl_dist_barrier(d) == -1, "rank 0: barrier passed without rank 1");
        CHILD_CHECK(write(fds[1], &byte, 1) == 1, "rank 0: write to the pipe");
    } else {
        CHILD_CHECK(read(fds[0], &byte, 1) == 1, "rank 1: read from the pipe");
        /* The barrier rank 0 gave up on may pass (rank 0 had arrived: a
         * collective that completed is not failed after the fact, so the
         * others still get the data an agreement check then explains);
         * the next one cannot. */
        int rc = cdl_dist_barrier(d);
        if (rc == 0)
            rc = cdl_dist_barrier(d);
        CHILD_CHECK(rc == -1, "rank 1: two barriers passed after rank 0 gave up");
        const char *e = cdl_last_error();
        CHILD_CHECK(strstr(e, "rank 1: rank 0 gave up: barrier") &&
                    strstr(e, "rank 1 did not arrive"), "error '%s'", e);
        fprintf(stderr, "(expected) %s\n", e);
    }
    cdl_dist_destroy(d);
    return 0;
}

static void test_late_rank_names_who_gave_up(void **state)
{
    (void)state;
    int fds[2], start[2] = {0, 1}, status[2];
    assert_int_equal(pipe(fds), 0);
    run_opts o = {guard_s(30), 0, 0};
    assert_int_equal(run_ranks(2, start, 2, late_rank, fds, &o, status), 0);
    close(fds[0]);
    close(fds[1]);
    for (int i = 0; i < 2; i++)
        assert_true(WIFEXITED(status[i]) && WEXITSTATUS(status[i]) == 0);
}

/* Two ranks claiming one local rank: init names both. */
static int duplicate_rank(int rank, int world, void *arg)
{
    (void)world;
    (void)arg;
    setenv("LOCAL_RANK", "0", 1);
    setenv("LOCAL_WORLD_SIZE", "2", 1);
    setenv("CDL_NNODES", "1", 1);
    cdl_dist *d = open_dist("shm", 10);
    CHILD_CHECK(!d, "rank %d: init accepted two LOCAL_RANK=0", rank);
    CHILD_CHECK(strstr(cdl_last_error(), "ranks 0 and 1 both have LOCAL_RANK=0"), "error '%s'",
                cdl_last_error());
    return 0;
}

static void test_duplicate_local_rank(void **state)
{
    (void)state;
    if (run_world(2, duplicate_rank, NULL, guard_s(30)))
        fail_msg("duplicate LOCAL_RANK not reported");
}

static void test_refused_backends(void **state)
{
    (void)state;
    cdl_rank_info info = {.rank = 0, .world = 2, .local_world = 2, .nnodes = 1,
                          .replicas_per_gpu = 1, .source = "contract"};
    assert_null(cdl_dist_create(&info, "carrier-pigeon", NULL, 1));
    assert_non_null(strstr(cdl_last_error(), "'carrier-pigeon'"));
    info.nnodes = 2;
    assert_null(cdl_dist_create(&info, "shm", NULL, 1));
    assert_non_null(strstr(cdl_last_error(), "one node"));
    /* NCCL reduces GPU memory: on the CPU backend it is refused before any
     * rank waits for another, with what to use instead. */
    assert_null(cdl_dist_create(&info, "nccl", NULL, 1));
    assert_non_null(strstr(cdl_last_error(), "needs the cuda backend (--device cuda)"));
    assert_non_null(strstr(cdl_last_error(), "use auto, shm, mpi or hier"));
    /* The same for hier's NCCL between GPUs (it failed in CUDA's setup). */
    assert_null(cdl_dist_create(&info, "hier:nccl", NULL, 1));
    assert_non_null(strstr(cdl_last_error(), "hier:nccl joins GPUs with NCCL"));
    assert_non_null(strstr(cdl_last_error(), "use auto, hier:mpi or hier:store"));
}

/* cdl_dist_config: read from the environment at the edge (a bad
 * CDL_TIMEOUT named), and a struct without a size refused. */
static void test_dist_config(void **state)
{
    (void)state;
    cdl_dist_config c;
    setenv("CDL_TIMEOUT", "7.5", 1);
    setenv("CDL_SHM_SLAB_KB", "64", 1);
    setenv("CDL_SHM_SPIN_US", "0", 1);
    setenv("CDL_STORE_HELLO_TIMEOUT", "2", 1);
    assert_int_equal(cdl_dist_config_from_env(&c), 0);
    assert_int_equal(c.size, sizeof c);
    assert_true(c.timeout_s == 7.5 && c.shm_spin_us == 0 && c.store_hello_s == 2);
    assert_int_equal(c.shm_slab_kb, 64);
    setenv("CDL_TIMEOUT", "soon", 1);
    assert_int_equal(cdl_dist_config_from_env(&c), -1);
    assert_non_null(strstr(cdl_last_error(), "CDL_TIMEOUT='soon'"));
    setenv("CDL_TIMEOUT", "1", 1);
    setenv("CDL_STORE_HELLO_TIMEOUT", "-3", 1);
    assert_int_equal(cdl_dist_config_from_env(&c), -1);
    assert_non_null(strstr(cdl_last_error(), "CDL_STORE_HELLO_TIMEOUT"));
    unsetenv("CDL_TIMEOUT");
    unsetenv("CDL_SHM_SLAB_KB");
    unsetenv("CDL_SHM_SPIN_US");
    unsetenv("CDL_STORE_HELLO_TIMEOUT");
    assert_int_equal(cdl_dist_config_from_env(&c), 0);
    assert_true(c.timeout_s == 0 && c.shm_spin_us == -1 && c.store_hello_s == 0);
    assert_int_equal(c.shm_slab_kb, 0);

    cdl_rank_info info = {.rank = 0, .world = 1, .local_world = 1, .nnodes = 1,
                          .replicas_per_gpu = 1, .source = "single"};
    c.size = 0;
    assert_null(cdl_dist_create_with(&info, "single", NULL, &c));
    assert_non_null(strstr(cdl_last_error(), "cdl_dist_config_init"));
    cdl_dist_config_init(&c);
    c.timeout_s = -1;
    assert_null(cdl_dist_create_with(&info, "single", NULL, &c));
    assert_non_null(strstr(cdl_last_error(), "timeout"));
    c.timeout_s = 0;
    cdl_dist *d = cdl_dist_create_with(&info, "single", NULL, &c);
    assert_non_null(d);
    assert_string_equal(cdl_dist_backend_name(d), "single");
    cdl_dist_destroy(d);
}

/* CPUs first..first+n-1 into m. */
static void cpus_from(cpu_set_t *m, int first, int n)
{
    CPU_ZERO(m);
    for (int c = first; c < first + n; c++)
        CPU_SET(c, m);
}

/* The shm collectives' spinning decision. It used to compare the members'
 * count with the node's online CPUs alone, so 4 ranks of 4 threads sharing
 * one 4-CPU mask, or a 2-CPU container, on a 64-core node spun for 1 ms
 * on CPUs the other ranks' threads needed. */
static void test_shm_oversubscribed(void **state)
{
    (void)state;
    cpu_set_t m[4];
    /* Masks unknown: this rank's count, the node's, the quota. */
    assert_false(shm_oversubscribed(4, 0, NULL, 1, 64, 64, 0));   /* a CPU each */
    assert_false(shm_oversubscribed(4, 0, NULL, 16, 64, 64, 0));  /* cdlrun's share */
    assert_true(shm_oversubscribed(4, 0, NULL, 32, 64, 64, 0));   /* --threads 32 x 4 */
    assert_false(shm_oversubscribed(4, 0, NULL, 4, 4, 64, 0));    /* bound, 4 CPUs each */
    assert_true(shm_oversubscribed(4, 0, NULL, 8, 4, 64, 0));     /* bound, 8 threads on 4 */
    assert_true(shm_oversubscribed(4, 0, NULL, 1, 64, 64, 2));    /* docker --cpus 2 */
    assert_true(shm_oversubscribed(2, 0, NULL, 1, 64, 64, 1.5));
    assert_false(shm_oversubscribed(2, 0, NULL, 1, 64, 64, 2));
    assert_true(shm_oversubscribed(8, 0, NULL, 1, 4, 4, 0));      /* 8 ranks, 4 CPUs */
    assert_false(shm_oversubscribed(1, 0, NULL, 0, 0, 0, 0));     /* nothing known: 1 on 1 */
    /* Known masks: all four in one 4-CPU mask of a 64-core node (srun
     * without binding in a 4-CPU allocation)... */
    for (int j = 0; j < 4; j++)
        cpus_from(&m[j], 0, 4);
    assert_false(shm_oversubscribed(4, 0, m, 1, 4, 64, 0));
    assert_true(shm_oversubscribed(4, 0, m, 2, 4, 64, 0));
    assert_true(shm_oversubscribed(4, 2, m, 4, 4, 64, 0));
    /* ...each its own 4 CPUs... */
    for (int j = 0; j < 4; j++)
        cpus_from(&m[j], 4 * j, 4);
    assert_false(shm_oversubscribed(4, 0, m, 4, 4, 64, 0));
    assert_true(shm_oversubscribed(4, 3, m, 5, 4, 64, 0));
    /* ...or 0 and 1 sharing CPUs 0-3, 2 and 3 with 8 of their own: only
     * the first two meet. */
    cpus_from(&m[1], 0, 4);
    cpus_from(&m[2], 8, 8);
    cpus_from(&m[3], 16, 8);
    assert_true(shm_oversubscribed(4, 0, m, 4, 4, 64, 0));
    assert_true(shm_oversubscribed(4, 1, m, 4, 4, 64, 0));
    assert_false(shm_oversubscribed(4, 2, m, 4, 8, 64, 0));
    assert_false(shm_oversubscribed(4, 3, m, 8, 8, 64, 0));
    assert_true(shm_oversubscribed(4, 3, m, 8, 8, 64, 16));      /* 32 threads, 16 CPUs' quota */
}

int main(void)
{
    clear_launcher_env();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_shm_oversubscribed),
        cmocka_unit_test(test_allreduce_shm),
        cmocka_unit_test(test_allreduce_shm_small_slabs),
        cmocka_unit_test(test_auto_one_node_is_shm),
        cmocka_unit_test(test_allreduce_hier_two_nodes),
        cmocka_unit_test(test_broadcast_barrier_allgather),
        cmocka_unit_test(test_mixed_sequence),
        cmocka_unit_test(test_segment_unlinked),
        cmocka_unit_test(test_killed_rank_shm),
        cmocka_unit_test(test_rank_dies_before_attaching),
        cmocka_unit_test(test_killed_rank_hier),
        cmocka_unit_test(test_missing_rank_times_out),
        cmocka_unit_test(test_own_error_not_lost),
        cmocka_unit_test(test_watchdog_ends_stuck_wait),
        cmocka_unit_test(test_watchdog_sees_stop),
        cmocka_unit_test(test_late_member_cannot_open),
        cmocka_unit_test(test_stop_leaves_attach),
        cmocka_unit_test(test_late_rank_names_who_gave_up),
        cmocka_unit_test(test_duplicate_local_rank),
        cmocka_unit_test(test_refused_backends),
        cmocka_unit_test(test_dist_config),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
