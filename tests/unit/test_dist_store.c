/* The TCP store: strangers rejected, a taken port reported, every wait
 * bounded with the missing or lost ranks named. One forked process per rank. */
#include "testutil.h"
#include "dist_fork.h"

#include <string.h>

#include <cdl/cdl.h>

#include "lib/dist/store.h"

static store *open_store(double timeout, cdl_rank_info *info)
{
    if (cdl_rank_discover(info))
        return NULL;
    return store_open(info, timeout);
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
        store_token(&info, token, sizeof token);
        CHILD_CHECK(store_probe("127.0.0.1", info.master_port, "not-the-token", 1, 2, 10) == -1,
                    "a wrong token was accepted");
        CHILD_CHECK(strstr(cdl_last_error(), "wrong token"), "error '%s'", cdl_last_error());
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
        store_token(&info, token, sizeof token);
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

/* A token from CDL_STORE_TOKEN (what cdlrun exports) wins over the job id. */
static void test_token_from_env(void **state)
{
    (void)state;
    cdl_rank_info info = {.world = 2, .master_port = 1};
    snprintf(info.job_id, sizeof info.job_id, "job");
    char a[300], b[300];
    unsetenv("CDL_STORE_TOKEN");
    store_token(&info, a, sizeof a);
    snprintf(info.job_id, sizeof info.job_id, "other-job");
    store_token(&info, b, sizeof b);
    assert_string_not_equal(a, b);
    setenv("CDL_STORE_TOKEN", "s3cret", 1);
    store_token(&info, a, sizeof a);
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
    return 0;
}

static void test_port_in_use(void **state)
{
    (void)state;
    int port, fd = listen_any(&port);
    assert_true(fd >= 0);
    int start[1] = {0}, status[1];
    run_opts o = {guard_s(30), 1, port};
    assert_int_equal(run_ranks(2, start, 1, port_taken_rank, &port, &o, status), 0);
    close(fd);
    assert_int_equal(expect_children_ok(1, status), 0);
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

/* Rank 2 dies without saying goodbye: waits fail at once, naming it. */
static int lost_rank(int rank, int world, void *arg)
{
    (void)world;
    (void)arg;
    cdl_rank_info info;
    store *s = open_store(300, &info);
    CHILD_CHECK(s, "%s", cdl_last_error());
    CHILD_CHECK(store_barrier(s, "all-here") == 0, "%s", cdl_last_error());
    if (rank == 2)
        raise(SIGKILL);
    CHILD_CHECK(store_barrier(s, "after") == -1, "barrier passed without rank 2");
    CHILD_CHECK(strstr(cdl_last_error(), "rank 2 lost its connection"), "error '%s'",
                cdl_last_error());
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

int main(void)
{
    clear_launcher_env();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stranger_rejected),
        cmocka_unit_test(test_token_from_env),
        cmocka_unit_test(test_port_in_use),
        cmocka_unit_test(test_missing_rank_named),
        cmocka_unit_test(test_rank0_absent),
        cmocka_unit_test(test_lost_rank_named),
        cmocka_unit_test(test_readers_drop_value),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
